//! Rebalance: which queues this member consumes, and the queue workers started and stopped
//! to match.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::worker::QueueWorker;
use super::{lock, MessageModel, PushInner};
use crate::consumer::{PullOptions, Selector};
use crate::model::MessageQueue;

pub(super) struct WorkerHandle {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl PushInner {
    pub(super) fn rebalance_loop(self: Arc<Self>) {
        let every = Duration::from_millis(self.settings.rebalance_interval_ms);
        while !self.stopped() {
            self.rebalance();
            let (m, cv) = &self.trigger;
            let mut wanted = lock(m);
            let deadline = Instant::now() + every;
            while !*wanted && !self.stopped() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                wanted = cv
                    .wait_timeout(wanted, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            *wanted = false;
        }
    }

    /// Works out this member's queues and starts and stops queue workers to match.
    fn rebalance(self: &Arc<Self>) {
        if let Err(e) = self.ensure_watches() {
            tracing::warn!(error = %e, "cannot start a membership watch");
        }
        let subs = lock(&self.subscriptions).clone();
        let members = self.members();
        let mut wanted: HashMap<MessageQueue, Selector> = HashMap::new();
        for (topic, expr) in &subs {
            // A fresh route at every rebalance: a broker restarted on other ports (or moved)
            // was otherwise pulled from, leased from and heartbeated at its old addresses
            // until the instance's periodic refresh (30 s). The cached route serves when no
            // NameServer answers.
            let route = match self
                .pull
                .inst
                .fresh_route(topic)
                .or_else(|_| self.pull.inst.routes.get(topic))
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(topic, error = %e, "no route; keeping current queues");
                    for q in lock(&self.workers).keys().filter(|q| &q.topic == topic) {
                        wanted.insert(q.clone(), expr.clone());
                    }
                    continue;
                }
            };
            let all: Vec<MessageQueue> = route
                .read_queues()
                .iter()
                .map(|t| t.queue.clone())
                .collect();
            let mine = match self.settings.model {
                MessageModel::Broadcasting => all,
                MessageModel::Clustering => self.settings.strategy.allocate(
                    &self.settings.group,
                    &self.client_id,
                    &all,
                    &members,
                ),
            };
            for q in mine {
                wanted.insert(q, expr.clone());
            }
        }
        // Give up queues first (each commits and releases), then take new ones.
        self.stop_workers(|q| !wanted.contains_key(q));
        let Some(listener) = lock(&self.listener).clone() else {
            return;
        };
        let mut workers = lock(&self.workers);
        for (q, expr) in wanted {
            if workers.contains_key(&q) || self.stopped() {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let opts = expr.apply(PullOptions {
                max_messages: self.settings.batch_max,
                suspend_timeout_ms: self.settings.suspend_timeout_ms,
                ..PullOptions::default()
            });
            let worker = QueueWorker::new(
                Arc::clone(self),
                q.clone(),
                opts,
                Arc::clone(&stop),
                listener.clone(),
            );
            match thread::Builder::new()
                .name(format!("mq-queue-{q}"))
                .spawn(move || worker.run())
            {
                Ok(thread) => {
                    tracing::debug!(queue = %q, client = %self.client_id, "queue taken");
                    workers.insert(q, WorkerHandle { stop, thread });
                }
                Err(e) => tracing::warn!(queue = %q, error = %e, "cannot start a queue thread"),
            }
        }
    }

    pub(super) fn stop_workers(&self, which: impl Fn(&MessageQueue) -> bool) {
        let stopping: Vec<(MessageQueue, WorkerHandle)> = {
            let mut workers = lock(&self.workers);
            let keys: Vec<MessageQueue> = workers.keys().filter(|q| which(q)).cloned().collect();
            keys.into_iter()
                .filter_map(|k| workers.remove(&k).map(|w| (k, w)))
                .collect()
        };
        for (_, w) in &stopping {
            w.stop.store(true, Ordering::Release);
        }
        for (q, w) in stopping {
            if w.thread.join().is_err() {
                tracing::warn!(queue = %q, "a queue thread panicked");
            }
        }
    }
}
