//! The broker's one config struct: defaults, bounds, TOML loading, tuning profiles.
//!
//! Precedence: built-in defaults < the tuning profile (`--profile`, default `throughput`) <
//! the config file (`--config`, TOML or a RocketMQ broker.conf) < the overrides stored by
//! UPDATE_BROKER_CONFIG in the data directory < command-line flags.
//!
//! Every key is declared once, in the `config_keys!` list below: its name, type, doc,
//! default, bounds (for a numeric key the range `validate` checks, and the same bounds in
//! words), its RocketMQ name and whether a change needs a restart: a key with
//! `restart: false` is read at each use, so UPDATE_BROKER_CONFIG applies it on every core at
//! once ([`BrokerConfig::stage_update`]); the rest are read at start. The struct, its `Default`, [`KEYS`] and
//! [`RENAMED_KEYS`] are generated from that list; `tuning/README.md`'s key table documents
//! it, and a test holds the table to [`KEYS`].

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod rocketmq;

/// Tuning profiles embedded in the binary, so `--profile NAME` works from any directory.
pub const PROFILES: &[(&str, &str)] = &[
    ("throughput", include_str!("../../tuning/throughput.toml")),
    ("latency", include_str!("../../tuning/latency.toml")),
    ("durable", include_str!("../../tuning/durable.toml")),
    ("small", include_str!("../../tuning/small.toml")),
];

pub const DEFAULT_PROFILE: &str = "throughput";

/// Longest queue lease a consumer group member may ask for.
pub const LEASE_MS_MAX: u64 = 600_000;

/// The overrides file in the data directory (see [`BrokerConfig::overrides_path`]).
pub const OVERRIDES_FILE: &str = "broker-overrides.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown tuning profile `{0}` (known: throughput, latency, durable, small)")]
    UnknownProfile(String),
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("config key `{key}` = {value} is out of bounds: {bounds}")]
    OutOfBounds {
        key: &'static str,
        value: String,
        bounds: &'static str,
    },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
    /// A key that may not be changed remotely (UPDATE_BROKER_CONFIG).
    #[error("Can not update config in black list: `{key}` {reason}; nothing changed")]
    Forbidden { key: String, reason: &'static str },
}

/// Keys UPDATE_BROKER_CONFIG refuses, with the reason: RocketMQ's broker refuses its
/// `configBlackList` (`brokerConfigPath`, `rocketmqHome`, `configBlackList`) remotely, and
/// corvus's data directory holds the store and the overrides file the change is kept in.
pub const REMOTE_BLACKLIST: &[(&str, &str)] = &[
    (
        "brokerConfigPath",
        "is RocketMQ's config file path, which RocketMQ's broker never changes remotely",
    ),
    (
        "rocketmqHome",
        "is RocketMQ's home, which RocketMQ's broker never changes remotely",
    ),
    (
        "configBlackList",
        "is the list of keys RocketMQ's broker never changes remotely",
    ),
    (
        "storePathRootDir",
        "(data_dir) cannot move while the broker runs from it",
    ),
    (
        "data_dir",
        "(storePathRootDir) cannot move while the broker runs from it",
    ),
];

/// A change asked while running, checked ([`BrokerConfig::stage_update`]).
#[derive(Debug, Clone)]
pub struct StagedUpdate {
    /// The overrides file's new text: every change stored so far, this one included.
    pub file: String,
    /// The keys set (corvus's names) that apply at once, on every core.
    pub live: Vec<String>,
    /// The keys set that are read at start: they take effect at the next restart.
    pub restart: Vec<String>,
    /// The running config with the keys of `live` changed: what every core runs with next.
    pub running: BrokerConfig,
}

/// What a broker does in its group: RocketMQ's `brokerRole`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerRole {
    /// Answers sends once they are stored here; slaves copy in the background.
    #[serde(rename = "ASYNC_MASTER")]
    AsyncMaster,
    /// Answers a send once `in_sync_replicas` replicas (itself counted) have it.
    #[serde(rename = "SYNC_MASTER")]
    SyncMaster,
    /// Copies its master's CommitLog shard by shard and refuses sends.
    #[serde(rename = "SLAVE")]
    Slave,
}

impl BrokerRole {
    pub fn is_master(self) -> bool {
        self != BrokerRole::Slave
    }

    pub fn name(self) -> &'static str {
        match self {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

/// How a RocketMQ client consumes the queues the broker assigns it (RocketMQ's
/// `MessageRequestMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageRequestMode {
    /// Each assigned queue is pulled by offset.
    #[serde(rename = "PULL")]
    Pull,
    /// Messages are popped and acked one by one.
    #[serde(rename = "POP")]
    Pop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlushDiskType {
    #[serde(rename = "ASYNC_FLUSH")]
    Async,
    #[serde(rename = "SYNC_FLUSH")]
    Sync,
}

/// One config key as `config_keys!` declares it: what `validate` checks and what
/// `tuning/README.md`'s key table says (a test holds the two together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpec {
    pub name: &'static str,
    /// The Rust type of the value.
    pub ty: &'static str,
    /// The default as the declaration writes it (`4 << 20`); `BrokerConfig::default()`
    /// holds its value.
    pub default: &'static str,
    /// For a numeric key, the lowest and the highest value accepted (both inclusive).
    pub range: Option<(f64, f64)>,
    /// The accepted values for people: in the README's bounds column and in the error
    /// for a value out of `range`.
    pub bounds: &'static str,
    /// The key of RocketMQ's broker config that means the same, if there is one.
    pub rocketmq: Option<&'static str>,
    /// The key's former name, still accepted (see [`RENAMED_KEYS`]).
    pub alias: Option<&'static str>,
    /// Whether a change takes effect only after a restart (the key is read once, at start);
    /// `false`: it is read at each use, and a change asked while running applies at once.
    pub restart: bool,
    /// The doc comment of the key's field.
    pub doc: &'static str,
}

/// Declares every key once, and generates from that one list the [`BrokerConfig`] struct
/// (with its serde attributes), its `Default`, [`KEYS`], [`RENAMED_KEYS`] and the check of
/// every `range` (`BrokerConfig::check_ranges`). A key is
///
/// ```text
/// /// doc comment
/// name: Type {
///     default: expression,
///     range: [lo, hi],           // numeric keys: the values accepted, both inclusive
///     bounds: "text",            // the accepted values for people
///     rocketmq: Some("name"),    // or None
///     alias: "former_name",      // only for a renamed key
///     restart: true,             // a change needs a restart
/// }
/// ```
macro_rules! config_keys {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $ty:ty {
            default: $default:expr,
            $(range: [$lo:expr, $hi:expr],)?
            bounds: $bounds:literal,
            rocketmq: $rocketmq:expr,
            $(alias: $alias:literal,)?
            restart: $restart:literal,
        }
    )*) => {
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct BrokerConfig {
            $(
                $(#[doc = $doc])*
                $(#[serde(alias = $alias)])?
                pub $name: $ty,
            )*
        }

        impl Default for BrokerConfig {
            fn default() -> Self {
                BrokerConfig {
                    $($name: $default,)*
                }
            }
        }

        /// Every key, in the order of the struct and of `tuning/README.md`'s key table.
        pub const KEYS: &[KeySpec] = &[$(
            KeySpec {
                name: stringify!($name),
                ty: stringify!($ty),
                default: stringify!($default),
                range: key_range!($ty; $($lo, $hi)?),
                bounds: $bounds,
                rocketmq: $rocketmq,
                alias: key_alias!($($alias)?),
                restart: $restart,
                doc: concat!($($doc, "\n",)*),
            },
        )*];

        /// Keys renamed to one name per value (units last, `_max` last), by their former
        /// names, which configs may still use.
        pub const RENAMED_KEYS: &[(&str, &str)] = &[$($(($alias, stringify!($name)),)?)*];

        impl BrokerConfig {
    /// How held (scheduled) messages' delivery times are read: the delay levels and the
    /// furthest ahead one may be (the shard refuses the rest; the timer delivers by them).
    pub fn timer_rules(&self) -> message::timer::TimerRules {
        message::timer::TimerRules {
            levels_ms: self.retry_delay_levels_ms.clone(),
            max_delay_ms: self.timer_max_delay_sec.saturating_mul(1000),
        }
    }

            /// Checks every key that has a `range`; the error names the key, the value and
            /// the bounds.
            fn check_ranges(&self) -> Result<(), ConfigError> {
                $($(
                    if !($lo..=$hi).contains(&self.$name) {
                        return Err(ConfigError::OutOfBounds {
                            key: stringify!($name),
                            value: format!("{:?}", self.$name),
                            bounds: $bounds,
                        });
                    }
                )?)*
                Ok(())
            }
        }
    };
}

/// A key's range as f64s, from `lo` and `hi` typed as the key (so `16 << 30` is a u64).
macro_rules! key_range {
    ($ty:ty;) => {
        None
    };
    ($ty:ty; $lo:expr, $hi:expr) => {
        Some((
            {
                let lo: $ty = $lo;
                lo as f64
            },
            {
                let hi: $ty = $hi;
                hi as f64
            },
        ))
    };
}

macro_rules! key_alias {
    () => {
        None
    };
    ($alias:literal) => {
        Some($alias)
    };
}

config_keys! {
    // ---- identity and network ----

    /// The broker's name in routes.
    broker_name: String {
        default: "broker-a".into(),
        bounds: "1 to 127 bytes",
        rocketmq: Some("brokerName"),
        restart: true,
    }
    /// The cluster the broker registers in.
    cluster_name: String {
        default: "DefaultCluster".into(),
        bounds: "non-empty",
        rocketmq: Some("brokerClusterName"),
        restart: true,
    }
    /// 0 = master.
    broker_id: u64 {
        default: 0,
        bounds: "u64",
        rocketmq: Some("brokerId"),
        restart: true,
    }
    /// Every core accepts client connections here (SO_REUSEPORT).
    listen: String {
        default: "127.0.0.1:10911".into(),
        bounds: "ip:port",
        rocketmq: Some("listenPort"),
        restart: true,
    }
    /// The address clients are told to use; defaults to `listen` (an unspecified listen IP
    /// is replaced by 127.0.0.1).
    advertise_addr: Option<String> {
        default: None,
        bounds: "IPv4 ip:port",
        rocketmq: Some("brokerIP1"),
        restart: true,
    }
    /// Core i's direct port is `direct_port_base + i` (`+ 3 * i` with `vip_channel`);
    /// 0 = an ephemeral port per core.
    direct_port_base: u16 {
        default: 0,
        bounds: "0 to 65535",
        rocketmq: None,
        restart: true,
    }
    /// Also accept on each port's port - 2 (10909 beside 10911, and beside every core's
    /// direct port): the VIP channel RocketMQ's Java clients before 4.5.1 send to.
    vip_channel: bool {
        default: true,
        bounds: "bool",
        rocketmq: None,
        restart: true,
    }
    // ---- replication ----

    /// `ASYNC_MASTER` answers sends once stored here, `SYNC_MASTER` once `in_sync_replicas`
    /// replicas have them, `SLAVE` copies `ha_master_address`'s CommitLog and refuses
    /// sends. A slave needs a `broker_id` other than 0.
    broker_role: BrokerRole {
        default: BrokerRole::AsyncMaster,
        bounds: "`ASYNC_MASTER`, `SYNC_MASTER`, `SLAVE`",
        rocketmq: Some("brokerRole"),
        restart: true,
    }
    /// A master's replication port for core 0; core i listens on `+ i`. 0 = the client
    /// port + 1 (10912 beside 10911), or an ephemeral port per core when `listen`'s port is
    /// 0.
    ha_listen_port: u16 {
        default: 0,
        bounds: "0 to 65535",
        rocketmq: Some("haListenPort"),
        restart: true,
    }
    /// A slave's master: its replication address (core 0's `ha_listen_port`). The master
    /// sends each shard's stream to the core that owns the shard.
    ha_master_address: Option<String> {
        default: None,
        bounds: "ip:port",
        rocketmq: Some("haMasterAddress"),
        restart: true,
    }
    /// SYNC_MASTER: replicas (the master counted) that must have a send before it is
    /// answered, at most the in-sync ones.
    in_sync_replicas: u64 {
        default: 2,
        range: [1, 16],
        bounds: "1 to 16",
        rocketmq: Some("inSyncReplicas"),
        restart: true,
    }
    /// SYNC_MASTER: with fewer replicas in sync (the master counted), sends are refused
    /// before anything is written (IN_SYNC_REPLICAS_NOT_ENOUGH).
    min_in_sync_replicas: u64 {
        default: 1,
        range: [1, 16],
        bounds: "1 to 16",
        rocketmq: Some("minInSyncReplicas"),
        restart: true,
    }
    /// SYNC_MASTER: how long a send waits for its replicas before it is answered
    /// FLUSH_SLAVE_TIMEOUT (stored here, not known to be replicated).
    slave_timeout_ms: u64 {
        default: 3000,
        range: [1, 600_000],
        bounds: "1 to 600000 ms",
        rocketmq: Some("slaveTimeout"),
        restart: true,
    }
    /// The most CommitLog bytes in one replication frame (a bigger record goes alone).
    ha_transfer_batch_bytes: u64 {
        default: 256 << 10,
        range: [4096, 64 << 20],
        bounds: "4 KiB to 64 MiB",
        rocketmq: Some("haTransferBatchSize"),
        restart: true,
    }
    /// A consumer reading more than `hot_bytes_max` behind a shard's end is told to read
    /// from an in-sync slave (RocketMQ's suggestWhichBrokerId), and back from the master
    /// once it is within it; the slave serves it meanwhile. Off: every read is the master's.
    slave_read_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("slaveReadEnable"),
        restart: true,
    }
    /// An idle master says it is alive, and a slave acknowledges, this often.
    ha_send_heartbeat_interval_ms: u64 {
        default: 500,
        range: [10, 60_000],
        bounds: "10 to 60000 ms",
        rocketmq: Some("haSendHeartbeatInterval"),
        restart: true,
    }
    /// A slave that hears nothing from its master this long drops the connection and
    /// connects again; a master drops a slave as silent for as long.
    ha_housekeeping_interval_ms: u64 {
        default: 3000,
        range: [100, 600_000],
        bounds: "100 to 600000 ms",
        rocketmq: Some("haHousekeepingInterval"),
        restart: true,
    }
    /// A slave that has not caught up with the master for this long leaves the in-sync
    /// set (the log says why); SYNC sends stop waiting for it.
    ha_max_time_slave_not_catchup_ms: u64 {
        default: 5000,
        range: [100, 600_000],
        bounds: "100 to 600000 ms",
        rocketmq: Some("haMaxTimeSlaveNotCatchup"),
        restart: true,
    }
    /// Limit each shard's stream to `max_ha_transfer_bytes_per_sec`, so that a slave
    /// catching up does not take the master's disk and CPU from its clients.
    ha_flow_control_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("haFlowControlEnable"),
        restart: true,
    }
    max_ha_transfer_bytes_per_sec: u64 {
        default: 100 << 20,
        range: [1 << 20, 64 << 30],
        bounds: "1 MiB to 64 GiB",
        rocketmq: Some("maxHaTransferByteInSecond"),
        restart: true,
    }
    /// Serve consumers what only this broker has. Off: with slaves in sync, consumers see
    /// what every in-sync replica has (the confirm offset), so a failover never takes back
    /// a message someone read.
    read_uncommitted: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("readUnCommitted"),
        restart: true,
    }
    /// Let the failover controllers (`corvus-controller`, at `controller_addr`) choose this
    /// broker's role: it heartbeats them, serves as master while they say so and its lease
    /// lasts, and as a slave of the master they name otherwise. `broker_role` then says
    /// only how it serves when it is the master (ASYNC_MASTER or SYNC_MASTER), and
    /// `broker_id` is its identity in the group (0: the first master of a new group).
    enable_controller_mode: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("enableControllerMode"),
        restart: true,
    }
    /// The controllers, `;`-separated (any of them; the leader is found).
    controller_addr: Option<String> {
        default: None,
        bounds: "`ip:port;ip:port;ip:port`",
        rocketmq: Some("controllerAddr"),
        restart: true,
    }
    /// Controller mode: how often the broker heartbeats the controllers. A master's lease
    /// is renewed by each answered heartbeat.
    controller_heartbeat_interval_ms: u64 {
        default: 300,
        range: [20, 10_000],
        bounds: "20 to 10000 ms",
        rocketmq: None,
        restart: true,
    }

    /// NameServers, `;`-separated. Empty = run without registering.
    namesrv_addr: String {
        default: String::new(),
        bounds: "`ip:port;ip:port`",
        rocketmq: Some("namesrvAddr"),
        restart: true,
    }
    /// Serve Prometheus metrics at http://ADDR/metrics; off when unset. A bare port is
    /// `127.0.0.1:PORT`; an address beyond loopback is served but logged as a warning (the
    /// metrics name every topic, group and queue).
    metrics_addr: Option<String> {
        default: None,
        bounds: "ip:port or a port (loopback)",
        rocketmq: None,
        restart: true,
    }
    /// When set, a scrape must send `Authorization: Bearer TOKEN`; any other gets 401. Never
    /// shown by GET_BROKER_CONFIG.
    metrics_token: Option<String> {
        default: None,
        bounds: "non-empty",
        rocketmq: None,
        restart: true,
    }
    /// Check every request against the ACL file (`acl_file`): RocketMQ ACL 1.0's accounts,
    /// signatures, per-topic and per-group permissions and IP allow-lists, for the native
    /// protocol and RocketMQ's alike. Off by default.
    acl_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("aclEnable"),
        restart: true,
    }
    /// The ACL rules, RocketMQ's `plain_acl.yml` format; read again within a second of a
    /// change (a change that does not parse keeps the rules in force). Relative to the
    /// working directory, as RocketMQ's `conf/plain_acl.yml` is to its home.
    acl_file: PathBuf {
        default: PathBuf::from("conf/plain_acl.yml"),
        bounds: "path",
        rocketmq: None,
        restart: true,
    }
    /// The broker's own ACL access key. With it (and `acl_secret_key`) the broker logs in to
    /// every NameServer before it registers (a NameServer with ACL on takes registrations
    /// only from an admin account of its plain_acl.yml), and both ends of a replication
    /// stream prove the same pair to each other (challenge-response: the secret never
    /// crosses the wire). Unset: nothing is sent and replication asks for nothing.
    acl_access_key: Option<String> {
        default: None,
        bounds: "non-empty, with `acl_secret_key`",
        rocketmq: None,
        restart: true,
    }
    /// The secret key of `acl_access_key`. Never shown by GET_BROKER_CONFIG.
    acl_secret_key: Option<String> {
        default: None,
        bounds: "non-empty, with `acl_access_key`",
        rocketmq: None,
        restart: true,
    }
    /// With `acl_enable`, a broker without `acl_access_key` and `acl_secret_key` does not
    /// start: its replication port would have nothing to ask a slave for. Set this to start
    /// it anyway; it then refuses every slave (and registers with its NameServers without
    /// logging in).
    acl_allow_no_broker_credentials: bool {
        default: false,
        bounds: "bool",
        rocketmq: None,
        restart: true,
    }
    /// With `acl_enable`, a lookup by offset or id (ViewByOffset, VIEW_MESSAGE_BY_ID) serves
    /// a message only to an account with SUB on the message's topic. `false` is RocketMQ's
    /// behaviour: any authenticated account reads any message it can name.
    acl_lookup_requires_sub: bool {
        default: true,
        bounds: "bool",
        rocketmq: None,
        restart: true,
    }
    /// With `acl_enable`, a signed RocketMQ request that carries its time (`SignedAtMs`, as
    /// the workspace's own signers send) is taken only within this many ms of the broker's
    /// clock, and only once: its signature is remembered for the window, so an exact replay
    /// is refused.
    acl_signature_window_ms: u64 {
        default: acl::fresh::WINDOW_MS_DEFAULT,
        range: [1_000, 3_600_000],
        bounds: "1000 to 3600000 ms",
        rocketmq: None,
        restart: true,
    }
    /// With `acl_enable`, refuse a signed RocketMQ request that carries no time. Real
    /// RocketMQ clients (ACL 1.0) send none, so this shuts them out: for deployments whose
    /// clients are all the workspace's own (native clients log in per connection and are
    /// not affected).
    acl_signature_time_required: bool {
        default: false,
        bounds: "bool",
        rocketmq: None,
        restart: true,
    }

    /// ACL 2.0 (RocketMQ 5.3's users and policies): every request must come from an
    /// enabled user of `<data_dir>/config/auth.json`: RocketMQ's (remoting and gRPC) signed
    /// as ACL 1.0's clients sign (AccessKey = user name, secret key = password), native
    /// connections logged in as the user. With it, ACL 2.0 decides instead of
    /// `acl_enable`'s file.
    acl2_authentication_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("authenticationEnabled"),
        restart: true,
    }
    /// ACL 2.0: a user may do only what its policies allow (super users anything). A user
    /// is known by its signature or login, so this checks those too, as
    /// `acl2_authentication_enable` does.
    acl2_authorization_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("authorizationEnabled"),
        restart: true,
    }
    /// ACL 2.0: a user created at start if it does not exist, as RocketMQ's `UserInfo` JSON
    /// (`{"username":"root","password":"..."}`): the first super user (a super user
    /// whatever a `userType` in it says, as RocketMQ makes it). Never shown by
    /// GET_BROKER_CONFIG.
    acl2_init_user: Option<String> {
        default: None,
        bounds: "UserInfo JSON",
        rocketmq: Some("initAuthenticationUser"),
        restart: true,
    }
    /// ACL 2.0: at start, make each account of `acl_file` a user with its permissions as
    /// policies (RocketMQ's `AuthMigrator`; accounts already users are left alone).
    acl2_migrate_from_v1: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("migrateAuthFromV1Enabled"),
        restart: true,
    }

    // ---- TLS (the `tls` crate; ARCHITECTURE.md, "TLS") ----

    /// TLS on every client listener and the replication port: `disabled` (plaintext only,
    /// nothing checked), `permissive` (TLS and plaintext on one port, told apart by the
    /// first byte), `enforcing` (a plaintext connection is closed and counted).
    tls_mode: String {
        default: "disabled".into(),
        bounds: "`disabled`, `permissive`, `enforcing`",
        rocketmq: Some("tls.server.mode"),
        restart: true,
    }
    /// The broker's PEM certificate chain, its own certificate first; needed unless
    /// `tls_mode` is disabled.
    tls_cert_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.server.certPath"),
        restart: true,
    }
    /// The PEM private key of `tls_cert_path` (PKCS#8, PKCS#1 or SEC1).
    tls_key_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.server.keyPath"),
        restart: true,
    }
    /// Whether TLS clients must present a certificate: `none`, `optional` (one sent must
    /// chain to `tls_trust_cert_path`), `require`.
    tls_client_auth: String {
        default: "none".into(),
        bounds: "`none`, `optional`, `require`",
        rocketmq: Some("tls.server.need.client.auth"),
        restart: true,
    }
    /// PEM CA certificates that client certificates must chain to (for `tls_client_auth`).
    tls_trust_cert_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.server.trustCertPath"),
        restart: true,
    }
    /// The broker's own outgoing links speak TLS: to the NameServers and, as a slave, to
    /// its master's replication port.
    tls_client_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("tls.enable"),
        restart: true,
    }
    /// PEM CA certificates the broker's outgoing TLS links trust; needed with
    /// `tls_client_enable` unless `tls_client_trust_any`.
    tls_client_trust_cert_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.client.trustCertPath"),
        restart: true,
    }
    /// The outgoing TLS links accept any server certificate (RocketMQ's test mode, which
    /// RocketMQ turns on by default and corvus does not): encrypted, but open to a man in
    /// the middle. For tests and trials.
    tls_client_trust_any: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("tls.test.mode.enable"),
        restart: true,
    }
    /// A PEM certificate the outgoing links present to servers that ask for one (with
    /// `tls_client_key_path`).
    tls_client_cert_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.client.certPath"),
        restart: true,
    }
    /// The PEM private key of `tls_client_cert_path`.
    tls_client_key_path: Option<PathBuf> {
        default: None,
        bounds: "path",
        rocketmq: Some("tls.client.keyPath"),
        restart: true,
    }
    /// The data directory: topics, offsets and each shard's CommitLog, ConsumeQueues and
    /// IndexFiles.
    data_dir: PathBuf {
        default: PathBuf::from("./data"),
        bounds: "path",
        rocketmq: Some("storePathRootDir"),
        restart: true,
    }
    /// Executors to run, one pinned per core; 0 = every core of the host.
    cores: u16 {
        default: 0,
        range: [0, 1024],
        bounds: "0 (all cores) to 1024, at most the CPUs allowed",
        rocketmq: None,
        restart: true,
    }
    /// How often the broker registers in full (its topic table) with every NameServer.
    register_interval_ms: u64 {
        default: 30_000,
        range: [1_000, 60_000],
        bounds: "1000 to 60000 ms",
        rocketmq: Some("registerNameServerPeriod"),
        restart: true,
    }
    /// Between full registrations, the broker tells each NameServer it is alive this often
    /// (a few bytes); a NameServer that does not know it (restarted empty) gets the full
    /// registration at once. The NameServer drops a broker silent for `broker_expiry_ms`.
    namesrv_heartbeat_interval_ms: u64 {
        default: 1_000,
        range: [100, 60_000],
        bounds: "100 to 60000 ms",
        rocketmq: None,
        restart: true,
    }
    /// Create an unknown topic on its first send.
    auto_create_topic_enable: bool {
        default: true,
        bounds: "bool",
        rocketmq: Some("autoCreateTopicEnable"),
        restart: true,
    }
    /// Store replies of request-reply in the cluster's reply topic as well as pushing them
    /// to their requester.
    store_reply_message_enable: bool {
        default: true,
        bounds: "bool",
        rocketmq: Some("storeReplyMessageEnable"),
        restart: false,
    }
    /// Create the message trace topic (`RMQ_SYS_TRACE_TOPIC`) at start, so clients with
    /// tracing on can write to it even with auto-creation off (otherwise their first trace
    /// send auto-creates it).
    trace_topic_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("traceTopicEnable"),
        restart: true,
    }
    /// Accept SQL92 property filters (`MessageSelector.bySql`, the native client's
    /// `sql92` subscriptions). Off, as in RocketMQ: such a subscription is refused.
    enable_property_filter: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("enablePropertyFilter"),
        restart: false,
    }
    /// Queues of an auto-created topic.
    default_topic_queue_nums: u32 {
        default: 4,
        range: [1, 1024],
        bounds: "1 to 1024",
        rocketmq: Some("defaultTopicQueueNums"),
        restart: true,
    }
    /// Queues of all topics together (each topic counting the larger of its read and write
    /// queues) that topic creation may bring the broker to; a creation past it is refused
    /// with the count. Each queue with data has its own ConsumeQueue files and mappings.
    queues_max: u64 {
        default: 100_000,
        range: [1, 10_000_000],
        bounds: "1 to 10000000",
        rocketmq: None,
        restart: true,
    }
    /// What the broker serves, RocketMQ's `PermName` bits: 4 read (pulls and pops), 2 write
    /// (sends), 6 both. Read-only (4) drains the broker: sends are refused (NO_PERMISSION)
    /// and its routes lose the write permission, so producers send elsewhere; write-only (2)
    /// refuses pulls and pops. Registered with the NameServers at once when changed.
    broker_permission: u32 {
        default: 6,
        range: [2, 7],
        bounds: "2 to 7 (4 read, 2 write, 6 both; 1, inherit, is ignored)",
        rocketmq: Some("brokerPermission"),
        restart: false,
    }

    // ---- storage ----

    /// When a send is answered: once its bytes are written to the page cache and the tail
    /// ring (`ASYNC_FLUSH`), or once they are fdatasync'ed (`SYNC_FLUSH`).
    flush_disk_type: FlushDiskType {
        default: FlushDiskType::Async,
        bounds: "`ASYNC_FLUSH`, `SYNC_FLUSH`",
        rocketmq: Some("flushDiskType"),
        restart: true,
    }
    /// Async flush period.
    flush_interval_ms: u64 {
        default: 10,
        range: [1, 10_000],
        bounds: "1 to 10000 ms",
        rocketmq: Some("flushIntervalCommitLog"),
        restart: false,
    }
    /// Async flush also when this much is dirty.
    flush_dirty_bytes_max: u64 {
        default: 4 << 20,
        range: [4096, 1 << 30],
        bounds: "4 KiB to 1 GiB",
        rocketmq: Some("flushCommitLogLeastPages"),
        restart: false,
    }
    /// CommitLog segment file size.
    commit_log_segment_bytes: u64 {
        default: 1 << 30,
        range: [64 << 10, 16 << 30],
        bounds: "64 KiB to 16 GiB, multiple of 4096",
        rocketmq: Some("mappedFileSizeCommitLog"),
        restart: true,
    }
    /// The in-memory tail chunk, written with one O_DIRECT write.
    write_chunk_bytes: u64 {
        default: 4 << 20,
        range: [64 << 10, 256 << 20],
        bounds: "64 KiB to 256 MiB",
        rocketmq: None,
        restart: true,
    }
    /// Chunk writes in flight at once; 1 leaves the disk idle between a write's completion
    /// and the next submission.
    write_queue_depth: u64 {
        default: 4,
        range: [1, 64],
        bounds: "1 to 64",
        rocketmq: None,
        restart: true,
    }
    /// Recent log kept in memory per shard for reads, counted in whole chunk buffers.
    hot_bytes_max: u64 {
        default: 256 << 20,
        range: [0, 64 << 30],
        bounds: "0 to 64 GiB",
        rocketmq: None,
        restart: true,
    }
    /// Zero-fill each CommitLog segment ahead of the log (RocketMQ's warmMapedFileEnable).
    warm_segments: bool {
        default: false,
        bounds: "bool",
        rocketmq: Some("warmMapedFileEnable"),
        restart: true,
    }
    /// The largest stored record (a batch counts as one). Formerly `max_message_size_bytes`,
    /// still accepted.
    message_bytes_max: u64 {
        default: 4 << 20,
        range: [1024, 64 << 20],
        bounds: "1 KiB to 64 MiB, at most `commit_log_segment_bytes` - 4 KiB",
        rocketmq: Some("maxMessageSize"),
        alias: "max_message_size_bytes",
        restart: false,
    }
    /// CommitLog segments older than this are deleted.
    file_reserved_hours: u64 {
        default: 72,
        range: [1, 24 * 365],
        bounds: "1 to 8760 hours",
        rocketmq: Some("fileReservedTime"),
        restart: false,
    }
    /// Disk use above which expired segments are cleaned.
    disk_clean_ratio: f64 {
        default: 0.75,
        range: [0.01, 0.99],
        bounds: "0.01 to 0.99, at most `disk_force_clean_ratio`",
        rocketmq: Some("diskMaxUsedSpaceRatio"),
        restart: false,
    }
    /// Disk use above which the oldest segments are cleaned early.
    disk_force_clean_ratio: f64 {
        default: 0.85,
        range: [0.01, 0.99],
        bounds: "0.01 to 0.99, at most `disk_refuse_ratio`",
        rocketmq: Some("diskSpaceCleanForciblyRatio"),
        restart: false,
    }
    /// Disk use above which sends are refused ("disk full").
    disk_refuse_ratio: f64 {
        default: 0.90,
        range: [0.01, 0.995],
        bounds: "0.01 to 0.995",
        rocketmq: Some("diskSpaceWarningLevelRatio"),
        restart: false,
    }
    /// Free space every new file (segment, warm spare, ConsumeQueue or IndexFile blocks)
    /// must leave; below it sends get "disk full" until space returns.
    disk_reserve_bytes: u64 {
        default: 64 << 20,
        range: [0, 64 << 30],
        bounds: "0 to 64 GiB",
        rocketmq: None,
        restart: true,
    }
    /// ConsumeQueue files the broker keeps mapped at once, shared out evenly among its
    /// shards; past a shard's share the least recently used file is unmapped to map
    /// another. Bounds the broker's use of the kernel's `vm.max_map_count`.
    consume_queue_maps_max: u64 {
        default: 16_384,
        range: [16, 1 << 22],
        bounds: "16 to 4194304",
        rocketmq: None,
        restart: true,
    }
    /// How often the disk use is measured and retention runs.
    disk_check_interval_ms: u64 {
        default: 10_000,
        range: [100, 600_000],
        bounds: "100 to 600000 ms",
        rocketmq: Some("cleanResourceInterval"),
        restart: true,
    }
    /// Where each shard keeps its tail ring: the copy of the acknowledged but not yet
    /// written CommitLog tail that makes async flush safe against a crash of the broker
    /// process. Must be a tmpfs (its pages outlive the process and are never written back
    /// to a disk); a ring is `tail_ring_bytes` of locked-in shared memory per shard.
    tail_ring_dir: PathBuf {
        default: PathBuf::from("/dev/shm"),
        bounds: "a directory, on a tmpfs",
        rocketmq: None,
        restart: true,
    }
    /// Bytes of each shard's tail ring; bounds the bytes acknowledged and not yet written
    /// (async flush). At least 4 x (write_chunk_bytes + frame_bytes_max).
    tail_ring_bytes: u64 {
        default: 128 << 20,
        range: [1 << 20, 16 << 30],
        bounds: "1 MiB to 16 GiB, multiple of 4096, \
            at least 4 x (`write_chunk_bytes` + `frame_bytes_max`)",
        rocketmq: None,
        restart: true,
    }
    /// Bytes acknowledged but not yet fdatasynced per shard, at most (async flush): past
    /// it, sends wait up to `send_busy_wait_ms` for a sync and are then answered
    /// SYSTEM_BUSY. From a quarter of it, sends are paced at the rate the disk makes
    /// bytes durable, so a slow disk slows acknowledgements rather than stopping them.
    unsynced_bytes_max: u64 {
        default: 512 << 20,
        range: [1 << 20, 64 << 30],
        bounds: "1 MiB to 64 GiB",
        rocketmq: None,
        restart: false,
    }
    /// How long a send may wait for the disk to make room before it is answered
    /// SYSTEM_BUSY (RocketMQ's waitTimeMillsInSendQueue).
    send_busy_wait_ms: u64 {
        default: 200,
        range: [1, 60_000],
        bounds: "1 to 60000 ms",
        rocketmq: Some("waitTimeMillsInSendQueue"),
        restart: false,
    }

    // ---- request path ----

    /// Each core's cross-core inbox: requests queued for the core, and the most it serves
    /// at once; a full inbox answers "system busy".
    inbox_capacity: u64 {
        default: 1024,
        range: [1, 1 << 20],
        bounds: "1 to 1048576",
        rocketmq: None,
        restart: true,
    }
    /// The largest request frame. Formerly `max_frame_bytes`, still accepted.
    frame_bytes_max: u64 {
        default: 16 << 20,
        range: [64 << 10, 256 << 20],
        bounds: "64 KiB to 256 MiB, at least `message_bytes_max` + 4 KiB",
        rocketmq: None,
        alias: "max_frame_bytes",
        restart: true,
    }
    /// Pipelined requests per connection.
    connection_inflight_max: u64 {
        default: 1024,
        range: [1, 1 << 16],
        bounds: "1 to 65536",
        rocketmq: None,
        restart: true,
    }
    /// A connection whose reads bring at most this many requests each is served in the
    /// light lane, ahead of pipelining ones (ARCHITECTURE.md, "Two lanes"); 0 serves every
    /// connection in one lane.
    connection_light_requests_max: u64 {
        default: 4,
        range: [0, 1 << 16],
        bounds: "0 to 65536",
        rocketmq: None,
        restart: true,
    }
    /// Client connections the broker keeps open at once, shared out evenly among its cores
    /// and never more than the descriptor limit leaves after a reserve for the storage's
    /// files: a connection past it is closed at once (one log line per interval says so).
    connections_max: u64 {
        default: 10_000,
        range: [1, 1 << 20],
        bounds: "1 to 1048576",
        rocketmq: None,
        restart: true,
    }
    /// Client connections one peer address (its IP) may hold at once, shared out evenly
    /// among the cores like `connections_max`: one host opening thousands of idle
    /// connections leaves the other slots to everyone else. A connection past it is answered
    /// with why at its first request (FLOW_CONTROL, remark naming the key) and closed.
    connections_per_peer_max: u64 {
        default: 5_000,
        range: [1, 1 << 20],
        bounds: "1 to 1048576",
        rocketmq: None,
        restart: true,
    }
    /// Rate limits per account (ACL access key), topic and group, for the broker process as
    /// a whole: `<account|topic|group>:<name>:<send_messages_per_sec|send_bytes_per_sec|pulls_per_sec|connections>=<value>`,
    /// `,`-separated (`broker_base::quota`). A request over one is refused before any work
    /// with FLOW_CONTROL, naming the rule and when to retry. Changes apply at once
    /// (`mqadmin updateBrokerConfig -k quotas -v ...`, or `mqadmin quota`).
    quotas: String {
        default: String::new(),
        bounds: "rules, `,`-separated",
        rocketmq: None,
        restart: false,
    }
    /// A connection with no request in flight that sends nothing for this long is closed
    /// (RocketMQ's serverChannelMaxIdleTimeSeconds, 120 s).
    connection_idle_timeout_ms: u64 {
        default: 120_000,
        range: [1_000, 86_400_000],
        bounds: "1000 ms to 1 day",
        rocketmq: None,
        restart: true,
    }
    /// A frame that has begun to arrive must be complete within this long, or the
    /// connection is closed: a half-sent frame holds its buffer.
    frame_deadline_ms: u64 {
        default: 30_000,
        range: [100, 3_600_000],
        bounds: "100 ms to 1 hour",
        rocketmq: None,
        restart: true,
    }
    /// The longest a pull (or a native wait for a group change) may wait for new messages,
    /// whatever suspend timeout the client asks for.
    long_polling_max_ms: u64 {
        default: 30_000,
        range: [0, 300_000],
        bounds: "0 to 300000 ms",
        rocketmq: None,
        restart: false,
    }
    /// The most messages one pull answers, whatever the client asks for (both protocols).
    pull_batch_messages_max: u64 {
        default: 1024,
        range: [1, 1024],
        bounds: "1 to 1024",
        rocketmq: Some("maxTransferCountOnMessageInMemory"),
        restart: false,
    }
    /// The most message bytes one pull answers, whatever the client asks for (the first
    /// message is always answered whole): a pull cannot make the broker gather gigabytes
    /// for one answer.
    pull_batch_bytes_max: u64 {
        default: 64 << 20,
        range: [64 << 10, 1 << 30],
        bounds: "64 KiB to 1 GiB",
        rocketmq: Some("maxTransferBytesOnMessageInMemory"),
        restart: false,
    }
    /// The most messages a query by key (or by unique key) answers, whatever the client
    /// asks for (both protocols).
    query_messages_max: u64 {
        default: 64,
        range: [1, 4096],
        bounds: "1 to 4096",
        rocketmq: Some("maxMsgsNumBatch"),
        restart: false,
    }
    /// The most producer or consumer groups one RocketMQ heartbeat may declare (each
    /// consumer group gets a retry topic); a heartbeat with more is refused.
    heartbeat_groups_max: u64 {
        default: 256,
        range: [1, 65_536],
        bounds: "1 to 65536",
        rocketmq: None,
        restart: false,
    }
    /// The most subscriptions one consumer group of a RocketMQ heartbeat may declare; a
    /// heartbeat with more is refused.
    heartbeat_subscriptions_max: u64 {
        default: 1024,
        range: [1, 65_536],
        bounds: "1 to 65536",
        rocketmq: None,
        restart: false,
    }
    /// glommio io_uring buffer memory per executor (locked memory).
    io_memory_bytes: u64 {
        default: 4 << 20,
        range: [64 << 10, 1 << 30],
        bounds: "64 KiB to 1 GiB",
        rocketmq: None,
        restart: true,
    }
    /// How long an idle core keeps polling for work after the last request it read before it
    /// sleeps (Seastar's `--idle-poll-time-us`): a request arriving within that time is picked
    /// up without a wake-up of the thread (or, in a VM, of the virtual CPU). 0 = sleep at
    /// once. Applies only to cores pinned to their own CPU; unpinned cores never poll.
    idle_poll_us: u64 {
        default: 0,
        range: [0, 10_000],
        bounds: "0 to 10000 µs",
        rocketmq: None,
        restart: true,
    }
    /// A core polls after work (`idle_poll_us`) only while its own work (its thread's CPU
    /// time, kernel time included, less the polling) took at most this share of its time
    /// over the last 10 ms: a lightly loaded core has CPU to spare, a loaded one would spend
    /// on polling what each message costs again.
    idle_poll_load_max_pct: u64 {
        default: 30,
        range: [0, 100],
        bounds: "0 to 100",
        rocketmq: None,
        restart: true,
    }

    // ---- consumer groups ----

    /// A group member silent for this long is dropped and the group rebalances.
    consumer_timeout_ms: u64 {
        default: 30_000,
        range: [500, 600_000],
        bounds: "500 to 600000 ms",
        rocketmq: Some("channelExpiredTimeout"),
        restart: true,
    }
    /// The longest lease on a queue a member of an orderly group gets, whatever it asks
    /// for (RocketMQ's rebalance lock lifetime, 60 s): a member that vanished holding a
    /// queue frees it within this long.
    queue_lock_lease_max_ms: u64 {
        default: 60_000,
        range: [1_000, LEASE_MS_MAX],
        bounds: "1000 to 600000 ms",
        rocketmq: None,
        restart: true,
    }
    /// Committed offsets are written to disk this often: a kill -9 loses at most this much
    /// of the latest commits.
    offset_flush_interval_ms: u64 {
        default: 1_000,
        range: [10, 60_000],
        bounds: "10 to 60000 ms",
        rocketmq: Some("flushConsumerOffsetInterval"),
        restart: true,
    }
    /// Delay of each delay level (RocketMQ's messageDelayLevel, level 1 first): a message
    /// with `DELAY = n` is held for level n (the last level beyond the list), and a message
    /// that failed `n` times comes back after level `n + 3`.
    retry_delay_levels_ms: Vec<u64> {
        default: RETRY_DELAY_LEVELS_MS_DEFAULT.to_vec(),
        bounds: "1 to 64 levels, each 1 ms to 7 days",
        rocketmq: Some("messageDelayLevel"),
        restart: true,
    }
    /// The furthest ahead a scheduled message (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`,
    /// `TIMER_DELAY_MS`, `__STARTDELIVERTIME`, or a delay level) may be due, counted from its store time; one
    /// asking for more is refused at the send (RocketMQ 5's timerMaxDelaySec).
    timer_max_delay_sec: u64 {
        default: 3 * 24 * 3600,
        range: [1, 366 * 24 * 3600],
        bounds: "1 to 31622400 s",
        rocketmq: Some("timerMaxDelaySec"),
        restart: true,
    }
    /// Whether a producer may recall a scheduled message before it is due with the handle
    /// its send returned (RECALL_MESSAGE, gRPC RecallMessage; RocketMQ 5.3.2's
    /// recallMessageEnable). On by default, unlike RocketMQ's broker: a recall needs the
    /// handle only the sender got, passes the ACL as a send (Pub), and is refused with the
    /// reason when the message is not pending; off, a recall is refused with NO_PERMISSION.
    recall_message_enable: bool {
        default: true,
        bounds: "bool",
        rocketmq: Some("recallMessageEnable"),
        restart: false,
    }
    /// How a RocketMQ 5 client that asks the broker for its queues (QUERY_ASSIGNMENT, a
    /// push consumer with `setClientRebalance(false)`) consumes a topic its group has no
    /// mode for (mqadmin's setConsumeMode sets one): `PULL`, the queues shared among the
    /// members and pulled by offset, or `POP` (RocketMQ's defaultMessageRequestMode).
    /// Retry topics are always pulled.
    default_message_request_mode: MessageRequestMode {
        default: MessageRequestMode::Pull,
        bounds: "`PULL`, `POP`",
        rocketmq: Some("defaultMessageRequestMode"),
        restart: false,
    }
    /// With that default in POP mode, how many members after each one also pop its
    /// queues; 0 or less: every member pops every broker (RocketMQ's
    /// defaultPopShareQueueNum).
    default_pop_share_queue_num: i32 {
        default: -1,
        range: [-1, 1024],
        bounds: "-1 to 1024",
        rocketmq: Some("defaultPopShareQueueNum"),
        restart: false,
    }

    // ---- lite topics ----

    /// The most lite topics (RocketMQ 5.5) a broker holds, over all its LITE parent topics;
    /// each shard takes its share. A send that would create one more is refused with
    /// LITE_TOPIC_QUOTA_EXCEEDED (RocketMQ's maxLmqConsumeQueueNum, its LMQ quota).
    lite_topics_max: u64 {
        default: 1_000_000,
        range: [1, 100_000_000],
        bounds: "1 to 100000000",
        rocketmq: Some("maxLmqConsumeQueueNum"),
        restart: true,
    }
    /// The most lite topics one lite push consumer may subscribe (handed to the client in
    /// its settings; RocketMQ's `lite.sub.client.quota`).
    lite_subscription_quota: u32 {
        default: 2_000,
        range: [1, 1_000_000],
        bounds: "1 to 1000000",
        rocketmq: None,
        restart: true,
    }
    /// How long a lite topic with nothing left to deliver is kept after its last message:
    /// past it the broker forgets it (a new send creates it again). A parent topic's
    /// `lite.topic.expiration` attribute (minutes) expires its lite topics even with
    /// messages left.
    lite_topic_idle_ms: u64 {
        default: 600_000,
        range: [1_000, 2_592_000_000],
        bounds: "1000 ms to 2592000000 ms (30 days)",
        rocketmq: None,
        restart: true,
    }

    // ---- idempotent sends ----

    /// Whether a send whose `UNIQ_KEY` (the producer's message id, kept by RocketMQ's
    /// clients across their retries) the broker already stored for the topic within the
    /// window is answered with the original send result instead of being stored again
    /// (`broker_core::dedup`). A topic's `dedup.enable` attribute overrides it. Off by
    /// default: an application that sends the same Java `Message` object twice on purpose
    /// sends the same `UNIQ_KEY` twice.
    dedup_enable: bool {
        default: false,
        bounds: "bool",
        rocketmq: None,
        restart: false,
    }
    /// How long a stored send's `UNIQ_KEY` is remembered, counted from its store time.
    dedup_window_ms: u64 {
        default: 300_000,
        range: [1_000, 86_400_000],
        bounds: "1000 ms to 1 day",
        rocketmq: None,
        restart: true,
    }
    /// The most `UNIQ_KEY`s the broker remembers, over all topics; each core keeps its
    /// share, the oldest forgotten first.
    dedup_keys_max: u64 {
        default: 1_000_000,
        range: [1, 100_000_000],
        bounds: "1 to 100000000",
        rocketmq: None,
        restart: true,
    }
    /// The memory those keys may take (a fixed cost per key, 128 bytes), over all
    /// cores; each core keeps its share, the oldest forgotten first.
    dedup_memory_bytes_max: u64 {
        default: 256 << 20,
        range: [1 << 20, 1024 << 30],
        bounds: "1 MiB to 1024 GiB",
        rocketmq: None,
        restart: true,
    }

    // ---- transactions ----

    /// How old an undecided half message must be before the broker checks it back with its
    /// producer group (RocketMQ's transactionTimeOut).
    transaction_timeout_ms: u64 {
        default: 6_000,
        range: [100, 86_400_000],
        bounds: "100 ms to 1 day",
        rocketmq: Some("transactionTimeOut"),
        restart: true,
    }
    /// How often each core scans its shards' half messages for undecided ones to check back
    /// (RocketMQ's transactionCheckInterval); also the spacing of a transaction's checks.
    transaction_check_interval_ms: u64 {
        default: 60_000,
        range: [100, 3_600_000],
        bounds: "100 ms to 1 hour",
        rocketmq: Some("transactionCheckInterval"),
        restart: true,
    }
    /// Checks of one transaction before the broker discards it (logged at WARN)
    /// (RocketMQ's transactionCheckMax).
    transaction_check_max: u32 {
        default: 15,
        range: [1, 1_000],
        bounds: "1 to 1000",
        rocketmq: Some("transactionCheckMax"),
        restart: true,
    }
}

/// Keys whose values are secrets: never reported (GET_BROKER_CONFIG leaves them out).
pub const SECRET_KEYS: &[&str] = &["metrics_token", "acl_secret_key", "acl2_init_user"];

/// The broker's own credentials (`acl_access_key`, `acl_secret_key`).
pub use acl::Credentials;

/// RocketMQ's delay levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
pub const RETRY_DELAY_LEVELS_MS_DEFAULT: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

impl BrokerConfig {
    /// The broker's own credentials, when both keys are set.
    pub fn credentials(&self) -> Option<Credentials> {
        match (&self.acl_access_key, &self.acl_secret_key) {
            (Some(a), Some(s)) => Some(Credentials {
                access_key: a.clone(),
                secret_key: s.clone(),
            }),
            _ => None,
        }
    }

    /// Defaults overlaid with a named profile.
    pub fn from_profile(name: &str) -> Result<BrokerConfig, ConfigError> {
        let text = PROFILES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| ConfigError::UnknownProfile(name.to_owned()))?;
        Self::parse_str(text, &format!("profile `{name}`"))
    }

    /// Parses a TOML document over the defaults: keys not given keep their default.
    pub fn parse_str(text: &str, origin: &str) -> Result<BrokerConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })
    }

    /// Overlays the keys set in a TOML document onto `self` (a key's former name, see
    /// [`RENAMED_KEYS`], sets it too).
    pub fn overlay_str(&mut self, text: &str, origin: &str) -> Result<(), ConfigError> {
        let overlay: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        self.overlay_table(overlay, origin)
    }

    /// Overlays the keys of `overlay` (corvus's names, or a key's former name) onto `self`.
    pub fn overlay_table(&mut self, overlay: toml::Table, origin: &str) -> Result<(), ConfigError> {
        let mut base = toml::Table::try_from(&*self).map_err(|e| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        for (k, v) in overlay {
            let k = RENAMED_KEYS
                .iter()
                .find(|(old, _)| *old == k)
                .map_or(k, |(_, new)| (*new).to_owned());
            base.insert(k, v);
        }
        *self = base
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                origin: origin.to_owned(),
                message: e.to_string(),
            })?;
        Ok(())
    }

    /// Overlays a config file: TOML with corvus's keys, or a RocketMQ `broker.conf` (Java
    /// properties with RocketMQ's camelCase keys, see [`rocketmq`]). A file named `*.conf` or
    /// `*.properties` is read as properties; any other as TOML, unless it is no TOML and
    /// reads as properties naming RocketMQ keys. Returns the RocketMQ keys it ignored, each
    /// with the reason (also logged).
    pub fn overlay_file(
        &mut self,
        path: &std::path::Path,
    ) -> Result<Vec<rocketmq::Ignored>, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        let properties = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("conf" | "properties")
        );
        let ignored = if properties {
            rocketmq::overlay_properties(self, &text, &origin)?
        } else {
            match self.overlay_str(&text, &origin) {
                Ok(()) => Vec::new(),
                Err(_) if rocketmq::looks_like_properties(&text) => {
                    rocketmq::overlay_properties(self, &text, &origin)?
                }
                Err(e) => return Err(e),
            }
        };
        for i in &ignored {
            tracing::warn!("{origin}: RocketMQ key `{}` ignored: {}", i.key, i.reason);
        }
        Ok(ignored)
    }

    /// Where the keys changed at runtime (RocketMQ's UPDATE_BROKER_CONFIG) are kept: a TOML
    /// file of corvus keys in the data directory, read at start over `--config`.
    pub fn overrides_path(&self) -> PathBuf {
        self.data_dir.join(OVERRIDES_FILE)
    }

    /// Overlays the overrides file of the data directory, if there is one.
    pub fn overlay_overrides(&mut self) -> Result<(), ConfigError> {
        let stored = self.stored_overrides()?;
        self.overlay_table(stored, &self.overrides_path().display().to_string())
    }

    /// The keys of the overrides file; none when there is no file.
    fn stored_overrides(&self) -> Result<toml::Table, ConfigError> {
        let path = self.overrides_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| ConfigError::Parse {
                origin: path.display().to_string(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// A change of keys asked while running (RocketMQ's UPDATE_BROKER_CONFIG, a properties
    /// body with RocketMQ's or corvus's keys), checked as a whole: `self` is the config the
    /// broker started with and `running` the one it runs with now. What the next start reads
    /// (`self`, the overrides already stored and these keys) must validate, and so must the
    /// running config with the keys that apply at once (`restart: false`) changed. Nothing
    /// is changed when any key is unknown, ignored by corvus, out of bounds, or in
    /// [`REMOTE_BLACKLIST`].
    pub fn stage_update(
        &self,
        running: &BrokerConfig,
        properties: &str,
    ) -> Result<StagedUpdate, ConfigError> {
        let origin = "UPDATE_BROKER_CONFIG";
        let refuse = |message: String| ConfigError::Parse {
            origin: origin.to_owned(),
            message,
        };
        for key in rocketmq::property_keys(properties) {
            if let Some((_, reason)) = REMOTE_BLACKLIST.iter().find(|(k, _)| *k == key) {
                return Err(ConfigError::Forbidden { key, reason });
            }
        }
        let (overlay, ignored) = rocketmq::properties_overlay(self, properties, origin)?;
        if let Some(i) = ignored.first() {
            return Err(refuse(format!(
                "nothing changed: `{}` is not applied by corvus ({})",
                i.key, i.reason
            )));
        }
        if overlay.is_empty() {
            return Err(refuse("nothing changed: no key given".into()));
        }
        if let Some((key, reason)) = REMOTE_BLACKLIST
            .iter()
            .find(|(k, _)| overlay.contains_key(*k))
        {
            return Err(ConfigError::Forbidden {
                key: (*key).to_owned(),
                reason,
            });
        }
        let mut stored = self.stored_overrides()?;
        let is_live = |k: &str| KEYS.iter().any(|s| s.name == k && !s.restart);
        let (live, restart): (Vec<String>, Vec<String>) =
            overlay.keys().cloned().partition(|k| is_live(k));
        let live_overlay: toml::Table = overlay
            .iter()
            .filter(|(k, _)| is_live(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        stored.extend(overlay);
        let mut candidate = self.clone();
        candidate.overlay_table(stored.clone(), origin)?;
        candidate.validate()?;
        let mut next = running.clone();
        next.overlay_table(live_overlay, origin)?;
        next.validate().map_err(|e| {
            refuse(format!(
                "nothing changed: the running broker cannot take it until a restart ({e})"
            ))
        })?;
        let file = format!(
            "# Keys changed with UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig), read at start\n\
             # over --config; command-line flags still win. Delete a line to drop its change.\n{}",
            toml::to_string(&stored).map_err(|e| refuse(e.to_string()))?
        );
        Ok(StagedUpdate {
            file,
            live,
            restart,
            running: next,
        })
    }

    /// Checks every key: each `range` of [`KEYS`], then the rules a range cannot say
    /// (names, addresses, and the relations between keys). The error names the key.
    /// Controller mode: the controllers are named and give the role and the master.
    fn check_controller_mode(&self) -> Result<(), ConfigError> {
        let addrs = self.controller_addrs();
        if addrs.is_empty() {
            return Err(ConfigError::Invalid {
                key: "controller_addr",
                message: "enable_controller_mode needs the controllers' addresses (`ip:port;ip:port;ip:port`)".into(),
            });
        }
        for a in &addrs {
            a.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "controller_addr",
                message: format!("`{a}` is not ip:port ({e})"),
            })?;
        }
        if self.broker_role == BrokerRole::Slave {
            return Err(ConfigError::Invalid {
                key: "broker_role",
                message: "in controller mode the controllers choose the master and the slaves: broker_role says how this broker serves when it is the master (ASYNC_MASTER or SYNC_MASTER)".into(),
            });
        }
        if self.ha_master_address.is_some() {
            return Err(ConfigError::Invalid {
                key: "ha_master_address",
                message:
                    "in controller mode the controllers name the master: drop ha_master_address"
                        .into(),
            });
        }
        Ok(())
    }

    /// `controller_addr` split into addresses.
    pub fn controller_addrs(&self) -> Vec<String> {
        self.controller_addr
            .as_deref()
            .unwrap_or("")
            .split([';', ','])
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The replication keys together: a slave has a master to copy and an id of its own.
    fn check_replication(&self) -> Result<(), ConfigError> {
        if self.enable_controller_mode {
            self.check_controller_mode()?;
        } else {
            self.check_static_roles()?;
        }
        if self.min_in_sync_replicas > self.in_sync_replicas {
            return Err(ConfigError::Invalid {
                key: "min_in_sync_replicas",
                message: format!(
                    "{} is more than in_sync_replicas = {}",
                    self.min_in_sync_replicas, self.in_sync_replicas
                ),
            });
        }
        Ok(())
    }

    /// Without controllers: a slave has a master to copy and an id of its own.
    fn check_static_roles(&self) -> Result<(), ConfigError> {
        if let Some(a) = &self.ha_master_address {
            a.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "ha_master_address",
                message: format!("`{a}` is not ip:port ({e})"),
            })?;
        }
        match self.broker_role {
            BrokerRole::Slave => {
                if self.ha_master_address.is_none() {
                    return Err(ConfigError::Invalid {
                        key: "ha_master_address",
                        message: "a SLAVE needs its master's replication address (the master's ha_listen_port)".into(),
                    });
                }
                if self.broker_id == 0 {
                    return Err(ConfigError::Invalid {
                        key: "broker_id",
                        message: "a SLAVE needs a broker_id other than 0 (0 is the master's)"
                            .into(),
                    });
                }
            }
            _ if self.broker_id != 0 => {
                return Err(ConfigError::Invalid {
                    key: "broker_role",
                    message: format!(
                        "broker_id {} is a slave's id: set broker_role = \"SLAVE\" (and ha_master_address), or broker_id = 0 for a master",
                        self.broker_id
                    ),
                });
            }
            _ => {}
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.broker_name.is_empty() || self.broker_name.len() > 127 {
            return Err(ConfigError::Invalid {
                key: "broker_name",
                message: "must be 1..=127 bytes".into(),
            });
        }
        if self.cluster_name.is_empty() {
            return Err(ConfigError::Invalid {
                key: "cluster_name",
                message: "must not be empty".into(),
            });
        }
        self.listen_addr()?;
        crate::quota::parse_rules(&self.quotas).map_err(|message| ConfigError::Invalid {
            key: "quotas",
            message,
        })?;
        if let Some(a) = &self.advertise_addr {
            a.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "advertise_addr",
                message: format!("`{a}` is not ip:port ({e})"),
            })?;
        }
        if let Some(a) = &self.metrics_addr {
            telemetry::listen_addr(a).map_err(|message| ConfigError::Invalid {
                key: "metrics_addr",
                message,
            })?;
        }
        match (&self.acl_access_key, &self.acl_secret_key) {
            (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => {}
            (None, None) => {}
            (Some(_), None) | (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "acl_secret_key",
                    message: "set both acl_access_key and acl_secret_key, neither empty".into(),
                })
            }
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "acl_access_key",
                    message: "set both acl_access_key and acl_secret_key, neither empty".into(),
                })
            }
        }
        if self.metrics_token.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::Invalid {
                key: "metrics_token",
                message: "must not be empty (unset it to serve metrics without a token)".into(),
            });
        }
        if self.acl_enable {
            acl::AclConfig::load(&self.acl_file).map_err(|e| ConfigError::Invalid {
                key: "acl_file",
                message: e.to_string(),
            })?;
            if self.credentials().is_none() && !self.acl_allow_no_broker_credentials {
                return Err(ConfigError::Invalid {
                    key: "acl_access_key",
                    message: "acl_enable is on but acl_access_key and acl_secret_key are not \
                              set: replication would be open to anyone who reaches the \
                              replication port. Set both (the same pair on the master and its \
                              slaves), or set acl_allow_no_broker_credentials = true to start \
                              without them and refuse every slave"
                        .into(),
                });
            }
        }
        for ns in self.namesrv_list() {
            ns.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "namesrv_addr",
                message: format!("`{ns}` is not ip:port ({e})"),
            })?;
        }
        self.check_ranges()?;
        self.check_replication()?;
        if !self.commit_log_segment_bytes.is_multiple_of(4096) {
            return Err(ConfigError::Invalid {
                key: "commit_log_segment_bytes",
                message: "must be a multiple of 4096".into(),
            });
        }
        if self.message_bytes_max + 4096 > self.commit_log_segment_bytes {
            return Err(ConfigError::Invalid {
                key: "message_bytes_max",
                message: format!(
                    "RocketMQ's maxMessageSize, {} bytes, must fit in one CommitLog segment with \
                     4 KiB to spare: commit_log_segment_bytes (mappedFileSizeCommitLog) is {}",
                    self.message_bytes_max, self.commit_log_segment_bytes
                ),
            });
        }
        if !(self.disk_clean_ratio <= self.disk_force_clean_ratio
            && self.disk_force_clean_ratio <= self.disk_refuse_ratio)
        {
            return Err(ConfigError::Invalid {
                key: "disk_clean_ratio",
                message: "need disk_clean_ratio <= disk_force_clean_ratio <= disk_refuse_ratio"
                    .into(),
            });
        }
        if !self.tail_ring_bytes.is_multiple_of(4096)
            || self.tail_ring_bytes < 4 * (self.write_chunk_bytes + self.frame_bytes_max)
        {
            return Err(ConfigError::Invalid {
                key: "tail_ring_bytes",
                message: format!(
                    "{} must be a multiple of 4096 and at least 4 x (write_chunk_bytes + frame_bytes_max) = {}",
                    self.tail_ring_bytes,
                    4 * (self.write_chunk_bytes + self.frame_bytes_max)
                ),
            });
        }
        if self.tail_ring_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid {
                key: "tail_ring_dir",
                message: "must name a directory (a tmpfs such as /dev/shm)".into(),
            });
        }
        if self.frame_bytes_max < self.message_bytes_max + 4096 {
            return Err(ConfigError::Invalid {
                key: "frame_bytes_max",
                message: "must exceed message_bytes_max by at least 4096".into(),
            });
        }
        let levels = &self.retry_delay_levels_ms;
        if levels.is_empty()
            || levels.len() > 64
            || levels
                .iter()
                .any(|&d| !(1..=7 * 24 * 3_600_000).contains(&d))
        {
            return Err(ConfigError::Invalid {
                key: "retry_delay_levels_ms",
                message: "need 1 to 64 levels, each 1 ms to 7 days".into(),
            });
        }
        Ok(())
    }

    /// The built-in default of `key` as one would type it (`127.0.0.1:10911`, `./data`,
    /// `0`); `None` for a key that is unset by default, and for a name that is no key.
    pub fn default_text(key: &str) -> Option<String> {
        let defaults = toml::Table::try_from(BrokerConfig::default()).ok()?;
        match defaults.get(key)? {
            toml::Value::String(s) => Some(s.clone()),
            value => Some(value.to_string()),
        }
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|e| ConfigError::Invalid {
            key: "listen",
            message: format!("`{}` is not ip:port ({e})", self.listen),
        })
    }

    pub fn namesrv_list(&self) -> Vec<String> {
        self.namesrv_addr
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A change splits into the keys that apply at once and those read at start; the running
    /// config changes only in the first; what the running broker cannot take is refused even
    /// when the next start could.
    #[test]
    fn a_staged_update_changes_the_running_config_only_in_live_keys() {
        let dir = tempfile::tempdir().unwrap();
        let start = BrokerConfig {
            data_dir: dir.path().to_owned(),
            ..BrokerConfig::default()
        };
        let staged = start
            .stage_update(&start, "maxMessageSize=65536\nlistenPort=10921\n")
            .unwrap();
        assert_eq!(staged.live, ["message_bytes_max"]);
        assert_eq!(staged.restart, ["listen"]);
        assert_eq!(staged.running.message_bytes_max, 65536);
        assert_eq!(staged.running.listen, start.listen);
        assert!(
            staged.file.contains("listen = \"127.0.0.1:10921\""),
            "{}",
            staged.file
        );

        // 20 MiB needs frame_bytes_max past its running 16 MiB: fine for the next start,
        // which reads both, not for the running broker.
        let e = start
            .stage_update(
                &start,
                "maxMessageSize=20971520\nframe_bytes_max=33554432\ntail_ring_bytes=268435456\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("until a restart") && e.contains("frame_bytes_max"),
            "{e}"
        );

        let e = start
            .stage_update(&start, "brokerConfigPath=/x")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Forbidden { .. }), "{e}");
    }

    /// One row of tuning/README.md's key table.
    struct Row {
        key: String,
        default: String,
        bounds: String,
        rocketmq: String,
    }

    /// tuning/README.md's key table, in its order.
    fn documented_keys() -> Vec<Row> {
        let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tuning/README.md"));
        let mut rows = Vec::new();
        let mut in_table = false;
        for line in text.lines() {
            if line.starts_with("| key | default |") {
                in_table = true;
                continue;
            }
            if in_table && !line.starts_with('|') {
                break;
            }
            let cols: Vec<&str> = line.split('|').map(str::trim).collect();
            if in_table && cols.len() > 5 && cols[1].starts_with('`') {
                rows.push(Row {
                    key: cols[1].trim_matches('`').to_owned(),
                    default: cols[2].to_owned(),
                    bounds: cols[3].to_owned(),
                    rocketmq: cols[4].to_owned(),
                });
            }
        }
        rows
    }

    /// A default as the README writes it, as a JSON value when it is one of the plain forms
    /// (a number, a size in KiB/MiB/GiB, a bool, a `string`, "empty", "unset"); `None` for
    /// the descriptive ones.
    fn readme_value(text: &str) -> Option<serde_json::Value> {
        let first = text.split(" (").next().unwrap_or(text).trim();
        let size = |n: &str, unit: u64| n.parse::<u64>().ok().map(|n| serde_json::json!(n * unit));
        match first.split_whitespace().collect::<Vec<_>>()[..] {
            [n, "KiB"] => size(n, 1 << 10),
            [n, "MiB"] => size(n, 1 << 20),
            [n, "GiB"] => size(n, 1 << 30),
            ["empty"] => Some(serde_json::json!("")),
            ["unset"] => Some(serde_json::Value::Null),
            ["true"] => Some(serde_json::json!(true)),
            ["false"] => Some(serde_json::json!(false)),
            [one] if one.starts_with('`') && !one.contains('[') => {
                Some(serde_json::json!(one.trim_matches('`')))
            }
            [one] => one
                .parse::<u64>()
                .map(|n| serde_json::json!(n))
                .or_else(|_| one.parse::<f64>().map(|f| serde_json::json!(f)))
                .ok(),
            _ => None,
        }
    }

    #[test]
    fn every_key_is_documented_with_its_default_and_every_documented_key_exists() {
        let defaults = serde_json::to_value(BrokerConfig::default()).unwrap();
        let defaults = defaults.as_object().unwrap();
        let documented = documented_keys();
        let names: Vec<&str> = documented.iter().map(|row| row.key.as_str()).collect();
        let undocumented: Vec<&String> = defaults
            .keys()
            .filter(|k| !names.contains(&k.as_str()))
            .collect();
        assert!(
            undocumented.is_empty(),
            "keys missing from tuning/README.md: {undocumented:?}"
        );
        let mut checked = 0;
        for Row {
            key, default: text, ..
        } in &documented
        {
            let Some(actual) = defaults.get(key) else {
                panic!("tuning/README.md documents `{key}`, which is no config key");
            };
            if let Some(want) = readme_value(text) {
                let same = match (&want, actual) {
                    (serde_json::Value::Number(a), serde_json::Value::Number(b)) => {
                        a.as_f64() == b.as_f64()
                    }
                    (a, b) => a == b,
                };
                assert!(same, "`{key}`: README says {text}, the default is {actual}");
                checked += 1;
            }
        }
        assert!(checked >= 40, "only {checked} defaults could be compared");
    }

    #[test]
    fn the_readme_key_table_is_keys_in_order_with_their_bounds_and_rocketmq_names() {
        let documented = documented_keys();
        let readme: Vec<&str> = documented.iter().map(|row| row.key.as_str()).collect();
        let code: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        assert_eq!(readme, code, "tuning/README.md's key table, against KEYS");
        for (row, key) in documented.iter().zip(KEYS) {
            assert_eq!(row.bounds, key.bounds, "`{}`: bounds", key.name);
            let rocketmq = key.rocketmq.unwrap_or("-");
            assert_eq!(row.rocketmq, rocketmq, "`{}`: RocketMQ name", key.name);
        }
        // The README lists the keys that apply while running on one line, in KEYS' order;
        // every other key needs a restart.
        let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tuning/README.md"));
        let line = text
            .lines()
            .find(|l| l.starts_with("Applied at once: "))
            .expect("tuning/README.md's line of the keys that apply at once");
        let listed: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        let live: Vec<&str> = KEYS.iter().filter(|k| !k.restart).map(|k| k.name).collect();
        assert_eq!(
            listed, live,
            "tuning/README.md's keys applied at once, against KEYS"
        );
    }

    /// `text` (`64 KiB`, `1 day`, `8760 hours`, `0 (all cores)`) in the key's own unit.
    fn quantity(text: &str) -> f64 {
        let text = text.split(" (").next().unwrap_or(text).trim();
        let (n, unit) = text.split_once(' ').unwrap_or((text, ""));
        let n: f64 = n
            .parse()
            .unwrap_or_else(|_| panic!("not a number: `{text}`"));
        let scale = match unit {
            "" | "ms" | "µs" | "hours" | "s" => 1.0,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            "hour" => 3_600_000.0,
            "day" => 86_400_000.0,
            _ => panic!("unknown unit in `{text}`"),
        };
        n * scale
    }

    #[test]
    fn every_range_is_the_one_its_bounds_text_says() {
        let mut checked = 0;
        for key in KEYS {
            let Some((lo, hi)) = key.range else { continue };
            let first = key.bounds.split(',').next().unwrap_or(key.bounds);
            let (lo_text, hi_text) = first
                .split_once(" to ")
                .unwrap_or_else(|| panic!("`{}`: bounds `{}` name no range", key.name, key.bounds));
            assert_eq!(
                (quantity(lo_text), quantity(hi_text)),
                (lo, hi),
                "`{}`: bounds `{}`",
                key.name,
                key.bounds
            );
            checked += 1;
        }
        assert!(checked >= 30, "only {checked} ranges");
    }

    #[test]
    fn a_value_just_outside_its_range_is_refused_naming_the_key_the_value_and_the_bounds(
    ) -> Result<(), ConfigError> {
        for key in KEYS {
            let Some((lo, hi)) = key.range else { continue };
            let outside = if key.ty == "f64" {
                vec![lo - 0.001, hi + 0.001]
            } else if lo > 0.0 {
                vec![lo - 1.0, hi + 1.0]
            } else {
                vec![hi + 1.0]
            };
            for value in outside {
                let value = if key.ty == "f64" {
                    format!("{value}")
                } else {
                    format!("{}", value as u64)
                };
                let mut cfg = BrokerConfig::default();
                cfg.overlay_str(&format!("{} = {value}", key.name), "test")?;
                let Err(err) = cfg.validate() else {
                    panic!("`{}` = {value} was accepted", key.name);
                };
                assert_eq!(
                    err.to_string(),
                    format!(
                        "config key `{}` = {value} is out of bounds: {}",
                        key.name, key.bounds
                    )
                );
            }
        }
        Ok(())
    }

    #[test]
    fn a_huge_frame_bytes_max_is_out_of_bounds_not_an_overflow() -> Result<(), ConfigError> {
        // Its range is checked before 4 x (write_chunk_bytes + frame_bytes_max) is computed
        // for the tail ring rule.
        let mut cfg = BrokerConfig::default();
        cfg.overlay_str("frame_bytes_max = 4611686018427387904", "test")?;
        let Err(err) = cfg.validate() else {
            panic!("frame_bytes_max = 2^62 was accepted");
        };
        let err = err.to_string();
        assert!(
            err.contains("`frame_bytes_max` = 4611686018427387904"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn renamed_keys_come_from_the_aliases_of_keys() {
        let aliases: Vec<(&str, &str)> = KEYS
            .iter()
            .filter_map(|k| k.alias.map(|a| (a, k.name)))
            .collect();
        assert_eq!(RENAMED_KEYS, aliases.as_slice());
        assert!(RENAMED_KEYS.contains(&("max_frame_bytes", "frame_bytes_max")));
    }

    #[test]
    fn every_profile_parses_and_validates() {
        for (name, _) in PROFILES {
            let cfg = BrokerConfig::from_profile(name).unwrap();
            cfg.validate()
                .unwrap_or_else(|e| panic!("profile {name}: {e}"));
        }
        assert!(matches!(
            BrokerConfig::from_profile("nope"),
            Err(ConfigError::UnknownProfile(_))
        ));
    }

    #[test]
    fn durable_profile_flushes_synchronously_into_warm_segments() {
        let cfg = BrokerConfig::from_profile("durable").unwrap();
        assert_eq!(cfg.flush_disk_type, FlushDiskType::Sync);
        assert!(cfg.warm_segments);
        let cfg = BrokerConfig::from_profile("throughput").unwrap();
        assert_eq!(cfg.flush_disk_type, FlushDiskType::Async);
        assert!(!cfg.warm_segments, "warming writes every segment twice");
    }

    #[test]
    fn only_the_latency_profile_polls_when_idle() {
        for (name, _) in PROFILES {
            let cfg = BrokerConfig::from_profile(name).unwrap();
            let want = if *name == "latency" { 200 } else { 0 };
            assert_eq!(cfg.idle_poll_us, want, "profile {name}");
        }
        let mut cfg = BrokerConfig::default();
        cfg.overlay_str("idle_poll_us = 20000", "test").unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("idle_poll_us"), "{err}");
    }

    #[test]
    fn a_renamed_key_is_still_accepted_under_its_former_name() {
        let mut cfg = BrokerConfig::default();
        cfg.overlay_str(
            "max_message_size_bytes = 2097152\nmax_frame_bytes = 8388608",
            "test",
        )
        .unwrap();
        assert_eq!(cfg.message_bytes_max, 2 << 20);
        assert_eq!(cfg.frame_bytes_max, 8 << 20);
        let parsed = BrokerConfig::parse_str("max_message_size_bytes = 1048576", "test").unwrap();
        assert_eq!(parsed.message_bytes_max, 1 << 20);
    }

    #[test]
    fn out_of_bounds_value_is_named() {
        let mut cfg = BrokerConfig::default();
        cfg.overlay_str("flush_interval_ms = 0", "test").unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("flush_interval_ms"), "{err}");
    }

    #[test]
    fn unknown_key_is_refused_with_its_name() {
        let mut cfg = BrokerConfig::default();
        let err = cfg
            .overlay_str("flush_intervall_ms = 5", "test")
            .unwrap_err()
            .to_string();
        assert!(err.contains("flush_intervall_ms"), "{err}");
    }

    #[test]
    fn retry_levels_are_bounded() {
        let mut cfg = BrokerConfig::default();
        assert_eq!(cfg.retry_delay_levels_ms.len(), 18);
        cfg.overlay_str("retry_delay_levels_ms = [10, 20, 30]", "test")
            .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.retry_delay_levels_ms, vec![10, 20, 30]);
        cfg.overlay_str("retry_delay_levels_ms = []", "test")
            .unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("retry_delay_levels_ms"), "{err}");
    }

    #[test]
    fn overlay_keeps_other_keys() {
        let mut cfg = BrokerConfig::from_profile("small").unwrap();
        let seg = cfg.commit_log_segment_bytes;
        cfg.overlay_str("broker_name = \"b2\"", "test").unwrap();
        assert_eq!(cfg.broker_name, "b2");
        assert_eq!(cfg.commit_log_segment_bytes, seg);
    }
}
