#![allow(clippy::unwrap_used)]
//! The limits a running shard takes (`Shard::set_limits`): the next append and the next
//! retention pass read them, records stored under a higher limit stay readable, and limits
//! the shard could not run with are refused with nothing changed.

mod common;

use std::time::Duration;

use common::*;
use message::TagFilter;
use shard::{Clock, DiskUsageSource, Shard, ShardError};

#[test]
fn a_lowered_message_limit_refuses_the_next_append_and_old_records_stay_readable() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let big = record(TOPIC, &vec![7u8; 8 << 10], None, None);
        shard.append(TOPIC, 0, &big).await.unwrap();

        let mut limits = shard.limits();
        limits.message_bytes_max = 4 << 10;
        shard.set_limits(limits).unwrap();
        match shard.append(TOPIC, 0, &big).await {
            Err(ShardError::MessageTooLarge { max, .. }) => assert_eq!(max, 4 << 10),
            other => panic!("expected MessageTooLarge, got {other:?}"),
        }
        let small = record(TOPIC, &[1u8; 100], None, None);
        shard.append(TOPIC, 0, &small).await.unwrap();
        // The record stored under the old limit is still served whole.
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        assert_eq!(got.len(), 2);
        let first = shard.read_at(CommitLogOffset(0)).await.unwrap();
        assert_eq!(first.map(|s| s.as_bytes().len()), Some(big.len()));

        limits.message_bytes_max = 16 << 10;
        shard.set_limits(limits).unwrap();
        shard.append(TOPIC, 0, &big).await.unwrap();
        shard.close().await.unwrap();
    });
}

/// A limit lowered and then kept across a restart (as `broker-overrides.toml` keeps it): the
/// records stored under the old one are read whole by offset and by queue after the reopen.
#[test]
fn records_above_a_limit_lowered_before_a_restart_are_still_read() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let big = record(TOPIC, &vec![7u8; 8 << 10], None, None);
        shard.append(TOPIC, 0, &big).await.unwrap();
        shard.close().await.unwrap();

        let mut c = small_config(&p);
        c.message_bytes_max = 4 << 10;
        let shard = Shard::open(c).await.unwrap();
        let first = shard.read_at(CommitLogOffset(0)).await.unwrap();
        assert_eq!(first.map(|s| s.as_bytes().len()), Some(big.len()));
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 1);
        assert!(matches!(
            shard.append(TOPIC, 0, &big).await,
            Err(ShardError::MessageTooLarge { .. })
        ));
        shard.close().await.unwrap();
    });
}

#[test]
fn limits_the_shard_cannot_run_with_are_refused_and_nothing_changes() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let before = shard.limits();
        let mut bad = before;
        bad.message_bytes_max = 128 << 10; // more than a 64 KiB segment holds
        assert!(matches!(shard.set_limits(bad), Err(ShardError::Config(_))));
        let mut bad = before;
        bad.disk_clean_ratio = 0.95; // above the force-clean ratio
        assert!(matches!(shard.set_limits(bad), Err(ShardError::Config(_))));
        assert_eq!(shard.limits(), before);
        shard.close().await.unwrap();
    });
}

/// A shortened `file_reserved_hours` is read by the next retention pass.
#[test]
fn a_shortened_reserved_time_deletes_at_the_next_retention_pass() {
    in_temp_dir(move |p| async move {
        let clock = Clock::manual();
        let mut c = small_config(&p);
        c.file_reserved_hours = 48;
        c.clock = clock.clone();
        c.disk_usage = DiskUsageSource::from_fn(|_| Ok(0.1));
        let shard = Shard::open(c).await.unwrap();
        append_numbered(&shard, 0..200, 900).await;
        let before = std::fs::read_dir(p.join("commitlog")).unwrap().count();
        assert!(before >= 3);
        clock.advance(Duration::from_secs(2 * 3600));
        assert_eq!(shard.run_retention().await.unwrap().deleted_segments, 0);
        let mut limits = shard.limits();
        limits.file_reserved_hours = 1;
        shard.set_limits(limits).unwrap();
        let r = shard.run_retention().await.unwrap();
        assert_eq!(r.deleted_segments, before - 1, "all but the active segment");
        shard.close().await.unwrap();
    });
}
