//! What rocketmq-dashboard reads of a group's consumer progress, asked over remoting as it
//! asks it: GET_CONSUME_STATS (208) of each core, the brokers its consumer page lists for
//! the group. Each core answers for its own queues only, under its own broker name, so the
//! page shows each queue once (a table per core under the topic), and the backlog adds up;
//! its consumeTps is RocketMQ's, the messages the core handed the group per second over the
//! broker stats' minute window (what VIEW_BROKER_STATS_DATA's GROUP_GET_NUMS says), not a
//! rate that stays after the group stops reading. GET_TOPIC_STATS_INFO (the topic status
//! page) gives each queue's last update as its last message's store time. The message
//! page's track finds the group's row for a message by its store host, which with fixed
//! direct ports is the address of its queue's broker.
//! (tests/rocketmq-dashboard-pages.sh runs the dashboard itself against corvus.)

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use client::{Message, PullConsumer};
use integration::{
    consecutive_free_ports, core_addrs, create_topic, drain_topic, producer, remoting_call, Cluster,
};
use remoting::body::{from_json, ClusterInfo};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::message::{decode_offset_msg_id, decode_stored, StoredMessage};
use remoting::RemotingCommand;

const TOPIC: &str = "DashTopic";
const GROUP: &str = "DashGroup";
const QUEUES: u32 = 8;
const READ: u64 = 40;
const BACKLOG: u64 = 12;

/// One queue's row of a ConsumeStats answer.
#[derive(Debug)]
struct Row {
    broker: String,
    topic: String,
    queue_id: u64,
    broker_offset: u64,
    consumer_offset: u64,
}

/// The entries of a table keyed by MessageQueue objects, as fastjson writes RocketMQ's
/// (`{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:{..},..},..}`): each key and
/// its value.
fn mq_entries(body: &str) -> Vec<(serde_json::Value, serde_json::Value)> {
    let mut entries = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find("{\"brokerName\"") {
        let key_end = at + rest[at..].find('}').unwrap() + 1;
        let key = serde_json::from_str(&rest[at..key_end]).unwrap();
        let value_start = key_end + 1;
        let value_end = value_start + rest[value_start..].find('}').unwrap() + 1;
        let value = serde_json::from_str(&rest[value_start..value_end]).unwrap();
        entries.push((key, value));
        rest = &rest[value_end..];
    }
    entries
}

/// One core's answer to `code` with `fields`: its body as text.
fn ask(addr: &str, code: i32, fields: &[(&str, &str)]) -> String {
    let mut cmd = RemotingCommand::request(code, 11);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    let f = remoting_call(addr, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    String::from_utf8(f.body.to_vec()).unwrap()
}

/// GET_CONSUME_STATS of one core for `GROUP` (every topic it has offsets of): the rows of
/// its offsetTable and its consumeTps.
fn consume_stats(addr: &str) -> (Vec<Row>, f64) {
    let body = ask(
        addr,
        request::GET_CONSUME_STATS,
        &[("consumerGroup", GROUP)],
    );
    let rows = mq_entries(&body)
        .into_iter()
        .map(|(key, value)| Row {
            broker: key["brokerName"].as_str().unwrap().to_owned(),
            topic: key["topic"].as_str().unwrap().to_owned(),
            queue_id: key["queueId"].as_u64().unwrap(),
            broker_offset: value["brokerOffset"].as_u64().unwrap(),
            consumer_offset: value["consumerOffset"].as_u64().unwrap(),
        })
        .collect();
    let tps_at = body.find("\"consumeTps\":").unwrap() + "\"consumeTps\":".len();
    let tps: f64 = body[tps_at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == 'E')
        .collect::<String>()
        .parse()
        .unwrap();
    (rows, tps)
}

/// VIEW_BROKER_STATS_DATA GROUP_GET_NUMS of `GROUP` on `TOPIC` of one core: its minute
/// window's tps (0 when the core never handed the group a message).
fn group_get_tps(addr: &str) -> f64 {
    let mut cmd = RemotingCommand::request(request::VIEW_BROKER_STATS_DATA, 12);
    cmd.ext_fields
        .insert("statsName".into(), "GROUP_GET_NUMS".into());
    cmd.ext_fields
        .insert("statsKey".into(), format!("{TOPIC}@{GROUP}"));
    let f = remoting_call(addr, &cmd, b"");
    if f.command.code != response::SUCCESS {
        return 0.0;
    }
    let v: serde_json::Value = serde_json::from_slice(&f.body).unwrap();
    v["statsMinute"]["tps"].as_f64().unwrap()
}

#[test]
fn consume_stats_and_topic_stats_as_the_dashboard_reads_them() {
    let started_ms = wall_ms();
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TOPIC, QUEUES);
    let p = producer(&ns);
    for i in 0..READ {
        p.send(Message::new(TOPIC, format!("read-{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, GROUP).unwrap();
    let got = drain_topic(&consumer, TOPIC, Duration::from_secs(30));
    assert_eq!(got.len() as u64, READ);
    // The group's progress: every queue read to its end.
    for q in consumer.queues(TOPIC).unwrap() {
        let max = consumer.max_offset(&q).unwrap();
        consumer.commit_offset(&q, max).unwrap();
    }
    drop(consumer);
    for i in 0..BACKLOG {
        p.send(Message::new(TOPIC, format!("left-{i}").into_bytes()))
            .unwrap();
    }
    let sent_last_ms = wall_ms() - 1000;
    let addrs = core_addrs(&ns);
    assert_eq!(addrs.len(), 2, "{addrs:?}");

    let mut queues = BTreeSet::new();
    let mut brokers = BTreeSet::new();
    let (mut backlog, mut tps_sum) = (0, 0.0);
    for a in &addrs {
        let (rows, tps) = consume_stats(a);
        let rows: Vec<&Row> = rows.iter().filter(|r| r.topic == TOPIC).collect();
        // Its own queues, under its own broker name.
        let names: BTreeSet<&str> = rows.iter().map(|r| r.broker.as_str()).collect();
        assert_eq!(names.len(), 1, "{a} answers as one broker: {rows:?}");
        brokers.extend(names.iter().map(|n| n.to_string()));
        for r in &rows {
            assert!(
                queues.insert((r.broker.clone(), r.queue_id)),
                "{a}: queue {r:?} also in another core's answer"
            );
            backlog += r.broker_offset - r.consumer_offset;
        }
        // RocketMQ's consumeTps: the minute window of the messages handed out, as the
        // broker stats count them (read a moment apart, so nearly equal).
        let minute = group_get_tps(a);
        assert!(
            (tps - minute).abs() <= 0.2 * minute + 0.05,
            "{a}: consumeTps {tps}, GROUP_GET_NUMS minute tps {minute}"
        );
        tps_sum += tps;
    }
    assert_eq!(brokers.len(), 2, "{brokers:?}");
    assert_eq!(queues.len() as u32, QUEUES, "each queue once: {queues:?}");
    assert_eq!(backlog, BACKLOG, "the messages sent after the group left");
    // 40 messages read within the last seconds: at least 40 / 70 s over the minute window.
    assert!(tps_sum > 0.5, "consumeTps {tps_sum}");

    // The topic's stats (the dashboard's topic status): each queue's last update is the
    // store time of its last message, 0 for a queue without one.
    let (mut queues, mut newest) = (0, 0);
    for a in &addrs {
        let body = ask(a, request::GET_TOPIC_STATS_INFO, &[("topic", TOPIC)]);
        for (key, value) in mq_entries(&body) {
            queues += 1;
            let ts = value["lastUpdateTimestamp"].as_i64().unwrap();
            if value["maxOffset"].as_u64().unwrap() > 0 {
                assert!(
                    ts >= started_ms && ts <= wall_ms(),
                    "{a}: {key} {value}, started at {started_ms}"
                );
            } else {
                assert_eq!(ts, 0, "{a}: {key} {value}");
            }
            newest = newest.max(ts);
        }
    }
    assert_eq!(queues, QUEUES);
    assert!(
        newest >= sent_last_ms,
        "the newest {newest}, last sent {sent_last_ms}"
    );
}

/// A message sent over remoting to the broker's shared port, read back as the dashboard's
/// message page reads it: by its offset msgId, at the address the id names.
fn send_and_view(shared_port: &str, topic: &str, queue_id: i32) -> StoredMessage {
    let h = SendMessageRequestHeader {
        producer_group: "TrackProducer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        born_timestamp: wall_ms(),
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, 5).with_header(&h);
    let f = remoting_call(shared_port, &cmd, b"tracked");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let id = f.command.ext("msgId").unwrap();
    let (at, offset) = decode_offset_msg_id(id).unwrap();
    let mut view = RemotingCommand::request(request::VIEW_MESSAGE_BY_ID, 6);
    view.ext_fields.insert("offset".into(), offset.to_string());
    let f = remoting_call(&at.to_string(), &view, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let mut found = decode_stored(&f.body).unwrap();
    assert_eq!(found.len(), 1, "{id}");
    let m = found.remove(0);
    assert_eq!(m.offset_msg_id(), id);
    m
}

/// The dashboard's message track (`messageTrackList`, the same check as mqadmin
/// `queryMsgById`'s) says a group consumed a message when, among the group's consume-stats
/// rows for the message's topic and queue, the one whose broker's master address in the
/// cluster listing is the message's store host has passed the message's queue offset. With
/// fixed direct ports each core stamps its own address as the store host, so a message on
/// either core is found consumed by a group that read it, and not by one that did not.
#[test]
fn a_consumed_message_is_tracked_as_consumed_on_every_core() {
    const TRACKED: &str = "TrackTopic";
    let base = consecutive_free_ports(2);
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some(format!("vip_channel = false\ndirect_port_base = {base}\n"))
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TRACKED, QUEUES);
    let messages: Vec<StoredMessage> = (0..QUEUES as i32)
        .map(|q| send_and_view(&c.broker.addr, TRACKED, q))
        .collect();
    let consumer = PullConsumer::new(&ns, GROUP).unwrap();
    let got = drain_topic(&consumer, TRACKED, Duration::from_secs(30));
    assert_eq!(got.len(), messages.len());
    for q in consumer.queues(TRACKED).unwrap() {
        let max = consumer.max_offset(&q).unwrap();
        consumer.commit_offset(&q, max).unwrap();
    }
    drop(consumer);

    let f = remoting_call(
        &ns,
        &RemotingCommand::request(request::GET_BROKER_CLUSTER_INFO, 7),
        b"",
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let cluster: ClusterInfo = from_json(&f.body).unwrap();
    let master =
        |broker: &str| -> String { cluster.broker_addr_table[broker].broker_addrs[&0].clone() };
    let mut rows = Vec::new();
    for a in core_addrs(&ns) {
        rows.extend(
            consume_stats(&a)
                .0
                .into_iter()
                .filter(|r| r.topic == TRACKED),
        );
    }
    let mut hosts = BTreeSet::new();
    for m in &messages {
        let host = m.store_host.to_string();
        hosts.insert(host.clone());
        let row = rows
            .iter()
            .find(|r| r.queue_id == m.queue_id as u64 && master(&r.broker) == host);
        let row = row.unwrap_or_else(|| {
            panic!(
                "no row of queue {} on the broker at {host}: {rows:?} {:?}",
                m.queue_id, cluster.broker_addr_table
            )
        });
        assert!(
            row.consumer_offset > m.queue_offset as u64,
            "{row:?} has not passed {}",
            m.queue_offset
        );
    }
    assert_eq!(hosts.len(), 2, "a store host per core: {hosts:?}");
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
