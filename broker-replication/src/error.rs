//! What replication can fail with. The wire error codes of the front ends never appear here:
//! the kernel turns a refusal to serve into its own `NotMaster` answer.

use std::path::PathBuf;

/// A replication frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("empty frame")]
    Empty,
    #[error("frame ends early")]
    Short,
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame of {len} bytes (at most {max})")]
    TooLong { len: usize, max: usize },
    /// The connection failed while a frame was read.
    #[error("{0}")]
    Io(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A shard's epoch history (`epochs`) that cannot be read: the shard does not serve.
    #[error("{} {problem}", path.display())]
    History { path: PathBuf, problem: String },
    /// A master refuses a slave, or a slave its master: the reason, as the peer is told it.
    #[error("{0}")]
    Refused(String),
    /// This core takes no sends now: why (a slave, no lease, no word from the controllers).
    #[error("{0}")]
    NotServing(String),
}
