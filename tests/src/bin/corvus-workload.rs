//! The workload of the fault tests, run as its own process (inside a client namespace):
//!
//! * `produce`: N producers send messages with unique ids (`<name><p>-<seq>`, in the key
//!   and at the start of the body) round-robin over the topic's queues, for a duration, and
//!   write every send to a JSONL history of [`Op`]s (ok, fail or unknown, see
//!   [`history::classify`]). The producers do not retry, so each record is one attempt.
//! * `drain`: reads every queue of the topic from offset 0 to its end and writes the final
//!   log as JSONL [`Stored`] records.
//! * `consume`: tails every queue from offset 0 for a duration and writes each delivery as
//!   a JSONL [`Delivery`].
//!
//! Each mode prints one `workload <mode> done ...` line with its counts at the end.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use client::{Message, MessageQueue, Producer, PullConsumer, PullOptions, QueueOffset};
use integration::history::{
    classify, now_ms, queue_name, Delivery, JsonlWriter, Op, Outcome, Stored,
};

#[derive(Parser)]
#[command(about = "Workload and history recorder of the fault tests")]
struct Cli {
    /// NameServers, `;`-separated.
    #[arg(long)]
    namesrv: String,
    #[arg(long)]
    topic: String,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    Produce {
        /// The JSONL history to write.
        #[arg(long)]
        history: PathBuf,
        #[arg(long, default_value_t = 2)]
        producers: usize,
        #[arg(long, default_value_t = 10_000)]
        duration_ms: u64,
        /// Sends per second per producer; 0 = as fast as the answers come.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Id prefix (several workloads in one run need different ones).
        #[arg(long, default_value = "p")]
        name: String,
        #[arg(long, default_value_t = 2_000)]
        send_timeout_ms: u64,
        #[arg(long, default_value_t = 256)]
        body_bytes: usize,
        /// Per producer, whatever the duration.
        #[arg(long, default_value_t = 1_000_000)]
        messages_max: u64,
    },
    Drain {
        /// The JSONL final log to write.
        #[arg(long)]
        out: PathBuf,
        /// How long to keep trying to reach every queue and read it to its end.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
    },
    Consume {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 10_000)]
        duration_ms: u64,
    },
}

/// How long a producer waits for the topic's route at its start.
const ROUTE_WAIT: Duration = Duration::from_secs(30);
/// How often the producers refresh the queue list.
const QUEUES_REFRESH: Duration = Duration::from_secs(1);

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.mode {
        Mode::Produce {
            history,
            producers,
            duration_ms,
            rate,
            name,
            send_timeout_ms,
            body_bytes,
            messages_max,
        } => produce(
            &cli.namesrv,
            &cli.topic,
            &ProduceOpts {
                history,
                producers,
                duration: Duration::from_millis(duration_ms),
                rate,
                name,
                send_timeout_ms,
                body_bytes,
                messages_max,
            },
        ),
        Mode::Drain { out, timeout_ms } => drain(
            &cli.namesrv,
            &cli.topic,
            &out,
            Duration::from_millis(timeout_ms),
        ),
        Mode::Consume { out, duration_ms } => consume(
            &cli.namesrv,
            &cli.topic,
            &out,
            Duration::from_millis(duration_ms),
        ),
    }
}

struct ProduceOpts {
    history: PathBuf,
    producers: usize,
    duration: Duration,
    rate: u64,
    name: String,
    send_timeout_ms: u64,
    body_bytes: usize,
    messages_max: u64,
}

fn body(id: &str, bytes: usize) -> Vec<u8> {
    let mut b = format!("{id}|").into_bytes();
    b.resize(bytes.max(b.len()), b'x');
    b
}

/// The id a message carries: its first key, else the body up to `|`.
fn id_of(keys: &[String], body: &[u8]) -> Option<String> {
    if let Some(k) = keys.first() {
        return Some(k.clone());
    }
    let s = std::str::from_utf8(body).ok()?;
    s.split_once('|').map(|(id, _)| id.to_owned())
}

fn wait_queues(p: &Producer, topic: &str) -> Result<Vec<MessageQueue>> {
    let deadline = Instant::now() + ROUTE_WAIT;
    loop {
        match p.write_queues(topic) {
            Ok(q) if !q.is_empty() => return Ok(q),
            Ok(_) if Instant::now() < deadline => {}
            Err(_) if Instant::now() < deadline => {}
            Ok(_) => bail!("topic {topic} has no write queue"),
            Err(e) => bail!("no route for {topic} within {ROUTE_WAIT:?}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn produce(namesrv: &str, topic: &str, o: &ProduceOpts) -> Result<()> {
    let out = Arc::new(Mutex::new(
        JsonlWriter::create(&o.history).with_context(|| format!("{}", o.history.display()))?,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut threads = Vec::new();
    for p in 0..o.producers {
        let producer = Producer::builder()
            .namesrv(namesrv)
            .group(format!("workload-{}{p}", o.name))
            .send_timeout_ms(o.send_timeout_ms)
            .retries(0)
            .build()
            .context("a producer")?;
        let mut queues = wait_queues(&producer, topic)?;
        let (out, stop, topic) = (out.clone(), stop.clone(), topic.to_owned());
        let (prefix, rate, body_bytes, messages_max, duration) = (
            format!("{}{p}", o.name),
            o.rate,
            o.body_bytes,
            o.messages_max,
            o.duration,
        );
        threads.push(std::thread::spawn(move || -> Result<[u64; 3]> {
            let mut counts = [0u64; 3];
            let mut refreshed = Instant::now();
            for seq in 0..messages_max {
                if stop.load(Ordering::SeqCst) || started.elapsed() >= duration {
                    break;
                }
                if let Some(due_us) = (seq * 1_000_000).checked_div(rate) {
                    let due = Duration::from_micros(due_us);
                    let now = started.elapsed();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                }
                if refreshed.elapsed() >= QUEUES_REFRESH {
                    if let Ok(q) = producer.write_queues(&topic) {
                        if !q.is_empty() {
                            queues = q;
                        }
                    }
                    refreshed = Instant::now();
                }
                let id = format!("{prefix}-{seq}");
                let q = &queues[(seq as usize + p) % queues.len()];
                let msg = Message::new(&topic, body(&id, body_bytes)).with_key(id.clone());
                let t_start_ms = now_ms();
                let r = producer.send_to_queue(msg, q);
                let t_end_ms = now_ms();
                let op = match r {
                    Ok(sent) => Op {
                        id,
                        queue: queue_name(&sent.broker_name, sent.queue_id),
                        t_start_ms,
                        t_end_ms,
                        outcome: Outcome::Ok,
                        offset: Some(sent.queue_offset.0),
                        error: None,
                    },
                    Err(e) => Op {
                        id,
                        queue: queue_name(&q.broker_name, q.queue_id),
                        t_start_ms,
                        t_end_ms,
                        outcome: classify(&e),
                        offset: None,
                        error: Some(e.to_string()),
                    },
                };
                counts[match op.outcome {
                    Outcome::Ok => 0,
                    Outcome::Fail => 1,
                    Outcome::Unknown => 2,
                }] += 1;
                let failed = op.outcome != Outcome::Ok;
                out.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .write(&op)
                    .context("write the history")?;
                if failed {
                    // Do not spin on a broker that is down: a short pause per failure.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            producer.shutdown();
            Ok(counts)
        }));
    }
    let mut total = [0u64; 3];
    let mut first_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(c)) => {
                for i in 0..3 {
                    total[i] += c[i];
                }
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(anyhow::anyhow!("a producer thread panicked"));
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let out = Arc::try_unwrap(out)
        .map_err(|_| anyhow::anyhow!("history writer still shared"))?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    out.finish().context("flush the history")?;
    if let Some(e) = first_error {
        return Err(e);
    }
    println!(
        "workload produce done ok={} fail={} unknown={} in {} ms",
        total[0],
        total[1],
        total[2],
        started.elapsed().as_millis()
    );
    Ok(())
}

/// Calls `f` until it succeeds or `deadline` passes (a broker may still be coming back).
fn retry<T>(deadline: Instant, what: &str, mut f: impl FnMut() -> client::Result<T>) -> Result<T> {
    let mut tries = 0u32;
    loop {
        tries += 1;
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline => {
                if tries % 20 == 1 {
                    eprintln!("workload: {what}: {e} (retrying)");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => bail!("{what}: {e}"),
        }
    }
}

fn drain(namesrv: &str, topic: &str, out_path: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let consumer = PullConsumer::new(namesrv, "workload-drain").context("a consumer")?;
    let queues = retry(deadline, "the queues", || consumer.queues(topic))?;
    let mut out = JsonlWriter::create(out_path)?;
    let opts = PullOptions::default();
    let mut n = 0u64;
    for q in &queues {
        let (_, max) = retry(deadline, "the queue offsets", || consumer.queue_offsets(q))?;
        let name = queue_name(&q.broker_name, q.queue_id);
        let mut offset = QueueOffset(0);
        while offset < max {
            let r = retry(deadline, "a pull", || consumer.pull(q, offset, &opts))?;
            for m in &r.messages {
                let id = id_of(&m.keys, &m.body).unwrap_or_else(|| format!("?{}", m.msg_id));
                out.write(&Stored {
                    queue: name.clone(),
                    offset: m.queue_offset.0,
                    id,
                })?;
                n += 1;
            }
            if r.next_offset <= offset {
                // Below the max offset but nothing readable yet (a replica catching up):
                // try again until the deadline.
                if Instant::now() >= deadline {
                    bail!(
                        "{name}: a pull at {offset:?} did not move on (next {:?}, max {max:?})",
                        r.next_offset
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            offset = r.next_offset;
        }
    }
    out.finish()?;
    println!("workload drain done stored={n} queues={}", queues.len());
    Ok(())
}

fn consume(namesrv: &str, topic: &str, out_path: &Path, duration: Duration) -> Result<()> {
    let started = Instant::now();
    let consumer = PullConsumer::new(namesrv, "workload-consume").context("a consumer")?;
    let queues = retry(started + duration, "the queues", || consumer.queues(topic))?;
    let mut next: Vec<QueueOffset> = vec![QueueOffset(0); queues.len()];
    let mut out = JsonlWriter::create(out_path)?;
    let opts = PullOptions {
        suspend_timeout_ms: 200,
        ..PullOptions::default()
    };
    let (mut n, mut errors) = (0u64, 0u64);
    while started.elapsed() < duration {
        for (i, q) in queues.iter().enumerate() {
            match consumer.pull(q, next[i], &opts) {
                Ok(r) => {
                    let t_ms = now_ms();
                    for m in &r.messages {
                        let id =
                            id_of(&m.keys, &m.body).unwrap_or_else(|| format!("?{}", m.msg_id));
                        out.write(&Delivery {
                            queue: queue_name(&q.broker_name, q.queue_id),
                            offset: m.queue_offset.0,
                            id,
                            t_ms,
                        })?;
                        n += 1;
                    }
                    next[i] = r.next_offset.max(next[i]);
                }
                Err(_) => {
                    errors += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    out.finish()?;
    println!("workload consume done delivered={n} errors={errors}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_in_the_key_and_the_body() {
        let b = body("p0-12", 64);
        assert_eq!(b.len(), 64);
        assert_eq!(id_of(&[], &b).as_deref(), Some("p0-12"));
        assert_eq!(id_of(&["k".into()], &b).as_deref(), Some("k"));
    }
}
