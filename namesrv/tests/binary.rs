//! The `namesrv` binary: start-up line on stdout, flag validation, clean stop on SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Client;

const BIN: &str = env!("CARGO_BIN_EXE_namesrv");

/// Kills the child if a test fails half-way, so no server outlives the test.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "namesrv did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn prints_its_address_serves_and_stops_on_sigterm() {
    let child = Process::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--broker-expiry-ms", "5000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn namesrv");
    let mut guard = Guard(child);
    let stdout = guard.0.stdout.take().expect("piped stdout");

    // Read the start-up line on a helper thread so the wait is bounded.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("start-up line within 10 s");
    let addr: SocketAddr = line
        .trim_end()
        .strip_prefix("namesrv listening on ")
        .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
        .parse()
        .expect("an ip:port");
    assert_ne!(addr.port(), 0, "the actual port, not the requested 0");

    let mut client = Client::connect(addr);
    assert!(client.topic_list().is_empty());
    drop(client);

    let status = Process::new("kill")
        .args(["-TERM", &guard.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let status = wait_with_deadline(&mut guard.0, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM");
    let mut stderr = String::new();
    guard
        .0
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(
        stderr.contains(&format!("namesrv listening on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("namesrv stopped"), "{stderr}");
}

#[test]
fn bad_flag_values_are_refused_naming_the_flag() {
    for args in [
        ["--broker-expiry-ms", "soon"],
        ["--broker-expiry-ms", "0"],
        ["--scan-interval-ms", "0"],
        ["--listen", "nowhere"],
        ["--log-level", "loud"],
    ] {
        let out = Process::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run namesrv");
        assert!(!out.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}
