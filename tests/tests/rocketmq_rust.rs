//! An application of the Rust RocketMQ client (`tests/rocketmq-rust`, crates.io
//! rocketmq-client-rust 1.0.0, the remoting protocol) against corvus, on the NameServer's and
//! the broker's usual ports: a DefaultMQProducer sends 200 messages with tags and keys to a
//! broker of two cores, and a DefaultMQPushConsumer of a new group, consuming from the first
//! offset, receives every one of them. The topic holds each message exactly once.
//!
//! `.ci/run` builds the program (`cargo build --manifest-path tests/rocketmq-rust/Cargo.toml
//! --target-dir tests/rocketmq-rust/target`: a project of its own, not a member of this
//! workspace, built unoptimised since it is a probe of the protocol, not a benchmark); without the build the test says so and fails when
//! `CORVUS_REQUIRE_RUST_CLIENT` is set, as CI sets it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use client::Admin;
use integration::{create_topic, run_client_program, workspace_root, Cluster};

/// The program, when it has been built.
fn rust_program() -> Option<PathBuf> {
    let p = workspace_root().join("tests/rocketmq-rust/target/debug/rocketmq-rust-roundtrip");
    p.exists().then_some(p)
}

#[test]
fn a_rust_client_producer_and_push_consumer_round_trip_every_message() {
    let Some(program) = rust_program() else {
        let msg = "the Rust client program is not built (cargo build --manifest-path tests/rocketmq-rust/Cargo.toml --target-dir tests/rocketmq-rust/target)";
        assert!(
            std::env::var_os("CORVUS_REQUIRE_RUST_CLIENT").is_none(),
            "{msg}"
        );
        eprintln!("skipped: {msg}");
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "RustClientTopic", 8);

    // The program gives itself 40 s to receive everything after sending; this bounds the
    // whole run, sends included.
    let (status, lines) = run_client_program(
        "Rust client",
        Command::new(&program)
            .args([&ns, "RustClientTopic", "200", "RustRoundtripGroup"])
            .env("HOME", c.dir.path()),
        Duration::from_secs(90),
    );
    assert!(lines.iter().any(|l| l == "SENT 200"), "{lines:?}");
    assert!(
        lines.iter().any(|l| l == "RECEIVED 200 of 200"),
        "the push consumer received every message: {lines:?}"
    );
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("ALL RECEIVED"));

    // Stored once each in the topic. (The broker's total may count a few more: this client's
    // consume tasks sometimes fail on its own runtime's admission limit,
    // "runtime.capacity.exhausted", and it then sends the messages back to the group's retry
    // topic, CONSUMER_SEND_MSG_BACK, as a failed consumption does.)
    let progress = Admin::new(&ns)
        .expect("an admin client")
        .consumer_progress("RustRoundtripGroup", "RustClientTopic")
        .expect("the group's progress");
    let stored: u64 = progress.iter().map(|q| q.max_offset.0).sum();
    assert_eq!(
        stored, 200,
        "every message sent was stored once: {progress:?}"
    );
}
