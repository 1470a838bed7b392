//! The flush path: sealed tail chunks are written to their segment files, fdatasyncs
//! advance the durable offset (group commit for the sync profile), new segments are
//! created (from a warm spare when there is one), and a failed write or sync poisons the
//! shard.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::storage::{self, SegmentFile};
use crate::{FlushPolicy, ShardError};

use super::{Inner, Shard, Signals, Spare, SEGMENT_CREATE_RETRY};

/// A sync that made fewer than `unsynced_bytes_max / PACE_SAMPLE_FRACTION` bytes durable
/// does not count towards the rate that paces appends (see `append::Pacer::observe`).
const PACE_SAMPLE_FRACTION: u64 = 64;
/// A segment creation at least this slow is logged.
const SLOW_SEGMENT_CREATION: Duration = Duration::from_millis(100);

impl Shard {
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
        let creating = Instant::now();
        match self.create_segment(start).await {
            Ok(f) => {
                // The log's chunk writes wait for the new segment: a slow creation (its
                // journal commits on a busy filesystem) shows up as unwritten bytes.
                let took = creating.elapsed();
                if took >= SLOW_SEGMENT_CREATION {
                    tracing::warn!(
                        shard = self.inner.config.shard_id,
                        segment = start,
                        ms = took.as_millis() as u64,
                        "creating the next CommitLog segment took {} ms; the log's writes waited for it",
                        took.as_millis()
                    );
                }
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
            self.inner.storage.check(&path, size)?;
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
                storage::remove_half_made_off_core(&path, "segment").await;
            }
            return Err(e);
        }
        Ok(Rc::new(f))
    }

    /// Writes every sealed chunk; with `sync`, also seals the current chunk and fdatasyncs.
    pub(super) async fn flush(&self, sync: bool) -> Result<(), ShardError> {
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
        inner.flush_step.set("waiting for the flush lock");
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
        // Each write's task with where it is (see `WriteStage`).
        type InFlight = (
            glommio::task::JoinHandle<std::io::Result<()>>,
            Rc<Cell<WriteStage>>,
        );
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut failed: Option<(&'static str, std::io::Error)> = None;
        // End of the newest write submitted: a chunk starting below it (it rewrites the
        // partial block of a chunk sealed for a flush) waits until that write is done, since
        // overlapping O_DIRECT writes in flight together may land in either order.
        let mut submitted_end = 0u64;
        loop {
            inner.flush_step.set("submitting chunk writes");
            while failed.is_none() && in_flight.len() < depth {
                let Some(chunk) = inner.log.borrow().unwritten_at(in_flight.len()) else {
                    break;
                };
                if !in_flight.is_empty() && chunk.base < submitted_end {
                    break;
                }
                submitted_end = chunk.base + chunk.buf.len() as u64;
                let seg = inner.log.borrow().segment_start(chunk.base);
                inner.flush_step.set("opening or creating a segment");
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
                        while let Some((w, _)) = in_flight.pop_front() {
                            let _ = w.await;
                        }
                        return Err(e);
                    }
                };
                let stage = Rc::new(Cell::new(WriteStage::Spawned));
                let at = stage.clone();
                let write = glommio::spawn_local(async move {
                    at.set(WriteStage::Writing);
                    let written = file.write(chunk.buf, chunk.base).await;
                    at.set(WriteStage::Returned);
                    written
                })
                .detach();
                in_flight.push_back((write, stage));
            }
            let Some((write, stage)) = in_flight.pop_front() else {
                break;
            };
            inner.flush_step.set("waiting for a chunk write");
            *inner.front_write.borrow_mut() = Some(stage);
            let written = write.await;
            *inner.front_write.borrow_mut() = None;
            match written {
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
        let synced_from = Instant::now();
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
                let newly_durable = {
                    let mut log = inner.log.borrow_mut();
                    let before = log.durable_offset;
                    log.mark_durable(target);
                    log.durable_offset - before
                };
                // What the disk makes durable per second paces async appends (see
                // `wait_for_room`).
                inner.pacer.borrow_mut().observe(
                    newly_durable,
                    synced_from.elapsed(),
                    inner.limits.get().unsynced_bytes_max / PACE_SAMPLE_FRACTION,
                );
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

pub(super) async fn flusher(weak: Weak<Inner>, signals: Rc<Signals>) {
    loop {
        // A segment could not be created (disk full, no descriptors): pause before the
        // pass below tries again, so a full disk is retried a few times a second, not spun
        // on. The pass that succeeds clears it and the writes resume by themselves.
        let blocked = weak.upgrade().is_some_and(|i| i.blocked.borrow().is_some());
        if blocked {
            if let Some(inner) = weak.upgrade() {
                inner.flush_step.set("waiting to retry creating a segment");
            }
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
                FlushPolicy::Async { .. } => {
                    // The period and bound in force now, which may change while it runs.
                    let limits = inner.limits.get();
                    let dirty_bytes_max = limits.flush_dirty_bytes_max;
                    let interval = Duration::from_millis(limits.flush_interval_ms);
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
            if let Some(inner) = weak.upgrade() {
                inner.flush_step.set("waiting for a sealed chunk");
            }
            signals.flush_wake.wait_timeout(idle).await;
        }
    }
}

/// Where a chunk write is: its task not yet run, its write given to the kernel and not
/// returned, or returned while its task has not ended.
#[derive(Clone, Copy, Debug)]
pub(super) enum WriteStage {
    Spawned,
    Writing,
    Returned,
}

impl WriteStage {
    fn describe(self) -> &'static str {
        match self {
            WriteStage::Spawned => "its task has not run yet",
            WriteStage::Writing => "given to the kernel, not returned",
            WriteStage::Returned => "returned, its task not ended",
        }
    }
}

/// How long the CommitLog may hold unwritten bytes without writing any before a warning.
const WRITES_STALLED_WARN: Duration = Duration::from_secs(5);
/// How often the warning comes again while the writes stay stalled.
const WRITES_STALLED_REPEAT: Duration = Duration::from_secs(60);

/// Warns when the CommitLog holds unwritten bytes and none was written for
/// [`WRITES_STALLED_WARN`] (again every [`WRITES_STALLED_REPEAT`] while it lasts), naming
/// what the flusher waits for: sends are refused ("the disk is behind") while the disk may
/// be idle.
pub(super) async fn write_watchdog(weak: Weak<Inner>) {
    let mut last = None;
    let mut since = Instant::now();
    let mut warned: Option<Instant> = None;
    loop {
        glommio::timer::sleep(Duration::from_secs(1)).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if inner.closed.get() {
            return;
        }
        let (written, unwritten, sealed) = {
            let log = inner.log.borrow();
            (
                log.written_offset,
                log.unwritten_bytes(),
                log.unwritten.len(),
            )
        };
        if unwritten == 0 || last != Some(written) {
            last = Some(written);
            since = Instant::now();
            warned = None;
            continue;
        }
        let stalled = since.elapsed();
        let due = match warned {
            None => stalled >= WRITES_STALLED_WARN,
            Some(at) => at.elapsed() >= WRITES_STALLED_REPEAT,
        };
        if due {
            warned = Some(Instant::now());
            let front = inner
                .front_write
                .borrow()
                .as_ref()
                .map_or("none", |w| w.get().describe());
            tracing::warn!(
                shard = inner.config.shard_id,
                written,
                unwritten,
                sealed_chunks = sealed,
                flusher = inner.flush_step.get(),
                oldest_write = front,
                "the CommitLog wrote nothing for {} s with {unwritten} bytes unwritten; the flusher is {} (the oldest chunk write: {front})",
                stalled.as_secs(),
                inner.flush_step.get()
            );
        }
    }
}
