//! Directory layout of a data directory and of one shard.
//!
//! ```text
//! root/store.meta                          "shard_count=N\nstore_id=<16 hex>\n", fixed at creation
//! root/shard-000/commitlog/<20-digit start offset>
//! root/shard-000/consumequeue/<topic>/<queue>/<20-digit first queue offset>
//! root/shard-000/index/<20-digit first commit-log offset>
//! ```

use std::path::{Path, PathBuf};

use crate::ShardError;

pub(crate) const COMMIT_LOG_DIR: &str = "commitlog";
pub(crate) const CONSUME_QUEUE_DIR: &str = "consumequeue";
pub(crate) const INDEX_DIR: &str = "index";
const STORE_META: &str = "store.meta";
const STORE_LOCK: &str = "store.lock";

/// The shards of one data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDirLayout {
    pub root: PathBuf,
    /// Fixed when the directory was created; a broker with another core count still serves
    /// every shard (shard s runs on core s % cores).
    pub shard_count: u16,
    /// A random id given to the directory when it was created (or when a directory from an
    /// older version was first opened). It names what belongs to this store outside the
    /// directory, such as the shards' tail rings in shared memory, so that state left by a
    /// deleted or replaced directory is never taken for this one's.
    pub store_id: u64,
    /// `shard_dirs[s]` is shard s's own directory.
    pub shard_dirs: Vec<PathBuf>,
}

pub fn shard_dir(root: &Path, shard: u16) -> PathBuf {
    root.join(format!("shard-{shard:03}"))
}

/// Creates or reads `root/store.meta`. `shard_count_if_new` is used only when the data
/// directory is new. Refuses (`StoreInconsistent`) a directory whose shard directories do
/// not match it: `store.meta` missing beside shard directories, a shard directory at or
/// past `shard_count`, or one below it missing while another shard holds data.
pub fn open_data_dir(root: &Path, shard_count_if_new: u16) -> Result<DataDirLayout, ShardError> {
    std::fs::create_dir_all(root)?;
    let meta = root.join(STORE_META);
    let found = shard_dirs_in(root)?;
    let (shard_count, store_id) = match std::fs::read_to_string(&meta) {
        Ok(text) => {
            let meta_text = parse_meta(&text).ok_or_else(|| ShardError::Corrupt {
                path: meta.display().to_string(),
                reason: format!(
                    "expected \"shard_count=N\" with N >= 1 (and \"store_id=HEX\"), found {text:?}"
                ),
            })?;
            match meta_text {
                (n, Some(id)) => (n, id),
                (n, None) => {
                    // A directory from before store ids: give it one, once.
                    let id = new_store_id()?;
                    write_meta(root, n, id)?;
                    (n, id)
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(&last) = found.last() {
                // Without store.meta the shard count is unknown: guessing it from the
                // directories could drop a shard whose directory is gone too.
                return Err(ShardError::StoreInconsistent {
                    path: meta.display().to_string(),
                    problem: format!(
                        "store.meta is missing, but {} shard director{} exist ({})",
                        found.len(),
                        if found.len() == 1 { "y" } else { "ies" },
                        names(&found)
                    ),
                    remedy: format!(
                        "restore store.meta from a backup (it also holds the store_id that \
                         names this store's tail rings); or, if every shard directory is \
                         there, write it as \"shard_count={}\" (one more than the highest \
                         shard, shard-{last:03}; a new store_id is then given, so a tail ring \
                         of the last run is not replayed); or move the data directory away \
                         to start with an empty store",
                        u32::from(last) + 1
                    ),
                });
            }
            if shard_count_if_new == 0 {
                return Err(ShardError::Config("shard count must be >= 1".into()));
            }
            let id = new_store_id()?;
            write_meta(root, shard_count_if_new, id)?;
            (shard_count_if_new, id)
        }
        Err(e) => return Err(e.into()),
    };
    check_shard_dirs(root, shard_count, &found)?;
    let shard_dirs = (0..shard_count).map(|s| shard_dir(root, s)).collect();
    Ok(DataDirLayout {
        root: root.to_owned(),
        shard_count,
        store_id,
        shard_dirs,
    })
}

/// Held while a broker serves a data directory (an exclusive `flock` of
/// `root/store.lock`, released when the process ends however it ends): a second broker on
/// the same directory would append to the same segments and share the shards' tail rings.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Locks `root` (created if missing) for this process, or says who holds it.
pub fn lock_data_dir(root: &Path) -> Result<DataDirLock, ShardError> {
    use std::io::Write;
    use std::os::unix::io::AsRawFd;
    std::fs::create_dir_all(root)?;
    let path = root.join(STORE_LOCK);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    // SAFETY: flock takes a descriptor we hold open and plain flags.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e.into());
        }
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(ShardError::StoreInconsistent {
            path: root.display().to_string(),
            problem: format!(
                "another process serves this data directory ({})",
                holder.trim()
            ),
            remedy: "stop that broker first, or give this one another data_dir".into(),
        });
    }
    file.set_len(0)?;
    writeln!(file, "pid {}", std::process::id())?;
    Ok(DataDirLock { _file: file })
}

/// The shard numbers of the `shard-NNN` directories under `root`, sorted.
fn shard_dirs_in(root: &Path) -> Result<Vec<u16>, ShardError> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(root)? {
        let e = e?;
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("shard-"))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if !e.file_type()?.is_dir() {
            continue;
        }
        match n.parse::<u16>() {
            Ok(s) if shard_dir(root, s) == e.path() => found.push(s),
            // shard-7 or shard-99999 is no name this code gives: say so rather than skip it.
            _ => {
                return Err(ShardError::StoreInconsistent {
                    path: e.path().display().to_string(),
                    problem: "a directory named like a shard, but not as shards are named \
                              (shard-NNN, three digits or more, below 65536)"
                        .into(),
                    remedy: "move it out of the data directory".into(),
                })
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

fn names(shards: &[u16]) -> String {
    let mut v: Vec<String> = shards
        .iter()
        .take(8)
        .map(|s| format!("shard-{s:03}"))
        .collect();
    if shards.len() > 8 {
        v.push(format!("and {} more", shards.len() - 8));
    }
    v.join(", ")
}

/// Whether a shard directory holds messages: a CommitLog segment file.
fn holds_data(dir: &Path) -> Result<bool, ShardError> {
    let log = dir.join(COMMIT_LOG_DIR);
    let entries = match std::fs::read_dir(&log) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    for e in entries {
        if e?
            .file_name()
            .to_str()
            .and_then(parse_offset_name)
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks the shard directories found against `shard_count` from store.meta.
fn check_shard_dirs(root: &Path, shard_count: u16, found: &[u16]) -> Result<(), ShardError> {
    let extra: Vec<u16> = found
        .iter()
        .copied()
        .filter(|&s| s >= shard_count)
        .collect();
    if let Some(&last) = extra.last() {
        return Err(ShardError::StoreInconsistent {
            path: root.join(STORE_META).display().to_string(),
            problem: format!(
                "store.meta says shard_count={shard_count}, but {} exist{} past it, whose \
                 messages would never be served",
                names(&extra),
                if extra.len() == 1 { "s" } else { "" }
            ),
            remedy: format!(
                "if shard_count was changed, set it back (at least {}: the directories go up \
                 to shard-{last:03}; the broker serves every shard with any core count); if \
                 those directories do not belong to this store, move them out of the data \
                 directory",
                u32::from(last) + 1
            ),
        });
    }
    let missing: Vec<u16> = (0..shard_count).filter(|s| !found.contains(s)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    // A store whose shards have not all been created yet (a first start cut short) is new,
    // not damaged: only a store where some shard holds messages must have every directory.
    let mut with_data = Vec::new();
    for &s in found {
        if holds_data(&shard_dir(root, s))? {
            with_data.push(s);
        }
    }
    if with_data.is_empty() {
        return Ok(());
    }
    let first = shard_dir(root, missing[0]);
    Err(ShardError::StoreInconsistent {
        path: first.display().to_string(),
        problem: format!(
            "{} missing (store.meta says shard_count={shard_count}) while {} hold{} messages; \
             the messages of a missing shard would silently be gone",
            if missing.len() == 1 {
                format!("shard directory {} is", names(&missing))
            } else {
                format!("shard directories {} are", names(&missing))
            },
            names(&with_data),
            if with_data.len() == 1 { "s" } else { "" }
        ),
        remedy: format!(
            "restore the missing director{} from a backup; or, to accept that {} messages \
             are lost, create {} as an empty director{}; or move the data directory away to \
             start with an empty store",
            if missing.len() == 1 { "y" } else { "ies" },
            if missing.len() == 1 { "its" } else { "their" },
            if missing.len() == 1 {
                first.display().to_string()
            } else {
                "each of them".into()
            },
            if missing.len() == 1 { "y" } else { "ies" },
        ),
    })
}

/// Writes `store.meta` through a temporary file and a rename, so a crash never leaves a
/// half-written one.
fn write_meta(root: &Path, shard_count: u16, store_id: u64) -> Result<(), ShardError> {
    let tmp = root.join("store.meta.tmp");
    std::fs::write(
        &tmp,
        format!("shard_count={shard_count}\nstore_id={store_id:016x}\n"),
    )?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, root.join(STORE_META))?;
    std::fs::File::open(root)?.sync_all()?;
    Ok(())
}

/// 64 random bits from the kernel.
fn new_store_id() -> Result<u64, ShardError> {
    let mut b = [0u8; 8];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(u64::from_le_bytes(b).max(1))
}

/// `(shard_count, store_id)` from the meta file's lines.
fn parse_meta(text: &str) -> Option<(u16, Option<u64>)> {
    let mut count = None;
    let mut id = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(n) = line.strip_prefix("shard_count=") {
            count = Some(n.parse::<u16>().ok().filter(|&n| n >= 1)?);
        } else if let Some(h) = line.strip_prefix("store_id=") {
            id = Some(u64::from_str_radix(h, 16).ok()?);
        } else {
            return None;
        }
    }
    Some((count?, id))
}

pub(crate) fn offset_name(offset: u64) -> String {
    format!("{offset:020}")
}

pub(crate) fn parse_offset_name(name: &str) -> Option<u64> {
    if name.len() != 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Topic names become directory names: bytes outside `[A-Za-z0-9_%|-]` are escaped as
/// `~XX` so that no topic can climb out of the directory or collide with another.
pub(crate) fn topic_dir_name(topic: &str) -> String {
    let mut s = String::with_capacity(topic.len());
    for b in topic.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'%' | b'|') {
            s.push(b as char);
        } else {
            s.push_str(&format!("~{b:02X}"));
        }
    }
    s
}

pub(crate) fn topic_from_dir_name(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'~' {
            let hex = name.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_count_is_fixed_at_creation() {
        let dir = tempfile::tempdir().unwrap();
        let a = open_data_dir(dir.path(), 4).unwrap();
        assert_eq!(a.shard_count, 4);
        assert_eq!(a.shard_dirs[3], dir.path().join("shard-003"));
        let b = open_data_dir(dir.path(), 2).unwrap();
        assert_eq!(
            b.shard_count, 4,
            "restart with fewer cores keeps every shard"
        );
        assert_eq!(b.shard_dirs.len(), 4);
        assert_eq!(a.store_id, b.store_id, "the store id is kept");
        let other = tempfile::tempdir().unwrap();
        assert_ne!(open_data_dir(other.path(), 4).unwrap().store_id, a.store_id);
    }

    #[test]
    fn a_meta_file_without_an_id_gets_one_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("store.meta"), "shard_count=3\n").unwrap();
        let a = open_data_dir(dir.path(), 1).unwrap();
        assert_eq!(a.shard_count, 3);
        let b = open_data_dir(dir.path(), 1).unwrap();
        assert_eq!(a.store_id, b.store_id);
    }

    #[test]
    fn a_locked_data_dir_refuses_a_second_lock_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).unwrap();
        let err = lock_data_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("another process serves this data directory"),
            "{err}"
        );
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        lock_data_dir(dir.path()).unwrap();
    }

    #[test]
    fn corrupt_meta_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("store.meta"), "garbage").unwrap();
        assert!(matches!(
            open_data_dir(dir.path(), 2),
            Err(ShardError::Corrupt { .. })
        ));
    }

    /// A shard directory holding one (empty) CommitLog segment: a shard with data.
    fn shard_with_data(root: &Path, s: u16) {
        let log = shard_dir(root, s).join(COMMIT_LOG_DIR);
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(offset_name(0)), b"").unwrap();
    }

    fn inconsistency(r: Result<DataDirLayout, ShardError>) -> (String, String, String) {
        match r {
            Err(ShardError::StoreInconsistent {
                path,
                problem,
                remedy,
            }) => (path, problem, remedy),
            other => panic!("expected StoreInconsistent, got {other:?}"),
        }
    }

    #[test]
    fn missing_meta_beside_shard_directories_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        open_data_dir(dir.path(), 3).unwrap();
        for s in 0..3 {
            shard_with_data(dir.path(), s);
        }
        std::fs::remove_file(dir.path().join("store.meta")).unwrap();
        let (path, problem, remedy) = inconsistency(open_data_dir(dir.path(), 1));
        assert!(path.ends_with("store.meta"), "{path}");
        assert!(problem.contains("store.meta is missing"), "{problem}");
        assert!(problem.contains("shard-002"), "{problem}");
        assert!(remedy.contains("shard_count=3"), "{remedy}");
        assert!(remedy.contains("backup") && remedy.contains("move the data directory away"));
        assert!(
            !dir.path().join("store.meta").exists(),
            "no new store.meta was written over the question"
        );
    }

    #[test]
    fn a_shard_directory_past_shard_count_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        open_data_dir(dir.path(), 4).unwrap();
        for s in 0..4 {
            shard_with_data(dir.path(), s);
        }
        // Someone edits shard_count down.
        let text = std::fs::read_to_string(dir.path().join("store.meta")).unwrap();
        std::fs::write(
            dir.path().join("store.meta"),
            text.replace("shard_count=4", "shard_count=2"),
        )
        .unwrap();
        let (_, problem, remedy) = inconsistency(open_data_dir(dir.path(), 4));
        assert!(problem.contains("shard_count=2"), "{problem}");
        assert!(problem.contains("shard-002, shard-003"), "{problem}");
        assert!(remedy.contains("at least 4"), "{remedy}");
    }

    #[test]
    fn a_missing_shard_directory_of_a_store_with_data_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        open_data_dir(dir.path(), 3).unwrap();
        for s in 0..3 {
            shard_with_data(dir.path(), s);
        }
        std::fs::remove_dir_all(shard_dir(dir.path(), 1)).unwrap();
        let (path, problem, remedy) = inconsistency(open_data_dir(dir.path(), 3));
        assert!(path.ends_with("shard-001"), "{path}");
        assert!(problem.contains("shard-001 is missing"), "{problem}");
        assert!(
            problem.contains("shard-000, shard-002 hold messages"),
            "{problem}"
        );
        assert!(remedy.contains("backup") && remedy.contains("empty directory"));
        // Following the remedy (an empty directory: the loss accepted) lets it start.
        std::fs::create_dir(shard_dir(dir.path(), 1)).unwrap();
        assert_eq!(open_data_dir(dir.path(), 3).unwrap().shard_count, 3);
    }

    #[test]
    fn shards_not_yet_created_and_fewer_cores_are_fine() {
        let dir = tempfile::tempdir().unwrap();
        open_data_dir(dir.path(), 4).unwrap();
        // A first start cut short: only shard 0's directory, and it holds nothing yet.
        std::fs::create_dir_all(shard_dir(dir.path(), 0).join(COMMIT_LOG_DIR)).unwrap();
        assert_eq!(open_data_dir(dir.path(), 4).unwrap().shard_count, 4);
        for s in 0..4 {
            shard_with_data(dir.path(), s);
        }
        let fewer = open_data_dir(dir.path(), 1).unwrap();
        assert_eq!(fewer.shard_count, 4, "every shard is kept with fewer cores");
        assert_eq!(fewer.shard_dirs.len(), 4);
    }

    #[test]
    fn topic_names_round_trip_and_stay_inside() {
        for t in ["TopicTest", "a/b", "..", "%RETRY%g", "ü"] {
            let d = topic_dir_name(t);
            assert!(!d.contains('/') && d != ".." && d != ".");
            assert_eq!(topic_from_dir_name(&d).as_deref(), Some(t));
        }
        assert_eq!(parse_offset_name(&offset_name(42)), Some(42));
        assert_eq!(parse_offset_name("42"), None);
    }
}
