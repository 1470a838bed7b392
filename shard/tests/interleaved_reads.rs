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

/// Sixteen queues sent to in turn, one message at a time (a RocketMQ producer's round robin),
/// and caught up from disk together, window by window, as a push consumer does: every
/// record comes back whole and in order, and the disk reads about the log once. A read that
/// reads through the other queues' records serves their pulls too.
#[test]
fn queues_sent_to_in_turn_and_caught_up_together_are_read_from_disk_about_once() {
    const QUEUES: u32 = 16;
    const ROUNDS: usize = 96;
    const WINDOW: u32 = 32;
    in_temp_dir(move |p| async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let (expected, queue_bytes) = append_interleaved(&shard, QUEUES, ROUNDS, 1).await;
        shard.close().await.unwrap();

        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let before = shard.stats();
        let got = read_in_turns(&shard, QUEUES, ROUNDS as u64, WINDOW).await;
        for q in 0..QUEUES as usize {
            assert_eq!(bodies_of(&got[q]), expected[q], "queue {q}");
        }
        let log: u64 = queue_bytes.iter().sum();
        let read = shard.stats().disk_read_bytes - before.disk_read_bytes;
        assert!(
            read >= log && read < log * 3 / 2,
            "catching up on {log} bytes of log read {read} bytes from disk"
        );
        shard.close().await.unwrap();
    });
}

/// A consumer catching up from disk on records far apart (one read each) keeps at most
/// sixteen reads at the disk at once, however many its pull needs: the device queue stays
/// open to the log's own writes. Every record still comes back, in order.
#[test]
fn a_catching_up_pull_keeps_at_most_sixteen_reads_at_the_disk() {
    const QUEUES: u32 = 64;
    const ROUNDS: usize = 48;
    in_temp_dir(move |p| async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let (expected, _) = append_interleaved(&shard, QUEUES, ROUNDS, 1).await;
        shard.close().await.unwrap();

        let (config, faults) = with_faults(cold_config(&p));
        let shard = Shard::open(config).await.unwrap();
        faults.slow_reads_ms(20);
        let r = shard
            .read(&ReadRequest {
                topic: TOPIC,
                queue_id: 0,
                queue_offset: QueueOffset(0),
                max_messages: ROUNDS as u32,
                max_bytes: 8 << 20,
                filter: &TagFilter::All,
            })
            .await
            .unwrap();
        let got: Vec<Vec<u8>> = r.records.iter().map(|s| s.as_bytes().to_vec()).collect();
        assert_eq!(bodies_of(&got), expected[0]);
        let stats = shard.stats();
        assert!(stats.disk_reads >= ROUNDS as u64, "{stats:?}");
        let peak = faults.segment_reads_in_flight_peak();
        assert!(
            (2..=16).contains(&peak),
            "{peak} reads at the disk at once, of {}",
            stats.disk_reads
        );
        shard.close().await.unwrap();
    });
}
