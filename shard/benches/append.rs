//! Append throughput of one shard on one core (1 KiB records, 64 per append, async flush)
//! next to the raw O_DIRECT sequential-write bandwidth of the same directory (glommio
//! DmaFile, 1 MiB writes), measured in the same run.
//!
//! `cargo bench -p shard --bench append` (BENCH_DIR=/path to choose the disk; default /tmp).

use std::rc::Rc;
use std::time::Instant;

use message::{encode_record, MessageFields};
use shard::{FlushPolicy, Shard, ShardConfig};

const TOTAL_BYTES: u64 = 1 << 30;
const RECORD_BYTES: usize = 1024;
const BATCH_RECORDS: usize = 64;

fn main() {
    let base = std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into());
    let dir = match tempfile::tempdir_in(&base) {
        Ok(d) => d,
        Err(e) => panic!("tempdir in {base}: {e}"),
    };
    let path = dir.path().to_owned();
    let (raw, shard_mbps, records) = shard::run_local(move || async move {
        let raw = raw_bandwidth(&path.join("raw")).await;
        let (mbps, records) = shard_bandwidth(&path.join("shard")).await;
        (raw, mbps, records)
    });
    println!("| what | MB/s |");
    println!("| --- | ---: |");
    println!("| raw O_DIRECT sequential write (1 MiB, DmaFile) | {raw:.0} |");
    println!(
        "| shard append (1 KiB records x {BATCH_RECORDS}/append, async flush) | {shard_mbps:.0} |"
    );
    println!("| ratio | {:.0}% |", 100.0 * shard_mbps / raw);
    println!(
        "{{\"raw_mbps\":{raw:.1},\"shard_mbps\":{shard_mbps:.1},\"records\":{records},\"record_bytes\":{RECORD_BYTES},\"batch\":{BATCH_RECORDS}}}"
    );
}

async fn raw_bandwidth(path: &std::path::Path) -> f64 {
    let file = match glommio::io::DmaFile::create(path).await {
        Ok(f) => f,
        Err(e) => panic!("create {}: {e}", path.display()),
    };
    let _ = file.pre_allocate(TOTAL_BYTES, false).await;
    let mut buf = file.alloc_dma_buffer(1 << 20);
    buf.as_bytes_mut().fill(0x5a);
    let buf = Rc::new(buf);
    let start = Instant::now();
    let mut pos = 0;
    while pos < TOTAL_BYTES {
        if let Err(e) = file.write_rc_at(buf.clone(), pos).await {
            panic!("raw write: {e}");
        }
        pos += 1 << 20;
    }
    let _ = file.fdatasync().await;
    let secs = start.elapsed().as_secs_f64();
    let _ = file.close().await;
    let _ = std::fs::remove_file(path);
    TOTAL_BYTES as f64 / secs / 1e6
}

async fn shard_bandwidth(dir: &std::path::Path) -> (f64, u64) {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.flush = FlushPolicy::Async {
        interval_ms: 500,
        dirty_bytes_max: 256 << 20,
    };
    c.hot_bytes_max = 32 << 20;
    let shard = match Shard::open(c).await {
        Ok(s) => s,
        Err(e) => panic!("open shard: {e}"),
    };
    let body = vec![b'x'; RECORD_BYTES - 120];
    let props = [("TAGS", "TagA")];
    let mut one = Vec::new();
    if let Err(e) = encode_record(
        &MessageFields {
            topic: "BenchTopic",
            body: &body,
            properties: &props,
            ..Default::default()
        },
        &mut one,
    ) {
        panic!("encode: {e}");
    }
    let batch: Vec<u8> = one.repeat(BATCH_RECORDS);
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut records = 0u64;
    let mut q = 0u32;
    while bytes < TOTAL_BYTES {
        if let Err(e) = shard.append("BenchTopic", q % 8, &batch).await {
            panic!("append: {e}");
        }
        q += 1;
        bytes += batch.len() as u64;
        records += BATCH_RECORDS as u64;
    }
    // Count the time to get everything durable, so the figure is not just memcpy speed.
    if let Err(e) = shard.close().await {
        panic!("close: {e}");
    }
    let secs = start.elapsed().as_secs_f64();
    (bytes as f64 / secs / 1e6, records)
}
