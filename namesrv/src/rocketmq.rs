//! The NameServer's answers to RocketMQ clients (the remoting protocol): routes, cluster
//! info and topic lists, built from the same route table the native protocol reads.
//!
//! A broker of several cores appears as one RocketMQ broker per core (see
//! `protocol::core_view`): `broker-a-c0`, `broker-a-c1`, … at each core's direct address,
//! each with the topic's queues its core owns. A client that only knows the route's
//! addresses therefore sends every request to the core that serves it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use protocol::core_view::{core_addrs, core_broker_name, core_routes};
use remoting::body::{self, JsonForm};
use remoting::codes::{request, response};
use remoting::headers::GetRouteInfoRequestHeader;
use remoting::RemotingCommand;

use crate::handler::lock;
use crate::RouteTable;

/// Queues per core in the route of a cluster's own topic (RocketMQ's `TopicConfig` default).
const CLUSTER_TOPIC_QUEUES: i32 = 16;

/// Answers one remoting request: the response and its body.
pub(crate) fn handle(
    table: &Mutex<RouteTable>,
    req: &RemotingCommand,
    now: Instant,
) -> (RemotingCommand, Vec<u8>) {
    let reply = |code: i32, remark: Option<String>| RemotingCommand::response_to(req, code, remark);
    match req.code {
        request::GET_ROUTEINFO_BY_TOPIC => {
            let h: GetRouteInfoRequestHeader = match req.ext_header() {
                Ok(h) => h,
                Err(e) => return (reply(response::SYSTEM_ERROR, Some(e.to_string())), Vec::new()),
            };
            let form = if h.wants_standard_json(req) {
                JsonForm::Standard
            } else {
                JsonForm::Fastjson
            };
            let route = {
                let table = lock(table);
                // RocketMQ's `TBW102`, the topic a producer asks for before it sends to a
                // topic that does not exist yet, is served only as the brokers register it:
                // they do when they create topics on first send (`auto_create_topic_enable`).
                // Without it, a client's send to an unknown topic fails at once with "No
                // route info of this topic", as against RocketMQ.
                match table.route(&h.topic, now) {
                    Some(r) => Some(route_data(&h.topic, &r)),
                    None => own_topic_route(&h.topic, &table.cluster_info(now)),
                }
            };
            match route.filter(|r| !r.queue_datas.is_empty()) {
                Some(r) => json_answer(req, &r, form),
                None => (
                    reply(
                        response::TOPIC_NOT_EXIST,
                        Some(format!(
                            "No topic route info in name server for the topic: {}",
                            h.topic
                        )),
                    ),
                    Vec::new(),
                ),
            }
        }
        request::GET_BROKER_CLUSTER_INFO => {
            let info = cluster_info(&lock(table).cluster_info(now));
            json_answer(req, &info, JsonForm::Standard)
        }
        request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER | request::GET_TOPICS_BY_CLUSTER => {
            let list = body::TopicList {
                broker_addr: None,
                topic_list: lock(table).topic_list(now),
            };
            json_answer(req, &list, JsonForm::Standard)
        }
        // RocketMQ's deleteTopic, after it deleted the topic on the brokers (which stop
        // registering it). Deleting a topic nobody has is a success, as in RocketMQ.
        request::DELETE_TOPIC_IN_NAMESRV => match req.ext("topic").filter(|t| !t.is_empty()) {
            Some(topic) => {
                let cluster = req.ext("clusterName").filter(|c| !c.is_empty());
                let dropped = lock(table).delete_topic(topic, cluster);
                tracing::info!(topic, cluster, dropped, "topic deleted from the routes");
                (reply(response::SUCCESS, None), Vec::new())
            }
            None => (
                reply(response::SYSTEM_ERROR, Some("topic is required".into())),
                Vec::new(),
            ),
        },
        code => (
            reply(
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(
                    "request code {code} ({}) is not supported by the corvus NameServer; corvus brokers register over the native protocol",
                    request::name(code).unwrap_or("unknown")
                )),
            ),
            Vec::new(),
        ),
    }
}

fn json_answer<T: serde::Serialize>(
    req: &RemotingCommand,
    value: &T,
    form: JsonForm,
) -> (RemotingCommand, Vec<u8>) {
    match body::to_json(value, form) {
        Ok(b) => (
            RemotingCommand::response_to(req, response::SUCCESS, None),
            b,
        ),
        Err(e) => (
            RemotingCommand::response_to(req, response::SYSTEM_ERROR, Some(e.to_string())),
            Vec::new(),
        ),
    }
}

/// Each core's address of a broker: its direct addresses, or its one address when it
/// registered none.
/// The RocketMQ broker entry of one core: each live member of the group under its own id
/// (the master under 0, its slaves under theirs), at that member's address for the core,
/// so RocketMQ clients send to the master and may read from a slave (`slave_read_enable`).
/// While the master is away there is no id 0: clients do not send there, and read from a
/// slave. Without members' core addresses (an older registration), `addr` under 0.
fn core_broker(b: &protocol::BrokerData, core: u16, cores: u16, addr: &str) -> body::BrokerData {
    let mut broker_addrs = BTreeMap::new();
    for (id, member_cores) in &b.member_core_addrs {
        let at = if member_cores.is_empty() {
            b.addrs
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, a)| a.clone())
        } else {
            member_cores
                .get(core as usize % member_cores.len())
                .cloned()
        };
        if let (Some(at), Ok(id)) = (at, i64::try_from(*id)) {
            broker_addrs.insert(id, at);
        }
    }
    if broker_addrs.is_empty() {
        broker_addrs.insert(0, addr.to_owned());
    }
    body::BrokerData {
        broker_addrs,
        broker_name: core_broker_name(&b.broker_name, core, cores),
        cluster: b.cluster.clone(),
        enable_acting_master: false,
        zone_name: None,
    }
}

/// A topic's route as RocketMQ clients read it: one broker per core that holds some of the
/// topic's queues.
fn route_data(topic: &str, route: &protocol::RouteData) -> body::TopicRouteData {
    let mut out = body::TopicRouteData::default();
    for c in core_routes(topic, route) {
        let broker = core_broker(c.broker, c.core, c.cores, &c.addr);
        out.queue_datas.push(body::QueueData {
            broker_name: c.broker_name,
            perm: c.perm as i32,
            read_queue_nums: c.read_queues as i32,
            write_queue_nums: c.write_queues as i32,
            topic_sys_flag: 0,
        });
        out.broker_datas.push(broker);
    }
    out
}

/// The route of a topic named after a cluster or a broker, which every RocketMQ broker
/// registers for itself (`TopicConfigManager`: its cluster's name with 16 queues, its own
/// name with one, both readable and writable): Apache's Proxy finds a cluster's brokers by
/// the route of the cluster's name. Each core of a live broker of the cluster appears, or
/// the one core named; `None` when the topic names neither.
fn own_topic_route(topic: &str, info: &protocol::ClusterInfo) -> Option<body::TopicRouteData> {
    let mut out = body::TopicRouteData::default();
    for b in &info.brokers {
        let addrs = core_addrs(b);
        let cores = addrs.len() as u16;
        for (core, addr) in addrs.iter().enumerate() {
            let broker = core_broker(b, core as u16, cores, addr);
            let queues = if b.cluster == topic {
                CLUSTER_TOPIC_QUEUES
            } else if broker.broker_name == topic {
                1
            } else {
                continue;
            };
            out.queue_datas.push(body::QueueData {
                broker_name: broker.broker_name.clone(),
                perm: body::perm::READ | body::perm::WRITE | body::perm::INHERIT,
                read_queue_nums: queues,
                write_queue_nums: queues,
                topic_sys_flag: 0,
            });
            out.broker_datas.push(broker);
        }
    }
    (!out.broker_datas.is_empty()).then_some(out)
}

/// Every live broker's cores as RocketMQ brokers, by cluster.
fn cluster_info(info: &protocol::ClusterInfo) -> body::ClusterInfo {
    let mut out = body::ClusterInfo::default();
    for b in &info.brokers {
        let addrs = core_addrs(b);
        let cores = addrs.len() as u16;
        for (core, addr) in addrs.iter().enumerate() {
            let broker = core_broker(b, core as u16, cores, addr);
            out.cluster_addr_table
                .entry(b.cluster.clone())
                .or_default()
                .push(broker.broker_name.clone());
            out.broker_addr_table
                .insert(broker.broker_name.clone(), broker);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use protocol::core_view::core_queue_ids;

    fn broker(cores: usize) -> protocol::BrokerData {
        protocol::BrokerData {
            cluster: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            addrs: vec![(0, "127.0.0.1:10911".into())],
            core_addrs: (0..cores)
                .map(|c| format!("127.0.0.1:{}", 20000 + c))
                .collect(),
            shard_count: cores as u16,
            member_core_addrs: vec![],
        }
    }

    #[test]
    fn each_core_is_a_broker_with_its_own_queues_and_address() {
        let route = protocol::RouteData {
            brokers: vec![broker(2)],
            queues: vec![protocol::QueueData {
                broker_name: "broker-a".into(),
                read_queues: 8,
                write_queues: 8,
                perm: 6,
            }],
        };
        let r = route_data("TopicTest", &route);
        assert_eq!(r.broker_datas.len(), 2);
        let names: Vec<&str> = r
            .broker_datas
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, ["broker-a-c0", "broker-a-c1"]);
        assert_eq!(r.broker_datas[1].broker_addrs[&0], "127.0.0.1:20001");
        let total: i32 = r.queue_datas.iter().map(|q| q.write_queue_nums).sum();
        assert_eq!(total, 8, "every queue is on exactly one core");
        for (core, q) in r.queue_datas.iter().enumerate() {
            let ids = core_queue_ids("TopicTest", 8, 2, 2, core as u16);
            assert_eq!(q.read_queue_nums as usize, ids.len());
        }
    }

    /// Each core lists its slave beside its master; without the master, only the slave
    /// (no id 0: RocketMQ clients then send elsewhere and read from the slave).
    #[test]
    fn each_core_lists_the_group_members_under_their_ids() {
        let mut b = broker(2);
        b.addrs.push((1, "127.0.0.1:10921".into()));
        b.member_core_addrs = vec![
            (0, vec!["127.0.0.1:20000".into(), "127.0.0.1:20001".into()]),
            (1, vec!["127.0.0.1:30000".into(), "127.0.0.1:30001".into()]),
        ];
        let route = |b: protocol::BrokerData| protocol::RouteData {
            brokers: vec![b],
            queues: vec![protocol::QueueData {
                broker_name: "broker-a".into(),
                read_queues: 8,
                write_queues: 8,
                perm: 6,
            }],
        };
        let r = route_data("TopicTest", &route(b.clone()));
        for (core, bd) in r.broker_datas.iter().enumerate() {
            assert_eq!(
                bd.broker_addrs,
                BTreeMap::from([
                    (0, format!("127.0.0.1:{}", 20000 + core)),
                    (1, format!("127.0.0.1:{}", 30000 + core)),
                ])
            );
        }
        // The master gone: its slave's cores, under id 1 only.
        let mut away = b;
        away.addrs.remove(0);
        away.member_core_addrs.remove(0);
        away.core_addrs = vec!["127.0.0.1:30000".into(), "127.0.0.1:30001".into()];
        let r = route_data("TopicTest", &route(away));
        assert_eq!(r.broker_datas.len(), 2);
        for (core, bd) in r.broker_datas.iter().enumerate() {
            assert_eq!(
                bd.broker_addrs,
                BTreeMap::from([(1, format!("127.0.0.1:{}", 30000 + core))])
            );
        }
    }

    #[test]
    fn one_core_keeps_the_broker_name_and_an_unknown_topic_is_topic_not_exist() {
        let table = Mutex::new(RouteTable::new(std::time::Duration::from_secs(10)));
        let mut req = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 9);
        req.ext_fields.insert("topic".into(), "Nope".into());
        let (resp, body) = handle(&table, &req, Instant::now());
        assert_eq!((resp.code, resp.opaque), (response::TOPIC_NOT_EXIST, 9));
        assert!(resp.remark.unwrap_or_default().contains("Nope"));
        assert!(body.is_empty());
        let info = protocol::ClusterInfo {
            brokers: vec![broker(1)],
        };
        let c = cluster_info(&info);
        assert!(c.broker_addr_table.contains_key("broker-a"));
        assert_eq!(c.cluster_addr_table["DefaultCluster"], ["broker-a"]);
    }

    #[test]
    fn unknown_codes_are_not_supported_with_a_remark() {
        let table = Mutex::new(RouteTable::new(std::time::Duration::from_secs(10)));
        let req = RemotingCommand::request(request::REGISTER_BROKER, 3);
        let (resp, _) = handle(&table, &req, Instant::now());
        assert_eq!(resp.code, response::REQUEST_CODE_NOT_SUPPORTED);
        assert!(resp.remark.unwrap_or_default().contains("REGISTER_BROKER"));
    }

    /// A two-core broker-a of DefaultCluster registered in a fresh table with `topics`.
    fn table_with(topics: Vec<protocol::TopicConfig>) -> Mutex<RouteTable> {
        let mut table = RouteTable::new(std::time::Duration::from_secs(10));
        let b = broker(2);
        table
            .register(
                protocol::RegisterBroker {
                    key: protocol::BrokerKey {
                        cluster: b.cluster.clone(),
                        broker_name: b.broker_name.clone(),
                        broker_id: 0,
                    },
                    addr: "127.0.0.1:10911".into(),
                    core_addrs: b.core_addrs.clone(),
                    shard_count: 2,
                    topics,
                    master_epoch: 0,
                },
                Instant::now(),
            )
            .unwrap();
        Mutex::new(table)
    }

    fn route_of(table: &Mutex<RouteTable>, topic: &str) -> (i32, Option<body::TopicRouteData>) {
        let mut req = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 5);
        req.ext_fields.insert("topic".into(), topic.into());
        let (resp, b) = handle(table, &req, Instant::now());
        let route = (resp.code == response::SUCCESS).then(|| body::from_json(&b).unwrap());
        (resp.code, route)
    }

    /// With auto-creation off a broker does not register TBW102, and its route is not
    /// served: a client's send to an unknown topic then fails at once ("No route info").
    /// With it on, the route is the registered one.
    #[test]
    fn tbw102_is_served_only_as_the_brokers_register_it() {
        let off = table_with(vec![]);
        assert_eq!(route_of(&off, "TBW102").0, response::TOPIC_NOT_EXIST);
        let tbw = protocol::TopicConfig {
            name: "TBW102".into(),
            read_queues: 8,
            write_queues: 8,
            perm: 7,
        };
        let on = table_with(vec![tbw]);
        let (code, route) = route_of(&on, "TBW102");
        assert_eq!(code, response::SUCCESS);
        let total: i32 = route
            .unwrap()
            .queue_datas
            .iter()
            .map(|q| q.write_queue_nums)
            .sum();
        assert_eq!(total, 8);
    }

    /// As every RocketMQ broker registers a topic named after its cluster and one named
    /// after itself, the cluster's name routes to all its brokers (each core) and a core's
    /// broker name to that core.
    #[test]
    fn the_cluster_and_broker_names_route_to_their_brokers() {
        let table = table_with(vec![]);
        let (code, route) = route_of(&table, "DefaultCluster");
        assert_eq!(code, response::SUCCESS);
        let route = route.unwrap();
        let names: Vec<&str> = route
            .broker_datas
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, ["broker-a-c0", "broker-a-c1"]);
        assert!(route
            .queue_datas
            .iter()
            .all(|q| q.perm & body::perm::WRITE != 0 && q.read_queue_nums == CLUSTER_TOPIC_QUEUES));
        let (_, one) = route_of(&table, "broker-a-c1");
        let one = one.unwrap();
        assert_eq!(one.broker_datas.len(), 1);
        assert_eq!(one.broker_datas[0].broker_addrs[&0], "127.0.0.1:20001");
        assert_eq!(
            route_of(&table, "OtherCluster").0,
            response::TOPIC_NOT_EXIST
        );
        // A topic a broker registered under such a name is routed as registered.
        let t = protocol::TopicConfig {
            name: "DefaultCluster".into(),
            read_queues: 1,
            write_queues: 1,
            perm: 6,
        };
        let (_, route) = route_of(&table_with(vec![t]), "DefaultCluster");
        assert_eq!(route.unwrap().broker_datas.len(), 1);
    }
}
