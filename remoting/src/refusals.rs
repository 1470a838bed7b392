//! Which refused request codes to log: a peer that sends a request code the server does not
//! serve (a newer client, a tool of another version) is worth one log line per code, not one
//! per request. [`RefusedCodes`] admits one line per code per interval and counts the
//! refusals it leaves out, so the next line of that code says how many there were. Pure
//! bookkeeping: the caller passes the time and writes the line.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a refused code is logged at most, unless said otherwise.
pub const LOG_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);

/// Codes tracked at once: a peer sending every possible code cannot grow the table past
/// this; refusals of codes beyond it are counted together.
pub const CODES_MAX: usize = 256;

/// What a line about a refused code reports beside the code itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    /// Refusals of this code not logged since its last line.
    pub same_code: u64,
    /// Refusals of codes that found the table full, or whose counts left it, not logged.
    pub other_codes: u64,
}

#[derive(Debug)]
struct Window {
    logged_at: Instant,
    left_out: u64,
}

/// One line per refused code per interval, with counts of the refusals left out.
#[derive(Debug)]
pub struct RefusedCodes {
    interval: Duration,
    by_code: HashMap<i32, Window>,
    other_codes: u64,
}

impl Default for RefusedCodes {
    fn default() -> Self {
        RefusedCodes::new(LOG_INTERVAL_DEFAULT)
    }
}

impl RefusedCodes {
    pub fn new(interval: Duration) -> RefusedCodes {
        RefusedCodes {
            interval,
            by_code: HashMap::new(),
            other_codes: 0,
        }
    }

    /// A refusal of `code` at `now`: `Some` when it is to be logged (with what was left out
    /// before it), `None` when it is only counted.
    pub fn note(&mut self, code: i32, now: Instant) -> Option<LeftOut> {
        let interval = self.interval;
        let due = |w: &Window| now.saturating_duration_since(w.logged_at) >= interval;
        if let Some(w) = self.by_code.get_mut(&code) {
            if !due(w) {
                w.left_out += 1;
                return None;
            }
            let same_code = std::mem::replace(
                w,
                Window {
                    logged_at: now,
                    left_out: 0,
                },
            )
            .left_out;
            return Some(LeftOut {
                same_code,
                other_codes: std::mem::take(&mut self.other_codes),
            });
        }
        if self.by_code.len() >= CODES_MAX {
            // Codes whose interval is over leave; what they had left out is still told.
            let mut dropped = 0;
            self.by_code.retain(|_, w| {
                let keep = !due(w);
                if !keep {
                    dropped += w.left_out;
                }
                keep
            });
            self.other_codes += dropped;
            if self.by_code.len() >= CODES_MAX {
                self.other_codes += 1;
                return None;
            }
        }
        self.by_code.insert(
            code,
            Window {
                logged_at: now,
                left_out: 0,
            },
        );
        Some(LeftOut {
            same_code: 0,
            other_codes: std::mem::take(&mut self.other_codes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_code_per_interval_then_the_count_of_those_left_out() {
        let t0 = Instant::now();
        let mut r = RefusedCodes::new(Duration::from_secs(10));
        let none = LeftOut {
            same_code: 0,
            other_codes: 0,
        };
        assert_eq!(r.note(9999, t0), Some(none));
        for s in 0..5 {
            assert_eq!(r.note(9999, t0 + Duration::from_secs(s)), None);
        }
        // Another code has its own line.
        assert_eq!(r.note(361, t0 + Duration::from_secs(1)), Some(none));
        assert_eq!(
            r.note(9999, t0 + Duration::from_secs(10)),
            Some(LeftOut {
                same_code: 5,
                other_codes: 0
            })
        );
        assert_eq!(r.note(9999, t0 + Duration::from_secs(11)), None);
    }

    #[test]
    fn a_flood_of_distinct_codes_is_bounded_and_counted() {
        let t0 = Instant::now();
        let mut r = RefusedCodes::new(Duration::from_secs(10));
        let logged = (0..1000).filter(|&c| r.note(c, t0).is_some()).count();
        assert_eq!(logged, CODES_MAX);
        assert!(r.by_code.len() <= CODES_MAX);
        // Once the interval is over, the next line tells the refusals that went unlogged.
        let next = r.note(5000, t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(next.other_codes, (1000 - CODES_MAX) as u64);
    }
}
