#![allow(clippy::unwrap_used)]
//! What an open says about the last stop: a clean close is recognised as such ("clean
//! stop", nothing cut), a crash that tore nothing says so without claiming a cut, and a torn
//! last write is cut with the bytes and records it dropped counted.

mod common;

use common::*;
use message::TagFilter;
use shard::{ReportLevel, Shard, ShardError, TailCut};

#[test]
fn a_clean_stop_is_recognised_and_a_crash_after_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(
            shard.recovery_report().line(),
            (
                ReportLevel::Info,
                "new CommitLog: nothing to recover".to_owned()
            )
        );
        append_numbered(&shard, 0..20, 500).await;
        let end = shard.stats().write_offset.0;
        shard.close().await.unwrap();

        // Twice: the second open sees the mark the first one's close left again.
        for round in 0..2 {
            let shard = Shard::open(small_config(&p)).await.unwrap();
            let report = shard.recovery_report();
            assert!(report.is_clean_stop(), "round {round}: {report:?}");
            assert_eq!(report.end, end);
            assert_eq!(report.cut, None);
            let (level, line) = report.line();
            assert_eq!(level, ReportLevel::Info);
            assert_eq!(
                line,
                format!("clean stop: CommitLog ends at {end}, nothing to recover")
            );
            assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 20);
            shard.close().await.unwrap();
        }

        // The open took the mark away: a run that then dies without closing is not taken
        // for a clean one, though its sync-flushed appends left no torn write to cut.
        let shard = Shard::open(small_config(&p)).await.unwrap();
        append_numbered(&shard, 20..25, 500).await;
        let end = shard.stats().write_offset.0;
        drop(shard);
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let report = shard.recovery_report();
        assert!(!report.is_clean_stop(), "{report:?}");
        assert_eq!(report.clean_stop_end, None);
        assert_eq!(
            report.cut, None,
            "only zeros follow the end: nothing is cut"
        );
        assert_eq!(report.end, end);
        let (level, line) = report.line();
        assert_eq!(level, ReportLevel::Warn);
        assert!(line.starts_with("no clean-stop mark"), "{line}");
        assert!(!line.contains("cut the CommitLog"), "{line}");
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 25);
        shard.close().await.unwrap();
    });
}

#[test]
fn a_torn_last_write_is_cut_with_its_bytes_and_records_counted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let (end, record_bytes) = shard::run_local(move || async move {
        let (c, faults) = with_faults(small_config(&p));
        let shard = Shard::open(c).await.unwrap();
        append_numbered(&shard, 0..10, 500).await;
        // The next write tears 200 bytes into the next record (the rest of what it writes
        // becomes garbage) and the "process dies" without closing.
        let end = shard.stats().write_offset.0;
        faults.tear_write_at(end + 200);
        let r = append_one(&shard, 0, &body(10, 500)).await;
        assert!(matches!(r, Err(ShardError::Poisoned { .. })), "{r:?}");
        (end, record(TOPIC, &body(10, 500), None, None).len() as u64)
    });
    // What the torn write left past the last whole record: up to its last non-zero byte.
    let seg = dir.path().join("commitlog").join(format!("{:020}", 0));
    let bytes = std::fs::read(&seg).unwrap();
    let torn_end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    assert!(
        torn_end > end + record_bytes,
        "the garbage reaches past the record"
    );

    let p = dir.path().to_owned();
    shard::run_local(move || async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let report = shard.recovery_report();
        assert_eq!(report.end, end);
        assert_eq!(
            report.cut,
            Some(TailCut {
                at: end,
                bytes: torn_end - end,
                // The torn record's header survived the tear; the garbage after it is no
                // record.
                records: 1,
                unparsed_bytes: torn_end - end - record_bytes,
            })
        );
        let (level, line) = report.line();
        assert_eq!(level, ReportLevel::Warn);
        assert!(
            line.starts_with(&format!(
                "recovery cut the CommitLog at {end}: dropped {} bytes past the last valid \
                 record: 1 record that failed its check or was cut short, then {} bytes",
                torn_end - end,
                torn_end - end - record_bytes
            )),
            "{line}"
        );
        assert!(line.contains("did not stop cleanly"), "{line}");
        assert_eq!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.len(), 10);
        shard.close().await.unwrap();
    });
}
