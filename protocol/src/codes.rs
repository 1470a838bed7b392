//! Stable response codes. RocketMQ's numbers where RocketMQ has the code (so a RocketMQ
//! front end can pass them through); ours from 1000. Never renumber, never reuse.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ResponseCode {
    Success = 0,
    SystemError = 1,
    SystemBusy = 2,
    RequestCodeNotSupported = 3,
    FlushDiskTimeout = 10,
    /// RocketMQ 4's answer of a SYNC_MASTER without a usable slave, after writing. corvus
    /// never writes and then answers this; it is here to decode RocketMQ peers.
    SlaveNotAvailable = 11,
    /// SYNC_MASTER: stored on the master, not acknowledged by its replicas in time. The
    /// message may or may not survive a failover.
    FlushSlaveTimeout = 12,
    MessageIllegal = 13,
    ServiceNotAvailable = 14,
    /// Refused by access control (RocketMQ's NO_PERMISSION); the remark says what.
    NoPermission = 16,
    TopicNotExist = 17,
    PullNotFound = 19,
    PullRetryImmediately = 20,
    PullOffsetMoved = 21,
    QueryNotFound = 22,
    /// A SQL92 filter expression that does not parse (the remark says where and why).
    SubscriptionParseFailed = 23,
    /// A RocketMQ pull names a SQL92 subscription the broker has not heard in a heartbeat.
    SubscriptionNotExist = 24,
    /// A quota or an admission limit was hit (RocketMQ's FLOW_CONTROL): the remark names
    /// the limit, its value and when to try again; nothing was done.
    FlowControl = 215,
    MessageTooLarge = 1001,
    DiskFull = 1002,
    NotLeader = 1003,
    BadFrame = 1004,
    StoragePoisoned = 1005,
    Timeout = 1006,
    BadRequest = 1007,
    QueueLocked = 1008,
    /// A NameServer asked for a heartbeat by a broker it does not know (it restarted, or
    /// dropped the broker): the broker registers in full.
    BrokerNotRegistered = 1009,
    /// SYNC_MASTER: fewer replicas are in sync than `min_in_sync_replicas`; nothing was
    /// written.
    InSyncReplicasNotEnough = 1010,
}

impl ResponseCode {
    pub const ALL: [ResponseCode; 28] = [
        ResponseCode::Success,
        ResponseCode::SystemError,
        ResponseCode::SystemBusy,
        ResponseCode::RequestCodeNotSupported,
        ResponseCode::FlushDiskTimeout,
        ResponseCode::SlaveNotAvailable,
        ResponseCode::FlushSlaveTimeout,
        ResponseCode::MessageIllegal,
        ResponseCode::ServiceNotAvailable,
        ResponseCode::TopicNotExist,
        ResponseCode::PullNotFound,
        ResponseCode::PullRetryImmediately,
        ResponseCode::PullOffsetMoved,
        ResponseCode::QueryNotFound,
        ResponseCode::MessageTooLarge,
        ResponseCode::DiskFull,
        ResponseCode::NotLeader,
        ResponseCode::BadFrame,
        ResponseCode::StoragePoisoned,
        ResponseCode::Timeout,
        ResponseCode::BadRequest,
        ResponseCode::QueueLocked,
        ResponseCode::BrokerNotRegistered,
        ResponseCode::InSyncReplicasNotEnough,
        ResponseCode::SubscriptionParseFailed,
        ResponseCode::SubscriptionNotExist,
        ResponseCode::NoPermission,
        ResponseCode::FlowControl,
    ];

    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// Unknown numbers (from a newer peer) map to `SystemError` rather than failing.
    pub fn from_u16(code: u16) -> ResponseCode {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.as_u16() == code)
            .unwrap_or(ResponseCode::SystemError)
    }

    /// A stable snake_case name, for logs, metrics labels and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ResponseCode::Success => "success",
            ResponseCode::SystemError => "system_error",
            ResponseCode::SystemBusy => "system_busy",
            ResponseCode::RequestCodeNotSupported => "request_code_not_supported",
            ResponseCode::FlushDiskTimeout => "flush_disk_timeout",
            ResponseCode::SlaveNotAvailable => "slave_not_available",
            ResponseCode::FlushSlaveTimeout => "flush_slave_timeout",
            ResponseCode::MessageIllegal => "message_illegal",
            ResponseCode::ServiceNotAvailable => "service_not_available",
            ResponseCode::NoPermission => "no_permission",
            ResponseCode::TopicNotExist => "topic_not_exist",
            ResponseCode::PullNotFound => "pull_not_found",
            ResponseCode::PullRetryImmediately => "pull_retry_immediately",
            ResponseCode::PullOffsetMoved => "pull_offset_moved",
            ResponseCode::QueryNotFound => "query_not_found",
            ResponseCode::SubscriptionParseFailed => "subscription_parse_failed",
            ResponseCode::SubscriptionNotExist => "subscription_not_exist",
            ResponseCode::FlowControl => "flow_control",
            ResponseCode::MessageTooLarge => "message_too_large",
            ResponseCode::DiskFull => "disk_full",
            ResponseCode::NotLeader => "not_leader",
            ResponseCode::BadFrame => "bad_frame",
            ResponseCode::StoragePoisoned => "storage_poisoned",
            ResponseCode::Timeout => "timeout",
            ResponseCode::BadRequest => "bad_request",
            ResponseCode::QueueLocked => "queue_locked",
            ResponseCode::BrokerNotRegistered => "broker_not_registered",
            ResponseCode::InSyncReplicasNotEnough => "in_sync_replicas_not_enough",
        }
    }

    /// Whether a producer may retry the same send on another queue or broker.
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ResponseCode::SystemBusy
                | ResponseCode::ServiceNotAvailable
                | ResponseCode::NotLeader
                | ResponseCode::Timeout
                | ResponseCode::DiskFull
                | ResponseCode::StoragePoisoned
                | ResponseCode::SystemError
                | ResponseCode::InSyncReplicasNotEnough
        )
    }
}

impl fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.as_u16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ResponseCode::ALL {
            assert!(seen.insert(c.as_u16()), "duplicate number {}", c.as_u16());
            assert_eq!(ResponseCode::from_u16(c.as_u16()), c);
        }
        assert_eq!(ResponseCode::from_u16(9999), ResponseCode::SystemError);
        // RocketMQ's numbers, fixed forever.
        assert_eq!(ResponseCode::TopicNotExist.as_u16(), 17);
        assert_eq!(ResponseCode::NoPermission.as_u16(), 16);
        assert_eq!(ResponseCode::PullOffsetMoved.as_u16(), 21);
    }
}
