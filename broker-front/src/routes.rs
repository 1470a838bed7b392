//! A topic's route across the cluster, for the answers that speak for every broker of it
//! (the remoting QUERY_ASSIGNMENT, the gRPC QueryRoute and QueryAssignment): the
//! NameServer's, as RocketMQ's broker and Proxy ask theirs. Asked on the blocking pool, so
//! the core keeps serving meanwhile.

use crate::front::Front;

/// One core of a broker of the route.
#[derive(Debug, Clone)]
pub struct RouteCore {
    /// The broker (group) it belongs to, as registered.
    pub broker: String,
    /// Its RocketMQ broker name (`protocol::core_view`).
    pub broker_name: String,
    /// The core's direct address on the group's master.
    pub addr: String,
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

/// The cores of every broker serving `topic`, as the NameServers hold them: `Ok(None)` when
/// no live broker serves it, `Err` when none answered (or none is configured).
pub async fn cluster_cores(f: &Front, topic: &str) -> Result<Option<Vec<RouteCore>>, String> {
    if f.shared.config.namesrv_list().is_empty() {
        return Err("no NameServer is configured".into());
    }
    let shared = f.shared.clone();
    let name = topic.to_owned();
    let route = glommio::executor()
        .spawn_blocking(move || crate::registry::query_route(&shared, &name))
        .await?;
    Ok(route.map(|route| {
        protocol::core_view::core_routes(topic, &route)
            .into_iter()
            .map(|c| RouteCore {
                broker: c.broker.broker_name.clone(),
                broker_name: c.broker_name,
                addr: c.addr,
                read_queues: c.read_queues,
                write_queues: c.write_queues,
                perm: c.perm,
            })
            .collect()
    }))
}
