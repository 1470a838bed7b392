//! RocketMQ's everyday broker admin commands, sent as RocketMQ's remoting requests (the
//! broker's handlers in `broker-front/src/rocketmq/admin.rs` serve RocketMQ's own mqadmin too):
//! broker config, topic status, connections, subscription groups, topic deletion.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::{bail, Context};
use remoting::codes::{request, response};
use serde::Serialize;

use crate::output::Render;
use crate::remoting_client::{call, parse_mq_table, Request};
use crate::rmq::{self, Core};

/// `getBrokerConfig`: each broker's config as `key=value` lines.
#[derive(Debug, Serialize)]
pub struct BrokerConfigs {
    brokers: Vec<BrokerConfig>,
}

#[derive(Debug, Serialize)]
pub struct BrokerConfig {
    broker_name: String,
    addr: String,
    config: BTreeMap<String, String>,
}

impl Render for BrokerConfigs {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        let several = self.brokers.len() > 1;
        for b in &self.brokers {
            if several {
                writeln!(w, "============{} ({})============", b.broker_name, b.addr)?;
            }
            for (k, v) in &b.config {
                writeln!(w, "{k}={v}")?;
            }
        }
        Ok(())
    }
}

/// Java properties text as RocketMQ's brokers write it: `key=value` lines.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=').or_else(|| l.split_once(':'))?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

pub fn get_broker_config(targets: Vec<Core>) -> anyhow::Result<BrokerConfigs> {
    let mut brokers = Vec::with_capacity(targets.len());
    for t in targets {
        let body = call(&t.addr, Request::new(request::GET_BROKER_CONFIG))?.ok(&t.addr)?;
        let text = std::str::from_utf8(&body).context("the broker's config is not UTF-8")?;
        brokers.push(BrokerConfig {
            broker_name: t.broker_name,
            addr: t.addr,
            config: parse_properties(text),
        });
    }
    Ok(BrokerConfigs { brokers })
}

/// `updateBrokerConfig`: what each broker answered.
#[derive(Debug, Serialize)]
pub struct ConfigUpdated {
    key: String,
    value: String,
    brokers: Vec<Answered>,
}

#[derive(Debug, Serialize)]
pub struct Answered {
    broker_name: String,
    addr: String,
    code: i32,
    remark: Option<String>,
}

impl Render for ConfigUpdated {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        for b in &self.brokers {
            write!(
                w,
                "update broker config {}={} on {}: ",
                self.key, self.value, b.addr
            )?;
            match &b.remark {
                Some(r) if !r.is_empty() => writeln!(w, "OK ({r})")?,
                _ => writeln!(w, "OK")?,
            }
        }
        Ok(())
    }
}

/// Sends `key=value` (a Java properties body) to every target; the first refusal ends the
/// command with the broker's code and remark as they are.
pub fn update_broker_config(
    targets: Vec<Core>,
    key: &str,
    value: &str,
) -> anyhow::Result<ConfigUpdated> {
    if key.is_empty() || key.contains(['=', '\n']) {
        bail!("the key must be a non-empty config key name");
    }
    if value.contains('\n') {
        bail!("the value must be one line");
    }
    let mut brokers = Vec::with_capacity(targets.len());
    for t in targets {
        let body = format!("{key}={value}\n").into_bytes();
        let a = call(
            &t.addr,
            Request::new(request::UPDATE_BROKER_CONFIG).body(body),
        )?;
        if a.code != response::SUCCESS {
            bail!("{} refused {key}={value}: {}", t.addr, a.describe());
        }
        brokers.push(Answered {
            broker_name: t.broker_name,
            addr: t.addr,
            code: a.code,
            remark: a.remark,
        });
    }
    Ok(ConfigUpdated {
        key: key.to_owned(),
        value: value.to_owned(),
        brokers,
    })
}

/// `topicStatus`: every queue's min and max offset and last update time.
#[derive(Debug, Serialize)]
pub struct TopicStatus {
    topic: String,
    queues: Vec<QueueStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueStatus {
    pub broker_name: String,
    pub queue_id: i32,
    pub min_offset: u64,
    pub max_offset: u64,
    pub last_update_ms: i64,
}

impl Render for TopicStatus {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:<32} {:>4} {:>20} {:>20} {:>16}",
            "#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"
        )?;
        for q in &self.queues {
            writeln!(
                w,
                "{:<32} {:>4} {:>20} {:>20} {:>16}",
                q.broker_name, q.queue_id, q.min_offset, q.max_offset, q.last_update_ms
            )?;
        }
        Ok(())
    }
}

fn u64_of(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

fn i64_of(v: &serde_json::Value, key: &str) -> i64 {
    v.get(key).and_then(serde_json::Value::as_i64).unwrap_or(0)
}

/// GET_TOPIC_STATS_INFO of one broker (core): its queues of `topic`.
pub fn topic_stats_of(core: &Core, topic: &str) -> anyhow::Result<Vec<QueueStatus>> {
    let body = call(
        &core.addr,
        Request::new(request::GET_TOPIC_STATS_INFO).field("topic", topic),
    )?
    .ok(&core.addr)?;
    let (entries, _) = parse_mq_table(&body, "offsetTable")
        .with_context(|| format!("reading {}'s topic stats", core.addr))?;
    Ok(entries
        .into_iter()
        .map(|(mq, v)| QueueStatus {
            broker_name: mq.broker_name,
            queue_id: mq.queue_id,
            min_offset: u64_of(&v, "minOffset"),
            max_offset: u64_of(&v, "maxOffset"),
            last_update_ms: i64_of(&v, "lastUpdateTimestamp"),
        })
        .collect())
}

pub fn topic_status(ns: &str, topic: &str) -> anyhow::Result<TopicStatus> {
    let mut queues = Vec::new();
    for core in rmq::route_masters(ns, topic)? {
        queues.extend(topic_stats_of(&core, topic)?);
    }
    queues.sort_by(|a, b| (&a.broker_name, a.queue_id).cmp(&(&b.broker_name, b.queue_id)));
    Ok(TopicStatus {
        topic: topic.to_owned(),
        queues,
    })
}

/// A client connection as a broker reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Connection {
    client_id: String,
    client_addr: String,
    language: String,
    version: i64,
}

fn connections_of(body: &serde_json::Value) -> Vec<Connection> {
    body.get("connectionSet")
        .and_then(serde_json::Value::as_array)
        .map(|set| {
            set.iter()
                .map(|c| Connection {
                    client_id: c["clientId"].as_str().unwrap_or("").to_owned(),
                    client_addr: c["clientAddr"].as_str().unwrap_or("").to_owned(),
                    language: c["language"].as_str().unwrap_or("").to_owned(),
                    version: c["version"].as_i64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn print_connections(w: &mut dyn Write, conns: &[Connection]) -> io::Result<()> {
    writeln!(
        w,
        "{:<4} {:<48} {:<24} {:<10} {:>8}",
        "#", "#ClientId", "#ClientAddr", "#Language", "#Version"
    )?;
    for (i, c) in conns.iter().enumerate() {
        writeln!(
            w,
            "{:<4} {:<48} {:<24} {:<10} {:>8}",
            i + 1,
            c.client_id,
            c.client_addr,
            c.language,
            c.version
        )?;
    }
    Ok(())
}

/// `producerConnection`: the producer group's clients connected to the topic's brokers.
#[derive(Debug, Serialize)]
pub struct ProducerConnections {
    group: String,
    connections: Vec<Connection>,
}

impl Render for ProducerConnections {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        print_connections(w, &self.connections)
    }
}

pub fn producer_connection(
    ns: &str,
    group: &str,
    topic: &str,
) -> anyhow::Result<ProducerConnections> {
    let mut connections = Vec::new();
    for core in rmq::route_masters(ns, topic)? {
        let a = call(
            &core.addr,
            Request::new(request::GET_PRODUCER_CONNECTION_LIST).field("producerGroup", group),
        )?;
        if a.code != response::SUCCESS {
            // This broker has no client of the group (another may).
            continue;
        }
        let v: serde_json::Value = remoting::body::from_json(&a.body)?;
        connections.extend(connections_of(&v));
    }
    connections.sort();
    connections.dedup_by(|a, b| a.client_id == b.client_id);
    if connections.is_empty() {
        bail!("no producer of group {group} is connected to the brokers of topic {topic}");
    }
    Ok(ProducerConnections {
        group: group.to_owned(),
        connections,
    })
}

/// `consumerConnection`: the group's clients, their subscriptions and how they consume.
#[derive(Debug, Serialize)]
pub struct ConsumerConnections {
    group: String,
    connections: Vec<Connection>,
    subscriptions: Vec<Subscription>,
    consume_type: String,
    message_model: String,
    consume_from_where: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Subscription {
    topic: String,
    sub_expression: String,
}

impl Render for ConsumerConnections {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        print_connections(w, &self.connections)?;
        writeln!(w)?;
        writeln!(w, "Below is subscription:")?;
        writeln!(w, "{:<4} {:<48} #SubExpression", "#", "#Topic")?;
        for (i, s) in self.subscriptions.iter().enumerate() {
            writeln!(w, "{:<4} {:<48} {}", i + 1, s.topic, s.sub_expression)?;
        }
        writeln!(w)?;
        writeln!(w, "ConsumeType: {}", self.consume_type)?;
        writeln!(w, "MessageModel: {}", self.message_model)?;
        writeln!(w, "ConsumeFromWhere: {}", self.consume_from_where)
    }
}

/// Asks every broker (core) of every cluster: a RocketMQ client heartbeats to each broker
/// its subscriptions route to, so the union is the group's clients.
pub fn consumer_connection(ns: &str, group: &str) -> anyhow::Result<ConsumerConnections> {
    let mut out = ConsumerConnections {
        group: group.to_owned(),
        connections: Vec::new(),
        subscriptions: Vec::new(),
        consume_type: String::new(),
        message_model: String::new(),
        consume_from_where: String::new(),
    };
    for core in rmq::all_cores(ns)? {
        let a = call(
            &core.addr,
            Request::new(request::GET_CONSUMER_CONNECTION_LIST).field("consumerGroup", group),
        )?;
        if a.code != response::SUCCESS {
            continue;
        }
        let v: serde_json::Value = remoting::body::from_json(&a.body)?;
        out.connections.extend(connections_of(&v));
        if let Some(subs) = v.get("subscriptionTable").and_then(|s| s.as_object()) {
            for (topic, s) in subs {
                out.subscriptions.push(Subscription {
                    topic: topic.clone(),
                    sub_expression: s["subString"].as_str().unwrap_or("*").to_owned(),
                });
            }
        }
        for (field, key) in [
            (&mut out.consume_type, "consumeType"),
            (&mut out.message_model, "messageModel"),
            (&mut out.consume_from_where, "consumeFromWhere"),
        ] {
            if field.is_empty() {
                *field = v[key].as_str().unwrap_or("").to_owned();
            }
        }
    }
    // A client has a connection to each broker (core) it talks to: one row per client.
    out.connections.sort();
    out.connections.dedup_by(|a, b| a.client_id == b.client_id);
    out.subscriptions.sort();
    out.subscriptions.dedup();
    if out.connections.is_empty() {
        bail!("the consumer group {group} is not online (no broker has a connection of it)");
    }
    Ok(out)
}

/// `deleteTopic`: the brokers (cores) and NameServers it was deleted from.
#[derive(Debug, Serialize)]
pub struct TopicDeleted {
    topic: String,
    brokers: Vec<Core>,
    namesrvs: Vec<String>,
}

impl Render for TopicDeleted {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        for b in &self.brokers {
            writeln!(
                w,
                "delete topic [{}] from broker {} ({}) success.",
                self.topic, b.broker_name, b.addr
            )?;
        }
        for n in &self.namesrvs {
            writeln!(
                w,
                "delete topic [{}] from NameServer {n} success.",
                self.topic
            )?;
        }
        Ok(())
    }
}

/// Deletes `topic` from every master (core) of the cluster, then from every NameServer, as
/// RocketMQ's deleteTopic does: brokers first, so none registers it again afterwards.
pub fn delete_topic(ns: &str, topic: &str, cluster: Option<&str>) -> anyhow::Result<TopicDeleted> {
    if topic.is_empty() {
        bail!("the topic name is empty");
    }
    let cores = rmq::cluster_cores(ns, cluster)?;
    for c in &cores {
        call(
            &c.addr,
            Request::new(request::DELETE_TOPIC_IN_BROKER).field("topic", topic),
        )?
        .ok(&c.addr)
        .with_context(|| format!("deleting topic {topic} from broker {}", c.broker_name))?;
    }
    let mut namesrvs = Vec::new();
    for addr in ns.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        let mut req = Request::new(request::DELETE_TOPIC_IN_NAMESRV).field("topic", topic);
        if let Some(c) = cluster {
            req = req.field("clusterName", c);
        }
        call(addr, req)?
            .ok(addr)
            .with_context(|| format!("deleting topic {topic} from NameServer {addr}"))?;
        namesrvs.push(addr.to_owned());
    }
    Ok(TopicDeleted {
        topic: topic.to_owned(),
        brokers: cores,
        namesrvs,
    })
}

/// `updateSubGroup` and `deleteSubGroup`: the group and the brokers that took the change.
#[derive(Debug, Serialize)]
pub struct SubGroupChanged {
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<remoting::body::SubscriptionGroupConfig>,
    group: String,
    brokers: Vec<String>,
}

impl Render for SubGroupChanged {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        for b in &self.brokers {
            writeln!(
                w,
                "{} subscription group {} on {b} success.",
                self.action, self.group
            )?;
        }
        if let Some(c) = &self.config {
            if let Ok(j) = serde_json::to_string(c) {
                writeln!(w, "{j}")?;
            }
        }
        Ok(())
    }
}

pub fn update_sub_group(
    targets: Vec<Core>,
    cfg: remoting::body::SubscriptionGroupConfig,
) -> anyhow::Result<SubGroupChanged> {
    if cfg.group_name.is_empty() {
        bail!("the group name is empty");
    }
    let mut brokers = Vec::new();
    for t in targets {
        call(
            &t.addr,
            Request::new(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).json_body(&cfg)?,
        )?
        .ok(&t.addr)?;
        brokers.push(t.addr);
    }
    Ok(SubGroupChanged {
        action: "create or update",
        group: cfg.group_name.clone(),
        config: Some(cfg),
        brokers,
    })
}

pub fn delete_sub_group(
    targets: Vec<Core>,
    group: &str,
    remove_offset: bool,
) -> anyhow::Result<SubGroupChanged> {
    let mut brokers = Vec::new();
    for t in targets {
        call(
            &t.addr,
            Request::new(request::DELETE_SUBSCRIPTIONGROUP)
                .field("groupName", group)
                .field("cleanOffset", remove_offset),
        )?
        .ok(&t.addr)?;
        brokers.push(t.addr);
    }
    Ok(SubGroupChanged {
        action: "delete",
        group: group.to_owned(),
        config: None,
        brokers,
    })
}
