//! The host's stall floor: how long a thread that does nothing but read the clock is kept
//! from running, on each CPU the run uses. On a VM the host takes vCPUs away now and then
//! (3-4 ms at a time was seen on this project's machines); no broker can answer faster than
//! its CPU runs, so a latency figure means something only beside the floor measured in the
//! same run. Measured right before a paced latency run, so the spinning threads take no CPU
//! from it.

use std::time::{Duration, Instant};

use serde::Serialize;

/// Gaps longer than this count as stalls in [`CpuFloor::stalls_per_sec`].
const STALL_MIN: Duration = Duration::from_millis(1);
/// Gaps kept for the wait percentiles: shorter ones cannot move a p99 of tens of µs.
const GAP_KEPT_MIN: Duration = Duration::from_micros(5);
/// At most this many gaps are kept (the longest gap and stall count still see them all).
const GAPS_KEPT_MAX: usize = 1 << 20;

/// What a clock-reading spin loop saw on one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuFloor {
    pub cpu: usize,
    /// Longest time between two consecutive clock reads, in µs.
    pub gap_max_us: f64,
    /// Gaps longer than 1 ms, per second of spinning.
    pub stalls_per_sec: f64,
    /// What a request arriving at a random moment would wait for this CPU, at p99 and
    /// p99.9, in µs: the floor of those percentiles for any process that needs the CPU
    /// (0 when the CPU was away less than 1% / 0.1% of the time).
    pub wait_p99_us: f64,
    pub wait_p999_us: f64,
    pub seconds: f64,
}

/// Spins one thread pinned to each of `cpus` for `duration`, reading the clock, and returns
/// what each saw (CPUs that cannot be pinned to are left out).
pub fn measure(cpus: &[usize], duration: Duration) -> Vec<CpuFloor> {
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            std::thread::Builder::new()
                .name(format!("floor-{cpu}"))
                .spawn(move || {
                    crate::cluster::pin_to(&[cpu]).ok()?;
                    Some(spin(cpu, duration))
                })
        })
        .collect();
    threads
        .into_iter()
        .filter_map(|t| t.ok()?.join().ok().flatten())
        .collect()
}

fn spin(cpu: usize, duration: Duration) -> CpuFloor {
    let start = Instant::now();
    let mut last = start;
    let mut gap_max = Duration::ZERO;
    let mut stalls = 0u64;
    let mut gaps: Vec<f64> = Vec::with_capacity(4096);
    loop {
        let now = Instant::now();
        let gap = now - last;
        if gap > gap_max {
            gap_max = gap;
        }
        if gap > STALL_MIN {
            stalls += 1;
        }
        if gap > GAP_KEPT_MIN && gaps.len() < GAPS_KEPT_MAX {
            gaps.push(gap.as_secs_f64() * 1e6);
        }
        last = now;
        if now - start >= duration {
            break;
        }
    }
    let seconds = (last - start).as_secs_f64().max(1e-9);
    CpuFloor {
        cpu,
        gap_max_us: gap_max.as_secs_f64() * 1e6,
        stalls_per_sec: stalls as f64 / seconds,
        wait_p99_us: wait_quantile(&gaps, seconds * 1e6, 0.99),
        wait_p999_us: wait_quantile(&gaps, seconds * 1e6, 0.999),
        seconds,
    }
}

/// The `q` quantile of the wait of a moment drawn uniformly from `total_us` of spinning in
/// which the CPU was away for `gaps_us`: a moment inside a gap of g waits g - t for its
/// remaining part, so P(wait > x) = Σ max(0, g - x) / total. Bisected on x.
fn wait_quantile(gaps_us: &[f64], total_us: f64, q: f64) -> f64 {
    let beyond = |x: f64| gaps_us.iter().map(|g| (g - x).max(0.0)).sum::<f64>() / total_us;
    let tail = 1.0 - q;
    if total_us <= 0.0 || beyond(0.0) <= tail {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0, gaps_us.iter().copied().fold(0.0, f64::max));
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if beyond(mid) > tail {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// One line for people: each CPU's longest gap and stall rate.
pub fn describe(floor: &[CpuFloor]) -> String {
    floor
        .iter()
        .map(|f| {
            format!(
                "CPU {} longest gap {:.2} ms, {:.1} gaps > 1 ms per s, wait p99 {:.3} / p99.9 {:.3} ms",
                f.cpu,
                f.gap_max_us / 1000.0,
                f.stalls_per_sec,
                f.wait_p99_us / 1000.0,
                f.wait_p999_us / 1000.0
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_loop_reports_every_cpu_it_ran_on() {
        let cpus = crate::cluster::allowed_cpus();
        let floor = measure(&cpus, Duration::from_millis(50));
        assert_eq!(floor.len(), cpus.len());
        for f in &floor {
            assert!(f.seconds >= 0.05, "{f:?}");
            assert!(f.gap_max_us > 0.0, "{f:?}");
            assert!(f.gap_max_us <= f.seconds * 1e6, "{f:?}");
        }
        assert!(describe(&floor).contains("longest gap"));
    }

    #[test]
    fn the_wait_percentiles_follow_the_time_the_cpu_was_away() {
        // 1 s of spinning with ten 2 ms gaps: away 2% of the time. A random moment waits
        // more than x with probability 10 * (2000 - x) / 1e6: 1% at x = 1000 µs, 0.1% at
        // x = 1900 µs.
        let gaps = vec![2000.0; 10];
        let close = |a: f64, b: f64| (a - b).abs() < 0.01;
        assert!(close(wait_quantile(&gaps, 1e6, 0.99), 1000.0));
        assert!(close(wait_quantile(&gaps, 1e6, 0.999), 1900.0));
        // Away 0.5% of the time: the p99 waits for nothing, the p99.9 does.
        let gaps = vec![500.0; 10];
        assert_eq!(wait_quantile(&gaps, 1e6, 0.99), 0.0);
        assert!(close(wait_quantile(&gaps, 1e6, 0.999), 400.0));
        assert_eq!(wait_quantile(&[], 1e6, 0.999), 0.0);
    }
}
