//! A broker with `--cores 2` serves queues owned by both cores; the workspace's client sends
//! every request to the owning core (no cross-core hop), while a client that uses the shared
//! port is forwarded over the mesh and the hops are counted. A data directory keeps its shard
//! count when the broker restarts with fewer cores.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::Duration;

use client::{Admin, Message, PullConsumer};
use integration::{drain_topic, producer, Cluster};
use protocol::{queue_owner_shard, Command, Header, ResponseCode, SendRequest};

fn status(ns: &str, broker: &str) -> protocol::BrokerStatus {
    Admin::new(ns).unwrap().broker_status(broker).unwrap()
}

#[test]
fn two_cores_serve_every_queue_without_cross_core_hops() {
    let mut c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    integration::create_topic(&ns, "Spread", 8);
    let owners: HashSet<u16> = (0..8).map(|q| queue_owner_shard("Spread", q, 2)).collect();
    assert_eq!(owners.len(), 2, "the topic's queues live on both shards");

    let p = producer(&ns);
    for i in 0..400 {
        p.send(Message::new("Spread", format!("m{i}").into_bytes()).with_key(format!("k{i}")))
            .unwrap();
    }
    let consumer = PullConsumer::new(&ns, "g").unwrap();
    let got = drain_topic(&consumer, "Spread", Duration::from_secs(30));
    assert_eq!(got.len(), 400);
    let queues: HashSet<u32> = got.iter().map(|m| m.queue_id).collect();
    assert_eq!(queues.len(), 8);

    let st = status(&ns, &broker);
    assert_eq!(st.cores.len(), 2);
    for core in &st.cores {
        assert_eq!(
            core.cross_core_hops, 0,
            "core {} saw hops: {core:?}",
            core.core
        );
        assert_eq!(
            core.produced_messages, 200,
            "each core stored its half: {core:?}"
        );
        assert_eq!(core.consumed_messages, 200, "{core:?}");
    }

    // A client that only knows the shared port: whichever core accepts its connection, the
    // requests for the other core's four queues hop, and are counted.
    let mut conn = std::net::TcpStream::connect(&broker).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = protocol::blocking::FrameReader::new(conn.try_clone().unwrap(), 64 << 20);
    for q in 0..8u32 {
        let props = [("UNIQ_KEY", "0123456789ABCDEF0123456789ABCDEF")];
        let fields = message::MessageFields {
            topic: "Spread",
            body: b"via shared port",
            properties: &props,
            ..Default::default()
        };
        let mut rec = Vec::new();
        message::encode_record(&fields, &mut rec).unwrap();
        let h = Header::request(
            q as u64,
            Command::Send(SendRequest {
                producer_group: "raw".into(),
                topic: "Spread".into(),
                queue_id: q,
                count: 1,
            }),
        );
        protocol::blocking::write_frame(&mut conn, &h, &rec).unwrap();
        let f = reader.next_frame().unwrap().unwrap();
        assert_eq!(
            f.header.response_code(),
            ResponseCode::Success,
            "{}",
            f.header.remark
        );
    }
    drop(reader);
    drop(conn);
    let st = status(&ns, &broker);
    let hops: u64 = st.cores.iter().map(|c| c.cross_core_hops).sum();
    assert_eq!(
        hops, 4,
        "sends to the other core's queues are forwarded and counted: {st:?}"
    );
    let total: u64 = st.cores.iter().map(|c| c.produced_messages).sum();
    assert_eq!(total, 408);

    // Restart with one core: the directory keeps two shards, and one core serves both.
    assert_eq!(c.broker.terminate(), Some(0));
    c.opts.cores = 1;
    c.restart_broker();
    let got = drain_topic(&consumer, "Spread", Duration::from_secs(30));
    assert_eq!(
        got.len(),
        408,
        "every queue of both shards is served by the single core"
    );
    let st = status(&ns, &c.broker.addr);
    assert_eq!(st.shard_count, 2);
    assert_eq!(st.cores.len(), 1);
    assert_eq!(st.cores[0].shards, vec![0, 1]);
}

/// A core whose inbox permits are all held by long polls forwarded from the other core still
/// gets the replies to its own forwarded requests at once: replies travel on a lane of their
/// own. (Before, they waited behind the permits, so a send forwarded from that core took as
/// long as the longest poll, here 15 s.)
#[test]
fn forwarded_long_polls_cannot_hold_up_replies() {
    let c = Cluster::start_with(2, "small", |o| {
        o.config_toml = Some("inbox_capacity = 4\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Lanes", 8);
    let admin = Admin::new(&ns).unwrap();
    let route = admin.topic_route("Lanes").unwrap();
    let cores = &route.data.brokers[0].core_addrs;
    assert_eq!(cores.len(), 2);
    let owner = |q: u32| protocol::shard_core(queue_owner_shard("Lanes", q, 2), 2);
    let on_core0: Vec<u32> = (0..8).filter(|&q| owner(q) == 0).collect();
    let on_core1: Vec<u32> = (0..8).filter(|&q| owner(q) == 1).collect();
    assert!(!on_core0.is_empty() && !on_core1.is_empty());

    // Four long polls (the inbox's permits) for core 0's queues, sent to core 1's port:
    // forwarded, they hold every permit of core 0 for 15 s.
    let polls: Vec<std::net::TcpStream> = (0..4u64)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(&cores[1]).unwrap();
            let h = Header::request(
                i,
                Command::Pull(protocol::PullRequest {
                    consumer_group: "lanes".into(),
                    topic: "Lanes".into(),
                    queue_id: on_core0[i as usize % on_core0.len()],
                    queue_offset: 0,
                    max_messages: 32,
                    max_bytes: 1 << 20,
                    tag_expression: "*".into(),
                    suspend_timeout_ms: 15_000,
                }),
            );
            protocol::blocking::write_frame(&mut s, &h, &[]).unwrap();
            s
        })
        .collect();
    // Asked of core 0 itself (its direct port): a status request arriving on core 1 would
    // queue for core 0's permits like any other request.
    let held = integration::wait_for(Duration::from_secs(10), || {
        let st = status(&ns, &cores[0]);
        (st.cores.iter().find(|s| s.core == 0)?.inbox_depth >= 4).then_some(())
    });
    assert!(held.is_some(), "the long polls never held core 0's inbox");

    // A send for one of core 1's queues, through core 0's port: forwarded to core 1, whose
    // reply core 0 must read although it has no permit left.
    let mut conn = std::net::TcpStream::connect(&cores[0]).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reader = protocol::blocking::FrameReader::new(conn.try_clone().unwrap(), 64 << 20);
    let props = [("UNIQ_KEY", "00112233445566778899AABBCCDDEEFF")];
    let fields = message::MessageFields {
        topic: "Lanes",
        body: b"past the polls",
        properties: &props,
        ..Default::default()
    };
    let mut rec = Vec::new();
    message::encode_record(&fields, &mut rec).unwrap();
    let h = Header::request(
        99,
        Command::Send(SendRequest {
            producer_group: "raw".into(),
            topic: "Lanes".into(),
            queue_id: on_core1[0],
            count: 1,
        }),
    );
    let started = std::time::Instant::now();
    protocol::blocking::write_frame(&mut conn, &h, &rec).unwrap();
    let f = reader.next_frame().unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(
        f.header.response_code(),
        ResponseCode::Success,
        "{}",
        f.header.remark
    );
    assert!(
        took < Duration::from_secs(5),
        "the forwarded send's reply waited {took:?} behind the long polls"
    );
    drop(polls);
}
