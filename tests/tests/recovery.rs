//! Damage on disk met by a real broker: a flipped byte in an old CommitLog segment costs
//! exactly the message it hit (every other one is consumed, by a pull and by a consumer
//! group, and the log names the segment at ERROR); a torn tail is cut, and the cut is
//! logged at WARN with where it was made; a data directory whose store.meta and shard
//! directories disagree makes the broker refuse to start, saying what is wrong.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{ConsumeFrom, ConsumeStatus, Message, PullConsumer, PushConsumer};
use integration::{
    drain_topic, mqadmin, producer, run_broker_expecting_exit, segment_files, wait_for, Cluster,
};

const WAIT: Duration = Duration::from_secs(60);

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("Flip-{i:05}-").into_bytes();
    b.resize(2000, b'a' + (i % 26) as u8);
    b
}

#[test]
fn a_flipped_byte_in_an_old_segment_costs_only_its_message() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Flip", 2);
    // About 9.5 MiB: three of the small profile's 4 MiB segments.
    let p = producer(&ns);
    let ids: Vec<String> = (0..4500)
        .map(|i| {
            p.send(Message::new("Flip", body(i)).with_key(format!("k{i}")))
                .unwrap()
                .msg_id
        })
        .collect();
    drop(p);
    assert_eq!(c.broker.terminate(), Some(0));

    // Flip one bit of message 1000's body, in the middle of the oldest segment.
    let commitlog = c.opts.data_dir.join("shard-000").join("commitlog");
    let segments = segment_files(&commitlog);
    assert!(segments.len() >= 3, "{segments:?}");
    let oldest = segments[0].clone();
    let mut bytes = std::fs::read(&oldest).unwrap();
    let needle = b"Flip-01000-";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("message 1000 is in the oldest segment");
    bytes[at + 5] ^= 0x04;
    std::fs::write(&oldest, &bytes).unwrap();

    c.restart_broker();
    assert_eq!(
        segment_files(&commitlog),
        segments,
        "recovery deleted no segment"
    );
    let log = c.broker.stderr();
    let oldest_name = oldest.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("quarantined") && l.contains(&oldest_name)),
        "an ERROR line names the damaged segment:\n{log}"
    );

    // A pull walking every queue gets every other message, intact.
    let lost = &ids[1000];
    let consumer = PullConsumer::new(&ns, "recovery-check").unwrap();
    let got = drain_topic(&consumer, "Flip", WAIT);
    let got_ids: BTreeSet<String> = got.iter().map(|m| m.msg_id.clone()).collect();
    let want: BTreeSet<String> = ids.iter().filter(|id| *id != lost).cloned().collect();
    assert_eq!(
        got_ids.len(),
        want.len(),
        "every message but the flipped one"
    );
    assert_eq!(got_ids, want);
    for m in &got {
        let i: usize = m.keys[0][1..].parse().unwrap();
        assert_eq!(m.body.as_ref(), body(i).as_slice());
    }

    // A consumer group gets them too and moves past the damaged one: its backlog drains.
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let s = Arc::clone(&seen);
    let group = PushConsumer::builder()
        .namesrv(&ns)
        .group("recovery-group")
        .subscribe("Flip", "*")
        .consume_from(ConsumeFrom::First)
        .commit_interval_ms(100)
        .suspend_timeout_ms(500)
        .build()
        .unwrap();
    group
        .start(move |msgs: &[client::MessageExt]| {
            let mut s = s.lock().unwrap();
            for m in msgs {
                s.insert(m.msg_id.clone());
            }
            ConsumeStatus::Success
        })
        .unwrap();
    let all = wait_for(WAIT, || {
        (seen.lock().unwrap().len() >= want.len()).then_some(())
    });
    assert!(
        all.is_some(),
        "the group got {} of {} messages",
        seen.lock().unwrap().len(),
        want.len()
    );
    assert_eq!(*seen.lock().unwrap(), want);
    let drained = wait_for(WAIT, || {
        let out = mqadmin(
            &ns,
            &["consumer-progress", "-g", "recovery-group", "-t", "Flip"],
        );
        String::from_utf8_lossy(&out.stdout)
            .contains("total backlog 0")
            .then_some(())
    });
    assert!(drained.is_some(), "the group's backlog reaches 0");
    group.shutdown();
    // Consumer progress says which queue lost a record, and that it will never arrive.
    let out = mqadmin(
        &ns,
        &[
            "--json",
            "consumer-progress",
            "-g",
            "recovery-group",
            "-t",
            "Flip",
        ],
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (total, queues) = rows.split_last().unwrap();
    assert_eq!(total["total_skipped_records"], 1, "{rows:?}");
    let mut skipped: Vec<u64> = queues
        .iter()
        .map(|r| r["skipped_records"].as_u64().unwrap())
        .collect();
    skipped.sort_unstable();
    assert_eq!(
        skipped,
        vec![0, 1],
        "one skipped record, on the queue message 1000 was in: {rows:?}"
    );
    let out = mqadmin(
        &ns,
        &["consumer-progress", "-g", "recovery-group", "-t", "Flip"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("skipped 1 record(s) damaged"), "{text}");

    // Operators see it in broker-status.
    let out = mqadmin(&ns, &["broker-status", "-b", &c.broker.addr]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("quarantined_ranges=1"), "{text}");
    let skipped: u64 = text
        .split("skipped_records=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no skipped_records in {text}"));
    assert!(
        skipped >= 2,
        "the pull and the group each stepped over it: {text}"
    );
}

#[test]
fn a_store_whose_meta_and_shard_directories_disagree_is_refused() {
    let mut c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Meta", 4);
    let p = producer(&ns);
    let ids: Vec<String> = (0..40)
        .map(|i| {
            p.send(Message::new("Meta", format!("m{i}").into_bytes()))
                .unwrap()
                .msg_id
        })
        .collect();
    drop(p);
    assert_eq!(c.broker.terminate(), Some(0));
    let data = c.opts.data_dir.clone();
    let logs = c.logs();
    for s in ["shard-000", "shard-001"] {
        assert!(
            segment_files(&data.join(s).join("commitlog")).len() == 1,
            "{s} holds messages"
        );
    }

    // shard_count edited down: shard-001 would be ignored.
    let meta = data.join("store.meta");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("shard_count=2", "shard_count=1")).unwrap();
    let (code, out) = run_broker_expecting_exit(&c.opts, &logs, WAIT);
    assert!(
        code.is_some_and(|c| c != 0),
        "refused to start: {code:?}\n{out}"
    );
    assert!(out.contains("shard_count=1"), "{out}");
    assert!(out.contains("shard-001"), "{out}");
    assert!(out.contains("To proceed"), "{out}");
    std::fs::write(&meta, &text).unwrap();

    // A shard directory deleted: its messages would silently be gone.
    let shard1 = data.join("shard-001");
    let moved = c.dir.path().join("shard-001.saved");
    std::fs::rename(&shard1, &moved).unwrap();
    let (code, out) = run_broker_expecting_exit(&c.opts, &logs, WAIT);
    assert!(
        code.is_some_and(|c| c != 0),
        "refused to start: {code:?}\n{out}"
    );
    assert!(out.contains("shard-001 is missing"), "{out}");
    assert!(out.contains("restore"), "{out}");

    // store.meta deleted beside the shard directories.
    std::fs::rename(&moved, &shard1).unwrap();
    std::fs::rename(&meta, c.dir.path().join("store.meta.saved")).unwrap();
    let (code, out) = run_broker_expecting_exit(&c.opts, &logs, WAIT);
    assert!(
        code.is_some_and(|c| c != 0),
        "refused to start: {code:?}\n{out}"
    );
    assert!(out.contains("store.meta is missing"), "{out}");
    assert!(out.contains("shard_count=2"), "{out}");

    // Put back, the store starts and serves every message.
    std::fs::rename(c.dir.path().join("store.meta.saved"), &meta).unwrap();
    c.restart_broker();
    let consumer = PullConsumer::new(&ns, "meta-check").unwrap();
    let got = drain_topic(&consumer, "Meta", WAIT);
    let got_ids: BTreeSet<String> = got.iter().map(|m| m.msg_id.clone()).collect();
    assert_eq!(got_ids, ids.into_iter().collect::<BTreeSet<_>>());
}

#[test]
fn a_torn_tail_is_cut_and_the_cut_is_said() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Torn", 1);
    let p = producer(&ns);
    for i in 0..100 {
        p.send(Message::new("Torn", body(i))).unwrap();
    }
    drop(p);
    assert_eq!(c.broker.terminate(), Some(0));

    // Garbage right after the last record, as a write torn by a crash leaves it.
    let commitlog = c.opts.data_dir.join("shard-000").join("commitlog");
    let active = segment_files(&commitlog).pop().unwrap();
    let mut bytes = std::fs::read(&active).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    let seg_start: u64 = active
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap();
    bytes[end..end + 3000].fill(0xa5);
    std::fs::write(&active, &bytes).unwrap();

    c.restart_broker();
    let log = c.broker.stderr();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains(&format!(
                "recovery cut the CommitLog at {}",
                seg_start + end as u64
            ))
            && l.contains("dropped 3000 bytes past the last valid record")),
        "a WARN line says where the log was cut and how much it dropped:\n{log}"
    );
    // Every message before the cut is served.
    let consumer = PullConsumer::new(&ns, "torn-check").unwrap();
    assert_eq!(drain_topic(&consumer, "Torn", WAIT).len(), 100);
}
