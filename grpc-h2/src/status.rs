//! gRPC's transport status: the code and message a call ends with, as the `grpc-status` and
//! `grpc-message` trailers carry them. (RocketMQ's own `Status` inside a response body is the
//! handler's business; the transport status stays OK for every answered RPC.)

use http::HeaderValue;

/// gRPC's status codes, as `grpc-proto` numbers them.
pub use grpc_proto::status::GrpcCode as Code;

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
        let encoded = grpc_proto::status::encode_grpc_message(&self.message);
        // Only printable ASCII remains, which a header value always accepts.
        HeaderValue::try_from(encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_message_becomes_a_valid_header() {
        let s = GrpcStatus::new(Code::Internal, "bad\r\nheader");
        assert_eq!(s.message_header(), "bad%0D%0Aheader");
    }
}
