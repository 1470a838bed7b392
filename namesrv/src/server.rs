//! The network side: an accept thread, a thread per connection and a scan thread, all std.
//!
//! Idle connections cannot lock the server out (see `connections.rs` for the rules): each
//! connection thread reads with a socket timeout set to its own deadline (idle between
//! frames, a frame timeout inside one) and closes the connection when it passes; at
//! `connections_max` the accept thread closes the connection that has never sent a request,
//! or else the one idle longest, and serves the newcomer. A thread sleeps in `read` until
//! bytes or its deadline arrive: nothing polls.
//!
//! Shutdown: a flag is set and the accept thread is woken by a connection to itself; it then
//! shuts down every open connection (which unblocks their reads) and joins their threads.
//! The scan thread waits on a channel whose sender the handle drops.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use tls::SyncStream;

use bytes::BytesMut;
use protocol::blocking::write_frame;
use protocol::{BrokerKey, Command, Decoded, FrameDecoder, Header, ResponseCode};
use remoting::detect::Detected;
use remoting::{Decoded as RemotingDecoded, RemotingCommand, RemotingDecoder};

use crate::connections::{eviction_victim, Activity, CapLog, Expiry, ReadDeadline};
use crate::handler::{handle_request, lock};
use crate::route_table::ConnectionId;
use crate::{NameServerConfig, RouteTable};

/// A peer that stops reading its responses cannot hold a connection thread longer than this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// How long shutdown waits to connect to its own listener.
const WAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// After evicting for want of a descriptor: the evicted connection's thread closes its own
/// descriptor when it wakes, a moment later.
const DESCRIPTOR_RETRY_BACKOFF: Duration = Duration::from_millis(5);
/// At most one "connection cap reached" line per this interval (each line has the count).
const CAP_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Bytes asked of the socket per read. NameServer requests are small; a large registration
/// takes a few more reads. Small, because every connection thread has one on its stack.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// One open connection, as the accept thread sees it.
struct Conn {
    /// A clone of the stream, so shutdown or eviction can close it.
    stream: TcpStream,
    activity: Arc<Activity>,
}

struct Shared {
    table: Mutex<RouteTable>,
    /// The KV config (mqadmin's updateKvConfig).
    kv: Mutex<crate::kv::KvStore>,
    /// The settings as getNamesrvConfig answers them.
    config_properties: String,
    metrics: crate::metrics::Metrics,
    stopping: AtomicBool,
    /// Every open connection, so shutdown can close them and the accept thread can evict.
    connections: Mutex<HashMap<u64, Conn>>,
    frame_bytes_max: u32,
    connections_max: usize,
    idle_timeout: Duration,
    frame_timeout: Duration,
    /// A connection that speaks for a broker is not closed as idle sooner than this: the
    /// broker would expire anyway, and its connection closing drops it at once.
    broker_expiry: Duration,
    /// The origin of [`Activity`]'s millisecond clock.
    epoch: Instant,
    /// The listener's TLS (`tls_mode`).
    tls: tls::Listener,
    /// Evictions to report: by the accept thread as they happen, rate-limited, and by the
    /// scan thread for the tail of a burst (nothing else would report it).
    cap_log: Mutex<CapLog>,
    /// Request codes refused as not served, for one log line per code per minute.
    refused_codes: Mutex<remoting::refusals::RefusedCodes>,
    /// Access control, when on.
    acl: Option<crate::access::Gate>,
}

impl Shared {
    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn cap_log(&self) -> std::sync::MutexGuard<'_, CapLog> {
        self.cap_log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Forgets connection `id` (a no-op when eviction already did).
    fn remove(&self, id: u64) {
        if self.connections().remove(&id).is_some() {
            self.metrics.connections_open.dec();
        }
    }
}

/// A running NameServer. Dropping it shuts it down too; [`NameServerHandle::shutdown`] says
/// so explicitly.
pub struct NameServerHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
    scan_thread: Option<JoinHandle<()>>,
    scan_stop: Option<mpsc::Sender<()>>,
}

/// Binds the listener and starts the server's threads. Fails on an invalid config
/// (`InvalidInput`) or when the address cannot be bound.
pub fn start(config: NameServerConfig) -> io::Result<NameServerHandle> {
    config.validate()?;
    let replay = || {
        acl::fresh::ReplayGuard::new(
            config.acl_signature_window_ms,
            config.acl_signature_time_required,
        )
    };
    let acl = match (&config.acl_file, &config.auth_file) {
        (Some(path), _) => Some(crate::access::Gate::open(path, replay())),
        (None, Some(path)) => Some(crate::access::Gate::open_v2(
            path,
            config.authorization_enable,
            replay(),
        )),
        (None, None) => None,
    }
    .transpose()
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let tls = tls::Listener::new(config.tls_mode, config.tls.as_ref())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(config.listen_addr)?;
    let local_addr = listener.local_addr()?;
    let kv = crate::kv::KvStore::open(config.kv_config_path.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("KV config: {e}")))?;
    let shared = Arc::new(Shared {
        table: Mutex::new(RouteTable::new(config.broker_expiry())),
        kv: Mutex::new(kv),
        config_properties: config.properties(),
        metrics: crate::metrics::Metrics::default(),
        stopping: AtomicBool::new(false),
        connections: Mutex::new(HashMap::new()),
        frame_bytes_max: config.frame_bytes_max,
        connections_max: config.connections_max,
        idle_timeout: config.connection_idle_timeout(),
        frame_timeout: config.frame_timeout(),
        broker_expiry: config.broker_expiry(),
        epoch: Instant::now(),
        tls,
        cap_log: Mutex::new(CapLog::new(CAP_LOG_INTERVAL)),
        refused_codes: Mutex::new(remoting::refusals::RefusedCodes::default()),
        acl,
    });

    let (scan_stop, scan_rx) = mpsc::channel::<()>();
    let scan_shared = Arc::clone(&shared);
    let scan_interval = config.scan_interval();
    let scan_thread = thread::Builder::new()
        .name("namesrv-scan".into())
        .spawn(move || scan_loop(&scan_shared, &scan_rx, scan_interval))?;

    let accept_shared = Arc::clone(&shared);
    let accept_thread = match thread::Builder::new()
        .name("namesrv-accept".into())
        .spawn(move || accept_loop(&accept_shared, &listener))
    {
        Ok(t) => t,
        Err(e) => {
            drop(scan_stop);
            let _ = scan_thread.join();
            return Err(e);
        }
    };

    tracing::debug!(
        broker_expiry_ms = config.broker_expiry_ms,
        scan_interval_ms = scan_interval.as_millis() as u64,
        frame_bytes_max = config.frame_bytes_max,
        connections_max = config.connections_max,
        connection_idle_timeout_ms = config.connection_idle_timeout_ms,
        frame_timeout_ms = config.frame_timeout_ms,
        "namesrv configuration"
    );
    // Scripts read this exact line (the binary repeats it on stdout).
    tracing::info!("namesrv listening on {local_addr}");
    Ok(NameServerHandle {
        local_addr,
        shared,
        accept_thread: Some(accept_thread),
        scan_thread: Some(scan_thread),
        scan_stop: Some(scan_stop),
    })
}

impl NameServerHandle {
    /// The address actually bound (the OS's pick when the port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics exposition text of this moment (Prometheus/OpenMetrics format).
    pub fn metrics_text(&self) -> String {
        let table = lock(&self.shared.table);
        self.shared.metrics.render(&table, Instant::now())
    }

    /// A renderer for `telemetry::serve` that shares this server's state.
    pub fn metrics_renderer(&self) -> telemetry::Render {
        let shared = Arc::clone(&self.shared);
        Arc::new(move || {
            let table = lock(&shared.table);
            shared.metrics.render(&table, Instant::now())
        })
    }

    /// Brokers currently registered (including any silent ones the scan has not reached).
    pub fn broker_count(&self) -> usize {
        lock(&self.shared.table).broker_count()
    }

    /// Stops accepting, closes every connection and joins all threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(accept_thread) = self.accept_thread.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        // The accept thread is blocked in accept(); a connection wakes it to see the flag.
        match TcpStream::connect_timeout(&wake_addr(self.local_addr), WAKE_TIMEOUT) {
            Ok(_) => {
                if accept_thread.join().is_err() {
                    tracing::error!("accept thread panicked");
                }
            }
            Err(e) => {
                // Not joining beats hanging: close what we can and leave the accept thread
                // to exit on its next connection.
                tracing::warn!("cannot wake the accept thread ({e}); not waiting for it");
                close_all(&self.shared);
            }
        }
        drop(self.scan_stop.take());
        if let Some(t) = self.scan_thread.take() {
            if t.join().is_err() {
                tracing::error!("scan thread panicked");
            }
        }
    }
}

impl Drop for NameServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where to connect to reach our own listener: a wildcard address is not a destination.
fn wake_addr(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

fn close_all(shared: &Shared) {
    for conn in shared.connections().values() {
        let _ = conn.stream.shutdown(Shutdown::Both);
    }
}

fn scan_loop(shared: &Shared, stop: &mpsc::Receiver<()>, interval: Duration) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let unreported = shared.cap_log().flush(Instant::now());
        if let Some((evicted, limit)) = unreported {
            log_cap(shared, evicted, limit);
        }
        let expired = lock(&shared.table).expire(Instant::now());
        for key in expired {
            tracing::warn!(
                cluster = %key.cluster, broker_name = %key.broker_name,
                broker_id = key.broker_id, "broker expired: no heartbeat"
            );
        }
    }
}

/// At a limit (`connections_max`, or the process's descriptors): closes the connection
/// [`eviction_victim`] picks, so the newcomer is served. False when there was none.
fn evict_one(shared: &Shared, limit: &'static str) -> bool {
    let victim = {
        let mut conns = shared.connections();
        let victim = eviction_victim(conns.iter().map(|(id, c)| (*id, &*c.activity)));
        victim.and_then(|id| conns.remove(&id))
    };
    let Some(victim) = victim else {
        return false;
    };
    // Its thread's read returns at once; the thread then exits on its own.
    let _ = victim.stream.shutdown(Shutdown::Both);
    shared.metrics.connections_open.dec();
    shared.metrics.count_closed("evicted");
    let due = shared.cap_log().hit(Instant::now(), limit);
    if let Some(evicted) = due {
        log_cap(shared, evicted, limit);
    }
    true
}

/// The one line for hitting a limit; `evicted` counts the evictions since the last line.
fn log_cap(shared: &Shared, evicted: u64, limit: &'static str) {
    tracing::warn!(
        limit,
        connections_max = shared.connections_max,
        evicted,
        "connection cap reached: closing the longest-idle connections to serve new ones \
         (evicted = closed since the last such line)"
    );
}

/// The registry's copy of a new connection; out of descriptors, one idle connection is
/// evicted first, so the newcomer is not dropped for it.
fn clone_for_registry(shared: &Shared, stream: &TcpStream) -> io::Result<TcpStream> {
    match stream.try_clone() {
        Err(e) if out_of_descriptors(&e) && evict_one(shared, "file descriptors") => {
            thread::sleep(DESCRIPTOR_RETRY_BACKOFF);
            stream.try_clone()
        }
        other => other,
    }
}

/// Whether accept failed for want of a descriptor (the process's or the system's), which
/// closing an idle connection cures.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut next_id: u64 = 0;
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors before connections_max: idle connections must not
                // lock newcomers out this way either.
                if out_of_descriptors(&e) && evict_one(shared, "file descriptors") {
                    thread::sleep(DESCRIPTOR_RETRY_BACKOFF);
                } else {
                    tracing::warn!("accept failed: {e}");
                    thread::sleep(ACCEPT_ERROR_BACKOFF);
                }
                continue;
            }
        };
        threads.retain(|t| !t.is_finished());
        if shared.connections().len() >= shared.connections_max {
            evict_one(shared, "connections_max");
        }
        let _ = stream.set_nodelay(true);
        if let Err(e) = stream.set_write_timeout(Some(WRITE_TIMEOUT)) {
            tracing::warn!(%peer, "cannot set a write timeout ({e}); closing");
            continue;
        }
        let registered = match clone_for_registry(shared, &stream) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%peer, "cannot clone the connection ({e}); closing");
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        let activity = Arc::new(Activity::new(shared.now_ms()));
        shared.connections().insert(
            id,
            Conn {
                stream: registered,
                activity: Arc::clone(&activity),
            },
        );
        shared.metrics.connections_open.inc();
        let conn_shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name(format!("namesrv-conn-{id}"))
            .spawn(move || {
                serve_connection(&conn_shared, ConnectionId(id), &activity, stream, peer);
                conn_shared.remove(id);
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                tracing::warn!(%peer, "cannot spawn a connection thread ({e}); closing");
                shared.remove(id);
            }
        }
    }
    // Close every connection so their blocked reads return, then wait for them.
    close_all(shared);
    for t in threads {
        if t.join().is_err() {
            tracing::error!("a connection thread panicked");
        }
    }
}

/// Serves one connection until the peer closes it, it breaks the framing, its read deadline
/// passes (see [`ReadDeadline`]), it is evicted, or shutdown. Then the brokers it still
/// speaks for leave the routes (see [`drop_brokers_of`]).
fn serve_connection(
    shared: &Shared,
    id: ConnectionId,
    activity: &Activity,
    stream: TcpStream,
    peer: SocketAddr,
) {
    tracing::debug!(%peer, "connection opened");
    let Some(stream) = accept_tls(shared, stream, peer) else {
        return;
    };
    // The brokers that registered or heartbeated over this connection.
    let mut brokers: Vec<BrokerKey> = Vec::new();
    // Whom the connection logged in as (native protocol).
    let mut session = crate::access::Session::default();
    // Told by the connection's first bytes.
    let mut wire = Wire::Undecided;
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    let mut deadline = ReadDeadline::new(Instant::now(), shared.idle_timeout, shared.frame_timeout);
    'connection: loop {
        let (until, expiry) = deadline.deadline();
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let reason = match expiry {
                Expiry::Idle => "idle",
                Expiry::HalfFrame => "half_frame",
            };
            tracing::debug!(%peer, reason, "read deadline passed, closing the connection");
            shared.metrics.count_closed(reason);
            let _ = stream.shutdown(Shutdown::Both);
            break;
        }
        if let Err(e) = stream.set_read_timeout(Some(left)) {
            tracing::debug!(%peer, "cannot set a read timeout ({e}); closing");
            break;
        }
        let n = match (&stream).read(&mut chunk) {
            Ok(0) => {
                if !buf.is_empty() || wire.is_discarding() {
                    tracing::debug!(%peer, "connection closed in the middle of a frame");
                }
                break;
            }
            Ok(n) => n,
            // The timeout (the loop checks which deadline passed) or a signal.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::debug!(%peer, "connection ended: {e}");
                break;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Wire::Undecided = wire {
            match remoting::detect::detect(&buf) {
                Detected::NeedMore => {
                    deadline.observe(Instant::now(), false, true);
                    continue;
                }
                Detected::Native => wire = Wire::Native(FrameDecoder::new(shared.frame_bytes_max)),
                Detected::Remoting => {
                    wire = Wire::Remoting(RemotingDecoder::new(shared.frame_bytes_max))
                }
                Detected::Http2 => {
                    log_grpc(peer);
                    let _ = stream.shutdown(Shutdown::Both);
                    break;
                }
            }
        }
        let served = match &mut wire {
            Wire::Undecided => Served::Requests(false),
            Wire::Native(decoder) => serve_native(
                shared,
                Native {
                    id,
                    peer,
                    stream: &stream,
                    brokers: &mut brokers,
                    session: &mut session,
                },
                decoder,
                &mut buf,
            ),
            Wire::Remoting(decoder) => serve_remoting(shared, peer, &stream, decoder, &mut buf),
        };
        let completed = match served {
            Served::Requests(completed) => completed,
            Served::Close => break 'connection,
        };
        if completed {
            if !brokers.is_empty() {
                // Its heartbeats keep it busy; should the idle timeout be set shorter than
                // their interval, the broker must still not flap in and out of the routes.
                deadline.raise_idle_timeout(shared.broker_expiry);
            }
            activity.request_completed(shared.now_ms());
        }
        deadline.observe(
            Instant::now(),
            completed,
            !buf.is_empty() || wire.is_discarding(),
        );
    }
    tracing::debug!(%peer, "connection closed");
    drop_brokers_of(shared, id, peer, &brokers);
}

/// The protocol a connection speaks, told from its first bytes ([`remoting::detect`]).
enum Wire {
    Undecided,
    Native(FrameDecoder),
    /// RocketMQ's remoting protocol: its clients ask for routes the way they ask RocketMQ's
    /// NameServer.
    Remoting(RemotingDecoder),
}

impl Wire {
    fn is_discarding(&self) -> bool {
        match self {
            Wire::Undecided => false,
            Wire::Native(d) => d.is_discarding(),
            Wire::Remoting(d) => d.is_discarding(),
        }
    }
}

/// What serving the buffered frames came to.
enum Served {
    /// Whether a request was completed.
    Requests(bool),
    Close,
}

/// Answers every whole native frame in `buf`.
/// A native connection as its requests see it.
struct Native<'a> {
    id: ConnectionId,
    peer: SocketAddr,
    stream: &'a SyncStream,
    /// The brokers that registered or heartbeated over it.
    brokers: &'a mut Vec<BrokerKey>,
    /// Whom it logged in as.
    session: &'a mut crate::access::Session,
}

fn serve_native(
    shared: &Shared,
    conn: Native<'_>,
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
) -> Served {
    let Native {
        id,
        peer,
        stream,
        brokers,
        session,
    } = conn;
    let mut completed = false;
    loop {
        let decoded = match decoder.decode(buf) {
            Ok(Some(d)) => d,
            Ok(None) => return Served::Requests(completed),
            Err(e) => {
                // The frame boundaries are lost: answer once if the peer still listens,
                // then close. Request id 0: the failing frame's id could not be read.
                tracing::warn!(%peer, "bad frame, closing the connection: {e}");
                let answer = Header::error(0, ResponseCode::BadFrame, e.to_string());
                let _ = write_frame(&mut &*stream, &answer, &[]);
                let _ = stream.shutdown(Shutdown::Both);
                return Served::Close;
            }
        };
        let Some(response) = answer(shared, id, peer, decoded, brokers, session) else {
            continue;
        };
        completed = true;
        let Some((response, body)) = response else {
            continue; // oneway
        };
        if let Err(e) = write_frame(&mut &*stream, &response, &body) {
            tracing::debug!(%peer, "cannot answer, closing: {e}");
            return Served::Close;
        }
    }
}

/// Answers every whole remoting frame in `buf`.
fn serve_remoting(
    shared: &Shared,
    peer: SocketAddr,
    stream: &SyncStream,
    decoder: &mut RemotingDecoder,
    buf: &mut BytesMut,
) -> Served {
    let mut completed = false;
    loop {
        let (response, body) = match decoder.decode(buf) {
            Ok(None) => return Served::Requests(completed),
            Ok(Some(RemotingDecoded::Frame(frame))) => {
                if frame.command.is_response() {
                    tracing::debug!(%peer, "ignoring an unsolicited remoting response");
                    continue;
                }
                let name = remoting::codes::request::name(frame.command.code).unwrap_or("unknown");
                shared
                    .metrics
                    .count_request(crate::metrics::Protocol::Remoting, name);
                let refused = shared.acl.as_ref().and_then(|gate| {
                    crate::access::remoting(gate, peer.ip(), &frame.command, &frame.body).err()
                });
                let (response, body) = match refused {
                    Some(d) => (
                        RemotingCommand::response_to(
                            &frame.command,
                            remoting::codes::response::NO_PERMISSION,
                            Some(d.to_string()),
                        ),
                        Vec::new(),
                    ),
                    None => {
                        let admin = crate::admin::Admin {
                            table: &shared.table,
                            kv: &shared.kv,
                            config: &shared.config_properties,
                        };
                        let now = Instant::now();
                        crate::admin::handle(&admin, &frame.command, &frame.body, now)
                            .unwrap_or_else(|| {
                                crate::rocketmq::handle(&shared.table, &frame.command, now)
                            })
                    }
                };
                completed = true;
                if response.code == remoting::codes::response::REQUEST_CODE_NOT_SUPPORTED {
                    log_refused_code(shared, peer, frame.command.code);
                }
                if response.code != 0 {
                    let code = remoting::codes::response::name(response.code);
                    shared.metrics.count_error(
                        crate::metrics::Protocol::Remoting,
                        code.unwrap_or("unknown"),
                    );
                }
                if frame.command.is_oneway() {
                    continue;
                }
                (response, body)
            }
            Ok(Some(RemotingDecoded::Oversized { command, frame_len })) => {
                tracing::warn!(%peer, frame_len, frame_bytes_max = shared.frame_bytes_max, "oversized remoting frame skipped");
                let Some(cmd) = command.filter(|c| !c.is_oneway()) else {
                    continue;
                };
                let remark = format!(
                    "frame of {frame_len} bytes exceeds the name server's limit of {} bytes",
                    shared.frame_bytes_max
                );
                let code = remoting::codes::response::SYSTEM_ERROR;
                (
                    RemotingCommand::response_to(&cmd, code, Some(remark)),
                    Vec::new(),
                )
            }
            Err(e) => {
                tracing::warn!(%peer, "bad remoting frame, closing the connection: {e}");
                let _ = stream.shutdown(Shutdown::Both);
                return Served::Close;
            }
        };
        let written = remoting::encode(&response, &body)
            .map_err(io::Error::other)
            .and_then(|frame| io::Write::write_all(&mut &*stream, &frame));
        if let Err(e) = written {
            tracing::debug!(%peer, "cannot answer, closing: {e}");
            return Served::Close;
        }
    }
}

/// The connection as the listener's `tls_mode` serves it: plaintext, after a TLS handshake,
/// or not at all (plaintext on an enforcing listener, a failed handshake). The first byte
/// must come within the idle timeout and the handshake within the frame timeout, so a
/// client that opens and sends nothing holds its thread no longer than an idle one.
fn accept_tls(shared: &Shared, stream: TcpStream, peer: SocketAddr) -> Option<SyncStream> {
    let Some(config) = shared.tls.config.as_ref().filter(|_| shared.tls.enabled()) else {
        return Some(SyncStream::Plain(stream));
    };
    let first = match tls::peek_first_byte(&stream, Instant::now() + shared.idle_timeout) {
        Ok(Some(b)) => b,
        Ok(None) | Err(_) => {
            shared.metrics.count_closed("idle");
            return None;
        }
    };
    match shared.tls.decide(first) {
        tls::Decision::Plain => Some(SyncStream::Plain(stream)),
        tls::Decision::Refuse => {
            shared.metrics.count_closed("plaintext");
            log_tls_refusal(
                peer,
                "a plaintext connection was closed: tls_mode = enforcing accepts TLS only",
            );
            // Its first request is answered with why, so the client can say so.
            tls::answer_plaintext_blocking(&stream, Instant::now() + shared.frame_timeout);
            let _ = stream.shutdown(Shutdown::Both);
            None
        }
        tls::Decision::Tls => {
            match tls::accept(config, stream, Instant::now() + shared.frame_timeout) {
                Ok(s) => Some(SyncStream::Tls(s)),
                Err(e) => {
                    shared.metrics.count_closed("tls_handshake");
                    log_tls_refusal(peer, &format!("a TLS handshake failed: {e}"));
                    None
                }
            }
        }
    }
}

/// Logs a TLS refusal at most once per 10 s (each line names the last peer).
fn log_tls_refusal(peer: SocketAddr, what: &str) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if last.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
        return;
    }
    *last = Some(Instant::now());
    tracing::warn!(%peer, "{what}");
}

/// Logs (at most once a minute) that a gRPC client connected: RocketMQ 5's gRPC clients
/// need a proxy that corvus does not have; its remoting clients connect here.
fn log_grpc(peer: SocketAddr) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
        return;
    }
    *last = Some(Instant::now());
    tracing::warn!(
        %peer,
        "a gRPC (HTTP/2) client connected and was closed: corvus speaks the native protocol and RocketMQ's remoting protocol on this port (RocketMQ 4.x/5.x remoting clients: Java DefaultMQProducer, Go, C++), not RocketMQ 5's gRPC; point a remoting client here"
    );
}

/// The connection `id` has closed (EOF, reset, read deadline, eviction, bad frame): every
/// broker it still speaks for leaves the routes now rather than at its expiry, as a killed
/// broker's socket is closed by its kernel. One that registered over a newer connection
/// since (it restarted, or reconnected) stays. Not at shutdown, when every connection
/// closes and the table goes with the process.
fn drop_brokers_of(shared: &Shared, id: ConnectionId, peer: SocketAddr, brokers: &[BrokerKey]) {
    if brokers.is_empty() || shared.stopping.load(Ordering::SeqCst) {
        return;
    }
    let dropped: Vec<&BrokerKey> = {
        let mut table = lock(&shared.table);
        brokers
            .iter()
            .filter(|key| table.connection_closed(key, id))
            .collect()
    };
    for key in dropped {
        tracing::info!(
            cluster = %key.cluster, broker_name = %key.broker_name,
            broker_id = key.broker_id, %peer,
            "broker dropped from the routes: its registration connection closed"
        );
    }
}

/// Handles one decoded frame: `None` when it was not a request (nothing to count or
/// answer), `Some(None)` for a oneway request, `Some(Some((response, body)))` otherwise.
/// A broker whose registration or heartbeat succeeds is added to `brokers`, the ones this
/// connection speaks for.
fn answer(
    shared: &Shared,
    id: ConnectionId,
    peer: SocketAddr,
    decoded: Decoded,
    brokers: &mut Vec<BrokerKey>,
    session: &mut crate::access::Session,
) -> Option<Option<(Header, Vec<u8>)>> {
    let (response, oneway) = match decoded {
        Decoded::Frame(frame) => {
            if frame.header.is_response() {
                // Nobody here sent a request; answering a response could loop forever.
                tracing::debug!(%peer, "ignoring an unsolicited response frame");
                return None;
            }
            let oneway = frame.header.is_oneway();
            shared.metrics.count_request(
                crate::metrics::Protocol::Native,
                frame.header.command.name(),
            );
            let broker = match &frame.header.command {
                Command::RegisterBroker(reg) => Some(reg.key.clone()),
                Command::BrokerHeartbeat(key) | Command::RegisterTopics(key) => Some(key.clone()),
                _ => None,
            };
            let gated =
                crate::access::native(shared.acl.as_ref(), session, peer.ip(), &frame.header);
            let response = match gated {
                Some(answer) => (answer, Vec::new()),
                None => {
                    handle_request(&shared.table, id, frame.header, &frame.body, Instant::now())
                }
            };
            if response.0.code != 0 {
                shared.metrics.count_error(
                    crate::metrics::Protocol::Native,
                    response.0.response_code().name(),
                );
            } else if let Some(key) = broker {
                if !brokers.contains(&key) {
                    brokers.push(key);
                }
            }
            (response, oneway)
        }
        Decoded::Oversized { header, frame_len } => {
            tracing::warn!(
                %peer, frame_len, frame_bytes_max = shared.frame_bytes_max,
                command = header.command.name(), "oversized frame skipped"
            );
            let answer = Header::error(
                header.request_id,
                ResponseCode::MessageTooLarge,
                format!(
                    "frame of {frame_len} bytes exceeds the name server's limit of {} bytes",
                    shared.frame_bytes_max
                ),
            );
            ((answer, Vec::new()), header.is_oneway())
        }
    };
    Some((!oneway).then_some(response))
}

/// Logs a remoting request refused because the NameServer does not serve its code: one line
/// per code per minute, with the count of those left out since.
fn log_refused_code(shared: &Shared, peer: SocketAddr, code: i32) {
    let left_out = shared
        .refused_codes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .note(code, Instant::now());
    if let Some(left_out) = left_out {
        tracing::warn!(
            %peer,
            code,
            name = remoting::codes::request::name(code).unwrap_or("unknown"),
            left_out_since_last_line = left_out.same_code,
            other_codes_left_out = left_out.other_codes,
            "refused a RocketMQ request: the NameServer does not serve request code {code}"
        );
    }
}
