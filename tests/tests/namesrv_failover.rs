//! Two NameServers side by side: the broker registers with both, and clients given both
//! still get routes when one of them is stopped. A killed broker leaves the routes when its
//! registration connection closes, and a restarted one is routed at its new addresses.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use client::{Message, PullConsumer};
use integration::{
    drain_topic, mqadmin, producer, start_broker, start_namesrv, wait_for, BrokerOpts, Proc,
};

/// A killed broker must be gone well before the NameServer's 10 s broker expiry (which, with
/// its scan every 2.5 s, drops it 10-12.5 s after its last heartbeat).
const GONE_WITHIN: Duration = Duration::from_secs(4);

#[test]
fn routes_survive_one_namesrv_being_down() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut ns1 = start_namesrv(&logs);
    let ns2 = start_namesrv(&logs);
    let both = format!("{};{}", ns1.addr, ns2.addr);
    let opts = BrokerOpts::new(&both, &dir.path().join("data"));
    let _broker = start_broker(&opts, &logs);

    integration::create_topic(&both, "Failover", 2);
    // Each NameServer knows the route on its own: they never talk to each other.
    for ns in [&ns1.addr, &ns2.addr] {
        let out = mqadmin(ns, &["topic-route", "-t", "Failover"]);
        assert!(
            out.status.success(),
            "NameServer {ns} has the route: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    assert_eq!(ns1.terminate(), Some(0));
    // The dead one first in the list: clients move on to the live one.
    let dead_first = format!("{};{}", ns1.addr, ns2.addr);
    let p = producer(&dead_first);
    for i in 0..20 {
        p.send(Message::new("Failover", format!("m{i}").into_bytes()))
            .unwrap();
    }
    let consumer = PullConsumer::new(&dead_first, "g").unwrap();
    let got = drain_topic(&consumer, "Failover", Duration::from_secs(20));
    assert_eq!(got.len(), 20);
    let out = mqadmin(&dead_first, &["topic-route", "-t", "Failover"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_killed_broker_leaves_the_routes_and_a_restarted_namesrv_learns_them_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut ns = start_namesrv(&logs);
    let opts = BrokerOpts::new(&ns.addr, &dir.path().join("data"));
    let mut broker = start_broker(&opts, &logs);
    integration::create_topic(&ns.addr, "Live", 2);
    let admin = client::Admin::new(&ns.addr).unwrap();
    assert!(admin.topic_route("Live").is_ok());

    // The NameServer restarts empty on the same address: the broker's next heartbeat is
    // answered "not registered" and it registers in full at once, not at its next 30 s
    // registration.
    assert_eq!(ns.terminate(), Some(0));
    let addr = ns.addr.clone();
    let ns = integration::start_namesrv_on(&logs, &addr, &[]);
    let back = wait_for(Duration::from_secs(10), || admin.topic_route("Live").ok());
    assert!(
        back.is_some(),
        "the restarted NameServer never learned the route"
    );

    // A broker killed with -9 says nothing, but its kernel closes its registration
    // connection: the NameServer drops it at once, not after the 10 s expiry.
    broker.kill9();
    let killed = Instant::now();
    let gone = wait_for(GONE_WITHIN, || {
        admin.topic_route("Live").is_err().then_some(())
    });
    assert!(
        gone.is_some(),
        "the killed broker is still in the routes {:?} after kill -9",
        killed.elapsed()
    );
    // The NameServer logs the drop after it takes the broker out of the routes, so the line
    // may land a moment after the route is seen gone: wait for it, then count.
    let drops = |log: &str| {
        log.lines()
            .filter(|l| l.contains("registration connection closed"))
            .count()
    };
    let _ = wait_for(Duration::from_secs(5), || {
        (drops(&ns.stderr()) > 0).then_some(())
    });
    let stderr = ns.stderr();
    assert_eq!(drops(&stderr), 1, "one INFO line for the drop:\n{stderr}");
}

/// (advertised address, per-core addresses) from a broker's ready line.
fn listening_addrs(broker: &Proc) -> (String, Vec<String>) {
    let field = |name: &str, end: char| -> String {
        let rest = broker.line.split(name).nth(1).unwrap_or("");
        rest.split(end).next().unwrap_or("").trim().to_owned()
    };
    let advertised = field("(advertised ", ',');
    let cores = field("core addresses ", ')')
        .split(',')
        .map(str::to_owned)
        .collect();
    (advertised, cores)
}

/// The route's (master address, per-core addresses) of broker `name`.
fn routed_addrs(admin: &client::Admin, topic: &str, name: &str) -> Option<(String, Vec<String>)> {
    let route = admin.topic_route(topic).ok()?;
    let b = route.data.brokers.iter().find(|b| b.broker_name == name)?;
    Some((b.master_addr()?.to_owned(), b.core_addrs.clone()))
}

#[test]
fn a_restarted_broker_is_routed_at_its_new_addresses_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let ns = start_namesrv(&logs);
    let opts = BrokerOpts::new(&ns.addr, &dir.path().join("data"));
    let mut broker = start_broker(&opts, &logs);
    integration::create_topic(&ns.addr, "Moved", 2);
    let admin = client::Admin::new(&ns.addr).unwrap();
    let before = listening_addrs(&broker);
    assert!(
        !before.0.is_empty() && !before.1.is_empty(),
        "{}",
        broker.line
    );
    let routed = wait_for(Duration::from_secs(5), || {
        routed_addrs(&admin, "Moved", &opts.name).filter(|r| *r == before)
    });
    assert!(routed.is_some(), "the route never named {before:?}");

    // kill -9 and start again on the same data directory: every port is new.
    broker.kill9();
    let broker = start_broker(&opts, &logs);
    let started = Instant::now();
    let after = listening_addrs(&broker);
    assert_ne!(after.0, before.0, "the restart was expected on a new port");
    // Its first registration happens as it starts: no stale address is handed out after it.
    let routed = wait_for(Duration::from_secs(2), || {
        routed_addrs(&admin, "Moved", &opts.name).filter(|r| *r == after)
    });
    assert!(
        routed.is_some(),
        "{:?} after the restart the route names {:?}, the broker listens on {after:?}",
        started.elapsed(),
        routed_addrs(&admin, "Moved", &opts.name)
    );
}

/// A first NameServer that is frozen (it accepts connections and never answers) must not
/// fail fresh clients that list it first: each NameServer gets its share of the timeout,
/// so the second one answers in time. (Before, 4 of 5 fresh clients failed with a 3 s
/// timeout spent on the frozen one.)
#[test]
fn a_frozen_first_namesrv_does_not_fail_fresh_clients() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let ns1 = start_namesrv(&logs);
    let ns2 = start_namesrv(&logs);
    let both = format!("{};{}", ns1.addr, ns2.addr);
    let opts = BrokerOpts::new(&both, &dir.path().join("data"));
    let _broker = start_broker(&opts, &logs);
    integration::create_topic(&both, "Frozen", 2);

    // SIGSTOP: the kernel still completes its TCP handshakes, nothing answers.
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(ns1.pid(), libc::SIGSTOP);
    }
    let mut failures = Vec::new();
    for i in 0..5 {
        // Client defaults: a 3 s send timeout, the NameServers in the order given.
        let p = client::Producer::builder()
            .namesrv(&both)
            .group(format!("fresh-{i}"))
            .build()
            .unwrap();
        let started = Instant::now();
        if let Err(e) = p.send(Message::new("Frozen", format!("m{i}").into_bytes())) {
            failures.push(format!("client {i} after {:?}: {e}", started.elapsed()));
        }
        p.shutdown();
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(ns1.pid(), libc::SIGCONT);
    }
    assert!(failures.is_empty(), "fresh clients failed: {failures:#?}");
    let consumer = PullConsumer::new(&ns2.addr, "g").unwrap();
    let got = drain_topic(&consumer, "Frozen", Duration::from_secs(20));
    assert_eq!(got.len(), 5);
}
