#![allow(clippy::unwrap_used)]
//! A write torn in the middle (crash during a write) loses only the unacknowledged tail:
//! recovery truncates to the last whole record, serves nothing torn, and appends go on.

mod common;

use std::sync::Arc;

use common::*;
use message::TagFilter;
use shard::{FaultInjector, Shard, ShardError};

#[test]
fn torn_write_is_truncated_and_acknowledged_records_survive() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let faults = Arc::new(FaultInjector::default());
    let f = faults.clone();
    let acked = shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.faults = Some(f.clone());
        let shard = Shard::open(c).await.unwrap();
        let acked = append_numbered(&shard, 0..10, 500).await;
        // The next write tears in the middle of the next record: the append fails and the
        // "process dies" (the shard is dropped without close).
        let tear_at = shard.stats().write_offset + 200;
        f.tear_write_at(tear_at);
        let r = append_one(&shard, 0, &body(10, 500)).await;
        assert!(matches!(r, Err(ShardError::Poisoned { .. })), "{r:?}");
        acked
    });
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        assert_eq!(bodies_of(&got), acked);
        assert_eq!(
            shard.queue_offsets(TOPIC, 0).max,
            10,
            "CQ entry of the torn record dropped"
        );
        let r = append_one(&shard, 0, b"after").await.unwrap();
        assert_eq!(r.first_queue_offset, 10);
        shard.close().await.unwrap();
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 11);
        shard.close().await.unwrap();
    });
}

#[test]
fn garbage_appended_to_the_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let end = shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        append_numbered(&shard, 0..5, 100).await;
        let end = shard.stats().write_offset;
        shard.close().await.unwrap();
        end
    });
    // Half of a valid-looking record header after the end, as a crash mid-write leaves it.
    let seg = dir.path().join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let rec = record(TOPIC, b"half", None, None);
    bytes[end.0 as usize..end.0 as usize + 60].copy_from_slice(&rec[..60]);
    std::fs::write(&seg, &bytes).unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(shard.stats().write_offset, end);
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 5);
        shard.close().await.unwrap();
    });
    // The stale half record was zeroed on disk.
    let bytes = std::fs::read(&seg).unwrap();
    assert!(bytes[end.0 as usize..end.0 as usize + 60]
        .iter()
        .all(|&b| b == 0));
}
