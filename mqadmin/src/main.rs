//! `mqadmin`: topics, routes, clusters, sending and consuming, message queries, broker status.
//!
//! Subcommands answer to RocketMQ's camelCase names too (`updateTopic`, `topicList`, ...).
//! Each command returns a typed result that `output` prints as text or, with `--json`, as
//! JSON. Errors print `error: <message>` on stderr and exit with status 1.

#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use messages::{ConsumeArgs, SendArgs, StartFrom};
use output::{Format, Output};

mod broker_admin;
mod controller_cmds;
mod messages;
mod output;
mod progress;
mod query;
mod quota;
mod remoting_client;
mod rmq;
mod stats;
mod status;
mod topics;
mod trace;

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
    /// Access key of the ACL account to act as (brokers and NameServers with their ACL on;
    /// changes to topics, groups, offsets and configs need an admin account).
    #[arg(
        long,
        global = true,
        env = "CORVUS_ACCESS_KEY",
        requires = "secret_key"
    )]
    access_key: Option<String>,
    /// Its secret key.
    #[arg(
        long,
        global = true,
        env = "CORVUS_SECRET_KEY",
        hide_env_values = true,
        requires = "access_key"
    )]
    secret_key: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(subcommand)]
    command: Cmd,
}

/// TLS to the NameServers and brokers (they run with `tls_mode` permissive or enforcing).
#[derive(Debug, clap::Args)]
struct TlsArgs {
    /// Speak TLS, trusting the CAs of --tls-trust-cert (or any server with --tls-insecure).
    #[arg(long, global = true)]
    tls: bool,
    /// PEM CA certificates to trust.
    #[arg(long, global = true, requires = "tls", conflicts_with = "tls_insecure")]
    tls_trust_cert: Option<std::path::PathBuf>,
    /// Accept any server certificate (encrypted, but open to a man in the middle).
    #[arg(long, global = true, requires = "tls")]
    tls_insecure: bool,
}

impl TlsArgs {
    /// Sets the process's client TLS from the flags.
    fn apply(&self) -> anyhow::Result<()> {
        if !self.tls {
            return Ok(());
        }
        let settings = match (&self.tls_trust_cert, self.tls_insecure) {
            (Some(p), _) => client::tls::ClientSettings::trusting(p),
            (None, true) => client::tls::ClientSettings::trust_any(),
            (None, false) => anyhow::bail!("--tls needs --tls-trust-cert PATH or --tls-insecure"),
        };
        client::set_default_tls(Some(&settings))?;
        Ok(())
    }
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
        /// Read queues per broker (RocketMQ's -r; default: `-q`).
        #[arg(short = 'r', long = "read-queues")]
        read_queues: Option<u32>,
        /// Write queues per broker (RocketMQ's -w; default: `-q`).
        #[arg(short = 'w', long = "write-queues")]
        write_queues: Option<u32>,
        /// Permission bits: 2 write, 4 read, 6 both (RocketMQ's -p).
        #[arg(short = 'p', long = "perm", default_value_t = 6)]
        perm: u32,
        /// Ordered topic (RocketMQ's -o): accepted for scripts; corvus keeps each queue in
        /// order anyway and stores no order flag.
        #[arg(short = 'o', long = "order")]
        order: Option<bool>,
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
        /// A SQL92 filter over the messages' properties (`a > 5 AND b = 'x'`), applied by
        /// the broker (which needs `enable_property_filter`).
        #[arg(long = "sql")]
        sql92: Option<String>,
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
        /// `first`, `last` (or `now`) or a timestamp in ms since the epoch.
        #[arg(long = "to", short = 's')]
        to: String,
        /// RocketMQ's -f (force): accepted; a reset always applies.
        #[arg(short = 'f', long = "force")]
        force: Option<bool>,
    },
    /// A consumer group's committed offset, max offset and backlog per queue of a topic.
    #[command(alias = "consumerProgress")]
    ConsumerProgress {
        #[arg(short = 'g', long)]
        group: String,
        /// One topic; without it, every topic the group has offsets of.
        #[arg(short = 't', long)]
        topic: Option<String>,
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
    /// Replication per shard: a master's slaves (in sync or catching up, acknowledged,
    /// bytes behind), or a slave's view of its master.
    #[command(alias = "haStatus")]
    HaStatus {
        #[arg(short = 'b', long = "broker")]
        broker_addr: String,
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
        /// Stored at or after this time (ms since the epoch; RocketMQ's -b).
        #[arg(short = 'b', long = "begin-ms", default_value_t = 0)]
        begin_ms: i64,
        /// Stored at or before this time (ms since the epoch; RocketMQ's -e).
        #[arg(short = 'e', long = "end-ms", default_value_t = i64::MAX)]
        end_ms: i64,
        /// Most messages returned (RocketMQ's -c).
        #[arg(short = 'c', long, default_value_t = 64)]
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
    /// Delete a topic from every master (core) of a cluster and from the NameServers
    /// (RocketMQ's DELETE_TOPIC_IN_BROKER and DELETE_TOPIC_IN_NAMESRV). Sends to it then fail
    /// as for an unknown topic (unless the broker auto-creates topics). Its stored messages
    /// stay on disk until retention deletes their segments.
    #[command(alias = "deleteTopic")]
    DeleteTopic {
        #[arg(short = 't', long)]
        topic: String,
        /// Cluster whose masters drop the topic (default: the only one).
        #[arg(short = 'c', long)]
        cluster: Option<String>,
    },
    /// Each queue of a topic: min and max offset and last update time.
    #[command(alias = "topicStatus")]
    TopicStatus {
        #[arg(short = 't', long)]
        topic: String,
    },
    /// Create or update a subscription group's config on a broker or every master of a
    /// cluster (stored by the broker; see README for which fields take effect).
    #[command(alias = "updateSubGroup")]
    UpdateSubGroup {
        #[arg(short = 'g', long)]
        group: String,
        #[arg(short = 'c', long)]
        cluster: Option<String>,
        #[arg(short = 'b', long = "broker")]
        broker_addr: Option<String>,
        /// consumeEnable.
        #[arg(short = 's', long = "consume-enable")]
        consume_enable: Option<bool>,
        /// consumeFromMinEnable.
        #[arg(short = 'm', long = "consume-from-min-enable")]
        consume_from_min_enable: Option<bool>,
        /// consumeBroadcastEnable.
        #[arg(short = 'd', long = "consume-broadcast-enable")]
        consume_broadcast_enable: Option<bool>,
        /// retryQueueNums.
        #[arg(short = 'q', long = "retry-queue-nums")]
        retry_queue_nums: Option<i32>,
        /// retryMaxTimes.
        #[arg(short = 'r', long = "retry-max-times")]
        retry_max_times: Option<i32>,
        /// brokerId to consume from.
        #[arg(short = 'i', long = "broker-id")]
        broker_id: Option<i64>,
        /// whichBrokerWhenConsumeSlowly.
        #[arg(short = 'w', long = "which-broker-when-consume-slowly")]
        which_broker_when_consume_slowly: Option<i64>,
        /// notifyConsumerIdsChangedEnable.
        #[arg(short = 'a', long = "notify-consumer-ids-changed-enable")]
        notify_consumer_ids_changed_enable: Option<bool>,
    },
    /// Delete a subscription group's config from a broker or every master of a cluster.
    #[command(alias = "deleteSubGroup")]
    DeleteSubGroup {
        #[arg(short = 'g', long)]
        group: String,
        #[arg(short = 'c', long)]
        cluster: Option<String>,
        #[arg(short = 'b', long = "broker")]
        broker_addr: Option<String>,
        /// Also delete the group's committed offsets (RocketMQ's -r removeOffset).
        #[arg(short = 'r', long = "remove-offset")]
        remove_offset: Option<bool>,
    },
    /// A broker's config (every master of a cluster with -c), `key=value` per line.
    #[command(alias = "getBrokerConfig")]
    GetBrokerConfig {
        #[arg(short = 'b', long = "broker")]
        broker_addr: Option<String>,
        #[arg(short = 'c', long)]
        cluster: Option<String>,
    },
    /// Ask a broker (every master of a cluster with -c) to change one config key; prints
    /// the broker's answer and fails when it refuses.
    #[command(alias = "updateBrokerConfig")]
    UpdateBrokerConfig {
        #[arg(short = 'b', long = "broker")]
        broker_addr: Option<String>,
        #[arg(short = 'c', long)]
        cluster: Option<String>,
        #[arg(short = 'k', long)]
        key: String,
        #[arg(short = 'v', long)]
        value: String,
    },
    /// Quota rules (the broker's live `quotas` key, every master of a cluster with -c):
    /// list them, set one, remove one.
    Quota {
        #[command(subcommand)]
        action: QuotaCmd,
        #[arg(short = 'b', long = "broker", global = true)]
        broker_addr: Option<String>,
        #[arg(short = 'c', long, global = true)]
        cluster: Option<String>,
    },
    /// The clients of a producer group connected to a topic's brokers.
    #[command(alias = "producerConnection")]
    ProducerConnection {
        #[arg(short = 'g', long)]
        group: String,
        #[arg(short = 't', long)]
        topic: String,
    },
    /// A consumer group's clients, subscriptions, consume type and model.
    #[command(alias = "consumerConnection")]
    ConsumerConnection {
        #[arg(short = 'g', long)]
        group: String,
    },
    /// A message by its msg id (UNIQ_KEY) in a topic (RocketMQ's queryMsgByUniqueKey).
    #[command(alias = "queryMsgByUniqueKey")]
    QueryByUniqueKey {
        #[arg(short = 'i', long = "id")]
        id: String,
        #[arg(short = 't', long)]
        topic: String,
    },
    /// The trace of a message (its sends and consumes, written by clients with tracing on)
    /// from the trace topic, by its msg id.
    #[command(alias = "queryMsgTraceById")]
    QueryMsgTraceById {
        #[arg(short = 'i', long = "msg-id")]
        msg_id: String,
        /// The trace topic (RocketMQ's -t).
        #[arg(short = 't', long = "trace-topic", default_value = client::trace::TRACE_TOPIC)]
        trace_topic: String,
    },
    /// Print every message of a topic (all queues) stored between two times.
    #[command(alias = "printMsg")]
    PrintMsg {
        #[arg(short = 't', long)]
        topic: String,
        /// Stored at or after this time, ms since the epoch (default: the first message).
        #[arg(short = 'b', long = "begin-timestamp")]
        begin_ms: Option<i64>,
        /// Stored before this time, ms since the epoch (default: up to the last message).
        #[arg(short = 'e', long = "end-timestamp")]
        end_ms: Option<i64>,
        /// Charset of the bodies: only UTF-8 is decoded (other bytes print as U+FFFD in
        /// text, base64 in JSON).
        #[arg(short = 'c', long = "charset", default_value = "UTF-8")]
        charset: String,
        /// Tag expression.
        #[arg(short = 's', long = "sub-expression", default_value = "*")]
        sub_expression: String,
    },
    /// Send `amount` messages of `size` bytes to each broker core of a cluster and print
    /// each one's average send RT and TPS.
    #[command(alias = "clusterRT")]
    ClusterRt {
        #[arg(short = 'c', long)]
        cluster: Option<String>,
        /// Messages per broker core.
        #[arg(short = 'a', long, default_value_t = 100)]
        amount: u32,
        /// Body size in bytes.
        #[arg(short = 's', long, default_value_t = 128)]
        size: usize,
        /// RocketMQ's -p (print to a log instead of stdout): accepted; always stdout.
        #[arg(short = 'p', long = "print-log")]
        print_log: Option<bool>,
        /// RocketMQ's -m (machine room): printed in each row.
        #[arg(short = 'm', long = "machine-room", default_value = "noname")]
        machine_room: String,
        /// Repeat every this many seconds (RocketMQ's -i); once when not given.
        #[arg(short = 'i', long = "interval")]
        interval_s: Option<u64>,
        /// Rounds with -i (0: until interrupted).
        #[arg(long = "rounds", default_value_t = 0)]
        rounds: u64,
    },
    /// Per topic and consumer group: in and out TPS and accumulated in and out messages.
    #[command(alias = "statsAll")]
    StatsAll {
        /// One topic; default every topic but retry and dead-letter topics.
        #[arg(short = 't', long)]
        topic: Option<String>,
        /// The in TPS is measured over this window (two snapshots this far apart).
        #[arg(long = "interval-ms", default_value_t = 1000)]
        interval_ms: u64,
    },
    /// The failover controllers and which one leads.
    #[command(alias = "getControllerMetaData")]
    GetControllerMetaData {
        /// Controller addresses, `;` separated.
        #[arg(short = 'a', long = "controller-addrs")]
        controllers: String,
    },
    /// A broker group's master, epochs and SyncStateSet, from the controllers.
    #[command(alias = "getSyncStateSet")]
    GetSyncStateSet {
        #[arg(short = 'a', long = "controller-addrs")]
        controllers: String,
        /// The broker group (broker name).
        #[arg(short = 'b', long = "broker-name")]
        group: String,
    },
    /// Forces a master election in a broker group, optionally of one live in-sync broker.
    #[command(alias = "electMaster")]
    ElectMaster {
        #[arg(short = 'a', long = "controller-addrs")]
        controllers: String,
        #[arg(short = 'b', long = "broker-name")]
        group: String,
        /// The broker id to make master (default: the best live in-sync replica).
        #[arg(short = 'i', long = "broker-id")]
        broker_id: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
enum QuotaCmd {
    /// Each broker's rules, one per line.
    List,
    /// Adds a rule, or changes the value of the rule of the same scope, name and limit:
    /// `account|topic|group:<name>:<limit>=<N>`, the limit one of send_messages_per_sec,
    /// send_bytes_per_sec, pulls_per_sec, or for an account requests_per_sec and connections.
    Set { rule: String },
    /// Removes the rule `account|topic|group:<name>:<limit>`.
    Remove { rule: String },
}

/// Sets `slot` to the flag's value when the flag was given.
fn set<T>(slot: &mut T, flag: Option<T>) {
    if let Some(v) = flag {
        *slot = v;
    }
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
    let mut out = Output::new(if cli.json { Format::Json } else { Format::Text });
    if let (Some(ak), Some(sk)) = (&cli.access_key, &cli.secret_key) {
        client::set_default_credentials(Some(client::Credentials::new(ak, sk)));
    }
    cli.tls.apply()?;
    let ns = cli.namesrv.as_str();
    match cli.command {
        Cmd::UpdateTopic {
            topic,
            queues,
            read_queues,
            write_queues,
            perm,
            order: _,
            cluster,
            broker_addr,
        } => {
            let target = match broker_addr {
                Some(addr) => topics::Target::Broker(addr),
                None => topics::Target::Cluster(cluster),
            };
            let shape = topics::Shape {
                read_queues: read_queues.unwrap_or(queues),
                write_queues: write_queues.unwrap_or(queues),
                perm,
            };
            out.emit(&topics::update_topic(ns, &topic, shape, target)?)?;
        }
        Cmd::TopicList => out.emit(&topics::topic_list(ns)?)?,
        Cmd::GetControllerMetaData { controllers } => {
            out.emit(&controller_cmds::controller_metadata(&controllers)?)?
        }
        Cmd::GetSyncStateSet { controllers, group } => {
            out.emit(&controller_cmds::sync_state_set(&controllers, &group)?)?
        }
        Cmd::ElectMaster {
            controllers,
            group,
            broker_id,
        } => out.emit(&controller_cmds::elect_master(
            &controllers,
            &group,
            broker_id,
        )?)?,
        Cmd::TopicRoute { topic } => out.emit(&topics::topic_route(ns, &topic)?)?,
        Cmd::ClusterList => out.emit(&topics::cluster_list(ns)?)?,
        Cmd::Send {
            topic,
            body,
            keys,
            tag,
            queue,
            broker_name,
        } => {
            let args = SendArgs {
                body,
                keys,
                tag,
                queue,
                broker_name,
            };
            out.emit(&messages::send(ns, &topic, args)?)?;
        }
        Cmd::Consume {
            topic,
            group,
            from,
            tag_expr,
            sql92,
            max,
            timeout_ms,
        } => {
            let args = ConsumeArgs {
                from: StartFrom::parse(&from)?,
                tag_expr,
                sql92,
                max,
                idle_timeout: Duration::from_millis(timeout_ms),
                until_ms: None,
            };
            messages::consume(ns, &mut out, &topic, &group, &args)?;
        }
        Cmd::ResetOffset {
            group,
            topic,
            to,
            force: _,
        } => {
            let to = StartFrom::parse(&to)?;
            out.emit(&messages::reset_offset(ns, &group, &topic, to)?)?;
        }
        Cmd::ConsumerProgress { group, topic } => {
            let topics = match topic {
                Some(t) => vec![t],
                None => stats::group_topics(ns, &group)?,
            };
            if topics.is_empty() {
                anyhow::bail!("the consumer group {group} has no committed offsets");
            }
            for topic in topics {
                out.emit(&progress::read(ns, &group, &topic)?)?;
            }
        }
        Cmd::BrokerStatus {
            broker_addr,
            interval_ms,
        } => out.emit(&status::broker_status(ns, &broker_addr, interval_ms)?)?,
        Cmd::HaStatus { broker_addr } => out.emit(&status::ha_status(ns, &broker_addr)?)?,
        Cmd::SendStages { broker_addr, reset } => {
            out.emit(&status::send_stages(ns, &broker_addr, reset)?)?;
        }
        Cmd::QueryByKey {
            topic,
            key,
            begin_ms,
            end_ms,
            max,
        } => {
            let found = query::by_key(ns, &topic, &key, begin_ms, end_ms, max)?;
            out.emit(&query::messages(&found))?;
        }
        Cmd::QueryById { id, topic } => {
            let found = query::by_id(ns, &id, topic.as_deref())?;
            out.emit(&query::messages(&found))?;
        }
        Cmd::QueryByOffset {
            topic,
            queue,
            offset,
            broker_name,
        } => {
            let found = query::by_offset(ns, &topic, queue, offset, broker_name.as_deref())?;
            out.emit(&query::messages(&found))?;
        }
        Cmd::SearchOffset {
            topic,
            queue,
            time_ms,
            broker_name,
        } => out.emit(&query::search_offset(
            ns,
            &topic,
            queue,
            time_ms,
            broker_name.as_deref(),
        )?)?,
        Cmd::DeleteTopic { topic, cluster } => {
            out.emit(&broker_admin::delete_topic(ns, &topic, cluster.as_deref())?)?;
        }
        Cmd::TopicStatus { topic } => out.emit(&broker_admin::topic_status(ns, &topic)?)?,
        Cmd::UpdateSubGroup {
            group,
            cluster,
            broker_addr,
            consume_enable,
            consume_from_min_enable,
            consume_broadcast_enable,
            retry_queue_nums,
            retry_max_times,
            broker_id,
            which_broker_when_consume_slowly,
            notify_consumer_ids_changed_enable,
        } => {
            let targets = rmq::targets(ns, broker_addr.as_deref(), cluster.as_deref())?;
            let mut cfg = remoting::body::SubscriptionGroupConfig::named(&group);
            set(&mut cfg.consume_enable, consume_enable);
            set(&mut cfg.consume_from_min_enable, consume_from_min_enable);
            set(&mut cfg.consume_broadcast_enable, consume_broadcast_enable);
            set(&mut cfg.retry_queue_nums, retry_queue_nums);
            set(&mut cfg.retry_max_times, retry_max_times);
            set(&mut cfg.broker_id, broker_id);
            set(
                &mut cfg.which_broker_when_consume_slowly,
                which_broker_when_consume_slowly,
            );
            set(
                &mut cfg.notify_consumer_ids_changed_enable,
                notify_consumer_ids_changed_enable,
            );
            out.emit(&broker_admin::update_sub_group(targets, cfg)?)?;
        }
        Cmd::DeleteSubGroup {
            group,
            cluster,
            broker_addr,
            remove_offset,
        } => {
            let targets = rmq::targets(ns, broker_addr.as_deref(), cluster.as_deref())?;
            out.emit(&broker_admin::delete_sub_group(
                targets,
                &group,
                remove_offset.unwrap_or(false),
            )?)?;
        }
        Cmd::GetBrokerConfig {
            broker_addr,
            cluster,
        } => {
            let targets = rmq::targets(ns, broker_addr.as_deref(), cluster.as_deref())?;
            out.emit(&broker_admin::get_broker_config(targets)?)?;
        }
        Cmd::UpdateBrokerConfig {
            broker_addr,
            cluster,
            key,
            value,
        } => {
            let targets = rmq::targets(ns, broker_addr.as_deref(), cluster.as_deref())?;
            out.emit(&broker_admin::update_broker_config(targets, &key, &value)?)?;
        }
        Cmd::Quota {
            action,
            broker_addr,
            cluster,
        } => {
            let targets = rmq::targets(ns, broker_addr.as_deref(), cluster.as_deref())?;
            let rules = match action {
                QuotaCmd::List => quota::list(targets)?,
                QuotaCmd::Set { rule } => quota::set(targets, &rule)?,
                QuotaCmd::Remove { rule } => quota::remove(targets, &rule)?,
            };
            out.emit(&rules)?;
        }
        Cmd::ProducerConnection { group, topic } => {
            out.emit(&broker_admin::producer_connection(ns, &group, &topic)?)?;
        }
        Cmd::ConsumerConnection { group } => {
            out.emit(&broker_admin::consumer_connection(ns, &group)?)?;
        }
        Cmd::QueryMsgTraceById {
            msg_id,
            trace_topic,
        } => {
            out.emit(&trace::query(ns, &msg_id, &trace_topic)?)?;
        }
        Cmd::QueryByUniqueKey { id, topic } => {
            let found = query::by_id(ns, &id, Some(&topic))?;
            out.emit(&query::messages(&found))?;
        }
        Cmd::PrintMsg {
            topic,
            begin_ms,
            end_ms,
            charset,
            sub_expression,
        } => {
            if !charset.eq_ignore_ascii_case("UTF-8") && !charset.eq_ignore_ascii_case("UTF8") {
                anyhow::bail!("only UTF-8 bodies are decoded, got -c {charset}");
            }
            let args = ConsumeArgs {
                from: begin_ms.map_or(StartFrom::First, StartFrom::Timestamp),
                tag_expr: sub_expression,
                sql92: None,
                max: None,
                // One pass over what is stored: stop as soon as a round finds nothing new.
                idle_timeout: Duration::ZERO,
                until_ms: end_ms,
            };
            messages::consume(ns, &mut out, &topic, "mqadmin-print", &args)?;
        }
        Cmd::ClusterRt {
            cluster,
            amount,
            size,
            print_log: _,
            machine_room,
            interval_s,
            rounds,
        } => {
            let args = stats::RtArgs {
                amount,
                size,
                machine_room,
            };
            let mut round: u64 = 0;
            loop {
                out.emit(&stats::cluster_rt(ns, cluster.as_deref(), &args)?)?;
                round += 1;
                match interval_s {
                    Some(s) if rounds == 0 || round < rounds => {
                        std::thread::sleep(Duration::from_secs(s));
                    }
                    _ => break,
                }
            }
        }
        Cmd::StatsAll { topic, interval_ms } => {
            out.emit(&stats::stats_all(ns, topic.as_deref(), interval_ms)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocketmq_names_and_defaults_parse() {
        let cli = Cli::try_parse_from(["mqadmin", "updateTopic", "-t", "T", "-c", "C"]).unwrap();
        assert_eq!(cli.namesrv, "127.0.0.1:9876");
        match cli.command {
            Cmd::UpdateTopic {
                topic,
                queues,
                read_queues,
                write_queues,
                perm,
                order,
                cluster,
                broker_addr,
            } => {
                assert_eq!((topic.as_str(), queues), ("T", 8));
                assert_eq!(
                    (read_queues, write_queues, perm, order),
                    (None, None, 6, None)
                );
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

    fn parse(args: &[&str]) -> Cmd {
        let mut all = vec!["mqadmin"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().command
    }

    #[test]
    fn rocketmq_flags_parse() {
        match parse(&[
            "updateTopic",
            "-t",
            "T",
            "-r",
            "4",
            "-w",
            "2",
            "-p",
            "4",
            "-o",
            "true",
        ]) {
            Cmd::UpdateTopic {
                read_queues: Some(4),
                write_queues: Some(2),
                perm: 4,
                order: Some(true),
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        match parse(&[
            "queryMsgByKey",
            "-t",
            "T",
            "-k",
            "K",
            "-b",
            "5",
            "-e",
            "9",
            "-c",
            "3",
        ]) {
            Cmd::QueryByKey {
                begin_ms: 5,
                end_ms: 9,
                max: 3,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        match parse(&[
            "resetOffsetByTime",
            "-g",
            "G",
            "-t",
            "T",
            "-s",
            "now",
            "-f",
            "true",
        ]) {
            Cmd::ResetOffset { to, .. } => {
                assert_eq!(StartFrom::parse(&to).unwrap(), StartFrom::Last);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["consumerProgress", "-g", "G"]),
            Cmd::ConsumerProgress { topic: None, .. }
        ));
        match parse(&[
            "updateSubGroup",
            "-g",
            "G",
            "-c",
            "C",
            "-s",
            "false",
            "-m",
            "true",
            "-d",
            "false",
            "-q",
            "2",
            "-r",
            "5",
            "-i",
            "0",
            "-w",
            "1",
            "-a",
            "false",
        ]) {
            Cmd::UpdateSubGroup {
                consume_enable: Some(false),
                consume_from_min_enable: Some(true),
                consume_broadcast_enable: Some(false),
                retry_queue_nums: Some(2),
                retry_max_times: Some(5),
                broker_id: Some(0),
                which_broker_when_consume_slowly: Some(1),
                notify_consumer_ids_changed_enable: Some(false),
                cluster: Some(_),
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["deleteSubGroup", "-g", "G", "-b", "a:1", "-r", "true"]),
            Cmd::DeleteSubGroup {
                remove_offset: Some(true),
                ..
            }
        ));
        assert!(matches!(
            parse(&["deleteTopic", "-t", "T", "-c", "C"]),
            Cmd::DeleteTopic {
                cluster: Some(_),
                ..
            }
        ));
        match parse(&["updateBrokerConfig", "-b", "a:1", "-k", "K", "-v", "V"]) {
            Cmd::UpdateBrokerConfig { key, value, .. } => {
                assert_eq!((key.as_str(), value.as_str()), ("K", "V"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["getBrokerConfig", "-c", "C"]),
            Cmd::GetBrokerConfig { .. }
        ));
        assert!(matches!(
            parse(&["producerConnection", "-g", "G", "-t", "T"]),
            Cmd::ProducerConnection { .. }
        ));
        assert!(matches!(
            parse(&["consumerConnection", "-g", "G"]),
            Cmd::ConsumerConnection { .. }
        ));
        assert!(matches!(
            parse(&["queryMsgByUniqueKey", "-i", "ID", "-t", "T"]),
            Cmd::QueryByUniqueKey { .. }
        ));
        assert!(matches!(
            parse(&["printMsg", "-t", "T", "-b", "1", "-e", "2", "-c", "UTF-8", "-s", "A"]),
            Cmd::PrintMsg {
                begin_ms: Some(1),
                end_ms: Some(2),
                ..
            }
        ));
        assert!(matches!(
            parse(&[
                "clusterRT",
                "-c",
                "C",
                "-a",
                "10",
                "-s",
                "64",
                "-p",
                "true",
                "-m",
                "r1",
                "-i",
                "2"
            ]),
            Cmd::ClusterRt {
                amount: 10,
                size: 64,
                interval_s: Some(2),
                ..
            }
        ));
        assert!(matches!(
            parse(&["clusterRT"]),
            Cmd::ClusterRt {
                amount: 100,
                size: 128,
                interval_s: None,
                ..
            }
        ));
        assert!(matches!(
            parse(&["statsAll", "-t", "T"]),
            Cmd::StatsAll { topic: Some(_), .. }
        ));
        assert!(matches!(
            parse(&["topicStatus", "-t", "T"]),
            Cmd::TopicStatus { .. }
        ));
        // updateTopic's and a subgroup's booleans take RocketMQ's explicit true/false.
        assert!(
            Cli::try_parse_from(["mqadmin", "updateSubGroup", "-g", "G", "-s", "maybe"]).is_err()
        );
    }

    #[test]
    fn controller_commands_parse_with_rocketmq_names() {
        match parse(&["electMaster", "-a", "a:1;b:2", "-b", "broker-a", "-i", "1"]) {
            Cmd::ElectMaster {
                controllers,
                group,
                broker_id: Some(1),
            } => assert_eq!(
                (controllers.as_str(), group.as_str()),
                ("a:1;b:2", "broker-a")
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["getSyncStateSet", "-a", "a:1", "-b", "g"]),
            Cmd::GetSyncStateSet { .. }
        ));
        assert!(matches!(
            parse(&["getControllerMetaData", "-a", "a:1"]),
            Cmd::GetControllerMetaData { .. }
        ));
    }
}
