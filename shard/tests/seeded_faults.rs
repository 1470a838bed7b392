#![allow(clippy::unwrap_used)]
//! Seeded faults on every kind of file operation (segment creation, writes, syncs and
//! reads; mapped files' block reservations, mappings, syncs and reads; deletes): whatever
//! fails, a shard reopened afterwards holds every record it acknowledged, at the queue
//! offset it acknowledged, and no read ever serves a record that was not sent. Each seed
//! replays one sequence of failures; a failing seed is named in the assertion.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::*;
use message::{RecordView, TagFilter};
use shard::{FaultInjector, FileOp, FlushPolicy, ReadRequest, Shard, ShardConfig};

const QUEUES: u32 = 3;
const APPENDS: usize = 300;
const SEEDS: u64 = 16;
/// Each operation of the plan fails with a chance of one in this many. A sync flush run
/// does a write and an fdatasync per append, so 150 lets it go some way before a failed
/// write poisons the shard; an async run writes whole chunks and does far fewer
/// operations, so it fails more of them.
fn one_in(sync: bool) -> u32 {
    if sync {
        150
    } else {
        12
    }
}

/// What one run acknowledged: (queue, queue offset) -> body.
type Acked = BTreeMap<(u32, u64), Vec<u8>>;

fn config(dir: &Path, sync: bool) -> ShardConfig {
    let mut c = small_config(dir);
    if !sync {
        c.flush = FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 32 << 10,
        };
        c.tail_ring = Some(shard::TailRingConfig {
            path: dir.join("ring").join("shard-0.tail"),
            ring_bytes: 256 << 10,
        });
    }
    c
}

/// A body that names its queue, so a served record can be checked even when its append
/// was not acknowledged (an append that failed may still have stored its record).
fn body_for(queue: u32, i: usize) -> Vec<u8> {
    let mut b = format!("q{queue}-{i}-").into_bytes();
    b.resize(300 + (i * 37) % 700, b'a' + (i % 26) as u8);
    b
}

/// Checks what a read served: records of the queue asked for, at the offsets asked for, each
/// one either acknowledged with that body or at least one this test sent to that queue.
fn check_served(acked: &Acked, queue: u32, from: u64, records: &[Vec<u8>], seed: u64) {
    for (k, r) in records.iter().enumerate() {
        let v = RecordView::parse(r).unwrap();
        v.verify_crc().unwrap();
        assert_eq!(
            v.queue_id(),
            queue,
            "seed {seed}: a record of another queue"
        );
        let body = v.body();
        assert!(
            body.starts_with(format!("q{queue}-").as_bytes()),
            "seed {seed}: a record nobody sent to queue {queue}"
        );
        if let Some(want) = acked.get(&(queue, v.queue_offset())) {
            assert_eq!(
                body,
                &want[..],
                "seed {seed}: queue {queue} offset {} serves another record than it acknowledged",
                v.queue_offset()
            );
        }
        assert!(
            v.queue_offset() >= from + k as u64,
            "seed {seed}: offsets go back"
        );
    }
}

/// One run under the plan: appends round robin over the queues, reading back now and then
/// and running retention, until the appends are done or the shard is poisoned. Returns what
/// what was acknowledged and whether the shard was poisoned.
async fn run_under_faults(
    dir: &Path,
    sync: bool,
    seed: u64,
    faults: &Arc<FaultInjector>,
) -> (Acked, bool) {
    let mut c = config(dir, sync);
    c.faults = Some(faults.clone());
    let shard = Shard::open(c).await.unwrap();
    faults.seeded(seed, one_in(sync), &FileOp::ALL);
    let mut acked = Acked::new();
    let mut poisoned = false;
    for i in 0..APPENDS {
        let queue = i as u32 % QUEUES;
        let b = body_for(queue, i);
        match append_one(&shard, queue, &b).await {
            Ok(r) => {
                let again = acked.insert((queue, r.first_queue_offset.into()), b);
                assert!(
                    again.is_none(),
                    "seed {seed}: queue offset {} acknowledged twice",
                    r.first_queue_offset
                );
            }
            Err(shard::ShardError::Poisoned { .. }) => {
                poisoned = true;
                break;
            }
            Err(_) => {}
        }
        if i % 40 == 39 {
            let from = shard.queue_offsets(TOPIC, queue).min;
            let read = shard
                .read(&ReadRequest {
                    topic: TOPIC,
                    queue_id: queue,
                    queue_offset: from,
                    max_messages: 16,
                    max_bytes: 1 << 20,
                    filter: &TagFilter::All,
                })
                .await;
            if let Ok(r) = read {
                let served: Vec<Vec<u8>> =
                    r.records.iter().map(|s| s.as_bytes().to_vec()).collect();
                check_served(&acked, queue, from.into(), &served, seed);
            }
        }
        if i % 100 == 99 {
            // Retention with the disk in no hurry deletes nothing here (72 h): it still
            // measures and may trim, through the faulted deletes.
            let _ = shard.run_retention().await;
        }
    }
    // Closing writes what is still in memory: an async run often fails only here.
    let _ = shard.close().await;
    (acked, poisoned || shard.stats().poisoned)
}

fn check_reopened(dir: &Path, sync: bool, seed: u64, acked: Acked) {
    let dir = dir.to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(config(&dir, sync))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        for queue in 0..QUEUES {
            let all = read_all(&shard, TOPIC, queue, &TagFilter::All).await;
            let min = shard.queue_offsets(TOPIC, queue).min;
            check_served(&acked, queue, min.into(), &all, seed);
            let at: BTreeMap<u64, Vec<u8>> = all
                .iter()
                .map(|r| {
                    let v = RecordView::parse(r).unwrap();
                    (v.queue_offset(), v.body().to_vec())
                })
                .collect();
            for ((q, off), body) in acked.range((queue, min.0)..(queue + 1, 0)) {
                assert_eq!(*q, queue);
                assert_eq!(
                    at.get(off),
                    Some(body),
                    "seed {seed} ({}): queue {queue} lost acknowledged offset {off}",
                    if sync { "sync" } else { "async" }
                );
            }
        }
        shard.close().await.unwrap();
    });
}

fn seeds(sync: bool) {
    let mut injected = 0;
    let mut acked_total = 0;
    let mut poisoned_runs = 0;
    for seed in 0..SEEDS {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_owned();
        let faults = Arc::new(FaultInjector::default());
        let f = faults.clone();
        let (acked, poisoned) =
            shard::run_local(move || async move { run_under_faults(&p, sync, seed, &f).await });
        eprintln!(
            "seed {seed}: {} acknowledged, {} faults injected, poisoned: {poisoned}",
            acked.len(),
            faults.injected()
        );
        injected += faults.injected();
        poisoned_runs += u64::from(poisoned);
        acked_total += acked.len();
        check_reopened(dir.path(), sync, seed, acked);
    }
    // The plan did fail operations, and enough appends got through to check something.
    assert!(injected >= SEEDS, "only {injected} faults injected");
    // Some runs ended with a failed write or sync: their acknowledged records are what the
    // reopened shard must still hold (an async run's from its tail ring).
    assert!(
        poisoned_runs > 0,
        "no run was poisoned: the write path was not faulted"
    );
    assert!(
        acked_total >= APPENDS,
        "only {acked_total} appends acknowledged over {SEEDS} seeds"
    );
}

#[test]
fn sync_flush_keeps_every_acknowledged_record_through_seeded_faults() {
    seeds(true);
}

#[test]
fn async_flush_with_a_tail_ring_keeps_every_acknowledged_record_through_seeded_faults() {
    seeds(false);
}
