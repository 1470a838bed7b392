//! RocketMQ 5.5's lite admin requests against corvus (ARCHITECTURE.md, "Lite Topics"): a
//! two-core broker (two RocketMQ brokers, `broker-a-c0` and `broker-a-c1`) holding lite
//! topics with a backlog, two groups and their clients' subscriptions, asked by RocketMQ's
//! own **mqadmin 5.5.0** (`tests/rocketmq-tools55`):
//!
//! - getBrokerLiteInfo: per broker, its lite topics, subscriptions and cursors, which add up
//!   to what was sent and subscribed; the parents' expirations and bound groups;
//! - getParentTopicInfo: the expiration, the lite topics per broker, the bound groups (one by
//!   its `lite.bind.topic`, one by what it consumes);
//! - getLiteTopicInfo: one broker owns the lite topic, with its messages kept and its
//!   subscribed client;
//! - getLiteClientInfo: the client's lite topics over the brokers, and its pops;
//! - getLiteGroupInfo: a group's total lag and the lite topics most behind, and one lite
//!   topic's offsets and lag;
//! - triggerLiteDispatch: each broker answers.
//!
//! RocketMQ's refusals (TOPIC_NOT_EXIST, "type not match", SUBSCRIPTION_GROUP_NOT_EXIST,
//! "not a LITE group", "not match") are checked over remoting whether or not Java is there.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use integration::{
    core_addrs, remoting_call, update_topic_with_attributes, wait_for_route, Cluster,
};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::message::decode_stored;
use remoting::{Frame, RemotingCommand};

const TOPIC: &str = "AdminLite";
const OTHER_PARENT: &str = "AdminLiteOther";
const PLAIN_TOPIC: &str = "AdminPlain";
/// Bound by its config's `lite.bind.topic`; its client pops and acks.
const GROUP: &str = "AdminLiteGroup";
/// No config: bound by what it consumes; its client subscribes and never pops.
const GROUP_2: &str = "AdminLiteGroup2";
/// A config without a binding, and nothing consumed.
const PLAIN_GROUP: &str = "AdminPlainGroup";

fn tools55_or_skip() -> Option<String> {
    integration::java_program_or_skip("tests/rocketmq-tools55", None)
}

fn send(addr: &str, lite: &str, body: &str) {
    let h = SendMessageRequestHeader {
        producer_group: "LiteAdminProducer".into(),
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        born_timestamp: 1,
        properties: Some(format!("__LITE_TOPIC\u{1}{lite}\u{2}")),
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, 7).with_header(&h);
    let f = remoting_call(addr, &cmd, body.as_bytes());
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
}

fn subscribe(addr: &str, group: &str, client: &str, lites: &[&str]) {
    let body = serde_json::json!({
        "subscriptionSet": [{
            "action": "COMPLETE_ADD",
            "clientId": client,
            "group": group,
            "topic": TOPIC,
            "liteTopicSet": lites,
            "version": 1,
        }]
    })
    .to_string();
    let cmd = RemotingCommand::request(request::LITE_SUBSCRIPTION_CTL, 9);
    let f = remoting_call(addr, &cmd, body.as_bytes());
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
}

/// POP_LITE_MESSAGE of `client` at core `core`: (lite topic, receipt handle) of each message.
fn pop(addr: &str, core: usize, client: &str) -> Vec<(String, String)> {
    let mut cmd = RemotingCommand::request(request::POP_LITE_MESSAGE, 8);
    for (k, v) in [
        ("clientId", client),
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("maxMsgNum", "32"),
        ("invisibleTime", "300000"),
        ("pollTime", "0"),
        ("bornTime", "1"),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    let f = remoting_call(addr, &cmd, b"");
    if f.command.code == response::POLLING_TIMEOUT {
        return Vec::new();
    }
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let ext = |k: &str| f.command.ext(k).unwrap().to_owned();
    let (pop_time, invisible, revive) = (ext("popTime"), ext("invisibleTime"), ext("reviveQid"));
    decode_stored(&f.body)
        .unwrap()
        .into_iter()
        .map(|m| {
            let lite = remoting::message::decode_properties(&m.properties)
                .into_iter()
                .find(|(k, _)| k == "__LITE_TOPIC")
                .map(|(_, v)| v)
                .unwrap_or_default();
            let handle = format!(
                "{o} {pop_time} {invisible} {revive} 0 broker-a-c{core} {q} {o} {p}",
                o = m.queue_offset,
                q = m.queue_id,
                p = m.physical_offset
            );
            (lite, handle)
        })
        .collect()
}

fn ack(addr: &str, handle: &str) {
    let mut cmd = RemotingCommand::request(request::ACK_LITE_MESSAGE, 8);
    for (k, v) in [
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("extraInfo", handle),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    let f = remoting_call(addr, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS, "ack of {handle}");
}

fn call(addr: &str, code: i32, fields: &[(&str, &str)]) -> Frame {
    let mut cmd = RemotingCommand::request(code, 7);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    remoting_call(addr, &cmd, b"")
}

fn store_group(addr: &str, group: &str, attributes: serde_json::Value) {
    let body = serde_json::json!({ "groupName": group, "attributes": attributes }).to_string();
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 7);
    let f = remoting_call(addr, &cmd, body.as_bytes());
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
}

fn json(f: &Frame) -> serde_json::Value {
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    serde_json::from_slice(&f.body).unwrap()
}

fn refusal(f: &Frame) -> (i32, String) {
    (f.command.code, f.command.remark.clone().unwrap_or_default())
}

/// The whitespace-separated fields of the lines of `text` that start with `first`.
fn rows<'a>(text: &'a str, first: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&first))
        .collect()
}

fn num(s: &str) -> i64 {
    s.parse().unwrap_or(0)
}

#[test]
fn rocketmq_5_5_mqadmin_reads_the_lite_topics_of_each_broker() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    for (topic, attrs) in [
        (TOPIC, "+message.type=LITE,+lite.topic.expiration=30"),
        (OTHER_PARENT, "+message.type=LITE"),
        (PLAIN_TOPIC, ""),
    ] {
        let f = update_topic_with_attributes(&broker, topic, 8, attrs);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
        wait_for_route(&ns, topic);
    }
    store_group(
        &broker,
        GROUP,
        serde_json::json!({ "+lite.bind.topic": TOPIC }),
    );
    store_group(&broker, PLAIN_GROUP, serde_json::json!({}));
    let addrs = core_addrs(&ns);
    assert_eq!(addrs.len(), 2);

    // Which core owns a lite topic: the one whose GET_LITE_TOPIC_INFO says so (known before
    // its first message: a lite topic's queue is a hash of its name).
    let owner = |lite: &str| -> usize {
        let owners: Vec<usize> = addrs
            .iter()
            .enumerate()
            .filter(|(_, a)| {
                json(&call(
                    a,
                    request::GET_LITE_TOPIC_INFO,
                    &[("parentTopic", TOPIC), ("liteTopic", lite)],
                ))["shardingToBroker"]
                    == true
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(owners.len(), 1, "{lite} has one owner: {owners:?}");
        owners[0]
    };
    // s2 lives on the core s1 does not, so each broker holds some lite topics.
    let s1_owner = owner("s1");
    let s2 = [
        "s2", "t2", "u2", "v2", "w2", "x2", "y2", "z2", "a2", "b2", "c2", "d2",
    ]
    .into_iter()
    .find(|l| owner(l) != s1_owner)
    .unwrap();
    let s2_owner = 1 - s1_owner;
    // A backlog: s1 3 messages, `s2` 2, s3 1, all sent through core 0.
    for (lite, n) in [("s1", 3), (s2, 2), ("s3", 1)] {
        for k in 0..n {
            send(&addrs[0], lite, &format!("{lite}#{k}"));
        }
    }
    // GROUP_2's client subscribes s1 (its cursor at s1's first message) and never pops;
    // GROUP's client subscribes all three, pops them, and acks s1's only.
    subscribe(&addrs[1], GROUP_2, "client-2", &["s1"]);
    subscribe(&addrs[0], GROUP, "client-1", &["s1", s2, "s3"]);
    let mut popped = Vec::new();
    for (core, addr) in addrs.iter().enumerate() {
        for (lite, handle) in pop(addr, core, "client-1") {
            if lite == "s1" {
                ack(addr, &handle);
            }
            popped.push(lite);
        }
    }
    popped.sort();
    let mut sent = vec!["s1", "s1", "s1", s2, s2, "s3"];
    sent.sort_unstable();
    assert_eq!(popped, sent);

    // The bodies, as RocketMQ's broker writes them.
    let infos: Vec<serde_json::Value> = addrs
        .iter()
        .map(|a| json(&call(a, request::GET_BROKER_LITE_INFO, &[])))
        .collect();
    let sum = |k: &str| infos.iter().map(|i| i[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!(sum("currentLmqNum"), 3, "{infos:?}");
    assert_eq!(sum("liteSubscriptionCount"), 4, "{infos:?}");
    // Cursors: GROUP's on s1, s2, s3 and GROUP_2's on s1.
    assert_eq!(sum("orderInfoCount"), 4, "{infos:?}");
    for i in &infos {
        assert_eq!(i["storeType"], "corvus");
        assert!(i["maxLmqNum"].as_i64().unwrap() > 0);
        assert_eq!(i["topicMeta"][TOPIC], 30, "{i}");
        assert_eq!(i["topicMeta"][OTHER_PARENT], -1, "{i}");
        assert_eq!(
            i["groupMeta"][TOPIC],
            serde_json::json!([GROUP, GROUP_2]),
            "{i}"
        );
    }
    let s2_info = json(&call(
        &addrs[s2_owner],
        request::GET_LITE_TOPIC_INFO,
        &[("parentTopic", TOPIC), ("liteTopic", s2)],
    ));
    assert_eq!(s2_info["topicOffset"]["minOffset"], 0);
    assert_eq!(s2_info["topicOffset"]["maxOffset"], 2);
    assert!(
        s2_info["topicOffset"]["lastUpdateTimestamp"]
            .as_i64()
            .unwrap()
            > 0
    );
    assert_eq!(
        s2_info["subscriber"],
        serde_json::json!([{ "clientId": "client-1", "group": GROUP }])
    );
    let g = json(&call(
        &addrs[s1_owner],
        request::GET_LITE_GROUP_INFO,
        &[("group", GROUP), ("liteTopic", "s1"), ("topK", "20")],
    ));
    // s1 is kept for GROUP_2; GROUP consumed all three.
    assert_eq!(g["liteTopicOffsetWrapper"]["brokerOffset"], 3, "{g}");
    assert_eq!(g["liteTopicOffsetWrapper"]["consumerOffset"], 3, "{g}");
    assert_eq!(g["totalLagCount"], 0, "{g}");

    // RocketMQ's refusals.
    let a = &addrs[0];
    let f = call(
        a,
        request::GET_PARENT_TOPIC_INFO,
        &[("topic", "NoSuchTopic")],
    );
    assert_eq!(
        refusal(&f),
        (
            response::TOPIC_NOT_EXIST,
            "Topic [NoSuchTopic] not exist.".into()
        )
    );
    let f = call(a, request::GET_PARENT_TOPIC_INFO, &[("topic", PLAIN_TOPIC)]);
    assert_eq!(
        refusal(&f),
        (
            response::INVALID_PARAMETER,
            format!("Topic [{PLAIN_TOPIC}] type not match.")
        )
    );
    let f = call(
        a,
        request::GET_LITE_TOPIC_INFO,
        &[("parentTopic", PLAIN_TOPIC), ("liteTopic", "s1")],
    );
    assert_eq!(refusal(&f).0, response::INVALID_PARAMETER);
    let client_info = |topic: &str, group: &str| {
        call(
            a,
            request::GET_LITE_CLIENT_INFO,
            &[
                ("parentTopic", topic),
                ("group", group),
                ("clientId", "client-1"),
            ],
        )
    };
    assert_eq!(
        refusal(&client_info(TOPIC, "NoSuchGroup")),
        (
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            "Group [NoSuchGroup] not exist.".into()
        )
    );
    assert_eq!(
        refusal(&client_info(OTHER_PARENT, GROUP)),
        (
            response::INVALID_PARAMETER,
            format!("Subscription [{GROUP}]-[{OTHER_PARENT}] not match.")
        )
    );
    for code in [request::GET_LITE_GROUP_INFO, request::TRIGGER_LITE_DISPATCH] {
        assert_eq!(
            refusal(&call(a, code, &[("group", "NoSuchGroup")])).0,
            response::SUBSCRIPTION_GROUP_NOT_EXIST
        );
        assert_eq!(
            refusal(&call(a, code, &[("group", PLAIN_GROUP)])),
            (
                response::INVALID_PARAMETER,
                format!("Group [{PLAIN_GROUP}] is not a LITE group.")
            )
        );
    }

    // What an operator reads with RocketMQ 5.5's mqadmin.
    let Some(cp) = tools55_or_skip() else {
        return;
    };
    let mqadmin = |args: &[&str]| -> String {
        let (ok, text) = integration::rocketmq_mqadmin(&cp, &ns, args);
        assert!(ok, "{args:?}: {text}");
        text
    };
    let names = ["broker-a-c0", "broker-a-c1"];

    // getBrokerLiteInfo: a row per broker address.
    let text = mqadmin(&["getBrokerLiteInfo", "-c", "DefaultCluster", "-d"]);
    let mut current = 0;
    let mut subscriptions = 0;
    for a in &addrs {
        let r = rows(&text, a);
        assert_eq!(r.len(), 1, "a row for {a}: {text}");
        assert_eq!(r[0][1], "corvus", "{text}");
        assert!(num(r[0][3]) >= 1, "each broker holds a lite topic: {text}");
        current += num(r[0][3]);
        subscriptions += num(r[0][4]);
    }
    assert_eq!((current, subscriptions), (3, 4), "{text}");
    assert!(text.contains(&format!("\"{TOPIC}\":30")), "{text}");
    assert!(
        text.contains(&format!("\"{TOPIC}\":[\"{GROUP}\",\"{GROUP_2}\"]"))
            || text.contains(&format!("\"{TOPIC}\":[\"{GROUP_2}\",\"{GROUP}\"]")),
        "{text}"
    );

    // getParentTopicInfo: TTL, lite topics and groups per broker.
    let text = mqadmin(&["getParentTopicInfo", "-p", TOPIC]);
    let mut lites = 0;
    for name in names {
        let r = rows(&text, name);
        assert_eq!(r.len(), 1, "a row for {name}: {text}");
        assert_eq!(r[0][1], "30", "{text}");
        lites += num(r[0][2]);
        assert_eq!(
            r[0][3], r[0][2],
            "one parent holds every lite topic: {text}"
        );
    }
    assert!(text.contains(GROUP) && text.contains(GROUP_2), "{text}");
    assert_eq!(lites, 3, "{text}");

    // getLiteTopicInfo: s2 on its owner, with its subscriber.
    let text = mqadmin(&["getLiteTopicInfo", "-p", TOPIC, "-l", s2, "-s"]);
    for (core, name) in names.iter().enumerate() {
        let r = rows(&text, name);
        assert_eq!(r.len(), 1, "a row for {name}: {text}");
        let (min, max, sharding, clients) = if core == s2_owner {
            ("0", "2", "true", "1")
        } else {
            ("0", "0", "false", "0")
        };
        assert_eq!((r[0][1], r[0][2]), (min, max), "{text}");
        let n = r[0].len();
        assert_eq!((r[0][n - 2], r[0][n - 1]), (sharding, clients), "{text}");
    }
    assert!(text.contains(&format!("[client-1@{GROUP}]")), "{text}");

    // getLiteClientInfo: client-1's three lite topics over the brokers, and its pops.
    let text = mqadmin(&[
        "getLiteClientInfo",
        "-p",
        TOPIC,
        "-g",
        GROUP,
        "-c",
        "client-1",
        "-s",
    ]);
    let mut count = 0;
    for name in names {
        let r = rows(&text, name);
        assert_eq!(r.len(), 1, "a row for {name}: {text}");
        assert!(
            num(r[0][1]) >= 1,
            "client-1 subscribed some on each: {text}"
        );
        count += num(r[0][1]);
        assert_ne!(r[0][2], "N/A", "client-1 popped every broker: {text}");
    }
    assert_eq!(count, 3, "{text}");
    let listed: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Lite Topics: ["))
        .flat_map(|l| l.trim_end_matches(']').split(", ").map(str::to_owned))
        .collect();
    assert_eq!(
        listed,
        BTreeSet::from(["s1".into(), s2.into(), "s3".into()]),
        "{text}"
    );

    // getLiteGroupInfo: GROUP is 3 behind (s2 2, s3 1, handed out and not acked).
    let text = mqadmin(&["getLiteGroupInfo", "-p", TOPIC, "-g", GROUP]);
    assert!(text.contains("Total Lag Count: 3"), "{text}");
    let top: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.contains("TopK by lag count"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(top.len(), 2, "{text}");
    assert_eq!((top[0][1], top[0][2]), (s2, "2"), "{text}");
    assert_eq!((top[1][1], top[1][2]), ("s3", "1"), "{text}");
    assert_ne!(
        top[0][3], "-",
        "its oldest unconsumed message's time: {text}"
    );
    // GROUP_2, bound by what it consumes, is s1's 3 behind.
    let text = mqadmin(&["getLiteGroupInfo", "-p", TOPIC, "-g", GROUP_2]);
    assert!(text.contains("Total Lag Count: 3"), "{text}");
    // One lite topic: its owner's offsets; the other broker does not hold it.
    let text = mqadmin(&["getLiteGroupInfo", "-p", TOPIC, "-g", GROUP, "-l", s2]);
    assert!(text.contains("Total Lag Count: 2"), "{text}");
    for (core, name) in names.iter().enumerate() {
        let r = rows(&text, name);
        assert_eq!(r.len(), 1, "a row for {name}: {text}");
        let want = if core == s2_owner {
            ["2", "0", "2"]
        } else {
            ["-", "-", "-"]
        };
        assert_eq!([r[0][1], r[0][2], r[0][3]], want, "{text}");
    }

    // triggerLiteDispatch: every broker answers; for an unknown group, none does.
    let text = mqadmin(&["triggerLiteDispatch", "-p", TOPIC, "-g", GROUP]);
    for name in names {
        assert_eq!(rows(&text, name), [vec![name, "dispatched"]], "{text}");
    }
    let text = mqadmin(&["triggerLiteDispatch", "-p", TOPIC, "-g", "NoSuchGroup"]);
    for name in names {
        assert_eq!(rows(&text, name), [vec![name, "error"]], "{text}");
    }
}
