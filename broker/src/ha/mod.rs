//! Master/slave replication, per shard: each shard's CommitLog streams on its own TCP
//! connection from the master core that owns it to the slave core that owns the same shard,
//! with no lock and no hop between cores (RocketMQ's HA stream, one per shard).
//!
//! - `wire`: the frames.
//! - `master`: a master shard's slaves, their acknowledgements, the in-sync set, the
//!   SYNC_MASTER wait and the confirm offset that caps what consumers see.
//! - `slave`: a slave shard's stream from its master.
//!
//! Every core of a master listens on its own replication port; a slave's shard connects to
//! `ha_master_address` (core 0's) and is sent on to the core that owns the shard.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use glommio::net::TcpListener;
use shard::Shard;

use crate::config::BrokerConfig;
use crate::core::Core;

pub mod epochs;
pub mod master;
pub mod slave;
pub mod wire;

pub use master::{LinkStatus, MasterShard};
pub use slave::{SlaveShard, SlaveStatus};

/// Longest wait for a connection or the answer to a HELLO.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// One core's replication state: its shards' master ends or slave ends.
#[derive(Default)]
pub struct CoreHa {
    pub masters: HashMap<u16, Rc<MasterShard>>,
    pub slaves: HashMap<u16, Rc<SlaveShard>>,
}

impl CoreHa {
    /// This core's replication ends. A master opens a new epoch on each of its shards, at
    /// the log's end, durably, before it takes any send (one it cannot store, on a full
    /// disk, is logged and the shard keeps the epoch it had); a history that cannot be read
    /// is an error naming the shard.
    pub fn new(config: &BrokerConfig, shards: &HashMap<u16, Shard>) -> Result<CoreHa, String> {
        let mut ha = CoreHa::default();
        for (&id, shard) in shards {
            let mut history = epochs::Epochs::load(shard.dir())?;
            if config.broker_role.is_master() {
                let mut next = history.clone();
                let epoch = next.begin(shard.log_bounds().1);
                match next.store(shard.dir()) {
                    Ok(()) => {
                        history = next;
                        tracing::info!(shard = id, epoch, "serving as master in a new epoch");
                    }
                    // A full disk refuses sends anyway: the broker starts and serves reads
                    // in the epoch it had, and opens a new one at its next start.
                    Err(e) => tracing::error!(
                        shard = id,
                        epoch = history.current(),
                        "cannot store a new epoch ({e}): serving in the epoch this shard had"
                    ),
                }
                ha.masters.insert(
                    id,
                    Rc::new(MasterShard::new(id, shard.clone(), config, history)),
                );
            } else {
                ha.slaves
                    .insert(id, Rc::new(SlaveShard::new(id, shard.clone(), history)));
            }
        }
        Ok(ha)
    }

    /// Every shard's replication state on this core.
    pub fn status(&self) -> Vec<ShardHaStatus> {
        let mut out: Vec<ShardHaStatus> = self
            .masters
            .values()
            .map(|m| ShardHaStatus {
                shard: m.shard_id,
                epoch: m.epochs.borrow().current(),
                slaves: m.links_status(),
                isr_changes: m.isr_changes.get(),
                last_left: m.last_left.borrow().clone(),
                from_master: None,
            })
            .chain(self.slaves.values().map(|s| ShardHaStatus {
                shard: s.shard_id,
                epoch: s.epochs.borrow().current(),
                slaves: Vec::new(),
                isr_changes: 0,
                last_left: None,
                from_master: Some(s.status()),
            }))
            .collect();
        out.sort_by_key(|s| s.shard);
        out
    }
}

/// One shard's replication, for `mqadmin haStatus` and the metrics.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardHaStatus {
    pub shard: u16,
    /// The newest epoch of the shard's history: a master's own, a slave's master's.
    pub epoch: u32,
    /// A master shard's slaves.
    pub slaves: Vec<LinkStatus>,
    pub isr_changes: u64,
    pub last_left: Option<String>,
    /// A slave shard's view of its master.
    pub from_master: Option<SlaveStatus>,
}

/// Starts this core's replication tasks: the accept loop of its replication port, the
/// in-sync set's clock, and a slave's streams.
pub fn spawn(core: &Rc<Core>, listener: TcpListener) -> Vec<glommio::Task<()>> {
    let mut tasks = Vec::new();
    let c = core.clone();
    tasks.push(glommio::spawn_local(async move {
        loop {
            match listener.accept().await {
                Ok(stream) => {
                    glommio::spawn_local(master::serve_slave(c.clone(), stream)).detach();
                }
                Err(e) => {
                    tracing::warn!(core = c.id, "replication accept failed: {e}");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }));
    if !core.ha.masters.is_empty() {
        // Leaving the in-sync set is a matter of time passing, not only of acks arriving.
        let c = core.clone();
        tasks.push(glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_millis(100)).await;
                for m in c.ha.masters.values() {
                    m.refresh();
                }
            }
        }));
    }
    for s in core.ha.slaves.values() {
        tasks.push(glommio::spawn_local(slave::run(core.clone(), s.clone())));
    }
    tasks
}
