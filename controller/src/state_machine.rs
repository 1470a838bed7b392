//! openraft's state machine: the [`Registry`] plus the last applied log id and membership.
//!
//! The whole state is a few KiB, so it is persisted whole after every applied batch
//! (`state.json`, replaced atomically) instead of being rebuilt from the log at start. A
//! snapshot is the same JSON; the last one built or installed is kept in `snapshot.json` so
//! a restarted controller can still send it to a follower that is behind a purge.

// openraft's trait methods return its `StorageError` (large); the helpers return the same.
#![allow(clippy::result_large_err)]
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, Snapshot, StorageIOError};
use serde::{Deserialize, Serialize};

use crate::durable;
use crate::raft_types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use crate::registry::{Command, Outcome, Registry};
use crate::Error;

const STATE_FILE: &str = "state.json";
const SNAPSHOT_FILE: &str = "snapshot.json";

/// What the state machine holds, and what a snapshot contains.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub registry: Registry,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The state machine; clones share it (the service reads the registry through a clone).
#[derive(Debug, Clone)]
pub struct StateMachine {
    dir: PathBuf,
    applied: Arc<RwLock<Applied>>,
    snapshot: Arc<RwLock<Option<StoredSnapshot>>>,
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, &e).into()
}

fn corrupt(what: &'static str, path: &Path, e: serde_json::Error) -> Error {
    Error::Corrupt {
        what,
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

impl StateMachine {
    pub fn open(dir: &Path) -> Result<StateMachine, Error> {
        let state_path = dir.join(STATE_FILE);
        let applied = match durable::read_file(&state_path)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| corrupt("state", &state_path, e))?,
            None => Applied::default(),
        };
        let snap_path = dir.join(SNAPSHOT_FILE);
        let snapshot = match durable::read_file(&snap_path)? {
            Some(b) => {
                Some(serde_json::from_slice(&b).map_err(|e| corrupt("snapshot", &snap_path, e))?)
            }
            None => None,
        };
        tracing::info!(last_applied = ?applied.last_applied, groups = applied.registry.groups.len(), "state machine opened");
        Ok(StateMachine {
            dir: dir.to_owned(),
            applied: Arc::new(RwLock::new(applied)),
            snapshot: Arc::new(RwLock::new(snapshot)),
        })
    }

    /// The applied state, for reads (held briefly: never across an await).
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Applied> {
        self.applied.write().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, applied: &Applied) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(applied).map_err(sm_err)?;
        durable::write_atomic(&self.dir.join(STATE_FILE), &bytes).map_err(sm_err)
    }

    fn keep_snapshot(&self, snap: StoredSnapshot) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&snap).map_err(snap_err)?;
        durable::write_atomic(&self.dir.join(SNAPSHOT_FILE), &bytes).map_err(snap_err)?;
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Some(snap);
        Ok(())
    }
}

/// Logs what a command did, on every controller: elections and set changes say why.
fn log_applied(cmd: &Command, outcome: &Outcome, registry: &Registry) {
    match (cmd, outcome) {
        (_, Outcome::Refused(reason)) => {
            tracing::info!(?cmd, %reason, "command refused");
        }
        (
            Command::Elect {
                group,
                new_master,
                reason,
                ..
            },
            Outcome::Done,
        ) => {
            let epoch = registry.group(group).map(|g| g.master_epoch);
            match new_master {
                Some(id) => {
                    tracing::info!(%group, master = id, master_epoch = ?epoch, %reason, "master elected")
                }
                None => tracing::warn!(%group, %reason, "master cleared: the group has no master"),
            }
        }
        (
            Command::AlterSyncStateSet {
                group,
                master_id,
                new_set,
                ..
            },
            Outcome::Done,
        ) => {
            let epoch = registry.group(group).map(|g| g.sync_state_set_epoch);
            tracing::info!(%group, master = master_id, ?new_set, sync_state_set_epoch = ?epoch, "sync state set changed at the master's request");
        }
        (Command::Register { group, replica, .. }, Outcome::Done) => {
            tracing::info!(%group, broker = replica.broker_id, addr = %replica.addr, "replica registered");
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (data, meta) = {
            let applied = self.read();
            let data = serde_json::to_vec(&*applied).map_err(snap_err)?;
            let id = applied.last_applied.map_or("none".to_owned(), |l| {
                format!("{}-{}", l.leader_id, l.index)
            });
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
                snapshot_id: id,
            };
            (data, meta)
        };
        self.keep_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let a = self.read();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut outcomes = Vec::new();
        let mut applied = self.write();
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::Done,
                EntryPayload::Normal(cmd) => {
                    let o = applied.registry.apply(&cmd);
                    log_applied(&cmd, &o, &applied.registry);
                    o
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    Outcome::Done
                }
            };
            outcomes.push(outcome);
        }
        self.persist(&applied)?;
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let new: Applied = serde_json::from_slice(&data).map_err(snap_err)?;
        tracing::info!(last_log_id = ?meta.last_log_id, "installing a snapshot from the leader");
        {
            let mut applied = self.write();
            *applied = new;
            // The meta is authoritative for what the snapshot covers.
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            self.persist(&applied)?;
        }
        self.keep_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data,
        })
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let snap = self.snapshot.read().unwrap_or_else(|p| p.into_inner());
        Ok(snap.as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}
