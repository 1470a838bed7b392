//! QueryRoute and QueryAssignment: where a v5 client sends each request.
//!
//! The route holds every core of this broker as a broker of its own (the names and queue
//! numbering of `protocol::core_view`, as in the NameServer's routes for remoting clients),
//! each at its core's direct address: a client dials each core and every call about a queue
//! goes to the core that owns it, with no hop between cores. The cores of the cluster's
//! other brokers that serve the topic follow, as the NameServer routes them
//! (`crate::routes`), so a client dialling any one broker is led to all of them, as
//! RocketMQ's Proxy leads it to every broker; without a NameServer to ask, the route is
//! this broker's.

use grpc_proto::v2;
use protocol::core_view::{core_broker_name, core_queue_count};
use protocol::perm;

use super::{error_status, name_of, ok, status};
use crate::error::BrokerError;
use crate::front::Front;
use crate::numbering::CoreQueues;
use crate::routes::RouteCore;

/// The cores of the cluster's other brokers that serve `topic`; none when the NameServer
/// cannot say (the route is then this broker's own).
async fn peer_cores(f: &Front, topic: &str) -> Vec<RouteCore> {
    match crate::routes::cluster_cores(f, topic).await {
        Ok(cores) => cores
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.broker != f.shared.config.broker_name)
            .collect(),
        Err(e) => {
            tracing::debug!(%topic, "the route lists this broker only: {e}");
            Vec::new()
        }
    }
}

pub(super) async fn query_route(f: &Front, r: &v2::QueryRouteRequest) -> v2::QueryRouteResponse {
    let topic = name_of(&r.topic);
    let refused = |status| v2::QueryRouteResponse {
        status,
        message_queues: Vec::new(),
    };
    if let Err(e) = broker_core::topics::validate_topic_name(topic) {
        return refused(status(v2::Code::IllegalTopic, e.to_string()));
    }
    let own = f.topic_for_read(topic);
    let peers = peer_cores(f, topic).await;
    if let (Err(e), true) = (&own, peers.is_empty()) {
        return refused(error_status(e));
    }
    let types = accepted_types(f, topic);
    let mut message_queues = Vec::new();
    let mut push = |broker: &v2::Broker, perm: u32, readable: u32, writable: u32| {
        for local in 0..readable.max(writable) {
            message_queues.push(v2::MessageQueue {
                topic: r.topic.clone(),
                id: local as i32,
                permission: permission(perm, local < readable, local < writable) as i32,
                broker: Some(broker.clone()),
                accept_message_types: types.clone(),
            });
        }
    };
    if let Ok(cfg) = &own {
        for core in 0..f.shared.cores {
            let Some(broker) = broker_of(f, core) else {
                continue;
            };
            let queues = CoreQueues::of(f, topic, cfg, core);
            let readable = core_queue_count(&queues.ids, cfg.read_queues);
            let writable = core_queue_count(&queues.ids, cfg.write_queues);
            push(&broker, cfg.perm, readable, writable);
        }
    }
    for c in &peers {
        if let Some(broker) = broker_at(&c.broker_name, 0, &c.addr) {
            push(&broker, c.perm, c.read_queues, c.write_queues);
        }
    }
    v2::QueryRouteResponse {
        status: ok(),
        message_queues,
    }
}

/// Each core of the cluster that serves the topic, for a push consumer: one queue of id -1
/// per core (any queue of the core's), as RocketMQ's Proxy assigns one per broker.
pub(super) async fn query_assignment(
    f: &Front,
    r: &v2::QueryAssignmentRequest,
) -> v2::QueryAssignmentResponse {
    let topic = name_of(&r.topic);
    let refused = |status| v2::QueryAssignmentResponse {
        status,
        assignments: Vec::new(),
    };
    let own = f.topic_for_read(topic);
    let peers: Vec<RouteCore> = peer_cores(f, topic)
        .await
        .into_iter()
        .filter(|c| c.perm & perm::READ != 0 && c.read_queues > 0)
        .collect();
    let mut brokers: Vec<v2::Broker> = Vec::new();
    match &own {
        Ok(cfg) if cfg.perm & perm::READ != 0 && cfg.read_queues > 0 => {
            brokers.extend(
                (0..f.shared.cores)
                    .filter(|&core| {
                        let queues = CoreQueues::of(f, topic, cfg, core);
                        core_queue_count(&queues.ids, cfg.read_queues) > 0
                    })
                    .filter_map(|core| broker_of(f, core)),
            );
        }
        Ok(_) if peers.is_empty() => {
            return refused(status(
                v2::Code::Forbidden,
                format!("topic {topic} has no readable queue"),
            ))
        }
        Err(e) if peers.is_empty() => return refused(error_status(e)),
        _ => {}
    }
    brokers.extend(
        peers
            .iter()
            .filter_map(|c| broker_at(&c.broker_name, 0, &c.addr)),
    );
    let types = accepted_types(f, topic);
    let assignments = brokers
        .into_iter()
        .map(|broker| v2::Assignment {
            message_queue: Some(v2::MessageQueue {
                topic: r.topic.clone(),
                id: -1,
                permission: v2::Permission::ReadWrite as i32,
                broker: Some(broker),
                accept_message_types: types.clone(),
            }),
        })
        .collect();
    v2::QueryAssignmentResponse {
        status: ok(),
        assignments,
    }
}

/// A queue's permission: its topic's `perm` bits, where the queue is among the readable or
/// writable ones.
fn permission(perm: u32, readable: bool, writable: bool) -> v2::Permission {
    let read = readable && perm & perm::READ != 0;
    let write = writable && perm & perm::WRITE != 0;
    match (read, write) {
        (true, true) => v2::Permission::ReadWrite,
        (true, false) => v2::Permission::Read,
        (false, true) => v2::Permission::Write,
        (false, false) => v2::Permission::None,
    }
}

/// Core `core` as a broker of the route: its name and its direct address; `None` while the
/// core's address is not known (its listener is not up).
fn broker_of(f: &Front, core: u16) -> Option<v2::Broker> {
    let shared = &f.shared;
    let addr = shared
        .core_addrs
        .lock()
        .ok()
        .and_then(|a| a.get(usize::from(core)).cloned())?;
    broker_at(
        &core_broker_name(&shared.config.broker_name, core, shared.cores),
        shared.config.broker_id as i32,
        &addr,
    )
}

/// A broker of the route named `name` at `addr` (`host:port`); `None` for an address that
/// is not one.
fn broker_at(name: &str, id: i32, addr: &str) -> Option<v2::Broker> {
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse::<i32>().ok()?;
    let scheme = if host.parse::<std::net::Ipv4Addr>().is_ok() {
        v2::AddressScheme::IPv4
    } else if host.parse::<std::net::Ipv6Addr>().is_ok() {
        v2::AddressScheme::IPv6
    } else {
        v2::AddressScheme::DomainName
    };
    Some(v2::Broker {
        name: name.to_owned(),
        id,
        endpoints: Some(v2::Endpoints {
            scheme: scheme as i32,
            addresses: vec![v2::Address {
                host: host.trim_matches(['[', ']']).to_owned(),
                port,
            }],
        }),
    })
}

/// The message types a topic takes, from its `message.type` attribute: NORMAL when it has
/// none, as RocketMQ 5 reads an unset attribute.
pub(super) fn accepted_types(f: &Front, topic: &str) -> Vec<i32> {
    use v2::MessageType as T;
    let kind = f
        .topics
        .borrow()
        .attributes(topic)
        .get("message.type")
        .cloned();
    let types: &[T] = match kind.as_deref() {
        Some("FIFO") => &[T::Fifo],
        Some("DELAY") => &[T::Delay],
        Some("TRANSACTION") => &[T::Transaction],
        Some("PRIORITY") => &[T::Priority],
        Some("LITE") => &[T::Lite],
        Some("MIXED") => &[T::Normal, T::Fifo, T::Delay, T::Transaction],
        _ => &[T::Normal],
    };
    types.iter().map(|&t| t as i32).collect()
}

/// Whether `topic` takes messages of `kind`: its accepted types as the route gives them.
pub(super) fn check_type(f: &Front, topic: &str, kind: v2::MessageType) -> Result<(), BrokerError> {
    let accepted = accepted_types(f, topic);
    if accepted.contains(&(kind as i32)) {
        return Ok(());
    }
    let names: Vec<&str> = accepted
        .iter()
        .filter_map(|&t| v2::MessageType::try_from(t).ok())
        .map(|t| t.as_str_name())
        .collect();
    Err(BrokerError::MessageIllegal(format!(
        "topic {topic} takes {} messages, not {}",
        names.join("/"),
        kind.as_str_name()
    )))
}
