//! Message queries: by key, by id, by queue offset, and the queue offset at a time.

use std::io::{self, Write};
use std::net::SocketAddrV4;

use anyhow::{anyhow, bail};
use client::{Admin, MessageExt, MessageQueue, QueueOffset};
use message::MsgOffsetId;
use serde::Serialize;

use crate::output::{Body, Lines, Properties, Render};

/// The whole message: every property, keys, tags, times, hosts and the body.
#[derive(Debug, Serialize)]
pub struct FullMessage<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    commit_log_offset: u64,
    msg_id: &'a str,
    offset_msg_id: &'a str,
    keys: &'a [String],
    tags: Option<&'a str>,
    born_timestamp_ms: i64,
    store_timestamp_ms: i64,
    born_host: SocketAddrV4,
    store_host: SocketAddrV4,
    reconsume_times: i32,
    store_size: usize,
    properties: Properties<'a>,
    #[serde(flatten)]
    body: Body<'a>,
}

impl<'a> From<&'a MessageExt> for FullMessage<'a> {
    fn from(m: &'a MessageExt) -> Self {
        Self {
            topic: &m.topic,
            queue_id: m.queue_id,
            queue_offset: m.queue_offset.0,
            commit_log_offset: m.commit_log_offset.0,
            msg_id: &m.msg_id,
            offset_msg_id: &m.offset_msg_id,
            keys: &m.keys,
            tags: m.tags.as_deref(),
            born_timestamp_ms: m.born_timestamp_ms,
            store_timestamp_ms: m.store_timestamp_ms,
            born_host: m.born_host,
            store_host: m.store_host,
            reconsume_times: m.reconsume_times,
            store_size: m.store_size,
            properties: Properties(&m.properties),
            body: Body(&m.body),
        }
    }
}

impl Render for FullMessage<'_> {
    /// One `name: value` line per field, and a blank line after the message.
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        let props: Vec<String> = self
            .properties
            .0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(w, "msg_id:            {}", self.msg_id)?;
        writeln!(w, "offset_msg_id:     {}", self.offset_msg_id)?;
        writeln!(w, "topic:             {}", self.topic)?;
        writeln!(w, "queue:             {}", self.queue_id)?;
        writeln!(w, "queue_offset:      {}", self.queue_offset)?;
        writeln!(w, "commit_log_offset: {}", self.commit_log_offset)?;
        writeln!(w, "tags:              {}", self.tags.unwrap_or(""))?;
        writeln!(w, "keys:              {}", self.keys.join(" "))?;
        writeln!(
            w,
            "born:              {} from {}",
            crate::output::time_text(self.born_timestamp_ms),
            self.born_host
        )?;
        writeln!(
            w,
            "stored:            {} on {}",
            crate::output::time_text(self.store_timestamp_ms),
            self.store_host
        )?;
        writeln!(w, "reconsume_times:   {}", self.reconsume_times)?;
        writeln!(w, "store_size:        {} bytes", self.store_size)?;
        writeln!(w, "properties:        {}", props.join(" "))?;
        writeln!(w, "body:              {}", self.body.lossy())?;
        writeln!(w)
    }
}

/// Messages found by a query: one JSON line, or one block of text, each.
pub fn messages(msgs: &[MessageExt]) -> Lines<FullMessage<'_>> {
    Lines(msgs.iter().map(FullMessage::from).collect())
}

/// `search-offset`'s answer: the first queue offset stored at or after a time.
#[derive(Debug, Serialize)]
pub struct OffsetAt {
    topic: String,
    queue_id: u32,
    time_ms: i64,
    offset: u64,
}

impl Render for OffsetAt {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "{}", self.offset)
    }
}

pub fn by_key(
    ns: &str,
    topic: &str,
    key: &str,
    begin_ms: i64,
    end_ms: i64,
    max: u32,
) -> anyhow::Result<Vec<MessageExt>> {
    let msgs = Admin::new(ns)?.query_by_key(topic, key, begin_ms, end_ms, max)?;
    if msgs.is_empty() {
        bail!("no message of topic `{topic}` has key `{key}` in that time range");
    }
    Ok(msgs)
}

/// An offset id (offsetMsgId) is looked up on the broker that stored it; a unique key
/// (UNIQ_KEY, the producer's msg id) through the IndexFile of the topic given with -t.
pub fn by_id(ns: &str, id: &str, topic: Option<&str>) -> anyhow::Result<Vec<MessageExt>> {
    let admin = Admin::new(ns)?;
    if let Some(topic) = topic {
        let msgs: Vec<MessageExt> = admin
            .query_by_key(topic, id, 0, i64::MAX, 32)?
            .into_iter()
            .filter(|m| m.msg_id == id)
            .collect();
        if !msgs.is_empty() {
            return Ok(msgs);
        }
    }
    if let Some(offset_id) = MsgOffsetId::parse(id) {
        if let Ok(Some(m)) = admin.view_by_offset_id(&offset_id) {
            return Ok(vec![m]);
        }
    }
    match topic {
        Some(t) => bail!("no message with id `{id}` in topic `{t}`"),
        None => bail!("no message with offset id `{id}`; for a producer's msg id (UNIQ_KEY) give its topic with -t"),
    }
}

fn queue_of(
    admin: &Admin,
    topic: &str,
    queue_id: u32,
    broker: Option<&str>,
) -> anyhow::Result<MessageQueue> {
    let route = admin.topic_route(topic)?;
    route
        .read_queues()
        .iter()
        .map(|t| t.queue.clone())
        .find(|q| q.queue_id == queue_id && broker.is_none_or(|b| b == q.broker_name))
        .ok_or_else(|| anyhow!("topic `{topic}` has no queue {queue_id}"))
}

pub fn by_offset(
    ns: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    broker: Option<&str>,
) -> anyhow::Result<Vec<MessageExt>> {
    let admin = Admin::new(ns)?;
    let q = queue_of(&admin, topic, queue_id, broker)?;
    match admin.query_by_offset(&q, QueueOffset(offset))? {
        Some(m) => Ok(vec![m]),
        None => {
            let (min, max) = admin.queue_offsets(&q)?;
            bail!(
                "no message at offset {offset} of {q} (it holds offsets {min} to {})",
                max.0.saturating_sub(1)
            )
        }
    }
}

pub fn search_offset(
    ns: &str,
    topic: &str,
    queue_id: u32,
    time_ms: i64,
    broker: Option<&str>,
) -> anyhow::Result<OffsetAt> {
    let admin = Admin::new(ns)?;
    let q = queue_of(&admin, topic, queue_id, broker)?;
    let offset = admin.search_offset(&q, time_ms)?;
    Ok(OffsetAt {
        topic: topic.to_owned(),
        queue_id,
        time_ms,
        offset: offset.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::tests::sample;
    use crate::output::{render, Format};
    use serde_json::Value;

    #[test]
    fn a_found_message_prints_every_field() {
        let found = [sample(b"hi"), sample(&[0xff])];
        let json = String::from_utf8(render(Format::Json, &messages(&found)).unwrap()).unwrap();
        let lines: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["body"], "hi");
        assert_eq!(lines[0]["properties"]["shop"], "north");
        assert_eq!(lines[0]["born_host"], "127.0.0.1:1");
        assert_eq!(lines[0]["commit_log_offset"], 100);
        assert_eq!(lines[1]["body_encoding"], "base64");
        let text =
            String::from_utf8(render(Format::Text, &messages(&found[..1])).unwrap()).unwrap();
        assert!(text.starts_with("msg_id:            ID\n"), "{text}");
        assert!(text.contains("\nproperties:        shop=north\n"), "{text}");
        assert!(text.ends_with("body:              hi\n\n"), "{text}");
    }
}
