//! The election policy (RocketMQ 5's DefaultElectPolicy plus the lease rule of ha-notes B6).
//!
//! Pure: it reads a [`GroupRecord`], the leader's [`Liveness`] table and a time in
//! milliseconds from any monotonic origin, and says what to do. The caller proposes the
//! decision through Raft. Tests drive it with a fake clock.
//!
//! Liveness is the leader's alone and is not replicated: a new leader starts a fresh table
//! and treats every known replica as heard at its own start, so nobody is declared dead
//! before a whole timeout has passed under the new leader. That keeps the fencing rule: a
//! master's lease (`lease_ms` after it *sent* its last answered heartbeat) always ends
//! before any controller may elect (`heartbeat_timeout_ms` after it *received* the last one).

use std::collections::HashMap;

use controller_proto::Heartbeat;

use crate::registry::GroupRecord;

/// The policy's settings.
#[derive(Debug, Clone, Copy)]
pub struct PolicyConfig {
    /// A replica not heard for this long is dead.
    pub heartbeat_timeout_ms: u64,
    /// Let a replica outside the SyncStateSet become master when no in-sync one is alive
    /// (may lose acknowledged messages).
    pub unclean: bool,
}

/// What the leader last heard from one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub last_heartbeat_ms: u64,
    pub epoch: u32,
    pub max_offsets: Vec<u64>,
    pub healthy: bool,
    pub prefer_master: bool,
}

/// The leader's liveness table.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// When this controller became leader: the time an unheard replica counts as heard.
    leader_since_ms: u64,
    seen: HashMap<(String, u64), Seen>,
    /// When this leader first heard of each group (for the bootstrap rule).
    group_first_heard_ms: HashMap<String, u64>,
}

impl Liveness {
    pub fn new(leader_since_ms: u64) -> Self {
        Self {
            leader_since_ms,
            seen: HashMap::new(),
            group_first_heard_ms: HashMap::new(),
        }
    }

    /// Records a heartbeat received at `now_ms`.
    pub fn record(&mut self, hb: &Heartbeat, now_ms: u64) {
        self.group_first_heard_ms
            .entry(hb.group.clone())
            .or_insert(now_ms);
        self.seen.insert(
            (hb.group.clone(), hb.broker_id),
            Seen {
                last_heartbeat_ms: now_ms,
                epoch: hb.epoch,
                max_offsets: hb.max_offsets.clone(),
                healthy: hb.healthy,
                prefer_master: hb.prefer_master,
            },
        );
    }

    pub fn seen(&self, group: &str, broker_id: u64) -> Option<&Seen> {
        self.seen.get(&(group.to_owned(), broker_id))
    }

    /// When the broker was last heard, or the leader's start if not since then.
    fn last_heard_ms(&self, group: &str, broker_id: u64) -> u64 {
        self.seen(group, broker_id)
            .map_or(self.leader_since_ms, |s| s.last_heartbeat_ms)
    }

    /// Heard within the timeout (an unheard replica is alive until one timeout after the
    /// leader's start).
    pub fn is_alive(&self, group: &str, broker_id: u64, now_ms: u64, timeout_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_heard_ms(group, broker_id)) < timeout_ms
    }

    fn is_healthy(&self, group: &str, broker_id: u64) -> bool {
        self.seen(group, broker_id).is_none_or(|s| s.healthy)
    }

    fn group_first_heard_ms(&self, group: &str) -> u64 {
        self.group_first_heard_ms
            .get(group)
            .copied()
            .unwrap_or(self.leader_since_ms)
            .max(self.leader_since_ms)
    }
}

/// What the leader should do for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to change.
    Keep,
    /// Make `broker_id` master.
    Elect { broker_id: u64, reason: String },
    /// Record that the group lost its master and nobody may take over.
    Clear { reason: String },
    /// The group has no master and cannot get one now; log `reason` (rate-limited).
    Stuck { reason: String },
}

/// Decides, on the leader's timer or after a heartbeat, whether `rec` needs an election.
pub fn decide(rec: &GroupRecord, live: &Liveness, now_ms: u64, cfg: &PolicyConfig) -> Decision {
    let alive = |id: u64| live.is_alive(&rec.group, id, now_ms, cfg.heartbeat_timeout_ms);
    let usable = |id: u64| alive(id) && live.is_healthy(&rec.group, id);
    match rec.master_id {
        Some(m) => {
            let why = if !alive(m) {
                format!(
                    "master {m} not heard for {} ms (timeout {} ms)",
                    now_ms.saturating_sub(live.last_heard_ms(&rec.group, m)),
                    cfg.heartbeat_timeout_ms
                )
            } else if !live.is_healthy(&rec.group, m) {
                format!("master {m} reported itself unhealthy")
            } else {
                return Decision::Keep;
            };
            let in_sync = rec.sync_state_set.iter().copied().filter(|&id| id != m);
            if let Some(id) = best(rec, live, in_sync.filter(|&id| usable(id))) {
                return Decision::Elect {
                    broker_id: id,
                    reason: format!("{why}; broker {id} is the best live in-sync replica"),
                };
            }
            if cfg.unclean {
                let others = rec.replicas.keys().copied().filter(|&id| id != m);
                if let Some(id) = best(rec, live, others.filter(|&id| usable(id))) {
                    return Decision::Elect {
                        broker_id: id,
                        reason: format!("{why}; no live in-sync replica, unclean election of {id}"),
                    };
                }
            }
            Decision::Clear {
                reason: format!("{why}; no live in-sync replica can take over"),
            }
        }
        None if rec.master_epoch == 0 => {
            // A new group: the configured master (broker_id 0) first; anyone after a timeout.
            let preferred = rec.replicas.keys().copied().find(|&id| {
                usable(id) && live.seen(&rec.group, id).is_some_and(|s| s.prefer_master)
            });
            if let Some(id) = preferred {
                return Decision::Elect {
                    broker_id: id,
                    reason: format!("new group; broker {id} is configured as master"),
                };
            }
            let waited = now_ms.saturating_sub(live.group_first_heard_ms(&rec.group));
            if waited < cfg.heartbeat_timeout_ms {
                return Decision::Keep;
            }
            match best(
                rec,
                live,
                rec.replicas.keys().copied().filter(|&id| usable(id)),
            ) {
                Some(id) => Decision::Elect {
                    broker_id: id,
                    reason: format!(
                        "new group; no configured master heard for {waited} ms, broker {id} \
                         is the best live replica"
                    ),
                },
                None => Decision::Stuck {
                    reason: "new group without a live replica".into(),
                },
            }
        }
        None => {
            let in_sync = rec.sync_state_set.iter().copied();
            if let Some(id) = best(rec, live, in_sync.filter(|&id| usable(id))) {
                return Decision::Elect {
                    broker_id: id,
                    reason: format!("no master; broker {id} is the best live in-sync replica"),
                };
            }
            if cfg.unclean {
                let all = rec.replicas.keys().copied();
                if let Some(id) = best(rec, live, all.filter(|&id| usable(id))) {
                    return Decision::Elect {
                        broker_id: id,
                        reason: format!(
                            "no master and no live in-sync replica; unclean election of {id}"
                        ),
                    };
                }
            }
            Decision::Stuck {
                reason: format!(
                    "no master and no live member of the sync state set {:?} (unclean election {})",
                    rec.sync_state_set,
                    if cfg.unclean { "on" } else { "off" }
                ),
            }
        }
    }
}

/// The admin's `ElectMaster`: the broker to make master now, or why there is none.
/// `Ok(None)` means the requested broker already is the master.
pub fn choose_forced(
    rec: &GroupRecord,
    live: &Liveness,
    now_ms: u64,
    cfg: &PolicyConfig,
    requested: Option<u64>,
) -> Result<Option<u64>, String> {
    let usable = |id: u64| {
        live.is_alive(&rec.group, id, now_ms, cfg.heartbeat_timeout_ms)
            && live.is_healthy(&rec.group, id)
    };
    let eligible = |id: u64| rec.sync_state_set.contains(&id) || cfg.unclean;
    match requested {
        Some(id) if rec.master_id == Some(id) && usable(id) => Ok(None),
        Some(id) if !rec.replicas.contains_key(&id) => {
            Err(format!("broker {id} is not a replica of {}", rec.group))
        }
        Some(id) if !eligible(id) => Err(format!(
            "broker {id} is not in the sync state set {:?}",
            rec.sync_state_set
        )),
        Some(id) if !usable(id) => Err(format!("broker {id} is not alive and healthy")),
        Some(id) => Ok(Some(id)),
        None => {
            let others = rec
                .replicas
                .keys()
                .copied()
                .filter(|&id| Some(id) != rec.master_id && eligible(id) && usable(id));
            best(rec, live, others)
                .map(Some)
                .ok_or_else(|| "no live in-sync replica other than the master".to_owned())
        }
    }
}

/// Highest reported epoch, then highest sum of max offsets, then lowest broker id.
fn best(rec: &GroupRecord, live: &Liveness, ids: impl Iterator<Item = u64>) -> Option<u64> {
    ids.max_by_key(|&id| {
        let (epoch, sum) = live.seen(&rec.group, id).map_or((0, 0), |s| {
            (
                s.epoch,
                s.max_offsets
                    .iter()
                    .copied()
                    .fold(0u64, u64::saturating_add),
            )
        });
        (epoch, sum, std::cmp::Reverse(id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::{registry_with_master, replica};
    use crate::registry::{Command, Registry};

    const TIMEOUT: u64 = 3000;
    const CFG: PolicyConfig = PolicyConfig {
        heartbeat_timeout_ms: TIMEOUT,
        unclean: false,
    };

    fn hb(id: u64, epoch: u32, offsets: &[u64]) -> Heartbeat {
        Heartbeat {
            cluster: "c".into(),
            group: "g".into(),
            broker_id: id,
            addr: replica(id).addr,
            ha_addrs: replica(id).ha_addrs,
            epoch,
            max_offsets: offsets.to_vec(),
            healthy: true,
            prefer_master: id == 0,
        }
    }

    /// 0 master, {0, 1} in sync, 2 a replica outside the set.
    fn three_replicas() -> Registry {
        let mut r = registry_with_master();
        r.apply(&Command::Register {
            cluster: "c".into(),
            group: "g".into(),
            replica: replica(2),
        });
        r.apply(&Command::AlterSyncStateSet {
            group: "g".into(),
            master_id: 0,
            master_epoch: 1,
            sync_state_set_epoch: 1,
            new_set: vec![0, 1],
        });
        r
    }

    #[test]
    fn master_is_kept_until_a_whole_timeout_without_its_heartbeat() {
        let r = three_replicas();
        let g = r.group("g").unwrap();
        let mut live = Liveness::new(0);
        live.record(&hb(0, 1, &[100]), 1000);
        // Slaves keep heartbeating; the master is silent after t=1000.
        for t in (1000..=4000).step_by(500) {
            live.record(&hb(1, 1, &[100]), t);
            live.record(&hb(2, 1, &[100]), t);
            let d = decide(g, &live, t, &CFG);
            if t < 1000 + TIMEOUT {
                assert_eq!(d, Decision::Keep, "at {t}");
            } else {
                assert!(
                    matches!(d, Decision::Elect { broker_id: 1, .. }),
                    "at {t}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn unhealthy_master_is_replaced_at_once() {
        let r = three_replicas();
        let mut live = Liveness::new(0);
        let mut sick = hb(0, 1, &[100]);
        sick.healthy = false;
        live.record(&sick, 10);
        live.record(&hb(1, 1, &[90]), 10);
        assert!(matches!(
            decide(r.group("g").unwrap(), &live, 20, &CFG),
            Decision::Elect { broker_id: 1, .. }
        ));
    }

    #[test]
    fn a_replica_outside_the_set_is_never_elected_when_unclean_is_off() {
        let r = three_replicas();
        let g = r.group("g").unwrap();
        let mut live = Liveness::new(0);
        // Only 2 (not in sync, and far ahead) keeps heartbeating.
        live.record(&hb(2, 9, &[1_000_000]), 5000);
        let d = decide(g, &live, 5000, &CFG);
        assert!(matches!(d, Decision::Clear { .. }), "{d:?}");
        let unclean = PolicyConfig {
            unclean: true,
            ..CFG
        };
        assert!(matches!(
            decide(g, &live, 5000, &unclean),
            Decision::Elect { broker_id: 2, .. }
        ));
        // Once cleared, the group stays masterless while only 2 is alive.
        let mut r = r.clone();
        r.apply(&Command::Elect {
            group: "g".into(),
            expected_master_epoch: 1,
            new_master: None,
            reason: "test".into(),
        });
        let d = decide(r.group("g").unwrap(), &live, 6000, &CFG);
        assert!(matches!(d, Decision::Stuck { .. }), "{d:?}");
        // An in-sync replica that comes back is elected.
        live.record(&hb(1, 1, &[5]), 6500);
        assert!(matches!(
            decide(r.group("g").unwrap(), &live, 6600, &CFG),
            Decision::Elect { broker_id: 1, .. }
        ));
    }

    #[test]
    fn candidates_rank_by_epoch_then_offsets_then_lowest_id() {
        let mut r = registry_with_master();
        for id in [2, 3] {
            r.apply(&Command::Register {
                cluster: "c".into(),
                group: "g".into(),
                replica: replica(id),
            });
        }
        r.apply(&Command::AlterSyncStateSet {
            group: "g".into(),
            master_id: 0,
            master_epoch: 1,
            sync_state_set_epoch: 1,
            new_set: vec![0, 1, 2, 3],
        });
        let g = r.group("g").unwrap();
        let elected = |beats: &[Heartbeat]| {
            let mut live = Liveness::new(0);
            for b in beats {
                live.record(b, 4000);
            }
            match decide(g, &live, 4000, &CFG) {
                Decision::Elect { broker_id, .. } => broker_id,
                d => panic!("{d:?}"),
            }
        };
        assert_eq!(
            elected(&[hb(1, 1, &[9]), hb(2, 2, &[1]), hb(3, 1, &[50])]),
            2
        );
        assert_eq!(
            elected(&[hb(1, 1, &[9]), hb(2, 1, &[5, 5]), hb(3, 1, &[50])]),
            3
        );
        assert_eq!(
            elected(&[hb(1, 1, &[9]), hb(2, 1, &[4, 5]), hb(3, 1, &[9])]),
            1
        );
    }

    #[test]
    fn a_new_leader_counts_a_whole_timeout_from_its_start() {
        let r = three_replicas();
        let g = r.group("g").unwrap();
        // The leader started at 10_000 and has heard nobody yet.
        let live = Liveness::new(10_000);
        assert_eq!(decide(g, &live, 12_999, &CFG), Decision::Keep);
        assert!(matches!(
            decide(g, &live, 13_000, &CFG),
            Decision::Clear { .. }
        ));
    }

    #[test]
    fn a_new_group_takes_the_configured_master_or_anyone_after_a_timeout() {
        let mut r = Registry::default();
        for id in [1, 2] {
            r.apply(&Command::Register {
                cluster: "c".into(),
                group: "g".into(),
                replica: replica(id),
            });
        }
        let g = r.group("g").unwrap().clone();
        let mut live = Liveness::new(0);
        live.record(&hb(2, 0, &[7]), 100);
        live.record(&hb(1, 0, &[3]), 100);
        assert_eq!(decide(&g, &live, 200, &CFG), Decision::Keep);
        // Both keep heartbeating; none is configured as master.
        live.record(&hb(2, 0, &[7]), 100 + TIMEOUT - 50);
        live.record(&hb(1, 0, &[3]), 100 + TIMEOUT - 50);
        assert_eq!(decide(&g, &live, 100 + TIMEOUT - 1, &CFG), Decision::Keep);
        assert!(matches!(
            decide(&g, &live, 100 + TIMEOUT, &CFG),
            Decision::Elect { broker_id: 2, .. }
        ));
        r.apply(&Command::Register {
            cluster: "c".into(),
            group: "g".into(),
            replica: replica(0),
        });
        live.record(&hb(0, 0, &[0]), 150);
        assert!(matches!(
            decide(r.group("g").unwrap(), &live, 200, &CFG),
            Decision::Elect { broker_id: 0, .. }
        ));
    }

    #[test]
    fn forced_election_needs_a_live_in_sync_broker() {
        let r = three_replicas();
        let g = r.group("g").unwrap();
        let mut live = Liveness::new(0);
        for id in [0, 1, 2] {
            live.record(&hb(id, 1, &[1]), 100);
        }
        assert_eq!(choose_forced(g, &live, 200, &CFG, None), Ok(Some(1)));
        assert_eq!(choose_forced(g, &live, 200, &CFG, Some(1)), Ok(Some(1)));
        assert_eq!(choose_forced(g, &live, 200, &CFG, Some(0)), Ok(None));
        assert!(choose_forced(g, &live, 200, &CFG, Some(2))
            .unwrap_err()
            .contains("not in the sync state set"));
        assert!(choose_forced(g, &live, 200, &CFG, Some(9)).is_err());
        // 1 goes silent: no candidate left.
        live.record(&hb(0, 1, &[1]), 5000);
        assert!(choose_forced(g, &live, 5000, &CFG, None).is_err());
        assert!(choose_forced(g, &live, 5000, &CFG, Some(1))
            .unwrap_err()
            .contains("not alive"));
    }
}
