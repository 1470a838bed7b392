//! Scheduled delivery: a message with a delay level reaches its consumers after the level's
//! delay, not before.

mod common;

use std::time::{Duration, Instant};

use broker_core::mesh::PullStatus;
use broker_core::BrokerError;
use common::*;

/// A message sent with `DELAY=2` (300 ms here) is held: a pull right after the send finds
/// nothing, and a waiting pull gets it once the level's delay has passed, with the level and
/// where it was bound for.
#[test]
fn a_delay_level_message_is_delivered_after_its_level_and_not_before() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.retry_delay_levels_ms = vec![100, 300, 1_000];
    });
    create_topic(&c, "Later", 4);
    let q = queue_on(&c, "Later", 4, 1);
    let (sent_at, early) = c
        .on(0, move |core| async move {
            let sent_at = Instant::now();
            let r = record("Later", "held", None, &[(message::timer::DELAY, "2")]);
            core.send("Later", q, r, 1).await?;
            let early = pull(&core, pull_request("g", "Later", q, 0)).await?;
            Ok::<_, BrokerError>((sent_at, early))
        })
        .expect("sent and pulled");
    assert_eq!(early.status, PullStatus::NoNewMessage);
    assert!(
        early.messages.is_empty(),
        "delivered at once: {:?}",
        early.messages
    );
    let (p, arrived) = c.on(1, move |core| async move {
        let mut r = pull_request("g", "Later", q, 0);
        r.suspend_timeout_ms = 5_000;
        let p = pull(&core, r).await;
        (p, Instant::now())
    });
    let p = p.expect("pulled");
    let held = arrived - sent_at;
    assert_eq!(p.bodies(), ["held"]);
    assert!(
        held >= Duration::from_millis(300),
        "delivered {held:?} after the send, before its level's 300 ms"
    );
    assert!(
        held < Duration::from_secs(3),
        "delivered only after {held:?}"
    );
    let m = &p.messages[0];
    assert_eq!(m.property(message::timer::DELAY), Some("2"));
    assert_eq!(
        m.property(broker_core::transaction::prop::REAL_TOPIC),
        Some("Later")
    );
    c.stop();
}

/// A level past the last is held for the last level, and its delivered copy says so; a
/// message with a delivery time (`TIMER_DELIVER_MS`) is delivered at that time, with when it
/// was stored and taken out.
#[test]
fn a_level_past_the_last_and_a_delivery_time_are_kept() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.retry_delay_levels_ms = vec![50, 100, 250];
    });
    create_topic(&c, "Timed", 4);
    let q = queue_on(&c, "Timed", 4, 0);
    let (sent_at, due_ms) = c
        .on(1, move |core| async move {
            let sent_at = Instant::now();
            let r = record("Timed", "past-last", None, &[(message::timer::DELAY, "9")]);
            core.send("Timed", q, r, 1).await?;
            let due_ms = now_ms() + 150;
            let due = due_ms.to_string();
            let r = record(
                "Timed",
                "at-time",
                None,
                &[(message::timer::TIMER_DELIVER_MS, &due)],
            );
            core.send("Timed", q, r, 1).await?;
            Ok::<_, BrokerError>((sent_at, due_ms))
        })
        .expect("sent");
    let mut got = Vec::new();
    let mut offset = 0;
    let deadline = Instant::now() + WAIT_MAX;
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "delivered only {got:?}");
        let p = c
            .on(0, move |core| async move {
                let mut r = pull_request("g", "Timed", q, offset);
                r.suspend_timeout_ms = 2_000;
                pull(&core, r).await
            })
            .expect("pulled");
        offset = p.next_offset;
        let now = Instant::now();
        got.extend(p.messages.into_iter().map(|m| (m, now)));
    }
    let (at_time, at_time_seen) = &got[0];
    assert_eq!(at_time.body, "at-time", "the earlier due comes first");
    assert!(now_ms() >= due_ms);
    assert!(
        *at_time_seen - sent_at >= Duration::from_millis(150),
        "delivered {:?} after the send, before its time",
        *at_time_seen - sent_at
    );
    assert!(at_time.property(message::timer::TIMER_ENQUEUE_MS).is_some());
    assert!(at_time.property(message::timer::TIMER_DEQUEUE_MS).is_some());
    let (past_last, seen) = &got[1];
    assert_eq!(past_last.body, "past-last");
    assert_eq!(
        past_last.property(message::timer::DELAY),
        Some("3"),
        "the last level"
    );
    assert!(
        *seen - sent_at >= Duration::from_millis(250),
        "held {:?}, less than the last level",
        *seen - sent_at
    );
    c.stop();
}
