//! Consumers: a pull consumer (the caller drives offsets) and a simple push consumer (one
//! long-polling thread per queue behind a listener).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use message::TagFilter;
use protocol::{Command, Frame, PullRequest, ResponseCode};

use crate::error::{ClientError, Result};
use crate::instance::{ClientConfig, Instance};
use crate::model::{
    decode_records, ConsumeStatus, MessageExt, MessageQueue, PullResult, PullStatus, QueueOffset,
    RecordSource,
};
use crate::producer::MESSAGE_BYTES_MAX_DEFAULT;
use crate::remoting::{unexpected, ResponseFuture};
use crate::route::QueueTarget;

/// What one pull asks for.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Default 32.
    pub max_messages: u32,
    /// Default 4 MiB.
    pub max_bytes: u32,
    /// `*`, `TagA` or `TagA || TagB`. Default `*`.
    pub tag_expression: String,
    /// How long the broker may hold a pull that finds nothing (long polling). 0 answers at
    /// once. Default 0.
    pub suspend_timeout_ms: u64,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            max_messages: 32,
            max_bytes: 4 * 1024 * 1024,
            tag_expression: "*".into(),
            suspend_timeout_ms: 0,
        }
    }
}

/// Reads queues at offsets the caller chooses.
pub struct PullConsumer {
    inner: Arc<PullInner>,
}

struct PullInner {
    inst: Arc<Instance>,
    group: String,
    /// Largest decompressed body accepted.
    body_bytes_max: usize,
}

/// A pull on the wire.
struct PendingPull {
    target: QueueTarget,
    offset: QueueOffset,
    filter: TagFilter,
    future: ResponseFuture,
}

impl PullConsumer {
    /// `namesrv` is a `;`-separated list of NameServer addresses.
    pub fn new(namesrv: &str, group: &str) -> Result<PullConsumer> {
        Self::with_config(ClientConfig::new(namesrv)?, group)
    }

    pub fn with_config(config: ClientConfig, group: &str) -> Result<PullConsumer> {
        if group.is_empty() {
            return Err(ClientError::Config("consumer group is empty".into()));
        }
        Ok(PullConsumer {
            inner: Arc::new(PullInner {
                inst: Instance::start(config)?,
                group: group.to_owned(),
                body_bytes_max: MESSAGE_BYTES_MAX_DEFAULT * 4,
            }),
        })
    }

    /// The readable queues of `topic`, freshly fetched from a NameServer.
    pub fn queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        Ok(self
            .inner
            .inst
            .fresh_route(topic)?
            .read_queues()
            .iter()
            .map(|t| t.queue.clone())
            .collect())
    }

    /// Reads up to `opts.max_messages` messages of `queue` from `offset`. Messages whose tag
    /// does not match the expression are dropped even if the broker's hash filter let them
    /// through; `next_offset` moves past them either way.
    pub fn pull(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<PullResult> {
        let pending = self.inner.start_pull(queue, offset, opts)?;
        let frame = pending.future.wait();
        self.inner.finish_pull(&pending, frame)
    }

    /// (min, max) offsets of `queue`; max is the offset the next message will get.
    pub fn queue_offsets(&self, queue: &MessageQueue) -> Result<(QueueOffset, QueueOffset)> {
        self.inner.inst.queue_offsets(queue)
    }

    pub fn min_offset(&self, queue: &MessageQueue) -> Result<QueueOffset> {
        Ok(self.queue_offsets(queue)?.0)
    }

    pub fn max_offset(&self, queue: &MessageQueue) -> Result<QueueOffset> {
        Ok(self.queue_offsets(queue)?.1)
    }

    /// The offset of the first message of `queue` stored at or after `timestamp_ms`.
    pub fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<QueueOffset> {
        self.inner.inst.search_offset(queue, timestamp_ms)
    }

    pub fn shutdown(&self) {
        self.inner.inst.shutdown();
    }
}

impl Drop for PullConsumer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl PullInner {
    fn start_pull(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<PendingPull> {
        let target = self.inst.queue_target(queue)?;
        let command = Command::Pull(PullRequest {
            consumer_group: self.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset.0,
            max_messages: opts.max_messages,
            max_bytes: opts.max_bytes,
            tag_expression: opts.tag_expression.clone(),
            suspend_timeout_ms: opts.suspend_timeout_ms,
        });
        // The broker may hold the pull for the suspend time; allow the usual timeout on top.
        let timeout = Duration::from_millis(opts.suspend_timeout_ms) + self.inst.request_timeout();
        let future = self
            .inst
            .pool
            .get(&target.addr)?
            .send_request(command, &[], timeout)?;
        Ok(PendingPull {
            target,
            offset,
            filter: TagFilter::parse(&opts.tag_expression),
            future,
        })
    }

    fn finish_pull(&self, pending: &PendingPull, frame: Result<Frame>) -> Result<PullResult> {
        let result = frame.and_then(|f| self.parse_pull(pending, f));
        if let Err(e) = &result {
            if e.is_connection_failure() {
                // The broker may have moved or died: look again before the next pull.
                let _ = self.inst.routes.refresh(&pending.target.queue.topic);
            }
        }
        result
    }

    fn parse_pull(&self, pending: &PendingPull, frame: Frame) -> Result<PullResult> {
        let addr = &pending.target.addr;
        let code = frame.header.response_code();
        let (next, min, max) = match &frame.header.command {
            Command::PullResult(r) => (
                QueueOffset(r.next_offset),
                QueueOffset(r.min_offset),
                QueueOffset(r.max_offset),
            ),
            _ => (pending.offset, QueueOffset(0), QueueOffset(0)),
        };
        let result = |status, messages| PullResult {
            status,
            next_offset: next,
            min_offset: min,
            max_offset: max,
            messages,
        };
        match code {
            ResponseCode::Success => {
                if !matches!(frame.header.command, Command::PullResult(_)) {
                    return Err(unexpected(addr, "pull result", &frame.header.command));
                }
                let source = RecordSource {
                    addr,
                    shard: pending.target.shard,
                };
                let messages =
                    decode_records(&frame.body, &pending.filter, source, self.body_bytes_max)?;
                Ok(result(PullStatus::Found, messages))
            }
            ResponseCode::PullNotFound | ResponseCode::PullRetryImmediately => {
                Ok(result(PullStatus::NoNewMessage, Vec::new()))
            }
            ResponseCode::PullOffsetMoved => {
                if !matches!(frame.header.command, Command::PullResult(_)) {
                    return Err(unexpected(addr, "pull result", &frame.header.command));
                }
                Ok(result(PullStatus::OffsetMoved, Vec::new()))
            }
            code => Err(ClientError::Broker {
                addr: addr.clone(),
                code,
                remark: frame.header.remark,
            }),
        }
    }
}

/// Where a push consumer starts reading each queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeFrom {
    /// The oldest message still stored.
    First,
    /// Only messages sent after the start.
    Last,
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// Configures a [`PushConsumer`].
#[derive(Debug, Clone)]
pub struct PushConsumerBuilder {
    namesrv: String,
    group: String,
    subscriptions: Vec<(String, String)>,
    from: ConsumeFrom,
    batch_max: u32,
    suspend_timeout_ms: u64,
    reconsume_delay_ms: u64,
}

impl Default for PushConsumerBuilder {
    fn default() -> Self {
        PushConsumerBuilder {
            namesrv: "127.0.0.1:9876".into(),
            group: "DEFAULT_CONSUMER".into(),
            subscriptions: Vec::new(),
            from: ConsumeFrom::Last,
            batch_max: 32,
            suspend_timeout_ms: 15_000,
            reconsume_delay_ms: 1000,
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

    /// Default `DEFAULT_CONSUMER`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Consumes every queue of `topic` whose messages match `tag_expression` (`*`, `TagA`,
    /// `TagA || TagB`).
    pub fn subscribe(
        mut self,
        topic: impl Into<String>,
        tag_expression: impl Into<String>,
    ) -> Self {
        self.subscriptions
            .push((topic.into(), tag_expression.into()));
        self
    }

    /// Default [`ConsumeFrom::Last`].
    pub fn consume_from(mut self, from: ConsumeFrom) -> Self {
        self.from = from;
        self
    }

    /// Largest batch handed to the listener, 1..=1024. Default 32.
    pub fn batch_max(mut self, n: u32) -> Self {
        self.batch_max = n;
        self
    }

    /// How long the broker may hold a pull that finds nothing. Default 15000 ms.
    pub fn suspend_timeout_ms(mut self, ms: u64) -> Self {
        self.suspend_timeout_ms = ms;
        self
    }

    /// Wait before handing a batch back after [`ConsumeStatus::ReconsumeLater`]. Default
    /// 1000 ms.
    pub fn reconsume_delay_ms(mut self, ms: u64) -> Self {
        self.reconsume_delay_ms = ms;
        self
    }

    pub fn build(self) -> Result<PushConsumer> {
        if self.subscriptions.is_empty() {
            return Err(ClientError::Config("no subscription".into()));
        }
        if !(1..=1024).contains(&self.batch_max) {
            return Err(ClientError::Config(format!(
                "batch size {} is outside 1..=1024",
                self.batch_max
            )));
        }
        let pull = PullConsumer::new(&self.namesrv, &self.group)?;
        Ok(PushConsumer {
            pull,
            settings: self,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
        })
    }
}

/// The listener of a push consumer; called from the queue's thread.
pub type Listener = dyn Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static;

/// Long-polls every queue of the subscribed topics, one thread per queue, and hands the
/// messages to a listener in queue order. Offsets are kept in memory only (consumer groups
/// and broker-side offsets come later).
pub struct PushConsumer {
    pull: PullConsumer,
    settings: PushConsumerBuilder,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// How often a waiting queue thread looks at the stop flag.
const STOP_CHECK_MS: u64 = 100;
/// Pause after a failed pull before trying again.
const PULL_ERROR_BACKOFF_MS: u64 = 1000;

impl PushConsumer {
    pub fn builder() -> PushConsumerBuilder {
        PushConsumerBuilder::new()
    }

    /// Starts one thread per readable queue of each subscribed topic.
    pub fn start<F>(&self, listener: F) -> Result<()>
    where
        F: Fn(&[MessageExt]) -> ConsumeStatus + Send + Sync + 'static,
    {
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        if !threads.is_empty() {
            return Err(ClientError::Config("push consumer already started".into()));
        }
        if self.stop.load(Ordering::Acquire) {
            return Err(ClientError::Shutdown);
        }
        let listener: Arc<Listener> = Arc::new(listener);
        let mut work = Vec::new();
        for (topic, expr) in &self.settings.subscriptions {
            let route = self.pull.inner.inst.fresh_route(topic)?;
            if route.read_queues().is_empty() {
                return Err(ClientError::NoRoute {
                    topic: topic.clone(),
                });
            }
            for t in route.read_queues() {
                work.push((t.queue.clone(), expr.clone()));
            }
        }
        for (queue, expr) in work {
            let worker = QueueWorker {
                pull: Arc::clone(&self.pull.inner),
                queue,
                opts: PullOptions {
                    max_messages: self.settings.batch_max,
                    tag_expression: expr,
                    suspend_timeout_ms: self.settings.suspend_timeout_ms,
                    ..PullOptions::default()
                },
                from: self.settings.from,
                reconsume_delay: Duration::from_millis(self.settings.reconsume_delay_ms),
                stop: Arc::clone(&self.stop),
                listener: Arc::clone(&listener),
            };
            let handle = thread::Builder::new()
                .name(format!("mq-push-{}", worker.queue))
                .spawn(move || worker.run());
            match handle {
                Ok(h) => threads.push(h),
                Err(e) => {
                    drop(threads);
                    self.shutdown();
                    return Err(ClientError::io("push consumer", &e));
                }
            }
        }
        Ok(())
    }

    /// Stops the queue threads (a listener call in progress finishes first) and closes the
    /// connections.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for t in threads {
            if t.join().is_err() {
                tracing::warn!("a push consumer thread panicked");
            }
        }
        self.pull.shutdown();
    }
}

impl Drop for PushConsumer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct QueueWorker {
    pull: Arc<PullInner>,
    queue: MessageQueue,
    opts: PullOptions,
    from: ConsumeFrom,
    reconsume_delay: Duration,
    stop: Arc<AtomicBool>,
    listener: Arc<Listener>,
}

impl QueueWorker {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sleeps up to `d`; false if stopped meanwhile.
    fn pause(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            thread::sleep(left.min(Duration::from_millis(STOP_CHECK_MS)));
        }
        false
    }

    fn start_offset(&self) -> Result<QueueOffset> {
        match self.from {
            ConsumeFrom::First => Ok(self.pull.inst.queue_offsets(&self.queue)?.0),
            ConsumeFrom::Last => Ok(self.pull.inst.queue_offsets(&self.queue)?.1),
            ConsumeFrom::Timestamp(ms) => self.pull.inst.search_offset(&self.queue, ms),
        }
    }

    /// One pull, abandoned if the consumer stops while it waits. `Ok(None)` when stopped.
    fn pull_once(&self, offset: QueueOffset) -> Result<Option<PullResult>> {
        let pending = self.pull.start_pull(&self.queue, offset, &self.opts)?;
        loop {
            if self.stopped() {
                return Ok(None);
            }
            if let Some(frame) = pending
                .future
                .wait_for(Duration::from_millis(STOP_CHECK_MS))
            {
                return self.pull.finish_pull(&pending, frame).map(Some);
            }
        }
    }

    fn run(self) {
        let mut offset: Option<QueueOffset> = None;
        while !self.stopped() {
            let at = match offset {
                Some(o) => o,
                None => match self.start_offset() {
                    Ok(o) => {
                        offset = Some(o);
                        o
                    }
                    Err(e) => {
                        tracing::warn!(queue = %self.queue, error = %e, "cannot find start offset");
                        self.pause(Duration::from_millis(PULL_ERROR_BACKOFF_MS));
                        continue;
                    }
                },
            };
            match self.pull_once(at) {
                Ok(None) => break,
                Ok(Some(result)) => {
                    if !result.messages.is_empty() && !self.consume(&result.messages) {
                        break;
                    }
                    if result.status == PullStatus::OffsetMoved {
                        tracing::warn!(queue = %self.queue, from = %at, to = %result.next_offset, "offset moved");
                    }
                    offset = Some(result.next_offset);
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue, error = %e, "pull failed");
                    self.pause(Duration::from_millis(PULL_ERROR_BACKOFF_MS));
                }
            }
        }
    }

    /// Hands the batch to the listener until it succeeds; false if stopped first.
    fn consume(&self, messages: &[MessageExt]) -> bool {
        loop {
            match (self.listener)(messages) {
                ConsumeStatus::Success => return true,
                ConsumeStatus::ReconsumeLater => {
                    if !self.pause(self.reconsume_delay) {
                        return false;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::producer::Producer;
    use crate::testing::{broker, fake_broker, namesrv, route, FakeServer};
    use std::sync::mpsc;

    const WAIT: Duration = Duration::from_secs(10);

    fn setup(queues: u32) -> (FakeServer, FakeServer, Producer) {
        let (b, _state) = fake_broker(4);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], queues));
        let p = Producer::builder().namesrv(&ns.addr).build().unwrap();
        (b, ns, p)
    }

    fn queue(id: u32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn pull_reads_filters_and_reports_offsets() {
        let (_b, ns, p) = setup(1);
        let big = "z".repeat(20_000);
        for i in 0..5 {
            let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
            let body = if i == 4 { big.clone() } else { format!("m{i}") };
            p.send(
                Message::new("T", body)
                    .with_tags(tag)
                    .with_key(format!("k{i}")),
            )
            .unwrap();
        }
        let c = PullConsumer::new(&ns.addr, "g").unwrap();
        assert_eq!(c.queues("T").unwrap(), vec![queue(0)]);
        assert_eq!(
            c.queue_offsets(&queue(0)).unwrap(),
            (QueueOffset(0), QueueOffset(5))
        );
        let all = c
            .pull(&queue(0), QueueOffset(0), &PullOptions::default())
            .unwrap();
        assert_eq!(all.status, PullStatus::Found);
        assert_eq!(all.next_offset, QueueOffset(5));
        assert_eq!(all.messages.len(), 5);
        // The compressed body comes back whole.
        assert_eq!(&all.messages[4].body[..], big.as_bytes());
        assert_eq!(all.messages[1].keys, vec!["k1"]);
        assert!(all.messages.iter().all(|m| m.msg_id.len() == 32));
        let opts = PullOptions {
            tag_expression: "TagB".into(),
            max_messages: 2,
            ..PullOptions::default()
        };
        let b = c.pull(&queue(0), QueueOffset(0), &opts).unwrap();
        let offsets: Vec<u64> = b.messages.iter().map(|m| m.queue_offset.0).collect();
        assert_eq!(offsets, vec![1, 3]);
        assert_eq!(b.next_offset, QueueOffset(4));
        let none = c
            .pull(&queue(0), QueueOffset(5), &PullOptions::default())
            .unwrap();
        assert_eq!(none.status, PullStatus::NoNewMessage);
        assert_eq!(none.next_offset, QueueOffset(5));
        let moved = c
            .pull(&queue(0), QueueOffset(99), &PullOptions::default())
            .unwrap();
        assert_eq!(moved.status, PullStatus::OffsetMoved);
        assert_eq!(moved.next_offset, QueueOffset(5));
        assert_eq!(c.search_offset(&queue(0), 0).unwrap(), QueueOffset(0));
    }

    #[test]
    fn push_consumer_delivers_every_queue_and_retries_reconsume_later() {
        let (_b, ns, p) = setup(3);
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
            .start(move |msgs| {
                // Refuse the very first batch once.
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
        // A message sent after the start arrives too (long polling picks it up).
        let late = p.send(Message::new("T", "late")).unwrap();
        let (q, off, body) = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(
            (q, off, body.as_str()),
            (late.queue_id, late.queue_offset.0, "late")
        );
        got.sort();
        let bodies: std::collections::BTreeSet<String> = got.iter().map(|g| g.2.clone()).collect();
        assert_eq!(bodies.len(), 9);
        for q in 0..3 {
            let offsets: Vec<u64> = got.iter().filter(|g| g.0 == q).map(|g| g.1).collect();
            assert_eq!(offsets, vec![0, 1, 2], "queue {q}");
        }
        let started = Instant::now();
        consumer.shutdown();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn push_consumer_needs_a_subscription_and_an_existing_topic() {
        let (_b, ns, _p) = setup(1);
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
