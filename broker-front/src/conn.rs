//! The front end of a client connection: one task reads frames and starts a task per request
//! (pipelining; at most `connection_inflight_max` at once); one task writes the responses as
//! they complete, batching small ones into one write. A connection speaks the native
//! protocol or RocketMQ's remoting protocol, told from its first bytes
//! (`remoting::detect`); the remoting requests are served in `crate::rocketmq`. Native wire
//! codes appear here and nowhere else.

use std::cell::Cell;
use std::io::ErrorKind;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::TcpStream;
use protocol::{
    encode_frame_prefix, BrokerStatus, Command, Decoded, FrameDecoder, Header, PullResult,
    ResponseCode, SendResult,
};
use remoting::detect::Detected;
use remoting::{Decoded as RemotingDecoded, RemotingCommand, RemotingDecoder};

use crate::client_conn::ClientConn;
use crate::connections::ClosedFor;
use crate::core::PullBody;
use crate::error::BrokerError;
use crate::front::Front;
use crate::groups::{MemberView, StoredOffset};
use crate::lanes::{Lane, Sink, Source};
use crate::mesh::{GroupOp, OffsetOp, PullOutcome, PullStatus};
use crate::stages::{SendTrace, Stage};

/// A response on its way to the socket.
pub struct Outgoing {
    header: OutHeader,
    body: Body,
    /// A send's timestamps, for the per-stage histograms the writer completes.
    trace: Option<SendTrace>,
}

/// The header of a frame to write, in the connection's protocol.
pub(crate) enum OutHeader {
    Native(Header),
    Remoting(RemotingCommand),
}

pub(crate) enum Body {
    None,
    Owned(Vec<Bytes>),
    Local(Vec<shard::StoredSlice>),
    /// Stored records served to a RocketMQ client, written with two fields replaced (see
    /// `crate::rocketmq::Restamp`).
    Restamped(Vec<shard::StoredSlice>, crate::rocketmq::Restamp),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::None => 0,
            Body::Owned(v) => v.iter().map(|b| b.len()).sum(),
            Body::Local(v) | Body::Restamped(v, _) => v.iter().map(|s| s.len()).sum(),
        }
    }
}

impl Outgoing {
    /// A remoting frame: a response, or a request of the broker's to the client.
    pub(crate) fn remoting(cmd: RemotingCommand, body: Body) -> Outgoing {
        Outgoing {
            header: OutHeader::Remoting(cmd),
            body,
            trace: None,
        }
    }
}

/// The answer to a request the broker refused: the error's code and text, and for a quota
/// or admission refusal when to retry (`Command::Refused`).
fn error_response(request_id: u64, e: &BrokerError) -> Outgoing {
    answer(
        Header::refusal(request_id, e.code(), e.to_string(), e.retry_after_ms()),
        Body::None,
    )
}

fn ok(request_id: u64, command: Command) -> Outgoing {
    answer(
        Header::response(request_id, ResponseCode::Success, command),
        Body::None,
    )
}

/// A request of the broker's own to the client (see `client_conn`).
pub(crate) fn request_to_client(header: Header, body: Bytes) -> Outgoing {
    if body.is_empty() {
        answer(header, Body::None)
    } else {
        answer(header, Body::Owned(vec![body]))
    }
}

fn answer(header: Header, body: Body) -> Outgoing {
    Outgoing {
        header: OutHeader::Native(header),
        body,
        trace: None,
    }
}

/// The response writer's buffer. Small responses gather in it and leave together; a run of
/// stored records at least this long is written straight from where it lies.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// A read buffer that grew past this for a large frame is let go once it is empty, so an
/// idle connection does not keep the memory of the largest frame it ever carried.
const READ_BUFFER_KEEP_BYTES: usize = 1 << 20;

/// What a connection reads into: this much at first and after a quiet tick, doubling (up
/// to the maximum) after each read that filled it. An idle connection holds the minimum.
const READ_CHUNK_MIN_BYTES: usize = 16 << 10;
const READ_CHUNK_MAX_BYTES: usize = 128 << 10;

/// A frame longer than this is read into an anonymous mapping of its own, unmapped when
/// the request is done with it: its memory goes back to the kernel at once, instead of
/// staying in the allocator's heap after the connection closes (60 connections each
/// holding half of a 16 MiB frame kept about 500 MiB there for good). Smaller frames,
/// every batch a default client sends among them, stay on the heap, where reuse is cheap.
const LARGE_FRAME_BYTES: usize = 4 << 20;

/// The buffer a connection reads into: an anonymous mapping of its own, so that its pages go
/// back to the kernel when the connection closes. From the allocator's heap they did not:
/// freed among longer-lived allocations, 9,000 idle connections' buffers stayed resident
/// after the connections closed, and each later wave of connections added more. A mapping
/// the kernel cannot give is answered with a heap buffer.
enum ReadChunk {
    Mapped(memmap2::MmapMut),
    Heap(Vec<u8>),
}

impl ReadChunk {
    fn new(len: usize) -> ReadChunk {
        match memmap2::MmapMut::map_anon(len) {
            Ok(m) => ReadChunk::Mapped(m),
            Err(_) => ReadChunk::Heap(vec![0u8; len]),
        }
    }
}

impl std::ops::Deref for ReadChunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadChunk::Mapped(m) => m,
            ReadChunk::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for ReadChunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            ReadChunk::Mapped(m) => m,
            ReadChunk::Heap(v) => v,
        }
    }
}

/// A large frame being read into its own mapping.
struct LargeFrame {
    map: memmap2::MmapMut,
    filled: usize,
}

impl LargeFrame {
    /// A mapping for a frame of `total` bytes, holding what `buf` has of it already.
    fn start(total: usize, buf: &[u8]) -> std::io::Result<LargeFrame> {
        let mut map = memmap2::MmapMut::map_anon(total)?;
        map[..buf.len()].copy_from_slice(buf);
        Ok(LargeFrame {
            map,
            filled: buf.len(),
        })
    }

    fn rest(&mut self) -> &mut [u8] {
        &mut self.map[self.filled..]
    }

    /// Counts `n` more bytes read; whether the frame is complete.
    fn filled(&mut self, n: usize) -> bool {
        self.filled += n;
        self.filled == self.map.len()
    }

    fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self.map)
    }
}

/// A whole frame of either protocol.
enum AnyFrame {
    Native(protocol::Frame),
    Remoting(remoting::Frame),
}

impl AnyFrame {
    /// Its body's length: what the request costs to take in and store.
    fn len(&self) -> usize {
        match self {
            AnyFrame::Native(f) => f.body.len(),
            AnyFrame::Remoting(f) => f.body.len(),
        }
    }
}

/// What the connection's decoder found.
enum AnyDecoded {
    Frame(AnyFrame),
    /// A frame over `frame_bytes_max`, skipped; its answer, when it can have one.
    Oversized(Option<Outgoing>),
}

/// The protocol a connection speaks, told from its first bytes.
enum Wire {
    Native(FrameDecoder),
    Remoting(RemotingDecoder),
}

impl Wire {
    fn decode(
        &mut self,
        buf: &mut BytesMut,
        frame_bytes_max: u64,
    ) -> Result<Option<AnyDecoded>, String> {
        let too_large = |frame_len: u64| BrokerError::MessageTooLarge {
            size: frame_len,
            max: frame_bytes_max,
        };
        match self {
            Wire::Native(d) => Ok(match d.decode(buf).map_err(|e| e.to_string())? {
                None => None,
                Some(Decoded::Frame(f)) => Some(AnyDecoded::Frame(AnyFrame::Native(f))),
                Some(Decoded::Oversized { header, frame_len }) => {
                    Some(AnyDecoded::Oversized((!header.is_oneway()).then(|| {
                        error_response(header.request_id, &too_large(frame_len))
                    })))
                }
            }),
            Wire::Remoting(d) => Ok(match d.decode(buf).map_err(|e| e.to_string())? {
                None => None,
                Some(RemotingDecoded::Frame(f)) => Some(AnyDecoded::Frame(AnyFrame::Remoting(f))),
                Some(RemotingDecoded::Oversized { command, frame_len }) => {
                    Some(AnyDecoded::Oversized(
                        command
                            .filter(|c| !c.is_oneway())
                            .map(|c| crate::rocketmq::error_answer(&c, &too_large(frame_len))),
                    ))
                }
            }),
        }
    }

    fn partial_frame_len(&self, buf: &BytesMut) -> Option<usize> {
        match self {
            Wire::Native(d) => d.partial_frame_len(buf),
            Wire::Remoting(d) => d.partial_frame_len(buf),
        }
    }

    fn is_discarding(&self) -> bool {
        match self {
            Wire::Native(d) => d.is_discarding(),
            Wire::Remoting(d) => d.is_discarding(),
        }
    }

    /// Decodes a whole frame read into its own mapping.
    fn decode_complete(&self, bytes: Bytes) -> Result<AnyFrame, String> {
        match self {
            Wire::Native(_) => protocol::decode_complete(bytes)
                .map(AnyFrame::Native)
                .map_err(|e| e.to_string()),
            Wire::Remoting(_) => remoting::decode_frame(bytes)
                .map(AnyFrame::Remoting)
                .map_err(|e| e.to_string()),
        }
    }
}

/// A whole frame from the client: the answer to a request of the broker's, or a request,
/// started once one of the connection's permits is free. `false` once the permits are
/// gone (the connection is closing).
async fn take_frame(r: &Reading, frame: AnyFrame, lane: Lane) -> bool {
    let client = &r.client;
    match &frame {
        AnyFrame::Native(f) if f.header.is_response() => {
            if let AnyFrame::Native(f) = frame {
                client.answered(f);
            }
            return true;
        }
        AnyFrame::Remoting(f) if f.command.is_response() => {
            if let AnyFrame::Remoting(f) = frame {
                client.answered_remoting(f);
            }
            return true;
        }
        _ => {}
    }
    let Ok(permit) = r.permits.clone().acquire_static_permit(1).await else {
        return false;
    };
    match frame {
        AnyFrame::Native(f) => start_request(r, permit, f, lane),
        AnyFrame::Remoting(f) => start_remoting_request(r, permit, f, lane),
    }
    true
}

/// Starts the task that serves one remoting request (holding one of the connection's
/// permits).
fn start_remoting_request(
    r: &Reading,
    permit: glommio::sync::StaticPermit,
    frame: remoting::Frame,
    lane: Lane,
) {
    let core = r.core.clone();
    let client = r.client.clone();
    let tx = r.tx.clone();
    let queued = r.queued.clone();
    let task = core.clone().lanes.spawn(lane, async move {
        core.count_request();
        if let Some(out) = crate::rocketmq::serve(&core, &client, frame).await {
            let _ = send_out(&tx, &queued, out).await;
        }
        drop(permit);
        if lane == Lane::Bulk {
            core.lanes.bulk_served().await;
        }
    });
    if let Some(task) = task {
        task.detach();
    }
}

/// Starts the task that serves one request (holding one of the connection's permits).
fn start_request(
    r: &Reading,
    permit: glommio::sync::StaticPermit,
    frame: protocol::Frame,
    lane: Lane,
) {
    let core = r.core.clone();
    let client = r.client.clone();
    let tx = r.tx.clone();
    let queued = r.queued.clone();
    let read_at = r.read_at;
    let task = core.clone().lanes.spawn(lane, async move {
        let oneway = frame.header.is_oneway();
        let id = frame.header.request_id;
        let is_send = matches!(frame.header.command, Command::Send(_));
        if is_send {
            core.stages.record(Stage::Queued, read_at.elapsed());
        }
        core.count_request();
        // The front door: nothing past it unless the ACL allows it and the quotas have room.
        let admitted = core
            .acl
            .check_native(&client, &frame.header.command)
            .and_then(|()| core.admit_native(&client, &frame.header.command, frame.body.len()));
        let out = match admitted {
            Ok(()) => handle(&core, &client, frame.header.command, frame.body).await,
            Err(e) => Err(e),
        };
        let out = out.unwrap_or_else(|e| error_response(id, &e));
        let header = match out.header {
            OutHeader::Native(h) => h,
            OutHeader::Remoting(_) => {
                debug_assert!(false, "a native request answered in the remoting protocol");
                Header::error(id, ResponseCode::SystemError, "internal error")
            }
        };
        if header.code != 0 {
            core.shared.metrics.count_error(header.response_code());
        }
        let out = Outgoing {
            header: OutHeader::Native(Header {
                request_id: id,
                ..header
            }),
            body: out.body,
            trace: is_send.then(|| SendTrace {
                read_at,
                answered_at: Instant::now(),
            }),
        };
        if !oneway {
            let _ = send_out(&tx, &queued, out).await;
        }
        drop(permit);
        if lane == Lane::Bulk {
            core.lanes.bulk_served().await;
        }
    });
    if let Some(task) = task {
        task.detach();
    }
}

/// Answers the first request of a connection refused at admission with why (none for a
/// oneway request or a response); the connection closes after.
async fn refuse(
    tx: &LocalSender<Outgoing>,
    queued: &std::cell::Cell<usize>,
    frame: &AnyFrame,
    e: &BrokerError,
) {
    let out = match frame {
        AnyFrame::Native(f) if !f.header.is_oneway() && !f.header.is_response() => {
            Some(error_response(f.header.request_id, e))
        }
        AnyFrame::Remoting(f) if !f.command.is_oneway() && !f.command.is_response() => {
            Some(crate::rocketmq::error_answer(&f.command, e))
        }
        _ => None,
    };
    if let Some(out) = out {
        let _ = send_out(tx, queued, out).await;
    }
}

/// Answers a malformed frame (the connection is closed after it) and counts it.
async fn bad_frame(
    core: &Front,
    tx: &LocalSender<Outgoing>,
    queued: &std::cell::Cell<usize>,
    peer: &str,
    reason: &str,
) {
    core.connections
        .count_with(ClosedFor::BadFrame, peer, reason);
    let out = answer(
        Header::error(
            0,
            ResponseCode::BadFrame,
            format!("malformed frame: {reason}"),
        ),
        Body::None,
    );
    let _ = send_out(tx, queued, out).await;
}

/// How long a refused connection is kept for its first request to be answered.
const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// Serves one connection that the core's [`crate::connections::Connections`] admitted, and
/// gives its place back when it closes. With a `refusal` (its peer holds its share of the
/// connections), its first request is answered with it and the connection closed; a gRPC
/// connection is closed at once.
pub async fn serve_connection(core: Rc<Front>, stream: TcpStream, refusal: Option<BrokerError>) {
    struct Leave(Rc<Front>, std::net::IpAddr, bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            if self.2 {
                self.0.connections.refusal_answered();
            } else {
                self.0.connections.left(self.1);
            }
        }
    }
    let peer_addr = stream.peer_addr().ok();
    let _leave = Leave(
        core.clone(),
        peer_addr.map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |a| {
            a.ip()
        }),
        refusal.is_some(),
    );
    let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let idle_timeout = match refusal {
        Some(_) => REFUSAL_WAIT,
        None => Duration::from_millis(core.shared.config.connection_idle_timeout_ms),
    };
    let frame_deadline = Duration::from_millis(core.shared.config.frame_deadline_ms);
    let bounds = broker_base::tls::Bounds {
        first_byte: idle_timeout,
        handshake: frame_deadline,
    };
    // Boxed: the TLS handshake's state (12 KiB) lives only while it runs, not in every
    // connection's future for as long as the connection is open (14.6 KiB a connection
    // unboxed, 2.3 KiB boxed, debug build).
    let accepted = Box::pin(crate::front::accept_counted(&core, stream, &peer, bounds));
    let Some(stream) = accepted.await else {
        return;
    };
    // Reads wake at least this often to check both bounds.
    let tick = (idle_timeout.min(frame_deadline) / 4).max(Duration::from_millis(100));
    let _ = stream.tcp().set_read_timeout(Some(tick));
    let mut stream = stream;
    // The first bytes tell the protocol: gRPC takes the whole socket, the native and remoting
    // protocols are served here.
    let Some((first, detected)) = first_bytes(&core, &mut stream, &peer, idle_timeout).await else {
        return;
    };
    if let Detected::Http2 = detected {
        if refusal.is_some() {
            return;
        }
        // h2 reads without the ticks: a read that timed out would end its connection.
        let _ = stream.tcp().set_read_timeout(None);
        let limits = crate::grpc::MessagingService::limits(&core);
        let service = Rc::new(crate::grpc::MessagingService::new(
            core.clone(),
            peer.clone(),
        ));
        // gRPC's streams are served in the bulk lane: glommio starts a task in the queue of
        // the task that starts it, and h2 starts its own.
        let served = service.clone();
        if let Some(task) = core.lanes.spawn(Lane::Bulk, async move {
            crate::grpc::serve_grpc(stream, first.freeze(), &peer, served, limits).await;
        }) {
            task.await;
        }
        core.connection_closed(service.quota_seat());
        return;
    }
    let (source, sink) = Source::split(stream);
    let inflight_max = core.shared.config.connection_inflight_max as usize;
    // Unbounded, growing as needed: the permits bound the responses queued to about
    // `connection_inflight_max`, and a bounded channel would set aside room for all of them
    // (1,024 slots) on every connection, idle or not.
    let (tx, rx) = local_channel::new_unbounded::<Outgoing>();
    let tx = Rc::new(tx);
    // Responses queued for the writer: it flushes when none is waiting, so a burst of
    // pipelined responses leaves in one write.
    let queued = Rc::new(Cell::new(0usize));
    let client = Rc::new(ClientConn::new(
        core.clients.next_id(core.id),
        peer.clone(),
        tx.clone(),
        queued.clone(),
    ));
    core.clients.opened(client.clone());
    let permits = Rc::new(glommio::sync::Semaphore::new(inflight_max as u64));
    // The lane the reader is in, which the writer follows (`crate::lanes`).
    let lane = Rc::new(Cell::new(core.lanes.first()));

    let writing = Writing {
        core: core.clone(),
        rx,
        sink: Some(sink),
        w: None,
        prefix: BytesMut::new(),
        queued: queued.clone(),
        lane: lane.clone(),
    };
    let writer_core = core.clone();
    let writer_task = glommio::spawn_local(async move {
        let at = writing.lane.get();
        in_lanes(&writer_core.lanes, writing, at, |_| {}).await;
    });

    let frame_bytes_max = core.shared.config.frame_bytes_max;
    let wire = match detected {
        Detected::Remoting => {
            client.mark_remoting();
            Wire::Remoting(RemotingDecoder::new(frame_bytes_max as u32))
        }
        _ => Wire::Native(FrameDecoder::new(frame_bytes_max as u32)),
    };
    let heard_at = core.shared.clock.now();
    let reading = Reading {
        core: core.clone(),
        client: client.clone(),
        tx: tx.clone(),
        queued,
        permits,
        inflight_max,
        refusal,
        peer,
        source,
        wire,
        frame_bytes_max,
        frame_deadline,
        idle_timeout,
        buf: first,
        chunk: ReadChunk::new(READ_CHUNK_MIN_BYTES),
        large: None,
        read_at: Instant::now(),
        heard_at,
        partial_since: None,
        turn: crate::turn::Turn::default(),
        pace: Default::default(),
    };
    in_lanes(&core.lanes, reading, lane.get(), |to| lane.set(to)).await;
    // Before the queue closes: the connection's entry holds a sender of it.
    core.clients.closed(client.id);
    core.connection_closed(&client.quota_seat);
    drop(tx);
    // Let in-flight requests finish and their responses drain before the socket closes.
    let _ = writer_task.await;
    if client.speaks_remoting() {
        crate::rocketmq::connection_closed(&core, &client).await;
    }
}

/// Where a connection's reader or writer is after [`Reading::run`] or [`Writing::run`].
enum Step {
    /// Done: the connection is closing.
    Ended,
    /// To go on in this lane.
    Move(Lane),
}

/// A connection's reader or writer, which runs in a lane until it ends or moves.
trait InLane: Sized + 'static {
    async fn run(&mut self, lane: Lane) -> Step;
}

/// Runs `state` from lane `at` until it ends, starting it again in the lane it moves to;
/// `moved` hears of each move.
async fn in_lanes<S: InLane>(
    lanes: &crate::lanes::Lanes,
    mut state: S,
    mut at: Lane,
    moved: impl Fn(Lane),
) {
    loop {
        let Some(task) = lanes.spawn(at, async move {
            let step = state.run(at).await;
            (state, step)
        }) else {
            return;
        };
        match task.await {
            (_, Step::Ended) => return,
            (s, Step::Move(to)) => {
                state = s;
                at = to;
                moved(to);
            }
        }
    }
}

/// A connection's reader: what it keeps across its turns and its moves between lanes.
struct Reading {
    core: Rc<Front>,
    client: Rc<ClientConn>,
    tx: Rc<LocalSender<Outgoing>>,
    queued: Rc<Cell<usize>>,
    permits: Rc<glommio::sync::Semaphore>,
    inflight_max: usize,
    refusal: Option<BrokerError>,
    peer: String,
    source: Source,
    wire: Wire,
    frame_bytes_max: u64,
    frame_deadline: Duration,
    idle_timeout: Duration,
    // Both start small and grow with what arrives; an idle connection gives them back.
    buf: BytesMut,
    chunk: ReadChunk,
    /// The frame being read into its own mapping (see `LARGE_FRAME_BYTES`).
    large: Option<LargeFrame>,
    /// When the read that completed the frames now in `buf` returned: `read_at` for the
    /// stage timings, `heard_at` by the broker's clock for the idle and frame deadlines.
    read_at: Instant,
    heard_at: Instant,
    /// Since when (by the clock) `buf` has held the start of a frame not yet complete.
    partial_since: Option<Instant>,
    /// Its share of the core's work (`crate::turn`).
    turn: crate::turn::Turn,
    /// What its reads bring, which decides its lane.
    pace: crate::lanes::Pace,
}

impl Reading {
    fn in_flight(&self) -> usize {
        self.inflight_max
            .saturating_sub(self.permits.available() as usize)
    }

    /// Starts a request of `bytes` taken from the wire and takes its turn; `false` once the
    /// connection is closing.
    async fn start(&mut self, frame: AnyFrame, lane: Lane) -> bool {
        let bytes = frame.len();
        let went = take_frame(self, frame, lane).await;
        if went && self.turn.took(bytes) {
            self.core.lanes.turn_over(lane).await;
        }
        went
    }

    /// `to`, when it is not `lane`: the tasks the reader started in `lane` have begun by the
    /// time this returns, so requests start in the order they arrived.
    async fn moving(&self, lane: Lane, to: Lane) -> Option<Lane> {
        if to == lane {
            return None;
        }
        if self.in_flight() > 0 {
            futures_lite::future::yield_now().await;
        }
        Some(to)
    }
}

impl InLane for Reading {
    /// Reads and starts requests in `lane` until the connection ends or belongs in another.
    async fn run(&mut self, lane: Lane) -> Step {
        let clock = self.core.shared.clock.clone();
        loop {
            loop {
                match self.wire.decode(&mut self.buf, self.frame_bytes_max) {
                    Ok(None) => break,
                    Ok(Some(AnyDecoded::Frame(frame))) => {
                        // The deadline runs per frame: a stream of pipelined frames usually
                        // ends each read part-way into the next one.
                        self.partial_since = None;
                        if let Some(e) = &self.refusal {
                            refuse(&self.tx, &self.queued, &frame, e).await;
                            return Step::Ended;
                        }
                        if !self.start(frame, lane).await {
                            return Step::Ended;
                        }
                        let to = self.core.lanes.started(&mut self.pace, lane);
                        if let Some(to) = self.moving(lane, to).await {
                            return Step::Move(to);
                        }
                    }
                    Ok(Some(AnyDecoded::Oversized(answer))) => {
                        self.partial_since = None;
                        if let Some(answer) = answer {
                            let _ = send_out(&self.tx, &self.queued, answer).await;
                        }
                    }
                    Err(e) => {
                        match self.wire {
                            Wire::Native(_) => {
                                bad_frame(&self.core, &self.tx, &self.queued, &self.peer, &e).await
                            }
                            Wire::Remoting(_) => self.core.connections.count_with(
                                ClosedFor::BadFrame,
                                &self.peer,
                                &e,
                            ),
                        }
                        return Step::Ended;
                    }
                }
            }
            if self.large.is_none() {
                if let Some(total) = self
                    .wire
                    .partial_frame_len(&self.buf)
                    .filter(|&t| t > LARGE_FRAME_BYTES)
                {
                    match LargeFrame::start(total, &self.buf) {
                        Ok(l) => {
                            self.large = Some(l);
                            self.buf = BytesMut::new();
                        }
                        Err(e) => {
                            tracing::warn!(peer = %self.peer, "cannot map {total} bytes for a frame: {e}; closing the connection");
                            return Step::Ended;
                        }
                    }
                }
            }
            let partial = self.large.is_some() || !self.buf.is_empty() || self.wire.is_discarding();
            if !partial {
                self.partial_since = None;
                if self.buf.capacity() > READ_BUFFER_KEEP_BYTES {
                    self.buf = BytesMut::new();
                }
            } else if clock
                .now()
                .saturating_duration_since(*self.partial_since.get_or_insert(self.heard_at))
                .ge(&self.frame_deadline)
            {
                // Checked after every read too: a frame trickled in never lets a read time out.
                self.core
                    .connections
                    .count(ClosedFor::FrameDeadline, &self.peer);
                return Step::Ended;
            }
            // A bulk connection is tried in the light lane only with nothing waiting in its
            // socket: what gathered there would count against it at once.
            let mut early = None;
            let to = self.core.lanes.settled(&self.pace, lane);
            if to != lane {
                early = match &mut self.large {
                    Some(l) => self.source.try_read(l.rest()),
                    None => self.source.try_read(&mut self.chunk[..]),
                };
                if early.is_none() {
                    self.pace.entered_light();
                    if let Some(to) = self.moving(lane, to).await {
                        return Step::Move(to);
                    }
                }
            }
            // A light connection heard from lately waits for its next bytes on the latency
            // ring (`crate::lanes`), for what is left of `LIGHT_WAIT_MAX`.
            let wait = (lane == Lane::Light)
                .then(|| {
                    crate::lanes::LIGHT_WAIT_MAX
                        .saturating_sub(clock.now().saturating_duration_since(self.heard_at))
                })
                .filter(|w| !w.is_zero());
            // Read into a reused, once-zeroed chunk and append what arrived: the cost is one
            // copy of the bytes received, never a fill of the whole spare buffer. A large
            // frame is read straight into its mapping.
            let into = match &mut self.large {
                Some(l) => l.rest(),
                None => &mut self.chunk[..],
            };
            let got = match early {
                Some(got) => got,
                None => self.source.read(into, wait, &self.core.lanes).await,
            };
            match got {
                Ok(0) => return Step::Ended,
                Ok(n) => {
                    broker_base::idle_poll::note_work();
                    self.core.lanes.read(&mut self.pace);
                    self.read_at = Instant::now();
                    self.heard_at = clock.now();
                    match self.large.take() {
                        Some(mut l) => {
                            if !l.filled(n) {
                                self.large = Some(l);
                                continue;
                            }
                            self.partial_since = None;
                            match self.wire.decode_complete(l.into_bytes()) {
                                Ok(frame) => {
                                    if let Some(e) = &self.refusal {
                                        refuse(&self.tx, &self.queued, &frame, e).await;
                                        return Step::Ended;
                                    }
                                    if !self.start(frame, lane).await {
                                        return Step::Ended;
                                    }
                                    self.core.lanes.started(&mut self.pace, lane);
                                }
                                Err(e) => {
                                    bad_frame(&self.core, &self.tx, &self.queued, &self.peer, &e)
                                        .await;
                                    return Step::Ended;
                                }
                            }
                        }
                        None => {
                            self.buf.extend_from_slice(&self.chunk[..n]);
                            // A read that filled the chunk: more is coming, read more at once.
                            if n == self.chunk.len() && self.chunk.len() < READ_CHUNK_MAX_BYTES {
                                self.chunk = ReadChunk::new(self.chunk.len() * 2);
                            }
                        }
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                    // A frame past its deadline is caught at the top of the loop.
                    let in_flight = self.in_flight() > 0;
                    if !partial {
                        // Nothing arrived for a while: an idle connection keeps small buffers.
                        if self.chunk.len() > READ_CHUNK_MIN_BYTES {
                            self.chunk = ReadChunk::new(READ_CHUNK_MIN_BYTES);
                        }
                        if self.buf.capacity() > READ_CHUNK_MIN_BYTES {
                            self.buf = BytesMut::new();
                        }
                    }
                    if !in_flight
                        && clock.now().saturating_duration_since(self.heard_at) >= self.idle_timeout
                    {
                        self.core.connections.count(ClosedFor::Idle, &self.peer);
                        return Step::Ended;
                    }
                }
                Err(_) => return Step::Ended,
            }
        }
    }
}

/// A connection's writer: what it keeps across its moves between lanes.
struct Writing {
    core: Rc<Front>,
    rx: local_channel::LocalReceiver<Outgoing>,
    /// The socket, until the first response makes the buffered writer (`w`) around it: a
    /// connection that never asks for anything holds no write buffer.
    sink: Option<Sink>,
    w: Option<futures_lite::io::BufWriter<Sink>>,
    prefix: BytesMut,
    queued: Rc<Cell<usize>>,
    /// The reader's lane, which the writer joins once it has flushed.
    lane: Rc<Cell<Lane>>,
}

impl InLane for Writing {
    /// Writes responses in `lane` until the connection ends or the reader moved.
    async fn run(&mut self, lane: Lane) -> Step {
        while let Some(out) = self.rx.recv().await {
            if let Some(sink) = self.sink.take() {
                self.w = Some(futures_lite::io::BufWriter::with_capacity(
                    WRITE_BUFFER_BYTES,
                    sink,
                ));
                self.prefix = BytesMut::with_capacity(512);
            }
            let Some(w) = self.w.as_mut() else {
                return Step::Ended;
            };
            let taken_at = out.trace.map(|_| Instant::now());
            self.queued.set(self.queued.get().saturating_sub(1));
            self.prefix.clear();
            let encoded = match &out.header {
                OutHeader::Native(h) => encode_frame_prefix(h, out.body.len(), &mut self.prefix)
                    .map_err(|e| e.to_string()),
                OutHeader::Remoting(c) => {
                    remoting::encode_prefix(c, out.body.len(), &mut self.prefix)
                        .map_err(|e| e.to_string())
                }
            };
            if let Err(e) = encoded {
                tracing::warn!("cannot encode a response: {e}");
                break;
            }
            let mut res = w.write_all(&self.prefix).await;
            if res.is_ok() {
                res = match &out.body {
                    Body::None => Ok(()),
                    Body::Owned(v) => write_all_slices(w, v.iter().map(|b| &b[..])).await,
                    Body::Local(v) => write_joined(w, v).await,
                    Body::Restamped(v, r) => crate::rocketmq::write_restamped(w, v, r).await,
                };
            }
            let flushing = res.is_ok() && self.queued.get() == 0;
            if flushing {
                res = w.flush().await;
            }
            if res.is_err() {
                break;
            }
            if let (Some(t), Some(taken_at)) = (out.trace, taken_at) {
                let stages = &self.core.stages;
                let done = Instant::now();
                stages.record(Stage::Reply, taken_at - t.answered_at);
                stages.record(Stage::Write, done - taken_at);
                stages.record(Stage::Total, done - t.read_at);
            }
            if flushing && self.lane.get() != lane {
                return Step::Move(self.lane.get());
            }
        }
        if let Some(w) = self.w.as_mut() {
            let _ = w.close().await;
        }
        Step::Ended
    }
}

/// Reads a new connection's first bytes until they tell its protocol; `None` when the client
/// closed or said nothing within `idle_timeout` (the socket's read timeout ticks meanwhile).
async fn first_bytes(
    core: &Front,
    stream: &mut broker_base::tls::Stream,
    peer: &str,
    idle_timeout: Duration,
) -> Option<(BytesMut, Detected)> {
    let clock = &core.shared.clock;
    let since = clock.now();
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; READ_CHUNK_MIN_BYTES];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => return None,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                match remoting::detect::detect(&buf) {
                    Detected::NeedMore => {}
                    detected => return Some((buf, detected)),
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                if clock.now().saturating_duration_since(since) >= idle_timeout {
                    core.connections.count(ClosedFor::Idle, peer);
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// Hands a response to the writer, counting it as queued (the writer flushes when none is).
async fn send_out(
    tx: &LocalSender<Outgoing>,
    queued: &std::cell::Cell<usize>,
    out: Outgoing,
) -> Result<(), ()> {
    queued.set(queued.get() + 1);
    tx.send(out).await.map_err(|_| ())
}

async fn write_all_slices<'a, W: futures_lite::AsyncWrite + Unpin>(
    w: &mut W,
    slices: impl Iterator<Item = &'a [u8]>,
) -> std::io::Result<()> {
    for s in slices {
        w.write_all(s).await?;
    }
    Ok(())
}

/// Writes stored records, joining neighbours that lie together in one buffer: a run as long
/// as the writer's buffer goes to the socket without being copied into it first.
async fn write_joined<W: futures_lite::AsyncWrite + Unpin>(
    w: &mut W,
    slices: &[shard::StoredSlice],
) -> std::io::Result<()> {
    let mut slices = slices.iter();
    let Some(first) = slices.next() else {
        return Ok(());
    };
    let mut run = first.clone();
    for s in slices {
        match run.joined(s) {
            Some(j) => run = j,
            None => {
                w.write_all(run.as_bytes()).await?;
                run = s.clone();
            }
        }
    }
    w.write_all(run.as_bytes()).await
}

/// The response to a pull (with or without a SQL92 filter).
fn pull_answer(out: PullOutcome<PullBody>) -> Outgoing {
    let code = match out.status {
        PullStatus::Found => ResponseCode::Success,
        PullStatus::NoNewMessage => ResponseCode::PullNotFound,
        PullStatus::OffsetMoved => ResponseCode::PullOffsetMoved,
    };
    let result = PullResult {
        next_offset: out.next_offset.into(),
        min_offset: out.min_offset.into(),
        max_offset: out.max_offset.into(),
        count: out.count,
        suggested_broker_id: out.suggest_broker_id,
    };
    let body = match out.body {
        PullBody::Local(v) => Body::Local(v),
        PullBody::Owned(v) => Body::Owned(v),
    };
    answer(Header::response(0, code, Command::PullResult(result)), body)
}

/// Maps one request to its handler and the handler's answer to a response.
async fn handle(
    core: &Rc<Front>,
    client: &Rc<ClientConn>,
    command: Command,
    body: Bytes,
) -> Result<Outgoing, BrokerError> {
    match command {
        Command::Send(req) => {
            let out = core.send(&req.topic, req.queue_id, body, req.count).await?;
            Ok(ok(
                0,
                Command::SendResult(SendResult {
                    queue_id: out.queue_id,
                    first_queue_offset: out.appended.first_queue_offset.into(),
                    first_commit_log_offset: out.appended.first_commit_log_offset.into(),
                    shard: out.appended.shard,
                    store_host: out.store_host.to_string(),
                }),
            ))
        }
        Command::Pull(req) => Ok(pull_answer(core.pull(req).await?)),
        Command::PullSql92 { pull, expression } => Ok(pull_answer(
            core.pull_filtered(pull, Some(expression)).await?,
        )),
        Command::CreateTopic(cfg) => {
            core.create_topic(cfg).await?;
            Ok(ok(0, Command::Empty))
        }
        Command::GetQueueOffsets { topic, queue_id } => {
            let (min_offset, max_offset) = core.queue_offsets(&topic, queue_id).await?;
            Ok(ok(
                0,
                Command::QueueOffsets {
                    min_offset,
                    max_offset,
                },
            ))
        }
        Command::SearchOffsetByTime {
            topic,
            queue_id,
            timestamp_ms,
        } => {
            let off = core.search_offset(&topic, queue_id, timestamp_ms).await?;
            Ok(ok(0, Command::Offset(off)))
        }
        Command::BrokerStatus => {
            let cores = core.status().await?;
            Ok(ok(
                0,
                Command::BrokerStatusResult(BrokerStatus {
                    broker_name: core.shared.config.broker_name.clone(),
                    cluster: core.shared.config.cluster_name.clone(),
                    uptime_ms: core.shared.uptime().as_millis() as u64,
                    shard_count: core.shared.shard_count,
                    cores,
                }),
            ))
        }
        Command::QueryByKey(q) => {
            let recs = core.query_by_key(q).await?;
            records_response(recs)
        }
        Command::ViewByOffset {
            shard,
            commit_log_offset,
        } => {
            let recs = core.view_by_offset(shard, commit_log_offset).await?;
            // The offset named no topic: the account must hold SUB on the one found.
            let key = client.access_key();
            for r in &recs {
                let topic = message::RecordView::parse(r).map(|v| v.topic().to_owned());
                core.acl.check_lookup(
                    client,
                    key.as_deref(),
                    topic.as_deref().unwrap_or(""),
                    "ViewByOffset",
                )?;
            }
            records_response(recs)
        }
        Command::SendStages { reset } => Ok(ok(
            0,
            Command::SendStagesResult(core.send_stages(reset).await?),
        )),
        Command::GetTopicConfigs => Ok(ok(0, Command::TopicConfigs(core.topics.borrow().all()))),
        Command::ConsumerHeartbeat(hb) => {
            check_name("client id", &hb.client_id)?;
            check_name("consumer group", &hb.group)?;
            core.clients.identified(client, &hb.client_id);
            let v = core
                .group(GroupOp::Heartbeat {
                    group: hb.group,
                    client_id: hb.client_id,
                })
                .await?;
            Ok(members_response(core, v))
        }
        Command::IdentifyClient { client_id } => {
            check_name("client id", &client_id)?;
            core.clients.identified(client, &client_id);
            // A requester identifies itself before its request: the reply topic its
            // replier will send to exists from then on.
            core.ensure_reply_topic().await;
            Ok(ok(0, Command::Empty))
        }
        Command::SendReply(req) => {
            let reply = native_reply(client, &req, &body)?;
            core.reply(reply).await?;
            Ok(ok(0, Command::Empty))
        }
        Command::ProducerHeartbeat { group, client_id } => {
            check_name("producer group", &group)?;
            check_name("client id", &client_id)?;
            core.clients.produces(client, &group);
            Ok(ok(0, Command::Empty))
        }
        Command::EndTransaction(end) => {
            core.end_transaction(end).await?;
            Ok(ok(0, Command::Empty))
        }
        Command::GetClientRunningInfo { client_id } => {
            check_name("client id", &client_id)?;
            let info = core.client_running_info(&client_id).await?;
            Ok(ok(0, Command::ClientRunningInfoResult(info)))
        }
        Command::UnregisterConsumer { group, client_id } => {
            check_name("consumer group", &group)?;
            let v = core.group(GroupOp::Unregister { group, client_id }).await?;
            Ok(members_response(core, v))
        }
        Command::WaitGroupChange {
            group,
            known_version,
            timeout_ms,
        } => {
            check_name("consumer group", &group)?;
            let v = core
                .group(GroupOp::WaitChange {
                    group,
                    known_version,
                    timeout_ms,
                })
                .await?;
            Ok(members_response(core, v))
        }
        Command::QueryConsumerOffset(q) => {
            let r = core.group_offset(OffsetOp::Query(q)).await?;
            Ok(offset_response(r))
        }
        Command::CommitConsumerOffset(c) => {
            check_name("client id", &c.client_id)?;
            let r = core.group_offset(OffsetOp::Commit(c)).await?;
            Ok(offset_response(r))
        }
        Command::ResetConsumerOffset { queue, offset } => {
            let r = core.group_offset(OffsetOp::Reset { queue, offset }).await?;
            Ok(offset_response(r))
        }
        Command::LockQueue {
            queue,
            client_id,
            lease_ms,
        } => {
            check_name("client id", &client_id)?;
            core.group_offset(OffsetOp::Lock {
                queue,
                client_id,
                lease_ms,
            })
            .await?;
            Ok(ok(0, Command::Empty))
        }
        Command::AuthChallenge => Ok(ok(
            0,
            Command::AuthNonce {
                nonce: client.new_nonce(),
            },
        )),
        Command::Login {
            access_key,
            signature,
        } => {
            core.acl.login(client, &access_key, &signature)?;
            Ok(ok(0, Command::Empty))
        }
        other => Err(BrokerError::Unsupported(format!(
            "the broker does not serve `{}` requests",
            other.name()
        ))),
    }
}

/// A native reply's one record as the reply to push.
fn native_reply(
    client: &ClientConn,
    req: &protocol::SendRequest,
    body: &[u8],
) -> Result<crate::reply::ReplyPush, BrokerError> {
    if req.count != 1 {
        return Err(BrokerError::BadRequest(format!(
            "a reply is one message, not {}",
            req.count
        )));
    }
    let rec = message::RecordView::parse(body)
        .map_err(|e| BrokerError::MessageIllegal(format!("reply record: {e}")))?;
    if rec.len() != body.len() {
        return Err(BrokerError::MessageIllegal(format!(
            "reply body holds {} bytes past its record",
            body.len() - rec.len()
        )));
    }
    Ok(crate::reply::ReplyPush {
        producer_group: req.producer_group.clone(),
        topic: req.topic.clone(),
        queue_id: req.queue_id as i32,
        body: Bytes::copy_from_slice(rec.body()),
        flag: rec.flag(),
        sys_flag: rec.sys_flag(),
        born_timestamp_ms: rec.born_timestamp_ms(),
        born_host: client.peer_v4.or(Some(rec.born_host())),
        reconsume_times: rec.reconsume_times(),
        properties: rec
            .properties()
            .iter()
            .filter(|(k, _)| *k != message::prop::CRC)
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    })
}

fn check_name(what: &str, name: &str) -> Result<(), BrokerError> {
    if name.is_empty() || name.len() > 255 {
        return Err(BrokerError::BadRequest(format!(
            "{what} must be 1..=255 bytes"
        )));
    }
    Ok(())
}

fn members_response(core: &Front, v: MemberView) -> Outgoing {
    ok(
        0,
        Command::GroupMembers(protocol::GroupMembers {
            version: v.version,
            members: v.members,
            retry_delay_levels_ms: core.shared.config.retry_delay_levels_ms.clone(),
        }),
    )
}

fn offset_response(r: Option<StoredOffset>) -> Outgoing {
    ok(
        0,
        Command::ConsumerOffset {
            offset: r.map(|s| s.offset),
            epoch: r.map_or(0, |s| s.epoch),
            last_commit_ms: r.map_or(0, |s| s.last_commit_ms),
            consume_tps_milli: r.map_or(0, |s| s.consume_tps_milli),
            skipped_records: r.map_or(0, |s| s.skipped_records),
        },
    )
}

fn records_response(recs: Vec<Bytes>) -> Result<Outgoing, BrokerError> {
    if recs.is_empty() {
        return Err(BrokerError::NotFound("no matching message".into()));
    }
    let count = recs.len() as u32;
    Ok(answer(
        Header::response(0, ResponseCode::Success, Command::Records { count }),
        Body::Owned(recs),
    ))
}
