//! The failover controller: three real `corvus-controller` processes on loopback, and fake
//! brokers that are just heartbeats sent with `controller-proto`'s blocking client.
//!
//! Every wait is bounded in time and polls a condition; the only fixed-length observation
//! is the "never elected" window, which is a run of heartbeats that must all see no master.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use controller_proto::{Client, Heartbeat, ReplicaInfo, Request, Response};
use integration::{mqadmin, wait_for, Controllers};

const GROUP: &str = "broker-a";

fn heartbeat(id: u64, epoch: u32, offset: u64) -> Request {
    Request::BrokerHeartbeat(Heartbeat {
        cluster: "DefaultCluster".into(),
        group: GROUP.into(),
        broker_id: id,
        addr: format!("127.0.0.1:{}", 30911 + id),
        ha_addrs: vec![format!("127.0.0.1:{}", 31911 + id)],
        epoch,
        max_offsets: vec![offset],
        healthy: true,
        prefer_master: id == 0,
    })
}

fn replica(resp: Response) -> ReplicaInfo {
    match resp {
        Response::Replica(r) => r,
        other => panic!("expected a replica record, got {other:?}"),
    }
}

fn beat(c: &mut Client, id: u64, epoch: u32) -> ReplicaInfo {
    replica(c.call(&heartbeat(id, epoch, 1000)).unwrap())
}

/// Master 0 and slave 1 registered, and 1 added to the SyncStateSet by the master.
fn master_and_in_sync_slave(c: &mut Client) -> ReplicaInfo {
    let first = beat(c, 0, 0);
    assert_eq!(first.master_id, Some(0), "{first:?}");
    assert_eq!(first.master_epoch, 1);
    assert_eq!(first.sync_state_set, vec![0]);
    let s = beat(c, 1, 0);
    assert_eq!(s.master_id, Some(0));
    assert_eq!(
        s.sync_state_set,
        vec![0],
        "a slave joins the set only via the master"
    );
    let altered = replica(
        c.call(&Request::AlterSyncStateSet {
            group: GROUP.into(),
            master_id: 0,
            master_epoch: 1,
            sync_state_set_epoch: first.sync_state_set_epoch,
            new_set: vec![0, 1],
        })
        .unwrap(),
    );
    assert_eq!(altered.sync_state_set, vec![0, 1]);
    assert_eq!(altered.sync_state_set_epoch, first.sync_state_set_epoch + 1);
    altered
}

#[test]
fn failover_elects_an_in_sync_slave_only_after_the_timeout_and_never_an_out_of_sync_one() {
    let timeout_ms = 2000;
    let ctl = Controllers::start(timeout_ms);
    ctl.agreed_leader(Duration::from_secs(20));
    let mut c = ctl.client();
    let before = master_and_in_sync_slave(&mut c);
    assert_eq!(before.lease_ms, timeout_ms);

    // A stale proposal (the set epoch it was made against is gone) is refused.
    match c
        .call(&Request::AlterSyncStateSet {
            group: GROUP.into(),
            master_id: 0,
            master_epoch: 1,
            sync_state_set_epoch: before.sync_state_set_epoch - 1,
            new_set: vec![0],
        })
        .unwrap()
    {
        Response::Refused { reason } => assert!(reason.contains("stale"), "{reason}"),
        other => panic!("stale AlterSyncStateSet accepted: {other:?}"),
    }
    // So is one from a slave.
    assert!(matches!(
        c.call(&Request::AlterSyncStateSet {
            group: GROUP.into(),
            master_id: 1,
            master_epoch: 1,
            sync_state_set_epoch: before.sync_state_set_epoch,
            new_set: vec![0, 1],
        })
        .unwrap(),
        Response::Refused { .. }
    ));

    // Broker 2 joins as a replica but never enters the set.
    let with_2 = beat(&mut c, 2, 0);
    assert_eq!(with_2.replicas.len(), 3);
    assert_eq!(with_2.sync_state_set, vec![0, 1]);

    // The master's last heartbeat; then only the slaves beat.
    let last_master_beat = Instant::now();
    assert_eq!(beat(&mut c, 0, 1).master_id, Some(0));
    let timeout = Duration::from_millis(timeout_ms);
    let mut checked_early = false;
    let elected = wait_for(Duration::from_secs(15), || {
        let info = beat(&mut c, 1, 1);
        beat(&mut c, 2, 1);
        let since = last_master_beat.elapsed();
        if info.master_id == Some(0) && since < timeout / 2 && since > timeout / 4 {
            checked_early = true;
        }
        if info.master_id != Some(0) {
            assert!(
                since >= timeout,
                "master replaced {since:?} after its last heartbeat, before the {timeout:?} timeout"
            );
            return Some(info);
        }
        None
    })
    .expect("slave 1 was not elected");
    assert!(
        checked_early,
        "never saw the master still in place well before the timeout"
    );
    assert_eq!(elected.master_id, Some(1), "{elected:?}");
    assert_eq!(elected.master_epoch, before.master_epoch + 1);
    assert_eq!(elected.sync_state_set, vec![1]);
    assert!(elected.sync_state_set_epoch > before.sync_state_set_epoch);
    assert_eq!(elected.master_addr.as_deref(), Some("127.0.0.1:30912"));

    // Now the new master goes silent too: 2 is alive but not in sync, so nobody takes over.
    let masterless = wait_for(Duration::from_secs(15), || {
        let info = beat(&mut c, 2, 1);
        (info.master_id.is_none()).then_some(info)
    })
    .expect("the group kept a dead master");
    assert_eq!(masterless.master_epoch, elected.master_epoch);
    // And stays so, however long 2 heartbeats (two more timeouts).
    let window = Instant::now();
    let mut beats = 0;
    while window.elapsed() < timeout * 2 && beats < 200 {
        let info = beat(&mut c, 2, 9);
        assert_eq!(info.master_id, None, "an out-of-sync replica was elected");
        beats += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(beats > 3);
    // The admin cannot force it either.
    let out = mqadmin(
        "127.0.0.1:1",
        &["electMaster", "-a", &ctl.mq_addrs(), "-b", GROUP, "-i", "2"],
    );
    assert!(
        !out.status.success(),
        "electMaster of an out-of-sync broker succeeded"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not in the sync state set"));
    // An in-sync replica that comes back is elected again.
    let back = beat(&mut c, 1, 2);
    let back = if back.master_id == Some(1) {
        back
    } else {
        wait_for(Duration::from_secs(10), || {
            let info = beat(&mut c, 1, 2);
            (info.master_id == Some(1)).then_some(info)
        })
        .expect("the in-sync replica was not re-elected")
    };
    assert_eq!(back.master_epoch, elected.master_epoch + 1);
}

/// The registry as a controller persisted it (its `state.json`).
fn persisted_group(data_dir: &Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(data_dir.join("state.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v["registry"]["groups"].get(GROUP).cloned()
}

#[test]
fn a_killed_leader_is_replaced_and_rejoins_with_the_state_and_mqadmin_elects() {
    let mut ctl = Controllers::start(5000);
    ctl.agreed_leader(Duration::from_secs(20));
    let mut c = ctl.client();
    let before = master_and_in_sync_slave(&mut c);

    let meta = integration::mqadmin_json(
        "127.0.0.1:1",
        &["getControllerMetaData", "-a", &ctl.mq_addrs()],
    );
    let leader = meta["leader_id"].as_u64().expect("a leader");
    assert_eq!(meta["controllers"].as_array().unwrap().len(), 3);

    // kill -9 the leader; the other two elect a new one that has the same state.
    let li = (leader - 1) as usize;
    ctl.procs[li].as_mut().unwrap().kill9();
    ctl.procs[li] = None;
    let new_leader = ctl.agreed_leader_other_than(Duration::from_secs(20), Some(leader));
    assert_ne!(new_leader, leader);
    let after = replica(
        c.call(&Request::GetReplicaInfo {
            group: GROUP.into(),
        })
        .unwrap(),
    );
    assert_eq!(after.master_id, before.master_id);
    assert_eq!(after.master_epoch, before.master_epoch);
    assert_eq!(after.sync_state_set, before.sync_state_set);
    assert_eq!(after.sync_state_set_epoch, before.sync_state_set_epoch);

    // While it is down, the admin moves the master to the in-sync slave.
    beat(&mut c, 0, 1);
    beat(&mut c, 1, 1);
    let sss = integration::mqadmin_json(
        "127.0.0.1:1",
        &["getSyncStateSet", "-a", &ctl.mq_addrs(), "-b", GROUP],
    );
    assert_eq!(sss["sync_state_set"], serde_json::json!([0, 1]));
    let elected = integration::mqadmin_json(
        "127.0.0.1:1",
        &["electMaster", "-a", &ctl.mq_addrs(), "-b", GROUP, "-i", "1"],
    );
    assert_eq!(elected["master_id"], 1);
    assert_eq!(elected["master_epoch"], before.master_epoch + 1);
    assert_eq!(elected["sync_state_set"], serde_json::json!([1]));
    let text = mqadmin(
        "127.0.0.1:1",
        &["getSyncStateSet", "-a", &ctl.mq_addrs(), "-b", GROUP],
    );
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("#MasterId 1"));

    // Restarted on its data dir, the old leader rejoins and catches up with that change.
    ctl.start_one(li);
    let want_epoch = u64::from(before.master_epoch) + 1;
    let caught_up = wait_for(Duration::from_secs(20), || {
        // The new master keeps heartbeating, so it stays master meanwhile.
        beat(&mut c, 1, 2);
        let g = persisted_group(&ctl.data[li])?;
        (g["master_epoch"] == want_epoch && g["master_id"] == 1).then_some(g)
    });
    assert!(
        caught_up.is_some(),
        "restarted controller did not catch up; logs:\n{}",
        ctl.stderr()
    );
    // The rejoined controller may have forced a new term; some controller leads again.
    ctl.agreed_leader(Duration::from_secs(20));
    beat(&mut c, 1, 2);
    let info = replica(
        c.call(&Request::GetReplicaInfo {
            group: GROUP.into(),
        })
        .unwrap(),
    );
    assert_eq!(info.master_id, Some(1));
    for p in ctl.procs.iter_mut().flatten() {
        p.terminate();
    }
}

#[test]
fn a_master_that_reports_itself_unhealthy_is_replaced_without_waiting_for_the_timeout() {
    // A timeout far longer than the test's bound: only the health flag can cause this one.
    let ctl = Controllers::start(60_000);
    ctl.agreed_leader(Duration::from_secs(20));
    let mut c = ctl.client();
    let before = master_and_in_sync_slave(&mut c);
    let started = Instant::now();
    let Request::BrokerHeartbeat(mut sick) = heartbeat(0, 1, 1000) else {
        unreachable!()
    };
    sick.healthy = false;
    let answer = replica(c.call(&Request::BrokerHeartbeat(sick)).unwrap());
    let info = if answer.master_id == Some(1) {
        answer
    } else {
        wait_for(Duration::from_secs(10), || {
            let info = beat(&mut c, 1, 1);
            (info.master_id == Some(1)).then_some(info)
        })
        .expect("the unhealthy master was kept")
    };
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(info.master_epoch, before.master_epoch + 1);
    assert_eq!(info.sync_state_set, vec![1]);
}
