//! openraft's log storage: the vote, the log entries and the committed log id, as records of
//! one append-only file (`raft-log` in the data dir, see [`crate::durable`]).
//!
//! Every change is one record, fsynced before the call returns (so `append` calls its
//! flush callback after the fsync, and `save_vote` returns only when the vote is durable,
//! as Raft requires). At open the records are replayed into memory; the controller's log is
//! small (brokers' heartbeats write nothing unless a replica joins or a master changes).
//! When purges have made most of the file dead, it is rewritten with only what is live.
//!
//! File I/O is blocking, inside async functions: the controller is off the data path, each
//! write is a few hundred bytes, and Raft serializes storage calls anyway.

// openraft's trait methods return its `StorageError` (large); the helpers return the same.
#![allow(clippy::result_large_err)]
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogId, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};

use crate::durable;
use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::Error;

const FILE_NAME: &str = "raft-log";

/// Rewrite the file when it is larger than this and at least half of its records are dead.
const REWRITE_MIN_BYTES: u64 = 4 * 1024 * 1024;

/// One change of the log file.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    Vote(Vote),
    Committed(Option<LogId>),
    Append(Vec<Entry>),
    /// Entries from this index on are deleted (a follower's conflicting suffix).
    Truncate {
        from_index: u64,
    },
    /// Entries up to and including this id are deleted (covered by a snapshot).
    Purge(LogId),
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    file: File,
    file_bytes: u64,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
}

/// The log store; clones share it (the clone handed to openraft as its log reader too).
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn storage_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, replaying it.
    pub fn open(dir: &Path) -> Result<LogStore, Error> {
        let path = dir.join(FILE_NAME);
        let (file, bodies, dropped) = durable::open_records(&path)?;
        if dropped > 0 {
            tracing::warn!(path = %path.display(), dropped_bytes = dropped, "raft log: dropped a torn last record");
        }
        let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut inner = Inner {
            path,
            file,
            file_bytes,
            vote: None,
            committed: None,
            last_purged: None,
            entries: BTreeMap::new(),
        };
        for body in bodies {
            let rec: Record = serde_json::from_slice(&body).map_err(|e| Error::Corrupt {
                what: "raft log record",
                path: inner.path.display().to_string(),
                detail: e.to_string(),
            })?;
            inner.replay(rec);
        }
        tracing::info!(
            entries = inner.entries.len(),
            vote = ?inner.vote,
            last_purged = ?inner.last_purged,
            "raft log opened"
        );
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves nothing half-done in memory that matters more
        // than stopping: the file is the truth and is reread at restart.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn replay(&mut self, rec: Record) {
        match rec {
            Record::Vote(v) => self.vote = Some(v),
            Record::Committed(c) => self.committed = c,
            Record::Append(es) => {
                for e in es {
                    self.entries.insert(e.get_log_id().index, e);
                }
            }
            Record::Truncate { from_index } => {
                self.entries.split_off(&from_index);
            }
            Record::Purge(id) => {
                self.entries = self.entries.split_off(&(id.index + 1));
                self.last_purged = Some(id);
            }
        }
    }

    /// Writes, fsyncs, then changes memory: memory never runs ahead of the disk.
    fn write(&mut self, rec: Record) -> Result<(), StorageError> {
        let body = serde_json::to_vec(&rec).map_err(storage_err)?;
        let bytes = durable::record(&body);
        durable::append(&mut self.file, &self.path, &bytes).map_err(storage_err)?;
        self.file_bytes += bytes.len() as u64;
        self.replay(rec);
        Ok(())
    }

    /// Rewrites the file with the live state only, once purges made it mostly dead.
    fn maybe_rewrite(&mut self) -> Result<(), StorageError> {
        if self.file_bytes < REWRITE_MIN_BYTES {
            return Ok(());
        }
        let mut live = Vec::new();
        let records = [
            self.vote.map(Record::Vote),
            Some(Record::Committed(self.committed)),
            self.last_purged.map(Record::Purge),
            Some(Record::Append(self.entries.values().cloned().collect())),
        ];
        for rec in records.into_iter().flatten() {
            let body = serde_json::to_vec(&rec).map_err(storage_err)?;
            live.extend_from_slice(&durable::record(&body));
        }
        if (live.len() as u64) * 2 > self.file_bytes {
            return Ok(());
        }
        durable::write_atomic(&self.path, &live).map_err(storage_err)?;
        let (file, _, _) = durable::open_records(&self.path).map_err(storage_err)?;
        self.file = file;
        self.file_bytes = live.len() as u64;
        tracing::info!(bytes = self.file_bytes, "raft log rewritten after purges");
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let inner = self.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.lock().write(Record::Vote(*vote))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.lock().write(Record::Committed(committed))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let result = self.lock().write(Record::Append(entries));
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.lock().write(Record::Truncate {
            from_index: log_id.index,
        })
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.lock();
        inner.write(Record::Purge(log_id))?;
        inner.maybe_rewrite()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    #[tokio::test]
    async fn vote_entries_truncate_and_purge_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.save_vote(&Vote::new(3, 2)).await.unwrap();
            s.lock()
                .write(Record::Append((1..=5).map(|i| entry(1, i)).collect()))
                .unwrap();
            s.truncate(LogId::new(CommittedLeaderId::new(1, 1), 4))
                .await
                .unwrap();
            s.purge(LogId::new(CommittedLeaderId::new(1, 1), 1))
                .await
                .unwrap();
        }
        let mut s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
        let got: Vec<u64> = s
            .try_get_log_entries(0..100)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect();
        assert_eq!(got, vec![2, 3]);
        let state = s.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(3));
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(1));
    }
}
