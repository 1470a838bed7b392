//! A broker's figures: `broker-status` (per core, with TPS over a window), `send-stages`
//! (latency per stage of the send path and core) and `ha-status` (replication per shard).

use std::io::{self, Write};
use std::time::{Duration, Instant};

use client::Admin;
use protocol::{CoreStatus, StageBucket};
use serde::Serialize;

use crate::output::Render;

/// `broker-status`.
#[derive(Debug, Serialize)]
pub struct BrokerStatusView {
    broker_name: String,
    cluster: String,
    uptime_ms: u64,
    shard_count: u16,
    cores: Vec<CoreView>,
}

/// One core's figures; the TPS are over the command's window, the rest since the start.
#[derive(Debug, Serialize)]
pub struct CoreView {
    core: u16,
    shards: Vec<u16>,
    produce_tps: f64,
    consume_tps: f64,
    requests: u64,
    cross_core_hops: u64,
    group_hops: u64,
    inbox_depth: u64,
    produced_messages: u64,
    produced_bytes: u64,
    consumed_messages: u64,
    consumed_bytes: u64,
    commit_log_bytes: u64,
    durable_lag_bytes: u64,
    disk_use_ratio: f64,
    quarantined_ranges: u64,
    quarantined_bytes: u64,
    skipped_records: u64,
    busy_refusals: u64,
    tail_ring_records: u64,
    writes_blocked_shards: u64,
    connections_open: u64,
    connections_max: u64,
    connections_refused: u64,
    connections_timed_out: u64,
    connections_bad_frames: u64,
    connections_tls_refused: u64,
    cq_files_mapped: u64,
    cq_files_unmapped: u64,
}

impl CoreView {
    /// `c` with its TPS over `secs` since `before` (the same core's earlier snapshot).
    fn new(c: &CoreStatus, before: Option<&CoreStatus>, secs: f64) -> Self {
        let rate = |now: u64, then: fn(&CoreStatus) -> u64| -> f64 {
            before.map_or(0.0, |b| now.saturating_sub(then(b)) as f64 / secs)
        };
        Self {
            core: c.core,
            shards: c.shards.clone(),
            produce_tps: rate(c.produced_messages, |b| b.produced_messages),
            consume_tps: rate(c.consumed_messages, |b| b.consumed_messages),
            requests: c.requests,
            cross_core_hops: c.cross_core_hops,
            group_hops: c.group_hops,
            inbox_depth: c.inbox_depth,
            produced_messages: c.produced_messages,
            produced_bytes: c.produced_bytes,
            consumed_messages: c.consumed_messages,
            consumed_bytes: c.consumed_bytes,
            commit_log_bytes: c.commit_log_bytes,
            durable_lag_bytes: c.durable_lag_bytes,
            disk_use_ratio: c.disk_use_ratio,
            quarantined_ranges: c.quarantined_ranges,
            quarantined_bytes: c.quarantined_bytes,
            skipped_records: c.skipped_records,
            busy_refusals: c.busy_refusals,
            tail_ring_records: c.tail_ring_records,
            writes_blocked_shards: c.writes_blocked_shards,
            connections_open: c.connections_open,
            connections_max: c.connections_max,
            connections_refused: c.connections_refused,
            connections_timed_out: c.connections_timed_out,
            connections_bad_frames: c.connections_bad_frames,
            connections_tls_refused: c.connections_tls_refused,
            cq_files_mapped: c.cq_files_mapped,
            cq_files_unmapped: c.cq_files_unmapped,
        }
    }
}

impl Render for BrokerStatusView {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "broker {} cluster={} uptime_ms={} shards={}",
            self.broker_name, self.cluster, self.uptime_ms, self.shard_count
        )?;
        for c in &self.cores {
            let shards: Vec<String> = c.shards.iter().map(u16::to_string).collect();
            writeln!(
                w,
                "core={} shards=[{}] produce_tps={:.1} consume_tps={:.1} requests={} cross_core_hops={} group_hops={} inbox_depth={} produced_messages={} produced_bytes={} consumed_messages={} consumed_bytes={} commit_log_bytes={} durable_lag_bytes={} disk_use_ratio={:.4} quarantined_ranges={} quarantined_bytes={} skipped_records={} busy_refusals={} tail_ring_records={} writes_blocked_shards={} connections_open={} connections_max={} connections_refused={} connections_timed_out={} connections_bad_frames={} connections_tls_refused={} cq_files_mapped={} cq_files_unmapped={}",
                c.core,
                shards.join(","),
                c.produce_tps,
                c.consume_tps,
                c.requests,
                c.cross_core_hops,
                c.group_hops,
                c.inbox_depth,
                c.produced_messages,
                c.produced_bytes,
                c.consumed_messages,
                c.consumed_bytes,
                c.commit_log_bytes,
                c.durable_lag_bytes,
                c.disk_use_ratio,
                c.quarantined_ranges,
                c.quarantined_bytes,
                c.skipped_records,
                c.busy_refusals,
                c.tail_ring_records,
                c.writes_blocked_shards,
                c.connections_open,
                c.connections_max,
                c.connections_refused,
                c.connections_timed_out,
                c.connections_bad_frames,
                c.connections_tls_refused,
                c.cq_files_mapped,
                c.cq_files_unmapped
            )?;
            if c.writes_blocked_shards > 0 {
                writeln!(
                    w,
                    "  core {}: {} shard(s) cannot create their next CommitLog segment (disk full or no descriptors) and refuse sends until a retry succeeds; the broker log says why",
                    c.core, c.writes_blocked_shards
                )?;
            }
            if c.quarantined_ranges > 0 {
                // Damage is not a figure to skim past: say what it means and where to look.
                writeln!(
                    w,
                    "  core {}: {} damaged CommitLog range(s) ({} bytes) are quarantined and never served; the broker log names each segment and offset range at ERROR",
                    c.core, c.quarantined_ranges, c.quarantined_bytes
                )?;
            }
        }
        Ok(())
    }
}

/// Two snapshots `interval_ms` apart; the TPS figures are over that window.
pub fn broker_status(ns: &str, addr: &str, interval_ms: u64) -> anyhow::Result<BrokerStatusView> {
    let admin = Admin::new(ns)?;
    let before = admin.broker_status(addr)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(interval_ms.max(1)));
    let s = admin.broker_status(addr)?;
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let cores = s
        .cores
        .iter()
        .map(|c| {
            let then = before.cores.iter().find(|b| b.core == c.core);
            CoreView::new(c, then, secs)
        })
        .collect();
    Ok(BrokerStatusView {
        broker_name: s.broker_name,
        cluster: s.cluster,
        uptime_ms: s.uptime_ms,
        shard_count: s.shard_count,
        cores,
    })
}

/// `send-stages`: a JSON array of rows, or a table.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct SendStages(Vec<StageRow>);

/// One core's latency figures for one stage.
#[derive(Debug, Serialize)]
pub struct StageRow {
    core: u16,
    stage: String,
    count: u64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

impl Render for SendStages {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:>4} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "core", "stage", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        )?;
        for r in &self.0 {
            writeln!(
                w,
                "{:>4} {:<8} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                r.core, r.stage, r.count, r.p50_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms
            )?;
        }
        Ok(())
    }
}

pub fn send_stages(ns: &str, addr: &str, reset: bool) -> anyhow::Result<SendStages> {
    let stages = Admin::new(ns)?.send_stages(addr, reset)?;
    Ok(SendStages(
        stages
            .into_iter()
            .map(|h| {
                let (count, q) = quantiles_ms(&h.buckets);
                StageRow {
                    core: h.core,
                    stage: h.stage,
                    count,
                    p50_ms: q[0],
                    p90_ms: q[1],
                    p99_ms: q[2],
                    p999_ms: q[3],
                    max_ms: q[4],
                }
            })
            .collect(),
    ))
}

/// (requests, [p50, p90, p99, p99.9, max] in ms) of one stage's recorded values.
fn quantiles_ms(buckets: &[StageBucket]) -> (u64, [f64; 5]) {
    let mut sorted = buckets.to_vec();
    sorted.sort_by_key(|b| b.nanos);
    let total: u64 = sorted.iter().map(|b| b.count).sum();
    let at = |q: f64| -> f64 {
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for b in &sorted {
            seen += b.count;
            if seen >= rank {
                return b.nanos as f64 / 1e6;
            }
        }
        sorted.last().map_or(0.0, |b| b.nanos as f64 / 1e6)
    };
    (total, [at(0.5), at(0.9), at(0.99), at(0.999), at(1.0)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{render, Format};
    use serde_json::Value;

    #[test]
    fn stage_quantiles_come_from_the_buckets_in_order() {
        let b = |nanos, count| StageBucket { nanos, count };
        // 990 requests at 10 µs, 9 at 2 ms, 1 at 7 ms; given out of order.
        let (n, q) = quantiles_ms(&[b(7_000_000, 1), b(10_000, 990), b(2_000_000, 9)]);
        assert_eq!(n, 1000);
        assert_eq!(q, [0.01, 0.01, 0.01, 2.0, 7.0]);
        assert_eq!(quantiles_ms(&[]), (0, [0.0; 5]));
    }

    #[test]
    fn core_figures_and_their_rates() {
        let before = CoreStatus {
            core: 1,
            produced_messages: 100,
            ..CoreStatus::default()
        };
        let now = CoreStatus {
            core: 1,
            shards: vec![1, 3],
            produced_messages: 300,
            quarantined_ranges: 2,
            quarantined_bytes: 4096,
            skipped_records: 5,
            ..CoreStatus::default()
        };
        let view = BrokerStatusView {
            broker_name: "b1".into(),
            cluster: "C".into(),
            uptime_ms: 10,
            shard_count: 4,
            cores: vec![CoreView::new(&now, Some(&before), 2.0)],
        };
        let v: Value = serde_json::from_slice(&render(Format::Json, &view).unwrap()).unwrap();
        assert_eq!(v["cores"][0]["produce_tps"], 100.0);
        assert_eq!(v["cores"][0]["shards"], serde_json::json!([1, 3]));
        assert_eq!(v["cores"][0]["connections_open"], 0);
        let text = String::from_utf8(render(Format::Text, &view).unwrap()).unwrap();
        assert!(
            text.starts_with(
                "broker b1 cluster=C uptime_ms=10 shards=4\ncore=1 shards=[1,3] produce_tps=100.0 "
            ),
            "{text}"
        );
        assert!(text.contains(" skipped_records=5 "), "{text}");
        assert!(
            text.contains("  core 1: 2 damaged CommitLog range(s) (4096 bytes)"),
            "{text}"
        );
        // A core missing from the first snapshot has no rate.
        assert_eq!(CoreView::new(&now, None, 2.0).produce_tps, 0.0);
    }

    #[test]
    fn stages_are_a_json_array() {
        let stages = SendStages(vec![StageRow {
            core: 0,
            stage: "total".into(),
            count: 3,
            p50_ms: 0.5,
            p90_ms: 1.0,
            p99_ms: 1.0,
            p999_ms: 1.0,
            max_ms: 2.0,
        }]);
        let v: Value = serde_json::from_slice(&render(Format::Json, &stages).unwrap()).unwrap();
        assert_eq!(v[0]["stage"], "total");
        assert_eq!(v[0]["p999_ms"], 1.0);
        let text = String::from_utf8(render(Format::Text, &stages).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 2);
    }
}

/// `ha-status`: each shard's replication, as the broker's cores report it.
#[derive(Debug, Serialize)]
pub struct HaStatusView {
    broker_name: String,
    role: String,
    shards: Vec<serde_json::Value>,
}

pub fn ha_status(ns: &str, addr: &str) -> anyhow::Result<HaStatusView> {
    let admin = Admin::new(ns)?;
    let s = admin.broker_status(addr)?;
    let mut shards = Vec::new();
    for c in &s.cores {
        let v: Vec<serde_json::Value> = serde_json::from_str(&c.replication)
            .map_err(|e| anyhow::anyhow!("core {}: replication status: {e}", c.core))?;
        shards.extend(v);
    }
    shards.sort_by_key(|v| v["shard"].as_u64().unwrap_or(0));
    Ok(HaStatusView {
        broker_name: s.broker_name,
        role: s.cores.first().map(|c| c.role.clone()).unwrap_or_default(),
        shards,
    })
}

impl Render for HaStatusView {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(w, "broker {} ({})", self.broker_name, self.role)?;
        let num = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        for s in &self.shards {
            let shard = format!("{} (epoch {})", num(&s["shard"]), num(&s["epoch"]));
            if let Some(m) = s.get("from_master").filter(|m| !m.is_null()) {
                writeln!(
                    w,
                    "shard {shard}: from master {} {}, local end {}, {} bytes behind, confirmed {}, last heard {} ms ago{}",
                    m["master"].as_str().unwrap_or("-"),
                    if m["connected"] == true { "connected" } else { "NOT connected" },
                    num(&m["local_end"]),
                    num(&m["lag_bytes"]),
                    num(&m["confirm"]),
                    m["last_heard_ms_ago"].as_u64().map_or("-".into(), |x| x.to_string()),
                    m["last_error"]
                        .as_str()
                        .map(|e| format!(", last error: {e}"))
                        .unwrap_or_default()
                )?;
                continue;
            }
            let slaves = s["slaves"].as_array().cloned().unwrap_or_default();
            if slaves.is_empty() {
                writeln!(w, "shard {shard}: no slave connected")?;
            }
            for l in slaves {
                writeln!(
                    w,
                    "shard {shard}: slave {} at {} {}, acknowledged {}, {} bytes behind, oldest unacknowledged {} ms, last ack {} ms ago",
                    num(&l["broker_id"]),
                    l["peer"].as_str().unwrap_or("-"),
                    if l["in_sync"] == true { "IN SYNC" } else { "catching up" },
                    num(&l["acked"]),
                    num(&l["lag_bytes"]),
                    num(&l["lag_ms"]),
                    num(&l["last_ack_ms_ago"])
                )?;
            }
            if let Some(why) = s["last_left"].as_str() {
                writeln!(w, "shard {shard}: last left the in-sync set: {why}")?;
            }
        }
        Ok(())
    }
}
