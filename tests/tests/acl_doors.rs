//! The doors access control must keep shut, tried as an intruder would:
//!
//! * a broker with `acl_enable` and no credentials of its own does not start (its replication
//!   port would stream the CommitLog to anyone), and one told to start anyway
//!   (`acl_allow_no_broker_credentials`) refuses a rogue slave: a raw TCP client speaking
//!   the replication handshake gets a refusal and not one byte of the log, and the master
//!   logs why; so does a master with credentials, to a slave without them or with a guess;
//! * an account without SUB on a topic cannot read its messages by offset or id (native
//!   `ViewByOffset`, RocketMQ VIEW_MESSAGE_BY_ID), unless `acl_lookup_requires_sub = false`
//!   asks for RocketMQ's looser rule;
//! * controllers with `--acl-file` refuse an unsigned, wrongly signed, non-admin or replayed
//!   `ElectMaster` (the master and its epoch stay), while a broker signing with its
//!   credentials is made master and an admin's signed `ElectMaster` is carried out;
//! * a signed RocketMQ request carrying its time is refused when replayed or stale, at the
//!   broker and at the NameServer, while one without a time (real RocketMQ clients) is taken
//!   as before.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use client::{ClientConfig, Credentials, Message, MessageExt, Producer};
use controller_proto::{Request, Response, SignedRequest};
use integration::controllers::{controller_broker_opts, Controllers};
use integration::{
    create_topic_as, mqadmin_as, remoting_call, start_broker, start_namesrv_with, wait_for,
    AclRules, BrokerOpts, Cluster, BROKER_CREDENTIALS,
};
use message::ids::{MsgOffsetId, LOCAL_OFFSET_BITS};
use remoting::codes::{request, response};
use remoting::RemotingCommand;

const ADMIN: (&str, &str) = ("admin0001", "admin-secret-1");
const READER: (&str, &str) = ("reader01", "reader-secret-1");

/// `reader01` may use `Mine` and nothing else; the brokers' own account is an admin (the
/// controllers take heartbeats from admins only).
const RULES: &str = r#"
accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: corvus-broker
    secretKey: corvus-broker-secret
    admin: true
  - accessKey: reader01
    secretKey: reader-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Mine=PUB|SUB
"#;

fn dirs() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    (dir, logs)
}

fn acl_toml(rules: &AclRules) -> String {
    format!(
        "acl_enable = true\nacl_file = \"{}\"\n",
        rules.file.display()
    )
}

// ---- replication ----

#[test]
fn a_broker_with_acl_and_no_credentials_of_its_own_does_not_start() {
    let rules = AclRules::write(RULES);
    let (dir, logs) = dirs();
    let mut opts = BrokerOpts::new("", &dir.path().join("data"));
    opts.config_toml = Some(acl_toml(&rules));
    let (code, out) = integration::run_broker_expecting_exit(&opts, &logs, Duration::from_secs(30));
    assert!(code.is_some(), "the broker kept running: {out}");
    assert_ne!(code, Some(0), "{out}");
    for needle in [
        "acl_access_key",
        "acl_secret_key",
        "acl_allow_no_broker_credentials",
    ] {
        assert!(out.contains(needle), "the error names `{needle}`: {out}");
    }
}

/// What a rogue slave got from the replication port: every byte, and the frames in it.
struct RogueSession {
    bytes: Vec<u8>,
    /// (kind, payload) of each whole frame.
    frames: Vec<(u8, Vec<u8>)>,
}

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REFUSE: u8 = 4;
const DATA: u8 = 5;
const CHALLENGE: u8 = 10;
const PROOF: u8 = 11;

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u16).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u32).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// The replication version the broker speaks (`broker_replication::wire::VERSION`): a
/// HELLO of another is refused for its version before its credentials are looked at.
const REPLICATION_VERSION: u16 = 6;

/// A replication HELLO of an empty slave `broker-a` id 1 for `shard`, naming `access_key`
/// (empty: none).
fn hello(shard: u16, shard_count: u16, access_key: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&REPLICATION_VERSION.to_be_bytes());
    b.extend_from_slice(&shard.to_be_bytes());
    b.extend_from_slice(&shard_count.to_be_bytes());
    b.extend_from_slice(&(4u64 << 20).to_be_bytes()); // the small profile's segments
    b.extend_from_slice(&1u64.to_be_bytes()); // broker id
    b.extend_from_slice(&0u64.to_be_bytes()); // log min
    b.extend_from_slice(&0u64.to_be_bytes()); // log end
    put_str(&mut b, "broker-a");
    b.extend_from_slice(&0u32.to_be_bytes()); // no epochs
    put_str(&mut b, access_key);
    put_str(
        &mut b,
        if access_key.is_empty() {
            ""
        } else {
            "rogue-nonce"
        },
    );
    frame(HELLO, &b)
}

/// Connects to `ha` as a slave of `shard`, answers a CHALLENGE with a made-up PROOF, and
/// reads whatever comes (at most 3 s after the last byte, 10 s in all).
fn rogue_slave(ha: &str, shard: u16, shard_count: u16, access_key: &str) -> RogueSession {
    let mut s = TcpStream::connect(ha).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(&hello(shard, shard_count, access_key)).unwrap();
    let mut session = RogueSession {
        bytes: Vec::new(),
        frames: Vec::new(),
    };
    let mut parsed = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut chunk = [0u8; 64 << 10];
    while Instant::now() < deadline {
        let n = match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        session.bytes.extend_from_slice(&chunk[..n]);
        while session.bytes.len() >= parsed + 5 {
            let len =
                u32::from_be_bytes(session.bytes[parsed..parsed + 4].try_into().unwrap()) as usize;
            if session.bytes.len() < parsed + 4 + len {
                break;
            }
            let kind = session.bytes[parsed + 4];
            let payload = session.bytes[parsed + 5..parsed + 4 + len].to_vec();
            parsed += 4 + len;
            if kind == CHALLENGE {
                let mut p = Vec::new();
                put_str(&mut p, "bm90IHRoZSBwcm9vZg==");
                let _ = s.write_all(&frame(PROOF, &p));
            }
            session.frames.push((kind, payload));
        }
    }
    session
}

fn refusal(session: &RogueSession) -> String {
    let (kind, payload) = session
        .frames
        .iter()
        .find(|(k, _)| *k == REFUSE)
        .unwrap_or_else(|| panic!("no REFUSE among {:?}", kinds(session)));
    assert_eq!(*kind, REFUSE);
    String::from_utf8_lossy(&payload[2..]).into_owned()
}

fn kinds(session: &RogueSession) -> Vec<u8> {
    session.frames.iter().map(|(k, _)| *k).collect()
}

/// Sends `SECRET` bodies to `topic` as the admin, so the log has something to steal.
fn fill_log(ns: &str, topic: &str) {
    create_topic_as(ns, ADMIN, topic, 2);
    let p = producer_as(ns, ADMIN);
    wait_for(Duration::from_secs(20), || {
        p.send(Message::new(topic, SECRET)).ok()
    })
    .expect("a send to the topic");
    for _ in 0..20 {
        p.send(Message::new(topic, SECRET)).unwrap();
    }
}

const SECRET: &[u8] = b"the-crown-jewels-0123456789";

fn assert_nothing_leaked(session: &RogueSession) {
    assert!(
        !kinds(session).contains(&WELCOME) && !kinds(session).contains(&DATA),
        "the rogue slave was served: frames {:?}",
        kinds(session)
    );
    assert!(
        !session.bytes.windows(SECRET.len()).any(|w| w == SECRET),
        "message bodies reached the rogue slave"
    );
}

fn shard_count(ns: &str, broker: &str) -> u16 {
    admin_as(ns, ADMIN)
        .broker_status(broker)
        .unwrap()
        .shard_count
}

#[test]
fn a_rogue_slave_gets_no_log_from_an_acl_master_without_credentials() {
    let rules = AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some(format!(
            "{}acl_allow_no_broker_credentials = true\n",
            acl_toml(&rules)
        ))
    });
    let ns = c.namesrv.addr.clone();
    fill_log(&ns, "Vault");
    let ha = c
        .broker
        .preamble_addr("broker replication on ")
        .expect("the master says where it replicates from");
    let shards = shard_count(&ns, &c.broker.addr);
    for shard in 0..shards {
        let session = rogue_slave(&ha, shard, shards, "");
        assert_nothing_leaked(&session);
        let why = refusal(&session);
        assert!(why.contains("takes no slaves"), "{why}");
    }
    let logged = wait_for(Duration::from_secs(10), || {
        let log = c.broker.stderr();
        log.contains("refused a slave").then_some(log)
    });
    let log = logged.unwrap_or_else(|| c.broker.stderr());
    assert!(
        log.contains("refused a slave") && log.contains("takes no slaves"),
        "the master logs why: {log}"
    );
    assert!(
        log.contains("this broker refuses every slave"),
        "the start says so: {log}"
    );
}

#[test]
fn a_rogue_slave_gets_no_log_from_an_acl_master_with_credentials() {
    let rules = AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let ns = c.namesrv.addr.clone();
    fill_log(&ns, "Vault");
    let ha = c.broker.preamble_addr("broker replication on ").unwrap();
    let shards = shard_count(&ns, &c.broker.addr);
    // No credentials at all, then the right access key with a guessed proof.
    let none = rogue_slave(&ha, 0, shards, "");
    assert_nothing_leaked(&none);
    assert!(
        refusal(&none).contains("no credentials"),
        "{}",
        refusal(&none)
    );
    let guess = rogue_slave(&ha, 0, shards, BROKER_CREDENTIALS.0);
    assert_nothing_leaked(&guess);
    assert!(kinds(&guess).contains(&CHALLENGE), "{:?}", kinds(&guess));
    let log = wait_for(Duration::from_secs(10), || {
        let log = c.broker.stderr();
        log.contains("proof for access key").then_some(log)
    })
    .unwrap_or_else(|| c.broker.stderr());
    assert!(
        log.contains("refused a slave") && log.contains("is wrong"),
        "the master logs why: {log}"
    );
}

// ---- lookups by offset or id ----

fn producer_as(ns: &str, account: (&str, &str)) -> Producer {
    Producer::builder()
        .namesrv(ns)
        .group("doors-producer")
        .retries(0)
        .send_timeout_ms(5000)
        .credentials(Credentials::new(account.0, account.1))
        .build()
        .unwrap()
}

fn admin_as(ns: &str, account: (&str, &str)) -> client::Admin {
    let mut config = ClientConfig::new(ns).unwrap();
    config.pool.credentials = Some(Credentials::new(account.0, account.1));
    client::Admin::with_config(config).unwrap()
}

/// The offset id of one message sent to `topic` as the admin.
fn stored(ns: &str, topic: &str, body: &str) -> MsgOffsetId {
    create_topic_as(ns, ADMIN, topic, 1);
    let p = producer_as(ns, ADMIN);
    let sent = wait_for(Duration::from_secs(20), || {
        p.send(Message::new(topic, body.as_bytes().to_vec())).ok()
    })
    .expect("a send to the topic");
    MsgOffsetId::parse(&sent.offset_msg_id).unwrap()
}

/// VIEW_MESSAGE_BY_ID signed by `account` as RocketMQ's AclClientRPCHook signs it.
fn view_by_id(broker: &str, account: (&str, &str), id: &MsgOffsetId) -> remoting::Frame {
    let wide = (u64::from(id.shard) << LOCAL_OFFSET_BITS) | id.commit_log_offset;
    let mut cmd = RemotingCommand::request(request::VIEW_MESSAGE_BY_ID, 7);
    cmd.ext_fields.insert("offset".into(), wide.to_string());
    integration::sign_remoting_command(&mut cmd, &[], account);
    remoting_call(broker, &cmd, &[])
}

fn viewed(r: client::Result<Option<MessageExt>>) -> MessageExt {
    r.unwrap().expect("the message is found")
}

#[test]
fn an_account_without_sub_cannot_read_a_topic_by_offset_or_id() {
    let rules = AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let ns = c.namesrv.addr.clone();
    let secret = stored(&ns, "Payroll", "salaries");
    let mine = stored(&ns, "Mine", "my own");

    // Native ViewByOffset: refused on Payroll, served on Mine, served to the admin.
    let reader = admin_as(&ns, READER);
    let e = reader.view_by_offset_id(&secret).unwrap_err();
    assert_eq!(e.code(), Some(protocol::ResponseCode::NoPermission), "{e}");
    assert!(
        e.to_string()
            .contains("reader01 may not SUB from topic Payroll"),
        "{e}"
    );
    assert_eq!(&viewed(reader.view_by_offset_id(&mine)).body[..], b"my own");
    let admin = admin_as(&ns, ADMIN);
    assert_eq!(
        &viewed(admin.view_by_offset_id(&secret)).body[..],
        b"salaries"
    );

    // RocketMQ VIEW_MESSAGE_BY_ID: the same.
    let f = view_by_id(&c.broker.addr, READER, &secret);
    assert_eq!(f.command.code, response::NO_PERMISSION, "{:?}", f.command);
    assert!(
        !f.body.windows(8).any(|w| w == b"salaries"),
        "the refusal carries no body"
    );
    let f = view_by_id(&c.broker.addr, READER, &mine);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);
    assert!(f.body.windows(6).any(|w| w == b"my own"));
    let f = view_by_id(&c.broker.addr, ADMIN, &secret);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);

    // The broker's log says who was refused what.
    let log = wait_for(Duration::from_secs(10), || {
        let log = c.broker.stderr();
        log.contains("VIEW_MESSAGE_BY_ID").then_some(log)
    })
    .unwrap_or_else(|| c.broker.stderr());
    assert!(
        log.contains("ViewByOffset") && log.contains("may not SUB from topic Payroll"),
        "{log}"
    );
}

#[test]
fn rocketmqs_looser_lookup_rule_is_there_when_asked_for() {
    let rules = AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some(format!(
            "{}acl_lookup_requires_sub = false\n",
            rules.broker_toml()
        ))
    });
    let ns = c.namesrv.addr.clone();
    let secret = stored(&ns, "Payroll", "salaries");
    let reader = admin_as(&ns, READER);
    assert_eq!(
        &viewed(reader.view_by_offset_id(&secret)).body[..],
        b"salaries"
    );
    let f = view_by_id(&c.broker.addr, READER, &secret);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);
    // Pulls still need SUB: the setting opens lookups only.
    let mut config = ClientConfig::new(&ns).unwrap();
    config.pool.credentials = Some(Credentials::new(READER.0, READER.1));
    let consumer = client::PullConsumer::with_config(config, "reader-group").unwrap();
    let queues = consumer.queues("Payroll").unwrap();
    let e = consumer
        .pull(
            &queues[0],
            client::QueueOffset(0),
            &client::PullOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(protocol::ResponseCode::NoPermission), "{e}");
}

// ---- controllers ----

fn elect(group: &str, broker_id: u64) -> Request {
    Request::ElectMaster {
        group: group.into(),
        broker_id: Some(broker_id),
    }
}

/// One request over a fresh connection to `addr`, as an intruder would send it.
fn raw_controller_call(addr: &str, req: &Request) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&controller_proto::encode(req).unwrap())
        .unwrap();
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let mut body = vec![0u8; controller_proto::body_len(h).unwrap()];
    s.read_exact(&mut body).unwrap();
    controller_proto::decode(&body).unwrap()
}

fn refused_reason(r: Response) -> String {
    match r {
        Response::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn controllers_with_acl_refuse_a_forged_elect_master_and_take_signed_brokers() {
    let rules = AclRules::write(RULES);
    let file = rules.file.display().to_string();
    let mut ctl = Controllers::start_with_flags(
        3000,
        100,
        &["--acl-file", &file, "--acl-access-key", ADMIN.0],
    );
    ctl.credentials = Some(acl::Credentials::new(ADMIN.0, ADMIN.1));
    let leader = ctl.agreed_leader(Duration::from_secs(30));
    let leader_addr = ctl.addrs[leader as usize - 1].clone();

    // A broker in controller mode signing with its credentials is made master.
    let (dir, logs) = dirs();
    let ns = start_namesrv_with(&logs, &[]);
    let ring = integration::ring_dir();
    let mut opts = controller_broker_opts(
        &ns.addr,
        &dir.path().join("a"),
        ring.path(),
        "broker-a",
        0,
        &ctl.mq_addrs(),
        "ASYNC_MASTER",
    );
    opts.config_toml = Some(format!(
        "{}{}",
        opts.config_toml.take().unwrap(),
        rules.broker_toml()
    ));
    let broker = start_broker(&opts, &logs);
    let first = wait_for(Duration::from_secs(30), || {
        ctl.replica_info("broker-a")
            .filter(|i| i.master_id == Some(0))
    })
    .unwrap_or_else(|| {
        panic!(
            "the signed broker was not made master:\n{}\n{}",
            broker.stderr(),
            ctl.stderr()
        )
    });

    // Unsigned, wrongly signed, signed by a non-admin: refused, saying why.
    let why = refused_reason(raw_controller_call(&leader_addr, &elect("broker-a", 0)));
    assert!(why.contains("not signed"), "{why}");
    let body = serde_json::to_string(&elect("broker-a", 0)).unwrap();
    let forged = Request::Signed(SignedRequest::sign(
        &acl::Credentials::new(ADMIN.0, "a-guessed-secret"),
        body.clone(),
    ));
    let why = refused_reason(raw_controller_call(&leader_addr, &forged));
    assert!(why.contains("check signature failed"), "{why}");
    let reader = Request::Signed(SignedRequest::sign(
        &acl::Credentials::new(READER.0, READER.1),
        body.clone(),
    ));
    let why = refused_reason(raw_controller_call(&leader_addr, &reader));
    assert!(why.contains("not an admin"), "{why}");
    // mqadmin without an account is refused too.
    let out = mqadmin_as(
        &ns.addr,
        None,
        &[
            "electMaster",
            "-a",
            &ctl.mq_addrs(),
            "-b",
            "broker-a",
            "-i",
            "0",
        ],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && said.contains("not signed"),
        "{said}"
    );
    let now = ctl.replica_info("broker-a").unwrap();
    assert_eq!(
        now.master_epoch, first.master_epoch,
        "no refused request moved the epoch"
    );

    // An admin's signed request is answered with the record, once: its replay is refused.
    let signed = Request::Signed(SignedRequest::sign(
        &acl::Credentials::new(ADMIN.0, ADMIN.1),
        body,
    ));
    match raw_controller_call(&leader_addr, &signed) {
        // Broker 0 is the only in-sync replica: it stays master.
        Response::Replica(info) => assert_eq!(info.master_id, Some(0), "{info:?}"),
        other => panic!("the admin's ElectMaster was not carried out: {other:?}"),
    }
    let why = refused_reason(raw_controller_call(&leader_addr, &signed));
    assert!(why.contains("replay"), "{why}");
    // And mqadmin as the admin works.
    let out = mqadmin_as(
        &ns.addr,
        Some(ADMIN),
        &[
            "electMaster",
            "-a",
            &ctl.mq_addrs(),
            "-b",
            "broker-a",
            "-i",
            "0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = ctl.stderr();
    assert!(log.contains("refused a request"), "{log}");
    drop(broker);
}

// ---- replayed and stale signatures ----

/// A RocketMQ request signed by `account`, with `signed_at_ms` among the signed fields when
/// given (as mqadmin signs), else as RocketMQ's own clients sign.
fn signed_cmd(
    code: i32,
    fields: &[(&str, &str)],
    account: (&str, &str),
    signed_at_ms: Option<u64>,
) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(code, 9);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    if let Some(t) = signed_at_ms {
        cmd.ext_fields
            .insert(acl::fresh::SIGNED_AT_MS.into(), t.to_string());
        cmd.ext_fields
            .insert(acl::fresh::NONCE.into(), acl::sign::new_nonce());
    }
    integration::sign_remoting_command(&mut cmd, &[], account);
    cmd
}

#[test]
fn a_replayed_or_stale_signed_request_is_refused_and_rocketmq_clients_still_work() {
    let rules = AclRules::write(RULES);
    let file = rules.file.display().to_string();
    // The default window (two minutes): a request signed ten minutes ago is outside it.
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(rules.broker_toml()));
    let broker = c.broker.addr.clone();
    let now = acl::fresh::now_ms();

    // At the broker: a timed request is taken once; its replay and a stale one are not.
    let timed = signed_cmd(request::GET_BROKER_RUNTIME_INFO, &[], READER, Some(now));
    let f = remoting_call(&broker, &timed, &[]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);
    let f = remoting_call(&broker, &timed, &[]);
    assert_eq!(f.command.code, response::NO_PERMISSION, "{:?}", f.command);
    assert!(
        f.command.remark.as_deref().unwrap_or("").contains("replay"),
        "{:?}",
        f.command
    );
    let stale = signed_cmd(
        request::GET_BROKER_RUNTIME_INFO,
        &[],
        READER,
        Some(now - 10 * 60_000),
    );
    let f = remoting_call(&broker, &stale, &[]);
    assert_eq!(f.command.code, response::NO_PERMISSION, "{:?}", f.command);
    assert!(
        f.command
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("outside the window"),
        "{:?}",
        f.command
    );
    // A request as RocketMQ's clients sign it (no time) is taken, again and again.
    let untimed = signed_cmd(request::GET_BROKER_RUNTIME_INFO, &[], READER, None);
    for _ in 0..2 {
        let f = remoting_call(&broker, &untimed, &[]);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);
    }
    // mqadmin's own signed requests carry a time and go through.
    let out = mqadmin_as(
        &c.namesrv.addr,
        Some(ADMIN),
        &["getBrokerConfig", "-b", &broker],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // At a NameServer with ACL on: the same.
    let (_dir, logs) = dirs();
    let ns = start_namesrv_with(&logs, &["--acl-enable", "--acl-file", &file]);
    let delete = signed_cmd(
        request::DELETE_TOPIC_IN_NAMESRV,
        &[("topic", "NoSuchTopic")],
        ADMIN,
        Some(acl::fresh::now_ms()),
    );
    let f = remoting_call(&ns.addr, &delete, &[]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command);
    let f = remoting_call(&ns.addr, &delete, &[]);
    assert_eq!(f.command.code, response::NO_PERMISSION, "{:?}", f.command);
    assert!(
        f.command.remark.as_deref().unwrap_or("").contains("replay"),
        "{:?}",
        f.command
    );
}
