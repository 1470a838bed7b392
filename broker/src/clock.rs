//! Where lease and membership logic reads the time: the monotonic clock in production, or
//! a clock a test moves by hand, so that expiry is tested by advancing it, not by sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub enum Clock {
    #[default]
    System,
    /// Stands still until [`Clock::advance`] moves it.
    Manual {
        base: Instant,
        elapsed_ns: Arc<AtomicU64>,
    },
}

impl Clock {
    /// A clock at a fixed instant, moved only by [`Clock::advance`] (on it or its clones).
    pub fn manual() -> Clock {
        Clock::Manual {
            base: Instant::now(),
            elapsed_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual { base, elapsed_ns } => {
                *base + Duration::from_nanos(elapsed_ns.load(Ordering::SeqCst))
            }
        }
    }

    /// Moves a manual clock on by `by`; the system clock moves by itself (no-op).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual { elapsed_ns, .. } = self {
            let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
            elapsed_ns.fetch_add(ns, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_with_it() {
        let c = Clock::manual();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        let twin = c.clone();
        twin.advance(Duration::from_secs(5));
        assert_eq!(c.now() - t0, Duration::from_secs(5));
        let s = Clock::System;
        assert!(s.now() >= t0);
    }
}
