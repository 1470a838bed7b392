//! SQL92 property filters through the real binaries: native pull and push consumers with
//! SQL92 subscriptions receive exactly the messages whose properties match (a table of
//! expressions), bad expressions and a broker with `enable_property_filter` off are refused
//! with the reason, and RocketMQ's own requests (CHECK_CLIENT_CONFIG, a SQL92 PULL_MESSAGE
//! with the expression posted or known from the heartbeat) are answered as RocketMQ does.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use client::{
    Admin, ClientError, ConsumeFrom, ConsumeStatus, Message, PullConsumer, PullOptions,
    PushConsumer, Selector,
};
use integration::{create_topic, drain_topic_opts, producer, wait_for, Cluster};
use protocol::ResponseCode;
use remoting::body::{
    CheckClientRequestBody, ConsumerData, HeartbeatData, MessageModel, SubscriptionData,
};
use remoting::codes::{request, response};
use remoting::{Decoded, RemotingCommand, RemotingDecoder};

const WAIT: Duration = Duration::from_secs(30);
const MESSAGES: usize = 60;

fn filtering_cluster(cores: u16) -> Cluster {
    Cluster::start_with(cores, "small", |o| {
        o.config_toml = Some("enable_property_filter = true\n".into())
    })
}

/// Message `i`: `a` = i, `b` cycles x y z, `c` only on even ones, `price` = i.5, tag TagA
/// on every fourth.
fn message(topic: &str, i: usize) -> Message {
    let mut m = Message::new(topic, format!("m{i}"))
        .with_tags(if i.is_multiple_of(4) { "TagA" } else { "TagB" })
        .with_property("a", i.to_string())
        .with_property("b", ["x", "y", "z"][i % 3])
        .with_property("price", format!("{i}.5"));
    if i.is_multiple_of(2) {
        m = m.with_property("c", "on");
    }
    m
}

fn send_all(ns: &str, topic: &str) {
    let p = producer(ns);
    for i in 0..MESSAGES {
        p.send(message(topic, i)).unwrap();
    }
}

/// The expressions, and which messages each selects.
type Rule = (&'static str, fn(usize) -> bool);
const TABLE: &[Rule] = &[
    ("a > 50", |i| i > 50),
    ("a = 7", |i| i == 7),
    ("a BETWEEN 10 AND 19", |i| (10..=19).contains(&i)),
    ("a NOT BETWEEN 5 AND 55", |i| !(5..=55).contains(&i)),
    ("b IN ('x', 'z')", |i| i % 3 != 1),
    ("b NOT IN ('x')", |i| i % 3 != 0),
    ("c IS NULL", |i| i % 2 == 1),
    ("c IS NOT NULL AND a < 20", |i| {
        i.is_multiple_of(2) && i < 20
    }),
    ("TAGS = 'TagA' OR b = 'y'", |i| {
        i.is_multiple_of(4) || i % 3 == 1
    }),
    ("NOT (a >= 30)", |i| i < 30),
    ("price > 40.0", |i| i >= 40),
    ("b <> 'x' AND (a < 3 OR a > 57)", |i| {
        i % 3 != 0 && !(3..=57).contains(&i)
    }),
    ("b ENDSWITH 'z' and TAGS startswith 'Tag'", |i| i % 3 == 2),
    ("missing = 'v'", |_| false),
    ("TRUE", |_| true),
];

fn numbers(msgs: &[client::MessageExt]) -> Vec<usize> {
    let mut v: Vec<usize> = msgs
        .iter()
        .map(|m| std::str::from_utf8(&m.body).unwrap()[1..].parse().unwrap())
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn pull_consumers_with_sql92_filters_get_exactly_the_matching_messages() {
    let c = filtering_cluster(2);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Props", 4);
    send_all(&ns, "Props");
    let consumer = PullConsumer::new(&ns, "sql-pull").unwrap();
    for (expr, selects) in TABLE {
        let opts = PullOptions {
            sql92: Some((*expr).to_owned()),
            ..PullOptions::default()
        };
        let got = drain_topic_opts(&consumer, "Props", &opts, WAIT).unwrap();
        let want: Vec<usize> = (0..MESSAGES).filter(|&i| selects(i)).collect();
        assert_eq!(numbers(&got), want, "{expr}");
    }
    // A pull that matches nothing in its first windows reads on: one message per window,
    // and the first match lies past the first window of each queue.
    let opts = PullOptions {
        max_messages: 1,
        sql92: Some("a >= 40".into()),
        ..PullOptions::default()
    };
    for q in consumer.queues("Props").unwrap() {
        let r = consumer.pull(&q, client::QueueOffset(0), &opts).unwrap();
        assert_eq!(r.messages.len(), 1, "{q}: {r:?}");
        let a = numbers(&r.messages)[0];
        assert!(a >= 40, "{q}: {a}");
        assert_eq!(r.next_offset.0, r.messages[0].queue_offset.0 + 1, "{q}");
    }
    // mqadmin's consume takes a filter too.
    let out = integration::mqadmin(
        &ns,
        &[
            "consume",
            "-t",
            "Props",
            "--sql",
            "a = 7 OR a = 31",
            "--timeout-ms",
            "300",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let mut bodies: Vec<&str> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("body="))
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["m31", "m7"], "{text}");
    // A tag expression and a SQL92 filter together: both must hold.
    let opts = PullOptions {
        tag_expression: "TagA".into(),
        sql92: Some("a < 30".into()),
        ..PullOptions::default()
    };
    let got = drain_topic_opts(&consumer, "Props", &opts, WAIT).unwrap();
    let want: Vec<usize> = (0..30usize).filter(|i| i.is_multiple_of(4)).collect();
    assert_eq!(numbers(&got), want);
}

#[test]
fn a_push_consumer_with_a_sql92_subscription_gets_exactly_the_matching_messages() {
    let c = filtering_cluster(2);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "PushProps", 4);
    send_all(&ns, "PushProps");
    let expr = "a >= 45 AND b = 'x' OR a < 4";
    let want: BTreeSet<usize> = (0..MESSAGES)
        .filter(|&i| (i >= 45 && i.is_multiple_of(3)) || i < 4)
        .collect();
    let got: Arc<Mutex<Vec<usize>>> = Arc::default();
    let m = PushConsumer::builder()
        .namesrv(&ns)
        .group("sql-push")
        .subscribe_sql92("PushProps", expr)
        .consume_from(ConsumeFrom::First)
        .heartbeat_interval_ms(200)
        .suspend_timeout_ms(300)
        .commit_interval_ms(100)
        .build()
        .unwrap();
    let log = Arc::clone(&got);
    m.start(move |msgs| {
        let mut l = log.lock().unwrap();
        for msg in msgs {
            l.push(
                std::str::from_utf8(&msg.body).unwrap()[1..]
                    .parse()
                    .unwrap(),
            );
        }
        ConsumeStatus::Success
    })
    .unwrap();
    let received = || got.lock().unwrap().iter().copied().collect::<BTreeSet<_>>();
    assert!(
        wait_for(WAIT, || (received() == want).then_some(())).is_some(),
        "received {:?}, wanted {want:?}",
        received()
    );
    // Once the group's committed offsets reach every queue's end, every message has had
    // its chance: none that does not match may have come.
    let admin = Admin::new(&ns).unwrap();
    let done = wait_for(WAIT, || {
        let p = admin.consumer_progress("sql-push", "PushProps").ok()?;
        p.iter()
            .all(|q| q.committed == Some(q.max_offset))
            .then_some(())
    });
    assert!(done.is_some(), "the group's offsets reach the queues' ends");
    assert_eq!(received(), want);
    m.shutdown();
}

#[test]
fn bad_expressions_are_refused_with_the_reason() {
    let c = filtering_cluster(1);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Bad", 2);
    send_all(&ns, "Bad");
    let consumer = PullConsumer::new(&ns, "sql-bad").unwrap();
    // The broker refuses what it cannot parse, at the first pull, and says where.
    let opts = PullOptions {
        sql92: Some("a > 5 AND".into()),
        ..PullOptions::default()
    };
    match drain_topic_opts(&consumer, "Bad", &opts, WAIT) {
        Err(ClientError::Broker { code, remark, .. }) => {
            assert_eq!(code, ResponseCode::SubscriptionParseFailed);
            assert!(
                remark.contains("invalid SQL92 filter expression at character 9"),
                "{remark}"
            );
        }
        other => panic!("a bad expression was not refused: {other:?}"),
    }
    // The client refuses it before it is sent.
    let e = Selector::sql92("a > 'five'").unwrap_err();
    assert!(e.to_string().contains("only numbers"), "{e}");
    let e = PushConsumer::builder()
        .namesrv(&ns)
        .group("sql-bad-push")
        .subscribe_sql92("Bad", "a BETWEEN 5 AND 1")
        .build()
        .err()
        .expect("a bad expression fails the build");
    assert!(e.to_string().contains("lower bound"), "{e}");
    // The broker goes on serving good filters.
    let opts = PullOptions {
        sql92: Some("a < 3".into()),
        ..PullOptions::default()
    };
    let got = drain_topic_opts(&consumer, "Bad", &opts, WAIT).unwrap();
    assert_eq!(numbers(&got), vec![0, 1, 2]);
}

#[test]
fn a_broker_with_property_filters_off_refuses_sql92_subscriptions() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Off", 2);
    send_all(&ns, "Off");
    let consumer = PullConsumer::new(&ns, "sql-off").unwrap();
    let opts = PullOptions {
        sql92: Some("a > 5".into()),
        ..PullOptions::default()
    };
    let refused = "The broker does not support consumer to filter message by SQL92";
    match drain_topic_opts(&consumer, "Off", &opts, WAIT) {
        Err(ClientError::Broker { code, remark, .. }) => {
            assert_eq!(code, ResponseCode::SystemError);
            assert!(remark.contains(refused), "{remark}");
        }
        other => panic!("a SQL92 pull was served with filters off: {other:?}"),
    }
    // A push consumer learns it at start.
    let m = PushConsumer::builder()
        .namesrv(&ns)
        .group("sql-off-push")
        .subscribe_sql92("Off", "a > 5")
        .build()
        .unwrap();
    let e = m
        .start(|_| ConsumeStatus::Success)
        .expect_err("start refuses a SQL92 subscription the broker does not take");
    assert!(e.to_string().contains(refused), "{e}");
    m.shutdown();
    // Tags still work.
    let opts = PullOptions {
        tag_expression: "TagA".into(),
        ..PullOptions::default()
    };
    let got = drain_topic_opts(&consumer, "Off", &opts, WAIT).unwrap();
    assert_eq!(got.len(), MESSAGES / 4);
    // And RocketMQ's check at a consumer's start says the same.
    let f = call(
        &c.broker.addr,
        &RemotingCommand::request(request::CHECK_CLIENT_CONFIG, 1),
        &check_body("Off", "a > 5", "SQL92"),
    );
    assert_eq!(f.command.code, response::SYSTEM_ERROR);
    assert!(
        f.command.remark.as_deref().unwrap_or("").contains(refused),
        "{:?}",
        f.command.remark
    );
}

// ---------------------------------------------------------------------------------------------
// RocketMQ's requests, by hand

/// One request and its response over a new connection (requests from the broker, such as
/// NOTIFY_CONSUMER_IDS_CHANGED, are skipped).
fn call(addr: &str, cmd: &RemotingCommand, body: &[u8]) -> remoting::Frame {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    call_on(&mut conn, cmd, body)
}

fn call_on(conn: &mut TcpStream, cmd: &RemotingCommand, body: &[u8]) -> remoting::Frame {
    conn.write_all(&remoting::encode(cmd, body).unwrap())
        .unwrap();
    let mut decoder = RemotingDecoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no answer");
        while let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            if f.command.is_response() {
                return f;
            }
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed before the answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn subscription(topic: &str, expr: &str, kind: &str) -> SubscriptionData {
    SubscriptionData {
        topic: topic.to_owned(),
        sub_string: expr.to_owned(),
        expression_type: Some(kind.to_owned()),
        ..SubscriptionData::default()
    }
}

fn check_body(topic: &str, expr: &str, kind: &str) -> Vec<u8> {
    serde_json::to_vec(&CheckClientRequestBody {
        client_id: "127.0.0.1@sql".into(),
        group: "CG".into(),
        subscription_data: subscription(topic, expr, kind),
    })
    .unwrap()
}

/// A SQL92 PULL_MESSAGE of queue 0 from offset 0, posting `expr` when there is one.
fn pull_command(topic: &str, expr: Option<&str>) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(request::PULL_MESSAGE, 7);
    let mut put = |k: &str, v: String| {
        cmd.ext_fields.insert(k.to_owned(), v);
    };
    put("consumerGroup", "CG".into());
    put("topic", topic.into());
    put("queueId", "0".into());
    put("queueOffset", "0".into());
    put("maxMsgNums", "1000".into());
    // With a subscription posted: FLAG_SUBSCRIPTION (4).
    put("sysFlag", if expr.is_some() { "4" } else { "0" }.into());
    put("commitOffset", "0".into());
    put("suspendTimeoutMillis", "0".into());
    put("subVersion", "0".into());
    put("expressionType", "SQL92".into());
    if let Some(e) = expr {
        put("subscription", e.into());
    }
    cmd
}

/// The `a` of each record of a pull's body.
fn a_values(body: &[u8]) -> Vec<usize> {
    let mut v: Vec<usize> = message::records(body)
        .map(|r| r.unwrap().property("a").unwrap().parse().unwrap())
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn rocketmq_sql92_requests_are_answered_as_rocketmq_does() {
    let c = filtering_cluster(1);
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Raw", 1);
    send_all(&ns, "Raw");
    let addr = c.broker.addr.clone();

    // CHECK_CLIENT_CONFIG, as a Java consumer sends it at start.
    let check = RemotingCommand::request(request::CHECK_CLIENT_CONFIG, 1);
    let f = call(&addr, &check, &check_body("Raw", "a > 5", "SQL92"));
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let f = call(&addr, &check, &check_body("Raw", "TagA || TagB", "TAG"));
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let f = call(&addr, &check, &check_body("Raw", "a >> 5", "SQL92"));
    assert_eq!(f.command.code, response::SUBSCRIPTION_PARSE_FAILED);
    let remark = f.command.remark.unwrap_or_default();
    assert!(
        remark.contains("invalid SQL92 filter expression at character 3"),
        "{remark}"
    );

    // A pull naming SQL92 without the expression, before any heartbeat: not known yet.
    let f = call(&addr, &pull_command("Raw", None), &[]);
    assert_eq!(f.command.code, response::SUBSCRIPTION_NOT_EXIST);

    // The expression posted with the pull.
    let f = call(&addr, &pull_command("Raw", Some("b = 'y'")), &[]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let want: Vec<usize> = (0..MESSAGES).filter(|i| i % 3 == 1).collect();
    assert_eq!(a_values(&f.body), want);
    // The offset passes the messages left out: the whole queue was read.
    assert_eq!(
        f.command.ext("nextBeginOffset"),
        Some(MESSAGES.to_string().as_str())
    );

    // The expression from the group's heartbeat (a Java push consumer's pulls carry only
    // the type), on the same connection as the heartbeat.
    let hb = HeartbeatData {
        client_id: "127.0.0.1@sql".into(),
        consumer_data_set: vec![ConsumerData {
            group_name: "CG".into(),
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![subscription(
                "Raw",
                "a >= 50 OR c IS NULL AND a < 6",
                "SQL92",
            )],
            ..ConsumerData::default()
        }],
        ..HeartbeatData::default()
    };
    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let f = call_on(
        &mut conn,
        &RemotingCommand::request(request::HEART_BEAT, 2),
        &serde_json::to_vec(&hb).unwrap(),
    );
    assert_eq!(f.command.code, response::SUCCESS);
    let f = call_on(&mut conn, &pull_command("Raw", None), &[]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let want: Vec<usize> = (0..MESSAGES)
        .filter(|&i| i >= 50 || (i % 2 == 1 && i < 6))
        .collect();
    assert_eq!(a_values(&f.body), want);

    // A bad expression posted with a pull: SUBSCRIPTION_PARSE_FAILED with the reason.
    let f = call(&addr, &pull_command("Raw", Some("a IN (1, 2)")), &[]);
    assert_eq!(f.command.code, response::SUBSCRIPTION_PARSE_FAILED);
    assert!(
        f.command
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("expected a string literal"),
        "{:?}",
        f.command.remark
    );
}
