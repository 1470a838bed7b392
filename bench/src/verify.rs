//! Consume-side checks: every message the producers sent arrives exactly once.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::body::BodyHeader;

/// One bit per (producer, sequence number) sent by a produce run of this process.
pub struct Verifier {
    bits: Vec<Vec<AtomicU64>>,
    /// Sequence numbers at or above these are unexpected; the capacity until [`Verifier::finish`].
    sent: Vec<AtomicU64>,
    acked: AtomicU64,
    seen: AtomicU64,
    duplicates: AtomicU64,
    unexpected: AtomicU64,
}

/// What the consumers got compared with what was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    pub received: u64,
    pub unique: u64,
    pub duplicates: u64,
    /// Acknowledged messages that never arrived.
    pub missing: u64,
    /// Bodies without the bench header or from an unknown producer / sequence number.
    pub unexpected: u64,
}

impl Verdict {
    pub fn errors(&self) -> u64 {
        self.duplicates + self.missing + self.unexpected
    }

    pub fn details(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.missing > 0 {
            out.push(format!("{} acknowledged message(s) missing", self.missing));
        }
        if self.duplicates > 0 {
            out.push(format!("{} duplicate message(s)", self.duplicates));
        }
        if self.unexpected > 0 {
            out.push(format!("{} unexpected message(s)", self.unexpected));
        }
        out
    }
}

impl Verifier {
    /// `sent[p]` = messages producer `p` sent (sequence numbers 0..sent[p]); `acked` = how
    /// many of them the broker acknowledged.
    pub fn new(sent: &[u64], acked: u64) -> Verifier {
        let v = Verifier::with_capacity(sent);
        v.finish(sent, acked);
        v
    }

    /// For consumers that start before the producers end: room for `capacity[p]` messages
    /// of producer `p`; [`Verifier::finish`] tells what was actually sent.
    pub fn with_capacity(capacity: &[u64]) -> Verifier {
        Verifier {
            bits: capacity
                .iter()
                .map(|&n| (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            sent: capacity.iter().map(|&n| AtomicU64::new(n)).collect(),
            acked: AtomicU64::new(u64::MAX),
            seen: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            unexpected: AtomicU64::new(0),
        }
    }

    /// What the producers sent (per producer) and how many the broker acknowledged.
    pub fn finish(&self, sent: &[u64], acked: u64) {
        for (slot, &n) in self.sent.iter().zip(sent) {
            let cap = slot.load(Ordering::Relaxed);
            slot.store(n.min(cap), Ordering::Relaxed);
        }
        self.acked.store(acked, Ordering::Release);
    }

    /// Records one received body; returns its header when it is a bench body.
    pub fn record(&self, body: &[u8]) -> Option<BodyHeader> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let Some(h) = BodyHeader::parse(body) else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let p = h.producer as usize;
        if p >= self.sent.len() || h.seq >= self.sent[p].load(Ordering::Relaxed) {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return Some(h);
        }
        let mask = 1u64 << (h.seq % 64);
        let old = self.bits[p][(h.seq / 64) as usize].fetch_or(mask, Ordering::Relaxed);
        if old & mask != 0 {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        Some(h)
    }

    /// Messages received once so far.
    pub fn unique(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
            - self.duplicates.load(Ordering::Relaxed)
            - self.unexpected.load(Ordering::Relaxed)
    }

    /// `u64::MAX` until [`Verifier::finish`].
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    pub fn verdict(&self) -> Verdict {
        let unique = self.unique();
        Verdict {
            received: self.seen.load(Ordering::Relaxed),
            unique,
            duplicates: self.duplicates.load(Ordering::Relaxed),
            missing: self.acked().saturating_sub(unique),
            unexpected: self.unexpected.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::batch_bodies;

    #[test]
    fn counts_missing_duplicates_and_strangers() {
        let v = Verifier::new(&[3, 100], 103);
        for b in batch_bodies(0, 0, 3, 64, 0) {
            v.record(&b);
        }
        for b in batch_bodies(1, 0, 99, 64, 0) {
            v.record(&b);
        }
        v.record(&batch_bodies(1, 5, 1, 64, 0)[0]); // duplicate
        v.record(&batch_bodies(2, 0, 1, 64, 0)[0]); // unknown producer
        v.record(&batch_bodies(0, 3, 1, 64, 0)[0]); // beyond what was sent
        v.record(b"not a bench body");
        let d = v.verdict();
        assert_eq!(d.received, 106);
        assert_eq!(d.unique, 102);
        assert_eq!(d.duplicates, 1);
        assert_eq!(d.unexpected, 3);
        assert_eq!(d.missing, 1);
        assert_eq!(d.errors(), 5);
        assert_eq!(d.details().len(), 3);
    }

    #[test]
    fn a_complete_run_is_clean() {
        let v = Verifier::new(&[130], 130);
        for b in batch_bodies(0, 0, 130, 32, 0) {
            v.record(&b);
        }
        assert_eq!(v.verdict().errors(), 0);
        assert_eq!(v.unique(), 130);
    }
}
