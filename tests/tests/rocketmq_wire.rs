//! The remoting protocol at its edges, spoken by hand on raw sockets: an unknown request code
//! is answered REQUEST_CODE_NOT_SUPPORTED with a remark and the connection carries on; both
//! header forms are answered in the form asked; a malformed remoting frame closes only its own
//! connection; an HTTP/2 client that breaks its handshake is closed; and the NameServer and
//! broker keep serving everyone else, native clients included, on the same ports.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use integration::{create_topic, Cluster};
use remoting::codes::{request, response};
use remoting::{Decoded, RemotingCommand, RemotingDecoder, SerializeType};

/// One request and its answer over `conn`.
fn call(conn: &mut TcpStream, cmd: &RemotingCommand, body: &[u8]) -> remoting::Frame {
    conn.write_all(&remoting::encode(cmd, body).unwrap())
        .unwrap();
    read_frame(conn).expect("an answer")
}

fn read_frame(conn: &mut TcpStream) -> Option<remoting::Frame> {
    let mut decoder = RemotingDecoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            return Some(f);
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn connect(addr: &str) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn max_offset(topic: &str, queue: u32, opaque: i32, form: SerializeType) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(request::GET_MAX_OFFSET, opaque);
    cmd.serialize_type = form;
    cmd.ext_fields.insert("topic".into(), topic.into());
    cmd.ext_fields.insert("queueId".into(), queue.to_string());
    cmd
}

/// Whether the peer closed `conn` (a read returns end of stream) within the read timeout.
fn closed(conn: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match conn.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn unknown_codes_bad_frames_and_broken_http2_are_answered_and_everyone_else_is_served() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    create_topic(&ns, "WireTopic", 8);

    for addr in [&broker, &ns] {
        let mut conn = connect(addr);
        let unknown = RemotingCommand::request(9999, 41);
        let a = call(&mut conn, &unknown, b"");
        assert_eq!(
            (a.command.code, a.command.opaque),
            (response::REQUEST_CODE_NOT_SUPPORTED, 41)
        );
        assert!(a.command.is_response());
        assert!(
            a.command.remark.as_deref().unwrap_or("").contains("9999"),
            "{:?}",
            a.command.remark
        );
        // The connection carries on, in either header form.
        let route = {
            let mut cmd = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 42);
            cmd.serialize_type = SerializeType::RocketMq;
            cmd.ext_fields.insert("topic".into(), "WireTopic".into());
            cmd
        };
        let a = call(&mut conn, &route, b"");
        assert_eq!(a.command.opaque, 42);
        assert_eq!(
            a.command.serialize_type,
            SerializeType::RocketMq,
            "answered in the form asked"
        );
    }

    // The broker answers offsets of a core's own queues in both forms; a queue number past
    // the core's queues and an unknown topic get clear errors.
    let mut conn = connect(&broker);
    let a = call(
        &mut conn,
        &max_offset("WireTopic", 0, 1, SerializeType::Json),
        b"",
    );
    assert_eq!(
        (a.command.code, a.command.serialize_type),
        (response::SUCCESS, SerializeType::Json)
    );
    let a = call(
        &mut conn,
        &max_offset("WireTopic", 0, 2, SerializeType::RocketMq),
        b"",
    );
    assert_eq!(a.command.code, response::SUCCESS);
    let a = call(
        &mut conn,
        &max_offset("WireTopic", 99, 3, SerializeType::Json),
        b"",
    );
    assert_ne!(a.command.code, response::SUCCESS);
    assert!(a.command.remark.unwrap_or_default().contains("queue 99"));
    let a = call(
        &mut conn,
        &max_offset("NoSuchTopic", 0, 4, SerializeType::Json),
        b"",
    );
    assert_eq!(a.command.code, response::TOPIC_NOT_EXIST);

    // A frame whose header cannot be read closes its own connection only.
    let mut bad = connect(&broker);
    let mut frame = Vec::new();
    frame.extend_from_slice(&20u32.to_be_bytes());
    frame.extend_from_slice(&(1u32 << 24 | 16).to_be_bytes());
    frame.extend_from_slice(&[0xff; 16]);
    bad.write_all(&frame).unwrap();
    assert!(
        closed(&mut bad),
        "a garbled remoting frame closes the connection"
    );

    // An HTTP/2 client (gRPC's transport) whose first frame is not SETTINGS broke HTTP/2's
    // handshake: it is closed.
    let mut grpc = connect(&broker);
    grpc.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    grpc.write_all(&[0, 0, 4, 0, 0, 0, 0, 0, 0, b'g', b'a', b'r', b'b'])
        .unwrap();
    assert!(closed(&mut grpc), "a broken HTTP/2 connection is closed");

    // Everyone else is still served: the remoting connection, and a native client.
    let a = call(
        &mut conn,
        &max_offset("WireTopic", 1, 5, SerializeType::Json),
        b"",
    );
    assert_eq!(a.command.code, response::SUCCESS);
    let p = integration::producer(&ns);
    p.send(client::Message::new("WireTopic", b"native".to_vec()))
        .unwrap();
}

fn broker_config(addr: &str) -> String {
    let mut conn = connect(addr);
    let cmd = RemotingCommand::request(request::GET_BROKER_CONFIG, 1);
    let f = call(&mut conn, &cmd, b"");
    assert_eq!(f.command.code, response::SUCCESS);
    String::from_utf8(f.body.to_vec()).unwrap()
}

fn update_broker_config(addr: &str, properties: &str) -> remoting::Frame {
    let mut conn = connect(addr);
    let cmd = RemotingCommand::request(request::UPDATE_BROKER_CONFIG, 2);
    call(&mut conn, &cmd, properties.as_bytes())
}

/// UPDATE_BROKER_CONFIG (RocketMQ's mqadmin updateBrokerConfig) applies the keys read at each
/// use at once (GET_BROKER_CONFIG shows them), stores the rest for the next restart, and the
/// remark says which is which; the restarted broker runs with all of them; a key corvus does
/// not apply, or a value out of bounds, changes nothing and the answer says why.
#[test]
fn update_broker_config_applies_live_keys_now_and_the_rest_at_the_next_restart() {
    let mut c = Cluster::start(1, "small");
    let before = broker_config(&c.broker.addr);
    assert!(before.contains("file_reserved_hours=72"), "{before}");
    assert!(before.contains("connections_max=10000"), "{before}");

    let f = update_broker_config(
        &c.broker.addr,
        "fileReservedTime=24\nlong_polling_max_ms=7000\nconnections_max=5000\n",
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let remark = f.command.remark.unwrap_or_default();
    assert!(
        remark.contains(
            "applied now on every core: file_reserved_hours (fileReservedTime), long_polling_max_ms;"
        ) && remark.contains("stored for the next restart: connections_max;"),
        "{remark}"
    );
    let now = broker_config(&c.broker.addr);
    assert!(now.contains("fileReservedTime=24"), "{now}");
    assert!(now.contains("long_polling_max_ms=7000"), "{now}");
    assert!(
        now.contains("connections_max=10000"),
        "read at start: {now}"
    );
    // Refused as a whole: one key corvus does not apply, one out of bounds.
    let f = update_broker_config(&c.broker.addr, "fileReservedTime=12\ndeleteWhen=04\n");
    assert_eq!(f.command.code, response::INVALID_PARAMETER);
    assert!(f.command.remark.unwrap_or_default().contains("deleteWhen"));
    let f = update_broker_config(&c.broker.addr, "fileReservedTime=0\n");
    assert_eq!(f.command.code, response::INVALID_PARAMETER);
    assert!(f
        .command
        .remark
        .unwrap_or_default()
        .contains("file_reserved_hours"));
    assert!(broker_config(&c.broker.addr).contains("fileReservedTime=24"));

    c.restart_broker();
    let config = broker_config(&c.broker.addr);
    assert!(config.contains("fileReservedTime=24"), "{config}");
    assert!(config.contains("long_polling_max_ms=7000"), "{config}");
    assert!(config.contains("connections_max=5000"), "{config}");
}
