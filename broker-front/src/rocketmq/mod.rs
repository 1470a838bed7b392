//! RocketMQ's remoting protocol on the broker: what a real RocketMQ client (Java, Go, C++,
//! Rust) sends, mapped onto the same core requests the native protocol uses, so every rule of
//! the front doors (`Core::at_shard`, `Core::at_core`) holds for both.
//!
//! Each core is a RocketMQ broker of its own (`protocol::core_view`): the NameServer's
//! RocketMQ routes name core `c` `<broker>-c<c>` (the broker's own name when it runs one
//! core) at the core's direct address, holding the topic's queues that core owns, numbered
//! from 0. A request's queue id is therefore a position among the queues of the core it
//! names (its `bname`/`brokerName` field, or else the core serving the connection), and is
//! translated to the topic's queue id here. A client that knows only the route's addresses
//! reaches the owning core with no cross-core hop.
//!
//! Stored records are served as RocketMQ stores them (MessageExt), with two fields written
//! over on the way out ([`Restamp`]): the queue id (the core's number for the queue) and the
//! physical offset (the shard in its top 16 bits, as in corvus's offset message ids), so the
//! offset msgId a client computes from STOREHOST + PHYSICALOFFSET is unique across shards and
//! resolves with VIEW_MESSAGE_BY_ID. The whole-record CRC corvus keeps as the last property
//! (`__CRC`) is visible to applications among the message's properties.

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::io::AsyncWriteExt;
use message::ids::LOCAL_OFFSET_BITS;
use message::{encode_record, MessageFields};
use protocol::core_view::core_of_broker_name;
use protocol::{CommitOffset, GroupQueue, ResponseCode, TopicConfig};
use remoting::body::{self, JsonForm};
use remoting::codes::{request, response};
use remoting::headers::{
    ConsumerGroupRequestHeader, CreateTopicRequestHeader, GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader, QueryMessageRequestHeader,
    QueryMessageResponseHeader, SearchOffsetRequestHeader, SendHeaderRef, SendMessageRequestHeader,
    SendMessageResponseHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
};
use remoting::{Frame, RemotingCommand};

use crate::client_conn::ClientConn;
use crate::conn::{Body, Outgoing};
use crate::core::PullBody;
use crate::error::BrokerError;
use crate::front::Front;
use crate::mesh::{GroupOp, OffsetOp, PullStatus};
use crate::numbering::CoreQueues;
use broker_core::priority::{priority_of, priority_queue, Priority, PROPERTY_PRIORITY};

mod admin;
mod assign;
mod auth_admin;
mod lite;
mod lite_admin;
pub(crate) mod pop;

pub use admin::Seen;
pub(crate) use admin::{SeenClient, ROCKETMQ_VERSION};

/// Pull sysFlag bit: the pull carries the consumer's offset to commit (`commitOffset`).
const PULL_FLAG_COMMIT_OFFSET: i32 = 0x1;
/// Pull sysFlag bit: the broker may hold the pull (long polling).
const PULL_FLAG_SUSPEND: i32 = 0x2;
/// RocketMQ's `ExpressionType.SQL92`.
const SQL92: &str = "SQL92";
/// What a pull may carry when the client sets no byte limit.
const PULL_BYTES_MAX_DEFAULT: u32 = 4 << 20;
/// How long a RocketMQ client's queue lock lasts (RocketMQ's rebalance lock lifetime): it
/// renews every 20 s.
const LOCK_LEASE_MS: u64 = 60_000;
/// The region RocketMQ's brokers name by default (`BrokerConfig.regionId`), stamped on
/// stored messages (`MSG_REGION`).
pub(crate) const REGION_ID: &str = "DefaultRegion";

/// The two fields of a stored record written over when it is served to a RocketMQ client.
#[derive(Debug, Clone, Copy)]
pub struct Restamp {
    /// The queue's number among the queues of the core the client asked.
    pub queue_id: u32,
    /// The shard the records are from: the top 16 bits of the physical offset served.
    pub shard: u16,
}

/// Byte positions in a stored record (RocketMQ's MessageExt layout).
const QUEUE_ID_AT: usize = 12;
const PHYSICAL_OFFSET_AT: usize = 28;
const PHYSICAL_OFFSET_END: usize = 36;

impl Restamp {
    fn physical_offset(&self, local: &[u8]) -> [u8; 8] {
        let mut b = [0u8; 8];
        b.copy_from_slice(local);
        let off = u64::from_be_bytes(b) | (u64::from(self.shard) << LOCAL_OFFSET_BITS);
        off.to_be_bytes()
    }

    /// Writes the two fields of the record at the start of `rec` (in place).
    pub(crate) fn apply(&self, rec: &mut [u8]) {
        if rec.len() < PHYSICAL_OFFSET_END {
            return;
        }
        rec[QUEUE_ID_AT..QUEUE_ID_AT + 4].copy_from_slice(&self.queue_id.to_be_bytes());
        let phys = self.physical_offset(&rec[PHYSICAL_OFFSET_AT..PHYSICAL_OFFSET_END]);
        rec[PHYSICAL_OFFSET_AT..PHYSICAL_OFFSET_END].copy_from_slice(&phys);
    }
}

/// Writes stored records with [`Restamp`]'s fields written over, copying nothing but the
/// two fields: each record goes out as its head, the new queue id, its middle, the new
/// offset, and the rest from where it lies.
pub(crate) async fn write_restamped<W: futures_lite::AsyncWrite + Unpin>(
    w: &mut W,
    records: &[shard::StoredSlice],
    r: &Restamp,
) -> std::io::Result<()> {
    for s in records {
        let rec = s.as_bytes();
        if rec.len() < PHYSICAL_OFFSET_END {
            w.write_all(rec).await?;
            continue;
        }
        w.write_all(&rec[..QUEUE_ID_AT]).await?;
        w.write_all(&r.queue_id.to_be_bytes()).await?;
        w.write_all(&rec[QUEUE_ID_AT + 4..PHYSICAL_OFFSET_AT])
            .await?;
        w.write_all(&r.physical_offset(&rec[PHYSICAL_OFFSET_AT..PHYSICAL_OFFSET_END]))
            .await?;
        w.write_all(&rec[PHYSICAL_OFFSET_END..]).await?;
    }
    Ok(())
}

/// The RocketMQ response code for a broker error.
pub(crate) fn code_of(e: &BrokerError) -> i32 {
    match e.code() {
        // Below 1000 corvus's codes are RocketMQ's own.
        c if (c as u16) < 1000 => i32::from(c as u16),
        ResponseCode::MessageTooLarge => response::MESSAGE_ILLEGAL,
        ResponseCode::DiskFull | ResponseCode::StoragePoisoned | ResponseCode::NotLeader => {
            response::SERVICE_NOT_AVAILABLE
        }
        ResponseCode::QueueLocked => response::SYSTEM_BUSY,
        // A recall refused (RocketMQ's answer to a handle it cannot take).
        ResponseCode::BadRequest if matches!(e, BrokerError::NotRecallable(_)) => {
            response::ILLEGAL_OPERATION
        }
        ResponseCode::BadRequest if matches!(e, BrokerError::LiteTopicQuota(_)) => {
            response::LMQ_QUOTA_EXCEEDED
        }
        ResponseCode::BadRequest if matches!(e, BrokerError::LiteSubscriptionQuota(_)) => {
            response::LITE_SUBSCRIPTION_QUOTA_EXCEEDED
        }
        ResponseCode::BadRequest => response::INVALID_PARAMETER,
        _ => response::SYSTEM_ERROR,
    }
}

/// The answer to `req` for a broker error: its RocketMQ code and the error's text.
/// A quota refusal also carries when to retry as a response property
/// ([`QUOTA_RETRY_AFTER_MS`]), which a client reads from the response's ext fields.
pub(crate) fn error_answer(req: &RemotingCommand, e: &BrokerError) -> Outgoing {
    let mut cmd = RemotingCommand::response_to(req, code_of(e), Some(e.to_string()));
    if let Some(ms) = e.retry_after_ms() {
        cmd.ext_fields
            .insert(QUOTA_RETRY_AFTER_MS.to_string(), ms.to_string());
    }
    Outgoing::remoting(cmd, Body::None)
}

/// The response property of a quota refusal: ms until a retry may succeed.
pub const QUOTA_RETRY_AFTER_MS: &str = "quotaRetryAfterMs";

/// Serves one remoting request; `None` for a oneway one.
pub(crate) async fn serve(
    core: &Rc<Front>,
    client: &Rc<ClientConn>,
    frame: Frame,
) -> Option<Outgoing> {
    let req = &frame.command;
    // The front door: the same rules as the native protocol's.
    if let Err(e) = core
        .acl
        .check_remoting(client, req, &frame.body, &core.shared.clock)
        .and_then(|()| core.admit_remoting(client, req, &frame.body))
    {
        if req.is_oneway() {
            tracing::debug!(peer = %client.peer, "a oneway request was refused: {e}");
        }
        return (!req.is_oneway()).then(|| error_answer(req, &e));
    }
    let answer = match req.code {
        request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
            send(core, client, req, frame.body.clone()).await
        }
        // The 5.x DefaultLitePullConsumer's pull: the same request, served the same way.
        request::PULL_MESSAGE | request::LITE_PULL_MESSAGE => pull(core, req).await,
        request::HEART_BEAT => heartbeat(core, client, req, &frame.body).await,
        request::CHECK_CLIENT_CONFIG => check_client_config(core, req, &frame.body),
        request::UNREGISTER_CLIENT => unregister(core, req).await,
        request::GET_CONSUMER_LIST_BY_GROUP => consumer_list(core, req).await,
        request::QUERY_CONSUMER_OFFSET => query_offset(core, req).await,
        request::UPDATE_CONSUMER_OFFSET => update_offset(core, client, req).await,
        request::GET_MAX_OFFSET => max_offset(core, req).await,
        request::GET_MIN_OFFSET => min_offset(core, req).await,
        request::SEARCH_OFFSET_BY_TIMESTAMP => search_offset(core, req).await,
        request::VIEW_MESSAGE_BY_ID => view_message(core, client, req).await,
        request::QUERY_MESSAGE => query_message(core, req).await,
        request::LOCK_BATCH_MQ => lock_batch(core, req, &frame.body).await,
        request::UNLOCK_BATCH_MQ => unlock_batch(core, req, &frame.body).await,
        request::UPDATE_AND_CREATE_TOPIC => create_topic(core, req).await,
        request::CONSUMER_SEND_MSG_BACK => send_back(core, req).await,
        request::SEND_REPLY_MESSAGE | request::SEND_REPLY_MESSAGE_V2 => {
            send_reply(core, client, req, frame.body.clone()).await
        }
        request::END_TRANSACTION => end_transaction(core, req).await,
        request::RECALL_MESSAGE => recall(core, req).await,
        request::POP_MESSAGE => pop::pop(core, req).await,
        request::POP_LITE_MESSAGE => lite::pop(core, req).await,
        request::LITE_SUBSCRIPTION_CTL => lite::subscription_ctl(core, req, &frame.body).await,
        request::ACK_LITE_MESSAGE => lite::ack(core, req).await,
        request::ACK_MESSAGE => pop::ack(core, req).await,
        request::CHANGE_MESSAGE_INVISIBLETIME => pop::change_invisible(core, req).await,
        request::QUERY_ASSIGNMENT => assign::query(core, req, &frame.body).await,
        request::SET_MESSAGE_REQUEST_MODE => assign::set_mode(core, req, &frame.body).await,
        code if lite_admin::is_lite_admin(code) => lite_admin::serve(core, req).await,
        code if auth_admin::is_auth_admin(code) => {
            auth_admin::serve(core, client, req, &frame.body).await
        }
        code => match admin::serve(core, req, &frame.body).await {
            Some(answer) => answer,
            None => {
                core.rocketmq.log_refused_code(&client.peer, code);
                Err(BrokerError::Unsupported(format!(
                    "request code {code} ({}) is not supported by corvus",
                    request::name(code).unwrap_or("unknown")
                )))
            }
        },
    };
    let out = match answer {
        Ok(out) => out,
        Err(e) => error_answer(req, &e),
    };
    (!req.is_oneway()).then_some(out)
}

/// RECALL_MESSAGE (RocketMQ 5.3.2's `DefaultMQProducer.recallMessage`): the scheduled message
/// a send's `recallHandle` names is not delivered. Answered with its unique key as `msgId`;
/// refused with ILLEGAL_OPERATION and the reason when the handle is not this broker's or
/// the message is not pending (delivered, or never held here), NO_PERMISSION with
/// `recall_message_enable` off, SLAVE_NOT_AVAILABLE from a slave (RocketMQ's answers).
async fn recall(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let field = |name: &str| {
        req.ext(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| BrokerError::BadRequest(format!("{name} is required")))
    };
    let msg_id = match core.recall(field("topic")?, field("recallHandle")?).await {
        Ok(id) => id,
        Err(e @ BrokerError::NotMaster(_)) => {
            return Ok(Outgoing::remoting(
                RemotingCommand::response_to(
                    req,
                    response::SLAVE_NOT_AVAILABLE,
                    Some(e.to_string()),
                ),
                Body::None,
            ))
        }
        Err(e) => return Err(e),
    };
    let mut answer = ok(req);
    answer.ext_fields.insert("msgId".into(), msg_id);
    Ok(Outgoing::remoting(answer, Body::None))
}

/// END_TRANSACTION (oneway from RocketMQ's producers): commit or roll back a half message
/// named by the send result's offset msgId (the shard in the top 16 bits) and queue offset.
async fn end_transaction(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let num = |name: &str| -> Result<i64, BrokerError> {
        req.ext(name)
            .ok_or_else(|| BrokerError::BadRequest(format!("{name} is required")))?
            .trim()
            .parse::<i64>()
            .map_err(|_| BrokerError::BadRequest(format!("{name} is not a number")))
    };
    let commit_log_offset = num("commitLogOffset")? as u64;
    let state = match num("commitOrRollback")? as i32 {
        c if c == crate::transaction::sys_flag::COMMIT => protocol::TransactionState::Commit,
        c if c == crate::transaction::sys_flag::ROLLBACK => protocol::TransactionState::Rollback,
        0 => protocol::TransactionState::Unknown,
        c => {
            return Err(BrokerError::BadRequest(format!(
                "commitOrRollback {c} is none of 0, 8, 12"
            )))
        }
    };
    let end = protocol::EndTransaction {
        producer_group: req.ext("producerGroup").unwrap_or("").to_owned(),
        shard: (commit_log_offset >> LOCAL_OFFSET_BITS) as u16,
        commit_log_offset: commit_log_offset & message::ids::LOCAL_OFFSET_MAX,
        queue_offset: num("tranStateTableOffset")?.max(0) as u64,
        msg_id: req.ext("msgId").unwrap_or("").to_owned(),
        state,
        from_check: req.ext("fromTransactionCheck") == Some("true"),
    };
    let r = core.end_transaction(end).await;
    if let Err(e) = &r {
        if req.is_oneway() {
            tracing::warn!("END_TRANSACTION from a RocketMQ producer failed: {e}");
        }
    }
    r.map(|()| Outgoing::remoting(ok(req), Body::None))
}

/// Sends CHECK_TRANSACTION_STATE (oneway, as RocketMQ's broker does) to a RocketMQ producer
/// connected here, with the half message as its body; false when the connection closed.
pub(crate) async fn check_transaction(
    _core: &Front,
    conn: &ClientConn,
    check: &protocol::CheckTransaction,
) -> bool {
    let mut cmd = RemotingCommand::request(request::CHECK_TRANSACTION_STATE, conn.next_opaque());
    cmd.set_oneway();
    let wide = check.commit_log_offset | (u64::from(check.shard) << LOCAL_OFFSET_BITS);
    let f = &mut cmd.ext_fields;
    f.insert(
        "tranStateTableOffset".into(),
        check.queue_offset.to_string(),
    );
    f.insert("commitLogOffset".into(), wide.to_string());
    f.insert("msgId".into(), check.msg_id.clone());
    f.insert("transactionId".into(), check.msg_id.clone());
    let mut body = BytesMut::from(&check.record[..]);
    let queue_id = message::RecordView::parse(&check.record).map_or(0, |v| v.queue_id());
    Restamp {
        queue_id,
        shard: check.shard,
    }
    .apply(&mut body);
    if let Ok(v) = message::RecordView::parse(&check.record) {
        let id =
            remoting::message::encode_offset_msg_id(SocketAddr::V4(v.store_host()), wide as i64);
        cmd.ext_fields.insert("offsetMsgId".into(), id);
    }
    conn.notify(cmd, body.freeze()).await
}

/// Tells the RocketMQ clients among `members` that have a connection on this core that
/// `group`'s members changed (NOTIFY_CONSUMER_IDS_CHANGED, oneway), so they rebalance now
/// rather than at their next 20 s rebalance.
pub(crate) async fn notify_members(core: &Front, group: &str, members: &[String]) {
    for m in members {
        let Some(conn) = core.clients.of_client(m) else {
            continue;
        };
        if !conn.speaks_remoting() {
            continue;
        }
        let mut cmd =
            RemotingCommand::request(request::NOTIFY_CONSUMER_IDS_CHANGED, conn.next_opaque());
        cmd.set_oneway();
        cmd.ext_fields
            .insert("consumerGroup".into(), group.to_owned());
        if !conn.notify(cmd, Bytes::new()).await {
            tracing::debug!(client_id = %m, %group, "cannot tell a client of a group change: its connection closed");
        }
    }
}

/// Tells the RocketMQ client (or proxy) connected here as `evicted.client` that it no longer
/// holds lite topic `evicted.lite` (NOTIFY_UNSUBSCRIBE_LITE, oneway); false when it has no
/// connection here.
pub(crate) async fn notify_unsubscribe_lite(
    core: &Front,
    evicted: &broker_core::lite::Evicted,
) -> bool {
    let Some(conn) = core.clients.of_client(&evicted.client) else {
        return false;
    };
    if !conn.speaks_remoting() {
        return false;
    }
    let mut cmd = RemotingCommand::request(request::NOTIFY_UNSUBSCRIBE_LITE, conn.next_opaque());
    cmd.set_oneway();
    let f = &mut cmd.ext_fields;
    f.insert("liteTopic".into(), evicted.lite.clone());
    f.insert("consumerGroup".into(), evicted.group.clone());
    f.insert("clientId".into(), evicted.client.clone());
    conn.notify(cmd, Bytes::new()).await
}

pub(super) fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, response::SUCCESS, None)
}

fn header<H: remoting::headers::ExtHeader>(req: &RemotingCommand) -> Result<H, BrokerError> {
    req.ext_header()
        .map_err(|e| BrokerError::BadRequest(e.to_string()))
}

pub(crate) fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BrokerError> {
    body::from_json(body).map_err(|e| BrokerError::BadRequest(e.to_string()))
}

pub(super) fn json_answer<T: serde::Serialize>(
    req: &RemotingCommand,
    value: &T,
) -> Result<Outgoing, BrokerError> {
    let b = body::to_json(value, JsonForm::Standard)
        .map_err(|e| BrokerError::Storage(e.to_string()))?;
    Ok(Outgoing::remoting(
        ok(req),
        Body::Owned(vec![Bytes::from(b)]),
    ))
}

/// A queue id from the wire, refused when negative.
fn queue_number(id: i32) -> Result<u32, BrokerError> {
    u32::try_from(id).map_err(|_| BrokerError::BadRequest(format!("queue id {id} is negative")))
}

/// The core a request is for: the one its broker name names, or else the one serving the
/// connection (a client connects to the address the route gives for that name).
fn target_core(core: &Front, broker_name: Option<&str>) -> u16 {
    broker_name
        .and_then(|n| core_of_broker_name(&core.shared.config.broker_name, n, core.shared.cores))
        .unwrap_or(core.id)
}

/// The topic's config, for reading: `TopicNotExist` when it has none.
pub(super) fn topic_config(core: &Front, topic: &str) -> Result<TopicConfig, BrokerError> {
    core.topics
        .borrow()
        .get(topic)
        .cloned()
        .ok_or_else(|| BrokerError::TopicNotExist(topic.to_owned()))
}

/// A queue named by a request (topic, the core's queue number, broker name) as the topic's
/// queue id.
pub(super) fn global_queue(
    core: &Front,
    topic: &str,
    local: i32,
    broker_name: Option<&str>,
) -> Result<(u32, CoreQueues), BrokerError> {
    let cfg = topic_config(core, topic)?;
    let queues = CoreQueues::of(core, topic, &cfg, target_core(core, broker_name));
    let global = queues.global(topic, queue_number(local)?)?;
    Ok((global, queues))
}

async fn send(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    body: Bytes,
) -> Result<Outgoing, BrokerError> {
    let h = SendHeaderRef::parse(&req.ext_fields)
        .map_err(|e| BrokerError::BadRequest(e.to_string()))?;
    let batch = req.code == request::SEND_BATCH_MESSAGE || h.batch;
    let topic = h.topic;
    let cfg = core.send_queues(topic).await?;
    let queues = CoreQueues::of_queues(core, topic, cfg, target_core(core, h.broker_name));
    // RocketMQ 5's Proxy names no queue (-1): the broker picks one.
    let local = if h.queue_id < 0 {
        None
    } else {
        Some(queue_number(h.queue_id)?)
    };
    // A producer that learnt its queues from the route of TBW102 (the topic did not exist
    // yet) numbers them by that route: past this core's queues of the real topic, any queue
    // serves, at the cost of a hop.
    let global = match local.map(|l| (l, queues.global(topic, l))) {
        None => any_queue(core, &queues, cfg.write_queues),
        Some((_, Ok(g))) => g,
        Some((l, Err(_))) if cfg.write_queues > 0 => l % cfg.write_queues,
        Some((_, Err(e))) => return Err(e),
    };
    // A priority message (RocketMQ 5.4) goes to the core's queue of its priority, whatever
    // queue the client named; one of a type ranked before PRIORITY loses the property. A
    // batch is stored as the client sent it, as RocketMQ's broker stores one.
    // Most sends name no priority: one search of the properties tells, where parsing them
    // took a pass over every pair.
    let props = h.properties.unwrap_or("");
    let priority = if batch || !props.contains(PROPERTY_PRIORITY) {
        Priority::None
    } else {
        priority_of(remoting::message::properties_of(props))
    };
    let global = match priority {
        Priority::Level(p) => priority_queue(&queues.ids, cfg.write_queues, p).unwrap_or(global),
        _ => global,
    };
    let drop_priority = priority == Priority::Dropped;
    let born_host = client.peer_v4;
    let messages = if batch {
        let messages = remoting::message::decode_batch(&body)
            .map_err(|e| BrokerError::MessageIllegal(format!("batch body: {e}")))?;
        Some(messages)
    } else {
        None
    };
    let cluster = core.shared.config.cluster_name.as_str();
    // What RocketMQ's broker stamps on every message it stores: the cluster (the replier of
    // a request names the reply topic after it), and the region and trace switch, which the
    // consumer's trace records carry (the 5.x client's trace dispatcher drops a record
    // without a region).
    let stamped = [
        (crate::reply::prop::CLUSTER, cluster),
        (remoting::message::property::MSG_REGION, REGION_ID),
        (remoting::message::property::TRACE_SWITCH, "true"),
    ];
    // Room for the bodies and their properties (a batch's body holds them all), and per
    // record its fixed fields, its topic and the properties the broker adds, so that
    // encoding never grows (and copies) the buffer: a batch of 3 MiB would otherwise be
    // copied once more as it outgrew a guess.
    let per_record = message::FIXED_BYTES
        + topic.len()
        + message::CRC_TRAILER_BYTES
        + stamped
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>();
    let props_len = props.len();
    let records_max = messages.as_ref().map_or(1, Vec::len);
    let mut records = Vec::with_capacity(body.len() + props_len + records_max * per_record);
    // Each record's length, for its offset message id.
    let mut lens = Vec::with_capacity(records_max);
    let mut is_request = false;
    // Whether a message names a delivery time or delay level: only then is a recall handle
    // worked out (the common send pays one look at its keys).
    let mut scheduled = false;
    // Each record's properties, in one vector for all of a batch's records.
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(16);
    let mut add = |body: &[u8], flag: i32, props| -> Result<(), BrokerError> {
        let start = records.len();
        // `__TIMER_FROM` marks the broker's own delivered copies (`crate::timer`): a client
        // cannot set it (one forwarding a message it received would otherwise send it too).
        pairs.clear();
        pairs.extend(remoting::message::properties_of(props).filter(|(k, _)| {
            *k != message::timer::TIMER_FROM && !(drop_priority && *k == PROPERTY_PRIORITY)
        }));
        is_request |= pairs
            .iter()
            .any(|(k, _)| *k == crate::reply::prop::REPLY_TO_CLIENT);
        scheduled |= pairs.iter().any(|(k, _)| message::timer::KEYS.contains(k));
        for (key, value) in stamped {
            if !pairs.iter().any(|(k, _)| *k == key) {
                pairs.push((key, value));
            }
        }
        encode_record(
            &MessageFields {
                topic,
                body,
                flag,
                sys_flag: h.sys_flag,
                born_timestamp_ms: h.born_timestamp,
                born_host,
                reconsume_times: h.reconsume_times.unwrap_or(0),
                properties: &pairs,
            },
            &mut records,
        )
        .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
        lens.push((records.len() - start) as u64);
        Ok(())
    };
    if let Some(messages) = &messages {
        for m in messages {
            add(&m.body, m.flag, &m.properties)?;
        }
    } else {
        add(&body, h.flag, props)?;
    }
    let count = lens.len() as u32;
    if is_request {
        // The replier will send to the reply topic: it exists from the first request on.
        core.ensure_reply_topic().await;
    }
    let records = Bytes::from(records);
    // A message of a LITE parent goes to the queue that holds its lite topic
    // (`broker_core::lite`), on whichever core that is.
    let lite = if broker_core::lite::is_lite_topic(&core.topics.borrow(), topic) {
        let named = remoting::message::properties_of(props)
            .find(|(k, _)| *k == broker_core::lite::PROPERTY_LITE_TOPIC)
            .map(|(_, v)| v.to_owned());
        match named {
            Some(l) if !batch => Some(l),
            _ => {
                return Err(BrokerError::MessageIllegal(format!(
                    "topic {topic} is a LITE topic: each message is sent alone and names its lite topic ({})",
                    broker_core::lite::PROPERTY_LITE_TOPIC
                )))
            }
        }
    } else {
        None
    };
    // A scheduled message sent alone can be recalled (RocketMQ 5.3.2): its record is kept
    // for the handle (a clone of the bytes costs an allocation, so only then).
    let kept = (scheduled && !batch).then(|| records.clone());
    let (sent, global) = match &lite {
        Some(l) => (
            core.lite_send(topic, l, records).await,
            broker_core::lite::lite_queue(l, cfg.write_queues),
        ),
        None => (core.send(topic, global, records, count).await, global),
    };
    let recall_handle = |a: &crate::error::Appended| {
        kept.as_ref()
            .and_then(|records| core.recall_handle(records, a))
    };
    let queue_id = match &lite {
        Some(_) => crate::numbering::client_queue_id(core, topic, global) as i32,
        None => queues.local(global).or(local).unwrap_or(global) as i32,
    };
    // As RocketMQ's broker answers: the transaction id is the message's UNIQ_KEY (RocketMQ
    // 5's Proxy hands it to a v5 client, which ends the transaction with it).
    let transaction_id = if batch {
        None
    } else {
        remoting::message::properties_of(props)
            .find(|(k, _)| *k == remoting::message::property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .map(|(_, v)| v.to_owned())
    };
    if let (Priority::Level(p), Ok(_)) = (priority, &sent) {
        core.priority.count_sent(p);
    }
    match sent {
        Ok(out) => {
            // A retry answered with its original (`broker_core::dedup`) names the original's
            // queue, numbered as the core that holds it numbers its queues.
            let queue_id = if out.queue_id == global {
                queue_id
            } else {
                crate::numbering::client_queue_id(core, topic, out.queue_id) as i32
            };
            let mut resp = send_result(&out.appended, out.store_host, &lens, queue_id);
            resp.transaction_id = transaction_id;
            resp.recall_handle = recall_handle(&out.appended);
            Ok(Outgoing::remoting(ok(req).with_header(&resp), Body::None))
        }
        // Stored on the master, not acknowledged by its replicas in time: RocketMQ answers
        // FLUSH_SLAVE_TIMEOUT with the send result (its clients report
        // SendStatus.FLUSH_SLAVE_TIMEOUT, the message stored).
        Err(BrokerError::FlushSlaveTimeout {
            reason,
            stored: Some(a),
        }) => {
            let mut resp = send_result(&a, core.store_host_of(a.shard), &lens, queue_id);
            resp.transaction_id = transaction_id;
            resp.recall_handle = recall_handle(&a);
            let remark = BrokerError::flush_slave_timeout(reason).to_string();
            let answer =
                RemotingCommand::response_to(req, response::FLUSH_SLAVE_TIMEOUT, Some(remark));
            Ok(Outgoing::remoting(answer.with_header(&resp), Body::None))
        }
        Err(e) => Err(e),
    }
}

/// The queue (the topic's queue id) of a send that names none, as RocketMQ 5's Proxy sends
/// (queue id -1): this core's writable queues in turn, so the send stays on the core; when
/// the core holds none of them, the topic's writable queues in turn. (RocketMQ's broker
/// picks one of the topic's writable queues at random.)
fn any_queue(core: &Front, queues: &CoreQueues, write_queues: u32) -> u32 {
    core_queue(queues, write_queues, core.queue_numbers.next_turn())
}

/// The `turn`-th of the core's writable queues (`queues`, the core's of a topic with
/// `write_queues` writable ones), round; the topic's `turn`-th when the core holds none.
pub(crate) fn core_queue(queues: &CoreQueues, write_queues: u32, turn: u32) -> u32 {
    let own = protocol::core_view::core_queue_count(&queues.ids, write_queues);
    match queues.ids.get((turn % own.max(1)) as usize) {
        Some(&global) if own > 0 => global,
        // No writable queue at all is refused by the send (`QueueNotExist`).
        _ => turn % write_queues.max(1),
    }
}

/// A reply of request-reply (SEND_REPLY_MESSAGE, v1 or v2 header): pushed to the requester
/// over its connection (PUSH_REPLY_MESSAGE_TO_CLIENT), stored too with
/// `store_reply_message_enable`. Answered as RocketMQ does: SUCCESS with msgId "0" once
/// pushed, SYSTEM_ERROR with the reason when the requester's connection is not found.
async fn send_reply(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    body: Bytes,
) -> Result<Outgoing, BrokerError> {
    let h: SendMessageRequestHeader = header(req)?;
    let reply = crate::reply::ReplyPush {
        producer_group: h.producer_group.clone(),
        topic: h.topic.clone(),
        queue_id: h.queue_id,
        body,
        flag: h.flag,
        sys_flag: h.sys_flag,
        born_timestamp_ms: h.born_timestamp,
        born_host: client.peer_v4,
        reconsume_times: h.reconsume_times.unwrap_or(0),
        properties: remoting::message::decode_properties(h.properties.as_deref().unwrap_or("")),
    };
    match core.reply(reply).await {
        Ok(()) => {
            let resp = SendMessageResponseHeader {
                msg_id: "0".into(),
                queue_id: h.queue_id.max(0),
                queue_offset: 0,
                transaction_id: None,
                recall_handle: None,
            };
            Ok(Outgoing::remoting(ok(req).with_header(&resp), Body::None))
        }
        Err(e) => Ok(Outgoing::remoting(
            RemotingCommand::response_to(req, response::SYSTEM_ERROR, Some(e.to_string())),
            Body::None,
        )),
    }
}

/// The send result of records of `lens` bytes stored at `a`. Offset message ids: the store
/// host and the record's physical offset, the shard in its top 16 bits; one per record of a
/// batch, comma-separated, as RocketMQ answers.
fn send_result(
    a: &crate::mesh::Appended,
    store_host: std::net::SocketAddrV4,
    lens: &[u64],
    queue_id: i32,
) -> SendMessageResponseHeader {
    // One id per record, comma-separated, in one string.
    let mut ids = String::with_capacity(lens.len() * (32 + 1));
    let mut at = a.first_commit_log_offset.0;
    for len in lens {
        let off = at | (u64::from(a.shard) << LOCAL_OFFSET_BITS);
        if !ids.is_empty() {
            ids.push(',');
        }
        remoting::message::push_offset_msg_id(&mut ids, SocketAddr::V4(store_host), off as i64);
        at += len;
    }
    SendMessageResponseHeader {
        msg_id: ids,
        queue_id,
        queue_offset: a.first_queue_offset.0 as i64,
        transaction_id: None,
        recall_handle: None,
    }
}

async fn pull(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: PullMessageRequestHeader = header(req)?;
    let (global, queues) = global_queue(core, &h.topic, h.queue_id, h.broker_name.as_deref())?;
    let local = queue_number(h.queue_id)?;
    if h.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0 && h.commit_offset >= 0 {
        commit(
            core,
            &h.consumer_group,
            &h.topic,
            global,
            h.commit_offset as u64,
            "",
        )
        .await?;
    }
    let suspend = if h.sys_flag & PULL_FLAG_SUSPEND != 0 {
        h.suspend_timeout_millis.max(0) as u64
    } else {
        0
    };
    let (tag_expression, sql92) = match h.expression_type.as_deref() {
        None | Some("TAG") => (h.subscription.clone().unwrap_or_else(|| "*".into()), None),
        Some(SQL92) => {
            // A Java push consumer posts its subscription only with postSubscriptionWhenPull
            // (off by default): else the group's latest heartbeat has it.
            let expression = match h.subscription.clone().filter(|s| !s.is_empty()) {
                Some(s) => s,
                None => core
                    .rocketmq
                    .sql92_of(&h.consumer_group, &h.topic)
                    .ok_or_else(|| BrokerError::SubscriptionNotExist {
                        group: h.consumer_group.clone(),
                        topic: h.topic.clone(),
                    })?,
            };
            ("*".to_owned(), Some(expression))
        }
        Some(other) => {
            return Err(BrokerError::Unsupported(format!(
                "expression type {other}: corvus filters by TAG or SQL92"
            )))
        }
    };
    let pulled = core
        .pull_filtered(
            protocol::PullRequest {
                consumer_group: h.consumer_group.clone(),
                topic: h.topic.clone(),
                queue_id: global,
                queue_offset: h.queue_offset.max(0) as u64,
                max_messages: h.max_msg_nums.clamp(1, 1024) as u32,
                max_bytes: h
                    .max_msg_bytes
                    .and_then(|b| u32::try_from(b).ok())
                    .filter(|&b| b > 0)
                    .unwrap_or(PULL_BYTES_MAX_DEFAULT),
                tag_expression,
                suspend_timeout_ms: suspend,
            },
            sql92,
        )
        .await?;
    let next = pulled.next_offset.0;
    let code = match pulled.status {
        PullStatus::Found => response::SUCCESS,
        // Entries stepped over (filtered out): the client moves to `next` and pulls again.
        PullStatus::NoNewMessage if next > h.queue_offset.max(0) as u64 => {
            response::PULL_RETRY_IMMEDIATELY
        }
        PullStatus::NoNewMessage => response::PULL_NOT_FOUND,
        PullStatus::OffsetMoved => response::PULL_OFFSET_MOVED,
    };
    let resp = PullMessageResponseHeader {
        suggest_which_broker_id: pulled.suggest_broker_id as i64,
        next_begin_offset: next as i64,
        min_offset: pulled.min_offset.0 as i64,
        max_offset: pulled.max_offset.0 as i64,
        offset_delta: None,
        topic_sys_flag: None,
        group_sys_flag: None,
    };
    let restamp = Restamp {
        queue_id: local,
        shard: protocol::queue_owner_shard(&h.topic, global, core.shared.shard_count),
    };
    debug_assert_eq!(queues.local(global), Some(local));
    let body = if code != response::SUCCESS {
        Body::None
    } else {
        match pulled.body {
            PullBody::Local(v) => Body::Restamped(v, restamp),
            PullBody::Owned(v) => Body::Owned(
                v.into_iter()
                    .map(|b| {
                        let mut m = BytesMut::from(&b[..]);
                        restamp.apply(&mut m);
                        m.freeze()
                    })
                    .collect(),
            ),
        }
    };
    Ok(Outgoing::remoting(
        RemotingCommand::response_to(req, code, None).with_header(&resp),
        body,
    ))
}

async fn commit(
    core: &Front,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
    client_id: &str,
) -> Result<(), BrokerError> {
    let op = OffsetOp::Commit(CommitOffset {
        queue: GroupQueue {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
        },
        offset,
        // RocketMQ clients know no epochs: their commit is never taken as stale.
        epoch: crate::groups::EPOCH_ANY,
        client_id: client_id.to_owned(),
        release: false,
    });
    core.group_offset(op).await.map(|_| ())
}

async fn heartbeat(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let hb: body::HeartbeatData = json_body(body)?;
    if hb.client_id.is_empty() || hb.client_id.len() > 255 {
        return Err(BrokerError::BadRequest(
            "clientID must be 1..=255 bytes".into(),
        ));
    }
    check_heartbeat_bounds(&core.config(), &hb)?;
    core.clients.identified(client, &hb.client_id);
    core.rocketmq.heartbeat(
        &hb.client_id,
        admin::SeenClient {
            addr: client.peer.clone(),
            language: req.language.name().to_owned(),
            version: req.version,
            producer_groups: hb
                .producer_data_set
                .iter()
                .map(|p| p.group_name.clone())
                .collect(),
            consumers: hb.consumer_data_set.clone(),
            at: core.shared.clock.now(),
        },
    );
    for p in &hb.producer_data_set {
        // The client's own internal producer is no group a transaction belongs to.
        if p.group_name != "CLIENT_INNER_PRODUCER" && !p.group_name.is_empty() {
            core.clients.produces(client, &p.group_name);
        }
    }
    client.set_consumer_groups(
        hb.consumer_data_set
            .iter()
            .filter(|c| c.message_model != body::MessageModel::Broadcasting)
            .map(|c| c.group_name.clone())
            .collect(),
    );
    for c in &hb.consumer_data_set {
        // Broadcasting consumers keep their offsets themselves and share no queues.
        if c.message_model == body::MessageModel::Broadcasting {
            continue;
        }
        core.group(GroupOp::Heartbeat {
            group: c.group_name.clone(),
            client_id: hb.client_id.clone(),
        })
        .await?;
        // As RocketMQ does at a group's heartbeat: its retry topic, which its members
        // subscribe to by themselves, exists from then on.
        ensure_topic(core, &retry_topic(&c.group_name), perm::READ | perm::WRITE).await?;
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// Refuses a heartbeat that declares more groups or subscriptions than the broker keeps
/// for one client (`heartbeat_groups_max`, `heartbeat_subscriptions_max`), or a group
/// name longer than 255 bytes: what a heartbeat declares is held for the client, and each
/// consumer group gets a retry topic.
fn check_heartbeat_bounds(
    cfg: &crate::config::BrokerConfig,
    hb: &body::HeartbeatData,
) -> Result<(), BrokerError> {
    let groups = hb.producer_data_set.len().max(hb.consumer_data_set.len()) as u64;
    if groups > cfg.heartbeat_groups_max {
        return Err(BrokerError::BadRequest(format!(
            "the heartbeat declares {} producer and {} consumer groups: at most {} of each \
             (heartbeat_groups_max)",
            hb.producer_data_set.len(),
            hb.consumer_data_set.len(),
            cfg.heartbeat_groups_max
        )));
    }
    let producer_names = hb.producer_data_set.iter().map(|p| &p.group_name);
    let consumer_names = hb.consumer_data_set.iter().map(|c| &c.group_name);
    if let Some(bad) = producer_names.chain(consumer_names).find(|n| n.len() > 255) {
        return Err(BrokerError::BadRequest(format!(
            "group name of {} bytes: at most 255",
            bad.len()
        )));
    }
    if let Some(c) = hb
        .consumer_data_set
        .iter()
        .find(|c| c.subscription_data_set.len() as u64 > cfg.heartbeat_subscriptions_max)
    {
        return Err(BrokerError::BadRequest(format!(
            "consumer group {} declares {} subscriptions: at most {} \
             (heartbeat_subscriptions_max)",
            c.group_name,
            c.subscription_data_set.len(),
            cfg.heartbeat_subscriptions_max
        )));
    }
    Ok(())
}

/// CHECK_CLIENT_CONFIG: a consumer starting with a SQL92 subscription asks whether this
/// broker takes it; a refusal (filters off: SYSTEM_ERROR; a bad expression:
/// SUBSCRIPTION_PARSE_FAILED) makes the Java client's `start()` throw with the remark.
fn check_client_config(
    core: &Front,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let b: body::CheckClientRequestBody = json_body(body)?;
    let s = &b.subscription_data;
    match s.expression_type.as_deref() {
        None | Some("") | Some("TAG") => {}
        Some(SQL92) => core.check_sql92(&s.sub_string)?,
        Some(other) => {
            return Err(BrokerError::Unsupported(format!(
                "expression type {other}: corvus filters by TAG or SQL92"
            )))
        }
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}

async fn unregister(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: UnregisterClientRequestHeader = header(req)?;
    core.rocketmq.forget(&h.client_id);
    if let Some(group) = h.consumer_group.filter(|g| !g.is_empty()) {
        // Its queue locks first: the members told of the change lock its queues at once.
        core.release_leases(&group, &h.client_id).await?;
        core.group(GroupOp::Unregister {
            group,
            client_id: h.client_id,
        })
        .await?;
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// A RocketMQ client's connection closed. As RocketMQ's broker does when a client's
/// channel closes, the client leaves the consumer groups its heartbeats declared (the members
/// that stay are told, and rebalance at once), unless it still has a connection open on some
/// core. Its queue locks end with it: a killed orderly consumer does not hold its queues
/// until the locks run out.
pub(crate) async fn connection_closed(core: &Rc<Front>, client: &ClientConn) {
    let Some(client_id) = client.client_id() else {
        return;
    };
    let groups = client.consumer_groups();
    if groups.is_empty() {
        return;
    }
    match core.client_connected(&client_id).await {
        Ok(false) => {}
        Ok(true) => return,
        Err(e) => {
            tracing::debug!(%client_id, "cannot tell whether the client is still connected: {e}");
            return;
        }
    }
    for group in groups {
        let left = async {
            core.release_leases(&group, &client_id).await?;
            core.group(GroupOp::Unregister {
                group: group.clone(),
                client_id: client_id.clone(),
            })
            .await
        };
        if let Err(e) = left.await {
            tracing::debug!(%group, %client_id, "a closed client's leave failed: {e}");
        }
    }
}

async fn consumer_list(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: ConsumerGroupRequestHeader = header(req)?;
    let v = core
        .group(GroupOp::WaitChange {
            group: h.consumer_group,
            known_version: u64::MAX,
            timeout_ms: 0,
        })
        .await?;
    json_answer(
        req,
        &body::ConsumerListBody {
            consumer_id_list: v.members,
        },
    )
}

fn offset_answer(req: &RemotingCommand, offset: u64) -> Outgoing {
    let h = OffsetResponseHeader {
        offset: offset as i64,
    };
    Outgoing::remoting(ok(req).with_header(&h), Body::None)
}

async fn query_offset(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: QueryConsumerOffsetRequestHeader = header(req)?;
    let (global, _) = global_queue(core, &h.topic, h.queue_id, None)?;
    let stored = core
        .group_offset(OffsetOp::Query(GroupQueue {
            group: h.consumer_group.clone(),
            topic: h.topic.clone(),
            queue_id: global,
        }))
        .await?;
    if let Some(s) = stored {
        return Ok(offset_answer(req, s.offset));
    }
    // As RocketMQ answers a group with no offset yet: 0 while the queue still holds its
    // first message (a new group then reads from the start whatever it asked), else
    // "not found" and the client starts where its consumeFromWhere says.
    let (min, _) = core.queue_offsets(&h.topic, global).await?;
    if min == 0 && h.set_zero_if_not_found != Some(false) {
        return Ok(offset_answer(req, 0));
    }
    Ok(Outgoing::remoting(
        RemotingCommand::response_to(
            req,
            response::QUERY_NOT_FOUND,
            Some("no committed offset".into()),
        ),
        Body::None,
    ))
}

async fn update_offset(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let h: UpdateConsumerOffsetRequestHeader = header(req)?;
    let (global, _) = global_queue(core, &h.topic, h.queue_id, None)?;
    let client_id = client.client_id().unwrap_or_default();
    commit(
        core,
        &h.consumer_group,
        &h.topic,
        global,
        h.commit_offset.max(0) as u64,
        &client_id,
    )
    .await?;
    Ok(Outgoing::remoting(ok(req), Body::None))
}

async fn max_offset(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: GetMaxOffsetRequestHeader = header(req)?;
    let (global, _) = global_queue(core, &h.topic, h.queue_id, None)?;
    let (_, max) = core.queue_offsets(&h.topic, global).await?;
    Ok(offset_answer(req, max))
}

async fn min_offset(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: GetMinOffsetRequestHeader = header(req)?;
    let (global, _) = global_queue(core, &h.topic, h.queue_id, None)?;
    let (min, _) = core.queue_offsets(&h.topic, global).await?;
    Ok(offset_answer(req, min))
}

async fn search_offset(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: SearchOffsetRequestHeader = header(req)?;
    let (global, _) = global_queue(core, &h.topic, h.queue_id, None)?;
    let off = core.search_offset(&h.topic, global, h.timestamp).await?;
    Ok(offset_answer(req, off))
}

/// Records as a remoting body: each restamped with its own shard and its queue's number on
/// the core that owns it.
pub(super) fn records_body(core: &Front, records: Vec<Bytes>) -> Body {
    Body::Owned(
        records
            .into_iter()
            .map(|b| {
                let Ok(v) = message::RecordView::parse(&b) else {
                    return b;
                };
                let topic = v.topic();
                let shard =
                    protocol::queue_owner_shard(topic, v.queue_id(), core.shared.shard_count);
                let local = crate::numbering::client_queue_id(core, topic, v.queue_id());
                let mut m = BytesMut::from(&b[..]);
                Restamp {
                    queue_id: local,
                    shard,
                }
                .apply(&mut m);
                m.freeze()
            })
            .collect(),
    )
}

async fn view_message(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let h: ViewMessageRequestHeader = header(req)?;
    let off = u64::try_from(h.offset)
        .map_err(|_| BrokerError::BadRequest(format!("offset {} is negative", h.offset)))?;
    let shard = (off >> LOCAL_OFFSET_BITS) as u16;
    let local = off & message::ids::LOCAL_OFFSET_MAX;
    let recs = core.view_by_offset(shard, local).await?;
    // The id named no topic: the account must hold SUB on the one found.
    for r in &recs {
        let topic = message::RecordView::parse(r).map(|v| v.topic().to_owned());
        core.acl.check_lookup(
            client,
            req.ext(acl::sign::ACCESS_KEY),
            topic.as_deref().unwrap_or(""),
            "VIEW_MESSAGE_BY_ID",
        )?;
    }
    Ok(Outgoing::remoting(ok(req), records_body(core, recs)))
}

async fn query_message(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: QueryMessageRequestHeader = header(req)?;
    // Only this core's shards: a RocketMQ client asks every broker of the topic's route,
    // and each core is one of them.
    let recs = core
        .query_local(&protocol::QueryByKey {
            topic: h.topic,
            key: h.key,
            begin_ms: h.begin_timestamp,
            end_ms: h.end_timestamp,
            max: u32::try_from(h.max_num).unwrap_or(1),
        })
        .await?;
    if recs.is_empty() {
        return Ok(Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                response::QUERY_NOT_FOUND,
                Some("no message with that key".into()),
            ),
            Body::None,
        ));
    }
    let resp = QueryMessageResponseHeader {
        index_last_update_timestamp: 0,
        index_last_update_phyoffset: 0,
    };
    Ok(Outgoing::remoting(
        ok(req).with_header(&resp),
        records_body(core, recs),
    ))
}

/// The queues of a lock request, each as the topic's queue id; one this broker does not
/// hold is left out (a client asks each broker for its own).
fn lock_queues(core: &Front, b: &body::LockBatchRequestBody) -> Vec<(body::MessageQueue, u32)> {
    b.mq_set
        .iter()
        .filter_map(|mq| {
            let (global, _) =
                global_queue(core, &mq.topic, mq.queue_id, Some(&mq.broker_name)).ok()?;
            Some((mq.clone(), global))
        })
        .collect()
}

async fn lock_batch(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let b: body::LockBatchRequestBody = json_body(body)?;
    let mut locked = Vec::new();
    for (mq, global) in lock_queues(core, &b) {
        let op = OffsetOp::Lock {
            queue: GroupQueue {
                group: b.consumer_group.clone(),
                topic: mq.topic.clone(),
                queue_id: global,
            },
            client_id: b.client_id.clone(),
            lease_ms: LOCK_LEASE_MS,
        };
        match core.group_offset(op).await {
            Ok(_) => locked.push(mq),
            Err(BrokerError::QueueLocked(_)) => {}
            Err(e) => return Err(e),
        }
    }
    json_answer(
        req,
        &body::LockBatchResponseBody {
            lock_ok_mq_set: locked,
        },
    )
}

async fn unlock_batch(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let b: body::UnlockBatchRequestBody = json_body(body)?;
    for (mq, global) in lock_queues(core, &b) {
        // The lease ends now, whether or not the group ever committed an offset of the
        // queue: the member that takes the queue over locks it at its next rebalance.
        let op = OffsetOp::Unlock {
            queue: GroupQueue {
                group: b.consumer_group.clone(),
                topic: mq.topic.clone(),
                queue_id: global,
            },
            client_id: b.client_id.clone(),
        };
        core.group_offset(op).await?;
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// The topic a group's failed messages go back to (RocketMQ's `%RETRY%<group>`).
fn retry_topic(group: &str) -> String {
    format!("%RETRY%{group}")
}

/// Where a group's messages go after too many failures (RocketMQ's `%DLQ%<group>`).
fn dead_letter_topic(group: &str) -> String {
    format!("%DLQ%{group}")
}

/// RocketMQ's permission bits.
mod perm {
    pub const READ: u32 = 4;
    pub const WRITE: u32 = 2;
}

/// Creates `topic` with RocketMQ's shape for a group's retry or dead-letter topic unless it
/// exists: one queue on every broker, which here is one queue per shard, so that every core
/// (every RocketMQ broker of the routes) holds at least one. RocketMQ's tools look for a
/// group's consume stats on the brokers of its retry topic's route.
async fn ensure_topic(core: &Front, topic: &str, perm: u32) -> Result<TopicConfig, BrokerError> {
    if let Some(cfg) = core.topics.borrow().get(topic) {
        return Ok(cfg.clone());
    }
    let queues = u32::from(core.shared.shard_count.max(1));
    let cfg = TopicConfig {
        name: topic.to_owned(),
        read_queues: queues,
        write_queues: queues,
        perm,
    };
    core.create_topic(cfg.clone()).await?;
    Ok(cfg)
}

/// How often a message may fail before it goes to the dead-letter topic, when the client
/// does not say (RocketMQ's maxReconsumeTimes).
const RECONSUME_TIMES_MAX_DEFAULT: i32 = 16;

/// A consumer could not process a message: it goes back to the group's retry topic (which
/// its members consume again), or to the dead-letter topic once it failed
/// `maxReconsumeTimes` times or the client asks for that (delay level < 0). RocketMQ delays
/// the retry by level `3 + reconsume times` (the `DELAY` property says which), and so does
/// corvus: the shard's timer holds it (`crate::timer`).
async fn send_back(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: remoting::headers::ConsumerSendMsgBackRequestHeader = header(req)?;
    let off = u64::try_from(h.offset)
        .map_err(|_| BrokerError::BadRequest(format!("offset {} is negative", h.offset)))?;
    let shard = (off >> LOCAL_OFFSET_BITS) as u16;
    let local = off & message::ids::LOCAL_OFFSET_MAX;
    let recs = core.view_by_offset(shard, local).await?;
    let Some(original) = recs.first() else {
        return Err(BrokerError::NotFound(format!(
            "no message at offset {}",
            h.offset
        )));
    };
    let v = message::RecordView::parse(original)
        .map_err(|e| BrokerError::Storage(format!("stored record: {e}")))?;
    let reconsume = v.reconsume_times() + 1;
    // The client's limit, else the group's stored retryMaxTimes (updateSubGroup -r), else
    // RocketMQ's default, as RocketMQ's broker decides.
    let max = match h.max_reconsume_times {
        Some(m) => m,
        None => admin::stored_retry_max(core, &h.group)
            .await
            .unwrap_or(RECONSUME_TIMES_MAX_DEFAULT),
    };
    let dead = h.delay_level < 0 || reconsume > max;
    let (topic, cfg) = if dead {
        let t = dead_letter_topic(&h.group);
        // Readable, as RocketMQ 5 creates it, so dead letters can be consumed again.
        let cfg = ensure_topic(core, &t, perm::READ | perm::WRITE).await?;
        (t, cfg)
    } else {
        let t = retry_topic(&h.group);
        let cfg = ensure_topic(core, &t, perm::READ | perm::WRITE).await?;
        (t, cfg)
    };
    // This core's queue of it, so the send back does not hop.
    let queue = CoreQueues::of(core, &topic, &cfg, core.id)
        .ids
        .first()
        .copied()
        .unwrap_or(0);
    let origin_topic = v
        .property(message::prop::RETRY_TOPIC)
        .unwrap_or(v.topic())
        .to_owned();
    // As RocketMQ's broker: the first failure's message, by its offset message id.
    let origin_id = match v.property(message::prop::ORIGIN_MESSAGE_ID) {
        Some(id) => id.to_owned(),
        None => remoting::message::encode_offset_msg_id(SocketAddr::V4(v.store_host()), h.offset),
    };
    let level = if h.delay_level > 0 {
        h.delay_level
    } else {
        3 + reconsume - 1
    };
    let level = level.to_string();
    // As RocketMQ's broker stores the copy: the original's properties, with RETRY_TOPIC,
    // ORIGIN_MESSAGE_ID, WAIT=false (it stores it without waiting) and the delay level.
    let mut props: Vec<(&str, &str)> = v
        .properties()
        .iter()
        .filter(|(k, _)| {
            ![
                message::prop::CRC,
                message::prop::RETRY_TOPIC,
                message::prop::ORIGIN_MESSAGE_ID,
                message::prop::WAIT,
                message::timer::TIMER_OUT_MS,
                message::timer::TIMER_FROM,
            ]
            .contains(k)
                && !message::timer::KEYS.contains(k)
        })
        .collect();
    props.push((message::prop::RETRY_TOPIC, &origin_topic));
    if !origin_id.is_empty() {
        props.push((message::prop::ORIGIN_MESSAGE_ID, &origin_id));
    }
    props.push((message::prop::WAIT, "false"));
    // A dead letter says level 0, as RocketMQ's does (and so is not held).
    props.push(("DELAY", if dead { "0" } else { &level }));
    let mut record = Vec::with_capacity(original.len() + 64);
    encode_record(
        &MessageFields {
            topic: &topic,
            body: v.body(),
            flag: v.flag(),
            sys_flag: v.sys_flag(),
            born_timestamp_ms: v.born_timestamp_ms(),
            born_host: Some(v.born_host()),
            reconsume_times: reconsume,
            properties: &props,
        },
        &mut record,
    )
    .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
    core.send(&topic, queue, Bytes::from(record), 1).await?;
    // As RocketMQ's broker counts SNDBCK_PUT_NUMS: by the sent-back message's own topic.
    core.count_send_back(v.topic(), &h.group);
    if dead {
        // As RocketMQ counts `rocketmq_send_to_dlq_messages_total`: by the origin topic.
        core.count_dead_letter(&origin_topic, &h.group);
        tracing::info!(group = %h.group, %origin_topic, reconsume, "a message failed too often and went to the dead-letter topic");
    }
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// UPDATE_AND_CREATE_TOPIC: creates or updates a topic, with RocketMQ 5's attribute changes
/// (`updateTopic -a +message.type=FIFO`) applied to the attributes it has, checked as
/// RocketMQ's broker checks them and answered with its codes and words when refused.
async fn create_topic(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let h: CreateTopicRequestHeader = header(req)?;
    let count = |n: i32, what: &str| {
        u32::try_from(n).map_err(|_| BrokerError::BadRequest(format!("{what} {n} is negative")))
    };
    let cfg = TopicConfig {
        name: h.topic,
        read_queues: count(h.read_queue_nums, "readQueueNums")?,
        write_queues: count(h.write_queue_nums, "writeQueueNums")?,
        perm: count(h.perm, "perm")?,
    };
    let (exists, current) = {
        let table = core.topics.borrow();
        (table.get(&cfg.name).is_some(), table.attributes(&cfg.name))
    };
    let modification = h.attributes.unwrap_or_default();
    let attributes = match crate::topics::alter_attributes(!exists, &current, modification.trim()) {
        Ok(a) => a,
        Err(e) => {
            let code = match e {
                crate::topics::TopicError::MixedMessageType => response::INVALID_PARAMETER,
                // RocketMQ's broker answers its attribute exceptions SYSTEM_ERROR.
                _ => response::SYSTEM_ERROR,
            };
            tracing::info!(topic = %cfg.name, %modification, "refused a topic's attributes: {e}");
            return Ok(Outgoing::remoting(
                RemotingCommand::response_to(req, code, Some(e.to_string())),
                Body::None,
            ));
        }
    };
    core.create_topic_with(cfg, Some(attributes)).await?;
    Ok(Outgoing::remoting(ok(req), Body::None))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_restamp_writes_the_queue_number_and_the_shard_bits_only() {
        let mut rec = vec![0u8; 64];
        rec[12..16].copy_from_slice(&7u32.to_be_bytes());
        rec[28..36].copy_from_slice(&4096u64.to_be_bytes());
        rec[40] = 0xab;
        let r = Restamp {
            queue_id: 2,
            shard: 3,
        };
        r.apply(&mut rec);
        assert_eq!(&rec[12..16], &2u32.to_be_bytes());
        let phys = u64::from_be_bytes(rec[28..36].try_into().unwrap());
        assert_eq!(phys >> LOCAL_OFFSET_BITS, 3);
        assert_eq!(phys & message::ids::LOCAL_OFFSET_MAX, 4096);
        assert_eq!(rec[40], 0xab);
    }

    #[test]
    fn corvus_codes_map_to_codes_rocketmq_clients_know() {
        let e = BrokerError::TopicNotExist("T".into());
        assert_eq!(code_of(&e), response::TOPIC_NOT_EXIST);
        let e = BrokerError::MessageTooLarge { size: 9, max: 1 };
        assert_eq!(code_of(&e), response::MESSAGE_ILLEGAL);
        let e = BrokerError::Busy("x".into());
        assert_eq!(code_of(&e), response::SYSTEM_BUSY);
        let e = BrokerError::DiskFull {
            ratio: 0.95,
            threshold: 0.9,
        };
        assert_eq!(code_of(&e), response::SERVICE_NOT_AVAILABLE);
    }
}
