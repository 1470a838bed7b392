//! Idle connections cannot lock a NameServer out: more mute connections than
//! `--connections-max` still leave room for a client's look-up and a broker's registration,
//! and silent or half-sent connections are closed after their timeouts while an active one
//! is not.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use integration::{start_broker, start_namesrv_with, wait_for, BrokerOpts};
use protocol::blocking::{write_frame, FrameReader};
use protocol::{Command, Header, ResponseCode};

const CAP: usize = 64;
/// Mute connections opened beyond the cap.
const EXTRA: usize = 16;

/// Whether the server has closed `s` (EOF or reset); never blocks.
fn closed_by_server(s: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match s.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// Waits (bounded by `timeout`) until the server closes `s`; returns how long that took.
/// `n` connections to `addr` that never send anything (non-blocking, kept open here).
fn connect_mute(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// Waits (up to 20 s) until the server has closed at least `at_least` of `conns`; how many.
fn wait_closed_by_server(conns: &[TcpStream], at_least: usize) -> Option<usize> {
    wait_for(Duration::from_secs(20), || {
        let n = conns.iter().filter(|s| closed_by_server(s)).count();
        (n >= at_least).then_some(n)
    })
}

fn wait_closed(s: &mut TcpStream, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 256];
    while start.elapsed() < timeout {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

#[test]
fn idle_connections_beyond_the_cap_do_not_lock_out_clients_or_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let cap = CAP.to_string();
    // A long idle timeout: here the cap alone must keep the server reachable.
    let ns = start_namesrv_with(
        &logs,
        &[
            "--connections-max",
            &cap,
            "--connection-idle-timeout-ms",
            "600000",
        ],
    );

    // Mute connections, more than the cap, all kept open by this side.
    let mute = connect_mute(&ns.addr, CAP + EXTRA);
    // The server took them all in: it closed the surplus to stay at its cap.
    let closed = wait_closed_by_server(&mute, EXTRA);
    assert!(
        closed.is_some(),
        "the server should close {EXTRA} of {} mute connections to stay at {CAP}",
        CAP + EXTRA
    );

    // A fresh client is served at once (within its 3 s request timeout), not refused.
    let started = Instant::now();
    let admin = client::Admin::new(&ns.addr).unwrap();
    let info = admin.cluster_info();
    assert!(
        info.is_ok(),
        "cluster-info with {CAP} mute connections open: {info:?}; namesrv stderr:\n{}",
        ns.stderr()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let topics = client::Admin::new(&ns.addr).unwrap().topic_list();
    assert!(topics.is_ok(), "topic-list: {topics:?}");

    // A broker started now registers (a fresh connection per registration).
    let opts = BrokerOpts::new(&ns.addr, &dir.path().join("data"));
    let _broker = start_broker(&opts, &logs);
    let registered = wait_for(Duration::from_secs(20), || {
        let info = client::Admin::new(&ns.addr).ok()?.cluster_info().ok()?;
        info.brokers
            .iter()
            .any(|b| b.broker_name == opts.name)
            .then_some(())
    });
    assert!(
        registered.is_some(),
        "the broker never showed up in cluster-info; namesrv stderr:\n{}",
        ns.stderr()
    );
    // Most mute connections are still open: the server closed only what it had to.
    let still_open = mute.iter().filter(|s| !closed_by_server(s)).count();
    assert!(
        still_open > CAP / 2,
        "only {still_open} mute connections left"
    );

    // The cap is logged with a count, not once per connection.
    let stderr = ns.stderr();
    let lines = stderr
        .lines()
        .filter(|l| l.contains("connection cap reached"))
        .count();
    assert!(lines >= 1, "no cap line in:\n{stderr}");
    assert!(
        lines < EXTRA,
        "{lines} cap lines for {EXTRA}+ evictions:\n{stderr}"
    );
    assert!(
        stderr.contains("evicted="),
        "the cap line has a count:\n{stderr}"
    );
}

#[test]
fn silent_and_half_sent_connections_are_closed_but_active_ones_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let ns = start_namesrv_with(
        &logs,
        &[
            "--connection-idle-timeout-ms",
            "1000",
            "--frame-timeout-ms",
            "1000",
        ],
    );

    let mut silent = TcpStream::connect(&ns.addr).unwrap();
    let mut loris = TcpStream::connect(&ns.addr).unwrap();
    let active = TcpStream::connect(&ns.addr).unwrap();
    active
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    // The slow loris: a frame prefix announcing 1,000 bytes, then a byte every 100 ms,
    // never finishing. Writes fail once the server has closed the connection.
    let mut loris_writer = loris.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        let mut prefix = Vec::new();
        prefix.extend_from_slice(&1000u32.to_be_bytes());
        prefix.extend_from_slice(&100u32.to_be_bytes());
        if loris_writer.write_all(&prefix).is_err() {
            return;
        }
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(100));
            if loris_writer.write_all(&[0]).is_err() {
                return;
            }
        }
    });

    // The active client asks every 100 ms for 3 s, three idle timeouts: always answered.
    let mut reader = FrameReader::new(&active, 1 << 20);
    let started = Instant::now();
    let mut id = 0u64;
    while started.elapsed() < Duration::from_secs(3) {
        id += 1;
        write_frame(
            &mut &active,
            &Header::request(id, Command::GetTopicList),
            &[],
        )
        .unwrap_or_else(|e| panic!("request {id} after {:?}: {e}", started.elapsed()));
        let frame = reader
            .next_frame()
            .unwrap_or_else(|e| panic!("response {id} after {:?}: {e}", started.elapsed()))
            .unwrap_or_else(|| panic!("closed before response {id}"));
        assert_eq!(frame.header.request_id, id);
        assert_eq!(frame.header.response_code(), ResponseCode::Success);
        std::thread::sleep(Duration::from_millis(100));
    }

    // By now (3 s) both the silent and the half-sent connection are gone, or go soon.
    assert!(
        wait_closed(&mut silent, Duration::from_secs(15)).is_some(),
        "a silent connection was never closed"
    );
    assert!(
        wait_closed(&mut loris, Duration::from_secs(15)).is_some(),
        "a half-sent frame trickling a byte every 100 ms held its connection"
    );
    trickle.join().unwrap();

    // And the server still serves newcomers.
    let info = client::Admin::new(&ns.addr).unwrap().cluster_info();
    assert!(info.is_ok(), "{info:?}");
}

#[test]
fn running_out_of_descriptors_before_the_cap_does_not_lock_out_clients() {
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "namesrv_idle_connections: skipped: needs prlimit(1) to lower a descriptor limit"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // The default cap (4096) is far above what 64 descriptors allow.
    let ns = start_namesrv_with(&logs, &["--connection-idle-timeout-ms", "600000"]);
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(ns.pid().to_string())
        .arg("--nofile=64:64")
        .status()
        .unwrap();
    assert!(status.success(), "prlimit failed");

    // Two descriptors per connection on the server side: 100 cannot all be held.
    let mute = connect_mute(&ns.addr, 100);
    let closed = wait_closed_by_server(&mute, 50);
    assert!(
        closed.is_some(),
        "out of descriptors, the server should close idle connections to take new ones; \
         namesrv stderr:\n{}",
        ns.stderr()
    );

    let info = client::Admin::new(&ns.addr).unwrap().cluster_info();
    assert!(
        info.is_ok(),
        "cluster-info with the descriptors taken by mute connections: {info:?}; namesrv stderr:\n{}",
        ns.stderr()
    );
    let stderr = ns.stderr();
    assert!(
        stderr.contains("limit=\"file descriptors\"") || stderr.contains("limit=file descriptors"),
        "the cap line names the limit:\n{stderr}"
    );
}
