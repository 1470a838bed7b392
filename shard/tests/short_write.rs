#![allow(clippy::unwrap_used)]
//! A CommitLog write the kernel cuts short (fewer bytes than asked, reported as a count, not
//! an error: an O_DIRECT write meeting a full disk part-way) is never taken as done. Once,
//! the rest is written at its place and nothing is lost or poisoned; when the rest is not
//! taken either, the shard is poisoned. Either way every record served, from memory and
//! after a reopen, is whole (CRC and body) and every acknowledged record is served. The
//! faults come through the storage seam (`FaultInjector::short_write_at`).

mod common;

use std::path::Path;

use common::*;
use message::RecordView;
use shard::{FlushPolicy, Shard, ShardConfig, TailRingConfig};

fn config(dir: &Path, flush: FlushPolicy) -> ShardConfig {
    let mut c = small_config(&dir.join("shard"));
    c.flush = flush;
    if matches!(flush, FlushPolicy::Async { .. }) {
        // What makes an async append acknowledged from memory survive the reopen below
        // when the shard is poisoned before its write.
        c.tail_ring = Some(TailRingConfig {
            path: dir.join("shard.tail"),
            ring_bytes: 1 << 20,
        });
    }
    c
}

const ASYNC: FlushPolicy = FlushPolicy::Async {
    interval_ms: 5,
    dirty_bytes_max: 64 << 10,
};

/// Every record of queue 0, checked whole: its CRC holds and its body is one of
/// `append_numbered`'s (it names its number and has the length those are sent with).
async fn served_whole(shard: &Shard, len: usize) -> Vec<Vec<u8>> {
    let records = read_all(shard, TOPIC, 0, &message::TagFilter::All).await;
    records
        .iter()
        .map(|r| {
            let v = RecordView::parse(r).unwrap();
            v.verify_crc().unwrap();
            assert_eq!(v.body().len(), len, "a body cut short was served");
            v.body().to_vec()
        })
        .collect()
}

/// Appends numbered records from `*next` until one fails or `max` are acknowledged;
/// returns the bodies acknowledged, and the one that failed.
async fn append_until_failed(
    shard: &Shard,
    next: &mut usize,
    max: usize,
    len: usize,
) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
    let mut acked = Vec::new();
    for _ in 0..max {
        let b = body(*next, len);
        *next += 1;
        match append_one(shard, 0, &b).await {
            Ok(_) => acked.push(b),
            Err(_) => return (acked, Some(b)),
        }
    }
    (acked, None)
}

async fn append_some(shard: &Shard, next: &mut usize, max: usize, len: usize) -> Vec<Vec<u8>> {
    append_until_failed(shard, next, max, len).await.0
}

/// A short write at a block inside a chunk: the rest is written, the shard goes on unpoisoned, and every record is read
/// back whole before and after a reopen.
fn a_write_cut_short_is_finished(flush: FlushPolicy, skip_blocks: u64) {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(config(&p, flush));
        let shard = Shard::open(c.clone()).await.unwrap();
        let len = 1000;
        let mut next = 0;
        let mut acked = append_some(&shard, &mut next, 30, len).await;
        shard.sync().await.unwrap();
        // The next write starts at the block holding the log's end: cut it `skip_blocks`
        // blocks further on.
        let end = shard.stats().write_offset.0;
        f.short_write_at((end & !4095) + 4096 * skip_blocks, 0);
        // Past a chunk (16 KiB) and a segment (64 KiB) boundary.
        acked.extend(append_some(&shard, &mut next, 90, len).await);
        shard.sync().await.unwrap();
        assert!(!f.short_write_pending(), "the short write never happened");
        assert!(
            !shard.stats().poisoned,
            "a short write that was finished poisoned the shard"
        );
        assert_eq!(acked.len(), 120, "appends were refused");
        assert_eq!(served_whole(&shard, len).await, acked);
        shard.close().await.unwrap();
        let shard = Shard::open(c).await.unwrap();
        assert_eq!(served_whole(&shard, len).await, acked, "after the reopen");
        assert!(shard.quarantined().is_empty(), "{:?}", shard.quarantined());
        shard.close().await.unwrap();
    });
}

#[test]
fn a_sync_write_cut_short_inside_a_chunk_is_finished() {
    a_write_cut_short_is_finished(FlushPolicy::Sync, 2);
}

#[test]
fn an_async_write_cut_short_inside_a_chunk_is_finished() {
    a_write_cut_short_is_finished(ASYNC, 2);
}

/// The rest of a short write is not taken either (the disk stays full): the shard is
/// poisoned, and still serves every acknowledged record whole from memory, and after the
/// reopen from the files (async: through the tail ring).
fn a_write_that_stays_short_poisons_and_serves_whole(flush: FlushPolicy) {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(config(&p, flush));
        let shard = Shard::open(c.clone()).await.unwrap();
        let len = 1000;
        let mut next = 0;
        let mut acked = append_some(&shard, &mut next, 30, len).await;
        shard.sync().await.unwrap();
        let end = shard.stats().write_offset.0;
        f.short_write_at((end & !4095) + 8192, 1);
        let (more, failed) = append_until_failed(&shard, &mut next, 90, len).await;
        acked.extend(more);
        // Async appends are acknowledged before their write: wait for the write to fail.
        let poisoned = eventually(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis(5),
            || shard.stats().poisoned,
        )
        .await;
        assert!(
            poisoned,
            "a write whose rest was never taken did not poison the shard"
        );
        assert!(!f.short_write_pending());
        assert!(
            acked.len() > 30,
            "nothing acknowledged after the fault was set"
        );
        assert_eq!(served_whole(&shard, len).await, acked, "from memory");
        drop(shard);
        let shard = Shard::open(c).await.unwrap();
        let mut got = served_whole(&shard, len).await;
        // The append the poison failed may have been stored whole by the part that was
        // written (like an append that timed out): then it is served, after the others.
        if got.len() == acked.len() + 1 && got.last() == failed.as_ref() {
            got.pop();
        }
        assert_eq!(got, acked, "after the reopen");
        assert!(shard.quarantined().is_empty(), "{:?}", shard.quarantined());
        shard.close().await.unwrap();
    });
}

#[test]
fn a_sync_write_that_stays_short_poisons_and_every_record_served_is_whole() {
    a_write_that_stays_short_poisons_and_serves_whole(FlushPolicy::Sync);
}

#[test]
fn an_async_write_that_stays_short_poisons_and_every_record_served_is_whole() {
    a_write_that_stays_short_poisons_and_serves_whole(ASYNC);
}
