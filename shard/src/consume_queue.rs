//! ConsumeQueue: per topic-queue index of fixed 20-byte entries (commit-log offset 8,
//! size 4, tag hash 8, big-endian as in RocketMQ), in mmapped files of
//! `consume_queue_file_entries` entries named by their first queue offset.
//!
//! These files are derived data written through the page cache: recovery checks every
//! entry against the CommitLog and rewrites what lags or disagrees.
//!
//! No store ever goes into a page without a block: on a full disk such a store raises
//! SIGBUS and kills the broker. So a file's blocks are reserved (`fallocate`, through
//! `storage::reserve_mapped`) a step ahead of the entries written, before the store; a
//! reservation that fails (ENOSPC, the free-space reserve, EMFILE) fails the append with
//! `NoSpace` / `TooManyOpenFiles` and changes nothing. Files found at open are mapped as
//! they are (reads need no blocks) and reserved again before their first store.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::layout::{offset_name, parse_offset_name, topic_dir_name, topic_from_dir_name};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::storage::{self, Doomed, Space};
use crate::ShardError;

pub(crate) const CQ_ENTRY_BYTES: usize = 20;
const _: () = assert!(CQ_ENTRY_BYTES == 8 + 4 + 8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CqEntry {
    pub(crate) offset: CommitLogOffset,
    pub(crate) size: u32,
    pub(crate) tag_hash: i64,
}

impl CqEntry {
    pub(crate) fn end(&self) -> u64 {
        self.offset.0 + self.size as u64
    }
}

/// Blocks of a ConsumeQueue file are reserved this far ahead of the entries written (or
/// the whole file, if smaller): one `fallocate` per 52,428 entries.
const RESERVE_STEP_BYTES: u64 = 1 << 20;

/// One mapped ConsumeQueue file.
pub(crate) struct CqFile {
    map: MmapMut,
    /// Bytes from the start whose blocks are reserved: every store goes below this. A file
    /// found at open counts as 0 (it may be sparse, from an older version or a crash); its
    /// first store reserves again, which costs nothing where blocks are already there.
    reserved: u64,
}

pub(crate) struct ConsumeQueue {
    dir: PathBuf,
    file_entries: u64,
    files: BTreeMap<u64, CqFile>,
    space: Space,
    /// First queue offset still served (entries below point into deleted segments).
    pub(crate) min: QueueOffset,
    /// Next queue offset to be written.
    pub(crate) max: QueueOffset,
}

/// Maps an existing ConsumeQueue file of `len` bytes, extending a short one (the extension
/// is a hole: nothing is stored there before it is reserved, and reading a hole needs no
/// block, so a restart on a full disk still maps and serves it).
fn map_existing(path: &Path, len: u64) -> Result<MmapMut, ShardError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let actual = file.metadata()?.len();
    if actual > len {
        return Err(ShardError::Corrupt {
            path: path.display().to_string(),
            reason: format!("file is {actual} bytes, expected {len}"),
        });
    }
    if actual < len {
        file.set_len(len)?;
    }
    // SAFETY: the file belongs to this shard alone (one core, one owner) and is never
    // truncated while mapped, so the mapping stays valid for the MmapMut's lifetime.
    let map = unsafe { MmapMut::map_mut(&file)? };
    Ok(map)
}

/// Creates a ConsumeQueue file of `len` bytes with its first `reserve` bytes' blocks
/// reserved, then maps it. On any failure nothing is mapped and the new file is removed:
/// the append that needed it fails (`NoSpace` on a full disk) and changes nothing.
fn create_file(space: &Space, path: &Path, len: u64, reserve: u64) -> Result<MmapMut, ShardError> {
    let existed = path.exists();
    let made = (|| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| ShardError::making_room(path, "creating a ConsumeQueue file", e))?;
        let actual = file.metadata()?.len();
        if actual > len {
            return Err(ShardError::Corrupt {
                path: path.display().to_string(),
                reason: format!("file is {actual} bytes, expected {len}"),
            });
        }
        file.set_len(len)?;
        drop(file);
        storage::reserve_mapped(space, path, 0, reserve)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| ShardError::making_room(path, "opening a ConsumeQueue file", e))?;
        // SAFETY: as in `map_existing`: this shard's own file, never truncated while mapped.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(map)
    })();
    if made.is_err() && !existed {
        storage::remove_half_made(path);
    }
    made
}

impl ConsumeQueue {
    fn file_bytes(&self) -> u64 {
        self.file_entries * CQ_ENTRY_BYTES as u64
    }

    fn open(dir: PathBuf, file_entries: u64, space: Space) -> Result<Self, ShardError> {
        let mut cq = ConsumeQueue {
            dir,
            file_entries,
            files: BTreeMap::new(),
            space,
            min: QueueOffset(0),
            max: QueueOffset(0),
        };
        for entry in std::fs::read_dir(&cq.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(start) = name.to_str().and_then(parse_offset_name) else {
                continue;
            };
            if start % file_entries != 0 {
                return Err(ShardError::Corrupt {
                    path: entry.path().display().to_string(),
                    reason: format!("start {start} is not a multiple of {file_entries} entries"),
                });
            }
            let map = map_existing(&entry.path(), cq.file_bytes())?;
            cq.files.insert(start, CqFile { map, reserved: 0 });
        }
        // max: one past the last non-empty entry of the last file.
        if let Some((&start, CqFile { map, .. })) = cq.files.iter().next_back() {
            let last = (0..file_entries as usize)
                .rev()
                .find(|&i| entry_at(map, i).is_some());
            cq.max = QueueOffset(last.map_or(start, |i| start + i as u64 + 1));
        }
        if let Some(&first) = cq.files.keys().next() {
            cq.min = QueueOffset(first);
        }
        Ok(cq)
    }

    pub(crate) fn get(&self, q: QueueOffset) -> Option<CqEntry> {
        let start = q.0 - q.0 % self.file_entries;
        let f = self.files.get(&start)?;
        entry_at(&f.map, (q.0 - start) as usize)
    }

    pub(crate) fn put(&mut self, q: QueueOffset, e: CqEntry) -> Result<(), ShardError> {
        debug_assert!(e.size > 0);
        let start = q.0 - q.0 % self.file_entries;
        let at = (q.0 - start) as usize * CQ_ENTRY_BYTES;
        let len = self.file_bytes();
        // The reservation covers the slot with a step to spare, never past the file.
        let want = (at as u64 + CQ_ENTRY_BYTES as u64)
            .next_multiple_of(RESERVE_STEP_BYTES)
            .min(len);
        if !self.files.contains_key(&start) {
            std::fs::create_dir_all(&self.dir).map_err(|e| {
                ShardError::making_room(&self.dir, "creating a ConsumeQueue directory", e)
            })?;
            let path = self.dir.join(offset_name(start));
            let map = create_file(&self.space, &path, len, want)?;
            // The new file is written an entry at a time: a write fault should bring in
            // its one page. With readahead one fault zeroed a large folio, up to
            // 2-3 ms on the core at the start of a queue. The file before it is complete,
            // and read in order from now on, so it gets readahead back.
            let _ = map.advise(memmap2::Advice::Random);
            if let Some(prev) = self.files.values().next_back() {
                let _ = prev.map.advise(memmap2::Advice::Normal);
            }
            if self.files.is_empty() {
                self.min = q;
            }
            self.files.insert(
                start,
                CqFile {
                    map,
                    reserved: want,
                },
            );
        }
        let Some(f) = self.files.get_mut(&start) else {
            unreachable!("inserted above");
        };
        if f.reserved < at as u64 + CQ_ENTRY_BYTES as u64 {
            // Before the store, never after: a store into a page without a block raises
            // SIGBUS on a full disk. A failure leaves the queue as it was.
            let path = self.dir.join(offset_name(start));
            storage::reserve_mapped(&self.space, &path, f.reserved, want)?;
            f.reserved = want;
        }
        let slot = &mut f.map[at..at + CQ_ENTRY_BYTES];
        slot[0..8].copy_from_slice(&e.offset.0.to_be_bytes());
        slot[8..12].copy_from_slice(&e.size.to_be_bytes());
        slot[12..20].copy_from_slice(&e.tag_hash.to_be_bytes());
        if q >= self.max {
            self.max = QueueOffset(q.0 + 1);
        }
        if q < self.min {
            self.min = q;
        }
        Ok(())
    }

    /// Drops every entry at or above `q`.
    pub(crate) fn truncate(&mut self, q: QueueOffset) {
        while self.max > q {
            let last = QueueOffset(self.max.0 - 1);
            let start = last.0 - last.0 % self.file_entries;
            if let Some(f) = self.files.get_mut(&start) {
                let at = (last.0 - start) as usize * CQ_ENTRY_BYTES;
                // Only slots holding an entry are stored into: their page has a block
                // already, so this never needs one (an empty slot may lie in a hole).
                let slot = &mut f.map[at..at + CQ_ENTRY_BYTES];
                if slot.iter().any(|&b| b != 0) {
                    slot.fill(0);
                }
            }
            self.max = last;
        }
        if self.min > self.max {
            self.min = self.max;
        }
    }

    /// Moves `min` past entries pointing below `log_min` and gives up the files wholly below
    /// (the caller deletes them, off the core).
    pub(crate) fn trim_below(&mut self, log_min: CommitLogOffset) -> Vec<Doomed> {
        // Entries point at increasing commit-log offsets: binary search the first kept one.
        // A missing entry (a record lost to damage, see recovery) counts as kept: taken as
        // "below", it would move the minimum past every record before it that is still
        // there. Counted as kept it can only leave a few entries below the log minimum
        // inside the queue, which reads step over.
        let (mut lo, mut hi) = (self.min.0, self.max.0);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(QueueOffset(mid)) {
                Some(e) if e.offset < log_min => lo = mid + 1,
                _ => hi = mid,
            }
        }
        self.min = QueueOffset(lo);
        let doomed: Vec<u64> = self
            .files
            .keys()
            .copied()
            .filter(|&s| s + self.file_entries <= lo)
            .collect();
        doomed
            .into_iter()
            .map(|s| Doomed {
                path: self.dir.join(offset_name(s)),
                map: self.files.remove(&s).map(|f| f.map),
                truncate: true,
            })
            .collect()
    }

    pub(crate) fn flush(&self) -> Result<(), ShardError> {
        for f in self.files.values() {
            f.map.flush()?;
        }
        Ok(())
    }
}

fn entry_at(map: &MmapMut, i: usize) -> Option<CqEntry> {
    let at = i * CQ_ENTRY_BYTES;
    let b = map.get(at..at + CQ_ENTRY_BYTES)?;
    let mut o = [0u8; 8];
    o.copy_from_slice(&b[0..8]);
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[8..12]);
    let mut t = [0u8; 8];
    t.copy_from_slice(&b[12..20]);
    let size = u32::from_be_bytes(s);
    // Size 0 marks a slot never written (files are zero-filled when created).
    (size != 0).then(|| CqEntry {
        offset: CommitLogOffset(u64::from_be_bytes(o)),
        size,
        tag_hash: i64::from_be_bytes(t),
    })
}

/// All ConsumeQueues of a shard.
pub(crate) struct ConsumeQueues {
    root: PathBuf,
    file_entries: u64,
    space: Space,
    pub(crate) queues: HashMap<(String, u32), ConsumeQueue>,
}

impl ConsumeQueues {
    pub(crate) fn open(root: PathBuf, file_entries: u64, space: Space) -> Result<Self, ShardError> {
        std::fs::create_dir_all(&root)?;
        let mut queues = HashMap::new();
        for topic_entry in std::fs::read_dir(&root)? {
            let topic_entry = topic_entry?;
            let Some(topic) = topic_entry
                .file_name()
                .to_str()
                .and_then(topic_from_dir_name)
            else {
                continue;
            };
            if !topic_entry.file_type()?.is_dir() {
                continue;
            }
            for q_entry in std::fs::read_dir(topic_entry.path())? {
                let q_entry = q_entry?;
                let Some(queue_id) = q_entry.file_name().to_str().and_then(|s| s.parse().ok())
                else {
                    continue;
                };
                let cq = ConsumeQueue::open(q_entry.path(), file_entries, space.clone())?;
                queues.insert((topic.clone(), queue_id), cq);
            }
        }
        Ok(ConsumeQueues {
            root,
            file_entries,
            space,
            queues,
        })
    }

    pub(crate) fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        // A borrowed tuple key cannot be looked up without allocating; topics are short.
        self.queues.get(&(topic.to_owned(), queue_id))
    }

    pub(crate) fn get_or_create(&mut self, topic: &str, queue_id: u32) -> &mut ConsumeQueue {
        let root = &self.root;
        let file_entries = self.file_entries;
        let space = &self.space;
        self.queues
            .entry((topic.to_owned(), queue_id))
            .or_insert_with(|| ConsumeQueue {
                dir: root.join(topic_dir_name(topic)).join(queue_id.to_string()),
                file_entries,
                files: BTreeMap::new(),
                space: space.clone(),
                min: QueueOffset(0),
                max: QueueOffset(0),
            })
    }

    pub(crate) fn flush(&self) -> Result<(), ShardError> {
        for cq in self.queues.values() {
            cq.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(off: u64) -> CqEntry {
        CqEntry {
            offset: CommitLogOffset(off),
            size: 100,
            tag_hash: -7,
        }
    }

    #[test]
    fn entries_round_trip_across_files_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut cqs =
                ConsumeQueues::open(dir.path().to_owned(), 4, Space::unchecked()).unwrap();
            let cq = cqs.get_or_create("T/x", 3);
            for i in 0..10 {
                cq.put(QueueOffset(i), e(i * 100)).unwrap();
            }
            assert_eq!(cq.max, QueueOffset(10));
            cqs.flush().unwrap();
        }
        let mut cqs = ConsumeQueues::open(dir.path().to_owned(), 4, Space::unchecked()).unwrap();
        let cq = cqs.queues.get_mut(&("T/x".to_string(), 3)).unwrap();
        assert_eq!((cq.min, cq.max), (QueueOffset(0), QueueOffset(10)));
        assert_eq!(cq.get(QueueOffset(9)), Some(e(900)));
        cq.truncate(QueueOffset(7));
        assert_eq!(cq.max, QueueOffset(7));
        assert_eq!(cq.get(QueueOffset(7)), None);
        let doomed = cq.trim_below(CommitLogOffset(450));
        assert_eq!(doomed.len(), 1);
        assert!(doomed[0].path.ends_with(offset_name(0)));
        assert_eq!(cq.min, QueueOffset(5));
        // The file holding entries 0..4 is gone; later ones stay.
        assert_eq!(cq.files.keys().copied().collect::<Vec<_>>(), vec![4, 8]);
    }

    #[test]
    fn a_missing_entry_never_moves_the_minimum_past_kept_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut cqs = ConsumeQueues::open(dir.path().to_owned(), 64, Space::unchecked()).unwrap();
        let cq = cqs.get_or_create("T", 0);
        // Entry 1 is missing (its record was lost to damage); the rest are kept.
        for i in [0, 2, 3, 4, 5, 6, 7] {
            cq.put(QueueOffset(i), e(1000 + i * 100)).unwrap();
        }
        assert_eq!(cq.get(QueueOffset(1)), None);
        cq.trim_below(CommitLogOffset(0));
        assert_eq!(cq.min, QueueOffset(0), "entry 0 is still served");
        // With the log minimum past entry 0, the minimum may stop at the hole, never after
        // entry 2.
        cq.trim_below(CommitLogOffset(1100));
        assert!(cq.min <= QueueOffset(2), "{:?}", cq.min);
        cq.trim_below(CommitLogOffset(1500));
        assert_eq!(cq.min, QueueOffset(5));
    }
}
