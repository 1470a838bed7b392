//! RocketMQ 5's gRPC SDK for Java (rocketmq-client-java 5.0.8, `tests/rocketmq-v5`) against
//! corvus's broker port as its gRPC endpoint, with no Proxy in between: each scenario's
//! transcript must equal the one Apache RocketMQ 5.3.3 and its Proxy gave
//! (`tests/rocketmq-v5/expected/<scenario>.txt`, recorded by `tests/rocketmq-v5/run-apache.sh`).
//!
//! The topics and groups are made as run-apache.sh makes them on Apache (RocketMQ's
//! UPDATE_AND_CREATE_TOPIC with `+message.type=...`, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), and
//! the broker gets the broker.conf Apache's got
//! (`tests/rocketmq-diff/broker.conf`); the scenarios run two at a time.
//!
//! `.ci/run` builds the program and the admin tool (`mvn` there, which writes `cp.txt`);
//! without a JVM and the builds the test says so and skips, and fails where
//! `CORVUS_REQUIRE_JAVA` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use integration::v5_scenarios::{
    broker_conf_args, expected_dir, prepare, run_in_two_lanes, SCENARIOS,
};
use integration::{core_addrs, java_program_or_skip, Cluster};

/// Apache's transcript of every scenario is recorded, and it passed there.
#[test]
fn every_scenario_is_recorded() {
    for (name, _, _) in SCENARIOS {
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

/// Every scenario against corvus gives Apache's transcript.
#[test]
fn v5_grpc_sdk_scenarios_match_apache() {
    let names: Vec<&str> = SCENARIOS.iter().map(|s| s.0).collect();
    run_against_corvus(&names);
}

/// Starts corvus, creates the topics (and groups) of `names`, runs each scenario against the
/// first core's port and fails with every transcript that differs from Apache's.
fn run_against_corvus(names: &[&str]) {
    let Some(program) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let c = Cluster::start_with(1, "small", |o| o.extra = broker_conf_args());
    prepare(&c, names);
    let endpoint = core_addrs(&c.namesrv.addr).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let failures = run_in_two_lanes(&program, &endpoint, &home, names);
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ from Apache's transcripts:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}
