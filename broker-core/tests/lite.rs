//! Lite Topics (RocketMQ 5.5) on the kernel: lite topics created on first send inside a
//! LITE parent, each consumed in order by the clients that subscribed it, one batch at a
//! time per group; kept across a restart; capped by `lite_topics_max`.

mod common;

use std::time::{Duration, Instant};

use broker_core::lite::{
    LitePop, LiteSubscription, StartAt, SubAction, ATTRIBUTE_BIND_TOPIC, ATTRIBUTE_SUB_MODEL,
    PROPERTY_LITE_TOPIC,
};
use broker_core::mesh::SubGroupOp;
use broker_core::pop::Popped;
use broker_core::sub_groups::GroupConfig;
use broker_core::topics::Attributes;
use broker_core::BrokerError;
use common::*;
use message::RecordView;

const TOPIC: &str = "AgentReplies";
const GROUP: &str = "agents";

fn create(c: &Cluster, queues: u32) {
    let cfg = topic(TOPIC, queues);
    let attributes = Attributes::from([("message.type".to_owned(), "LITE".to_owned())]);
    c.on(0, move |core| async move {
        core.create_topic_with(cfg, Some(attributes)).await
    })
    .expect("the topic is created");
}

/// Sends `bodies` to lite topic `lite`, from core `core`.
fn send(c: &Cluster, core: u16, lite: &str, bodies: &[&str]) -> Result<(), BrokerError> {
    let lite = lite.to_owned();
    let bodies: Vec<String> = bodies.iter().map(|b| (*b).to_owned()).collect();
    c.on(core, move |core| async move {
        for b in bodies {
            let rec = record(TOPIC, &b, None, &[(PROPERTY_LITE_TOPIC, &lite)]);
            core.lite_send(TOPIC, &lite, rec).await?;
        }
        Ok::<_, BrokerError>(())
    })
}

fn subscribe(c: &Cluster, client: &str, action: SubAction, lites: &[&str], start: StartAt) {
    let sub = LiteSubscription {
        group: GROUP.into(),
        topic: TOPIC.into(),
        client: client.into(),
        action,
        lite_topics: lites.iter().map(|l| (*l).to_owned()).collect(),
        start,
        exclusive: false,
    };
    // To one core, as RocketMQ's Java SDK 5.2.0 sends it to its access point: every core
    // hears of it.
    c.on(0, move |core| async move { core.lite_subscribe(sub).await })
        .expect("subscribed");
}

fn pop_req(client: &str, max: u32, invisible_ms: u64) -> LitePop {
    LitePop {
        group: GROUP.into(),
        topic: TOPIC.into(),
        client: client.into(),
        max_messages: max,
        invisible_ms,
        poll_ms: 0,
        max_attempts: 16,
    }
}

/// A pop on every core, merged.
fn pop(c: &Cluster, r: &LitePop) -> Popped {
    let mut all = Popped::default();
    for core in 0..c.cores {
        let r = r.clone();
        let p = c
            .on(core, move |core| async move { core.lite_pop(r).await })
            .expect("popped");
        all.messages.extend(p.messages);
    }
    all
}

/// (lite topic, body, attempt) of each message, in the order handed out.
fn seen(p: &Popped) -> Vec<(String, String, u32)> {
    p.messages
        .iter()
        .map(|m| {
            let v = RecordView::parse(&m.record).expect("parses");
            (
                v.property(PROPERTY_LITE_TOPIC).unwrap_or("").to_owned(),
                String::from_utf8_lossy(v.body()).into_owned(),
                m.attempt,
            )
        })
        .collect()
}

/// Acks every message of `p`, naming its lite topic as RocketMQ's clients do.
fn ack(c: &Cluster, p: &Popped) {
    for core in 0..c.cores {
        let handles: Vec<(String, String)> = p
            .messages
            .iter()
            .map(|m| {
                let v = RecordView::parse(&m.record).expect("parses");
                let lite = v.property(PROPERTY_LITE_TOPIC).unwrap_or("").to_owned();
                (m.receipt_handle.clone(), lite)
            })
            .collect();
        // Each core answers for the messages of its shards; the others refuse.
        c.on(core, move |core| async move {
            for (h, lite) in handles {
                let _ = core.lite_ack(GROUP, TOPIC, &h, Some(&lite)).await;
            }
        });
    }
}

#[test]
fn each_lite_topic_is_consumed_in_order_one_batch_at_a_time() {
    let c = Cluster::start(2, 2);
    create(&c, 8);
    send(&c, 0, "session-a", &["a1", "a2", "a3"]).expect("sent");
    send(&c, 1, "session-b", &["b1", "b2"]).expect("sent");
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &["session-a", "session-b"],
        StartAt::Oldest,
    );
    // Batches of at most 2: whichever cores the two lite topics are on, a few pops take
    // both first batches and nothing past them.
    let mut first = Popped::default();
    for _ in 0..4 {
        first
            .messages
            .extend(pop(&c, &pop_req("client-1", 2, 60_000)).messages);
    }
    let got = seen(&first);
    assert_eq!(got.len(), 4, "{got:?}");
    let of = |l: &str| -> Vec<String> {
        got.iter()
            .filter(|g| g.0 == l)
            .map(|g| g.1.clone())
            .collect()
    };
    assert_eq!(of("session-a"), ["a1", "a2"]);
    assert_eq!(of("session-b"), ["b1", "b2"]);
    // While a batch of a lite topic is out, it gives nothing more.
    assert!(pop(&c, &pop_req("client-1", 32, 60_000))
        .messages
        .is_empty());
    ack(&c, &first);
    let next = seen(&pop(&c, &pop_req("client-1", 32, 60_000)));
    assert_eq!(next, [("session-a".into(), "a3".into(), 1)]);
    c.stop();
}

#[test]
fn only_subscribed_lite_topics_are_delivered_and_a_late_subscription_gets_the_backlog() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    send(&c, 0, "task-1", &["t1"]).expect("sent");
    send(&c, 0, "task-2", &["t2"]).expect("sent");
    subscribe(&c, "client-1", SubAction::Add, &["task-1"], StartAt::Oldest);
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(seen(&p), [("task-1".into(), "t1".into(), 1)]);
    ack(&c, &p);
    // Another client of the group takes task-2 later: it was kept for it.
    subscribe(&c, "client-2", SubAction::Add, &["task-2"], StartAt::Oldest);
    let p2 = pop(&c, &pop_req("client-2", 32, 60_000));
    assert_eq!(seen(&p2), [("task-2".into(), "t2".into(), 1)]);
    // Unsubscribed, nothing more of task-1 reaches client-1.
    subscribe(
        &c,
        "client-1",
        SubAction::Remove,
        &["task-1"],
        StartAt::Oldest,
    );
    send(&c, 0, "task-1", &["t1-late"]).expect("sent");
    assert!(pop(&c, &pop_req("client-1", 32, 60_000))
        .messages
        .is_empty());
    // Latest: a group new to the lite topic skips what is there.
    send(&c, 0, "task-3", &["old"]).expect("sent");
    subscribe(&c, "client-1", SubAction::Add, &["task-3"], StartAt::Latest);
    assert!(pop(&c, &pop_req("client-1", 32, 60_000))
        .messages
        .is_empty());
    send(&c, 0, "task-3", &["new"]).expect("sent");
    assert_eq!(
        seen(&pop(&c, &pop_req("client-1", 32, 60_000))),
        [("task-3".into(), "new".into(), 1)]
    );
    c.stop();
}

/// Pops until something comes (bounded by `within`).
fn pop_until(c: &Cluster, r: &LitePop, within: Duration) -> Popped {
    let deadline = Instant::now() + within;
    loop {
        let p = pop(c, r);
        if !p.messages.is_empty() || Instant::now() >= deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_unacked_batch_comes_back_in_order_and_a_suspend_does_not_count() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    send(&c, 0, "chat", &["m1", "m2"]).expect("sent");
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &["chat"],
        StartAt::Oldest,
    );
    let first = pop(&c, &pop_req("client-1", 32, 200));
    assert_eq!(seen(&first).len(), 2);
    let again = pop_until(&c, &pop_req("client-1", 32, 60_000), Duration::from_secs(5));
    assert_eq!(
        seen(&again),
        [
            ("chat".into(), "m1".into(), 2),
            ("chat".into(), "m2".into(), 2)
        ]
    );
    // The client suspends m1 for a moment: it comes back with the same attempt.
    let h1 = again.messages[0].receipt_handle.clone();
    let renewed = c
        .on(0, move |core| async move {
            core.lite_change_invisible(GROUP, TOPIC, &h1, None, 200, true)
                .await
        })
        .expect("suspended");
    assert_ne!(renewed, again.messages[0].receipt_handle);
    // The old handle no longer acks.
    let old = again.messages[0].receipt_handle.clone();
    let refused = c.on(0, move |core| async move {
        core.lite_ack(GROUP, TOPIC, &old, None).await
    });
    assert!(
        matches!(refused, Err(BrokerError::NotFound(_))),
        "{refused:?}"
    );
    let h2 = again.messages[1].receipt_handle.clone();
    c.on(0, move |core| async move {
        core.lite_ack(GROUP, TOPIC, &h2, None).await
    })
    .expect("m2 acked");
    let back = pop_until(&c, &pop_req("client-1", 32, 60_000), Duration::from_secs(5));
    assert_eq!(seen(&back), [("chat".into(), "m1".into(), 2)]);
    c.stop();
}

#[test]
fn unacked_lite_messages_survive_a_restart() {
    let c = Cluster::start(2, 2);
    create(&c, 8);
    for i in 0..20 {
        send(&c, (i % 2) as u16, &format!("s{i}"), &["x", "y"]).expect("sent");
    }
    let lites: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let lite_refs: Vec<&str> = lites.iter().map(String::as_str).collect();
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &lite_refs,
        StartAt::Oldest,
    );
    // Half the lite topics consumed whole, the rest not at all.
    for _ in 0..4 {
        let p = pop(&c, &pop_req("client-1", 32, 60_000));
        let done: Vec<_> = p
            .messages
            .iter()
            .filter(|m| {
                let v = RecordView::parse(&m.record).expect("parses");
                let l = v.property(PROPERTY_LITE_TOPIC).unwrap_or("");
                l[1..].parse::<u32>().unwrap_or(0) < 10
            })
            .cloned()
            .collect();
        ack(
            &c,
            &Popped {
                messages: done,
                ..Default::default()
            },
        );
    }
    let c = c.restart(2);
    // Sessions subscribe again after a restart, as clients do.
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &lite_refs,
        StartAt::Oldest,
    );
    let mut got: Vec<(String, String)> = Vec::new();
    for _ in 0..10 {
        let p = pop(&c, &pop_req("client-1", 32, 60_000));
        if p.messages.is_empty() {
            break;
        }
        got.extend(seen(&p).into_iter().map(|(l, b, _)| (l, b)));
        ack(&c, &p);
    }
    for i in 10..20 {
        let l = format!("s{i}");
        let bodies: Vec<&str> = got
            .iter()
            .filter(|g| g.0 == l)
            .map(|g| g.1.as_str())
            .collect();
        assert_eq!(bodies, ["x", "y"], "lite topic {l} after the restart");
    }
    c.stop();
}

#[test]
fn sends_past_the_lite_topic_quota_are_refused() {
    let c = Cluster::start_with(1, 1, |cfg| cfg.lite_topics_max = 3);
    create(&c, 4);
    for i in 0..3 {
        send(&c, 0, &format!("q{i}"), &["m"]).expect("within the quota");
    }
    // A lite topic the broker holds takes more.
    send(&c, 0, "q0", &["more"]).expect("a known lite topic");
    let refused = send(&c, 0, "q3", &["m"]);
    assert!(
        matches!(refused, Err(BrokerError::LiteTopicQuota(_))),
        "{refused:?}"
    );
    c.stop();
}

#[test]
fn a_lite_send_needs_a_lite_parent_and_a_valid_name() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    create_topic(&c, "Plain", 4);
    let plain = c.on(0, |core| async move {
        let rec = record("Plain", "m", None, &[(PROPERTY_LITE_TOPIC, "x")]);
        core.lite_send("Plain", "x", rec).await.map(|_| ())
    });
    assert!(
        matches!(plain, Err(BrokerError::MessageIllegal(_))),
        "{plain:?}"
    );
    let bad = send(&c, 0, "no spaces", &["m"]);
    assert!(matches!(bad, Err(BrokerError::BadRequest(_))), "{bad:?}");
    c.stop();
}

#[test]
fn subscriptions_added_one_by_one_after_a_restart_get_every_lite_topic() {
    let c = Cluster::start(2, 2);
    create(&c, 8);
    let lites = ["task-1", "task-2", "task-3", "task-4"];
    for k in 0..5 {
        for l in lites {
            send(&c, 0, l, &[&format!("{l}#{k}")]).expect("sent");
        }
    }
    let c = c.restart(2);
    subscribe(&c, "client-1", SubAction::Replace, &[], StartAt::Oldest);
    for l in lites {
        subscribe(&c, "client-1", SubAction::Add, &[l], StartAt::Oldest);
    }
    let mut got = 0;
    for _ in 0..20 {
        let p = pop(&c, &pop_req("client-1", 32, 60_000));
        got += p.messages.len();
        ack(&c, &p);
    }
    assert_eq!(got, 20);
    c.stop();
}

#[test]
fn subscriptions_past_the_client_quota_are_refused() {
    let c = Cluster::start_with(2, 2, |cfg| cfg.lite_subscription_quota = 3);
    create(&c, 8);
    let sub = |action, lites: &[&str]| LiteSubscription {
        group: GROUP.into(),
        topic: TOPIC.into(),
        client: "client-1".into(),
        action,
        lite_topics: lites.iter().map(|l| (*l).to_owned()).collect(),
        start: StartAt::Oldest,
        exclusive: false,
    };
    let whole = sub(SubAction::Replace, &["a", "b", "c", "d"]);
    let refused = c.on(
        1,
        move |core| async move { core.lite_subscribe(whole).await },
    );
    assert!(
        matches!(refused, Err(BrokerError::LiteSubscriptionQuota(_))),
        "{refused:?}"
    );
    let three = sub(SubAction::Replace, &["a", "b", "c"]);
    c.on(
        1,
        move |core| async move { core.lite_subscribe(three).await },
    )
    .expect("within the quota");
    let held: usize = (0..c.cores)
        .map(|core| {
            c.on(core, |core| async move {
                core.lite_subscriptions(GROUP, TOPIC, "client-1").len()
            })
        })
        .sum();
    assert_eq!(held, 3, "the cores hold the set between them");
    c.stop();
}

/// A client that receives from one core only (RocketMQ's LiteSimpleConsumer) gets, through
/// `lite_pop_every_core`, its lite topics of every core, within its batch size; a plain lite
/// pop of that core gets only the lite topics the core owns.
#[test]
fn a_pop_on_every_core_gets_the_lite_topics_of_both_cores_within_the_batch() {
    let c = Cluster::start(2, 2);
    create(&c, 8);
    let lites: Vec<String> = (0..8).map(|i| format!("chat-{i}")).collect();
    let names: Vec<&str> = lites.iter().map(String::as_str).collect();
    for l in &names {
        send(&c, 0, l, &[&format!("{l}#0")]).expect("sent");
    }
    // Another group's client, which pops core 0 alone.
    let sub = LiteSubscription {
        group: "one-core".into(),
        topic: TOPIC.into(),
        client: "one-core".into(),
        action: SubAction::Replace,
        lite_topics: lites.clone(),
        start: StartAt::Oldest,
        exclusive: false,
    };
    c.on(0, move |core| async move { core.lite_subscribe(sub).await })
        .expect("subscribed");
    subscribe(&c, "simple", SubAction::Replace, &names, StartAt::Oldest);
    let r = LitePop {
        group: "one-core".into(),
        ..pop_req("one-core", 32, 60_000)
    };
    let own = c
        .on(0, move |core| async move { core.lite_pop(r).await })
        .expect("popped");
    assert!(
        !own.messages.is_empty() && own.messages.len() < names.len(),
        "core 0 owns some of the lite topics, not all: {:?}",
        seen(&own)
    );
    let every = |max: u32| {
        let r = pop_req("simple", max, 60_000);
        c.on(
            1,
            move |core| async move { core.lite_pop_every_core(r).await },
        )
        .expect("popped")
    };
    let first = every(3);
    assert_eq!(first.messages.len(), 3, "{:?}", seen(&first));
    let rest = every(32);
    let mut got: Vec<String> = seen(&first)
        .into_iter()
        .chain(seen(&rest))
        .map(|g| g.0)
        .collect();
    got.sort();
    assert_eq!(got, lites, "every lite topic once, from both cores");
    assert!(every(32).messages.is_empty(), "nothing more while out");
    c.stop();
}

#[test]
fn a_group_that_comes_after_everything_was_consumed_gets_the_next_message() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    send(&c, 0, "early", &["first"]).expect("sent");
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &["early"],
        StartAt::Oldest,
    );
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(p.messages.len(), 1);
    ack(&c, &p);
    // Nothing is kept any more; another group comes.
    let other = LitePop {
        group: "other-group".into(),
        ..pop_req("client-9", 32, 60_000)
    };
    let sub = LiteSubscription {
        group: "other-group".into(),
        topic: TOPIC.into(),
        client: "client-9".into(),
        action: SubAction::Replace,
        lite_topics: vec!["early".into()],
        start: StartAt::Oldest,
        exclusive: false,
    };
    c.on(0, move |core| async move { core.lite_subscribe(sub).await })
        .expect("subscribed");
    let first = other.clone();
    let none = c
        .on(0, move |core| async move { core.lite_pop(first).await })
        .expect("popped");
    assert!(
        none.messages.is_empty(),
        "the first message was consumed and dropped"
    );
    send(&c, 0, "early", &["second"]).expect("sent");
    let got = c
        .on(0, move |core| async move { core.lite_pop(other).await })
        .expect("popped");
    let bodies: Vec<String> = seen(&got).into_iter().map(|g| g.1).collect();
    assert_eq!(bodies, ["second"]);
    c.stop();
}

/// Sets `GROUP`'s attributes, as `updateSubGroup` with `+key=value` does.
fn group_attributes(c: &Cluster, attributes: &[(&str, &str)]) {
    let mut fields = serde_json::Map::new();
    fields.insert(GroupConfig::NAME_KEY.into(), GROUP.into());
    let attrs: serde_json::Map<String, serde_json::Value> = attributes
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    fields.insert("attributes".into(), attrs.into());
    let cfg = GroupConfig::new(fields).expect("a valid group config");
    c.on(1 % c.cores, move |core| async move {
        core.sub_group(SubGroupOp::Upsert(cfg)).await
    })
    .expect("upserted");
}

fn subscriptions(c: &Cluster, client: &str) -> Vec<String> {
    let mut all = Vec::new();
    for core in 0..c.cores {
        let client = client.to_owned();
        all.extend(c.on(core, move |core| async move {
            core.lite_subscriptions(GROUP, TOPIC, &client)
        }));
    }
    all.sort();
    all
}

#[test]
fn in_an_exclusive_group_a_lite_topic_belongs_to_the_client_that_subscribed_it_last() {
    let c = Cluster::start(2, 2);
    create(&c, 8);
    group_attributes(&c, &[(ATTRIBUTE_SUB_MODEL, "Exclusive")]);
    // client-1's Telemetry stream is on core 1; the lite topics live on both cores.
    c.link(1).log().connected.insert("client-1".into());
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &["chat-1", "chat-2", "chat-3"],
        StartAt::Oldest,
    );
    send(&c, 0, "chat-1", &["m1"]).expect("sent");
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(seen(&p), [("chat-1".into(), "m1".into(), 1)]);
    ack(&c, &p);

    // client-2 takes chat-1 and chat-3: client-1 is told, on the core it is connected to.
    subscribe(
        &c,
        "client-2",
        SubAction::Add,
        &["chat-1", "chat-3"],
        StartAt::Oldest,
    );
    assert_eq!(subscriptions(&c, "client-1"), ["chat-2"]);
    assert_eq!(subscriptions(&c, "client-2"), ["chat-1", "chat-3"]);
    let mut told = c.link(1).log().lite_unsubscribed.clone();
    told.sort();
    assert_eq!(
        told,
        [
            ("client-1".to_owned(), "chat-1".to_owned()),
            ("client-1".to_owned(), "chat-3".to_owned())
        ]
    );
    assert!(c.link(0).log().lite_unsubscribed.is_empty());

    // The group goes on where it was: client-2 gets the next message, client-1 nothing.
    send(&c, 0, "chat-1", &["m2"]).expect("sent");
    assert!(pop(&c, &pop_req("client-1", 32, 60_000))
        .messages
        .is_empty());
    assert_eq!(
        seen(&pop(&c, &pop_req("client-2", 32, 60_000))),
        [("chat-1".into(), "m2".into(), 1)]
    );

    // client-1's periodic whole set still names chat-1: it does not take it back, and is
    // told again.
    subscribe(
        &c,
        "client-1",
        SubAction::Replace,
        &["chat-1", "chat-2", "chat-3"],
        StartAt::Oldest,
    );
    assert_eq!(subscriptions(&c, "client-1"), ["chat-2"]);
    assert_eq!(subscriptions(&c, "client-2"), ["chat-1", "chat-3"]);
    assert_eq!(c.link(1).log().lite_unsubscribed.len(), 4);

    // Subscribed again one by one, it is client-1's again.
    subscribe(&c, "client-1", SubAction::Add, &["chat-3"], StartAt::Oldest);
    assert_eq!(subscriptions(&c, "client-1"), ["chat-2", "chat-3"]);
    assert_eq!(subscriptions(&c, "client-2"), ["chat-1"]);
    c.stop();
}

#[test]
fn in_a_shared_group_clients_subscribe_the_same_lite_topic_side_by_side() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    c.link(0).log().connected.insert("client-1".into());
    subscribe(&c, "client-1", SubAction::Add, &["chat-1"], StartAt::Oldest);
    subscribe(&c, "client-2", SubAction::Add, &["chat-1"], StartAt::Oldest);
    assert_eq!(subscriptions(&c, "client-1"), ["chat-1"]);
    assert_eq!(subscriptions(&c, "client-2"), ["chat-1"]);
    assert!(c.link(0).log().lite_unsubscribed.is_empty());
    c.stop();
}

#[test]
fn a_group_bound_to_another_parent_may_not_subscribe_this_one() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    group_attributes(&c, &[(ATTRIBUTE_BIND_TOPIC, "SomeOtherParent")]);
    let sub = LiteSubscription {
        group: GROUP.into(),
        topic: TOPIC.into(),
        client: "client-1".into(),
        action: SubAction::Add,
        lite_topics: vec!["chat-1".into()],
        start: StartAt::Oldest,
        exclusive: false,
    };
    let refused = c.on(0, move |core| async move { core.lite_subscribe(sub).await });
    match refused {
        Err(BrokerError::BadRequest(why)) => assert!(why.contains(ATTRIBUTE_BIND_TOPIC), "{why}"),
        other => panic!("a subscription outside the bound topic was not refused: {other:?}"),
    }
    group_attributes(&c, &[(ATTRIBUTE_BIND_TOPIC, TOPIC)]);
    subscribe(&c, "client-1", SubAction::Add, &["chat-1"], StartAt::Oldest);
    assert_eq!(subscriptions(&c, "client-1"), ["chat-1"]);
    c.stop();
}

#[test]
fn offset_options_move_a_group_within_a_lite_topic() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    // Another group keeps every message, so the first group can go back over them.
    let keeper = LiteSubscription {
        group: "keeper".into(),
        topic: TOPIC.into(),
        client: "keeper-1".into(),
        action: SubAction::Add,
        lite_topics: vec!["log".into()],
        start: StartAt::Oldest,
        exclusive: false,
    };
    c.on(
        0,
        move |core| async move { core.lite_subscribe(keeper).await },
    )
    .expect("subscribed");
    send(&c, 0, "log", &["l1", "l2", "l3", "l4"]).expect("sent");
    subscribe(&c, "client-1", SubAction::Add, &["log"], StartAt::Oldest);
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(p.messages.len(), 4);
    ack(&c, &p);
    let bodies = |p: &Popped| seen(p).into_iter().map(|s| s.1).collect::<Vec<_>>();

    // TAIL_N 2: the last two again.
    subscribe(&c, "client-1", SubAction::Add, &["log"], StartAt::Tail(2));
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(bodies(&p), ["l3", "l4"]);
    ack(&c, &p);
    // MIN: from the oldest kept.
    subscribe(&c, "client-1", SubAction::Add, &["log"], StartAt::Earliest);
    let p = pop(&c, &pop_req("client-1", 2, 60_000));
    assert_eq!(bodies(&p), ["l1", "l2"]);
    // MAX: past the end, the batch out dropped.
    subscribe(&c, "client-1", SubAction::Add, &["log"], StartAt::Latest);
    assert!(pop(&c, &pop_req("client-1", 32, 60_000))
        .messages
        .is_empty());
    send(&c, 0, "log", &["l5"]).expect("sent");
    assert_eq!(bodies(&pop(&c, &pop_req("client-1", 32, 60_000))), ["l5"]);
    // A whole set sent again moves no group.
    subscribe(
        &c,
        "keeper-1",
        SubAction::Replace,
        &["log"],
        StartAt::Latest,
    );
    let keeper_pop = LitePop {
        group: "keeper".into(),
        ..pop_req("keeper-1", 32, 60_000)
    };
    assert_eq!(
        bodies(&pop(&c, &keeper_pop)),
        ["l1", "l2", "l3", "l4", "l5"]
    );
    c.stop();
}

#[test]
fn an_ack_naming_the_wrong_lite_topic_still_acks_its_message() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    send(&c, 0, "job-1", &["j1"]).expect("sent");
    send(&c, 0, "job-2", &["j2"]).expect("sent");
    subscribe(
        &c,
        "client-1",
        SubAction::Add,
        &["job-1", "job-2"],
        StartAt::Oldest,
    );
    let p = pop(&c, &pop_req("client-1", 32, 60_000));
    assert_eq!(p.messages.len(), 2);
    let handles: Vec<String> = p
        .messages
        .iter()
        .map(|m| m.receipt_handle.clone())
        .collect();
    let acked = c.on(0, move |core| async move {
        let mut out = Vec::new();
        for (h, named) in handles.iter().zip([Some("job-9"), None]) {
            out.push(core.lite_ack(GROUP, TOPIC, h, named).await);
        }
        out
    });
    assert!(acked.iter().all(Result::is_ok), "{acked:?}");
    send(&c, 0, "job-1", &["j1-next"]).expect("sent");
    let bodies: Vec<String> = seen(&pop(&c, &pop_req("client-1", 32, 60_000)))
        .into_iter()
        .map(|s| s.1)
        .collect();
    assert_eq!(bodies, ["j1-next"]);
    c.stop();
}

#[test]
fn the_metrics_show_each_core_s_lite_topics_and_each_group_s_lite_backlog() {
    let c = Cluster::start(1, 1);
    create(&c, 4);
    send(&c, 0, "feed", &["f1", "f2", "f3"]).expect("sent");
    subscribe(&c, "client-1", SubAction::Add, &["feed"], StartAt::Oldest);
    let p = pop(&c, &pop_req("client-1", 1, 60_000));
    assert_eq!(p.messages.len(), 1);
    let queue = p.messages[0].queue_id;
    c.on(0, |core| async move { core.publish_backlogs() });
    let text = c.shared.metrics.render();
    let value = |prefix: &str| -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(
        value("corvus_lite_topics{core=\"0\"}").as_deref(),
        Some("1")
    );
    assert_eq!(
        value("corvus_lite_messages_kept{core=\"0\"}").as_deref(),
        Some("3")
    );
    assert_eq!(
        value("corvus_lite_subscriptions{core=\"0\"}").as_deref(),
        Some("1")
    );
    let labels = format!("{{group=\"{GROUP}\",topic=\"{TOPIC}\",queue=\"{queue}\"}}");
    let backlog = text
        .lines()
        .find(|l| l.contains("backlog") && l.contains(&labels))
        .unwrap_or_else(|| panic!("no lite backlog for {labels}: {text}"));
    assert!(backlog.ends_with(" 3"), "{backlog}");
    let inflight = text
        .lines()
        .find(|l| l.starts_with("corvus_pop_inflight_messages") && l.contains(&labels))
        .unwrap_or_else(|| panic!("no lite in-flight for {labels}: {text}"));
    assert!(inflight.ends_with(" 1"), "{inflight}");
    assert!(
        !text.contains(broker_core::lite::FLOOR_GROUP),
        "the lite index's own floor is no group: {text}"
    );
    c.stop();
}
