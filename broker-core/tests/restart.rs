//! A clean stop keeps what the broker acknowledged: started again on the same data, the cores
//! serve the same messages, offsets, topics and group configs.

mod common;

use broker_core::groups::EPOCH_ANY;
use broker_core::mesh::{OffsetOp, SubGroupOp};
use broker_core::sub_groups::GroupConfig;
use broker_core::BrokerError;
use common::*;
use protocol::{CommitOffset, GroupQueue};

fn gq(q: u32) -> GroupQueue {
    GroupQueue {
        group: "rg".into(),
        topic: "Durable".into(),
        queue_id: q,
    }
}

#[test]
fn messages_offsets_topics_and_group_configs_survive_a_restart() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.auto_create_topic_enable = false;
        // Offsets are written by the stop, not by the periodic flush.
        cfg.offset_flush_interval_ms = 60_000;
    });
    create_topic(&c, "Durable", 4);
    let queues = [queue_on(&c, "Durable", 4, 0), queue_on(&c, "Durable", 4, 1)];
    for q in queues {
        c.on(1, move |core| async move {
            for i in 0..3 {
                let r = record("Durable", &format!("q{q}-m{i}"), None, &[]);
                core.send("Durable", q, r, 1).await.map(|_| ())?;
            }
            let commit = OffsetOp::Commit(CommitOffset {
                queue: gq(q),
                offset: 2,
                epoch: EPOCH_ANY,
                client_id: "c1".into(),
                release: false,
            });
            core.group_offset(commit).await.map(|_| ())
        })
        .expect("sent and committed");
    }
    let mut fields = serde_json::Map::new();
    fields.insert(GroupConfig::NAME_KEY.into(), "rg".into());
    let cfg = GroupConfig::new(fields).expect("a group config");
    c.on(1, move |core| async move {
        core.sub_group(SubGroupOp::Upsert(cfg)).await
    })
    .expect("upserted");

    let c = c.restart(2);
    for q in queues {
        let p = c
            .on(0, move |core| async move {
                pull(&core, pull_request("rg", "Durable", q, 0)).await
            })
            .expect("the topic and its messages are there");
        assert_eq!(
            p.bodies(),
            [format!("q{q}-m0"), format!("q{q}-m1"), format!("q{q}-m2")]
        );
        let stored = c
            .on(1, move |core| async move {
                core.group_offset(OffsetOp::Query(gq(q))).await
            })
            .expect("queried");
        assert_eq!(
            stored.map(|s| s.offset),
            Some(2),
            "queue {q}'s committed offset"
        );
        // New sends continue the queue's offsets.
        let next = c
            .on(1, move |core| async move {
                let r = record("Durable", "after", None, &[]);
                let out = core.send("Durable", q, r, 1).await?;
                Ok::<_, BrokerError>(out.appended.first_queue_offset.0)
            })
            .expect("sent");
        assert_eq!(next, 3);
    }
    let groups = c
        .on(1, |core| async move {
            core.sub_group(SubGroupOp::List(None)).await
        })
        .expect("listed");
    assert_eq!(
        groups.iter().map(GroupConfig::name).collect::<Vec<_>>(),
        ["rg"]
    );
    c.stop();
}

/// The shards keep their data whichever core serves them: started again on one core, the
/// broker serves the queues two cores wrote, with their committed offsets.
#[test]
fn a_restart_on_fewer_cores_serves_the_same_queues() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Durable", 4);
    for q in 0..4 {
        c.on((q % 2) as u16, move |core| async move {
            let r = record("Durable", &format!("q{q}"), None, &[]);
            core.send("Durable", q, r, 1).await.map(|_| ())?;
            let commit = OffsetOp::Commit(CommitOffset {
                queue: gq(q),
                offset: 1,
                epoch: EPOCH_ANY,
                client_id: "c1".into(),
                release: false,
            });
            core.group_offset(commit).await.map(|_| ())
        })
        .expect("sent and committed");
    }
    let c = c.restart(1);
    let read = c
        .on(0, |core| async move {
            let mut out = Vec::new();
            for q in 0..4 {
                let p = pull(&core, pull_request("rg", "Durable", q, 0)).await?;
                let o = core.group_offset(OffsetOp::Query(gq(q))).await?;
                out.push((p.bodies(), o.map(|s| s.offset)));
            }
            Ok::<_, BrokerError>(out)
        })
        .expect("read");
    for (q, (bodies, offset)) in read.into_iter().enumerate() {
        assert_eq!(bodies, [format!("q{q}")]);
        assert_eq!(offset, Some(1), "queue {q}'s committed offset");
    }
    c.stop();
}
