//! The broker's front ends: the native protocol ([`conn`]) and RocketMQ's remoting protocol
//! ([`rocketmq`]) on the same ports, the connections and their limits ([`connections`]),
//! work sharing between a core's connections ([`turn`]), the ACL gate ([`access`]) and
//! the quota check beside it ([`admission`]),
//! requests from the broker to a client ([`client_conn`]), gRPC's transport for RocketMQ 5's
//! clients ([`grpc`], not yet on the connection path), and the NameServer registration
//! thread ([`registry`]). Each core has one [`front::Front`]: its kernel
//! ([`broker_core::Core`]) and the state only the front ends keep; the kernel reaches
//! clients through [`front::Front`]'s [`broker_core::link::ClientLink`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod access;
pub mod admission;
pub mod client_conn;
pub mod conn;
pub mod connections;
pub mod front;
pub mod grpc;
pub mod lanes;
pub mod registry;
pub mod rocketmq;
pub mod routes;
pub mod turn;

// The layers below, by the names the front ends' modules use.
pub use broker_base::{config, deadline, durable, error, shared, stages};
pub use broker_core::{
    core, groups, mesh, numbering, reply, sub_groups, timer, topics, transaction,
};
pub use broker_replication as ha;

pub use front::Front;
