#![allow(dead_code)]

use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use message::{encode_record, MessageFields, TagFilter};
use shard::{
    AppendResult, FaultInjector, FlushPolicy, ReadRequest, ReadResult, Shard, ShardConfig,
    ShardError,
};

#[allow(unused_imports)]
pub use shard::{CommitLogOffset, QueueOffset};

pub const TOPIC: &str = "TopicTest";

/// A config with tiny segments and files so roll-over and retention are exercised.
pub fn small_config(dir: &Path) -> ShardConfig {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.segment_bytes = 64 << 10;
    c.write_chunk_bytes = 16 << 10;
    c.hot_bytes_max = 32 << 10;
    c.message_bytes_max = 16 << 10;
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

/// Reads queues `0..queues` of [`TOPIC`] from their start up to `total` messages each, a
/// window of `window` messages at a time and the queues taking turns, as a consumer of each
/// would; returns each queue's records in order.
pub async fn read_in_turns(
    shard: &Shard,
    queues: u32,
    total: u64,
    window: u32,
) -> Vec<Vec<Vec<u8>>> {
    let mut next = vec![0u64; queues as usize];
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); queues as usize];
    let mut pulls = 0;
    while next.iter().any(|&n| n < total) {
        for q in 0..queues as usize {
            if next[q] >= total {
                continue;
            }
            let r = shard
                .read(&ReadRequest {
                    topic: TOPIC,
                    queue_id: q as u32,
                    queue_offset: QueueOffset(next[q]),
                    max_messages: window,
                    max_bytes: 1 << 20,
                    filter: &TagFilter::All,
                })
                .await
                .unwrap();
            assert!(
                !r.records.is_empty(),
                "queue {q} at {} read nothing",
                next[q]
            );
            got[q].extend(r.records.iter().map(|s| s.as_bytes().to_vec()));
            next[q] = r.next_queue_offset.into();
            pulls += 1;
        }
        assert!(pulls < 10_000, "reads do not advance");
    }
    got
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

/// [`small_config`] with 4 MiB segments where nothing stays in memory after its write:
/// reads come from the segment files.
pub fn cold_config(dir: &Path) -> ShardConfig {
    let mut c = small_config(dir);
    c.segment_bytes = 4 << 20;
    c.hot_bytes_max = 0;
    c.consume_queue_file_entries = 4096;
    c
}

/// Appends `rounds` rounds of one batch of `batch` records (bodies of 900-1099 bytes) to
/// each of queues `0..queues` in turn, so the queues lie interleaved in the log. Returns
/// each queue's bodies in order and the bytes of its records.
pub async fn append_interleaved(
    shard: &Shard,
    queues: u32,
    rounds: usize,
    batch: usize,
) -> (Vec<Vec<Vec<u8>>>, Vec<u64>) {
    let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); queues as usize];
    let mut queue_bytes = vec![0u64; queues as usize];
    let mut i = 0;
    for _round in 0..rounds {
        for q in 0..queues {
            let mut records = Vec::new();
            for _ in 0..batch {
                let b = body(i, 900 + (i * 37) % 200);
                let r = record(TOPIC, &b, None, None);
                queue_bytes[q as usize] += r.len() as u64;
                records.extend(r);
                expected[q as usize].push(b);
                i += 1;
            }
            shard.append(TOPIC, q, &records).await.unwrap();
        }
    }
    (expected, queue_bytes)
}

/// One batch of `n` records numbered on from `*i` (advanced past them), with bodies of
/// `size(number)` bytes, whose bodies are also pushed onto `expected`.
pub fn numbered_batch(
    i: &mut usize,
    n: usize,
    size: impl Fn(usize) -> usize,
    expected: &mut Vec<Vec<u8>>,
) -> Vec<u8> {
    let mut batch = Vec::new();
    for _ in 0..n {
        let b = body(*i, size(*i));
        batch.extend(record(TOPIC, &b, None, None));
        expected.push(b);
        *i += 1;
    }
    batch
}

/// `c` with a new fault injector in its storage seam, and that injector.
pub fn with_faults(mut c: ShardConfig) -> (ShardConfig, Arc<FaultInjector>) {
    let faults = Arc::new(FaultInjector::default());
    c.faults = Some(faults.clone());
    (c, faults)
}

/// Appends one record of `body` (no tag, no key) to queue `queue_id` of [`TOPIC`].
pub async fn append_one(
    shard: &Shard,
    queue_id: u32,
    body: &[u8],
) -> Result<AppendResult, ShardError> {
    shard
        .append(TOPIC, queue_id, &record(TOPIC, body, None, None))
        .await
}

/// Appends the records numbered `numbers` (bodies of `len` bytes) to queue 0 one by one,
/// each acknowledged; returns their bodies.
pub async fn append_numbered(shard: &Shard, numbers: Range<usize>, len: usize) -> Vec<Vec<u8>> {
    let mut acked = Vec::new();
    for i in numbers {
        let b = body(i, len);
        append_one(shard, 0, &b).await.unwrap();
        acked.push(b);
    }
    acked
}

/// The bodies of every record in queue `queue_id` of [`TOPIC`], in order.
pub async fn queue_bodies(shard: &Shard, queue_id: u32) -> Vec<Vec<u8>> {
    bodies_of(&read_all(shard, TOPIC, queue_id, &TagFilter::All).await)
}

/// Polls `cond` every `every` until it holds or `within` has passed; says whether it held.
pub async fn eventually(within: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        glommio::timer::sleep(every).await;
    }
}

/// Appends the records numbered `numbers` (bodies of `len` bytes, keyed `k<number>` when
/// `keyed`) to queue 0, calling `before(number)` ahead of each; returns their commit-log
/// offsets.
pub async fn append_numbered_offsets(
    shard: &Shard,
    numbers: Range<usize>,
    len: usize,
    keyed: bool,
    mut before: impl FnMut(usize),
) -> Vec<u64> {
    let mut offsets = Vec::new();
    for i in numbers {
        before(i);
        let key = keyed.then(|| format!("k{i}"));
        let r = shard
            .append(
                TOPIC,
                0,
                &record(TOPIC, &body(i, len), None, key.as_deref()),
            )
            .await
            .unwrap();
        offsets.push(r.first_commit_log_offset.0);
    }
    offsets
}

/// Runs `test` on a local executor, given the path of a new temporary directory that is
/// removed afterwards.
pub fn in_temp_dir<Fut, T>(test: impl FnOnce(PathBuf) -> Fut + Send + 'static) -> T
where
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    shard::run_local(move || test(p))
}
