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
    /// A file could not get the blocks it needs (ENOSPC, EDQUOT, or less free than
    /// `disk_reserve_bytes` would leave). Not poison: nothing was lost, appends are refused
    /// while it lasts, and the shard tries again by itself.
    #[error("disk full: {reason} ({path}); sends are refused until space returns")]
    NoSpace { path: String, reason: String },
    /// A file could not be opened for lack of descriptors (EMFILE, ENFILE). Not poison:
    /// appends are refused while it lasts, and the shard tries again by itself.
    #[error(
        "too many open files: {reason} ({path}); sends are refused until descriptors are free"
    )]
    TooManyOpenFiles { path: String, reason: String },
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
    #[error(
        "the batch mixes scheduled (DELAY or TIMER_*) and immediate messages; send them apart"
    )]
    MixedTimerBatch,
    #[error("scheduled message refused: {0}")]
    BadTimer(#[from] message::timer::TimerError),
    #[error("the batch was said to hold {expected} records but holds {found}")]
    CountMismatch { expected: u32, found: u32 },
    #[error("invalid shard config: {0}")]
    Config(String),
    /// Replication: bytes a slave cannot take where they were sent, or a range a master
    /// cannot send; the message says which.
    #[error("replication: {0}")]
    Replica(String),
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

impl ShardError {
    /// Whether this is a shortage (space or descriptors) that goes away by itself, as
    /// opposed to poison or a bad request.
    pub fn is_shortage(&self) -> bool {
        matches!(
            self,
            ShardError::NoSpace { .. } | ShardError::TooManyOpenFiles { .. }
        )
    }

    /// A copy of a shortage error, to report it to every append while it lasts.
    pub(crate) fn shortage_copy(&self) -> Option<ShardError> {
        match self {
            ShardError::NoSpace { path, reason } => Some(ShardError::NoSpace {
                path: path.clone(),
                reason: reason.clone(),
            }),
            ShardError::TooManyOpenFiles { path, reason } => Some(ShardError::TooManyOpenFiles {
                path: path.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }
    }

    /// Classifies an error met while `doing` something that takes new blocks or a new
    /// descriptor for `path`: ENOSPC and EDQUOT are [`ShardError::NoSpace`], EMFILE and
    /// ENFILE [`ShardError::TooManyOpenFiles`]; anything else stays an I/O error, with what
    /// was being done and the path in its message.
    pub(crate) fn making_room(path: &std::path::Path, doing: &str, e: std::io::Error) -> Self {
        let path_s = path.display().to_string();
        let reason = format!("{doing}: {e}");
        // glommio hands its failures over as io::Errors without the OS code (the code is
        // only in the text) but with its kind: a fallocate refused for space must be the
        // same shortage as a check that saw the disk full, never poison.
        let no_space = matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            || matches!(
                e.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            );
        let no_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        match () {
            () if no_space => ShardError::NoSpace {
                path: path_s,
                reason,
            },
            () if no_files => ShardError::TooManyOpenFiles {
                path: path_s,
                reason,
            },
            () => ShardError::Io(std::io::Error::new(
                e.kind(),
                format!("{reason} ({path_s})"),
            )),
        }
    }
}

pub(crate) fn glommio_io<T>(e: glommio::GlommioError<T>) -> std::io::Error {
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glommio's errors carry the OS code only in their text: a space refusal is told by
    /// its kind, and is a shortage (refused sends), not an I/O failure (poison).
    #[test]
    fn a_space_refusal_without_its_os_code_is_a_shortage() {
        let path = std::path::Path::new("/data/x");
        let from_os = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let wrapped = std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "No space left on device (os error 28), op: Pre-allocate space",
        );
        for e in [from_os, wrapped] {
            assert!(
                matches!(
                    ShardError::making_room(path, "creating", e),
                    ShardError::NoSpace { .. }
                ),
                "a space refusal is NoSpace"
            );
        }
        let other = std::io::Error::other("bad sector");
        assert!(matches!(
            ShardError::making_room(path, "creating", other),
            ShardError::Io(_)
        ));
    }
}
