#![allow(clippy::unwrap_used)]
//! Consumers catching up from disk, window after window: each read that goes to the
//! segment files starts the reads of the window that follows, and the next pull uses them.
//! Every record still comes back whole and in order, with two consumers taking turns on
//! different queues, and the disk reads no more than the records' own bytes (plus block
//! rounding) to do it.

mod common;

use common::*;
use shard::Shard;

const QUEUES: u32 = 4;
/// Records per append: each batch is a run of about 16 KiB of one queue.
const BATCH: usize = 16;
const ROUNDS: usize = 30;
/// Messages per pull.
const WINDOW: u32 = 24;

#[test]
fn windows_read_ahead_come_back_whole_and_in_order() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(cold_config(&p)).await.unwrap();
        let (expected, queue_bytes) = append_interleaved(&shard, QUEUES, ROUNDS, BATCH).await;
        shard.sync().await.unwrap();

        // Queues 0 and 1 read in turns, one window each, as two consumers would.
        let got = read_in_turns(&shard, 2, (ROUNDS * BATCH) as u64, WINDOW).await;
        for q in 0..2 {
            assert_eq!(bodies_of(&got[q]), expected[q], "queue {q}");
        }

        let stats = shard.stats();
        // Every read started ahead was used, and after each queue's first window (at most
        // three reads: a window spans up to three of the queue's batches) every read a pull
        // needed had been started ahead.
        assert!(stats.readahead_started > 0, "{stats:?}");
        assert_eq!(stats.readahead_hits, stats.readahead_started, "{stats:?}");
        assert!(
            stats.disk_reads - stats.readahead_started <= 2 * 3,
            "{} reads by pulls themselves: {stats:?}",
            stats.disk_reads - stats.readahead_started
        );
        // Reads ahead are the reads the pulls would have made: no more bytes than the two
        // queues' records rounded out to blocks at each read's two ends.
        let own = queue_bytes[0] + queue_bytes[1];
        let rounding = stats.disk_reads * 2 * 4096;
        assert!(
            stats.disk_read_bytes <= own + rounding,
            "read {} bytes from disk for {own} bytes of records in {} reads",
            stats.disk_read_bytes,
            stats.disk_reads
        );
        shard.close().await.unwrap();
    });
}
