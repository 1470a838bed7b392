//! The read path: a pull picks ConsumeQueue entries (tag filter, quarantine skips), fetches
//! their records from the in-memory tail or the segment files (cold reads grouped, read
//! ahead for catching-up consumers), and checks each record before it is served. Lookups by
//! commit-log offset, key and time, and the long-poll wait, live here too.

use std::rc::Rc;
use std::time::{Duration, Instant};

use message::{RecordView, TagFilter};

use crate::commit_log::Located;
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::quarantine::QuarantinedRange;
use crate::readahead::{Misses, Slot, SlotWait};
use crate::slice::StoredSlice;
use crate::storage::{align_down, align_up, ReadBytes, SegmentFile};
use crate::ShardError;

/// Longest span one cold read covers when it gathers several records.
const COLD_READ_SPAN_MAX_BYTES: u64 = 1 << 20;
/// Most bytes nobody asked for that one cold read reads through to join two records. Queues
/// interleave in the log. Reading through a gap this small takes the disk less time than a
/// read of its own, and the bytes read through serve the other queues' pulls (reads are
/// shared, see [`crate::readahead`]): sixteen queues sent to in turn at 1 KiB a message lie
/// about 18 KiB apart. Reading through whole batches of other queues multiplied a consumer
/// of one queue's disk traffic by the number of queues.
const COLD_READ_GAP_MAX_BYTES: u64 = 32 << 10;
/// ConsumeQueue entries a filtered read looks at, at most (RocketMQ's maxFilterMessageCount).
const FILTER_SCAN_ENTRIES_MAX: u64 = 16_000;

use super::{QueueOffsets, ReadRequest, ReadResult, ReadStatus, Shard};

impl Shard {
    pub(super) fn count_disk_read(&self, len: usize) {
        let inner = &self.inner;
        inner.disk_reads.set(inner.disk_reads.get() + 1);
        inner
            .disk_read_bytes
            .set(inner.disk_read_bytes.get() + len as u64);
    }

    fn fetch_plan(&self, spans: &[(u64, usize)]) -> Vec<Located> {
        self.inner.log.borrow().locate_all(spans)
    }

    /// Reads whole records at the given (offset, size) spans, each checked on the way out:
    /// `Gone` where a span is gone, `Bad` where its bytes fail the check (never served).
    /// Nearby cold records share one aligned read; the reads are all issued before the
    /// first is awaited, so they are in flight together.
    async fn fetch(&self, spans: &[(u64, usize)]) -> Result<Vec<Fetched>, ShardError> {
        self.fetch_then(spans, Vec::new).await
    }

    /// [`Shard::fetch`]; when it reads from the segment files, it also starts reading the
    /// spans `ahead` gives (the window a consumer will ask for next), once its own reads
    /// are issued. A record that a read already made or under way covers (read ahead, or
    /// read for another queue's pull) is taken from that read.
    async fn fetch_then(
        &self,
        spans: &[(u64, usize)],
        ahead: impl FnOnce() -> Vec<(u64, usize)>,
    ) -> Result<Vec<Fetched>, ShardError> {
        let plan = self.fetch_plan(spans);
        // The read that serves each record on disk, and the files of those no read covers.
        let mut served: Vec<Option<(u64, Rc<Slot>)>> = vec![None; spans.len()];
        let mut uncovered: Vec<Option<Rc<SegmentFile>>> = vec![None; spans.len()];
        let mut cold = false;
        {
            let mut reads = self.inner.readahead.borrow_mut();
            let mut misses = Misses::default();
            for (i, p) in plan.iter().enumerate() {
                if let Located::Disk(f) = p {
                    cold = true;
                    let (o, l) = spans[i];
                    match reads.find_next(&mut misses, f, o, l as u64, true) {
                        Some(hit) => served[i] = Some(hit),
                        None => uncovered[i] = Some(f.clone()),
                    }
                }
            }
        }
        if cold {
            self.start_cold_reads(spans, &uncovered, false, |i, hit| served[i] = Some(hit));
            self.read_ahead(&ahead());
        }
        let mut out: Vec<Fetched> = Vec::with_capacity(spans.len());
        // The read the previous record came from: its neighbours are usually in it too.
        let mut current: Option<(Rc<Slot>, u64, ReadBytes)> = None;
        for (i, p) in plan.iter().enumerate() {
            let (o, l) = spans[i];
            match p {
                Located::Gone => out.push(Fetched::Gone),
                Located::Memory(s) => out.push(match check_record(s.as_bytes(), o) {
                    Ok(()) => Fetched::Record(s.clone()),
                    Err(reason) => Fetched::Bad {
                        segment: None,
                        reason,
                    },
                }),
                Located::Disk(file) => {
                    let Some((base, slot)) = served[i].take() else {
                        return Err(ShardError::Corrupt {
                            path: file.path.display().to_string(),
                            reason: "read plan out of step".into(),
                        });
                    };
                    let (base, r) = match &current {
                        Some((s, b, r)) if Rc::ptr_eq(s, &slot) => (*b, r.clone()),
                        _ => match SlotWait(slot.clone()).await {
                            Some(r) => {
                                current = Some((slot, base, r.clone()));
                                (base, r)
                            }
                            None => {
                                // The read failed: read this record again, and report its error.
                                let from = align_down(o);
                                let len = (align_up(o + l as u64) - from) as usize;
                                self.count_disk_read(len);
                                (from, file.read_aligned(from, len).await?)
                            }
                        },
                    };
                    // A file shorter than the record (cut outside the broker) is damage
                    // like any other: that record is stepped over, not the whole pull
                    // failed, or the queue would stall on it.
                    let checked = StoredSlice::from_read(&r, (o - base) as usize, l)
                        .ok_or_else(|| "the segment file ends inside the record".to_owned())
                        .and_then(|s| check_record(s.as_bytes(), o).map(|()| s));
                    out.push(match checked {
                        Ok(s) => Fetched::Record(s),
                        Err(reason) => Fetched::Bad {
                            segment: Some(file.path.clone()),
                            reason,
                        },
                    });
                }
            }
        }
        Ok(out)
    }

    /// Starts the reads of the spans whose `files[i]` is `Some` (grouped: nearby records of
    /// one file share a read) and hands each such span's read to `served`.
    fn start_cold_reads(
        &self,
        spans: &[(u64, usize)],
        files: &[Option<Rc<SegmentFile>>],
        ahead: bool,
        mut served: impl FnMut(usize, (u64, Rc<Slot>)),
    ) {
        let written = self.inner.log.borrow().written_offset;
        for c in group_cold_reads(spans, files) {
            self.count_disk_read(c.len as usize);
            let slot = self
                .inner
                .readahead
                .borrow_mut()
                .start(c.file, c.from, c.len, written, ahead);
            for i in c.first..=c.last {
                served(i, (c.from, slot.clone()));
            }
        }
    }

    /// Starts reading the spans of `spans` that only the segment files hold and no read
    /// covers yet.
    fn read_ahead(&self, spans: &[(u64, usize)]) {
        if spans.is_empty() {
            return;
        }
        let files: Vec<Option<Rc<SegmentFile>>> = {
            let log = self.inner.log.borrow();
            let mut reads = self.inner.readahead.borrow_mut();
            let mut misses = Misses::default();
            spans
                .iter()
                .map(|&(o, l)| {
                    let f = log.disk_file(o, l)?;
                    let hit = reads.find_next(&mut misses, &f, o, l as u64, false);
                    hit.is_none().then_some(f)
                })
                .collect()
        };
        self.start_cold_reads(spans, &files, true, |_, _| {});
    }

    /// The (offset, size) spans of the records `req` reads from queue offset `from` (below
    /// `max`), the queue offset after the last one looked at, and the entries stepped over
    /// (quarantined, or missing); `None` without the queue.
    fn pick(
        &self,
        req: &ReadRequest<'_>,
        from: u64,
        max: u64,
    ) -> Result<Option<Picked>, ShardError> {
        let mut picked: Vec<(u64, usize)> = Vec::new();
        let mut skipped: Vec<Skip> = Vec::new();
        let mut next = from;
        let cqs = self.inner.cqs.borrow();
        let quarantine = self.inner.quarantine.borrow();
        let log_min = self.inner.log.borrow().min_offset;
        let Some(cq) = cqs.get(req.topic, req.queue_id) else {
            return Ok(None);
        };
        let mut bytes = 0u64;
        let scan_end = max.min(next + FILTER_SCAN_ENTRIES_MAX.max(req.max_messages as u64));
        while next < scan_end && picked.len() < req.max_messages as usize {
            let Some(e) = cq.get(QueueOffset(next))? else {
                // Below the queue's max, so a hole: the entry of a record recovery could
                // not read (damaged, and its ConsumeQueue entry lost too). Stepping over it
                // is the only way on; stopping here would stall the queue for good.
                skipped.push(Skip {
                    queue_offset: next,
                    span: None,
                });
                next += 1;
                continue;
            };
            if e.offset.0 < log_min {
                next += 1;
                continue;
            }
            if let Some(range) = quarantine.blocking(e.offset.0, e.size as u64) {
                skipped.push(Skip {
                    queue_offset: next,
                    span: Some(((e.offset.0, e.size as usize), range)),
                });
                next += 1;
                continue;
            }
            if !req.filter.matches_code(e.tag_hash) {
                next += 1;
                continue;
            }
            if !picked.is_empty() && bytes + e.size as u64 > req.max_bytes as u64 {
                break;
            }
            bytes += e.size as u64;
            picked.push((e.offset.0, e.size as usize));
            next += 1;
        }
        Ok(Some(Picked {
            spans: picked,
            next,
            skipped,
        }))
    }

    /// Counts the entries a read stepped over, and logs each quarantined range (and each
    /// missing entry) the first time a reader meets it: never once per pull.
    fn report_skips(&self, req: &ReadRequest<'_>, skipped: &[Skip]) {
        let mut quarantine = self.inner.quarantine.borrow_mut();
        for s in skipped {
            quarantine.note_skipped(req.topic, req.queue_id, s.queue_offset);
            match s.span {
                Some(((offset, size), (start, end))) => {
                    if quarantine.step_over(start) {
                        tracing::error!(
                            shard = self.inner.config.shard_id,
                            topic = req.topic,
                            queue = req.queue_id,
                            queue_offset = s.queue_offset,
                            commit_log_offset = offset,
                            size,
                            range_start = start,
                            range_end = end,
                            "a read steps over a record in the quarantined CommitLog range [{start}, {end}): it is not served, the queue goes on after it"
                        );
                    }
                }
                None => {
                    if quarantine.step_over_hole(req.topic, req.queue_id, s.queue_offset) {
                        tracing::error!(
                            shard = self.inner.config.shard_id,
                            topic = req.topic,
                            queue = req.queue_id,
                            queue_offset = s.queue_offset,
                            "a read steps over a queue offset with no ConsumeQueue entry (its record was lost to damage); the queue goes on after it"
                        );
                    }
                }
            }
        }
    }

    /// Quarantines the span of a record that failed its check on the way out, logging it
    /// once; later reads step over it without reading it again.
    fn quarantine_bad_read(
        &self,
        req: &ReadRequest<'_>,
        queue_offset: u64,
        span: (u64, usize),
        segment: Option<std::path::PathBuf>,
        reason: &str,
    ) {
        let mut quarantine = self.inner.quarantine.borrow_mut();
        let path = segment.unwrap_or_else(|| {
            let log = self.inner.log.borrow();
            log.segment_path(log.segment_start(span.0))
        });
        if quarantine.add_span(span.0, span.1 as u64, path.clone()) {
            tracing::error!(
                shard = self.inner.config.shard_id,
                segment = %path.display(),
                topic = req.topic,
                queue = req.queue_id,
                queue_offset,
                commit_log_offset = span.0,
                size = span.1,
                reason,
                "a record failed its check on read ({reason}) in {}: quarantined, never served; the queue goes on after it",
                path.display()
            );
        }
        quarantine.skipped_records += 1;
        quarantine.note_skipped(req.topic, req.queue_id, queue_offset);
    }

    /// How many distinct queue offsets of a queue reads have stepped over since open
    /// (damaged or missing records): none of them was delivered to any consumer.
    pub fn skipped_in_queue(&self, topic: &str, queue_id: u32) -> u64 {
        self.inner
            .quarantine
            .borrow()
            .skipped_in_queue(topic, queue_id)
    }

    /// Every quarantined range and span, in log order: where they are, for operators and
    /// tests.
    pub fn quarantined(&self) -> Vec<QuarantinedRange> {
        self.inner.quarantine.borrow().list()
    }

    pub async fn read(&self, req: &ReadRequest<'_>) -> Result<ReadResult, ShardError> {
        let QueueOffsets { min, max } = self.queue_offsets(req.topic, req.queue_id);
        // Entries not yet safe (sync flush: not yet durable) are not served yet: to the
        // reader they do not exist until they are.
        let visible = self.visible_max(req.topic, req.queue_id).0;
        let result = |status, next| ReadResult {
            status,
            next_queue_offset: next,
            min_offset: min,
            max_offset: max,
            records: Vec::new(),
        };
        let from = req.queue_offset;
        if from < min {
            return Ok(result(ReadStatus::OffsetMoved, min));
        }
        if from > max {
            return Ok(result(ReadStatus::OffsetOverflow, max));
        }
        if from.0 >= visible {
            return Ok(result(ReadStatus::NoNewMessage, from));
        }
        let Some(Picked {
            spans: picked,
            next,
            skipped,
        }) = self.pick(req, from.0, visible)?
        else {
            return Ok(result(ReadStatus::NoNewMessage, QueueOffset(0)));
        };
        if !skipped.is_empty() {
            self.report_skips(req, &skipped);
        }
        // A consumer catching up from disk asks next for the window after this one.
        let ahead = || {
            // Only a hint: an entry that cannot be read now is read by the pull that needs it.
            self.pick(req, next, visible)
                .ok()
                .flatten()
                .map(|p| p.spans)
                .unwrap_or_default()
        };
        let fetched = self.fetch_then(&picked, ahead).await?;
        let mut records = Vec::with_capacity(fetched.len());
        for (i, f) in fetched.into_iter().enumerate() {
            let s = match f {
                Fetched::Record(s) => s,
                Fetched::Gone => continue,
                Fetched::Bad { segment, reason } => {
                    // Corrupt on disk since it was written (or a garbled entry): the pull
                    // serves the rest and its next offset is past this one, so the group
                    // moves on instead of retrying it forever.
                    let q = self.queue_offset_of(req, from.0, next, picked[i]);
                    self.quarantine_bad_read(req, q, picked[i], segment, &reason);
                    continue;
                }
            };
            // Tag codes can collide: check the real tag string (`*` matches without one).
            let tag_ok = matches!(req.filter, TagFilter::All)
                || RecordView::parse(s.as_bytes())
                    .map(|v| req.filter.matches(v.tags()))
                    .unwrap_or(false);
            if tag_ok {
                records.push(s);
            }
        }
        // Nothing served in the window (filtered out, or stepped over): NoMatchedMessage
        // with the next offset past the window, which a consumer takes and moves on from.
        let status = if records.is_empty() {
            ReadStatus::NoMatchedMessage
        } else {
            ReadStatus::Found
        };
        Ok(ReadResult {
            status,
            next_queue_offset: QueueOffset(next),
            min_offset: min,
            max_offset: max,
            records,
        })
    }

    /// The queue offset in `[from, to)` whose entry is `span` (for the log line of a record
    /// that failed its check); `from` if none is (the entry changed meanwhile).
    fn queue_offset_of(
        &self,
        req: &ReadRequest<'_>,
        from: u64,
        to: u64,
        span: (u64, usize),
    ) -> u64 {
        let cqs = self.inner.cqs.borrow();
        let Some(cq) = cqs.get(req.topic, req.queue_id) else {
            return from;
        };
        (from..to)
            .find(|&q| {
                cq.get(QueueOffset(q))
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.offset.0 == span.0 && e.size as usize == span.1)
            })
            .unwrap_or(from)
    }

    pub fn queue_offsets(&self, topic: &str, queue_id: u32) -> QueueOffsets {
        let cqs = self.inner.cqs.borrow();
        cqs.get(topic, queue_id)
            .map(|cq| QueueOffsets {
                min: cq.min,
                max: cq.max,
            })
            .unwrap_or_default()
    }

    /// The record starting at `commit_log_offset`; `None` if no record starts there or its
    /// segment was deleted.
    pub async fn read_at(
        &self,
        commit_log_offset: CommitLogOffset,
    ) -> Result<Option<StoredSlice>, ShardError> {
        let off = commit_log_offset.0;
        let write = self.visible_end();
        let seg_end = {
            let log = self.inner.log.borrow();
            log.segment_start(off) + log.segment_bytes
        };
        let head_len = (message::FIXED_BYTES as u64).min(write.saturating_sub(off)) as usize;
        if head_len < message::FIXED_BYTES {
            return Ok(None);
        }
        // Nothing in a quarantined range is a record (recovery looked at every byte of it).
        if self
            .inner
            .quarantine
            .borrow()
            .blocking(off, head_len as u64)
            .is_some()
        {
            return Ok(None);
        }
        let Some(Some(head)) = self.fetch_raw(off, head_len).await?.map(Some) else {
            return Ok(None);
        };
        let b = head.as_bytes();
        let total = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let magic = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        if magic != message::MAGIC_CODE
            || total < message::FIXED_BYTES as i32
            || total as usize > self.inner.record_bytes_max.get().max(head_len)
            || off + total as u64 > seg_end.min(write)
        {
            return Ok(None);
        }
        if self
            .inner
            .quarantine
            .borrow()
            .blocking(off, total as u64)
            .is_some()
        {
            return Ok(None);
        }
        // A user-supplied offset that is not a record boundary is "not there", and so is a
        // record that fails its check: never served.
        Ok(match self.fetch(&[(off, total as usize)]).await?.pop() {
            Some(Fetched::Record(s)) => Some(s),
            _ => None,
        })
    }

    /// The records at `spans` (CommitLog offset and size, as an index of this shard's
    /// records holds them), read together as [`Shard::fetch`] reads: `None` for one that is
    /// gone, past the visible end, in a quarantined range, or whose bytes fail their check
    /// (a wrong size among them).
    pub async fn read_spans(
        &self,
        spans: &[(CommitLogOffset, u32)],
    ) -> Result<Vec<Option<StoredSlice>>, ShardError> {
        let write = self.visible_end();
        let usable: Vec<bool> = {
            let quarantine = self.inner.quarantine.borrow();
            spans
                .iter()
                .map(|&(off, len)| {
                    let len = u64::from(len);
                    len >= message::FIXED_BYTES as u64
                        && off.0.saturating_add(len) <= write
                        && quarantine.blocking(off.0, len).is_none()
                })
                .collect()
        };
        let wanted: Vec<(u64, usize)> = spans
            .iter()
            .zip(&usable)
            .filter(|(_, &ok)| ok)
            .map(|(&(off, len), _)| (off.0, len as usize))
            .collect();
        let mut fetched = self.fetch(&wanted).await?.into_iter();
        Ok(usable
            .into_iter()
            .map(|ok| match ok.then(|| fetched.next()).flatten() {
                Some(Fetched::Record(s)) => Some(s),
                _ => None,
            })
            .collect())
    }

    /// Raw bytes (not necessarily a whole record) for peeking at a header.
    async fn fetch_raw(&self, off: u64, len: usize) -> Result<Option<StoredSlice>, ShardError> {
        let located = self.inner.log.borrow().locate(off, len);
        match located {
            Located::Gone => Ok(None),
            Located::Memory(s) => Ok(Some(s)),
            Located::Disk(file) => {
                let from = align_down(off);
                let to = align_up(off + len as u64);
                self.count_disk_read((to - from) as usize);
                let r = file.read_aligned(from, (to - from) as usize).await?;
                Ok(StoredSlice::from_read(&r, (off - from) as usize, len))
            }
        }
    }

    /// Records of `topic` with `key` (one of KEYS, or UNIQ_KEY) stored within
    /// `[begin_ms, end_ms]`, oldest first, at most `max`.
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin_ms: i64,
        end_ms: i64,
        max: usize,
    ) -> Result<Vec<StoredSlice>, ShardError> {
        let mut candidates = self
            .inner
            .index
            .borrow()
            .lookup(topic, key, begin_ms, end_ms, max);
        candidates.sort_unstable();
        let mut out = Vec::new();
        for off in candidates {
            if out.len() >= max {
                break;
            }
            let Some(s) = self.read_at(CommitLogOffset(off)).await? else {
                continue;
            };
            // The index only holds hashes: check topic, key and time on the record itself.
            let ok = RecordView::parse(s.as_bytes()).is_ok_and(|v| {
                v.topic() == topic
                    && (v.keys().any(|k| k == key) || v.uniq_key() == Some(key))
                    && (begin_ms..=end_ms).contains(&v.store_timestamp_ms())
            });
            if ok {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// The store time (ms since the epoch) of the queue's record at `offset`; `None` when
    /// the record is gone, damaged or was never written.
    pub async fn store_time_at(
        &self,
        topic: &str,
        queue_id: u32,
        offset: QueueOffset,
    ) -> Result<Option<i64>, ShardError> {
        let entry = self
            .inner
            .cqs
            .borrow()
            .get(topic, queue_id)
            .map(|cq| cq.get(offset))
            .transpose()?
            .flatten();
        let quarantined = entry.is_some_and(|e| {
            self.inner
                .quarantine
                .borrow()
                .blocking(e.offset.0, e.size as u64)
                .is_some()
        });
        Ok(match entry.filter(|_| !quarantined) {
            Some(e) => match self.fetch(&[(e.offset.0, e.size as usize)]).await?.pop() {
                Some(Fetched::Record(s)) => {
                    Some(RecordView::parse(s.as_bytes())?.store_timestamp_ms())
                }
                _ => None,
            },
            None => None,
        })
    }

    /// First queue offset whose store time is >= `timestamp_ms` (the max offset if none).
    pub async fn search_offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
    ) -> Result<QueueOffset, ShardError> {
        let QueueOffsets { min, max } = self.queue_offsets(topic, queue_id);
        let (mut lo, mut hi) = (min.0, max.0);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            // A record gone, damaged or missing has no time: it counts as older, so the
            // search moves on past it.
            let ts = self
                .store_time_at(topic, queue_id, QueueOffset(mid))
                .await?
                .unwrap_or(i64::MIN);
            if ts >= timestamp_ms {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(QueueOffset(lo))
    }

    /// Resolves when the queue's max offset exceeds `after_queue_offset` (true) or the
    /// timeout passes (false): long polling.
    pub async fn wait_for_message(
        &self,
        topic: &str,
        queue_id: u32,
        after_queue_offset: QueueOffset,
        timeout: Duration,
    ) -> bool {
        self.wait_appended_until(timeout, || {
            self.visible_max(topic, queue_id) > after_queue_offset
        })
        .await
    }

    /// Waits until `cond` holds, looking again after every append (and every rise of the
    /// read cap), or `timeout` passes, or the shard closes. Whether it held. A long poll
    /// over several queues of the shard waits on it.
    pub async fn wait_appended_until(&self, timeout: Duration, cond: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if cond() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.inner.closed.get() {
                return false;
            }
            self.inner
                .signals
                .new_message
                .wait_timeout(deadline - now)
                .await;
        }
    }
}

/// Checks a record on its way to a reader: structure, position and CRC, wherever the bytes
/// came from. Bytes from disk may have changed since they were written; bytes in memory
/// are what the write path stamped, but a reader is never handed a record on that promise
/// alone: whatever went wrong between the stamp and the read (a ConsumeQueue entry pointing
/// at bytes that were replaced, memory reused too early), the record is refused, not
/// served. The error says what failed.
fn check_record(bytes: &[u8], offset: u64) -> Result<(), String> {
    let v = RecordView::parse(bytes).map_err(|e| e.to_string())?;
    if v.len() != bytes.len() || v.physical_offset() != offset {
        return Err("record does not start where its index says".into());
    }
    v.verify_crc().map_err(|e| e.to_string())
}

/// One span of [`Shard::fetch`].
enum Fetched {
    Record(StoredSlice),
    /// Deleted by retention, or past the log end.
    Gone,
    /// The bytes fail [`check_record`]: never served. `segment` is the file they were read
    /// from (`None` for bytes still in memory).
    Bad {
        segment: Option<std::path::PathBuf>,
        reason: String,
    },
}

/// What [`Shard::pick`] chose for a read.
struct Picked {
    spans: Vec<(u64, usize)>,
    next: u64,
    skipped: Vec<Skip>,
}

/// A ConsumeQueue entry a read steps over instead of serving.
struct Skip {
    queue_offset: u64,
    /// The entry's span, and the quarantined range it overlaps; `None` for a missing entry.
    span: Option<((u64, usize), (u64, u64))>,
}

/// One aligned read of [`Shard::fetch`]: the spans from index `first` to `last`,
/// `[from, from + len)` of `file`.
struct ColdRead {
    first: usize,
    last: usize,
    from: u64,
    len: u64,
    file: Rc<SegmentFile>,
}

/// Groups the spans only the segment files hold (`files[i]` is `Some`) into aligned reads:
/// nearby records of one file share a read of at most [`COLD_READ_SPAN_MAX_BYTES`], skipping
/// at most [`COLD_READ_GAP_MAX_BYTES`] between two of them.
fn group_cold_reads(spans: &[(u64, usize)], files: &[Option<Rc<SegmentFile>>]) -> Vec<ColdRead> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        let Some(file) = &files[i] else {
            i += 1;
            continue;
        };
        let from = align_down(spans[i].0);
        let mut j = i;
        while j + 1 < spans.len() {
            let (o, l) = spans[j + 1];
            let same = matches!(&files[j + 1], Some(f) if Rc::ptr_eq(f, file));
            let prev_end = align_up(spans[j].0 + spans[j].1 as u64);
            if !same
                || o < spans[j].0
                || align_down(o).saturating_sub(prev_end) > COLD_READ_GAP_MAX_BYTES
                || align_up(o + l as u64) - from > COLD_READ_SPAN_MAX_BYTES
            {
                break;
            }
            j += 1;
        }
        out.push(ColdRead {
            first: i,
            last: j,
            from,
            len: align_up(spans[j].0 + spans[j].1 as u64) - from,
            file: file.clone(),
        });
        i = j + 1;
    }
    out
}
