//! The client's one error enum. Wire response codes appear only inside [`ClientError::Broker`].

use std::time::Duration;

use protocol::{Header, ResponseCode};

#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("request to {addr} timed out after {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    /// A request of request-reply ([`crate::Producer::request`]) was sent but no reply came
    /// within its timeout.
    #[error("no reply to the request on topic {topic} (correlation id {correlation_id}) within {timeout_ms} ms")]
    RequestTimeout {
        topic: String,
        correlation_id: String,
        timeout_ms: u64,
    },
    #[error("{addr} answered {code}: {remark}")]
    Broker {
        addr: String,
        code: ResponseCode,
        remark: String,
        /// When a retry may succeed, in ms from the answer, when the broker said (a quota
        /// or admission refusal); see [`ClientError::retry_after`].
        retry_after_ms: Option<u64>,
    },
    #[error("no route for topic {topic} (does the topic exist, and is a broker serving it?)")]
    NoRoute { topic: String },
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("i/o with {addr}: {detail}")]
    Io {
        addr: String,
        kind: std::io::ErrorKind,
        detail: String,
    },
    #[error("connection to {addr} is closed: {reason}")]
    ConnectionClosed { addr: String, reason: String },
    #[error("protocol error from {addr}: {detail}")]
    Protocol { addr: String, detail: String },
    #[error("no name server answered ({tried} tried); last error: {last}")]
    NoNameServer { tried: usize, last: String },
    #[error("invalid message: {0}")]
    InvalidMessage(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the client has been shut down")]
    Shutdown,
}

impl ClientError {
    /// Whether a send may be retried on another queue or broker: a retriable broker code
    /// (busy, not leader, disk full, ...), a timeout or a broken connection.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Timeout { .. }
            | ClientError::Io { .. }
            | ClientError::ConnectionClosed { .. } => true,
            ClientError::Broker { code, .. } => code.is_retriable(),
            _ => false,
        }
    }

    /// Whether the failure says the connection or its peer is gone, so the route may be stale.
    pub(crate) fn is_connection_failure(&self) -> bool {
        matches!(
            self,
            ClientError::Timeout { .. }
                | ClientError::Io { .. }
                | ClientError::ConnectionClosed { .. }
        )
    }

    pub(crate) fn io(addr: &str, e: &std::io::Error) -> ClientError {
        ClientError::Io {
            addr: addr.to_owned(),
            kind: e.kind(),
            detail: e.to_string(),
        }
    }

    /// The broker error an error response stands for.
    pub(crate) fn broker(addr: &str, header: Header) -> ClientError {
        ClientError::Broker {
            addr: addr.to_owned(),
            code: header.response_code(),
            retry_after_ms: header.retry_after_ms(),
            remark: header.remark,
        }
    }

    /// How long to wait before trying a refused request again, when the broker said: a
    /// quota or admission refusal (`FlowControl`) carries it, its remark names the limit.
    /// The producer does not retry such a refusal itself; it is the caller's to wait.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Broker {
                retry_after_ms: Some(ms),
                ..
            } => Some(Duration::from_millis(*ms)),
            _ => None,
        }
    }

    /// The response code of a broker error, if this is one.
    pub fn code(&self) -> Option<ResponseCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
