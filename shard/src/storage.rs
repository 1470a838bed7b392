//! The storage seam: every file operation of a shard goes through here, so that a test can
//! fail any of them.
//!
//! - CommitLog segments go through [`SegmentFile`], which writes with O_DIRECT through
//!   io_uring (glommio's `DmaFile`) and falls back to buffered I/O where the filesystem
//!   refuses O_DIRECT.
//! - Mapped files (ConsumeQueue, IndexFile) are mapped, synced, read without a mapping and
//!   have their blocks reserved through [`Storage`].
//! - Deletes (retention, trimmed derived files) go through [`Storage::remove`], off the core.
//!
//! Each of these consults the optional [`FaultInjector`]: set faults (tear a write, fail
//! fdatasyncs, flip a bit, fail a creation with an errno) and a seeded plan that fails a
//! chosen kind of operation ([`FileOp`]) at random, reproducibly from its seed.
//!
//! Every new block a shard takes goes through here too: [`Storage::check`] tests the free
//! space against `disk_reserve_bytes` before a segment, a spare or a mapped file's blocks
//! are taken, and [`allocate`] reserves the blocks of a mapped file before anything is
//! stored into them, so a full disk is an error returned to an append, never a SIGBUS.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};

use bytes::Bytes;
use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};
use memmap2::MmapMut;

use crate::error::glommio_io;
use crate::{DiskUsageSource, ShardConfig, ShardError};

/// The block size every O_DIRECT write and read is aligned to.
pub const BLOCK_BYTES: u64 = 4096;

pub(crate) fn align_down(v: u64) -> u64 {
    v & !(BLOCK_BYTES - 1)
}
pub(crate) fn align_up(v: u64) -> u64 {
    align_down(v + BLOCK_BYTES - 1)
}

const OFF: u64 = u64::MAX;

/// Faults to inject into segment-file I/O. Offsets are commit-log offsets. Shared across
/// threads only so that a test can build it before handing the config to an executor.
#[derive(Debug)]
pub struct FaultInjector {
    fail_fsync: AtomicBool,
    tear_at: AtomicU64,
    flip_at: AtomicU64,
    /// Where the next covering write stops short, and how many more writes after it store
    /// nothing at all (see [`FaultInjector::short_write_at`]).
    short_at: AtomicU64,
    short_stuck_writes: AtomicU32,
    slow_sync_ms: AtomicU64,
    slow_write_ms: AtomicU64,
    slow_read_ms: AtomicU64,
    /// Segment reads under way, and the most there have been at once.
    reads_in_flight: AtomicU64,
    reads_in_flight_peak: AtomicU64,
    /// errno for segment and spare creation; 0 = none.
    segment_create_errno: AtomicI32,
    /// errno for block reservations of ConsumeQueue and IndexFile files; 0 = none.
    map_reserve_errno: AtomicI32,
    /// The seeded plan: the operations it may fail (a bit per [`FileOp`]), one in how many
    /// it fails (0 = off), its generator's state, and the faults it has injected.
    plan_ops: AtomicU32,
    plan_one_in: AtomicU32,
    plan_state: AtomicU64,
    plan_injected: AtomicU64,
}

/// A kind of file operation a seeded fault plan can fail, with the errno it fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Creating a CommitLog segment or a warm spare (ENOSPC, after the file was made).
    SegmentCreate,
    /// Writing a chunk to a segment (EIO, nothing written).
    SegmentWrite,
    /// fdatasync of a segment (EIO).
    SegmentSync,
    /// Reading a segment for a consumer (EIO).
    SegmentRead,
    /// Reserving the blocks of a ConsumeQueue or IndexFile file (ENOSPC).
    MapReserve,
    /// Mapping a ConsumeQueue or IndexFile file (ENOMEM).
    Map,
    /// Syncing mapped files to disk (EIO).
    MapSync,
    /// Reading a mapped file's entries without a mapping, as recovery does (EIO).
    MapRead,
    /// Deleting a file retention or a trim is done with (EIO; the file stays).
    Delete,
}

impl FileOp {
    pub const ALL: [FileOp; 9] = [
        FileOp::SegmentCreate,
        FileOp::SegmentWrite,
        FileOp::SegmentSync,
        FileOp::SegmentRead,
        FileOp::MapReserve,
        FileOp::Map,
        FileOp::MapSync,
        FileOp::MapRead,
        FileOp::Delete,
    ];

    fn bit(self) -> u32 {
        1 << self as u32
    }

    fn errno(self) -> i32 {
        match self {
            FileOp::SegmentCreate | FileOp::MapReserve => libc::ENOSPC,
            FileOp::Map => libc::ENOMEM,
            _ => libc::EIO,
        }
    }
}

impl Default for FaultInjector {
    fn default() -> Self {
        FaultInjector {
            fail_fsync: AtomicBool::new(false),
            tear_at: AtomicU64::new(OFF),
            flip_at: AtomicU64::new(OFF),
            short_at: AtomicU64::new(OFF),
            short_stuck_writes: AtomicU32::new(0),
            slow_sync_ms: AtomicU64::new(0),
            slow_write_ms: AtomicU64::new(0),
            slow_read_ms: AtomicU64::new(0),
            reads_in_flight: AtomicU64::new(0),
            reads_in_flight_peak: AtomicU64::new(0),
            segment_create_errno: AtomicI32::new(0),
            map_reserve_errno: AtomicI32::new(0),
            plan_ops: AtomicU32::new(0),
            plan_one_in: AtomicU32::new(0),
            plan_state: AtomicU64::new(0),
            plan_injected: AtomicU64::new(0),
        }
    }
}

fn injected(errno: &AtomicI32) -> Option<std::io::Error> {
    match errno.load(Ordering::SeqCst) {
        0 => None,
        e => Some(std::io::Error::from_raw_os_error(e)),
    }
}

impl FaultInjector {
    /// While set, every fdatasync fails with EIO.
    pub fn fail_fsyncs(&self, on: bool) {
        self.fail_fsync.store(on, Ordering::SeqCst);
    }
    /// Every fdatasync takes at least `ms` milliseconds (0 = as fast as the disk), like a
    /// disk whose cache flushes fall behind.
    pub fn slow_fsyncs_ms(&self, ms: u64) {
        self.slow_sync_ms.store(ms, Ordering::SeqCst);
    }
    /// Every CommitLog chunk write takes at least `ms` milliseconds (0 = as fast as the
    /// disk), like a disk that stalls: the writes in flight wait, and the chunks behind
    /// them stay in memory.
    pub fn slow_writes_ms(&self, ms: u64) {
        self.slow_write_ms.store(ms, Ordering::SeqCst);
    }
    /// Every segment read takes at least `ms` milliseconds (0 = as fast as the disk), like
    /// a disk busy with other reads.
    pub fn slow_reads_ms(&self, ms: u64) {
        self.slow_read_ms.store(ms, Ordering::SeqCst);
    }
    /// The most segment reads that have been under way at once.
    pub fn segment_reads_in_flight_peak(&self) -> u64 {
        self.reads_in_flight_peak.load(Ordering::SeqCst)
    }
    /// The next write covering `offset` stores only the bytes before it (the rest of the
    /// written range becomes garbage) and then fails, like a crash in the middle of a write.
    pub fn tear_write_at(&self, offset: impl Into<u64>) {
        self.tear_at.store(offset.into(), Ordering::SeqCst);
    }
    /// The next write covering `offset` stores only the whole blocks before it and reports
    /// that count as its result, not an error: the short write the kernel may return (an
    /// O_DIRECT write that met a full disk part-way). The `stuck` writes after it store
    /// nothing and report 0 bytes, like a disk that stays full.
    pub fn short_write_at(&self, offset: impl Into<u64>, stuck: u32) {
        self.short_stuck_writes.store(stuck, Ordering::SeqCst);
        self.short_at.store(offset.into(), Ordering::SeqCst);
    }
    /// Whether a short write set by [`FaultInjector::short_write_at`] has not happened yet.
    pub fn short_write_pending(&self) -> bool {
        self.short_at.load(Ordering::SeqCst) != OFF
            || self.short_stuck_writes.load(Ordering::SeqCst) > 0
    }
    /// Every write covering `offset` flips the low bit of that byte on disk and reports
    /// success, like a bad spot on the media (sticky, since a rewrite of the same block
    /// lands on the same bad spot).
    pub fn flip_bit_on_write_at(&self, offset: impl Into<u64>) {
        self.flip_at.store(offset.into(), Ordering::SeqCst);
    }
    /// While `Some(errno)`, creating a CommitLog segment (or a warm spare) fails with that
    /// errno after the file was created and its first block written, the way a real
    /// ENOSPC from preallocation leaves a half-made file behind. `None` clears it.
    pub fn fail_segment_create(&self, errno: Option<i32>) {
        self.segment_create_errno
            .store(errno.unwrap_or(0), Ordering::SeqCst);
    }
    /// While `Some(errno)`, reserving blocks for a ConsumeQueue or IndexFile file (a new
    /// file, or the next step of a growing one) fails with that errno. `None` clears it.
    pub fn fail_map_reserve(&self, errno: Option<i32>) {
        self.map_reserve_errno
            .store(errno.unwrap_or(0), Ordering::SeqCst);
    }

    /// From now on, each operation of a kind in `ops` fails with probability `1/one_in`
    /// (with the errno [`FileOp`] names), the sequence of failures fixed by `seed`, so a
    /// failing run is replayed by its seed. `one_in = 0` turns the plan off.
    pub fn seeded(&self, seed: u64, one_in: u32, ops: &[FileOp]) {
        let mask = ops.iter().fold(0, |m, op| m | op.bit());
        // Never zero: xorshift stays at zero.
        self.plan_state.store(seed | 1 << 63, Ordering::SeqCst);
        self.plan_ops.store(mask, Ordering::SeqCst);
        self.plan_one_in.store(one_in, Ordering::SeqCst);
    }

    /// Faults the seeded plan has injected so far.
    pub fn injected(&self) -> u64 {
        self.plan_injected.load(Ordering::SeqCst)
    }

    /// The seeded plan's verdict on one `op`: an error to fail it with, or `None`.
    pub(crate) fn planned(&self, op: FileOp) -> Option<std::io::Error> {
        let one_in = self.plan_one_in.load(Ordering::SeqCst);
        if one_in == 0 || self.plan_ops.load(Ordering::SeqCst) & op.bit() == 0 {
            return None;
        }
        // xorshift64: one step per consulted operation. Shards of one test share nothing
        // but this state, so the sequence is fixed per executor's order of operations.
        let mut x = self.plan_state.load(Ordering::SeqCst);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.plan_state.store(x, Ordering::SeqCst);
        if !x.is_multiple_of(u64::from(one_in)) {
            return None;
        }
        self.plan_injected.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(?op, "injected fault");
        Some(std::io::Error::from_raw_os_error(op.errno()))
    }
}

/// `faults`' verdict on `op`, where there are faults at all.
fn planned(faults: &Option<Arc<FaultInjector>>, op: FileOp) -> Option<std::io::Error> {
    faults.as_ref().and_then(|f| f.planned(op))
}

/// The handle a shard's mapped files and deletes go through: the free-space check every new
/// block passes (against `ShardConfig::disk_reserve_bytes`), and the injected faults.
#[derive(Clone, Debug)]
pub(crate) struct Storage {
    disk: DiskUsageSource,
    reserve_bytes: u64,
    faults: Option<Arc<FaultInjector>>,
}

impl Storage {
    pub(crate) fn new(config: &ShardConfig) -> Storage {
        Storage {
            disk: config.disk_usage.clone(),
            reserve_bytes: config.disk_reserve_bytes,
            faults: config.faults.clone(),
        }
    }

    /// No reserve, no faults: for unit tests of the file formats.
    #[cfg(test)]
    pub(crate) fn unchecked() -> Storage {
        Storage {
            disk: DiskUsageSource::statvfs(),
            reserve_bytes: 0,
            faults: None,
        }
    }

    /// Refuses (`NoSpace`) when taking `bytes` more for `path` would leave less free than
    /// the reserve. A disk that cannot be measured is let through: the allocation itself
    /// then says whether there was room.
    pub(crate) fn check(&self, path: &Path, bytes: u64) -> Result<(), ShardError> {
        let dir = path.parent().unwrap_or(path);
        let free = match self.disk.free_bytes(dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot measure free space; not checking the reserve");
                return Ok(());
            }
        };
        if free < bytes.saturating_add(self.reserve_bytes) {
            return Err(ShardError::NoSpace {
                path: path.display().to_string(),
                reason: format!(
                    "{} KiB free; taking {} KiB more would leave less than the reserve (disk_reserve_bytes = {} KiB)",
                    free >> 10,
                    bytes >> 10,
                    self.reserve_bytes >> 10
                ),
            });
        }
        Ok(())
    }

    fn segment_fault(&self) -> Option<std::io::Error> {
        self.faults
            .as_ref()
            .and_then(|f| injected(&f.segment_create_errno))
            .or_else(|| planned(&self.faults, FileOp::SegmentCreate))
    }

    fn map_fault(&self) -> Option<std::io::Error> {
        self.faults
            .as_ref()
            .and_then(|f| injected(&f.map_reserve_errno))
            .or_else(|| planned(&self.faults, FileOp::MapReserve))
    }

    pub(crate) fn faults(&self) -> Option<Arc<FaultInjector>> {
        self.faults.clone()
    }

    /// Fails with the planned fault for `op`, if any.
    pub(crate) fn fault(&self, op: FileOp) -> std::io::Result<()> {
        match planned(&self.faults, op) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Maps `len` bytes of `file` (the whole file when `None`) read-write.
    pub(crate) fn map(&self, file: &std::fs::File, len: Option<usize>) -> std::io::Result<MmapMut> {
        self.fault(FileOp::Map)?;
        let mut options = memmap2::MmapOptions::new();
        if let Some(len) = len {
            options.len(len);
        }
        // SAFETY: every file mapped here belongs to one shard alone (one core, one owner:
        // the data directory is locked by one process) and is never truncated while
        // mapped (only after its mapping is dropped, when retention removes it), so the
        // mapping stays valid for the MmapMut's lifetime. Callers never touch a mapping
        // past the file's length (every access is checked against it).
        unsafe { options.map_mut(file) }
    }

    /// Writes a mapping's dirty pages to disk.
    pub(crate) fn msync(&self, map: &MmapMut) -> std::io::Result<()> {
        self.fault(FileOp::MapSync)?;
        map.flush()
    }

    /// Writes every dirty page of the filesystem holding `dir` to disk (one `syncfs`
    /// instead of a sync per file).
    pub(crate) fn syncfs(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        self.fault(FileOp::MapSync)?;
        let dir = std::fs::File::open(dir)?;
        // SAFETY: syncfs on a descriptor we own; it touches no memory of ours.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes of a mapped file at `at` without mapping it.
    pub(crate) fn pread(
        &self,
        file: &std::fs::File,
        buf: &mut [u8],
        at: u64,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.fault(FileOp::MapRead)?;
        file.read_exact_at(buf, at)
    }

    /// Deletes files a shard is done with, off the core (see [`remove_off_core`]). A
    /// planned fault fails the whole step before anything is removed.
    pub(crate) async fn remove(&self, doomed: Vec<Doomed>) -> std::io::Result<()> {
        if !doomed.is_empty() {
            self.fault(FileOp::Delete)?;
        }
        remove_off_core(doomed).await
    }
}

/// Reserves the blocks of `[from, to)` of the mapped file at `path` (checked against the
/// reserve first), so that no store into a mapping of that range ever needs a block: on a
/// full disk such a store raises SIGBUS. `fallocate` mode 0 never changes bytes already
/// there, so this is safe over written data too. Errors are classified for the append:
/// `NoSpace`, `TooManyOpenFiles` (the file is opened here), or I/O.
pub(crate) fn reserve_mapped(
    storage: &Storage,
    path: &Path,
    from: u64,
    to: u64,
) -> Result<(), ShardError> {
    if to <= from {
        return Ok(());
    }
    let doing = "reserving blocks of a mapped file";
    if let Some(e) = storage.map_fault() {
        return Err(ShardError::making_room(path, doing, e));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| ShardError::making_room(path, doing, e))?;
    // A reservation from the start is of a file found at open, reserved again: the blocks
    // it holds are not new, and must not get it refused on a nearly full disk. (Past a
    // known reserved prefix, the whole range is new.) An underestimate only leaves it to
    // `fallocate` itself to report ENOSPC.
    let new_bytes = if from == 0 {
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata().map(|m| m.blocks() * 512).unwrap_or(0);
        to.saturating_sub(held)
    } else {
        to - from
    };
    storage.check(path, new_bytes)?;
    allocate(&file, from, to).map_err(|e| ShardError::making_room(path, doing, e))
}

/// Allocates the blocks of `[from, to)` of `file` without changing its contents. Where the
/// filesystem refuses `fallocate` (EOPNOTSUPP), the range is read and written back, which
/// allocates its holes the slow way and reports ENOSPC the same way.
pub(crate) fn allocate(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if to <= from {
        return Ok(());
    }
    // SAFETY: fallocate on a descriptor we own; it allocates blocks and touches no memory.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(e);
    }
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = from;
    while pos < to {
        let n = ((to - pos) as usize).min(buf.len());
        let got = file.read_at(&mut buf[..n], pos)?;
        // Past the end reads nothing: the zeros already in `buf` extend the file.
        buf[got..n].fill(0);
        file.write_all_at(&buf[..n], pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// Removes a file a failed creation left behind, so a retry and a later recovery see a
/// clean directory. Best effort: the creation's own error is what gets reported.
pub(crate) fn remove_half_made(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "cannot remove a half-created file")
        }
    }
}

/// [`remove_half_made`] for a file as large as a segment: truncated and removed off the
/// core. `what` names it in the warning a failure leaves.
pub(crate) async fn remove_half_made_off_core(path: &Path, what: &str) {
    let doomed = vec![Doomed {
        path: path.to_owned(),
        map: None,
        truncate: true,
    }];
    if let Err(e) = remove_off_core(doomed).await {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(error = %e, path = %path.display(), "cannot remove a half-made {what}");
        }
    }
}

/// Bytes read from a segment file: an aligned glommio read result, or owned bytes on the
/// buffered fallback.
#[derive(Clone)]
pub(crate) enum ReadBytes {
    Dma(ReadResult),
    Owned(Bytes),
}

impl ReadBytes {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            ReadBytes::Dma(r) => r,
            ReadBytes::Owned(b) => b,
        }
    }
}

enum Backend {
    Direct(DmaFile),
    Buffered(std::fs::File),
}

/// One CommitLog segment file, starting at commit-log offset `start`.
pub(crate) struct SegmentFile {
    backend: Backend,
    pub(crate) start: u64,
    pub(crate) path: PathBuf,
    faults: Option<std::sync::Arc<FaultInjector>>,
}

static BUFFERED_FALLBACK_WARNING: Once = Once::new();

/// What a segment is called while it is being made (see [`SegmentFile::open`]); not an
/// offset name, so recovery never takes it for part of the log.
const CREATING_EXTENSION: &str = "creating";

fn is_o_direct_refusal(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

impl SegmentFile {
    /// Opens (or creates and preallocates to `size_bytes`) the segment at `path`. A new
    /// segment is made under a temporary name (`<start>.creating`) and renamed into place
    /// only once it is complete, so a crash part-way never leaves a half-made file under an
    /// offset name (recovery would take it for the log's end and preallocate it, which a
    /// full disk refuses). A creation that fails part-way (ENOSPC preallocating, EMFILE
    /// opening for direct I/O) removes its file, so a retry and a later recovery find a
    /// clean directory; a file a crash left under the temporary name is reused (truncated)
    /// by the next creation of that segment.
    pub(crate) async fn open(
        path: &Path,
        start: u64,
        size_bytes: u64,
        create: bool,
        faults: Option<std::sync::Arc<FaultInjector>>,
    ) -> std::io::Result<SegmentFile> {
        if !create {
            return Self::open_or_create(path, path, start, size_bytes, false, faults).await;
        }
        let making = path.with_extension(CREATING_EXTENSION);
        let made = match Self::open_or_create(&making, path, start, size_bytes, true, faults).await
        {
            Ok(f) => {
                let (from, to) = (making.clone(), path.to_owned());
                off_core(move || std::fs::rename(from, to))
                    .await
                    .map(|()| f)
            }
            Err(e) => Err(e),
        };
        if made.is_err() {
            // Off the core: a partly preallocated segment can be large.
            remove_half_made_off_core(&making, "segment").await;
        }
        made
    }

    /// Opens the segment file at `at` (creating it with `create`), known as `path`.
    async fn open_or_create(
        at: &Path,
        path: &Path,
        start: u64,
        size_bytes: u64,
        create: bool,
        faults: Option<std::sync::Arc<FaultInjector>>,
    ) -> std::io::Result<SegmentFile> {
        if create {
            // glommio probes io_uring polling support with a real read of the file's first
            // block and caches the answer per device. On an empty or sparse file that read
            // never reaches the device and "succeeds", wrongly enabling the poll ring (later
            // reads then fail with EOPNOTSUPP). So a new segment gets a real, synced first
            // block before it is opened for direct I/O. Written and synced off the core: the
            // sync is a journal commit, which held every send of the core at a roll.
            let first = at.to_owned();
            off_core(move || {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&first)?;
                use std::os::unix::fs::FileExt;
                f.write_all_at(&[0u8; BLOCK_BYTES as usize], 0)?;
                f.sync_data()
            })
            .await?;
            if let Some(e) = faults
                .as_ref()
                .and_then(|f| injected(&f.segment_create_errno))
                .or_else(|| planned(&faults, FileOp::SegmentCreate))
            {
                return Err(e);
            }
        }
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .dma_open(at)
            .await
            .map_err(glommio_io);
        let backend = match direct {
            Ok(f) => {
                if create {
                    // Preallocation makes the later fdatasyncs cheap: no block allocation
                    // metadata has to be journaled on the write path.
                    f.pre_allocate(size_bytes, false)
                        .await
                        .map_err(glommio_io)?;
                }
                Backend::Direct(f)
            }
            Err(e) if is_o_direct_refusal(&e) => {
                BUFFERED_FALLBACK_WARNING.call_once(|| {
                    tracing::warn!(
                        path = %path.display(),
                        "filesystem refuses O_DIRECT (tmpfs?): CommitLog falls back to buffered I/O with explicit fdatasync; the page cache is now in the write path"
                    );
                });
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(at)?;
                if create {
                    // Allocated, not sparse: a buffered write into a hole on a full disk
                    // would fail with ENOSPC and poison the shard.
                    f.set_len(size_bytes)?;
                    allocate(&f, 0, size_bytes)?;
                }
                Backend::Buffered(f)
            }
            Err(e) => return Err(e),
        };
        Ok(SegmentFile {
            backend,
            start,
            path: path.to_owned(),
            faults,
        })
    }

    pub(crate) fn is_direct(&self) -> bool {
        matches!(self.backend, Backend::Direct(_))
    }

    /// Writes the aligned buffer at commit-log offset `at` (block aligned), all of it: a
    /// write the kernel cuts short (fewer bytes than asked, which is not an error) is
    /// continued with the rest, from the last whole block it stored, at its place. A write
    /// that stores nothing at all is an error ("short write"), never taken as done.
    pub(crate) async fn write(&self, buf: Rc<DmaBuffer>, at: u64) -> std::io::Result<()> {
        debug_assert_eq!(at % BLOCK_BYTES, 0);
        debug_assert_eq!(buf.len() as u64 % BLOCK_BYTES, 0);
        let end = at + buf.len() as u64;
        if let Some(e) = planned(&self.faults, FileOp::SegmentWrite) {
            return Err(e);
        }
        let mut result_err = None;
        let mut buf = buf;
        if let Some(f) = &self.faults {
            let slow = f.slow_write_ms.load(Ordering::SeqCst);
            if slow > 0 {
                glommio::timer::sleep(std::time::Duration::from_millis(slow)).await;
            }
            let tear = f.tear_at.load(Ordering::SeqCst);
            let flip = f.flip_at.load(Ordering::SeqCst);
            if (at..end).contains(&tear) {
                f.tear_at.store(OFF, Ordering::SeqCst);
                let mut copy = glommio::allocate_dma_buffer(buf.len());
                copy.as_bytes_mut().copy_from_slice(buf.as_bytes());
                for b in &mut copy.as_bytes_mut()[(tear - at) as usize..] {
                    *b = 0xa5;
                }
                buf = Rc::new(copy);
                result_err = Some(std::io::Error::other("injected torn write"));
            } else if (at..end).contains(&flip) {
                let mut copy = glommio::allocate_dma_buffer(buf.len());
                copy.as_bytes_mut().copy_from_slice(buf.as_bytes());
                copy.as_bytes_mut()[(flip - at) as usize] ^= 1;
                buf = Rc::new(copy);
            }
        }
        // `done`: bytes of `buf` stored so far, always whole blocks (O_DIRECT writes start
        // on a block; a count that ends mid-block is rounded down and that block rewritten,
        // the same bytes at the same place).
        let mut done = 0usize;
        while done < buf.len() {
            let part = if done == 0 {
                buf.clone()
            } else {
                let rest = &buf.as_bytes()[done..];
                let mut copy = glommio::allocate_dma_buffer(rest.len());
                copy.as_bytes_mut().copy_from_slice(rest);
                Rc::new(copy)
            };
            let pos = at + done as u64 - self.start;
            let written = self.write_once(part, pos).await?;
            let whole = align_down(written.min(buf.len() - done) as u64) as usize;
            if whole == 0 {
                return Err(std::io::Error::other(format!(
                    "short write: {} of {} bytes at {} in {}, the rest not taken",
                    done + written,
                    buf.len(),
                    at - self.start,
                    self.path.display()
                )));
            }
            if done + whole < buf.len() {
                tracing::warn!(
                    path = %self.path.display(),
                    offset = at + done as u64,
                    written,
                    asked = buf.len() - done,
                    "a CommitLog write was cut short; writing the rest"
                );
            }
            done += whole;
        }
        match result_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One write of `buf` at file position `pos`: the byte count the kernel reports.
    async fn write_once(&self, buf: Rc<DmaBuffer>, pos: u64) -> std::io::Result<usize> {
        let mut buf = buf;
        if let Some(f) = &self.faults {
            let at = pos + self.start;
            let short = f.short_at.load(Ordering::SeqCst);
            if short == OFF && f.short_stuck_writes.load(Ordering::SeqCst) > 0 {
                f.short_stuck_writes.fetch_sub(1, Ordering::SeqCst);
                return Ok(0);
            }
            if (at..at + buf.len() as u64).contains(&short) {
                f.short_at.store(OFF, Ordering::SeqCst);
                let cut = align_down(short - at) as usize;
                if cut == 0 {
                    return Ok(0);
                }
                let mut head = glommio::allocate_dma_buffer(cut);
                head.as_bytes_mut().copy_from_slice(&buf.as_bytes()[..cut]);
                buf = Rc::new(head);
            }
        }
        match &self.backend {
            Backend::Direct(f) => f.write_rc_at(buf, pos).await.map_err(glommio_io),
            Backend::Buffered(f) => {
                use std::os::unix::fs::FileExt;
                f.write_all_at(buf.as_bytes(), pos)?;
                Ok(buf.len())
            }
        }
    }

    pub(crate) async fn fdatasync(&self) -> std::io::Result<()> {
        if let Some(e) = planned(&self.faults, FileOp::SegmentSync) {
            return Err(e);
        }
        if let Some(f) = &self.faults {
            if f.fail_fsync.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            let slow = f.slow_sync_ms.load(Ordering::SeqCst);
            if slow > 0 {
                glommio::timer::sleep(std::time::Duration::from_millis(slow)).await;
            }
        }
        match &self.backend {
            Backend::Direct(f) => f.fdatasync().await.map_err(glommio_io),
            Backend::Buffered(f) => f.sync_data(),
        }
    }

    /// One aligned read of `len` bytes at commit-log offset `at` (both block aligned).
    pub(crate) async fn read_aligned(&self, at: u64, len: usize) -> std::io::Result<ReadBytes> {
        debug_assert_eq!(at % BLOCK_BYTES, 0);
        if let Some(e) = planned(&self.faults, FileOp::SegmentRead) {
            return Err(e);
        }
        let Some(f) = &self.faults else {
            return self.read_aligned_now(at, len).await;
        };
        let now = f.reads_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        f.reads_in_flight_peak.fetch_max(now, Ordering::SeqCst);
        let slow = f.slow_read_ms.load(Ordering::SeqCst);
        if slow > 0 {
            glommio::timer::sleep(std::time::Duration::from_millis(slow)).await;
        }
        let r = self.read_aligned_now(at, len).await;
        f.reads_in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }

    async fn read_aligned_now(&self, at: u64, len: usize) -> std::io::Result<ReadBytes> {
        let pos = at - self.start;
        match &self.backend {
            Backend::Direct(f) => {
                let r = f.read_at_aligned(pos, len).await.map_err(glommio_io)?;
                Ok(ReadBytes::Dma(r))
            }
            Backend::Buffered(f) => {
                use std::os::unix::fs::FileExt;
                let mut v = vec![0u8; len];
                let mut done = 0;
                while done < len {
                    let n = f.read_at(&mut v[done..], pos + done as u64)?;
                    if n == 0 {
                        break;
                    }
                    done += n;
                }
                v.truncate(done);
                Ok(ReadBytes::Owned(Bytes::from(v)))
            }
        }
    }

    /// Zeroes `[from, to)` (commit-log offsets, both block aligned) so stale records past a
    /// recovered log end can never be mistaken for a continuation, then allocates the range
    /// again so later fdatasyncs stay cheap.
    pub(crate) async fn zero_range(&self, from: u64, to: u64) -> std::io::Result<()> {
        debug_assert_eq!(from % BLOCK_BYTES, 0);
        if to <= from {
            return Ok(());
        }
        let (pos, len) = (from - self.start, to - from);
        match &self.backend {
            Backend::Direct(f) => {
                f.deallocate(pos, len).await.map_err(glommio_io)?;
                f.pre_allocate(to - self.start, false)
                    .await
                    .map_err(glommio_io)?;
            }
            Backend::Buffered(f) => {
                use std::os::unix::fs::FileExt;
                let zeros = vec![0u8; 1 << 20];
                let mut p = pos;
                while p < pos + len {
                    let n = ((pos + len - p) as usize).min(zeros.len());
                    f.write_all_at(&zeros[..n], p)?;
                    p += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// The warm spare segment of a CommitLog directory (`warm_segments`). Not an offset name,
/// so recovery never takes it for part of the log.
pub(crate) const SPARE_NAME: &str = "spare.warm";
/// Where a spare is filled (this prefix and a number of its own, so a fill abandoned by a
/// closed shard never touches the next one's file); renamed to [`SPARE_NAME`] only once
/// complete and synced, so a crash mid-way leaves nothing that passes for a ready spare.
const SPARE_FILLING_PREFIX: &str = "spare.warm.filling";
static SPARE_FILLS: AtomicU64 = AtomicU64::new(0);

/// How a spare fill ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filled {
    Ready,
    /// The filesystem refuses O_DIRECT: the log is buffered there and a spare gains nothing.
    Unsupported,
    /// Its pacer said stop (the shard closed); the file is gone.
    Abandoned,
}

/// Zeros written per step while filling a spare, one step at a time on the executor's
/// blocking thread: a step holds the disk for about 0.1 ms, so an fdatasync of the log
/// never waits long behind one, and other blocking work (file deletes, offset snapshots)
/// is never held up for long.
const SPARE_STEP_BYTES: usize = 128 << 10;

/// Whether `dir` holds a complete spare of `size` bytes. Removes (off the core, a spare is
/// a whole segment) a half-filled one, and a spare of another size (the segment size was
/// changed).
pub(crate) async fn spare_ready(dir: &Path, size: u64) -> std::io::Result<bool> {
    let stale = |path: PathBuf| Doomed {
        path,
        map: None,
        truncate: true,
    };
    let mut doomed = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name()
            .to_string_lossy()
            .starts_with(SPARE_FILLING_PREFIX)
        {
            doomed.push(stale(e.path()));
        }
    }
    let spare = dir.join(SPARE_NAME);
    let ready = match std::fs::metadata(&spare) {
        Ok(m) if m.len() == size => true,
        Ok(_) => {
            doomed.push(stale(spare));
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    remove_off_core(doomed).await?;
    Ok(ready)
}

/// Fills a spare segment of `size` bytes with zeros. A segment made from it has only plain
/// written extents: an O_DIRECT write into it changes no filesystem metadata, so an
/// fdatasync after it is a device cache flush, without the journal commit that converting
/// preallocated (unwritten) extents needs. That halved write+fdatasync latency here (p50
/// 0.45 → 0.22 ms). The price is writing every segment twice. After each step, `pace` is
/// told the bytes filled so far and says how long to wait before the next, or `None` to
/// abandon the fill.
///
/// A spare is a whole segment of new blocks, so it is checked against the reserve first
/// (`NoSpace` when it would leave too little); a fill that fails on the way (ENOSPC,
/// EMFILE) removes its file.
pub(crate) async fn fill_spare(
    dir: PathBuf,
    size: u64,
    storage: &Storage,
    pace: impl FnMut(u64) -> Option<std::time::Duration>,
) -> Result<Filled, ShardError> {
    let n = SPARE_FILLS.fetch_add(1, Ordering::Relaxed);
    let filling = dir.join(format!("{SPARE_FILLING_PREFIX}-{n}"));
    storage.check(&filling, size)?;
    let fault = storage.segment_fault();
    let filled = fill_spare_at(dir, filling.clone(), size, fault, pace).await;
    if filled.is_err() {
        remove_half_made_off_core(&filling, "warm spare").await;
    }
    filled.map_err(|e| ShardError::making_room(&filling, "filling a warm spare segment", e))
}

async fn fill_spare_at(
    dir: PathBuf,
    filling: PathBuf,
    size: u64,
    fault: Option<std::io::Error>,
    mut pace: impl FnMut(u64) -> Option<std::time::Duration>,
) -> std::io::Result<Filled> {
    let executor = glommio::executor();
    let path = filling.clone();
    let Some(mut file) = executor
        .spawn_blocking(move || open_filling(&path, size))
        .await?
    else {
        return Ok(Filled::Unsupported);
    };
    if let Some(e) = fault {
        return Err(e);
    }
    let mut pos = 0u64;
    loop {
        let Some(pause) = pace(pos) else {
            drop(file);
            remove_off_core(vec![Doomed {
                path: filling,
                map: None,
                truncate: true,
            }])
            .await?;
            return Ok(Filled::Abandoned);
        };
        if pos == size {
            break;
        }
        if !pause.is_zero() {
            glommio::timer::sleep(pause).await;
        }
        let step = (size - pos).min(SPARE_STEP_BYTES as u64);
        file = executor
            .spawn_blocking(move || write_zeros(file, pos, step))
            .await?;
        pos += step;
    }
    executor
        .spawn_blocking(move || {
            file.sync_all()?;
            std::fs::rename(&filling, dir.join(SPARE_NAME))
        })
        .await?;
    Ok(Filled::Ready)
}

/// Creates the file a spare is filled in, its blocks allocated in one go so they lie
/// together on disk; `None` where O_DIRECT is refused.
fn open_filling(path: &Path, size: u64) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let f = match opened {
        Ok(f) => f,
        Err(e) if is_o_direct_refusal(&e) => {
            let _ = std::fs::remove_file(path);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // Allocated in one go so the blocks lie together. Where fallocate is refused, the fill
    // writes every block anyway (and the read-back fallback of `allocate` would need
    // aligned buffers on this O_DIRECT descriptor).
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a descriptor we own; it allocates blocks and touches no memory.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as libc::off_t) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
    }
    Ok(Some(f))
}

/// Writes `len` zeros at `pos` (both block multiples) with O_DIRECT.
fn write_zeros(f: std::fs::File, pos: u64, len: u64) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static ZEROS: DmaBuffer = {
            let mut b = glommio::allocate_dma_buffer_global(SPARE_STEP_BYTES);
            b.as_bytes_mut().fill(0);
            b
        };
    }
    ZEROS.with(|z| f.write_all_at(&z.as_bytes()[..len as usize], pos))?;
    Ok(f)
}

/// Runs blocking file-system work (creating, syncing, renaming) on the executor's blocking
/// thread, so the core keeps serving while the kernel commits its journal.
pub(crate) async fn off_core<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    glommio::executor().spawn_blocking(work).await
}

/// A file retention is done with, for [`remove_off_core`].
pub(crate) struct Doomed {
    pub path: PathBuf,
    /// Its mapping, unmapped on the deleting thread (a big resident mapping takes a while).
    pub map: Option<memmap2::MmapMut>,
    /// Free its blocks before unlinking; false while a reader may still hold it open.
    pub truncate: bool,
}

/// Deletes files on the executor's blocking thread, never on the core: on a filesystem
/// mounted with `discard`, freeing a 1 GiB segment issues discards that took 10 s here, and
/// the core keeps serving meanwhile. The blocks are freed there by truncating first, so a
/// descriptor the core closes later releases an empty file.
pub(crate) async fn remove_off_core(doomed: Vec<Doomed>) -> std::io::Result<()> {
    if doomed.is_empty() {
        return Ok(());
    }
    glommio::executor()
        .spawn_blocking(move || {
            let mut result = Ok(());
            for d in doomed {
                drop(d.map);
                if d.truncate {
                    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&d.path) {
                        let _ = f.set_len(0);
                    }
                }
                if let Err(e) = std::fs::remove_file(&d.path) {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
            result
        })
        .await
}
