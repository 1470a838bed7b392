//! Open-loop pacing. The i-th send is *scheduled* at `start + i / rate`, whatever happened to
//! the sends before it; latency is measured from that scheduled time, so a stall of the
//! broker shows up in the latency of every send it delayed (no coordinated omission).

use std::time::{Duration, Instant};

/// The last stretch of a wait, spun instead of slept: a sleep (with the timer slack
/// [`precise_sleeps`] sets) overshoots by a few µs to a few tens of µs.
const SPIN_NS_MAX: u64 = 15_000;

#[derive(Debug, Clone)]
pub struct Pacer {
    start: Instant,
    per_sec: f64,
    /// Units (messages) already scheduled.
    scheduled: u64,
}

impl Pacer {
    /// `per_sec` units per second from `start`; must be > 0.
    pub fn new(start: Instant, per_sec: f64) -> Pacer {
        assert!(per_sec > 0.0 && per_sec.is_finite());
        Pacer {
            start,
            per_sec,
            scheduled: 0,
        }
    }

    /// The scheduled time of the next `units` (e.g. a batch) and advances the schedule.
    pub fn next(&mut self, units: u64) -> Instant {
        let at = self.start + Duration::from_secs_f64(self.scheduled as f64 / self.per_sec);
        self.scheduled += units;
        at
    }

    /// Waits until the next `units` are due and returns their scheduled time. Returns at
    /// once when behind schedule (the send is late and its latency will show it).
    #[cfg(test)]
    pub fn wait(&mut self, units: u64) -> Instant {
        let at = self.next(units);
        wait_until(at);
        at
    }
}

/// Waits until `at`: sleeps until shortly before it, then spins the rest. The sleep is what
/// matters: a pacer that spins (even yielding) for the whole gap between sends keeps kernel
/// work queued on its CPU from running. With a `sched_yield` spin here, the kworker that
/// completes the broker's O_DIRECT writes (queued on the CPU that took the disk interrupt,
/// the bench's) waited up to 650 ms, and the broker's sends waited on the disk behind it.
pub fn wait_until(at: Instant) {
    loop {
        let now = Instant::now();
        if now >= at {
            return;
        }
        let left = at - now;
        if left.as_nanos() as u64 > SPIN_NS_MAX {
            std::thread::sleep(left - Duration::from_nanos(SPIN_NS_MAX));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Makes this thread's sleeps end within about a µs of when they were asked to (the
/// default timer slack is 50 µs, the whole gap between two sends at 20,000/s).
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's timer
    // slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_independent_of_when_sends_happen() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000.0);
        assert_eq!(p.next(1), start);
        assert_eq!(p.next(10), start + Duration::from_millis(1));
        // A batch of 10 takes 10 slots.
        assert_eq!(p.next(1), start + Duration::from_millis(11));
    }

    #[test]
    fn late_sends_go_at_once_and_keep_their_scheduled_time() {
        let start = Instant::now() - Duration::from_secs(1);
        let mut p = Pacer::new(start, 10.0);
        let before = Instant::now();
        let at = p.wait(5);
        assert_eq!(at, start);
        assert!(before.elapsed() < Duration::from_millis(50));
        let at2 = p.wait(1);
        assert_eq!(at2, start + Duration::from_millis(500));
    }

    #[test]
    fn waiting_reaches_the_scheduled_time() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 200.0);
        for _ in 0..4 {
            let at = p.wait(1);
            assert!(Instant::now() >= at);
        }
        assert!(start.elapsed() >= Duration::from_millis(15));
    }
}
