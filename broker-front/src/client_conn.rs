//! A client connection as the broker sees it: an id, the peer, who it is (the client id its
//! consumer heartbeats named), and the requests the broker has sent on it. The broker can
//! ask a client something on the client's own connection (RocketMQ's broker-initiated
//! requests: consumer running info, transaction checks, membership notices) and match the
//! answer by request id. Each core keeps the connections it serves
//! ([`ClientConns`]); a request for a client reaches its core through `mesh::AskClient`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use glommio::channels::local_channel::{self, LocalSender};
use protocol::{Command, Frame, Header};

use crate::conn::Outgoing;
use crate::error::BrokerError;

/// How long the broker waits for a client's answer to its request.
pub const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// Requests the broker may have in flight on one connection at once.
const CLIENT_REQUESTS_MAX: usize = 64;

/// A connection's response queue, and the count of what waits in it (the writer flushes
/// when it is 0).
type ResponseQueue = (Rc<LocalSender<Outgoing>>, Rc<Cell<usize>>);

pub struct ClientConn {
    /// Unique in the broker: the core's id in the top 16 bits.
    pub id: u64,
    pub peer: String,
    /// The peer as an IPv4 address (an IPv4-mapped IPv6 one too), the born host of what it
    /// sends; `None` for another IPv6 peer.
    pub peer_v4: Option<SocketAddrV4>,
    /// The peer's IP (an IPv4-mapped one as IPv4), for the ACL's allow-lists.
    pub peer_ip: Option<IpAddr>,
    /// The access key a native login proved (`crate::access`).
    access_key: RefCell<Option<String>>,
    /// The account this connection is counted under by the quotas (from its first send or
    /// pull), given back when it closes.
    pub(crate) quota_seat: crate::admission::QuotaSeat,
    /// The nonce last given to a native `AuthChallenge`, taken by the login that uses it.
    nonce: RefCell<Option<String>>,
    client_id: RefCell<Option<String>>,
    /// The clustering consumer groups the client's latest heartbeat on this connection
    /// declared: it leaves them when the connection closes.
    consumer_groups: RefCell<Vec<String>>,
    /// The connection's response queue (and its count, which the writer flushes by);
    /// taken when the connection closes, so that nothing holds the writer open.
    out: RefCell<Option<ResponseQueue>>,
    next_request_id: Cell<u64>,
    pending: RefCell<HashMap<u64, LocalSender<Frame>>>,
    /// The connection speaks RocketMQ's remoting protocol.
    remoting: Cell<bool>,
    /// Remoting requests sent on it that wait for an answer, by opaque.
    pending_remoting: RefCell<HashMap<i32, LocalSender<remoting::Frame>>>,
}

impl ClientConn {
    pub fn new(
        id: u64,
        peer: String,
        out: Rc<LocalSender<Outgoing>>,
        queued: Rc<Cell<usize>>,
    ) -> ClientConn {
        let parsed = peer.parse::<SocketAddr>().ok();
        let peer_ip = parsed.map(|a| match a.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        });
        let peer_v4 = match peer.parse::<SocketAddr>() {
            Ok(SocketAddr::V4(a)) => Some(a),
            Ok(SocketAddr::V6(a)) => a
                .ip()
                .to_ipv4_mapped()
                .map(|ip| SocketAddrV4::new(ip, a.port())),
            Err(_) => None,
        };
        ClientConn {
            id,
            peer,
            peer_v4,
            peer_ip,
            access_key: RefCell::new(None),
            quota_seat: Default::default(),
            nonce: RefCell::new(None),
            client_id: RefCell::new(None),
            consumer_groups: RefCell::new(Vec::new()),
            out: RefCell::new(Some((out, queued))),
            next_request_id: Cell::new(1),
            pending: RefCell::new(HashMap::new()),
            remoting: Cell::new(false),
            pending_remoting: RefCell::new(HashMap::new()),
        }
    }

    /// The access key this connection logged in as.
    pub fn access_key(&self) -> std::cell::Ref<'_, Option<String>> {
        self.access_key.borrow()
    }

    pub fn set_access_key(&self, key: &str) {
        *self.access_key.borrow_mut() = Some(key.to_owned());
    }

    /// A fresh login nonce for this connection, replacing any earlier one.
    pub fn new_nonce(&self) -> String {
        let n = acl::sign::new_nonce();
        *self.nonce.borrow_mut() = Some(n.clone());
        n
    }

    /// The last nonce given, which a login uses up (a second login needs a new one).
    pub fn take_nonce(&self) -> Option<String> {
        self.nonce.borrow_mut().take()
    }

    /// The connection turned out to speak RocketMQ's remoting protocol.
    pub fn mark_remoting(&self) {
        self.remoting.set(true);
    }

    pub fn speaks_remoting(&self) -> bool {
        self.remoting.get()
    }

    /// A number for the next request the broker sends on this connection.
    pub fn next_opaque(&self) -> i32 {
        let id = self.next_request_id.get();
        self.next_request_id.set(id + 1);
        id as i32
    }

    pub fn client_id(&self) -> Option<String> {
        self.client_id.borrow().clone()
    }

    /// The clustering consumer groups the client's latest heartbeat here declared.
    pub fn set_consumer_groups(&self, groups: Vec<String>) {
        if *self.consumer_groups.borrow() != groups {
            *self.consumer_groups.borrow_mut() = groups;
        }
    }

    pub fn consumer_groups(&self) -> Vec<String> {
        self.consumer_groups.borrow().clone()
    }

    /// Sends `command` to the client and waits (up to `timeout`) for its answer.
    pub async fn request(&self, command: Command, timeout: Duration) -> Result<Frame, BrokerError> {
        self.request_with_body(command, Bytes::new(), timeout).await
    }

    /// [`ClientConn::request`] with a body (a pushed reply's record).
    pub async fn request_with_body(
        &self,
        command: Command,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Frame, BrokerError> {
        if self.pending.borrow().len() >= CLIENT_REQUESTS_MAX {
            return Err(BrokerError::Busy(format!(
                "{CLIENT_REQUESTS_MAX} requests to client {} are already waiting",
                self.peer
            )));
        }
        let closed =
            || BrokerError::NotFound(format!("the connection of client {} closed", self.peer));
        let Some((out, queued)) = self.out.borrow().clone() else {
            return Err(closed());
        };
        let id = self.next_request_id.get();
        self.next_request_id.set(id + 1);
        let (tx, rx) = local_channel::new_bounded(1);
        self.pending.borrow_mut().insert(id, tx);
        queued.set(queued.get() + 1);
        let sent = out
            .send(crate::conn::request_to_client(
                Header::request(id, command),
                body,
            ))
            .await;
        drop(out);
        if sent.is_err() {
            self.pending.borrow_mut().remove(&id);
            return Err(closed());
        }
        let answer = crate::deadline::with_timeout(timeout, rx.recv()).await;
        self.pending.borrow_mut().remove(&id);
        self.answer_or_why(answer, timeout)
    }

    /// What became of a request to the client: its answer; its connection closed before it
    /// answered (`close` drops the waiting senders), a "not found"; or the timeout, "busy".
    fn answer_or_why<F>(
        &self,
        answer: Option<Option<F>>,
        timeout: Duration,
    ) -> Result<F, BrokerError> {
        match answer {
            Some(Some(frame)) => Ok(frame),
            Some(None) => Err(BrokerError::NotFound(format!(
                "the connection of client {} closed before it answered",
                self.peer
            ))),
            None => Err(BrokerError::Busy(format!(
                "client {} did not answer within {} ms",
                self.peer,
                timeout.as_millis()
            ))),
        }
    }

    /// The connection is closing: requests waiting for an answer fail at once, and no new
    /// one is sent.
    pub fn close(&self) {
        self.out.borrow_mut().take();
        self.pending.borrow_mut().clear();
        self.pending_remoting.borrow_mut().clear();
    }

    /// A frame the client sent that answers one of the broker's requests; a late or unknown
    /// one is dropped.
    pub fn answered(&self, frame: Frame) {
        if let Some(tx) = self.pending.borrow_mut().remove(&frame.header.request_id) {
            let _ = tx.try_send(frame);
        }
    }
    /// A remoting frame the client sent that answers one of the broker's requests; a late or
    /// unknown one is dropped.
    pub fn answered_remoting(&self, frame: remoting::Frame) {
        match self
            .pending_remoting
            .borrow_mut()
            .remove(&frame.command.opaque)
        {
            Some(tx) => {
                let _ = tx.try_send(frame);
            }
            None => {
                tracing::debug!(peer = %self.peer, opaque = frame.command.opaque, "a remoting response nobody waits for")
            }
        }
    }

    /// Sends a remoting request to the client and waits (up to `timeout`) for its answer.
    pub async fn request_remoting(
        &self,
        cmd: remoting::RemotingCommand,
        timeout: Duration,
    ) -> Result<remoting::Frame, BrokerError> {
        self.request_remoting_with_body(cmd, Bytes::new(), timeout)
            .await
    }

    /// [`ClientConn::request_remoting`] with a body (a pushed reply's message body).
    pub async fn request_remoting_with_body(
        &self,
        mut cmd: remoting::RemotingCommand,
        body: Bytes,
        timeout: Duration,
    ) -> Result<remoting::Frame, BrokerError> {
        if self.pending_remoting.borrow().len() >= CLIENT_REQUESTS_MAX {
            return Err(BrokerError::Busy(format!(
                "{CLIENT_REQUESTS_MAX} requests to client {} are already waiting",
                self.peer
            )));
        }
        let opaque = self.next_opaque();
        cmd.opaque = opaque;
        let (tx, rx) = local_channel::new_bounded(1);
        self.pending_remoting.borrow_mut().insert(opaque, tx);
        if !self.notify(cmd, body).await {
            self.pending_remoting.borrow_mut().remove(&opaque);
            return Err(BrokerError::NotFound(format!(
                "the connection of client {} closed",
                self.peer
            )));
        }
        let answer = crate::deadline::with_timeout(timeout, rx.recv()).await;
        self.pending_remoting.borrow_mut().remove(&opaque);
        self.answer_or_why(answer, timeout)
    }

    /// Sends a oneway remoting request to the client (nothing is waited for); false when
    /// the connection has closed.
    pub async fn notify(&self, cmd: remoting::RemotingCommand, body: Bytes) -> bool {
        let Some((out, queued)) = self.out.borrow().clone() else {
            return false;
        };
        queued.set(queued.get() + 1);
        let body = if body.is_empty() {
            crate::conn::Body::None
        } else {
            crate::conn::Body::Owned(vec![body])
        };
        out.send(Outgoing::remoting(cmd, body)).await.is_ok()
    }
}

/// The client connections one core serves, by connection id and by client id.
#[derive(Default)]
pub struct ClientConns {
    by_id: RefCell<HashMap<u64, Rc<ClientConn>>>,
    by_client: RefCell<HashMap<String, u64>>,
    /// The connections each producer group heartbeats on, newest last (transaction checks).
    producers: RefCell<HashMap<String, Vec<u64>>>,
    next: Cell<u64>,
}

/// Connections kept per producer group for transaction checks.
const PRODUCER_CONNS_MAX: usize = 64;

impl ClientConns {
    /// A new connection's id: the core in the top 16 bits, a count below.
    pub fn next_id(&self, core: u16) -> u64 {
        let n = self.next.get() + 1;
        self.next.set(n);
        (u64::from(core) << 48) | (n & ((1 << 48) - 1))
    }

    pub fn opened(&self, conn: Rc<ClientConn>) {
        self.by_id.borrow_mut().insert(conn.id, conn);
    }

    pub fn closed(&self, id: u64) {
        let removed = self.by_id.borrow_mut().remove(&id);
        if let Some(conn) = removed {
            conn.close();
            if let Some(client) = conn.client_id() {
                let mut by_client = self.by_client.borrow_mut();
                if by_client.get(&client) == Some(&id) {
                    // Another open connection of the client speaks for it now: a client
                    // with one connection left is still connected.
                    let other = self
                        .by_id
                        .borrow()
                        .values()
                        .find(|c| c.client_id.borrow().as_deref() == Some(client.as_str()))
                        .map(|c| c.id);
                    match other {
                        Some(other) => by_client.insert(client, other),
                        None => by_client.remove(&client),
                    };
                }
            }
        }
    }

    /// The connection `conn` speaks for `client_id` (its heartbeat said so); the latest
    /// connection of a client wins.
    pub fn identified(&self, conn: &ClientConn, client_id: &str) {
        if conn.client_id.borrow().as_deref() != Some(client_id) {
            *conn.client_id.borrow_mut() = Some(client_id.to_owned());
        }
        let mut by_client = self.by_client.borrow_mut();
        if by_client.get(client_id) != Some(&conn.id) {
            by_client.insert(client_id.to_owned(), conn.id);
        }
    }

    /// The connection `conn` speaks for a producer of `group` (its heartbeat said so).
    pub fn produces(&self, conn: &ClientConn, group: &str) {
        let mut producers = self.producers.borrow_mut();
        if producers.len() >= PRODUCER_CONNS_MAX * 16 && !producers.contains_key(group) {
            // Bounded: forget the groups whose connections have all closed.
            let by_id = self.by_id.borrow();
            producers.retain(|_, ids| ids.iter().any(|id| by_id.contains_key(id)));
        }
        let ids = producers.entry(group.to_owned()).or_default();
        if ids.last() == Some(&conn.id) {
            return;
        }
        ids.retain(|&id| id != conn.id);
        if ids.len() >= PRODUCER_CONNS_MAX {
            ids.remove(0);
        }
        ids.push(conn.id);
    }

    /// The open connections of producers of `group`, newest first.
    pub fn producers_of(&self, group: &str) -> Vec<Rc<ClientConn>> {
        let by_id = self.by_id.borrow();
        let mut producers = self.producers.borrow_mut();
        let Some(ids) = producers.get_mut(group) else {
            return Vec::new();
        };
        ids.retain(|id| by_id.contains_key(id));
        ids.iter()
            .rev()
            .filter_map(|id| by_id.get(id).cloned())
            .collect()
    }

    pub fn of_client(&self, client_id: &str) -> Option<Rc<ClientConn>> {
        let id = *self.by_client.borrow().get(client_id)?;
        self.by_id.borrow().get(&id).cloned()
    }
}
