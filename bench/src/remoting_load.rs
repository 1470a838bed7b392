//! `bench remoting`: a load driver over Apache RocketMQ's remoting protocol, for any broker
//! that speaks it (corvus's RocketMQ front door, or Apache RocketMQ itself).
//!
//! It asks the NameServer for the topic's route (GET_ROUTEINFO_BY_TOPIC), opens
//! `--producers` connections to the route's master brokers and on each sends SEND_MESSAGE_V2
//! (`--batch 1`) or SEND_BATCH_MESSAGE (`--batch M`, RocketMQ's MessageBatch body) with up to
//! `--inflight` requests outstanding, matched to their answers by opaque, round robin over the
//! broker's writable queues. Each connection has a writer (the sending thread) and a reader
//! thread; the reader records each request's round trip (µs) into its own HdrHistogram.
//! Unless `--no-consume`, one thread per readable queue pulls it (PULL_MESSAGE, long polling)
//! from offset 0 and counts what arrives.
//!
//! As the Java driver of `rocketmq-compare/` does, only requests started inside the measured
//! window count, and the broker's utime+stime (`/proc/PID/stat`) is read at the window's
//! ends. The result is one line `RESULT {json}` with the Java driver's keys, so the two
//! drivers' runs land in one table.

use std::collections::{BTreeMap, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use remoting::body::{self, perm, TopicRouteData};
use remoting::codes::{request, response};
use remoting::headers::{
    GetRouteInfoRequestHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    SendMessageRequestHeader,
};
use remoting::message::{self, property, pull_sys_flag, BatchMessage};
use remoting::{Decoded, Frame, RemotingCommand, RemotingDecoder, SerializeType};

use crate::cli::RemotingArgs;

/// The topic a new topic inherits its config from (RocketMQ's `TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`).
const DEFAULT_TOPIC: &str = "TBW102";
/// What the Java producer sends as `defaultTopicQueueNums`.
const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;
/// The Java client's `MQVersion.CURRENT_VERSION` for 5.3.3 (`V5_3_3`'s ordinal is above
/// V4_9_4's 401, so the NameServer answers routes in standard JSON).
const CLIENT_VERSION: i32 = 483;
/// Ticks per second of `/proc/PID/stat`'s utime and stime (USER_HZ, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;
/// Longest round trip the histograms hold, µs; longer ones are clamped.
const RT_US_MAX: u64 = 60_000_000;
/// How long a pull may be held by the broker when its queue has nothing new.
const PULL_SUSPEND_MS: i64 = 1000;
/// Read timeout of a connection: longer than any hold, so a silent broker is an error.
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to wait for the topic's route to appear.
const ROUTE_WAIT: Duration = Duration::from_secs(30);
/// How long the end waits for the answers still outstanding.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// What one broker of the route offers: its master's address and its writable queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteBroker {
    pub name: String,
    pub addr: String,
    pub write_queues: i32,
    pub read_queues: i32,
}

/// The masters of a route that have queues of the topic, in the route's order.
pub fn route_brokers(route: &TopicRouteData) -> Vec<RouteBroker> {
    let mut out = Vec::new();
    for q in &route.queue_datas {
        let Some(b) = route
            .broker_datas
            .iter()
            .find(|b| b.broker_name == q.broker_name)
        else {
            continue;
        };
        let Some(addr) = b.broker_addrs.get(&0) else {
            continue;
        };
        out.push(RouteBroker {
            name: q.broker_name.clone(),
            addr: addr.clone(),
            write_queues: if q.perm & perm::WRITE != 0 {
                q.write_queue_nums
            } else {
                0
            },
            read_queues: if q.perm & perm::READ != 0 {
                q.read_queue_nums
            } else {
                0
            },
        });
    }
    out
}

/// Wall clock, ms since the epoch (RocketMQ's bornTimestamp).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A message id in the shape of Java's `MessageClientIDSetter` (32 hex digits): a per
/// connection prefix and a counter, unique within the run.
fn uniq_key(prefix: u64, counter: u64) -> String {
    format!("{prefix:016X}{counter:016X}")
}

/// What a send carries: the fields Apache RocketMQ's broker reads, as its Java producer
/// fills them (`DefaultMQProducerImpl.sendKernelImpl`).
pub struct SendSpec<'a> {
    pub topic: &'a str,
    pub group: &'a str,
    pub broker_name: &'a str,
    pub queue_id: i32,
    /// Messages in the request: 1 sends SEND_MESSAGE_V2, more SEND_BATCH_MESSAGE.
    pub batch: u32,
    pub serialize_type: SerializeType,
}

/// Builds one send request and its body: SEND_MESSAGE_V2 with the message's properties in
/// the header, or SEND_BATCH_MESSAGE with a MessageBatch body whose messages each carry
/// their own properties (`MessageDecoder.encodeMessages`).
pub fn send_request(
    spec: &SendSpec<'_>,
    opaque: i32,
    payload: &Bytes,
    mut next_key: impl FnMut() -> String,
) -> Result<(RemotingCommand, Vec<u8>)> {
    let one_props = |key: &str| {
        message::encode_properties([
            (property::TAGS, "TagA"),
            (property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, key),
            (property::WAIT_STORE_MSG_OK, "true"),
        ])
    };
    let batch = spec.batch > 1;
    let (code, properties, body) = if batch {
        let messages: Vec<BatchMessage> = (0..spec.batch)
            .map(|_| BatchMessage {
                flag: 0,
                body: payload.clone(),
                properties: one_props(&next_key()),
            })
            .collect();
        let body = message::encode_batch(&messages).context("encoding a batch body")?;
        // MessageBatch.generateFromList: the batch itself carries only WAIT.
        let props = message::encode_properties([(property::WAIT_STORE_MSG_OK, "true")]);
        (request::SEND_BATCH_MESSAGE, props, body)
    } else {
        (
            request::SEND_MESSAGE_V2,
            one_props(&next_key()),
            payload.to_vec(),
        )
    };
    let header = SendMessageRequestHeader {
        producer_group: spec.group.to_owned(),
        topic: spec.topic.to_owned(),
        default_topic: DEFAULT_TOPIC.to_owned(),
        default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_NUMS,
        queue_id: spec.queue_id,
        sys_flag: 0,
        born_timestamp: wall_ms(),
        flag: 0,
        properties: Some(properties),
        reconsume_times: Some(0),
        unit_mode: false,
        max_reconsume_times: None,
        batch,
        broker_name: Some(spec.broker_name.to_owned()),
    };
    let mut cmd = RemotingCommand::request(code, opaque).with_ext_fields(header.to_ext_fields_v2());
    cmd.version = CLIENT_VERSION;
    cmd.serialize_type = spec.serialize_type;
    Ok((cmd, body))
}

/// One blocking connection for request-response exchanges (the route lookup, the pulls).
pub(crate) struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    decoder: RemotingDecoder,
    opaque: i32,
}

impl Conn {
    pub(crate) fn dial(addr: &str) -> Result<Conn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            decoder: RemotingDecoder::default(),
            opaque: 0,
        })
    }

    /// Sends `cmd` (its opaque replaced by the next one) and waits for the answer to it.
    pub(crate) fn call(&mut self, mut cmd: RemotingCommand, body: &[u8]) -> Result<Frame> {
        self.opaque = self.opaque.wrapping_add(1);
        cmd.opaque = self.opaque;
        let wire = remoting::encode(&cmd, body)?;
        self.stream.write_all(&wire)?;
        loop {
            let frame = read_frame(&mut self.stream, &mut self.buf, &mut self.decoder)?;
            if frame.command.is_response() && frame.command.opaque == self.opaque {
                return Ok(frame);
            }
        }
    }
}

/// Reads until one whole frame is buffered and returns it.
fn read_frame(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    decoder: &mut RemotingDecoder,
) -> Result<Frame> {
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match decoder.decode(buf)? {
            Some(Decoded::Frame(f)) => return Ok(f),
            Some(Decoded::Oversized { frame_len, .. }) => {
                bail!("the broker sent a frame of {frame_len} bytes, over the limit")
            }
            None => {}
        }
        let n = match stream.read(&mut chunk) {
            Ok(0) => bail!("the peer closed the connection"),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The topic's route from the first NameServer of `namesrv` that answers.
pub(crate) fn fetch_route(namesrv: &str, topic: &str) -> Result<TopicRouteData> {
    let mut last = anyhow!("no NameServer address in {namesrv:?}");
    for addr in namesrv.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
            accept_standard_json_only: None,
        };
        let mut cmd =
            RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 0).with_header(&header);
        cmd.version = CLIENT_VERSION;
        let answer = Conn::dial(addr).and_then(|mut c| c.call(cmd, b""));
        match answer {
            Ok(f) if f.command.code == response::SUCCESS => {
                return body::from_json(&f.body).context("decoding the route");
            }
            Ok(f) => {
                last = anyhow!(
                    "{addr}: route of {topic}: code {} {}",
                    f.command.code,
                    f.command.remark.unwrap_or_default()
                )
            }
            Err(e) => last = e.context(format!("asking {addr} for the route of {topic}")),
        }
    }
    Err(last)
}

/// Reads utime+stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_seconds(&stat)
}

/// utime+stime from a `/proc/PID/stat` line (fields 14 and 15, counted past the command
/// name in parentheses, which may hold spaces).
pub fn parse_stat_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split(' ').skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The measured window, as ns since the run's start; requests started inside it count.
struct Window {
    base: Instant,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    stop: AtomicBool,
}

impl Window {
    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_nanos() as u64
    }

    fn contains(&self, at: Instant) -> bool {
        let t = self.ns(at);
        t >= self.start_ns.load(Ordering::Acquire) && t < self.end_ns.load(Ordering::Acquire)
    }
}

/// What a connection's reader counted.
struct SendTally {
    rt_us: Histogram<u64>,
    /// Messages acknowledged inside the window.
    ok: u64,
    /// Failed requests inside the window, by response code (-1: no answer or a broken
    /// connection).
    failed: BTreeMap<i32, u64>,
}

impl SendTally {
    fn new() -> Result<SendTally> {
        Ok(SendTally {
            rt_us: Histogram::new_with_bounds(1, RT_US_MAX, 3)?,
            ok: 0,
            failed: BTreeMap::new(),
        })
    }
}

/// Requests written and not yet answered on one connection, and the wake-up for a writer
/// waiting on a full window.
struct Pending {
    sent: Mutex<HashMap<i32, (Instant, u32)>>,
    room: Condvar,
}

/// Messages acknowledged and delivered so far, for the per-second lines.
#[derive(Default)]
struct Totals {
    sent: AtomicU64,
    consumed: AtomicU64,
}

struct Shared {
    window: Window,
    totals: Totals,
}

/// One producer connection: the calling thread writes, a reader thread answers.
fn producer_conn(
    index: usize,
    broker: &RouteBroker,
    args: &RemotingArgs,
    shared: &Arc<Shared>,
) -> Result<SendTally> {
    let stream = TcpStream::connect(&broker.addr)
        .with_context(|| format!("connecting to broker {} at {}", broker.name, broker.addr))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let pending = Arc::new(Pending {
        sent: Mutex::new(HashMap::new()),
        room: Condvar::new(),
    });
    let reader = {
        let mut stream = stream.try_clone()?;
        let pending = pending.clone();
        let shared = shared.clone();
        thread::Builder::new()
            .name(format!("rload-read-{index}"))
            .spawn(move || read_answers(&mut stream, &pending, &shared))?
    };
    let written = write_sends(index, broker, args, shared, &stream, &pending);
    // Wait out the answers still due, then close: the reader ends on the close.
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    {
        let mut sent = pending.sent.lock().unwrap_or_else(PoisonError::into_inner);
        while !sent.is_empty() && Instant::now() < deadline && !reader.is_finished() {
            sent = pending
                .room
                .wait_timeout(sent, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    let mut tally = reader
        .join()
        .map_err(|_| anyhow!("reader thread {index} panicked"))??;
    // Requests of the window that never got an answer are failures too.
    let sent = pending.sent.lock().unwrap_or_else(PoisonError::into_inner);
    let lost = sent
        .values()
        .filter(|(at, _)| shared.window.contains(*at))
        .count() as u64;
    if lost > 0 {
        *tally.failed.entry(-1).or_default() += lost;
    }
    written?;
    Ok(tally)
}

fn write_sends(
    index: usize,
    broker: &RouteBroker,
    args: &RemotingArgs,
    shared: &Shared,
    mut stream: &TcpStream,
    pending: &Pending,
) -> Result<()> {
    let payload: Bytes = (0..args.size).map(|i| (i * 31 + 7) as u8).collect();
    let prefix =
        (0x7F00_0001u64 << 32) | (u64::from(std::process::id() & 0xFFFF) << 16) | index as u64;
    let mut counter = 0u64;
    let queues = broker.write_queues.max(1);
    let mut queue = (index as i32) % queues;
    let mut opaque = 0i32;
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| "bench_producer".to_owned());
    let serialize_type = if args.binary_header {
        SerializeType::RocketMq
    } else {
        SerializeType::Json
    };
    let mut wire = BytesMut::with_capacity(64 * 1024);
    while !shared.window.stop.load(Ordering::Acquire) {
        {
            let mut sent = pending.sent.lock().unwrap_or_else(PoisonError::into_inner);
            while sent.len() >= args.inflight as usize {
                if shared.window.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                sent = pending
                    .room
                    .wait_timeout(sent, Duration::from_millis(100))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        opaque = opaque.wrapping_add(1);
        let spec = SendSpec {
            topic: &args.topic,
            group: &group,
            broker_name: &broker.name,
            queue_id: queue,
            batch: args.batch,
            serialize_type,
        };
        let (cmd, body) = send_request(&spec, opaque, &payload, || {
            counter += 1;
            uniq_key(prefix, counter)
        })?;
        queue = (queue + 1) % queues;
        wire.clear();
        remoting::encode_into(&cmd, &body, &mut wire)?;
        let at = Instant::now();
        pending
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(opaque, (at, args.batch));
        stream
            .write_all(&wire)
            .with_context(|| format!("sending to {}", broker.addr))?;
    }
    Ok(())
}

fn read_answers(stream: &mut TcpStream, pending: &Pending, shared: &Shared) -> Result<SendTally> {
    let mut tally = SendTally::new()?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut decoder = RemotingDecoder::default();
    loop {
        let frame = match read_frame(stream, &mut buf, &mut decoder) {
            Ok(f) => f,
            // The writer closes the connection at the end; any earlier break ends the
            // connection's sending (its writer fails on its next write).
            Err(_) => return Ok(tally),
        };
        let now = Instant::now();
        if !frame.command.is_response() {
            continue;
        }
        let entry = {
            let mut sent = pending.sent.lock().unwrap_or_else(PoisonError::into_inner);
            let e = sent.remove(&frame.command.opaque);
            pending.room.notify_all();
            e
        };
        let Some((at, messages)) = entry else {
            continue;
        };
        let ok = frame.command.code == response::SUCCESS;
        if ok {
            shared
                .totals
                .sent
                .fetch_add(u64::from(messages), Ordering::Relaxed);
        }
        if !shared.window.contains(at) {
            continue;
        }
        if ok {
            tally.ok += u64::from(messages);
            let us = (now.saturating_duration_since(at).as_micros() as u64).clamp(1, RT_US_MAX);
            tally.rt_us.saturating_record(us);
        } else {
            *tally.failed.entry(frame.command.code).or_default() += 1;
        }
    }
}

/// What a queue's puller counted inside the window.
struct PullTally {
    consumed: u64,
    /// born → delivered, ms.
    e2e_ms: Histogram<u64>,
    errors: u64,
}

/// Pulls one queue from offset 0 until the end, one pull in flight (as the Java push
/// consumer keeps one per queue), long polling when it is caught up.
fn pull_queue(
    broker: &RouteBroker,
    topic: &str,
    group: &str,
    queue_id: i32,
    pull_batch: u32,
    shared: &Shared,
) -> Result<PullTally> {
    let mut tally = PullTally {
        consumed: 0,
        e2e_ms: Histogram::new_with_bounds(1, 3_600_000, 3)?,
        errors: 0,
    };
    let mut conn = Conn::dial(&broker.addr)?;
    let mut offset = 0i64;
    while !shared.window.stop.load(Ordering::Acquire) {
        let header = PullMessageRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offset,
            max_msg_nums: pull_batch as i32,
            sys_flag: pull_sys_flag::SUSPEND | pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: PULL_SUSPEND_MS,
            subscription: Some("*".to_owned()),
            sub_version: 0,
            expression_type: Some("TAG".to_owned()),
            max_msg_bytes: None,
            broker_name: Some(broker.name.clone()),
        };
        let mut cmd = RemotingCommand::request(request::PULL_MESSAGE, 0).with_header(&header);
        cmd.version = CLIENT_VERSION;
        let frame = match conn.call(cmd, b"") {
            Ok(f) => f,
            Err(e) => {
                if shared.window.stop.load(Ordering::Acquire) {
                    break;
                }
                return Err(e.context(format!("pulling queue {queue_id}")));
            }
        };
        let now_ms = wall_ms();
        let counting = shared.window.contains(Instant::now());
        let answer: Option<PullMessageResponseHeader> = frame.command.ext_header().ok();
        match frame.command.code {
            response::SUCCESS => {
                let messages = message::decode_stored(&frame.body)
                    .with_context(|| format!("decoding a pull of queue {queue_id}"))?;
                shared
                    .totals
                    .consumed
                    .fetch_add(messages.len() as u64, Ordering::Relaxed);
                if counting {
                    tally.consumed += messages.len() as u64;
                    for m in &messages {
                        let lag = (now_ms - m.born_timestamp).max(1) as u64;
                        tally.e2e_ms.saturating_record(lag);
                    }
                }
                match answer {
                    Some(h) => offset = h.next_begin_offset,
                    None => offset += messages.len() as i64,
                }
            }
            response::PULL_NOT_FOUND
            | response::PULL_RETRY_IMMEDIATELY
            | response::PULL_OFFSET_MOVED => {
                if let Some(h) = answer {
                    offset = h.next_begin_offset;
                }
            }
            _ => {
                if counting {
                    tally.errors += 1;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
    Ok(tally)
}

fn percentile(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

/// Runs `bench remoting`; `Ok(false)` when sends failed.
pub fn run(args: &RemotingArgs) -> Result<bool> {
    // A topic just created reaches the NameServer with the broker's next registration.
    let deadline = Instant::now() + ROUTE_WAIT;
    let route = loop {
        match fetch_route(&args.namesrv, &args.topic) {
            Ok(r) if !r.queue_datas.is_empty() => break r,
            Ok(_) if Instant::now() < deadline => {}
            Ok(_) => bail!("the route of {} has no queues", args.topic),
            Err(_) if Instant::now() < deadline => {}
            Err(e) => return Err(e),
        }
        thread::sleep(Duration::from_millis(500));
    };
    let brokers = route_brokers(&route);
    if brokers.iter().all(|b| b.write_queues == 0) {
        bail!("the route of {} has no writable queue", args.topic);
    }
    let writers: Vec<&RouteBroker> = brokers.iter().filter(|b| b.write_queues > 0).collect();
    eprintln!(
        "route of {}: {}",
        args.topic,
        brokers
            .iter()
            .map(|b| format!(
                "{} {} (w {} r {})",
                b.name, b.addr, b.write_queues, b.read_queues
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let shared = Arc::new(Shared {
        window: Window {
            base: Instant::now(),
            start_ns: AtomicU64::new(u64::MAX),
            end_ns: AtomicU64::new(u64::MAX),
            stop: AtomicBool::new(false),
        },
        totals: Totals::default(),
    });

    let group = format!("bench_consumer_{}", wall_ms());
    let mut pullers = Vec::new();
    if !args.no_consume {
        for b in &brokers {
            for q in 0..b.read_queues {
                let (b, shared, topic, group) =
                    (b.clone(), shared.clone(), args.topic.clone(), group.clone());
                let pull_batch = args.pull_batch;
                pullers.push(
                    thread::Builder::new()
                        .name(format!("rload-pull-{q}"))
                        .spawn(move || pull_queue(&b, &topic, &group, q, pull_batch, &shared))?,
                );
            }
        }
    }
    let mut producers = Vec::new();
    for i in 0..args.producers as usize {
        let broker = writers[i % writers.len()].clone();
        let (args, shared) = (args.clone(), shared.clone());
        producers.push(
            thread::Builder::new()
                .name(format!("rload-send-{i}"))
                .spawn(move || producer_conn(i, &broker, &args, &shared))?,
        );
    }

    // The clock: warm-up, then the measured window, one line a second.
    let start = Instant::now();
    let seconds = args.warmup + args.duration;
    let (mut last_sent, mut last_cons) = (0, 0);
    let mut cpu0 = None;
    let mut own0 = None;
    let mut window_start = start;
    for s in 1..=seconds {
        let next = start + Duration::from_secs(s);
        thread::sleep(next.saturating_duration_since(Instant::now()));
        if crate::cluster::stopping() {
            break;
        }
        if s == args.warmup {
            cpu0 = args.broker_pid.and_then(cpu_seconds);
            own0 = cpu_seconds(std::process::id());
            window_start = Instant::now();
            let ns = shared.window.ns(window_start);
            shared.window.start_ns.store(ns, Ordering::Release);
        }
        let (st, ct) = (
            shared.totals.sent.load(Ordering::Relaxed),
            shared.totals.consumed.load(Ordering::Relaxed),
        );
        let phase = if s > args.warmup {
            "measured"
        } else {
            "warm-up"
        };
        println!(
            "t={s}s [{phase}] send {}/s consume {}/s",
            st - last_sent,
            ct - last_cons
        );
        (last_sent, last_cons) = (st, ct);
    }
    let window_end = Instant::now();
    shared
        .window
        .end_ns
        .store(shared.window.ns(window_end), Ordering::Release);
    let cpu1 = args.broker_pid.and_then(cpu_seconds);
    let own1 = cpu_seconds(std::process::id());
    shared.window.stop.store(true, Ordering::Release);
    let window_s = window_end.duration_since(window_start).as_secs_f64();
    if args.warmup == 0 || window_s <= 0.0 {
        bail!("no measured window (warm-up must be at least 1 s and the run not interrupted)");
    }

    let mut rt = Histogram::<u64>::new_with_bounds(1, RT_US_MAX, 3)?;
    let mut ok = 0u64;
    let mut failed: BTreeMap<i32, u64> = BTreeMap::new();
    let mut errors = Vec::new();
    for p in producers {
        match p.join() {
            Ok(Ok(t)) => {
                rt.add(&t.rt_us)?;
                ok += t.ok;
                for (code, n) in t.failed {
                    *failed.entry(code).or_default() += n;
                }
            }
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("a producer thread panicked".to_owned()),
        }
    }
    let mut e2e = Histogram::<u64>::new_with_bounds(1, 3_600_000, 3)?;
    let (mut consumed, mut pull_errors) = (0u64, 0u64);
    for p in pullers {
        match p.join() {
            Ok(Ok(t)) => {
                e2e.add(&t.e2e_ms)?;
                consumed += t.consumed;
                pull_errors += t.errors;
            }
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("a pull thread panicked".to_owned()),
        }
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    let failed_total: u64 = failed.values().sum();
    let cpu_s = match (cpu0, cpu1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let driver_cpu_s = match (own0, own1) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    let failed_by_code: BTreeMap<String, u64> = failed
        .iter()
        .map(|(c, n)| {
            let name = response::name(*c).map_or_else(|| c.to_string(), str::to_owned);
            (name, *n)
        })
        .collect();
    let result = serde_json::json!({
        "driver": "rust",
        "threads": args.producers,
        "inflight": args.inflight,
        "batch": args.batch,
        "pull_batch": args.pull_batch,
        "size": args.size,
        "header": if args.binary_header { "ROCKETMQ" } else { "JSON" },
        "window_s": window_s,
        "sent": ok,
        "failed": failed_total,
        "failed_by_code": failed_by_code,
        "send_tps": ok as f64 / window_s,
        "rt_p50_us": percentile(&rt, 0.50),
        "rt_p99_us": percentile(&rt, 0.99),
        "rt_p999_us": percentile(&rt, 0.999),
        "rt_max_us": rt.max(),
        "consumed": consumed,
        "consume_tps": consumed as f64 / window_s,
        "pull_errors": pull_errors,
        "e2e_p50_ms": percentile(&e2e, 0.50),
        "e2e_p99_ms": percentile(&e2e, 0.99),
        "broker_cpu_s": cpu_s.unwrap_or(0.0),
        "broker_cpu_util": cpu_s.map_or(0.0, |c| c / window_s),
        "broker_cpu_s_per_M_sent": match cpu_s {
            Some(c) if ok > 0 => c / (ok as f64 / 1e6),
            _ => 0.0,
        },
        "driver_cpu_util": driver_cpu_s / window_s,
        "backlog_at_end": shared.totals.sent.load(Ordering::Relaxed)
            .saturating_sub(shared.totals.consumed.load(Ordering::Relaxed)),
        "errors": errors,
    });
    println!("RESULT {result}");
    Ok(failed_total == 0 && errors.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use remoting::body::{BrokerData, QueueData};

    fn decode(cmd: &RemotingCommand, body: &[u8]) -> Frame {
        let mut buf = BytesMut::new();
        remoting::encode_into(cmd, body, &mut buf).unwrap();
        let mut decoder = RemotingDecoder::default();
        match decoder.decode(&mut buf).unwrap() {
            Some(Decoded::Frame(f)) => {
                assert!(buf.is_empty(), "one frame, nothing left over");
                f
            }
            other => panic!("not one frame: {other:?}"),
        }
    }

    fn spec(batch: u32, serialize_type: SerializeType) -> SendSpec<'static> {
        SendSpec {
            topic: "BenchTopic",
            group: "bench_producer",
            broker_name: "broker-a",
            queue_id: 5,
            batch,
            serialize_type,
        }
    }

    #[test]
    fn a_single_send_decodes_as_send_message_v2_with_what_rocketmq_requires() {
        let payload = Bytes::from_static(b"0123456789");
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let mut n = 0;
            let (cmd, body) = send_request(&spec(1, st), 42, &payload, || {
                n += 1;
                uniq_key(0xAB, n)
            })
            .unwrap();
            let f = decode(&cmd, &body);
            assert_eq!(f.command.code, request::SEND_MESSAGE_V2);
            assert_eq!(f.command.opaque, 42);
            assert_eq!(f.command.serialize_type, st);
            assert!(!f.command.is_response());
            // The V2 short names, as the Java client writes them.
            for k in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"] {
                assert!(f.command.ext_fields.contains_key(k), "field {k} missing");
            }
            let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
            assert_eq!(h.topic, "BenchTopic");
            assert_eq!(h.producer_group, "bench_producer");
            assert_eq!(h.default_topic, "TBW102");
            assert_eq!(h.default_topic_queue_nums, 4);
            assert_eq!((h.queue_id, h.sys_flag, h.flag), (5, 0, 0));
            assert!(!h.batch && !h.unit_mode);
            assert!(h.born_timestamp > 1_600_000_000_000);
            let props = message::decode_properties(h.properties.as_deref().unwrap());
            let key = message::property(&props, property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).unwrap();
            assert_eq!(key, format!("{:016X}{:016X}", 0xAB, 1));
            assert_eq!(key.len(), 32);
            assert_eq!(
                message::property(&props, property::WAIT_STORE_MSG_OK),
                Some("true")
            );
            assert_eq!(&f.body[..], b"0123456789");
        }
    }

    #[test]
    fn a_batch_decodes_as_send_batch_message_with_one_record_per_message() {
        let payload = Bytes::from(vec![7u8; 100]);
        let mut n = 0;
        let (cmd, body) = send_request(&spec(3, SerializeType::Json), 9, &payload, || {
            n += 1;
            uniq_key(1, n)
        })
        .unwrap();
        let f = decode(&cmd, &body);
        assert_eq!(f.command.code, request::SEND_BATCH_MESSAGE);
        let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
        assert!(h.batch);
        let messages = message::decode_batch(&f.body).unwrap();
        assert_eq!(messages.len(), 3);
        let mut keys = Vec::new();
        for m in &messages {
            assert_eq!(m.body, payload);
            let props = message::decode_properties(&m.properties);
            keys.push(
                message::property(&props, property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                    .unwrap()
                    .to_owned(),
            );
        }
        keys.dedup();
        assert_eq!(keys.len(), 3, "every message of a batch has its own key");
    }

    #[test]
    fn the_route_gives_masters_and_their_queue_counts() {
        let mut addrs = BTreeMap::new();
        addrs.insert(1, "127.0.0.1:2".to_owned());
        addrs.insert(0, "127.0.0.1:1".to_owned());
        let route = TopicRouteData {
            broker_datas: vec![
                BrokerData {
                    broker_addrs: addrs,
                    broker_name: "a".into(),
                    ..BrokerData::default()
                },
                BrokerData {
                    broker_name: "slave-only".into(),
                    ..BrokerData::default()
                },
            ],
            queue_datas: vec![
                QueueData {
                    broker_name: "a".into(),
                    perm: perm::READ | perm::WRITE,
                    read_queue_nums: 8,
                    write_queue_nums: 6,
                    ..QueueData::default()
                },
                QueueData {
                    broker_name: "slave-only".into(),
                    perm: perm::READ | perm::WRITE,
                    read_queue_nums: 4,
                    write_queue_nums: 4,
                    ..QueueData::default()
                },
            ],
            ..TopicRouteData::default()
        };
        let wire = body::to_json(&route, body::JsonForm::Fastjson).unwrap();
        let back: TopicRouteData = body::from_json(&wire).unwrap();
        assert_eq!(
            route_brokers(&back),
            vec![RouteBroker {
                name: "a".into(),
                addr: "127.0.0.1:1".into(),
                write_queues: 6,
                read_queues: 8,
            }]
        );
    }

    #[test]
    fn cpu_seconds_come_from_utime_and_stime() {
        let stat = "1234 (java (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 40 0";
        assert_eq!(parse_stat_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_stat_cpu_seconds("garbage"), None);
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
