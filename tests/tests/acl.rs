//! Access control at the broker's front door (`acl_enable`, a RocketMQ `plain_acl.yml`), as a
//! user of each protocol meets it:
//!
//! * native clients log in with an access key and a secret; without one, or with a wrong
//!   secret, every data and admin request is refused with NO_PERMISSION saying why; an
//!   account publishes and consumes only the topics and groups its permissions give it, and
//!   only an admin account creates topics or resets offsets (mqadmin included);
//! * RocketMQ requests are checked by their AclClientRPCHook signature: unsigned and wrongly
//!   signed ones are refused, a peer on the account's `whiteRemoteAddress` needs no
//!   signature, admin requests need an admin account;
//! * a changed ACL file is in force within seconds without a restart, and a changed file that
//!   does not parse leaves the rules in force;
//! * a broker told to check access with a file it cannot read does not start.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use client::{ClientConfig, Credentials, Message, Producer, PullConsumer};
use integration::{
    create_topic_as, mqadmin_as, raw_call, remoting_call, remoting_request, wait_for, AclRules,
    BrokerOpts, Cluster,
};
use protocol::{Command, GroupQueue, Header, ResponseCode};
use remoting::codes::{request, response};
use remoting::RemotingCommand;

use integration::acl_accounts::{ADMIN, APP, RULES};

struct AclCluster {
    c: Cluster,
    rules: AclRules,
}

fn start(rules: &str) -> AclCluster {
    let rules = AclRules::write(rules);
    let c = Cluster::start_with(1, "small", |o: &mut BrokerOpts| {
        o.config_toml = Some(rules.broker_toml())
    });
    AclCluster { c, rules }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn create_topics_as_admin(ns: &str) {
    for t in ["Orders", "Audit"] {
        create_topic_as(ns, ADMIN, t, 2);
    }
}

fn producer_as(ns: &str, account: Option<(&str, &str)>) -> Producer {
    let mut b = Producer::builder()
        .namesrv(ns)
        .group("acl-producer")
        .retries(0)
        .send_timeout_ms(5000);
    if let Some((ak, sk)) = account {
        b = b.credentials(Credentials::new(ak, sk));
    }
    b.build().unwrap()
}

fn pull_consumer_as(ns: &str, account: (&str, &str), group: &str) -> PullConsumer {
    let mut config = ClientConfig::new(ns).unwrap();
    config.pool.credentials = Some(Credentials::new(account.0, account.1));
    PullConsumer::with_config(config, group).unwrap()
}

/// The send's refusal: its code must be NO_PERMISSION; returns the remark.
fn refused(r: client::Result<client::SendResult>) -> String {
    let e = r.expect_err("the send must be refused");
    assert_eq!(e.code(), Some(ResponseCode::NoPermission), "{e}");
    e.to_string()
}

/// Waits until a topic's route is known (the broker registered it after the admin made it).
fn wait_routable(p: &Producer, topic: &str) -> client::SendResult {
    wait_for(Duration::from_secs(20), || {
        p.send(Message::new(topic, "routable")).ok()
    })
    .unwrap_or_else(|| panic!("no send to {topic} succeeded within 20 s"))
}

#[test]
fn native_clients_get_what_their_account_allows_and_nothing_else() {
    let ac = start(RULES);
    let ns = ac.c.namesrv.addr.clone();
    let broker = ac.c.broker.addr.clone();

    // Topic changes: nobody and a non-admin account are refused, saying why.
    let out = mqadmin_as(&ns, None, &["update-topic", "-t", "Orders", "-q", "2"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("NO_PERMISSION"), "{}", stderr(&out));
    let out = mqadmin_as(&ns, Some(APP), &["update-topic", "-t", "Orders", "-q", "2"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("orders-app is not an admin account"),
        "{}",
        stderr(&out)
    );
    // The broker's log says so too, with the account.
    let logged = wait_for(Duration::from_secs(10), || {
        let log = ac.c.broker.stderr();
        log.lines()
            .any(|l| {
                l.contains("ACL refused a request")
                    && l.contains("orders-app")
                    && l.contains("is not an admin account")
            })
            .then_some(())
    });
    assert!(logged.is_some(), "{}", ac.c.broker.stderr());
    create_topics_as_admin(&ns);

    // The account's own topic: sends and pulls as its group.
    let app = producer_as(&ns, Some(APP));
    let sent = wait_routable(&app, "Orders");
    let e = refused(app.send(Message::new("Audit", "not mine to publish")));
    assert!(e.contains("orders-app may not PUB to topic Audit"), "{e}");

    let consumer = pull_consumer_as(&ns, APP, "orders-group");
    let q = client::MessageQueue {
        topic: "Orders".into(),
        broker_name: sent.broker_name.clone(),
        queue_id: sent.queue_id,
    };
    let opts = client::PullOptions::default();
    let got = consumer.pull(&q, client::QueueOffset(0), &opts).unwrap();
    assert!(
        got.messages.iter().any(|m| m.msg_id == sent.msg_id),
        "the account's group must read what it sent"
    );
    let other = pull_consumer_as(&ns, APP, "other-group");
    let e = other
        .pull(&q, client::QueueOffset(0), &opts)
        .expect_err("a group it has no SUB for");
    assert_eq!(e.code(), Some(ResponseCode::NoPermission), "{e}");
    assert!(
        e.to_string().contains("may not SUB as group other-group"),
        "{e}"
    );

    // No credentials, or the wrong secret: refused at the first request.
    let e = refused(producer_as(&ns, None).send(Message::new("Orders", "anonymous")));
    assert!(e.contains("must log in"), "{e}");
    let e = refused(
        producer_as(&ns, Some(("orders-app", "not-the-secret")))
            .send(Message::new("Orders", "impostor")),
    );
    assert!(e.contains("login failed for accessKey=orders-app"), "{e}");

    // Every data and admin request of a connection that has not logged in.
    let gq = GroupQueue {
        group: "orders-group".into(),
        topic: "Orders".into(),
        queue_id: 0,
    };
    let unauthenticated = [
        Command::Send(protocol::SendRequest {
            producer_group: "p".into(),
            topic: "Orders".into(),
            queue_id: 0,
            count: 1,
        }),
        Command::Pull(protocol::PullRequest {
            consumer_group: "orders-group".into(),
            topic: "Orders".into(),
            queue_id: 0,
            queue_offset: 0,
            max_messages: 32,
            max_bytes: 1 << 20,
            tag_expression: "*".into(),
            suspend_timeout_ms: 0,
        }),
        Command::CreateTopic(protocol::TopicConfig {
            name: "Hijack".into(),
            read_queues: 1,
            write_queues: 1,
            perm: 0,
        }),
        Command::ResetConsumerOffset {
            queue: gq.clone(),
            offset: 0,
        },
        Command::LockQueue {
            queue: gq.clone(),
            client_id: "thief".into(),
            lease_ms: 60_000,
        },
        Command::CommitConsumerOffset(protocol::CommitOffset {
            queue: gq.clone(),
            offset: 0,
            epoch: 0,
            client_id: "thief".into(),
            release: false,
        }),
        Command::QueryConsumerOffset(gq.clone()),
        Command::ConsumerHeartbeat(protocol::ConsumerHeartbeat {
            group: "orders-group".into(),
            client_id: "thief".into(),
            topics: vec!["Orders".into()],
            broadcasting: false,
        }),
        Command::BrokerStatus,
        Command::GetTopicConfigs,
    ];
    for cmd in unauthenticated {
        let name = cmd.name();
        let f = raw_call(&broker, &Header::request(1, cmd), &[]);
        assert_eq!(
            f.header.response_code(),
            ResponseCode::NoPermission,
            "{name} without a login: {}",
            f.header.remark
        );
    }

    // A login with a signature made with the wrong secret leaves the connection refused.
    let mut s = TcpStream::connect(&broker).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let nonce = match call(&mut s, Command::AuthChallenge).header.command {
        Command::AuthNonce { nonce } => nonce,
        other => panic!("expected a nonce, got {}", other.name()),
    };
    let forged = acl::sign::login_signature("guessed-secret", &nonce, APP.0);
    let f = call(
        &mut s,
        Command::Login {
            access_key: APP.0.into(),
            signature: forged,
        },
    );
    assert_eq!(f.header.response_code(), ResponseCode::NoPermission);
    let f = call(&mut s, Command::GetTopicConfigs);
    assert_eq!(f.header.response_code(), ResponseCode::NoPermission);

    // Offset resets are an admin's.
    let reset = |account| {
        mqadmin_as(
            &ns,
            account,
            &[
                "reset-offset",
                "-g",
                "orders-group",
                "-t",
                "Orders",
                "--to",
                "first",
            ],
        )
    };
    let out = reset(Some(APP));
    assert!(!out.status.success(), "a non-admin reset offsets");
    assert!(stderr(&out).contains("NO_PERMISSION"), "{}", stderr(&out));
}

/// One native request on an open connection, and its answer.
fn call(s: &mut TcpStream, cmd: Command) -> protocol::Frame {
    protocol::blocking::write_frame(s, &Header::request(7, cmd), &[]).unwrap();
    s.flush().unwrap();
    let mut r = protocol::blocking::FrameReader::new(&*s, 1 << 20);
    r.next_frame().unwrap().expect("an answer")
}

#[test]
fn a_changed_acl_file_is_in_force_without_a_restart() {
    let ac = start(RULES);
    let ns = ac.c.namesrv.addr.clone();
    create_topics_as_admin(&ns);
    let app = producer_as(&ns, Some(APP));
    wait_routable(&app, "Orders");
    refused(app.send(Message::new("Audit", "before")));

    // Give orders-app Audit: its next sends succeed, on the same connections.
    write_atomically(&ac.rules.file, &RULES.replace("Audit=SUB", "Audit=PUB|SUB"));
    let sent = wait_for(Duration::from_secs(15), || {
        app.send(Message::new("Audit", "after")).ok()
    });
    assert!(
        sent.is_some(),
        "the reloaded rules were not in force within 15 s"
    );

    // A broken file: the rules in force stay, and the log says why.
    write_atomically(&ac.rules.file, "accounts:\n  - accessKey: x\n");
    let logs = ac.c.logs();
    let said = wait_for(Duration::from_secs(15), || {
        std::fs::read_dir(&logs)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
            .any(|t| t.contains("cannot be used, the previous rules stay in force"))
            .then_some(())
    });
    assert!(
        said.is_some(),
        "the broker did not say the new file was refused"
    );
    app.send(Message::new("Audit", "still allowed")).unwrap();
    refused(producer_as(&ns, None).send(Message::new("Audit", "still anonymous")));
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn code_and_remark(f: &remoting::Frame) -> (i32, String) {
    (f.command.code, f.command.remark.clone().unwrap_or_default())
}

#[test]
fn rocketmq_requests_are_checked_by_their_signature() {
    let ac = start(RULES);
    let broker = ac.c.broker.addr.clone();
    create_topics_as_admin(&ac.c.namesrv.addr);
    let max_offset = [("topic", "Orders"), ("queueId", "0")];
    let create = [
        ("topic", "Created"),
        ("defaultTopic", "TBW102"),
        ("readQueueNums", "1"),
        ("writeQueueNums", "1"),
        ("perm", "6"),
        ("topicFilterType", "SINGLE_TAG"),
        ("order", "false"),
    ];

    let ask = |cmd: RemotingCommand| code_and_remark(&remoting_call(&broker, &cmd, &[]));

    let (code, remark) = ask(remoting_request(request::GET_MAX_OFFSET, &max_offset, None));
    assert_eq!(code, response::NO_PERMISSION, "unsigned: {remark}");
    let (code, _) = ask(remoting_request(
        request::GET_MAX_OFFSET,
        &max_offset,
        Some(APP),
    ));
    assert_eq!(code, response::SUCCESS, "signed by orders-app");
    let (code, remark) = ask(remoting_request(
        request::GET_MAX_OFFSET,
        &max_offset,
        Some(("orders-app", "a-wrong-secret")),
    ));
    assert_eq!(code, response::NO_PERMISSION);
    assert!(remark.contains("check signature failed"), "{remark}");

    // A field changed after signing.
    let mut tampered = remoting_request(request::GET_MAX_OFFSET, &max_offset, Some(APP));
    tampered.ext_fields.insert("queueId".into(), "1".into());
    assert_eq!(ask(tampered).0, response::NO_PERMISSION);

    // Admin requests: an admin account's, not another's.
    for code in [
        request::UPDATE_AND_CREATE_TOPIC,
        request::UPDATE_BROKER_CONFIG,
        request::DELETE_TOPIC_IN_BROKER,
        request::INVOKE_BROKER_TO_RESET_OFFSET,
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    ] {
        let (got, remark) = ask(remoting_request(code, &create, Some(APP)));
        assert_eq!(got, response::NO_PERMISSION, "code {code}: {remark}");
        assert!(remark.contains("not an admin account"), "{remark}");
    }
    let (code, remark) = ask(remoting_request(
        request::UPDATE_AND_CREATE_TOPIC,
        &create,
        Some(ADMIN),
    ));
    assert_eq!(code, response::SUCCESS, "{remark}");

    // The account's allow-listed address needs no signature; an unknown key is refused.
    let mut unsigned = remoting_request(request::UPDATE_AND_CREATE_TOPIC, &create, None);
    unsigned
        .ext_fields
        .insert("AccessKey".into(), "local-tool".into());
    let (code, remark) = ask(unsigned);
    assert_eq!(code, response::SUCCESS, "{remark}");
    let mut unknown = remoting_request(request::GET_MAX_OFFSET, &max_offset, None);
    unknown
        .ext_fields
        .insert("AccessKey".into(), "stranger".into());
    let (code, remark) = ask(unknown);
    assert_eq!(code, response::NO_PERMISSION);
    assert!(remark.contains("no acl config for stranger"), "{remark}");
}

#[test]
fn a_broker_told_to_check_access_without_a_usable_file_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut opts = BrokerOpts::new("", &dir.path().join("data"));
    let missing = dir.path().join("missing.yml");
    opts.config_toml = Some(format!(
        "acl_enable = true\nacl_file = \"{}\"\n",
        missing.display()
    ));
    let (code, out) = integration::run_broker_expecting_exit(&opts, &logs, Duration::from_secs(30));
    assert_ne!(code, Some(0), "{out}");
    assert!(code.is_some(), "the broker kept running: {out}");
    assert!(out.contains("acl_file"), "{out}");
}
