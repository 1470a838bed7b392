//! Request-reply (RocketMQ 4.6+): a requester sends an ordinary message carrying
//! `CORRELATION_ID`, `REPLY_TO_CLIENT` (its client id) and `TTL`; the consumer answers with a
//! reply message (`MSG_TYPE=reply`, the same correlation id and requester) sent to the
//! cluster's reply topic `<cluster>_REPLY_TOPIC` (RocketMQ's SEND_REPLY_MESSAGE, or the
//! native `SendReply`). The broker pushes the reply to the requester over the requester's
//! own connection (RocketMQ's PUSH_REPLY_MESSAGE_TO_CLIENT, or the native `PushReply`),
//! wherever that connection is served: this core first, then each other core through
//! `mesh::PushReply`. A reply whose requester has no open connection is dropped with a log
//! line, and the replier gets an error answer (as RocketMQ's ReplyMessageProcessor does).
//! With `store_reply_message_enable` (RocketMQ's `storeReplyMessageEnable`, on by default)
//! the reply is also stored in the reply topic, so it can be looked up like any message.
//! The reply topic is created when the first request comes in (`ensure_reply_topic`).

use std::time::Duration;

use bytes::Bytes;
use protocol::TopicConfig;

use crate::core::Core;
use crate::error::BrokerError;
use crate::mesh;

pub use message::reply::{prop, reply_topic, REPLY_MESSAGE_FLAG};
pub use message::TRACE_TOPIC;

/// How long the broker waits for the requester to take a pushed reply.
pub const PUSH_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

pub use crate::link::ReplyPush;

impl Core {
    /// Pushes `reply` to its requester's connection, on whichever core serves it. `NotFound`
    /// (logged) when no connection of the requester is open: the reply is dropped.
    pub async fn push_reply(&self, mut reply: ReplyPush) -> Result<(), BrokerError> {
        let Some(client_id) = reply.requester().map(str::to_owned) else {
            return Err(BrokerError::BadRequest(format!(
                "reply message properties[{}] is null: the reply names no requester",
                prop::REPLY_TO_CLIENT
            )));
        };
        reply.properties.retain(|(k, _)| k != prop::PUSH_REPLY_TIME);
        reply.properties.push((
            prop::PUSH_REPLY_TIME.into(),
            self.shared.clock.wall_ms().to_string(),
        ));
        if self.link().push_reply(&client_id, &reply).await? {
            return Ok(());
        }
        for core in (0..self.shared.cores).filter(|c| *c != self.id) {
            let op = mesh::PushReply {
                client_id: client_id.clone(),
                reply: Box::new(reply.clone()),
            };
            if self.at_core(core, op).await? {
                return Ok(());
            }
        }
        let correlation = reply.property(prop::CORRELATION_ID).unwrap_or("");
        tracing::warn!(
            requester = %client_id,
            correlation_id = correlation,
            "a reply is dropped: no connection of its requester is open (it is gone, or never connected to this broker)"
        );
        Err(BrokerError::NotFound(format!(
            "push reply message fail, channel of <{client_id}> not found"
        )))
    }

    /// Handles a reply: pushes it to its requester, then stores it in the reply topic when
    /// `store_reply_message_enable` is on (a failed store is logged; the push decides the
    /// answer, as in RocketMQ).
    pub async fn reply(&self, reply: ReplyPush) -> Result<(), BrokerError> {
        let store = self
            .config()
            .store_reply_message_enable
            .then(|| reply.clone());
        let pushed = self.push_reply(reply).await;
        if let Some(r) = store {
            if let Err(e) = self.store_reply(&r).await {
                tracing::debug!(topic = %r.topic, "a reply was not stored: {e}");
            }
        }
        pushed
    }

    async fn store_reply(&self, r: &ReplyPush) -> Result<(), BrokerError> {
        let cfg = self.topic_for_send(&r.topic).await?;
        let queues = cfg.write_queues.max(1);
        let queue_id = (r.queue_id.max(0) as u32) % queues;
        let record = r.record()?;
        self.send(&r.topic, queue_id, Bytes::from(record), 1)
            .await
            .map(|_| ())
    }

    /// The cluster's reply topic exists (one queue per shard, as a group's retry topic):
    /// called when a request comes in, so it is there before the replier looks its route
    /// up, even with auto-creation off. A broker that never sees request-reply has none.
    pub async fn ensure_reply_topic(&self) {
        let name = reply_topic(&self.shared.config.cluster_name);
        self.ensure_system_topic(&name).await;
    }

    /// On core 0 at start, with `trace_topic_enable`: the trace topic exists, so clients
    /// with tracing on can write to it with auto-creation off.
    pub async fn ensure_trace_topic(&self) {
        if self.shared.config.trace_topic_enable {
            self.ensure_system_topic(TRACE_TOPIC).await;
        }
    }

    async fn ensure_system_topic(&self, name: &str) {
        if self.topics.borrow().get(name).is_some() {
            return;
        }
        let queues = u32::from(self.shared.shard_count.max(1));
        let cfg = TopicConfig {
            name: name.to_owned(),
            read_queues: queues,
            write_queues: queues,
            perm: protocol::perm::READ_WRITE,
        };
        match self.create_topic(cfg).await {
            Ok(()) => tracing::info!(topic = %name, queues, "created a system topic"),
            Err(e) => tracing::warn!(topic = %name, "cannot create a system topic: {e}"),
        }
    }
}
