//! RocketMQ 5's metric names on corvus's `/metrics`, so a Grafana board or alert made for
//! RocketMQ shows corvus's figures, and the figures are the ones `consumer-progress` shows:
//!
//! - a two-core broker: a pull group that committed part of one queue and past the end of
//!   the other, and a POP group (RocketMQ's remoting POP_MESSAGE and ACK_MESSAGE) with
//!   messages in flight; `rocketmq_consumer_lag_messages` summed over the cores (`node_id`)
//!   is `consumer-progress`'s total backlog, never negative, the POP group's in flight and
//!   ready are what it was handed and not, the in and out counters count the sends and the
//!   pops, the dead letter sent back is counted, every series with RocketMQ's labels;
//! - a real Prometheus (`prometheus`, Debian's package) scrapes the broker every second, and
//!   a PromQL query per metric over its HTTP API returns the same figures. Where the binary
//!   is missing the test says so and skips; `.ci/run` installs it and sets
//!   `CORVUS_REQUIRE_PROMETHEUS`, which makes a missing binary a failure.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use client::{Message, PullConsumer, QueueOffset};
use integration::metrics::{self, scrape, sum};
use integration::{create_topic, mqadmin, producer, remoting_call, wait_for, Cluster};
use remoting::body::{from_json, TopicRouteData};
use remoting::codes::{request, response};
use remoting::RemotingCommand;

const LAGGED: &str = "Lagged";
const PULL_GROUP: &str = "LagGroup";
const POPPED: &str = "Popped";
const POP_GROUP: &str = "PopLagGroup";
const SENT_LAGGED: u64 = 30;
const SENT_POPPED: u64 = 12;
const POPPED_OUT: usize = 5;
const ACKED: usize = 2;

fn call(addr: &str, code: i32, fields: &[(&str, String)]) -> remoting::Frame {
    let mut cmd = RemotingCommand::request(code, 7);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), v.clone());
    }
    remoting_call(addr, &cmd, b"")
}

/// The core holding `topic`'s only queue: its RocketMQ broker name and address.
fn queue_core(ns: &str, topic: &str) -> (String, String) {
    let f = call(
        ns,
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", topic.into())],
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let r: TopicRouteData = from_json(&f.body).unwrap();
    let name = r
        .queue_datas
        .iter()
        .find(|q| q.read_queue_nums > 0)
        .map(|q| q.broker_name.clone())
        .unwrap();
    let addr = r
        .broker_datas
        .iter()
        .find(|b| b.broker_name == name)
        .and_then(|b| b.broker_addrs.get(&0).cloned())
        .unwrap();
    (name, addr)
}

/// Pops `POPPED_OUT` messages of `POPPED` for `POP_GROUP` (hidden for a minute), acks the
/// first `ACKED` of them and sends the next to the dead letters, as a RocketMQ 5 remoting
/// client does.
fn pop_and_ack_some(ns: &str) {
    let (broker, addr) = queue_core(ns, POPPED);
    let f = call(
        &addr,
        request::POP_MESSAGE,
        &[
            ("consumerGroup", POP_GROUP.into()),
            ("topic", POPPED.into()),
            ("queueId", "0".into()),
            ("maxMsgNums", POPPED_OUT.to_string()),
            ("invisibleTime", "60000".into()),
            ("pollTime", "1000".into()),
            ("bornTime", "0".into()),
            ("initMode", "0".into()),
            ("expType", "TAG".into()),
            ("exp", "*".into()),
            ("order", "false".into()),
            ("bname", broker.clone()),
        ],
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let h = &f.command.ext_fields;
    let messages = remoting::message::decode_stored(&f.body).unwrap();
    assert_eq!(messages.len(), POPPED_OUT);
    let ck = h["startOffsetInfo"].split(' ').nth(2).unwrap().to_owned();
    for m in messages.iter().take(ACKED) {
        let handle = format!(
            "{ck} {} {} {} 0 {broker} {} {}",
            &h["popTime"], &h["invisibleTime"], &h["reviveQid"], m.queue_id, m.queue_offset
        );
        let a = call(
            &addr,
            request::ACK_MESSAGE,
            &[
                ("consumerGroup", POP_GROUP.into()),
                ("topic", POPPED.into()),
                ("queueId", m.queue_id.to_string()),
                ("offset", m.queue_offset.to_string()),
                ("extraInfo", handle),
                ("bname", broker.clone()),
            ],
        );
        assert_eq!(a.command.code, response::SUCCESS, "{:?}", a.command.remark);
    }
    // The next one the consumer gives up on: straight to the dead letters (delay level -1),
    // as RocketMQ's client sends it back. It stays in flight until acked.
    let given_up = &messages[ACKED];
    let b = call(
        &addr,
        request::CONSUMER_SEND_MSG_BACK,
        &[
            ("offset", given_up.physical_offset.to_string()),
            ("group", POP_GROUP.into()),
            ("delayLevel", "-1".into()),
            ("originTopic", POPPED.into()),
            ("maxReconsumeTimes", "16".into()),
        ],
    );
    assert_eq!(b.command.code, response::SUCCESS, "{:?}", b.command.remark);
}

/// `consumer-progress`'s total backlog of `group` on `topic`.
fn progress_backlog(ns: &str, group: &str, topic: &str) -> u64 {
    let out = mqadmin(
        ns,
        &["--json", "consumer-progress", "-g", group, "-t", topic],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let totals: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    totals["total_backlog"].as_u64().unwrap()
}

/// A two-core broker serving metrics, with the scene the module doc describes; the
/// cluster, the metrics address (`host:port`) and the NameServer's.
fn scene() -> (Cluster, String, String) {
    let (c, metrics) = Cluster::start_metered(2);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, LAGGED, 2);
    create_topic(&ns, POPPED, 1);
    let p = producer(&ns);
    for i in 0..SENT_LAGGED {
        p.send(Message::new(LAGGED, format!("lag-{i}").into_bytes()))
            .unwrap();
    }
    for i in 0..SENT_POPPED {
        p.send(Message::new(POPPED, format!("pop-{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, PULL_GROUP).unwrap();
    let mut queues = consumer.queues(LAGGED).unwrap();
    queues.sort_by_key(|q| q.queue_id);
    // Part of one queue consumed; the other committed past its end (taken as its end).
    consumer.commit_offset(&queues[0], QueueOffset(4)).unwrap();
    consumer
        .commit_offset(&queues[1], QueueOffset(1_000))
        .unwrap();
    pop_and_ack_some(&ns);
    (c, metrics, ns)
}

/// A series checked: its name, the labels that pick it, the figure summed over the rest.
type Figure = (&'static str, Vec<(&'static str, &'static str)>, f64);

/// What the scene leaves, as `consumer-progress` and the clients count it.
fn expected(ns: &str) -> Vec<Figure> {
    let pull_lag = progress_backlog(ns, PULL_GROUP, LAGGED);
    let pop_lag = progress_backlog(ns, POP_GROUP, POPPED);
    // The committed queue lags by what is left after offset 4; the other by nothing.
    assert!(pull_lag > 0 && pull_lag < SENT_LAGGED, "{pull_lag}");
    assert_eq!(pop_lag, SENT_POPPED - ACKED as u64);
    let pull = vec![("consumer_group", PULL_GROUP), ("topic", LAGGED)];
    let pop = vec![("consumer_group", POP_GROUP), ("topic", POPPED)];
    let in_flight = (POPPED_OUT - ACKED) as f64;
    vec![
        (
            "rocketmq_consumer_lag_messages",
            pull.clone(),
            pull_lag as f64,
        ),
        (
            "rocketmq_consumer_ready_messages",
            pull.clone(),
            pull_lag as f64,
        ),
        ("rocketmq_consumer_inflight_messages", pull, 0.0),
        (
            "rocketmq_consumer_lag_messages",
            pop.clone(),
            pop_lag as f64,
        ),
        (
            "rocketmq_consumer_inflight_messages",
            pop.clone(),
            in_flight,
        ),
        (
            "rocketmq_consumer_ready_messages",
            pop.clone(),
            (SENT_POPPED - POPPED_OUT as u64) as f64,
        ),
        (
            "rocketmq_messages_in_total",
            vec![("topic", LAGGED), ("message_type", "normal")],
            SENT_LAGGED as f64,
        ),
        (
            "rocketmq_message_size_count",
            vec![("topic", LAGGED)],
            SENT_LAGGED as f64,
        ),
        ("rocketmq_messages_out_total", pop, POPPED_OUT as f64),
        (
            "rocketmq_send_to_dlq_messages_total",
            vec![("consumer_group", POP_GROUP), ("topic", POPPED)],
            1.0,
        ),
        // The sends, and the dead letter's.
        (
            "rocketmq_rpc_latency_milliseconds_count",
            vec![("request_code", "send_message")],
            (SENT_LAGGED + SENT_POPPED + 1) as f64,
        ),
    ]
}

/// The series are there under RocketMQ's names and labels, with `consumer-progress`'s
/// figures, summed over the cores.
#[test]
fn rocketmq_series_carry_the_exact_lag_and_pop_in_flight() {
    let (c, metrics, ns) = scene();
    let want = expected(&ns);
    // Gauges and counters are published once a second.
    let s = wait_for(Duration::from_secs(15), || {
        let s = scrape(&metrics);
        want.iter()
            .all(|(name, labels, v)| sum(&s, name, labels) == Some(*v))
            .then_some(s)
    });
    let s = s.unwrap_or_else(|| {
        let s = scrape(&metrics);
        let got: Vec<_> = want
            .iter()
            .map(|(name, labels, v)| (name, labels, v, sum(&s, name, labels)))
            .collect();
        panic!("figures (name, labels, expected, scraped): {got:#?}")
    });
    // RocketMQ's node labels: the cluster, and each core as the broker RocketMQ sees.
    let lag: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == "rocketmq_consumer_lag_messages")
        .collect();
    assert!(!lag.is_empty());
    for x in &lag {
        assert_eq!(x.labels.get("cluster"), Some("DefaultCluster"), "{x:?}");
        assert_eq!(x.labels.get("node_type"), Some("broker"), "{x:?}");
        let node = x.labels.get("node_id").unwrap();
        assert!(node.contains("-c"), "{x:?}");
        assert_eq!(x.labels.get("is_retry"), Some("false"), "{x:?}");
        assert_eq!(x.labels.get("is_system"), Some("false"), "{x:?}");
        match &x.value {
            prometheus_parse::Value::Gauge(v) => assert!(*v >= 0.0, "{x:?}"),
            v => panic!("a gauge: {v:?}"),
        }
    }
    // Each core is a node of its own, read and write (RocketMQ's permission 6).
    let permissions: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == "rocketmq_broker_permission")
        .map(|x| {
            (
                x.labels.get("node_id").unwrap().to_owned(),
                format!("{:?}", x.value),
            )
        })
        .collect();
    assert_eq!(permissions.len(), 2, "{permissions:?}");
    assert!(
        permissions.iter().all(|(_, v)| v == "Gauge(6.0)"),
        "{permissions:?}"
    );
    // The data directory's filesystem has something on it (the broker's own files).
    let storage = sum(
        &s,
        "rocketmq_storage_size_bytes",
        &[("storage_type", "local")],
    );
    assert!(storage.is_some_and(|b| b > 0.0), "{storage:?}");
    // The oldest unconsumed message of each lagging group is older than nothing.
    for group in [PULL_GROUP, POP_GROUP] {
        let age = wait_for(Duration::from_secs(10), || {
            let s = scrape(&metrics);
            sum(
                &s,
                "rocketmq_consumer_lag_latency_milliseconds",
                &[("consumer_group", group)],
            )
            .filter(|v| *v > 0.0)
        });
        assert!(age.is_some(), "{group}'s lag latency");
    }
    // Everything consumed: the lag and its latency fall to 0, and stay there.
    let consumer = PullConsumer::new(&ns, PULL_GROUP).unwrap();
    for q in consumer.queues(LAGGED).unwrap() {
        consumer.commit_offset(&q, QueueOffset(1_000)).unwrap();
    }
    assert_eq!(progress_backlog(&ns, PULL_GROUP, LAGGED), 0);
    let done = wait_for(Duration::from_secs(10), || {
        let s = scrape(&metrics);
        let labels = [("consumer_group", PULL_GROUP)];
        (sum(&s, "rocketmq_consumer_lag_messages", &labels) == Some(0.0)
            && sum(&s, "rocketmq_consumer_lag_latency_milliseconds", &labels) == Some(0.0))
        .then_some(())
    });
    assert!(done.is_some(), "the lag falls to 0");
    drop(c);
}

/// A running Prometheus, stopped and its data removed on drop.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `binary` on a free loopback port, scraping `target` every second, its data
    /// and log under `dir`; waits (bounded) until it is ready.
    fn start(binary: &Path, target: &str, dir: &Path) -> Prometheus {
        let port = integration::free_ports(1)[0];
        let addr = format!("127.0.0.1:{port}");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: corvus\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let p = Prometheus { child, addr };
        let ready = wait_for(Duration::from_secs(30), || {
            TcpStream::connect(&p.addr)
                .ok()
                .and_then(|_| (metrics::get(&p.addr, "/-/ready", "").0 == 200).then_some(()))
        });
        assert!(
            ready.is_some(),
            "prometheus did not start: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        p
    }

    /// The value of a PromQL query that yields one sample; `None` for no sample.
    fn query(&self, promql: &str) -> Option<f64> {
        let encoded: String = promql
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (code, body) = metrics::get(&self.addr, &format!("/api/v1/query?query={encoded}"), "");
        assert_eq!(code, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{promql}: {body}");
        let result = v["data"]["result"].as_array()?;
        let sample = result.first()?;
        sample["value"][1].as_str()?.parse().ok()
    }
}

/// The `prometheus` binary: `PROMETHEUS_BIN`, else `prometheus` on the PATH.
fn prometheus_binary() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("PROMETHEUS_BIN") {
        let p = std::path::PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("prometheus"))
            .find(|p| p.is_file())
    })
}

/// A real Prometheus scrapes the RocketMQ-named series, and a query per metric over its
/// HTTP API gives `consumer-progress`'s figures and the clients' counts.
#[test]
fn a_real_prometheus_reads_consumer_progress_figures_from_the_rocketmq_series() {
    let Some(binary) = integration::or_skip(
        prometheus_binary(),
        "CORVUS_REQUIRE_PROMETHEUS",
        "no `prometheus` binary (apt-get install prometheus, or set PROMETHEUS_BIN)",
    ) else {
        return;
    };
    let (c, metrics, ns) = scene();
    let want = expected(&ns);
    let dir = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(&binary, &metrics, dir.path());
    let promql = |name: &str, labels: &[(&str, &str)]| {
        let matchers: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("sum({name}{{{}}})", matchers.join(","))
    };
    let agreed = wait_for(Duration::from_secs(20), || {
        want.iter()
            .all(|(name, labels, v)| prom.query(&promql(name, labels)) == Some(*v))
            .then_some(())
    });
    if agreed.is_none() {
        let got: Vec<_> = want
            .iter()
            .map(|(name, labels, v)| {
                let q = promql(name, labels);
                let answer = prom.query(&q);
                (q, v, answer)
            })
            .collect();
        panic!("(query, expected, Prometheus's answer): {got:#?}");
    }
    // Prometheus took the samples from the broker's scrape, under the broker's labels.
    let up = prom.query("up{job=\"corvus\"}");
    assert_eq!(up, Some(1.0));
    let nodes = prom.query(
        "count(count by (node_id) (rocketmq_consumer_lag_messages{cluster=\"DefaultCluster\",node_type=\"broker\"}))",
    );
    assert!(nodes.is_some_and(|n| n >= 1.0), "{nodes:?}");
    // A negative lag would be a sample below 0.
    assert_eq!(
        prom.query("count(rocketmq_consumer_lag_messages < 0)"),
        None
    );
    drop(prom);
    drop(c);
}
