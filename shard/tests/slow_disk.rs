#![allow(clippy::unwrap_used)]
//! A disk slower than the producer slows acceptance to the disk's rate: while every
//! fdatasync takes 400 ms, acknowledgements keep coming (paced), instead of the log filling
//! to `unsynced_bytes_max` at memory speed and every send then waiting out the sync.

mod common;

use std::time::{Duration, Instant};

use common::*;
use shard::{FlushPolicy, Shard, ShardError};

const SYNC_MS: u64 = 400;

/// An async shard of 64 KiB chunks on a disk whose every fdatasync takes `sync_ms`, with
/// `unsynced_bytes_max` and `busy_wait_ms` as given.
fn slow_disk(
    p: &std::path::Path,
    unsynced_bytes_max: u64,
    busy_wait_ms: u64,
    sync_ms: u64,
) -> (shard::ShardConfig, std::sync::Arc<shard::FaultInjector>) {
    let mut c = small_config(p);
    c.segment_bytes = 64 << 20;
    c.write_chunk_bytes = 64 << 10;
    c.hot_bytes_max = 256 << 10;
    c.flush = FlushPolicy::Async {
        interval_ms: 5,
        dirty_bytes_max: 64 << 10,
    };
    c.unsynced_bytes_max = unsynced_bytes_max;
    c.busy_wait_ms = busy_wait_ms;
    let (c, faults) = with_faults(c);
    faults.slow_fsyncs_ms(sync_ms);
    (c, faults)
}

#[test]
fn acknowledgements_keep_flowing_while_slow_syncs_run() {
    in_temp_dir(move |p| async move {
        let (mut c, faults) = slow_disk(&p, 2 << 20, 200, SYNC_MS);
        c.segment_bytes = 32 << 20;
        let shard = Shard::open(c).await.unwrap();
        let rec = record(TOPIC, &[7u8; 4000], None, None);

        // Warm-up: the disk's rate is known once two syncs have finished.
        let mut syncs_seen = 0;
        let mut durable = shard.stats().durable_offset;
        let mut window: Option<Instant> = None;
        let mut last_ack = Instant::now();
        let mut gap_max = Duration::ZERO;
        let mut acked_in_window = 0u64;
        let mut busy = 0u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        for _ in 0..1_000_000 {
            assert!(Instant::now() < deadline, "the run took too long");
            let now_durable = shard.stats().durable_offset;
            if now_durable != durable {
                durable = now_durable;
                syncs_seen += 1;
                if syncs_seen == 2 {
                    window = Some(Instant::now());
                    last_ack = Instant::now();
                }
            }
            if window.is_some_and(|w| w.elapsed() >= Duration::from_millis(6 * SYNC_MS)) {
                break;
            }
            match shard.append(TOPIC, 0, &rec).await {
                Ok(_) => {
                    let now = Instant::now();
                    if window.is_some() {
                        gap_max = gap_max.max(now - last_ack);
                        acked_in_window += 1;
                    }
                    last_ack = now;
                }
                Err(ShardError::Busy { .. }) => {
                    busy += 1;
                    // A producer's retry after SYSTEM_BUSY.
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => panic!("append failed: {e}"),
            }
            // An append is admitted while the unsynced bytes are within the cap; it then adds
            // the record and, where the record does not fit the chunk's end, a filler before
            // it (at most a quarter of a chunk, or up to the next 4 KiB block): the cap holds
            // to within what one append can add.
            let one_append_max = 2 * rec.len() as u64 + (64 << 10) / 4 + 2 * 4096 + 8;
            let s = shard.stats();
            assert!(
                s.write_offset.0 - s.durable_offset.0 <= (2 << 20) + one_append_max,
                "unsynced bytes stay within unsynced_bytes_max: {s:?}"
            );
        }
        assert!(window.is_some(), "two syncs finished");
        // Each sync takes 400 ms; a send waiting out a whole sync is the outage this
        // guards against. Paced, the longest gap is a small part of one sync.
        assert!(
            gap_max < Duration::from_millis(SYNC_MS / 3),
            "longest time without an acknowledgement {gap_max:?} while syncs take {SYNC_MS} ms \
             ({acked_in_window} acknowledged in the window, {busy} refused busy)"
        );
        assert!(
            acked_in_window >= 100,
            "acknowledgements kept coming: {acked_in_window}"
        );
        faults.slow_fsyncs_ms(0);
        shard.close().await.unwrap();
    });
}

/// A single send beside producers of huge batches while the disk is the limit: the
/// batches are paced, each taking its slot of the disk's time, and the single sends are
/// not queued behind those slots.
#[test]
fn single_sends_are_not_paced_behind_huge_batches() {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    in_temp_dir(move |p| async move {
        let (c, faults) = slow_disk(&p, 4 << 20, 5_000, 100);
        let shard = Rc::new(Shard::open(c).await.unwrap());
        let batch: Vec<u8> = (0..64)
            .flat_map(|_| record(TOPIC, &[3u8; 4000], None, None))
            .collect();
        let single = record(TOPIC, &[7u8; 1000], None, None);

        let stop = Rc::new(Cell::new(false));
        let batch_rooms = Rc::new(RefCell::new(Vec::new()));
        let producers: Vec<_> = (0..4)
            .map(|i| {
                let (shard, stop, rooms, batch) = (
                    shard.clone(),
                    stop.clone(),
                    batch_rooms.clone(),
                    batch.clone(),
                );
                glommio::spawn_local(async move {
                    for _ in 0..100_000 {
                        if stop.get() {
                            break;
                        }
                        match shard.append(TOPIC, 1 + i, &batch).await {
                            Ok(r) => rooms.borrow_mut().push(r.timing.room),
                            Err(ShardError::Busy { .. }) => {
                                glommio::timer::sleep(Duration::from_millis(1)).await
                            }
                            Err(e) => panic!("batch append failed: {e}"),
                        }
                    }
                })
            })
            .collect();

        // Until the batches are paced: the disk's rate is known and their slots are apart.
        let deadline = Instant::now() + Duration::from_secs(30);
        while batch_rooms
            .borrow()
            .iter()
            .rev()
            .take(8)
            .filter(|r| **r >= Duration::from_millis(5))
            .count()
            < 8
        {
            assert!(Instant::now() < deadline, "the batches were never paced");
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        batch_rooms.borrow_mut().clear();
        let mut single_rooms = Vec::new();
        for _ in 0..200 {
            let r = shard.append(TOPIC, 0, &single).await.unwrap();
            single_rooms.push(r.timing.room);
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
        stop.set(true);
        for p in producers {
            p.await;
        }
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let batch_median = median(&mut batch_rooms.borrow_mut());
        let single_median = median(&mut single_rooms);
        assert!(
            batch_median >= Duration::from_millis(5),
            "the batches were paced while the single sends ran: median wait {batch_median:?}"
        );
        assert!(
            single_median * 10 <= batch_median,
            "single sends wait {single_median:?} (median) for room, batches {batch_median:?}"
        );
        faults.slow_fsyncs_ms(0);
        Rc::try_unwrap(shard).ok().unwrap().close().await.unwrap();
    });
}

/// A disk that stops writing for a while: small appends are still acknowledged from memory
/// until the unwritten bytes reach what the chunk pool holds beyond the hot ring (more than
/// the 16 MiB a large append is held to), and past that they are refused busy with the
/// bound named, so memory stays bounded. Once the disk writes again, everything
/// acknowledged is written.
#[test]
fn a_write_stall_is_ridden_out_within_the_chunk_pool() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.segment_bytes = 64 << 20;
        c.write_chunk_bytes = 1 << 20;
        c.hot_bytes_max = 8 << 20;
        c.chunk_pool = 40;
        c.message_bytes_max = 64 << 10;
        c.flush = FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 1 << 20,
        };
        c.busy_wait_ms = 100;
        // 40 chunks less the 8 of the hot ring and the one being filled.
        let bound = c.unwritten_bytes_max(true);
        assert_eq!(c.unwritten_bytes_max(false), 16 << 20);
        assert_eq!(bound, 31 << 20);
        let (c, faults) = with_faults(c);
        let shard = Shard::open(c).await.unwrap();
        let rec = record(TOPIC, &[5u8; 4000], None, None);
        let all_written = |shard: &Shard| {
            let s = shard.stats();
            s.written_offset == s.write_offset
        };

        // The hot ring full first, as under steady load.
        for _ in 0..(12 << 20) / rec.len() {
            shard.append(TOPIC, 0, &rec).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !all_written(&shard) {
            assert!(Instant::now() < deadline, "the warm-up was never written");
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }

        faults.slow_writes_ms(2_000);
        let start = shard.stats().write_offset.0;
        // 24 MiB while the disk writes nothing: past the 16 MiB floor, within the bound.
        while shard.stats().write_offset.0 - start < 24 << 20 {
            if let Err(e) = shard.append(TOPIC, 0, &rec).await {
                let behind = shard.stats().write_offset.0 - start;
                panic!("refused {behind} bytes into the stall: {e}");
            }
        }
        assert_eq!(
            shard.stats().written_offset.0,
            start,
            "nothing was written during the stall"
        );
        // A large append is held to the lower bound, which small ones have passed: refused.
        let batch: Vec<u8> = (0..20).flat_map(|_| rec.clone()).collect();
        match shard.append(TOPIC, 1, &batch).await {
            Err(ShardError::Busy { reason }) => assert!(
                reason.contains(&format!("bound {}", 16 << 20)),
                "the refusal names the large appends' bound: {reason}"
            ),
            other => panic!("a large append was not refused busy: {other:?}"),
        }
        // Past the bound: refused, with the bound named, before the unwritten bytes pass it.
        let mut refused = None;
        for _ in 0..(16 << 20) / rec.len() {
            match shard.append(TOPIC, 0, &rec).await {
                Ok(_) => {}
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let s = shard.stats();
        let unwritten = s.write_offset.0 - s.written_offset.0;
        match refused {
            Some(ShardError::Busy { reason }) => assert!(
                reason.contains(&format!("bound {bound}")),
                "the refusal names the bound: {reason}"
            ),
            other => panic!("no busy refusal with {unwritten} bytes unwritten: {other:?}"),
        }
        assert!(
            unwritten <= bound + 2 * rec.len() as u64,
            "{unwritten} bytes unwritten past the bound {bound}"
        );

        faults.slow_writes_ms(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !all_written(&shard) {
            assert!(
                Instant::now() < deadline,
                "the stalled chunks were never written"
            );
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        shard.append(TOPIC, 0, &rec).await.unwrap();
        shard.close().await.unwrap();
    });
}
