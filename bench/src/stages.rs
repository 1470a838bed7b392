//! Where a paced run's send latency goes: the bench's own stages (how late the pacer let a
//! send go, how long the client's send call took) beside the broker's per-stage histograms
//! (`SendStages`: queued, room, append, durable, forward, reply, write, total), cleared
//! right before the run and read right after it.

use std::time::Duration;

use anyhow::{anyhow, Result};
use protocol::StageHistogram;
use serde::Serialize;

use crate::stats::{Latency, Percentiles};

/// One stage's figures over the whole run (every core and broker merged).
#[derive(Debug, Clone, Serialize)]
pub struct StageRow {
    /// `bench` or `broker`.
    pub side: String,
    pub stage: String,
    pub count: u64,
    pub latency_us: Percentiles,
}

impl StageRow {
    pub fn new(side: &str, stage: &str, latency: &Latency) -> StageRow {
        StageRow {
            side: side.to_owned(),
            stage: stage.to_owned(),
            count: latency.len(),
            latency_us: latency.percentiles(),
        }
    }
}

/// The brokers a topic's sends go to: every master in its route.
pub fn broker_addrs(namesrv: &str, topic: &str) -> Result<Vec<String>> {
    let admin = client::Admin::new(namesrv).map_err(|e| anyhow!("admin: {e}"))?;
    let route = admin
        .topic_route(topic)
        .map_err(|e| anyhow!("route of {topic}: {e}"))?;
    let mut addrs: Vec<String> = route
        .data
        .brokers
        .iter()
        .filter_map(|b| b.master_addr().map(str::to_owned))
        .collect();
    addrs.sort();
    addrs.dedup();
    Ok(addrs)
}

/// Asks every broker for its stage histograms; `reset` clears them after.
pub fn fetch(namesrv: &str, addrs: &[String], reset: bool) -> Result<Vec<StageHistogram>> {
    let admin = client::Admin::new(namesrv).map_err(|e| anyhow!("admin: {e}"))?;
    let mut out = Vec::new();
    for a in addrs {
        out.extend(
            admin
                .send_stages(a, reset)
                .map_err(|e| anyhow!("send stages of {a}: {e}"))?,
        );
    }
    Ok(out)
}

/// Messages and record bytes the brokers at `addrs` have stored since they started, over
/// all their cores: the difference across a run gives the bytes a message takes in the
/// CommitLog (its record: fixed fields, topic, properties and body).
pub fn stored(namesrv: &str, addrs: &[String]) -> Result<(u64, u64)> {
    let admin = client::Admin::new(namesrv).map_err(|e| anyhow!("admin: {e}"))?;
    let mut total = (0, 0);
    for a in addrs {
        let status = admin
            .broker_status(a)
            .map_err(|e| anyhow!("status of {a}: {e}"))?;
        for c in &status.cores {
            total.0 += c.produced_messages;
            total.1 += c.produced_bytes;
        }
    }
    Ok(total)
}

/// The broker's histograms merged per stage over cores and brokers, in the order the
/// broker sent them (the order of the request path).
pub fn broker_rows(hists: &[StageHistogram]) -> Vec<StageRow> {
    let mut merged: Vec<(String, Latency)> = Vec::new();
    for h in hists {
        let i = match merged.iter().position(|(s, _)| *s == h.stage) {
            Some(i) => i,
            None => {
                merged.push((h.stage.clone(), Latency::new()));
                merged.len() - 1
            }
        };
        for b in &h.buckets {
            merged[i].1.record_n(Duration::from_nanos(b.nanos), b.count);
        }
    }
    merged
        .iter()
        .map(|(stage, l)| StageRow::new("broker", stage, l))
        .collect()
}

/// The stages for people, one line each, under the run's row.
pub fn describe(mode: &str, rows: &[StageRow]) -> String {
    let mut out = format!(
        "{mode}: where the time went, per stage (p50 / p90 / p99 / p99.9 / max ms, count):\n"
    );
    for r in rows.iter().filter(|r| r.count > 0) {
        let l = &r.latency_us;
        out.push_str(&format!(
            "  {:<6} {:<9} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9}\n",
            r.side,
            r.stage,
            l.p50 / 1000.0,
            l.p90 / 1000.0,
            l.p99 / 1000.0,
            l.p999 / 1000.0,
            l.max / 1000.0,
            r.count
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::StageBucket;

    #[test]
    fn cores_are_merged_per_stage_in_path_order() {
        let h = |core, stage: &str, nanos, count| StageHistogram {
            core,
            stage: stage.to_owned(),
            buckets: vec![StageBucket { nanos, count }],
        };
        let rows = broker_rows(&[
            h(0, "queued", 2_000, 3),
            h(0, "total", 50_000, 3),
            h(1, "queued", 4_000, 1),
        ]);
        let names: Vec<&str> = rows.iter().map(|r| r.stage.as_str()).collect();
        assert_eq!(names, ["queued", "total"]);
        assert_eq!(rows[0].count, 4);
        assert!((rows[0].latency_us.max - 4.0).abs() < 0.01, "{:?}", rows[0]);
        let text = describe("produce", &rows);
        assert!(text.contains("broker queued"), "{text}");
    }
}
