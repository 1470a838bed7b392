//! The broker sends a request of its own to a client, on the client's own connection, and
//! brings back the client's answer: an admin asks the broker what a consumer is doing
//! (RocketMQ's consumer running info), and the consumer itself answers, whichever core
//! serves its connection and whichever core the admin reached.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use client::{Admin, ConsumeFrom, ConsumeStatus, PushConsumer};
use integration::{wait_for, Cluster};

#[test]
fn a_broker_asks_a_consumer_what_it_is_doing_and_gets_its_answer() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Asked", 4);
    let consumer = PushConsumer::builder()
        .namesrv(&ns)
        .group("asked-group")
        .subscribe("Asked", "*")
        .consume_from(ConsumeFrom::First)
        .build()
        .unwrap();
    consumer.start(|_| ConsumeStatus::Success).unwrap();
    let client_id = consumer.client_id().to_owned();
    let admin = Admin::new(&ns).unwrap();

    // Asked through the shared port a few times: the admin's connection lands on either
    // core, and the consumer's connection is on core 0.
    for _ in 0..4 {
        let info = wait_for(Duration::from_secs(10), || {
            admin.client_running_info(&c.broker.addr, &client_id).ok()
        })
        .expect("the broker never brought back the consumer's answer");
        assert_eq!(info.client_id, client_id);
        let group = info
            .groups
            .iter()
            .find(|g| g.group == "asked-group")
            .unwrap_or_else(|| panic!("the consumer did not name its group: {info:?}"));
        assert!(group.topics.iter().any(|t| t == "Asked"), "{info:?}");
    }

    // An unknown client, and a client gone: a clear "not found", not a hang.
    let err = admin
        .client_running_info(&c.broker.addr, "nobody@0")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no connection of client nobody@0"), "{err}");
    consumer.shutdown();
    // An ask that meets the connection closing is told so at once (not a timeout); once the
    // broker has seen the close, the answer is "no connection".
    let mut answers = Vec::new();
    let gone = wait_for(Duration::from_secs(10), || {
        let e = admin
            .client_running_info(&c.broker.addr, &client_id)
            .err()
            .map(|e| e.to_string());
        let done = e.as_ref().is_some_and(|e| e.contains("no connection"));
        answers.push(e);
        done.then_some(())
    });
    assert!(
        gone.is_some(),
        "the broker still reaches a consumer that shut down: {answers:?}"
    );
    assert!(
        answers
            .iter()
            .flatten()
            .all(|e| e.contains("no connection") || e.contains("closed before it answered")),
        "a closing consumer's connection is not reported as a timeout: {answers:?}"
    );
}
