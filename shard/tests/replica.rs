#![allow(clippy::unwrap_used)]
//! A slave shard fed the master's log run by run holds the same bytes at the same offsets,
//! serves the same queues, survives its own restart, and refuses bytes that are not the next
//! ones or not intact.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use message::TagFilter;
use shard::{FlushPolicy, Shard, ShardConfig, ShardError};

fn master_config(dir: &Path) -> ShardConfig {
    // Async, so appends batch up in chunks with fillers and end segments the way a busy
    // master's log does.
    let mut c = small_config(&dir.join("master"));
    c.flush = FlushPolicy::Async {
        interval_ms: 5,
        dirty_bytes_max: 32 << 10,
    };
    c
}

fn slave_config(dir: &Path) -> ShardConfig {
    small_config(&dir.join("slave"))
}

/// Streams the master's log into the slave in runs of at most `run` bytes, from the
/// slave's end; returns how many runs it took.
async fn catch_up(master: &Shard, slave: &Shard, run: usize) -> usize {
    let mut runs = 0;
    let mut at = slave.log_bounds().1;
    while let Some(r) = master.read_log(at, run).await.unwrap() {
        assert_eq!(r.start, at);
        at = slave.replicate(r.start, r.bytes.as_bytes()).await.unwrap();
        assert_eq!(at, r.next);
        runs += 1;
        assert!(runs < 100_000, "no end to the master's log");
    }
    assert_eq!(at, master.log_bounds().1);
    // The slave (sync flush) serves what it has made durable.
    if at > 0 {
        assert!(slave.wait_safe_past(at - 1, Duration::from_secs(10)).await);
    }
    runs
}

async fn commit_log_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
        .collect();
    names.sort();
    for n in names {
        out.push((
            n.clone(),
            std::fs::read(dir.join("commitlog").join(&n)).unwrap(),
        ));
    }
    out
}

#[test]
fn a_slave_fed_the_masters_log_holds_the_same_bytes_and_queues() {
    in_temp_dir(|dir| async move {
        let master = Shard::open(master_config(&dir)).await.unwrap();
        let slave = Shard::open(slave_config(&dir)).await.unwrap();
        let mut want = Vec::new();
        for round in 0..40usize {
            // Batches of varied sizes over 3 queues, and some keys for the index.
            for q in 0..3u32 {
                let n = 1 + (round * 7 + q as usize) % 9;
                let mut batch = Vec::new();
                for i in 0..n {
                    let b = body(round * 100 + i, 200 + (round * 131 + i * 17) % 2500);
                    let key = format!("k{round}-{q}-{i}");
                    batch.extend(record(TOPIC, &b, None, Some(&key)));
                    want.push(b);
                }
                master.append(TOPIC, q, &batch).await.unwrap();
            }
            // Replicate as we go, in runs smaller than a chunk: the slave's chunks differ
            // from the master's, the offsets may not.
            catch_up(&master, &slave, 3000).await;
        }
        assert!(
            master.log_bounds().1 > 3 * (64 << 10),
            "the log crosses several segments"
        );
        for q in 0..3 {
            assert_eq!(
                slave.queue_offsets(TOPIC, q),
                master.queue_offsets(TOPIC, q)
            );
            assert_eq!(
                read_all(&slave, TOPIC, q, &TagFilter::All).await,
                read_all(&master, TOPIC, q, &TagFilter::All).await
            );
        }
        let found = slave
            .query_by_key(TOPIC, "k3-1-0", 0, i64::MAX, 10)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "the slave indexes keys as it receives them");
        master.close().await.unwrap();
        slave.close().await.unwrap();
        assert_eq!(
            commit_log_bytes(&dir.join("slave")).await,
            commit_log_bytes(&dir.join("master")).await,
            "byte-identical segments"
        );
        // The slave recovers its own log like any other.
        let slave = Shard::open(slave_config(&dir)).await.unwrap();
        let mut got = all_bodies_sorted(&slave, TOPIC, 3).await;
        want.sort();
        got.sort();
        assert_eq!(got, want);
        slave.close().await.unwrap();
    });
}

/// A master whose message limit is above its slave's (raised while running, or configured
/// so): the slave takes the larger record as its master stored it and serves it whole, by
/// offset and to a slave of its own after a promotion.
#[test]
fn a_slave_takes_records_above_its_own_message_limit() {
    in_temp_dir(|dir| async move {
        let mut mc = master_config(&dir);
        mc.message_bytes_max = 16 << 10;
        let master = Shard::open(mc).await.unwrap();
        let mut sc = slave_config(&dir);
        sc.message_bytes_max = 4 << 10;
        let slave = Shard::open(sc).await.unwrap();
        let big = record(TOPIC, &vec![3u8; 8 << 10], None, None);
        master.append(TOPIC, 0, &big).await.unwrap();
        append_numbered(&master, 0..3, 300).await;
        catch_up(&master, &slave, 1 << 20).await;
        let first = slave.read_at(CommitLogOffset(0)).await.unwrap();
        assert_eq!(first.map(|s| s.as_bytes().len()), Some(big.len()));
        assert_eq!(queue_bodies(&slave, 0).await.len(), 4);
        let run = slave.read_log(0, 1024).await.unwrap().unwrap();
        assert_eq!(run.bytes.len(), big.len(), "the big record, whole");
        master.close().await.unwrap();
        slave.close().await.unwrap();
    });
}

#[test]
fn a_slave_refuses_bytes_out_of_place_or_damaged() {
    in_temp_dir(|dir| async move {
        let master = Shard::open(master_config(&dir)).await.unwrap();
        let slave = Shard::open(slave_config(&dir)).await.unwrap();
        append_numbered(&master, 0..5, 300).await;
        let run = master.read_log(0, 1 << 20).await.unwrap().unwrap();
        // Not the slave's end.
        let e = slave
            .replicate(run.start + 1, run.bytes.as_bytes())
            .await
            .unwrap_err();
        assert!(matches!(e, ShardError::Replica(_)), "{e}");
        // A flipped bit in a body fails the CRC; nothing is taken.
        let mut bad = run.bytes.as_bytes().to_vec();
        bad[200] ^= 0x10;
        assert!(slave.replicate(0, &bad).await.is_err());
        // Cut inside a record.
        assert!(slave
            .replicate(0, &run.bytes.as_bytes()[..run.bytes.len() - 3])
            .await
            .is_err());
        assert_eq!(slave.log_bounds(), (0, 0));
        assert_eq!(slave.queue_offsets(TOPIC, 0).max, 0);
        // The intact run is taken.
        assert_eq!(
            slave.replicate(0, run.bytes.as_bytes()).await.unwrap(),
            run.next
        );
        assert!(
            slave
                .wait_safe_past(run.next - 1, Duration::from_secs(10))
                .await
        );
        assert_eq!(queue_bodies(&slave, 0).await.len(), 5);
        master.close().await.unwrap();
        slave.close().await.unwrap();
    });
}

#[test]
fn a_slave_joining_after_retention_starts_where_the_masters_log_starts() {
    in_temp_dir(|dir| async move {
        let slave = Shard::open(slave_config(&dir)).await.unwrap();
        let seg = slave.segment_bytes();
        slave.start_log_at(2 * seg).unwrap();
        assert_eq!(slave.log_bounds(), (2 * seg, 2 * seg));
        // Bytes of a master whose log starts there: a record stamped at that offset.
        let master_dir = dir.join("m2");
        let mut mc = small_config(&master_dir);
        mc.flush = FlushPolicy::Sync;
        let master = Shard::open(mc).await.unwrap();
        // Fill the master to its third segment, then hand the slave from there on.
        let mut i = 0;
        while master.log_bounds().1 < 2 * seg + 1000 {
            append_one(&master, 0, &body(i, 1500)).await.unwrap();
            i += 1;
        }
        let mut at = 2 * seg;
        // The master's bytes from 2*seg on are whole units starting at a segment start.
        while let Some(r) = master.read_log(at, 4096).await.unwrap() {
            at = slave.replicate(r.start, r.bytes.as_bytes()).await.unwrap();
        }
        assert_eq!(at, master.log_bounds().1);
        let q = slave.queue_offsets(TOPIC, 0);
        assert!(
            q.min.0 > 0 && q.max == master.queue_offsets(TOPIC, 0).max,
            "{q:?}"
        );
        assert!(slave.start_log_at(0).is_err(), "not empty any more");
        slave.close().await.unwrap();
        let slave = Shard::open(slave_config(&dir)).await.unwrap();
        assert_eq!(slave.log_bounds().1, at, "recovered where it was");
        slave.close().await.unwrap();
        master.close().await.unwrap();
    });
}

#[test]
fn a_diverged_log_is_cut_back_crash_safely_and_the_cut_bytes_are_kept() {
    in_temp_dir(|dir| async move {
        // `old` was a master (async, with a tail ring): its last writes never reached `new`,
        // the slave that was elected in its place and wrote on.
        let ring = dir.join("ring");
        let old_config = |dir: &Path| {
            let mut c = master_config(dir);
            c.dir = dir.join("old");
            // Nothing is written but full chunks: what it takes lives in memory and the ring.
            c.flush = FlushPolicy::Async {
                interval_ms: 3_600_000,
                dirty_bytes_max: 1 << 40,
            };
            c.tail_ring = Some(shard::TailRingConfig {
                path: ring.join("shard-0.tail"),
                ring_bytes: 1 << 20,
            });
            c
        };
        let old = Shard::open(old_config(&dir)).await.unwrap();
        let new = Shard::open(slave_config(&dir)).await.unwrap();
        append_numbered(&old, 0..40, 900).await;
        catch_up(&old, &new, 5000).await;
        let agreed = new.log_bounds().1;
        append_numbered(&old, 40..55, 900).await; // never replicated
        let mut theirs = Vec::new();
        for i in 100..110 {
            let b = body(i, 700);
            append_one(&new, 0, &b).await.unwrap();
            theirs.push(b);
        }
        let old_end = old.log_bounds().1;
        let keep = dir.join("truncated");
        let cut = old.truncate_to(agreed, &keep).await.unwrap();
        assert_eq!(cut, old_end - agreed);
        assert_eq!(old.log_bounds().1, agreed);
        assert_eq!(
            old.queue_offsets(TOPIC, 0).max.0,
            40,
            "the cut entries are gone"
        );
        let kept: Vec<_> = std::fs::read_dir(&keep).unwrap().collect();
        assert_eq!(kept.len(), 1);
        let kept = std::fs::read(kept[0].as_ref().unwrap().path()).unwrap();
        assert_eq!(kept.len() as u64, cut, "the cut bytes are kept aside");
        assert_eq!(
            bodies_of(&[kept[..message::RecordView::parse(&kept).unwrap().len()].to_vec()]),
            vec![body(40, 900)]
        );
        // It follows the new master from the agreed point; what it takes is in memory and
        // the tail ring (which the cut moved back to the agreed point).
        catch_up(&new, &old, 5000).await;
        let want: Vec<Vec<u8>> = (0..40).map(|i| body(i, 900)).chain(theirs).collect();
        assert_eq!(queue_bodies(&old, 0).await, want);
        assert!(
            old.stats().written_offset < old.log_bounds().1,
            "some only in the ring"
        );
        // A crash (no close): neither the segment files nor the ring bring the cut records
        // back, and the ring brings back what was taken since.
        drop(old);
        let old = Shard::open(old_config(&dir)).await.unwrap();
        assert_eq!(old.log_bounds().1, new.log_bounds().1);
        assert_eq!(queue_bodies(&old, 0).await, want);
        old.close().await.unwrap();
        new.close().await.unwrap();
    });
}

/// A diverged log read from disk before its cut: the reads of the cut records are dropped
/// with them, so the records taken from the new master at the same offsets are what a
/// consumer gets, never the cut ones.
#[test]
fn a_cut_log_serves_what_replaced_the_cut_records_not_earlier_reads_of_them() {
    in_temp_dir(|dir| async move {
        let mut c = master_config(&dir);
        c.dir = dir.join("old");
        c.hot_bytes_max = 0; // written chunks leave memory: reads come from the files
        let old = Shard::open(c).await.unwrap();
        let new = Shard::open(slave_config(&dir)).await.unwrap();
        let mut want = append_numbered(&old, 0..40, 900).await;
        catch_up(&old, &new, 5000).await;
        let agreed = new.log_bounds().1;
        append_numbered(&old, 40..55, 900).await; // never replicated
        old.sync().await.unwrap();
        let before = old.stats().disk_reads;
        assert_eq!(queue_bodies(&old, 0).await.len(), 55);
        assert!(
            old.stats().disk_reads > before,
            "the cut records were read from disk"
        );
        // Enough after the agreed point that its chunk leaves memory again.
        for i in 100..300 {
            let b = body(i, 700);
            append_one(&new, 0, &b).await.unwrap();
            want.push(b);
        }
        old.truncate_to(agreed, &dir.join("truncated"))
            .await
            .unwrap();
        catch_up(&new, &old, 5000).await;
        old.sync().await.unwrap();
        assert_eq!(queue_bodies(&old, 0).await, want);
        assert!(old.quarantined().is_empty(), "{:?}", old.quarantined());
        old.close().await.unwrap();
        new.close().await.unwrap();
    });
}
