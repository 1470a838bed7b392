//! The NameServer's one config struct, validated at start-up.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::NameSrvError;

/// Configuration of one NameServer. Every field is fixed for the life of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameServerConfig {
    /// Address to listen on. Default `127.0.0.1:9876` (RocketMQ's port). Port 0 lets the OS
    /// pick; [`crate::NameServerHandle::local_addr`] tells which.
    pub listen_addr: SocketAddr,
    /// A broker not heard from for longer than this is dropped from the routes. Default
    /// 10 000: ten missed heartbeats of a broker of this version, which sends one every
    /// second (`namesrv_heartbeat_interval_ms`), so a killed broker leaves the routes within
    /// about 10 s; bounds 1..=[`Self::BROKER_EXPIRY_MS_MAX`].
    pub broker_expiry_ms: u64,
    /// How often the scan thread looks for expired brokers. Default 10 000; bounds 1.. ; the
    /// effective interval is capped at a quarter of the expiry (see
    /// [`Self::scan_interval`]), so a short test expiry needs no second flag.
    pub scan_interval_ms: u64,
    /// Largest frame accepted; a larger one is answered with an error and skipped.
    /// Default 4 MiB; bounds 64 KiB..=[`protocol::FRAME_BYTES_MAX_DEFAULT`].
    pub frame_bytes_max: u32,
    /// Connections served at once. A connection accepted at the cap is served and an open
    /// one is closed instead: one that never completed a request before one that did, then
    /// the one idle longest (see `connections.rs`). Default 4096; bounds 1..=65536.
    pub connections_max: usize,
    /// A connection that completes no request for this long is closed (RocketMQ's
    /// `serverChannelMaxIdleTimeSeconds`). Clients and brokers reconnect when they need
    /// to. Default 120 000; bounds 1..=[`Self::TIMEOUT_MS_MAX`].
    pub connection_idle_timeout_ms: u64,
    /// A frame whose first byte has arrived must be complete within this, or the connection
    /// is closed: a half-sent frame cannot hold a connection slot. Default 30 000; bounds
    /// 1..=[`Self::TIMEOUT_MS_MAX`].
    pub frame_timeout_ms: u64,
    /// Access control: the plain_acl.yml whose rules every request must pass (see
    /// `access.rs`), reloaded when it changes; `None` (the default) serves everyone.
    pub acl_file: Option<std::path::PathBuf>,
    /// ACL 2.0: the users and ACLs (the JSON form a broker keeps in `config/auth.json`)
    /// checked with [`Self::authentication_enable`] or [`Self::authorization_enable`],
    /// reloaded when it changes. Default `None`. Not together with [`Self::acl_file`].
    pub auth_file: Option<std::path::PathBuf>,
    /// ACL 2.0 (RocketMQ's `authenticationEnabled`): every write must come from an enabled
    /// user of [`Self::auth_file`]. Default false.
    pub authentication_enable: bool,
    /// ACL 2.0 (RocketMQ's `authorizationEnabled`): every write must come from a super user
    /// or one whose policy allows Update on the cluster it names (implies authentication).
    /// Default false.
    pub authorization_enable: bool,
    /// With access control on, a signed RocketMQ request that carries its time
    /// (`SignedAtMs`, as mqadmin sends) is taken only this close to the NameServer's clock,
    /// and only once (`acl::fresh`). Default [`acl::fresh::WINDOW_MS_DEFAULT`].
    pub acl_signature_window_ms: u64,
    /// With access control on, refuse signed RocketMQ requests that carry no time (real
    /// RocketMQ clients send none). Default false.
    pub acl_signature_time_required: bool,
    /// TLS on the listener (RocketMQ's `tls.server.mode`): disabled (default), permissive
    /// (TLS and plaintext on the port, told apart by the first byte) or enforcing (a
    /// plaintext connection is closed, counted in `connections_closed{reason="plaintext"}`).
    pub tls_mode: tls::Mode,
    /// The certificate, key and client authentication; needed unless `tls_mode` is
    /// disabled. Read and checked at start.
    pub tls: Option<tls::ServerSettings>,
    /// Where the KV config (mqadmin's updateKvConfig, updateOrderConf) is kept across
    /// restarts, in RocketMQ's `kvConfig.json` form; `None` (the default) keeps it in memory
    /// only.
    pub kv_config_path: Option<std::path::PathBuf>,
}

impl NameServerConfig {
    pub const LISTEN_ADDR_DEFAULT: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9876);
    pub const BROKER_EXPIRY_MS_DEFAULT: u64 = 10_000;
    /// One day: longer than that is a typo, not a policy.
    pub const BROKER_EXPIRY_MS_MAX: u64 = 24 * 3600 * 1000;
    pub const SCAN_INTERVAL_MS_DEFAULT: u64 = 10_000;
    pub const FRAME_BYTES_MAX_DEFAULT: u32 = 4 * 1024 * 1024;
    pub const FRAME_BYTES_MAX_MIN: u32 = 64 * 1024;
    pub const CONNECTIONS_MAX_DEFAULT: usize = 4096;
    pub const CONNECTIONS_LIMIT: usize = 65536;
    pub const CONNECTION_IDLE_TIMEOUT_MS_DEFAULT: u64 = 120_000;
    pub const FRAME_TIMEOUT_MS_DEFAULT: u64 = 30_000;
    /// One day: a longer timeout is no timeout.
    pub const TIMEOUT_MS_MAX: u64 = 24 * 3600 * 1000;

    /// The settings as `key=value` lines, RocketMQ's properties form (getNamesrvConfig).
    pub fn properties(&self) -> String {
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        [
            ("listen_addr", self.listen_addr.to_string()),
            ("listenPort", self.listen_addr.port().to_string()),
            ("broker_expiry_ms", self.broker_expiry_ms.to_string()),
            ("scan_interval_ms", self.scan_interval_ms.to_string()),
            ("frame_bytes_max", self.frame_bytes_max.to_string()),
            ("connections_max", self.connections_max.to_string()),
            (
                "connection_idle_timeout_ms",
                self.connection_idle_timeout_ms.to_string(),
            ),
            ("frame_timeout_ms", self.frame_timeout_ms.to_string()),
            ("acl_enable", self.acl_file.is_some().to_string()),
            ("acl_file", path(&self.acl_file)),
            (
                "authenticationEnabled",
                self.authentication_enable.to_string(),
            ),
            (
                "authorizationEnabled",
                self.authorization_enable.to_string(),
            ),
            ("auth_file", path(&self.auth_file)),
            ("tls_mode", self.tls_mode.name().to_owned()),
            ("kvConfigPath", path(&self.kv_config_path)),
            ("orderMessageEnable", "false".to_owned()),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
    }

    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<(), NameSrvError> {
        if self.broker_expiry_ms == 0 || self.broker_expiry_ms > Self::BROKER_EXPIRY_MS_MAX {
            return Err(NameSrvError::Config(format!(
                "broker_expiry_ms must be in 1..={}, got {}",
                Self::BROKER_EXPIRY_MS_MAX,
                self.broker_expiry_ms
            )));
        }
        if self.scan_interval_ms == 0 {
            return Err(NameSrvError::Config(
                "scan_interval_ms must be at least 1".into(),
            ));
        }
        if self.frame_bytes_max < Self::FRAME_BYTES_MAX_MIN
            || self.frame_bytes_max > protocol::FRAME_BYTES_MAX_DEFAULT
        {
            return Err(NameSrvError::Config(format!(
                "frame_bytes_max must be in {}..={}, got {}",
                Self::FRAME_BYTES_MAX_MIN,
                protocol::FRAME_BYTES_MAX_DEFAULT,
                self.frame_bytes_max
            )));
        }
        if self.connections_max == 0 || self.connections_max > Self::CONNECTIONS_LIMIT {
            return Err(NameSrvError::Config(format!(
                "connections_max must be in 1..={}, got {}",
                Self::CONNECTIONS_LIMIT,
                self.connections_max
            )));
        }
        for (name, value) in [
            (
                "connection_idle_timeout_ms",
                self.connection_idle_timeout_ms,
            ),
            ("frame_timeout_ms", self.frame_timeout_ms),
        ] {
            if value == 0 || value > Self::TIMEOUT_MS_MAX {
                return Err(NameSrvError::Config(format!(
                    "{name} must be in 1..={}, got {value}",
                    Self::TIMEOUT_MS_MAX
                )));
            }
        }
        let acl2 = self.authentication_enable || self.authorization_enable;
        match (&self.auth_file, acl2) {
            (Some(_), false) => {
                return Err(NameSrvError::Config(
                    "auth_file is set but neither authentication_enable nor \
                     authorization_enable is on"
                        .into(),
                ))
            }
            (None, true) => {
                return Err(NameSrvError::Config(
                    "authentication_enable and authorization_enable need auth_file".into(),
                ))
            }
            _ => {}
        }
        if acl2 && self.acl_file.is_some() {
            return Err(NameSrvError::Config(
                "ACL 1.0 (acl_file) and ACL 2.0 (auth_file) cannot both be on: one rule set \
                 decides at the NameServer"
                    .into(),
            ));
        }
        Ok(())
    }

    pub fn connection_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.connection_idle_timeout_ms)
    }

    pub fn frame_timeout(&self) -> Duration {
        Duration::from_millis(self.frame_timeout_ms)
    }

    pub fn broker_expiry(&self) -> Duration {
        Duration::from_millis(self.broker_expiry_ms)
    }

    /// The scan interval actually used: the configured one, capped at a quarter of the
    /// expiry so a silent broker is dropped at most 25% late; never below 1 ms.
    pub fn scan_interval(&self) -> Duration {
        let ms = self.scan_interval_ms.min(self.broker_expiry_ms / 4).max(1);
        Duration::from_millis(ms)
    }
}

impl Default for NameServerConfig {
    fn default() -> Self {
        NameServerConfig {
            listen_addr: Self::LISTEN_ADDR_DEFAULT,
            broker_expiry_ms: Self::BROKER_EXPIRY_MS_DEFAULT,
            scan_interval_ms: Self::SCAN_INTERVAL_MS_DEFAULT,
            frame_bytes_max: Self::FRAME_BYTES_MAX_DEFAULT,
            connections_max: Self::CONNECTIONS_MAX_DEFAULT,
            connection_idle_timeout_ms: Self::CONNECTION_IDLE_TIMEOUT_MS_DEFAULT,
            frame_timeout_ms: Self::FRAME_TIMEOUT_MS_DEFAULT,
            acl_file: None,
            auth_file: None,
            authentication_enable: false,
            authorization_enable: false,
            acl_signature_window_ms: acl::fresh::WINDOW_MS_DEFAULT,
            acl_signature_time_required: false,
            tls_mode: tls::Mode::Disabled,
            tls: None,
            kv_config_path: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_scan_is_capped() {
        let c = NameServerConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.listen_addr.to_string(), "127.0.0.1:9876");
        // The 10 s default is capped at a quarter of the 10 s broker expiry.
        assert_eq!(c.scan_interval(), Duration::from_millis(2500));

        let short = NameServerConfig {
            broker_expiry_ms: 300,
            ..NameServerConfig::default()
        };
        assert_eq!(short.scan_interval(), Duration::from_millis(75));
        let tiny = NameServerConfig {
            broker_expiry_ms: 1,
            ..NameServerConfig::default()
        };
        assert_eq!(tiny.scan_interval(), Duration::from_millis(1));
    }

    #[test]
    fn out_of_bounds_fields_are_refused() {
        let base = NameServerConfig::default();
        for bad in [
            NameServerConfig {
                broker_expiry_ms: 0,
                ..base.clone()
            },
            NameServerConfig {
                scan_interval_ms: 0,
                ..base.clone()
            },
            NameServerConfig {
                frame_bytes_max: 10,
                ..base.clone()
            },
            NameServerConfig {
                connections_max: 0,
                ..base.clone()
            },
            NameServerConfig {
                connection_idle_timeout_ms: 0,
                ..base.clone()
            },
            NameServerConfig {
                frame_timeout_ms: NameServerConfig::TIMEOUT_MS_MAX + 1,
                ..base.clone()
            },
            NameServerConfig {
                auth_file: Some("auth.json".into()),
                ..base.clone()
            },
            NameServerConfig {
                authorization_enable: true,
                ..base.clone()
            },
            NameServerConfig {
                auth_file: Some("auth.json".into()),
                authentication_enable: true,
                acl_file: Some("plain_acl.yml".into()),
                ..base.clone()
            },
        ] {
            let err = bad.validate().err();
            assert!(err.is_some(), "{bad:?} should be refused");
        }
    }
}
