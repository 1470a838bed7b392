//! Where time is read by code whose behaviour depends on it (leases and membership expiry
//! in the broker; a shard's retention and the store timestamps it stamps): the system's
//! clocks in production, or a clock a test moves by hand, so expiry is tested by advancing
//! it, never by sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default)]
pub enum Clock {
    #[default]
    System,
    /// Stands still until [`Clock::advance`] moves it; its wall time starts at the system's
    /// wall time when it was made.
    Manual {
        base: Instant,
        base_wall: SystemTime,
        elapsed_ns: Arc<AtomicU64>,
    },
}

impl Clock {
    /// A clock at a fixed instant, moved only by [`Clock::advance`] (on it or its clones).
    pub fn manual() -> Clock {
        Clock::Manual {
            base: Instant::now(),
            base_wall: SystemTime::now(),
            elapsed_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    fn elapsed(elapsed_ns: &AtomicU64) -> Duration {
        Duration::from_nanos(elapsed_ns.load(Ordering::SeqCst))
    }

    /// Monotonic time, for intervals and deadlines.
    pub fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual {
                base, elapsed_ns, ..
            } => *base + Self::elapsed(elapsed_ns),
        }
    }

    /// Wall time, for what is compared with file times or stored in records.
    pub fn wall(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            Clock::Manual {
                base_wall,
                elapsed_ns,
                ..
            } => *base_wall + Self::elapsed(elapsed_ns),
        }
    }

    /// [`Clock::wall`] in milliseconds since the Unix epoch (0 before it).
    pub fn wall_ms(&self) -> i64 {
        self.wall()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
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
        let (t0, w0) = (c.now(), c.wall());
        assert_eq!(c.now(), t0);
        assert_eq!(c.wall(), w0);
        let twin = c.clone();
        twin.advance(Duration::from_secs(5));
        assert_eq!(c.now() - t0, Duration::from_secs(5));
        assert_eq!(
            c.wall().duration_since(w0).ok(),
            Some(Duration::from_secs(5))
        );
        let s = Clock::System;
        assert!(s.now() >= t0);
        assert!(s.wall_ms() > 1_600_000_000_000);
    }
}
