//! The broker bounds its client connections: past `connections_max` a new connection is
//! closed at once while the ones already served keep working, idle connections are closed
//! after `connection_idle_timeout_ms` (and a client just reconnects), and a frame trickled
//! in too slowly is cut off at `frame_deadline_ms`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use client::Message;
use integration::{mqadmin, mqadmin_json, producer, Cluster};

const TOML: &str =
    "connections_max = 8\nconnection_idle_timeout_ms = 2000\nframe_deadline_ms = 1000\n";

/// Whether the broker has closed `s`: a read sees the end of the stream or a reset.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(_) => true,
    }
}

#[test]
fn a_full_broker_closes_new_connections_and_idle_ones_leave_by_themselves() {
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(TOML.into()));
    let ns = c.namesrv.addr.clone();
    assert!(mqadmin(&ns, &["update-topic", "-t", "Conns", "-q", "2"])
        .status
        .success());
    let p = producer(&ns);
    p.send(Message::new("Conns", b"first".to_vec())).unwrap();

    // Far more idle connections than the core keeps: the ones past its share are closed at
    // once, while the producer, admitted before, goes on sending.
    let mut idle: Vec<TcpStream> = (0..24)
        .map(|_| {
            let s = TcpStream::connect(&c.broker.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refused = 0;
    let mut seen_closed = vec![false; idle.len()];
    while refused < 24 - 8 && Instant::now() < deadline {
        for (s, seen) in idle.iter_mut().zip(seen_closed.iter_mut()) {
            if !*seen && closed_by_peer(s) {
                *seen = true;
                refused += 1;
            }
        }
    }
    assert!(
        refused >= 24 - 8,
        "only {refused} of 24 connections were closed"
    );
    for i in 0..20 {
        p.send(Message::new("Conns", format!("m{i}").into_bytes()))
            .unwrap();
    }

    // The admitted idle connections are closed after the idle timeout, without a restart,
    // and the broker serves new clients again (the status request needs a connection).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut open: Vec<TcpStream> = idle;
    while !open.is_empty() && Instant::now() < deadline {
        open.retain_mut(|s| !closed_by_peer(s));
    }
    assert!(
        open.is_empty(),
        "{} idle connections still open",
        open.len()
    );
    let v = mqadmin_json(&ns, &["broker-status", "-b", &c.broker.addr]);
    let core = &v["cores"][0];
    assert_eq!(core["connections_max"], 8, "{v}");
    assert!(core["connections_refused"].as_u64().unwrap() >= 16, "{v}");
    assert!(core["connections_timed_out"].as_u64().unwrap() >= 1, "{v}");
    // The producer's own connection was idle long enough to be closed too; the client
    // dials again and the send goes through.
    p.send(Message::new("Conns", b"after".to_vec())).unwrap();
}

#[test]
fn a_frame_trickled_in_too_slowly_is_cut_off_though_bytes_keep_coming() {
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(TOML.into()));
    let mut s = TcpStream::connect(&c.broker.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // A frame announced as 1,000 bytes long, sent one byte every 200 ms: never idle for
    // the 2 s idle timeout, but not complete within the 1 s frame deadline.
    s.write_all(&1000u32.to_be_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut cut = false;
    while !cut && Instant::now() < deadline {
        if s.write_all(&[0u8]).is_err() || closed_by_peer(&mut s) {
            cut = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(cut, "the broker kept a frame trickling in for 20 s");
    let ns = c.namesrv.addr.clone();
    let v = mqadmin_json(&ns, &["broker-status", "-b", &c.broker.addr]);
    assert!(
        v["cores"][0]["connections_timed_out"].as_u64().unwrap() >= 1,
        "{v}"
    );
}
