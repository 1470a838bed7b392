//! Idempotent sends: a message whose `UNIQ_KEY` the broker already stored for its topic
//! within the window is answered with the original send result and not stored again.
//!
//! RocketMQ's clients keep a message's `UNIQ_KEY` (its producer-side id) across their own
//! retries, and an application that resends the same `Message` object keeps it too; but a
//! retry usually goes to another broker, and in corvus every core is one. So the decision
//! for a key is made in one place: each `(topic, UNIQ_KEY)` has an *owner core*
//! ([`owner_core`], a hash of the pair), whose [`Window`] is the one serialization point for
//! that key. The core that takes a send asks each owner to [`Claim`] the send's keys (one
//! mesh message per owner core for a whole batch; none when the owner is itself), and the
//! owner answers, per key:
//!
//! * [`Claimed::New`]: recorded as pending; the send stores the message and then [`Settle`]s
//!   the key with where it went (or releases it when the append failed, so that a later
//!   retry stores it);
//! * [`Claimed::Stored`]: the original's queue, queue offset, commit-log offset and store
//!   time, which the send answers with;
//! * [`Claimed::Pending`]: the original is still being appended (the original and its
//!   retry arrived together, as when a paused broker resumes): the taking core asks again,
//!   backing off, for at most [`PENDING_WAIT_MAX`], then answers busy.
//!
//! A pending claim older than [`PENDING_STALE_MS`] (its settle lost on a full mesh) is
//! taken over by the next claim.
//!
//! The window is bounded by time (`dedup_window_ms`, from the original's store time), count
//! (`dedup_keys_max`) and memory (`dedup_memory_bytes_max`, key bytes plus
//! [`ENTRY_OVERHEAD_BYTES`] per key); each core keeps its share of the broker's bounds and
//! forgets the oldest first. It has no file of its own: at start, and when a slave's shards
//! are promoted, each core walks the tail of its master shards' CommitLogs over the window
//! ([`Core::rebuild_dedup`]) and hands every keyed record's position to the key's owner
//! before it takes sends. A slave has the same log as its master, so a retry after a
//! failover is recognised the same way.
//!
//! Where it applies: client sends (every front end reaches [`Core::send`]) to a topic with
//! `dedup_enable` or its `dedup.enable` attribute. Never to retry (`%RETRY%`), dead-letter
//! (`%DLQ%`) or system (`RMQ_SYS_`, `rmq_sys_`) topics, whose copies share their original's
//! `UNIQ_KEY` on purpose, nor to prepared transactional (half) messages, nor to what the
//! broker stores itself (a scheduled message delivered by the timer).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use message::offsets::{CommitLogOffset, QueueOffset};
use message::RecordView;

use crate::calls::CoreCall;
use crate::core::{Core, SendOutcome};
use crate::error::{Appended, BrokerError};

/// The topic attribute that turns deduplication on (`true`) or off (`false`) for one topic,
/// whatever the broker's `dedup_enable`.
pub const ATTRIBUTE: &str = "dedup.enable";

/// What one remembered key costs besides its bytes: the map's slot and the eviction order's
/// entry (an estimate, for the memory bound).
pub const ENTRY_OVERHEAD_BYTES: usize = 128;

/// A pending claim this old is taken over by the next claim: its sender never settled it
/// (the settle found the owner's inbox full). Longer than any append waits (a sync flush,
/// a SYNC_MASTER's replicas).
pub const PENDING_STALE_MS: i64 = 30_000;

/// Longest a send waits for a pending original before it is answered busy.
pub const PENDING_WAIT_MAX: Duration = Duration::from_secs(10);

/// Where an original message was stored: what its send was answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Original {
    pub shard: u16,
    /// The topic's queue id (the broker-wide numbering the kernel uses).
    pub queue_id: u32,
    pub queue_offset: QueueOffset,
    pub commit_log_offset: CommitLogOffset,
    pub store_timestamp_ms: i64,
    /// The store host stamped in the record (its offset message id names it): after a
    /// failover, the old master's.
    pub store_host: SocketAddrV4,
}

/// The owner's answer for one key of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Not in the window: claimed for this send, which must settle it.
    New,
    /// Stored before, here.
    Stored(Original),
    /// Claimed by a send still appending.
    Pending,
}

enum Slot {
    Pending { since_ms: i64 },
    Stored(Original),
}

/// One core's share of the broker's bounds.
#[derive(Debug, Clone, Copy)]
pub struct WindowLimits {
    pub window_ms: i64,
    pub keys_max: usize,
    pub bytes_max: usize,
}

impl WindowLimits {
    /// Core `core`'s share of the config's bounds, over `cores` cores.
    pub fn share(config: &crate::config::BrokerConfig, cores: u16) -> WindowLimits {
        let cores = u64::from(cores.max(1));
        WindowLimits {
            window_ms: config.dedup_window_ms as i64,
            keys_max: config.dedup_keys_max.div_ceil(cores) as usize,
            bytes_max: config.dedup_memory_bytes_max.div_ceil(cores) as usize,
        }
    }
}

/// The keys one core owns: pending claims and stored originals, the stored ones in the
/// order they came (oldest first out).
pub struct Window {
    limits: WindowLimits,
    slots: HashMap<Rc<str>, Slot>,
    /// Stored keys in the order they were settled, with their store time.
    order: VecDeque<(Rc<str>, i64)>,
    /// Memory of the stored keys, by [`entry_bytes`].
    bytes: usize,
}

fn entry_bytes(key: &str) -> usize {
    key.len() + ENTRY_OVERHEAD_BYTES
}

impl Window {
    pub fn new(limits: WindowLimits) -> Window {
        Window {
            limits,
            slots: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Forgets every key (a demoted core's: its log may be cut back).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Stored keys remembered now.
    pub fn stored(&self) -> usize {
        self.order.len()
    }

    /// Memory of the stored keys.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Claims `key` at `now_ms` for a send that will store it (see [`Claimed`]).
    pub fn claim(&mut self, key: &str, now_ms: i64) -> Claimed {
        self.evict(now_ms);
        match self.slots.get(key) {
            Some(Slot::Stored(o)) => return Claimed::Stored(*o),
            Some(Slot::Pending { since_ms }) if now_ms - since_ms < PENDING_STALE_MS => {
                return Claimed::Pending
            }
            _ => {}
        }
        match self.slots.get_mut(key) {
            // A stale claim: taken over.
            Some(slot) => *slot = Slot::Pending { since_ms: now_ms },
            None => {
                self.slots
                    .insert(Rc::from(key), Slot::Pending { since_ms: now_ms });
            }
        }
        Claimed::New
    }

    /// Ends a claim: `Some` where its message was stored, `None` when it was not (the key
    /// is free again). Also how a rebuild from the log remembers a key; a key already
    /// stored keeps its first original.
    pub fn settle(&mut self, key: &str, stored: Option<Original>, now_ms: i64) {
        let Some(o) = stored else {
            if matches!(self.slots.get(key), Some(Slot::Pending { .. })) {
                self.slots.remove(key);
            }
            return;
        };
        if now_ms - o.store_timestamp_ms >= self.limits.window_ms {
            // Already out of the window (a rebuild's oldest records).
            if matches!(self.slots.get(key), Some(Slot::Pending { .. })) {
                self.slots.remove(key);
            }
            return;
        }
        let key: Rc<str> = match self.slots.get_key_value(key) {
            Some((_, Slot::Stored(_))) => return,
            Some((k, Slot::Pending { .. })) => k.clone(),
            None => Rc::from(key),
        };
        self.bytes += entry_bytes(&key);
        self.order.push_back((key.clone(), o.store_timestamp_ms));
        self.slots.insert(key, Slot::Stored(o));
        self.evict(now_ms);
    }

    /// Forgets the oldest stored keys while the window holds too many, too much, or ones
    /// older than its time.
    fn evict(&mut self, now_ms: i64) {
        let l = self.limits;
        while let Some((key, at)) = self.order.front() {
            let over = self.order.len() > l.keys_max
                || self.bytes > l.bytes_max
                || now_ms - *at >= l.window_ms;
            if !over {
                break;
            }
            self.bytes -= entry_bytes(key);
            self.slots.remove(&**key);
            self.order.pop_front();
        }
    }
}

/// The window key of `uniq_key` sent to `topic`.
pub fn window_key(topic: &str, uniq_key: &str) -> String {
    let mut k = String::with_capacity(topic.len() + 1 + uniq_key.len());
    k.push_str(topic);
    k.push('\u{1}');
    k.push_str(uniq_key);
    k
}

/// The core that decides for window key `key`, of `cores` cores (FNV-1a of its bytes).
pub fn owner_core(key: &str, cores: u16) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key.as_bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % u32::from(cores.max(1))) as u16
}

/// Whether sends to `topic` may be deduplicated at all: not retry, dead-letter or system
/// topics, whose copies keep their original's `UNIQ_KEY` on purpose.
pub fn topic_applies(topic: &str) -> bool {
    !(topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || topic.starts_with("RMQ_SYS_")
        || topic.starts_with("rmq_sys_"))
}

/// Each record's window key (`None` for one without a `UNIQ_KEY`) and length, of a batch of
/// `count` records sent to `topic`; `None` when no record has a key, or the batch is not
/// well formed (the shard refuses it) or is a prepared transactional message.
pub fn keys_of(topic: &str, records: &[u8], count: u32) -> Option<Vec<(Option<String>, usize)>> {
    let mut out = Vec::with_capacity(count as usize);
    let mut any = false;
    for r in message::records(records) {
        let v = r.ok()?;
        let key = v.uniq_key().filter(|k| !k.is_empty());
        any |= key.is_some();
        out.push((key.map(|k| window_key(topic, k)), v.len()));
    }
    if !any || out.len() != count as usize || crate::transaction::is_prepared(records, count) {
        return None;
    }
    Some(out)
}

// ------------------------------------------------------------------ mesh ops

/// To a key's owner core: claim these window keys for one send.
#[derive(Debug)]
pub struct Claim(pub Vec<String>);

/// To a key's owner core: where the claimed keys' messages were stored (`None`: not
/// stored, the claim released); also a rebuild's keys.
#[derive(Debug)]
pub struct Settle(pub Vec<(String, Option<Original>)>);

impl CoreCall for Claim {
    type Answer = Vec<Claimed>;

    async fn serve(self, core: &Core) -> Result<Vec<Claimed>, BrokerError> {
        Ok(core.claim_here(self.0.iter().map(String::as_str)))
    }
}

impl CoreCall for Settle {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        let now = core.shared.clock.wall_ms();
        let mut w = core.dedup.borrow_mut();
        for (k, o) in &self.0 {
            w.settle(k, *o, now);
        }
        Ok(())
    }
}

/// What the owners answered for a send's keyed records.
struct Claims {
    /// Per record: `None` without a key.
    per_record: Vec<Option<Claimed>>,
}

impl Core {
    /// Claims `keys` in this core's own window (it is their owner).
    fn claim_here<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<Claimed> {
        let now = self.shared.clock.wall_ms();
        let mut w = self.dedup.borrow_mut();
        keys.map(|k| w.claim(k, now)).collect()
    }

    /// Whether sends to `topic` are deduplicated: its `dedup.enable` attribute, else the
    /// broker's `dedup_enable`.
    pub fn dedup_on(&self, topic: &str) -> bool {
        if !topic_applies(topic) {
            return false;
        }
        match self.topics.borrow().attribute(topic, ATTRIBUTE) {
            Some(v) => v == "true",
            None => self.config().dedup_enable,
        }
    }

    /// Asks the owners of `keys` (record index, window key) to claim them, one request per
    /// owner core; a key pending on its owner is asked again, backing off, until it is
    /// settled or [`PENDING_WAIT_MAX`] has passed.
    async fn claim_keys(
        &self,
        keys: &[(usize, &str)],
        records: usize,
    ) -> Result<Claims, BrokerError> {
        let mut per_record = vec![None; records];
        let mut ask: Vec<(usize, &str)> = keys.to_vec();
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            let mut by_owner: Vec<Vec<(usize, &str)>> = vec![Vec::new(); self.shared.cores.into()];
            for &(i, k) in &ask {
                by_owner[usize::from(owner_core(k, self.shared.cores))].push((i, k));
            }
            let mut pending = Vec::new();
            for (owner, group) in (0u16..).zip(by_owner) {
                if group.is_empty() {
                    continue;
                }
                let answers = if owner == self.id {
                    // This core decides: no copy of the keys, no call.
                    self.claim_here(group.iter().map(|(_, k)| *k))
                } else {
                    let claim = Claim(group.iter().map(|(_, k)| (*k).to_owned()).collect());
                    match self.at_core(owner, claim).await {
                        Ok(a) if a.len() == group.len() => a,
                        Ok(_) => {
                            return Err(BrokerError::Internal(
                                "a dedup claim was answered for other keys".into(),
                            ))
                        }
                        Err(e) => {
                            // Keys claimed so far are released: nothing was stored.
                            self.release(&per_record, keys).await;
                            return Err(e);
                        }
                    }
                };
                for (&(i, k), a) in group.iter().zip(answers) {
                    if a == Claimed::Pending {
                        pending.push((i, k));
                    }
                    per_record[i] = Some(a);
                }
            }
            if pending.is_empty() {
                return Ok(Claims { per_record });
            }
            if started.elapsed() >= PENDING_WAIT_MAX {
                self.release(&per_record, keys).await;
                return Err(BrokerError::Busy(format!(
                    "{} message(s) of this send are still being stored by an earlier send of the same UNIQ_KEY; retry later",
                    pending.len()
                )));
            }
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(50));
            ask = pending;
        }
    }

    /// Settles the claimed (`New`) keys of a send: `stored(i)` is where record `i` went,
    /// `None` to release its claim.
    async fn settle_keys(
        &self,
        claims: &[Option<Claimed>],
        keys: &[(usize, &str)],
        stored: impl Fn(usize) -> Option<Original>,
    ) {
        let mut by_owner: HashMap<u16, Vec<(String, Option<Original>)>> = HashMap::new();
        let now = self.shared.clock.wall_ms();
        for &(i, k) in keys {
            if claims.get(i).copied().flatten() == Some(Claimed::New) {
                let owner = owner_core(k, self.shared.cores);
                if owner == self.id {
                    // This core decides: settled in place, without a copy of the key.
                    self.dedup.borrow_mut().settle(k, stored(i), now);
                } else {
                    by_owner
                        .entry(owner)
                        .or_default()
                        .push((k.to_owned(), stored(i)));
                }
            }
        }
        for (owner, entries) in by_owner {
            if let Err(e) = self.at_core(owner, Settle(entries)).await {
                // The claims stay pending until they are stale (PENDING_STALE_MS): a retry
                // meanwhile waits, then is answered busy.
                tracing::warn!(core = self.id, owner, "cannot settle dedup claims: {e}");
            }
        }
    }

    async fn release(&self, claims: &[Option<Claimed>], keys: &[(usize, &str)]) {
        self.settle_keys(claims, keys, |_| None).await;
    }

    /// [`Core::send`] of a batch some of whose records carry a `UNIQ_KEY` (`keyed`, from
    /// [`keys_of`]) to a deduplicated topic: each keyed record is stored once.
    ///
    /// * Every record new: the batch is stored as sent.
    /// * Every keyed record stored before and no record new: answered with the first
    ///   record's original (with the batch's count: a retried batch was stored whole, in
    ///   one run).
    /// * Some new: only the new records are stored, as one batch, and the send is answered
    ///   with where they went.
    pub(crate) async fn send_once(
        &self,
        topic: &str,
        queue_id: u32,
        records: Bytes,
        keyed: Vec<(Option<String>, usize)>,
    ) -> Result<SendOutcome, BrokerError> {
        let keys: Vec<(usize, &str)> = keyed
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| k.as_deref().map(|k| (i, k)))
            .collect();
        let claims = self.claim_keys(&keys, keyed.len()).await?.per_record;
        let is_new = |i: usize| !matches!(claims[i], Some(Claimed::Stored(_)));
        let fresh = (0..keyed.len()).filter(|&i| is_new(i)).count();
        if fresh == 0 {
            let Some(Some(Claimed::Stored(o))) = claims.first() else {
                return Err(BrokerError::Internal(
                    "a dedup batch without a first claim".into(),
                ));
            };
            return Ok(SendOutcome {
                appended: Appended {
                    shard: o.shard,
                    first_queue_offset: o.queue_offset,
                    first_commit_log_offset: o.commit_log_offset,
                    count: keyed.len() as u32,
                    store_timestamp_ms: o.store_timestamp_ms,
                },
                queue_id: o.queue_id,
                store_host: o.store_host,
            });
        }
        // The records to store, and each one's offset within them (`None`: not stored).
        let mut at = vec![None; keyed.len()];
        let batch = if fresh == keyed.len() {
            let mut pos = 0u64;
            for (i, (_, len)) in keyed.iter().enumerate() {
                at[i] = Some((i as u64, pos));
                pos += *len as u64;
            }
            records
        } else {
            let mut out = Vec::with_capacity(records.len());
            let mut from = 0usize;
            let mut n = 0u64;
            for (i, (_, len)) in keyed.iter().enumerate() {
                if is_new(i) {
                    at[i] = Some((n, out.len() as u64));
                    out.extend_from_slice(&records[from..from + len]);
                    n += 1;
                }
                from += len;
            }
            Bytes::from(out)
        };
        let sent = self.store(topic, queue_id, batch, fresh as u32).await;
        let appended = match &sent {
            Ok(out) => Some(out.appended),
            // Stored, though its replicas did not confirm in time: the original all the same.
            Err(BrokerError::FlushSlaveTimeout {
                stored: Some(a), ..
            }) => Some(**a),
            Err(_) => None,
        };
        self.settle_keys(&claims, &keys, |i| {
            let (a, (n, off)) = (appended?, at[i]?);
            Some(Original {
                shard: a.shard,
                queue_id,
                queue_offset: QueueOffset(a.first_queue_offset.0 + n),
                commit_log_offset: CommitLogOffset(a.first_commit_log_offset.0 + off),
                store_timestamp_ms: a.store_timestamp_ms,
                store_host: self.store_host_of(a.shard),
            })
        })
        .await;
        sent
    }

    /// Remembers the keyed records of this core's master shards stored within the window,
    /// each with its owner core: done before the core takes sends (at start), and when a
    /// slave's shards are promoted, so that a retry of a send stored before the restart or
    /// by the old master is recognised. Bounded in time; a failure is logged and the core
    /// serves without the keys it could not hand over.
    pub async fn rebuild_dedup(&self, shards: &[u16]) {
        let cfg = self.config();
        let any_topic = {
            let topics = self.topics.borrow();
            topics
                .all()
                .iter()
                .any(|t| topics.attribute(&t.name, ATTRIBUTE) == Some("true"))
        };
        if !cfg.dedup_enable && !any_topic {
            return;
        }
        let work = async {
            for &shard in shards {
                if let Err(e) = self.rebuild_shard(shard).await {
                    tracing::warn!(
                        core = self.id,
                        shard,
                        "dedup window not rebuilt from the log: {e}"
                    );
                }
            }
        };
        let limit = async {
            glommio::timer::sleep(REBUILD_MAX).await;
            tracing::warn!(
                core = self.id,
                "dedup window rebuild cut short after {REBUILD_MAX:?}"
            );
        };
        futures_lite::future::or(work, limit).await;
    }

    /// [`Core::rebuild_dedup`] of the shards this core serves as master: a core's start,
    /// before it takes sends.
    pub async fn rebuild_dedup_at_start(&self) {
        let mut shards: Vec<u16> = self
            .shards
            .keys()
            .copied()
            .filter(|&s| self.ha.master(s).is_some())
            .collect();
        shards.sort_unstable();
        self.rebuild_dedup(&shards).await;
    }

    async fn rebuild_shard(&self, shard: u16) -> Result<(), BrokerError> {
        let sh = self.local_shard(shard)?;
        let now = self.shared.clock.wall_ms();
        let since = now - self.config().dedup_window_ms as i64;
        let (min, write) = sh.log_bounds();
        let seg = sh.segment_bytes().max(1);
        // The walk starts at the newest segment whose first record is older than the
        // window: every record within the window is at or after it.
        let mut from = (write.saturating_sub(1) / seg) * seg;
        while from > min {
            match sh.read_log(from, message::FIXED_BYTES * 4).await? {
                Some(run) if !run.quarantined => match RecordView::parse(run.bytes.as_bytes()) {
                    Ok(v) if v.store_timestamp_ms() < since => break,
                    _ => {}
                },
                _ => {}
            }
            from = from.saturating_sub(seg).max(min);
        }
        let mut batch: HashMap<u16, Vec<(String, Option<Original>)>> = HashMap::new();
        let mut remembered = 0u64;
        while let Some(run) = sh.read_log(from, REBUILD_READ_BYTES).await? {
            if run.next <= from {
                break;
            }
            if !run.quarantined {
                let bytes = run.bytes.as_bytes();
                let mut pos = 0usize;
                while pos < bytes.len() {
                    let rest = &bytes[pos..];
                    let len = match message::peek_record(rest) {
                        message::Peek::Record(n) | message::Peek::Blank(n) => n,
                        message::Peek::Invalid => break,
                    };
                    if let Ok(v) = RecordView::parse(rest) {
                        if let Some(k) = v.uniq_key().filter(|k| !k.is_empty()) {
                            if v.store_timestamp_ms() >= since && topic_applies(v.topic()) {
                                let key = window_key(v.topic(), k);
                                let o = Original {
                                    shard,
                                    queue_id: v.queue_id(),
                                    queue_offset: QueueOffset(v.queue_offset()),
                                    commit_log_offset: CommitLogOffset(v.physical_offset()),
                                    store_timestamp_ms: v.store_timestamp_ms(),
                                    store_host: v.store_host(),
                                };
                                batch
                                    .entry(owner_core(&key, self.shared.cores))
                                    .or_default()
                                    .push((key, Some(o)));
                                remembered += 1;
                            }
                        }
                    }
                    pos += len;
                }
            }
            from = run.next;
            self.hand_over(&mut batch, REBUILD_SETTLE_KEYS).await?;
        }
        self.hand_over(&mut batch, 1).await?;
        tracing::info!(
            core = self.id,
            shard,
            keys = remembered,
            "dedup window rebuilt from the CommitLog"
        );
        Ok(())
    }

    /// Sends each owner its collected keys once it has `at_least` of them.
    async fn hand_over(
        &self,
        batch: &mut HashMap<u16, Vec<(String, Option<Original>)>>,
        at_least: usize,
    ) -> Result<(), BrokerError> {
        for (owner, entries) in batch.iter_mut() {
            if entries.len() >= at_least {
                let v = std::mem::take(entries);
                self.at_core(*owner, Settle(v)).await?;
            }
        }
        Ok(())
    }
}

/// Longest a core's rebuild of its share of the window may take before it serves.
const REBUILD_MAX: Duration = Duration::from_secs(60);
/// The log is walked this much at a time.
const REBUILD_READ_BYTES: usize = 4 << 20;
/// Keys handed to one owner in one mesh message.
const REBUILD_SETTLE_KEYS: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: i64) -> Original {
        Original {
            shard: 0,
            queue_id: 1,
            queue_offset: QueueOffset(ts as u64),
            commit_log_offset: CommitLogOffset(ts as u64 * 100),
            store_timestamp_ms: ts,
            store_host: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 10911),
        }
    }

    fn window(window_ms: i64, keys_max: usize, bytes_max: usize) -> Window {
        Window::new(WindowLimits {
            window_ms,
            keys_max,
            bytes_max,
        })
    }

    #[test]
    fn a_key_is_new_then_pending_then_stored() {
        let mut w = window(60_000, 10, 1 << 20);
        assert_eq!(w.claim("t\u{1}a", 1_000), Claimed::New);
        assert_eq!(w.claim("t\u{1}a", 1_001), Claimed::Pending);
        w.settle("t\u{1}a", Some(at(1_000)), 1_002);
        assert_eq!(w.claim("t\u{1}a", 1_003), Claimed::Stored(at(1_000)));
        // Another topic's same UNIQ_KEY is another key.
        assert_eq!(w.claim("u\u{1}a", 1_003), Claimed::New);
    }

    #[test]
    fn a_released_claim_frees_the_key() {
        let mut w = window(60_000, 10, 1 << 20);
        assert_eq!(w.claim("k", 1_000), Claimed::New);
        w.settle("k", None, 1_001);
        assert_eq!(w.claim("k", 1_002), Claimed::New);
        assert_eq!(w.stored(), 0);
    }

    #[test]
    fn a_stale_pending_claim_is_taken_over() {
        let mut w = window(600_000, 10, 1 << 20);
        assert_eq!(w.claim("k", 1_000), Claimed::New);
        assert_eq!(w.claim("k", 1_000 + PENDING_STALE_MS - 1), Claimed::Pending);
        assert_eq!(w.claim("k", 1_000 + PENDING_STALE_MS), Claimed::New);
    }

    #[test]
    fn the_oldest_keys_go_first_by_count_time_and_bytes() {
        let mut w = window(10_000, 3, 1 << 20);
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            let ts = 1_000 + i as i64;
            assert_eq!(w.claim(k, ts), Claimed::New);
            w.settle(k, Some(at(ts)), ts);
        }
        assert_eq!(w.stored(), 3);
        assert_eq!(
            w.claim("a", 1_010),
            Claimed::New,
            "count: the oldest forgotten"
        );
        assert!(matches!(w.claim("b", 1_010), Claimed::Stored(_)));
        // Time: b (stored at 1001) is out of a 10 s window at 11001, c not yet.
        assert_eq!(w.claim("b", 11_001), Claimed::New);
        assert!(matches!(w.claim("c", 11_001), Claimed::Stored(_)));

        let each = entry_bytes("k0");
        let mut w = window(10_000, 100, 2 * each);
        for i in 0..3 {
            let k = format!("k{i}");
            w.claim(&k, 1_000);
            w.settle(&k, Some(at(1_000)), 1_000);
        }
        assert_eq!(w.bytes(), 2 * each);
        assert_eq!(
            w.claim("k0", 1_000),
            Claimed::New,
            "bytes: the oldest forgotten"
        );
        assert!(matches!(w.claim("k2", 1_000), Claimed::Stored(_)));
    }

    #[test]
    fn a_settle_keeps_the_first_original_and_skips_expired_ones() {
        let mut w = window(10_000, 10, 1 << 20);
        w.settle("k", Some(at(5_000)), 5_000);
        w.settle("k", Some(at(6_000)), 6_000);
        assert_eq!(w.claim("k", 6_000), Claimed::Stored(at(5_000)));
        w.settle("old", Some(at(1_000)), 20_000);
        assert_eq!(w.stored(), 1);
    }

    #[test]
    fn owners_spread_and_never_exceed_the_cores() {
        let mut seen = [0u32; 4];
        for i in 0..400 {
            let o = owner_core(&window_key("t", &format!("K{i}")), 4);
            seen[usize::from(o)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        assert_eq!(owner_core("x", 1), 0);
    }
}
