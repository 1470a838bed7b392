//! The clean-stop mark, and what a shard's open reports about the last stop.
//!
//! A shard that closes with everything written and synced leaves a small file,
//! `clean-stop`, in its directory, naming where its CommitLog ends. The next open takes the
//! mark away before anything is written, so a run that then crashes leaves none, and the
//! recovery report says "clean stop" only when the log ends exactly where the mark says.
//! The mark changes what is said, never what recovery does: the scan runs in full either
//! way, so a wrong or stale mark can cost a misleading line at worst, never a record.
//!
//! The mark is a plain file written with `std::fs` rather than through the storage seam:
//! it holds no data, and a fault injected into it could only change a log line.

use std::io::Write;
use std::path::Path;

use crate::commit_log::TailCut;
use crate::ShardError;

/// The mark's file name in the shard's directory.
pub(crate) const CLEAN_STOP_FILE: &str = "clean-stop";
const KEY: &str = "commit_log_end=";

/// Leaves the mark: `end` is the CommitLog's end, everything below it durable. Written to a
/// temporary name, synced and renamed, so a crash while writing it leaves no mark.
pub(crate) fn leave(dir: &Path, end: u64) -> Result<(), ShardError> {
    let tmp = dir.join(format!("{CLEAN_STOP_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{KEY}{end}\n").as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(CLEAN_STOP_FILE))?;
    sync_dir(dir)
}

/// Takes the mark away and returns the end it names; `None` when there is none (the last
/// run crashed, or this is the first) or it cannot be read as one (said in the log).
pub(crate) fn take(dir: &Path) -> Result<Option<u64>, ShardError> {
    let path = dir.join(CLEAN_STOP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // Unreadable bytes are no mark; the file still goes, below.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => String::new(),
        Err(e) => return Err(e.into()),
    };
    std::fs::remove_file(&path)?;
    sync_dir(dir)?;
    let end = text
        .trim()
        .strip_prefix(KEY)
        .and_then(|v| v.parse::<u64>().ok());
    if end.is_none() {
        tracing::warn!(
            path = %path.display(),
            "the clean-stop mark does not read \"{KEY}N\"; it is ignored (recovery is the same \
             either way, only its report is less precise)"
        );
    }
    Ok(end)
}

fn sync_dir(dir: &Path) -> Result<(), ShardError> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// What the last open found: how the previous run stopped, and what recovery did about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where the CommitLog ends after recovery.
    pub end: u64,
    /// The end the previous run's clean stop recorded, when it left a mark.
    pub clean_stop_end: Option<u64>,
    /// What recovery cut from the tail (bytes past the last valid record that are not
    /// zeros); `None` when only zeros follow the end.
    pub cut: Option<TailCut>,
    /// Damaged ranges inside the log recovery quarantined.
    pub quarantined_ranges: u64,
    /// Whole segments past the end deleted (they held no valid record).
    pub truncated_segments: u64,
    /// Records the tail ring held that the previous run had acknowledged and not written.
    pub ring_records: u64,
}

/// How loud a [`RecoveryReport`]'s line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportLevel {
    Info,
    Warn,
    Error,
}

impl RecoveryReport {
    /// The previous run stopped cleanly and recovery found the log exactly as it left it.
    pub fn is_clean_stop(&self) -> bool {
        self.clean_stop_end == Some(self.end)
            && self.cut.is_none()
            && self.quarantined_ranges == 0
            && self.truncated_segments == 0
            && self.ring_records == 0
    }

    /// The line an operator reads at start, and how loud it is. Quarantined ranges and
    /// tail-ring write-backs have lines of their own; this one says how the last run
    /// stopped and what, if anything, was cut from the end.
    pub fn line(&self) -> (ReportLevel, String) {
        let end = self.end;
        if self.is_clean_stop() {
            return (
                ReportLevel::Info,
                format!("clean stop: CommitLog ends at {end}, nothing to recover"),
            );
        }
        if let Some(mark) = self.clean_stop_end.filter(|&m| m != end) {
            // The last run synced everything up to `mark` and said so: a log that now ends
            // elsewhere was changed (or damaged) while no broker ran.
            let moved = if mark > end {
                format!("{} bytes it had synced are gone", mark - end)
            } else {
                format!("{} bytes past it now hold valid records", end - mark)
            };
            let cut = self
                .cut
                .map(|c| format!("; {}", cut_text(&c)))
                .unwrap_or_default();
            return (
                ReportLevel::Error,
                format!(
                    "the last run stopped cleanly with the CommitLog ending at {mark}, but its \
                     valid records now end at {end}: {moved}; the files were changed while \
                     no broker ran{cut}"
                ),
            );
        }
        if let Some(c) = &self.cut {
            let why = if self.clean_stop_end.is_some() {
                "; the last run stopped cleanly at this very end, so it did not write these \
                 bytes (something else wrote past the log's end)"
            } else {
                " (the last run did not stop cleanly: a torn last write)"
            };
            return (
                ReportLevel::Warn,
                format!(
                    "recovery cut the CommitLog at {}: {}{why}",
                    c.at,
                    cut_text(c)
                ),
            );
        }
        if self.clean_stop_end.is_some() {
            // Clean, at the right end, but with damage inside or segments past the end:
            // those have lines of their own.
            return (
                ReportLevel::Info,
                format!(
                    "clean stop: CommitLog ends at {end}; recovery found damage it reports \
                     above"
                ),
            );
        }
        if end == 0 && self.ring_records == 0 {
            return (
                ReportLevel::Info,
                "new CommitLog: nothing to recover".to_owned(),
            );
        }
        (
            ReportLevel::Warn,
            format!(
                "no clean-stop mark: the last run did not stop cleanly (a crash or a kill); \
                 recovery checked every record, the CommitLog ends at {end}, no torn write \
                 follows it and nothing was cut"
            ),
        )
    }

    /// Logs [`RecoveryReport::line`] at its level.
    pub fn log(&self, shard: u16) {
        let (level, line) = self.line();
        match level {
            ReportLevel::Info => tracing::info!(shard, "{line}"),
            ReportLevel::Warn => tracing::warn!(shard, "{line}"),
            ReportLevel::Error => tracing::error!(shard, "{line}"),
        }
    }
}

fn cut_text(c: &TailCut) -> String {
    let records = match c.records {
        0 => "no record header".to_owned(),
        1 => "1 record that failed its check or was cut short".to_owned(),
        n => format!("{n} records that failed their check or were cut short"),
    };
    let rest = if c.unparsed_bytes > 0 && c.records > 0 {
        format!(", then {} bytes that parse as no record", c.unparsed_bytes)
    } else if c.unparsed_bytes > 0 {
        format!(" ({} bytes that parse as no record)", c.unparsed_bytes)
    } else {
        String::new()
    };
    format!(
        "dropped {} bytes past the last valid record: {records}{rest}",
        c.bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        leave(dir.path(), 12345).unwrap();
        assert_eq!(take(dir.path()).unwrap(), Some(12345));
        assert_eq!(
            take(dir.path()).unwrap(),
            None,
            "taken away by the first open"
        );
        std::fs::write(dir.path().join(CLEAN_STOP_FILE), "garbage").unwrap();
        assert_eq!(take(dir.path()).unwrap(), None);
        assert!(!dir.path().join(CLEAN_STOP_FILE).exists());
    }

    #[test]
    fn the_line_names_a_clean_stop_and_counts_a_cut() {
        let clean = RecoveryReport {
            end: 4096,
            clean_stop_end: Some(4096),
            cut: None,
            quarantined_ranges: 0,
            truncated_segments: 0,
            ring_records: 0,
        };
        let (level, line) = clean.line();
        assert_eq!(level, ReportLevel::Info);
        assert_eq!(
            line,
            "clean stop: CommitLog ends at 4096, nothing to recover"
        );
        let torn = RecoveryReport {
            clean_stop_end: None,
            cut: Some(TailCut {
                at: 4096,
                bytes: 700,
                records: 2,
                unparsed_bytes: 100,
            }),
            ..clean
        };
        let (level, line) = torn.line();
        assert_eq!(level, ReportLevel::Warn);
        assert!(line.starts_with("recovery cut the CommitLog at 4096: dropped 700 bytes"));
        assert!(line.contains("2 records that failed their check"));
        assert!(line.contains("then 100 bytes that parse as no record"));
        let moved = RecoveryReport { end: 1000, ..clean };
        assert_eq!(moved.line().0, ReportLevel::Error);
    }
}
