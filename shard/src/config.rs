//! The one config struct of a shard. Every field says its default and bounds; `validate`
//! checks them at start-up. The fields of [`ShardLimits`] may change while the shard runs
//! (`Shard::set_limits`); every other field needs a restart.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::storage::FaultInjector;
use crate::ShardError;

/// When appended bytes become durable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlushPolicy {
    /// An append returns once its bytes are in memory; a background flusher writes sealed
    /// chunks at once and fdatasyncs every `interval_ms` or when `dirty_bytes_max` bytes
    /// are not yet durable.
    Async {
        interval_ms: u64,
        dirty_bytes_max: u64,
    },
    /// Group commit: an append returns only once its bytes are durable; every append
    /// waiting at the same time shares one fdatasync.
    Sync,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        // RocketMQ's flushIntervalCommitLog is 500 ms.
        FlushPolicy::Async {
            interval_ms: 500,
            dirty_bytes_max: 64 << 20,
        }
    }
}

/// Where the disk-use ratio comes from. `statvfs` of the data dir in production; tests
/// inject a function to simulate a filling disk.
type UsedRatioFn = dyn Fn(&Path) -> std::io::Result<f64> + Send + Sync;
/// Where the free bytes a new file is checked against come from (see
/// `ShardConfig::disk_reserve_bytes`).
type FreeBytesFn = dyn Fn(&Path) -> std::io::Result<u64> + Send + Sync;

/// Told the duration of every flush that makes data durable (seal, writes, fdatasync), for
/// a flush-latency histogram.
#[derive(Clone)]
pub struct FlushObserver(Arc<dyn Fn(std::time::Duration) + Send + Sync>);

impl FlushObserver {
    pub fn new(f: impl Fn(std::time::Duration) + Send + Sync + 'static) -> Self {
        FlushObserver(Arc::new(f))
    }
    pub fn observe(&self, d: std::time::Duration) {
        (self.0)(d)
    }
}

impl std::fmt::Debug for FlushObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushObserver")
    }
}

/// The disk as the shard sees it: the use ratio (for the disk levels) and the bytes still
/// free (for the reserve every new file is checked against).
#[derive(Clone)]
pub struct DiskUsageSource {
    ratio: Arc<UsedRatioFn>,
    free: Arc<FreeBytesFn>,
}

impl DiskUsageSource {
    pub fn statvfs() -> Self {
        DiskUsageSource {
            ratio: Arc::new(statvfs_used_ratio),
            free: Arc::new(statvfs_free_bytes),
        }
    }
    /// A simulated use ratio; free bytes still come from statvfs.
    pub fn from_fn(f: impl Fn(&Path) -> std::io::Result<f64> + Send + Sync + 'static) -> Self {
        DiskUsageSource {
            ratio: Arc::new(f),
            free: Arc::new(statvfs_free_bytes),
        }
    }
    /// The same, with simulated free bytes.
    pub fn with_free_bytes(
        self,
        f: impl Fn(&Path) -> std::io::Result<u64> + Send + Sync + 'static,
    ) -> Self {
        DiskUsageSource {
            ratio: self.ratio,
            free: Arc::new(f),
        }
    }
    pub fn used_ratio(&self, dir: &Path) -> std::io::Result<f64> {
        (self.ratio)(dir)
    }
    pub fn free_bytes(&self, dir: &Path) -> std::io::Result<u64> {
        (self.free)(dir)
    }
}

impl fmt::Debug for DiskUsageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DiskUsageSource")
    }
}

/// Used fraction of the filesystem holding `dir`, as `df` shows it in `Use%`:
/// used / (used + available to us). Blocks reserved for root are left out of both, so the
/// figure reaches 1.0 exactly when nothing more can be written, and operators see the same
/// number in `df` as in the broker's thresholds.
pub fn statvfs_used_ratio(dir: &Path) -> std::io::Result<f64> {
    let st = statvfs(dir)?;
    let used = st.f_blocks.saturating_sub(st.f_bfree) as f64;
    let usable = used + st.f_bavail as f64;
    if usable <= 0.0 {
        return Ok(0.0);
    }
    Ok(used / usable)
}

/// Bytes of the filesystem holding `dir` that we may still write (`df`'s Avail: blocks
/// reserved for root are left out, even when running as root, so the figure is the same
/// as the one the disk levels use).
pub fn statvfs_free_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = statvfs(dir)?;
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Bytes of the filesystem holding `dir` in all (`df`'s Size).
pub fn statvfs_total_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = statvfs(dir)?;
    Ok((st.f_blocks as u64).saturating_mul(st.f_frsize as u64))
}

/// Bytes of the filesystem holding `dir` in use, blocks reserved for root counted as free
/// (`df`'s Size minus the free blocks: Java's `getTotalSpace() - getFreeSpace()`, which
/// RocketMQ's `rocketmq_storage_size` reports).
pub fn statvfs_used_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = statvfs(dir)?;
    let used = (st.f_blocks as u64).saturating_sub(st.f_bfree as u64);
    Ok(used.saturating_mul(st.f_frsize as u64))
}

fn statvfs(dir: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("data dir path contains a NUL byte"))?;
    // SAFETY: statvfs is plain old data, so an all-zero value is valid; the pointers passed
    // to libc::statvfs are a NUL-terminated string and that struct, both live for the call.
    let (rc, st) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        let rc = libc::statvfs(c_path.as_ptr(), &mut st);
        (rc, st)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// Config of one shard (one CommitLog with its ConsumeQueues and IndexFiles).
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// This shard's own directory (created if missing).
    pub dir: PathBuf,
    pub shard_id: u16,
    /// Stamped into every record (RocketMQ's STOREHOST). Default 127.0.0.1:10911.
    pub store_host: SocketAddrV4,
    /// Size of one CommitLog segment file. Default 1 GiB; a multiple of 4096, >= 64 KiB.
    pub segment_bytes: u64,
    /// Size of one in-memory tail chunk (one O_DIRECT write when full). Default 4 MiB;
    /// a multiple of 4096, >= 4096.
    pub write_chunk_bytes: usize,
    /// Chunk writes kept in flight at once. Default 4; 1 to 64. With one, the disk idles
    /// from each write's completion until the executor next reaches its reactor to submit
    /// the following one (after a burst of appends); a queue keeps it busy meanwhile.
    pub write_queue_depth: usize,
    /// How much recently written log stays in memory for hot reads. Default 256 MiB.
    pub hot_bytes_max: u64,
    /// Chunk buffers allocated when the log opens and kept for the shard's life: recycled
    /// when the hot ring lets them go, and one trimmed by an early seal is replaced by a
    /// whole one at once. Meant for a core whose io_uring buffer memory (`io_memory`) is
    /// big enough to hold them: they then take all of it, so writes use registered buffers
    /// and reads, which glommio also serves from that memory while there is room, get
    /// buffers of their own. Default 0 (no pool: a few spare buffers are kept).
    pub chunk_pool: usize,
    /// Fill each segment with zeros before the log reaches it (RocketMQ's
    /// `warmMapedFileEnable`): a spare is filled in the background while the current
    /// segment is in use, so fdatasyncs need no journal commit. Halves write+fdatasync
    /// latency on ext4, at the price of writing every segment twice. Default false.
    pub warm_segments: bool,
    pub flush: FlushPolicy,
    /// Largest single record. Default 4 MiB; >= 1 KiB; must fit a segment.
    pub message_bytes_max: usize,
    /// Segments whose last write is older than this are deleted. Default 72.
    pub file_reserved_hours: u64,
    /// Disk-use ratio from which retention deletes the oldest segment each pass even if
    /// not expired. Default 0.75.
    pub disk_clean_ratio: f64,
    /// Ratio from which retention deletes oldest segments until below `disk_clean_ratio`.
    /// Default 0.85.
    pub disk_force_clean_ratio: f64,
    /// Ratio from which appends are refused with `ShardError::DiskFull`. Default 0.90.
    pub disk_refuse_ratio: f64,
    /// Free space every new file must leave: a segment, a warm spare, or new blocks for a
    /// ConsumeQueue or IndexFile are refused with `ShardError::NoSpace` (the append gets a
    /// "disk full" error and nothing is poisoned) when taking them would leave less than
    /// this free. It keeps room for what is not checked (topic and offset files, logs,
    /// recovery rewriting a tail block). Default 64 MiB; at most 1 TiB.
    pub disk_reserve_bytes: u64,
    /// How held (scheduled) records' delivery times are read, and the furthest one may be
    /// ahead: a record asking for more is refused at the append (`message::timer`).
    pub timer: message::timer::TimerRules,
    /// Entries per ConsumeQueue file (20 bytes each). Default 300_000.
    pub consume_queue_file_entries: u64,
    /// ConsumeQueue files this shard keeps mapped at once; past it the least recently used
    /// one is unmapped to map another. Bounds the shard's share of the kernel's
    /// `vm.max_map_count`. Default 8192; 1 to 2^20.
    pub consume_queue_maps_max: usize,
    /// Hash slots per IndexFile. Default 5_000_000.
    pub index_file_slots: u32,
    /// Entries per IndexFile. Default 20_000_000.
    pub index_file_entries: u32,
    /// How often retention and the disk-use level are checked. Default 10_000.
    pub retention_check_interval_ms: u64,
    /// Where the disk-use ratio comes from. Default statvfs.
    pub disk_usage: DiskUsageSource,
    /// The storage seam's fault plan; `None` in production.
    pub faults: Option<Arc<FaultInjector>>,
    /// Where retention and the store timestamps read the time. Default the system's.
    pub clock: crate::Clock,
    /// Told how long each durable flush took; `None` = not measured.
    pub flush_observer: Option<FlushObserver>,
    /// The shared-memory copy of the unwritten tail that makes async-flush appends safe
    /// against a crash of the process (see `tail_ring`). An async shard with `None` is
    /// safe only once its chunks are written (tests and tools); a sync shard never keeps a
    /// ring but still replays one a previous async run left at this path. Default `None`;
    /// the broker always sets it.
    pub tail_ring: Option<crate::TailRingConfig>,
    /// Bytes acknowledged but not yet fdatasynced, at most (async policies; a sync append
    /// waits for its own sync). Past it an append waits for a sync, up to
    /// `busy_wait_ms`, then is refused with `ShardError::Busy`; from a quarter of it,
    /// appends are paced at the rate the disk makes bytes durable. Default 512 MiB;
    /// >= 1 MiB.
    pub unsynced_bytes_max: u64,
    /// How long an append may wait for room (unwritten, unsynced or tail-ring bytes at
    /// their bounds) before it is refused with `ShardError::Busy` (RocketMQ's
    /// waitTimeMillsInSendQueue, 200 ms). Default 200; 1 to 60_000.
    pub busy_wait_ms: u64,
}

/// The bounds and thresholds of a shard that are read at each use (an append, a flusher
/// pass, a retention pass), so the broker may change them while the shard runs
/// (`Shard::set_limits`): the fields of [`ShardConfig`] of the same names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardLimits {
    /// Read by every append.
    pub message_bytes_max: usize,
    /// Read by every retention pass.
    pub file_reserved_hours: u64,
    /// Read by every measure of the disk (each retention pass, and a full disk's appends).
    pub disk_clean_ratio: f64,
    pub disk_force_clean_ratio: f64,
    pub disk_refuse_ratio: f64,
    /// The async flusher's period and dirty bound (`FlushPolicy::Async`), read at each of
    /// its passes; a sync shard has neither.
    pub flush_interval_ms: u64,
    pub flush_dirty_bytes_max: u64,
    /// Read by every append that waits for room.
    pub unsynced_bytes_max: u64,
    pub busy_wait_ms: u64,
}

impl ShardConfig {
    /// The values of the fields that may change while the shard runs.
    pub fn limits(&self) -> ShardLimits {
        let (flush_interval_ms, flush_dirty_bytes_max) = match self.flush {
            FlushPolicy::Async {
                interval_ms,
                dirty_bytes_max,
            } => (interval_ms, dirty_bytes_max),
            FlushPolicy::Sync => match FlushPolicy::default() {
                FlushPolicy::Async {
                    interval_ms,
                    dirty_bytes_max,
                } => (interval_ms, dirty_bytes_max),
                FlushPolicy::Sync => (500, 64 << 20),
            },
        };
        ShardLimits {
            message_bytes_max: self.message_bytes_max,
            file_reserved_hours: self.file_reserved_hours,
            disk_clean_ratio: self.disk_clean_ratio,
            disk_force_clean_ratio: self.disk_force_clean_ratio,
            disk_refuse_ratio: self.disk_refuse_ratio,
            flush_interval_ms,
            flush_dirty_bytes_max,
            unsynced_bytes_max: self.unsynced_bytes_max,
            busy_wait_ms: self.busy_wait_ms,
        }
    }

    /// The same config with `limits` in place of its changeable fields (a sync shard keeps
    /// its policy: the flush values apply to an async one only).
    pub fn with_limits(&self, limits: ShardLimits) -> ShardConfig {
        let mut c = self.clone();
        c.message_bytes_max = limits.message_bytes_max;
        c.file_reserved_hours = limits.file_reserved_hours;
        c.disk_clean_ratio = limits.disk_clean_ratio;
        c.disk_force_clean_ratio = limits.disk_force_clean_ratio;
        c.disk_refuse_ratio = limits.disk_refuse_ratio;
        if let FlushPolicy::Async { .. } = c.flush {
            c.flush = FlushPolicy::Async {
                interval_ms: limits.flush_interval_ms,
                dirty_bytes_max: limits.flush_dirty_bytes_max,
            };
        }
        c.unsynced_bytes_max = limits.unsynced_bytes_max;
        c.busy_wait_ms = limits.busy_wait_ms;
        c
    }

    pub fn new(dir: PathBuf, shard_id: u16) -> Self {
        ShardConfig {
            dir,
            shard_id,
            store_host: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 10911),
            segment_bytes: 1 << 30,
            write_chunk_bytes: 4 << 20,
            write_queue_depth: 4,
            hot_bytes_max: 256 << 20,
            chunk_pool: 0,
            warm_segments: false,
            flush: FlushPolicy::default(),
            message_bytes_max: 4 << 20,
            file_reserved_hours: 72,
            disk_clean_ratio: 0.75,
            disk_force_clean_ratio: 0.85,
            disk_refuse_ratio: 0.90,
            disk_reserve_bytes: 64 << 20,
            timer: message::timer::TimerRules::default(),
            consume_queue_file_entries: 300_000,
            consume_queue_maps_max: 8192,
            index_file_slots: 5_000_000,
            index_file_entries: 20_000_000,
            retention_check_interval_ms: 10_000,
            disk_usage: DiskUsageSource::statvfs(),
            faults: None,
            clock: crate::Clock::System,
            flush_observer: None,
            tail_ring: None,
            unsynced_bytes_max: 512 << 20,
            busy_wait_ms: 200,
        }
    }

    /// The bytes appended and not yet written to files (in chunks waiting for, or in, their
    /// write) past which an append waits for the disk: four chunks or 16 MiB for a large
    /// append (over 64 KiB, which leaves the last eighth of it to small ones), and for a
    /// small one, with a chunk pool, whatever the pool holds beyond the hot ring and the
    /// chunk being filled, if that is more. In `throughput` that is 56 MiB: single sends and
    /// small batches ride out a disk that stops writing for a second at 50 MB/s without a
    /// refusal. Huge batches keep the lower bound: held to it, they leave the core between
    /// them to a paced single send, whose p99 beside them is twice as long with the larger
    /// bound for every append (BENCHMARKS.md, "A noisy neighbour"). The tail ring bounds
    /// the same bytes on its own.
    pub fn unwritten_bytes_max(&self, small: bool) -> u64 {
        let chunk = self.write_chunk_bytes as u64;
        let floor = (chunk * 4).max(16 << 20);
        if !small {
            return floor;
        }
        let pool_spare = (self.chunk_pool as u64 * chunk)
            .saturating_sub(self.hot_bytes_max.div_ceil(chunk) * chunk + chunk);
        floor.max(pool_spare)
    }

    pub fn validate(&self) -> Result<(), ShardError> {
        let bad = |s: String| Err(ShardError::Config(s));
        if !self.segment_bytes.is_multiple_of(4096) || self.segment_bytes < 64 << 10 {
            return bad(format!(
                "segment_bytes {} must be a multiple of 4096 and >= 65536",
                self.segment_bytes
            ));
        }
        if !self.write_chunk_bytes.is_multiple_of(4096) || self.write_chunk_bytes < 4096 {
            return bad(format!(
                "write_chunk_bytes {} must be a multiple of 4096 and >= 4096",
                self.write_chunk_bytes
            ));
        }
        if self.chunk_pool > 4096 {
            return bad(format!(
                "chunk_pool {} must be at most 4096",
                self.chunk_pool
            ));
        }
        if !(1..=64).contains(&self.write_queue_depth) {
            return bad(format!(
                "write_queue_depth {} must be 1 to 64",
                self.write_queue_depth
            ));
        }
        if self.message_bytes_max < 1024
            || self.message_bytes_max as u64 + 8 > self.segment_bytes
            || self.message_bytes_max > i32::MAX as usize
        {
            return bad(format!(
                "message_bytes_max {} must be >= 1024 and leave 8 bytes of a segment",
                self.message_bytes_max
            ));
        }
        if let FlushPolicy::Async { interval_ms, .. } = self.flush {
            if interval_ms == 0 {
                return bad("flush interval_ms must be > 0".into());
            }
        }
        let ratios = [
            self.disk_clean_ratio,
            self.disk_force_clean_ratio,
            self.disk_refuse_ratio,
        ];
        if ratios.iter().any(|r| !(0.0..=1.0).contains(r))
            || self.disk_clean_ratio > self.disk_force_clean_ratio
            || self.disk_force_clean_ratio > self.disk_refuse_ratio
        {
            return bad("disk ratios must satisfy 0 <= clean <= force_clean <= refuse <= 1".into());
        }
        if self.disk_reserve_bytes > 1 << 40 {
            return bad(format!(
                "disk_reserve_bytes {} must be at most 1 TiB",
                self.disk_reserve_bytes
            ));
        }
        if self.consume_queue_file_entries == 0 || self.consume_queue_file_entries > 1 << 26 {
            return bad("consume_queue_file_entries must be in 1..=2^26".into());
        }
        if !(1..=1 << 20).contains(&self.consume_queue_maps_max) {
            return bad(format!(
                "consume_queue_maps_max {} must be 1 to 2^20",
                self.consume_queue_maps_max
            ));
        }
        if self.index_file_slots == 0
            || self.index_file_entries < 2
            || self.index_file_entries > i32::MAX as u32
            || self.index_file_slots > i32::MAX as u32
        {
            return bad("index_file_slots must be >= 1 and index_file_entries >= 2".into());
        }
        if let Some(r) = &self.tail_ring {
            let need = 4 * (self.write_chunk_bytes as u64 + self.message_bytes_max as u64);
            if !r.ring_bytes.is_multiple_of(4096) || r.ring_bytes < need {
                return bad(format!(
                    "tail ring bytes {} must be a multiple of 4096 and at least 4 x \
                     (write_chunk_bytes + message_bytes_max) = {need}",
                    r.ring_bytes
                ));
            }
        }
        if self.unsynced_bytes_max < 1 << 20 {
            return bad(format!(
                "unsynced_bytes_max {} must be >= 1 MiB",
                self.unsynced_bytes_max
            ));
        }
        if !(1..=60_000).contains(&self.busy_wait_ms) {
            return bad(format!(
                "busy_wait_ms {} must be 1 to 60000",
                self.busy_wait_ms
            ));
        }
        if self.retention_check_interval_ms == 0 {
            return bad("retention_check_interval_ms must be > 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounds_are_checked() {
        let c = ShardConfig::new("/tmp/x".into(), 0);
        c.validate().unwrap();
        let mut bad = c.clone();
        bad.segment_bytes = 1000;
        assert!(matches!(bad.validate(), Err(ShardError::Config(_))));
        let mut bad = c.clone();
        bad.disk_clean_ratio = 0.95;
        assert!(bad.validate().is_err());
        let mut bad = c;
        bad.message_bytes_max = 2 << 30;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn statvfs_reports_a_ratio() {
        let r = statvfs_used_ratio(Path::new("/tmp")).unwrap();
        assert!((0.0..=1.0).contains(&r));
    }
}
