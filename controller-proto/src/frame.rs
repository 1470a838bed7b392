//! Length-prefixed JSON frames: `u32` big-endian body length, then the body.
//!
//! Pure functions over bytes, so any runtime can drive them: a reader that has the 4 header
//! bytes calls [`body_len`] and reads that many more; a reader that gets arbitrary chunks
//! feeds them to a [`FrameDecoder`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ProtoError;

/// Size of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Largest accepted body. Controller messages are a few KiB; the limit only stops a bad
/// length from becoming a huge allocation.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Serializes `value` as one whole frame (header and body).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ProtoError> {
    let mut out = vec![0u8; FRAME_HEADER_BYTES];
    serde_json::to_writer(&mut out, value)?;
    let len = out.len() - FRAME_HEADER_BYTES;
    if len > MAX_FRAME_BYTES {
        return Err(ProtoError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    // `len <= MAX_FRAME_BYTES` fits in a u32.
    out[..FRAME_HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// The body length announced by a frame header, refused when over [`MAX_FRAME_BYTES`].
pub fn body_len(header: [u8; FRAME_HEADER_BYTES]) -> Result<usize, ProtoError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(ProtoError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    Ok(len)
}

/// Parses one frame body (without its header).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtoError> {
    Ok(serde_json::from_slice(body)?)
}

/// Accumulates bytes as they arrive and yields whole frame bodies.
///
/// After an error the stream is out of step and the connection should be closed: the
/// decoder does not try to resynchronize.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame body, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        let Some(header) = self.buf.get(..FRAME_HEADER_BYTES) else {
            return Ok(None);
        };
        let mut h = [0u8; FRAME_HEADER_BYTES];
        h.copy_from_slice(header);
        let len = body_len(h)?;
        let end = FRAME_HEADER_BYTES + len;
        if self.buf.len() < end {
            return Ok(None);
        }
        let body = self.buf[FRAME_HEADER_BYTES..end].to_vec();
        self.buf.drain(..end);
        Ok(Some(body))
    }

    /// Bytes held that do not yet form a whole frame.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Heartbeat, Request, Response};

    fn heartbeat() -> Request {
        Request::BrokerHeartbeat(Heartbeat {
            cluster: "c".into(),
            group: "g".into(),
            broker_id: 1,
            addr: "127.0.0.1:10911".into(),
            ha_addrs: vec!["127.0.0.1:10912".into()],
            epoch: 3,
            max_offsets: vec![10, 20],
            healthy: true,
            prefer_master: false,
        })
    }

    #[test]
    fn round_trip_through_byte_by_byte_decoder() {
        let a = encode(&heartbeat()).unwrap();
        let b = encode(&Response::NotLeader {
            leader: Some("x".into()),
        })
        .unwrap();
        let mut d = FrameDecoder::new();
        let mut out = Vec::new();
        for byte in a.iter().chain(b.iter()) {
            d.push(&[*byte]);
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
        }
        assert_eq!(out.len(), 2);
        assert_eq!(decode::<Request>(&out[0]).unwrap(), heartbeat());
        assert_eq!(
            decode::<Response>(&out[1]).unwrap(),
            Response::NotLeader {
                leader: Some("x".into())
            }
        );
        assert_eq!(d.buffered_bytes(), 0);
    }

    #[test]
    fn oversized_length_is_refused_before_reading_the_body() {
        let mut d = FrameDecoder::new();
        d.push(&((MAX_FRAME_BYTES as u32) + 1).to_be_bytes());
        assert!(matches!(
            d.next_frame(),
            Err(ProtoError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn oversized_value_is_refused_on_encode() {
        let big = Request::GetReplicaInfo {
            group: "x".repeat(MAX_FRAME_BYTES),
        };
        assert!(matches!(
            encode(&big),
            Err(ProtoError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn garbage_body_is_an_error_not_a_panic() {
        assert!(decode::<Request>(b"{\"Nope\":1}").is_err());
        assert!(decode::<Request>(&[0xff, 0x00]).is_err());
    }
}
