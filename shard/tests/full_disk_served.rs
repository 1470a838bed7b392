#![allow(clippy::unwrap_used)]
//! Nothing corrupt is served after a full disk: four producers append batches of assorted
//! sizes (small-profile sizes: 4 MiB segments, 256 KiB chunks, async flush with a tail ring)
//! while another process fills the filesystem (a real loop-mounted ext4), a reader keeps
//! pulling meanwhile, then space returns and the producers go on. Every record served, from
//! memory while the disk is full and from the files after a reopen, is checked whole (its
//! CRC, and its body against what its producer sent: the body names its own length), no
//! record is stepped over as damaged, and every acknowledged record is served once, in its
//! queue's order. A second run fills the disk early in a segment, with small ConsumeQueue
//! files, so that appends are refused in the middle of indexing their batch (a record
//! needing a new ConsumeQueue block), whose earlier records are then undone.

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::*;
use message::{RecordView, TagFilter};
use shard::{FlushPolicy, ReadRequest, Shard, ShardConfig, TailRingConfig};

#[path = "common/loop_fs.rs"]
mod loop_fs;

const QUEUES: u32 = 4;

/// A body that says who sent it and how long it is, so a short one is told at once.
fn named_body(producer: u32, n: usize, len: usize) -> Vec<u8> {
    let mut b = format!("p{producer}-n{n}-len{len}-").into_bytes();
    let fill = b'a' + (n % 26) as u8;
    b.resize(len.max(b.len()), fill);
    b
}

/// Checks a served record: parses, CRC holds, and its body is as long as it says.
fn check_served(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let v = RecordView::parse(bytes).map_err(|e| e.to_string())?;
    v.verify_crc().map_err(|e| format!("CRC: {e}"))?;
    let body = v.body().to_vec();
    let text = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
    let len: usize = text
        .split('-')
        .nth(2)
        .and_then(|s| s.strip_prefix("len"))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("body does not name its length: {text:?}"))?;
    if body.len() != len {
        return Err(format!(
            "body of {} bytes, sent {len}: {text:?}",
            body.len()
        ));
    }
    Ok(body)
}

/// Reads queue `q` from `from`; returns the bodies served, checked.
async fn read_from(shard: &Shard, q: u32, from: u64) -> (Vec<Vec<u8>>, u64) {
    let mut out = Vec::new();
    let mut at = shard::QueueOffset(from);
    for _ in 0..100_000 {
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: q,
                queue_offset: at,
                max_messages: 32,
                max_bytes: 1 << 20,
                filter: &TagFilter::All,
            })
            .await
            .unwrap();
        for s in &r.records {
            match check_served(s.as_bytes()) {
                Ok(b) => out.push(b),
                Err(e) => panic!("queue {q} near offset {}: served a bad record: {e}", at.0),
            }
        }
        // Past the end: done. Moved (retention deleted the start) or stepped over: go on.
        if r.next_queue_offset <= at {
            break;
        }
        at = r.next_queue_offset;
    }
    (out, at.0)
}

fn config(dir: &std::path::Path, ring: &std::path::Path, small_maps: bool) -> ShardConfig {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.segment_bytes = 4 << 20;
    c.write_chunk_bytes = 256 << 10;
    c.write_queue_depth = 2;
    c.hot_bytes_max = 8 << 20;
    c.message_bytes_max = 1 << 20;
    c.flush = FlushPolicy::Async {
        interval_ms: 5,
        dirty_bytes_max: 256 << 10,
    };
    c.tail_ring = Some(TailRingConfig {
        path: ring.join("shard.tail"),
        ring_bytes: 16 << 20,
    });
    c.disk_reserve_bytes = 1 << 20;
    c.consume_queue_file_entries = 300_000;
    if small_maps {
        // Small ConsumeQueue files and IndexFiles, so that on the full disk appends are
        // also refused when one of a batch's records needs a new file's blocks (the
        // batch's earlier records are then undone).
        c.consume_queue_file_entries = 128;
        c.index_file_slots = 512;
        c.index_file_entries = 2048;
    }
    c.retention_check_interval_ms = 3_600_000;
    c
}

#[derive(Default)]
struct Sent {
    /// Per queue: queue offset -> body acknowledged there.
    acked: Vec<HashMap<u64, Vec<u8>>>,
    refused: u64,
    /// Refusals because a ConsumeQueue file or IndexFile could not get its blocks.
    refused_mapped: u64,
}

#[test]
fn records_served_around_a_really_full_disk_are_whole() {
    full_disk_run(false);
}

#[test]
fn records_served_when_a_full_disk_also_refuses_consume_queue_blocks_are_whole() {
    full_disk_run(true);
}

fn full_disk_run(small_maps: bool) {
    let Some(fs) = loop_fs::loop_fs_or_skip(96) else {
        return;
    };
    let ring_dir = tempfile::tempdir().unwrap();
    let c = config(&fs.mnt.join("shard"), ring_dir.path(), small_maps);
    let mnt = fs.mnt.clone();
    shard::run_local(move || async move {
        let shard = Shard::open(c.clone()).await.unwrap();
        let sent = Rc::new(RefCell::new(Sent {
            acked: vec![HashMap::new(); QUEUES as usize],
            refused: 0,
            refused_mapped: 0,
        }));
        // Phases: 0 = before the fill, 1 = full, 2 = space back; producers stop at 3.
        let phase = Rc::new(std::cell::Cell::new(0u8));
        let paused = Rc::new(std::cell::Cell::new(false));
        let mut producers = Vec::new();
        for p in 0..4u32 {
            let (shard, sent, phase) = (shard.clone(), sent.clone(), phase.clone());
            let paused = paused.clone();
            producers.push(glommio::spawn_local(async move {
                let mut n = 0usize;
                while phase.get() < 3 {
                    if paused.get() {
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                    let count = 1 + (n * 7 + p as usize) % 8;
                    let mut batch = Vec::new();
                    let mut bodies = Vec::new();
                    for _ in 0..count {
                        let len = 100 + (n * 977 + p as usize * 131) % 6000;
                        let b = named_body(p, n, len);
                        batch.extend(record(TOPIC, &b, None, None));
                        bodies.push(b);
                        n += 1;
                    }
                    let q = (n as u32 + p) % QUEUES;
                    // Like a client: a refused batch is sent again, the same bytes, a few
                    // times.
                    for _attempt in 0..3 {
                        match shard.append(TOPIC, q, &batch).await {
                            Ok(r) => {
                                let mut s = sent.borrow_mut();
                                for (i, b) in bodies.iter().enumerate() {
                                    let prev = s.acked[q as usize]
                                        .insert(r.first_queue_offset.0 + i as u64, b.clone());
                                    assert!(prev.is_none(), "a queue offset given twice");
                                }
                                break;
                            }
                            Err(e) => {
                                assert!(
                                    e.is_shortage()
                                        || matches!(
                                            e,
                                            shard::ShardError::Busy { .. }
                                                | shard::ShardError::DiskFull { .. }
                                        ),
                                    "{e}"
                                );
                                let why = e.to_string();
                                let mapped =
                                    why.contains("/consumequeue/") || why.contains("/index/");
                                {
                                    let mut s = sent.borrow_mut();
                                    s.refused += 1;
                                    s.refused_mapped += u64::from(mapped);
                                }
                                glommio::timer::sleep(Duration::from_millis(2)).await;
                            }
                        }
                    }
                    glommio::yield_if_needed().await;
                }
            }));
        }
        // A reader following every queue while all this happens.
        let reader = {
            let (shard, phase) = (shard.clone(), phase.clone());
            glommio::spawn_local(async move {
                let mut next = [0u64; QUEUES as usize];
                let mut served = 0usize;
                while phase.get() < 3 {
                    for q in 0..QUEUES {
                        let (got, at) = read_from(&shard, q, next[q as usize]).await;
                        served += got.len();
                        next[q as usize] = at;
                    }
                    glommio::timer::sleep(Duration::from_millis(3)).await;
                }
                served
            })
        };
        let wait_appended = |bytes: u64| {
            let shard = shard.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(120);
                while shard.stats().appended_bytes < bytes {
                    assert!(Instant::now() < deadline, "appends stalled");
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        wait_appended(20 << 20).await;
        if small_maps {
            // The fill comes early in a segment, with everything appended written: the
            // appends after it have most of a segment to go before a new one is needed,
            // and meet the ConsumeQueues' need for new blocks first.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let at = shard.stats().write_offset.0 % c.segment_bytes;
                if at < c.segment_bytes / 4 {
                    break;
                }
                assert!(Instant::now() < deadline, "appends stalled");
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            paused.set(true);
            let written = eventually(Duration::from_secs(60), Duration::from_millis(5), || {
                let st = shard.stats();
                st.written_offset >= st.write_offset
            })
            .await;
            assert!(written, "the appended log was not written");
        }
        // Another process fills the disk while the producers go on.
        let filling = {
            let mnt = mnt.clone();
            std::thread::spawn(move || loop_fs::fill(&mnt))
        };
        while !filling.is_finished() {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        let filler = filling.join().unwrap();
        paused.set(false);
        phase.set(1);
        let refused_before = sent.borrow().refused;
        let deadline = Instant::now() + Duration::from_secs(60);
        while sent.borrow().refused < refused_before + 200 {
            assert!(
                Instant::now() < deadline,
                "sends were never refused on a full disk"
            );
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        glommio::timer::sleep(Duration::from_millis(300)).await;
        loop_fs::unfill(&mnt, &filler);
        phase.set(2);
        let now = shard.stats().appended_bytes;
        wait_appended(now + (12 << 20)).await;
        phase.set(3);
        for p in producers {
            p.await;
        }
        let served_live = reader.await;
        assert!(!shard.stats().poisoned);
        let (refused, refused_mapped) = {
            let s = sent.borrow();
            (s.refused, s.refused_mapped)
        };
        eprintln!(
            "served while running: {served_live}; refused sends: {refused}, \
             {refused_mapped} of them for a mapped file's blocks"
        );
        if small_maps {
            assert!(
                refused_mapped > 0,
                "no append was refused for a mapped file"
            );
        }

        let check_all = |shard: Shard, sent: Rc<RefCell<Sent>>, when: &'static str| async move {
            for q in 0..QUEUES {
                let (got, _) = read_from(&shard, q, 0).await;
                let s = sent.borrow();
                let acked = &s.acked[q as usize];
                let mut offsets: Vec<&u64> = acked.keys().collect();
                offsets.sort();
                let want: Vec<&Vec<u8>> = offsets.iter().map(|o| &acked[o]).collect();
                let got: Vec<&Vec<u8>> = got.iter().collect();
                assert_eq!(got.len(), want.len(), "{when}: queue {q}: records served");
                assert!(got == want, "{when}: queue {q}: records served differ");
                assert_eq!(
                    shard.skipped_in_queue(TOPIC, q),
                    0,
                    "{when}: queue {q} skipped records"
                );
            }
            assert!(
                shard.quarantined().is_empty(),
                "{when}: {:?}",
                shard.quarantined()
            );
        };
        check_all(shard.clone(), sent.clone(), "before the reopen").await;
        shard.close().await.unwrap();
        let shard = Shard::open(c.clone()).await.unwrap();
        check_all(shard.clone(), sent.clone(), "after the reopen").await;
        shard.close().await.unwrap();
    });
    drop(ring_dir);
    drop(fs);
}
