//! Memory taken by large batches is given back once they are stored: after bursts of
//! 12 MB or 6 MB batches the broker's anonymous memory returns near where it was, beyond what its
//! profile keeps on purpose (the hot ring of recent log).

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use client::Message;
use integration::{create_topic, producer, Cluster};

/// RssAnon of `pid` in MiB: the process's private anonymous memory (the tail ring is
/// shared memory and counts elsewhere).
fn rss_anon_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib >> 10
}

const MESSAGE_BYTES: usize = 1 << 20;
const SENDERS: usize = 8;
const BATCHES_EACH: usize = 4;
const BURSTS: usize = 3;

/// One SEND_BATCH_MESSAGE of `messages` 1 MiB messages in RocketMQ's remoting protocol, as a
/// Java producer sends it; panics unless it is stored.
fn send_big_batch(addr: &str, topic: &str, queue_id: u32, messages: usize, fill: u8) {
    let messages: Vec<remoting::message::BatchMessage> = (0..messages)
        .map(|i| remoting::message::BatchMessage {
            flag: 0,
            body: bytes::Bytes::from(vec![fill.wrapping_add(i as u8); MESSAGE_BYTES]),
            properties: String::new(),
        })
        .collect();
    let body = remoting::message::encode_batch(&messages).unwrap();
    let mut cmd =
        remoting::RemotingCommand::request(remoting::codes::request::SEND_BATCH_MESSAGE, 1);
    let queue = queue_id.to_string();
    for (k, v) in [
        ("a", "rmq-producer"),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", queue.as_str()),
        ("f", "0"),
        ("g", "0"),
        ("h", "0"),
        ("j", "0"),
        ("k", "false"),
        ("m", "true"),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    // SYSTEM_BUSY (the disk is behind) is retried, as a producer does.
    for _ in 0..600 {
        let answer = integration::remoting_call(addr, &cmd, &body);
        match answer.command.code {
            0 => return,
            remoting::codes::response::SYSTEM_BUSY => {
                std::thread::sleep(Duration::from_millis(50));
            }
            code => panic!("batch refused ({code}): {:?}", answer.command.remark),
        }
    }
    panic!("the broker stayed busy for 30 s");
}

/// 12 MB batches: their copies are mappings of their own (`OWN_MAPPING_BYTES_MIN`).
#[test]
fn memory_taken_by_12_mb_batches_is_given_back() {
    large_batches_leave_little_behind(12);
}

/// 6 MB batches: their copies are on the heap, trimmed once the sends pause
/// (`give_back_heap`).
#[test]
fn memory_taken_by_6_mb_batches_is_given_back() {
    large_batches_leave_little_behind(6);
}

fn large_batches_leave_little_behind(batch_messages: usize) {
    // A hot ring of 16 MiB per shard: what the broker keeps of recent log on purpose is
    // small, so what stays beyond it is memory nothing needs.
    let c = Cluster::start_with(2, "throughput", |o| {
        o.config_toml = Some("hot_bytes_max = 16777216\n".into())
    });
    let pid = c.broker.pid();
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Big", 8);
    let p = producer(&ns);
    p.send(Message::new("Big", b"warm".to_vec())).unwrap();
    let base = rss_anon_mib(pid);
    let addr = c.broker.addr.clone();

    let mut peak = base;
    for burst in 0..BURSTS {
        std::thread::scope(|s| {
            for t in 0..SENDERS {
                let addr = addr.clone();
                s.spawn(move || {
                    for b in 0..BATCHES_EACH {
                        send_big_batch(
                            &addr,
                            "Big",
                            (t % 8) as u32,
                            batch_messages,
                            (burst + t + b) as u8,
                        );
                    }
                });
            }
        });
        peak = peak.max(rss_anon_mib(pid));
    }
    // Idle: the memory goes back within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut now = rss_anon_mib(pid);
    while now > base + 160 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = rss_anon_mib(pid);
    }
    eprintln!("RssAnon: {base} MiB before, {peak} MiB at the peak, {now} MiB after idle");
    assert!(
        now <= base + 160,
        "after {} MiB of {batch_messages} MB batches the broker keeps {} MiB more anonymous memory than \
         before ({base} MiB before, {peak} MiB at the peak, {now} MiB after idle)",
        (BURSTS * SENDERS * BATCHES_EACH * batch_messages * MESSAGE_BYTES) >> 20,
        now - base
    );
}
