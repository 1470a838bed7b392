//! What RocketMQ 5's admin tool and Proxy ask of a broker and a NameServer, against corvus:
//!
//! - the 5.x mqadmin (`tests/rocketmq-tools5`, rocketmq-tools 5.3.3) shows a topic's status
//!   and a group's config, which it reads with GET_TOPIC_CONFIG and
//!   GET_SUBSCRIPTIONGROUP_CONFIG; an unknown topic or group gets RocketMQ's codes;
//! - topic attributes (`updateTopic -a +message.type=FIFO`) are stored with the topic,
//!   returned by GET_TOPIC_CONFIG and GET_ALL_TOPIC_CONFIG, kept across a restart, and a bad
//!   one is refused with RocketMQ's code and words;
//! - a send that names no queue (queue id -1, as the Proxy sends) is stored in a queue the
//!   broker picks;
//! - the route of the cluster's name lists every broker (core) of the cluster, as the Proxy
//!   needs at start;
//! - with auto-creation off, a Java producer's send to an unknown topic fails at once with the
//!   client's "No route info of this topic" (4.9.8 and 5.3.1 clients);
//! - a request code nobody serves is logged once per code, not once per request, by the
//!   broker and by the NameServer.
//!
//! The Java parts need the programs built (`.ci/run` builds them); without them those tests
//! say so and skip, or fail where `CORVUS_REQUIRE_JAVA` is set.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use integration::{
    core_addrs, create_topic, mqadmin_json, remoting_call, run_client_program, wait_for, Cluster,
};
use remoting::codes::{request, response};
use remoting::headers::SendMessageRequestHeader;
use remoting::RemotingCommand;

fn tools5_or_skip() -> Option<String> {
    integration::java_program_or_skip("tests/rocketmq-tools5", None)
}

/// Runs RocketMQ 5.3.3's mqadmin with `args` against the NameServer `ns`: whether it exited
/// 0 and what it printed (bounded by the tool's own timeouts).
fn mqadmin5(cp: &str, ns: &str, args: &[&str]) -> (bool, String) {
    integration::rocketmq_mqadmin(cp, ns, args)
}

/// One request with `fields`, answered by `addr`.
fn call(addr: &str, code: i32, fields: &[(&str, &str)]) -> remoting::Frame {
    let mut cmd = RemotingCommand::request(code, 7);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    remoting_call(addr, &cmd, b"")
}

fn body_json(f: &remoting::Frame) -> serde_json::Value {
    remoting::body::from_json(&f.body).unwrap()
}

/// GET_TOPIC_CONFIG of `topic` from every core: (code, body) of each.
fn topic_configs(ns: &str, topic: &str) -> Vec<(i32, Option<serde_json::Value>)> {
    core_addrs(ns)
        .iter()
        .map(|a| {
            let f = call(
                a,
                request::GET_TOPIC_CONFIG,
                &[("topic", topic), ("lo", "true")],
            );
            let body = (f.command.code == response::SUCCESS).then(|| body_json(&f));
            (f.command.code, body)
        })
        .collect()
}

/// The 5.x admin reads topic and subscription-group configs; attributes set with
/// `updateTopic -a` are stored, returned and kept across a restart; bad ones are refused.
#[test]
fn topic_and_group_configs_with_attributes_are_served_as_rocketmq_5_serves_them() {
    let mut c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let tools = tools5_or_skip();

    // The topic, with its message type, as RocketMQ 5's mqadmin creates it (else by hand).
    if let Some(cp) = &tools {
        let (ok, text) = mqadmin5(
            cp,
            &ns,
            &[
                "updateTopic",
                "-c",
                "DefaultCluster",
                "-t",
                "AttrTopic",
                "-r",
                "4",
                "-w",
                "4",
                "-a",
                "+message.type=FIFO",
            ],
        );
        assert!(ok, "{text}");
    } else {
        let f = integration::update_topic_with_attributes(
            &c.broker.addr,
            "AttrTopic",
            4,
            "+message.type=FIFO",
        );
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    }
    integration::wait_for_route(&ns, "AttrTopic");

    // GET_TOPIC_CONFIG: each core holds some of the 4 queues, and every one has the type.
    let configs = topic_configs(&ns, "AttrTopic");
    let mut queues = 0;
    for (code, body) in &configs {
        assert_eq!(*code, response::SUCCESS);
        let b = body.as_ref().unwrap();
        assert_eq!(b["topicName"], "AttrTopic");
        assert_eq!(b["attributes"]["message.type"], "FIFO", "{b}");
        assert_eq!(b["perm"], 6);
        queues += b["writeQueueNums"].as_u64().unwrap();
    }
    assert_eq!(
        queues, 4,
        "the cores' queues add up to the topic's: {configs:?}"
    );
    // An unknown topic: TOPIC_NOT_EXIST, as RocketMQ answers (its admin skips such brokers).
    for (code, _) in topic_configs(&ns, "NoSuchTopic") {
        assert_eq!(code, response::TOPIC_NOT_EXIST);
    }
    // The listing of every topic config carries the attributes too.
    let all = call(&c.broker.addr, request::GET_ALL_TOPIC_CONFIG, &[]);
    let all = body_json(&all);
    assert_eq!(
        all["topicConfigTable"]["AttrTopic"]["attributes"]["message.type"], "FIFO",
        "{all}"
    );

    // Bad attributes are refused with RocketMQ's code and words, and change nothing.
    let broker = c.broker.addr.clone();
    for (attrs, code, words) in [
        (
            "+message.type=URGENT",
            response::SYSTEM_ERROR,
            "value is not in set",
        ),
        (
            "+colour=red",
            response::SYSTEM_ERROR,
            "unsupported key: colour",
        ),
        (
            "+message.type=MIXED",
            response::INVALID_PARAMETER,
            "MIXED message type is not supported",
        ),
        (
            "+queue.type=BatchCQ",
            response::SYSTEM_ERROR,
            "attempt to update an unchangeable attribute",
        ),
    ] {
        let f = integration::update_topic_with_attributes(&broker, "AttrTopic", 4, attrs);
        let remark = f.command.remark.clone().unwrap_or_default();
        assert_eq!(f.command.code, code, "{attrs}: {remark}");
        assert!(remark.contains(words), "{attrs}: {remark}");
    }
    let f = integration::update_topic_with_attributes(
        &broker,
        "NewAttrTopic",
        2,
        "+cleanup.policy=COMPACTION",
    );
    assert_eq!(f.command.code, response::SYSTEM_ERROR);
    assert!(
        f.command
            .remark
            .clone()
            .unwrap_or_default()
            .contains("not supported"),
        "corvus does not compact, so it refuses rather than ignores: {:?}",
        f.command.remark
    );
    // An update without attributes keeps them; one with a change replaces the value.
    let f = integration::update_topic_with_attributes(&broker, "AttrTopic", 4, "");
    assert_eq!(f.command.code, response::SUCCESS);
    let f =
        integration::update_topic_with_attributes(&broker, "AttrTopic", 4, "+message.type=DELAY");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);

    // A subscription group stored by the admin tool, read back by the 5.x admin.
    if let Some(cp) = &tools {
        let (ok, text) = mqadmin5(
            cp,
            &ns,
            &[
                "updateSubGroup",
                "-c",
                "DefaultCluster",
                "-g",
                "AttrGroup",
                "-r",
                "3",
            ],
        );
        assert!(ok, "{text}");
        let (ok, text) = mqadmin5(cp, &ns, &["getConsumerConfig", "-g", "AttrGroup"]);
        assert!(ok, "{text}");
        let retry_line = text
            .lines()
            .find(|l| l.trim_start().starts_with("retryMaxTimes"))
            .unwrap_or_else(|| panic!("no retryMaxTimes in {text}"));
        assert!(retry_line.trim_end().ends_with("3"), "{retry_line}");
        // topicStatus reads every broker's topic config (GET_TOPIC_CONFIG) beside the offsets.
        let (ok, text) = mqadmin5(cp, &ns, &["topicStatus", "-t", "AttrTopic"]);
        assert!(ok, "{text}");
        assert!(text.contains("#Broker Name"), "{text}");
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("AttrTopic") || l.contains("broker-a-c"))
                .count(),
            4,
            "one line per queue: {text}"
        );
    } else {
        let cfg = serde_json::json!({"groupName": "AttrGroup", "retryMaxTimes": 3});
        let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 3);
        let f = remoting_call(&broker, &cmd, cfg.to_string().as_bytes());
        assert_eq!(f.command.code, response::SUCCESS);
    }
    for addr in core_addrs(&ns) {
        let f = call(
            &addr,
            request::GET_SUBSCRIPTIONGROUP_CONFIG,
            &[("group", "AttrGroup")],
        );
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
        let b = body_json(&f);
        assert_eq!(
            (b["groupName"].clone(), b["retryMaxTimes"].clone()),
            ("AttrGroup".into(), 3.into())
        );
        let f = call(
            &addr,
            request::GET_SUBSCRIPTIONGROUP_CONFIG,
            &[("group", "NoSuchGroup")],
        );
        assert_eq!(f.command.code, response::SUBSCRIPTION_GROUP_NOT_EXIST);
    }

    // The attributes are stored with the topic: a restarted broker has them.
    c.restart_broker();
    let back = wait_for(Duration::from_secs(30), || {
        let configs = topic_configs(&ns, "AttrTopic");
        configs
            .iter()
            .all(|(code, _)| *code == response::SUCCESS)
            .then_some(configs)
    })
    .expect("the restarted broker serves the topic");
    for (_, body) in back {
        assert_eq!(body.unwrap()["attributes"]["message.type"], "DELAY");
    }
}

/// A send with queue id -1 (RocketMQ 5's Proxy names no queue) is stored in a queue the
/// broker picks among the core's own, spread over them, and answered with that queue.
#[test]
fn a_send_that_names_no_queue_goes_to_a_queue_the_broker_picks() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "AnyQueue", 8);
    // Each core (broker-a-c<i>) and its share of the queues, from the topic's route.
    let f = call(
        &ns,
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", "AnyQueue")],
    );
    let route = body_json(&f);
    let mut sent = 0u64;
    for (core, addr) in core_addrs(&ns).iter().enumerate() {
        let name = format!("broker-a-c{core}");
        let own = route["queueDatas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["brokerName"] == name.as_str())
            .map_or(0, |q| q["writeQueueNums"].as_i64().unwrap());
        assert!(own > 0, "{name} holds some of the 8 queues: {route}");
        let mut used = std::collections::BTreeSet::new();
        for i in 0..12 {
            let h = SendMessageRequestHeader {
                producer_group: "ProxyLike".into(),
                topic: "AnyQueue".into(),
                default_topic: "TBW102".into(),
                default_topic_queue_nums: 4,
                queue_id: -1,
                born_timestamp: 1,
                properties: Some(format!("KEYS\u{1}any-{i}\u{2}")),
                ..SendMessageRequestHeader::default()
            };
            let cmd = RemotingCommand::request(request::SEND_MESSAGE, 100 + i).with_header(&h);
            let f = remoting_call(addr, &cmd, b"picked by the broker");
            assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
            let q: i64 = f.command.ext("queueId").unwrap().parse().unwrap();
            assert!((0..own).contains(&q), "queue {q} of the core's {own}");
            used.insert(q);
            sent += 1;
        }
        assert_eq!(
            used.len() as i64,
            own.min(12),
            "the sends spread over the core's queues"
        );
    }
    // Every one was stored.
    let status = mqadmin_json(&ns, &["topicStatus", "-t", "AnyQueue"]);
    let stored: u64 = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["max_offset"].as_u64().unwrap())
        .sum();
    assert_eq!(stored, sent, "{status}");
}

/// Every RocketMQ broker registers a topic named after its cluster; Apache's Proxy looks its
/// route up at start. The route lists every core of the cluster's brokers.
#[test]
fn the_route_of_the_cluster_name_lists_every_broker_of_the_cluster() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let f = call(
        &ns,
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", "DefaultCluster")],
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let route = body_json(&f);
    let mut names: Vec<String> = route["brokerDatas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["brokerName"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["broker-a-c0", "broker-a-c1"], "{route}");
    // RocketMQ 5's own tool reads the same route.
    if let Some(cp) = tools5_or_skip() {
        let (ok, text) = mqadmin5(&cp, &ns, &["topicRoute", "-t", "DefaultCluster"]);
        assert!(ok, "{text}");
        assert!(
            text.contains("broker-a-c0") && text.contains("broker-a-c1"),
            "{text}"
        );
    }
}

/// With auto-creation off, no TBW102 route is served: a Java producer's send to a topic
/// nobody created fails at once with the client's "No route info of this topic"
/// (NOT_FOUND_TOPIC_EXCEPTION, 10005), on the 4.9.8 and the 5.3.1 client alike.
#[test]
fn without_auto_creation_a_java_send_to_an_unknown_topic_finds_no_route() {
    let class = Some("corvus/UnknownTopic.class");
    let Some(cp4) = integration::java_program_or_skip("tests/rocketmq-java", class) else {
        return;
    };
    let cp5 = integration::java_program_or_skip("tests/rocketmq-java5", class);
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("auto_create_topic_enable = false\n".into())
    });
    let ns = c.namesrv.addr.clone();
    for cp in std::iter::once(cp4).chain(cp5) {
        let mut cmd = Command::new("java");
        cmd.arg("-cp")
            .arg(&cp)
            .arg("corvus.UnknownTopic")
            .args([ns.as_str(), "NobodyCreatedThis"])
            .env("ROCKETMQ_HOME", std::env::temp_dir());
        let (status, lines) =
            run_client_program("corvus.UnknownTopic", &mut cmd, Duration::from_secs(120));
        assert!(status.success(), "{lines:?}");
        let refused = lines
            .iter()
            .find(|l| l.starts_with("REFUSED "))
            .unwrap_or_else(|| panic!("no REFUSED line in {lines:?}"));
        assert!(
            refused.starts_with("REFUSED 10005 No route info of this topic"),
            "{refused} ({cp})"
        );
    }
}

/// A request code nobody serves is answered REQUEST_CODE_NOT_SUPPORTED every time, and
/// logged once per code (per minute), by the broker and by the NameServer.
#[test]
fn refused_request_codes_are_logged_once_per_code() {
    let c = Cluster::start(1, "small");
    for (addr, proc_) in [(&c.broker.addr, &c.broker), (&c.namesrv.addr, &c.namesrv)] {
        for (code, times) in [(9999, 20), (9998, 3)] {
            for _ in 0..times {
                let f = call(addr, code, &[]);
                assert_eq!(f.command.code, response::REQUEST_CODE_NOT_SUPPORTED);
            }
        }
        let lines = |code: i32| {
            proc_
                .stderr()
                .lines()
                .filter(|l| l.contains(&format!("does not serve request code {code}")))
                .count()
        };
        // Each refusal is logged (if at all) before it is answered.
        assert_eq!(lines(9999), 1, "{}", proc_.stderr());
        assert_eq!(lines(9998), 1, "{}", proc_.stderr());
    }
}

/// The route's permission of `topic` on every broker the NameServer lists.
fn route_perms(ns: &str, topic: &str) -> Vec<i64> {
    let mut cmd = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 5);
    cmd.ext_fields.insert("topic".into(), topic.into());
    let f = remoting_call(ns, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    body_json(&f)["queueDatas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["perm"].as_i64().unwrap())
        .collect()
}

/// RocketMQ 5.3.3's mqadmin keeps its NameServer commands against corvus's NameServer: the
/// KV config (`updateKvConfig`, `deleteKvConfig`, `updateOrderConf`), kept across a restart
/// with `--kv-config-path`; `getNamesrvConfig`; and the drain of a broker
/// (`wipeWritePerm` makes its routes read-only, so producers send elsewhere, until
/// `addWritePerm`). `updateNamesrvConfig` is refused with the reason.
#[test]
fn the_5_x_mqadmin_keeps_its_nameserver_commands() {
    let Some(tools) = tools5_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kv_path = dir.path().join("kvConfig.json");
    let kv_flag = kv_path.display().to_string();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut ns_proc = integration::start_namesrv_with(&logs, &["--kv-config-path", &kv_flag]);
    let ns = ns_proc.addr.clone();
    let mut opts = integration::BrokerOpts::new(&ns, &dir.path().join("data"));
    opts.cores = 2;
    let _broker = integration::start_broker(&opts, &logs);
    create_topic(&ns, "DrainTopic", 4);

    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &["updateKvConfig", "-s", "corvus-ns", "-k", "k1", "-v", "v1"],
    );
    assert!(ok, "{out}");
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &[
            "updateOrderConf",
            "-t",
            "DrainTopic",
            "-m",
            "put",
            "-v",
            "broker-a-c0:2;broker-a-c1:2",
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &["updateOrderConf", "-t", "DrainTopic", "-m", "get"],
    );
    assert!(ok && out.contains("broker-a-c0:2;broker-a-c1:2"), "{out}");
    let (ok, out) = mqadmin5(&tools, &ns, &["getNamesrvConfig"]);
    assert!(
        ok && out.contains("broker_expiry_ms") && out.contains(&kv_flag),
        "{out}"
    );
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &[
            "updateNamesrvConfig",
            "-k",
            "broker_expiry_ms",
            "-v",
            "5000",
        ],
    );
    assert!(
        !ok && out.contains("restart it to change broker_expiry_ms"),
        "{out}"
    );

    // The KV config outlives the NameServer.
    ns_proc.kill9();
    let ns_proc2 = integration::start_namesrv_on(&logs, &ns, &["--kv-config-path", &kv_flag]);
    assert_eq!(ns_proc2.addr, ns);
    let mut get = RemotingCommand::request(request::GET_KV_CONFIG, 9);
    get.ext_fields
        .insert("namespace".into(), "corvus-ns".into());
    get.ext_fields.insert("key".into(), "k1".into());
    let f = remoting_call(&ns, &get, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    assert_eq!(f.command.ext("value"), Some("v1"));
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &["deleteKvConfig", "-s", "corvus-ns", "-k", "k1"],
    );
    assert!(ok, "{out}");
    let f = remoting_call(&ns, &get, b"");
    assert_eq!(f.command.code, response::QUERY_NOT_FOUND);

    // Drain and undrain. The broker registers again with the new NameServer first.
    wait_for(Duration::from_secs(30), || {
        let mut cmd = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 5);
        cmd.ext_fields.insert("topic".into(), "DrainTopic".into());
        (remoting_call(&ns, &cmd, b"").command.code == response::SUCCESS).then_some(())
    })
    .expect("the broker registered with the restarted NameServer");
    assert!(route_perms(&ns, "DrainTopic").iter().all(|&p| p == 6));
    let (ok, out) = mqadmin5(&tools, &ns, &["wipeWritePerm", "-b", "broker-a-c0"]);
    assert!(
        ok && out.contains("wipe write perm of broker[broker-a-c0]"),
        "{out}"
    );
    assert!(
        route_perms(&ns, "DrainTopic").iter().all(|&p| p == 4),
        "both cores drain"
    );
    let (ok, out) = mqadmin5(&tools, &ns, &["addWritePerm", "-b", "broker-a-c0"]);
    assert!(
        ok && out.contains("add write perm of broker[broker-a-c0]"),
        "{out}"
    );
    assert!(route_perms(&ns, "DrainTopic").iter().all(|&p| p == 6));
}

/// The broker's maintenance requests of RocketMQ 5.3.3's mqadmin: `producer -b` lists the
/// producer groups whose clients heartbeated (GET_ALL_PRODUCER_INFO), `exportMetadata`
/// leaves the system topics out, `brokerConsumeStats` lists every group's offsets
/// (GET_BROKER_CONSUME_STATS), and `deleteExpiredCommitLog` and `cleanExpiredCQ` run a
/// retention pass at once.
#[test]
fn producers_and_clean_ups_are_served_to_the_5_x_mqadmin() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    let mut conn = std::net::TcpStream::connect(&broker).unwrap();
    let heartbeat = serde_json::json!({
        "clientID": "127.0.0.1@admin-producer",
        "consumerDataSet": [],
        "producerDataSet": [{"groupName": "AdminProducerGroup"}],
    });
    let hb = integration::remoting_exchange(
        &mut conn,
        &RemotingCommand::request(request::HEART_BEAT, 1),
        heartbeat.to_string().as_bytes(),
    );
    assert_eq!(hb.command.code, response::SUCCESS);
    let f = integration::remoting_exchange(
        &mut conn,
        &RemotingCommand::request(request::GET_ALL_PRODUCER_INFO, 2),
        b"",
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let v = body_json(&f);
    let producers = v["data"]["AdminProducerGroup"]
        .as_array()
        .expect("the group");
    assert_eq!(producers[0]["clientId"], "127.0.0.1@admin-producer", "{v}");
    // RocketMQ's form of the address: Java's InetSocketAddress text.
    assert!(
        producers[0]["remoteIP"]
            .as_str()
            .unwrap()
            .starts_with("/127.0.0.1:"),
        "{v}"
    );
    assert!(producers[0]["lastUpdateTimestamp"].as_i64().unwrap() > 1_600_000_000_000);

    let Some(tools) = tools5_or_skip() else {
        return;
    };
    let (ok, out) = mqadmin5(&tools, &ns, &["producer", "-b", &broker]);
    assert!(ok && out.contains("AdminProducerGroup"), "{out}");
    // exportMetadata leaves the broker's system topics out (GET_SYSTEM_TOPIC_LIST_FROM_BROKER).
    create_topic(&ns, "ExportedTopic", 2);
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().display().to_string();
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &["exportMetadata", "-c", "DefaultCluster", "-f", &export],
    );
    assert!(ok, "{out}");
    let text = std::fs::read_to_string(dir.path().join("metadata.json")).unwrap();
    assert!(
        text.contains("ExportedTopic") && !text.contains("\"TBW102\""),
        "{text}"
    );
    // brokerConsumeStats lists every group with offsets on the broker.
    let mut commit = RemotingCommand::request(request::UPDATE_CONSUMER_OFFSET, 3);
    for (k, v) in [
        ("consumerGroup", "StatsGroup"),
        ("topic", "ExportedTopic"),
        ("queueId", "0"),
        ("commitOffset", "0"),
    ] {
        commit.ext_fields.insert(k.into(), v.into());
    }
    let f = remoting_call(&broker, &commit, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let (ok, out) = mqadmin5(&tools, &ns, &["brokerConsumeStats", "-b", &broker]);
    assert!(
        ok && out.contains("StatsGroup")
            && out.contains("ExportedTopic")
            && out.contains("Diff Total"),
        "{out}"
    );
    for cmd in ["deleteExpiredCommitLog", "cleanExpiredCQ"] {
        let (ok, out) = mqadmin5(&tools, &ns, &[cmd, "-b", &broker]);
        assert!(ok && out.to_lowercase().contains("success"), "{cmd}: {out}");
    }
    wait_for(Duration::from_secs(10), || {
        c.broker
            .stderr()
            .contains("a retention pass ran at an admin's request")
            .then_some(())
    })
    .expect("the broker logs the pass");
}

/// `haStatus` of RocketMQ 5.3.3's mqadmin (GET_BROKER_HA_STATUS) against a master and its
/// slave: the master lists its slave in sync with what it acknowledged, the slave names its
/// master and what it copied.
#[test]
fn ha_status_shows_the_master_s_slave_and_the_slave_s_master() {
    let Some(tools) = tools5_or_skip() else {
        return;
    };
    let pair = integration::MasterSlave::start("");
    let ns = pair.ns.addr.clone();
    create_topic(&ns, "HaTopic", 2);
    let mut send = RemotingCommand::request(request::SEND_MESSAGE, 4);
    for (k, v) in [
        ("producerGroup", "HaProducer"),
        ("topic", "HaTopic"),
        ("defaultTopic", "TBW102"),
        ("defaultTopicQueueNums", "4"),
        ("queueId", "0"),
        ("sysFlag", "0"),
        ("bornTimestamp", "1700000000000"),
        ("flag", "0"),
        ("reconsumeTimes", "0"),
        ("unitMode", "false"),
    ] {
        send.ext_fields.insert(k.into(), v.into());
    }
    let f = remoting_call(&pair.master.addr, &send, b"replicated");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let out = wait_for(Duration::from_secs(30), || {
        let (ok, out) = mqadmin5(&tools, &ns, &["haStatus", "-b", &pair.master.addr]);
        (ok && out.contains("#InSyncSlaveNum\t1")).then_some(out)
    })
    .expect("the master reports its slave in sync");
    assert!(out.contains("#SlaveNum\t1") && out.contains("OK"), "{out}");
    let (ok, out) = mqadmin5(&tools, &ns, &["haStatus", "-b", &pair.slave.addr]);
    assert!(
        ok && out.contains("#MasterAddr") && out.contains("#CommitLogMaxOffset"),
        "{out}"
    );
}

/// RocketMQ 5.3.3's mqadmin: `queryCq` lists a queue's entries (CommitLog offset, size, tag
/// hash) as RocketMQ's ConsumeQueue units with the queue's min and max; `clusterList` shows
/// the 5.x version corvus speaks; `getColdDataFlowCtrInfo` says there is no cold-data table;
/// `cleanUnusedTopic` is refused with the reason; 5.5's SWITCH_TIMER_ENGINE takes `F` (the
/// file-based timer corvus runs) and refuses `R` (RocksDB) with the reason.
#[test]
fn queue_entries_version_and_deliberate_refusals_answer_the_5_x_mqadmin() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    let f = call(&broker, request::SWITCH_TIMER_ENGINE, &[("E_T", "F")]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let f = call(&broker, request::SWITCH_TIMER_ENGINE, &[("E_T", "R")]);
    assert_ne!(f.command.code, response::SUCCESS);
    assert!(
        f.command
            .remark
            .unwrap_or_default()
            .contains("no RocksDB timer engine"),
        "the refusal says why"
    );
    let Some(tools) = tools5_or_skip() else {
        return;
    };
    create_topic(&ns, "CqTopic", 1);
    for i in 0..3 {
        let body = format!("m{i}");
        let (ok, out) = mqadmin5(
            &tools,
            &ns,
            &["sendMessage", "-t", "CqTopic", "-p", &body, "-c", "TagA"],
        );
        assert!(ok && out.contains("SEND_OK"), "{out}");
    }
    let (ok, out) = mqadmin5(
        &tools,
        &ns,
        &[
            "queryCq", "-t", "CqTopic", "-q", "0", "-i", "1", "-c", "5", "-b", &broker,
        ],
    );
    assert!(ok && out.contains("max: 3, min: 0"), "{out}");
    // From index 1: entries 1 and 2, each with the tag's hash ("TagA".hashCode()).
    assert!(
        out.contains("idx: 1") && out.contains("idx: 2") && !out.contains("idx: 3"),
        "{out}"
    );
    assert_eq!(out.matches("tagsCode=2598919").count(), 2, "{out}");
    let offsets: Vec<u64> = out
        .split("physicOffset=")
        .skip(1)
        .filter_map(|s| s.split(',').next()?.parse().ok())
        .collect();
    assert!(offsets.len() == 2 && offsets[0] < offsets[1], "{out}");
    // The offset is the one queryMsgByOffset shows for the same entry.
    let (ok, shown) = mqadmin5(
        &tools,
        &ns,
        &[
            "queryMsgByOffset",
            "-t",
            "CqTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "1",
        ],
    );
    assert!(
        ok && shown.contains(&format!("CommitLog Offset:    {}", offsets[0])),
        "{shown}"
    );

    let (ok, out) = mqadmin5(&tools, &ns, &["clusterList"]);
    assert!(
        ok && out.contains("V5_5_0") && !out.contains("V4_9_8"),
        "{out}"
    );
    let (ok, out) = mqadmin5(&tools, &ns, &["getColdDataFlowCtrInfo", "-b", &broker]);
    assert!(ok && out.contains("has no cold ctr table"), "{out}");
    let (_, out) = mqadmin5(&tools, &ns, &["cleanUnusedTopic", "-b", &broker]);
    assert!(
        out.contains("corvus keeps a deleted topic's ConsumeQueues"),
        "{out}"
    );
}

/// A SEND_MESSAGE of `body` to `addr` (one core), in a queue the broker picks: the answer's
/// code and remark.
fn send_to_core(addr: &str, topic: &str, body: &[u8]) -> (i32, String) {
    let h = SendMessageRequestHeader {
        producer_group: "LiveConfig".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: -1,
        born_timestamp: 1,
        ..SendMessageRequestHeader::default()
    };
    let cmd = RemotingCommand::request(request::SEND_MESSAGE, 11).with_header(&h);
    let f = remoting_call(addr, &cmd, body);
    (f.command.code, f.command.remark.unwrap_or_default())
}

/// RocketMQ 5.3.3's `mqadmin updateBrokerConfig -b ADDR` (sent to one core) applies on every
/// core at once, without a restart: a lowered `maxMessageSize` refuses a larger send with
/// MESSAGE_ILLEGAL and a clear remark on every core while a smaller one is stored, and
/// `getBrokerConfig` shows it; `brokerPermission 4` (read-only) refuses sends with
/// NO_PERMISSION and the routes read-only at once, and 6 takes sends again; a value that is
/// no number, and a key RocketMQ never changes remotely, are refused and change nothing.
#[test]
fn the_5_x_mqadmin_update_broker_config_applies_on_every_core_at_once() {
    let Some(tools) = tools5_or_skip() else {
        return;
    };
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "LiveConfig", 8);
    let cores = core_addrs(&ns);
    assert_eq!(cores.len(), 2);
    let big = vec![b'b'; 100 << 10];
    let small = vec![b's'; 1000];
    for addr in &cores {
        assert_eq!(send_to_core(addr, "LiveConfig", &big).0, response::SUCCESS);
    }

    let set = |key: &str, value: &str| {
        mqadmin5(
            &tools,
            &ns,
            &[
                "updateBrokerConfig",
                "-b",
                &cores[1],
                "-k",
                key,
                "-v",
                value,
            ],
        )
    };
    let (ok, out) = set("maxMessageSize", "65536");
    assert!(ok && out.contains("update broker config success"), "{out}");
    for addr in &cores {
        let (code, remark) = send_to_core(addr, "LiveConfig", &big);
        assert_eq!(code, response::MESSAGE_ILLEGAL, "core {addr}: {remark}");
        assert!(
            remark.contains("exceeds message_bytes_max = 65536"),
            "core {addr}: {remark}"
        );
        let (code, remark) = send_to_core(addr, "LiveConfig", &small);
        assert_eq!(code, response::SUCCESS, "core {addr}: {remark}");
    }
    let (ok, out) = mqadmin5(&tools, &ns, &["getBrokerConfig", "-b", &cores[0]]);
    assert!(
        ok && out
            .lines()
            .any(|l| l.starts_with("maxMessageSize ") && l.ends_with("=  65536")),
        "{out}"
    );

    // Refused, and nothing changes.
    let (ok, out) = set("maxMessageSize", "big");
    assert!(!ok && out.contains("not a whole number"), "{out}");
    let (ok, out) = set("brokerConfigPath", "/tmp/elsewhere.conf");
    assert!(!ok && out.contains("black list"), "{out}");
    for addr in &cores {
        assert_eq!(
            send_to_core(addr, "LiveConfig", &big).0,
            response::MESSAGE_ILLEGAL
        );
    }

    // Read-only: sends refused on every core and the routes read-only, until 6.
    let (ok, out) = set("brokerPermission", "4");
    assert!(ok, "{out}");
    for addr in &cores {
        let (code, remark) = send_to_core(addr, "LiveConfig", &small);
        assert_eq!(code, response::NO_PERMISSION, "core {addr}: {remark}");
        assert!(remark.contains("sending message is forbidden"), "{remark}");
    }
    wait_for(Duration::from_secs(10), || {
        route_perms(&ns, "LiveConfig")
            .iter()
            .all(|&p| p == 4)
            .then_some(())
    })
    .expect("the routes turn read-only at once");
    let (ok, out) = set("brokerPermission", "6");
    assert!(ok, "{out}");
    for addr in &cores {
        assert_eq!(
            send_to_core(addr, "LiveConfig", &small).0,
            response::SUCCESS
        );
    }
    wait_for(Duration::from_secs(10), || {
        route_perms(&ns, "LiveConfig")
            .iter()
            .all(|&p| p == 6)
            .then_some(())
    })
    .expect("the routes take sends again");
}
