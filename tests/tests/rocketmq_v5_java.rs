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

use integration::v5::{self, expected_dir, SCENARIOS};
use integration::{
    core_addrs, java_program_or_skip, update_topic_with_attributes, wait_for_route, Cluster,
};

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
    let names = v5::all_names();
    run_against_corvus(&names);
}

/// RocketMQ 5.3.2's recall through the SDK (`Producer.recallMessage`): a delay message
/// recalled with its receipt's handle is not delivered while the one sent beside it is, and a
/// recall of the delivered one is refused (the `recall` scenario, Java only).
#[test]
fn a_delay_message_recalled_by_the_sdk_is_not_delivered() {
    let Some(program) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let c = Cluster::start_with(1, "small", |o| o.extra = v5::broker_conf_args());
    let ns = c.namesrv.addr.clone();
    let f = update_topic_with_attributes(&c.broker.addr, "V5Recall", 4, "+message.type=DELAY");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&ns, "V5Recall");
    let endpoint = core_addrs(&ns).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    if let Some(differs) = v5::java_scenario(&program, &endpoint, &home, "recall", &[]) {
        panic!("{differs}");
    }
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
    if let Some(differs) = v5::java_scenario(&program, &endpoint, &home, "produce", &["--tls"]) {
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
    let (c, endpoint) = v5::cluster_for(names);
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    v5::run_in_lanes(names, |name| {
        v5::java_scenario(&program, &endpoint, &home, name, &[])
    });
}
