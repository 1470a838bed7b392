//! SendMessage and EndTransaction: a v5 client's messages stored as records.
//!
//! A v2 `Message` becomes the record a RocketMQ producer's send would store, with the
//! properties RocketMQ's Proxy sets: the client's message id as `UNIQ_KEY`, the tag and keys,
//! a message group as `__SHARDINGKEY`, a delivery time as `TIMER_DELIVER_MS` (held by the
//! timer), a transactional message prepared (`TRAN_MSG`, the prepared sys flag) with its
//! topic as producer group (`PGROUP`: the check of an undecided one goes to a producer of the
//! topic), a priority as `_SYS_MSG_PRIORITY_`. Each message goes to one of this core's
//! queues (see `send_one`): a priority message to the queue of its priority.

use std::net::SocketAddrV4;

use bytes::Bytes;
use grpc_proto::v2;
use message::{encode_record, MessageFields};
use remoting::message::property;

use broker_core::priority::{priority_queue, PROPERTY_PRIORITY};

use super::route::check_type;
use super::{code_of, error_status, name_of, ok, status, timestamp_ms};
use crate::error::BrokerError;
use crate::front::Front;
use crate::numbering::CoreQueues;

/// The most properties a message may carry, and their total bytes (keys, values, tag and
/// keys), as RocketMQ's Proxy checks them.
const USER_PROPERTIES_MAX: usize = 128;
const PROPERTY_BYTES_MAX: usize = 16 * 1024;
/// A message group's longest name.
const MESSAGE_GROUP_BYTES_MAX: usize = 64;
/// How long a transactional message's producer may take before the first check, at most
/// (RocketMQ's Proxy caps `orphaned_transaction_recovery_duration` the same).
const CHECK_IMMUNITY_SECS_MAX: i64 = 3600;
/// RocketMQ's `CHECK_IMMUNITY_TIME_IN_SECONDS`.
const CHECK_IMMUNITY_TIME: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
/// RocketMQ's gzip body flag (`MessageSysFlag.COMPRESSED_FLAG`).
const COMPRESSED: i32 = 0x1;

pub(super) async fn send_message(
    f: &Front,
    born_host: Option<SocketAddrV4>,
    r: v2::SendMessageRequest,
) -> v2::SendMessageResponse {
    let refused = |status| v2::SendMessageResponse {
        status,
        entries: Vec::new(),
    };
    let Some(first) = r.messages.first() else {
        return refused(status(v2::Code::MessageCorrupted, "no message to send"));
    };
    let topic = name_of(&first.topic).to_owned();
    if r.messages.iter().any(|m| name_of(&m.topic) != topic) {
        return refused(status(
            v2::Code::MessageCorrupted,
            "the messages of one send are for more than one topic",
        ));
    }
    let mut entries = Vec::with_capacity(r.messages.len());
    for m in &r.messages {
        entries.push(match send_one(f, born_host, &topic, m).await {
            Ok(entry) => entry,
            Err((code, why)) => v2::SendResultEntry {
                status: status(code, why),
                message_id: message_id(m).to_owned(),
                ..Default::default()
            },
        });
    }
    // One code when every entry has it, else MULTIPLE_RESULTS, as RocketMQ's Proxy answers.
    let codes: Vec<i32> = entries
        .iter()
        .map(|e| e.status.as_ref().map_or(0, |s| s.code))
        .collect();
    let status = if codes.windows(2).all(|w| w[0] == w[1]) {
        entries[0].status.clone()
    } else {
        status(
            v2::Code::MultipleResults,
            "the messages had different results",
        )
    };
    v2::SendMessageResponse { status, entries }
}

fn message_id(m: &v2::Message) -> &str {
    m.system_properties
        .as_ref()
        .map_or("", |s| s.message_id.as_str())
}

type Refusal = (v2::Code, String);

fn refusal(e: &BrokerError) -> Refusal {
    (code_of(e), e.to_string())
}

async fn send_one(
    f: &Front,
    born_host: Option<SocketAddrV4>,
    topic: &str,
    m: &v2::Message,
) -> Result<v2::SendResultEntry, Refusal> {
    let Some(sys) = m.system_properties.as_ref() else {
        return Err((
            v2::Code::MessageCorrupted,
            "a message without system properties".into(),
        ));
    };
    let kind = checked(f, m, sys)?;
    let cfg = f.topic_for_send(topic).await.map_err(|e| refusal(&e))?;
    // As RocketMQ's Proxy with its default `enableTopicMessageTypeCheck`; the clients check
    // it too, against the route's accepted types.
    check_type(f, topic, kind)
        .map_err(|e| (v2::Code::MessagePropertyConflictWithType, e.to_string()))?;
    // As RocketMQ's Proxy, the queue the client named is not taken (the Python SDK names
    // none): a message group's messages go to one queue of this core's, by the group's
    // hash; the others to the core's writable queues in turn. A client reaches this core by
    // the route's endpoint of the queue it chose, so the send stays on the core.
    let queues = CoreQueues::of(f, topic, &cfg, f.id);
    let turn = match &sys.message_group {
        Some(group) => crc32fast::hash(group.as_bytes()),
        None => f.queue_numbers.next_turn(),
    };
    // A priority (RocketMQ 5.4) counts on a message of no type ranked before PRIORITY, as
    // RocketMQ's broker reads it from the properties the Proxy sets: it picks the core's
    // queue of its priority; on any other message it is not stored.
    let priority = sys
        .priority
        .and_then(|p| u32::try_from(p).ok())
        .filter(|_| {
            kind != v2::MessageType::Transaction
                && sys.delivery_timestamp.is_none()
                && sys.message_group.is_none()
        });
    let global = priority
        .and_then(|p| priority_queue(&queues.ids, cfg.write_queues, p))
        .unwrap_or_else(|| crate::rocketmq::core_queue(&queues, cfg.write_queues, turn));
    let record = Bytes::from(record_of(f, topic, born_host, m, sys, kind, priority)?);
    // A lite message goes to the queue of its parent that holds its lite topic, on
    // whichever core that is (`broker_core::lite`).
    let sent = match (kind, &sys.lite_topic) {
        (v2::MessageType::Lite, Some(lite)) => match f.lite_send(topic, lite, record.clone()).await
        {
            Err(BrokerError::BadRequest(why)) => return Err((v2::Code::IllegalLiteTopic, why)),
            other => other,
        },
        (v2::MessageType::Lite, None) => {
            return Err((
                v2::Code::IllegalLiteTopic,
                "a LITE message names no lite topic".into(),
            ))
        }
        _ => f.send(topic, global, record.clone(), 1).await,
    };
    let appended = match sent {
        Ok(out) => out.appended,
        Err(BrokerError::MessageIllegal(why)) if sys.delivery_timestamp.is_some() => {
            return Err((v2::Code::IllegalDeliveryTime, why))
        }
        Err(e) => return Err(refusal(&e)),
    };
    if let Some(p) = priority {
        f.priority.count_sent(p);
    }
    let transaction_id = if kind == v2::MessageType::Transaction {
        transaction_id(&appended)
    } else {
        String::new()
    };
    Ok(v2::SendResultEntry {
        status: ok(),
        message_id: sys.message_id.clone(),
        transaction_id,
        offset: appended.first_queue_offset.0 as i64,
        // A delay message can be recalled (RocketMQ 5.3.2): its handle.
        recall_handle: if kind == v2::MessageType::Delay {
            f.recall_handle(&record, &appended).unwrap_or_default()
        } else {
            String::new()
        },
    })
}

/// RecallMessage: the delay message the handle names is not delivered; answered with its
/// message id. The handle names the core holding it (its broker in the route), reached
/// over the mesh when the call came to another core.
pub(super) async fn recall(f: &Front, r: &v2::RecallMessageRequest) -> v2::RecallMessageResponse {
    match f.recall(name_of(&r.topic), &r.recall_handle).await {
        Ok(message_id) => v2::RecallMessageResponse {
            status: ok(),
            message_id,
        },
        Err(e) => v2::RecallMessageResponse {
            status: error_status(&e),
            message_id: String::new(),
        },
    }
}

/// The message's type, once what RocketMQ's Proxy checks of it holds.
fn checked(
    f: &Front,
    m: &v2::Message,
    sys: &v2::SystemProperties,
) -> Result<v2::MessageType, Refusal> {
    if sys.message_id.is_empty() {
        return Err((v2::Code::IllegalMessageId, "the message id is empty".into()));
    }
    if m.body.is_empty() {
        return Err((
            v2::Code::MessageBodyEmpty,
            "the message body is empty".into(),
        ));
    }
    let max = f.config().message_bytes_max;
    if m.body.len() as u64 > max {
        return Err((
            v2::Code::MessageBodyTooLarge,
            format!("a body of {} bytes is over the {max} allowed", m.body.len()),
        ));
    }
    if m.user_properties.len() > USER_PROPERTIES_MAX {
        return Err((
            v2::Code::MessagePropertiesTooLarge,
            format!(
                "{} user properties, at most {USER_PROPERTIES_MAX} are allowed",
                m.user_properties.len()
            ),
        ));
    }
    let mut bytes =
        sys.tag.as_ref().map_or(0, String::len) + sys.keys.iter().map(String::len).sum::<usize>();
    for (k, v) in &m.user_properties {
        if k.is_empty() || reserved(k) || k.chars().chain(v.chars()).any(char::is_control) {
            return Err((
                v2::Code::IllegalMessagePropertyKey,
                format!("property key {k:?} is reserved or has control characters"),
            ));
        }
        bytes += k.len() + v.len();
    }
    if bytes > PROPERTY_BYTES_MAX {
        return Err((
            v2::Code::MessagePropertiesTooLarge,
            format!("properties of {bytes} bytes, at most {PROPERTY_BYTES_MAX} are allowed"),
        ));
    }
    if let Some(group) = &sys.message_group {
        if group.trim().is_empty()
            || group.len() >= MESSAGE_GROUP_BYTES_MAX
            || group.chars().any(char::is_control)
        {
            return Err((
                v2::Code::IllegalMessageGroup,
                format!(
                    "message group {group:?} is blank, {MESSAGE_GROUP_BYTES_MAX} bytes or longer, or has control characters"
                ),
            ));
        }
    }
    let kind = v2::MessageType::try_from(sys.message_type).unwrap_or(v2::MessageType::Unspecified);
    Ok(match kind {
        v2::MessageType::Unspecified => {
            if sys.message_group.is_some() {
                v2::MessageType::Fifo
            } else if sys.delivery_timestamp.is_some() {
                v2::MessageType::Delay
            } else if sys.lite_topic.is_some() {
                v2::MessageType::Lite
            } else if sys.priority.is_some_and(|p| p >= 0) {
                v2::MessageType::Priority
            } else {
                v2::MessageType::Normal
            }
        }
        kind => kind,
    })
}

/// A property name the broker or RocketMQ's clients set themselves.
fn reserved(key: &str) -> bool {
    const RESERVED: &[&str] = &[
        property::KEYS,
        property::TAGS,
        property::WAIT_STORE_MSG_OK,
        property::DELAY_TIME_LEVEL,
        property::RETRY_TOPIC,
        property::REAL_TOPIC,
        property::REAL_QUEUE_ID,
        property::TRANSACTION_PREPARED,
        property::PRODUCER_GROUP,
        property::MIN_OFFSET,
        property::MAX_OFFSET,
        property::ORIGIN_MESSAGE_ID,
        property::RECONSUME_TIME,
        property::MSG_REGION,
        property::TRACE_SWITCH,
        property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        property::MAX_RECONSUME_TIMES,
        property::CONSUME_START_TIMESTAMP,
        property::TRANSACTION_ID,
        property::TRANSACTION_CHECK_TIMES,
        property::CLUSTER,
        property::SHARDING_KEY,
        property::TIMER_DELAY_SEC,
        property::TIMER_DELIVER_MS,
        property::BORN_HOST,
        message::timer::TIMER_FROM,
        message::timer::TIMER_DELAY_MS,
        CHECK_IMMUNITY_TIME,
        TRACE_CONTEXT,
        PROPERTY_PRIORITY,
        broker_core::lite::PROPERTY_LITE_TOPIC,
    ];
    RESERVED.contains(&key)
}

/// The record a message is stored as.
fn record_of(
    f: &Front,
    topic: &str,
    born_host: Option<SocketAddrV4>,
    m: &v2::Message,
    sys: &v2::SystemProperties,
    kind: v2::MessageType,
    priority: Option<u32>,
) -> Result<Vec<u8>, Refusal> {
    let keys = sys.keys.join(property::KEY_SEPARATOR);
    let deliver_at = sys
        .delivery_timestamp
        .as_ref()
        .map(|t| timestamp_ms(t).to_string());
    let immunity = sys
        .orphaned_transaction_recovery_duration
        .as_ref()
        .map(|d| d.seconds.clamp(0, CHECK_IMMUNITY_SECS_MAX).to_string());
    let transactional = kind == v2::MessageType::Transaction;
    let mut props: Vec<(&str, &str)> = Vec::with_capacity(12 + m.user_properties.len());
    if let Some(tag) = sys.tag.as_deref().filter(|t| !t.is_empty()) {
        props.push((property::TAGS, tag));
    }
    if !keys.is_empty() {
        props.push((property::KEYS, &keys));
    }
    props.push((property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, &sys.message_id));
    if let Some(group) = &sys.message_group {
        props.push((property::SHARDING_KEY, group));
    }
    if let Some(at) = &deliver_at {
        props.push((property::TIMER_DELIVER_MS, at));
    }
    let priority = priority.map(|p| p.to_string());
    if let Some(p) = &priority {
        props.push((PROPERTY_PRIORITY, p));
    }
    if kind == v2::MessageType::Lite {
        if let Some(lite) = &sys.lite_topic {
            props.push((broker_core::lite::PROPERTY_LITE_TOPIC, lite));
        }
    }
    if transactional {
        props.push((property::TRANSACTION_PREPARED, "true"));
        props.push((property::PRODUCER_GROUP, topic));
        if let Some(secs) = &immunity {
            props.push((CHECK_IMMUNITY_TIME, secs));
        }
    }
    if let Some(trace) = sys.trace_context.as_deref().filter(|t| !t.is_empty()) {
        props.push((TRACE_CONTEXT, trace));
    }
    props.extend(
        m.user_properties
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    props.push((property::CLUSTER, &f.shared.config.cluster_name));
    props.push((property::MSG_REGION, crate::rocketmq::REGION_ID));
    props.push((property::TRACE_SWITCH, "true"));
    let mut sys_flag = 0;
    if transactional {
        sys_flag |= crate::transaction::sys_flag::PREPARED;
    }
    if sys.body_encoding == v2::Encoding::Gzip as i32 {
        sys_flag |= COMPRESSED;
    }
    let born_ms = sys
        .born_timestamp
        .as_ref()
        .map_or_else(|| f.shared.clock.wall_ms(), timestamp_ms);
    let mut record = Vec::with_capacity(m.body.len() + 256);
    encode_record(
        &MessageFields {
            topic,
            body: &m.body,
            flag: 0,
            sys_flag,
            born_timestamp_ms: born_ms,
            born_host,
            reconsume_times: 0,
            properties: &props,
        },
        &mut record,
    )
    .map_err(|e| (v2::Code::BadRequest, e.to_string()))?;
    Ok(record)
}

/// A transactional message's id for EndTransaction: where its half message is, the shard
/// and commit-log offset and its half-queue offset, 32 hex digits.
fn transaction_id(a: &crate::error::Appended) -> String {
    transaction_id_of(a.shard, a.first_commit_log_offset.0, a.first_queue_offset.0)
}

fn transaction_id_of(shard: u16, commit_log_offset: u64, queue_offset: u64) -> String {
    let wide = commit_log_offset | (u64::from(shard) << message::ids::LOCAL_OFFSET_BITS);
    format!("{wide:016X}{queue_offset:016X}")
}

/// The command that asks a v5 producer about an undecided half message: the message as it
/// will be delivered (its real topic and queue) and its transaction id.
pub(crate) fn recover_command(
    f: &Front,
    check: &protocol::CheckTransaction,
) -> Option<v2::TelemetryCommand> {
    let view = message::RecordView::parse(&check.record).ok()?;
    let topic = view.property(property::REAL_TOPIC)?;
    let global = view
        .property(property::REAL_QUEUE_ID)
        .and_then(|q| q.trim().parse().ok())
        .unwrap_or(0);
    let queue_id = crate::numbering::client_queue_id(f, topic, global) as i32;
    let command = v2::RecoverOrphanedTransactionCommand {
        message: Some(super::delivered::message_of(&view, topic, queue_id)),
        transaction_id: transaction_id_of(check.shard, check.commit_log_offset, check.queue_offset),
    };
    Some(v2::TelemetryCommand {
        status: ok(),
        command: Some(v2::telemetry_command::Command::RecoverOrphanedTransactionCommand(command)),
    })
}

/// The half message a transaction id names: shard, commit-log offset, half-queue offset.
fn parse_transaction_id(id: &str) -> Option<(u16, u64, u64)> {
    if id.len() != 32 || !id.is_ascii() {
        return None;
    }
    let wide = u64::from_str_radix(&id[..16], 16).ok()?;
    let queue_offset = u64::from_str_radix(&id[16..], 16).ok()?;
    let shard = u16::try_from(wide >> message::ids::LOCAL_OFFSET_BITS).ok()?;
    Some((shard, wide & message::ids::LOCAL_OFFSET_MAX, queue_offset))
}

pub(super) async fn end_transaction(
    f: &Front,
    r: &v2::EndTransactionRequest,
) -> v2::EndTransactionResponse {
    let answer = |status| v2::EndTransactionResponse { status };
    let Some((shard, commit_log_offset, queue_offset)) = parse_transaction_id(&r.transaction_id)
    else {
        return answer(status(
            v2::Code::InvalidTransactionId,
            format!(
                "{:?} is not a transaction id this broker gave",
                r.transaction_id
            ),
        ));
    };
    let state = match v2::TransactionResolution::try_from(r.resolution) {
        Ok(v2::TransactionResolution::Commit) => protocol::TransactionState::Commit,
        Ok(v2::TransactionResolution::Rollback) => protocol::TransactionState::Rollback,
        _ => {
            return answer(status(
                v2::Code::BadRequest,
                format!("resolution {} is neither COMMIT nor ROLLBACK", r.resolution),
            ))
        }
    };
    let end = protocol::EndTransaction {
        producer_group: name_of(&r.topic).to_owned(),
        shard,
        commit_log_offset,
        queue_offset,
        msg_id: r.message_id.clone(),
        state,
        from_check: r.source == v2::TransactionSource::SourceServerCheck as i32,
    };
    match f.end_transaction(end).await {
        Ok(()) => answer(ok()),
        Err(e) => answer(error_status(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_names_its_half_message() {
        let a = crate::error::Appended {
            shard: 3,
            first_queue_offset: message::offsets::QueueOffset(77),
            first_commit_log_offset: message::offsets::CommitLogOffset(123_456),
            count: 1,
            store_timestamp_ms: 0,
        };
        let id = transaction_id(&a);
        assert_eq!(parse_transaction_id(&id), Some((3, 123_456, 77)));
        for bad in ["", "xyz", &id[1..], &format!("{id}0"), &"G".repeat(32)] {
            assert_eq!(parse_transaction_id(bad), None, "{bad}");
        }
    }
}
