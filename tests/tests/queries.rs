//! Messages sent with keys are found again by key, by id (offset id and msg id) and by queue
//! offset; search-offset finds the queue offset at a time.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use client::Message;
use integration::{mqadmin, producer, Cluster};

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "mqadmin failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What `mqadmin --json search-offset` prints for queue `queue` of `Queried` at `time_ms`.
fn search_offset(ns: &str, queue: &str, time_ms: &str) -> Vec<serde_json::Value> {
    json_lines(&mqadmin(
        ns,
        &[
            "--json",
            "search-offset",
            "-t",
            "Queried",
            "-q",
            queue,
            "--time-ms",
            time_ms,
        ],
    ))
}

#[test]
fn every_message_is_found_by_key_id_and_offset() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Queried", 4);
    let p = producer(&ns);
    let mut sent = Vec::new();
    for i in 0..20 {
        let msg = Message::new("Queried", format!("body-{i}").into_bytes())
            .with_keys([format!("order-{i}"), "shared-key".to_owned()])
            .with_tags("TagQ")
            .with_property("shop", "north");
        sent.push(p.send(msg).unwrap());
    }

    for (i, r) in sent.iter().enumerate() {
        let key = format!("order-{i}");
        let found = json_lines(&mqadmin(
            &ns,
            &["--json", "query-by-key", "-t", "Queried", "-k", &key],
        ));
        assert_eq!(found.len(), 1, "exactly one message has key {key}");
        let m = &found[0];
        assert_eq!(m["body"], format!("body-{i}"));
        assert_eq!(m["msg_id"], r.msg_id.as_str());
        assert_eq!(m["tags"], "TagQ");
        assert_eq!(m["properties"]["shop"], "north");
        assert!(m["store_timestamp_ms"].as_i64().unwrap() > 0);

        let by_offset_id = json_lines(&mqadmin(
            &ns,
            &["--json", "queryMsgById", "-i", &r.offset_msg_id],
        ));
        assert_eq!(by_offset_id.len(), 1);
        assert_eq!(by_offset_id[0]["body"], format!("body-{i}"));
        let by_uniq = json_lines(&mqadmin(
            &ns,
            &["--json", "query-by-id", "-i", &r.msg_id, "-t", "Queried"],
        ));
        assert_eq!(by_uniq.len(), 1);
        assert_eq!(by_uniq[0]["body"], format!("body-{i}"));

        let q = r.queue_id.to_string();
        let o = r.queue_offset.0.to_string();
        let at = json_lines(&mqadmin(
            &ns,
            &[
                "--json",
                "query-by-offset",
                "-t",
                "Queried",
                "-q",
                &q,
                "-o",
                &o,
            ],
        ));
        assert_eq!(at[0]["body"], format!("body-{i}"));
        assert_eq!(at[0]["msg_id"], r.msg_id.as_str());
    }
    // A key several messages share.
    let shared = json_lines(&mqadmin(
        &ns,
        &[
            "--json",
            "query-by-key",
            "-t",
            "Queried",
            "-k",
            "shared-key",
        ],
    ));
    assert_eq!(shared.len(), 20);
    // Keys of another topic, and unknown keys, find nothing (and say so).
    let out = mqadmin(&ns, &["query-by-key", "-t", "Queried", "-k", "no-such-key"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-key"));
    let out = mqadmin(
        &ns,
        &["query-by-offset", "-t", "Queried", "-q", "0", "-o", "999"],
    );
    assert!(!out.status.success());

    // search-offset: before everything is offset 0; after everything is the queue's end.
    let out = search_offset(&ns, "1", "0");
    assert_eq!(out[0]["offset"], 0);
    let later = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000)
        .to_string();
    let out = search_offset(&ns, "1", &later);
    assert_eq!(out[0]["offset"], 5, "queue 1 holds 5 messages");
}
