//! Every start comes up, or fails within seconds naming the core and the step it waited in;
//! SIGTERM ends a start that is still going.
//!
//! The start loop is what a supervisor does to a broker that keeps being restarted: a
//! couple of hundred starts in a row, on fresh and on recovered (killed) data directories,
//! with every CPU kept busy beside them, each of which must listen within its bound. A start
//! whose core slept with work queued (an executor parked while its tasks were runnable)
//! never listened, about one start in a hundred on a loaded host.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use integration::{broker_command, ensure_built, run_until_exit, wait_for, BrokerOpts};

/// Starts in the loop.
const ROUNDS: usize = 200;
/// Longest a start may take to listen: a start takes well under a second, even beside the
/// load; a start that lost a wake-up never listens at all.
const START_BOUND: Duration = Duration::from_secs(20);

/// Busy threads on every CPU until dropped.
struct CpuLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuLoad {
    fn start() -> CpuLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for i in 0..10_000u64 {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                        }
                    }
                })
            })
            .collect();
        CpuLoad { stop, threads }
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Spawns the broker and waits (bounded) for its ready line; `Err` has its log.
fn start_within(
    opts: &BrokerOpts,
    logs: &std::path::Path,
    bound: Duration,
) -> Result<Child, String> {
    let log = logs.join("broker.log");
    let mut cmd = broker_command(opts, logs);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(&log).map_err(|e| e.to_string())?,
        ))
        .stdin(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let Some(stdout) = child.stdout.take() else {
        return Err("no stdout".into());
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut told = false;
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if !told && line.starts_with("broker listening on ") {
                let _ = tx.send(());
                told = true;
            }
        }
    });
    match rx.recv_timeout(bound) {
        Ok(()) => Ok(child),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(std::fs::read_to_string(&log).unwrap_or_default())
        }
    }
}

#[test]
fn every_start_listens_within_its_bound_on_fresh_and_recovered_data_beside_cpu_load() {
    ensure_built();
    let root = tempfile::tempdir().unwrap();
    let _load = CpuLoad::start();
    let mut data: Option<tempfile::TempDir> = None;
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        // One start in three on a fresh directory; the others recover what the killed
        // broker before them left.
        let fresh = round % 3 == 0 || data.is_none();
        if fresh {
            data = Some(tempfile::tempdir_in(root.path()).unwrap());
        }
        let Some(dir) = data.as_ref() else {
            unreachable!()
        };
        let logs = tempfile::tempdir_in(root.path()).unwrap();
        let mut opts = BrokerOpts::new("", dir.path());
        opts.cores = 2;
        let t0 = Instant::now();
        match start_within(&opts, logs.path(), START_BOUND) {
            Ok(mut child) => {
                slowest = slowest.max(t0.elapsed());
                let _ = child.kill();
                let _ = child.wait();
            }
            Err(log) => panic!(
                "start {round} of {ROUNDS} ({}) did not listen within {START_BOUND:?} ({} s into the loop); its log:\n{log}",
                if fresh { "fresh data" } else { "recovered data" },
                started.elapsed().as_secs()
            ),
        }
    }
    eprintln!(
        "{ROUNDS} starts in {:?}, the slowest took {slowest:?}",
        started.elapsed()
    );
}

#[test]
fn a_core_that_cannot_finish_its_start_fails_it_within_seconds_naming_the_core_and_step() {
    ensure_built();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut opts = BrokerOpts::new("", data.path());
    opts.cores = 2;
    let mut cmd = broker_command(&opts, logs.path());
    cmd.env("CORVUS_DEBUG_START_STALL_CORE", "1");
    let t0 = Instant::now();
    let (code, out) = run_until_exit(&mut cmd, Duration::from_secs(60));
    let took = t0.elapsed();
    assert_eq!(
        code,
        Some(1),
        "the start must fail, not hang; output:\n{out}"
    );
    // Both cores wait in the mesh (core 1 never joins it); whichever passed the bound first
    // is named first, and the other with it.
    let error = out
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.contains(" did not start: it spent 10 s joining the cross-core mesh (at most 10 s)")
            && error.contains("core 0 ")
            && error.contains("core 1 "),
        "the error names the cores and the step; output:\n{out}"
    );
    assert!(
        out.contains("still starting: core 0 joining the cross-core mesh for ")
            && out.contains("; core 1 joining the cross-core mesh for "),
        "the wait is reported while it lasts; output:\n{out}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}; output:\n{out}");
}

#[test]
fn sigterm_ends_a_start_that_is_still_going() {
    ensure_built();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut opts = BrokerOpts::new("", data.path());
    opts.cores = 2;
    let log = logs.path().join("stderr.log");
    let mut child = broker_command(&opts, logs.path())
        .env("CORVUS_DEBUG_START_STALL_CORE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    // The broker says it is still starting once it has been at it for a while.
    let waited = wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|l| l.contains("still starting: "))
    });
    assert!(
        waited.is_some(),
        "no word of the start; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let signalled = Instant::now();
    let status = wait_for(Duration::from_secs(15), || child.try_wait().ok().flatten());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("SIGTERM did not end the start within 15 s; log:\n{text}");
    };
    assert_eq!(status.code(), Some(0), "log:\n{text}");
    assert!(
        text.contains(
            "broker stopped: stopped while starting (core 0 joining the cross-core mesh for"
        ),
        "log:\n{text}"
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
}
