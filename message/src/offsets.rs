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

impl From<QueueOffset> for u64 {
    fn from(o: QueueOffset) -> u64 {
        o.0
    }
}

impl From<CommitLogOffset> for u64 {
    fn from(o: CommitLogOffset) -> u64 {
        o.0
    }
}

// Compared with plain numbers (a count, a literal in a test), never with each other.
macro_rules! compare_with_u64 {
    ($t:ty) => {
        impl PartialEq<u64> for $t {
            fn eq(&self, other: &u64) -> bool {
                self.0 == *other
            }
        }
        impl PartialOrd<u64> for $t {
            fn partial_cmp(&self, other: &u64) -> Option<std::cmp::Ordering> {
                self.0.partial_cmp(other)
            }
        }
    };
}
compare_with_u64!(QueueOffset);
compare_with_u64!(CommitLogOffset);

// An offset moves by a plain number, and two offsets of one kind are a distance apart.
macro_rules! arithmetic {
    ($t:ident) => {
        impl std::ops::Add<u64> for $t {
            type Output = $t;
            fn add(self, n: u64) -> $t {
                $t(self.0 + n)
            }
        }
        impl std::ops::Sub for $t {
            type Output = u64;
            fn sub(self, other: $t) -> u64 {
                self.0 - other.0
            }
        }
    };
}
arithmetic!(QueueOffset);
arithmetic!(CommitLogOffset);
