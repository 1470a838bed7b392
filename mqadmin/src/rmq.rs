//! What the RocketMQ-named admin commands need from the NameServer, asked over remoting so
//! that mqadmin sees the brokers as RocketMQ's tools do: one broker per core
//! (`protocol::core_view`), each at its core's direct address.

use anyhow::{bail, Context};
use remoting::body::{ClusterInfo, TopicRouteData};
use remoting::codes::{request, response};

use crate::remoting_client::{call, Request};

/// A RocketMQ broker (one core of a corvus broker): its name in routes and its address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Core {
    pub broker_name: String,
    pub addr: String,
}

/// Asks each NameServer of `ns` (`;` separated) in turn until one answers; an answer
/// other than SUCCESS is returned as it is (the first NameServer that gave one).
pub fn ask_namesrv(
    ns: &str,
    make: impl Fn() -> Request,
) -> anyhow::Result<(i32, Option<String>, bytes::Bytes)> {
    let mut last_err = None;
    for addr in ns.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        match call(addr, make()) {
            Ok(a) => return Ok((a.code, a.remark, a.body)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no NameServer address given")))
}

/// A topic's route, as RocketMQ clients get it.
pub fn route(ns: &str, topic: &str) -> anyhow::Result<TopicRouteData> {
    let (code, remark, body) = ask_namesrv(ns, || {
        Request::new(request::GET_ROUTEINFO_BY_TOPIC)
            .field("topic", topic)
            .field("acceptStandardJsonOnly", "true")
    })?;
    match code {
        response::SUCCESS => remoting::body::from_json(&body)
            .with_context(|| format!("reading the route of {topic}")),
        response::TOPIC_NOT_EXIST => bail!("topic {topic} does not exist (no route)"),
        _ => bail!(
            "the NameServer answered code {code} for the route of {topic}: {}",
            remark.unwrap_or_default()
        ),
    }
}

/// The master of each broker in a topic's route.
pub fn route_masters(ns: &str, topic: &str) -> anyhow::Result<Vec<Core>> {
    let r = route(ns, topic)?;
    Ok(masters(r.broker_datas.iter()))
}

fn masters<'a>(brokers: impl Iterator<Item = &'a remoting::body::BrokerData>) -> Vec<Core> {
    let mut v: Vec<Core> = brokers
        .filter_map(|b| {
            Some(Core {
                broker_name: b.broker_name.clone(),
                addr: b.broker_addrs.get(&0)?.clone(),
            })
        })
        .collect();
    v.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    v
}

pub fn cluster_info(ns: &str) -> anyhow::Result<ClusterInfo> {
    let (code, remark, body) = ask_namesrv(ns, || Request::new(request::GET_BROKER_CLUSTER_INFO))?;
    if code != response::SUCCESS {
        bail!(
            "the NameServer answered code {code} for the cluster info: {}",
            remark.unwrap_or_default()
        );
    }
    remoting::body::from_json(&body).context("reading the cluster info")
}

/// Every master (core) of `cluster`, or of the only cluster registered.
pub fn cluster_cores(ns: &str, cluster: Option<&str>) -> anyhow::Result<Vec<Core>> {
    let info = cluster_info(ns)?;
    let cluster = match cluster {
        Some(c) => c.to_owned(),
        None => {
            let names: Vec<&String> = info.cluster_addr_table.keys().collect();
            match names.as_slice() {
                [one] => (*one).clone(),
                [] => bail!("no broker is registered with the NameServer"),
                many => bail!(
                    "several clusters ({}): choose one with -c or a broker with -b",
                    many.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    let Some(names) = info.cluster_addr_table.get(&cluster) else {
        bail!("no cluster named {cluster} is registered");
    };
    let cores = masters(names.iter().filter_map(|n| info.broker_addr_table.get(n)));
    if cores.is_empty() {
        bail!("cluster {cluster} has no master broker");
    }
    Ok(cores)
}

/// Every master (core) of every cluster.
pub fn all_cores(ns: &str) -> anyhow::Result<Vec<Core>> {
    let info = cluster_info(ns)?;
    Ok(masters(info.broker_addr_table.values()))
}

/// `-b ADDR` (one broker) or `-c CLUSTER` (every master of it; the only cluster when
/// neither is given).
pub fn targets(ns: &str, broker: Option<&str>, cluster: Option<&str>) -> anyhow::Result<Vec<Core>> {
    match broker {
        Some(addr) => Ok(vec![Core {
            broker_name: String::new(),
            addr: addr.to_owned(),
        }]),
        None => cluster_cores(ns, cluster),
    }
}
