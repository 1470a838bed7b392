//! Two NameServers side by side: the broker registers with both, and clients given both
//! still get routes when one of them is stopped.

use std::time::Duration;

use client::{Message, PullConsumer};
use integration::{
    drain_topic, mqadmin, producer, start_broker, start_namesrv, wait_for, BrokerOpts,
};

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

    let out = mqadmin(&both, &["update-topic", "-t", "Failover", "-q", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert!(
        mqadmin(&ns.addr, &["update-topic", "-t", "Live", "-q", "2"])
            .status
            .success()
    );
    let admin = client::Admin::new(&ns.addr).unwrap();
    assert!(admin.topic_route("Live").is_ok());

    // The NameServer restarts empty on the same address: the broker's next heartbeat is
    // answered "not registered" and it registers in full at once, not at its next 30 s
    // registration.
    assert_eq!(ns.terminate(), Some(0));
    let addr = ns.addr.clone();
    let _ns = integration::start_namesrv_on(&logs, &addr, &[]);
    let back = wait_for(Duration::from_secs(10), || admin.topic_route("Live").ok());
    assert!(
        back.is_some(),
        "the restarted NameServer never learned the route"
    );

    // A broker killed with -9 says nothing; it leaves the routes once its heartbeats stop
    // for the NameServer's broker expiry (10 s), not after minutes.
    broker.kill9();
    let gone = wait_for(Duration::from_secs(30), || {
        admin.topic_route("Live").is_err().then_some(())
    });
    assert!(gone.is_some(), "the killed broker is still in the routes");
}
