//! A RocketMQ `broker.conf` as corvus config: Java properties with RocketMQ's camelCase
//! keys (`brokerName`, `listenPort`, `flushDiskType`, ...).
//!
//! Each key of RocketMQ's broker config that corvus has a key for (the `rocketmq` column of
//! [`KEYS`]) sets that key, converted to corvus's unit where the two differ:
//! `flushCommitLogLeastPages` counts 4 KiB pages, the disk ratios are percentages (`75`) or
//! fractions (`0.75`), `messageDelayLevel` is RocketMQ's level string (`1s 5s 10s 30s 1m`),
//! `listenPort` and `brokerIP1` become the ports and host of `listen` and `advertise_addr`.
//! A key corvus has no use for is ignored and named, with the reason, so nobody believes a
//! setting took effect that did not. corvus's own snake_case keys work in the same file.

use super::{BrokerConfig, ConfigError, KeySpec, KEYS, RENAMED_KEYS};

/// A key of the file that set nothing, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    pub key: String,
    pub reason: &'static str,
}

const THREADS: &str = "corvus runs one event loop per core (`cores`), not thread pools";
const REPLICATION: &str = "DLedger is not built (issue 19): corvus replicates master to slave with brokerRole and haMasterAddress, and fails over with enableControllerMode and controllerAddr";
const STORE_PATHS: &str = "corvus keeps every store file under `data_dir` (storePathRootDir)";
const DERIVED: &str = "corvus derives the ConsumeQueue and IndexFile from the CommitLog: \
    their files follow its flushes and are rebuilt on recovery";

/// RocketMQ broker keys corvus knows and does not use, with the reason.
const IGNORED: &[(&str, &str)] = &[
    ("brokerIP2", REPLICATION),
    (
        "syncFlushTimeout",
        "a sync flush waits for its fsync; the send times out at the client",
    ),
    ("enableDLegerCommitLog", REPLICATION),
    ("dLegerGroup", REPLICATION),
    ("dLegerPeers", REPLICATION),
    ("dLegerSelfId", REPLICATION),
    ("storePathCommitLog", STORE_PATHS),
    ("storePathConsumeQueue", STORE_PATHS),
    ("storePathIndex", STORE_PATHS),
    ("storeCheckpoint", STORE_PATHS),
    ("abortFile", STORE_PATHS),
    ("rocketmqHome", "corvus reads nothing from a RocketMQ home"),
    (
        "deleteWhen",
        "corvus deletes expired segments at every disk check \
        (`disk_check_interval_ms`), not at one hour of the day",
    ),
    ("mappedFileSizeConsumeQueue", DERIVED),
    ("flushIntervalConsumeQueue", DERIVED),
    ("flushConsumeQueueLeastPages", DERIVED),
    ("sendMessageThreadPoolNums", THREADS),
    ("pullMessageThreadPoolNums", THREADS),
    ("queryMessageThreadPoolNums", THREADS),
    ("adminBrokerThreadPoolNums", THREADS),
    ("clientManageThreadPoolNums", THREADS),
    ("consumerManageThreadPoolNums", THREADS),
    ("heartbeatThreadPoolNums", THREADS),
    ("endTransactionThreadPoolNums", THREADS),
    ("processReplyMessageThreadPoolNums", THREADS),
    ("serverWorkerThreads", THREADS),
    ("serverSelectorThreads", THREADS),
    ("serverCallbackExecutorThreads", THREADS),
    (
        "useReentrantLockWhenPutMessage",
        "each shard has one writer and takes no lock",
    ),
    (
        "transientStorePoolEnable",
        "corvus writes through its tail ring with O_DIRECT \
        (`tail_ring_bytes`, `write_chunk_bytes`)",
    ),
    (
        "transientStorePoolSize",
        "corvus writes through its tail ring (`tail_ring_bytes`)",
    ),
    (
        "accessMessageInMemoryMaxRatio",
        "reads come from the tail ring while their bytes are \
        in it (`tail_ring_bytes`), else from disk",
    ),
    (
        "longPollingEnable",
        "corvus always holds an empty pull (`long_polling_max_ms`)",
    ),
    (
        "autoCreateSubscriptionGroup",
        "corvus creates a group when a member first joins",
    ),
    (
        "fastListenPort",
        "the VIP channel is the listen port - 2, as RocketMQ's default",
    ),
    (
        "filterServerNums",
        "corvus has no filter servers: SQL92 filters run on the broker (enablePropertyFilter)",
    ),
    (
        "msgTraceTopicName",
        "the trace topic is always RMQ_SYS_TRACE_TOPIC",
    ),
    (
        "timerWheelEnable",
        "the timer is always on: delay levels and delivery times are held in a per-shard timer queue (`timer_max_delay_sec`)",
    ),
];

/// The keys of the properties document `text`, in order.
pub fn property_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let _ = java_properties::PropertiesIter::new(text.as_bytes()).read_into(|k, _| keys.push(k));
    keys
}

/// Whether `text` reads as Java properties that name at least one RocketMQ broker key.
pub fn looks_like_properties(text: &str) -> bool {
    let mut found = false;
    let _ = java_properties::PropertiesIter::new(text.as_bytes()).read_into(|k, _| {
        found |= spec_of_rocketmq(&k).is_some()
            || IGNORED.iter().any(|(name, _)| *name == k)
            || matches!(k.as_str(), "bindAddress");
    });
    found
}

fn spec_of_rocketmq(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|s| s.rocketmq == Some(key))
}

/// Overlays the properties document `text` onto `cfg`; returns what it ignored.
pub fn overlay_properties(
    cfg: &mut BrokerConfig,
    text: &str,
    origin: &str,
) -> Result<Vec<Ignored>, ConfigError> {
    let (overlay, ignored) = properties_overlay(cfg, text, origin)?;
    cfg.overlay_table(overlay, origin)?;
    Ok(ignored)
}

/// The keys the properties document `text` sets, as corvus keys over `cfg` (whose `listen`
/// gives what `listenPort` or `brokerIP1` leave unsaid), and the keys it ignores.
pub fn properties_overlay(
    cfg: &BrokerConfig,
    text: &str,
    origin: &str,
) -> Result<(toml::Table, Vec<Ignored>), ConfigError> {
    let err = |line: usize, message: String| ConfigError::Parse {
        origin: origin.to_owned(),
        message: format!("line {line}: {message}"),
    };
    let mut overlay = toml::Table::new();
    let mut ignored = Vec::new();
    let mut port: Option<u16> = None;
    let mut bind_ip: Option<std::net::IpAddr> = None;
    let mut broker_ip: Option<std::net::IpAddr> = None;
    for line in java_properties::PropertiesIter::new(text.as_bytes()) {
        let line = line.map_err(|e| err(e.line_number().unwrap_or(0), e.to_string()))?;
        let n = line.line_number();
        let java_properties::LineContent::KVPair(key, value) = line.consume_content() else {
            continue;
        };
        let value = value.trim().to_owned();
        let bad = |why: &str| err(n, format!("`{key}` = `{value}`: {why}"));
        match key.as_str() {
            "listenPort" => port = Some(value.parse().map_err(|_| bad("not a port"))?),
            "bindAddress" => bind_ip = Some(value.parse().map_err(|_| bad("not an IP"))?),
            "brokerIP1" => broker_ip = Some(value.parse().map_err(|_| bad("not an IP"))?),
            _ => {}
        }
        if matches!(key.as_str(), "listenPort" | "bindAddress" | "brokerIP1") {
            continue;
        }
        if let Some(spec) = spec_of_rocketmq(&key) {
            let v = convert(spec, &value).map_err(|why| bad(&why))?;
            overlay.insert(spec.name.to_owned(), v);
        } else if KEYS.iter().any(|s| s.name == key) || RENAMED_KEYS.iter().any(|(o, _)| *o == key)
        {
            // corvus's own key: its value as TOML would write it, or else as a string.
            let v = toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.clone()));
            overlay.insert(key, v);
        } else {
            let reason = IGNORED
                .iter()
                .find(|(name, _)| *name == key)
                .map_or("not a broker key corvus knows", |(_, why)| *why);
            ignored.push(Ignored { key, reason });
        }
    }
    // The address: RocketMQ listens on bindAddress (all addresses by default) at
    // listenPort and tells clients brokerIP1. Without either, corvus's own `listen` stays
    // (loopback unless told otherwise).
    let current = cfg.listen_addr()?;
    let listen_ip = bind_ip.or(broker_ip.map(|_| std::net::Ipv4Addr::UNSPECIFIED.into()));
    let listen = std::net::SocketAddr::new(
        listen_ip.unwrap_or(current.ip()),
        port.unwrap_or(current.port()),
    );
    if port.is_some() || listen_ip.is_some() {
        overlay.insert("listen".into(), listen.to_string().into());
    }
    if let Some(ip) = broker_ip {
        let advertise = std::net::SocketAddr::new(ip, listen.port());
        overlay.insert("advertise_addr".into(), advertise.to_string().into());
    }
    Ok((overlay, ignored))
}

/// RocketMQ's `value` of the key that means `spec`, in corvus's type and unit.
fn convert(spec: &KeySpec, value: &str) -> Result<toml::Value, String> {
    let int = || {
        value
            .parse::<i64>()
            .map_err(|_| format!("not a whole number (corvus `{}`)", spec.name))
    };
    Ok(match spec.name {
        // RocketMQ counts 4 KiB pages.
        "flush_dirty_bytes_max" => toml::Value::Integer(int()?.saturating_mul(4096)),
        // A percentage (RocketMQ's diskMaxUsedSpaceRatio = 75) or a fraction (0.85).
        "disk_clean_ratio" | "disk_force_clean_ratio" | "disk_refuse_ratio" => {
            let r: f64 = value
                .parse()
                .map_err(|_| format!("not a number (corvus `{}`)", spec.name))?;
            toml::Value::Float(if r > 1.0 { r / 100.0 } else { r })
        }
        "retry_delay_levels_ms" => toml::Value::Array(
            delay_levels(value)?
                .into_iter()
                .map(|ms| toml::Value::Integer(ms as i64))
                .collect(),
        ),
        _ => match spec.ty {
            "bool" => match value.to_ascii_lowercase().as_str() {
                "true" => toml::Value::Boolean(true),
                "false" => toml::Value::Boolean(false),
                _ => return Err("not `true` or `false`".into()),
            },
            "u16" | "u32" | "u64" => toml::Value::Integer(int()?),
            "f64" => toml::Value::Float(value.parse().map_err(|_| "not a number".to_owned())?),
            _ => toml::Value::String(value.to_owned()),
        },
    })
}

/// RocketMQ's `messageDelayLevel`: durations with a unit (`ms`, `s`, `m`, `h`, `d`),
/// space separated, level 1 first.
pub fn delay_levels(text: &str) -> Result<Vec<u64>, String> {
    text.split_whitespace()
        .map(|level| {
            let split = level
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| format!("delay level `{level}` has no unit (ms, s, m, h, d)"))?;
            let (n, unit) = level.split_at(split);
            let n: u64 = n
                .parse()
                .map_err(|_| format!("delay level `{level}` is not a number and a unit"))?;
            let scale = match unit {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => {
                    return Err(format!(
                        "delay level `{level}`: unit `{unit}` is not ms, s, m, h or d"
                    ))
                }
            };
            n.checked_mul(scale)
                .ok_or_else(|| format!("delay level `{level}` is too long"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker.conf RocketMQ ships (conf/broker.conf), with a few keys more.
    const SHIPPED: &str = "\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = SYNC_FLUSH
# a comment
namesrvAddr=127.0.0.1:9876;127.0.0.1:9877
listenPort=10921
storePathRootDir=/var/lib/corvus
diskMaxUsedSpaceRatio=80
flushCommitLogLeastPages=8
messageDelayLevel=1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
mappedFileSizeCommitLog=1073741824
autoCreateTopicEnable=false
sendMessageThreadPoolNums=16
someVendorKey=1
idle_poll_us = 0
";

    #[test]
    fn shipped_broker_conf_maps_every_known_key_and_names_the_others() {
        let mut cfg = BrokerConfig::default();
        let ignored = overlay_properties(&mut cfg, SHIPPED, "broker.conf").unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.cluster_name, "DefaultCluster");
        assert_eq!(cfg.broker_name, "broker-a");
        assert_eq!(cfg.file_reserved_hours, 48);
        assert_eq!(cfg.flush_disk_type, super::super::FlushDiskType::Sync);
        assert_eq!(cfg.namesrv_addr, "127.0.0.1:9876;127.0.0.1:9877");
        assert_eq!(cfg.listen, "127.0.0.1:10921");
        assert_eq!(cfg.data_dir, std::path::PathBuf::from("/var/lib/corvus"));
        assert!((cfg.disk_clean_ratio - 0.80).abs() < 1e-9);
        assert_eq!(cfg.flush_dirty_bytes_max, 8 * 4096);
        assert_eq!(
            cfg.retry_delay_levels_ms,
            super::super::RETRY_DELAY_LEVELS_MS_DEFAULT
        );
        assert_eq!(cfg.commit_log_segment_bytes, 1 << 30);
        assert!(!cfg.auto_create_topic_enable);
        assert_eq!(cfg.idle_poll_us, 0);
        let names: Vec<&str> = ignored.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            names,
            ["deleteWhen", "sendMessageThreadPoolNums", "someVendorKey"]
        );
        assert_eq!(ignored[2].reason, "not a broker key corvus knows");
        assert_eq!(cfg.broker_role, super::super::BrokerRole::AsyncMaster);
    }

    #[test]
    fn acl_2_keys_take_rocketmqs_names() {
        let mut cfg = BrokerConfig::default();
        let text = "authenticationEnabled=true\nauthorizationEnabled=true\ninitAuthenticationUser={\"username\":\"root\",\"password\":\"12345678\",\"userType\":\"Super\"}\nmigrateAuthFromV1Enabled=true\n";
        assert!(looks_like_properties(text));
        let ignored = overlay_properties(&mut cfg, text, "broker.conf").unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert!(cfg.acl2_authentication_enable && cfg.acl2_authorization_enable);
        assert!(cfg.acl2_migrate_from_v1);
        assert_eq!(
            cfg.acl2_init_user.as_deref(),
            Some(r#"{"username":"root","password":"12345678","userType":"Super"}"#)
        );
    }

    #[test]
    fn broker_ip1_listens_everywhere_and_advertises_itself_unless_bind_address_says() {
        let mut cfg = BrokerConfig::default();
        overlay_properties(&mut cfg, "brokerIP1=10.1.2.3\nlistenPort=10911\n", "t").unwrap();
        assert_eq!(cfg.listen, "0.0.0.0:10911");
        assert_eq!(cfg.advertise_addr.as_deref(), Some("10.1.2.3:10911"));

        let mut cfg = BrokerConfig::default();
        let text = "brokerIP1=10.1.2.3\nbindAddress=10.1.2.3\nlistenPort=10999\n";
        overlay_properties(&mut cfg, text, "t").unwrap();
        assert_eq!(cfg.listen, "10.1.2.3:10999");
    }

    #[test]
    fn fractions_and_percentages_are_both_ratios() {
        let mut cfg = BrokerConfig::default();
        let text = "diskMaxUsedSpaceRatio=0.7\ndiskSpaceCleanForciblyRatio=85\n\
                    diskSpaceWarningLevelRatio=0.9\n";
        overlay_properties(&mut cfg, text, "t").unwrap();
        assert!((cfg.disk_clean_ratio - 0.7).abs() < 1e-9);
        assert!((cfg.disk_force_clean_ratio - 0.85).abs() < 1e-9);
        assert!((cfg.disk_refuse_ratio - 0.9).abs() < 1e-9);
    }

    #[test]
    fn a_bad_value_names_the_line_the_key_and_corvus_key() {
        let mut cfg = BrokerConfig::default();
        let e = overlay_properties(
            &mut cfg,
            "brokerId=0\nfileReservedTime=two days\n",
            "b.conf",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("b.conf") && e.contains("line 2"), "{e}");
        assert!(
            e.contains("fileReservedTime") && e.contains("file_reserved_hours"),
            "{e}"
        );
        let e = overlay_properties(&mut cfg, "listenPort=99999\n", "b.conf").unwrap_err();
        assert!(e.to_string().contains("not a port"), "{e}");
        let e = overlay_properties(&mut cfg, "messageDelayLevel=1s 5x\n", "b.conf").unwrap_err();
        assert!(e.to_string().contains("5x"), "{e}");
    }

    #[test]
    fn delay_levels_take_every_unit() {
        assert_eq!(
            delay_levels("500ms 1s 2m 1h 1d").unwrap(),
            [500, 1_000, 120_000, 3_600_000, 86_400_000]
        );
        assert!(delay_levels("10").is_err());
        assert!(delay_levels("s").is_err());
    }

    #[test]
    fn every_ignored_key_is_no_mapped_key() {
        for (k, _) in IGNORED {
            assert!(
                spec_of_rocketmq(k).is_none(),
                "{k} is both mapped and ignored"
            );
        }
    }

    #[test]
    fn toml_and_properties_are_told_apart() {
        assert!(looks_like_properties(SHIPPED));
        assert!(!looks_like_properties("broker_name = \"b\"\n"));
    }
}
