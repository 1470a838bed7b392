//! Wire types and framing of the failover controller.
//!
//! Shared by three callers with different runtimes: the controller (tokio), the broker
//! (glommio, one connection per core or one for the whole broker) and mqadmin (blocking).
//! So this crate has no async runtime and does no I/O except in [`client`], a small
//! blocking client built on `std::net`.
//!
//! A frame is a `u32` big-endian body length followed by a JSON body (serde_json). Bodies
//! larger than [`MAX_FRAME_BYTES`] are refused on both encode and decode, so a corrupt or
//! hostile length cannot make a reader allocate without bound.
//!
//! With credentials ([`ClientConfig::credentials`]) every request goes as a
//! [`Request::Signed`] envelope, signed anew at each attempt ([`encode_signed`]): controllers
//! with access control on take nothing else.
//!
//! A broker's loop is: [`encode`] a [`Request::BrokerHeartbeat`], write the bytes, feed what
//! it reads into a [`FrameDecoder`], and [`decode`] each complete frame as a [`Response`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod client;
mod frame;
mod types;

pub use client::{Client, ClientConfig};
pub use frame::{body_len, decode, encode, FrameDecoder, FRAME_HEADER_BYTES, MAX_FRAME_BYTES};
pub use types::{
    ControllerNode, Heartbeat, ReplicaInfo, ReplicaState, Request, Response, SignedRequest,
};

/// The frame of `req`: as it is without credentials, else wrapped in a
/// [`Request::Signed`] envelope signed by them now.
pub fn encode_signed(
    req: &Request,
    credentials: Option<&acl::Credentials>,
) -> Result<Vec<u8>, ProtoError> {
    match credentials {
        None => encode(req),
        Some(c) => {
            let body = serde_json::to_string(req)?;
            encode(&Request::Signed(SignedRequest::sign(c, body)))
        }
    }
}

/// Errors of framing, decoding and the blocking client.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("frame body of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("malformed JSON body: {0}")]
    Json(#[from] serde_json::Error),
    #[error("i/o error talking to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection to {addr} closed mid-frame")]
    Closed { addr: String },
    #[error("no controller answered as leader after {attempts} attempts (last error: {last})")]
    NoLeader { attempts: u32, last: String },
    #[error("no controller address given")]
    NoAddress,
}
