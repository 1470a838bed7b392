//! The broker's one config struct: defaults, bounds, TOML loading, tuning profiles.
//!
//! Precedence: built-in defaults < the tuning profile (`--profile`, default `throughput`) <
//! the config file (`--config`) < command-line flags. Every key is documented in
//! `tuning/README.md` with its default, bounds and whether it needs a restart (today every
//! key is read at start, so every change needs a restart).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Tuning profiles embedded in the binary, so `--profile NAME` works from any directory.
pub const PROFILES: &[(&str, &str)] = &[
    ("throughput", include_str!("../../tuning/throughput.toml")),
    ("latency", include_str!("../../tuning/latency.toml")),
    ("durable", include_str!("../../tuning/durable.toml")),
    ("small", include_str!("../../tuning/small.toml")),
];

pub const DEFAULT_PROFILE: &str = "throughput";

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
}

/// Keys renamed to one name per value (units last, `_max` last), by their former names,
/// which configs may still use.
pub const RENAMED_KEYS: &[(&str, &str)] = &[
    ("max_message_size_bytes", "message_bytes_max"),
    ("max_frame_bytes", "frame_bytes_max"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlushDiskType {
    #[serde(rename = "ASYNC_FLUSH")]
    Async,
    #[serde(rename = "SYNC_FLUSH")]
    Sync,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerConfig {
    // ---- identity and network ----
    pub broker_name: String,
    pub cluster_name: String,
    /// 0 = master.
    pub broker_id: u64,
    pub listen: String,
    /// The address clients are told to use; defaults to `listen` (an unspecified listen IP
    /// is replaced by 127.0.0.1).
    pub advertise_addr: Option<String>,
    /// Core i's direct port is `direct_port_base + i`; 0 = an ephemeral port per core.
    pub direct_port_base: u16,
    /// NameServers, `;`-separated. Empty = run without registering.
    pub namesrv_addr: String,
    /// Serve Prometheus metrics at http://ADDR/metrics; off when unset.
    pub metrics_addr: Option<String>,
    pub data_dir: PathBuf,
    /// Executors to run, one pinned per core; 0 = every core of the host.
    pub cores: u16,
    pub register_interval_ms: u64,
    /// Between full registrations, the broker tells each NameServer it is alive this often
    /// (a few bytes); a NameServer that does not know it (restarted empty) gets the full
    /// registration at once. The NameServer drops a broker silent for `broker_expiry_ms`.
    pub namesrv_heartbeat_interval_ms: u64,
    pub auto_create_topic_enable: bool,
    pub default_topic_queue_nums: u32,
    /// Queues of all topics together (each topic counting the larger of its read and write
    /// queues) that topic creation may bring the broker to; a creation past it is refused
    /// with the count. Each queue with data has its own ConsumeQueue files and mappings.
    pub queues_max: u64,

    // ---- storage ----
    pub flush_disk_type: FlushDiskType,
    pub flush_interval_ms: u64,
    pub flush_dirty_bytes_max: u64,
    pub commit_log_segment_bytes: u64,
    pub write_chunk_bytes: u64,
    pub write_queue_depth: u64,
    pub hot_bytes_max: u64,
    /// Zero-fill each CommitLog segment ahead of the log (RocketMQ's warmMapedFileEnable).
    pub warm_segments: bool,
    /// The largest stored record (a batch counts as one). Formerly `max_message_size_bytes`,
    /// still accepted.
    #[serde(alias = "max_message_size_bytes")]
    pub message_bytes_max: u64,
    pub file_reserved_hours: u64,
    pub disk_clean_ratio: f64,
    pub disk_force_clean_ratio: f64,
    pub disk_refuse_ratio: f64,
    /// Free space every new file (segment, warm spare, ConsumeQueue or IndexFile blocks)
    /// must leave; below it sends get "disk full" until space returns.
    pub disk_reserve_bytes: u64,
    /// ConsumeQueue files the broker keeps mapped at once, shared out evenly among its
    /// shards; past a shard's share the least recently used file is unmapped to map
    /// another. Bounds the broker's use of the kernel's `vm.max_map_count`.
    pub consume_queue_maps_max: u64,
    /// How often the disk use is measured and retention runs.
    pub disk_check_interval_ms: u64,
    /// Where each shard keeps its tail ring: the copy of the acknowledged but not yet
    /// written CommitLog tail that makes async flush safe against a crash of the broker
    /// process. Must be a tmpfs (its pages outlive the process and are never written back
    /// to a disk); a ring is `tail_ring_bytes` of locked-in shared memory per shard.
    pub tail_ring_dir: PathBuf,
    /// Bytes of each shard's tail ring; bounds the bytes acknowledged and not yet written
    /// (async flush). At least 4 x (write_chunk_bytes + frame_bytes_max).
    pub tail_ring_bytes: u64,
    /// Bytes acknowledged but not yet fdatasynced per shard, at most (async flush): past
    /// it, sends wait up to `send_busy_wait_ms` for a sync and are then answered
    /// SYSTEM_BUSY.
    pub unsynced_bytes_max: u64,
    /// How long a send may wait for the disk to make room before it is answered
    /// SYSTEM_BUSY (RocketMQ's waitTimeMillsInSendQueue).
    pub send_busy_wait_ms: u64,

    // ---- request path ----
    pub inbox_capacity: u64,
    /// The largest request frame. Formerly `max_frame_bytes`, still accepted.
    #[serde(alias = "max_frame_bytes")]
    pub frame_bytes_max: u64,
    pub connection_inflight_max: u64,
    /// Client connections the broker keeps open at once, shared out evenly among its cores
    /// and never more than the descriptor limit leaves after a reserve for the storage's
    /// files: a connection past it is closed at once (one log line per interval says so).
    pub connections_max: u64,
    /// A connection with no request in flight that sends nothing for this long is closed
    /// (RocketMQ's serverChannelMaxIdleTimeSeconds, 120 s).
    pub connection_idle_timeout_ms: u64,
    /// A frame that has begun to arrive must be complete within this long, or the
    /// connection is closed: a half-sent frame holds its buffer.
    pub frame_deadline_ms: u64,
    pub long_polling_max_ms: u64,
    /// glommio io_uring buffer memory per executor (locked memory).
    pub io_memory_bytes: u64,
    /// How long an idle core keeps polling for work before it sleeps (Seastar's
    /// `--idle-poll-time-us`): a request arriving within that time is picked up without a
    /// wake-up of the thread (or, in a VM, of the virtual CPU). 0 = sleep at once. Applies
    /// only to cores pinned to their own CPU; unpinned cores never poll.
    pub idle_poll_us: u64,

    // ---- consumer groups ----
    /// A group member silent for this long is dropped and the group rebalances.
    pub consumer_timeout_ms: u64,
    /// The longest lease on a queue a member of an orderly group gets, whatever it asks
    /// for (RocketMQ's rebalance lock lifetime, 60 s): a member that vanished holding a
    /// queue frees it within this long.
    pub queue_lock_lease_max_ms: u64,
    /// Committed offsets are written to disk this often: a kill -9 loses at most this much
    /// of the latest commits.
    pub offset_flush_interval_ms: u64,
    /// Delay of each retry level (RocketMQ's messageDelayLevel, level 1 first). A message
    /// that failed `n` times comes back after level `n + 3` (the last level beyond).
    pub retry_delay_levels_ms: Vec<u64>,
}

/// RocketMQ's delay levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
pub const RETRY_DELAY_LEVELS_MS_DEFAULT: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_name: "broker-a".into(),
            cluster_name: "DefaultCluster".into(),
            broker_id: 0,
            listen: "127.0.0.1:10911".into(),
            advertise_addr: None,
            direct_port_base: 0,
            namesrv_addr: String::new(),
            metrics_addr: None,
            data_dir: PathBuf::from("./data"),
            cores: 0,
            register_interval_ms: 30_000,
            namesrv_heartbeat_interval_ms: 1_000,
            queues_max: 100_000,
            auto_create_topic_enable: true,
            default_topic_queue_nums: 4,
            flush_disk_type: FlushDiskType::Async,
            flush_interval_ms: 10,
            flush_dirty_bytes_max: 4 << 20,
            commit_log_segment_bytes: 1 << 30,
            write_chunk_bytes: 4 << 20,
            write_queue_depth: 4,
            hot_bytes_max: 256 << 20,
            warm_segments: false,
            message_bytes_max: 4 << 20,
            file_reserved_hours: 72,
            disk_clean_ratio: 0.75,
            disk_force_clean_ratio: 0.85,
            disk_refuse_ratio: 0.90,
            disk_reserve_bytes: 64 << 20,
            consume_queue_maps_max: 16_384,
            disk_check_interval_ms: 10_000,
            tail_ring_dir: PathBuf::from("/dev/shm"),
            tail_ring_bytes: 128 << 20,
            unsynced_bytes_max: 512 << 20,
            send_busy_wait_ms: 200,
            inbox_capacity: 1024,
            frame_bytes_max: 16 << 20,
            connection_inflight_max: 1024,
            connections_max: 10_000,
            connection_idle_timeout_ms: 120_000,
            frame_deadline_ms: 30_000,
            long_polling_max_ms: 30_000,
            io_memory_bytes: 4 << 20,
            idle_poll_us: 0,
            consumer_timeout_ms: 30_000,
            queue_lock_lease_max_ms: 60_000,
            offset_flush_interval_ms: 1_000,
            retry_delay_levels_ms: RETRY_DELAY_LEVELS_MS_DEFAULT.to_vec(),
        }
    }
}

macro_rules! bound {
    ($cfg:expr, $field:ident, $lo:expr, $hi:expr, $text:expr) => {
        if !($lo..=$hi).contains(&$cfg.$field) {
            return Err(ConfigError::OutOfBounds {
                key: stringify!($field),
                value: format!("{:?}", $cfg.$field),
                bounds: $text,
            });
        }
    };
}

impl BrokerConfig {
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

    pub fn overlay_file(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        self.overlay_str(&text, &path.display().to_string())
    }

    /// Checks every bound; the error names the key.
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
        if let Some(a) = &self.advertise_addr {
            a.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "advertise_addr",
                message: format!("`{a}` is not ip:port ({e})"),
            })?;
        }
        if let Some(a) = &self.metrics_addr {
            a.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "metrics_addr",
                message: format!("`{a}` is not ip:port ({e})"),
            })?;
        }
        for ns in self.namesrv_list() {
            ns.parse::<SocketAddr>().map_err(|e| ConfigError::Invalid {
                key: "namesrv_addr",
                message: format!("`{ns}` is not ip:port ({e})"),
            })?;
        }
        bound!(self, cores, 0, 1024, "0 (all cores) to 1024");
        bound!(
            self,
            register_interval_ms,
            1_000,
            60_000,
            "1000 to 60000 ms"
        );
        bound!(
            self,
            namesrv_heartbeat_interval_ms,
            100,
            60_000,
            "100 to 60000 ms"
        );
        bound!(self, default_topic_queue_nums, 1, 1024, "1 to 1024");
        bound!(self, queues_max, 1, 10_000_000, "1 to 10000000");
        bound!(self, flush_interval_ms, 1, 10_000, "1 to 10000 ms");
        bound!(self, flush_dirty_bytes_max, 4096, 1 << 30, "4 KiB to 1 GiB");
        bound!(
            self,
            commit_log_segment_bytes,
            64 << 10,
            16 << 30,
            "64 KiB to 16 GiB"
        );
        if !self.commit_log_segment_bytes.is_multiple_of(4096) {
            return Err(ConfigError::Invalid {
                key: "commit_log_segment_bytes",
                message: "must be a multiple of 4096".into(),
            });
        }
        bound!(
            self,
            write_chunk_bytes,
            64 << 10,
            256 << 20,
            "64 KiB to 256 MiB"
        );
        bound!(self, write_queue_depth, 1, 64, "1 to 64");
        bound!(self, hot_bytes_max, 0, 64 << 30, "0 to 64 GiB");
        bound!(self, message_bytes_max, 1024, 64 << 20, "1 KiB to 64 MiB");
        if self.message_bytes_max + 4096 > self.commit_log_segment_bytes {
            return Err(ConfigError::Invalid {
                key: "message_bytes_max",
                message: "must fit in one CommitLog segment (commit_log_segment_bytes)".into(),
            });
        }
        bound!(self, file_reserved_hours, 1, 24 * 365, "1 to 8760 hours");
        bound!(self, disk_clean_ratio, 0.01, 0.99, "0.01 to 0.99");
        bound!(self, disk_force_clean_ratio, 0.01, 0.99, "0.01 to 0.99");
        bound!(self, disk_refuse_ratio, 0.01, 0.995, "0.01 to 0.995");
        if !(self.disk_clean_ratio <= self.disk_force_clean_ratio
            && self.disk_force_clean_ratio <= self.disk_refuse_ratio)
        {
            return Err(ConfigError::Invalid {
                key: "disk_clean_ratio",
                message: "need disk_clean_ratio <= disk_force_clean_ratio <= disk_refuse_ratio"
                    .into(),
            });
        }
        bound!(self, disk_reserve_bytes, 0, 64 << 30, "0 to 64 GiB");
        bound!(self, consume_queue_maps_max, 16, 1 << 22, "16 to 4194304");
        bound!(
            self,
            disk_check_interval_ms,
            100,
            600_000,
            "100 to 600000 ms"
        );
        bound!(
            self,
            tail_ring_bytes,
            1 << 20,
            16 << 30,
            "1 MiB to 16 GiB, and at least 4 x (write_chunk_bytes + frame_bytes_max)"
        );
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
        bound!(
            self,
            unsynced_bytes_max,
            1 << 20,
            64 << 30,
            "1 MiB to 64 GiB"
        );
        bound!(self, send_busy_wait_ms, 1, 60_000, "1 to 60000 ms");
        bound!(self, inbox_capacity, 1, 1 << 20, "1 to 1048576");
        bound!(
            self,
            frame_bytes_max,
            64 << 10,
            256 << 20,
            "64 KiB to 256 MiB"
        );
        if self.frame_bytes_max < self.message_bytes_max + 4096 {
            return Err(ConfigError::Invalid {
                key: "frame_bytes_max",
                message: "must exceed message_bytes_max by at least 4096".into(),
            });
        }
        bound!(self, connection_inflight_max, 1, 1 << 16, "1 to 65536");
        bound!(self, connections_max, 1, 1 << 20, "1 to 1048576");
        bound!(
            self,
            connection_idle_timeout_ms,
            1_000,
            86_400_000,
            "1000 ms to 1 day"
        );
        bound!(self, frame_deadline_ms, 100, 3_600_000, "100 ms to 1 hour");
        bound!(self, long_polling_max_ms, 0, 300_000, "0 to 300000 ms");
        bound!(self, io_memory_bytes, 64 << 10, 1 << 30, "64 KiB to 1 GiB");
        bound!(self, idle_poll_us, 0, 10_000, "0 to 10000 µs");
        bound!(self, consumer_timeout_ms, 500, 600_000, "500 to 600000 ms");
        bound!(
            self,
            queue_lock_lease_max_ms,
            1_000,
            crate::groups::LEASE_MS_MAX,
            "1000 to 600000 ms"
        );
        bound!(self, offset_flush_interval_ms, 10, 60_000, "10 to 60000 ms");
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
    use super::*;

    /// tuning/README.md's key table: key -> default column.
    fn documented_keys() -> Vec<(String, String)> {
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
            if in_table && cols.len() > 3 && cols[1].starts_with('`') {
                rows.push((cols[1].trim_matches('`').to_owned(), cols[2].to_owned()));
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
        let names: Vec<&str> = documented.iter().map(|(k, _)| k.as_str()).collect();
        let undocumented: Vec<&String> = defaults
            .keys()
            .filter(|k| !names.contains(&k.as_str()))
            .collect();
        assert!(
            undocumented.is_empty(),
            "keys missing from tuning/README.md: {undocumented:?}"
        );
        let mut checked = 0;
        for (key, text) in &documented {
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
    fn idle_polling_is_on_where_no_fdatasync_waits_for_the_cpu() {
        for (name, _) in PROFILES {
            let cfg = BrokerConfig::from_profile(name).unwrap();
            let want = if matches!(*name, "small" | "durable") {
                0
            } else {
                200
            };
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
