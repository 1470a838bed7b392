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

/// What a clock-reading spin loop saw on one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuFloor {
    pub cpu: usize,
    /// Longest time between two consecutive clock reads, in µs.
    pub gap_max_us: f64,
    /// Gaps longer than 1 ms, per second of spinning.
    pub stalls_per_sec: f64,
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
    loop {
        let now = Instant::now();
        let gap = now - last;
        if gap > gap_max {
            gap_max = gap;
        }
        if gap > STALL_MIN {
            stalls += 1;
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
        seconds,
    }
}

/// One line for people: each CPU's longest gap and stall rate.
pub fn describe(floor: &[CpuFloor]) -> String {
    floor
        .iter()
        .map(|f| {
            format!(
                "CPU {} longest gap {:.2} ms, {:.1} gaps > 1 ms per s",
                f.cpu,
                f.gap_max_us / 1000.0,
                f.stalls_per_sec
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
}
