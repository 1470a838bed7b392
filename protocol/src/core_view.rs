//! How a RocketMQ (remoting) client sees a broker of several cores: each core as a broker of
//! its own, so that a client that only knows the addresses in the route sends every request
//! straight to the core that owns its queue.
//!
//! Core `c` of broker `name` is the broker `name` when the broker runs one core and
//! `name-c<c>` otherwise, at the core's direct address. It holds the topic's queues whose
//! owning shard that core hosts, numbered `0..` in the order of their queue ids (the ids the
//! native protocol and the stored records use). Pure, and shared by the NameServer (which
//! writes routes) and the broker (which translates the queue ids of requests), so both
//! agree without asking.

use crate::{queue_owner_shard, shard_core};

/// The broker name core `core` of `broker_name` has in RocketMQ routes.
pub fn core_broker_name(broker_name: &str, core: u16, cores: u16) -> String {
    if cores <= 1 {
        broker_name.to_owned()
    } else {
        format!("{broker_name}-c{core}")
    }
}

/// RocketMQ's fixed system topics (`TopicValidator`'s set): its tools leave them out of what
/// they export or list as users' topics, and its metrics mark them `is_system`. Topics
/// named `rmq_sys_...` are system topics too.
pub const SYSTEM_TOPICS: &[&str] = &[
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
];

/// The topics a broker of `cores` cores serves for itself, which RocketMQ counts among its
/// system topics: the name of its cluster, its own name and each core's broker name
/// ([`core_broker_name`]; the broker's own name again when it runs one core).
pub fn broker_own_topics(cluster: &str, broker_name: &str, cores: u16) -> Vec<String> {
    let mut topics = vec![cluster.to_owned(), broker_name.to_owned()];
    if cores > 1 {
        topics.extend((0..cores).map(|c| core_broker_name(broker_name, c, cores)));
    }
    topics
}

/// The core a RocketMQ broker name of `broker_name` stands for; `None` when it names
/// another broker or a core the broker does not run.
pub fn core_of_broker_name(broker_name: &str, name: &str, cores: u16) -> Option<u16> {
    if cores <= 1 {
        return (name == broker_name).then_some(0);
    }
    let core: u16 = name
        .strip_prefix(broker_name)?
        .strip_prefix("-c")?
        .parse()
        .ok()?;
    (core < cores).then_some(core)
}

/// The queues of a topic with `queue_count` queues that core `core` holds: their queue ids,
/// in order (position `i` is the core's RocketMQ queue `i`).
pub fn core_queue_ids(
    topic: &str,
    queue_count: u32,
    shard_count: u16,
    cores: u16,
    core: u16,
) -> Vec<u32> {
    (0..queue_count)
        .filter(|&q| shard_core(queue_owner_shard(topic, q, shard_count), cores) == core)
        .collect()
}

/// How many of the core's queues (see [`core_queue_ids`]) have an id below `count`: the
/// core's share of a topic's `count` write (or read) queues.
pub fn core_queue_count(ids: &[u32], count: u32) -> u32 {
    ids.partition_point(|&q| q < count) as u32
}

/// The queue id of the core's RocketMQ queue `local`; `None` past the core's queues.
pub fn global_queue_id(ids: &[u32], local: u32) -> Option<u32> {
    ids.get(local as usize).copied()
}

/// The core's RocketMQ queue number of queue id `global`; `None` when the core does not hold
/// it.
pub fn local_queue_id(ids: &[u32], global: u32) -> Option<u32> {
    ids.binary_search(&global).ok().map(|i| i as u32)
}

/// The addresses of a registered broker's cores, core 0 first (its master address alone for a
/// registration without them).
pub fn core_addrs(b: &crate::BrokerData) -> Vec<String> {
    if !b.core_addrs.is_empty() {
        return b.core_addrs.clone();
    }
    b.master_addr().map(str::to_owned).into_iter().collect()
}

/// One core of a broker as a topic's RocketMQ route lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreRoute<'a> {
    pub broker: &'a crate::BrokerData,
    pub core: u16,
    pub cores: u16,
    /// The core's address on the broker that registered.
    pub addr: String,
    /// The core's RocketMQ broker name ([`core_broker_name`]).
    pub broker_name: String,
    /// The core's share of the topic's read and write queues.
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

/// The brokers of a topic's route as RocketMQ clients see them: one per core that holds
/// some of its queues, in the route's order. The NameServer writes RocketMQ routes from
/// it, and the broker assigns queues over it (QUERY_ASSIGNMENT).
pub fn core_routes<'a>(topic: &str, route: &'a crate::RouteData) -> Vec<CoreRoute<'a>> {
    let mut out = Vec::new();
    for (b, q) in route.brokers.iter().zip(&route.queues) {
        debug_assert_eq!(b.broker_name, q.broker_name);
        let addrs = core_addrs(b);
        let cores = addrs.len() as u16;
        let shards = b.shard_count.max(1);
        let all = q.read_queues.max(q.write_queues);
        for (core, addr) in addrs.into_iter().enumerate() {
            let core = core as u16;
            let ids = core_queue_ids(topic, all, shards, cores, core);
            if ids.is_empty() {
                continue;
            }
            out.push(CoreRoute {
                broker: b,
                core,
                cores,
                addr,
                broker_name: core_broker_name(&b.broker_name, core, cores),
                read_queues: core_queue_count(&ids, q.read_queues),
                write_queues: core_queue_count(&ids, q.write_queues),
                perm: q.perm,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_core_is_the_broker_itself() {
        assert_eq!(core_broker_name("broker-a", 0, 1), "broker-a");
        assert_eq!(core_of_broker_name("broker-a", "broker-a", 1), Some(0));
        assert_eq!(core_queue_ids("T", 4, 1, 1, 0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_broker_serves_its_cluster_its_name_and_each_core_s_name() {
        assert_eq!(broker_own_topics("C", "broker-a", 1), ["C", "broker-a"]);
        assert_eq!(broker_own_topics("C", "broker-a", 0), ["C", "broker-a"]);
        assert_eq!(
            broker_own_topics("C", "broker-a", 2),
            ["C", "broker-a", "broker-a-c0", "broker-a-c1"]
        );
    }

    #[test]
    fn cores_are_brokers_named_after_them_and_names_map_back() {
        assert_eq!(core_broker_name("broker-a", 1, 2), "broker-a-c1");
        assert_eq!(core_of_broker_name("broker-a", "broker-a-c1", 2), Some(1));
        assert_eq!(core_of_broker_name("broker-a", "broker-a-c2", 2), None);
        assert_eq!(core_of_broker_name("broker-a", "broker-b-c0", 2), None);
        assert_eq!(core_of_broker_name("broker-a", "broker-a", 2), None);
    }

    #[test]
    fn every_queue_belongs_to_exactly_one_core_and_maps_both_ways() {
        for (shards, cores) in [(2u16, 2u16), (4, 2), (3, 2), (8, 3), (2, 1)] {
            let mut seen = Vec::new();
            for core in 0..cores {
                let ids = core_queue_ids("TopicTest", 16, shards, cores, core);
                for (local, &global) in ids.iter().enumerate() {
                    assert_eq!(global_queue_id(&ids, local as u32), Some(global));
                    assert_eq!(local_queue_id(&ids, global), Some(local as u32));
                    let owner = queue_owner_shard("TopicTest", global, shards);
                    assert_eq!(shard_core(owner, cores), core);
                }
                assert_eq!(global_queue_id(&ids, ids.len() as u32), None);
                seen.extend(ids);
            }
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..16).collect::<Vec<_>>(),
                "{shards} shards, {cores} cores"
            );
        }
    }

    #[test]
    fn a_core_s_share_of_fewer_write_queues_is_a_prefix() {
        let ids = [1, 3, 5, 7];
        assert_eq!(core_queue_count(&ids, 8), 4);
        assert_eq!(core_queue_count(&ids, 4), 2);
        assert_eq!(core_queue_count(&ids, 0), 0);
    }
}
