//! RocketMQ 5's gRPC SDK for Node.js (npm `rocketmq-client-nodejs` 1.0.8,
//! `tests/rocketmq-node5/scenarios.js`) against corvus's broker port as its gRPC endpoint,
//! with no Proxy in between: each scenario's transcript must equal the one Apache RocketMQ 5.3.3
//! and its Proxy gave the Java SDK (`tests/rocketmq-v5/expected/<scenario>.txt`). The Node SDK
//! has Producer (transactions included), SimpleConsumer and PushConsumer, so every scenario of
//! the Java program runs.
//!
//! The topics and groups are made as for the Java SDK's scenarios
//! (`integration::v5::cluster_for`); the scenarios run in two lanes.
//!
//! `.ci/run` installs the SDK (`npm ci` in `tests/rocketmq-node5`, from its package-lock.json);
//! without node or the install the test says so and skips, and fails where
//! `CORVUS_REQUIRE_NODE5` is set, as CI sets it.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration::v5::{self, expected_dir};
use integration::workspace_root;

/// The program's directory, when node is there and the SDK is installed in it.
fn node5() -> Option<PathBuf> {
    let dir = workspace_root().join("tests/rocketmq-node5");
    let installed = dir
        .join("node_modules/rocketmq-client-nodejs/package.json")
        .exists();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (installed && node).then_some(dir)
}

/// The program's directory, or `None` (after saying why) where it is not installed outside CI.
fn node5_or_skip() -> Option<PathBuf> {
    integration::or_skip(
        node5(),
        "CORVUS_REQUIRE_NODE5",
        "node or the Node.js SDK is not there (cd tests/rocketmq-node5 && npm ci)",
    )
}

/// Every scenario against corvus gives Apache's transcript of the Java SDK.
#[test]
fn node_v5_sdk_scenarios_match_apache() {
    let Some(dir) = node5_or_skip() else {
        return;
    };
    // All of the Java program's scenarios.
    let scenarios = v5::all_names();
    let (c, endpoint) = v5::cluster_for(&scenarios);
    // The SDK's consume services log under ~/logs/rocketmq.
    let home = c.dir.path().join("node-home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{}: {e}", home.display()));
    v5::run_in_lanes(&scenarios, |name| {
        run_scenario(&dir, &endpoint, &home, name)
    });
}

/// Runs one scenario against `endpoint`; what differs from Apache's transcript, if anything.
fn run_scenario(dir: &Path, endpoint: &str, home: &Path, name: &str) -> Option<String> {
    let mut cmd = Command::new("node");
    cmd.arg(dir.join("scenarios.js"))
        .args([endpoint, name])
        .current_dir(dir)
        .env("HOME", home);
    let expected = expected_dir().join(format!("{name}.txt"));
    v5::transcript_differs(name, &mut cmd, &expected, endpoint)
}
