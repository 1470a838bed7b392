//! Message queries: by key, by id, by queue offset, and the queue offset at a time.

use anyhow::{anyhow, bail};
use base64::Engine;
use client::{Admin, MessageExt, MessageQueue, QueueOffset};
use message::MsgOffsetId;
use serde_json::json;

/// Puts the body in a JSON object: as UTF-8 text when it is, else base64 with
/// `"body_encoding": "base64"`.
pub fn put_body(out: &mut serde_json::Value, body: &[u8]) {
    match std::str::from_utf8(body) {
        Ok(s) => out["body"] = json!(s),
        Err(_) => {
            out["body"] = json!(base64::engine::general_purpose::STANDARD.encode(body));
            out["body_encoding"] = json!("base64");
        }
    }
}

/// The whole message: every property, keys, tags, times, hosts and the body.
pub fn full_message(m: &MessageExt, json: bool) -> String {
    if json {
        let props: serde_json::Map<String, serde_json::Value> = m
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let mut out = json!({
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset.0,
            "commit_log_offset": m.commit_log_offset.0,
            "msg_id": m.msg_id,
            "offset_msg_id": m.offset_msg_id,
            "keys": m.keys,
            "tags": m.tags,
            "born_timestamp_ms": m.born_timestamp_ms,
            "store_timestamp_ms": m.store_timestamp_ms,
            "born_host": m.born_host.to_string(),
            "store_host": m.store_host.to_string(),
            "reconsume_times": m.reconsume_times,
            "store_size": m.store_size,
            "properties": props,
        });
        put_body(&mut out, &m.body);
        out.to_string()
    } else {
        let props: Vec<String> = m
            .properties
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "msg_id:            {}\noffset_msg_id:     {}\ntopic:             {}\nqueue:             {}\nqueue_offset:      {}\ncommit_log_offset: {}\ntags:              {}\nkeys:              {}\nborn:              {} ms from {}\nstored:            {} ms on {}\nreconsume_times:   {}\nstore_size:        {} bytes\nproperties:        {}\nbody:              {}\n",
            m.msg_id,
            m.offset_msg_id,
            m.topic,
            m.queue_id,
            m.queue_offset,
            m.commit_log_offset.0,
            m.tags.as_deref().unwrap_or(""),
            m.keys.join(" "),
            m.born_timestamp_ms,
            m.born_host,
            m.store_timestamp_ms,
            m.store_host,
            m.reconsume_times,
            m.store_size,
            props.join(" "),
            String::from_utf8_lossy(&m.body)
        )
    }
}

fn print_all(msgs: &[MessageExt], json: bool) {
    for m in msgs {
        println!("{}", full_message(m, json));
    }
}

pub fn by_key(
    ns: &str,
    json: bool,
    topic: &str,
    key: &str,
    begin_ms: i64,
    end_ms: i64,
    max: u32,
) -> anyhow::Result<()> {
    let msgs = Admin::new(ns)?.query_by_key(topic, key, begin_ms, end_ms, max)?;
    if msgs.is_empty() {
        bail!("no message of topic `{topic}` has key `{key}` in that time range");
    }
    print_all(&msgs, json);
    Ok(())
}

/// An offset id (offsetMsgId) is looked up on the broker that stored it; a unique key
/// (UNIQ_KEY, the producer's msg id) through the IndexFile of the topic given with -t.
pub fn by_id(ns: &str, json: bool, id: &str, topic: Option<&str>) -> anyhow::Result<()> {
    let admin = Admin::new(ns)?;
    if let Some(topic) = topic {
        let msgs: Vec<MessageExt> = admin
            .query_by_key(topic, id, 0, i64::MAX, 32)?
            .into_iter()
            .filter(|m| m.msg_id == id)
            .collect();
        if !msgs.is_empty() {
            print_all(&msgs, json);
            return Ok(());
        }
    }
    if let Some(offset_id) = MsgOffsetId::parse(id) {
        if let Ok(Some(m)) = admin.view_by_offset_id(&offset_id) {
            print_all(&[m], json);
            return Ok(());
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
    json: bool,
    topic: &str,
    queue_id: u32,
    offset: u64,
    broker: Option<&str>,
) -> anyhow::Result<()> {
    let admin = Admin::new(ns)?;
    let q = queue_of(&admin, topic, queue_id, broker)?;
    match admin.query_by_offset(&q, QueueOffset(offset))? {
        Some(m) => {
            print_all(&[m], json);
            Ok(())
        }
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
    json: bool,
    topic: &str,
    queue_id: u32,
    time_ms: i64,
    broker: Option<&str>,
) -> anyhow::Result<()> {
    let admin = Admin::new(ns)?;
    let q = queue_of(&admin, topic, queue_id, broker)?;
    let off = admin.search_offset(&q, time_ms)?;
    if json {
        println!(
            "{}",
            json!({"topic": topic, "queue_id": queue_id, "time_ms": time_ms, "offset": off.0})
        );
    } else {
        println!("{off}");
    }
    Ok(())
}
