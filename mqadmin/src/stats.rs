//! Measurements across brokers: `clusterRT` (send RT and TPS per broker core) and `statsAll`
//! (in and out TPS and totals per topic and group), and the topics a group has offsets of.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use client::{Admin, Message, Producer};
use remoting::codes::{request, response};
use serde::Serialize;

use crate::broker_admin::topic_stats_of;
use crate::output::Render;
use crate::remoting_client::{call, parse_mq_table, Request};
use crate::rmq::{self, Core};

/// The topics `group` has committed offsets of, on any broker.
pub fn group_topics(ns: &str, group: &str) -> anyhow::Result<Vec<String>> {
    let mut topics = BTreeSet::new();
    for core in rmq::all_cores(ns)? {
        let a = call(
            &core.addr,
            Request::new(request::GET_CONSUME_STATS).field("consumerGroup", group),
        )?;
        if a.code != response::SUCCESS {
            continue;
        }
        let (entries, _) = parse_mq_table(&a.body, "offsetTable")?;
        topics.extend(entries.into_iter().map(|(mq, _)| mq.topic));
    }
    Ok(topics.into_iter().collect())
}

pub struct RtArgs {
    pub amount: u32,
    pub size: usize,
    pub machine_room: String,
}

/// `clusterRT`: one row per broker core.
#[derive(Debug, Serialize)]
pub struct ClusterRt {
    rows: Vec<RtRow>,
}

#[derive(Debug, Serialize)]
pub struct RtRow {
    cluster: String,
    broker_name: String,
    addr: String,
    rt_ms_avg: f64,
    tps: f64,
    success: u32,
    fail: u32,
    machine_room: String,
}

impl Render for ClusterRt {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:<20} {:<24} {:<22} {:>10} {:>10} {:>8} {:>6} #Machine Room",
            "#Cluster Name", "#Broker Name", "#Addr", "#RT(ms)", "#TPS", "#Success", "#Fail",
        )?;
        for r in &self.rows {
            writeln!(
                w,
                "{:<20} {:<24} {:<22} {:>10.3} {:>10.1} {:>8} {:>6} {}",
                r.cluster,
                r.broker_name,
                r.addr,
                r.rt_ms_avg,
                r.tps,
                r.success,
                r.fail,
                r.machine_room
            )?;
        }
        Ok(())
    }
}

/// Sends `amount` messages of `size` bytes, one at a time, to a queue of each core of each
/// master of the cluster, on the topic named after the cluster (RocketMQ sends there too: its
/// brokers register their cluster's name as a topic; corvus creates it at the first run, with
/// one queue per shard so that every core holds one).
pub fn cluster_rt(ns: &str, cluster: Option<&str>, args: &RtArgs) -> anyhow::Result<ClusterRt> {
    if args.amount == 0 {
        bail!("-a must be at least 1");
    }
    let admin = Admin::new(ns)?;
    let info = admin.cluster_info()?;
    let cluster = match cluster {
        Some(c) => c.to_owned(),
        None => {
            let names: BTreeSet<&str> = info.brokers.iter().map(|b| b.cluster.as_str()).collect();
            match names.into_iter().collect::<Vec<_>>().as_slice() {
                [one] => (*one).to_owned(),
                [] => bail!("no broker is registered with the NameServer"),
                many => bail!("several clusters ({}): choose one with -c", many.join(", ")),
            }
        }
    };
    let mut brokers: Vec<&protocol::BrokerData> = info
        .brokers
        .iter()
        .filter(|b| b.cluster == cluster)
        .collect();
    if brokers.is_empty() {
        bail!("no cluster named {cluster} is registered");
    }
    brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    let topic = cluster.clone();
    let route = match admin.topic_route(&topic) {
        Ok(r) => r,
        Err(_) => {
            let shards = brokers
                .iter()
                .map(|b| u32::from(b.shard_count))
                .max()
                .unwrap_or(1)
                .max(1);
            let shape = crate::topics::Shape {
                read_queues: shards,
                write_queues: shards,
                perm: protocol::perm::READ_WRITE,
            };
            crate::topics::update_topic(
                ns,
                &topic,
                shape,
                crate::topics::Target::Cluster(Some(cluster.clone())),
            )
            .with_context(|| format!("creating the topic {topic} that clusterRT sends to"))?;
            admin.topic_route(&topic)?
        }
    };
    let producer = Producer::builder()
        .namesrv(ns)
        .group("mqadmin-cluster-rt")
        .retries(0)
        .build()?;
    let body = vec![b'x'; args.size];
    let mut rows = Vec::new();
    for b in brokers {
        let cores = b.core_addrs.len().max(1) as u16;
        for (core, addr) in b.core_addrs.iter().enumerate() {
            let broker_name =
                protocol::core_view::core_broker_name(&b.broker_name, core as u16, cores);
            let target = route
                .write_queues()
                .iter()
                .find(|t| t.queue.broker_name == b.broker_name && &t.addr == addr);
            let (mut success, mut fail) = (0u32, 0u32);
            let mut rt_total = Duration::ZERO;
            let started = Instant::now();
            if let Some(t) = target {
                for _ in 0..args.amount {
                    let msg = Message::new(&topic, body.clone());
                    let sent_at = Instant::now();
                    match producer.send_to_queue(msg, &t.queue) {
                        Ok(_) => {
                            rt_total += sent_at.elapsed();
                            success += 1;
                        }
                        Err(_) => fail += 1,
                    }
                }
            } else {
                fail = args.amount;
            }
            let elapsed = started.elapsed().as_secs_f64();
            rows.push(RtRow {
                cluster: cluster.clone(),
                broker_name,
                addr: addr.clone(),
                rt_ms_avg: if success == 0 {
                    0.0
                } else {
                    rt_total.as_secs_f64() * 1000.0 / f64::from(success)
                },
                tps: if elapsed > 0.0 {
                    f64::from(success) / elapsed
                } else {
                    0.0
                },
                success,
                fail,
                machine_room: args.machine_room.clone(),
            });
        }
    }
    producer.shutdown();
    Ok(ClusterRt { rows })
}

/// `statsAll`: a row per topic and consumer group (a topic nobody consumes has one row
/// with an empty group).
#[derive(Debug, Serialize)]
pub struct StatsAll {
    rows: Vec<StatsRow>,
}

#[derive(Debug, Serialize)]
pub struct StatsRow {
    topic: String,
    group: String,
    in_tps: f64,
    out_tps: f64,
    /// Messages stored in the topic's queues since they were created (the sum of their max
    /// offsets, including messages retention has deleted since).
    in_total: u64,
    /// The group's committed offsets summed: messages it has consumed.
    out_total: u64,
}

impl Render for StatsAll {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:<32} {:<32} {:>11} {:>11} {:>14} {:>14}",
            "#Topic", "#Consumer Group", "#InTPS", "#OutTPS", "#InMsgTotal", "#OutMsgTotal"
        )?;
        for r in &self.rows {
            writeln!(
                w,
                "{:<32} {:<32} {:>11.2} {:>11.2} {:>14} {:>14}",
                r.topic, r.group, r.in_tps, r.out_tps, r.in_total, r.out_total
            )?;
        }
        Ok(())
    }
}

fn stored(masters: &[Core], topic: &str) -> u64 {
    masters
        .iter()
        .filter_map(|c| topic_stats_of(c, topic).ok())
        .flatten()
        .map(|q| q.max_offset)
        .sum()
}

pub fn stats_all(ns: &str, topic: Option<&str>, interval_ms: u64) -> anyhow::Result<StatsAll> {
    let topics: Vec<String> = match topic {
        Some(t) => vec![t.to_owned()],
        None => {
            let mut all = Admin::new(ns)?.topic_list()?;
            all.retain(|t| !t.starts_with("%RETRY%") && !t.starts_with("%DLQ%") && t != "TBW102");
            all.sort();
            all
        }
    };
    // Two snapshots of each topic's stored count, `interval_ms` apart, give the in TPS.
    let mut first: BTreeMap<&str, (Vec<Core>, u64)> = BTreeMap::new();
    for t in &topics {
        match rmq::route_masters(ns, t) {
            Ok(masters) => {
                let n = stored(&masters, t);
                first.insert(t, (masters, n));
            }
            Err(e) if topic.is_some() => return Err(e),
            // A topic deleted since the list was read.
            Err(_) => {}
        }
    }
    let window = Duration::from_millis(interval_ms.max(1));
    let started = Instant::now();
    std::thread::sleep(window);
    let secs = started.elapsed().as_secs_f64();
    let mut rows = Vec::new();
    for (t, (masters, before)) in &first {
        let after = stored(masters, t);
        let in_tps = after.saturating_sub(*before) as f64 / secs;
        let mut groups = BTreeSet::new();
        for c in masters {
            let Ok(a) = call(
                &c.addr,
                Request::new(request::QUERY_TOPIC_CONSUME_BY_WHO).field("topic", t),
            ) else {
                continue;
            };
            if a.code != response::SUCCESS {
                continue;
            }
            let v: serde_json::Value = remoting::body::from_json(&a.body).unwrap_or_default();
            if let Some(list) = v["groupList"].as_array() {
                groups.extend(list.iter().filter_map(|g| g.as_str().map(str::to_owned)));
            }
        }
        if groups.is_empty() {
            rows.push(StatsRow {
                topic: (*t).to_owned(),
                group: String::new(),
                in_tps,
                out_tps: 0.0,
                in_total: after,
                out_total: 0,
            });
        }
        for g in groups {
            let (mut out_tps, mut out_total) = (0.0, 0u64);
            for c in masters {
                let Ok(a) = call(
                    &c.addr,
                    Request::new(request::GET_CONSUME_STATS)
                        .field("consumerGroup", &g)
                        .field("topic", t),
                ) else {
                    continue;
                };
                if a.code != response::SUCCESS {
                    continue;
                }
                let Ok((entries, rest)) = parse_mq_table(&a.body, "offsetTable") else {
                    continue;
                };
                out_tps += rest["consumeTps"].as_f64().unwrap_or(0.0);
                out_total += entries
                    .iter()
                    .map(|(_, v)| v["consumerOffset"].as_u64().unwrap_or(0))
                    .sum::<u64>();
            }
            rows.push(StatsRow {
                topic: (*t).to_owned(),
                group: g,
                in_tps,
                out_tps,
                in_total: after,
                out_total,
            });
        }
    }
    Ok(StatsAll { rows })
}
