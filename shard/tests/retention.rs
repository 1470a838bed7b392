#![allow(clippy::unwrap_used)]
//! Retention deletes whole old segments; readers behind are told where the log starts;
//! a full disk refuses writes with a clear error.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use message::TagFilter;
use std::time::Duration;

use shard::{Clock, DiskLevel, DiskUsageSource, ReadRequest, ReadStatus, Shard, ShardError};

#[test]
fn expired_segments_go_and_readers_behind_are_moved() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.file_reserved_hours = 0; // everything not active is expired
        let shard = Shard::open(c).await.unwrap();
        append_numbered(&shard, 0..200, 900).await;
        let before = std::fs::read_dir(p.join("commitlog")).unwrap().count();
        assert!(before >= 3);
        let report = shard.run_retention().await.unwrap();
        assert_eq!(
            report.deleted_segments,
            before - 1,
            "all but the active segment"
        );
        assert_eq!(std::fs::read_dir(p.join("commitlog")).unwrap().count(), 1);
        let s = shard.stats();
        assert_eq!(s.min_offset, report.min_offset);
        assert_eq!(s.min_offset.0 % (64 << 10), 0);
        let q = shard.queue_offsets(TOPIC, 0);
        assert!(q.min > 0 && q.max == 200);
        let all = TagFilter::All;
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(0),
                max_messages: 4,
                max_bytes: 1 << 20,
                filter: &all,
            })
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset),
            (ReadStatus::OffsetMoved, q.min)
        );
        let got = read_all(&shard, TOPIC, 0, &all).await;
        assert_eq!(got.len() as u64, 200 - q.min.0);
        assert!(shard.read_at(CommitLogOffset(0)).await.unwrap().is_none());
        shard.close().await.unwrap();
        // After a restart the minimums are where retention left them.
        let mut c = small_config(&p);
        c.file_reserved_hours = 0;
        let shard = Shard::open(c).await.unwrap();
        assert_eq!(shard.queue_offsets(TOPIC, 0), q);
        shard.close().await.unwrap();
    });
}

/// A segment goes once it is `file_reserved_hours` old by the shard's clock, not before;
/// and records carry that clock's time, so a search by time finds them by it.
#[test]
fn a_segment_expires_when_the_clock_passes_its_reserved_time() {
    in_temp_dir(move |p| async move {
        let clock = Clock::manual();
        let mut c = small_config(&p);
        c.file_reserved_hours = 2;
        c.clock = clock.clone();
        // Age alone decides here: the host's disk, shared with everything else on it, may be
        // past the default clean ratio (75%), which would delete segments early.
        c.disk_usage = DiskUsageSource::from_fn(|_| Ok(0.1));
        let shard = Shard::open(c).await.unwrap();
        let first_at = clock.wall_ms();
        append_numbered(&shard, 0..100, 900).await;
        clock.advance(Duration::from_secs(3600));
        let later_at = clock.wall_ms();
        append_numbered(&shard, 100..200, 900).await;
        // The first record stamped after the hour is found by that time.
        assert_eq!(
            shard
                .search_offset_by_time(TOPIC, 0, first_at)
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            shard
                .search_offset_by_time(TOPIC, 0, later_at)
                .await
                .unwrap(),
            100
        );
        let before = std::fs::read_dir(p.join("commitlog")).unwrap().count();
        assert!(before >= 3);
        // Written at most an hour ago by the clock: kept.
        assert_eq!(shard.run_retention().await.unwrap().deleted_segments, 0);
        clock.advance(Duration::from_secs(3600 - 60));
        assert_eq!(shard.run_retention().await.unwrap().deleted_segments, 0);
        // Two hours and more after the files were written: all but the active one go.
        clock.advance(Duration::from_secs(120));
        let r = shard.run_retention().await.unwrap();
        assert_eq!(r.deleted_segments, before - 1);
        assert!(shard.queue_offsets(TOPIC, 0).min > 0);
        shard.close().await.unwrap();
    });
}

#[test]
fn disk_pressure_cleans_and_a_full_disk_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let ratio = Arc::new(AtomicU64::new(0.5f64.to_bits()));
    let r2 = ratio.clone();
    shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.disk_usage =
            DiskUsageSource::from_fn(move |_| Ok(f64::from_bits(r2.load(Ordering::SeqCst))));
        let shard = Shard::open(c).await.unwrap();
        append_numbered(&shard, 0..200, 900).await;
        // Not expired (72 h) and the disk is fine: nothing goes.
        assert_eq!(shard.run_retention().await.unwrap().deleted_segments, 0);
        // Above the clean ratio: the oldest segment goes, one per pass.
        ratio.store(0.80f64.to_bits(), Ordering::SeqCst);
        let r = shard.run_retention().await.unwrap();
        assert_eq!((r.deleted_segments, r.disk_level), (1, DiskLevel::Clean));
        // Full: writes are refused with the ratio and threshold in the error.
        ratio.store(0.95f64.to_bits(), Ordering::SeqCst);
        let r = shard.run_retention().await.unwrap();
        assert!(r.deleted_segments >= 1);
        let err = append_one(&shard, 0, b"x").await.unwrap_err();
        assert!(matches!(err, ShardError::DiskFull { threshold, .. } if threshold == 0.90));
        let msg = err.to_string();
        assert!(
            msg.contains("disk full") && msg.contains("0.950") && msg.contains("0.900"),
            "{msg}"
        );
        // Space freed: writes resume.
        ratio.store(0.5f64.to_bits(), Ordering::SeqCst);
        shard.run_retention().await.unwrap();
        append_one(&shard, 0, b"x").await.unwrap();
        shard.close().await.unwrap();
    });
}
