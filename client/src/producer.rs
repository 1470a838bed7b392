//! The producer: picks a queue, encodes records, sends them to the core that owns the queue,
//! and retries retriable failures on another queue.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use message::{UniqKeyGenerator, UNIQ_KEY_CHARS};
use protocol::{Command, Frame, SendRequest};

use crate::error::{ClientError, Result};
use crate::instance::{ClientConfig, Instance};
use crate::model::{
    encode_message_with, now_ms, BatchLayout, BatchSendResult, EncodeOptions, Message, MessageExt,
    MessageQueue, SendResult,
};
use crate::remoting::{expect_success, unexpected};
use crate::route::{QueueTarget, TopicRoute};

/// Largest retry count a producer accepts.
pub const SEND_RETRIES_MAX: u32 = 16;
/// RocketMQ's default maximum message size.
pub const MESSAGE_BYTES_MAX_DEFAULT: usize = 4 * 1024 * 1024;
/// Room left in a frame for its header when checking a batch against the frame limit.
const FRAME_HEADER_ROOM_BYTES: usize = 64 * 1024;

/// Configures a [`Producer`]. Every setting has a default; see each method.
#[derive(Debug, Clone)]
pub struct ProducerBuilder {
    namesrv: String,
    group: String,
    send_timeout_ms: u64,
    retries: u32,
    compress_threshold_bytes: usize,
    compress_level: i32,
    message_bytes_max: usize,
    inflight_max_per_connection: usize,
    route_refresh_interval_ms: u64,
    enable_trace: bool,
    credentials: Option<crate::Credentials>,
    tls: Option<tls::ClientSettings>,
}

impl Default for ProducerBuilder {
    fn default() -> Self {
        ProducerBuilder {
            namesrv: "127.0.0.1:9876".into(),
            group: "DEFAULT_PRODUCER".into(),
            send_timeout_ms: 3000,
            retries: 2,
            compress_threshold_bytes: 4096,
            compress_level: 3,
            message_bytes_max: MESSAGE_BYTES_MAX_DEFAULT,
            inflight_max_per_connection: 4096,
            route_refresh_interval_ms: 30_000,
            enable_trace: false,
            credentials: None,
            tls: None,
        }
    }
}

impl ProducerBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `;`-separated NameServer addresses. Default `127.0.0.1:9876`.
    pub fn namesrv(mut self, addrs: impl Into<String>) -> Self {
        self.namesrv = addrs.into();
        self
    }

    /// Default `DEFAULT_PRODUCER`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Total time a send may take, retries included. Default 3000 ms.
    pub fn send_timeout_ms(mut self, ms: u64) -> Self {
        self.send_timeout_ms = ms;
        self
    }

    /// Extra attempts after a retriable failure, 0..=[`SEND_RETRIES_MAX`]. Default 2.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Bodies larger than this are zstd-compressed. Default 4096 bytes.
    pub fn compress_threshold_bytes(mut self, bytes: usize) -> Self {
        self.compress_threshold_bytes = bytes;
        self
    }

    /// zstd level, 1..=22. Default 3.
    pub fn compress_level(mut self, level: i32) -> Self {
        self.compress_level = level;
        self
    }

    /// Largest body accepted, before compression. Default 4 MiB.
    pub fn message_bytes_max(mut self, bytes: usize) -> Self {
        self.message_bytes_max = bytes;
        self
    }

    /// Requests in flight per connection before `send_async` waits. Default 4096.
    pub fn inflight_max_per_connection(mut self, n: usize) -> Self {
        self.inflight_max_per_connection = n;
        self
    }

    /// Period of the background route refresh. Default 30000 ms.
    pub fn route_refresh_interval_ms(mut self, ms: u64) -> Self {
        self.route_refresh_interval_ms = ms;
        self
    }

    /// Message trace (RocketMQ's `new DefaultMQProducer(group, true)`): each sent message
    /// leaves a `Pub` record in `RMQ_SYS_TRACE_TOPIC`, written in batches by a background
    /// thread; a send never waits for it. Off by default.
    pub fn enable_trace(mut self, on: bool) -> Self {
        self.enable_trace = on;
        self
    }

    /// The account to log in as where the ACL is on (RocketMQ's `AclClientRPCHook` with
    /// `SessionCredentials`). Default: the process's `set_default_credentials`.
    pub fn credentials(mut self, credentials: crate::Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Speaks TLS to the NameServers and the brokers (see [`ClientConfig::with_tls`]).
    /// Default: as [`crate::set_default_tls`] set, plaintext unless it was called.
    pub fn tls(mut self, settings: tls::ClientSettings) -> Self {
        self.tls = Some(settings);
        self
    }

    pub fn build(self) -> Result<Producer> {
        if self.retries > SEND_RETRIES_MAX {
            return Err(ClientError::Config(format!(
                "retries {} exceeds the maximum of {SEND_RETRIES_MAX}",
                self.retries
            )));
        }
        if self.send_timeout_ms == 0 {
            return Err(ClientError::Config("send timeout must be > 0 ms".into()));
        }
        if self.group.is_empty() {
            return Err(ClientError::Config("producer group is empty".into()));
        }
        if !(1..=22).contains(&self.compress_level) {
            return Err(ClientError::Config(format!(
                "zstd level {} is outside 1..=22",
                self.compress_level
            )));
        }
        let frame_room = protocol::FRAME_BYTES_MAX_DEFAULT as usize - FRAME_HEADER_ROOM_BYTES;
        if self.message_bytes_max == 0 || self.message_bytes_max > frame_room {
            return Err(ClientError::Config(format!(
                "message size limit must be 1..={frame_room} bytes"
            )));
        }
        let mut config = ClientConfig::new(&self.namesrv)?;
        if let Some(settings) = &self.tls {
            config = config.with_tls(settings)?;
        }
        config.route_refresh_interval_ms = self.route_refresh_interval_ms;
        config.pool.inflight_max = self.inflight_max_per_connection;
        if let Some(c) = self.credentials {
            config.pool.credentials = Some(c);
        }
        config.pool.write_timeout_ms = config.pool.write_timeout_ms.max(self.send_timeout_ms);
        let inst = Instance::start(config)?;
        let encode = EncodeOptions {
            compress_threshold_bytes: self.compress_threshold_bytes,
            compress_level: self.compress_level,
            message_bytes_max: self.message_bytes_max,
            born_host: SocketAddrV4::new(inst.local_ip, 0),
        };
        let uniq = UniqKeyGenerator::new(inst.local_ip);
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let client_id = format!(
            "{}@{}@p{}",
            inst.local_ip,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let trace =
            crate::trace::TraceDispatcher::start_if(self.enable_trace, &self.namesrv, &self.group)?;
        Ok(Producer {
            inner: Arc::new(ProducerInner {
                trace,
                client_id,
                inst,
                group: self.group,
                send_timeout: Duration::from_millis(self.send_timeout_ms),
                retries: self.retries,
                encode,
                uniq,
                round_robin: RwLock::new(HashMap::new()),
            }),
        })
    }
}

/// Sends messages. Share it between threads behind an `Arc`; dropping it (or
/// [`Producer::shutdown`]) closes its connections.
pub struct Producer {
    inner: Arc<ProducerInner>,
}

/// The callback of an asynchronous single send.
pub type SendCallback = Box<dyn FnOnce(Result<SendResult>) + Send + 'static>;
/// The callback of an asynchronous batch send.
pub type BatchCallback = Box<dyn FnOnce(Result<BatchSendResult>) + Send + 'static>;

impl Producer {
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::new()
    }

    pub(crate) fn instance(&self) -> &Arc<Instance> {
        &self.inner.inst
    }

    pub(crate) fn group(&self) -> &str {
        &self.inner.group
    }

    /// Sends and waits for the broker's result, retrying retriable failures.
    pub fn send(&self, msg: Message) -> Result<SendResult> {
        refuse_reply(&msg)?;
        let started = Instant::now();
        let prepared = self.inner.prepare(std::slice::from_ref(&msg), None)?;
        let sent = self.inner.send_prepared(&prepared);
        self.inner
            .trace_pub(std::slice::from_ref(&msg), &sent, started);
        first(sent?)
    }

    /// Sends to the given queue (retries stay on that queue).
    pub fn send_to_queue(&self, msg: Message, queue: &MessageQueue) -> Result<SendResult> {
        let started = Instant::now();
        let prepared = self
            .inner
            .prepare(std::slice::from_ref(&msg), Some(queue.clone()))?;
        let sent = self.inner.send_prepared(&prepared);
        self.inner
            .trace_pub(std::slice::from_ref(&msg), &sent, started);
        first(sent?)
    }

    /// Sends several messages of one topic in one frame to one queue. The result covers the
    /// batch; [`BatchSendResult::results`] gives each message's, in the order of `msgs`.
    pub fn send_batch(&self, msgs: Vec<Message>) -> Result<BatchSendResult> {
        let started = Instant::now();
        let prepared = self.inner.prepare(&msgs, None)?;
        let sent = self.inner.send_prepared(&prepared);
        self.inner.trace_pub(&msgs, &sent, started);
        sent
    }

    /// [`Producer::send_batch`] to the given queue (retries stay on that queue).
    pub fn send_batch_to_queue(
        &self,
        msgs: Vec<Message>,
        queue: &MessageQueue,
    ) -> Result<BatchSendResult> {
        let started = Instant::now();
        let prepared = self.inner.prepare(&msgs, Some(queue.clone()))?;
        let sent = self.inner.send_prepared(&prepared);
        self.inner.trace_pub(&msgs, &sent, started);
        sent
    }

    /// Sends without waiting: `callback` gets the outcome, exactly once, on a client thread
    /// (or on this thread if the send fails before reaching the network). `Err` here means
    /// the message was refused before sending (invalid, too large) and `callback` will not
    /// be called. Waits while the connection's in-flight window is full.
    pub fn send_async<F>(&self, msg: Message, callback: F) -> Result<()>
    where
        F: FnOnce(Result<SendResult>) + Send + 'static,
    {
        let prepared = self.inner.prepare(std::slice::from_ref(&msg), None)?;
        let cb = self
            .inner
            .traced(vec![msg], Box::new(move |r| callback(r.and_then(first))));
        AsyncSend::start(&self.inner, prepared, cb);
        Ok(())
    }

    /// [`Producer::send_async`] to the given queue.
    pub fn send_async_to_queue<F>(
        &self,
        msg: Message,
        queue: &MessageQueue,
        callback: F,
    ) -> Result<()>
    where
        F: FnOnce(Result<SendResult>) + Send + 'static,
    {
        let prepared = self
            .inner
            .prepare(std::slice::from_ref(&msg), Some(queue.clone()))?;
        let cb = self
            .inner
            .traced(vec![msg], Box::new(move |r| callback(r.and_then(first))));
        AsyncSend::start(&self.inner, prepared, cb);
        Ok(())
    }

    /// [`Producer::send_batch`] without waiting; see [`Producer::send_async`].
    pub fn send_batch_async<F>(&self, msgs: Vec<Message>, callback: F) -> Result<()>
    where
        F: FnOnce(Result<BatchSendResult>) + Send + 'static,
    {
        let prepared = self.inner.prepare(&msgs, None)?;
        let cb = self.inner.traced(msgs, Box::new(callback));
        AsyncSend::start(&self.inner, prepared, cb);
        Ok(())
    }

    /// Request-reply (RocketMQ's `request(msg, timeout)`): sends `msg` as a request and
    /// waits up to `timeout` for the consumer's reply (built with
    /// [`crate::create_reply_message`], sent with [`Producer::reply`]), which the broker
    /// pushes over this producer's connection. [`ClientError::RequestTimeout`] when no reply
    /// comes in time (the request itself stays stored and may still be consumed).
    pub fn request(&self, msg: Message, timeout: Duration) -> Result<MessageExt> {
        use crate::reply::prop;
        let inner = &self.inner;
        let started = Instant::now();
        if timeout.is_zero() {
            return Err(ClientError::Config("request timeout must be > 0 ms".into()));
        }
        refuse_reply(&msg)?;
        let route = inner.inst.routes.get_for_send(&msg.topic)?;
        let target = inner.choose(&route, &Selector::RoundRobin, None)?;
        let cluster = route
            .data
            .brokers
            .iter()
            .find(|b| b.broker_name == target.queue.broker_name)
            .map(|b| b.cluster.clone())
            .unwrap_or_default();
        // The broker pushes the reply on a connection that said whose it is: this one.
        inner.inst.broker_request(
            &target.addr,
            Command::IdentifyClient {
                client_id: inner.client_id.clone(),
            },
        )?;
        let mut correlation_id = String::with_capacity(UNIQ_KEY_CHARS);
        inner.uniq.push_keys(1, &mut correlation_id);
        let waiting = crate::reply::Waiting::new(&inner.inst.replies, &correlation_id);
        let mut msg = msg
            .with_property(prop::CORRELATION_ID, correlation_id.as_str())
            .with_property(prop::REPLY_TO_CLIENT, inner.client_id.as_str())
            .with_property(prop::TTL, timeout.as_millis().to_string());
        if !cluster.is_empty() {
            msg = msg.with_property(prop::CLUSTER, cluster);
        }
        let topic = msg.topic.clone();
        self.send_to_queue(msg, &target.queue)?;
        let left = timeout.saturating_sub(started.elapsed());
        waiting
            .rx
            .recv_timeout(left)
            .map_err(|_| ClientError::RequestTimeout {
                topic,
                correlation_id: correlation_id.clone(),
                timeout_ms: timeout.as_millis() as u64,
            })
    }

    /// Sends a reply ([`crate::create_reply_message`]) to the requester that waits for it:
    /// the broker pushes it over the requester's connection. An error when the requester is
    /// gone (the broker found no connection of it) or the message is no reply.
    pub fn reply(&self, msg: Message) -> Result<()> {
        if !crate::reply::is_reply(&msg) {
            return Err(ClientError::InvalidMessage(
                "not a reply: build it with create_reply_message".into(),
            ));
        }
        let inner = &self.inner;
        let prepared = inner.prepare(std::slice::from_ref(&msg), None)?;
        let route = inner.inst.routes.get_for_send(&prepared.topic)?;
        let target = inner.choose(&route, &prepared.selector, None)?;
        let Command::Send(req) = inner.send_command(&prepared, &target) else {
            return Err(ClientError::InvalidMessage("not a send".into()));
        };
        let frame = inner.inst.pool.get(&target.addr)?.request(
            Command::SendReply(req),
            &prepared.body,
            inner.send_timeout,
        )?;
        expect_success(&target.addr, frame).map(|_| ())
    }

    /// This producer's client id (what replies to its requests name).
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// Sends without any answer from the broker: no result, no retry.
    pub fn send_oneway(&self, msg: Message) -> Result<()> {
        let inner = &self.inner;
        let prepared = inner.prepare(std::slice::from_ref(&msg), None)?;
        let route = inner.inst.routes.get_for_send(&prepared.topic)?;
        let target = inner.choose(&route, &prepared.selector, None)?;
        inner
            .inst
            .pool
            .get(&target.addr)?
            .oneway(inner.send_command(&prepared, &target), &prepared.body)
    }

    /// Sends a consumed message on (to a retry or dead-letter topic) under its original id
    /// and with its reconsume count.
    pub(crate) fn send_back(
        &self,
        msg: &Message,
        uniq_key: &str,
        reconsume_times: i32,
        queue: Option<MessageQueue>,
    ) -> Result<SendResult> {
        let inner = &self.inner;
        let mut body = Vec::with_capacity(msg.body.len() + 256);
        let born = now_ms();
        let len = encode_message_with(
            msg,
            uniq_key,
            reconsume_times,
            born,
            &inner.encode,
            &mut body,
        )?;
        let selector = match queue {
            Some(q) => Selector::Queue(q),
            None => Selector::RoundRobin,
        };
        let mut layout = BatchLayout::with_capacity(1);
        layout.push(uniq_key, len);
        let prepared = Prepared {
            topic: msg.topic.clone(),
            body,
            layout: Arc::new(layout),
            selector,
        };
        first(inner.send_prepared(&prepared)?)
    }

    /// The queues this producer round-robins over for `topic`.
    pub fn write_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        Ok(self
            .inner
            .inst
            .routes
            .get(topic)?
            .write_queues()
            .iter()
            .map(|t| t.queue.clone())
            .collect())
    }

    /// Closes the connections; later sends fail with [`ClientError::Shutdown`] and pending
    /// asynchronous sends complete with an error.
    pub fn shutdown(&self) {
        if let Some(t) = &self.inner.trace {
            t.shutdown();
        }
        self.inner.inst.shutdown();
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A reply goes through [`Producer::reply`], which has the broker push it to its requester.
fn refuse_reply(msg: &Message) -> Result<()> {
    if crate::reply::is_reply(msg) {
        return Err(ClientError::InvalidMessage(
            "a reply message (MSG_TYPE=reply) is sent with Producer::reply".into(),
        ));
    }
    Ok(())
}

fn first(batch: BatchSendResult) -> Result<SendResult> {
    batch.get(0).ok_or_else(|| ClientError::Protocol {
        addr: String::new(),
        detail: "send result without messages".into(),
    })
}

/// How the queue of a send is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    /// Message i of a topic goes to write queue i mod n.
    RoundRobin,
    /// Sharding key hash mod n: the same key always lands on the same queue.
    Hash(u64),
    Queue(MessageQueue),
}

/// Encoded records ready to send, reused unchanged by every attempt (the unique keys stay
/// the same, so a retried message keeps its id).
pub(crate) struct Prepared {
    topic: String,
    body: Vec<u8>,
    layout: Arc<BatchLayout>,
    selector: Selector,
}

struct ProducerInner {
    /// Where the trace records go, with tracing on.
    trace: Option<Arc<crate::trace::TraceDispatcher>>,
    /// Who this producer is to the brokers: replies to its requests name it.
    client_id: String,
    inst: Arc<Instance>,
    group: String,
    send_timeout: Duration,
    retries: u32,
    encode: EncodeOptions,
    uniq: UniqKeyGenerator,
    round_robin: RwLock<HashMap<String, Arc<AtomicU64>>>,
}

impl ProducerInner {
    /// With tracing on: a `Pub` record for each message of a successful send (RocketMQ's
    /// trace hook records sends that have a result).
    fn trace_pub(&self, msgs: &[Message], sent: &Result<BatchSendResult>, started: Instant) {
        let (Some(trace), Ok(r)) = (&self.trace, sent) else {
            return;
        };
        let cost_ms = started.elapsed().as_millis() as u64;
        let timestamp_ms = now_ms();
        for (i, m) in msgs.iter().enumerate() {
            let Some(one) = r.get(i) else {
                continue;
            };
            trace.record(crate::trace::TraceRecord::Pub {
                timestamp_ms,
                group: self.group.clone(),
                topic: m.topic.clone(),
                msg_id: one.msg_id,
                tags: m.tags.clone().unwrap_or_default(),
                keys: m.keys.join(" "),
                store_host: r.store_host().to_string(),
                body_len: m.body.len(),
                cost_ms,
                offset_msg_id: one.offset_msg_id,
                success: true,
            });
        }
    }

    /// `callback` with the `Pub` records of `msgs` written first, with tracing on.
    fn traced(self: &Arc<Self>, msgs: Vec<Message>, callback: BatchCallback) -> BatchCallback {
        if self.trace.is_none() {
            return callback;
        }
        let inner = Arc::clone(self);
        let started = Instant::now();
        Box::new(move |r| {
            inner.trace_pub(&msgs, &r, started);
            callback(r)
        })
    }

    fn prepare(&self, msgs: &[Message], queue: Option<MessageQueue>) -> Result<Prepared> {
        let Some(head) = msgs.first() else {
            return Err(ClientError::InvalidMessage("no message to send".into()));
        };
        if let Some(m) = msgs.iter().find(|m| m.topic != head.topic) {
            return Err(ClientError::InvalidMessage(format!(
                "a batch must have one topic: {} and {}",
                head.topic, m.topic
            )));
        }
        if let Some(q) = &queue {
            if q.topic != head.topic {
                return Err(ClientError::InvalidMessage(format!(
                    "queue {q} is not of topic {}",
                    head.topic
                )));
            }
        }
        let mut body = Vec::with_capacity(msgs.iter().map(|m| m.body.len() + 256).sum());
        let mut layout = BatchLayout::with_capacity(msgs.len());
        // One clock reading for the batch's keys and born timestamps.
        let born = now_ms();
        let mut keys = String::with_capacity(UNIQ_KEY_CHARS * msgs.len());
        self.uniq.push_keys(msgs.len() as u32, &mut keys);
        for (i, m) in msgs.iter().enumerate() {
            let key = keys
                .get(i * UNIQ_KEY_CHARS..(i + 1) * UNIQ_KEY_CHARS)
                .unwrap_or_default();
            let len = encode_message_with(m, key, 0, born, &self.encode, &mut body)?;
            layout.push(key, len);
        }
        let frame_room = protocol::FRAME_BYTES_MAX_DEFAULT as usize - FRAME_HEADER_ROOM_BYTES;
        if body.len() > frame_room {
            return Err(ClientError::TooLarge {
                size: body.len(),
                max: frame_room,
            });
        }
        let selector = match (queue, &head.sharding_key) {
            (Some(q), _) => Selector::Queue(q),
            (None, Some(key)) if msgs.iter().all(|m| m.sharding_key.as_ref() == Some(key)) => {
                Selector::Hash(message::tag_hash(key).unsigned_abs())
            }
            _ => Selector::RoundRobin,
        };
        Ok(Prepared {
            topic: head.topic.clone(),
            body,
            layout: Arc::new(layout),
            selector,
        })
    }

    fn counter(&self, topic: &str) -> Arc<AtomicU64> {
        if let Some(c) = self
            .round_robin
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
        {
            return Arc::clone(c);
        }
        let mut map = self
            .round_robin
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // A new producer starts its round robin at a random queue, as RocketMQ's do, so that
        // many producers started together do not all begin with queue 0.
        Arc::clone(
            map.entry(topic.to_owned())
                .or_insert_with(|| Arc::new(AtomicU64::new(u64::from(rand::random::<u16>())))),
        )
    }

    /// Picks the queue for an attempt; a retry of a round-robin send avoids the broker that
    /// just failed when the topic has another.
    fn choose(
        &self,
        route: &TopicRoute,
        selector: &Selector,
        avoid_broker: Option<&str>,
    ) -> Result<QueueTarget> {
        let queues = route.write_queues();
        // No writable queue: the topic's masters may be failing over. The next send looks
        // the route up again (rate limited), not only at the periodic refresh, so it finds
        // a new master as soon as that registers.
        let no_route = || {
            self.inst.routes.refresh_after_failure(&route.topic);
            ClientError::NoRoute {
                topic: route.topic.clone(),
            }
        };
        match selector {
            Selector::Queue(q) => route.target(q).ok_or_else(no_route),
            _ if queues.is_empty() => Err(no_route()),
            // Java's `Math.abs(key.hashCode()) % n`, as RocketMQ's SelectMessageQueueByHash.
            Selector::Hash(h) => Ok(queues[(*h % queues.len() as u64) as usize].clone()),
            Selector::RoundRobin => {
                let counter = self.counter(&route.topic);
                let n = queues.len() as u64;
                let start = counter.fetch_add(1, Ordering::Relaxed);
                let pick = (0..n)
                    .map(|i| &queues[((start + i) % n) as usize])
                    .find(|t| Some(t.queue.broker_name.as_str()) != avoid_broker)
                    .unwrap_or(&queues[(start % n) as usize]);
                Ok(pick.clone())
            }
        }
    }

    fn send_command(&self, p: &Prepared, target: &QueueTarget) -> Command {
        Command::Send(SendRequest {
            producer_group: self.group.clone(),
            topic: p.topic.clone(),
            queue_id: target.queue.queue_id,
            count: p.layout.len() as u32,
        })
    }

    fn parse_response(
        &self,
        p: &Prepared,
        target: &QueueTarget,
        frame: Frame,
    ) -> Result<BatchSendResult> {
        match expect_success(&target.addr, frame)?.header.command {
            Command::SendResult(r) => Ok(BatchSendResult::new(
                &r,
                &p.topic,
                &target.queue.broker_name,
                &p.layout,
            )),
            other => Err(unexpected(&target.addr, "send result", &other)),
        }
    }

    /// Whether to try again after `e` on attempt number `attempt` (0-based). First refreshes
    /// the route when the failure suggests it is stale, retry or not (at most once per
    /// topic per `FAILURE_REFRESH_INTERVAL`): a broker restarted on new ports was otherwise
    /// sent to at its old ones until the next periodic refresh (30 s) by a producer without
    /// retries.
    fn should_retry(&self, p: &Prepared, e: &ClientError, attempt: u32, deadline: Instant) -> bool {
        // A broker in its graceful stop (ServiceNotAvailable) has unregistered from the
        // NameServers or is about to: a fresh route leads the retry elsewhere, or to
        // `NoRoute` when it was the only broker, which ends the send with an error. One that
        // answers NotLeader is no longer its group's master (a slave, or a master fenced
        // after a failover): the NameServers name the new master under id 0.
        let stale = e.is_connection_failure()
            || matches!(
                e.code(),
                Some(
                    protocol::ResponseCode::ServiceNotAvailable | protocol::ResponseCode::NotLeader
                )
            );
        if stale {
            self.inst.routes.refresh_after_failure(&p.topic);
        }
        if !e.is_retriable() || attempt >= self.retries || Instant::now() >= deadline {
            return false;
        }
        tracing::debug!(topic = %p.topic, error = %e, attempt, "retrying send");
        true
    }

    fn send_prepared(&self, p: &Prepared) -> Result<BatchSendResult> {
        let deadline = Instant::now() + self.send_timeout;
        let mut avoid: Option<String> = None;
        let mut attempt = 0;
        loop {
            let route = self.inst.routes.get_for_send(&p.topic)?;
            let target = self.choose(&route, &p.selector, avoid.as_deref())?;
            let result = remaining(deadline, self.send_timeout, &target.addr)
                .and_then(|timeout| {
                    let conn = self.inst.pool.get(&target.addr)?;
                    conn.request(self.send_command(p, &target), &p.body, timeout)
                })
                .and_then(|frame| self.parse_response(p, &target, frame));
            match result {
                Ok(r) => return Ok(r),
                Err(e) if self.should_retry(p, &e, attempt, deadline) => {
                    avoid = Some(target.queue.broker_name);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn remaining(deadline: Instant, total: Duration, addr: &str) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ClientError::Timeout {
            addr: addr.to_owned(),
            timeout_ms: total.as_millis() as u64,
        });
    }
    Ok(left)
}

/// An asynchronous send in progress; each attempt's callback carries it on to the next.
struct AsyncSend {
    inner: Arc<ProducerInner>,
    prepared: Arc<Prepared>,
    deadline: Instant,
    attempt: u32,
    avoid: Option<String>,
    callback: BatchCallback,
}

impl AsyncSend {
    fn start(inner: &Arc<ProducerInner>, prepared: Prepared, callback: BatchCallback) {
        AsyncSend {
            inner: Arc::clone(inner),
            prepared: Arc::new(prepared),
            deadline: Instant::now() + inner.send_timeout,
            attempt: 0,
            avoid: None,
            callback,
        }
        .attempt();
    }

    fn attempt(self) {
        let inner = Arc::clone(&self.inner);
        let p = Arc::clone(&self.prepared);
        let target = inner
            .inst
            .routes
            .get_for_send(&p.topic)
            .and_then(|route| inner.choose(&route, &p.selector, self.avoid.as_deref()));
        let target = match target {
            Ok(t) => t,
            // No route or no queue: not retriable, nothing was sent.
            Err(e) => return (self.callback)(Err(e)),
        };
        let conn = remaining(self.deadline, inner.send_timeout, &target.addr)
            .and_then(|timeout| Ok((inner.inst.pool.get(&target.addr)?, timeout)));
        let (conn, timeout) = match conn {
            Ok(c) => c,
            Err(e) => return self.failed(e, target.queue.broker_name),
        };
        let command = inner.send_command(&p, &target);
        conn.request_async(
            command,
            &p.body,
            timeout,
            Box::new(move |frame| {
                match frame.and_then(|f| self.inner.parse_response(&self.prepared, &target, f)) {
                    Ok(r) => (self.callback)(Ok(r)),
                    Err(e) => self.failed(e, target.queue.broker_name),
                }
            }),
        );
    }

    fn failed(mut self, e: ClientError, broker: String) {
        if self
            .inner
            .should_retry(&self.prepared, &e, self.attempt, self.deadline)
        {
            self.attempt += 1;
            self.avoid = Some(broker);
            self.attempt();
        } else {
            (self.callback)(Err(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{broker, fake_broker, namesrv, route, FakeServer};
    use message::{MsgOffsetId, RecordView};
    use std::sync::mpsc;
    use std::sync::Mutex;

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn handles_are_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Producer>();
        assert_send_sync::<crate::PullConsumer>();
        assert_send_sync::<crate::PushConsumer>();
        assert_send_sync::<crate::Admin>();
    }

    fn producer(ns: &FakeServer) -> Producer {
        Producer::builder()
            .namesrv(format!("{};", ns.addr))
            .group("test-producer")
            .send_timeout_ms(3000)
            .build()
            .unwrap()
    }

    #[test]
    fn sync_sends_round_robin_and_report_where_they_were_stored() {
        let (b, state) = fake_broker(7);
        let ns = namesrv("T", route(vec![broker("broker-a", &b.addr, &[], 1)], 4));
        let p = producer(&ns);
        let mut results = Vec::new();
        for i in 0..8 {
            let msg = Message::new("T", format!("body-{i}"))
                .with_tags("TagA")
                .with_key(format!("k{i}"));
            results.push(p.send(msg).unwrap());
        }
        // Message i goes to the queue after message i - 1's, from wherever the producer's
        // round robin started.
        let queues: Vec<u32> = results.iter().map(|r| r.queue_id).collect();
        let first = queues[0];
        let expected: Vec<u32> = (0..8).map(|i| (first + i) % 4).collect();
        assert_eq!(queues, expected);
        let stored = state.queues.lock().unwrap();
        for (i, r) in results.iter().enumerate() {
            let rec = &stored[&r.queue_id][r.queue_offset.0 as usize];
            let view = RecordView::parse(rec).unwrap();
            assert_eq!(view.body(), format!("body-{i}").as_bytes());
            assert_eq!(view.uniq_key(), Some(r.msg_id.as_str()));
            assert_eq!(view.keys().collect::<Vec<_>>(), vec![format!("k{i}")]);
            let id = MsgOffsetId::parse(&r.offset_msg_id).unwrap();
            assert_eq!(id.commit_log_offset, view.physical_offset());
            assert_eq!(id.shard, 7);
            assert_eq!(r.queue_offset.0, (i / 4) as u64);
            assert_eq!(r.broker_name, "broker-a");
        }
        // The route was fetched once and then served from the cache.
        assert_eq!(ns.request_count("get_route"), 1);
    }

    #[test]
    fn new_producers_start_their_round_robin_at_random_queues() {
        let (b, _state) = fake_broker(0);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 8));
        let firsts: std::collections::HashSet<u32> = (0..20)
            .map(|i| {
                producer(&ns)
                    .send(Message::new("T", format!("{i}")))
                    .unwrap()
                    .queue_id
            })
            .collect();
        // 20 producers all starting at one queue of 8: a chance of 8^-19.
        assert!(
            firsts.len() > 1,
            "every producer began with queue {firsts:?}"
        );
    }

    #[test]
    fn a_sharding_key_pins_a_queue() {
        let (b, state) = fake_broker(0);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 8));
        let p = producer(&ns);
        let mut seen = std::collections::HashMap::new();
        for i in 0..40 {
            let key = format!("order-{}", i % 5);
            let r = p
                .send(Message::new("T", format!("{i}")).with_sharding_key(key.clone()))
                .unwrap();
            assert_eq!(*seen.entry(key.clone()).or_insert(r.queue_id), r.queue_id);
            let expected = message::tag_hash(&key).unsigned_abs() % 8;
            assert_eq!(r.queue_id as u64, expected);
        }
        assert_eq!(state.total(), 40);
    }

    #[test]
    fn requests_go_to_the_core_owning_the_queue() {
        let (core0, s0) = fake_broker(0);
        let (core1, s1) = fake_broker(1);
        // The master address answers nothing useful: everything must go to the cores.
        let (master, sm) = fake_broker(9);
        sm.busy_sends.store(u64::MAX, Ordering::SeqCst);
        let b = broker("b", &master.addr, &[&core0.addr, &core1.addr], 2);
        let ns = namesrv("T", route(vec![b], 6));
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .retries(0)
            .build()
            .unwrap();
        for i in 0..12 {
            p.send(Message::new("T", format!("{i}"))).unwrap();
        }
        for q in 0..6 {
            let core = protocol::shard_core(protocol::queue_owner_shard("T", q, 2), 2);
            let (here, there) = if core == 0 { (&s0, &s1) } else { (&s1, &s0) };
            assert_eq!(here.count(q), 2, "queue {q}");
            assert_eq!(there.count(q), 0, "queue {q}");
        }
        assert_eq!(master.request_count("send"), 0);
    }

    #[test]
    fn retriable_failures_move_to_another_broker() {
        let (busy, busy_state) = fake_broker(0);
        busy_state.busy_sends.store(u64::MAX, Ordering::SeqCst);
        let (good, good_state) = fake_broker(0);
        let data = route(
            vec![
                broker("a", &busy.addr, &[], 1),
                broker("b", &good.addr, &[], 1),
            ],
            2,
        );
        let ns = namesrv("T", data);
        let p = producer(&ns);
        for i in 0..6 {
            let r = p.send(Message::new("T", format!("{i}"))).unwrap();
            assert_eq!(r.broker_name, "b");
        }
        assert_eq!(good_state.total(), 6);
        assert!(busy.request_count("send") >= 2);
        // Without retries the busy broker's answer reaches the caller.
        let no_retry = Producer::builder()
            .namesrv(&ns.addr)
            .retries(0)
            .build()
            .unwrap();
        let errors: Vec<ClientError> = (0..4)
            .filter_map(|i| no_retry.send(Message::new("T", format!("{i}"))).err())
            .collect();
        assert_eq!(errors.len(), 2);
        assert!(errors
            .iter()
            .all(|e| e.code() == Some(protocol::ResponseCode::SystemBusy)));
        // Asynchronous sends retry too.
        let (tx, rx) = mpsc::channel();
        p.send_async(Message::new("T", "async"), move |r| tx.send(r).unwrap())
            .unwrap();
        p.send_async(Message::new("T", "async"), |_| {}).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().unwrap().broker_name, "b");
    }

    #[test]
    fn a_quota_refusal_reaches_the_caller_with_when_to_retry() {
        let (quota, quota_state) = fake_broker(0);
        quota_state
            .quota_retry_after_ms
            .store(250, Ordering::SeqCst);
        let ns = namesrv("T", route(vec![broker("a", &quota.addr, &[], 1)], 2));
        // Retries allowed: a refusal that says when to retry is still the caller's to wait
        // for, not retried at once.
        let p = producer(&ns);
        let queue = MessageQueue {
            topic: "T".into(),
            broker_name: "a".into(),
            queue_id: 0,
        };
        let e = p.send_to_queue(Message::new("T", "x"), &queue).unwrap_err();
        assert_eq!(e.code(), Some(protocol::ResponseCode::FlowControl), "{e}");
        assert_eq!(e.retry_after(), Some(Duration::from_millis(250)), "{e}");
        assert!(!e.is_retriable(), "{e}");
        assert_eq!(quota.request_count("send"), 1);
        // Other errors say no retry time.
        quota_state.quota_retry_after_ms.store(0, Ordering::SeqCst);
        quota_state.stopping.store(true, Ordering::SeqCst);
        let e = p.send_to_queue(Message::new("T", "y"), &queue).unwrap_err();
        assert_eq!(e.retry_after(), None, "{e}");
    }

    #[test]
    fn a_stopping_broker_is_never_taken_for_success() {
        let (stopping, stopping_state) = fake_broker(0);
        stopping_state.stopping.store(true, Ordering::SeqCst);
        let (good, good_state) = fake_broker(0);
        let data = route(
            vec![
                broker("a", &stopping.addr, &[], 1),
                broker("b", &good.addr, &[], 1),
            ],
            2,
        );
        let ns = namesrv("T", data);
        // With retries the send moves to the other broker.
        let p = producer(&ns);
        for i in 0..4 {
            let r = p.send(Message::new("T", format!("{i}"))).unwrap();
            assert_eq!(r.broker_name, "b");
        }
        assert_eq!(good_state.total(), 4);
        assert_eq!(stopping_state.total(), 0);
        // Without, the caller hears it, sync, batch and async alike.
        let no_retry = Producer::builder()
            .namesrv(&ns.addr)
            .retries(0)
            .build()
            .unwrap();
        let queue = MessageQueue {
            topic: "T".into(),
            broker_name: "a".into(),
            queue_id: 0,
        };
        let is_stopping = |e: &ClientError| {
            e.code() == Some(protocol::ResponseCode::ServiceNotAvailable)
                && e.to_string().contains("broker is shutting down")
        };
        let e = no_retry
            .send_to_queue(Message::new("T", "x"), &queue)
            .unwrap_err();
        assert!(is_stopping(&e), "{e}");
        let e = no_retry
            .send_batch_to_queue(vec![Message::new("T", "y")], &queue)
            .unwrap_err();
        assert!(is_stopping(&e), "{e}");
        let (tx, rx) = mpsc::channel();
        no_retry
            .send_async_to_queue(Message::new("T", "z"), &queue, move |r| tx.send(r).unwrap())
            .unwrap();
        let e = rx.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(is_stopping(&e), "{e}");
        assert_eq!(stopping_state.total(), 0);
    }

    #[test]
    fn many_async_sends_in_flight_through_a_small_window() {
        let (b, state) = fake_broker(0);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 4));
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .inflight_max_per_connection(16)
            .build()
            .unwrap();
        let n = 2000;
        let (tx, rx) = mpsc::channel();
        for i in 0..n {
            let tx = tx.clone();
            p.send_async(Message::new("T", format!("m{i}")), move |r| {
                tx.send(r.map(|r| r.msg_id)).unwrap();
            })
            .unwrap();
        }
        let mut ids = std::collections::HashSet::new();
        for _ in 0..n {
            ids.insert(rx.recv_timeout(WAIT).unwrap().unwrap());
        }
        assert_eq!(ids.len(), n);
        assert_eq!(state.total(), n);
    }

    #[test]
    fn a_batch_is_one_frame_on_one_queue() {
        let (b, state) = fake_broker(3);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 4));
        let p = producer(&ns);
        let msgs: Vec<Message> = (0..10)
            .map(|i| Message::new("T", format!("b{i}")))
            .collect();
        let batch = p.send_batch(msgs).unwrap();
        assert_eq!(batch.len(), 10);
        let results = batch.results();
        assert_eq!(b.request_count("send"), 1);
        let q = results[0].queue_id;
        assert!(results.iter().all(|r| r.queue_id == q));
        assert_eq!(state.count(q), 10);
        let stored = state.queues.lock().unwrap();
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.queue_offset.0, i as u64);
            let view = RecordView::parse(&stored[&q][i]).unwrap();
            assert_eq!(r.commit_log_offset.0, view.physical_offset());
            assert_eq!(view.body(), format!("b{i}").as_bytes());
        }
        drop(stored);
        let mixed = vec![Message::new("T", "x"), Message::new("U", "y")];
        assert!(matches!(
            p.send_batch(mixed),
            Err(ClientError::InvalidMessage(_))
        ));
        let (tx, rx) = mpsc::channel();
        let msgs: Vec<Message> = (0..3).map(|i| Message::new("T", format!("a{i}"))).collect();
        p.send_batch_async(msgs, move |r| tx.send(r).unwrap())
            .unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().unwrap().len(), 3);
    }

    #[test]
    fn limits_oneway_and_explicit_queues() {
        let (b, state) = fake_broker(0);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], 4));
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .message_bytes_max(1024)
            .build()
            .unwrap();
        let too_big = p.send(Message::new("T", vec![1u8; 1025]));
        assert!(matches!(
            too_big,
            Err(ClientError::TooLarge {
                size: 1025,
                max: 1024
            })
        ));
        assert!(p
            .send_async(Message::new("T", vec![1u8; 2000]), |_| {})
            .is_err());
        assert_eq!(b.request_count("send"), 0);
        assert!(matches!(
            p.send(Message::new("Missing", "x")),
            Err(ClientError::NoRoute { .. })
        ));
        let queue = MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 2,
        };
        for _ in 0..2 {
            let r = p.send_to_queue(Message::new("T", "q"), &queue).unwrap();
            assert_eq!(r.queue_id, 2);
        }
        let (tx, rx) = mpsc::channel();
        p.send_async_to_queue(Message::new("T", "q"), &queue, move |r| tx.send(r).unwrap())
            .unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().unwrap().queue_id, 2);
        let batch = vec![Message::new("T", "x"), Message::new("T", "y")];
        let results = p.send_batch_to_queue(batch, &queue).unwrap();
        assert_eq!(results.queue_id, 2);
        assert!(results.results().iter().all(|r| r.queue_id == 2));
        assert_eq!(state.count(2), 5);
        p.send_oneway(Message::new("T", "fire")).unwrap();
        let deadline = Instant::now() + WAIT;
        while state.total() < 6 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(state.total(), 6);
        assert!(Producer::builder()
            .retries(SEND_RETRIES_MAX + 1)
            .build()
            .is_err());
        p.shutdown();
        assert!(matches!(
            p.send(Message::new("T", "late")),
            Err(ClientError::Shutdown)
        ));
    }

    #[test]
    fn async_callbacks_see_connection_failures() {
        // A broker that never answers: the send times out, on both broker queues, and the
        // callback hears about it once.
        let silent = FakeServer::start(|_| crate::testing::Reply::Ignore);
        let ns = namesrv("T", route(vec![broker("b", &silent.addr, &[], 1)], 2));
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .send_timeout_ms(300)
            .build()
            .unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c2 = Arc::clone(&calls);
        let (tx, rx) = mpsc::channel();
        p.send_async(Message::new("T", "x"), move |r| {
            c2.lock().unwrap().push(r.is_err());
            tx.send(()).unwrap();
        })
        .unwrap();
        rx.recv_timeout(WAIT).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(*calls.lock().unwrap(), vec![true]);
    }

    #[test]
    fn a_broker_that_is_no_longer_master_refreshes_the_route_at_once() {
        use crate::route::FAILURE_REFRESH_INTERVAL;
        use crate::testing::{error, ok};
        use protocol::ResponseCode;

        // The group's old master, demoted after a failover: it refuses every send.
        let demoted = FakeServer::start(|f| error(f, ResponseCode::NotLeader));
        let current = Arc::new(Mutex::new(route(
            vec![broker("b", &demoted.addr, &[], 1)],
            2,
        )));
        let served = Arc::clone(&current);
        let ns = FakeServer::start(move |f| match &f.header.command {
            Command::GetRoute { topic } if topic == "T" => {
                ok(f, Command::Route(served.lock().unwrap().clone()))
            }
            _ => error(f, ResponseCode::TopicNotExist),
        });
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .retries(0)
            .build()
            .unwrap();
        let e = p.send(Message::new("T", "x")).unwrap_err();
        assert_eq!(e.code(), Some(ResponseCode::NotLeader), "{e}");
        assert!(
            e.is_retriable(),
            "a send a non-master refused was never stored"
        );

        // The NameServers now name the new master; past the refresh interval, the next
        // refusal looks the route up again, and the send after it reaches the new master
        // rather than waiting for the 30 s periodic refresh.
        let (master, state) = fake_broker(0);
        *current.lock().unwrap() = route(vec![broker("b", &master.addr, &[], 1)], 2);
        std::thread::sleep(FAILURE_REFRESH_INTERVAL + Duration::from_millis(50));
        let lookups = ns.request_count("get_route");
        assert!(p.send(Message::new("T", "y")).is_err());
        assert_eq!(ns.request_count("get_route"), lookups + 1);
        let r = p.send(Message::new("T", "z")).unwrap();
        assert_eq!(r.broker_name, "b");
        assert_eq!(state.total(), 1);
        assert_eq!(demoted.request_count("send"), 2);
    }

    #[test]
    fn a_dead_broker_refreshes_the_route_at_once_but_at_most_once_per_interval() {
        use crate::route::FAILURE_REFRESH_INTERVAL;
        use crate::testing::{error, ok};
        use crate::{PullConsumer, PullOptions, QueueOffset};
        use protocol::ResponseCode;

        // An address nothing listens on any more: connections are refused at once.
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let current = Arc::new(Mutex::new(route(vec![broker("b", &dead, &[], 1)], 2)));
        let served = Arc::clone(&current);
        let ns = FakeServer::start(move |f| match &f.header.command {
            Command::GetRoute { topic } if topic == "T" => {
                ok(f, Command::Route(served.lock().unwrap().clone()))
            }
            Command::GetRoute { .. } => error(f, ResponseCode::TopicNotExist),
            _ => error(f, ResponseCode::RequestCodeNotSupported),
        });
        let p = Producer::builder()
            .namesrv(&ns.addr)
            .retries(0)
            .build()
            .unwrap();
        let consumer = PullConsumer::new(&ns.addr, "g").unwrap();
        let queue = MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 0,
        };

        // Sends and pulls to the dead broker as fast as they fail, for a while.
        let started = Instant::now();
        let mut failures = 0u32;
        while started.elapsed() < Duration::from_millis(1000) {
            assert!(p.send(Message::new("T", "x")).is_err());
            let pulled = consumer.pull(&queue, QueueOffset(0), &PullOptions::default());
            assert!(pulled.is_err());
            failures += 2;
            assert!(failures < 1_000_000);
        }
        let spent = started.elapsed();
        // Each client looked the route up once at first, then at most once per interval.
        let per_client = 2 + (spent.as_millis() / FAILURE_REFRESH_INTERVAL.as_millis()) as usize;
        let lookups = ns.request_count("get_route");
        assert!(
            lookups >= 4,
            "the failures never refreshed the route ({lookups} look-ups)"
        );
        assert!(
            lookups <= 2 * per_client,
            "{lookups} route look-ups for {failures} failures in {spent:?}"
        );

        // The broker is back at another address: the next attempts find it within moments,
        // not at the 30 s periodic refresh.
        let (live, state) = fake_broker(0);
        *current.lock().unwrap() = route(vec![broker("b", &live.addr, &[], 1)], 2);
        let back = Instant::now();
        let sent = loop {
            if let Ok(r) = p.send(Message::new("T", "back")) {
                break r;
            }
            assert!(
                back.elapsed() < WAIT,
                "the producer never found the broker again"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(state.total(), 1);
        let sent_to = MessageQueue {
            queue_id: sent.queue_id,
            ..queue
        };
        let pulled = loop {
            if let Ok(r) = consumer.pull(&sent_to, sent.queue_offset, &PullOptions::default()) {
                break r;
            }
            assert!(
                back.elapsed() < WAIT,
                "the consumer never found the broker again"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(pulled.messages.len(), 1);
    }
}
