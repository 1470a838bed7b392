//! [`Shard`]: one core's storage engine, tying the CommitLog, ConsumeQueues and IndexFiles
//! together, with its flusher and retention tasks on the current glommio executor.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use message::{RecordView, StoreStamp, TagFilter};

use crate::commit_log::{self, CommitLog, Located, LogParams};
use crate::consume_queue::ConsumeQueues;
use crate::derived::{derive, Derive, StoredRecord};
use crate::index_file::IndexService;
use crate::layout::{COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, INDEX_DIR};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::quarantine::{Quarantine, QuarantinedRange};
use crate::readahead::{Readahead, SlotWait};
use crate::signal::Signal;
use crate::slice::StoredSlice;
use crate::storage::{self, align_down, align_up, remove_off_core, Doomed, SegmentFile};
use crate::tail_ring::{self, TailRing};
use crate::{FlushPolicy, ShardConfig, ShardError};

/// Longest span one cold read covers when it gathers several records.
const COLD_READ_SPAN_MAX_BYTES: u64 = 1 << 20;
/// Most bytes nobody asked for that one cold read reads through to join two records. Queues
/// interleave in the log: reading through the other queues' batches multiplied a catching-up
/// consumer's disk traffic by the number of queues.
const COLD_READ_GAP_MAX_BYTES: u64 = 16 << 10;
/// fdatasyncs in flight at once. A sync covers what was written before it started, so the
/// next group's sync need not wait for the previous one's: on this kind of disk two
/// concurrent write+fdatasync streams each keep the latency of one, when the syncs commit
/// the filesystem journal (preallocated segments). With `warm_segments` (a sync is a bare
/// device cache flush) two in flight were also better than one in 3 alternating durable
/// runs at 20,000 sends/s: the sync stage's p99.9 1.06-1.23 ms against 1.29-2.04 ms, p99
/// 0.46-0.54 against 0.52-0.56 ms (BENCHMARKS.md, "Tail latency"). An earlier measurement
/// that favoured one was taken while the bench's pacer starved the disk's completions.
const SYNCS_IN_FLIGHT_MAX: usize = 2;
/// ConsumeQueue entries a filtered read looks at, at most (RocketMQ's maxFilterMessageCount).
const FILTER_SCAN_ENTRIES_MAX: u64 = 16_000;
/// How long the flusher waits before it tries again to create a segment that could not be
/// created for lack of space or descriptors. Short enough that sends resume well within a
/// client's retry, long enough that a full disk costs no measurable CPU.
const SEGMENT_CREATE_RETRY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub first_queue_offset: u64,
    pub first_commit_log_offset: u64,
    pub count: u32,
    /// Where the append's time went, for the broker's per-stage latency histograms.
    pub timing: AppendTiming,
}

/// The stages of one append, measured on the shard's core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendTiming {
    /// Waiting for room (back-pressure: the disk behind the acknowledged bytes).
    pub room: Duration,
    /// Validating, copying, stamping and indexing the batch in memory (and into the tail
    /// ring): the ack point of the async profiles.
    pub append: Duration,
    /// Sync flush: from the append until a group commit's fdatasync covered it.
    pub durable: Duration,
}

pub struct ReadRequest<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub max_messages: u32,
    pub max_bytes: u32,
    pub filter: &'a TagFilter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStatus {
    Found,
    NoNewMessage,
    NoMatchedMessage,
    /// The requested offset is below the queue's minimum (retention deleted it);
    /// `next_queue_offset` is where the queue now starts.
    OffsetMoved,
    OffsetOverflow,
}

#[derive(Debug)]
pub struct ReadResult {
    pub status: ReadStatus,
    pub next_queue_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    /// One slice per record.
    pub records: Vec<StoredSlice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueOffsets {
    pub min: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum DiskLevel {
    #[default]
    Normal,
    /// At or above `disk_clean_ratio`: the oldest segment goes each retention pass.
    Clean,
    /// At or above `disk_force_clean_ratio`: oldest segments go until below the clean ratio.
    ForceClean,
    /// At or above `disk_refuse_ratio`: appends are refused.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ShardStats {
    pub write_offset: u64,
    pub written_offset: u64,
    pub durable_offset: u64,
    pub min_offset: u64,
    pub commit_log_bytes: u64,
    pub disk_use_ratio: f64,
    pub disk_level: DiskLevel,
    pub appends: u64,
    pub appended_bytes: u64,
    /// Reads of the segment files (records no longer in memory) and the bytes they read.
    pub disk_reads: u64,
    pub disk_read_bytes: u64,
    pub poisoned: bool,
    /// Segments deleted past the valid log end by the last recovery.
    pub recovery_truncated_segments: u64,
    /// False when the filesystem refused O_DIRECT and segments use buffered I/O.
    pub direct_io: bool,
    /// CommitLog chunk buffers allocated since open; the rest were recycled.
    pub chunk_buffers_allocated: u64,
    /// Segment reads started ahead of a catching-up consumer, and those a pull then used.
    pub readahead_started: u64,
    pub readahead_hits: u64,
    /// Records the tail ring held past its written mark when the shard opened: what the
    /// previous run had acknowledged and perhaps not written when it stopped.
    pub tail_ring_records: u64,
    /// Appends refused with `Busy` because too much was not yet safe on disk.
    pub busy_refusals: u64,
    /// Damaged CommitLog ranges never served: those the last recovery found, and records a
    /// read found failing their check since (see [`Shard::quarantined`] for where).
    pub quarantined_ranges: u64,
    pub quarantined_bytes: u64,
    /// Queue entries reads stepped over since open: records in quarantined ranges, and
    /// entries the ConsumeQueue lacks. Every consumer group that passes one counts it.
    pub skipped_records: u64,
    /// Segment creation is refused for lack of space or descriptors: appends get
    /// `NoSpace` / `TooManyOpenFiles` until a retry succeeds.
    pub writes_blocked: bool,
    /// ConsumeQueue files mapped now (at most `consume_queue_maps_max`), and those
    /// unmapped since open to map others.
    pub cq_files_mapped: u64,
    pub cq_files_unmapped: u64,
}

/// What a retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RetentionReport {
    pub deleted_segments: usize,
    pub min_offset: u64,
    pub disk_use_ratio: f64,
    pub disk_level: DiskLevel,
}

#[derive(Default)]
struct Signals {
    flush_wake: Signal,
    progress: Signal,
    new_message: Signal,
    stop: Signal,
    /// A spare segment finished filling (or failed to).
    spare_filled: Signal,
}

/// The warm spare segment (`warm_segments`), filled ahead of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spare {
    Absent,
    Filling,
    Ready,
    /// Not used: `warm_segments` is off, or the filesystem refuses O_DIRECT.
    Off,
}

struct Inner {
    config: ShardConfig,
    log: RefCell<CommitLog>,
    cqs: RefCell<ConsumeQueues>,
    index: RefCell<IndexService>,
    /// Held while chunks are written (one writer pipeline at a time).
    flush_lock: glommio::sync::Semaphore,
    /// Held while fdatasyncs run: at most `syncs_max` at once. Separate from
    /// `flush_lock`, so writes keep going while the disk syncs.
    sync_lock: glommio::sync::Semaphore,
    /// Syncs are numbered as they take their snapshot and mark the durable offset in that
    /// order: the next number to give, and the next number to finish.
    sync_next_ticket: Cell<u64>,
    sync_done_ticket: Cell<u64>,
    /// The written offset the newest sync covers (or will, once its task runs).
    sync_covers: Cell<u64>,
    /// Group-commit syncs the Sync policy's flusher has started and not seen finish.
    group_syncs: Cell<usize>,
    /// [`SYNCS_IN_FLIGHT_MAX`].
    syncs_max: usize,
    /// An async-policy background sync is under way.
    sync_pending: Cell<bool>,
    signals: Rc<Signals>,
    poisoned: RefCell<Option<(String, String)>>,
    /// Set while the next segment cannot be created for lack of space or descriptors
    /// (`NoSpace` or `TooManyOpenFiles`): appends get a copy, the chunks wait in memory, and
    /// the flusher tries again every [`SEGMENT_CREATE_RETRY`]. Cleared by the creation that
    /// succeeds. Never poison: nothing was written or lost.
    blocked: RefCell<Option<ShardError>>,
    /// Checks every new file's blocks against `disk_reserve_bytes` (and the fault plan).
    space: storage::Space,
    closed: Cell<bool>,
    last_sync: Cell<Instant>,
    appends: Cell<u64>,
    appended_bytes: Cell<u64>,
    busy_refusals: Cell<u64>,
    /// Reads of the segment files (records no longer in memory) and their bytes.
    disk_reads: Cell<u64>,
    disk_read_bytes: Cell<u64>,
    readahead: RefCell<Readahead>,
    disk: Cell<(f64, DiskLevel)>,
    /// When `disk` was last measured: while the disk is full, appends measure it again at
    /// most every [`SEGMENT_CREATE_RETRY`], so sends resume soon after space returns rather
    /// than a whole `retention_check_interval_ms` later.
    disk_measured: Cell<Instant>,
    truncated_segments: u64,
    /// Records the tail ring held past its written mark at open (written back, or found
    /// on disk already).
    ring_records: u64,
    /// Damaged log ranges never served, and what readers stepped over.
    quarantine: RefCell<Quarantine>,
    spare: Cell<Spare>,
}

/// One core's storage engine. `!Send`: lives on one glommio executor. Cheap to clone.
#[derive(Clone)]
pub struct Shard {
    inner: Rc<Inner>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Shard {
    /// Opens the shard in `config.dir`, recovering from whatever a crash left, and spawns
    /// its flusher and retention tasks on the current executor.
    pub async fn open(config: ShardConfig) -> Result<Shard, ShardError> {
        config.validate()?;
        std::fs::create_dir_all(&config.dir)?;
        let space = storage::Space::new(&config);
        let mut cqs = ConsumeQueues::open(
            config.dir.join(CONSUME_QUEUE_DIR),
            config.consume_queue_file_entries,
            config.consume_queue_maps_max,
            space.clone(),
        )?;
        let mut index = IndexService::open(
            config.dir.join(INDEX_DIR),
            config.index_file_slots,
            config.index_file_entries,
            space.clone(),
        )?;
        let index_from = index.indexed_end();
        // What an async run acknowledged but had not written when it died is in its tail
        // ring: put it into the segment files first, so the scan below finds it.
        let mut ring_records = 0;
        if let Some(rc) = &config.tail_ring {
            if let Some(replay) = tail_ring::read_back(&rc.path, config.segment_bytes)? {
                if replay.records > 0 {
                    tail_ring::write_back(
                        &replay,
                        &config.dir.join(COMMIT_LOG_DIR),
                        config.segment_bytes,
                    )
                    .await
                    .map_err(|e| ShardError::TailRing {
                        path: rc.path.display().to_string(),
                        reason: format!(
                            "cannot write back the {} records (commit-log offsets {}..{}) the last run acknowledged and had not written: {e}; the ring is kept: make room on the data disk and start again",
                            replay.records, replay.from, replay.end
                        ),
                    })?;
                    tracing::info!(
                        shard = config.shard_id,
                        records = replay.records,
                        from = replay.from,
                        to = replay.end,
                        "wrote the tail ring's records back into the CommitLog: what the last run acknowledged and had not written"
                    );
                }
                ring_records = replay.records;
            }
        }
        let recovered = commit_log::recover(
            LogParams {
                dir: config.dir.join(COMMIT_LOG_DIR),
                segment_bytes: config.segment_bytes,
                chunk_bytes: config.write_chunk_bytes,
                hot_bytes_max: config.hot_bytes_max,
                chunk_pool: config.chunk_pool,
                faults: config.faults.clone(),
            },
            |view, phys| {
                let props = view.indexed_properties();
                let rec = StoredRecord {
                    topic: view.topic(),
                    queue_offset: QueueOffset(view.queue_offset()),
                    commit_log_offset: CommitLogOffset(phys),
                    len: view.len() as u32,
                    store_timestamp_ms: view.store_timestamp_ms(),
                    props: &props,
                };
                let cq = cqs.get_or_create(view.topic(), view.queue_id());
                derive(cq, &mut index, &rec, Derive::Recover { index_from })
            },
        )
        .await?;
        let mut log = recovered.log;
        if let Some(rc) = &config.tail_ring {
            match config.flush {
                FlushPolicy::Async { .. } => {
                    let mut ring = TailRing::create(rc, config.segment_bytes)?;
                    ring.set_written(log.written_offset);
                    log.ring = Some(ring);
                }
                // Sync appends are durable when acknowledged: no ring, and an old one's
                // content is in the segment files now.
                FlushPolicy::Sync => match std::fs::remove_file(&rc.path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                },
            }
        }
        // Entries past the valid log end (a torn tail lost them) must go, and the queue
        // minimum follows the log minimum.
        let mut doomed = Vec::new();
        for cq in cqs.queues.values_mut() {
            // A last entry recovery just checked against its record is good: no read.
            while cq.max > cq.min && cq.recovered_to != cq.max {
                let last = QueueOffset(cq.max.0 - 1);
                match cq.get(last)? {
                    Some(e) if e.end() <= log.write_offset => break,
                    _ => cq.truncate(last)?,
                }
            }
            doomed.extend(cq.trim_below(CommitLogOffset(log.min_offset))?);
        }
        cqs.recovered();
        remove_off_core(doomed).await?;
        index.clamp_indexed_end(log.write_offset)?;
        if recovered.truncated_segments > 0 {
            tracing::warn!(
                segments = recovered.truncated_segments,
                "recovery deleted segments past the end of the valid log (they held no valid record)"
            );
        }
        if !recovered.quarantined.is_empty() {
            tracing::error!(
                shard = config.shard_id,
                ranges = recovered.quarantined.len(),
                bytes = recovered
                    .quarantined
                    .iter()
                    .map(QuarantinedRange::bytes)
                    .sum::<u64>(),
                "recovery kept the log after damaged ranges; their records are skipped by readers"
            );
        }
        let syncs_max = SYNCS_IN_FLIGHT_MAX;
        let inner = Rc::new(Inner {
            config,
            log: RefCell::new(log),
            cqs: RefCell::new(cqs),
            index: RefCell::new(index),
            flush_lock: glommio::sync::Semaphore::new(1),
            sync_lock: glommio::sync::Semaphore::new(syncs_max as u64),
            sync_next_ticket: Cell::new(0),
            sync_done_ticket: Cell::new(0),
            sync_covers: Cell::new(0),
            group_syncs: Cell::new(0),
            syncs_max,
            sync_pending: Cell::new(false),
            signals: Rc::new(Signals::default()),
            poisoned: RefCell::new(None),
            blocked: RefCell::new(None),
            space,
            closed: Cell::new(false),
            last_sync: Cell::new(Instant::now()),
            appends: Cell::new(0),
            appended_bytes: Cell::new(0),
            busy_refusals: Cell::new(0),
            disk_reads: Cell::new(0),
            disk_read_bytes: Cell::new(0),
            readahead: RefCell::new(Readahead::default()),
            disk: Cell::new((0.0, DiskLevel::Normal)),
            disk_measured: Cell::new(Instant::now()),
            truncated_segments: recovered.truncated_segments as u64,
            ring_records,
            quarantine: RefCell::new(Quarantine::from_recovery(recovered.quarantined)),
            spare: Cell::new(Spare::Off),
        });
        let shard = Shard { inner };
        shard.measure_disk();
        shard.open_spare().await?;
        glommio::spawn_local(flusher(
            Rc::downgrade(&shard.inner),
            shard.inner.signals.clone(),
        ))
        .detach();
        glommio::spawn_local(retention_task(
            Rc::downgrade(&shard.inner),
            shard.inner.signals.clone(),
            Duration::from_millis(shard.inner.config.retention_check_interval_ms),
        ))
        .detach();
        Ok(shard)
    }

    /// `Poisoned` once a write or fdatasync has failed.
    fn check_poisoned(&self) -> Result<(), ShardError> {
        match self.inner.poisoned.borrow().clone() {
            Some((operation, reason)) => Err(ShardError::Poisoned { operation, reason }),
            None => Ok(()),
        }
    }

    /// `NoSpace` or `TooManyOpenFiles` while the next segment cannot be created.
    fn check_blocked(&self) -> Result<(), ShardError> {
        match self
            .inner
            .blocked
            .borrow()
            .as_ref()
            .and_then(|e| e.shortage_copy())
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn check_writable(&self) -> Result<(), ShardError> {
        let inner = &self.inner;
        if inner.closed.get() {
            return Err(ShardError::Closed);
        }
        self.check_poisoned()?;
        self.check_blocked()?;
        let (mut ratio, mut level) = inner.disk.get();
        if level == DiskLevel::Full && inner.disk_measured.get().elapsed() >= SEGMENT_CREATE_RETRY {
            (ratio, level) = self.measure_disk();
        }
        if level == DiskLevel::Full {
            return Err(ShardError::DiskFull {
                ratio,
                threshold: inner.config.disk_refuse_ratio,
            });
        }
        Ok(())
    }

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
        let max = inner.config.message_bytes_max;
        let mut views: Vec<RecordView<'_>> = Vec::with_capacity(64);
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
            seen += v.len();
            views.push(v);
        }
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
        self.wait_for_room(records.len()).await?;
        let append_from = Instant::now();

        let store_ts = now_ms();
        let host = inner.config.store_host;
        let (first_q, at, sealed) = {
            let mut log = inner.log.borrow_mut();
            let mut cqs = inner.cqs.borrow_mut();
            let mut index = inner.index.borrow_mut();
            let cq = cqs.get_or_create(topic, queue_id);
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
                    for v in &views {
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
                        let props = match v.indexed_properties_after_stamp() {
                            Some(p) => p,
                            None => RecordView::parse(rec)?.indexed_properties(),
                        };
                        let stored = StoredRecord {
                            topic,
                            queue_offset: QueueOffset(q),
                            commit_log_offset: CommitLogOffset(phys),
                            len: len as u32,
                            store_timestamp_ms: store_ts,
                            props: &props,
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
            FlushPolicy::Async {
                dirty_bytes_max, ..
            } => {
                if sealed || inner.log.borrow().dirty_bytes() >= dirty_bytes_max {
                    inner.signals.flush_wake.notify_all();
                    // Let the flusher submit the sealed chunk now, so the disk writes it
                    // while we keep appending, instead of CPU and disk taking turns.
                    futures_lite::future::yield_now().await;
                }
            }
        }
        Ok(AppendResult {
            first_queue_offset: first_q.0,
            first_commit_log_offset: at,
            count,
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
    /// a few chunks and the tail ring, and (async) the unsynced bytes within
    /// `unsynced_bytes_max`; refuses it with `Busy` if that takes longer than `busy_wait_ms`,
    /// so a slow disk is an answer to the sender, not a stall.
    async fn wait_for_room(&self, len: usize) -> Result<(), ShardError> {
        let inner = &self.inner;
        let unwritten_max = (inner.config.write_chunk_bytes as u64 * 4).max(16 << 20);
        {
            let log = inner.log.borrow();
            if let Some(ring) = &log.ring {
                let reach = log.append_reach(len);
                if reach > ring.ring_bytes() {
                    return Err(ShardError::MessageTooLarge {
                        size: len,
                        max: len - (reach - ring.ring_bytes()) as usize / 2,
                    });
                }
            }
        }
        let mut deadline = None;
        loop {
            self.check_writable()?;
            // Why the disk is behind this append, if it is (not the `blocked` state: that
            // one refuses at once, in `check_writable`).
            let behind = {
                let log = inner.log.borrow();
                if log.unwritten_bytes() > unwritten_max {
                    Some(format!(
                        "{} bytes acknowledged are not yet written (bound {unwritten_max}): the disk is behind",
                        log.unwritten_bytes()
                    ))
                } else if !log.ring_has_room(len) {
                    Some(format!(
                        "{} bytes acknowledged are not yet written and the tail ring is full: the disk is behind",
                        log.unwritten_bytes()
                    ))
                } else {
                    match inner.config.flush {
                        FlushPolicy::Async { .. }
                            if log.dirty_bytes() > inner.config.unsynced_bytes_max =>
                        {
                            Some(format!(
                                "{} bytes acknowledged are not yet fdatasynced (unsynced_bytes_max {}): the disk is behind",
                                log.dirty_bytes(),
                                inner.config.unsynced_bytes_max
                            ))
                        }
                        _ => None,
                    }
                }
            };
            let Some(reason) = behind else {
                return Ok(());
            };
            let now = Instant::now();
            let until =
                *deadline.get_or_insert(now + Duration::from_millis(inner.config.busy_wait_ms));
            if now >= until {
                inner.busy_refusals.set(inner.busy_refusals.get() + 1);
                return Err(ShardError::Busy { reason });
            }
            let wait = inner.signals.progress.wait_timeout(until - now);
            inner.signals.flush_wake.notify_all();
            wait.await;
        }
    }

    /// The end of what readers may be served: what a crash cannot take away, so that no
    /// (queue, offset) a consumer saw is ever given to another message. Sync flush: the
    /// fdatasynced prefix. Async: everything appended, which the tail ring keeps across a
    /// crash of the process. (An async shard without a ring, as tests and tools open, is
    /// served as it acknowledges: from memory.)
    fn visible_end(&self) -> u64 {
        let log = self.inner.log.borrow();
        match self.inner.config.flush {
            FlushPolicy::Sync => log.durable_offset,
            FlushPolicy::Async { .. } => log.write_offset,
        }
    }

    /// The queue offset below which every entry of the queue may be served (see
    /// [`Shard::visible_end`]); at most the few entries of appends still waiting are above.
    /// A long poll waits for this to pass what the consumer has.
    pub fn visible_max(&self, topic: &str, queue_id: u32) -> u64 {
        let visible = self.visible_end();
        let cqs = self.inner.cqs.borrow();
        let Some(cq) = cqs.get(topic, queue_id) else {
            return 0;
        };
        let mut m = cq.max.0;
        while m > cq.min.0 {
            match cq.get(QueueOffset(m - 1)) {
                Ok(Some(e)) if e.end() > visible => m -= 1,
                Ok(_) => break,
                // Its entries cannot be read now: none is taken as visible.
                Err(_) => return cq.min.0,
            }
        }
        m
    }

    fn poison(&self, operation: &str, e: &std::io::Error) -> ShardError {
        tracing::error!(operation, error = %e, "shard poisoned: refusing writes until reopened");
        let mut p = self.inner.poisoned.borrow_mut();
        if p.is_none() {
            *p = Some((operation.to_owned(), e.to_string()));
        }
        self.inner.signals.progress.notify_all();
        ShardError::Poisoned {
            operation: operation.to_owned(),
            reason: e.to_string(),
        }
    }

    /// The segment starting at `start`, created if it is new. A creation refused for lack
    /// of space (ENOSPC, EDQUOT, or less free than `disk_reserve_bytes` would leave) or of
    /// descriptors (EMFILE, ENFILE) returns `NoSpace` / `TooManyOpenFiles` and marks the
    /// shard blocked (see `Inner::blocked`), with no half-made file left; it is never
    /// poison. Any other failure to create it is an I/O error; a failed fsync of the
    /// directory poisons the shard under that name.
    async fn segment_file(&self, start: u64) -> Result<Rc<SegmentFile>, ShardError> {
        if let Some(f) = self.inner.log.borrow().segments.get(&start) {
            return Ok(f.clone());
        }
        match self.create_segment(start).await {
            Ok(f) => {
                if let Some(was) = self.inner.blocked.borrow_mut().take() {
                    tracing::info!(
                        shard = self.inner.config.shard_id,
                        segment = start,
                        after = %was,
                        "segment created: writes resume"
                    );
                }
                self.inner
                    .log
                    .borrow_mut()
                    .segments
                    .insert(start, f.clone());
                self.fill_spare();
                Ok(f)
            }
            Err(e) => {
                if let Some(copy) = e.shortage_copy() {
                    let mut blocked = self.inner.blocked.borrow_mut();
                    // Logged once per stretch of refusals, not once per retry.
                    if blocked.is_none() {
                        tracing::error!(
                            shard = self.inner.config.shard_id,
                            segment = start,
                            error = %e,
                            "cannot create the next CommitLog segment: refusing sends, retrying every {} ms",
                            SEGMENT_CREATE_RETRY.as_millis()
                        );
                    }
                    *blocked = Some(copy);
                    // Sync appends waiting for durability learn of it now.
                    self.inner.signals.progress.notify_all();
                }
                Err(e)
            }
        }
    }

    async fn create_segment(&self, start: u64) -> Result<Rc<SegmentFile>, ShardError> {
        let (dir, path, size, faults) = {
            let log = self.inner.log.borrow();
            (
                log.dir.clone(),
                log.segment_path(start),
                log.segment_bytes,
                log.faults.clone(),
            )
        };
        // A spare still filling is not waited for: the log is made of an unfilled segment
        // this once, and the spare serves the next roll.
        let mut from_spare = false;
        if self.inner.spare.get() == Spare::Ready {
            self.inner.spare.set(Spare::Absent);
            let (from, to) = (dir.join(storage::SPARE_NAME), path.clone());
            match storage::off_core(move || std::fs::rename(from, to)).await {
                Ok(()) => from_spare = true,
                Err(e) => tracing::warn!(error = %e, "cannot take the warm spare segment"),
            }
        }
        if !from_spare {
            // A spare has its blocks already; a new segment takes a whole segment's worth.
            self.inner.space.check(&path, size)?;
        }
        let f = SegmentFile::open(&path, start, size, !from_spare, faults)
            .await
            .map_err(|e| ShardError::making_room(&path, "creating a CommitLog segment", e))?;
        // The new file's directory entry must survive a crash before its data counts. Not
        // being able to open the directory (EMFILE) is a shortage like any other: the file
        // goes, and the next try makes it again. A failed fsync of it is poison.
        let opened = {
            let dir = dir.clone();
            storage::off_core(move || std::fs::File::open(dir)).await
        };
        let synced = match opened {
            Ok(d) => storage::off_core(move || d.sync_all())
                .await
                .map_err(|e| self.poison("fsync of the CommitLog directory", &e)),
            Err(e) => Err(ShardError::making_room(
                &dir,
                "opening the CommitLog directory to fsync it",
                e,
            )),
        };
        if let Err(e) = synced {
            drop(f);
            if e.is_shortage() {
                let doomed = vec![Doomed {
                    path: path.clone(),
                    map: None,
                    truncate: true,
                }];
                if let Err(r) = remove_off_core(doomed).await {
                    tracing::warn!(error = %r, path = %path.display(), "cannot remove a half-created segment");
                }
            }
            return Err(e);
        }
        Ok(Rc::new(f))
    }

    /// With `warm_segments`: finds the spare a previous run left, and fills one if there is
    /// none. The first segment of an empty log is made from it, so it is filled before the
    /// shard serves; otherwise it fills in the background.
    async fn open_spare(&self) -> Result<(), ShardError> {
        let inner = &self.inner;
        if !inner.config.warm_segments {
            return Ok(());
        }
        let (dir, size, needs_segment) = {
            let log = inner.log.borrow();
            let current = log.segment_start(log.write_offset);
            (
                log.dir.clone(),
                log.segment_bytes,
                !log.segments.contains_key(&current),
            )
        };
        if storage::spare_ready(&dir, size).await? {
            inner.spare.set(Spare::Ready);
            return Ok(());
        }
        inner.spare.set(Spare::Absent);
        if needs_segment {
            // Nothing is served yet: fill at the disk's full speed.
            self.start_spare(false);
            while inner.spare.get() == Spare::Filling {
                inner.signals.spare_filled.wait().await;
            }
        } else {
            self.fill_spare();
        }
        Ok(())
    }

    /// Starts filling a spare segment in the background unless one is ready or filling.
    /// It is paced by the log: kept ahead of twice the log's progress through its current
    /// segment (so it is ready before the log needs it), otherwise trickled. Filled flat
    /// out, it held every durable send at 20,000/s above 1 ms for a second; at a steady
    /// 128 MiB/s, a third of them for eight seconds.
    fn fill_spare(&self) {
        self.start_spare(true);
    }

    fn start_spare(&self, paced: bool) {
        let inner = &self.inner;
        // On a full disk a spare would only take the last free space; the roll after the
        // disk has room again fills one.
        let full = inner.disk.get().1 == DiskLevel::Full;
        if inner.spare.get() != Spare::Absent || inner.closed.get() || full {
            return;
        }
        inner.spare.set(Spare::Filling);
        let (dir, size) = {
            let log = inner.log.borrow();
            (log.dir.clone(), log.segment_bytes)
        };
        let weak = Rc::downgrade(inner);
        let log_of = weak.clone();
        let pace = move |filled: u64| {
            let inner = log_of.upgrade().filter(|i| !i.closed.get())?;
            if !paced {
                return Some(Duration::ZERO);
            }
            let log = inner.log.borrow();
            let into = log.write_offset - log.segment_start(log.write_offset);
            let behind = filled < (2 * into).min(size);
            Some(Duration::from_millis(if behind { 1 } else { 20 }))
        };
        let space = inner.space.clone();
        glommio::spawn_local(async move {
            let filled = storage::fill_spare(dir, size, &space, pace).await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let next = match filled {
                Ok(storage::Filled::Ready) => Spare::Ready,
                Ok(storage::Filled::Unsupported) => Spare::Off,
                Ok(storage::Filled::Abandoned) => Spare::Absent,
                Err(e) => {
                    // The next segment is made the usual way; the one after tries again.
                    tracing::warn!(error = %e, "cannot fill a warm spare segment");
                    Spare::Absent
                }
            };
            inner.spare.set(next);
            inner.signals.spare_filled.notify_all();
        })
        .detach();
    }

    /// Writes every sealed chunk; with `sync`, also seals the current chunk and fdatasyncs.
    async fn flush(&self, sync: bool) -> Result<(), ShardError> {
        let started = Instant::now();
        self.write_sealed(sync).await?;
        if sync {
            self.sync_written(started).await?;
        }
        Ok(())
    }

    /// Writes every sealed chunk (first sealing the current one, with `seal`), keeping up
    /// to `write_queue_depth` writes in flight, until none is left.
    async fn write_sealed(&self, seal: bool) -> Result<(), ShardError> {
        let inner = &self.inner;
        let _permit = inner
            .flush_lock
            .acquire_permit(1)
            .await
            .map_err(crate::error::glommio_io)?;
        self.check_poisoned()?;
        if seal {
            inner.log.borrow_mut().seal();
        }
        // Up to `write_queue_depth` chunk writes in flight, completed in log order: the
        // written offset only ever covers a contiguous prefix.
        let depth = inner.config.write_queue_depth;
        let mut in_flight: VecDeque<glommio::task::JoinHandle<std::io::Result<()>>> =
            VecDeque::new();
        let mut failed: Option<(&'static str, std::io::Error)> = None;
        // End of the newest write submitted: a chunk starting below it (it rewrites the
        // partial block of a chunk sealed for a flush) waits until that write is done, since
        // overlapping O_DIRECT writes in flight together may land in either order.
        let mut submitted_end = 0u64;
        loop {
            while failed.is_none() && in_flight.len() < depth {
                let Some(chunk) = inner.log.borrow().unwritten_at(in_flight.len()) else {
                    break;
                };
                if !in_flight.is_empty() && chunk.base < submitted_end {
                    break;
                }
                submitted_end = chunk.base + chunk.buf.len() as u64;
                let seg = inner.log.borrow().segment_start(chunk.base);
                let file = match self.segment_file(seg).await {
                    Ok(f) => f,
                    Err(ShardError::Io(e)) => {
                        failed = Some(("segment create", e));
                        break;
                    }
                    Err(e) => {
                        // Not a failed write: a shortage (no space or descriptors for the
                        // next segment; `segment_file` marked the shard blocked and the
                        // flusher retries) or poison already set. The writes in flight
                        // still land before we report it; they are not marked written
                        // here, so the next pass writes those chunks again (same bytes,
                        // same place, none in flight then).
                        while let Some(w) = in_flight.pop_front() {
                            let _ = w.await;
                        }
                        return Err(e);
                    }
                };
                let write =
                    glommio::spawn_local(async move { file.write(chunk.buf, chunk.base).await })
                        .detach();
                in_flight.push_back(write);
            }
            let Some(write) = in_flight.pop_front() else {
                break;
            };
            match write.await {
                Some(Ok(())) if failed.is_none() => {
                    inner.log.borrow_mut().mark_written();
                    inner.signals.progress.notify_all();
                }
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    failed.get_or_insert(("write", e));
                }
                None => {
                    failed.get_or_insert(("write", std::io::Error::other("write task cancelled")));
                }
            }
        }
        if let Some((operation, e)) = failed {
            return Err(self.poison(operation, &e));
        }
        Ok(())
    }

    /// fdatasyncs every segment written since the last sync and marks what was written
    /// before it as durable. Up to `syncs_max` run at once; each marks the
    /// durable offset only after every sync started before it did (an earlier one may hold
    /// a segment this one does not sync).
    async fn sync_written(&self, started: Instant) -> Result<(), ShardError> {
        let inner = &self.inner;
        let _permit = inner
            .sync_lock
            .acquire_permit(1)
            .await
            .map_err(crate::error::glommio_io)?;
        self.check_poisoned()?;
        let ticket = inner.sync_next_ticket.get();
        inner.sync_next_ticket.set(ticket + 1);
        let (target, segs) = {
            let mut log = inner.log.borrow_mut();
            let segs = std::mem::take(&mut log.dirty_segments);
            (log.written_offset, segs)
        };
        inner.sync_covers.set(inner.sync_covers.get().max(target));
        let mut failed = None;
        for seg in segs {
            let file = inner.log.borrow().segments.get(&seg).cloned();
            if let Some(file) = file {
                if let Err(e) = file.fdatasync().await {
                    failed = Some(e);
                    break;
                }
            }
        }
        // Every path below finishes this ticket, or later syncs would wait forever.
        while inner.sync_done_ticket.get() < ticket {
            inner.signals.progress.wait().await;
        }
        let result = match failed {
            Some(e) => Err(self.poison("fdatasync", &e)),
            None => {
                inner.log.borrow_mut().mark_durable(target);
                if inner.config.flush == FlushPolicy::Sync {
                    // Sync-flush readers are served only what is durable: this is new to them.
                    inner.signals.new_message.notify_all();
                }
                inner.last_sync.set(Instant::now());
                if let Some(o) = &inner.config.flush_observer {
                    o.observe(started.elapsed());
                }
                Ok(())
            }
        };
        inner.sync_done_ticket.set(ticket + 1);
        inner.signals.progress.notify_all();
        inner.signals.flush_wake.notify_all();
        result
    }

    /// The async policy's periodic sync: seals the current chunk if it has been filling
    /// for a whole interval (a younger one is sealed when full, soon), waits until
    /// everything sealed is written (by the write pipeline, which keeps going meanwhile)
    /// and fdatasyncs it. So data is durable at most about two intervals after its append.
    async fn background_sync(&self, interval: Duration) {
        let inner = &self.inner;
        let _pending = scopeguard_pending(&inner.sync_pending);
        let started = Instant::now();
        let goal = inner.log.borrow_mut().seal_if_older(interval);
        inner.signals.flush_wake.notify_all();
        while inner.log.borrow().written_offset < goal {
            if inner.poisoned.borrow().is_some() || inner.closed.get() {
                return;
            }
            inner.signals.progress.wait().await;
        }
        // Errors poison the shard and reach the next append.
        let _ = self.sync_written(started).await;
    }

    /// Forces everything appended so far to disk.
    pub async fn sync(&self) -> Result<(), ShardError> {
        self.flush(true).await
    }

    fn count_disk_read(&self, len: usize) {
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
    /// are issued. A read started ahead that covers one of its own is used instead.
    async fn fetch_then(
        &self,
        spans: &[(u64, usize)],
        ahead: impl FnOnce() -> Vec<(u64, usize)>,
    ) -> Result<Vec<Fetched>, ShardError> {
        let plan = self.fetch_plan(spans);
        let files: Vec<Option<Rc<SegmentFile>>> = plan
            .iter()
            .map(|p| match p {
                Located::Disk(f) => Some(f.clone()),
                _ => None,
            })
            .collect();
        let cold = group_cold_reads(spans, &files);
        let mut reads = VecDeque::with_capacity(cold.len());
        for c in &cold {
            let found = self
                .inner
                .readahead
                .borrow_mut()
                .take(&c.file, c.from, c.len);
            let pending = match found {
                Some((base, slot)) => Pending::Ahead(base, slot),
                None => {
                    self.count_disk_read(c.len as usize);
                    let (f, from, len) = (c.file.clone(), c.from, c.len as usize);
                    Pending::Read(glommio::spawn_local(async move {
                        f.read_aligned(from, len).await
                    }))
                }
            };
            reads.push_back((c, pending));
        }
        if !cold.is_empty() {
            self.read_ahead(&ahead());
        }
        let mut out: Vec<Fetched> = Vec::with_capacity(spans.len());
        let mut i = 0;
        while i < spans.len() {
            match &plan[i] {
                Located::Gone => {
                    out.push(Fetched::Gone);
                    i += 1;
                }
                Located::Memory(s) => {
                    out.push(match check_record(s.as_bytes(), spans[i].0, false) {
                        Ok(()) => Fetched::Record(s.clone()),
                        Err(reason) => Fetched::Bad {
                            segment: None,
                            reason,
                        },
                    });
                    i += 1;
                }
                Located::Disk(file) => {
                    let Some((c, pending)) = reads.pop_front() else {
                        return Err(ShardError::Corrupt {
                            path: file.path.display().to_string(),
                            reason: "read plan out of step".into(),
                        });
                    };
                    let (base, r) = match pending {
                        Pending::Read(task) => (c.from, task.await?),
                        Pending::Ahead(base, slot) => match SlotWait(slot).await {
                            Some(r) => (base, r),
                            None => {
                                // The read ahead failed: read again, and report its error.
                                self.count_disk_read(c.len as usize);
                                (c.from, c.file.read_aligned(c.from, c.len as usize).await?)
                            }
                        },
                    };
                    for &(o, l) in &spans[i..=c.last] {
                        // A file shorter than the record (cut outside the broker) is damage
                        // like any other: that record is stepped over, not the whole pull
                        // failed, or the queue would stall on it.
                        let checked = StoredSlice::from_read(&r, (o - base) as usize, l)
                            .ok_or_else(|| "the segment file ends inside the record".to_owned())
                            .and_then(|s| check_record(s.as_bytes(), o, true).map(|()| s));
                        out.push(match checked {
                            Ok(s) => Fetched::Record(s),
                            Err(reason) => Fetched::Bad {
                                segment: Some(file.path.clone()),
                                reason,
                            },
                        });
                    }
                    i = c.last + 1;
                }
            }
        }
        Ok(out)
    }

    /// Starts reading the spans of `spans` that only the segment files hold.
    fn read_ahead(&self, spans: &[(u64, usize)]) {
        if spans.is_empty() {
            return;
        }
        let files: Vec<Option<Rc<SegmentFile>>> = {
            let log = self.inner.log.borrow();
            spans.iter().map(|&(o, l)| log.disk_file(o, l)).collect()
        };
        for c in group_cold_reads(spans, &files) {
            let started = self
                .inner
                .readahead
                .borrow_mut()
                .start(c.file, c.from, c.len);
            if started {
                self.count_disk_read(c.len as usize);
            }
        }
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
        let visible = self.visible_max(req.topic, req.queue_id);
        let result = |status, next| ReadResult {
            status,
            next_queue_offset: next,
            min_offset: min,
            max_offset: max,
            records: Vec::new(),
        };
        if req.queue_offset < min {
            return Ok(result(ReadStatus::OffsetMoved, min));
        }
        if req.queue_offset > max {
            return Ok(result(ReadStatus::OffsetOverflow, max));
        }
        if req.queue_offset >= visible {
            return Ok(result(ReadStatus::NoNewMessage, req.queue_offset));
        }
        let Some(Picked {
            spans: picked,
            next,
            skipped,
        }) = self.pick(req, req.queue_offset, visible)?
        else {
            return Ok(result(ReadStatus::NoNewMessage, 0));
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
                    let q = self.queue_offset_of(req, req.queue_offset, next, picked[i]);
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
            next_queue_offset: next,
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
                min: cq.min.0,
                max: cq.max.0,
            })
            .unwrap_or_default()
    }

    /// The record starting at `commit_log_offset`; `None` if no record starts there or its
    /// segment was deleted.
    pub async fn read_at(&self, commit_log_offset: u64) -> Result<Option<StoredSlice>, ShardError> {
        let off = commit_log_offset;
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
            || total as usize > self.inner.config.message_bytes_max.max(head_len)
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
            let Some(s) = self.read_at(off).await? else {
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

    /// First queue offset whose store time is >= `timestamp_ms` (the max offset if none).
    pub async fn search_offset_by_time(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
    ) -> Result<u64, ShardError> {
        let QueueOffsets { min, max } = self.queue_offsets(topic, queue_id);
        let (mut lo, mut hi) = (min, max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let entry = self
                .inner
                .cqs
                .borrow()
                .get(topic, queue_id)
                .map(|cq| cq.get(QueueOffset(mid)))
                .transpose()?
                .flatten();
            // A record gone, damaged or missing has no time: it counts as older, so the
            // search moves on past it.
            let quarantined = entry.is_some_and(|e| {
                self.inner
                    .quarantine
                    .borrow()
                    .blocking(e.offset.0, e.size as u64)
                    .is_some()
            });
            let ts = match entry.filter(|_| !quarantined) {
                Some(e) => match self.fetch(&[(e.offset.0, e.size as usize)]).await?.pop() {
                    Some(Fetched::Record(s)) => {
                        RecordView::parse(s.as_bytes())?.store_timestamp_ms()
                    }
                    _ => i64::MIN,
                },
                None => i64::MIN,
            };
            if ts >= timestamp_ms {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// Resolves when the queue's max offset exceeds `after_queue_offset` (true) or the
    /// timeout passes (false): long polling.
    pub async fn wait_for_message(
        &self,
        topic: &str,
        queue_id: u32,
        after_queue_offset: u64,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.visible_max(topic, queue_id) > after_queue_offset {
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

    fn measure_disk(&self) -> (f64, DiskLevel) {
        let c = &self.inner.config;
        let ratio = match c.disk_usage.used_ratio(&c.dir) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot measure disk use; assuming it is fine");
                0.0
            }
        };
        let level = if ratio >= c.disk_refuse_ratio {
            DiskLevel::Full
        } else if ratio >= c.disk_force_clean_ratio {
            DiskLevel::ForceClean
        } else if ratio >= c.disk_clean_ratio {
            DiskLevel::Clean
        } else {
            DiskLevel::Normal
        };
        // Logged once per change of level, never per message.
        let previous = self.inner.disk.get().1;
        if previous != level {
            let shard = c.shard_id;
            match level {
                DiskLevel::Full => tracing::error!(
                    shard, ratio, threshold = c.disk_refuse_ratio,
                    "disk full: use ratio {ratio:.3} >= disk_refuse_ratio {:.3}; refusing sends until space returns",
                    c.disk_refuse_ratio
                ),
                DiskLevel::ForceClean => tracing::warn!(
                    shard, ratio, threshold = c.disk_force_clean_ratio,
                    "disk use {ratio:.3} >= disk_force_clean_ratio {:.3}: deleting the oldest segments early",
                    c.disk_force_clean_ratio
                ),
                DiskLevel::Clean => tracing::warn!(
                    shard, ratio, threshold = c.disk_clean_ratio,
                    "disk use {ratio:.3} >= disk_clean_ratio {:.3}: cleaning segments",
                    c.disk_clean_ratio
                ),
                DiskLevel::Normal => tracing::info!(shard, ratio, "disk use {ratio:.3} is back below every threshold"),
            }
        }
        self.inner.disk.set((ratio, level));
        self.inner.disk_measured.set(Instant::now());
        (ratio, level)
    }

    /// One retention pass: measure the disk, delete expired segments (and, when the disk is
    /// filling, the oldest ones), and move ConsumeQueue and IndexFile minimums after them.
    pub async fn run_retention(&self) -> Result<RetentionReport, ShardError> {
        let inner = &self.inner;
        let (mut ratio, mut level) = self.measure_disk();
        let reserved = Duration::from_secs(inner.config.file_reserved_hours * 3600);
        let mut deleted = 0usize;
        loop {
            // Never the segment being written, nor one holding bytes not yet durable.
            let candidate = {
                let log = inner.log.borrow();
                let active = log.segment_start(log.write_offset);
                log.segments
                    .iter()
                    .next()
                    .map(|(&s, f)| (s, f.clone()))
                    .filter(|(s, _)| *s < active && s + log.segment_bytes <= log.durable_offset)
            };
            let Some((start, file)) = candidate else {
                break;
            };
            let expired = std::fs::metadata(&file.path)
                .and_then(|m| m.modified())
                .map(|t| t.elapsed().unwrap_or_default() >= reserved)
                .unwrap_or(false);
            let pressure = match level {
                DiskLevel::Normal => false,
                DiskLevel::Clean => deleted == 0,
                DiskLevel::ForceClean | DiskLevel::Full => true,
            };
            if !expired && !pressure {
                break;
            }
            tracing::info!(
                segment = start,
                expired,
                ?level,
                "retention deletes a segment"
            );
            {
                let mut log = inner.log.borrow_mut();
                log.segments.remove(&start);
                let next = start + log.segment_bytes;
                log.forget_below(next);
            }
            // A cold read in flight still holds the file: then only unlink it.
            let segment = Doomed {
                path: file.path.clone(),
                map: None,
                truncate: Rc::strong_count(&file) == 1,
            };
            drop(file);
            remove_off_core(vec![segment]).await?;
            deleted += 1;
            if level >= DiskLevel::ForceClean {
                (ratio, level) = self.measure_disk();
                if level < DiskLevel::Clean {
                    break;
                }
            }
        }
        let min = inner.log.borrow().min_offset;
        if deleted > 0 {
            let mut doomed = Vec::new();
            for cq in inner.cqs.borrow_mut().queues.values_mut() {
                doomed.extend(cq.trim_below(CommitLogOffset(min))?);
            }
            doomed.extend(inner.index.borrow_mut().trim_below(min));
            inner.quarantine.borrow_mut().forget_below(min);
            remove_off_core(doomed).await?;
            (ratio, level) = self.measure_disk();
        }
        Ok(RetentionReport {
            deleted_segments: deleted,
            min_offset: min,
            disk_use_ratio: ratio,
            disk_level: level,
        })
    }

    pub fn stats(&self) -> ShardStats {
        let inner = &self.inner;
        let log = inner.log.borrow();
        let (ratio, level) = inner.disk.get();
        let (cq_mapped, cq_unmapped) = inner.cqs.borrow().map_counts();
        ShardStats {
            write_offset: log.write_offset,
            written_offset: log.written_offset,
            durable_offset: log.durable_offset,
            min_offset: log.min_offset,
            commit_log_bytes: log.segments.len() as u64 * log.segment_bytes,
            disk_use_ratio: ratio,
            disk_level: level,
            appends: inner.appends.get(),
            appended_bytes: inner.appended_bytes.get(),
            disk_reads: inner.disk_reads.get(),
            disk_read_bytes: inner.disk_read_bytes.get(),
            poisoned: inner.poisoned.borrow().is_some(),
            recovery_truncated_segments: inner.truncated_segments,
            direct_io: log.segments.values().all(|f| f.is_direct()),
            chunk_buffers_allocated: log.buffers_allocated,
            readahead_started: inner.readahead.borrow().started,
            readahead_hits: inner.readahead.borrow().hits,
            tail_ring_records: inner.ring_records,
            busy_refusals: inner.busy_refusals.get(),
            quarantined_ranges: inner.quarantine.borrow().count(),
            quarantined_bytes: inner.quarantine.borrow().bytes(),
            skipped_records: inner.quarantine.borrow().skipped_records,
            writes_blocked: inner.blocked.borrow().is_some(),
            cq_files_mapped: cq_mapped as u64,
            cq_files_unmapped: cq_unmapped,
        }
    }

    /// (topic, queue) pairs that have data.
    pub fn topics(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .inner
            .cqs
            .borrow()
            .queues
            .iter()
            .filter(|(_, cq)| cq.max > cq.min)
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Refuses new appends, then flushes and fdatasyncs everything appended before, syncs
    /// ConsumeQueues and IndexFiles, stops the tasks. On `Ok` every append this shard
    /// accepted is written and synced. A poisoned shard reports `Poisoned` here too. A
    /// second call returns `Ok` at once (the first one's flush covers everything).
    pub async fn close(&self) -> Result<(), ShardError> {
        let inner = &self.inner;
        if inner.closed.get() {
            return Ok(());
        }
        // Closed first: an append checks `closed` and then copies into the log without
        // yielding, so from here on nothing enters the log and the flush below covers every
        // append accepted. Flushing first left a window in which async appends were
        // acknowledged from memory and never written (69-86 lost per SIGTERM under load).
        inner.closed.set(true);
        let flushed = self.flush(true).await;
        if flushed.is_ok() {
            let log = inner.log.borrow();
            debug_assert_eq!(log.durable_offset, log.write_offset);
        }
        inner.signals.stop.notify_all();
        inner.signals.flush_wake.notify_all();
        inner.signals.progress.notify_all();
        inner.signals.new_message.notify_all();
        inner.cqs.borrow().flush()?;
        inner.index.borrow().flush()?;
        if flushed.is_ok() {
            // Everything in the ring is written and synced: leave nothing behind.
            let ring = inner.log.borrow_mut().ring.take();
            if let Some(ring) = ring {
                ring.remove()?;
            }
        }
        flushed
    }
}

/// Checks a record on its way to a reader: structure, position and (for bytes that came
/// from disk) CRC. The write path checked the same when it stamped the record. The error
/// says what failed.
fn check_record(bytes: &[u8], offset: u64, from_disk: bool) -> Result<(), String> {
    let v = RecordView::parse(bytes).map_err(|e| e.to_string())?;
    if v.len() != bytes.len() || v.physical_offset() != offset {
        return Err("record does not start where its index says".into());
    }
    if from_disk {
        v.verify_crc().map_err(|e| e.to_string())?;
    } else {
        debug_assert!(v.verify_crc().is_ok());
    }
    Ok(())
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

/// Clears the flag when dropped (also when the task is dropped mid-way).
fn scopeguard_pending(flag: &Cell<bool>) -> impl Drop + '_ {
    struct Clear<'a>(&'a Cell<bool>);
    impl Drop for Clear<'_> {
        fn drop(&mut self) {
            self.0.set(false);
        }
    }
    Clear(flag)
}

async fn flusher(weak: Weak<Inner>, signals: Rc<Signals>) {
    loop {
        // A segment could not be created (disk full, no descriptors): pause before the
        // pass below tries again, so a full disk is retried a few times a second, not spun
        // on. The pass that succeeds clears it and the writes resume by themselves.
        let blocked = weak.upgrade().is_some_and(|i| i.blocked.borrow().is_some());
        if blocked {
            futures_lite::future::or(
                signals.stop.wait(),
                glommio::timer::sleep(SEGMENT_CREATE_RETRY),
            )
            .await;
        }
        let wait = {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if inner.closed.get() {
                return;
            }
            let shard = Shard { inner };
            let inner = &shard.inner;
            let poisoned = inner.poisoned.borrow().is_some();
            let (unwritten, dirty) = {
                let log = inner.log.borrow();
                (!log.unwritten.is_empty(), log.dirty_bytes())
            };
            match inner.config.flush {
                FlushPolicy::Sync => {
                    let uncovered = inner.log.borrow().write_offset > inner.sync_covers.get();
                    if uncovered && !poisoned && inner.group_syncs.get() < inner.syncs_max {
                        // Group commit: every append waiting now shares this group's write
                        // and sync. The sync runs on its own, so the next group is written
                        // (and its sync started) while this one's is still in flight.
                        let started = Instant::now();
                        if shard.write_sealed(true).await.is_ok() {
                            let covers = inner.log.borrow().written_offset;
                            inner.sync_covers.set(inner.sync_covers.get().max(covers));
                            inner.group_syncs.set(inner.group_syncs.get() + 1);
                            let s = shard.clone();
                            glommio::spawn_local(async move {
                                // Errors poison the shard and reach the waiting appends.
                                let _ = s.sync_written(started).await;
                                s.inner.group_syncs.set(s.inner.group_syncs.get() - 1);
                                s.inner.signals.flush_wake.notify_all();
                            })
                            .detach();
                        }
                        None
                    } else {
                        // Nothing new, or every sync slot busy: an append or a finishing
                        // sync wakes us.
                        Some(Duration::from_millis(100))
                    }
                }
                FlushPolicy::Async {
                    interval_ms,
                    dirty_bytes_max,
                } => {
                    let interval = Duration::from_millis(interval_ms);
                    let due = dirty > 0
                        && (dirty >= dirty_bytes_max
                            || inner.last_sync.get().elapsed() >= interval);
                    // At most one periodic sync at a time; it runs beside the writes.
                    if due && !poisoned && !inner.sync_pending.get() {
                        inner.last_sync.set(Instant::now());
                        inner.sync_pending.set(true);
                        let s = shard.clone();
                        glommio::spawn_local(async move { s.background_sync(interval).await })
                            .detach();
                    }
                    if unwritten && !poisoned {
                        // Errors poison the shard and are reported to the appends.
                        let _ = shard.write_sealed(false).await;
                        None
                    } else {
                        Some(interval)
                    }
                }
            }
        };
        if let Some(idle) = wait {
            signals.flush_wake.wait_timeout(idle).await;
        }
    }
}

async fn retention_task(weak: Weak<Inner>, signals: Rc<Signals>, every: Duration) {
    loop {
        futures_lite::future::or(signals.stop.wait(), glommio::timer::sleep(every)).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if inner.closed.get() {
            return;
        }
        let shard = Shard { inner };
        if let Err(e) = shard.run_retention().await {
            tracing::warn!(error = %e, "retention pass failed");
        }
    }
}

/// One aligned read of [`Shard::fetch`]: the spans up to index `last` from the one that
/// starts it, `[from, from + len)` of `file`.
struct ColdRead {
    last: usize,
    from: u64,
    len: u64,
    file: Rc<SegmentFile>,
}

/// A cold read under way: issued by the pull itself, or found among the reads ahead (with
/// the offset that read starts at).
enum Pending {
    Read(glommio::Task<std::io::Result<storage::ReadBytes>>),
    Ahead(u64, Rc<crate::readahead::Slot>),
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
            last: j,
            from,
            len: align_up(spans[j].0 + spans[j].1 as u64) - from,
            file: file.clone(),
        });
        i = j + 1;
    }
    out
}
