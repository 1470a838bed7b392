//! ReceiveMessage, AckMessage and ChangeInvisibleDuration: the v5 consumers' POP, served by
//! the kernel's POP on the core that owns the queue (`broker_core::pop`).
//!
//! A receive pops any queue of this core, as RocketMQ's Proxy pops any queue of the broker
//! whichever queue of the route the client names. A SimpleConsumer names its own invisible
//! time (10 s to 12 h, as RocketMQ's Proxy allows); a PushConsumer asks the server to renew
//! and gets [`AUTO_RENEW_INVISIBLE`] instead, without renewal. The receipt handle is the kernel's,
//! which names the core that owns the message, so acks and changes reach that core. A
//! message's deliveries are capped by the client's retry policy (17 for a consumer group by
//! default); past it the message goes to `%DLQ%<group>`. A FIFO group (its
//! `consumeMessageOrderly`) pops orderly: one batch per queue out at a time.

use std::time::Duration;

use grpc_h2::{GrpcStatus, Replies};
use grpc_proto::v2;
use message::RecordView;

use super::{encoded, error_status, name_of, ok, status};
use crate::error::BrokerError;
use crate::front::Front;
use crate::numbering::CoreQueues;
use broker_core::core::Core;
use broker_core::lite::{LitePop, LiteSubscription, StartAt, SubAction};
use broker_core::pop::{InitMode, PopRequest, Popped, POP_MESSAGES_MAX};

/// A SimpleConsumer's invisible time: at least this (RocketMQ's Proxy's
/// `minInvisibleTimeMillsForRecv`) ...
const INVISIBLE_MIN: Duration = Duration::from_secs(10);
/// ... and at most this.
const INVISIBLE_MAX: Duration = Duration::from_secs(12 * 3600);
/// A PushConsumer's invisible time (it asks for automatic renewal, which this broker does
/// not do): RocketMQ's Proxy's default invisible time.
const AUTO_RENEW_INVISIBLE: Duration = Duration::from_secs(60);
/// The longest long poll, as RocketMQ's Proxy clamps it.
const LONG_POLL_MAX: Duration = Duration::from_secs(20);
/// What a long poll leaves of the caller's deadline (`grpc-timeout`) for the answer to reach it.
const LONG_POLL_RESERVE: Duration = Duration::from_secs(1);

fn millis(d: &prost_types::Duration) -> Option<u64> {
    let ms = d
        .seconds
        .checked_mul(1000)?
        .checked_add(i64::from(d.nanos / 1_000_000))?;
    u64::try_from(ms).ok()
}

fn refusal(code: v2::Code, why: impl Into<String>) -> v2::Status {
    status(code, why).unwrap_or_default()
}

/// The kernel's error as the status a consumer's call ends with: a handle the kernel does
/// not know (acked, delivered again, changed, forged) or cannot read is INVALID_RECEIPT_HANDLE.
fn handle_status(e: &BrokerError) -> Option<v2::Status> {
    match e {
        BrokerError::NotFound(_) | BrokerError::BadRequest(_) => {
            status(v2::Code::InvalidReceiptHandle, e.to_string())
        }
        _ => error_status(e),
    }
}

/// Serves ReceiveMessage: one OK status, then the messages; or one status alone. Either way
/// the stream ends with a `delivery_timestamp` element (the time of the reply), as RocketMQ's
/// Proxy ends it: the Python SDK's PushConsumer takes it for its delivery latency and fails
/// the receive without it. The long poll is the request's `long_polling_timeout` (the Java
/// SDK's) or, without one (the Go SDK's), [`LONG_POLL_MAX`], and ends [`LONG_POLL_RESERVE`]
/// before the caller's `timeout`.
pub(super) async fn receive(
    f: &Front,
    client: &str,
    r: v2::ReceiveMessageRequest,
    timeout: Option<Duration>,
    replies: &mut Replies,
) -> Result<(), GrpcStatus> {
    let outcome = match pop(f, client, &r, timeout).await {
        Ok(messages) if messages.is_empty() => {
            Err(refusal(v2::Code::MessageNotFound, "no new message"))
        }
        Ok(messages) => Ok(messages),
        Err(status) => Err(status),
    };
    let element = |content| v2::ReceiveMessageResponse {
        content: Some(content),
    };
    match outcome {
        Err(status) => {
            let reply = element(v2::receive_message_response::Content::Status(status));
            replies.send(encoded(&reply)).await?;
        }
        Ok(messages) => {
            let head = element(v2::receive_message_response::Content::Status(
                ok().unwrap_or_default(),
            ));
            replies.send(encoded(&head)).await?;
            for m in messages {
                let reply = element(v2::receive_message_response::Content::Message(m));
                replies.send(encoded(&reply)).await?;
            }
        }
    }
    let now = element(v2::receive_message_response::Content::DeliveryTimestamp(
        super::delivered::timestamp(f.shared.clock.wall_ms()),
    ));
    replies.send(encoded(&now)).await
}

async fn pop(
    f: &Front,
    client: &str,
    r: &v2::ReceiveMessageRequest,
    timeout: Option<Duration>,
) -> Result<Vec<v2::Message>, v2::Status> {
    let group = name_of(&r.group);
    if group.is_empty() {
        return Err(refusal(
            v2::Code::IllegalConsumerGroup,
            "the group is empty",
        ));
    }
    let Some(queue) = r.message_queue.as_ref() else {
        return Err(refusal(v2::Code::BadRequest, "no message queue named"));
    };
    let topic = name_of(&queue.topic);
    let cfg = f
        .topic_for_read(topic)
        .map_err(|e| error_status(&e).unwrap_or_default())?;
    let queues = CoreQueues::of(f, topic, &cfg, f.id);
    // As RocketMQ's Proxy pops (queue id -1): any queue of the broker the client dialled,
    // whichever queue of it the request names; a consumer that turns through the route's
    // queues would otherwise wait out empty ones while its messages sit in the others.
    let queue_id = None;
    let invisible = if r.auto_renew {
        AUTO_RENEW_INVISIBLE
    } else {
        let asked = r
            .invisible_duration
            .as_ref()
            .and_then(millis)
            .map(Duration::from_millis);
        match asked {
            Some(d) if (INVISIBLE_MIN..=INVISIBLE_MAX).contains(&d) => d,
            _ => {
                return Err(refusal(
                    v2::Code::IllegalInvisibleTime,
                    format!(
                        "the invisible duration must be {} s to {} h",
                        INVISIBLE_MIN.as_secs(),
                        INVISIBLE_MAX.as_secs() / 3600
                    ),
                ))
            }
        }
    };
    let poll = r
        .long_polling_timeout
        .as_ref()
        .and_then(millis)
        .map_or(LONG_POLL_MAX, Duration::from_millis)
        .min(LONG_POLL_MAX)
        .min(timeout.map_or(LONG_POLL_MAX, |t| t.saturating_sub(LONG_POLL_RESERVE)));
    let (tag_expression, sql92) = match r.filter_expression.as_ref() {
        Some(e) if e.r#type == v2::FilterType::Sql as i32 => {
            ("*".to_owned(), Some(e.expression.clone()))
        }
        Some(e) if !e.expression.trim().is_empty() => (e.expression.clone(), None),
        _ => ("*".to_owned(), None),
    };
    let policy = f.grpc.consumer_policy(client);
    if broker_core::lite::is_lite_topic(&f.topics.borrow(), topic) {
        // A lite consumer's receive: what its lite subscriptions hold. A LitePushConsumer
        // receives from every core of the route, each for its own lite topics; a
        // LiteSimpleConsumer from the first readable queue's core only, which then looks on
        // every core.
        let every_core = f.grpc.client_type_of(client) == Some(v2::ClientType::LiteSimpleConsumer);
        let request = LitePop {
            group: group.to_owned(),
            topic: topic.to_owned(),
            client: client.to_owned(),
            max_messages: u32::try_from(r.batch_size)
                .unwrap_or(1)
                .clamp(1, POP_MESSAGES_MAX),
            invisible_ms: invisible.as_millis() as u64,
            poll_ms: poll.as_millis() as u64,
            max_attempts: policy.max_attempts,
        };
        let popped = if every_core {
            f.lite_pop_every_core(request).await
        } else {
            f.lite_pop(request).await
        }
        .map_err(|e| error_status(&e).unwrap_or_default())?;
        return Ok(messages_of(topic, &queues, popped));
    }
    let priority_factor = if policy.fifo {
        broker_core::priority::PRIORITY_FACTOR_DEFAULT
    } else {
        crate::rocketmq::pop::priority_factor(f, topic, group).await
    };
    let request = PopRequest {
        group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        max_messages: u32::try_from(r.batch_size)
            .unwrap_or(1)
            .clamp(1, POP_MESSAGES_MAX),
        invisible_ms: invisible.as_millis() as u64,
        poll_ms: poll.as_millis() as u64,
        init_mode: InitMode::Min,
        tag_expression,
        sql92,
        order: policy.fifo,
        attempt_id: r.attempt_id.clone(),
        max_attempts: policy.max_attempts,
        priority_factor,
    };
    let popped = match f.pop(request).await {
        Ok(p) => p,
        Err(e @ (BrokerError::FilterInvalid(_) | BrokerError::FilterDisabled)) => {
            return Err(refusal(v2::Code::IllegalFilterExpression, e.to_string()))
        }
        Err(e) => return Err(error_status(&e).unwrap_or_default()),
    };
    Ok(messages_of(topic, &queues, popped))
}

/// A pop's messages as a receive hands them out: each with its receipt handle, attempt and
/// invisible time, in the queue the client numbers.
fn messages_of(topic: &str, queues: &CoreQueues, popped: Popped) -> Vec<v2::Message> {
    let invisible_duration = prost_types::Duration {
        seconds: (popped.invisible_ms / 1000) as i64,
        nanos: ((popped.invisible_ms % 1000) * 1_000_000) as i32,
    };
    let mut messages = Vec::with_capacity(popped.messages.len());
    for m in popped.messages {
        let Ok(view) = RecordView::parse(&m.record) else {
            tracing::warn!(
                topic,
                queue = m.queue_id,
                offset = m.queue_offset,
                "a popped record does not parse; it is left to come back"
            );
            continue;
        };
        let local = queues.local(m.queue_id).unwrap_or(m.queue_id);
        let mut message = super::delivered::message_of(&view, topic, local as i32);
        if let Some(sys) = message.system_properties.as_mut() {
            sys.receipt_handle = Some(m.receipt_handle);
            sys.delivery_attempt = Some(i32::try_from(m.attempt).unwrap_or(i32::MAX));
            sys.invisible_duration = Some(invisible_duration);
        }
        messages.push(message);
    }
    messages
}

pub(super) async fn ack(f: &Front, r: &v2::AckMessageRequest) -> v2::AckMessageResponse {
    let group = name_of(&r.group);
    let topic = name_of(&r.topic);
    let mut entries = Vec::with_capacity(r.entries.len());
    for e in &r.entries {
        let acked = if Core::is_lite_handle(&e.receipt_handle) {
            f.lite_ack(group, topic, &e.receipt_handle, e.lite_topic.as_deref())
                .await
        } else {
            f.ack(group, topic, &e.receipt_handle).await
        };
        let status = match acked {
            Ok(()) => ok(),
            Err(err) => handle_status(&err),
        };
        entries.push(v2::AckMessageResultEntry {
            message_id: e.message_id.clone(),
            receipt_handle: e.receipt_handle.clone(),
            status,
        });
    }
    let status = match entries.first() {
        None => status(v2::Code::BadRequest, "no entry to ack"),
        Some(first) if entries.iter().all(|e| e.status == first.status) => first.status.clone(),
        Some(_) => status(
            v2::Code::MultipleResults,
            "the entries had different results",
        ),
    };
    v2::AckMessageResponse { status, entries }
}

pub(super) async fn change_invisible(
    f: &Front,
    r: &v2::ChangeInvisibleDurationRequest,
) -> v2::ChangeInvisibleDurationResponse {
    let refused = |status| v2::ChangeInvisibleDurationResponse {
        status,
        receipt_handle: String::new(),
    };
    let Some(ms) = r.invisible_duration.as_ref().and_then(millis) else {
        return refused(status(
            v2::Code::IllegalInvisibleTime,
            "the invisible duration is missing or negative",
        ));
    };
    if Duration::from_millis(ms) > INVISIBLE_MAX {
        return refused(status(
            v2::Code::IllegalInvisibleTime,
            format!(
                "the invisible duration is over {} h",
                INVISIBLE_MAX.as_secs() / 3600
            ),
        ));
    }
    let (group, topic) = (name_of(&r.group), name_of(&r.topic));
    let changed = if Core::is_lite_handle(&r.receipt_handle) {
        // A lite push consumer that suspends a lite topic hides its message without
        // spending an attempt.
        let suspend = r.suspend.unwrap_or(false);
        let lite = r.lite_topic.as_deref();
        f.lite_change_invisible(group, topic, &r.receipt_handle, lite, ms, suspend)
            .await
    } else {
        f.change_invisible(group, topic, &r.receipt_handle, ms)
            .await
    };
    match changed {
        Ok(handle) => v2::ChangeInvisibleDurationResponse {
            status: ok(),
            receipt_handle: handle,
        },
        Err(e) => refused(handle_status(&e)),
    }
}

/// ForwardMessageToDeadLetterQueue: a FIFO consumer gives a message up after its own
/// retries; it goes to `%DLQ%<group>` and its handle is done.
pub(super) async fn dead_letter(
    f: &Front,
    r: &v2::ForwardMessageToDeadLetterQueueRequest,
) -> v2::ForwardMessageToDeadLetterQueueResponse {
    let (group, topic) = (name_of(&r.group), name_of(&r.topic));
    let sent = if Core::is_lite_handle(&r.receipt_handle) {
        f.lite_dead_letter(group, topic, &r.receipt_handle, r.lite_topic.as_deref())
            .await
    } else {
        f.dead_letter(group, topic, &r.receipt_handle).await
    };
    let status = match sent {
        Ok(()) => ok(),
        Err(e) => handle_status(&e),
    };
    v2::ForwardMessageToDeadLetterQueueResponse { status }
}

/// What a consumer's session needs of its group: whether it is FIFO, how many deliveries a
/// message gets and how long a failed one waits.
#[derive(Debug, Clone)]
pub struct ConsumerPolicy {
    pub fifo: bool,
    pub max_attempts: u32,
    /// How long a consumer hides a message it failed before it comes back.
    pub backoff: Backoff,
}

impl Default for ConsumerPolicy {
    fn default() -> Self {
        ConsumerPolicy {
            fifo: false,
            max_attempts: super::session::CONSUMER_RETRIES as u32 + 1,
            backoff: Backoff::default(),
        }
    }
}

/// A group's retry delays (RocketMQ's `GroupRetryPolicy`), which the Proxy hands its v5
/// consumers as their backoff policy.
#[derive(Debug, Clone, PartialEq)]
pub enum Backoff {
    /// The delay after each failed attempt in turn, in ms (the last one repeats).
    Customized(Vec<u64>),
    /// min(max, initial × multiplier^attempts), in ms.
    Exponential {
        initial_ms: u64,
        max_ms: u64,
        multiplier: u64,
    },
}

impl Default for Backoff {
    /// RocketMQ's `CustomizedRetryPolicy`: its delay levels from 1 s to 2 h.
    fn default() -> Self {
        Backoff::Customized(
            [
                1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600,
                7200,
            ]
            .iter()
            .map(|s| s * 1000)
            .collect(),
        )
    }
}

impl Backoff {
    /// The policy of a group config's `groupRetryPolicy` (`type` CUSTOMIZED or EXPONENTIAL,
    /// with `customizedRetryPolicy.next` or `exponentialRetryPolicy`'s `initial`, `max` and
    /// `multiplier`; what is missing is RocketMQ's default for the type). `None` when
    /// there is none or it does not read.
    fn of_group(policy: &serde_json::Value) -> Option<Backoff> {
        let ms = |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_u64());
        match policy.get("type")?.as_str()? {
            "EXPONENTIAL" => {
                let e = policy
                    .get("exponentialRetryPolicy")
                    .filter(|v| v.is_object());
                let field = |key, default| e.and_then(|e| ms(e, key)).unwrap_or(default);
                Some(Backoff::Exponential {
                    initial_ms: field("initial", 5_000),
                    max_ms: field("max", 7_200_000),
                    multiplier: field("multiplier", 2),
                })
            }
            "CUSTOMIZED" => {
                let next: Option<Vec<u64>> = policy
                    .get("customizedRetryPolicy")
                    .and_then(|c| c.get("next"))
                    .and_then(|n| n.as_array())
                    .and_then(|n| n.iter().map(|x| x.as_u64()).collect());
                Some(match next {
                    Some(next) if !next.is_empty() => Backoff::Customized(next),
                    _ => Backoff::default(),
                })
            }
            _ => None,
        }
    }
}

/// A group's policy from its subscription group config (`consumeMessageOrderly`,
/// `retryMaxTimes`, `groupRetryPolicy`), RocketMQ's defaults without one.
pub(super) async fn group_policy(f: &Front, group: &str) -> ConsumerPolicy {
    let mut policy = ConsumerPolicy::default();
    let configs = f
        .sub_group(broker_core::mesh::SubGroupOp::List(Some(group.to_owned())))
        .await
        .unwrap_or_default();
    if let Some(cfg) = configs.first() {
        let fields = cfg.fields();
        if let Some(orderly) = fields
            .get("consumeMessageOrderly")
            .and_then(|v| v.as_bool())
        {
            policy.fifo = orderly;
        }
        if let Some(retries) = fields.get("retryMaxTimes").and_then(|v| v.as_u64()) {
            policy.max_attempts = u32::try_from(retries).unwrap_or(u32::MAX - 1) + 1;
        }
        if let Some(backoff) = fields.get("groupRetryPolicy").and_then(Backoff::of_group) {
            policy.backoff = backoff;
        }
    }
    policy
}

/// SyncLiteSubscription: a lite push consumer's lite topics, its whole set or a change of
/// it, which it sends to every broker of its route; each core keeps those it holds.
pub(super) async fn sync_lite(
    f: &Front,
    client: &str,
    r: &v2::SyncLiteSubscriptionRequest,
) -> v2::SyncLiteSubscriptionResponse {
    let action = match v2::LiteSubscriptionAction::try_from(r.action) {
        Ok(v2::LiteSubscriptionAction::PartialAdd) => SubAction::Add,
        Ok(v2::LiteSubscriptionAction::PartialRemove) => SubAction::Remove,
        Ok(v2::LiteSubscriptionAction::CompleteAdd) => SubAction::Replace,
        Ok(v2::LiteSubscriptionAction::CompleteRemove) => SubAction::RemoveAll,
        Err(_) => {
            return v2::SyncLiteSubscriptionResponse {
                status: status(v2::Code::BadRequest, "an unknown lite subscription action"),
            }
        }
    };
    use v2::offset_option::{OffsetType, Policy};
    let start = match r
        .offset_option
        .as_ref()
        .and_then(|o| o.offset_type.as_ref())
    {
        Some(OffsetType::Policy(p)) if *p == Policy::Max as i32 => StartAt::Latest,
        Some(OffsetType::Policy(p)) if *p == Policy::Min as i32 => StartAt::Earliest,
        Some(OffsetType::TailN(n)) => StartAt::Tail(u64::try_from(*n).unwrap_or(0)),
        _ => StartAt::Oldest,
    };
    let sub = LiteSubscription {
        group: name_of(&r.group).to_owned(),
        topic: name_of(&r.topic).to_owned(),
        client: client.to_owned(),
        action,
        lite_topics: r.lite_topic_set.clone(),
        start,
        exclusive: false,
    };
    if let Some(Err(e)) = r
        .lite_topic_set
        .iter()
        .map(|l| broker_core::lite::check_lite_topic(l))
        .find(Result::is_err)
    {
        return v2::SyncLiteSubscriptionResponse {
            status: status(v2::Code::IllegalLiteTopic, e.to_string()),
        };
    }
    let status = match f.lite_subscribe(sub).await {
        Ok(()) => ok(),
        Err(e) => error_status(&e),
    };
    v2::SyncLiteSubscriptionResponse { status }
}
