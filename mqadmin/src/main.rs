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

mod messages;
mod output;
mod progress;
mod query;
mod status;
mod topics;

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
    let mut out = Output::new(if cli.json { Format::Json } else { Format::Text });
    let ns = cli.namesrv.as_str();
    match cli.command {
        Cmd::UpdateTopic {
            topic,
            queues,
            cluster,
            broker_addr,
        } => {
            let target = match broker_addr {
                Some(addr) => topics::Target::Broker(addr),
                None => topics::Target::Cluster(cluster),
            };
            out.emit(&topics::update_topic(ns, &topic, queues, target)?)?;
        }
        Cmd::TopicList => out.emit(&topics::topic_list(ns)?)?,
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
            max,
            timeout_ms,
        } => {
            let args = ConsumeArgs {
                from: StartFrom::parse(&from)?,
                tag_expr,
                max,
                idle_timeout: Duration::from_millis(timeout_ms),
            };
            messages::consume(ns, &mut out, &topic, &group, &args)?;
        }
        Cmd::ResetOffset { group, topic, to } => {
            let to = StartFrom::parse(&to)?;
            out.emit(&messages::reset_offset(ns, &group, &topic, to)?)?;
        }
        Cmd::ConsumerProgress { group, topic } => {
            out.emit(&progress::read(ns, &group, &topic)?)?;
        }
        Cmd::BrokerStatus {
            broker_addr,
            interval_ms,
        } => out.emit(&status::broker_status(ns, &broker_addr, interval_ms)?)?,
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
}
