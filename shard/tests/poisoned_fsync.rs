#![allow(clippy::unwrap_used)]
//! A failed fdatasync poisons the shard: the waiting append fails, later appends are
//! refused with `Poisoned`, and nothing pretends the data is durable (fsyncgate).

mod common;

use std::time::Duration;

use common::*;
use shard::{FlushPolicy, Shard, ShardError};

#[test]
fn failed_fsync_poisons_and_refuses_writes() {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(small_config(&p));
        let shard = Shard::open(c).await.unwrap();
        append_one(&shard, 0, b"durable").await.unwrap();
        let durable = shard.stats().durable_offset;
        f.fail_fsyncs(true);
        let r = append_one(&shard, 0, b"lost").await;
        assert!(
            matches!(r, Err(ShardError::Poisoned { ref operation, .. }) if operation == "fdatasync"),
            "{r:?}"
        );
        // Even with the disk healthy again, the shard does not retry and pretend.
        f.fail_fsyncs(false);
        let r = append_one(&shard, 0, b"later").await;
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
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.flush = FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 1 << 20,
        };
        let (c, f) = with_faults(c);
        let shard = Shard::open(c).await.unwrap();
        f.fail_fsyncs(true);
        append_one(&shard, 0, b"in memory").await.unwrap();
        // The background sync (every 5 ms) fails and poisons the shard.
        eventually(Duration::from_secs(5), Duration::from_millis(2), || {
            shard.stats().poisoned
        })
        .await;
        assert!(shard.stats().poisoned);
        assert!(matches!(
            append_one(&shard, 0, b"x").await,
            Err(ShardError::Poisoned { .. })
        ));
    });
}
