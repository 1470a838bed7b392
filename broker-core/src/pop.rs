//! POP consumption (RocketMQ 5), kept by the core that owns each queue (ARCHITECTURE.md,
//! "POP consumption").
//!
//! * A pop hands out up to 32 messages of a group's queue and hides each for its invisible
//!   time. Per (group, topic, queue) the owning core keeps a window of the offsets handed out
//!   and not yet passed by the group's consume offset ([`QueueState`]): for each, how often
//!   it was delivered, when it was last popped, for how long it is hidden, and whether it is
//!   acked. The consume offset (the group's ordinary offset in [`crate::groups`]) is the
//!   first offset of the window not acked, or the pop cursor when all are.
//! * An unacked message whose invisible time has passed is delivered again *in place*: the
//!   next pop of its queue hands out the same offset, its attempt + 1, before anything new.
//!   One that was delivered `max_attempts` times goes to `%DLQ%<group>` instead and counts
//!   as acked. Nothing is copied into a retry topic, so everything stays on the queue's shard.
//! * Every change is a record in the shard's own log first, under the internal topic
//!   [`POP_LOG_TOPIC`] (queue id = the shard): a checkpoint (`ck`: the offsets of one pop or
//!   of one change of invisible time, with their delivery counts, pop time and invisible
//!   time) and an ack (`ack`: one offset and the pop time of the handle acked). Replication
//!   ships them as any record. On first use after a start the window is rebuilt by reading
//!   the pop log from the shard's *floor* (stored with the group offsets under
//!   [`POP_GROUP`]): the oldest checkpoint any window entry still depends on.
//! * Memory is bounded: a window holds at most [`WINDOW_MAX`] offsets; a queue whose window
//!   is full hands out only redeliveries until acks or dead letters make room.
//! * Orderly pops (`order`) hand out one batch of a queue at a time: while an entry of the
//!   window is unacked and hidden nothing else of the queue is handed out; once its invisible
//!   time passes, the unacked offsets of the batch are handed out again, in order.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use message::{encode_record, MessageFields, RecordView, TagFilter};
use protocol::{GroupQueue, TopicConfig};
use serde::{Deserialize, Serialize};

use crate::core::Core;
use crate::error::BrokerError;

/// The internal topic of the pop log (RocketMQ's revive topic, here one per shard: queue id
/// = the shard). Not in the topic table, so no route names it and no pull reaches it.
pub const POP_LOG_TOPIC: &str = "rmq_sys_REVIVE_LOG";
/// The internal group whose offset of [`POP_LOG_TOPIC`] is the shard's replay floor.
pub const POP_GROUP: &str = "CID_RMQ_SYS_REVIVE_GROUP";
/// The most messages one pop hands out (RocketMQ's limit).
pub const POP_MESSAGES_MAX: u32 = 32;
/// The most offsets a (group, topic, queue) keeps in its window.
pub const WINDOW_MAX: usize = 1024;
/// The revive queue id of an orderly pop's handles (RocketMQ's POP_ORDER_REVIVE_QUEUE).
pub const ORDER_REVIVE_QID: u32 = 999;
/// The longest a message is hidden (RocketMQ 5's max invisible duration is 12 h; a day
/// leaves room).
pub const INVISIBLE_MS_MAX: u64 = 24 * 3600 * 1000;
/// How long a message is hidden while it goes to the dead letters (longer if that fails).
const DEAD_LETTER_HIDE_MS: u64 = 60_000;
/// Pop-log records read per step of a replay.
const REPLAY_BATCH: u32 = 256;

/// Where a group without a consume offset starts (RocketMQ's initMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitMode {
    /// The queue's oldest stored message.
    #[default]
    Min,
    /// RocketMQ's MAX as its broker applies it (`initPopOffsetByCheckMsgInMem`, on by
    /// default): a queue that still holds its first message (offset 0) is read from there,
    /// as RocketMQ's is while that message is in memory; any other from its last message.
    /// RocketMQ 5's Proxy pops with it.
    Max,
}

/// A pop, as the front ends ask it.
#[derive(Debug, Clone)]
pub struct PopRequest {
    pub group: String,
    pub topic: String,
    /// A queue id (the global one the records carry), or `None`: any queue of the topic that
    /// the serving core owns.
    pub queue_id: Option<u32>,
    /// 1..=[`POP_MESSAGES_MAX`].
    pub max_messages: u32,
    /// How long each message handed out stays hidden (at least 1 ms).
    pub invisible_ms: u64,
    /// How long to wait when nothing is visible (long polling; capped by
    /// `long_polling_max_ms`).
    pub poll_ms: u64,
    pub init_mode: InitMode,
    /// A tag expression (`*`, `TagA || TagB`).
    pub tag_expression: String,
    /// A SQL92 expression the messages' properties must match, when given.
    pub sql92: Option<String>,
    /// FIFO: one outstanding batch per queue.
    pub order: bool,
    pub attempt_id: Option<String>,
    /// How many deliveries a message gets before it goes to `%DLQ%<group>` (0: no limit).
    pub max_attempts: u32,
    /// The group's `priority.factor` (0-100): the share of its pops of any queue of a
    /// PRIORITY topic that read the core's queues from the highest priority down
    /// ([`crate::priority`]).
    pub priority_factor: u32,
}

/// One message handed out.
#[derive(Debug, Clone)]
pub struct PoppedMessage {
    /// The stored record, as `pull` serves it, its reconsume times set to `attempt - 1`.
    pub record: Bytes,
    pub receipt_handle: String,
    /// 1 on the first delivery; a record that carries failures (a dead letter) goes on from
    /// them, as RocketMQ counts.
    pub attempt: u32,
    pub queue_id: u32,
    pub queue_offset: u64,
}

/// A pop's answer (what the remoting POP response header needs, and the messages).
#[derive(Debug, Clone, Default)]
pub struct Popped {
    pub pop_time_ms: i64,
    pub invisible_ms: u64,
    /// The first message's revive queue id (its shard's, or [`ORDER_REVIVE_QID`] for an
    /// orderly pop); each handle carries its own.
    pub revive_qid: u32,
    pub messages: Vec<PoppedMessage>,
    /// (queue id, first offset handed out) per queue read: RocketMQ's startOffsetInfo.
    pub start_offsets: Vec<(u32, u64)>,
    /// (queue id, offsets handed out) per queue read: RocketMQ's msgOffsetInfo.
    pub message_offsets: Vec<(u32, Vec<u64>)>,
    /// Messages of the queues read left after this pop (RocketMQ's restNum).
    pub rest: u64,
}

impl Popped {
    fn merge(&mut self, other: Popped) {
        if self.messages.is_empty() {
            self.pop_time_ms = other.pop_time_ms;
            self.invisible_ms = other.invisible_ms;
            self.revive_qid = other.revive_qid;
        }
        self.messages.extend(other.messages);
        self.start_offsets.extend(other.start_offsets);
        self.message_offsets.extend(other.message_offsets);
        self.rest += other.rest;
    }
}

/// A receipt handle, in Apache's text form (`ExtraInfoUtil`): `ckQueueOffset popTime
/// invisibleTime reviveQid retryFlag brokerName queueId queueOffset [commitLogOffset]`.
/// It comes back from clients, so [`ReceiptHandle::parse`] checks every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptHandle {
    pub ck_queue_offset: u64,
    pub pop_time_ms: i64,
    pub invisible_ms: u64,
    pub revive_qid: u32,
    pub retry_flag: u8,
    pub broker_name: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    /// The message's CommitLog offset (shard in the top bits, as message ids have it).
    pub commit_log_offset: Option<u64>,
}

impl ReceiptHandle {
    pub fn parse(text: &str) -> Result<ReceiptHandle, BrokerError> {
        let bad = |why: String| {
            BrokerError::BadRequest(format!(
                "receipt handle `{}`: {why}",
                text.chars().take(200).collect::<String>()
            ))
        };
        if text.len() > 512 {
            return Err(bad(format!("{} bytes is too long", text.len())));
        }
        let fields: Vec<&str> = text.split(' ').collect();
        if fields.len() != 8 && fields.len() != 9 {
            return Err(bad(format!(
                "{} space-separated fields, not 8 or 9",
                fields.len()
            )));
        }
        fn num<T: std::str::FromStr>(fields: &[&str], i: usize, name: &str) -> Result<T, String> {
            fields[i].parse::<T>().map_err(|_| {
                format!(
                    "field {} ({name}) `{}` is not a valid number",
                    i + 1,
                    fields[i]
                )
            })
        }
        let h = ReceiptHandle {
            ck_queue_offset: num(&fields, 0, "ckQueueOffset").map_err(bad)?,
            pop_time_ms: num(&fields, 1, "popTime").map_err(bad)?,
            invisible_ms: num(&fields, 2, "invisibleTime").map_err(bad)?,
            revive_qid: num(&fields, 3, "reviveQid").map_err(bad)?,
            retry_flag: num(&fields, 4, "retryFlag").map_err(bad)?,
            broker_name: fields[5].to_owned(),
            queue_id: num(&fields, 6, "queueId").map_err(bad)?,
            queue_offset: num(&fields, 7, "queueOffset").map_err(bad)?,
            commit_log_offset: match fields.get(8) {
                Some(_) => Some(num(&fields, 8, "commitLogOffset").map_err(bad)?),
                None => None,
            },
        };
        if h.broker_name.is_empty() {
            return Err(bad("the broker name is empty".into()));
        }
        if h.pop_time_ms <= 0 {
            return Err(bad("the pop time is not positive".into()));
        }
        if h.retry_flag != 0 {
            return Err(bad(format!(
                "retry flag {} names a retry topic, and this broker hands out none",
                h.retry_flag
            )));
        }
        if h.ck_queue_offset > h.queue_offset {
            return Err(bad(
                "the checkpoint offset is past the message's offset".into()
            ));
        }
        Ok(h)
    }

    /// The handle's expiry (pop time + invisible time), in wall-clock ms.
    pub fn visible_at_ms(&self) -> i64 {
        visible_at_ms(self.pop_time_ms, self.invisible_ms)
    }
}

impl std::fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {} {}",
            self.ck_queue_offset,
            self.pop_time_ms,
            self.invisible_ms,
            self.revive_qid,
            self.retry_flag,
            self.broker_name,
            self.queue_id,
            self.queue_offset
        )?;
        if let Some(c) = self.commit_log_offset {
            write!(f, " {c}")?;
        }
        Ok(())
    }
}

/// One offset of a window.
#[derive(Debug, Clone)]
struct Entry {
    /// How often it was handed out.
    delivered: u32,
    pop_time_ms: i64,
    invisible_ms: u64,
    /// The pop-log offset of the checkpoint that handed it out last; `None` when none did
    /// (its checkpoint could not be written).
    ck_log: Option<u64>,
    /// Its record's offset in the shard's CommitLog.
    commit_log_offset: u64,
    acked: bool,
}

impl Entry {
    fn visible_at_ms(&self) -> i64 {
        visible_at_ms(self.pop_time_ms, self.invisible_ms)
    }

    fn hidden(&self, now_ms: i64) -> bool {
        !self.acked && self.visible_at_ms() > now_ms
    }
}

/// One (group, topic, queue)'s pop state on the queue's core.
#[derive(Debug, Default)]
struct QueueState {
    /// The group's consume offset: every offset below is acked, dead-lettered or filtered
    /// out.
    consumed: u64,
    /// The next offset a pop reads new messages from. A replay puts it back at the consume
    /// offset: the offsets of the window not in it (filtered out, or never handed out
    /// because their checkpoint was not written) are read again, the ones in it are
    /// stepped over.
    cursor: u64,
    /// The offsets from `consumed` handed out (the window).
    entries: BTreeMap<u64, Entry>,
    /// The attempt id of the orderly batch handed out last.
    batch_attempt: Option<String>,
    /// [`QueueState::ck_floor`] as of the last change of the queue.
    ck_min: Option<u64>,
}

impl QueueState {
    /// Drops the acked entries at the window's start and moves the consume offset.
    fn compact(&mut self) {
        while let Some(e) = self.entries.first_entry() {
            // One at or past the cursor stays until the cursor passes it, so that a read
            // from the cursor knows to step over it.
            if !e.get().acked || *e.key() >= self.cursor {
                break;
            }
            e.remove();
        }
        // The cursor is below the window's entries after a replay, until the gap is read
        // again (`QueueState::cursor`).
        let first = self.entries.keys().next().copied().unwrap_or(self.cursor);
        self.consumed = first.min(self.cursor);
    }

    fn ck_floor(&self) -> Option<u64> {
        self.entries.values().filter_map(|e| e.ck_log).min()
    }

    fn unacked(&self) -> usize {
        self.entries.values().filter(|e| !e.acked).count()
    }

    /// The earliest time an unacked hidden entry becomes visible.
    fn next_visible_ms(&self, now_ms: i64) -> Option<i64> {
        self.entries
            .values()
            .filter(|e| e.hidden(now_ms))
            .map(Entry::visible_at_ms)
            .min()
    }
}

type QueueKey = (String, String, u32);

/// One shard's pop state.
#[derive(Default)]
struct ShardPop {
    /// The master epoch of the shard in which the windows were rebuilt from the pop log.
    /// Only a master keeps them: a slave's log grows by its master's stream, which the
    /// windows do not follow, so a core that becomes master (a new epoch) rebuilds them
    /// from all the log then holds.
    loaded: Option<u32>,
    queues: HashMap<QueueKey, QueueState>,
    /// The pop log's end when each checkpoint being written started: the floor stays at or
    /// below them until their entries know where the checkpoints went.
    pending: Vec<u64>,
}

/// Every local shard's pop state (on its core).
#[derive(Default)]
pub struct PopState {
    shards: RefCell<HashMap<u16, ShardPop>>,
    /// Pops of any queue of a PRIORITY topic so far: each one's sample against the group's
    /// `priority.factor` is this count mod 100, as RocketMQ's PopConsumerService samples.
    priority_pops: std::cell::Cell<u32>,
}

/// A record of the pop log (JSON body; short names as RocketMQ's PopCheckPoint).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "k")]
enum LogRecord {
    /// Offsets handed out (or hidden anew) at `pt` for `it` ms: (offset, times delivered,
    /// CommitLog offset).
    #[serde(rename = "ck")]
    Ck {
        c: String,
        t: String,
        q: u32,
        pt: i64,
        it: u64,
        o: Vec<(u64, u32, u64)>,
    },
    /// The offset's delivery of pop time `pt` is done (acked or dead-lettered).
    #[serde(rename = "ack")]
    Ack {
        c: String,
        t: String,
        q: u32,
        pt: i64,
        o: u64,
    },
}

fn floor_key(shard: u16) -> GroupQueue {
    GroupQueue {
        group: POP_GROUP.to_owned(),
        topic: POP_LOG_TOPIC.to_owned(),
        queue_id: u32::from(shard),
    }
}

fn group_key(k: &QueueKey) -> GroupQueue {
    GroupQueue {
        group: k.0.clone(),
        topic: k.1.clone(),
        queue_id: k.2,
    }
}

/// The group's dead-letter topic.
pub fn dead_letter_topic(group: &str) -> String {
    format!("%DLQ%{group}")
}

/// When a message popped at `pop_time_ms` and hidden for `invisible_ms` is visible again
/// (wall-clock ms).
pub(crate) fn visible_at_ms(pop_time_ms: i64, invisible_ms: u64) -> i64 {
    pop_time_ms.saturating_add(i64::try_from(invisible_ms).unwrap_or(i64::MAX))
}

/// Refuses a consumer group or topic name no pop can name.
pub(crate) fn check_names(group: &str, topic: &str) -> Result<(), BrokerError> {
    if group.is_empty() || group.len() > 255 || group.contains(char::is_whitespace) {
        return Err(BrokerError::BadRequest(
            "consumer group must be 1..=255 bytes without spaces".into(),
        ));
    }
    if topic.is_empty() || topic.len() > 255 {
        return Err(BrokerError::BadRequest(
            "topic must be 1..=255 bytes".into(),
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ the kernel's API

impl Core {
    /// Pops up to `max_messages` of `req.topic` for `req.group`: from one queue (served by
    /// its core), or from the queues of the topic this core owns. Waits up to `poll_ms` when
    /// nothing is visible.
    pub async fn pop(&self, req: PopRequest) -> Result<Popped, BrokerError> {
        check_names(&req.group, &req.topic)?;
        // Every pop writes its checkpoint: a slave serves none.
        self.check_master()?;
        if req.max_messages == 0 || req.max_messages > POP_MESSAGES_MAX {
            return Err(BrokerError::BadRequest(format!(
                "max messages {} is outside 1..={POP_MESSAGES_MAX}",
                req.max_messages
            )));
        }
        if req.invisible_ms > INVISIBLE_MS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "invisible time {} ms is over {INVISIBLE_MS_MAX} ms",
                req.invisible_ms
            )));
        }
        if let Some(e) = &req.sql92 {
            self.check_sql92(e)?;
        }
        self.check_broker_permission(protocol::perm::READ)?;
        let cfg = self.topic_for_read(&req.topic)?;
        if cfg.perm & protocol::perm::READ == 0 {
            return Err(BrokerError::NoPermission(format!(
                "the topic[{}] pulling message is forbidden",
                req.topic
            )));
        }
        let queues = cfg.read_queues.max(cfg.write_queues);
        let priority_topic = crate::priority::is_priority_topic(&self.topics.borrow(), &req.topic);
        let popped = match req.queue_id {
            Some(q) => {
                if q >= queues {
                    return Err(BrokerError::QueueNotExist {
                        topic: req.topic.clone(),
                        queue_id: q,
                        queues,
                    });
                }
                let (shard, core) = self.owner(&req.topic, q);
                if core == self.id {
                    let popped = pop_local(self, shard, q, &req).await?;
                    self.count_popped(&req.topic, &req.group, &popped);
                    popped
                } else {
                    // Another core's queue: the request goes there whole, so the names the
                    // stats need are kept first.
                    let (topic, group) = (req.topic.clone(), req.group.clone());
                    let popped = self
                        .at_shard(shard, crate::mesh::PopQueue { queue_id: q, req })
                        .await?;
                    self.count_popped(&topic, &group, &popped);
                    popped
                }
            }
            None => {
                let popped = self.pop_owned(&req, &cfg, priority_topic).await?;
                self.count_popped(&req.topic, &req.group, &popped);
                popped
            }
        };
        if priority_topic {
            for m in &popped.messages {
                if let Some(p) = crate::priority::record_priority(&m.record) {
                    self.priority.count_delivered(p);
                }
            }
        }
        Ok(popped)
    }

    /// Counts the messages a pop of `group` on `topic` handed out as a pull's are counted
    /// (RocketMQ's GROUP_GET stats, the consumed totals).
    fn count_popped(&self, topic: &str, group: &str, popped: &Popped) {
        if popped.messages.is_empty() {
            return;
        }
        let count = popped.messages.len() as u64;
        let bytes: u64 = popped.messages.iter().map(|m| m.record.len() as u64).sum();
        let stats = &self.stats;
        stats
            .consumed_messages
            .set(stats.consumed_messages.get().saturating_add(count));
        stats
            .consumed_bytes
            .set(stats.consumed_bytes.get().saturating_add(bytes));
        self.broker_stats
            .borrow_mut()
            .got(topic, group, count, bytes);
    }

    /// Acks the message of `handle`: it is not delivered again. A handle whose message was
    /// acked already, delivered again since, or hidden anew (`change_invisible`) is refused.
    pub async fn ack(&self, group: &str, topic: &str, handle: &str) -> Result<(), BrokerError> {
        let (shard, h) = self.handle_for(group, topic, handle)?;
        let op = crate::mesh::PopAck {
            group: group.to_owned(),
            topic: topic.to_owned(),
            handle: h,
            dead_letter: false,
        };
        self.at_shard(shard, op).await
    }

    /// Sends the message of `handle` to `%DLQ%<group>` and acks it: a consumer that gave it
    /// up (a FIFO consumer after its own retries). Refused as [`Core::ack`] refuses.
    pub async fn dead_letter(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
    ) -> Result<(), BrokerError> {
        let (shard, h) = self.handle_for(group, topic, handle)?;
        let op = crate::mesh::PopAck {
            group: group.to_owned(),
            topic: topic.to_owned(),
            handle: h,
            dead_letter: true,
        };
        self.at_shard(shard, op).await
    }

    /// Hides the message of `handle` for `invisible_ms` from now; the answer is its new
    /// handle (new pop time and invisible time), and the old one stops working.
    pub async fn change_invisible(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        invisible_ms: u64,
    ) -> Result<String, BrokerError> {
        if invisible_ms > INVISIBLE_MS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "invisible time {invisible_ms} ms is over {INVISIBLE_MS_MAX} ms"
            )));
        }
        let (shard, h) = self.handle_for(group, topic, handle)?;
        let op = crate::mesh::PopChangeInvisible {
            group: group.to_owned(),
            topic: topic.to_owned(),
            handle: h,
            invisible_ms,
        };
        self.at_shard(shard, op).await
    }

    /// Messages of `group` popped from `topic` and not acked (hidden, or visible again and
    /// not yet handed out again), over every core.
    pub async fn pop_inflight(&self, group: &str, topic: &str) -> Result<u64, BrokerError> {
        let mut n = 0;
        for core in 0..self.shared.cores {
            let op = crate::mesh::PopInflight {
                group: group.to_owned(),
                topic: topic.to_owned(),
            };
            n += Box::pin(self.at_core(core, op)).await?;
        }
        Ok(n)
    }

    /// The broker name RocketMQ clients know core `core` by.
    pub(crate) fn core_name(&self, core: u16) -> String {
        protocol::core_view::core_broker_name(
            &self.shared.config.broker_name,
            core,
            self.shared.cores,
        )
    }

    /// A client's handle, checked against the topic: its queue exists and the broker name
    /// is that of the queue's core. Returns the queue's shard.
    fn handle_for(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
    ) -> Result<(u16, ReceiptHandle), BrokerError> {
        check_names(group, topic)?;
        self.check_master()?;
        let h = ReceiptHandle::parse(handle)?;
        let cfg = self.topic_for_read(topic)?;
        let queues = cfg.read_queues.max(cfg.write_queues);
        if h.queue_id >= queues {
            return Err(BrokerError::BadRequest(format!(
                "receipt handle names queue {} of topic {topic}, which has {queues}",
                h.queue_id
            )));
        }
        let (shard, core) = self.owner(topic, h.queue_id);
        let name = self.core_name(core);
        if h.broker_name != name {
            return Err(BrokerError::BadRequest(format!(
                "receipt handle names broker {}, but queue {} of topic {topic} is served by {name}",
                h.broker_name, h.queue_id
            )));
        }
        if h.revive_qid != u32::from(shard) && h.revive_qid != ORDER_REVIVE_QID {
            return Err(BrokerError::BadRequest(format!(
                "receipt handle names revive queue {}, not one of this broker's",
                h.revive_qid
            )));
        }
        if let Some(c) = h.commit_log_offset {
            if c >> message::ids::LOCAL_OFFSET_BITS != u64::from(shard) {
                return Err(BrokerError::BadRequest(format!(
                    "receipt handle's CommitLog offset {c} is not in the queue's shard"
                )));
            }
        }
        Ok((shard, h))
    }

    /// A pop of any queue of the topic this core owns: the queues in turn, from a different
    /// one each time, until the batch is full; when none has anything, waits (long polling)
    /// on the first queue's shard for any of them. A pop served by priority (a PRIORITY
    /// topic, see [`crate::priority`]) reads them from the highest priority down instead.
    async fn pop_owned(
        &self,
        req: &PopRequest,
        cfg: &TopicConfig,
        priority_topic: bool,
    ) -> Result<Popped, BrokerError> {
        let ids = crate::numbering::CoreQueues::of(self, &req.topic, cfg, self.id).ids;
        if ids.is_empty() {
            return Err(BrokerError::QueueNotExist {
                topic: req.topic.clone(),
                queue_id: u32::MAX,
                queues: 0,
            });
        }
        let wait_ms = req.poll_ms.min(self.config().long_polling_max_ms);
        let deadline = self.shared.clock.now() + Duration::from_millis(wait_ms);
        let start = self.queue_numbers.next_turn() as usize;
        let by_priority = priority_topic && !req.order && {
            let pops = &self.pop.priority_pops;
            let sample = pops.get();
            pops.set(sample.wrapping_add(1));
            crate::priority::by_priority(true, false, sample % 100, req.priority_factor)
        };
        // The order the queues are read in: by priority, the core's last queue (its highest
        // priority) first, down to its first; else from `start` round.
        let nth = |i: usize| {
            if by_priority {
                ids[ids.len() - 1 - i]
            } else {
                ids[(start + i) % ids.len()]
            }
        };
        // Bounded: each round either answers or waits for an append or a deadline.
        for _ in 0..10_000 {
            // One pop time for every queue of the answer: a remoting client builds each
            // message's handle from the one popTime of the response header, and the state
            // the handles name then holds that time wherever it is read from (a restart, the
            // slave that took over).
            let now_ms = self.shared.clock.wall_ms();
            let mut out = Popped {
                pop_time_ms: now_ms,
                invisible_ms: req.invisible_ms.max(1),
                ..Default::default()
            };
            let mut next_visible: Option<i64> = None;
            for i in 0..ids.len() {
                let q = nth(i);
                let room = req.max_messages - out.messages.len() as u32;
                if room == 0 {
                    break;
                }
                let (shard, _) = self.owner(&req.topic, q);
                let mut one = req.clone();
                one.max_messages = room;
                let got = pop_queue(self, shard, q, &one, now_ms).await?;
                next_visible = min_opt(next_visible, got.1);
                out.merge(got.0);
            }
            let now = self.shared.clock.now();
            if !out.messages.is_empty() || now >= deadline || self.shared.stopping() {
                return Ok(out);
            }
            let first = nth(0);
            let (shard, _) = self.owner(&req.topic, first);
            let mut wait = deadline - now;
            if let Some(at) = next_visible {
                let until = (at - self.shared.clock.wall_ms()).max(1) as u64;
                wait = wait.min(Duration::from_millis(until));
            }
            // The appends of one shard wake the wait: with the topic's queues of this core
            // on several shards, the others are looked at again every `POLL_SLICE`.
            if ids.iter().any(|&q| self.owner(&req.topic, q).0 != shard) {
                wait = wait.min(POLL_SLICE);
            }
            let sh = self.local_shard(shard)?;
            let watched: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&q| self.owner(&req.topic, q).0 == shard)
                .collect();
            let cursors: Vec<(u32, u64)> = watched
                .iter()
                .filter_map(|&q| Some((q, wait_point(self, shard, req, q)?)))
                .collect();
            if cursors.is_empty() {
                glommio::timer::sleep(wait.min(POLL_SLICE)).await;
                continue;
            }
            let topic = req.topic.clone();
            sh.wait_appended_until(wait, || {
                cursors
                    .iter()
                    .any(|&(q, c)| sh.visible_max(&topic, q).0 > c)
                    || visible_sooner(self, shard, req, &watched, next_visible)
            })
            .await;
        }
        Ok(Popped::default())
    }

    /// `group`'s POP window on `topic`'s queue `queue_id` as this core holds it: the next
    /// offset to hand out, and the messages handed out and not acked (in flight). `None`
    /// when the queue is another core's or the group has not popped it since the start.
    pub fn pop_window(&self, group: &str, topic: &str, queue_id: u32) -> Option<(u64, u64)> {
        let (shard, core) = self.owner(topic, queue_id);
        if core != self.id {
            return None;
        }
        let st = self.pop.shards.borrow();
        let q = st
            .get(&shard)?
            .queues
            .get(&(group.to_owned(), topic.to_owned(), queue_id))?;
        let inflight = q.entries.values().filter(|e| !e.acked).count() as u64;
        Some((q.cursor, inflight))
    }

    /// Every POP window this core holds as master: (group, topic, queue id, in flight).
    pub fn pop_windows(&self) -> Vec<(String, String, u32, u64)> {
        let st = self.pop.shards.borrow();
        st.iter()
            .filter(|(&shard, sp)| sp.loaded.is_some() && sp.loaded == self.master_epoch(shard))
            .flat_map(|(_, s)| s.queues.iter())
            .map(|((g, t, q), w)| {
                let inflight = w.entries.values().filter(|e| !e.acked).count() as u64;
                (g.clone(), t.clone(), *q, inflight)
            })
            .collect()
    }

    fn pop_cursor(&self, shard: u16, group: &str, topic: &str, q: u32) -> u64 {
        self.pop
            .shards
            .borrow()
            .get(&shard)
            .and_then(|s| s.queues.get(&(group.to_owned(), topic.to_owned(), q)))
            .map_or(0, |st| st.cursor)
    }
}

/// How long a long poll sleeps between looks when no append can wake it (an orderly batch
/// is out, the window is full, or the queues are on several shards).
const POLL_SLICE: Duration = Duration::from_millis(100);

/// The queue offset whose arrival a waiting pop of `q` waits for; `None` when new messages
/// cannot be handed out now (an orderly batch is out, or the window is full): only time or
/// an ack changes that.
fn wait_point(core: &Core, shard: u16, req: &PopRequest, q: u32) -> Option<u64> {
    let st = core.pop.shards.borrow();
    let Some(qs) = st
        .get(&shard)
        .and_then(|s| s.queues.get(&(req.group.clone(), req.topic.clone(), q)))
    else {
        return Some(0);
    };
    let now_ms = core.shared.clock.wall_ms();
    let blocked = (req.order && qs.entries.values().any(|e| e.hidden(now_ms)))
        || qs.entries.len() >= WINDOW_MAX;
    (!blocked).then_some(qs.cursor)
}

/// Whether a hidden message of `queues` (of `shard`, in `req`'s group) now becomes visible
/// before `than`, the earliest a waiting pop knew of: a change of invisible time (its
/// checkpoint is appended to the shard, which wakes the wait) can bring it forward.
fn visible_sooner(
    core: &Core,
    shard: u16,
    req: &PopRequest,
    queues: &[u32],
    than: Option<i64>,
) -> bool {
    let now_ms = core.shared.clock.wall_ms();
    let st = core.pop.shards.borrow();
    let Some(sp) = st.get(&shard) else {
        return false;
    };
    queues
        .iter()
        .filter_map(|&q| {
            sp.queues
                .get(&(req.group.clone(), req.topic.clone(), q))?
                .next_visible_ms(now_ms)
        })
        .min()
        .is_some_and(|at| than.is_none_or(|t| at < t))
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

// ------------------------------------------------------------------ on the queue's core

/// Serves a pop of one queue on its core, long polling up to the request's poll time.
pub(crate) async fn pop_local(
    core: &Core,
    shard: u16,
    queue_id: u32,
    req: &PopRequest,
) -> Result<Popped, BrokerError> {
    let wait_ms = req.poll_ms.min(core.config().long_polling_max_ms);
    let clock = &core.shared.clock;
    let deadline = clock.now() + Duration::from_millis(wait_ms);
    // Bounded: each round either answers or waits for an append or a deadline.
    for _ in 0..10_000 {
        let now_ms = clock.wall_ms();
        let (popped, next_visible) = pop_queue(core, shard, queue_id, req, now_ms).await?;
        let now = clock.now();
        if !popped.messages.is_empty() || now >= deadline || core.shared.stopping() {
            return Ok(popped);
        }
        let mut wait = deadline - now;
        if let Some(at) = next_visible {
            let until = (at - clock.wall_ms()).max(1) as u64;
            wait = wait.min(Duration::from_millis(until));
        }
        match wait_point(core, shard, req, queue_id) {
            Some(cursor) => {
                let sh = core.local_shard(shard)?;
                sh.wait_appended_until(wait, || {
                    sh.visible_max(&req.topic, queue_id).0 > cursor
                        || visible_sooner(core, shard, req, &[queue_id], next_visible)
                })
                .await;
            }
            None => glommio::timer::sleep(wait.min(POLL_SLICE)).await,
        }
    }
    Ok(Popped::default())
}

/// The queue's state, created with the group's stored offset (or `init` for a group
/// without one, stored at once).
fn state_mut<'a>(
    core: &Core,
    sp: &'a mut ShardPop,
    shard: u16,
    key: &QueueKey,
    init: InitMode,
) -> &'a mut QueueState {
    sp.queues.entry(key.clone()).or_insert_with(|| {
        let stored = core
            .offsets
            .get(&shard)
            .and_then(|t| t.borrow().query(&group_key(key)).map(|s| s.offset));
        let start = stored.unwrap_or_else(|| {
            let o = core
                .shards
                .get(&shard)
                .map(|sh| sh.queue_offsets(&key.1, key.2))
                .unwrap_or_default();
            let at = match init {
                InitMode::Min => o.min.0,
                InitMode::Max if o.min.0 == 0 => 0,
                InitMode::Max => o.max.0.saturating_sub(1).max(o.min.0),
            };
            if let Some(t) = core.offsets.get(&shard) {
                t.borrow_mut()
                    .commit(&group_key(key), at, crate::groups::EPOCH_ANY, "", false);
            }
            at
        });
        QueueState {
            consumed: start,
            cursor: start,
            entries: BTreeMap::new(),
            batch_attempt: None,
            ck_min: None,
        }
    })
}

/// Stores the queue's consume offset and the shard's replay floor after a change.
fn settle(core: &Core, shard: u16, key: &QueueKey) {
    let (consumed, floor) = {
        let mut st = core.pop.shards.borrow_mut();
        let Some(sp) = st.get_mut(&shard) else {
            return;
        };
        let consumed = sp.queues.get_mut(key).map(|q| {
            q.compact();
            q.ck_min = q.ck_floor();
            q.consumed
        });
        let floor = sp
            .queues
            .values()
            .filter_map(|q| q.ck_min)
            .chain(sp.pending.iter().copied())
            .min();
        (consumed, floor)
    };
    let Some(table) = core.offsets.get(&shard) else {
        return;
    };
    let mut t = table.borrow_mut();
    let any = crate::groups::EPOCH_ANY;
    if let Some(c) = consumed {
        if t.query(&group_key(key)).is_none_or(|s| s.offset < c) {
            t.commit(&group_key(key), c, any, "", false);
        }
    }
    let floor = floor.unwrap_or_else(|| {
        core.shards.get(&shard).map_or(0, |sh| {
            sh.queue_offsets(POP_LOG_TOPIC, u32::from(shard)).max.0
        })
    });
    t.commit(&floor_key(shard), floor, any, "", false);
}

/// A claimed offset of this pop.
struct Claim {
    offset: u64,
    delivered: u32,
    commit_log_offset: u64,
    record: Option<Bytes>,
    /// The delivery's pop time and invisible time (its handle's).
    pop_time_ms: i64,
    invisible_ms: u64,
}

/// One round of a pop of one queue: what it hands out, and when the next hidden entry of
/// the queue becomes visible.
async fn pop_queue(
    core: &Core,
    shard: u16,
    queue_id: u32,
    req: &PopRequest,
    now_ms: i64,
) -> Result<(Popped, Option<i64>), BrokerError> {
    ensure_loaded(core, shard).await?;
    let sh = core.local_shard(shard)?;
    let key: QueueKey = (req.group.clone(), req.topic.clone(), queue_id);
    let invisible_ms = req.invisible_ms.max(1);
    let max = req.max_messages.clamp(1, POP_MESSAGES_MAX) as usize;
    // Claimed at once, before any wait, so that a pop running beside this one never takes
    // the same offsets.
    let mut claims: Vec<Claim> = Vec::new();
    let mut dead: Vec<(u64, u32, u64)> = Vec::new();
    // An orderly batch that is out, handed out again to the same attempt.
    let mut again: Option<(Vec<Claim>, Option<i64>)> = None;
    let (read_from, room, ahead, next_visible) = 'claim: {
        let mut st = core.pop.shards.borrow_mut();
        let sp = st.entry(shard).or_default();
        let q = state_mut(core, sp, shard, &key, req.init_mode);
        // Retention took messages from under the window: they are gone for every reader.
        let min = sh.queue_offsets(&req.topic, queue_id).min.0;
        if q.consumed < min {
            q.entries = q.entries.split_off(&min);
            q.cursor = q.cursor.max(min);
            q.consumed = min;
        }
        if req.order && q.entries.values().any(|e| e.hidden(now_ms)) {
            let nv = q.next_visible_ms(now_ms);
            // The same receive tried again (its answer lost): the batch that is out, with
            // the handles it had.
            let same_attempt = req.attempt_id.is_some() && q.batch_attempt == req.attempt_id;
            if !same_attempt {
                return Ok((empty(req, shard, now_ms, invisible_ms), nv));
            }
            let batch: Vec<Claim> = q
                .entries
                .iter()
                .filter(|(_, e)| e.hidden(now_ms))
                .map(|(&offset, e)| Claim {
                    offset,
                    delivered: e.delivered,
                    commit_log_offset: e.commit_log_offset,
                    record: None,
                    pop_time_ms: e.pop_time_ms,
                    invisible_ms: e.invisible_ms,
                })
                .collect();
            again = Some((batch, nv));
            break 'claim (0, 0, 0, nv);
        }
        for (&offset, e) in q.entries.iter_mut() {
            if claims.len() + dead.len() >= max {
                break;
            }
            if e.acked || e.hidden(now_ms) {
                continue;
            }
            if req.max_attempts > 0 && e.delivered >= req.max_attempts {
                // Hidden while it goes to the dead letters; its pop time stays that of its
                // checkpoint, which the ack record names.
                let hidden_for = now_ms.saturating_sub(e.pop_time_ms).max(0) as u64;
                e.invisible_ms = hidden_for.saturating_add(DEAD_LETTER_HIDE_MS);
                dead.push((offset, e.delivered, e.commit_log_offset));
                continue;
            }
            // Visible means its invisible time (at least 1 ms) has passed, so `now_ms` is
            // past its last pop time: every delivery has a pop time of its own.
            debug_assert!(now_ms > e.pop_time_ms);
            e.delivered += 1;
            e.pop_time_ms = now_ms;
            e.invisible_ms = invisible_ms;
            claims.push(Claim {
                offset,
                delivered: e.delivered,
                commit_log_offset: e.commit_log_offset,
                record: None,
                pop_time_ms: now_ms,
                invisible_ms,
            });
        }
        // An orderly queue hands out its batch again before anything new.
        let redelivering = req.order && (!claims.is_empty() || !dead.is_empty());
        let room = if redelivering {
            0
        } else {
            (max - claims.len() - dead.len()).min(WINDOW_MAX.saturating_sub(q.entries.len()))
        };
        // Entries at or past the cursor (after a replay) are read again and stepped over.
        let ahead = q.entries.range(q.cursor..).count();
        (q.cursor, room, ahead, q.next_visible_ms(now_ms))
    };
    if let Some((mut batch, nv)) = again {
        for c in batch.iter_mut() {
            c.record = sh
                .read_at(shard::CommitLogOffset(c.commit_log_offset))
                .await?
                .map(|s| s.to_bytes());
        }
        batch.retain(|c| c.record.is_some());
        return Ok((answer(core, shard, queue_id, req, now_ms, &batch), nv));
    }
    if room > 0 {
        let filter = TagFilter::parse(&req.tag_expression);
        let sql92 = match &req.sql92 {
            Some(e) => Some(core.sql92.get(e)?),
            None => None,
        };
        let r = sh
            .read(&shard::ReadRequest {
                topic: &req.topic,
                queue_id,
                queue_offset: shard::QueueOffset(read_from),
                max_messages: (room + ahead) as u32,
                max_bytes: u32::try_from(core.config().pull_batch_bytes_max).unwrap_or(u32::MAX),
                filter: &filter,
            })
            .await?;
        let mut st = core.pop.shards.borrow_mut();
        let sp = st.entry(shard).or_default();
        let q = state_mut(core, sp, shard, &key, req.init_mode);
        // Another pop of the queue may have read meanwhile: only what it did not take, and
        // for an orderly queue nothing if it handed out a batch.
        let taken_by_other = q.cursor > read_from;
        let orderly_blocked = req.order && q.entries.values().any(|e| e.hidden(now_ms));
        if !(orderly_blocked || req.order && taken_by_other) {
            // Past the last record looked at: where the next read starts.
            let mut next = r.next_queue_offset.0;
            let mut taken = 0;
            for s in &r.records {
                let Ok(v) = RecordView::parse(s.as_bytes()) else {
                    continue;
                };
                let offset = v.queue_offset();
                if offset < q.cursor || q.entries.contains_key(&offset) {
                    continue;
                }
                if taken == room {
                    next = offset;
                    break;
                }
                if let Some(f) = &sql92 {
                    if !crate::filters::selects(f, s.as_bytes()) {
                        continue;
                    }
                }
                q.entries.insert(
                    offset,
                    Entry {
                        delivered: 1,
                        pop_time_ms: now_ms,
                        invisible_ms,
                        ck_log: None,
                        commit_log_offset: v.physical_offset(),
                        acked: false,
                    },
                );
                taken += 1;
                claims.push(Claim {
                    offset,
                    delivered: 1,
                    commit_log_offset: v.physical_offset(),
                    record: Some(s.to_bytes()),
                    pop_time_ms: now_ms,
                    invisible_ms,
                });
            }
            q.cursor = next.max(q.cursor);
        }
    }
    // The records of redeliveries, read again; one gone (retention) is dropped.
    let mut gone = Vec::new();
    for c in claims.iter_mut().filter(|c| c.record.is_none()) {
        match sh
            .read_at(shard::CommitLogOffset(c.commit_log_offset))
            .await?
        {
            Some(s) => c.record = Some(s.to_bytes()),
            None => gone.push(c.offset),
        }
    }
    if !gone.is_empty() {
        claims.retain(|c| !gone.contains(&c.offset));
        with_queue(core, shard, &key, |q| {
            for o in &gone {
                if let Some(e) = q.entries.get_mut(o) {
                    e.acked = true;
                }
            }
        });
    }
    claims.sort_by_key(|c| c.offset);
    // The checkpoint first: nothing is handed out that a restart would not know of.
    if !claims.is_empty() {
        let rec = LogRecord::Ck {
            c: req.group.clone(),
            t: req.topic.clone(),
            q: queue_id,
            pt: now_ms,
            it: invisible_ms,
            o: claims
                .iter()
                .map(|c| (c.offset, c.delivered, c.commit_log_offset))
                .collect(),
        };
        let log_end = sh.queue_offsets(POP_LOG_TOPIC, u32::from(shard)).max.0;
        core.pop
            .shards
            .borrow_mut()
            .entry(shard)
            .or_default()
            .pending
            .push(log_end);
        let written = write_log(core, shard, &rec).await;
        if let Some(sp) = core.pop.shards.borrow_mut().get_mut(&shard) {
            if let Some(i) = sp.pending.iter().position(|&p| p == log_end) {
                sp.pending.swap_remove(i);
            }
        }
        let ck_log = match written {
            Ok(at) => Some(at),
            Err(e) => {
                // Not handed out: visible again at once, as delivered before.
                with_queue(core, shard, &key, |q| {
                    for c in &claims {
                        if let Some(en) = q.entries.get_mut(&c.offset) {
                            en.delivered = c.delivered - 1;
                            en.invisible_ms = 0;
                        }
                    }
                });
                return Err(e);
            }
        };
        with_queue(core, shard, &key, |q| {
            for c in &claims {
                if let Some(en) = q.entries.get_mut(&c.offset) {
                    if en.pop_time_ms == now_ms {
                        en.ck_log = ck_log;
                    }
                }
            }
            if req.order {
                q.batch_attempt.clone_from(&req.attempt_id);
            }
        });
    }
    for (offset, delivered, clo) in dead {
        if let Err(e) = dead_letter(core, shard, &key, offset, delivered, clo).await {
            tracing::warn!(group = %key.0, topic = %key.1, queue_id, offset, "a message could not go to the dead letters (tried again later): {e}");
        }
    }
    settle(core, shard, &key);
    Ok((
        answer(core, shard, queue_id, req, now_ms, &claims),
        next_visible,
    ))
}

/// A pop's answer: the claimed messages with their handles and attempts.
fn answer(
    core: &Core,
    shard: u16,
    queue_id: u32,
    req: &PopRequest,
    now_ms: i64,
    claims: &[Claim],
) -> Popped {
    let owner_core = protocol::shard_core(shard, core.shared.cores);
    let broker_name = core.core_name(owner_core);
    let mut out = empty(req, shard, now_ms, req.invisible_ms.max(1));
    if let Some(c) = claims.first() {
        out.pop_time_ms = c.pop_time_ms;
        out.invisible_ms = c.invisible_ms;
    }
    let revive_qid = out.revive_qid;
    let first = claims.first().map(|c| c.offset);
    for c in claims {
        let Some(rec) = &c.record else { continue };
        let mut bytes = rec.to_vec();
        // The count a RocketMQ consumer reads as its delivery count (the CRC refreshed): the
        // failures the record carries (a dead letter's, say) and its deliveries here but
        // this one.
        let stored =
            RecordView::parse(rec).map_or(0, |v| u32::try_from(v.reconsume_times()).unwrap_or(0));
        let attempt = stored.saturating_add(c.delivered);
        let times = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        if let Err(e) = message::set_reconsume_times(&mut bytes, times) {
            tracing::warn!(
                shard,
                queue_id,
                offset = c.offset,
                "a popped record left as stored: {e}"
            );
        }
        let handle = ReceiptHandle {
            ck_queue_offset: first.unwrap_or(c.offset),
            pop_time_ms: c.pop_time_ms,
            invisible_ms: c.invisible_ms,
            revive_qid,
            retry_flag: 0,
            broker_name: broker_name.clone(),
            queue_id,
            queue_offset: c.offset,
            commit_log_offset: Some(
                c.commit_log_offset | (u64::from(shard) << message::ids::LOCAL_OFFSET_BITS),
            ),
        };
        out.messages.push(PoppedMessage {
            record: Bytes::from(bytes),
            receipt_handle: handle.to_string(),
            attempt,
            queue_id,
            queue_offset: c.offset,
        });
    }
    if let Some(f) = first {
        out.start_offsets.push((queue_id, f));
        out.message_offsets
            .push((queue_id, claims.iter().map(|c| c.offset).collect()));
    }
    let cursor = core.pop_cursor(shard, &req.group, &req.topic, queue_id);
    out.rest = core.shards.get(&shard).map_or(0, |sh| {
        sh.visible_max(&req.topic, queue_id)
            .0
            .saturating_sub(cursor)
    });
    out
}

fn empty(req: &PopRequest, shard: u16, now_ms: i64, invisible_ms: u64) -> Popped {
    Popped {
        pop_time_ms: now_ms,
        invisible_ms,
        revive_qid: if req.order {
            ORDER_REVIVE_QID
        } else {
            u32::from(shard)
        },
        ..Default::default()
    }
}

fn with_queue<R>(
    core: &Core,
    shard: u16,
    key: &QueueKey,
    f: impl FnOnce(&mut QueueState) -> R,
) -> Option<R> {
    let mut st = core.pop.shards.borrow_mut();
    st.get_mut(&shard)
        .and_then(|sp| sp.queues.get_mut(key))
        .map(f)
}

/// Sends the message at `offset` to the group's dead-letter topic, then records it done.
async fn dead_letter(
    core: &Core,
    shard: u16,
    key: &QueueKey,
    offset: u64,
    delivered: u32,
    clo: u64,
) -> Result<(), BrokerError> {
    if send_dead_letter(core, shard, &key.0, &key.1, delivered, clo).await? {
        tracing::info!(group = %key.0, topic = %key.1, queue_id = key.2, offset, delivered, "a popped message was not acked within its max attempts and went to the dead-letter topic");
    }
    let pt = with_queue(core, shard, key, |q| {
        q.entries.get(&offset).map(|e| e.pop_time_ms)
    })
    .flatten()
    .unwrap_or(0);
    let rec = LogRecord::Ack {
        c: key.0.clone(),
        t: key.1.clone(),
        q: key.2,
        pt,
        o: offset,
    };
    write_log(core, shard, &rec).await?;
    with_queue(core, shard, key, |q| {
        if let Some(e) = q.entries.get_mut(&offset) {
            e.acked = true;
        }
    });
    Ok(())
}

/// Appends the message at CommitLog offset `clo` of `shard` to `group`'s dead-letter topic
/// (created on first use), as delivered `delivered` times from `topic`. `false` when no
/// record is there any more (retention took it).
pub(crate) async fn send_dead_letter(
    core: &Core,
    shard: u16,
    group: &str,
    topic: &str,
    delivered: u32,
    clo: u64,
) -> Result<bool, BrokerError> {
    let sh = core.local_shard(shard)?;
    if let Some(s) = sh.read_at(shard::CommitLogOffset(clo)).await? {
        let v = RecordView::parse(s.as_bytes())
            .map_err(|e| BrokerError::Storage(format!("stored record: {e}")))?;
        let dlq = dead_letter_topic(group);
        let cfg = core.topics.borrow().get(&dlq).cloned();
        let cfg = match cfg {
            Some(c) => c,
            None => {
                let queues = u32::from(core.shared.shard_count.max(1));
                let c = TopicConfig {
                    name: dlq.clone(),
                    read_queues: queues,
                    write_queues: queues,
                    perm: protocol::perm::READ | protocol::perm::WRITE,
                };
                Box::pin(core.create_topic(c.clone())).await?;
                c
            }
        };
        let queue = crate::numbering::CoreQueues::of(core, &dlq, &cfg, core.id)
            .ids
            .first()
            .copied()
            .unwrap_or(0);
        let mut props: Vec<(&str, &str)> = v
            .properties()
            .iter()
            .filter(|(k, _)| *k != message::prop::CRC && *k != message::prop::RETRY_TOPIC)
            .collect();
        props.push((message::prop::RETRY_TOPIC, topic));
        let mut rec = Vec::with_capacity(v.len() + 64);
        encode_record(
            &MessageFields {
                topic: &dlq,
                body: v.body(),
                flag: v.flag(),
                sys_flag: v.sys_flag(),
                born_timestamp_ms: v.born_timestamp_ms(),
                born_host: Some(v.born_host()),
                // As RocketMQ counts a popped message's dead letter: its deliveries, and
                // one for the send to the dead letters.
                reconsume_times: i32::try_from(delivered.saturating_add(1)).unwrap_or(i32::MAX),
                properties: &props,
            },
            &mut rec,
        )
        .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
        Box::pin(core.store(&dlq, queue, Bytes::from(rec), 1)).await?;
        // Counted as RocketMQ counts the send back its Proxy makes for such a message.
        core.count_dead_letter(topic, group);
        return Ok(true);
    }
    Ok(false)
}

/// The entry a handle names, if the handle is its current one.
fn current_entry<'a>(
    q: Option<&'a mut QueueState>,
    h: &ReceiptHandle,
) -> Result<&'a mut Entry, BrokerError> {
    let stale = || {
        BrokerError::NotFound(format!(
            "receipt handle of offset {} of queue {} has expired: the message was acked, dead-lettered or handed out again since",
            h.queue_offset, h.queue_id
        ))
    };
    let q = q.ok_or_else(stale)?;
    let e = q.entries.get_mut(&h.queue_offset).ok_or_else(stale)?;
    if e.acked || e.pop_time_ms != h.pop_time_ms || e.invisible_ms != h.invisible_ms.max(1) {
        return Err(stale());
    }
    if let Some(c) = h.commit_log_offset {
        if c & message::ids::LOCAL_OFFSET_MAX != e.commit_log_offset {
            return Err(BrokerError::BadRequest(format!(
                "receipt handle's CommitLog offset {c} is not that of offset {} of queue {}",
                h.queue_offset, h.queue_id
            )));
        }
    }
    Ok(e)
}

/// Acks a handle on its queue's core; with `to_dead_letters`, after sending its message to
/// the group's dead-letter topic.
pub(crate) async fn ack_local(
    core: &Core,
    shard: u16,
    group: &str,
    topic: &str,
    h: &ReceiptHandle,
    to_dead_letters: bool,
) -> Result<(), BrokerError> {
    ensure_loaded(core, shard).await?;
    let key: QueueKey = (group.to_owned(), topic.to_owned(), h.queue_id);
    let (delivered, clo) = {
        let mut st = core.pop.shards.borrow_mut();
        let q = st.get_mut(&shard).and_then(|sp| sp.queues.get_mut(&key));
        let e = current_entry(q, h)?;
        (e.delivered, e.commit_log_offset)
    };
    if to_dead_letters {
        dead_letter(core, shard, &key, h.queue_offset, delivered, clo).await?;
        settle(core, shard, &key);
        return Ok(());
    }
    let rec = LogRecord::Ack {
        c: group.to_owned(),
        t: topic.to_owned(),
        q: h.queue_id,
        pt: h.pop_time_ms,
        o: h.queue_offset,
    };
    write_log(core, shard, &rec).await?;
    {
        let mut st = core.pop.shards.borrow_mut();
        let q = st.get_mut(&shard).and_then(|sp| sp.queues.get_mut(&key));
        // Changed meanwhile (hidden anew by its other handle): the record names the old
        // delivery and a replay ignores it too.
        if let Ok(e) = current_entry(q, h) {
            e.acked = true;
        }
    }
    settle(core, shard, &key);
    Ok(())
}

/// Hides a handle's message anew on its queue's core: a checkpoint of that one offset with
/// the new pop time, which a replay takes over the older one.
pub(crate) async fn change_local(
    core: &Core,
    shard: u16,
    group: &str,
    topic: &str,
    h: &ReceiptHandle,
    invisible_ms: u64,
) -> Result<String, BrokerError> {
    ensure_loaded(core, shard).await?;
    let key: QueueKey = (group.to_owned(), topic.to_owned(), h.queue_id);
    let invisible_ms = invisible_ms.max(1);
    let (pt, delivered, clo) = {
        let mut st = core.pop.shards.borrow_mut();
        let q = st.get_mut(&shard).and_then(|sp| sp.queues.get_mut(&key));
        let e = current_entry(q, h)?;
        let pt = core.shared.clock.wall_ms().max(e.pop_time_ms + 1);
        // Taken at once: the old handle stops working even while the checkpoint is written.
        e.pop_time_ms = pt;
        e.invisible_ms = invisible_ms;
        (pt, e.delivered, e.commit_log_offset)
    };
    let rec = LogRecord::Ck {
        c: group.to_owned(),
        t: topic.to_owned(),
        q: h.queue_id,
        pt,
        it: invisible_ms,
        o: vec![(h.queue_offset, delivered, clo)],
    };
    let at = write_log(core, shard, &rec).await;
    with_queue(core, shard, &key, |q| {
        if let Some(e) = q.entries.get_mut(&h.queue_offset) {
            if e.pop_time_ms == pt {
                match &at {
                    Ok(at) => e.ck_log = Some(*at),
                    // Not recorded: a restart would hide it only until the old deadline, so
                    // it is not promised longer now either.
                    Err(_) => {
                        e.pop_time_ms = h.pop_time_ms;
                        e.invisible_ms = h.invisible_ms.max(1);
                    }
                }
            }
        }
    });
    at?;
    settle(core, shard, &key);
    let new = ReceiptHandle {
        ck_queue_offset: h.queue_offset,
        pop_time_ms: pt,
        invisible_ms,
        ..h.clone()
    };
    Ok(new.to_string())
}

/// Unacked offsets of `group` / `topic` in this core's windows (rebuilt first where they
/// are not yet).
pub(crate) async fn inflight_local(
    core: &Core,
    group: &str,
    topic: &str,
) -> Result<u64, BrokerError> {
    // A shard this core does not serve as master holds no POP state of its own: none in
    // flight here.
    let mut shards: Vec<u16> = core
        .shards
        .keys()
        .copied()
        .filter(|&s| core.master_epoch(s).is_some())
        .collect();
    shards.sort_unstable();
    for &shard in &shards {
        ensure_loaded(core, shard).await?;
    }
    Ok(core
        .pop
        .shards
        .borrow()
        .iter()
        .filter(|(s, _)| shards.contains(s))
        .flat_map(|(_, sp)| sp.queues.iter())
        .filter(|(k, _)| k.0 == group && k.1 == topic)
        .map(|(_, q)| q.unacked() as u64)
        .sum())
}

/// Appends a pop-log record to the shard; its offset in the pop log.
async fn write_log(core: &Core, shard: u16, rec: &LogRecord) -> Result<u64, BrokerError> {
    let body = serde_json::to_vec(rec).map_err(|e| BrokerError::Internal(e.to_string()))?;
    let tag = match rec {
        LogRecord::Ck { .. } => "ck",
        LogRecord::Ack { .. } => "ack",
    };
    let mut out = Vec::with_capacity(body.len() + 128);
    encode_record(
        &MessageFields {
            topic: POP_LOG_TOPIC,
            body: &body,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: core.shared.clock.wall_ms(),
            born_host: Some(core.store_host()),
            reconsume_times: 0,
            properties: &[(message::prop::TAGS, tag)],
        },
        &mut out,
    )
    .map_err(|e| BrokerError::Storage(e.to_string()))?;
    let a = core
        .append_local(shard, POP_LOG_TOPIC, u32::from(shard), &out, 1)
        .await?;
    Ok(a.first_queue_offset.0)
}

/// Rebuilds the shard's windows at start, so its messages in flight are counted (metrics,
/// consumer stats) before the first POP request; a shard this core does not serve as master
/// is left until it does.
pub(crate) async fn preload(core: &Core, shard: u16) {
    if core.master_epoch(shard).is_none() {
        return;
    }
    if let Err(e) = ensure_loaded(core, shard).await {
        tracing::warn!(shard, error = %e, "the POP windows could not be rebuilt at start; the first POP request tries again");
    }
}

/// Rebuilds the shard's windows from its pop log, once per master epoch.
async fn ensure_loaded(core: &Core, shard: u16) -> Result<(), BrokerError> {
    let Some(epoch) = core.master_epoch(shard) else {
        return Err(BrokerError::NotMaster(format!(
            "shard {shard} of core {} is not served as master: POP is its master's",
            core.id
        )));
    };
    {
        let mut st = core.pop.shards.borrow_mut();
        let sp = st.entry(shard).or_default();
        match sp.loaded {
            Some(e) if e == epoch => return Ok(()),
            // Rebuilt in an earlier epoch: whatever the log gained since is in it, not
            // in the windows.
            Some(_) => {
                sp.queues.clear();
                sp.loaded = None;
            }
            None => {}
        }
    }
    let Some(table) = core.offsets.get(&shard) else {
        return Err(BrokerError::Storage(format!(
            "shard {shard} is not hosted on core {}",
            core.id
        )));
    };
    let mut from = table
        .borrow()
        .query(&floor_key(shard))
        .map_or(0, |s| s.offset);
    let sh = core.local_shard(shard)?;
    let filter = TagFilter::All;
    let mut records = 0u64;
    let mut replayed: HashMap<QueueKey, QueueState> = HashMap::new();
    loop {
        let r = sh
            .read(&shard::ReadRequest {
                topic: POP_LOG_TOPIC,
                queue_id: u32::from(shard),
                queue_offset: shard::QueueOffset(from),
                max_messages: REPLAY_BATCH,
                max_bytes: 4 << 20,
                filter: &filter,
            })
            .await?;
        if r.next_queue_offset.0 <= from {
            break;
        }
        for s in &r.records {
            let Ok(v) = RecordView::parse(s.as_bytes()) else {
                continue;
            };
            let Ok(rec) = serde_json::from_slice::<LogRecord>(v.body()) else {
                tracing::warn!(
                    shard,
                    offset = v.queue_offset(),
                    "a pop-log record does not parse: skipped"
                );
                continue;
            };
            records += 1;
            apply(core, shard, &mut replayed, rec, v.queue_offset());
        }
        from = r.next_queue_offset.0;
    }
    {
        // A pop served while the replay read (another task) started windows of its own:
        // the replayed ones are the truth for their queues.
        let mut st = core.pop.shards.borrow_mut();
        let sp = st.entry(shard).or_default();
        if sp.loaded == Some(epoch) {
            return Ok(());
        }
        for (k, mut q) in replayed {
            q.compact();
            sp.queues.insert(k, q);
        }
        sp.loaded = Some(epoch);
        tracing::debug!(
            shard,
            records,
            queues = sp.queues.len(),
            "pop windows rebuilt from the pop log"
        );
    }
    let keys: Vec<QueueKey> = core
        .pop
        .shards
        .borrow()
        .get(&shard)
        .map(|sp| sp.queues.keys().cloned().collect())
        .unwrap_or_default();
    for k in &keys {
        settle(core, shard, k);
    }
    Ok(())
}

/// Applies one pop-log record to the windows being rebuilt.
fn apply(
    core: &Core,
    shard: u16,
    queues: &mut HashMap<QueueKey, QueueState>,
    rec: LogRecord,
    log_offset: u64,
) {
    match rec {
        LogRecord::Ck { c, t, q, pt, it, o } => {
            let key = (c, t, q);
            let first = o.iter().map(|x| x.0).min().unwrap_or(0);
            let st = queues.entry(key.clone()).or_insert_with(|| {
                let stored = core
                    .offsets
                    .get(&shard)
                    .and_then(|tb| tb.borrow().query(&group_key(&key)).map(|s| s.offset))
                    .unwrap_or(first);
                QueueState {
                    consumed: stored,
                    cursor: stored,
                    entries: BTreeMap::new(),
                    batch_attempt: None,
                    ck_min: None,
                }
            });
            for (offset, delivered, clo) in o {
                if offset < st.consumed {
                    continue;
                }
                if st.entries.len() >= WINDOW_MAX && !st.entries.contains_key(&offset) {
                    continue;
                }
                st.entries.insert(
                    offset,
                    Entry {
                        delivered,
                        pop_time_ms: pt,
                        invisible_ms: it,
                        ck_log: Some(log_offset),
                        commit_log_offset: clo,
                        acked: false,
                    },
                );
            }
        }
        LogRecord::Ack { c, t, q, pt, o } => {
            if let Some(st) = queues.get_mut(&(c, t, q)) {
                if let Some(e) = st.entries.get_mut(&o) {
                    if e.pop_time_ms == pt {
                        e.acked = true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trips() {
        let h = ReceiptHandle {
            ck_queue_offset: 3,
            pop_time_ms: 1_700_000_000_000,
            invisible_ms: 30_000,
            revive_qid: 2,
            retry_flag: 0,
            broker_name: "broker-a-c1".into(),
            queue_id: 5,
            queue_offset: 7,
            commit_log_offset: Some(42),
        };
        assert_eq!(ReceiptHandle::parse(&h.to_string()).unwrap(), h);
        let eight = ReceiptHandle {
            commit_log_offset: None,
            ..h.clone()
        };
        assert_eq!(ReceiptHandle::parse(&eight.to_string()).unwrap(), eight);
    }

    #[test]
    fn garbled_handles_are_refused() {
        for bad in [
            "",
            "1 2 3",
            "x 1 1 0 0 b 0 0",
            "0 -5 1 0 0 b 0 0",
            "0 1 1 0 1 b 0 0",
            "9 1 1 0 0 b 0 3",
            "0 1 1 0 0  0 0",
            "0 1 1 0 0 b 0 0 0 0",
            "0 1 1 0 0 b 99999999999 0",
        ] {
            assert!(
                matches!(ReceiptHandle::parse(bad), Err(BrokerError::BadRequest(_))),
                "`{bad}` is refused"
            );
        }
        assert!(ReceiptHandle::parse(&"1 ".repeat(400)).is_err());
    }
}
