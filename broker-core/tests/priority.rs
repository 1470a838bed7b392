//! Priority messages (RocketMQ 5.4) on the kernel: a message of priority p sits in the core's
//! queue min(p, writable - 1), and a pop of any queue of a PRIORITY topic hands out the
//! higher priorities first, as the group's `priority.factor` asks.

mod common;

use broker_core::numbering::CoreQueues;
use broker_core::pop::{InitMode, PopRequest, Popped};
use broker_core::priority::{priority_queue, record_priority, PROPERTY_PRIORITY};
use broker_core::topics::Attributes;
use broker_core::BrokerError;
use common::*;
use message::RecordView;

const TOPIC: &str = "PriorityTopic";
const GROUP: &str = "prio-group";

fn req(max: u32, invisible_ms: u64, factor: u32) -> PopRequest {
    PopRequest {
        group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: None,
        max_messages: max,
        invisible_ms,
        poll_ms: 0,
        init_mode: InitMode::Min,
        tag_expression: "*".into(),
        sql92: None,
        order: false,
        attempt_id: None,
        max_attempts: 16,
        priority_factor: factor,
    }
}

/// Creates the topic with `queues` queues, a PRIORITY topic when `priority`.
fn create(c: &Cluster, queues: u32, priority: bool) {
    let cfg = topic(TOPIC, queues);
    let attributes =
        priority.then(|| Attributes::from([("message.type".to_owned(), "PRIORITY".to_owned())]));
    c.on(0, move |core| async move {
        core.create_topic_with(cfg, attributes).await
    })
    .expect("the topic is created");
}

/// Sends on `core` one message per priority of `priorities`, each to the core's queue of its
/// priority as the front ends pick it; its body names the priority and its turn.
fn send(c: &Cluster, core: u16, priorities: &[u32]) {
    let priorities = priorities.to_vec();
    c.on(core, move |core| async move {
        let cfg = core.topic_for_read(TOPIC)?;
        let ids = CoreQueues::of(&core, TOPIC, &cfg, core.id).ids;
        for (i, p) in priorities.into_iter().enumerate() {
            let q = priority_queue(&ids, cfg.write_queues, p).expect("the core has queues");
            let level = p.to_string();
            let body = format!("p{p}-{i}");
            let rec = record(TOPIC, &body, None, &[(PROPERTY_PRIORITY, &level)]);
            core.send(TOPIC, q, rec, 1).await?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
}

fn pop(c: &Cluster, core: u16, r: PopRequest) -> Popped {
    c.on(core, move |core| async move { core.pop(r).await })
        .expect("popped")
}

/// The priorities of a pop's messages, in the order handed out.
fn priorities(p: &Popped) -> Vec<u32> {
    p.messages
        .iter()
        .map(|m| record_priority(&m.record).expect("a priority message"))
        .collect()
}

fn ack_all(c: &Cluster, core: u16, p: &Popped) {
    let handles: Vec<String> = p
        .messages
        .iter()
        .map(|m| m.receipt_handle.clone())
        .collect();
    c.on(core, move |core| async move {
        for h in handles {
            core.ack(GROUP, TOPIC, &h).await?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("acked");
}

#[test]
fn a_pop_hands_out_the_higher_priorities_first() {
    let c = Cluster::start(1, 1);
    create(&c, 4, true);
    // The backlog: low ones first, the urgent ones last. Priority 9 is past the topic's
    // four levels and sits with 3.
    send(&c, 0, &[0, 0, 0, 0, 1, 1, 1, 9, 3, 9]);
    let mut order = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let p = pop(&c, 0, req(3, 60_000, 100));
        if p.messages.is_empty() {
            break;
        }
        order.extend(priorities(&p));
        bodies.extend(p.messages.iter().map(|m| {
            let v = RecordView::parse(&m.record).expect("parses");
            String::from_utf8_lossy(v.body()).into_owned()
        }));
        ack_all(&c, 0, &p);
    }
    // Highest level first; within a level (one queue), in the order sent.
    assert_eq!(order, [9, 3, 9, 1, 1, 1, 0, 0, 0, 0]);
    assert_eq!(bodies[..3], ["p9-7", "p3-8", "p9-9"]);
    let counted = c.on(0, |core| async move { core.priority.take() });
    assert_eq!(counted, vec![(0, 0, 4), (1, 0, 3), (3, 0, 1), (9, 0, 2)]);
    c.stop();
}

#[test]
fn a_message_that_comes_back_keeps_its_priority() {
    let c = Cluster::start(1, 1);
    create(&c, 4, true);
    send(&c, 0, &[3, 0, 0, 0]);
    let first = pop(&c, 0, req(1, 300, 100));
    assert_eq!(priorities(&first), [3]);
    // Not acked: while it is hidden the low ones go out; once its invisible time passes it
    // comes back, from its own queue, before the low one still waiting.
    let low = pop(&c, 0, req(2, 60_000, 100));
    assert_eq!(priorities(&low), [0, 0]);
    let first_visible_again = first.messages[0].receipt_handle.clone();
    let visible_at = broker_core::pop::ReceiptHandle::parse(&first_visible_again)
        .expect("a handle")
        .visible_at_ms();
    // Bounded: the message is hidden for 300 ms.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while now_ms() <= visible_at && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let again = pop(&c, 0, req(2, 60_000, 100));
    assert_eq!(priorities(&again), [3, 0]);
    assert_eq!(again.messages[0].attempt, 2);
    c.stop();
}

#[test]
fn without_priority_pops_turn_through_the_queues() {
    for (priority_topic, factor) in [(true, 0), (false, 100)] {
        let c = Cluster::start(1, 1);
        create(&c, 4, priority_topic);
        send(&c, 0, &[0, 0, 1, 1, 2, 2, 3, 3]);
        let mut first = Vec::new();
        for _ in 0..4 {
            first.extend(priorities(&pop(&c, 0, req(1, 60_000, factor))));
        }
        // Each pop starts at another queue: the four pops see every level.
        first.sort_unstable();
        assert_eq!(
            first,
            [0, 1, 2, 3],
            "priority topic {priority_topic}, factor {factor}"
        );
        c.stop();
    }
}

#[test]
fn each_core_orders_its_own_queues() {
    let c = Cluster::start(2, 2);
    create(&c, 8, true);
    for core in 0..2 {
        send(&c, core, &[0, 0, 1, 7, 2]);
    }
    for core in 0..2 {
        let p = pop(&c, core, req(5, 60_000, 100));
        // A core's levels are its own queues: with four of the eight, 7 sits with 3.
        assert_eq!(priorities(&p), [7, 2, 1, 0, 0], "core {core}");
        // Every message handed out is the popping core's.
        for m in &p.messages {
            assert_eq!(owner_core(&c, TOPIC, m.queue_id), core);
        }
    }
    c.stop();
}
