#![allow(clippy::unwrap_used)]
//! Tag filtering on reads, key queries through the IndexFile, search by time, long polling
//! and sync-flush group commit.

mod common;

use std::time::Duration;

use common::*;
use message::{RecordView, TagFilter};
use shard::{FlushPolicy, ReadRequest, ReadStatus, Shard};

#[test]
fn tag_filter_returns_only_matching_records() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        for i in 0..30 {
            let tag = ["TagA", "TagB", "TagC"][i % 3];
            shard
                .append(TOPIC, 0, &record(TOPIC, &body(i, 50), Some(tag), None))
                .await
                .unwrap();
        }
        let f = TagFilter::parse("TagA || TagC");
        let got = read_all(&shard, TOPIC, 0, &f).await;
        assert_eq!(got.len(), 20);
        assert!(got
            .iter()
            .all(|r| RecordView::parse(r).unwrap().tags() != Some("TagB")));
        let only_b = TagFilter::parse("TagB");
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(0),
                max_messages: 1,
                max_bytes: 1 << 20,
                filter: &only_b,
            })
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset, r.records.len()),
            (ReadStatus::Found, QueueOffset(2), 1)
        );
        let none = TagFilter::parse("TagZ");
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(0),
                max_messages: 32,
                max_bytes: 1 << 20,
                filter: &none,
            })
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset),
            (ReadStatus::NoMatchedMessage, QueueOffset(30))
        );
        shard.close().await.unwrap();
    });
}

#[test]
fn query_by_key_verifies_topic_and_key_and_time() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        for i in 0..300 {
            let keys = format!("k{} shared", i % 50);
            shard
                .append(TOPIC, 0, &record(TOPIC, &body(i, 40), None, Some(&keys)))
                .await
                .unwrap();
        }
        shard
            .append("Other", 0, &record("Other", b"other", None, Some("k7")))
            .await
            .unwrap();
        let hits = shard
            .query_by_key(TOPIC, "k7", 0, i64::MAX, 100)
            .await
            .unwrap();
        let bodies = bodies_of(
            &hits
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        );
        let expected: Vec<_> = (0..300)
            .filter(|i| i % 50 == 7)
            .map(|i| body(i, 40))
            .collect();
        assert_eq!(bodies, expected);
        assert_eq!(
            shard
                .query_by_key(TOPIC, "shared", 0, i64::MAX, 10)
                .await
                .unwrap()
                .len(),
            10
        );
        assert!(
            shard
                .query_by_key(TOPIC, "k7", 0, 1000, 10)
                .await
                .unwrap()
                .is_empty(),
            "time range"
        );
        assert_eq!(
            shard
                .query_by_key("Other", "k7", 0, i64::MAX, 10)
                .await
                .unwrap()
                .len(),
            1
        );
        // Survives a restart (IndexFile is on disk), and by time works on the queue.
        shard.close().await.unwrap();
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(
            shard
                .query_by_key(TOPIC, "k7", 0, i64::MAX, 100)
                .await
                .unwrap()
                .len(),
            6
        );
        assert_eq!(shard.search_offset_by_time(TOPIC, 0, 0).await.unwrap(), 0);
        assert_eq!(
            shard
                .search_offset_by_time(TOPIC, 0, i64::MAX)
                .await
                .unwrap(),
            300
        );
        shard.close().await.unwrap();
    });
}

#[test]
fn long_polling_wakes_on_append_and_times_out() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert!(
            !shard
                .wait_for_message(TOPIC, 0, QueueOffset(0), Duration::from_millis(20))
                .await
        );
        let s2 = shard.clone();
        let t = glommio::spawn_local(async move {
            glommio::timer::sleep(Duration::from_millis(10)).await;
            s2.append(TOPIC, 0, &record(TOPIC, b"wake", None, None))
                .await
                .unwrap();
        });
        assert!(
            shard
                .wait_for_message(TOPIC, 0, QueueOffset(0), Duration::from_secs(5))
                .await
        );
        t.await;
        shard.close().await.unwrap();
    });
}

#[test]
fn sync_flush_group_commit_makes_every_append_durable() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.flush = FlushPolicy::Sync;
        let shard = Shard::open(c).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..64 {
            let s = shard.clone();
            tasks.push(glommio::spawn_local(async move {
                let r = s
                    .append(TOPIC, 0, &record(TOPIC, &body(i, 100), None, None))
                    .await
                    .unwrap();
                let end = r.first_commit_log_offset
                    + record(TOPIC, &body(i, 100), None, None).len() as u64;
                assert!(
                    s.stats().durable_offset >= end,
                    "acknowledged before durable"
                );
            }));
        }
        for t in tasks {
            t.await;
        }
        let s = shard.stats();
        assert_eq!(s.durable_offset, s.write_offset);
        assert_eq!(shard.queue_offsets(TOPIC, 0).max, 64);
        shard.close().await.unwrap();
    });
}

#[test]
fn async_flush_becomes_durable_within_the_interval() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.flush = FlushPolicy::Async {
            interval_ms: 10,
            dirty_bytes_max: 1 << 30,
        };
        let shard = Shard::open(c).await.unwrap();
        append_one(&shard, 0, b"soon").await.unwrap();
        let end = shard.stats().write_offset;
        for _ in 0..200 {
            if shard.stats().durable_offset >= end {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(shard.stats().durable_offset, end);
        shard.close().await.unwrap();
    });
}
