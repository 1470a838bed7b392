//! The two on-disk shapes the controller uses, both small.
//!
//! * A record file: an append-only sequence of `u32 BE length | u32 BE crc32 | body`. Each
//!   append is fsynced before the caller answers. At open, records are read up to the first
//!   one that is short or fails its CRC: that is a torn write of the last append (a crash
//!   mid-write), and the file is truncated back to the last whole record.
//! * A whole-file value, replaced atomically: written to `NAME.tmp`, fsynced, renamed over
//!   `NAME`, and the directory fsynced, so a crash leaves the old or the new file, never half.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use crate::Error;

const RECORD_HEADER_BYTES: usize = 8;

/// Largest record accepted at open; anything larger is treated as damage.
const RECORD_MAX_BYTES: usize = 64 * 1024 * 1024;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Encodes one record (header and body).
pub fn record(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Appends already-encoded records and fsyncs.
pub fn append(file: &mut File, path: &Path, bytes: &[u8]) -> Result<(), Error> {
    file.write_all(bytes).map_err(io_err(path))?;
    file.sync_data().map_err(io_err(path))
}

/// Opens (creating) a record file, returns it positioned at its end and the bodies of its
/// whole records. A torn tail is cut off; `dropped_bytes` says how much.
pub fn open_records(path: &Path) -> Result<(File, Vec<Vec<u8>>, u64), Error> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(io_err(path))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data).map_err(io_err(path))?;
    let mut bodies = Vec::new();
    let mut pos = 0usize;
    while let Some(header) = data.get(pos..pos + RECORD_HEADER_BYTES) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        if len > RECORD_MAX_BYTES {
            break;
        }
        let start = pos + RECORD_HEADER_BYTES;
        let Some(body) = data.get(start..start + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        bodies.push(body.to_vec());
        pos = start + len;
    }
    let dropped = (data.len() - pos) as u64;
    if dropped > 0 {
        file.set_len(pos as u64).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
    }
    Ok((file, bodies, dropped))
}

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(path)
}

fn sync_dir(path: &Path) -> Result<(), Error> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Reads a whole-file value, `None` if the file does not exist.
pub fn read_file(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_record_is_dropped_at_open_and_appends_continue_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        {
            let (mut f, bodies, _) = open_records(&path).unwrap();
            assert!(bodies.is_empty());
            append(&mut f, &path, &record(b"one")).unwrap();
            append(&mut f, &path, &record(b"two")).unwrap();
            // Half of a third record: a crash mid-write.
            let third = record(b"three");
            append(&mut f, &path, &third[..third.len() - 2]).unwrap();
        }
        let (mut f, bodies, dropped) = open_records(&path).unwrap();
        assert_eq!(bodies, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(dropped, (record(b"three").len() - 2) as u64);
        append(&mut f, &path, &record(b"four")).unwrap();
        drop(f);
        let (_, bodies, dropped) = open_records(&path).unwrap();
        assert_eq!(bodies.len(), 3);
        assert_eq!(dropped, 0);
    }

    #[test]
    fn a_flipped_bit_ends_the_log_at_the_damaged_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        {
            let (mut f, _, _) = open_records(&path).unwrap();
            append(&mut f, &path, &record(b"one")).unwrap();
            append(&mut f, &path, &record(b"two")).unwrap();
        }
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 0x01;
        std::fs::write(&path, &data).unwrap();
        let (_, bodies, _) = open_records(&path).unwrap();
        assert_eq!(bodies, vec![b"one".to_vec()]);
    }

    #[test]
    fn atomic_write_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(read_file(&path).unwrap(), None);
        write_atomic(&path, b"first, longer").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(read_file(&path).unwrap().unwrap(), b"second");
    }
}
