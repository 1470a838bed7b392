//! Damage in the CommitLog never holds back scheduled messages: after a kill -9 and a
//! damaged record that recovery quarantines, a shard's timer starts, steps over the range
//! as a consumer does, and delivers every held message, once.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use client::{Message, PullConsumer};
use integration::{create_topic, drain_topic, producer, segment_files, wait_for, Cluster};

/// Level 3 holds a message long enough for the test to damage the log before it is due.
const TOML: &str = "retry_delay_levels_ms = [500, 1000, 15000]\ntimer_max_delay_sec = 60\n";
const HELD_DELAY: Duration = Duration::from_secs(15);
const WAIT: Duration = Duration::from_secs(60);

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("Plain-{i:05}-").into_bytes();
    b.resize(2000, b'a' + (i % 26) as u8);
    b
}

/// How far the timer's checkpoint says its queue is indexed (its first 8 bytes).
fn checkpoint_indexed(shard_dir: &Path) -> Option<u64> {
    let b = std::fs::read(shard_dir.join("timer").join("checkpoint")).ok()?;
    Some(u64::from_le_bytes(b.get(0..8)?.try_into().ok()?))
}

#[test]
fn a_quarantined_range_does_not_hold_back_scheduled_messages() {
    let mut c = Cluster::start_with(1, "small", |o| o.config_toml = Some(TOML.into()));
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "SchedHeld", 2);
    create_topic(&ns, "Plain", 1);
    let p = producer(&ns);
    let sent_at = Instant::now();
    let held: Vec<String> = (0..40)
        .map(|i| {
            p.send(Message::new("SchedHeld", format!("held-{i}")).with_delay_level(3))
                .unwrap()
                .msg_id
        })
        .collect();
    // The timer has indexed them and recorded so: after a restart it looks for deliveries
    // it made only in the log written after this checkpoint.
    let shard_dir = c.opts.data_dir.join("shard-000");
    let indexed = wait_for(Duration::from_secs(20), || {
        checkpoint_indexed(&shard_dir).filter(|&n| n >= 40)
    });
    assert!(indexed.is_some(), "the timer never checkpointed its index");
    // Plain messages after it, one of which is then damaged.
    for i in 0..200 {
        p.send(Message::new("Plain", body(i))).unwrap();
    }
    drop(p);
    let commitlog = shard_dir.join("commitlog");
    let needle = b"Plain-00100-";
    let found = wait_for(Duration::from_secs(20), || {
        segment_files(&commitlog).into_iter().find_map(|f| {
            let bytes = std::fs::read(&f).ok()?;
            let at = bytes.windows(needle.len()).position(|w| w == needle)?;
            Some((f, at))
        })
    });
    let (segment, at) = found.expect("message 100 reached its segment file");
    c.broker.kill9();
    assert!(
        sent_at.elapsed() < HELD_DELAY,
        "the held messages came due before the broker was killed: the test proves nothing"
    );
    // Garbage over message 100's header (its size and magic code) and the end of message
    // 99: no record structure is left there, as a torn sector leaves it.
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[at - 150..at].fill(0xa5);
    std::fs::write(&segment, &bytes).unwrap();

    c.restart_broker();
    let log = c.broker.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("quarantined")),
        "recovery quarantined the damage:\n{log}"
    );

    // Every held message is delivered, once.
    let consumer = PullConsumer::new(&ns, "sched-damage-check").unwrap();
    let got = wait_for(WAIT, || {
        let all = drain_topic(&consumer, "SchedHeld", Duration::from_secs(10));
        (all.len() >= held.len()).then_some(all)
    });
    let got = got.unwrap_or_else(|| {
        let all = drain_topic(&consumer, "SchedHeld", Duration::from_secs(10));
        panic!(
            "{} of {} acknowledged scheduled messages delivered after the damage; broker log:\n{}",
            all.len(),
            held.len(),
            c.broker.stderr()
        )
    });
    let mut count: HashMap<&str, usize> = HashMap::new();
    for m in &got {
        *count.entry(m.msg_id.as_str()).or_default() += 1;
    }
    let missing: Vec<_> = held
        .iter()
        .filter(|id| !count.contains_key(id.as_str()))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    let dups: Vec<_> = count.iter().filter(|(_, &n)| n > 1).collect();
    assert!(dups.is_empty(), "delivered twice: {dups:?}");
    assert_eq!(got.len(), held.len());
    let log = c.broker.stderr();
    assert!(
        !log.contains("the timer cannot start"),
        "the timer started at once:\n{log}"
    );
    // The plain messages outside the damage are all served.
    let plain = drain_topic(&consumer, "Plain", Duration::from_secs(10));
    assert!(
        plain.len() >= 198 && plain.len() < 200,
        "{} plain messages served",
        plain.len()
    );
}
