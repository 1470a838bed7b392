//! `corvus-controller`: one member of the failover controller group.
//!
//! ```text
//! corvus-controller --id 1 --listen 127.0.0.1:9878 \
//!     --peers 1=127.0.0.1:9878,2=127.0.0.1:9879,3=127.0.0.1:9880 --data-dir /var/corvus/ctl1
//! ```
//!
//! Brokers, mqadmin and the other controllers all use the one `--listen` port. On its first
//! start (empty data dir) every member proposes the same membership, the `--peers` list;
//! openraft makes that safe. Later starts reuse the data dir and ignore `--peers` for the
//! membership (it still gives the addresses shown by `GetMetadata`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use openraft::BasicNode;

use controller::access::Gate;
use controller::log_store::LogStore;
use controller::network::Network;
use controller::policy::PolicyConfig;
use controller::raft_types::Raft;
use controller::service::Service;
use controller::state_machine::StateMachine;

#[derive(Debug, Parser)]
#[command(
    name = "corvus-controller",
    version,
    about = "corvus failover controller"
)]
struct Cli {
    /// This controller's id, one of `--peers`.
    #[arg(long)]
    id: u64,
    /// Address to listen on, for brokers, mqadmin and the other controllers.
    #[arg(long)]
    listen: String,
    /// Every controller as `id=host:port`, comma separated (this one included).
    #[arg(long)]
    peers: String,
    /// Directory of the Raft log, vote and state.
    #[arg(long = "data-dir")]
    data_dir: PathBuf,
    /// A broker not heard for this long is dead; also the lease given to masters. 2000 ms is
    /// six missed heartbeats of a broker's default 300 ms, and keeps a frozen master's
    /// failover inside a client's 3 s send timeout.
    #[arg(long = "heartbeat-timeout-ms", default_value_t = 2000)]
    heartbeat_timeout_ms: u64,
    /// How often the leader checks every group for a dead master (an in-memory check; an
    /// election is one Raft write).
    #[arg(long = "election-check-interval-ms", default_value_t = 100)]
    election_check_interval_ms: u64,
    /// Allow a replica outside the SyncStateSet to become master (may lose messages).
    #[arg(long = "enable-elect-unclean-master", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_elect_unclean_master: bool,
    /// Raft heartbeat interval between controllers.
    #[arg(long = "raft-heartbeat-ms", default_value_t = 150)]
    raft_heartbeat_ms: u64,
    /// Raft election timeout, randomized between this and twice this.
    #[arg(long = "raft-election-timeout-ms", default_value_t = 600)]
    raft_election_timeout_ms: u64,
    /// Access control: every request must be signed by an account of this plain_acl.yml
    /// (RocketMQ ACL 1.0's format; admin accounts for anything that changes the record),
    /// within --acl-signature-window-ms, and never replayed. Off when unset.
    #[arg(long = "acl-file", requires = "acl_access_key")]
    acl_file: Option<PathBuf>,
    /// The admin account of --acl-file this controller signs its Raft RPCs to the others
    /// with (its secret is read from the file).
    #[arg(long = "acl-access-key", requires = "acl_file")]
    acl_access_key: Option<String>,
    /// A signed request is taken only this close to the controller's clock.
    #[arg(long = "acl-signature-window-ms", default_value_t = acl::fresh::WINDOW_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
    acl_signature_window_ms: u64,
}

fn parse_peers(s: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut peers = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .with_context(|| format!("peer {part:?} is not id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .with_context(|| format!("peer id in {part:?}"))?;
        if peers.insert(id, addr.trim().to_owned()).is_some() {
            bail!("peer id {id} given twice");
        }
    }
    if peers.is_empty() {
        bail!("--peers is empty");
    }
    Ok(peers)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let peers = parse_peers(&cli.peers)?;
    if !peers.contains_key(&cli.id) {
        bail!("--id {} is not in --peers", cli.id);
    }
    if cli.heartbeat_timeout_ms == 0 || cli.election_check_interval_ms == 0 {
        bail!("--heartbeat-timeout-ms and --election-check-interval-ms must be positive");
    }
    std::fs::create_dir_all(&cli.data_dir)
        .with_context(|| format!("creating {}", cli.data_dir.display()))?;

    let config = openraft::Config {
        cluster_name: "corvus-controller".into(),
        heartbeat_interval: cli.raft_heartbeat_ms,
        election_timeout_min: cli.raft_election_timeout_ms,
        election_timeout_max: cli.raft_election_timeout_ms * 2,
        // Keep every frame well under controller-proto's 1 MiB limit (JSON of bytes is ~4x).
        snapshot_max_chunk_size: 128 * 1024,
        max_payload_entries: 64,
        ..Default::default()
    }
    .validate()
    .context("raft config")?;

    let (gate, credentials) = match (&cli.acl_file, &cli.acl_access_key) {
        (Some(file), Some(ak)) => {
            let (gate, own) = Gate::open(file, ak, cli.acl_signature_window_ms)
                .map_err(|e| anyhow::anyhow!(e))?;
            tracing::info!(file = %file.display(), "access control on");
            (Some(Arc::new(gate)), Some(own))
        }
        _ => (None, None),
    };

    let log = LogStore::open(&cli.data_dir)?;
    let sm = StateMachine::open(&cli.data_dir)?;
    let network = Network { credentials };
    let raft = Raft::new(cli.id, Arc::new(config), network, log, sm.clone())
        .await
        .context("starting raft")?;

    let listener = tokio::net::TcpListener::bind(&cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    let local = listener.local_addr()?;

    let policy = PolicyConfig {
        heartbeat_timeout_ms: cli.heartbeat_timeout_ms,
        unclean: cli.enable_elect_unclean_master,
    };
    let service = Service::new(cli.id, raft.clone(), sm, policy, peers.clone());
    tokio::spawn(controller::server::serve(
        listener,
        raft.clone(),
        service.clone(),
        gate,
    ));
    tokio::spawn(
        service
            .clone()
            .run_election_checks(Duration::from_millis(cli.election_check_interval_ms)),
    );

    if !raft.is_initialized().await? {
        let members: BTreeMap<u64, BasicNode> = peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        let ids: BTreeSet<u64> = members.keys().copied().collect();
        tracing::info!(?ids, "first start: proposing the initial membership");
        if let Err(e) = raft.initialize(members).await {
            // Another member got there first; its membership is the same one.
            tracing::info!(error = %e, "initialize not needed");
        }
    }
    println!("controller listening on {local} id {}", cli.id);

    wait_for_signal().await;
    tracing::info!("stopping");
    let _ = raft.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "no SIGTERM handler; stopping on ctrl-c only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
