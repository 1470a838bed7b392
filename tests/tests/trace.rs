//! Message trace: a native producer and push consumer with tracing on write their Pub,
//! SubBefore and SubAfter records to `RMQ_SYS_TRACE_TOPIC`, and `mqadmin queryMsgTraceById`
//! shows the send and the consume of a message by its id.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{ConsumeStatus, Message, Producer};
use integration::{group_member, mqadmin, wait_for, Cluster};

#[test]
fn sends_and_consumes_of_traced_clients_are_found_by_msg_id() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Traced", 2);

    let p = Producer::builder()
        .namesrv(&ns)
        .group("traced-producer")
        .enable_trace(true)
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let sent = p
            .send(
                Message::new("Traced", format!("traced-{i}"))
                    .with_key(format!("order-{i}"))
                    .with_tags("TagT"),
            )
            .unwrap();
        ids.push(sent.msg_id);
    }

    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = Arc::clone(&seen);
    let consumer = group_member(&ns, "traced-consumers", "Traced")
        .enable_trace(true)
        .build()
        .unwrap();
    consumer
        .start(move |msgs| {
            let mut s = s.lock().unwrap();
            for m in msgs {
                s.insert(m.msg_id.clone());
            }
            ConsumeStatus::Success
        })
        .unwrap();
    wait_for(Duration::from_secs(20), || {
        (seen.lock().unwrap().len() == 3).then_some(())
    })
    .expect("the consumer gets the three messages");

    // Trace records are written in the background, within a second or so.
    for id in &ids {
        let views = wait_for(Duration::from_secs(20), || {
            let out = mqadmin(&ns, &["--json", "queryMsgTraceById", "-i", id]);
            if !out.status.success() {
                return None;
            }
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let views = v["views"].as_array().cloned().unwrap_or_default();
            let kinds: Vec<&str> = views.iter().filter_map(|v| v["type"].as_str()).collect();
            (kinds.contains(&"Pub") && kinds.contains(&"Sub")).then_some(views)
        })
        .unwrap_or_else(|| panic!("the trace of {id} shows its send and its consume"));
        let pubs: Vec<_> = views.iter().filter(|v| v["type"] == "Pub").collect();
        let subs: Vec<_> = views.iter().filter(|v| v["type"] == "Sub").collect();
        assert_eq!(pubs.len(), 1, "{views:?}");
        assert_eq!(pubs[0]["group"], "traced-producer");
        assert_eq!(pubs[0]["status"], "success");
        assert_eq!(subs.len(), 1, "{views:?}");
        assert_eq!(subs[0]["group"], "traced-consumers");
        assert_eq!(subs[0]["status"], "success");
    }

    // The text form is RocketMQ's two tables.
    let out = mqadmin(&ns, &["queryMsgTraceById", "-i", &ids[0]]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("#ProducerGroup") && text.contains("#ConsumerGroup"),
        "{text}"
    );
    assert!(
        text.contains("traced-producer") && text.contains("traced-consumers"),
        "{text}"
    );

    // Trace messages are keyed by the messages' keys too.
    let out = mqadmin(
        &ns,
        &[
            "--json",
            "query-by-key",
            "-t",
            client::trace::TRACE_TOPIC,
            "-k",
            "order-1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bodies: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["body"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert!(bodies.iter().any(|b| b.contains(&ids[1])), "{bodies:?}");

    // An id nobody traced is an error, not an empty table.
    let out = mqadmin(
        &ns,
        &[
            "queryMsgTraceById",
            "-i",
            "00000000000000000000000000000000",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trace"));
    consumer.shutdown();
    p.shutdown();
}
