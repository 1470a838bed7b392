//! The HTTP/2 server and the call dispatch.
//!
//! One call is one request stream: its headers are checked (`POST`, a `content-type` of
//! `application/grpc` or `application/grpc+...`), its body is read to its end within
//! [`Limits::message_bytes_max`] and must hold exactly one uncompressed gRPC message. A unary
//! call's answer goes back as HTTP/2 200, `content-type: application/grpc`, one message and
//! the `grpc-status` trailer; a server-streaming call's handler sends any number of messages
//! through [`Replies`], which waits for the client's flow-control window between them. A
//! refusal, or a handler's error before any message, is a trailers-only response (one
//! HEADERS frame with `grpc-status` and `grpc-message`, ending the stream); the connection's
//! other streams are not touched. A bidirectional call (RocketMQ's Telemetry) hands its
//! handler the request messages as they come ([`Requests`]) besides [`Replies`]; the two
//! directions are independent, so a handler may send while no request is pending.

use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncWrite};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderName, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};

use crate::compat::Compat;
use crate::status::{Code, GrpcStatus};

/// A gRPC message's prefix: one flag byte (1 = compressed) and the length, 4 bytes big-endian.
pub const MESSAGE_PREFIX_BYTES: usize = 5;

/// Replies at most this long are copied behind their prefix into one DATA frame; longer ones
/// go as two, the prefix and the payload as it is.
const COPY_REPLY_BYTES_MAX: usize = 16 * 1024;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");

/// What one connection may ask of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest request message (its payload, without the 5-byte prefix); a longer one is
    /// answered `RESOURCE_EXHAUSTED` as soon as its prefix arrives.
    pub message_bytes_max: usize,
    /// Request streams open at once on a connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS);
    /// it bounds the handler tasks one connection can have, and with `message_bytes_max` the
    /// request bytes it can have buffered: their product at worst.
    pub concurrent_streams_max: u32,
    /// The request headers of one stream, decoded (SETTINGS_MAX_HEADER_LIST_SIZE).
    pub header_list_bytes_max: u32,
    /// The flow-control window granted to each stream and to the connection: how much a
    /// client may send before the server has read it.
    pub window_bytes: u32,
    /// A connection whose peer sends nothing for this long (no call, no PING, no
    /// WINDOW_UPDATE) is closed with a GOAWAY: a peer that went away without closing (a
    /// partition, a host that died) does not hold its connection and its calls' state for
    /// ever. The v5 SDKs send a heartbeat every 10 s on each connection.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // The v5 SDKs' largest message body is 4 MiB; room for its properties around it.
            message_bytes_max: 5 * 1024 * 1024,
            concurrent_streams_max: 128,
            header_list_bytes_max: 16 * 1024,
            window_bytes: 1024 * 1024,
            // As RocketMQ closes an idle remoting channel.
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// A call's request headers.
#[derive(Debug)]
pub struct Call {
    /// `:path`, e.g. `/apache.rocketmq.v2.MessagingService/SendMessage`.
    pub path: String,
    /// The request headers: the gRPC metadata (`x-mq-client-id`, `authorization`, ...) and
    /// the HTTP/2 ones (`content-type`, `te`, `grpc-timeout`). `-bin` values are as sent
    /// (base64).
    pub metadata: HeaderMap,
}

/// Whether a call answers with one message or a stream of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Unary,
    ServerStreaming,
    Bidirectional,
}

/// Answers calls. One handler serves a connection; each call runs in its own local task on
/// the connection's core, so calls on one connection overlap.
pub trait Handler: 'static {
    /// How `path` is answered: [`Handler::unary`], [`Handler::server_streaming`] or
    /// [`Handler::bidirectional`].
    fn kind(&self, path: &str) -> CallKind {
        let _ = path;
        CallKind::Unary
    }

    /// The response message for `message`, the request message's payload, or the status the
    /// call ends with.
    fn unary(&self, call: Call, message: Bytes) -> impl Future<Output = Result<Bytes, GrpcStatus>>;

    /// Sends the response messages for `message` through `replies`; the call ends with the
    /// status returned, after the messages sent.
    fn server_streaming(
        &self,
        call: Call,
        message: Bytes,
        replies: &mut Replies,
    ) -> impl Future<Output = Result<(), GrpcStatus>> {
        let _ = (call, message, replies);
        async {
            Err(GrpcStatus::new(
                Code::Unimplemented,
                "this server answers no streaming calls",
            ))
        }
    }

    /// Reads the request messages from `requests` as they come and sends response messages
    /// through `replies`, in any order; the call ends with the status returned.
    fn bidirectional(
        &self,
        call: Call,
        requests: &mut Requests,
        replies: &mut Replies,
    ) -> impl Future<Output = Result<(), GrpcStatus>> {
        let _ = (call, requests, replies);
        async {
            Err(GrpcStatus::new(
                Code::Unimplemented,
                "this server answers no bidirectional calls",
            ))
        }
    }
}

/// Why a connection ended other than by the client closing it cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The HTTP/2 preface or the first SETTINGS exchange failed.
    #[error("HTTP/2 handshake: {0}")]
    Handshake(#[source] h2::Error),
    /// The connection failed: an I/O error or a protocol error by the peer.
    #[error("HTTP/2 connection: {0}")]
    Connection(#[source] h2::Error),
    /// The peer sent nothing for [`Limits::idle_timeout`]: the connection was closed.
    #[error("closed after {0:?} without a frame from the client")]
    Idle(Duration),
}

/// How long a connection closed for idleness is given to send its GOAWAY before it is
/// dropped: a peer that is gone never reads it.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// Serves gRPC on `io` until the client goes away: the HTTP/2 connection is polled by the
/// calling task, each request stream is answered by a task spawned on the current glommio
/// executor. Must run inside a glommio executor. A TCP socket under `io` wants `TCP_NODELAY`:
/// h2's small frames (WINDOW_UPDATE, trailers) otherwise wait out the peer's delayed ACK.
pub async fn serve<S, H>(io: Compat<S>, handler: Rc<H>, limits: Limits) -> Result<(), ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    H: Handler,
{
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.concurrent_streams_max)
        .max_header_list_size(limits.header_list_bytes_max)
        .initial_window_size(limits.window_bytes)
        .initial_connection_window_size(limits.window_bytes);
    let heard = io.heard();
    let mut conn = builder
        .handshake::<_, Bytes>(io)
        .await
        .map_err(ServeError::Handshake)?;
    loop {
        let quiet = heard.get().elapsed();
        if quiet >= limits.idle_timeout {
            conn.graceful_shutdown();
            // Bounded: `accept` ends once the GOAWAY is out and the open streams are done.
            let _ = glommio::timer::timeout(GOAWAY_GRACE, async {
                while let Some(Ok((request, respond))) = conn.accept().await {
                    glommio::spawn_local(answer(request, respond, handler.clone(), limits))
                        .detach();
                }
                Ok(())
            })
            .await;
            return Err(ServeError::Idle(limits.idle_timeout));
        }
        let left = limits.idle_timeout.saturating_sub(quiet);
        let next = futures_lite::future::or(async { Some(conn.accept().await) }, async {
            glommio::timer::sleep(left).await;
            None
        })
        .await;
        match next {
            // Time to look at the clock again.
            None => continue,
            Some(None) => return Ok(()),
            Some(Some(next)) => {
                let (request, respond) = next.map_err(ServeError::Connection)?;
                glommio::spawn_local(answer(request, respond, handler.clone(), limits)).detach();
            }
        }
    }
}

/// `payload` framed as one uncompressed gRPC message.
pub fn encode_message(payload: &[u8]) -> Result<Bytes, GrpcStatus> {
    let mut out = BytesMut::with_capacity(MESSAGE_PREFIX_BYTES + payload.len());
    out.put_u8(0);
    out.put_u32(message_len(payload.len())?);
    out.extend_from_slice(payload);
    Ok(out.freeze())
}

fn message_len(len: usize) -> Result<u32, GrpcStatus> {
    u32::try_from(len).map_err(|_| {
        GrpcStatus::new(
            Code::Internal,
            format!("a message of {len} bytes is too long for gRPC"),
        )
    })
}

/// One request stream, start to end.
async fn answer<H: Handler>(
    request: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    handler: Rc<H>,
    limits: Limits,
) {
    let (parts, body) = request.into_parts();
    let mut replies = Replies {
        state: State::Waiting(respond),
    };
    if parts.method != Method::POST {
        let status = GrpcStatus::new(
            Code::Unimplemented,
            format!("gRPC calls are POST, not {}", parts.method),
        );
        replies.refuse(StatusCode::METHOD_NOT_ALLOWED, &status);
        return;
    }
    let content_type = parts.headers.get(CONTENT_TYPE);
    if !content_type.is_some_and(is_grpc) {
        // As grpc-go answers it: 415 and INVALID_ARGUMENT.
        let shown = content_type.map_or("none".into(), |v| String::from_utf8_lossy(v.as_bytes()));
        let status = GrpcStatus::new(
            Code::InvalidArgument,
            format!("content-type {shown} is not application/grpc"),
        );
        replies.refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, &status);
        return;
    }
    let call = Call {
        path: parts.uri.path().to_owned(),
        metadata: parts.headers,
    };
    // `requests` lives until the answer is sent: its stream dropped earlier, h2 would cancel
    // the stream instead of ending it after the answer.
    let mut requests = Requests::new(body, &call.metadata, limits.message_bytes_max);
    let kind = handler.kind(&call.path);
    let message = match kind {
        CallKind::Bidirectional => Bytes::new(),
        CallKind::Unary | CallKind::ServerStreaming => match requests.only_message().await {
            Ok(m) => m,
            Err(status) => {
                replies.refuse(StatusCode::OK, &status);
                return;
            }
        },
    };
    let ended = match kind {
        CallKind::Unary => match handler.unary(call, message).await {
            Ok(reply) => replies.send(reply).await,
            Err(status) => Err(status),
        },
        CallKind::ServerStreaming => handler.server_streaming(call, message, &mut replies).await,
        CallKind::Bidirectional => {
            handler
                .bidirectional(call, &mut requests, &mut replies)
                .await
        }
    };
    replies.finish(ended.err().as_ref());
    drop(requests);
}

/// `application/grpc`, optionally with a `+subtype` or parameters.
fn is_grpc(v: &HeaderValue) -> bool {
    let v = v.as_bytes();
    v.strip_prefix(b"application/grpc")
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';')
}

/// The request messages of a call, as they arrive. Flow-control capacity is given back as
/// the data is taken, so the client can keep sending.
pub struct Requests {
    body: RecvStream,
    /// Bytes received and not yet handed out: at most one message and the start of the next.
    buf: BytesMut,
    /// The declared length of the message `buf` starts with, once its prefix is in.
    declared: Option<usize>,
    /// `grpc-encoding`, for the refusal of a compressed message.
    encoding: Option<HeaderValue>,
    message_bytes_max: usize,
    /// The client ended its side of the stream.
    ended: bool,
}

impl Requests {
    fn new(body: RecvStream, headers: &HeaderMap, message_bytes_max: usize) -> Requests {
        Requests {
            body,
            buf: BytesMut::new(),
            declared: None,
            encoding: headers.get(GRPC_ENCODING).cloned(),
            message_bytes_max,
            ended: false,
        }
    }

    /// The next request message; `None` once the client has ended its side of the stream.
    /// Cancel-safe: dropped while waiting, the next call goes on where it stopped, so it can
    /// be raced against other events.
    pub async fn next(&mut self) -> Option<Result<Bytes, GrpcStatus>> {
        loop {
            match self.take() {
                Ok(Some(m)) => return Some(Ok(m)),
                Ok(None) => {}
                Err(status) => return Some(Err(status)),
            }
            if self.ended {
                return match self.declared {
                    None if self.buf.is_empty() => None,
                    _ => Some(Err(self.cut_short())),
                };
            }
            match poll_fn(|cx| self.body.poll_data(cx)).await {
                None => self.ended = true,
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(GrpcStatus::new(
                        Code::Cancelled,
                        format!("the request stream failed: {e}"),
                    )));
                }
                Some(Ok(chunk)) => {
                    let _ = self.body.flow_control().release_capacity(chunk.len());
                    if self.buf.is_empty() && chunk.len() >= MESSAGE_PREFIX_BYTES {
                        // Usually the whole message: kept without a copy until more arrives.
                        self.buf = BytesMut::from(chunk);
                    } else {
                        self.buf.extend_from_slice(&chunk);
                    }
                }
            }
        }
    }

    /// A whole message at the start of `buf`, if one is there.
    fn take(&mut self) -> Result<Option<Bytes>, GrpcStatus> {
        if self.declared.is_none() && self.buf.len() >= MESSAGE_PREFIX_BYTES {
            let len = check_prefix(&self.buf, self.encoding.as_ref(), self.message_bytes_max)?;
            self.buf
                .reserve((MESSAGE_PREFIX_BYTES + len).saturating_sub(self.buf.len()));
            self.declared = Some(len);
        }
        match self.declared {
            Some(len) if self.buf.len() >= MESSAGE_PREFIX_BYTES + len => {
                self.declared = None;
                let message = self.buf.split_to(MESSAGE_PREFIX_BYTES + len).freeze();
                Ok(Some(message.slice(MESSAGE_PREFIX_BYTES..)))
            }
            _ => Ok(None),
        }
    }

    fn cut_short(&self) -> GrpcStatus {
        match self.declared {
            Some(len) => GrpcStatus::new(
                Code::Internal,
                format!(
                    "the request ended {} bytes into a message of {len}",
                    self.buf.len() - MESSAGE_PREFIX_BYTES
                ),
            ),
            None => GrpcStatus::new(
                Code::Internal,
                "the request ended inside a message's prefix",
            ),
        }
    }

    /// The one message a unary or server-streaming request carries, read to the end of the
    /// stream.
    async fn only_message(&mut self) -> Result<Bytes, GrpcStatus> {
        let first = match self.next().await {
            Some(first) => first?,
            None => {
                return Err(GrpcStatus::new(
                    Code::Internal,
                    "the request ended without a message",
                ))
            }
        };
        match self.next().await {
            None => Ok(first),
            Some(Err(status)) => Err(status),
            Some(Ok(_)) => Err(GrpcStatus::new(
                Code::Unimplemented,
                "a unary call carries one request message, this one has more",
            )),
        }
    }
}

/// The declared length of the message `buf` starts with, if it may be read.
fn check_prefix(
    buf: &[u8],
    encoding: Option<&HeaderValue>,
    message_bytes_max: usize,
) -> Result<usize, GrpcStatus> {
    match buf[0] {
        0 => {}
        1 => {
            let encoding =
                encoding.map_or("none".into(), |v| String::from_utf8_lossy(v.as_bytes()));
            return Err(GrpcStatus::new(
                Code::Unimplemented,
                format!("compressed messages (grpc-encoding {encoding}) are not supported"),
            ));
        }
        flag => {
            return Err(GrpcStatus::new(
                Code::Internal,
                format!("a message's flag byte is {flag}, not 0 or 1"),
            ))
        }
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > message_bytes_max {
        return Err(GrpcStatus::new(
            Code::ResourceExhausted,
            format!("a request message of {len} bytes is over the {message_bytes_max} allowed"),
        ));
    }
    Ok(len)
}

/// The answer side of one call: the response headers go with the first message, the
/// trailers at the end; with no message sent, one trailers-only HEADERS frame.
pub struct Replies {
    state: State,
}

enum State {
    /// Nothing sent yet.
    Waiting(SendResponse<Bytes>),
    /// The headers went out; messages may follow.
    Open(SendStream<Bytes>),
    /// Ended, or the stream is gone.
    Done,
}

impl Replies {
    /// Sends one response message once the client's flow-control window has room, so a
    /// stream of messages is held back by a client that does not read (h2 buffers at most
    /// the one message over the window).
    pub async fn send(&mut self, payload: Bytes) -> Result<(), GrpcStatus> {
        let closed = || GrpcStatus::new(Code::Cancelled, "the client closed the call");
        if let State::Waiting(_) = self.state {
            self.start();
        }
        let State::Open(stream) = &mut self.state else {
            return Err(closed());
        };
        stream.reserve_capacity(1);
        while stream.capacity() == 0 {
            match poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    self.state = State::Done;
                    return Err(closed());
                }
            }
        }
        let sent = if payload.len() <= COPY_REPLY_BYTES_MAX {
            stream.send_data(encode_message(&payload)?, false)
        } else {
            let mut prefix = BytesMut::with_capacity(MESSAGE_PREFIX_BYTES);
            prefix.put_u8(0);
            prefix.put_u32(message_len(payload.len())?);
            stream
                .send_data(prefix.freeze(), false)
                .and_then(|()| stream.send_data(payload, false))
        };
        sent.map_err(|e| {
            tracing::debug!("cannot send a gRPC response message: {e}");
            self.state = State::Done;
            closed()
        })
    }

    /// Sends the response headers.
    fn start(&mut self) {
        let State::Waiting(respond) = &mut self.state else {
            return;
        };
        let response = grpc_response(StatusCode::OK);
        self.state = match respond.send_response(response, false) {
            Ok(stream) => State::Open(stream),
            Err(e) => {
                tracing::debug!("cannot answer a gRPC call: {e}");
                State::Done
            }
        };
    }

    /// Ends the call at once with `status`, an HTTP status other than 200 if the request was
    /// not a gRPC call.
    fn refuse(&mut self, http_status: StatusCode, status: &GrpcStatus) {
        let State::Waiting(respond) = &mut self.state else {
            return;
        };
        let mut response = grpc_response(http_status);
        put_status(response.headers_mut(), status);
        if let Err(e) = respond.send_response(response, true) {
            tracing::debug!("cannot answer a gRPC call: {e}");
        }
        self.state = State::Done;
    }

    /// Ends the call with `status`, OK when `None`.
    fn finish(&mut self, status: Option<&GrpcStatus>) {
        let ok = GrpcStatus::new(Code::Ok, "");
        match &mut self.state {
            State::Waiting(_) => self.refuse(StatusCode::OK, status.unwrap_or(&ok)),
            State::Open(stream) => {
                let mut trailers = HeaderMap::new();
                put_status(&mut trailers, status.unwrap_or(&ok));
                if let Err(e) = stream.send_trailers(trailers) {
                    tracing::debug!("cannot end a gRPC call: {e}");
                }
                self.state = State::Done;
            }
            State::Done => {}
        }
    }
}

fn put_status(headers: &mut HeaderMap, status: &GrpcStatus) {
    headers.insert(
        GRPC_STATUS,
        HeaderValue::from_static(status.code.header_value()),
    );
    if !status.message.is_empty() {
        headers.insert(GRPC_MESSAGE, status.message_header());
    }
}

/// The head of every answer: `http_status`, gRPC's content type, and no compression.
fn grpc_response(http_status: StatusCode) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = http_status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, APPLICATION_GRPC);
    headers.insert(GRPC_ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        for ok in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in ["application/json", "application/grpcx", "text/plain", ""] {
            assert!(!is_grpc(&HeaderValue::from_static(bad)), "{bad}");
        }
    }

    #[test]
    fn messages_are_prefixed_with_flag_and_big_endian_length() {
        let m = encode_message(b"abc").unwrap();
        assert_eq!(&m[..], &[0, 0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
