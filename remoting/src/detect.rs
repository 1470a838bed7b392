//! Telling a connection's protocol from its first bytes, so one port serves the native
//! protocol and RocketMQ's remoting protocol alike.
//!
//! Both frames start with a 4-byte length. The remoting frame's second word carries the
//! serialize type in its top byte: 1 (ROCKETMQ binary) can never start a native frame, whose
//! second word is a header length of at most 1 MiB; with type 0 the JSON header's first byte
//! is `{`, which no native header (an rkyv archive whose leading bytes are topic names, client
//! ids and other names that never start with a brace) begins with. An HTTP/2 connection
//! (RocketMQ 5's gRPC clients) starts with its fixed preface.

/// What the first bytes of a connection say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// Fewer bytes than it takes to tell.
    NeedMore,
    Remoting,
    /// Anything else: left to the native decoder, which refuses what it cannot read.
    Native,
    /// The HTTP/2 connection preface (`PRI * HTTP/2.0`): a gRPC client.
    Http2,
}

/// Bytes [`detect`] needs at most to decide.
pub const DETECT_BYTES: usize = 9;

/// Tells the protocol from a connection's first bytes (`prefix`, as many as have arrived).
pub fn detect(prefix: &[u8]) -> Detected {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0";
    let n = prefix.len().min(PREFACE.len());
    if n >= 4 && prefix[..n] == PREFACE[..n] {
        return if n == PREFACE.len() {
            Detected::Http2
        } else {
            Detected::NeedMore
        };
    }
    if prefix.len() < 8 {
        return Detected::NeedMore;
    }
    match prefix[4] {
        1 => Detected::Remoting,
        0 => match prefix.get(8) {
            None => Detected::NeedMore,
            Some(b'{') => Detected::Remoting,
            Some(_) => Detected::Native,
        },
        _ => Detected::Native,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, RemotingCommand, SerializeType};

    #[test]
    fn both_remoting_header_forms_are_told_apart_from_native_frames() {
        let mut cmd = RemotingCommand::request(crate::codes::request::GET_ROUTEINFO_BY_TOPIC, 1);
        let json = encode(&cmd, b"").unwrap();
        assert_eq!(detect(&json), Detected::Remoting);
        cmd.serialize_type = SerializeType::RocketMq;
        let binary = encode(&cmd, b"").unwrap();
        assert_eq!(detect(&binary), Detected::Remoting);
        assert_eq!(detect(&binary[..8]), Detected::Remoting);
        assert_eq!(detect(&json[..8]), Detected::NeedMore);
        // A native frame: length, a small header length, then an archive.
        let native = [0, 0, 0, 40, 0, 0, 0, 32, b'T', b'o', b'p'];
        assert_eq!(detect(&native), Detected::Native);
        assert_eq!(detect(&native[..3]), Detected::NeedMore);
    }

    #[test]
    fn the_http2_preface_is_a_grpc_client() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(detect(preface), Detected::Http2);
        assert_eq!(detect(&preface[..6]), Detected::NeedMore);
    }
}
