//! Produce runs: N producer threads, each with its own `client::Producer` (its own
//! connections, as N applications would have), sync or async, batched or not, closed-loop or
//! paced open-loop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use client::{Message, Producer};

use crate::body;
use crate::cluster::stopping;
use crate::pacing::Pacer;
use crate::stats::Latency;

#[derive(Debug, Clone)]
pub struct ProduceOptions {
    pub namesrv: String,
    pub topic: String,
    pub size: usize,
    pub batch: usize,
    pub producers: usize,
    pub limit: Limit,
    /// Messages per second over all producers (open loop); `None` = as fast as acks allow.
    pub rate: Option<f64>,
    pub sync: bool,
    /// Batches in flight per producer thread in async mode.
    pub inflight: usize,
    pub compress: bool,
    pub send_timeout_ms: u64,
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Duration(Duration),
    /// Total messages over all producers / consumers.
    Messages(u64),
    /// Whichever comes first: a local broker's run is capped by what its disk can take.
    DurationOrMessages(Duration, u64),
}

impl Limit {
    /// The share of producer `i` of `n` when the limit is a message count.
    pub fn share(&self, i: usize, n: usize) -> Option<u64> {
        match *self {
            Limit::Duration(_) => None,
            Limit::Messages(m) | Limit::DurationOrMessages(_, m) => {
                let n = n as u64;
                let i = i as u64;
                Some(m / n + u64::from(i < m % n))
            }
        }
    }
}

/// Live counters, read by the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub messages: AtomicU64,
    pub errors: AtomicU64,
}

/// What a produce run leaves behind.
pub struct ProduceOutcome {
    pub acked: u64,
    pub errors: u64,
    pub error_detail: Vec<String>,
    pub seconds: f64,
    pub latency: Latency,
    /// Messages sent (acked or not) per producer: their sequence numbers are 0..sent.
    pub sent_per_producer: Vec<u64>,
    /// Per send call: from its scheduled time until the call began (the pacer's lateness,
    /// and waiting for an in-flight slot), and the call itself (route, encode, socket write).
    pub pace: Latency,
    pub send_call: Latency,
}

/// A counting semaphore: async batches in flight per producer thread.
struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            free: Mutex::new(n),
            cv: Condvar::new(),
        }
    }

    fn acquire(&self) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
    }

    fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_one();
    }

    /// Waits until all `n` slots are free again (everything in flight answered).
    fn drain(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free < n {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            free = self
                .cv
                .wait_timeout(free, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// State shared by a producer thread and its callbacks.
struct Shared {
    latency: Mutex<Latency>,
    /// Written by the producer thread only (see [`ProduceOutcome::pace`]).
    pace: Mutex<Latency>,
    send_call: Mutex<Latency>,
    acked: AtomicU64,
    errors: AtomicU64,
    error_detail: Mutex<Vec<String>>,
    progress: Arc<Progress>,
}

const ERROR_DETAIL_MAX: usize = 5;

impl Shared {
    fn ok(&self, n: u64, latency: Duration) {
        self.acked.fetch_add(n, Ordering::Relaxed);
        self.progress.messages.fetch_add(n, Ordering::Relaxed);
        self.latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record_n(latency, n);
    }

    fn failed(&self, n: u64, e: &dyn std::fmt::Display) {
        self.errors.fetch_add(n, Ordering::Relaxed);
        self.progress.errors.fetch_add(n, Ordering::Relaxed);
        let mut d = self.error_detail.lock().unwrap_or_else(|e| e.into_inner());
        if d.len() < ERROR_DETAIL_MAX {
            d.push(format!("send of {n} message(s) failed: {e}"));
        }
    }
}

pub fn build_producer(opts: &ProduceOptions, index: usize) -> Result<Producer> {
    let threshold = if opts.compress {
        // Compress every body (the client compresses bodies *above* the threshold).
        0
    } else {
        usize::MAX
    };
    Producer::builder()
        .namesrv(&opts.namesrv)
        .group(format!("bench-producer-{index}"))
        .send_timeout_ms(opts.send_timeout_ms)
        .compress_threshold_bytes(threshold)
        .build()
        .map_err(|e| anyhow!("cannot build producer {index}: {e}"))
}

pub fn run(opts: &ProduceOptions, progress: Arc<Progress>) -> Result<ProduceOutcome> {
    if opts.producers == 0 || opts.batch == 0 {
        return Err(anyhow!("--producers and --batch must be at least 1"));
    }
    let producers: Vec<Producer> = (0..opts.producers)
        .map(|i| build_producer(opts, i))
        .collect::<Result<_>>()?;
    // Warm up: learn the route (and create the topic) before the clock starts.
    for p in &producers {
        p.write_queues(&opts.topic)
            .map_err(|e| anyhow!("no route for topic {}: {e}", opts.topic))?;
    }
    let barrier = Arc::new(Barrier::new(opts.producers + 1));
    let shareds: Vec<Arc<Shared>> = (0..opts.producers)
        .map(|_| {
            Arc::new(Shared {
                latency: Mutex::new(Latency::new()),
                pace: Mutex::new(Latency::new()),
                send_call: Mutex::new(Latency::new()),
                acked: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                error_detail: Mutex::new(Vec::new()),
                progress: Arc::clone(&progress),
            })
        })
        .collect();
    let start_cell = Arc::new(Mutex::new(None::<Instant>));
    let mut handles = Vec::new();
    for (i, producer) in producers.into_iter().enumerate() {
        let opts = opts.clone();
        let shared = Arc::clone(&shareds[i]);
        let barrier = Arc::clone(&barrier);
        let start_cell = Arc::clone(&start_cell);
        handles.push(
            std::thread::Builder::new()
                .name(format!("producer-{i}"))
                .spawn(move || {
                    barrier.wait();
                    let start = start_cell
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .unwrap_or_else(Instant::now);
                    producer_loop(&opts, i, &producer, &shared, start)
                })?,
        );
    }
    let start = Instant::now();
    *start_cell.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
    barrier.wait();
    let mut sent_per_producer = Vec::new();
    for h in handles {
        sent_per_producer.push(
            h.join()
                .map_err(|_| anyhow!("a producer thread panicked"))?,
        );
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut latency = Latency::new();
    let mut pace = Latency::new();
    let mut send_call = Latency::new();
    let mut acked = 0;
    let mut errors = 0;
    let mut error_detail = Vec::new();
    for s in &shareds {
        latency.add(&s.latency.lock().unwrap_or_else(|e| e.into_inner()));
        pace.add(&s.pace.lock().unwrap_or_else(|e| e.into_inner()));
        send_call.add(&s.send_call.lock().unwrap_or_else(|e| e.into_inner()));
        acked += s.acked.load(Ordering::Relaxed);
        errors += s.errors.load(Ordering::Relaxed);
        error_detail.extend(
            s.error_detail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..),
        );
    }
    error_detail.truncate(ERROR_DETAIL_MAX);
    Ok(ProduceOutcome {
        acked,
        errors,
        error_detail,
        seconds,
        latency,
        sent_per_producer,
        pace,
        send_call,
    })
}

/// Sends until the limit; returns the number of messages sent (acked or failed).
fn producer_loop(
    opts: &ProduceOptions,
    index: usize,
    producer: &Producer,
    shared: &Arc<Shared>,
    start: Instant,
) -> u64 {
    let quota = opts.limit.share(index, opts.producers);
    let end = match opts.limit {
        Limit::Duration(d) | Limit::DurationOrMessages(d, _) => Some(start + d),
        Limit::Messages(_) => None,
    };
    let mut pacer = opts
        .rate
        .map(|r| Pacer::new(start, (r / opts.producers as f64).max(1e-3)));
    if pacer.is_some() {
        crate::pacing::precise_sleeps();
    }
    let slots = Arc::new(Slots::new(opts.inflight.max(1)));
    let mut seq: u64 = 0;
    // Kept on this thread and handed over at the end: no lock per send.
    let mut pace = Latency::new();
    let mut send_call = Latency::new();
    loop {
        if stopping() {
            break;
        }
        let n = match quota {
            Some(q) if seq >= q => break,
            Some(q) => (q - seq).min(opts.batch as u64) as usize,
            None => opts.batch,
        };
        let scheduled = match pacer.as_mut() {
            Some(p) => {
                let at = p.next(n as u64);
                if end.is_some_and(|e| at >= e) {
                    break;
                }
                crate::pacing::wait_until(at);
                at
            }
            None => {
                let now = Instant::now();
                if end.is_some_and(|e| now >= e) {
                    break;
                }
                now
            }
        };
        let bodies =
            body::batch_bodies(index as u32, seq, n, opts.size, body::instant_ns(scheduled));
        seq += n as u64;
        let mut msgs: Vec<Message> = bodies
            .into_iter()
            .map(|b| Message::new(opts.topic.as_str(), b))
            .collect();
        if opts.sync {
            let called = Instant::now();
            pace.record(called.saturating_duration_since(scheduled));
            let r = if n == 1 {
                msgs.pop()
                    .map(|m| producer.send(m).map(|_| 1))
                    .unwrap_or(Ok(0))
            } else {
                producer.send_batch(msgs).map(|b| b.len())
            };
            match r {
                Ok(k) => shared.ok(k as u64, scheduled.elapsed()),
                Err(e) => shared.failed(n as u64, &e),
            }
        } else {
            slots.acquire();
            let called = Instant::now();
            pace.record(called.saturating_duration_since(scheduled));
            let cb_shared = Arc::clone(shared);
            let cb_slots = Arc::clone(&slots);
            let r = producer.send_batch_async(msgs, move |r| {
                match r {
                    Ok(b) => cb_shared.ok(b.len() as u64, scheduled.elapsed()),
                    Err(e) => cb_shared.failed(n as u64, &e),
                }
                cb_slots.release();
            });
            send_call.record(called.elapsed());
            if let Err(e) = r {
                shared.failed(n as u64, &e);
                slots.release();
            }
        }
    }
    *shared.pace.lock().unwrap_or_else(|e| e.into_inner()) = pace;
    *shared.send_call.lock().unwrap_or_else(|e| e.into_inner()) = send_call;
    // Every async send ends in its callback (answer or timeout) within the send timeout.
    let wait = Duration::from_millis(opts.send_timeout_ms * 2 + 1000);
    if !slots.drain(opts.inflight.max(1), wait) {
        let mut d = shared
            .error_detail
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        d.push(format!(
            "producer {index}: sends still unanswered after twice the send timeout"
        ));
    }
    seq
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_limits_are_shared_out_exactly() {
        let l = Limit::Messages(10);
        let shares: Vec<u64> = (0..3).map(|i| l.share(i, 3).unwrap()).collect();
        assert_eq!(shares, vec![4, 3, 3]);
        assert_eq!(shares.iter().sum::<u64>(), 10);
        assert_eq!(Limit::Duration(Duration::from_secs(1)).share(0, 2), None);
        assert_eq!(Limit::Messages(1).share(1, 2), Some(0));
    }

    #[test]
    fn slots_bound_and_drain() {
        let s = Arc::new(Slots::new(2));
        s.acquire();
        s.acquire();
        let s2 = Arc::clone(&s);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.release();
            s2.release();
        });
        s.acquire(); // waits for the release
        s.release();
        t.join().unwrap();
        assert!(s.drain(2, Duration::from_secs(1)));
        s.acquire();
        assert!(!s.drain(2, Duration::from_millis(10)));
    }
}
