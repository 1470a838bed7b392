//! A SYNC_MASTER and its slave, each on a network-namespace host of its own, under a seeded
//! schedule of faults (kill -9 of the slave and of the master, SIGSTOP of the slave, a
//! master/slave partition, a one-way cut, a cut of the replication port only, packet loss
//! on the slave's link, a slow slave (its link capped at a fraction of the stream's rate),
//! the slave's disk filled by another process) while producers send and a consumer tails:
//!
//! * nothing acknowledged is lost, nothing is stored that no one sent, no offset holds two
//!   messages, nothing a consumer read is missing from the final log (the confirm offset);
//! * once healed, the slave holds exactly the master's log: every queue, offset and id.
//!
//! The seed is printed; `CORVUS_FAULT_SEED=<n>` replays a schedule. Needs root, `ip`, `nft`
//! and `tc`; without them the test skips locally and fails in CI (`CI=true`).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use integration::netns::Net;
use integration::scenario::{Cast, Produce, Workload};
use integration::schedule::{self, Mix, Nodes, Schedule};
use integration::{loop_fs, BrokerOpts};

const TOPIC: &str = "HaFaults";
const QUEUES: u32 = 4;
const BROKER_PORT: u16 = 10911;
const HA_PORT: u16 = 10912;
const NAMESRV_PORT: u16 = 9876;
const SCHEDULE_RUN: Duration = Duration::from_secs(30);
const PRODUCE_AFTER: Duration = Duration::from_secs(4);
/// The default seed (CI runs it): its schedule caps the slave's bandwidth, drops its packets,
/// fills its disk, cuts the replication port, stops the slave, cuts one way, partitions the
/// pair and kills the master once; `CORVUS_FAULT_SEED=19190001` kills the slave instead.
const SEED: u64 = 7;

fn mix() -> Mix {
    Mix {
        kill: vec!["slave".into(), "master".into()],
        stop: vec!["slave".into()],
        partition: vec![("master".into(), "slave".into())],
        one_way: vec![("slave".into(), "master".into())],
        port_cut: vec![("slave".into(), "master".into(), HA_PORT)],
        loss: vec!["slave".into()],
        bandwidth: vec!["slave".into()],
        disk_full: vec!["slave".into()],
        fault_ms: (1_500, 3_000),
        gap_ms: (1_000, 1_500),
        cover_all: true,
        ..Mix::default()
    }
}

fn broker_opts(ns: &str, data: &std::path::Path, listen: String, toml: String) -> BrokerOpts {
    let mut o = BrokerOpts::new(ns, data);
    o.listen = listen;
    o.config_toml = Some(toml);
    o
}

#[test]
fn a_sync_master_and_its_slave_lose_nothing_acknowledged_under_seeded_faults() {
    let started = Instant::now();
    let seed = schedule::seed_from_env(SEED);
    let sched = Schedule::generate(seed, SCHEDULE_RUN, &mix());
    eprintln!("{sched}");
    assert!(sched.node_faults_at_once_max() <= 1);
    let Some(net) = Net::new_or_skip("ha", &["ns", "master", "slave", "client"]) else {
        return;
    };
    // The slave's data on a filesystem of the test's own, which the disk-full fault fills.
    let Some(slave_fs) = loop_fs::loop_fs_or_skip(256) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (m, s) = (net.host("master"), net.host("slave"));
    let mut cast = Cast::new(dir.path());
    cast.data_on("slave", &slave_fs.mnt);
    let ns = cast.namesrv("namesrv", net.host("ns"), NAMESRV_PORT);
    let common = "idle_poll_us = 0\nvip_channel = false\nnamesrv_heartbeat_interval_ms = 500\n\
                  ha_send_heartbeat_interval_ms = 200\nha_housekeeping_interval_ms = 1500\n\
                  slave_timeout_ms = 1000\nha_max_time_slave_not_catchup_ms = 1500\n";
    let master = broker_opts(
        &ns,
        &dir.path().join("master"),
        m.addr(BROKER_PORT),
        format!("broker_role = \"SYNC_MASTER\"\nha_listen_port = {HA_PORT}\n{common}"),
    );
    cast.broker_on_cpu("master", m, master, Some(0));
    // The slave notices a full disk within 200 ms (the default checks every 10 s).
    let slave = broker_opts(
        &ns,
        &slave_fs.mnt.join("slave"),
        s.addr(BROKER_PORT),
        format!(
            "broker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{}\"\n\
             disk_check_interval_ms = 200\n{common}",
            m.addr(HA_PORT)
        ),
    );
    cast.broker_on_cpu("slave", s, slave, Some(1));

    let wl = Workload::new(net.host("client"), &ns, TOPIC, dir.path());
    wl.create_topic(QUEUES);
    let produce = Produce {
        producers: 2,
        rate: 100,
        duration: SCHEDULE_RUN + PRODUCE_AFTER,
        ..Produce::default()
    };
    let (producers, consumer, _) = wl.under_faults(&produce, &sched, &net, &mut cast);
    net.heal().unwrap();
    let limit = Duration::from_secs(60);
    eprintln!("{}", producers.wait(limit, "the producers").trim());
    eprintln!("{}", consumer.wait(limit, "the consumer").trim());
    let report = wl.drain_and_check(limit);
    eprintln!("seed {seed}: {report}took {:?}", started.elapsed());
    assert!(report.ok > 500, "too few acknowledged sends: {report}");
    assert!(
        report.fail + report.unknown > 0,
        "no fault was felt: {report}"
    );
    if !report.is_safe() {
        let kept = dir.keep();
        eprintln!("kept the histories and logs in {}", kept.display());
        report.assert_safe();
    }

    // Healed, the slave catches up to exactly the master's log. Read it alone: with the
    // master stopped the route has the slave only, and reads go there.
    let master_log = wl.final_log();
    let client = net.host("client");
    let mut ha_status = std::process::Command::new(integration::bin("mqadmin"));
    ha_status.args(["-n", &ns, "ha-status", "-b", &cast.get("master").addr]);
    let caught_up = integration::wait_for(Duration::from_secs(30), || {
        let (_, text) =
            integration::run_until_exit(&mut client.wrap(&ha_status), Duration::from_secs(20));
        (text.contains("IN SYNC") && text.contains(" 0 bytes behind")).then_some(text)
    });
    assert!(
        caught_up.is_some(),
        "the slave did not catch up after the faults"
    );
    cast.kill9("master");
    let slave_read = integration::wait_for(Duration::from_secs(30), || {
        wl.drain(limit);
        let got = wl.final_log();
        (got == master_log).then_some(())
    });
    assert!(
        slave_read.is_some(),
        "the slave's log differs from the master's: {} records against {}",
        wl.final_log().len(),
        master_log.len()
    );
}
