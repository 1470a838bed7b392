#![allow(clippy::unwrap_used)]
//! Large batches (a fifth of a chunk each) at full speed: chunks that cannot take the next
//! batch are filled to their end and written whole, so their buffers are reused instead of
//! a fresh one being allocated for every chunk (which fragmented the heap and grew the
//! broker's memory without bound), and every record still reads back, also after a restart.

mod common;

use common::*;
use shard::{FlushPolicy, Shard};

const CHUNK: usize = 1 << 20;

fn config(dir: &std::path::Path) -> shard::ShardConfig {
    let mut c = small_config(dir);
    c.segment_bytes = 16 << 20;
    c.write_chunk_bytes = CHUNK;
    c.write_queue_depth = 2;
    c.hot_bytes_max = 4 * CHUNK as u64;
    c.message_bytes_max = 4 << 10;
    // Chunks are sealed because they are full, never by the flush timer.
    c.flush = FlushPolicy::Async {
        interval_ms: 60_000,
        dirty_bytes_max: 2 << 20,
    };
    c.consume_queue_file_entries = 1 << 16;
    c.index_file_slots = 1 << 12;
    c.index_file_entries = 1 << 17;
    c
}

#[test]
fn full_chunks_of_large_batches_reuse_their_buffers() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(config(&p)).await.unwrap();
        let mut expected = Vec::new();
        let mut i = 0;
        // 80 chunks' worth in batches of 180 records of about 1.2 KiB: about 210 KiB, more
        // than a sixteenth of a chunk and less than a quarter.
        let chunks = 80;
        while shard.stats().write_offset < chunks * CHUNK as u64 {
            let batch = numbered_batch(&mut i, 180, |i| 1024 + (i * 37) % 256, &mut expected);
            // At full speed the appends outrun a disk shared with other tests: past 16 MiB
            // not yet written the shard answers Busy (its back-pressure), and the batch is
            // offered again once the writes have caught up, as a client would.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                match shard.append(TOPIC, (i / 180 % 4) as u32, &batch).await {
                    Ok(_) => break,
                    Err(shard::ShardError::Busy { .. }) => {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "the disk never caught up"
                        );
                        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
                    }
                    Err(e) => panic!("append: {e}"),
                }
            }
        }
        let stats = shard.stats();
        // What is live at once is allocated once: the hot ring (4 chunks), sealed chunks
        // waiting for the disk (back-pressure stops appends past 16 MiB of them), the
        // current one and the spares (4), about 25. Past that, chunks reuse buffers;
        // trimming every chunk allocated more buffers than there were chunks.
        assert!(
            stats.chunk_buffers_allocated <= chunks / 2,
            "{} chunk buffers allocated for {} bytes of log",
            stats.chunk_buffers_allocated,
            stats.write_offset
        );
        expected.sort();
        assert_eq!(all_bodies_sorted(&shard, TOPIC, 4).await, expected);
        shard.close().await.unwrap();

        let shard = Shard::open(config(&p)).await.unwrap();
        assert_eq!(shard.stats().write_offset, stats.write_offset);
        assert_eq!(all_bodies_sorted(&shard, TOPIC, 4).await, expected);
        shard.close().await.unwrap();
    });
}

/// With a chunk pool, chunks sealed early by a 1 ms flush are trimmed, and their buffers
/// are given back and taken whole again: every record still reads back, from the hot ring
/// and from the files, also after a restart.
#[test]
fn a_chunk_pool_serves_early_sealed_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let pooled = |p: &std::path::Path| {
        let mut c = config(p);
        c.flush = FlushPolicy::Async {
            interval_ms: 1,
            dirty_bytes_max: 2 << 20,
        };
        // The hot ring (4 chunks), the writes in flight (2) and the one filling, and room.
        c.chunk_pool = 10;
        c
    };
    shard::run_local(move || async move {
        let shard = Shard::open(pooled(&p)).await.unwrap();
        assert_eq!(shard.stats().chunk_buffers_allocated, 10);
        let mut expected = Vec::new();
        let mut i = 0;
        while shard.stats().write_offset < 24 * CHUNK as u64 {
            let batch = numbered_batch(&mut i, 40, |i| 512 + (i * 37) % 1024, &mut expected);
            shard.append(TOPIC, (i % 4) as u32, &batch).await.unwrap();
            // Let the flush timer seal the chunk now and then, mid-way.
            if i % 2000 == 0 {
                glommio::timer::sleep(std::time::Duration::from_millis(3)).await;
            }
        }
        expected.sort();
        assert_eq!(all_bodies_sorted(&shard, TOPIC, 4).await, expected);
        shard.close().await.unwrap();

        let shard = Shard::open(pooled(&p)).await.unwrap();
        assert_eq!(all_bodies_sorted(&shard, TOPIC, 4).await, expected);
        shard.close().await.unwrap();
    });
}
