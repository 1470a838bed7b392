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
//! (NOTIFY_CONSUMER_IDS_CHANGED); when a member of two leaves, the other takes its queues over
//! within seconds, and while the two shared them no message reached both; orderly members
//! too, whose queue locks the leaver gives back, or which is killed.
//!
//! More of the 4.9.8 API: async (SendCallback), oneway and MessageQueueSelector sends, an
//! orderly push consumer (LOCK_BATCH_MQ) that gets each key's messages once and in order, a
//! BROADCASTING group whose two members each get every message, a consumer that always fails
//! (max reconsume times 1) whose messages end in `%DLQ%<group>`, a DefaultLitePullConsumer,
//! and a group's committed offsets across a broker restart; delayed and retried messages
//! carry RocketMQ's properties. The Roundtrip, LitePull, Trace and AutoCreate programs also
//! run on the 5.x client (`tests/rocketmq-java5`, rocketmq-client 5.3.1, still remoting).
//!
//! Apache RocketMQ's own admin tool (rocketmq-tools 4.9.8's mqadmin, `tests/rocketmq-tools`)
//! lists the cluster, creates a topic, and shows topic status, consumer progress, consumer
//! and producer connections, a consumer's own running info (asked of the client through the
//! broker), messages by key and by the offset message id the Java producer got (and hands
//! that message to the consumer's listener through the broker), broker status
//! and config, and resets a group's offsets, while a Java application runs against it.
//!
//! `.ci/run` builds the Java programs (`mvn compile` there, which writes `cp.txt`); without a
//! JVM and the build the test says so and fails when `CORVUS_REQUIRE_JAVA` is set, as CI
//! sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use client::Admin;
use integration::{
    create_topic, hops_and_stored, run_client_program, stored_offsets, wait_for, workspace_root,
    Cluster, JavaProgram,
};

/// The classpath of the programs built against the 5.x client (see
/// [`integration::java_program_or_skip`]).
fn java5_or_skip() -> Option<String> {
    let cp = integration::java_program_or_skip("tests/rocketmq-java5", Some(ROUNDTRIP_CLASS))?;
    assert!(
        cp.contains("rocketmq-client-5."),
        "built against the 5.x client: {cp}"
    );
    Some(cp)
}

/// RocketMQ 5.3.2's recall through the 5.3.3 remoting client (`tests/rocketmq-java533`): a
/// send of a scheduled message answers a recall handle naming the core (as a broker of the
/// route) that holds it; `DefaultMQProducer.recallMessage` (RECALL_MESSAGE) with it answers
/// the message id, and the message is not delivered while the one sent beside it is; a
/// recall of the delivered one and one of a message never sent are refused with
/// ILLEGAL_OPERATION (604).
#[test]
fn the_java_client_5_3_3_recalls_a_scheduled_message() {
    let Some(cp) =
        integration::java_program_or_skip("tests/rocketmq-java533", Some("corvus/Recall.class"))
    else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "RecallTopic", 4);
    let lines = run_java(&cp, "corvus.Recall", &[&ns, "RecallTopic", "RecallGroup"]);
    let sent = lines
        .iter()
        .find(|l| l.starts_with("SENT 2 to "))
        .expect("sent");
    assert!(
        sent.contains("-c"),
        "the handle's broker is a core's: {sent}"
    );
    for line in ["RECALLED recall-1", "DELIVERED recall-2 only", "RECALL OK"] {
        assert!(lines.iter().any(|l| l == line), "{line}: {lines:?}");
    }
    for refused in ["DELIVERED REFUSED 604", "UNKNOWN REFUSED 604"] {
        assert!(
            lines.iter().any(|l| l.starts_with(refused)),
            "{refused}: {lines:?}"
        );
    }
}

/// RocketMQ 5's server-side rebalance through the 5.3.3 remoting client
/// (`tests/rocketmq-java533`): RocketMQ 5.3.3's own mqadmin sets the group's mode for the
/// topic to POP (`setConsumeMode`, SET_MESSAGE_REQUEST_MODE to every core of the cluster);
/// two push consumers with `setClientRebalance(false)` then get from the broker
/// (QUERY_ASSIGNMENT) queue -1 of each core of the route, pop and ack every message once
/// between them, and a message answered RECONSUME_LATER comes back once with reconsume times
/// 1 (CHANGE_MESSAGE_INVISIBLETIME). The mode is kept across a broker restart. Before the
/// mode is set, the broker assigns the group's queues for pulling (RocketMQ's default).
#[test]
fn the_java_client_5_3_3_pops_the_queues_the_broker_assigns_once_mqadmin_sets_pop() {
    let Some(cp) =
        integration::java_program_or_skip("tests/rocketmq-java533", Some("corvus/PopMode.class"))
    else {
        return;
    };
    let Some(tools) = integration::java_program_or_skip("tests/rocketmq-tools5", None) else {
        return;
    };
    let mut c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "PopModeTopic", 8);

    // Without a mode: PULL, the queues of both cores shared by the strategy.
    let assigned = query_assignment(&ns, "PopModeTopic", "PopModeGroup");
    assert!(
        assigned
            .iter()
            .all(|(_, q, mode)| *q >= 0 && mode == "PULL"),
        "{assigned:?}"
    );

    let (ok, out) = integration::rocketmq_mqadmin(
        &tools,
        &ns,
        &[
            "setConsumeMode",
            "-c",
            "DefaultCluster",
            "-t",
            "PopModeTopic",
            "-g",
            "PopModeGroup",
            "-m",
            "POP",
            "-q",
            "0",
        ],
    );
    assert!(ok && out.contains("success"), "{out}");
    // A retry topic's mode cannot be set (RocketMQ's answer).
    let (_, out) = integration::rocketmq_mqadmin(
        &tools,
        &ns,
        &[
            "setConsumeMode",
            "-c",
            "DefaultCluster",
            "-t",
            "%RETRY%PopModeGroup",
            "-g",
            "PopModeGroup",
            "-m",
            "POP",
        ],
    );
    assert!(out.contains("retry topic is not allowed"), "{out}");

    c.restart_broker();
    let lines = run_java(
        &cp,
        "corvus.PopMode",
        &[&ns, "PopModeTopic", "PopModeGroup", "40"],
    );
    for name in ["pop-a", "pop-b"] {
        let popping = lines
            .iter()
            .find(|l| l.starts_with(&format!("POPPING {name} ")))
            .expect("popping");
        // Queue -1 of each core: `broker-c0:-1 broker-c1:-1`.
        let queues: Vec<&str> = popping.split(' ').skip(2).collect();
        assert_eq!(queues.len(), 2, "{popping}");
        assert!(
            queues
                .iter()
                .all(|q| q.ends_with("-c0:-1") || q.ends_with("-c1:-1")),
            "{popping}"
        );
    }
    for line in [
        "RECEIVED 40 once each: true",
        "M-0 DELIVERIES [0, 1]",
        "POP MODE OK",
    ] {
        assert!(lines.iter().any(|l| l == line), "{line}: {lines:?}");
    }
}

/// QUERY_ASSIGNMENT of `topic` for a member of `group` that has just heartbeaten, asked of
/// the first core: (broker name, queue id, mode) of each assigned queue.
fn query_assignment(ns: &str, topic: &str, group: &str) -> Vec<(String, i64, String)> {
    use remoting::codes::request;
    use remoting::RemotingCommand;
    let addr = integration::core_addrs(ns)[0].clone();
    let client = "127.0.0.1@assign-probe";
    let heartbeat = serde_json::json!({
        "clientID": client,
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": false,
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "classFilterMode": false,
                "tagsSet": [], "codeSet": [], "subVersion": 0, "expressionType": "TAG"}]
        }],
        "producerDataSet": []
    });
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    let mut ask = |code: i32, body: serde_json::Value, id: i32| {
        let cmd = RemotingCommand::request(code, id);
        integration::remoting_exchange(&mut conn, &cmd, body.to_string().as_bytes())
    };
    let hb = ask(request::HEART_BEAT, heartbeat, 1);
    assert_eq!(hb.command.code, 0, "{:?}", hb.command.remark);
    let f = ask(
        request::QUERY_ASSIGNMENT,
        serde_json::json!({"topic": topic, "consumerGroup": group, "clientId": client,
            "strategyName": "AVG", "messageModel": "CLUSTERING"}),
        2,
    );
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    let v: serde_json::Value = remoting::body::from_json(&f.body).unwrap();
    v["messageQueueAssignments"]
        .as_array()
        .expect("assignments")
        .iter()
        .map(|a| {
            (
                a["messageQueue"]["brokerName"].as_str().unwrap().to_owned(),
                a["messageQueue"]["queueId"].as_i64().unwrap(),
                a["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The class every build of the Java programs has.
const ROUNDTRIP_CLASS: &str = "corvus/Roundtrip.class";

/// Runs one of the Java programs to its end (bounded) and returns its output lines; it must
/// exit 0.
fn run_java(cp: &str, class: &str, args: &[&str]) -> Vec<String> {
    run_java_with(cp, &[], class, args)
}

/// [`run_java`] with JVM options (`-Dname=value`) before the class.
fn run_java_with(cp: &str, jvm: &[&str], class: &str, args: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(cp)
        .args(jvm)
        .arg(class)
        .args(args)
        .env("ROCKETMQ_HOME", std::env::temp_dir());
    let (status, lines) = run_client_program(class, &mut cmd, Duration::from_secs(120));
    assert!(status.success(), "{class} failed ({status}): {lines:?}");
    lines
}

/// A broker of two cores with its NameServer and `topic` (8 queues), and the Java program's
/// classpath; `None` when the program is not built (see [`java_or_skip`]).
fn java_cluster(topic: &str) -> Option<(String, Cluster)> {
    let cp = java_or_skip()?;
    let c = Cluster::start(2, "small");
    create_topic(&c.namesrv.addr, topic, 8);
    Some((cp, c))
}

/// Asserts that the program printed a line starting with each of `prefixes`.
fn assert_printed(lines: &[String], prefixes: &[&str]) {
    for want in prefixes {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "no line starting with {want:?} in {lines:?}"
        );
    }
}

/// The classpath of the programs built against the 4.x client.
fn java_or_skip() -> Option<String> {
    integration::java_program_or_skip("tests/rocketmq-java", Some(ROUNDTRIP_CLASS))
}

/// rocketmq-tools' classpath, when `.ci/run` (or a developer) fetched it.
fn tools_classpath() -> Option<String> {
    let deps =
        std::fs::read_to_string(workspace_root().join("tests/rocketmq-tools/cp.txt")).ok()?;
    Some(deps.trim().to_owned())
}

/// Runs RocketMQ's mqadmin with `args` against the NameServer `ns`: its output, once it
/// exited 0 (bounded: the tool gives up on a broker after its own timeouts).
fn rocketmq_mqadmin(cp: &str, ns: &str, args: &[&str]) -> String {
    let (ok, text) = integration::rocketmq_mqadmin(cp, ns, args);
    assert!(ok, "mqadmin {args:?} failed or reported an error: {text}");
    text
}

/// RocketMQ ACL 1.0 from the real Java client: a producer and a push consumer with an
/// `AclClientRPCHook` send and receive on the topic their account may use, a send to a topic
/// it may only read is refused NO_PERMISSION, and a producer with the wrong secret is refused.
#[test]
fn java_clients_with_acl_client_rpc_hook_produce_and_consume() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let rules = integration::AclRules::write("accounts:\n  - accessKey: admin0001\n    secretKey: admin-secret-1\n    admin: true\n  - accessKey: java-app\n    secretKey: java-secret-1\n    defaultTopicPerm: DENY\n    defaultGroupPerm: DENY\n    topicPerms:\n      - JavaAcl=PUB|SUB\n      - JavaAclReadOnly=SUB\n    groupPerms:\n      - JavaAclGroup=SUB\n");
    let c = Cluster::start_with(2, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let ns = c.namesrv.addr.clone();
    for t in ["JavaAcl", "JavaAclReadOnly"] {
        integration::create_topic_as(&ns, ("admin0001", "admin-secret-1"), t, 4);
    }
    let lines = run_java(
        &cp,
        "corvus.Acl",
        &[
            &ns,
            "JavaAcl",
            "JavaAclReadOnly",
            "20",
            "JavaAclGroup",
            "java-app",
            "java-secret-1",
        ],
    );
    assert_printed(
        &lines,
        &[
            "SENT 20",
            "DENIED TOPIC REFUSED 16",
            "WRONG SECRET REFUSED 16",
            "RECEIVED 20",
        ],
    );
}

/// Request-reply with RocketMQ's API (`producer.request`, `MessageUtil.createReplyMessage`):
/// every request gets its reply, pushed over the requester's connection by whichever core
/// serves it, and one nobody answers times out. The requester and the responding consumer
/// trace (`new DefaultMQProducer(group, true)`, `new DefaultMQPushConsumer(group, true)`):
/// their records land in `RMQ_SYS_TRACE_TOPIC`, and corvus's `mqadmin queryMsgTraceById`
/// (and RocketMQ's) shows a request's send and consume.
#[test]
fn a_java_request_gets_its_reply_and_a_traced_java_send_is_found_by_id() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    // No auto-creation: the reply topic comes with the first request, the trace topic with
    // trace_topic_enable.
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("auto_create_topic_enable = false\ntrace_topic_enable = true\n".into())
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "JavaRequests", 8);
    create_topic(&ns, "JavaUnanswered", 2);
    let lines = run_java(
        &cp,
        "corvus.RequestReply",
        &[&ns, "JavaRequests", "5", "JavaUnanswered"],
    );
    assert_printed(&lines, &["REPLIED 5", "TIMED OUT"]);
    let traced = lines
        .iter()
        .find_map(|l| l.strip_prefix("TRACED "))
        .expect("the program prints the traced msg id")
        .to_owned();
    let shown = wait_for(Duration::from_secs(20), || {
        let out = integration::mqadmin(&ns, &["--json", "queryMsgTraceById", "-i", &traced]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let views = v["views"].as_array()?.clone();
        views
            .iter()
            .any(|v| v["type"] == "Pub" && v["group"] == "JavaRequester")
            .then_some(views)
    });
    assert!(
        shown.is_some(),
        "the Java producer's trace of {traced} is found"
    );
    // The traced Java consumer's records of a request it answered: its send and its consume.
    let answered = lines
        .iter()
        .find_map(|l| l.strip_prefix("ANSWERED "))
        .expect("the program prints an answered request's msg id")
        .to_owned();
    let both = wait_for(Duration::from_secs(20), || {
        let out = integration::mqadmin(&ns, &["--json", "queryMsgTraceById", "-i", &answered]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let views = v["views"].as_array()?.clone();
        let has = |kind: &str, group: &str| {
            views
                .iter()
                .any(|v| v["type"] == kind && v["group"] == group && v["status"] == "success")
        };
        (has("Pub", "JavaRequester") && has("Sub", "JavaResponders")).then_some(())
    });
    assert!(
        both.is_some(),
        "the trace of request {answered} shows its send and its consume"
    );
    // RocketMQ's own mqadmin reads the same trace (when rocketmq-tools is fetched).
    if let Some(tools) = tools_classpath() {
        let text = rocketmq_mqadmin(&tools, &ns, &["queryMsgTraceById", "-i", &traced]);
        assert!(
            text.contains("#ProducerGroup") && text.contains("JavaRequester"),
            "{text}"
        );
    }
}

/// Message trace from both Java clients (`corvus.Trace`, built for 4.9.8 and 5.x): for each
/// message, corvus's `mqadmin queryMsgTraceById` shows the traced producer's send (Pub) and
/// the traced consumer's consume (Sub: its SubBefore and SubAfter). The 5.x client's trace
/// dispatcher drops a record that names no region, and a consumer's records take theirs
/// from the message's MSG_REGION property: the broker stamps it on what it stores, as
/// RocketMQ's broker does.
#[test]
fn java_clients_4_and_5_trace_their_sends_and_consumes() {
    let Some(cp4) = java_or_skip() else {
        return;
    };
    let Some(cp5) = java5_or_skip() else {
        return;
    };
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("trace_topic_enable = true\n".into())
    });
    let ns = c.namesrv.addr.clone();
    for (client, cp, topic, group) in [
        ("4.9.8", cp4, "Trace4Topic", "Trace4Group"),
        ("5.x", cp5, "Trace5Topic", "Trace5Group"),
    ] {
        create_topic(&ns, topic, 4);
        let lines = run_java(&cp, "corvus.Trace", &[&ns, topic, "3", group]);
        assert!(
            lines.iter().any(|l| l == "CONSUMED 3 of 3"),
            "{client}: {lines:?}"
        );
        let ids: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("TRACED "))
            .collect();
        assert_eq!(ids.len(), 3, "{client}: {lines:?}");
        for id in ids {
            let mut last = serde_json::Value::Null;
            let both = wait_for(Duration::from_secs(20), || {
                let out = integration::mqadmin(&ns, &["--json", "queryMsgTraceById", "-i", id]);
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                last = v.clone();
                let views = v["views"].as_array()?;
                let has = |kind: &str, who: &str| {
                    views
                        .iter()
                        .any(|v| v["type"] == kind && v["group"] == who && v["status"] == "success")
                };
                (has("Pub", "JavaTraceProducer") && has("Sub", group)).then_some(())
            });
            assert!(
                both.is_some(),
                "{client}: the trace of {id} shows its send and its consume: {last}"
            );
        }
    }
}

#[test]
fn a_java_producer_and_push_consumer_round_trip_every_message_without_hops() {
    let Some((cp, c)) = java_cluster("JavaTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();

    let mut java = Roundtrip::start(&cp, &ns, "JavaTopic", 200, "JavaRoundtripGroup");
    java.wait_for("STEADY DONE");
    let (data_hops, produced) = hops_and_stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    assert_eq!(
        data_hops, 0,
        "sends, pulls and offset commits of a RocketMQ client stay on the owning core"
    );
    java.go_on();
    let lines = java.finish();
    assert!(
        lines.iter().any(|l| l.starts_with("RECEIVED 210 of 210")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "VIEWED 5"), "{lines:?}");
}

#[test]
fn the_roundtrip_program_on_the_java_client_5_round_trips_every_message() {
    let Some(cp) = java5_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "Java5Topic", 8);

    let mut java = Roundtrip::start(&cp, &ns, "Java5Topic", 200, "Java5RoundtripGroup");
    java.wait_for("STEADY DONE");
    let (_, produced) = hops_and_stored(&ns, &broker);
    assert_eq!(produced, 210, "every message sent was stored once");
    java.go_on();
    let lines = java.finish();
    assert!(
        lines.iter().any(|l| l.starts_with("RECEIVED 210 of 210")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "VIEWED 5"), "{lines:?}");
}

/// The retried copy carries what RocketMQ's broker gives a retry (`corvus.Retry` checks):
/// `RETRY_TOPIC`, `ORIGIN_MESSAGE_ID` (the first delivery's offset message id), its delay
/// level and `REAL_TOPIC`/`REAL_QID`.
#[test]
fn a_message_the_java_consumer_fails_comes_back_from_the_retry_topic() {
    let Some((cp, c)) = java_cluster("RetryTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
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
fn a_java_consumer_with_a_sql92_selector_gets_exactly_the_matching_messages() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("enable_property_filter = true\n".into())
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "SqlTopic", 8);
    // Message i has a = i and b = x, y, z by i mod 3 (see Sql92.java).
    let want: Vec<String> = (0..40)
        .filter(|i| (i % 3 == 1 && *i >= 10) || *i < 2)
        .map(|i| i.to_string())
        .collect();
    let lines = run_java(
        &cp,
        "corvus.Sql92",
        &[
            &ns,
            "SqlTopic",
            "40",
            "SqlGroup",
            "(b = 'y' AND a BETWEEN 10 AND 100) OR a < 2",
            &want.join(","),
        ],
    );
    assert!(lines.iter().any(|l| l == "ALL MATCHED"), "{lines:?}");
    // The bad expression was refused by the broker at the consumer's start, with the reason.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("REFUSED") && l.contains("invalid SQL92 filter expression")),
        "{lines:?}"
    );
}

/// Delay levels and a delivery time from the 4.9.8 client: each message comes once, not
/// before its time, and carries what RocketMQ's delivered copy does: its level
/// (`getDelayTimeLevel()`), `REAL_TOPIC`, `REAL_QID` and `CLUSTER` (`corvus.Delayed` checks
/// each).
#[test]
fn java_delayed_messages_come_once_and_not_before_their_time() {
    let Some((cp, c)) = java_cluster("DelayedTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.Delayed",
        &[&ns, "DelayedTopic", "DelayedGroup"],
    );
    assert!(lines.iter().any(|l| l == "ALL ON TIME"), "{lines:?}");
}

#[test]
fn a_java_member_joining_a_group_shares_the_queues_at_once() {
    let Some((cp, c)) = java_cluster("RebTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(&cp, "corvus.Rebalance", &[&ns, "RebTopic", "RebGroup"]);
    assert!(
        lines.iter().any(|l| l == "SHARED WITHOUT DUPLICATES"),
        "{lines:?}"
    );
}

#[test]
fn a_java_producer_sends_async_oneway_and_by_key_and_an_orderly_consumer_keeps_each_key_in_order() {
    let Some((cp, c)) = java_cluster("SendsTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.Sends",
        &[&ns, "SendsTopic", "50", "SendsGroup"],
    );
    assert_printed(
        &lines,
        &["ASYNC OK 50 of 50", "ONEWAY SENT 50", "ORDERED SENT 200"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("RECEIVED 300 of 300")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "KEYS IN ORDER"), "{lines:?}");
    assert!(lines.iter().any(|l| l == "ALL RECEIVED"), "{lines:?}");
}

/// A Java client on the VIP channel (the default of clients before 4.5.1, here turned on
/// with the client's own system property) sends to each broker address's port - 2: each
/// core accepts there too, so its sends land on the core that owns their queue.
#[test]
fn a_java_producer_on_the_vip_channel_sends_to_port_minus_two_without_hops() {
    let Some((cp, c)) = java_cluster("VipTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java_with(
        &cp,
        &["-Dcom.rocketmq.sendMessageWithVIPChannel=true"],
        "corvus.Sends",
        &[&ns, "VipTopic", "20", "VipGroup"],
    );
    assert_printed(
        &lines,
        &["ASYNC OK 20 of 20", "ONEWAY SENT 20", "ORDERED SENT 200"],
    );
    assert!(lines.iter().any(|l| l == "ALL RECEIVED"), "{lines:?}");
    let (data_hops, produced) = hops_and_stored(&ns, &c.broker.addr);
    assert_eq!(produced, 240, "every message sent was stored once");
    assert_eq!(data_hops, 0, "VIP sends reach the owning core");
}

#[test]
fn two_java_consumers_of_a_broadcasting_group_each_get_every_message() {
    let Some((cp, c)) = java_cluster("BroadcastTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.Broadcast",
        &[&ns, "BroadcastTopic", "100", "BroadcastGroup"],
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "EACH GOT first 100, second 100 of 100"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "BOTH GOT ALL"), "{lines:?}");
}

#[test]
fn a_message_the_java_consumer_always_fails_ends_in_the_dead_letter_topic() {
    let Some((cp, c)) = java_cluster("DlqTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(&cp, "corvus.Dlq", &[&ns, "DlqTopic", "3", "DlqGroup", "1"]);
    // Delivered once, then once again from the retry topic (max reconsume times 1), then dead.
    assert!(
        lines
            .iter()
            .any(|l| l == "DELIVERIES {dlq-key-0=2, dlq-key-1=2, dlq-key-2=2}"),
        "{lines:?}"
    );
    let dead: Vec<&String> = lines.iter().filter(|l| l.starts_with("DEAD ")).collect();
    assert_eq!(dead.len(), 3, "{lines:?}");
    for l in dead {
        assert!(l.contains("topic %DLQ%DlqGroup"), "{l}");
        // As RocketMQ's dead letters: DELAY=0, the retry's level cleared.
        assert!(l.ends_with(" DELAY=0"), "{l}");
    }
    // The dead letter topic is readable, as RocketMQ creates it: another group reprocesses it.
    assert!(lines.iter().any(|l| l == "REPROCESSED 3 of 3"), "{lines:?}");
    assert!(lines.iter().any(|l| l == "ALL DEAD"), "{lines:?}");
}

/// `slave_read_enable`: the route lists the slave beside the master, and a Java consumer far
/// behind follows the broker's suggestWhichBrokerId to it; it still gets every message.
#[test]
fn a_java_consumer_far_behind_reads_from_the_slave() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let pair = integration::MasterSlave::start("slave_read_enable = true\nhot_bytes_max = 65536\n");
    let ns = pair.ns.addr.clone();
    create_topic(&ns, "SlaveReadTopic", 2);
    pair.wait_in_sync(Duration::from_secs(30));
    let before = pair.consumed(&pair.slave);
    let lines = run_java(
        &cp,
        "corvus.LitePull",
        &[&ns, "SlaveReadTopic", "3000", "SlaveReadGroup"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("POLLED 3000 of 3000")),
        "{lines:?}"
    );
    let on_slave = pair.consumed(&pair.slave) - before;
    assert!(
        on_slave > 0,
        "the Java consumer never read from the slave (master served {})",
        pair.consumed(&pair.master)
    );
}

#[test]
fn a_java_lite_pull_consumer_polls_every_message() {
    let Some((cp, c)) = java_cluster("LiteTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.LitePull",
        &[&ns, "LiteTopic", "200", "LiteGroup"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("POLLED 200 of 200")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "ALL POLLED"), "{lines:?}");
}

/// The 5.x client's DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE (361), which
/// RocketMQ serves as it serves PULL_MESSAGE: subscribed and assigned (seekToBegin), it
/// polls every message.
#[test]
fn the_java_client_5_lite_pull_consumer_polls_every_message_subscribed_and_assigned() {
    let Some(cp) = java5_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Lite5Topic", 4);
    for (mode, group) in [("subscribe", "Lite5Group"), ("assign", "Lite5AssignGroup")] {
        let lines = run_java(
            &cp,
            "corvus.LitePull",
            &[&ns, "Lite5Topic", "12", group, mode],
        );
        // Both runs send the same 12 bodies; assigned from the beginning, the second run
        // also polls the first run's copies, which its set of bodies counts once.
        assert!(
            lines.iter().any(|l| l.starts_with("POLLED 12 of 12")),
            "{mode}: {lines:?}"
        );
        assert!(lines.iter().any(|l| l == "ALL POLLED"), "{mode}: {lines:?}");
    }
}

#[test]
fn a_java_member_leaving_a_group_leaves_its_queues_to_the_other_within_seconds() {
    let Some((cp, c)) = java_cluster("LeaveTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(&cp, "corvus.Leave", &[&ns, "LeaveTopic", "LeaveGroup"]);
    let stable = lines
        .iter()
        .find(|l| l.starts_with("STABLE "))
        .expect("the stable window counted");
    assert!(stable.ends_with(", both 0, neither 0"), "{stable}");
    assert!(
        lines.iter().any(|l| l == "SHARED THEN TAKEN OVER"),
        "{lines:?}"
    );
}

/// Orderly members (MessageListenerOrderly) consume a queue only under its lock. The one
/// that leaves gives its locks back (UNLOCK_BATCH_MQ) before its shutdown commits its last
/// offsets, and leaves (UNREGISTER_CLIENT): the broker frees its locks at once, committed
/// offset or not, so the other locks the queues at the rebalance the leave prompts and gets
/// every later message within the program's bound of seconds (not after the leaver's
/// locks run out, a minute later).
#[test]
fn an_orderly_java_member_leaving_a_group_unlocks_its_queues_for_the_other_at_once() {
    let Some((cp, c)) = java_cluster("LeaveOrderlyTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.Leave",
        &[&ns, "LeaveOrderlyTopic", "LeaveOrderlyGroup", "orderly"],
    );
    let stable = lines
        .iter()
        .find(|l| l.starts_with("STABLE "))
        .expect("the stable window counted");
    assert!(stable.ends_with(", both 0, neither 0"), "{stable}");
    assert!(
        lines.iter().any(|l| l == "SHARED THEN TAKEN OVER"),
        "{lines:?}"
    );
}

/// An orderly member in a process of its own is killed (SIGKILL): it gives no lock back and
/// does not unregister, its connections just close. The broker takes that as its leave at
/// once: the other member is told, locks its queues (their locks end with the connection;
/// RocketMQ's broker would keep them until they run out, a minute) and gets every later
/// message within the program's bound of seconds.
#[test]
fn a_killed_orderly_java_member_s_queues_go_to_the_other_at_once() {
    let Some((cp, c)) = java_cluster("KilledOrderlyTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.Leave",
        &[
            &ns,
            "KilledOrderlyTopic",
            "KilledOrderlyGroup",
            "orderly",
            "killed",
        ],
    );
    let stable = lines
        .iter()
        .find(|l| l.starts_with("STABLE "))
        .expect("the stable window counted");
    assert!(stable.ends_with(", both 0, neither 0"), "{stable}");
    assert!(
        lines.iter().any(|l| l == "SHARED THEN TAKEN OVER"),
        "{lines:?}"
    );
}

/// A 5.x consumer subscribed to a topic that does not exist yet, sharing its client instance
/// with the producer whose first send creates the topic (auto-creation): the producer's route
/// lookup gives the consumer the topic's queues, and it consumes within a second or so, as
/// against RocketMQ's broker (0.7 s measured with both), not at its next route poll (30 s).
#[test]
fn a_java_5_consumer_subscribed_before_its_topic_is_auto_created_starts_at_once() {
    let Some(cp) = java5_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let lines = run_java(
        &cp,
        "corvus.AutoCreate",
        &[
            &ns,
            "AutoCreatedTopic",
            "AutoCreatedGroup",
            "10000",
            "shared",
        ],
    );
    assert!(lines.iter().any(|l| l == "STARTED IN TIME"), "{lines:?}");
}

/// `Resume ... committed`: the group's committed offset of each queue, as the broker says.
fn committed(cp: &str, ns: &str) -> std::collections::BTreeMap<String, i64> {
    run_java(
        cp,
        "corvus.Resume",
        &[ns, "ResumeTopic", "ResumeGroup", "committed"],
    )
    .iter()
    .filter_map(|l| {
        let mut w = l.strip_prefix("COMMITTED ")?.split(' ');
        Some((w.next()?.to_owned(), w.next()?.parse().ok()?))
    })
    .collect()
}

/// What the test asserts of a group's offsets across a broker restart (kill -9 once the
/// broker's offsets files hold the commits, then the same data directory): the first
/// consumer committed part of the topic, and only offsets it consumed; the committed offsets
/// the broker reports after the restart are the ones it reported before it, for every queue;
/// and a new consumer of the group then receives
/// every message at or past its queue's committed offset and none before it. (Messages past
/// the committed offset that the first consumer had already consumed come again: RocketMQ's
/// at-least-once.)
#[test]
fn a_java_group_s_committed_offsets_survive_a_broker_restart() {
    let Some((cp, mut c)) = java_cluster("ResumeTopic") else {
        return;
    };
    let ns = c.namesrv.addr.clone();
    let step = |args: &[&str]| {
        let mut all = vec![ns.as_str(), "ResumeTopic", "ResumeGroup"];
        all.extend_from_slice(args);
        run_java(&cp, "corvus.Resume", &all)
    };
    step(&["produce", "400"]);
    let consumed: std::collections::BTreeSet<String> = step(&["consume", "100"])
        .iter()
        .filter_map(|l| Some(l.strip_prefix("GOT ")?.to_owned()))
        .collect();
    assert!(consumed.len() >= 100, "{consumed:?}");

    let before = committed(&cp, &ns);
    assert_eq!(before.len(), 8, "the topic's 8 queues: {before:?}");
    let total: i64 = before.values().map(|o| (*o).max(0)).sum();
    assert!(
        (1..400).contains(&total),
        "part consumed and committed: {before:?}"
    );
    // Only what the first consumer consumed is committed: every offset below a queue's
    // committed offset is one it got.
    for (q, to) in &before {
        for off in 0..*to {
            assert!(
                consumed.contains(&format!("{q} {off}")),
                "{q} {off} committed but not consumed"
            );
        }
    }

    // The broker writes its offsets every `offset_flush_interval_ms` (1 s; a kill -9 loses the
    // commits of the last interval): once its offsets files hold all of these, it is killed.
    let on_disk = wait_for(Duration::from_secs(10), || {
        let stored = stored_offsets(&c.opts.data_dir, "ResumeGroup", "ResumeTopic");
        (stored == total as u64).then_some(stored)
    });
    assert!(on_disk.is_some(), "the commits reach the offsets files");
    c.restart_broker();
    let after = committed(&cp, &ns);
    assert_eq!(after, before, "the committed offsets survive the restart");

    let rest = step(&["rest", &(400 - total).to_string()]);
    let mut got: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    for l in &rest {
        if let Some(m) = l.strip_prefix("GOT ") {
            let (q, off) = m.split_once(' ').expect("queue and offset");
            got.entry(q.to_owned())
                .or_default()
                .push(off.parse().expect("an offset"));
        }
    }
    let mut received = 0;
    for (q, from) in &after {
        let offs = got.remove(q).unwrap_or_default();
        assert!(
            offs.iter().all(|o| o >= from),
            "{q}: nothing before the committed offset {from} again: {offs:?}"
        );
        let want: Vec<i64> = ((*from).max(0)..(*from).max(0) + offs.len() as i64).collect();
        let mut sorted = offs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, want, "{q}: every message from {from} on, once");
        received += offs.len() as i64;
    }
    assert!(got.is_empty(), "only the topic's queues: {got:?}");
    assert_eq!(
        received,
        400 - total,
        "every message past the committed offsets"
    );
}

#[test]
fn rocketmq_s_own_mqadmin_manages_the_cluster() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let Some(tools) = tools_classpath() else {
        let msg = "rocketmq-tools is not fetched (cd tests/rocketmq-tools && mvn -q -B dependency:build-classpath -Dmdep.outputFile=cp.txt)";
        assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    let t = |args: &[&str]| rocketmq_mqadmin(&tools, &ns, args);

    let created = t(&[
        "updateTopic",
        "-c",
        "DefaultCluster",
        "-t",
        "ToolsTopic",
        "-r",
        "8",
        "-w",
        "8",
    ]);
    assert_eq!(
        created.matches("success").count(),
        2,
        "one per core: {created}"
    );
    let clusters = t(&["clusterList"]);
    for core in ["broker-a-c0", "broker-a-c1"] {
        assert!(
            clusters.contains(core) && clusters.contains("V5_5_0"),
            "{clusters}"
        );
    }
    assert!(t(&["topicList"]).lines().any(|l| l.trim() == "ToolsTopic"));

    // A Java application produces and consumes; the tools look at it while it runs.
    let mut java = Roundtrip::start(&cp, &ns, "ToolsTopic", 50, "ToolsGroup");
    java.wait_for("STEADY DONE");

    let status = t(&["topicStatus", "-t", "ToolsTopic"]);
    let max_total: u64 = status
        .lines()
        .filter(|l| l.starts_with("broker-a-c"))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .sum();
    assert_eq!(max_total, 60, "every message counted once: {status}");
    // The consumer persists its offsets every 5 s: the progress catches up by then.
    let mut progress = String::new();
    for _ in 0..20 {
        progress = t(&["consumerProgress", "-g", "ToolsGroup"]);
        if progress.contains("Diff Total: 0") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(progress.contains("Diff Total: 0"), "{progress}");
    assert!(
        progress.contains("broker-a-c0") && progress.contains("broker-a-c1"),
        "{progress}"
    );
    let consumers = t(&["consumerConnection", "-g", "ToolsGroup"]);
    assert!(
        consumers.contains("roundtrip-consumer") && consumers.contains("ToolsTopic"),
        "{consumers}"
    );
    // Asked of the consumer itself over its connection, through the broker.
    let running = t(&["consumerStatus", "-g", "ToolsGroup"]);
    assert!(
        running.contains("roundtrip-consumer") && running.contains("Rebalance OK"),
        "{running}"
    );
    let producers = t(&[
        "producerConnection",
        "-g",
        "JavaRoundtripProducer",
        "-t",
        "ToolsTopic",
    ]);
    assert!(producers.contains("roundtrip-producer"), "{producers}");
    // The offset message id the Java producer got for its first message (key-0).
    let offset_id = java
        .seen
        .iter()
        .find_map(|l| l.strip_prefix("OFFSET MSG ID ")?.strip_suffix(" key-0"))
        .expect("Roundtrip prints an offset message id")
        .to_owned();
    let by_id = t(&["queryMsgById", "-i", &offset_id]);
    let field = |name: &str| {
        by_id
            .lines()
            .find_map(|l| Some(l.strip_prefix(name)?.trim_start_matches([' ', ':']).trim()))
            .unwrap_or_else(|| panic!("no {name} in {by_id}"))
            .to_owned()
    };
    assert_eq!(field("OffsetID"), offset_id, "{by_id}");
    assert_eq!(field("Topic"), "ToolsTopic", "{by_id}");
    assert_eq!(field("Keys"), "[key-0]", "{by_id}");
    assert_eq!(field("Tags"), "[TagA]", "{by_id}");
    // The same message handed to the consumer's listener through the broker
    // (CONSUME_MESSAGE_DIRECTLY), which answers how it went.
    let client_id = consumers
        .split_whitespace()
        .find(|w| w.ends_with("@roundtrip-consumer"))
        .unwrap_or_else(|| panic!("the consumer's client id in {consumers}"));
    let direct = t(&[
        "queryMsgById",
        "-i",
        &offset_id,
        "-g",
        "ToolsGroup",
        "-d",
        client_id,
    ]);
    assert!(direct.contains("CR_SUCCESS"), "{direct}");
    let by_key = t(&["queryMsgByKey", "-t", "ToolsTopic", "-k", "key-7"]);
    assert_eq!(
        by_key
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count(),
        1,
        "the message with that key, once: {by_key}"
    );
    let runtime = t(&["brokerStatus", "-b", &broker]);
    assert!(runtime.contains("msgPutTotalTodayNow"), "{runtime}");
    let config = t(&["getBrokerConfig", "-b", &broker]);
    assert!(
        config
            .lines()
            .any(|l| l.replace(' ', "") == "brokerName=broker-a"),
        "{config}"
    );
    let reset = t(&[
        "resetOffsetByTime",
        "-g",
        "ToolsGroup",
        "-t",
        "ToolsTopic",
        "-s",
        "0",
    ]);
    assert_eq!(
        reset
            .lines()
            .filter(|l| l.starts_with("broker-a-c"))
            .count(),
        8,
        "every queue reset: {reset}"
    );

    java.go_on();
    java.finish();

    let route = t(&["topicRoute", "-t", "ToolsTopic"]);
    assert!(
        route.contains("broker-a-c0") && route.contains("broker-a-c1"),
        "{route}"
    );
    let sub = t(&[
        "updateSubGroup",
        "-c",
        "DefaultCluster",
        "-g",
        "ToolsSubGroup",
        "-r",
        "3",
    ]);
    assert_eq!(sub.matches("success").count(), 2, "one per core: {sub}");
    let gone = t(&[
        "deleteSubGroup",
        "-c",
        "DefaultCluster",
        "-g",
        "ToolsSubGroup",
    ]);
    assert!(gone.contains("success"), "{gone}");
    let updated = t(&[
        "updateBrokerConfig",
        "-b",
        &broker,
        "-k",
        "fileReservedTime",
        "-v",
        "24",
    ]);
    assert!(updated.contains("success"), "{updated}");
    t(&["updateTopic", "-c", "DefaultCluster", "-t", "ToolsGone"]);
    assert!(t(&["topicList"]).lines().any(|l| l.trim() == "ToolsGone"));
    let deleted = t(&["deleteTopic", "-c", "DefaultCluster", "-t", "ToolsGone"]);
    assert!(deleted.contains("success"), "{deleted}");
    assert!(
        !t(&["topicList"]).lines().any(|l| l.trim() == "ToolsGone"),
        "a deleted topic is no longer listed"
    );
}

/// The Roundtrip program running, and its output lines so far; it waits for a go-ahead
/// after its steady state.
struct Roundtrip {
    java: JavaProgram,
    seen: Vec<String>,
}

impl Roundtrip {
    fn start(cp: &str, ns: &str, topic: &str, count: u32, group: &str) -> Roundtrip {
        let count = count.to_string();
        let args = [ns, topic, &count, group];
        Roundtrip {
            java: JavaProgram::start(cp, "corvus.Roundtrip", &args, Some("java")),
            seen: Vec::new(),
        }
    }

    /// Waits (90 s at most) for a line starting with `what`.
    fn wait_for(&mut self, what: &str) {
        loop {
            match self.java.lines.recv_timeout(Duration::from_secs(90)) {
                Ok(l) => {
                    let done = l.starts_with(what);
                    self.seen.push(l);
                    if done {
                        return;
                    }
                }
                Err(_) => panic!("no `{what}` from the Java program; it said {:?}", self.seen),
            }
        }
    }

    /// Lets the program go on past its steady state.
    fn go_on(&mut self) {
        self.java.tell("");
    }

    /// Waits for the end: it must exit 0. Its output lines.
    fn finish(mut self) -> Vec<String> {
        self.wait_for("ALL RECEIVED");
        let status = self.java.child.wait().expect("java exits");
        assert!(status.success(), "{status}: {:?}", self.seen);
        std::mem::take(&mut self.seen)
    }
}

#[test]
fn a_java_transaction_producer_commits_rolls_back_and_answers_a_check_back() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml =
            Some("transaction_timeout_ms = 500\ntransaction_check_interval_ms = 300\n".into())
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "JavaTx", 8);
    let lines = run_java(&cp, "corvus.Transactions", &[&ns, "JavaTx", "JavaTxGroup"]);
    assert_printed(
        &lines,
        &["SENT java-commit COMMIT_MESSAGE", "SENT java-later UNKNOW"],
    );
    // The check carries the message under its real topic, as RocketMQ's broker sends it.
    assert!(
        lines.iter().any(|l| l == "CHECKED java-later topic JavaTx"),
        "{lines:?}"
    );
    let got = |key: &str| lines.iter().filter(|l| **l == format!("GOT {key}")).count();
    assert_eq!(got("java-commit"), 1, "{lines:?}");
    assert_eq!(got("java-later"), 1, "{lines:?}");
    assert_eq!(got("java-rollback"), 0, "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("CHECKED java-commit")),
        "a committed transaction is never checked: {lines:?}"
    );
    assert!(lines.iter().any(|l| l == "DONE"), "{lines:?}");
}
