//! Small files the broker replaces whole (snapshots, tables, config overrides), written so
//! that a crash leaves either the old file or the new one.

use std::io::Write;
use std::path::Path;

/// Replaces `path` with `bytes` durably: a temporary file beside it, fsync, rename, fsync of
/// the directory.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all())?;
    }
    Ok(())
}
