//! Messages sent through the real binaries come back intact, in queue order, with keys and
//! tags; through the client library and through mqadmin.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use client::{Message, PullConsumer};
use integration::{drain_topic, drain_topic_with, mqadmin, producer, Cluster};

fn body_of(i: usize) -> Vec<u8> {
    // Every 10th body is large and compressible, so the zstd path is exercised end to end.
    if i.is_multiple_of(10) {
        format!("large-{i}-").repeat(2000).into_bytes()
    } else {
        format!("message number {i}").into_bytes()
    }
}

#[test]
fn messages_are_consumed_intact_in_queue_order_with_keys_and_tags() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Orders", 4);

    let p = producer(&ns);
    let mut sent = Vec::new();
    let mut first_queue = None;
    for i in 0..200 {
        let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
        let msg = Message::new("Orders", body_of(i))
            .with_tags(tag)
            .with_key(format!("order-{i}"));
        let r = p.send(msg).unwrap();
        // Round robin from wherever the producer started (a random queue, as RocketMQ's
        // producers do): message i goes to the queue after message i - 1's.
        let first = *first_queue.get_or_insert(r.queue_id as usize);
        assert_eq!(r.queue_id as usize, (first + i) % 4, "message {i}");
        sent.push((r.msg_id.clone(), r.queue_id, i));
    }

    let consumer = PullConsumer::new(&ns, "test-group").unwrap();
    let got = drain_topic(&consumer, "Orders", Duration::from_secs(30));
    assert_eq!(
        got.len(),
        200,
        "every acknowledged message is consumed once"
    );
    let by_id: HashMap<_, _> = got.iter().map(|m| (m.msg_id.clone(), m)).collect();
    assert_eq!(by_id.len(), 200, "no duplicates");
    for (id, queue, i) in &sent {
        let m = by_id
            .get(id)
            .unwrap_or_else(|| panic!("message {i} ({id}) missing"));
        assert_eq!(
            m.body.as_ref(),
            body_of(*i).as_slice(),
            "body of message {i}"
        );
        assert_eq!(m.keys, vec![format!("order-{i}")]);
        assert_eq!(
            m.tags.as_deref(),
            Some(if i % 2 == 0 { "TagA" } else { "TagB" })
        );
        assert_eq!(m.queue_id, *queue);
        assert_eq!(m.topic, "Orders");
    }
    // Within each queue, offsets are consecutive and follow the send order.
    let mut per_queue: HashMap<u32, Vec<&client::MessageExt>> = HashMap::new();
    for m in &got {
        per_queue.entry(m.queue_id).or_default().push(m);
    }
    for (q, msgs) in per_queue {
        for (n, m) in msgs.iter().enumerate() {
            assert_eq!(
                m.queue_offset.0, n as u64,
                "queue {q} offsets are consecutive"
            );
            // The n-th message of queue q is the one sent n rounds after the first to q.
            let first = first_queue.unwrap_or(0);
            let expected = body_of(n * 4 + (q as usize + 4 - first) % 4);
            assert_eq!(
                m.body.as_ref(),
                expected.as_slice(),
                "queue {q} keeps send order"
            );
        }
    }

    // The broker filters by tag.
    let only_a = drain_topic_with(&consumer, "Orders", "TagA", Duration::from_secs(30));
    assert_eq!(only_a.len(), 100);
    assert!(only_a.iter().all(|m| m.tags.as_deref() == Some("TagA")));
    let both = drain_topic_with(&consumer, "Orders", "TagA || TagB", Duration::from_secs(30));
    assert_eq!(both.len(), 200);
}

#[test]
fn mqadmin_send_then_consume_prints_the_message() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    let out = mqadmin(&ns, &["updateTopic", "-t", "Tour", "-q", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = mqadmin(
        &ns,
        &[
            "sendMessage",
            "-t",
            "Tour",
            "-p",
            "hello corvus",
            "-k",
            "k1",
            "-c",
            "TagA",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let msg_id = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("msg_id="))
        .unwrap_or_else(|| panic!("no msg_id in {stdout}"))
        .to_owned();
    assert_eq!(msg_id.len(), 32);

    let out = mqadmin(
        &ns,
        &[
            "--json",
            "consume",
            "-t",
            "Tour",
            "--from",
            "first",
            "--max",
            "1",
            "--timeout-ms",
            "3000",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .next()
        .unwrap_or_else(|| panic!("nothing consumed"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["topic"], "Tour");
    assert_eq!(v["msg_id"], msg_id.as_str());
    assert_eq!(v["body"], "hello corvus");
    assert_eq!(v["tags"], "TagA");
    assert_eq!(v["keys"], serde_json::json!(["k1"]));

    // Human format, filtered by a tag that matches nothing.
    let out = mqadmin(
        &ns,
        &[
            "consume",
            "-t",
            "Tour",
            "--from",
            "first",
            "-c",
            "TagZ",
            "--timeout-ms",
            "500",
        ],
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn topics_are_created_on_first_send_and_listed() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    let p = producer(&ns);
    let r = p.send(Message::new("Fresh", &b"first"[..])).unwrap();
    assert_eq!(r.queue_offset.0, 0);
    let out = mqadmin(&ns, &["topic-list"]);
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "Fresh"));
    let consumer = PullConsumer::new(&ns, "g").unwrap();
    let got = drain_topic(&consumer, "Fresh", Duration::from_secs(10));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.as_ref(), b"first");
}
