//! The happy path over TCP: brokers register, clients read routes, topic list and cluster info.

mod common;

use common::{registration, start_server, topic, Client};
use protocol::{Command, Header, ResponseCode};

#[test]
fn register_then_route_topic_list_and_cluster_info() {
    let server = start_server(120_000);
    let mut broker = Client::connect(server.local_addr());
    broker.register(registration(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("Orders", 8)],
    ));
    broker.register(registration(
        "broker-a",
        1,
        "10.0.0.2:10911",
        &[topic("Orders", 8)],
    ));
    broker.register(registration(
        "broker-b",
        0,
        "10.0.0.3:10911",
        &[topic("Orders", 4), topic("Audit", 1)],
    ));

    // Another connection sees the same state: one shared table.
    let mut client = Client::connect(server.local_addr());
    let resp = client.call(Command::GetRoute {
        topic: "Orders".into(),
    });
    assert_eq!(resp.response_code(), ResponseCode::Success);
    let Command::Route(route) = resp.command else {
        panic!("expected a route, got {:?}", resp.command);
    };
    assert_eq!(route.brokers.len(), 2, "one entry per broker name");
    let a = &route.brokers[0];
    assert_eq!(a.broker_name, "broker-a");
    assert_eq!(
        a.addrs,
        [
            (0, "10.0.0.1:10911".to_string()),
            (1, "10.0.0.2:10911".to_string())
        ]
    );
    assert_eq!(a.master_addr(), Some("10.0.0.1:10911"));
    assert_eq!(a.core_addrs, ["10.0.0.1:10911#0", "10.0.0.1:10911#1"]);
    assert_eq!(a.shard_count, 2);
    assert_eq!(route.brokers[1].broker_name, "broker-b");
    let queues: Vec<(&str, u32)> = route
        .queues
        .iter()
        .map(|q| (q.broker_name.as_str(), q.write_queues))
        .collect();
    assert_eq!(queues, [("broker-a", 8), ("broker-b", 4)]);

    assert_eq!(client.topic_list(), ["Audit", "Orders"]);

    let resp = client.call(Command::GetClusterInfo);
    let Command::ClusterInfo(info) = resp.command else {
        panic!("expected cluster info, got {:?}", resp.command);
    };
    let names: Vec<&str> = info
        .brokers
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    assert_eq!(names, ["broker-a", "broker-b"]);
    assert!(info.brokers.iter().all(|b| b.cluster == "DefaultCluster"));

    server.shutdown();
}

#[test]
fn unknown_topic_is_topic_not_exist_naming_the_topic() {
    let server = start_server(120_000);
    let mut client = Client::connect(server.local_addr());
    let resp = client.call(Command::GetRoute {
        topic: "NoSuchTopic".into(),
    });
    assert_eq!(resp.response_code(), ResponseCode::TopicNotExist);
    assert!(resp.remark.contains("NoSuchTopic"), "{}", resp.remark);
    assert!(client.topic_list().is_empty());
    server.shutdown();
}

#[test]
fn unregister_and_re_register_change_routes_at_once() {
    let server = start_server(120_000);
    let mut client = Client::connect(server.local_addr());
    let reg = registration("broker-a", 0, "a:1", &[topic("Old", 1), topic("Kept", 1)]);
    let key = reg.key.clone();
    client.register(reg);
    assert_eq!(client.topic_list(), ["Kept", "Old"]);

    // The heartbeat carries the whole topic list: a dropped topic vanishes.
    client.register(registration("broker-a", 0, "a:1", &[topic("Kept", 1)]));
    assert_eq!(client.topic_list(), ["Kept"]);
    let resp = client.call(Command::GetRoute {
        topic: "Old".into(),
    });
    assert_eq!(resp.response_code(), ResponseCode::TopicNotExist);

    let resp = client.call(Command::UnregisterBroker(key));
    assert_eq!(resp.response_code(), ResponseCode::Success);
    assert_eq!(resp.command, Command::Empty);
    assert!(client.topic_list().is_empty());
    assert_eq!(server.broker_count(), 0);
    server.shutdown();
}

#[test]
fn oneway_gets_no_answer_and_broker_commands_are_refused() {
    let server = start_server(120_000);
    let mut client = Client::connect(server.local_addr());
    let oneway_id = client.next_id();
    client.send(
        &Header::oneway(
            oneway_id,
            Command::RegisterBroker(registration("broker-a", 0, "a:1", &[topic("T", 1)])),
        ),
        &[],
    );
    // The next frame on the wire answers the next request, not the oneway one.
    assert_eq!(client.topic_list(), ["T"]);

    let resp = client.call(Command::GetTopicConfigs);
    assert_eq!(resp.response_code(), ResponseCode::RequestCodeNotSupported);
    assert!(!resp.remark.is_empty());
    // Still serving after the refusal.
    assert_eq!(client.topic_list(), ["T"]);
    server.shutdown();
}

#[test]
fn shutdown_closes_open_connections() {
    let server = start_server(120_000);
    let addr = server.local_addr();
    let mut client = Client::connect(addr);
    assert!(client.topic_list().is_empty());
    server.shutdown();
    // The server closed our connection: end of stream or reset, not a timeout.
    match client.read() {
        Ok(None) => {}
        Err(protocol::ProtocolError::Io(e)) => assert!(
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
            "connection left open: {e}"
        ),
        other => panic!("expected the connection closed, got {other:?}"),
    }
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener closed"
    );
}

#[test]
fn concurrent_brokers_and_clients_are_all_served() {
    let server = start_server(120_000);
    let addr = server.local_addr();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                let name = format!("broker-{i}");
                for round in 0..20 {
                    client.register(registration(
                        &name,
                        0,
                        &format!("b{i}:1"),
                        &[topic("Shared", 4)],
                    ));
                    let resp = client.call(Command::GetRoute {
                        topic: "Shared".into(),
                    });
                    assert_eq!(resp.response_code(), ResponseCode::Success, "round {round}");
                }
                // Kept open: a broker leaves the routes when its connection closes.
                client
            })
        })
        .collect();
    let _brokers: Vec<Client> = workers
        .into_iter()
        .map(|w| w.join().expect("worker succeeded"))
        .collect();
    let mut client = Client::connect(addr);
    let Command::Route(route) = client
        .call(Command::GetRoute {
            topic: "Shared".into(),
        })
        .command
    else {
        panic!("expected a route");
    };
    assert_eq!(route.brokers.len(), 8);
    assert_eq!(route.queues.len(), 8);
    server.shutdown();
}
