//! A broker's topic table as a registration carries it: in the frame's body, zstd over an
//! rkyv archive, so that tens of thousands of topics fit (as a header, about 7,000-9,800
//! topics passed the 1 MiB header limit and the broker fell out of every route). RocketMQ
//! compresses its registration body too.

use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};

use crate::{ProtocolError, TopicConfig};

/// The most a topic table body may decompress to: about a million topics.
pub const TOPIC_BODY_BYTES_MAX: usize = 64 << 20;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct TopicTable {
    topics: Vec<TopicConfig>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct TopicNames {
    names: Vec<String>,
}

fn compress(raw: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    zstd::bulk::compress(raw, 3).map_err(ProtocolError::Io)
}

/// Decompresses within [`TOPIC_BODY_BYTES_MAX`] into an aligned buffer for rkyv.
fn decompress(body: &[u8]) -> Result<AlignedVec<16>, ProtocolError> {
    let raw = zstd::bulk::decompress(body, TOPIC_BODY_BYTES_MAX).map_err(|e| bad(&e))?;
    let mut aligned = AlignedVec::<16>::with_capacity(raw.len());
    aligned.extend_from_slice(&raw);
    Ok(aligned)
}

fn bad(e: &dyn std::fmt::Display) -> ProtocolError {
    ProtocolError::BadHeader(format!("topic table body: {e}"))
}

/// The body of a registration carrying `topics`.
pub fn encode_topic_body(topics: &[TopicConfig]) -> Result<Vec<u8>, ProtocolError> {
    let table = TopicTable {
        topics: topics.to_vec(),
    };
    let raw = rkyv::to_bytes::<rkyv::rancor::Error>(&table)
        .map_err(|e| ProtocolError::Encode(e.to_string()))?;
    compress(&raw)
}

/// The topics of a registration body: decompressed within [`TOPIC_BODY_BYTES_MAX`] and
/// validated (rkyv checked access) before use.
pub fn decode_topic_body(body: &[u8]) -> Result<Vec<TopicConfig>, ProtocolError> {
    rkyv::from_bytes::<TopicTable, rkyv::rancor::Error>(&decompress(body)?)
        .map(|t| t.topics)
        .map_err(|e| bad(&e))
}

/// The body of a topic list answer (`Command::TopicListBody`).
pub fn encode_topic_names(names: &[String]) -> Result<Vec<u8>, ProtocolError> {
    let list = TopicNames {
        names: names.to_vec(),
    };
    let raw = rkyv::to_bytes::<rkyv::rancor::Error>(&list)
        .map_err(|e| ProtocolError::Encode(e.to_string()))?;
    compress(&raw)
}

/// The names of a topic list answer's body, bounded and validated as above.
pub fn decode_topic_names(body: &[u8]) -> Result<Vec<String>, ProtocolError> {
    rkyv::from_bytes::<TopicNames, rkyv::rancor::Error>(&decompress(body)?)
        .map(|t| t.names)
        .map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifty_thousand_topics_round_trip_in_a_small_body() {
        let topics: Vec<TopicConfig> = (0..50_000)
            .map(|i| TopicConfig {
                name: format!("orders-region-{i:05}"),
                read_queues: 8,
                write_queues: 8,
                perm: crate::perm::READ_WRITE,
            })
            .collect();
        let body = encode_topic_body(&topics).unwrap();
        assert!(body.len() < 1 << 20, "{} bytes", body.len());
        assert_eq!(decode_topic_body(&body).unwrap(), topics);
        let names: Vec<String> = topics.into_iter().map(|t| t.name).collect();
        let body = encode_topic_names(&names).unwrap();
        assert!(body.len() < 1 << 20, "{} bytes", body.len());
        assert_eq!(decode_topic_names(&body).unwrap(), names);
        assert!(decode_topic_names(b"not zstd").is_err());
    }

    #[test]
    fn garbage_and_bombs_are_refused() {
        assert!(decode_topic_body(b"not zstd").is_err());
        let zeros = zstd::bulk::compress(&vec![0u8; TOPIC_BODY_BYTES_MAX + 1], 3).unwrap();
        assert!(decode_topic_body(&zeros).is_err());
        let not_rkyv = zstd::bulk::compress(&[7u8; 100], 3).unwrap();
        assert!(decode_topic_body(&not_rkyv).is_err());
    }
}
