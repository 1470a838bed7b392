#![allow(clippy::unwrap_used)]
//! Master/slave replication with the real binaries: a slave holds every message its master
//! acknowledged, catches up by itself after a crash, refuses sends; a SYNC_MASTER waits for
//! its slave, answers FLUSH_SLAVE_TIMEOUT when it cannot hear it, stops waiting once the
//! slave has left the in-sync set, and refuses before writing when too few are in sync.
//!
//! The master and the slave register with NameServers of their own, so a consumer of the
//! slave's NameServer reads the slave alone.

use std::path::Path;
use std::time::{Duration, Instant};

use client::PullConsumer;
use integration::*;
use protocol::ResponseCode;

use integration::loop_fs;

struct Pair {
    _dir: tempfile::TempDir,
    logs: std::path::PathBuf,
    master_ns: Proc,
    slave_ns: Proc,
    master: Proc,
    slave: Proc,
    slave_opts: BrokerOpts,
}

fn opts(ns: &str, data: &Path, cores: u16, toml: String) -> BrokerOpts {
    let mut o = BrokerOpts::new(ns, data);
    o.cores = cores;
    o.config_toml = Some(toml);
    o
}

impl Pair {
    fn start(cores: u16, master_toml: &str, slave_toml: &str) -> Pair {
        Pair::start_in(cores, master_toml, slave_toml, None)
    }

    /// As [`Pair::start`], the slave's data directory at `slave_data` when given.
    fn start_in(
        cores: u16,
        master_toml: &str,
        slave_toml: &str,
        slave_data: Option<&Path>,
    ) -> Pair {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let master_ns = start_namesrv(&logs);
        let slave_ns = start_namesrv(&logs);
        let mut mo = opts(
            &master_ns.addr,
            &dir.path().join("master"),
            cores,
            master_toml.to_owned(),
        );
        mo.name = "broker-a".into();
        let master = start_broker(&mo, &logs);
        let ha = master
            .preamble_addr("broker replication on ")
            .expect("the master says where it replicates from");
        let so = opts(
            &slave_ns.addr,
            &slave_data.map_or_else(|| dir.path().join("slave"), Path::to_owned),
            cores,
            format!(
                "broker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{ha}\"\n{slave_toml}"
            ),
        );
        let slave = start_broker(&so, &logs);
        Pair {
            _dir: dir,
            logs,
            master_ns,
            slave_ns,
            master,
            slave,
            slave_opts: so,
        }
    }

    fn restart_slave(&mut self) {
        self.slave.kill9();
        self.slave = start_broker(&self.slave_opts, &self.logs);
    }

    /// The replication state the master reports, per shard.
    fn master_replication(&self) -> Vec<serde_json::Value> {
        status_replication(&self.master_ns.addr, &self.master.addr)
    }
}

fn status_replication(ns: &str, broker: &str) -> Vec<serde_json::Value> {
    replication_status(ns, broker).expect("the broker answers its status")
}

/// Waits until every shard of the master has its slave in the in-sync set.
fn wait_in_sync(pair: &Pair, timeout: Duration) {
    let ok = wait_for(timeout, || {
        all_shards_in_sync(&pair.master_replication()).then_some(())
    });
    assert!(
        ok.is_some(),
        "the slave did not join the in-sync set of every shard: {:?}\nslave log:\n{}",
        pair.master_replication(),
        pair.slave.stderr()
    );
}

/// Every queue of the test topic has the same offsets through NameServer `a` as through `b`
/// (each routing to one broker of the pair).
fn assert_same_offsets(a: &str, b: &str) {
    let (ca, cb) = (
        PullConsumer::new(a, "offsets-a").unwrap(),
        PullConsumer::new(b, "offsets-b").unwrap(),
    );
    let qb = cb.queues("Replicated").unwrap();
    for q in ca.queues("Replicated").unwrap() {
        let other = qb.iter().find(|x| x.queue_id == q.queue_id).unwrap();
        assert_eq!(
            ca.queue_offsets(&q).unwrap(),
            cb.queue_offsets(other).unwrap(),
            "queue {}",
            q.queue_id
        );
    }
}

/// Whether every thread of `pid` is stopped (state `T` in /proc).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('T'))
            })
            .unwrap_or(false)
    })
}

/// SIGSTOP: every thread of `pid` stopped before this returns.
fn freeze(pid: i32) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(
        wait_for(Duration::from_secs(5), || all_threads_stopped(pid)
            .then_some(()))
        .is_some(),
        "the slave did not stop"
    );
}

/// A SEND_MESSAGE request of the RocketMQ remoting protocol, by hand: to queue 0 of `topic`.
fn send_message_request(topic: &str) -> remoting::RemotingCommand {
    let mut cmd = remoting::RemotingCommand::request(remoting::codes::request::SEND_MESSAGE, 7);
    for (k, v) in [
        ("producerGroup", "rmq-producer"),
        ("topic", topic),
        ("defaultTopic", "TBW102"),
        ("defaultTopicQueueNums", "4"),
        ("queueId", "0"),
        ("sysFlag", "0"),
        ("bornTimestamp", "0"),
        ("flag", "0"),
        ("reconsumeTimes", "0"),
        ("unitMode", "false"),
        ("batch", "false"),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    cmd
}

/// One SEND_MESSAGE in the RocketMQ remoting protocol, spoken by hand, and its answer.
fn rocketmq_send(addr: &str, topic: &str) -> remoting::Frame {
    use std::io::{Read, Write};
    let cmd = send_message_request(topic);
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(&remoting::encode(&cmd, b"body").unwrap())
        .unwrap();
    let mut decoder = remoting::RemotingDecoder::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(remoting::Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            return f;
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "the broker closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn send_n(sends: &mut AckedSends, p: &client::Producer, n: usize) {
    for _ in 0..n {
        sends.send(p).unwrap();
    }
}

/// Waits until the slave serves every message acknowledged so far.
fn assert_slave_has(pair: &Pair, sends: &AckedSends, timeout: Duration) {
    let consumer = PullConsumer::new(&pair.slave_ns.addr, "slave-check").unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        let got: std::collections::BTreeSet<String> = consumer
            .queues("Replicated")
            .ok()
            .map(|_| {
                drain_topic(&consumer, "Replicated", Duration::from_secs(30))
                    .into_iter()
                    .map(|m| m.msg_id)
                    .collect()
            })
            .unwrap_or_default();
        let missing = sends.acked.keys().filter(|k| !got.contains(*k)).count();
        if missing == 0 {
            // Byte for byte, through the slave's own read path.
            sends.assert_served(&consumer, Duration::from_secs(30));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the slave lacks {missing} of {} acknowledged messages\nslave log:\n{}",
            sends.acked.len(),
            pair.slave.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_slave_holds_every_acknowledged_message_and_catches_up_after_a_crash() {
    // Two cores each: shard 1's stream is sent on by the master's core 0 to its core 1.
    let mut pair = Pair::start(2, "", "");
    let p = producer(&pair.master_ns.addr);
    create_topic(&pair.master_ns.addr, "Replicated", 4);
    let mut sends = AckedSends::new("Replicated");
    send_n(&mut sends, &p, 600);
    assert_slave_has(&pair, &sends, Duration::from_secs(60));

    // A crashed slave misses what is sent meanwhile, and fetches it by itself.
    pair.slave.kill9();
    send_n(&mut sends, &p, 400);
    pair.restart_slave();
    send_n(&mut sends, &p, 100);
    assert_slave_has(&pair, &sends, Duration::from_secs(60));

    // The slave refuses sends, saying it is not the master (a client routes none there: a
    // group's writes go to its master only).
    let mut rec = Vec::new();
    message::encode_record(
        &message::MessageFields {
            topic: "Replicated",
            body: b"x",
            ..Default::default()
        },
        &mut rec,
    )
    .unwrap();
    let h = protocol::Header::request(
        1,
        protocol::Command::Send(protocol::SendRequest {
            producer_group: "raw".into(),
            topic: "Replicated".into(),
            queue_id: 0,
            count: 1,
        }),
    );
    let f = raw_call(&pair.slave.addr, &h, &rec);
    assert_eq!(f.header.response_code(), ResponseCode::NotLeader);
    assert!(f.header.remark.contains("SLAVE"), "{}", f.header.remark);
    // Its offsets are the master's.
    assert_same_offsets(&pair.master_ns.addr, &pair.slave_ns.addr);

    // A topic the master creates, and then deletes, is created and deleted on the slave.
    let on_slave = |topic: &str| {
        PullConsumer::new(&pair.slave_ns.addr, "topics")
            .unwrap()
            .queues(topic)
            .is_ok()
    };
    create_topic(&pair.master_ns.addr, "Doomed", 1);
    let created = wait_for(Duration::from_secs(30), || on_slave("Doomed").then_some(()));
    assert!(created.is_some(), "{}", pair.slave.stderr());
    let out = mqadmin(
        &pair.master_ns.addr,
        &["deleteTopic", "-t", "Doomed", "-c", "DefaultCluster"],
    );
    assert!(out.status.success(), "{out:?}");
    let deleted = wait_for(Duration::from_secs(30), || {
        (!on_slave("Doomed")).then_some(())
    });
    assert!(deleted.is_some(), "{}", pair.slave.stderr());
    assert!(on_slave("Replicated"));
    drop(p);
    pair.master.terminate();
    pair.slave.terminate();
}

/// With `acl_access_key` / `acl_secret_key` on both (`ha::auth`: each proves the pair to the
/// other), replication works as without: two cores each, so shard 1's stream is redirected
/// to the master's core 1 and authenticated there.
#[test]
fn with_credentials_on_both_the_slave_holds_every_acknowledged_message() {
    let keys = "acl_access_key = \"replicator\"\nacl_secret_key = \"ha-secret-1\"\n";
    let pair = Pair::start(2, keys, keys);
    let p = producer(&pair.master_ns.addr);
    create_topic(&pair.master_ns.addr, "Replicated", 4);
    let mut sends = AckedSends::new("Replicated");
    send_n(&mut sends, &p, 300);
    assert_slave_has(&pair, &sends, Duration::from_secs(60));
    assert!(
        !pair.master.stderr().contains("refused a slave"),
        "{}",
        pair.master.stderr()
    );
}

#[test]
fn a_sync_master_waits_for_its_slave_and_says_when_it_cannot() {
    let mut pair = Pair::start(
        1,
        "broker_role = \"SYNC_MASTER\"\nslave_timeout_ms = 1000\nha_max_time_slave_not_catchup_ms = 2500\nha_send_heartbeat_interval_ms = 100\nmetrics_addr = \"127.0.0.1:0\"",
        "ha_send_heartbeat_interval_ms = 100",
    );
    create_topic(&pair.master_ns.addr, "Replicated", 2);
    let p = producer_without_retries(&pair.master_ns.addr, "sync");
    let mut sends = AckedSends::new("Replicated");
    wait_in_sync(&pair, Duration::from_secs(30));
    let out = mqadmin(
        &pair.master_ns.addr,
        &["ha-status", "-b", &pair.master.addr],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(SYNC_MASTER)") && text.contains("IN SYNC"),
        "{text}"
    );
    let out = mqadmin(&pair.slave_ns.addr, &["ha-status", "-b", &pair.slave.addr]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(SLAVE)") && text.contains(" connected"),
        "{text}"
    );
    // The metrics say the same.
    let url = metrics::addr(&pair.master, "broker metrics on ");
    let in_sync = wait_for(Duration::from_secs(10), || {
        let text = metrics::text(&url);
        (text.contains("corvus_replication_slave_in_sync{shard=\"0\",slave=\"1\"} 1")
            && text.contains("corvus_replication_in_sync_replicas{shard=\"0\"} 2"))
        .then_some(())
    });
    assert!(in_sync.is_some(), "{}", metrics::text(&url));
    send_n(&mut sends, &p, 200);
    // Acknowledged means on the slave too: it serves them at once (nothing to wait for).
    assert_slave_has(&pair, &sends, Duration::from_secs(5));

    // A frozen slave: the send is stored but not replicated in time, and the answer says so.
    let pid = pair.slave.pid();
    freeze(pid);
    let started = Instant::now();
    let e = match sends.send(&p) {
        Ok(r) => panic!(
            "acknowledged while the slave is frozen: {r:?}\nmaster log:\n{}",
            pair.master.stderr()
        ),
        Err(e) => e,
    };
    assert_eq!(e.code(), Some(ResponseCode::FlushSlaveTimeout), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(900), "{e}");
    assert!(e.to_string().contains("slave"), "{e}");
    // A RocketMQ client gets RocketMQ's answer: FLUSH_SLAVE_TIMEOUT with the send result
    // (its clients report SendStatus.FLUSH_SLAVE_TIMEOUT: stored on the master).
    let answer = rocketmq_send(&pair.master.addr, "Replicated");
    assert_eq!(
        answer.command.code,
        remoting::codes::response::FLUSH_SLAVE_TIMEOUT,
        "{:?}",
        answer.command
    );
    for field in ["msgId", "queueId", "queueOffset"] {
        assert!(
            answer.command.ext_fields.contains_key(field),
            "no {field} in {:?}",
            answer.command
        );
    }
    // Once the slave has left the in-sync set (the log says why), sends are answered again.
    let resumed = wait_for(Duration::from_secs(20), || sends.send(&p).ok());
    assert!(resumed.is_some(), "sends did not resume without the slave");
    let log = pair.master.stderr();
    assert!(
        log.contains("left the in-sync set") && log.contains("has not caught up"),
        "{log}"
    );
    // mqadmin says so too: why it left (by now it may also have been dropped as silent).
    let out = mqadmin(
        &pair.master_ns.addr,
        &["ha-status", "-b", &pair.master.addr],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("last left the in-sync set: slave 1"),
        "{text}"
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // It catches up, joins again, and has everything acknowledged.
    wait_in_sync(&pair, Duration::from_secs(30));
    send_n(&mut sends, &p, 50);
    assert_slave_has(&pair, &sends, Duration::from_secs(30));

    // Killed: the connection ends and the slave leaves at once; sends go on.
    pair.slave.kill9();
    let resumed = wait_for(Duration::from_secs(10), || sends.send(&p).ok());
    assert!(resumed.is_some());
    pair.restart_slave();
    wait_in_sync(&pair, Duration::from_secs(30));
    assert_slave_has(&pair, &sends, Duration::from_secs(30));
    pair.master.terminate();
    pair.slave.terminate();
}

/// A second SIGTERM during a graceful stop ends the process at once, as kill -9 would (and
/// as the signal's exit status says): here the stop waits for a send in flight that a
/// SYNC_MASTER holds for its frozen slave.
#[test]
fn a_second_sigterm_ends_a_stop_that_waits_for_a_frozen_slave() {
    use std::io::{Read, Write};
    let mut pair = Pair::start(
        1,
        "broker_role = \"SYNC_MASTER\"\nslave_timeout_ms = 60000\nha_max_time_slave_not_catchup_ms = 120000\nha_send_heartbeat_interval_ms = 100",
        "ha_send_heartbeat_interval_ms = 100",
    );
    create_topic(&pair.master_ns.addr, "Held", 1);
    wait_in_sync(&pair, Duration::from_secs(30));
    let pid = pair.slave.pid();
    freeze(pid);
    // A send the master stores and then waits on the frozen slave to acknowledge.
    let cmd = send_message_request("Held");
    let mut conn = std::net::TcpStream::connect(&pair.master.addr).unwrap();
    conn.write_all(&remoting::encode(&cmd, b"held").unwrap())
        .unwrap();
    // Its answer comes when the slave does or the master exits: read until then.
    let reader = std::thread::spawn(move || {
        let mut sink = [0u8; 4096];
        while conn.read(&mut sink).is_ok_and(|n| n > 0) {}
    });
    let consumer = PullConsumer::new(&pair.master_ns.addr, "held-check").unwrap();
    let stored = wait_for(Duration::from_secs(10), || {
        let q = consumer.queues("Held").ok()?.into_iter().next()?;
        let (_, max) = consumer.queue_offsets(&q).ok()?;
        (max == 1).then_some(())
    });
    assert!(
        stored.is_some(),
        "the send was not stored: {}",
        pair.master.stderr()
    );

    let master = pair.master.pid();
    // SAFETY: as above.
    unsafe { libc::kill(master, libc::SIGTERM) };
    let stopping = wait_for(Duration::from_secs(10), || {
        pair.master.stderr().contains("stopping").then_some(())
    });
    assert!(stopping.is_some(), "{}", pair.master.stderr());
    // SAFETY: as above.
    unsafe { libc::kill(master, libc::SIGTERM) };
    let status = wait_for(Duration::from_secs(15), || {
        pair.master.child.try_wait().ok().flatten()
    });
    let log = pair.master.stderr();
    let status =
        status.unwrap_or_else(|| panic!("the second SIGTERM did not end the stop:\n{log}"));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{log}");
    assert!(log.contains("a second signal while stopping"), "{log}");
    reader.join().unwrap();
}

#[test]
fn a_sync_master_short_of_replicas_refuses_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let ns = start_namesrv(&logs);
    let o = opts(
        &ns.addr,
        &dir.path().join("m"),
        1,
        "broker_role = \"SYNC_MASTER\"\nmin_in_sync_replicas = 2".into(),
    );
    let mut b = start_broker(&o, &logs);
    create_topic(&ns.addr, "Replicated", 1);
    let p = producer_without_retries(&ns.addr, "short");
    let e = p
        .send(client::Message::new("Replicated", b"x".to_vec()))
        .unwrap_err();
    assert_eq!(e.code(), Some(ResponseCode::InSyncReplicasNotEnough), "{e}");
    assert!(
        e.to_string().contains("no slave is connected")
            && e.to_string().contains("nothing was written"),
        "{e}"
    );
    let c = PullConsumer::new(&ns.addr, "c").unwrap();
    let q = c.queues("Replicated").unwrap().remove(0);
    assert_eq!(c.queue_offsets(&q).unwrap().1 .0, 0, "nothing stored");
    b.terminate();
}

#[test]
fn a_slave_config_without_a_master_or_with_id_0_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    for (toml, want) in [
        (
            "broker_role = \"SLAVE\"\nbroker_id = 1",
            "ha_master_address",
        ),
        (
            "broker_role = \"SLAVE\"\nha_master_address = \"127.0.0.1:1\"",
            "broker_id",
        ),
        ("broker_id = 2", "SLAVE"),
    ] {
        let o = opts("", &dir.path().join("d"), 1, toml.into());
        let (code, out) = run_broker_expecting_exit(&o, &logs, Duration::from_secs(30));
        assert_ne!(code, Some(0), "{out}");
        assert!(out.contains(want), "{toml}: {out}");
    }
}

/// A manual failover: the master dies with writes its slave never got, the slave is started
/// again as the master (a new epoch) and takes sends, and the old master is started again as
/// its slave. The old master cuts its log back to where the two agree (keeping the cut bytes
/// aside), then holds exactly what the new master holds: the writes only it had are gone
/// from the queues, not served under offsets the new master gave to other messages.
#[test]
fn an_old_master_back_as_a_slave_cuts_its_diverged_tail_and_follows_the_new_master() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let (ns_a, ns_b) = (start_namesrv(&logs), start_namesrv(&logs));
    let (data_a, data_b) = (dir.path().join("a"), dir.path().join("b"));
    // Each data directory keeps its tail ring across its starts, whatever the role: what
    // a broker acknowledged before a kill -9 comes back from there.
    let (ring_a, ring_b) = (ring_dir(), ring_dir());
    let on_ring = |mut o: BrokerOpts, ring: &tempfile::TempDir| {
        o.tail_ring_dir = Some(ring.path().to_owned());
        o.ring_dir_guard = None;
        o
    };
    let master_a = on_ring(opts(&ns_a.addr, &data_a, 1, String::new()), &ring_a);
    let mut a = start_broker(&master_a, &logs);
    let ha_a = a.preamble_addr("broker replication on ").unwrap();
    let slave = |ns: &str, data: &Path, master_ha: &str| {
        opts(
            ns,
            data,
            1,
            format!(
                "broker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{master_ha}\"\n"
            ),
        )
    };
    let mut b = start_broker(&on_ring(slave(&ns_b.addr, &data_b, &ha_a), &ring_b), &logs);
    create_topic(&ns_a.addr, "Replicated", 2);
    let p = producer(&ns_a.addr);
    let mut common = AckedSends::new("Replicated");
    send_n(&mut common, &p, 300);
    let pair_view = |ns: &str| PullConsumer::new(ns, "check").unwrap();
    let ids = |ns: &str| -> std::collections::BTreeSet<String> {
        drain_topic(&pair_view(ns), "Replicated", Duration::from_secs(30))
            .into_iter()
            .map(|m| m.msg_id)
            .collect()
    };
    let caught = wait_for(Duration::from_secs(30), || {
        (ids(&ns_b.addr).len() == 300).then_some(())
    });
    assert!(caught.is_some(), "{}", b.stderr());

    // The slave dies; the master acknowledges 100 more (ASYNC_MASTER), and dies too.
    b.kill9();
    let mut only_a = AckedSends::new("Replicated");
    send_n(&mut only_a, &p, 100);
    drop(p);
    a.kill9();
    // The slave becomes the master (its next start opens a new epoch) and takes sends.
    let mut b_master = on_ring(opts(&ns_a.addr, &data_b, 1, String::new()), &ring_b);
    b_master.name = "broker-a".into();
    let b = start_broker(&b_master, &logs);
    let ha_b = b.preamble_addr("broker replication on ").unwrap();
    let p = producer(&ns_a.addr);
    let mut after = AckedSends::new("Replicated");
    send_n(&mut after, &p, 50);

    // The old master comes back as its slave, cuts its tail and catches up.
    let a = start_broker(&on_ring(slave(&ns_b.addr, &data_a, &ha_b), &ring_a), &logs);
    // The new master holds what both had and what it took since, none of the old
    // master's last writes; the old master must end with exactly that.
    let want: std::collections::BTreeSet<String> = common
        .acked
        .keys()
        .chain(after.acked.keys())
        .cloned()
        .collect();
    assert_eq!(ids(&ns_a.addr), want);
    assert_eq!(only_a.acked.len(), 100);
    let same = wait_for(Duration::from_secs(30), || {
        (ids(&ns_b.addr) == want).then_some(())
    });
    assert!(
        same.is_some(),
        "the old master does not hold the new master's log: {} of {} ({} of them wanted)\nits log:\n{}",
        ids(&ns_b.addr).len(),
        want.len(),
        ids(&ns_b.addr).intersection(&want).count(),
        a.stderr()
    );
    assert!(a.stderr().contains("cut back"), "{}", a.stderr());
    let kept = std::fs::read_dir(data_a.join("shard-000").join("truncated"))
        .unwrap()
        .count();
    assert_eq!(kept, 1, "the cut bytes are kept aside");
    // The queue offsets agree too.
    assert_same_offsets(&ns_a.addr, &ns_b.addr);
}

/// A slave whose disk fills up cannot store its master's stream: it says so, leaves the
/// in-sync set, and the SYNC_MASTER goes on alone, losing nothing it acknowledged. Once
/// space returns the slave catches up by itself, with no restart, and holds every message
/// the master acknowledged.
#[test]
fn a_slave_on_a_full_disk_leaves_the_in_sync_set_and_catches_up_once_space_returns() {
    let Some(fs) = loop_fs::loop_fs_or_skip(128) else {
        return;
    };
    let slave_data = fs.mnt.join("slave");
    let pair = Pair::start_in(
        1,
        "broker_role = \"SYNC_MASTER\"\nslave_timeout_ms = 1000\nha_max_time_slave_not_catchup_ms = 1500\nha_send_heartbeat_interval_ms = 100",
        "ha_send_heartbeat_interval_ms = 100\ndisk_check_interval_ms = 600000\ndisk_reserve_bytes = 4194304",
        Some(&slave_data),
    );
    create_topic(&pair.master_ns.addr, "Replicated", 2);
    let p = producer_without_retries(&pair.master_ns.addr, "full-slave");
    let mut sends = AckedSends::new("Replicated");
    wait_in_sync(&pair, Duration::from_secs(30));
    send_n(&mut sends, &p, 200);
    assert_slave_has(&pair, &sends, Duration::from_secs(30));

    // The slave's disk fills: its appends fail once its segment is used up, and the master
    // goes on alone (a few sends may be answered FLUSH_SLAVE_TIMEOUT meanwhile: stored on
    // the master, not known replicated, and not counted here as acknowledged).
    let filler = fs.fill();
    let mut acked_after = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked_after < 3000 {
        assert!(Instant::now() < deadline, "the master did not go on alone");
        match sends.send(&p) {
            Ok(_) => acked_after += 1,
            Err(e) => assert_eq!(e.code(), Some(ResponseCode::FlushSlaveTimeout), "{e}"),
        }
    }
    let left = wait_for(Duration::from_secs(30), || {
        pair.master
            .stderr()
            .contains("a slave left the in-sync set")
            .then_some(())
    });
    assert!(left.is_some(), "{}", pair.master.stderr());
    assert!(
        pair.slave.stderr().contains("cannot store the frame"),
        "the slave does not say why it stopped: {}",
        pair.slave.stderr()
    );

    // Space returns: the slave catches up by itself and joins the in-sync set again.
    fs.unfill(&filler);
    wait_in_sync(&pair, Duration::from_secs(60));
    send_n(&mut sends, &p, 100);
    assert_slave_has(&pair, &sends, Duration::from_secs(60));
}

/// `slave_read_enable`: a consumer far behind (more than `hot_bytes_max`) is sent to the
/// in-sync slave, reads there, and comes back to the master once it is close; it reads
/// every message once, in order. A consumer close to the end never leaves the master.
#[test]
fn a_consumer_far_behind_reads_from_the_slave_and_comes_back_to_the_master() {
    let pair = MasterSlave::start("slave_read_enable = true\nhot_bytes_max = 1048576\n");
    let ns = pair.ns.addr.clone();
    create_topic(&ns, "FarBehind", 1);
    let p = producer(&ns);
    let body = vec![b'x'; 1024];
    for i in 0..8000 {
        p.send(client::Message::new("FarBehind", body.clone()).with_key(format!("k{i}")))
            .unwrap();
    }
    // The slave has it all before the consumer starts.
    pair.wait_in_sync(Duration::from_secs(30));
    let consumed = |b: &Proc| pair.consumed(b);
    let (master, slave) = (&pair.master, &pair.slave);
    let (m0, s0) = (consumed(master), consumed(slave));

    let consumer = PullConsumer::new(&ns, "far-behind").unwrap();
    let q = consumer.queues("FarBehind").unwrap().remove(0);
    let opts = client::PullOptions {
        max_messages: 32,
        ..Default::default()
    };
    let mut offset = client::QueueOffset(0);
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while keys.len() < 8000 {
        assert!(Instant::now() < deadline, "read {}", keys.len());
        let r = consumer.pull(&q, offset, &opts).unwrap();
        for m in &r.messages {
            keys.push(m.keys[0].clone());
        }
        offset = r.next_offset;
    }
    let want: Vec<String> = (0..8000).map(|i| format!("k{i}")).collect();
    assert_eq!(keys, want, "every message once, in order");
    let (m1, s1) = (consumed(master), consumed(slave));
    let (on_master, on_slave) = (m1 - m0, s1 - s0);
    assert!(
        on_slave >= 4000,
        "the consumer far behind read mostly from the slave: master {on_master}, slave {on_slave}"
    );
    assert!(
        (32..4000).contains(&on_master),
        "it started and ended on the master: master {on_master}, slave {on_slave}"
    );
    // A consumer at the end stays on the master.
    let near = PullConsumer::new(&ns, "near-the-end").unwrap();
    let r = near.pull(&q, client::QueueOffset(7990), &opts).unwrap();
    assert_eq!(r.messages.len(), 10);
    let r = near.pull(&q, r.next_offset, &opts).unwrap();
    assert!(r.messages.is_empty());
    assert_eq!(
        consumed(slave),
        s1,
        "a consumer near the end never reads the slave"
    );
}

/// A remoting request with `fields` and `body`, signed as `(user, password)` (ACL 2.0).
fn signed_call(
    addr: &str,
    code: i32,
    fields: &[(&str, &str)],
    body: &[u8],
    (user, password): (&str, &str),
) -> remoting::Frame {
    let mut cmd = remoting::RemotingCommand::request(code, 5);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    integration::sign_remoting_command(&mut cmd, body, (user, password));
    remoting_call(addr, &cmd, body)
}

/// ACL 2.0's users and ACLs follow the master to its slave: a user created at the master is
/// one the slave knows (it signs requests the slave takes), a user deleted is gone there
/// too, and the slave keeps the set on its own disk.
#[test]
fn a_slave_takes_its_masters_users_and_acls() {
    use remoting::codes::{request, response};
    let root = ("root", "root-secret-1");
    let on = "acl2_authentication_enable = true\nacl2_authorization_enable = true\n";
    let master_toml = format!(
        "{on}acl2_init_user = '{{\"username\":\"root\",\"password\":\"root-secret-1\",\"userType\":\"Super\"}}'\n"
    );
    let mut pair = Pair::start(1, &master_toml, on);
    let user = br#"{"username":"app","password":"app-secret-1","userType":"Normal"}"#;
    let f = signed_call(
        &pair.master.addr,
        request::AUTH_CREATE_USER,
        &[("username", "app")],
        user,
        root,
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let acl = br#"{"subject":"User:app","policies":[{"entries":[{"resource":"Topic:Orders","actions":["Pub"],"decision":"Allow"}]}]}"#;
    let f = signed_call(
        &pair.master.addr,
        request::AUTH_CREATE_ACL,
        &[("subject", "User:app")],
        acl,
        root,
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);

    // The slave knows root (only the master was told of it) and app, with app's ACL.
    let slave = pair.slave.addr.clone();
    let got = wait_for(Duration::from_secs(30), || {
        let f = signed_call(
            &slave,
            request::AUTH_GET_ACL,
            &[("subject", "User:app")],
            b"",
            root,
        );
        // A missing ACL is SUCCESS without a body, as RocketMQ answers it: wait for app's.
        (f.command.code == response::SUCCESS && !f.body.is_empty()).then_some(f)
    })
    .expect("the slave takes the master's users and ACLs");
    let body: serde_json::Value = remoting::body::from_json(&got.body).unwrap();
    assert_eq!(
        body["policies"][0]["entries"][0]["resource"],
        "Topic:Orders"
    );

    // The slave takes changes from its master only.
    let mut cmd = remoting::RemotingCommand::request(request::AUTH_DELETE_USER, 6);
    cmd.ext_fields.insert("username".into(), "app".into());
    cmd.ext_fields.insert("AccessKey".into(), root.0.into());
    let sig = acl::sign::sign_remoting(cmd.ext_fields.iter(), b"", root.1);
    cmd.ext_fields.insert("Signature".into(), sig);
    let f = remoting_call(&slave, &cmd, b"");
    assert_eq!(
        f.command.code,
        response::SLAVE_NOT_AVAILABLE,
        "{:?}",
        f.command.remark
    );

    // A deleted user goes from the slave too; the set is on the slave's disk.
    let f = signed_call(
        &pair.master.addr,
        request::AUTH_DELETE_USER,
        &[("username", "app")],
        b"",
        root,
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    wait_for(Duration::from_secs(30), || {
        let f = signed_call(
            &slave,
            request::AUTH_GET_USER,
            &[("username", "app")],
            b"",
            root,
        );
        // Asked for a user that is not there, RocketMQ answers SUCCESS without a body.
        (f.command.code == response::SUCCESS && f.body.is_empty()).then_some(())
    })
    .expect("the user deleted at the master is gone from the slave");
    let stored =
        std::fs::read_to_string(pair.slave_opts.data_dir.join("config/auth.json")).unwrap();
    assert!(
        stored.contains("\"root\"") && !stored.contains("\"app\""),
        "{stored}"
    );
    pair.master.terminate();
    pair.restart_slave();
    // Without its master, the restarted slave still knows root from its own disk.
    let f = signed_call(
        &pair.slave.addr,
        request::AUTH_GET_USER,
        &[("username", "root")],
        b"",
        root,
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    pair.slave.terminate();
}

/// A slave takes its master's topic attributes with the topic table, so a promoted slave
/// treats a topic as its master did (one whose `dedup.enable` is set deduplicates there
/// too): an attribute set, changed and removed on the master is each time seen on the
/// slave, through RocketMQ's GET_TOPIC_CONFIG.
#[test]
fn a_slave_follows_its_masters_topic_attributes() {
    let ms = MasterSlave::start("");
    let topic = "Attributed";
    let dedup_of = |addr: &str| topic_attribute(addr, topic, "dedup.enable");
    for (change, want) in [
        ("+dedup.enable=true", Some("true")),
        ("+dedup.enable=false", Some("false")),
        ("-dedup.enable", None),
    ] {
        let f = update_topic_with_attributes(&ms.master.addr, topic, 2, change);
        assert_eq!(f.command.code, 0, "{change}: {:?}", f.command.remark);
        assert_eq!(
            dedup_of(&ms.master.addr).as_deref(),
            want,
            "the master after {change}"
        );
        let followed = wait_for(Duration::from_secs(15), || {
            (dedup_of(&ms.slave.addr).as_deref() == want).then_some(())
        });
        assert!(
            followed.is_some(),
            "the slave did not follow {change}: it has {:?}",
            dedup_of(&ms.slave.addr)
        );
    }
}
