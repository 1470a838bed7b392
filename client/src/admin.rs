//! Admin requests, for tools such as `mqadmin`.

use std::sync::Arc;

use message::MsgOffsetId;
use protocol::{
    BrokerStatus, ClusterInfo, Command, QueryByKey, ResponseCode, StageHistogram, TopicConfig,
};

use crate::error::{ClientError, Result};
use crate::instance::{ClientConfig, Instance};
use crate::model::{message_ext_with_body, owned_body, MessageExt, MessageQueue, QueueOffset};
use crate::producer::MESSAGE_BYTES_MAX_DEFAULT;
use crate::push::ConsumeFrom;
use crate::route::TopicRoute;

/// Largest body a query decompresses.
const QUERY_BODY_BYTES_MAX: usize = MESSAGE_BYTES_MAX_DEFAULT * 4;

/// Decodes the records of a query answer from `addr`; `shard_of` names the shard that stored
/// each one (for its offset id).
fn decode_answer(
    addr: &str,
    body: &[u8],
    shard_of: impl Fn(&message::RecordView<'_>) -> u16,
) -> Result<Vec<MessageExt>> {
    let mut out = Vec::new();
    for rec in message::records(body) {
        let view = rec.map_err(|e| ClientError::Protocol {
            addr: addr.to_owned(),
            detail: format!("bad record in a query answer: {e}"),
        })?;
        let body = owned_body(&view, addr, QUERY_BODY_BYTES_MAX)?;
        out.push(message_ext_with_body(&view, shard_of(&view), body));
    }
    Ok(out)
}

fn not_found(e: &ClientError) -> bool {
    e.code() == Some(ResponseCode::QueryNotFound)
}

/// One queue's consumption by a group.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueProgress {
    pub queue: MessageQueue,
    /// The oldest offset still stored (retention moves it forward).
    pub min_offset: QueueOffset,
    /// The offset the next message will get (the broker offset).
    pub max_offset: QueueOffset,
    /// The group's committed offset: the next message it will consume.
    pub committed: Option<QueueOffset>,
    /// Messages stored and not yet consumed by the group: from the committed offset (or the
    /// oldest stored one if retention deleted past it, or if the group has no offset yet) to
    /// the end. Exact and never negative.
    pub backlog: u64,
    /// When the committed offset last moved (ms since the epoch; 0 = not since the broker
    /// started).
    pub last_commit_ms: i64,
    /// The group's consume rate on this queue over its last two commits (messages/s).
    pub consume_tps: f64,
    /// Queue offsets the broker's readers stepped over since it started: records found
    /// damaged (quarantined) or missing, never delivered. Known once the group has an
    /// offset on the queue.
    pub skipped_records: u64,
}

impl QueueProgress {
    pub fn new(
        queue: MessageQueue,
        min_offset: QueueOffset,
        max_offset: QueueOffset,
        committed: Option<QueueOffset>,
        last_commit_ms: i64,
        consume_tps: f64,
    ) -> QueueProgress {
        let from = committed.map_or(min_offset.0, |c| c.0.max(min_offset.0));
        QueueProgress {
            queue,
            min_offset,
            max_offset,
            committed,
            backlog: max_offset.0.saturating_sub(from),
            last_commit_ms,
            consume_tps,
            skipped_records: 0,
        }
    }
}

/// NameServer and broker administration.
pub struct Admin {
    inst: Arc<Instance>,
}

impl Admin {
    /// `namesrv` is a `;`-separated list of NameServer addresses.
    pub fn new(namesrv: &str) -> Result<Admin> {
        Self::with_config(ClientConfig::new(namesrv)?)
    }

    pub fn with_config(config: ClientConfig) -> Result<Admin> {
        Ok(Admin {
            inst: Instance::start(config)?,
        })
    }

    pub fn topic_list(&self) -> Result<Vec<String>> {
        self.inst.routes.namesrv().topic_list()
    }

    /// The topic's route, freshly fetched.
    pub fn topic_route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.inst.fresh_route(topic)
    }

    pub fn cluster_info(&self) -> Result<ClusterInfo> {
        self.inst.routes.namesrv().cluster_info()
    }

    /// Creates or updates a topic on one broker address.
    pub fn create_topic(&self, broker_addr: &str, config: &TopicConfig) -> Result<()> {
        self.inst.create_topic(broker_addr, config)
    }

    pub fn broker_status(&self, broker_addr: &str) -> Result<BrokerStatus> {
        self.inst.broker_status(broker_addr)
    }

    /// Where the broker's sends spent their time: one latency histogram per stage of the
    /// request path and core, since start or the last call with `reset` (which clears them).
    /// What client `client_id` is doing (its consumer groups and their topics), as the
    /// client itself answers when the broker at `broker_addr` asks it over the client's own
    /// connection (RocketMQ's consumer running info). `NotFound` when no connection of that
    /// client is open there.
    pub fn client_running_info(
        &self,
        broker_addr: &str,
        client_id: &str,
    ) -> Result<protocol::ClientRunningInfo> {
        self.inst.client_running_info(broker_addr, client_id)
    }

    pub fn send_stages(&self, broker_addr: &str, reset: bool) -> Result<Vec<StageHistogram>> {
        self.inst.send_stages(broker_addr, reset)
    }

    /// (min, max) offsets of a queue.
    pub fn queue_offsets(&self, queue: &MessageQueue) -> Result<(QueueOffset, QueueOffset)> {
        self.inst.queue_offsets(queue)
    }

    pub fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<QueueOffset> {
        self.inst.search_offset(queue, timestamp_ms)
    }

    /// Messages of `topic` whose key (any of KEYS, or UNIQ_KEY) is `key`, stored between
    /// `begin_ms` and `end_ms`, from every broker of the topic (IndexFile look-ups; the
    /// broker checks each hit against the record itself).
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        begin_ms: i64,
        end_ms: i64,
        max: u32,
    ) -> Result<Vec<MessageExt>> {
        let route = self.inst.fresh_route(topic)?;
        let mut out = Vec::new();
        for broker in &route.data.brokers {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            let cmd = Command::QueryByKey(QueryByKey {
                topic: topic.to_owned(),
                key: key.to_owned(),
                begin_ms,
                end_ms,
                max,
            });
            match self.inst.broker_request_frame(addr, cmd) {
                Ok(frame) => {
                    let shards = broker.shard_count;
                    out.extend(decode_answer(addr, &frame.body, |v| {
                        protocol::queue_owner_shard(v.topic(), v.queue_id(), shards)
                    })?);
                }
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by_key(|m| m.store_timestamp_ms);
        out.truncate(max as usize);
        Ok(out)
    }

    /// The message with this offset id (RocketMQ's offsetMsgId): asks the broker that stored it.
    pub fn view_by_offset_id(&self, id: &MsgOffsetId) -> Result<Option<MessageExt>> {
        let addr = id.store_host.to_string();
        let cmd = Command::ViewByOffset {
            shard: id.shard,
            commit_log_offset: id.commit_log_offset,
        };
        match self.inst.broker_request_frame(&addr, cmd) {
            Ok(frame) => {
                let mut msgs = decode_answer(&addr, &frame.body, |_| id.shard)?;
                // Only the record that starts exactly there is that message.
                msgs.retain(|m| m.commit_log_offset.0 == id.commit_log_offset);
                Ok(msgs.into_iter().next())
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The message at `offset` of a queue, if it is still stored.
    pub fn query_by_offset(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
    ) -> Result<Option<MessageExt>> {
        let target = self.inst.queue_target(queue)?;
        let cmd = Command::Pull(protocol::PullRequest {
            consumer_group: String::new(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset.0,
            max_messages: 1,
            max_bytes: u32::MAX,
            tag_expression: "*".into(),
            suspend_timeout_ms: 0,
        });
        let frame = match self.inst.broker_request_frame(&target.addr, cmd) {
            Ok(f) => f,
            Err(e)
                if matches!(
                    e.code(),
                    Some(ResponseCode::PullNotFound | ResponseCode::PullOffsetMoved)
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let msgs = decode_answer(&target.addr, &frame.body, |_| target.shard)?;
        Ok(msgs.into_iter().find(|m| m.queue_offset == offset))
    }

    /// Sets the group's offset of every readable queue of `topic` to its first or last
    /// offset or to the first message stored at or after a time, and returns the new
    /// offsets. Running members adopt the new offset at their next commit (within their
    /// `commit_interval_ms`).
    pub fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        to: ConsumeFrom,
    ) -> Result<Vec<(MessageQueue, QueueOffset)>> {
        let route = self.inst.fresh_route(topic)?;
        let mut out = Vec::new();
        for t in route.read_queues() {
            let q = &t.queue;
            let off = match to {
                ConsumeFrom::First => self.inst.queue_offsets(q)?.0,
                ConsumeFrom::Last => self.inst.queue_offsets(q)?.1,
                ConsumeFrom::Timestamp(ms) => self.inst.search_offset(q, ms)?,
            };
            self.inst.reset_group_offset(group, q, off)?;
            out.push((q.clone(), off));
        }
        Ok(out)
    }

    /// Per queue of `topic`: the queue's offsets, the group's committed offset (if any),
    /// the exact backlog, and the group's last commit time and consume rate on the queue.
    pub fn consumer_progress(&self, group: &str, topic: &str) -> Result<Vec<QueueProgress>> {
        let route = self.inst.fresh_route(topic)?;
        let mut out = Vec::new();
        for t in route.read_queues() {
            let q = &t.queue;
            let g = self.inst.query_group_offset(group, q)?;
            let (min, max) = self.inst.queue_offsets(q)?;
            let mut p = QueueProgress::new(
                q.clone(),
                min,
                max,
                g.offset,
                g.last_commit_ms,
                g.consume_tps,
            );
            p.skipped_records = g.skipped_records;
            out.push(p);
        }
        Ok(out)
    }

    pub fn shutdown(&self) {
        self.inst.shutdown();
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.shutdown();
    }
}
