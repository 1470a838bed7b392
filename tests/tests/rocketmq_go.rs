//! An unchanged application of Apache's Go RocketMQ client (`tests/rocketmq-go`,
//! apache/rocketmq-client-go v2.1.2) against corvus over the remoting protocol, on the
//! NameServer's and the broker's usual ports: a producer sends 200 single messages
//! (SendSync, tags and keys) and a batch of 10 to a broker of two cores, and a push
//! consumer of a new group, consuming from the first offset, receives every one of them.
//! The broker stored each message exactly once, and no request hopped between its cores.
//!
//! With an ACL-enabled broker, the same program configured with an access key and secret
//! (the Go client's `WithCredentials`) round-trips on the topic its account may use, and
//! with a wrong secret its first send is refused.
//!
//! `.ci/run` builds the Go program (`go build -o bin/rocketmq-go` there); without Go and
//! the build the test says so and fails when `CORVUS_REQUIRE_GO` is set, as CI sets it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use integration::{
    create_topic, create_topic_as, hops_and_stored, run_client_program, workspace_root, AclRules,
    Cluster,
};

/// The Go program, when it has been built.
fn go_program() -> Option<PathBuf> {
    let p = workspace_root().join("tests/rocketmq-go/bin/rocketmq-go");
    p.exists().then_some(p)
}

/// The Go program, or `None` (after saying why) where it is not built outside CI.
fn go_program_or_skip() -> Option<PathBuf> {
    integration::or_skip(
        go_program(),
        "CORVUS_REQUIRE_GO",
        "the Go client program is not built (cd tests/rocketmq-go && go build -o bin/rocketmq-go .)",
    )
}

#[test]
fn a_go_producer_and_push_consumer_round_trip_every_message() {
    let Some(program) = go_program_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "GoTopic", 8);

    // The program gives itself 40 s to receive everything after sending; this bounds the
    // whole run, sends included.
    let (status, lines) = run_client_program(
        "Go",
        Command::new(&program)
            .args([&ns, "GoTopic", "200", "GoRoundtripGroup"])
            .env("HOME", c.dir.path()),
        Duration::from_secs(120),
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "SENT 210 to 8 queues, batch SEND_OK"),
        "the producer spread its sends over every queue of both cores: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "RECEIVED 210 of 210"),
        "the push consumer received every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("ALL RECEIVED"));

    let (hops, produced) = hops_and_stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
}

/// `go-client` may publish and consume `GoAcl` as `GoAclGroup`, and nothing else.
const GO_RULES: &str = "accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: go-client
    secretKey: go-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - GoAcl=PUB|SUB
    groupPerms:
      - GoAclGroup=SUB
";

#[test]
fn a_go_client_with_credentials_round_trips_and_a_wrong_secret_is_refused() {
    let Some(program) = go_program_or_skip() else {
        return;
    };
    let rules = AclRules::write(GO_RULES);
    let c = Cluster::start_with(2, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let ns = c.namesrv.addr.clone();
    create_topic_as(&ns, ("admin0001", "admin-secret-1"), "GoAcl", 4);

    let (status, lines) = run_client_program(
        "Go",
        Command::new(&program)
            .args([&ns, "GoAcl", "20", "GoAclGroup"])
            .env("HOME", c.dir.path())
            .env("ROCKETMQ_ACCESS_KEY", "go-client")
            .env("ROCKETMQ_SECRET_KEY", "go-secret-1"),
        Duration::from_secs(120),
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "SENT 30 to 4 queues, batch SEND_OK"),
        "the signed producer's sends were accepted: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "RECEIVED 30 of 30"),
        "the signed push consumer received every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");

    let (status, lines) = run_client_program(
        "Go",
        Command::new(&program)
            .args([&ns, "GoAcl", "1", "GoAclGroup"])
            .env("HOME", c.dir.path())
            .env("ROCKETMQ_ACCESS_KEY", "go-client")
            .env("ROCKETMQ_SECRET_KEY", "not-the-secret"),
        Duration::from_secs(120),
    );
    assert_eq!(status.code(), Some(2), "a client error: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("SENT")),
        "nothing was accepted with a wrong secret: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ERROR") && l.contains("CODE: 16")),
        "the send was refused NO_PERMISSION (16): {lines:?}"
    );
}
