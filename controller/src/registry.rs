//! The replicated state: per broker group, its replicas, master, epochs and SyncStateSet.
//!
//! Every change is a [`Command`] committed through Raft and applied here, on every
//! controller, in log order. The checks that depend only on this state (is the sender the
//! master, are the epochs current) are made *at apply time*, so of two commands decided on
//! the same state only the first can succeed: a stale one becomes [`Outcome::Refused`].
//! Checks that need liveness (is a candidate alive) are the leader's, in [`crate::policy`],
//! before it proposes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// One replica (broker) of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    pub broker_id: u64,
    pub addr: String,
    pub ha_addrs: Vec<String>,
}

/// One broker group's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub cluster: String,
    pub group: String,
    pub replicas: BTreeMap<u64, Replica>,
    pub master_id: Option<u64>,
    /// Raised at every election; 0 until the group's first master.
    pub master_epoch: u32,
    pub sync_state_set: BTreeSet<u64>,
    pub sync_state_set_epoch: u32,
}

/// All groups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    pub groups: BTreeMap<String, GroupRecord>,
}

/// A change, as replicated in the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Adds a replica to its group (creating the group), or updates its addresses.
    Register {
        cluster: String,
        group: String,
        replica: Replica,
    },
    /// The master's proposal, with the epochs it was made against.
    AlterSyncStateSet {
        group: String,
        master_id: u64,
        master_epoch: u32,
        sync_state_set_epoch: u32,
        new_set: Vec<u64>,
    },
    /// The leader's election decision, made against `expected_master_epoch`. `new_master:
    /// None` records that the group has lost its master and no replica may take over.
    Elect {
        group: String,
        expected_master_epoch: u32,
        new_master: Option<u64>,
        reason: String,
    },
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Applied (or already true: re-registering an unchanged replica).
    Done,
    /// Not applied, and why.
    Refused(String),
}

impl Registry {
    pub fn group(&self, group: &str) -> Option<&GroupRecord> {
        self.groups.get(group)
    }

    /// Applies one committed command. Deterministic: every controller gets the same result.
    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        match cmd {
            Command::Register {
                cluster,
                group,
                replica,
            } => {
                let rec = self
                    .groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupRecord {
                        cluster: cluster.clone(),
                        group: group.clone(),
                        ..GroupRecord::default()
                    });
                rec.replicas.insert(replica.broker_id, replica.clone());
                Outcome::Done
            }
            Command::AlterSyncStateSet {
                group,
                master_id,
                master_epoch,
                sync_state_set_epoch,
                new_set,
            } => match self.groups.get_mut(group) {
                None => Outcome::Refused(format!("unknown group {group}")),
                Some(rec) => match check_alter(
                    rec,
                    *master_id,
                    *master_epoch,
                    *sync_state_set_epoch,
                    new_set,
                ) {
                    Err(reason) => Outcome::Refused(reason),
                    Ok(set) => {
                        rec.sync_state_set = set;
                        rec.sync_state_set_epoch += 1;
                        Outcome::Done
                    }
                },
            },
            Command::Elect {
                group,
                expected_master_epoch,
                new_master,
                reason: _,
            } => {
                let Some(rec) = self.groups.get_mut(group) else {
                    return Outcome::Refused(format!("unknown group {group}"));
                };
                if rec.master_epoch != *expected_master_epoch {
                    return Outcome::Refused(format!(
                        "election decided at master epoch {expected_master_epoch}, but the \
                         group is at {} now",
                        rec.master_epoch
                    ));
                }
                match new_master {
                    None => rec.master_id = None,
                    Some(id) => {
                        if !rec.replicas.contains_key(id) {
                            return Outcome::Refused(format!("broker {id} is not a replica"));
                        }
                        rec.master_id = Some(*id);
                        rec.master_epoch += 1;
                        rec.sync_state_set = BTreeSet::from([*id]);
                        rec.sync_state_set_epoch += 1;
                    }
                }
                Outcome::Done
            }
        }
    }
}

/// RocketMQ's AlterSyncStateSet rules: only the current master, only against the current
/// epochs, and the new set keeps the master and names only known replicas.
pub fn check_alter(
    rec: &GroupRecord,
    master_id: u64,
    master_epoch: u32,
    sync_state_set_epoch: u32,
    new_set: &[u64],
) -> Result<BTreeSet<u64>, String> {
    if rec.master_id != Some(master_id) {
        return Err(match rec.master_id {
            Some(m) => format!("broker {master_id} is not the master (broker {m} is)"),
            None => format!("broker {master_id} is not the master (the group has none)"),
        });
    }
    if master_epoch != rec.master_epoch {
        return Err(format!(
            "stale master epoch {master_epoch} (current {})",
            rec.master_epoch
        ));
    }
    if sync_state_set_epoch != rec.sync_state_set_epoch {
        return Err(format!(
            "stale sync state set epoch {sync_state_set_epoch} (current {})",
            rec.sync_state_set_epoch
        ));
    }
    let set: BTreeSet<u64> = new_set.iter().copied().collect();
    if !set.contains(&master_id) {
        return Err(format!(
            "the new sync state set {set:?} does not contain the master {master_id}"
        ));
    }
    if let Some(unknown) = set.iter().find(|id| !rec.replicas.contains_key(id)) {
        return Err(format!("broker {unknown} is not a replica of the group"));
    }
    Ok(set)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn replica(id: u64) -> Replica {
        Replica {
            broker_id: id,
            addr: format!("127.0.0.1:{}", 10911 + id),
            ha_addrs: vec![format!("127.0.0.1:{}", 20911 + id)],
        }
    }

    /// A group with replicas 0 and 1, 0 master at epoch 1, set {0} at epoch 1.
    pub fn registry_with_master() -> Registry {
        let mut r = Registry::default();
        for id in [0, 1] {
            assert_eq!(
                r.apply(&Command::Register {
                    cluster: "c".into(),
                    group: "g".into(),
                    replica: replica(id),
                }),
                Outcome::Done
            );
        }
        assert_eq!(
            r.apply(&Command::Elect {
                group: "g".into(),
                expected_master_epoch: 0,
                new_master: Some(0),
                reason: "test".into(),
            }),
            Outcome::Done
        );
        r
    }

    fn alter(me: u64, epoch: u32, set_epoch: u32, set: &[u64]) -> Command {
        Command::AlterSyncStateSet {
            group: "g".into(),
            master_id: me,
            master_epoch: epoch,
            sync_state_set_epoch: set_epoch,
            new_set: set.to_vec(),
        }
    }

    #[test]
    fn first_election_sets_epoch_one_and_a_set_of_the_master() {
        let r = registry_with_master();
        let g = r.group("g").unwrap();
        assert_eq!(g.master_id, Some(0));
        assert_eq!(g.master_epoch, 1);
        assert_eq!(g.sync_state_set, BTreeSet::from([0]));
        assert_eq!(g.sync_state_set_epoch, 1);
    }

    #[test]
    fn master_expands_the_set_with_current_epochs() {
        let mut r = registry_with_master();
        assert_eq!(r.apply(&alter(0, 1, 1, &[0, 1])), Outcome::Done);
        let g = r.group("g").unwrap();
        assert_eq!(g.sync_state_set, BTreeSet::from([0, 1]));
        assert_eq!(g.sync_state_set_epoch, 2);
    }

    #[test]
    fn alter_is_refused_from_a_slave_with_stale_epochs_or_without_the_master() {
        let mut r = registry_with_master();
        let refused = |o: Outcome, needle: &str| match o {
            Outcome::Refused(reason) => assert!(reason.contains(needle), "{reason}"),
            Outcome::Done => panic!("accepted; expected refusal with {needle}"),
        };
        refused(r.apply(&alter(1, 1, 1, &[0, 1])), "not the master");
        refused(r.apply(&alter(0, 0, 1, &[0, 1])), "stale master epoch");
        refused(
            r.apply(&alter(0, 1, 0, &[0, 1])),
            "stale sync state set epoch",
        );
        refused(
            r.apply(&alter(0, 1, 1, &[1])),
            "does not contain the master",
        );
        refused(r.apply(&alter(0, 1, 1, &[0, 7])), "not a replica");
        // Nothing of that changed the group.
        assert_eq!(r.group("g").unwrap().sync_state_set_epoch, 1);
        // The same proposal twice: the second is stale.
        assert_eq!(r.apply(&alter(0, 1, 1, &[0, 1])), Outcome::Done);
        refused(
            r.apply(&alter(0, 1, 1, &[0, 1])),
            "stale sync state set epoch",
        );
    }

    #[test]
    fn a_stale_election_is_refused_and_a_new_one_raises_both_epochs() {
        let mut r = registry_with_master();
        r.apply(&alter(0, 1, 1, &[0, 1]));
        let elect = |epoch| Command::Elect {
            group: "g".into(),
            expected_master_epoch: epoch,
            new_master: Some(1),
            reason: "test".into(),
        };
        assert_eq!(r.apply(&elect(1)), Outcome::Done);
        assert!(matches!(r.apply(&elect(1)), Outcome::Refused(_)));
        let g = r.group("g").unwrap();
        assert_eq!(
            (g.master_id, g.master_epoch, g.sync_state_set_epoch),
            (Some(1), 2, 3)
        );
        assert_eq!(g.sync_state_set, BTreeSet::from([1]));
    }
}
