//! Consumer groups on the broker: membership (core 0) and, per shard, each group's committed
//! offsets and queue leases (on the core that owns the queue).
//!
//! * Membership: members heartbeat; a member silent for `consumer_timeout_ms` is dropped.
//!   Every change bumps the group's version and wakes the `WaitGroupChange` long polls, so
//!   members learn of a change at once. Versions start at the broker's start time in ms, so
//!   a version never repeats across restarts.
//! * Offsets: one table per shard, beside that shard's CommitLog, so a queue's offsets live
//!   where the queue lives and a commit is a local write. The table is written to
//!   `<shard dir>/consumer_offsets.json` (temporary file, fsync, rename, fsync of the
//!   directory) every `offset_flush_interval_ms` when it changed, and at shutdown: a kill -9
//!   loses at most the commits of the last interval.
//! * Leases: a member holds a queue while it consumes it and gives it back together with its
//!   last commit, so the next owner starts exactly where the last one stopped. Leases live in
//!   memory only (a restarted broker starts with none; holders renew within a third of their
//!   lease).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use protocol::GroupQueue;
use shard::signal::Signal;

use shard::Clock;

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("cannot write consumer offsets to {path}: {message}")]
    Persist { path: PathBuf, message: String },
    #[error("consumer offsets file {path} is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
}

pub use crate::config::LEASE_MS_MAX;

pub const OFFSETS_FILE: &str = "consumer_offsets.json";
/// The epoch of a commit from a client that knows none (a RocketMQ client): never taken as
/// stale, and never stored (the stored epoch stays what it was, 0 for a first commit).
pub const EPOCH_ANY: u64 = u64::MAX;

/// A committed offset: the next queue offset the group will consume, and the number of
/// resets it has seen (a commit from before a reset must not undo the reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredOffset {
    pub offset: u64,
    pub epoch: u64,
    /// When the offset last moved forward (ms since the epoch; 0 = not since start-up).
    pub last_commit_ms: i64,
    /// Messages per second over the last two commits that moved the offset, times 1000.
    pub consume_tps_milli: u64,
    /// Queue offsets of the queue that pulls stepped over since start-up (damaged or missing
    /// records, never delivered). Not kept in the table: the queue's owner core fills it in
    /// from its shard when it answers a query.
    pub skipped_records: u64,
}

#[derive(Debug, Clone)]
struct Lease {
    client_id: String,
    until: Instant,
}

/// One shard's group offsets and leases.
#[derive(Debug)]
pub struct OffsetTable {
    path: PathBuf,
    offsets: BTreeMap<GroupQueue, StoredOffset>,
    leases: HashMap<GroupQueue, Lease>,
    /// Changes not yet written to disk.
    dirty: bool,
    /// Bumped at every change of an offset (a master streams the table to its slaves
    /// when it moved).
    version: u64,
    /// What leases are timed by.
    clock: Clock,
}

/// A row of the offsets file: group, topic, queue, offset, epoch.
type Row = (String, String, u32, u64, u64);

impl OffsetTable {
    /// Loads the table of the shard in `dir`; a missing file is an empty table. A torn
    /// temporary file is ignored (the rename never happened).
    pub fn load(dir: &Path) -> Result<OffsetTable, GroupError> {
        let path = dir.join(OFFSETS_FILE);
        let mut table = OffsetTable {
            path: path.clone(),
            offsets: BTreeMap::new(),
            leases: HashMap::new(),
            dirty: false,
            version: 0,
            clock: Clock::System,
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(table),
            Err(e) => {
                return Err(GroupError::Corrupt {
                    path,
                    message: e.to_string(),
                })
            }
        };
        let rows: Vec<Row> = serde_json::from_str(&text).map_err(|e| GroupError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        for (group, topic, queue_id, offset, epoch) in rows {
            table.offsets.insert(
                GroupQueue {
                    group,
                    topic,
                    queue_id,
                },
                StoredOffset {
                    offset,
                    epoch,
                    ..Default::default()
                },
            );
        }
        Ok(table)
    }

    /// The same table, its leases and commit times read from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> OffsetTable {
        self.set_clock(clock);
        self
    }

    /// Times the table's leases and commits by `clock` from now on.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    pub fn query(&self, key: &GroupQueue) -> Option<StoredOffset> {
        self.offsets.get(key).copied()
    }

    fn lease_holder(&self, key: &GroupQueue, now: Instant) -> Option<&str> {
        self.leases
            .get(key)
            .filter(|l| l.until > now)
            .map(|l| l.client_id.as_str())
    }

    /// Applies a commit unless it is stale (older epoch than stored; [`EPOCH_ANY`] never is)
    /// or another client holds the lease; returns what is stored afterwards.
    pub fn commit(
        &mut self,
        key: &GroupQueue,
        offset: u64,
        epoch: u64,
        client_id: &str,
        release: bool,
    ) -> Option<StoredOffset> {
        let now = self.clock.now();
        let held_by_other = self
            .lease_holder(key, now)
            .is_some_and(|holder| holder != client_id);
        let current = self.offsets.get(key).copied();
        let stale = epoch != EPOCH_ANY && current.is_some_and(|c| epoch < c.epoch);
        if !held_by_other && !stale {
            let first_epoch = if epoch == EPOCH_ANY { 0 } else { epoch };
            let epoch = current.map_or(first_epoch, |c| c.epoch);
            if current.is_none_or(|c| c.offset != offset || c.epoch != epoch) {
                let now = self.clock.wall_ms();
                let mut stored = StoredOffset {
                    offset,
                    epoch,
                    last_commit_ms: now,
                    consume_tps_milli: 0,
                    skipped_records: 0,
                };
                if let Some(c) = current {
                    let dt_ms = now - c.last_commit_ms;
                    if c.last_commit_ms > 0 && dt_ms > 0 && offset > c.offset {
                        stored.consume_tps_milli = (offset - c.offset) * 1_000_000 / dt_ms as u64;
                    }
                }
                self.offsets.insert(key.clone(), stored);
                self.dirty = true;
                self.version += 1;
            }
        }
        if release && !held_by_other {
            self.leases.remove(key);
        }
        self.offsets.get(key).copied()
    }

    /// Sets the offset (admin reset) and bumps the epoch so that members holding an older
    /// position adopt this one at their next commit.
    pub fn reset(&mut self, key: &GroupQueue, offset: u64) -> StoredOffset {
        let epoch = self
            .offsets
            .get(key)
            .map_or(1, |c| c.epoch.saturating_add(1).min(EPOCH_ANY - 1));
        let stored = StoredOffset {
            offset,
            epoch,
            last_commit_ms: self.clock.wall_ms(),
            consume_tps_milli: 0,
            skipped_records: 0,
        };
        self.offsets.insert(key.clone(), stored);
        self.dirty = true;
        self.version += 1;
        stored
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// A slave takes its master's offset of a queue as it is (a reset may have moved it
    /// back); it is written at the next flush like a commit.
    pub fn replicate(&mut self, key: GroupQueue, offset: u64, epoch: u64) {
        let current = self.offsets.get(&key).copied();
        if current.is_some_and(|c| c.offset == offset && c.epoch == epoch) {
            return;
        }
        let stored = StoredOffset {
            offset,
            epoch,
            last_commit_ms: current.map_or(0, |c| c.last_commit_ms),
            ..Default::default()
        };
        self.offsets.insert(key, stored);
        self.dirty = true;
        self.version += 1;
    }

    /// Grants or renews the lease; `Err(holder)` when another client holds it.
    pub fn lock(&mut self, key: &GroupQueue, client_id: &str, lease_ms: u64) -> Result<(), String> {
        let now = self.clock.now();
        if let Some(holder) = self.lease_holder(key, now) {
            if holder != client_id {
                return Err(holder.to_owned());
            }
        }
        let lease_ms = lease_ms.clamp(1, LEASE_MS_MAX);
        self.leases.insert(
            key.clone(),
            Lease {
                client_id: client_id.to_owned(),
                until: now + Duration::from_millis(lease_ms),
            },
        );
        Ok(())
    }

    /// Gives a lease back at once: `client_id`'s lease of the queue ends, whatever offset
    /// the group has stored (a lease of another client stays). True when one ended.
    pub fn unlock(&mut self, key: &GroupQueue, client_id: &str) -> bool {
        let mine = self
            .leases
            .get(key)
            .is_some_and(|l| l.client_id == client_id);
        if mine {
            self.leases.remove(key);
        }
        mine
    }

    /// Ends every lease `client_id` holds for `group` on this shard (the client left the
    /// group or its connection closed); how many ended.
    pub fn release_client(&mut self, group: &str, client_id: &str) -> usize {
        let before = self.leases.len();
        self.leases
            .retain(|k, l| !(k.group == group && l.client_id == client_id));
        before - self.leases.len()
    }

    /// Every stored offset of this shard (for backlog metrics).
    pub fn entries(&self) -> impl Iterator<Item = (&GroupQueue, &StoredOffset)> {
        self.offsets.iter()
    }

    /// The file contents if anything changed since the last call (which marks it clean).
    pub fn take_snapshot(&mut self) -> Option<(PathBuf, Vec<u8>)> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        let now = self.clock.now();
        self.leases.retain(|_, l| l.until > now);
        let rows: Vec<Row> = self
            .offsets
            .iter()
            .map(|(k, v)| {
                (
                    k.group.clone(),
                    k.topic.clone(),
                    k.queue_id,
                    v.offset,
                    v.epoch,
                )
            })
            .collect();
        let text = serde_json::to_vec(&rows).unwrap_or_default();
        Some((self.path.clone(), text))
    }

    /// Marks the table dirty again after a failed write, so the next pass retries.
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }
}

/// Writes a snapshot durably (see [`crate::durable::replace`]).
pub fn write_snapshot(path: &Path, bytes: &[u8]) -> Result<(), GroupError> {
    crate::durable::replace(path, bytes).map_err(|e| GroupError::Persist {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub version: u64,
    pub members: Vec<String>,
}

struct Group {
    /// client id -> last heartbeat.
    members: BTreeMap<String, Instant>,
    version: u64,
}

/// Every group's live members. Lives on core 0.
pub struct Membership {
    groups: RefCell<HashMap<String, Group>>,
    /// Where new groups' versions start: the broker's start time in ms.
    version_base: u64,
    timeout: Duration,
    next_version: Cell<u64>,
    changed: Signal,
    /// Groups whose members changed since [`Membership::take_changed`] last ran, and the
    /// signal that wakes whoever tells their members (`Core::notify_group_changes`).
    changed_groups: RefCell<std::collections::BTreeSet<String>>,
    changed_groups_signal: Signal,
    /// What heartbeats and expiry are timed by.
    clock: Clock,
}

impl Membership {
    pub fn new(timeout: Duration, version_base: u64) -> Membership {
        Membership {
            groups: RefCell::new(HashMap::new()),
            version_base,
            timeout,
            next_version: Cell::new(version_base),
            changed: Signal::default(),
            changed_groups: RefCell::new(std::collections::BTreeSet::new()),
            changed_groups_signal: Signal::default(),
            clock: Clock::System,
        }
    }

    /// The same membership, timed by `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Membership {
        self.clock = clock;
        self
    }

    /// Notes that `group`'s members changed.
    fn note_change(&self, group: &str) {
        self.changed_groups.borrow_mut().insert(group.to_owned());
        self.changed_groups_signal.notify_all();
    }

    /// Waits until some group's members have changed, and takes those groups with their
    /// members now.
    pub async fn take_changed(&self) -> Vec<(String, Vec<String>)> {
        while self.changed_groups.borrow().is_empty() {
            self.changed_groups_signal.wait().await;
        }
        let groups = std::mem::take(&mut *self.changed_groups.borrow_mut());
        groups
            .into_iter()
            .map(|g| {
                let members = self.view(&g).members;
                (g, members)
            })
            .collect()
    }

    fn bump(&self) -> u64 {
        let v = self.next_version.get() + 1;
        self.next_version.set(v);
        v
    }

    pub fn view(&self, group: &str) -> MemberView {
        match self.groups.borrow().get(group) {
            Some(g) => MemberView {
                version: g.version,
                members: g.members.keys().cloned().collect(),
            },
            None => MemberView {
                version: self.version_base,
                members: Vec::new(),
            },
        }
    }

    pub fn heartbeat(&self, group: &str, client_id: &str) -> MemberView {
        let now = self.clock.now();
        let joined = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.entry(group.to_owned()).or_insert_with(|| Group {
                members: BTreeMap::new(),
                version: self.version_base,
            });
            let joined = g.members.insert(client_id.to_owned(), now).is_none();
            if joined {
                g.version = self.bump();
            }
            joined
        };
        if joined {
            tracing::info!(group, client_id, "consumer joined");
            self.note_change(group);
            self.changed.notify_all();
        }
        self.view(group)
    }

    pub fn unregister(&self, group: &str, client_id: &str) -> MemberView {
        let left = {
            let mut groups = self.groups.borrow_mut();
            match groups.get_mut(group) {
                Some(g) => {
                    let removed = g.members.remove(client_id).is_some();
                    if removed {
                        g.version = self.bump();
                    }
                    removed
                }
                None => false,
            }
        };
        if left {
            tracing::info!(group, client_id, "consumer left");
            self.note_change(group);
            self.changed.notify_all();
        }
        self.view(group)
    }

    /// Drops members silent for longer than the timeout; true if any was dropped.
    pub fn expire(&self) -> bool {
        let now = self.clock.now();
        let mut any = false;
        {
            let mut groups = self.groups.borrow_mut();
            for (name, g) in groups.iter_mut() {
                let before = g.members.len();
                g.members.retain(|id, seen| {
                    let alive = now.duration_since(*seen) < self.timeout;
                    if !alive {
                        tracing::info!(group = %name, client_id = %id, "consumer timed out");
                    }
                    alive
                });
                if g.members.len() != before {
                    g.version = self.bump();
                    self.changed_groups.borrow_mut().insert(name.clone());
                    any = true;
                }
            }
            groups.retain(|_, g| !g.members.is_empty());
        }
        if any {
            self.changed_groups_signal.notify_all();
            self.changed.notify_all();
        }
        any
    }

    /// Resolves with the group's view once its version differs from `known_version`, or at
    /// the timeout.
    pub async fn wait_change(
        &self,
        group: &str,
        known_version: u64,
        timeout: Duration,
    ) -> MemberView {
        let deadline = self.clock.now() + timeout;
        loop {
            let view = self.view(group);
            let now = self.clock.now();
            if view.version != known_version || now >= deadline {
                return view;
            }
            self.changed.wait_timeout(deadline - now).await;
        }
    }

    /// How often expiry runs: a tenth of the timeout, at most a second.
    pub fn expiry_period(&self) -> Duration {
        (self.timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(q: u32) -> GroupQueue {
        GroupQueue {
            group: "g".into(),
            topic: "T".into(),
            queue_id: q,
        }
    }

    #[test]
    fn an_unlock_or_a_leaving_client_frees_its_leases_without_a_stored_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = OffsetTable::load(dir.path()).unwrap();
        t.lock(&key(0), "a", 60_000).unwrap();
        t.lock(&key(1), "a", 60_000).unwrap();
        t.lock(&key(2), "b", 60_000).unwrap();
        assert_eq!(t.query(&key(0)), None, "no offset was ever committed");
        // Another client cannot give a's lease back; a itself can, at once.
        assert!(!t.unlock(&key(0), "b"));
        assert_eq!(t.lock(&key(0), "b", 60_000), Err("a".to_owned()));
        assert!(t.unlock(&key(0), "a"));
        t.lock(&key(0), "b", 60_000).unwrap();
        // a leaves: its other lease of the group ends, b's stay.
        assert_eq!(t.release_client("g", "a"), 1);
        t.lock(&key(1), "b", 60_000).unwrap();
        assert_eq!(t.release_client("g", "a"), 0);
        assert_eq!(t.lock(&key(2), "c", 60_000), Err("b".to_owned()));
    }

    #[test]
    fn a_commit_without_an_epoch_is_never_stale_and_a_reset_after_it_counts_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = OffsetTable::load(dir.path()).unwrap();
        let first = t.commit(&key(0), 5, EPOCH_ANY, "rocketmq", false).unwrap();
        assert_eq!((first.offset, first.epoch), (5, 0));
        let reset = t.reset(&key(0), 1);
        assert_eq!((reset.offset, reset.epoch), (1, 1));
        // A client without epochs commits over the reset (it was told the new offset).
        let after = t.commit(&key(0), 2, EPOCH_ANY, "rocketmq", false).unwrap();
        assert_eq!((after.offset, after.epoch), (2, 1));
    }

    #[test]
    fn commits_survive_a_reload_and_resets_win_over_stale_commits() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = OffsetTable::load(dir.path()).unwrap();
        assert_eq!(t.query(&key(0)), None);
        t.commit(&key(0), 5, 0, "a", false);
        t.commit(&key(1), 7, 0, "a", false);
        let reset = t.reset(&key(0), 2);
        assert_eq!((reset.offset, reset.epoch), (2, 1));
        assert!(reset.last_commit_ms > 0);
        // A member that read the offset before the reset cannot undo it.
        assert_eq!(t.commit(&key(0), 9, 0, "a", false), Some(reset));
        assert_eq!(t.commit(&key(0), 3, 1, "a", false).unwrap().offset, 3);
        let (path, bytes) = t.take_snapshot().unwrap();
        write_snapshot(&path, &bytes).unwrap();
        assert!(t.take_snapshot().is_none(), "clean after a snapshot");
        let back = OffsetTable::load(dir.path()).unwrap();
        // Offsets and epochs survive; commit times and rates are not persisted.
        let k0 = back.query(&key(0)).unwrap();
        assert_eq!((k0.offset, k0.epoch, k0.last_commit_ms), (3, 1, 0));
        let k1 = back.query(&key(1)).unwrap();
        assert_eq!((k1.offset, k1.epoch), (7, 0));
    }

    #[test]
    fn a_lease_excludes_others_until_released_with_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual();
        let mut t = OffsetTable::load(dir.path())
            .unwrap()
            .with_clock(clock.clone());
        t.lock(&key(0), "a", 60_000).unwrap();
        assert_eq!(t.lock(&key(0), "b", 60_000), Err("a".to_owned()));
        // The non-holder's commit is not applied.
        assert_eq!(t.commit(&key(0), 4, 0, "b", false), None);
        assert_eq!(t.commit(&key(0), 6, 0, "a", true).unwrap().offset, 6);
        t.lock(&key(0), "b", 1_000).unwrap();
        clock.advance(Duration::from_millis(999));
        assert_eq!(t.lock(&key(0), "c", 60_000), Err("b".to_owned()));
        clock.advance(Duration::from_millis(1));
        // An expired lease is free.
        t.lock(&key(0), "c", 60_000).unwrap();
    }

    /// A commit's time and the consume rate come from the table's clock: 100 messages over
    /// two seconds of it are 50 a second, whatever time really passed.
    #[test]
    fn commit_times_and_consume_rates_read_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual();
        let mut t = OffsetTable::load(dir.path())
            .unwrap()
            .with_clock(clock.clone());
        let first = t.commit(&key(0), 100, 0, "a", false).unwrap();
        assert_eq!(first.last_commit_ms, clock.wall_ms());
        clock.advance(Duration::from_secs(2));
        let second = t.commit(&key(0), 200, 0, "a", false).unwrap();
        assert_eq!(second.last_commit_ms, first.last_commit_ms + 2000);
        assert_eq!(second.consume_tps_milli, 50_000);
        clock.advance(Duration::from_millis(5));
        assert_eq!(t.reset(&key(0), 0).last_commit_ms, clock.wall_ms());
    }

    /// Expiry counts from a member's last heartbeat by the clock: one that keeps beating
    /// stays, one silent for the timeout goes, and the group's version moves when it does.
    #[test]
    fn a_member_expires_a_timeout_after_its_last_heartbeat_not_its_first() {
        let clock = Clock::manual();
        let m = Membership::new(Duration::from_millis(50), 1000).with_clock(clock.clone());
        m.heartbeat("g", "a");
        m.heartbeat("g", "b");
        clock.advance(Duration::from_millis(40));
        let before = m.heartbeat("g", "a").version;
        clock.advance(Duration::from_millis(10));
        assert!(m.expire(), "b was silent for the timeout");
        let after = m.view("g");
        assert_eq!(after.members, vec!["a".to_owned()]);
        assert!(after.version > before);
        clock.advance(Duration::from_millis(39));
        assert!(!m.expire(), "a beat 49 ms ago");
        clock.advance(Duration::from_millis(1));
        assert!(m.expire());
        assert!(m.view("g").members.is_empty());
    }

    #[test]
    fn membership_versions_change_on_join_leave_and_expiry() {
        let clock = Clock::manual();
        let m = Membership::new(Duration::from_millis(50), 1000).with_clock(clock.clone());
        let v0 = m.view("g").version;
        let v1 = m.heartbeat("g", "a").version;
        assert_ne!(v0, v1);
        assert_eq!(
            m.heartbeat("g", "a").version,
            v1,
            "a heartbeat is no change"
        );
        let v2 = m.heartbeat("g", "b");
        assert_eq!(v2.members, vec!["a".to_owned(), "b".to_owned()]);
        let v3 = m.unregister("g", "b");
        assert_eq!(v3.members, vec!["a".to_owned()]);
        assert!(v3.version > v2.version);
        clock.advance(Duration::from_millis(49));
        assert!(!m.expire(), "not yet silent for the timeout");
        clock.advance(Duration::from_millis(1));
        assert!(m.expire());
        assert!(m.view("g").members.is_empty());
    }
}
