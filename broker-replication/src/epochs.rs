//! A shard's epoch history: `(epoch, start offset)` entries, oldest first. The bytes from
//! one entry's start to the next one's (or the log's end) were written by that epoch's
//! master. A broker that starts as a master opens a new epoch at its log's end before it
//! takes a send; a slave keeps its master's history. Two logs agree up to the end of the
//! newest epoch both have with the same start (RocketMQ's `findConsistentPoint`, Kafka's
//! leader epochs, KIP-101): a slave holding more than that cuts its log back there.
//!
//! Stored in the shard's directory as `epochs`, one `epoch start` line per entry, replaced
//! whole and durably.

use crate::error::ReplicationError;
use std::path::Path;

const FILE: &str = "epochs";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Epochs(pub Vec<(u32, u64)>);

impl Epochs {
    /// The history stored in `shard_dir` (empty when there is none yet).
    pub fn load(shard_dir: &Path) -> Result<Epochs, ReplicationError> {
        let path = shard_dir.join(FILE);
        let bad = |problem: String| ReplicationError::History {
            path: path.clone(),
            problem,
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Epochs::default()),
            Err(e) => return Err(bad(format!("cannot be read: {e}"))),
        };
        let mut v: Vec<(u32, u64)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let mut f = line.split_whitespace();
            let entry = match (f.next(), f.next(), f.next()) {
                (Some(e), Some(s), None) => e.parse().ok().zip(s.parse().ok()),
                _ => None,
            };
            let Some((epoch, start)) = entry else {
                return Err(bad(format!(
                    "line {}: `{line}` is not `epoch start`",
                    n + 1
                )));
            };
            if v.last().is_some_and(|&(e, s)| epoch <= e || start < s) {
                return Err(bad(format!("line {}: epochs and starts must grow", n + 1)));
            }
            v.push((epoch, start));
        }
        Ok(Epochs(v))
    }

    pub fn store(&self, shard_dir: &Path) -> std::io::Result<()> {
        let text: String = self.0.iter().map(|(e, s)| format!("{e} {s}\n")).collect();
        crate::durable::replace(&shard_dir.join(FILE), text.as_bytes())
    }

    pub fn current(&self) -> u32 {
        self.0.last().map_or(0, |&(e, _)| e)
    }

    /// A master starting with its log ending at `end`: the next epoch begins there. An
    /// epoch under which nothing was written gives its place to the new one.
    pub fn begin(&mut self, end: u64) -> u32 {
        self.begin_at(self.current() + 1, end)
    }

    /// A master elected by the controllers in `epoch` (newer than the current one), its
    /// log ending at `end`: as [`Epochs::begin`], with the controllers' number.
    pub fn begin_at(&mut self, epoch: u32, end: u64) -> u32 {
        if self.0.last().is_some_and(|&(_, s)| s == end) {
            self.0.pop();
        }
        self.0.push((epoch, end));
        epoch
    }

    /// Where a log with this history ending at `end` stops agreeing with one with history
    /// `other` ending at `other_end`: the end of the newest epoch both have with the same
    /// start, as far as both logs go. Without a history, a log is taken as a prefix of the
    /// other (`end` at most `other_end`). `None`: nothing in common.
    pub fn consistent_point(&self, end: u64, other: &Epochs, other_end: u64) -> Option<u64> {
        if self.0.is_empty() {
            return (end <= other_end).then_some(end);
        }
        for (i, &(epoch, start)) in self.0.iter().enumerate().rev() {
            let Some(j) = other.0.iter().position(|&(e, s)| e == epoch && s == start) else {
                continue;
            };
            let mine = self.0.get(i + 1).map_or(end, |&(_, s)| s).min(end);
            let theirs = other
                .0
                .get(j + 1)
                .map_or(other_end, |&(_, s)| s)
                .min(other_end);
            return Some(mine.min(theirs));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_master_back_as_a_slave_agrees_up_to_its_successors_first_write() {
        // The old master wrote epoch 3 from 1000 to 1800; the slave it had copied up to
        // 1500 became master (epoch 4 from 1500) and wrote to 2500.
        let old = Epochs(vec![(1, 0), (3, 1000)]);
        let new = Epochs(vec![(1, 0), (3, 1000), (4, 1500)]);
        assert_eq!(old.consistent_point(1800, &new, 2500), Some(1500));
        // A slave behind, in the same epoch: nothing to cut.
        assert_eq!(old.consistent_point(1200, &new, 2500), Some(1200));
        // A slave of the current epoch.
        assert_eq!(new.consistent_point(2000, &new, 2500), Some(2000));
        // Back to back: epoch 5 began at 1500 too (nothing written under 4), then 6.
        let later = Epochs(vec![(1, 0), (3, 1000), (5, 1500), (6, 1700)]);
        assert_eq!(old.consistent_point(1800, &later, 2000), Some(1500));
        // Nothing in common.
        assert_eq!(Epochs(vec![(7, 0)]).consistent_point(10, &new, 2500), None);
        // No history: a prefix, if not longer.
        assert_eq!(Epochs::default().consistent_point(10, &new, 2500), Some(10));
        assert_eq!(Epochs::default().consistent_point(3000, &new, 2500), None);
    }

    #[test]
    fn a_master_start_opens_an_epoch_and_the_history_survives_a_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Epochs::load(dir.path()).unwrap();
        assert_eq!(e.begin(0), 1);
        assert_eq!(e.begin(0), 2, "nothing written under 1: it gives its place");
        assert_eq!(e.begin(500), 3);
        assert_eq!(e.0, vec![(2, 0), (3, 500)]);
        e.store(dir.path()).unwrap();
        assert_eq!(Epochs::load(dir.path()).unwrap(), e);
        std::fs::write(dir.path().join(FILE), "3 500\n2 600\n").unwrap();
        assert!(Epochs::load(dir.path())
            .unwrap_err()
            .to_string()
            .contains("line 2"));
        std::fs::write(dir.path().join(FILE), "x\n").unwrap();
        assert!(Epochs::load(dir.path()).is_err());
    }
}
