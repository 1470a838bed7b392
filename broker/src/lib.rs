//! The broker binary's library: it composes the broker's layers and adds what only a
//! process has (sockets, executors pinned per core, threads, signals).
//!
//! The layers, each a crate importing only those below it:
//! * `broker-front`: the native and RocketMQ remoting front ends, connections, the ACL
//!   gate, requests to clients, the NameServer registration.
//! * `broker-core`: the per-core kernel (`at_shard`/`at_core`, the mesh, topics, groups,
//!   filters, the timer, transactions, request-reply); it knows no wire protocol.
//! * `broker-replication`: master/slave streaming per shard, epochs, the controller link.
//! * `broker-base`: config, errors, metrics, send stages, TLS settings, shared state.
//!
//! Here: [`bootstrap`] (start-up and shutdown), [`starting`] (each core's step of the start,
//! the watch over it), [`cli`] (the command line).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod bootstrap;
pub mod cli;
pub mod starting;

pub use bootstrap::{start, start_until, Running, StoppedWhileStarting};
pub use broker_base::{config, BrokerConfig, BrokerError};
