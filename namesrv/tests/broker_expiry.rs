//! A broker that stops heartbeating is dropped from the routes; one that keeps going stays.

mod common;

use std::time::{Duration, Instant};

use common::{registration, start_server, topic, Client};
use protocol::{Command, ResponseCode};

#[test]
fn silent_broker_is_dropped_after_the_expiry() {
    const EXPIRY_MS: u64 = 300;
    let server = start_server(EXPIRY_MS);
    let mut silent = Client::connect(server.local_addr());
    silent.register(registration(
        "broker-silent",
        0,
        "s:1",
        &[topic("T", 1), topic("Gone", 1)],
    ));
    let mut alive = Client::connect(server.local_addr());
    let heartbeat = registration("broker-alive", 0, "a:1", &[topic("T", 1)]);
    alive.register(heartbeat.clone());
    assert_eq!(alive.topic_list(), ["Gone", "T"]);

    // Heartbeat the live broker well within the expiry until the silent one is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        alive.register(heartbeat.clone());
        if server.broker_count() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "silent broker still registered after 10 s (expiry {EXPIRY_MS} ms)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let resp = alive.call(Command::GetRoute { topic: "T".into() });
    let Command::Route(route) = resp.command else {
        panic!("expected a route, got {:?}", resp.command);
    };
    let names: Vec<&str> = route
        .brokers
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    assert_eq!(names, ["broker-alive"]);
    let resp = alive.call(Command::GetRoute {
        topic: "Gone".into(),
    });
    assert_eq!(resp.response_code(), ResponseCode::TopicNotExist);
    assert_eq!(alive.topic_list(), ["T"]);

    // The silent broker's connection still works; re-registering brings it back.
    silent.register(registration("broker-silent", 0, "s:1", &[topic("Gone", 1)]));
    assert_eq!(silent.topic_list(), ["Gone", "T"]);
    server.shutdown();
}
