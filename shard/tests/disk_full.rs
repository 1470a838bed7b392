#![allow(clippy::unwrap_used)]
//! A full disk (ENOSPC) or a full descriptor table (EMFILE) is an answer, not poison: the
//! append that meets it gets `NoSpace` / `TooManyOpenFiles`, the shard is not poisoned,
//! acknowledged records stay readable, and once the fault is gone appends succeed again by
//! themselves and everything acknowledged is read back after a reopen. The faults come
//! through the storage seam (`FaultInjector::fail_segment_create`, `fail_map_reserve`) and
//! the free-space seam (`DiskUsageSource::with_free_bytes`).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use shard::{DiskUsageSource, FlushPolicy, Shard, ShardConfig, ShardError};

/// How long a test waits for appends to resume once the fault is cleared: many times the
/// flusher's retry interval, so a slow 1-core machine still passes.
const RESUME_WITHIN: Duration = Duration::from_secs(10);

fn is_shortage_for(e: &ShardError, errno: i32) -> bool {
    match errno {
        libc::ENOSPC => matches!(e, ShardError::NoSpace { .. }),
        libc::EMFILE => matches!(e, ShardError::TooManyOpenFiles { .. }),
        _ => false,
    }
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Appends one numbered record to queue 0 until an append fails (at most `max` tries,
/// `pause` apart: an async append returns before the flusher has tried to write it);
/// returns the bodies acknowledged and the error.
async fn append_until_error(
    shard: &Shard,
    next: &mut usize,
    acked: &mut Vec<Vec<u8>>,
    max: usize,
    pause: Duration,
) -> (Vec<u8>, ShardError) {
    for _ in 0..max {
        let b = body(*next, 1000);
        *next += 1;
        match append_one(shard, 0, &b).await {
            Ok(_) => acked.push(b),
            Err(e) => return (b, e),
        }
        if !pause.is_zero() {
            glommio::timer::sleep(pause).await;
        }
    }
    panic!("no append failed in {max} tries");
}

/// Retries one append (a new body each time) until it succeeds, bounded by
/// [`RESUME_WITHIN`]; returns how many were refused first.
async fn append_until_ok(shard: &Shard, next: &mut usize, acked: &mut Vec<Vec<u8>>) -> usize {
    let deadline = Instant::now() + RESUME_WITHIN;
    let mut refused = 0;
    loop {
        let b = body(*next, 1000);
        *next += 1;
        match append_one(shard, 0, &b).await {
            Ok(_) => {
                acked.push(b);
                return refused;
            }
            Err(e) => {
                assert!(e.is_shortage(), "only the shortage may refuse it: {e}");
                refused += 1;
                assert!(
                    Instant::now() < deadline,
                    "appends did not resume within {RESUME_WITHIN:?}: {e}"
                );
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Every acknowledged body is read back, in order; anything else read back is one of the
/// bodies whose append failed while it waited for durability (its record was queued and
/// stored once space returned, as after a timeout).
fn assert_acked_read_back(got: &[Vec<u8>], acked: &[Vec<u8>], failed: &[Vec<u8>]) {
    let kept: Vec<&Vec<u8>> = got.iter().filter(|b| !failed.contains(b)).collect();
    let want: Vec<&Vec<u8>> = acked.iter().collect();
    assert_eq!(kept.len(), want.len(), "acknowledged records lost or added");
    assert!(kept == want, "acknowledged records read back out of order");
}

fn roll_refused_then_resumes(errno: i32, flush: FlushPolicy) {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.flush = flush;
        let (c, f) = with_faults(c);
        let shard = Shard::open(c.clone()).await.unwrap();
        // Some records in the first segment, then the next segment cannot be created.
        let mut acked = append_numbered(&shard, 0..10, 1000).await;
        let (mut next, mut failed) = (10, Vec::new());
        shard.sync().await.unwrap();
        f.fail_segment_create(Some(errno));
        // Segments are 64 KiB: the roll comes within ~64 appends of 1 KiB.
        let pause = match flush {
            FlushPolicy::Sync => Duration::ZERO,
            FlushPolicy::Async { .. } => Duration::from_millis(2),
        };
        let (b, e) = append_until_error(&shard, &mut next, &mut acked, 400, pause).await;
        failed.push(b);
        assert!(is_shortage_for(&e, errno), "{e:?}");
        let msg = e.to_string();
        let want = if errno == libc::ENOSPC {
            "disk full"
        } else {
            "too many open files"
        };
        assert!(msg.contains(want), "{msg}");
        assert!(msg.contains("creating a CommitLog segment"), "{msg}");
        assert!(!msg.contains("fsync") && !msg.contains("poison"), "{msg}");
        assert!(!shard.stats().poisoned);
        assert!(
            shard.stats().writes_blocked,
            "operators see the blocked state"
        );
        // Later appends get the same clear error, without waiting for anything.
        for _ in 0..3 {
            let e = append_one(&shard, 0, &body(next, 1000)).await.unwrap_err();
            next += 1;
            assert!(is_shortage_for(&e, errno), "{e:?}");
        }
        // The half-made segment was removed; only the first one is there.
        assert_eq!(
            segment_files(&p),
            vec!["00000000000000000000".to_owned()],
            "a half-created segment is left"
        );
        // Everything acknowledged is readable meanwhile (from memory where not written).
        let got = queue_bodies(&shard, 0).await;
        assert_acked_read_back(&got, &acked, &failed);

        // The disk has room again: appends succeed by themselves, no reopen.
        f.fail_segment_create(None);
        append_until_ok(&shard, &mut next, &mut acked).await;
        acked.extend(append_numbered(&shard, next..next + 80, 1000).await);
        assert!(!shard.stats().poisoned);
        assert!(!shard.stats().writes_blocked);
        shard.close().await.unwrap();
        // The roll that was refused happened after all, and the log went on past it.
        assert!(segment_files(&p).len() >= 3, "{:?}", segment_files(&p));

        let shard = Shard::open(c).await.unwrap();
        let got = queue_bodies(&shard, 0).await;
        assert_acked_read_back(&got, &acked, &failed);
        shard.close().await.unwrap();
    });
}

#[test]
fn enospc_at_a_segment_roll_is_not_poison_and_sync_appends_resume() {
    roll_refused_then_resumes(libc::ENOSPC, FlushPolicy::Sync);
}

#[test]
fn emfile_at_a_segment_roll_is_not_poison_and_sync_appends_resume() {
    roll_refused_then_resumes(libc::EMFILE, FlushPolicy::Sync);
}

#[test]
fn enospc_at_a_segment_roll_is_not_poison_and_async_appends_resume() {
    roll_refused_then_resumes(
        libc::ENOSPC,
        FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 1 << 20,
        },
    );
}

#[test]
fn emfile_at_a_segment_roll_is_not_poison_and_async_appends_resume() {
    roll_refused_then_resumes(
        libc::EMFILE,
        FlushPolicy::Async {
            interval_ms: 5,
            dirty_bytes_max: 1 << 20,
        },
    );
}

/// A new segment that would leave less free than `disk_reserve_bytes` is refused with a
/// message naming the reserve; with the space back, appends resume.
#[test]
fn a_segment_that_would_eat_the_reserve_is_refused_until_space_returns() {
    in_temp_dir(move |p| async move {
        let free = Arc::new(AtomicU64::new(u64::MAX));
        let fr = free.clone();
        let mut c = small_config(&p);
        c.disk_reserve_bytes = 1 << 20;
        c.disk_usage = DiskUsageSource::from_fn(|_| Ok(0.1))
            .with_free_bytes(move |_| Ok(fr.load(Ordering::SeqCst)));
        let shard = Shard::open(c.clone()).await.unwrap();
        let (mut next, mut acked, mut failed) = (0usize, Vec::new(), Vec::new());
        // A segment (64 KiB) plus the reserve (1 MiB) is more than this.
        free.store((1 << 20) + (32 << 10), Ordering::SeqCst);
        let (b, e) = append_until_error(&shard, &mut next, &mut acked, 400, Duration::ZERO).await;
        failed.push(b);
        assert!(matches!(e, ShardError::NoSpace { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("disk full") && msg.contains("disk_reserve_bytes = 1024 KiB"),
            "{msg}"
        );
        assert!(!shard.stats().poisoned);
        free.store(u64::MAX, Ordering::SeqCst);
        append_until_ok(&shard, &mut next, &mut acked).await;
        shard.close().await.unwrap();
        let shard = Shard::open(c).await.unwrap();
        let got = queue_bodies(&shard, 0).await;
        assert_acked_read_back(&got, &acked, &failed);
    });
}

/// A ConsumeQueue file (new queue, or the next file of a queue) and an IndexFile that
/// cannot get their blocks make the append fail with `NoSpace` and change nothing: no
/// entry, no record, nothing mapped. Once the fault is gone the same append succeeds.
#[test]
fn mapped_files_that_cannot_get_blocks_refuse_the_append_and_change_nothing() {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(small_config(&p));
        let shard = Shard::open(c.clone()).await.unwrap();
        for errno in [libc::ENOSPC, libc::EMFILE] {
            // A new queue needs a new ConsumeQueue file.
            f.fail_map_reserve(Some(errno));
            let before = shard.stats().write_offset;
            let e = append_one(&shard, 7, b"new queue").await.unwrap_err();
            assert!(is_shortage_for(&e, errno), "{e:?}");
            assert!(!shard.stats().poisoned);
            assert_eq!(shard.queue_offsets(TOPIC, 7).max, 0);
            assert_eq!(shard.stats().write_offset, before, "the log advanced");
            assert!(
                !p.join("consumequeue")
                    .join(TOPIC)
                    .join("7")
                    .join("00000000000000000000")
                    .exists(),
                "a half-made ConsumeQueue file is left"
            );
            f.fail_map_reserve(None);
        }
        append_one(&shard, 7, b"new queue").await.unwrap();

        // The first IndexFile: a record with a key, in a queue whose file has its blocks.
        f.fail_map_reserve(Some(libc::ENOSPC));
        let e = shard
            .append(TOPIC, 7, &record(TOPIC, b"keyed", None, Some("k1")))
            .await
            .unwrap_err();
        assert!(matches!(e, ShardError::NoSpace { .. }), "{e:?}");
        assert_eq!(
            shard.queue_offsets(TOPIC, 7).max,
            1,
            "the entry was not undone"
        );
        assert!(
            std::fs::read_dir(p.join("index")).unwrap().next().is_none(),
            "a half-made IndexFile is left"
        );
        f.fail_map_reserve(None);
        shard
            .append(TOPIC, 7, &record(TOPIC, b"keyed", None, Some("k1")))
            .await
            .unwrap();

        // The next ConsumeQueue file of a queue (32 entries per file here).
        for i in 0..30 {
            append_one(&shard, 7, &body(i, 100)).await.unwrap();
        }
        assert_eq!(shard.queue_offsets(TOPIC, 7).max, 32);
        f.fail_map_reserve(Some(libc::ENOSPC));
        let e = append_one(&shard, 7, b"second file").await.unwrap_err();
        assert!(matches!(e, ShardError::NoSpace { .. }), "{e:?}");
        assert_eq!(shard.queue_offsets(TOPIC, 7).max, 32);
        assert!(!shard.stats().poisoned);
        f.fail_map_reserve(None);
        append_one(&shard, 7, b"second file").await.unwrap();
        shard.close().await.unwrap();

        let shard = Shard::open(c).await.unwrap();
        let got = queue_bodies(&shard, 7).await;
        assert_eq!(got.len(), 33);
        assert_eq!(got[0], b"new queue");
        assert_eq!(got[1], b"keyed");
        assert_eq!(got[32], b"second file");
        let hits = shard
            .query_by_key(TOPIC, "k1", 0, i64::MAX / 2, 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
    });
}

/// A restart on a full disk: every new file is refused (no free space, and ENOSPC from
/// every segment creation and block reservation), yet the shard opens and serves what it
/// stored; the first append that needs new space gets the disk-full error. Also with
/// `warm_segments`, whose spare cannot be filled either.
#[test]
fn a_restart_on_a_full_disk_opens_and_serves_reads() {
    for warm in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_owned();
        shard::run_local(move || async move {
            let free = Arc::new(AtomicU64::new(u64::MAX));
            let fr = free.clone();
            let mut c: ShardConfig = small_config(&p);
            c.warm_segments = warm;
            let (mut c, f) = with_faults(c);
            c.disk_usage = DiskUsageSource::from_fn(|_| Ok(0.1))
                .with_free_bytes(move |_| Ok(fr.load(Ordering::SeqCst)));
            let shard = Shard::open(c.clone()).await.unwrap();
            let mut acked = Vec::new();
            for i in 0..150 {
                let b = body(i, 1000);
                let keys = format!("key-{i}");
                shard
                    .append(TOPIC, 0, &record(TOPIC, &b, None, Some(&keys)))
                    .await
                    .unwrap();
                acked.push(b);
            }
            shard.close().await.unwrap();
            drop(shard);

            free.store(0, Ordering::SeqCst);
            f.fail_segment_create(Some(libc::ENOSPC));
            f.fail_map_reserve(Some(libc::ENOSPC));
            let shard = Shard::open(c.clone()).await.unwrap();
            let got = queue_bodies(&shard, 0).await;
            assert_eq!(got, acked);
            let hits = shard
                .query_by_key(TOPIC, "key-149", 0, i64::MAX / 2, 10)
                .await
                .unwrap();
            assert_eq!(hits.len(), 1);
            // An append to a queue that has no file yet needs new blocks: refused, clearly.
            let e = append_one(&shard, 1, b"x").await.unwrap_err();
            assert!(matches!(e, ShardError::NoSpace { .. }), "{e:?}");
            assert!(!shard.stats().poisoned);
            let leftovers: Vec<String> = segment_files(&p)
                .into_iter()
                .filter(|n| n.starts_with("spare.warm.filling"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
            // Space is back: the same shard takes the append, no restart.
            free.store(u64::MAX, Ordering::SeqCst);
            f.fail_segment_create(None);
            f.fail_map_reserve(None);
            append_one(&shard, 1, b"x").await.unwrap();
            shard.close().await.unwrap();
        });
    }
}

/// Above `disk_refuse_ratio` appends are refused; once the disk has room again they are
/// accepted within a fraction of a second, without waiting for the next retention pass
/// (an hour apart here).
#[test]
fn a_full_disk_level_clears_by_itself_soon_after_space_returns() {
    in_temp_dir(move |p| async move {
        let ratio = Arc::new(AtomicU64::new(0.95f64.to_bits()));
        let r2 = ratio.clone();
        let mut c = small_config(&p);
        c.disk_usage =
            DiskUsageSource::from_fn(move |_| Ok(f64::from_bits(r2.load(Ordering::SeqCst))));
        let shard = Shard::open(c).await.unwrap();
        let e = append_one(&shard, 0, b"x").await.unwrap_err();
        assert!(matches!(e, ShardError::DiskFull { .. }), "{e:?}");
        ratio.store(0.5f64.to_bits(), Ordering::SeqCst);
        let deadline = Instant::now() + RESUME_WITHIN;
        loop {
            match append_one(&shard, 0, b"x").await {
                Ok(_) => break,
                Err(e) => {
                    assert!(matches!(e, ShardError::DiskFull { .. }), "{e:?}");
                    assert!(Instant::now() < deadline, "still refused: {e}");
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        shard.close().await.unwrap();
    });
}

/// A crash in the middle of a segment's creation leaves its file under a temporary name
/// (`<start>.creating`), never under an offset name that recovery would take for the log's
/// end and preallocate (refused on a full disk). Such a leftover is harmless: a restart with
/// segment creation failing still opens and serves the log, and the next creation of that
/// segment reuses the file.
#[test]
fn a_segment_half_made_by_a_crash_is_harmless_and_reused() {
    in_temp_dir(move |p| async move {
        let (c, f) = with_faults(small_config(&p));
        let shard = Shard::open(c.clone()).await.unwrap();
        let mut acked = append_numbered(&shard, 0..20, 1000).await;
        shard.close().await.unwrap();
        drop(shard);
        // What a crash after the first block of the next segment was written leaves.
        let half = p.join("commitlog").join("00000000000000065536.creating");
        std::fs::write(&half, vec![0u8; 4096]).unwrap();
        f.fail_segment_create(Some(libc::ENOSPC));
        let shard = Shard::open(c.clone()).await.unwrap();
        let got = queue_bodies(&shard, 0).await;
        assert_eq!(got, acked);
        f.fail_segment_create(None);
        acked.extend(append_numbered(&shard, 20..100, 1000).await);
        shard.close().await.unwrap();
        assert!(!half.exists(), "the half-made file was not reused");
        let shard = Shard::open(c).await.unwrap();
        let got = queue_bodies(&shard, 0).await;
        assert_eq!(got, acked);
    });
}

// ---- a real full disk: a loop-mounted ext4 filled by another process ----

#[path = "common/loop_fs.rs"]
mod loop_fs;

/// On a real full disk, new ConsumeQueue and IndexFile pages are refused before anything is
/// stored into them: each append to a new queue (a new, 6 MB ConsumeQueue file, of which
/// nothing has a block yet) fails with `NoSpace` instead of the SIGBUS a store into a sparse
/// mapping raises there (which kills this test process). Once space returns they succeed.
#[test]
fn on_a_really_full_disk_new_mapped_pages_are_refused_not_a_sigbus() {
    let Some(fs) = loop_fs::loop_fs_or_skip(64) else {
        return;
    };
    let p = fs.mnt.join("shard");
    let mnt = fs.mnt.clone();
    shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.consume_queue_file_entries = 300_000;
        c.disk_reserve_bytes = 0;
        c.index_file_slots = 500_000;
        c.index_file_entries = 2_000_000;
        let shard = Shard::open(c.clone()).await.unwrap();
        for q in 0..4 {
            shard
                .append(TOPIC, q, &record(TOPIC, b"before", None, Some("k")))
                .await
                .unwrap();
        }
        shard.sync().await.unwrap();
        let filler = loop_fs::fill(&mnt);
        // Hundreds of new queues, each a new file: far more pages than any slack the
        // filesystem keeps.
        let mut refused = 0;
        for q in 100..400 {
            match append_one(&shard, q, b"full").await {
                Ok(_) => {}
                Err(e) => {
                    assert!(matches!(e, ShardError::NoSpace { .. }), "{e:?}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 250, "only {refused} of 300 refused");
        assert!(!shard.stats().poisoned);
        for q in 0..4 {
            let got = queue_bodies(&shard, q).await;
            assert_eq!(got, vec![b"before".to_vec()]);
        }
        loop_fs::unfill(&mnt, &filler);
        append_one(&shard, 399, b"room again").await.unwrap();
        shard.close().await.unwrap();
    });
    drop(fs);
}
