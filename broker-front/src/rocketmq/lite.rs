//! Lite Topics (RocketMQ 5.5) over remoting: POP_LITE_MESSAGE 200070, LITE_SUBSCRIPTION_CTL
//! 200071 and ACK_LITE_MESSAGE 200072, served by the kernel's lite topics
//! (`broker_core::lite`, ARCHITECTURE.md "Lite Topics"). A message is sent to a lite topic
//! with SEND_MESSAGE and the property `__LITE_TOPIC` (`super::send`).
//!
//! A lite pop answers as POP_MESSAGE answers (SUCCESS with PULL's body, or POLLING_TIMEOUT),
//! with the response header's popTime, invisibleTime and reviveQid (998, a lite handle's),
//! and startOffsetInfo / msgOffsetInfo per queue. The records keep the topic's queue ids:
//! a lite topic is reached by its name, not its queue. Each message's receipt handle is
//! `queueOffset popTime invisibleTime 998 0 brokerName queueId queueOffset
//! commitLogOffset` (the record's own queue id, queue offset and physical offset), which
//! ACK_LITE_MESSAGE (or ACK_MESSAGE) takes back as `extraInfo`.

use std::rc::Rc;

use broker_core::lite::{LitePop, LiteSubscription, StartAt, SubAction};
use remoting::codes::response;
use remoting::RemotingCommand;
use serde::Deserialize;

use super::admin::stored_retry_max;
use super::pop::{field, handle_refusal, number, number_or, RETRY_MAX_TIMES_DEFAULT};
use super::{ok, Restamp};
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;

/// POP_LITE_MESSAGE: what the lite topics `clientId` subscribed on this core hold for its
/// group.
pub(super) async fn pop(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let client = field(req, "clientId")?.to_owned();
    let group = field(req, "consumerGroup")?.to_owned();
    let topic = field(req, "topic")?.to_owned();
    let topic_name = topic.clone();
    let max_messages: i32 = number(req, "maxMsgNum")?;
    let invisible_ms: i64 = number(req, "invisibleTime")?;
    let poll_ms: i64 = number_or(req, "pollTime", 0)?;
    let retry_max = stored_retry_max(core, &group)
        .await
        .unwrap_or(RETRY_MAX_TIMES_DEFAULT);
    let popped = core
        .lite_pop(LitePop {
            group,
            topic,
            client,
            max_messages: u32::try_from(max_messages).map_err(|_| {
                BrokerError::BadRequest(format!("maxMsgNum {max_messages} is negative"))
            })?,
            invisible_ms: u64::try_from(invisible_ms).unwrap_or(0),
            poll_ms: u64::try_from(poll_ms).unwrap_or(0),
            max_attempts: u32::try_from(retry_max).map_or(0, |r| r.saturating_add(1)),
        })
        .await?;
    let mut resp = if popped.messages.is_empty() {
        RemotingCommand::response_to(
            req,
            response::POLLING_TIMEOUT,
            Some("no lite message in the poll time".into()),
        )
    } else {
        ok(req)
    };
    // Per queue, the offsets handed out (RocketMQ's startOffsetInfo and msgOffsetInfo forms).
    let mut by_queue: Vec<(u32, Vec<u64>)> = Vec::new();
    for m in &popped.messages {
        match by_queue.iter_mut().find(|(q, _)| *q == m.queue_id) {
            Some((_, offsets)) => offsets.push(m.queue_offset),
            None => by_queue.push((m.queue_id, vec![m.queue_offset])),
        }
    }
    let start = by_queue
        .iter()
        .map(|(q, o)| format!("0 {q} {}", o.first().copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(";");
    let offsets = by_queue
        .iter()
        .map(|(q, o)| {
            let list = o.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            format!("0 {q} {list}")
        })
        .collect::<Vec<_>>()
        .join(";");
    let f = &mut resp.ext_fields;
    f.insert("popTime".into(), popped.pop_time_ms.to_string());
    f.insert("invisibleTime".into(), popped.invisible_ms.to_string());
    f.insert("reviveQid".into(), popped.revive_qid.to_string());
    f.insert("startOffsetInfo".into(), start);
    f.insert("msgOffsetInfo".into(), offsets);
    // The physical offset as message ids and handles carry it: tagged with the shard.
    let body = popped
        .messages
        .into_iter()
        .map(|m| {
            let mut rec = bytes::BytesMut::from(&m.record[..]);
            Restamp {
                queue_id: m.queue_id,
                shard: protocol::queue_owner_shard(
                    &topic_name,
                    m.queue_id,
                    core.shared.shard_count,
                ),
            }
            .apply(&mut rec);
            rec.freeze()
        })
        .collect();
    Ok(Outgoing::remoting(resp, Body::Owned(body)))
}

/// ACK_LITE_MESSAGE (and ACK_MESSAGE with a lite handle): the lite message of `extraInfo` is
/// done; NO_MESSAGE for a handle that is not its current delivery.
pub(super) async fn ack(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = field(req, "consumerGroup")?;
    let topic = field(req, "topic")?;
    let handle = field(req, "extraInfo")?;
    match core
        .lite_ack(group, topic, handle, req.ext("liteTopic"))
        .await
    {
        Ok(()) => Ok(Outgoing::remoting(ok(req), Body::None)),
        Err(e) => Ok(Outgoing::remoting(handle_refusal(req, &e), Body::None)),
    }
}

/// CHANGE_MESSAGE_INVISIBLETIME with a lite handle as `extraInfo`: the message is hidden for
/// `invisibleTime` from now (with `suspend`, its next delivery does not count as an attempt);
/// the answer's popTime, invisibleTime and reviveQid are those of its new handle.
pub(super) async fn change_invisible(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<(i64, u64, u32), BrokerError> {
    let group = field(req, "consumerGroup")?;
    let topic = field(req, "topic")?;
    let handle = field(req, "extraInfo")?;
    let invisible_ms: i64 = number(req, "invisibleTime")?;
    let invisible_ms = u64::try_from(invisible_ms).map_err(|_| {
        BrokerError::BadRequest(format!("invisibleTime {invisible_ms} is negative"))
    })?;
    let suspend = req.ext("suspend").is_some_and(|s| s == "true");
    let new = core
        .lite_change_invisible(
            group,
            topic,
            handle,
            req.ext("liteTopic"),
            invisible_ms,
            suspend,
        )
        .await?;
    let new = broker_core::pop::ReceiptHandle::parse(&new)?;
    Ok((new.pop_time_ms, new.invisible_ms, new.revive_qid))
}

/// One entry of LITE_SUBSCRIPTION_CTL's body (RocketMQ's `LiteSubscriptionDTO`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dto {
    action: Option<String>,
    client_id: Option<String>,
    group: Option<String>,
    topic: Option<String>,
    #[serde(default)]
    lite_topic_set: Vec<String>,
    offset_option: Option<OffsetOption>,
}

/// RocketMQ's `OffsetOption`: `type` POLICY (`value` 0 LAST, 1 MIN, 2 MAX), OFFSET, TAIL_N
/// or TIMESTAMP.
#[derive(Debug, Deserialize)]
struct OffsetOption {
    #[serde(rename = "type")]
    kind: Option<String>,
    value: Option<serde_json::Value>,
}

impl OffsetOption {
    fn start(&self) -> StartAt {
        let value = self.value.as_ref().and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        });
        match (self.kind.as_deref(), value) {
            (Some("POLICY"), Some(2)) => StartAt::Latest,
            (Some("POLICY"), Some(1)) => StartAt::Earliest,
            (Some("TAIL_N"), Some(n)) => StartAt::Tail(u64::try_from(n).unwrap_or(0)),
            _ => StartAt::Oldest,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CtlBody {
    #[serde(default)]
    subscription_set: Vec<Dto>,
}

/// LITE_SUBSCRIPTION_CTL: changes of clients' lite subscriptions. Entries without a client,
/// group or topic are skipped, as RocketMQ skips them; an empty body is ILLEGAL_OPERATION.
pub(super) async fn subscription_ctl(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let illegal = |why: &str| {
        Outgoing::remoting(
            RemotingCommand::response_to(req, response::ILLEGAL_OPERATION, Some(why.into())),
            Body::None,
        )
    };
    if body.is_empty() {
        return Ok(illegal("the lite subscription body is missing"));
    }
    let parsed: CtlBody = serde_json::from_slice(body)
        .map_err(|e| BrokerError::BadRequest(format!("lite subscription body: {e}")))?;
    if parsed.subscription_set.is_empty() {
        return Ok(illegal("the lite subscription set is empty"));
    }
    for dto in parsed.subscription_set {
        let (Some(client), Some(group), Some(topic)) = (
            dto.client_id.filter(|c| !c.trim().is_empty()),
            dto.group.filter(|g| !g.trim().is_empty()),
            dto.topic.filter(|t| !t.trim().is_empty()),
        ) else {
            continue;
        };
        let action = match dto.action.as_deref() {
            Some("PARTIAL_ADD") => SubAction::Add,
            Some("PARTIAL_REMOVE") => SubAction::Remove,
            Some("COMPLETE_ADD") => SubAction::Replace,
            Some("COMPLETE_REMOVE") => SubAction::RemoveAll,
            other => {
                return Err(BrokerError::BadRequest(format!(
                    "lite subscription action {other:?} is not one of PARTIAL_ADD, PARTIAL_REMOVE, COMPLETE_ADD, COMPLETE_REMOVE"
                )))
            }
        };
        let start = dto.offset_option.map_or(StartAt::Oldest, |o| o.start());
        core.lite_subscribe(LiteSubscription {
            group,
            topic,
            client,
            action,
            lite_topics: dto.lite_topic_set,
            start,
            exclusive: false,
        })
        .await?;
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}
