#![allow(clippy::unwrap_used)]
//! The async flush policy syncs in the background while appends keep coming, and once
//! appends stop, everything appended becomes durable within about one interval, partial
//! chunk included, without anyone calling `sync`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use shard::{FlushPolicy, Shard};

#[test]
fn async_flush_makes_appends_durable_while_they_continue_and_after_they_stop() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.segment_bytes = 1 << 20;
        c.flush = FlushPolicy::Async {
            interval_ms: 10,
            dirty_bytes_max: 64 << 10,
        };
        let shard = Shard::open(c).await.unwrap();
        let batch = record(TOPIC, &[7u8; 900], Some("T"), None).repeat(4);
        // Appends keep coming; the durable offset must move (twice) meanwhile, with nobody
        // calling `sync`. On a loaded host a sync may take long: the appends go on until it
        // has moved, for at most 20 s.
        let mut durable_seen = vec![shard.stats().durable_offset];
        let start = Instant::now();
        let mut appended = 0u64;
        while durable_seen.len() < 3 && start.elapsed() < Duration::from_secs(20) {
            for _ in 0..8 {
                shard.append(TOPIC, 0, &batch).await.unwrap();
                appended += 1;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
            durable_seen.push(shard.stats().durable_offset);
            durable_seen.dedup();
        }
        assert!(
            durable_seen.len() >= 3,
            "durable offset moved only {} times over {appended} appends: {durable_seen:?}",
            durable_seen.len() - 1
        );
        // Appends stopped: the tail (a partly filled chunk) becomes durable on its own.
        let end = shard.stats().write_offset;
        let deadline = Instant::now() + Duration::from_secs(5);
        while shard.stats().durable_offset < end && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        let s = shard.stats();
        assert_eq!(s.durable_offset, end, "{s:?}");
        assert_eq!(s.written_offset, end);
        assert!(!s.poisoned);
        shard.close().await.unwrap();
    });
}
