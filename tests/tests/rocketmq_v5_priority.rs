//! Priority messages (RocketMQ 5.4) through RocketMQ 5's gRPC SDKs against corvus's broker
//! port: for Java 5.2.0 (`tests/rocketmq-v52`, `MessageBuilder.setPriority`, as RocketMQ's own
//! example sends them) and for Python 5.1.2 (`tests/rocketmq-python5/priority.py`,
//! `Message.priority`), on a one-core broker (one RocketMQ broker, whose queues are the
//! priority levels; ARCHITECTURE.md, "Priority messages"): a backlog of priorities 0-9 sent
//! while no consumer runs is received by a SimpleConsumer highest priority first, each
//! message once and with its priority; a kill -9 of the broker between the sends and the
//! receive loses no acknowledged message and keeps that order. On a two-core broker (two
//! brokers to the SDK) what comes from each core comes highest priority first, and nothing
//! orders the two.
//!
//! `.ci/run` builds the Java program (`mvn` there, which writes `cp.txt`) and makes the Python
//! SDK's venv; without them the tests say so and skip, and fail where `CORVUS_REQUIRE_JAVA` /
//! `CORVUS_REQUIRE_PYTHON5` are set, as CI sets them.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use integration::{
    java_program_or_skip, metrics, mqadmin_json, or_skip, run_client_program,
    update_topic_with_attributes, wait_for, wait_for_route, workspace_root, Cluster,
};

const TOPIC: &str = "V5Priority";
const GROUP: &str = "V5PriorityGroup";
/// Each round sends priorities 0 to 9, lowest first.
const ROUNDS: usize = 3;

/// An SDK's program: the Java one's classpath or the Python SDK venv's interpreter.
enum Sdk {
    Java(String),
    Python(PathBuf),
}

fn java() -> Option<Sdk> {
    java_program_or_skip("tests/rocketmq-v52", Some("corvus/v52/Priority.class")).map(Sdk::Java)
}

fn python() -> Option<Sdk> {
    let venv = workspace_root().join("tests/rocketmq-python5/.venv");
    let python = venv.join("bin/python");
    let installed = std::fs::read_dir(venv.join("lib"))
        .ok()
        .is_some_and(|mut d| {
            d.any(|e| {
                e.is_ok_and(|e| {
                    e.path()
                        .join("site-packages/rocketmq/v5/client/client.py")
                        .exists()
                })
            })
        });
    or_skip(
        (installed && python.exists()).then_some(python),
        "CORVUS_REQUIRE_PYTHON5",
        "the Python SDK's venv is not made (python3 -m venv tests/rocketmq-python5/.venv && tests/rocketmq-python5/.venv/bin/pip install rocketmq-python-client==5.1.2)",
    )
    .map(Sdk::Python)
}

/// Runs the SDK's program with `args` to its end (bounded), `home` its home directory; it
/// must end with `OK`.
fn run(sdk: &Sdk, home: &Path, args: &[&str]) -> Vec<String> {
    let mut cmd = match sdk {
        Sdk::Java(cp) => {
            let mut cmd = Command::new("java");
            cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
                .arg(format!("-Duser.home={}", home.display()))
                .arg("-cp")
                .arg(cp)
                .arg("corvus.v52.Priority");
            cmd
        }
        Sdk::Python(python) => {
            let mut cmd = Command::new(python);
            cmd.arg(workspace_root().join("tests/rocketmq-python5/priority.py"))
                .env("HOME", home)
                .env("PYTHONUNBUFFERED", "1");
            cmd
        }
    };
    cmd.args(args);
    let (status, lines) = run_client_program(args[0], &mut cmd, Duration::from_secs(180));
    assert!(
        status.success() && lines.last().map(String::as_str) == Some("OK"),
        "{args:?} failed ({status}): {lines:?}"
    );
    lines
}

/// A broker of `cores` cores serving metrics, the PRIORITY topic (10 queues per core:
/// priorities 0-9 each a level of their own on every core), the metrics address and the
/// clients' home.
fn priority_cluster(cores: u16) -> (Cluster, String, std::path::PathBuf) {
    let (c, url) = Cluster::start_metered(cores);
    let queues = 10 * u32::from(cores);
    let f = update_topic_with_attributes(&c.broker.addr, TOPIC, queues, "+message.type=PRIORITY");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&c.namesrv.addr, TOPIC);
    let home = c.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    (c, url, home)
}

/// The broker's gRPC endpoint as the NameServer routes it (its core's direct address), once
/// it is not `old`.
fn endpoint(ns: &str, old: Option<&str>) -> String {
    wait_for(Duration::from_secs(15), || {
        let v = mqadmin_json(ns, &["cluster-list"]);
        let addr = v["clusters"][0]["brokers"][0]["core_addrs"][0].as_str()?;
        (Some(addr) != old).then(|| addr.to_owned())
    })
    .expect("the broker is routed")
}

/// The bodies the sends acknowledged.
fn sent(lines: &[String]) -> Vec<String> {
    let sent: Vec<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("SENT "))
        .map(str::to_owned)
        .collect();
    assert_eq!(sent.len(), ROUNDS * 10, "{lines:?}");
    sent
}

/// The receive got every acknowledged send once, each with the priority it was sent with,
/// highest priority first from each broker (core) it came from (`?`: the SDK does not say,
/// and the broker has one core).
fn assert_received(sent: &[String], lines: &[String]) {
    let received: Vec<(String, u32, String)> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("RECEIVED "))
        .map(|l| {
            let (body, rest) = l.split_once(" priority=").unwrap();
            let (priority, broker) = rest.split_once(" broker=").unwrap();
            let given: u32 = body[1..body.find('-').unwrap()].parse().unwrap();
            assert_eq!(
                priority,
                given.to_string(),
                "{body} delivered with its priority"
            );
            (body.to_owned(), given, broker.to_owned())
        })
        .collect();
    let mut bodies: Vec<&str> = received.iter().map(|r| r.0.as_str()).collect();
    bodies.sort_unstable();
    let mut want: Vec<&str> = sent.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(bodies, want, "each acknowledged message once: {lines:?}");
    let mut brokers: Vec<&str> = received.iter().map(|r| r.2.as_str()).collect();
    brokers.sort_unstable();
    brokers.dedup();
    for broker in brokers {
        let order: Vec<u32> = received
            .iter()
            .filter(|r| r.2 == broker)
            .map(|r| r.1)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] >= w[1]),
            "higher priorities first from {broker}: {order:?}"
        );
    }
}

/// Sends a backlog with `sdk` while no consumer runs, then receives it; checks the order and
/// that nothing was lost, and the per-priority metrics.
fn backlog_highest_priority_first(sdk: &Sdk) {
    let (c, url, home) = priority_cluster(1);
    let ns = c.namesrv.addr.clone();
    let at = endpoint(&ns, None);
    let rounds = ROUNDS.to_string();
    let sent = sent(&run(sdk, &home, &["send", &at, TOPIC, &rounds]));
    let total = sent.len().to_string();
    let lines = run(sdk, &home, &["receive", &at, TOPIC, GROUP, &total]);
    assert_received(&sent, &lines);
    // Per priority, as stored and as handed out (published once a second).
    for p in 0..10 {
        for way in ["sent", "delivered"] {
            let line = format!(
                "corvus_priority_messages_total{{core=\"0\",priority=\"{p}\",way=\"{way}\"}} {ROUNDS}"
            );
            let seen = wait_for(Duration::from_secs(10), || {
                metrics::text(&url).contains(&line).then_some(())
            });
            assert!(seen.is_some(), "{line} in\n{}", metrics::text(&url));
        }
    }
}

#[test]
fn the_java_sdk_receives_a_backlog_highest_priority_first() {
    if let Some(sdk) = java() {
        backlog_highest_priority_first(&sdk);
    }
}

#[test]
fn the_python_sdk_receives_a_backlog_highest_priority_first() {
    if let Some(sdk) = python() {
        backlog_highest_priority_first(&sdk);
    }
}

#[test]
fn a_kill_9_between_send_and_receive_loses_no_acknowledged_priority_message() {
    let Some(sdk) = java() else {
        return;
    };
    let (mut c, _, home) = priority_cluster(1);
    let ns = c.namesrv.addr.clone();
    let before = endpoint(&ns, None);
    let rounds = ROUNDS.to_string();
    let sent = sent(&run(&sdk, &home, &["send", &before, TOPIC, &rounds]));
    c.restart_broker();
    let after = endpoint(&ns, Some(&before));
    let total = sent.len().to_string();
    let lines = run(&sdk, &home, &["receive", &after, TOPIC, GROUP, &total]);
    assert_received(&sent, &lines);
}

/// Two cores, two brokers to the SDK: the producer spreads the backlog over both, and what
/// the consumer gets from each comes highest priority first (nothing orders the two).
#[test]
fn the_java_sdk_gets_each_cores_backlog_highest_priority_first() {
    let Some(sdk) = java() else {
        return;
    };
    let (c, _, home) = priority_cluster(2);
    let ns = c.namesrv.addr.clone();
    let at = endpoint(&ns, None);
    let rounds = ROUNDS.to_string();
    let sent = sent(&run(&sdk, &home, &["send", &at, TOPIC, &rounds]));
    let total = sent.len().to_string();
    let lines = run(&sdk, &home, &["receive", &at, TOPIC, GROUP, &total]);
    assert_received(&sent, &lines);
    for core in ["broker-a-c0", "broker-a-c1"] {
        let from = format!("broker={core}");
        assert!(
            lines.iter().any(|l| l.ends_with(&from)),
            "some messages came from {core}: {lines:?}"
        );
    }
}
