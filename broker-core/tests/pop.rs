//! POP consumption on the owning core: messages handed out are hidden until acked or their
//! invisible time passes, come back with their attempt + 1, go to the dead letters after
//! their max attempts, and all of it survives a restart.

mod common;

use broker_core::mesh::OffsetOp;
use broker_core::pop::{InitMode, PopRequest, Popped};
use broker_core::BrokerError;
use common::*;
use message::RecordView;
use protocol::GroupQueue;

const TOPIC: &str = "PopTopic";
const GROUP: &str = "pg";

fn req(queue_id: Option<u32>, max: u32, invisible_ms: u64, poll_ms: u64) -> PopRequest {
    PopRequest {
        group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id,
        max_messages: max,
        invisible_ms,
        poll_ms,
        init_mode: InitMode::Min,
        tag_expression: "*".into(),
        sql92: None,
        order: false,
        attempt_id: None,
        max_attempts: 16,
        priority_factor: 100,
    }
}

/// What a consumer sees of a pop: (body, attempt, handle) per message.
fn seen(p: &Popped) -> Vec<(String, u32, String)> {
    p.messages
        .iter()
        .map(|m| {
            let v = RecordView::parse(&m.record).expect("a popped record parses");
            assert_eq!(v.queue_offset(), m.queue_offset);
            assert_eq!(v.reconsume_times(), m.attempt as i32 - 1);
            v.verify_crc().expect("a popped record's CRC holds");
            (
                String::from_utf8_lossy(v.body()).into_owned(),
                m.attempt,
                m.receipt_handle.clone(),
            )
        })
        .collect()
}

fn bodies(p: &Popped) -> Vec<String> {
    seen(p).into_iter().map(|s| s.0).collect()
}

fn send(c: &Cluster, q: u32, bodies: &[&str]) {
    let bodies: Vec<String> = bodies.iter().map(|b| (*b).to_owned()).collect();
    c.on(0, move |core| async move {
        for b in bodies {
            core.send(TOPIC, q, record(TOPIC, &b, Some("TagA"), &[]), 1)
                .await
                .map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
}

fn pop(c: &Cluster, core: u16, r: PopRequest) -> Popped {
    c.on(core, move |core| async move { core.pop(r).await })
        .expect("popped")
}

fn ack(c: &Cluster, core: u16, handle: &str) -> Result<(), BrokerError> {
    let h = handle.to_owned();
    c.on(
        core,
        move |core| async move { core.ack(GROUP, TOPIC, &h).await },
    )
}

fn inflight(c: &Cluster) -> u64 {
    c.on(
        0,
        |core| async move { core.pop_inflight(GROUP, TOPIC).await },
    )
    .expect("counted")
}

fn consume_offset(c: &Cluster, q: u32) -> Option<u64> {
    let key = GroupQueue {
        group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: q,
    };
    c.on(0, move |core| async move {
        core.group_offset(OffsetOp::Query(key)).await
    })
    .expect("queried")
    .map(|s| s.offset)
}

fn one_core() -> Cluster {
    let c = Cluster::start(1, 1);
    create_topic(&c, TOPIC, 1);
    c
}

#[test]
fn acked_messages_are_not_delivered_again() {
    let c = one_core();
    send(&c, 0, &["m0", "m1", "m2"]);
    let p = pop(&c, 0, req(Some(0), 32, 300, 0));
    let got = seen(&p);
    assert_eq!(bodies(&p), ["m0", "m1", "m2"]);
    assert!(got.iter().all(|m| m.1 == 1), "first delivery is attempt 1");
    assert_eq!(p.start_offsets, [(0, 0)]);
    assert_eq!(p.message_offsets, [(0, vec![0, 1, 2])]);
    assert_eq!(inflight(&c), 3);
    for (_, _, h) in &got {
        ack(&c, 0, h).expect("acked");
    }
    assert_eq!(inflight(&c), 0);
    assert_eq!(consume_offset(&c, 0), Some(3));
    // The deliveries count as the group's gets, as a pull's do (what mqadmin and the
    // exporter read with VIEW_BROKER_STATS_DATA).
    let got_stats = c
        .on(0, |core| async move {
            let now = core.shared.clock.now();
            let key = format!("{TOPIC}@{GROUP}");
            Ok::<_, BrokerError>(
                core.broker_stats
                    .borrow()
                    .view("GROUP_GET_NUMS", &key, now)
                    .map(|d| d.minute.sum),
            )
        })
        .expect("stats");
    assert_eq!(got_stats, Some(3));
    // Past the invisible time nothing comes back.
    let again = pop(&c, 0, req(Some(0), 32, 300, 800));
    assert!(again.messages.is_empty(), "acked messages came back");
    // A second ack of the same handle is refused: the message is done.
    assert!(matches!(
        ack(&c, 0, &got[0].2),
        Err(BrokerError::NotFound(_))
    ));
    c.stop();
}

#[test]
fn unacked_message_comes_back_with_its_attempt_raised() {
    let c = one_core();
    send(&c, 0, &["m0", "m1"]);
    let first = seen(&pop(&c, 0, req(Some(0), 1, 1_000, 0)));
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].0.as_str(), first[0].1), ("m0", 1));
    // While m0 is hidden another pop gets m1, never m0.
    let second = seen(&pop(&c, 0, req(Some(0), 32, 1_000, 0)));
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].0.as_str(), second[0].1), ("m1", 1));
    ack(&c, 0, &second[0].2).expect("m1 acked");
    assert_eq!(
        consume_offset(&c, 0),
        Some(0),
        "m0 holds the consume offset"
    );
    // The long poll wakes when m0's invisible time passes.
    let back = seen(&pop(&c, 0, req(Some(0), 32, 1_000, 5_000)));
    assert_eq!(back.len(), 1);
    assert_eq!((back[0].0.as_str(), back[0].1), ("m0", 2));
    // The first delivery's handle no longer works; the second's does.
    assert!(matches!(
        ack(&c, 0, &first[0].2),
        Err(BrokerError::NotFound(_))
    ));
    ack(&c, 0, &back[0].2).expect("acked");
    assert_eq!(consume_offset(&c, 0), Some(2));
    c.stop();
}

#[test]
fn change_invisible_extends_and_retires_the_old_handle() {
    let c = one_core();
    send(&c, 0, &["m0"]);
    let got = seen(&pop(&c, 0, req(Some(0), 1, 200, 0)));
    let old = got[0].2.clone();
    let h = old.clone();
    let new = c
        .on(0, move |core| async move {
            core.change_invisible(GROUP, TOPIC, &h, 5_000).await
        })
        .expect("changed");
    assert_ne!(new, old);
    let parsed = broker_core::pop::ReceiptHandle::parse(&new).expect("a valid handle");
    assert_eq!(parsed.invisible_ms, 5_000);
    // Well past the first invisible time, still hidden.
    let none = pop(&c, 0, req(Some(0), 32, 200, 700));
    assert!(none.messages.is_empty(), "the message came back early");
    assert!(matches!(ack(&c, 0, &old), Err(BrokerError::NotFound(_))));
    ack(&c, 0, &new).expect("the new handle acks");
    assert_eq!(inflight(&c), 0);
    c.stop();
}

/// A pop waiting while the only message is hidden for a minute gets it soon after a change
/// of invisible time brings its return forward (as a push consumer's retry does: it fails a
/// message and hides it for its backoff while its next receive already waits), whether the
/// pop names its queue or takes any.
#[test]
fn a_waiting_pop_gets_a_message_whose_invisible_time_was_shortened() {
    for queue_id in [Some(0), None] {
        let c = one_core();
        send(&c, 0, &["m0"]);
        let got = seen(&pop(&c, 0, req(Some(0), 1, 60_000, 0)));
        let handle = got[0].2.clone();
        let (back, waited) = c
            .on(0, move |core| async move {
                let waiting = {
                    let core = core.clone();
                    glommio::spawn_local(async move {
                        let t0 = std::time::Instant::now();
                        let r = core.pop(req(queue_id, 32, 60_000, 10_000)).await;
                        (r, t0.elapsed())
                    })
                };
                // The waiting pop has looked and found the message hidden once it yields.
                glommio::yield_if_needed().await;
                glommio::executor().yield_task_queue_now().await;
                core.change_invisible(GROUP, TOPIC, &handle, 300).await?;
                let (r, waited) = waiting.await;
                Ok::<_, BrokerError>((r?, waited))
            })
            .expect("changed and popped");
        assert_eq!(bodies(&back), ["m0"], "queue {queue_id:?}");
        assert!(
            waited < std::time::Duration::from_secs(5),
            "queue {queue_id:?}: the pop got it only after {waited:?} of its 10 s poll"
        );
        c.stop();
    }
}

/// A pop waiting on the dead-letter topic gets a message when it is dead-lettered, not at
/// the end of its poll.
#[test]
fn a_waiting_pop_of_the_dead_letters_gets_one_as_it_arrives() {
    let c = Cluster::start_with(1, 2, |_| {});
    create_topic(&c, TOPIC, 2);
    for q in 0..2 {
        send(&c, q, &[&format!("first-{q}"), &format!("second-{q}")]);
    }
    let dlq = broker_core::pop::dead_letter_topic(GROUP);
    let reader = |topic: &str, poll_ms: u64| {
        let mut r = req(None, 32, 60_000, poll_ms);
        r.group = "dlq-reader".into();
        r.topic = topic.to_owned();
        r
    };
    // The first dead letters make the topic; the reader takes them.
    for round in ["first", "second"] {
        let popped = seen(&pop(&c, 0, req(None, 2, 60_000, 0)));
        assert_eq!(popped.len(), 2, "{round}");
        let handles: Vec<String> = popped.iter().map(|m| m.2.clone()).collect();
        let (dlq, r) = (dlq.clone(), reader(&dlq, 10_000));
        let (got, waited) = c
            .on(0, move |core| async move {
                if round == "first" {
                    for h in &handles {
                        core.dead_letter(GROUP, TOPIC, h).await?;
                    }
                }
                let waiting = {
                    let core = core.clone();
                    glommio::spawn_local(async move {
                        let t0 = std::time::Instant::now();
                        (core.pop(r).await, t0.elapsed())
                    })
                };
                if round == "second" {
                    glommio::executor().yield_task_queue_now().await;
                    for h in &handles {
                        core.dead_letter(GROUP, TOPIC, h).await?;
                    }
                }
                let (got, waited) = waiting.await;
                let _ = dlq;
                Ok::<_, BrokerError>((got?, waited))
            })
            .expect("dead-lettered and popped");
        assert!(!got.messages.is_empty(), "{round}: nothing came");
        assert!(
            waited < std::time::Duration::from_secs(5),
            "{round}: the dead letters came only after {waited:?} of a 10 s poll"
        );
    }
    c.stop();
}

#[test]
fn a_message_past_its_max_attempts_goes_to_the_dead_letters() {
    let c = one_core();
    send(&c, 0, &["poison"]);
    let mut r = req(Some(0), 1, 150, 3_000);
    r.max_attempts = 2;
    assert_eq!(seen(&pop(&c, 0, r.clone()))[0].1, 1);
    assert_eq!(seen(&pop(&c, 0, r.clone()))[0].1, 2);
    let mut last = r.clone();
    last.poll_ms = 1_000;
    assert!(
        pop(&c, 0, last).messages.is_empty(),
        "delivered a third time"
    );
    let dlq = broker_core::pop::dead_letter_topic(GROUP);
    let p = c
        .on(0, move |core| async move {
            pull(&core, pull_request("reader", &dlq, 0, 0)).await
        })
        .expect("the dead-letter topic exists");
    assert_eq!(p.bodies(), ["poison"]);
    assert_eq!(p.messages[0].property("RETRY_TOPIC"), Some(TOPIC));
    assert_eq!(inflight(&c), 0);
    // Counted in RocketMQ's dead-letter counter, by the message's topic and the group.
    let text = c.on(0, |core| async move {
        core.sample_broker_stats();
        core.shared.metrics.render()
    });
    let counted = text.lines().any(|l| {
        l.starts_with("rocketmq_send_to_dlq_messages_total{")
            && l.contains(&format!("topic=\"{TOPIC}\",consumer_group=\"{GROUP}\""))
            && l.ends_with(" 1")
    });
    assert!(counted, "{text}");
    // Popped from the dead letters, it goes on with RocketMQ's count: two deliveries and the
    // send to the dead letters were its failures.
    let mut from_dlq = req(None, 1, 10_000, 0);
    from_dlq.topic = broker_core::pop::dead_letter_topic(GROUP);
    assert_eq!(seen(&pop(&c, 0, from_dlq))[0].1, 4);
    assert_eq!(consume_offset(&c, 0), Some(1));
    c.stop();
}

/// A consumer that gives a message up (a FIFO consumer after its own retries) sends it to
/// the dead letters by its handle: it is there, done, and its handle stops working.
#[test]
fn a_message_given_up_by_its_handle_goes_to_the_dead_letters() {
    let c = one_core();
    send(&c, 0, &["given-up", "next"]);
    let popped = pop(&c, 0, req(Some(0), 1, 10_000, 0));
    let (body, attempt, handle) = seen(&popped).remove(0);
    assert_eq!((body.as_str(), attempt), ("given-up", 1));
    let h = handle.clone();
    c.on(0, move |core| async move {
        core.dead_letter(GROUP, TOPIC, &h).await
    })
    .expect("dead-lettered");
    assert!(matches!(ack(&c, 0, &handle), Err(BrokerError::NotFound(_))));
    let dlq = broker_core::pop::dead_letter_topic(GROUP);
    let p = c
        .on(0, move |core| async move {
            pull(&core, pull_request("reader", &dlq, 0, 0)).await
        })
        .expect("the dead-letter topic exists");
    assert_eq!(p.bodies(), ["given-up"]);
    assert_eq!(p.messages[0].property("RETRY_TOPIC"), Some(TOPIC));
    assert_eq!(bodies(&pop(&c, 0, req(Some(0), 32, 10_000, 0))), ["next"]);
    c.stop();
}

#[test]
fn two_consumers_never_get_the_same_hidden_message() {
    let c = one_core();
    let all: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    send(&c, 0, &refs);
    let a = c.spawn_on(0, |core| async move {
        core.pop(req(Some(0), 4, 10_000, 0)).await
    });
    let b = c.spawn_on(0, |core| async move {
        core.pop(req(Some(0), 4, 10_000, 0)).await
    });
    let mut got = bodies(&a.wait().expect("popped"));
    got.extend(bodies(&b.wait().expect("popped")));
    got.extend(bodies(&pop(&c, 0, req(Some(0), 32, 10_000, 0))));
    got.sort();
    let mut want = all.clone();
    want.sort();
    assert_eq!(got, want, "every message once");
    assert!(pop(&c, 0, req(Some(0), 32, 10_000, 0)).messages.is_empty());
    c.stop();
}

/// Three of four messages popped and one acked, then `reopen` (a restart, a crash): the
/// other two are still out and their handles ack, the fourth is handed out, the unacked one
/// comes back with attempt 2, and the consume offset ends past all four.
fn popped_state_survives(c: Cluster, reopen: impl FnOnce(Cluster) -> Cluster) {
    create_topic(&c, TOPIC, 1);
    send(&c, 0, &["m0", "m1", "m2", "m3"]);
    let got = seen(&pop(&c, 0, req(Some(0), 3, 3_000, 0)));
    assert_eq!(got.len(), 3);
    ack(&c, 0, &got[0].2).expect("m0 acked");
    let c = reopen(c);
    // Counted without any POP request (the windows are rebuilt at start), where metrics and
    // consumer stats read them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let counted = || {
        c.on(0, |core| async move {
            core.pop_windows().iter().map(|w| w.3).sum::<u64>()
        })
    };
    while counted() != 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        counted(),
        2,
        "m1 and m2 are counted in flight after the reopening"
    );
    assert_eq!(inflight(&c), 2, "m1 and m2 are still out");
    // A handle from before the reopening still acks.
    ack(&c, 0, &got[1].2).expect("m1 acked after the reopening");
    // m3 was never handed out; m2 comes back after its invisible time; m0 and m1 never.
    let next = seen(&pop(&c, 0, req(Some(0), 32, 5_000, 0)));
    assert_eq!(
        next.iter().map(|m| (m.0.as_str(), m.1)).collect::<Vec<_>>(),
        [("m3", 1)],
        "m0 and m1 are acked, m2 is hidden"
    );
    let back = seen(&pop(&c, 0, req(Some(0), 32, 5_000, 5_000)));
    assert_eq!(
        back.iter().map(|m| (m.0.as_str(), m.1)).collect::<Vec<_>>(),
        [("m2", 2)]
    );
    ack(&c, 0, &back[0].2).expect("m2 acked");
    ack(&c, 0, &next[0].2).expect("m3 acked");
    assert_eq!(consume_offset(&c, 0), Some(4));
    c.stop();
}

#[test]
fn popped_state_survives_a_restart() {
    let c = Cluster::start_with(1, 1, |cfg| cfg.offset_flush_interval_ms = 60_000);
    popped_state_survives(c, |c| c.restart(1));
}

#[test]
fn popped_state_survives_a_crash() {
    let c = Cluster::start_with(1, 1, |cfg| {
        cfg.flush_disk_type = broker_core::config::FlushDiskType::Sync;
        // No offsets snapshot before the crash: the pop log alone rebuilds the state.
        cfg.offset_flush_interval_ms = 600_000;
    });
    popped_state_survives(c, |c| {
        let crashed = c.crash_copy(1);
        c.stop();
        crashed
    });
}

#[test]
fn forged_and_garbled_handles_are_refused() {
    let c = one_core();
    send(&c, 0, &["m0"]);
    let got = seen(&pop(&c, 0, req(Some(0), 1, 10_000, 0)));
    let good = broker_core::pop::ReceiptHandle::parse(&got[0].2).expect("a valid handle");
    let forged = [
        String::new(),
        "garbage".into(),
        "1 2 3 4 5 6 7 8 9 10".into(),
        got[0].2.replace(' ', "  "),
        broker_core::pop::ReceiptHandle {
            broker_name: "other-broker".into(),
            ..good.clone()
        }
        .to_string(),
        broker_core::pop::ReceiptHandle {
            queue_id: 7,
            ..good.clone()
        }
        .to_string(),
    ];
    for h in &forged {
        assert!(
            matches!(ack(&c, 0, h), Err(BrokerError::BadRequest(_))),
            "`{h}` is refused as malformed"
        );
    }
    // Well formed, but not a delivery the broker made.
    for h in [
        broker_core::pop::ReceiptHandle {
            pop_time_ms: good.pop_time_ms - 1,
            ..good.clone()
        },
        broker_core::pop::ReceiptHandle {
            queue_offset: 5,
            ..good.clone()
        },
    ] {
        assert!(
            matches!(ack(&c, 0, &h.to_string()), Err(BrokerError::NotFound(_))),
            "`{h}` names no current delivery"
        );
    }
    assert_eq!(inflight(&c), 1, "no forged ack counted");
    ack(&c, 0, &got[0].2).expect("the real handle acks");
    c.stop();
}

#[test]
fn orderly_pop_hands_out_one_batch_at_a_time() {
    let c = one_core();
    send(&c, 0, &["m0", "m1", "m2", "m3", "m4"]);
    let mut r = req(Some(0), 2, 1_500, 0);
    r.order = true;
    let first = seen(&pop(&c, 0, r.clone()));
    assert_eq!(
        first
            .iter()
            .map(|m| (m.0.as_str(), m.1))
            .collect::<Vec<_>>(),
        [("m0", 1), ("m1", 1)]
    );
    assert!(
        pop(&c, 0, r.clone()).messages.is_empty(),
        "a second batch while the first is out"
    );
    ack(&c, 0, &first[0].2).expect("m0 acked");
    assert!(pop(&c, 0, r.clone()).messages.is_empty(), "m1 is still out");
    let mut wait = r.clone();
    wait.poll_ms = 5_000;
    let again = seen(&pop(&c, 0, wait.clone()));
    assert_eq!(
        again
            .iter()
            .map(|m| (m.0.as_str(), m.1))
            .collect::<Vec<_>>(),
        [("m1", 2)],
        "the batch's unacked message again, alone"
    );
    ack(&c, 0, &again[0].2).expect("m1 acked");
    let next = seen(&pop(&c, 0, r.clone()));
    assert_eq!(
        next.iter().map(|m| (m.0.as_str(), m.1)).collect::<Vec<_>>(),
        [("m2", 1), ("m3", 1)]
    );
    c.stop();
}

#[test]
fn pops_and_acks_reach_the_owning_core() {
    let c = Cluster::start(2, 2);
    create_topic(&c, TOPIC, 4);
    let q0 = queue_on(&c, TOPIC, 4, 0);
    let q1 = queue_on(&c, TOPIC, 4, 1);
    send(&c, q0, &["on-core-0"]);
    send(&c, q1, &["on-core-1"]);
    // A queue of core 0 popped and acked from core 1.
    let got = seen(&pop(&c, 1, req(Some(q0), 32, 10_000, 0)));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "on-core-0");
    ack(&c, 1, &got[0].2).expect("acked across cores");
    // Any queue of the serving core: only its own.
    let own = pop(&c, 1, req(None, 32, 10_000, 0));
    assert_eq!(bodies(&own), ["on-core-1"]);
    assert_eq!(inflight(&c), 1);
    // Any queue long polls: a send to core 1's queue wakes it.
    let waiting = c.spawn_on(1, |core| async move {
        core.pop(req(None, 32, 10_000, 5_000)).await
    });
    send(&c, q1, &["later"]);
    assert_eq!(bodies(&waiting.wait().expect("popped")), ["later"]);
    c.stop();
}

/// A pop counts what it hands out on the core that served it, whether the queue it names
/// is that core's own, another core's, or it names none; an empty pop counts nothing.
#[test]
fn pops_count_the_messages_they_hand_out() {
    let c = Cluster::start(2, 2);
    create_topic(&c, TOPIC, 4);
    let q0 = queue_on(&c, TOPIC, 4, 0);
    let q1 = queue_on(&c, TOPIC, 4, 1);
    send(&c, q0, &["a", "b"]);
    send(&c, q1, &["c", "d", "e"]);
    assert_eq!(bodies(&pop(&c, 1, req(Some(q1), 1, 10_000, 0))), ["c"]);
    assert_eq!(
        bodies(&pop(&c, 1, req(Some(q0), 32, 10_000, 0))),
        ["a", "b"]
    );
    assert_eq!(bodies(&pop(&c, 1, req(None, 32, 10_000, 0))), ["d", "e"]);
    assert!(pop(&c, 1, req(Some(q1), 32, 10_000, 0)).messages.is_empty());
    assert_eq!(inflight(&c), 5, "every message handed out is hidden");
    let status = c
        .on(1, |core| async move { core.status().await })
        .expect("status");
    let consumed: Vec<u64> = status.iter().map(|s| s.consumed_messages).collect();
    assert_eq!(consumed, [0, 5]);
    c.stop();
}

#[test]
fn orderly_pop_tried_again_with_its_attempt_id_gets_the_same_batch() {
    let c = one_core();
    send(&c, 0, &["m0", "m1", "m2"]);
    let mut r = req(Some(0), 2, 10_000, 0);
    r.order = true;
    r.attempt_id = Some("attempt-1".into());
    let first = seen(&pop(&c, 0, r.clone()));
    assert_eq!(first.len(), 2);
    let again = seen(&pop(&c, 0, r.clone()));
    assert_eq!(again, first, "the same batch, the same handles");
    let mut other = r.clone();
    other.attempt_id = Some("attempt-2".into());
    assert!(pop(&c, 0, other).messages.is_empty());
    for m in &again {
        ack(&c, 0, &m.2).expect("acked");
    }
    assert_eq!(bodies(&pop(&c, 0, r)), ["m2"]);
    c.stop();
}

#[test]
fn a_tag_filter_hands_out_matching_messages_and_steps_over_the_rest() {
    let c = one_core();
    c.on(0, |core| async move {
        for (body, tag) in [
            ("a0", "TagA"),
            ("b0", "TagB"),
            ("a1", "TagA"),
            ("b1", "TagB"),
        ] {
            core.send(TOPIC, 0, record(TOPIC, body, Some(tag), &[]), 1)
                .await
                .map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    let mut r = req(Some(0), 32, 10_000, 0);
    r.tag_expression = "TagB".into();
    let got = seen(&pop(&c, 0, r));
    assert_eq!(
        got.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["b0", "b1"]
    );
    for m in &got {
        ack(&c, 0, &m.2).expect("acked");
    }
    assert_eq!(
        consume_offset(&c, 0),
        Some(4),
        "the TagA messages are stepped over"
    );
    c.stop();
}

#[test]
fn a_full_window_hands_out_nothing_new_until_its_first_message_is_done() {
    let c = one_core();
    let window = broker_core::pop::WINDOW_MAX as u64;
    c.on(0, move |core| async move {
        for i in 0..window + 8 {
            core.send(TOPIC, 0, record(TOPIC, &format!("m{i}"), None, &[]), 1)
                .await
                .map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    let mut handles = Vec::new();
    for _ in 0..window.div_ceil(32) {
        handles.extend(
            seen(&pop(&c, 0, req(Some(0), 32, 60_000, 0)))
                .into_iter()
                .map(|m| m.2),
        );
    }
    assert_eq!(handles.len() as u64, window);
    assert!(
        pop(&c, 0, req(Some(0), 32, 60_000, 0)).messages.is_empty(),
        "more than the window handed out"
    );
    // Acking one in the middle frees nothing: the consume offset is held by the first.
    ack(&c, 0, &handles[5]).expect("acked");
    assert!(pop(&c, 0, req(Some(0), 32, 60_000, 0)).messages.is_empty());
    ack(&c, 0, &handles[0]).expect("acked");
    let more = bodies(&pop(&c, 0, req(Some(0), 32, 60_000, 0)));
    assert_eq!(more, [format!("m{window}")], "room for one more");
    assert_eq!(inflight(&c), window - 1);
    c.stop();
}

#[test]
fn a_sql92_filter_hands_out_matching_messages_only() {
    let c = Cluster::start_with(1, 1, |cfg| cfg.enable_property_filter = true);
    create_topic(&c, TOPIC, 1);
    c.on(0, |core| async move {
        for (body, a) in [("x1", "1"), ("x2", "2"), ("x3", "1"), ("x4", "2")] {
            core.send(TOPIC, 0, record(TOPIC, body, None, &[("a", a)]), 1)
                .await
                .map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    let mut r = req(Some(0), 32, 10_000, 0);
    r.sql92 = Some("a = 2".into());
    let got = seen(&pop(&c, 0, r.clone()));
    assert_eq!(
        got.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["x2", "x4"]
    );
    for m in &got {
        ack(&c, 0, &m.2).expect("acked");
    }
    assert_eq!(consume_offset(&c, 0), Some(4));
    r.sql92 = Some("a = = 2".into());
    assert!(
        c.on(0, move |core| async move { core.pop(r).await })
            .is_err(),
        "a filter that does not parse is refused"
    );
    c.stop();
}

/// A pop waiting on an empty queue is answered when a scheduled message bound for it is
/// delivered, not at the end of its long poll; the same with the topic's queues on several
/// shards of the core, whichever queue the message is bound for, and for a delivery time as
/// for a delay level.
#[test]
fn a_waiting_pop_gets_a_scheduled_message_when_it_is_delivered() {
    for (shards, queues, timed) in [(1, 1, false), (4, 4, false), (1, 1, true), (4, 4, true)] {
        let c = Cluster::start_with(1, shards, |cfg| {
            cfg.retry_delay_levels_ms = vec![100, 300, 1_000];
        });
        for q in 0..queues {
            let topic = format!("Later{q}{timed}");
            create_topic(&c, &topic, queues);
            let (got, waited) = c
                .on(0, move |core| async move {
                    let due = (std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                        + 300)
                        .to_string();
                    let prop = if timed {
                        (message::timer::TIMER_DELIVER_MS, due.as_str())
                    } else {
                        (message::timer::DELAY, "2")
                    };
                    let r = record(&topic, "later", None, &[prop]);
                    core.send(&topic, q, r, 1).await?;
                    let t0 = std::time::Instant::now();
                    let mut r = req(None, 32, 60_000, 10_000);
                    r.topic = topic;
                    let got = core.pop(r).await?;
                    Ok::<_, BrokerError>((got, t0.elapsed()))
                })
                .expect("sent and popped");
            assert_eq!(
                bodies(&got),
                ["later"],
                "{shards} shards, queue {q}, timed {timed}"
            );
            assert!(
                waited >= std::time::Duration::from_millis(250),
                "{shards} shards, queue {q}: delivered after {waited:?}, before its 300 ms"
            );
            assert!(
                waited < std::time::Duration::from_secs(5),
                "{shards} shards, queue {q}: the pop was answered only after {waited:?} of its 10 s poll"
            );
        }
        c.stop();
    }
}
