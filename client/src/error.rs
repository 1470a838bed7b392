//! The client's one error enum. Wire response codes appear only inside [`ClientError::Broker`].

use protocol::ResponseCode;

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

    /// The response code of a broker error, if this is one.
    pub fn code(&self) -> Option<ResponseCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
