//! Every send mode of the producer against the real broker: sync, async with callbacks,
//! batch, oneway; and a push consumer that receives messages sent after it started.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{ConsumeFrom, ConsumeStatus, Message, PullConsumer, PushConsumer};
use integration::{drain_topic, producer, Cluster};

#[test]
fn async_batch_and_oneway_sends_are_all_stored() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Modes", 4);
    let p = producer(&ns);

    let (tx, rx) = mpsc::channel();
    for i in 0..300 {
        let tx = tx.clone();
        p.send_async(
            Message::new("Modes", format!("async-{i}").into_bytes()),
            move |r| {
                let _ = tx.send(r.map(|s| s.msg_id));
            },
        )
        .unwrap();
    }
    drop(tx);
    let mut acked = HashSet::new();
    for _ in 0..300 {
        let id = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("every callback runs")
            .unwrap();
        acked.insert(id);
    }
    assert_eq!(acked.len(), 300);

    let batch: Vec<Message> = (0..50)
        .map(|i| Message::new("Modes", format!("batch-{i}").into_bytes()))
        .collect();
    let batch_result = p.send_batch(batch).unwrap();
    assert_eq!(batch_result.len(), 50);
    let results = batch_result.results();
    assert_eq!(results.len(), 50);
    let q = results[0].queue_id;
    assert!(
        results.iter().all(|r| r.queue_id == q),
        "a batch goes to one queue"
    );
    for w in results.windows(2) {
        assert_eq!(
            w[1].queue_offset.0,
            w[0].queue_offset.0 + 1,
            "a batch is stored contiguously"
        );
    }

    for i in 0..20 {
        p.send_oneway(Message::new("Modes", format!("oneway-{i}").into_bytes()))
            .unwrap();
    }

    let consumer = PullConsumer::new(&ns, "g").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        let got = drain_topic(&consumer, "Modes", Duration::from_secs(20));
        if got.len() >= 370 || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(got.len(), 370, "300 async + 50 batch + 20 oneway");
    let bodies: HashSet<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    for i in 0..20 {
        assert!(bodies.contains(&format!("oneway-{i}")));
    }
    // Each batch message is where its result says, under the id it says.
    for (i, r) in results.iter().enumerate() {
        let m = got
            .iter()
            .find(|m| m.msg_id == r.msg_id)
            .unwrap_or_else(|| panic!("batch message {i} ({}) not consumed", r.msg_id));
        assert_eq!(&m.body[..], format!("batch-{i}").as_bytes());
        assert_eq!(
            (m.queue_id, m.queue_offset, m.commit_log_offset),
            (r.queue_id, r.queue_offset, r.commit_log_offset)
        );
        assert_eq!(m.offset_msg_id, r.offset_msg_id);
    }
}

#[test]
fn push_consumer_receives_messages_sent_after_it_started() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Pushed", 2);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let consumer = PushConsumer::builder()
        .namesrv(ns.clone())
        .group("push-group")
        .subscribe("Pushed", "TagA")
        .consume_from(ConsumeFrom::Last)
        .build()
        .unwrap();
    consumer
        .start(move |msgs: &[client::MessageExt]| {
            let mut s = sink.lock().unwrap();
            s.extend(
                msgs.iter()
                    .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
            );
            ConsumeStatus::Success
        })
        .unwrap();
    // The consumer starts from the end of each queue once it reads there: sentinels (TagA)
    // are sent to a queue until one arrives from it, so the 40 below are sent after it
    // started on both queues.
    let p = producer(&ns);
    let deadline = Instant::now() + Duration::from_secs(20);
    for queue_id in 0..2u32 {
        let q = client::MessageQueue {
            topic: "Pushed".into(),
            broker_name: "broker-a".into(),
            queue_id,
        };
        let prefix = format!("sentinel-{queue_id}-");
        let mut n = 0;
        loop {
            assert!(
                Instant::now() < deadline,
                "no sentinel arrived from queue {queue_id}"
            );
            let body = format!("{prefix}{n}");
            p.send_to_queue(
                Message::new("Pushed", body.into_bytes()).with_tags("TagA"),
                &q,
            )
            .unwrap();
            n += 1;
            let arrived = integration::wait_for(Duration::from_millis(500), || {
                seen.lock()
                    .unwrap()
                    .iter()
                    .any(|b: &String| b.starts_with(&prefix))
                    .then_some(())
            });
            if arrived.is_some() {
                break;
            }
        }
    }
    for i in 0..40 {
        let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
        p.send(Message::new("Pushed", format!("p{i}").into_bytes()).with_tags(tag))
            .unwrap();
    }
    let sent_here = || -> Vec<String> {
        let s = seen.lock().unwrap();
        s.iter()
            .filter(|b| !b.starts_with("sentinel-"))
            .cloned()
            .collect()
    };
    let done = integration::wait_for(Duration::from_secs(20), || {
        (sent_here().len() >= 20).then_some(())
    });
    consumer.shutdown();
    assert!(done.is_some(), "only {} of 20 delivered", sent_here().len());
    let got = sent_here();
    let expected: HashSet<String> = (0..40)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("p{i}"))
        .collect();
    assert_eq!(
        got.iter().cloned().collect::<HashSet<_>>(),
        expected,
        "TagA messages only, each once"
    );
    assert_eq!(got.len(), 20);
}
