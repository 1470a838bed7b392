//! Scheduled delivery: each master shard's timer delivers the records its shard holds
//! (delay levels and delivery times, `message::timer`) when they are due.
//!
//! The shard keeps a held record in the CommitLog like any other, under its own topic and
//! queue id, but indexes it in its timer queue (`TIMER_QUEUE_TOPIC`, queue 0) instead of
//! its queue, so no consumer sees it (`shard::derived::queue_of`). This module is the
//! derived index over that queue, one per shard, run by the core that owns the shard:
//!
//! - **Buckets.** Each entry (due time, timer-queue offset, log offset) goes to the file of
//!   its 10-second bucket (`<shard dir>/timer/b<n>`). Only the bucket coming due is read
//!   into memory, a few seconds ahead, so memory is one bucket's entries, however many are
//!   pending. Entries of a bucket already read go to memory at once (and to the file).
//! - **Delivery.** A due entry's record is read back and copied with the properties
//!   RocketMQ's delivered copies carry: the ones it was sent with (its timer key too, so a
//!   consumer's `getDelayTimeLevel()` is the level), `REAL_TOPIC` and `REAL_QID` (where it
//!   was bound for), `TIMER_OUT_MS` (when it was due), for a timer message also
//!   `TIMER_ENQUEUE_MS` and `TIMER_DEQUEUE_MS`; and `__TIMER_FROM` (its timer-queue offset),
//!   which marks it delivered, so its timer key does not hold it again. The copy is appended
//!   to its own topic and queue through the send path, so replication, flushing and the
//!   acknowledgement rules are a send's. Entries are delivered in (due time, offset)
//!   order; the cursor is the last one delivered.
//! - **Checkpoint** (every 200 ms when something changed): the bucket entries are written
//!   and fdatasynced, then `timer/checkpoint` (written aside and renamed) records how far
//!   the timer queue is indexed, the cursor, the log's end and the retention floor.
//! - **Crash.** Indexing resumes from the checkpoint (entries found again are the same
//!   entries, kept once). A delivery made after the checkpoint is found again by reading the
//!   log from the checkpoint's end for `__TIMER_FROM`, so it is not made twice.
//! - **Retention** never deletes a segment holding a record not yet delivered: the floor
//!   is the first such record (`Shard::set_retention_floor`). A held message is acknowledged
//!   data; its segment stays until it is delivered.
//!
//! - **Recall** (RocketMQ 5.3.2): a producer cancels a pending message with the handle its
//!   send returned ([`RecallHandle`]: topic, broker, due time, unique key). The ask goes to
//!   the timer through its inbox, so it never races a delivery: the timer finds the entry
//!   with that due time whose record has that topic and `UNIQ_KEY`, and appends a marker
//!   record, held for the same time so it lands in the timer queue like any held record
//!   (it replicates, and survives a crash as the log does), carrying the entry's
//!   timer-queue offset (`__TIMER_RECALL`). The recall is answered once the marker is
//!   stored as a send would be; the entry is then never delivered. Indexing a marker writes
//!   a tombstone into the entry's bucket file (log offset [`RECALLED`]), so the recall
//!   outlives the checkpoint that passes the marker. Unlike RocketMQ's broker, which
//!   answers SUCCESS whatever the handle names, a recall of a message already delivered, or
//!   of one this broker never held, is refused with the reason.
//!
//! The timer runs only while its core serves the shard as master. A slave keeps the held
//! records and the timer queue (they replicate as any record); on promotion its timer starts
//! from its own checkpoint and skips what the old master delivered by reading the log for
//! `__TIMER_FROM` from there.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use message::timer::{
    TimerRules, TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_FROM, TIMER_OUT_MS, TIMER_QUEUE_TOPIC,
};
use message::{encode_record, MessageFields, RecordView, TagFilter};
use shard::{QueueOffset, ReadRequest, ReadStatus, Shard};

use crate::core::Core;
use crate::error::BrokerError;
use crate::transaction::prop::{REAL_QID, REAL_TOPIC};

/// Width of one bucket file.
const BUCKET_MS: i64 = 10_000;
/// A bucket is read this long before it starts, so its first entries are on time.
const LOOKAHEAD_MS: i64 = 2_000;
/// Entries in memory at most; past it no further bucket is read until some are delivered
/// (after a long stop, when many are overdue at once).
const DUE_MAX: usize = 500_000;
/// How often the checkpoint is written when something changed.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);
/// Entries delivered per pass (sent in as few appends as their queues allow).
const DELIVER_BATCH: usize = 512;
/// Timer-queue entries indexed per read.
const INDEX_BATCH: u32 = 512;
/// Size of one bucket entry on disk.
const ENTRY_BYTES: usize = 24;
/// The log offset of a tombstone entry: the entry of that due time and timer-queue offset
/// was recalled (no record lies there: log offsets stay below 2^48).
const RECALLED: u64 = u64::MAX;
/// Recall asks waiting for a shard's timer at most; past it a recall is answered busy.
const RECALL_INBOX_MAX: usize = 256;
/// On a recall marker: the timer-queue offset of the entry it recalls.
pub const TIMER_RECALL: &str = "__TIMER_RECALL";
/// On a recall marker, as RocketMQ's broker writes it: `<topic>+<unique key>`.
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
/// The tag of a recall marker (RocketMQ's `_RECALL_TAG_`).
const RECALL_TAG: &str = "_RECALL_TAG_";
/// RocketMQ's `UNIQ_KEY` property: the producer's message id.
const UNIQ_KEY: &str = "UNIQ_KEY";

/// What a recall handle names (RocketMQ 5.3.2's `RecallMessageHandle`, version 1): the
/// topic, the broker (in corvus, the core's name in RocketMQ routes) that holds the message,
/// when it is due and its unique key. On the wire: URL-safe base64 with padding of
/// `v1 <topic> <brokerName> <deliverTimestampMs> <uniqueKey>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHandle {
    pub topic: String,
    pub broker_name: String,
    pub deliver_at_ms: i64,
    pub uniq_key: String,
}

impl RecallHandle {
    pub fn encode(&self) -> String {
        use base64::Engine;
        let text = format!(
            "v1 {} {} {} {}",
            self.topic, self.broker_name, self.deliver_at_ms, self.uniq_key
        );
        base64::engine::general_purpose::URL_SAFE.encode(text)
    }

    pub fn decode(handle: &str) -> Result<RecallHandle, BrokerError> {
        use base64::Engine;
        let bad = |why: &str| BrokerError::NotRecallable(format!("the recall handle {why}"));
        let raw = base64::engine::general_purpose::URL_SAFE
            .decode(handle.trim())
            .map_err(|_| bad("is not URL-safe base64"))?;
        let text = String::from_utf8(raw).map_err(|_| bad("is not UTF-8"))?;
        let parts: Vec<&str> = text.split(' ').collect();
        match parts.as_slice() {
            ["v1", topic, broker, at, uniq]
                if !topic.is_empty() && !broker.is_empty() && !uniq.is_empty() =>
            {
                Ok(RecallHandle {
                    topic: (*topic).to_owned(),
                    broker_name: (*broker).to_owned(),
                    deliver_at_ms: at.parse().map_err(|_| bad("names no delivery time"))?,
                    uniq_key: (*uniq).to_owned(),
                })
            }
            _ => Err(bad("is not a version 1 handle (v1 topic broker time key)")),
        }
    }
}

/// Where a recall found the message, as a shard's timer answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallOutcome {
    /// Pending until now; it will not be delivered (also when it was recalled before).
    Recalled,
    /// Already delivered.
    Delivered,
    /// Not held by this shard.
    NotHere,
}

/// A recall asked of a shard's timer.
struct RecallAsk {
    topic: String,
    uniq_key: String,
    deliver_at_ms: i64,
    reply: glommio::channels::local_channel::LocalSender<Result<RecallOutcome, BrokerError>>,
}

/// The inboxes of this core's running timers, by shard.
#[derive(Default)]
pub(crate) struct TimerDoors {
    doors: std::cell::RefCell<
        HashMap<u16, Rc<glommio::channels::local_channel::LocalSender<RecallAsk>>>,
    >,
}

impl TimerDoors {
    /// Asks the timer of `shard` (hosted here) to recall a message.
    pub(crate) async fn recall(
        &self,
        shard: u16,
        topic: &str,
        uniq_key: &str,
        deliver_at_ms: i64,
    ) -> Result<RecallOutcome, BrokerError> {
        let door = self.doors.borrow().get(&shard).cloned().ok_or_else(|| {
            BrokerError::Busy(format!(
                "the timer of shard {shard} is not running here (starting, or a slave's)"
            ))
        })?;
        let (tx, rx) = glommio::channels::local_channel::new_bounded(1);
        let ask = RecallAsk {
            topic: topic.to_owned(),
            uniq_key: uniq_key.to_owned(),
            deliver_at_ms,
            reply: tx,
        };
        if door.try_send(ask).is_err() {
            return Err(BrokerError::Busy(format!(
                "the timer of shard {shard} has {RECALL_INBOX_MAX} recalls waiting"
            )));
        }
        drop(door);
        rx.recv().await.unwrap_or_else(|| {
            Err(BrokerError::Busy(format!(
                "the timer of shard {shard} stopped before it answered the recall"
            )))
        })
    }
}

/// One held record: when it is due, its offset in the timer queue and in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: i64,
    q: u64,
    log: u64,
}

impl Entry {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(&self.q.to_le_bytes());
        out.extend_from_slice(&self.log.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Entry> {
        let at = i64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
        let q = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        let log = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
        Some(Entry { at, q, log })
    }
}

/// A held record's copy, ready to append.
struct Delivery {
    topic: String,
    queue_id: u32,
    record: Vec<u8>,
}

fn bucket_of(at: i64) -> i64 {
    at.div_euclid(BUCKET_MS)
}

/// What survives a restart of the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checkpoint {
    /// Timer-queue offset up to which entries are in bucket files.
    indexed: u64,
    /// The last entry delivered (every entry ordered before it is delivered too).
    cursor: (i64, u64),
    /// The log's write offset when the checkpoint was taken: a delivery made after it lies
    /// past it.
    log_end: u64,
    /// The first log offset a pending record may be at.
    floor: u64,
}

const CHECKPOINT_BYTES: usize = 8 * 5 + 4;

impl Checkpoint {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CHECKPOINT_BYTES);
        b.extend_from_slice(&self.indexed.to_le_bytes());
        b.extend_from_slice(&self.cursor.0.to_le_bytes());
        b.extend_from_slice(&self.cursor.1.to_le_bytes());
        b.extend_from_slice(&self.log_end.to_le_bytes());
        b.extend_from_slice(&self.floor.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Checkpoint, String> {
        if b.len() != CHECKPOINT_BYTES {
            return Err(format!("{} bytes, not {CHECKPOINT_BYTES}", b.len()));
        }
        let (body, crc) = b.split_at(CHECKPOINT_BYTES - 4);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(body) != stored {
            return Err("its CRC does not match".into());
        }
        let u = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&body[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Checkpoint {
            indexed: u(0),
            cursor: (u(1) as i64, u(2)),
            log_end: u(3),
            floor: u(4),
        })
    }
}

/// The timer's files: bucket files and the checkpoint, in `<shard dir>/timer`.
struct Files;

impl Files {
    fn bucket_path(dir: &Path, b: i64) -> PathBuf {
        dir.join(format!("b{b}"))
    }

    /// The checkpoint, or `None` if there is none yet.
    fn read_checkpoint(dir: &Path) -> Result<Option<Checkpoint>, String> {
        let path = dir.join("checkpoint");
        match std::fs::read(&path) {
            Ok(b) => Checkpoint::decode(&b)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The bucket numbers with a file.
    fn list_buckets(dir: &Path) -> std::io::Result<BTreeSet<i64>> {
        let mut out = BTreeSet::new();
        for e in std::fs::read_dir(dir)? {
            let name = e?.file_name();
            if let Some(b) = name
                .to_str()
                .and_then(|n| n.strip_prefix('b'))
                .and_then(|n| n.parse::<i64>().ok())
            {
                out.insert(b);
            }
        }
        Ok(out)
    }

    /// A bucket's entries (a torn last entry is left out: it is indexed again).
    fn read_bucket(dir: &Path, b: i64) -> std::io::Result<Vec<Entry>> {
        let mut buf = Vec::new();
        match std::fs::File::open(Self::bucket_path(dir, b)) {
            Ok(mut f) => {
                f.read_to_end(&mut buf)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
        Ok(buf
            .chunks_exact(ENTRY_BYTES)
            .filter_map(Entry::decode)
            .collect())
    }

    /// Appends to bucket files and makes them durable, then replaces the checkpoint, then
    /// deletes the bucket files given (fully delivered).
    fn persist(
        dir: &Path,
        writes: BTreeMap<i64, Vec<Entry>>,
        ck: Checkpoint,
        delete: Vec<i64>,
    ) -> std::io::Result<()> {
        for (b, entries) in writes {
            let mut bytes = Vec::with_capacity(entries.len() * ENTRY_BYTES);
            for e in &entries {
                e.encode(&mut bytes);
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(Self::bucket_path(dir, b))?;
            // A torn entry of an earlier crash would shift every later one: start whole.
            let len = f.metadata()?.len();
            if len % ENTRY_BYTES as u64 != 0 {
                f.set_len(len - len % ENTRY_BYTES as u64)?;
            }
            f.write_all(&bytes)?;
            f.sync_data()?;
        }
        let tmp = dir.join("checkpoint.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&ck.encode())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join("checkpoint"))?;
        std::fs::File::open(dir)?.sync_all()?;
        for b in delete {
            match std::fs::remove_file(Self::bucket_path(dir, b)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, BrokerError> {
    glommio::executor()
        .spawn_blocking(f)
        .await
        .map_err(|e| BrokerError::Storage(format!("timer files: {e}")))
}

impl Core {
    /// The recall handle of a message sent alone as `record` and stored at `appended`, when
    /// it is held for later (a delay level or a delivery time) and has a unique key; the
    /// broker it names is the core holding it, by its name in RocketMQ routes. A retry
    /// topic's messages (redeliveries) get none, as from RocketMQ's broker.
    pub fn recall_handle(
        &self,
        record: &[u8],
        appended: &crate::error::Appended,
    ) -> Option<String> {
        let v = RecordView::parse(record).ok()?;
        let topic = v.topic();
        // A retry is the broker's redelivery, and a prepared transactional message is held
        // as a half message until it is committed: neither is the timer's to recall.
        if topic.starts_with(acl::RETRY_TOPIC_PREFIX) || crate::transaction::is_prepared(record, 1)
        {
            return None;
        }
        let props = v.properties();
        if !message::timer::held(&props) {
            return None;
        }
        let at = self
            .shared
            .config
            .timer_rules()
            .deliver_at_ms(&props, appended.store_timestamp_ms)
            .ok()??;
        let uniq_key = props
            .get(UNIQ_KEY)
            .filter(|k| !k.is_empty() && !k.contains(' '))?;
        let core = protocol::shard_core(appended.shard, self.shared.cores);
        let handle = RecallHandle {
            topic: topic.to_owned(),
            broker_name: protocol::core_view::core_broker_name(
                &self.shared.config.broker_name,
                core,
                self.shared.cores,
            ),
            deliver_at_ms: at,
            uniq_key: uniq_key.to_owned(),
        };
        Some(handle.encode())
    }

    /// Recalls the scheduled message `handle` names (a handle a send of `topic` returned),
    /// so it is never delivered; answers its unique key (RocketMQ's answer names it as the
    /// message id). Refused with the reason when recall is off, the handle is not valid
    /// for this broker and topic, or the message is not pending: delivered already, or
    /// never held here.
    pub async fn recall(&self, topic: &str, handle: &str) -> Result<String, BrokerError> {
        let cfg = self.config();
        if !cfg.recall_message_enable {
            return Err(BrokerError::NoPermission(
                "recalling a message is off on this broker (recall_message_enable = false)".into(),
            ));
        }
        // In RocketMQ's order: the topic, then the handle.
        if self.topics.borrow().get(topic).is_none() {
            return Err(BrokerError::TopicNotExist(topic.to_owned()));
        }
        let h = RecallHandle::decode(handle)?;
        if h.topic != topic {
            return Err(BrokerError::NotRecallable(format!(
                "the handle is for topic `{}`, not `{topic}`",
                h.topic
            )));
        }
        let core = protocol::core_view::core_of_broker_name(
            &cfg.broker_name,
            &h.broker_name,
            self.shared.cores,
        )
        .ok_or_else(|| {
            BrokerError::NotRecallable(format!(
                "the handle names broker `{}`, not this broker",
                h.broker_name
            ))
        })?;
        let now = self.shared.clock.wall_ms();
        if h.deliver_at_ms > now.saturating_add(cfg.timer_max_delay_sec.saturating_mul(1000) as i64)
        {
            return Err(BrokerError::NotRecallable(format!(
                "the handle's delivery time {} is further ahead than timer_max_delay_sec",
                h.deliver_at_ms
            )));
        }
        let op = crate::mesh::Recall {
            topic: h.topic,
            uniq_key: h.uniq_key.clone(),
            deliver_at_ms: h.deliver_at_ms,
        };
        self.at_core(core, op).await?;
        Ok(h.uniq_key)
    }

    /// [`Core::recall`] on the core holding the message: asks the timer of each of its
    /// shards that holds queues of the topic.
    pub(crate) async fn recall_local(&self, r: &crate::mesh::Recall) -> Result<(), BrokerError> {
        self.check_master()?;
        let queues = self
            .topics
            .borrow()
            .get(&r.topic)
            .map_or(0, |t| t.write_queues.max(t.read_queues));
        let mut shards: Vec<u16> = (0..queues)
            .map(|q| self.owner(&r.topic, q))
            .filter(|&(_, core)| core == self.id)
            .map(|(shard, _)| shard)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        let mut delivered = false;
        for shard in shards {
            match self
                .timer_doors
                .recall(shard, &r.topic, &r.uniq_key, r.deliver_at_ms)
                .await?
            {
                RecallOutcome::Recalled => return Ok(()),
                RecallOutcome::Delivered => delivered = true,
                RecallOutcome::NotHere => {}
            }
        }
        Err(BrokerError::NotRecallable(if delivered {
            format!(
                "the message {} of topic `{}` due at {} is no longer pending: it was delivered (or recalled) at its time",
                r.uniq_key, r.topic, r.deliver_at_ms
            )
        } else {
            format!(
                "no scheduled message {} of topic `{}` due at {} is held here (delivered long ago, or never sent here)",
                r.uniq_key, r.topic, r.deliver_at_ms
            )
        }))
    }
}

/// Runs the timer of `shard_id` (hosted on this core) until the broker stops.
pub async fn run(core: Rc<Core>, shard_id: u16) {
    let mut logged_fail = None::<Instant>;
    while !core.shared.stopping() {
        if !serves(&core, shard_id) {
            glommio::timer::sleep(Duration::from_millis(100)).await;
            continue;
        }
        match Timer::open(&core, shard_id).await {
            Ok(mut t) => {
                if let Err(e) = t.serve().await {
                    if logged_fail.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!(shard = shard_id, error = %e, "the timer stopped; it starts again from its checkpoint");
                        logged_fail = Some(Instant::now());
                    }
                }
            }
            Err(e) => {
                if logged_fail.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                    tracing::error!(shard = shard_id, error = %e, "the timer cannot start; scheduled messages of this shard wait");
                    logged_fail = Some(Instant::now());
                }
            }
        }
        glommio::timer::sleep(Duration::from_millis(200)).await;
    }
}

fn serves(core: &Core, shard: u16) -> bool {
    core.ha.master(shard).is_some() && core.ha.serving().is_ok()
}

struct Timer {
    core: Rc<Core>,
    shard_id: u16,
    dir: PathBuf,
    rules: TimerRules,
    /// How far the timer queue is indexed (in memory; the checkpoint lags it).
    indexed: u64,
    cursor: (i64, u64),
    /// Buckets up to this one are in `due`.
    loaded_through: i64,
    due: BTreeSet<Entry>,
    /// Entries not yet in their bucket file.
    unwritten: BTreeMap<i64, Vec<Entry>>,
    /// Buckets with a file (or unwritten entries) not yet read: the least log offset of
    /// each, for the retention floor.
    pending_min: BTreeMap<i64, u64>,
    /// Timer-queue offsets delivered after the checkpoint found at the start.
    delivered_before: HashSet<u64>,
    /// Every held record below this log offset is indexed.
    indexed_log: u64,
    /// The buckets that have a file.
    files: BTreeSet<i64>,
    /// Timer-queue offsets of entries recalled and not yet passed by the cursor.
    recalled: HashSet<u64>,
    /// Recalls asked of this timer.
    asks: glommio::channels::local_channel::LocalReceiver<RecallAsk>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        // Recalls asked from now on are answered busy until a timer runs again.
        self.core
            .timer_doors
            .doors
            .borrow_mut()
            .remove(&self.shard_id);
    }
}

impl Timer {
    fn shard(&self) -> Result<&Shard, BrokerError> {
        self.core
            .shards
            .get(&self.shard_id)
            .ok_or_else(|| BrokerError::Storage(format!("shard {} is not here", self.shard_id)))
    }

    async fn open(core: &Rc<Core>, shard_id: u16) -> Result<Timer, BrokerError> {
        let shard = core
            .shards
            .get(&shard_id)
            .ok_or_else(|| BrokerError::Storage(format!("shard {shard_id} is not here")))?;
        let dir = shard.dir().join("timer");
        let rules = core.shared.config.timer_rules();
        let (ck, buckets, files) = {
            let dir = dir.clone();
            blocking(move || {
                std::fs::create_dir_all(&dir)?;
                let ck = Files::read_checkpoint(&dir).map_err(std::io::Error::other)?;
                let mut mins = BTreeMap::new();
                let files = Files::list_buckets(&dir)?;
                for &b in &files {
                    let entries = Files::read_bucket(&dir, b)?;
                    if let Some(min) = entries.iter().map(|e| e.log).min() {
                        // A bucket of tombstones only has `RECALLED` here: it is read when
                        // due, and holds no record back.
                        mins.insert(b, min);
                    }
                }
                Ok((ck, mins, files))
            })
            .await?
        };
        let (log_min, log_end) = shard.log_bounds();
        let first_start = ck.is_none();
        // Without a checkpoint (a first start, or a slave promoted), deliveries may still
        // be in the log (another master's): they lie after the first held record.
        let scan_from = if first_start {
            first_held_log_offset(shard).await?.unwrap_or(log_end)
        } else {
            0
        };
        let ck = ck.unwrap_or(Checkpoint {
            indexed: 0,
            cursor: (i64::MIN, 0),
            log_end,
            // Nothing is known yet: every held record still in the log may be pending.
            floor: log_min,
        });
        // Nothing the timer may still deliver is deleted meanwhile.
        shard.set_retention_floor(ck.floor);
        let (door, asks) = glommio::channels::local_channel::new_bounded(RECALL_INBOX_MAX);
        let mut t = Timer {
            core: core.clone(),
            shard_id,
            dir,
            rules,
            indexed: ck.indexed,
            cursor: ck.cursor,
            loaded_through: if ck.cursor.0 == i64::MIN {
                bucket_of(core.shared.clock.wall_ms()) - 1
            } else {
                bucket_of(ck.cursor.0) - 1
            },
            due: BTreeSet::new(),
            unwritten: BTreeMap::new(),
            pending_min: buckets,
            delivered_before: HashSet::new(),
            indexed_log: ck.floor,
            files,
            recalled: HashSet::new(),
            asks,
        };
        // Entries of buckets before the first one read are all due (a long stop).
        if let Some((&first, _)) = t.pending_min.first_key_value() {
            t.loaded_through = t.loaded_through.min(first - 1);
        }
        let from = if first_start { scan_from } else { ck.log_end };
        t.find_deliveries(from, log_end).await?;
        if first_start {
            t.checkpoint().await?;
        }
        core.timer_doors
            .doors
            .borrow_mut()
            .insert(shard_id, Rc::new(door));
        tracing::info!(
            shard = shard_id,
            indexed = t.indexed,
            pending_buckets = t.pending_min.len(),
            found_delivered = t.delivered_before.len(),
            "timer started"
        );
        Ok(t)
    }

    /// Reads the log in `[from, to)` for deliveries (`__TIMER_FROM`) made after the
    /// checkpoint, so that they are not made again.
    async fn find_deliveries(&mut self, from: u64, to: u64) -> Result<(), BrokerError> {
        let shard = self.shard()?;
        let (min, _) = shard.log_bounds();
        let mut at = from.max(min);
        let mut found = HashSet::new();
        while at < to {
            let run = match shard.read_log(at, 4 << 20).await {
                Ok(Some(run)) => run,
                Ok(None) => break,
                Err(e) => {
                    // Damage recovery did not see (the log changed on disk since): the
                    // rest of the range cannot be walked. Delivering what may have been
                    // delivered already is the lesser harm; holding every scheduled
                    // message of the shard back is not an option.
                    tracing::warn!(
                        shard = self.shard_id,
                        error = %e,
                        "the timer cannot read the log from offset {at} to {to} for deliveries made before it stopped; scheduled messages delivered in that range may be delivered again"
                    );
                    break;
                }
            };
            if run.quarantined {
                // Damage quarantined by recovery: it holds no delivery to find (the read
                // path logs the range once).
                if run.next <= at {
                    break;
                }
                at = run.next;
                continue;
            }
            let bytes = run.bytes.as_bytes();
            let mut pos = 0usize;
            while pos < bytes.len() {
                match message::peek_record(&bytes[pos..]) {
                    message::Peek::Record(len) => {
                        // A delivered copy is never held; a held record naming one is not
                        // a delivery.
                        if let Ok(v) = RecordView::parse(&bytes[pos..pos + len]) {
                            let q = v.property(TIMER_FROM).and_then(|s| s.parse().ok());
                            if let Some(q) = q.filter(|_| !message::timer::held(&v.properties())) {
                                found.insert(q);
                            }
                        }
                        pos += len;
                    }
                    message::Peek::Blank(len) => pos += len,
                    // A record that fails its CRC (changed on disk since recovery) names
                    // no delivery it can be trusted with; `read_log` checked the run's
                    // structure, so its size leads to the next one.
                    message::Peek::Invalid => {
                        let total = bytes
                            .get(pos..pos + 4)
                            .and_then(|b| <[u8; 4]>::try_from(b).ok())
                            .map_or(0, i32::from_be_bytes);
                        if total <= 0 {
                            break;
                        }
                        pos += total as usize;
                    }
                }
            }
            if run.next <= at {
                break;
            }
            at = run.next;
        }
        self.delivered_before = found;
        Ok(())
    }

    async fn serve(&mut self) -> Result<(), BrokerError> {
        let clock = self.core.shared.clock.clone();
        let mut last_ck = clock.now();
        let mut dirty = false;
        loop {
            if self.core.shared.stopping() || !serves(&self.core, self.shard_id) {
                // What is delivered is recorded before another timer may take over.
                if dirty {
                    self.checkpoint().await?;
                }
                return Ok(());
            }
            let indexed = self.index().await?;
            self.load().await?;
            let recalled = self.answer_recalls(None).await?;
            let delivered = self.deliver().await?;
            dirty |= indexed || delivered || recalled;
            if clock.now().saturating_duration_since(last_ck) >= CHECKPOINT_EVERY {
                if dirty {
                    self.checkpoint().await?;
                    dirty = false;
                } else {
                    // Nothing to record, but the log moved on: retention may follow it
                    // (the floor on disk stays lower, which is safe after a restart).
                    let floor = self.floor()?;
                    self.shard()?.set_retention_floor(floor);
                }
                last_ck = clock.now();
            }
            if indexed || delivered {
                continue;
            }
            // Sleep until the first entry is due, a bucket is to be read, a new held
            // record comes, or the checkpoint is due.
            let now = clock.wall_ms();
            let next_due = self.due.first().map_or(i64::MAX, |e| e.at);
            let next_load = (self.loaded_through + 1) * BUCKET_MS - LOOKAHEAD_MS;
            let mut wait_ms = next_due.min(next_load).saturating_sub(now).clamp(0, 100);
            if dirty {
                wait_ms = wait_ms.min(CHECKPOINT_EVERY.as_millis() as i64);
            }
            let wait = Duration::from_millis(wait_ms as u64);
            if wait.is_zero() {
                futures_lite::future::yield_now().await;
                continue;
            }
            let shard = self.shard()?;
            let asked = futures_lite::future::or(
                async {
                    shard
                        .wait_for_message(TIMER_QUEUE_TOPIC, 0, QueueOffset(self.indexed), wait)
                        .await;
                    None
                },
                self.asks.recv(),
            )
            .await;
            if let Some(ask) = asked {
                dirty |= self.answer_recalls(Some(ask)).await?;
            }
        }
    }

    /// Answers `first` and the recalls waiting in the inbox; whether the timer's state
    /// changed. A recall's own failure is its answer; the timer's is returned.
    async fn answer_recalls(&mut self, first: Option<RecallAsk>) -> Result<bool, BrokerError> {
        let mut changed = false;
        let mut next = first;
        for _ in 0..RECALL_INBOX_MAX {
            let ask = match next.take() {
                Some(a) => a,
                None => match futures_lite::future::poll_once(self.asks.recv()).await {
                    Some(Some(a)) => a,
                    _ => break,
                },
            };
            let (answer, did) = self.recall(&ask).await;
            changed |= did;
            let failed = answer.as_ref().err().cloned();
            // The asker may have gone (its connection closed): nothing to tell.
            let _ = ask.reply.try_send(answer);
            // A failure of the storage stops the timer as a delivery's would.
            if let Some(e @ (BrokerError::Poisoned(_) | BrokerError::Storage(_))) = failed {
                return Err(e);
            }
        }
        Ok(changed)
    }

    /// Recalls the entry `ask` names; whether the timer's state changed.
    async fn recall(&mut self, ask: &RecallAsk) -> (Result<RecallOutcome, BrokerError>, bool) {
        // The message was acknowledged before its handle was given out, so it is in the
        // timer queue: index up to the queue's end first.
        let mut changed = false;
        for _ in 0..4096 {
            match self.index().await {
                Ok(true) => changed = true,
                Ok(false) => break,
                Err(e) => return (Err(e), changed),
            }
        }
        let at = ask.deliver_at_ms;
        let b = bucket_of(at);
        let same_time = |e: &Entry| e.at == at && e.log != RECALLED;
        let mut candidates: BTreeSet<Entry> = self
            .due
            .range(
                Entry { at, q: 0, log: 0 }..=Entry {
                    at,
                    q: u64::MAX,
                    log: u64::MAX,
                },
            )
            .copied()
            .collect();
        if let Some(fresh) = self.unwritten.get(&b) {
            candidates.extend(fresh.iter().filter(|e| same_time(e)));
        }
        if b > self.loaded_through && self.files.contains(&b) {
            let dir = self.dir.clone();
            match blocking(move || Files::read_bucket(&dir, b)).await {
                Ok(entries) => candidates.extend(entries.into_iter().filter(|e| same_time(e))),
                Err(e) => return (Err(e), changed),
            }
        }
        let list: Vec<Entry> = candidates.into_iter().collect();
        let records = match self.read_held(&list).await {
            Ok(r) => r,
            Err(e) => return (Err(e), changed),
        };
        let found = list.iter().copied().find(|e| {
            records.get(&e.q).is_some_and(|bytes| {
                RecordView::parse(bytes).is_ok_and(|v| {
                    v.topic() == ask.topic
                        && v.property(UNIQ_KEY) == Some(ask.uniq_key.as_str())
                        && v.property(TIMER_RECALL).is_none()
                })
            })
        });
        let Some(e) = found else {
            // Delivered entries leave memory; one whose time the cursor passed is gone.
            let outcome = if at <= self.cursor.0 {
                RecallOutcome::Delivered
            } else {
                RecallOutcome::NotHere
            };
            return (Ok(outcome), changed);
        };
        if self.recalled.contains(&e.q) {
            return (Ok(RecallOutcome::Recalled), changed);
        }
        if (e.at, e.q) <= self.cursor || self.delivered_before.contains(&e.q) {
            return (Ok(RecallOutcome::Delivered), changed);
        }
        let Some(bytes) = records.get(&e.q) else {
            return (Ok(RecallOutcome::NotHere), changed);
        };
        let (topic, queue_id) = match RecordView::parse(bytes) {
            Ok(v) => (v.topic().to_owned(), v.queue_id()),
            Err(_) => return (Ok(RecallOutcome::NotHere), changed),
        };
        let marker = match recall_marker(&topic, &ask.uniq_key, e, self.core.shared.clock.wall_ms())
        {
            Ok(m) => m,
            Err(err) => return (Err(err), changed),
        };
        // Stored as a send is (the flush policy, replication): the marker is in the timer
        // queue, and the entry is not delivered from now on.
        let stored = match self
            .core
            .append_local(self.shard_id, &topic, queue_id, &marker, 1)
            .await
        {
            Ok(_) => Ok(RecallOutcome::Recalled),
            // Stored here, not acknowledged by the slaves in time: recalled on this
            // master, which is what a send that times out so says too.
            Err(BrokerError::FlushSlaveTimeout {
                stored: Some(_), ..
            }) => Ok(RecallOutcome::Recalled),
            Err(err) => Err(err),
        };
        if stored.is_ok() {
            self.recalled.insert(e.q);
            changed = true;
        }
        (stored, changed)
    }

    /// Records that the entry of due time `at` and timer-queue offset `q` is recalled
    /// (a marker found by indexing): in memory, and as a tombstone in its bucket file.
    fn mark_recalled(&mut self, at: i64, q: u64) {
        if (at, q) <= self.cursor {
            return;
        }
        self.recalled.insert(q);
        let b = bucket_of(at);
        self.unwritten.entry(b).or_default().push(Entry {
            at,
            q,
            log: RECALLED,
        });
        if b > self.loaded_through {
            self.pending_min.entry(b).or_insert(u64::MAX);
        }
    }

    /// Indexes newly held records; whether any were.
    async fn index(&mut self) -> Result<bool, BrokerError> {
        let shard = self.shard()?;
        let (_, write_before) = shard.log_bounds();
        let r = read_timer_queue(shard, self.indexed, INDEX_BATCH).await?;
        match r.status {
            ReadStatus::OffsetMoved => {
                tracing::error!(
                    shard = self.shard_id,
                    from = self.indexed,
                    to = r.next_queue_offset.0,
                    "held records were deleted before the timer indexed them"
                );
                self.indexed = r.next_queue_offset.0;
                return Ok(true);
            }
            ReadStatus::OffsetOverflow => {
                // The queue is shorter than the checkpoint says (a slave cut its tail).
                self.indexed = r.next_queue_offset.0;
                return Ok(true);
            }
            ReadStatus::NoNewMessage
                if r.records.is_empty() && r.next_queue_offset.0 <= self.indexed =>
            {
                self.indexed_log = write_before;
                return Ok(false);
            }
            _ => {}
        }
        let now = self.core.shared.clock.wall_ms();
        let mut last_log = self.indexed_log;
        for s in &r.records {
            let v = match RecordView::parse(s.as_bytes()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            let at = match self
                .rules
                .deliver_at_ms(&v.properties(), v.store_timestamp_ms())
            {
                Ok(Some(at)) => at,
                // Held by the shard's rule, unreadable here: delivered at once.
                _ => now,
            };
            if let Some(target) = v.property(TIMER_RECALL) {
                // A recall marker: never delivered; the entry it names is not either.
                last_log = v.physical_offset();
                if let Ok(q) = target.parse::<u64>() {
                    self.mark_recalled(at, q);
                }
                continue;
            }
            let mut e = Entry {
                at,
                q: v.queue_offset(),
                log: v.physical_offset(),
            };
            last_log = e.log;
            // Found after the cursor passed its time (a restart): due next.
            if (e.at, e.q) <= self.cursor {
                e.at = self.cursor.0;
            }
            self.place(e);
        }
        let progressed = r.next_queue_offset.0 > self.indexed;
        self.indexed = r.next_queue_offset.0.max(self.indexed);
        self.indexed_log = last_log;
        Ok(progressed || !r.records.is_empty())
    }

    fn place(&mut self, e: Entry) {
        let b = bucket_of(e.at);
        self.unwritten.entry(b).or_default().push(e);
        if b <= self.loaded_through {
            if (e.at, e.q) > self.cursor {
                self.due.insert(e);
            }
        } else {
            let m = self.pending_min.entry(b).or_insert(u64::MAX);
            *m = (*m).min(e.log);
        }
    }

    /// Reads the buckets coming due into memory.
    async fn load(&mut self) -> Result<(), BrokerError> {
        let target = bucket_of(self.core.shared.clock.wall_ms() + LOOKAHEAD_MS);
        while self.loaded_through < target {
            let next = self
                .pending_min
                .range(self.loaded_through + 1..=target)
                .next()
                .map(|(&k, _)| k);
            let Some(b) = next else {
                // No entries before the horizon: nothing to read.
                self.loaded_through = target;
                break;
            };
            if self.due.len() >= DUE_MAX {
                self.loaded_through = b - 1;
                break;
            }
            self.loaded_through = b;
            self.pending_min.remove(&b);
            let dir = self.dir.clone();
            let entries = blocking(move || Files::read_bucket(&dir, b)).await?;
            let fresh = self.unwritten.get(&b).cloned().unwrap_or_default();
            for e in entries.into_iter().chain(fresh) {
                if (e.at, e.q) <= self.cursor {
                    continue;
                }
                if e.log == RECALLED {
                    self.recalled.insert(e.q);
                } else {
                    self.due.insert(e);
                }
            }
        }
        Ok(())
    }

    /// Delivers what is due (at most `DELIVER_BATCH` entries); whether anything was.
    async fn deliver(&mut self) -> Result<bool, BrokerError> {
        let now = self.core.shared.clock.wall_ms();
        let batch: Vec<Entry> = self
            .due
            .iter()
            .take_while(|e| e.at <= now)
            .take(DELIVER_BATCH)
            .copied()
            .collect();
        if batch.is_empty() {
            return Ok(false);
        }
        let records = self.read_held(&batch).await?;
        // The copies, in due order; `None`: nothing to send (delivered before, or gone).
        let mut copies: Vec<(Entry, Option<Delivery>)> = Vec::with_capacity(batch.len());
        for e in &batch {
            if self.delivered_before.remove(&e.q) || self.recalled.remove(&e.q) {
                copies.push((*e, None));
                continue;
            }
            let copy = match records.get(&e.q) {
                Some(bytes) => self.copy_of(*e, bytes),
                None => {
                    tracing::error!(
                        shard = self.shard_id,
                        queue_offset = e.q,
                        "a held record cannot be read back (deleted or damaged); it is not delivered"
                    );
                    None
                }
            };
            copies.push((*e, copy));
        }
        // Consecutive copies for one queue go in one append; the cursor moves past each
        // group once it is stored.
        let mut i = 0;
        while i < copies.len() {
            let mut j = i + 1;
            if let Some(first) = &copies[i].1 {
                while j < copies.len()
                    && copies[j]
                        .1
                        .as_ref()
                        .is_some_and(|c| c.topic == first.topic && c.queue_id == first.queue_id)
                {
                    j += 1;
                }
                let mut bytes = Vec::new();
                for (_, c) in &copies[i..j] {
                    if let Some(c) = c {
                        bytes.extend_from_slice(&c.record);
                    }
                }
                self.send(
                    &first.topic,
                    first.queue_id,
                    bytes,
                    (j - i) as u32,
                    copies[i].0,
                )
                .await?;
            }
            for (e, _) in &copies[i..j] {
                self.due.remove(e);
                self.cursor = (e.at, e.q);
            }
            i = j;
        }
        Ok(true)
    }

    /// The held records of `entries` by timer-queue offset: one read per run of
    /// consecutive offsets.
    async fn read_held(&self, entries: &[Entry]) -> Result<HashMap<u64, Bytes>, BrokerError> {
        let shard = self.shard()?;
        let mut wanted: Vec<u64> = entries.iter().map(|e| e.q).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut out = HashMap::with_capacity(wanted.len());
        let mut k = 0;
        while k < wanted.len() {
            let mut end = k + 1;
            while end < wanted.len() && wanted[end] == wanted[end - 1] + 1 {
                end += 1;
            }
            let mut from = wanted[k];
            let last = wanted[end - 1];
            while from <= last {
                let r = read_timer_queue(shard, from, (last - from + 1).min(1024) as u32).await?;
                for s in &r.records {
                    if let Ok(v) = RecordView::parse(s.as_bytes()) {
                        out.insert(v.queue_offset(), Bytes::copy_from_slice(s.as_bytes()));
                    }
                }
                if r.next_queue_offset.0 <= from {
                    break;
                }
                from = r.next_queue_offset.0;
            }
            k = end;
        }
        Ok(out)
    }

    /// The copy to deliver of held record `bytes` (entry `e`), or `None` if it is not one.
    fn copy_of(&self, e: Entry, bytes: &[u8]) -> Option<Delivery> {
        let v = match RecordView::parse(bytes) {
            Ok(v) if v.queue_offset() == e.q => v,
            _ => {
                tracing::error!(
                    shard = self.shard_id,
                    queue_offset = e.q,
                    "the timer queue's entry does not match its record; it is not delivered"
                );
                return None;
            }
        };
        let due = e.at.to_string();
        let from = e.q.to_string();
        let topic = v.topic();
        // As RocketMQ's delivered copy: the properties it was sent with, its timer key
        // too (a consumer's getDelayTimeLevel() is the level), and where it was bound for;
        // a timer message also says when it was stored and delivered. `__TIMER_FROM` marks
        // the copy as delivered, so its key does not hold it again.
        let real_qid =
            crate::numbering::client_queue_id(&self.core, topic, v.queue_id()).to_string();
        let level = v
            .property(message::timer::DELAY)
            .and_then(|l| l.trim().parse::<i64>().ok())
            .filter(|&l| l > 0);
        let delay_level = level.is_some();
        // A level past the last was held for the last, and says so, as RocketMQ's broker
        // rewrites it.
        let levels = self.core.shared.config.retry_delay_levels_ms.len() as i64;
        let capped = level.filter(|&l| l > levels).map(|_| levels.to_string());
        let enqueued = v.store_timestamp_ms().to_string();
        let dequeued = self.core.shared.clock.wall_ms().to_string();
        let set_here = [
            message::prop::CRC,
            TIMER_OUT_MS,
            TIMER_FROM,
            TIMER_ENQUEUE_MS,
            TIMER_DEQUEUE_MS,
            REAL_TOPIC,
            REAL_QID,
        ];
        let mut props: Vec<(&str, &str)> = v
            .properties()
            .iter()
            .filter(|(k, _)| !set_here.contains(k))
            .map(|(k, val)| match (k, &capped) {
                (message::timer::DELAY, Some(last)) => (k, last.as_str()),
                _ => (k, val),
            })
            .collect();
        props.push((REAL_TOPIC, topic));
        props.push((REAL_QID, &real_qid));
        props.push((TIMER_OUT_MS, &due));
        if !delay_level {
            props.push((TIMER_ENQUEUE_MS, &enqueued));
            props.push((TIMER_DEQUEUE_MS, &dequeued));
        }
        props.push((TIMER_FROM, &from));
        let mut record = Vec::with_capacity(v.len() + 48);
        if let Err(err) = encode_record(
            &MessageFields {
                topic: v.topic(),
                body: v.body(),
                flag: v.flag(),
                sys_flag: v.sys_flag(),
                born_timestamp_ms: v.born_timestamp_ms(),
                born_host: Some(v.born_host()),
                reconsume_times: v.reconsume_times(),
                properties: &props,
            },
            &mut record,
        ) {
            tracing::error!(shard = self.shard_id, queue_offset = e.q, error = %err, "a held record cannot be copied; it is not delivered");
            return None;
        }
        Some(Delivery {
            topic: v.topic().to_owned(),
            queue_id: v.queue_id(),
            record,
        })
    }

    /// Appends `count` copies to their queue through the send path.
    async fn send(
        &self,
        topic: &str,
        queue_id: u32,
        records: Vec<u8>,
        count: u32,
        first: Entry,
    ) -> Result<(), BrokerError> {
        match self
            .core
            .send_as_broker(topic, queue_id, Bytes::from(records), count)
            .await
        {
            Ok(_) => Ok(()),
            Err(BrokerError::TopicNotExist(t))
            | Err(BrokerError::QueueNotExist { topic: t, .. }) => {
                tracing::warn!(
                    shard = self.shard_id,
                    topic = %t,
                    queue_offset = first.q,
                    count,
                    "scheduled messages' topic or queue no longer exists; they are dropped"
                );
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// Writes the bucket entries and the checkpoint; moves the retention floor.
    /// The first log offset a record not yet delivered may be at.
    fn floor(&self) -> Result<u64, BrokerError> {
        let (_, log_end) = self.shard()?.log_bounds();
        let due_min = self.due.iter().map(|e| e.log).min().unwrap_or(u64::MAX);
        let pending = self.pending_min.values().copied().min().unwrap_or(u64::MAX);
        Ok(due_min.min(pending).min(self.indexed_log).min(log_end))
    }

    async fn checkpoint(&mut self) -> Result<(), BrokerError> {
        let (_, log_end) = self.shard()?.log_bounds();
        let floor = self.floor()?;
        let ck = Checkpoint {
            indexed: self.indexed,
            cursor: self.cursor,
            log_end,
            floor,
        };
        let mut writes = std::mem::take(&mut self.unwritten);
        // A bucket wholly before the cursor's holds only delivered entries (each is before
        // the cursor): its file goes, and nothing more is written to it.
        let done_below = if self.cursor.0 == i64::MIN {
            i64::MIN
        } else {
            bucket_of(self.cursor.0).min(self.loaded_through + 1)
        };
        writes.retain(|&b, _| b >= done_below);
        let delete: Vec<i64> = self.files.range(..done_below).copied().collect();
        for b in &delete {
            self.files.remove(b);
        }
        self.files.extend(writes.keys().copied());
        let dir = self.dir.clone();
        blocking(move || Files::persist(&dir, writes, ck, delete)).await?;
        self.shard()?.set_retention_floor(floor);
        Ok(())
    }
}

/// The marker that recalls entry `e` (a record of `topic` with `uniq_key`): held for the
/// entry's time, so it lands in the same timer queue; it names the entry's offset there.
fn recall_marker(
    topic: &str,
    uniq_key: &str,
    e: Entry,
    now_ms: i64,
) -> Result<Vec<u8>, BrokerError> {
    let at = e.at.to_string();
    let target = e.q.to_string();
    let del_key = format!("{topic}+{uniq_key}");
    let props: [(&str, &str); 5] = [
        (message::timer::TIMER_DELIVER_MS, &at),
        (TIMER_RECALL, &target),
        (TIMER_DEL_UNIQKEY, &del_key),
        (UNIQ_KEY, uniq_key),
        ("TAGS", RECALL_TAG),
    ];
    let mut record = Vec::with_capacity(256);
    encode_record(
        &MessageFields {
            topic,
            body: b"0",
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: now_ms,
            born_host: None,
            reconsume_times: 0,
            properties: &props,
        },
        &mut record,
    )
    .map_err(|err| BrokerError::Internal(format!("a recall marker cannot be encoded: {err}")))?;
    Ok(record)
}

/// Up to `max` held records of the shard's timer queue from offset `from`.
async fn read_timer_queue(
    shard: &Shard,
    from: u64,
    max: u32,
) -> Result<shard::ReadResult, BrokerError> {
    Ok(shard
        .read(&ReadRequest {
            topic: TIMER_QUEUE_TOPIC,
            queue_id: 0,
            queue_offset: QueueOffset(from),
            max_messages: max,
            max_bytes: 16 << 20,
            filter: &TagFilter::All,
        })
        .await?)
}

/// The log offset of the first record in the timer queue, if it holds any.
async fn first_held_log_offset(shard: &Shard) -> Result<Option<u64>, BrokerError> {
    let q = shard.queue_offsets(TIMER_QUEUE_TOPIC, 0);
    if q.min >= q.max {
        return Ok(None);
    }
    let r = read_timer_queue(shard, q.min.0, 1).await?;
    Ok(match r.records.first() {
        Some(s) => RecordView::parse(s.as_bytes())
            .ok()
            .map(|v| v.physical_offset()),
        // Not readable: read the whole log rather than deliver twice.
        None => Some(shard.log_bounds().0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_handles_are_rocketmqs_url_safe_base64_with_padding() {
        let h = RecallHandle {
            topic: "TopicTest".into(),
            broker_name: "broker-a-c1".into(),
            deliver_at_ms: 1_733_400_000_001,
            uniq_key: "7F0000010001180B4AAC1B7E95F80000".into(),
        };
        let wire = "djEgVG9waWNUZXN0IGJyb2tlci1hLWMxIDE3MzM0MDAwMDAwMDEgN0YwMDAwMDEwMDAxMTgwQjRBQUMxQjdFOTVGODAwMDA=";
        assert_eq!(h.encode(), wire);
        assert_eq!(RecallHandle::decode(wire).unwrap(), h);
        use base64::Engine;
        let b64 = |t: &str| base64::engine::general_purpose::URL_SAFE.encode(t);
        for bad in [
            "not base64!".to_owned(),
            b64("v2 T b 1 K"),
            b64("v1 T b 1"),
            b64("v1 T b x K"),
            b64("v1 T b 1 K extra"),
        ] {
            assert!(
                matches!(
                    RecallHandle::decode(&bad),
                    Err(BrokerError::NotRecallable(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn checkpoint_round_trips_and_refuses_damage() {
        let ck = Checkpoint {
            indexed: 7,
            cursor: (1_700_000_000_123, 5),
            log_end: 4096,
            floor: 12,
        };
        let b = ck.encode();
        assert_eq!(Checkpoint::decode(&b), Ok(ck));
        let mut bad = b.clone();
        bad[3] ^= 1;
        assert!(Checkpoint::decode(&bad).is_err());
        assert!(Checkpoint::decode(&b[..10]).is_err());
    }

    #[test]
    fn bucket_files_keep_whole_entries() {
        let dir = tempfile::tempdir().unwrap();
        let e1 = Entry {
            at: 25_000,
            q: 1,
            log: 100,
        };
        let e2 = Entry {
            at: 29_999,
            q: 2,
            log: 200,
        };
        let ck = Checkpoint {
            indexed: 2,
            cursor: (i64::MIN, 0),
            log_end: 300,
            floor: 100,
        };
        let writes = BTreeMap::from([(2, vec![e1, e2])]);
        Files::persist(dir.path(), writes, ck, Vec::new()).unwrap();
        // A torn entry at the end (a crash mid-write) is left out, and the next write
        // starts whole after the last whole entry.
        let path = Files::bucket_path(dir.path(), 2);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        drop(f);
        assert_eq!(Files::read_bucket(dir.path(), 2).unwrap(), vec![e1, e2]);
        let e3 = Entry {
            at: 21_000,
            q: 3,
            log: 300,
        };
        Files::persist(dir.path(), BTreeMap::from([(2, vec![e3])]), ck, Vec::new()).unwrap();
        assert_eq!(Files::read_bucket(dir.path(), 2).unwrap(), vec![e1, e2, e3]);
        assert_eq!(Files::read_checkpoint(dir.path()).unwrap(), Some(ck));
        assert_eq!(
            Files::list_buckets(dir.path()).unwrap(),
            BTreeSet::from([2])
        );
        Files::persist(dir.path(), BTreeMap::new(), ck, vec![2]).unwrap();
        assert!(Files::list_buckets(dir.path()).unwrap().is_empty());
    }
}
