//! Sends and pulls through the kernel: where a send is stored, what a pull reads, and the
//! answers a client gets for a topic or queue that does not exist.

mod common;

use broker_core::mesh::PullStatus;
use broker_core::BrokerError;
use common::*;
use protocol::TopicConfig;

/// A send on core 0 to a queue core 1 owns is stored on core 1's shard (one hop), and a
/// pull from either core reads it back.
#[test]
fn a_send_to_a_queue_of_the_other_core_is_stored_there_and_read_from_either() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Dispatch", 8);
    let q = queue_on(&c, "Dispatch", 8, 1);
    let hops_before = c.on(0, |core| async move { core.stats.cross_core_hops.get() });
    let sent = c.on(0, move |core| async move {
        let out = core
            .send("Dispatch", q, record("Dispatch", "across", None, &[]), 1)
            .await?;
        Ok::<_, BrokerError>((out.appended.shard, out.appended.first_queue_offset.0))
    });
    let (shard, offset) = sent.expect("the send is stored");
    assert_eq!(offset, 0);
    assert_eq!(
        protocol::shard_core(shard, 2),
        1,
        "stored on a shard of core 1"
    );
    let hops_after = c.on(0, |core| async move { core.stats.cross_core_hops.get() });
    assert_eq!(hops_after, hops_before + 1, "the forwarded send is one hop");
    // The owner serves the shard itself: no hop there.
    let owner_status = c.on(1, |core| async move { core.local_status() });
    assert!(owner_status.shards.contains(&shard));
    for from in [0, 1] {
        let p = c
            .on(from, move |core| async move {
                pull(&core, pull_request("g", "Dispatch", q, 0)).await
            })
            .expect("the pull is answered");
        assert_eq!(p.status, PullStatus::Found, "from core {from}");
        assert_eq!(p.bodies(), ["across"], "from core {from}");
        assert_eq!(p.messages[0].queue_id, q);
        assert_eq!(p.next_offset, 1);
    }
    c.stop();
}

/// Messages sent to one queue come back in order, each at the next queue offset, from any
/// start offset; past the end nothing is found.
#[test]
fn sends_are_pulled_in_order_at_consecutive_offsets() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Ordered", 4);
    let q = queue_on(&c, "Ordered", 4, 0);
    let offsets = c.on(1, move |core| async move {
        let mut v = Vec::new();
        for i in 0..5 {
            let r = record("Ordered", &format!("m{i}"), None, &[]);
            let out = core.send("Ordered", q, r, 1).await.expect("stored");
            v.push(out.appended.first_queue_offset.0);
        }
        // A batch of two takes two offsets.
        let mut batch = record("Ordered", "m5", None, &[]).to_vec();
        batch.extend_from_slice(&record("Ordered", "m6", None, &[]));
        let out = core
            .send("Ordered", q, batch.into(), 2)
            .await
            .expect("stored");
        v.push(out.appended.first_queue_offset.0);
        v
    });
    assert_eq!(offsets, [0, 1, 2, 3, 4, 5]);
    let all = c
        .on(0, move |core| async move {
            pull(&core, pull_request("g", "Ordered", q, 0)).await
        })
        .expect("pulled");
    assert_eq!(all.bodies(), ["m0", "m1", "m2", "m3", "m4", "m5", "m6"]);
    let got: Vec<u64> = all.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!(got, [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(all.next_offset, 7);
    assert_eq!(all.max_offset, 7);
    let tail = c
        .on(1, move |core| async move {
            let mut r = pull_request("g", "Ordered", q, 3);
            r.max_messages = 2;
            pull(&core, r).await
        })
        .expect("pulled");
    assert_eq!(tail.bodies(), ["m3", "m4"]);
    assert_eq!(tail.next_offset, 5);
    let end = c
        .on(0, move |core| async move {
            pull(&core, pull_request("g", "Ordered", q, 7)).await
        })
        .expect("pulled");
    assert_eq!(end.status, PullStatus::NoNewMessage);
    assert!(end.messages.is_empty());
    let (min, max) = c
        .on(1, move |core| async move {
            core.queue_offsets("Ordered", q).await
        })
        .expect("offsets");
    assert_eq!((min, max), (0, 7));
    c.stop();
}

/// One core over two shards does everything alone: no hop, every queue readable.
#[test]
fn a_single_core_stores_and_reads_every_queue_without_hops() {
    let c = Cluster::start(1, 2);
    create_topic(&c, "Solo", 4);
    let read = c.on(0, |core| async move {
        for q in 0..4 {
            let r = record("Solo", &format!("q{q}"), None, &[]);
            core.send("Solo", q, r, 1).await?;
        }
        let mut bodies = Vec::new();
        for q in 0..4 {
            bodies.extend(pull(&core, pull_request("g", "Solo", q, 0)).await?.bodies());
        }
        Ok::<_, BrokerError>((bodies, core.stats.cross_core_hops.get()))
    });
    let (bodies, hops) = read.expect("sent and pulled");
    assert_eq!(bodies, ["q0", "q1", "q2", "q3"]);
    assert_eq!(hops, 0);
    c.stop();
}

/// A tag expression serves only the messages with one of its tags; the next offset still
/// passes the others, so the consumer does not read them again.
#[test]
fn a_tag_filter_serves_only_matching_messages() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Tagged", 4);
    let q = queue_on(&c, "Tagged", 4, 1);
    c.on(0, move |core| async move {
        for (body, tag) in [
            ("a1", "TagA"),
            ("b1", "TagB"),
            ("a2", "TagA"),
            ("c1", "TagC"),
        ] {
            let r = record("Tagged", body, Some(tag), &[]);
            core.send("Tagged", q, r, 1).await.map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    let only_a = c
        .on(0, move |core| async move {
            let mut r = pull_request("g", "Tagged", q, 0);
            r.tag_expression = "TagA".into();
            pull(&core, r).await
        })
        .expect("pulled");
    assert_eq!(only_a.bodies(), ["a1", "a2"]);
    assert!(only_a
        .messages
        .iter()
        .all(|m| m.tags.as_deref() == Some("TagA")));
    assert_eq!(
        only_a.next_offset, 4,
        "the filtered-out messages are passed"
    );
    let b_or_c = c
        .on(1, move |core| async move {
            let mut r = pull_request("g", "Tagged", q, 0);
            r.tag_expression = "TagB || TagC".into();
            pull(&core, r).await
        })
        .expect("pulled");
    assert_eq!(b_or_c.bodies(), ["b1", "c1"]);
    c.stop();
}

/// With `enable_property_filter`, a SQL92 expression serves only the messages whose
/// properties match; without it such a pull is refused.
#[test]
fn a_sql92_filter_serves_matching_properties_only_when_enabled() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.enable_property_filter = true);
    create_topic(&c, "Props", 4);
    let q = queue_on(&c, "Props", 4, 1);
    c.on(1, move |core| async move {
        for (i, region) in [(1, "eu"), (2, "us"), (5, "eu"), (7, "eu"), (9, "us")] {
            let a = i.to_string();
            let r = record(
                "Props",
                &format!("m{i}"),
                None,
                &[("a", &a), ("region", region)],
            );
            core.send("Props", q, r, 1).await.map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    let matched = c
        .on(0, move |core| async move {
            let r = pull_request("g", "Props", q, 0);
            let sql = "a > 3 AND region = 'eu'".to_owned();
            core.pull_filtered(r, Some(sql)).await.map(pulled)
        })
        .expect("pulled");
    assert_eq!(matched.bodies(), ["m5", "m7"]);
    assert_eq!(matched.next_offset, 5);
    let bad = c.on(0, move |core| async move {
        let r = pull_request("g", "Props", q, 0);
        core.pull_filtered(r, Some("a >".into())).await.map(pulled)
    });
    assert!(matches!(bad, Err(BrokerError::FilterInvalid(_))), "{bad:?}");
    c.stop();

    let off = Cluster::start(1, 2);
    create_topic(&off, "Props", 4);
    let refused = off.on(0, |core| async move {
        let r = pull_request("g", "Props", 0, 0);
        core.pull_filtered(r, Some("a > 3".into()))
            .await
            .map(pulled)
    });
    assert!(
        matches!(refused, Err(BrokerError::FilterDisabled)),
        "{refused:?}"
    );
    off.stop();
}

/// With auto-creation off, a send to an unknown topic is refused as TOPIC_NOT_EXIST and
/// creates nothing; a pull of it is refused the same way.
#[test]
fn an_unknown_topic_is_refused_when_auto_creation_is_off() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.auto_create_topic_enable = false);
    for from in [0, 1] {
        let sent = c.on(from, |core| async move {
            core.send("Nowhere", 0, record("Nowhere", "x", None, &[]), 1)
                .await
                .map(|_| ())
        });
        assert!(
            matches!(&sent, Err(BrokerError::TopicNotExist(t)) if t == "Nowhere"),
            "from core {from}: {sent:?}"
        );
        let pulled = c.on(from, |core| async move {
            pull(&core, pull_request("g", "Nowhere", 0, 0)).await
        });
        assert!(
            matches!(&pulled, Err(BrokerError::TopicNotExist(_))),
            "{pulled:?}"
        );
    }
    for core_id in [0, 1] {
        let known = c.on(core_id, |core| async move {
            core.topic_for_read("Nowhere").is_ok()
        });
        assert!(!known, "core {core_id} has no such topic");
    }
    c.stop();
}

/// A queue id past the topic's queues is refused as QUEUE_NOT_EXIST, naming how many the
/// topic has, for sends and pulls alike.
#[test]
fn a_queue_id_out_of_range_is_refused() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Four", 4);
    let sent = c.on(1, |core| async move {
        core.send("Four", 4, record("Four", "x", None, &[]), 1)
            .await
            .map(|_| ())
    });
    match sent {
        Err(BrokerError::QueueNotExist {
            topic,
            queue_id,
            queues,
        }) => {
            assert_eq!((topic.as_str(), queue_id, queues), ("Four", 4, 4));
        }
        other => panic!("expected QueueNotExist, got {other:?}"),
    }
    let pulled = c.on(0, |core| async move {
        pull(&core, pull_request("g", "Four", 9, 0)).await
    });
    assert!(
        matches!(pulled, Err(BrokerError::QueueNotExist { queue_id: 9, .. })),
        "{pulled:?}"
    );
    c.stop();
}

/// With auto-creation on, the first send to an unknown topic creates it with the default
/// queue count on every core, and stores the message.
#[test]
fn the_first_send_creates_an_unknown_topic_when_auto_creation_is_on() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.auto_create_topic_enable = true;
        cfg.default_topic_queue_nums = 6;
    });
    let stored = c.on(1, |core| async move {
        let out = core
            .send("Fresh", 5, record("Fresh", "first", None, &[]), 1)
            .await?;
        Ok::<_, BrokerError>(out.appended.first_queue_offset.0)
    });
    assert_eq!(stored.expect("stored"), 0);
    for core_id in [0, 1] {
        let cfg = c
            .on(core_id, |core| async move { core.topic_for_read("Fresh") })
            .expect("the topic exists on every core");
        assert_eq!((cfg.read_queues, cfg.write_queues), (6, 6));
    }
    let p = c
        .on(0, |core| async move {
            pull(&core, pull_request("g", "Fresh", 5, 0)).await
        })
        .expect("pulled");
    assert_eq!(p.bodies(), ["first"]);
    c.stop();
}

/// A query by key finds the messages with that key on every core's shards, and only them.
#[test]
fn a_query_by_key_finds_messages_on_every_core() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Keyed", 8);
    for owner in [0, 1] {
        let q = queue_on(&c, "Keyed", 8, owner);
        c.on(owner, move |core| async move {
            let wanted = record(
                "Keyed",
                &format!("order-{owner}"),
                None,
                &[("KEYS", "order-42")],
            );
            core.send("Keyed", q, wanted, 1).await.map(|_| ())?;
            let other = record("Keyed", "noise", None, &[("KEYS", "order-7")]);
            core.send("Keyed", q, other, 1).await.map(|_| ())
        })
        .expect("sent");
    }
    let found = c
        .on(1, |core| async move {
            core.query_by_key(protocol::QueryByKey {
                topic: "Keyed".into(),
                key: "order-42".into(),
                begin_ms: 0,
                end_ms: i64::MAX,
                max: 32,
            })
            .await
        })
        .expect("queried");
    let mut bodies: Vec<String> = found
        .iter()
        .map(|b| {
            let v = message::RecordView::parse(b).expect("a record");
            String::from_utf8_lossy(v.body()).into_owned()
        })
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["order-0", "order-1"]);
    c.stop();
}

/// A topic deleted and created again continues its queues' offsets (its ConsumeQueues stay),
/// so a consumer's committed offset still points at new messages.
#[test]
fn a_topic_created_again_continues_its_offsets() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.auto_create_topic_enable = false);
    create_topic(&c, "Again", 4);
    let q = queue_on(&c, "Again", 4, 1);
    let send = move |body: &'static str| {
        move |core: std::rc::Rc<broker_core::Core>| async move {
            let out = core
                .send("Again", q, record("Again", body, None, &[]), 1)
                .await?;
            Ok::<_, BrokerError>(out.appended.first_queue_offset.0)
        }
    };
    assert_eq!(c.on(0, send("before-1")).expect("sent"), 0);
    assert_eq!(c.on(0, send("before-2")).expect("sent"), 1);
    c.on(
        0,
        |core| async move { core.delete_topic("Again".into()).await },
    )
    .expect("deleted");
    assert!(matches!(
        c.on(1, send("while-gone")),
        Err(BrokerError::TopicNotExist(_))
    ));
    create_topic(&c, "Again", 4);
    assert_eq!(c.on(1, send("after")).expect("sent"), 2);
    let p = c
        .on(0, move |core| async move {
            pull(&core, pull_request("g", "Again", q, 2)).await
        })
        .expect("pulled");
    assert_eq!(p.bodies(), ["after"]);
    c.stop();
}

/// A stored message is found again by its shard and commit log offset from either core,
/// and a queue offset by store time.
#[test]
fn a_message_is_viewed_by_its_offset_and_found_by_time_from_either_core() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Viewed", 4);
    let q = queue_on(&c, "Viewed", 4, 1);
    let (shard, at, between) = c
        .on(1, move |core| async move {
            core.send("Viewed", q, record("Viewed", "early", None, &[]), 1)
                .await?;
            // Store times have millisecond resolution: the next send is a later one.
            let t0 = now_ms();
            while now_ms() == t0 {
                glommio::yield_if_needed().await;
            }
            let between = now_ms();
            let out = core
                .send("Viewed", q, record("Viewed", "late", None, &[]), 1)
                .await?;
            Ok::<_, BrokerError>((
                out.appended.shard,
                out.appended.first_commit_log_offset.0,
                between,
            ))
        })
        .expect("sent");
    for from in [0, 1] {
        let found = c
            .on(from, move |core| async move {
                core.view_by_offset(shard, at).await
            })
            .expect("viewed");
        assert_eq!(found.len(), 1);
        let v = message::RecordView::parse(&found[0]).expect("a record");
        assert_eq!(v.body(), b"late", "from core {from}");
        let offset = c
            .on(from, move |core| async move {
                core.search_offset("Viewed", q, between).await
            })
            .expect("searched");
        assert_eq!(offset, 1, "the first message stored at or after the time");
    }
    let missing = c.on(
        0,
        move |core| async move { core.view_by_offset(99, 0).await },
    );
    assert!(
        matches!(missing, Err(BrokerError::NotFound(_))),
        "{missing:?}"
    );
    c.stop();
}

/// A topic's permission is kept, as RocketMQ's broker keeps it: a read-only topic refuses
/// sends and a write-only one refuses pulls with NO_PERMISSION, from either core, and a
/// read-write one takes both.
#[test]
fn a_topics_permission_refuses_what_it_does_not_allow() {
    let c = Cluster::start(2, 4);
    for (name, perm) in [
        ("ReadOnly", protocol::perm::READ),
        ("WriteOnly", protocol::perm::WRITE),
        ("Both", protocol::perm::READ_WRITE),
    ] {
        let cfg = TopicConfig {
            perm,
            ..topic(name, 4)
        };
        c.on(0, |core| async move { core.create_topic(cfg).await })
            .expect("created");
    }
    for from in [0, 1] {
        let sends = c.on(from, |core| async move {
            let mut out = Vec::new();
            for name in ["ReadOnly", "WriteOnly", "Both"] {
                out.push(
                    core.send(name, 1, record(name, "x", None, &[]), 1)
                        .await
                        .map(|_| ()),
                );
            }
            out
        });
        assert!(
            matches!(&sends[0], Err(BrokerError::NoPermission(m)) if m.contains("ReadOnly") && m.contains("sending")),
            "from core {from}: {:?}",
            sends[0]
        );
        assert!(sends[1].is_ok(), "from core {from}: {:?}", sends[1]);
        assert!(sends[2].is_ok(), "from core {from}: {:?}", sends[2]);
        let pulls = c.on(from, |core| async move {
            let mut out = Vec::new();
            for name in ["ReadOnly", "WriteOnly", "Both"] {
                out.push(
                    pull(&core, pull_request("g", name, 1, 0))
                        .await
                        .map(|p| p.bodies()),
                );
            }
            out
        });
        assert!(pulls[0].is_ok(), "from core {from}: {:?}", pulls[0]);
        assert!(
            matches!(&pulls[1], Err(BrokerError::NoPermission(m)) if m.contains("WriteOnly") && m.contains("pulling")),
            "from core {from}: {:?}",
            pulls[1]
        );
        assert!(pulls[2].is_ok(), "from core {from}: {:?}", pulls[2]);
    }
    c.stop();
}
