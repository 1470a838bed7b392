//! The shard's one error enum. Wire codes live in the protocol crate, never here.

/// Everything the storage engine of one core can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A write or an fdatasync failed. The kernel may have dropped the dirty pages, so
    /// retrying could report success for data that is gone (fsyncgate): the shard refuses
    /// every further write until it is reopened and recovered from what is on disk.
    #[error("shard poisoned by a failed {operation}: {reason}; it refuses writes until reopened")]
    Poisoned { operation: String, reason: String },
    #[error(
        "disk full: use ratio {ratio:.3} is at or above the refuse-writes threshold {threshold:.3}"
    )]
    DiskFull { ratio: f64, threshold: f64 },
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge { size: usize, max: usize },
    #[error("bad record: {0}")]
    BadRecord(#[from] message::RecordError),
    #[error("record topic {found:?} does not match the append topic {expected:?}")]
    TopicMismatch { expected: String, found: String },
    #[error("an append needs at least one record")]
    EmptyBatch,
    #[error("the batch was said to hold {expected} records but holds {found}")]
    CountMismatch { expected: u32, found: u32 },
    #[error("invalid shard config: {0}")]
    Config(String),
    #[error("shard is closed")]
    Closed,
    #[error("commit-log offset {offset} would pass the per-shard limit {max}")]
    OffsetSpaceExhausted { offset: u64, max: u64 },
    #[error("corrupt data in {path}: {reason}")]
    Corrupt { path: String, reason: String },
    /// The tail ring (the shared-memory copy of the unwritten log) cannot be made or read.
    #[error("tail ring {path}: {reason}")]
    TailRing { path: String, reason: String },
    /// Too many acknowledged bytes are not yet safe on disk and none became safe within
    /// the wait: the send is refused (RocketMQ's SYSTEM_BUSY) rather than left to stall.
    #[error("busy: {reason}")]
    Busy { reason: String },
    /// `store.meta` and the shard directories disagree (one missing, or more shards than it
    /// says): starting would serve a silent subset of what was acknowledged, so the broker
    /// refuses, saying what is wrong and how to proceed.
    #[error("data directory {path} is inconsistent: {problem}. Refusing to start, since that would serve only part of the stored messages. To proceed: {remedy}")]
    StoreInconsistent {
        path: String,
        problem: String,
        remedy: String,
    },
}

pub(crate) fn glommio_io<T>(e: glommio::GlommioError<T>) -> std::io::Error {
    e.into()
}
