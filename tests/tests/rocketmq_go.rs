//! An unchanged application of Apache's Go RocketMQ client (`tests/rocketmq-go`,
//! apache/rocketmq-client-go v2.1.2) against corvus over the remoting protocol, on the
//! NameServer's and the broker's usual ports: a producer sends 200 single messages
//! (SendSync, tags and keys) and a batch of 10 to a broker of two cores, and a push
//! consumer of a new group, consuming from the first offset, receives every one of them.
//! The broker stored each message exactly once, and no request hopped between its cores.
//!
//! `.ci/run` builds the Go program (`go build -o bin/rocketmq-go` there); without Go and
//! the build the test says so and fails when `CORVUS_REQUIRE_GO` is set, as CI sets it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use integration::{create_topic, hops_and_stored, run_client_program, workspace_root, Cluster};

/// The Go program, when it has been built.
fn go_program() -> Option<PathBuf> {
    let p = workspace_root().join("tests/rocketmq-go/bin/rocketmq-go");
    p.exists().then_some(p)
}

#[test]
fn a_go_producer_and_push_consumer_round_trip_every_message() {
    let Some(program) = go_program() else {
        let msg = "the Go client program is not built (cd tests/rocketmq-go && go build -o bin/rocketmq-go .)";
        assert!(std::env::var_os("CORVUS_REQUIRE_GO").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
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
