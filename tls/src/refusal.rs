//! What a plaintext client of an enforcing listener is told before it is closed.
//!
//! Closing it at once would leave the client with "connection closed by peer", which says
//! nothing about TLS. Instead the listener reads the client's first request (its header at
//! most, bounded in bytes and in time by the caller) and answers it with an error that says
//! the port speaks TLS only, in the protocol the client spoke (native or RocketMQ remoting),
//! then closes.

use bytes::BytesMut;

/// The remark of the refusal, as the client shows it.
pub const PLAINTEXT_REFUSED: &str =
    "this port accepts TLS only (tls_mode = enforcing): connect with TLS";

/// Bytes of a plaintext client's first request read at most to answer it: its header comes
/// first, and a larger frame is answered from that header without the rest.
pub const REFUSAL_READ_BYTES_MAX: u32 = 64 * 1024;

/// What to do with the bytes a plaintext client sent so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Read more (up to [`REFUSAL_READ_BYTES_MAX`] in all).
    NeedMore,
    /// Send these bytes (the error response to the first request), then close.
    Answer(Vec<u8>),
    /// Nothing to answer (not a request of either protocol, or a oneway one): close.
    Close,
}

/// The answer to a plaintext client that sent `buf` so far.
pub fn refuse_plaintext(buf: &[u8]) -> Refusal {
    use remoting::detect::{detect, Detected};
    match detect(buf) {
        Detected::NeedMore => {
            if buf.len() >= REFUSAL_READ_BYTES_MAX as usize {
                Refusal::Close
            } else {
                Refusal::NeedMore
            }
        }
        Detected::Http2 => Refusal::Close,
        Detected::Native => native(buf),
        Detected::Remoting => remoting_answer(buf),
    }
}

fn native(buf: &[u8]) -> Refusal {
    let mut b = BytesMut::from(buf);
    let header = match protocol::FrameDecoder::new(REFUSAL_READ_BYTES_MAX).decode(&mut b) {
        Ok(None) => return more(buf),
        Ok(Some(protocol::Decoded::Frame(f))) => f.header,
        Ok(Some(protocol::Decoded::Oversized { header, .. })) => header,
        Err(_) => return Refusal::Close,
    };
    if header.is_response() || header.is_oneway() {
        return Refusal::Close;
    }
    let answer = protocol::Header::error(
        header.request_id,
        protocol::ResponseCode::NoPermission,
        PLAINTEXT_REFUSED,
    );
    match protocol::encode_frame(&answer, &[]) {
        Ok(bytes) => Refusal::Answer(bytes.to_vec()),
        Err(_) => Refusal::Close,
    }
}

fn remoting_answer(buf: &[u8]) -> Refusal {
    let mut b = BytesMut::from(buf);
    let command = match remoting::RemotingDecoder::new(REFUSAL_READ_BYTES_MAX).decode(&mut b) {
        Ok(None) => return more(buf),
        Ok(Some(remoting::Decoded::Frame(f))) => f.command,
        Ok(Some(remoting::Decoded::Oversized {
            command: Some(c), ..
        })) => c,
        Ok(Some(remoting::Decoded::Oversized { command: None, .. })) | Err(_) => {
            return Refusal::Close
        }
    };
    if command.flag & (remoting::FLAG_RESPONSE | remoting::FLAG_ONEWAY) != 0 {
        return Refusal::Close;
    }
    let answer = remoting::RemotingCommand::response_to(
        &command,
        remoting::codes::response::NO_PERMISSION,
        Some(PLAINTEXT_REFUSED.to_owned()),
    );
    match remoting::encode(&answer, &[]) {
        Ok(bytes) => Refusal::Answer(bytes.to_vec()),
        Err(_) => Refusal::Close,
    }
}

fn more(buf: &[u8]) -> Refusal {
    if buf.len() >= REFUSAL_READ_BYTES_MAX as usize {
        Refusal::Close
    } else {
        Refusal::NeedMore
    }
}

/// Reads a plaintext client's first request from `sock` and answers it (see
/// [`refuse_plaintext`]), every read bounded by `deadline`; the caller closes the socket.
/// Errors are the client's problem: it is being closed either way.
pub fn answer_plaintext_blocking(sock: &std::net::TcpStream, deadline: std::time::Instant) {
    use std::io::{Read, Write};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match refuse_plaintext(&buf) {
            Refusal::NeedMore => {}
            Refusal::Answer(a) => {
                let _ = sock.set_write_timeout(Some(std::time::Duration::from_secs(1)));
                let _ = (&*sock).write_all(&a);
                return;
            }
            Refusal::Close => return,
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match (&*sock).read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_native_request_is_answered_with_its_id_and_the_reason() {
        let req = protocol::Header::request(42, protocol::Command::Empty);
        let bytes = protocol::encode_frame(&req, b"body").expect("encode");
        assert_eq!(
            refuse_plaintext(&bytes[..bytes.len() / 2]),
            Refusal::NeedMore
        );
        let Refusal::Answer(a) = refuse_plaintext(&bytes) else {
            panic!("no answer");
        };
        let f = protocol::decode_complete(bytes::Bytes::from(a)).expect("decode");
        assert_eq!(f.header.request_id, 42);
        assert!(f.header.is_response());
        assert_eq!(f.header.remark, PLAINTEXT_REFUSED);
        let oneway = protocol::Header::oneway(7, protocol::Command::Empty);
        let bytes = protocol::encode_frame(&oneway, &[]).expect("encode");
        assert_eq!(refuse_plaintext(&bytes), Refusal::Close);
    }

    #[test]
    fn a_remoting_request_is_answered_with_its_opaque_and_the_reason() {
        let req = remoting::RemotingCommand::request(105, 9);
        let bytes = remoting::encode(&req, &[]).expect("encode");
        let Refusal::Answer(a) = refuse_plaintext(&bytes) else {
            panic!("no answer");
        };
        let f = remoting::decode_frame(bytes::Bytes::from(a)).expect("decode");
        assert_eq!(f.command.opaque, 9);
        assert_eq!(f.command.code, remoting::codes::response::NO_PERMISSION);
        assert_eq!(f.command.remark.as_deref(), Some(PLAINTEXT_REFUSED));
    }

    #[test]
    fn bytes_that_never_make_a_request_are_closed_past_the_bound() {
        let junk = vec![0u8; 3];
        assert_eq!(refuse_plaintext(&junk), Refusal::NeedMore);
        let big = vec![0x7fu8; REFUSAL_READ_BYTES_MAX as usize + 1];
        assert_eq!(refuse_plaintext(&big), Refusal::Close);
    }
}
