//! IndexFile: hash index from "topic#key" to commit-log offsets, in RocketMQ's layout.
//!
//! ```text
//! header (40 bytes): begin_timestamp_ms i64, end_timestamp_ms i64, begin_phys i64,
//!                    end_phys i64, hash_slot_count i32, index_count i32
//! slots  (4 bytes each): index of the newest entry of that slot (0 = none)
//! entries (20 bytes each): key_hash i32, phys_offset i64, time_diff_s i32, prev_index i32
//! ```
//!
//! One deviation: `end_phys` is the end of the last record *looked at* (keys or not), so it
//! tells recovery where to resume indexing. Files are named by their first commit-log
//! offset. The files are mmapped and written through the page cache; after a crash a
//! garbled chain can at worst yield a wrong candidate offset, and every candidate is checked
//! against the record read back (topic, key, time), so a query never returns a wrong message.
//!
//! As with the ConsumeQueue, nothing is stored into a page without a block (that is a
//! SIGBUS on a full disk): a new file has its header and hash slots (hit at random) reserved
//! whole, and entries a step ahead; a failed reservation fails the append with `NoSpace`.

use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::layout::{offset_name, parse_offset_name};
use crate::storage::{self, Doomed, Storage};
use crate::ShardError;

const HEADER_BYTES: usize = 40;
const SLOT_BYTES: usize = 4;
const ENTRY_BYTES: usize = 20;
const _: () = assert!(ENTRY_BYTES == 4 + 8 + 4 + 4);
/// Entry blocks are reserved this far ahead of the entries written (the header and hash
/// slots, which are stored into at random, are reserved whole when a file is made).
const RESERVE_STEP_BYTES: u64 = 1 << 20;

struct IndexFile {
    map: MmapMut,
    path: PathBuf,
    slots: u32,
    entries_max: u32,
    /// Bytes from the start whose blocks are reserved: every store goes below this. A file
    /// found at open counts as 0 (it may be sparse); its first store reserves again, which
    /// costs nothing where the blocks are there already.
    reserved: u64,
}

fn rd_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn rd_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

#[cfg(test)]
pub(crate) fn key_hash(key: &str) -> i32 {
    // Java's String.hashCode, as RocketMQ's IndexFile uses; non-negative.
    (message::tag_hash(key) as i32).wrapping_abs().max(0)
}

/// `key_hash(&format!("{topic}#{key}"))` without building the string: Java's hash of a
/// concatenation continues from the hash of its first part.
pub(crate) fn topic_key_hash(topic: &str, key: &str) -> i32 {
    let h = message::java_hash_continue(0, topic);
    let h = h.wrapping_mul(31).wrapping_add(b'#' as i32);
    message::java_hash_continue(h, key).wrapping_abs().max(0)
}

impl IndexFile {
    fn file_bytes(slots: u32, entries: u32) -> u64 {
        HEADER_BYTES as u64 + slots as u64 * SLOT_BYTES as u64 + entries as u64 * ENTRY_BYTES as u64
    }

    /// Makes a new IndexFile with its header, hash slots and first entries reserved, then
    /// maps it. On any failure nothing is mapped and the new file is removed, so the append
    /// that needed it fails (`NoSpace` on a full disk) and changes nothing.
    fn create(
        storage: &Storage,
        path: &Path,
        slots: u32,
        entries_max: u32,
    ) -> Result<Self, ShardError> {
        let existed = path.exists();
        let made = Self::create_at(storage, path, slots, entries_max);
        if made.is_err() && !existed {
            storage::remove_half_made(path);
        }
        made
    }

    fn create_at(
        storage: &Storage,
        path: &Path,
        slots: u32,
        entries_max: u32,
    ) -> Result<Self, ShardError> {
        let len = Self::file_bytes(slots, entries_max);
        let doing = "creating an IndexFile";
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| ShardError::making_room(path, doing, e))?;
        file.set_len(len)?;
        let slot_end = HEADER_BYTES as u64 + slots as u64 * SLOT_BYTES as u64;
        let reserved = (slot_end + RESERVE_STEP_BYTES).min(len);
        storage::reserve_mapped(storage, path, 0, reserved)?;
        let map = storage.map(&file, None)?;
        // Slots are hit at random: a fault should bring in its page, not read ahead (on a
        // new file that zeroed 16 pages per fault, 4% of the core at 600K msg/s).
        let _ = map.advise(memmap2::Advice::Random);
        let mut f = IndexFile {
            map,
            path: path.to_owned(),
            slots,
            entries_max,
            reserved,
        };
        f.map[32..36].copy_from_slice(&(slots as i32).to_be_bytes());
        f.set_count(1); // entry 0 is the "none" of the chains
        Ok(f)
    }

    /// Maps an existing IndexFile as it is: nothing is stored into it here and nothing is
    /// reserved, so a restart on a full disk still serves its lookups.
    fn open(storage: &Storage, path: &Path) -> Result<Self, ShardError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let actual = file.metadata()?.len();
        if actual < HEADER_BYTES as u64 {
            return Err(ShardError::Corrupt {
                path: path.display().to_string(),
                reason: format!("index file of {actual} bytes"),
            });
        }
        let map = storage.map(&file, None)?;
        let _ = map.advise(memmap2::Advice::Random);
        // An existing file keeps the geometry it was made with, whatever the config says now.
        let slots = u32::try_from(rd_i32(&map, 32)).unwrap_or(0);
        let body = actual.saturating_sub(HEADER_BYTES as u64 + slots as u64 * 4);
        let entries_max = (body / ENTRY_BYTES as u64).min(i32::MAX as u64) as u32;
        if slots == 0 {
            return Err(ShardError::Corrupt {
                path: path.display().to_string(),
                reason: "index file has no hash slots".into(),
            });
        }
        Ok(IndexFile {
            map,
            path: path.to_owned(),
            slots,
            entries_max,
            reserved: 0,
        })
    }

    /// Reserves the blocks below `end` (and a step more) before anything is stored there.
    fn ensure_reserved(&mut self, storage: &Storage, end: u64) -> Result<(), ShardError> {
        if end <= self.reserved {
            return Ok(());
        }
        let len = self.map.len() as u64;
        let want = end.next_multiple_of(RESERVE_STEP_BYTES).min(len);
        storage::reserve_mapped(storage, &self.path, self.reserved, want)?;
        self.reserved = want;
        Ok(())
    }

    fn begin_ts(&self) -> i64 {
        rd_i64(&self.map, 0)
    }
    fn end_ts(&self) -> i64 {
        rd_i64(&self.map, 8)
    }
    fn begin_phys(&self) -> u64 {
        rd_i64(&self.map, 16) as u64
    }
    fn end_phys(&self) -> u64 {
        rd_i64(&self.map, 24) as u64
    }
    fn count(&self) -> u32 {
        (rd_i32(&self.map, 36).max(1) as u32).min(self.entries_max)
    }
    fn set_count(&mut self, c: u32) {
        self.map[36..40].copy_from_slice(&(c as i32).to_be_bytes());
    }
    fn is_full(&self) -> bool {
        self.count() >= self.entries_max
    }

    fn slot_at(&self, hash: i32) -> usize {
        HEADER_BYTES + (hash as u32 % self.slots) as usize * SLOT_BYTES
    }

    fn put(
        &mut self,
        storage: &Storage,
        hash: i32,
        phys: u64,
        ts_ms: i64,
    ) -> Result<(), ShardError> {
        let idx = self.count();
        debug_assert!(idx < self.entries_max);
        let at = HEADER_BYTES + self.slots as usize * SLOT_BYTES + idx as usize * ENTRY_BYTES;
        // Covers the header and every slot too (they come first in the file).
        self.ensure_reserved(storage, (at + ENTRY_BYTES) as u64)?;
        if idx == 1 {
            self.map[0..8].copy_from_slice(&ts_ms.to_be_bytes());
        }
        let slot = self.slot_at(hash);
        let prev = rd_i32(&self.map, slot);
        let prev = if prev > 0 && (prev as u32) < idx {
            prev
        } else {
            0
        };
        let diff_s = ((ts_ms - self.begin_ts()).max(0) / 1000).min(i32::MAX as i64) as i32;
        self.map[at..at + 4].copy_from_slice(&hash.to_be_bytes());
        self.map[at + 4..at + 12].copy_from_slice(&(phys as i64).to_be_bytes());
        self.map[at + 12..at + 16].copy_from_slice(&diff_s.to_be_bytes());
        self.map[at + 16..at + 20].copy_from_slice(&prev.to_be_bytes());
        self.map[slot..slot + 4].copy_from_slice(&(idx as i32).to_be_bytes());
        let end_ts = ts_ms.max(self.end_ts());
        self.map[8..16].copy_from_slice(&end_ts.to_be_bytes());
        self.set_count(idx + 1);
        Ok(())
    }

    fn set_end_phys(&mut self, storage: &Storage, end: u64) -> Result<(), ShardError> {
        self.ensure_reserved(storage, HEADER_BYTES as u64)?;
        self.map[24..32].copy_from_slice(&(end as i64).to_be_bytes());
        Ok(())
    }

    /// Candidate offsets for `hash` stored within [begin_ms, end_ms] (to the second).
    fn lookup(&self, hash: i32, begin_ms: i64, end_ms: i64, out: &mut Vec<u64>, max: usize) {
        let count = self.count();
        let mut idx = rd_i32(&self.map, self.slot_at(hash));
        let base = HEADER_BYTES + self.slots as usize * SLOT_BYTES;
        // Chains only point backwards; the step bound stops a garbled file from looping.
        let mut steps = 0;
        while idx > 0 && (idx as u32) < count && steps < count && out.len() < max {
            let at = base + idx as usize * ENTRY_BYTES;
            let h = rd_i32(&self.map, at);
            let phys = rd_i64(&self.map, at + 4) as u64;
            let ts = self.begin_ts() + rd_i32(&self.map, at + 12) as i64 * 1000;
            let prev = rd_i32(&self.map, at + 16);
            // Entry times are truncated to the second: widen the window by one second.
            if h == hash && ts >= begin_ms - 1000 && ts <= end_ms {
                out.push(phys);
            }
            if prev >= idx {
                break;
            }
            idx = prev;
            steps += 1;
        }
    }
}

/// The IndexFiles of one shard, oldest first.
pub(crate) struct IndexService {
    dir: PathBuf,
    slots: u32,
    entries_max: u32,
    files: Vec<IndexFile>,
    storage: Storage,
}

impl IndexService {
    pub(crate) fn open(
        dir: PathBuf,
        slots: u32,
        entries_max: u32,
        storage: Storage,
    ) -> Result<Self, ShardError> {
        std::fs::create_dir_all(&dir)?;
        let mut names: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let start = e.file_name().to_str().and_then(parse_offset_name)?;
                Some((start, e.path()))
            })
            .collect();
        names.sort();
        let mut files = Vec::new();
        for (_, path) in names {
            files.push(IndexFile::open(&storage, &path)?);
        }
        Ok(IndexService {
            dir,
            slots,
            entries_max,
            files,
            storage,
        })
    }

    /// End of the last record looked at: indexing resumes here after a restart.
    pub(crate) fn indexed_end(&self) -> u64 {
        self.files.last().map_or(0, |f| f.end_phys())
    }

    /// Forgets progress past `end` (the recovered log end); stale entries past it are
    /// harmless since every hit is verified against the record read back.
    pub(crate) fn clamp_indexed_end(&mut self, end: u64) -> Result<(), ShardError> {
        if let Some(f) = self.files.last_mut() {
            if f.end_phys() > end {
                f.set_end_phys(&self.storage, end)?;
            }
        }
        Ok(())
    }

    /// Indexes one record (every key of KEYS, and UNIQ_KEY) at `phys`.
    #[cfg(test)]
    pub(crate) fn add_record(
        &mut self,
        view: &message::RecordView<'_>,
        phys: u64,
    ) -> Result<(), ShardError> {
        let end = phys + view.len() as u64;
        let ts = view.store_timestamp_ms();
        self.add_keys(view.topic(), ts, &view.indexed_properties(), phys, end)
    }

    /// Indexes one record (every key of KEYS, and UNIQ_KEY) at `phys`, its properties
    /// already scanned. `[phys, end)` is the record, `ts` its store time.
    pub(crate) fn add_keys(
        &mut self,
        topic: &str,
        ts: i64,
        props: &message::IndexedProperties<'_>,
        phys: u64,
        end: u64,
    ) -> Result<(), ShardError> {
        for key in props.index_keys() {
            if self.files.last().is_none_or(|f| f.is_full()) {
                let path = self.dir.join(offset_name(phys));
                let mut f = IndexFile::create(&self.storage, &path, self.slots, self.entries_max)?;
                f.map[16..24].copy_from_slice(&(phys as i64).to_be_bytes());
                self.files.push(f);
            }
            let Some(f) = self.files.last_mut() else {
                unreachable!("pushed above");
            };
            f.put(&self.storage, topic_key_hash(topic, key), phys, ts)?;
        }
        if let Some(f) = self.files.last_mut() {
            f.set_end_phys(&self.storage, end)?;
        }
        Ok(())
    }

    /// Candidate commit-log offsets for `topic#key`, newest first, deduplicated.
    pub(crate) fn lookup(
        &self,
        topic: &str,
        key: &str,
        begin_ms: i64,
        end_ms: i64,
        max: usize,
    ) -> Vec<u64> {
        let hash = topic_key_hash(topic, key);
        let mut out = Vec::new();
        for f in self.files.iter().rev() {
            if f.count() <= 1 || f.end_ts() < begin_ms - 1000 || f.begin_ts() > end_ms {
                continue;
            }
            f.lookup(
                hash,
                begin_ms,
                end_ms,
                &mut out,
                max.saturating_mul(4).max(64),
            );
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|o| seen.insert(*o));
        out
    }

    /// Gives up the index files whose every entry points below `log_min` (the caller
    /// deletes them, off the core).
    pub(crate) fn trim_below(&mut self, log_min: u64) -> Vec<Doomed> {
        let mut doomed = Vec::new();
        while self.files.len() > 1 && self.files[0].end_phys() <= log_min {
            let f = self.files.remove(0);
            doomed.push(Doomed {
                path: f.path,
                map: Some(f.map),
                truncate: true,
            });
        }
        doomed
    }

    pub(crate) fn flush(&self) -> Result<(), ShardError> {
        for f in &self.files {
            self.storage.msync(&f.map)?;
        }
        Ok(())
    }

    #[cfg(test)]
    fn file_count(&self) -> usize {
        self.files.len()
    }

    #[allow(dead_code)]
    pub(crate) fn begin_phys(&self) -> Option<u64> {
        self.files.first().map(|f| f.begin_phys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use message::{encode_record, stamp_record, MessageFields, RecordView, StoreStamp};

    fn record(key: &str, phys: u64, ts: i64) -> Vec<u8> {
        let props = [("KEYS", key)];
        let mut out = Vec::new();
        encode_record(
            &MessageFields {
                topic: "T",
                body: b"x",
                properties: &props,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
        stamp_record(
            &mut out,
            &StoreStamp {
                queue_id: 0,
                queue_offset: 0,
                physical_offset: phys,
                store_timestamp_ms: ts,
                store_host: "127.0.0.1:1".parse().unwrap(),
            },
        )
        .unwrap();
        out
    }

    #[test]
    fn topic_key_hash_is_the_hash_of_the_joined_string() {
        for (t, k) in [
            ("T", "k1"),
            ("TopicTest", ""),
            ("é主题", "ключ 🙂"),
            ("", ""),
        ] {
            assert_eq!(
                topic_key_hash(t, k),
                key_hash(&format!("{t}#{k}")),
                "{t} {k}"
            );
        }
    }

    #[test]
    fn keys_are_found_across_files_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut idx =
                IndexService::open(dir.path().to_owned(), 7, 4, Storage::unchecked()).unwrap();
            for i in 0..10u64 {
                let key = format!("k{}", i % 3);
                let rec = record(&key, i * 1000, 1_000_000 + i as i64 * 1000);
                idx.add_record(&RecordView::parse(&rec).unwrap(), i * 1000)
                    .unwrap();
            }
            assert!(idx.file_count() >= 3);
            assert_eq!(idx.indexed_end(), 9000 + record("k0", 0, 0).len() as u64);
            idx.flush().unwrap();
        }
        let idx = IndexService::open(dir.path().to_owned(), 7, 4, Storage::unchecked()).unwrap();
        let mut hits = idx.lookup("T", "k1", 0, i64::MAX / 2, 10);
        hits.sort();
        assert_eq!(hits, vec![1000, 4000, 7000]);
        // Time window narrows the candidates.
        assert_eq!(idx.lookup("T", "k1", 1_006_500, 1_007_000, 10), vec![7000]);
        assert!(idx.lookup("T", "nope", 0, i64::MAX / 2, 10).is_empty());
    }
}
