//! Lite Topics (RocketMQ 5.5): many small ordered channels inside one parent topic
//! (ARCHITECTURE.md, "Lite Topics").
//!
//! * **Placement.** A parent topic has `message.type=LITE`. A lite topic lives in one queue
//!   of its parent, [`lite_queue`] (a hash of its name over the parent's write queues), so
//!   on one shard and one core: its messages are records of that queue carrying
//!   [`PROPERTY_LITE_TOPIC`], written once, in the order they were sent.
//! * **Index.** The owning core keeps, per shard and parent topic, every lite topic it
//!   holds: its queue, its last write, and the queue offsets (with CommitLog offsets) of the
//!   messages some group may still need ([`LiteTopic`]). It is derived from the queue: the
//!   core reads the parent's queues from where it last stopped ([`catch_up`]) before it
//!   answers anything about them, so a restart, or a slave that takes over, rebuilds it from
//!   the log, from the shard's *floor* (the oldest message still needed, stored with the
//!   group offsets under [`FLOOR_GROUP`]). An idle lite topic costs its name and a few words.
//! * **Consumption.** A group consumes a lite topic in order: per (group, lite topic) a
//!   cursor (the first offset not consumed) and the batch handed out ([`Cursor`]). While a
//!   message of the batch is unacked and hidden, the lite topic gives the group nothing
//!   more; once its invisible time passes it is handed out again, attempt + 1 (a suspended
//!   one without counting). A lite topic is consumed exclusively: one client of a group
//!   holds its batch at a time.
//! * **Subscriptions** are session state, as in RocketMQ: per (group, parent, client) the
//!   lite topics the client subscribed and this core owns. Lite push consumers send their
//!   whole set every 30 s and on every change, to every broker of the route. A group with
//!   `lite.sub.model=Exclusive` ([`LiteGroup`]) lets one client subscribe a lite topic at a
//!   time: a client that subscribes it takes it from the one that had it, which is told
//!   (RocketMQ's NotifyUnsubscribeLite) and may not take it back by resending its whole set
//!   (an *eviction mark*, until it unsubscribes or leaves).
//! * **A lite pop** is per client: it walks the client's subscriptions on this core, from a
//!   different one each time, and fills the batch from the lite topics that have something
//!   for the group, long polling on the parent's queues when none has. A lite push consumer
//!   receives from every core; a lite simple consumer from one core only (the first
//!   readable queue of its route), whose pop then asks every core in turn
//!   ([`Core::lite_pop_every_core`]).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use message::{RecordView, TagFilter};
use protocol::GroupQueue;

use crate::core::Core;
use crate::error::BrokerError;
use crate::pop::{
    check_names, Popped, PoppedMessage, ReceiptHandle, INVISIBLE_MS_MAX, POP_MESSAGES_MAX,
};
use crate::topics::TopicTable;

/// The property naming a message's lite topic (RocketMQ's `__LITE_TOPIC`).
pub const PROPERTY_LITE_TOPIC: &str = "__LITE_TOPIC";
/// A parent topic's `message.type`.
pub const MESSAGE_TYPE_LITE: &str = "LITE";
/// The topic attribute expiring a parent's idle lite topics with what they hold (minutes).
pub const ATTRIBUTE_EXPIRATION: &str = "lite.topic.expiration";
/// The revive queue id of a lite message's receipt handle: tells it from a POP handle.
pub const LITE_REVIVE_QID: u32 = 998;
/// The longest lite topic name (RocketMQ's Proxy's `maxLiteTopicSize`).
pub const LITE_TOPIC_BYTES_MAX: usize = 64;
/// The internal group whose offset of a parent's queue is where the index is rebuilt from.
pub const FLOOR_GROUP: &str = "CID_RMQ_SYS_LITE_FLOOR";
/// Records read per step of the index's catch-up.
const INDEX_BATCH: u32 = 256;
/// How long a long poll sleeps between looks when no append can wake it.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// How often a shard's floors are stored and its idle lite topics swept, at most: each pass
/// walks all its lite topics (a stale floor only means a longer read at the next start).
const SETTLE_EVERY_MS: i64 = 5_000;
/// How often a core publishes its lite topics' metrics.
const LITE_METRICS_EVERY_MS: i64 = 10_000;

/// Whether `topic` is a LITE parent topic.
pub fn is_lite_topic(topics: &TopicTable, topic: &str) -> bool {
    topics.attribute(topic, "message.type") == Some(MESSAGE_TYPE_LITE)
}

/// The queue of its parent (of `write_queues`) that holds lite topic `lite`.
pub fn lite_queue(lite: &str, write_queues: u32) -> u32 {
    crc32fast::hash(lite.as_bytes()) % write_queues.max(1)
}

/// Refuses a lite topic name that is empty, longer than [`LITE_TOPIC_BYTES_MAX`] or holds
/// a character outside RocketMQ's topic names (`[A-Za-z0-9_%|.-]`).
pub fn check_lite_topic(name: &str) -> Result<(), BrokerError> {
    if name.is_empty() || name.len() > LITE_TOPIC_BYTES_MAX {
        return Err(BrokerError::BadRequest(format!(
            "a lite topic must be 1..={LITE_TOPIC_BYTES_MAX} bytes: `{name}`"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '%' | '|' | '-' | '.')))
    {
        return Err(BrokerError::BadRequest(format!(
            "lite topic `{name}` holds `{c}`: only letters, digits and _%|-. are allowed"
        )));
    }
    Ok(())
}

/// The lite topic a stored record belongs to.
pub fn record_lite_topic(record: &[u8]) -> Option<&str> {
    RecordView::parse(record)
        .ok()?
        .property(PROPERTY_LITE_TOPIC)
        .filter(|l| !l.is_empty())
}

/// The group attribute naming the one parent topic a lite group consumes (RocketMQ 5.5's
/// `lite.bind.topic`).
pub const ATTRIBUTE_BIND_TOPIC: &str = "lite.bind.topic";
/// The group attribute choosing how a lite group's clients share lite topics: `Shared` (the
/// default) or `Exclusive` (RocketMQ 5.5's `lite.sub.model`).
pub const ATTRIBUTE_SUB_MODEL: &str = "lite.sub.model";

/// Where a subscription places the group in a lite topic (RocketMQ's `OffsetOption`). The
/// options that move a group already in the lite topic apply to a subscription added one
/// lite topic at a time (PARTIAL_ADD), as in RocketMQ; a whole set sent again leaves every
/// group where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAt {
    /// Where the group is; a group new to the lite topic at its oldest message kept (no
    /// option, `LAST`, and the offset and time options, which lite topics do not number).
    #[default]
    Oldest,
    /// Past the lite topic's last message, whatever the group had left (`MAX`).
    Latest,
    /// At the oldest message kept, for a group that was further on too (`MIN`).
    Earliest,
    /// `n` messages back from where the group is, within those kept (`TAIL_N`); a group new
    /// to the lite topic starts at its oldest message kept.
    Tail(u64),
}

/// What a group's config says of its lite consumption.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteGroup {
    /// [`ATTRIBUTE_BIND_TOPIC`]: the one parent topic the group may subscribe; any LITE parent
    /// when unset.
    pub bind_topic: Option<String>,
    /// [`ATTRIBUTE_SUB_MODEL`] is `Exclusive`.
    pub exclusive: bool,
}

impl LiteGroup {
    /// The lite settings of a group's stored config fields (its `attributes`).
    pub fn of_config(fields: &serde_json::Map<String, serde_json::Value>) -> LiteGroup {
        let attribute = |key: &str| {
            fields
                .get("attributes")
                .and_then(|a| a.get(key))
                .and_then(|v| v.as_str())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        LiteGroup {
            bind_topic: attribute(ATTRIBUTE_BIND_TOPIC).map(str::to_owned),
            exclusive: attribute(ATTRIBUTE_SUB_MODEL)
                .is_some_and(|m| m.eq_ignore_ascii_case("Exclusive")),
        }
    }
}

/// A client that lost a lite topic to another client of its Exclusive group, to be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    pub client: String,
    pub group: String,
    pub topic: String,
    pub lite: String,
}

/// A change of a client's lite subscriptions (gRPC SyncLiteSubscription, remoting
/// LITE_SUBSCRIPTION_CTL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubAction {
    /// These lite topics too.
    Add,
    /// Not these any more.
    Remove,
    /// Exactly these.
    Replace,
    /// None.
    RemoveAll,
}

#[derive(Debug, Clone)]
pub struct LiteSubscription {
    pub group: String,
    pub topic: String,
    pub client: String,
    pub action: SubAction,
    pub lite_topics: Vec<String>,
    pub start: StartAt,
    /// The group is Exclusive: set by [`Core::lite_subscribe`] from the group's config (what
    /// a caller gives is replaced).
    pub exclusive: bool,
}

/// A lite pop, as the front ends ask it: the lite topics `client` subscribed on this core.
#[derive(Debug, Clone)]
pub struct LitePop {
    pub group: String,
    pub topic: String,
    pub client: String,
    pub max_messages: u32,
    pub invisible_ms: u64,
    pub poll_ms: u64,
    /// How many deliveries a message gets before it goes to `%DLQ%<group>` (0: no limit).
    pub max_attempts: u32,
}

/// The counts of the lite topics a core holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiteCounts {
    pub lite_topics: u64,
    /// Messages kept for some group.
    pub retained: u64,
    /// Lite topics subscribed, over every client.
    pub subscriptions: u64,
}

/// A lite topic on its shard.
#[derive(Debug)]
struct LiteTopic {
    queue: u32,
    last_write_ms: i64,
    /// (queue offset, CommitLog offset) of the messages some group may still need, in
    /// order: from the oldest offset any cursor of the lite topic has not passed (every
    /// message while no group has a cursor).
    kept: VecDeque<Kept>,
}

/// A message kept: (queue offset, CommitLog offset, record bytes).
type Kept = (u64, u64, u32);

/// One message of a batch handed out.
#[derive(Debug, Clone)]
struct Delivery {
    offset: u64,
    commit_log_offset: u64,
    size: u32,
    delivered: u32,
    pop_time_ms: i64,
    invisible_ms: u64,
    acked: bool,
    /// Hidden by the client's suspend: its next delivery does not count as an attempt.
    suspended: bool,
}

impl Delivery {
    fn visible_at_ms(&self) -> i64 {
        crate::pop::visible_at_ms(self.pop_time_ms, self.invisible_ms)
    }

    fn hidden(&self, now_ms: i64) -> bool {
        !self.acked && self.visible_at_ms() > now_ms
    }
}

/// A group's position in one lite topic.
#[derive(Debug, Default)]
struct Cursor {
    /// Every message below it is consumed.
    next: u64,
    /// The batch handed out, in order (empty when none is).
    out: Vec<Delivery>,
}

impl Cursor {
    /// The oldest offset the group still needs.
    fn needs_from(&self) -> u64 {
        self.out
            .iter()
            .filter(|d| !d.acked)
            .map(|d| d.offset)
            .min()
            .unwrap_or(self.next)
            .min(self.next)
    }
}

/// A parent topic's lite topics on one shard.
#[derive(Debug, Default)]
struct Parent {
    topics: HashMap<Rc<str>, LiteTopic>,
    /// Per group, its cursors.
    groups: HashMap<String, HashMap<Rc<str>, Cursor>>,
    /// Per queue of the shard, the next offset the index has not read.
    indexed: HashMap<u32, u64>,
}

#[derive(Debug, Default)]
struct ShardLite {
    /// The master epoch in which the index was built (only a master keeps it).
    loaded: Option<u32>,
    parents: HashMap<String, Parent>,
    settled_ms: i64,
}

type SubKey = (String, String);
/// Per client, the lite topics it subscribed.
type Clients = HashMap<String, HashSet<Rc<str>>>;

/// Every local shard's lite topics, and this core's lite subscriptions.
#[derive(Default)]
pub struct LiteState {
    shards: RefCell<HashMap<u16, ShardLite>>,
    /// (group, parent) → client → the lite topics it subscribed that this core owns.
    subs: RefCell<HashMap<SubKey, Clients>>,
    /// (group, parent) → client → the lite topics of this core another client of the
    /// Exclusive group took from it: its whole set sent again does not take them back.
    evicted: RefCell<HashMap<SubKey, Clients>>,
    /// When this core last published its lite topics' metrics (wall ms).
    published_ms: Cell<i64>,
    /// The (group, parent, queue) backlogs published last time: one gone is set to 0.
    published: RefCell<HashSet<(String, String, u32)>>,
    turn: Cell<usize>,
    /// When each client last popped here ([`Core::lite_client_view`]).
    seen: RefCell<ClientsSeen>,
}

fn floor_key(topic: &str, queue: u32) -> GroupQueue {
    GroupQueue {
        group: FLOOR_GROUP.to_owned(),
        topic: topic.to_owned(),
        queue_id: queue,
    }
}

impl Core {
    /// `topic`'s config, refused unless it is a LITE parent topic.
    fn lite_parent(&self, topic: &str) -> Result<protocol::TopicConfig, BrokerError> {
        let cfg = self.topic_for_read(topic)?;
        if !is_lite_topic(&self.topics.borrow(), topic) {
            return Err(BrokerError::BadRequest(format!(
                "topic {topic} is not a LITE topic (message.type=LITE)"
            )));
        }
        Ok(cfg)
    }

    /// Sends `record` (one message carrying [`PROPERTY_LITE_TOPIC`] = `lite`) to lite topic
    /// `lite` of parent `topic`: to the queue that holds it, on whichever core that is. A
    /// lite topic the broker does not hold yet is created, within `lite_topics_max`.
    pub async fn lite_send(
        &self,
        topic: &str,
        lite: &str,
        record: Bytes,
    ) -> Result<crate::core::SendOutcome, BrokerError> {
        check_lite_topic(lite)?;
        let cfg = self.topic_for_send(topic).await?;
        if !is_lite_topic(&self.topics.borrow(), topic) {
            return Err(BrokerError::MessageIllegal(format!(
                "topic {topic} is not a LITE topic: a lite message needs a parent with message.type=LITE"
            )));
        }
        let queue = lite_queue(lite, cfg.write_queues);
        let (shard, _) = self.owner(topic, queue);
        let admit = crate::mesh::LiteAdmit {
            topic: topic.to_owned(),
            queue,
            lite: lite.to_owned(),
        };
        self.at_shard(shard, admit).await?;
        self.send(topic, queue, record, 1).await
    }

    /// Changes `sub.client`'s lite subscriptions: every core keeps those of the lite topics
    /// it owns. A client sends its set to the broker it dials (RocketMQ's Java SDK 5.2.0, to
    /// its access point) or to every broker of its route (later SDKs); either way each core
    /// hears of it. In an Exclusive group, the clients that lose a lite topic to this one are
    /// told ([`crate::link::ClientLink::lite_unsubscribed`], on every core).
    pub async fn lite_subscribe(&self, mut sub: LiteSubscription) -> Result<(), BrokerError> {
        check_names(&sub.group, &sub.topic)?;
        if sub.client.is_empty() {
            return Err(BrokerError::BadRequest("no client id".into()));
        }
        self.lite_parent(&sub.topic)?;
        for l in &sub.lite_topics {
            check_lite_topic(l)?;
        }
        let quota = self.shared.config.lite_subscription_quota as usize;
        let asked = sub.lite_topics.len();
        if matches!(sub.action, SubAction::Add | SubAction::Replace) && asked > quota {
            return Err(BrokerError::LiteSubscriptionQuota(format!(
                "client {} of group {} may subscribe {quota} lite topics of {}, not {asked}",
                sub.client, sub.group, sub.topic
            )));
        }
        let group = self.lite_group(&sub.group).await;
        if let Some(bound) = group.bind_topic.as_deref() {
            if bound != sub.topic && matches!(sub.action, SubAction::Add | SubAction::Replace) {
                return Err(BrokerError::BadRequest(format!(
                    "group {} is bound to lite parent topic {bound} ({ATTRIBUTE_BIND_TOPIC}), not {}",
                    sub.group, sub.topic
                )));
            }
        }
        sub.exclusive = group.exclusive;
        let mut evicted = Vec::new();
        for core in 0..self.shared.cores {
            evicted.extend(Box::pin(self.at_core(core, sub.clone())).await?);
        }
        for e in evicted {
            tracing::info!(client = %e.client, group = %e.group, topic = %e.topic, lite = %e.lite, by = %sub.client, "a lite topic of an Exclusive group went to another client");
            let mut told = false;
            for core in 0..self.shared.cores {
                told |= Box::pin(self.at_core(core, e.clone())).await?;
            }
            if !told {
                tracing::debug!(client = %e.client, lite = %e.lite, "a client that lost a lite topic is not connected to tell");
            }
        }
        Ok(())
    }

    /// The lite settings of `group`'s config (RocketMQ's defaults for a group without one).
    pub async fn lite_group(&self, group: &str) -> LiteGroup {
        match self
            .sub_group(crate::mesh::SubGroupOp::List(Some(group.to_owned())))
            .await
        {
            Ok(configs) => configs
                .first()
                .map(|c| LiteGroup::of_config(c.fields()))
                .unwrap_or_default(),
            Err(e) => {
                tracing::debug!(%group, "the group's config did not read: {e}");
                LiteGroup::default()
            }
        }
    }

    /// [`Core::lite_subscribe`] on this core: the lite topics it owns. The answer: the
    /// clients an Exclusive group's subscription took lite topics from.
    pub(crate) async fn lite_subscribe_local(
        &self,
        sub: LiteSubscription,
    ) -> Result<Vec<Evicted>, BrokerError> {
        let cfg = self.lite_parent(&sub.topic)?;
        let quota = self.shared.config.lite_subscription_quota as usize;
        let key = (sub.group.clone(), sub.topic.clone());
        let mut owned: Vec<Rc<str>> = sub
            .lite_topics
            .iter()
            .filter(|l| self.owner(&sub.topic, lite_queue(l, cfg.write_queues)).1 == self.id)
            .map(|l| Rc::from(l.as_str()))
            .collect();
        // Adds one by one count against the client's quota too: on each core, what it holds
        // of the client's set with what comes.
        if sub.action == SubAction::Add {
            let held = self
                .lite
                .subs
                .borrow()
                .get(&key)
                .and_then(|c| c.get(&sub.client))
                .map_or(0, |set| {
                    set.len() + owned.iter().filter(|l| !set.contains(*l)).count()
                });
            if held > quota {
                return Err(BrokerError::LiteSubscriptionQuota(format!(
                    "client {} of group {} may subscribe {quota} lite topics of {}, not {held}",
                    sub.client, sub.group, sub.topic
                )));
            }
        }
        let evicted = if sub.exclusive {
            self.lite_exclusive(&sub, &key, &mut owned)
        } else {
            Vec::new()
        };
        if matches!(sub.action, SubAction::Add | SubAction::Replace) {
            self.lite_place(&sub, &cfg, &owned).await?;
        }
        tracing::debug!(core = self.id, client = %sub.client, group = %sub.group, topic = %sub.topic, action = ?sub.action, asked = sub.lite_topics.len(), owned = owned.len(), "lite subscription");
        let mut subs = self.lite.subs.borrow_mut();
        let clients = subs.entry(key.clone()).or_default();
        match sub.action {
            SubAction::Add => clients.entry(sub.client.clone()).or_default().extend(owned),
            SubAction::Replace => {
                clients.insert(sub.client.clone(), owned.into_iter().collect());
            }
            SubAction::Remove => {
                if let Some(set) = clients.get_mut(&sub.client) {
                    for l in &owned {
                        set.remove(l);
                    }
                }
            }
            SubAction::RemoveAll => {
                clients.remove(&sub.client);
            }
        }
        if clients.get(&sub.client).is_some_and(HashSet::is_empty) {
            clients.remove(&sub.client);
        }
        if clients.is_empty() {
            subs.remove(&key);
        }
        Ok(evicted)
    }

    /// An Exclusive group's subscription on this core: the lite topics `owned` new to the
    /// client are taken from the group's other clients (marked, and returned to be told);
    /// those taken from this client before are dropped from a whole set it sends again (and
    /// it is told again); its marks go with a whole set that no longer has them, or with
    /// all of its subscriptions.
    fn lite_exclusive(
        &self,
        sub: &LiteSubscription,
        key: &SubKey,
        owned: &mut Vec<Rc<str>>,
    ) -> Vec<Evicted> {
        let evicted_of = |client: &str, lite: &str| Evicted {
            client: client.to_owned(),
            group: sub.group.clone(),
            topic: sub.topic.clone(),
            lite: lite.to_owned(),
        };
        let mut out = Vec::new();
        let mut marks = self.lite.evicted.borrow_mut();
        let mut subs = self.lite.subs.borrow_mut();
        match sub.action {
            SubAction::RemoveAll => {
                if let Some(m) = marks.get_mut(key) {
                    m.remove(&sub.client);
                }
            }
            SubAction::Remove => {}
            SubAction::Add | SubAction::Replace => {
                let mine = marks
                    .get_mut(key)
                    .and_then(|m| m.get_mut(&sub.client).map(std::mem::take))
                    .unwrap_or_default();
                let mut kept_marks = HashSet::new();
                if sub.action == SubAction::Replace {
                    // A whole set sent again: what was taken stays taken, and its client is
                    // told again (the first notice may have been lost).
                    owned.retain(|l| {
                        if mine.contains(l) {
                            out.push(evicted_of(&sub.client, l));
                            kept_marks.insert(l.clone());
                            false
                        } else {
                            true
                        }
                    });
                } else {
                    // Subscribed again one by one: the client claims it back.
                    kept_marks = mine.into_iter().filter(|l| !owned.contains(l)).collect();
                }
                let had: HashSet<Rc<str>> = subs
                    .get(key)
                    .and_then(|c| c.get(&sub.client))
                    .cloned()
                    .unwrap_or_default();
                let claimed: Vec<&Rc<str>> = owned.iter().filter(|l| !had.contains(*l)).collect();
                let group_marks = marks.entry(key.clone()).or_default();
                if let Some(clients) = subs.get_mut(key) {
                    for (client, set) in clients.iter_mut() {
                        if *client == sub.client {
                            continue;
                        }
                        for l in &claimed {
                            if set.remove(*l) {
                                group_marks
                                    .entry(client.clone())
                                    .or_default()
                                    .insert((*l).clone());
                                out.push(evicted_of(client, l));
                            }
                        }
                    }
                    clients.retain(|_, set| !set.is_empty());
                }
                if !kept_marks.is_empty() {
                    group_marks.insert(sub.client.clone(), kept_marks);
                }
            }
        }
        if let Some(m) = marks.get_mut(key) {
            m.retain(|_, set| !set.is_empty());
            if m.is_empty() {
                marks.remove(key);
            }
        }
        subs.retain(|_, c| !c.is_empty());
        out
    }

    /// Places the group in the lite topics `owned` of a subscription (see [`StartAt`]).
    async fn lite_place(
        &self,
        sub: &LiteSubscription,
        cfg: &protocol::TopicConfig,
        owned: &[Rc<str>],
    ) -> Result<(), BrokerError> {
        let placed: Vec<(Rc<str>, u32, u16)> = owned
            .iter()
            .map(|l| {
                let queue = lite_queue(l, cfg.write_queues);
                (l.clone(), queue, self.owner(&sub.topic, queue).0)
            })
            .collect();
        let mut shards: Vec<u16> = placed.iter().map(|p| p.2).collect();
        shards.sort_unstable();
        shards.dedup();
        for &shard in &shards {
            self.lite_ready(shard, &sub.topic).await?;
        }
        // The options that move a group already there apply to one-by-one adds only.
        let start = match sub.action {
            SubAction::Add => sub.start,
            _ => StartAt::Oldest,
        };
        let mut st = self.lite.shards.borrow_mut();
        for (l, queue, shard) in placed {
            let Some(p) = st
                .get_mut(&shard)
                .and_then(|s| s.parents.get_mut(&sub.topic))
            else {
                continue;
            };
            let end = p.indexed.get(&queue).copied().unwrap_or(0);
            let kept: Vec<u64> = p
                .topics
                .get(&l)
                .map(|t| t.kept.iter().map(|k| k.0).collect())
                .unwrap_or_default();
            let first = kept.first().copied().unwrap_or(end);
            let cursors = p.groups.entry(sub.group.clone()).or_default();
            let fresh = !cursors.contains_key(&l);
            let cursor = cursors.entry(l.clone()).or_insert_with(|| Cursor {
                next: if start == StartAt::Latest { end } else { first },
                out: Vec::new(),
            });
            let moved_to = match start {
                _ if fresh => None,
                StartAt::Oldest => None,
                StartAt::Latest => Some(end),
                StartAt::Earliest => Some(first),
                StartAt::Tail(n) => {
                    let at = cursor.needs_from();
                    let before = kept.iter().filter(|&&o| o < at).count();
                    let back = usize::try_from(n).unwrap_or(usize::MAX).min(before);
                    Some(kept.get(before - back).copied().unwrap_or(at).min(at))
                }
            };
            if let Some(next) = moved_to {
                // The batch out is dropped with the old position: what it held comes again
                // when the new one is before it.
                cursor.out.clear();
                cursor.next = next;
                trim(p, &l);
            }
        }
        Ok(())
    }

    /// Forgets every lite subscription of `client` on this core (it went away), and the
    /// lite topics taken from it.
    pub fn lite_client_gone(&self, client: &str) {
        for map in [&self.lite.subs, &self.lite.evicted] {
            let mut map = map.borrow_mut();
            for clients in map.values_mut() {
                clients.remove(client);
            }
            map.retain(|_, c| !c.is_empty());
        }
    }

    /// The lite topics of `topic` that `client` of `group` subscribed on this core.
    pub fn lite_subscriptions(&self, group: &str, topic: &str, client: &str) -> Vec<String> {
        let subs = self.lite.subs.borrow();
        let mut v: Vec<String> = subs
            .get(&(group.to_owned(), topic.to_owned()))
            .and_then(|c| c.get(client))
            .map(|s| s.iter().map(|l| l.to_string()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Pops up to `req.max_messages` of the lite topics `req.client` subscribed on this
    /// core, each lite topic in order; waits up to `poll_ms` when none has anything.
    pub async fn lite_pop(&self, req: LitePop) -> Result<Popped, BrokerError> {
        check_names(&req.group, &req.topic)?;
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
        let cfg = self.lite_parent(&req.topic)?;
        if cfg.perm & protocol::perm::READ == 0 {
            return Err(BrokerError::NoPermission(format!(
                "the topic[{}] pulling message is forbidden",
                req.topic
            )));
        }
        let ids = crate::numbering::CoreQueues::of(self, &req.topic, &cfg, self.id).ids;
        let mut shards: Vec<u16> = ids.iter().map(|&q| self.owner(&req.topic, q).0).collect();
        shards.sort_unstable();
        shards.dedup();
        let clock = &self.shared.clock;
        let wait_ms = req.poll_ms.min(self.config().long_polling_max_ms);
        let deadline = clock.now() + Duration::from_millis(wait_ms);
        // Bounded: each round either answers or waits for an append or a deadline.
        for _ in 0..10_000 {
            for &shard in &shards {
                self.lite_ready(shard, &req.topic).await?;
            }
            let now_ms = clock.wall_ms();
            let (popped, next_visible) = self.lite_claim(&req, &cfg, now_ms).await?;
            let now = clock.now();
            if !popped.messages.is_empty() || now >= deadline || self.shared.stopping() {
                tracing::debug!(core = self.id, client = %req.client, group = %req.group, messages = popped.messages.len(), "lite pop");
                self.count_lite_pop(&req, &popped);
                self.note_lite_pop(&req.client, !popped.messages.is_empty());
                return Ok(popped);
            }
            let mut wait = deadline - now;
            if let Some(at) = next_visible {
                let until = (at - clock.wall_ms()).max(1) as u64;
                wait = wait.min(Duration::from_millis(until));
            }
            // The appends of one shard wake the wait; with the parent's queues of this core
            // on several shards (or a subscription that may change) it looks again every
            // `POLL_SLICE`.
            let Some(&first) = shards.first() else {
                glommio::timer::sleep(wait.min(POLL_SLICE)).await;
                continue;
            };
            if shards.len() > 1 {
                wait = wait.min(POLL_SLICE);
            }
            let sh = self.local_shard(first)?;
            let watched: Vec<(u32, u64)> = {
                let st = self.lite.shards.borrow();
                let p = st.get(&first).and_then(|s| s.parents.get(&req.topic));
                ids.iter()
                    .filter(|&&q| self.owner(&req.topic, q).0 == first)
                    .map(|&q| (q, p.and_then(|p| p.indexed.get(&q).copied()).unwrap_or(0)))
                    .collect()
            };
            let topic = req.topic.clone();
            sh.wait_appended_until(wait.min(Duration::from_secs(1)), || {
                watched
                    .iter()
                    .any(|&(q, at)| sh.visible_max(&topic, q).0 > at)
            })
            .await;
        }
        Ok(Popped::default())
    }

    /// A lite pop over every core's share of `req.client`'s subscriptions, for a client that
    /// receives from one core only (RocketMQ's LiteSimpleConsumer receives from the first
    /// readable queue of its route, so from one core, while its lite topics live on all of
    /// them): each round asks every core without waiting, starting from a different one each
    /// time, and fills the batch from what they have; while none has anything it looks again
    /// every `POLL_SLICE`, up to `poll_ms`.
    pub async fn lite_pop_every_core(&self, req: LitePop) -> Result<Popped, BrokerError> {
        let cores = usize::from(self.shared.cores.max(1));
        let clock = &self.shared.clock;
        let wait_ms = req.poll_ms.min(self.config().long_polling_max_ms);
        let deadline = clock.now() + Duration::from_millis(wait_ms);
        // Bounded: each round either answers or sleeps a slice towards the deadline.
        for _ in 0..10_000 {
            let start = self.lite.turn.get();
            self.lite.turn.set(start.wrapping_add(1));
            let mut out: Option<Popped> = None;
            for i in 0..cores {
                let have = out.as_ref().map_or(0, |p| p.messages.len());
                let Some(room) = (req.max_messages as usize)
                    .checked_sub(have)
                    .filter(|&r| r > 0)
                else {
                    break;
                };
                let core = u16::try_from((start + i) % cores).unwrap_or(0);
                let one = LitePop {
                    max_messages: u32::try_from(room).unwrap_or(1),
                    poll_ms: 0,
                    ..req.clone()
                };
                let popped = Box::pin(self.at_core(core, one)).await?;
                match &mut out {
                    Some(o) => o.messages.extend(popped.messages),
                    None if !popped.messages.is_empty() => out = Some(popped),
                    None => {}
                }
            }
            let now = clock.now();
            if let Some(popped) = out {
                return Ok(popped);
            }
            if now >= deadline || self.shared.stopping() {
                break;
            }
            glommio::timer::sleep((deadline - now).min(POLL_SLICE)).await;
        }
        Ok(Popped {
            pop_time_ms: clock.wall_ms(),
            invisible_ms: req.invisible_ms.max(1),
            revive_qid: LITE_REVIVE_QID,
            ..Default::default()
        })
    }

    fn count_lite_pop(&self, req: &LitePop, popped: &Popped) {
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
            .got(&req.topic, &req.group, count, bytes);
    }

    /// One round of a lite pop: claims what the client's lite topics have for the group,
    /// reads it, and says when the next hidden message becomes visible.
    async fn lite_claim(
        &self,
        req: &LitePop,
        cfg: &protocol::TopicConfig,
        now_ms: i64,
    ) -> Result<(Popped, Option<i64>), BrokerError> {
        // The set's own order, which holds while it does not change: each pop starts one
        // further along it.
        let subscribed: Vec<Rc<str>> = {
            let subs = self.lite.subs.borrow();
            subs.get(&(req.group.clone(), req.topic.clone()))
                .and_then(|c| c.get(&req.client))
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default()
        };
        let invisible_ms = req.invisible_ms.max(1);
        let max = req.max_messages as usize;
        let mut out = Popped {
            pop_time_ms: now_ms,
            invisible_ms,
            revive_qid: LITE_REVIVE_QID,
            ..Default::default()
        };
        if subscribed.is_empty() {
            return Ok((out, None));
        }
        let start = self.lite.turn.get();
        self.lite.turn.set(start.wrapping_add(1));
        // (lite topic, shard, queue, delivery) claimed; (lite topic, shard, delivery) to
        // the dead letters.
        let mut claims: Vec<(Rc<str>, u16, u32, Delivery)> = Vec::new();
        let mut dead: Vec<(Rc<str>, u16, Delivery)> = Vec::new();
        let mut next_visible: Option<i64> = None;
        {
            let mut st = self.lite.shards.borrow_mut();
            for i in 0..subscribed.len() {
                if claims.len() + dead.len() >= max {
                    break;
                }
                let lite = &subscribed[(start + i) % subscribed.len()];
                let queue = lite_queue(lite, cfg.write_queues);
                let (shard, _) = self.owner(&req.topic, queue);
                let Some(p) = st
                    .get_mut(&shard)
                    .and_then(|s| s.parents.get_mut(&req.topic))
                else {
                    continue;
                };
                let Some(t) = p.topics.get(lite) else {
                    continue;
                };
                // Nothing kept: nothing for any group (a batch out is kept until acked), and
                // no cursor is placed before the lite topic's first message is known (a send
                // admitted and not yet stored).
                let Some(&(first, _, _)) = t.kept.front() else {
                    continue;
                };
                let cursor = p
                    .groups
                    .entry(req.group.clone())
                    .or_default()
                    .entry(lite.clone())
                    .or_insert_with(|| Cursor {
                        next: first,
                        out: Vec::new(),
                    });
                if let Some(at) = cursor
                    .out
                    .iter()
                    .filter(|d| d.hidden(now_ms))
                    .map(Delivery::visible_at_ms)
                    .min()
                {
                    // In order: nothing of the lite topic while a message of it is hidden.
                    next_visible = Some(next_visible.map_or(at, |n: i64| n.min(at)));
                    continue;
                }
                if cursor.out.iter().any(|d| !d.acked) {
                    // The batch comes back: its unacked messages again, in order.
                    for d in cursor.out.iter_mut().filter(|d| !d.acked) {
                        if claims.len() + dead.len() >= max {
                            break;
                        }
                        let counted = !d.suspended;
                        if counted && req.max_attempts > 0 && d.delivered >= req.max_attempts {
                            d.pop_time_ms = now_ms;
                            d.invisible_ms = 60_000;
                            dead.push((lite.clone(), shard, d.clone()));
                            continue;
                        }
                        if counted {
                            d.delivered += 1;
                        }
                        d.suspended = false;
                        d.pop_time_ms = now_ms;
                        d.invisible_ms = invisible_ms;
                        claims.push((lite.clone(), shard, queue, d.clone()));
                    }
                    continue;
                }
                cursor.out.clear();
                let room = max - claims.len() - dead.len();
                let from = cursor.next;
                for &(offset, clo, size) in t.kept.iter().filter(|k| k.0 >= from).take(room) {
                    let d = Delivery {
                        offset,
                        commit_log_offset: clo,
                        size,
                        delivered: 1,
                        pop_time_ms: now_ms,
                        invisible_ms,
                        acked: false,
                        suspended: false,
                    };
                    cursor.out.push(d.clone());
                    claims.push((lite.clone(), shard, queue, d));
                }
            }
        }
        for (lite, shard, d) in dead {
            crate::pop::send_dead_letter(
                self,
                shard,
                &req.group,
                &req.topic,
                d.delivered,
                d.commit_log_offset,
            )
            .await?;
            tracing::info!(group = %req.group, topic = %req.topic, lite = %lite, offset = d.offset, delivered = d.delivered, "a lite message was not acked within its max attempts and went to the dead-letter topic");
            self.lite_done(shard, &req.topic, &req.group, &lite, d.offset);
        }
        // Each shard's records read together: one batch of reads in flight at once.
        let mut records: Vec<Option<shard::StoredSlice>> = vec![None; claims.len()];
        let mut shards: Vec<u16> = claims.iter().map(|c| c.1).collect();
        shards.sort_unstable();
        shards.dedup();
        for shard in shards {
            let at: Vec<usize> = (0..claims.len())
                .filter(|&i| claims[i].1 == shard)
                .collect();
            let spans: Vec<(shard::CommitLogOffset, u32)> = at
                .iter()
                .map(|&i| {
                    let d = &claims[i].3;
                    (shard::CommitLogOffset(d.commit_log_offset), d.size)
                })
                .collect();
            let read = self.local_shard(shard)?.read_spans(&spans).await?;
            for (i, r) in at.into_iter().zip(read) {
                records[i] = r;
            }
        }
        for ((lite, shard, queue, d), rec) in claims.into_iter().zip(records) {
            let Some(rec) = rec else {
                // Retention took it: consumed by nobody, as for every reader.
                self.lite_done(shard, &req.topic, &req.group, &lite, d.offset);
                continue;
            };
            let mut bytes = rec.as_bytes().to_vec();
            let times = i32::try_from(d.delivered.saturating_sub(1)).unwrap_or(i32::MAX);
            if let Err(e) = message::set_reconsume_times(&mut bytes, times) {
                tracing::warn!(
                    shard,
                    queue,
                    offset = d.offset,
                    "a lite record left as stored: {e}"
                );
            }
            let handle = ReceiptHandle {
                ck_queue_offset: d.offset,
                pop_time_ms: d.pop_time_ms,
                invisible_ms: d.invisible_ms,
                revive_qid: LITE_REVIVE_QID,
                retry_flag: 0,
                broker_name: self.core_name(self.id),
                queue_id: queue,
                queue_offset: d.offset,
                commit_log_offset: Some(
                    d.commit_log_offset | (u64::from(shard) << message::ids::LOCAL_OFFSET_BITS),
                ),
            };
            out.messages.push(PoppedMessage {
                record: Bytes::from(bytes),
                receipt_handle: handle.to_string(),
                attempt: d.delivered,
                queue_id: queue,
                queue_offset: d.offset,
            });
        }
        Ok((out, next_visible))
    }

    /// Marks the delivery of `offset` done (acked or dead-lettered) and moves the cursor.
    fn lite_done(&self, shard: u16, topic: &str, group: &str, lite: &str, offset: u64) {
        let mut st = self.lite.shards.borrow_mut();
        let Some(p) = st.get_mut(&shard).and_then(|s| s.parents.get_mut(topic)) else {
            return;
        };
        if let Some(c) = p.groups.get_mut(group).and_then(|g| g.get_mut(lite)) {
            if let Some(d) = c.out.iter_mut().find(|d| d.offset == offset) {
                d.acked = true;
            }
            if c.out.iter().all(|d| d.acked) {
                if let Some(last) = c.out.iter().map(|d| d.offset).max() {
                    c.next = c.next.max(last + 1);
                }
                c.out.clear();
            }
        }
        trim(p, lite);
    }

    /// Acks the lite message of `handle` (a lite pop's). `lite`: the lite topic the client
    /// says the message is of (RocketMQ's clients send it), which spares reading the record
    /// to find it; a wrong one costs that read.
    pub async fn lite_ack(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        lite: Option<&str>,
    ) -> Result<(), BrokerError> {
        self.lite_handle_op(group, topic, handle, lite, None, false)
            .await
            .map(|_| ())
    }

    /// Serves a lite handle's ack, change of invisible time or dead letter on the shard of
    /// its lite topic.
    async fn lite_handle_op(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        lite: Option<&str>,
        change: Option<(u64, bool)>,
        dead_letter: bool,
    ) -> Result<String, BrokerError> {
        let (shard, h) = self.lite_handle_for(group, topic, handle)?;
        let op = crate::mesh::LiteAck {
            group: group.to_owned(),
            topic: topic.to_owned(),
            handle: h,
            lite: lite.filter(|l| !l.is_empty()).map(str::to_owned),
            change,
            dead_letter,
        };
        self.at_shard(shard, op).await
    }

    /// Sends the lite message of `handle` to `%DLQ%<group>` and acks it: a consumer that
    /// gave it up. Refused as [`Core::lite_ack`] refuses.
    pub async fn lite_dead_letter(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        lite: Option<&str>,
    ) -> Result<(), BrokerError> {
        self.lite_handle_op(group, topic, handle, lite, None, true)
            .await
            .map(|_| ())
    }

    /// Hides the lite message of `handle` for `invisible_ms` from now; `suspend`: its next
    /// delivery does not count as an attempt (the client paused the lite topic). The answer
    /// is its new handle.
    pub async fn lite_change_invisible(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
        lite: Option<&str>,
        invisible_ms: u64,
        suspend: bool,
    ) -> Result<String, BrokerError> {
        if invisible_ms > INVISIBLE_MS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "invisible time {invisible_ms} ms is over {INVISIBLE_MS_MAX} ms"
            )));
        }
        self.lite_handle_op(
            group,
            topic,
            handle,
            lite,
            Some((invisible_ms, suspend)),
            false,
        )
        .await
    }

    /// Whether `handle` is a lite pop's.
    pub fn is_lite_handle(handle: &str) -> bool {
        ReceiptHandle::parse(handle).is_ok_and(|h| h.revive_qid == LITE_REVIVE_QID)
    }

    fn lite_handle_for(
        &self,
        group: &str,
        topic: &str,
        handle: &str,
    ) -> Result<(u16, ReceiptHandle), BrokerError> {
        check_names(group, topic)?;
        self.check_master()?;
        let h = ReceiptHandle::parse(handle)?;
        if h.revive_qid != LITE_REVIVE_QID {
            return Err(BrokerError::BadRequest(
                "not a lite message's receipt handle".into(),
            ));
        }
        let cfg = self.lite_parent(topic)?;
        if h.queue_id >= cfg.write_queues.max(cfg.read_queues) {
            return Err(BrokerError::BadRequest(format!(
                "receipt handle names queue {} of topic {topic}, which has {}",
                h.queue_id,
                cfg.write_queues.max(cfg.read_queues)
            )));
        }
        let (shard, _) = self.owner(topic, h.queue_id);
        match h.commit_log_offset {
            Some(c) if c >> message::ids::LOCAL_OFFSET_BITS == u64::from(shard) => Ok((shard, h)),
            _ => Err(BrokerError::BadRequest(
                "receipt handle's CommitLog offset is not in the queue's shard".into(),
            )),
        }
    }

    /// Serves a lite ack or change of invisible time on the queue's core.
    pub(crate) async fn lite_ack_local(
        &self,
        shard: u16,
        op: crate::mesh::LiteAck,
    ) -> Result<String, BrokerError> {
        let h = op.handle;
        let clo = h.commit_log_offset.unwrap_or(0) & message::ids::LOCAL_OFFSET_MAX;
        let sh = self.local_shard(shard)?;
        let named = op.lite.filter(|l| {
            let st = self.lite.shards.borrow();
            st.get(&shard)
                .and_then(|s| s.parents.get(&op.topic))
                .and_then(|p| p.groups.get(&op.group))
                .and_then(|g| g.get(l.as_str()))
                .is_some_and(|c| {
                    c.out
                        .iter()
                        .any(|d| d.offset == h.queue_offset && d.commit_log_offset == clo)
                })
        });
        let lite = match named {
            Some(l) => Some(l),
            None => match sh.read_at(shard::CommitLogOffset(clo)).await? {
                Some(rec) => record_lite_topic(rec.as_bytes()).map(str::to_owned),
                None => None,
            },
        };
        let stale = || {
            BrokerError::NotFound(format!(
                "receipt handle of offset {} of queue {} has expired: the message was acked or handed out again since",
                h.queue_offset, h.queue_id
            ))
        };
        let Some(lite) = lite else {
            return Err(stale());
        };
        let now_ms = self.shared.clock.wall_ms();
        {
            let mut st = self.lite.shards.borrow_mut();
            let d = st
                .get_mut(&shard)
                .and_then(|s| s.parents.get_mut(&op.topic))
                .and_then(|p| p.groups.get_mut(&op.group))
                .and_then(|g| g.get_mut(lite.as_str()))
                .and_then(|c| c.out.iter_mut().find(|d| d.offset == h.queue_offset))
                .filter(|d| {
                    !d.acked
                        && d.pop_time_ms == h.pop_time_ms
                        && d.invisible_ms == h.invisible_ms.max(1)
                        && d.commit_log_offset == clo
                })
                .ok_or_else(stale)?;
            if let Some((invisible_ms, suspend)) = op.change {
                d.pop_time_ms = now_ms.max(d.pop_time_ms + 1);
                d.invisible_ms = invisible_ms.max(1);
                d.suspended = suspend;
                let mut renewed = h.clone();
                renewed.pop_time_ms = d.pop_time_ms;
                renewed.invisible_ms = d.invisible_ms;
                return Ok(renewed.to_string());
            }
        }
        if op.dead_letter {
            let delivered = {
                let st = self.lite.shards.borrow();
                st.get(&shard)
                    .and_then(|s| s.parents.get(&op.topic))
                    .and_then(|p| p.groups.get(&op.group))
                    .and_then(|g| g.get(lite.as_str()))
                    .and_then(|c| c.out.iter().find(|d| d.offset == h.queue_offset))
                    .map_or(1, |d| d.delivered)
            };
            crate::pop::send_dead_letter(self, shard, &op.group, &op.topic, delivered, clo).await?;
        }
        self.lite_done(shard, &op.topic, &op.group, &lite, h.queue_offset);
        self.lite_settle(shard, false);
        Ok(String::new())
    }

    /// Makes the shard's index of `topic` current: built on first use in this master epoch
    /// (from the floor), then read up to the end of the parent's queues on the shard.
    async fn lite_ready(&self, shard: u16, topic: &str) -> Result<(), BrokerError> {
        self.lite_epoch(shard)?;
        let cfg = self.topic_for_read(topic)?;
        let queues: Vec<u32> = (0..cfg.write_queues.max(cfg.read_queues))
            .filter(|&q| self.owner(topic, q).0 == shard)
            .collect();
        for q in queues {
            catch_up(self, shard, topic, q).await?;
        }
        self.lite_settle(shard, false);
        Ok(())
    }

    /// Checks this core serves `shard` as master, and forgets an index built in another
    /// master epoch.
    fn lite_epoch(&self, shard: u16) -> Result<(), BrokerError> {
        let Some(epoch) = self.master_epoch(shard) else {
            return Err(BrokerError::NotMaster(format!(
                "shard {shard} of core {} is not served as master: lite topics are its master's",
                self.id
            )));
        };
        {
            let mut st = self.lite.shards.borrow_mut();
            let s = st.entry(shard).or_default();
            if s.loaded != Some(epoch) {
                // Built in an earlier epoch: what the log gained since is not in it.
                s.parents.clear();
                s.loaded = Some(epoch);
            }
        }
        Ok(())
    }

    /// Stores the shard's floors and forgets idle lite topics, at most every
    /// `SETTLE_EVERY_MS`
    /// (`force`: now).
    pub(crate) fn lite_settle(&self, shard: u16, force: bool) {
        let now_ms = self.shared.clock.wall_ms();
        let idle_ms = i64::try_from(self.shared.config.lite_topic_idle_ms).unwrap_or(i64::MAX);
        let mut floors: Vec<(String, u32, u64)> = Vec::new();
        {
            let mut st = self.lite.shards.borrow_mut();
            let Some(s) = st.get_mut(&shard) else {
                return;
            };
            if !force && now_ms - s.settled_ms < SETTLE_EVERY_MS {
                return;
            }
            s.settled_ms = now_ms;
            let topics = self.topics.borrow();
            for (name, p) in s.parents.iter_mut() {
                let expire_ms = topics
                    .attribute(name, ATTRIBUTE_EXPIRATION)
                    .and_then(|v| v.parse::<i64>().ok())
                    .filter(|&m| m > 0)
                    .map(|m| m.saturating_mul(60_000));
                sweep(p, now_ms, idle_ms, expire_ms);
                let mut low: HashMap<u32, u64> = p.indexed.clone();
                for t in p.topics.values() {
                    if let Some(&(first, _, _)) = t.kept.front() {
                        let e = low.entry(t.queue).or_insert(first);
                        *e = (*e).min(first);
                    }
                }
                floors.extend(low.into_iter().map(|(q, o)| (name.clone(), q, o)));
            }
        }
        let Some(table) = self.offsets.get(&shard) else {
            return;
        };
        let mut t = table.borrow_mut();
        for (topic, q, floor) in floors {
            let key = floor_key(&topic, q);
            if t.query(&key).is_none_or(|s| s.offset != floor) {
                t.commit(&key, floor, crate::groups::EPOCH_ANY, "", false);
            }
        }
    }

    /// Publishes this core's lite topics to the metrics, at most every
    /// `LITE_METRICS_EVERY_MS` (it walks every lite topic and cursor): the counts, and per
    /// (group, parent, queue) the messages the group's lite topics hold for it from its
    /// first unacked one (as the consumer backlog) and its messages out (as POP in flight).
    pub(crate) fn publish_lite(&self) {
        let now_ms = self.shared.clock.wall_ms();
        if now_ms - self.lite.published_ms.get() < LITE_METRICS_EVERY_MS {
            return;
        }
        self.lite.published_ms.set(now_ms);
        let counts = self.lite_counts();
        let metrics = &self.shared.metrics;
        metrics.set_lite(
            self.id,
            counts.lite_topics,
            counts.retained,
            counts.subscriptions,
        );
        // (group, parent, queue) → (backlog, in flight)
        let mut per: HashMap<(String, String, u32), (u64, u64)> = HashMap::new();
        {
            let st = self.lite.shards.borrow();
            for s in st.values() {
                for (parent, p) in &s.parents {
                    for (group, cursors) in &p.groups {
                        for (lite, c) in cursors {
                            let Some(t) = p.topics.get(lite) else {
                                continue;
                            };
                            let from = c.needs_from();
                            let ahead = t.kept.len() - t.kept.partition_point(|k| k.0 < from);
                            let out = c.out.iter().filter(|d| !d.acked).count();
                            let e = per
                                .entry((group.clone(), parent.clone(), t.queue))
                                .or_default();
                            e.0 += ahead as u64;
                            e.1 += out as u64;
                        }
                    }
                }
            }
        }
        let mut published = self.lite.published.borrow_mut();
        for (group, parent, queue) in published.iter() {
            if !per.contains_key(&(group.clone(), parent.clone(), *queue)) {
                metrics.set_backlog(group, parent, *queue, 0);
                metrics.set_pop_inflight(group, parent, *queue, 0);
            }
        }
        published.clear();
        for ((group, parent, queue), (backlog, out)) in per {
            metrics.set_backlog(&group, &parent, queue, backlog);
            metrics.set_pop_inflight(&group, &parent, queue, out);
            published.insert((group, parent, queue));
        }
    }

    /// The counts of the lite topics this core holds.
    pub fn lite_counts(&self) -> LiteCounts {
        let st = self.lite.shards.borrow();
        let mut c = LiteCounts::default();
        for s in st.values() {
            for p in s.parents.values() {
                c.lite_topics += p.topics.len() as u64;
                c.retained += p.topics.values().map(|t| t.kept.len() as u64).sum::<u64>();
            }
        }
        c.subscriptions = self
            .lite
            .subs
            .borrow()
            .values()
            .flat_map(|clients| clients.values())
            .map(|s| s.len() as u64)
            .sum();
        c
    }

    /// Admits a send to lite topic `lite` on its shard: known, or created within the
    /// shard's share of `lite_topics_max`.
    pub(crate) async fn lite_admit_local(
        &self,
        shard: u16,
        op: crate::mesh::LiteAdmit,
    ) -> Result<(), BrokerError> {
        // The lite topic's own queue is read up to its end: a lite topic it holds is known.
        self.lite_epoch(shard)?;
        catch_up(self, shard, &op.topic, op.queue).await?;
        self.lite_settle(shard, false);
        let cap = self
            .shared
            .config
            .lite_topics_max
            .div_ceil(u64::from(self.shared.shard_count.max(1)));
        let now_ms = self.shared.clock.wall_ms();
        let mut st = self.lite.shards.borrow_mut();
        let s = st.entry(shard).or_default();
        let held: u64 = s.parents.values().map(|p| p.topics.len() as u64).sum();
        let p = s.parents.entry(op.topic.clone()).or_default();
        if let Some(t) = p.topics.get_mut(op.lite.as_str()) {
            t.last_write_ms = now_ms;
            return Ok(());
        }
        if held >= cap {
            return Err(BrokerError::LiteTopicQuota(format!(
                "the broker holds {held} lite topics on shard {shard}, its share of lite_topics_max = {}",
                self.shared.config.lite_topics_max
            )));
        }
        p.topics.insert(
            Rc::from(op.lite.as_str()),
            LiteTopic {
                queue: op.queue,
                last_write_ms: now_ms,
                kept: VecDeque::new(),
            },
        );
        Ok(())
    }
}

/// Drops the kept messages of `lite` that every group with a cursor on it has consumed.
fn trim(p: &mut Parent, lite: &str) {
    let needed = p
        .groups
        .values()
        .filter_map(|g| g.get(lite))
        .map(Cursor::needs_from)
        .min();
    let Some(needed) = needed else {
        return;
    };
    if let Some(t) = p.topics.get_mut(lite) {
        while t.kept.front().is_some_and(|k| k.0 < needed) {
            t.kept.pop_front();
        }
        if t.kept.is_empty() && t.kept.capacity() > 4 {
            t.kept = VecDeque::new();
        }
    }
}

/// Forgets the lite topics of `p` idle for `idle_ms` with nothing kept and no batch out,
/// and (with the parent's expiration) those idle for `expire_ms` whatever they keep.
fn sweep(p: &mut Parent, now_ms: i64, idle_ms: i64, expire_ms: Option<i64>) {
    let busy: HashSet<Rc<str>> = p
        .groups
        .values()
        .flat_map(|g| g.iter())
        .filter(|(_, c)| c.out.iter().any(|d| !d.acked))
        .map(|(l, _)| l.clone())
        .collect();
    let mut gone: Vec<Rc<str>> = Vec::new();
    for (l, t) in &p.topics {
        let idle = now_ms - t.last_write_ms;
        let expired = expire_ms.is_some_and(|e| idle >= e);
        let forgotten = idle >= idle_ms && t.kept.is_empty() && !busy.contains(l);
        if expired || forgotten {
            gone.push(l.clone());
        }
    }
    for l in &gone {
        p.topics.remove(l);
    }
    // Cursors of lite topics gone, or never written (a subscription made before the first
    // send: a new one starts at the oldest message, which is then the first).
    let topics = &p.topics;
    for g in p.groups.values_mut() {
        g.retain(|l, _| topics.contains_key(l) || busy.contains(l));
    }
    p.groups.retain(|_, g| !g.is_empty());
}

/// Reads `topic`'s queue `queue` of `shard` from where the index stopped (the floor, on
/// first use) to its end, adding each lite message to its lite topic.
async fn catch_up(core: &Core, shard: u16, topic: &str, queue: u32) -> Result<(), BrokerError> {
    let sh = core.local_shard(shard)?;
    let offsets = sh.queue_offsets(topic, queue);
    let from = {
        let mut st = core.lite.shards.borrow_mut();
        let s = st.entry(shard).or_default();
        let p = s.parents.entry(topic.to_owned()).or_default();
        match p.indexed.get(&queue) {
            Some(&at) => at,
            None => {
                let floor = core
                    .offsets
                    .get(&shard)
                    .and_then(|t| t.borrow().query(&floor_key(topic, queue)))
                    .map_or(offsets.min.0, |s| s.offset);
                p.indexed.insert(queue, floor);
                floor
            }
        }
    };
    let end = sh.visible_max(topic, queue).0;
    if from >= end {
        return Ok(());
    }
    let filter = TagFilter::All;
    let mut at = from.max(offsets.min.0);
    // Bounded: every step reads at least one offset or stops.
    for _ in 0..=((end - at) / u64::from(INDEX_BATCH) + 1) * 4 {
        if at >= end {
            break;
        }
        let r = sh
            .read(&shard::ReadRequest {
                topic,
                queue_id: queue,
                queue_offset: shard::QueueOffset(at),
                max_messages: INDEX_BATCH,
                max_bytes: 4 << 20,
                filter: &filter,
            })
            .await?;
        let next = r.next_queue_offset.0;
        {
            let mut st = core.lite.shards.borrow_mut();
            let Some(p) = st.get_mut(&shard).and_then(|s| s.parents.get_mut(topic)) else {
                return Ok(());
            };
            // Another catch-up of the queue ran meanwhile: it read these.
            if p.indexed.get(&queue).copied().unwrap_or(0) != at {
                return Ok(());
            }
            for s in &r.records {
                let Ok(v) = RecordView::parse(s.as_bytes()) else {
                    continue;
                };
                let Some(lite) = v.property(PROPERTY_LITE_TOPIC).filter(|l| !l.is_empty()) else {
                    continue;
                };
                let size = u32::try_from(s.as_bytes().len()).unwrap_or(u32::MAX);
                let entry = (v.queue_offset(), v.physical_offset(), size);
                let stored = v.store_timestamp_ms();
                match p.topics.get_mut(lite) {
                    Some(t) => {
                        t.last_write_ms = t.last_write_ms.max(stored);
                        if t.kept.back().is_none_or(|b| b.0 < entry.0) {
                            t.kept.push_back(entry);
                        }
                    }
                    None => {
                        p.topics.insert(
                            Rc::from(lite),
                            LiteTopic {
                                queue,
                                last_write_ms: stored,
                                kept: VecDeque::from([entry]),
                            },
                        );
                    }
                }
            }
            let next = if next > at { next } else { end };
            p.indexed.insert(queue, next);
            at = next;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ admin views
//
// What RocketMQ 5.5's lite admin requests (GET_BROKER_LITE_INFO .. TRIGGER_LITE_DISPATCH,
// ARCHITECTURE.md "Lite Topics") read of a core: each core is a broker of its own, so every
// figure is of this core's shards and subscriptions, except the groups and the parents they
// consume, which come from every core ([`Core::lite_group_parents`]).

/// The most lite topics a lag answer lists per order (RocketMQ's topK, bounded: each entry
/// listed costs a read of its first unconsumed message).
pub const LITE_TOP_K_MAX: usize = 100;
/// Clients remembered in [`ClientsSeen`] before those with no subscription here are dropped.
const SEEN_CLIENTS_MIN: usize = 1024;

/// When a client last popped this core, and last got messages from it.
#[derive(Debug, Clone, Copy, Default)]
struct ClientSeen {
    access_ms: i64,
    consume_ms: i64,
}

/// Per client, its last lite pops on this core; bounded by the clients subscribed here (the
/// others are dropped whenever the map doubles past them).
#[derive(Debug, Default)]
struct ClientsSeen {
    by_client: HashMap<String, ClientSeen>,
    limit: usize,
}

/// What this core's broker holds of lite topics (GET_BROKER_LITE_INFO).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteBrokerView {
    /// Lite topics held, over every parent.
    pub lite_topics: u64,
    /// The lite topics this core may hold: its shards' shares of `lite_topics_max`.
    pub lite_topics_max: u64,
    /// (client, lite topic) subscriptions kept here.
    pub subscriptions: u64,
    /// (group, lite topic) cursors kept here.
    pub cursors: u64,
    /// Clients with lite subscriptions kept here.
    pub clients: u64,
    /// Per LITE parent topic, the lite topics held, by name.
    pub by_parent: Vec<(String, u64)>,
}

/// One lite topic as this core sees it (GET_LITE_TOPIC_INFO).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteTopicView {
    /// Whether this core owns the queue holding the lite topic.
    pub owned: bool,
    /// Whether the lite topic is held here (written to and not yet forgotten).
    pub held: bool,
    /// Messages kept for some group.
    pub kept: u64,
    /// Its last write (0 when not held).
    pub last_write_ms: i64,
    /// The (client, group) pairs subscribed to it here, sorted.
    pub subscribers: Vec<(String, String)>,
}

/// A client's lite subscriptions and pops on this core (GET_LITE_CLIENT_INFO).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteClientView {
    /// The lite topics of the parent it subscribed here, sorted; `None`: none.
    pub lite_topics: Option<Vec<String>>,
    /// Its last lite pop here (-1: none since this core started).
    pub access_ms: i64,
    /// Its last lite pop here that handed out messages (0: none).
    pub consume_ms: i64,
}

/// A group's position in one lite topic, in the lite topic's own positions: 0 is its oldest
/// message kept, `kept` is past its last (corvus keeps no queue per lite topic, so it counts
/// nothing of what was dropped; differences are RocketMQ's: `kept - consumed` is the lag).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteLag {
    pub lite_topic: String,
    pub kept: u64,
    /// Kept messages the group consumed: the position of its first unconsumed one.
    pub consumed: u64,
    /// The store time of its first unconsumed message (-1: none).
    pub earliest_unconsumed_ms: i64,
    /// The store time of its last consumed message still kept (0: none kept).
    pub last_consumed_ms: i64,
}

impl LiteLag {
    pub fn lag(&self) -> u64 {
        self.kept.saturating_sub(self.consumed)
    }
}

/// A group's lag over the lite topics of a parent on this core (GET_LITE_GROUP_INFO).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiteGroupLag {
    /// Messages not consumed, over every lite topic.
    pub total: u64,
    /// The store time of the oldest message not consumed (-1: none).
    pub earliest_unconsumed_ms: i64,
    /// The lite topics with the most messages not consumed, most first.
    pub by_count: Vec<LiteLag>,
    /// The lite topics with the oldest messages not consumed, oldest first.
    pub by_time: Vec<LiteLag>,
}

/// A group's position in one lite topic on this core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiteTopicLag {
    /// The lite topic is not held here.
    NotHeld,
    /// Held, and the group has no cursor in it.
    NoCursor,
    At(LiteLag),
}

/// To every core: the (group, parent topic) pairs it knows from its lite subscriptions and
/// cursors.
#[derive(Debug)]
pub struct LiteGroups;

/// A lite topic's group position found under the borrow, read after it.
struct LagAt {
    lite: Rc<str>,
    shard: u16,
    queue: u32,
    kept: u64,
    consumed: u64,
    /// (queue offset, CommitLog offset) of the first unconsumed message.
    first: Option<(u64, u64)>,
    /// CommitLog offset of the last consumed message kept.
    last: Option<u64>,
}

fn lag_at(lite: &Rc<str>, shard: u16, t: &LiteTopic, c: &Cursor) -> LagAt {
    // Its first message not acked: of the batch out, else the cursor (the batch's acked
    // messages are consumed, though the cursor moves only once the whole batch is).
    let from = c
        .out
        .iter()
        .filter(|d| !d.acked)
        .map(|d| d.offset)
        .min()
        .unwrap_or(c.next);
    let consumed = t.kept.partition_point(|k| k.0 < from);
    LagAt {
        lite: lite.clone(),
        shard,
        queue: t.queue,
        kept: t.kept.len() as u64,
        consumed: consumed as u64,
        first: t.kept.get(consumed).map(|k| (k.0, k.1)),
        last: consumed
            .checked_sub(1)
            .and_then(|i| t.kept.get(i))
            .map(|k| k.1),
    }
}

impl Core {
    /// Notes a lite pop of `client` on this core (`got`: it handed out messages).
    fn note_lite_pop(&self, client: &str, got: bool) {
        let now_ms = self.shared.clock.wall_ms();
        let mut seen = self.lite.seen.borrow_mut();
        let e = seen.by_client.entry(client.to_owned()).or_default();
        e.access_ms = now_ms;
        if got {
            e.consume_ms = now_ms;
        }
        if seen.by_client.len() > seen.limit.max(SEEN_CLIENTS_MIN) {
            let subs = self.lite.subs.borrow();
            seen.by_client
                .retain(|c, _| subs.values().any(|clients| clients.contains_key(c)));
            seen.limit = seen.by_client.len() * 2;
        }
    }

    /// The LITE parent topics with a queue on local shard `shard` this core serves as master.
    fn lite_parents_on(&self, shard: u16, only: Option<&str>) -> Vec<String> {
        if self.master_epoch(shard).is_none() {
            return Vec::new();
        }
        let topics = self.topics.borrow();
        topics
            .all()
            .into_iter()
            .filter(|cfg| only.is_none_or(|t| t == cfg.name))
            .filter(|cfg| is_lite_topic(&topics, &cfg.name))
            .filter(|cfg| {
                (0..cfg.write_queues.max(cfg.read_queues))
                    .any(|q| self.owner(&cfg.name, q).0 == shard)
            })
            .map(|cfg| cfg.name)
            .collect()
    }

    /// Reads the LITE parents' queues on this core's master shards up to their ends (`only`:
    /// that parent's), so what the index says is what the log holds.
    pub async fn lite_catch_up(&self, only: Option<&str>) -> Result<(), BrokerError> {
        let mut shards: Vec<u16> = self.shards.keys().copied().collect();
        shards.sort_unstable();
        for shard in shards {
            for topic in self.lite_parents_on(shard, only) {
                match self.lite_ready(shard, &topic).await {
                    // Deleted, or no longer master, meanwhile: nothing of it to count.
                    Ok(()) | Err(BrokerError::NotMaster(_) | BrokerError::TopicNotExist(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// What this core's broker holds of lite topics, its index read up to the log's end.
    pub async fn lite_view(&self) -> Result<LiteBrokerView, BrokerError> {
        self.lite_catch_up(None).await?;
        let counts = self.lite_counts();
        let cap = self
            .shared
            .config
            .lite_topics_max
            .div_ceil(u64::from(self.shared.shard_count.max(1)));
        let mut by_parent: HashMap<String, u64> = HashMap::new();
        let mut cursors = 0u64;
        {
            let st = self.lite.shards.borrow();
            for s in st.values() {
                for (name, p) in &s.parents {
                    *by_parent.entry(name.clone()).or_default() += p.topics.len() as u64;
                    cursors += p.groups.values().map(|g| g.len() as u64).sum::<u64>();
                }
            }
        }
        let mut by_parent: Vec<(String, u64)> = by_parent.into_iter().collect();
        by_parent.sort();
        let clients = {
            let subs = self.lite.subs.borrow();
            let ids: HashSet<&String> = subs.values().flat_map(|c| c.keys()).collect();
            ids.len() as u64
        };
        Ok(LiteBrokerView {
            lite_topics: counts.lite_topics,
            lite_topics_max: cap.saturating_mul(self.shards.len() as u64),
            subscriptions: counts.subscriptions,
            cursors,
            clients,
            by_parent,
        })
    }

    /// Lite topic `lite` of parent `topic` as this core sees it.
    pub async fn lite_topic_view(
        &self,
        topic: &str,
        lite: &str,
    ) -> Result<LiteTopicView, BrokerError> {
        let cfg = self.lite_parent(topic)?;
        let queue = lite_queue(lite, cfg.write_queues);
        let (shard, core) = self.owner(topic, queue);
        let mut view = LiteTopicView {
            owned: core == self.id,
            ..LiteTopicView::default()
        };
        if !view.owned || self.master_epoch(shard).is_none() {
            return Ok(view);
        }
        self.lite_ready(shard, topic).await?;
        {
            let st = self.lite.shards.borrow();
            if let Some(t) = st
                .get(&shard)
                .and_then(|s| s.parents.get(topic))
                .and_then(|p| p.topics.get(lite))
            {
                view.held = true;
                view.kept = t.kept.len() as u64;
                view.last_write_ms = t.last_write_ms;
            }
        }
        let subs = self.lite.subs.borrow();
        for ((group, parent), clients) in subs.iter() {
            if parent != topic {
                continue;
            }
            for (client, set) in clients {
                if set.contains(lite) {
                    view.subscribers.push((client.clone(), group.clone()));
                }
            }
        }
        view.subscribers.sort();
        Ok(view)
    }

    /// `client`'s lite subscriptions of `topic` for `group` on this core, and its last pops
    /// here.
    pub fn lite_client_view(&self, group: &str, topic: &str, client: &str) -> LiteClientView {
        let subs = self.lite.subs.borrow();
        let lite_topics = subs
            .get(&(group.to_owned(), topic.to_owned()))
            .and_then(|c| c.get(client))
            .map(|set| {
                let mut v: Vec<String> = set.iter().map(|l| l.to_string()).collect();
                v.sort();
                v
            });
        let seen = self.lite.seen.borrow().by_client.get(client).copied();
        LiteClientView {
            lite_topics,
            access_ms: seen.map_or(-1, |s| s.access_ms),
            consume_ms: seen.map_or(0, |s| s.consume_ms),
        }
    }

    /// The store time of the record at CommitLog offset `clo` of local shard `shard`.
    async fn lite_stored_ms(&self, shard: u16, clo: u64) -> Result<Option<i64>, BrokerError> {
        let sh = self.local_shard(shard)?;
        let rec = sh.read_at(shard::CommitLogOffset(clo)).await?;
        Ok(rec.and_then(|r| {
            RecordView::parse(r.as_bytes())
                .ok()
                .map(|v| v.store_timestamp_ms())
        }))
    }

    /// `at` with its store times read.
    async fn lite_lag(&self, at: &LagAt) -> Result<LiteLag, BrokerError> {
        let earliest = match at.first {
            Some((_, clo)) => self.lite_stored_ms(at.shard, clo).await?.unwrap_or(-1),
            None => -1,
        };
        let last = match at.last {
            Some(clo) => self.lite_stored_ms(at.shard, clo).await?.unwrap_or(0),
            None => 0,
        };
        Ok(LiteLag {
            lite_topic: at.lite.to_string(),
            kept: at.kept,
            consumed: at.consumed,
            earliest_unconsumed_ms: earliest,
            last_consumed_ms: last,
        })
    }

    /// `group`'s position in lite topic `lite` of `topic` on this core.
    pub async fn lite_topic_lag(
        &self,
        group: &str,
        topic: &str,
        lite: &str,
    ) -> Result<LiteTopicLag, BrokerError> {
        let cfg = self.lite_parent(topic)?;
        let (shard, core) = self.owner(topic, lite_queue(lite, cfg.write_queues));
        if core != self.id || self.master_epoch(shard).is_none() {
            return Ok(LiteTopicLag::NotHeld);
        }
        self.lite_ready(shard, topic).await?;
        let at = {
            let st = self.lite.shards.borrow();
            let Some(p) = st.get(&shard).and_then(|s| s.parents.get(topic)) else {
                return Ok(LiteTopicLag::NotHeld);
            };
            let Some((name, t)) = p.topics.get_key_value(lite) else {
                return Ok(LiteTopicLag::NotHeld);
            };
            let Some(c) = p.groups.get(group).and_then(|g| g.get(lite)) else {
                return Ok(LiteTopicLag::NoCursor);
            };
            lag_at(name, shard, t, c)
        };
        Ok(LiteTopicLag::At(self.lite_lag(&at).await?))
    }

    /// `group`'s lag over the lite topics of `topic` on this core: the total, and the
    /// `top_k` (at most [`LITE_TOP_K_MAX`]) lite topics with the most messages and with the
    /// oldest message not consumed.
    pub async fn lite_group_lag(
        &self,
        group: &str,
        topic: &str,
        top_k: usize,
    ) -> Result<LiteGroupLag, BrokerError> {
        self.lite_parent(topic)?;
        self.lite_catch_up(Some(topic)).await?;
        let k = top_k.min(LITE_TOP_K_MAX);
        let mut behind: Vec<LagAt> = Vec::new();
        {
            let st = self.lite.shards.borrow();
            for (&shard, s) in st.iter() {
                let Some(p) = s.parents.get(topic) else {
                    continue;
                };
                let Some(g) = p.groups.get(group) else {
                    continue;
                };
                for (lite, c) in g {
                    if let Some(t) = p.topics.get(lite) {
                        let at = lag_at(lite, shard, t, c);
                        if at.kept > at.consumed {
                            behind.push(at);
                        }
                    }
                }
            }
        }
        let mut out = LiteGroupLag {
            total: behind.iter().map(|a| a.kept - a.consumed).sum(),
            earliest_unconsumed_ms: -1,
            ..LiteGroupLag::default()
        };
        // Most behind first; ties by name, so the answer is the same each time.
        behind.sort_by(|a, b| {
            (b.kept - b.consumed)
                .cmp(&(a.kept - a.consumed))
                .then_with(|| a.lite.cmp(&b.lite))
        });
        for at in behind.iter().take(k) {
            out.by_count.push(self.lite_lag(at).await?);
        }
        // By time: within a queue, store times follow offsets, so each queue's `k` first
        // unconsumed messages hold its oldest ones; its first holds the queue's oldest.
        behind.sort_by(|a, b| {
            (a.shard, a.queue, a.first.map(|f| f.0)).cmp(&(b.shard, b.queue, b.first.map(|f| f.0)))
        });
        let mut candidates: Vec<LiteLag> = Vec::new();
        let mut run: Option<((u16, u32), usize)> = None;
        for at in &behind {
            let here = (at.shard, at.queue);
            let taken = match run {
                Some((q, n)) if q == here => n,
                _ => 0,
            };
            run = Some((here, taken + 1));
            if taken >= k.max(1) {
                continue;
            }
            let lag = self.lite_lag(at).await?;
            if lag.earliest_unconsumed_ms >= 0
                && (out.earliest_unconsumed_ms < 0
                    || lag.earliest_unconsumed_ms < out.earliest_unconsumed_ms)
            {
                out.earliest_unconsumed_ms = lag.earliest_unconsumed_ms;
            }
            if taken < k {
                candidates.push(lag);
            }
        }
        candidates.sort_by(|a, b| {
            a.earliest_unconsumed_ms
                .cmp(&b.earliest_unconsumed_ms)
                .then_with(|| a.lite_topic.cmp(&b.lite_topic))
        });
        candidates.truncate(k);
        out.by_time = candidates;
        Ok(out)
    }

    /// The (group, parent topic) pairs of this core's lite subscriptions and cursors.
    pub(crate) fn lite_group_parents_local(&self) -> Vec<(String, String)> {
        let mut pairs: HashSet<(String, String)> =
            self.lite.subs.borrow().keys().cloned().collect();
        let st = self.lite.shards.borrow();
        for s in st.values() {
            for (topic, p) in &s.parents {
                for group in p.groups.keys() {
                    pairs.insert((group.clone(), topic.clone()));
                }
            }
        }
        pairs.into_iter().collect()
    }

    /// The (group, parent topic) pairs any core knows from its lite subscriptions and
    /// cursors: the parents each group consumes, sorted.
    pub async fn lite_group_parents(&self) -> Result<Vec<(String, String)>, BrokerError> {
        let mut all: Vec<(String, String)> = Vec::new();
        for core in 0..self.shared.cores {
            all.extend(Box::pin(self.at_core(core, LiteGroups)).await?);
        }
        all.sort();
        all.dedup();
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_rocketmq_checks_topic_names() {
        assert!(check_lite_topic("session-42").is_ok());
        assert!(check_lite_topic("a.b_c|d%e").is_ok());
        assert!(check_lite_topic("").is_err());
        assert!(check_lite_topic(&"x".repeat(65)).is_err());
        assert!(check_lite_topic("has space").is_err());
        assert!(check_lite_topic("slash/no").is_err());
    }

    #[test]
    fn a_lite_topic_has_one_queue() {
        let q = lite_queue("session-1", 8);
        assert!(q < 8);
        assert_eq!(q, lite_queue("session-1", 8));
        assert_eq!(lite_queue("anything", 0), 0);
    }

    #[test]
    fn trim_keeps_what_the_slowest_cursor_needs() {
        let mut p = Parent::default();
        let l: Rc<str> = Rc::from("l");
        p.topics.insert(
            l.clone(),
            LiteTopic {
                queue: 0,
                last_write_ms: 0,
                kept: VecDeque::from([(1, 10, 100), (3, 30, 100), (5, 50, 100)]),
            },
        );
        // No cursor: everything is kept for the group that comes.
        trim(&mut p, "l");
        assert_eq!(p.topics["l"].kept.len(), 3);
        p.groups.entry("a".into()).or_default().insert(
            l.clone(),
            Cursor {
                next: 4,
                out: Vec::new(),
            },
        );
        p.groups.entry("b".into()).or_default().insert(
            l.clone(),
            Cursor {
                next: 6,
                out: Vec::new(),
            },
        );
        trim(&mut p, "l");
        assert_eq!(p.topics["l"].kept, VecDeque::from([(5, 50, 100)]));
    }

    #[test]
    fn sweep_forgets_idle_empty_lite_topics_and_expires_full_ones() {
        let mut p = Parent::default();
        for (name, last, kept) in [("idle", 0, 0), ("busy", 0, 2), ("fresh", 900, 0)] {
            p.topics.insert(
                Rc::from(name),
                LiteTopic {
                    queue: 0,
                    last_write_ms: last,
                    kept: (0..kept).map(|i| (i, i, 100)).collect(),
                },
            );
        }
        sweep(&mut p, 1_000, 500, None);
        let mut left: Vec<&str> = p.topics.keys().map(|k| &**k).collect();
        left.sort();
        assert_eq!(left, ["busy", "fresh"]);
        sweep(&mut p, 1_000, 500, Some(800));
        let left: Vec<&str> = p.topics.keys().map(|k| &**k).collect();
        assert_eq!(left, ["fresh"]);
    }
}
