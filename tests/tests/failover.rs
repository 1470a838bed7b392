#![allow(clippy::unwrap_used)]
//! Automatic failover with the real binaries: three controllers, one NameServer and a
//! SYNC_MASTER group of two brokers in controller mode. The controllers make the configured
//! master (broker id 0) master and its slave in sync; a kill -9 of the master makes the
//! slave master in a new epoch, it takes sends under the same broker name, and the old
//! master comes back as its slave, cuts nothing it acknowledged and catches up; a second
//! kill fails back. Every message acknowledged in any epoch is served at the end.

use std::time::{Duration, Instant};

use client::PullConsumer;
use integration::controllers::ControllerGroup;
use integration::*;

const GROUP: &str = "broker-a";
const TOPIC: &str = "Failover";

/// Sends until one is acknowledged (bounded) and returns how long that took.
fn first_ack(sends: &mut AckedSends, p: &client::Producer, within: Duration) -> Duration {
    let began = Instant::now();
    let mut last = None;
    while began.elapsed() < within {
        match sends.send(p) {
            Ok(_) => return began.elapsed(),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no send was acknowledged within {within:?}: last error {last:?}");
}

fn send_n(sends: &mut AckedSends, p: &client::Producer, n: usize) {
    for _ in 0..n {
        sends.send(p).unwrap();
    }
}

#[test]
fn a_killed_master_is_replaced_by_its_in_sync_slave_and_comes_back_as_its_slave() {
    let ControllerGroup {
        ctl,
        ns,
        logs,
        a_opts,
        b_opts: _,
        mut a,
        b,
        first,
        keep: _keep,
    } = ControllerGroup::start(GROUP);
    assert!(first.master_epoch >= 1);
    create_topic(&ns.addr, TOPIC, 4);
    let p = producer(&ns.addr);
    let mut sends = AckedSends::new(TOPIC);
    send_n(&mut sends, &p, 200);
    // A consumer group commits where it is on every queue; the slave gets the offsets on
    // its stream.
    let group = PullConsumer::new(&ns.addr, "failover-group").unwrap();
    let queues = group.queues(TOPIC).unwrap();
    let mut committed = Vec::new();
    for (i, q) in queues.iter().enumerate() {
        let at = client::QueueOffset(1 + i as u64);
        group.commit_offset(q, at).unwrap();
        committed.push((q.queue_id, at));
    }
    let slave_has_offsets = wait_for(Duration::from_secs(30), || {
        let st = client::Admin::new(&ns.addr)
            .ok()?
            .broker_status(&b.addr)
            .ok()?;
        let held: u64 = st
            .cores
            .iter()
            .flat_map(|c| {
                serde_json::from_str::<Vec<serde_json::Value>>(&c.replication).unwrap_or_default()
            })
            .filter_map(|s| s["from_master"]["group_offsets"].as_u64())
            .sum();
        (held >= queues.len() as u64).then_some(())
    });
    assert!(slave_has_offsets.is_some(), "{}", b.stderr());

    // The master dies: the slave takes over in a new epoch, under the same name.
    a.kill9();
    let took = first_ack(&mut sends, &p, Duration::from_secs(30));
    let second = ctl.replica_info(GROUP).unwrap();
    assert_eq!(second.master_id, Some(1), "{}", b.stderr());
    assert!(second.master_epoch > first.master_epoch);
    eprintln!("first acknowledged send on the new master {took:?} after the kill");
    // The group goes on where it committed.
    for q in group.queues(TOPIC).unwrap() {
        let want = committed
            .iter()
            .find(|(id, _)| *id == q.queue_id)
            .map(|c| c.1);
        assert_eq!(
            group.committed_offset(&q).unwrap(),
            want,
            "queue {}: the new master lost the group's offset",
            q.queue_id
        );
    }
    send_n(&mut sends, &p, 200);

    // The old master comes back as the new master's slave and joins its in-sync set.
    let a = start_broker(&a_opts, &logs);
    ctl.wait_group(GROUP, 1, &[&a, &b]);
    send_n(&mut sends, &p, 100);
    let consumer = PullConsumer::new(&ns.addr, "failover-check").unwrap();
    sends.assert_served(&consumer, Duration::from_secs(30));

    // And back: the new master dies, the old one (in sync again) takes over with every
    // message acknowledged in both epochs.
    let mut b = b;
    b.kill9();
    first_ack(&mut sends, &p, Duration::from_secs(30));
    let third = ctl.replica_info(GROUP).unwrap();
    assert_eq!(third.master_id, Some(0), "{}", a.stderr());
    assert!(third.master_epoch > second.master_epoch);
    send_n(&mut sends, &p, 100);
    sends.assert_served(&consumer, Duration::from_secs(30));
}
