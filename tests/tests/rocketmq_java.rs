//! An unchanged RocketMQ 4.9 Java application (`tests/rocketmq-java`, Apache's
//! rocketmq-client 4.9.8) against corvus over the remoting protocol, on the NameServer's and
//! the broker's usual ports: a DefaultMQProducer sends single messages and a batch to a
//! broker of two cores, a DefaultMQPushConsumer of a new group receives every one of them,
//! and lookups by offset message id find each message. While it sends and consumes, no
//! request hops between the broker's cores: the route leads each to the core that owns its
//! queue.
//!
//! A consumer that fails each message once gets it back from its group's retry topic
//! (CONSUMER_SEND_MSG_BACK); a second member that joins a group while messages flow gets its
//! share of the queues at once, without the two consuming the same queues meanwhile
//! (NOTIFY_CONSUMER_IDS_CHANGED).
//!
//! `.ci/run` builds the Java program (`mvn package` there, which writes `cp.txt`); without a
//! JVM and the build the test says so and fails when `CORVUS_REQUIRE_JAVA` is set, as CI
//! sets it.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use client::Admin;
use integration::{create_topic, workspace_root, Cluster};

/// The Java program's classpath, when it has been built.
fn java_classpath() -> Option<String> {
    let dir: PathBuf = workspace_root().join("tests/rocketmq-java");
    let deps = std::fs::read_to_string(dir.join("cp.txt")).ok()?;
    let classes = dir.join("target/classes");
    classes
        .join("corvus/Roundtrip.class")
        .exists()
        .then(|| format!("{}:{}", classes.display(), deps.trim()))
}

/// Runs one of the Java programs to its end (bounded) and returns its output lines; it must
/// exit 0.
fn run_java(cp: &str, class: &str, args: &[&str]) -> Vec<String> {
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(cp)
        .arg(class)
        .args(args)
        .env("ROCKETMQ_HOME", std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("java runs");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    let Ok(lines) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = child.kill();
        panic!("{class} did not finish within 120 s");
    };
    let status = child.wait().expect("java exits");
    for l in &lines {
        println!("{class}: {l}");
    }
    assert!(status.success(), "{class} failed ({status}): {lines:?}");
    lines
}

/// The classpath, or `None` after saying why the test does not run.
fn java_or_skip() -> Option<String> {
    let cp = java_classpath();
    if cp.is_none() {
        let msg = "the Java client program is not built (cd tests/rocketmq-java && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=cp.txt)";
        assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
    }
    cp
}

fn hops(ns: &str, broker: &str) -> (u64, u64) {
    let st = Admin::new(ns).unwrap().broker_status(broker).unwrap();
    let data = st.cores.iter().map(|c| c.cross_core_hops).sum();
    let produced = st.cores.iter().map(|c| c.produced_messages).sum();
    (data, produced)
}

#[test]
fn a_java_producer_and_push_consumer_round_trip_every_message_without_hops() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "JavaTopic", 8);

    let mut java = Command::new("java")
        .args(["-cp", &cp, "corvus.Roundtrip", &ns, "JavaTopic", "200"])
        .env("ROCKETMQ_HOME", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("java runs");
    let stdout = java.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("java: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let wait_for = |lines: &mut Vec<String>, what: &str| loop {
        match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(l) => {
                let done = l.starts_with(what);
                lines.push(l);
                if done {
                    return;
                }
            }
            Err(_) => panic!("no `{what}` from the Java program; it said {lines:?}"),
        }
    };
    wait_for(&mut lines, "STEADY DONE");
    let (data_hops, produced) = hops(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        data_hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
    let mut stdin = java.stdin.take().expect("piped");
    writeln!(stdin).expect("the Java program reads its go-ahead");
    wait_for(&mut lines, "ALL RECEIVED");
    let status = java.wait().expect("java exits");
    assert!(status.success(), "{status}: {lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("RECEIVED 210 of 210")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "VIEWED 5"), "{lines:?}");
}

#[test]
fn a_message_the_java_consumer_fails_comes_back_from_the_retry_topic() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "RetryTopic", 8);
    let lines = run_java(
        &cp,
        "corvus.Retry",
        &[&ns, "RetryTopic", "20", "RetryGroup"],
    );
    assert!(lines.iter().any(|l| l == "ALL RETRIED"), "{lines:?}");
    // RocketMQ's shape: the group's retry topic has one queue on each broker, and each of
    // the two cores is a broker of its own in RocketMQ's routes.
    let route = Admin::new(&ns)
        .unwrap()
        .topic_route("%RETRY%RetryGroup")
        .unwrap();
    let queues: u32 = route.data.queues.iter().map(|q| q.write_queues).sum();
    assert_eq!(queues, 2, "{:?}", route.data);
}

#[test]
fn a_java_member_joining_a_group_shares_the_queues_at_once() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "RebTopic", 8);
    let lines = run_java(&cp, "corvus.Rebalance", &[&ns, "RebTopic", "RebGroup"]);
    assert!(
        lines.iter().any(|l| l == "SHARED WITHOUT DUPLICATES"),
        "{lines:?}"
    );
}
