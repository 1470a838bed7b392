#![allow(clippy::unwrap_used)]
//! A bit flip in the middle of the oldest segment: recovery quarantines the flipped record,
//! names its range, keeps every other record (the later segment included), and never
//! serves the flipped one.

mod common;

use common::*;
use message::TagFilter;
use shard::Shard;

fn check(flip: impl FnOnce(&std::path::Path, &[u64]) + Send + 'static, use_seam: bool) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let (offsets, end) = shard::run_local(move || async move {
        let (c, f) = with_faults(small_config(&p));
        let shard = Shard::open(c).await.unwrap();
        let offsets = append_numbered_offsets(&shard, 0..120, 600, false, |i| {
            if use_seam && i == 20 {
                // Silent media corruption of record 20 on its way to disk.
                f.flip_bit_on_write_at(shard.stats().write_offset + 120);
            }
        })
        .await;
        let end = shard.stats().write_offset;
        shard.close().await.unwrap();
        (offsets, end)
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
        let expected: Vec<_> = (0..120)
            .filter(|&i| i != 20)
            .map(|i| body(i, 600))
            .collect();
        assert_eq!(
            bodies_of(&got),
            expected,
            "every record but the flipped one"
        );
        let st = shard.stats();
        assert_eq!(st.write_offset, end, "nothing after the flip was cut");
        assert_eq!(st.recovery_truncated_segments, 0);
        assert_eq!(st.quarantined_ranges, 1);
        assert_eq!(st.quarantined_bytes, offsets[21] - offsets[20]);
        assert_eq!(st.skipped_records, 1, "the reader stepped over it once");
        let q = shard.quarantined();
        assert_eq!((q[0].start, q[0].end), (offsets[20], offsets[21]));
        assert!(q[0].found_by_recovery);
        assert!(q[0].segment.ends_with(format!("commitlog/{:020}", 0)));
        // The flipped record is not served by offset either; its neighbours are.
        assert!(shard
            .read_at(CommitLogOffset(offsets[20]))
            .await
            .unwrap()
            .is_none());
        for i in [19, 21, 25, 119] {
            let s = shard
                .read_at(CommitLogOffset(offsets[i]))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(bodies_of(&[s.as_bytes().to_vec()]), vec![body(i, 600)]);
        }
        shard.close().await.unwrap();
    });
}

#[test]
fn bit_flip_on_disk_quarantines_the_flipped_record_and_keeps_the_rest() {
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
