//! A rules file, reloaded when it changes: its holder calls [`RulesFile::poll`] now and then
//! (the broker: each core on its own timer, so the rules are never shared across threads
//! and the data path takes no lock). A changed file that does not parse keeps the old rules;
//! the poll says why, once per change.
//!
//! Two kinds of file are watched this way: ACL 1.0's `plain_acl.yml` ([`AclFile`]) and
//! ACL 2.0's users and ACLs in their stored JSON form ([`AuthFile`], the NameServer's
//! `--auth-file`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::v2::AuthMetadata;
use crate::{AclConfig, AclError};

/// What a [`RulesFile`] holds: rules read from the whole text of a file.
pub trait Rules: Sized {
    /// What the log calls the file.
    const KIND: &'static str;

    /// The rules of `text`; a parse error names where it is.
    fn from_text(text: &[u8]) -> Result<Self, AclError>;
}

impl Rules for AclConfig {
    const KIND: &'static str = "ACL file";

    fn from_text(text: &[u8]) -> Result<AclConfig, AclError> {
        let text = std::str::from_utf8(text).map_err(|e| AclError::Parse {
            line: None,
            reason: format!("not UTF-8: {e}"),
        })?;
        AclConfig::parse(text)
    }
}

impl Rules for AuthMetadata {
    const KIND: &'static str = "ACL 2.0 users and ACLs file";

    fn from_text(text: &[u8]) -> Result<AuthMetadata, AclError> {
        AuthMetadata::from_json(text).map_err(|reason| AclError::Parse { line: None, reason })
    }
}

/// ACL 1.0's `plain_acl.yml`, reloaded when it changes.
pub type AclFile = RulesFile<AclConfig>;

/// ACL 2.0's users and ACLs (the JSON a broker keeps in `config/auth.json`), reloaded when
/// it changes.
pub type AuthFile = RulesFile<AuthMetadata>;

/// How often a holder reads the file again: the broker's cores each on a timer of its own,
/// the NameServer and the controller at the first request after it has passed
/// ([`AclFile::rules_polled`]).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The file and the rules last read from it.
#[derive(Debug)]
pub struct RulesFile<T> {
    path: PathBuf,
    /// The text the rules (or the last refusal) came from: a poll that reads the same text
    /// does nothing, whatever the file's timestamps say.
    last_text: Option<Vec<u8>>,
    rules: Arc<T>,
    /// When the file was last read.
    polled: Instant,
}

/// What a poll found.
#[derive(Debug)]
pub enum Reload {
    Unchanged,
    /// New rules are in force.
    Reloaded,
    /// The file changed (or went away) and could not be used; the old rules stay.
    Failed(AclError),
}

impl<T: Rules> RulesFile<T> {
    /// Reads the file; a missing or malformed file is an error (the broker then does not
    /// start: ACL on with no rules is a mistake to hear about at once).
    pub fn open(path: &Path) -> Result<RulesFile<T>, AclError> {
        let text = std::fs::read(path).map_err(|source| AclError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let rules = parse_bytes(path, &text)?;
        Ok(RulesFile {
            path: path.to_path_buf(),
            last_text: Some(text),
            rules: Arc::new(rules),
            polled: Instant::now(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rules in force.
    pub fn rules(&self) -> &Arc<T> {
        &self.rules
    }

    /// [`AclFile::poll`], saying what changed in the log when `log` is set (a broker's cores
    /// each poll their own copy, and one of them speaks for all).
    pub fn poll_logged(&mut self, log: bool) {
        match self.poll() {
            Reload::Unchanged => {}
            Reload::Reloaded if log => tracing::info!(
                path = %self.path.display(),
                "{} reloaded: its rules are in force",
                T::KIND
            ),
            Reload::Failed(e) if log => tracing::warn!(
                path = %self.path.display(),
                "{} changed but cannot be used, the previous rules stay in force: {e}",
                T::KIND
            ),
            Reload::Reloaded | Reload::Failed(_) => {}
        }
    }

    /// The rules in force, after reading the file again (and saying what changed) if
    /// [`POLL_INTERVAL`] has passed since the last read: for a holder that polls when asked
    /// rather than on a timer.
    pub fn rules_polled(&mut self) -> &Arc<T> {
        if self.polled.elapsed() >= POLL_INTERVAL {
            self.poll_logged(true);
        }
        &self.rules
    }

    /// Reads the file again and takes its rules if it changed and parses.
    pub fn poll(&mut self) -> Reload {
        self.polled = Instant::now();
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(source) => {
                // Report a vanished file once, not at every poll.
                if self.last_text.take().is_none() {
                    return Reload::Unchanged;
                }
                return Reload::Failed(AclError::Io {
                    path: self.path.display().to_string(),
                    source,
                });
            }
        };
        if self.last_text.as_deref() == Some(&text[..]) {
            return Reload::Unchanged;
        }
        let parsed = parse_bytes(&self.path, &text);
        self.last_text = Some(text);
        match parsed {
            Ok(rules) => {
                self.rules = Arc::new(rules);
                Reload::Reloaded
            }
            Err(e) => Reload::Failed(e),
        }
    }
}

fn parse_bytes<T: Rules>(path: &Path, text: &[u8]) -> Result<T, AclError> {
    T::from_text(text).map_err(|e| match e {
        AclError::Parse { line, reason } => AclError::Parse {
            line,
            reason: format!("{}: {reason}", path.display()),
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "accounts:\n  - accessKey: account1\n    secretKey: secret123\n";
    const TWO: &str = "accounts:\n  - accessKey: account2\n    secretKey: secret123\n";

    #[test]
    fn reload_takes_good_files_and_keeps_old_rules_on_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, ONE).unwrap();
        let mut f = AclFile::open(&path).unwrap();
        assert!(f.rules().account("account1").is_some());
        assert!(matches!(f.poll(), Reload::Unchanged));

        std::fs::write(&path, TWO).unwrap();
        assert!(matches!(f.poll(), Reload::Reloaded));
        assert!(f.rules().account("account2").is_some());
        assert!(f.rules().account("account1").is_none());

        std::fs::write(&path, "accounts:\n  - accessKey: short\n").unwrap();
        match f.poll() {
            Reload::Failed(e) => assert!(e.to_string().contains("line 2"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(f.rules().account("account2").is_some(), "old rules kept");
        assert!(matches!(f.poll(), Reload::Unchanged), "reported once");

        std::fs::remove_file(&path).unwrap();
        assert!(matches!(f.poll(), Reload::Failed(AclError::Io { .. })));
        assert!(matches!(f.poll(), Reload::Unchanged));
        assert!(f.rules().account("account2").is_some());
        std::fs::write(&path, ONE).unwrap();
        assert!(matches!(f.poll(), Reload::Reloaded));
        assert!(f.rules().account("account1").is_some());

        assert!(AclFile::open(&dir.path().join("missing.yml")).is_err());
    }

    #[test]
    fn the_auth_file_reloads_the_same_way() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.json");
        let users = |name: &str| {
            format!(
                r#"{{"users":[{{"username":"{name}","password":"pw-123456","userType":"Super","userStatus":"enable"}}],"acls":[]}}"#
            )
        };
        std::fs::write(&path, users("admin")).unwrap();
        let mut f = AuthFile::open(&path).unwrap();
        assert!(f.rules().user("admin").is_some());
        std::fs::write(&path, users("root")).unwrap();
        assert!(matches!(f.poll(), Reload::Reloaded));
        assert!(f.rules().user("root").is_some());
        std::fs::write(&path, "{\"users\": 3}").unwrap();
        match f.poll() {
            Reload::Failed(e) => assert!(e.to_string().contains("auth.json"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(f.rules().user("root").is_some(), "old users kept");
        std::fs::write(&path, "not json").unwrap();
        assert!(AuthFile::open(&path).is_err());
    }
}
