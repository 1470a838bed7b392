//! gRPC's transport status: the code and message a call ends with, as the `grpc-status` and
//! `grpc-message` trailers carry them. (RocketMQ's own `Status` inside a response body is the
//! handler's business; the transport status stays OK for every answered RPC.)

use http::HeaderValue;

/// gRPC's status codes (grpc/grpc `doc/statuscodes.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    /// The number on the wire.
    pub fn number(self) -> u32 {
        self as u32
    }
}

/// How a call ended when not with a response message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gRPC status {code:?}: {message}")]
pub struct GrpcStatus {
    pub code: Code,
    pub message: String,
}

impl GrpcStatus {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        GrpcStatus {
            code,
            message: message.into(),
        }
    }

    /// `grpc-message`'s value: percent-encoded as the gRPC HTTP/2 spec asks (every byte
    /// outside printable ASCII, and `%` itself), so any text makes a valid header.
    pub fn message_header(&self) -> HeaderValue {
        let encoded = percent_encode(&self.message);
        // Only printable ASCII remains, which a header value always accepts.
        HeaderValue::try_from(encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// Percent-encodes `text` for `grpc-message`.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("plain text"), "plain text");
        assert_eq!(percent_encode("50% off"), "50%25 off");
        assert_eq!(percent_encode("ü\n"), "%C3%BC%0A");
        let s = GrpcStatus::new(Code::Internal, "bad\r\nheader");
        assert_eq!(s.message_header(), "bad%0D%0Aheader");
    }
}
