//! A queue worker: one thread per consumed queue that takes the queue's lease, finds its
//! start offset, and pulls, hands batches to the listener and commits until it is stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use message::prop;

use super::retry::PROPERTY_DELIVER_AT_MS;
use super::{
    lock, pause_after, ConsumeFrom, ListenerKind, MessageModel, PushInner, ERROR_BACKOFF_MS,
    STOP_CHECK_MS,
};
use crate::consumer::PullOptions;
use crate::error::Result;
use crate::model::{
    now_ms, ConsumeStatus, MessageExt, MessageQueue, PullResult, PullStatus, QueueOffset,
};

/// Pause between attempts to take a queue another member still holds.
const LOCK_RETRY_MS: u64 = 100;
/// How often a member whose offset has not moved still commits it: the answer carries an
/// admin's reset (a newer epoch), which it adopts then. RocketMQ's clients send every queue's
/// offset every 5 s, moved or not.
const IDLE_COMMIT_EVERY: Duration = Duration::from_secs(5);

impl PushInner {
    fn acquire_permit(&self, stop: &AtomicBool) -> bool {
        let (m, cv) = &self.permits;
        let mut n = lock(m);
        while *n >= self.settings.consume_threads {
            if self.stopped() || stop.load(Ordering::Acquire) {
                return false;
            }
            n = cv
                .wait_timeout(n, Duration::from_millis(STOP_CHECK_MS))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *n += 1;
        true
    }

    fn release_permit(&self) {
        let (m, cv) = &self.permits;
        let mut n = lock(m);
        *n = n.saturating_sub(1);
        cv.notify_one();
    }
}

/// Numbers the consumes traced by this process.
static TRACE_REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Consumes one queue.
pub(super) struct QueueWorker {
    owner: Arc<PushInner>,
    queue: MessageQueue,
    opts: PullOptions,
    stop: Arc<AtomicBool>,
    listener: ListenerKind,
    offset: QueueOffset,
    epoch: u64,
    /// When the lease was last granted (clustering).
    lease_at: Option<Instant>,
    committed: Option<QueueOffset>,
    last_commit: Instant,
    /// When a commit last went to the broker.
    last_sent: Instant,
    /// The start offset is known (nothing is committed before).
    started: bool,
}

enum Lease {
    Held,
    /// Another member holds it: give the queue up.
    Lost,
    /// Not confirmed now (broker unreachable); consume only while the last grant lasts.
    Unknown,
}

impl QueueWorker {
    /// A worker for `queue` that has neither the lease nor a start offset yet.
    pub(super) fn new(
        owner: Arc<PushInner>,
        queue: MessageQueue,
        opts: PullOptions,
        stop: Arc<AtomicBool>,
        listener: ListenerKind,
    ) -> QueueWorker {
        QueueWorker {
            owner,
            queue,
            opts,
            stop,
            listener,
            offset: QueueOffset(0),
            epoch: 0,
            lease_at: None,
            committed: None,
            last_commit: Instant::now(),
            last_sent: Instant::now(),
            started: false,
        }
    }

    fn stopped(&self) -> bool {
        self.owner.stopped() || self.stop.load(Ordering::Acquire)
    }

    fn pause(&self, d: Duration) -> bool {
        self.owner.pause(d, &self.stop)
    }

    fn clustering(&self) -> bool {
        self.owner.settings.model == MessageModel::Clustering
    }

    fn lease_ms(&self) -> u64 {
        self.owner.settings.queue_lease_ms
    }

    fn lock(&mut self) -> Lease {
        let o = &self.owner;
        let asked = Instant::now();
        match o.pull.inst.lock_queue(
            &o.settings.group,
            &self.queue,
            &o.client_id,
            self.lease_ms(),
        ) {
            Ok(true) => {
                self.lease_at = Some(asked);
                Lease::Held
            }
            Ok(false) => Lease::Lost,
            Err(e) => {
                tracing::debug!(queue = %self.queue, error = %e, "lease renewal failed");
                Lease::Unknown
            }
        }
    }

    /// Whether this member may hand messages of the queue to the listener now: the lease,
    /// measured from when it was asked for, has a safety margin left.
    fn lease_valid(&self) -> bool {
        if !self.clustering() {
            return true;
        }
        let margin = self.lease_ms() / 10;
        self.lease_at.is_some_and(|at| {
            at.elapsed() < Duration::from_millis(self.lease_ms().saturating_sub(margin))
        })
    }

    /// Renews the lease when a third of it has passed; false if it is lost.
    fn renew_if_due(&mut self) -> bool {
        if !self.clustering() {
            return true;
        }
        let due = match self.lease_at {
            Some(at) => at.elapsed() >= Duration::from_millis(self.lease_ms() / 3),
            None => true,
        };
        if due && matches!(self.lock(), Lease::Lost) {
            tracing::info!(queue = %self.queue, "lease lost to another member");
            return false;
        }
        true
    }

    fn start_offset(&mut self) -> Result<()> {
        let o = &self.owner;
        let inst = &o.pull.inst;
        if let Some(store) = &o.local_offsets {
            if let Some(off) = store.get(&self.queue) {
                self.offset = off;
                self.committed = Some(off);
                return Ok(());
            }
        } else {
            let g = inst.query_group_offset(&o.settings.group, &self.queue)?;
            self.epoch = g.epoch;
            if let Some(off) = g.offset {
                self.offset = off;
                self.committed = Some(off);
                return Ok(());
            }
        }
        // The retry topic is always read from its start.
        let from = if self.queue.topic.starts_with("%RETRY%") {
            ConsumeFrom::First
        } else {
            o.settings.from
        };
        self.offset = match from {
            ConsumeFrom::First => inst.queue_offsets(&self.queue)?.0,
            ConsumeFrom::Last => inst.queue_offsets(&self.queue)?.1,
            ConsumeFrom::Timestamp(ms) => inst.search_offset(&self.queue, ms)?,
        };
        Ok(())
    }

    /// Commits the offset (and releases the lease with it when `release`).
    fn commit(&mut self, release: bool) {
        self.last_commit = Instant::now();
        let o = &self.owner;
        if let Some(store) = &o.local_offsets {
            store.set(&self.queue, self.offset);
            store.persist();
            self.committed = Some(self.offset);
            return;
        }
        if self.committed == Some(self.offset)
            && !release
            && self.last_sent.elapsed() < IDLE_COMMIT_EVERY
        {
            return;
        }
        self.last_sent = Instant::now();
        match o.pull.inst.commit_group_offset(
            &o.settings.group,
            &self.queue,
            self.offset,
            self.epoch,
            &o.client_id,
            release,
        ) {
            Ok(g) => {
                if g.epoch > self.epoch {
                    // An admin reset the offset: continue from there.
                    if let Some(off) = g.offset {
                        tracing::info!(queue = %self.queue, to = %off, "offset was reset");
                        self.offset = off;
                    }
                    self.epoch = g.epoch;
                }
                self.committed = g.offset;
            }
            Err(e) => tracing::warn!(queue = %self.queue, error = %e, "offset commit failed"),
        }
    }

    pub(super) fn run(mut self) {
        // Take the lease: the previous owner gives it back with its last commit.
        if self.clustering() {
            loop {
                if self.stopped() {
                    return;
                }
                match self.lock() {
                    Lease::Held => break,
                    Lease::Lost => {
                        self.pause(Duration::from_millis(LOCK_RETRY_MS));
                    }
                    Lease::Unknown => {
                        self.pause(Duration::from_millis(ERROR_BACKOFF_MS));
                    }
                }
            }
        }
        loop {
            if self.stopped() {
                self.finish();
                return;
            }
            match self.start_offset() {
                Ok(()) => {
                    self.started = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue, error = %e, "cannot find the start offset");
                    self.pause(Duration::from_millis(ERROR_BACKOFF_MS));
                }
            }
        }
        let commit_every = Duration::from_millis(self.owner.settings.commit_interval_ms);
        while !self.stopped() {
            if !self.renew_if_due() {
                // Another member has the queue: leave without committing over its progress.
                return;
            }
            if !self.lease_valid() {
                self.pause(Duration::from_millis(ERROR_BACKOFF_MS));
                continue;
            }
            match self.pull_once() {
                Ok(None) => break,
                Ok(Some(result)) => {
                    if result.status == PullStatus::OffsetMoved {
                        tracing::warn!(queue = %self.queue, from = %self.offset, to = %result.next_offset, "offset moved");
                    }
                    if !result.messages.is_empty() && !self.consume(result.messages) {
                        break;
                    }
                    self.offset = result.next_offset;
                }
                Err(e) if e.retry_after().is_some() => {
                    // Refused over a quota: expected at the quota's rate, and retried when
                    // the broker said.
                    tracing::debug!(queue = %self.queue, error = %e, "pull refused");
                    self.pause(pause_after(&e));
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue, error = %e, "pull failed");
                    self.pause(pause_after(&e));
                }
            }
            if self.last_commit.elapsed() >= commit_every {
                self.commit(false);
            }
        }
        self.finish();
    }

    /// A clean stop commits and releases; a crash leaves both as they are.
    fn finish(&mut self) {
        if self.owner.crashed.load(Ordering::Acquire) || !self.started {
            return;
        }
        // Also when nothing was consumed: it records where the group starts.
        self.commit(true);
    }

    /// One pull, abandoned if the worker stops while it waits. `Ok(None)` when stopped.
    fn pull_once(&self) -> Result<Option<PullResult>> {
        let mut opts = self.opts.clone();
        if self.clustering() {
            opts.suspend_timeout_ms = opts.suspend_timeout_ms.min(self.lease_ms() / 3);
        }
        let pending = self
            .owner
            .pull
            .start_pull(&self.queue, self.offset, &opts)?;
        loop {
            if self.stopped() {
                return Ok(None);
            }
            if let Some(frame) = pending
                .future
                .wait_for(Duration::from_millis(STOP_CHECK_MS))
            {
                return self.owner.pull.finish_pull(&pending, frame).map(Some);
            }
        }
    }

    /// Waits until every message of the batch is due (retry topic); false if stopped or the
    /// lease was lost meanwhile.
    fn wait_due(&mut self, messages: &[MessageExt]) -> bool {
        let due = messages
            .iter()
            .filter_map(|m| m.property(PROPERTY_DELIVER_AT_MS)?.parse::<i64>().ok())
            .max()
            .unwrap_or(0);
        loop {
            let left = due - now_ms();
            if left <= 0 {
                return true;
            }
            if !self.renew_if_due() || !self.pause(Duration::from_millis(left.min(100) as u64)) {
                return false;
            }
        }
    }

    /// With tracing on: a `SubBefore` record for each message about to be consumed; the
    /// consume's request id and start, for [`QueueWorker::trace_after`].
    fn trace_before(&self, messages: &[MessageExt]) -> Option<(String, Instant)> {
        let trace = self.owner.trace.as_ref()?;
        let request_id = format!(
            "{}-{}",
            self.owner.client_id,
            TRACE_REQUESTS.fetch_add(1, Ordering::Relaxed)
        );
        let timestamp_ms = crate::model::now_ms();
        for m in messages {
            trace.record(crate::trace::TraceRecord::SubBefore {
                timestamp_ms,
                group: self.owner.settings.group.clone(),
                request_id: request_id.clone(),
                msg_id: m.msg_id.clone(),
                retry_times: m.reconsume_times,
                keys: m.keys.join(" "),
            });
        }
        Some((request_id, Instant::now()))
    }

    /// A `SubAfter` record for each message the listener was given, with its share of the
    /// listener's time (as RocketMQ's consume hook divides it).
    fn trace_after(
        &self,
        messages: &[MessageExt],
        (request_id, started): (String, Instant),
        status: ConsumeStatus,
    ) {
        let Some(trace) = self.owner.trace.as_ref() else {
            return;
        };
        let success = status == ConsumeStatus::Success;
        let cost_ms = started.elapsed().as_millis() as u64 / messages.len().max(1) as u64;
        let timestamp_ms = crate::model::now_ms();
        for m in messages {
            trace.record(crate::trace::TraceRecord::SubAfter {
                request_id: request_id.clone(),
                msg_id: m.msg_id.clone(),
                cost_ms,
                success,
                keys: m.keys.join(" "),
                // RocketMQ's ConsumeReturnType: SUCCESS 0, FAILED 3.
                context_code: if success { 0 } else { 3 },
                timestamp_ms,
                group: self.owner.settings.group.clone(),
            });
        }
    }

    /// Hands a batch to the listener; false if the worker stopped before it was consumed.
    fn consume(&mut self, mut messages: Vec<MessageExt>) -> bool {
        if self.queue.topic.starts_with("%RETRY%") {
            if !self.wait_due(&messages) {
                return false;
            }
            for m in &mut messages {
                if let Some(t) = m.property(prop::RETRY_TOPIC) {
                    m.topic = t.to_owned();
                }
            }
        }
        let mut local_failures = 0u32;
        loop {
            if !self.lease_valid() && !self.renew_if_due() {
                return false;
            }
            if !self.owner.acquire_permit(&self.stop) {
                return false;
            }
            let traced = self.trace_before(&messages);
            let status = match &self.listener {
                ListenerKind::Concurrently(l) | ListenerKind::Orderly(l) => l(&messages),
            };
            if let Some(t) = traced {
                self.trace_after(&messages, t, status);
            }
            self.owner.release_permit();
            if status == ConsumeStatus::Success {
                return true;
            }
            let orderly = matches!(self.listener, ListenerKind::Orderly(_));
            if !orderly && self.clustering() {
                let failed: Vec<&MessageExt> = messages
                    .iter()
                    .filter(|m| {
                        let sent = self.owner.send_back(m);
                        if let Err(e) = &sent {
                            tracing::warn!(msg_id = %m.msg_id, error = %e, "send-back failed; retrying locally");
                        }
                        sent.is_err()
                    })
                    .collect();
                if failed.is_empty() {
                    return true;
                }
                messages = failed.into_iter().cloned().collect();
            } else {
                local_failures += 1;
                if local_failures > self.owner.settings.max_reconsume_times {
                    if self.clustering() {
                        for m in &messages {
                            if let Err(e) = self.owner.send_back(m) {
                                tracing::warn!(msg_id = %m.msg_id, error = %e, "cannot move to the DLQ");
                            }
                        }
                    } else {
                        tracing::warn!(queue = %self.queue, "dropping a batch after too many failures (broadcasting)");
                    }
                    return true;
                }
                for m in &mut messages {
                    m.reconsume_times += 1;
                }
            }
            if !self.pause(Duration::from_millis(
                self.owner.settings.reconsume_delay_ms,
            )) {
                return false;
            }
        }
    }
}
