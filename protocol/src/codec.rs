//! Frame encoding and incremental decoding.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rkyv::util::AlignedVec;

use crate::{Header, ProtocolError, HEADER_BYTES_MAX};

/// `frame_len` + `header_len`.
pub const FRAME_PREFIX_BYTES: usize = 8;

/// A decoded frame: a validated header and the body, split off the read buffer without a copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: Header,
    pub body: Bytes,
}

/// Writes the length prefix and the header of a frame whose body of `body_len` bytes the
/// caller writes next (so large bodies are never copied into the frame buffer).
pub fn encode_frame_prefix(
    header: &Header,
    body_len: usize,
    out: &mut BytesMut,
) -> Result<(), ProtocolError> {
    let archived = rkyv::to_bytes::<rkyv::rancor::Error>(header)
        .map_err(|e| ProtocolError::Encode(e.to_string()))?;
    let header_len = archived.len();
    let frame_len = 4u64 + header_len as u64 + body_len as u64;
    if frame_len > u32::MAX as u64 {
        return Err(ProtocolError::FrameTooLarge {
            len: frame_len,
            max: u32::MAX,
        });
    }
    out.reserve(FRAME_PREFIX_BYTES + header_len);
    out.put_u32(frame_len as u32);
    out.put_u32(header_len as u32);
    out.extend_from_slice(&archived);
    Ok(())
}

/// Encodes a whole frame, copying the body. Convenient for small bodies.
pub fn encode_frame(header: &Header, body: &[u8]) -> Result<BytesMut, ProtocolError> {
    let mut out = BytesMut::with_capacity(FRAME_PREFIX_BYTES + 256 + body.len());
    encode_frame_prefix(header, body.len(), &mut out)?;
    out.extend_from_slice(body);
    Ok(out)
}

/// What [`FrameDecoder::decode`] found.
#[derive(Debug)]
pub enum Decoded {
    Frame(Frame),
    /// A frame over the size limit. Its header could be read, so the peer can be answered;
    /// the decoder skips the rest of the frame as it arrives and the connection stays usable.
    Oversized {
        header: Header,
        frame_len: u64,
    },
}

/// Incremental decoder. Feed it the connection's read buffer after every read.
#[derive(Debug)]
pub struct FrameDecoder {
    frame_bytes_max: u32,
    /// Bytes of an oversized frame still to be thrown away.
    discard_remaining: u64,
}

impl FrameDecoder {
    pub fn new(frame_bytes_max: u32) -> Self {
        FrameDecoder {
            frame_bytes_max,
            discard_remaining: 0,
        }
    }

    pub fn frame_bytes_max(&self) -> u32 {
        self.frame_bytes_max
    }

    /// True while the rest of an oversized frame is still to be thrown away: the peer is in
    /// the middle of a frame even when no byte of it is buffered.
    pub fn is_discarding(&self) -> bool {
        self.discard_remaining > 0
    }

    /// Returns `Ok(None)` when more bytes are needed. An `Err` means the stream cannot be
    /// trusted any more (the frame boundaries are lost): answer if you can, then close.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, ProtocolError> {
        {
            if self.discard_remaining > 0 {
                let n = (self.discard_remaining).min(buf.len() as u64) as usize;
                buf.advance(n);
                self.discard_remaining -= n as u64;
                if self.discard_remaining > 0 {
                    return Ok(None);
                }
            }
            if buf.len() < FRAME_PREFIX_BYTES {
                return Ok(None);
            }
            let frame_len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let header_len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
            if frame_len < 4 || header_len > HEADER_BYTES_MAX || header_len > frame_len - 4 {
                return Err(ProtocolError::BadHeaderLength {
                    len: header_len,
                    frame_len,
                });
            }
            let header_end = FRAME_PREFIX_BYTES + header_len as usize;
            if frame_len > self.frame_bytes_max {
                if buf.len() < header_end {
                    buf.reserve(header_end - buf.len());
                    return Ok(None);
                }
                let header = decode_header(&buf[FRAME_PREFIX_BYTES..header_end])?;
                let total = 4 + frame_len as u64;
                let have = buf.len() as u64;
                let take = total.min(have) as usize;
                buf.advance(take);
                self.discard_remaining = total - take as u64;
                return Ok(Some(Decoded::Oversized {
                    header,
                    frame_len: frame_len as u64,
                }));
            }
            let total = 4 + frame_len as usize;
            if buf.len() < total {
                buf.reserve(total - buf.len());
                return Ok(None);
            }
            let frame = buf.split_to(total);
            decode_complete(frame.freeze()).map(|f| Some(Decoded::Frame(f)))
        }
    }

    /// The whole length (prefix included) of the frame `buf` holds the start of, once its
    /// length is known, while it is incomplete and within the limit (after `decode` said it
    /// needs more bytes). A connection may read the rest of a large one elsewhere and hand
    /// the whole to [`decode_complete`].
    pub fn partial_frame_len(&self, buf: &BytesMut) -> Option<usize> {
        if self.discard_remaining > 0 || buf.len() < FRAME_PREFIX_BYTES {
            return None;
        }
        let frame_len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let total = 4 + frame_len as usize;
        (frame_len <= self.frame_bytes_max && buf.len() < total).then_some(total)
    }
}

/// Decodes one whole frame, length prefix included: exactly the bytes of one frame.
pub fn decode_complete(mut frame: Bytes) -> Result<Frame, ProtocolError> {
    if frame.len() < FRAME_PREFIX_BYTES {
        return Err(ProtocolError::BadHeaderLength {
            len: 0,
            frame_len: frame.len() as u32,
        });
    }
    let frame_len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    let header_len = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if frame_len < 4
        || frame.len() != 4 + frame_len as usize
        || header_len > HEADER_BYTES_MAX
        || header_len > frame_len - 4
    {
        return Err(ProtocolError::BadHeaderLength {
            len: header_len,
            frame_len,
        });
    }
    let header_end = FRAME_PREFIX_BYTES + header_len as usize;
    let header = decode_header(&frame[FRAME_PREFIX_BYTES..header_end])?;
    frame.advance(header_end);
    Ok(Frame {
        header,
        body: frame,
    })
}

/// Validates (rkyv checked access) and deserializes a header. The bytes are copied into an
/// aligned buffer first: a header sits at an arbitrary position in the read buffer.
fn decode_header(bytes: &[u8]) -> Result<Header, ProtocolError> {
    let mut aligned = AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    rkyv::from_bytes::<Header, rkyv::rancor::Error>(&aligned)
        .map_err(|e| ProtocolError::BadHeader(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, PullRequest, ResponseCode};

    fn pull_header(id: u64) -> Header {
        Header::request(
            id,
            Command::Pull(PullRequest {
                consumer_group: "g".into(),
                topic: "TopicTest".into(),
                queue_id: 1,
                queue_offset: 99,
                max_messages: 32,
                max_bytes: 1 << 20,
                tag_expression: "TagA || TagB".into(),
                suspend_timeout_ms: 0,
            }),
        )
    }

    #[test]
    fn round_trip_in_pieces() {
        let mut wire = encode_frame(&pull_header(7), b"body!").unwrap();
        wire.extend_from_slice(
            &encode_frame(&Header::error(8, ResponseCode::SystemBusy, "busy"), b"").unwrap(),
        );
        let mut dec = FrameDecoder::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        // Feed one byte at a time: the decoder must cope with any split.
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(d) = dec.decode(&mut buf).unwrap() {
                match d {
                    Decoded::Frame(f) => frames.push(f),
                    Decoded::Oversized { .. } => panic!("not oversized"),
                }
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].header, pull_header(7));
        assert_eq!(&frames[0].body[..], b"body!");
        assert_eq!(frames[1].header.response_code(), ResponseCode::SystemBusy);
        assert_eq!(frames[1].header.remark, "busy");
        assert!(buf.is_empty());
    }

    #[test]
    fn a_refusal_says_when_to_retry_and_other_errors_do_not() {
        let refused = Header::refusal(5, ResponseCode::FlowControl, "quota", Some(250));
        let wire = encode_frame(&refused, b"").unwrap().freeze();
        let f = decode_complete(wire).unwrap();
        assert_eq!(f.header, refused);
        assert_eq!(f.header.response_code(), ResponseCode::FlowControl);
        assert_eq!(f.header.remark, "quota");
        assert_eq!(f.header.retry_after_ms(), Some(250));
        // An error with no retry time is the plain error response, and says none.
        let plain = Header::refusal(6, ResponseCode::SystemError, "broken", None);
        assert_eq!(plain, Header::error(6, ResponseCode::SystemError, "broken"));
        let f = decode_complete(encode_frame(&plain, b"").unwrap().freeze()).unwrap();
        assert_eq!(f.header.retry_after_ms(), None);
        // A request carrying the command is no refusal.
        let request = Header::request(7, Command::Refused { retry_after_ms: 1 });
        assert_eq!(request.retry_after_ms(), None);
    }

    #[test]
    fn oversized_frame_is_reported_and_skipped() {
        let big = vec![0u8; 5000];
        let mut wire = encode_frame(&pull_header(1), &big).unwrap();
        wire.extend_from_slice(&encode_frame(&pull_header(2), b"ok").unwrap());
        let mut dec = FrameDecoder::new(1024);
        let mut buf = BytesMut::new();
        let mut seen = Vec::new();
        for chunk in wire.chunks(700) {
            buf.extend_from_slice(chunk);
            while let Some(d) = dec.decode(&mut buf).unwrap() {
                seen.push(d);
            }
        }
        assert_eq!(seen.len(), 2);
        match &seen[0] {
            Decoded::Oversized { header, frame_len } => {
                assert_eq!(header.request_id, 1);
                assert!(*frame_len > 5000);
            }
            other => panic!("expected oversized, got {other:?}"),
        }
        match &seen[1] {
            Decoded::Frame(f) => assert_eq!(f.header.request_id, 2),
            other => panic!("expected frame, got {other:?}"),
        }
    }

    #[test]
    fn a_large_frame_read_elsewhere_decodes_whole() {
        let frame = encode_frame(&pull_header(9), &[7u8; 5000]).unwrap();
        let mut dec = FrameDecoder::new(1 << 20);
        let mut buf = BytesMut::from(&frame[..100]);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert_eq!(dec.partial_frame_len(&buf), Some(frame.len()));
        let f = decode_complete(frame.clone().freeze()).unwrap();
        assert_eq!(f.header.request_id, 9);
        assert_eq!(&f.body[..], &[7u8; 5000][..]);
        // Not whole, or not a frame: an error, never a panic.
        assert!(decode_complete(frame.clone().freeze().slice(..frame.len() - 1)).is_err());
        assert!(decode_complete(Bytes::from_static(b"\0\0\0")).is_err());
        // A whole frame in the buffer, or none started, is no partial frame.
        let whole = BytesMut::from(&frame[..]);
        assert_eq!(dec.partial_frame_len(&whole), None);
        assert_eq!(dec.partial_frame_len(&BytesMut::new()), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut dec = FrameDecoder::new(1 << 20);
        // A plausible length with a header of random bytes.
        let mut buf = BytesMut::new();
        buf.put_u32(4 + 32);
        buf.put_u32(32);
        buf.extend_from_slice(&[0xAB; 32]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(ProtocolError::BadHeader(_))
        ));
        // A header length larger than the frame.
        let mut buf = BytesMut::new();
        buf.put_u32(10);
        buf.put_u32(100);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(ProtocolError::BadHeaderLength { .. })
        ));
        // HTTP on the wrong port.
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
        assert!(dec.decode(&mut buf).is_err());
    }

    #[test]
    fn every_truncation_and_bit_flip_of_a_header_is_handled() {
        let wire = encode_frame(&pull_header(3), b"xyz").unwrap();
        for i in FRAME_PREFIX_BYTES..wire.len() {
            for bit in 0..8 {
                let mut bad = BytesMut::from(&wire[..]);
                bad[i] ^= 1 << bit;
                let mut dec = FrameDecoder::new(1 << 20);
                // Any outcome but a panic is acceptable; a frame that decodes must be whole.
                if let Ok(Some(Decoded::Frame(f))) = dec.decode(&mut bad) {
                    assert!(f.body.len() <= 3);
                }
            }
        }
    }
}
