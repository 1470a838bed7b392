//! Append throughput of one shard on one core (1 KiB records, 64 per append, async flush)
//! next to the raw O_DIRECT sequential-write bandwidth of the same directory, measured in
//! the same run.
//!
//! `cargo bench -p shard --bench append` (BENCH_DIR=/path to choose the disk, default /tmp;
//! BENCH_ROUNDS=n, default 5; BENCH_TAIL_RING=0 to leave out the tail ring in /dev/shm).
//!
//! Fairness: each round measures raw and then shard on the same directory, both writing the
//! same volume (1 GiB) and both counted until everything is fdatasynced. The raw writer uses
//! writes of the shard's chunk size (one chunk is one O_DIRECT write) at the shard's write
//! queue depth from one reused buffer, which is the disk's best case for a single writer. The
//! machine may be shared and its disk bandwidth varies between seconds, so the figures are
//! medians over rounds, and the ratio is also given per round (raw and shard measured back to
//! back). Each phase also reports how much of its wall time the block device was busy
//! (`io_ticks` of /sys/dev/block/MAJ:MIN/stat), which tells an idle disk from a slow one.

use std::rc::Rc;
use std::time::Instant;

use message::{encode_record, MessageFields};
use shard::{FlushPolicy, Shard, ShardConfig};

const TOTAL_BYTES: u64 = 1 << 30;
const RECORD_BYTES: usize = 1024;
const BATCH_RECORDS: usize = 64;

struct Round {
    raw_mbps: f64,
    shard_mbps: f64,
    raw_busy: Option<f64>,
    shard_busy: Option<f64>,
    /// CPU seconds the executor thread spent in the shard phase: unlike MB/s, it barely
    /// moves when other work shares the machine.
    shard_cpu_s: f64,
}

/// CPU time (user + system) of the calling thread, in seconds.
fn thread_cpu_s() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn main() {
    let base = std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into());
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let defaults = ShardConfig::new(base.clone().into(), 0);
    let (chunk_bytes, depth) = (defaults.write_chunk_bytes, defaults.write_queue_depth);
    let device = BlockDevice::of(std::path::Path::new(&base));
    let mut results = Vec::new();
    let mut records = 0;
    for _ in 0..rounds {
        let dir = match tempfile::tempdir_in(&base) {
            Ok(d) => d,
            Err(e) => panic!("tempdir in {base}: {e}"),
        };
        let path = dir.path().to_owned();
        let dev = device.clone();
        let (raw, shard, shard_cpu_s, n) = shard::run_local(move || async move {
            let busy = dev.as_ref().and_then(BlockDevice::busy_ms);
            let raw = raw_bandwidth(&path.join("raw"), chunk_bytes, depth).await;
            let mid = dev.as_ref().and_then(BlockDevice::busy_ms);
            let cpu = thread_cpu_s();
            let (mbps, secs, n) = shard_bandwidth(&path.join("shard")).await;
            let end = dev.as_ref().and_then(BlockDevice::busy_ms);
            let share = |a: Option<u64>, b: Option<u64>, secs: f64| {
                let (a, b) = (a?, b?);
                Some((b.saturating_sub(a) as f64 / 1e3 / secs).min(1.0))
            };
            let raw_busy = share(busy, mid, raw.1);
            let shard_busy = share(mid, end, secs);
            (
                (raw.0, raw_busy),
                (mbps, shard_busy),
                thread_cpu_s() - cpu,
                n,
            )
        });
        let ((raw_mbps, raw_busy), (shard_mbps, shard_busy)) = (raw, shard);
        records = n;
        let pct = |b: Option<f64>| b.map_or("?".to_owned(), |b| format!("{:.0}%", 100.0 * b));
        eprintln!(
            "round {}: raw {raw_mbps:.0} MB/s (disk busy {}), shard {shard_mbps:.0} MB/s (disk busy {}), {:.0}%, shard thread CPU {shard_cpu_s:.2} s",
            results.len() + 1,
            pct(raw_busy),
            pct(shard_busy),
            100.0 * shard_mbps / raw_mbps
        );
        results.push(Round {
            raw_mbps,
            shard_mbps,
            raw_busy,
            shard_busy,
            shard_cpu_s,
        });
    }
    let raw = median(results.iter().map(|r| r.raw_mbps));
    let shard_mbps = median(results.iter().map(|r| r.shard_mbps));
    let ratio = median(results.iter().map(|r| r.shard_mbps / r.raw_mbps));
    let cpu_s = median(results.iter().map(|r| r.shard_cpu_s));
    let busy = |f: fn(&Round) -> Option<f64>| -> Option<f64> {
        let v: Option<Vec<f64>> = results.iter().map(f).collect();
        v.map(|v| median(v.into_iter()))
    };
    let (raw_busy, shard_busy) = (busy(|r| r.raw_busy), busy(|r| r.shard_busy));
    let busy_cell = |b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{:.0}%", 100.0 * b));
    let busy_json = |b: Option<f64>| b.map_or("null".to_owned(), |b| format!("{b:.3}"));
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("commit {commit}, {cores} cores, kernel {kernel}, dir {base}, {rounds} rounds");
    println!("| what (median of {rounds} rounds) | MB/s | disk busy |");
    println!("| --- | ---: | ---: |");
    println!(
        "| raw O_DIRECT sequential write ({} KiB writes, {depth} in flight, DmaFile) | {raw:.0} | {} |",
        chunk_bytes >> 10,
        busy_cell(raw_busy)
    );
    println!(
        "| shard append (1 KiB records x {BATCH_RECORDS}/append, async flush) | {shard_mbps:.0} | {} |",
        busy_cell(shard_busy)
    );
    println!("| ratio of medians | {:.0}% | |", 100.0 * shard_mbps / raw);
    println!("| median of per-round ratios | {:.0}% | |", 100.0 * ratio);
    println!("| shard executor-thread CPU for 1 GiB | {cpu_s:.2} s | |");
    println!(
        "{{\"commit\":\"{commit}\",\"cores\":{cores},\"kernel\":\"{kernel}\",\"rounds\":{rounds},\"raw_mbps\":{raw:.1},\"shard_mbps\":{shard_mbps:.1},\"ratio_of_medians\":{:.3},\"median_ratio\":{ratio:.3},\"shard_cpu_s\":{cpu_s:.3},\"raw_disk_busy\":{},\"shard_disk_busy\":{},\"raw_write_bytes\":{chunk_bytes},\"write_queue_depth\":{depth},\"records\":{records},\"record_bytes\":{RECORD_BYTES},\"batch\":{BATCH_RECORDS}}}",
        shard_mbps / raw,
        busy_json(raw_busy),
        busy_json(shard_busy)
    );
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The block device holding a directory, for its busy time.
#[derive(Clone)]
struct BlockDevice {
    stat: std::path::PathBuf,
}

impl BlockDevice {
    fn of(dir: &std::path::Path) -> Option<BlockDevice> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let stat = std::path::PathBuf::from(format!(
            "/sys/dev/block/{}:{}/stat",
            libc::major(dev),
            libc::minor(dev)
        ));
        stat.exists().then_some(BlockDevice { stat })
    }

    /// Milliseconds the device has spent with I/O in flight (`io_ticks`, the 10th field).
    fn busy_ms(&self) -> Option<u64> {
        let s = std::fs::read_to_string(&self.stat).ok()?;
        s.split_whitespace().nth(9)?.parse().ok()
    }
}

/// Sequential O_DIRECT writes of `write_bytes` with `depth` in flight; returns MB/s and
/// seconds.
async fn raw_bandwidth(path: &std::path::Path, write_bytes: usize, depth: usize) -> (f64, f64) {
    let file = match glommio::io::DmaFile::create(path).await {
        Ok(f) => Rc::new(f),
        Err(e) => panic!("create {}: {e}", path.display()),
    };
    let _ = file.pre_allocate(TOTAL_BYTES, false).await;
    let mut buf = file.alloc_dma_buffer(write_bytes);
    buf.as_bytes_mut().fill(0x5a);
    let buf = Rc::new(buf);
    let start = Instant::now();
    let mut pos = 0;
    let mut in_flight = std::collections::VecDeque::new();
    while pos < TOTAL_BYTES || !in_flight.is_empty() {
        if pos < TOTAL_BYTES && in_flight.len() < depth {
            let (f, b) = (file.clone(), buf.clone());
            let at = pos;
            in_flight.push_back(glommio::spawn_local(
                async move { f.write_rc_at(b, at).await },
            ));
            pos += write_bytes as u64;
            continue;
        }
        let Some(write) = in_flight.pop_front() else {
            break;
        };
        if let Err(e) = write.await {
            panic!("raw write: {e}");
        }
    }
    if let Err(e) = file.fdatasync().await {
        panic!("raw fdatasync: {e}");
    }
    let secs = start.elapsed().as_secs_f64();
    if let Ok(f) = Rc::try_unwrap(file) {
        let _ = f.close().await;
    }
    let _ = std::fs::remove_file(path);
    (pos as f64 / secs / 1e6, secs)
}

/// MB/s, seconds and records of appending 1 GiB.
async fn shard_bandwidth(dir: &std::path::Path) -> (f64, f64, u64) {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.flush = FlushPolicy::Async {
        interval_ms: std::env::var("BENCH_INTERVAL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500),
        dirty_bytes_max: 256 << 20,
    };
    // BENCH_HOT_MIB: the in-memory tail kept for hot reads (default 32 MiB). Smaller keeps
    // the chunk buffers being recycled in cache.
    c.hot_bytes_max = std::env::var("BENCH_HOT_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(32)
        << 20;
    if let Some(kib) = std::env::var("BENCH_CHUNK_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        c.write_chunk_bytes = kib << 10;
    }
    // BENCH_TAIL_RING=0 leaves out the tail ring (the broker always has one with async
    // flush): what its copy costs.
    if std::env::var("BENCH_TAIL_RING").map_or(true, |v| v != "0") {
        c.tail_ring = Some(shard::TailRingConfig {
            path: shard::TailRingConfig::path_in(std::path::Path::new("/dev/shm"), 0xbe9c, 0),
            ring_bytes: 128 << 20,
        });
    }
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
    (bytes as f64 / secs / 1e6, secs, records)
}
