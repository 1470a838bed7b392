//! Topics and clusters: `update-topic`, `topic-list`, `topic-route`, `cluster-list`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::{bail, Context};
use client::Admin;
use protocol::{perm, BrokerData, TopicConfig};
use serde::Serialize;

use crate::output::Render;

/// Most queues `update-topic` creates per broker.
const QUEUES_MAX: u32 = 1024;

/// A broker as the NameServer knows it.
#[derive(Debug, Serialize)]
pub struct BrokerView {
    cluster: String,
    broker_name: String,
    addrs: Vec<BrokerAddr>,
    /// One direct address per core.
    core_addrs: Vec<String>,
    shard_count: u16,
}

/// One of a broker's addresses; id 0 is the master.
#[derive(Debug, Serialize)]
pub struct BrokerAddr {
    id: u64,
    addr: String,
}

impl From<&BrokerData> for BrokerView {
    fn from(b: &BrokerData) -> Self {
        Self {
            cluster: b.cluster.clone(),
            broker_name: b.broker_name.clone(),
            addrs: b
                .addrs
                .iter()
                .map(|(id, addr)| BrokerAddr {
                    id: *id,
                    addr: addr.clone(),
                })
                .collect(),
            core_addrs: b.core_addrs.clone(),
            shard_count: b.shard_count,
        }
    }
}

/// `topic-list`: the topics known to the NameServer, sorted.
#[derive(Debug, Serialize)]
pub struct TopicList {
    topics: Vec<String>,
}

impl Render for TopicList {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        self.topics.iter().try_for_each(|t| writeln!(w, "{t}"))
    }
}

pub fn topic_list(ns: &str) -> anyhow::Result<TopicList> {
    let mut topics = Admin::new(ns)?.topic_list()?;
    topics.sort();
    Ok(TopicList { topics })
}

/// `update-topic`: the topic's configuration and the brokers that now have it.
#[derive(Debug, Serialize)]
pub struct TopicCreated {
    topic: String,
    read_queues: u32,
    write_queues: u32,
    perm: u32,
    brokers: Vec<CreatedOn>,
}

/// A broker the topic was created on; the name is empty when it was given by address.
#[derive(Debug, Serialize)]
pub struct CreatedOn {
    broker_name: String,
    addr: String,
}

impl Render for TopicCreated {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        for b in &self.brokers {
            let who = if b.broker_name.is_empty() {
                b.addr.clone()
            } else {
                format!("{} ({})", b.broker_name, b.addr)
            };
            writeln!(
                w,
                "topic {} with {} read / {} write queues, perm {}, on {who}",
                self.topic, self.read_queues, self.write_queues, self.perm
            )?;
        }
        Ok(())
    }
}

/// Where `update-topic` creates the topic: one broker, or every master of a cluster.
pub enum Target {
    Broker(String),
    /// The named cluster, or the only one registered.
    Cluster(Option<String>),
}

/// A topic's queue counts and permission, as `update-topic` sets them.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

pub fn update_topic(
    ns: &str,
    topic: &str,
    shape: Shape,
    target: Target,
) -> anyhow::Result<TopicCreated> {
    for queues in [shape.read_queues, shape.write_queues] {
        if queues == 0 || queues > QUEUES_MAX {
            bail!("queue count must be 1..={QUEUES_MAX}, got {queues}");
        }
    }
    if shape.perm & !(perm::READ_WRITE | perm::INHERIT) != 0 {
        bail!(
            "perm must be a combination of 2 (write), 4 (read) and 1 (inherit), got {}",
            shape.perm
        );
    }
    if topic.is_empty() || topic.len() > message::TOPIC_LEN_MAX {
        bail!("topic name must be 1..={} bytes", message::TOPIC_LEN_MAX);
    }
    let admin = Admin::new(ns)?;
    let config = TopicConfig {
        name: topic.to_owned(),
        read_queues: shape.read_queues,
        write_queues: shape.write_queues,
        perm: shape.perm,
    };
    let targets = match target {
        Target::Broker(addr) => vec![CreatedOn {
            broker_name: String::new(),
            addr,
        }],
        Target::Cluster(cluster) => cluster_masters(&admin, cluster)?,
    };
    let mut done: Vec<CreatedOn> = Vec::with_capacity(targets.len());
    for target in targets {
        admin.create_topic(&target.addr, &config).with_context(|| {
            let mut what = format!("creating topic {topic} on {}", target.addr);
            if !done.is_empty() {
                // The ones before it have the topic: say so, as no result is printed.
                let addrs: Vec<&str> = done.iter().map(|d| d.addr.as_str()).collect();
                what.push_str(&format!(" (created on {} before)", addrs.join(", ")));
            }
            what
        })?;
        done.push(target);
    }
    Ok(TopicCreated {
        topic: topic.to_owned(),
        read_queues: shape.read_queues,
        write_queues: shape.write_queues,
        perm: shape.perm,
        brokers: done,
    })
}

/// The master of every broker of `cluster`, or of the only cluster registered.
fn cluster_masters(admin: &Admin, cluster: Option<String>) -> anyhow::Result<Vec<CreatedOn>> {
    let info = admin.cluster_info()?;
    let cluster = match cluster {
        Some(c) => c,
        None => {
            let mut names: Vec<&str> = info.brokers.iter().map(|b| b.cluster.as_str()).collect();
            names.sort();
            names.dedup();
            match names.as_slice() {
                [one] => (*one).to_owned(),
                [] => bail!("no broker is registered with the NameServer"),
                many => bail!(
                    "several clusters ({}): choose one with -c or a broker with -b",
                    many.join(", ")
                ),
            }
        }
    };
    let masters: Vec<CreatedOn> = info
        .brokers
        .iter()
        .filter(|b| b.cluster == cluster)
        .filter_map(|b| {
            Some(CreatedOn {
                broker_name: b.broker_name.clone(),
                addr: b.master_addr()?.to_owned(),
            })
        })
        .collect();
    if masters.is_empty() {
        bail!("cluster {cluster} has no master broker");
    }
    Ok(masters)
}

/// `topic-route`: brokers, queue counts, and each readable queue's shard and address.
#[derive(Debug, Serialize)]
pub struct TopicRoute {
    topic: String,
    brokers: Vec<BrokerView>,
    queue_data: Vec<QueueCounts>,
    queues: Vec<RoutedQueue>,
}

/// A broker's queue counts and permission for the topic.
#[derive(Debug, Serialize)]
pub struct QueueCounts {
    broker_name: String,
    read_queues: u32,
    write_queues: u32,
    perm: u32,
}

/// A readable queue and the core that serves it.
#[derive(Debug, Serialize)]
pub struct RoutedQueue {
    broker_name: String,
    queue_id: u32,
    shard: u16,
    addr: String,
    writable: bool,
}

impl Render for TopicRoute {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "topic {}", self.topic)?;
        for b in &self.brokers {
            let addrs: Vec<String> = b
                .addrs
                .iter()
                .map(|a| format!("{}={}", a.id, a.addr))
                .collect();
            writeln!(
                w,
                "broker {} cluster={} addrs=[{}] shards={} cores={}",
                b.broker_name,
                b.cluster,
                addrs.join(", "),
                b.shard_count,
                b.core_addrs.len()
            )?;
        }
        for q in &self.queue_data {
            writeln!(
                w,
                "queues {} read={} write={} perm={}",
                q.broker_name, q.read_queues, q.write_queues, q.perm
            )?;
        }
        for q in &self.queues {
            writeln!(
                w,
                "queue {}#{} shard={} addr={}",
                q.broker_name, q.queue_id, q.shard, q.addr
            )?;
        }
        Ok(())
    }
}

pub fn topic_route(ns: &str, topic: &str) -> anyhow::Result<TopicRoute> {
    let route = Admin::new(ns)?.topic_route(topic)?;
    let queues = route
        .read_queues()
        .iter()
        .map(|t| RoutedQueue {
            broker_name: t.queue.broker_name.clone(),
            queue_id: t.queue.queue_id,
            shard: t.shard,
            addr: t.addr.clone(),
            writable: route.write_queues().iter().any(|w| w.queue == t.queue),
        })
        .collect();
    Ok(TopicRoute {
        topic: topic.to_owned(),
        brokers: route.data.brokers.iter().map(BrokerView::from).collect(),
        queue_data: route
            .data
            .queues
            .iter()
            .map(|q| QueueCounts {
                broker_name: q.broker_name.clone(),
                read_queues: q.read_queues,
                write_queues: q.write_queues,
                perm: q.perm,
            })
            .collect(),
        queues,
    })
}

/// `cluster-list`: clusters by name, each with its brokers by name.
#[derive(Debug, Serialize)]
pub struct ClusterList {
    clusters: Vec<ClusterView>,
}

#[derive(Debug, Serialize)]
pub struct ClusterView {
    cluster: String,
    brokers: Vec<BrokerView>,
}

impl Render for ClusterList {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:<20} {:<20} {:>4} {:<24} {:>6} {:>6}",
            "CLUSTER", "BROKER", "ID", "ADDR", "CORES", "SHARDS"
        )?;
        for c in &self.clusters {
            for b in &c.brokers {
                for a in &b.addrs {
                    writeln!(
                        w,
                        "{:<20} {:<20} {:>4} {:<24} {:>6} {:>6}",
                        c.cluster,
                        b.broker_name,
                        a.id,
                        a.addr,
                        b.core_addrs.len(),
                        b.shard_count
                    )?;
                }
            }
        }
        Ok(())
    }
}

pub fn cluster_list(ns: &str) -> anyhow::Result<ClusterList> {
    let info = Admin::new(ns)?.cluster_info()?;
    let mut clusters: BTreeMap<&str, Vec<&BrokerData>> = BTreeMap::new();
    for b in &info.brokers {
        clusters.entry(b.cluster.as_str()).or_default().push(b);
    }
    Ok(ClusterList {
        clusters: clusters
            .into_iter()
            .map(|(cluster, mut brokers)| {
                brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
                ClusterView {
                    cluster: cluster.to_owned(),
                    brokers: brokers.into_iter().map(BrokerView::from).collect(),
                }
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{render, Format};
    use serde_json::{json, Value};

    fn broker() -> BrokerData {
        BrokerData {
            cluster: "C".into(),
            broker_name: "b1".into(),
            addrs: vec![(0, "127.0.0.1:10911".into())],
            core_addrs: vec!["127.0.0.1:10912".into(), "127.0.0.1:10913".into()],
            shard_count: 2,
            member_core_addrs: vec![],
        }
    }

    #[test]
    fn clusters_print_as_a_table_and_as_the_nameserver_shape() {
        let list = ClusterList {
            clusters: vec![ClusterView {
                cluster: "C".into(),
                brokers: vec![BrokerView::from(&broker())],
            }],
        };
        let v: Value = serde_json::from_slice(&render(Format::Json, &list).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"clusters": [{"cluster": "C", "brokers": [{
                "cluster": "C",
                "broker_name": "b1",
                "addrs": [{"id": 0, "addr": "127.0.0.1:10911"}],
                "core_addrs": ["127.0.0.1:10912", "127.0.0.1:10913"],
                "shard_count": 2,
            }]}]})
        );
        let text = String::from_utf8(render(Format::Text, &list).unwrap()).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0],
            ["CLUSTER", "BROKER", "ID", "ADDR", "CORES", "SHARDS"]
        );
        assert_eq!(rows[1], ["C", "b1", "0", "127.0.0.1:10911", "2", "2"]);
    }

    #[test]
    fn a_created_topic_names_each_broker_in_text() {
        let created = TopicCreated {
            topic: "T".into(),
            read_queues: 4,
            write_queues: 4,
            perm: perm::READ_WRITE,
            brokers: vec![
                CreatedOn {
                    broker_name: String::new(),
                    addr: "a:1".into(),
                },
                CreatedOn {
                    broker_name: "b1".into(),
                    addr: "b:1".into(),
                },
            ],
        };
        let text = String::from_utf8(render(Format::Text, &created).unwrap()).unwrap();
        let p = perm::READ_WRITE;
        assert_eq!(
            text,
            format!(
                "topic T with 4 read / 4 write queues, perm {p}, on a:1\n\
                 topic T with 4 read / 4 write queues, perm {p}, on b1 (b:1)\n"
            )
        );
        let v: Value = serde_json::from_slice(&render(Format::Json, &created).unwrap()).unwrap();
        assert_eq!(v["brokers"][1], json!({"broker_name": "b1", "addr": "b:1"}));
        assert_eq!(v["read_queues"], 4);
    }
}
