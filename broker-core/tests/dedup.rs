//! Idempotent sends by `UNIQ_KEY` (`broker_core::dedup`): a retry that reaches any core is
//! answered with the original's result and stored once; batches per message; the window
//! survives a restart; a topic or the broker can turn it off.

mod common;

use broker_core::topics::Attributes;
use broker_core::{BrokerError, Core};
use bytes::Bytes;
use common::*;

const TOPIC: &str = "Once";

/// What a send was answered with, as a producer compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    queue_id: u32,
    shard: u16,
    queue_offset: u64,
    commit_log_offset: u64,
    count: u32,
}

fn keyed(body: &str, key: &str) -> Bytes {
    record(TOPIC, body, None, &[(message::prop::UNIQ_KEY, key)])
}

fn batch(messages: &[(&str, &str)]) -> (Bytes, u32) {
    let mut out = Vec::new();
    for (body, key) in messages {
        out.extend_from_slice(&keyed(body, key));
    }
    (Bytes::from(out), messages.len() as u32)
}

async fn send_on(
    core: &Core,
    queue: u32,
    records: Bytes,
    count: u32,
) -> Result<Answer, BrokerError> {
    let out = core.send(TOPIC, queue, records, count).await?;
    Ok(Answer {
        queue_id: out.queue_id,
        shard: out.appended.shard,
        queue_offset: out.appended.first_queue_offset.0,
        commit_log_offset: out.appended.first_commit_log_offset.0,
        count: out.appended.count,
    })
}

fn send(
    c: &Cluster,
    core: u16,
    queue: u32,
    records: Bytes,
    count: u32,
) -> Result<Answer, BrokerError> {
    c.on(core, move |core| async move {
        send_on(&core, queue, records, count).await
    })
}

/// Every body stored in the topic's `queues` queues.
fn stored(c: &Cluster, queues: u32) -> Vec<String> {
    let mut all = Vec::new();
    for q in 0..queues {
        let p = c
            .on(0, move |core| async move {
                pull(&core, pull_request("reader", TOPIC, q, 0)).await
            })
            .expect("the queue reads");
        all.extend(p.bodies());
    }
    all.sort();
    all
}

fn create_with(c: &Cluster, queues: u32, dedup: Option<&str>) {
    let cfg = topic(TOPIC, queues);
    let attributes: Option<Attributes> =
        dedup.map(|v| Attributes::from([(broker_core::dedup::ATTRIBUTE.to_owned(), v.to_owned())]));
    c.on(0, move |core| async move {
        core.create_topic_with(cfg, attributes).await
    })
    .expect("the topic is created");
}

fn on_cluster(cores: u16) -> Cluster {
    Cluster::start_with(cores, 4, |cfg| cfg.dedup_enable = true)
}

#[test]
fn a_retry_to_another_core_is_answered_with_the_original_and_stored_once() {
    let c = on_cluster(2);
    create_with(&c, 4, None);
    let (q0, q1) = (queue_on(&c, TOPIC, 4, 0), queue_on(&c, TOPIC, 4, 1));
    let first = send(&c, 0, q0, keyed("m1", "K1"), 1).expect("stored");
    // The retry goes to another queue, on the other core, sent there.
    let retry = send(&c, 1, q1, keyed("m1", "K1"), 1).expect("answered");
    assert_eq!(
        retry, first,
        "the retry names the original's queue and offsets"
    );
    assert_eq!(stored(&c, 4), ["m1"]);
    // Another key is stored as usual.
    let other = send(&c, 1, q1, keyed("m2", "K2"), 1).expect("stored");
    assert_eq!(other.queue_id, q1);
    assert_eq!(stored(&c, 4), ["m1", "m2"]);
    c.stop();
}

#[test]
fn an_original_and_its_retry_arriving_together_store_it_once() {
    let c = on_cluster(2);
    create_with(&c, 4, None);
    let (q0, q1) = (queue_on(&c, TOPIC, 4, 0), queue_on(&c, TOPIC, 4, 1));
    for round in 0..20 {
        let key = format!("K{round}");
        let (a, b) = (keyed("same", &key), keyed("same", &key));
        let one = c.spawn_on(0, move |core| async move { send_on(&core, q1, a, 1).await });
        let two = c.spawn_on(1, move |core| async move { send_on(&core, q0, b, 1).await });
        let (one, two) = (one.wait().expect("answered"), two.wait().expect("answered"));
        assert_eq!(
            one, two,
            "round {round}: both answers name the one stored copy"
        );
    }
    assert_eq!(stored(&c, 4).len(), 20);
    c.stop();
}

#[test]
fn a_batch_is_deduplicated_per_message() {
    let c = on_cluster(2);
    create_with(&c, 4, None);
    let (q0, q1) = (queue_on(&c, TOPIC, 4, 0), queue_on(&c, TOPIC, 4, 1));
    let (b, n) = batch(&[("a", "KA"), ("b", "KB"), ("c", "KC")]);
    let first = send(&c, 0, q0, b, n).expect("stored");
    assert_eq!(first.count, 3);
    // The whole batch retried elsewhere: the original batch's result.
    let (b, n) = batch(&[("a", "KA"), ("b", "KB"), ("c", "KC")]);
    assert_eq!(send(&c, 1, q1, b, n).expect("answered"), first);
    // Partly new: only the new message is stored, and the answer says where.
    let (b, n) = batch(&[("b", "KB"), ("d", "KD")]);
    let mixed = send(&c, 1, q1, b, n).expect("stored");
    assert_eq!((mixed.queue_id, mixed.count), (q1, 1));
    assert_eq!(stored(&c, 4), ["a", "b", "c", "d"]);
    // A message without a UNIQ_KEY in a batch of retried ones is stored.
    let mut b = keyed("a", "KA").to_vec();
    b.extend_from_slice(&record(TOPIC, "plain", None, &[]));
    send(&c, 0, q0, Bytes::from(b), 2).expect("stored");
    assert_eq!(stored(&c, 4), ["a", "b", "c", "d", "plain"]);
    c.stop();
}

#[test]
fn a_failed_send_releases_its_keys() {
    let c = on_cluster(2);
    create_with(&c, 4, None);
    let q0 = queue_on(&c, TOPIC, 4, 0);
    // Queue 9 does not exist: refused after the key was claimed.
    let refused = send(&c, 1, 9, keyed("m", "K1"), 1);
    assert!(
        matches!(refused, Err(BrokerError::QueueNotExist { .. })),
        "{refused:?}"
    );
    // Had the claim stayed, this retry would wait for it and be answered busy.
    let stored_now = send(&c, 1, q0, keyed("m", "K1"), 1).expect("stored");
    assert_eq!(stored_now.queue_id, q0);
    assert_eq!(stored(&c, 4), ["m"]);
    c.stop();
}

#[test]
fn the_topic_attribute_overrides_the_broker_and_off_stores_duplicates() {
    // The broker deduplicates; the topic says no.
    let c = on_cluster(2);
    create_with(&c, 4, Some("false"));
    let q0 = queue_on(&c, TOPIC, 4, 0);
    send(&c, 0, q0, keyed("m", "K1"), 1).expect("stored");
    send(&c, 1, q0, keyed("m", "K1"), 1).expect("stored again");
    assert_eq!(stored(&c, 4), ["m", "m"]);
    c.stop();

    // The broker does not; the topic does.
    let c = Cluster::start(2, 4);
    create_with(&c, 4, Some("true"));
    let q0 = queue_on(&c, TOPIC, 4, 0);
    let first = send(&c, 0, q0, keyed("m", "K1"), 1).expect("stored");
    assert_eq!(
        send(&c, 1, q0, keyed("m", "K1"), 1).expect("answered"),
        first
    );
    assert_eq!(stored(&c, 4), ["m"]);
    c.stop();
}

#[test]
fn retry_topics_are_never_deduplicated() {
    let c = on_cluster(1);
    let retry = "%RETRY%group";
    c.on(0, move |core| async move {
        core.create_topic(topic(retry, 1)).await
    })
    .expect("created");
    for _ in 0..2 {
        c.on(0, move |core| async move {
            let r = record(retry, "again", None, &[(message::prop::UNIQ_KEY, "K1")]);
            core.send(retry, 0, r, 1).await.map(|_| ())
        })
        .expect("stored");
    }
    let p = c
        .on(0, move |core| async move {
            pull(&core, pull_request("g", retry, 0, 0)).await
        })
        .expect("read");
    assert_eq!(p.bodies(), ["again", "again"]);
    c.stop();
}

#[test]
fn the_oldest_keys_are_forgotten_past_the_count() {
    let c = Cluster::start_with(1, 2, |cfg| {
        cfg.dedup_enable = true;
        cfg.dedup_keys_max = 2;
    });
    create_with(&c, 2, None);
    for k in ["K1", "K2", "K3"] {
        send(&c, 0, 0, keyed(k, k), 1).expect("stored");
    }
    // K1 is out of the window; K3 is in it.
    send(&c, 0, 0, keyed("K1", "K1"), 1).expect("stored again");
    send(&c, 0, 0, keyed("K3", "K3"), 1).expect("answered");
    assert_eq!(stored(&c, 2), ["K1", "K1", "K2", "K3"]);
    c.stop();
}

#[test]
fn the_window_is_rebuilt_from_the_log_after_a_restart() {
    let c = on_cluster(2);
    create_with(&c, 4, None);
    let (q0, q1) = (queue_on(&c, TOPIC, 4, 0), queue_on(&c, TOPIC, 4, 1));
    let single = send(&c, 0, q0, keyed("m1", "K1"), 1).expect("stored");
    let (b, n) = batch(&[("a", "KA"), ("b", "KB")]);
    let batched = send(&c, 1, q1, b, n).expect("stored");

    let again = c.restart(2);
    assert_eq!(
        send(&again, 1, q1, keyed("m1", "K1"), 1).expect("answered"),
        single
    );
    let (b, n) = batch(&[("a", "KA"), ("b", "KB")]);
    assert_eq!(send(&again, 0, q0, b, n).expect("answered"), batched);
    // The second message of the batch alone: its own position.
    let second = send(&again, 0, q0, keyed("b", "KB"), 1).expect("answered");
    assert_eq!(
        (second.queue_id, second.queue_offset),
        (q1, batched.queue_offset + 1)
    );
    assert_eq!(stored(&again, 4), ["a", "b", "m1"]);
    again.stop();
}
