//! RocketMQ 5's clients' protocol, gRPC `apache.rocketmq.v2.MessagingService`, on every
//! broker port. The connection path reads the first bytes, tells HTTP/2 apart
//! (`remoting::detect`) and hands the socket to [`serve_grpc`], which runs the HTTP/2 server
//! ([`grpc_h2`]) on the connection's own core; each call is answered by [`MessagingService`]
//! through the same kernel handlers the remoting front end calls.
//!
//! - [`route`]: QueryRoute and QueryAssignment. Each core is a broker of its own in the
//!   route, at its direct port, so every later call reaches the core that owns its queue.
//! - [`send`]: SendMessage and EndTransaction: a v2 message becomes a stored record.
//! - [`session`]: Telemetry (the settings exchange, transaction checks pushed to producers),
//!   Heartbeat and NotifyClientTermination, and the sessions each core keeps.
//!
//! As RocketMQ's Proxy answers, the gRPC status of a call is OK whenever a response message
//! is sent; the outcome is the response's own `Status` ([`v2::Code`]). gRPC statuses are
//! for what is not a call of the service: an unknown method, a malformed message.

mod consume;
mod delivered;
mod offsets;
mod route;
mod send;
pub mod session;

pub(crate) use send::recover_command;
pub(crate) use session::unsubscribe_lite;

use std::net::SocketAddrV4;
use std::rc::Rc;

use broker_base::tls::Stream;
use bytes::Bytes;
use grpc_h2::{CallKind, Compat, Replies, Requests};
use grpc_proto::v2;
use grpc_proto::{Rpc, RpcKind};

use crate::admission::QuotaSeat;
use crate::error::BrokerError;
use crate::front::Front;
use acl::Action;

pub use grpc_h2::{Call, Code, GrpcStatus, Handler, Limits};

/// Serves gRPC on `stream` until the client goes away. `read_ahead` holds the bytes already
/// read from it (the HTTP/2 preface, at least in part); h2 reads them first. Runs on the
/// glommio executor of the calling core: the connection in this task, each call in a local
/// task of its own.
pub async fn serve_grpc<H: Handler>(
    stream: Stream,
    read_ahead: Bytes,
    peer: &str,
    handler: Rc<H>,
    limits: Limits,
) {
    // h2 writes small frames (WINDOW_UPDATE, headers, trailers) a peer waits for: Nagle's
    // delay would hold them until the peer's delayed ACK, tens of milliseconds.
    let _ = stream.tcp().set_nodelay(true);
    match grpc_h2::serve(Compat::with_prefix(stream, read_ahead), handler, limits).await {
        Ok(()) => tracing::debug!(%peer, "a gRPC client closed its connection"),
        Err(e) => tracing::debug!(%peer, "a gRPC connection ended: {e}"),
    }
}

/// What one connection's calls are answered with: the core's front end and the peer.
pub struct MessagingService {
    front: Rc<Front>,
    peer: String,
    peer_v4: Option<SocketAddrV4>,
    /// The account this connection is counted under by the `connections` quota, from its
    /// first send or receive.
    seat: QuotaSeat,
}

impl MessagingService {
    pub fn new(front: Rc<Front>, peer: String) -> MessagingService {
        let peer_v4 = match peer.parse() {
            Ok(std::net::SocketAddr::V4(a)) => Some(a),
            _ => None,
        };
        MessagingService {
            front,
            peer,
            peer_v4,
            seat: QuotaSeat::default(),
        }
    }

    /// Where the quotas count this connection (given back when it closes).
    pub fn quota_seat(&self) -> &QuotaSeat {
        &self.seat
    }

    /// The limits of a gRPC connection to `front`'s broker: a request message may be as long
    /// as the largest frame and its properties (`frame_bytes_max`, read at start, is above
    /// any `message_bytes_max` the broker may take while running; each send checks the one
    /// in force), and a connection idle for `connection_idle_timeout_ms` is closed, as a
    /// remoting one is.
    pub fn limits(front: &Front) -> Limits {
        let config = &front.shared.config;
        let max = config.frame_bytes_max.max(config.message_bytes_max) as usize;
        Limits {
            message_bytes_max: max.saturating_add(64 * 1024),
            idle_timeout: std::time::Duration::from_millis(config.connection_idle_timeout_ms),
            ..Limits::default()
        }
    }
}

/// The client id every call carries (`x-mq-client-id`).
pub(crate) fn client_id(call: &Call) -> Option<&str> {
    call.metadata
        .get("x-mq-client-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

/// How long the caller waits for the answer (`grpc-timeout`), when it says.
pub(crate) fn call_timeout(call: &Call) -> Option<std::time::Duration> {
    call.metadata
        .get("grpc-timeout")
        .and_then(|v| grpc_proto::status::parse_grpc_timeout(v.as_bytes()))
}

/// A response `Status`.
pub(crate) fn status(code: v2::Code, message: impl Into<String>) -> Option<v2::Status> {
    Some(v2::Status {
        code: code as i32,
        message: message.into(),
    })
}

pub(crate) fn ok() -> Option<v2::Status> {
    status(v2::Code::Ok, "OK")
}

/// The response code of a kernel error, as RocketMQ's Proxy maps its broker's answers.
pub(crate) fn code_of(e: &BrokerError) -> v2::Code {
    use v2::Code as C;
    match e {
        BrokerError::TopicNotExist(_) => C::TopicNotFound,
        BrokerError::QueueNotExist { .. } | BrokerError::BadRequest(_) => C::BadRequest,
        BrokerError::MessageIllegal(_) => C::BadRequest,
        BrokerError::MessageTooLarge { .. } => C::MessageBodyTooLarge,
        BrokerError::Busy(_) | BrokerError::ShuttingDown | BrokerError::Quota(_) => {
            C::TooManyRequests
        }
        BrokerError::NoPermission(_) => C::Forbidden,
        BrokerError::NotFound(_) => C::NotFound,
        BrokerError::SubscriptionNotExist { .. } => C::ConsumerGroupNotFound,
        BrokerError::FilterInvalid(_) | BrokerError::FilterDisabled => C::IllegalFilterExpression,
        BrokerError::Unsupported(_) => C::NotImplemented,
        BrokerError::NotRecallable(_) => C::BadRequest,
        BrokerError::LiteTopicQuota(_) => C::LiteTopicQuotaExceeded,
        BrokerError::LiteSubscriptionQuota(_) => C::LiteSubscriptionQuotaExceeded,
        BrokerError::FlushSlaveTimeout { .. } => C::SlavePersistenceTimeout,
        BrokerError::InSyncReplicasNotEnough(_) => C::HaNotAvailable,
        _ => C::InternalServerError,
    }
}

pub(crate) fn error_status(e: &BrokerError) -> Option<v2::Status> {
    status(code_of(e), e.to_string())
}

/// A protobuf time in milliseconds since the epoch.
pub(crate) fn timestamp_ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(t.nanos / 1_000_000))
}

/// The name of a `Resource` (namespaces are not kept apart: corvus has none).
pub(crate) fn name_of(r: &Option<v2::Resource>) -> &str {
    r.as_ref().map_or("", |r| r.name.as_str())
}

fn decode<M: prost::Message + Default>(rpc: Rpc, message: Bytes) -> Result<M, GrpcStatus> {
    M::decode(message).map_err(|e| {
        GrpcStatus::new(
            Code::InvalidArgument,
            format!("a malformed {} request: {e}", rpc.name()),
        )
    })
}

fn encoded(m: &impl prost::Message) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// Answers a request of type `$req` with `$body`'s response once the call names its client and
/// may do what the request needs (the ACL, [`Needs`]), or with the response `$refused` builds around the refusal.
macro_rules! unary {
    ($self:ident, $rpc:expr, $call:expr, $message:expr, $req:ty,
     |$client:ident, $r:ident| $body:expr, $refused:expr) => {{
        let $r: $req = decode($rpc, $message)?;
        match client_id(&$call) {
            None => Ok(encoded(&$refused(status(
                v2::Code::ClientIdRequired,
                "x-mq-client-id is required",
            )))),
            Some($client) => match $self
                .authorize(&$call, $rpc, &$r.needs())
                .and_then(|()| $self.admit_call(&$call, $rpc))
            {
                Err(refusal) => Ok(encoded(&$refused(refusal))),
                Ok(()) => Ok(encoded(&$body)),
            },
        }
    }};
}

impl MessagingService {
    /// Whether the call may do `actions` (with `acl_enable`; UNAUTHORIZED otherwise, as
    /// RocketMQ's Proxy answers both a failed signature and a missing permission).
    fn authorize(
        &self,
        call: &Call,
        rpc: Rpc,
        actions: &[Action<'_>],
    ) -> Result<(), Option<v2::Status>> {
        let meta = |k: &str| call.metadata.get(k).and_then(|v| v.to_str().ok());
        self.front
            .acl
            .check_grpc(
                &self.peer,
                meta("authorization"),
                meta("x-mq-date-time"),
                rpc.name(),
                actions,
            )
            .map_err(|e| status(v2::Code::Unauthorized, e.to_string()))
    }
}

/// What a request needs the ACL to allow.
trait Needs {
    fn needs(&self) -> Vec<Action<'_>>;
}

/// What reading `topic` for `group` needs.
/// The access key a call is signed with (`anonymous` without one), for the quotas.
fn account_of(call: &Call) -> String {
    call.metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(acl::sign::parse_grpc_authorization)
        .map_or_else(
            || broker_base::quota::ANONYMOUS.to_owned(),
            |a| a.access_key.to_owned(),
        )
}

impl MessagingService {
    /// The quota check of a unary call other than SendMessage (whose messages
    /// [`MessagingService::admit_send`] counts): one request of its account. Without
    /// quotas nothing is read of the call: every AckMessage of a consumer passes here.
    fn admit_call(&self, call: &Call, rpc: Rpc) -> Result<(), Option<v2::Status>> {
        if rpc == Rpc::SendMessage || self.front.config().quotas.is_empty() {
            return Ok(());
        }
        self.front
            .admit(&broker_core::quota::Ask::Other {
                account: &account_of(call),
            })
            .map_err(|e| error_status(&e))
    }

    /// The quota check of a ReceiveMessage or PullMessage call of `group` on `topic`: one
    /// pull, on a connection its account may hold.
    fn admit_pull(&self, call: &Call, topic: &str, group: &str) -> Result<(), BrokerError> {
        let account = account_of(call);
        self.front.admit_connection(&self.seat, &account)?;
        self.front.admit(&broker_core::quota::Ask::Pull {
            account: &account,
            topic,
            group,
        })
    }

    /// The quota check of a SendMessage call: its messages and their body bytes, per topic.
    fn admit_send(&self, call: &Call, r: &v2::SendMessageRequest) -> Result<(), BrokerError> {
        let account = account_of(call);
        self.front.admit_connection(&self.seat, &account)?;
        let topic = r.messages.first().map_or("", |m| name_of(&m.topic));
        self.front.admit(&broker_core::quota::Ask::Send {
            account: &account,
            topic,
            group: "",
            messages: r.messages.len() as u64,
            bytes: r.messages.iter().map(|m| m.body.len() as u64).sum(),
        })
    }
}

fn subscribe<'a>(
    topic: &'a Option<v2::Resource>,
    group: &'a Option<v2::Resource>,
) -> Vec<Action<'a>> {
    vec![Action::Subscribe {
        topic: name_of(topic),
        group: Some(name_of(group)),
    }]
}

/// What a client's own calls (heartbeats, leaving) need: its group's, when it names one.
fn member(group: &Option<v2::Resource>) -> Vec<Action<'_>> {
    match group.as_ref().filter(|g| !g.name.is_empty()) {
        Some(g) => vec![Action::Group { group: &g.name }],
        None => vec![Action::Info],
    }
}

macro_rules! needs {
    ($($t:ty: |$r:ident| $e:expr;)*) => {$(
        impl Needs for $t {
            fn needs(&self) -> Vec<Action<'_>> {
                let $r = self;
                $e
            }
        }
    )*};
}

needs! {
    v2::QueryRouteRequest: |r| vec![Action::Route { topic: name_of(&r.topic) }];
    v2::QueryAssignmentRequest: |r| subscribe(&r.topic, &r.group);
    v2::SendMessageRequest: |r| vec![Action::Publish {
        topic: r.messages.first().map_or("", |m| name_of(&m.topic)),
    }];
    v2::EndTransactionRequest: |r| vec![Action::Publish { topic: name_of(&r.topic) }];
    v2::HeartbeatRequest: |r| member(&r.group);
    v2::NotifyClientTerminationRequest: |r| member(&r.group);
    v2::AckMessageRequest: |r| subscribe(&r.topic, &r.group);
    v2::ChangeInvisibleDurationRequest: |r| subscribe(&r.topic, &r.group);
    v2::ForwardMessageToDeadLetterQueueRequest: |r| subscribe(&r.topic, &r.group);
    v2::UpdateOffsetRequest: |r| vec![Action::Group { group: name_of(&r.group) }];
    v2::GetOffsetRequest: |r| vec![Action::Group { group: name_of(&r.group) }];
    v2::QueryOffsetRequest: |_r| vec![Action::Info];
    v2::RecallMessageRequest: |r| vec![Action::Publish { topic: name_of(&r.topic) }];
    v2::SyncLiteSubscriptionRequest: |r| subscribe(&r.topic, &r.group);
}

impl Handler for MessagingService {
    fn kind(&self, path: &str) -> CallKind {
        match Rpc::from_path(path).map(Rpc::kind) {
            Some(RpcKind::ServerStreaming) => CallKind::ServerStreaming,
            Some(RpcKind::Bidirectional) => CallKind::Bidirectional,
            Some(RpcKind::Unary) | None => CallKind::Unary,
        }
    }

    async fn unary(&self, call: Call, message: Bytes) -> Result<Bytes, GrpcStatus> {
        broker_base::idle_poll::note_work();
        let Some(rpc) = Rpc::from_path(&call.path) else {
            return Err(GrpcStatus::new(
                Code::Unimplemented,
                format!(
                    "{} is not a method of {}",
                    call.path,
                    grpc_proto::MESSAGING_SERVICE
                ),
            ));
        };
        self.front.count_request();
        let f = &self.front;
        match rpc {
            Rpc::QueryRoute => unary!(
                self,
                rpc,
                call,
                message,
                v2::QueryRouteRequest,
                |_c, r| route::query_route(f, &r).await,
                |status| v2::QueryRouteResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::QueryAssignment => unary!(
                self,
                rpc,
                call,
                message,
                v2::QueryAssignmentRequest,
                |_c, r| route::query_assignment(f, &r).await,
                |status| v2::QueryAssignmentResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::SendMessage => unary!(
                self,
                rpc,
                call,
                message,
                v2::SendMessageRequest,
                |_c, r| match self.admit_send(&call, &r) {
                    Err(e) => v2::SendMessageResponse {
                        status: error_status(&e),
                        ..Default::default()
                    },
                    Ok(()) => send::send_message(f, self.peer_v4, r).await,
                },
                |status| v2::SendMessageResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::EndTransaction => unary!(
                self,
                rpc,
                call,
                message,
                v2::EndTransactionRequest,
                |_c, r| send::end_transaction(f, &r).await,
                |status| v2::EndTransactionResponse { status }
            ),
            Rpc::Heartbeat => unary!(
                self,
                rpc,
                call,
                message,
                v2::HeartbeatRequest,
                |c, r| session::heartbeat(f, c, &self.peer, &r).await,
                |status| v2::HeartbeatResponse { status }
            ),
            Rpc::NotifyClientTermination => unary!(
                self,
                rpc,
                call,
                message,
                v2::NotifyClientTerminationRequest,
                |c, r| session::terminated(f, c, &r).await,
                |status| v2::NotifyClientTerminationResponse { status }
            ),
            Rpc::AckMessage => unary!(
                self,
                rpc,
                call,
                message,
                v2::AckMessageRequest,
                |_c, r| consume::ack(f, &r).await,
                |status| v2::AckMessageResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::ChangeInvisibleDuration => unary!(
                self,
                rpc,
                call,
                message,
                v2::ChangeInvisibleDurationRequest,
                |_c, r| consume::change_invisible(f, &r).await,
                |status| v2::ChangeInvisibleDurationResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::ForwardMessageToDeadLetterQueue => unary!(
                self,
                rpc,
                call,
                message,
                v2::ForwardMessageToDeadLetterQueueRequest,
                |_c, r| consume::dead_letter(f, &r).await,
                |status| v2::ForwardMessageToDeadLetterQueueResponse { status }
            ),
            Rpc::UpdateOffset => unary!(
                self,
                rpc,
                call,
                message,
                v2::UpdateOffsetRequest,
                |c, r| offsets::update(f, c, &r).await,
                |status| v2::UpdateOffsetResponse { status }
            ),
            Rpc::GetOffset => unary!(
                self,
                rpc,
                call,
                message,
                v2::GetOffsetRequest,
                |_c, r| offsets::get(f, &r).await,
                |status| v2::GetOffsetResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::QueryOffset => unary!(
                self,
                rpc,
                call,
                message,
                v2::QueryOffsetRequest,
                |_c, r| offsets::query(f, &r).await,
                |status| v2::QueryOffsetResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::RecallMessage => unary!(
                self,
                rpc,
                call,
                message,
                v2::RecallMessageRequest,
                |_c, r| send::recall(f, &r).await,
                |status| v2::RecallMessageResponse {
                    status,
                    ..Default::default()
                }
            ),
            Rpc::SyncLiteSubscription => unary!(
                self,
                rpc,
                call,
                message,
                v2::SyncLiteSubscriptionRequest,
                |c, r| consume::sync_lite(f, c, &r).await,
                |status| v2::SyncLiteSubscriptionResponse { status }
            ),
            Rpc::ReceiveMessage | Rpc::PullMessage | Rpc::Telemetry => Err(GrpcStatus::new(
                Code::Internal,
                format!("{} is a streaming call", rpc.name()),
            )),
        }
    }

    async fn server_streaming(
        &self,
        call: Call,
        message: Bytes,
        replies: &mut Replies,
    ) -> Result<(), GrpcStatus> {
        let rpc = Rpc::from_path(&call.path);
        self.front.count_request();
        let status = match rpc {
            Some(rpc @ Rpc::ReceiveMessage) => {
                let r: v2::ReceiveMessageRequest = decode(rpc, message)?;
                let topic = r.message_queue.as_ref().and_then(|q| q.topic.clone());
                match client_id(&call) {
                    None => status(v2::Code::ClientIdRequired, "x-mq-client-id is required"),
                    Some(client) => {
                        match self.authorize(&call, rpc, &subscribe(&topic, &r.group)) {
                            Err(refusal) => refusal,
                            Ok(()) => {
                                match self.admit_pull(&call, name_of(&topic), name_of(&r.group)) {
                                    Err(e) => error_status(&e),
                                    Ok(()) => {
                                        let timeout = call_timeout(&call);
                                        return consume::receive(
                                            &self.front,
                                            client,
                                            r,
                                            timeout,
                                            replies,
                                        )
                                        .await;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Some(rpc @ Rpc::PullMessage) => {
                let r: v2::PullMessageRequest = decode(rpc, message)?;
                let topic = r.message_queue.as_ref().and_then(|q| q.topic.clone());
                match client_id(&call) {
                    None => status(v2::Code::ClientIdRequired, "x-mq-client-id is required"),
                    Some(_) => match self.authorize(&call, rpc, &subscribe(&topic, &r.group)) {
                        Err(refusal) => refusal,
                        Ok(()) => {
                            match self.admit_pull(&call, name_of(&topic), name_of(&r.group)) {
                                Err(e) => error_status(&e),
                                Ok(()) => {
                                    let timeout = call_timeout(&call);
                                    return offsets::pull(&self.front, r, timeout, replies).await;
                                }
                            }
                        }
                    },
                }
            }
            _ => {
                return Err(GrpcStatus::new(
                    Code::Unimplemented,
                    format!("{} is not a streaming method of this service", call.path),
                ))
            }
        };
        let reply = v2::ReceiveMessageResponse {
            content: Some(v2::receive_message_response::Content::Status(
                status.unwrap_or_default(),
            )),
        };
        replies.send(encoded(&reply)).await
    }

    async fn bidirectional(
        &self,
        call: Call,
        requests: &mut Requests,
        replies: &mut Replies,
    ) -> Result<(), GrpcStatus> {
        if Rpc::from_path(&call.path) != Some(Rpc::Telemetry) {
            return Err(GrpcStatus::new(
                Code::Unimplemented,
                format!(
                    "{} is not a bidirectional method of this service",
                    call.path
                ),
            ));
        }
        let Some(client) = client_id(&call) else {
            return Err(GrpcStatus::new(
                Code::InvalidArgument,
                "x-mq-client-id is required",
            ));
        };
        // The stream names no topic or group yet: the account must be one.
        if let Err(refusal) = self.authorize(&call, Rpc::Telemetry, &[Action::Info]) {
            let why = refusal.map_or_else(String::new, |s| s.message);
            return Err(GrpcStatus::new(Code::Unauthenticated, why));
        }
        let authorize = |actions: &[Action<'_>]| self.authorize(&call, Rpc::Telemetry, actions);
        session::telemetry(
            &self.front,
            client,
            &self.peer,
            &authorize,
            requests,
            replies,
        )
        .await
    }
}

/// The status of an RPC this broker does not serve yet: PullMessage and Lite Topics.
#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::AsyncReadExt;
    use glommio::net::{TcpListener, TcpStream};
    use grpc_h2::http::{Method, Request};
    use remoting::detect::{detect, Detected};

    struct Echo;

    impl Handler for Echo {
        async fn unary(&self, call: Call, message: Bytes) -> Result<Bytes, GrpcStatus> {
            Ok([call.path.as_bytes(), b" ", &message].concat().into())
        }
    }

    /// As the connection path will do it: read the first bytes, detect HTTP/2, hand the
    /// socket and those bytes over; a client's call is answered.
    #[test]
    fn a_detected_http2_connection_is_served_with_its_first_bytes() {
        shard::run_local(|| async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            glommio::spawn_local(async move {
                let mut stream = Stream::Plain(listener.accept().await.unwrap());
                let mut first = vec![0u8; 64];
                let mut n = 0;
                let detected = loop {
                    n += stream.read(&mut first[n..]).await.unwrap();
                    match detect(&first[..n]) {
                        Detected::NeedMore => continue,
                        d => break d,
                    }
                };
                assert!(matches!(detected, Detected::Http2));
                first.truncate(n);
                serve_grpc(
                    stream,
                    first.into(),
                    "test",
                    Rc::new(Echo),
                    Limits::default(),
                )
                .await;
            })
            .detach();

            let tcp = TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (client, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
                .await
                .unwrap();
            glommio::spawn_local(async move {
                let _ = conn.await;
            })
            .detach();
            let mut client = client.ready().await.unwrap();
            let request = Request::builder()
                .method(Method::POST)
                .uri("http://127.0.0.1/apache.rocketmq.v2.MessagingService/Heartbeat")
                .header("content-type", "application/grpc")
                .body(())
                .unwrap();
            let (response, mut send) = client.send_request(request, false).unwrap();
            send.send_data(grpc_h2::encode_message(b"hb").unwrap(), true)
                .unwrap();
            let (parts, mut body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                data.extend_from_slice(&chunk.unwrap());
            }
            let trailers = body.trailers().await.unwrap().unwrap();
            assert_eq!(trailers["grpc-status"], "0");
            let expected =
                grpc_h2::encode_message(b"/apache.rocketmq.v2.MessagingService/Heartbeat hb")
                    .unwrap();
            assert_eq!(data, expected);
        });
    }
}
