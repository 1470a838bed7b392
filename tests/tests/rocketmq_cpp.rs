//! An unchanged application of Apache's C++ RocketMQ client 0.4.4 (`tests/rocketmq-cpp`,
//! PyPI `rocketmq`, which bundles librocketmq) against corvus over the remoting protocol, on
//! the NameServer's and the broker's usual ports: a Producer sends 200 single messages
//! (send_sync, tags and keys) and a batch of 10 (send_batch) to a broker of two cores, and a
//! PushConsumer of a new group receives every one of them, and a PullConsumer pulls every
//! one of them again from offset 0. The broker stored each message exactly once, and no
//! request hopped between its cores.
//!
//! With an ACL-enabled broker, the same program configured with an access key and secret
//! (the client's `set_session_credentials`) round-trips on the topic its account may use,
//! and with a wrong secret its first send is refused.
//!
//! `.ci/run` makes the program's venv (`python3 -m venv tests/rocketmq-cpp/.venv` and
//! `pip install rocketmq==0.4.4`); without it the test says so and fails when
//! `CORVUS_REQUIRE_CPP` is set, as CI sets it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use integration::{
    create_topic, create_topic_as, hops_and_stored, run_client_program, workspace_root, AclRules,
    Cluster,
};

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

/// The venv's Python, or `None` (after saying why) where it is not made outside CI.
fn cpp_python_or_skip() -> Option<PathBuf> {
    integration::or_skip(
        cpp_python(),
        "CORVUS_REQUIRE_CPP",
        "the C++ client's venv is not made (python3 -m venv tests/rocketmq-cpp/.venv && tests/rocketmq-cpp/.venv/bin/pip install rocketmq==0.4.4)",
    )
}

#[test]
fn a_cpp_producer_and_push_consumer_round_trip_every_message() {
    let Some(python) = cpp_python_or_skip() else {
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

/// `cpp-client` may publish and consume `CppAcl` as `CppAclGroup` (push) and
/// `CppAclGroupPull` (pull), and nothing else.
const CPP_RULES: &str = "accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: cpp-client
    secretKey: cpp-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - CppAcl=PUB|SUB
    groupPerms:
      - CppAclGroup=SUB
      - CppAclGroupPull=SUB
";

#[test]
fn a_cpp_client_with_credentials_round_trips_and_a_wrong_secret_is_refused() {
    let Some(python) = cpp_python_or_skip() else {
        return;
    };
    let rules = AclRules::write(CPP_RULES);
    let c = Cluster::start_with(2, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let ns = c.namesrv.addr.clone();
    create_topic_as(&ns, ("admin0001", "admin-secret-1"), "CppAcl", 4);
    let script = workspace_root().join("tests/rocketmq-cpp/roundtrip.py");

    let (status, lines) = run_client_program(
        "C++",
        Command::new(&python)
            .arg(&script)
            .args([&ns, "CppAcl", "20", "CppAclGroup"])
            .env("HOME", c.dir.path())
            .env("ROCKETMQ_ACCESS_KEY", "cpp-client")
            .env("ROCKETMQ_SECRET_KEY", "cpp-secret-1"),
        Duration::from_secs(120),
    );
    assert!(
        lines.iter().any(|l| l == "SENT 30, batch OK"),
        "the signed producer's sends were accepted: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "RECEIVED 30 of 30"),
        "the signed push consumer received every message: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "PULLED 30 of 30"),
        "the signed pull consumer got every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");

    let (status, lines) = run_client_program(
        "C++",
        Command::new(&python)
            .arg(&script)
            .args([&ns, "CppAcl", "1", "CppAclGroup"])
            .env("HOME", c.dir.path())
            .env("ROCKETMQ_ACCESS_KEY", "cpp-client")
            .env("ROCKETMQ_SECRET_KEY", "not-the-secret"),
        Duration::from_secs(120),
    );
    assert_eq!(status.code(), Some(2), "a client error: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("SENT")),
        "nothing was accepted with a wrong secret: {lines:?}"
    );
    // The client reports the end of its retries ("No route info"); its log has the answer
    // each send got.
    let log_dir = c.dir.path().join("logs/rocketmq-cpp");
    let logged = std::fs::read_dir(&log_dir)
        .unwrap_or_else(|e| panic!("the client logs in {}: {e}", log_dir.display()))
        .filter_map(Result::ok)
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .collect::<String>();
    assert!(
        logged.contains("NO_PERMISSION: check signature failed for accessKey=cpp-client"),
        "the broker refused the sends NO_PERMISSION, saying why: {lines:?}"
    );
}
