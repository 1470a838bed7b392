//! Fresh signatures: a signed request carries the time it was signed at and a nonce, and a
//! server takes it only near its own clock and only once.
//!
//! RocketMQ ACL 1.0 signs the values of a request's ext fields and its body, nothing else: a
//! request captured on the wire verifies again as it is, for ever. The workspace's own
//! signers (mqadmin's RocketMQ requests, every request to the controllers) add two fields
//! to what they sign, [`SIGNED_AT_MS`] (milliseconds since the Unix epoch) and [`NONCE`] (a
//! fresh random value, so two identical requests signed in the same millisecond still
//! differ). A [`ReplayGuard`] then refuses a request signed further than its window from
//! the server's clock, and remembers every signature it took until the window has passed
//! over it, so an exact replay within the window is refused too. Past the window the time
//! check refuses it, so the guard's memory is bounded by the window.
//!
//! Real RocketMQ 4.x/5.x clients (Java, Go, C++) send no time in ACL 1.0. A request
//! without [`SIGNED_AT_MS`] is taken as before unless the guard is told to require one
//! (`time_required`), which shuts those clients out: a choice for deployments with only the
//! workspace's clients.

use std::collections::{BTreeSet, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Denied;

/// The ext field (or envelope field) with the time a request was signed at, in ms since
/// the Unix epoch.
pub const SIGNED_AT_MS: &str = "SignedAtMs";
/// The ext field with a signer's fresh random value, signed with the rest.
pub const NONCE: &str = "SignNonce";

/// The default of `acl_signature_window_ms`: a signed request is taken up to two minutes
/// either side of the server's clock (clocks of one deployment, kept by NTP, differ by far
/// less; a request takes far less to arrive).
pub const WINDOW_MS_DEFAULT: u64 = 120_000;

/// The most signatures a guard remembers. A guard this full refuses further signed requests
/// until the window passes over the oldest (it never forgets one early, which would let its
/// replay through).
pub const ENTRIES_MAX: usize = 200_000;

/// Now, in ms since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The two fields a signer adds before it signs: ([`SIGNED_AT_MS`], now) and ([`NONCE`],
/// a fresh nonce).
pub fn stamp() -> [(&'static str, String); 2] {
    [
        (SIGNED_AT_MS, now_ms().to_string()),
        (NONCE, crate::sign::new_nonce()),
    ]
}

/// One server's memory of the signatures it took within the window.
#[derive(Debug)]
pub struct ReplayGuard {
    window_ms: u64,
    time_required: bool,
    entries_max: usize,
    seen: HashSet<String>,
    /// The same signatures by the time they may be forgotten (signed time + window).
    by_expiry: BTreeSet<(u64, String)>,
}

impl ReplayGuard {
    /// A guard taking requests signed within `window_ms` of its clock; with
    /// `time_required`, a signed request without a time is refused.
    pub fn new(window_ms: u64, time_required: bool) -> ReplayGuard {
        ReplayGuard::with_entries_max(window_ms, time_required, ENTRIES_MAX)
    }

    pub fn with_entries_max(
        window_ms: u64,
        time_required: bool,
        entries_max: usize,
    ) -> ReplayGuard {
        ReplayGuard {
            window_ms,
            time_required,
            entries_max,
            seen: HashSet::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// How many signatures the guard remembers now.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }

    /// Whether a request whose signature verified may be taken at `now_ms`: `signed_at_ms`
    /// is its [`SIGNED_AT_MS`] field as sent (absent for RocketMQ's own clients). A taken
    /// request's signature is remembered; the refusal says why.
    pub fn check(
        &mut self,
        signed_at_ms: Option<&str>,
        signature: &str,
        now_ms: u64,
    ) -> Result<(), Denied> {
        let Some(text) = signed_at_ms else {
            return if self.time_required {
                Err(Denied(format!(
                    "the request carries no {SIGNED_AT_MS}: this server takes only signed \
                     requests that carry their time (acl_signature_time_required)"
                )))
            } else {
                Ok(())
            };
        };
        let at: u64 = text.trim().parse().map_err(|_| {
            Denied(format!(
                "{SIGNED_AT_MS} `{text}` is not a time in ms since the epoch"
            ))
        })?;
        let off_ms = at.abs_diff(now_ms);
        if off_ms > self.window_ms {
            return Err(Denied(format!(
                "the request was signed {off_ms} ms {} this server's clock, outside the window \
                 of {} ms either side (acl_signature_window_ms): a replay, or a clock out of step",
                if at < now_ms { "before" } else { "after" },
                self.window_ms
            )));
        }
        self.forget(now_ms);
        // The signature is base64 of a MAC: the trimmed text is what was verified.
        let key = signature.trim();
        if self.seen.contains(key) {
            return Err(Denied(
                "the request is a replay: a request with this signature was already taken \
                 within the window (acl_signature_window_ms)"
                    .into(),
            ));
        }
        if self.seen.len() >= self.entries_max {
            return Err(Denied(format!(
                "more than {} signed requests within the window: refused until it passes",
                self.entries_max
            )));
        }
        self.seen.insert(key.to_owned());
        self.by_expiry
            .insert((at.saturating_add(self.window_ms), key.to_owned()));
        Ok(())
    }

    /// Forgets the signatures whose window has passed: the time check refuses them now.
    fn forget(&mut self, now_ms: u64) {
        while let Some((expires, _)) = self.by_expiry.first() {
            if *expires >= now_ms {
                break;
            }
            if let Some((_, sig)) = self.by_expiry.pop_first() {
                self.seen.remove(&sig);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000_000;

    #[test]
    fn a_request_is_taken_once_within_the_window() {
        let mut g = ReplayGuard::new(60_000, false);
        let at = T.to_string();
        assert!(g.check(Some(&at), "sig-a", T + 10).is_ok());
        let e = g.check(Some(&at), "sig-a", T + 20).unwrap_err();
        assert!(e.0.contains("replay"), "{e}");
        // Whitespace around the signature is the same signature.
        assert!(g.check(Some(&at), " sig-a ", T + 20).is_err());
        assert!(g.check(Some(&at), "sig-b", T + 20).is_ok());
        assert_eq!(g.remembered(), 2);
    }

    #[test]
    fn a_time_outside_the_window_is_refused_either_side() {
        let mut g = ReplayGuard::new(60_000, false);
        let old = (T - 60_001).to_string();
        let e = g.check(Some(&old), "s1", T).unwrap_err();
        assert!(e.0.contains("60001 ms before"), "{e}");
        let ahead = (T + 60_001).to_string();
        let e = g.check(Some(&ahead), "s2", T).unwrap_err();
        assert!(e.0.contains("after"), "{e}");
        assert!(g.check(Some(&(T - 60_000).to_string()), "s3", T).is_ok());
        assert!(g.check(Some("soon"), "s4", T).is_err());
        assert_eq!(g.remembered(), 1);
    }

    #[test]
    fn a_replay_after_the_window_is_refused_by_its_time_and_forgotten() {
        let mut g = ReplayGuard::new(1_000, false);
        let at = T.to_string();
        assert!(g.check(Some(&at), "s", T).is_ok());
        assert!(
            g.check(Some(&at), "s", T + 1_000).is_err(),
            "still remembered"
        );
        let e = g.check(Some(&at), "s", T + 1_001).unwrap_err();
        assert!(e.0.contains("outside the window"), "{e}");
        // Another request later makes the guard forget what the window has passed over.
        assert!(g
            .check(Some(&(T + 5_000).to_string()), "t", T + 5_000)
            .is_ok());
        assert_eq!(g.remembered(), 1);
    }

    #[test]
    fn requests_without_a_time_pass_unless_one_is_required() {
        let mut lax = ReplayGuard::new(1_000, false);
        assert!(lax.check(None, "s", T).is_ok());
        assert!(
            lax.check(None, "s", T).is_ok(),
            "RocketMQ's clients: as before"
        );
        assert_eq!(lax.remembered(), 0);
        let mut strict = ReplayGuard::new(1_000, true);
        let e = strict.check(None, "s", T).unwrap_err();
        assert!(e.0.contains("acl_signature_time_required"), "{e}");
    }

    #[test]
    fn a_full_guard_refuses_rather_than_forgets() {
        let mut g = ReplayGuard::with_entries_max(1_000, false, 2);
        let at = T.to_string();
        assert!(g.check(Some(&at), "a", T).is_ok());
        assert!(g.check(Some(&at), "b", T).is_ok());
        assert!(g.check(Some(&at), "c", T).is_err());
        assert!(g.check(Some(&at), "a", T).is_err(), "still a replay");
        let later = (T + 2_000).to_string();
        assert!(g.check(Some(&later), "c", T + 2_000).is_ok());
    }

    #[test]
    fn stamp_gives_a_current_time_and_a_fresh_nonce() {
        let [(k1, t), (k2, n)] = stamp();
        assert_eq!((k1, k2), (SIGNED_AT_MS, NONCE));
        let t: u64 = t.parse().unwrap();
        assert!(t.abs_diff(now_ms()) < 60_000);
        assert_ne!(n, stamp()[1].1);
    }
}
