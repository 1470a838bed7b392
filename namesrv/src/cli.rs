//! The `namesrv` command line: runs a NameServer until SIGTERM or SIGINT. In the library so
//! that other binaries (the bench) can run a NameServer as a child process of their own.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing_subscriber::filter::LevelFilter;

use crate::NameServerConfig;

/// The NameServer: a stateless registry of live brokers and topic routes.
#[derive(Debug, Parser)]
#[command(name = "namesrv", version, about)]
struct Args {
    /// Address to listen on; port 0 lets the OS pick (the start-up line tells which).
    #[arg(long, default_value_t = NameServerConfig::LISTEN_ADDR_DEFAULT)]
    listen: SocketAddr,

    /// Drop a broker silent for longer than this many milliseconds.
    #[arg(
        long,
        default_value_t = NameServerConfig::BROKER_EXPIRY_MS_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=NameServerConfig::BROKER_EXPIRY_MS_MAX),
    )]
    broker_expiry_ms: u64,

    /// Look for expired brokers this often (milliseconds; capped at a quarter of the expiry).
    #[arg(
        long,
        default_value_t = NameServerConfig::SCAN_INTERVAL_MS_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    scan_interval_ms: u64,

    /// Connections served at once; at the cap a newcomer is served and the longest-idle
    /// connection (one that never sent a request first) is closed.
    #[arg(
        long,
        default_value_t = NameServerConfig::CONNECTIONS_MAX_DEFAULT as u64,
        value_parser = clap::value_parser!(u64).range(1..=NameServerConfig::CONNECTIONS_LIMIT as u64),
    )]
    connections_max: u64,

    /// Close a connection that completes no request for this many milliseconds.
    #[arg(
        long,
        default_value_t = NameServerConfig::CONNECTION_IDLE_TIMEOUT_MS_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=NameServerConfig::TIMEOUT_MS_MAX),
    )]
    connection_idle_timeout_ms: u64,

    /// Close a connection whose started frame is not complete within this many milliseconds.
    #[arg(
        long,
        default_value_t = NameServerConfig::FRAME_TIMEOUT_MS_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=NameServerConfig::TIMEOUT_MS_MAX),
    )]
    frame_timeout_ms: u64,

    /// Serve Prometheus metrics at http://ADDR/metrics (off when unset); a bare port is
    /// 127.0.0.1:PORT, and an address beyond loopback is logged as a warning.
    #[arg(long, value_parser = telemetry::listen_addr)]
    metrics_addr: Option<SocketAddr>,

    /// A file holding the token a scrape must send as `Authorization: Bearer TOKEN` (a
    /// file, not a flag, so the token is not in the process list); without it metrics are
    /// served to whoever reaches the address.
    #[arg(long, requires = "metrics_addr")]
    metrics_token_file: Option<std::path::PathBuf>,

    /// Access control: every write (a broker's registration, heartbeat or unregistration,
    /// a topic delete) needs an admin account of `--acl-file` (a native login or a
    /// RocketMQ signature) or an allow-listed address; route reads stay open. Off by
    /// default.
    #[arg(long, requires = "acl_file")]
    acl_enable: bool,

    /// The plain_acl.yml (RocketMQ ACL 1.0's format) read with `--acl-enable`, and read
    /// again when it changes.
    #[arg(long, requires = "acl_enable")]
    acl_file: Option<std::path::PathBuf>,

    /// ACL 2.0: the users and ACLs (the JSON form a broker keeps in `config/auth.json`)
    /// checked with `--authentication-enable` or `--authorization-enable`, and read again
    /// when it changes. Not with `--acl-enable`: one rule set decides.
    #[arg(long, conflicts_with = "acl_enable")]
    auth_file: Option<std::path::PathBuf>,

    /// ACL 2.0 (RocketMQ's authenticationEnabled): every write (a broker's registration,
    /// heartbeat or unregistration, a topic delete, a KV config change) must come from an
    /// enabled user of `--auth-file`, signed with its password; route reads stay open.
    #[arg(long, requires = "auth_file")]
    authentication_enable: bool,

    /// ACL 2.0 (RocketMQ's authorizationEnabled): every write must come from a super user
    /// or one allowed Cluster:Update on the cluster it names (implies authentication).
    #[arg(long, requires = "auth_file")]
    authorization_enable: bool,

    /// With `--acl-enable` or ACL 2.0: a signed RocketMQ request carrying its time
    /// (`SignedAtMs`, as mqadmin sends) is taken only this close to the NameServer's clock,
    /// and only once (an exact replay is refused).
    #[arg(long, default_value_t = acl::fresh::WINDOW_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
    acl_signature_window_ms: u64,

    /// With `--acl-enable` or ACL 2.0: refuse signed RocketMQ requests that carry no time
    /// (real RocketMQ clients send none, so this shuts them out).
    #[arg(long)]
    acl_signature_time_required: bool,

    /// TLS on the listener: disabled, permissive (TLS and plaintext) or enforcing (TLS only).
    #[arg(long, default_value = "disabled", value_parser = parse_mode)]
    tls_mode: tls::Mode,

    /// Keep the KV config (mqadmin's updateKvConfig and updateOrderConf) in this file
    /// across restarts (RocketMQ's kvConfig.json); without it, in memory only.
    #[arg(long)]
    kv_config_path: Option<std::path::PathBuf>,

    /// PEM certificate chain (needed unless --tls-mode disabled).
    #[arg(long)]
    tls_cert_path: Option<std::path::PathBuf>,

    /// PEM private key of --tls-cert-path.
    #[arg(long)]
    tls_key_path: Option<std::path::PathBuf>,

    /// Client certificates: none, optional or require (chaining to --tls-trust-cert-path).
    #[arg(long, default_value = "none", value_parser = parse_client_auth)]
    tls_client_auth: tls::ClientAuth,

    /// PEM CA certificates that client certificates must chain to.
    #[arg(long)]
    tls_trust_cert_path: Option<std::path::PathBuf>,

    /// Log level: off, error, warn, info, debug or trace.
    #[arg(long, default_value_t = LevelFilter::INFO)]
    log_level: LevelFilter,
}

fn parse_mode(s: &str) -> Result<tls::Mode, String> {
    tls::Mode::parse(s).map_err(|e| e.to_string())
}

fn parse_client_auth(s: &str) -> Result<tls::ClientAuth, String> {
    tls::ClientAuth::parse(s).map_err(|e| e.to_string())
}

/// Parses `args` (the first is the program name) and runs until a signal. Usage errors print
/// clap's message and exit the process with code 2.
pub fn run<I, T>(args: I) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = Args::try_parse_from(args).unwrap_or_else(|e| e.exit());
    let _ = tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();

    if args.auth_file.is_some() && !args.authentication_enable && !args.authorization_enable {
        anyhow::bail!("--auth-file needs --authentication-enable or --authorization-enable");
    }
    let config = NameServerConfig {
        listen_addr: args.listen,
        broker_expiry_ms: args.broker_expiry_ms,
        scan_interval_ms: args.scan_interval_ms,
        // Bounded by the parser to 1..=CONNECTIONS_LIMIT, so it fits a usize.
        connections_max: usize::try_from(args.connections_max)
            .context("--connections-max does not fit this platform")?,
        connection_idle_timeout_ms: args.connection_idle_timeout_ms,
        frame_timeout_ms: args.frame_timeout_ms,
        acl_file: args.acl_file.clone().filter(|_| args.acl_enable),
        auth_file: args.auth_file,
        authentication_enable: args.authentication_enable,
        authorization_enable: args.authorization_enable,
        acl_signature_window_ms: args.acl_signature_window_ms,
        acl_signature_time_required: args.acl_signature_time_required,
        tls_mode: args.tls_mode,
        kv_config_path: args.kv_config_path,
        tls: match (args.tls_cert_path, args.tls_key_path) {
            (Some(cert_path), Some(key_path)) => Some(tls::ServerSettings {
                cert_path,
                key_path,
                client_auth: args.tls_client_auth,
                trust_cert_path: args.tls_trust_cert_path,
            }),
            (None, None) => None,
            _ => anyhow::bail!("--tls-cert-path and --tls-key-path go together"),
        },
        ..NameServerConfig::default()
    };
    // Register for signals before starting, so a signal sent right after the start-up line
    // is never missed.
    let mut signals =
        Signals::new([SIGTERM, SIGINT]).context("cannot install the signal handlers")?;
    let server =
        crate::start(config).with_context(|| format!("cannot start on {}", args.listen))?;

    let token = match &args.metrics_token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--metrics-token-file {}", path.display()))?;
            let token = text.trim().to_owned();
            if token.is_empty() {
                anyhow::bail!("--metrics-token-file {}: the file is empty", path.display());
            }
            Some(token)
        }
        None => None,
    };
    let metrics = match args.metrics_addr {
        Some(addr) => Some(
            telemetry::serve(addr, server.metrics_renderer(), token)
                .with_context(|| format!("--metrics-addr {addr}: cannot listen"))?,
        ),
        None => None,
    };

    // Scripts and tests read the bound addresses (port 0 = the OS's pick) from stdout; the
    // metrics line comes first, the listening line last.
    let mut stdout = std::io::stdout().lock();
    if let Some(m) = &metrics {
        writeln!(
            stdout,
            "namesrv metrics on http://{}/metrics",
            m.local_addr()
        )?;
        tracing::info!("namesrv metrics on http://{}/metrics", m.local_addr());
    }
    writeln!(stdout, "namesrv listening on {}", server.local_addr())?;
    stdout.flush()?;
    drop(stdout);

    let signal = signals.forever().next();
    tracing::info!(?signal, "signal received, shutting down");
    if let Some(m) = metrics {
        m.shutdown();
    }
    server.shutdown();
    tracing::info!("namesrv stopped");
    Ok(())
}
