//! One core's state and the request handlers.
//!
//! The handlers here know nothing of frames or wire codecs: they take plain arguments and
//! return plain results or a [`BrokerError`], so every front end (the native protocol,
//! RocketMQ's remoting) calls the same functions. A client is reached through the core's
//! [`ClientLink`], never through a connection. Each handler finds the owning shard of its queue
//! (a pure function), serves it on this core when the shard is local, and otherwise sends it
//! across the mesh, counting the hop.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use message::TagFilter;
use protocol::{queue_owner_shard, shard_core, CoreStatus, StageHistogram, TopicConfig};
use shard::{ReadRequest, ReadStatus, Shard, StoredSlice};

use crate::calls::{opened, Answer, CoreCall, Crossing, ShardCall};
use crate::config::FlushDiskType;
use crate::error::BrokerError;
use crate::groups::{self, MemberView, Membership, OffsetTable, StoredOffset};
use crate::link::{ClientLink, NoClients};
use crate::mesh::{
    self, Appended, GroupOp, Mesh, OffsetOp, PullOutcome, PullStatus, ShardReply, ShardRequest,
};
use crate::numbering::TopicQueues;
use crate::shared::Shared;
use crate::stages::{SendStages, Stage};
use crate::topics::{self, TopicTable, AUTO_CREATE_TOPIC_KEY};

/// Per-core counters (single-threaded: Cells).
#[derive(Default)]
pub struct CoreStats {
    pub requests: Cell<u64>,
    pub cross_core_hops: Cell<u64>,
    pub group_hops: Cell<u64>,
    /// Messages stored and served per second over the last second (the metrics tick).
    pub put_tps: Cell<f64>,
    pub get_tps: Cell<f64>,
    pub produced_messages: Cell<u64>,
    pub produced_bytes: Cell<u64>,
    pub consumed_messages: Cell<u64>,
    pub consumed_bytes: Cell<u64>,
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get().wrapping_add(by));
}

/// What a local pull returns: zero-copy slices of the shard's memory or of one disk read.
pub type LocalPull = PullOutcome<Vec<StoredSlice>>;

/// With a SQL92 filter, how many further ConsumeQueue windows (of the pull's
/// `max_messages`) one pull reads while none of their records match.
const SQL92_WINDOWS_MAX: u32 = 16;

/// A pull answer on the core that will write it to a socket.
pub enum PullBody {
    Local(Vec<StoredSlice>),
    Owned(Vec<Bytes>),
}

impl std::fmt::Debug for PullBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullBody::Local(v) => write!(f, "Local({} records)", v.len()),
            PullBody::Owned(v) => write!(f, "Owned({} records)", v.len()),
        }
    }
}

pub struct SendOutcome {
    pub appended: Appended,
    pub queue_id: u32,
    pub store_host: SocketAddrV4,
}

pub struct Core {
    pub id: u16,
    /// This core's shards' replication ends (master or slave).
    pub(crate) ha: crate::ha::CoreHa,
    pub shared: Arc<Shared>,
    pub shards: HashMap<u16, Shard>,
    pub mesh: Rc<Mesh>,
    pub topics: RefCell<TopicTable>,
    pub stats: CoreStats,
    /// RocketMQ's per-topic and per-group stats of this core (VIEW_BROKER_STATS_DATA).
    pub broker_stats: RefCell<crate::broker_stats::BrokerStats>,
    /// Every core's store host ([`Shared::store_host`]), by core: a send answered here
    /// names the owning core's.
    pub(crate) store_hosts: Vec<SocketAddrV4>,
    /// This core's send-latency histogram (observed per send request).
    pub(crate) send_latency: prometheus_client::metrics::histogram::Histogram,
    /// The same sends in RocketMQ's `rocketmq_rpc_latency_milliseconds` buckets.
    pub(crate) send_rpc_latency: prometheus_client::metrics::histogram::Histogram,
    /// This core as RocketMQ's metrics name it, and their consumer gauges' state.
    pub rocketmq: crate::rocketmq_metrics::RocketMqState,
    /// Group offsets and leases of each local shard's queues.
    pub offsets: HashMap<u16, RefCell<OffsetTable>>,
    /// Group membership: on core 0 only.
    pub(crate) membership: Option<Membership>,
    /// Sends this core has taken and not yet answered (shutdown waits for them).
    pub(crate) sends_in_flight: Cell<usize>,
    /// Where this core's sends spend their time, per stage.
    pub stages: SendStages,
    /// Held while topics.json or its journal is written (core 0), so that writes never
    /// overtake each other.
    pub(crate) topics_persist: glommio::sync::Semaphore,
    /// When the topic table is rewritten rather than appended to (core 0).
    pub(crate) topic_store: RefCell<crate::topics::TopicStore>,
    /// Each topic's queue ids per core as RocketMQ clients number them, worked out once.
    pub queue_numbers: crate::numbering::QueueNumbering,
    /// The SQL92 filter expressions of this core's pulls, parsed once.
    pub(crate) sql92: crate::filters::Sql92Cache,
    /// Subscription group configs: on core 0 only.
    pub(crate) sub_groups: Option<RefCell<crate::sub_groups::SubGroupTable>>,
    /// Held while subscription_groups.json is written (core 0).
    pub(crate) sub_groups_persist: glommio::sync::Semaphore,
    /// Each local shard's transaction check state and op index.
    pub(crate) transactions: crate::transaction::Transactions,
    /// Each local shard's POP windows.
    pub(crate) pop: crate::pop::PopState,
    /// Each local shard's lite topics, and this core's lite subscriptions.
    pub(crate) lite: crate::lite::LiteState,
    /// Priority messages stored and handed out by this core, per priority.
    pub priority: crate::priority::PriorityStats,
    /// The inboxes of this core's running timers (recalls of scheduled messages).
    pub(crate) timer_doors: crate::timer::TimerDoors,
    /// The clients connected to this core, reached through its front end (set once the
    /// front end is built; until then, and for a core without one, no client).
    pub(crate) link: RefCell<Weak<dyn ClientLink>>,
    /// The config this core runs with: `shared.config` with the changes made since the start
    /// to keys that apply while running (`crate::live_config`). Read with [`Core::config`].
    pub(crate) live: RefCell<Rc<crate::config::BrokerConfig>>,
    /// Held while a config change is stored and applied (core 0), one at a time.
    pub(crate) config_updates: glommio::sync::Semaphore,
    /// The sends' `UNIQ_KEY`s this core decides for (`crate::dedup`).
    pub(crate) dedup: RefCell<crate::dedup::Window>,
    /// This core's share of the quotas, checked by the front ends before any work.
    pub quotas: crate::quota::Quotas,
}

/// Counts a send in flight on its core for as long as it lives.
/// Counts a send (or an append) until it is answered.
struct SendInFlight<'a>(&'a Cell<usize>);

impl<'a> SendInFlight<'a> {
    fn enter(count: &'a Cell<usize>) -> Self {
        count.set(count.get() + 1);
        SendInFlight(count)
    }
}

impl Drop for SendInFlight<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Core {
    /// The clients connected to this core, through its front end.
    pub fn link(&self) -> Rc<dyn ClientLink> {
        self.link
            .borrow()
            .upgrade()
            .unwrap_or_else(|| Rc::new(NoClients))
    }

    /// Reaches clients through `link` from now on.
    pub fn set_link(&self, link: Weak<dyn ClientLink>) {
        *self.link.borrow_mut() = link;
    }

    /// The store host of the records of `shard`: its hosting core's.
    pub fn store_host_of(&self, shard: u16) -> SocketAddrV4 {
        self.core_store_host(shard_core(shard, self.shared.cores))
    }

    /// The store host this core stamps on the records it appends.
    pub fn store_host(&self) -> SocketAddrV4 {
        self.core_store_host(self.id)
    }

    fn core_store_host(&self, core: u16) -> SocketAddrV4 {
        self.store_hosts
            .get(usize::from(core))
            .copied()
            .unwrap_or_else(|| self.shared.store_host(core))
    }

    pub(crate) fn owner(&self, topic: &str, queue_id: u32) -> (u16, u16) {
        let shard = queue_owner_shard(topic, queue_id, self.shared.shard_count);
        (shard, shard_core(shard, self.shared.cores))
    }

    pub(crate) fn local_shard(&self, shard: u16) -> Result<&Shard, BrokerError> {
        self.shards.get(&shard).ok_or_else(|| {
            BrokerError::Storage(format!("shard {shard} is not hosted on core {}", self.id))
        })
    }

    fn hop(&self) {
        bump(&self.stats.cross_core_hops, 1);
    }

    /// The front door of every shard: `op` is served here when this core hosts `shard`, or
    /// forwarded to the core that does (counted as a hop), and either way by the op's own
    /// [`ShardCall::serve`]. A rule for every request to a shard belongs here.
    pub(crate) async fn at_shard<T: ShardCall>(
        &self,
        shard: u16,
        op: T,
    ) -> Result<Answer<T>, BrokerError> {
        let core = shard_core(shard, self.shared.cores);
        if core == self.id {
            debug_assert!(
                self.shards.contains_key(&shard),
                "shard {shard} asked of core {}, which does not host it",
                self.id
            );
            return Ok(op.serve(self, shard).await?.here());
        }
        self.hop();
        let request = ShardRequest::Shard {
            shard,
            op: op.into(),
        };
        let sent = opened(self.mesh.call(core, request).await?)?;
        Ok(<T::Found as Crossing>::arrived(sent))
    }

    /// What a core is asked, here or on `core`, served by the op's own [`CoreCall::serve`]
    /// either way.
    pub(crate) async fn at_core<T: CoreCall>(
        &self,
        core: u16,
        op: T,
    ) -> Result<T::Answer, BrokerError> {
        if core == self.id {
            return Box::pin(op.serve(self)).await;
        }
        opened(self.mesh.call(core, ShardRequest::Core(op.into())).await?)
    }

    /// Changes or lists the subscription group configs: core 0 keeps them and writes the
    /// table durably before answering a change.
    pub async fn sub_group(
        &self,
        op: crate::mesh::SubGroupOp,
    ) -> Result<Vec<crate::sub_groups::GroupConfig>, BrokerError> {
        use crate::mesh::SubGroupOp;
        let Some(table) = &self.sub_groups else {
            return self.at_core(0, op).await;
        };
        let snapshot = match op {
            SubGroupOp::List(None) => return Ok(table.borrow().all()),
            SubGroupOp::List(Some(g)) => {
                return Ok(table.borrow().get(&g).cloned().into_iter().collect())
            }
            SubGroupOp::Upsert(cfg) => {
                table.borrow_mut().upsert(cfg);
                table.borrow().clone()
            }
            SubGroupOp::Delete(g) => {
                // Deleting a group without a config is done already (as in RocketMQ; its
                // tools send the deletion to every core, and they share one table).
                if !table.borrow_mut().remove(&g) {
                    return Ok(table.borrow().all());
                }
                table.borrow().clone()
            }
        };
        self.persist_sub_groups(snapshot).await?;
        Ok(table.borrow().all())
    }

    /// Sets or tells how a group consumes a topic when the broker assigns its queues: core 0
    /// keeps the modes with the subscription group configs and writes them durably before
    /// answering a change.
    pub async fn request_mode(
        &self,
        op: crate::mesh::RequestModeOp,
    ) -> Result<Option<crate::sub_groups::RequestMode>, BrokerError> {
        use crate::mesh::RequestModeOp;
        let Some(table) = &self.sub_groups else {
            return self.at_core(0, op).await;
        };
        match op {
            RequestModeOp::Get { topic, group } => Ok(table.borrow().mode(&topic, &group).cloned()),
            RequestModeOp::Set(mode) => {
                table.borrow_mut().set_mode(mode.clone());
                let snapshot = table.borrow().clone();
                self.persist_sub_groups(snapshot).await?;
                Ok(Some(mode))
            }
        }
    }

    /// Writes the subscription group table: one write at a time, in order, on the blocking
    /// pool (an fsync on the core would hold its sends).
    async fn persist_sub_groups(
        &self,
        snapshot: crate::sub_groups::SubGroupTable,
    ) -> Result<(), BrokerError> {
        let _one_writer = self
            .sub_groups_persist
            .acquire_permit(1)
            .await
            .map_err(|e| BrokerError::Storage(e.to_string()))?;
        let dir = self.shared.config.data_dir.clone();
        glommio::executor()
            .spawn_blocking(move || snapshot.persist(&dir))
            .await
            .map_err(|e| BrokerError::Storage(e.to_string()))
    }

    /// On core 0, for good: tells every core which groups' members changed, as they change,
    /// so the RocketMQ clients among the members rebalance at once.
    pub async fn notify_group_changes(&self) {
        let Some(m) = &self.membership else {
            return;
        };
        loop {
            for (group, members) in m.take_changed().await {
                for core in 0..self.shared.cores {
                    let op = mesh::GroupChanged {
                        group: group.clone(),
                        members: members.clone(),
                    };
                    if let Err(e) = Box::pin(self.at_core(core, op)).await {
                        tracing::debug!(core, %group, "cannot tell a core of a group change: {e}");
                    }
                }
            }
        }
    }

    /// What a client says it is doing, asked on its own connection, on whichever core
    /// serves it.
    pub async fn client_running_info(
        &self,
        client_id: &str,
    ) -> Result<protocol::ClientRunningInfo, BrokerError> {
        for core in 0..self.shared.cores {
            let op = mesh::RunningInfo(client_id.to_owned());
            if let Some(info) = self.at_core(core, op).await? {
                return Ok(info);
            }
        }
        Err(BrokerError::NotFound(format!(
            "no connection of client {client_id} is open"
        )))
    }

    /// Commits or rolls back a half message, on the core of its shard.
    pub async fn end_transaction(&self, end: protocol::EndTransaction) -> Result<(), BrokerError> {
        if end.shard >= self.shared.shard_count {
            return Err(BrokerError::BadRequest(format!(
                "shard {} does not exist",
                end.shard
            )));
        }
        // Counted as a send: the graceful stop waits for it before closing the shards.
        if self.shared.stopping() {
            return Err(BrokerError::ShuttingDown);
        }
        self.check_master()?;
        let _in_flight = SendInFlight::enter(&self.sends_in_flight);
        self.at_shard(end.shard, end).await
    }

    /// Asks a producer of the check's group, connected to this core or else to another,
    /// about an undecided transaction; `None` when no core could ask one. A RocketMQ
    /// client answers later with END_TRANSACTION (`Some(Unknown)` here).
    pub async fn check_transaction(
        &self,
        check: protocol::CheckTransaction,
    ) -> Option<protocol::TransactionState> {
        let cores = self.shared.cores;
        for i in 0..cores {
            let core = (self.id + i) % cores;
            match Box::pin(self.at_core(core, check.clone())).await {
                Ok(Some(answer)) => {
                    return Some(answer.unwrap_or(protocol::TransactionState::Unknown))
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(core, "cannot ask a core to check a transaction: {e}"),
            }
        }
        None
    }

    /// Counts a message of `topic` that `group` sent back to be consumed again.
    pub fn count_send_back(&self, topic: &str, group: &str) {
        self.broker_stats.borrow_mut().sent_back(topic, group);
    }

    /// Counts a message of `topic` that `group` sent to its dead-letter topic.
    pub fn count_dead_letter(&self, topic: &str, group: &str) {
        self.broker_stats.borrow_mut().dead_lettered(topic, group);
    }

    /// Takes the broker stats' samples due now and publishes their per-topic and per-group
    /// growth to the metrics (called every second).
    pub fn sample_broker_stats(&self) {
        use crate::broker_stats::Published;
        let mut stats = self.broker_stats.borrow_mut();
        stats.tick(self.shared.clock.now());
        let m = &self.shared.metrics;
        let core = self.id;
        stats.publish(|p| {
            match p {
                Published::Topic(t, g, _) => m.add_topic_put(core, t, g.messages, g.bytes),
                Published::Group(t, group, g) => {
                    m.add_group_get(core, t, group, g.messages, g.bytes)
                }
                Published::TopicGone(t) => m.forget_topic(core, t),
                Published::GroupGone(t, group) => m.forget_group(core, t, group),
                Published::DeadLetters(..) => {}
            }
            self.publish_rocketmq_stats(&p);
        });
    }

    pub fn count_request(&self) {
        bump(&self.stats.requests, 1);
    }

    /// The topic's config, creating it when auto-creation allows.
    pub async fn topic_for_send(&self, topic: &str) -> Result<TopicConfig, BrokerError> {
        if let Some(cfg) = self.topics.borrow().get(topic) {
            return Ok(cfg.clone());
        }
        if !self.shared.config.auto_create_topic_enable || topic == AUTO_CREATE_TOPIC_KEY {
            return Err(BrokerError::TopicNotExist(topic.to_owned()));
        }
        topics::validate_topic_name(topic)
            .map_err(|_| BrokerError::TopicNotExist(topic.to_owned()))?;
        let cfg = topics::topic_config(topic, self.shared.config.default_topic_queue_nums);
        tracing::info!(
            topic,
            queues = cfg.write_queues,
            "auto-creating topic on first send"
        );
        self.create_topic(cfg.clone()).await?;
        Ok(cfg)
    }

    /// [`Core::topic_for_send`]'s queue counts and permission, without a copy of the config
    /// when the topic exists (every send asks).
    pub async fn send_queues(&self, topic: &str) -> Result<TopicQueues, BrokerError> {
        if let Some(cfg) = self.topics.borrow().get(topic) {
            return Ok(TopicQueues::of(cfg));
        }
        self.topic_for_send(topic)
            .await
            .map(|cfg| TopicQueues::of(&cfg))
    }

    pub fn topic_for_read(&self, topic: &str) -> Result<TopicConfig, BrokerError> {
        self.topics
            .borrow()
            .get(topic)
            .cloned()
            .ok_or_else(|| BrokerError::TopicNotExist(topic.to_owned()))
    }

    // ------------------------------------------------------------------ handlers

    /// Stores a batch of encoded records in one queue: a client's send, refused while the
    /// broker's `broker_permission` has no write. On a deduplicated topic a record whose
    /// `UNIQ_KEY` was stored within the window is not stored again (`crate::dedup`).
    pub async fn send(
        &self,
        topic: &str,
        queue_id: u32,
        records: Bytes,
        count: u32,
    ) -> Result<SendOutcome, BrokerError> {
        self.check_broker_permission(protocol::perm::WRITE)?;
        if self.dedup_on(topic) {
            if let Some(keyed) = crate::dedup::keys_of(topic, &records, count) {
                return self.send_once(topic, queue_id, records, keyed).await;
            }
        }
        self.store(topic, queue_id, records, count).await
    }

    /// [`Core::send`] of what the broker sends itself (a scheduled message's delivered
    /// copies, which keep their original's `UNIQ_KEY`): never deduplicated.
    pub(crate) async fn send_as_broker(
        &self,
        topic: &str,
        queue_id: u32,
        records: Bytes,
        count: u32,
    ) -> Result<SendOutcome, BrokerError> {
        self.check_broker_permission(protocol::perm::WRITE)?;
        self.store(topic, queue_id, records, count).await
    }

    /// [`Core::send`] for what the broker stores on a consumer's behalf (a popped message
    /// sent to its dead letters on ack): a read-only broker still takes it, as consumers
    /// are served there.
    pub(crate) async fn store(
        &self,
        topic: &str,
        queue_id: u32,
        records: Bytes,
        count: u32,
    ) -> Result<SendOutcome, BrokerError> {
        // A large batch's copies are freed once it is stored: counted, so that the heap is
        // trimmed once such sends pause (`heap::give_back_heap`).
        crate::heap::note_send_bytes(records.len());
        // The gate of the graceful stop. The check and the count happen in one step on this
        // core, so once `shutdown` is set no send can start unseen: shutdown waits for the
        // counted ones to be answered, then flushes. A send refused here was never stored
        // and the producer tries another queue or broker.
        if self.shared.stopping() {
            return Err(BrokerError::ShuttingDown);
        }
        self.check_master()?;
        let _in_flight = SendInFlight::enter(&self.sends_in_flight);
        let started = Instant::now();
        let cfg = self.send_queues(topic).await?;
        // As RocketMQ's broker: a topic without the write permission takes no sends.
        if cfg.perm & protocol::perm::WRITE == 0 {
            return Err(BrokerError::NoPermission(format!(
                "the topic[{topic}] sending message is forbidden"
            )));
        }
        if queue_id >= cfg.write_queues {
            return Err(BrokerError::QueueNotExist {
                topic: topic.to_owned(),
                queue_id,
                queues: cfg.write_queues,
            });
        }
        // The owning shard validates every record (structure, size, topic) and the header's
        // count in its one pass over the batch, before anything is stored.
        let bytes = records.len() as u64;
        let (shard, core) = self.owner(topic, queue_id);
        let forwarded_at = (core != self.id).then(Instant::now);
        // A prepared transactional message is stored as a half message of the real queue's
        // shard, invisible to consumers until it is committed (`transaction`).
        let op = if crate::transaction::is_prepared(&records, count) {
            mesh::Append {
                topic: crate::transaction::HALF_TOPIC.to_owned(),
                queue_id: u32::from(shard),
                records: crate::transaction::half_record(&records, topic, queue_id)?,
                count,
            }
        } else {
            mesh::Append {
                topic: topic.to_owned(),
                queue_id,
                records,
                count,
            }
        };
        let appended = self.at_shard(shard, op).await?;
        if let Some(at) = forwarded_at {
            self.stages.record(Stage::Forward, at.elapsed());
        }
        bump(&self.stats.produced_messages, appended.count as u64);
        bump(&self.stats.produced_bytes, bytes);
        let took = started.elapsed();
        {
            let mut stats = self.broker_stats.borrow_mut();
            stats.put(topic, u64::from(appended.count), bytes);
            stats.put_latency.record(took);
        }
        self.send_latency.observe(took.as_secs_f64());
        self.send_rpc_latency.observe(took.as_secs_f64() * 1000.0);
        Ok(SendOutcome {
            appended,
            queue_id,
            store_host: self.store_host_of(appended.shard),
        })
    }

    /// Refuses a request the broker's `broker_permission` does not allow (RocketMQ's
    /// answer: NO_PERMISSION, "the broker[...] sending message is forbidden"). `bit` is
    /// `perm::WRITE` for a send, `perm::READ` for a pull or a pop.
    pub fn check_broker_permission(&self, bit: u32) -> Result<(), BrokerError> {
        if self.config().broker_permission & bit != 0 {
            return Ok(());
        }
        let what = if bit == protocol::perm::WRITE {
            "sending"
        } else {
            "pulling"
        };
        Err(BrokerError::NoPermission(format!(
            "the broker[{}] {what} message is forbidden (brokerPermission {})",
            self.shared.advertise_addr,
            self.config().broker_permission
        )))
    }

    /// The epoch in which this core serves `shard` as master, if it does: state a core
    /// rebuilds from the shard's log (POP windows, the transaction op index) is kept only by
    /// a master and tagged with it, so a new epoch rebuilds it.
    pub(crate) fn master_epoch(&self, shard: u16) -> Option<u32> {
        self.ha.master(shard).map(|m| m.epochs.borrow().current())
    }

    /// Whether this core takes sends now: a master's, and in controller mode within the
    /// lease the controllers gave.
    pub(crate) fn check_master(&self) -> Result<(), BrokerError> {
        self.ha.serving().map_err(|why| self.not_master(why))?;
        if let Some(ctl) = &self.ha.controller {
            ctl.lease_holds(&self.shared)
                .map_err(|why| self.not_master(why))?;
        }
        Ok(())
    }

    /// [`Core::check_master`], for the front ends' requests that change what a master
    /// replicates to its slaves (ACL 2.0's users and ACLs).
    pub fn check_takes_changes(&self) -> Result<(), BrokerError> {
        self.check_master()
    }

    fn not_master(&self, why: impl std::fmt::Display) -> BrokerError {
        BrokerError::NotMaster(format!(
            "{} id {} takes no sends: {why}",
            self.shared.config.broker_name, self.shared.config.broker_id
        ))
    }

    pub(crate) async fn append_local(
        &self,
        shard: u16,
        topic: &str,
        queue_id: u32,
        records: &[u8],
        count: u32,
    ) -> Result<Appended, BrokerError> {
        // The owning core decides: its shard is a master's, under the lease in controller
        // mode, or the send is refused before anything is written.
        self.check_master()?;
        let Some(m) = self.ha.master(shard) else {
            return Err(self.not_master(format!("shard {shard} is not served as master here")));
        };
        let _appending = SendInFlight::enter(&self.ha.appending);
        // SYNC_MASTER refuses before writing when too few replicas are in sync.
        m.admit()?;
        let r = self
            .local_shard(shard)?
            .append_counted(topic, queue_id, records, count)
            .await?;
        let sync_flush = self.shared.config.flush_disk_type == FlushDiskType::Sync;
        self.stages.record_append(&r.timing, sync_flush);
        let appended = Appended {
            shard,
            first_queue_offset: r.first_queue_offset,
            first_commit_log_offset: r.first_commit_log_offset,
            count: r.count,
            store_timestamp_ms: r.store_timestamp_ms,
        };
        // Timed only where a send waits for its replicas (SYNC_MASTER): elsewhere the stage
        // would cost two reads of the clock a send and show nothing.
        let waited = m.waits_for_replicas().then(Instant::now);
        match m
            .wait_replicated(r.first_commit_log_offset.0 + records.len() as u64)
            .await
        {
            Ok(()) => {}
            // Stored here: the answer says where, as RocketMQ's does.
            Err(BrokerError::FlushSlaveTimeout { reason, .. }) => {
                return Err(BrokerError::FlushSlaveTimeout {
                    reason,
                    stored: Some(Box::new(appended)),
                })
            }
            Err(e) => return Err(e),
        }
        if let Some(waited) = waited {
            self.stages.record(Stage::Replicate, waited.elapsed());
        }
        Ok(appended)
    }

    /// Reads a queue, waiting up to `suspend_timeout_ms` (long polling) when nothing is new.
    pub async fn pull(
        &self,
        args: protocol::PullRequest,
    ) -> Result<PullOutcome<PullBody>, BrokerError> {
        self.pull_filtered(args, None).await
    }

    /// Refuses a SQL92 filter when `enable_property_filter` is off or when it does not
    /// parse (RocketMQ's answers), before anything is read.
    pub fn check_sql92(&self, expression: &str) -> Result<(), BrokerError> {
        if !self.config().enable_property_filter {
            return Err(BrokerError::FilterDisabled);
        }
        self.sql92.get(expression)?;
        Ok(())
    }

    /// [`Core::pull`], serving only the records whose properties match `sql92` when there
    /// is one; the next offset still passes the records left out.
    pub async fn pull_filtered(
        &self,
        args: protocol::PullRequest,
        sql92: Option<String>,
    ) -> Result<PullOutcome<PullBody>, BrokerError> {
        if let Some(e) = &sql92 {
            self.check_sql92(e)?;
        }
        self.check_broker_permission(protocol::perm::READ)?;
        let cfg = self.topic_for_read(&args.topic)?;
        // As RocketMQ's broker: a topic without the read permission serves no pulls.
        if cfg.perm & protocol::perm::READ == 0 {
            return Err(BrokerError::NoPermission(format!(
                "the topic[{}] pulling message is forbidden",
                args.topic
            )));
        }
        if args.queue_id >= cfg.read_queues.max(cfg.write_queues) {
            return Err(BrokerError::QueueNotExist {
                topic: args.topic.clone(),
                queue_id: args.queue_id,
                queues: cfg.read_queues,
            });
        }
        let (shard, _) = self.owner(&args.topic, args.queue_id);
        self.at_shard(shard, mesh::Pull { args, sql92 }).await
    }

    pub(crate) async fn pull_local(
        &self,
        shard_id: u16,
        args: &protocol::PullRequest,
        sql92: Option<&str>,
    ) -> Result<LocalPull, BrokerError> {
        let shard = self.local_shard(shard_id)?;
        let filter = TagFilter::parse(&args.tag_expression);
        let sql92 = match sql92 {
            Some(e) => Some(self.sql92.get(e)?),
            None => None,
        };
        // The keys that may change while running, as they are when the pull starts.
        let cfg = self.config();
        let wait_ms = args.suspend_timeout_ms.min(cfg.long_polling_max_ms);
        let clock = &self.shared.clock;
        let deadline = clock.now() + Duration::from_millis(wait_ms);
        // The client's batch, within the broker's bounds (both fit a u32 by their ranges).
        let messages_max = u32::try_from(cfg.pull_batch_messages_max).unwrap_or(1024);
        let bytes_max = u32::try_from(cfg.pull_batch_bytes_max).unwrap_or(u32::MAX);
        // Where this pull reads from: past `args.queue_offset` only when a SQL92 filter
        // matched nothing in the windows before.
        let mut from = args.queue_offset;
        let mut windows = 0;
        loop {
            let req = ReadRequest {
                topic: &args.topic,
                queue_id: args.queue_id,
                queue_offset: shard::QueueOffset(from),
                max_messages: args.max_messages.clamp(1, messages_max),
                max_bytes: args.max_bytes.clamp(1, bytes_max),
                filter: &filter,
            };
            let mut r = shard.read(&req).await?;
            if let Some(f) = &sql92 {
                // RocketMQ evaluates SQL92 on the stored message the same way, after the
                // ConsumeQueue: the records left out are passed by `next_queue_offset`.
                r.records
                    .retain(|s| crate::filters::selects(f, s.as_bytes()));
                if r.records.is_empty() && r.status == ReadStatus::Found {
                    r.status = ReadStatus::NoMatchedMessage;
                }
                // Nothing matched in this window and more is there: read on within this
                // pull (bounded), as RocketMQ's broker does, rather than answer a window of
                // nothing and have the consumer ask again at once.
                if r.status == ReadStatus::NoMatchedMessage
                    && r.records.is_empty()
                    && r.next_queue_offset.0 > from
                    && r.next_queue_offset.0 < shard.visible_max(&args.topic, args.queue_id).0
                    && windows < SQL92_WINDOWS_MAX
                {
                    windows += 1;
                    from = r.next_queue_offset.0;
                    continue;
                }
                // The answer never sends the consumer back before what was scanned.
                if r.next_queue_offset.0 < from {
                    r.next_queue_offset = shard::QueueOffset(from);
                }
            }
            let status = match r.status {
                ReadStatus::Found => PullStatus::Found,
                ReadStatus::OffsetMoved | ReadStatus::OffsetOverflow => PullStatus::OffsetMoved,
                ReadStatus::NoNewMessage | ReadStatus::NoMatchedMessage => PullStatus::NoNewMessage,
            };
            // Long polling: nothing at or after the offset yet (filtered-out entries advance
            // next_offset and are answered at once so the consumer moves on).
            let now = clock.now();
            if status == PullStatus::NoNewMessage
                && r.next_queue_offset <= args.queue_offset
                && now < deadline
                && !self.shared.shutdown.load(Ordering::Relaxed)
            {
                // What readers may be served, not the queue's end: with sync flush the
                // entries of appends not yet durable are not served, and their sync must
                // wake this poll.
                let visible = shard.visible_max(&args.topic, args.queue_id);
                if shard
                    .wait_for_message(&args.topic, args.queue_id, visible, deadline - now)
                    .await
                {
                    continue;
                }
            }
            // The shard hands out one slice per record.
            let count = r.records.len() as u32;
            let bytes: u64 = r.records.iter().map(|s| s.len() as u64).sum();
            bump(&self.stats.consumed_messages, count as u64);
            bump(&self.stats.consumed_bytes, bytes);
            self.broker_stats.borrow_mut().got(
                &args.topic,
                &args.consumer_group,
                u64::from(count),
                bytes,
            );
            let suggest_broker_id = self.suggest_reader(shard_id, shard, &r.records);
            return Ok(PullOutcome {
                status,
                next_offset: r.next_queue_offset,
                min_offset: r.min_offset,
                max_offset: r.max_offset,
                count,
                suggest_broker_id,
                body: r.records,
            });
        }
    }

    /// Which broker of the group a consumer should read from next (`slave_read_enable`,
    /// RocketMQ's suggestWhichBrokerId): a consumer reading further back than the shard keeps
    /// in memory (`hot_bytes_max`) goes to an in-sync slave, so its disk reads do not slow
    /// the master's producers, and comes back to the master (0) once it is within it.
    fn suggest_reader(&self, shard_id: u16, shard: &Shard, records: &[StoredSlice]) -> u64 {
        if !self.shared.config.slave_read_enable {
            return 0;
        }
        let Some(last) = records.last() else {
            return 0;
        };
        let Ok(v) = message::RecordView::parse(last.as_bytes()) else {
            return 0;
        };
        let read_to = v.physical_offset() + v.len() as u64;
        let (_, end) = shard.log_bounds();
        let behind = end.saturating_sub(read_to) > self.shared.config.hot_bytes_max;
        match self.ha.master(shard_id) {
            Some(m) if behind => m.in_sync_ids().first().copied().unwrap_or(0),
            Some(_) => 0,
            // A slave: keep the consumer while it is behind, else back to the master.
            None if behind => self.shared.config.broker_id,
            None => 0,
        }
    }

    /// Wakes the registration thread and waits (bounded) until it has registered topic
    /// table `version` with the NameServers, so that a route lookup right after a topic
    /// change sees it.
    async fn registered(&self, version: u64) {
        self.shared.wake_registry();
        if self.shared.config.namesrv_list().is_empty() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.shared.registered_version.load(Ordering::SeqCst) < version
            && Instant::now() < deadline
        {
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Writes a change of the topic table (one writer at a time), off the executor.
    async fn persist_topics(
        &self,
        change: impl FnOnce(&mut crate::topics::TopicStore, &TopicTable) -> crate::topics::TopicWrite,
    ) -> Result<(), BrokerError> {
        let _one_writer = self
            .topics_persist
            .acquire_permit(1)
            .await
            .map_err(|e| BrokerError::Storage(e.to_string()))?;
        let write = change(&mut self.topic_store.borrow_mut(), &self.topics.borrow());
        let dir = self.shared.config.data_dir.clone();
        glommio::executor()
            .spawn_blocking(move || write.apply(&dir))
            .await
            .map_err(|e| BrokerError::Storage(e.to_string()))
    }

    /// Has every core but core 0 (this one) apply `op`, one after the other.
    async fn on_other_cores<T: CoreCall<Answer = ()>>(
        &self,
        op: impl Fn() -> T,
    ) -> Result<(), BrokerError> {
        for core in 1..self.shared.cores {
            self.at_core(core, op()).await?;
        }
        Ok(())
    }

    /// This core's shards' replication, master or slave ends (what `mqadmin haStatus`
    /// shows).
    pub fn ha_status(&self) -> Vec<broker_replication::ShardHaStatus> {
        self.ha.status()
    }

    /// A retention pass on every shard of the broker now, out of its schedule: the segments
    /// deleted (expired ones, and more while the disk is over its clean ratio).
    pub async fn run_retention_now(&self) -> Result<usize, BrokerError> {
        let mut deleted = 0;
        for shard in 0..self.shared.shard_count {
            deleted += self.at_shard(shard, mesh::RunRetention).await?;
        }
        Ok(deleted)
    }

    pub async fn queue_offsets(
        &self,
        topic: &str,
        queue_id: u32,
    ) -> Result<(u64, u64), BrokerError> {
        self.topic_for_read(topic)?;
        let (shard, _) = self.owner(topic, queue_id);
        let op = mesh::QueueOffsets {
            topic: topic.to_owned(),
            queue_id,
        };
        let (min, max) = self.at_shard(shard, op).await?;
        Ok((min.into(), max.into()))
    }

    pub async fn search_offset(
        &self,
        topic: &str,
        queue_id: u32,
        timestamp_ms: i64,
    ) -> Result<u64, BrokerError> {
        self.topic_for_read(topic)?;
        let (shard, _) = self.owner(topic, queue_id);
        let op = mesh::SearchOffset {
            topic: topic.to_owned(),
            queue_id,
            timestamp_ms,
        };
        Ok(self.at_shard(shard, op).await?.into())
    }

    /// The store time (ms since the epoch) of the queue's record at `queue_offset`; `None`
    /// when it is gone, damaged or was never written.
    pub async fn store_time(
        &self,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
    ) -> Result<Option<i64>, BrokerError> {
        self.topic_for_read(topic)?;
        let (shard, _) = self.owner(topic, queue_id);
        let op = mesh::StoreTime {
            topic: topic.to_owned(),
            queue_id,
            queue_offset,
        };
        self.at_shard(shard, op).await
    }

    pub async fn view_by_offset(
        &self,
        shard: u16,
        commit_log_offset: u64,
    ) -> Result<Vec<Bytes>, BrokerError> {
        if shard >= self.shared.shard_count {
            return Err(BrokerError::NotFound(format!(
                "shard {shard} does not exist"
            )));
        }
        self.at_shard(shard, mesh::ViewByOffset { commit_log_offset })
            .await
    }

    pub(crate) async fn view_local(
        &self,
        shard: u16,
        commit_log_offset: u64,
    ) -> Result<Vec<Bytes>, BrokerError> {
        match self
            .local_shard(shard)?
            .read_at(shard::CommitLogOffset(commit_log_offset))
            .await?
        {
            Some(s) => Ok(vec![s.to_bytes()]),
            None => Err(BrokerError::NotFound(format!(
                "no message at offset {commit_log_offset} of shard {shard}"
            ))),
        }
    }

    /// Asks every core (every shard) for messages by key.
    pub async fn query_by_key(
        &self,
        mut q: protocol::QueryByKey,
    ) -> Result<Vec<Bytes>, BrokerError> {
        q.max = self.query_messages_max(q.max);
        let mut out = self.query_local(&q).await?;
        let max = q.max as usize;
        for core in 0..self.shared.cores {
            if core == self.id {
                continue;
            }
            out.extend(self.at_core(core, q.clone()).await?);
        }
        out.truncate(max);
        Ok(out)
    }

    /// The most messages a query answers when its client asks for `asked`: at least one,
    /// at most `query_messages_max`.
    pub(crate) fn query_messages_max(&self, asked: u32) -> u32 {
        let max = u32::try_from(self.config().query_messages_max).unwrap_or(u32::MAX);
        asked.clamp(1, max)
    }

    pub async fn query_local(&self, q: &protocol::QueryByKey) -> Result<Vec<Bytes>, BrokerError> {
        let q = &protocol::QueryByKey {
            max: self.query_messages_max(q.max),
            ..q.clone()
        };
        let mut out = Vec::new();
        for shard in self.shards.values() {
            for s in shard
                .query_by_key(&q.topic, &q.key, q.begin_ms, q.end_ms, q.max as usize)
                .await?
            {
                out.push(s.to_bytes());
            }
        }
        Ok(out)
    }

    /// Every core's counters.
    pub async fn status(&self) -> Result<Vec<CoreStatus>, BrokerError> {
        let mut out = Vec::with_capacity(self.shared.cores as usize);
        for core in 0..self.shared.cores {
            out.push(self.at_core(core, mesh::Status).await?);
        }
        Ok(out)
    }

    /// Every core's send-stage histograms; with `reset`, each core clears its own after.
    pub async fn send_stages(&self, reset: bool) -> Result<Vec<StageHistogram>, BrokerError> {
        let mut out = Vec::new();
        for core in 0..self.shared.cores {
            out.extend(self.at_core(core, mesh::SendStages { reset }).await?);
        }
        Ok(out)
    }

    /// Sets the backlog metric of every group offset this core keeps: from the committed
    /// offset (or the oldest stored, after retention) to the queue's end, never negative; the
    /// in-flight metric of every POP window it holds; its lite topics' (at most every
    /// 10 s); and its priority message counts.
    pub fn publish_backlogs(&self) {
        for (shard_id, table) in &self.offsets {
            let Some(shard) = self.shards.get(shard_id) else {
                continue;
            };
            for (gq, stored) in table.borrow().entries() {
                if gq.group == crate::lite::FLOOR_GROUP {
                    continue;
                }
                let q = shard.queue_offsets(&gq.topic, gq.queue_id);
                let backlog = q.max.0.saturating_sub(stored.offset.max(q.min.0));
                self.shared
                    .metrics
                    .set_backlog(&gq.group, &gq.topic, gq.queue_id, backlog);
            }
        }
        for (group, topic, queue_id, inflight) in self.pop_windows() {
            self.shared
                .metrics
                .set_pop_inflight(&group, &topic, queue_id, inflight);
        }
        self.publish_lite();
        for (priority, sent, delivered) in self.priority.take() {
            self.shared
                .metrics
                .add_priority(self.id, priority, sent, delivered);
        }
    }

    /// Publishes this core's shards' replication to the metrics; `seen` holds the
    /// (shard, slave) pairs published last time, so a slave that left loses its gauges.
    pub fn publish_replication(&self, seen: &mut Vec<(u16, u64)>) {
        let status = self.ha.status();
        let now: Vec<(u16, u64)> = status
            .iter()
            .flat_map(|s| s.slaves.iter().map(move |l| (s.shard, l.broker_id)))
            .collect();
        let gone: Vec<(u16, u64)> = seen.iter().filter(|p| !now.contains(p)).copied().collect();
        let gauges: Vec<_> = status.iter().map(|s| s.gauges()).collect();
        self.shared.metrics.set_replication(&gauges, &gone);
        *seen = now;
    }

    pub fn local_status(&self) -> CoreStatus {
        let mut s = CoreStatus {
            core: self.id,
            shards: {
                let mut v: Vec<u16> = self.shards.keys().copied().collect();
                v.sort_unstable();
                v
            },
            requests: self.stats.requests.get(),
            cross_core_hops: self.stats.cross_core_hops.get(),
            group_hops: self.stats.group_hops.get(),
            inbox_depth: self.mesh.inbox_depth(),
            produced_messages: self.stats.produced_messages.get(),
            produced_bytes: self.stats.produced_bytes.get(),
            consumed_messages: self.stats.consumed_messages.get(),
            consumed_bytes: self.stats.consumed_bytes.get(),
            role: self.ha.role_name(&self.shared.config).to_owned(),
            replication: serde_json::to_string(&self.ha.status()).unwrap_or_default(),
            ..Default::default()
        };
        for shard in self.shards.values() {
            let st = shard.stats();
            s.commit_log_bytes += st.commit_log_bytes;
            s.durable_lag_bytes += st.write_offset.0.saturating_sub(st.durable_offset.0);
            s.disk_use_ratio = s.disk_use_ratio.max(st.disk_use_ratio);
            s.quarantined_ranges += st.quarantined_ranges;
            s.quarantined_bytes += st.quarantined_bytes;
            s.skipped_records += st.skipped_records;
            s.busy_refusals += st.busy_refusals;
            s.tail_ring_records += st.tail_ring_records;
            s.writes_blocked_shards += u64::from(st.writes_blocked);
            s.cq_files_mapped += st.cq_files_mapped;
            s.cq_files_unmapped += st.cq_files_unmapped;
        }
        self.link().fill_status(&mut s);
        s
    }

    /// Deletes a topic: core 0 removes it from the table and its file, tells every core, and
    /// has the broker registered again in full (without it) before answering. Its records
    /// stay in the CommitLog until retention deletes their segments; its ConsumeQueues stay
    /// too, and a topic created again under the name continues their offsets.
    pub async fn delete_topic(&self, name: String) -> Result<(), BrokerError> {
        if self.id != 0 {
            return self.at_core(0, mesh::DeleteTopic(name)).await;
        }
        if name == topics::AUTO_CREATE_TOPIC_KEY {
            return Err(BrokerError::BadRequest(format!(
                "{name} is the auto-creation topic and cannot be deleted"
            )));
        }
        // Deleting a topic the broker does not have is done already (RocketMQ's tools send
        // the deletion to every core, and all of them share one table).
        if !self.topics.borrow_mut().remove(&name) {
            return Ok(());
        }
        self.persist_topics(|store, table| store.rewrite(table))
            .await?;
        self.on_other_cores(|| mesh::TopicDeleted(name.clone()))
            .await?;
        let version = {
            if let Ok(mut t) = self.shared.topics.lock() {
                t.remove(&name);
            }
            // With no change pending, the registration thread registers the whole table
            // (which holds every pending change too), and that replaces the broker's
            // topics on the NameServers: the deleted one leaves their routes.
            if let Ok(mut t) = self.shared.topics_changed.lock() {
                t.clear();
            }
            self.shared.topics_version.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.registered(version).await;
        tracing::info!(topic = %name, "topic deleted");
        Ok(())
    }

    /// Creates or updates a topic: core 0 persists it, tells every core, and has the broker
    /// registered again with the NameServers before answering. An existing topic keeps its
    /// attributes.
    pub async fn create_topic(&self, cfg: TopicConfig) -> Result<(), BrokerError> {
        self.create_topic_with(cfg, None).await
    }

    /// [`Core::create_topic`], the topic's attributes replaced by `attributes` when given.
    pub async fn create_topic_with(
        &self,
        cfg: TopicConfig,
        attributes: Option<topics::Attributes>,
    ) -> Result<(), BrokerError> {
        topics::validate_topic(&cfg).map_err(|e| BrokerError::BadRequest(e.to_string()))?;
        if self.id != 0 {
            return self.at_core(0, mesh::CreateTopic(cfg, attributes)).await;
        }
        // A bound on all queues together: each one with data has its ConsumeQueue files
        // and mappings (vm.max_map_count is 65,530 by default).
        let queues = self.topics.borrow().queues_with(&cfg);
        let queues_max = self.shared.config.queues_max;
        if queues > queues_max {
            return Err(BrokerError::BadRequest(format!(
                "topic {} would bring the broker to {queues} queues, over queues_max ({queues_max})",
                cfg.name
            )));
        }
        let attributes = {
            let mut table = self.topics.borrow_mut();
            if let Some(a) = attributes {
                table.set_attributes(&cfg.name, a);
            }
            table.upsert(cfg.clone());
            table.attributes(&cfg.name)
        };
        // Written and fdatasynced on the blocking thread (a sync held every send of core 0
        // when it ran on the core), one write at a time so none overtakes another: one row
        // appended to the journal, or now and then the whole table (`TopicStore`).
        self.persist_topics(|store, table| store.write_for(table, &cfg))
            .await?;
        self.on_other_cores(|| mesh::TopicChanged(cfg.clone(), attributes.clone()))
            .await?;
        let version = {
            if let Ok(mut t) = self.shared.topics.lock() {
                t.insert(cfg.name.clone(), cfg.clone());
            }
            if let Ok(mut t) = self.shared.topics_changed.lock() {
                t.push(cfg.clone());
            }
            self.shared.topics_version.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.registered(version).await;
        tracing::info!(
            topic = cfg.name,
            queues = cfg.write_queues,
            "topic created or updated"
        );
        Ok(())
    }

    // ------------------------------------------------------------------ consumer groups

    /// A membership request: served here on core 0, forwarded otherwise.
    pub async fn group(&self, op: GroupOp) -> Result<MemberView, BrokerError> {
        let Some(m) = &self.membership else {
            bump(&self.stats.group_hops, 1);
            return self.at_core(0, op).await;
        };
        Ok(match op {
            GroupOp::Heartbeat { group, client_id } => m.heartbeat(&group, &client_id),
            GroupOp::Unregister { group, client_id } => m.unregister(&group, &client_id),
            GroupOp::WaitChange {
                group,
                known_version,
                timeout_ms,
            } => {
                let wait = timeout_ms.min(self.config().long_polling_max_ms);
                m.wait_change(&group, known_version, Duration::from_millis(wait))
                    .await
            }
        })
    }

    /// Ends every lease `client_id` holds for `group`, on every core: the client left the
    /// group (or its connection closed), and its queues must not stay locked until the
    /// leases run out.
    pub async fn release_leases(&self, group: &str, client_id: &str) -> Result<(), BrokerError> {
        for core in 0..self.shared.cores {
            let op = mesh::ReleaseLeases {
                group: group.to_owned(),
                client_id: client_id.to_owned(),
            };
            Box::pin(self.at_core(core, op)).await?;
        }
        Ok(())
    }

    /// Whether a connection of `client_id` is open on any core.
    pub async fn client_connected(&self, client_id: &str) -> Result<bool, BrokerError> {
        for core in 0..self.shared.cores {
            let op = mesh::ClientConnected(client_id.to_owned());
            if Box::pin(self.at_core(core, op)).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// An offset or lease request for the queue's owner core.
    pub async fn group_offset(&self, op: OffsetOp) -> Result<Option<StoredOffset>, BrokerError> {
        let q = op.queue();
        if q.group.is_empty() || q.group.len() > 255 {
            return Err(BrokerError::BadRequest(
                "consumer group must be 1..=255 bytes".into(),
            ));
        }
        let (shard, _) = self.owner(&q.topic, q.queue_id);
        self.at_shard(shard, op).await
    }

    pub(crate) fn group_offset_local(
        &self,
        shard: u16,
        op: OffsetOp,
    ) -> Result<Option<StoredOffset>, BrokerError> {
        let table = self.offsets.get(&shard).ok_or_else(|| {
            BrokerError::Storage(format!("shard {shard} is not hosted on core {}", self.id))
        })?;
        let mut t = table.borrow_mut();
        Ok(match op {
            OffsetOp::Query(q) => t.query(&q).map(|mut s| {
                // Consumer progress shows the records the queue's readers stepped over.
                if let Some(sh) = self.shards.get(&shard) {
                    s.skipped_records = sh.skipped_in_queue(&q.topic, q.queue_id);
                }
                s
            }),
            OffsetOp::Commit(c) => {
                // A client's commit past the queue's end is taken as the end: a member
                // cannot set its group's progress beyond every message (a reset can).
                let end = self.shards.get(&shard).map_or(c.offset, |sh| {
                    sh.queue_offsets(&c.queue.topic, c.queue.queue_id).max.0
                });
                t.commit(
                    &c.queue,
                    c.offset.min(end),
                    c.epoch,
                    &c.client_id,
                    c.release,
                )
            }
            OffsetOp::Reset { queue, offset } => Some(t.reset(&queue, offset)),
            OffsetOp::Lock {
                queue,
                client_id,
                lease_ms,
            } => {
                let lease_ms = lease_ms.min(self.shared.config.queue_lock_lease_max_ms);
                t.lock(&queue, &client_id, lease_ms)
                    .map_err(BrokerError::QueueLocked)?;
                t.query(&queue)
            }
            OffsetOp::Unlock { queue, client_id } => {
                t.unlock(&queue, &client_id);
                t.query(&queue)
            }
        })
    }

    /// Writes every changed offsets table of this core (off the core, on glommio's blocking
    /// pool); a failed write is retried at the next pass.
    pub async fn flush_offsets(&self) {
        for shard in self.offsets.keys() {
            self.lite_settle(*shard, false);
        }
        for (shard, table) in &self.offsets {
            let Some((path, bytes)) = table.borrow_mut().take_snapshot() else {
                continue;
            };
            let p = path.clone();
            let r = glommio::executor()
                .spawn_blocking(move || groups::write_snapshot(&p, &bytes))
                .await;
            if let Err(e) = r {
                tracing::error!(shard, "consumer offsets not persisted: {e}");
                table.borrow_mut().mark_dirty();
            }
        }
    }

    /// Serves a request that came over the mesh, as [`Core::at_shard`] and
    /// [`Core::at_core`] serve local ones.
    pub async fn serve_remote(&self, request: ShardRequest) -> ShardReply {
        match request {
            ShardRequest::Shard { shard, op } => op.serve_for_mesh(self, shard).await,
            ShardRequest::Core(op) => Box::pin(op.serve_for_mesh(self)).await,
        }
    }
}
