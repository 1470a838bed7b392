//! Each request one core makes of a shard or of another core, with its own answer type.
//!
//! `Core::at_shard` and `Core::at_core` take an op and return that op's answer: the pairing
//! of an op with its answer is written once, in the op's [`ShardCall`] or [`CoreCall`]
//! impl, and the mesh carries the answer boxed ([`crate::mesh::ShardReply`]), opened again
//! as the type the op names. A wrong-kind answer cannot be written; an answer that does
//! not open as its op's type is a broken invariant of the mesh ([`BrokerError::Internal`]).
//!
//! The futures are the core's own (glommio runs them on one thread), so the traits' async
//! methods need no `Send` bound.
#![allow(async_fn_in_trait)]

use std::any::Any;

use bytes::Bytes;
use message::offsets::QueueOffset;
use protocol::{
    CheckTransaction, ClientRunningInfo, CoreStatus, EndTransaction, QueryByKey, StageHistogram,
    TransactionState,
};
use shard::StoredSlice;

use crate::core::{Core, PullBody};
use crate::error::{Appended, BrokerError};
use crate::groups::{MemberView, StoredOffset};
use crate::mesh::*;
use crate::sub_groups::{GroupConfig, RequestMode};

/// An op served by the core that hosts its shard.
pub trait ShardCall: Sized + Into<ShardOp> {
    /// What the shard's core finds.
    type Found: Crossing;

    /// Serves the op on `shard`, which `core` hosts.
    async fn serve(self, core: &Core, shard: u16) -> Result<Self::Found, BrokerError>;
}

/// The answer an op's asker gets, found on its own core or on another.
pub type Answer<T> = <<T as ShardCall>::Found as Crossing>::Arrived;

/// How an answer crosses cores: most as they are; a pull's records are copied out of the
/// shard's memory, which only its core may read.
pub trait Crossing: Sized {
    type Sent: Send + 'static;
    type Arrived;

    /// The answer on the core that found it.
    fn here(self) -> Self::Arrived;
    /// The answer as it leaves for another core.
    fn send(self) -> Self::Sent;
    /// The answer as it arrives from another core.
    fn arrived(sent: Self::Sent) -> Self::Arrived;
}

macro_rules! crosses_as_it_is {
    ($($t:ty),* $(,)?) => {$(
        impl Crossing for $t {
            type Sent = $t;
            type Arrived = $t;

            fn here(self) -> $t {
                self
            }

            fn send(self) -> $t {
                self
            }

            fn arrived(sent: $t) -> $t {
                sent
            }
        }
    )*};
}

crosses_as_it_is!(
    Appended,
    (QueueOffset, QueueOffset),
    QueueOffset,
    Vec<Bytes>,
    Option<StoredOffset>,
    Option<i64>,
    (),
    crate::pop::Popped,
    String,
    usize,
);

impl Crossing for PullOutcome<Vec<StoredSlice>> {
    type Sent = PullOutcome<Vec<Bytes>>;
    type Arrived = PullOutcome<PullBody>;

    fn here(self) -> PullOutcome<PullBody> {
        self.map_body(PullBody::Local)
    }

    fn send(self) -> PullOutcome<Vec<Bytes>> {
        // The one copy of a cross-core pull: the slices are core-local.
        self.map_body(|b| b.iter().map(StoredSlice::to_bytes).collect())
    }

    fn arrived(sent: PullOutcome<Vec<Bytes>>) -> PullOutcome<PullBody> {
        sent.map_body(PullBody::Owned)
    }
}

/// An op served by a core, whichever shards it hosts.
pub trait CoreCall: Sized + Into<CoreOp> {
    type Answer: Send + 'static;

    /// Serves the op on `core`.
    async fn serve(self, core: &Core) -> Result<Self::Answer, BrokerError>;
}

/// A reply opened as the answer type its op names.
pub fn opened<A: 'static>(reply: ShardReply) -> Result<A, BrokerError> {
    reply?.downcast::<A>().map(|a| *a).map_err(|_| {
        BrokerError::Internal(format!(
            "a mesh reply is not a {}: replies crossed",
            std::any::type_name::<A>()
        ))
    })
}

/// `found`, boxed to cross the mesh.
fn sent<F: Crossing>(found: Result<F, BrokerError>) -> ShardReply {
    Ok(Box::new(found?.send()) as Box<dyn Any + Send>)
}

impl ShardOp {
    /// Serves the op on `shard`, which `core` hosts, for another core.
    pub async fn serve_for_mesh(self, core: &Core, shard: u16) -> ShardReply {
        match self {
            ShardOp::Append(op) => sent(op.serve(core, shard).await),
            ShardOp::Pull(op) => sent(op.serve(core, shard).await),
            ShardOp::QueueOffsets(op) => sent(op.serve(core, shard).await),
            ShardOp::SearchOffset(op) => sent(op.serve(core, shard).await),
            ShardOp::StoreTime(op) => sent(op.serve(core, shard).await),
            ShardOp::ViewByOffset(op) => sent(op.serve(core, shard).await),
            ShardOp::GroupOffset(op) => sent(op.serve(core, shard).await),
            ShardOp::EndTransaction(op) => sent(op.serve(core, shard).await),
            ShardOp::Pop(op) => sent(op.serve(core, shard).await),
            ShardOp::PopAck(op) => sent(op.serve(core, shard).await),
            ShardOp::PopChangeInvisible(op) => sent(op.serve(core, shard).await),
            ShardOp::LiteAdmit(op) => sent(op.serve(core, shard).await),
            ShardOp::LiteAck(op) => sent(op.serve(core, shard).await),
            ShardOp::RunRetention(op) => sent(op.serve(core, shard).await),
        }
    }
}

/// `answer`, boxed to cross the mesh.
fn answered<A: Send + 'static>(answer: Result<A, BrokerError>) -> ShardReply {
    Ok(Box::new(answer?) as Box<dyn Any + Send>)
}

impl CoreOp {
    /// Serves the op on `core`, for another core.
    pub async fn serve_for_mesh(self, core: &Core) -> ShardReply {
        match self {
            CoreOp::QueryByKey(op) => answered(op.serve(core).await),
            CoreOp::Status(op) => answered(op.serve(core).await),
            CoreOp::SendStages(op) => answered(op.serve(core).await),
            CoreOp::CreateTopic(op) => answered(op.serve(core).await),
            CoreOp::TopicChanged(op) => answered(op.serve(core).await),
            CoreOp::Group(op) => answered(op.serve(core).await),
            CoreOp::RunningInfo(op) => answered(op.serve(core).await),
            CoreOp::GroupChanged(op) => answered(op.serve(core).await),
            CoreOp::ReleaseLeases(op) => answered(op.serve(core).await),
            CoreOp::ClientConnected(op) => answered(op.serve(core).await),
            CoreOp::SubGroup(op) => answered(op.serve(core).await),
            CoreOp::RequestMode(op) => answered(op.serve(core).await),
            CoreOp::DeleteTopic(op) => answered(op.serve(core).await),
            CoreOp::TopicDeleted(op) => answered(op.serve(core).await),
            CoreOp::PushReply(op) => answered(op.serve(core).await),
            CoreOp::CheckTransaction(op) => answered(op.serve(core).await),
            CoreOp::PopInflight(op) => answered(op.serve(core).await),
            CoreOp::Recall(op) => answered(op.serve(core).await),
            CoreOp::LiteSubscribe(op) => answered(op.serve(core).await),
            CoreOp::LiteEvicted(op) => answered(op.serve(core).await),
            CoreOp::LitePop(op) => answered(op.serve(core).await),
            CoreOp::LiteGroups(op) => answered(op.serve(core).await),
            CoreOp::UpdateConfig(op) => answered(op.serve(core).await),
            CoreOp::ApplyConfig(op) => answered(op.serve(core).await),
            CoreOp::DedupClaim(op) => answered(op.serve(core).await),
            CoreOp::DedupSettle(op) => answered(op.serve(core).await),
            CoreOp::QuotaDemand(op) => answered(op.serve(core).await),
        }
    }
}

// ------------------------------------------------------------------ shard ops

impl ShardCall for Append {
    type Found = Appended;

    async fn serve(self, core: &Core, shard: u16) -> Result<Appended, BrokerError> {
        core.append_local(shard, &self.topic, self.queue_id, &self.records, self.count)
            .await
    }
}

impl ShardCall for Pull {
    type Found = PullOutcome<Vec<StoredSlice>>;

    async fn serve(self, core: &Core, shard: u16) -> Result<Self::Found, BrokerError> {
        core.pull_local(shard, &self.args, self.sql92.as_deref())
            .await
    }
}

impl ShardCall for QueueOffsets {
    /// The smallest offset and the next one.
    type Found = (QueueOffset, QueueOffset);

    async fn serve(self, core: &Core, shard: u16) -> Result<Self::Found, BrokerError> {
        let o = core
            .local_shard(shard)?
            .queue_offsets(&self.topic, self.queue_id);
        Ok((o.min, o.max))
    }
}

impl ShardCall for RunRetention {
    /// The segments deleted.
    type Found = usize;

    async fn serve(self, core: &Core, shard: u16) -> Result<usize, BrokerError> {
        let report = core.local_shard(shard)?.run_retention().await?;
        Ok(report.deleted_segments)
    }
}

impl ShardCall for SearchOffset {
    type Found = QueueOffset;

    async fn serve(self, core: &Core, shard: u16) -> Result<QueueOffset, BrokerError> {
        Ok(core
            .local_shard(shard)?
            .search_offset_by_time(&self.topic, self.queue_id, self.timestamp_ms)
            .await?)
    }
}

impl ShardCall for StoreTime {
    /// `None` when the record is gone, damaged or was never written.
    type Found = Option<i64>;

    async fn serve(self, core: &Core, shard: u16) -> Result<Option<i64>, BrokerError> {
        Ok(core
            .local_shard(shard)?
            .store_time_at(&self.topic, self.queue_id, QueueOffset(self.queue_offset))
            .await?)
    }
}

impl ShardCall for ViewByOffset {
    type Found = Vec<Bytes>;

    async fn serve(self, core: &Core, shard: u16) -> Result<Vec<Bytes>, BrokerError> {
        core.view_local(shard, self.commit_log_offset).await
    }
}

impl ShardCall for OffsetOp {
    type Found = Option<StoredOffset>;

    async fn serve(self, core: &Core, shard: u16) -> Result<Option<StoredOffset>, BrokerError> {
        core.group_offset_local(shard, self)
    }
}

impl ShardCall for EndTransaction {
    type Found = ();

    async fn serve(self, core: &Core, shard: u16) -> Result<(), BrokerError> {
        crate::transaction::end_local(core, shard, self).await
    }
}

impl ShardCall for PopQueue {
    type Found = crate::pop::Popped;

    async fn serve(self, core: &Core, shard: u16) -> Result<Self::Found, BrokerError> {
        crate::pop::pop_local(core, shard, self.queue_id, &self.req).await
    }
}

impl ShardCall for PopAck {
    type Found = ();

    async fn serve(self, core: &Core, shard: u16) -> Result<(), BrokerError> {
        crate::pop::ack_local(
            core,
            shard,
            &self.group,
            &self.topic,
            &self.handle,
            self.dead_letter,
        )
        .await
    }
}

impl ShardCall for PopChangeInvisible {
    /// The message's new receipt handle.
    type Found = String;

    async fn serve(self, core: &Core, shard: u16) -> Result<String, BrokerError> {
        crate::pop::change_local(
            core,
            shard,
            &self.group,
            &self.topic,
            &self.handle,
            self.invisible_ms,
        )
        .await
    }
}

impl ShardCall for LiteAdmit {
    type Found = ();

    async fn serve(self, core: &Core, shard: u16) -> Result<(), BrokerError> {
        core.lite_admit_local(shard, self).await
    }
}

impl ShardCall for LiteAck {
    /// The message's new receipt handle after a change; empty after an ack.
    type Found = String;

    async fn serve(self, core: &Core, shard: u16) -> Result<String, BrokerError> {
        core.lite_ack_local(shard, self).await
    }
}

// ------------------------------------------------------------------ core ops

impl CoreCall for PopInflight {
    type Answer = u64;

    async fn serve(self, core: &Core) -> Result<u64, BrokerError> {
        crate::pop::inflight_local(core, &self.group, &self.topic).await
    }
}

impl CoreCall for crate::lite::LiteSubscription {
    /// The clients of an Exclusive group that lost lite topics of this core to it.
    type Answer = Vec<crate::lite::Evicted>;

    async fn serve(self, core: &Core) -> Result<Vec<crate::lite::Evicted>, BrokerError> {
        core.lite_subscribe_local(self).await
    }
}

impl CoreCall for crate::lite::Evicted {
    /// Whether the client was connected here to be told.
    type Answer = bool;

    async fn serve(self, core: &Core) -> Result<bool, BrokerError> {
        Ok(core.link().lite_unsubscribed(&self).await)
    }
}

impl CoreCall for crate::lite::LitePop {
    type Answer = crate::pop::Popped;

    async fn serve(self, core: &Core) -> Result<crate::pop::Popped, BrokerError> {
        core.lite_pop(self).await
    }
}

impl CoreCall for crate::lite::LiteGroups {
    /// (group, parent topic) pairs.
    type Answer = Vec<(String, String)>;

    async fn serve(self, core: &Core) -> Result<Self::Answer, BrokerError> {
        Ok(core.lite_group_parents_local())
    }
}

impl CoreCall for UpdateConfig {
    type Answer = crate::live_config::ConfigUpdate;

    async fn serve(self, core: &Core) -> Result<Self::Answer, BrokerError> {
        core.update_config(self.0).await
    }
}

impl CoreCall for ApplyConfig {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        core.apply_config(*self.0)
    }
}

impl CoreCall for crate::mesh::Recall {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        core.recall_local(&self).await
    }
}

impl CoreCall for QueryByKey {
    type Answer = Vec<Bytes>;

    async fn serve(self, core: &Core) -> Result<Vec<Bytes>, BrokerError> {
        core.query_local(&self).await
    }
}

impl CoreCall for Status {
    type Answer = CoreStatus;

    async fn serve(self, core: &Core) -> Result<CoreStatus, BrokerError> {
        Ok(core.local_status())
    }
}

impl CoreCall for SendStages {
    type Answer = Vec<StageHistogram>;

    async fn serve(self, core: &Core) -> Result<Vec<StageHistogram>, BrokerError> {
        Ok(core.stages.snapshot(core.id, self.reset))
    }
}

impl CoreCall for CreateTopic {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        Box::pin(core.create_topic_with(self.0, self.1)).await
    }
}

impl CoreCall for TopicChanged {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        let TopicChanged(cfg, attributes) = self;
        let mut table = core.topics.borrow_mut();
        table.set_attributes(&cfg.name, attributes);
        table.upsert(cfg);
        Ok(())
    }
}

impl CoreCall for GroupOp {
    type Answer = MemberView;

    async fn serve(self, core: &Core) -> Result<MemberView, BrokerError> {
        Box::pin(core.group(self)).await
    }
}

impl CoreCall for RunningInfo {
    /// The client's answer; `None` when no connection of the client is open there.
    type Answer = Option<ClientRunningInfo>;

    async fn serve(self, core: &Core) -> Result<Option<ClientRunningInfo>, BrokerError> {
        core.link().running_info(&self.0).await.transpose()
    }
}

impl CoreCall for GroupChanged {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        core.link().group_changed(&self.group, &self.members).await;
        Ok(())
    }
}

impl CoreCall for ReleaseLeases {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        let mut released = 0;
        for table in core.offsets.values() {
            released += table
                .borrow_mut()
                .release_client(&self.group, &self.client_id);
        }
        if released > 0 {
            tracing::debug!(group = %self.group, client_id = %self.client_id, released, "leases of a leaving client released");
        }
        Ok(())
    }
}

impl CoreCall for crate::mesh::QuotaDemand {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        core.quotas.took_demand(&self);
        Ok(())
    }
}

impl CoreCall for ClientConnected {
    /// Whether a connection of the client is open there.
    type Answer = bool;

    async fn serve(self, core: &Core) -> Result<bool, BrokerError> {
        Ok(core.link().connected(&self.0))
    }
}

impl CoreCall for SubGroupOp {
    /// The configs after the op (for a list: those asked for).
    type Answer = Vec<GroupConfig>;

    async fn serve(self, core: &Core) -> Result<Vec<GroupConfig>, BrokerError> {
        Box::pin(core.sub_group(self)).await
    }
}

impl CoreCall for RequestModeOp {
    /// The mode after the op.
    type Answer = Option<RequestMode>;

    async fn serve(self, core: &Core) -> Result<Option<RequestMode>, BrokerError> {
        Box::pin(core.request_mode(self)).await
    }
}

impl CoreCall for DeleteTopic {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        Box::pin(core.delete_topic(self.0)).await
    }
}

impl CoreCall for TopicDeleted {
    type Answer = ();

    async fn serve(self, core: &Core) -> Result<(), BrokerError> {
        core.topics.borrow_mut().remove(&self.0);
        Ok(())
    }
}

impl CoreCall for PushReply {
    /// Whether the reply was pushed: false when no connection of the client is open there.
    type Answer = bool;

    async fn serve(self, core: &Core) -> Result<bool, BrokerError> {
        core.link().push_reply(&self.client_id, &self.reply).await
    }
}

impl CoreCall for CheckTransaction {
    /// `None`: no producer of the group is connected there; `Some(None)`: a RocketMQ client
    /// was asked (it answers with END_TRANSACTION); `Some(Some(s))`: a native client's
    /// answer.
    type Answer = Option<Option<TransactionState>>;

    async fn serve(self, core: &Core) -> Result<Self::Answer, BrokerError> {
        Ok(core.link().check_transaction(self).await)
    }
}
