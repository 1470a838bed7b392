//! GetOffset, UpdateOffset, QueryOffset and PullMessage: a group's committed offset of a
//! queue, the queue's bounds and its messages from an offset, for clients that keep their
//! own position (the v5 SDKs' pull consumers).
//! The queue is named as the route numbers it for this core.

use std::time::Duration;

use grpc_h2::{GrpcStatus, Replies};
use grpc_proto::v2;
use message::RecordView;
use protocol::{CommitOffset, GroupQueue};

use super::{encoded, error_status, name_of, ok, status, timestamp_ms};
use crate::core::PullBody;
use crate::error::BrokerError;
use crate::front::Front;
use crate::groups::EPOCH_ANY;
use crate::mesh::{OffsetOp, PullStatus};
use crate::numbering::CoreQueues;

/// The topic and its queue id of a request's queue on this core.
fn queue_of(f: &Front, q: &Option<v2::MessageQueue>) -> Result<(String, u32), BrokerError> {
    let q = q
        .as_ref()
        .ok_or_else(|| BrokerError::BadRequest("no message queue named".into()))?;
    let topic = name_of(&q.topic).to_owned();
    let cfg = f.topic_for_read(&topic)?;
    let local = u32::try_from(q.id)
        .map_err(|_| BrokerError::BadRequest(format!("queue id {} is negative", q.id)))?;
    let global = CoreQueues::of(f, &topic, &cfg, f.id).global(&topic, local)?;
    Ok((topic, global))
}

pub(super) async fn get(f: &Front, r: &v2::GetOffsetRequest) -> v2::GetOffsetResponse {
    let answer = |status, offset| v2::GetOffsetResponse { status, offset };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e), 0),
    };
    let queue = GroupQueue {
        group: name_of(&r.group).to_owned(),
        topic,
        queue_id,
    };
    match f.group_offset(OffsetOp::Query(queue)).await {
        Ok(Some(stored)) => answer(ok(), stored.offset as i64),
        Ok(None) => answer(
            status(
                v2::Code::OffsetNotFound,
                "the group has no offset of this queue",
            ),
            0,
        ),
        Err(e) => answer(error_status(&e), 0),
    }
}

pub(super) async fn update(
    f: &Front,
    client: &str,
    r: &v2::UpdateOffsetRequest,
) -> v2::UpdateOffsetResponse {
    let answer = |status| v2::UpdateOffsetResponse { status };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e)),
    };
    let Ok(offset) = u64::try_from(r.offset) else {
        return answer(status(
            v2::Code::IllegalOffset,
            format!("offset {} is negative", r.offset),
        ));
    };
    let op = OffsetOp::Commit(CommitOffset {
        queue: GroupQueue {
            group: name_of(&r.group).to_owned(),
            topic,
            queue_id,
        },
        offset,
        // The v5 clients know no epochs: their commit is never taken as stale.
        epoch: EPOCH_ANY,
        client_id: client.to_owned(),
        release: false,
    });
    match f.group_offset(op).await {
        Ok(_) => answer(ok()),
        Err(e) => answer(error_status(&e)),
    }
}

pub(super) async fn query(f: &Front, r: &v2::QueryOffsetRequest) -> v2::QueryOffsetResponse {
    let answer = |status, offset| v2::QueryOffsetResponse { status, offset };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e), 0),
    };
    let found = match v2::QueryOffsetPolicy::try_from(r.query_offset_policy) {
        Ok(v2::QueryOffsetPolicy::Beginning) => {
            f.queue_offsets(&topic, queue_id).await.map(|(min, _)| min)
        }
        Ok(v2::QueryOffsetPolicy::End) => {
            f.queue_offsets(&topic, queue_id).await.map(|(_, max)| max)
        }
        Ok(v2::QueryOffsetPolicy::Timestamp) => match &r.timestamp {
            Some(t) => f.search_offset(&topic, queue_id, timestamp_ms(t)).await,
            None => Err(BrokerError::BadRequest(
                "a TIMESTAMP query without a timestamp".into(),
            )),
        },
        Err(_) => Err(BrokerError::BadRequest(format!(
            "query offset policy {} is none of BEGINNING, END, TIMESTAMP",
            r.query_offset_policy
        ))),
    };
    match found {
        Ok(offset) => answer(ok(), offset as i64),
        Err(e) => answer(error_status(&e), 0),
    }
}

/// Messages per PullMessage at most, and its longest long poll.
const PULL_BATCH_MAX: u32 = 1024;
const PULL_POLL_MAX: Duration = Duration::from_secs(20);
/// What a long poll leaves of the call's deadline for the answer to arrive.
const PULL_POLL_RESERVE: Duration = Duration::from_secs(1);
/// Bytes of messages per PullMessage at most (RocketMQ's pull default).
const PULL_BYTES_MAX: u32 = 4 << 20;

/// PullMessage: messages of one queue from an offset the client keeps, as a RocketMQ pull
/// consumer reads them. The stream is the status, the messages, and the offset to pull
/// next: MESSAGE_NOT_FOUND (with that offset) when none came within the long poll,
/// ILLEGAL_OFFSET when the offset is outside the queue.
pub(super) async fn pull(
    f: &Front,
    r: v2::PullMessageRequest,
    timeout: Option<Duration>,
    replies: &mut Replies,
) -> Result<(), GrpcStatus> {
    let element = |content| v2::PullMessageResponse {
        content: Some(content),
    };
    let (head, messages, next) = match pulled(f, &r, timeout).await {
        Ok((messages, next, found)) => {
            let head = if found {
                ok()
            } else {
                status(v2::Code::MessageNotFound, "no new message")
            };
            (head, messages, Some(next))
        }
        Err(status) => (status, Vec::new(), None),
    };
    let head = element(v2::pull_message_response::Content::Status(
        head.unwrap_or_default(),
    ));
    replies.send(encoded(&head)).await?;
    for m in messages {
        let reply = element(v2::pull_message_response::Content::Message(m));
        replies.send(encoded(&reply)).await?;
    }
    if let Some(next) = next {
        let reply = element(v2::pull_message_response::Content::NextOffset(next as i64));
        replies.send(encoded(&reply)).await?;
    }
    Ok(())
}

/// The messages of the pull, the offset to pull next, and whether any was found.
async fn pulled(
    f: &Front,
    r: &v2::PullMessageRequest,
    timeout: Option<Duration>,
) -> Result<(Vec<v2::Message>, u64, bool), Option<v2::Status>> {
    let group = name_of(&r.group);
    if group.is_empty() {
        return Err(status(v2::Code::IllegalConsumerGroup, "the group is empty"));
    }
    let (topic, queue_id) = queue_of(f, &r.message_queue).map_err(|e| error_status(&e))?;
    let Ok(offset) = u64::try_from(r.offset) else {
        return Err(status(
            v2::Code::IllegalOffset,
            format!("offset {} is negative", r.offset),
        ));
    };
    let poll = r
        .long_polling_timeout
        .as_ref()
        .and_then(|d| {
            let ms = d
                .seconds
                .checked_mul(1000)?
                .checked_add(i64::from(d.nanos / 1_000_000))?;
            u64::try_from(ms).ok()
        })
        .map_or(Duration::ZERO, Duration::from_millis)
        .min(PULL_POLL_MAX)
        .min(timeout.map_or(PULL_POLL_MAX, |t| t.saturating_sub(PULL_POLL_RESERVE)));
    let (tag_expression, sql92) = match r.filter_expression.as_ref() {
        Some(e) if e.r#type == v2::FilterType::Sql as i32 => {
            ("*".to_owned(), Some(e.expression.clone()))
        }
        Some(e) if !e.expression.trim().is_empty() => (e.expression.clone(), None),
        _ => ("*".to_owned(), None),
    };
    let request = protocol::PullRequest {
        consumer_group: group.to_owned(),
        topic: topic.clone(),
        queue_id,
        queue_offset: offset,
        max_messages: u32::try_from(r.batch_size)
            .unwrap_or(1)
            .clamp(1, PULL_BATCH_MAX),
        max_bytes: PULL_BYTES_MAX,
        tag_expression,
        suspend_timeout_ms: poll.as_millis() as u64,
    };
    let outcome = match f.pull_filtered(request, sql92).await {
        Ok(o) => o,
        Err(e @ (BrokerError::FilterInvalid(_) | BrokerError::FilterDisabled)) => {
            return Err(status(v2::Code::IllegalFilterExpression, e.to_string()))
        }
        Err(e) => return Err(error_status(&e)),
    };
    let next = outcome.next_offset.0;
    match outcome.status {
        PullStatus::OffsetMoved => {
            return Err(status(
                v2::Code::IllegalOffset,
                format!(
                    "offset {offset} is outside the queue ({} to {}); pull from {next}",
                    outcome.min_offset.0, outcome.max_offset.0
                ),
            ))
        }
        PullStatus::NoNewMessage => return Ok((Vec::new(), next, false)),
        PullStatus::Found => {}
    }
    let local = f
        .topic_for_read(&topic)
        .ok()
        .and_then(|cfg| CoreQueues::of(f, &topic, &cfg, f.id).local(queue_id))
        .unwrap_or(queue_id);
    let records: Vec<bytes::Bytes> = match outcome.body {
        PullBody::Local(v) => v
            .iter()
            .map(|s| bytes::Bytes::copy_from_slice(s.as_bytes()))
            .collect(),
        PullBody::Owned(v) => v,
    };
    let mut messages = Vec::with_capacity(records.len());
    for record in &records {
        match RecordView::parse(record) {
            Ok(view) => messages.push(super::delivered::message_of(&view, &topic, local as i32)),
            Err(e) => tracing::warn!(%topic, queue_id, "a pulled record does not parse: {e}"),
        }
    }
    let found = !messages.is_empty();
    Ok((messages, next, found))
}
