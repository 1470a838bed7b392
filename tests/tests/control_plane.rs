//! The authenticated control plane: a NameServer with ACL on takes registrations and
//! unregistrations only from a broker logged in with an admin account (or, over RocketMQ's
//! protocol, from requests signed by one), while route reads stay open to clients;
//! brokers replicating to each other prove the same credentials both ways. Tried as an
//! attacker on the network would: an UnregisterBroker from anyone else, a fake registration
//! re-pointing a topic's route, a broker with a guessed secret, a slave with the wrong secret
//! or none. The same with ACL 2.0 at the NameServer (`--auth-file`): users instead of
//! accounts, a super user or Cluster:Update instead of an admin account, and every refusal
//! on the `audit` log target.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use integration::{raw_call, start_broker, start_namesrv_with, wait_for, BrokerOpts, Proc};
use protocol::blocking::{write_frame, FrameReader};
use protocol::{BrokerKey, Command, Header, RegisterBroker, ResponseCode, TopicConfig};
use remoting::codes::{request, response};
use remoting::RemotingCommand;

const ACL: &str = "
accounts:
  - accessKey: corvus-broker
    secretKey: broker-secret-1
    admin: true
  - accessKey: reader-acct
    secretKey: reader-secret-1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
";

/// A native connection, logged in or not.
struct Conn {
    reader: FrameReader<TcpStream>,
    next_id: u64,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn {
            reader: FrameReader::new(s, 64 << 20),
            next_id: 0,
        }
    }

    fn call(&mut self, command: Command) -> Header {
        self.call_with(command, &[])
    }

    fn call_with(&mut self, command: Command, body: &[u8]) -> Header {
        self.next_id += 1;
        let h = Header::request(self.next_id, command);
        write_frame(&mut self.reader.get_ref(), &h, body).unwrap();
        self.reader.next_frame().unwrap().expect("an answer").header
    }

    /// Logs in with the acl crate's challenge-response; the code of the answer.
    fn login(&mut self, access_key: &str, secret_key: &str) -> ResponseCode {
        let Command::AuthNonce { nonce } = self.call(Command::AuthChallenge).command else {
            panic!("no nonce")
        };
        let signature = acl::sign::login_signature(secret_key, &nonce, access_key);
        self.call(Command::Login {
            access_key: access_key.into(),
            signature,
        })
        .response_code()
    }

    fn logged_in(addr: &str, access_key: &str, secret_key: &str) -> Conn {
        let mut c = Conn::open(addr);
        assert_eq!(c.login(access_key, secret_key), ResponseCode::Success);
        c
    }
}

/// The address the NameServer gives for `topic`'s master, as a client without credentials
/// sees it (route reads stay open with ACL on).
fn route_master(ns: &str, topic: &str) -> Option<String> {
    let mut c = Conn::open(ns);
    match c.call(Command::GetRoute {
        topic: topic.into(),
    }) {
        Header {
            command: Command::Route(r),
            ..
        } => r.brokers.iter().find_map(|b| {
            b.addrs
                .iter()
                .find(|(id, _)| *id == 0)
                .map(|(_, a)| a.clone())
        }),
        _ => None,
    }
}

struct Plane {
    _dir: tempfile::TempDir,
    ns: Proc,
    broker: Proc,
}

/// A NameServer with ACL on and a broker with the admin account's credentials, serving
/// topic `Orders`; returns once the route is there.
fn start_plane() -> Plane {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let acl_file = dir.path().join("plain_acl.yml");
    std::fs::write(&acl_file, ACL).unwrap();
    let ns = start_namesrv_with(
        &logs,
        &["--acl-enable", "--acl-file", acl_file.to_str().unwrap()],
    );
    let data = dir.path().join("data");
    integration::write_topic_table(&data, [("Orders".to_owned(), 2)]);
    let mut opts = BrokerOpts::new(&ns.addr, &data);
    opts.config_toml =
        Some("acl_access_key = \"corvus-broker\"\nacl_secret_key = \"broker-secret-1\"\n".into());
    let broker = start_broker(&opts, &logs);
    let routed = wait_for(Duration::from_secs(20), || route_master(&ns.addr, "Orders"));
    assert_eq!(
        routed.as_deref(),
        Some(broker.addr.as_str()),
        "the credentialed broker registers:\n{}",
        broker.stderr()
    );
    Plane {
        _dir: dir,
        ns,
        broker,
    }
}

fn broker_key() -> BrokerKey {
    BrokerKey {
        cluster: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        broker_id: 0,
    }
}

#[test]
fn an_unregister_from_anyone_but_the_broker_is_refused_and_the_broker_stays_routed() {
    let p = start_plane();
    let ns = &p.ns.addr;
    // No login at all.
    let h = Header::request(1, Command::UnregisterBroker(broker_key()));
    let answer = raw_call(ns, &h, &[]).header;
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    assert!(answer.remark.contains("no access key"), "{}", answer.remark);
    // A known account that is no admin.
    let mut reader = Conn::logged_in(ns, "reader-acct", "reader-secret-1");
    let answer = reader.call(Command::UnregisterBroker(broker_key()));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    assert!(answer.remark.contains("not an admin"), "{}", answer.remark);
    // A login with a guessed secret logs in as nobody.
    let mut guesser = Conn::open(ns);
    assert_eq!(
        guesser.login("corvus-broker", "guess"),
        ResponseCode::NoPermission
    );
    let answer = guesser.call(Command::UnregisterBroker(broker_key()));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    // RocketMQ's UNREGISTER_BROKER, unsigned and signed by the reader.
    let mut cmd = RemotingCommand::request(request::UNREGISTER_BROKER, 5);
    cmd.ext_fields
        .insert("brokerName".into(), "broker-a".into());
    let answer = remoting_call(ns, &cmd);
    assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
    let answer = remoting_call(ns, &signed(cmd, "reader-acct", "reader-secret-1"));
    assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
    // The broker is still routed.
    assert_eq!(
        route_master(ns, "Orders").as_deref(),
        Some(p.broker.addr.as_str())
    );
    assert!(
        p.ns.stderr()
            .contains("refused a broker's registration request"),
        "the NameServer logs the attempt:\n{}",
        p.ns.stderr()
    );
}

#[test]
fn a_fake_registration_cannot_re_point_a_route() {
    let p = start_plane();
    let ns = &p.ns.addr;
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = attacker.local_addr().unwrap().to_string();
    let fake = RegisterBroker {
        key: broker_key(),
        addr: fake_addr.clone(),
        core_addrs: vec![fake_addr.clone()],
        shard_count: 1,
        topics: vec![TopicConfig {
            name: "Orders".into(),
            read_queues: 2,
            write_queues: 2,
            perm: protocol::perm::READ_WRITE,
        }],
        master_epoch: u32::MAX,
    };
    let mut anon = Conn::open(ns);
    let answer = anon.call(Command::RegisterBroker(fake.clone()));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    let mut reader = Conn::logged_in(ns, "reader-acct", "reader-secret-1");
    let answer = reader.call(Command::RegisterBroker(fake));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    assert_eq!(
        route_master(ns, "Orders").as_deref(),
        Some(p.broker.addr.as_str())
    );
    // A producer that follows the route reaches the real broker: what it stored is there.
    let master = route_master(ns, "Orders").unwrap();
    let body = integration::one_record("Orders", b"to the real broker");
    let h = Header::request(
        1,
        Command::Send(protocol::SendRequest {
            producer_group: "p".into(),
            topic: "Orders".into(),
            queue_id: 0,
            count: 1,
        }),
    );
    let sent = raw_call(&master, &h, &body).header;
    assert_eq!(
        sent.response_code(),
        ResponseCode::Success,
        "{}",
        sent.remark
    );
    attacker.set_nonblocking(true).unwrap();
    assert!(
        attacker.accept().is_err(),
        "nobody was sent to the attacker's listener"
    );
}

#[test]
fn route_reads_stay_open_and_rocketmq_writes_need_an_admin_signature() {
    let p = start_plane();
    let ns = &p.ns.addr;
    // Native: a client without credentials finds the broker (route_master logs in as
    // nobody).
    let mut anon = Conn::open(ns);
    let answer = anon.call(Command::GetRoute {
        topic: "Orders".into(),
    });
    assert_eq!(
        answer.response_code(),
        ResponseCode::Success,
        "{}",
        answer.remark
    );
    // RocketMQ: an unsigned route read is served too.
    let mut read = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 9);
    read.ext_fields.insert("topic".into(), "Orders".into());
    let ok = remoting_call(ns, &read);
    assert_eq!(ok.code, response::SUCCESS, "{ok:?}");
    // A topic delete: unsigned, signed by the admin's key with a wrong secret, and signed by
    // a reader are all refused, saying why; the route is still there.
    let mut delete = RemotingCommand::request(request::DELETE_TOPIC_IN_NAMESRV, 10);
    delete.ext_fields.insert("topic".into(), "Orders".into());
    assert_eq!(remoting_call(ns, &delete).code, response::NO_PERMISSION);
    let wrong = remoting_call(
        ns,
        &signed(delete.clone(), "corvus-broker", "not-the-secret"),
    );
    assert_eq!(wrong.code, response::NO_PERMISSION, "{wrong:?}");
    assert!(
        wrong.remark.unwrap_or_default().contains("signature"),
        "the refusal says why"
    );
    let reader = remoting_call(ns, &signed(delete, "reader-acct", "reader-secret-1"));
    assert_eq!(reader.code, response::NO_PERMISSION, "{reader:?}");
    assert_eq!(
        route_master(ns, "Orders").as_deref(),
        Some(p.broker.addr.as_str())
    );
}

#[test]
fn a_broker_with_the_wrong_secret_or_none_is_not_registered_and_says_why() {
    let p = start_plane();
    let logs = p._dir.path().join("logs");
    let mut opts = BrokerOpts::new(&p.ns.addr, &p._dir.path().join("data-b"));
    opts.name = "broker-b".into();
    opts.config_toml =
        Some("acl_access_key = \"corvus-broker\"\nacl_secret_key = \"guessed\"\n".into());
    let b = start_broker(&opts, &logs);
    // And one without credentials at all.
    let mut opts = BrokerOpts::new(&p.ns.addr, &p._dir.path().join("data-c"));
    opts.name = "broker-c".into();
    let c = start_broker(&opts, &logs);
    let said = wait_for(Duration::from_secs(20), || {
        (b.stderr().contains("refused this broker's login")
            && c.stderr().contains("cannot register with NameServer")
            && c.stderr().contains("acl_access_key"))
        .then_some(())
    });
    assert!(said.is_some(), "{}\n{}", b.stderr(), c.stderr());
    let mut reader = Conn::logged_in(&p.ns.addr, "reader-acct", "reader-secret-1");
    let Command::ClusterInfo(info) = reader.call(Command::GetClusterInfo).command else {
        panic!("no cluster info")
    };
    let names: Vec<&str> = info
        .brokers
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    assert_eq!(names, ["broker-a"]);
}

/// `cmd` signed as RocketMQ's AclClientRPCHook signs it.
fn signed(mut cmd: RemotingCommand, access_key: &str, secret_key: &str) -> RemotingCommand {
    integration::sign_remoting_command(&mut cmd, &[], (access_key, secret_key));
    cmd
}

/// One remoting request and its answer on a connection of its own.
fn remoting_call(addr: &str, cmd: &RemotingCommand) -> RemotingCommand {
    use std::io::{Read, Write};
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(&remoting::encode(cmd, &[]).unwrap())
        .unwrap();
    let mut decoder = remoting::RemotingDecoder::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(remoting::Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            return f.command;
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "closed without an answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---- ACL 2.0 at the NameServer ----

/// Users and ACLs in the JSON form a broker keeps in `config/auth.json`: a super user the
/// broker registers as, a normal user with data permissions only, and an operator allowed
/// Update on the cluster `DefaultCluster`.
const AUTH: &str = r#"{
  "users": [
    {"username": "root", "password": "root-pw-1", "userType": "Super", "userStatus": "enable"},
    {"username": "app", "password": "app-pw-1", "userType": "Normal", "userStatus": "enable"},
    {"username": "ops", "password": "ops-pw-1", "userType": "Normal", "userStatus": "enable"}
  ],
  "acls": [
    {"subject": "User:app", "policies": [{"policyType": "CUSTOM", "entries": [
      {"resource": "Topic:*", "actions": ["Pub", "Sub"], "sourceIps": [], "decision": "Allow"}]}]},
    {"subject": "User:ops", "policies": [{"policyType": "CUSTOM", "entries": [
      {"resource": "Cluster:DefaultCluster", "actions": ["Update"], "sourceIps": [], "decision": "Allow"}]}]}
  ]
}"#;

/// A NameServer checking ACL 2.0 (authentication and authorization) and a broker that
/// registers as the super user `root`, serving `Orders`; returns once the route is there.
fn start_plane_v2() -> Plane {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let auth_file = dir.path().join("auth.json");
    std::fs::write(&auth_file, AUTH).unwrap();
    let ns = start_namesrv_with(
        &logs,
        &[
            "--auth-file",
            auth_file.to_str().unwrap(),
            "--authentication-enable",
            "--authorization-enable",
        ],
    );
    let data = dir.path().join("data");
    integration::write_topic_table(&data, [("Orders".to_owned(), 2)]);
    let mut opts = BrokerOpts::new(&ns.addr, &data);
    opts.config_toml = Some("acl_access_key = \"root\"\nacl_secret_key = \"root-pw-1\"\n".into());
    let broker = start_broker(&opts, &logs);
    let routed = wait_for(Duration::from_secs(20), || route_master(&ns.addr, "Orders"));
    assert_eq!(
        routed.as_deref(),
        Some(broker.addr.as_str()),
        "the broker signed as a super user registers:\n{}\n{}",
        broker.stderr(),
        ns.stderr()
    );
    Plane {
        _dir: dir,
        ns,
        broker,
    }
}

#[test]
fn acl2_only_a_user_allowed_to_update_the_cluster_moves_its_routes() {
    let p = start_plane_v2();
    let ns = &p.ns.addr;
    let still_routed = |when: &str| {
        assert_eq!(
            route_master(ns, "Orders").as_deref(),
            Some(p.broker.addr.as_str()),
            "the broker is still routed after {when}"
        );
    };
    // Native: no login, a wrong password, and a normal user without Cluster:Update.
    let h = Header::request(1, Command::UnregisterBroker(broker_key()));
    let answer = raw_call(ns, &h, &[]).header;
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    assert!(answer.remark.contains("must log in"), "{}", answer.remark);
    let mut guesser = Conn::open(ns);
    assert_eq!(guesser.login("root", "guess"), ResponseCode::NoPermission);
    let answer = guesser.call(Command::UnregisterBroker(broker_key()));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    let mut app = Conn::logged_in(ns, "app", "app-pw-1");
    let answer = app.call(Command::UnregisterBroker(broker_key()));
    assert_eq!(answer.response_code(), ResponseCode::NoPermission);
    assert!(
        answer
            .remark
            .contains("app may not Update Cluster:DefaultCluster"),
        "{}",
        answer.remark
    );
    still_routed("native unregistrations");

    // RocketMQ's UNREGISTER_BROKER and REGISTER_BROKER: unsigned, a wrong password, and
    // signed by the normal user.
    let mut unregister = RemotingCommand::request(request::UNREGISTER_BROKER, 5);
    for (k, v) in [
        ("brokerName", "broker-a"),
        ("clusterName", "DefaultCluster"),
        ("brokerId", "0"),
        ("brokerAddr", p.broker.addr.as_str()),
    ] {
        unregister.ext_fields.insert(k.into(), v.into());
    }
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = attacker.local_addr().unwrap().to_string();
    let mut register = RemotingCommand::request(request::REGISTER_BROKER, 6);
    for (k, v) in [
        ("brokerName", "broker-a"),
        ("clusterName", "DefaultCluster"),
        ("brokerId", "0"),
        ("brokerAddr", fake_addr.as_str()),
        ("haServerAddr", fake_addr.as_str()),
    ] {
        register.ext_fields.insert(k.into(), v.into());
    }
    for cmd in [&unregister, &register] {
        let answer = remoting_call(ns, cmd);
        assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
        assert!(
            answer
                .remark
                .clone()
                .unwrap_or_default()
                .contains("AccessKey"),
            "{answer:?}"
        );
        let answer = remoting_call(ns, &signed(cmd.clone(), "root", "not-the-password"));
        assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
        assert!(
            answer
                .remark
                .clone()
                .unwrap_or_default()
                .contains("check signature failed"),
            "{answer:?}"
        );
        let answer = remoting_call(ns, &signed(cmd.clone(), "app", "app-pw-1"));
        assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
        assert!(
            answer
                .remark
                .clone()
                .unwrap_or_default()
                .contains("app may not Update"),
            "{answer:?}"
        );
    }
    still_routed("RocketMQ registrations and unregistrations");

    // The operator's policy covers DefaultCluster and nothing else: a topic delete naming
    // that cluster is taken, one naming no cluster (every cluster) is not.
    let mut delete = RemotingCommand::request(request::DELETE_TOPIC_IN_NAMESRV, 7);
    delete.ext_fields.insert("topic".into(), "Scratch".into());
    let answer = remoting_call(ns, &signed(delete.clone(), "ops", "ops-pw-1"));
    assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
    assert!(
        answer
            .remark
            .clone()
            .unwrap_or_default()
            .contains("ops may not Update Cluster:*"),
        "{answer:?}"
    );
    delete
        .ext_fields
        .insert("clusterName".into(), "DefaultCluster".into());
    let answer = remoting_call(ns, &signed(delete, "ops", "ops-pw-1"));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    still_routed("the operator's delete of another topic");

    // Every refusal is on the audit trail, with the user.
    let log = p.ns.stderr();
    assert!(
        log.contains("audit") && log.contains("ACL 2.0 refused a request"),
        "{log}"
    );
    assert!(log.contains(r#"user="app""#), "{log}");
    attacker.set_nonblocking(true).unwrap();
    assert!(
        attacker.accept().is_err(),
        "nobody was sent to the fake address"
    );
}

#[test]
fn acl2_route_reads_stay_open_and_a_normal_users_broker_is_not_registered() {
    let p = start_plane_v2();
    let ns = &p.ns.addr;
    // Reads need no user, on either protocol.
    let mut anon = Conn::open(ns);
    let answer = anon.call(Command::GetRoute {
        topic: "Orders".into(),
    });
    assert_eq!(
        answer.response_code(),
        ResponseCode::Success,
        "{}",
        answer.remark
    );
    let Command::ClusterInfo(_) = anon.call(Command::GetClusterInfo).command else {
        panic!("no cluster info without a login")
    };
    let mut read = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 9);
    read.ext_fields.insert("topic".into(), "Orders".into());
    let ok = remoting_call(ns, &read);
    assert_eq!(ok.code, response::SUCCESS, "{ok:?}");
    let clusters = remoting_call(
        ns,
        &RemotingCommand::request(request::GET_BROKER_CLUSTER_INFO, 10),
    );
    assert_eq!(clusters.code, response::SUCCESS, "{clusters:?}");

    // A broker whose keys are a normal user's logs in but is not registered, and says why;
    // one with a wrong password is refused at its login.
    let logs = p._dir.path().join("logs");
    let mut opts = BrokerOpts::new(ns, &p._dir.path().join("data-b"));
    opts.name = "broker-b".into();
    opts.config_toml = Some("acl_access_key = \"app\"\nacl_secret_key = \"app-pw-1\"\n".into());
    let b = start_broker(&opts, &logs);
    let mut opts = BrokerOpts::new(ns, &p._dir.path().join("data-c"));
    opts.name = "broker-c".into();
    opts.config_toml = Some("acl_access_key = \"root\"\nacl_secret_key = \"guessed\"\n".into());
    let c = start_broker(&opts, &logs);
    let said = wait_for(Duration::from_secs(20), || {
        (b.stderr().contains("cannot register with NameServer")
            && b.stderr().contains("Cluster:Update")
            && c.stderr().contains("refused this broker's login"))
        .then_some(())
    });
    assert!(said.is_some(), "{}\n{}", b.stderr(), c.stderr());
    let Command::ClusterInfo(info) = anon.call(Command::GetClusterInfo).command else {
        panic!("no cluster info")
    };
    let names: Vec<&str> = info
        .brokers
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    assert_eq!(names, ["broker-a"]);
}

// ---- replication ----

const HA_CREDENTIALS: &str = "acl_access_key = \"replicator\"\nacl_secret_key = \"ha-secret\"\n";

/// A slave of `broker-a` (id `id`) replicating from `ha` with `toml`.
fn extra_slave(dir: &Path, ns: &str, ha: &str, id: u64, toml: &str) -> Proc {
    let mut so = BrokerOpts::new(ns, &dir.join(format!("slave-{id}")));
    so.name = "broker-a".into();
    so.config_toml = Some(format!(
        "broker_role = \"SLAVE\"\nbroker_id = {id}\nha_master_address = \"{ha}\"\n{toml}"
    ));
    start_broker(&so, &dir.join("logs"))
}

#[test]
fn a_slave_with_the_right_credentials_replicates_and_others_are_refused_with_the_reason() {
    let ms = integration::MasterSlave::start(HA_CREDENTIALS);
    ms.wait_in_sync(Duration::from_secs(30));
    let ha = ms.master.preamble_addr("broker replication on ").unwrap();
    let wrong = extra_slave(
        ms.dir.path(),
        &ms.ns.addr,
        &ha,
        2,
        "acl_access_key = \"replicator\"\nacl_secret_key = \"guessed\"\n",
    );
    let none = extra_slave(ms.dir.path(), &ms.ns.addr, &ha, 3, "");
    // Each side says why: the master names both refusals, each slave its own. (One wait for
    // all: each line is written when its side hears the other's answer.)
    let said = |log: &str, what: &str| log.contains(what);
    let refused = wait_for(Duration::from_secs(20), || {
        let log = ms.master.stderr();
        (said(&log, "the slave refused this master")
            && said(&log, "sent no credentials")
            && said(&wrong.stderr(), "the master's proof is wrong")
            && said(&none.stderr(), "sent no credentials"))
        .then_some(())
    });
    assert!(
        refused.is_some(),
        "master:\n{}\nslave with the wrong secret:\n{}\nslave without credentials:\n{}",
        ms.master.stderr(),
        wrong.stderr(),
        none.stderr()
    );
    // Only the right slave is attached to the master's shards.
    let shards = integration::replication_status(&ms.ns.addr, &ms.master.addr).unwrap();
    for s in &shards {
        let ids: Vec<u64> = s["slaves"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["broker_id"].as_u64())
            .collect();
        assert_eq!(ids, [1], "{s}");
    }
}
