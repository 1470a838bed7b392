//! `bench lite`: Lite Topics (RocketMQ 5.5) at scale, over remoting. Starts its own NameServer
//! and broker, creates a LITE parent topic, then:
//!
//! 1. **create**: sends one message to each of `--lite-topics` new lite topics
//!    (SEND_MESSAGE_V2 with `__LITE_TOPIC`), `--threads` connections at once: lite topics
//!    created per second, and the broker's anonymous memory per lite topic holding one message;
//! 2. **consume**: clients of `--per-client` lite topics each subscribe theirs
//!    (LITE_SUBSCRIPTION_CTL) and pop (POP_LITE_MESSAGE, every core) and ack (ACK_MESSAGE
//!    naming the lite topic) until they have them all: messages received per second, and the
//!    memory per idle lite topic once everything is consumed;
//! 3. **restart**: stops the broker, starts it again on the same data, and times its start
//!    and the first lite pop (which rebuilds the lite index of the core it asks).
//!
//! With `--namesrv HOST:PORT` it drives an already running cluster instead (corvus, or Apache
//! RocketMQ 5.5 with LMQ enabled: bench/rocketmq-compare/lite.sh): the parent is created on
//! every broker the NameServer lists, the restart is skipped, and memory is sampled from
//! `--broker-pid` when given. `--bind-group` first creates the consumer group with
//! `lite.bind.topic` naming the parent, which Apache's lite pop and ack require.
//!
//! Acks are sent as RocketMQ 5.5's clients send them: ACK_MESSAGE with `liteTopic` (Apache
//! 5.5.1 defines ACK_LITE_MESSAGE 200072 but serves no such request; corvus takes both), and
//! an AckMessageRequestHeader's `queueId` 0 and `offset`, the message's offset in its lite
//! topic (the stored property `INNER_MULTI_QUEUE_OFFSET`, which Apache checks; corvus reads
//! the handle alone).
//!
//! One `RESULT {json}` line at the end, and a table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::message::{self, property};
use remoting::RemotingCommand;
use serde::Serialize;

use crate::cli::LiteArgs;
use crate::cluster::status_field;
use crate::cluster::{Cluster, ClusterOptions};
use crate::remoting_load::{fetch_route, route_brokers, Conn, RouteBroker};

const TOPIC: &str = "BenchLiteParent";
const GROUP: &str = "bench-lite";
const LITE: &str = "__LITE_TOPIC";
/// The stored property holding a multi-dispatched message's offset in its lite topic.
const LITE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
/// How long the parent's route, or a broker's registration, may take to appear.
const ROUTE_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Serialize)]
struct Report {
    lite_topics: u64,
    /// The NameServer of the cluster driven (`--namesrv`), empty when the bench started corvus.
    namesrv: String,
    cores: u16,
    create_secs: f64,
    created_per_sec: f64,
    /// Broker anonymous memory (RssAnon) before the sends, after them, after consumption.
    rss_anon_kib_start: u64,
    rss_anon_kib_created: u64,
    rss_anon_kib_consumed: u64,
    bytes_per_lite_topic_with_message: f64,
    bytes_per_idle_lite_topic: f64,
    consume_secs: f64,
    received_per_sec: f64,
    received: u64,
    restart_start_secs: f64,
    first_pop_after_restart_secs: f64,
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn lite_name(i: u64) -> String {
    format!("lite-{i}")
}

fn check(f: &remoting::Frame, what: &str) -> Result<()> {
    if f.command.code != response::SUCCESS {
        bail!(
            "{what}: code {} {}",
            f.command.code,
            f.command.remark.clone().unwrap_or_default()
        );
    }
    Ok(())
}

/// The master addresses of every broker `namesrv` lists (GET_BROKER_CLUSTER_INFO), once it
/// lists one: a broker registers some seconds after it starts.
fn masters_of(namesrv: &str) -> Result<Vec<String>> {
    let deadline = Instant::now() + ROUTE_WAIT;
    loop {
        let cmd = RemotingCommand::request(request::GET_BROKER_CLUSTER_INFO, 0);
        let f = Conn::dial(namesrv)?.call(cmd, b"")?;
        check(&f, "the cluster info")?;
        let info: remoting::body::ClusterInfo =
            remoting::body::from_json(&f.body).context("decoding the cluster info")?;
        let masters: Vec<String> = info
            .broker_addr_table
            .values()
            .filter_map(|b| b.broker_addrs.get(&0).cloned())
            .collect();
        if !masters.is_empty() {
            return Ok(masters);
        }
        if Instant::now() > deadline {
            bail!("the NameServer {namesrv} lists no master broker");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Creates GROUP with `lite.bind.topic` naming the parent.
fn create_bound_group(addr: &str) -> Result<()> {
    let body = serde_json::json!({
        "groupName": GROUP,
        "consumeEnable": true,
        "consumeFromMinEnable": true,
        "consumeBroadcastEnable": false,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": true,
        "attributes": { "+lite.bind.topic": TOPIC },
    })
    .to_string();
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 0);
    check(
        &Conn::dial(addr)?.call(cmd, body.as_bytes())?,
        "creating the lite consumer group",
    )
}

fn create_parent(addr: &str, queues: u32) -> Result<()> {
    let q = queues.to_string();
    let mut cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_TOPIC, 0);
    for (k, v) in [
        ("topic", TOPIC),
        ("defaultTopic", "TBW102"),
        ("readQueueNums", &q),
        ("writeQueueNums", &q),
        ("perm", "6"),
        ("topicFilterType", "SINGLE_TAG"),
        ("order", "false"),
        ("attributes", "+message.type=LITE"),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    check(
        &Conn::dial(addr)?.call(cmd, b"")?,
        "creating the LITE parent",
    )
}

fn send_one(conn: &mut Conn, lite: &str, body: &[u8]) -> Result<()> {
    let header = SendMessageRequestHeader {
        producer_group: "bench-lite-producer".into(),
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        born_timestamp: wall_ms(),
        properties: Some(message::encode_properties([
            (LITE, lite),
            (property::WAIT_STORE_MSG_OK, "true"),
        ])),
        reconsume_times: Some(0),
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE_V2, 0)
        .with_ext_fields(header.to_ext_fields_v2());
    check(&conn.call(cmd, body)?, "a lite send")
}

fn subscribe(conn: &mut Conn, client: &str, lites: &[String]) -> Result<()> {
    let body = serde_json::json!({
        "subscriptionSet": [{
            "action": "COMPLETE_ADD",
            "clientId": client,
            "group": GROUP,
            "topic": TOPIC,
            "liteTopicSet": lites,
            "version": 1,
        }]
    })
    .to_string();
    let cmd = RemotingCommand::request(request::LITE_SUBSCRIPTION_CTL, 0);
    check(&conn.call(cmd, body.as_bytes())?, "a lite subscription")
}

/// A popped lite message: its receipt handle, lite topic and offset in that lite topic.
struct Popped {
    handle: String,
    lite: String,
    offset: i64,
}

/// One POP_LITE_MESSAGE of `client` at a core.
fn pop(conn: &mut Conn, broker: &str, client: &str) -> Result<Vec<Popped>> {
    let mut cmd = RemotingCommand::request(request::POP_LITE_MESSAGE, 0);
    for (k, v) in [
        ("clientId", client),
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("maxMsgNum", "32"),
        ("invisibleTime", "60000"),
        ("pollTime", "0"),
        ("bornTime", "0"),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    let f = conn.call(cmd, b"")?;
    if f.command.code == response::POLLING_TIMEOUT {
        return Ok(Vec::new());
    }
    check(&f, "a lite pop")?;
    let ext = |k: &str| f.command.ext(k).unwrap_or("0").to_owned();
    let (pop_time, invisible, revive) = (ext("popTime"), ext("invisibleTime"), ext("reviveQid"));
    let messages = message::decode_stored(&f.body).context("decoding a lite pop")?;
    Ok(messages
        .iter()
        .map(|m| {
            let handle = format!(
                "{o} {pop_time} {invisible} {revive} 0 {broker} {q} {o} {p}",
                o = m.queue_offset,
                q = m.queue_id,
                p = m.physical_offset
            );
            let props = message::decode_properties(&m.properties);
            let prop = |name: &str| {
                props
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            Popped {
                handle,
                lite: prop(LITE).unwrap_or_default(),
                offset: prop(LITE_OFFSET)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(m.queue_offset),
            }
        })
        .collect())
}

/// ACK_MESSAGE of a lite message, naming its lite topic as RocketMQ's clients do.
fn ack(conn: &mut Conn, m: &Popped) -> Result<()> {
    let mut cmd = RemotingCommand::request(request::ACK_MESSAGE, 0);
    let offset = m.offset.to_string();
    for (k, v) in [
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("queueId", "0"),
        ("offset", offset.as_str()),
        ("extraInfo", m.handle.as_str()),
        ("liteTopic", m.lite.as_str()),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    check(&conn.call(cmd, b"")?, "a lite ack")
}

fn cores_of(namesrv: &str) -> Result<Vec<RouteBroker>> {
    let deadline = Instant::now() + ROUTE_WAIT;
    loop {
        if let Ok(route) = fetch_route(namesrv, TOPIC) {
            let brokers = route_brokers(&route);
            if !brokers.is_empty() {
                return Ok(brokers);
            }
        }
        if Instant::now() > deadline {
            bail!("the route of {TOPIC} did not appear");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `work(i)` for `i` in `0..n` over `threads` threads, each its own slice.
fn spread<F>(n: u64, threads: u64, work: F) -> Result<()>
where
    F: Fn(u64, u64) -> Result<()> + Sync,
{
    let threads = threads.max(1);
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                s.spawn(move || work(t * per, ((t + 1) * per).min(n)))
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow!("a bench thread panicked"))??;
        }
        Ok(())
    })
}

fn options(a: &LiteArgs, dir: &std::path::Path, config: &std::path::Path) -> ClusterOptions {
    ClusterOptions {
        profile: a.profile.clone(),
        broker_cores: a.cores,
        broker_config: Some(config.to_owned()),
        data_dir: Some(dir.to_owned()),
        replica: None,
        bench_cpus: None,
    }
}

/// The cluster the bench drives: corvus it started, or one already running.
enum Target {
    Own {
        cluster: Box<Cluster>,
        dir: tempfile::TempDir,
        config: std::path::PathBuf,
    },
    External {
        namesrv: String,
        broker_pid: Option<u32>,
    },
}

impl Target {
    fn start_own(a: &LiteArgs) -> Result<Target> {
        let dir = tempfile::Builder::new()
            .prefix("corvus-bench-lite-")
            .tempdir()
            .context("creating a temporary data directory")?;
        let mut config = match &a.broker_config {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("reading --broker-config {}", p.display()))?,
            None => String::new(),
        };
        config.push_str(&format!(
            "\nlite_topics_max = {}\nlite_subscription_quota = {}\n",
            (a.lite_topics * 2).max(1_000_000),
            a.per_client.max(1)
        ));
        let config_path = dir.path().join("lite.toml");
        std::fs::write(&config_path, &config).context("writing the broker config")?;
        let cluster = Box::new(Cluster::start(&options(a, dir.path(), &config_path))?);
        Ok(Target::Own {
            cluster,
            dir,
            config: config_path,
        })
    }

    fn namesrv(&self) -> String {
        match self {
            Target::Own { cluster, .. } => cluster.namesrv_addr.clone(),
            Target::External { namesrv, .. } => namesrv.clone(),
        }
    }

    /// The broker's RssAnon in KiB; 0 when it cannot be read.
    fn rss_anon_kib(&mut self) -> u64 {
        match self {
            Target::Own { cluster, .. } => cluster.sample_memory().map_or(0, |m| m.rss_anon_kib),
            Target::External { broker_pid, .. } => broker_pid
                .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
                .and_then(|s| status_field(&s, "RssAnon:"))
                .unwrap_or(0),
        }
    }
}

pub fn run(a: &LiteArgs) -> Result<bool> {
    let mut target = match &a.namesrv {
        Some(namesrv) => Target::External {
            namesrv: namesrv.clone(),
            broker_pid: a.broker_pid,
        },
        None => Target::start_own(a)?,
    };
    let masters = match &target {
        Target::Own { cluster, .. } => vec![cluster.broker_addr.clone()],
        Target::External { namesrv, .. } => masters_of(namesrv)?,
    };
    for m in &masters {
        create_parent(m, u32::from(a.cores) * 8)?;
        if a.bind_group {
            create_bound_group(m)?;
        }
    }
    let cores = cores_of(&target.namesrv())?;
    let mut r = Report {
        lite_topics: a.lite_topics,
        namesrv: a.namesrv.clone().unwrap_or_default(),
        cores: a.cores,
        ..Report::default()
    };
    r.rss_anon_kib_start = target.rss_anon_kib();
    let body = vec![b'x'; a.size as usize];
    let n = a.lite_topics;

    // 1. Create.
    let started = Instant::now();
    let entry = cores[0].addr.clone();
    spread(n, a.threads, |from, to| {
        let mut conn = Conn::dial(&entry)?;
        for i in from..to {
            send_one(&mut conn, &lite_name(i), &body)?;
        }
        Ok(())
    })?;
    r.create_secs = started.elapsed().as_secs_f64();
    r.created_per_sec = n as f64 / r.create_secs.max(1e-9);
    r.rss_anon_kib_created = target.rss_anon_kib();
    eprintln!(
        "created {n} lite topics in {:.1} s ({:.0}/s)",
        r.create_secs, r.created_per_sec
    );
    // 2. Consume: clients of `per_client` lite topics each.
    let per_client = a.per_client.max(1);
    let clients = n.div_ceil(per_client);
    let received = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    spread(clients, a.threads, |from, to| {
        let mut subs = Conn::dial(&entry)?;
        let mut conns: Vec<Conn> = cores
            .iter()
            .map(|b| Conn::dial(&b.addr))
            .collect::<Result<_>>()?;
        for client_no in from..to {
            let client = format!("bench-lite-client-{client_no}");
            let first = client_no * per_client;
            let lites: Vec<String> = (first..(first + per_client).min(n))
                .map(lite_name)
                .collect();
            subscribe(&mut subs, &client, &lites)?;
            let mut got = 0u64;
            let want = lites.len() as u64;
            let deadline = Instant::now() + Duration::from_secs(300);
            while got < want {
                let mut any = false;
                for (b, conn) in cores.iter().zip(conns.iter_mut()) {
                    for h in pop(conn, &b.name, &client)? {
                        ack(conn, &h)?;
                        got += 1;
                        any = true;
                    }
                }
                if !any && Instant::now() > deadline {
                    bail!("client {client} got {got} of {want} lite messages");
                }
            }
            received.fetch_add(got, Ordering::Relaxed);
        }
        Ok(())
    })?;
    r.consume_secs = started.elapsed().as_secs_f64();
    r.received = received.load(Ordering::Relaxed);
    r.received_per_sec = r.received as f64 / r.consume_secs.max(1e-9);
    // The kept messages are dropped as they are acked; the idle lite topics stay until
    // `lite_topic_idle_ms`.
    r.rss_anon_kib_consumed = target.rss_anon_kib();
    let per = |kib: u64| (kib.saturating_sub(r.rss_anon_kib_start) * 1024) as f64 / n as f64;
    r.bytes_per_lite_topic_with_message = per(r.rss_anon_kib_created);
    r.bytes_per_idle_lite_topic = per(r.rss_anon_kib_consumed);
    eprintln!(
        "consumed {} in {:.1} s ({:.0}/s)",
        r.received, r.consume_secs, r.received_per_sec
    );

    // 3. Restart on the same data (only a broker the bench started).
    if let Target::Own {
        mut cluster,
        dir,
        config,
    } = target
    {
        cluster.stop();
        drop(cluster);
        let started = Instant::now();
        let c = Cluster::start(&options(a, dir.path(), &config))?;
        r.restart_start_secs = started.elapsed().as_secs_f64();
        let cores = cores_of(&c.namesrv_addr)?;
        let started = Instant::now();
        for b in &cores {
            let mut conn = Conn::dial(&b.addr)?;
            subscribe(&mut conn, "bench-lite-after", &[lite_name(0)])?;
            pop(&mut conn, &b.name, "bench-lite-after")?;
        }
        r.first_pop_after_restart_secs = started.elapsed().as_secs_f64();
        drop(c);
    }

    println!(
        "lite topics {n} on {} cores{}: create {:.0}/s, receive+ack {:.0}/s, {:.0} B per lite topic with a message, {:.0} B per idle lite topic; restart {:.2} s, first lite pop {:.2} s",
        r.cores,
        if r.namesrv.is_empty() {
            String::new()
        } else {
            format!(" (cluster of {}, no restart)", r.namesrv)
        },
        r.created_per_sec,
        r.received_per_sec,
        r.bytes_per_lite_topic_with_message,
        r.bytes_per_idle_lite_topic,
        r.restart_start_secs,
        r.first_pop_after_restart_secs
    );
    println!("RESULT {}", serde_json::to_string(&r)?);
    Ok(true)
}
