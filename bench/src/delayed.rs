//! `bench delayed`: scheduled messages. Sends `--messages` messages due at times spread over
//! `--spread-ms` starting `--lead-ms` from now (`TIMER_DELIVER_MS`), all to one queue by
//! default so one shard's timer holds them all, then follows the topic and reports how fast
//! they were scheduled, how fast delivered, and how late: the delivered copy's store time
//! minus its due time (`TIMER_OUT_MS`), beside the floor a clock-reading spin loop sees on
//! the bench's CPUs in the same run.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use client::{Message, PullConsumer, PullOptions};
use serde::Serialize;

use crate::cli::DelayedArgs;
use crate::cluster::{self, Cluster, ClusterOptions};
use crate::stats::{Latency, Percentiles};

#[derive(Debug, Serialize)]
struct Report {
    messages: u64,
    pending_peak: u64,
    schedule_msgs_per_sec: f64,
    deliver_msgs_per_sec: f64,
    /// Store time of the copy minus its due time, µs.
    lateness_us: Percentiles,
    /// Delivered before its due time (must be 0).
    early: u64,
    floor: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn run(a: &DelayedArgs) -> Result<bool> {
    let dir = tempfile::tempdir().map_err(|e| anyhow!("temp dir: {e}"))?;
    let c = Cluster::start(&ClusterOptions {
        profile: a.profile.clone(),
        broker_cores: 1,
        broker_config: a.broker_config.clone(),
        data_dir: Some(dir.path().to_owned()),
        replica: None,
        bench_cpus: None,
    })?;
    let cpus = cluster::bench_cpus(&cluster::allowed_cpus(), 1);
    if !cpus.is_empty() {
        cluster::pin_to(&cpus)?;
    }
    let ns = c.namesrv_addr.clone();
    let topic = "BenchDelayed";
    let admin = client::Admin::new(&ns).map_err(|e| anyhow!("admin: {e}"))?;
    admin
        .create_topic(
            &c.broker_addr,
            &protocol::TopicConfig {
                name: topic.into(),
                read_queues: a.queues,
                write_queues: a.queues,
                perm: protocol::perm::READ_WRITE,
            },
        )
        .map_err(|e| anyhow!("creating {topic}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin
        .topic_route(topic)
        .map_or(true, |r| r.write_queues().is_empty())
    {
        if Instant::now() > deadline {
            bail!("topic {topic} did not appear in the routes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let producer = client::Producer::builder()
        .namesrv(&ns)
        .group("bench-delayed")
        .build()
        .map_err(|e| anyhow!("producer: {e}"))?;
    let body = vec![b'd'; a.size as usize];
    let first_due = now_ms() + a.lead_ms as i64;
    let sent_from = Instant::now();
    let mut sent = 0u64;
    while sent < a.messages {
        let n = a.batch.min(a.messages - sent);
        let batch: Vec<Message> = (0..n)
            .map(|i| {
                let k = sent + i;
                let due = first_due + (k * a.spread_ms / a.messages.max(1)) as i64;
                Message::new(topic, body.clone()).with_deliver_time_ms(due)
            })
            .collect();
        producer
            .send_batch(batch)
            .map_err(|e| anyhow!("send after {sent}: {e}"))?;
        sent += n;
        if cluster::stopping() {
            bail!("interrupted");
        }
    }
    let schedule_secs = sent_from.elapsed().as_secs_f64();
    let scheduled_at = now_ms();
    if scheduled_at > first_due {
        eprintln!(
            "bench: scheduling took past the first due time by {} ms; raise --lead-ms",
            scheduled_at - first_due
        );
    }
    // Everything is pending now (none is due yet if --lead-ms covered the sends).
    let pending_peak = a.messages;
    eprintln!(
        "bench: {sent} messages scheduled in {schedule_secs:.2} s; due from {} ms to {} ms from now",
        first_due - scheduled_at,
        first_due + a.spread_ms as i64 - scheduled_at
    );
    // The floor, measured while the messages wait.
    let floor_cpus = if cpus.is_empty() {
        vec![0]
    } else {
        cpus.clone()
    };
    let wait_floor = Duration::from_millis(((first_due - now_ms()).max(0) as u64).min(2_000));
    let floor = crate::floor::measure(&floor_cpus, wait_floor.max(Duration::from_millis(500)));

    let consumer = PullConsumer::new(&ns, "bench-delayed-check").map_err(|e| anyhow!("{e}"))?;
    let queues = consumer.queues(topic).map_err(|e| anyhow!("{e}"))?;
    let mut offsets: Vec<_> = queues
        .iter()
        .map(|q| consumer.queue_offsets(q).map(|(min, _)| min))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow!("{e}"))?;
    let opts = PullOptions {
        max_messages: 1024,
        suspend_timeout_ms: 100,
        ..Default::default()
    };
    let mut late = Latency::new();
    let mut early = 0u64;
    let mut got = 0u64;
    let (mut first_store, mut last_store) = (i64::MAX, i64::MIN);
    let end =
        Instant::now() + Duration::from_millis(a.lead_ms + a.spread_ms) + Duration::from_secs(60);
    while got < a.messages {
        if Instant::now() > end || cluster::stopping() {
            bail!("only {got} of {} delivered in time", a.messages);
        }
        for (q, off) in queues.iter().zip(offsets.iter_mut()) {
            let r = consumer
                .pull(q, *off, &opts)
                .map_err(|e| anyhow!("pull: {e}"))?;
            for m in &r.messages {
                let due: i64 = m
                    .properties
                    .iter()
                    .find(|(k, _)| k == "TIMER_OUT_MS")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(m.store_timestamp_ms);
                let d = m.store_timestamp_ms - due;
                if d < 0 {
                    early += 1;
                }
                late.record(Duration::from_millis(d.max(0) as u64));
                first_store = first_store.min(m.store_timestamp_ms);
                last_store = last_store.max(m.store_timestamp_ms);
                got += 1;
            }
            *off = r.next_offset;
        }
    }
    let span_ms = (last_store - first_store).max(1) as f64;
    let report = Report {
        messages: a.messages,
        pending_peak,
        schedule_msgs_per_sec: a.messages as f64 / schedule_secs.max(1e-9),
        deliver_msgs_per_sec: a.messages as f64 / (span_ms / 1000.0),
        lateness_us: late.percentiles(),
        early,
        floor: crate::floor::describe(&floor),
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let p = report.lateness_us;
        println!(
            "delayed: {} messages ({} pending at the peak, one shard), scheduled at {:.0} msg/s, delivered at {:.0} msg/s over a {:.1} s spread",
            report.messages, report.pending_peak, report.schedule_msgs_per_sec, report.deliver_msgs_per_sec, span_ms / 1000.0
        );
        println!(
            "lateness (store time of the delivery - due time): p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms; early {}",
            p.p50 / 1000.0,
            p.p99 / 1000.0,
            p.p999 / 1000.0,
            p.max / 1000.0,
            report.early
        );
        println!("floor (same run): {}", report.floor);
    }
    drop(c);
    Ok(report.early == 0)
}
