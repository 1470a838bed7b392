//! The push consumer: a member of a consumer group that long-polls its queues and hands the
//! messages to a listener.
//!
//! * Clustering (default): the member heartbeats to every broker of its topics, learns the
//!   group's members (and of every change at once, through a `WaitGroupChange` long poll),
//!   and allocates the queues with an [`AllocateStrategy`]. It consumes a queue only while it
//!   holds the broker's lease on it, and gives a queue up by committing its offset and
//!   releasing the lease in one request, so the next owner starts exactly where it stopped.
//! * Broadcasting: every member consumes every queue; offsets live in a local file.
//! * A failed message goes to `%RETRY%<group>` (one queue per delay level) with a "deliver
//!   not before" time; the member consuming that queue waits until then. After
//!   `max_reconsume_times` failures it goes to `%DLQ%<group>`.
//! * Orderly listeners: one thread per queue, in queue order, under the lease; a failed batch
//!   is retried in place (the queue waits), and goes to the DLQ after `max_reconsume_times`.
//!
//! The jobs live in their own files: `membership` (heartbeats, the brokers' membership
//! views and their watches), `rebalance` (allocation, starting and stopping queue workers),
//! `worker` (one queue's lease, pull, listener and commit loop), `retry` (the retry and
//! dead-letter topics, sending failed messages back) and `offsets` (broadcasting's local
//! offsets file). This file holds the consumer, its builder, its start and stop.

mod membership;
mod offsets;
mod rebalance;
mod retry;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::allocate::{AllocateStrategy, Averagely};
use crate::consumer::{PullConsumer, PullInner, PullOptions, Selector};
use crate::error::{ClientError, Result};
use crate::model::{ConsumeStatus, MessageExt, MessageQueue, QueueOffset};
use crate::producer::Producer;
use protocol::ResponseCode;

use membership::View;
use offsets::LocalOffsetStore;
use rebalance::WorkerHandle;
pub use retry::{dlq_topic, retry_topic, PROPERTY_DELIVER_AT_MS};

/// Where a group starts reading a queue it has no committed offset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeFrom {
    /// The oldest message still stored.
    First,
    /// Only messages sent after the start (the default).
    Last,
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageModel {
    /// Each message goes to one member of the group.
    #[default]
    Clustering,
    /// Every member gets every message.
    Broadcasting,
}

/// Configures a [`PushConsumer`].
#[derive(Debug, Clone)]
pub struct PushConsumerBuilder {
    namesrv: String,
    group: String,
    subscriptions: Vec<(String, Selector)>,
    from: ConsumeFrom,
    model: MessageModel,
    strategy: Arc<dyn AllocateStrategy>,
    batch_max: u32,
    consume_threads: usize,
    suspend_timeout_ms: u64,
    reconsume_delay_ms: u64,
    max_reconsume_times: u32,
    heartbeat_interval_ms: u64,
    rebalance_interval_ms: u64,
    commit_interval_ms: u64,
    queue_lease_ms: u64,
    offset_store_dir: Option<PathBuf>,
    instance_name: String,
    enable_trace: bool,
    credentials: Option<crate::Credentials>,
}

impl Default for PushConsumerBuilder {
    fn default() -> Self {
        PushConsumerBuilder {
            namesrv: "127.0.0.1:9876".into(),
            group: "DEFAULT_CONSUMER".into(),
            subscriptions: Vec::new(),
            from: ConsumeFrom::Last,
            model: MessageModel::Clustering,
            strategy: Arc::new(Averagely),
            batch_max: 32,
            consume_threads: 20,
            suspend_timeout_ms: 15_000,
            reconsume_delay_ms: 1000,
            max_reconsume_times: 16,
            heartbeat_interval_ms: 10_000,
            rebalance_interval_ms: 20_000,
            commit_interval_ms: 1_000,
            queue_lease_ms: 30_000,
            offset_store_dir: None,
            instance_name: "DEFAULT".into(),
            enable_trace: false,
            credentials: None,
        }
    }
}

impl PushConsumerBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `;`-separated NameServer addresses. Default `127.0.0.1:9876`.
    pub fn namesrv(mut self, addrs: impl Into<String>) -> Self {
        self.namesrv = addrs.into();
        self
    }

    /// The account to log in as where the ACL is on. Default: the process's
    /// `set_default_credentials`.
    pub fn credentials(mut self, credentials: crate::Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Default `DEFAULT_CONSUMER`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Message trace (RocketMQ's `enableMsgTrace`): each message handed to the listener
    /// leaves a `SubBefore` and a `SubAfter` record in `RMQ_SYS_TRACE_TOPIC`, written in
    /// batches by a background thread; consuming never waits for it. Off by default.
    pub fn enable_trace(mut self, on: bool) -> Self {
        self.enable_trace = on;
        self
    }

    /// Consumes `topic`'s messages matching `tag_expression` (`*`, `TagA`, `TagA || TagB`).
    pub fn subscribe(
        mut self,
        topic: impl Into<String>,
        tag_expression: impl Into<String>,
    ) -> Self {
        self.subscriptions
            .push((topic.into(), Selector::Tag(tag_expression.into())));
        self
    }

    /// Consumes `topic`'s messages whose properties match the SQL92 `expression`
    /// (RocketMQ's `MessageSelector.bySql`: `a > 5 AND b IN ('x', 'y')`), filtered on the
    /// broker, which needs `enable_property_filter`. A bad expression fails
    /// [`PushConsumerBuilder::build`]; a broker that refuses it fails
    /// [`PushConsumer::start`], both with the reason.
    pub fn subscribe_sql92(
        mut self,
        topic: impl Into<String>,
        expression: impl Into<String>,
    ) -> Self {
        self.subscriptions
            .push((topic.into(), Selector::Sql92(expression.into())));
        self
    }

    /// Where a queue without a committed offset starts. Default [`ConsumeFrom::Last`].
    pub fn consume_from(mut self, from: ConsumeFrom) -> Self {
        self.from = from;
        self
    }

    /// Default [`MessageModel::Clustering`].
    pub fn message_model(mut self, model: MessageModel) -> Self {
        self.model = model;
        self
    }

    /// How queues are shared among the members. Default [`Averagely`].
    pub fn allocate_strategy(mut self, s: impl AllocateStrategy + 'static) -> Self {
        self.strategy = Arc::new(s);
        self
    }

    /// Largest batch handed to the listener, 1..=1024. Default 32.
    pub fn batch_max(mut self, n: u32) -> Self {
        self.batch_max = n;
        self
    }

    /// Listener calls running at once in this consumer, 1..=1024 (each queue is consumed by
    /// one thread at a time). Default 20.
    pub fn consume_threads(mut self, n: usize) -> Self {
        self.consume_threads = n;
        self
    }

    /// How long the broker may hold a pull that finds nothing. Default 15000 ms.
    pub fn suspend_timeout_ms(mut self, ms: u64) -> Self {
        self.suspend_timeout_ms = ms;
        self
    }

    /// Wait before an orderly (or broadcasting) listener gets a failed batch again, and
    /// before a failed batch is retried locally when the retry topic cannot be reached.
    /// Default 1000 ms.
    pub fn reconsume_delay_ms(mut self, ms: u64) -> Self {
        self.reconsume_delay_ms = ms;
        self
    }

    /// Failures after which a message goes to the dead-letter topic. Default 16.
    pub fn max_reconsume_times(mut self, n: u32) -> Self {
        self.max_reconsume_times = n;
        self
    }

    /// Heartbeat period to the brokers; keep the broker's `consumer_timeout_ms` at least
    /// three times this. Default 10000 ms.
    pub fn heartbeat_interval_ms(mut self, ms: u64) -> Self {
        self.heartbeat_interval_ms = ms;
        self
    }

    /// Rebalance period on top of the change notifications. Default 20000 ms.
    pub fn rebalance_interval_ms(mut self, ms: u64) -> Self {
        self.rebalance_interval_ms = ms;
        self
    }

    /// How often consumed offsets are committed. A crashed member's queues are re-delivered
    /// from its last commit, so this bounds the duplicates. Default 1000 ms.
    pub fn commit_interval_ms(mut self, ms: u64) -> Self {
        self.commit_interval_ms = ms;
        self
    }

    /// Lease on each consumed queue (clustering), renewed every third of it. A crashed
    /// member's queues move after this (and the broker's member timeout). Default 30000 ms.
    pub fn queue_lease_ms(mut self, ms: u64) -> Self {
        self.queue_lease_ms = ms;
        self
    }

    /// Directory of the broadcasting offsets file. Default
    /// `$HOME/.corvus_offsets/<ip>@<instance name>`.
    pub fn offset_store_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.offset_store_dir = Some(dir.into());
        self
    }

    /// Names this consumer in its default offsets directory. Default `DEFAULT`.
    pub fn instance_name(mut self, name: impl Into<String>) -> Self {
        self.instance_name = name.into();
        self
    }

    pub fn build(self) -> Result<PushConsumer> {
        let bad = |m: String| Err(ClientError::Config(m));
        if self.subscriptions.is_empty() {
            return bad("no subscription".into());
        }
        for (topic, s) in &self.subscriptions {
            if let Selector::Sql92(e) = s {
                if let Err(err) = Selector::sql92(e.as_str()) {
                    return bad(format!("the subscription to {topic}: {err}"));
                }
            }
        }
        if !(1..=1024).contains(&self.batch_max) {
            return bad(format!("batch size {} is outside 1..=1024", self.batch_max));
        }
        if !(1..=1024).contains(&self.consume_threads) {
            return bad(format!(
                "consume threads {} is outside 1..=1024",
                self.consume_threads
            ));
        }
        if self.queue_lease_ms < 300 || self.queue_lease_ms > 600_000 {
            return bad("queue lease must be 300..=600000 ms".into());
        }
        for (name, v) in [
            ("heartbeat interval", self.heartbeat_interval_ms),
            ("rebalance interval", self.rebalance_interval_ms),
            ("commit interval", self.commit_interval_ms),
        ] {
            if !(10..=3_600_000).contains(&v) {
                return bad(format!("{name} must be 10..=3600000 ms"));
            }
        }
        let mut config = crate::ClientConfig::new(&self.namesrv)?;
        if let Some(c) = &self.credentials {
            config.pool.credentials = Some(c.clone());
        }
        let pull = PullConsumer::with_config(config, &self.group)?;
        let mut producer = Producer::builder()
            .namesrv(&self.namesrv)
            .group(format!("{}-sendback", self.group));
        if let Some(c) = &self.credentials {
            producer = producer.credentials(c.clone());
        }
        let producer = producer.build()?;
        let ip = pull.inner.inst.local_ip;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let client_id = format!(
            "{ip}@{}@{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let store_dir = self.offset_store_dir.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".corvus_offsets")
                .join(format!("{ip}@{}", self.instance_name))
        });
        let trace =
            crate::trace::TraceDispatcher::start_if(self.enable_trace, &self.namesrv, &self.group)?;
        let local_offsets = (self.model == MessageModel::Broadcasting)
            .then(|| LocalOffsetStore::open(store_dir.join(format!("{}.json", self.group))))
            .transpose()?;
        Ok(PushConsumer {
            inner: Arc::new(PushInner {
                pull: Arc::clone(&pull.inner),
                pull_handle: pull,
                producer,
                settings: self,
                client_id,
                trace,
                stop: AtomicBool::new(false),
                crashed: AtomicBool::new(false),
                listener: Mutex::new(None),
                workers: Mutex::new(HashMap::new()),
                trigger: (Mutex::new(false), Condvar::new()),
                views: Mutex::new(BTreeMap::new()),
                retry_levels_ms: Mutex::new(Vec::new()),
                permits: (Mutex::new(0), Condvar::new()),
                local_offsets,
                subscriptions: Mutex::new(Vec::new()),
                watched: Mutex::new(BTreeSet::new()),
                watch_threads: Mutex::new(Vec::new()),
            }),
            threads: Mutex::new(Vec::new()),
        })
    }
}

/// The listener of a push consumer.
pub type Listener = dyn Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static;

#[derive(Clone)]
enum ListenerKind {
    Concurrently(Arc<Listener>),
    Orderly(Arc<Listener>),
}

/// A member of a consumer group; see the module docs.
pub struct PushConsumer {
    inner: Arc<PushInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct PushInner {
    pull: Arc<PullInner>,
    pull_handle: PullConsumer,
    producer: Producer,
    settings: PushConsumerBuilder,
    client_id: String,
    /// Where the trace records go, with tracing on.
    trace: Option<Arc<crate::trace::TraceDispatcher>>,
    stop: AtomicBool,
    /// Stopped as by a crash: nothing committed, no lease released, no goodbye.
    crashed: AtomicBool,
    listener: Mutex<Option<ListenerKind>>,
    workers: Mutex<HashMap<MessageQueue, WorkerHandle>>,
    /// Set when a rebalance is wanted (membership change).
    trigger: (Mutex<bool>, Condvar),
    /// Latest membership per broker (core 0) address.
    views: Mutex<BTreeMap<String, View>>,
    retry_levels_ms: Mutex<Vec<u64>>,
    /// Listener calls running.
    permits: (Mutex<usize>, Condvar),
    local_offsets: Option<LocalOffsetStore>,
    /// (topic, selector) consumed, with the retry topic in clustering mode.
    subscriptions: Mutex<Vec<(String, Selector)>>,
    /// The broker (core 0) addresses a membership watch runs for, and the watch threads: a
    /// broker restarted on other ports gets a watch at its new address, and the watch of the
    /// old one ends.
    watched: Mutex<BTreeSet<String>>,
    watch_threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How often waiting threads look at the stop flag.
const STOP_CHECK_MS: u64 = 50;
/// Pause after a failed request before trying again.
const ERROR_BACKOFF_MS: u64 = 500;
/// The longest a refusal's own retry time makes a worker wait.
const RETRY_AFTER_MAX_MS: u64 = 10_000;

/// How long a worker waits after a failed pull: the time the broker named when it refused
/// the pull over a quota (so a group at its pull quota pulls at that rate, not once per
/// [`ERROR_BACKOFF_MS`]), at most [`RETRY_AFTER_MAX_MS`]; else [`ERROR_BACKOFF_MS`].
fn pause_after(e: &ClientError) -> Duration {
    e.retry_after()
        .map_or(Duration::from_millis(ERROR_BACKOFF_MS), |d| {
            d.min(Duration::from_millis(RETRY_AFTER_MAX_MS))
        })
}

impl PushConsumer {
    pub fn builder() -> PushConsumerBuilder {
        PushConsumerBuilder::new()
    }

    /// This member's id in its group.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// Starts consuming with a concurrent listener: failed messages go through the retry
    /// topic and do not hold up their queue.
    pub fn start<F>(&self, listener: F) -> Result<()>
    where
        F: Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static,
    {
        self.start_with(ListenerKind::Concurrently(Arc::new(listener)))
    }

    /// Starts consuming with an orderly listener: each queue in order, by one thread of one
    /// member at a time (under the broker's lease), also across rebalances; a failed batch
    /// is retried in place.
    pub fn start_orderly<F>(&self, listener: F) -> Result<()>
    where
        F: Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static,
    {
        self.start_with(ListenerKind::Orderly(Arc::new(listener)))
    }

    fn start_with(&self, kind: ListenerKind) -> Result<()> {
        let inner = &self.inner;
        let mut threads = lock(&self.threads);
        if lock(&inner.listener).is_some() {
            return Err(ClientError::Config("push consumer already started".into()));
        }
        if inner.stop.load(Ordering::Acquire) {
            return Err(ClientError::Shutdown);
        }
        let mut subs = inner.settings.subscriptions.clone();
        for (topic, selector) in &subs {
            let route = inner.pull.inst.fresh_route(topic)?;
            let Some(first) = route.read_queues().first() else {
                return Err(ClientError::NoRoute {
                    topic: topic.clone(),
                });
            };
            if let Selector::Sql92(_) = selector {
                inner.check_selector(&first.queue, selector)?;
            }
        }
        let clustering = inner.settings.model == MessageModel::Clustering;
        // First heartbeat: learn the members and the retry levels before allocating.
        inner.heartbeat_all();
        if clustering {
            match inner.ensure_retry_topic() {
                Ok(()) => subs.push((
                    retry_topic(&inner.settings.group),
                    Selector::Tag("*".into()),
                )),
                Err(e) => {
                    tracing::warn!(error = %e, "no retry topic: failed messages are retried locally")
                }
            }
        }
        *lock(&inner.subscriptions) = subs;
        *lock(&inner.listener) = Some(kind);

        let mut spawn = |name: &str, f: Box<dyn FnOnce() + Send>| -> Result<()> {
            let h = thread::Builder::new()
                .name(name.to_owned())
                .spawn(f)
                .map_err(|e| ClientError::io("push consumer", &e))?;
            threads.push(h);
            Ok(())
        };
        let me = Arc::clone(inner);
        spawn("mq-heartbeat", Box::new(move || me.heartbeat_loop()))?;
        let me = Arc::clone(inner);
        spawn("mq-rebalance", Box::new(move || me.rebalance_loop()))?;
        inner.ensure_watches()?;
        Ok(())
    }

    /// Stops cleanly: each queue's listener call finishes, its offset is committed and its
    /// lease released, and the member leaves its group at once (the others rebalance
    /// without waiting for a timeout). Nothing is re-delivered to the others.
    pub fn shutdown(&self) {
        self.stop_all(false);
    }

    /// Stops as a crash would: nothing is committed since the last periodic commit, leases
    /// are kept until they expire, and the member is dropped by the broker's timeout only.
    /// For failure tests.
    pub fn abort(&self) {
        self.stop_all(true);
    }

    fn stop_all(&self, crash: bool) {
        let inner = &self.inner;
        if crash {
            inner.crashed.store(true, Ordering::Release);
        }
        let first = !inner.stop.swap(true, Ordering::AcqRel);
        inner.kick();
        let mut threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        threads.extend(lock(&inner.watch_threads).drain(..));
        for t in threads {
            if t.join().is_err() {
                tracing::warn!("a push consumer thread panicked");
            }
        }
        inner.stop_workers(|_| true);
        if first && !crash && lock(&inner.listener).is_some() {
            for addr in inner.group_addrs() {
                if let Err(e) = inner.pull.inst.unregister_consumer(
                    &addr,
                    &inner.settings.group,
                    &inner.client_id,
                ) {
                    tracing::debug!(%addr, error = %e, "unregister failed");
                }
            }
        }
        if let Some(store) = &inner.local_offsets {
            if !crash {
                store.persist();
            }
        }
        inner.producer.shutdown();
        inner.pull_handle.shutdown();
        if let Some(t) = &inner.trace {
            t.shutdown();
        }
    }

    /// The queues this member consumes now.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        let mut v: Vec<MessageQueue> = lock(&self.inner.workers).keys().cloned().collect();
        v.sort();
        v
    }
}

impl Drop for PushConsumer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl PushInner {
    /// Asks the broker of `queue` whether it takes `selector`, with a pull past the queue's
    /// end (which reads nothing): filters off or a refused expression fail the start with
    /// the broker's reason. Other failures are left to the queue workers, which retry.
    fn check_selector(&self, queue: &MessageQueue, selector: &Selector) -> Result<()> {
        let opts = selector.apply(PullOptions {
            max_messages: 1,
            ..PullOptions::default()
        });
        let pending = self.pull.start_pull(queue, QueueOffset(u64::MAX), &opts)?;
        let frame = pending.future.wait();
        match self.pull.finish_pull(&pending, frame) {
            Err(
                e @ ClientError::Broker {
                    code: ResponseCode::SystemError | ResponseCode::SubscriptionParseFailed,
                    ..
                },
            ) => Err(e),
            _ => Ok(()),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sleeps up to `d`; false if stopped meanwhile.
    fn pause(&self, d: Duration, stop: &AtomicBool) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() && !stop.load(Ordering::Acquire) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            thread::sleep(left.min(Duration::from_millis(STOP_CHECK_MS)));
        }
        false
    }

    fn kick(&self) {
        *lock(&self.trigger.0) = true;
        self.trigger.1.notify_all();
    }

    fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .settings
            .subscriptions
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    fn group_addrs(&self) -> Vec<String> {
        self.pull.inst.group_addrs(&self.topics())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::producer::Producer;
    use crate::testing::{broker, fake_broker, namesrv, route};
    use std::sync::mpsc;

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_pull_refused_over_a_quota_is_tried_again_when_the_broker_said() {
        let refusal = |retry_after_ms| ClientError::Broker {
            addr: "b".into(),
            code: protocol::ResponseCode::FlowControl,
            remark: "quota".into(),
            retry_after_ms,
        };
        assert_eq!(pause_after(&refusal(Some(20))), Duration::from_millis(20));
        assert_eq!(
            pause_after(&refusal(Some(3_600_000))),
            Duration::from_millis(RETRY_AFTER_MAX_MS)
        );
        assert_eq!(
            pause_after(&refusal(None)),
            Duration::from_millis(ERROR_BACKOFF_MS)
        );
        assert_eq!(
            pause_after(&ClientError::Timeout {
                addr: "b".into(),
                timeout_ms: 1
            }),
            Duration::from_millis(ERROR_BACKOFF_MS)
        );
    }

    #[test]
    fn push_consumer_delivers_every_queue_in_order_and_retries_orderly_failures() {
        let (b, _state) = fake_broker(4);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 3));
        let p = Producer::builder().namesrv(&ns.addr).build().unwrap();
        for i in 0..9 {
            p.send(Message::new("T", format!("m{i}"))).unwrap();
        }
        let consumer = PushConsumer::builder()
            .namesrv(&ns.addr)
            .group("g")
            .subscribe("T", "*")
            .consume_from(ConsumeFrom::First)
            .suspend_timeout_ms(200)
            .reconsume_delay_ms(50)
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel::<(u32, u64, String)>();
        let refused = Arc::new(AtomicBool::new(false));
        let r2 = Arc::clone(&refused);
        let tx = Mutex::new(tx);
        consumer
            .start_orderly(move |msgs| {
                // Refuse the very first batch once: it comes back, in place.
                if !r2.swap(true, Ordering::SeqCst) {
                    return ConsumeStatus::ReconsumeLater;
                }
                let tx = tx.lock().unwrap();
                for m in msgs {
                    let body = String::from_utf8_lossy(&m.body).into_owned();
                    tx.send((m.queue_id, m.queue_offset.0, body)).unwrap();
                }
                ConsumeStatus::Success
            })
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..9 {
            got.push(rx.recv_timeout(WAIT).unwrap());
        }
        let late = p.send(Message::new("T", "late")).unwrap();
        let (q, off, body) = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(
            (q, off, body.as_str()),
            (late.queue_id, late.queue_offset.0, "late")
        );
        for q in 0..3 {
            let offsets: Vec<u64> = got.iter().filter(|g| g.0 == q).map(|g| g.1).collect();
            assert_eq!(offsets, vec![0, 1, 2], "queue {q}");
        }
        assert_eq!(consumer.assigned_queues().len(), 3);
        let started = Instant::now();
        consumer.shutdown();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn push_consumer_needs_a_subscription_and_an_existing_topic() {
        let (b, _state) = fake_broker(4);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 1));
        assert!(PushConsumer::builder().namesrv(&ns.addr).build().is_err());
        let c = PushConsumer::builder()
            .namesrv(&ns.addr)
            .subscribe("Missing", "*")
            .build()
            .unwrap();
        assert!(matches!(
            c.start(|_| ConsumeStatus::Success),
            Err(ClientError::NoRoute { .. })
        ));
    }
}
