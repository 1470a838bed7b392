//! Lite Topics (RocketMQ 5.5) over remoting, as RocketMQ's Proxy and a 5.5 client send them:
//! SEND_MESSAGE with `__LITE_TOPIC` to a LITE parent, LITE_SUBSCRIPTION_CTL with a client's
//! set, POP_LITE_MESSAGE per client and ACK_LITE_MESSAGE with the handle built from the pop
//! answer, against a two-core broker (ARCHITECTURE.md, "Lite Topics"):
//!
//! - a lite topic's messages come in the order sent, one batch at a time per group;
//! - a client gets only the lite topics it subscribed, through whichever core it dials;
//! - a message without a lite topic, or to a LITE parent in a batch, is refused; so is a
//!   lite topic past `lite_topics_max` (LMQ_QUOTA_EXCEEDED) and a subscription set past
//!   `lite_subscription_quota` (LITE_SUBSCRIPTION_QUOTA_EXCEEDED).

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use integration::{
    core_addrs, remoting_call, update_topic_with_attributes, wait_for_route, Cluster,
};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::message::{decode_properties, decode_stored, StoredMessage};
use remoting::{Frame, RemotingCommand};

const TOPIC: &str = "RemotingLite";
const GROUP: &str = "RemotingLiteGroup";
const LITE: &str = "__LITE_TOPIC";

fn send_frame(addr: &str, props: &[(&str, &str)], body: &str) -> Frame {
    let properties: String = props
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
        .collect();
    let h = SendMessageRequestHeader {
        producer_group: "LiteProducer".into(),
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        born_timestamp: 1,
        properties: Some(properties),
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, 7).with_header(&h);
    remoting_call(addr, &cmd, body.as_bytes())
}

fn send(addr: &str, lite: &str, body: &str) {
    let f = send_frame(addr, &[(LITE, lite)], body);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
}

fn subscription(addr: &str, client: &str, action: &str, lites: &[&str]) -> Frame {
    let body = serde_json::json!({
        "subscriptionSet": [{
            "action": action,
            "clientId": client,
            "group": GROUP,
            "topic": TOPIC,
            "liteTopicSet": lites,
            "version": 1,
        }]
    })
    .to_string();
    let cmd = RemotingCommand::request(request::LITE_SUBSCRIPTION_CTL, 9);
    remoting_call(addr, &cmd, body.as_bytes())
}

/// POP_LITE_MESSAGE for `client` at `addr`: the messages and each one's receipt handle, as a
/// client builds it from the answer.
fn pop(addr: &str, broker: &str, client: &str) -> Vec<(StoredMessage, String)> {
    let mut cmd = RemotingCommand::request(request::POP_LITE_MESSAGE, 8);
    for (k, v) in [
        ("clientId", client.to_owned()),
        ("consumerGroup", GROUP.into()),
        ("topic", TOPIC.into()),
        ("maxMsgNum", "32".into()),
        ("invisibleTime", "60000".into()),
        ("pollTime", "0".into()),
        ("bornTime", "1".into()),
    ] {
        cmd.ext_fields.insert(k.into(), v);
    }
    let f = remoting_call(addr, &cmd, b"");
    if f.command.code == response::POLLING_TIMEOUT {
        return Vec::new();
    }
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let pop_time = f.command.ext("popTime").unwrap().to_owned();
    let invisible = f.command.ext("invisibleTime").unwrap().to_owned();
    let revive = f.command.ext("reviveQid").unwrap().to_owned();
    decode_stored(&f.body)
        .unwrap()
        .into_iter()
        .map(|m| {
            let handle = format!(
                "{o} {pop_time} {invisible} {revive} 0 {broker} {q} {o} {p}",
                o = m.queue_offset,
                q = m.queue_id,
                p = m.physical_offset
            );
            (m, handle)
        })
        .collect()
}

fn ack(addr: &str, handle: &str) -> i32 {
    let mut cmd = RemotingCommand::request(request::ACK_LITE_MESSAGE, 8);
    for (k, v) in [
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("extraInfo", handle),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    remoting_call(addr, &cmd, b"").command.code
}

fn lite_and_body(m: &StoredMessage) -> (String, String) {
    let lite = decode_properties(&m.properties)
        .into_iter()
        .find(|(k, _)| k == LITE)
        .map(|(_, v)| v)
        .unwrap_or_default();
    (lite, String::from_utf8_lossy(&m.body).into_owned())
}

/// Pops every core for `client` (bounded) and acks what comes when `ack_all`.
fn pop_all(addrs: &[String], client: &str, ack_all: bool) -> Vec<(String, String)> {
    let mut got = Vec::new();
    for (core, addr) in addrs.iter().enumerate() {
        let broker = format!("broker-a-c{core}");
        for (m, handle) in pop(addr, &broker, client) {
            got.push(lite_and_body(&m));
            if ack_all {
                assert_eq!(ack(addr, &handle), response::SUCCESS, "ack of {handle}");
            }
        }
    }
    got
}

#[test]
fn remoting_lite_topics_are_consumed_in_order_by_their_subscribers() {
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("lite_topics_max = 6\nlite_subscription_quota = 3\n".into())
    });
    let ns = c.namesrv.addr.clone();
    let f = update_topic_with_attributes(&c.broker.addr, TOPIC, 8, "+message.type=LITE");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&ns, TOPIC);
    let addrs = core_addrs(&ns);
    // Sent through core 0 whichever core holds each lite topic.
    for k in 0..3 {
        for lite in ["s1", "s2", "s3"] {
            send(&addrs[0], lite, &format!("{lite}#{k}"));
        }
    }
    // One subscription request, to core 1: both cores hear of it.
    let f = subscription(&addrs[1], "client-1", "COMPLETE_ADD", &["s1", "s2"]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    // Not acked: each lite topic's batch is out, and nothing more comes.
    let first = pop_all(&addrs, "client-1", false);
    let mut lites: Vec<&str> = first.iter().map(|(l, _)| l.as_str()).collect();
    lites.sort_unstable();
    lites.dedup();
    assert_eq!(
        lites,
        ["s1", "s2"],
        "only the subscribed lite topics: {first:?}"
    );
    for lite in ["s1", "s2"] {
        let bodies: Vec<&str> = first
            .iter()
            .filter(|(l, _)| l == lite)
            .map(|(_, b)| b.as_str())
            .collect();
        let want: Vec<String> = (0..3).map(|k| format!("{lite}#{k}")).collect();
        assert_eq!(bodies, want, "{lite} in the order sent");
    }
    assert!(pop_all(&addrs, "client-1", false).is_empty());
    // Another client adds s3: it gets s3's messages, kept for it.
    let f = subscription(&addrs[0], "client-2", "PARTIAL_ADD", &["s3"]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let s3 = pop_all(&addrs, "client-2", true);
    assert_eq!(s3.len(), 3, "{s3:?}");
    assert!(s3.iter().all(|(l, _)| l == "s3"));

    // Refusals.
    let f = subscription(&addrs[0], "client-3", "COMPLETE_ADD", &["a", "b", "c", "d"]);
    assert_eq!(
        f.command.code,
        response::LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
        "{:?}",
        f.command.remark
    );
    let cmd = RemotingCommand::request(request::LITE_SUBSCRIPTION_CTL, 9);
    let f = remoting_call(&addrs[0], &cmd, b"");
    assert_eq!(f.command.code, response::ILLEGAL_OPERATION);
    let f = send_frame(&addrs[0], &[], "no lite topic");
    assert_eq!(
        f.command.code,
        response::MESSAGE_ILLEGAL,
        "{:?}",
        f.command.remark
    );
    // Six lite topics at most (three per shard): new ones are taken until a shard is full,
    // then refused; the lite topics held still take messages.
    let mut taken = 0;
    let mut refused = 0;
    for i in 0..20 {
        let f = send_frame(&addrs[0], &[(LITE, &format!("t{i}"))], "m");
        match f.command.code {
            response::SUCCESS => taken += 1,
            response::LMQ_QUOTA_EXCEEDED => refused += 1,
            other => panic!("t{i}: {other} {:?}", f.command.remark),
        }
    }
    assert!(
        3 + taken <= 6,
        "{taken} more lite topics taken past the quota"
    );
    assert!(refused >= 17, "{refused} refused");
    send(&addrs[0], "s1", "s1#more");
}
