//! Consumer groups against the real broker: queue sharing by each allocation strategy, a
//! crashed member's queues handed over, clean shutdowns that re-deliver nothing,
//! broadcasting, offsets across a broker kill -9, start positions and resets, tags, retry
//! into the dead-letter topic, and ordered consumption through a rebalance.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{
    Admin, AllocateStrategy, Averagely, AveragelyByCircle, ByConfig, ConsistentHash, ConsumeFrom,
    ConsumeStatus, Message, MessageModel, MessageQueue, PushConsumer, PushConsumerBuilder,
};
use integration::{mqadmin, producer, stored_offsets, wait_for, Cluster};

/// Short timeouts so membership changes take a second, not minutes.
const BROKER_TOML: &str = "consumer_timeout_ms = 1500\noffset_flush_interval_ms = 100\n\
                           retry_delay_levels_ms = [50, 50, 200, 200, 300, 300]\n";
const LEASE_MS: u64 = integration::GROUP_LEASE_MS;
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct Got {
    member: usize,
    msg_id: String,
    topic: String,
    queue_id: u32,
    offset: u64,
    body: String,
    keys: Vec<String>,
    reconsume_times: i32,
    at: Instant,
}

type Log = Arc<Mutex<Vec<Got>>>;

fn cluster() -> Cluster {
    Cluster::start_with(2, "small", |o| o.config_toml = Some(BROKER_TOML.into()))
}

/// A [`cluster`] with `name` created with `queues` queues, and its NameServer's address.
fn cluster_with_topic(name: &str, queues: u32) -> (Cluster, String) {
    let c = cluster();
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, name, queues);
    (c, ns)
}

fn member(ns: &str, group: &str, topic: &str) -> PushConsumerBuilder {
    integration::group_member(ns, group, topic)
        .reconsume_delay_ms(50)
        .batch_max(4)
}

/// A [`member`] of `group` on `topic`, started, logging what it consumes as member `i`.
fn started(ns: &str, group: &str, topic: &str, log: &Log, i: usize) -> PushConsumer {
    let m = member(ns, group, topic).build().unwrap();
    m.start(record(log, i)).unwrap();
    m
}

fn shutdown_all(members: &[PushConsumer]) {
    for m in members {
        m.shutdown();
    }
}

/// Every delivery of the message `msg_id` in the log, in order.
fn deliveries_of(log: &Log, msg_id: &str) -> Vec<Got> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|g| g.msg_id == msg_id)
        .cloned()
        .collect()
}

fn record(log: &Log, member: usize) -> impl Fn(&[client::MessageExt]) -> ConsumeStatus {
    let log = Arc::clone(log);
    move |msgs| {
        let mut l = log.lock().unwrap();
        for m in msgs {
            l.push(Got {
                member,
                msg_id: m.msg_id.clone(),
                topic: m.topic.clone(),
                queue_id: m.queue_id,
                offset: m.queue_offset.0,
                body: String::from_utf8_lossy(&m.body).into_owned(),
                keys: m.keys.clone(),
                reconsume_times: m.reconsume_times,
                at: Instant::now(),
            });
        }
        ConsumeStatus::Success
    }
}

fn send(ns: &str, topic: &str, from: usize, n: usize) -> Vec<String> {
    let p = producer(ns);
    (from..from + n)
        .map(|i| {
            p.send(Message::new(topic, format!("m{i}")).with_key(format!("k{i}")))
                .unwrap()
                .msg_id
        })
        .collect()
}

/// Waits until the log holds every id of `ids`.
fn wait_all(log: &Log, ids: &[String]) {
    let want: BTreeSet<&String> = ids.iter().collect();
    let ok = wait_for(WAIT, || {
        let l = log.lock().unwrap();
        let have: BTreeSet<&String> = l.iter().map(|g| &g.msg_id).collect();
        want.is_subset(&have).then_some(())
    });
    let missing = {
        let l = log.lock().unwrap();
        let have: BTreeSet<&String> = l.iter().map(|g| &g.msg_id).collect();
        want.difference(&have).count()
    };
    assert!(
        ok.is_some(),
        "{missing} of {} messages never delivered",
        ids.len()
    );
}

fn counts(log: &Log) -> HashMap<String, usize> {
    let mut c = HashMap::new();
    for g in log.lock().unwrap().iter() {
        *c.entry(g.msg_id.clone()).or_insert(0) += 1;
    }
    c
}

/// The body of a sentinel message (see [`send_sentinels`]).
const SENTINEL: &str = "sentinel";

/// Sends one sentinel message to each of the `queues` queues of `topic` (tagged `TagA`, so
/// every subscription of these tests takes it), and returns their ids.
fn send_sentinels(ns: &str, topic: &str, queues: u32) -> Vec<String> {
    let p = producer(ns);
    (0..queues)
        .map(|queue_id| {
            let q = MessageQueue {
                topic: topic.into(),
                broker_name: "broker-a".into(),
                queue_id,
            };
            let m = Message::new(topic, SENTINEL).with_tags("TagA");
            p.send_to_queue(m, &q).unwrap().msg_id
        })
        .collect()
}

/// Sends a sentinel message to each queue of `topic` and waits until every log of `logs`
/// holds all of them. A queue is read in offset order, so a message delivered again (or one
/// that should not have been delivered) would come before its queue's sentinel: once the
/// sentinels are in, the logs can be checked for what must not be there.
fn drain(ns: &str, topic: &str, queues: u32, logs: &[&Log]) -> BTreeSet<String> {
    let ids = send_sentinels(ns, topic, queues);
    for log in logs {
        wait_all(log, &ids);
    }
    ids.into_iter().collect()
}

/// [`counts`] without the sentinel messages.
fn counts_without(log: &Log, sentinels: &BTreeSet<String>) -> HashMap<String, usize> {
    let mut c = counts(log);
    c.retain(|id, _| !sentinels.contains(id));
    c
}

/// How many deliveries `log` holds that are not sentinels.
fn len_without(log: &Log, sentinels: &BTreeSet<String>) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|g| !sentinels.contains(&g.msg_id))
        .count()
}

/// Waits until `group` has committed offsets on every queue of `topic` for which `covered`
/// holds, at the queue's end (all it consumed there is committed).
fn wait_committed(ns: &str, group: &str, topic: &str, covered: impl Fn(u32) -> bool) {
    let admin = Admin::new(ns).unwrap();
    let ok = wait_for(WAIT, || {
        let progress = admin.consumer_progress(group, topic).ok()?;
        progress
            .iter()
            .filter(|p| covered(p.queue.queue_id))
            .all(|p| p.committed == Some(p.max_offset))
            .then_some(())
    });
    admin.shutdown();
    assert!(
        ok.is_some(),
        "{group} never committed its consumption of {topic}"
    );
}

/// Waits until `group` has a committed offset on every queue of `topic`. A member commits
/// where it starts on a queue once it has fixed that start (from its consume-from setting)
/// and pulled there, so after this, messages sent are ones it reads from where it started.
fn wait_started(ns: &str, group: &str, topic: &str) {
    let admin = Admin::new(ns).unwrap();
    let ok = wait_for(WAIT, || {
        let progress = admin.consumer_progress(group, topic).ok()?;
        (!progress.is_empty() && progress.iter().all(|p| p.committed.is_some())).then_some(())
    });
    admin.shutdown();
    assert!(
        ok.is_some(),
        "{group} never fixed where it starts on {topic}"
    );
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits (spinning; it is at most a millisecond) until the clock has passed `ms`, and
/// returns the time then.
fn ms_after(ms: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let now = now_ms();
        if now > ms {
            return now;
        }
        assert!(Instant::now() < deadline, "the clock does not move");
        std::thread::yield_now();
    }
}

/// Waits until the members' queues partition `queues` of `topic`, the same for a second
/// (a passing state of a rebalance can be a partition too).
fn wait_partition(members: &[&PushConsumer], topic: &str, queues: u32) -> Vec<Vec<u32>> {
    let mut last: Option<(Vec<Vec<u32>>, Instant)> = None;
    let current = || {
        let mut seen = BTreeSet::new();
        let mut per = Vec::new();
        for m in members {
            let mine: Vec<u32> = m
                .assigned_queues()
                .into_iter()
                .filter(|q| q.topic == topic)
                .map(|q| q.queue_id)
                .collect();
            for q in &mine {
                if !seen.insert(*q) {
                    return None;
                }
            }
            per.push(mine);
        }
        (seen.len() == queues as usize).then_some(per)
    };
    let r = wait_for(WAIT, || {
        let now = current();
        match (&last, now) {
            (Some((prev, since)), Some(p)) if *prev == p => {
                (since.elapsed() >= Duration::from_secs(1)).then_some(p)
            }
            (_, Some(p)) => {
                last = Some((p, Instant::now()));
                None
            }
            (_, None) => {
                last = None;
                None
            }
        }
    });
    r.unwrap_or_else(|| {
        let now: Vec<Vec<MessageQueue>> = members.iter().map(|m| m.assigned_queues()).collect();
        panic!("queues never partitioned: {now:?}")
    })
}

#[test]
fn three_members_share_the_queues_by_each_strategy_and_each_message_goes_to_one() {
    let (_cluster, ns) = cluster_with_topic("Shared", 8);
    let q = |id| MessageQueue {
        topic: "Shared".into(),
        broker_name: "broker-a".into(),
        queue_id: id,
    };
    type Make = Box<dyn Fn(usize) -> Box<dyn AllocateStrategyBox>>;
    let strategies: Vec<(&str, Make)> = vec![
        ("avg", Box::new(|_| Box::new(Averagely))),
        ("circle", Box::new(|_| Box::new(AveragelyByCircle))),
        ("hash", Box::new(|_| Box::new(ConsistentHash::default()))),
        (
            "config",
            Box::new(move |i| {
                let mine = (0..8u32)
                    .filter(|id| *id as usize % 3 == i)
                    .map(q)
                    .collect();
                Box::new(ByConfig { queues: mine })
            }),
        ),
    ];
    let mut sent_total = 0;
    for (name, make) in strategies {
        let group = format!("share-{name}");
        let log: Log = Arc::default();
        let members: Vec<PushConsumer> = (0..3)
            .map(|i| {
                let m = make(i)
                    .apply(member(&ns, &group, "Shared"))
                    .build()
                    .unwrap();
                m.start(record(&log, i)).unwrap();
                m
            })
            .collect();
        let refs: Vec<&PushConsumer> = members.iter().collect();
        let per = wait_partition(&refs, "Shared", 8);
        if name == "avg" {
            let mut sizes: Vec<usize> = per.iter().map(Vec::len).collect();
            sizes.sort_unstable();
            assert_eq!(sizes, vec![2, 3, 3], "averagely: {per:?}");
        }
        if name == "circle" || name == "config" {
            let mut all = per.clone();
            all.sort();
            assert_eq!(
                all,
                vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]],
                "{name}"
            );
        }
        let ids = send(&ns, "Shared", sent_total, 48);
        sent_total += 48;
        wait_all(&log, &ids);
        drain(&ns, "Shared", 8, &[&log]);
        let c = counts(&log);
        for id in &ids {
            assert_eq!(c.get(id), Some(&1), "{name}: message {id} delivered once");
        }
        // Each member got exactly this round's messages of its own queues (earlier rounds'
        // messages were read while the members were still joining).
        let round: BTreeSet<&String> = ids.iter().collect();
        for g in log
            .lock()
            .unwrap()
            .iter()
            .filter(|g| round.contains(&g.msg_id))
        {
            assert!(
                per[g.member].contains(&g.queue_id),
                "{name}: member {} got queue {}",
                g.member,
                g.queue_id
            );
        }
        shutdown_all(&members);
    }
}

/// Boxed strategies of different types, applied to a builder.
trait AllocateStrategyBox {
    fn apply(self: Box<Self>, b: PushConsumerBuilder) -> PushConsumerBuilder;
}

impl<T: AllocateStrategy + 'static> AllocateStrategyBox for T {
    fn apply(self: Box<Self>, b: PushConsumerBuilder) -> PushConsumerBuilder {
        b.allocate_strategy(*self)
    }
}

#[test]
fn a_crashed_members_queues_move_within_the_stated_time_and_nothing_is_lost() {
    let (_cluster, ns) = cluster_with_topic("Crash", 6);
    let log: Log = Arc::default();
    // Member 0 never commits on its own (a long commit interval), so its crash re-delivers
    // everything it consumed: the stated bound is "what the member consumed since its last
    // commit".
    let members: Vec<PushConsumer> = (0..3)
        .map(|i| {
            let b = member(&ns, "crash", "Crash");
            let b = if i == 0 {
                b.commit_interval_ms(3_600_000)
            } else {
                b
            };
            let m = b.build().unwrap();
            m.start(record(&log, i)).unwrap();
            m
        })
        .collect();
    let refs: Vec<&PushConsumer> = members.iter().collect();
    let per = wait_partition(&refs, "Crash", 6);
    let first = send(&ns, "Crash", 0, 60);
    wait_all(&log, &first);
    // The periodic commits of members 1 and 2 cover what they consumed (member 0 commits
    // nothing).
    let crashed_queues = per[0].clone();
    wait_committed(&ns, "crash", "Crash", |q| !crashed_queues.contains(&q));
    assert!(!crashed_queues.is_empty());
    let crash_at = Instant::now();
    members[0].abort();
    let second = send(&ns, "Crash", 60, 60);
    wait_all(&log, &second);
    let handover = crash_at.elapsed();
    // Stated bound: member timeout (1.5 s) or lease (1.5 s), whichever is later, plus a
    // rebalance and a lease retry; 6 s leaves room for a loaded machine.
    assert!(
        handover < Duration::from_secs(6),
        "hand-over took {handover:?}"
    );
    let refs: Vec<&PushConsumer> = members[1..].iter().collect();
    wait_partition(&refs, "Crash", 6);
    let c = counts(&log);
    for id in first.iter().chain(&second) {
        assert!(c.contains_key(id), "message {id} lost");
    }
    // Duplicates are exactly what the crashed member consumed after its last commit.
    let dups: BTreeSet<&String> = c
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id)
        .collect();
    let l = log.lock().unwrap();
    let by_crashed: BTreeSet<&String> = l
        .iter()
        .filter(|g| g.member == 0)
        .map(|g| &g.msg_id)
        .collect();
    assert!(!by_crashed.is_empty());
    assert_eq!(dups, by_crashed, "re-delivered after the crash");
    assert!(c.values().all(|n| *n <= 2));
    drop(l);
    shutdown_all(&members[1..]);
}

#[test]
fn a_clean_shutdown_and_a_join_redeliver_nothing() {
    let (_cluster, ns) = cluster_with_topic("Clean", 4);
    let log: Log = Arc::default();
    let a = started(&ns, "clean", "Clean", &log, 0);
    let b = started(&ns, "clean", "Clean", &log, 1);
    wait_partition(&[&a, &b], "Clean", 4);
    // Messages keep flowing while members leave and join.
    let mut ids = send(&ns, "Clean", 0, 40);
    b.shutdown();
    ids.extend(send(&ns, "Clean", 40, 40));
    wait_partition(&[&a], "Clean", 4);
    let d = started(&ns, "clean", "Clean", &log, 2);
    ids.extend(send(&ns, "Clean", 80, 40));
    wait_partition(&[&a, &d], "Clean", 4);
    ids.extend(send(&ns, "Clean", 120, 40));
    wait_all(&log, &ids);
    let sentinels = drain(&ns, "Clean", 4, &[&log]);
    let c = counts_without(&log, &sentinels);
    let dups: Vec<_> = c.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dups.is_empty(),
        "re-delivered on a clean rebalance: {dups:?}"
    );
    assert_eq!(c.len(), 160);
    a.shutdown();
    d.shutdown();
}

#[test]
fn broadcasting_delivers_everything_to_everyone_and_keeps_offsets_locally() {
    let (_cluster, ns) = cluster_with_topic("Bcast", 3);
    let log: Log = Arc::default();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let make = |i: usize| {
        member(&ns, "bcast", "Bcast")
            .message_model(MessageModel::Broadcasting)
            .offset_store_dir(dirs[i].path())
            .build()
            .unwrap()
    };
    let members: Vec<PushConsumer> = (0..3)
        .map(|i| {
            let m = make(i);
            m.start(record(&log, i)).unwrap();
            m
        })
        .collect();
    let ids = send(&ns, "Bcast", 0, 30);
    let ok = wait_for(WAIT, || {
        let l = log.lock().unwrap();
        (0..3)
            .all(|i| l.iter().filter(|g| g.member == i).count() >= 30)
            .then_some(())
    });
    assert!(ok.is_some(), "not every member got every message");
    for i in 0..3 {
        let l = log.lock().unwrap();
        let got: BTreeSet<&String> = l
            .iter()
            .filter(|g| g.member == i)
            .map(|g| &g.msg_id)
            .collect();
        assert_eq!(got.len(), 30, "member {i}");
        assert!(ids.iter().all(|id| got.contains(id)));
    }
    // A member restarted with its offsets file continues where it stopped.
    members[0].shutdown();
    let again = make(0);
    let log2: Log = Arc::default();
    again.start(record(&log2, 0)).unwrap();
    let more = send(&ns, "Bcast", 30, 6);
    wait_all(&log2, &more);
    let sentinels = drain(&ns, "Bcast", 3, &[&log2]);
    assert_eq!(len_without(&log2, &sentinels), 6, "old messages came back");
    again.shutdown();
    shutdown_all(&members[1..]);
}

#[test]
fn committed_offsets_survive_a_broker_kill_9() {
    let (mut c, ns) = cluster_with_topic("Durable", 4);
    let log: Log = Arc::default();
    let m = started(&ns, "durable", "Durable", &log, 0);
    let first = send(&ns, "Durable", 0, 40);
    wait_all(&log, &first);
    // The member's commits of all 40, in the broker's offsets files on disk.
    let stored = wait_for(WAIT, || {
        (stored_offsets(&c.opts.data_dir, "durable", "Durable") == 40).then_some(())
    });
    assert!(
        stored.is_some(),
        "the commits never reached the offsets files"
    );
    m.abort();
    c.broker.kill9();
    c.restart_broker();
    let out = mqadmin(
        &ns,
        &["consumer-progress", "-g", "durable", "-t", "Durable"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("total backlog 0"), "{text}");
    let log2: Log = Arc::default();
    let m2 = started(&ns, "durable", "Durable", &log2, 1);
    let second = send(&ns, "Durable", 40, 8);
    wait_all(&log2, &second);
    let sentinels = drain(&ns, "Durable", 4, &[&log2]);
    let got: Vec<String> = log2
        .lock()
        .unwrap()
        .iter()
        .filter(|g| !sentinels.contains(&g.msg_id))
        .map(|g| g.body.clone())
        .collect();
    assert_eq!(got.len(), 8, "consumed again after the restart: {got:?}");
    m2.shutdown();
}

#[test]
fn groups_start_from_first_last_or_a_timestamp_and_reset_offset_moves_them() {
    let (_cluster, ns) = cluster_with_topic("Start", 2);
    let old = send(&ns, "Start", 0, 10);
    // Every `old` message was stored by now, so before `t`; every `mid` one after it.
    let t = ms_after(now_ms());
    ms_after(t);
    let mid = send(&ns, "Start", 10, 10);
    let logs: Vec<Log> = (0..3).map(|_| Arc::default()).collect();
    let froms = [
        ConsumeFrom::First,
        ConsumeFrom::Last,
        ConsumeFrom::Timestamp(t),
    ];
    let members: Vec<PushConsumer> = froms
        .iter()
        .enumerate()
        .map(|(i, from)| {
            let m = member(&ns, &format!("start-{i}"), "Start")
                .consume_from(*from)
                .build()
                .unwrap();
            m.start(record(&logs[i], i)).unwrap();
            wait_partition(&[&m], "Start", 2);
            m
        })
        .collect();
    // Each member has fixed its start on each queue before more is sent.
    for i in 0..froms.len() {
        wait_started(&ns, &format!("start-{i}"), "Start");
    }
    let new = send(&ns, "Start", 20, 10);
    let all: Vec<String> = old.iter().chain(&mid).chain(&new).cloned().collect();
    wait_all(&logs[0], &all);
    wait_all(&logs[1], &new);
    let ts: Vec<String> = mid.iter().chain(&new).cloned().collect();
    wait_all(&logs[2], &ts);
    let sentinels = drain(&ns, "Start", 2, &[&logs[0], &logs[1], &logs[2]]);
    assert_eq!(len_without(&logs[0], &sentinels), 30, "first");
    assert_eq!(len_without(&logs[1], &sentinels), 10, "last");
    assert_eq!(len_without(&logs[2], &sentinels), 20, "timestamp");
    // Reset the `last` group to the first offset: the running member, idle since it
    // committed all it read, re-reads everything.
    wait_committed(&ns, "start-1", "Start", |_| true);
    let out = mqadmin(
        &ns,
        &[
            "reset-offset",
            "-g",
            "start-1",
            "-t",
            "Start",
            "--to",
            "first",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = wait_for(WAIT, || {
        (len_without(&logs[1], &sentinels) >= 40).then_some(())
    });
    assert!(
        ok.is_some(),
        "reset not adopted: {}",
        len_without(&logs[1], &sentinels)
    );
    shutdown_all(&members);
}

#[test]
fn push_consumers_filter_by_tag_expression() {
    let (_cluster, ns) = cluster_with_topic("Tags", 2);
    let p = producer(&ns);
    for i in 0..30 {
        let tag = ["TagA", "TagB", "TagC"][i % 3];
        p.send(Message::new("Tags", format!("m{i}")).with_tags(tag))
            .unwrap();
    }
    let mut runs = Vec::new();
    for (i, expr) in ["*", "TagA", "TagA || TagB"].iter().enumerate() {
        let log: Log = Arc::default();
        let m = PushConsumer::builder()
            .namesrv(&ns)
            .group(format!("tags-{i}"))
            .subscribe("Tags", *expr)
            .consume_from(ConsumeFrom::First)
            .heartbeat_interval_ms(200)
            .queue_lease_ms(LEASE_MS)
            .suspend_timeout_ms(300)
            .build()
            .unwrap();
        let l2 = Arc::clone(&log);
        m.start(move |msgs| {
            let mut l = l2.lock().unwrap();
            for msg in msgs {
                l.push(Got {
                    member: 0,
                    msg_id: msg.msg_id.clone(),
                    topic: msg.tags.clone().unwrap_or_default(),
                    queue_id: msg.queue_id,
                    offset: msg.queue_offset.0,
                    body: String::new(),
                    keys: Vec::new(),
                    reconsume_times: 0,
                    at: Instant::now(),
                });
            }
            ConsumeStatus::Success
        })
        .unwrap();
        runs.push((*expr, log, m));
    }
    for (expr, want) in [("*", 30), ("TagA", 10), ("TagA || TagB", 20)] {
        let (_, log, _) = runs.iter().find(|r| r.0 == expr).unwrap();
        let ok = wait_for(WAIT, || (log.lock().unwrap().len() >= want).then_some(()));
        assert!(ok.is_some(), "{expr}");
    }
    // The sentinels are tagged TagA, which every expression takes.
    let logs: Vec<&Log> = runs.iter().map(|r| &r.1).collect();
    let sentinels = drain(&ns, "Tags", 2, &logs);
    for (expr, log, m) in &runs {
        let tags: BTreeMap<String, usize> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|g| !sentinels.contains(&g.msg_id))
            .fold(BTreeMap::new(), |mut acc, g| {
                *acc.entry(g.topic.clone()).or_insert(0) += 1;
                acc
            });
        let want: BTreeMap<String, usize> = match *expr {
            "*" => [("TagA", 10), ("TagB", 10), ("TagC", 10)].as_slice(),
            "TagA" => [("TagA", 10)].as_slice(),
            _ => [("TagA", 10), ("TagB", 10)].as_slice(),
        }
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
        assert_eq!(tags, want, "{expr}");
        m.shutdown();
    }
}

#[test]
fn a_failing_message_goes_through_retry_into_the_dead_letter_topic() {
    let (_cluster, ns) = cluster_with_topic("Fail", 2);
    let log: Log = Arc::default();
    let m = member(&ns, "fail", "Fail")
        .max_reconsume_times(2)
        .batch_max(1)
        .build()
        .unwrap();
    let rec = record(&log, 0);
    m.start(move |msgs| {
        rec(msgs);
        if msgs.iter().any(|x| x.keys.iter().any(|k| k == "bad")) {
            ConsumeStatus::ReconsumeLater
        } else {
            ConsumeStatus::Success
        }
    })
    .unwrap();
    wait_partition(&[&m], "Fail", 2);
    let p = producer(&ns);
    let bad = p
        .send(
            Message::new("Fail", "poison")
                .with_key("bad")
                .with_tags("T1"),
        )
        .unwrap();
    let good = send(&ns, "Fail", 0, 5);
    wait_all(&log, &good);
    // Three deliveries (the first and two retries), then the DLQ.
    let ok = wait_for(WAIT, || {
        (deliveries_of(&log, &bad.msg_id).len() >= 3).then_some(())
    });
    assert!(ok.is_some(), "retries did not come back");
    let deliveries = deliveries_of(&log, &bad.msg_id);
    let times: Vec<i32> = deliveries.iter().map(|g| g.reconsume_times).collect();
    assert_eq!(times, vec![0, 1, 2], "reconsume counts of the deliveries");
    for g in &deliveries {
        assert_eq!(g.topic, "Fail", "a retry shows its original topic");
        assert_eq!(g.keys, vec!["bad".to_owned()]);
        assert_eq!(g.body, "poison");
    }
    // Levels [50, 50, 200, 200, ...]: failure n comes back after level n + 3.
    // (Deliver-at times have millisecond resolution: allow 5 ms of rounding.)
    let gap = deliveries[1].at.duration_since(deliveries[0].at);
    assert!(
        gap >= Duration::from_millis(195),
        "first retry after {gap:?}"
    );
    let dlq = client::dlq_topic("fail");
    let found = wait_for(WAIT, || {
        let out = mqadmin(
            &ns,
            &["consume", "-t", &dlq, "--json", "--timeout-ms", "500"],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    })
    .expect("the message reaches the DLQ");
    assert_eq!(found["msg_id"], bad.msg_id.as_str(), "{found}");
    assert_eq!(found["reconsume_times"], 3, "{found}");
    assert!(found.to_string().contains("bad"), "keys kept: {found}");
    // A second failing message as the sentinel: it takes the same retry path from its
    // start, so by its third delivery (after retry delays of 200 and 300 ms), a fourth
    // delivery of the first one, which would be due 300 ms after its third, would have come.
    let sentinel = p
        .send(Message::new("Fail", "poison").with_key("bad"))
        .unwrap();
    let ok = wait_for(WAIT, || {
        (deliveries_of(&log, &sentinel.msg_id).len() >= 3).then_some(())
    });
    assert!(
        ok.is_some(),
        "the second message's retries did not come back"
    );
    let n = deliveries_of(&log, &bad.msg_id).len();
    assert_eq!(n, 3, "no delivery after the DLQ");
    m.shutdown();
}

#[test]
fn ordered_consumption_keeps_queue_order_through_a_rebalance() {
    let (_cluster, ns) = cluster_with_topic("Ordered", 4);
    let log: Log = Arc::default();
    let slow = |i: usize| {
        let rec = record(&log, i);
        move |msgs: &[client::MessageExt]| {
            std::thread::sleep(Duration::from_millis(3));
            rec(msgs)
        }
    };
    let a = member(&ns, "ordered", "Ordered").build().unwrap();
    a.start_orderly(slow(0)).unwrap();
    let p = producer(&ns);
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(
            p.send(Message::new("Ordered", format!("m{i}")))
                .unwrap()
                .msg_id,
        );
        if i == 60 {
            // A second member joins mid-stream: half the queues move.
            let b = member(&ns, "ordered", "Ordered").build().unwrap();
            b.start_orderly(slow(1)).unwrap();
            wait_partition(&[&a, &b], "Ordered", 4);
            let rest: Vec<String> = (61..200)
                .map(|j| {
                    p.send(Message::new("Ordered", format!("m{j}")))
                        .unwrap()
                        .msg_id
                })
                .collect();
            ids.extend(rest);
            wait_all(&log, &ids);
            b.shutdown();
            break;
        }
    }
    wait_all(&log, &ids);
    let l = log.lock().unwrap();
    let mut per: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for g in l.iter() {
        per.entry(g.queue_id).or_default().push(g.offset);
    }
    assert_eq!(per.len(), 4);
    for (q, offsets) in per {
        let expected: Vec<u64> = (0..offsets.len() as u64).collect();
        assert_eq!(offsets, expected, "queue {q}: in order, once each");
    }
    let by_member: BTreeSet<usize> = l.iter().map(|g| g.member).collect();
    assert_eq!(by_member.len(), 2, "both members consumed");
    drop(l);
    a.shutdown();
}
