//! An unchanged application of Apache's Go RocketMQ client (`tests/rocketmq-go`,
//! apache/rocketmq-client-go v2.1.2) against corvus over the remoting protocol, on the
//! NameServer's and the broker's usual ports: a producer sends 200 single messages
//! (SendSync, tags and keys) and a batch of 10 to a broker of two cores, and a push
//! consumer of a new group, consuming from the first offset, receives every one of them.
//! The broker stored each message exactly once, and no request hopped between its cores.
//!
//! `.ci/run` builds the Go program (`go build -o bin/rocketmq-go` there); without Go and
//! the build the test says so and fails when `CORVUS_REQUIRE_GO` is set, as CI sets it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client::Admin;
use integration::{create_topic, workspace_root, Cluster};

/// The Go program, when it has been built.
fn go_program() -> Option<PathBuf> {
    let p = workspace_root().join("tests/rocketmq-go/bin/rocketmq-go");
    p.exists().then_some(p)
}

/// The client program, killed if the test gives up on it.
struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn stored(ns: &str, broker: &str) -> (u64, u64) {
    let st = Admin::new(ns)
        .expect("an admin client")
        .broker_status(broker)
        .expect("the broker tells its status");
    let hops = st.cores.iter().map(|c| c.cross_core_hops).sum();
    let produced = st.cores.iter().map(|c| c.produced_messages).sum();
    (hops, produced)
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

    let started = Instant::now();
    let mut go = Program(
        Command::new(&program)
            .args([&ns, "GoTopic", "200", "GoRoundtripGroup"])
            .env("HOME", c.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the Go program runs"),
    );
    let stdout = go.0.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("go: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The program gives itself 40 s to receive everything after sending; this bounds the
    // whole run, sends included.
    let deadline = started + Duration::from_secs(120);
    let mut lines: Vec<String> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the Go program did not finish within 120 s; it said {lines:?}")
            }
        }
    }
    let status = loop {
        if let Some(s) = go.0.try_wait().expect("wait for the Go program") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the Go program closed its output but did not exit; it said {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("the Go program ran {:?}", started.elapsed());
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

    let (hops, produced) = stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
}
