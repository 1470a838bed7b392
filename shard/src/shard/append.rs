//! The write path: a batch is validated, stamped, indexed (ConsumeQueue, IndexFile) and
//! copied into the CommitLog's in-memory tail; the async profiles acknowledge here, the sync
//! one once a group commit covers it. Back-pressure (`wait_for_room`) holds sends while too
//! much is not yet safe on disk.

use std::time::{Duration, Instant};

use message::{IndexedProperties, RecordView, StoreStamp};
use smallvec::SmallVec;

use crate::derived::{derive, queue_of, Derive, StoredRecord};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::{FlushPolicy, ShardError};

use super::{AppendResult, AppendTiming, Shard};

/// Async appends are paced once more than `unsynced_bytes_max / PACE_FROM_FRACTION` bytes
/// are not yet durable. Paced at the disk's rate, the unsynced bytes peak at about twice
/// what the running sync covers (it covers what was there when it started, and as much
/// again arrives while it runs), so pacing from a quarter keeps them near half the cap,
/// clear of it; from half, they touched the cap on every sync and every send waited.
const PACE_FROM_FRACTION: u64 = 4;

/// Appends of at most this many bytes (a single message or a small batch) are paced on a
/// clock of their own and may use the last [`SMALL_RESERVE_FRACTION`] of each hard bound, so
/// that a producer of single sends is not queued behind huge batches: each huge batch
/// reserves its own slot of the disk's time, and a single send would otherwise wait for all
/// of them. Between them the two clocks may admit up to twice the disk's rate, which the
/// hard bounds still cap; the small ones come near it only when small sends alone could.
pub const SMALL_APPEND_BYTES: usize = 64 << 10;

/// The share of each hard bound (unwritten bytes, tail ring, unsynced bytes) that only small
/// appends may fill.
const SMALL_RESERVE_FRACTION: u64 = 8;

/// When an append paced by [`Pacer`] may go.
enum Slot {
    Now,
    At(Instant),
    /// Its turn comes after its deadline: refused now rather than at the deadline.
    PastDeadline {
        bytes_per_s: u64,
    },
}

/// Paces appends past the low mark of unsynced bytes at the rate the disk has lately made
/// bytes durable: each fdatasync reports the bytes it made durable and how long it took,
/// and each paced append reserves the next `len / rate` of time. Until a sync has been
/// measured there is no rate and appends go up to the cap as before.
#[derive(Debug)]
pub(super) struct Pacer {
    /// Bytes per second made durable, a moving average over recent syncs; 0 = unknown.
    bytes_per_s: f64,
    /// When the next paced append of more than [`SMALL_APPEND_BYTES`] may go.
    next: Instant,
    /// When the next paced small append may go.
    next_small: Instant,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            bytes_per_s: 0.0,
            next: Instant::now(),
            next_small: Instant::now(),
        }
    }
}

impl Pacer {
    /// A sync made `bytes` durable in `took`. One of fewer than `bytes_min` bytes is not
    /// counted: it measures a sync's latency, not the disk's rate, and the small syncs of
    /// a quiet spell would otherwise pace the next burst far below what the disk can do.
    pub(super) fn observe(&mut self, bytes: u64, took: Duration, bytes_min: u64) {
        if bytes == 0 || bytes < bytes_min {
            return;
        }
        // At least a millisecond: a sync of nothing new is not infinitely fast.
        let rate = bytes as f64 / took.as_secs_f64().max(1e-3);
        self.bytes_per_s = if self.bytes_per_s == 0.0 {
            rate
        } else {
            // Half the weight on the newest: one odd sync moves the pace, and the disk's
            // real rate is found again within a few.
            0.5 * self.bytes_per_s + 0.5 * rate
        };
    }

    fn slot(&mut self, now: Instant, len: u64, deadline: Instant) -> Slot {
        if self.bytes_per_s <= 0.0 {
            return Slot::Now;
        }
        let next = if len <= SMALL_APPEND_BYTES as u64 {
            &mut self.next_small
        } else {
            &mut self.next
        };
        let at = (*next).max(now);
        if at > deadline {
            return Slot::PastDeadline {
                bytes_per_s: self.bytes_per_s as u64,
            };
        }
        *next = at + Duration::from_secs_f64(len as f64 / self.bytes_per_s);
        if at <= now {
            Slot::Now
        } else {
            Slot::At(at)
        }
    }
}

impl Shard {
    /// Appends a batch of records (encoded with `message::encode_record`, back to back) to
    /// one queue. Async flush: returns once in memory. Sync flush: returns once durable.
    pub async fn append(
        &self,
        topic: &str,
        queue_id: u32,
        records: &[u8],
    ) -> Result<AppendResult, ShardError> {
        self.append_batch(topic, queue_id, records, None).await
    }

    /// [`Shard::append`] for a batch whose sender said how many records it holds: a batch
    /// holding another number is refused (`CountMismatch`) before anything is stored. The
    /// count is checked in the same pass that validates the records.
    pub async fn append_counted(
        &self,
        topic: &str,
        queue_id: u32,
        records: &[u8],
        expected_count: u32,
    ) -> Result<AppendResult, ShardError> {
        self.append_batch(topic, queue_id, records, Some(expected_count))
            .await
    }

    async fn append_batch(
        &self,
        topic: &str,
        queue_id: u32,
        records: &[u8],
        expected_count: Option<u32>,
    ) -> Result<AppendResult, ShardError> {
        let inner = &self.inner;
        self.check_writable()?;
        // Validate the whole batch before touching anything. Each record is parsed only
        // here; the views carry its layout to the copy, stamp and index steps below.
        let max = inner.limits.get().message_bytes_max;
        // Room for the records a batch of this size holds at the first record's size: one
        // for a single send, the whole batch for records of even sizes.
        let first_len = records
            .get(..4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let guess = (records.len() / first_len.max(1)).clamp(1, 1024);
        // Each record's view, and its indexed properties as they will read once stamped
        // (`None`: scan the stamped copy), found here once so the timer's decision is made
        // before the append. A single send's stays inline, off the heap.
        let mut views: SmallVec<[(RecordView<'_>, Option<IndexedProperties<'_>>); 1]> =
            SmallVec::with_capacity(guess);
        let mut held = None;
        let mut seen = 0usize;
        for r in message::records(records) {
            let v = r?;
            if v.len() > max {
                return Err(ShardError::MessageTooLarge { size: v.len(), max });
            }
            if v.topic() != topic {
                return Err(ShardError::TopicMismatch {
                    expected: topic.to_owned(),
                    found: v.topic().to_owned(),
                });
            }
            let scan = v.indexed_properties_after_stamp();
            let p = scan.unwrap_or_else(|| v.indexed_properties());
            let (_, _, is_held) = queue_of(&v, &p);
            if *held.get_or_insert(is_held) != is_held {
                return Err(ShardError::MixedTimerBatch);
            }
            if is_held {
                // Refused now if its time cannot be read or is too far ahead.
                let now = inner.config.clock.wall_ms();
                inner.config.timer.deliver_at_ms(&v.properties(), now)?;
            }
            seen += v.len();
            views.push((v, scan));
        }
        let held = held.unwrap_or(false);
        if views.is_empty() {
            return Err(ShardError::EmptyBatch);
        }
        let count = views.len() as u32;
        if let Some(expected) = expected_count.filter(|&e| e != count) {
            return Err(ShardError::CountMismatch {
                expected,
                found: count,
            });
        }
        debug_assert_eq!(seen, records.len());
        let batch_max = (inner.config.segment_bytes - 8) as usize;
        if records.len() > batch_max {
            return Err(ShardError::MessageTooLarge {
                size: records.len(),
                max: batch_max,
            });
        }
        let room_from = Instant::now();
        // One clock read when there is room at once, the common case.
        let append_from = self
            .wait_for_room(records.len(), room_from)
            .await?
            .unwrap_or(room_from);

        let store_ts = inner.config.clock.wall_ms();
        let host = inner.config.store_host;
        let (first_q, at, sealed) = {
            let mut log = inner.log.borrow_mut();
            let mut cqs = inner.cqs.borrow_mut();
            let mut index = inner.index.borrow_mut();
            // A held batch takes its queue offsets in the timer queue (see `queue_of`).
            let cq = if held {
                cqs.get_or_create(message::timer::TIMER_QUEUE_TOPIC, 0)
            } else {
                cqs.get_or_create(topic, queue_id)
            };
            let first_q = cq.max;
            let (at, sealed) = log.append_with(records.len(), |at, buf| {
                let limit = message::ids::LOCAL_OFFSET_MAX;
                if at + records.len() as u64 > limit {
                    return Err(ShardError::OffsetSpaceExhausted {
                        offset: at,
                        max: limit,
                    });
                }
                // One pass per record while it is hot in cache: copy, stamp and CRC, then
                // its ConsumeQueue and IndexFile entries. A failure undoes the CQ entries
                // and the log does not advance, so the two never disagree.
                let mut pos = 0usize;
                let mut q = first_q.0;
                let result = (|| {
                    for (v, scan) in &views {
                        let phys = at + pos as u64;
                        let len = v.len();
                        let rec = &mut buf[pos..pos + len];
                        v.write_stamped(
                            rec,
                            &StoreStamp {
                                queue_id,
                                queue_offset: q,
                                physical_offset: phys,
                                store_timestamp_ms: store_ts,
                                store_host: host,
                            },
                        )?;
                        debug_assert!(RecordView::parse(rec).is_ok_and(|s| s.verify_crc().is_ok()));
                        // Scanned in the batch (cache-hot) rather than in the chunk; only a
                        // record whose stamping could change them is scanned after it.
                        let stamped;
                        let props = match scan {
                            Some(p) => *p,
                            None => {
                                stamped = RecordView::parse(rec)?;
                                let p = stamped.indexed_properties();
                                // The stored record must be held as the batch was.
                                if queue_of(&stamped, &p).2 != held {
                                    return Err(ShardError::MixedTimerBatch);
                                }
                                p
                            }
                        };
                        let stored = StoredRecord {
                            topic,
                            queue_offset: QueueOffset(q),
                            commit_log_offset: CommitLogOffset(phys),
                            len: len as u32,
                            store_timestamp_ms: store_ts,
                            props: &props,
                            held,
                        };
                        derive(cq, &mut index, &stored, Derive::Append)?;
                        pos += len;
                        q += 1;
                    }
                    debug_assert_eq!(pos, buf.len());
                    Ok(())
                })();
                if result.is_err() {
                    if let Err(e) = cq.truncate(first_q) {
                        tracing::warn!(topic, queue_id, error = %e, "cannot clear the ConsumeQueue entries of a failed append; the queue ends before them");
                    }
                }
                result
            })?;
            (first_q, at, sealed)
        };
        inner.appends.set(inner.appends.get() + 1);
        inner
            .appended_bytes
            .set(inner.appended_bytes.get() + records.len() as u64);
        inner.signals.new_message.notify_all();
        let appended_at = Instant::now();
        let end = at + records.len() as u64;
        match inner.config.flush {
            FlushPolicy::Sync => loop {
                if inner.log.borrow().durable_offset >= end {
                    break;
                }
                self.check_poisoned()?;
                // Not durable while the segment cannot be made: said now, not at a timeout.
                // The record stays queued and is stored once space returns (like a timeout).
                self.check_blocked()?;
                if inner.closed.get() {
                    return Err(ShardError::Closed);
                }
                let wait = inner.signals.progress.wait();
                inner.signals.flush_wake.notify_all();
                wait.await;
            },
            FlushPolicy::Async { .. } => {
                let dirty_bytes_max = inner.limits.get().flush_dirty_bytes_max;
                if sealed || inner.log.borrow().dirty_bytes() >= dirty_bytes_max {
                    inner.signals.flush_wake.notify_all();
                    // Let the flusher submit the sealed chunk now, so the disk writes it
                    // while we keep appending, instead of CPU and disk taking turns.
                    futures_lite::future::yield_now().await;
                }
            }
        }
        Ok(AppendResult {
            first_queue_offset: first_q,
            first_commit_log_offset: CommitLogOffset(at),
            count,
            store_timestamp_ms: store_ts,
            timing: AppendTiming {
                room: append_from - room_from,
                append: appended_at - append_from,
                durable: match inner.config.flush {
                    FlushPolicy::Sync => appended_at.elapsed(),
                    FlushPolicy::Async { .. } => Duration::ZERO,
                },
            },
        })
    }

    /// Back-pressure: waits until an append of `len` bytes keeps the unwritten bytes within
    /// [`crate::ShardConfig::unwritten_bytes_max`] and the tail ring, and (async) the
    /// unsynced bytes within `unsynced_bytes_max`; refuses it with `Busy` if that takes
    /// longer than `busy_wait_ms`, so a slow disk is an answer to the sender, not a stall.
    ///
    /// Unsynced bytes are paced rather than only capped: past a quarter of
    /// `unsynced_bytes_max` ([`PACE_FROM_FRACTION`]) each append takes the next slot at the rate the disk has lately made bytes durable
    /// (see [`Pacer`]), so acknowledgements keep coming at the disk's rate while a long
    /// fdatasync runs, instead of the log filling to the cap at memory speed and every send
    /// then waiting for that sync (13 s without an acknowledgement at 20 MB/s). Small
    /// appends ([`SMALL_APPEND_BYTES`]) take their slots on a clock of their own and may use
    /// the last part of each bound, so a single send is not queued behind huge batches.
    ///
    /// `now` is the time of the call; returns when the wait ended, or `None` when there was
    /// room at once.
    pub(super) async fn wait_for_room(
        &self,
        len: usize,
        mut now: Instant,
    ) -> Result<Option<Instant>, ShardError> {
        let inner = &self.inner;
        let small = len <= SMALL_APPEND_BYTES;
        let unwritten_max = inner.config.unwritten_bytes_max(small);
        let unsynced_max = inner.limits.get().unsynced_bytes_max;
        // What a large append leaves of each hard bound for small ones, and the bounds it
        // is held to.
        let reserve = |bound: u64| {
            if small {
                0
            } else {
                bound / SMALL_RESERVE_FRACTION
            }
        };
        // The text names the constants' values.
        const _: () = assert!(SMALL_APPEND_BYTES == 64 << 10 && SMALL_RESERVE_FRACTION == 8);
        let leaves = if small {
            ""
        } else {
            "; an append over 64 KiB leaves the last eighth of it to small ones"
        };
        let unwritten_bound = unwritten_max - reserve(unwritten_max);
        let unsynced_bound = unsynced_max - reserve(unsynced_max);
        let ring_reserve = {
            let log = inner.log.borrow();
            match &log.ring {
                Some(ring) => {
                    let reach = log.append_reach(len);
                    if reach > ring.ring_bytes() {
                        return Err(ShardError::MessageTooLarge {
                            size: len,
                            max: len - (reach - ring.ring_bytes()) as usize / 2,
                        });
                    }
                    reserve(ring.ring_bytes()) as usize
                }
                None => 0,
            }
        };
        let mut deadline = None;
        // This append has taken its paced slot (once is enough: the bounds below are still
        // checked after the wait, without yielding before the copy).
        let mut paced = false;
        // `now` is the time of this turn of the loop: the call's, then each wait's end.
        let mut waited = false;
        loop {
            self.check_writable()?;
            // Why the disk is behind this append, if it is (not the `blocked` state: that
            // one refuses at once, in `check_writable`).
            let (behind, pace) = {
                let log = inner.log.borrow();
                let dirty = log.dirty_bytes();
                let is_async = matches!(inner.config.flush, FlushPolicy::Async { .. });
                if log.unwritten_bytes() > unwritten_bound {
                    (Some(format!(
                        "{} bytes acknowledged are not yet written (bound {unwritten_max}{leaves}): the disk is behind",
                        log.unwritten_bytes()
                    )), false)
                } else if !log.ring_has_room(len)
                    // A large append that fits the ring only without the reserve goes
                    // when nothing else is waiting for the disk.
                    || (ring_reserve > 0
                        && log.unwritten_bytes() > 0
                        && !log.ring_has_room(len + ring_reserve))
                {
                    (Some(format!(
                        "{} bytes acknowledged are not yet written and the tail ring is full{leaves}: the disk is behind",
                        log.unwritten_bytes()
                    )), false)
                } else if is_async && dirty > unsynced_bound {
                    (Some(format!(
                        "{dirty} bytes acknowledged are not yet fdatasynced (unsynced_bytes_max {unsynced_max}{leaves}): the disk is behind",
                    )), false)
                } else {
                    (
                        None,
                        is_async && !paced && dirty > unsynced_max / PACE_FROM_FRACTION,
                    )
                }
            };
            if waited {
                now = Instant::now();
            }
            let ended = waited.then_some(now);
            let until = *deadline
                .get_or_insert(now + Duration::from_millis(inner.limits.get().busy_wait_ms));
            let Some(reason) = behind else {
                if !pace {
                    return Ok(ended);
                }
                let slot = inner.pacer.borrow_mut().slot(now, len as u64, until);
                match slot {
                    Slot::Now => return Ok(ended),
                    Slot::At(at) => {
                        paced = true;
                        waited = true;
                        glommio::timer::sleep(at - now).await;
                        continue;
                    }
                    Slot::PastDeadline { bytes_per_s } => {
                        inner.busy_refusals.set(inner.busy_refusals.get() + 1);
                        return Err(ShardError::Busy {
                            reason: format!(
                                "more than a quarter of unsynced_bytes_max {unsynced_max} is not yet fdatasynced and the disk makes about {bytes_per_s} bytes/s durable: this send's turn is more than busy_wait_ms away",
                            ),
                        });
                    }
                }
            };
            if now >= until {
                inner.busy_refusals.set(inner.busy_refusals.get() + 1);
                return Err(ShardError::Busy { reason });
            }
            let wait = inner.signals.progress.wait_timeout(until - now);
            inner.signals.flush_wake.notify_all();
            wait.await;
            waited = true;
        }
    }

    /// The end of what readers may be served: what a crash cannot take away, so that no
    /// (queue, offset) a consumer saw is ever given to another message. Sync flush: the
    /// fdatasynced prefix. Async: everything appended, which the tail ring keeps across a
    /// crash of the process. (An async shard without a ring, as tests and tools open, is
    /// served as it acknowledges: from memory.) With replicas, at most what they confirm
    /// (see [`Shard::set_read_cap`]), so a failover cannot take it back either.
    pub fn visible_end(&self) -> u64 {
        self.safe_end().min(self.inner.read_cap.get())
    }

    /// The queue offset below which every entry of the queue may be served (see
    /// [`Shard::visible_end`]); at most the few entries of appends still waiting are above.
    /// A long poll waits for this to pass what the consumer has.
    pub fn visible_max(&self, topic: &str, queue_id: u32) -> QueueOffset {
        let visible = self.visible_end();
        let cqs = self.inner.cqs.borrow();
        let Some(cq) = cqs.get(topic, queue_id) else {
            return QueueOffset(0);
        };
        let mut m = cq.max.0;
        while m > cq.min.0 {
            match cq.get(QueueOffset(m - 1)) {
                Ok(Some(e)) if e.end() > visible => m -= 1,
                Ok(_) => break,
                // Its entries cannot be read now: none is taken as visible.
                Err(_) => return cq.min,
            }
        }
        QueueOffset(m)
    }
}
