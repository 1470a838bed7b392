//! A broker leaves the routes as soon as the connection it registered over closes, unless
//! it has registered over a newer connection since; the expiry still drops a broker that
//! goes silent with its connection open.

mod common;

use std::net::Shutdown;
use std::time::{Duration, Instant};

use common::{registration, start_server, topic, Client};
use protocol::{BrokerKey, Command, Header, RegisterBroker, ResponseCode};

/// Far longer than any wait below: only the connection's closing can drop a broker here.
const LONG_EXPIRY_MS: u64 = 600_000;

/// Polls the route of `topic` (bounded by `limit`) until `done` holds for its broker names.
fn wait_for_brokers(
    client: &mut Client,
    topic: &str,
    limit: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let resp = client.call(Command::GetRoute {
            topic: topic.into(),
        });
        let names: Vec<String> = match resp.command {
            Command::Route(route) => route.brokers.into_iter().map(|b| b.broker_name).collect(),
            _ => Vec::new(),
        };
        if done(&names) || Instant::now() >= deadline {
            return names;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) until the server counts `n` open connections.
fn wait_connections_open(server: &namesrv::NameServerHandle, n: usize) {
    let want = format!("corvus_namesrv_connections_open {n}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.metrics_text().lines().any(|l| l == want) {
        assert!(
            Instant::now() < deadline,
            "never {n} open connections:\n{}",
            server.metrics_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_closed_registration_connection_drops_its_broker_at_once() {
    let server = start_server(LONG_EXPIRY_MS);
    let mut looker = Client::connect(server.local_addr());
    let mut a = Client::connect(server.local_addr());
    a.register(registration("broker-a", 0, "a:1", &[topic("T", 1)]));
    let mut b = Client::connect(server.local_addr());
    b.register(registration("broker-b", 0, "b:1", &[topic("T", 1)]));
    let both = wait_for_brokers(&mut looker, "T", Duration::from_secs(5), |n| n.len() == 2);
    assert_eq!(both, ["broker-a", "broker-b"]);

    // broker-a's connection resets (its process died): gone within moments, not 600 s.
    a.stream().shutdown(Shutdown::Both).expect("shutdown");
    drop(a);
    let left = wait_for_brokers(&mut looker, "T", Duration::from_secs(5), |n| n.len() == 1);
    assert_eq!(left, ["broker-b"], "broker-a outlived its connection");
    assert_eq!(server.broker_count(), 1);
    server.shutdown();
}

#[test]
fn a_broker_that_registered_anew_is_not_dropped_by_its_old_connection() {
    let server = start_server(LONG_EXPIRY_MS);
    let mut looker = Client::connect(server.local_addr());
    let mut old = Client::connect(server.local_addr());
    old.register(registration("broker-a", 0, "a:1", &[topic("T", 1)]));
    // The broker restarted (new addresses) and registered over a new connection before the
    // old one's closing was seen.
    let mut new = Client::connect(server.local_addr());
    new.register(registration("broker-a", 0, "a:2", &[topic("T", 1)]));
    drop(old);
    // A connection counts as closed once its thread has handled the closing, drop included.
    wait_connections_open(&server, 2);
    assert_eq!(
        wait_for_brokers(&mut looker, "T", Duration::ZERO, |_| true),
        ["broker-a"],
        "dropped by its old connection closing"
    );

    // A heartbeat over another connection does not count (it carries no address: it may be
    // a fenced master's): "not registered", so the broker registers in full there, and
    // that connection speaks for it from then on.
    let mut beat = Client::connect(server.local_addr());
    let key = BrokerKey {
        cluster: "DefaultCluster".into(),
        broker_name: "broker-a".into(),
        broker_id: 0,
    };
    let resp = beat.call(Command::BrokerHeartbeat(key.clone()));
    assert_eq!(
        resp.response_code(),
        ResponseCode::BrokerNotRegistered,
        "{}",
        resp.remark
    );
    beat.register(registration("broker-a", 0, "a:2", &[topic("T", 1)]));
    let resp = beat.call(Command::BrokerHeartbeat(key.clone()));
    assert_eq!(
        resp.response_code(),
        ResponseCode::Success,
        "{}",
        resp.remark
    );
    drop(new);
    wait_connections_open(&server, 2);
    assert_eq!(
        wait_for_brokers(&mut looker, "T", Duration::ZERO, |_| true),
        ["broker-a"],
        "the registering connection is no longer the one that speaks for it"
    );
    drop(beat);
    let left = wait_for_brokers(&mut looker, "T", Duration::from_secs(5), |n| n.is_empty());
    assert!(
        left.is_empty(),
        "still routed after its last connection closed"
    );

    // An unknown broker's heartbeat binds nothing (and is answered "not registered").
    let mut stranger = Client::connect(server.local_addr());
    let id = stranger.next_id();
    stranger.send(&Header::request(id, Command::BrokerHeartbeat(key)), &[]);
    let answer = stranger.read().expect("answer").expect("open");
    assert_eq!(
        answer.header.response_code(),
        ResponseCode::BrokerNotRegistered
    );
    server.shutdown();
}

#[test]
fn a_broker_silent_on_an_open_connection_still_expires() {
    const EXPIRY_MS: u64 = 300;
    let server = start_server(EXPIRY_MS);
    let mut frozen = Client::connect(server.local_addr());
    frozen.register(registration("broker-frozen", 0, "f:1", &[topic("T", 1)]));
    let mut looker = Client::connect(server.local_addr());
    let left = wait_for_brokers(&mut looker, "T", Duration::from_secs(10), |n| n.is_empty());
    assert!(left.is_empty(), "a frozen broker never expired");
    // Its connection is still open and served: registering again brings it back.
    frozen.register(registration("broker-frozen", 0, "f:1", &[topic("T", 1)]));
    assert_eq!(server.broker_count(), 1);
    server.shutdown();
}

/// The route's master address of `broker-a` for topic `T`, as a client reads it.
fn master_of_a(client: &mut Client) -> Option<String> {
    let resp = client.call(Command::GetRoute { topic: "T".into() });
    let Command::Route(route) = resp.command else {
        return None;
    };
    route
        .brokers
        .iter()
        .find(|b| b.broker_name == "broker-a")
        .and_then(|b| b.master_addr().map(str::to_string))
}

#[test]
fn a_fenced_master_is_refused_and_its_connection_closing_keeps_the_new_master() {
    let server = start_server(LONG_EXPIRY_MS);
    let master = |addr: &str, master_epoch: u32| RegisterBroker {
        master_epoch,
        ..registration("broker-a", 0, addr, &[topic("T", 1)])
    };
    let mut looker = Client::connect(server.local_addr());
    let mut old = Client::connect(server.local_addr());
    old.register(master("a:1", 1));
    // The slave was promoted at the next election and registers as the master.
    let mut new = Client::connect(server.local_addr());
    new.register(master("b:1", 2));
    assert_eq!(master_of_a(&mut looker).as_deref(), Some("b:1"));

    // The old master, fenced but still reaching the NameServer, registers as before.
    let resp = old.call(Command::RegisterBroker(master("a:1", 1)));
    assert_eq!(resp.response_code(), ResponseCode::NotLeader);
    assert!(
        resp.remark
            .contains("stale master epoch 1 < current 2 held by b:1"),
        "{}",
        resp.remark
    );
    assert_eq!(master_of_a(&mut looker).as_deref(), Some("b:1"));
    // Its heartbeats under the key it held do not count either: it must register in full.
    let key = master("a:1", 1).key;
    let resp = old.call(Command::BrokerHeartbeat(key));
    assert_eq!(resp.response_code(), ResponseCode::BrokerNotRegistered);

    // It dies: its connection, which once spoke for broker-a id 0, closes; the new master
    // stays routed.
    drop(old);
    wait_connections_open(&server, 2);
    assert_eq!(master_of_a(&mut looker).as_deref(), Some("b:1"));
    server.shutdown();
}
