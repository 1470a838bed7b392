//! The state every core and the broker's threads share: the config, the addresses, the
//! topic table the NameServer registration sends, and the shutdown flags. Off the data path:
//! only topic changes, status and the stop touch it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use protocol::TopicConfig;
use shard::Clock;

use crate::config::BrokerConfig;

/// State shared by every core and the registration thread. Off the data path: only topic
/// changes and status touch it.
pub struct Shared {
    /// The config the broker started with. The keys that apply while it runs
    /// (`restart: false`) may have changed since: each core keeps the config it runs with
    /// (`Core::config`), and those are the values to read.
    pub config: BrokerConfig,
    /// `broker_permission` as it is now, for the registration thread: the routes it
    /// registers carry it (set by the core that applies a config change).
    pub broker_permission: AtomicU32,
    /// Set to have the registration thread register in full at once (a change of what the
    /// routes carry, as `broker_permission`).
    pub register_now: AtomicBool,
    /// When the broker started, by [`Shared::clock`].
    pub started: Instant,
    /// What every deadline, expiry, lease and stamped time of the broker reads: the
    /// system's clocks in production, a manual clock in a test that moves time by hand.
    /// The shards are given the same one, so the times they stamp compare with the broker's.
    pub clock: Clock,
    pub shard_count: u16,
    pub cores: u16,
    /// The address any core answers on.
    pub advertise_addr: String,
    /// Each core's direct address, filled in as the cores bind.
    pub core_addrs: Mutex<Vec<String>>,
    /// Each core's replication address (a slave's shard is sent to its owner's).
    pub ha_addrs: Mutex<Vec<String>>,
    /// Latest topic table, for the NameServer registration thread.
    pub topics: Mutex<std::collections::BTreeMap<String, TopicConfig>>,
    /// Topics created or changed since the registration thread last took them: it sends
    /// just these to the NameServers (`RegisterTopics`), not the whole table.
    pub topics_changed: Mutex<Vec<TopicConfig>>,
    /// Bumped by core 0 on every topic change; the registration thread registers again.
    pub topics_version: AtomicU64,
    /// The topics_version last registered with every reachable NameServer.
    pub registered_version: AtomicU64,
    /// Set once by the signal thread (or `Running::request_shutdown`): from then on every
    /// core refuses new sends (`BrokerError::ShuttingDown`), at the request, not at a tick.
    pub shutdown: AtomicBool,
    /// Cores whose sends in flight have all been answered since shutdown began. A core
    /// closes its shards only once every core has drained: a send taken by one core may
    /// still be on its way over the mesh to a shard of another.
    pub cores_drained: AtomicUsize,
    pub metrics: Arc<crate::metrics::BrokerMetrics>,
    /// Wakes the registration thread (a topic change, or shutdown): it sleeps otherwise,
    /// so that it never takes a core's CPU between registrations.
    pub registry_wake: (Mutex<()>, std::sync::Condvar),
    /// The listeners' TLS and the outgoing links' (from the `tls_*` keys, read at start).
    pub tls: crate::tls::BrokerTls,
    /// The signatures of timed RocketMQ requests taken within `acl_signature_window_ms`,
    /// for every core: a replay sent on a connection another core serves is still a replay.
    /// Only requests that carry a time (mqadmin's) take this lock; RocketMQ's clients send
    /// none and the native protocol logs in per connection, so sends and pulls never do.
    pub replay_guard: Arc<Mutex<acl::fresh::ReplayGuard>>,
    /// ACL 2.0's users and ACLs (`crate::auth`): every core reads the same set.
    pub auth: Arc<crate::auth::AuthStore>,
}

impl Shared {
    /// The state of a broker of `cores` cores over `shard_count` shards, answering on
    /// `advertise_addr`, whose topic table starts as `topics`. The cores' direct and
    /// replication addresses are filled in as they bind.
    pub fn new(
        config: BrokerConfig,
        shard_count: u16,
        cores: u16,
        advertise_addr: String,
        tls: crate::tls::BrokerTls,
        topics: Vec<TopicConfig>,
    ) -> Shared {
        Shared {
            tls,
            started: Instant::now(),
            clock: Clock::System,
            shard_count,
            cores,
            advertise_addr,
            core_addrs: Mutex::new(Vec::new()),
            ha_addrs: Mutex::new(Vec::new()),
            topics: Mutex::new(topics.into_iter().map(|t| (t.name.clone(), t)).collect()),
            topics_changed: Mutex::new(Vec::new()),
            topics_version: AtomicU64::new(1),
            registered_version: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            cores_drained: AtomicUsize::new(0),
            registry_wake: (Mutex::new(()), std::sync::Condvar::new()),
            metrics: Arc::new(crate::metrics::BrokerMetrics::new()),
            replay_guard: Arc::new(Mutex::new(acl::fresh::ReplayGuard::new(
                config.acl_signature_window_ms,
                config.acl_signature_time_required,
            ))),
            auth: Arc::new(crate::auth::AuthStore::empty()),
            broker_permission: AtomicU32::new(config.broker_permission),
            register_now: AtomicBool::new(false),
            config,
        }
    }

    /// The same state with ACL 2.0's stored users and ACLs.
    pub fn with_auth(mut self, auth: crate::auth::AuthStore) -> Shared {
        self.auth = Arc::new(auth);
        self
    }

    /// The same state timed by `clock` (the start time read again from it).
    pub fn with_clock(mut self, clock: Clock) -> Shared {
        self.started = clock.now();
        self.clock = clock;
        self
    }

    /// The address core `core` stamps as the store host of the records it appends (and so
    /// names in their offset message ids): its own direct address when the direct ports are
    /// fixed (`direct_port_base`), which is the address its queues' broker has in the route,
    /// so RocketMQ's tools that match a message's store host against that broker (the
    /// dashboard's message track, `queryMsgById`'s track) find it; otherwise the advertised
    /// shared address, because an ephemeral direct port would not outlive a restart and the
    /// ids already handed out must keep reaching the broker.
    pub fn store_host(&self, core: u16) -> std::net::SocketAddrV4 {
        let own = (self.config.direct_port_base != 0)
            .then(|| {
                let addrs = self
                    .core_addrs
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                addrs.get(usize::from(core)).and_then(|a| a.parse().ok())
            })
            .flatten();
        own.or_else(|| self.advertise_addr.parse().ok())
            .unwrap_or_else(|| std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0))
    }

    /// How long the broker has been up, by its clock.
    pub fn uptime(&self) -> std::time::Duration {
        self.clock.now().saturating_duration_since(self.started)
    }

    /// Whether shutdown has begun (sends are refused from then on).
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Asks every core and thread to stop.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.wake_registry();
    }

    /// Has the registration thread register in full with every NameServer at once.
    pub fn register_at_once(&self) {
        self.register_now.store(true, Ordering::SeqCst);
        self.wake_registry();
    }

    pub fn wake_registry(&self) {
        let _guard = self.registry_wake.0.lock();
        self.registry_wake.1.notify_all();
    }
}
