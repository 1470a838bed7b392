//! Scheduled delivery: which properties hold a message back, and until when.
//!
//! RocketMQ has two ways to say it, and corvus takes both:
//! - `DELAY` = a delay level, 1-based, into the broker's levels (RocketMQ 4's
//!   `messageDelayLevel`, by default `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m
//!   1h 2h`); a level past the last is the last, a level of 0 or less is no delay.
//! - an arbitrary time (RocketMQ 5's timer): `TIMER_DELIVER_MS` or `__STARTDELIVERTIME`
//!   (an absolute time in ms since the epoch), `TIMER_DELAY_SEC` (seconds after the store
//!   time) or `TIMER_DELAY_MS` (milliseconds after it: the 5.x clients' `setDelayTimeMs`).
//!
//! The time is counted from the record's store timestamp, so it is the same whenever it is
//! computed (at the append, at recovery, on a replica). A record naming any of these keys
//! is held; one whose value is unreadable or too far ahead is refused at the append.

use crate::Properties;

/// RocketMQ's `PROPERTY_DELAY_TIME_LEVEL`.
pub const DELAY: &str = "DELAY";
/// RocketMQ 5's `PROPERTY_TIMER_DELIVER_MS`.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// RocketMQ 5's `PROPERTY_TIMER_DELAY_SEC`.
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// RocketMQ 5's `PROPERTY_TIMER_DELAY_MS` (what the 5.x clients' `setDelayTimeMs` sets).
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// RocketMQ's `__STARTDELIVERTIME` (the 4.x clients' and Aliyun's delivery time).
pub const START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
/// Every key that holds a record back.
pub const KEYS: [&str; 5] = [
    DELAY,
    TIMER_DELIVER_MS,
    TIMER_DELAY_SEC,
    TIMER_DELAY_MS,
    START_DELIVER_TIME,
];

/// The shard's queue of held records (queue 0 of it in each shard), RocketMQ 4's name for
/// its delay queues. Not a topic of the broker's table: only the broker's timer reads it.
pub const TIMER_QUEUE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// Set on the delivered copy: the time it was due (RocketMQ 5's `TIMER_OUT_MS`).
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
/// Set on the delivered copy of a timer message (not of a delay level): when the held
/// record was stored, and when it was delivered (RocketMQ 5's `TIMER_ENQUEUE_MS` and
/// `TIMER_DEQUEUE_MS`).
pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
/// Set on the delivered copy: the queue offset of the held record in its shard's timer
/// queue, so that a delivery is never made twice (recovery looks for it). A record that
/// carries it is a delivered copy and is never held again, though it keeps the timer key
/// it was sent with, as RocketMQ's delivered copies do.
pub const TIMER_FROM: &str = "__TIMER_FROM";

/// RocketMQ's default delay levels, in ms.
pub const DELAY_LEVELS_MS_DEFAULT: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// How delivery times are read: the delay levels and the furthest a message may be held.
#[derive(Debug, Clone)]
pub struct TimerRules {
    /// Delay of each `DELAY` level, in ms (level 1 first); not empty.
    pub levels_ms: Vec<u64>,
    /// The longest a message may be held past its store time (RocketMQ 5's
    /// `timerMaxDelaySec`, 3 days by default).
    pub max_delay_ms: u64,
}

impl Default for TimerRules {
    fn default() -> Self {
        TimerRules {
            levels_ms: DELAY_LEVELS_MS_DEFAULT.to_vec(),
            max_delay_ms: 3 * 24 * 3_600_000,
        }
    }
}

/// Why a held message is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    #[error("property {key} = {value:?} is not a number")]
    NotANumber { key: &'static str, value: String },
    #[error("property {key} asks for delivery {ahead_ms} ms after the store time; at most {max_ms} ms is allowed (timer_max_delay_sec)")]
    TooFar {
        key: &'static str,
        ahead_ms: i64,
        max_ms: u64,
    },
}

/// Whether a record with `props` is held by the timer: it names a timer key other than a
/// `DELAY` of 0 or less, and is not a delivered copy ([`TIMER_FROM`]). This depends on
/// nothing but the record, so the append, recovery and a replica always agree on it. (A
/// value that is not a number is refused at the append; one found anyway is held and
/// delivered at once.)
pub fn held(props: &Properties<'_>) -> bool {
    let mut timer = false;
    for (k, v) in props.iter() {
        match k {
            TIMER_FROM => return false,
            DELAY => timer |= v.trim().parse::<i64>().map_or(true, |n| n > 0),
            _ => timer |= KEYS.contains(&k),
        }
    }
    timer
}

impl TimerRules {
    /// When a record stored at `store_ms` with `props` is due, or `None` if it is not held
    /// (no timer key, or `DELAY` of 0 or less). A time already past is due at once.
    pub fn deliver_at_ms(
        &self,
        props: &Properties<'_>,
        store_ms: i64,
    ) -> Result<Option<i64>, TimerError> {
        let mut found = None;
        for (k, v) in props.iter() {
            let key = match KEYS.iter().find(|t| **t == k) {
                Some(t) => *t,
                None => continue,
            };
            let n: i64 = v.trim().parse().map_err(|_| TimerError::NotANumber {
                key,
                value: v.chars().take(40).collect(),
            })?;
            let at = match key {
                DELAY if n <= 0 => continue,
                DELAY => {
                    let i = (n as usize).min(self.levels_ms.len()).saturating_sub(1);
                    let ms = self.levels_ms.get(i).copied().unwrap_or(0);
                    store_ms.saturating_add(ms as i64)
                }
                TIMER_DELAY_SEC => store_ms.saturating_add(n.saturating_mul(1000)),
                TIMER_DELAY_MS => store_ms.saturating_add(n),
                _ => n,
            };
            let ahead = at.saturating_sub(store_ms);
            if ahead > self.max_delay_ms as i64 {
                return Err(TimerError::TooFar {
                    key,
                    ahead_ms: ahead,
                    max_ms: self.max_delay_ms,
                });
            }
            // The first key found decides, as RocketMQ reads one of them.
            found.get_or_insert(at);
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut v = Vec::new();
        for (k, val) in pairs {
            v.extend_from_slice(k.as_bytes());
            v.push(1);
            v.extend_from_slice(val.as_bytes());
            v.push(2);
        }
        v
    }

    fn at(pairs: &[(&str, &str)]) -> Result<Option<i64>, TimerError> {
        let r = raw(pairs);
        TimerRules::default().deliver_at_ms(&Properties::new(&r), 1_000_000)
    }

    #[test]
    fn held_is_what_has_a_time() {
        for (pairs, is_held) in [
            (vec![("TAGS", "a")], false),
            (vec![(DELAY, "0")], false),
            (vec![(DELAY, "-1")], false),
            (vec![(DELAY, "2")], true),
            (vec![(DELAY, "x")], true),
            (vec![(TIMER_DELIVER_MS, "0")], true),
            (vec![(DELAY, "0"), (TIMER_DELAY_SEC, "1")], true),
            // A delivered copy keeps its key and is not held again.
            (vec![(DELAY, "2"), (TIMER_FROM, "7")], false),
            (vec![(TIMER_FROM, "7"), (TIMER_DELIVER_MS, "0")], false),
        ] {
            let r = raw(&pairs);
            assert_eq!(held(&Properties::new(&r)), is_held, "{pairs:?}");
        }
    }

    #[test]
    fn levels_times_and_refusals() {
        assert_eq!(at(&[("TAGS", "a")]), Ok(None));
        assert_eq!(at(&[(DELAY, "0")]), Ok(None));
        assert_eq!(at(&[(DELAY, "1")]), Ok(Some(1_001_000)));
        assert_eq!(at(&[(DELAY, "3")]), Ok(Some(1_010_000)));
        // Past the last level: the last (2 h).
        assert_eq!(at(&[(DELAY, "99")]), Ok(Some(1_000_000 + 7_200_000)));
        assert_eq!(at(&[(TIMER_DELAY_SEC, "7")]), Ok(Some(1_007_000)));
        assert_eq!(at(&[(TIMER_DELAY_MS, "2500")]), Ok(Some(1_002_500)));
        assert_eq!(at(&[(TIMER_DELIVER_MS, "1500000")]), Ok(Some(1_500_000)));
        assert_eq!(at(&[(START_DELIVER_TIME, "1200000")]), Ok(Some(1_200_000)));
        // In the past: due at once.
        assert_eq!(at(&[(TIMER_DELIVER_MS, "5")]), Ok(Some(5)));
        assert!(matches!(
            at(&[(DELAY, "soon")]),
            Err(TimerError::NotANumber { .. })
        ));
        assert!(matches!(
            at(&[(TIMER_DELAY_SEC, "999999999")]),
            Err(TimerError::TooFar { .. })
        ));
        // Ten days in ms, past the 3-day maximum.
        assert!(matches!(
            at(&[(TIMER_DELAY_MS, "864000000")]),
            Err(TimerError::TooFar { .. })
        ));
    }

    /// The store's one-pass scan marks exactly the records naming a timer key.
    #[test]
    fn the_scan_marks_timer_keys() {
        for (pairs, held) in [
            (vec![("TAGS", "a"), ("KEYS", "k")], false),
            (
                vec![
                    ("TAGS", "a"),
                    ("KEYS", "k"),
                    ("UNIQ_KEY", "u"),
                    (DELAY, "2"),
                ],
                true,
            ),
            (vec![(TIMER_DELIVER_MS, "1")], true),
            (vec![("DELAYX", "1"), ("XDELAY", "1")], false),
        ] {
            let r = raw(&pairs);
            assert_eq!(crate::IndexedProperties::scan(&r).timer, held, "{pairs:?}");
        }
    }
}
