//! RocketMQ's everyday mqadmin commands, run with corvus's own `mqadmin` against a real
//! broker (two cores: two RocketMQ brokers in the routes) and NameServer: what each prints or
//! changes, as a user would check it.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use client::Message;
use integration::{core_addrs, create_topic, mqadmin, mqadmin_json, producer, wait_for, Cluster};
use remoting::body::{ConsumerData, HeartbeatData, MessageModel, ProducerData, SubscriptionData};
use remoting::codes::request;
use remoting::{Decoded, RemotingCommand, RemotingDecoder};

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "mqadmin failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    ok(out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A RocketMQ client's heartbeat, sent by hand to every core: producer group `PG`, consumer
/// group `CG` subscribed to `topic`.
fn heartbeat(addrs: &[String], client_id: &str, topic: &str) {
    let hb = HeartbeatData {
        client_id: client_id.to_owned(),
        producer_data_set: vec![ProducerData {
            group_name: "PG".into(),
        }],
        consumer_data_set: vec![ConsumerData {
            group_name: "CG".into(),
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![SubscriptionData {
                topic: topic.to_owned(),
                sub_string: "TagA".into(),
                ..SubscriptionData::default()
            }],
            ..ConsumerData::default()
        }],
        ..HeartbeatData::default()
    };
    for addr in addrs {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let cmd = RemotingCommand::request(request::HEART_BEAT, 1);
        conn.write_all(&remoting::encode(&cmd, &serde_json::to_vec(&hb).unwrap()).unwrap())
            .unwrap();
        let mut decoder = RemotingDecoder::default();
        let mut buf = bytes::BytesMut::new();
        let mut chunk = [0u8; 4096];
        let answer = loop {
            // The broker may tell the new member of a clustering group that the group
            // changed (NOTIFY_CONSUMER_IDS_CHANGED) before it answers.
            if let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
                if f.command.is_response() {
                    break f;
                }
                continue;
            }
            let n = conn.read(&mut chunk).unwrap();
            assert!(n > 0, "the broker closed the heartbeat connection");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert_eq!(
            answer.command.code, 0,
            "heartbeat answered {:?}",
            answer.command.remark
        );
    }
}

#[test]
fn everyday_commands_show_and_change_what_users_expect() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "AdminT", 4);
    let p = producer(&ns);
    let mut ids = Vec::new();
    for i in 0..12 {
        let msg = Message::new("AdminT", format!("admin-body-{i}").into_bytes())
            .with_keys([format!("k-{i}")])
            .with_tags("TagA");
        ids.push(p.send(msg).unwrap().msg_id);
    }

    // topicStatus: the max offsets add up to what was sent, on both cores.
    let status = mqadmin_json(&ns, &["topicStatus", "-t", "AdminT"]);
    let queues = status["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 4, "{status}");
    let total: u64 = queues
        .iter()
        .map(|q| q["max_offset"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 12, "{status}");
    let brokers: std::collections::BTreeSet<&str> = queues
        .iter()
        .map(|q| q["broker_name"].as_str().unwrap())
        .collect();
    assert_eq!(brokers.len(), 2, "both cores hold queues: {status}");
    assert!(ok(&mqadmin(&ns, &["topicStatus", "-t", "AdminT"])).contains("#Max Offset"));

    // getBrokerConfig: a known key with its value.
    let text = ok(&mqadmin(&ns, &["getBrokerConfig", "-b", &broker]));
    assert!(text.lines().any(|l| l == "brokerName=broker-a"), "{text}");
    let cfg = mqadmin_json(&ns, &["getBrokerConfig", "-c", "DefaultCluster"]);
    assert_eq!(
        cfg["brokers"].as_array().unwrap().len(),
        2,
        "one per core: {cfg}"
    );
    assert_eq!(cfg["brokers"][0]["config"]["brokerName"], "broker-a");

    // updateBrokerConfig: the broker's answer is printed as it is, and a refusal fails.
    let out = mqadmin(
        &ns,
        &[
            "updateBrokerConfig",
            "-b",
            &broker,
            "-k",
            "flushIntervalCommitLog",
            "-v",
            "500",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert!(String::from_utf8_lossy(&out.stdout).contains("flushIntervalCommitLog=500"));
    } else {
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr.contains("refused flushIntervalCommitLog=500"),
            "{stderr}"
        );
        assert!(
            stderr.contains("code "),
            "the broker's code is shown: {stderr}"
        );
    }

    // queryMsgByUniqueKey: the message by its msg id, printed in full.
    let found = json_lines(&mqadmin(
        &ns,
        &[
            "--json",
            "queryMsgByUniqueKey",
            "-i",
            &ids[3],
            "-t",
            "AdminT",
        ],
    ));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["body"], "admin-body-3");
    assert_eq!(found[0]["tags"], "TagA");
    let text = ok(&mqadmin(
        &ns,
        &["queryMsgByUniqueKey", "-i", &ids[3], "-t", "AdminT"],
    ));
    for field in [
        "topic:",
        "queue_offset:",
        "stored:",
        "born:",
        "properties:",
        "admin-body-3",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }

    // printMsg: every body, once.
    let printed = json_lines(&mqadmin(&ns, &["--json", "printMsg", "-t", "AdminT"]));
    let mut bodies: Vec<String> = printed
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect();
    bodies.sort();
    let mut want: Vec<String> = (0..12).map(|i| format!("admin-body-{i}")).collect();
    want.sort();
    assert_eq!(bodies, want);
    // Nothing is stored before the epoch's first second.
    assert!(json_lines(&mqadmin(
        &ns,
        &["--json", "printMsg", "-t", "AdminT", "-e", "1000"]
    ))
    .is_empty());

    // producerConnection and consumerConnection: a RocketMQ client's heartbeat shows.
    let addrs = core_addrs(&ns);
    assert_eq!(addrs.len(), 2);
    heartbeat(&addrs, "127.0.0.1@admin-test", "AdminT");
    let conns = mqadmin_json(&ns, &["producerConnection", "-g", "PG", "-t", "AdminT"]);
    assert_eq!(
        conns["connections"][0]["client_id"], "127.0.0.1@admin-test",
        "{conns}"
    );
    let conns = mqadmin_json(&ns, &["consumerConnection", "-g", "CG"]);
    assert_eq!(conns["connections"].as_array().unwrap().len(), 1, "{conns}");
    assert_eq!(conns["connections"][0]["client_id"], "127.0.0.1@admin-test");
    assert_eq!(conns["subscriptions"][0]["topic"], "AdminT");
    assert_eq!(conns["subscriptions"][0]["sub_expression"], "TagA");
    assert_eq!(conns["message_model"], "CLUSTERING");
    let text = ok(&mqadmin(&ns, &["consumerConnection", "-g", "CG"]));
    assert!(text.contains("127.0.0.1@admin-test") && text.contains("Below is subscription"));
    assert!(!mqadmin(&ns, &["consumerConnection", "-g", "NobodyG"])
        .status
        .success());

    // statsAll: the topic is listed with what it holds.
    let stats = mqadmin_json(&ns, &["statsAll", "-t", "AdminT", "--interval-ms", "100"]);
    let rows = stats["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r["topic"] == "AdminT" && r["in_total"] == 12),
        "{stats}"
    );
    let text = ok(&mqadmin(&ns, &["statsAll", "--interval-ms", "100"]));
    assert!(text.lines().any(|l| l.starts_with("AdminT ")), "{text}");

    // clusterRT: one row per broker core, each with a number.
    let rt = mqadmin_json(&ns, &["clusterRT", "-a", "5", "-s", "64"]);
    let rows = rt["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rt}");
    for r in rows {
        assert_eq!(r["success"], 5, "{rt}");
        assert!(r["rt_ms_avg"].as_f64().unwrap() > 0.0, "{rt}");
        assert!(r["tps"].as_f64().unwrap() > 0.0, "{rt}");
    }
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["broker_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broker-a-c0", "broker-a-c1"]);

    // RocketMQ's flags on the existing commands.
    let found = json_lines(&mqadmin(
        &ns,
        &[
            "--json",
            "queryMsgByKey",
            "-t",
            "AdminT",
            "-k",
            "k-5",
            "-b",
            "0",
            "-c",
            "4",
        ],
    ));
    assert_eq!(found.len(), 1);
    ok(&mqadmin(
        &ns,
        &[
            "updateTopic",
            "-t",
            "Shaped",
            "-r",
            "2",
            "-w",
            "2",
            "-p",
            "6",
            "-c",
            "DefaultCluster",
        ],
    ));
    let route = mqadmin_json(&ns, &["topicRoute", "-t", "Shaped"]);
    assert_eq!(route["queue_data"][0]["read_queues"], 2, "{route}");
}

#[test]
fn a_deleted_topic_leaves_the_routes_and_sends_to_it_fail() {
    let c = Cluster::start_with(2, "small", |o| {
        o.extra.push("--no-auto-create-topic".into())
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "Doomed", 4);
    create_topic(&ns, "Kept", 4);
    ok(&mqadmin(&ns, &["send", "-t", "Doomed", "-p", "before"]));

    let text = ok(&mqadmin(
        &ns,
        &["deleteTopic", "-t", "Doomed", "-c", "DefaultCluster"],
    ));
    assert!(
        text.contains("from broker broker-a-c0") && text.contains("from broker broker-a-c1"),
        "{text}"
    );
    let list = ok(&mqadmin(&ns, &["topicList"]));
    assert!(!list.lines().any(|l| l == "Doomed"), "{list}");
    assert!(list.lines().any(|l| l == "Kept"), "{list}");
    let out = mqadmin(&ns, &["send", "-t", "Doomed", "-p", "after"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Doomed"), "{stderr}");

    // For good: the broker does not register it again, also after a restart.
    let mut c = c;
    c.restart_broker();
    let ns = c.namesrv.addr.clone();
    let back = wait_for(Duration::from_secs(10), || {
        let list = ok(&mqadmin(&ns, &["topicList"]));
        list.lines().any(|l| l == "Kept").then_some(list)
    })
    .expect("the restarted broker registers its topics");
    assert!(!back.lines().any(|l| l == "Doomed"), "{back}");
}

#[test]
fn subscription_groups_are_stored_listed_and_deleted_across_restarts() {
    let mut c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let text = ok(&mqadmin(
        &ns,
        &[
            "updateSubGroup",
            "-g",
            "OrdersG",
            "-c",
            "DefaultCluster",
            "-r",
            "3",
            "-s",
            "false",
        ],
    ));
    assert!(text.contains("OrdersG"), "{text}");
    ok(&mqadmin(
        &ns,
        &["updateSubGroup", "-g", "OtherG", "-b", &c.broker.addr],
    ));

    c.restart_broker();
    let broker = c.broker.addr.clone();
    let groups = wait_for(Duration::from_secs(10), || {
        sub_groups(&broker).filter(|g| g.get("OrdersG").is_some())
    })
    .expect("the stored group is listed after a restart");
    assert_eq!(groups["OrdersG"]["retryMaxTimes"], 3, "{groups}");
    assert_eq!(groups["OrdersG"]["consumeEnable"], false, "{groups}");
    assert_eq!(
        groups["OtherG"]["retryMaxTimes"], 16,
        "RocketMQ's default: {groups}"
    );

    ok(&mqadmin(
        &ns,
        &["deleteSubGroup", "-g", "OrdersG", "-c", "DefaultCluster"],
    ));
    let groups = sub_groups(&broker).unwrap();
    assert!(groups.get("OrdersG").is_none(), "{groups}");
    assert!(groups.get("OtherG").is_some(), "{groups}");
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG's table, as RocketMQ's tools read it.
fn sub_groups(addr: &str) -> Option<serde_json::Value> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let cmd = RemotingCommand::request(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 1);
    conn.write_all(&remoting::encode(&cmd, b"").ok()?).ok()?;
    let mut decoder = RemotingDecoder::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = [0u8; 4096];
    // Bounded by the read timeout: a silent broker ends the loop with an error.
    loop {
        if let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).ok()? {
            let v: serde_json::Value = remoting::body::from_json(&f.body).ok()?;
            return Some(v["subscriptionGroupTable"].clone());
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
