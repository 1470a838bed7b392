//! Lite Topics (RocketMQ 5.5) through RocketMQ 5's gRPC SDK for Java 5.2.0
//! (`tests/rocketmq-v52`, `corvus.v52.Lite`, as RocketMQ's own examples use them: a
//! producer's `setLiteTopic`, a `LitePushConsumer` bound to the parent that subscribes lite
//! topics one by one) on a two-core broker, so that lite topics live on both cores
//! (ARCHITECTURE.md, "Lite Topics"): each subscribed lite topic is consumed whole and in
//! order, a failed message comes back before the ones after it, a lite topic nobody
//! subscribed keeps its messages for the consumer that subscribes it later, and a kill -9
//! between the sends and the consumption loses no acknowledged message.
//!
//! `.ci/run` builds the Java program (`mvn` there, which writes `cp.txt`); without it the
//! tests say so and skip, and fail where `CORVUS_REQUIRE_JAVA` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration::{
    java_program_or_skip, mqadmin_json, remoting_call, run_client_program,
    update_topic_with_attributes, wait_for, wait_for_route, Cluster,
};
use remoting::codes::request;
use remoting::RemotingCommand;

const TOPIC: &str = "V5LiteParent";
const GROUP: &str = "V5LiteGroup";
const PER_LITE: usize = 5;

fn java() -> Option<String> {
    java_program_or_skip("tests/rocketmq-v52", Some("corvus/v52/Lite.class"))
}

/// Runs `corvus.v52.Lite` with `args` to its end (bounded); it must end with `OK`.
fn run(cp: &str, home: &Path, args: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(cp)
        .arg("corvus.v52.Lite")
        .args(args);
    let (status, lines) = run_client_program(args[0], &mut cmd, Duration::from_secs(180));
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

#[test]
fn the_java_sdk_consumes_subscribed_lite_topics_in_order_and_later_subscribers_get_theirs() {
    let Some(cp) = java() else {
        return;
    };
    let (c, home) = lite_cluster();
    let at = endpoint(&c.namesrv.addr, None);
    let lites = "chat-a,chat-b,chat-c";
    let sent = run(
        &cp,
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
        &cp,
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
    assert_in_order(&lines, "chat-b", Some("chat-b#0"));
    assert!(
        received(&lines, "chat-c").is_empty(),
        "chat-c was not subscribed: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "SUBSCRIBED chat-b"),
        "unsubscribeLite leaves chat-b: {lines:?}"
    );
    // chat-c kept its messages for the consumer that subscribes it.
    let lines = run(
        &cp,
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
fn a_kill_9_between_send_and_consume_loses_no_acknowledged_lite_message() {
    let Some(cp) = java() else {
        return;
    };
    let (mut c, home) = lite_cluster();
    let ns = c.namesrv.addr.clone();
    let before = endpoint(&ns, None);
    let lites = "task-1,task-2,task-3,task-4";
    let sent = run(
        &cp,
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
        &cp,
        &home,
        &["consume", &after, TOPIC, GROUP, lites, &total],
    );
    for lite in lites.split(',') {
        assert_in_order(&lines, lite, None);
    }
}
