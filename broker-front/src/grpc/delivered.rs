//! A stored record as a v2 `Message`, as RocketMQ's Proxy hands one to a v5 client: the
//! record's own properties become the system properties (tag, keys, message id, message
//! group, delivery time, ...) and the rest stay user properties.

use grpc_proto::v2;
use message::RecordView;
use remoting::message::property;

/// Properties of the broker's own that a client is not shown as user properties.
const SYSTEM_KEYS: &[&str] = &[
    property::TAGS,
    property::KEYS,
    property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    property::SHARDING_KEY,
    property::TIMER_DELIVER_MS,
    property::TRANSACTION_PREPARED,
    property::PRODUCER_GROUP,
    property::CLUSTER,
    property::MSG_REGION,
    property::TRACE_SWITCH,
    property::WAIT_STORE_MSG_OK,
    "TRACE_CONTEXT",
    broker_core::priority::PROPERTY_PRIORITY,
    broker_core::lite::PROPERTY_LITE_TOPIC,
];

/// `ms` (since the epoch) as a protobuf timestamp.
pub(super) fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// `view` as a message of `topic` (the record's own topic unless the message is delivered
/// under another, as a half message under its real topic), in queue `queue_id` (the
/// client's number of it).
pub(crate) fn message_of(view: &RecordView<'_>, topic: &str, queue_id: i32) -> v2::Message {
    let body = bytes::Bytes::copy_from_slice(view.body());
    let message_id = view
        .uniq_key()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:032X}", view.physical_offset()));
    let message_group = view.property(property::SHARDING_KEY).map(str::to_owned);
    let delivery_timestamp = view
        .property(property::TIMER_DELIVER_MS)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(timestamp);
    // A priority (RocketMQ 5.4) is stored only on a message of the PRIORITY type.
    let priority = view
        .property(broker_core::priority::PROPERTY_PRIORITY)
        .and_then(|p| p.trim().parse::<i32>().ok())
        .filter(|p| *p >= 0);
    let lite_topic = view
        .property(broker_core::lite::PROPERTY_LITE_TOPIC)
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    let message_type = if view.property(property::TRANSACTION_PREPARED) == Some("true") {
        v2::MessageType::Transaction
    } else if message_group.is_some() {
        v2::MessageType::Fifo
    } else if delivery_timestamp.is_some() {
        v2::MessageType::Delay
    } else if lite_topic.is_some() {
        v2::MessageType::Lite
    } else if priority.is_some() {
        v2::MessageType::Priority
    } else {
        v2::MessageType::Normal
    };
    let user_properties = view
        .properties()
        .iter()
        .filter(|(k, _)| !SYSTEM_KEYS.contains(k))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let compressed = view.sys_flag() & 0x1 != 0;
    v2::Message {
        topic: Some(v2::Resource {
            resource_namespace: String::new(),
            name: topic.to_owned(),
        }),
        user_properties,
        system_properties: Some(v2::SystemProperties {
            tag: view.tags().map(str::to_owned),
            keys: view.keys().map(str::to_owned).collect(),
            message_id,
            // MD5 in upper-case hex, as RocketMQ's Proxy sends it: the SDKs compare CRC32
            // checksums each in its own format (zero-padded or not), MD5 ones alike.
            body_digest: Some(v2::Digest {
                r#type: v2::DigestType::Md5 as i32,
                checksum: md5_hex(view.body()),
            }),
            body_encoding: if compressed {
                v2::Encoding::Gzip
            } else {
                v2::Encoding::Identity
            } as i32,
            message_type: message_type as i32,
            born_timestamp: Some(timestamp(view.born_timestamp_ms())),
            born_host: view.born_host().ip().to_string(),
            store_timestamp: Some(timestamp(view.store_timestamp_ms())),
            store_host: view.store_host().to_string(),
            delivery_timestamp,
            queue_id,
            queue_offset: Some(view.queue_offset() as i64),
            message_group,
            trace_context: view.property("TRACE_CONTEXT").map(str::to_owned),
            priority,
            lite_topic,
            ..Default::default()
        }),
        body,
    }
}

fn md5_hex(body: &[u8]) -> String {
    use md5::Digest as _;
    md5::Md5::digest(body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn body_digests_are_upper_case_md5_as_the_proxy_sends_them() {
        assert_eq!(super::md5_hex(b""), "D41D8CD98F00B204E9800998ECF8427E");
        assert_eq!(
            super::md5_hex(b"The quick brown fox jumps over the lazy dog"),
            "9E107D9D372BB6826BD81D3542A419D6"
        );
    }
}
