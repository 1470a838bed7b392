#![allow(clippy::unwrap_used)]
//! With several chunk writes in flight (async flush, full chunks sealed mid-block and
//! padded to a block boundary with a filler), every record reads back intact from disk,
//! before and after a restart, and recovery keeps the whole log (fillers included).

mod common;

use common::*;
use message::TagFilter;
use shard::{FlushPolicy, Shard};

fn pipelined_config(dir: &std::path::Path) -> shard::ShardConfig {
    let mut c = small_config(dir);
    c.segment_bytes = 256 << 10;
    c.write_chunk_bytes = 16 << 10;
    c.write_queue_depth = 4;
    // Nothing stays in memory after its write: reads come from the segment files.
    c.hot_bytes_max = 0;
    c.flush = FlushPolicy::Async {
        interval_ms: 5,
        dirty_bytes_max: 256 << 10,
    };
    c.consume_queue_file_entries = 4096;
    c
}

#[test]
fn records_written_by_the_pipeline_read_back_from_disk_and_survive_restart() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(pipelined_config(&p)).await.unwrap();
        let mut expected = Vec::new();
        let mut i = 0;
        // ~2 MiB in batches of 3 records of varied sizes: chunks end mid-block all along.
        for _ in 0..700 {
            let mut batch = Vec::new();
            for _ in 0..3 {
                let b = body(i, 100 + (i * 131) % 1400);
                batch.extend(record(TOPIC, &b, None, None));
                expected.push(b);
                i += 1;
            }
            shard.append(TOPIC, 0, &batch).await.unwrap();
        }
        let before = shard.stats();
        assert!(before.write_offset > 4 * (256 << 10), "{before:?}");
        assert_eq!(
            bodies_of(&read_all(&shard, TOPIC, 0, &TagFilter::All).await),
            expected
        );
        shard.close().await.unwrap();

        let shard = Shard::open(pipelined_config(&p)).await.unwrap();
        let after = shard.stats();
        assert_eq!(after.write_offset, before.write_offset);
        assert_eq!(after.recovery_truncated_segments, 0);
        assert_eq!(
            bodies_of(&read_all(&shard, TOPIC, 0, &TagFilter::All).await),
            expected
        );
        // Appends continue after the recovered end.
        let more = body(i, 333);
        append_one(&shard, 0, &more).await.unwrap();
        expected.push(more);
        shard.close().await.unwrap();
        let shard = Shard::open(pipelined_config(&p)).await.unwrap();
        assert_eq!(
            bodies_of(&read_all(&shard, TOPIC, 0, &TagFilter::All).await),
            expected
        );
        shard.close().await.unwrap();
    });
}
