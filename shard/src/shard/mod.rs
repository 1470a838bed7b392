//! [`Shard`]: one core's storage engine, tying the CommitLog, ConsumeQueues and IndexFiles
//! together, with its flusher and retention tasks on the current glommio executor.
//!
//! This file holds the state and its lifecycle (open with recovery, stats, close); each job
//! has its own file, all over the same [`Inner`]:
//!
//! - `append`: validate, stamp, derive and copy a batch into the tail; back-pressure.
//! - `flush`: write sealed chunks, fdatasync (group commit), create segments, poison.
//! - `read`: pulls, lookups by offset/key/time, cold reads and read-ahead, the long poll.
//! - `retention`: disk use levels and segment deletion.
//! - `spares`: warm segments filled ahead of the log.
//!
//! What each record adds to the derived indexes (ConsumeQueue, IndexFile) is decided once,
//! in `crate::derived::derive`, for both the append and recovery.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use message::TagFilter;

use crate::clean_stop::{self, RecoveryReport};
use crate::commit_log::{self, CommitLog, LogParams};
use crate::consume_queue::ConsumeQueues;
use crate::derived::{derive, queue_of, Derive, StoredRecord};
use crate::index_file::IndexService;
use crate::layout::{COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, INDEX_DIR};
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::quarantine::{Quarantine, QuarantinedRange};
use crate::readahead::Readahead;
use crate::signal::Signal;
use crate::slice::StoredSlice;
use crate::storage;
use crate::tail_ring::{self, TailRing};
use crate::{FlushPolicy, ShardConfig, ShardError};

mod append;
mod flush;
mod read;
mod replica;
mod retention;
mod spares;

use flush::flusher;
pub use replica::LogRun;
use retention::retention_task;

/// fdatasyncs in flight at once. A sync covers what was written before it started, so the
/// next group's sync need not wait for the previous one's: on this kind of disk two
/// concurrent write+fdatasync streams each keep the latency of one, when the syncs commit
/// the filesystem journal (preallocated segments). With `warm_segments` (a sync is a bare
/// device cache flush) two in flight were also better than one in 3 alternating durable
/// runs at 20,000 sends/s: the sync stage's p99.9 1.06-1.23 ms against 1.29-2.04 ms, p99
/// 0.46-0.54 against 0.52-0.56 ms (BENCHMARKS.md, "Tail latency"). An earlier measurement
/// that favoured one was taken while the bench's pacer starved the disk's completions.
const SYNCS_IN_FLIGHT_MAX: usize = 2;
/// How long the flusher waits before it tries again to create a segment that could not be
/// created for lack of space or descriptors. Short enough that sends resume well within a
/// client's retry, long enough that a full disk costs no measurable CPU.
const SEGMENT_CREATE_RETRY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub first_queue_offset: QueueOffset,
    pub first_commit_log_offset: CommitLogOffset,
    pub count: u32,
    /// The store timestamp every record of the batch was stamped with (a held record's
    /// delivery time is counted from it).
    pub store_timestamp_ms: i64,
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
    pub queue_offset: QueueOffset,
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
    pub next_queue_offset: QueueOffset,
    pub min_offset: QueueOffset,
    pub max_offset: QueueOffset,
    /// One slice per record.
    pub records: Vec<StoredSlice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueOffsets {
    pub min: QueueOffset,
    pub max: QueueOffset,
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
    pub write_offset: CommitLogOffset,
    pub written_offset: CommitLogOffset,
    pub durable_offset: CommitLogOffset,
    pub min_offset: CommitLogOffset,
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
    pub min_offset: CommitLogOffset,
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
    /// The fields of `config` that may change while the shard runs, as they are now: read
    /// here, never in `config` (see [`Shard::set_limits`]).
    limits: Cell<crate::ShardLimits>,
    /// The largest record the shard may hold: the largest `message_bytes_max` in force since
    /// it opened, or the largest record its recovery found if larger. A record stored before
    /// the limit was lowered, in this run or an earlier one, is still read whole (by offset,
    /// by the timer, by replication).
    record_bytes_max: Cell<usize>,
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
    storage: storage::Storage,
    closed: Cell<bool>,
    last_sync: Cell<Instant>,
    appends: Cell<u64>,
    appended_bytes: Cell<u64>,
    busy_refusals: Cell<u64>,
    /// Paces async appends past a quarter of `unsynced_bytes_max` at the disk's durable rate.
    pacer: RefCell<append::Pacer>,
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
    /// What the open found about the last stop, and what recovery did.
    report: RecoveryReport,
    /// Records the tail ring held past its written mark at open (written back, or found
    /// on disk already).
    ring_records: u64,
    /// Damaged log ranges never served, and what readers stepped over.
    quarantine: RefCell<Quarantine>,
    spare: Cell<Spare>,
    /// Where the flusher is (what it waits for), for the warning of writes that make no
    /// progress (`flush::write_watchdog`).
    flush_step: Cell<&'static str>,
    /// Where the chunk write the flusher waits for is, while it waits.
    front_write: RefCell<Option<Rc<Cell<flush::WriteStage>>>>,
    /// The end of what this shard's replicas confirm (`u64::MAX`: no cap): readers are
    /// served up to it at most, so that a failover never takes back a record a consumer
    /// saw. Set by the broker's replication.
    read_cap: Cell<u64>,
    /// Retention deletes no segment reaching past this offset: the first record the broker's
    /// timer still holds (see [`Shard::set_retention_floor`]).
    retention_floor: Cell<u64>,
}

/// One core's storage engine. `!Send`: lives on one glommio executor. Cheap to clone.
#[derive(Clone)]
pub struct Shard {
    inner: Rc<Inner>,
}

impl Shard {
    /// Opens the shard in `config.dir`, recovering from whatever a crash left, and spawns
    /// its flusher and retention tasks on the current executor.
    pub async fn open(config: ShardConfig) -> Result<Shard, ShardError> {
        config.validate()?;
        std::fs::create_dir_all(&config.dir)?;
        // Taken away before anything below writes, so that a run which crashes from here on
        // leaves no mark for the next start to trust.
        let clean_stop_end = clean_stop::take(&config.dir)?;
        let storage = storage::Storage::new(&config);
        let mut cqs = ConsumeQueues::open(
            config.dir.join(CONSUME_QUEUE_DIR),
            config.consume_queue_file_entries,
            config.consume_queue_maps_max,
            storage.clone(),
        )?;
        let mut index = IndexService::open(
            config.dir.join(INDEX_DIR),
            config.index_file_slots,
            config.index_file_entries,
            storage.clone(),
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
                        &storage,
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
        // The largest record the log holds: stored under a limit higher than today's (the
        // limit was lowered before this start), it is still read whole.
        let mut largest_record = 0usize;
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
                largest_record = largest_record.max(view.len());
                let props = view.indexed_properties();
                let (topic, queue_id, held) = queue_of(view, &props);
                let rec = StoredRecord {
                    topic: view.topic(),
                    queue_offset: QueueOffset(view.queue_offset()),
                    commit_log_offset: CommitLogOffset(phys),
                    len: view.len() as u32,
                    store_timestamp_ms: view.store_timestamp_ms(),
                    props: &props,
                    held,
                };
                let cq = cqs.get_or_create(topic, queue_id);
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
        storage.remove(doomed).await?;
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
        let report = RecoveryReport {
            end: log.write_offset,
            clean_stop_end,
            cut: recovered.cut,
            quarantined_ranges: recovered.quarantined.len() as u64,
            truncated_segments: recovered.truncated_segments as u64,
            ring_records,
        };
        report.log(config.shard_id);
        let syncs_max = SYNCS_IN_FLIGHT_MAX;
        let inner = Rc::new(Inner {
            limits: Cell::new(config.limits()),
            record_bytes_max: Cell::new(config.message_bytes_max.max(largest_record)),
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
            storage,
            closed: Cell::new(false),
            last_sync: Cell::new(Instant::now()),
            appends: Cell::new(0),
            appended_bytes: Cell::new(0),
            busy_refusals: Cell::new(0),
            pacer: RefCell::new(append::Pacer::default()),
            disk_reads: Cell::new(0),
            disk_read_bytes: Cell::new(0),
            readahead: RefCell::new(Readahead::default()),
            disk: Cell::new((0.0, DiskLevel::Normal)),
            disk_measured: Cell::new(Instant::now()),
            truncated_segments: recovered.truncated_segments as u64,
            ring_records,
            report,
            quarantine: RefCell::new(Quarantine::from_recovery(recovered.quarantined)),
            spare: Cell::new(Spare::Off),
            flush_step: Cell::new("starting"),
            front_write: RefCell::new(None),
            read_cap: Cell::new(u64::MAX),
            retention_floor: Cell::new(u64::MAX),
        });
        let shard = Shard { inner };
        shard.measure_disk();
        shard.open_spare().await?;
        glommio::spawn_local(flusher(
            Rc::downgrade(&shard.inner),
            shard.inner.signals.clone(),
        ))
        .detach();
        glommio::spawn_local(flush::write_watchdog(Rc::downgrade(&shard.inner))).detach();
        glommio::spawn_local(retention_task(
            Rc::downgrade(&shard.inner),
            shard.inner.signals.clone(),
            Duration::from_millis(shard.inner.config.retention_check_interval_ms),
        ))
        .detach();
        Ok(shard)
    }

    /// Whether [`Shard::close`] has begun: nothing more enters the log.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get()
    }

    /// Whether a write or fdatasync has failed: the shard refuses sends until a restart.
    pub fn is_poisoned(&self) -> bool {
        self.inner.poisoned.borrow().is_some()
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
                threshold: inner.limits.get().disk_refuse_ratio,
            });
        }
        Ok(())
    }

    /// Changes the bounds and thresholds read at each use (the broker's config keys that
    /// apply while it runs): the next append, flusher pass and retention pass read them.
    /// Checked as the open checks them; nothing changes when they are refused.
    pub fn set_limits(&self, limits: crate::ShardLimits) -> Result<(), ShardError> {
        self.check_limits(limits)?;
        let inner = &self.inner;
        inner.limits.set(limits);
        inner
            .record_bytes_max
            .set(inner.record_bytes_max.get().max(limits.message_bytes_max));
        // The flusher may be asleep for the old period.
        inner.signals.flush_wake.notify_all();
        Ok(())
    }

    /// Whether [`Shard::set_limits`] would take `limits`; nothing changes.
    pub fn check_limits(&self, limits: crate::ShardLimits) -> Result<(), ShardError> {
        self.inner.config.with_limits(limits).validate()
    }

    /// The bounds and thresholds in force (see [`Shard::set_limits`]).
    pub fn limits(&self) -> crate::ShardLimits {
        self.inner.limits.get()
    }

    /// How the previous run stopped and what recovery did at this open: the same facts as
    /// the line the open logged.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.report
    }

    pub fn stats(&self) -> ShardStats {
        let inner = &self.inner;
        let log = inner.log.borrow();
        let (ratio, level) = inner.disk.get();
        let (cq_mapped, cq_unmapped) = inner.cqs.borrow().map_counts();
        ShardStats {
            write_offset: CommitLogOffset(log.write_offset),
            written_offset: CommitLogOffset(log.written_offset),
            durable_offset: CommitLogOffset(log.durable_offset),
            min_offset: CommitLogOffset(log.min_offset),
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
            .map(|(k, _)| (k.0.clone(), k.1))
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
            // Last: the mark tells the next start that everything up to here is on disk,
            // so it must follow every sync above.
            let end = inner.log.borrow().durable_offset;
            clean_stop::leave(&inner.config.dir, end)?;
        }
        flushed
    }
}
