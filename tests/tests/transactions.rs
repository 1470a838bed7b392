//! Transactional messages through the native client against the real binaries: a committed
//! transaction is delivered once, a rolled-back one never, an undecided one after the
//! broker's check-back, one whose producer never decides is discarded after the maximum of
//! checks, and a broker kill -9 with transactions in flight loses none of them and delivers
//! none twice. A commit that arrives after a check-back committed the transaction (a local
//! transaction slower than the timeout) stores it once; a delayed transactional message is
//! held from its commit. An end that names no half message is refused with the reason. The same
//! through RocketMQ's own TransactionMQProducer: `tests/tests/rocketmq_java.rs`.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{
    Message, MessageExt, PullConsumer, SendResult, TransactionListener, TransactionProducer,
    TransactionState,
};
use integration::{drain_topic, wait_for, Cluster};

/// What the test's local transactions decide, by the message's key: at once, and when the
/// broker checks back. Counts the checks per key.
#[derive(Default)]
struct Decisions {
    execute: HashMap<String, TransactionState>,
    check: Mutex<HashMap<String, TransactionState>>,
    checks: Mutex<HashMap<String, u32>>,
}

#[derive(Clone, Default)]
struct Listener(Arc<Decisions>);

impl Listener {
    fn new(decide: &[(&str, TransactionState, TransactionState)]) -> Listener {
        let d = Decisions {
            execute: decide.iter().map(|(k, e, _)| (k.to_string(), *e)).collect(),
            check: Mutex::new(decide.iter().map(|(k, _, c)| (k.to_string(), *c)).collect()),
            checks: Mutex::default(),
        };
        Listener(Arc::new(d))
    }

    fn checks(&self, key: &str) -> u32 {
        self.0.checks.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

impl TransactionListener for Listener {
    fn execute_local_transaction(&self, msg: &Message, _sent: &SendResult) -> TransactionState {
        let key = &msg.keys[0];
        if key.starts_with("late-") {
            // A local transaction slower than the broker's timeout: it decides only once the
            // broker has checked it back (and the check decided it already).
            wait_for(Duration::from_secs(20), || {
                (self.checks(key) >= 1).then_some(())
            })
            .expect("the broker never checked the slow transaction back");
        }
        self.0.execute[key]
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> TransactionState {
        let key = msg.keys[0].clone();
        *self
            .0
            .checks
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default() += 1;
        self.0.check.lock().unwrap()[&key]
    }
}

fn tx_producer(ns: &str, group: &str, listener: Listener) -> TransactionProducer {
    TransactionProducer::builder()
        .namesrv(ns)
        .group(group)
        .send_timeout_ms(5000)
        .heartbeat_interval_ms(200)
        .build(listener)
        .unwrap()
}

/// Every message of `topic` by key, counting copies.
fn delivered(ns: &str, topic: &str) -> HashMap<String, usize> {
    let consumer = PullConsumer::new(ns, "tx-check").unwrap();
    let mut out = HashMap::new();
    for m in drain_topic(&consumer, topic, Duration::from_secs(20)) {
        *out.entry(m.keys[0].clone()).or_default() += 1;
    }
    out
}

fn wait_delivered(ns: &str, topic: &str, keys: &[&str]) -> HashMap<String, usize> {
    wait_for(Duration::from_secs(30), || {
        let got = delivered(ns, topic);
        keys.iter().all(|k| got.contains_key(*k)).then_some(got)
    })
    .unwrap_or_else(|| {
        panic!(
            "{keys:?} were not all delivered; got {:?}",
            delivered(ns, topic)
        )
    })
}

const FAST_CHECKS: &str =
    "transaction_timeout_ms = 500\ntransaction_check_interval_ms = 300\ntransaction_check_max = 3\n";

#[test]
fn commit_rollback_check_back_and_discard() {
    use TransactionState::{Commit, Rollback, Unknown};
    let c = Cluster::start_with(2, "small", |o| o.config_toml = Some(FAST_CHECKS.into()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "TxOrders", 4);
    let listener = Listener::new(&[
        ("committed", Commit, Rollback),
        ("rolled-back", Rollback, Commit),
        ("decided-later", Unknown, Commit),
        ("never-decided", Unknown, Unknown),
    ]);
    let p = tx_producer(&ns, "tx-orders", listener.clone());
    for key in ["committed", "rolled-back", "decided-later", "never-decided"] {
        let r = p
            .send_in_transaction(Message::new("TxOrders", key).with_key(key))
            .unwrap();
        assert_eq!(r.state, listener.0.execute[key]);
    }
    // A producer that leaves before deciding: no producer of its group answers any check.
    let gone = tx_producer(
        &ns,
        "tx-gone",
        Listener::new(&[("producer-gone", Unknown, Commit)]),
    );
    gone.send_in_transaction(Message::new("TxOrders", "producer-gone").with_key("producer-gone"))
        .unwrap();
    gone.shutdown();
    // Committed at once: delivered before any check could have happened.
    let got = wait_delivered(&ns, "TxOrders", &["committed"]);
    assert!(
        !got.contains_key("decided-later") && !got.contains_key("never-decided"),
        "undecided half messages are invisible to consumers: {got:?}"
    );
    // Decided by the check-back.
    wait_delivered(&ns, "TxOrders", &["committed", "decided-later"]);
    assert!(listener.checks("decided-later") >= 1);
    // The producer never decides: checked transaction_check_max times, then discarded.
    let discard_lines = || {
        c.broker
            .stderr()
            .lines()
            .filter(|l| l.contains("transaction discarded"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let discarded = wait_for(Duration::from_secs(30), || {
        (discard_lines().len() >= 2).then_some(())
    });
    assert!(
        discarded.is_some(),
        "the never-decided transaction was not discarded; checks: {}",
        listener.checks("never-decided")
    );
    assert_eq!(
        listener.checks("never-decided"),
        3,
        "checked the maximum of times"
    );
    let lines = discard_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for group in ["tx-orders", "tx-gone"] {
        assert!(
            lines.iter().any(|l| l.contains(group)),
            "a discard names the producer group {group}: {lines:?}"
        );
    }
    assert_eq!(
        listener.checks("committed"),
        0,
        "a decided one is never checked"
    );
    assert_eq!(
        listener.checks("rolled-back"),
        0,
        "a decided one is never checked"
    );
    let got = delivered(&ns, "TxOrders");
    assert_eq!(got.get("committed"), Some(&1), "{got:?}");
    assert_eq!(got.get("decided-later"), Some(&1), "{got:?}");
    assert!(!got.contains_key("rolled-back"), "{got:?}");
    assert!(!got.contains_key("never-decided"), "{got:?}");
    assert!(!got.contains_key("producer-gone"), "{got:?}");
    // The committed message names where it was bound and its transaction, as RocketMQ's
    // committed messages do: REAL_TOPIC, REAL_QID and __transactionId__ (its unique key).
    let consumer = PullConsumer::new(&ns, "tx-props").unwrap();
    let all = drain_topic(&consumer, "TxOrders", Duration::from_secs(20));
    let m = all
        .iter()
        .find(|m| m.keys.first().map(String::as_str) == Some("committed"))
        .unwrap_or_else(|| panic!("the committed message is not served: {all:?}"));
    let prop = |key: &str| {
        m.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(prop("REAL_TOPIC"), Some("TxOrders"), "{m:?}");
    assert!(
        prop("REAL_QID").is_some_and(|q| q.parse::<u32>().is_ok()),
        "{m:?}"
    );
    assert_eq!(prop("__transactionId__"), Some(m.msg_id.as_str()), "{m:?}");
    // The half topic is in no route: ordinary consumers cannot read it.
    let consumer = PullConsumer::new(&ns, "tx-snoop").unwrap();
    assert!(consumer.queues("RMQ_SYS_TRANS_HALF_TOPIC").is_err());
    p.shutdown();
}

#[test]
fn kill_9_with_transactions_in_flight() {
    use TransactionState::{Commit, Unknown};
    let mut c = Cluster::start_with(1, "small", |o| {
        o.config_toml =
            Some("transaction_timeout_ms = 1500\ntransaction_check_interval_ms = 300\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "TxCrash", 2);
    let listener = Listener::new(&[
        ("committed", Commit, Commit),
        ("in-flight", Unknown, Commit),
    ]);
    let p = tx_producer(&ns, "tx-crash", listener.clone());
    for key in ["committed", "in-flight"] {
        p.send_in_transaction(Message::new("TxCrash", key).with_key(key))
            .unwrap();
    }
    // Killed before the in-flight one is old enough to be checked.
    c.broker.kill9();
    assert_eq!(listener.checks("in-flight"), 0);
    c.restart_broker();
    let got = wait_delivered(&ns, "TxCrash", &["committed", "in-flight"]);
    assert!(
        listener.checks("in-flight") >= 1,
        "the undecided one was checked back after the restart"
    );
    assert_eq!(got.get("committed"), Some(&1), "{got:?}");
    assert_eq!(got.get("in-flight"), Some(&1), "{got:?}");
    assert_eq!(listener.checks("committed"), 0);
    // A second restart changes nothing: every decision is in the op queue.
    c.restart_broker();
    let got = wait_delivered(&ns, "TxCrash", &["committed", "in-flight"]);
    assert_eq!(got.get("committed"), Some(&1), "{got:?}");
    assert_eq!(got.get("in-flight"), Some(&1), "{got:?}");
    p.shutdown();
}

#[test]
fn a_bad_end_of_transaction_is_refused_and_the_broker_keeps_serving() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "TxBad", 1);
    let plain = integration::producer(&ns)
        .send(Message::new("TxBad", "plain"))
        .unwrap();
    let end = |shard: u16, commit_log_offset: u64, queue_offset: u64| {
        let h = protocol::Header::request(
            1,
            protocol::Command::EndTransaction(protocol::EndTransaction {
                producer_group: "tx-bad".into(),
                shard,
                commit_log_offset,
                queue_offset,
                msg_id: String::new(),
                state: TransactionState::Commit,
                from_check: false,
            }),
        );
        let f = integration::raw_call(&c.broker.addr, &h, &[]);
        (f.header.response_code(), f.header.remark)
    };
    let (code, remark) = end(7, 0, 0);
    assert_eq!(code, protocol::ResponseCode::BadRequest, "{remark}");
    assert!(remark.contains("shard 7 does not exist"), "{remark}");
    let (code, remark) = end(0, 1 << 40, 0);
    assert_ne!(code, protocol::ResponseCode::Success, "{remark}");
    assert!(remark.contains("no half message"), "{remark}");
    // An ordinary message is no half message: nothing is stored for it.
    let (code, remark) = end(0, plain.commit_log_offset.0, plain.queue_offset.0);
    assert_eq!(code, protocol::ResponseCode::BadRequest, "{remark}");
    assert!(remark.contains("holds no half message"), "{remark}");
    let consumer = PullConsumer::new(&ns, "tx-bad").unwrap();
    let all = drain_topic(&consumer, "TxBad", Duration::from_secs(10));
    assert_eq!(all.len(), 1, "the plain message, once: {all:?}");
    integration::producer(&ns)
        .send(Message::new("TxBad", "after"))
        .unwrap();
}

#[test]
fn a_delayed_transactional_message_is_held_from_its_commit_and_delivered_once() {
    use TransactionState::{Commit, Unknown};
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(FAST_CHECKS.into()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "TxDelayed", 2);
    let listener = Listener::new(&[
        ("delayed", Commit, Commit),
        ("delayed-undecided", Unknown, Unknown),
    ]);
    let p = tx_producer(&ns, "tx-delayed", listener.clone());
    for key in ["delayed", "delayed-undecided"] {
        // Level 1: 1 s.
        let m = Message::new("TxDelayed", key)
            .with_key(key)
            .with_delay_level(1);
        p.send_in_transaction(m).unwrap();
    }
    let consumer = PullConsumer::new(&ns, "tx-delayed-check").unwrap();
    let got = wait_for(Duration::from_secs(30), || {
        let all = drain_topic(&consumer, "TxDelayed", Duration::from_secs(10));
        (!all.is_empty()).then_some(all)
    })
    .unwrap();
    assert_eq!(got.len(), 1, "the committed one, once: {got:?}");
    assert_eq!(got[0].keys, vec!["delayed".to_string()]);
    let held_ms = got[0].store_timestamp_ms - got[0].born_timestamp_ms;
    assert!(
        held_ms >= 1000,
        "stored for delivery {held_ms} ms after it was born, before its delay"
    );
    // The undecided one is discarded after its checks and never delivered.
    wait_for(Duration::from_secs(30), || {
        c.broker
            .stderr()
            .contains("transaction discarded")
            .then_some(())
    })
    .expect("the undecided one was not discarded");
    let got = delivered(&ns, "TxDelayed");
    assert_eq!(got.get("delayed"), Some(&1), "{got:?}");
    assert!(!got.contains_key("delayed-undecided"), "{got:?}");
    p.shutdown();
}

#[test]
fn a_commit_that_arrives_after_a_check_back_committed_it_stores_the_message_once() {
    use TransactionState::Commit;
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(FAST_CHECKS.into()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "TxLate", 2);
    let listener = Listener::new(&[("late-commit", Commit, Commit)]);
    let p = tx_producer(&ns, "tx-late", listener.clone());
    // Returns once the check-back committed it and the late end of the original arrived.
    let r = p
        .send_in_transaction(Message::new("TxLate", "late-commit").with_key("late-commit"))
        .unwrap();
    assert_eq!(r.state, Commit);
    assert!(listener.checks("late-commit") >= 1);
    wait_delivered(&ns, "TxLate", &["late-commit"]);
    // Later check passes find nothing undecided: still once.
    let consumer = PullConsumer::new(&ns, "tx-late-check").unwrap();
    let q = consumer.queues("TxLate").unwrap();
    let stored: u64 = q
        .iter()
        .map(|q| {
            let (min, max) = consumer.queue_offsets(q).unwrap();
            max.0 - min.0
        })
        .sum();
    assert_eq!(stored, 1, "the message is stored once in its topic");
    let got = delivered(&ns, "TxLate");
    assert_eq!(got.get("late-commit"), Some(&1), "{got:?}");
    drop(c);
    p.shutdown();
}
