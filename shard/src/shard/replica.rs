//! Replication's two ends on one shard: a master reads its log as runs of whole units
//! (records, fillers, the end of a segment) to stream them, and a slave places what it
//! receives at exactly the same offsets, checking each record as recovery would and
//! deriving its ConsumeQueue and IndexFile entries in the same step (so a slave is always
//! ready to be promoted). The network and the roles are the broker's.

use std::time::{Duration, Instant};

use message::{RecordView, BLANK_MAGIC_CODE, BLANK_RECORD_MIN_BYTES, FIXED_BYTES, MAGIC_CODE};

use crate::commit_log::{blank_at, Blank, RunAt};
use crate::derived::{derive, queue_of, Derive, StoredRecord};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::slice::StoredSlice;
use crate::storage::{align_down, align_up};
use crate::{FlushPolicy, ShardError};

use super::Shard;

/// Bytes of the log from `start` for a replica: whole units only, inside one segment; in
/// the log's own memory where it still holds them (a sealed chunk or one read), so sending
/// them copies nothing more.
#[derive(Clone)]
pub struct LogRun {
    pub start: u64,
    /// The offset after the run: `start + bytes.len()`, or the next segment's start when
    /// the run ends with the segment's end marker (whose filler is not sent).
    pub next: u64,
    pub bytes: StoredSlice,
    /// `[start, next)` lies in a quarantined range (recovery found no valid record there,
    /// or a read found this record failing its check): `bytes` is empty, nothing in it is
    /// a record, and a reader steps over it to `next`, as a pull steps over its entries.
    pub quarantined: bool,
}

/// The whole units at the front of `bytes`, which hold the log from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Units {
    /// Bytes of whole units, an end-of-segment marker's 8 bytes included.
    pub(crate) len: usize,
    /// The offset after them.
    pub(crate) next: u64,
    /// The run ends with the segment's end marker.
    pub(crate) ends_segment: bool,
}

/// Walks the units (records and fillers) of log bytes at `start` in the segment ending at
/// `seg_end`, stopping at the first one not wholly in `bytes`. Checks only structure:
/// sizes and magic codes. An error names the offset with neither a record nor a filler.
pub(crate) fn whole_units(
    bytes: &[u8],
    start: u64,
    seg_end: u64,
    record_max: usize,
) -> Result<Units, String> {
    let mut pos = 0usize;
    loop {
        let at = start + pos as u64;
        let rest = &bytes[pos..];
        if at >= seg_end || rest.len() < BLANK_RECORD_MIN_BYTES {
            break;
        }
        let total = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let magic = i32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if magic == BLANK_MAGIC_CODE {
            match blank_at(total, at, seg_end) {
                Some(Blank::SegmentEnd) => {
                    return Ok(Units {
                        len: pos + BLANK_RECORD_MIN_BYTES,
                        next: seg_end,
                        ends_segment: true,
                    })
                }
                Some(Blank::Filler(end)) => {
                    let n = (end - at) as usize;
                    if n > rest.len() {
                        break;
                    }
                    pos += n;
                }
                None => return Err(format!("a filler of {total} bytes at offset {at} does not end on a block or at the segment end")),
            }
            continue;
        }
        if magic != MAGIC_CODE
            || total < FIXED_BYTES as i32
            || total as usize > record_max
            || at + total as u64 > seg_end
        {
            return Err(format!(
                "no record or filler at commit-log offset {at} (size {total}, magic {magic:#x})"
            ));
        }
        if total as usize > rest.len() {
            break;
        }
        pos += total as usize;
    }
    Ok(Units {
        len: pos,
        next: start + pos as u64,
        ends_segment: false,
    })
}

impl Shard {
    /// The log's first offset and its write offset: what a replica may be sent.
    pub fn log_bounds(&self) -> (u64, u64) {
        let log = self.inner.log.borrow();
        (log.min_offset, log.write_offset)
    }

    /// The shard's directory (replication keeps its epoch history there).
    pub fn dir(&self) -> &std::path::Path {
        &self.inner.config.dir
    }

    /// The clock the shard stamps and ages its records by (a master times its slaves by it).
    pub fn clock(&self) -> &crate::Clock {
        &self.inner.config.clock
    }

    /// The segment size: replicas must have the same, for offsets to match.
    pub fn segment_bytes(&self) -> u64 {
        self.inner.config.segment_bytes
    }

    /// Up to about `max_bytes` of the log from `from` (a unit boundary) as whole units, for
    /// a replica or any other reader that walks the log by physical offset (the timer);
    /// `None` when `from` is the write offset. From memory where the log still holds it,
    /// else one read of the segment file. A unit bigger than `max_bytes` comes whole,
    /// alone.
    ///
    /// Quarantined bytes never come in a run: a run ends where a quarantined range starts,
    /// and a read from inside one returns it as a run marked `quarantined` (no bytes) whose
    /// `next` is the range's end. This is the one way every log walker steps over damage;
    /// each range is logged once, at the first walk over it.
    pub async fn read_log(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<LogRun>, ShardError> {
        let (min, write, seg_end) = {
            let log = self.inner.log.borrow();
            (
                log.min_offset,
                log.write_offset,
                log.segment_start(from) + log.segment_bytes,
            )
        };
        if from >= write {
            return Ok(None);
        }
        if from < min {
            return Err(ShardError::Replica(format!(
                "offset {from} is below the log's first offset {min}: its segment was deleted"
            )));
        }
        let record_max = self.inner.record_bytes_max.get();
        let mut want = max_bytes.max(BLANK_RECORD_MIN_BYTES);
        let damaged = self.inner.quarantine.borrow().next_after(from);
        if let Some((start, end)) = damaged {
            if start <= from {
                if self.inner.quarantine.borrow_mut().walk_over(start) {
                    tracing::warn!(
                        shard_dir = %self.inner.config.dir.display(),
                        "a reader of the log by offset (timer or replication) steps over the quarantined CommitLog range [{start}, {end}): it holds no record to read"
                    );
                }
                return Ok(Some(LogRun {
                    start: from,
                    next: end,
                    bytes: StoredSlice::owned(bytes::Bytes::new()),
                    quarantined: true,
                }));
            }
        }
        // The run stops where the next quarantined range starts: a damaged record is never
        // handed out, and the record before it ends exactly there.
        let stop = damaged.map_or(usize::MAX, |(start, _)| (start - from) as usize);
        for _ in 0..2 {
            want = want.min(stop);
            let run = self.inner.log.borrow().run_at(from, want);
            let slice = match run {
                RunAt::Gone => return Ok(None),
                RunAt::Memory(s) => s,
                RunAt::Disk(file, len) => {
                    let a = align_down(from);
                    let b = align_up(from + len as u64);
                    self.count_disk_read((b - a) as usize);
                    let r = file.read_aligned(a, (b - a) as usize).await?;
                    let at = (from - a) as usize;
                    let len = len.min(r.as_bytes().len().saturating_sub(at));
                    match StoredSlice::from_read(&r, at, len) {
                        Some(s) if len > 0 => s,
                        _ => return Ok(None),
                    }
                }
            };
            let bytes = slice.as_bytes();
            let units = whole_units(bytes, from, seg_end, record_max.max(FIXED_BYTES))
                .map_err(ShardError::Replica)?;
            if units.len > 0 {
                return Ok(Some(LogRun {
                    start: from,
                    next: units.next,
                    bytes: slice.prefix(units.len),
                    quarantined: false,
                }));
            }
            // The first unit is bigger than asked for: ask for it whole.
            if bytes.len() >= 4 {
                let total = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                want = (total.max(0) as usize).max(want);
            }
        }
        Ok(None)
    }

    /// A slave's append: `bytes` are whole units of the master's log from `start`, which
    /// must be this log's write offset. Every record is checked (structure, CRC, the offset
    /// it says it is stored at) before anything changes; each gets its ConsumeQueue entry
    /// at the queue offset stamped in it, and its IndexFile keys. Returns the new write
    /// offset. Back-pressure and refusals (disk full, poisoned) are those of an append.
    pub async fn replicate(&self, start: u64, bytes: &[u8]) -> Result<u64, ShardError> {
        let inner = &self.inner;
        self.check_writable()?;
        let (write, seg_end) = {
            let log = inner.log.borrow();
            (
                log.write_offset,
                log.segment_start(start) + log.segment_bytes,
            )
        };
        if start != write {
            return Err(ShardError::Replica(format!(
                "received bytes for offset {start}, but the log ends at {write}"
            )));
        }
        // A record is as large as the master took it: its limit may be above this slave's
        // (raised there while running), so only the segment bounds a record here, and each
        // one is checked whole below (structure, CRC, offset), as RocketMQ's slaves take
        // whatever their master stored.
        let units = whole_units(bytes, start, seg_end, (seg_end - start) as usize)
            .map_err(ShardError::Replica)?;
        if units.len != bytes.len() {
            return Err(ShardError::Replica(format!(
                "received {} bytes at offset {start} that end inside a record",
                bytes.len()
            )));
        }
        let limit = message::ids::LOCAL_OFFSET_MAX;
        if units.next > limit {
            return Err(ShardError::OffsetSpaceExhausted {
                offset: start,
                max: limit,
            });
        }
        let run_len = if units.ends_segment {
            bytes.len() - BLANK_RECORD_MIN_BYTES
        } else {
            bytes.len()
        };
        let mut views = Vec::new();
        let mut pos = 0usize;
        while pos < run_len {
            let rest = &bytes[pos..run_len];
            let total = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let magic = i32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
            if magic == MAGIC_CODE {
                let at = start + pos as u64;
                let v = RecordView::parse(&rest[..total])?;
                v.verify_crc()?;
                if v.len() != total || v.physical_offset() != at {
                    return Err(ShardError::Replica(format!(
                        "the record at offset {at} says it is stored at {}",
                        v.physical_offset()
                    )));
                }
                views.push((at, v));
            }
            pos += total;
        }
        let largest = views.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        self.wait_for_room(bytes.len(), Instant::now()).await?;
        {
            // The write offset cannot have moved: only this task appends to a slave, and
            // the wait above does not append.
            let mut log = inner.log.borrow_mut();
            if log.write_offset != start {
                return Err(ShardError::Replica(format!(
                    "the log moved to {} while offset {start} was being received",
                    log.write_offset
                )));
            }
            let mut cqs = inner.cqs.borrow_mut();
            let mut index = inner.index.borrow_mut();
            // Entries first (they may fail for lack of space), then the bytes (which
            // cannot): a failure undoes the entries and the log does not move.
            let mut touched: Vec<((String, u32), QueueOffset)> = Vec::new();
            let mut result = Ok(());
            for (at, v) in &views {
                let props = v.indexed_properties();
                let (topic, queue_id, held) = queue_of(v, &props);
                let cq = cqs.get_or_create(topic, queue_id);
                let key = (topic.to_owned(), queue_id);
                if !touched.iter().any(|(k, _)| *k == key) {
                    touched.push((key, cq.max));
                }
                let rec = StoredRecord {
                    topic: v.topic(),
                    queue_offset: QueueOffset(v.queue_offset()),
                    commit_log_offset: CommitLogOffset(*at),
                    len: v.len() as u32,
                    store_timestamp_ms: v.store_timestamp_ms(),
                    props: &props,
                    held,
                };
                if let Err(e) = derive(cq, &mut index, &rec, Derive::Append) {
                    result = Err(e);
                    break;
                }
            }
            if let Err(e) = result {
                for ((topic, queue_id), max) in touched {
                    let cq = cqs.get_or_create(&topic, queue_id);
                    if let Err(undo) = cq.truncate(max) {
                        tracing::warn!(topic, queue_id, error = %undo, "cannot clear the ConsumeQueue entries of a failed replica append");
                    }
                }
                return Err(e);
            }
            let sealed = log.place(&bytes[..run_len], units.ends_segment);
            debug_assert_eq!(log.write_offset, units.next);
            if sealed || matches!(inner.config.flush, FlushPolicy::Sync) {
                inner.signals.flush_wake.notify_all();
            }
        }
        // Read whole from now on, by offset and by this slave's own replication reads.
        inner
            .record_bytes_max
            .set(inner.record_bytes_max.get().max(largest));
        inner.appends.set(inner.appends.get() + 1);
        inner
            .appended_bytes
            .set(inner.appended_bytes.get() + bytes.len() as u64);
        inner.signals.new_message.notify_all();
        if let FlushPolicy::Async { .. } = inner.config.flush {
            if inner.log.borrow().dirty_bytes() >= inner.limits.get().flush_dirty_bytes_max {
                inner.signals.flush_wake.notify_all();
            }
        }
        Ok(units.next)
    }

    /// A slave's log that holds what its master never had (it was a master whose last
    /// writes never reached the one elected after it) is cut back to `end`, the last offset
    /// both agree on. Crash-safe and nothing destroyed:
    ///
    /// 1. everything appended is written and fdatasynced;
    /// 2. the bytes past `end` are copied to `keep_dir/<end>-<old end>` and fdatasynced
    ///    (for an operator: under ASYNC_MASTER these are writes no one else has);
    /// 3. the segments after `end`'s are deleted and its own is zeroed past `end` and
    ///    fdatasynced, as recovery does to a torn tail, so no stale record can ever pass for
    ///    a continuation; the tail ring forgets them too;
    /// 4. the ConsumeQueue entries past `end` go, and the IndexFile resumes at `end`.
    ///
    /// A crash anywhere leaves either the old log (the caller's next handshake cuts it
    /// again) or the cut one. Returns how many bytes were cut. Nothing may append while it
    /// runs (a slave's stream is not running during its handshake).
    pub async fn truncate_to(
        &self,
        end: u64,
        keep_dir: &std::path::Path,
    ) -> Result<u64, ShardError> {
        let inner = &self.inner;
        if inner.closed.get() {
            return Err(ShardError::Closed);
        }
        self.check_poisoned()?;
        self.flush(true).await?;
        let (min, old_end) = self.log_bounds();
        if end >= old_end {
            return Ok(0);
        }
        if end < min {
            return Err(ShardError::Replica(format!(
                "cannot cut the log at {end}: it starts at {min}"
            )));
        }
        let _writing = inner.flush_lock.acquire_permit(1).await;
        // 2. Kept aside first, complete and durable, before anything is removed.
        std::fs::create_dir_all(keep_dir)?;
        let kept = keep_dir.join(format!("{end:020}-{old_end:020}"));
        {
            use std::io::Write;
            let mut out = std::fs::File::create(&kept)?;
            let mut at = end;
            while at < old_end {
                let (seg, path) = {
                    let log = inner.log.borrow();
                    let seg = log.segment_start(at);
                    (seg, log.segment_path(seg))
                };
                let to = (seg + inner.config.segment_bytes).min(old_end);
                let f = std::fs::File::open(&path)?;
                let mut buf = vec![0u8; (to - at) as usize];
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, at - seg)?;
                out.write_all(&buf)?;
                at = to;
            }
            out.sync_all()?;
        }
        if let Ok(d) = std::fs::File::open(keep_dir) {
            d.sync_all()?;
        }
        // 3. The files, then memory.
        let later: Vec<(u64, std::path::PathBuf)> = {
            let mut log = inner.log.borrow_mut();
            let seg = log.segment_start(end);
            let later: Vec<u64> = log.segments.range(seg + 1..).map(|(&s, _)| s).collect();
            later
                .into_iter()
                .map(|s| {
                    log.segments.remove(&s);
                    (s, log.segment_path(s))
                })
                .collect()
        };
        for (_, path) in &later {
            std::fs::remove_file(path)?;
        }
        let (file, seg_end) = {
            let log = inner.log.borrow();
            let seg = log.segment_start(end);
            (log.segments.get(&seg).cloned(), seg + log.segment_bytes)
        };
        let partial = crate::commit_log::clean_past(file, seg_end, end).await?;
        inner.log.borrow_mut().truncate_memory(end, &partial);
        inner.readahead.borrow_mut().forget(0, end);
        inner.quarantine.borrow_mut().forget_from(end);
        // 4. Derived entries.
        {
            let mut cqs = inner.cqs.borrow_mut();
            for cq in cqs.queues.values_mut() {
                while cq.max > cq.min {
                    let last = QueueOffset(cq.max.0 - 1);
                    match cq.get(last)? {
                        Some(e) if e.end() <= end => break,
                        _ => cq.truncate(last)?,
                    }
                }
            }
            cqs.flush()?;
        }
        {
            let mut index = inner.index.borrow_mut();
            index.clamp_indexed_end(end)?;
            index.flush()?;
        }
        tracing::warn!(
            shard = inner.config.shard_id,
            from = end,
            to = old_end,
            kept = %kept.display(),
            "cut the log back to where it agrees with the master; the bytes cut are kept aside"
        );
        Ok(old_end - end)
    }

    /// Moves an empty log's start to `offset`, a segment start: a slave joining a master
    /// whose older segments are deleted begins where the master's log begins.
    pub fn start_log_at(&self, offset: u64) -> Result<(), ShardError> {
        let inner = &self.inner;
        let mut log = inner.log.borrow_mut();
        if log.write_offset != log.min_offset || !inner.cqs.borrow().queues.is_empty() {
            return Err(ShardError::Replica(format!(
                "the log is not empty (it holds {}..{}): it cannot start at {offset}",
                log.min_offset, log.write_offset
            )));
        }
        if !offset.is_multiple_of(log.segment_bytes) {
            return Err(ShardError::Replica(format!(
                "offset {offset} is not a segment start"
            )));
        }
        log.start_at(offset);
        Ok(())
    }

    /// The end of what this shard's replicas confirm: readers are served up to it at most
    /// (`u64::MAX`: no cap). Raising it wakes long polls.
    pub fn set_read_cap(&self, cap: u64) {
        let old = self.inner.read_cap.replace(cap);
        if cap > old {
            self.inner.signals.new_message.notify_all();
        }
    }

    /// What a crash of this process cannot take away (the flush policy's acknowledged
    /// end), uncapped: a slave acknowledges this much to its master.
    pub fn safe_end(&self) -> u64 {
        let log = self.inner.log.borrow();
        match self.inner.config.flush {
            FlushPolicy::Sync => log.durable_offset,
            FlushPolicy::Async { .. } => log.write_offset,
        }
    }

    /// Waits until the write offset passes `offset` or `timeout` passes: a replication
    /// sender waits here for new bytes. True if it passed.
    pub async fn wait_appended_past(&self, offset: u64, timeout: Duration) -> bool {
        self.wait_appended_until(timeout, || self.inner.log.borrow().write_offset > offset)
            .await
    }

    /// Waits until [`Shard::safe_end`] passes `offset` or `timeout` passes: a slave waits
    /// here to acknowledge what its flush made safe. True if it passed.
    pub async fn wait_safe_past(&self, offset: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.safe_end() > offset {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.inner.closed.get() {
                return false;
            }
            // Durability moves with the flusher's progress, an async log's end with its
            // appends.
            let progress = self.inner.signals.progress.wait();
            let appended = self.inner.signals.new_message.wait();
            if matches!(self.inner.config.flush, FlushPolicy::Sync) {
                self.inner.signals.flush_wake.notify_all();
            }
            futures_lite::future::or(futures_lite::future::or(progress, appended), async {
                glommio::timer::sleep(deadline - now).await;
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank(total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total];
        message::write_blank(&mut b);
        b
    }

    #[test]
    fn a_run_ending_the_segment_stops_at_its_marker() {
        let seg_end = 64 << 10;
        let start = seg_end - 4096;
        let mut bytes = blank(8);
        bytes[0..4].copy_from_slice(&4096i32.to_be_bytes());
        bytes.extend_from_slice(&[9, 9, 9]);
        let u = whole_units(&bytes, start, seg_end, 1 << 20).unwrap();
        assert_eq!(
            u,
            Units {
                len: 8,
                next: seg_end,
                ends_segment: true
            }
        );
    }

    #[test]
    fn a_filler_counts_whole_or_not_at_all() {
        let start = 4096 + 4000;
        let f = blank(96);
        let u = whole_units(&f, start, 1 << 20, 1 << 20).unwrap();
        assert_eq!(u.len, 96);
        assert_eq!(u.next, 8192);
        let u = whole_units(&f[..50], start, 1 << 20, 1 << 20).unwrap();
        assert_eq!(u.len, 0);
    }

    #[test]
    fn garbage_is_an_error_naming_the_offset() {
        let e = whole_units(&[7u8; 64], 128, 1 << 20, 1 << 20).unwrap_err();
        assert!(e.contains("offset 128"), "{e}");
    }
}
