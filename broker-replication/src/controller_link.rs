//! Controller mode: the broker's link to the failover controllers (`corvus-controller`).
//!
//! A thread of its own heartbeats the controller leader with each shard's epoch and log end
//! and takes back the group's record: who is master, in which epoch, who is in sync. It
//! publishes that as an [`Assignment`] here, with the master's lease, and each core applies
//! it on its own tick (`ha::follow`): a master core serves while the lease lasts, a slave
//! core streams from the master named. The master also proposes the group's SyncStateSet
//! from what its cores see in sync; its cores keep waiting on a slave the controllers still
//! count until the shrink is committed, so the controllers never elect a slave that lacks an
//! acknowledged send.
//!
//! At a graceful stop the master hands the group over: once its cores have closed their
//! shards and their in-sync slaves have acknowledged all of them, it asks the controllers
//! to elect one of those slaves (`hand_over`).
//!
//! This is the one place where the controllers' answers cross to the cores: through the
//! mutexes and counters of [`ControllerState`], read by each core on its own tick.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use controller_proto::{Client, ClientConfig, Heartbeat, ReplicaInfo, Request, Response};

use crate::error::ReplicationError;
use crate::shared::Shared;

/// What the controllers last said this broker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Nothing heard yet, or the group has no master now: no sends here.
    Pending { why: String },
    /// This broker is the master in `epoch`; `sync_state_set` are the replicas the
    /// controllers count in sync (this broker included).
    Master {
        epoch: u32,
        sync_state_set: Vec<u64>,
    },
    /// This broker copies `master_id`'s log from its replication address `master_ha`.
    Slave {
        epoch: u32,
        master_id: u64,
        master_ha: String,
    },
}

/// One shard's state as its core last published it, for the heartbeat.
#[derive(Debug, Clone)]
pub struct ShardReport {
    pub epoch: u32,
    pub end: u64,
    /// Serving as this shard's master (and the slaves in sync on it), or not.
    pub master: bool,
    pub in_sync: Vec<u64>,
    /// False once the shard is poisoned (a failed write or fdatasync): a master that says so
    /// is replaced without waiting for its lease to end.
    pub healthy: bool,
}

/// The controllers' answers, published for the cores; the cores' shard reports, published
/// for the heartbeat.
pub struct ControllerState {
    assignment: Mutex<Assignment>,
    /// Bumped at every change of `assignment`: a core compares it with the one it applied.
    version: AtomicU64,
    /// Until when (ms after `Shared::started`, by `Shared::clock`) this broker may act as the
    /// master: `lease_ms` (less a tenth) after it *sent* the last heartbeat answered "you are
    /// the master".
    lease_until_ms: AtomicU64,
    reports: Mutex<Vec<ShardReport>>,
    /// The NameServer id and master epoch to register with; `None` until the controllers
    /// have answered once (a broker must not claim the master's slot before it knows).
    registration: Mutex<Option<(u64, u32)>>,
    /// The last heartbeat failed (each change is logged once).
    failing: AtomicBool,
    /// At a graceful stop, per shard: the slaves that acknowledged all of its closed log
    /// (`None` until the shard's core has said).
    drained: Mutex<Vec<Option<Vec<u64>>>>,
}

impl ControllerState {
    pub fn new(shard_count: u16) -> ControllerState {
        ControllerState {
            assignment: Mutex::new(Assignment::Pending {
                why: "the controllers have not answered yet".into(),
            }),
            version: AtomicU64::new(0),
            lease_until_ms: AtomicU64::new(0),
            reports: Mutex::new(vec![
                ShardReport {
                    epoch: 0,
                    end: 0,
                    master: false,
                    in_sync: Vec::new(),
                    healthy: true,
                };
                shard_count as usize
            ]),
            registration: Mutex::new(None),
            failing: AtomicBool::new(false),
            drained: Mutex::new(vec![None; shard_count as usize]),
        }
    }

    /// A stopping core's word on `shard`: these slaves have all of its log.
    pub fn drained(&self, shard: u16, slaves: Vec<u64>) {
        let mut d = self.drained.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = d.get_mut(shard as usize) {
            *slot = Some(slaves);
        }
    }

    /// Once every shard has been drained: the slaves that have all of every shard's log.
    fn drained_everywhere(&self) -> Option<Vec<u64>> {
        let d = self.drained.lock().unwrap_or_else(PoisonError::into_inner);
        let shards: Option<Vec<&[u64]>> = d.iter().map(|s| s.as_deref()).collect();
        Some(in_every(shards?)?.into_iter().collect())
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    pub fn assignment(&self) -> Assignment {
        self.assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn registration(&self) -> Option<(u64, u32)> {
        *self
            .registration
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the master's lease still holds at `now`; the error says since when not.
    pub fn lease_holds(&self, shared: &Shared) -> Result<(), ReplicationError> {
        let until = self.lease_until_ms.load(Ordering::SeqCst);
        let now = shared.uptime().as_millis() as u64;
        if until > now {
            return Ok(());
        }
        Err(ReplicationError::NotServing(if until == 0 {
            "it holds no master lease from the controllers".into()
        } else {
            format!(
                "its master lease from the controllers ended {} ms ago (no answered heartbeat since)",
                now - until
            )
        }))
    }

    pub fn publish(&self, shard: u16, report: ShardReport) {
        let mut r = self.reports.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = r.get_mut(shard as usize) {
            *slot = report;
        }
    }

    fn reports(&self) -> Vec<ShardReport> {
        self.reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the controllers' record of the group, heard for a heartbeat sent at `sent`.
    /// Returns whether the NameServer registration changed.
    fn take(&self, shared: &Shared, info: &ReplicaInfo, sent: Instant) -> bool {
        let me = shared.config.broker_id;
        let next = match info.master_id {
            Some(m) if m == me => Assignment::Master {
                epoch: info.master_epoch,
                sync_state_set: info.sync_state_set.clone(),
            },
            Some(m) => match info.master_ha_addrs.first() {
                Some(ha) => Assignment::Slave {
                    epoch: info.master_epoch,
                    master_id: m,
                    master_ha: ha.clone(),
                },
                None => Assignment::Pending {
                    why: format!("master {m} has not said where it replicates"),
                },
            },
            None => Assignment::Pending {
                why: format!(
                    "the group has no master (epoch {}, in sync: {:?})",
                    info.master_epoch, info.sync_state_set
                ),
            },
        };
        if matches!(next, Assignment::Master { .. }) {
            let lease = info.lease_ms.saturating_sub(info.lease_ms / 10);
            let until = sent.saturating_duration_since(shared.started).as_millis() as u64 + lease;
            self.lease_until_ms.fetch_max(until, Ordering::SeqCst);
        } else {
            self.lease_until_ms.store(0, Ordering::SeqCst);
        }
        {
            let mut a = self
                .assignment
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *a != next {
                tracing::info!(from = ?*a, to = ?next, "the controllers changed this broker's role");
                *a = next.clone();
                self.version.fetch_add(1, Ordering::SeqCst);
            }
        }
        let id = match next {
            Assignment::Master { .. } => 0,
            _ => slave_id(me, info),
        };
        let reg = Some((id, info.master_epoch));
        let mut r = self
            .registration
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let changed = *r != reg;
        *r = reg;
        changed
    }
}

/// The NameServer id a slave registers under: its own broker id, or for the broker that
/// was configured as the group's first master (id 0, which is the master's slot) one above
/// every id the controllers know, so no two replicas share an id.
fn slave_id(me: u64, info: &ReplicaInfo) -> u64 {
    if me != 0 {
        return me;
    }
    info.replicas.iter().map(|r| r.broker_id).max().unwrap_or(0) + 1
}

/// The slaves in sync on every shard, and this broker: what the master proposes as the
/// group's SyncStateSet.
fn in_sync_everywhere(me: u64, reports: &[ShardReport]) -> Option<Vec<u64>> {
    if !reports.iter().all(|r| r.master) {
        return None;
    }
    let mut set = in_every(reports.iter().map(|r| r.in_sync.as_slice()))?;
    set.insert(me);
    Some(set.into_iter().collect())
}

/// The ids in every one of `shards`' lists (`None` for no shard at all).
fn in_every<'a>(shards: impl IntoIterator<Item = &'a [u64]>) -> Option<BTreeSet<u64>> {
    let mut shards = shards.into_iter();
    let mut set: BTreeSet<u64> = shards.next()?.iter().copied().collect();
    for ids in shards {
        set.retain(|id| ids.contains(id));
    }
    Some(set)
}

pub fn spawn(
    shared: Arc<Shared>,
    state: Arc<ControllerState>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("controller-heartbeat".into())
        .spawn(move || run(shared, &state))
}

fn heartbeat(shared: &Shared, state: &ControllerState) -> Heartbeat {
    let cfg = &shared.config;
    let reports = state.reports();
    Heartbeat {
        cluster: cfg.cluster_name.clone(),
        group: cfg.broker_name.clone(),
        broker_id: cfg.broker_id,
        addr: shared.advertise_addr.clone(),
        ha_addrs: shared
            .ha_addrs
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default(),
        epoch: reports.iter().map(|r| r.epoch).max().unwrap_or(0),
        max_offsets: reports.iter().map(|r| r.end).collect(),
        healthy: reports.iter().all(|r| r.healthy),
        prefer_master: cfg.broker_id == 0,
    }
}

fn run(shared: Arc<Shared>, state: &ControllerState) {
    let interval = Duration::from_millis(shared.config.controller_heartbeat_interval_ms);
    let addrs = shared.config.controller_addrs();
    // One call may not outlast the lease it would renew: a silent controller is skipped
    // for the next one quickly.
    let config = ClientConfig {
        io_timeout_ms: 500,
        attempts_max: 6,
        call_timeout_ms: 1500,
        retry_backoff_ms: 50,
        // Controllers with access control on take only requests signed by an admin account.
        credentials: shared.config.credentials(),
    };
    let mut client = match Client::with_config(&addrs, config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("controller mode: {e}; this broker will not serve as master");
            return;
        }
    };
    while !shared.stopping() {
        let began = Instant::now();
        let hb = heartbeat(&shared, state);
        let sent = shared.clock.now();
        match client.call(&Request::BrokerHeartbeat(hb)) {
            Ok(Response::Replica(info)) => {
                if state.failing.swap(false, Ordering::SeqCst) {
                    tracing::info!(
                        controller = client.current_addr(),
                        "the controllers answer again"
                    );
                }
                let mut reregister = state.take(&shared, &info, sent);
                reregister |= propose_sync_state_set(&shared, state, &mut client, &info, sent);
                if reregister {
                    // The registration thread registers in full at a version bump.
                    shared.topics_version.fetch_add(1, Ordering::SeqCst);
                    shared.wake_registry();
                }
            }
            Ok(other) => {
                if !state.failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!("the controllers refused this broker's heartbeat: {other:?}");
                }
            }
            Err(e) => {
                if !state.failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!("cannot heartbeat the controllers: {e}");
                }
            }
        }
        let until = began + interval;
        while !shared.stopping() && Instant::now() < until {
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
    }
    hand_over(&shared, state, &mut client);
}

/// Longest the heartbeat thread waits, at a graceful stop, for every core to have drained
/// its slaves: the cores' send drain and slave drain, with room to spare.
const HAND_OVER_WAIT_MAX: Duration = Duration::from_secs(20);

/// At a graceful stop of the group's master: once the cores have closed their shards and
/// said which slaves acknowledged all of them, asks the controllers to elect one of those
/// now (an `ElectMaster` of that broker), so the group has a master again within a
/// heartbeat of the slave instead of after this broker's lease and the controllers'
/// heartbeat timeout. This broker takes no send from the moment it began to stop, so it
/// cannot act as a second master. Without such a slave (none in sync, or none that
/// caught up in time) nothing is asked: the controllers elect as after a crash.
fn hand_over(shared: &Shared, state: &ControllerState, client: &mut Client) {
    let me = shared.config.broker_id;
    let Assignment::Master { sync_state_set, .. } = state.assignment() else {
        return;
    };
    let deadline = Instant::now() + HAND_OVER_WAIT_MAX;
    let drained = loop {
        if let Some(d) = state.drained_everywhere() {
            break d;
        }
        if Instant::now() >= deadline {
            tracing::warn!("stopping: the cores did not finish in time; no hand-over (the controllers elect after the lease)");
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let candidates: Vec<u64> = drained
        .into_iter()
        .filter(|id| *id != me && sync_state_set.contains(id))
        .collect();
    if candidates.is_empty() {
        tracing::info!(
            in_sync = ?sync_state_set,
            "stopping: no in-sync slave acknowledged all of the log; no hand-over (the controllers elect after the lease)"
        );
        return;
    }
    let group = shared.config.broker_name.clone();
    for id in candidates {
        let req = Request::ElectMaster {
            group: group.clone(),
            broker_id: Some(id),
        };
        match client.call(&req) {
            Ok(Response::Replica(info)) if info.master_id == Some(id) => {
                tracing::info!(
                    new_master = id,
                    epoch = info.master_epoch,
                    "stopping: handed the group over to a slave that has all of the log"
                );
                return;
            }
            Ok(other) => {
                tracing::warn!(
                    slave = id,
                    "stopping: the controllers did not elect it: {other:?}"
                );
            }
            Err(e) => {
                tracing::warn!(
                    slave = id,
                    "stopping: cannot ask the controllers to elect it: {e}"
                );
            }
        }
    }
}

/// As the master: asks the controllers to make the SyncStateSet what the cores see in
/// sync on every shard. Returns whether the registration changed on the answer.
fn propose_sync_state_set(
    shared: &Shared,
    state: &ControllerState,
    client: &mut Client,
    info: &ReplicaInfo,
    sent: Instant,
) -> bool {
    let me = shared.config.broker_id;
    if info.master_id != Some(me) {
        return false;
    }
    let Some(wanted) = in_sync_everywhere(me, &state.reports()) else {
        return false;
    };
    let mut now: Vec<u64> = info.sync_state_set.clone();
    now.sort_unstable();
    if wanted == now {
        return false;
    }
    let req = Request::AlterSyncStateSet {
        group: shared.config.broker_name.clone(),
        master_id: me,
        master_epoch: info.master_epoch,
        sync_state_set_epoch: info.sync_state_set_epoch,
        new_set: wanted.clone(),
    };
    match client.call(&req) {
        Ok(Response::Replica(after)) => {
            tracing::info!(from = ?now, to = ?after.sync_state_set, "the controllers changed the in-sync set");
            state.take(shared, &after, sent)
        }
        Ok(other) => {
            tracing::debug!(wanted = ?wanted, "the in-sync set was not changed: {other:?}");
            false
        }
        Err(e) => {
            tracing::debug!(wanted = ?wanted, "cannot propose the in-sync set: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;

    fn report(master: bool, in_sync: &[u64]) -> ShardReport {
        ShardReport {
            epoch: 1,
            end: 0,
            master,
            in_sync: in_sync.to_vec(),
            healthy: true,
        }
    }

    #[test]
    fn the_proposed_set_is_the_slaves_in_sync_on_every_shard() {
        let r = [report(true, &[1, 2]), report(true, &[2])];
        assert_eq!(in_sync_everywhere(0, &r), Some(vec![0, 2]));
        let r = [report(true, &[1]), report(true, &[])];
        assert_eq!(in_sync_everywhere(3, &r), Some(vec![3]));
        // A core that has not become master yet: nothing proposed.
        let r = [report(true, &[1]), report(false, &[])];
        assert_eq!(in_sync_everywhere(0, &r), None);
    }

    /// The master's lease runs nine tenths of `lease_ms` from when the answered heartbeat
    /// was sent, by the broker's clock: it holds a millisecond before that, not at it.
    #[test]
    fn the_master_lease_ends_when_the_clock_passes_it() {
        let clock = shard::Clock::manual();
        let shared = Shared::new(
            BrokerConfig::default(),
            1,
            1,
            "127.0.0.1:10911".into(),
            Default::default(),
            Vec::new(),
        )
        .with_clock(clock.clone());
        let state = ControllerState::new(1);
        let e = state
            .lease_holds(&shared)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("holds no master lease"), "{e}");
        let info = ReplicaInfo {
            group: "g".into(),
            master_id: Some(shared.config.broker_id),
            master_epoch: 1,
            master_addr: None,
            master_ha_addrs: Vec::new(),
            sync_state_set: vec![shared.config.broker_id],
            sync_state_set_epoch: 1,
            replicas: Vec::new(),
            lease_ms: 3000,
        };
        clock.advance(Duration::from_secs(1));
        let sent = shared.clock.now();
        // The answer comes later than the heartbeat went: the lease counts from the send.
        clock.advance(Duration::from_millis(200));
        state.take(&shared, &info, sent);
        assert!(matches!(state.assignment(), Assignment::Master { .. }));
        clock.advance(Duration::from_millis(2499));
        assert_eq!(state.lease_holds(&shared), Ok(()));
        clock.advance(Duration::from_millis(1));
        let e = state
            .lease_holds(&shared)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("ended 0 ms ago"), "{e}");
    }

    #[test]
    fn a_slave_never_shares_an_id_with_another_replica() {
        let replica = |id| controller_proto::ReplicaState {
            broker_id: id,
            addr: String::new(),
            ha_addrs: Vec::new(),
            alive: true,
            last_epoch: 0,
            max_offsets: Vec::new(),
        };
        let info = ReplicaInfo {
            group: "g".into(),
            master_id: Some(2),
            master_epoch: 3,
            master_addr: None,
            master_ha_addrs: Vec::new(),
            sync_state_set: vec![2],
            sync_state_set_epoch: 4,
            replicas: vec![replica(0), replica(1), replica(2)],
            lease_ms: 3000,
        };
        assert_eq!(slave_id(1, &info), 1);
        assert_eq!(slave_id(0, &info), 3);
    }
}
