#![allow(clippy::unwrap_used)]
//! ConsumeQueues and IndexFiles are derived data: lost or lagging, they are rebuilt from
//! the CommitLog on open.

mod common;

use common::*;
use message::TagFilter;
use shard::Shard;

#[test]
fn deleted_consume_queue_and_index_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        for i in 0..50 {
            let key = format!("order-{i}");
            shard
                .append(
                    TOPIC,
                    (i % 3) as u32,
                    &record(TOPIC, &body(i, 200), None, Some(&key)),
                )
                .await
                .unwrap();
        }
        shard.close().await.unwrap();
    });
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        for q in 0..3u32 {
            let got = read_all(&shard, TOPIC, q, &TagFilter::All).await;
            let expected: Vec<_> = (0..50)
                .filter(|i| i % 3 == q as usize)
                .map(|i| body(i, 200))
                .collect();
            assert_eq!(bodies_of(&got), expected, "queue {q}");
        }
        let hits = shard
            .query_by_key(TOPIC, "order-17", 0, i64::MAX, 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(
            bodies_of(&[hits[0].as_bytes().to_vec()]),
            vec![body(17, 200)]
        );
        shard.close().await.unwrap();
    });
}

#[test]
fn consume_queue_entries_past_the_log_end_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let cut = shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let mut cut = 0;
        for i in 0..10 {
            let r = append_one(&shard, 0, &body(i, 200)).await.unwrap();
            if i == 6 {
                cut = r.first_commit_log_offset.into();
            }
        }
        shard.close().await.unwrap();
        cut
    });
    // The log loses records 6.. (as if they never reached the disk) but the CQ kept them.
    let seg = dir.path().join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[cut as usize..].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(shard.queue_offsets(TOPIC, 0).max, 6);
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 6);
        let r = append_one(&shard, 0, b"new").await.unwrap();
        assert_eq!(
            (r.first_queue_offset, r.first_commit_log_offset),
            (QueueOffset(6), CommitLogOffset(cut))
        );
        shard.close().await.unwrap();
    });
}
