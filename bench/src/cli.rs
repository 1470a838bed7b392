//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    version,
    about = "TPS and latency bench harness for corvus",
    long_about = "With no subcommand: the quickstart. Starts a NameServer and a broker as child \
processes in a temporary directory, measures the disk, runs a produce run, a consume run \
(catching up from disk) and a paced single-message latency run, prints a table, stops \
everything. Subcommands run against a cluster given with -n, or against their own local \
cluster when -n is left out.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub quick: QuickArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Produce messages and report throughput and send→ack latency.
    Produce(RunArgs),
    /// Read everything stored in a topic (each queue from its first to its last offset).
    Consume(RunArgs),
    /// Produce and consume at once: both throughputs and send→delivery latency.
    E2e(RunArgs),
    /// Raw O_DIRECT sequential-write bandwidth and fdatasync latency of a directory's disk.
    Disk(DiskArgs),
    /// Drive any broker that speaks Apache RocketMQ's remoting protocol (corvus, or RocketMQ
    /// itself): SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE in, PULL_MESSAGE out, one `RESULT`
    /// JSON line at the end.
    Remoting(RemotingArgs),
    /// Scheduled messages: schedule `--messages` due over `--spread-ms` after `--lead-ms`,
    /// then report scheduling and delivery rates and lateness beside the floor.
    Delayed(DelayedArgs),
    /// Lite Topics (RocketMQ 5.5) at scale: create `--lite-topics` lite topics with one
    /// message each, consume them all, restart; rates, memory per lite topic, start times.
    Lite(LiteArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LiteArgs {
    /// Lite topics to create (one message each).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    pub lite_topics: u64,
    /// Lite topics each consumer client subscribes.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub per_client: u64,
    /// Connections sending (and consuming) at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub size: u64,
    /// Broker cores.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub cores: u16,
    #[arg(long, default_value = "throughput")]
    pub profile: String,
    #[arg(long)]
    pub broker_config: Option<std::path::PathBuf>,
    /// Drive the cluster of this NameServer (HOST:PORT) instead of starting corvus: the
    /// restart is skipped, and memory is sampled only with `--broker-pid`.
    #[arg(long)]
    pub namesrv: Option<String>,
    /// With `--namesrv`: the process id of its broker, whose RssAnon is sampled.
    #[arg(long, requires = "namesrv")]
    pub broker_pid: Option<u32>,
    /// First create the consumer group with the attribute `lite.bind.topic` naming the parent
    /// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on every broker): Apache RocketMQ 5.5 pops and
    /// acks lite messages only for such a group.
    #[arg(long)]
    pub bind_group: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DelayedArgs {
    /// Messages to schedule (all pending at once before the first is due).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub messages: u64,
    /// The first is due this long after the bench starts sending.
    #[arg(long, default_value_t = 10_000)]
    pub lead_ms: u64,
    /// Due times are spread evenly over this long.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub spread_ms: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4_194_304))]
    pub size: u64,
    /// Messages per send.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub batch: u64,
    /// Queues of the topic (1: every timer on one shard).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: u32,
    #[arg(long, default_value = "throughput")]
    pub profile: String,
    #[arg(long)]
    pub broker_config: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct QuickArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Rate of the quickstart's paced single-message latency run (0 skips it).
    #[arg(long, default_value_t = 20_000.0)]
    pub latency_rate: f64,
    /// Seconds of the latency run.
    #[arg(long, default_value_t = 3.0)]
    pub latency_duration: f64,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// NameServer addresses (`;`-separated). Without it, a local NameServer and broker are
    /// started as child processes.
    #[arg(short = 'n', long)]
    pub namesrv: Option<String>,
    /// Speak TLS to the cluster given with -n (its `tls_mode` permissive or enforcing),
    /// trusting the PEM CA certificates in this file.
    #[arg(long, requires = "namesrv")]
    pub tls_trust_cert: Option<PathBuf>,
    /// Topic [default: a fresh `BenchTopic_<time>`, created with --queues queues].
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// Access key of the ACL account the bench's clients log in as (a broker with
    /// `acl_enable`; creating the topic needs an admin account).
    #[arg(long, env = "CORVUS_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,
    /// Its secret key.
    #[arg(
        long,
        env = "CORVUS_SECRET_KEY",
        hide_env_values = true,
        requires = "access_key"
    )]
    pub secret_key: Option<String>,
    /// Body bytes per message (at least 24: the bench's header).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(24..=4_194_304))]
    pub size: u64,
    /// Messages per send (one frame, one queue).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    /// Producer threads, each with its own client::Producer.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub producers: u64,
    /// Consumer threads, each with its own client::PullConsumer [default: one per queue].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub consumers: Option<u64>,
    /// Seconds to produce [default: 8; the consume run reads everything produced].
    #[arg(long, conflicts_with = "messages")]
    pub duration: Option<f64>,
    /// Messages to produce (over all producers), or to consume at most.
    #[arg(long)]
    pub messages: Option<u64>,
    /// Open-loop pacing: messages per second over all producers; latency counts from each
    /// send's scheduled time.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Wait for each send's result before the next.
    #[arg(long, conflicts_with = "async_")]
    pub sync: bool,
    /// Pipelined sends with callbacks (the default).
    #[arg(long = "async", id = "async_")]
    pub async_: bool,
    /// Async batches in flight per producer thread.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub inflight: u64,
    /// zstd-compress bodies on the producer.
    #[arg(long)]
    pub compress: bool,
    /// Messages per pull.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub pull_batch: u32,
    /// Queues of the topic the bench creates.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: u32,
    /// Send timeout, ms.
    #[arg(long, default_value_t = 10_000)]
    pub send_timeout_ms: u64,
    /// Tuning profile of the local broker: throughput, latency, durable, small.
    #[arg(long, default_value = "throughput")]
    pub profile: String,
    /// A TOML file of broker keys (tuning/README.md) the local broker takes on top of its
    /// profile, to measure a change of one key.
    #[arg(long)]
    pub broker_config: Option<std::path::PathBuf>,
    /// Replicate: the local broker is this role's master (`ASYNC_MASTER` or `SYNC_MASTER`)
    /// and a slave runs beside it on the last CPU; produce runs also report the slave's lag.
    #[arg(long, value_parser = ["ASYNC_MASTER", "SYNC_MASTER"])]
    pub replica: Option<String>,
    /// Cores of the local broker (it pins itself to the first ones; the bench takes the rest).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub broker_cores: u16,
    /// CPUs the bench's own threads run on, comma-separated [default: those after the local
    /// broker's]. With `--replica`, `--bench-cpus 0` leaves the last CPU to the slave alone,
    /// as if it had a host of its own (the bench then shares the master's CPU, standalone
    /// or not).
    #[arg(long, value_delimiter = ',')]
    pub bench_cpus: Option<Vec<usize>>,
    /// Data directory of the local broker and of the disk measurement [default: a temporary
    /// directory, removed at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Skip the disk measurement (no ratio to the disk limit then).
    #[arg(long)]
    pub no_disk: bool,
    /// Measure this directory's disk first (against a remote cluster: the broker's disk, if
    /// mounted here), for the ratio of MB/s to the disk limit.
    #[arg(long)]
    pub disk_dir: Option<PathBuf>,
    /// One JSON object per run on stdout, one per line, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Draw the latency percentile curves into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Seconds of the host stall-floor measurement (a clock-reading spin loop on every CPU
    /// of the run) right before each paced run, printed beside its latency; 0 = none, at
    /// most 60.
    #[arg(long, default_value_t = 2.0)]
    pub floor_duration: f64,
}

#[derive(Debug, Clone, Args)]
pub struct RemotingArgs {
    /// NameServer addresses (`;`-separated); the topic's route comes from the first that
    /// answers.
    #[arg(short = 'n', long)]
    pub namesrv: String,
    /// Topic (it must exist: its route decides the brokers and queues).
    #[arg(short = 't', long)]
    pub topic: String,
    /// Producer connections, each with a writer and a reader thread.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub producers: u64,
    /// Requests in flight per connection (1: each send waits for its answer).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub inflight: u64,
    /// Messages per request: 1 sends SEND_MESSAGE_V2, more SEND_BATCH_MESSAGE.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// Body bytes per message.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=4_194_304))]
    pub size: u64,
    /// Seconds before the measured window (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub warmup: u64,
    /// Seconds of the measured window.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: u64,
    /// The broker's pid: its utime+stime over the window gives broker CPU per message.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Producer group [default: bench_producer].
    #[arg(long)]
    pub group: Option<String>,
    /// Messages per pull.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub pull_batch: u32,
    /// Produce only (no pulls).
    #[arg(long)]
    pub no_consume: bool,
    /// Send headers in the ROCKETMQ binary form instead of JSON (the Java client's default).
    #[arg(long)]
    pub binary_header: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DiskArgs {
    /// Directory on the disk to measure [default: the system temporary directory].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// MiB written sequentially.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(16..=1_048_576))]
    pub mib: u64,
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
    }

    #[test]
    fn no_arguments_is_the_quickstart() {
        let cli = parse(&[]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.quick.run.size, 1024);
        assert_eq!(cli.quick.run.broker_cores, 1);
        assert_eq!(cli.quick.run.profile, "throughput");
        assert_eq!(cli.quick.latency_rate, 20_000.0);
        let cli = parse(&["--profile", "small", "--messages", "100", "--json"]).unwrap();
        assert_eq!(cli.quick.run.messages, Some(100));
        assert!(cli.quick.run.json);
        assert_eq!(cli.quick.run.bench_cpus, None);
    }

    #[test]
    fn the_bench_cpus_are_a_comma_separated_list() {
        let cli = parse(&["--replica", "ASYNC_MASTER", "--bench-cpus", "0,2"]).unwrap();
        assert_eq!(cli.quick.run.bench_cpus, Some(vec![0, 2]));
        assert!(parse(&["--bench-cpus", "zero"]).is_err());
    }

    #[test]
    fn subcommands_take_the_run_flags() {
        let cli = parse(&[
            "produce",
            "-n",
            "127.0.0.1:9876",
            "-t",
            "T",
            "--size",
            "512",
            "--batch",
            "10",
            "--producers",
            "3",
            "--rate",
            "20000",
            "--sync",
            "--compress",
            "--duration",
            "5",
        ])
        .unwrap();
        let Some(Command::Produce(a)) = cli.command else {
            panic!("not produce")
        };
        assert_eq!(a.namesrv.as_deref(), Some("127.0.0.1:9876"));
        assert_eq!(a.topic.as_deref(), Some("T"));
        assert_eq!((a.size, a.batch, a.producers), (512, 10, 3));
        assert_eq!(a.rate, Some(20000.0));
        assert!(a.sync && a.compress);
        assert_eq!(a.duration, Some(5.0));
        let cli = parse(&["e2e", "--consumers", "2", "--messages", "10"]).unwrap();
        assert!(matches!(cli.command, Some(Command::E2e(ref a)) if a.consumers == Some(2)));
        let cli = parse(&["disk", "--dir", "/tmp"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Disk(ref d)) if d.mib == 512));
        let cli = parse(&[
            "remoting",
            "-n",
            "127.0.0.1:9876",
            "-t",
            "T",
            "--batch",
            "32",
        ])
        .unwrap();
        let Some(Command::Remoting(r)) = cli.command else {
            panic!("not remoting")
        };
        assert_eq!(
            (r.producers, r.inflight, r.batch, r.size),
            (64, 1, 32, 1024)
        );
        assert_eq!((r.warmup, r.duration, r.broker_pid), (10, 30, None));
        assert!(
            parse(&["remoting", "-t", "T"]).is_err(),
            "the NameServer is required"
        );
    }

    #[test]
    fn contradictions_are_refused() {
        assert!(parse(&["produce", "--sync", "--async"]).is_err());
        assert!(parse(&["produce", "--duration", "1", "--messages", "5"]).is_err());
        assert!(parse(&["produce", "--size", "8"]).is_err());
        assert!(parse(&["produce", "--batch", "0"]).is_err());
    }
}
