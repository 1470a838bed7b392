//! The kernel's views for RocketMQ 5.5's lite admin requests: a core's counts, one lite
//! topic, a client's subscriptions and pops, and a group's lag (total, most behind by count
//! and by age, and on one lite topic in the lite topic's own positions).

mod common;

use broker_core::lite::{
    LiteLag, LitePop, LiteSubscription, LiteTopicLag, StartAt, SubAction, PROPERTY_LITE_TOPIC,
};
use broker_core::topics::Attributes;
use broker_core::BrokerError;
use common::*;
use message::RecordView;

const TOPIC: &str = "AdminViews";

fn create(c: &Cluster) {
    let cfg = topic(TOPIC, 4);
    let attributes = Attributes::from([("message.type".to_owned(), "LITE".to_owned())]);
    c.on(0, move |core| async move {
        core.create_topic_with(cfg, Some(attributes)).await
    })
    .expect("the topic is created");
}

fn send(c: &Cluster, lite: &str, n: usize) {
    let lite = lite.to_owned();
    c.on(0, move |core| async move {
        for k in 0..n {
            let rec = record(
                TOPIC,
                &format!("{lite}#{k}"),
                None,
                &[(PROPERTY_LITE_TOPIC, &lite)],
            );
            core.lite_send(TOPIC, &lite, rec).await?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
}

fn subscribe(c: &Cluster, group: &str, client: &str, lites: &[&str]) {
    let sub = LiteSubscription {
        group: group.into(),
        topic: TOPIC.into(),
        client: client.into(),
        action: SubAction::Replace,
        lite_topics: lites.iter().map(|l| (*l).to_owned()).collect(),
        start: StartAt::Oldest,
        exclusive: false,
    };
    c.on(0, move |core| async move { core.lite_subscribe(sub).await })
        .expect("subscribed");
}

#[test]
fn a_groups_lag_is_counted_per_lite_topic_and_ranked_by_count_and_age() {
    let c = Cluster::start(1, 1);
    create(&c);
    // Sent in this order: a's messages are the oldest.
    send(&c, "a", 4);
    send(&c, "b", 2);
    send(&c, "c", 1);
    subscribe(&c, "g1", "client-1", &["a", "b", "c"]);
    subscribe(&c, "g2", "client-2", &["a"]);
    // client-1 takes everything and acks a's first two messages only.
    let popped = c
        .on(0, |core| async move {
            core.lite_pop(LitePop {
                group: "g1".into(),
                topic: TOPIC.into(),
                client: "client-1".into(),
                max_messages: 32,
                invisible_ms: 300_000,
                poll_ms: 0,
                max_attempts: 16,
            })
            .await
        })
        .expect("popped");
    assert_eq!(popped.messages.len(), 7);
    let acked: Vec<String> = popped
        .messages
        .iter()
        .filter(|m| {
            let v = RecordView::parse(&m.record).expect("parses");
            matches!(&*String::from_utf8_lossy(v.body()), "a#0" | "a#1")
        })
        .map(|m| m.receipt_handle.clone())
        .collect();
    assert_eq!(acked.len(), 2);
    c.on(0, move |core| async move {
        for h in acked {
            core.lite_ack("g1", TOPIC, &h, None).await?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("acked");

    // g1 is 2 behind on a (its two unacked), 2 on b, 1 on c.
    let lag = c
        .on(0, |core| async move {
            core.lite_group_lag("g1", TOPIC, 2).await
        })
        .expect("lag");
    assert_eq!(lag.total, 5);
    let names = |v: &[LiteLag]| -> Vec<(String, u64)> {
        v.iter().map(|l| (l.lite_topic.clone(), l.lag())).collect()
    };
    assert_eq!(names(&lag.by_count), [("a".into(), 2), ("b".into(), 2)]);
    assert_eq!(names(&lag.by_time), [("a".into(), 2), ("b".into(), 2)]);
    assert!(lag.by_time[0].earliest_unconsumed_ms <= lag.by_time[1].earliest_unconsumed_ms);
    assert_eq!(
        lag.earliest_unconsumed_ms,
        lag.by_time[0].earliest_unconsumed_ms
    );
    assert!(lag.earliest_unconsumed_ms > 0);
    // Without a topK: the totals, no lists.
    let lag0 = c
        .on(0, |core| async move {
            core.lite_group_lag("g1", TOPIC, 0).await
        })
        .expect("lag");
    assert_eq!(
        (lag0.total, lag0.earliest_unconsumed_ms),
        (5, lag.earliest_unconsumed_ms)
    );
    assert!(lag0.by_count.is_empty() && lag0.by_time.is_empty());

    // One lite topic, in its own positions: a keeps 4 (g2 has consumed none of them).
    let at = |group: &'static str, lite: &'static str| {
        c.on(0, move |core| async move {
            core.lite_topic_lag(group, TOPIC, lite).await
        })
        .expect("lag")
    };
    let LiteTopicLag::At(a1) = at("g1", "a") else {
        panic!("g1 has a cursor on a");
    };
    assert_eq!((a1.kept, a1.consumed, a1.lag()), (4, 2, 2));
    assert!(a1.last_consumed_ms > 0 && a1.earliest_unconsumed_ms >= a1.last_consumed_ms);
    let LiteTopicLag::At(a2) = at("g2", "a") else {
        panic!("g2 has a cursor on a");
    };
    assert_eq!((a2.kept, a2.consumed, a2.last_consumed_ms), (4, 0, 0));
    assert_eq!(at("g2", "b"), LiteTopicLag::NoCursor);
    assert_eq!(at("g1", "never-sent"), LiteTopicLag::NotHeld);

    // The lite topic, the clients, the core.
    let a = c
        .on(
            0,
            |core| async move { core.lite_topic_view(TOPIC, "a").await },
        )
        .expect("view");
    assert!(a.owned && a.held);
    assert_eq!(a.kept, 4);
    assert_eq!(
        a.subscribers,
        [
            ("client-1".to_owned(), "g1".to_owned()),
            ("client-2".to_owned(), "g2".to_owned())
        ]
    );
    let (one, two) = c.on(0, |core| async move {
        (
            core.lite_client_view("g1", TOPIC, "client-1"),
            core.lite_client_view("g2", TOPIC, "client-2"),
        )
    });
    assert_eq!(
        one.lite_topics,
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    assert!(one.access_ms > 0 && one.consume_ms == one.access_ms);
    assert_eq!(two.lite_topics, Some(vec!["a".into()]));
    assert_eq!(
        (two.access_ms, two.consume_ms),
        (-1, 0),
        "client-2 never popped"
    );
    let view = c
        .on(0, |core| async move { core.lite_view().await })
        .expect("view");
    assert_eq!(view.lite_topics, 3);
    assert_eq!(view.subscriptions, 4);
    assert_eq!(view.cursors, 4, "g1 on a, b, c; g2 on a");
    assert_eq!(view.clients, 2);
    assert_eq!(view.by_parent, [(TOPIC.to_owned(), 3)]);
    let groups = c
        .on(0, |core| async move { core.lite_group_parents().await })
        .expect("groups");
    assert_eq!(
        groups,
        [
            ("g1".to_owned(), TOPIC.to_owned()),
            ("g2".to_owned(), TOPIC.to_owned())
        ]
    );
    c.stop();
}

#[test]
fn each_core_answers_for_the_lite_topics_it_owns() {
    let c = Cluster::start(2, 2);
    create(&c);
    let names = ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7"];
    for l in names {
        send(&c, l, 1);
    }
    subscribe(&c, "g", "client", &names);
    let mut held = 0;
    let mut subscribed = 0;
    for core in 0..2 {
        let view = c
            .on(core, |core| async move { core.lite_view().await })
            .expect("view");
        held += view.lite_topics;
        subscribed += view.subscriptions;
        let mine = c.on(core, |core| async move {
            core.lite_client_view("g", TOPIC, "client")
                .lite_topics
                .unwrap_or_default()
        });
        assert_eq!(mine.len() as u64, view.subscriptions, "core {core}");
        for l in names {
            let v = c
                .on(core, move |core| async move {
                    core.lite_topic_view(TOPIC, l).await
                })
                .expect("view");
            assert_eq!(v.owned, mine.contains(&l.to_owned()), "core {core}, {l}");
            assert_eq!(v.held, v.owned, "core {core}, {l}");
        }
    }
    assert_eq!((held, subscribed), (8, 8));
    c.stop();
}
