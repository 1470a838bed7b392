//! ACL 2.0's users and ACLs (`acl::v2`), one set for the whole broker, kept in
//! `<data_dir>/config/auth.json` (RocketMQ keeps them under `<storePathRootDir>/config`
//! too) and rewritten whole at every change (a temporary file, fsync, rename, fsync of the
//! directory): changes are rare and the set is small.
//!
//! Readers take the current set as an `Arc` snapshot: every core checks
//! [`AuthStore::version`] (one atomic load) and takes the lock only when it moved, so a
//! change is effective on every core at its next request and the data path takes no lock.
//! A change is written to disk before it is in force, and one change at a time, whichever
//! core it arrives at. A master sends the whole set to its slaves after every change
//! (`broker-replication`'s AUTH frame); a slave takes it with [`AuthStore::replace_all`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use acl::v2::{AuthMetadata, ChangeError};

const FILE: &str = "auth.json";

#[derive(Debug, thiserror::Error)]
pub enum AuthStoreError {
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error("cannot read {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot write {path}: {message}")]
    Persist { path: PathBuf, message: String },
}

pub struct AuthStore {
    path: PathBuf,
    current: Mutex<Arc<AuthMetadata>>,
    /// Moves at every change in force (starts at 1).
    version: AtomicU64,
}

impl AuthStore {
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join(FILE)
    }

    /// An empty set that writes nowhere (a broker whose state is not yet opened; tests).
    pub fn empty() -> AuthStore {
        AuthStore {
            path: PathBuf::new(),
            current: Mutex::new(Arc::new(AuthMetadata::default())),
            version: AtomicU64::new(1),
        }
    }

    /// The set stored under `data_dir` (none yet: empty). A file that does not parse is an
    /// error: the broker does not start with its users forgotten.
    pub fn open(data_dir: &Path) -> Result<AuthStore, AuthStoreError> {
        let path = Self::file(data_dir);
        let meta = match std::fs::read(&path) {
            Ok(bytes) => {
                AuthMetadata::from_json(&bytes).map_err(|message| AuthStoreError::Load {
                    path: path.clone(),
                    message,
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AuthMetadata::default(),
            Err(e) => {
                return Err(AuthStoreError::Load {
                    path,
                    message: e.to_string(),
                })
            }
        };
        Ok(AuthStore {
            path,
            current: Mutex::new(Arc::new(meta)),
            version: AtomicU64::new(1),
        })
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> Arc<AuthMetadata> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Applies `f` to a copy of the set, writes the copy durably, then puts it in force.
    /// Blocking (an fsync): call it off the cores' executors (`spawn_blocking`).
    pub fn change<T>(
        &self,
        f: impl FnOnce(&mut AuthMetadata) -> Result<T, ChangeError>,
    ) -> Result<T, AuthStoreError> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = AuthMetadata::clone(&current);
        let out = f(&mut next)?;
        self.persist(&next)?;
        *current = Arc::new(next);
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(out)
    }

    /// Takes a whole set (a slave, from its master), written durably first. Unchanged
    /// sets are not written again.
    pub fn replace_all(&self, next: AuthMetadata) -> Result<bool, AuthStoreError> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if **current == next {
            return Ok(false);
        }
        self.persist(&next)?;
        *current = Arc::new(next);
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    fn persist(&self, meta: &AuthMetadata) -> Result<(), AuthStoreError> {
        if self.path.as_os_str().is_empty() {
            return Ok(());
        }
        let err = |e: std::io::Error| AuthStoreError::Persist {
            path: self.path.clone(),
            message: e.to_string(),
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        crate::durable::replace(&self.path, &meta.to_json()).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acl::v2::{User, UserInfo};

    fn user(name: &str) -> User {
        User::from_info(&UserInfo {
            username: Some(name.into()),
            password: Some("pw".into()),
            ..UserInfo::default()
        })
        .unwrap()
    }

    #[test]
    fn changes_are_stored_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = AuthStore::open(dir.path()).unwrap();
        let v = store.version();
        store.change(|m| m.create_user(user("a"))).unwrap();
        assert!(store.version() > v);
        // A refused change changes nothing, on disk or in force.
        let v = store.version();
        let mut other = user("a");
        other.password = "another".into();
        assert!(store.change(|m| m.create_user(other)).is_err());
        assert_eq!(store.version(), v);
        let again = AuthStore::open(dir.path()).unwrap();
        assert!(again.snapshot().user("a").is_some());
        assert!(!again
            .replace_all(AuthMetadata::clone(&store.snapshot()))
            .unwrap());
        assert!(again.replace_all(AuthMetadata::default()).unwrap());
        assert!(AuthStore::open(dir.path())
            .unwrap()
            .snapshot()
            .user("a")
            .is_none());
        std::fs::write(AuthStore::file(dir.path()), b"{not json").unwrap();
        assert!(AuthStore::open(dir.path()).is_err());
    }
}
