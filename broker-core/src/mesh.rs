//! All cross-core traffic. Nothing else in the broker talks to another core.
//!
//! The cores are joined by glommio's full channel mesh. Everything that crosses is a
//! [`CoreMessage`]: reading that enum is reading all cross-core traffic. A request carries a
//! token; the serving core answers with a `Reply` carrying the same token over the mesh, and
//! the asking core completes the waiting task.
//!
//! Requests and replies travel on two meshes of their own. Every request inbox is bounded
//! twice: the mesh channel holds at most `inbox_capacity` requests, and a core works on at
//! most `inbox_capacity` remote requests at once (a semaphore taken before the next request
//! is received). A request that finds the peer's channel full is answered "system busy" at
//! once rather than queued without limit. Replies have a lane of their own, read without
//! any permit: a core whose permits are all held by long requests (forwarded long polls wait
//! up to 30 s) still completes the calls it made, at once. The reply lane holds
//! `2 x inbox_capacity` replies per pair of cores, more than can ever be outstanding (a
//! core's calls to a peer are at most its queued plus its in-progress requests), so a reply
//! never waits for room either.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use glommio::channels::local_channel::{self, LocalSender};
use message::offsets::QueueOffset;
use protocol::{CommitOffset, GroupQueue, PullRequest, QueryByKey, TopicConfig};

use crate::error::BrokerError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    Found,
    NoNewMessage,
    OffsetMoved,
}

/// A pull's answer; `B` is the body: zero-copy slices on the owning core, owned bytes once it
/// has crossed cores.
#[derive(Debug)]
pub struct PullOutcome<B> {
    pub status: PullStatus,
    pub next_offset: QueueOffset,
    pub min_offset: QueueOffset,
    pub max_offset: QueueOffset,
    pub count: u32,
    /// Where the consumer should read this queue next (RocketMQ's suggestWhichBrokerId):
    /// 0 the master, else a slave's broker id (`slave_read_enable`).
    pub suggest_broker_id: u64,
    pub body: B,
}

impl<B> PullOutcome<B> {
    /// The same outcome with its body converted.
    pub fn map_body<C>(self, f: impl FnOnce(B) -> C) -> PullOutcome<C> {
        PullOutcome {
            status: self.status,
            next_offset: self.next_offset,
            min_offset: self.min_offset,
            max_offset: self.max_offset,
            count: self.count,
            suggest_broker_id: self.suggest_broker_id,
            body: f(self.body),
        }
    }
}

pub use crate::error::Appended;

/// An enum of ops, one variant per op type, and each op type's conversion into it (so
/// `at_shard(shard, op)` takes the op's own type).
macro_rules! ops {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident($t:ty),)* }) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$vmeta])* $variant($t),)*
        }

        $(impl From<$t> for $name {
            fn from(op: $t) -> $name {
                $name::$variant(op)
            }
        })*
    };
}

ops! {
    /// What a shard is asked: served by the core that hosts it (`Core::at_shard` decides
    /// local or remote, in one place; the shard id travels beside it). Each variant is an op of
    /// its own type, whose answer type its [`ShardCall`](crate::calls::ShardCall) names.
    #[derive(Debug)]
    pub enum ShardOp {
        Append(Append),
        Pull(Pull),
        QueueOffsets(QueueOffsets),
        SearchOffset(SearchOffset),
        StoreTime(StoreTime),
        ViewByOffset(ViewByOffset),
        /// A group's offset or lease of one of the shard's queues.
        GroupOffset(OffsetOp),
        /// Commit or roll back one of the shard's half messages.
        EndTransaction(protocol::EndTransaction),
        /// POP from one of the shard's queues (`crate::pop`).
        Pop(PopQueue),
        PopAck(PopAck),
        PopChangeInvisible(PopChangeInvisible),
        /// A send to a lite topic of the shard, admitted within the quota (`crate::lite`).
        LiteAdmit(LiteAdmit),
        LiteAck(LiteAck),
        /// A retention pass now, out of its schedule.
        RunRetention(RunRetention),
    }
}

/// One retention pass of the shard now (mqadmin's deleteExpiredCommitLog and
/// cleanExpiredCQ): the segments it deleted.
#[derive(Debug)]
pub struct RunRetention;

/// Pops from one queue of the shard.
#[derive(Debug)]
pub struct PopQueue {
    pub queue_id: u32,
    pub req: crate::pop::PopRequest,
}

/// Acks a popped message of one of the shard's queues by its (checked) receipt handle,
/// after sending it to the group's dead-letter topic with `dead_letter`.
#[derive(Debug)]
pub struct PopAck {
    pub group: String,
    pub topic: String,
    pub handle: crate::pop::ReceiptHandle,
    pub dead_letter: bool,
}

/// Hides a popped message of one of the shard's queues anew; answered with its new handle.
#[derive(Debug)]
pub struct PopChangeInvisible {
    pub group: String,
    pub topic: String,
    pub handle: crate::pop::ReceiptHandle,
    pub invisible_ms: u64,
}

/// Lets a send to lite topic `lite` (in queue `queue` of parent `topic`) through: known to
/// the shard, or created within its share of `lite_topics_max`.
#[derive(Debug)]
pub struct LiteAdmit {
    pub topic: String,
    pub queue: u32,
    pub lite: String,
}

/// Acks a lite message of one of the shard's queues by its (checked) receipt handle, or
/// with `change` = (invisible ms, suspend) hides it anew; answered with the new handle (empty
/// for an ack).
#[derive(Debug)]
pub struct LiteAck {
    pub group: String,
    pub topic: String,
    pub handle: crate::pop::ReceiptHandle,
    /// The lite topic the client named (checked against the batch out).
    pub lite: Option<String>,
    pub change: Option<(u64, bool)>,
    /// Sends the message to the group's dead-letter topic before it is acked.
    pub dead_letter: bool,
}

/// Stores a batch of records in one of the shard's queues.
#[derive(Debug)]
pub struct Append {
    pub topic: String,
    pub queue_id: u32,
    pub records: Bytes,
    /// How many records the sender said the batch holds (checked by the shard).
    pub count: u32,
}

/// Reads a queue: the wire's own request, as it arrived, and the SQL92 expression its
/// records must match (checked by the sender; parsed again from the owning core's cache).
#[derive(Debug)]
pub struct Pull {
    pub args: PullRequest,
    pub sql92: Option<String>,
}

/// A queue's smallest and next offsets.
#[derive(Debug)]
pub struct QueueOffsets {
    pub topic: String,
    pub queue_id: u32,
}

/// The first offset of a queue stored at or after a time.
#[derive(Debug)]
pub struct SearchOffset {
    pub topic: String,
    pub queue_id: u32,
    pub timestamp_ms: i64,
}

/// The store time of a queue's record at a queue offset (RocketMQ's
/// getMessageStoreTimeStamp).
#[derive(Debug)]
pub struct StoreTime {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
}

/// The records stored at a CommitLog offset.
#[derive(Debug)]
pub struct ViewByOffset {
    pub commit_log_offset: u64,
}

ops! {
    /// What a core is asked, whatever shards it hosts (`Core::at_core`). Each variant is an op
    /// of its own type, whose answer type its [`CoreCall`](crate::calls::CoreCall) names.
    #[derive(Debug)]
    pub enum CoreOp {
        /// Every shard of the serving core.
        QueryByKey(QueryByKey),
        /// The serving core's counters.
        Status(Status),
        SendStages(SendStages),
        CreateTopic(CreateTopic),
        TopicChanged(TopicChanged),
        /// To core 0, which keeps group membership.
        Group(GroupOp),
        RunningInfo(RunningInfo),
        GroupChanged(GroupChanged),
        ReleaseLeases(ReleaseLeases),
        ClientConnected(ClientConnected),
        /// To core 0, which keeps the subscription group configs.
        SubGroup(SubGroupOp),
        /// To core 0, which keeps the groups' request modes with their configs.
        RequestMode(RequestModeOp),
        DeleteTopic(DeleteTopic),
        TopicDeleted(TopicDeleted),
        PushReply(PushReply),
        /// To a core: ask a producer of the check's group connected here about a transaction.
        CheckTransaction(protocol::CheckTransaction),
        PopInflight(PopInflight),
        /// To the core a recall handle names: recall a scheduled message its shards hold.
        Recall(Recall),
        /// To every core: a client's lite subscriptions changed (each core keeps those of
        /// the lite topics it owns).
        LiteSubscribe(crate::lite::LiteSubscription),
        /// To every core: a client that lost a lite topic to another client of its Exclusive
        /// group is told, where it is connected.
        LiteEvicted(crate::lite::Evicted),
        /// To every core in turn: a lite pop of what a client subscribed there, for a
        /// client that receives from one core only.
        LitePop(crate::lite::LitePop),
        /// To every core: the groups its lite subscriptions and cursors know, with their
        /// parent topics (the lite admin requests).
        LiteGroups(crate::lite::LiteGroups),
        /// To core 0, which keeps config changes in order (`crate::live_config`).
        UpdateConfig(UpdateConfig),
        /// From core 0 to every core: the config to run with from now on.
        ApplyConfig(ApplyConfig),
        /// To the owner core of sends' `UNIQ_KEY`s: claim them (`crate::dedup`).
        DedupClaim(crate::dedup::Claim),
        /// To the owner core: where the claimed keys were stored, or their release.
        DedupSettle(crate::dedup::Settle),
        /// To every core: this core's recent demand of each quota rule
        /// (`crate::quota`), from which every core sets its share.
        QuotaDemand(QuotaDemand),
    }
}

/// To core 0: change the keys of a properties body (RocketMQ's UPDATE_BROKER_CONFIG),
/// stored for the next start and applied on every core when they may change while running.
#[derive(Debug)]
pub struct UpdateConfig(pub String);

/// From core 0 to every core: run with this config from now on (it differs from the one
/// running only in keys that may change while running).
#[derive(Debug)]
pub struct ApplyConfig(pub Box<crate::config::BrokerConfig>);

/// To every other core, every `crate::quota::EXCHANGE_INTERVAL`: how much of each quota
/// rule (by its key) the clients of core `from` asked for lately, per second, under the
/// rules of `text` (the `quotas` key it runs with).
#[derive(Debug, Clone)]
pub struct QuotaDemand {
    pub from: u16,
    pub text: String,
    pub demands: Vec<(String, f64)>,
}

/// To the core holding it: recall the scheduled message of `topic` with `uniq_key` due at
/// `deliver_at_ms`.
#[derive(Debug)]
pub struct Recall {
    pub topic: String,
    pub uniq_key: String,
    pub deliver_at_ms: i64,
}

/// To every core: how many messages of a group and topic its shards have popped and not
/// seen acked.
#[derive(Debug)]
pub struct PopInflight {
    pub group: String,
    pub topic: String,
}

/// The serving core's counters.
#[derive(Debug)]
pub struct Status;

/// The serving core's send-stage histograms (cleared after, with `reset`).
#[derive(Debug)]
pub struct SendStages {
    pub reset: bool,
}

/// To core 0: create or update a topic (persist, broadcast, register), with its new
/// attributes, or `None` to keep the ones it has.
#[derive(Debug)]
pub struct CreateTopic(pub TopicConfig, pub Option<crate::topics::Attributes>);

/// From core 0 to every other core: the topic table changed (a topic and its attributes).
#[derive(Debug)]
pub struct TopicChanged(pub TopicConfig, pub crate::topics::Attributes);

/// To every core: if a connection of this client is open here, ask it what it is doing
/// and bring back its answer.
#[derive(Debug)]
pub struct RunningInfo(pub String);

/// From core 0 to every core: `group`'s members changed; the RocketMQ clients among
/// `members` with a connection here are told (NOTIFY_CONSUMER_IDS_CHANGED) so they
/// rebalance at once.
#[derive(Debug)]
pub struct GroupChanged {
    pub group: String,
    pub members: Vec<String>,
}

/// To every core: `client_id` left `group` (or its connection closed); the leases it holds
/// for the group on the core's shards end at once, so the members that stay can lock its
/// queues at their rebalance.
#[derive(Debug)]
pub struct ReleaseLeases {
    pub group: String,
    pub client_id: String,
}

/// To every core: is a connection of this client open there?
#[derive(Debug)]
pub struct ClientConnected(pub String);

/// To core 0: delete a topic (persist, broadcast, register).
#[derive(Debug)]
pub struct DeleteTopic(pub String);

/// From core 0 to every other core: the topic was deleted.
#[derive(Debug)]
pub struct TopicDeleted(pub String);

/// To every core: if a connection of `client_id` is open here, push it this reply
/// (request-reply; `crate::reply`).
#[derive(Debug)]
pub struct PushReply {
    pub client_id: String,
    pub reply: Box<crate::link::ReplyPush>,
}

/// A change to, or a look at, the subscription group configs (served by core 0).
#[derive(Debug)]
pub enum SubGroupOp {
    Upsert(crate::sub_groups::GroupConfig),
    Delete(String),
    /// One group's config, or all of them.
    List(Option<String>),
}

/// A change to, or a look at, how a group consumes a topic (served by core 0).
#[derive(Debug)]
pub enum RequestModeOp {
    Set(crate::sub_groups::RequestMode),
    Get { topic: String, group: String },
}

/// A request that crosses cores: for a shard, or for a core.
#[derive(Debug)]
pub enum ShardRequest {
    Shard { shard: u16, op: ShardOp },
    Core(CoreOp),
}

/// Its reply: the op's own answer, boxed to cross (`crate::calls` opens it as the type the
/// op names; a pull's records cross as owned bytes).
pub type ShardReply = Result<Box<dyn std::any::Any + Send>, BrokerError>;

/// A membership request (served by core 0).
#[derive(Debug)]
pub enum GroupOp {
    Heartbeat {
        group: String,
        client_id: String,
    },
    Unregister {
        group: String,
        client_id: String,
    },
    WaitChange {
        group: String,
        known_version: u64,
        timeout_ms: u64,
    },
}

/// An offset or lease request (served by the queue's owner core).
#[derive(Debug)]
pub enum OffsetOp {
    Query(GroupQueue),
    Commit(CommitOffset),
    Reset {
        queue: GroupQueue,
        offset: u64,
    },
    Lock {
        queue: GroupQueue,
        client_id: String,
        lease_ms: u64,
    },
    /// The client gives its lease of the queue back (RocketMQ's UNLOCK_BATCH_MQ).
    Unlock {
        queue: GroupQueue,
        client_id: String,
    },
}

impl OffsetOp {
    pub fn queue(&self) -> &GroupQueue {
        match self {
            OffsetOp::Query(q)
            | OffsetOp::Reset { queue: q, .. }
            | OffsetOp::Lock { queue: q, .. }
            | OffsetOp::Unlock { queue: q, .. } => q,
            OffsetOp::Commit(c) => &c.queue,
        }
    }
}

/// Everything that crosses cores.
#[derive(Debug)]
pub enum CoreMessage {
    Request {
        from: u16,
        token: u64,
        request: ShardRequest,
    },
    Reply {
        token: u64,
        reply: ShardReply,
    },
}

/// The two meshes every core joins, before it is started: requests, and replies.
#[derive(Clone)]
pub struct MeshLinks {
    requests: MeshBuilder<CoreMessage, Full>,
    replies: MeshBuilder<CoreMessage, Full>,
}

/// A core's receiving ends of both meshes, for [`spawn_receivers`].
pub struct MeshReceivers {
    requests: Receivers<CoreMessage>,
    replies: Receivers<CoreMessage>,
}

impl MeshLinks {
    pub fn new(cores: usize, inbox_capacity: usize) -> MeshLinks {
        MeshLinks {
            requests: MeshBuilder::full(cores, inbox_capacity),
            replies: MeshBuilder::full(cores, inbox_capacity.saturating_mul(2)),
        }
    }

    /// Joins both meshes (every core must, in this order) and returns this core's end.
    pub async fn join(self, core: u16) -> Result<(Mesh, MeshReceivers), String> {
        let (senders, requests) = self
            .requests
            .join()
            .await
            .map_err(|e| format!("cannot join the request mesh: {e}"))?;
        let (reply_senders, replies) = self
            .replies
            .join()
            .await
            .map_err(|e| format!("cannot join the reply mesh: {e}"))?;
        Ok((
            Mesh::new(core, senders, reply_senders),
            MeshReceivers { requests, replies },
        ))
    }
}

/// One core's end of the mesh.
pub struct Mesh {
    core: u16,
    senders: Senders<CoreMessage>,
    reply_senders: Senders<CoreMessage>,
    pending: RefCell<HashMap<u64, LocalSender<ShardReply>>>,
    next_token: Cell<u64>,
    /// Remote requests taken from the inbox and not yet answered.
    in_progress: Cell<u64>,
}

impl Mesh {
    fn new(core: u16, senders: Senders<CoreMessage>, reply_senders: Senders<CoreMessage>) -> Mesh {
        Mesh {
            core,
            senders,
            reply_senders,
            pending: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            in_progress: Cell::new(0),
        }
    }

    pub fn cores(&self) -> u16 {
        self.senders.nr_consumers() as u16
    }

    /// Requests this core is serving for others: its inbox depth.
    pub fn inbox_depth(&self) -> u64 {
        self.in_progress.get()
    }

    /// Sends a request to `core` and waits for the answer. A full inbox is an answer: busy.
    pub async fn call(&self, core: u16, request: ShardRequest) -> Result<ShardReply, BrokerError> {
        debug_assert_ne!(core, self.core, "a local request must not cross the mesh");
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        let (tx, rx) = local_channel::new_bounded(1);
        self.pending.borrow_mut().insert(token, tx);
        let msg = CoreMessage::Request {
            from: self.core,
            token,
            request,
        };
        if self.senders.try_send_to(core as usize, msg).is_err() {
            self.pending.borrow_mut().remove(&token);
            return Err(BrokerError::Busy(format!("core {core}'s inbox is full")));
        }
        rx.recv().await.ok_or(BrokerError::ShuttingDown)
    }

    /// Answers a request of core `to`, on the reply lane.
    pub async fn reply(&self, to: u16, token: u64, reply: ShardReply) {
        // Room is always there (see the module docs), and the asking core reads the lane
        // without waiting for anything.
        let _ = self
            .reply_senders
            .send_to(to as usize, CoreMessage::Reply { token, reply })
            .await;
    }

    fn complete(&self, token: u64, reply: ShardReply) {
        if let Some(tx) = self.pending.borrow_mut().remove(&token) {
            let _ = tx.try_send(reply);
        }
    }

    pub fn begin_serving(&self) {
        self.in_progress.set(self.in_progress.get() + 1);
    }

    pub fn end_serving(&self) {
        self.in_progress
            .set(self.in_progress.get().saturating_sub(1));
    }

    /// Fails every pending call (shutdown).
    pub fn fail_pending(&self) {
        self.pending.borrow_mut().clear();
    }
}

/// Runs the receive loops of one core: replies complete local waiters, as they come;
/// requests are handed to `serve`, at most `inbox_capacity` at once.
pub fn spawn_receivers<F, Fut>(
    mesh: Rc<Mesh>,
    receivers: MeshReceivers,
    inbox_capacity: u64,
    serve: F,
) where
    F: Fn(u16, u64, ShardRequest) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let MeshReceivers {
        mut requests,
        mut replies,
    } = receivers;
    for (peer, stream) in replies.streams() {
        let mesh = mesh.clone();
        glommio::spawn_local(async move {
            use futures_lite::StreamExt;
            let mut stream = stream;
            while let Some(msg) = stream.next().await {
                broker_base::idle_poll::note_work();
                match msg {
                    CoreMessage::Reply { token, reply } => mesh.complete(token, reply),
                    CoreMessage::Request { .. } => {
                        debug_assert!(false, "a request on the reply lane");
                        tracing::error!(peer, "a request on the reply lane: dropped");
                    }
                }
            }
            tracing::debug!(peer, "mesh reply lane closed");
        })
        .detach();
    }
    let permits = Rc::new(glommio::sync::Semaphore::new(inbox_capacity));
    for (peer, stream) in requests.streams() {
        let mesh = mesh.clone();
        let permits = permits.clone();
        let serve = serve.clone();
        glommio::spawn_local(async move {
            use futures_lite::StreamExt;
            let mut stream = stream;
            loop {
                let Ok(permit) = permits.acquire_static_permit(1).await else {
                    break;
                };
                let Some(msg) = stream.next().await else {
                    break;
                };
                broker_base::idle_poll::note_work();
                match msg {
                    CoreMessage::Reply { token, reply } => {
                        drop(permit);
                        mesh.complete(token, reply);
                    }
                    CoreMessage::Request {
                        from,
                        token,
                        request,
                    } => {
                        mesh.begin_serving();
                        let mesh = mesh.clone();
                        let fut = serve(from, token, request);
                        glommio::spawn_local(async move {
                            fut.await;
                            mesh.end_serving();
                            drop(permit);
                        })
                        .detach();
                    }
                }
            }
            tracing::debug!(peer, "mesh receiver closed");
        })
        .detach();
    }
}
