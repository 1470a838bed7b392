//! What idempotent sends cost per message, in-process, on one thread: finding each message's
//! `UNIQ_KEY` and hashing it (`dedup::keys_of`, once per send), and claiming and settling the
//! keys in a full window of 1,000,000 (`Window::claim_all_at`, `Window::settle_all_at`: each
//! new key pushes the oldest out). Batches of 64 records of 1 KiB with the properties
//! RocketMQ's producers send (TAGS, UNIQ_KEY, WAIT), reused from cache as a send's batch
//! is, just read.
//!
//! `cargo bench -p broker-core --bench dedup` (BENCH_ROUNDS=n, default 5). Prints each
//! round and the median, in nanoseconds per message.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use broker_core::dedup::{keys_of, Key, Original, Settling, TopicKeys, Window, WindowLimits};
use message::offsets::{CommitLogOffset, QueueOffset};
use message::{encode_record, MessageFields};

const TOPIC: &str = "DedupBench";
const BATCH: usize = 64;
const WINDOW_KEYS: usize = 1_000_000;

fn uniq_key(n: u64) -> String {
    // The shape of a RocketMQ message id: IP, PID, class loader hash, time and counter.
    format!("7F0000010001{n:020X}")
}

fn batch(first: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for n in first..first + BATCH as u64 {
        let key = uniq_key(n);
        let fields = MessageFields {
            topic: TOPIC,
            body,
            born_timestamp_ms: 1,
            properties: &[("TAGS", "TagA"), ("UNIQ_KEY", &key), ("WAIT", "true")],
            ..Default::default()
        };
        if let Err(e) = encode_record(&fields, &mut out) {
            panic!("cannot encode a record: {e}");
        }
    }
    out
}

/// What a send does in its keys' window: claims them, then settles each as stored.
fn claim_and_settle(window: &mut Window, keys: &[Key], now: i64) {
    let claimed = window.claim_all_at(keys, now);
    let stored = Original {
        shard: 0,
        queue_id: 0,
        queue_offset: QueueOffset(0),
        commit_log_offset: CommitLogOffset(0),
        store_timestamp_ms: now,
        store_host: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 10911),
    };
    let settling: Vec<Settling> = keys
        .iter()
        .zip(&claimed)
        .map(|(k, (_, seq))| (*k, Some(*seq), Some(stored)))
        .collect();
    window.settle_all_at(&settling, now);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let body = vec![7u8; 1024];
    // Four batches (280 KiB) taken in turn: in cache, as a batch just read from its socket is.
    let batches: Vec<Vec<u8>> = (0..4).map(|b| batch(b * BATCH as u64, &body)).collect();
    const SENDS: usize = 5_000;

    let mut window = Window::new(WindowLimits {
        window_ms: i64::MAX / 2,
        keys_max: WINDOW_KEYS,
        bytes_max: usize::MAX,
    });
    let keys = TopicKeys::new(TOPIC);
    let mut next = 0u64;
    let mut new_keys = || -> Vec<Key> {
        let chunk: Vec<Key> = (next..next + BATCH as u64)
            .map(|n| keys.key(&uniq_key(n)))
            .collect();
        next += BATCH as u64;
        chunk
    };
    // Fill the window, so that every claim below pushes the oldest key out.
    for i in 0..WINDOW_KEYS / BATCH + 1 {
        claim_and_settle(&mut window, &new_keys(), i as i64);
    }

    let (mut find_ns, mut claim_ns) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let t = Instant::now();
        for b in batches.iter().cycle().take(SENDS) {
            black_box(keys_of(TOPIC, black_box(b), BATCH as u32));
        }
        let find = t.elapsed().as_nanos() as f64 / (SENDS * BATCH) as f64;

        // New keys, hashed beforehand: only the window's work is timed.
        let chunks: Vec<Vec<Key>> = (0..SENDS).map(|_| new_keys()).collect();
        let t = Instant::now();
        for (i, chunk) in chunks.iter().enumerate() {
            claim_and_settle(&mut window, chunk, (WINDOW_KEYS + round * SENDS + i) as i64);
        }
        let claim = t.elapsed().as_nanos() as f64 / (SENDS * BATCH) as f64;
        println!(
            "round {round}: keys_of {find:.1} ns/message, claim + settle {claim:.1} ns/message"
        );
        find_ns.push(find);
        claim_ns.push(claim);
    }
    println!(
        "median over {rounds} rounds: keys_of {:.1} ns/message, claim + settle {:.1} ns/message",
        median(&mut find_ns),
        median(&mut claim_ns)
    );
}
