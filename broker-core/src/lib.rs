//! The broker's per-core kernel: one [`core::Core`] per glommio executor, its shards, and
//! the handlers every front end calls with plain values. It knows no wire protocol: it
//! reaches clients through [`link::ClientLink`], which the front ends implement, and it
//! lends replication its topics and offsets through `ReplicaHost` ([`replica`]).
//!
//! * [`core`]: one core's state, `at_shard`/`at_core`, the request handlers.
//! * [`mesh`]: all cross-core traffic (one enum, bounded inboxes); [`calls`]: each op's own
//!   answer type and how it is served.
//! * [`live_config`]: the config each core runs with, and its changes while running.
//! * [`groups`]: consumer group membership, committed offsets and queue leases.
//! * [`topics`], [`numbering`]: the topic table; how each core numbers a topic's queues.
//! * [`timer`], [`transaction`], [`reply`], [`filters`], [`sub_groups`]: scheduled
//!   messages, half messages and their check-back, request-reply, SQL92, group configs.
//! * [`pop`]: POP consumption (RocketMQ 5): windows of popped messages per queue, kept in
//!   the shard's log; [`priority`]: priority messages (RocketMQ 5.4), their queue and the
//!   order pops read a core's queues in.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod broker_stats;
pub mod calls;
pub mod core;
pub mod dedup;
pub mod filters;
pub mod groups;
pub mod lifecycle;
pub mod link;
pub mod lite;
pub mod live_config;
pub mod mesh;
pub mod numbering;
pub mod pop;
pub mod priority;
pub mod quota;
pub mod replica;
pub mod reply;
pub mod rocketmq_metrics;
pub mod sub_groups;
pub mod timer;
pub mod topics;
pub mod transaction;

// The layers below, by the names the kernel's modules use.
pub use broker_base::{config, durable, error, heap, shared, stages};
pub use broker_replication as ha;

pub use crate::core::Core;
pub use broker_base::{BrokerConfig, BrokerError, Shared};
