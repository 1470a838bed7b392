//! Recall of a scheduled message (RocketMQ 5.3.2): a message recalled with the handle its
//! send returned is never delivered, across a restart and a kill -9 too; recalling one that
//! was delivered, or one the broker never held, is refused with the reason, and every recall
//! is refused while `recall_message_enable` is off.

mod common;

use std::time::{Duration, Instant};

use broker_core::timer::RecallHandle;
use broker_core::BrokerError;
use common::*;
use message::timer::TIMER_DELIVER_MS;

const TOPIC: &str = "Recall";
/// How long a test waits for a delivery at most.
const DELIVERY_WAIT_MAX: Duration = Duration::from_secs(15);

/// Sends a message of `body` with unique key `uniq`, due at `due_ms`, to queue `q` from core
/// `from`; returns the recall handle the send gives.
fn send_timed(c: &Cluster, from: u16, q: u32, body: &str, uniq: &str, due_ms: i64) -> String {
    let (body, uniq) = (body.to_owned(), uniq.to_owned());
    c.on(from, move |core| async move {
        let due = due_ms.to_string();
        let r = record(
            TOPIC,
            &body,
            None,
            &[(TIMER_DELIVER_MS, &due), ("UNIQ_KEY", &uniq)],
        );
        let out = core.send(TOPIC, q, r.clone(), 1).await?;
        Ok::<_, BrokerError>(core.recall_handle(&r, &out.appended))
    })
    .expect("sent")
    .expect("a scheduled message's send gives a recall handle")
}

fn recall(c: &Cluster, from: u16, topic: &str, handle: &str) -> Result<String, BrokerError> {
    let (topic, handle) = (topic.to_owned(), handle.to_owned());
    c.on(from, move |core| async move {
        core.recall(&topic, &handle).await
    })
}

/// The bodies delivered to queue `q` once `last` is among them (long polls from the start of
/// the queue, bounded in time).
fn delivered_through(c: &Cluster, q: u32, last: &str) -> Vec<String> {
    let started = Instant::now();
    let mut bodies: Vec<String> = Vec::new();
    let mut offset = 0;
    while !bodies.iter().any(|b| b == last) {
        assert!(
            started.elapsed() < DELIVERY_WAIT_MAX,
            "`{last}` was not delivered within {DELIVERY_WAIT_MAX:?}; delivered: {bodies:?}"
        );
        let p = c
            .on(0, move |core| async move {
                let mut r = pull_request("g", TOPIC, q, offset);
                r.suspend_timeout_ms = 1_000;
                pull(&core, r).await
            })
            .expect("pulled");
        offset = p.next_offset;
        bodies.extend(p.bodies());
    }
    bodies
}

/// A message recalled before it is due is not delivered while one due at the same time and
/// not recalled is; recalling it again is answered the same; a handle naming a message the
/// broker does not hold, another topic or another broker is refused; a recall of the
/// delivered one is refused as delivered.
#[test]
fn a_recalled_message_is_never_delivered_and_the_others_are_refused_with_the_reason() {
    let c = Cluster::start(2, 4);
    create_topic(&c, TOPIC, 4);
    let q = queue_on(&c, TOPIC, 4, 1);
    let due = now_ms() + 1_500;
    let recalled = send_timed(&c, 1, q, "recalled", "UNIQ-A", due);
    send_timed(&c, 1, q, "kept", "UNIQ-B", due);

    // Asked of the other core: the handle names the core that holds it.
    assert_eq!(recall(&c, 0, TOPIC, &recalled).expect("recalled"), "UNIQ-A");
    assert_eq!(
        recall(&c, 1, TOPIC, &recalled).expect("recalled again"),
        "UNIQ-A",
        "a second recall (a client's retry) is answered as the first"
    );

    let mut unknown = RecallHandle::decode(&recalled).expect("the handle decodes");
    unknown.uniq_key = "UNIQ-NEVER-SENT".into();
    match recall(&c, 0, TOPIC, &unknown.encode()) {
        Err(BrokerError::NotRecallable(why)) => {
            assert!(why.contains("never sent here"), "{why}")
        }
        other => panic!("an unknown message was recalled: {other:?}"),
    }
    assert!(matches!(
        recall(&c, 0, "NoSuchTopic", &recalled),
        Err(BrokerError::TopicNotExist(_))
    ));
    create_topic(&c, "Elsewhere", 4);
    match recall(&c, 0, "Elsewhere", &recalled) {
        Err(BrokerError::NotRecallable(why)) => assert!(why.contains("topic"), "{why}"),
        other => panic!("a handle of another topic was taken: {other:?}"),
    }
    let mut elsewhere = RecallHandle::decode(&recalled).expect("the handle decodes");
    elsewhere.broker_name = "other-broker".into();
    assert!(matches!(
        recall(&c, 0, TOPIC, &elsewhere.encode()),
        Err(BrokerError::NotRecallable(_))
    ));
    assert!(matches!(
        recall(&c, 0, TOPIC, "not a handle"),
        Err(BrokerError::NotRecallable(_))
    ));

    // The two are due at the same millisecond and the recalled one was stored first: had
    // it been delivered, it would come before the kept one.
    assert_eq!(delivered_through(&c, q, "kept"), ["kept"]);

    let kept = RecallHandle {
        uniq_key: "UNIQ-B".into(),
        ..RecallHandle::decode(&recalled).expect("the handle decodes")
    };
    match recall(&c, 0, TOPIC, &kept.encode()) {
        Err(BrokerError::NotRecallable(why)) => assert!(why.contains("delivered"), "{why}"),
        other => panic!("a delivered message was recalled: {other:?}"),
    }
    c.stop();
}

/// How far the timer of the shard holding `q` has indexed its timer queue, by its
/// checkpoint on disk (its first 8 bytes).
fn checkpoint_indexed(c: &Cluster, q: u32) -> u64 {
    let shard = protocol::queue_owner_shard(TOPIC, q, c.shard_count);
    let path = c
        .shared
        .config
        .data_dir
        .join("shards")
        .join(shard.to_string())
        .join("timer")
        .join("checkpoint");
    std::fs::read(path)
        .ok()
        .and_then(|b| b.get(..8).and_then(|w| w.try_into().ok()))
        .map_or(0, u64::from_le_bytes)
}

/// A recall is kept by the log: a copy of the data taken right after it (as a kill -9 leaves
/// the files, sync flush: the marker is found again in the timer queue), and the broker
/// restarted after a clean stop once the timer's checkpoint has passed the marker (the
/// recall is then in the bucket file), both deliver the message sent beside the recalled
/// one, and not the recalled one.
#[test]
fn a_recall_survives_a_kill_and_a_restart() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.flush_disk_type = broker_core::config::FlushDiskType::Sync;
    });
    create_topic(&c, TOPIC, 4);
    let q = queue_on(&c, TOPIC, 4, 0);
    // Far enough ahead that both restarts come before it.
    let due = now_ms() + 5_000;
    let recalled = send_timed(&c, 0, q, "recalled", "UNIQ-A", due);
    send_timed(&c, 0, q, "kept", "UNIQ-B", due);
    recall(&c, 1, TOPIC, &recalled).expect("recalled");

    let crashed = c.crash_copy(2);
    // The two messages and the marker: timer-queue offsets 0, 1 and 2.
    let started = Instant::now();
    while checkpoint_indexed(&c, q) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the timer's checkpoint did not pass the recall's marker"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = c.restart(2);
    assert!(now_ms() < due, "restarted only after the messages were due");

    assert_eq!(delivered_through(&crashed, q, "kept"), ["kept"]);
    crashed.stop();
    assert_eq!(delivered_through(&c, q, "kept"), ["kept"]);
    c.stop();
}

/// With `recall_message_enable` off (RocketMQ's default), a recall is refused with
/// NO_PERMISSION and the message is delivered.
#[test]
fn a_recall_is_refused_when_recall_is_off() {
    let c = Cluster::start_with(1, 2, |cfg| cfg.recall_message_enable = false);
    create_topic(&c, TOPIC, 2);
    let q = queue_on(&c, TOPIC, 2, 0);
    let handle = send_timed(&c, 0, q, "kept", "UNIQ-A", now_ms() + 300);
    match recall(&c, 0, TOPIC, &handle) {
        Err(BrokerError::NoPermission(why)) => {
            assert!(why.contains("recall_message_enable"), "{why}")
        }
        other => panic!("recalled with recall off: {other:?}"),
    }
    assert_eq!(delivered_through(&c, q, "kept"), ["kept"]);
    c.stop();
}
