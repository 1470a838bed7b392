//! Offset newtypes: a commit-log offset (bytes into this shard's CommitLog) and a queue
//! offset (entries into one ConsumeQueue) must never be swapped.

/// Byte position in this shard's CommitLog; below `message::ids::LOCAL_OFFSET_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CommitLogOffset(pub u64);

/// Entry position in one ConsumeQueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct QueueOffset(pub u64);
