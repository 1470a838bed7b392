//! What keeps idle connections from locking the NameServer out, as plain logic the server
//! drives (no I/O here, so each rule is unit-tested with made-up instants):
//!
//! * [`ReadDeadline`]: when a connection's read gives up. Between frames a connection may
//!   stay silent for `connection_idle_timeout_ms` after its last complete request (or its
//!   accept); once the first byte of a frame has arrived, the whole frame must arrive within
//!   `frame_timeout_ms`, so a slow-loris half frame cannot hold a slot either. A connection
//!   that speaks for a broker is not closed as idle before `broker_expiry_ms` either
//!   ([`ReadDeadline::raise_idle_timeout`]): its closing drops the broker from the routes.
//! * [`eviction_victim`]: at `connections_max` (or out of file descriptors), the newcomer is
//!   served and an open connection is closed instead: one that has never completed a
//!   request before one that has, then the one idle longest. A flood of mute connections
//!   thus evicts itself, and a broker's registration or a client's look-up (which send a
//!   request as soon as they connect) are served even while the flood lasts.
//! * [`CapLog`]: hitting a limit is logged at most once per interval, with a count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why a connection's read deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// No request for `connection_idle_timeout_ms`.
    Idle,
    /// A frame was started and not finished within `frame_timeout_ms`.
    HalfFrame,
}

/// The read deadline of one connection.
#[derive(Debug, Clone)]
pub(crate) struct ReadDeadline {
    idle_timeout: Duration,
    frame_timeout: Duration,
    /// The last complete request, or the accept.
    last_request: Instant,
    /// When the first byte of the frame still being received arrived.
    frame_started: Option<Instant>,
}

impl ReadDeadline {
    pub(crate) fn new(now: Instant, idle_timeout: Duration, frame_timeout: Duration) -> Self {
        ReadDeadline {
            idle_timeout,
            frame_timeout,
            last_request: now,
            frame_started: None,
        }
    }

    /// Records the state after a read whose complete frames have all been handled:
    /// `completed` if at least one of them was a request, `mid_frame` if bytes of an
    /// unfinished frame remain (buffered, or still to be discarded).
    pub(crate) fn observe(&mut self, now: Instant, completed: bool, mid_frame: bool) {
        if completed {
            self.last_request = now;
            // Whatever is left over belongs to a frame that started with this read.
            self.frame_started = None;
        }
        self.frame_started = if mid_frame {
            Some(self.frame_started.unwrap_or(now))
        } else {
            None
        };
    }

    /// Makes the idle timeout at least `at_least` (a connection that speaks for a broker
    /// is not closed as idle before the broker would expire).
    pub(crate) fn raise_idle_timeout(&mut self, at_least: Duration) {
        self.idle_timeout = self.idle_timeout.max(at_least);
    }

    /// When the connection is closed unless more bytes arrive, and why. Between frames the
    /// idle timeout applies; inside one, only the frame timeout (a request that starts just
    /// before the idle deadline still gets the full frame timeout to arrive).
    pub(crate) fn deadline(&self) -> (Instant, Expiry) {
        match self.frame_started {
            Some(started) => (started + self.frame_timeout, Expiry::HalfFrame),
            None => (self.last_request + self.idle_timeout, Expiry::Idle),
        }
    }
}

/// What the accept thread knows of an open connection, updated by its thread.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Milliseconds from the server's start to the last complete request (or the accept).
    last_request_ms: AtomicU64,
    /// Whether the connection has completed a request at all.
    served: AtomicBool,
}

impl Activity {
    pub(crate) fn new(accepted_ms: u64) -> Self {
        Activity {
            last_request_ms: AtomicU64::new(accepted_ms),
            served: AtomicBool::new(false),
        }
    }

    pub(crate) fn request_completed(&self, now_ms: u64) {
        self.last_request_ms.store(now_ms, Ordering::Relaxed);
        self.served.store(true, Ordering::Relaxed);
    }

    /// The eviction rank: smaller goes first.
    fn rank(&self) -> (bool, u64) {
        (
            self.served.load(Ordering::Relaxed),
            self.last_request_ms.load(Ordering::Relaxed),
        )
    }
}

/// The connection to close so that a newcomer can be served: never-served connections
/// before served ones, then the longest idle, then the oldest (smallest id). `None` only
/// when there are no connections.
pub(crate) fn eviction_victim<'a>(
    connections: impl IntoIterator<Item = (u64, &'a Activity)>,
) -> Option<u64> {
    connections
        .into_iter()
        .min_by_key(|(id, activity)| (activity.rank(), *id))
        .map(|(id, _)| id)
}

/// Rate-limits the "connection cap reached" line: the first hit is logged at once, later
/// ones are counted and reported by the first hit, or [`CapLog::flush`], after `interval`
/// has passed.
#[derive(Debug)]
pub(crate) struct CapLog {
    interval: Duration,
    last_line: Option<Instant>,
    unreported: u64,
    /// The limit of the latest hit (for the line a flush writes).
    limit: &'static str,
}

impl CapLog {
    pub(crate) fn new(interval: Duration) -> Self {
        CapLog {
            interval,
            last_line: None,
            unreported: 0,
            limit: "",
        }
    }

    fn due(&self, now: Instant) -> bool {
        match self.last_line {
            None => true,
            Some(t) => now.saturating_duration_since(t) >= self.interval,
        }
    }

    /// Counts one hit of `limit`; returns the number of hits to report when a line is due.
    pub(crate) fn hit(&mut self, now: Instant, limit: &'static str) -> Option<u64> {
        self.unreported += 1;
        self.limit = limit;
        if !self.due(now) {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }

    /// The hits not reported yet, and the latest one's limit, when a line is due: the end
    /// of a burst is reported even if no hit follows it.
    pub(crate) fn flush(&mut self, now: Instant) -> Option<(u64, &'static str)> {
        if self.unreported == 0 || !self.due(now) {
            return None;
        }
        self.last_line = Some(now);
        Some((std::mem::take(&mut self.unreported), self.limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(120);
    const FRAME: Duration = Duration::from_secs(30);

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_silent_connection_expires_after_the_idle_timeout() {
        let t0 = Instant::now();
        let d = ReadDeadline::new(t0, IDLE, FRAME);
        assert_eq!(d.deadline(), (t0 + IDLE, Expiry::Idle));
    }

    #[test]
    fn each_request_restarts_the_idle_timeout() {
        let t0 = Instant::now();
        let mut d = ReadDeadline::new(t0, IDLE, FRAME);
        d.observe(at(t0, 100_000), true, false);
        assert_eq!(d.deadline(), (at(t0, 100_000) + IDLE, Expiry::Idle));
        // A response frame (not a request) does not count as activity.
        d.observe(at(t0, 200_000), false, false);
        assert_eq!(d.deadline(), (at(t0, 100_000) + IDLE, Expiry::Idle));
    }

    #[test]
    fn a_raised_idle_timeout_never_shortens_it() {
        let t0 = Instant::now();
        let mut d = ReadDeadline::new(t0, Duration::from_secs(1), FRAME);
        d.raise_idle_timeout(Duration::from_secs(10));
        assert_eq!(d.deadline(), (at(t0, 10_000), Expiry::Idle));
        d.raise_idle_timeout(Duration::from_secs(5));
        assert_eq!(d.deadline(), (at(t0, 10_000), Expiry::Idle));
    }

    #[test]
    fn a_half_frame_must_finish_within_the_frame_timeout_of_its_first_byte() {
        let t0 = Instant::now();
        let mut d = ReadDeadline::new(t0, IDLE, FRAME);
        d.observe(at(t0, 1_000), false, true);
        // A byte now and then does not move the deadline (slow loris).
        d.observe(at(t0, 20_000), false, true);
        d.observe(at(t0, 29_000), false, true);
        assert_eq!(d.deadline(), (at(t0, 1_000) + FRAME, Expiry::HalfFrame));
        // The frame completes: back to the idle clock, from the completion.
        d.observe(at(t0, 30_000), true, false);
        assert_eq!(d.deadline(), (at(t0, 30_000) + IDLE, Expiry::Idle));
    }

    #[test]
    fn a_frame_started_just_before_the_idle_deadline_gets_the_full_frame_timeout() {
        let t0 = Instant::now();
        let mut d = ReadDeadline::new(t0, IDLE, FRAME);
        d.observe(at(t0, 119_000), false, true);
        assert_eq!(d.deadline(), (at(t0, 119_000) + FRAME, Expiry::HalfFrame));
    }

    #[test]
    fn bytes_left_after_a_request_start_a_new_frame_clock() {
        let t0 = Instant::now();
        let mut d = ReadDeadline::new(t0, IDLE, FRAME);
        d.observe(at(t0, 1_000), false, true);
        // This read finished the old frame and began the next one.
        d.observe(at(t0, 25_000), true, true);
        assert_eq!(d.deadline(), (at(t0, 25_000) + FRAME, Expiry::HalfFrame));
    }

    #[test]
    fn the_mute_and_longest_idle_go_first() {
        let served_long_ago = Activity::new(0);
        served_long_ago.request_completed(10);
        let mute_recent = Activity::new(500);
        let mute_old = Activity::new(400);
        let served_recent = Activity::new(0);
        served_recent.request_completed(900);
        let conns = [
            (1, &served_long_ago),
            (2, &mute_recent),
            (3, &mute_old),
            (4, &served_recent),
        ];
        // Never-served connections go first, the longest idle of them first of all.
        assert_eq!(eviction_victim(conns), Some(3));
        assert_eq!(eviction_victim([conns[0], conns[1], conns[3]]), Some(2));
        // Among served ones, the longest idle.
        assert_eq!(eviction_victim([conns[0], conns[3]]), Some(1));
        assert_eq!(eviction_victim([]), None);
    }

    #[test]
    fn ties_evict_the_oldest_connection() {
        let a = Activity::new(7);
        let b = Activity::new(7);
        assert_eq!(eviction_victim([(9, &a), (4, &b)]), Some(4));
    }

    #[test]
    fn the_cap_line_is_rate_limited_and_counts_every_hit() {
        let t0 = Instant::now();
        let mut log = CapLog::new(Duration::from_secs(10));
        assert_eq!(log.hit(t0, "cap"), Some(1));
        let mut lines = 0;
        let mut reported = 1;
        for ms in 1..=9_999 {
            if let Some(n) = log.hit(at(t0, ms), "cap") {
                lines += 1;
                reported += n;
            }
        }
        assert_eq!(lines, 0, "no second line within the interval");
        // The next hit after the interval reports everything since the first line.
        let n = log.hit(at(t0, 10_000), "cap");
        assert_eq!(n, Some(10_000));
        reported += n.unwrap_or(0);
        assert_eq!(reported, 10_001);
        assert_eq!(log.hit(at(t0, 10_001), "cap"), None);
    }

    #[test]
    fn the_end_of_a_burst_is_reported_by_a_flush() {
        let t0 = Instant::now();
        let mut log = CapLog::new(Duration::from_secs(10));
        assert_eq!(log.flush(t0), None, "nothing to report");
        assert_eq!(log.hit(t0, "connections_max"), Some(1));
        assert_eq!(log.hit(at(t0, 1), "connections_max"), None);
        assert_eq!(log.hit(at(t0, 2), "file descriptors"), None);
        assert_eq!(log.flush(at(t0, 9_999)), None, "not within the interval");
        assert_eq!(log.flush(at(t0, 10_002)), Some((2, "file descriptors")));
        assert_eq!(log.flush(at(t0, 30_000)), None, "reported once");
    }
}
