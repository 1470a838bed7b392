//! The generated types against facts of the protos: field numbers on the wire and the
//! numbers of `apache.rocketmq.v2.Code`.

#![allow(clippy::unwrap_used)]

use grpc_proto::v2::{self, Code, MessageType, SystemProperties};
use prost::Message as _;

#[test]
fn generated_fields_use_the_protos_field_numbers() {
    // Hand-encoded protobuf: SystemProperties { tag (1) = "T", message_id (3) = "id",
    // message_type (6) = FIFO (2), delivery_attempt (16) = 3 }.
    let bytes = [
        0x0a, 0x01, b'T', 0x1a, 0x02, b'i', b'd', 0x30, 0x02, 0x80, 0x01, 0x03,
    ];
    let props = SystemProperties::decode(&bytes[..]).unwrap();
    assert_eq!(props.tag.as_deref(), Some("T"));
    assert_eq!(props.message_id, "id");
    assert_eq!(props.message_type(), MessageType::Fifo);
    assert_eq!(props.delivery_attempt, Some(3));
    assert_eq!(props.encode_to_vec(), bytes);
}

#[test]
fn rocketmq_codes_have_the_protos_numbers() {
    assert_eq!(Code::Ok as i32, 20000);
    assert_eq!(Code::MultipleResults as i32, 30000);
    assert_eq!(Code::InvalidReceiptHandle as i32, 40013);
    assert_eq!(Code::MessageNotFound as i32, 40401);
    assert_eq!(Code::TooManyRequests as i32, 42900);
    assert_eq!(Code::InternalServerError as i32, 50001);
    assert_eq!(
        Code::from_str_name("ILLEGAL_POLLING_TIME"),
        Some(Code::IllegalPollingTime)
    );
    assert_eq!(Code::try_from(40402), Ok(Code::TopicNotFound));
    let status = v2::Status {
        code: Code::MessageNotFound as i32,
        message: "no new message".into(),
    };
    assert_eq!(status.code(), Code::MessageNotFound);
}
