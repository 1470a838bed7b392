//! ACL 2.0 (RocketMQ 5.3's users and policies) as its users meet it, with RocketMQ's own
//! tools and clients:
//!
//! * a broker started with ACL 2.0 on (`authenticationEnabled`, `authorizationEnabled`)
//!   and an initial super user (`initAuthenticationUser`) refuses unsigned requests;
//! * RocketMQ 5.3.3's mqadmin, signed as that super user, creates, shows, lists, updates and
//!   deletes users and ACLs (`createUser`, `getUser`, `listUser`, `updateUser`,
//!   `createAcl`, `getAcl`, `listAcl`, `deleteAcl`, `deleteUser`) on a broker of two cores
//!   (each a broker to the tool, which sends every change to both); `updateAcl`, `copyUser`
//!   and `copyAcl` between two such brokers, each with its own users;
//! * a 5.3.3 remoting client signed as a normal user is allowed exactly what its policy
//!   says: a table of operations, each tried; a wrong password is refused;
//! * RocketMQ 5's gRPC SDK for Java signed as a user produces where its policy allows (the
//!   `produce` scenario's transcript is Apache's) and fails for a user without a policy;
//! * a replayed signed request and one changed after signing are refused;
//! * the requests rocketmq-dashboard's ACL page sends, each to every core: every core lists
//!   the same users and ACLs, and its search finds an ACL once, whole;
//! * a normal user may not create users, and the users and ACLs survive a restart;
//! * each change and each denial is logged (tracing target `audit`).
//!
//! The Java parts need the programs built (`.ci/run` builds them); without them the test
//! says so and skips, or fails where `CORVUS_REQUIRE_JAVA` is set.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use client::{Credentials, Message, Producer};
use integration::{run_client_program, Cluster};
use protocol::ResponseCode;
use remoting::codes::{request, response};
use remoting::RemotingCommand;

const ROOT: (&str, &str) = ("root", "root-secret-1");
const APP: (&str, &str) = ("app", "app-secret-1");
const READER: (&str, &str) = ("reader", "reader-secret-1");

/// A broker of two cores with ACL 2.0 on and its first super user, written as RocketMQ's
/// `initAuthenticationUser` example writes it, without a user type. (RocketMQ's names of
/// these keys in a `broker.conf` are checked by broker-base's config tests.)
fn start() -> Cluster {
    Cluster::start_with(2, "small", |o| {
        o.config_toml = Some(format!(
            "acl2_authentication_enable = true\nacl2_authorization_enable = true\nacl2_init_user = '{{\"username\":\"{}\",\"password\":\"{}\"}}'\n",
            ROOT.0, ROOT.1
        ));
    })
}

fn unsigned(addr: &str, code: i32, fields: &[(&str, &str)]) -> remoting::Frame {
    let mut cmd = RemotingCommand::request(code, 7);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    integration::remoting_call(addr, &cmd, b"")
}

#[test]
fn mqadmin_manages_users_and_acls_and_a_java_client_gets_what_its_policy_says() {
    let mut c = start();
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    // Topics made by corvus's mqadmin logged in (native protocol) as the super user.
    for t in ["Orders", "Audit"] {
        integration::create_topic_as(&ns, ROOT, t, 2);
    }

    // Unsigned requests are refused, the auth admin ones included.
    let f = unsigned(&broker, request::AUTH_LIST_USER, &[]);
    assert_eq!(
        f.command.code,
        response::NO_PERMISSION,
        "{:?}",
        f.command.remark
    );
    let f = unsigned(&broker, request::GET_BROKER_RUNTIME_INFO, &[]);
    assert_eq!(
        f.command.code,
        response::NO_PERMISSION,
        "{:?}",
        f.command.remark
    );

    // A signed request is taken; the same request, replayed, is refused (a request that
    // carries its time, as the workspace's signers send, is taken once), and so is one
    // whose body was changed after signing.
    let mut cmd = RemotingCommand::request(request::AUTH_LIST_USER, 9);
    for (k, v) in acl::fresh::stamp() {
        cmd.ext_fields.insert(k.into(), v);
    }
    integration::sign_remoting_command(&mut cmd, b"", ROOT);
    let f = integration::remoting_call(&broker, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let users: serde_json::Value = remoting::body::from_json(&f.body).unwrap();
    assert_eq!(users[0]["username"], ROOT.0, "{users}");
    let f = integration::remoting_call(&broker, &cmd, b"");
    assert_eq!(
        f.command.code,
        response::NO_PERMISSION,
        "a replay: {:?}",
        f.command.remark
    );
    let f = integration::remoting_call(&broker, &cmd, b"changed");
    assert_eq!(
        f.command.code,
        response::NO_PERMISSION,
        "a changed body: {:?}",
        f.command.remark
    );

    let Some(tools) = integration::java_program_or_skip("tests/rocketmq-tools5", None) else {
        return;
    };
    let home = c.dir.path().to_owned();
    let admin = |who: (&str, &str), args: &[&str]| {
        integration::rocketmq_mqadmin_as(&tools, &ns, &home, who, args)
    };
    let ok = |args: &[&str]| {
        let (ok, text) = admin(ROOT, args);
        assert!(ok, "{args:?}: {text}");
        text
    };

    ok(&[
        "createUser",
        "-c",
        "DefaultCluster",
        "-u",
        APP.0,
        "-p",
        APP.1,
        "-t",
        "Normal",
    ]);
    ok(&[
        "createUser",
        "-c",
        "DefaultCluster",
        "-u",
        "temp",
        "-p",
        "temp-secret",
        "-t",
        "Normal",
    ]);
    let text = ok(&["getUser", "-c", "DefaultCluster", "-u", APP.0]);
    assert!(text.contains(APP.0) && text.contains("Normal"), "{text}");
    let text = ok(&["listUser", "-c", "DefaultCluster"]);
    for name in [ROOT.0, APP.0, "temp"] {
        assert!(text.contains(name), "listUser shows {name}: {text}");
    }
    // The policy: publish to Orders, read it as group AppGroup; Audit denied outright.
    ok(&[
        "createAcl",
        "-c",
        "DefaultCluster",
        "-s",
        "User:app",
        "-r",
        "Topic:Orders,Group:AppGroup",
        "-a",
        "Pub,Sub",
        "-d",
        "Allow",
    ]);
    ok(&[
        "createAcl",
        "-c",
        "DefaultCluster",
        "-s",
        "User:app",
        "-r",
        "Topic:Audit",
        "-a",
        "All",
        "-d",
        "Deny",
    ]);
    ok(&[
        "createAcl",
        "-c",
        "DefaultCluster",
        "-s",
        "User:temp",
        "-r",
        "Topic:*",
        "-a",
        "Sub",
        "-d",
        "Allow",
    ]);
    let text = ok(&["getAcl", "-c", "DefaultCluster", "-s", "User:app"]);
    for want in ["Topic:Orders", "Group:AppGroup", "Topic:Audit", "Deny"] {
        assert!(text.contains(want), "getAcl shows {want}: {text}");
    }
    let text = ok(&["listAcl", "-c", "DefaultCluster"]);
    assert!(
        text.contains("User:app") && text.contains("User:temp"),
        "{text}"
    );
    let text = ok(&["listAcl", "-c", "DefaultCluster", "-s", "temp"]);
    assert!(!text.contains("User:app"), "the subject filter: {text}");
    ok(&[
        "updateUser",
        "-c",
        "DefaultCluster",
        "-u",
        "temp",
        "-p",
        "temp-secret-2",
    ]);
    ok(&[
        "deleteAcl",
        "-c",
        "DefaultCluster",
        "-s",
        "User:temp",
        "-r",
        "Topic:*",
    ]);
    let text = ok(&["listAcl", "-c", "DefaultCluster"]);
    assert!(
        !text.contains("User:temp"),
        "an ACL left empty goes: {text}"
    );
    ok(&["deleteUser", "-c", "DefaultCluster", "-u", "temp"]);
    let text = ok(&["listUser", "-c", "DefaultCluster"]);
    assert!(!text.contains("temp"), "{text}");

    // A normal user may not manage users.
    let (done, text) = admin(
        APP,
        &[
            "createUser",
            "-c",
            "DefaultCluster",
            "-u",
            "x",
            "-p",
            "x-secret",
        ],
    );
    assert!(
        !done && text.contains("16"),
        "a normal user's createUser: {text}"
    );

    // The Java client as `app`: exactly what the policy says.
    if let Some(cp) =
        integration::java_program_or_skip("tests/rocketmq-java533", Some("corvus/Acl2.class"))
    {
        let mut cmd = Command::new("java");
        cmd.arg("-cp")
            .arg(&cp)
            .arg("corvus.Acl2")
            .args([
                &ns,
                "Orders",
                "Audit",
                "AppGroup",
                "OtherGroup",
                APP.0,
                APP.1,
                "5",
            ])
            .env("ROCKETMQ_HOME", std::env::temp_dir());
        let (status, lines) = run_client_program("Acl2", &mut cmd, Duration::from_secs(120));
        assert!(status.success(), "Acl2 failed ({status}): {lines:?}");
        let outcome = |name: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} line in {lines:?}"))
                .to_owned()
        };
        let table = [
            ("SEND_ALLOWED", "OK"),
            ("SEND_DENIED", "REFUSED 16"),
            ("CREATE_TOPIC", "REFUSED 16"),
            ("SEND_WRONG_PASSWORD", "REFUSED 16"),
            ("PULL_ALLOWED", "OK"),
            ("PULL_DENIED_GROUP", "REFUSED 16"),
        ];
        for (op, want) in table {
            let got = outcome(op);
            assert!(got.starts_with(want), "{op}: want {want}, got {got}");
        }
    }

    // corvus's own client (native protocol) logged in as `app`: the same policy.
    let native = |who: Option<(&str, &str)>| {
        let mut b = Producer::builder()
            .namesrv(&ns)
            .group("acl2-native")
            .retries(0)
            .send_timeout_ms(5000);
        if let Some((user, password)) = who {
            b = b.credentials(Credentials::new(user, password));
        }
        b.build().unwrap()
    };
    let app = native(Some(APP));
    integration::wait_for(Duration::from_secs(20), || {
        app.send(Message::new("Orders", "native")).ok()
    })
    .expect("app sends to Orders over the native protocol");
    let refusal = |r: client::Result<client::SendResult>| {
        let e = r.expect_err("the send must be refused");
        assert_eq!(e.code(), Some(ResponseCode::NoPermission), "{e}");
        e.to_string()
    };
    let e = refusal(app.send(Message::new("Audit", "native")));
    assert!(e.contains("app may not Pub Topic:Audit"), "{e}");
    let e = refusal(native(None).send(Message::new("Orders", "anonymous")));
    assert!(e.contains("must log in"), "{e}");
    let e = refusal(native(Some((APP.0, "wrong"))).send(Message::new("Orders", "impostor")));
    assert!(e.contains("login failed for user app"), "{e}");
    drop(app);

    // A disabled user is refused at once (a new login), without a restart.
    ok(&[
        "updateUser",
        "-c",
        "DefaultCluster",
        "-u",
        APP.0,
        "-s",
        "disable",
    ]);
    let e = refusal(native(Some(APP)).send(Message::new("Orders", "disabled")));
    assert!(e.contains("user app is disabled"), "{e}");

    // Every change and every denial is on the audit trail.
    let log = c.broker.stderr();
    for want in [
        "ACL 2.0: create user app",
        "ACL 2.0: set the acl of User:app",
        "ACL 2.0: delete user temp",
        "ACL 2.0 refused a request",
    ] {
        assert!(log.contains(want), "the broker's log has {want:?}");
    }

    // The users and ACLs are kept across a restart (asked until the broker is registered
    // again).
    c.restart_broker();
    let text = integration::wait_for(Duration::from_secs(30), || {
        let (done, text) = admin(ROOT, &["getAcl", "-c", "DefaultCluster", "-s", "User:app"]);
        done.then_some(text)
    })
    .expect("getAcl after the restart");
    assert!(text.contains("Topic:Orders"), "{text}");
    ok(&["deleteUser", "-c", "DefaultCluster", "-u", APP.0]);
    let (found, text) = admin(ROOT, &["getUser", "-c", "DefaultCluster", "-u", APP.0]);
    assert!(!found || !text.contains("app-secret-1"), "{text}");
}

/// `cmd` signed as `(user, password)`.
fn sign(mut cmd: RemotingCommand, body: &[u8], (user, password): (&str, &str)) -> RemotingCommand {
    cmd.ext_fields.insert("AccessKey".into(), user.into());
    let sig = acl::sign::sign_remoting(cmd.ext_fields.iter(), body, password);
    cmd.ext_fields.insert("Signature".into(), sig);
    cmd
}

fn signed_call(
    addr: &str,
    code: i32,
    fields: &[(&str, &str)],
    body: &[u8],
    who: (&str, &str),
) -> remoting::Frame {
    let mut cmd = RemotingCommand::request(code, 3);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    let f = integration::remoting_call(addr, &sign(cmd, body, who), body);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    f
}

/// RocketMQ 5's gRPC SDK for Java signed as a user (`StaticSessionCredentialsProvider`):
/// the `produce` scenario gives Apache's transcript for a user whose policy allows Pub on
/// its topic, and fails for a user without a policy and for one who may only read the topic
/// (its route is served; its producer's settings are refused on Telemetry).
#[test]
fn the_v5_sdk_signed_as_a_user_produces_only_where_its_policy_allows() {
    let Some(program) =
        integration::java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let c = start();
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    // The topic as run-apache.sh makes it, by the super user.
    signed_call(
        &broker,
        request::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", "V5Normal"),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("order", "false"),
            ("attributes", "+message.type=NORMAL"),
        ],
        b"",
        ROOT,
    );
    integration::wait_for_route(&ns, "V5Normal");
    for (name, password) in [APP, ("idle", "idle-secret-1"), READER] {
        let user =
            format!(r#"{{"username":"{name}","password":"{password}","userType":"Normal"}}"#);
        signed_call(
            &broker,
            request::AUTH_CREATE_USER,
            &[("username", name)],
            user.as_bytes(),
            ROOT,
        );
    }
    let acl = br#"{"subject":"User:app","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:V5Normal","actions":["Pub"],"decision":"Allow"}]}]}"#;
    signed_call(
        &broker,
        request::AUTH_CREATE_ACL,
        &[("subject", "User:app")],
        acl,
        ROOT,
    );

    // `reader` may read the topic: its route is served (Pub or Sub), its producer's
    // Telemetry settings (Pub on the topic) are not.
    let acl = br#"{"subject":"User:reader","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:V5Normal","actions":["Sub"],"decision":"Allow"}]}]}"#;
    signed_call(
        &broker,
        request::AUTH_CREATE_ACL,
        &[("subject", "User:reader")],
        acl,
        ROOT,
    );

    let endpoint = integration::core_addrs(&ns).into_iter().next().unwrap();
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let app = format!("{}:{}", APP.0, APP.1);
    if let Some(differs) = integration::v5::java_scenario(
        &program,
        &endpoint,
        &home,
        "produce",
        &["--credentials", &app],
    ) {
        panic!("signed as app:\n{differs}");
    }
    let refused = integration::v5::java_scenario(
        &program,
        &endpoint,
        &home,
        "produce",
        &["--credentials", "idle:idle-secret-1"],
    );
    assert!(
        refused.is_some(),
        "a user without a policy produced as app did"
    );
    assert!(
        c.broker.stderr().contains("idle may not"),
        "the broker's audit names the refusal"
    );
    let reader = format!("{}:{}", READER.0, READER.1);
    let refused = integration::v5::java_scenario(
        &program,
        &endpoint,
        &home,
        "produce",
        &["--credentials", &reader],
    );
    assert!(
        refused.is_some(),
        "a user who may only read the topic produced as app did"
    );
    let log = c.broker.stderr();
    assert!(
        log.lines().any(|l| l.contains("reader may not Pub Topic:V5Normal")
            && l.contains("Telemetry")),
        "the producer's settings are refused on Telemetry, as RocketMQ's Proxy refuses them:\n{log}"
    );
}

/// RocketMQ 5.3.3's mqadmin `updateAcl`, `copyUser` and `copyAcl` between two brokers of
/// two cores, each with its own users: an ACL updated on one broker is in force there at
/// once; a user copied to the other signs there with the same password, and its ACL copied
/// there decides there as at home.
#[test]
fn mqadmin_updates_acls_and_copies_users_and_acls_between_brokers() {
    let Some(tools) = integration::java_program_or_skip("tests/rocketmq-tools5", None) else {
        return;
    };
    let c = start();
    let ns = c.namesrv.addr.clone();
    let from = c.broker.addr.clone();
    let mut opts = c.opts.clone();
    opts.name = "broker-b".into();
    opts.data_dir = c.dir.path().join("data-b");
    let b = integration::start_broker(&opts, &c.logs());
    let to = b.addr.clone();
    let home = c.dir.path().to_owned();
    let ok = |args: &[&str]| {
        let (ok, text) = integration::rocketmq_mqadmin_as(&tools, &ns, &home, ROOT, args);
        assert!(ok, "{args:?}: {text}");
        text
    };
    let info = |addr: &str, who: (&str, &str)| {
        let cmd = sign(
            RemotingCommand::request(request::GET_BROKER_RUNTIME_INFO, 5),
            b"",
            who,
        );
        integration::remoting_call(addr, &cmd, b"").command
    };
    let acl_of = |addr: &str| -> serde_json::Value {
        let f = signed_call(
            addr,
            request::AUTH_GET_ACL,
            &[("subject", "User:app")],
            b"",
            ROOT,
        );
        remoting::body::from_json(&f.body).unwrap()
    };

    // `app` on broker-a only, allowed to publish Orders.
    let user = format!(
        r#"{{"username":"{}","password":"{}","userType":"Normal"}}"#,
        APP.0, APP.1
    );
    signed_call(
        &from,
        request::AUTH_CREATE_USER,
        &[("username", APP.0)],
        user.as_bytes(),
        ROOT,
    );
    let acl = br#"{"subject":"User:app","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:Orders","actions":["Pub"],"decision":"Allow"}]}]}"#;
    signed_call(
        &from,
        request::AUTH_CREATE_ACL,
        &[("subject", "User:app")],
        acl,
        ROOT,
    );
    let refused = info(&to, APP);
    assert_eq!(
        refused.code,
        response::NO_PERMISSION,
        "broker-b does not know app yet: {:?}",
        refused.remark
    );

    // updateAcl: the entry for Topic:Orders now allows Sub too, and a new one denies Audit.
    ok(&[
        "updateAcl",
        "-b",
        &from,
        "-s",
        "User:app",
        "-r",
        "Topic:Orders",
        "-a",
        "Pub,Sub",
        "-d",
        "Allow",
    ]);
    ok(&[
        "updateAcl",
        "-b",
        &from,
        "-s",
        "User:app",
        "-r",
        "Topic:Audit",
        "-a",
        "All",
        "-d",
        "Deny",
    ]);
    let updated = acl_of(&from).to_string();
    for want in [r#""Topic:Orders""#, "Sub", r#""Topic:Audit""#, "Deny"] {
        assert!(updated.contains(want), "updateAcl set {want}: {updated}");
    }

    // copyUser and copyAcl, from broker-a to broker-b.
    ok(&["copyUser", "-f", &from, "-t", &to, "-u", APP.0]);
    let taken = info(&to, APP);
    assert_eq!(
        taken.code,
        response::SUCCESS,
        "app signs at broker-b with its password: {:?}",
        taken.remark
    );
    ok(&["copyAcl", "-f", &from, "-t", &to, "-s", "User:app"]);
    let copied = acl_of(&to);
    assert_eq!(
        copied.to_string(),
        updated,
        "broker-b holds the same ACL as broker-a"
    );
    // The copy decides at broker-b: app may not create a topic there (no Create on it),
    // as at broker-a.
    for addr in [&from, &to] {
        let mut cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_TOPIC, 6);
        for (k, v) in [
            ("topic", "Audit"),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "1"),
            ("writeQueueNums", "1"),
            ("perm", "6"),
        ] {
            cmd.ext_fields.insert(k.into(), v.into());
        }
        let f = integration::remoting_call(addr, &sign(cmd, b"", APP), b"");
        assert_eq!(
            f.command.code,
            response::NO_PERMISSION,
            "{addr}: {:?}",
            f.command.remark
        );
        assert!(
            f.command.remark.unwrap_or_default().contains("app may not"),
            "{addr}"
        );
    }
    // Both cores of broker-b answer for the copied user: they share one store.
    let clusters = integration::mqadmin_json(&ns, &["cluster-list"]);
    let cores_b: Vec<String> = clusters["clusters"][0]["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["broker_name"] == "broker-b")
        .flat_map(|b| b["core_addrs"].as_array().unwrap().clone())
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(cores_b.len(), 2, "{clusters}");
    for addr in cores_b {
        let f = info(&addr, APP);
        assert_eq!(f.code, response::SUCCESS, "{addr}: {:?}", f.remark);
    }
}

/// What rocketmq-dashboard's ACL page does (its backend, `AclServiceImpl`, sends each
/// create, update and delete to every broker address of the cluster, and keeps only the
/// users and ACLs that every one lists alike; its search asks `listAcl` once by subject and
/// once by resource with the same text and keeps one row per distinct answer): a user and
/// its policy created at one core are listed, the same, by every core; the same creates sent
/// to the other core, updates and deletes at either are taken; the search finds the ACL once,
/// whole.
#[test]
fn every_core_lists_the_users_and_acls_the_dashboard_made_alike() {
    let c = start();
    let cores = integration::core_addrs(&c.namesrv.addr);
    assert_eq!(cores.len(), 2, "{cores:?}");
    let list = |addr: &str, code: i32, fields: &[(&str, &str)]| -> serde_json::Value {
        let f = signed_call(addr, code, fields, b"", ROOT);
        remoting::body::from_json(&f.body).unwrap()
    };
    let users = |addr: &str| list(addr, request::AUTH_LIST_USER, &[("filter", "")]);
    let acls = |addr: &str, subject_filter: &str, resource_filter: &str| {
        list(
            addr,
            request::AUTH_LIST_ACL,
            &[
                ("subjectFilter", subject_filter),
                ("resourceFilter", resource_filter),
            ],
        )
    };
    // The page's "add user", then "add ACL" with two resources: one AclInfo per resource,
    // each to every core, in order.
    let user = br#"{"username":"dashapp","password":"dash-app-secret-1","userType":"Normal","userStatus":"enable"}"#;
    for core in &cores {
        signed_call(
            core,
            request::AUTH_CREATE_USER,
            &[("username", "dashapp")],
            user,
            ROOT,
        );
    }
    for resource in ["Topic:DashTopic", "Group:dashapp-readers"] {
        let acl = format!(
            r#"{{"subject":"User:dashapp","policies":[{{"policyType":"Custom","entries":[{{"resource":"{resource}","actions":["Pub","Sub"],"sourceIps":["127.0.0.1"],"decision":"Allow"}}]}}]}}"#
        );
        for core in &cores {
            signed_call(
                core,
                request::AUTH_CREATE_ACL,
                &[("subject", "User:dashapp")],
                acl.as_bytes(),
                ROOT,
            );
        }
    }

    // Every core lists the same users and ACLs, with the fields the page shows.
    let listed = users(&cores[0]);
    let app = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "dashapp")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(
        app,
        &serde_json::json!({"username": "dashapp", "password": "dash-app-secret-1",
            "userType": "Normal", "userStatus": "enable"})
    );
    let all = acls(&cores[0], "", "");
    let entry = |resource: &str| {
        serde_json::json!({"resource": resource, "actions": ["Pub", "Sub"],
            "sourceIps": ["127.0.0.1"], "decision": "Allow"})
    };
    assert_eq!(
        all,
        serde_json::json!([{"subject": "User:dashapp", "policies": [{"policyType": "Custom",
            "entries": [entry("Topic:DashTopic"), entry("Group:dashapp-readers")]}]}])
    );
    for core in &cores[1..] {
        assert_eq!(users(core), listed, "{core}");
        assert_eq!(acls(core, "", ""), all, "{core}");
    }

    // The search box: the same text as subject filter and as resource filter. An ACL whose
    // subject holds it comes whole both ways (RocketMQ's rule), so the page shows it once;
    // a resource filter alone keeps the entries that hold it.
    for core in &cores {
        assert_eq!(acls(core, "dashapp", ""), all, "{core}");
        assert_eq!(acls(core, "", "dashapp"), all, "{core}: by resource");
        let by_topic = acls(core, "", "Topic:Dash");
        assert_eq!(
            by_topic[0]["policies"][0]["entries"],
            serde_json::json!([entry("Topic:DashTopic")]),
            "{core}"
        );
    }

    // The page's edit of a row at the second core, seen at the first; then its delete of one
    // resource and of the rest, each to every core.
    for core in cores.iter().rev() {
        signed_call(
            core,
            request::AUTH_UPDATE_ACL,
            &[("subject", "User:dashapp")],
            br#"{"subject":"User:dashapp","policies":[{"policyType":"Custom","entries":[{"resource":"Topic:DashTopic","actions":["Pub"],"sourceIps":[],"decision":"Deny"}]}]}"#,
            ROOT,
        );
        signed_call(
            core,
            request::AUTH_UPDATE_USER,
            &[("username", "dashapp")],
            br#"{"username":"dashapp","password":"dash-app-secret-2","userType":"Normal","userStatus":"disable"}"#,
            ROOT,
        );
    }
    let updated = acls(&cores[0], "", "Topic:DashTopic");
    assert_eq!(
        updated[0]["policies"][0]["entries"][0]["decision"], "Deny",
        "{updated}"
    );
    let listed = users(&cores[0]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["username"] == "dashapp"
                && u["userStatus"] == "disable"
                && u["password"] == "dash-app-secret-2"),
        "{listed}"
    );
    for core in &cores {
        signed_call(
            core,
            request::AUTH_DELETE_ACL,
            &[("subject", "User:dashapp"), ("resource", "Topic:DashTopic")],
            b"",
            ROOT,
        );
    }
    for core in &cores {
        let left = acls(core, "", "");
        assert_eq!(
            left[0]["policies"][0]["entries"],
            serde_json::json!([entry("Group:dashapp-readers")]),
            "{core}"
        );
    }
    for core in &cores {
        signed_call(
            core,
            request::AUTH_DELETE_ACL,
            &[("subject", "User:dashapp"), ("resource", "")],
            b"",
            ROOT,
        );
    }
    for core in &cores {
        signed_call(
            core,
            request::AUTH_DELETE_USER,
            &[("username", "dashapp")],
            b"",
            ROOT,
        );
    }
    for core in &cores {
        assert_eq!(acls(core, "", ""), serde_json::json!([]), "{core}");
        // The initial user, whose `initAuthenticationUser` named no type, is a super user.
        assert_eq!(
            users(core),
            serde_json::json!([{"username": ROOT.0, "password": ROOT.1,
                "userType": "Super", "userStatus": "enable"}]),
            "{core}"
        );
    }
}
