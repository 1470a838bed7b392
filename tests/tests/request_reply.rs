//! Request-reply through the native client: a request answered by a consumer's reply, which
//! the broker pushes over the requester's connection (across cores: the broker runs two);
//! a request nobody answers times out with a clear error; a reply whose requester is gone
//! is refused to the replier and logged by the broker.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::reply::prop;
use client::{create_reply_message, ClientError, ConsumeStatus, Message, PullConsumer};
use integration::{drain_topic, group_member, producer, wait_for, Cluster};

#[test]
fn a_request_is_answered_over_the_requesters_connection() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Requests", 4);

    // The responder: a push consumer answering each request with its body reversed.
    let replier = Arc::new(producer(&ns));
    let responder = group_member(&ns, "responders", "Requests").build().unwrap();
    let r = Arc::clone(&replier);
    responder
        .start(move |msgs| {
            for m in msgs {
                let body: String = String::from_utf8_lossy(&m.body).chars().rev().collect();
                let reply = create_reply_message(m, format!("re:{body}")).unwrap();
                if r.reply(reply).is_err() {
                    return ConsumeStatus::ReconsumeLater;
                }
            }
            ConsumeStatus::Success
        })
        .unwrap();
    // The responder holds the four request queues before anything is asked.
    wait_for(Duration::from_secs(30), || {
        let held = responder
            .assigned_queues()
            .iter()
            .filter(|q| q.topic == "Requests")
            .count();
        (held == 4).then_some(())
    })
    .expect("the responder takes the request queues");

    let requester = producer(&ns);
    for i in 0..6 {
        let started = Instant::now();
        let answer = requester
            .request(
                Message::new("Requests", format!("ping-{i}")),
                Duration::from_secs(15),
            )
            .unwrap_or_else(|e| panic!("request {i} failed after {:?}: {e}", started.elapsed()));
        let want: String = format!("ping-{i}").chars().rev().collect();
        assert_eq!(answer.body, format!("re:{want}").into_bytes());
        assert_eq!(answer.topic, client::reply_topic("DefaultCluster"));
        assert_eq!(
            answer.property(prop::REPLY_TO_CLIENT),
            Some(requester.client_id())
        );
        assert!(answer.property(prop::CORRELATION_ID).is_some());
    }

    // The request itself was stored like any message, carrying who waits for the reply.
    let reader = PullConsumer::new(&ns, "request-reader").unwrap();
    let requests = drain_topic(&reader, "Requests", Duration::from_secs(10));
    assert_eq!(requests.len(), 6);
    for m in &requests {
        assert_eq!(
            m.property(prop::REPLY_TO_CLIENT),
            Some(requester.client_id())
        );
        assert_eq!(m.property(prop::CLUSTER), Some("DefaultCluster"));
        assert_eq!(m.property(prop::TTL), Some("15000"));
    }
    // With store_reply_message_enable (the default) the replies are stored as well.
    let replies = wait_for(Duration::from_secs(10), || {
        let got = drain_topic(
            &reader,
            &client::reply_topic("DefaultCluster"),
            Duration::from_secs(10),
        );
        (got.len() >= 6).then_some(got)
    })
    .expect("the six replies are stored in the reply topic");
    assert!(replies
        .iter()
        .all(|m| String::from_utf8_lossy(&m.body).starts_with("re:")));

    // A requester that asked once has its connection on one core only; the reply topic has
    // a queue on each core, and the replier's round robin sends one reply to each: both
    // reach the requester (which takes a reply nobody waits for any more as well), so one
    // of them was pushed across cores.
    let once = producer(&ns);
    once.request(Message::new("Requests", "once"), Duration::from_secs(15))
        .unwrap();
    let route = client::Admin::new(&ns)
        .unwrap()
        .topic_route(&client::reply_topic("DefaultCluster"))
        .unwrap();
    let cores: BTreeSet<&str> = route
        .write_queues()
        .iter()
        .map(|t| t.addr.as_str())
        .collect();
    assert_eq!(
        cores.len(),
        2,
        "the reply topic's queues: {:?}",
        route.write_queues()
    );
    let asked = drain_topic(&reader, "Requests", Duration::from_secs(10));
    let request = asked
        .iter()
        .find(|m| m.property(prop::REPLY_TO_CLIENT) == Some(once.client_id()))
        .expect("the single request is stored");
    for _ in 0..2 {
        replier
            .reply(create_reply_message(request, "again").unwrap())
            .unwrap();
    }
    responder.shutdown();
}

#[test]
fn a_request_nobody_answers_times_out_with_a_clear_error() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Unanswered", 2);
    let requester = producer(&ns);
    let started = Instant::now();
    let err = requester
        .request(
            Message::new("Unanswered", "hello?"),
            Duration::from_millis(800),
        )
        .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "gave up early"
    );
    match &err {
        ClientError::RequestTimeout {
            topic, timeout_ms, ..
        } => assert_eq!((topic.as_str(), *timeout_ms), ("Unanswered", 800)),
        other => panic!("expected a request timeout, got {other}"),
    }
    assert!(err.to_string().contains("no reply"), "{err}");
    // The producer is still good for ordinary sends.
    requester
        .send(Message::new("Unanswered", "plain send"))
        .unwrap();
}

#[test]
fn a_reply_to_a_requester_that_is_gone_is_refused_and_logged() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Abandoned", 2);
    let requester = producer(&ns);
    let err = requester
        .request(
            Message::new("Abandoned", "answer me later"),
            Duration::from_millis(300),
        )
        .unwrap_err();
    assert!(matches!(err, ClientError::RequestTimeout { .. }), "{err}");
    requester.shutdown();
    drop(requester);

    // A consumer picks the request up now, and answers a requester that is gone.
    let reader = PullConsumer::new(&ns, "late-responders").unwrap();
    let requests = drain_topic(&reader, "Abandoned", Duration::from_secs(10));
    assert_eq!(requests.len(), 1);
    let reply = create_reply_message(&requests[0], "too late").unwrap();
    let replier = producer(&ns);
    let err = replier.reply(reply).unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    let logged = wait_for(Duration::from_secs(5), || {
        c.broker
            .stderr()
            .contains("a reply is dropped")
            .then_some(())
    });
    assert!(
        logged.is_some(),
        "the broker says why the reply was dropped"
    );

    // A message that is no request cannot be answered.
    let plain = replier.send(Message::new("Abandoned", "plain")).unwrap();
    let all = drain_topic(&reader, "Abandoned", Duration::from_secs(10));
    let m = all.iter().find(|m| m.msg_id == plain.msg_id).unwrap();
    assert!(create_reply_message(m, "x").is_err());
}
