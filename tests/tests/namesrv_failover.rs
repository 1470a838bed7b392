//! Two NameServers side by side: the broker registers with both, and clients given both
//! still get routes when one of them is stopped.

use std::time::Duration;

use client::{Message, PullConsumer};
use integration::{drain_topic, mqadmin, producer, start_broker, start_namesrv, BrokerOpts};

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
