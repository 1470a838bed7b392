//! Offset newtypes, one definition for every crate: a commit-log offset (bytes into one
//! shard's CommitLog) and a queue offset (entries into one ConsumeQueue) must never be
//! swapped.

use std::fmt;

/// A byte position in one shard's CommitLog; below [`crate::ids::LOCAL_OFFSET_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CommitLogOffset(pub u64);

/// A position in one queue's ConsumeQueue (a count of messages, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct QueueOffset(pub u64);

impl fmt::Display for QueueOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for CommitLogOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
