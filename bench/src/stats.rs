//! Latency histograms and the percentile figures every report carries.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Longest latency a histogram records; longer ones are clamped (and still counted).
const LATENCY_NS_MAX: u64 = 120_000_000_000;

/// A latency histogram in nanoseconds, 3 significant digits (0.1% resolution).
#[derive(Clone)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        let hist = Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3)
            .expect("constant histogram bounds are valid");
        Latency { hist }
    }

    pub fn record(&mut self, d: Duration) {
        self.record_ns(d.as_nanos().min(u128::from(LATENCY_NS_MAX)) as u64);
    }

    pub fn record_ns(&mut self, ns: u64) {
        // Saturating: a value out of bounds is clamped, never dropped.
        self.hist.saturating_record(ns.clamp(1, LATENCY_NS_MAX));
    }

    /// Records `count` samples of the same value (e.g. every message of a batch).
    pub fn record_n(&mut self, d: Duration, count: u64) {
        let ns = (d.as_nanos().min(u128::from(LATENCY_NS_MAX)) as u64).clamp(1, LATENCY_NS_MAX);
        if count > 0 {
            let _ = self.hist.record_n(ns, count);
        }
    }

    pub fn add(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.hist.is_empty() {
            return Percentiles::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            p50: us(self.hist.value_at_quantile(0.50)),
            p90: us(self.hist.value_at_quantile(0.90)),
            p99: us(self.hist.value_at_quantile(0.99)),
            p999: us(self.hist.value_at_quantile(0.999)),
            max: us(self.hist.max()),
        }
    }

    /// (percentile in 0..100, latency µs) points of the percentile curve, for plots: one
    /// point per "nine" step, from p0 to the max.
    pub fn curve_us(&self) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        if self.hist.is_empty() {
            return out;
        }
        for v in self.hist.iter_quantiles(8) {
            let q = v.quantile_iterated_to() * 100.0;
            out.push((q, v.value_iterated_to() as f64 / 1000.0));
        }
        out
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut l = Latency::new();
        // 1..=1000 µs, one sample each.
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        let p = l.percentiles();
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002 + 0.001;
        assert!(close(p.p50, 500.0), "{p:?}");
        assert!(close(p.p90, 900.0), "{p:?}");
        assert!(close(p.p99, 990.0), "{p:?}");
        assert!(close(p.p999, 999.0), "{p:?}");
        assert!(close(p.max, 1000.0), "{p:?}");
        assert_eq!(l.count(), 1000);
    }

    #[test]
    fn batches_merges_and_clamping() {
        let mut a = Latency::new();
        a.record_n(Duration::from_micros(100), 99);
        let mut b = Latency::new();
        b.record(Duration::from_secs(1000)); // beyond the bound: clamped, still counted
        a.add(&b);
        assert_eq!(a.count(), 100);
        let p = a.percentiles();
        assert!((p.p50 - 100.0).abs() < 0.2);
        assert!((p.max - LATENCY_NS_MAX as f64 / 1000.0).abs() / p.max < 0.002);
        assert_eq!(Latency::new().percentiles(), Percentiles::default());
        let curve = a.curve_us();
        assert!(curve
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
