//! Each core's front end: its kernel ([`Core`]) and what only the front ends keep (the
//! connections and their limits, the clients by id, what RocketMQ clients told this core,
//! the ACL gate). It is the kernel's [`ClientLink`]: the kernel reaches a client through the
//! connection this front end serves.

use std::ops::Deref;
use std::rc::Rc;

use bytes::Bytes;
use glommio::net::TcpStream;
use protocol::{
    CheckTransaction, ClientRunningInfo, Command, CoreStatus, ResponseCode, TransactionState,
};
use remoting::codes::{request, response};
use remoting::RemotingCommand;

use broker_base::deadline::with_timeout;
use broker_base::tls::{accept, Bounds, Refused, Stream};
use broker_core::link::{ClientLink, LocalFuture};
use broker_core::lite::Evicted;
use broker_core::reply::ReplyPush;

use crate::access::Gate;
use crate::client_conn::{ClientConns, CLIENT_ANSWER_TIMEOUT};
use crate::connections::{ClosedFor, Connections};
use crate::core::Core;
use crate::error::BrokerError;

pub struct Front {
    pub core: Rc<Core>,
    /// The client connections this core keeps open, and why it closed others.
    pub connections: Connections,
    /// The same connections by id and client id, for requests to a client.
    pub clients: ClientConns,
    /// What RocketMQ clients told this core in their heartbeats, for the admin requests.
    pub rocketmq: crate::rocketmq::Seen,
    /// This core's copy of the ACL rules, the front door's (`acl_enable`).
    pub acl: Gate,
    /// The sessions of RocketMQ 5's gRPC clients with this core.
    pub grpc: crate::grpc::session::Sessions,
    /// The cluster routes this core asked the NameServer for lately.
    pub routes: crate::routes::RouteCache,
    /// Where its connections' tasks run (`crate::lanes`).
    pub lanes: crate::lanes::Lanes,
}

/// A front end serves requests by calling its kernel's handlers.
impl Deref for Front {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Front {
    /// `core`'s front end, set as its link to the clients.
    pub fn new(core: Rc<Core>, acl: Gate) -> Rc<Front> {
        let cfg = &core.shared.config;
        let connections = Connections::new(
            crate::connections::per_core_max(cfg.connections_max, core.shared.cores),
            crate::connections::per_core_max(cfg.connections_per_peer_max, core.shared.cores),
        );
        let lanes = crate::lanes::Lanes::new(cfg.connection_light_requests_max as usize);
        let front = Rc::new(Front {
            core,
            connections,
            clients: ClientConns::default(),
            rocketmq: Default::default(),
            acl,
            grpc: Default::default(),
            routes: Default::default(),
            lanes,
        });
        let link: Rc<dyn ClientLink> = front.clone();
        front.core.set_link(Rc::downgrade(&link));
        front
    }

    /// Pushes `reply` on this core's connection of `client_id`; false when it has none.
    async fn push_reply_here(
        &self,
        client_id: &str,
        reply: &ReplyPush,
    ) -> Result<bool, BrokerError> {
        let Some(conn) = self.clients.of_client(client_id) else {
            return Ok(false);
        };
        if conn.speaks_remoting() {
            let mut cmd = RemotingCommand::request(request::PUSH_REPLY_MESSAGE_TO_CLIENT, 0);
            let born = reply
                .born_host
                .map(|h| h.to_string())
                .unwrap_or_else(|| conn.peer.clone());
            let props = remoting::message::encode_properties(
                reply
                    .properties
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
            // ReplyMessageRequestHeader: every field the Java client reads.
            for (k, v) in [
                ("producerGroup", reply.producer_group.clone()),
                ("topic", reply.topic.clone()),
                (
                    "defaultTopic",
                    crate::topics::AUTO_CREATE_TOPIC_KEY.to_owned(),
                ),
                ("defaultTopicQueueNums", "4".to_owned()),
                ("queueId", reply.queue_id.max(0).to_string()),
                ("sysFlag", reply.sys_flag.to_string()),
                ("bornTimestamp", reply.born_timestamp_ms.to_string()),
                ("flag", reply.flag.to_string()),
                ("properties", props),
                ("reconsumeTimes", reply.reconsume_times.to_string()),
                ("unitMode", "false".to_owned()),
                ("bornHost", born),
                ("storeHost", self.store_host().to_string()),
                ("storeTimestamp", self.shared.clock.wall_ms().to_string()),
            ] {
                cmd.ext_fields.insert(k.to_owned(), v);
            }
            let answer = conn
                .request_remoting_with_body(
                    cmd,
                    reply.body.clone(),
                    crate::reply::PUSH_ANSWER_TIMEOUT,
                )
                .await?;
            if answer.command.code != response::SUCCESS {
                return Err(BrokerError::Busy(format!(
                    "push reply message to {client_id} failed: {}",
                    answer.command.remark.unwrap_or_default()
                )));
            }
        } else {
            let record = Bytes::from(reply.record()?);
            let answer = conn
                .request_with_body(
                    Command::PushReply,
                    record,
                    crate::reply::PUSH_ANSWER_TIMEOUT,
                )
                .await?;
            if answer.header.code != ResponseCode::Success as u16 {
                return Err(BrokerError::Busy(format!(
                    "push reply message to {client_id} failed: {}",
                    answer.header.remark
                )));
            }
        }
        Ok(true)
    }
}

impl ClientLink for Front {
    fn running_info(
        &self,
        client_id: &str,
    ) -> LocalFuture<'_, Option<Result<ClientRunningInfo, BrokerError>>> {
        let conn = self.clients.of_client(client_id);
        let client_id = client_id.to_owned();
        Box::pin(async move {
            let frame = match conn?
                .request(Command::ClientRunningInfo, CLIENT_ANSWER_TIMEOUT)
                .await
            {
                Ok(frame) => frame,
                Err(e) => return Some(Err(e)),
            };
            Some(match frame.header.command {
                Command::ClientRunningInfoResult(info) => Ok(info),
                other => Err(BrokerError::BadRequest(format!(
                    "client {client_id} answered {}: {}",
                    other.name(),
                    frame.header.remark
                ))),
            })
        })
    }

    fn connected(&self, client_id: &str) -> bool {
        self.clients.of_client(client_id).is_some()
    }

    fn push_reply<'a>(
        &'a self,
        client_id: &'a str,
        reply: &'a ReplyPush,
    ) -> LocalFuture<'a, Result<bool, BrokerError>> {
        Box::pin(self.push_reply_here(client_id, reply))
    }

    fn group_changed<'a>(&'a self, group: &'a str, members: &'a [String]) -> LocalFuture<'a, ()> {
        Box::pin(crate::rocketmq::notify_members(self, group, members))
    }

    fn lite_unsubscribed<'a>(&'a self, evicted: &'a Evicted) -> LocalFuture<'a, bool> {
        Box::pin(async move {
            // A v5 client hears it on its Telemetry stream, a remoting one (or a proxy) as
            // NOTIFY_UNSUBSCRIBE_LITE.
            if self
                .grpc
                .push_to(&evicted.client, crate::grpc::unsubscribe_lite(evicted))
            {
                return true;
            }
            crate::rocketmq::notify_unsubscribe_lite(self, evicted).await
        })
    }

    fn check_transaction(
        &self,
        check: CheckTransaction,
    ) -> LocalFuture<'_, Option<Option<TransactionState>>> {
        Box::pin(ask_producer(self, check))
    }

    fn fill_status(&self, s: &mut CoreStatus) {
        let c = &self.connections;
        s.connections_open = c.open() as u64;
        s.connections_max = c.max() as u64;
        s.connections_refused = c.closed(ClosedFor::Limit);
        s.connections_timed_out = c.closed(ClosedFor::Idle) + c.closed(ClosedFor::FrameDeadline);
        s.connections_bad_frames = c.closed(ClosedFor::BadFrame);
        s.connections_tls_refused =
            c.closed(ClosedFor::Plaintext) + c.closed(ClosedFor::TlsHandshake);
    }
}

/// On the core serving the connection: sends `check` to a producer of its group connected
/// here. `None`: none is; `Some(None)`: asked a RocketMQ client, which answers with
/// END_TRANSACTION (a v5 client: EndTransaction); `Some(Some(state))`: a native client's
/// answer.
async fn ask_producer(core: &Front, check: CheckTransaction) -> Option<Option<TransactionState>> {
    for conn in core.clients.producers_of(&check.producer_group) {
        if conn.speaks_remoting() {
            if crate::rocketmq::check_transaction(core, &conn, &check).await {
                return Some(None);
            }
            continue;
        }
        let mut native = check.clone();
        if native.record.len() > crate::transaction::NATIVE_CHECK_RECORD_MAX {
            native.record = crate::transaction::without_body(&native.record).unwrap_or_default();
        }
        match conn
            .request(
                Command::CheckTransaction(native),
                crate::client_conn::CLIENT_ANSWER_TIMEOUT,
            )
            .await
        {
            Ok(frame) => match frame.header.command {
                Command::TransactionStateResult(s) => return Some(Some(s)),
                other => {
                    tracing::debug!(peer = %conn.peer, "a transaction check answered {}", other.name());
                    return Some(Some(TransactionState::Unknown));
                }
            },
            Err(e) => tracing::debug!(peer = %conn.peer, "a transaction check failed: {e}"),
        }
    }
    // A v5 producer publishing the topic (its producers' group), answering with
    // EndTransaction.
    let command = crate::grpc::recover_command(core, &check)?;
    core.grpc
        .push_to_producer(&check.producer_group, command)
        .then_some(None)
}

/// Reads a plaintext client's first request and answers it with [`tls::PLAINTEXT_REFUSED`]
/// (see [`tls::refuse_plaintext`]): bounded in bytes there, in time by the caller.
async fn answer_plaintext(stream: &mut TcpStream) {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tls::refuse_plaintext(&buf) {
            tls::Refusal::NeedMore => {}
            tls::Refusal::Answer(a) => {
                if stream.write_all(&a).await.is_ok() {
                    let _ = stream.flush().await;
                }
                return;
            }
            tls::Refusal::Close => return,
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// [`accept`] on a client listener of `core`: a refusal is counted in the core's
/// connection stats (and logged at most once per interval) and yields `None`.
pub async fn accept_counted(
    core: &Front,
    stream: TcpStream,
    peer: &str,
    bounds: Bounds,
) -> Option<Stream> {
    match accept(&core.shared.tls.listener, stream, bounds).await {
        Ok(s) => Some(s),
        Err(Refused::Plaintext(mut stream)) => {
            // Its first request is answered with why, so the client can say so.
            with_timeout(bounds.handshake, answer_plaintext(&mut stream)).await;
            core.connections.count(ClosedFor::Plaintext, peer);
            None
        }
        Err(Refused::Timeout) => {
            core.connections
                .count_with(ClosedFor::TlsHandshake, peer, "no handshake in time");
            None
        }
        Err(Refused::Handshake(e)) => {
            core.connections
                .count_with(ClosedFor::TlsHandshake, peer, &e);
            None
        }
        Err(Refused::Closed) => None,
    }
}
