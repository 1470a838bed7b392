//! RocketMQ 5's gRPC SDK for Go (github.com/apache/rocketmq-clients/golang/v5 v5.1.2,
//! `tests/rocketmq-go5`) against corvus's broker port as its gRPC endpoint, with no Proxy in
//! between: the program runs the Java program's scenarios (same topics, groups and transcript
//! lines), and each transcript must equal the one Apache RocketMQ 5.3.3 and its Proxy gave the
//! Java program (`tests/rocketmq-v5/expected/<scenario>.txt`). The Go SDK has no PushConsumer
//! in v5.1.2, so `push` and `fifo-push` are not among them.
//!
//! `.ci/run` builds the program (`go build -o bin/scenarios` there); without Go and the build
//! the test says so and skips, and fails where `CORVUS_REQUIRE_GO` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use integration::v5::{self, expected_dir};
use integration::workspace_root;

/// The scenarios the Go program runs (all of the Java program's but the PushConsumer ones).
const SCENARIOS: &[&str] = &[
    "produce",
    "fifo",
    "delay",
    "delay-receive",
    "transaction-send",
    "transaction",
    "simple",
    "share",
];

/// The Go program, or `None` (after saying why) where it is not built outside CI.
fn go_program_or_skip() -> Option<PathBuf> {
    let p = workspace_root().join("tests/rocketmq-go5/bin/scenarios");
    integration::or_skip(
        p.exists().then_some(p),
        "CORVUS_REQUIRE_GO",
        "the Go v5 SDK program is not built (cd tests/rocketmq-go5 && go build -o bin/scenarios .)",
    )
}

/// Every scenario the Go SDK runs gives, against corvus, Apache's transcript of the Java SDK.
#[test]
fn go_v5_sdk_scenarios_match_apache() {
    let Some(program) = go_program_or_skip() else {
        return;
    };
    let (c, endpoint) = v5::cluster_for(SCENARIOS);
    v5::run_in_lanes(SCENARIOS, |name| {
        run_scenario(&program, &endpoint, c.dir.path(), name)
    });
}

/// Runs one scenario against `endpoint`; what differs from Apache's transcript, if anything.
fn run_scenario(program: &Path, endpoint: &str, home: &Path, name: &str) -> Option<String> {
    let mut cmd = Command::new(program);
    cmd.args([endpoint, name]).env("HOME", home);
    let expected = expected_dir().join(format!("{name}.txt"));
    v5::transcript_differs(name, &mut cmd, &expected, endpoint)
}
