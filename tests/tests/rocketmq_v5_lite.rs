//! Lite Topics (RocketMQ 5.5) through RocketMQ 5's gRPC SDKs, as RocketMQ's own examples use
//! them (a producer's lite topic on each message, a `LitePushConsumer` bound to the parent
//! that subscribes lite topics one by one): for Java 5.2.0 (`tests/rocketmq-v52`,
//! `corvus.v52.Lite`), Python 5.1.2 (`tests/rocketmq-python5/lite.py`, which also drives the
//! Python SDK's `LiteSimpleConsumer`) and Go v5.1.4 (`tests/rocketmq-go5-lite`), on a
//! two-core broker, so that lite topics live on both cores (ARCHITECTURE.md, "Lite Topics"):
//! each subscribed lite topic is consumed whole and in order, a failed message comes back
//! before the ones after it, a lite topic nobody subscribed keeps its messages for the
//! consumer that subscribes it later, a kill -9 between the sends and the consumption
//! loses no acknowledged message, and in an Exclusive group (`lite.sub.model`) a lite topic
//! is the last subscriber's, the one before told so.
//!
//! `.ci/run` builds the Java and Go programs (`mvn` there, which writes `cp.txt`; `go build`)
//! and makes the Python SDK's venv; without them the tests say so and skip, and fail where
//! `CORVUS_REQUIRE_JAVA` / `CORVUS_REQUIRE_PYTHON5` / `CORVUS_REQUIRE_GO` are set, as CI sets
//! them.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use integration::{
    consecutive_free_ports, java_program_or_skip, mqadmin_json, or_skip, remoting_call,
    run_client_program, update_topic_with_attributes, wait_for, wait_for_route, workspace_root,
    Cluster,
};
use remoting::codes::request;
use remoting::RemotingCommand;

const TOPIC: &str = "V5LiteParent";
const GROUP: &str = "V5LiteGroup";
const PER_LITE: usize = 5;

/// An SDK's program: the Java one's classpath, the Python SDK venv's interpreter or the Go
/// program.
enum Sdk {
    Java(String),
    Python(PathBuf),
    Go(PathBuf),
}

fn java() -> Option<Sdk> {
    java_program_or_skip("tests/rocketmq-v52", Some("corvus/v52/Lite.class")).map(Sdk::Java)
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
                        .join("site-packages/rocketmq/v5/consumer/push/lite_push_consumer.py")
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

fn go() -> Option<Sdk> {
    let p = workspace_root().join("tests/rocketmq-go5-lite/bin/lite");
    or_skip(
        p.exists().then_some(p),
        "CORVUS_REQUIRE_GO",
        "the Go v5 SDK's lite program is not built (cd tests/rocketmq-go5-lite && go build -o bin/lite .)",
    )
    .map(Sdk::Go)
}

/// Runs the SDK's program (`corvus.v52.Lite`, `lite.py`, `tests/rocketmq-go5-lite`) with `args` to its end (bounded),
/// `home` its home directory; it must end with `OK`.
fn run(sdk: &Sdk, home: &Path, args: &[&str]) -> Vec<String> {
    let mut cmd = match sdk {
        Sdk::Java(cp) => {
            let mut cmd = Command::new("java");
            cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
                .arg(format!("-Duser.home={}", home.display()))
                .arg("-cp")
                .arg(cp)
                .arg("corvus.v52.Lite");
            cmd
        }
        Sdk::Python(python) => {
            let mut cmd = Command::new(python);
            cmd.arg(workspace_root().join("tests/rocketmq-python5/lite.py"))
                .env("HOME", home)
                .env("PYTHONUNBUFFERED", "1");
            cmd
        }
        Sdk::Go(program) => {
            let mut cmd = Command::new(program);
            cmd.env("HOME", home);
            cmd
        }
    };
    cmd.args(args);
    let (status, lines) = run_client_program(args[0], &mut cmd, Duration::from_secs(300));
    assert!(
        status.success() && lines.last().map(String::as_str) == Some("OK"),
        "{args:?} failed ({status}): {lines:?}"
    );
    lines
}

/// A two-core broker with the LITE parent topic and an orderly consumer group (the SDK
/// consumes each lite topic in order, retrying a failed message before the next); the
/// clients' home.
fn lite_cluster() -> (Cluster, std::path::PathBuf) {
    // A consumer's close waits out its receives: short long polls keep the runs short.
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("long_polling_max_ms = 2000\n".into())
    });
    let f = update_topic_with_attributes(&c.broker.addr, TOPIC, 8, "+message.type=LITE");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&c.namesrv.addr, TOPIC);
    let config = format!(r#"{{"groupName":"{GROUP}","consumeMessageOrderly":true}}"#);
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
    let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    let home = c.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    (c, home)
}

/// The broker's gRPC endpoint as the NameServer routes it, once it is not `old`.
fn endpoint(ns: &str, old: Option<&str>) -> String {
    wait_for(Duration::from_secs(15), || {
        let v = mqadmin_json(ns, &["cluster-list"]);
        let addr = v["clusters"][0]["brokers"][0]["core_addrs"][0].as_str()?;
        (Some(addr) != old).then(|| addr.to_owned())
    })
    .expect("the broker is routed")
}

/// The bodies each successful or failed delivery carried, per lite topic, in the order the
/// consumer saw them; checks each came with its own lite topic.
fn received(lines: &[String], lite: &str) -> Vec<(String, u32)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("RECEIVED "))
        .filter_map(|l| {
            let (body, rest) = l.split_once(" lite=")?;
            let (got_lite, attempt) = rest.split_once(" attempt=")?;
            (got_lite == lite).then(|| (body.to_owned(), attempt.parse().unwrap()))
        })
        .collect()
}

fn bodies(lite: &str) -> Vec<String> {
    (0..PER_LITE).map(|k| format!("{lite}#{k}")).collect()
}

/// Each delivery of `lite` in order: its messages once each, but `failed_once` twice in a
/// row (the retry before anything after it).
fn assert_in_order(lines: &[String], lite: &str, failed_once: Option<&str>) {
    let got = received(lines, lite);
    let mut want: Vec<String> = Vec::new();
    for b in bodies(lite) {
        if Some(b.as_str()) == failed_once {
            want.push(b.clone());
        }
        want.push(b);
    }
    let seen: Vec<String> = got.iter().map(|g| g.0.clone()).collect();
    assert_eq!(seen, want, "{lite} in order: {lines:?}");
}

/// The deliveries of `lite` in the order of their first delivery are its messages in order,
/// each delivered once but `again`, which comes a second time, attempt 2 (after the others:
/// what a consumer that goes on past a failure sees).
fn assert_first_deliveries_in_order(lines: &[String], lite: &str, again: Option<&str>) {
    let got = received(lines, lite);
    let mut first: Vec<String> = Vec::new();
    for (body, _) in &got {
        if !first.contains(body) {
            first.push(body.clone());
        }
    }
    assert_eq!(first, bodies(lite), "{lite} whole and in order: {lines:?}");
    for b in bodies(lite) {
        let attempts: Vec<u32> = got.iter().filter(|g| g.0 == b).map(|g| g.1).collect();
        let want: &[u32] = if Some(b.as_str()) == again {
            &[1, 2]
        } else {
            &[1]
        };
        assert_eq!(attempts, want, "{b}'s deliveries: {lines:?}");
    }
}

/// Sends to three lite topics, consumes two of them (one message failing once), then the
/// third with a consumer that subscribes it later.
fn subscribed_in_order_and_kept_for_later(sdk: &Sdk) {
    let (c, home) = lite_cluster();
    let at = endpoint(&c.namesrv.addr, None);
    let lites = "chat-a,chat-b,chat-c";
    let sent = run(
        sdk,
        &home,
        &["send", &at, TOPIC, lites, &PER_LITE.to_string()],
    );
    assert_eq!(
        sent.iter().filter(|l| l.starts_with("SENT ")).count(),
        3 * PER_LITE,
        "{sent:?}"
    );
    // chat-a and chat-b only; chat-b#0 fails once.
    let total = (2 * PER_LITE).to_string();
    let lines = run(
        sdk,
        &home,
        &[
            "consume",
            &at,
            TOPIC,
            GROUP,
            "chat-a,chat-b",
            &total,
            "chat-b#0",
        ],
    );
    assert_in_order(&lines, "chat-a", None);
    if matches!(sdk, Sdk::Go(_)) {
        // The Go SDK (v5.1.4) schedules a failed message's local retry and goes on with the
        // rest of the batch at once (its liteFifoConsumeService does not wait for the
        // retry, as the Java and Python SDKs do): the broker handed chat-b out in order, the
        // SDK consumes chat-b#0 again after chat-b#4.
        assert_first_deliveries_in_order(&lines, "chat-b", Some("chat-b#0"));
    } else {
        assert_in_order(&lines, "chat-b", Some("chat-b#0"));
    }
    assert!(
        received(&lines, "chat-c").is_empty(),
        "chat-c was not subscribed: {lines:?}"
    );
    // The Go SDK does not show its lite topic set.
    assert!(
        matches!(sdk, Sdk::Go(_)) || lines.iter().any(|l| l == "SUBSCRIBED chat-b"),
        "unsubscribeLite leaves chat-b: {lines:?}"
    );
    // chat-c kept its messages for the consumer that subscribes it.
    let lines = run(
        sdk,
        &home,
        &[
            "consume",
            &at,
            TOPIC,
            GROUP,
            "chat-c",
            &PER_LITE.to_string(),
        ],
    );
    assert_in_order(&lines, "chat-c", None);
    assert!(received(&lines, "chat-a").is_empty(), "{lines:?}");
}

#[test]
fn the_java_sdk_consumes_subscribed_lite_topics_in_order_and_later_subscribers_get_theirs() {
    if let Some(sdk) = java() {
        subscribed_in_order_and_kept_for_later(&sdk);
    }
}

#[test]
fn the_python_sdk_consumes_subscribed_lite_topics_in_order_and_later_subscribers_get_theirs() {
    if let Some(sdk) = python() {
        subscribed_in_order_and_kept_for_later(&sdk);
    }
}

#[test]
fn the_go_sdk_consumes_subscribed_lite_topics_in_order_and_later_subscribers_get_theirs() {
    if let Some(sdk) = go() {
        subscribed_in_order_and_kept_for_later(&sdk);
    }
}

/// Two Java LitePushConsumers of an Exclusive group subscribe one lite topic in turn: the
/// first is told it lost it (NotifyUnsubscribeLiteCommand on its Telemetry stream, whichever
/// core that is on) and drops it from its set; the lite topic's messages all go to the
/// second.
#[test]
fn in_an_exclusive_group_the_java_sdk_s_first_subscriber_is_told_it_lost_the_lite_topic() {
    let Some(sdk) = java() else {
        return;
    };
    let (c, home) = lite_cluster();
    let config = format!(
        r#"{{"groupName":"{GROUP}","consumeMessageOrderly":true,"attributes":{{"+lite.sub.model":"Exclusive"}}}}"#
    );
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
    let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    let at = endpoint(&c.namesrv.addr, None);
    let lines = run(
        &sdk,
        &home,
        &[
            "exclusive",
            &at,
            TOPIC,
            GROUP,
            "room-7",
            &PER_LITE.to_string(),
        ],
    );
    assert!(lines.iter().any(|l| l == "FIRST LOST room-7"), "{lines:?}");
    let second: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("RECEIVED BY second "))
        .collect();
    assert_eq!(second.len(), PER_LITE, "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("RECEIVED BY first ")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "SECOND HAS room-7"), "{lines:?}");
}

#[test]
fn a_kill_9_between_send_and_consume_loses_no_acknowledged_lite_message() {
    let Some(sdk) = java() else {
        return;
    };
    let (mut c, home) = lite_cluster();
    let ns = c.namesrv.addr.clone();
    let before = endpoint(&ns, None);
    let lites = "task-1,task-2,task-3,task-4";
    let sent = run(
        &sdk,
        &home,
        &["send", &before, TOPIC, lites, &PER_LITE.to_string()],
    );
    assert_eq!(
        sent.iter().filter(|l| l.starts_with("SENT ")).count(),
        4 * PER_LITE
    );
    c.restart_broker();
    let after = endpoint(&ns, Some(&before));
    let total = (4 * PER_LITE).to_string();
    let lines = run(
        &sdk,
        &home,
        &["consume", &after, TOPIC, GROUP, lites, &total],
    );
    for lite in lites.split(',') {
        assert_in_order(&lines, lite, None);
    }
}

/// A Java LitePushConsumer that keeps running while the broker is killed (-9) and restarted
/// on the same ports: its subscriptions, which a broker keeps as session state, come back
/// (the SDK sends its whole set again), and it consumes every lite topic whole and in order,
/// the messages sent before the kill and after the restart.
#[test]
fn a_running_lite_push_consumer_keeps_its_lite_topics_across_a_broker_kill_9() {
    let Some(sdk) = java() else {
        return;
    };
    let port = consecutive_free_ports(2);
    let mut c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some(format!(
            "long_polling_max_ms = 2000\nvip_channel = false\ndirect_port_base = {port}\n"
        ))
    });
    let f = update_topic_with_attributes(&c.broker.addr, TOPIC, 8, "+message.type=LITE");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    wait_for_route(&c.namesrv.addr, TOPIC);
    let config = format!(r#"{{"groupName":"{GROUP}","consumeMessageOrderly":true}}"#);
    let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
    let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    let home = c.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    let at = endpoint(&c.namesrv.addr, None);
    assert_eq!(at, format!("127.0.0.1:{port}"));
    let lites = "keep-1,keep-2,keep-3,keep-4";
    let half = 3;
    let sent = run(&sdk, &home, &["send", &at, TOPIC, lites, &half.to_string()]);
    assert_eq!(
        sent.iter().filter(|l| l.starts_with("SENT ")).count(),
        4 * half
    );
    let mark = c.dir.path().join("half-consumed");
    let total = (4 * PER_LITE).to_string();
    let half_total = (4 * half).to_string();
    let lines = std::thread::scope(|scope| {
        let consumer = scope.spawn(|| {
            let mark = mark.to_str().unwrap();
            run(
                &sdk,
                &home,
                &[
                    "survive",
                    &at,
                    TOPIC,
                    GROUP,
                    lites,
                    &total,
                    &half_total,
                    mark,
                ],
            )
        });
        wait_for(Duration::from_secs(90), || mark.exists().then_some(()))
            .expect("the consumer got the messages sent before the kill");
        c.restart_broker();
        let again = endpoint(&c.namesrv.addr, None);
        assert_eq!(again, at, "the broker came back on its ports");
        let rest = (PER_LITE - half).to_string();
        let sent = run(
            &sdk,
            &home,
            &["send", &at, TOPIC, lites, &rest, &half.to_string()],
        );
        assert_eq!(
            sent.iter().filter(|l| l.starts_with("SENT ")).count(),
            4 * (PER_LITE - half)
        );
        match consumer.join() {
            Ok(lines) => lines,
            Err(e) => {
                let log = c.broker.stderr();
                let tail: Vec<&str> = log.lines().rev().take(80).collect();
                eprintln!("the broker's log, last lines first:\n{}", tail.join("\n"));
                let sdk_log = home.join("logs/rocketmq/rocketmq-client.log");
                let sdk = std::fs::read_to_string(&sdk_log).unwrap_or_default();
                let tail: Vec<&str> = sdk.lines().rev().take(60).collect();
                eprintln!("the SDK's log, last lines first:\n{}", tail.join("\n"));
                std::panic::resume_unwind(e)
            }
        }
    });
    for lite in lites.split(',') {
        let got: Vec<String> = received(&lines, lite).into_iter().map(|g| g.0).collect();
        let mut first: Vec<String> = Vec::new();
        for b in got {
            if !first.contains(&b) {
                first.push(b);
            }
        }
        assert_eq!(first, bodies(lite), "{lite} whole and in order: {lines:?}");
    }
}

/// The Python SDK's `LiteSimpleConsumer` (which receives from one queue of the route, the
/// first readable one, so from one core of the two) gets the subscribed lite topics of both
/// cores, each in order and whole; a message it leaves unacked comes back, attempt 2, once
/// its invisible time passes; an unsubscribed lite topic waits for the consumer that
/// subscribes it later.
#[test]
fn the_python_lite_simple_consumer_receives_subscribed_lite_topics_of_every_core_in_order() {
    let Some(sdk) = python() else {
        return;
    };
    let (c, home) = lite_cluster();
    let at = endpoint(&c.namesrv.addr, None);
    let lites = "note-1,note-2,note-3,note-4,note-5";
    let sent = run(
        &sdk,
        &home,
        &["send", &at, TOPIC, lites, &PER_LITE.to_string()],
    );
    assert_eq!(
        sent.iter().filter(|l| l.starts_with("SENT ")).count(),
        5 * PER_LITE,
        "{sent:?}"
    );
    let subscribed = ["note-1", "note-2", "note-3", "note-4"];
    let total = (subscribed.len() * PER_LITE).to_string();
    let lines = run(
        &sdk,
        &home,
        &[
            "receive",
            &at,
            TOPIC,
            GROUP,
            &subscribed.join(","),
            &total,
            "note-2#1",
        ],
    );
    for lite in subscribed {
        assert_first_deliveries_in_order(&lines, lite, Some("note-2#1"));
    }
    assert!(
        received(&lines, "note-5").is_empty(),
        "note-5 was not subscribed: {lines:?}"
    );
    let lines = run(
        &sdk,
        &home,
        &[
            "receive",
            &at,
            TOPIC,
            GROUP,
            "note-5",
            &PER_LITE.to_string(),
        ],
    );
    let got: Vec<String> = received(&lines, "note-5")
        .into_iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(got, bodies("note-5"), "{lines:?}");
}
