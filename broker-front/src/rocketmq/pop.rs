//! RocketMQ's POP requests over remoting (POP_MESSAGE 200050, ACK_MESSAGE 200051,
//! CHANGE_MESSAGE_INVISIBLETIME 200053), served by the kernel's POP (`broker_core::pop`,
//! ARCHITECTURE.md "POP consumption").
//!
//! A remoting client builds each message's receipt handle itself from the POP response
//! header (`ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId
//! queueOffset`, RocketMQ's `MQClientAPIImpl.processPopResponse`): one pop time, invisible
//! time and revive queue for the whole answer, the queue numbered as the core it dialled
//! numbers it, no CommitLog offset. The kernel's handles name the topic's queue id, the
//! revive queue of the queue's shard and the pop time of the queue's own pop. So on the way
//! back ([`kernel_handle`]) the queue number is translated to the topic's queue id and the
//! revive queue is that of the queue's shard. The kernel pops every queue of one answer at
//! one pop time, so the client's handles name the state the shard's log holds, and they work
//! wherever that log is read again (after a restart, on the slave that took over). The one
//! answer that mixes pop times is an orderly batch handed again to the same attempt, whose
//! messages keep their first pop time: their kernel handles are kept here ([`Handles`]) until
//! they are acked, changed or expire, so an ack of the client's handle finds them on this
//! broker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use broker_core::pop::{InitMode, PopRequest, ReceiptHandle, ORDER_REVIVE_QID};
use bytes::BytesMut;
use remoting::codes::response;
use remoting::RemotingCommand;

use super::{code_of, ok, queue_number, target_core, topic_config, Restamp, SQL92};
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;
use crate::numbering::CoreQueues;

/// RocketMQ's default retryMaxTimes of a subscription group: a message is delivered up to
/// this many times plus one before it goes to the dead letters.
pub(super) const RETRY_MAX_TIMES_DEFAULT: i32 = 16;
/// The most kernel handles kept for answers whose pop times differ ([`Handles`]).
const HANDLES_MAX: usize = 65_536;

/// (group, topic, topic's queue id, queue offset).
type HandleKey = (String, String, u32, u64);

/// The kernel's handles of messages an answer's header cannot describe (their pop time or
/// invisible time is not the header's), by message, with the header's pop time and
/// invisible time the client builds its handle from. Bounded by [`HANDLES_MAX`]: past it,
/// the expired ones are dropped, and when none has expired a new one is not kept (its ack
/// is refused as expired, and the message comes back after its invisible time).
#[derive(Default)]
pub struct Handles {
    by_message: RefCell<HashMap<HandleKey, Kept>>,
}

struct Kept {
    header_pop_time_ms: i64,
    header_invisible_ms: u64,
    handle: ReceiptHandle,
}

impl Handles {
    fn keep(&self, key: HandleKey, kept: Kept, now_ms: i64) {
        let mut map = self.by_message.borrow_mut();
        if map.len() >= HANDLES_MAX && !map.contains_key(&key) {
            map.retain(|_, k| k.handle.visible_at_ms() > now_ms);
            if map.len() >= HANDLES_MAX {
                tracing::debug!(
                    "{HANDLES_MAX} POP handles kept already: an ack of this one will be refused"
                );
                return;
            }
        }
        map.insert(key, kept);
    }

    /// The kernel's handle kept for the client's handle `h` (already in the kernel's
    /// numbering), taken out.
    fn take(&self, key: &HandleKey, h: &ReceiptHandle) -> Option<ReceiptHandle> {
        let mut map = self.by_message.borrow_mut();
        let k = map.get(key)?;
        if k.header_pop_time_ms != h.pop_time_ms || k.header_invisible_ms != h.invisible_ms {
            return None;
        }
        map.remove(key).map(|k| k.handle)
    }
}

/// A header field, required.
pub(super) fn field<'a>(req: &'a RemotingCommand, name: &str) -> Result<&'a str, BrokerError> {
    req.ext(name)
        .ok_or_else(|| BrokerError::BadRequest(format!("{name} is required")))
}

/// A numeric header field, required.
pub(super) fn number<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
) -> Result<T, BrokerError> {
    let v = field(req, name)?;
    v.trim()
        .parse::<T>()
        .map_err(|_| BrokerError::BadRequest(format!("{name} `{v}` is not a valid number")))
}

/// A numeric header field that may be missing.
pub(super) fn number_or<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
    default: T,
) -> Result<T, BrokerError> {
    match req.ext(name) {
        None => Ok(default),
        Some(_) => number(req, name),
    }
}

/// The broker name of a request (RocketMQ 5 clients send `bname`).
fn broker_name(req: &RemotingCommand) -> Option<&str> {
    req.ext("bname").or_else(|| req.ext("brokerName"))
}

/// POP_MESSAGE: SUCCESS with the messages as PULL's body and RocketMQ's POP response
/// header, or POLLING_TIMEOUT when nothing was visible within the poll time.
/// The group's `priority.factor` for a pop of a PRIORITY topic (asked of core 0, which keeps
/// the group configs, only for such a topic); the default otherwise.
pub(crate) async fn priority_factor(core: &Front, topic: &str, group: &str) -> u32 {
    use broker_core::priority::{is_priority_topic, priority_factor, PRIORITY_FACTOR_DEFAULT};
    if !is_priority_topic(&core.topics.borrow(), topic) {
        return PRIORITY_FACTOR_DEFAULT;
    }
    match core
        .sub_group(broker_core::mesh::SubGroupOp::List(Some(group.to_owned())))
        .await
    {
        Ok(configs) => configs
            .first()
            .map_or(PRIORITY_FACTOR_DEFAULT, |g| priority_factor(g.fields())),
        Err(_) => PRIORITY_FACTOR_DEFAULT,
    }
}

pub(super) async fn pop(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = field(req, "consumerGroup")?.to_owned();
    let topic = field(req, "topic")?.to_owned();
    let queue_id: i32 = number(req, "queueId")?;
    let max_messages: i32 = number(req, "maxMsgNums")?;
    let invisible_ms: i64 = number(req, "invisibleTime")?;
    let poll_ms: i64 = number_or(req, "pollTime", 0)?;
    let init_mode = match number_or::<i32>(req, "initMode", 0)? {
        1 => InitMode::Max,
        _ => InitMode::Min,
    };
    let order = req.ext("order") == Some("true");
    let exp = req.ext("exp").filter(|e| !e.is_empty());
    let (tag_expression, sql92) = match req.ext("expType").filter(|t| !t.is_empty()) {
        None | Some("TAG") => (exp.unwrap_or("*").to_owned(), None),
        Some(SQL92) => (
            "*".to_owned(),
            Some(
                exp.ok_or_else(|| {
                    BrokerError::BadRequest("a SQL92 pop needs its expression (exp)".into())
                })?
                .to_owned(),
            ),
        ),
        Some(other) => {
            return Err(BrokerError::Unsupported(format!(
                "expression type {other}: corvus filters by TAG or SQL92"
            )))
        }
    };
    let cfg = topic_config(core, &topic)?;
    // The queues as the client numbers them: those of the core it names (or dialled).
    let of_core = if queue_id < 0 {
        core.id
    } else {
        target_core(core, broker_name(req))
    };
    let queues = CoreQueues::of(core, &topic, &cfg, of_core);
    let global = if queue_id < 0 {
        None
    } else {
        Some(queues.global(&topic, queue_number(queue_id)?)?)
    };
    let retry_max = super::admin::stored_retry_max(core, &group)
        .await
        .unwrap_or(RETRY_MAX_TIMES_DEFAULT);
    let priority_factor = if global.is_none() && !order {
        priority_factor(core, &topic, &group).await
    } else {
        broker_core::priority::PRIORITY_FACTOR_DEFAULT
    };
    let popped = core
        .pop(PopRequest {
            group: group.clone(),
            topic: topic.clone(),
            queue_id: global,
            max_messages: u32::try_from(max_messages).map_err(|_| {
                BrokerError::BadRequest(format!("maxMsgNums {max_messages} is negative"))
            })?,
            invisible_ms: u64::try_from(invisible_ms).unwrap_or(0),
            poll_ms: u64::try_from(poll_ms).unwrap_or(0),
            init_mode,
            tag_expression,
            sql92,
            order,
            attempt_id: req.ext("attemptId").map(str::to_owned),
            // A negative retryMaxTimes leaves the count unbounded, as 0 does here.
            max_attempts: u32::try_from(retry_max).map_or(0, |r| r.saturating_add(1)),
            priority_factor,
        })
        .await?;
    if popped.messages.is_empty() {
        // With the response header all the same: RocketMQ's client decodes it whatever the
        // code (its Proxy fails the receive without it).
        let mut resp = RemotingCommand::response_to(
            req,
            response::POLLING_TIMEOUT,
            Some(
                "GetMessageStatus: NO_MATCHED_MESSAGE (no visible message in the poll time)".into(),
            ),
        );
        let f = &mut resp.ext_fields;
        f.insert("popTime".into(), popped.pop_time_ms.to_string());
        f.insert("invisibleTime".into(), invisible_ms.to_string());
        f.insert("reviveQid".into(), popped.revive_qid.to_string());
        f.insert("restNum".into(), popped.rest.to_string());
        f.insert("startOffsetInfo".into(), String::new());
        f.insert("msgOffsetInfo".into(), String::new());
        return Ok(Outgoing::remoting(resp, Body::None));
    }
    // The client's number of each queue read.
    let local = |global: u32| queues.local(global).unwrap_or(global);
    let flag = 0; // Nothing is popped from a retry topic: every retry flag is 0.
    let start_offset_info = popped
        .start_offsets
        .iter()
        .map(|(q, o)| format!("{flag} {} {o}", local(*q)))
        .collect::<Vec<_>>()
        .join(";");
    let msg_offset_info = popped
        .message_offsets
        .iter()
        .map(|(q, offsets)| {
            let list = offsets
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            format!("{flag} {} {list}", local(*q))
        })
        .collect::<Vec<_>>()
        .join(";");
    let mut resp = ok(req);
    let f = &mut resp.ext_fields;
    f.insert("popTime".into(), popped.pop_time_ms.to_string());
    f.insert("invisibleTime".into(), popped.invisible_ms.to_string());
    f.insert("reviveQid".into(), popped.revive_qid.to_string());
    f.insert("restNum".into(), popped.rest.to_string());
    f.insert("startOffsetInfo".into(), start_offset_info);
    f.insert("msgOffsetInfo".into(), msg_offset_info);
    if order {
        // Per message, the times it was delivered before (RocketMQ's per-offset form).
        let counts = popped
            .messages
            .iter()
            .map(|m| {
                format!(
                    "{flag} qo{}%{} {}",
                    local(m.queue_id),
                    m.queue_offset,
                    m.attempt.saturating_sub(1)
                )
            })
            .collect::<Vec<_>>()
            .join(";");
        f.insert("orderCountInfo".into(), counts);
    }
    let now_ms = core.shared.clock.wall_ms();
    let mut body = Vec::with_capacity(popped.messages.len());
    for m in &popped.messages {
        let kernel = ReceiptHandle::parse(&m.receipt_handle)?;
        if kernel.pop_time_ms != popped.pop_time_ms || kernel.invisible_ms != popped.invisible_ms {
            core.rocketmq.pop_handles.keep(
                (group.clone(), topic.clone(), m.queue_id, m.queue_offset),
                Kept {
                    header_pop_time_ms: popped.pop_time_ms,
                    header_invisible_ms: popped.invisible_ms,
                    handle: kernel,
                },
                now_ms,
            );
        }
        let mut rec = BytesMut::from(&m.record[..]);
        Restamp {
            queue_id: local(m.queue_id),
            shard: protocol::queue_owner_shard(&topic, m.queue_id, core.shared.shard_count),
        }
        .apply(&mut rec);
        body.push(rec.freeze());
    }
    Ok(Outgoing::remoting(resp, Body::Owned(body)))
}

/// The kernel's form of a handle a remoting client sends back (its `extraInfo`, the queue
/// numbered by the core it names), checked against the request's queue id and offset.
fn kernel_handle(
    core: &Front,
    req: &RemotingCommand,
    group: &str,
    topic: &str,
) -> Result<ReceiptHandle, BrokerError> {
    let queue_id: i32 = number(req, "queueId")?;
    let offset: i64 = number(req, "offset")?;
    let mut h = ReceiptHandle::parse(field(req, "extraInfo")?)
        .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
    if i64::from(h.queue_id) != i64::from(queue_id)
        || i64::try_from(h.queue_offset).ok() != Some(offset)
    {
        return Err(BrokerError::MessageIllegal(format!(
            "the receipt handle names offset {} of queue {}, the request offset {offset} of queue {queue_id}",
            h.queue_offset, h.queue_id
        )));
    }
    let cfg = topic_config(core, topic)?;
    let of_core = target_core(core, Some(&h.broker_name));
    let queues = CoreQueues::of(core, topic, &cfg, of_core);
    let global = queues.global(topic, h.queue_id).map_err(|_| {
        BrokerError::MessageIllegal(format!(
            "queue {queue_id} of topic {topic} does not exist on {}",
            h.broker_name
        ))
    })?;
    h.queue_id = global;
    if h.revive_qid != ORDER_REVIVE_QID {
        h.revive_qid = u32::from(protocol::queue_owner_shard(
            topic,
            global,
            core.shared.shard_count,
        ));
    }
    let key = (group.to_owned(), topic.to_owned(), global, h.queue_offset);
    Ok(core.rocketmq.pop_handles.take(&key, &h).unwrap_or(h))
}

/// The RocketMQ answer for an error of an ack or a change of invisible time: a handle that is
/// not (or no longer) the message's current delivery is NO_MESSAGE, one that names no
/// message of this broker MESSAGE_ILLEGAL.
fn handle_error(req: &RemotingCommand, e: &BrokerError) -> Outgoing {
    Outgoing::remoting(handle_refusal(req, e), Body::None)
}

/// The answer refusing a request about a receipt handle: NO_MESSAGE for a handle whose
/// message is gone or done, MESSAGE_ILLEGAL for one that does not hold together.
pub(super) fn handle_refusal(req: &RemotingCommand, e: &BrokerError) -> RemotingCommand {
    let code = match e {
        BrokerError::NotFound(_) => response::NO_MESSAGE,
        BrokerError::BadRequest(_) | BrokerError::QueueNotExist { .. } => response::MESSAGE_ILLEGAL,
        _ => code_of(e),
    };
    RemotingCommand::response_to(req, code, Some(e.to_string()))
}

/// ACK_MESSAGE: the message of the handle is done.
pub(super) async fn ack(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    if req
        .ext("extraInfo")
        .is_some_and(broker_core::core::Core::is_lite_handle)
    {
        return super::lite::ack(core, req).await;
    }
    let group = field(req, "consumerGroup")?;
    let topic = field(req, "topic")?;
    let h = kernel_handle(core, req, group, topic)?;
    match core.ack(group, topic, &h.to_string()).await {
        Ok(()) => Ok(Outgoing::remoting(ok(req), Body::None)),
        Err(e) => Ok(handle_error(req, &e)),
    }
}

/// CHANGE_MESSAGE_INVISIBLETIME: the message of the handle is hidden for invisibleTime from
/// now; the answer's popTime, invisibleTime and reviveQid are what the client builds the
/// message's new handle from. A refusal carries the three as 0, as RocketMQ's does: its
/// client reads them (`ChangeInvisibleTimeResponseHeader`, whose fields must be present)
/// before it looks at the code, and without them reports a decoding error, not the refusal.
pub(super) async fn change_invisible(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let (mut resp, new) = match changed(core, req).await {
        Ok(new) => (ok(req), new),
        Err(e) => (handle_refusal(req, &e), (0, 0, 0)),
    };
    let f = &mut resp.ext_fields;
    f.insert("popTime".into(), new.0.to_string());
    f.insert("invisibleTime".into(), new.1.to_string());
    f.insert("reviveQid".into(), new.2.to_string());
    Ok(Outgoing::remoting(resp, Body::None))
}

/// The change of [`change_invisible`]: the new handle's pop time, invisible time and revive
/// queue.
async fn changed(core: &Rc<Front>, req: &RemotingCommand) -> Result<(i64, u64, u32), BrokerError> {
    if req
        .ext("extraInfo")
        .is_some_and(broker_core::core::Core::is_lite_handle)
    {
        return super::lite::change_invisible(core, req).await;
    }
    let group = field(req, "consumerGroup")?;
    let topic = field(req, "topic")?;
    let invisible_ms: i64 = number(req, "invisibleTime")?;
    let invisible_ms = u64::try_from(invisible_ms).map_err(|_| {
        BrokerError::BadRequest(format!("invisibleTime {invisible_ms} is negative"))
    })?;
    let h = kernel_handle(core, req, group, topic)?;
    let new = core
        .change_invisible(group, topic, &h.to_string(), invisible_ms)
        .await?;
    let new = ReceiptHandle::parse(&new)?;
    Ok((new.pop_time_ms, new.invisible_ms, new.revive_qid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(pop_time_ms: i64) -> ReceiptHandle {
        ReceiptHandle {
            ck_queue_offset: 1,
            pop_time_ms,
            invisible_ms: 30_000,
            revive_qid: 0,
            retry_flag: 0,
            broker_name: "broker-a".into(),
            queue_id: 2,
            queue_offset: 3,
            commit_log_offset: None,
        }
    }

    #[test]
    fn a_kept_handle_is_found_only_by_the_headers_pop_time_and_only_once() {
        let handles = Handles::default();
        let key: HandleKey = ("g".into(), "t".into(), 2, 3);
        handles.keep(
            key.clone(),
            Kept {
                header_pop_time_ms: 1_000,
                header_invisible_ms: 30_000,
                handle: handle(1_002),
            },
            0,
        );
        assert!(handles.take(&key, &handle(999)).is_none());
        let found = handles.take(&key, &handle(1_000)).map(|h| h.pop_time_ms);
        assert_eq!(found, Some(1_002));
        assert!(handles.take(&key, &handle(1_000)).is_none());
    }

    #[test]
    fn a_full_table_drops_the_expired_handles_first() {
        let handles = Handles::default();
        for i in 0..HANDLES_MAX as u64 {
            handles.keep(
                ("g".into(), "t".into(), 0, i),
                Kept {
                    header_pop_time_ms: 1,
                    header_invisible_ms: 30_000,
                    handle: handle(1),
                },
                0,
            );
        }
        let key: HandleKey = ("g".into(), "t".into(), 1, 0);
        let kept = |now_ms| {
            handles.keep(
                key.clone(),
                Kept {
                    header_pop_time_ms: 1,
                    header_invisible_ms: 30_000,
                    handle: handle(1),
                },
                now_ms,
            );
            handles.by_message.borrow().contains_key(&key)
        };
        // Nothing expired yet: the new one is not kept.
        assert!(!kept(10));
        // All expired: they make room.
        assert!(kept(40_000));
        assert_eq!(handles.by_message.borrow().len(), 1);
    }
}
