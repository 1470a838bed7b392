#![allow(clippy::unwrap_used)]
//! A bit flip in the middle of a segment: recovery keeps the records before it, serves
//! none after it, and never serves the flipped one.

mod common;

use std::sync::Arc;

use common::*;
use message::TagFilter;
use shard::{FaultInjector, Shard};

fn check(flip: impl FnOnce(&std::path::Path, &[u64]) + Send + 'static, use_seam: bool) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let faults = Arc::new(FaultInjector::default());
    let f = faults.clone();
    let offsets = shard::run_local(move || async move {
        let mut c = small_config(&p);
        c.faults = Some(f.clone());
        let shard = Shard::open(c).await.unwrap();
        let mut offsets = Vec::new();
        for i in 0..120 {
            if use_seam && i == 20 {
                // Silent media corruption of record 20 on its way to disk.
                f.flip_bit_on_write_at(shard.stats().write_offset + 120);
            }
            let r = shard
                .append(TOPIC, 0, &record(TOPIC, &body(i, 600), None, None))
                .await
                .unwrap();
            offsets.push(r.first_commit_log_offset);
        }
        shard.close().await.unwrap();
        offsets
    });
    assert!(
        offsets[119] > 64 << 10,
        "the log spans more than one segment"
    );
    if !use_seam {
        flip(dir.path(), &offsets);
    }
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..20).map(|i| body(i, 600)).collect();
        assert_eq!(bodies_of(&got), expected);
        assert_eq!(shard.stats().write_offset, offsets[20]);
        // The flipped record is not served by offset either.
        assert!(shard.read_at(offsets[20]).await.unwrap().is_none());
        assert!(shard.read_at(offsets[25]).await.unwrap().is_none());
        shard.close().await.unwrap();
    });
}

#[test]
fn bit_flip_on_disk_cuts_the_log_before_the_flipped_record() {
    check(
        |dir, offsets| {
            let seg = dir.join("commitlog").join(format!("{:020}", 0));
            let mut bytes = std::fs::read(&seg).unwrap();
            bytes[offsets[20] as usize + 300] ^= 0x10;
            std::fs::write(&seg, &bytes).unwrap();
        },
        false,
    );
}

#[test]
fn bit_flip_injected_by_the_storage_seam_is_caught_by_recovery() {
    check(|_, _| {}, true);
}
