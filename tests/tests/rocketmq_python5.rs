//! RocketMQ 5's gRPC SDK for Python (PyPI `rocketmq-python-client` 5.1.2,
//! `tests/rocketmq-python5/scenarios.py`) against corvus's broker port as its gRPC endpoint,
//! with no Proxy in between: each scenario's transcript must equal the one Apache RocketMQ 5.3.3
//! and its Proxy gave the Java SDK (`tests/rocketmq-v5/expected/<scenario>.txt`), unless
//! `tests/rocketmq-python5/expected/` holds the Python SDK's own (its README says why).
//!
//! The topics and groups are made as for the Java SDK's scenarios
//! (`integration::v5::cluster_for`); the scenarios run two at a time.
//!
//! `.ci/run` makes the program's venv (`python3 -m venv tests/rocketmq-python5/.venv` and
//! `pip install rocketmq-python-client==5.1.2`); without it the test says so and skips, and
//! fails where `CORVUS_REQUIRE_PYTHON5` is set, as CI sets it.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration::v5;
use integration::workspace_root;

/// The venv's Python, when the venv has the SDK installed.
fn python5() -> Option<PathBuf> {
    let venv = workspace_root().join("tests/rocketmq-python5/.venv");
    let python = venv.join("bin/python");
    let installed = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(Result::ok)
        .any(|d| {
            d.path()
                .join("site-packages/rocketmq/v5/client/client.py")
                .exists()
        });
    (installed && python.exists()).then_some(python)
}

/// The venv's Python, or `None` (after saying why) where it is not made outside CI.
fn python5_or_skip() -> Option<PathBuf> {
    integration::or_skip(
        python5(),
        "CORVUS_REQUIRE_PYTHON5",
        "the Python SDK's venv is not made (python3 -m venv tests/rocketmq-python5/.venv && tests/rocketmq-python5/.venv/bin/pip install rocketmq-python-client==5.1.2)",
    )
}

/// The transcript `name` must give: the Python SDK's own where it differs from Java's.
fn expected(name: &str) -> PathBuf {
    let own = workspace_root().join(format!("tests/rocketmq-python5/expected/{name}.txt"));
    if own.exists() {
        own
    } else {
        v5::expected_dir().join(format!("{name}.txt"))
    }
}

/// Every enabled scenario against corvus gives Apache's transcript.
#[test]
fn python_v5_sdk_scenarios_match_apache() {
    let Some(python) = python5_or_skip() else {
        return;
    };
    // All of the Java program's scenarios.
    let scenarios = v5::all_names();
    let (c, endpoint) = v5::cluster_for(&scenarios);
    // The SDK writes its log under ~/logs/rocketmq_python.
    let home = c.dir.path().join("python-home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{}: {e}", home.display()));
    v5::run_in_lanes(&scenarios, |name| {
        run_scenario(&python, &endpoint, &home, name)
    });
}

/// Runs one scenario against `endpoint`; what differs from its expected transcript, if
/// anything.
fn run_scenario(python: &Path, endpoint: &str, home: &Path, name: &str) -> Option<String> {
    let script = workspace_root().join("tests/rocketmq-python5/scenarios.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .args([endpoint, name])
        .env("HOME", home)
        .env("PYTHONUNBUFFERED", "1");
    v5::transcript_differs(name, &mut cmd, &expected(name), endpoint)
}
