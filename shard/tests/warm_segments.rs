#![allow(clippy::unwrap_used)]
//! `warm_segments`: each CommitLog segment is made from a zero-filled spare that was filled
//! before the log reached it (the log's file is the very file the spare was), the spare is
//! never taken for part of the log, a fill cut short by a crash is thrown away, and every
//! record is there after a restart.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use shard::{DiskUsageSource, Shard, ShardConfig};

const SEGMENT: u64 = 64 << 10;

fn warm_config(p: &Path) -> ShardConfig {
    let mut c = small_config(p);
    c.warm_segments = true;
    c
}

fn commitlog(p: &Path) -> PathBuf {
    p.join("commitlog")
}

fn inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// The inode of the ready spare, waiting (bounded) for its fill to finish.
async fn ready_spare(p: &Path) -> u64 {
    for _ in 0..2_000 {
        if let Some(i) = inode(&commitlog(p).join("spare.warm")) {
            return i;
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    panic!("no spare segment was filled within 10 s");
}

#[test]
fn the_log_rolls_into_filled_spares_and_survives_restarts() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(warm_config(&p)).await.unwrap();
        // An empty log's first segment is made from a spare filled before the shard serves.
        let spare = commitlog(&p).join("spare.warm");
        let meta = std::fs::metadata(&spare).expect("a spare is ready at open");
        assert_eq!(meta.len(), SEGMENT);
        assert!(
            meta.blocks() * 512 >= SEGMENT,
            "the spare's blocks are allocated"
        );

        let mut expected = Vec::new();
        let mut i = 0;
        for seg in 0..4u64 {
            let start = seg * SEGMENT;
            let spare_ino = ready_spare(&p).await;
            // Append until a write has landed in segment `seg` (sync flush: an append
            // returns once written and synced).
            while shard.stats().write_offset <= start {
                let b = body(i, 300 + (i * 131) % 700);
                append_one(&shard, (i % 4) as u32, &b).await.unwrap();
                expected.push(b);
                i += 1;
            }
            let seg_path = commitlog(&p).join(format!("{start:020}"));
            assert_eq!(
                inode(&seg_path),
                Some(spare_ino),
                "segment {seg} is the spare that was filled for it"
            );
        }
        shard.close().await.unwrap();

        // A crash in the middle of a fill leaves a half-filled file: thrown away at open.
        let filling = commitlog(&p).join("spare.warm.filling");
        std::fs::write(&filling, vec![0xa5u8; 12_288]).unwrap();
        let shard = Shard::open(warm_config(&p)).await.unwrap();
        assert!(!filling.exists(), "a half-filled spare is removed");
        let got = all_bodies_sorted(&shard, TOPIC, 4).await;
        expected.sort();
        assert_eq!(got.len(), expected.len());
        assert_eq!(got, expected);

        // The spare left from the last run is found again and serves the next roll.
        let spare_ino = ready_spare(&p).await;
        let next = (shard.stats().write_offset.0 / SEGMENT + 1) * SEGMENT;
        while shard.stats().write_offset <= next {
            let b = body(i, 500);
            append_one(&shard, 0, &b).await.unwrap();
            i += 1;
        }
        assert_eq!(
            inode(&commitlog(&p).join(format!("{next:020}"))),
            Some(spare_ino)
        );
        shard.close().await.unwrap();
    });
}

#[test]
fn no_spare_is_filled_on_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let ratio = Arc::new(AtomicU64::new(0.95f64.to_bits()));
    let r2 = ratio.clone();
    shard::run_local(move || async move {
        let mut c = warm_config(&p);
        c.disk_usage =
            DiskUsageSource::from_fn(move |_| Ok(f64::from_bits(r2.load(Ordering::SeqCst))));
        let shard = Shard::open(c).await.unwrap();
        let names: Vec<String> = std::fs::read_dir(commitlog(&p))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with("spare")),
            "a full disk got a spare: {names:?}"
        );
        // Space returns: the log starts without a spare, and the next roll's is filled.
        ratio.store(0.5f64.to_bits(), Ordering::SeqCst);
        shard.run_retention().await.unwrap();
        append_one(&shard, 0, &body(0, 500)).await.unwrap();
        ready_spare(&p).await;
        shard.close().await.unwrap();
    });
}
