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
//! A key is remembered as a keyed 128-bit hash of the pair ([`Key`]), so a message costs
//! no allocation. The window is bounded by time (`dedup_window_ms`, from the claim, or the
//! original's store time for a key learned from the log), count (`dedup_keys_max`) and
//! memory (`dedup_memory_bytes_max`, [`ENTRY_BYTES`] per key); each core keeps its share of
//! the broker's bounds and forgets the oldest first. It has no file of its own: at start, and when a slave's shards
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
use std::hash::{BuildHasher, DefaultHasher, Hasher, RandomState};
use std::net::SocketAddrV4;
use std::sync::LazyLock;
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

/// What one remembered key costs: its entry in the window's ring (72 bytes) and its share
/// of the index, which has at least two 8-byte slots per entry the window may hold, at most
/// four once rounded to a power of two (an upper estimate, for the memory bound; every key
/// costs the same).
pub const ENTRY_BYTES: usize = 128;

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

/// A `(topic, UNIQ_KEY)` pair as the window knows it: 128 bits of SipHash-1-3 keyed with a
/// secret the process draws at start, so no client can make its keys collide with
/// another's. Two different pairs are taken for one with a probability of about
/// n² / 2¹²⁹ over n keys remembered (below 10⁻²⁵ for ten million).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// Where the key sits in its owner's index.
    slot: u64,
    /// Which core owns it, and the rest of the key's bits.
    owner: u64,
}

/// The secret of every [`Key`] of this process: the same on every core, so a key computed
/// where a send is taken is the one its owner remembers.
static KEY_SECRET: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// The [`Key`]s of one topic's `UNIQ_KEY`s: the topic is hashed once per batch.
#[derive(Clone)]
pub struct TopicKeys(DefaultHasher);

impl TopicKeys {
    pub fn new(topic: &str) -> TopicKeys {
        let mut h = KEY_SECRET.build_hasher();
        h.write(topic.as_bytes());
        // No UTF-8 text holds 0xff: the topic ends here, whatever the UNIQ_KEY.
        h.write_u8(0xff);
        TopicKeys(h)
    }

    pub fn key(&self, uniq_key: &str) -> Key {
        let mut h = self.0.clone();
        h.write(uniq_key.as_bytes());
        let slot = h.finish();
        h.write_u8(0xff);
        Key {
            slot,
            owner: h.finish(),
        }
    }
}

/// The key of `uniq_key` sent to `topic`.
pub fn key_of(topic: &str, uniq_key: &str) -> Key {
    TopicKeys::new(topic).key(uniq_key)
}

/// The core that decides for `key`, of `cores` cores.
pub fn owner_core(key: Key, cores: u16) -> u16 {
    (key.owner % u64::from(cores.max(1))) as u16
}

#[derive(Debug, Clone, Copy)]
enum State {
    Pending,
    Stored(Original),
    /// A claim released (its append failed): a hole in the ring, out of the index.
    Released,
}

struct Entry {
    key: Key,
    /// The claim's time, or the original's store time for a key learned settled.
    at_ms: i64,
    state: State,
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

    /// The most entries the window holds: the count bound, or the memory bound's.
    fn entries_max(&self) -> usize {
        self.keys_max.min(self.bytes_max / ENTRY_BYTES).max(1)
    }
}

/// The keys one core owns: a ring of entries in the order they were claimed (or learned,
/// for a rebuild), oldest first out, and an [`Index`] from [`Key`] to the entry's sequence
/// number. A message costs no allocation (the ring grows up to the bounds, the index is
/// sized for them at the first key) and one random memory access, its index probe, which
/// a batch's claims prefetch together.
pub struct Window {
    limits: WindowLimits,
    ring: VecDeque<Entry>,
    /// Sequence number of `ring[0]`; entry `s` is `ring[s - head]`.
    head: u64,
    index: Index,
}

impl Window {
    pub fn new(limits: WindowLimits) -> Window {
        Window {
            limits,
            ring: VecDeque::new(),
            head: 0,
            index: Index::default(),
        }
    }

    /// Forgets every key (a demoted core's: its log may be cut back).
    pub fn clear(&mut self) {
        self.head += self.ring.len() as u64;
        self.ring.clear();
        self.index.clear();
    }

    /// Stored keys remembered now.
    pub fn stored(&self) -> usize {
        self.ring
            .iter()
            .filter(|e| matches!(e.state, State::Stored(_)))
            .count()
    }

    /// Memory the entries are counted for, against the memory bound.
    pub fn bytes(&self) -> usize {
        self.ring.len() * ENTRY_BYTES
    }

    /// Where `seq` is in the ring, if it is there.
    fn pos(&self, seq: u32) -> Option<usize> {
        let at = seq.wrapping_sub(self.head as u32) as usize;
        (at < self.ring.len()).then_some(at)
    }

    /// The ring position of `key`'s entry.
    fn find(&self, key: Key) -> Option<usize> {
        self.index.find(key, |seq| {
            self.pos(seq).filter(|&at| self.ring[at].key == key)
        })
    }

    fn push(&mut self, key: Key, at_ms: i64, state: State) {
        let len = self.ring.len();
        let max = self.limits.entries_max();
        if len == self.ring.capacity() {
            // Doubling, but never past the bound: the ring is most of the window's memory.
            let want = (len * 2).max(64).min(max + 1);
            self.ring.reserve_exact(want.saturating_sub(len).max(1));
        }
        self.index.size_for(max + 1);
        let seq = self.head + len as u64;
        self.ring.push_back(Entry { key, at_ms, state });
        self.index.insert(key, seq as u32);
    }

    /// Takes the entry at ring position `at` out of the index and leaves a hole there.
    fn release(&mut self, at: usize) {
        let e = &mut self.ring[at];
        e.state = State::Released;
        self.index.remove(e.key, (self.head + at as u64) as u32);
    }

    /// Claims each of `keys` at `now_ms` for a send that will store it (see [`Claimed`]),
    /// each claim with its entry's sequence number, for a [`Window::settle_all_at`] that
    /// finds the entry without the index. Their index slots, and those of the oldest entries
    /// the claims will push out, are fetched from memory together first; afterwards, those
    /// of the entries the next claims will push out, so that those removals find them in
    /// the cache.
    pub fn claim_all_at(&mut self, keys: &[Key], now_ms: i64) -> Vec<(Claimed, u64)> {
        for &k in keys {
            self.index.prefetch(k);
        }
        for e in self.ring.iter().take(keys.len()) {
            self.index.prefetch(e.key);
        }
        let claimed = keys.iter().map(|&k| self.claim_at(k, now_ms)).collect();
        for e in self.ring.iter().take(keys.len()) {
            self.index.prefetch(e.key);
        }
        claimed
    }

    /// Claims `key` at `now_ms` for a send that will store it (see [`Claimed`]).
    pub fn claim(&mut self, key: Key, now_ms: i64) -> Claimed {
        self.claim_at(key, now_ms).0
    }

    /// [`Window::claim`], and the sequence number of the key's entry.
    fn claim_at(&mut self, key: Key, now_ms: i64) -> (Claimed, u64) {
        self.evict(now_ms);
        let Some(at) = self.find(key) else {
            let seq = self.head + self.ring.len() as u64;
            self.push(key, now_ms, State::Pending);
            self.evict(now_ms);
            return (Claimed::New, seq);
        };
        let seq = self.head + at as u64;
        let e = &mut self.ring[at];
        let claimed = match e.state {
            State::Stored(o) => Claimed::Stored(o),
            State::Pending if now_ms - e.at_ms < PENDING_STALE_MS => Claimed::Pending,
            _ => {
                // A stale claim: taken over.
                e.state = State::Pending;
                e.at_ms = now_ms;
                Claimed::New
            }
        };
        (claimed, seq)
    }

    /// Settles claims each made with its entry's sequence number ([`Window::claim_all_at`]):
    /// the entry is found in the ring, without the index. One without a number (a
    /// rebuild's), or no longer there at it (pushed out since), is looked up by its key,
    /// as [`Window::settle`] does; the index slots of those without a number are fetched
    /// together first.
    pub fn settle_all_at(&mut self, entries: &[Settling], now_ms: i64) {
        for (k, _, _) in entries.iter().filter(|(_, seq, _)| seq.is_none()) {
            self.index.prefetch(*k);
        }
        for &(k, seq, o) in entries {
            let at = seq
                .and_then(|seq| seq.checked_sub(self.head))
                .and_then(|at| usize::try_from(at).ok())
                .filter(|&at| self.ring.get(at).is_some_and(|e| e.key == k));
            self.settle_found(k, at.or_else(|| self.find(k)), o, now_ms);
        }
    }

    /// Ends a claim: `Some` where its message was stored, `None` when it was not (the key
    /// is free again). Also how a rebuild from the log remembers a key; a key already
    /// stored keeps its first original.
    pub fn settle(&mut self, key: Key, stored: Option<Original>, now_ms: i64) {
        let found = self.find(key);
        self.settle_found(key, found, stored, now_ms);
    }

    /// [`Window::settle`] of `key`, whose entry is at ring position `found` (`None`: not in
    /// the window).
    fn settle_found(
        &mut self,
        key: Key,
        found: Option<usize>,
        stored: Option<Original>,
        now_ms: i64,
    ) {
        let pending = found.filter(|&at| matches!(self.ring[at].state, State::Pending));
        match stored {
            // Not stored, or already out of the window (a rebuild's oldest records).
            None => {
                if let Some(at) = pending {
                    self.release(at);
                }
            }
            Some(o) if now_ms - o.store_timestamp_ms >= self.limits.window_ms => {
                if let Some(at) = pending {
                    self.release(at);
                }
            }
            Some(o) => match (found, pending) {
                (Some(at), Some(_)) => {
                    let e = &mut self.ring[at];
                    e.state = State::Stored(o);
                    e.at_ms = e.at_ms.min(o.store_timestamp_ms);
                }
                (Some(_), None) => {}
                (None, _) => self.push(key, o.store_timestamp_ms, State::Stored(o)),
            },
        }
        self.evict(now_ms);
    }

    /// Forgets the oldest entries while the window holds too many, or ones older than its
    /// time; released holes at the front go with them.
    fn evict(&mut self, now_ms: i64) {
        let max = self.limits.entries_max();
        while let Some(front) = self.ring.front() {
            let over = self.ring.len() > max || now_ms - front.at_ms >= self.limits.window_ms;
            let hole = matches!(front.state, State::Released);
            if !over && !hole {
                break;
            }
            if !hole {
                self.index.remove(front.key, self.head as u32);
            }
            self.ring.pop_front();
            self.head += 1;
        }
    }
}

/// An open-addressing table, linear probing, from a [`Key`] to the low 32 bits of its
/// entry's sequence number. A slot holds the key's top 32 bits (its home slot and a tag)
/// and the sequence number, so a probe reads the slots alone until a tag matches, and a
/// removal shifts the probe run back without tombstones. The table has at least twice the
/// slots of the entries it may hold, so runs stay short. A matching tag is confirmed
/// against the ring's whole key, which also tells a live sequence number from one the
/// 32 bits wrapped onto.
#[derive(Default)]
struct Index {
    /// `0`: empty; else `tag << 32 | seq`.
    slots: Vec<u64>,
}

impl Index {
    /// The slot value of `key` (never `0`: the tag's top bit is set).
    fn tag(key: Key) -> u32 {
        (key.slot >> 32) as u32 | 0x8000_0000
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask()
    }

    /// Makes room for `entries` at most: allocated once, at the first key (zeroed pages,
    /// touched as keys land on them).
    fn size_for(&mut self, entries: usize) {
        if self.slots.is_empty() {
            let n = (entries * 2).next_power_of_two().clamp(64, 1 << 31);
            self.slots = vec![0; n];
        }
    }

    fn clear(&mut self) {
        self.slots.fill(0);
    }

    /// Asks the CPU to fetch `key`'s home slot and the cache line after it (where its probe
    /// run may go on), without waiting for them.
    fn prefetch(&self, key: Key) {
        if self.slots.is_empty() {
            return;
        }
        let home = self.home(Self::tag(key));
        for i in [home, (home + 8) & self.mask()] {
            let p = &self.slots[i] as *const u64;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint that never faults nor changes memory; `p`
            // points into `slots` all the same.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = p;
        }
    }

    /// The first slot of `key` whose sequence number `hit` confirms.
    fn find<T>(&self, key: Key, hit: impl Fn(u32) -> Option<T>) -> Option<T> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = Self::tag(key);
        let mut i = self.home(tag);
        loop {
            let v = self.slots[i];
            if v == 0 {
                return None;
            }
            if (v >> 32) as u32 == tag {
                if let Some(t) = hit(v as u32) {
                    return Some(t);
                }
            }
            i = (i + 1) & self.mask();
        }
    }

    fn insert(&mut self, key: Key, seq: u32) {
        let tag = Self::tag(key);
        let mut i = self.home(tag);
        while self.slots[i] != 0 {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = u64::from(tag) << 32 | u64::from(seq);
    }

    /// Removes `key`'s slot for `seq`, then moves back each later slot of the run that may
    /// sit in the freed one (its home is not between the freed slot and it).
    fn remove(&mut self, key: Key, seq: u32) {
        if self.slots.is_empty() {
            return;
        }
        let want = u64::from(Self::tag(key)) << 32 | u64::from(seq);
        let mask = self.mask();
        let mut hole = self.home(Self::tag(key));
        loop {
            match self.slots[hole] {
                0 => return,
                v if v == want => break,
                _ => hole = (hole + 1) & mask,
            }
        }
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let v = self.slots[j];
            if v == 0 {
                break;
            }
            let home = self.home((v >> 32) as u32);
            // Distance from home to j, and from the hole to j, along the run.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = v;
                hole = j;
            }
        }
        self.slots[hole] = 0;
    }
}

/// Whether sends to `topic` may be deduplicated at all: not retry, dead-letter or system
/// topics, whose copies keep their original's `UNIQ_KEY` on purpose.
pub fn topic_applies(topic: &str) -> bool {
    !(topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || topic.starts_with("RMQ_SYS_")
        || topic.starts_with("rmq_sys_"))
}

/// Each record's key (`None` for one without a `UNIQ_KEY`) and length, of a batch of
/// `count` records sent to `topic`; `None` when no record has a key, or the batch is not
/// well formed (the shard refuses it) or is a prepared transactional message.
pub fn keys_of(topic: &str, records: &[u8], count: u32) -> Option<Vec<(Option<Key>, usize)>> {
    let keys = TopicKeys::new(topic);
    let mut out = Vec::with_capacity(count as usize);
    let mut any = false;
    for r in message::records(records) {
        let v = r.ok()?;
        let key = v.uniq_key().filter(|k| !k.is_empty());
        any |= key.is_some();
        out.push((key.map(|k| keys.key(k)), v.len()));
    }
    if !any || out.len() != count as usize || crate::transaction::is_prepared(records, count) {
        return None;
    }
    Some(out)
}

// ------------------------------------------------------------------ mesh ops

/// To a key's owner core: claim these window keys for one send.
#[derive(Debug)]
pub struct Claim(pub Vec<Key>);

/// One key to settle: the key, its entry's sequence number from the claim (`None` for a
/// rebuild's keys, which were never claimed), and where its message was stored (`None`:
/// not stored, the claim released).
pub type Settling = (Key, Option<u64>, Option<Original>);

/// To a key's owner core: where the claimed keys' messages were stored; also a rebuild's
/// keys.
#[derive(Debug)]
pub struct Settle(pub Vec<Settling>);

impl CoreCall for Claim {
    type Answer = Vec<(Claimed, u64)>;

    async fn serve(self, core: &Core) -> Result<Vec<(Claimed, u64)>, BrokerError> {
        Ok(core.claim_here(&self.0))
    }
}

impl CoreCall for Settle {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        let now = core.shared.clock.wall_ms();
        core.dedup.borrow_mut().settle_all_at(&self.0, now);
        Ok(())
    }
}

/// What the owners answered for a send's keyed records.
struct Claims {
    /// Per record: `None` without a key.
    per_record: Vec<Option<Claimed>>,
    /// Per record: its key's entry in its owner's window, for the settle.
    seqs: Vec<u64>,
}

impl Core {
    /// Claims `keys` in this core's own window (it is their owner), each with its entry's
    /// sequence number.
    fn claim_here(&self, keys: &[Key]) -> Vec<(Claimed, u64)> {
        let now = self.shared.clock.wall_ms();
        self.dedup.borrow_mut().claim_all_at(keys, now)
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
        keys: &[(usize, Key)],
        records: usize,
    ) -> Result<Claims, BrokerError> {
        let mut per_record = vec![None; records];
        let mut seqs = vec![0; records];
        let mut ask: Vec<(usize, Key)> = keys.to_vec();
        let started = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            let mut by_owner: Vec<Vec<(usize, Key)>> = vec![Vec::new(); self.shared.cores.into()];
            for &(i, k) in &ask {
                by_owner[usize::from(owner_core(k, self.shared.cores))].push((i, k));
            }
            let mut pending = Vec::new();
            for (owner, group) in (0u16..).zip(by_owner) {
                if group.is_empty() {
                    continue;
                }
                let group_keys: Vec<Key> = group.iter().map(|(_, k)| *k).collect();
                let answers = if owner == self.id {
                    // This core decides: no call.
                    self.claim_here(&group_keys)
                } else {
                    match self.at_core(owner, Claim(group_keys)).await {
                        Ok(a) if a.len() == group.len() => a,
                        Ok(_) => {
                            return Err(BrokerError::Internal(
                                "a dedup claim was answered for other keys".into(),
                            ))
                        }
                        Err(e) => {
                            // Keys claimed so far are released: nothing was stored.
                            self.release(&Claims { per_record, seqs }, keys).await;
                            return Err(e);
                        }
                    }
                };
                for (&(i, k), (a, seq)) in group.iter().zip(answers) {
                    if a == Claimed::Pending {
                        pending.push((i, k));
                    }
                    per_record[i] = Some(a);
                    seqs[i] = seq;
                }
            }
            if pending.is_empty() {
                return Ok(Claims { per_record, seqs });
            }
            if started.elapsed() >= PENDING_WAIT_MAX {
                self.release(&Claims { per_record, seqs }, keys).await;
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
        claims: &Claims,
        keys: &[(usize, Key)],
        stored: impl Fn(usize) -> Option<Original>,
    ) {
        let mut by_owner: HashMap<u16, Vec<Settling>> = HashMap::new();
        let now = self.shared.clock.wall_ms();
        for &(i, k) in keys {
            if claims.per_record.get(i).copied().flatten() == Some(Claimed::New) {
                let owner = owner_core(k, self.shared.cores);
                let seq = claims.seqs.get(i).copied();
                by_owner.entry(owner).or_default().push((k, seq, stored(i)));
            }
        }
        if let Some(here) = by_owner.remove(&self.id) {
            // This core decides: settled in place.
            self.dedup.borrow_mut().settle_all_at(&here, now);
        }
        for (owner, entries) in by_owner {
            if let Err(e) = self.at_core(owner, Settle(entries)).await {
                // The claims stay pending until they are stale (PENDING_STALE_MS): a retry
                // meanwhile waits, then is answered busy.
                tracing::warn!(core = self.id, owner, "cannot settle dedup claims: {e}");
            }
        }
    }

    async fn release(&self, claims: &Claims, keys: &[(usize, Key)]) {
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
        keyed: Vec<(Option<Key>, usize)>,
    ) -> Result<SendOutcome, BrokerError> {
        let keys: Vec<(usize, Key)> = keyed
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| k.map(|k| (i, k)))
            .collect();
        let claimed = self.claim_keys(&keys, keyed.len()).await?;
        let claims = &claimed.per_record;
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
        self.settle_keys(&claimed, &keys, |i| {
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
        let mut batch: HashMap<u16, Vec<Settling>> = HashMap::new();
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
                                let key = key_of(v.topic(), k);
                                let o = Original {
                                    shard,
                                    queue_id: v.queue_id(),
                                    queue_offset: QueueOffset(v.queue_offset()),
                                    commit_log_offset: CommitLogOffset(v.physical_offset()),
                                    store_timestamp_ms: v.store_timestamp_ms(),
                                    store_host: v.store_host(),
                                };
                                batch
                                    .entry(owner_core(key, self.shared.cores))
                                    .or_default()
                                    .push((key, None, Some(o)));
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
        batch: &mut HashMap<u16, Vec<Settling>>,
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

    fn k(name: &str) -> Key {
        key_of("t", name)
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
        assert_eq!(w.claim(key_of("t", "a"), 1_000), Claimed::New);
        assert_eq!(w.claim(key_of("t", "a"), 1_001), Claimed::Pending);
        w.settle(key_of("t", "a"), Some(at(1_000)), 1_002);
        assert_eq!(w.claim(key_of("t", "a"), 1_003), Claimed::Stored(at(1_000)));
        // Another topic's same UNIQ_KEY is another key, and so is the same bytes split
        // differently between topic and UNIQ_KEY.
        assert_eq!(w.claim(key_of("u", "a"), 1_003), Claimed::New);
        assert_eq!(w.claim(key_of("ta", ""), 1_003), Claimed::New);
        assert_eq!(w.claim(key_of("", "ta"), 1_003), Claimed::New);
    }

    #[test]
    fn a_released_claim_frees_the_key() {
        let mut w = window(60_000, 10, 1 << 20);
        assert_eq!(w.claim(k("k"), 1_000), Claimed::New);
        w.settle(k("k"), None, 1_001);
        assert_eq!(w.claim(k("k"), 1_002), Claimed::New);
        assert_eq!(w.stored(), 0);
    }

    /// A settle by the claim's sequence number finds the claimed entry among others; one
    /// whose entry was pushed out meanwhile, or whose number is wrong, and one with no
    /// number (a rebuild's) go by the key, as `settle` does.
    #[test]
    fn a_settle_by_sequence_number_reaches_the_claimed_entry() {
        let mut w = window(600_000, 3, 1 << 20);
        let keys = [k("a"), k("b"), k("c")];
        let claimed = w.claim_all_at(&keys, 1_000);
        assert!(claimed.iter().all(|(c, _)| *c == Claimed::New));
        let seqs: Vec<u64> = claimed.iter().map(|&(_, s)| s).collect();
        assert_eq!(seqs, [0, 1, 2]);
        w.settle_all_at(
            &[
                (k("b"), Some(seqs[1]), Some(at(1_000))),
                (k("a"), Some(seqs[0]), None),
            ],
            1_001,
        );
        assert_eq!(w.claim(k("b"), 1_002), Claimed::Stored(at(1_000)));
        assert_eq!(w.claim(k("c"), 1_002), Claimed::Pending);
        // "a" was released: claimed again, at a new number.
        let again = w.claim_all_at(&[k("a")], 1_003);
        assert_eq!(again, [(Claimed::New, 3)]);
        // "c" (number 2) pushed out by two newer keys before its settle: remembered as
        // stored again, as `settle` does.
        w.claim_all_at(&[k("d"), k("e")], 1_004);
        w.settle_all_at(&[(k("c"), Some(seqs[2]), Some(at(1_000)))], 1_005);
        assert_eq!(w.claim(k("c"), 1_006), Claimed::Stored(at(1_000)));
        // A wrong number falls back to the key.
        w.settle_all_at(&[(k("e"), Some(seqs[0]), Some(at(1_004)))], 1_007);
        assert_eq!(w.claim(k("e"), 1_008), Claimed::Stored(at(1_004)));
        // A rebuild's key, with no number.
        w.settle_all_at(&[(k("f"), None, Some(at(1_008)))], 1_009);
        assert_eq!(w.claim(k("f"), 1_010), Claimed::Stored(at(1_008)));
    }

    #[test]
    fn a_stale_pending_claim_is_taken_over() {
        let mut w = window(600_000, 10, 1 << 20);
        assert_eq!(w.claim(k("k"), 1_000), Claimed::New);
        assert_eq!(
            w.claim(k("k"), 1_000 + PENDING_STALE_MS - 1),
            Claimed::Pending
        );
        assert_eq!(w.claim(k("k"), 1_000 + PENDING_STALE_MS), Claimed::New);
    }

    #[test]
    fn the_oldest_keys_go_first_by_count_time_and_bytes() {
        let store = |w: &mut Window, name: &str, ts: i64| {
            assert_eq!(w.claim(k(name), ts), Claimed::New);
            w.settle(k(name), Some(at(ts)), ts);
        };
        let mut w = window(10_000, 3, 1 << 20);
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            store(&mut w, name, 1_000 + i as i64);
        }
        assert_eq!(w.stored(), 3);
        for name in ["b", "c", "d"] {
            assert!(matches!(w.claim(k(name), 1_010), Claimed::Stored(_)));
        }
        assert_eq!(
            w.claim(k("a"), 1_010),
            Claimed::New,
            "count: the oldest forgotten"
        );

        // Time: a (stored at 1000) is out of a 10 s window at 11000, b not yet.
        let mut w = window(10_000, 10, 1 << 20);
        store(&mut w, "a", 1_000);
        store(&mut w, "b", 1_001);
        assert!(matches!(w.claim(k("b"), 11_000), Claimed::Stored(_)));
        assert_eq!(w.claim(k("a"), 11_000), Claimed::New);
        assert_eq!(w.claim(k("b"), 11_001), Claimed::New);

        let mut w = window(10_000, 100, 2 * ENTRY_BYTES);
        for i in 0..3 {
            store(&mut w, &format!("k{i}"), 1_000);
        }
        assert_eq!(w.bytes(), 2 * ENTRY_BYTES);
        assert!(matches!(w.claim(k("k1"), 1_000), Claimed::Stored(_)));
        assert!(matches!(w.claim(k("k2"), 1_000), Claimed::Stored(_)));
        assert_eq!(
            w.claim(k("k0"), 1_000),
            Claimed::New,
            "bytes: the oldest forgotten"
        );
    }

    #[test]
    fn a_full_window_remembers_exactly_its_newest_keys() {
        // Released claims leave holes; the window keeps the newest stored keys all the same.
        let mut w = window(600_000, 1_000, 1 << 30);
        let mut stored = Vec::new();
        for i in 0..200_000u32 {
            let key = key_of("t", &i.to_string());
            assert_eq!(w.claim(key, 1_000), Claimed::New);
            if i % 7 == 3 {
                w.settle(key, None, 1_000);
            } else {
                w.settle(key, Some(at(1_000)), 1_000);
                stored.push(key);
            }
        }
        assert!(w.stored() <= 1_000 && w.stored() >= 850, "{}", w.stored());
        // Each remembered entry has exactly one index slot, and nothing else has one.
        let live = w
            .ring
            .iter()
            .filter(|e| !matches!(e.state, State::Released))
            .count();
        assert_eq!(w.index.slots.iter().filter(|&&v| v != 0).count(), live);
        assert_eq!(w.index.slots.len(), 2_048);
        let kept = w.stored();
        let (old, new) = stored.split_at(stored.len() - kept);
        for key in new {
            assert!(matches!(w.claim(*key, 1_000), Claimed::Stored(_)));
        }
        for key in &old[old.len() - 100..] {
            assert_eq!(w.claim(*key, 1_000), Claimed::New);
        }
    }

    #[test]
    fn a_settle_keeps_the_first_original_and_skips_expired_ones() {
        let mut w = window(10_000, 10, 1 << 20);
        w.settle(k("k"), Some(at(5_000)), 5_000);
        w.settle(k("k"), Some(at(6_000)), 6_000);
        assert_eq!(w.claim(k("k"), 6_000), Claimed::Stored(at(5_000)));
        w.settle(k("old"), Some(at(1_000)), 14_000);
        assert_eq!(w.stored(), 1);
    }

    #[test]
    fn the_index_finds_what_it_holds_through_removals_and_wrapping_runs() {
        // A small table kept full to its bound, keys added and removed in a mixed order:
        // every held key is found at its number, every removed one is not.
        let mut index = Index::default();
        index.size_for(32);
        let mut held: HashMap<u32, Key> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for seq in 0..20_000u32 {
            let key = key_of("t", &seq.to_string());
            index.insert(key, seq);
            held.insert(seq, key);
            while held.len() > 32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let victim = *held.keys().nth((x % held.len() as u64) as usize).unwrap();
                let key = held.remove(&victim).unwrap();
                index.remove(key, victim);
                assert_eq!(index.find(key, |s| (s == victim).then_some(s)), None);
            }
            if seq % 97 == 0 {
                for (&s, &k) in &held {
                    assert_eq!(index.find(k, |f| (f == s).then_some(f)), Some(s));
                }
                assert_eq!(index.slots.iter().filter(|&&v| v != 0).count(), held.len());
            }
        }
    }

    #[test]
    fn owners_spread_and_never_exceed_the_cores() {
        let mut seen = [0u32; 4];
        for i in 0..400 {
            let o = owner_core(key_of("t", &format!("K{i}")), 4);
            seen[usize::from(o)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        assert_eq!(owner_core(k("x"), 1), 0);
    }
}
