//! Framing of whole RocketMQ v2 messages: what a server reads from a SendMessage call's
//! DATA frames, and how it refuses frames it must not accept.

#![allow(clippy::unwrap_used)]

use bytes::{BufMut, Bytes, BytesMut};
use grpc_proto::v2::{
    Digest, DigestType, Encoding, Message, MessageType, Resource, SendMessageRequest,
    SystemProperties,
};
use grpc_proto::{
    check_end_of_stream, decode_frame, decode_unary, encode_message, FrameError, GrpcCode,
    FRAME_HEADER_BYTES,
};
use prost::Message as _;

const LIMIT_BYTES: usize = 4 * 1024 * 1024;

fn send_request() -> SendMessageRequest {
    let body = Bytes::from_static(b"hello, corvus \x00\xff binary body");
    SendMessageRequest {
        messages: vec![Message {
            topic: Some(Resource {
                resource_namespace: "ns-1".into(),
                name: "OrderTopic".into(),
            }),
            user_properties: [("region".to_string(), "eu-1".to_string())].into(),
            system_properties: Some(SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["order-17".into(), "customer-4".into()],
                message_id: "01B4F0A2D8C3E5F60718293A4B".into(),
                body_digest: Some(Digest {
                    r#type: DigestType::Crc32 as i32,
                    checksum: "7A3B9C1D".into(),
                }),
                body_encoding: Encoding::Identity as i32,
                message_type: MessageType::Fifo as i32,
                born_timestamp: Some(prost_types::Timestamp {
                    seconds: 1_764_936_000,
                    nanos: 123_000_000,
                }),
                born_host: "10.0.0.7".into(),
                message_group: Some("group-42".into()),
                delivery_attempt: Some(1),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            body,
        }],
    }
}

#[test]
fn send_message_request_round_trips_through_a_frame() {
    let request = send_request();
    let mut wire = BytesMut::new();
    encode_message(&request, &mut wire).unwrap();

    let payload_len = request.encoded_len();
    assert_eq!(wire.len(), FRAME_HEADER_BYTES + payload_len);
    assert_eq!(wire[0], 0, "frames are sent uncompressed");
    assert_eq!(
        u32::from_be_bytes([wire[1], wire[2], wire[3], wire[4]]) as usize,
        payload_len,
        "length prefix is big-endian"
    );

    let decoded: SendMessageRequest = decode_unary(wire.clone().freeze(), LIMIT_BYTES).unwrap();
    assert_eq!(decoded, request);
    let message = &decoded.messages[0];
    assert_eq!(message.body, request.messages[0].body);
    let props = message.system_properties.as_ref().unwrap();
    assert_eq!(props.tag.as_deref(), Some("TagA"));
    assert_eq!(props.keys, ["order-17", "customer-4"]);
    assert_eq!(props.message_type(), MessageType::Fifo);
    assert_eq!(props.message_group.as_deref(), Some("group-42"));
    assert_eq!(props.born_timestamp.unwrap().nanos, 123_000_000);
    assert_eq!(message.user_properties["region"], "eu-1");
}

#[test]
fn messages_split_across_data_frames_come_out_whole_and_in_order() {
    let first = send_request();
    let mut second = send_request();
    second.messages[0].body = Bytes::from(vec![7u8; 10_000]);
    let mut wire = BytesMut::new();
    encode_message(&first, &mut wire).unwrap();
    encode_message(&second, &mut wire).unwrap();
    let wire = wire.freeze();

    // Every chunk size from one byte up: a frame's header and payload may be cut anywhere.
    for chunk_bytes in [1, 2, 4, 5, 6, 7, 100, 4096, wire.len()] {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in wire.chunks(chunk_bytes) {
            buf.put_slice(chunk);
            while let Some(payload) = decode_frame(&mut buf, LIMIT_BYTES).unwrap() {
                out.push(SendMessageRequest::decode(payload).unwrap());
            }
        }
        check_end_of_stream(&buf, LIMIT_BYTES).unwrap();
        assert_eq!(
            out,
            [first.clone(), second.clone()],
            "chunks of {chunk_bytes}"
        );
    }
}

fn header(flag: u8, len: u32) -> [u8; FRAME_HEADER_BYTES] {
    let len = len.to_be_bytes();
    [flag, len[0], len[1], len[2], len[3]]
}

#[test]
fn truncated_frames_wait_for_more_then_fail_at_end_of_stream() {
    let mut wire = BytesMut::new();
    encode_message(&send_request(), &mut wire).unwrap();
    let whole = wire.len();

    // Half a header, then a whole header without all of its payload.
    for have_bytes in [3, whole - 1] {
        let mut buf = BytesMut::from(&wire[..have_bytes]);
        assert_eq!(decode_frame(&mut buf, LIMIT_BYTES), Ok(None));
        assert_eq!(
            buf.len(),
            have_bytes,
            "an incomplete frame is left in place"
        );
        let need_bytes = if have_bytes < FRAME_HEADER_BYTES {
            FRAME_HEADER_BYTES
        } else {
            whole
        };
        let expected = FrameError::Truncated {
            have_bytes,
            need_bytes,
        };
        assert_eq!(
            check_end_of_stream(&buf, LIMIT_BYTES),
            Err(expected.clone())
        );
        let unary = decode_unary::<SendMessageRequest>(buf.freeze(), LIMIT_BYTES);
        assert_eq!(unary, Err(expected));
    }
}

#[test]
fn oversized_frames_are_refused_from_their_header_alone() {
    let limit_bytes = 1024;
    let mut buf = BytesMut::from(&header(0, 1025)[..]);
    let err = decode_frame(&mut buf, limit_bytes).unwrap_err();
    assert_eq!(
        err,
        FrameError::TooLarge {
            len_bytes: 1025,
            len_bytes_max: 1024
        }
    );
    assert_eq!(err.grpc_code(), GrpcCode::ResourceExhausted);

    let mut buf = BytesMut::from(&header(0, u32::MAX)[..]);
    assert!(matches!(
        decode_frame(&mut buf, LIMIT_BYTES),
        Err(FrameError::TooLarge { .. })
    ));

    // Exactly at the limit is accepted.
    let mut buf = BytesMut::from(&header(0, 1024)[..]);
    buf.put_bytes(0, 1024);
    assert_eq!(
        decode_frame(&mut buf, limit_bytes)
            .unwrap()
            .map(|p| p.len()),
        Some(1024)
    );
}

#[test]
fn compressed_and_unknown_flags_are_refused() {
    let mut wire = BytesMut::new();
    encode_message(&send_request(), &mut wire).unwrap();
    wire[0] = 1;
    let err = decode_unary::<SendMessageRequest>(wire.clone().freeze(), LIMIT_BYTES).unwrap_err();
    assert_eq!(err, FrameError::Compressed);
    assert_eq!(err.grpc_code(), GrpcCode::Internal);

    wire[0] = 2;
    let mut buf = wire.clone();
    assert_eq!(
        decode_frame(&mut buf, LIMIT_BYTES),
        Err(FrameError::InvalidFlag { flag: 2 })
    );

    // A compressed header is refused before its payload arrives.
    let mut buf = BytesMut::from(&header(1, 10)[..]);
    assert_eq!(
        decode_frame(&mut buf, LIMIT_BYTES),
        Err(FrameError::Compressed)
    );
}

#[test]
fn unary_bodies_must_hold_exactly_one_valid_message() {
    assert_eq!(
        decode_unary::<SendMessageRequest>(Bytes::new(), LIMIT_BYTES),
        Err(FrameError::Missing)
    );

    let mut two = BytesMut::new();
    encode_message(&send_request(), &mut two).unwrap();
    let one_bytes = two.len();
    encode_message(&send_request(), &mut two).unwrap();
    assert_eq!(
        decode_unary::<SendMessageRequest>(two.freeze(), LIMIT_BYTES),
        Err(FrameError::Trailing {
            extra_bytes: one_bytes
        })
    );

    // Field 1 (messages) as a length-delimited field announcing 100 bytes but holding 2.
    let mut bad = BytesMut::from(&header(0, 4)[..]);
    bad.put_slice(&[0x0a, 100, 0x00, 0x00]);
    let err = decode_unary::<SendMessageRequest>(bad.freeze(), LIMIT_BYTES).unwrap_err();
    assert!(matches!(err, FrameError::Decode(_)), "{err:?}");
    assert_eq!(err.grpc_code(), GrpcCode::Internal);
}
