//! Sending and consuming: `send`, `consume`, and `reset-offset` for a group's offsets.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use client::{
    Admin, ClientConfig, ConsumeFrom, Message, MessageExt, MessageQueue, Producer, PullConsumer,
    PullOptions, PullStatus, QueueOffset, SendResult,
};
use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

use crate::output::{Body, Lines, Output, Render};

/// Where `consume` starts in each queue, and what `reset-offset` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    First,
    Last,
    Timestamp(i64),
}

impl StartFrom {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s.trim() {
            "first" => Ok(Self::First),
            // RocketMQ's resetOffsetByTime -s now: the offset at this moment, the last one.
            "last" | "now" => Ok(Self::Last),
            other => other
                .parse::<i64>()
                .map(Self::Timestamp)
                .map_err(|_| anyhow!("expected first, last, now or a timestamp in ms, got {s:?}")),
        }
    }
}

/// `send`'s answer: where the message was stored.
#[derive(Debug, Serialize)]
pub struct Sent {
    msg_id: String,
    offset_msg_id: String,
    topic: String,
    broker_name: String,
    queue_id: u32,
    queue_offset: u64,
}

impl From<SendResult> for Sent {
    fn from(r: SendResult) -> Self {
        Self {
            msg_id: r.msg_id,
            offset_msg_id: r.offset_msg_id,
            topic: r.topic,
            broker_name: r.broker_name,
            queue_id: r.queue_id,
            queue_offset: r.queue_offset.0,
        }
    }
}

impl Render for Sent {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "msg_id={} offset_msg_id={} topic={} broker={} queue={} offset={}",
            self.msg_id,
            self.offset_msg_id,
            self.topic,
            self.broker_name,
            self.queue_id,
            self.queue_offset
        )
    }
}

/// What `send` sends, and where.
pub struct SendArgs {
    pub body: String,
    /// Space or comma separated.
    pub keys: Option<String>,
    pub tag: Option<String>,
    /// A queue id, on the first broker that has it or on `broker_name`.
    pub queue: Option<u32>,
    pub broker_name: Option<String>,
}

pub fn send(ns: &str, topic: &str, args: SendArgs) -> anyhow::Result<Sent> {
    let producer = Producer::builder().namesrv(ns).group("mqadmin").build()?;
    let mut msg = Message::new(topic, args.body.into_bytes());
    if let Some(keys) = args.keys {
        msg = msg.with_keys(
            keys.split([' ', ','])
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
        );
    }
    if let Some(tag) = args.tag {
        msg = msg.with_tags(tag);
    }
    let result = match args.queue {
        None => producer.send(msg)?,
        Some(queue_id) => {
            let queues = producer.write_queues(topic)?;
            let mq = queues
                .into_iter()
                .find(|q| {
                    q.queue_id == queue_id
                        && args
                            .broker_name
                            .as_ref()
                            .is_none_or(|b| *b == q.broker_name)
                })
                .ok_or_else(|| anyhow!("topic {topic} has no writable queue {queue_id}"))?;
            producer.send_to_queue(msg, &mq)?
        }
    };
    Ok(Sent::from(result))
}

/// A consumed message, as `consume` prints it: one line each.
#[derive(Debug, Serialize)]
pub struct Consumed<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    msg_id: &'a str,
    keys: &'a [String],
    tags: Option<&'a str>,
    reconsume_times: i32,
    #[serde(flatten)]
    body: Body<'a>,
}

impl<'a> From<&'a MessageExt> for Consumed<'a> {
    fn from(m: &'a MessageExt) -> Self {
        Self {
            topic: &m.topic,
            queue_id: m.queue_id,
            queue_offset: m.queue_offset.0,
            msg_id: &m.msg_id,
            keys: &m.keys,
            tags: m.tags.as_deref(),
            reconsume_times: m.reconsume_times,
            body: Body(&m.body),
        }
    }
}

impl Render for Consumed<'_> {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "topic={} queue={} offset={} msg_id={} keys={} tags={} body={}",
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.msg_id,
            self.keys.join(","),
            self.tags.unwrap_or(""),
            self.body.lossy()
        )
    }
}

pub struct ConsumeArgs {
    pub from: StartFrom,
    pub tag_expr: String,
    /// A SQL92 filter the broker applies on top of the tags.
    pub sql92: Option<String>,
    pub max: Option<u64>,
    pub idle_timeout: Duration,
    /// Messages stored at or after this time (ms) are not printed, and their queue is done.
    pub until_ms: Option<i64>,
}

/// Pause between rounds that found nothing new.
const IDLE_POLL_MS: u64 = 200;

/// Reads every queue of `topic` and emits each message as it arrives, until `max` messages
/// or `idle_timeout` with nothing new.
pub fn consume(
    ns: &str,
    out: &mut Output,
    topic: &str,
    group: &str,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    let consumer = PullConsumer::with_config(ClientConfig::new(ns)?, group)?;
    let queues = consumer.queues(topic)?;
    if queues.is_empty() {
        bail!("topic {topic} has no readable queue");
    }
    let mut cursors: Vec<(MessageQueue, QueueOffset)> = Vec::with_capacity(queues.len());
    for q in queues {
        let start = match args.from {
            StartFrom::First => consumer.min_offset(&q),
            StartFrom::Last => consumer.max_offset(&q),
            StartFrom::Timestamp(ms) => consumer.search_offset(&q, ms),
        }
        .with_context(|| format!("finding the start offset of {q}"))?;
        cursors.push((q, start));
    }
    let opts = PullOptions {
        tag_expression: args.tag_expr.clone(),
        sql92: args.sql92.clone(),
        ..PullOptions::default()
    };
    let mut printed: u64 = 0;
    let mut last_progress = Instant::now();
    // Queues past `until_ms`.
    let mut done = vec![false; cursors.len()];
    loop {
        let mut progressed = false;
        for ((queue, offset), done) in cursors.iter_mut().zip(done.iter_mut()) {
            // Drain this queue before moving on, so its messages print in order together.
            while !*done {
                let result = consumer
                    .pull(queue, *offset, &opts)
                    .with_context(|| format!("pulling {queue} at offset {offset}"))?;
                let moved = result.next_offset != *offset;
                for m in &result.messages {
                    if args.max.is_some_and(|max| printed >= max) {
                        return Ok(());
                    }
                    if args.until_ms.is_some_and(|end| m.store_timestamp_ms >= end) {
                        *done = true;
                        break;
                    }
                    out.emit(&Consumed::from(m))?;
                    printed += 1;
                }
                *offset = result.next_offset;
                if moved {
                    progressed = true;
                }
                if result.status != PullStatus::Found || !moved {
                    break;
                }
            }
        }
        if args.max.is_some_and(|max| printed >= max) {
            return Ok(());
        }
        if progressed {
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= args.idle_timeout {
            return Ok(());
        } else {
            std::thread::sleep(Duration::from_millis(IDLE_POLL_MS));
        }
    }
}

/// A queue's new offset for the group, after `reset-offset`.
#[derive(Debug)]
pub struct OffsetReset {
    queue: MessageQueue,
    offset: QueueOffset,
}

impl Serialize for OffsetReset {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut row = s.serialize_struct("OffsetReset", 3)?;
        row.serialize_field("broker", &self.queue.broker_name)?;
        row.serialize_field("queue_id", &self.queue.queue_id)?;
        row.serialize_field("offset", &self.offset.0)?;
        row.end()
    }
}

impl Render for OffsetReset {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "{} -> {}", self.queue, self.offset)
    }
}

pub fn reset_offset(
    ns: &str,
    group: &str,
    topic: &str,
    to: StartFrom,
) -> anyhow::Result<Lines<OffsetReset>> {
    let to = match to {
        StartFrom::First => ConsumeFrom::First,
        StartFrom::Last => ConsumeFrom::Last,
        StartFrom::Timestamp(ms) => ConsumeFrom::Timestamp(ms),
    };
    let rows = Admin::new(ns)?.reset_offset(group, topic, to)?;
    Ok(Lines(
        rows.into_iter()
            .map(|(queue, offset)| OffsetReset { queue, offset })
            .collect(),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::output::{render, Format};
    use client::CommitLogOffset;
    use serde_json::{json, Value};

    pub fn sample(body: &[u8]) -> MessageExt {
        MessageExt {
            topic: "T".into(),
            queue_id: 2,
            queue_offset: QueueOffset(7),
            commit_log_offset: CommitLogOffset(100),
            msg_id: "ID".into(),
            offset_msg_id: "OFF".into(),
            tags: Some("TagA".into()),
            keys: vec!["k1".into(), "k2".into()],
            body: body.to_vec().into(),
            properties: vec![("shop".into(), "north".into())],
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: 0,
            born_host: "127.0.0.1:1".parse().unwrap(),
            store_timestamp_ms: 0,
            store_host: "127.0.0.1:2".parse().unwrap(),
            reconsume_times: 0,
            store_size: 0,
        }
    }

    fn text(r: &impl Render) -> String {
        String::from_utf8(render(Format::Text, r).unwrap()).unwrap()
    }

    fn json(r: &impl Render) -> Value {
        serde_json::from_slice(&render(Format::Json, r).unwrap()).unwrap()
    }

    #[test]
    fn start_positions() {
        assert_eq!(StartFrom::parse("first").unwrap(), StartFrom::First);
        assert_eq!(StartFrom::parse("last").unwrap(), StartFrom::Last);
        assert_eq!(
            StartFrom::parse("1700000000000").unwrap(),
            StartFrom::Timestamp(1_700_000_000_000)
        );
        assert!(StartFrom::parse("yesterday").is_err());
    }

    #[test]
    fn message_lines() {
        let m = sample(b"hello");
        assert_eq!(
            text(&Consumed::from(&m)),
            "topic=T queue=2 offset=7 msg_id=ID keys=k1,k2 tags=TagA body=hello\n"
        );
        let v = json(&Consumed::from(&m));
        assert_eq!(v["body"], "hello");
        assert_eq!(v["queue_offset"], 7);
        assert_eq!(v["keys"], json!(["k1", "k2"]));
        assert_eq!(v["reconsume_times"], 0);
        assert!(v.get("body_encoding").is_none());
        let bin = sample(&[0xff, 0x00, 0xfe]);
        let v = json(&Consumed::from(&bin));
        assert_eq!(v["body_encoding"], "base64");
        assert_eq!(v["body"], "/wD+");
    }

    #[test]
    fn reset_rows_name_the_queue() {
        let rows = Lines(vec![OffsetReset {
            queue: MessageQueue {
                topic: "T".into(),
                broker_name: "b1".into(),
                queue_id: 3,
            },
            offset: QueueOffset(42),
        }]);
        assert_eq!(text(&rows), "T@b1#3 -> 42\n");
        assert_eq!(
            json(&rows),
            json!({"broker": "b1", "queue_id": 3, "offset": 42})
        );
    }

    #[test]
    fn a_sent_message_is_one_line() {
        let sent = Sent {
            msg_id: "M".into(),
            offset_msg_id: "O".into(),
            topic: "T".into(),
            broker_name: "b1".into(),
            queue_id: 1,
            queue_offset: 9,
        };
        assert_eq!(
            text(&sent),
            "msg_id=M offset_msg_id=O topic=T broker=b1 queue=1 offset=9\n"
        );
        assert_eq!(json(&sent)["queue_offset"], 9);
    }
}
