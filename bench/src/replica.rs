//! The slave's lag during a produce run with `--replica`: the master's replication status
//! sampled every few milliseconds (per shard: what the slave acknowledged, and the master's
//! end), as bytes behind and as milliseconds: how long ago the master's log ended where the
//! slave's acknowledgement is now.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often the master is asked.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// One sample, summed over the shards: the master's end and what the slave acknowledged.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    end: u64,
    acked: u64,
}

/// Percentiles of the slave's lag over a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LagReport {
    pub samples: usize,
    pub bytes_p50: u64,
    pub bytes_p99: u64,
    pub bytes_max: u64,
    pub ms_p50: f64,
    pub ms_p99: f64,
    pub ms_max: f64,
}

pub struct LagSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl LagSampler {
    pub fn start(namesrv: &str, broker_addr: &str) -> Option<LagSampler> {
        let admin = client::Admin::new(namesrv).ok()?;
        let addr = broker_addr.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("lag-sampler".into())
            .spawn(move || {
                let mut out = Vec::new();
                while !flag.load(Ordering::Relaxed) {
                    if let Some(s) = sample(&admin, &addr) {
                        out.push(s);
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
                out
            })
            .ok()?;
        Some(LagSampler { stop, handle })
    }

    pub fn finish(self) -> Option<LagReport> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.handle.join().ok()?;
        lag_report(&samples)
    }
}

fn sample(admin: &client::Admin, addr: &str) -> Option<Sample> {
    let st = admin.broker_status(addr).ok()?;
    let at = Instant::now();
    let (mut end, mut acked, mut seen) = (0u64, 0u64, false);
    for core in &st.cores {
        let shards: Vec<serde_json::Value> = serde_json::from_str(&core.replication).ok()?;
        for shard in shards {
            // The most advanced slave of the shard.
            let best = shard["slaves"].as_array().and_then(|l| {
                l.iter()
                    .filter_map(|x| Some((x["acked"].as_u64()?, x["lag_bytes"].as_u64()?)))
                    .max_by_key(|(a, _)| *a)
            });
            if let Some((a, lag)) = best {
                end += a + lag;
                acked += a;
                seen = true;
            }
        }
    }
    seen.then_some(Sample { at, end, acked })
}

/// When the master's end (piecewise linear between samples) first reached `offset`.
fn reached(samples: &[Sample], offset: u64) -> Option<Instant> {
    let i = samples.partition_point(|s| s.end < offset);
    let hit = samples.get(i)?;
    if i == 0 || hit.end == offset {
        return Some(hit.at);
    }
    let prev = samples[i - 1];
    let span = (hit.end - prev.end) as f64;
    let frac = (offset - prev.end) as f64 / span;
    Some(prev.at + hit.at.duration_since(prev.at).mul_f64(frac))
}

fn lag_report(samples: &[Sample]) -> Option<LagReport> {
    if samples.is_empty() {
        return None;
    }
    let mut bytes: Vec<u64> = samples.iter().map(|s| s.end - s.acked.min(s.end)).collect();
    let mut ms: Vec<f64> = samples
        .iter()
        .map(|s| {
            if s.acked >= s.end {
                0.0
            } else {
                reached(samples, s.acked)
                    .map(|t| s.at.saturating_duration_since(t).as_secs_f64() * 1e3)
                    .unwrap_or(0.0)
            }
        })
        .collect();
    bytes.sort_unstable();
    ms.sort_by(f64::total_cmp);
    let pick = |n: usize, q: f64| ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
    let n = samples.len();
    Some(LagReport {
        samples: n,
        bytes_p50: bytes[pick(n, 0.50)],
        bytes_p99: bytes[pick(n, 0.99)],
        bytes_max: bytes[n - 1],
        ms_p50: ms[pick(n, 0.50)],
        ms_p99: ms[pick(n, 0.99)],
        ms_max: ms[n - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_in_time_is_how_long_ago_the_master_ended_where_the_slave_is() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The master grows 1000 bytes per 10 ms; the slave is 500 bytes (5 ms) behind.
        let samples: Vec<Sample> = (0..10)
            .map(|i| Sample {
                at: at(i * 10),
                end: i * 1000,
                acked: (i * 1000).saturating_sub(500),
            })
            .collect();
        let r = lag_report(&samples).unwrap();
        assert_eq!(r.bytes_max, 500);
        assert!((r.ms_p99 - 5.0).abs() < 0.01, "{r:?}");
        assert_eq!(lag_report(&[]), None);
    }
}
