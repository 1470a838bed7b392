//! A small loop-mounted ext4 for tests of a really full disk, shared by the shard's and the
//! broker's disk-full tests (each includes this file with `#[path]`).

#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A small ext4 filesystem in a file, loop-mounted in a temp dir; unmounted and removed when
/// dropped, also when the test fails.
pub struct LoopFs {
    _dir: tempfile::TempDir,
    pub mnt: PathBuf,
}

/// Skips (with the reason on stderr) where a loop mount cannot be made, unless
/// `CORVUS_REQUIRE_LOOP_MOUNT` is set (`.ci/run` sets it: CI runs as root, so there the test
/// must run, not skip).
pub fn loop_fs_or_skip(size_mib: u64) -> Option<LoopFs> {
    let skip = |why: String| {
        if std::env::var_os("CORVUS_REQUIRE_LOOP_MOUNT").is_some() {
            panic!("CORVUS_REQUIRE_LOOP_MOUNT is set but {why}");
        }
        eprintln!("skipped: {why}");
        None
    };
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root: mounting a loop filesystem needs root".into());
    }
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let run = |cmd: &mut Command| -> Result<(), String> {
        match cmd.output() {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("{cmd:?} cannot run: {e}")),
        }
    };
    let made = run(Command::new("truncate")
        .arg("-s")
        .arg(format!("{size_mib}M"))
        .arg(&image))
    // -m 0: no blocks reserved for root, so "full" is full for us (we run as root).
    .and_then(|()| {
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&image))
    })
    .and_then(|()| {
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mnt))
    });
    match made {
        Ok(()) => Some(LoopFs { _dir: dir, mnt }),
        Err(why) => skip(why),
    }
}

impl LoopFs {
    /// [`fill`]s this filesystem.
    pub fn fill(&self) -> Vec<PathBuf> {
        fill(&self.mnt)
    }

    /// [`unfill`]s this filesystem.
    pub fn unfill(&self, files: &[PathBuf]) {
        unfill(&self.mnt, files)
    }
}

/// The bytes an unprivileged writer may still take on the filesystem.
pub fn free_bytes(mnt: &Path) -> u64 {
    let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statvfs is valid plain old data; both pointers live for the call.
    let (rc, st) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        let rc = libc::statvfs(c.as_ptr(), &mut st);
        (rc, st)
    };
    assert_eq!(rc, 0, "statvfs {}", mnt.display());
    st.f_bavail * st.f_frsize
}

/// Fills the filesystem from other processes (`fallocate`, then `dd` up to ENOSPC), as
/// another program on the host would; returns the files it made.
pub fn fill(mnt: &Path) -> Vec<PathBuf> {
    let big = mnt.join("filler-big");
    let rest = mnt.join("filler-rest");
    let free = free_bytes(mnt);
    let status = Command::new("fallocate")
        .arg("-l")
        .arg(free.saturating_sub(1 << 20).max(4096).to_string())
        .arg(&big)
        .status()
        .unwrap();
    assert!(status.success(), "fallocate of the filler failed");
    // dd stops at ENOSPC and says so: that is the point.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", rest.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let _ = Command::new("sync").arg("-f").arg(mnt).status();
    assert!(
        free_bytes(mnt) < 1 << 20,
        "the filesystem is not full: {} bytes free",
        free_bytes(mnt)
    );
    vec![big, rest]
}

/// Gives back what [`fill`] took.
pub fn unfill(mnt: &Path, files: &[PathBuf]) {
    for f in files {
        std::fs::remove_file(f).unwrap();
    }
    // Commit the journal so the freed blocks count as free at once.
    let _ = Command::new("sync").arg("-f").arg(mnt).status();
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // The kernel lets go of files an exited process had in io_uring a moment after it
        // exits: try a few times, bounded, then detach it lazily (it goes once free).
        for _ in 0..40 {
            let unmounted = Command::new("umount")
                .arg(&self.mnt)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if unmounted {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}
