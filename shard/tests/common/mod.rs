#![allow(dead_code)]

use std::path::Path;

use message::{encode_record, MessageFields, TagFilter};
use shard::{FlushPolicy, ReadRequest, ReadResult, Shard, ShardConfig};

pub const TOPIC: &str = "TopicTest";

/// A config with tiny segments and files so roll-over and retention are exercised.
pub fn small_config(dir: &Path) -> ShardConfig {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.segment_size_bytes = 64 << 10;
    c.write_chunk_bytes = 16 << 10;
    c.hot_bytes_max = 32 << 10;
    c.message_size_max_bytes = 16 << 10;
    c.flush = FlushPolicy::Sync;
    c.consume_queue_file_entries = 32;
    c.index_file_slots = 64;
    c.index_file_entries = 128;
    c.retention_check_interval_ms = 3_600_000;
    c
}

pub fn record(topic: &str, body: &[u8], tag: Option<&str>, keys: Option<&str>) -> Vec<u8> {
    let mut props = Vec::new();
    if let Some(t) = tag {
        props.push(("TAGS", t));
    }
    if let Some(k) = keys {
        props.push(("KEYS", k));
    }
    let mut out = Vec::new();
    encode_record(
        &MessageFields {
            topic,
            body,
            born_timestamp_ms: 1,
            properties: &props,
            ..Default::default()
        },
        &mut out,
    )
    .unwrap();
    out
}

pub fn body(i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("message-{i}-").into_bytes();
    b.resize(len.max(b.len()), b'a' + (i % 26) as u8);
    b
}

pub async fn read_all(
    shard: &Shard,
    topic: &str,
    queue_id: u32,
    filter: &TagFilter,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut q = shard.queue_offsets(topic, queue_id).min;
    loop {
        let r: ReadResult = shard
            .read(&ReadRequest {
                topic,
                queue_id,
                queue_offset: q,
                max_messages: 32,
                max_bytes: 1 << 20,
                filter,
            })
            .await
            .unwrap();
        for s in &r.records {
            out.push(s.as_bytes().to_vec());
        }
        if r.next_queue_offset == q || r.next_queue_offset >= r.max_offset && r.records.is_empty() {
            break;
        }
        q = r.next_queue_offset;
        if q >= r.max_offset {
            break;
        }
    }
    out
}

/// The bodies of every record in queues `0..queues` of `topic`, sorted.
pub async fn all_bodies_sorted(shard: &Shard, topic: &str, queues: u32) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for q in 0..queues {
        got.extend(bodies_of(&read_all(shard, topic, q, &TagFilter::All).await));
    }
    got.sort();
    got
}

pub fn bodies_of(records: &[Vec<u8>]) -> Vec<Vec<u8>> {
    records
        .iter()
        .map(|r| message::RecordView::parse(r).unwrap().body().to_vec())
        .collect()
}
