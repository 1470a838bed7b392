//! Offset newtypes: one definition for every crate, in `message::offsets`.

pub use message::offsets::{CommitLogOffset, QueueOffset};
