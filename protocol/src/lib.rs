//! The native wire protocol.
//!
//! A frame is
//!
//! ```text
//! u32 BE frame_len   (4 + header_len + body_len; excludes itself)
//! u32 BE header_len
//! header             rkyv archive of [`Header`], validated (checked access) before use
//! body               raw bytes: records for sends and pulls, empty otherwise
//! ```
//!
//! Every request carries a `request_id` that its response echoes, so many requests can be in
//! flight on one connection and answered out of order. Response codes ([`ResponseCode`]) are
//! stable numbers: RocketMQ's where RocketMQ has one, ours from 1000 up; a number is never
//! reused.
//!
//! Nothing here does I/O beyond the generic blocking helpers in [`blocking`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod allocate;
pub mod blocking;
mod codec;
mod codes;
pub mod core_view;
pub mod fuzzing;
mod messages;
mod topic_body;

pub use codec::{
    decode_complete, encode_frame, encode_frame_prefix, Decoded, Frame, FrameDecoder,
    FRAME_PREFIX_BYTES,
};
pub use codes::ResponseCode;
pub use messages::*;
pub use topic_body::{
    decode_topic_body, decode_topic_names, encode_topic_body, encode_topic_names,
    TOPIC_BODY_BYTES_MAX,
};

/// Default limit on a whole frame: a 4 MiB message plus room for batching and headers.
pub const FRAME_BYTES_MAX_DEFAULT: u32 = 16 * 1024 * 1024;
/// Limit on the rkyv header of a frame; headers are small, a large one is an attack or a bug.
pub const HEADER_BYTES_MAX: u32 = 1024 * 1024;

/// Header flag: this frame is a response.
pub const FLAG_RESPONSE: u32 = 1;
/// Header flag: the sender expects no response.
pub const FLAG_ONEWAY: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: u64, max: u32 },
    #[error("frame header of {len} bytes is invalid (frame is {frame_len} bytes, header limit {HEADER_BYTES_MAX})")]
    BadHeaderLength { len: u32, frame_len: u32 },
    #[error("frame header failed validation: {0}")]
    BadHeader(String),
    #[error("cannot encode header: {0}")]
    Encode(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The owning shard of a (topic, queue): a pure function of the topic, the queue and the
/// shard count, shared by the broker and the client so that both agree without asking.
/// Queues of one topic land on consecutive shards, spreading a topic over all cores.
pub fn queue_owner_shard(topic: &str, queue_id: u32, shard_count: u16) -> u16 {
    if shard_count == 0 {
        return 0;
    }
    let base = fnv1a32(topic.as_bytes()) as u64;
    ((base + queue_id as u64) % shard_count as u64) as u16
}

/// The core that hosts a shard when the broker runs `cores` executors. A data directory's
/// shard count is fixed at creation; a broker restarted with fewer cores hosts several shards
/// per core.
pub fn shard_core(shard: u16, cores: u16) -> u16 {
    if cores == 0 {
        0
    } else {
        shard % cores
    }
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_is_stable_and_spreads_queues() {
        assert_eq!(
            queue_owner_shard("TopicTest", 0, 2),
            queue_owner_shard("TopicTest", 0, 2)
        );
        let owners: Vec<u16> = (0..4)
            .map(|q| queue_owner_shard("TopicTest", q, 2))
            .collect();
        assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
        assert_eq!(queue_owner_shard("T", 5, 1), 0);
        assert_eq!(shard_core(3, 2), 1);
        assert_eq!(shard_core(3, 4), 3);
    }
}
