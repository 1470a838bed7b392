//! RocketMQ 5's gRPC SDK for Java (rocketmq-client-java 5.0.8, `tests/rocketmq-v5`) against
//! corvus's broker port as its gRPC endpoint, with no Proxy in between: each scenario's
//! transcript must equal the one Apache RocketMQ 5.3.3 and its Proxy gave
//! (`tests/rocketmq-v5/expected/<scenario>.txt`, recorded by `tests/rocketmq-v5/run-apache.sh`).
//!
//! The topics are created as on Apache, with Apache's mqadmin 5.3.3 (`tests/rocketmq-tools5`,
//! `updateTopic -a +message.type=...`), and the broker gets the broker.conf Apache's got
//! (`tests/rocketmq-diff/broker.conf`). [`ENABLED`] are the scenarios corvus is expected to
//! pass; [`PENDING`] would list those that need what corvus does not serve yet.
//!
//! `.ci/run` builds the program and the admin tool (`mvn` there, which writes `cp.txt`);
//! without a JVM and the builds the test says so and skips, and fails where
//! `CORVUS_REQUIRE_JAVA` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use integration::{
    core_addrs, java_program_or_skip, rocketmq_mqadmin, run_client_program, wait_for_route,
    workspace_root, Cluster,
};

/// Every scenario of `corvus.v5.Scenarios`: its name, its topic and the topic's
/// `message.type` (the program's `TOPICS` and run-apache.sh say the same).
const SCENARIOS: &[(&str, &str, &str)] = &[
    ("produce", "V5Normal", "NORMAL"),
    ("fifo", "V5Fifo", "FIFO"),
    ("delay", "V5Delay", "DELAY"),
    ("delay-receive", "V5DelayRecv", "DELAY"),
    ("transaction-send", "V5TxnSend", "TRANSACTION"),
    ("transaction", "V5Txn", "TRANSACTION"),
    ("simple", "V5Simple", "NORMAL"),
    ("push", "V5Push", "NORMAL"),
    ("fifo-push", "V5FifoPush", "FIFO"),
    ("share", "V5Share", "NORMAL"),
];

/// The producer scenarios: sends of normal and FIFO messages, and transactions committed and
/// rolled back by the producer.
const ENABLED: &[&str] = &[
    "produce",
    "fifo",
    "delay",
    "delay-receive",
    "transaction-send",
    "transaction",
    "simple",
    "push",
    "fifo-push",
    "share",
];

/// The scenarios that wait for corvus.
const PENDING: &[&str] = &[];

fn expected_dir() -> std::path::PathBuf {
    workspace_root().join("tests/rocketmq-v5/expected")
}

/// Every scenario is enabled or pending, once, and Apache's transcript of each is recorded.
#[test]
fn every_scenario_is_enabled_or_pending_and_recorded() {
    let mut listed: Vec<&str> = ENABLED.iter().chain(PENDING).copied().collect();
    listed.sort_unstable();
    let mut all: Vec<&str> = SCENARIOS.iter().map(|s| s.0).collect();
    all.sort_unstable();
    assert_eq!(listed, all);
    for name in all {
        let path = expected_dir().join(format!("{name}.txt"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            text.lines().last() == Some(&format!("OK {name}")),
            "{} ends with OK {name}",
            path.display()
        );
    }
}

/// The v5 producer scenarios against corvus give Apache's transcripts.
#[test]
fn v5_grpc_sdk_scenarios_match_apache() {
    run_against_corvus(ENABLED);
}

/// Starts corvus, creates the topics (and groups) of `names`, runs each scenario against the
/// first core's port and fails with every transcript that differs from Apache's.
fn run_against_corvus(names: &[&str]) {
    let Some(program) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let Some(tools) = java_program_or_skip("tests/rocketmq-tools5", None) else {
        return;
    };
    let conf = workspace_root().join("tests/rocketmq-diff/broker.conf");
    let c = Cluster::start_with(1, "small", |o| {
        o.extra = vec!["-c".into(), conf.display().to_string()];
    });
    let ns = c.namesrv.addr.clone();
    for name in names {
        let (_, topic, kind) = SCENARIOS
            .iter()
            .find(|s| s.0 == *name)
            .unwrap_or_else(|| panic!("unknown scenario {name}"));
        let attr = format!("+message.type={kind}");
        let args = [
            "updateTopic",
            "-c",
            "DefaultCluster",
            "-t",
            topic,
            "-r",
            "4",
            "-w",
            "4",
            "-a",
            &attr,
        ];
        let (ok, text) = rocketmq_mqadmin(&tools, &ns, &args);
        assert!(ok, "updateTopic {topic} {attr}: {text}");
        wait_for_route(&ns, topic);
    }
    // As run-apache.sh: push's failing message goes to the DLQ after 3 deliveries, and
    // fifo-push's group is orderly.
    let groups: &[(&str, &[&str])] = &[
        ("push", &["-g", "V5PushGroup", "-r", "2"]),
        ("fifo-push", &["-g", "V5FifoPushGroup", "-o", "true"]),
    ];
    for (name, args) in groups {
        if names.contains(name) {
            let mut a = vec!["updateSubGroup", "-c", "DefaultCluster"];
            a.extend_from_slice(args);
            let (ok, text) = rocketmq_mqadmin(&tools, &ns, &a);
            assert!(ok, "updateSubGroup {args:?}: {text}");
        }
    }

    let endpoint = core_addrs(&ns).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut failures = Vec::new();
    for name in names {
        let expected = std::fs::read_to_string(expected_dir().join(format!("{name}.txt"))).unwrap();
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
            .arg(format!("-Duser.home={}", home.display()))
            .arg("-cp")
            .arg(&program)
            .arg("corvus.v5.Scenarios")
            .args([endpoint.as_str(), name]);
        let (status, lines) = run_client_program(name, &mut cmd, Duration::from_secs(300));
        let want: Vec<&str> = expected.lines().collect();
        if !status.success() || lines != want {
            failures.push(format!(
                "== {name} against corvus at {endpoint} ({status}):\n{}\n== Apache RocketMQ 5.3.3 and its Proxy said:\n{}",
                lines.join("\n"),
                expected.trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ from Apache's transcripts:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}
