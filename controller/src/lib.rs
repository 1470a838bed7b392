//! The failover controller: a Raft-replicated record, per broker group, of the replicas,
//! the master, the master epoch and the SyncStateSet (RocketMQ 5's controller mode).
//!
//! openraft does the consensus. This crate is the rest:
//! * [`registry`]: the replicated state and the deterministic rules every command is
//!   checked against when it is applied (so two racing commands cannot both win);
//! * [`policy`]: the election policy, a pure function of the state, the leader's in-memory
//!   liveness table and a clock (unit-tested with a fake clock);
//! * [`log_store`] and [`state_machine`]: openraft's storage on disk;
//! * [`network`]: Raft RPCs between controllers over the same JSON frames as brokers use;
//! * [`service`]: heartbeats, admin requests and the election timer on the leader;
//! * [`server`]: the TCP listener that feeds both;
//! * [`access`]: with `--acl-file`, the signature, time and rights every frame must pass.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod access;
pub mod durable;
pub mod log_store;
pub mod network;
pub mod policy;
pub mod raft_types;
pub mod registry;
pub mod server;
pub mod service;
pub mod state_machine;

/// Errors of the controller's own code (openraft's errors stay openraft's).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt {what} in {path}: {detail}")]
    Corrupt {
        what: &'static str,
        path: String,
        detail: String,
    },
    #[error("bad configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Proto(#[from] controller_proto::ProtoError),
}
