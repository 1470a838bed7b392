//! Frames real RocketMQ clients sent to `examples/capture_server.rs` on loopback, stored as
//! hex under `fixtures/`: the Apache Java client (rocketmq-client 4.9.8, `version` 409;
//! `java-…-json-` with default headers, `java-…-rocketmq-` sent with
//! `-Drocketmq.serialize.type=ROCKETMQ`; driver in `tests/rocketmq-java/`) and the C++ client
//! 0.4.4 from PyPI (`cpp-…`; driver in `tests/rocketmq-cpp/`) and the Go client v2.1.2
//! (`go-…`; driver in `tests/rocketmq-go/`). Each client also round-tripped
//! its messages through the capture server's answers, which this crate encoded.

#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use remoting::body::{self, ConsumeFromWhere, ConsumeType, HeartbeatData, MessageModel};
use remoting::codes::request;
use remoting::headers::*;
use remoting::message::{self, property};
use remoting::{
    decode_frame, encode, Decoded, Frame, LanguageCode, RemotingDecoder, SerializeType,
};

fn fixture(hex: &str) -> Bytes {
    let hex = hex.trim();
    assert!(hex.len().is_multiple_of(2));
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    Bytes::from(bytes)
}

/// Decodes a fixture whole and fed one byte at a time; both must agree.
fn decode(hex: &str) -> Frame {
    let wire = fixture(hex);
    let whole = decode_frame(wire.clone()).unwrap();
    let mut dec = RemotingDecoder::default();
    let mut buf = BytesMut::new();
    let mut streamed = Vec::new();
    for b in wire.iter() {
        buf.extend_from_slice(&[*b]);
        while let Some(d) = dec.decode(&mut buf).unwrap() {
            match d {
                Decoded::Frame(f) => streamed.push(f),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(streamed, vec![whole.clone()]);
    // Every strict prefix is incomplete, never an error or a frame.
    for n in 0..wire.len() {
        let mut buf = BytesMut::from(&wire[..n]);
        assert!(RemotingDecoder::default()
            .decode(&mut buf)
            .unwrap()
            .is_none());
    }
    // Our encoding of what we decoded decodes to the same thing.
    let again = decode_frame(encode(&whole.command, &whole.body).unwrap()).unwrap();
    assert_eq!(again, whole);
    whole
}

fn assert_java_request(f: &Frame, code: i32, st: SerializeType) {
    assert_eq!(f.command.code, code);
    assert_eq!(f.command.language, LanguageCode::Java);
    assert_eq!(f.command.version, 409, "MQVersion V4_9_8");
    assert_eq!(f.command.serialize_type, st);
    assert!(!f.command.is_response());
}

#[test]
fn route_request() {
    for (hex, st) in [
        (
            include_str!("fixtures/java-4.9.8-json-route.hex"),
            SerializeType::Json,
        ),
        (
            include_str!("fixtures/java-4.9.8-rocketmq-route.hex"),
            SerializeType::RocketMq,
        ),
    ] {
        let f = decode(hex);
        assert_java_request(&f, request::GET_ROUTEINFO_BY_TOPIC, st);
        let h: GetRouteInfoRequestHeader = f.command.ext_header().unwrap();
        assert_eq!(h.topic, "TopicTest");
        assert_eq!(h.accept_standard_json_only, None);
        assert!(h.wants_standard_json(&f.command));
        assert!(f.body.is_empty());
    }
}

#[test]
fn binary_frames_re_encode_byte_for_byte() {
    // With at most one extFields entry, Java's HashMap order cannot differ from ours, so our
    // binary encoder must reproduce the captured bytes exactly.
    for hex in [
        include_str!("fixtures/java-4.9.8-rocketmq-route.hex"),
        include_str!("fixtures/java-4.9.8-rocketmq-heartbeat.hex"),
    ] {
        let wire = fixture(hex);
        let f = decode_frame(wire.clone()).unwrap();
        assert!(f.command.ext_fields.len() <= 1);
        assert_eq!(encode(&f.command, &f.body).unwrap(), wire);
    }
}

#[test]
fn send_v2() {
    for (hex, st) in [
        (
            include_str!("fixtures/java-4.9.8-json-send-v2.hex"),
            SerializeType::Json,
        ),
        (
            include_str!("fixtures/java-4.9.8-rocketmq-send-v2.hex"),
            SerializeType::RocketMq,
        ),
    ] {
        let f = decode(hex);
        assert_java_request(&f, request::SEND_MESSAGE_V2, st);
        let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
        assert_eq!(h.producer_group, "CaptureProducerGroup");
        assert_eq!(h.topic, "TopicTest");
        assert_eq!(h.default_topic, "TBW102");
        assert_eq!(h.default_topic_queue_nums, 4);
        assert!((0..4).contains(&h.queue_id));
        assert_eq!(h.sys_flag, 0);
        assert!(h.born_timestamp > 1_600_000_000_000);
        assert!(!h.batch);
        assert_eq!(h.broker_name.as_deref(), Some("broker-a"));
        let props = message::decode_properties(h.properties.as_deref().unwrap());
        assert_eq!(message::property(&props, property::TAGS), Some("TagA"));
        assert_eq!(message::property(&props, property::KEYS), Some("key1 key2"));
        assert_eq!(
            message::property(&props, property::WAIT_STORE_MSG_OK),
            Some("true")
        );
        assert_eq!(
            message::property(&props, property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).map(str::len),
            Some(56),
            "an IPv6 client's UNIQ_KEY"
        );
        assert_eq!(&f.body[..], b"hello corvus");
    }
}

#[test]
fn send_batch() {
    for (hex, st) in [
        (
            include_str!("fixtures/java-4.9.8-json-send-batch.hex"),
            SerializeType::Json,
        ),
        (
            include_str!("fixtures/java-4.9.8-rocketmq-send-batch.hex"),
            SerializeType::RocketMq,
        ),
    ] {
        let f = decode(hex);
        assert_java_request(&f, request::SEND_BATCH_MESSAGE, st);
        let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
        assert!(h.batch);
        let msgs = message::decode_batch(&f.body).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(&msgs[0].body[..], b"batch one");
        assert_eq!(&msgs[1].body[..], b"batch two");
        for m in &msgs {
            let props = message::decode_properties(&m.properties);
            assert_eq!(message::property(&props, property::TAGS), Some("TagB"));
            assert!(message::property(&props, property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).is_some());
        }
        // Re-encoding the records gives back the body (the client writes magic and CRC 0).
        assert_eq!(message::encode_batch(&msgs).unwrap(), f.body.to_vec());
    }
}

#[test]
fn heartbeat() {
    for (hex, st) in [
        (
            include_str!("fixtures/java-4.9.8-json-heartbeat.hex"),
            SerializeType::Json,
        ),
        (
            include_str!("fixtures/java-4.9.8-rocketmq-heartbeat.hex"),
            SerializeType::RocketMq,
        ),
    ] {
        let f = decode(hex);
        assert_java_request(&f, request::HEART_BEAT, st);
        assert!(
            f.command.ext_fields.is_empty(),
            "Java sends no extFields here"
        );
        let hb: HeartbeatData = body::from_json(&f.body).unwrap();
        assert!(hb.client_id.ends_with("@capture-consumer"));
        assert_eq!(hb.producer_data_set.len(), 1);
        assert_eq!(hb.producer_data_set[0].group_name, "CLIENT_INNER_PRODUCER");
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.group_name, "CaptureConsumerGroup");
        assert_eq!(c.consume_type, ConsumeType::Passively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(c.consume_from_where, ConsumeFromWhere::FirstOffset);
        let sub = c
            .subscription_data_set
            .iter()
            .find(|s| s.topic == "TopicTest")
            .unwrap();
        assert_eq!(sub.sub_string, "TagA || TagB");
        assert_eq!(sub.expression_type.as_deref(), Some("TAG"));
        // The client's own tag codes agree with ours.
        let mut codes: Vec<i64> = sub.code_set.iter().map(|c| *c as i64).collect();
        codes.sort_unstable();
        let mut ours: Vec<i64> = sub
            .tags_set
            .iter()
            .map(|t| message::tag_hash_code(t))
            .collect();
        ours.sort_unstable();
        assert_eq!(codes, ours);
        assert_eq!(codes, vec![2_598_919, 2_598_920]);
        assert!(c
            .subscription_data_set
            .iter()
            .any(|s| s.topic == "%RETRY%CaptureConsumerGroup"));
    }
}

#[test]
fn pull() {
    for (hex, st) in [
        (
            include_str!("fixtures/java-4.9.8-json-pull.hex"),
            SerializeType::Json,
        ),
        (
            include_str!("fixtures/java-4.9.8-rocketmq-pull.hex"),
            SerializeType::RocketMq,
        ),
    ] {
        let f = decode(hex);
        assert_java_request(&f, request::PULL_MESSAGE, st);
        let h: PullMessageRequestHeader = f.command.ext_header().unwrap();
        assert_eq!(h.consumer_group, "CaptureConsumerGroup");
        assert_eq!(h.max_msg_nums, 32);
        assert_eq!(h.sys_flag, message::pull_sys_flag::SUSPEND);
        assert_eq!(h.suspend_timeout_millis, 15_000);
        assert_eq!(
            h.subscription, None,
            "no subscription string: postSubscriptionWhenPull is off"
        );
        assert_eq!(h.expression_type.as_deref(), Some("TAG"));
        assert_eq!(h.broker_name.as_deref(), Some("broker-a"));
    }
}

#[test]
fn offsets_and_membership() {
    let f = decode(include_str!(
        "fixtures/java-4.9.8-json-query-consumer-offset.hex"
    ));
    assert_java_request(&f, request::QUERY_CONSUMER_OFFSET, SerializeType::Json);
    let q: QueryConsumerOffsetRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(q.consumer_group, "CaptureConsumerGroup");
    assert_eq!(q.set_zero_if_not_found, None);

    let f = decode(include_str!(
        "fixtures/java-4.9.8-json-update-consumer-offset.hex"
    ));
    assert_java_request(&f, request::UPDATE_CONSUMER_OFFSET, SerializeType::Json);
    assert!(f.command.is_oneway(), "Java persists offsets oneway");
    let u: UpdateConsumerOffsetRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(u.topic, "TopicTest");

    let f = decode(include_str!("fixtures/java-4.9.8-json-consumer-list.hex"));
    assert_java_request(&f, request::GET_CONSUMER_LIST_BY_GROUP, SerializeType::Json);
    let g: ConsumerGroupRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(g.consumer_group, "CaptureConsumerGroup");

    let f = decode(include_str!(
        "fixtures/java-4.9.8-json-unregister-client.hex"
    ));
    assert_java_request(&f, request::UNREGISTER_CLIENT, SerializeType::Json);
    let un: UnregisterClientRequestHeader = f.command.ext_header().unwrap();
    assert!(un.client_id.ends_with("@capture-consumer"));
    assert_eq!(un.consumer_group.as_deref(), Some("CaptureConsumerGroup"));
    assert_eq!(un.producer_group, None);
}

#[test]
fn damaged_fixtures_never_panic() {
    let all = [
        include_str!("fixtures/java-4.9.8-json-send-v2.hex"),
        include_str!("fixtures/java-4.9.8-rocketmq-send-v2.hex"),
        include_str!("fixtures/java-4.9.8-json-heartbeat.hex"),
        include_str!("fixtures/java-4.9.8-rocketmq-send-batch.hex"),
    ];
    for hex in all {
        let wire = fixture(hex).to_vec();
        for i in 0..wire.len() {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut m = wire.clone();
                m[i] ^= flip;
                if let Ok(f) = decode_frame(Bytes::from(m.clone())) {
                    let _ = f.command.ext_header::<SendMessageRequestHeader>();
                    let _ = message::decode_batch(&f.body);
                    let _ = body::from_json::<HeartbeatData>(&f.body);
                }
                let mut buf = BytesMut::from(&m[..]);
                let _ = RemotingDecoder::new(1024).decode_all(&mut buf);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The C++ client 0.4.4 (PyPI `rocketmq`), driven by `tests/rocketmq-cpp/capture.py`.

fn assert_cpp_request(f: &Frame, code: i32) {
    assert_eq!(f.command.code, code);
    assert_eq!(f.command.language, LanguageCode::Cpp);
    assert_eq!(f.command.version, 63, "MQVersion V3_1_8");
    assert_eq!(f.command.serialize_type, SerializeType::Json);
    assert_eq!(f.command.remark.as_deref(), Some(""));
    // ACL fields are sent even without credentials; they must be ignored, not rejected.
    assert_eq!(f.command.ext("AccessKey"), Some(""));
    assert_eq!(f.command.ext("OnsChannel"), Some("ALIYUN"));
}

#[test]
fn cpp_headers_end_in_a_newline() {
    let wire = fixture(include_str!("fixtures/cpp-0.4.4-route.hex"));
    let header_len = u32::from_be_bytes([0, wire[5], wire[6], wire[7]]) as usize;
    assert_eq!(wire[8 + header_len - 1], b'\n');
    let f = decode(include_str!("fixtures/cpp-0.4.4-route.hex"));
    assert_cpp_request(&f, request::GET_ROUTEINFO_BY_TOPIC);
    let h: GetRouteInfoRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(h.topic, "TopicTest");
    assert!(
        !h.wants_standard_json(&f.command),
        "an old client: the Java NameServer would answer in fastjson's form"
    );
}

#[test]
fn cpp_send_with_numeric_ext_fields() {
    let wire = fixture(include_str!("fixtures/cpp-0.4.4-send.hex"));
    let raw = String::from_utf8_lossy(&wire);
    assert!(
        raw.contains(r#""queueId":0,"#),
        "the C++ client writes numbers unquoted"
    );
    let f = decode(include_str!("fixtures/cpp-0.4.4-send.hex"));
    assert_cpp_request(&f, request::SEND_MESSAGE);
    let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(h.producer_group, "CppCaptureProducerGroup");
    assert_eq!(h.default_topic_queue_nums, 4);
    assert_eq!(h.queue_id, 0);
    assert!(!h.batch, "batch \"0\"");
    assert!(!h.unit_mode, "unitMode \"0\"");
    assert_eq!(h.broker_name, None);
    let props = message::decode_properties(h.properties.as_deref().unwrap());
    assert_eq!(message::property(&props, property::TAGS), Some("TagA"));
    // C++ writes the IPv4 bytes of UNIQ_KEY little-endian: 0100007F is 127.0.0.1.
    let uniq = message::property(&props, property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).unwrap();
    assert!(uniq.starts_with("0100007F"));
    assert_eq!(&f.body[..], b"hello from cpp");
}

#[test]
fn cpp_sends_batches_as_send_message() {
    // Not SEND_BATCH_MESSAGE (320): code 10 with batch "1" and a batch body.
    let f = decode(include_str!("fixtures/cpp-0.4.4-send-batch.hex"));
    assert_cpp_request(&f, request::SEND_MESSAGE);
    let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
    assert!(h.batch);
    let msgs = message::decode_batch(&f.body).unwrap();
    let bodies: Vec<&[u8]> = msgs.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, vec![&b"cpp batch one"[..], &b"cpp batch two"[..]]);
    assert_eq!(message::encode_batch(&msgs).unwrap(), f.body.to_vec());
}

#[test]
fn cpp_heartbeat_uses_ordinals() {
    let f = decode(include_str!("fixtures/cpp-0.4.4-heartbeat.hex"));
    assert_cpp_request(&f, request::HEART_BEAT);
    assert_eq!(
        f.body.last(),
        Some(&b'\n'),
        "the body ends in a newline too"
    );
    let hb: HeartbeatData = body::from_json(&f.body).unwrap();
    assert!(hb.client_id.ends_with("@DEFAULT"));
    assert_eq!(
        hb.producer_data_set[0].group_name,
        "CppCaptureProducerGroup"
    );
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::Passively, "ordinal 1");
    assert_eq!(c.message_model, MessageModel::Clustering, "ordinal 1");
    assert_eq!(
        c.consume_from_where,
        ConsumeFromWhere::LastOffset,
        "ordinal 0"
    );
    let retry = &c.subscription_data_set[0];
    assert_eq!(retry.sub_string, "*");
    assert!(retry.tags_set.is_empty() && retry.expression_type.is_none());
    let sub = &c.subscription_data_set[1];
    assert_eq!(sub.tags_set, vec!["TagA", "TagB"]);
    assert!(sub.sub_version > 0, "subVersion sent as a string");
    // The C++ client sends zeros, not hash codes: a server must not trust codeSet.
    assert_eq!(sub.code_set, vec![0, 0]);
}

#[test]
fn cpp_pull_and_offset() {
    let f = decode(include_str!("fixtures/cpp-0.4.4-pull.hex"));
    assert_cpp_request(&f, request::PULL_MESSAGE);
    let h: PullMessageRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(
        h.sys_flag,
        message::pull_sys_flag::SUSPEND | message::pull_sys_flag::SUBSCRIPTION
    );
    assert_eq!(h.subscription.as_deref(), Some("*"));
    assert_eq!(h.expression_type, None);
    assert_eq!(h.max_msg_nums, 32);
    let f = decode(include_str!("fixtures/cpp-0.4.4-query-consumer-offset.hex"));
    assert_cpp_request(&f, request::QUERY_CONSUMER_OFFSET);
    let q: QueryConsumerOffsetRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(q.queue_id, 0);
    assert_eq!(q.topic, "%RETRY%CppCaptureConsumerGroup");
}

// ---------------------------------------------------------------------------------------------
// The Go client (apache/rocketmq-client-go v2.1.2), driven by `tests/rocketmq-go/main.go`.

fn assert_go_request(f: &Frame, code: i32) {
    assert_eq!(f.command.code, code);
    assert_eq!(f.command.language, LanguageCode::Go);
    assert_eq!(f.command.version, 317);
    assert_eq!(f.command.serialize_type, SerializeType::Json);
}

#[test]
fn go_route_and_send() {
    let f = decode(include_str!("fixtures/go-2.1.2-route.hex"));
    assert_go_request(&f, request::GET_ROUTEINFO_BY_TOPIC);
    let h: GetRouteInfoRequestHeader = f.command.ext_header().unwrap();
    assert!(!h.wants_standard_json(&f.command), "version 317 < 401");

    // Single sends use SEND_MESSAGE (10) with the long names.
    let f = decode(include_str!("fixtures/go-2.1.2-send.hex"));
    assert_go_request(&f, request::SEND_MESSAGE);
    let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(h.producer_group, "GoCaptureProducerGroup");
    assert_eq!(h.max_reconsume_times, Some(0));
    assert!(!h.batch);
    let props = message::decode_properties(h.properties.as_deref().unwrap());
    assert_eq!(message::property(&props, property::KEYS), Some("key1 key2"));
    assert_eq!(&f.body[..], b"hello from go");

    // Batches use SEND_BATCH_MESSAGE (320) with the V2 names and empty properties.
    let f = decode(include_str!("fixtures/go-2.1.2-send-batch.hex"));
    assert_go_request(&f, request::SEND_BATCH_MESSAGE);
    let h: SendMessageRequestHeader = f.command.ext_header().unwrap();
    assert!(h.batch);
    assert_eq!(h.properties.as_deref(), Some(""));
    let msgs = message::decode_batch(&f.body).unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(&msgs[1].body[..], b"go batch two");
}

#[test]
fn go_heartbeat_sends_code_set_as_strings() {
    let f = decode(include_str!("fixtures/go-2.1.2-heartbeat.hex"));
    assert_go_request(&f, request::HEART_BEAT);
    let hb: HeartbeatData = body::from_json(&f.body).unwrap();
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_from_where, ConsumeFromWhere::FirstOffset);
    let sub = &c.subscription_data_set[0];
    assert_eq!(sub.topic, "TopicTest");
    assert_eq!(sub.code_set, vec![2_598_919, 2_598_920]);
    assert!(
        sub.sub_version > 1_000_000_000_000_000_000,
        "nanoseconds, not millis"
    );
}

#[test]
fn go_pull_and_commit() {
    let f = decode(include_str!("fixtures/go-2.1.2-pull.hex"));
    assert_go_request(&f, request::PULL_MESSAGE);
    let h: PullMessageRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(h.sys_flag, message::pull_sys_flag::SUSPEND);
    assert_eq!(h.subscription.as_deref(), Some(""));
    assert_eq!(h.sub_version, 0);
    assert_eq!(h.suspend_timeout_millis, 20_000);
    let f = decode(include_str!("fixtures/go-2.1.2-update-consumer-offset.hex"));
    assert_go_request(&f, request::UPDATE_CONSUMER_OFFSET);
    assert!(!f.command.is_oneway(), "Go commits offsets with a reply");
    let u: UpdateConsumerOffsetRequestHeader = f.command.ext_header().unwrap();
    assert_eq!(u.queue_id, 3);
}
