//! The NameServer: a light, stateless registry of live brokers and topic routes.
//!
//! Brokers register with every NameServer, re-register every 30 s and heartbeat every second
//! over one long-lived connection each; a broker leaves the routes as soon as the connection
//! it last registered or heartbeated over closes, and, as a fallback for one that freezes
//! with its connection open, once silent for longer than
//! [`NameServerConfig::broker_expiry_ms`].
//! Producers and consumers ask for the route of a topic. Several NameServers run side by side
//! without talking to each other; all state is in memory, but for the KV config, which
//! `--kv-config-path` keeps in a file.
//!
//! The service is deliberately small and tokio-free: one accept thread, one thread per
//! connection, one scan thread, and the [`RouteTable`] behind a mutex. Idle connections
//! are closed after [`NameServerConfig::connection_idle_timeout_ms`], and at
//! [`NameServerConfig::connections_max`] a newcomer evicts the longest-idle connection, so
//! idle connections cannot lock clients or brokers out. Its load is a few
//! requests per broker per 30 s plus route look-ups, so a lock is not a bottleneck here.
//!
//! Embed it with [`start`]; the `namesrv` binary is a thin wrapper around it.

mod access;
mod admin;
pub mod cli;
mod config;
mod connections;
mod handler;
mod kv;
pub mod metrics;
mod rocketmq;
pub mod route_table;
mod server;

pub use config::NameServerConfig;
pub use route_table::{Registered, RouteTable};
pub use server::{start, NameServerHandle};

/// The errors of this crate. Wire response codes are chosen from these only at the edge
/// (the request handler).
#[derive(Debug, thiserror::Error)]
pub enum NameSrvError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid broker registration: {0}")]
    BadRegistration(String),
    /// A master registration (broker id 0) whose controller epoch is older than that of the
    /// live master another address holds: the registering broker has been fenced.
    #[error(
        "broker {broker_name}: stale master epoch {epoch} < current {current} held by {holder}"
    )]
    StaleMasterEpoch {
        broker_name: String,
        epoch: u32,
        current: u32,
        holder: String,
    },
}

impl From<NameSrvError> for std::io::Error {
    fn from(e: NameSrvError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}
