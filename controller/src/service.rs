//! The controller's requests and its election timer, on top of Raft.
//!
//! Only the Raft leader answers group requests: each one first confirms leadership with a
//! quorum (`ensure_linearizable`, which also waits until the leader has applied everything
//! committed), and a follower answers `NotLeader` with the leader's address. Every change is
//! a Raft write; the in-memory liveness table ([`Liveness`]) is the leader's alone and is
//! started afresh whenever this controller begins a new term as leader.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_proto::{ControllerNode, Heartbeat, ReplicaInfo, ReplicaState, Request, Response};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState};
use tokio::sync::Mutex;

use crate::policy::{self, Decision, Liveness, PolicyConfig};
use crate::raft_types::{NodeId, Raft};
use crate::registry::{Command, GroupRecord, Outcome, Replica};
use crate::state_machine::StateMachine;

/// A "group stuck without a master" warning is repeated at most this often per group.
const STUCK_LOG_INTERVAL_MS: u64 = 5000;

/// The leader's volatile state.
struct LeaderState {
    /// The term the table was started in; a new term starts a new table.
    term: Option<u64>,
    liveness: Liveness,
    stuck_logged_ms: HashMap<String, u64>,
}

/// One controller's request handling.
pub struct Service {
    id: NodeId,
    raft: Raft,
    sm: StateMachine,
    cfg: PolicyConfig,
    peers: BTreeMap<NodeId, String>,
    origin: Instant,
    leader: Mutex<LeaderState>,
}

/// Why a request cannot be handled here.
enum Reject {
    NotLeader(Option<String>),
    Refused(String),
}

impl From<Reject> for Response {
    fn from(r: Reject) -> Response {
        match r {
            Reject::NotLeader(leader) => Response::NotLeader { leader },
            Reject::Refused(reason) => Response::Refused { reason },
        }
    }
}

fn leader_addr(node: Option<BasicNode>) -> Option<String> {
    node.map(|n| n.addr)
}

impl Service {
    pub fn new(
        id: NodeId,
        raft: Raft,
        sm: StateMachine,
        cfg: PolicyConfig,
        peers: BTreeMap<NodeId, String>,
    ) -> Arc<Service> {
        Arc::new(Service {
            id,
            raft,
            sm,
            cfg,
            peers,
            origin: Instant::now(),
            leader: Mutex::new(LeaderState {
                term: None,
                liveness: Liveness::new(0),
                stuck_logged_ms: HashMap::new(),
            }),
        })
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request) -> Response {
        let result = match req {
            Request::GetMetadata => return self.metadata(),
            Request::BrokerHeartbeat(hb) => self.heartbeat(hb).await,
            Request::GetReplicaInfo { group } => self.replica_info(&group).await,
            Request::AlterSyncStateSet {
                group,
                master_id,
                master_epoch,
                sync_state_set_epoch,
                new_set,
            } => {
                self.alter(Command::AlterSyncStateSet {
                    group,
                    master_id,
                    master_epoch,
                    sync_state_set_epoch,
                    new_set,
                })
                .await
            }
            Request::ElectMaster { group, broker_id } => self.force_elect(&group, broker_id).await,
            // The server unwraps envelopes (checking them with access control on); one that
            // reaches here was nested in another.
            Request::Signed(_) => Err(Reject::Refused(
                "a signed request inside a signed request".into(),
            )),
        };
        match result {
            Ok(info) => Response::Replica(info),
            Err(r) => r.into(),
        }
    }

    fn metadata(&self) -> Response {
        let m = self.raft.metrics().borrow().clone();
        let leader_id = m.current_leader;
        Response::Metadata {
            controllers: self
                .peers
                .iter()
                .map(|(id, addr)| ControllerNode {
                    id: *id,
                    addr: addr.clone(),
                })
                .collect(),
            leader_id,
            leader_addr: leader_id.and_then(|l| self.peers.get(&l).cloned()),
            term: m.current_term,
            answered_by: self.id,
        }
    }

    /// Confirms this controller leads (with a quorum) and has applied all that is committed.
    async fn ensure_leader(&self) -> Result<(), Reject> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(Reject::NotLeader(leader_addr(f.leader_node)))
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
                tracing::warn!(%q, "leader without a quorum");
                Err(Reject::NotLeader(None))
            }
            Err(RaftError::Fatal(f)) => Err(Reject::Refused(format!("raft stopped: {f}"))),
        }
    }

    /// Commits a command; its refusal at apply time becomes `Reject::Refused`.
    async fn write(&self, cmd: Command) -> Result<(), Reject> {
        match self.raft.client_write(cmd).await {
            Ok(resp) => match resp.data {
                Outcome::Done => Ok(()),
                Outcome::Refused(reason) => Err(Reject::Refused(reason)),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(Reject::NotLeader(leader_addr(f.leader_node)))
            }
            Err(e) => Err(Reject::Refused(format!("not committed: {e}"))),
        }
    }

    /// The leader state, started afresh when this controller leads a new term.
    async fn leader_state(&self) -> tokio::sync::MutexGuard<'_, LeaderState> {
        let term = self.raft.metrics().borrow().current_term;
        let mut st = self.leader.lock().await;
        if st.term != Some(term) {
            let now = self.now_ms();
            tracing::info!(
                term,
                "leading a new term: every replica counts as heard now, liveness restarts"
            );
            st.term = Some(term);
            st.liveness = Liveness::new(now);
            st.stuck_logged_ms.clear();
        }
        st
    }

    fn group(&self, group: &str) -> Option<GroupRecord> {
        self.sm.read().registry.group(group).cloned()
    }

    async fn heartbeat(&self, hb: Heartbeat) -> Result<ReplicaInfo, Reject> {
        if hb.group.is_empty() || hb.addr.is_empty() {
            return Err(Reject::Refused(
                "a heartbeat needs a group (broker name) and an address".into(),
            ));
        }
        self.ensure_leader().await?;
        let mut st = self.leader_state().await;
        let now = self.now_ms();
        st.liveness.record(&hb, now);
        let replica = Replica {
            broker_id: hb.broker_id,
            addr: hb.addr.clone(),
            ha_addrs: hb.ha_addrs.clone(),
        };
        let known = self
            .group(&hb.group)
            .is_some_and(|g| g.replicas.get(&hb.broker_id) == Some(&replica));
        if !known {
            self.write(Command::Register {
                cluster: hb.cluster.clone(),
                group: hb.group.clone(),
                replica,
            })
            .await?;
        }
        if let Some(rec) = self.group(&hb.group) {
            self.act(&mut st, &rec, now).await;
        }
        let rec = self
            .group(&hb.group)
            .ok_or_else(|| Reject::Refused(format!("group {} vanished", hb.group)))?;
        Ok(self.info(&rec, &st.liveness, self.now_ms()))
    }

    async fn replica_info(&self, group: &str) -> Result<ReplicaInfo, Reject> {
        self.ensure_leader().await?;
        let st = self.leader_state().await;
        let rec = self
            .group(group)
            .ok_or_else(|| Reject::Refused(format!("unknown group {group}")))?;
        Ok(self.info(&rec, &st.liveness, self.now_ms()))
    }

    async fn alter(&self, cmd: Command) -> Result<ReplicaInfo, Reject> {
        self.ensure_leader().await?;
        let st = self.leader_state().await;
        let Command::AlterSyncStateSet {
            group,
            master_id,
            new_set,
            ..
        } = &cmd
        else {
            return Err(Reject::Refused("not an AlterSyncStateSet".into()));
        };
        let group = group.clone();
        let now = self.now_ms();
        let timeout = self.cfg.heartbeat_timeout_ms;
        // Only live brokers may join; the rest is checked when the command is applied.
        if let Some(dead) = new_set
            .iter()
            .find(|&&id| id != *master_id && !st.liveness.is_alive(&group, id, now, timeout))
        {
            let reason = format!("broker {dead} is not alive");
            tracing::info!(%group, %reason, "sync state set change refused");
            return Err(Reject::Refused(reason));
        }
        self.write(cmd).await?;
        let rec = self
            .group(&group)
            .ok_or_else(|| Reject::Refused(format!("unknown group {group}")))?;
        Ok(self.info(&rec, &st.liveness, self.now_ms()))
    }

    async fn force_elect(
        &self,
        group: &str,
        broker_id: Option<u64>,
    ) -> Result<ReplicaInfo, Reject> {
        self.ensure_leader().await?;
        let st = self.leader_state().await;
        let rec = self
            .group(group)
            .ok_or_else(|| Reject::Refused(format!("unknown group {group}")))?;
        let now = self.now_ms();
        match policy::choose_forced(&rec, &st.liveness, now, &self.cfg, broker_id) {
            Err(reason) => {
                tracing::info!(%group, ?broker_id, %reason, "admin election refused");
                return Err(Reject::Refused(reason));
            }
            Ok(None) => {}
            Ok(Some(id)) => {
                let reason = format!("admin request (asked for {broker_id:?})");
                tracing::info!(%group, new_master = id, %reason, "electing");
                self.write(Command::Elect {
                    group: group.to_owned(),
                    expected_master_epoch: rec.master_epoch,
                    new_master: Some(id),
                    reason,
                })
                .await?;
            }
        }
        let rec = self
            .group(group)
            .ok_or_else(|| Reject::Refused(format!("unknown group {group}")))?;
        Ok(self.info(&rec, &st.liveness, self.now_ms()))
    }

    /// Runs the policy on one group and proposes what it decides.
    async fn act(&self, st: &mut LeaderState, rec: &GroupRecord, now: u64) {
        let cmd = match policy::decide(rec, &st.liveness, now, &self.cfg) {
            Decision::Keep => return,
            Decision::Stuck { reason } => {
                let last = st.stuck_logged_ms.get(&rec.group).copied();
                if last.is_none_or(|t| now.saturating_sub(t) >= STUCK_LOG_INTERVAL_MS) {
                    tracing::warn!(group = %rec.group, %reason, "group has no master");
                    st.stuck_logged_ms.insert(rec.group.clone(), now);
                }
                return;
            }
            Decision::Elect { broker_id, reason } => {
                tracing::info!(group = %rec.group, new_master = broker_id, %reason, "electing");
                Command::Elect {
                    group: rec.group.clone(),
                    expected_master_epoch: rec.master_epoch,
                    new_master: Some(broker_id),
                    reason,
                }
            }
            Decision::Clear { reason } => {
                tracing::warn!(group = %rec.group, %reason, "clearing the master");
                Command::Elect {
                    group: rec.group.clone(),
                    expected_master_epoch: rec.master_epoch,
                    new_master: None,
                    reason,
                }
            }
        };
        match self.write(cmd).await {
            Ok(()) => {}
            Err(Reject::Refused(reason)) => {
                tracing::info!(group = %rec.group, %reason, "election not applied")
            }
            Err(Reject::NotLeader(_)) => {
                tracing::info!(group = %rec.group, "lost leadership before the election committed")
            }
        }
    }

    /// The election timer: on the leader, checks every group every `interval`.
    pub async fn run_election_checks(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let leads = {
                let m = self.raft.metrics();
                let m = m.borrow();
                m.state == ServerState::Leader && m.current_leader == Some(self.id)
            };
            if !leads {
                continue;
            }
            let mut st = self.leader_state().await;
            let groups: Vec<GroupRecord> =
                self.sm.read().registry.groups.values().cloned().collect();
            for rec in groups {
                let now = self.now_ms();
                self.act(&mut st, &rec, now).await;
            }
        }
    }

    /// The wire view of a group.
    fn info(&self, rec: &GroupRecord, live: &Liveness, now: u64) -> ReplicaInfo {
        replica_info(rec, live, now, &self.cfg)
    }
}

/// Builds the [`ReplicaInfo`] answer of a group.
pub fn replica_info(
    rec: &GroupRecord,
    live: &Liveness,
    now_ms: u64,
    cfg: &PolicyConfig,
) -> ReplicaInfo {
    let master = rec.master_id.and_then(|m| rec.replicas.get(&m));
    ReplicaInfo {
        group: rec.group.clone(),
        master_id: rec.master_id,
        master_epoch: rec.master_epoch,
        master_addr: master.map(|r| r.addr.clone()),
        master_ha_addrs: master.map(|r| r.ha_addrs.clone()).unwrap_or_default(),
        sync_state_set: rec.sync_state_set.iter().copied().collect(),
        sync_state_set_epoch: rec.sync_state_set_epoch,
        replicas: rec
            .replicas
            .values()
            .map(|r| {
                let seen = live.seen(&rec.group, r.broker_id);
                ReplicaState {
                    broker_id: r.broker_id,
                    addr: r.addr.clone(),
                    ha_addrs: r.ha_addrs.clone(),
                    alive: live.is_alive(&rec.group, r.broker_id, now_ms, cfg.heartbeat_timeout_ms),
                    last_epoch: seen.map_or(0, |s| s.epoch),
                    max_offsets: seen.map(|s| s.max_offsets.clone()).unwrap_or_default(),
                }
            })
            .collect(),
        lease_ms: cfg.heartbeat_timeout_ms,
    }
}
