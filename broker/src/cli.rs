//! The `broker` command line. Exits non-zero with a message naming the bad flag or config
//! key; stops cleanly (flushing every shard) on SIGTERM or SIGINT. In the library so other
//! binaries (the bench) can run a broker as a child process of their own.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::Parser;

use crate::config::{BrokerConfig, DEFAULT_PROFILE};

#[derive(Parser, Debug)]
#[command(
    name = "broker",
    version,
    about = "Thread-per-core RocketMQ-class message broker"
)]
struct Cli {
    /// A config file over the profile: TOML with corvus's keys (tuning/README.md), or a
    /// RocketMQ broker.conf (`*.conf`, `*.properties`: RocketMQ's keys, those corvus does not
    /// use named in the log).
    #[arg(short = 'c', long)]
    config: Option<PathBuf>,
    /// Tuning profile: throughput (default), latency, durable, small.
    #[arg(long)]
    profile: Option<String>,
    #[arg(long, help = key_help("listen", "Address every core accepts on"))]
    listen: Option<String>,
    /// Address given to clients (defaults to --listen).
    #[arg(long)]
    advertise_addr: Option<String>,
    /// NameServers, `;`-separated, e.g. "127.0.0.1:9876;127.0.0.1:9877".
    #[arg(short = 'n', long)]
    namesrv: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off when unset); a bare port is
    /// 127.0.0.1:PORT. A token (`metrics_token`) is set in the config file.
    #[arg(long)]
    metrics_addr: Option<String>,
    #[arg(long, help = key_help("data_dir", "Data directory"))]
    data_dir: Option<PathBuf>,
    #[arg(
        long,
        help = key_help("tail_ring_dir", "Where the shards' tail rings live: a tmpfs")
    )]
    tail_ring_dir: Option<PathBuf>,
    /// Cores to run on, one executor pinned per core [default: all].
    #[arg(long)]
    cores: Option<u16>,
    #[arg(long, help = key_help("broker_name", "Broker name"))]
    name: Option<String>,
    #[arg(long, help = key_help("cluster_name", "Cluster name"))]
    cluster: Option<String>,
    /// Refuse sends to unknown topics instead of creating them.
    #[arg(long)]
    no_auto_create_topic: bool,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// The help of a flag that sets config `key`: `text` and the key's built-in default, as
/// `config.rs` declares it.
fn key_help(key: &str, text: &str) -> String {
    match BrokerConfig::default_text(key) {
        Some(default) => format!("{text} [default: {default}]"),
        None => text.to_owned(),
    }
}

fn load_config(cli: &Cli) -> anyhow::Result<BrokerConfig> {
    let mut cfg = BrokerConfig::from_profile(cli.profile.as_deref().unwrap_or(DEFAULT_PROFILE))?;
    if let Some(path) = &cli.config {
        cfg.overlay_file(path)?;
    }
    apply_flags(cli, &mut cfg)?;
    // The keys changed at runtime live in the data directory the flags may have named;
    // flags still win over them.
    cfg.overlay_overrides()?;
    apply_flags(cli, &mut cfg)?;
    cfg.validate()?;
    Ok(cfg)
}

fn apply_flags(cli: &Cli, cfg: &mut BrokerConfig) -> anyhow::Result<()> {
    if let Some(v) = &cli.listen {
        cfg.listen = v.clone();
    }
    if let Some(v) = &cli.advertise_addr {
        cfg.advertise_addr = Some(v.clone());
    }
    if let Some(v) = &cli.namesrv {
        cfg.namesrv_addr = v.clone();
    }
    if let Some(v) = &cli.metrics_addr {
        cfg.metrics_addr = Some(v.clone());
    }
    if let Some(v) = &cli.data_dir {
        cfg.data_dir = v.clone();
    }
    if let Some(v) = &cli.tail_ring_dir {
        cfg.tail_ring_dir = v.clone();
    }
    if let Some(v) = cli.cores {
        if v == 0 {
            anyhow::bail!("--cores must be at least 1 (leave it out to use every core)");
        }
        cfg.cores = v;
    }
    if let Some(v) = &cli.name {
        cfg.broker_name = v.clone();
    }
    if let Some(v) = &cli.cluster {
        cfg.cluster_name = v.clone();
    }
    if cli.no_auto_create_topic {
        cfg.auto_create_topic_enable = false;
    }
    Ok(())
}

/// Parses `args` (the first is the program name), runs the broker until a signal, and
/// returns the process exit code. Usage errors print clap's message and exit with code 2.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).unwrap_or_else(|e| e.exit());
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level);
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: --log-level `{}`: {e}", cli.log_level);
            return 2;
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    match run(&cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let cfg = load_config(cli)?;
    // Signals are taken before the start, so SIGTERM ends a start that is still recovering
    // (or stuck) as it ends a serving broker. The signal thread sets `stop`, which the start
    // watches, and stops the broker once it serves; the main thread looks at `stop` again
    // after publishing the broker, so a signal between the two is not lost.
    let stop = Arc::new(AtomicBool::new(false));
    let serving: Arc<Mutex<Option<Arc<broker_base::Shared>>>> = Arc::new(Mutex::new(None));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("cannot install signal handlers")?;
    {
        let stop = stop.clone();
        let serving = serving.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut taken = signals.forever();
                let Some(sig) = taken.next() else {
                    return;
                };
                // The stop first, the word of it after: a log that cannot be written
                // (stderr a pipe nobody reads) must not hold the stop up.
                stop.store(true, Ordering::SeqCst);
                if let Some(shared) = serving.lock().ok().and_then(|s| s.clone()) {
                    shared.request_shutdown();
                }
                tracing::info!(
                    signal = sig,
                    "stopping (a second SIGTERM or SIGINT ends the process at once)"
                );
                // A stop can wait long (for sends in flight and in-sync slaves, and without
                // bound for the close's fdatasync on a stalled disk): a second signal ends it
                // as kill -9 would, which every profile survives without losing an
                // acknowledged message.
                if let Some(again) = taken.next() {
                    tracing::warn!(
                        signal = again,
                        "a second signal while stopping: exiting at once, as after kill -9"
                    );
                    std::process::exit(128 + again);
                }
            })?;
    }
    let running = match crate::start_until(cfg, &stop) {
        Ok(r) => r,
        Err(e) if e.downcast_ref::<crate::StoppedWhileStarting>().is_some() => {
            tracing::info!("broker stopped: {e}");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let shared = running.shared.clone();
    if let Ok(mut s) = serving.lock() {
        *s = Some(shared.clone());
    }
    if stop.load(Ordering::SeqCst) {
        shared.request_shutdown();
    }
    let core_addrs = shared
        .core_addrs
        .lock()
        .map(|a| a.join(","))
        .unwrap_or_default();
    let line = format!(
        "broker listening on {} (advertised {}, cores {}, shards {}, core addresses {})",
        running.listen_addr, shared.advertise_addr, shared.cores, shared.shard_count, core_addrs
    );
    let ha_addrs = shared
        .ha_addrs
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default();
    let ha = format!(
        "broker replication on {} (role {}, cores' replication addresses {})",
        ha_addrs.first().map(String::as_str).unwrap_or("-"),
        shared.config.broker_role.name(),
        ha_addrs.join(",")
    );
    tracing::info!("{ha}");
    println!("{ha}");
    if let Some(addr) = running.metrics_addr() {
        let m = format!("broker metrics on http://{addr}/metrics");
        tracing::info!("{m}");
        println!("{m}");
    }
    tracing::info!("{line}");
    println!("{line}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    running.wait()?;
    tracing::info!("broker stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn a_flag_that_sets_a_key_shows_the_key_s_default() {
        let cli = Cli::command();
        for (flag, default) in [
            ("listen", "127.0.0.1:10911"),
            ("data-dir", "./data"),
            ("tail-ring-dir", "/dev/shm"),
            ("name", "broker-a"),
            ("cluster", "DefaultCluster"),
        ] {
            let help = cli
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.ends_with(&format!(" [default: {default}]")),
                "--{flag}: {help}"
            );
        }
        assert_eq!(BrokerConfig::default_text("advertise_addr"), None);
        assert_eq!(BrokerConfig::default_text("cores").as_deref(), Some("0"));
        assert_eq!(BrokerConfig::default_text("no_such_key"), None);
    }
}
