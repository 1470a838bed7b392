//! Bad input gets a clear error and the broker keeps serving everyone else: a message over
//! the size limit, a garbage frame, an oversized frame, and an unknown topic with
//! auto-creation off.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use client::{ClientError, Message, Producer};
use integration::one_record as encode;
use integration::{mqadmin, producer, raw_call, Cluster};
use protocol::{Command, Header, ResponseCode, SendRequest};

fn send_header(topic: &str, id: u64) -> Header {
    Header::request(
        id,
        Command::Send(SendRequest {
            producer_group: "raw".into(),
            topic: topic.into(),
            queue_id: 0,
            count: 1,
        }),
    )
}

#[test]
fn oversized_message_gets_message_too_large_and_others_keep_working() {
    let c = Cluster::start(1, "small"); // message_bytes_max = 1 MiB
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Big", 1);
    let good = producer(&ns);
    good.send(Message::new("Big", &b"before"[..])).unwrap();

    // A client whose own limit is higher than the broker's: the broker must refuse it.
    let big = Producer::builder()
        .namesrv(&ns)
        .group("big")
        .compress_threshold_bytes(usize::MAX)
        .message_bytes_max(3 << 20)
        .retries(0)
        .build()
        .unwrap();
    let body: Vec<u8> = (0..(1536u64 * 1024))
        .map(|i| (i * 7919 % 251) as u8)
        .collect();
    let err = big.send(Message::new("Big", body)).unwrap_err();
    match &err {
        ClientError::Broker { code, remark, .. } => {
            assert_eq!(*code, ResponseCode::MessageTooLarge, "{remark}");
            assert!(remark.contains("exceeds"), "clear remark: {remark}");
        }
        other => panic!("expected a broker error, got {other:?}"),
    }
    good.send(Message::new("Big", &b"after"[..])).unwrap();
}

#[test]
fn oversized_frame_is_answered_and_the_connection_stays_usable() {
    let c = Cluster::start(1, "small"); // frame_bytes_max = 2 MiB
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Frames", 1);
    let addr = c.broker.addr.clone();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let huge = vec![0u8; 3 << 20];
    protocol::blocking::write_frame(&mut s, &send_header("Frames", 41), &huge).unwrap();
    let rec = encode("Frames", b"small one");
    protocol::blocking::write_frame(&mut s, &send_header("Frames", 42), &rec).unwrap();
    let mut r = protocol::blocking::FrameReader::new(&s, 64 << 20);
    let a = r.next_frame().unwrap().unwrap();
    assert_eq!(a.header.request_id, 41);
    assert_eq!(a.header.response_code(), ResponseCode::MessageTooLarge);
    let b = r.next_frame().unwrap().unwrap();
    assert_eq!(b.header.request_id, 42);
    assert_eq!(
        b.header.response_code(),
        ResponseCode::Success,
        "{}",
        b.header.remark
    );
}

#[test]
fn garbage_frame_is_refused_and_other_clients_keep_working() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Garbage", 1);
    let good = producer(&ns);
    good.send(Message::new("Garbage", &b"before"[..])).unwrap();

    let mut s = TcpStream::connect(&c.broker.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A plausible length prefix followed by random header bytes.
    let mut junk = Vec::new();
    junk.extend_from_slice(&68u32.to_be_bytes());
    junk.extend_from_slice(&64u32.to_be_bytes());
    junk.extend((0..64u32).map(|i| (i * 37 + 11) as u8));
    s.write_all(&junk).unwrap();
    let mut r = protocol::blocking::FrameReader::new(&s, 64 << 20);
    // A closed connection (Ok(None) or an error) is also a clear refusal.
    if let Ok(Some(f)) = r.next_frame() {
        assert_eq!(f.header.response_code(), ResponseCode::BadFrame);
        assert!(!f.header.remark.is_empty());
    }
    // The broker closes that connection.
    let mut rest = Vec::new();
    let _ = (&s).read_to_end(&mut rest);

    // HTTP on the broker port, from another client.
    let mut h = TcpStream::connect(&c.broker.addr).unwrap();
    h.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    h.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = h.read_to_end(&mut buf);

    good.send(Message::new("Garbage", &b"after"[..])).unwrap();
    // A well-formed record with a lying header count is refused too.
    let rec = encode("Garbage", b"x");
    let mut h = send_header("Garbage", 9);
    if let Command::Send(s) = &mut h.command {
        s.count = 5;
    }
    let f = raw_call(&c.broker.addr, &h, &rec);
    assert_eq!(
        f.header.response_code(),
        ResponseCode::MessageIllegal,
        "{}",
        f.header.remark
    );
    // A truncated record body.
    let f = raw_call(
        &c.broker.addr,
        &send_header("Garbage", 10),
        &rec[..rec.len() - 5],
    );
    assert_eq!(
        f.header.response_code(),
        ResponseCode::MessageIllegal,
        "{}",
        f.header.remark
    );

    // A flood of garbage connections is counted, and logged a line per few seconds with a
    // count, not a line each.
    for _ in 0..50 {
        let mut s = TcpStream::connect(&c.broker.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&junk).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    let out = mqadmin(&ns, &["--json", "broker-status", "-b", &c.broker.addr]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The first garbage frame and the HTTP request are malformed too.
    assert!(
        v["cores"][0]["connections_bad_frames"].as_u64().unwrap() >= 51,
        "{v}"
    );
    let log = c.broker.stderr();
    let lines = log
        .lines()
        .filter(|l| l.contains("malformed frame"))
        .count();
    assert!(lines <= 3, "{lines} lines about malformed frames:\n{log}");
}

#[test]
fn unknown_topic_with_auto_create_off_is_a_clear_error() {
    let c = Cluster::start_with(1, "small", |o| {
        o.extra.push("--no-auto-create-topic".into())
    });
    let ns = c.namesrv.addr.clone();
    // The broker's own answer.
    let f = raw_call(
        &c.broker.addr,
        &send_header("NoSuchTopic", 7),
        &encode("NoSuchTopic", b"x"),
    );
    assert_eq!(f.header.request_id, 7);
    assert_eq!(f.header.response_code(), ResponseCode::TopicNotExist);
    assert!(
        f.header.remark.contains("NoSuchTopic"),
        "{}",
        f.header.remark
    );
    // What a producer sees: no route for the topic.
    let p = producer(&ns);
    let err = p.send(Message::new("NoSuchTopic", &b"x"[..])).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::NoRoute { .. } | ClientError::Broker { .. }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("NoSuchTopic"), "{err}");
    // mqadmin says so too, and exits non-zero.
    let out = mqadmin(&ns, &["send", "-t", "NoSuchTopic", "-p", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NoSuchTopic"));
    // Created topics still work.
    integration::create_topic(&ns, "Known", 1);
    p.send(Message::new("Known", &b"ok"[..])).unwrap();
}

#[test]
fn a_lease_asked_for_past_the_broker_maximum_ends_at_the_maximum() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("queue_lock_lease_max_ms = 1000\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Leased", 1);
    let lock = |client: &str, id: u64| {
        let h = Header::request(
            id,
            Command::LockQueue {
                queue: protocol::GroupQueue {
                    group: "orderly".into(),
                    topic: "Leased".into(),
                    queue_id: 0,
                },
                client_id: client.into(),
                lease_ms: 600_000,
            },
        );
        raw_call(&c.broker.addr, &h, &[]).header.response_code()
    };
    // A takes the queue asking for ten minutes; B is refused while A's lease runs.
    assert_eq!(lock("client-a", 1), ResponseCode::Success);
    assert_eq!(lock("client-b", 2), ResponseCode::QueueLocked);
    // The lease ends after the broker's maximum (1 s), not after the ten minutes asked.
    let got = integration::wait_for(Duration::from_secs(15), || {
        (lock("client-b", 3) == ResponseCode::Success).then_some(())
    });
    assert!(got.is_some(), "client-b never got the queue");
}

#[test]
fn topics_past_the_queue_bound_are_refused_with_the_count() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some("queues_max = 10\n".into())
    });
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Big", 8);
    // 8 + 4 > 10: refused, saying why.
    let out = mqadmin(&ns, &["update-topic", "-t", "More", "-q", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("queues_max") && err.contains("12"), "{err}");
    // Growing the first one to the bound is fine: a topic counts once.
    integration::create_topic(&ns, "Big", 10);
    // A send to an unknown topic would auto-create one past the bound: a clear error, and
    // the topics there are still served.
    let p = integration::producer_without_retries(&ns, "bound");
    let e = p.send(Message::new("Unknown", &b"x"[..])).unwrap_err();
    assert!(e.to_string().contains("queues_max"), "{e}");
    producer(&ns)
        .send(Message::new("Big", &b"still served"[..]))
        .unwrap();
}
