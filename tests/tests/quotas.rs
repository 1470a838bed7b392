//! Quotas per account: two tenants on one broker (two cores), one sending far beyond its
//! quota. The flooder's sends past its quota are refused FLOW_CONTROL with a remark naming
//! the rule, its value and when to retry, which the client also gives as a value of its
//! own, and it never gets more than its quota across the cores together; the other
//! tenant's sends all succeed meanwhile, and nobody waits for a timeout. A change of the
//! quotas with corvus's `mqadmin quota` or RocketMQ's `updateBrokerConfig` applies at once.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use client::{ClientError, Credentials, Message, Producer};
use integration::{create_topic_as, mqadmin_as, AclRules, BrokerOpts, Cluster};
use protocol::ResponseCode;

const ADMIN: (&str, &str) = ("admin0001", "admin-secret-1");
const NOISY: (&str, &str) = ("tenant-noisy", "noisy-secret-1");
const CALM: (&str, &str) = ("tenant-calm", "calm-secret-1");

const RULES: &str = r#"
accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: tenant-noisy
    secretKey: noisy-secret-1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: tenant-calm
    secretKey: calm-secret-1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"#;

/// Messages a second the noisy tenant may send, for the whole broker.
const NOISY_PER_SEC: u64 = 5;

fn producer_as(ns: &str, account: (&str, &str), group: &str) -> Producer {
    Producer::builder()
        .namesrv(ns)
        .group(group)
        .retries(0)
        .send_timeout_ms(5000)
        .credentials(Credentials::new(account.0, account.1))
        .build()
        .unwrap()
}

/// A refusal gives the client when to retry as a value of its own, the same time its
/// remark names: within the quota's window, never at once.
fn assert_says_when_to_retry(e: &ClientError) {
    let after = e
        .retry_after()
        .unwrap_or_else(|| panic!("the refusal does not say when to retry: {e}"));
    assert!(
        after >= Duration::from_millis(1) && after <= Duration::from_secs(10),
        "{after:?}: {e}"
    );
    let text = e.to_string();
    assert!(
        text.contains(&format!("retry after {} ms", after.as_millis())),
        "{after:?}: {text}"
    );
}

#[test]
fn a_tenant_over_its_quota_is_refused_by_name_and_the_other_is_not_slowed() {
    let rules = AclRules::write(RULES);
    let toml = format!(
        "{}quotas = \"account:tenant-noisy:send_messages_per_sec={NOISY_PER_SEC}\"\n",
        rules.broker_toml()
    );
    let c = Cluster::start_with(2, "small", |o: &mut BrokerOpts| o.config_toml = Some(toml));
    let ns = c.namesrv.addr.clone();
    create_topic_as(&ns, ADMIN, "Shared", 8);
    let noisy = producer_as(&ns, NOISY, "noisy-producer");
    let calm = producer_as(&ns, CALM, "calm-producer");

    // The noisy tenant sends as fast as it can, the calm one in between: bounded in count
    // and time, until the noisy one has seen plenty of refusals.
    let started = Instant::now();
    let (mut noisy_ok, mut refusals, mut calm_ok) = (0u64, 0u64, 0u64);
    let mut remark = String::new();
    for i in 0..5_000 {
        if refusals >= 50 || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        match noisy.send(Message::new("Shared", format!("noisy-{i}").into_bytes())) {
            Ok(_) => noisy_ok += 1,
            Err(e) => {
                assert_eq!(e.code(), Some(ResponseCode::FlowControl), "{e}");
                assert_says_when_to_retry(&e);
                refusals += 1;
                remark = e.to_string();
            }
        }
        if i % 10 == 0 {
            calm.send(Message::new("Shared", format!("calm-{i}").into_bytes()))
                .unwrap();
            calm_ok += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(refusals >= 50, "only {refusals} refusals in {elapsed:.1} s");
    assert!(
        remark.contains("account:tenant-noisy:send_messages_per_sec = 5 messages/s")
            && remark.contains("retry after"),
        "{remark}"
    );
    // Both cores together let through no more than the quota (a second's burst, plus
    // one exchange's slack).
    let allowed = (NOISY_PER_SEC as f64 * (elapsed + 2.0)).ceil() as u64;
    assert!(
        noisy_ok <= allowed,
        "{noisy_ok} noisy sends went through in {elapsed:.1} s at {NOISY_PER_SEC}/s"
    );
    assert!(calm_ok >= 5, "{calm_ok}");
    for i in 0..50 {
        calm.send(Message::new(
            "Shared",
            format!("calm-after-{i}").into_bytes(),
        ))
        .unwrap();
    }

    // An admin's mqadmin command (`args`) to the broker.
    let on_broker = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-b", &c.broker.addr]);
        mqadmin_as(&ns, Some(ADMIN), &all)
    };
    let quota = |args: &[&str]| {
        let out = on_broker(&[&["quota"], args].concat());
        assert!(
            out.status.success(),
            "mqadmin quota {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // corvus's mqadmin lists the rule, raises it (the noisy tenant's sends go through again
    // at once), and removes it.
    let listed = quota(&["list"]);
    assert!(
        listed.contains("1 rule(s)")
            && listed.contains(&format!(
                "account:tenant-noisy:send_messages_per_sec={NOISY_PER_SEC}"
            )),
        "{listed}"
    );
    let raised = quota(&["set", "account:tenant-noisy:send_messages_per_sec=100000"]);
    assert!(
        raised.contains("1 rule(s)") && raised.contains("send_messages_per_sec=100000"),
        "{raised}"
    );
    for i in 0..50 {
        noisy
            .send(Message::new("Shared", format!("lifted-{i}").into_bytes()))
            .unwrap();
    }
    assert!(quota(&["remove", "account:tenant-noisy:send_messages_per_sec"]).contains("0 rule(s)"));
    assert!(quota(&["list"]).contains("0 rule(s)"));
    // A rule the broker does not take is refused with its reason, and nothing changes.
    let bad = on_broker(&["quota", "set", "account:x:frobs_per_sec=5"]);
    assert!(!bad.status.success());
    assert!(quota(&["list"]).contains("0 rule(s)"));
    // RocketMQ's own command sets the same key.
    let out = on_broker(&[
        "updateBrokerConfig",
        "-k",
        "quotas",
        "-v",
        "topic:Shared:pulls_per_sec=7",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(quota(&["list"]).contains("topic:Shared:pulls_per_sec=7"));
}

/// `account:<key>:connections`: a second connection of an account allowed one is refused
/// at its first send, naming the rule, while the first keeps sending; once the first
/// closes, the second is let in.
#[test]
fn an_account_holds_at_most_its_connections() {
    let rules = AclRules::write(RULES);
    let toml = format!(
        "{}quotas = \"account:tenant-noisy:connections=1\"\n",
        rules.broker_toml()
    );
    let (c, metrics) =
        Cluster::start_metered_with(1, "127.0.0.1:0", |o| o.config_toml = Some(toml));
    let ns = c.namesrv.addr.clone();
    create_topic_as(&ns, ADMIN, "Conns", 2);
    let first = producer_as(&ns, NOISY, "first-producer");
    first
        .send(Message::new("Conns", b"first".to_vec()))
        .unwrap();
    let second = producer_as(&ns, NOISY, "second-producer");
    let e = second
        .send(Message::new("Conns", b"second".to_vec()))
        .unwrap_err();
    assert_eq!(e.code(), Some(ResponseCode::FlowControl), "{e}");
    assert_says_when_to_retry(&e);
    let text = e.to_string();
    assert!(
        text.contains("account:tenant-noisy:connections = 1 connections"),
        "{text}"
    );
    // Counted by the limit it hit.
    let body = integration::metrics::text(&metrics);
    assert!(
        body.contains("corvus_quota_refusals_total{limit=\"account:tenant-noisy:connections\"} 1"),
        "{body}"
    );
    // Another account is not limited by it.
    producer_as(&ns, CALM, "calm-producer")
        .send(Message::new("Conns", b"calm".to_vec()))
        .unwrap();
    first
        .send(Message::new("Conns", b"first again".to_vec()))
        .unwrap();
    drop(first);
    let sent = integration::wait_for(Duration::from_secs(10), || {
        second.send(Message::new("Conns", b"second".to_vec())).ok()
    });
    assert!(
        sent.is_some(),
        "the second connection was not let in after the first closed"
    );
}

/// Requests a second the noisy tenant may make, of any kind, for the whole broker.
const NOISY_REQUESTS_PER_SEC: u64 = 20;

/// `account:<key>:requests_per_sec` counts every request of the account, not only its sends
/// and pulls: an account asking for a queue's max offset as fast as it can, over RocketMQ's
/// protocol and over corvus's own, is refused past its rate on both, by name and with when
/// to retry, across both cores together; the other account's requests all succeed
/// meanwhile.
#[test]
fn an_accounts_requests_of_every_kind_are_held_to_its_requests_per_sec() {
    use client::{ClientConfig, PullConsumer};
    use integration::{remoting_exchange, remoting_request};
    use remoting::codes::{request, response};

    let rules = AclRules::write(RULES);
    let toml = format!(
        "{}quotas = \"account:tenant-noisy:requests_per_sec={NOISY_REQUESTS_PER_SEC}\"\n",
        rules.broker_toml()
    );
    let c = Cluster::start_with(2, "small", |o: &mut BrokerOpts| o.config_toml = Some(toml));
    let ns = c.namesrv.addr.clone();
    create_topic_as(&ns, ADMIN, "Asked", 2);
    let consumer_as = |account: (&str, &str), group: &str| {
        let mut config = ClientConfig::new(&ns).unwrap();
        config.pool.credentials = Some(Credentials::new(account.0, account.1));
        PullConsumer::with_config(config, group).unwrap()
    };
    let noisy = consumer_as(NOISY, "noisy-group");
    let calm = consumer_as(CALM, "calm-group");
    let queue = calm
        .queues("Asked")
        .unwrap()
        .into_iter()
        .find(|q| q.queue_id == 0)
        .unwrap();
    let fields = [("topic", "Asked"), ("queueId", "0")];
    let max_offset = |account| remoting_request(request::GET_MAX_OFFSET, &fields, Some(account));
    let mut noisy_conn = std::net::TcpStream::connect(&c.broker.addr).unwrap();
    let mut calm_conn = std::net::TcpStream::connect(&c.broker.addr).unwrap();
    let rule =
        format!("account:tenant-noisy:requests_per_sec = {NOISY_REQUESTS_PER_SEC} requests/s");

    let started = Instant::now();
    let (mut noisy_ok, mut remoting_refused, mut native_refused, mut calm_ok) = (0u64, 0, 0, 0);
    for i in 0..20_000 {
        if (remoting_refused >= 20 && native_refused >= 20)
            || started.elapsed() > Duration::from_secs(60)
        {
            break;
        }
        let answer = remoting_exchange(&mut noisy_conn, &max_offset(NOISY), &[]).command;
        if answer.code == response::SUCCESS {
            noisy_ok += 1;
        } else {
            let remark = answer.remark.clone().unwrap_or_default();
            assert_eq!(answer.code, response::FLOW_CONTROL, "{remark}");
            assert!(
                remark.contains(&rule) && remark.contains("retry after"),
                "{remark}"
            );
            let after: u64 = answer.ext("quotaRetryAfterMs").unwrap().parse().unwrap();
            assert!((1..=10_000).contains(&after), "{after}: {remark}");
            remoting_refused += 1;
        }
        match noisy.max_offset(&queue) {
            Ok(_) => noisy_ok += 1,
            Err(e) => {
                assert_eq!(e.code(), Some(ResponseCode::FlowControl), "{e}");
                assert_says_when_to_retry(&e);
                assert!(e.to_string().contains(&rule), "{e}");
                native_refused += 1;
            }
        }
        if i % 10 == 0 {
            let answer = remoting_exchange(&mut calm_conn, &max_offset(CALM), &[]).command;
            assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
            calm.max_offset(&queue).unwrap();
            calm_ok += 2;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        remoting_refused >= 20 && native_refused >= 20,
        "refused {remoting_refused} over remoting and {native_refused} natively in {elapsed:.1} s"
    );
    // Both cores together let through no more than the limit (a second's burst, plus one
    // exchange's slack); the client's own requests of its account count too.
    let allowed = (NOISY_REQUESTS_PER_SEC as f64 * (elapsed + 2.0)).ceil() as u64;
    assert!(
        noisy_ok <= allowed,
        "{noisy_ok} noisy requests went through in {elapsed:.1} s at {NOISY_REQUESTS_PER_SEC}/s"
    );
    assert!(calm_ok >= 4, "{calm_ok}");
}
