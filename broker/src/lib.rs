//! The thread-per-core broker.
//!
//! * [`bootstrap`]: start-up, one glommio executor pinned per core, listeners, shutdown.
//! * [`starting`]: each core's step of the start, the watch over it, the park guard.
//! * [`mesh`]: all cross-core traffic (one enum, bounded inboxes).
//! * [`core`]: one core's state and the request handlers (codec-independent).
//! * [`conn`]: the native protocol front end.
//! * [`groups`]: consumer group membership, committed offsets and queue leases.
//! * [`ha`]: master/slave replication, one stream per shard.
//! * [`controller_link`]: controller mode, the heartbeat to the failover controllers.
//! * [`topics`], [`registry`], [`config`]: the topic table, NameServer registration, config.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod access;
pub mod bootstrap;
pub mod cli;
pub mod client_conn;
pub mod config;
pub mod conn;
pub mod connections;
pub mod controller_link;
pub mod core;
mod deadline;
pub mod durable;
pub mod error;
pub mod filters;
pub mod groups;
pub mod ha;
pub mod mesh;
pub mod metrics;
pub mod registry;
pub mod reply;
pub mod rocketmq;
pub mod stages;
pub mod starting;
pub mod sub_groups;
pub mod timer;
pub mod tls;
pub mod topics;
pub mod transaction;

pub use bootstrap::{start, start_until, Running, StoppedWhileStarting};
pub use config::BrokerConfig;
pub use error::BrokerError;
