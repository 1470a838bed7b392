//! Apache RocketMQ's *remoting* wire protocol, the one every RocketMQ 4.x/5.x client (Java,
//! Go, C++, Rust) speaks to the NameServer and to brokers.
//!
//! # Frame
//!
//! ```text
//! i32 BE length        4 + header_len + body_len (excludes itself)
//! i32 BE word          serialize_type << 24 | header_len (24 bits)
//! header               header_len bytes, in the form serialize_type names
//! body                 the rest: message body, JSON body, stored records, or nothing
//! ```
//!
//! `serialize_type` 0 is JSON, 1 is ROCKETMQ (binary). A server answers in the form the
//! request used ([`RemotingCommand::response_to`] keeps it). The Java server refuses frames
//! whose length (prefix included) exceeds 16 MiB; [`RemotingDecoder`] does the same by
//! default and the limit is configurable.
//!
//! # JSON header
//!
//! `{"code":105,"language":"JAVA","version":401,"opaque":3,"flag":0,"remark":null,
//! "extFields":{"topic":"T"},"serializeTypeCurrentRPC":"JSON"}`. Decoding ignores unknown
//! fields, tolerates missing ones, a trailing newline, numbers spelled as strings, a numeric
//! `language`, and `extFields` values that are numbers or booleans (the C++ client): every
//! scalar is coerced to its string form, because RocketMQ's typed headers are parsed from
//! strings.
//!
//! # ROCKETMQ binary header
//!
//! ```text
//! i16 code · u8 language · i16 version · i32 opaque · i32 flag
//! i32 remark_len (0 = null) · remark UTF-8
//! i32 ext_len · repeated { i16 key_len · key · i32 value_len · value }
//! ```
//!
//! # What is here
//!
//! [`RemotingCommand`] and [`Frame`], [`encode`]/[`encode_into`], the streaming
//! [`RemotingDecoder`] and [`decode_frame`]; the numeric [`codes`]; typed request and response
//! headers read from and written to `extFields` ([`headers`]); serde bodies with a writer for
//! fastjson's unquoted integer map keys and a parser that accepts them ([`body`]); message
//! helpers: properties, batch bodies, stored records, offset message ids, tag hash codes
//! ([`message`]); and [`fuzzing::check_decoder`], the property a fuzz target would check.
//!
//! `examples/capture_server.rs` is a loopback NameServer + broker stub made from this crate
//! that real Java, C++ and Go clients round-trip messages through; the frames they sent are the
//! fixtures of `tests/captured_frames.rs`.
//!
//! # Example
//!
//! ```
//! use bytes::BytesMut;
//! use remoting::body::{self, JsonForm, TopicRouteData};
//! use remoting::codes::{request, response};
//! use remoting::headers::GetRouteInfoRequestHeader;
//! use remoting::{Decoded, RemotingCommand, RemotingDecoder};
//!
//! // What a client sends: a route request.
//! let mut req = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 7);
//! req.ext_fields.insert("topic".into(), "TopicTest".into());
//! let mut read_buf = BytesMut::from(&remoting::encode(&req, b"").unwrap()[..]);
//!
//! // What a server does with it.
//! let mut decoder = RemotingDecoder::default();
//! let Some(Decoded::Frame(frame)) = decoder.decode(&mut read_buf).unwrap() else {
//!     panic!("one whole frame was buffered");
//! };
//! let header: GetRouteInfoRequestHeader = frame.command.ext_header().unwrap();
//! let form = if header.wants_standard_json(&frame.command) {
//!     JsonForm::Standard
//! } else {
//!     JsonForm::Fastjson
//! };
//! let route = TopicRouteData::default();
//! let answer = RemotingCommand::response_to(&frame.command, response::SUCCESS, None);
//! let wire = remoting::encode(&answer, &body::to_json(&route, form).unwrap()).unwrap();
//! assert_eq!(remoting::decode_frame(wire).unwrap().command.opaque, 7);
//! ```
//!
//! # What is not
//!
//! No I/O, no connection state, no request dispatch, no RPC hooks, no ACL signing, no
//! compression (compressed bodies and compressed REGISTER_BROKER bodies pass through as
//! bytes), no TLS detection, and no gRPC (the 5.x `rocketmq-clients` protocol).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod body;
mod codec;
pub mod codes;
mod command;
pub mod detect;
mod ext_fields;
pub mod fuzzing;
pub mod headers;
mod json_header;
pub mod message;
pub mod refusals;

pub use codec::{
    decode_frame, decode_header, encode, encode_header, encode_into, encode_prefix, Decoded, Frame,
    RemotingDecoder, FRAME_BYTES_MAX_DEFAULT, FRAME_PREFIX_BYTES, HEADER_BYTES_MAX,
};
pub use command::{
    ExtFields, LanguageCode, RemotingCommand, SerializeType, FLAG_ONEWAY, FLAG_RESPONSE,
};

/// Everything that can go wrong decoding or encoding remoting data. Decoding received bytes
/// never panics; it returns one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemotingError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: u64, max: u32 },
    #[error("frame length {frame_len} is invalid")]
    BadFrameLength { frame_len: i64 },
    #[error("header length {header_len} does not fit in a frame of {frame_len} bytes (header limit {HEADER_BYTES_MAX})")]
    BadHeaderLength { header_len: u32, frame_len: u32 },
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    #[error("{what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("{what}: invalid length {len}")]
    BadLength { what: &'static str, len: i64 },
    #[error("{what}: {len} bytes left over")]
    TrailingBytes { what: &'static str, len: usize },
    #[error("{what}: not valid UTF-8")]
    InvalidUtf8 { what: &'static str },
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("header field {field}: {reason}")]
    BadHeaderField { field: &'static str, reason: String },
    #[error("missing required field {0}")]
    MissingField(&'static str),
    #[error("field {field}: {value:?} is not a valid {expected}")]
    InvalidField {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("cannot encode {what}: value {value} out of range")]
    OutOfRange { what: &'static str, value: i64 },
    #[error("invalid message id {0:?}")]
    BadMessageId(String),
}

impl From<serde_json::Error> for RemotingError {
    fn from(e: serde_json::Error) -> Self {
        RemotingError::Json(e.to_string())
    }
}

pub type Result<T, E = RemotingError> = std::result::Result<T, E>;
