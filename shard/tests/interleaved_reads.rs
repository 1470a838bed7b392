#![allow(clippy::unwrap_used)]
//! Queues written in turns lie interleaved in the log. A consumer catching up on one queue
//! from disk gets its records whole and in order, and the disk reads it causes stay close to
//! that queue's own bytes: the other queues' batches between its records are skipped, not
//! read through.

mod common;

use common::*;
use message::TagFilter;
use shard::{ReadRequest, ReadResult, Shard};

const QUEUES: u32 = 4;
/// Records per append: each batch is a run of about 16 KiB of one queue.
const BATCH: usize = 16;

/// Queue 0 from its start in one read, and the records' bytes.
async fn read_queue_0(shard: &Shard) -> (ReadResult, Vec<Vec<u8>>) {
    let r = shard
        .read(&ReadRequest {
            topic: TOPIC,
            queue_id: 0,
            queue_offset: QueueOffset(0),
            max_messages: 1024,
            max_bytes: 8 << 20,
            filter: &TagFilter::All,
        })
        .await
        .unwrap();
    let got = r.records.iter().map(|s| s.as_bytes().to_vec()).collect();
    (r, got)
}

#[test]
fn a_queue_reads_back_whole_without_reading_its_neighbours() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let (expected, queue_bytes) = append_interleaved(&shard, QUEUES, 12, BATCH).await;
        shard.close().await.unwrap();

        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let before = shard.stats();
        // One pull covers the whole queue: 12 runs with three other queues' runs between.
        let (r, got) = read_queue_0(&shard).await;
        assert_eq!(bodies_of(&got), expected[0]);
        // Records of one run lie together in one read and join into one slice (sent with
        // one write); the last of a run and the first of the next do not.
        let (a, b) = (&r.records[0], &r.records[1]);
        let joined = a.joined(b).expect("neighbours in one read join");
        assert_eq!(joined.as_bytes(), [a.as_bytes(), b.as_bytes()].concat());
        assert!(r.records[BATCH - 1].joined(&r.records[BATCH]).is_none());
        assert!(b.joined(a).is_none(), "only in log order");
        let after = shard.stats();
        let read = after.disk_read_bytes - before.disk_read_bytes;
        assert!(
            read >= queue_bytes[0] && read < queue_bytes[0] * 3 / 2,
            "reading {} bytes of queue 0 read {read} bytes from disk",
            queue_bytes[0]
        );
        assert!(after.disk_reads - before.disk_reads >= 12, "{after:?}");
        for q in 1..QUEUES {
            assert_eq!(
                bodies_of(&read_all(&shard, TOPIC, q, &TagFilter::All).await),
                expected[q as usize],
                "queue {q}"
            );
        }
        shard.close().await.unwrap();
    });
}

/// A consumer tailing the log reads from the chunk still being appended to: its records come
/// back whole and in order, copied together, so the whole pull goes out as one run.
#[test]
fn a_tailing_read_of_the_open_chunk_is_one_copy() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.segment_bytes = 4 << 20;
        c.write_chunk_bytes = 1 << 20;
        c.hot_bytes_max = 4 << 20;
        c.flush = shard::FlushPolicy::Async {
            interval_ms: 60_000,
            dirty_bytes_max: 64 << 20,
        };
        let shard = Shard::open(c).await.unwrap();
        let mut expected = Vec::new();
        for i in 0..40 {
            // Queue 1's records lie between queue 0's.
            for q in 0..2u32 {
                let b = body(i * 2 + q as usize, 300);
                if q == 0 {
                    expected.push(b.clone());
                }
                append_one(&shard, q, &b).await.unwrap();
            }
        }
        let (r, got) = read_queue_0(&shard).await;
        assert_eq!(bodies_of(&got), expected);
        let mut run = r.records[0].clone();
        for s in &r.records[1..] {
            run = run.joined(s).expect("records copied together join");
        }
        assert_eq!(run.as_bytes(), got.concat());
        assert_eq!(shard.stats().disk_reads, 0);
        shard.close().await.unwrap();
    });
}
