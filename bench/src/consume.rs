//! Consume runs through `client::PullConsumer`: catch up on everything stored in a topic
//! (from each queue's first offset to its last at the start), or follow a topic while it is
//! being produced (e2e). Each consumer thread has its own consumer (its own connections) and
//! reads the queues `i, i + n, i + 2n, ...`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use client::{MessageQueue, PendingPull, PullConsumer, PullOptions, PullStatus, QueueOffset};

use crate::body;
use crate::cluster::stopping;
use crate::produce::{Limit, Progress};
use crate::stats::Latency;
use crate::verify::Verifier;

#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    pub namesrv: String,
    pub topic: String,
    pub consumers: usize,
    /// Messages per pull.
    pub pull_batch: u32,
    /// Stop after this long or this many messages, whichever first (catch-up also stops at
    /// the end of the data).
    pub limit: Option<Limit>,
}

/// Where consumers start and stop.
pub enum Mode {
    /// From each queue's min offset to its max offset as of the start.
    CatchUp,
    /// From each queue's max offset as of the start, until `done` is set and the verifier
    /// has every acknowledged message (or the grace period after `done` runs out).
    Follow { done: Arc<AtomicBool> },
}

pub struct ConsumeOutcome {
    pub received: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Pull round trips (catch-up) or send→delivery (follow, from the bodies' stamps).
    pub latency: Latency,
    /// Gaps or repeats in queue offsets, and pull failures.
    pub errors: u64,
    pub error_detail: Vec<String>,
}

/// After the producers finish, how long followers wait for the last messages.
const FOLLOW_GRACE: Duration = Duration::from_secs(10);
/// Pause after a failed pull.
const PULL_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Consecutive failed pulls of one queue before the run gives up on it.
const PULL_FAILURES_MAX: u32 = 20;

struct QueueCursor {
    queue: MessageQueue,
    next: u64,
    /// Catch-up: the offset to stop at.
    end: Option<u64>,
    failures: u32,
}

struct Totals {
    received: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    error_detail: Mutex<Vec<String>>,
}

impl Totals {
    fn error(&self, n: u64, what: String) {
        self.errors.fetch_add(n, Ordering::Relaxed);
        let mut d = self.error_detail.lock().unwrap_or_else(|e| e.into_inner());
        if d.len() < 5 {
            d.push(what);
        }
    }
}

pub fn run(
    opts: &ConsumeOptions,
    mode: Mode,
    verifier: Option<Arc<Verifier>>,
    progress: Arc<Progress>,
    ready: Option<std::sync::mpsc::Sender<()>>,
) -> Result<ConsumeOutcome> {
    let consumers = opts.consumers.max(1);
    let group = "bench-consumer";
    let first = PullConsumer::new(&opts.namesrv, group)
        .map_err(|e| anyhow!("cannot build a consumer: {e}"))?;
    let queues = first
        .queues(&opts.topic)
        .map_err(|e| anyhow!("no route for topic {}: {e}", opts.topic))?;
    if queues.is_empty() {
        return Err(anyhow!("topic {} has no readable queue", opts.topic));
    }
    let follow = matches!(mode, Mode::Follow { .. });
    let mut cursors: Vec<Vec<QueueCursor>> = (0..consumers).map(|_| Vec::new()).collect();
    for (i, q) in queues.iter().enumerate() {
        let (min, max) = first
            .queue_offsets(q)
            .map_err(|e| anyhow!("offsets of {q}: {e}"))?;
        let c = if follow {
            QueueCursor {
                queue: q.clone(),
                next: max.0,
                end: None,
                failures: 0,
            }
        } else {
            QueueCursor {
                queue: q.clone(),
                next: min.0,
                end: Some(max.0),
                failures: 0,
            }
        };
        cursors[i % consumers].push(c);
    }
    cursors.retain(|c| !c.is_empty());
    // The start offsets are taken: producers may begin.
    if let Some(r) = ready {
        let _ = r.send(());
    }
    let mut pullers: Vec<PullConsumer> = vec![first];
    while pullers.len() < cursors.len() {
        pullers.push(
            PullConsumer::new(&opts.namesrv, group)
                .map_err(|e| anyhow!("cannot build a consumer: {e}"))?,
        );
    }
    let totals = Arc::new(Totals {
        received: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        error_detail: Mutex::new(Vec::new()),
    });
    let done = match &mode {
        Mode::Follow { done } => Some(Arc::clone(done)),
        Mode::CatchUp => None,
    };
    let barrier = Arc::new(Barrier::new(cursors.len() + 1));
    let start = Instant::now();
    let mut handles = Vec::new();
    for (i, (mut mine, consumer)) in cursors.into_iter().zip(pullers).enumerate() {
        let totals = Arc::clone(&totals);
        let verifier = verifier.clone();
        let progress = Arc::clone(&progress);
        let done = done.clone();
        let barrier = Arc::clone(&barrier);
        let opts = opts.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("consumer-{i}"))
                .spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let ctx = Ctx {
                        opts: &opts,
                        totals: &totals,
                        verifier: verifier.as_deref(),
                        progress: &progress,
                        done: done.as_deref(),
                        start,
                    };
                    ctx.consume(&consumer, &mut mine)
                })?,
        );
    }
    barrier.wait();
    let mut latency = Latency::new();
    for h in handles {
        let l = h
            .join()
            .map_err(|_| anyhow!("a consumer thread panicked"))?;
        latency.add(&l);
    }
    let seconds = start.elapsed().as_secs_f64();
    let error_detail = totals
        .error_detail
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(ConsumeOutcome {
        received: totals.received.load(Ordering::Relaxed),
        bytes: totals.bytes.load(Ordering::Relaxed),
        seconds,
        latency,
        errors: totals.errors.load(Ordering::Relaxed),
        error_detail,
    })
}

struct Ctx<'a> {
    opts: &'a ConsumeOptions,
    totals: &'a Totals,
    verifier: Option<&'a Verifier>,
    progress: &'a Progress,
    done: Option<&'a AtomicBool>,
    start: Instant,
}

impl Ctx<'_> {
    fn limit_reached(&self) -> bool {
        match self.opts.limit {
            None => false,
            Some(Limit::Duration(d)) => self.start.elapsed() >= d,
            Some(Limit::Messages(m)) => self.totals.received.load(Ordering::Relaxed) >= m,
            Some(Limit::DurationOrMessages(d, m)) => {
                self.start.elapsed() >= d || self.totals.received.load(Ordering::Relaxed) >= m
            }
        }
    }

    /// Follow mode: whether the producers are done and everything acked has arrived (or the
    /// grace period is over).
    fn follow_finished(&self, done_at: &mut Option<Instant>) -> bool {
        let Some(done) = self.done else { return false };
        if !done.load(Ordering::Acquire) {
            return false;
        }
        let at = *done_at.get_or_insert_with(Instant::now);
        match self.verifier {
            Some(v) if v.unique() >= v.acked() => true,
            _ => at.elapsed() >= FOLLOW_GRACE,
        }
    }

    /// Pulls each queue with one pull always in flight: the next pull of a queue is sent
    /// before the answer to the last one is looked at, so the broker works on it meanwhile.
    fn consume(&self, consumer: &PullConsumer, cursors: &mut [QueueCursor]) -> Latency {
        let mut latency = Latency::new();
        let follow = self.done.is_some();
        let opts = PullOptions {
            max_messages: self.opts.pull_batch,
            max_bytes: 8 * 1024 * 1024,
            // Following: the broker holds a pull until data comes (each queue has its own
            // pull in flight, so an idle queue holds up nobody).
            suspend_timeout_ms: if follow { 200 } else { 0 },
            ..PullOptions::default()
        };
        let mut in_flight: VecDeque<(usize, PendingPull, Instant)> = VecDeque::new();
        let start = |i: usize, c: &mut QueueCursor, q: &mut VecDeque<_>| {
            if c.end.is_some_and(|e| c.next >= e) || c.failures >= PULL_FAILURES_MAX {
                return;
            }
            match consumer.start_pull(&c.queue, QueueOffset(c.next), &opts) {
                Ok(p) => q.push_back((i, p, Instant::now())),
                Err(e) => self.pull_failed(c, &e),
            }
        };
        let mut done_at = None;
        loop {
            if stopping() || self.limit_reached() || self.follow_finished(&mut done_at) {
                break;
            }
            if in_flight.is_empty() {
                // Every queue is at its end, gave up, or failed to send its pull last time.
                for (i, c) in cursors.iter_mut().enumerate() {
                    start(i, c, &mut in_flight);
                }
                if in_flight.is_empty() {
                    if cursors.iter().all(|c| {
                        c.end.is_some_and(|e| c.next >= e) || c.failures >= PULL_FAILURES_MAX
                    }) {
                        break;
                    }
                    std::thread::sleep(PULL_RETRY_PAUSE);
                }
                continue;
            }
            let Some((i, pending, sent)) = in_flight.pop_front() else {
                continue;
            };
            let c = &mut cursors[i];
            let batch = match pending.wait() {
                Ok(b) => b,
                Err(e) => {
                    self.pull_failed(c, &e);
                    std::thread::sleep(PULL_RETRY_PAUSE);
                    start(i, c, &mut in_flight);
                    continue;
                }
            };
            c.failures = 0;
            let rtt = sent.elapsed();
            // The next pull goes out before this batch is looked at.
            let from = c.next;
            c.next = c.next.max(batch.next_offset.0);
            start(i, c, &mut in_flight);
            let now_ns = body::now_ns();
            let mut expected = from;
            let mut bytes = 0u64;
            for m in batch.iter() {
                let offset = m.queue_offset().0;
                if offset != expected {
                    self.totals.error(
                        1,
                        format!("{}: expected offset {expected}, got {offset}", c.queue),
                    );
                }
                expected = offset + 1;
                bytes += m.body().len() as u64;
                let header = self.verifier.and_then(|v| v.record(m.body()));
                if follow {
                    let h = header.or_else(|| body::BodyHeader::parse(m.body()));
                    if let Some(h) = h {
                        latency.record_ns(now_ns.saturating_sub(h.sent_ns));
                    }
                }
            }
            if expected != c.next && !batch.is_empty() {
                self.totals.error(
                    1,
                    format!(
                        "{}: batch ended at offset {expected}, the next pull starts at {}",
                        c.queue, c.next
                    ),
                );
            }
            if !follow && !batch.is_empty() {
                latency.record(rtt);
            }
            if batch.status == PullStatus::OffsetMoved {
                self.totals.error(
                    0,
                    format!("{}: offset {from} moved to {}", c.queue, batch.next_offset),
                );
            }
            let n = batch.len() as u64;
            self.totals.received.fetch_add(n, Ordering::Relaxed);
            self.totals.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.progress.messages.fetch_add(n, Ordering::Relaxed);
        }
        // Answers still on the way are dropped with their pulls.
        latency
    }

    fn pull_failed(&self, c: &mut QueueCursor, e: &client::ClientError) {
        c.failures += 1;
        if c.failures == PULL_FAILURES_MAX {
            self.totals
                .error(1, format!("{}: giving up after: {e}", c.queue));
        }
    }
}
