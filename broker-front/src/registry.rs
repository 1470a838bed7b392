//! Registration with the NameServers: a plain thread, off the cores. It registers at start,
//! every `register_interval_ms`, and at once when core 0 reports a topic change (sending
//! only the changed topics to a NameServer that has its full registration); it unregisters
//! at shutdown. Each NameServer is independent: one being down only logs.
//!
//! Everything goes over one long-lived connection per NameServer ([`NameServerLink`]), as
//! RocketMQ's broker keeps its channel: the NameServer drops the broker from its routes when
//! that connection closes, so a killed broker is gone at once instead of after the expiry.
//! The heartbeats every `namesrv_heartbeat_interval_ms` (1 s; at most 60 s) keep the
//! connection well inside the NameServer's idle timeout (120 s).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tls::SyncStream;

use protocol::blocking::{write_frame, FrameReader};
use protocol::{BrokerKey, Command, Header, RegisterBroker, ResponseCode, TopicConfig};

use crate::ha::controller_link::ControllerState;
use crate::shared::Shared;
use crate::topics::auto_create_key_config;

const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// A heartbeat is a few bytes: a NameServer that takes longer is treated as unreachable.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(500);

/// The registration thread: it registers the broker with every NameServer, again after
/// each topic change, and heartbeats between; in controller mode with the id and epoch the
/// controllers gave (`controller`).
pub fn spawn(
    shared: Arc<Shared>,
    controller: Option<Arc<ControllerState>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("namesrv-register".into())
        .spawn(move || run(Registrar { shared, controller }))
}

/// What the registration thread reads: the broker's shared state and, in controller mode,
/// the controllers' word.
struct Registrar {
    shared: Arc<Shared>,
    controller: Option<Arc<ControllerState>>,
}

impl std::ops::Deref for Registrar {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

fn key(shared: &Registrar) -> BrokerKey {
    BrokerKey {
        cluster: shared.config.cluster_name.clone(),
        broker_name: shared.config.broker_name.clone(),
        broker_id: registered_as(shared).0,
    }
}

/// The NameServer id and master epoch to register with: in controller mode the ones the
/// controllers' last answer gave (0 for the master), else the configured id.
fn registered_as(shared: &Registrar) -> (u64, u32) {
    shared
        .controller
        .as_ref()
        .and_then(|c| c.registration())
        .unwrap_or((shared.config.broker_id, 0))
}

fn registration(shared: &Registrar) -> RegisterBroker {
    let mut topics: Vec<TopicConfig> = shared
        .topics
        .lock()
        .map(|t| t.values().cloned().collect())
        .unwrap_or_default();
    if shared.config.auto_create_topic_enable {
        topics.push(auto_create_key_config(
            shared.config.default_topic_queue_nums,
        ));
    }
    with_broker_permission(shared, &mut topics);
    RegisterBroker {
        key: key(shared),
        addr: shared.advertise_addr.clone(),
        core_addrs: shared
            .core_addrs
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default(),
        shard_count: shared.shard_count,
        topics,
        // Controller mode: the epoch of the master the broker serves as or follows; the
        // NameServers keep the master's slot for the highest.
        master_epoch: registered_as(shared).1,
    }
}

/// As RocketMQ's broker: a broker that does not both read and write registers every topic
/// with only what it does (`broker_permission`), so a read-only broker's routes take no
/// sends.
fn with_broker_permission(shared: &Registrar, topics: &mut [TopicConfig]) {
    let perm = shared.broker_permission.load(Ordering::SeqCst);
    if perm & protocol::perm::READ_WRITE != protocol::perm::READ_WRITE {
        for t in topics {
            t.perm &= perm;
        }
    }
}

/// Why an exchange with a NameServer got no answer.
struct ExchangeError {
    detail: String,
    /// The NameServer had closed the connection before this request (EOF, reset, broken
    /// pipe on a connection opened earlier): worth one more try on a fresh connection.
    closed_before: bool,
    /// The request went out whole and its answer is only late: the connection stays (a
    /// late answer is told apart by its request id). Closing it would make the NameServer
    /// drop the broker from its routes at once, so a NameServer slow for a moment (a busy
    /// host) would make every route of the broker flap.
    only_late: bool,
}

/// The broker's one connection to one NameServer, kept open for every registration and
/// heartbeat: the NameServer ties the broker to it and drops the broker from its routes the
/// moment it closes (a killed broker's kernel closes it), rather than at its expiry. A
/// failed exchange closes it and the next one dials again; one whose answer is only late
/// keeps it, and the late answer is skipped by its request id when it comes.
struct NameServerLink {
    addr: String,
    /// The broker's own credentials: each new connection logs in with them first.
    credentials: Option<crate::config::Credentials>,
    conn: Option<FrameReader<SyncStream>>,
    /// TLS for this link (`tls_client_enable`).
    tls: Option<Arc<tls::rustls::ClientConfig>>,
    next_request_id: u64,
    /// The last exchange failed (each change is logged once).
    failing: bool,
    /// The last full registration here succeeded and nothing failed since: topic changes
    /// may be sent alone (the NameServer answers `BrokerNotRegistered` if it forgot us).
    registered: bool,
    /// What the NameServer said with its last refusal (a stale master epoch, say).
    last_remark: String,
}

impl NameServerLink {
    fn new(
        addr: &str,
        credentials: Option<crate::config::Credentials>,
        tls: Option<Arc<tls::rustls::ClientConfig>>,
    ) -> NameServerLink {
        NameServerLink {
            addr: addr.to_owned(),
            credentials,
            conn: None,
            tls,
            next_request_id: 0,
            failing: false,
            registered: false,
            last_remark: String::new(),
        }
    }

    /// One request: the NameServer's answer (its code, its remark and what it carries), or
    /// why there was none. A connection that the NameServer had closed meanwhile (it
    /// restarted, or closed it as idle) is replaced at once and the request sent again on
    /// the new one.
    fn exchange(
        &mut self,
        command: &Command,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Header, String> {
        let reused = self.conn.is_some();
        match self.try_exchange(command, body, timeout) {
            Err(e) if reused && e.closed_before => {
                tracing::debug!(namesrv = %self.addr, "connection was closed ({}); redialing", e.detail);
                self.try_exchange(command, body, timeout)
                    .map_err(|e| e.detail)
            }
            other => other.map_err(|e| e.detail),
        }
    }

    fn try_exchange(
        &mut self,
        command: &Command,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Header, ExchangeError> {
        let result = self.send_and_read(command, body, timeout);
        if result.as_ref().is_err_and(|e| !e.only_late) {
            self.conn = None;
        }
        result
    }

    fn send_and_read(
        &mut self,
        command: &Command,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Header, ExchangeError> {
        let other = |detail: String| ExchangeError {
            detail,
            closed_before: false,
            only_late: false,
        };
        let reader = match &mut self.conn {
            Some(r) => r,
            empty => {
                let mut conn = dial(&self.addr, timeout, self.tls.as_ref()).map_err(other)?;
                if let Some(c) = &self.credentials {
                    login(&mut conn, c, timeout).map_err(|e| {
                        other(format!("the NameServer refused this broker's login: {e}"))
                    })?;
                }
                empty.insert(conn)
            }
        };
        let stream = reader.get_ref();
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.socket().set_write_timeout(Some(timeout)))
            .map_err(|e| other(e.to_string()))?;
        self.next_request_id += 1;
        let id = self.next_request_id;
        let header = Header::request(id, command.clone());
        if let Err(e) = write_frame(&mut &*stream, &header, body) {
            return Err(ExchangeError {
                closed_before: peer_closed(&e),
                detail: e.to_string(),
                only_late: false,
            });
        }
        loop {
            return match reader.next_frame() {
                // The late answer to an earlier request: skipped.
                Ok(Some(f)) if f.header.is_response() && f.header.request_id < id => continue,
                Ok(Some(f)) if !f.header.is_response() || f.header.request_id != id => Err(other(
                    format!("answer to another request (id {})", f.header.request_id),
                )),
                Ok(Some(f)) => {
                    if f.header.response_code() != ResponseCode::Success {
                        tracing::debug!(namesrv = %self.addr, remark = %f.header.remark, "NameServer refused");
                        self.last_remark = f.header.remark.clone();
                    }
                    Ok(f.header)
                }
                Ok(None) => Err(ExchangeError {
                    detail: "connection closed".into(),
                    closed_before: true,
                    only_late: false,
                }),
                Err(e) => Err(ExchangeError {
                    closed_before: peer_closed(&e),
                    only_late: is_timeout(&e),
                    detail: e.to_string(),
                }),
            };
        }
    }

    fn call(&mut self, command: &Command, body: &[u8]) -> Result<(), String> {
        match self.exchange(command, body, IO_TIMEOUT)?.response_code() {
            ResponseCode::Success => Ok(()),
            code => Err(format!("{code}: {}", self.last_remark)),
        }
    }

    /// Registers in full; says so when that changes (failing or back).
    fn register(&mut self, frame: &(Command, Vec<u8>)) -> bool {
        match self.call(&frame.0, &frame.1) {
            Ok(()) => {
                if self.failing {
                    tracing::info!(namesrv = %self.addr, "registered with NameServer again");
                }
                self.failing = false;
                self.registered = true;
                true
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(namesrv = %self.addr, "cannot register with NameServer: {e}");
                }
                self.failing = true;
                self.registered = false;
                false
            }
        }
    }

    /// Sends only the changed topics; `false` when they were not taken (the NameServer does
    /// not know the broker, or did not answer), so the caller registers in full.
    fn register_topics(&mut self, frame: &(Command, Vec<u8>)) -> bool {
        if !self.registered {
            return false;
        }
        match self
            .exchange(&frame.0, &frame.1, IO_TIMEOUT)
            .map(|answer| answer.response_code())
        {
            Ok(ResponseCode::Success) => true,
            Ok(code) => {
                tracing::debug!(namesrv = %self.addr, %code, "topic changes not taken; registering in full");
                self.registered = false;
                false
            }
            Err(e) => {
                tracing::debug!(namesrv = %self.addr, "topic changes not sent ({e}); registering in full");
                self.registered = false;
                false
            }
        }
    }
}

fn dial(
    addr: &str,
    timeout: Duration,
    tls: Option<&Arc<tls::rustls::ClientConfig>>,
) -> Result<FrameReader<SyncStream>, String> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    let s = TcpStream::connect_timeout(&sa, timeout).map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let s = SyncStream::dial(tls, addr, s, timeout).map_err(|e| format!("TLS: {e}"))?;
    Ok(FrameReader::new(s, protocol::FRAME_BYTES_MAX_DEFAULT))
}

/// Logs a new connection in for `c` (the acl crate's challenge-response: a nonce from the
/// NameServer, then an HMAC over it keyed by the secret key, which never crosses the wire).
/// A NameServer with ACL on takes registrations only from a logged-in admin account.
fn login(
    conn: &mut FrameReader<SyncStream>,
    c: &crate::config::Credentials,
    timeout: Duration,
) -> Result<(), String> {
    let stream = conn.get_ref();
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.socket().set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let mut ask = |id: u64, command: Command| -> Result<Header, String> {
        write_frame(&mut conn.get_ref(), &Header::request(id, command), &[])
            .map_err(|e| e.to_string())?;
        match conn.next_frame() {
            Ok(Some(f)) if f.header.is_response() && f.header.request_id == id => Ok(f.header),
            Ok(Some(f)) => Err(format!(
                "answer to another request (id {})",
                f.header.request_id
            )),
            Ok(None) => Err("connection closed".into()),
            Err(e) => Err(e.to_string()),
        }
    };
    // Ids from the top of the range: the link's own requests count up from 1.
    let nonce = match ask(u64::MAX - 1, Command::AuthChallenge)? {
        Header {
            command: Command::AuthNonce { nonce },
            ..
        } => nonce,
        h => return Err(format!("{}: {}", h.response_code(), h.remark)),
    };
    let signature = acl::sign::login_signature(&c.secret_key, &nonce, &c.access_key);
    let answer = ask(
        u64::MAX,
        Command::Login {
            access_key: c.access_key.clone(),
            signature,
        },
    )?;
    match answer.response_code() {
        ResponseCode::Success => Ok(()),
        code => Err(format!("{code}: {}", answer.remark)),
    }
}

/// A topic's route as the NameServers hold it, from the first that answers: `Ok(None)` when
/// one says no live broker serves the topic. Blocking, on a connection of its own (run it
/// off the cores, on the blocking pool; `crate::routes` keeps the answers a moment so that
/// a busy core does not dial for each request); each attempt is bounded by `IO_TIMEOUT`.
pub fn query_route(shared: &Shared, topic: &str) -> Result<Option<protocol::RouteData>, String> {
    let credentials = shared.config.credentials();
    let ask = Command::GetRoute {
        topic: topic.to_owned(),
    };
    let mut why = String::from("no NameServer is configured");
    for addr in shared.config.namesrv_list() {
        let mut link = NameServerLink::new(&addr, credentials.clone(), shared.tls.client.clone());
        match link.exchange(&ask, &[], IO_TIMEOUT) {
            Ok(answer) => match (answer.response_code(), answer.command) {
                (ResponseCode::Success, Command::Route(route)) => return Ok(Some(route)),
                (ResponseCode::TopicNotExist, _) => return Ok(None),
                (code, _) => why = format!("NameServer {addr}: {code}: {}", answer.remark),
            },
            Err(e) => why = format!("NameServer {addr}: {e}"),
        }
    }
    Err(why)
}

/// Whether a read ended at its timeout (the answer may still come).
fn is_timeout(e: &protocol::ProtocolError) -> bool {
    matches!(e, protocol::ProtocolError::Io(io)
        if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// Whether an error says the peer had closed the connection (rather than being slow).
fn peer_closed(e: &protocol::ProtocolError) -> bool {
    match e {
        protocol::ProtocolError::Io(io) => matches!(
            io.kind(),
            ErrorKind::BrokenPipe
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

/// The full registration: the command, and the topic table compressed in the body (any
/// number of topics fits in a frame, where a header of them passed its 1 MiB limit at
/// 7,000-9,800 topics).
fn registration_frame(shared: &Registrar) -> (Command, Vec<u8>) {
    let mut reg = registration(shared);
    let body = match protocol::encode_topic_body(&reg.topics) {
        Ok(b) => {
            reg.topics.clear();
            b
        }
        Err(e) => {
            tracing::warn!("cannot compress the topic table, registering it in the header: {e}");
            Vec::new()
        }
    };
    (Command::RegisterBroker(reg), body)
}

/// Topic changes sent alone at most: past it the full registration is as cheap.
const TOPIC_CHANGES_MAX: usize = 1024;

/// Registers the topics created or changed since the last time: alone with a NameServer
/// that has the broker's full registration (what a creation costs then does not grow with
/// the number of topics), in full with any other.
fn register_changes(shared: &Registrar, links: &mut [NameServerLink]) {
    let mut changed = shared
        .topics_changed
        .lock()
        .map(|mut t| std::mem::take(&mut *t))
        .unwrap_or_default();
    with_broker_permission(shared, &mut changed);
    let delta = (!changed.is_empty() && changed.len() <= TOPIC_CHANGES_MAX)
        .then(|| protocol::encode_topic_body(&changed).ok())
        .flatten()
        .map(|body| (Command::RegisterTopics(key(shared)), body));
    let mut full = None;
    for link in links {
        if delta.as_ref().is_some_and(|d| link.register_topics(d)) {
            continue;
        }
        let frame = full.get_or_insert_with(|| registration_frame(shared));
        link.register(frame);
    }
}

fn register_all(shared: &Registrar, links: &mut [NameServerLink]) -> bool {
    let frame = registration_frame(shared);
    let mut any = false;
    for link in links {
        any |= link.register(&frame);
    }
    any
}

/// Tells every NameServer the broker is alive. One that answers that it does not know the
/// broker (it restarted empty, or dropped it) gets the full registration at once; one that
/// does not answer is tried again at the next beat, with a short timeout, so that a frozen
/// NameServer does not delay the others' heartbeats past their expiry.
fn heartbeat_all(shared: &Registrar, links: &mut [NameServerLink]) {
    let beat = Command::BrokerHeartbeat(key(shared));
    let mut frame = None;
    for link in links {
        match link
            .exchange(&beat, &[], HEARTBEAT_TIMEOUT)
            .map(|answer| answer.response_code())
        {
            Ok(ResponseCode::Success) => {
                if link.failing {
                    tracing::info!(namesrv = %link.addr, "NameServer answers heartbeats again");
                }
                link.failing = false;
            }
            Ok(_) => {
                let frame = frame.get_or_insert_with(|| registration_frame(shared));
                link.register(frame);
            }
            Err(e) => {
                if !link.failing {
                    tracing::warn!(namesrv = %link.addr, "NameServer does not answer heartbeats: {e}");
                }
                link.failing = true;
            }
        }
    }
}

fn run(shared: Registrar) {
    let namesrvs = shared.config.namesrv_list();
    if namesrvs.is_empty() {
        return;
    }
    let credentials = shared.config.credentials();
    let mut links: Vec<NameServerLink> = namesrvs
        .iter()
        .map(|a| NameServerLink::new(a, credentials.clone(), shared.tls.client.clone()))
        .collect();
    let interval = Duration::from_millis(shared.config.register_interval_ms);
    let beat = Duration::from_millis(shared.config.namesrv_heartbeat_interval_ms);
    let mut next = Instant::now();
    let mut next_beat = Instant::now() + beat;
    loop {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        // Controller mode: nothing before the controllers have said what this broker is
        // (a broker restarted as the old master must not claim the master's slot).
        if shared
            .controller
            .as_ref()
            .is_some_and(|c| c.registration().is_none())
        {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let wanted = shared.topics_version.load(Ordering::SeqCst);
        let registered = shared.registered_version.load(Ordering::SeqCst);
        // A change of what every route carries (the broker's permission) is registered in
        // full at once.
        let at_once = shared.register_now.swap(false, Ordering::SeqCst);
        if at_once || Instant::now() >= next || wanted > registered {
            if at_once || Instant::now() >= next {
                // The full table includes every change so far.
                if let Ok(mut t) = shared.topics_changed.lock() {
                    t.clear();
                }
                register_all(&shared, &mut links);
            } else {
                register_changes(&shared, &mut links);
            }
            // Even if every NameServer is down, do not hold topic creation hostage.
            shared
                .registered_version
                .fetch_max(wanted, Ordering::SeqCst);
            next = Instant::now() + interval;
            next_beat = Instant::now() + beat;
        } else if Instant::now() >= next_beat {
            heartbeat_all(&shared, &mut links);
            next_beat = Instant::now() + beat;
        }
        // Sleep until the next heartbeat or registration, a topic change or shutdown.
        let guard = shared
            .registry_wake
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let changed = shared.topics_version.load(Ordering::SeqCst)
            > shared.registered_version.load(Ordering::SeqCst)
            || shared.register_now.load(Ordering::SeqCst);
        if !changed && !shared.shutdown.load(Ordering::SeqCst) {
            let left = next
                .min(next_beat)
                .saturating_duration_since(Instant::now());
            let _ = shared.registry_wake.1.wait_timeout(guard, left);
        }
    }
    let goodbye = Command::UnregisterBroker(key(&shared));
    for link in &mut links {
        if let Err(e) = link.call(&goodbye, &[]) {
            tracing::debug!(namesrv = %link.addr, "unregister failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::blocking::FrameReader;

    /// A NameServer that answers its first request only after `late`, then at once; counts
    /// the connections it accepted.
    fn slow_first_answer(
        late: Duration,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = FrameReader::new(stream.try_clone().unwrap(), 1 << 20);
                    let mut first = true;
                    while let Ok(Some(f)) = reader.next_frame() {
                        if first {
                            std::thread::sleep(late);
                            first = false;
                        }
                        let answer = Header::response(
                            f.header.request_id,
                            ResponseCode::Success,
                            Command::Empty,
                        );
                        if write_frame(&mut &stream, &answer, &[]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[test]
    fn a_late_answer_keeps_the_connection_and_is_skipped_by_its_request_id() {
        let (addr, accepted) = slow_first_answer(Duration::from_millis(400));
        let mut link = NameServerLink::new(&addr, None, None);
        let key = BrokerKey {
            cluster: "c".into(),
            broker_name: "b".into(),
            broker_id: 0,
        };
        let beat = Command::BrokerHeartbeat(key);
        assert!(
            link.exchange(&beat, &[], Duration::from_millis(100))
                .is_err(),
            "the first answer is late"
        );
        // The next exchanges read past the late answer and get their own, on the same
        // connection: the NameServer never saw the broker's connection close.
        for _ in 0..3 {
            assert_eq!(
                link.exchange(&beat, &[], Duration::from_secs(2))
                    .map(|answer| answer.response_code()),
                Ok(ResponseCode::Success)
            );
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
