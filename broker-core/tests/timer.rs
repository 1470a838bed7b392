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
