//! Hostile and broken input: the server answers or closes that one connection, never panics,
//! and keeps serving everyone else.

mod common;

use std::io::ErrorKind;

use common::{start_server, Client};
use protocol::{Command, Header, ProtocolError, ResponseCode};

/// After garbage the server may answer BadFrame, then must close; anything but a timeout
/// (a connection left hanging) or a normal response is acceptable.
fn expect_bad_frame_then_close(client: &mut Client) {
    let mut saw_end = false;
    for _ in 0..2 {
        match client.read() {
            Ok(Some(frame)) => {
                assert_eq!(frame.header.response_code(), ResponseCode::BadFrame);
                assert!(frame.header.is_response());
                assert!(!frame.header.remark.is_empty());
            }
            Ok(None) => {
                saw_end = true;
                break;
            }
            Err(ProtocolError::Io(e)) => {
                assert!(
                    !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                    "connection left open after garbage: {e}"
                );
                saw_end = true;
                break;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(saw_end, "connection not closed after a bad frame");
}

#[test]
fn garbage_closes_only_that_connection() {
    let server = start_server(120_000);
    let mut healthy = Client::connect(server.local_addr());
    assert!(healthy.topic_list().is_empty());

    // HTTP on the wrong port: the "header length" is absurd.
    let mut http = Client::connect(server.local_addr());
    http.write_raw(b"GET / HTTP/1.1\r\nHost: namesrv\r\n\r\n")
        .expect("write");
    expect_bad_frame_then_close(&mut http);

    // Plausible lengths around a header of random bytes: fails rkyv validation.
    let mut junk = Client::connect(server.local_addr());
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4u32 + 48).to_be_bytes());
    frame.extend_from_slice(&48u32.to_be_bytes());
    frame.extend_from_slice(&[0xA5; 48]);
    junk.write_raw(&frame).expect("write");
    expect_bad_frame_then_close(&mut junk);

    // Half a frame, then hang up.
    let mut torn = Client::connect(server.local_addr());
    torn.write_raw(&[0, 0, 1, 0, 0, 0]).expect("write");
    drop(torn);

    // The other client never noticed.
    assert!(healthy.topic_list().is_empty());
    let mut fresh = Client::connect(server.local_addr());
    assert!(fresh.topic_list().is_empty());
    server.shutdown();
}

#[test]
fn oversized_frame_is_answered_and_the_connection_survives() {
    let server = start_server(120_000);
    let mut client = Client::connect(server.local_addr());
    let id = client.next_id();
    let body = vec![0x5Au8; 4 * 1024 * 1024 + 1024];
    client.send(&Header::request(id, Command::GetTopicList), &body);
    let frame = client
        .read()
        .expect("an answer")
        .expect("connection stays open");
    assert_eq!(frame.header.request_id, id);
    assert!(frame.header.is_response());
    assert_ne!(frame.header.response_code(), ResponseCode::Success);
    assert!(
        frame.header.remark.contains("limit"),
        "{}",
        frame.header.remark
    );

    // The rest of the frame was skipped: the next request is served normally.
    assert!(client.topic_list().is_empty());
    let resp = client.call(Command::GetRoute { topic: "T".into() });
    assert_eq!(resp.response_code(), ResponseCode::TopicNotExist);
    server.shutdown();
}

#[test]
fn unsolicited_response_frames_are_ignored() {
    let server = start_server(120_000);
    let mut client = Client::connect(server.local_addr());
    client.send(
        &Header::error(77, ResponseCode::SystemBusy, "not a request"),
        &[],
    );
    // No answer to the response; the next frame answers the next request.
    assert!(client.topic_list().is_empty());
    server.shutdown();
}
