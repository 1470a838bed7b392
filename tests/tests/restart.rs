//! A broker restarted after SIGTERM, or killed with -9 after sync-flushed sends, still serves
//! every acknowledged message.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use client::{Message, PullConsumer};
use integration::{drain_topic, producer, Cluster};

fn send_n(ns: &str, topic: &str, n: usize) -> Vec<String> {
    let p = producer(ns);
    (0..n)
        .map(|i| {
            let body = format!("{topic}-{i}-").repeat(1 + i % 7);
            p.send(Message::new(topic, body.into_bytes()).with_key(format!("k{i}")))
                .unwrap()
                .msg_id
        })
        .collect()
}

fn check_all(ns: &str, topic: &str, ids: &[String]) {
    let consumer = PullConsumer::new(ns, "restart-check").unwrap();
    let got = drain_topic(&consumer, topic, Duration::from_secs(30));
    let mut got_ids: Vec<_> = got.iter().map(|m| m.msg_id.clone()).collect();
    got_ids.sort();
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(
        got_ids, want,
        "every acknowledged message is served after the restart"
    );
    for m in &got {
        let i: usize = m.keys[0][1..].parse().unwrap();
        assert_eq!(
            m.body.as_ref(),
            format!("{topic}-{i}-").repeat(1 + i % 7).as_bytes()
        );
    }
}

#[test]
fn sigterm_then_restart_serves_every_acknowledged_message() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Durable", 3);
    // Enough to roll over the small profile's 4 MiB segments.
    let ids = send_n(&ns, "Durable", 3000);
    assert_eq!(c.broker.terminate(), Some(0), "clean exit on SIGTERM");
    assert!(c.broker.stderr().contains("broker stopped"));
    c.restart_broker();
    // The start says the stop was clean, and claims no cut: a cut is what an operator
    // must look into.
    let log = c.broker.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("INFO") && l.contains("clean stop: CommitLog ends at")),
        "the restart says the last stop was clean:\n{log}"
    );
    assert!(
        !log.contains("recovery cut") && !log.contains("no clean-stop mark"),
        "a clean stop is not reported as a cut or a crash:\n{log}"
    );
    check_all(&ns, "Durable", &ids);
    // And it keeps accepting writes after the restart.
    let more = send_n(&ns, "Durable", 10);
    let mut all = ids.clone();
    all.extend(more);
    check_all(&ns, "Durable", &all);
}

#[test]
fn kill_9_after_sync_flushed_sends_loses_nothing() {
    let mut c = Cluster::start(1, "durable");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Sync", 2);
    let ids = send_n(&ns, "Sync", 500);
    c.broker.kill9();
    c.restart_broker();
    // A crash is said to be one, and since every send was synced, nothing is cut.
    let log = c.broker.stderr();
    assert!(
        log.contains("no clean-stop mark: the last run did not stop cleanly"),
        "the restart says the last stop was not clean:\n{log}"
    );
    assert!(
        !log.contains("recovery cut") && !log.contains("clean stop:"),
        "nothing torn, nothing cut, and no clean stop claimed:\n{log}"
    );
    check_all(&ns, "Sync", &ids);
}

#[test]
fn a_second_broker_on_the_same_data_directory_is_refused_and_the_first_keeps_serving() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Locked", 2);
    let before = send_n(&ns, "Locked", 20);
    // Same data directory (and so the same tail rings), another listener.
    let mut second = c.opts.clone();
    second.name = "broker-b".into();
    let (code, out) =
        integration::run_broker_expecting_exit(&second, &c.logs(), Duration::from_secs(30));
    assert!(code.is_some_and(|c| c != 0), "refused: {code:?}\n{out}");
    assert!(
        out.contains("another process serves this data directory"),
        "{out}"
    );
    assert!(out.contains("pid "), "names the holder: {out}");
    let mut ids = before;
    ids.extend(send_n(&ns, "Locked", 20));
    check_all(&ns, "Locked", &ids);
}

/// A broker restarted at once on fixed ports can find them still held a moment (the killed
/// one's listeners outlive its process): it waits for them, says so, and then serves.
#[test]
fn a_restart_on_fixed_ports_still_held_waits_for_them_and_serves() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    let port = integration::consecutive_free_ports(1);
    c.opts.listen = format!("127.0.0.1:{port}");
    c.broker.kill9();
    // The port held as a dying broker holds it, released once the new one says it waits.
    let held = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let logs = c.logs();
    let before: std::collections::HashSet<_> = logs
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let opts = c.opts.clone();
    let starting = std::thread::spawn(move || integration::start_broker(&opts, &logs));
    let log = integration::wait_for(Duration::from_secs(30), || {
        c.logs().read_dir().unwrap().find_map(|e| {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).ok()?;
            (!before.contains(&p) && text.contains("is still held")).then_some(p)
        })
    })
    .expect("the broker says it waits for its port");
    assert!(!starting.is_finished(), "not ready on a held port");
    drop(held);
    c.broker = starting.join().unwrap();
    assert!(
        c.broker.line.contains(&port.to_string()),
        "{}",
        c.broker.line
    );
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.contains(&format!("127.0.0.1:{port} was released")),
        "{text}"
    );
    integration::create_topic(&ns, "Held", 2);
    let ids = send_n(&ns, "Held", 20);
    check_all(&ns, "Held", &ids);
}

/// A port another process keeps is not waited for forever: the broker gives up and says why.
#[test]
fn a_fixed_port_that_stays_held_is_refused_after_the_wait_and_names_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let port = integration::consecutive_free_ports(1);
    let _held = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let mut opts = integration::BrokerOpts::new("", &dir.path().join("data"));
    opts.listen = format!("127.0.0.1:{port}");
    let (code, out) =
        integration::run_broker_expecting_exit(&opts, dir.path(), Duration::from_secs(60));
    assert!(code.is_some_and(|c| c != 0), "refused: {code:?}\n{out}");
    assert!(
        out.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{out}"
    );
    assert!(out.contains("is still held"), "{out}");
}
