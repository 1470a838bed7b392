//! Priority messages (RocketMQ 5.4) over remoting, as RocketMQ's remoting client sends them
//! (`Message.setPriority`: the property `_SYS_MSG_PRIORITY_` on SEND_MESSAGE) and as its
//! Proxy pops them (POP_MESSAGE of queue -1), against a two-core broker, each core a RocketMQ
//! broker holding 4 of the topic's 8 queues: its 4 priority levels (ARCHITECTURE.md,
//! "Priority messages").
//!
//! - a send with a priority is stored in the core's queue min(priority, 3), whatever queue it
//!   named, and the answer names that queue; one that is also FIFO (`__SHARDINGKEY`) stays in
//!   the queue it named and loses the priority;
//! - a pop of any queue of the core hands out its highest level first, each level in the order
//!   sent;
//! - a group whose `priority.factor` is 0 (`updateSubGroup -a +priority.factor=0`) is served
//!   as on any topic: its pops start at a different queue each time.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use integration::{
    core_addrs, remoting_call, update_topic_with_attributes, wait_for_route, Cluster,
};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::message::{decode_properties, decode_stored, StoredMessage};
use remoting::RemotingCommand;

const TOPIC: &str = "RemotingPriority";
const PRIORITY: &str = "_SYS_MSG_PRIORITY_";

/// Sends `body` with the properties `props` to queue `queue_id` of broker `broker` (a core)
/// at `addr`; the queue the answer names.
fn send(addr: &str, broker: &str, queue_id: i32, body: &str, props: &[(&str, &str)]) -> i64 {
    let properties: String = props
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
        .collect();
    let h = SendMessageRequestHeader {
        producer_group: "PriorityProducer".into(),
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        born_timestamp: 1,
        properties: Some(properties),
        broker_name: Some(broker.into()),
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, 7).with_header(&h);
    let f = remoting_call(addr, &cmd, body.as_bytes());
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    f.command.ext("queueId").unwrap().parse().unwrap()
}

/// POP_MESSAGE of any queue of the core at `addr` for `group`, at most `max`, as RocketMQ 5's
/// Proxy pops; the messages handed out.
fn pop(addr: &str, broker: &str, group: &str, max: u32) -> Vec<StoredMessage> {
    let mut cmd = RemotingCommand::request(request::POP_MESSAGE, 8);
    for (k, v) in [
        ("consumerGroup", group.to_owned()),
        ("topic", TOPIC.into()),
        ("queueId", "-1".into()),
        ("maxMsgNums", max.to_string()),
        ("invisibleTime", "60000".into()),
        ("pollTime", "0".into()),
        ("bornTime", "1".into()),
        ("initMode", "0".into()),
        ("expType", "TAG".into()),
        ("exp", "*".into()),
        ("order", "false".into()),
        ("bname", broker.into()),
    ] {
        cmd.ext_fields.insert(k.into(), v);
    }
    let f = remoting_call(addr, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    decode_stored(&f.body).unwrap()
}

fn body(m: &StoredMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

#[test]
fn remoting_priority_sends_are_popped_highest_first_per_core() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let f = update_topic_with_attributes(&c.broker.addr, TOPIC, 8, "+message.type=PRIORITY");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&ns, TOPIC);
    // A group that pops as on any topic.
    let config = r#"{"groupName":"PriorityOffGroup","attributes":{"+priority.factor":"0"}}"#;
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
    let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    for (core, addr) in core_addrs(&ns).iter().enumerate() {
        let broker = format!("broker-a-c{core}");
        // Every send names queue 0; the priority picks the level (7 is past the core's 4).
        for p in [0u32, 1, 2, 3, 7] {
            let level = send(
                addr,
                &broker,
                0,
                &format!("p{p}"),
                &[(PRIORITY, &p.to_string())],
            );
            assert_eq!(level, i64::from(p.min(3)), "priority {p} on {broker}");
        }
        // FIFO outranks PRIORITY: the queue named, and no priority stored.
        let q = send(
            addr,
            &broker,
            1,
            "fifo",
            &[("__SHARDINGKEY", "g"), (PRIORITY, "3")],
        );
        assert_eq!(q, 1, "a FIFO message stays in the queue it named");

        let got = pop(addr, &broker, "PriorityGroup", 32);
        let bodies: Vec<String> = got.iter().map(body).collect();
        assert_eq!(
            bodies,
            ["p3", "p7", "p2", "p1", "fifo", "p0"],
            "{broker} hands out its highest level first"
        );
        for m in &got {
            let props = decode_properties(&m.properties);
            let stored = props
                .iter()
                .find(|(k, _)| k == PRIORITY)
                .map(|(_, v)| v.as_str());
            match body(m).as_str() {
                "fifo" => assert_eq!(stored, None, "the FIFO message lost its priority"),
                b => assert_eq!(stored, Some(&b[1..]), "{b} keeps its priority"),
            }
        }

        // priority.factor 0: four pops of one start at four different queues.
        let mut levels: Vec<i32> = (0..4)
            .flat_map(|_| pop(addr, &broker, "PriorityOffGroup", 1))
            .map(|m| m.queue_id)
            .collect();
        levels.sort_unstable();
        assert_eq!(levels, [0, 1, 2, 3], "{broker} with priority.factor 0");
    }
}
