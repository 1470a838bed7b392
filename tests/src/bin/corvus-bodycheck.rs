//! A load that checks every body it is served: producers send bodies that carry their own
//! length and a hash of the rest (assorted sizes, single sends and batches, some over the
//! compression threshold), a consumer tails every queue while they send and drains them at
//! the end, and every body served is checked against what it says it is. Prints each body
//! that fails (queue, offset, what it holds) and a `bodycheck done` line with the counts;
//! exits 1 if any body failed or an acknowledged message was not served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use client::{Message, MessageExt, MessageQueue, Producer, PullConsumer, PullOptions, QueueOffset};

#[derive(Parser)]
#[command(about = "Producers and a consumer that checks every body it is served")]
struct Cli {
    #[arg(long)]
    namesrv: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 4)]
    producers: u32,
    #[arg(long, default_value_t = 60_000)]
    duration_ms: u64,
    /// Largest body; sizes are drawn from a few classes up to it.
    #[arg(long, default_value_t = 16_384)]
    body_bytes_max: usize,
    /// One send in this many is a batch of 2-16 messages (0: no batches).
    #[arg(long, default_value_t = 4)]
    batch_one_in: u64,
    /// How long the final drain may take.
    #[arg(long, default_value_t = 120_000)]
    drain_ms: u64,
    #[arg(long, default_value = "bodycheck")]
    group: String,
    /// A second consumer starts this long after the producers and pauses this long between
    /// passes, so it reads behind them, from the segment files (0: none).
    #[arg(long, default_value_t = 0)]
    lag_ms: u64,
    /// Sends in flight per producer (async sends, as the bench makes them); 0: one at a
    /// time, each waited for.
    #[arg(long, default_value_t = 0)]
    inflight: u64,
    /// Creates the topic on this broker first, with `--queues` queues.
    #[arg(long)]
    create_on: Option<String>,
    #[arg(long, default_value_t = 8)]
    queues: u32,
}

const MAGIC: u32 = 0x4342_5643; // "CVBC"
const HEADER_BYTES: usize = 28;
const SIZES: [usize; 7] = [64, 300, 1000, 3000, 5000, 9000, 16_384];

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

fn body(producer: u32, seq: u64, size_max: usize) -> Vec<u8> {
    let r = mix(u64::from(producer) << 40 ^ seq);
    let size = SIZES[(r % SIZES.len() as u64) as usize]
        .min(size_max)
        .max(HEADER_BYTES);
    let mut b = vec![0u8; size];
    // Half text-like (compressible), half noise, so compressed bodies differ from each other.
    let text = b"corvus body check payload ";
    for (i, byte) in b[HEADER_BYTES..].iter_mut().enumerate() {
        *byte = if i % 64 < 32 {
            text[i % text.len()]
        } else {
            (mix(r ^ i as u64) & 0xff) as u8
        };
    }
    let h = fnv(&b[HEADER_BYTES..]);
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    b[8..12].copy_from_slice(&producer.to_le_bytes());
    b[12..20].copy_from_slice(&seq.to_le_bytes());
    b[20..28].copy_from_slice(&h.to_le_bytes());
    b
}

/// What is wrong with a body, if anything; its (producer, seq) if its header is readable.
fn check(b: &[u8]) -> (Option<(u32, u64)>, Option<String>) {
    if b.len() < HEADER_BYTES {
        return (
            None,
            Some(format!("{} bytes, shorter than the header", b.len())),
        );
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let u64_at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(x)
    };
    if u32_at(0) != MAGIC {
        return (None, Some("no magic".into()));
    }
    let id = (u32_at(8), u64_at(12));
    let len = u32_at(4) as usize;
    if len != b.len() {
        return (Some(id), Some(format!("says {len} bytes, has {}", b.len())));
    }
    if fnv(&b[HEADER_BYTES..]) != u64_at(20) {
        return (Some(id), Some("hash differs".into()));
    }
    (Some(id), None)
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
    served: AtomicU64,
    bad: AtomicU64,
}

fn produce(
    p: u32,
    cli: &Cli,
    stop: &AtomicBool,
    tally: &Arc<Tally>,
    acked: &Arc<Mutex<Vec<(u32, u64)>>>,
) -> Result<()> {
    let inflight = Arc::new((Mutex::new(0u64), std::sync::Condvar::new()));
    let producer = Producer::builder()
        .namesrv(&cli.namesrv)
        .group(format!("{}-p{p}", cli.group))
        .retries(0)
        .send_timeout_ms(3_000)
        .build()?;
    let mut seq = 0u64;
    let mut errors: HashMap<String, u64> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let n = if cli.batch_one_in > 0
            && mix(u64::from(p) ^ seq << 8).is_multiple_of(cli.batch_one_in)
        {
            2 + (mix(seq) % 15)
        } else {
            1
        };
        let msgs: Vec<Message> = (seq..seq + n)
            .map(|s| Message::new(cli.topic.clone(), body(p, s, cli.body_bytes_max)))
            .collect();
        tally.sent.fetch_add(n, Ordering::Relaxed);
        if cli.inflight > 0 {
            // Wait for a free slot, then send without waiting for the answer.
            {
                let (count, freed) = &*inflight;
                let mut c = count.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                while *c >= cli.inflight {
                    c = freed.wait(c).map_err(|_| anyhow::anyhow!("poisoned"))?;
                }
                *c += 1;
            }
            let done = {
                let (inflight, acked, tally, first) =
                    (inflight.clone(), acked.clone(), tally.clone(), seq);
                move |ok: bool, err: Option<String>| {
                    if ok {
                        tally.acked.fetch_add(n, Ordering::Relaxed);
                        if let Ok(mut a) = acked.lock() {
                            a.extend((first..first + n).map(|s| (p, s)));
                        }
                    } else {
                        tally.failed.fetch_add(n, Ordering::Relaxed);
                        if let Some(e) = err {
                            if tally.failed.load(Ordering::Relaxed) < 20 {
                                eprintln!("producer {p}: seq {first}: {e}");
                            }
                        }
                    }
                    let (count, freed) = &*inflight;
                    if let Ok(mut c) = count.lock() {
                        *c -= 1;
                    }
                    freed.notify_all();
                }
            };
            let started = if n == 1 {
                let Some(m) = msgs.into_iter().next() else {
                    bail!("no message");
                };
                producer.send_async(m, move |r| done(r.is_ok(), r.err().map(|e| e.to_string())))
            } else {
                producer.send_batch_async(msgs, move |r| {
                    done(r.is_ok(), r.err().map(|e| e.to_string()))
                })
            };
            if let Err(e) = started {
                bail!("cannot start an async send: {e}");
            }
            seq += n;
            continue;
        }
        let ok = if n == 1 {
            let Some(m) = msgs.into_iter().next() else {
                bail!("no message");
            };
            producer.send(m).map(|_| ())
        } else {
            producer.send_batch(msgs).map(|_| ())
        };
        match ok {
            Ok(()) => {
                tally.acked.fetch_add(n, Ordering::Relaxed);
                let mut a = acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                a.extend((seq..seq + n).map(|s| (p, s)));
            }
            Err(e) => {
                tally.failed.fetch_add(n, Ordering::Relaxed);
                let key: String = e.to_string().chars().take(60).collect();
                let c = errors.entry(key).or_default();
                *c += 1;
                if *c == 1 {
                    eprintln!("producer {p}: seq {seq}: {e}");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        seq += n;
    }
    for (e, c) in errors {
        eprintln!("producer {p}: {c} x {e}");
    }
    // Every async send answered before the producer goes.
    {
        let (count, freed) = &*inflight;
        let mut c = count.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while *c > 0 && Instant::now() < deadline {
            c = freed
                .wait_timeout(c, Duration::from_millis(100))
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .0;
        }
    }
    producer.shutdown();
    Ok(())
}

struct Consumer {
    consumer: PullConsumer,
    queues: Vec<MessageQueue>,
    next: Vec<QueueOffset>,
    seen: HashMap<(u32, u64), u32>,
    /// Queue offsets passed over because retention deleted them before they were read.
    moved_over: u64,
}

impl Consumer {
    fn verify(&mut self, m: &MessageExt, tally: &Tally) {
        tally.served.fetch_add(1, Ordering::Relaxed);
        let (id, bad) = check(&m.body);
        if let Some(id) = id {
            *self.seen.entry(id).or_default() += 1;
        }
        if let Some(why) = bad {
            tally.bad.fetch_add(1, Ordering::Relaxed);
            let head: Vec<String> = m.body.iter().take(32).map(|b| format!("{b:02x}")).collect();
            println!(
                "BAD BODY queue {} offset {} commit-log {} store_size {} sys_flag {:#x} body {} bytes id {:?}: {why}; head {}",
                m.queue_id,
                m.queue_offset.0,
                m.commit_log_offset.0,
                m.store_size,
                m.sys_flag,
                m.body.len(),
                id,
                head.join("")
            );
        }
    }

    /// One pass over every queue; whether any queue had something new.
    fn pass(&mut self, tally: &Tally) -> bool {
        let opts = PullOptions {
            max_messages: 64,
            ..PullOptions::default()
        };
        let mut any = false;
        for i in 0..self.queues.len() {
            let r = match self.consumer.pull(&self.queues[i], self.next[i], &opts) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("pull of queue {}: {e}", self.queues[i].queue_id);
                    continue;
                }
            };
            for m in &r.messages {
                self.verify(m, tally);
            }
            if r.status == client::PullStatus::OffsetMoved {
                // Retention deleted what this consumer had not read yet: not served, by
                // design (force-clean on a full disk), and counted apart from losses.
                let skipped = r.next_offset.0.saturating_sub(self.next[i].0);
                self.moved_over += skipped;
                eprintln!(
                    "queue {}: offset {} moved to {} (retention): {skipped} not read",
                    self.queues[i].queue_id, self.next[i].0, r.next_offset.0
                );
            }
            if r.next_offset != self.next[i] {
                any = true;
            }
            self.next[i] = r.next_offset;
        }
        any
    }

    fn at_end(&self) -> Result<bool> {
        for (q, next) in self.queues.iter().zip(&self.next) {
            if self.consumer.max_offset(q)? > *next {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let cli = Arc::new(cli);
    if let Some(broker) = &cli.create_on {
        let admin = client::Admin::new(&cli.namesrv)?;
        admin.create_topic(
            broker,
            &protocol::TopicConfig {
                name: cli.topic.clone(),
                read_queues: cli.queues,
                write_queues: cli.queues,
                perm: 6,
            },
        )?;
        admin.shutdown();
    }
    let consumer = PullConsumer::new(&cli.namesrv, &format!("{}-c", cli.group))?;
    let queues = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match consumer.queues(&cli.topic) {
                Ok(q) if !q.is_empty() => break q,
                r if Instant::now() > deadline => bail!("no route for {}: {r:?}", cli.topic),
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    };
    let mut c = Consumer {
        consumer,
        next: vec![QueueOffset(0); queues.len()],
        queues,
        seen: HashMap::new(),
        moved_over: 0,
    };
    let started = Instant::now();
    let producers: Vec<_> = (0..cli.producers)
        .map(|p| {
            let (cli, stop, tally, acked) =
                (cli.clone(), stop.clone(), tally.clone(), acked.clone());
            std::thread::spawn(move || produce(p, &cli, &stop, &tally, &acked))
        })
        .collect();
    let laggard = (cli.lag_ms > 0).then(|| {
        let (cli, stop, tally) = (cli.clone(), stop.clone(), tally.clone());
        let queues = c.queues.clone();
        std::thread::spawn(move || -> Result<u64> {
            std::thread::sleep(Duration::from_millis(cli.lag_ms));
            let mut l = Consumer {
                consumer: PullConsumer::new(&cli.namesrv, &format!("{}-lag", cli.group))?,
                next: vec![QueueOffset(0); queues.len()],
                queues,
                seen: HashMap::new(),
                moved_over: 0,
            };
            while !stop.load(Ordering::Relaxed) {
                l.pass(&tally);
                std::thread::sleep(Duration::from_millis(cli.lag_ms / 20));
            }
            Ok(l.seen.len() as u64)
        })
    });
    let mut last_report = Instant::now();
    while started.elapsed() < Duration::from_millis(cli.duration_ms) {
        if !c.pass(&tally) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            last_report = Instant::now();
            eprintln!(
                "t={}s sent {} acked {} failed {} served {} bad {}",
                started.elapsed().as_secs(),
                tally.sent.load(Ordering::Relaxed),
                tally.acked.load(Ordering::Relaxed),
                tally.failed.load(Ordering::Relaxed),
                tally.served.load(Ordering::Relaxed),
                tally.bad.load(Ordering::Relaxed)
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in producers {
        match h.join() {
            Ok(r) => r.context("producer")?,
            Err(_) => bail!("a producer panicked"),
        }
    }
    if let Some(h) = laggard {
        match h.join() {
            Ok(r) => eprintln!(
                "lagging consumer saw {} messages",
                r.context("lagging consumer")?
            ),
            Err(_) => bail!("the lagging consumer panicked"),
        }
    }
    let drain_deadline = Instant::now() + Duration::from_millis(cli.drain_ms);
    loop {
        let moved = c.pass(&tally);
        if !moved && c.at_end().unwrap_or(false) {
            break;
        }
        if Instant::now() > drain_deadline {
            eprintln!("drain did not reach every queue's end");
            break;
        }
    }
    let acked = acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let missing: Vec<&(u32, u64)> = acked.iter().filter(|id| !c.seen.contains_key(id)).collect();
    for id in missing.iter().take(20) {
        println!("MISSING acknowledged {id:?}");
    }
    let ends: Vec<String> = c.next.iter().map(|o| o.0.to_string()).collect();
    println!(
        "bodycheck done: sent {} acked {} failed {} served {} bad {} missing {} (retention passed over {} offsets unread) queue ends {}",
        tally.sent.load(Ordering::Relaxed),
        tally.acked.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        tally.served.load(Ordering::Relaxed),
        tally.bad.load(Ordering::Relaxed),
        missing.len(),
        c.moved_over,
        ends.join(",")
    );
    // Acknowledged messages retention deleted unread are not losses of the broker's; more
    // missing than that are.
    if tally.bad.load(Ordering::Relaxed) > 0 || missing.len() as u64 > c.moved_over {
        std::process::exit(1);
    }
    Ok(())
}
