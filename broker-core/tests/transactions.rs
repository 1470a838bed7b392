//! Transactional messages: a prepared message is invisible until its producer commits it,
//! a rollback drops it, and an undecided one is checked back with a producer of its group.

mod common;

use std::time::Instant;

use broker_core::mesh::PullStatus;
use broker_core::transaction::prop;
use broker_core::BrokerError;
use common::*;
use protocol::{EndTransaction, TransactionState};

/// A prepared message of producer group `pg`, with unique key `key`.
fn prepared(topic: &str, body: &str, key: &str) -> bytes::Bytes {
    record(
        topic,
        body,
        None,
        &[
            (prop::TRAN_MSG, "true"),
            (prop::PGROUP, "pg"),
            (message::prop::UNIQ_KEY, key),
        ],
    )
}

/// Where a prepared message was stored, to end it with.
#[derive(Debug, Clone)]
struct Half {
    shard: u16,
    commit_log_offset: u64,
    queue_offset: u64,
}

fn send_prepared(
    c: &Cluster,
    from: u16,
    topic: &'static str,
    q: u32,
    body: &'static str,
    key: &'static str,
) -> Half {
    c.on(from, move |core| async move {
        let out = core.send(topic, q, prepared(topic, body, key), 1).await?;
        Ok::<_, BrokerError>(Half {
            shard: out.appended.shard,
            commit_log_offset: out.appended.first_commit_log_offset.0,
            queue_offset: out.appended.first_queue_offset.0,
        })
    })
    .expect("the prepared message is stored")
}

fn end(half: &Half, key: &str, state: TransactionState) -> EndTransaction {
    EndTransaction {
        producer_group: "pg".into(),
        shard: half.shard,
        commit_log_offset: half.commit_log_offset,
        queue_offset: half.queue_offset,
        msg_id: key.into(),
        state,
        from_check: false,
    }
}

fn pull_all(c: &Cluster, from: u16, topic: &'static str, q: u32) -> Pulled {
    c.on(from, move |core| async move {
        pull(&core, pull_request("g", topic, q, 0)).await
    })
    .expect("pulled")
}

/// A prepared message is stored but no consumer sees it; once its producer commits it
/// (through the other core) it is delivered, once, with its transaction id.
#[test]
fn a_prepared_message_is_invisible_until_committed() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Orders", 4);
    let q = queue_on(&c, "Orders", 4, 1);
    let half = send_prepared(&c, 0, "Orders", q, "paid", "TX1");
    let before = pull_all(&c, 0, "Orders", q);
    assert_eq!(before.status, PullStatus::NoNewMessage);
    assert!(before.messages.is_empty(), "{:?}", before.messages);
    let e = end(&half, "TX1", TransactionState::Commit);
    c.on(1, move |core| async move { core.end_transaction(e).await })
        .expect("committed");
    let after = pull_all(&c, 0, "Orders", q);
    assert_eq!(after.bodies(), ["paid"]);
    assert_eq!(
        after.messages[0].property(prop::TRANSACTION_ID),
        Some("TX1")
    );
    // A second commit of the same half (a retried END_TRANSACTION) stores nothing more.
    let e = end(&half, "TX1", TransactionState::Commit);
    c.on(0, move |core| async move { core.end_transaction(e).await })
        .expect("committed again");
    assert_eq!(pull_all(&c, 1, "Orders", q).bodies(), ["paid"]);
    c.stop();
}

/// A rolled-back message is never delivered, even when a commit for it comes later.
#[test]
fn a_rolled_back_message_is_never_delivered() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Refunds", 4);
    let q = queue_on(&c, "Refunds", 4, 0);
    let half = send_prepared(&c, 1, "Refunds", q, "refund", "TX2");
    let e = end(&half, "TX2", TransactionState::Rollback);
    c.on(0, move |core| async move { core.end_transaction(e).await })
        .expect("rolled back");
    let late = end(&half, "TX2", TransactionState::Commit);
    c.on(
        1,
        move |core| async move { core.end_transaction(late).await },
    )
    .expect("a late commit is answered");
    for from in [0, 1] {
        let p = pull_all(&c, from, "Refunds", q);
        assert!(p.messages.is_empty(), "delivered: {:?}", p.messages);
        assert_eq!(p.max_offset, 0, "nothing was stored in the real queue");
    }
    c.stop();
}

/// An undecided transaction older than `transaction_timeout_ms` is checked back with a
/// producer of its group, on whichever core it is connected to; its COMMIT answer makes
/// the message visible.
#[test]
fn an_undecided_transaction_is_checked_back_and_committed() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.transaction_timeout_ms = 100;
        cfg.transaction_check_interval_ms = 100;
    });
    create_topic(&c, "Checked", 4);
    // The half lies on core 0's shard; the producer is connected to core 1 only.
    let q = queue_on(&c, "Checked", 4, 0);
    c.link(1)
        .log()
        .producers
        .insert("pg".into(), TransactionState::Commit);
    let sent_at = Instant::now();
    send_prepared(&c, 0, "Checked", q, "checked", "TX3");
    assert!(pull_all(&c, 1, "Checked", q).messages.is_empty());
    let delivered = c
        .on(1, move |core| async move {
            let mut r = pull_request("g", "Checked", q, 0);
            r.suspend_timeout_ms = 5_000;
            pull(&core, r).await
        })
        .expect("pulled");
    assert_eq!(delivered.bodies(), ["checked"]);
    assert!(
        sent_at.elapsed().as_millis() >= 100,
        "checked back before transaction_timeout_ms"
    );
    let log = c.link(1).log();
    assert_eq!(log.checks.len(), 1, "{:?}", log.checks);
    let check = &log.checks[0];
    assert_eq!(check.producer_group, "pg");
    assert_eq!(check.msg_id, "TX3");
    let seen = message::RecordView::parse(&check.record).expect("the check carries the record");
    assert_eq!(seen.topic(), "Checked", "the producer sees its real topic");
    assert_eq!(seen.body(), b"checked");
    drop(log);
    assert!(c.link(0).log().checks.is_empty(), "no producer on core 0");
    c.stop();
}

/// Only the producer group that prepared a message may end it; a check-back state of
/// UNKNOWN leaves it undecided (and invisible).
#[test]
fn another_producer_group_cannot_end_a_transaction() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Guarded", 4);
    let q = queue_on(&c, "Guarded", 4, 1);
    let half = send_prepared(&c, 0, "Guarded", q, "guarded", "TX4");
    let mut foreign = end(&half, "TX4", TransactionState::Commit);
    foreign.producer_group = "intruders".into();
    let refused = c.on(
        0,
        move |core| async move { core.end_transaction(foreign).await },
    );
    assert!(
        matches!(refused, Err(BrokerError::BadRequest(_))),
        "{refused:?}"
    );
    let unknown = end(&half, "TX4", TransactionState::Unknown);
    c.on(
        1,
        move |core| async move { core.end_transaction(unknown).await },
    )
    .expect("an unknown state is taken");
    assert!(pull_all(&c, 0, "Guarded", q).messages.is_empty());
    // Neither decided it: the producer still can.
    let e = end(&half, "TX4", TransactionState::Commit);
    c.on(1, move |core| async move { core.end_transaction(e).await })
        .expect("committed");
    assert_eq!(pull_all(&c, 0, "Guarded", q).bodies(), ["guarded"]);
    c.stop();
}

/// While no producer of its group is connected, an undecided transaction is checked again
/// at each pass; once one connects, its answer decides it and the message is delivered once.
#[test]
fn an_undecided_transaction_waits_for_a_producer_to_connect() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.transaction_timeout_ms = 100;
        cfg.transaction_check_interval_ms = 100;
    });
    create_topic(&c, "Waiting", 4);
    let q = queue_on(&c, "Waiting", 4, 1);
    let half = send_prepared(&c, 0, "Waiting", q, "late-decision", "TX5");
    // Each check with no producer to ask leaves a copy in the half queue: wait for two.
    let shard = half.shard;
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let copies = c.on(1, move |core| async move {
            core.shards
                .get(&shard)
                .map(|s| {
                    s.queue_offsets(broker_core::transaction::HALF_TOPIC, u32::from(shard))
                        .max
                        .0
                })
                .unwrap_or(0)
        });
        if copies >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no check pass ran");
        std::thread::yield_now();
    }
    assert!(pull_all(&c, 0, "Waiting", q).messages.is_empty());
    c.link(0)
        .log()
        .producers
        .insert("pg".into(), TransactionState::Commit);
    let delivered = c
        .on(0, move |core| async move {
            let mut r = pull_request("g", "Waiting", q, 0);
            r.suspend_timeout_ms = 5_000;
            pull(&core, r).await
        })
        .expect("pulled");
    assert_eq!(delivered.bodies(), ["late-decision"]);
    let log = c.link(0).log();
    assert_eq!(log.checks.len(), 1, "{:?}", log.checks);
    let seen = message::RecordView::parse(&log.checks[0].record).expect("a record");
    let times: u32 = seen
        .property(prop::CHECK_TIMES)
        .and_then(|t| t.parse().ok())
        .expect("the check says how many checks it is");
    assert!(times >= 3, "checked {times} times");
    drop(log);
    c.stop();
}
