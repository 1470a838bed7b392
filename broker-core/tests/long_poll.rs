//! Long polling: a pull with nothing to read waits for the next message, and no longer than
//! its deadline.

mod common;

use std::time::{Duration, Instant};

use broker_core::mesh::PullStatus;
use broker_core::BrokerError;
use common::*;

/// A pull of an empty queue of the other core, asked to wait 5 s, is answered as soon as a
/// message arrives, with that message.
#[test]
fn a_waiting_pull_returns_as_soon_as_a_message_arrives() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Poll", 4);
    let q = queue_on(&c, "Poll", 4, 1);
    let depth_before = c.on(1, |core| async move { core.mesh.inbox_depth() });
    let started = Instant::now();
    let waiting = c.spawn_on(0, move |core| async move {
        let mut r = pull_request("g", "Poll", q, 0);
        r.suspend_timeout_ms = 5_000;
        pull(&core, r).await
    });
    // The pull is parked on core 1 once core 1 is serving it for core 0.
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let depth = c.on(1, |core| async move { core.mesh.inbox_depth() });
        if depth > depth_before {
            break;
        }
        assert!(Instant::now() < deadline, "the pull never reached core 1");
        assert!(waiting.try_take().is_none(), "answered before any message");
        std::thread::yield_now();
    }
    assert!(waiting.try_take().is_none(), "answered before any message");
    c.on(1, move |core| async move {
        core.send("Poll", q, record("Poll", "wake", None, &[]), 1)
            .await
            .map(|_| ())
    })
    .expect("sent");
    let p = waiting.wait().expect("pulled");
    let waited = started.elapsed();
    assert_eq!(p.status, PullStatus::Found);
    assert_eq!(p.bodies(), ["wake"]);
    assert!(
        waited < Duration::from_secs(2),
        "answered {waited:?} after it started, not at the arrival"
    );
    c.stop();
}

/// A pull that finds nothing is answered empty at its deadline: not before, and not much
/// after; `long_polling_max_ms` caps what a client may ask.
#[test]
fn a_waiting_pull_is_answered_empty_at_its_deadline() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.long_polling_max_ms = 200);
    create_topic(&c, "Quiet", 4);
    for owner in [0, 1] {
        let q = queue_on(&c, "Quiet", 4, owner);
        let (p, waited) = c.on(0, move |core| async move {
            let started = Instant::now();
            let mut r = pull_request("g", "Quiet", q, 0);
            // Asks for a minute; the broker's cap is 200 ms.
            r.suspend_timeout_ms = 60_000;
            let p = pull(&core, r).await;
            (p, started.elapsed())
        });
        let p = p.expect("pulled");
        assert_eq!(p.status, PullStatus::NoNewMessage, "queue on core {owner}");
        assert!(p.messages.is_empty());
        assert_eq!(p.next_offset, 0);
        assert!(
            waited >= Duration::from_millis(200),
            "answered after {waited:?}, before its deadline"
        );
        assert!(
            waited < Duration::from_millis(700),
            "answered after {waited:?}, long past its deadline"
        );
    }
    c.stop();
}

/// A core whose inbox is full (its one permit held by a waiting pull, its one queued
/// request waiting behind it) answers the next forwarded send "busy" at once instead of
/// queueing it without bound; once the pulls end it serves again.
#[test]
fn a_full_inbox_answers_busy_at_once_and_serves_again_after() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.inbox_capacity = 1);
    create_topic(&c, "Crowded", 4);
    let q = queue_on(&c, "Crowded", 4, 1);
    let waiting_pull = move |core: std::rc::Rc<broker_core::Core>| async move {
        let mut r = pull_request("g", "Crowded", q, 0);
        r.suspend_timeout_ms = 5_000;
        pull(&core, r).await
    };
    let holding = c.spawn_on(0, waiting_pull);
    let deadline = Instant::now() + WAIT_MAX;
    while c.on(1, |core| async move { core.mesh.inbox_depth() }) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first pull never reached core 1"
        );
        std::thread::yield_now();
    }
    // Queued behind the first: core 0 runs its jobs in order, so this one is in core 1's
    // inbox before the send below is tried.
    let queued = c.spawn_on(0, waiting_pull);
    let started = Instant::now();
    let refused = c.on(0, move |core| async move {
        core.send("Crowded", q, record("Crowded", "refused", None, &[]), 1)
            .await
            .map(|_| ())
    });
    assert!(matches!(refused, Err(BrokerError::Busy(_))), "{refused:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "busy only after {:?}",
        started.elapsed()
    );
    // Core 1 stores a message of its own queue without the mesh; both pulls get it.
    c.on(1, move |core| async move {
        core.send("Crowded", q, record("Crowded", "wake", None, &[]), 1)
            .await
            .map(|_| ())
    })
    .expect("stored by the owner");
    assert_eq!(holding.wait().expect("pulled").bodies(), ["wake"]);
    assert_eq!(queued.wait().expect("pulled").bodies(), ["wake"]);
    c.on(0, move |core| async move {
        core.send("Crowded", q, record("Crowded", "after", None, &[]), 1)
            .await
            .map(|_| ())
    })
    .expect("served again once the pulls ended");
    c.stop();
}
