//! What rocketmq-exporter and rocketmq-dashboard read of a broker, asked over remoting as
//! they ask it: VIEW_BROKER_STATS_DATA (315) for the per-topic, per-group and broker stats
//! (each core answers for what it counted, as the broker it stands for; the tools add the
//! brokers up), with RocketMQ's answer for a stat never counted, and GET_BROKER_RUNTIME_INFO
//! with every key the exporter parses, holding the figures of the sends and pulls made, and
//! GET_TOPIC_STATS_INFO of every topic the NameServer lists, TBW102 included.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use client::{Message, PullConsumer};
use integration::metrics::{self, sum};
use integration::{core_addrs, create_topic, drain_topic, mqadmin_json, producer, Cluster};
use remoting::codes::{request, response};
use remoting::{Decoded, RemotingCommand, RemotingDecoder};

const TOPIC: &str = "StatsTopic";
const GROUP: &str = "StatsGroup";
const SENT: u64 = 40;

fn call(addr: &str, cmd: &RemotingCommand) -> remoting::Frame {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(&remoting::encode(cmd, b"").unwrap())
        .unwrap();
    let mut decoder = RemotingDecoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            return f;
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "{addr} closed the connection without an answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// VIEW_BROKER_STATS_DATA of one core: its answer code, remark and body.
fn stats(addr: &str, name: &str, key: &str) -> (i32, Option<String>, serde_json::Value) {
    let mut cmd = RemotingCommand::request(request::VIEW_BROKER_STATS_DATA, 7);
    cmd.ext_fields.insert("statsName".into(), name.into());
    cmd.ext_fields.insert("statsKey".into(), key.into());
    let f = call(addr, &cmd);
    let body = if f.body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&f.body).unwrap()
    };
    (f.command.code, f.command.remark.clone(), body)
}

/// A stat's minute-window sum over every core that counted it.
fn minute_sum(addrs: &[String], name: &str, key: &str) -> u64 {
    let mut sum = 0;
    for a in addrs {
        let (code, _, body) = stats(a, name, key);
        if code == response::SUCCESS {
            for w in ["statsMinute", "statsHour", "statsDay"] {
                assert!(body[w]["tps"].as_f64().is_some(), "{name} {key}: {body}");
                assert!(body[w]["avgpt"].as_f64().is_some(), "{name} {key}: {body}");
            }
            sum += body["statsMinute"]["sum"].as_u64().unwrap();
        }
    }
    sum
}

fn runtime_info(addr: &str) -> BTreeMap<String, String> {
    let cmd = RemotingCommand::request(request::GET_BROKER_RUNTIME_INFO, 9);
    let f = call(addr, &cmd);
    assert_eq!(f.command.code, response::SUCCESS);
    let v: serde_json::Value = serde_json::from_slice(&f.body).unwrap();
    serde_json::from_value(v["table"].clone()).unwrap()
}

/// The keys rocketmq-exporter's `BrokerRuntimeStats` parses as numbers (a missing one fails
/// its whole scrape of the broker).
const NUMERIC_KEYS: [&str; 34] = [
    "msgPutTotalTodayNow",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "msgGetTotalTodayNow",
    "queryThreadPoolQueueSize",
    "bootTimestamp",
    "msgPutTotalYesterdayMorning",
    "msgGetTotalYesterdayMorning",
    "pullThreadPoolQueueSize",
    "commitLogMinOffset",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "dispatchMaxBuffer",
    "brokerVersion",
    "consumeQueueDiskRatio",
    "pageCacheLockTimeMills",
    "commitLogDiskRatio",
    "commitLogMaxOffset",
    "getMessageEntireTimeMax",
    "msgPutTotalTodayMorning",
    "putMessageTimesTotal",
    "msgGetTotalTodayMorning",
    "sendThreadPoolQueueSize",
    "startAcceptSendRequestTimeStamp",
    "putMessageEntireTimeMax",
    "earliestMessageTimeStamp",
    "remainTransientStoreBufferNumbs",
    "queryThreadPoolQueueCapacity",
    "putMessageAverageSize",
    "dispatchBehindBytes",
    "putMessageSizeTotal",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity",
    "commitLogMinOffset",
    "putMessageTimesTotal",
];

/// The exporter's reading of `commitLogDirCapacity` ("Total : 9.8 GiB, Free : 1.2 GiB."):
/// (total, free) in bytes.
fn dir_capacity(text: &str) -> (f64, f64) {
    let arr: Vec<&str> = text.split(' ').collect();
    let bytes = |n: &str, unit: &str| {
        let base: f64 = n.parse().unwrap();
        if unit == "B" {
            return base;
        }
        let exp = "KMGTPE".find(&unit[..1]).unwrap() as i32 + 1;
        base * 1024f64.powi(exp)
    };
    let total_unit = arr[3].trim_end_matches(',');
    let free_unit = arr[7].trim_end_matches('.');
    (bytes(arr[2], total_unit), bytes(arr[6], free_unit))
}

#[test]
fn broker_stats_and_runtime_info_carry_what_the_exporter_reads() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TOPIC, 8);
    let p = producer(&ns);
    for i in 0..SENT {
        p.send(Message::new(TOPIC, format!("stats-{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, GROUP).unwrap();
    let got = drain_topic(&consumer, TOPIC, Duration::from_secs(30));
    assert_eq!(got.len() as u64, SENT);
    let addrs = core_addrs(&ns);
    assert_eq!(addrs.len(), 2, "{addrs:?}");

    // The stats the exporter asks for, added up over the brokers (cores) as it does.
    assert_eq!(minute_sum(&addrs, "TOPIC_PUT_NUMS", TOPIC), SENT);
    assert!(minute_sum(&addrs, "TOPIC_PUT_SIZE", TOPIC) > SENT * 8);
    let key = format!("{TOPIC}@{GROUP}");
    assert_eq!(minute_sum(&addrs, "GROUP_GET_NUMS", &key), SENT);
    assert!(minute_sum(&addrs, "GROUP_GET_SIZE", &key) > SENT * 8);
    assert_eq!(
        minute_sum(&addrs, "BROKER_PUT_NUMS", "DefaultCluster"),
        SENT
    );
    assert_eq!(
        minute_sum(&addrs, "BROKER_GET_NUMS", "DefaultCluster"),
        SENT
    );
    // A stat never counted: RocketMQ's broker's answer, which the exporter skips quietly.
    let (code, remark, _) = stats(&addrs[0], "TOPIC_PUT_NUMS", "NoSuchTopic");
    assert_eq!(code, response::SYSTEM_ERROR);
    assert_eq!(
        remark.as_deref(),
        Some("The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist")
    );
    let (code, _, _) = stats(&addrs[0], "SNDBCK_PUT_NUMS", &key);
    assert_eq!(code, response::SYSTEM_ERROR, "nothing was sent back");

    // Runtime info: every key the exporter parses, with the figures of what was done.
    let (mut put, mut got_total, mut max_offset, mut put_tps) = (0u64, 0u64, 0u64, 0.0);
    for a in &addrs {
        let t = runtime_info(a);
        for k in NUMERIC_KEYS {
            let v = t.get(k).unwrap_or_else(|| panic!("{a}: no {k} in {t:?}"));
            assert!(v.parse::<f64>().is_ok(), "{a}: {k} = {v:?}");
        }
        for k in [
            "putTps",
            "getMissTps",
            "getTransferredTps",
            "getTotalTps",
            "getFoundTps",
        ] {
            let v = &t[k];
            let rates: Vec<f64> = v.split(' ').map(|x| x.parse().unwrap()).collect();
            assert_eq!(rates.len(), 3, "{k} = {v:?}");
        }
        put_tps += t["putTps"]
            .split(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap();
        // "[<=0ms]:N [0~10ms]:N …", every part a name and a count.
        let dist = &t["putMessageDistributeTime"];
        assert_eq!(dist.split(' ').count(), 13, "{dist}");
        for part in dist.split(' ') {
            let (_, n) = part.split_once(':').unwrap();
            n.parse::<u64>().unwrap();
        }
        let (total, free) = dir_capacity(&t["commitLogDirCapacity"]);
        assert!(total > 0.0 && free > 0.0 && free <= total, "{t:?}");
        let ratio: f64 = t["commitLogDiskRatio"].parse().unwrap();
        assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
        put += t["msgPutTotalTodayNow"].parse::<u64>().unwrap();
        got_total += t["msgGetTotalTodayNow"].parse::<u64>().unwrap();
        max_offset += t["commitLogMaxOffset"].parse::<u64>().unwrap();
        assert!(t["remainHowManyDataToFlush"].ends_with('B'), "{t:?}");
    }
    assert_eq!(put, SENT);
    assert_eq!(got_total, SENT);
    // The written offset: the bytes of the 40 records, not a segment's size.
    let stored = minute_sum(&addrs, "TOPIC_PUT_SIZE", TOPIC);
    assert!(
        max_offset >= stored && max_offset < stored + 64 * 1024,
        "commitLogMaxOffset {max_offset}, stored {stored}"
    );
    // Sent within the last seconds: the 10 s rate is above zero.
    assert!(put_tps > 0.0, "putTps {put_tps}");
}

#[test]
fn metrics_carry_per_topic_and_per_group_series() {
    let (c, url) = Cluster::start_metered(2);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TOPIC, 4);
    let p = producer(&ns);
    for i in 0..SENT {
        p.send(Message::new(TOPIC, format!("metric-{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, GROUP).unwrap();
    assert_eq!(
        drain_topic(&consumer, TOPIC, Duration::from_secs(30)).len() as u64,
        SENT
    );
    // Published once a second: wait for both families to reach the counts.
    let topic = [("topic", TOPIC)];
    let group = [("topic", TOPIC), ("group", GROUP)];
    let (text, s) = integration::wait_for(Duration::from_secs(10), || {
        let text = metrics::text(&url);
        let s = metrics::parse(&text);
        let put = sum(&s, "corvus_topic_put_messages_total", &topic);
        let got = sum(&s, "corvus_group_get_messages_total", &group);
        (put == Some(SENT as f64) && got == Some(SENT as f64)).then_some((text, s))
    })
    .unwrap_or_else(|| {
        let text = metrics::text(&url);
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("corvus_topic_") || l.contains("corvus_group_get"))
            .collect();
        panic!(
            "the per-topic and per-group counters do not reach {SENT}: {ours:#?} in {} bytes: {}",
            text.len(),
            &text[text.len().saturating_sub(100)..],
        )
    });
    assert!(sum(&s, "corvus_topic_put_bytes_total", &topic).unwrap() > SENT as f64 * 8.0);
    assert!(sum(&s, "corvus_group_get_bytes_total", &group).unwrap() > SENT as f64 * 8.0);
    for family in [
        "corvus_topic_put_messages_total",
        "corvus_topic_put_bytes_total",
        "corvus_group_get_messages_total",
        "corvus_group_get_bytes_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} "))
                && text.contains(&format!("# TYPE {family} counter")),
            "{family} has its HELP and TYPE"
        );
    }
    // promtool, where installed, has nothing to say of these families (the page is served
    // in Prometheus's text format to a scraper that does not ask for OpenMetrics).
    if let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        for line in said.lines() {
            assert!(
                !line.contains("corvus_topic_") && !line.contains("corvus_group_get_"),
                "promtool: {line}"
            );
        }
    }
}

/// GET_TOPIC_STATS_INFO (303) of one core: its answer code and body.
fn topic_stats(addr: &str, topic: &str) -> (i32, String) {
    let mut cmd = RemotingCommand::request(request::GET_TOPIC_STATS_INFO, 11);
    cmd.ext_fields.insert("topic".into(), topic.into());
    let f = call(addr, &cmd);
    (
        f.command.code,
        String::from_utf8_lossy(&f.body).into_owned(),
    )
}

/// The exporter asks every topic of the NameServer's list for its stats, TBW102 among them
/// while auto-creation is on (the brokers register it). RocketMQ's brokers hold TBW102 as a
/// topic then and answer its queues, empty; so does every core, for its queues of the route.
/// With auto-creation off it is neither listed nor answered.
#[test]
fn topic_stats_answer_for_the_auto_creation_topic_as_long_as_it_is_registered() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let listed = integration::wait_for(Duration::from_secs(10), || {
        let listed = mqadmin_json(&ns, &["topic-list"]).to_string();
        listed.contains("\"TBW102\"").then_some(listed)
    });
    assert!(
        listed.is_some(),
        "the NameServer does not list TBW102: {}",
        mqadmin_json(&ns, &["topic-list"])
    );
    let addrs = core_addrs(&ns);
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    for a in &addrs {
        let (code, body) = topic_stats(a, "TBW102");
        assert_eq!(code, response::SUCCESS, "{a}: {body}");
        assert!(body.contains("\"topic\":\"TBW102\""), "{a}: {body}");
    }
    // As the exporter reads it (route, then every master): the default 4 queues, all empty.
    let status = mqadmin_json(&ns, &["topic-status", "-t", "TBW102"]);
    let queues = status["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 4, "{status}");
    for q in queues {
        assert_eq!(q["min_offset"], 0, "{status}");
        assert_eq!(q["max_offset"], 0, "{status}");
        assert_eq!(q["last_update_ms"], 0, "{status}");
    }
    drop(c);

    let off = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("auto_create_topic_enable = false\n".into());
    });
    let addrs = core_addrs(&off.namesrv.addr);
    let (code, body) = topic_stats(&addrs[0], "TBW102");
    assert_eq!(code, response::TOPIC_NOT_EXIST, "{body}");
}
