//! The differential harness's short scenario set against corvus: the scenario program of
//! `tests/rocketmq-diff` (Apache's RocketMQ Java client 4.9.8 and 5.3.3, one source tree)
//! runs the scenarios marked `short` in `scenarios.txt` against a corvus broker configured
//! with the harness's `broker.conf`, and its normalised transcript must equal Apache RocketMQ
//! 5.3.3's, recorded by `tests/rocketmq-diff/run.sh --record` into `expected/`, except where
//! `known-differences.txt` explains the difference (`diff.py` compares).
//!
//! CI compares against the recorded transcript instead of starting Apache RocketMQ: its
//! NameServer and broker are two more JVMs (tens of seconds of both CPUs of a small host to
//! start, 100 MB of jars from Maven Central, a store on disk), and a recorded reference keeps
//! the test's outcome a function of corvus alone. `run.sh` runs the whole set against both
//! brokers side by side and records the reference again.
//!
//! `.ci/run` builds the program (`mvn compile` in `tests/rocketmq-diff/client4` and
//! `client5`); without a JVM, the build or python3, the tests say so and skip, and fail where
//! `CORVUS_REQUIRE_JAVA` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use integration::{run_client_program, workspace_root, Cluster};

fn harness_dir() -> PathBuf {
    workspace_root().join("tests/rocketmq-diff")
}

/// The scenario program's classpath built against the `major`.x client, or `None` after
/// saying why the test does not run (a failure where `CORVUS_REQUIRE_JAVA` is set).
fn program_or_skip(major: u32) -> Option<String> {
    let dir = harness_dir().join(format!("client{major}"));
    let classes = dir.join("target/classes");
    let deps = std::fs::read_to_string(dir.join("cp.txt")).ok();
    let have_python = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    match deps {
        Some(deps) if classes.join("corvus/diff/Diff.class").exists() && have_python => {
            Some(format!("{}:{}", classes.display(), deps.trim()))
        }
        _ => {
            let msg = format!(
                "the differential harness's program is not built or python3 is missing (cd tests/rocketmq-diff/client{major} && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=cp.txt)"
            );
            assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
            eprintln!("skipped: {msg}");
            None
        }
    }
}

/// The names of the scenarios of the short set, in `scenarios.txt`'s order.
fn short_scenarios() -> Vec<String> {
    let text = std::fs::read_to_string(harness_dir().join("scenarios.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?;
            (words.next() == Some("short")).then(|| name.to_owned())
        })
        .collect()
}

/// Runs the short set with the `major`.x client against a corvus broker set up as the
/// harness sets up both brokers, and compares its transcript with Apache RocketMQ's.
fn short_set_matches_rocketmq(major: u32) {
    let Some(cp) = program_or_skip(major) else {
        return;
    };
    let scenarios = short_scenarios();
    assert!(scenarios.len() >= 10, "the short set: {scenarios:?}");
    let conf = harness_dir().join("broker.conf");
    let c = Cluster::start_with(1, "small", |o| {
        o.extra = vec!["-c".into(), conf.display().to_string()];
    });
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx256m")
        .arg("-XX:TieredStopAtLevel=1")
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(&cp)
        .arg("corvus.diff.Diff")
        .arg(&c.namesrv.addr)
        .arg(format!("_c{major}"))
        .args(&scenarios)
        .env("ROCKETMQ_HOME", &home);
    let (status, lines) = run_client_program(
        &format!("diff-c{major}"),
        &mut cmd,
        Duration::from_secs(300),
    );
    assert!(status.success(), "the scenario program failed ({status})");
    let transcript = c.dir.path().join(format!("corvus-c{major}.txt"));
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let expected = harness_dir().join(format!("expected/rocketmq-5.3.3-c{major}.txt"));
    let out = Command::new("python3")
        .arg(harness_dir().join("diff.py"))
        .args(["--client", &major.to_string()])
        .args(["--scenarios", &scenarios.join(",")])
        .arg(&expected)
        .arg(&transcript)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "corvus differs from Apache RocketMQ 5.3.3 where known-differences.txt does not say why:\n{report}"
    );
}

#[test]
fn short_set_with_the_4_9_client_matches_rocketmq() {
    short_set_matches_rocketmq(4);
}

#[test]
fn short_set_with_the_5_x_client_matches_rocketmq() {
    short_set_matches_rocketmq(5);
}
