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
    #[error("message of {size} bytes exceeds message_bytes_max = {max}")]
    MessageTooLarge { size: u64, max: u64 },
    #[error("disk full: use ratio {ratio:.3} is above the refuse threshold {threshold:.3}; sends are refused until space returns")]
    DiskFull { ratio: f64, threshold: f64 },
    /// The shard's own message names the operation that failed (a data write, an
    /// fdatasync, a directory fsync, a segment creation) and its errno.
    #[error("storage refuses writes: {0}")]
    Poisoned(String),
    /// A file could not get its blocks (ENOSPC, or the free-space reserve): the message is
    /// the shard's, starting with "disk full". Sends succeed again once space returns.
    #[error("{0}")]
    NoSpace(String),
    /// A file could not be opened for lack of descriptors (EMFILE, ENFILE). Sends succeed
    /// again once descriptors are free.
    #[error("system busy: {0}")]
    TooManyOpenFiles(String),
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
    /// A send to a slave: it takes only its master's stream.
    #[error("not the master: {0}")]
    NotMaster(String),
    /// SYNC_MASTER: stored here (where, when known), not acknowledged by the replicas in
    /// time. RocketMQ answers it with the send result, status FLUSH_SLAVE_TIMEOUT.
    #[error("flush slave timeout: {reason}")]
    FlushSlaveTimeout {
        reason: String,
        stored: Option<Box<Appended>>,
    },
    /// SYNC_MASTER: refused before anything was written.
    #[error("in-sync replicas not enough: {0}")]
    InSyncReplicasNotEnough(String),
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A recall of a scheduled message refused: the handle is not valid here, or the
    /// message is not pending (delivered, or never sent here).
    #[error("cannot recall: {0}")]
    NotRecallable(String),
    /// A send that would create a lite topic past the broker's `lite_topics_max`
    /// (RocketMQ's LMQ_QUOTA_EXCEEDED, gRPC LITE_TOPIC_QUOTA_EXCEEDED).
    #[error("lite topic quota exceeded: {0}")]
    LiteTopicQuota(String),
    /// A lite subscription past the client's quota (LITE_SUBSCRIPTION_QUOTA_EXCEEDED).
    #[error("lite subscription quota exceeded: {0}")]
    LiteSubscriptionQuota(String),
    /// Refused by the ACL (the front door's ACL gate): what was refused, for whom.
    #[error("NO_PERMISSION: {0}")]
    NoPermission(String),
    /// A quota or admission limit was hit before any work was done: try again after
    /// `retry_after_ms` (RocketMQ's FLOW_CONTROL, gRPC TOO_MANY_REQUESTS).
    #[error("{0}")]
    Quota(Box<QuotaExceeded>),
    #[error("queue is leased to another member of the group: {0}")]
    QueueLocked(String),
    /// A SQL92 filter that does not parse.
    #[error("{0}")]
    FilterInvalid(#[from] message::sql92::Sql92Error),
    /// A SQL92 filter while `enable_property_filter` is off (RocketMQ's remark).
    #[error("The broker does not support consumer to filter message by SQL92 (enable_property_filter is off)")]
    FilterDisabled,
    /// A broken invariant of the broker itself (an answer of the wrong kind, a value that
    /// cannot be encoded): a bug, never the client's fault.
    #[error("internal error: {0}")]
    Internal(String),
    /// A RocketMQ pull with a SQL92 subscription the broker has no heartbeat for.
    #[error("the subscription of group `{group}` to `{topic}` is not known yet: heartbeat first")]
    SubscriptionNotExist { group: String, topic: String },
}

impl BrokerError {
    /// A SYNC_MASTER send stored here whose replicas did not acknowledge it in time.
    pub fn flush_slave_timeout(reason: String) -> BrokerError {
        BrokerError::FlushSlaveTimeout {
            reason,
            stored: None,
        }
    }

    pub fn code(&self) -> ResponseCode {
        match self {
            BrokerError::TopicNotExist(_) => ResponseCode::TopicNotExist,
            BrokerError::QueueNotExist { .. } => ResponseCode::BadRequest,
            BrokerError::MessageTooLarge { .. } => ResponseCode::MessageTooLarge,
            BrokerError::DiskFull { .. } => ResponseCode::DiskFull,
            BrokerError::Poisoned(_) => ResponseCode::StoragePoisoned,
            BrokerError::NoSpace(_) => ResponseCode::DiskFull,
            BrokerError::TooManyOpenFiles(_) => ResponseCode::SystemBusy,
            BrokerError::Busy(_) => ResponseCode::SystemBusy,
            BrokerError::BadRequest(_) => ResponseCode::BadRequest,
            BrokerError::MessageIllegal(_) => ResponseCode::MessageIllegal,
            BrokerError::Storage(_) | BrokerError::Internal(_) => ResponseCode::SystemError,
            BrokerError::NotFound(_) => ResponseCode::QueryNotFound,
            BrokerError::ShuttingDown => ResponseCode::ServiceNotAvailable,
            BrokerError::NotMaster(_) => ResponseCode::NotLeader,
            BrokerError::FlushSlaveTimeout { .. } => ResponseCode::FlushSlaveTimeout,
            BrokerError::InSyncReplicasNotEnough(_) => ResponseCode::InSyncReplicasNotEnough,
            BrokerError::Unsupported(_) => ResponseCode::RequestCodeNotSupported,
            BrokerError::NotRecallable(_)
            | BrokerError::LiteTopicQuota(_)
            | BrokerError::LiteSubscriptionQuota(_) => ResponseCode::BadRequest,
            BrokerError::NoPermission(_) => ResponseCode::NoPermission,
            BrokerError::QueueLocked(_) => ResponseCode::QueueLocked,
            BrokerError::Quota(_) => ResponseCode::FlowControl,
            BrokerError::FilterInvalid(_) => ResponseCode::SubscriptionParseFailed,
            BrokerError::FilterDisabled => ResponseCode::SystemError,
            BrokerError::SubscriptionNotExist { .. } => ResponseCode::SubscriptionNotExist,
        }
    }
}

/// Which limit refused a request, and when to try again: the remark every protocol carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// The limit's name as it is set: a config key (`connections_per_peer_max`) or a
    /// quota rule (`account:alice:send_messages_per_sec`).
    pub limit: String,
    /// Its value, with its unit.
    pub value: String,
    /// Who hit it (an account, a topic, a group, a peer address).
    pub who: String,
    /// When a retry may succeed, in ms from now.
    pub retry_after_ms: u64,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FLOW_CONTROL: quota {} = {} reached by {}; retry after {} ms",
            self.limit, self.value, self.who, self.retry_after_ms
        )
    }
}

impl BrokerError {
    /// The refusal for a quota that was hit.
    pub fn quota(q: QuotaExceeded) -> BrokerError {
        BrokerError::Quota(Box::new(q))
    }

    /// When a refused request may be tried again, if the refusal says.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            BrokerError::Quota(q) => Some(q.retry_after_ms),
            _ => None,
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
            S::NoSpace { .. } => BrokerError::NoSpace(e.to_string()),
            S::TooManyOpenFiles { .. } => BrokerError::TooManyOpenFiles(e.to_string()),
            S::BadRecord(r) => BrokerError::MessageIllegal(r.to_string()),
            // A delivery time that is not a number or lies past timer_max_delay_sec is the
            // message's fault, as RocketMQ says (MESSAGE_ILLEGAL, which clients do not retry).
            S::TopicMismatch { .. }
            | S::CountMismatch { .. }
            | S::EmptyBatch
            | S::BadTimer(_)
            | S::MixedTimerBatch => BrokerError::MessageIllegal(e.to_string()),
            S::Closed => BrokerError::ShuttingDown,
            S::Busy { reason } => BrokerError::Busy(reason),
            other => BrokerError::Storage(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortages_are_disk_full_or_busy_and_poison_names_its_operation() {
        let e = BrokerError::from(shard::ShardError::NoSpace {
            path: "/d/commitlog/00000000000004194304".into(),
            reason: "creating a CommitLog segment: No space left on device (os error 28)".into(),
        });
        assert_eq!(e.code(), ResponseCode::DiskFull);
        let text = e.to_string();
        assert!(text.starts_with("disk full"), "{text}");
        assert!(text.contains("os error 28"), "{text}");
        let e = BrokerError::from(shard::ShardError::TooManyOpenFiles {
            path: "/d/commitlog".into(),
            reason: "creating a CommitLog segment: Too many open files (os error 24)".into(),
        });
        assert_eq!(e.code(), ResponseCode::SystemBusy);
        assert!(e.to_string().contains("too many open files"), "{e}");
        let e = BrokerError::from(shard::ShardError::Poisoned {
            operation: "write".into(),
            reason: "Input/output error (os error 5)".into(),
        });
        assert_eq!(e.code(), ResponseCode::StoragePoisoned);
        let text = e.to_string();
        assert!(
            !text.contains("fsync"),
            "a failed write is not an fsync: {text}"
        );
        assert!(text.contains("failed write"), "{text}");
    }
}

/// Where a send's records were stored.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    pub shard: u16,
    pub first_queue_offset: message::offsets::QueueOffset,
    pub first_commit_log_offset: message::offsets::CommitLogOffset,
    /// Records stored.
    pub count: u32,
    /// The store timestamp of the records (a scheduled message is due counted from it).
    pub store_timestamp_ms: i64,
}
