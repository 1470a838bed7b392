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
/// directory is new.
pub fn open_data_dir(root: &Path, shard_count_if_new: u16) -> Result<DataDirLayout, ShardError> {
    std::fs::create_dir_all(root)?;
    let meta = root.join(STORE_META);
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
            if shard_count_if_new == 0 {
                return Err(ShardError::Config("shard count must be >= 1".into()));
            }
            let id = new_store_id()?;
            write_meta(root, shard_count_if_new, id)?;
            (shard_count_if_new, id)
        }
        Err(e) => return Err(e.into()),
    };
    let shard_dirs = (0..shard_count).map(|s| shard_dir(root, s)).collect();
    Ok(DataDirLayout {
        root: root.to_owned(),
        shard_count,
        store_id,
        shard_dirs,
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
    fn corrupt_meta_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("store.meta"), "garbage").unwrap();
        assert!(matches!(
            open_data_dir(dir.path(), 2),
            Err(ShardError::Corrupt { .. })
        ));
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
