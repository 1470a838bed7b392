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

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration::{
    core_addrs, java_program_or_skip, remoting_call, run_client_program,
    update_topic_with_attributes, wait_for_route, workspace_root, Cluster,
};
use remoting::codes::request;
use remoting::RemotingCommand;

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

fn expected_dir() -> std::path::PathBuf {
    workspace_root().join("tests/rocketmq-v5/expected")
}

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

/// The Java SDK dials TLS unless told otherwise (`enableSsl(false)`): a broker with TLS on its
/// ports serves it there, HTTP/2 picked by ALPN as gRPC needs, and plaintext clients beside.
#[test]
fn the_sdk_over_tls_is_served_on_the_broker_port() {
    let Some(program) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let pki = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (pki.path().join("server.pem"), pki.path().join("server.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some(format!(
            "tls_mode = \"permissive\"\ntls_cert_path = \"{}\"\ntls_key_path = \"{}\"\n",
            cert_path.display(),
            key_path.display()
        ))
    });
    let ns = c.namesrv.addr.clone();
    let f = update_topic_with_attributes(&c.broker.addr, "V5Normal", 4, "+message.type=NORMAL");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&ns, "V5Normal");
    let endpoint = core_addrs(&ns).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    if let Some(differs) = run_scenario(&program, &endpoint, &home, "produce", &["--tls"]) {
        panic!("over TLS:\n{differs}");
    }
}

/// Starts corvus, creates the topics (and groups) of `names`, runs each scenario against the
/// first core's port and fails with every transcript that differs from Apache's.
fn run_against_corvus(names: &[&str]) {
    let Some(program) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
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
        let f = update_topic_with_attributes(&c.broker.addr, topic, 4, &attr);
        assert_eq!(f.command.code, 0, "{topic} {attr}: {:?}", f.command.remark);
        wait_for_route(&ns, topic);
    }
    // As run-apache.sh: push's failing message goes to the DLQ after 3 deliveries, and
    // fifo-push's group is orderly.
    let groups: &[(&str, &str)] = &[
        ("push", r#"{"groupName":"V5PushGroup","retryMaxTimes":2}"#),
        (
            "fifo-push",
            r#"{"groupName":"V5FifoPushGroup","consumeMessageOrderly":true}"#,
        ),
    ];
    for (name, config) in groups {
        if names.contains(name) {
            let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
            let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
            assert_eq!(f.command.code, 0, "{config}: {:?}", f.command.remark);
        }
    }

    let endpoint = core_addrs(&ns).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    // Two lanes of about the same length: push (about a minute) with the short ones.
    let (first, second): (Vec<&str>, Vec<&str>) = names
        .iter()
        .partition(|n| ["push", "share", "produce", "fifo", "delay"].contains(n));
    let failures: Vec<String> = std::thread::scope(|s| {
        let lanes: Vec<_> = [first, second]
            .into_iter()
            .map(|lane| {
                let (program, endpoint, home) = (&program, &endpoint, &home);
                s.spawn(move || {
                    lane.iter()
                        .filter_map(|name| run_scenario(program, endpoint, home, name, &[]))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        lanes.into_iter().flat_map(|l| l.join().unwrap()).collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ from Apache's transcripts:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

/// Runs one scenario against `endpoint` (with the program's options `extra`); what differs
/// from Apache's transcript, if anything.
fn run_scenario(
    program: &str,
    endpoint: &str,
    home: &Path,
    name: &str,
    extra: &[&str],
) -> Option<String> {
    let expected = std::fs::read_to_string(expected_dir().join(format!("{name}.txt"))).unwrap();
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(program)
        .arg("corvus.v5.Scenarios")
        .args([endpoint, name])
        .args(extra);
    let (status, lines) = run_client_program(name, &mut cmd, Duration::from_secs(300));
    let want: Vec<&str> = expected.lines().collect();
    (!status.success() || lines != want).then(|| {
        format!(
            "== {name} against corvus at {endpoint} ({status}):\n{}\n== Apache RocketMQ 5.3.3 and its Proxy said:\n{}",
            lines.join("\n"),
            expected.trim_end()
        )
    })
}
