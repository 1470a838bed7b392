//! The config each core runs with, and its changes while the broker runs (RocketMQ's
//! UPDATE_BROKER_CONFIG, `mqadmin updateBrokerConfig`).
//!
//! A change goes to core 0, which takes changes one at a time: it checks the keys as a whole
//! (`BrokerConfig::stage_update`), writes them to the overrides file the next start reads,
//! and then sends every core, itself included, the config to run with from then on
//! (`mesh::ApplyConfig`): the one it runs with, with the keys that may change while running
//! (`restart: false` in `config_keys!`) changed. Each core keeps its own copy
//! ([`Core::config`]) and hands its shards their new limits, so no request reads a value
//! another core owns and nothing is locked. The other keys wait in the file for the restart.
//! A change of `broker_permission` is registered with the NameServers at once.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::{BrokerConfig, ConfigError};
use crate::core::Core;
use crate::error::BrokerError;
use crate::mesh::{ApplyConfig, UpdateConfig};

/// How often core 0 offers a core its new config while that core's inbox is full, and how
/// long it waits between offers: an inbox frees up in milliseconds.
const APPLY_TRIES_MAX: u32 = 100;
const APPLY_RETRY: Duration = Duration::from_millis(10);

/// What a change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigUpdate {
    /// The keys set (corvus's names) that every core runs with now.
    pub live: Vec<String>,
    /// The keys set that are read at start: stored, they take effect at the next restart.
    pub restart: Vec<String>,
    /// The overrides file they are kept in.
    pub path: PathBuf,
}

/// The error a refused change is answered with: a key that may not change remotely is
/// NO_PERMISSION, anything else a bad request; either way the text says why.
fn refusal(e: ConfigError) -> BrokerError {
    match e {
        ConfigError::Forbidden { .. } => BrokerError::NoPermission(e.to_string()),
        other => BrokerError::BadRequest(other.to_string()),
    }
}

/// A shard's limits under `cfg` (the keys the broker hands its shards at start, in
/// `broker/src/bootstrap.rs`'s `shard_config`).
pub fn shard_limits(cfg: &BrokerConfig) -> shard::ShardLimits {
    shard::ShardLimits {
        message_bytes_max: usize::try_from(cfg.message_bytes_max).unwrap_or(usize::MAX),
        file_reserved_hours: cfg.file_reserved_hours,
        disk_clean_ratio: cfg.disk_clean_ratio,
        disk_force_clean_ratio: cfg.disk_force_clean_ratio,
        disk_refuse_ratio: cfg.disk_refuse_ratio,
        flush_interval_ms: cfg.flush_interval_ms,
        flush_dirty_bytes_max: cfg.flush_dirty_bytes_max,
        unsynced_bytes_max: cfg.unsynced_bytes_max,
        busy_wait_ms: cfg.send_busy_wait_ms,
    }
}

impl Core {
    /// The config this core runs with now: the start config with the changes made since
    /// to keys that apply while running. Read it at each use (it may change between two
    /// requests); a request that holds it keeps the values it started with.
    pub fn config(&self) -> Rc<BrokerConfig> {
        self.live.borrow().clone()
    }

    /// Changes the keys of a properties body (RocketMQ's or corvus's names): on core 0,
    /// checked as a whole, stored for the next start and applied on every core; asked of
    /// core 0 from any other. Nothing changes when it is refused.
    pub async fn update_config(&self, properties: String) -> Result<ConfigUpdate, BrokerError> {
        if self.id != 0 {
            return self.at_core(0, UpdateConfig(properties)).await;
        }
        let _one = self
            .config_updates
            .acquire_permit(1)
            .await
            .map_err(|e| BrokerError::Internal(format!("config updates: {e}")))?;
        let start = self.shared.config.clone();
        let running = self.config();
        let was = (*running).clone();
        let (staged, path) = glommio::executor()
            .spawn_blocking(move || {
                let staged = start.stage_update(&was, &properties).map_err(refusal)?;
                let path = start.overrides_path();
                crate::durable::replace(&path, staged.file.as_bytes())
                    .map_err(|e| BrokerError::Storage(format!("{}: {e}", path.display())))?;
                Ok::<_, BrokerError>((staged, path))
            })
            .await?;
        for core in 0..self.shared.cores {
            self.apply_on(core, &staged.running).await.map_err(|e| {
                BrokerError::Internal(format!(
                    "{} stored in {}, but core {core} did not take them ({e}): every core takes them at the next restart",
                    staged.live.join(", "),
                    path.display()
                ))
            })?;
        }
        if staged.running.broker_permission != running.broker_permission {
            self.shared
                .broker_permission
                .store(staged.running.broker_permission, Ordering::SeqCst);
            self.shared.register_at_once();
        }
        tracing::info!(
            live = %staged.live.join(", "),
            restart = %staged.restart.join(", "),
            "UPDATE_BROKER_CONFIG stored in {}: the live keys apply on every core now, the rest at the next restart",
            path.display()
        );
        Ok(ConfigUpdate {
            live: staged.live,
            restart: staged.restart,
            path,
        })
    }

    /// Sends `core` the config to run with, again while its inbox is full (bounded).
    async fn apply_on(&self, core: u16, cfg: &BrokerConfig) -> Result<(), BrokerError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.at_core(core, ApplyConfig(Box::new(cfg.clone()))).await {
                Err(BrokerError::Busy(_)) if tries < APPLY_TRIES_MAX => {
                    glommio::timer::sleep(APPLY_RETRY).await;
                }
                other => return other,
            }
        }
    }

    /// Runs with `cfg` from now on: its shards take their new limits (all checked before
    /// any changes), and every request from here on reads it.
    pub(crate) fn apply_config(&self, cfg: BrokerConfig) -> Result<(), BrokerError> {
        let limits = shard_limits(&cfg);
        for (id, shard) in &self.shards {
            shard
                .check_limits(limits)
                .map_err(|e| BrokerError::BadRequest(format!("shard {id}: {e}")))?;
        }
        for shard in self.shards.values() {
            shard
                .set_limits(limits)
                .map_err(|e| BrokerError::BadRequest(e.to_string()))?;
        }
        // Keys read at start never change while running.
        debug_assert_eq!(cfg.data_dir, self.shared.config.data_dir);
        debug_assert_eq!(cfg.flush_disk_type, self.shared.config.flush_disk_type);
        *self.live.borrow_mut() = Rc::new(cfg);
        Ok(())
    }
}
