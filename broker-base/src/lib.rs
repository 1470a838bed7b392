//! The broker's bottom layer, imported by every layer above and importing none of them.
//!
//! * [`config`]: every config key, its sources and bounds.
//! * [`error`]: [`BrokerError`], what a request can fail with.
//! * [`shared`]: the state every core and the broker's threads share.
//! * [`metrics`], [`stages`]: the Prometheus registry and where sends spend their time.
//! * [`tls`]: the listeners' and the outgoing links' TLS, accept and connect on glommio.
//! * [`deadline`], [`durable`]: a future under a timeout; a file replaced durably.
//! * [`heap`]: freed heap memory given back after large sends.
//! * [`idle_poll`]: polling for the next request after work, while the core has CPU to spare.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod auth;
pub mod config;
pub mod deadline;
pub mod durable;
pub mod error;
pub mod heap;
pub mod idle_poll;
pub mod metrics;
pub mod quota;
pub mod shared;
pub mod stages;
pub mod tls;

pub use config::BrokerConfig;
pub use error::BrokerError;
pub use shared::Shared;
