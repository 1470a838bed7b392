//! The pull consumer: the caller drives offsets (group offsets can be committed to the
//! broker). The push consumer built on it lives in `push/`.

use std::sync::Arc;
use std::time::Duration;

use message::TagFilter;
use protocol::{Command, Frame, PullRequest, ResponseCode};

use crate::error::{ClientError, Result};
use crate::instance::{ClientConfig, Instance};
use crate::model::{MessageQueue, PullResult, PullStatus, QueueOffset};
use crate::producer::MESSAGE_BYTES_MAX_DEFAULT;
use crate::pulled::{BatchSource, PulledBatch};
use crate::remoting::{unexpected, ResponseFuture};
use crate::route::QueueTarget;

/// What one pull asks for.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Default 32.
    pub max_messages: u32,
    /// Default 4 MiB.
    pub max_bytes: u32,
    /// `*`, `TagA` or `TagA || TagB`. Default `*`.
    pub tag_expression: String,
    /// How long the broker may hold a pull that finds nothing (long polling). 0 answers at
    /// once. Default 0.
    pub suspend_timeout_ms: u64,
    /// A SQL92 expression over the messages' properties (RocketMQ's
    /// `MessageSelector.bySql`, grammar in `message::sql92`), evaluated by the broker on
    /// top of the tag expression; the broker needs `enable_property_filter`. Default none.
    pub sql92: Option<String>,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            max_messages: 32,
            max_bytes: 4 * 1024 * 1024,
            tag_expression: "*".into(),
            suspend_timeout_ms: 0,
            sql92: None,
        }
    }
}

/// How a subscription selects its topic's messages: by tag (`*`, `TagA || TagB`) or by a
/// SQL92 expression over their properties (RocketMQ's `MessageSelector.byTag` / `bySql`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    Tag(String),
    Sql92(String),
}

impl Selector {
    /// A SQL92 selector, refused here when the expression does not parse (the broker
    /// checks again, and refuses any SQL92 filter when `enable_property_filter` is off).
    pub fn sql92(expression: impl Into<String>) -> Result<Selector> {
        let expression = expression.into();
        message::sql92::Sql92Filter::parse(&expression)
            .map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(Selector::Sql92(expression))
    }

    /// Pull options selecting as this selector does.
    pub fn apply(&self, opts: PullOptions) -> PullOptions {
        match self {
            Selector::Tag(t) => PullOptions {
                tag_expression: t.clone(),
                sql92: None,
                ..opts
            },
            Selector::Sql92(e) => PullOptions {
                tag_expression: "*".into(),
                sql92: Some(e.clone()),
                ..opts
            },
        }
    }
}

/// Reads queues at offsets the caller chooses.
pub struct PullConsumer {
    pub(crate) inner: Arc<PullInner>,
}

pub(crate) struct PullInner {
    pub(crate) inst: Arc<Instance>,
    pub(crate) group: String,
    /// Largest decompressed body accepted.
    body_bytes_max: usize,
}

/// A pull on the wire.
pub(crate) struct WirePull {
    target: QueueTarget,
    offset: QueueOffset,
    filter: TagFilter,
    pub(crate) future: ResponseFuture,
}

impl PullConsumer {
    /// `namesrv` is a `;`-separated list of NameServer addresses.
    pub fn new(namesrv: &str, group: &str) -> Result<PullConsumer> {
        Self::with_config(ClientConfig::new(namesrv)?, group)
    }

    pub fn with_config(config: ClientConfig, group: &str) -> Result<PullConsumer> {
        if group.is_empty() {
            return Err(ClientError::Config("consumer group is empty".into()));
        }
        Ok(PullConsumer {
            inner: Arc::new(PullInner {
                inst: Instance::start(config)?,
                group: group.to_owned(),
                body_bytes_max: MESSAGE_BYTES_MAX_DEFAULT * 4,
            }),
        })
    }

    /// The readable queues of `topic`, freshly fetched from a NameServer.
    pub fn queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        Ok(self
            .inner
            .inst
            .fresh_route(topic)?
            .read_queues()
            .iter()
            .map(|t| t.queue.clone())
            .collect())
    }

    /// Reads up to `opts.max_messages` messages of `queue` from `offset`. Messages whose tag
    /// does not match the expression are dropped even if the broker's hash filter let them
    /// through; `next_offset` moves past them either way.
    pub fn pull(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<PullResult> {
        Ok(self.pull_batch(queue, offset, opts)?.into_result())
    }

    /// [`PullConsumer::pull`] without decoding: the messages are read where they lie in the
    /// response, for consumers that go through many messages and few of their fields.
    pub fn pull_batch(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<PulledBatch> {
        self.start_pull(queue, offset, opts)?.wait()
    }

    /// Sends a pull and returns at once; [`PendingPull::wait`] gives its answer. Several
    /// pulls (of different queues, or of one queue at offsets the caller predicts) can be
    /// in flight together.
    pub fn start_pull(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<PendingPull> {
        let pending = self.inner.start_pull(queue, offset, opts)?;
        Ok(PendingPull {
            inner: Arc::clone(&self.inner),
            pull: pending,
        })
    }

    /// (min, max) offsets of `queue`; max is the offset the next message will get.
    pub fn queue_offsets(&self, queue: &MessageQueue) -> Result<(QueueOffset, QueueOffset)> {
        self.inner.inst.queue_offsets(queue)
    }

    pub fn min_offset(&self, queue: &MessageQueue) -> Result<QueueOffset> {
        Ok(self.queue_offsets(queue)?.0)
    }

    pub fn max_offset(&self, queue: &MessageQueue) -> Result<QueueOffset> {
        Ok(self.queue_offsets(queue)?.1)
    }

    /// The offset of the first message of `queue` stored at or after `timestamp_ms`.
    pub fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<QueueOffset> {
        self.inner.inst.search_offset(queue, timestamp_ms)
    }

    /// The group's committed offset of `queue` (the next offset to consume), if any.
    pub fn committed_offset(&self, queue: &MessageQueue) -> Result<Option<QueueOffset>> {
        Ok(self
            .inner
            .inst
            .query_group_offset(&self.inner.group, queue)?
            .offset)
    }

    /// Stores the group's offset of `queue` on the broker (the next offset to consume). Not
    /// applied while a push consumer of the group holds the queue's lease.
    pub fn commit_offset(&self, queue: &MessageQueue, offset: QueueOffset) -> Result<()> {
        let g = &self.inner.group;
        let current = self.inner.inst.query_group_offset(g, queue)?;
        self.inner.inst.commit_group_offset(
            g,
            queue,
            offset,
            current.epoch,
            "pull-consumer",
            false,
        )?;
        Ok(())
    }

    pub fn shutdown(&self) {
        self.inner.inst.shutdown();
    }
}

impl Drop for PullConsumer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl PullInner {
    pub(crate) fn start_pull(
        &self,
        queue: &MessageQueue,
        offset: QueueOffset,
        opts: &PullOptions,
    ) -> Result<WirePull> {
        let target = self.inst.read_target(queue)?;
        let pull = PullRequest {
            consumer_group: self.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset.0,
            max_messages: opts.max_messages,
            max_bytes: opts.max_bytes,
            tag_expression: opts.tag_expression.clone(),
            suspend_timeout_ms: opts.suspend_timeout_ms,
        };
        let command = match &opts.sql92 {
            None => Command::Pull(pull),
            Some(e) => Command::PullSql92 {
                pull,
                expression: e.clone(),
            },
        };
        // The broker may hold the pull for the suspend time; allow the usual timeout on top.
        let timeout = Duration::from_millis(opts.suspend_timeout_ms) + self.inst.request_timeout();
        let future = self
            .inst
            .pool
            .get(&target.addr)
            .and_then(|conn| conn.send_request(command, &[], timeout))
            .inspect_err(|e| self.inst.note_failure(&queue.topic, e))?;
        Ok(WirePull {
            target,
            offset,
            filter: TagFilter::parse(&opts.tag_expression),
            future,
        })
    }

    pub(crate) fn finish_pull(
        &self,
        pending: &WirePull,
        frame: Result<Frame>,
    ) -> Result<PullResult> {
        Ok(self.finish_pull_batch(pending, frame)?.into_result())
    }

    pub(crate) fn finish_pull_batch(
        &self,
        pending: &WirePull,
        frame: Result<Frame>,
    ) -> Result<PulledBatch> {
        let result = frame.and_then(|f| self.parse_pull(pending, f));
        match &result {
            Ok(b) => self
                .inst
                .suggest_reader(&pending.target.queue, b.suggested_broker_id),
            Err(e) => {
                // The broker may have moved or died: look again before the next pull, and
                // read from the master (a slave suggested may be the one that went).
                self.inst.note_failure(&pending.target.queue.topic, e);
                self.inst.suggest_reader(&pending.target.queue, 0);
            }
        }
        result
    }

    fn parse_pull(&self, pending: &WirePull, frame: Frame) -> Result<PulledBatch> {
        let addr = &pending.target.addr;
        let code = frame.header.response_code();
        let (next_offset, min_offset, max_offset, suggested_broker_id) = match &frame.header.command
        {
            Command::PullResult(r) => (
                QueueOffset(r.next_offset),
                QueueOffset(r.min_offset),
                QueueOffset(r.max_offset),
                r.suggested_broker_id,
            ),
            _ => (pending.offset, QueueOffset(0), QueueOffset(0), 0),
        };
        let source = |status| BatchSource {
            addr,
            shard: pending.target.shard,
            status,
            next_offset,
            min_offset,
            max_offset,
            suggested_broker_id,
        };
        match code {
            ResponseCode::Success => {
                if !matches!(frame.header.command, Command::PullResult(_)) {
                    return Err(unexpected(addr, "pull result", &frame.header.command));
                }
                PulledBatch::decode(
                    frame.body,
                    &pending.filter,
                    source(PullStatus::Found),
                    self.body_bytes_max,
                )
            }
            ResponseCode::PullNotFound | ResponseCode::PullRetryImmediately => {
                Ok(PulledBatch::empty(source(PullStatus::NoNewMessage)))
            }
            ResponseCode::PullOffsetMoved => {
                if !matches!(frame.header.command, Command::PullResult(_)) {
                    return Err(unexpected(addr, "pull result", &frame.header.command));
                }
                Ok(PulledBatch::empty(source(PullStatus::OffsetMoved)))
            }
            _ => Err(ClientError::broker(addr, frame.header)),
        }
    }
}

/// A pull sent by [`PullConsumer::start_pull`], not yet answered.
pub struct PendingPull {
    inner: Arc<PullInner>,
    pull: WirePull,
}

impl PendingPull {
    /// Waits for the answer (at most the suspend time plus the request timeout).
    pub fn wait(self) -> Result<PulledBatch> {
        let frame = self.pull.future.wait();
        self.inner.finish_pull_batch(&self.pull, frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::producer::Producer;
    use crate::pulled::PulledBatch;
    use crate::testing::{broker, fake_broker, namesrv, route, FakeServer};

    fn setup(queues: u32) -> (FakeServer, FakeServer, Producer) {
        let (b, _state) = fake_broker(4);
        let ns = namesrv("T", route(vec![broker("b", &b.addr, &[], 1)], queues));
        let p = Producer::builder().namesrv(&ns.addr).build().unwrap();
        (b, ns, p)
    }

    fn queue(id: u32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn pull_reads_filters_and_reports_offsets() {
        let (_b, ns, p) = setup(1);
        let big = "z".repeat(20_000);
        for i in 0..5 {
            let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
            let body = if i == 4 { big.clone() } else { format!("m{i}") };
            p.send(
                Message::new("T", body)
                    .with_tags(tag)
                    .with_key(format!("k{i}")),
            )
            .unwrap();
        }
        let c = PullConsumer::new(&ns.addr, "g").unwrap();
        assert_eq!(c.queues("T").unwrap(), vec![queue(0)]);
        assert_eq!(
            c.queue_offsets(&queue(0)).unwrap(),
            (QueueOffset(0), QueueOffset(5))
        );
        let all = c
            .pull(&queue(0), QueueOffset(0), &PullOptions::default())
            .unwrap();
        assert_eq!(all.status, PullStatus::Found);
        assert_eq!(all.next_offset, QueueOffset(5));
        assert_eq!(all.messages.len(), 5);
        // The compressed body comes back whole.
        assert_eq!(&all.messages[4].body[..], big.as_bytes());
        assert_eq!(all.messages[1].keys, vec!["k1"]);
        assert!(all.messages.iter().all(|m| m.msg_id.len() == 32));
        let opts = PullOptions {
            tag_expression: "TagB".into(),
            max_messages: 2,
            ..PullOptions::default()
        };
        let b = c.pull(&queue(0), QueueOffset(0), &opts).unwrap();
        let offsets: Vec<u64> = b.messages.iter().map(|m| m.queue_offset.0).collect();
        assert_eq!(offsets, vec![1, 3]);
        assert_eq!(b.next_offset, QueueOffset(4));
        let none = c
            .pull(&queue(0), QueueOffset(5), &PullOptions::default())
            .unwrap();
        assert_eq!(none.status, PullStatus::NoNewMessage);
        assert_eq!(none.next_offset, QueueOffset(5));
        let moved = c
            .pull(&queue(0), QueueOffset(99), &PullOptions::default())
            .unwrap();
        assert_eq!(moved.status, PullStatus::OffsetMoved);
        assert_eq!(moved.next_offset, QueueOffset(5));
        assert_eq!(c.search_offset(&queue(0), 0).unwrap(), QueueOffset(0));
    }

    #[test]
    fn pulls_in_flight_together_answer_in_place() {
        let (_b, ns, p) = setup(2);
        for i in 0..6u32 {
            let m = Message::new("T", format!("body-{i}")).with_tags(format!("Tag{}", i % 2));
            p.send_to_queue(m, &queue(i % 2)).unwrap();
        }
        let c = PullConsumer::new(&ns.addr, "g").unwrap();
        let opts = PullOptions {
            max_messages: 2,
            ..PullOptions::default()
        };
        // Three pulls out before any answer is read: two of queue 0, one of queue 1.
        let first = c.start_pull(&queue(0), QueueOffset(0), &opts).unwrap();
        let second = c.start_pull(&queue(0), QueueOffset(2), &opts).unwrap();
        let other = c.start_pull(&queue(1), QueueOffset(0), &opts).unwrap();
        let other = other.wait().unwrap();
        let second = second.wait().unwrap();
        let first = first.wait().unwrap();
        let bodies = |b: &PulledBatch| -> Vec<String> {
            b.iter()
                .map(|m| String::from_utf8_lossy(m.body()).into_owned())
                .collect()
        };
        assert_eq!(bodies(&first), vec!["body-0", "body-2"]);
        assert_eq!(first.next_offset, QueueOffset(2));
        assert_eq!(bodies(&second), vec!["body-4"]);
        assert_eq!(second.next_offset, QueueOffset(3));
        assert_eq!(bodies(&other), vec!["body-1", "body-3"]);
        let m = other.iter().nth(1).unwrap();
        assert_eq!(m.queue_offset(), QueueOffset(1));
        assert_eq!(m.tags(), Some("Tag1"));
        assert_eq!(m.msg_id().len(), 32);
        // The owned form says the same.
        let ext = m.to_message_ext();
        assert_eq!(&ext.body[..], b"body-3");
        assert_eq!(ext.msg_id, m.msg_id());
        assert_eq!(ext.offset_msg_id, m.offset_msg_id());
        assert_eq!(ext.tags.as_deref(), Some("Tag1"));
        // A tag filter drops what does not match; the next offset moves past it anyway.
        let tag0 = PullOptions {
            tag_expression: "Tag0".into(),
            ..PullOptions::default()
        };
        let b = c.pull_batch(&queue(1), QueueOffset(0), &tag0).unwrap();
        assert!(b.is_empty());
        assert_eq!(b.next_offset, QueueOffset(3));
    }
}
