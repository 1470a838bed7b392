//! Damaged CommitLog bytes that are never served, and the count of queue entries readers
//! stepped over because of them.
//!
//! Two kinds, kept apart on purpose:
//! * **Ranges** found by recovery: `[start, end)` of one segment holds no valid record (a
//!   damaged record, and whatever lay between it and the next valid one). Any span that
//!   overlaps one is refused without reading it.
//! * **Spans** found by a read at run time: a ConsumeQueue entry `(offset, size)` whose
//!   record failed its check (a bit flip on disk since it was written). Only that exact
//!   span is refused afterwards: the entry is derived data and could itself be what is
//!   wrong, so the bytes around it are not condemned with it.
//!
//! Each is logged at ERROR once, when it is found; reads then step over it silently apart
//! from the `skipped_records` count, so a consumer loop never turns into a log flood.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

/// Recovery ranges logged one by one; beyond this a summary line counts the rest, so a
/// badly damaged disk does not bury the log.
pub(crate) const LOGGED_RANGES_MAX: usize = 64;
/// Missing ConsumeQueue entries (holes) reported one by one, at most.
const REPORTED_HOLES_MAX: usize = 4096;
/// Skipped queue offsets remembered per queue (for consumer progress), in all; past this a
/// newly skipped offset is logged but no longer counted per queue.
const SKIPPED_OFFSETS_MAX: usize = 1 << 16;

/// A range of the CommitLog that holds no valid record and is never served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedRange {
    /// The segment file holding the range.
    pub segment: PathBuf,
    /// Commit-log offsets `[start, end)`, inside that segment.
    pub start: u64,
    pub end: u64,
    /// True when recovery found it (a whole damaged range); false for one record's span a
    /// read found failing its check while the shard ran.
    pub found_by_recovery: bool,
}

impl QuarantinedRange {
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

#[derive(Default)]
pub(crate) struct Quarantine {
    /// Recovery ranges, sorted by start, never overlapping.
    ranges: Vec<QuarantinedRange>,
    /// Run-time spans by offset: (size, segment path).
    spans: BTreeMap<u64, (u64, PathBuf)>,
    /// Queue entries readers stepped over (quarantined records and missing entries).
    pub(crate) skipped_records: u64,
    /// Ranges whose first step-over by a reader has been logged.
    reported: HashSet<u64>,
    /// Ranges whose first step-over by a log walker (timer, replication) has been logged.
    walked: HashSet<u64>,
    /// (topic, queue, queue offset) of missing entries already logged.
    reported_holes: HashSet<(String, u32, u64)>,
    /// The distinct queue offsets of each queue that reads stepped over.
    skipped_offsets: HashMap<(String, u32), BTreeSet<u64>>,
    skipped_offsets_len: usize,
}

impl Quarantine {
    /// Takes recovery's ranges (sorted, disjoint: the scan found them in log order).
    pub(crate) fn from_recovery(ranges: Vec<QuarantinedRange>) -> Quarantine {
        debug_assert!(ranges.windows(2).all(|w| w[0].end <= w[1].start));
        Quarantine {
            ranges,
            ..Default::default()
        }
    }

    /// The quarantined range that `[offset, offset + len)` overlaps, if any.
    pub(crate) fn blocking(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        // Asked for every entry a read looks at: nearly always nothing is quarantined.
        if self.ranges.is_empty() && self.spans.is_empty() {
            return None;
        }
        let end = offset + len.max(1);
        let i = self.ranges.partition_point(|r| r.end <= offset);
        if let Some(r) = self.ranges.get(i) {
            if r.start < end {
                return Some((r.start, r.end));
            }
        }
        match self.spans.get(&offset) {
            Some(&(l, _)) if l == len => Some((offset, offset + l)),
            _ => None,
        }
    }

    /// The first quarantined range or span that ends after `offset`, as `[start, end)`:
    /// `start <= offset` when `offset` lies inside it. Walkers of the log by physical
    /// offset stop before it and resume at its end.
    pub(crate) fn next_after(&self, offset: u64) -> Option<(u64, u64)> {
        if self.ranges.is_empty() && self.spans.is_empty() {
            return None;
        }
        let i = self.ranges.partition_point(|r| r.end <= offset);
        let range = self.ranges.get(i).map(|r| (r.start, r.end));
        // A span is one record: one that starts before `offset` ends after it only when
        // `offset` lies inside it, and that span starts at most one record back.
        let before = self
            .spans
            .range(..=offset)
            .next_back()
            .map(|(&o, &(l, _))| (o, o + l))
            .filter(|&(_, e)| e > offset);
        let after = self
            .spans
            .range(offset + 1..)
            .next()
            .map(|(&o, &(l, _))| (o, o + l));
        [range, before, after]
            .into_iter()
            .flatten()
            .min_by_key(|&(s, _)| s)
    }

    /// Marks a range (by its start) as reported to a log walker; true the first time, when
    /// the caller logs it. Not counted in `skipped_records`, which counts queue entries.
    pub(crate) fn walk_over(&mut self, range_start: u64) -> bool {
        self.walked.insert(range_start)
    }

    /// Records a span a read found failing its check. Returns false if it was known.
    pub(crate) fn add_span(&mut self, offset: u64, len: u64, segment: PathBuf) -> bool {
        if self.blocking(offset, len).is_some() {
            return false;
        }
        self.spans.insert(offset, (len, segment));
        self.reported.insert(offset);
        true
    }

    /// Counts one queue entry stepped over; true if the range it lies in had not been
    /// reported to a reader before (the caller logs it then, once).
    pub(crate) fn step_over(&mut self, range_start: u64) -> bool {
        self.skipped_records += 1;
        self.reported.insert(range_start)
    }

    /// Counts a missing ConsumeQueue entry stepped over; true the first time it is seen
    /// (bounded, after which it is only counted).
    pub(crate) fn step_over_hole(&mut self, topic: &str, queue_id: u32, q: u64) -> bool {
        self.skipped_records += 1;
        if self.reported_holes.len() >= REPORTED_HOLES_MAX {
            return false;
        }
        self.reported_holes.insert((topic.to_owned(), queue_id, q))
    }

    /// Remembers that queue offset `q` of a queue was stepped over.
    pub(crate) fn note_skipped(&mut self, topic: &str, queue_id: u32, q: u64) {
        if self.skipped_offsets_len >= SKIPPED_OFFSETS_MAX {
            return;
        }
        let set = self
            .skipped_offsets
            .entry((topic.to_owned(), queue_id))
            .or_default();
        if set.insert(q) {
            self.skipped_offsets_len += 1;
        }
    }

    /// How many distinct queue offsets of a queue reads have stepped over.
    pub(crate) fn skipped_in_queue(&self, topic: &str, queue_id: u32) -> u64 {
        self.skipped_offsets
            .get(&(topic.to_owned(), queue_id))
            .map_or(0, |s| s.len() as u64)
    }

    /// Forgets what lies at or past `end` (a replica truncated its log there); a range
    /// across it ends there.
    pub(crate) fn forget_from(&mut self, end: u64) {
        self.ranges.retain(|r| r.start < end);
        if let Some(r) = self.ranges.last_mut() {
            r.end = r.end.min(end);
        }
        self.spans.retain(|&o, _| o < end);
    }

    /// Forgets what lies wholly below the log minimum (retention deleted it).
    pub(crate) fn forget_below(&mut self, min: u64) {
        self.ranges.retain(|r| r.end > min);
        self.spans.retain(|&o, (l, _)| o + *l > min);
    }

    pub(crate) fn count(&self) -> u64 {
        (self.ranges.len() + self.spans.len()) as u64
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.ranges.iter().map(QuarantinedRange::bytes).sum::<u64>()
            + self.spans.values().map(|(l, _)| l).sum::<u64>()
    }

    /// Every range and span, in log order.
    pub(crate) fn list(&self) -> Vec<QuarantinedRange> {
        let mut v = self.ranges.clone();
        v.extend(self.spans.iter().map(|(&o, (l, p))| QuarantinedRange {
            segment: p.clone(),
            start: o,
            end: o + l,
            found_by_recovery: false,
        }));
        v.sort_by_key(|r| r.start);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> QuarantinedRange {
        QuarantinedRange {
            segment: PathBuf::from("seg"),
            start,
            end,
            found_by_recovery: true,
        }
    }

    #[test]
    fn ranges_block_overlapping_spans_and_spans_only_themselves() {
        let mut q = Quarantine::from_recovery(vec![range(100, 200), range(500, 600)]);
        assert_eq!(q.blocking(0, 100), None, "ends where the range starts");
        assert_eq!(q.blocking(150, 10), Some((100, 200)));
        assert_eq!(q.blocking(50, 60), Some((100, 200)), "overlaps its start");
        assert_eq!(q.blocking(200, 300), None, "starts where the range ends");
        assert_eq!(q.blocking(590, 100), Some((500, 600)));
        assert!(q.add_span(1000, 50, PathBuf::from("seg")));
        assert!(!q.add_span(1000, 50, PathBuf::from("seg")), "known already");
        assert_eq!(q.blocking(1000, 50), Some((1000, 1050)));
        assert_eq!(
            q.blocking(1000, 40),
            None,
            "another span at the same offset"
        );
        assert_eq!(q.blocking(1010, 10), None, "a span inside is not condemned");
        assert_eq!(q.count(), 3);
        assert_eq!(q.bytes(), 250);
        q.forget_below(600);
        assert_eq!(q.count(), 1);
        assert_eq!(q.list()[0].start, 1000);
    }

    #[test]
    fn the_next_range_or_span_after_an_offset() {
        let mut q = Quarantine::from_recovery(vec![range(100, 200), range(500, 600)]);
        assert!(q.add_span(300, 50, PathBuf::from("seg")));
        assert_eq!(q.next_after(0), Some((100, 200)));
        assert_eq!(q.next_after(150), Some((100, 200)), "inside it");
        assert_eq!(
            q.next_after(200),
            Some((300, 350)),
            "a range ends at its end"
        );
        assert_eq!(q.next_after(320), Some((300, 350)), "inside a span");
        assert_eq!(q.next_after(350), Some((500, 600)));
        assert_eq!(q.next_after(600), None);
        assert_eq!(Quarantine::default().next_after(0), None);
    }

    #[test]
    fn a_range_is_reported_to_readers_once() {
        let mut q = Quarantine::from_recovery(vec![range(100, 200)]);
        assert!(q.step_over(100));
        assert!(!q.step_over(100));
        assert!(q.step_over_hole("t", 0, 7));
        assert!(!q.step_over_hole("t", 0, 7));
        assert_eq!(q.skipped_records, 4);
        q.note_skipped("t", 0, 7);
        q.note_skipped("t", 0, 7);
        q.note_skipped("t", 0, 9);
        q.note_skipped("t", 1, 7);
        assert_eq!(q.skipped_in_queue("t", 0), 2, "distinct offsets");
        assert_eq!(q.skipped_in_queue("t", 1), 1);
        assert_eq!(q.skipped_in_queue("u", 0), 0);
    }
}
