#![allow(clippy::unwrap_used)]
//! Idle connections cannot exhaust the broker's descriptors: under a lowered limit the
//! broker closes connections that would eat into the descriptors kept for its storage, and
//! segments keep rolling. Running out anyway (EMFILE) at the moment a CommitLog segment
//! rolls is an answer, not poison: with the limit lowered under what the broker has open,
//! sends go on until the next segment cannot be opened, are then answered "system busy:
//! too many open files", the broker stays up, and once the limit is raised sends succeed
//! again without a restart.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use client::{ClientError, PullConsumer};
use integration::{drain_topic, producer_without_retries, wait_for, AckedSends, Cluster};
use protocol::ResponseCode;

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn open_sockets(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|t| t.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

/// The descriptor number the process's next open would get.
fn lowest_free_fd(pid: i32) -> u64 {
    let used: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap_or(0)
}

fn highest_fd(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn emfile_at_a_segment_roll_answers_busy_and_sends_resume_once_descriptors_return() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let prlimit = Command::new("prlimit").arg("--version").output().is_ok();
    if !root || !prlimit {
        eprintln!("open_files: skipped: lowering another process's descriptor limit needs root and prlimit(1) (root {root}, prlimit {prlimit})");
        return;
    }
    // Retention and the disk levels stay out of the way (they open files too).
    let config = "disk_check_interval_ms = 600000\n";
    let started = Instant::now();
    let mut c = Cluster::start_with(1, "small", |o| o.config_toml = Some(config.to_owned()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Files", 1);
    let p = producer_without_retries(&ns, "open-files");
    let mut sends = AckedSends::new("Files");
    for _ in 0..50 {
        sends.send(&p).unwrap();
    }
    // The reader's connection is made now, while descriptors are free.
    let consumer = PullConsumer::new(&ns, "open-files-check").unwrap();
    assert!(!drain_topic(&consumer, "Files", Duration::from_secs(30)).is_empty());

    let pid = c.broker.pid();
    // The soft limit moves; the hard one stays where the first call puts it.
    let hard = highest_fd(pid) + 300;
    let prlimit_nofile = |limit: u64| {
        let status = Command::new("prlimit")
            .arg("--pid")
            .arg(pid.to_string())
            .arg(format!("--nofile={limit}:{hard}"))
            .status()
            .unwrap();
        assert!(status.success(), "prlimit failed");
    };

    // Idle connections cannot take the storage's descriptors: with the limit a few hundred
    // above what the broker has open, far more connections than that are opened and the
    // broker closes the ones that would eat into its reserve, while sends roll through
    // several 4 MiB segments (about 1,400 of these sends each) without a refusal.
    let roomy = hard;
    let sockets_before = open_sockets(pid);
    prlimit_nofile(roomy);
    let hogs: Vec<TcpStream> = (0..roomy + 100)
        .filter_map(|_| TcpStream::connect(&c.broker.addr).ok())
        .collect();
    for _ in 0..4_500 {
        sends.send(&p).unwrap();
    }
    assert!(
        (open_fds(pid) as u64) < roomy,
        "{} descriptors open under a limit of {roomy}",
        open_fds(pid)
    );
    drop(hogs);
    wait_for(Duration::from_secs(30), || {
        (open_sockets(pid) <= sockets_before).then_some(())
    })
    .expect("the broker did not close the connections that were closed on it");

    // The storage can still run short (a limit lowered under it, say): take every free
    // descriptor number away by setting the limit to the lowest free one.
    let limit = lowest_free_fd(pid);
    prlimit_nofile(limit);

    // Sends go on in the current segment and are refused once the next one cannot be
    // opened: within a segment (4 MiB, about 1,400 of these) and the chunks in memory.
    let (tries, err) = sends.send_until_refused(&p);
    eprintln!("open_files: refused after {tries} sends: {err}");
    match &err {
        ClientError::Broker { code, remark, .. } => {
            assert_eq!(*code, ResponseCode::SystemBusy, "{remark}");
            assert!(remark.contains("too many open files"), "{remark}");
            assert!(!remark.contains("poison"), "{remark}");
        }
        other => panic!("expected system busy, got {other:?}"),
    }
    assert!(
        matches!(c.broker.child.try_wait(), Ok(None)),
        "the broker died; stderr:\n{}",
        c.broker.stderr()
    );

    // Descriptors return, and sends succeed again by themselves.
    prlimit_nofile(roomy);
    wait_for(Duration::from_secs(60), || sends.send(&p).ok())
        .expect("sends did not succeed again once descriptors returned");
    for _ in 0..100 {
        sends.send(&p).unwrap();
    }
    sends.assert_served(&consumer, Duration::from_secs(60));
    let log = c.broker.stderr();
    assert!(!log.contains("poisoned"), "{log}");
    // Refused accepts while descriptors were short are logged a line per listener (the
    // shared port and the core's direct port) every 5 s with a count, not a line per
    // 10 ms retry (29 lines in a 2 s run before).
    let accept_lines = log.lines().filter(|l| l.contains("accept failed")).count();
    let allowed = 2 * (started.elapsed().as_secs() as usize / 5 + 1);
    eprintln!("open_files: {accept_lines} accept-failure lines (at most {allowed})");
    assert!(
        accept_lines <= allowed,
        "{accept_lines} accept-failure lines:\n{log}"
    );
}
