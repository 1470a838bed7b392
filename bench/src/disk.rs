//! `bench disk`: the raw limits of the data disk, through the same I/O path the broker uses
//! (glommio `DmaFile`, O_DIRECT, io_uring): sequential 1 MiB aligned writes with a few in
//! flight, then the latency of fdatasync after a small write.

use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use glommio::io::DmaFile;
use glommio::{LocalExecutorBuilder, Placement};
use serde::Serialize;

use crate::stats::{Latency, Percentiles};

pub const WRITE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy)]
pub struct DiskOptions {
    /// Total bytes written sequentially.
    pub total_bytes: u64,
    /// 1 MiB writes in flight at once.
    pub depth: usize,
    /// Small write + fdatasync rounds.
    pub sync_rounds: usize,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            total_bytes: 512 << 20,
            depth: 4,
            sync_rounds: 200,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DiskReport {
    pub dir: String,
    pub write_bytes: u64,
    pub write_seconds: f64,
    /// Sequential O_DIRECT write bandwidth including the final fdatasync, MB = 10^6 bytes.
    pub write_mb_per_sec: f64,
    /// 4 KiB write + fdatasync, µs.
    pub fdatasync_us: Percentiles,
}

/// io_uring buffer memory of the disk executor: small, to stay well inside a low memlock
/// limit (the 1 MiB buffers are ordinary aligned allocations when they do not fit).
const IO_MEMORY_BYTES: usize = 1 << 20;

pub fn run(dir: &Path, opts: DiskOptions) -> Result<DiskReport> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("bench-disk-{}.tmp", std::process::id()));
    let p2 = path.clone();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name("bench-disk")
        .io_memory(IO_MEMORY_BYTES)
        .spawn(move || async move { measure(&p2, opts).await })
        .map_err(|e| anyhow!("cannot start a glommio executor (io_uring, memlock?): {e}"))?;
    let result = handle
        .join()
        .map_err(|e| anyhow!("the disk executor failed: {e}"))?;
    let _ = std::fs::remove_file(&path);
    let (secs, lat) = result?;
    Ok(DiskReport {
        dir: dir.display().to_string(),
        write_bytes: opts.total_bytes,
        write_seconds: secs,
        write_mb_per_sec: opts.total_bytes as f64 / secs / 1e6,
        fdatasync_us: lat.percentiles(),
    })
}

async fn measure(path: &Path, opts: DiskOptions) -> Result<(f64, Latency)> {
    let file = Rc::new(
        DmaFile::create(path)
            .await
            .map_err(|e| anyhow!("creating {} with O_DIRECT: {e}", path.display()))?,
    );
    let chunks = opts.total_bytes.div_ceil(WRITE_BYTES as u64);
    let depth = opts.depth.max(1) as u64;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for lane in 0..depth {
        let file = Rc::clone(&file);
        tasks.push(glommio::spawn_local(async move {
            let mut i = lane;
            while i < chunks {
                let mut buf = file.alloc_dma_buffer(WRITE_BYTES);
                buf.as_bytes_mut().fill((i % 251) as u8);
                let n = file
                    .write_at(buf, i * WRITE_BYTES as u64)
                    .await
                    .map_err(|e| anyhow!("write: {e}"))?;
                if n != WRITE_BYTES {
                    return Err(anyhow!("short write of {n} bytes"));
                }
                i += depth;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await?;
    }
    file.fdatasync()
        .await
        .map_err(|e| anyhow!("fdatasync: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    let mut lat = Latency::new();
    let mut pos = chunks * WRITE_BYTES as u64;
    for _ in 0..opts.sync_rounds {
        let buf = file.alloc_dma_buffer(4096);
        let t = Instant::now();
        file.write_at(buf, pos)
            .await
            .map_err(|e| anyhow!("write: {e}"))?;
        file.fdatasync()
            .await
            .map_err(|e| anyhow!("fdatasync: {e}"))?;
        lat.record(t.elapsed());
        pos += 4096;
    }
    match Rc::try_unwrap(file) {
        Ok(f) => f.close().await.map_err(|e| anyhow!("close: {e}"))?,
        Err(_) => return Err(anyhow!("internal: the file is still shared")),
    }
    Ok((secs, lat))
}

pub fn table(r: &DiskReport) -> String {
    format!(
        "disk {}: O_DIRECT sequential write {:.0} MB/s ({} MiB in 1 MiB writes, {:.2} s); \
         4 KiB write + fdatasync p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms\n",
        r.dir,
        r.write_mb_per_sec,
        r.write_bytes >> 20,
        r.write_seconds,
        r.fdatasync_us.p50 / 1000.0,
        r.fdatasync_us.p99 / 1000.0,
        r.fdatasync_us.max / 1000.0
    )
}
