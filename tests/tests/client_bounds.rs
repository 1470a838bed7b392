//! Values a client chooses and the broker honours are bounded by the broker, in both
//! protocols: a pull asking to be held for an hour comes back within `long_polling_max_ms`,
//! a pull asking for millions of messages (or gigabytes) gets the broker's batch, a query
//! asking for a million messages gets `query_messages_max`, a commit past a queue's end is
//! taken as the end, and a RocketMQ heartbeat declaring more groups than
//! `heartbeat_groups_max` is refused. (A queue lease asked past `queue_lock_lease_max_ms`
//! is in bad_input.rs.)

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use client::Message;
use integration::{producer, raw_call, remoting_call, Cluster};
use protocol::{Command, Header, ResponseCode};
use remoting::codes::{request, response};
use remoting::headers::PullMessageRequestHeader;
use remoting::RemotingCommand;

fn native_pull(topic: &str, max_messages: u32, max_bytes: u32, suspend_ms: u64) -> Header {
    Header::request(
        1,
        Command::Pull(protocol::PullRequest {
            consumer_group: "bounded".into(),
            topic: topic.into(),
            queue_id: 0,
            queue_offset: 0,
            max_messages,
            max_bytes,
            tag_expression: "*".into(),
            suspend_timeout_ms: suspend_ms,
        }),
    )
}

fn rocketmq_pull(topic: &str, max_msg_nums: i32, suspend_ms: i64) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: "bounded".into(),
        topic: topic.into(),
        queue_id: 0,
        queue_offset: 0,
        max_msg_nums,
        sys_flag: remoting::message::pull_sys_flag::SUSPEND,
        commit_offset: 0,
        suspend_timeout_millis: suspend_ms,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: Some(i32::MAX),
        broker_name: None,
    };
    RemotingCommand::request(request::PULL_MESSAGE, 7).with_header(&h)
}

fn pulled_count(frame: &protocol::Frame) -> u32 {
    match &frame.header.command {
        Command::PullResult(r) => r.count,
        other => panic!("not a pull result: {other:?}"),
    }
}

#[test]
fn a_pull_asking_to_be_held_an_hour_comes_back_within_long_polling_max_ms() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("long_polling_max_ms = 1000\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Quiet", 1);
    // Native: an empty queue, held for at most the broker's second, not the hour asked.
    let started = Instant::now();
    let frame = raw_call(
        &c.broker.addr,
        &native_pull("Quiet", 32, 1 << 20, 3_600_000),
        &[],
    );
    let held = started.elapsed();
    assert_eq!(frame.header.response_code(), ResponseCode::PullNotFound);
    assert!(
        held >= Duration::from_millis(900),
        "not held at all: {held:?}"
    );
    assert!(held < Duration::from_secs(8), "held {held:?}");
    // RocketMQ's PULL_MESSAGE with the suspend flag: the same bound.
    let started = Instant::now();
    let frame = remoting_call(&c.broker.addr, &rocketmq_pull("Quiet", 32, 3_600_000), &[]);
    let held = started.elapsed();
    assert_eq!(frame.command.code, response::PULL_NOT_FOUND, "{frame:?}");
    assert!(
        held >= Duration::from_millis(900),
        "not held at all: {held:?}"
    );
    assert!(held < Duration::from_secs(8), "held {held:?}");
}

#[test]
fn a_pull_asking_for_millions_of_messages_gets_the_broker_batch() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("pull_batch_messages_max = 16\npull_batch_bytes_max = 65536\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Small", 1);
    integration::create_topic(&ns, "Large", 1);
    let p = producer(&ns);
    // Bodies that do not compress, so each is stored at its 10 KiB.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut noise = || -> Vec<u8> {
        (0..10 << 10)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (seed >> 56) as u8
            })
            .collect()
    };
    for i in 0..40 {
        p.send(Message::new("Small", format!("s{i}").into_bytes()))
            .unwrap();
        p.send(Message::new("Large", noise())).unwrap();
    }
    // Native: count bound, then byte bound.
    let frame = raw_call(
        &c.broker.addr,
        &native_pull("Small", u32::MAX, u32::MAX, 0),
        &[],
    );
    assert_eq!(pulled_count(&frame), 16);
    let frame = raw_call(
        &c.broker.addr,
        &native_pull("Large", u32::MAX, u32::MAX, 0),
        &[],
    );
    let n = pulled_count(&frame);
    assert!((1..=6).contains(&n), "{n} messages of 10 KiB past 64 KiB");
    // RocketMQ: the same bounds, whatever maxMsgNums and maxMsgBytes say.
    let frame = remoting_call(&c.broker.addr, &rocketmq_pull("Small", i32::MAX, 0), &[]);
    assert_eq!(frame.command.code, response::SUCCESS, "{:?}", frame.command);
    let body = frame.body.clone();
    assert_eq!(remoting::message::decode_stored(&body).unwrap().len(), 16);
    let frame = remoting_call(&c.broker.addr, &rocketmq_pull("Large", i32::MAX, 0), &[]);
    let body = frame.body.clone();
    let n = remoting::message::decode_stored(&body).unwrap().len();
    assert!((1..=6).contains(&n), "{n} messages of 10 KiB past 64 KiB");
}

#[test]
fn a_query_asking_for_a_million_messages_gets_query_messages_max() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("query_messages_max = 5\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Keyed", 1);
    let p = producer(&ns);
    for i in 0..12 {
        p.send(Message::new("Keyed", format!("k{i}").into_bytes()).with_key("order-1"))
            .unwrap();
    }
    let admin = client::Admin::new(&ns).unwrap();
    // The index is written as the messages are stored; wait until all twelve would be
    // found, so that fewer means the bound.
    let found = integration::wait_for(Duration::from_secs(10), || {
        let got = admin
            .query_by_key("Keyed", "order-1", 0, i64::MAX, 1_000_000)
            .ok()?;
        (!got.is_empty()).then_some(got)
    })
    .expect("the key is found");
    assert_eq!(found.len(), 5, "query_messages_max = 5");
}

#[test]
fn a_commit_past_the_end_of_a_queue_is_taken_as_the_end() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Committed", 1);
    let p = producer(&ns);
    for i in 0..3 {
        p.send(Message::new("Committed", format!("m{i}").into_bytes()))
            .unwrap();
    }
    let h = Header::request(
        1,
        Command::CommitConsumerOffset(protocol::CommitOffset {
            queue: protocol::GroupQueue {
                group: "skipper".into(),
                topic: "Committed".into(),
                queue_id: 0,
            },
            offset: u64::MAX / 2,
            epoch: u64::MAX,
            client_id: "client-a".into(),
            release: false,
        }),
    );
    let frame = raw_call(&c.broker.addr, &h, &[]);
    match frame.header.command {
        Command::ConsumerOffset { offset, .. } => assert_eq!(offset, Some(3)),
        other => panic!("{other:?}"),
    }
}

/// A RocketMQ heartbeat of one client declaring `groups` consumer groups.
fn heartbeat_body(groups: usize) -> Vec<u8> {
    let consumers: Vec<serde_json::Value> = (0..groups)
        .map(|i| {
            serde_json::json!({
                "groupName": format!("hb_group_{i}"),
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [],
                "unitMode": false
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "clientID": "127.0.0.1@hb",
        "producerDataSet": [],
        "consumerDataSet": consumers,
    }))
    .unwrap()
}

#[test]
fn a_heartbeat_declaring_more_groups_than_heartbeat_groups_max_is_refused() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("heartbeat_groups_max = 4\n".into())
    });
    let cmd = RemotingCommand::request(request::HEART_BEAT, 3);
    let refused = remoting_call(&c.broker.addr, &cmd, &heartbeat_body(5));
    assert_ne!(refused.command.code, response::SUCCESS);
    let remark = refused.command.remark.clone().unwrap_or_default();
    assert!(remark.contains("heartbeat_groups_max"), "{remark}");
    // Nothing of it was kept: no retry topic for its fifth group.
    let ok = remoting_call(&c.broker.addr, &cmd, &heartbeat_body(4));
    assert_eq!(ok.command.code, response::SUCCESS, "{:?}", ok.command);
    let all = remoting_call(
        &c.broker.addr,
        &RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, 4),
        &[],
    );
    let topics = String::from_utf8_lossy(&all.body).into_owned();
    assert!(topics.contains("%RETRY%hb_group_3"), "{topics}");
    assert!(!topics.contains("%RETRY%hb_group_4"), "{topics}");
}
