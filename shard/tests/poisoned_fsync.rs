#![allow(clippy::unwrap_used)]
//! A failed fdatasync poisons the shard: the waiting append fails, later appends are
//! refused with `Poisoned`, and nothing pretends the data is durable (fsyncgate).

mod common;

use std::sync::Arc;

use common::*;
use shard::{FaultInjector, FlushPolicy, Shard, ShardError};

#[test]
fn failed_fsync_poisons_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let faults = Arc::new(FaultInjector::default());
    let f = faults.clone();
    shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.faults = Some(f.clone());
        let shard = Shard::open(c).await.unwrap();
        shard
            .append(TOPIC, 0, &record(TOPIC, b"durable", None, None))
            .await
            .unwrap();
        let durable = shard.stats().durable_offset;
        f.fail_fsyncs(true);
        let r = shard
            .append(TOPIC, 0, &record(TOPIC, b"lost", None, None))
            .await;
        assert!(
            matches!(r, Err(ShardError::Poisoned { ref operation, .. }) if operation == "fdatasync"),
            "{r:?}"
        );
        // Even with the disk healthy again, the shard does not retry and pretend.
        f.fail_fsyncs(false);
        let r = shard
            .append(TOPIC, 0, &record(TOPIC, b"later", None, None))
            .await;
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("poisoned"), "{msg}");
        let s = shard.stats();
        assert!(s.poisoned);
        assert_eq!(s.durable_offset, durable);
        assert!(shard.close().await.is_err());
    });
}

#[test]
fn async_flush_failure_poisons_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let faults = Arc::new(FaultInjector::default());
    let f = faults.clone();
    shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.flush = FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 1 << 20,
        };
        c.faults = Some(f.clone());
        let shard = Shard::open(c).await.unwrap();
        f.fail_fsyncs(true);
        shard
            .append(TOPIC, 0, &record(TOPIC, b"in memory", None, None))
            .await
            .unwrap();
        // The background sync (every 5 ms) fails and poisons the shard.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !shard.stats().poisoned && std::time::Instant::now() < deadline {
            glommio::timer::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(shard.stats().poisoned);
        assert!(matches!(
            shard
                .append(TOPIC, 0, &record(TOPIC, b"x", None, None))
                .await,
            Err(ShardError::Poisoned { .. })
        ));
    });
}
