//! `mqadmin consumer-progress` reports the exact backlog, before and after consumption and
//! after retention deleted the segments the group had not read; the metrics agree.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use client::{Message, PullConsumer, QueueOffset};
use integration::{drain_topic, mqadmin, producer, wait_for, Cluster};

fn progress(ns: &str) -> (Vec<serde_json::Value>, serde_json::Value) {
    let out = mqadmin(
        ns,
        &["--json", "consumer-progress", "-g", "g", "-t", "Progress"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let total = rows.pop().unwrap();
    (rows, total)
}

#[test]
fn backlog_is_exact_before_and_after_consumption_and_after_retention() {
    // Any real disk is more than 1% used: retention deletes every segment but the active one.
    let cfg = "disk_clean_ratio = 0.01\ndisk_force_clean_ratio = 0.98\ndisk_refuse_ratio = 0.99\ndisk_check_interval_ms = 200\n";
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(cfg.to_owned()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Progress", 1);
    let p = producer(&ns);
    for i in 0..10 {
        p.send(Message::new("Progress", format!("m{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, "g").unwrap();
    let q = consumer.queues("Progress").unwrap().remove(0);

    // No offset yet: everything stored is backlog.
    let (rows, total) = progress(&ns);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["broker_offset"], 10);
    assert_eq!(rows[0]["consumer_offset"], serde_json::Value::Null);
    assert_eq!(total["total_backlog"], 10);

    consumer.commit_offset(&q, QueueOffset(4)).unwrap();
    let (rows, total) = progress(&ns);
    assert_eq!(rows[0]["consumer_offset"], 4);
    assert_eq!(rows[0]["backlog"], 6);
    assert_eq!(total["total_backlog"], 6);
    assert!(rows[0]["last_consume_time_ms"].as_i64().unwrap() > 0);

    consumer.commit_offset(&q, QueueOffset(10)).unwrap();
    let (_, total) = progress(&ns);
    assert_eq!(total["total_backlog"], 0);

    // Enough 1 KiB messages to fill the 4 MiB segment the group has read from.
    let body = vec![b'x'; 1024];
    for _ in 0..6000 {
        p.send(Message::new("Progress", body.clone())).unwrap();
    }
    let rows = wait_for(Duration::from_secs(20), || {
        let (rows, _) = progress(&ns);
        (rows[0]["min_offset"].as_u64().unwrap() > 10).then_some(rows)
    })
    .expect("retention deletes the first segment");
    let min = rows[0]["min_offset"].as_u64().unwrap();
    let max = rows[0]["broker_offset"].as_u64().unwrap();
    assert_eq!(max, 6010);
    assert_eq!(rows[0]["consumer_offset"], 10);
    // The group's offset points into deleted data: what it can still consume is min..max.
    assert_eq!(
        rows[0]["backlog"].as_u64().unwrap(),
        max - min,
        "exact, never negative"
    );
    let still_stored = drain_topic(&consumer, "Progress", Duration::from_secs(30)).len() as u64;
    assert_eq!(still_stored, max - min);
}
