//! gRPC status codes and the response headers and trailers that carry them.
//!
//! A RocketMQ v5 server leaves the transport status `OK` for almost every outcome and puts
//! the result in the response's own `apache.rocketmq.v2.Status` ([`crate::v2::Code`]); the
//! codes here are for what happens beneath that: an unknown RPC, a bad frame, an oversized
//! message, a Telemetry stream opened without settings.

use std::fmt::Write;
use std::time::Duration;

/// `content-type` of every gRPC request and response.
pub const CONTENT_TYPE: &str = "application/grpc";
/// Trailer holding the decimal [`GrpcCode`].
pub const STATUS_HEADER: &str = "grpc-status";
/// Trailer holding the percent-encoded status message ([`encode_grpc_message`]).
pub const MESSAGE_HEADER: &str = "grpc-message";
/// Request header holding the call's deadline ([`parse_grpc_timeout`]).
pub const TIMEOUT_HEADER: &str = "grpc-timeout";
/// Header naming the message compression of the call's frames.
pub const ENCODING_HEADER: &str = "grpc-encoding";

/// The status codes of gRPC, with the numbers its specification gives them
/// (`doc/statuscodes.md` in grpc/grpc); the number goes in the `grpc-status` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GrpcCode {
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

impl GrpcCode {
    /// Every code, in numeric order.
    pub const ALL: [GrpcCode; 17] = [
        GrpcCode::Ok,
        GrpcCode::Cancelled,
        GrpcCode::Unknown,
        GrpcCode::InvalidArgument,
        GrpcCode::DeadlineExceeded,
        GrpcCode::NotFound,
        GrpcCode::AlreadyExists,
        GrpcCode::PermissionDenied,
        GrpcCode::ResourceExhausted,
        GrpcCode::FailedPrecondition,
        GrpcCode::Aborted,
        GrpcCode::OutOfRange,
        GrpcCode::Unimplemented,
        GrpcCode::Internal,
        GrpcCode::Unavailable,
        GrpcCode::DataLoss,
        GrpcCode::Unauthenticated,
    ];

    /// The code's number.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The code with number `value`, if gRPC defines one.
    pub fn from_u8(value: u8) -> Option<GrpcCode> {
        GrpcCode::ALL.get(usize::from(value)).copied()
    }

    /// The value of the `grpc-status` trailer: the number in decimal ASCII.
    pub fn header_value(self) -> &'static str {
        const VALUES: [&str; 17] = [
            "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
            "16",
        ];
        VALUES[usize::from(self.as_u8())]
    }

    /// The code a `grpc-status` trailer value names; unknown or malformed values are
    /// `UNKNOWN`, as the gRPC specification asks of clients.
    pub fn from_header_value(value: &[u8]) -> GrpcCode {
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<u8>().ok())
            .and_then(GrpcCode::from_u8)
            .unwrap_or(GrpcCode::Unknown)
    }
}

/// Percent-encodes a status message for the `grpc-message` trailer: bytes of its UTF-8 form
/// outside printable ASCII, and `%` itself, become `%XX`.
pub fn encode_grpc_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes a `grpc-message` trailer value. A `%` not followed by two hex digits is kept as
/// it is and invalid UTF-8 is replaced, since a status message is for people to read.
pub fn decode_grpc_message(value: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let escaped = match value.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex_digit(*hi).zip(hex_digit(*lo)),
            _ => None,
        };
        match escaped {
            Some((hi, lo)) => {
                bytes.push(hi << 4 | lo);
                i += 3;
            }
            None => {
                bytes.push(value[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Parses a `grpc-timeout` header: at most eight ASCII digits and a unit, `H`ours,
/// `M`inutes, `S`econds, `m`illiseconds, `u` microseconds or `n`anoseconds. `None` when the
/// value does not follow that form.
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_the_numbers_of_the_grpc_specification() {
        let named = [
            (GrpcCode::Ok, 0),
            (GrpcCode::InvalidArgument, 3),
            (GrpcCode::NotFound, 5),
            (GrpcCode::ResourceExhausted, 8),
            (GrpcCode::Unimplemented, 12),
            (GrpcCode::Internal, 13),
            (GrpcCode::Unavailable, 14),
            (GrpcCode::Unauthenticated, 16),
        ];
        for (code, number) in named {
            assert_eq!(code.as_u8(), number, "{code:?}");
        }
        for (i, code) in GrpcCode::ALL.iter().enumerate() {
            assert_eq!(usize::from(code.as_u8()), i, "ALL is in numeric order");
            assert_eq!(GrpcCode::from_u8(code.as_u8()), Some(*code));
            assert_eq!(code.header_value(), code.as_u8().to_string());
            assert_eq!(
                GrpcCode::from_header_value(code.header_value().as_bytes()),
                *code
            );
        }
        assert_eq!(GrpcCode::from_u8(17), None);
        assert_eq!(GrpcCode::from_header_value(b"17"), GrpcCode::Unknown);
        assert_eq!(GrpcCode::from_header_value(b"x"), GrpcCode::Unknown);
    }

    #[test]
    fn status_messages_are_percent_encoded_and_decode_back() {
        let message = "topic 'T%1' not found: 主题\n";
        let encoded = encode_grpc_message(message);
        assert!(encoded.bytes().all(|b| (0x20..=0x7e).contains(&b)));
        assert!(encoded.starts_with("topic 'T%251' not found: %E4%B8%BB"));
        assert!(encoded.ends_with("%0A"));
        assert_eq!(decode_grpc_message(encoded.as_bytes()), message);
        // A stray percent sign from a careless peer survives decoding.
        assert_eq!(decode_grpc_message(b"100% sure %zz"), "100% sure %zz");
    }

    #[test]
    fn timeouts_parse_in_every_unit_and_refuse_bad_forms() {
        assert_eq!(parse_grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout(b"30S"), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_grpc_timeout(b"2999m"),
            Some(Duration::from_millis(2999))
        );
        assert_eq!(parse_grpc_timeout(b"5u"), Some(Duration::from_micros(5)));
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [
            &b""[..],
            b"S",
            b"123456789S",
            b"10s",
            b"-1S",
            b"1.5S",
            b" 1S",
        ] {
            assert_eq!(
                parse_grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
