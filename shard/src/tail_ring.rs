//! The tail ring: a copy of the CommitLog's unwritten tail in shared memory that outlives
//! the process, so that an async-flush append is safe against a crash of the broker (kill -9,
//! a panic, the OOM killer) from the moment it is acknowledged.
//!
//! The async policies acknowledge an append once it is in the in-memory tail chunk, long
//! before its O_DIRECT write completes. RocketMQ's ASYNC_FLUSH appends into the page cache
//! (an mmapped segment), which a dead process cannot take away; our chunks are process
//! memory, which it can. So every byte placed in a chunk is also copied into this ring: a
//! file on a tmpfs (`/dev/shm` by default), mapped shared, whose pages belong to the kernel
//! and survive the process (not a reboot or a power loss, which is what async flush never
//! promised to survive). At the next open, [`replay`] writes whatever the segment files do
//! not yet hold back into them before recovery scans the log.
//!
//! Layout: one header block, then `ring_bytes` of data. Commit-log offset `o` lives at
//! `HEADER_BYTES + o % ring_bytes`. The ring needs no per-record metadata: every record
//! carries its own physical offset and CRC, so a record read at the ring position of `o`
//! is accepted only if it says it is at `o` and its CRC holds; leftovers of an earlier lap
//! say otherwise. The header holds the written mark: every byte below it was in the segment
//! files (writes completed) when it was stored, so replay starts there. The shard keeps the
//! bytes between the written mark and the log end within the ring (`room`), so nothing not
//! yet written is ever overwritten by a later lap.
//!
//! Cost: one more copy of each batch, from the chunk it was just stamped into (in cache).

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};
use message::{BLANK_MAGIC_CODE, BLANK_RECORD_MIN_BYTES, FIXED_BYTES};

use crate::commit_log::{blank_at, is_record_at, Blank};
use crate::storage::{FileOp, SegmentFile, Storage};
use crate::ShardError;

/// The header block before the data.
const HEADER_BYTES: usize = 4096;
const MAGIC: &[u8; 8] = b"CVTAIL01";
const OFF_MAGIC: usize = 0;
const OFF_RING_BYTES: usize = 8;
const OFF_SEGMENT_BYTES: usize = 16;
const OFF_WRITTEN: usize = 24;
const _: () = assert!(OFF_WRITTEN + 8 <= HEADER_BYTES && OFF_WRITTEN.is_multiple_of(8));

/// Where a shard's tail ring lives and how big it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailRingConfig {
    /// The ring's file, on a tmpfs: its pages must outlive the process without being
    /// written back to a disk (on a disk-backed filesystem it works, at the price of the
    /// kernel writing the ring back too). Named after the store id, so a ring left by a
    /// deleted data directory is never taken for a new one's.
    pub path: PathBuf,
    /// Data bytes (a multiple of 4096). Bounds the bytes acknowledged and not yet written
    /// (see `Shard`'s back-pressure): at most half of it, so a batch and a segment's end
    /// always fit beside them.
    pub ring_bytes: u64,
}

impl TailRingConfig {
    /// The conventional file name of shard `shard` of store `store_id` in `dir`.
    pub fn path_in(dir: &Path, store_id: u64, shard: u16) -> PathBuf {
        dir.join(format!("corvus-{store_id:016x}-shard-{shard:03}.tail"))
    }
}

/// The mapped ring of an open shard.
pub(crate) struct TailRing {
    map: MmapMut,
    ring_bytes: u64,
    path: PathBuf,
}

fn io_context(path: &Path, what: &str, e: std::io::Error) -> ShardError {
    ShardError::TailRing {
        path: path.display().to_string(),
        reason: format!("{what}: {e}"),
    }
}

impl TailRing {
    /// Creates (or re-creates, empty) the ring file, reserves its memory and maps it. A
    /// tmpfs too small for it is an error here, never a SIGBUS at the first store.
    pub(crate) fn create(cfg: &TailRingConfig, segment_bytes: u64) -> Result<TailRing, ShardError> {
        let path = &cfg.path;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_context(path, "create directory", e))?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io_context(path, "open", e))?;
        if !on_tmpfs(&file) {
            NOT_TMPFS_WARNING.call_once(|| {
                tracing::warn!(
                    path = %path.display(),
                    "the tail ring is not on a tmpfs: the kernel will also write it back to its disk; set tail_ring_dir to a tmpfs such as /dev/shm"
                )
            });
        }
        let len = HEADER_BYTES as u64 + cfg.ring_bytes;
        crate::storage::allocate(&file, 0, len).map_err(|e| {
            io_context(
                path,
                &format!(
                    "reserve {len} bytes (set tail_ring_dir to a tmpfs with room, or lower \
                     tail_ring_bytes)"
                ),
                e,
            )
        })?;
        // SAFETY: the file is ours (created above, mode 0600, named after this store and
        // shard); nothing else truncates it while it is mapped, and its blocks are
        // reserved, so no store into the mapping can fault for want of space.
        let mut map = unsafe {
            MmapOptions::new()
                .len(len as usize)
                .populate()
                .map_mut(&file)
        }
        .map_err(|e| io_context(path, "map", e))?;
        map[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(MAGIC);
        map[OFF_RING_BYTES..OFF_RING_BYTES + 8].copy_from_slice(&cfg.ring_bytes.to_le_bytes());
        map[OFF_SEGMENT_BYTES..OFF_SEGMENT_BYTES + 8].copy_from_slice(&segment_bytes.to_le_bytes());
        Ok(TailRing {
            map,
            ring_bytes: cfg.ring_bytes,
            path: path.clone(),
        })
    }

    pub(crate) fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// Copies `bytes`, which the log holds at `offset`, into the ring.
    pub(crate) fn mirror(&mut self, offset: u64, bytes: &[u8]) {
        debug_assert!(bytes.len() as u64 <= self.ring_bytes);
        let at = (offset % self.ring_bytes) as usize;
        let first = bytes.len().min(self.ring_bytes as usize - at);
        let data = &mut self.map[HEADER_BYTES..];
        data[at..at + first].copy_from_slice(&bytes[..first]);
        data[..bytes.len() - first].copy_from_slice(&bytes[first..]);
    }

    /// Records that every byte below `offset` is in the segment files.
    pub(crate) fn set_written(&mut self, offset: u64) {
        self.map[OFF_WRITTEN..OFF_WRITTEN + 8].copy_from_slice(&offset.to_le_bytes());
    }

    /// Forgets the ring's bytes from `offset` on (a replica truncated its log there): the
    /// written mark moves there and the bytes at it are zeroed, so a replay after a crash
    /// finds nothing past it.
    pub(crate) fn forget_from(&mut self, offset: u64) {
        let zeros = [0u8; 4096];
        let n = (self.ring_bytes as usize).min(zeros.len());
        self.mirror(offset, &zeros[..n]);
        self.set_written(offset);
    }

    /// Removes the ring once nothing in it is needed (a clean close wrote and synced all).
    pub(crate) fn remove(self) -> std::io::Result<()> {
        let TailRing { map, path, .. } = self;
        drop(map);
        std::fs::remove_file(path)
    }
}

static NOT_TMPFS_WARNING: std::sync::Once = std::sync::Once::new();

/// Whether `file` lives on a tmpfs (memory that is never written back to a disk).
fn on_tmpfs(file: &File) -> bool {
    // SAFETY: statfs is plain old data, so all zeros is a valid value; fstatfs fills it from
    // a descriptor we hold open.
    let (rc, st) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let rc = libc::fstatfs(file.as_raw_fd(), &mut st);
        (rc, st)
    };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// One piece of log that replay writes back: `bytes` at commit-log offset `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) offset: u64,
    pub(crate) bytes: Vec<u8>,
}

/// What a ring held beyond its written mark: the pieces to write back, in log order, ending
/// with the last valid record (a filler or segment end after it is left out: nothing was
/// acknowledged after it).
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub(crate) from: u64,
    pub(crate) end: u64,
    pub(crate) records: u64,
    pub(crate) pieces: Vec<Piece>,
}

/// Reads the ring at `path`, if there is one, and returns the log it holds from its written
/// mark on. A ring of another segment size, or one that is not a ring, is reported and
/// left alone (`Ok(None)` after a warning): recovery then goes by the segment files alone.
pub(crate) fn read_back(path: &Path, segment_bytes: u64) -> Result<Option<Replay>, ShardError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_context(path, "open", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| io_context(path, "stat", e))?
        .len();
    if len < HEADER_BYTES as u64 {
        tracing::warn!(path = %path.display(), len, "ignoring a tail ring shorter than its header");
        return Ok(None);
    }
    // SAFETY: a private read-only mapping of a file we only read; its length was just taken
    // and the file belongs to this store (named after its id), which is not running.
    let map = unsafe { MmapOptions::new().len(len as usize).map(&file) }
        .map_err(|e| io_context(path, "map", e))?;
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&map[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let ring_bytes = u64_at(OFF_RING_BYTES);
    if &map[OFF_MAGIC..OFF_MAGIC + 8] != MAGIC
        || ring_bytes < 4096
        || !ring_bytes.is_multiple_of(4096)
        || HEADER_BYTES as u64 + ring_bytes != len
    {
        tracing::warn!(path = %path.display(), "ignoring a file that is not a tail ring");
        return Ok(None);
    }
    if u64_at(OFF_SEGMENT_BYTES) != segment_bytes {
        tracing::warn!(
            path = %path.display(),
            ring_segment_bytes = u64_at(OFF_SEGMENT_BYTES),
            segment_bytes,
            "ignoring a tail ring written with another segment size"
        );
        return Ok(None);
    }
    Ok(Some(walk(
        &map[HEADER_BYTES..],
        u64_at(OFF_WRITTEN),
        segment_bytes,
    )))
}

/// Follows the log through `data` (a ring of `data.len()` bytes) from `from`: records,
/// chunk fillers and end-of-segment blanks, until something is not what the log at that
/// offset would hold, or a lap is done.
pub(crate) fn walk(data: &[u8], from: u64, segment_bytes: u64) -> Replay {
    let ring = data.len() as u64;
    let read = |offset: u64, len: usize| -> Vec<u8> {
        let at = (offset % ring) as usize;
        let first = len.min(data.len() - at);
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(&data[at..at + first]);
        v.extend_from_slice(&data[..len - first]);
        v
    };
    let mut out = Replay {
        from,
        end: from,
        ..Replay::default()
    };
    let mut pending: Vec<Piece> = Vec::new();
    let mut pos = from;
    while pos - from + BLANK_RECORD_MIN_BYTES as u64 <= ring {
        let seg_end = pos - pos % segment_bytes + segment_bytes;
        let hdr = read(pos, BLANK_RECORD_MIN_BYTES);
        let total = i32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let magic = i32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        if magic == BLANK_MAGIC_CODE {
            // Only the header of a filler is copied to the ring: its rest is zeros, and the
            // rest of a segment after an end blank is left as it is.
            let (len, end) = match blank_at(total, pos, seg_end) {
                Some(Blank::SegmentEnd) => (BLANK_RECORD_MIN_BYTES, seg_end),
                Some(Blank::Filler(end)) => (total as usize, end),
                None => break,
            };
            let mut bytes = vec![0u8; len];
            bytes[..BLANK_RECORD_MIN_BYTES].copy_from_slice(&hdr);
            pending.push(Piece { offset: pos, bytes });
            pos = end;
            continue;
        }
        if total < FIXED_BYTES as i32
            || pos + total as u64 > seg_end
            || pos - from + total as u64 > ring
        {
            break;
        }
        let bytes = read(pos, total as usize);
        if !is_record_at(&bytes, pos) {
            break;
        }
        pos += total as u64;
        out.pieces.append(&mut pending);
        out.pieces.push(Piece {
            offset: pos - total as u64,
            bytes,
        });
        out.records += 1;
        out.end = pos;
    }
    out
}

/// Writes what `replay` holds into the segment files of the log in `dir` (creating a
/// segment the log had not reached on disk yet) and fdatasyncs them, so that recovery,
/// which goes by the segment files alone, finds every acknowledged record. Bytes already
/// on disk are written again unchanged. Runs before the shard serves, so plain blocking
/// writes are fine; the segment files are not open elsewhere yet.
pub(crate) async fn write_back(
    replay: &Replay,
    dir: &Path,
    segment_bytes: u64,
    storage: &Storage,
) -> Result<(), ShardError> {
    use std::os::unix::fs::FileExt;
    let mut open: Option<(u64, File)> = None;
    let mut synced = Vec::new();
    for piece in &replay.pieces {
        let seg = piece.offset - piece.offset % segment_bytes;
        if open.as_ref().map(|(s, _)| *s) != Some(seg) {
            if let Some((_, f)) = open.take() {
                storage.fault(FileOp::SegmentSync)?;
                f.sync_data()?;
            }
            let path = dir.join(crate::layout::offset_name(seg));
            if !path.exists() {
                std::fs::create_dir_all(dir)?;
                // The usual creation (a real first block, preallocated), then closed again.
                drop(SegmentFile::open(&path, seg, segment_bytes, true, storage.faults()).await?);
                synced.push(path.clone());
            }
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            open = Some((seg, f));
        }
        if let Some((_, f)) = &open {
            storage.fault(FileOp::SegmentWrite)?;
            f.write_all_at(&piece.bytes, piece.offset - seg)?;
        }
    }
    if let Some((_, f)) = open.take() {
        storage.fault(FileOp::SegmentSync)?;
        f.sync_data()?;
    }
    if !synced.is_empty() {
        // New segments' directory entries must survive a crash before the ring is dropped.
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use message::{encode_record, MessageFields, StoreStamp};

    fn record(topic: &str, q: u64, phys: u64) -> Vec<u8> {
        let mut r = Vec::new();
        encode_record(
            &MessageFields {
                topic,
                body: b"body bytes",
                born_timestamp_ms: 1,
                ..Default::default()
            },
            &mut r,
        )
        .unwrap();
        message::stamp_record(
            &mut r,
            &StoreStamp {
                queue_id: 0,
                queue_offset: q,
                physical_offset: phys,
                store_timestamp_ms: 1,
                store_host: "127.0.0.1:1".parse().unwrap(),
            },
        )
        .unwrap();
        r
    }

    fn put(data: &mut [u8], offset: u64, bytes: &[u8]) {
        let ring = data.len() as u64;
        for (i, b) in bytes.iter().enumerate() {
            data[((offset + i as u64) % ring) as usize] = *b;
        }
    }

    #[test]
    fn walks_records_across_the_wrap_and_stops_at_a_stale_lap() {
        let mut data = vec![0u8; 8192];
        let mut at = 7000u64;
        let mut written = Vec::new();
        for q in 0..20 {
            let r = record("T", q, at);
            put(&mut data, at, &r);
            written.push((at, r.clone()));
            at += r.len() as u64;
        }
        // A record of an earlier lap right after the end: its offset says it is not here.
        let stale = record("T", 99, at - 8192);
        put(&mut data, at, &stale);
        let replay = walk(&data, 7000, 1 << 30);
        assert_eq!(replay.records, 20);
        assert_eq!(replay.end, at);
        let got: Vec<(u64, Vec<u8>)> = replay
            .pieces
            .into_iter()
            .map(|p| (p.offset, p.bytes))
            .collect();
        assert_eq!(got, written);
    }

    #[test]
    fn fillers_and_segment_ends_are_followed_but_not_kept_at_the_end() {
        let seg = 64 << 10;
        let mut data = vec![0u8; 32 << 10];
        let start = seg - 9000;
        let r1 = record("T", 0, start);
        put(&mut data, start, &r1);
        let blank_at = start + r1.len() as u64;
        let mut blank = vec![0u8; 8];
        message::write_blank(&mut blank);
        blank[0..4].copy_from_slice(&((seg - blank_at) as i32).to_be_bytes());
        put(&mut data, blank_at, &blank);
        let r2 = record("T", 1, seg);
        put(&mut data, seg, &r2);
        // A chunk filler after r2, up to the next block, and nothing after it.
        let f_at = seg + r2.len() as u64;
        let mut f = vec![0u8; 8];
        message::write_blank(&mut f);
        f[0..4].copy_from_slice(&((seg + 4096 - f_at) as i32).to_be_bytes());
        put(&mut data, f_at, &f);
        let replay = walk(&data, start, seg);
        assert_eq!(replay.records, 2);
        assert_eq!(replay.end, f_at);
        let offsets: Vec<u64> = replay.pieces.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, vec![start, blank_at, seg]);
        assert_eq!(replay.pieces[1].bytes.len(), 8);
    }

    #[test]
    fn a_torn_record_ends_the_walk() {
        let mut data = vec![0u8; 8192];
        let r1 = record("T", 0, 100);
        put(&mut data, 100, &r1);
        let mut r2 = record("T", 1, 100 + r1.len() as u64);
        let n = r2.len();
        r2[n - 3] ^= 0xff;
        put(&mut data, 100 + r1.len() as u64, &r2);
        let replay = walk(&data, 100, 1 << 30);
        assert_eq!(replay.records, 1);
        assert_eq!(replay.end, 100 + r1.len() as u64);
    }

    #[test]
    fn a_ring_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TailRingConfig {
            path: TailRingConfig::path_in(dir.path(), 7, 1),
            ring_bytes: 16 << 10,
        };
        let mut ring = TailRing::create(&cfg, 1 << 30).unwrap();
        let r = record("T", 0, 20_000);
        ring.mirror(20_000, &r);
        ring.set_written(20_000);
        drop(ring);
        let replay = read_back(&cfg.path, 1 << 30).unwrap().unwrap();
        assert_eq!(replay.records, 1);
        assert_eq!(replay.pieces[0].bytes, r);
        assert!(
            read_back(&cfg.path, 1 << 20).unwrap().is_none(),
            "segment size differs"
        );
        assert!(read_back(&dir.path().join("none"), 1 << 30)
            .unwrap()
            .is_none());
    }
}
