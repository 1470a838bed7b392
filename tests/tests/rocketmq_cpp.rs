//! An unchanged application of Apache's C++ RocketMQ client 0.4.4 (`tests/rocketmq-cpp`,
//! PyPI `rocketmq`, which bundles librocketmq) against corvus over the remoting protocol, on
//! the NameServer's and the broker's usual ports: a Producer sends 200 single messages
//! (send_sync, tags and keys) and a batch of 10 (send_batch) to a broker of two cores, and a
//! PushConsumer of a new group receives every one of them. The broker stored each message
//! exactly once, and no request hopped between its cores.
//!
//! `.ci/run` makes the program's venv (`python3 -m venv tests/rocketmq-cpp/.venv` and
//! `pip install rocketmq==0.4.4`); without it the test says so and fails when
//! `CORVUS_REQUIRE_CPP` is set, as CI sets it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client::Admin;
use integration::{create_topic, workspace_root, Cluster};

/// The venv's Python, when the venv has the client installed.
fn cpp_python() -> Option<PathBuf> {
    let venv = workspace_root().join("tests/rocketmq-cpp/.venv");
    let python = venv.join("bin/python");
    let installed = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(Result::ok)
        .any(|d| {
            d.path()
                .join("site-packages/rocketmq/librocketmq.so")
                .exists()
        });
    (installed && python.exists()).then_some(python)
}

/// The client program, killed if the test gives up on it.
struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn stored(ns: &str, broker: &str) -> (u64, u64) {
    let st = Admin::new(ns)
        .expect("an admin client")
        .broker_status(broker)
        .expect("the broker tells its status");
    let hops = st.cores.iter().map(|c| c.cross_core_hops).sum();
    let produced = st.cores.iter().map(|c| c.produced_messages).sum();
    (hops, produced)
}

#[test]
fn a_cpp_producer_and_push_consumer_round_trip_every_message() {
    let Some(python) = cpp_python() else {
        let msg = "the C++ client's venv is not made (python3 -m venv tests/rocketmq-cpp/.venv && tests/rocketmq-cpp/.venv/bin/pip install rocketmq==0.4.4)";
        assert!(std::env::var_os("CORVUS_REQUIRE_CPP").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "CppTopic", 8);

    let started = Instant::now();
    let script = workspace_root().join("tests/rocketmq-cpp/roundtrip.py");
    let mut cpp = Program(
        Command::new(&python)
            .arg(&script)
            .args([&ns, "CppTopic", "200", "CppRoundtripGroup"])
            .env("HOME", c.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the venv's python runs"),
    );
    let stdout = cpp.0.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("cpp: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The program gives itself 40 s to receive everything after sending; this bounds the
    // whole run, sends included.
    let deadline = started + Duration::from_secs(120);
    let mut lines: Vec<String> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the C++ program did not finish within 120 s; it said {lines:?}")
            }
        }
    }
    let status = loop {
        if let Some(s) = cpp.0.try_wait().expect("wait for the C++ program") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the C++ program closed its output but did not exit; it said {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("the C++ program ran {:?}", started.elapsed());
    assert!(
        lines.iter().any(|l| l == "SENT 210, batch OK"),
        "every send and the batch were stored: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "RECEIVED 210 of 210"),
        "the push consumer received every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("ALL RECEIVED"));

    let (hops, produced) = stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
}
