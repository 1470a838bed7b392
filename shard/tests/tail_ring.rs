#![allow(clippy::unwrap_used)]
//! An async-flush append is acknowledged from memory; the tail ring keeps a copy that
//! outlives the process, so a crash before the chunk's write loses nothing acknowledged and
//! gives no acknowledged (queue, offset) to another message. A crash is the executor ending
//! with the flusher's work not done: the shard is dropped without `close`, and whatever it
//! held only in process memory is gone.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use message::TagFilter;
use shard::{FlushPolicy, ReadRequest, ReadStatus, Shard, ShardConfig, ShardError};

fn async_config(dir: &Path, ring: bool) -> ShardConfig {
    let mut c = small_config(dir);
    // Nothing is written by the timer or the dirty bound: only full chunks go to disk.
    c.flush = FlushPolicy::Async {
        interval_ms: 3_600_000,
        dirty_bytes_max: 1 << 40,
    };
    if ring {
        c.tail_ring = Some(shard::TailRingConfig {
            path: dir.join("ring").join("shard-0.tail"),
            ring_bytes: 256 << 10,
        });
    }
    c
}

/// Appends `n` single-record batches to queue 0, checking each acknowledged queue offset;
/// returns the bodies.
async fn append_acked(shard: &Shard, from: usize, n: usize) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    for i in from..from + n {
        let b = body(i, 700 + (i * 31) % 300);
        let r = append_one(shard, 0, &b).await.unwrap();
        assert_eq!(r.first_queue_offset, i as u64, "offsets are never reused");
        bodies.push(b);
    }
    bodies
}

fn crash_then_reopen(dir: &Path, ring: bool, appends: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64) {
    let p = dir.to_owned();
    let acked = shard::run_local(move || async move {
        let shard = Shard::open(async_config(&p, ring)).await.unwrap();
        let acked = append_acked(&shard, 0, appends).await;
        // The last chunk is unsealed and unwritten: it exists only in memory (and the ring).
        let s = shard.stats();
        assert!(s.written_offset < s.write_offset, "{s:?}");
        acked
    });
    let p = dir.to_owned();
    let (got, replayed) = shard::run_local(move || async move {
        let shard = Shard::open(async_config(&p, ring)).await.unwrap();
        let got = queue_bodies(&shard, 0).await;
        let replayed = shard.stats().tail_ring_records;
        shard.close().await.unwrap();
        (got, replayed)
    });
    (acked, got, replayed)
}

#[test]
fn acknowledged_appends_survive_a_crash_before_their_write() {
    let dir = tempfile::tempdir().unwrap();
    let (acked, got, replayed) = crash_then_reopen(dir.path(), true, 150);
    assert!(replayed > 0, "the ring held the unwritten tail");
    assert_eq!(got.len(), acked.len(), "every acknowledged record is back");
    assert_eq!(got, acked, "intact and in order");
    // Appends go on after the last acknowledged offset.
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(async_config(&p, true)).await.unwrap();
        let more = append_acked(&shard, 150, 10).await;
        let got = queue_bodies(&shard, 0).await;
        assert_eq!(got.len(), 160);
        assert_eq!(&got[150..], &more[..]);
        shard.close().await.unwrap();
    });
    assert!(
        !dir.path().join("ring").join("shard-0.tail").exists(),
        "a clean close leaves no ring behind"
    );
}

#[test]
fn without_a_ring_the_unwritten_tail_is_lost() {
    // The same crash without a ring: what this test suite guards against.
    let dir = tempfile::tempdir().unwrap();
    let (acked, got, _) = crash_then_reopen(dir.path(), false, 150);
    assert!(got.len() < acked.len(), "{} of {}", got.len(), acked.len());
}

#[test]
fn a_torn_write_is_made_whole_from_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let acked = shard::run_local(move || async move {
        let (c, f) = with_faults(async_config(&p, true));
        let shard = Shard::open(c).await.unwrap();
        let mut acked = append_acked(&shard, 0, 20).await;
        // The next chunk's write lands torn and fails: the shard is poisoned, but what it
        // acknowledged before is in the ring.
        f.tear_write_at(shard.stats().write_offset + 100);
        let mut i = 20;
        loop {
            let b = body(i, 900);
            match append_one(&shard, 0, &b).await {
                Ok(_) => acked.push(b),
                Err(ShardError::Poisoned { .. }) => break,
                Err(e) => panic!("{e}"),
            }
            i += 1;
            assert!(i < 10_000, "the torn write never poisoned the shard");
            if i % 16 == 0 {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        }
        acked
    });
    let p = dir.path().to_owned();
    let got = shard::run_local(move || async move {
        let shard = Shard::open(async_config(&p, true)).await.unwrap();
        queue_bodies(&shard, 0).await
    });
    assert_eq!(got, acked);
}

#[test]
fn sync_readers_are_served_only_durable_records() {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(small_config(&p));
        let shard = Shard::open(c).await.unwrap();
        append_one(&shard, 0, b"durable").await.unwrap();
        f.fail_fsyncs(true);
        assert!(append_one(&shard, 0, b"never durable").await.is_err());
        // The second record is in the queue's index but not on disk for sure: never served.
        let got = queue_bodies(&shard, 0).await;
        assert_eq!(got, vec![b"durable".to_vec()]);
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(1),
                max_messages: 32,
                max_bytes: 1 << 20,
                filter: &TagFilter::All,
            })
            .await
            .unwrap();
        assert_eq!(r.status, ReadStatus::NoNewMessage);
        assert!(r.records.is_empty());
        assert!(
            !shard
                .wait_for_message(TOPIC, 0, QueueOffset(1), Duration::from_millis(50))
                .await
        );
    });
}

#[test]
fn a_disk_falling_behind_gets_busy_answers_not_a_stall() {
    in_temp_dir(move |p| async move {
        let mut c = async_config(&p, true);
        c.flush = FlushPolicy::Async {
            interval_ms: 1,
            dirty_bytes_max: 64 << 10,
        };
        c.unsynced_bytes_max = 1 << 20;
        c.busy_wait_ms = 20;
        // The bound under test is the unsynced one: a ring larger than it, so that the
        // ring's own bound (acknowledged bytes not yet written) is not reached first when
        // the writes lag behind on a busy host.
        if let Some(t) = c.tail_ring.as_mut() {
            t.ring_bytes = 4 << 20;
        }
        let (c, f) = with_faults(c);
        let shard = Shard::open(c).await.unwrap();
        f.slow_fsyncs_ms(400);
        let batch: Vec<u8> = (0..8)
            .flat_map(|i| record(TOPIC, &body(i, 3000), None, None))
            .collect();
        let mut acked = 0u64;
        let mut busy = None;
        for _ in 0..1000 {
            let started = std::time::Instant::now();
            match shard.append(TOPIC, 0, &batch).await {
                Ok(_) => acked += 1,
                Err(ShardError::Busy { reason }) => {
                    busy = Some((reason, started.elapsed()));
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        let (reason, took) = busy.expect("a slow disk makes appends busy");
        assert!(reason.contains("not yet fdatasynced"), "{reason}");
        assert!(took < Duration::from_millis(300), "answered in {took:?}");
        let unsynced = shard.stats().write_offset - shard.stats().durable_offset;
        assert!(unsynced <= (1 << 20) + batch.len() as u64, "{unsynced}");
        assert!(shard.stats().busy_refusals >= 1);
        // Once the disk catches up, appends succeed again by themselves.
        f.slow_fsyncs_ms(0);
        let mut ok = false;
        for _ in 0..200 {
            if shard.append(TOPIC, 0, &batch).await.is_ok() {
                ok = true;
                break;
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "appends never recovered after {acked} acked");
        shard.close().await.unwrap();
    });
}

#[test]
fn a_stop_while_the_disk_is_full_keeps_the_ring_and_the_next_start_writes_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let acked = shard::run_local(move || async move {
        let (c, f) = with_faults(async_config(&p, true));
        let shard = Shard::open(c).await.unwrap();
        // No new segment can be made: the roll out of the first 64 KiB segment is refused.
        f.fail_segment_create(Some(libc::ENOSPC));
        let mut acked = Vec::new();
        for i in 0..1000 {
            let b = body(i, 900);
            match append_one(&shard, 0, &b).await {
                Ok(_) => acked.push(b),
                Err(ShardError::NoSpace { .. }) => break,
                Err(e) => panic!("{e}"),
            }
            if i % 8 == 0 {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        }
        assert!(shard.stats().writes_blocked);
        assert!(
            shard.stats().write_offset > shard.stats().written_offset,
            "some acknowledged records are only in memory"
        );
        // The stop cannot write them: it says so and keeps the ring.
        assert!(shard.close().await.is_err());
        acked
    });
    assert!(dir.path().join("ring").join("shard-0.tail").exists());
    let p = dir.path().to_owned();
    let got = shard::run_local(move || async move {
        let shard = Shard::open(async_config(&p, true)).await.unwrap();
        assert!(shard.stats().tail_ring_records > 0);
        let got = queue_bodies(&shard, 0).await;
        shard.close().await.unwrap();
        got
    });
    assert_eq!(got, acked);
}
