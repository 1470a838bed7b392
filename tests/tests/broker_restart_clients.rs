//! Clients through a broker's kill -9 and restart on the same data directory, which brings it
//! back on new ports: a push consumer and a producer that knew the old addresses carry on
//! within seconds of the broker being back, not at their 20-30 s periodic route refresh, and
//! nothing acknowledged before or after the restart is missed.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{ConsumeFrom, ConsumeStatus, Message, PushConsumer};
use integration::{producer, start_broker, wait_for, Cluster};

const TOPIC: &str = "Restarted";
/// From the restarted broker's ready line to the consumer having every new message. The old
/// clients waited for the consumer's rebalance (20 s) or the route refresh (30 s).
const BACK_WITHIN: Duration = Duration::from_secs(8);

type Seen = Arc<Mutex<BTreeSet<String>>>;

fn missing(seen: &Seen, ids: &[String]) -> Vec<String> {
    let seen = seen.lock().unwrap();
    ids.iter()
        .filter(|id| !seen.contains(*id))
        .cloned()
        .collect()
}

#[test]
fn a_push_consumer_and_a_producer_carry_on_at_once_after_a_broker_restart() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, TOPIC, 2);

    // The client defaults for everything that refreshes routes (rebalance every 20 s, route
    // refresh every 30 s): only a failed connection may make them look again.
    let seen: Seen = Arc::default();
    let consumer = PushConsumer::builder()
        .namesrv(&ns)
        .group("restart-group")
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFrom::First)
        .build()
        .unwrap();
    let log = Arc::clone(&seen);
    consumer
        .start(move |msgs| {
            let mut l = log.lock().unwrap();
            l.extend(msgs.iter().map(|m| m.msg_id.clone()));
            ConsumeStatus::Success
        })
        .unwrap();

    let p = producer(&ns);
    let before: Vec<String> = (0..20)
        .map(|i| {
            p.send(Message::new(TOPIC, format!("before-{i}")))
                .unwrap()
                .msg_id
        })
        .collect();
    let consumed = wait_for(Duration::from_secs(20), || {
        missing(&seen, &before).is_empty().then_some(())
    });
    assert!(
        consumed.is_some(),
        "not consumed before the restart: {:?}",
        missing(&seen, &before)
    );

    c.broker.kill9();
    let logs = c.logs();
    c.broker = start_broker(&c.opts, &logs);
    let back = Instant::now();

    // The producer still holds the old addresses: its first send finds them dead, takes a
    // fresh route and succeeds on a retry, within its own 5 s send timeout.
    let mut after = Vec::new();
    let first = wait_for(BACK_WITHIN, || p.send(Message::new(TOPIC, "after-0")).ok());
    let first = first.unwrap_or_else(|| {
        panic!(
            "no send succeeded {:?} after the restart; broker stderr:\n{}",
            back.elapsed(),
            c.broker.stderr()
        )
    });
    after.push(first.msg_id);
    for i in 1..20 {
        after.push(
            p.send(Message::new(TOPIC, format!("after-{i}")))
                .unwrap()
                .msg_id,
        );
    }
    let sent_after = back.elapsed();

    let resumed = wait_for(BACK_WITHIN.saturating_sub(back.elapsed()), || {
        missing(&seen, &after).is_empty().then_some(())
    });
    assert!(
        resumed.is_some(),
        "{:?} after the broker came back (sends done at {sent_after:?}) the consumer still \
         lacks {} of {} new messages",
        back.elapsed(),
        missing(&seen, &after).len(),
        after.len()
    );
    eprintln!(
        "consuming again {:?} after the restart (first send {sent_after:?})",
        back.elapsed()
    );
    assert!(
        missing(&seen, &before).is_empty(),
        "acknowledged before the restart and lost: {:?}",
        missing(&seen, &before)
    );
    consumer.shutdown();
}
