#![allow(clippy::unwrap_used)]
//! Damage in a multi-segment log: recovery quarantines the damaged records (wherever they
//! are: the oldest segment, a middle one, the first record of a segment, the last one
//! before a segment's end filler), keeps every other record and every segment, and a torn
//! tail is still cut. A record found corrupt while the shard runs is stepped over by a
//! reader walking the queue, not retried forever.

mod common;

use std::path::Path;

use common::*;
use message::TagFilter;
use shard::{ReadRequest, ReadStatus, Shard};

const SEGMENT: u64 = 64 << 10;
const RECORDS: usize = 300;

fn segment_path(dir: &Path, start: u64) -> std::path::PathBuf {
    dir.join("commitlog").join(format!("{start:020}"))
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 20)
        .collect();
    v.sort();
    v
}

/// Writes `RECORDS` records of 600-byte bodies (four 64 KiB segments); returns each one's
/// offset and the log end.
fn write_log(dir: &Path) -> (Vec<u64>, u64) {
    let p = dir.to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let offsets = append_numbered_offsets(&shard, 0..RECORDS, 600, true, |_| {}).await;
        let end = shard.stats().write_offset.0;
        shard.close().await.unwrap();
        (offsets, end)
    })
}

/// Adds `delta` to the byte at commit-log offset `at` in its segment file.
fn damage(dir: &Path, at: u64, delta: u8) {
    let seg = segment_path(dir, at - at % SEGMENT);
    let mut bytes = std::fs::read(&seg).unwrap();
    let i = (at % SEGMENT) as usize;
    bytes[i] = bytes[i].wrapping_add(delta);
    std::fs::write(&seg, &bytes).unwrap();
}

/// Reopens and checks that exactly the records not in `damaged` are read back (through the
/// queue and by offset), nothing after them was cut, and the stats name each range.
fn check_quarantined(dir: &Path, offsets: Vec<u64>, end: u64, damaged: Vec<usize>) {
    let files_before = segment_files(dir);
    let p = dir.to_owned();
    let d = damaged.clone();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        // Recovery itself found every damaged record (before any read could).
        let found = shard.quarantined();
        assert_eq!(found.len(), d.len(), "{found:?}");
        assert!(found.iter().all(|r| r.found_by_recovery), "{found:?}");
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..RECORDS)
            .filter(|i| !d.contains(i))
            .map(|i| body(i, 600))
            .collect();
        assert_eq!(
            bodies_of(&got),
            expected,
            "every record but the damaged {d:?}"
        );
        let st = shard.stats();
        assert_eq!(st.write_offset, end, "nothing after the damage was cut");
        assert_eq!(st.recovery_truncated_segments, 0);
        assert_eq!(
            st.quarantined_ranges as usize,
            d.len(),
            "{:?}",
            shard.quarantined()
        );
        assert_eq!(st.skipped_records as usize, d.len());
        let ranges = shard.quarantined();
        for (r, &i) in ranges.iter().zip(&d) {
            assert_eq!(r.start, offsets[i], "range of record {i} starts at it");
            assert!(r.end > r.start && r.end <= offsets.get(i + 1).copied().unwrap_or(end));
            assert_eq!(
                r.segment,
                segment_path(&p, offsets[i] - offsets[i] % SEGMENT)
            );
        }
        for (i, &o) in offsets.iter().enumerate() {
            let s = shard.read_at(CommitLogOffset(o)).await.unwrap();
            assert_eq!(s.is_some(), !d.contains(&i), "read_at of record {i}");
        }
        // Nor by key: the index still points at the damaged records.
        for &i in &d {
            for j in [i.saturating_sub(1), i, i + 1] {
                let found = shard
                    .query_by_key(TOPIC, &format!("k{j}"), 0, i64::MAX, 4)
                    .await
                    .unwrap();
                let want = usize::from(!d.contains(&j) && j < RECORDS);
                assert_eq!(found.len(), want, "query of key k{j}");
            }
        }
        // The log takes appends after the damage, and a second recovery finds the same.
        append_one(&shard, 0, b"after").await.unwrap();
        shard.close().await.unwrap();
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        assert_eq!(got.len(), expected.len() + 1);
        assert_eq!(shard.quarantined(), ranges);
        shard.close().await.unwrap();
    });
    assert_eq!(
        segment_files(dir),
        files_before,
        "no segment was deleted (none is added: the append fits in the last one)"
    );
}

#[test]
fn a_flip_in_a_middle_segment_is_quarantined_and_later_segments_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, end) = write_log(dir.path());
    assert!(end > 3 * SEGMENT, "four segments");
    let victim = (0..RECORDS)
        .find(|&i| offsets[i] > SEGMENT + SEGMENT / 2)
        .unwrap();
    damage(dir.path(), offsets[victim] + 400, 1);
    check_quarantined(dir.path(), offsets, end, vec![victim]);
}

#[test]
fn damage_at_segment_edges_and_in_the_oldest_segment_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, end) = write_log(dir.path());
    // The oldest segment's middle; the first record of the third segment (its header: the
    // segment's start is not a valid record); the last record before the second segment's
    // end-of-segment filler (the scan must cross into the next segment to go on).
    let oldest = 30;
    let first_of_third = (0..RECORDS).find(|&i| offsets[i] == 2 * SEGMENT).unwrap();
    let last_of_second = (0..RECORDS).rfind(|&i| offsets[i] < 2 * SEGMENT).unwrap();
    assert!(last_of_second + 1 == first_of_third);
    damage(dir.path(), offsets[oldest] + 200, 7);
    damage(dir.path(), offsets[first_of_third] + 5, 1);
    damage(dir.path(), offsets[last_of_second] + 100, 3);
    check_quarantined(
        dir.path(),
        offsets,
        end,
        vec![oldest, last_of_second, first_of_third],
    );
}

#[test]
fn a_torn_tail_after_a_quarantined_record_is_still_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, _end) = write_log(dir.path());
    damage(dir.path(), offsets[10] + 300, 1);
    // A torn tail: from the middle of a record of the last segment on, zeros.
    let last = offsets[RECORDS - 1] - offsets[RECORDS - 1] % SEGMENT;
    let torn = (0..RECORDS).find(|&i| offsets[i] > last).unwrap() + 5;
    let tear = offsets[torn] + 100;
    let seg = segment_path(dir.path(), tear - tear % SEGMENT);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[(tear % SEGMENT) as usize..].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(
        *segment_files(dir.path()).last().unwrap(),
        format!("{:020}", tear - tear % SEGMENT),
        "the tear is in the last segment"
    );
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..torn)
            .filter(|&i| i != 10)
            .map(|i| body(i, 600))
            .collect();
        assert_eq!(bodies_of(&got), expected);
        let st = shard.stats();
        assert_eq!(st.write_offset, offsets[torn], "cut at the torn record");
        assert_eq!(st.quarantined_ranges, 1, "the tail is cut, not quarantined");
        assert_eq!(shard.queue_offsets(TOPIC, 0).max, torn as u64);
        let r = append_one(&shard, 0, b"after").await.unwrap();
        assert_eq!(r.first_queue_offset, torn as u64);
        assert_eq!(r.first_commit_log_offset, offsets[torn]);
        shard.close().await.unwrap();
    });
}

#[test]
fn a_tear_in_an_older_segment_deletes_only_segments_without_a_valid_record() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, _end) = write_log(dir.path());
    // Zeros from record 100 to the end of its segment, and the later segments emptied too
    // (zeros): nothing valid after the tear, so it is a torn tail and they go.
    let tear = offsets[100] + 50;
    let first = tear - tear % SEGMENT;
    for name in segment_files(dir.path()) {
        let start: u64 = name.parse().unwrap();
        let seg = segment_path(dir.path(), start);
        let mut bytes = std::fs::read(&seg).unwrap();
        if start == first {
            bytes[(tear % SEGMENT) as usize..].fill(0);
        } else if start > first {
            bytes.fill(0);
        }
        std::fs::write(&seg, &bytes).unwrap();
    }
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        assert_eq!(
            bodies_of(&got),
            (0..100).map(|i| body(i, 600)).collect::<Vec<_>>()
        );
        let st = shard.stats();
        assert_eq!(st.write_offset, offsets[100]);
        assert_eq!(st.recovery_truncated_segments, 2);
        assert_eq!(st.quarantined_ranges, 0);
        shard.close().await.unwrap();
    });
    assert_eq!(
        segment_files(dir.path()),
        vec![format!("{:020}", 0), format!("{first:020}")]
    );
}

#[test]
fn a_record_corrupt_on_disk_at_run_time_is_stepped_over_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        // Nothing stays in memory after its write: reads come from the segment file.
        let (c, f) = with_faults(cold_config(&p));
        let shard = Shard::open(c).await.unwrap();
        let offsets = append_numbered_offsets(&shard, 0..100, 1000, false, |i| {
            if i == 40 {
                // The media flips a bit of record 40's body as it is written.
                f.flip_bit_on_write_at(shard.stats().write_offset + 300);
            }
        })
        .await;
        shard.sync().await.unwrap();
        let reads_before = shard.stats().disk_reads;

        // A pull whose window holds only the bad record: nothing served, and the next
        // offset is past it, so a consumer moves on.
        let filter = TagFilter::All;
        let one = |q: u64| ReadRequest {
            topic: TOPIC,
            queue_id: 0,
            queue_offset: QueueOffset(q),
            max_messages: 1,
            max_bytes: 1 << 20,
            filter: &filter,
        };
        let r = shard.read(&one(40)).await.unwrap();
        assert_eq!(r.status, ReadStatus::NoMatchedMessage);
        assert!(r.records.is_empty());
        assert_eq!(r.next_queue_offset, 41);
        assert!(
            shard.stats().disk_reads > reads_before,
            "it was read from disk"
        );
        let st = shard.stats();
        assert_eq!((st.quarantined_ranges, st.skipped_records), (1, 1));
        let q = shard.quarantined();
        assert_eq!((q[0].start, q[0].found_by_recovery), (offsets[40], false));

        // A reader walking the whole queue gets every other record, in order.
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..100)
            .filter(|&i| i != 40)
            .map(|i| body(i, 1000))
            .collect();
        assert_eq!(bodies_of(&got), expected);
        let st = shard.stats();
        assert_eq!(st.skipped_records, 2, "stepped over once per walk");
        assert_eq!(
            shard.skipped_in_queue(TOPIC, 0),
            1,
            "one queue offset skipped"
        );
        assert_eq!(shard.skipped_in_queue(TOPIC, 1), 0);
        assert_eq!(st.quarantined_ranges, 1, "the same span, not a new one");
        // Once quarantined it is stepped over without being read: the one-record window
        // from 40 is filled with record 41.
        let r = shard.read(&one(40)).await.unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset),
            (ReadStatus::Found, QueueOffset(42))
        );
        assert_eq!(
            bodies_of(&[r.records[0].as_bytes().to_vec()]),
            vec![body(41, 1000)]
        );
        assert_eq!(shard.stats().skipped_records, 3);
        assert!(shard
            .read_at(CommitLogOffset(offsets[40]))
            .await
            .unwrap()
            .is_none());
        assert!(shard
            .read_at(CommitLogOffset(offsets[41]))
            .await
            .unwrap()
            .is_some());
        shard.close().await.unwrap();
    });
    // After a restart, recovery finds it too and keeps the rest.
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        assert_eq!(got.len(), 99);
        assert_eq!(shard.stats().quarantined_ranges, 1);
        assert!(shard.quarantined()[0].found_by_recovery);
        shard.close().await.unwrap();
    });
}

#[test]
fn a_damaged_record_whose_consume_queue_entry_is_lost_too_is_stepped_over() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, end) = write_log(dir.path());
    damage(dir.path(), offsets[50] + 300, 1);
    // The ConsumeQueue is rebuilt from the log, which cannot say where record 50 was:
    // queue offset 50 has no entry (a hole between 49 and 51).
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(shard.queue_offsets(TOPIC, 0).max, RECORDS as u64);
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..RECORDS)
            .filter(|&i| i != 50)
            .map(|i| body(i, 600))
            .collect();
        assert_eq!(bodies_of(&got), expected);
        let st = shard.stats();
        assert_eq!(st.write_offset, end);
        assert_eq!((st.quarantined_ranges, st.skipped_records), (1, 1));
        assert_eq!(shard.skipped_in_queue(TOPIC, 0), 1);
        // A pull starting at the hole moves past it.
        let filter = TagFilter::All;
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(50),
                max_messages: 1,
                max_bytes: 1 << 20,
                filter: &filter,
            })
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset),
            (ReadStatus::Found, QueueOffset(52))
        );
        assert_eq!(
            bodies_of(&[r.records[0].as_bytes().to_vec()]),
            vec![body(51, 600)]
        );
        shard.close().await.unwrap();
    });
}

#[test]
fn a_damaged_run_longer_than_a_scan_window_is_one_range() {
    // 4 MiB segments: the scan reads 1 MiB windows, and the search for the next valid
    // record has to go on across several of them.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let (offsets, end) = shard::run_local(move || async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let offsets = append_numbered_offsets(&shard, 0..3000, 1000, false, |_| {}).await;
        let end = shard.stats().write_offset.0;
        shard.close().await.unwrap();
        (offsets, end)
    });
    assert!(
        end > 3 << 20 && end < 4 << 20,
        "one segment of 3 MiB and more"
    );
    let seg = segment_path(dir.path(), 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let damaged: Vec<usize> = (0..3000)
        .filter(|&i| (512 << 10..1740 << 10).contains(&offsets[i]))
        .collect();
    for &i in &damaged {
        bytes[offsets[i] as usize + 200] ^= 0x01;
    }
    std::fs::write(&seg, &bytes).unwrap();
    let (first, last) = (damaged[0], *damaged.last().unwrap());
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 0, &TagFilter::All).await;
        let expected: Vec<_> = (0..3000)
            .filter(|i| !(first..=last).contains(i))
            .map(|i| body(i, 1000))
            .collect();
        assert_eq!(bodies_of(&got).len(), expected.len());
        assert_eq!(bodies_of(&got), expected);
        let q = shard.quarantined();
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!((q[0].start, q[0].end), (offsets[first], offsets[last + 1]));
        assert_eq!(shard.stats().write_offset, end);
        assert_eq!(shard.stats().skipped_records as usize, last - first + 1);
        shard.close().await.unwrap();
    });
}

#[test]
fn a_header_damaged_into_an_end_of_segment_blank_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, end) = write_log(dir.path());
    // Record 20's header now reads "blank to the end of the segment": without a check the
    // scan would jump to the next segment and lose the rest of this one silently.
    let victim = 20;
    let seg = segment_path(dir.path(), 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = offsets[victim] as usize;
    bytes[at..at + 4].copy_from_slice(&((SEGMENT as usize - at) as i32).to_be_bytes());
    bytes[at + 4..at + 8].copy_from_slice(&message::BLANK_MAGIC_CODE.to_be_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    // Rebuilt from the log, the ConsumeQueue has only what the scan found.
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();
    check_quarantined(dir.path(), offsets, end, vec![victim]);
}

/// Walks the whole log by physical offset as the timer and replication do (`read_log`),
/// returning the offset of every record found and the quarantined runs stepped over.
async fn walk_log(shard: &Shard) -> (Vec<u64>, Vec<(u64, u64)>) {
    let (min, end) = shard.log_bounds();
    let (mut records, mut skipped) = (Vec::new(), Vec::new());
    let mut at = min;
    for _ in 0..100_000 {
        if at >= end {
            break;
        }
        let Some(run) = shard.read_log(at, 8 << 10).await.unwrap() else {
            break;
        };
        assert_eq!(run.start, at);
        assert!(run.next > at, "the walk moves on");
        if run.quarantined {
            assert!(run.bytes.is_empty(), "no quarantined byte is handed out");
            skipped.push((run.start, run.next));
        } else {
            let bytes = run.bytes.as_bytes();
            let mut pos = 0;
            while pos < bytes.len() {
                match message::peek_record(&bytes[pos..]) {
                    message::Peek::Record(n) => {
                        records.push(at + pos as u64);
                        pos += n;
                    }
                    message::Peek::Blank(n) => pos += n,
                    // The end-of-segment marker: only its header is in the run.
                    message::Peek::Invalid
                        if bytes.len() - pos == 8
                            && bytes[pos + 4..pos + 8]
                                == message::BLANK_MAGIC_CODE.to_be_bytes() =>
                    {
                        break
                    }
                    message::Peek::Invalid => {
                        panic!("a run holds an invalid unit at {}", at + pos as u64)
                    }
                }
            }
        }
        at = run.next;
    }
    assert_eq!(at, end, "the walk reached the log's end");
    (records, skipped)
}

/// A reader of the log by offset (the timer looking for its deliveries, replication) steps
/// over a quarantined range exactly as a pull does, whether the damage left a record's
/// structure (a flipped body byte) or not (garbage over a header): every other record is
/// found, in order, and the walk reaches the log's end.
#[test]
fn a_walk_of_the_log_by_offset_steps_over_quarantined_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let (offsets, end) = write_log(dir.path());
    // A header made garbage (no record structure left), and a flipped body byte.
    let headless = 40;
    let flipped = 200;
    for k in 0..8 {
        damage(dir.path(), offsets[headless] + k, 0x5a);
    }
    damage(dir.path(), offsets[flipped] + 400, 1);
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(shard.quarantined().len(), 2, "{:?}", shard.quarantined());
        let (found, skipped) = walk_log(&shard).await;
        let expected: Vec<u64> = (0..RECORDS)
            .filter(|&i| i != headless && i != flipped)
            .map(|i| offsets[i])
            .collect();
        assert_eq!(found, expected, "every record outside the damage, in order");
        let ranges: Vec<(u64, u64)> = shard
            .quarantined()
            .iter()
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(skipped, ranges, "each range stepped over once, whole");
        assert_eq!(shard.log_bounds().1, end);
        // A walk that starts inside a range steps to its end.
        let inside = shard
            .read_log(offsets[headless] + 8, 4096)
            .await
            .unwrap()
            .unwrap();
        assert!(inside.quarantined);
        assert_eq!(inside.next, ranges[0].1);
        // A run ends where a range starts: it never holds a damaged record.
        let before = shard
            .read_log(offsets[flipped - 1], 1 << 20)
            .await
            .unwrap()
            .unwrap();
        assert!(!before.quarantined);
        assert_eq!(before.next, offsets[flipped]);
        shard.close().await.unwrap();
    });
}
