//! The broker's error enum. Wire response codes appear only at the edge ([`BrokerError::code`]).

use protocol::ResponseCode;

#[derive(Debug, Clone, thiserror::Error)]
pub enum BrokerError {
    #[error("topic `{0}` does not exist (auto-creation is off or the topic name is invalid)")]
    TopicNotExist(String),
    #[error("queue {queue_id} of topic `{topic}` does not exist (the topic has {queues} queues)")]
    QueueNotExist {
        topic: String,
        queue_id: u32,
        queues: u32,
    },
    #[error("message of {size} bytes exceeds max_message_size_bytes = {max}")]
    MessageTooLarge { size: u64, max: u64 },
    #[error("disk full: use ratio {ratio:.3} is above the refuse threshold {threshold:.3}; sends are refused until space returns")]
    DiskFull { ratio: f64, threshold: f64 },
    #[error("storage refused writes after an fsync failure: {0}")]
    Poisoned(String),
    #[error("system busy: {0}")]
    Busy(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("message illegal: {0}")]
    MessageIllegal(String),
    #[error("storage error: {0}")]
    Storage(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("broker is shutting down")]
    ShuttingDown,
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("queue is leased to another member of the group: {0}")]
    QueueLocked(String),
}

impl BrokerError {
    pub fn code(&self) -> ResponseCode {
        match self {
            BrokerError::TopicNotExist(_) => ResponseCode::TopicNotExist,
            BrokerError::QueueNotExist { .. } => ResponseCode::BadRequest,
            BrokerError::MessageTooLarge { .. } => ResponseCode::MessageTooLarge,
            BrokerError::DiskFull { .. } => ResponseCode::DiskFull,
            BrokerError::Poisoned(_) => ResponseCode::StoragePoisoned,
            BrokerError::Busy(_) => ResponseCode::SystemBusy,
            BrokerError::BadRequest(_) => ResponseCode::BadRequest,
            BrokerError::MessageIllegal(_) => ResponseCode::MessageIllegal,
            BrokerError::Storage(_) => ResponseCode::SystemError,
            BrokerError::NotFound(_) => ResponseCode::QueryNotFound,
            BrokerError::ShuttingDown => ResponseCode::ServiceNotAvailable,
            BrokerError::Unsupported(_) => ResponseCode::RequestCodeNotSupported,
            BrokerError::QueueLocked(_) => ResponseCode::QueueLocked,
        }
    }
}

impl From<shard::ShardError> for BrokerError {
    fn from(e: shard::ShardError) -> Self {
        use shard::ShardError as S;
        match e {
            S::DiskFull { ratio, threshold } => BrokerError::DiskFull { ratio, threshold },
            S::MessageTooLarge { size, max } => BrokerError::MessageTooLarge {
                size: size as u64,
                max: max as u64,
            },
            S::Poisoned { .. } => BrokerError::Poisoned(e.to_string()),
            S::BadRecord(r) => BrokerError::MessageIllegal(r.to_string()),
            S::TopicMismatch { .. } | S::CountMismatch { .. } | S::EmptyBatch => {
                BrokerError::MessageIllegal(e.to_string())
            }
            S::Closed => BrokerError::ShuttingDown,
            S::Busy { reason } => BrokerError::Busy(reason),
            other => BrokerError::Storage(other.to_string()),
        }
    }
}
