//! Pipelined connections and the pool that shares them.
//!
//! One [`Connection`] per address, shared by every thread of the client. Writers take a
//! mutex just long enough to write one frame; a reader thread per connection decodes the
//! responses and hands each to its waiter by `request_id`, so any number of requests can be
//! in flight and answered out of order. The in-flight count per connection is bounded (a
//! full window makes the caller wait, up to its timeout): backpressure, not unbounded
//! queueing.
//!
//! Callbacks of asynchronous requests run on a completion thread of the connection, never
//! on the reader thread, so a callback may block or send again without stalling the reads
//! its own progress depends on.
//!
//! A connection that fails (read or write error, peer close, undecodable frame) fails all of
//! its pending requests at once and is replaced by a fresh dial on next use.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use protocol::blocking::{write_frame, FrameReader};
use protocol::{Command, Decoded, Frame, Header, ProtocolError};
use tls::SyncStream;

use crate::error::{ClientError, Result};

/// A callback of an asynchronous request; called exactly once.
pub(crate) type Callback = Box<dyn FnOnce(Result<Frame>) + Send + 'static>;

/// A callback and its outcome, on their way to the completion thread.
type Completion = (Callback, Result<Frame>);

/// How often the reader thread wakes to expire timed-out requests when no bytes arrive.
const READ_WAKE_MS: u64 = 50;

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Dial timeout. Default 3000 ms.
    pub connect_timeout_ms: u64,
    /// Write timeout; a write that stalls this long closes the connection. Default 10000 ms.
    pub write_timeout_ms: u64,
    /// Requests in flight per connection before senders wait. Default 4096, at least 1.
    pub inflight_max: usize,
    /// Largest response frame accepted. Default `protocol::FRAME_BYTES_MAX_DEFAULT`.
    pub frame_bytes_max: u32,
    /// The account every connection logs in as (a broker or NameServer with its ACL on
    /// refuses requests otherwise). Default: the process's [`set_default_credentials`].
    pub credentials: Option<Credentials>,
    /// TLS for every connection of the pool (see [`crate::ClientConfig::with_tls`]); the
    /// handshake is bounded by `connect_timeout_ms`. Default none: plaintext.
    pub tls: Option<Arc<tls::rustls::ClientConfig>>,
}

pub use acl::Credentials;

static DEFAULT_CREDENTIALS: RwLock<Option<Credentials>> = RwLock::new(None);

/// The credentials every client built later in this process logs in with, unless its own
/// config says otherwise (a tool's `--access-key`/`--secret-key`; the trace writer's
/// producer).
pub fn set_default_credentials(credentials: Option<Credentials>) {
    *DEFAULT_CREDENTIALS
        .write()
        .unwrap_or_else(PoisonError::into_inner) = credentials;
}

/// What [`set_default_credentials`] set.
pub fn default_credentials() -> Option<Credentials> {
    DEFAULT_CREDENTIALS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            connect_timeout_ms: 3000,
            write_timeout_ms: 10_000,
            inflight_max: 4096,
            frame_bytes_max: protocol::FRAME_BYTES_MAX_DEFAULT,
            credentials: default_credentials(),
            tls: default_tls(),
        }
    }
}

/// The TLS that [`PoolConfig::default`] starts with: none unless [`set_default_tls`] set one.
static DEFAULT_TLS: RwLock<Option<Arc<tls::rustls::ClientConfig>>> = RwLock::new(None);

fn default_tls() -> Option<Arc<tls::rustls::ClientConfig>> {
    DEFAULT_TLS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Makes every pool configured from then on with [`PoolConfig::default`] (every
/// [`crate::ClientConfig::new`], producer, consumer and admin) speak TLS as `settings` say:
/// the process-wide switch a command-line tool sets once from its `--tls` flags, as
/// RocketMQ's clients take `-Dtls.enable=true`. `None` turns it off again.
pub fn set_default_tls(settings: Option<&tls::ClientSettings>) -> Result<()> {
    let config = settings
        .map(tls::client_config)
        .transpose()
        .map_err(|e| ClientError::Config(e.to_string()))?;
    *DEFAULT_TLS.write().unwrap_or_else(PoisonError::into_inner) = config;
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread while holding a lock leaves plain data behind (maps, counts);
    // carrying on is better than cascading the panic into every client thread.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Waiter {
    Channel(SyncSender<Result<Frame>>),
    Callback(Callback),
}

struct Pending {
    waiter: Waiter,
    deadline: Instant,
    timeout_ms: u64,
}

/// Bounded count of requests in flight.
struct Window {
    in_flight: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

/// State shared by the connection handle, its reader thread and its completion thread.
struct Shared {
    addr: String,
    pending: Mutex<HashMap<u64, Pending>>,
    closed: AtomicBool,
    close_reason: Mutex<String>,
    window: Window,
    completions: Mutex<Option<Sender<Completion>>>,
}

impl Shared {
    /// Removes a pending request (and frees its window slot). `None` when it was already
    /// answered, expired or failed: whoever removed it delivered the outcome.
    fn take(&self, id: u64) -> Option<Pending> {
        let p = lock(&self.pending).remove(&id);
        if p.is_some() {
            self.release(1);
        }
        p
    }

    fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut in_flight = lock(&self.window.in_flight);
        debug_assert!(*in_flight >= n);
        *in_flight = in_flight.saturating_sub(n);
        drop(in_flight);
        if n == 1 {
            self.window.freed.notify_one();
        } else {
            self.window.freed.notify_all();
        }
    }

    fn acquire(&self, deadline: Instant, timeout_ms: u64) -> Result<()> {
        let mut in_flight = lock(&self.window.in_flight);
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(self.closed_error());
            }
            if *in_flight < self.window.max {
                *in_flight += 1;
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout {
                    addr: self.addr.clone(),
                    timeout_ms,
                });
            }
            in_flight = self
                .window
                .freed
                .wait_timeout(in_flight, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn closed_error(&self) -> ClientError {
        ClientError::ConnectionClosed {
            addr: self.addr.clone(),
            reason: lock(&self.close_reason).clone(),
        }
    }

    fn deliver(&self, p: Pending, result: Result<Frame>) {
        match p.waiter {
            // The receiver may have given up (timed out); nothing to do then.
            Waiter::Channel(tx) => {
                let _ = tx.try_send(result);
            }
            Waiter::Callback(cb) => {
                let tx = lock(&self.completions).clone();
                match tx {
                    Some(tx) => {
                        if let Err(mpsc::SendError((cb, result))) = tx.send((cb, result)) {
                            cb(result);
                        }
                    }
                    // The completion thread is gone (the connection is closing): run it here.
                    None => cb(result),
                }
            }
        }
    }

    /// Marks the connection dead and fails everything pending. Idempotent.
    fn close(&self, reason: String) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::debug!(addr = %self.addr, %reason, "connection closed");
        *lock(&self.close_reason) = reason;
        let drained: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        self.release(drained.len());
        for p in drained {
            let err = self.closed_error();
            self.deliver(p, Err(err));
        }
        // Wake senders waiting for a window slot so they see `closed`.
        self.window.freed.notify_all();
        // Let the completion thread finish what it has and exit.
        lock(&self.completions).take();
    }

    fn expire(&self, now: Instant) {
        let expired: Vec<Pending> = {
            let mut pending = lock(&self.pending);
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| pending.remove(id)).collect()
        };
        self.release(expired.len());
        for p in expired {
            let err = ClientError::Timeout {
                addr: self.addr.clone(),
                timeout_ms: p.timeout_ms,
            };
            self.deliver(p, Err(err));
        }
    }
}

/// Answers a request the broker sends on a client's connection (a broker-initiated
/// request, such as the consumer running info): the answer's command, or `None` for one
/// this client does not serve (answered REQUEST_CODE_NOT_SUPPORTED).
/// It sees the whole frame: a pushed reply carries its record in the body.
pub type RequestServer = Arc<dyn Fn(&Frame) -> Option<Command> + Send + Sync>;

/// One pipelined connection to a broker core or a NameServer.
pub struct Connection {
    shared: Arc<Shared>,
    /// Shared with the reader thread, which writes the answers to the broker's requests.
    /// With TLS the reader and the writer share one session (`tls::BlockingTls`), whose
    /// lock is never held across a socket read.
    writer: Arc<Mutex<SyncStream>>,
    /// A handle for shutting the socket down without waiting for a stalled writer.
    control: TcpStream,
    next_id: AtomicU64,
}

/// A response not yet received. Dropping it abandons the request.
pub(crate) struct ResponseFuture {
    rx: Receiver<Result<Frame>>,
    id: u64,
    deadline: Instant,
    timeout_ms: u64,
    shared: Arc<Shared>,
}

impl ResponseFuture {
    /// Waits for the response until the request's deadline.
    pub fn wait(&self) -> Result<Frame> {
        loop {
            if let Some(r) = self.wait_for(Duration::from_secs(3600)) {
                return r;
            }
        }
    }

    /// Waits at most `step`; `None` if the response has not come yet and the request's
    /// deadline has not passed.
    pub fn wait_for(&self, step: Duration) -> Option<Result<Frame>> {
        let now = Instant::now();
        let until = self.deadline.min(now + step);
        match self.rx.recv_timeout(until.saturating_duration_since(now)) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) if Instant::now() >= self.deadline => {
                Some(Err(ClientError::Timeout {
                    addr: self.shared.addr.clone(),
                    timeout_ms: self.timeout_ms,
                }))
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(self.shared.closed_error())),
        }
    }
}

impl Drop for ResponseFuture {
    fn drop(&mut self) {
        // Answered requests are already gone from the map; this frees abandoned ones.
        self.shared.take(self.id);
    }
}

impl Connection {
    fn dial(
        addr: &str,
        config: &PoolConfig,
        server: Option<RequestServer>,
    ) -> Result<Arc<Connection>> {
        let sock_addr = addr
            .to_socket_addrs()
            .map_err(|e| ClientError::io(addr, &e))?
            .next()
            .ok_or_else(|| ClientError::Io {
                addr: addr.to_owned(),
                kind: ErrorKind::NotFound,
                detail: "address resolves to nothing".into(),
            })?;
        let stream = TcpStream::connect_timeout(
            &sock_addr,
            Duration::from_millis(config.connect_timeout_ms),
        )
        .map_err(|e| ClientError::io(addr, &e))?;
        stream
            .set_nodelay(true)
            .and_then(|_| {
                stream.set_write_timeout(Some(Duration::from_millis(config.write_timeout_ms)))
            })
            .map_err(|e| ClientError::io(addr, &e))?;
        let stream = SyncStream::dial(
            config.tls.as_ref(),
            addr,
            stream,
            Duration::from_millis(config.connect_timeout_ms),
        )
        .map_err(|e| ClientError::io(addr, &e))?;
        stream
            .set_read_timeout(Some(Duration::from_millis(READ_WAKE_MS)))
            .map_err(|e| ClientError::io(addr, &e))?;
        let read_half = stream.try_clone().map_err(|e| ClientError::io(addr, &e))?;
        let control = stream
            .socket()
            .try_clone()
            .map_err(|e| ClientError::io(addr, &e))?;
        let (done_tx, done_rx) = mpsc::channel::<Completion>();
        let shared = Arc::new(Shared {
            addr: addr.to_owned(),
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            close_reason: Mutex::new(String::new()),
            window: Window {
                in_flight: Mutex::new(0),
                freed: Condvar::new(),
                max: config.inflight_max.max(1),
            },
            completions: Mutex::new(Some(done_tx)),
        });
        let reader_shared = Arc::clone(&shared);
        let frame_bytes_max = config.frame_bytes_max;
        let writer = Arc::new(Mutex::new(stream));
        let answers = server.map(|s| (s, Arc::clone(&writer)));
        thread::Builder::new()
            .name(format!("mq-read-{addr}"))
            .spawn(move || reader_loop(reader_shared, read_half, frame_bytes_max, answers))
            .map_err(|e| ClientError::io(addr, &e))?;
        let completion = thread::Builder::new()
            .name(format!("mq-done-{addr}"))
            .spawn(move || {
                for (cb, result) in done_rx {
                    cb(result);
                }
            });
        if let Err(e) = completion {
            let _ = control.shutdown(Shutdown::Both);
            return Err(ClientError::io(addr, &e));
        }
        tracing::debug!(%addr, "connected");
        let conn = Arc::new(Connection {
            shared,
            writer,
            control,
            next_id: AtomicU64::new(1),
        });
        if let Some(c) = &config.credentials {
            let timeout = Duration::from_millis(config.connect_timeout_ms);
            if let Err(e) = conn.login(c, timeout) {
                conn.close("login failed");
                return Err(e);
            }
        }
        Ok(conn)
    }

    /// Logs the connection in: a nonce from the server, answered with an HMAC of it keyed
    /// by the secret. A server that does not know the login commands (an older one) needs
    /// none, and is used as it is.
    fn login(&self, c: &Credentials, timeout: Duration) -> Result<()> {
        let addr = self.addr().to_owned();
        let frame = self.request(Command::AuthChallenge, &[], timeout)?;
        if frame.header.response_code() == protocol::ResponseCode::RequestCodeNotSupported {
            tracing::debug!(%addr, "the server has no login: connected without one");
            return Ok(());
        }
        let nonce = match expect_success(&addr, frame)?.header.command {
            Command::AuthNonce { nonce } => nonce,
            other => return Err(unexpected(&addr, "auth_nonce", &other)),
        };
        let signature = acl::sign::login_signature(&c.secret_key, &nonce, &c.access_key);
        let login = Command::Login {
            access_key: c.access_key.clone(),
            signature,
        };
        expect_success(&addr, self.request(login, &[], timeout)?)?;
        Ok(())
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Requests currently awaiting a response.
    pub fn in_flight(&self) -> usize {
        *lock(&self.shared.window.in_flight)
    }

    /// Closes the socket; the reader thread then fails everything pending.
    pub fn close(&self, reason: &str) {
        self.shared.close(reason.to_owned());
        let _ = self.control.shutdown(Shutdown::Both);
    }

    fn write(&self, header: &Header, body: &[u8]) -> Result<()> {
        let mut w = lock(&self.writer);
        if self.is_closed() {
            return Err(self.shared.closed_error());
        }
        if let Err(e) = write_frame(&mut *w, header, body) {
            // A partial frame may be on the wire: the stream cannot be used any more.
            let reason = format!("write failed: {e}");
            let _ = w.shutdown(Shutdown::Both);
            drop(w);
            self.shared.close(reason);
            return Err(match e {
                ProtocolError::Io(e) => ClientError::io(self.addr(), &e),
                other => ClientError::Protocol {
                    addr: self.addr().to_owned(),
                    detail: other.to_string(),
                },
            });
        }
        Ok(())
    }

    /// Takes a window slot and records the waiter. On failure the waiter is handed back so
    /// the caller can fail it.
    fn register(
        &self,
        waiter: Waiter,
        timeout: Duration,
    ) -> std::result::Result<(u64, Instant), (ClientError, Waiter)> {
        let timeout_ms = timeout.as_millis() as u64;
        let deadline = Instant::now() + timeout;
        if let Err(e) = self.shared.acquire(deadline, timeout_ms) {
            return Err((e, waiter));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.pending).insert(
            id,
            Pending {
                waiter,
                deadline,
                timeout_ms,
            },
        );
        // `close` sets the flag before draining: either it drained our entry (and delivered
        // the failure) or we see the flag here and withdraw the entry ourselves.
        if self.is_closed() {
            if let Some(p) = self.shared.take(id) {
                return Err((self.shared.closed_error(), p.waiter));
            }
        }
        Ok((id, deadline))
    }

    /// Sends a request; the response (whatever its code) is awaited through the future.
    pub(crate) fn send_request(
        &self,
        command: Command,
        body: &[u8],
        timeout: Duration,
    ) -> Result<ResponseFuture> {
        let (tx, rx) = mpsc::sync_channel(1);
        let (id, deadline) = self
            .register(Waiter::Channel(tx), timeout)
            .map_err(|(e, _)| e)?;
        let future = ResponseFuture {
            rx,
            id,
            deadline,
            timeout_ms: timeout.as_millis() as u64,
            shared: Arc::clone(&self.shared),
        };
        // On a write error the future's drop withdraws the request.
        self.write(&Header::request(id, command), body)?;
        Ok(future)
    }

    /// Sends a request and waits for its response frame (whatever its code).
    pub fn request(&self, command: Command, body: &[u8], timeout: Duration) -> Result<Frame> {
        self.send_request(command, body, timeout)?.wait()
    }

    /// Sends a request whose outcome goes to `callback`, exactly once: on the connection's
    /// completion thread for a response or a timeout, or right here on the caller's thread if
    /// the request cannot be sent. The call may wait for a window slot.
    pub(crate) fn request_async(
        &self,
        command: Command,
        body: &[u8],
        timeout: Duration,
        callback: Callback,
    ) {
        let id = match self.register(Waiter::Callback(callback), timeout) {
            Ok((id, _)) => id,
            Err((e, waiter)) => return fail_inline(waiter, e),
        };
        if let Err(e) = self.write(&Header::request(id, command), body) {
            // If the close already drained our entry, the callback has its failure.
            if let Some(p) = self.shared.take(id) {
                fail_inline(p.waiter, e);
            }
        }
    }

    /// Sends a request that expects no response.
    pub fn oneway(&self, command: Command, body: &[u8]) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.write(&Header::oneway(id, command), body)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close("connection dropped");
    }
}

fn fail_inline(waiter: Waiter, e: ClientError) {
    match waiter {
        Waiter::Channel(tx) => {
            let _ = tx.try_send(Err(e));
        }
        Waiter::Callback(cb) => cb(Err(e)),
    }
}

fn reader_loop(
    shared: Arc<Shared>,
    stream: SyncStream,
    frame_bytes_max: u32,
    answers: Option<(RequestServer, Arc<Mutex<SyncStream>>)>,
) {
    let mut reader = FrameReader::new(stream, frame_bytes_max);
    let mut last_sweep = Instant::now();
    let reason = loop {
        match reader.read_decoded() {
            Ok(Some(Decoded::Frame(frame))) => {
                if frame.header.is_response() {
                    if let Some(p) = shared.take(frame.header.request_id) {
                        shared.deliver(p, Ok(frame));
                    }
                } else if let Some((server, writer)) = &answers {
                    // A request of the broker's: answered here, on this thread (the
                    // answers are small and computed from what the client holds).
                    if !frame.header.is_oneway() {
                        let id = frame.header.request_id;
                        let answer = match server(&frame) {
                            Some(command) => {
                                Header::response(id, protocol::ResponseCode::Success, command)
                            }
                            None => Header::error(
                                id,
                                protocol::ResponseCode::RequestCodeNotSupported,
                                format!(
                                    "this client does not serve `{}` requests",
                                    frame.header.command.name()
                                ),
                            ),
                        };
                        if let Err(e) = write_frame(&mut *lock(writer), &answer, &[]) {
                            break format!("cannot answer the broker's request: {e}");
                        }
                    }
                }
            }
            Ok(Some(Decoded::Oversized { header, frame_len })) => {
                if let Some(p) = shared.take(header.request_id) {
                    let err = ClientError::Protocol {
                        addr: shared.addr.clone(),
                        detail: format!(
                            "response of {frame_len} bytes exceeds the limit of {frame_bytes_max}"
                        ),
                    };
                    shared.deliver(p, Err(err));
                }
            }
            Ok(None) => break "closed by peer".to_owned(),
            Err(ProtocolError::Io(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(ProtocolError::Io(e)) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => break format!("read failed: {e}"),
        }
        if shared.closed.load(Ordering::Acquire) {
            break "closed".to_owned();
        }
        let now = Instant::now();
        if now.duration_since(last_sweep) >= Duration::from_millis(READ_WAKE_MS) {
            last_sweep = now;
            shared.expire(now);
        }
    };
    let _ = reader.get_ref().shutdown(Shutdown::Both);
    shared.close(reason);
}

/// Connections by address, dialed on first use and re-dialed after a failure.
pub struct ConnectionPool {
    config: PoolConfig,
    /// What the connections answer to requests the broker sends on them.
    server: Option<RequestServer>,
    conns: RwLock<HashMap<String, Arc<Connection>>>,
    shut_down: AtomicBool,
}

impl ConnectionPool {
    pub fn new(config: PoolConfig) -> ConnectionPool {
        ConnectionPool {
            config,
            server: None,
            conns: RwLock::new(HashMap::new()),
            shut_down: AtomicBool::new(false),
        }
    }

    /// A pool whose connections answer the broker's requests with `server`.
    pub fn with_server(config: PoolConfig, server: RequestServer) -> ConnectionPool {
        let mut pool = ConnectionPool::new(config);
        pool.server = Some(server);
        pool
    }

    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The live connection to `addr`, dialing if there is none.
    pub fn get(&self, addr: &str) -> Result<Arc<Connection>> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(ClientError::Shutdown);
        }
        {
            let conns = self.conns.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(c) = conns.get(addr) {
                if !c.is_closed() {
                    return Ok(Arc::clone(c));
                }
            }
        }
        // Dial outside the lock so one unreachable address does not hold up the others.
        // Two threads may race to dial; the loser closes its spare connection.
        let fresh = Connection::dial(addr, &self.config, self.server.clone())?;
        let mut conns = self.conns.write().unwrap_or_else(PoisonError::into_inner);
        if self.shut_down.load(Ordering::Acquire) {
            fresh.close("client shut down");
            return Err(ClientError::Shutdown);
        }
        if let Some(c) = conns.get(addr) {
            if !c.is_closed() {
                fresh.close("spare connection");
                return Ok(Arc::clone(c));
            }
        }
        conns.insert(addr.to_owned(), Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Closes every connection; later `get`s fail with [`ClientError::Shutdown`].
    pub fn shutdown(&self) {
        self.shut_down.store(true, Ordering::Release);
        let conns: Vec<Arc<Connection>> = self
            .conns
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, c)| c)
            .collect();
        for c in conns {
            c.close("client shut down");
        }
    }
}

impl Drop for ConnectionPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Turns a response frame into `Ok` when its code is `Success`, else a broker error.
pub(crate) fn expect_success(addr: &str, frame: Frame) -> Result<Frame> {
    if frame.header.response_code() == protocol::ResponseCode::Success {
        Ok(frame)
    } else {
        Err(ClientError::broker(addr, frame.header))
    }
}

pub(crate) fn unexpected(addr: &str, what: &str, command: &Command) -> ClientError {
    ClientError::Protocol {
        addr: addr.to_owned(),
        detail: format!("expected {what}, got {}", command.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ok, FakeServer, Reply};
    use std::sync::atomic::AtomicUsize;

    /// Answers `SearchOffsetByTime{timestamp_ms: n}` with `Offset(n)` after n ms, so
    /// responses come back in an order other than the requests'.
    fn echo_server() -> FakeServer {
        FakeServer::start(|f| match &f.header.command {
            Command::SearchOffsetByTime { timestamp_ms, .. } => {
                let h = Header::response(
                    f.header.request_id,
                    protocol::ResponseCode::Success,
                    Command::Offset(*timestamp_ms as u64),
                );
                Reply::Later(Duration::from_millis(*timestamp_ms as u64), h, Vec::new())
            }
            Command::BrokerStatus => Reply::Ignore,
            Command::GetTopicList => Reply::Close,
            _ => ok(f, Command::Empty),
        })
    }

    fn echo(ms: i64) -> Command {
        Command::SearchOffsetByTime {
            topic: "T".into(),
            queue_id: 0,
            timestamp_ms: ms,
        }
    }

    fn offset_of(frame: Result<Frame>) -> u64 {
        match frame.unwrap().header.command {
            Command::Offset(n) => n,
            other => panic!("unexpected {other:?}"),
        }
    }

    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn responses_reach_their_own_waiters_out_of_order() {
        let server = echo_server();
        let pool = ConnectionPool::new(PoolConfig::default());
        let conn = pool.get(&server.addr).unwrap();
        let slow = conn.send_request(echo(1500), &[], WAIT).unwrap();
        let (tx, rx) = mpsc::channel();
        conn.request_async(
            echo(200),
            &[],
            WAIT,
            Box::new(move |r| {
                let on = thread::current().name().map(str::to_owned);
                tx.send((offset_of(r), on)).unwrap();
            }),
        );
        assert_eq!(offset_of(conn.request(echo(1), &[], WAIT)), 1);
        // Answered while the slow one is still outstanding.
        assert!(slow.wait_for(Duration::ZERO).is_none());
        let (n, thread_name) = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(n, 200);
        assert!(thread_name.unwrap_or_default().starts_with("mq-done-"));
        assert_eq!(offset_of(slow.wait()), 1500);
        assert_eq!(conn.in_flight(), 0);
        // All three went over the one pooled connection.
        assert!(Arc::ptr_eq(&conn, &pool.get(&server.addr).unwrap()));
    }

    #[test]
    fn unanswered_requests_time_out_and_free_their_slot() {
        let server = echo_server();
        let pool = ConnectionPool::new(PoolConfig::default());
        let conn = pool.get(&server.addr).unwrap();
        let started = Instant::now();
        let r = conn.request(Command::BrokerStatus, &[], Duration::from_millis(150));
        assert!(
            matches!(
                r,
                Err(ClientError::Timeout {
                    timeout_ms: 150,
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // The asynchronous kind is expired by the reader thread.
        let (tx, rx) = mpsc::channel();
        conn.request_async(
            Command::BrokerStatus,
            &[],
            Duration::from_millis(100),
            Box::new(move |r| {
                tx.send(r.is_err_and(|e| matches!(e, ClientError::Timeout { .. })))
                    .unwrap()
            }),
        );
        assert!(rx.recv_timeout(WAIT).unwrap());
        assert_eq!(conn.in_flight(), 0);
        // The connection is still good.
        assert_eq!(offset_of(conn.request(echo(0), &[], WAIT)), 0);
    }

    #[test]
    fn a_dead_connection_fails_its_pending_requests_and_is_redialed() {
        let server = echo_server();
        let pool = ConnectionPool::new(PoolConfig::default());
        let conn = pool.get(&server.addr).unwrap();
        let pending = conn.send_request(echo(2000), &[], WAIT).unwrap();
        let failed = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let f2 = Arc::clone(&failed);
        conn.request_async(
            echo(2000),
            &[],
            WAIT,
            Box::new(move |r| {
                if matches!(r, Err(ClientError::ConnectionClosed { .. })) {
                    f2.fetch_add(1, Ordering::SeqCst);
                }
                tx.send(()).unwrap();
            }),
        );
        // The server closes the connection on this one.
        let r = conn.request(Command::GetTopicList, &[], WAIT);
        assert!(
            matches!(r, Err(ClientError::ConnectionClosed { .. })),
            "{r:?}"
        );
        let started = Instant::now();
        assert!(matches!(
            pending.wait(),
            Err(ClientError::ConnectionClosed { .. })
        ));
        rx.recv_timeout(WAIT).unwrap();
        // Failed by the close, not answered 2 s later.
        assert!(started.elapsed() < Duration::from_millis(1800));
        assert_eq!(failed.load(Ordering::SeqCst), 1);
        assert!(conn.is_closed());
        assert_eq!(conn.in_flight(), 0);
        // Sending on the dead connection fails at once, and the pool dials a new one.
        assert!(conn.request(echo(0), &[], WAIT).is_err());
        let fresh = pool.get(&server.addr).unwrap();
        assert!(!Arc::ptr_eq(&conn, &fresh));
        assert_eq!(offset_of(fresh.request(echo(3), &[], WAIT)), 3);
    }

    #[test]
    fn the_in_flight_window_is_bounded() {
        let server = echo_server();
        let pool = ConnectionPool::new(PoolConfig {
            inflight_max: 2,
            ..PoolConfig::default()
        });
        let conn = pool.get(&server.addr).unwrap();
        let a = conn.send_request(echo(300), &[], WAIT).unwrap();
        let b = conn.send_request(echo(300), &[], WAIT).unwrap();
        assert_eq!(conn.in_flight(), 2);
        // A third waits for a slot, and times out if none frees up in time.
        let r = conn.send_request(echo(0), &[], Duration::from_millis(50));
        assert!(matches!(r, Err(ClientError::Timeout { .. })));
        // With time to wait, it gets the slot of the first answered request.
        let started = Instant::now();
        assert_eq!(offset_of(conn.request(echo(0), &[], WAIT)), 0);
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert_eq!(offset_of(a.wait()), 300);
        assert_eq!(offset_of(b.wait()), 300);
    }

    #[test]
    fn shutdown_closes_everything_and_refuses_new_work() {
        let server = echo_server();
        let pool = ConnectionPool::new(PoolConfig::default());
        let conn = pool.get(&server.addr).unwrap();
        let pending = conn.send_request(echo(3000), &[], WAIT).unwrap();
        pool.shutdown();
        assert!(pending.wait().is_err());
        assert!(matches!(pool.get(&server.addr), Err(ClientError::Shutdown)));
    }

    #[test]
    fn unreachable_addresses_fail_fast() {
        let pool = ConnectionPool::new(PoolConfig {
            connect_timeout_ms: 500,
            ..PoolConfig::default()
        });
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        assert!(matches!(pool.get(&dead), Err(ClientError::Io { .. })));
        assert!(matches!(pool.get("no-port"), Err(ClientError::Io { .. })));
    }
}
