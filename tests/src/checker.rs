//! Checks a fault run's history against the final log (the Jepsen "total queue" idea,
//! without a linearizability search, which a queue does not need):
//!
//! * lost = acknowledged sends missing from the final log;
//! * phantom = final-log messages that no send could have written (neither acknowledged
//!   nor unknown);
//! * inconsistent = one (queue, offset) seen with two different ids, by an acknowledgement,
//!   the final log or a consumer;
//! * uncommitted reads = delivered messages missing from the final log;
//! * order = per queue, the final log's offsets go 0, 1, 2, ... without gaps or repeats;
//! * duplicates = ids stored more than once (at-least-once: reported, not a failure).
//!
//! Pure: no I/O, so it is tested with synthetic histories.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::history::{Delivery, Op, Outcome, Stored};

/// How many examples a report keeps of each kind of violation.
pub const EXAMPLES_MAX: usize = 5;

/// One kind of violation: how many, and the first few.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finding {
    pub count: usize,
    pub examples: Vec<String>,
}

impl Finding {
    fn add(&mut self, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES_MAX {
            self.examples.push(example());
        }
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub ops: usize,
    pub ok: usize,
    pub fail: usize,
    pub unknown: usize,
    pub stored: usize,
    pub deliveries: usize,
    /// Unknown sends that are in the final log.
    pub unknown_stored: usize,
    pub lost: Finding,
    pub phantom: Finding,
    pub inconsistent: Finding,
    pub uncommitted_reads: Finding,
    /// Offsets of a queue that are not 0, 1, 2, ... (a gap, a repeat, a step back).
    pub order: Finding,
    /// Ids stored at more than one place.
    pub duplicates: Finding,
    /// Ids a failed send used that are in the final log (a refusal that wrote).
    pub failed_but_stored: Finding,
    /// Deliveries at or below an offset of the same queue delivered before (a consumer
    /// going back, e.g. after a switch): reported, not a failure.
    pub redeliveries: Finding,
}

impl Report {
    /// Whether nothing acknowledged was lost and nothing impossible was seen: no loss, no
    /// phantom, no inconsistent offset, no uncommitted read, no order violation, and no
    /// refused send in the log.
    pub fn is_safe(&self) -> bool {
        self.lost.count == 0
            && self.phantom.count == 0
            && self.inconsistent.count == 0
            && self.uncommitted_reads.count == 0
            && self.order.count == 0
            && self.failed_but_stored.count == 0
    }

    /// Panics with the report unless [`Report::is_safe`] (the "must lose 0" suite).
    pub fn assert_safe(&self) {
        assert!(self.is_safe(), "the history is not safe:\n{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} sends: {} ok, {} fail, {} unknown ({} of them stored); {} stored, {} delivered",
            self.ops,
            self.ok,
            self.fail,
            self.unknown,
            self.unknown_stored,
            self.stored,
            self.deliveries
        )?;
        for (name, finding) in [
            ("lost", &self.lost),
            ("phantom", &self.phantom),
            ("inconsistent", &self.inconsistent),
            ("uncommitted reads", &self.uncommitted_reads),
            ("order", &self.order),
            ("failed but stored", &self.failed_but_stored),
            ("duplicates (not a failure)", &self.duplicates),
            ("redeliveries (not a failure)", &self.redeliveries),
        ] {
            write!(f, "  {name}: {}", finding.count)?;
            if !finding.examples.is_empty() {
                write!(f, " e.g. {}", finding.examples.join("; "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Checks `ops` (every send) and `deliveries` (what consumers got, possibly none) against
/// `stored` (the final log, read after the faults healed).
pub fn check(ops: &[Op], stored: &[Stored], deliveries: &[Delivery]) -> Report {
    let mut r = Report {
        ops: ops.len(),
        stored: stored.len(),
        deliveries: deliveries.len(),
        ..Report::default()
    };
    let mut outcome_of: HashMap<&str, Outcome> = HashMap::with_capacity(ops.len());
    for op in ops {
        match op.outcome {
            Outcome::Ok => r.ok += 1,
            Outcome::Fail => r.fail += 1,
            Outcome::Unknown => r.unknown += 1,
        }
        // An id is used by one send; if a history repeats one, the claim that allows the
        // most counts (ok, then unknown, then fail).
        let rank = |o: Outcome| match o {
            Outcome::Fail => 0,
            Outcome::Unknown => 1,
            Outcome::Ok => 2,
        };
        let e = outcome_of.entry(op.id.as_str()).or_insert(op.outcome);
        if rank(op.outcome) > rank(*e) {
            *e = op.outcome;
        }
    }

    // Who is where, from every source: the first id seen at each (queue, offset).
    let mut at: HashMap<(&str, u64), (&str, &'static str)> = HashMap::new();
    fn note<'a>(
        r: &mut Report,
        at: &mut HashMap<(&'a str, u64), (&'a str, &'static str)>,
        queue: &'a str,
        offset: u64,
        id: &'a str,
        source: &'static str,
    ) {
        match at.get(&(queue, offset)) {
            None => {
                at.insert((queue, offset), (id, source));
            }
            Some((first, first_source)) if *first != id => {
                let first = (*first).to_owned();
                let first_source = *first_source;
                r.inconsistent.add(|| {
                    format!("{queue}@{offset}: {first} ({first_source}) and {id} ({source})")
                });
            }
            Some(_) => {}
        }
    }
    for s in stored {
        note(&mut r, &mut at, &s.queue, s.offset, &s.id, "final log");
    }
    for op in ops.iter().filter(|o| o.outcome == Outcome::Ok) {
        if let Some(offset) = op.offset {
            note(&mut r, &mut at, &op.queue, offset, &op.id, "ack");
        }
    }
    for d in deliveries {
        note(&mut r, &mut at, &d.queue, d.offset, &d.id, "delivery");
    }

    // The final log by id, and each queue's offsets in log order.
    let mut places: HashMap<&str, usize> = HashMap::with_capacity(stored.len());
    let mut per_queue: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for s in stored {
        *places.entry(s.id.as_str()).or_default() += 1;
        per_queue
            .entry(s.queue.as_str())
            .or_default()
            .push(s.offset);
    }
    for (queue, offsets) in &per_queue {
        let mut expected = 0u64;
        for &o in offsets {
            if o != expected {
                r.order
                    .add(|| format!("{queue}: offset {o} where {expected} was next"));
            }
            expected = o.max(expected) + 1;
        }
    }
    let mut dup_seen: HashSet<&str> = HashSet::new();
    for s in stored {
        let n = places[s.id.as_str()];
        if n > 1 && dup_seen.insert(s.id.as_str()) {
            r.duplicates.add(|| format!("{} stored {n} times", s.id));
        }
        match outcome_of.get(s.id.as_str()) {
            Some(Outcome::Ok) => {}
            Some(Outcome::Unknown) => {}
            Some(Outcome::Fail) => r
                .failed_but_stored
                .add(|| format!("{} at {}@{} was refused", s.id, s.queue, s.offset)),
            None => r
                .phantom
                .add(|| format!("{} at {}@{} was never sent", s.id, s.queue, s.offset)),
        }
    }
    r.unknown_stored = places
        .keys()
        .filter(|id| outcome_of.get(*id) == Some(&Outcome::Unknown))
        .count();
    for op in ops.iter().filter(|o| o.outcome == Outcome::Ok) {
        if !places.contains_key(op.id.as_str()) {
            r.lost.add(|| {
                format!(
                    "{} acked at {}@{} ({} ms)",
                    op.id,
                    op.queue,
                    op.offset.map_or("?".into(), |o| o.to_string()),
                    op.t_end_ms
                )
            });
        }
    }
    let mut delivered_max: HashMap<&str, u64> = HashMap::new();
    for d in deliveries {
        match delivered_max.get_mut(d.queue.as_str()) {
            Some(max) if d.offset <= *max => r
                .redeliveries
                .add(|| format!("{}@{} after {}@{max}", d.queue, d.offset, d.queue)),
            Some(max) => *max = d.offset,
            None => {
                delivered_max.insert(&d.queue, d.offset);
            }
        }
        if !places.contains_key(d.id.as_str()) {
            r.uncommitted_reads
                .add(|| format!("{} delivered from {}@{}", d.id, d.queue, d.offset));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str, q: u32, outcome: Outcome, offset: Option<u64>) -> Op {
        Op {
            id: id.into(),
            queue: format!("b#{q}"),
            t_start_ms: 1,
            t_end_ms: 2,
            outcome,
            offset,
            error: None,
        }
    }

    fn st(q: u32, offset: u64, id: &str) -> Stored {
        Stored {
            queue: format!("b#{q}"),
            offset,
            id: id.into(),
        }
    }

    fn dl(q: u32, offset: u64, id: &str) -> Delivery {
        Delivery {
            queue: format!("b#{q}"),
            offset,
            id: id.into(),
            t_ms: 3,
        }
    }

    /// A clean run: acked ones stored where acked, one unknown stored, one not, a refused
    /// one absent, a redelivery.
    fn clean() -> (Vec<Op>, Vec<Stored>, Vec<Delivery>) {
        let ops = vec![
            op("p-0", 0, Outcome::Ok, Some(0)),
            op("p-1", 1, Outcome::Ok, Some(0)),
            op("p-2", 0, Outcome::Unknown, None),
            op("p-3", 1, Outcome::Unknown, None),
            op("p-4", 0, Outcome::Fail, None),
            op("p-5", 0, Outcome::Ok, Some(2)),
        ];
        let stored = vec![
            st(0, 0, "p-0"),
            st(0, 1, "p-2"),
            st(0, 2, "p-5"),
            st(1, 0, "p-1"),
        ];
        let deliveries = vec![dl(0, 0, "p-0"), dl(0, 0, "p-0"), dl(1, 0, "p-1")];
        (ops, stored, deliveries)
    }

    #[test]
    fn a_clean_history_is_safe() {
        let (ops, stored, deliveries) = clean();
        let r = check(&ops, &stored, &deliveries);
        assert!(r.is_safe(), "{r}");
        r.assert_safe();
        assert_eq!((r.ok, r.fail, r.unknown, r.unknown_stored), (3, 1, 2, 1));
        assert_eq!(r.duplicates.count, 0);
        // p-0 was delivered twice at b#0@0.
        assert_eq!(r.redeliveries.count, 1, "{r}");
    }

    #[test]
    fn an_acked_message_missing_from_the_log_is_lost() {
        let (ops, mut stored, deliveries) = clean();
        stored.retain(|s| s.id != "p-1");
        let r = check(&ops, &stored, &deliveries);
        assert_eq!(r.lost.count, 1, "{r}");
        assert!(r.lost.examples[0].contains("p-1"), "{r}");
        // p-1 was delivered and is gone: an uncommitted read too.
        assert_eq!(r.uncommitted_reads.count, 1, "{r}");
        assert!(!r.is_safe());
    }

    #[test]
    fn a_stored_message_nobody_sent_or_a_refused_one_is_a_violation() {
        let (ops, mut stored, deliveries) = clean();
        stored.push(st(1, 1, "ghost-0"));
        let r = check(&ops, &stored, &deliveries);
        assert_eq!(r.phantom.count, 1, "{r}");
        assert!(!r.is_safe());
        stored.pop();
        stored.push(st(1, 1, "p-4"));
        let r = check(&ops, &stored, &deliveries);
        assert_eq!((r.phantom.count, r.failed_but_stored.count), (0, 1), "{r}");
        assert!(!r.is_safe());
    }

    #[test]
    fn two_ids_at_one_offset_are_inconsistent() {
        let (ops, stored, mut deliveries) = clean();
        // A reader was given p-3 at b#1@0, where the final log has p-1.
        deliveries.push(dl(1, 0, "p-3"));
        let r = check(&ops, &stored, &deliveries);
        assert_eq!(r.inconsistent.count, 1, "{r}");
        assert!(r.inconsistent.examples[0].contains("b#1@0"), "{r}");
        assert!(!r.is_safe());
        // An ack that names an offset holding someone else.
        let (mut ops, stored, deliveries) = clean();
        ops[1].offset = Some(1);
        ops.push(op("p-6", 0, Outcome::Ok, Some(1)));
        let r = check(&ops, &stored, &deliveries);
        assert!(r.inconsistent.count >= 1, "{r}");
        assert_eq!(r.lost.count, 1, "p-6 is not stored: {r}");
    }

    #[test]
    fn gaps_and_repeats_in_a_queue_break_the_order() {
        let (ops, mut stored, deliveries) = clean();
        stored.retain(|s| !(s.queue == "b#0" && s.offset == 1));
        let r = check(&ops, &stored, &deliveries);
        assert_eq!(r.order.count, 1, "{r}");
        assert!(r.order.examples[0].contains("offset 2 where 1"), "{r}");
        let (ops, mut stored, deliveries) = clean();
        stored.swap(0, 1);
        let r = check(&ops, &stored, &deliveries);
        assert!(r.order.count >= 1, "{r}");
        assert!(!r.is_safe());
    }

    #[test]
    fn duplicates_are_counted_but_are_not_a_failure() {
        let (ops, mut stored, deliveries) = clean();
        stored.push(st(1, 1, "p-3"));
        stored.push(st(1, 2, "p-3"));
        let r = check(&ops, &stored, &deliveries);
        assert_eq!(r.duplicates.count, 1, "{r}");
        assert!(r.is_safe(), "{r}");
        assert_eq!(r.unknown_stored, 2);
    }

    #[test]
    fn a_repeated_id_counts_its_weakest_claim() {
        let (mut ops, mut stored, deliveries) = clean();
        // p-4 failed once and was then unknown: stored is allowed.
        ops.push(op("p-4", 0, Outcome::Unknown, None));
        stored.push(st(1, 1, "p-4"));
        let r = check(&ops, &stored, &deliveries);
        assert!(r.is_safe(), "{r}");
    }

    #[test]
    fn examples_are_bounded() {
        let ops: Vec<Op> = (0..50)
            .map(|i| op(&format!("p-{i}"), 0, Outcome::Ok, Some(i)))
            .collect();
        let r = check(&ops, &[], &[]);
        assert_eq!(r.lost.count, 50);
        assert_eq!(r.lost.examples.len(), EXAMPLES_MAX);
        let text = r.to_string();
        assert!(text.contains("lost: 50"), "{text}");
    }
}
