#![allow(clippy::unwrap_used)]
//! Disk water levels: with the refuse threshold set below the disk's real use, sends are
//! refused with a "disk full" error that names the ratio and the threshold, logged once;
//! with the threshold raised again the broker accepts them. And a real full disk (a small
//! loop-mounted ext4 filled by another process): no crash, "disk full" answers, sends
//! succeed again once space returns, and a restart on the full disk serves reads.

use std::time::Duration;

use client::{ClientError, Message, Producer, PullConsumer};
use integration::{producer, producer_without_retries, wait_for, AckedSends, Cluster};
use protocol::ResponseCode;

#[test]
fn sends_are_refused_above_the_refuse_ratio_and_accepted_again_below_it() {
    // Any real disk is more than 1% used, so 0.01 makes this disk "full".
    let low = "disk_clean_ratio = 0.01\ndisk_force_clean_ratio = 0.01\ndisk_refuse_ratio = 0.01\ndisk_check_interval_ms = 200\n";
    let mut c = Cluster::start_with(1, "small", |o| o.config_toml = Some(low.to_owned()));
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Full", 1);
    let p = Producer::builder()
        .namesrv(&ns)
        .group("g")
        .retries(0)
        .build()
        .unwrap();
    for _ in 0..3 {
        let err = p.send(Message::new("Full", &b"x"[..])).unwrap_err();
        match &err {
            ClientError::Broker { code, remark, .. } => {
                assert_eq!(*code, ResponseCode::DiskFull);
                assert!(remark.contains("disk full"), "{remark}");
                assert!(remark.contains("0.010"), "names the threshold: {remark}");
            }
            other => panic!("expected disk full, got {other:?}"),
        }
    }
    // Logged once per change of level, not once per refused send.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let log = c.broker.stderr();
    assert_eq!(
        log.matches("refusing sends until space returns").count(),
        1,
        "{log}"
    );

    // Raise the thresholds back: the same data directory accepts sends.
    assert_eq!(c.broker.terminate(), Some(0));
    c.opts.config_toml = Some("disk_check_interval_ms = 200\n".to_owned());
    c.restart_broker();
    producer(&ns)
        .send(Message::new("Full", &b"accepted"[..]))
        .unwrap();
}

// ---- a real full disk: a loop-mounted ext4 filled by another process ----

use integration::loop_fs::loop_fs_or_skip;

fn assert_disk_full(err: &ClientError) {
    match err {
        ClientError::Broker { code, remark, .. } => {
            assert_eq!(*code, ResponseCode::DiskFull, "{remark}");
            assert!(remark.contains("disk full"), "{remark}");
            assert!(!remark.contains("poison"), "{remark}");
        }
        other => panic!("expected a disk-full answer, got {other:?}"),
    }
}

fn assert_alive(c: &mut Cluster) {
    assert!(
        matches!(c.broker.child.try_wait(), Ok(None)),
        "the broker died (SIGBUS?); stderr:\n{}",
        c.broker.stderr()
    );
}

fn check_served(ns: &str, sends: &AckedSends) {
    let consumer = PullConsumer::new(ns, "disk-full-check").unwrap();
    sends.assert_served(&consumer, Duration::from_secs(60));
}

/// The data-safety issue's scenario on a real filesystem: another process fills the disk
/// while the broker takes sends. The broker stays up (no SIGBUS from a mapped file), sends
/// get a "disk full" answer, and once the filler is deleted they succeed again without a
/// restart. Then the disk is filled again and the broker restarted on it: it starts,
/// serves every acknowledged message, answers sends with "disk full", and takes them again
/// once space returns.
#[test]
fn a_disk_filled_by_another_process_refuses_sends_and_recovers_without_a_restart() {
    let Some(fs) = loop_fs_or_skip(128) else {
        return;
    };
    // Retention and the disk levels measure rarely here: the refusals below come from the
    // segment roll that cannot get its blocks, the path this test is about (the ratio
    // levels are covered above).
    let config = "disk_check_interval_ms = 600000\ndisk_reserve_bytes = 4194304\n";
    let data = fs.mnt.join("data");
    let mut c = Cluster::start_with(1, "small", |o| {
        o.data_dir = data.clone();
        o.config_toml = Some(config.to_owned());
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Fill", 1);
    let p = producer_without_retries(&ns, "disk-full");
    let mut sends = AckedSends::new("Fill");
    for _ in 0..300 {
        sends.send(&p).unwrap();
    }

    // Another process takes every free block. Sends go on into the current segment
    // (preallocated) and are refused once the next one cannot be made: at most a segment
    // (4 MiB) and the chunks in memory later, bounded here by count and time.
    let filler = fs.fill();
    let (tries, err) = sends.send_until_refused(&p);
    eprintln!("disk_full: refused after {tries} sends into a full disk: {err}");
    assert_disk_full(&err);
    // It stays up and answers: more sends get the same answer, reads are served.
    for _ in 0..5 {
        assert_disk_full(&sends.send(&p).unwrap_err());
    }
    assert_alive(&mut c);
    check_served(&ns, &sends);
    assert_alive(&mut c);

    // The filler goes: sends succeed again by themselves, no restart.
    fs.unfill(&filler);
    wait_for(Duration::from_secs(60), || sends.send(&p).ok())
        .expect("sends did not succeed again after space returned");
    for _ in 0..200 {
        sends.send(&p).unwrap();
    }
    assert_alive(&mut c);
    check_served(&ns, &sends);

    // A restart on a full disk: it starts and serves what it stored.
    let filler = fs.fill();
    assert!(c.broker.terminate().is_some(), "the broker did not stop");
    c.restart_broker();
    assert_alive(&mut c);
    check_served(&ns, &sends);
    let p = producer_without_retries(&ns, "disk-full-2");
    assert_disk_full(&sends.send(&p).unwrap_err());
    fs.unfill(&filler);
    wait_for(Duration::from_secs(60), || sends.send(&p).ok())
        .expect("sends did not succeed again after space returned");
    assert_alive(&mut c);
    check_served(&ns, &sends);
    let log = c.broker.stderr();
    assert!(!log.contains("poisoned"), "{log}");
    drop(c);
}
