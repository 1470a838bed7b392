//! gRPC's length-prefixed message framing, as the HTTP/2 DATA frames of a call carry it.
//!
//! Each message is one byte of compressed flag (0 = as is, 1 = compressed with the call's
//! `grpc-encoding`), a `u32` big-endian length, then that many bytes of protobuf
//! ([gRPC over HTTP/2](https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md),
//! "Length-Prefixed-Message"). Messages are not aligned to DATA frames: one DATA frame may
//! hold several messages or a piece of one, so a reader appends what arrives to a
//! [`BytesMut`] and calls [`decode_frame`] until it answers `None`.
//!
//! corvus negotiates no message compression (it sends no `grpc-accept-encoding`, and the v5
//! SDKs compress nothing by default), so a frame with the compressed flag set is refused,
//! never guessed at. Every length is checked against the caller's bound before anything is
//! buffered for it, so a hostile length cannot make a reader wait for or allocate gigabytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::status::GrpcCode;

/// Length of the prefix before each message: the compressed flag and the `u32` length.
pub const FRAME_HEADER_BYTES: usize = 5;

/// Errors of framing a message or reading one back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The compressed flag is 1, and no encoding this crate can inflate was negotiated.
    #[error("message is compressed, and no message encoding is supported")]
    Compressed,
    /// The first byte is neither 0 nor 1.
    #[error("compressed flag is {flag}, expected 0 or 1")]
    InvalidFlag { flag: u8 },
    /// The announced (or, when encoding, the actual) message length is over the bound.
    #[error("message of {len_bytes} bytes is larger than the limit of {len_bytes_max} bytes")]
    TooLarge { len_bytes: u64, len_bytes_max: u64 },
    /// The stream or body ended inside a frame.
    #[error("stream ended inside a message: {have_bytes} of {need_bytes} bytes present")]
    Truncated {
        have_bytes: usize,
        need_bytes: usize,
    },
    /// A unary call carried no request message at all.
    #[error("no request message")]
    Missing,
    /// A unary call carried bytes after its one request message.
    #[error("{extra_bytes} bytes follow the request message of a unary call")]
    Trailing { extra_bytes: usize },
    /// The payload is not a valid protobuf encoding of the expected message.
    #[error("malformed protobuf message: {0}")]
    Decode(#[from] prost::DecodeError),
}

impl FrameError {
    /// The gRPC status a server answers this error with, as grpc-java and grpc-go do:
    /// an oversized message is `RESOURCE_EXHAUSTED`; a compressed message without a
    /// negotiated encoding, a bad frame and an unparsable message are `INTERNAL`.
    pub fn grpc_code(&self) -> GrpcCode {
        match self {
            FrameError::TooLarge { .. } => GrpcCode::ResourceExhausted,
            FrameError::Compressed
            | FrameError::InvalidFlag { .. }
            | FrameError::Truncated { .. }
            | FrameError::Missing
            | FrameError::Trailing { .. }
            | FrameError::Decode(_) => GrpcCode::Internal,
        }
    }
}

/// Appends `msg` to `out` as one uncompressed frame.
///
/// Fails only when the encoded message is longer than a `u32` can announce.
pub fn encode_message<M: prost::Message>(msg: &M, out: &mut BytesMut) -> Result<(), FrameError> {
    let len_bytes = msg.encoded_len();
    let len = u32::try_from(len_bytes).map_err(|_| FrameError::TooLarge {
        len_bytes: len_bytes as u64,
        len_bytes_max: u64::from(u32::MAX),
    })?;
    out.reserve(FRAME_HEADER_BYTES + len_bytes);
    out.put_u8(0);
    out.put_u32(len);
    // A `BytesMut` grows as needed (and `reserve` above already made room), so this only
    // fails if a buffer could not hold the message at all.
    msg.encode(out).map_err(|e| FrameError::TooLarge {
        len_bytes: e.required_capacity() as u64,
        len_bytes_max: e.remaining() as u64,
    })
}

/// Takes the first complete message off the front of `buf` and returns its payload.
///
/// `Ok(None)` means `buf` holds no complete frame yet and is left as it was; read more and
/// call again. The header is checked as soon as its five bytes are present, so a frame that
/// is compressed or longer than `len_bytes_max` is refused before its payload arrives.
pub fn decode_frame(buf: &mut BytesMut, len_bytes_max: usize) -> Result<Option<Bytes>, FrameError> {
    let Some(len_bytes) = frame_len(buf, len_bytes_max)? else {
        return Ok(None);
    };
    if buf.len() < FRAME_HEADER_BYTES + len_bytes {
        return Ok(None);
    }
    buf.advance(FRAME_HEADER_BYTES);
    Ok(Some(buf.split_to(len_bytes).freeze()))
}

/// Checks that nothing of a frame is left in `buf` when the peer ended its stream.
pub fn check_end_of_stream(buf: &BytesMut, len_bytes_max: usize) -> Result<(), FrameError> {
    if buf.is_empty() {
        return Ok(());
    }
    Err(truncated(buf, len_bytes_max)?)
}

/// Decodes the one request message of a unary call from its whole request body.
///
/// The body must hold exactly one frame: none is [`FrameError::Missing`], a cut one is
/// [`FrameError::Truncated`], bytes after it are [`FrameError::Trailing`].
pub fn decode_unary<M: prost::Message + Default>(
    body: Bytes,
    len_bytes_max: usize,
) -> Result<M, FrameError> {
    let mut buf = BytesMut::from(body);
    if buf.is_empty() {
        return Err(FrameError::Missing);
    }
    let Some(payload) = decode_frame(&mut buf, len_bytes_max)? else {
        return Err(truncated(&buf, len_bytes_max)?);
    };
    if !buf.is_empty() {
        return Err(FrameError::Trailing {
            extra_bytes: buf.len(),
        });
    }
    Ok(M::decode(payload)?)
}

/// The error for a stream that ended with the incomplete frame `buf`, or the header's own
/// error when the part present is already invalid.
fn truncated(buf: &[u8], len_bytes_max: usize) -> Result<FrameError, FrameError> {
    let need_bytes = match frame_len(buf, len_bytes_max)? {
        Some(len_bytes) => FRAME_HEADER_BYTES + len_bytes,
        None => FRAME_HEADER_BYTES,
    };
    Ok(FrameError::Truncated {
        have_bytes: buf.len(),
        need_bytes,
    })
}

/// The payload length announced by the header at the front of `buf`, once the header is
/// complete; refuses compressed frames, unknown flags and lengths over `len_bytes_max`.
fn frame_len(buf: &[u8], len_bytes_max: usize) -> Result<Option<usize>, FrameError> {
    let Some(header) = buf.get(..FRAME_HEADER_BYTES) else {
        return Ok(None);
    };
    match header[0] {
        0 => {}
        1 => return Err(FrameError::Compressed),
        flag => return Err(FrameError::InvalidFlag { flag }),
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    match usize::try_from(len) {
        Ok(len_bytes) if len_bytes <= len_bytes_max => Ok(Some(len_bytes)),
        _ => Err(FrameError::TooLarge {
            len_bytes: u64::from(len),
            len_bytes_max: len_bytes_max as u64,
        }),
    }
}
