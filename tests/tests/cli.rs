//! Bad flags, bad config values and a host without enough locked memory for io_uring are
//! refused at start with a message that names what to change.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use integration::bin;

fn broker_fails(args: &[&str], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("broker"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "broker {args:?} should refuse to start"
    );
    assert!(
        stderr.contains(expect),
        "broker {args:?}: expected `{expect}` in:\n{stderr}"
    );
}

#[test]
fn bad_flags_and_config_values_are_named() {
    broker_fails(&["--cores", "0"], "--cores");
    broker_fails(&["--cores", "many"], "--cores");
    broker_fails(
        &["--profile", "fastest"],
        "unknown tuning profile `fastest`",
    );
    broker_fails(&["--namesrv", "localhost"], "namesrv_addr");
    broker_fails(&["--listen", "nonsense"], "listen");
    broker_fails(&["--bogus-flag"], "--bogus-flag");

    let dir = tempfile::tempdir().unwrap();
    let bad_value = dir.path().join("bad_value.toml");
    std::fs::write(&bad_value, "flush_interval_ms = 0\n").unwrap();
    broker_fails(
        &["--config", bad_value.to_str().unwrap()],
        "flush_interval_ms",
    );
    let bad_key = dir.path().join("bad_key.toml");
    std::fs::write(&bad_key, "flush_intervall_ms = 5\n").unwrap();
    broker_fails(
        &["--config", bad_key.to_str().unwrap()],
        "flush_intervall_ms",
    );
    let bad_ratio = dir.path().join("bad_ratio.toml");
    std::fs::write(
        &bad_ratio,
        "disk_clean_ratio = 0.95\ndisk_refuse_ratio = 0.9\n",
    )
    .unwrap();
    broker_fails(
        &["--config", bad_ratio.to_str().unwrap()],
        "disk_clean_ratio",
    );
    broker_fails(
        &["--config", "/nonexistent/broker.toml"],
        "/nonexistent/broker.toml",
    );

    let out = Command::new(bin("namesrv"))
        .args(["--listen", "not-an-address"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
}

#[test]
fn too_little_locked_memory_is_refused_with_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("broker"));
    cmd.args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"));
    // SAFETY: setrlimit is async-signal-safe and only touches the child's own limits between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must refuse to start: {stderr}");
    assert!(
        stderr.contains("memlock") || stderr.contains("locked memory"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ulimit -l") || stderr.contains("LimitMEMLOCK"),
        "says what to change: {stderr}"
    );
}
