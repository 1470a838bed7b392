//! gRPC's transport on a broker core. RocketMQ 5's clients speak gRPC: HTTP/2 carrying
//! length-prefixed protobuf messages, ending each call with `grpc-status` trailers. This crate
//! runs the `h2` crate's HTTP/2 server on the glommio executor of the core that accepted the
//! socket ([`serve`]) and dispatches each request stream to a [`Handler`]: path, metadata and
//! the request message as opaque bytes in; the response message (unary) or messages
//! (server-streaming, through [`Replies`]) and a [`GrpcStatus`] out. A bidirectional call
//! reads its request messages as they come ([`Requests`]). Protobuf lives above it.
//!
//! h2 is written against tokio's io traits and uses tokio-util's codec; it starts no runtime
//! and spawns nothing. [`Compat`] presents the broker's futures-io sockets through those
//! traits, and every future here is polled by glommio: the connection's own task drives the
//! socket, one local task per request stream runs its handler.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod compat;
mod server;
mod status;

pub use compat::Compat;
pub use server::{
    encode_message, serve, Call, CallKind, Handler, Limits, Replies, Requests, ServeError,
    MESSAGE_PREFIX_BYTES,
};
pub use status::{Code, GrpcStatus};

/// h2 itself, for callers that need its types (the tests' client, a graceful shutdown).
pub use h2;
/// The http crate's types this crate's API uses (`HeaderMap` in [`Call`]).
pub use http;
