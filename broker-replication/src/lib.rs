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
//!
//! This layer sits under the per-core kernel (`broker-core`) and never sees it: it reaches
//! the core's shards, topics and group offsets through [`ReplicaHost`], which the kernel
//! implements. [`controller_link`] is the thread that heartbeats the failover controllers.

#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::net::TcpListener;
use shard::Shard;

use crate::config::BrokerConfig;
use crate::controller_link::{Assignment, ControllerState, ShardReport};

pub mod auth;
pub mod controller_link;
pub mod epochs;
pub mod error;
pub mod master;
pub mod slave;
pub mod wire;

// The layer below, by the names this crate's modules use.
pub use broker_base::{config, deadline, durable, metrics, shared, tls};

/// What replication needs of the core that hosts its shards: the per-core kernel
/// implements it, so this layer never names the kernel's types.
pub trait ReplicaHost: 'static {
    fn core_id(&self) -> u16;
    fn shared(&self) -> &Arc<shared::Shared>;
    /// This core's replication ends.
    fn replication(&self) -> &CoreHa;
    fn shards(&self) -> &HashMap<u16, Shard>;
    /// The topic table with each topic's attributes, as a master sends it to its slaves.
    fn topic_list(&self) -> Vec<wire::TopicRow>;
    /// Takes the master's whole topic table: creates and changes what differs, deletes
    /// what the master no longer has.
    fn follow_topics(&self, list: Vec<wire::TopicRow>) -> Pin<Box<dyn Future<Output = ()> + '_>>;
    /// The version of `shard`'s group offsets: it moves at every commit.
    fn offsets_version(&self, shard: u16) -> u64;
    /// `shard`'s committed group offsets.
    fn offset_entries(&self, shard: u16) -> Vec<wire::OffsetEntry>;
    /// Stores the master's group offsets of `shard`; how many the shard's table holds then
    /// (`None` when this core does not host the shard).
    fn replicate_offsets(&self, shard: u16, entries: Vec<wire::OffsetEntry>) -> Option<usize>;
    /// Rebuilds what the kernel keeps from the logs of `shards`, just promoted, before the
    /// core takes sends as their master (the sends' dedup window).
    fn promoted(&self, shards: Vec<u16>) -> Pin<Box<dyn Future<Output = ()> + '_>>;
    /// Forgets what the kernel kept as master (the dedup window): the demotion may cut back
    /// records it names.
    fn demoted(&self);
}

/// The host, as replication's tasks hold it.
pub type Host = dyn ReplicaHost;

pub use error::{FrameError, ReplicationError};
pub use master::{LinkStatus, MasterShard};
pub use slave::{SlaveShard, SlaveStatus};

/// Longest wait for a connection or the answer to a HELLO.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// One core's replication state: its shards' master ends or slave ends. Fixed at start by
/// `broker_role`, or switched at runtime by the controllers' assignment ([`follow`]).
#[derive(Default)]
pub struct CoreHa {
    masters: RefCell<HashMap<u16, Rc<MasterShard>>>,
    slaves: RefCell<HashMap<u16, Rc<SlaveShard>>>,
    /// This core takes sends: its shards are masters (under the lease, in controller mode).
    serving: Cell<bool>,
    /// Why sends are refused here when they are (for NOT_LEADER answers).
    refusal: RefCell<String>,
    /// The assignment version this core applied last.
    applied: Cell<u64>,
    /// Appends admitted and not yet ended: a demotion lets them end before the shards
    /// become slaves (which may cut the log).
    pub appending: Cell<usize>,
    /// Controller mode: each shard's history as found at start, until the shard first
    /// becomes a master or a slave.
    found: RefCell<HashMap<u16, epochs::Epochs>>,
    /// Controller mode: what the controllers decided, and what the cores report to them.
    pub controller: Option<Arc<ControllerState>>,
}

impl CoreHa {
    /// This core's replication ends. A master opens a new epoch on each of its shards, at
    /// the log's end, durably, before it takes any send (one it cannot store, on a full
    /// disk, is logged and the shard keeps the epoch it had); a history that cannot be read
    /// is an error naming the shard. In controller mode every shard waits for the
    /// controllers' word.
    pub fn new(
        config: &BrokerConfig,
        shards: &HashMap<u16, Shard>,
        controller: Option<Arc<ControllerState>>,
    ) -> Result<CoreHa, ReplicationError> {
        let ha = CoreHa {
            controller,
            ..CoreHa::default()
        };
        if config.enable_controller_mode {
            *ha.refusal.borrow_mut() =
                "it waits for the controllers to name its group's master".into();
            for (&id, shard) in shards {
                ha.found
                    .borrow_mut()
                    .insert(id, epochs::Epochs::load(shard.dir())?);
            }
            return Ok(ha);
        }
        for (&id, shard) in shards {
            let history = epochs::Epochs::load(shard.dir())?;
            if config.broker_role.is_master() {
                let history = open_epoch(id, shard, history, None);
                ha.masters.borrow_mut().insert(
                    id,
                    Rc::new(MasterShard::new(id, shard.clone(), config, history)),
                );
            } else {
                let master = config.ha_master_address.clone().unwrap_or_default();
                ha.slaves.borrow_mut().insert(
                    id,
                    Rc::new(SlaveShard::new(id, shard.clone(), history, master, 0)),
                );
            }
        }
        ha.serving.set(config.broker_role.is_master());
        if !config.broker_role.is_master() {
            *ha.refusal.borrow_mut() = format!(
                "it is a SLAVE of {}: it takes its master's stream only; send to the master (broker id 0)",
                config.ha_master_address.as_deref().unwrap_or("?")
            );
        }
        Ok(ha)
    }

    /// The master end of `shard`, when this core serves it as master.
    pub fn master(&self, shard: u16) -> Option<Rc<MasterShard>> {
        self.masters.borrow().get(&shard).cloned()
    }

    /// Whether this core takes sends; else why not.
    pub fn serving(&self) -> Result<(), ReplicationError> {
        if self.serving.get() {
            Ok(())
        } else {
            Err(ReplicationError::NotServing(self.refusal.borrow().clone()))
        }
    }

    /// The role this core serves in, for status: its configured master role, SLAVE, or
    /// PENDING (controller mode, no word yet or no master).
    pub fn role_name(&self, config: &BrokerConfig) -> &'static str {
        if !self.masters.borrow().is_empty() {
            config.broker_role.name()
        } else if !self.slaves.borrow().is_empty() {
            "SLAVE"
        } else if config.enable_controller_mode {
            "PENDING"
        } else {
            config.broker_role.name()
        }
    }

    /// Every shard's replication state on this core.
    pub fn status(&self) -> Vec<ShardHaStatus> {
        let masters = self.masters.borrow();
        let slaves = self.slaves.borrow();
        let mut out: Vec<ShardHaStatus> = masters
            .values()
            .map(|m| ShardHaStatus {
                shard: m.shard_id,
                epoch: m.epochs.borrow().current(),
                slaves: m.links_status(),
                isr_changes: m.isr_changes.get(),
                last_left: m.last_left.borrow().clone(),
                from_master: None,
            })
            .chain(slaves.values().map(|s| ShardHaStatus {
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

/// Opens the next epoch of a master shard at its log's end, durably: `epoch` when the
/// controllers gave one (kept when the history already has it: the same master going on),
/// else one past the newest. One it cannot store (a full disk) is logged and the shard
/// keeps the history it had.
fn open_epoch(
    id: u16,
    shard: &Shard,
    history: epochs::Epochs,
    epoch: Option<u32>,
) -> epochs::Epochs {
    if epoch.is_some_and(|e| e <= history.current()) {
        if epoch.is_some_and(|e| e < history.current()) {
            tracing::warn!(
                shard = id,
                epoch = history.current(),
                "the controllers' epoch {epoch:?} is older than this shard's: serving in the shard's"
            );
        }
        return history;
    }
    let mut next = history.clone();
    let end = shard.log_bounds().1;
    let opened = match epoch {
        Some(e) => next.begin_at(e, end),
        None => next.begin(end),
    };
    match next.store(shard.dir()) {
        Ok(()) => {
            tracing::info!(
                shard = id,
                epoch = opened,
                "serving as master in a new epoch"
            );
            next
        }
        // A full disk refuses sends anyway: the broker serves reads in the epoch it had,
        // and opens a new one at its next start.
        Err(e) => {
            tracing::error!(
                shard = id,
                epoch = history.current(),
                "cannot store a new epoch ({e}): serving in the epoch this shard had"
            );
            history
        }
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

impl ShardHaStatus {
    /// What the metrics show of it.
    pub fn gauges(&self) -> metrics::ShardReplication {
        metrics::ShardReplication {
            shard: self.shard,
            from_master: self.from_master.as_ref().map(|m| metrics::MasterGauges {
                lag_bytes: m.lag_bytes,
                connected: m.connected,
            }),
            slaves: self
                .slaves
                .iter()
                .map(|l| metrics::SlaveGauges {
                    broker_id: l.broker_id,
                    lag_bytes: l.lag_bytes,
                    lag_ms: l.lag_ms,
                    in_sync: l.in_sync,
                })
                .collect(),
        }
    }
}

/// Starts this core's replication tasks: the accept loop of its replication port, the
/// in-sync set's clock (with, in controller mode, the controllers' assignment), and a
/// slave's streams.
pub fn spawn(core: &Rc<Host>, listener: TcpListener) -> Vec<glommio::Task<()>> {
    let mut tasks = Vec::new();
    let c = core.clone();
    tasks.push(glommio::spawn_local(async move {
        loop {
            match listener.accept().await {
                Ok(stream) => {
                    glommio::spawn_local(master::serve_slave(c.clone(), stream)).detach();
                }
                Err(e) => {
                    tracing::warn!(core = c.core_id(), "replication accept failed: {e}");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }));
    let c = core.clone();
    tasks.push(glommio::spawn_local(async move {
        // Leaving the in-sync set is a matter of time passing, not only of acks arriving;
        // a new assignment is taken within a tick.
        let tick = if c.replication().controller.is_some() {
            Duration::from_millis(20)
        } else {
            Duration::from_millis(100)
        };
        let mut refreshed = Instant::now();
        loop {
            glommio::timer::sleep(tick).await;
            if refreshed.elapsed() >= Duration::from_millis(100) {
                refreshed = Instant::now();
                let masters: Vec<Rc<MasterShard>> =
                    c.replication().masters.borrow().values().cloned().collect();
                for m in masters {
                    m.refresh();
                }
            }
            if c.replication().controller.is_some() {
                follow(&c).await;
            }
        }
    }));
    let slaves: Vec<Rc<SlaveShard>> = core
        .replication()
        .slaves
        .borrow()
        .values()
        .cloned()
        .collect();
    for s in slaves {
        tasks.push(glommio::spawn_local(slave::run(core.clone(), s)));
    }
    tasks
}

/// Longest a stopping master waits for its in-sync slaves to acknowledge the closed logs.
const DRAIN_SLAVES_MAX: Duration = Duration::from_secs(5);

/// At a graceful stop, once this core's shards are closed: waits (up to `slave_timeout_ms`,
/// at most [`DRAIN_SLAVES_MAX`]) until the in-sync slaves of each master shard here have
/// acknowledged all of its log, so a SIGTERM loses nothing on them even under ASYNC_MASTER.
/// In controller mode it tells the heartbeat thread which slaves have everything on each
/// shard (none for a shard this core does not serve as master), for the hand-over.
pub async fn drain_slaves(core: &Rc<Host>) {
    let serving = core.replication().serving.get();
    let wait = Duration::from_millis(core.shared().config.slave_timeout_ms).min(DRAIN_SLAVES_MAX);
    let deadline = Instant::now() + wait;
    let mut ids: Vec<u16> = core.shards().keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let caught_up = match (core.replication().master(id), core.shards().get(&id)) {
            (Some(m), Some(shard)) => {
                let end = shard.log_bounds().1;
                let have = m.wait_acknowledged(end, deadline).await;
                tracing::info!(shard = id, end, slaves = ?have, "stopping: these slaves have all of the shard's log");
                have
            }
            _ => Vec::new(),
        };
        if let Some(ctl) = core.replication().controller.as_ref() {
            ctl.drained(id, if serving { caught_up } else { Vec::new() });
        }
    }
}

/// Controller mode, on this core's tick: reports its shards to the heartbeat thread, and
/// applies a new assignment of the controllers.
async fn follow(core: &Rc<Host>) {
    let Some(ctl) = core.replication().controller.as_ref() else {
        return;
    };
    for (&id, shard) in core.shards() {
        let report = match core.replication().master(id) {
            Some(m) => ShardReport {
                epoch: m.epochs.borrow().current(),
                end: shard.log_bounds().1,
                master: core.replication().serving.get(),
                in_sync: m.in_sync_ids(),
                healthy: !shard.is_poisoned(),
            },
            None => ShardReport {
                epoch: core
                    .replication()
                    .slaves
                    .borrow()
                    .get(&id)
                    .map(|s| s.epochs.borrow().current())
                    .unwrap_or_else(|| {
                        core.replication()
                            .found
                            .borrow()
                            .get(&id)
                            .map_or(0, |e| e.current())
                    }),
                end: shard.log_bounds().1,
                master: false,
                in_sync: Vec::new(),
                healthy: !shard.is_poisoned(),
            },
        };
        ctl.publish(id, report);
    }
    let version = ctl.version();
    if version == core.replication().applied.get() {
        return;
    }
    core.replication().applied.set(version);
    match ctl.assignment() {
        Assignment::Master {
            epoch,
            sync_state_set,
        } => promote(core, epoch, &sync_state_set).await,
        Assignment::Slave {
            epoch,
            master_id,
            master_ha,
        } => demote(core, epoch, master_id, &master_ha).await,
        Assignment::Pending { why } => {
            core.replication().serving.set(false);
            *core.replication().refusal.borrow_mut() =
                format!("it is not its group's master: {why}");
        }
    }
}

/// Makes every shard of this core a master in `epoch`: a slave's stream is stopped first
/// (nothing is placed after this), then the epoch opened, then sends are taken.
async fn promote(core: &Rc<Host>, epoch: u32, sync_state_set: &[u64]) {
    let me = core.shared().config.broker_id;
    let counted: Vec<u64> = sync_state_set
        .iter()
        .copied()
        .filter(|&id| id != me)
        .collect();
    let mut ids: Vec<u16> = core.shards().keys().copied().collect();
    ids.sort_unstable();
    let mut promoted = Vec::new();
    for id in ids {
        let Some(shard) = core.shards().get(&id) else {
            continue;
        };
        if let Some(m) = core.replication().master(id) {
            // Already the master: a new epoch (an election of this same broker) is opened
            // where the log is; the controllers' in-sync set is taken.
            let history = m.epochs.borrow().clone();
            let next = open_epoch(id, shard, history, Some(epoch));
            *m.epochs.borrow_mut() = next;
            m.set_counted(Some(counted.clone()));
            continue;
        }
        let stopped = core.replication().slaves.borrow_mut().remove(&id);
        let history = match stopped {
            Some(s) => {
                s.stop().await;
                s.epochs.borrow().clone()
            }
            None => core
                .replication()
                .found
                .borrow_mut()
                .remove(&id)
                .unwrap_or_default(),
        };
        let history = open_epoch(id, shard, history, Some(epoch));
        let m = Rc::new(MasterShard::new(
            id,
            shard.clone(),
            &core.shared().config,
            history,
        ));
        m.set_counted(Some(counted.clone()));
        // Reads were capped at what the old master confirmed; from now on this shard's
        // own in-sync set sets the cap.
        m.refresh();
        core.replication().masters.borrow_mut().insert(id, m);
        promoted.push(id);
    }
    if !promoted.is_empty() {
        core.promoted(promoted).await;
    }
    core.replication().serving.set(true);
    tracing::info!(core = core.core_id(), epoch, "serving as master");
}

/// Makes every shard of this core a slave of `master_ha` in `epoch`: sends stop at once,
/// the appends under way end, the master ends' streams close, then each shard streams from
/// the new master (cutting back what it has that the new master never had).
async fn demote(core: &Rc<Host>, epoch: u32, master_id: u64, master_ha: &str) {
    core.replication().serving.set(false);
    core.demoted();
    *core.replication().refusal.borrow_mut() = format!(
        "it is a slave of broker {master_id} ({master_ha}) in epoch {epoch}: send to the master (broker id 0)"
    );
    let masters: Vec<Rc<MasterShard>> = core
        .replication()
        .masters
        .borrow_mut()
        .drain()
        .map(|(_, m)| m)
        .collect();
    for m in &masters {
        m.close_all(format!("this broker is now a slave of broker {master_id}"));
    }
    // Sends that waited for replicas have been answered; those still appending end now.
    let deadline = Instant::now() + Duration::from_secs(10);
    while core.replication().appending.get() > 0 && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    let mut ids: Vec<u16> = core.shards().keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let Some(shard) = core.shards().get(&id) else {
            continue;
        };
        let current = core.replication().slaves.borrow().get(&id).cloned();
        if let Some(s) = &current {
            if s.master_addr() == master_ha {
                s.min_epoch.set(epoch);
                continue;
            }
        }
        let history = match &current {
            Some(s) => {
                core.replication().slaves.borrow_mut().remove(&id);
                s.stop().await;
                s.epochs.borrow().clone()
            }
            None => match masters.iter().find(|m| m.shard_id == id) {
                Some(m) => m.epochs.borrow().clone(),
                None => core
                    .replication()
                    .found
                    .borrow_mut()
                    .remove(&id)
                    .unwrap_or_default(),
            },
        };
        let s = Rc::new(SlaveShard::new(
            id,
            shard.clone(),
            history,
            master_ha.to_owned(),
            epoch,
        ));
        core.replication().slaves.borrow_mut().insert(id, s.clone());
        glommio::spawn_local(slave::run(core.clone(), s)).detach();
    }
    tracing::info!(
        core = core.core_id(),
        epoch,
        master = master_ha,
        "serving as a slave"
    );
}
