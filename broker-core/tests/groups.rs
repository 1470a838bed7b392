//! Consumer groups: committed offsets, queue leases and membership, across cores.

mod common;

use std::time::Instant;

use broker_core::groups::EPOCH_ANY;
use broker_core::mesh::{GroupOp, OffsetOp};
use broker_core::BrokerError;
use common::*;
use protocol::{CommitOffset, GroupQueue};

fn gq(group: &str, topic: &str, queue_id: u32) -> GroupQueue {
    GroupQueue {
        group: group.into(),
        topic: topic.into(),
        queue_id,
    }
}

fn commit(queue: GroupQueue, offset: u64, client_id: &str) -> OffsetOp {
    OffsetOp::Commit(CommitOffset {
        queue,
        offset,
        epoch: EPOCH_ANY,
        client_id: client_id.into(),
        release: false,
    })
}

fn lock(queue: GroupQueue, client_id: &str) -> OffsetOp {
    OffsetOp::Lock {
        queue,
        client_id: client_id.into(),
        lease_ms: 30_000,
    }
}

/// An offset committed through one core is what every core answers for the queue, on
/// either core's queues; a commit past the queue's end is taken as the end.
#[test]
fn committed_offsets_are_the_same_from_every_core() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Progress", 4);
    for owner in [0, 1] {
        let q = queue_on(&c, "Progress", 4, owner);
        c.on(owner, move |core| async move {
            for i in 0..5 {
                let r = record("Progress", &format!("m{i}"), None, &[]);
                core.send("Progress", q, r, 1).await.map(|_| ())?;
            }
            Ok::<_, BrokerError>(())
        })
        .expect("sent");
        let none = c
            .on(0, move |core| async move {
                core.group_offset(OffsetOp::Query(gq("cg", "Progress", q)))
                    .await
            })
            .expect("queried");
        assert_eq!(none, None, "nothing committed yet");
        let other = 1 - owner;
        let stored = c
            .on(other, move |core| async move {
                core.group_offset(commit(gq("cg", "Progress", q), 3, "c1"))
                    .await
            })
            .expect("committed");
        assert_eq!(stored.map(|s| s.offset), Some(3));
        for from in [0, 1] {
            let seen = c
                .on(from, move |core| async move {
                    core.group_offset(OffsetOp::Query(gq("cg", "Progress", q)))
                        .await
                })
                .expect("queried");
            assert_eq!(
                seen.map(|s| s.offset),
                Some(3),
                "queue on core {owner}, asked on {from}"
            );
        }
        // Another group keeps its own progress.
        let other_group = c
            .on(other, move |core| async move {
                core.group_offset(OffsetOp::Query(gq("other", "Progress", q)))
                    .await
            })
            .expect("queried");
        assert_eq!(other_group, None);
        let capped = c
            .on(owner, move |core| async move {
                core.group_offset(commit(gq("cg", "Progress", q), 100, "c1"))
                    .await
            })
            .expect("committed");
        assert_eq!(
            capped.map(|s| s.offset),
            Some(5),
            "a commit past the end is the end"
        );
    }
    c.stop();
}

/// A queue leased to one member is refused to another of its group until the holder
/// unlocks it; while leased, the other's commits do not move the group's offset.
#[test]
fn a_leased_queue_is_refused_to_other_members_until_unlocked() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Orderly", 4);
    let q = queue_on(&c, "Orderly", 4, 1);
    c.on(1, move |core| async move {
        for i in 0..3 {
            let r = record("Orderly", &format!("m{i}"), None, &[]);
            core.send("Orderly", q, r, 1).await.map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    c.on(0, move |core| async move {
        core.group_offset(lock(gq("og", "Orderly", q), "holder"))
            .await
    })
    .expect("the first member gets the lease");
    // Renewing is fine for the holder.
    c.on(1, move |core| async move {
        core.group_offset(lock(gq("og", "Orderly", q), "holder"))
            .await
    })
    .expect("the holder renews its lease");
    let refused = c.on(1, move |core| async move {
        core.group_offset(lock(gq("og", "Orderly", q), "intruder"))
            .await
    });
    match refused {
        Err(BrokerError::QueueLocked(holder)) => assert_eq!(holder, "holder"),
        other => panic!("expected QueueLocked, got {other:?}"),
    }
    // Another group is not affected.
    c.on(0, move |core| async move {
        core.group_offset(lock(gq("another", "Orderly", q), "intruder"))
            .await
    })
    .expect("another group's lease is its own");
    let ignored = c
        .on(0, move |core| async move {
            core.group_offset(commit(gq("og", "Orderly", q), 2, "intruder"))
                .await
        })
        .expect("answered");
    assert_eq!(ignored, None, "a non-holder's commit is not stored");
    let kept = c
        .on(0, move |core| async move {
            core.group_offset(commit(gq("og", "Orderly", q), 2, "holder"))
                .await
        })
        .expect("answered");
    assert_eq!(
        kept.map(|s| s.offset),
        Some(2),
        "the holder's commit is stored"
    );
    c.on(0, move |core| async move {
        core.group_offset(OffsetOp::Unlock {
            queue: gq("og", "Orderly", q),
            client_id: "holder".into(),
        })
        .await
    })
    .expect("unlocked");
    c.on(1, move |core| async move {
        core.group_offset(lock(gq("og", "Orderly", q), "intruder"))
            .await
    })
    .expect("after the unlock the other member gets the lease");
    c.stop();
}

/// A member leaving its group gives up its leases on every core at once, so another member
/// takes its queues without waiting for the leases to run out.
#[test]
fn a_leaving_member_releases_its_leases_on_every_core() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Leases", 8);
    let on0 = queue_on(&c, "Leases", 8, 0);
    let on1 = queue_on(&c, "Leases", 8, 1);
    for q in [on0, on1] {
        c.on(1, move |core| async move {
            core.group_offset(lock(gq("lg", "Leases", q), "leaver"))
                .await
        })
        .expect("leased");
    }
    for q in [on0, on1] {
        let refused = c.on(0, move |core| async move {
            core.group_offset(lock(gq("lg", "Leases", q), "stayer"))
                .await
        });
        assert!(
            matches!(refused, Err(BrokerError::QueueLocked(_))),
            "{refused:?}"
        );
    }
    c.on(0, |core| async move {
        core.release_leases("lg", "leaver").await
    })
    .expect("released");
    for q in [on0, on1] {
        c.on(0, move |core| async move {
            core.group_offset(lock(gq("lg", "Leases", q), "stayer"))
                .await
        })
        .expect("the released queue is leased to the other member");
    }
    c.stop();
}

/// Members join through any core and are listed by every core; a join and a leave are
/// announced to the clients of every core (`group_changed`), so they rebalance at once.
#[test]
fn group_members_are_listed_and_changes_announced_to_every_core() {
    let c = Cluster::start(2, 4);
    let joined = c
        .on(1, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "mg".into(),
                client_id: "c1".into(),
            })
            .await
        })
        .expect("joined");
    assert_eq!(joined.members, ["c1"]);
    let both = c
        .on(0, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "mg".into(),
                client_id: "c2".into(),
            })
            .await
        })
        .expect("joined");
    assert_eq!(both.members, ["c1", "c2"]);
    assert_ne!(both.version, joined.version, "a join changes the version");
    // A heartbeat of a known member changes nothing.
    let again = c
        .on(1, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "mg".into(),
                client_id: "c1".into(),
            })
            .await
        })
        .expect("heartbeat");
    assert_eq!(again, both);
    for core in [0, 1] {
        assert!(
            c.link(core).wait_until(|log| log
                .group_changes
                .contains(&("mg".into(), vec!["c1".into(), "c2".into()]))),
            "core {core} was not told of the join: {:?}",
            c.link(core).log().group_changes
        );
    }
    let left = c
        .on(1, |core| async move {
            core.group(GroupOp::Unregister {
                group: "mg".into(),
                client_id: "c1".into(),
            })
            .await
        })
        .expect("left");
    assert_eq!(left.members, ["c2"]);
    for core in [0, 1] {
        assert!(
            c.link(core).wait_until(
                |log| log.group_changes.last() == Some(&("mg".into(), vec!["c2".into()]))
            ),
            "core {core} was not told of the leave: {:?}",
            c.link(core).log().group_changes
        );
    }
    c.stop();
}

/// A member waiting for its group to change (the native client's rebalance wait) is woken
/// by a join, with the new members, well before its timeout.
#[test]
fn a_wait_for_a_group_change_is_woken_by_a_join() {
    let c = Cluster::start(2, 4);
    let first = c
        .on(0, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "wg".into(),
                client_id: "c1".into(),
            })
            .await
        })
        .expect("joined");
    let started = Instant::now();
    let version = first.version;
    let waiting = c.spawn_on(1, move |core| async move {
        core.group(GroupOp::WaitChange {
            group: "wg".into(),
            known_version: version,
            timeout_ms: 5_000,
        })
        .await
    });
    // Unchanged, the wait would go on for 5 s; the join ends it.
    c.on(1, |core| async move {
        core.group(GroupOp::Heartbeat {
            group: "wg".into(),
            client_id: "c2".into(),
        })
        .await
    })
    .expect("joined");
    let view = waiting.wait().expect("woken");
    assert_eq!(view.members, ["c1", "c2"]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "woken after {:?}",
        started.elapsed()
    );
    c.stop();
}

/// A member that stops heartbeating is dropped after `consumer_timeout_ms`, and every
/// core's clients are told, so the rest of the group takes its queues.
#[test]
fn a_silent_member_is_dropped_after_the_consumer_timeout() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.consumer_timeout_ms = 200);
    let started = Instant::now();
    for (core, client) in [(0, "quiet"), (1, "alive")] {
        c.on(core, move |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "eg".into(),
                client_id: client.into(),
            })
            .await
        })
        .expect("joined");
    }
    // "alive" keeps heartbeating until the group is told "quiet" left.
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        c.on(1, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "eg".into(),
                client_id: "alive".into(),
            })
            .await
        })
        .expect("heartbeat");
        let told = [0, 1].iter().all(|&core| {
            c.link(core).log().group_changes.last() == Some(&("eg".into(), vec!["alive".into()]))
        });
        if told {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the silent member was never dropped"
        );
        std::thread::yield_now();
    }
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(200),
        "dropped after {:?}, before the timeout",
        started.elapsed()
    );
    let view = c
        .on(0, |core| async move {
            core.group(GroupOp::Heartbeat {
                group: "eg".into(),
                client_id: "alive".into(),
            })
            .await
        })
        .expect("heartbeat");
    assert_eq!(view.members, ["alive"]);
    c.stop();
}

/// A lease runs out after the time it was granted for: a member that vanished holding a
/// queue frees it without unlocking, and a holder's commit with `release` frees it at once.
#[test]
fn a_lease_runs_out_or_is_released_by_the_holders_commit() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Expiring", 4);
    let q = queue_on(&c, "Expiring", 4, 1);
    let granted = Instant::now();
    c.on(0, move |core| async move {
        core.group_offset(OffsetOp::Lock {
            queue: gq("xg", "Expiring", q),
            client_id: "vanished".into(),
            lease_ms: 150,
        })
        .await
    })
    .expect("leased");
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let r = c.on(1, move |core| async move {
            core.group_offset(lock(gq("xg", "Expiring", q), "successor"))
                .await
        });
        match r {
            Ok(_) => break,
            Err(BrokerError::QueueLocked(holder)) => assert_eq!(holder, "vanished"),
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "the lease never ran out");
        std::thread::yield_now();
    }
    assert!(
        granted.elapsed() >= std::time::Duration::from_millis(150),
        "the lease ended after {:?}, before its 150 ms",
        granted.elapsed()
    );
    // The successor holds it now; its commit with `release` frees it for the next.
    let refused = c.on(0, move |core| async move {
        core.group_offset(lock(gq("xg", "Expiring", q), "third"))
            .await
    });
    assert!(
        matches!(refused, Err(BrokerError::QueueLocked(_))),
        "{refused:?}"
    );
    c.on(0, move |core| async move {
        core.group_offset(OffsetOp::Commit(CommitOffset {
            queue: gq("xg", "Expiring", q),
            offset: 0,
            epoch: EPOCH_ANY,
            client_id: "successor".into(),
            release: true,
        }))
        .await
    })
    .expect("committed");
    c.on(0, move |core| async move {
        core.group_offset(lock(gq("xg", "Expiring", q), "third"))
            .await
    })
    .expect("released by the holder's commit");
    c.stop();
}
