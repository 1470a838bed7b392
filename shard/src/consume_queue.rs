//! ConsumeQueue: per topic-queue index of fixed 20-byte entries (commit-log offset 8,
//! size 4, tag hash 8, big-endian as in RocketMQ), in files of `consume_queue_file_entries`
//! entries named by their first queue offset.
//!
//! These files are derived data written through the page cache: recovery checks every
//! entry against the CommitLog and rewrites what lags or disagrees.
//!
//! **Memory and mappings grow with the queues in use, not with all queues.** A file is
//! as long as the blocks reserved for it (it grows with its entries, from 4 KiB, doubling
//! to 1 MiB steps), so a queue holding a few entries costs 4 KiB of disk, and finding the
//! end of a queue at open reads only the end of its last file. Nothing is mapped at open:
//! a file is mapped when an entry of it is first read or written, and each shard keeps at
//! most `consume_queue_maps_max` files mapped, unmapping the least recently used one (a
//! clock) to map another. The kernel's `vm.max_map_count` (65530 by default) is what this
//! bounds; an unmapped file's pages stay in the page cache and are written back as usual.
//!
//! No store ever goes into a page without a block: on a full disk such a store raises
//! SIGBUS and kills the broker. So a file's blocks are reserved (`fallocate`, through
//! `storage::reserve_mapped`, which also extends the file) before the entries written
//! there, before the store; a reservation that fails (ENOSPC, the free-space reserve,
//! EMFILE) fails the append with `NoSpace` / `TooManyOpenFiles` and changes nothing.
//! Nothing is read or stored past a file's length (a mapping is as long as a full file,
//! and a page past the end would raise SIGBUS too). Files found at open are reserved again
//! from their start before their first store (a file from an older version is sparse).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use memmap2::MmapMut;

use crate::layout::{offset_name, parse_offset_name, topic_dir_name, topic_from_dir_name};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::storage::{self, Doomed, Storage};
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

/// A new file's first reservation; each later one doubles what the file holds, up to
/// steps of `RESERVE_STEP_BYTES` (one `fallocate` per 52,428 entries from there).
const RESERVE_FIRST_BYTES: u64 = 4096;
const RESERVE_STEP_BYTES: u64 = 1 << 20;

/// Where the reservation covering bytes `[0, need)` of a file of `len` bytes ends: a
/// step past `need`, the step doubling with the file up to `RESERVE_STEP_BYTES`.
fn reserve_end(need: u64, len: u64) -> u64 {
    let step = need
        .next_power_of_two()
        .clamp(RESERVE_FIRST_BYTES, RESERVE_STEP_BYTES);
    need.next_multiple_of(step).min(len)
}

/// One ConsumeQueue file and its mapping while it has one.
struct CqSlot {
    path: PathBuf,
    /// Bytes of a full file: the mapping's length.
    map_len: usize,
    map: RefCell<Option<MmapMut>>,
    /// Read or written since the clock last passed it.
    used: Cell<bool>,
    /// The queue's last file: it is written an entry at a time (see `Maps::map_in`).
    tail: Cell<bool>,
}

impl CqSlot {
    fn map_file(&self, storage: &Storage) -> Result<MmapMut, ShardError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| ShardError::making_room(&self.path, "opening a ConsumeQueue file", e))?;
        // Past the file's length the mapping is never touched: every access is checked
        // against `CqFile::len`.
        let map = storage
            .map(&file, Some(self.map_len))
            .map_err(|e| ShardError::making_room(&self.path, "mapping a ConsumeQueue file", e))?;
        // A queue's last file is written an entry at a time: a write fault should bring in
        // its one page. With readahead one fault zeroed a large folio, up to 2-3 ms on the
        // core at the start of a queue. Earlier files are read in order: readahead helps.
        if self.tail.get() {
            let _ = map.advise(memmap2::Advice::Random);
        }
        Ok(map)
    }
}

/// The mapped ConsumeQueue files of one shard: at most `max`, the least recently used
/// one unmapped (second chance: a clock hand over the ring) to map another.
pub(crate) struct Maps {
    storage: Storage,
    max: usize,
    ring: RefCell<Vec<Rc<CqSlot>>>,
    hand: Cell<usize>,
    mapped: Cell<usize>,
    unmapped: Cell<u64>,
    /// Something was stored since open: `flush` has work.
    written: Cell<bool>,
    /// While the shard recovers, an entry of a file without a mapping is read with
    /// `pread` instead of mapping the file: recovery reads entries of every queue with a
    /// record in the log, and with more queues than the bound, mapping each file to read
    /// one entry and unmapping it again spent the start in mmap/munmap (the process's
    /// mapping lock and a TLB shootdown per unmap, contended by every core recovering).
    recovering: Cell<bool>,
    /// The file the last such read opened, kept for the next (a queue's records often
    /// follow each other in the log).
    read_file: RefCell<Option<(Rc<CqSlot>, std::fs::File)>>,
}

impl Maps {
    pub(crate) fn new(max: usize, storage: Storage) -> Rc<Maps> {
        Rc::new(Maps {
            storage,
            max: max.max(1),
            ring: RefCell::new(Vec::new()),
            hand: Cell::new(0),
            mapped: Cell::new(0),
            unmapped: Cell::new(0),
            written: Cell::new(false),
            recovering: Cell::new(true),
            read_file: RefCell::new(None),
        })
    }

    /// The entry at byte `at` of `slot`'s file, read without mapping it (see
    /// `recovering`).
    fn read_unmapped(&self, slot: &Rc<CqSlot>, at: u64) -> Result<Option<CqEntry>, ShardError> {
        let mut held = self.read_file.borrow_mut();
        if !held.as_ref().is_some_and(|(s, _)| Rc::ptr_eq(s, slot)) {
            let file = std::fs::File::open(&slot.path).map_err(|e| {
                ShardError::making_room(&slot.path, "opening a ConsumeQueue file", e)
            })?;
            *held = Some((slot.clone(), file));
        }
        let Some((_, file)) = held.as_ref() else {
            unreachable!("set above");
        };
        let mut b = [0u8; CQ_ENTRY_BYTES];
        self.storage.pread(file, &mut b, at)?;
        Ok(entry_at(&b, 0))
    }

    /// Runs `f` on `slot`'s mapping, mapping it first if it has none.
    fn with<R>(
        &self,
        slot: &Rc<CqSlot>,
        f: impl FnOnce(&mut MmapMut) -> R,
    ) -> Result<R, ShardError> {
        slot.used.set(true);
        if let Some(m) = slot.map.borrow_mut().as_mut() {
            return Ok(f(m));
        }
        let map = slot.map_file(&self.storage)?;
        self.admit(slot);
        let mut held = slot.map.borrow_mut();
        Ok(f(held.insert(map)))
    }

    /// Gives `slot` (about to be mapped) a place in the ring, unmapping the first file the
    /// hand finds unused since it last passed. Two turns at most: the first clears marks.
    fn admit(&self, slot: &Rc<CqSlot>) {
        self.mapped.set(self.mapped.get() + 1);
        let mut ring = self.ring.borrow_mut();
        if ring.len() < self.max {
            ring.push(slot.clone());
            return;
        }
        loop {
            let h = self.hand.get() % ring.len();
            self.hand.set(h + 1);
            let held = ring[h].map.borrow().is_some();
            if held && ring[h].used.replace(false) {
                continue;
            }
            if held {
                drop(ring[h].map.borrow_mut().take());
                self.mapped.set(self.mapped.get() - 1);
                self.unmapped.set(self.unmapped.get() + 1);
            }
            ring[h] = slot.clone();
            return;
        }
    }

    /// Takes `slot`'s mapping for a file being removed (the slot leaves the ring when the
    /// hand next reaches it).
    fn release(&self, slot: &CqSlot) -> Option<MmapMut> {
        let map = slot.map.borrow_mut().take();
        if map.is_some() {
            self.mapped.set(self.mapped.get() - 1);
        }
        map
    }

    /// ConsumeQueue files mapped now, and unmapped since open to map others.
    pub(crate) fn counts(&self) -> (usize, u64) {
        (self.mapped.get(), self.unmapped.get())
    }
}

/// One ConsumeQueue file.
pub(crate) struct CqFile {
    slot: Rc<CqSlot>,
    /// The file's length: nothing at or past it is read or stored.
    len: u64,
    /// Bytes from the start whose blocks are reserved: every store goes below this. A file
    /// found at open counts as 0 (it may be sparse, from an older version or a crash); its
    /// first store reserves again, which costs nothing where blocks are already there.
    reserved: u64,
}

pub(crate) struct ConsumeQueue {
    dir: PathBuf,
    file_entries: u64,
    files: BTreeMap<u64, CqFile>,
    storage: Storage,
    maps: Rc<Maps>,
    /// First queue offset still served (entries below point into deleted segments).
    pub(crate) min: QueueOffset,
    /// Next queue offset to be written.
    pub(crate) max: QueueOffset,
    /// One past the highest entry recovery checked against a record of the log (0 before
    /// it): when it is `max`, the queue's last entry is known good and needs no read.
    pub(crate) recovered_to: QueueOffset,
}

/// Entries written in the file at `path` of `len` bytes: one past its last non-empty
/// slot. Read from the end back with `pread`, mapping nothing: a file grows with its
/// entries, so this reads about its last reservation step (a file of an older version,
/// as long as a full file, is read back to its last entry).
fn written_entries(storage: &Storage, path: &Path, len: u64) -> Result<u64, ShardError> {
    const CHUNK: u64 = (64 << 10) / CQ_ENTRY_BYTES as u64 * CQ_ENTRY_BYTES as u64;
    let file = std::fs::File::open(path)
        .map_err(|e| ShardError::making_room(path, "opening a ConsumeQueue file", e))?;
    let mut end = len - len % CQ_ENTRY_BYTES as u64;
    let mut buf = vec![0u8; CHUNK.min(end) as usize];
    while end > 0 {
        let from = end.saturating_sub(CHUNK);
        let b = &mut buf[..(end - from) as usize];
        storage.pread(&file, b, from)?;
        let last = b
            .chunks_exact(CQ_ENTRY_BYTES)
            .rposition(|e| entry_at(e, 0).is_some());
        if let Some(i) = last {
            return Ok(from / CQ_ENTRY_BYTES as u64 + i as u64 + 1);
        }
        end = from;
    }
    Ok(0)
}

/// Creates a ConsumeQueue file with its first `reserve` bytes' blocks reserved (which
/// makes it that long). On any failure the new file is removed: the append that needed it
/// fails (`NoSpace` on a full disk) and changes nothing.
fn create_file(storage: &Storage, path: &Path, full: u64, reserve: u64) -> Result<u64, ShardError> {
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
        if actual > full {
            return Err(ShardError::Corrupt {
                path: path.display().to_string(),
                reason: format!("file is {actual} bytes, expected at most {full}"),
            });
        }
        drop(file);
        storage::reserve_mapped(storage, path, 0, reserve)?;
        Ok(actual.max(reserve))
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

    fn new_file(&self, start: u64, len: u64, reserved: u64) -> CqFile {
        CqFile {
            slot: Rc::new(CqSlot {
                path: self.dir.join(offset_name(start)),
                map_len: self.file_bytes() as usize,
                map: RefCell::new(None),
                used: Cell::new(false),
                tail: Cell::new(false),
            }),
            len,
            reserved,
        }
    }

    fn open(
        dir: PathBuf,
        file_entries: u64,
        storage: Storage,
        maps: Rc<Maps>,
    ) -> Result<Self, ShardError> {
        let mut cq = ConsumeQueue {
            dir,
            file_entries,
            files: BTreeMap::new(),
            storage,
            maps,
            min: QueueOffset(0),
            max: QueueOffset(0),
            recovered_to: QueueOffset(0),
        };
        let full = cq.file_bytes();
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
            let len = entry.metadata()?.len();
            if len > full {
                return Err(ShardError::Corrupt {
                    path: entry.path().display().to_string(),
                    reason: format!("file is {len} bytes, expected at most {full}"),
                });
            }
            let file = cq.new_file(start, len, 0);
            cq.files.insert(start, file);
        }
        // max: one past the last non-empty entry of the last file.
        if let Some((&start, last)) = cq.files.iter().next_back() {
            last.slot.tail.set(true);
            cq.max = QueueOffset(start + written_entries(&cq.storage, &last.slot.path, last.len)?);
        }
        if let Some(&first) = cq.files.keys().next() {
            cq.min = QueueOffset(first);
        }
        Ok(cq)
    }

    /// The entry at `q`, `None` where none was written; an error only when its file cannot
    /// be mapped (descriptors or mappings exhausted), never taken for a missing entry.
    pub(crate) fn get(&self, q: QueueOffset) -> Result<Option<CqEntry>, ShardError> {
        let start = q.0 - q.0 % self.file_entries;
        let Some(f) = self.files.get(&start) else {
            return Ok(None);
        };
        let at = (q.0 - start) * CQ_ENTRY_BYTES as u64;
        if at + CQ_ENTRY_BYTES as u64 > f.len {
            return Ok(None);
        }
        if self.maps.recovering.get() && f.slot.map.borrow().is_none() {
            return self.maps.read_unmapped(&f.slot, at);
        }
        self.maps.with(&f.slot, |m| entry_at(m, at as usize))
    }

    pub(crate) fn put(&mut self, q: QueueOffset, e: CqEntry) -> Result<(), ShardError> {
        debug_assert!(e.size > 0);
        let start = q.0 - q.0 % self.file_entries;
        let at = (q.0 - start) * CQ_ENTRY_BYTES as u64;
        let need = at + CQ_ENTRY_BYTES as u64;
        let full = self.file_bytes();
        let want = reserve_end(need, full);
        if !self.files.contains_key(&start) {
            std::fs::create_dir_all(&self.dir).map_err(|e| {
                ShardError::making_room(&self.dir, "creating a ConsumeQueue directory", e)
            })?;
            let path = self.dir.join(offset_name(start));
            let len = create_file(&self.storage, &path, full, want)?;
            let file = self.new_file(start, len, want);
            let is_last = self.files.range(start..).next().is_none();
            if let Some((_, prev)) = self.files.range(..start).next_back().filter(|_| is_last) {
                // The file before it is complete, and read in order from now on: it gets
                // readahead back.
                prev.slot.tail.set(false);
                if let Some(m) = prev.slot.map.borrow().as_ref() {
                    let _ = m.advise(memmap2::Advice::Normal);
                }
            }
            file.slot.tail.set(is_last);
            if self.files.is_empty() {
                self.min = q;
            }
            self.files.insert(start, file);
        }
        let Some(f) = self.files.get_mut(&start) else {
            unreachable!("inserted above");
        };
        if f.reserved < need {
            // Before the store, never after: a store into a page without a block raises
            // SIGBUS on a full disk. A failure leaves the queue as it was.
            storage::reserve_mapped(&self.storage, &f.slot.path, f.reserved, want)?;
            f.reserved = want;
            f.len = f.len.max(want);
        }
        let at = at as usize;
        self.maps.with(&f.slot, |m| {
            let slot = &mut m[at..at + CQ_ENTRY_BYTES];
            slot[0..8].copy_from_slice(&e.offset.0.to_be_bytes());
            slot[8..12].copy_from_slice(&e.size.to_be_bytes());
            slot[12..20].copy_from_slice(&e.tag_hash.to_be_bytes());
        })?;
        self.maps.written.set(true);
        if q >= self.max {
            self.max = QueueOffset(q.0 + 1);
        }
        if q < self.min {
            self.min = q;
        }
        Ok(())
    }

    /// Drops every entry at or above `q`. The queue ends at `q` even when a slot cannot be
    /// cleared (its file cannot be mapped again: descriptors or mappings exhausted); the
    /// first such error is returned.
    pub(crate) fn truncate(&mut self, q: QueueOffset) -> Result<(), ShardError> {
        let mut result = Ok(());
        while self.max > q {
            let last = QueueOffset(self.max.0 - 1);
            let start = last.0 - last.0 % self.file_entries;
            if let Some(f) = self.files.get(&start) {
                let at = (last.0 - start) * CQ_ENTRY_BYTES as u64;
                if at + CQ_ENTRY_BYTES as u64 <= f.len {
                    let at = at as usize;
                    // Only slots holding an entry are stored into: their page has a block
                    // already, so this never needs one (an empty slot may lie in a hole).
                    let cleared = self.maps.with(&f.slot, |m| {
                        let slot = &mut m[at..at + CQ_ENTRY_BYTES];
                        if slot.iter().any(|&b| b != 0) {
                            slot.fill(0);
                        }
                    });
                    if let Err(e) = cleared {
                        if result.is_ok() {
                            result = Err(e);
                        }
                    }
                }
            }
            self.max = last;
        }
        if self.min > self.max {
            self.min = self.max;
        }
        result
    }

    /// Moves `min` past entries pointing below `log_min` and gives up the files wholly below
    /// (the caller deletes them, off the core).
    pub(crate) fn trim_below(
        &mut self,
        log_min: CommitLogOffset,
    ) -> Result<Vec<Doomed>, ShardError> {
        // Entries point at increasing commit-log offsets: binary search the first kept one.
        // A missing entry (a record lost to damage, see recovery) counts as kept: taken as
        // "below", it would move the minimum past every record before it that is still
        // there. Counted as kept it can only leave a few entries below the log minimum
        // inside the queue, which reads step over.
        if log_min.0 == 0 {
            return Ok(Vec::new());
        }
        let (mut lo, mut hi) = (self.min.0, self.max.0);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(QueueOffset(mid))? {
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
        Ok(doomed
            .into_iter()
            .filter_map(|s| self.files.remove(&s))
            .map(|f| Doomed {
                map: self.maps.release(&f.slot),
                path: f.slot.path.clone(),
                truncate: true,
            })
            .collect())
    }
}

fn entry_at(bytes: &[u8], at: usize) -> Option<CqEntry> {
    let b = bytes.get(at..at + CQ_ENTRY_BYTES)?;
    let mut o = [0u8; 8];
    o.copy_from_slice(&b[0..8]);
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[8..12]);
    let mut t = [0u8; 8];
    t.copy_from_slice(&b[12..20]);
    let size = u32::from_be_bytes(s);
    // Size 0 marks a slot never written (a reservation reads as zeros).
    (size != 0).then(|| CqEntry {
        offset: CommitLogOffset(u64::from_be_bytes(o)),
        size,
        tag_hash: i64::from_be_bytes(t),
    })
}

/// A ConsumeQueue's key in [`ConsumeQueues`]: its topic and queue id. Looked up by a borrowed
/// `(&str, u32)` through [`KeyParts`], so that an append finds its queue without allocating.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct QueueKey(pub(crate) String, pub(crate) u32);

/// A queue key's topic and queue id, owned or borrowed: both hash and compare by these.
pub(crate) trait KeyParts {
    fn parts(&self) -> (&str, u32);
}

impl KeyParts for QueueKey {
    fn parts(&self) -> (&str, u32) {
        (&self.0, self.1)
    }
}

impl KeyParts for (&str, u32) {
    fn parts(&self) -> (&str, u32) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KeyParts + 'a> for QueueKey {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

impl Hash for QueueKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state)
    }
}

impl Hash for dyn KeyParts + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state)
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}

/// All ConsumeQueues of a shard.
pub(crate) struct ConsumeQueues {
    root: PathBuf,
    file_entries: u64,
    storage: Storage,
    maps: Rc<Maps>,
    pub(crate) queues: HashMap<QueueKey, ConsumeQueue>,
}

impl ConsumeQueues {
    pub(crate) fn open(
        root: PathBuf,
        file_entries: u64,
        maps_max: usize,
        storage: Storage,
    ) -> Result<Self, ShardError> {
        std::fs::create_dir_all(&root)?;
        let maps = Maps::new(maps_max, storage.clone());
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
                let cq = ConsumeQueue::open(
                    q_entry.path(),
                    file_entries,
                    storage.clone(),
                    maps.clone(),
                )?;
                queues.insert(QueueKey(topic.clone(), queue_id), cq);
            }
        }
        Ok(ConsumeQueues {
            root,
            file_entries,
            storage,
            maps,
            queues,
        })
    }

    pub(crate) fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        self.queues.get(&(topic, queue_id) as &dyn KeyParts)
    }

    pub(crate) fn get_or_create(&mut self, topic: &str, queue_id: u32) -> &mut ConsumeQueue {
        let key = &(topic, queue_id) as &dyn KeyParts;
        if !self.queues.contains_key(key) {
            let queue = ConsumeQueue {
                dir: self
                    .root
                    .join(topic_dir_name(topic))
                    .join(queue_id.to_string()),
                file_entries: self.file_entries,
                files: BTreeMap::new(),
                storage: self.storage.clone(),
                maps: self.maps.clone(),
                min: QueueOffset(0),
                max: QueueOffset(0),
                recovered_to: QueueOffset(0),
            };
            return self
                .queues
                .entry(QueueKey(topic.to_owned(), queue_id))
                .or_insert(queue);
        }
        match self.queues.get_mut(key) {
            Some(queue) => queue,
            None => unreachable!("the queue was found just above"),
        }
    }

    /// ConsumeQueue files mapped now, and unmapped since open to map others.
    pub(crate) fn map_counts(&self) -> (usize, u64) {
        self.maps.counts()
    }

    /// Recovery is over: entries are read through mappings from now on.
    pub(crate) fn recovered(&self) {
        self.maps.recovering.set(false);
        self.maps.read_file.borrow_mut().take();
    }

    /// Makes what was stored since open durable: one `syncfs` of the filesystem holding
    /// the ConsumeQueues, not a sync per file (a shard may have written 100,000 of them,
    /// most no longer mapped). Derived data: recovery rebuilds it from the CommitLog.
    pub(crate) fn flush(&self) -> Result<(), ShardError> {
        if !self.maps.written.get() {
            return Ok(());
        }
        Ok(self.storage.syncfs(&self.root)?)
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
                ConsumeQueues::open(dir.path().to_owned(), 4, 16, Storage::unchecked()).unwrap();
            let cq = cqs.get_or_create("T/x", 3);
            for i in 0..10 {
                cq.put(QueueOffset(i), e(i * 100)).unwrap();
            }
            assert_eq!(cq.max, QueueOffset(10));
            cqs.flush().unwrap();
        }
        let mut cqs =
            ConsumeQueues::open(dir.path().to_owned(), 4, 16, Storage::unchecked()).unwrap();
        let cq = cqs.queues.get_mut(&("T/x", 3u32) as &dyn KeyParts).unwrap();
        assert_eq!((cq.min, cq.max), (QueueOffset(0), QueueOffset(10)));
        assert_eq!(cq.get(QueueOffset(9)).unwrap(), Some(e(900)));
        cq.truncate(QueueOffset(7)).unwrap();
        assert_eq!(cq.max, QueueOffset(7));
        assert_eq!(cq.get(QueueOffset(7)).unwrap(), None);
        let doomed = cq.trim_below(CommitLogOffset(450)).unwrap();
        assert_eq!(doomed.len(), 1);
        assert!(doomed[0].path.ends_with(offset_name(0)));
        assert_eq!(cq.min, QueueOffset(5));
        // The file holding entries 0..4 is gone; later ones stay.
        assert_eq!(cq.files.keys().copied().collect::<Vec<_>>(), vec![4, 8]);
    }

    #[test]
    fn a_missing_entry_never_moves_the_minimum_past_kept_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut cqs =
            ConsumeQueues::open(dir.path().to_owned(), 64, 16, Storage::unchecked()).unwrap();
        let cq = cqs.get_or_create("T", 0);
        // Entry 1 is missing (its record was lost to damage); the rest are kept.
        for i in [0, 2, 3, 4, 5, 6, 7] {
            cq.put(QueueOffset(i), e(1000 + i * 100)).unwrap();
        }
        assert_eq!(cq.get(QueueOffset(1)).unwrap(), None);
        cq.trim_below(CommitLogOffset(0)).unwrap();
        assert_eq!(cq.min, QueueOffset(0), "entry 0 is still served");
        // With the log minimum past entry 0, the minimum may stop at the hole, never after
        // entry 2.
        cq.trim_below(CommitLogOffset(1100)).unwrap();
        assert!(cq.min <= QueueOffset(2), "{:?}", cq.min);
        cq.trim_below(CommitLogOffset(1500)).unwrap();
        assert_eq!(cq.min, QueueOffset(5));
    }

    #[test]
    fn files_grow_with_their_entries_and_mappings_stay_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let queues = 40u32;
        {
            let mut cqs =
                ConsumeQueues::open(dir.path().to_owned(), 300_000, 8, Storage::unchecked())
                    .unwrap();
            cqs.recovered();
            for round in 0..3u64 {
                for q in 0..queues {
                    let cq = cqs.get_or_create("T", q);
                    cq.put(QueueOffset(round), e(1 + round * 1000 + q as u64))
                        .unwrap();
                }
                let (mapped, _) = cqs.map_counts();
                assert!(mapped <= 8, "{mapped} files mapped, bound 8");
            }
            // Every queue still reads back, through mappings made again.
            for q in 0..queues {
                let cq = cqs.get("T", q).unwrap();
                assert_eq!(cq.get(QueueOffset(2)).unwrap(), Some(e(2001 + q as u64)));
            }
            let (mapped, unmapped) = cqs.map_counts();
            assert!(
                mapped <= 8 && unmapped >= (queues as u64 - 8),
                "{mapped} {unmapped}"
            );
            cqs.flush().unwrap();
        }
        // A queue of three entries holds one 4 KiB file, not a 6 MB one.
        let f = dir
            .path()
            .join(topic_dir_name("T"))
            .join("5")
            .join(offset_name(0));
        assert_eq!(std::fs::metadata(&f).unwrap().len(), RESERVE_FIRST_BYTES);
        // Reopened, nothing is mapped, each queue's end is where it was, and recovery's
        // reads map nothing either; reads after it map files again, within the bound.
        let cqs =
            ConsumeQueues::open(dir.path().to_owned(), 300_000, 8, Storage::unchecked()).unwrap();
        assert_eq!(cqs.map_counts(), (0, 0));
        for q in 0..queues {
            let cq = cqs.get("T", q).unwrap();
            assert_eq!(
                (cq.min, cq.max),
                (QueueOffset(0), QueueOffset(3)),
                "queue {q}"
            );
            assert_eq!(cq.get(QueueOffset(1)).unwrap(), Some(e(1001 + q as u64)));
        }
        assert_eq!(cqs.map_counts(), (0, 0));
        cqs.recovered();
        for q in 0..queues {
            let cq = cqs.get("T", q).unwrap();
            assert_eq!(cq.get(QueueOffset(0)).unwrap(), Some(e(1 + q as u64)));
        }
        let (mapped, unmapped) = cqs.map_counts();
        assert_eq!((mapped, unmapped), (8, queues as u64 - 8));
    }

    #[test]
    fn reservations_double_up_to_a_step() {
        assert_eq!(reserve_end(20, 6_000_000), 4096);
        assert_eq!(reserve_end(4096, 6_000_000), 4096);
        assert_eq!(reserve_end(4116, 6_000_000), 8192);
        assert_eq!(reserve_end(300_000, 6_000_000), 524_288);
        assert_eq!(reserve_end(3_000_000, 6_000_000), 3 << 20);
        assert_eq!(reserve_end(5_999_990, 6_000_000), 6_000_000);
        // A file of a few entries is never reserved past its end.
        assert_eq!(reserve_end(20, 80), 80);
    }

    #[test]
    fn a_file_of_an_older_version_as_long_as_a_full_file_keeps_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let qdir = dir.path().join(topic_dir_name("Old")).join("0");
        std::fs::create_dir_all(&qdir).unwrap();
        let path = qdir.join(offset_name(0));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(64 * CQ_ENTRY_BYTES as u64).unwrap();
        use std::os::unix::fs::FileExt;
        let mut rec = [0u8; CQ_ENTRY_BYTES];
        rec[0..8].copy_from_slice(&77u64.to_be_bytes());
        rec[8..12].copy_from_slice(&9u32.to_be_bytes());
        f.write_all_at(&rec, 10 * CQ_ENTRY_BYTES as u64).unwrap();
        drop(f);
        let mut cqs =
            ConsumeQueues::open(dir.path().to_owned(), 64, 4, Storage::unchecked()).unwrap();
        let cq = cqs.queues.get_mut(&("Old", 0u32) as &dyn KeyParts).unwrap();
        assert_eq!(cq.max, QueueOffset(11));
        assert_eq!(
            cq.get(QueueOffset(10)).unwrap().map(|e| e.offset),
            Some(CommitLogOffset(77))
        );
        cq.put(QueueOffset(11), e(100)).unwrap();
        assert_eq!(cq.get(QueueOffset(11)).unwrap(), Some(e(100)));
    }
}
