//! An unchanged application of Apache's C++ RocketMQ client 0.4.4 (`tests/rocketmq-cpp`,
//! PyPI `rocketmq`, which bundles librocketmq) against corvus over the remoting protocol, on
//! the NameServer's and the broker's usual ports: a Producer sends 200 single messages
//! (send_sync, tags and keys) and a batch of 10 (send_batch) to a broker of two cores, and a
//! PushConsumer of a new group receives every one of them, and a PullConsumer pulls every
//! one of them again from offset 0. The broker stored each message exactly once, and no
//! request hopped between its cores.
//!
//! `.ci/run` makes the program's venv (`python3 -m venv tests/rocketmq-cpp/.venv` and
//! `pip install rocketmq==0.4.4`); without it the test says so and fails when
//! `CORVUS_REQUIRE_CPP` is set, as CI sets it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use integration::{create_topic, hops_and_stored, run_client_program, workspace_root, Cluster};

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

    let script = workspace_root().join("tests/rocketmq-cpp/roundtrip.py");
    // The program gives itself 40 s to receive everything after sending; this bounds the
    // whole run, sends included.
    let (status, lines) = run_client_program(
        "C++",
        Command::new(&python)
            .arg(&script)
            .args([&ns, "CppTopic", "200", "CppRoundtripGroup"])
            .env("HOME", c.dir.path()),
        Duration::from_secs(120),
    );
    assert!(
        lines.iter().any(|l| l == "SENT 210, batch OK"),
        "every send and the batch were stored: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "RECEIVED 210 of 210"),
        "the push consumer received every message: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "PULLED 210 of 210"),
        "the pull consumer got every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("ALL RECEIVED"));

    let (hops, produced) = hops_and_stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
}
