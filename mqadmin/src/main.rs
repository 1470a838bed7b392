//! `mqadmin`: topics, routes, clusters, sending and consuming, message queries, broker status.
//!
//! Subcommands answer to RocketMQ's camelCase names too (`updateTopic`, `topicList`, ...).
//! Errors print `error: <message>` on stderr and exit with status 1.

#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::{Parser, Subcommand};
use client::{
    Admin, ClientConfig, ConsumeFrom, Message, MessageExt, MessageQueue, Producer, PullConsumer,
    PullOptions, PullStatus, QueueOffset,
};
use protocol::{perm, BrokerData, TopicConfig};
use serde_json::{json, Value};

mod progress;
mod query;

#[derive(Debug, Parser)]
#[command(
    name = "mqadmin",
    version,
    about = "Administer the broker and NameServer"
)]
struct Cli {
    /// NameServer addresses, `;` separated.
    #[arg(
        short = 'n',
        long = "namesrv",
        global = true,
        default_value = "127.0.0.1:9876"
    )]
    namesrv: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create or update a topic on every master of a cluster, or on one broker.
    #[command(alias = "updateTopic")]
    UpdateTopic {
        #[arg(short = 't', long)]
        topic: String,
        /// Read and write queues per broker.
        #[arg(short = 'q', long = "queues", default_value_t = 8)]
        queues: u32,
        /// Cluster whose masters get the topic.
        #[arg(short = 'c', long)]
        cluster: Option<String>,
        /// One broker address instead of a cluster.
        #[arg(short = 'b', long = "broker")]
        broker_addr: Option<String>,
    },
    /// List the topics known to the NameServer.
    #[command(alias = "topicList")]
    TopicList,
    /// Show a topic's route: brokers, queues and the core serving each queue.
    #[command(alias = "topicRoute")]
    TopicRoute {
        #[arg(short = 't', long)]
        topic: String,
    },
    /// List clusters and their brokers.
    #[command(alias = "clusterList")]
    ClusterList,
    /// Send one message.
    #[command(alias = "sendMessage")]
    Send {
        #[arg(short = 't', long)]
        topic: String,
        /// Message body.
        #[arg(short = 'p', long = "body")]
        body: String,
        /// Keys, space or comma separated.
        #[arg(short = 'k', long)]
        keys: Option<String>,
        /// Tag.
        #[arg(short = 'c', long = "tags")]
        tag: Option<String>,
        /// Queue id (on the first broker that has it, or on `-b`).
        #[arg(short = 'q', long = "queue")]
        queue: Option<u32>,
        /// Broker name for `-q`.
        #[arg(short = 'b', long = "broker-name")]
        broker_name: Option<String>,
    },
    /// Read every queue of a topic from a start position.
    #[command(alias = "consumeMessage")]
    Consume {
        #[arg(short = 't', long)]
        topic: String,
        #[arg(short = 'g', long, default_value = "mqadmin")]
        group: String,
        /// `first`, `last` or a timestamp in ms since the epoch.
        #[arg(long, default_value = "first")]
        from: String,
        /// Tag expression: `*`, `TagA`, `TagA || TagB`.
        #[arg(short = 'c', long = "tags", default_value = "*")]
        tag_expr: String,
        /// Stop after this many messages.
        #[arg(long)]
        max: Option<u64>,
        /// Stop after this long with nothing new.
        #[arg(long = "timeout-ms", default_value_t = 5000)]
        timeout_ms: u64,
    },
    /// Set a consumer group's offsets of a topic to the first, the last, or the first
    /// message stored at or after a time. Running members adopt it at their next commit.
    #[command(alias = "resetOffsetByTime")]
    ResetOffset {
        #[arg(short = 'g', long)]
        group: String,
        #[arg(short = 't', long)]
        topic: String,
        /// `first`, `last` or a timestamp in ms since the epoch.
        #[arg(long = "to", short = 's')]
        to: String,
    },
    /// A consumer group's committed offset, max offset and backlog per queue of a topic.
    #[command(alias = "consumerProgress")]
    ConsumerProgress {
        #[arg(short = 'g', long)]
        group: String,
        #[arg(short = 't', long)]
        topic: String,
    },
    /// Per-core status of a broker.
    #[command(alias = "brokerStatus")]
    BrokerStatus {
        #[arg(short = 'b', long = "broker")]
        broker_addr: String,
        /// The TPS figures are measured over this window (two snapshots this far apart).
        #[arg(long = "interval-ms", default_value_t = 1000)]
        interval_ms: u64,
    },
    /// Where a broker's sends spent their time: latency per stage of the request path and
    /// core, since it started or the last `--reset` (ARCHITECTURE.md, "Where a send's time
    /// goes").
    SendStages {
        #[arg(short = 'b', long = "broker")]
        broker_addr: String,
        /// Clear the histograms after reading them.
        #[arg(long)]
        reset: bool,
    },
    /// Messages by key (any of KEYS, or the msg id), through the IndexFile.
    #[command(alias = "queryMsgByKey")]
    QueryByKey {
        #[arg(short = 't', long)]
        topic: String,
        #[arg(short = 'k', long)]
        key: String,
        /// Stored at or after this time (ms since the epoch).
        #[arg(long = "begin-ms", default_value_t = 0)]
        begin_ms: i64,
        /// Stored at or before this time (ms since the epoch).
        #[arg(long = "end-ms", default_value_t = i64::MAX)]
        end_ms: i64,
        #[arg(long, default_value_t = 64)]
        max: u32,
    },
    /// A message by its offset id, or by its msg id (UNIQ_KEY) with -t.
    #[command(alias = "queryMsgById")]
    QueryById {
        #[arg(short = 'i', long = "id")]
        id: String,
        #[arg(short = 't', long)]
        topic: Option<String>,
    },
    /// The message at an offset of a queue.
    #[command(alias = "queryMsgByOffset")]
    QueryByOffset {
        #[arg(short = 't', long)]
        topic: String,
        #[arg(short = 'q', long = "queue")]
        queue: u32,
        #[arg(short = 'o', long = "offset")]
        offset: u64,
        /// Broker name, when the topic lives on several brokers.
        #[arg(short = 'b', long = "broker-name")]
        broker_name: Option<String>,
    },
    /// The first queue offset stored at or after a time.
    #[command(alias = "searchOffset")]
    SearchOffset {
        #[arg(short = 't', long)]
        topic: String,
        #[arg(short = 'q', long = "queue")]
        queue: u32,
        #[arg(long = "time-ms")]
        time_ms: i64,
        #[arg(short = 'b', long = "broker-name")]
        broker_name: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let json = cli.json;
    let ns = cli.namesrv.as_str();
    match cli.command {
        Cmd::UpdateTopic {
            topic,
            queues,
            cluster,
            broker_addr,
        } => update_topic(ns, json, &topic, queues, cluster, broker_addr),
        Cmd::TopicList => {
            let mut topics = Admin::new(ns)?.topic_list()?;
            topics.sort();
            if json {
                println!("{}", json!({ "topics": topics }));
            } else {
                for t in topics {
                    println!("{t}");
                }
            }
            Ok(())
        }
        Cmd::TopicRoute { topic } => topic_route(ns, json, &topic),
        Cmd::ClusterList => cluster_list(ns, json),
        Cmd::Send {
            topic,
            body,
            keys,
            tag,
            queue,
            broker_name,
        } => send(ns, json, &topic, body, keys, tag, queue, broker_name),
        Cmd::Consume {
            topic,
            group,
            from,
            tag_expr,
            max,
            timeout_ms,
        } => {
            let opts = ConsumeArgs {
                from: parse_from(&from)?,
                tag_expr,
                max,
                idle_timeout: Duration::from_millis(timeout_ms),
            };
            consume(ns, json, &topic, &group, &opts)
        }
        Cmd::BrokerStatus {
            broker_addr,
            interval_ms,
        } => broker_status(ns, json, &broker_addr, interval_ms),
        Cmd::SendStages { broker_addr, reset } => send_stages(ns, json, &broker_addr, reset),
        Cmd::QueryByKey {
            topic,
            key,
            begin_ms,
            end_ms,
            max,
        } => query::by_key(ns, json, &topic, &key, begin_ms, end_ms, max),
        Cmd::QueryById { id, topic } => query::by_id(ns, json, &id, topic.as_deref()),
        Cmd::QueryByOffset {
            topic,
            queue,
            offset,
            broker_name,
        } => query::by_offset(ns, json, &topic, queue, offset, broker_name.as_deref()),
        Cmd::SearchOffset {
            topic,
            queue,
            time_ms,
            broker_name,
        } => query::search_offset(ns, json, &topic, queue, time_ms, broker_name.as_deref()),
        Cmd::ResetOffset { group, topic, to } => {
            let to = match parse_from(&to)? {
                StartFrom::First => ConsumeFrom::First,
                StartFrom::Last => ConsumeFrom::Last,
                StartFrom::Timestamp(ms) => ConsumeFrom::Timestamp(ms),
            };
            let rows = Admin::new(ns)?.reset_offset(&group, &topic, to)?;
            for (q, off) in rows {
                if json {
                    println!(
                        "{}",
                        json!({"broker": q.broker_name, "queue_id": q.queue_id, "offset": off.0})
                    );
                } else {
                    println!("{q} -> {off}");
                }
            }
            Ok(())
        }
        Cmd::ConsumerProgress { group, topic } => progress::print(ns, json, &group, &topic),
    }
}

fn update_topic(
    ns: &str,
    json: bool,
    topic: &str,
    queues: u32,
    cluster: Option<String>,
    broker_addr: Option<String>,
) -> anyhow::Result<()> {
    if queues == 0 || queues > 1024 {
        bail!("queue count must be 1..=1024, got {queues}");
    }
    if topic.is_empty() || topic.len() > message::TOPIC_LEN_MAX {
        bail!("topic name must be 1..={} bytes", message::TOPIC_LEN_MAX);
    }
    let admin = Admin::new(ns)?;
    let config = TopicConfig {
        name: topic.to_owned(),
        read_queues: queues,
        write_queues: queues,
        perm: perm::READ_WRITE,
    };
    // (broker name, address) pairs to create the topic on.
    let targets: Vec<(String, String)> = match (broker_addr, cluster) {
        (Some(addr), _) => vec![(String::new(), addr)],
        (None, cluster) => {
            let info = admin.cluster_info()?;
            let cluster = match cluster {
                Some(c) => c,
                None => {
                    let mut names: Vec<&str> =
                        info.brokers.iter().map(|b| b.cluster.as_str()).collect();
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
            let targets: Vec<(String, String)> = info
                .brokers
                .iter()
                .filter(|b| b.cluster == cluster)
                .filter_map(|b| Some((b.broker_name.clone(), b.master_addr()?.to_owned())))
                .collect();
            if targets.is_empty() {
                bail!("cluster {cluster} has no master broker");
            }
            targets
        }
    };
    let mut done = Vec::new();
    for (name, addr) in &targets {
        admin
            .create_topic(addr, &config)
            .with_context(|| format!("creating topic {topic} on {addr}"))?;
        if json {
            done.push(json!({ "broker_name": name, "addr": addr }));
        } else {
            let who = if name.is_empty() {
                addr.clone()
            } else {
                format!("{name} ({addr})")
            };
            println!(
                "topic {topic} with {queues} read / {queues} write queues, perm {}, on {who}",
                perm::READ_WRITE
            );
        }
    }
    if json {
        println!(
            "{}",
            json!({
                "topic": topic,
                "read_queues": queues,
                "write_queues": queues,
                "perm": perm::READ_WRITE,
                "brokers": done,
            })
        );
    }
    Ok(())
}

fn broker_json(b: &BrokerData) -> Value {
    json!({
        "cluster": b.cluster,
        "broker_name": b.broker_name,
        "addrs": b.addrs.iter().map(|(id, a)| json!({ "id": id, "addr": a })).collect::<Vec<_>>(),
        "core_addrs": b.core_addrs,
        "shard_count": b.shard_count,
    })
}

fn topic_route(ns: &str, json: bool, topic: &str) -> anyhow::Result<()> {
    let route = Admin::new(ns)?.topic_route(topic)?;
    let queue_rows: Vec<Value> = route
        .read_queues()
        .iter()
        .map(|t| {
            json!({
                "broker_name": t.queue.broker_name,
                "queue_id": t.queue.queue_id,
                "shard": t.shard,
                "addr": t.addr,
                "writable": route.write_queues().iter().any(|w| w.queue == t.queue),
            })
        })
        .collect();
    if json {
        let out = json!({
            "topic": topic,
            "brokers": route.data.brokers.iter().map(broker_json).collect::<Vec<_>>(),
            "queue_data": route.data.queues.iter().map(|q| json!({
                "broker_name": q.broker_name,
                "read_queues": q.read_queues,
                "write_queues": q.write_queues,
                "perm": q.perm,
            })).collect::<Vec<_>>(),
            "queues": queue_rows,
        });
        println!("{out}");
        return Ok(());
    }
    println!("topic {topic}");
    for b in &route.data.brokers {
        let addrs: Vec<String> = b.addrs.iter().map(|(id, a)| format!("{id}={a}")).collect();
        println!(
            "broker {} cluster={} addrs=[{}] shards={} cores={}",
            b.broker_name,
            b.cluster,
            addrs.join(", "),
            b.shard_count,
            b.core_addrs.len()
        );
    }
    for q in &route.data.queues {
        println!(
            "queues {} read={} write={} perm={}",
            q.broker_name, q.read_queues, q.write_queues, q.perm
        );
    }
    for t in route.read_queues() {
        println!(
            "queue {}#{} shard={} addr={}",
            t.queue.broker_name, t.queue.queue_id, t.shard, t.addr
        );
    }
    Ok(())
}

fn cluster_list(ns: &str, json: bool) -> anyhow::Result<()> {
    let info = Admin::new(ns)?.cluster_info()?;
    let mut clusters: BTreeMap<&str, Vec<&BrokerData>> = BTreeMap::new();
    for b in &info.brokers {
        clusters.entry(b.cluster.as_str()).or_default().push(b);
    }
    for brokers in clusters.values_mut() {
        brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    }
    if json {
        let out: Vec<Value> = clusters
            .iter()
            .map(|(c, bs)| {
                json!({
                    "cluster": c,
                    "brokers": bs.iter().map(|b| broker_json(b)).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", json!({ "clusters": out }));
        return Ok(());
    }
    println!(
        "{:<20} {:<20} {:>4} {:<24} {:>6} {:>6}",
        "CLUSTER", "BROKER", "ID", "ADDR", "CORES", "SHARDS"
    );
    for (cluster, brokers) in &clusters {
        for b in brokers {
            for (id, addr) in &b.addrs {
                println!(
                    "{:<20} {:<20} {:>4} {:<24} {:>6} {:>6}",
                    cluster,
                    b.broker_name,
                    id,
                    addr,
                    b.core_addrs.len(),
                    b.shard_count
                );
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn send(
    ns: &str,
    json: bool,
    topic: &str,
    body: String,
    keys: Option<String>,
    tag: Option<String>,
    queue: Option<u32>,
    broker_name: Option<String>,
) -> anyhow::Result<()> {
    let producer = Producer::builder().namesrv(ns).group("mqadmin").build()?;
    let mut msg = Message::new(topic, body.into_bytes());
    if let Some(keys) = keys {
        msg = msg.with_keys(
            keys.split([' ', ','])
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
        );
    }
    if let Some(tag) = tag {
        msg = msg.with_tags(tag);
    }
    let result = match queue {
        None => producer.send(msg)?,
        Some(queue_id) => {
            let queues = producer.write_queues(topic)?;
            let mq = queues
                .into_iter()
                .find(|q| {
                    q.queue_id == queue_id
                        && match &broker_name {
                            None => true,
                            Some(b) => *b == q.broker_name,
                        }
                })
                .ok_or_else(|| anyhow!("topic {topic} has no writable queue {queue_id}"))?;
            producer.send_to_queue(msg, &mq)?
        }
    };
    if json {
        println!(
            "{}",
            json!({
                "msg_id": result.msg_id,
                "offset_msg_id": result.offset_msg_id,
                "topic": result.topic,
                "broker_name": result.broker_name,
                "queue_id": result.queue_id,
                "queue_offset": result.queue_offset.0,
            })
        );
    } else {
        println!(
            "msg_id={} offset_msg_id={} topic={} broker={} queue={} offset={}",
            result.msg_id,
            result.offset_msg_id,
            result.topic,
            result.broker_name,
            result.queue_id,
            result.queue_offset
        );
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartFrom {
    First,
    Last,
    Timestamp(i64),
}

fn parse_from(s: &str) -> anyhow::Result<StartFrom> {
    match s.trim() {
        "first" => Ok(StartFrom::First),
        "last" => Ok(StartFrom::Last),
        other => other
            .parse::<i64>()
            .map(StartFrom::Timestamp)
            .map_err(|_| anyhow!("--from must be first, last or a timestamp in ms, got {s:?}")),
    }
}

struct ConsumeArgs {
    from: StartFrom,
    tag_expr: String,
    max: Option<u64>,
    idle_timeout: Duration,
}

/// Pause between rounds that found nothing new.
const IDLE_POLL_MS: u64 = 200;

fn consume(
    ns: &str,
    json: bool,
    topic: &str,
    group: &str,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    let consumer = PullConsumer::with_config(ClientConfig::new(ns)?, group)?;
    let queues = consumer.queues(topic)?;
    if queues.is_empty() {
        bail!("topic {topic} has no readable queue");
    }
    let mut cursors: Vec<(MessageQueue, QueueOffset)> = Vec::with_capacity(queues.len());
    for q in queues {
        let start = match args.from {
            StartFrom::First => consumer.min_offset(&q),
            StartFrom::Last => consumer.max_offset(&q),
            StartFrom::Timestamp(ms) => consumer.search_offset(&q, ms),
        }
        .with_context(|| format!("finding the start offset of {q}"))?;
        cursors.push((q, start));
    }
    let opts = PullOptions {
        tag_expression: args.tag_expr.clone(),
        ..PullOptions::default()
    };
    let mut printed: u64 = 0;
    let mut last_progress = Instant::now();
    loop {
        let mut progressed = false;
        for (queue, offset) in cursors.iter_mut() {
            // Drain this queue before moving on, so its messages print in order together.
            loop {
                let result = consumer
                    .pull(queue, *offset, &opts)
                    .with_context(|| format!("pulling {queue} at offset {offset}"))?;
                let moved = result.next_offset != *offset;
                for m in &result.messages {
                    if args.max.is_some_and(|max| printed >= max) {
                        return Ok(());
                    }
                    println!("{}", format_message(m, json));
                    printed += 1;
                }
                *offset = result.next_offset;
                if moved {
                    progressed = true;
                }
                if result.status != PullStatus::Found || !moved {
                    break;
                }
            }
        }
        if args.max.is_some_and(|max| printed >= max) {
            return Ok(());
        }
        if progressed {
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= args.idle_timeout {
            return Ok(());
        } else {
            std::thread::sleep(Duration::from_millis(IDLE_POLL_MS));
        }
    }
}

fn format_message(m: &MessageExt, json: bool) -> String {
    if json {
        let mut out = json!({
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset.0,
            "msg_id": m.msg_id,
            "keys": m.keys,
            "tags": m.tags,
            "reconsume_times": m.reconsume_times,
        });
        query::put_body(&mut out, &m.body);
        out.to_string()
    } else {
        format!(
            "topic={} queue={} offset={} msg_id={} keys={} tags={} body={}",
            m.topic,
            m.queue_id,
            m.queue_offset,
            m.msg_id,
            m.keys.join(","),
            m.tags.as_deref().unwrap_or(""),
            String::from_utf8_lossy(&m.body)
        )
    }
}

fn send_stages(ns: &str, json: bool, addr: &str, reset: bool) -> anyhow::Result<()> {
    let stages = Admin::new(ns)?.send_stages(addr, reset)?;
    let rows: Vec<(u16, &str, u64, [f64; 5])> = stages
        .iter()
        .map(|h| {
            let (count, q) = quantiles_ms(&h.buckets);
            (h.core, h.stage.as_str(), count, q)
        })
        .collect();
    if json {
        let out: Vec<Value> = rows
            .iter()
            .map(|(core, stage, count, q)| {
                json!({"core": core, "stage": stage, "count": count, "p50_ms": q[0],
                       "p90_ms": q[1], "p99_ms": q[2], "p999_ms": q[3], "max_ms": q[4]})
            })
            .collect();
        println!("{}", Value::Array(out));
        return Ok(());
    }
    println!(
        "{:>4} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "core", "stage", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for (core, stage, count, q) in rows {
        println!(
            "{core:>4} {stage:<8} {count:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            q[0], q[1], q[2], q[3], q[4]
        );
    }
    Ok(())
}

/// (requests, [p50, p90, p99, p99.9, max] in ms) of one stage's recorded values.
fn quantiles_ms(buckets: &[protocol::StageBucket]) -> (u64, [f64; 5]) {
    let mut sorted = buckets.to_vec();
    sorted.sort_by_key(|b| b.nanos);
    let total: u64 = sorted.iter().map(|b| b.count).sum();
    let at = |q: f64| -> f64 {
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for b in &sorted {
            seen += b.count;
            if seen >= rank {
                return b.nanos as f64 / 1e6;
            }
        }
        sorted.last().map_or(0.0, |b| b.nanos as f64 / 1e6)
    };
    (total, [at(0.5), at(0.9), at(0.99), at(0.999), at(1.0)])
}

fn broker_status(ns: &str, json: bool, addr: &str, interval_ms: u64) -> anyhow::Result<()> {
    let admin = Admin::new(ns)?;
    let before = admin.broker_status(addr)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(interval_ms.max(1)));
    let s = admin.broker_status(addr)?;
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    // Per core: (produce TPS, consume TPS) over the window.
    let tps = |core: u16| -> (f64, f64) {
        let (Some(a), Some(b)) = (
            before.cores.iter().find(|c| c.core == core),
            s.cores.iter().find(|c| c.core == core),
        ) else {
            return (0.0, 0.0);
        };
        (
            b.produced_messages.saturating_sub(a.produced_messages) as f64 / secs,
            b.consumed_messages.saturating_sub(a.consumed_messages) as f64 / secs,
        )
    };
    if json {
        let cores: Vec<Value> = s
            .cores
            .iter()
            .map(|c| {
                let (produce_tps, consume_tps) = tps(c.core);
                json!({
                    "core": c.core,
                    "shards": c.shards,
                    "produce_tps": produce_tps,
                    "consume_tps": consume_tps,
                    "requests": c.requests,
                    "cross_core_hops": c.cross_core_hops,
                    "inbox_depth": c.inbox_depth,
                    "produced_messages": c.produced_messages,
                    "produced_bytes": c.produced_bytes,
                    "consumed_messages": c.consumed_messages,
                    "consumed_bytes": c.consumed_bytes,
                    "commit_log_bytes": c.commit_log_bytes,
                    "durable_lag_bytes": c.durable_lag_bytes,
                    "disk_use_ratio": c.disk_use_ratio,
                    "quarantined_ranges": c.quarantined_ranges,
                    "quarantined_bytes": c.quarantined_bytes,
                    "skipped_records": c.skipped_records,
                    "busy_refusals": c.busy_refusals,
                    "tail_ring_records": c.tail_ring_records,
                    "writes_blocked_shards": c.writes_blocked_shards,
                    "connections_open": c.connections_open,
                    "connections_max": c.connections_max,
                    "connections_refused": c.connections_refused,
                    "connections_timed_out": c.connections_timed_out,
                    "connections_bad_frames": c.connections_bad_frames,
                })
            })
            .collect();
        let out = json!({
            "broker_name": s.broker_name,
            "cluster": s.cluster,
            "uptime_ms": s.uptime_ms,
            "shard_count": s.shard_count,
            "cores": cores,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "broker {} cluster={} uptime_ms={} shards={}",
        s.broker_name, s.cluster, s.uptime_ms, s.shard_count
    );
    for c in &s.cores {
        let shards: Vec<String> = c.shards.iter().map(u16::to_string).collect();
        let (produce_tps, consume_tps) = tps(c.core);
        println!(
            "core={} shards=[{}] produce_tps={produce_tps:.1} consume_tps={consume_tps:.1} requests={} cross_core_hops={} inbox_depth={} produced_messages={} produced_bytes={} consumed_messages={} consumed_bytes={} commit_log_bytes={} durable_lag_bytes={} disk_use_ratio={:.4} quarantined_ranges={} quarantined_bytes={} skipped_records={} busy_refusals={} tail_ring_records={} writes_blocked_shards={}",
            c.core,
            shards.join(","),
            c.requests,
            c.cross_core_hops,
            c.inbox_depth,
            c.produced_messages,
            c.produced_bytes,
            c.consumed_messages,
            c.consumed_bytes,
            c.commit_log_bytes,
            c.durable_lag_bytes,
            c.disk_use_ratio,
            c.quarantined_ranges,
            c.quarantined_bytes,
            c.skipped_records,
            c.busy_refusals,
            c.tail_ring_records,
            c.writes_blocked_shards
        );
        if c.writes_blocked_shards > 0 {
            println!(
                "  core {}: {} shard(s) cannot create their next CommitLog segment (disk full or no descriptors) and refuse sends until a retry succeeds; the broker log says why",
                c.core, c.writes_blocked_shards
            );
        }
        if c.quarantined_ranges > 0 {
            // Damage is not a figure to skim past: say what it means and where to look.
            println!(
                "  core {}: {} damaged CommitLog range(s) ({} bytes) are quarantined and never served; the broker log names each segment and offset range at ERROR",
                c.core, c.quarantined_ranges, c.quarantined_bytes
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::{CommitLogOffset, QueueOffset};

    #[test]
    fn stage_quantiles_come_from_the_buckets_in_order() {
        let b = |nanos, count| protocol::StageBucket { nanos, count };
        // 990 requests at 10 µs, 9 at 2 ms, 1 at 7 ms; given out of order.
        let (n, q) = quantiles_ms(&[b(7_000_000, 1), b(10_000, 990), b(2_000_000, 9)]);
        assert_eq!(n, 1000);
        assert_eq!(q, [0.01, 0.01, 0.01, 2.0, 7.0]);
        assert_eq!(quantiles_ms(&[]), (0, [0.0; 5]));
    }

    fn sample(body: &[u8]) -> MessageExt {
        MessageExt {
            topic: "T".into(),
            queue_id: 2,
            queue_offset: QueueOffset(7),
            commit_log_offset: CommitLogOffset(100),
            msg_id: "ID".into(),
            offset_msg_id: "OFF".into(),
            tags: Some("TagA".into()),
            keys: vec!["k1".into(), "k2".into()],
            body: body.to_vec().into(),
            properties: Vec::new(),
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: 0,
            born_host: "127.0.0.1:1".parse().unwrap(),
            store_timestamp_ms: 0,
            store_host: "127.0.0.1:2".parse().unwrap(),
            reconsume_times: 0,
            store_size: 0,
        }
    }

    #[test]
    fn rocketmq_names_and_defaults_parse() {
        let cli = Cli::try_parse_from(["mqadmin", "updateTopic", "-t", "T", "-c", "C"]).unwrap();
        assert_eq!(cli.namesrv, "127.0.0.1:9876");
        match cli.command {
            Cmd::UpdateTopic {
                topic,
                queues,
                cluster,
                broker_addr,
            } => {
                assert_eq!((topic.as_str(), queues), ("T", 8));
                assert_eq!(cluster.as_deref(), Some("C"));
                assert!(broker_addr.is_none());
            }
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from([
            "mqadmin",
            "consumeMessage",
            "-t",
            "T",
            "--json",
            "-n",
            "a:1;b:2",
            "--max",
            "3",
        ])
        .unwrap();
        assert!(cli.json);
        assert_eq!(cli.namesrv, "a:1;b:2");
        assert!(matches!(
            cli.command,
            Cmd::Consume {
                max: Some(3),
                timeout_ms: 5000,
                ..
            }
        ));
        for name in [
            "topicList",
            "topicRoute",
            "clusterList",
            "sendMessage",
            "brokerStatus",
        ] {
            // They parse as subcommands (missing required flags is a different error).
            let err = Cli::try_parse_from(["mqadmin", name, "--help"]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{name}");
        }
        assert!(Cli::try_parse_from(["mqadmin", "send", "-t", "T"]).is_err());
        assert!(Cli::try_parse_from(["mqadmin", "update-topic", "-t", "T", "-q", "x"]).is_err());
    }

    #[test]
    fn start_positions() {
        assert_eq!(parse_from("first").unwrap(), StartFrom::First);
        assert_eq!(parse_from("last").unwrap(), StartFrom::Last);
        assert_eq!(
            parse_from("1700000000000").unwrap(),
            StartFrom::Timestamp(1_700_000_000_000)
        );
        assert!(parse_from("yesterday").is_err());
    }

    #[test]
    fn message_lines() {
        let m = sample(b"hello");
        assert_eq!(
            format_message(&m, false),
            "topic=T queue=2 offset=7 msg_id=ID keys=k1,k2 tags=TagA body=hello"
        );
        let v: Value = serde_json::from_str(&format_message(&m, true)).unwrap();
        assert_eq!(v["body"], "hello");
        assert_eq!(v["queue_offset"], 7);
        assert_eq!(v["keys"], json!(["k1", "k2"]));
        assert_eq!(v["reconsume_times"], 0);
        assert!(v.get("body_encoding").is_none());
        let bin = sample(&[0xff, 0x00, 0xfe]);
        let v: Value = serde_json::from_str(&format_message(&bin, true)).unwrap();
        assert_eq!(v["body_encoding"], "base64");
        assert_eq!(v["body"], "/wD+");
    }
}
