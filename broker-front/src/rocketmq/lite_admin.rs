//! RocketMQ 5.5's lite admin requests, as its mqadmin sends them (getBrokerLiteInfo,
//! getParentTopicInfo, getLiteTopicInfo, getLiteClientInfo, getLiteGroupInfo,
//! triggerLiteDispatch): GET_BROKER_LITE_INFO 200074 to TRIGGER_LITE_DISPATCH 200079, with
//! RocketMQ's JSON bodies, codes and remarks, from the kernel's lite topics
//! (`broker_core::lite`, ARCHITECTURE.md "Lite Topics").
//!
//! Each core is a broker of its own, and mqadmin asks every broker of the parent's route:
//! each answer is of the core asked (its shards' lite topics, the subscriptions it keeps,
//! which are those of the lite topics it owns), as each RocketMQ broker answers for itself.
//! The groups and the parents they are bound to are the same on every core.
//!
//! **Binding.** RocketMQ binds a lite group to its parent with the group attribute
//! `lite.bind.topic`. corvus honours it where a group's config has it; a group without it is
//! bound to the parents it consumes (its lite subscriptions and cursors, on any core), so the
//! groups of clients that never stored a config are answered for too.
//!
//! **Offsets.** corvus keeps no queue per lite topic (RocketMQ's LMQ): a lite topic's offsets
//! here are positions among its messages kept, 0 being the oldest one any group still needs.
//! Differences are RocketMQ's (max - min: messages kept; max - consumer: a group's lag), the
//! base is not (messages every group consumed are not counted).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use broker_core::lite::{is_lite_topic, LiteLag, LiteTopicLag, ATTRIBUTE_EXPIRATION};
use remoting::codes::response;
use remoting::RemotingCommand;
use serde::Serialize;

use super::admin::{group_known, stored_offsets};
use super::json_answer;
use super::pop::{field, number_or};
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;
use crate::mesh::SubGroupOp;
use crate::numbering::CoreQueues;

/// The group attribute binding a lite group to its parent topic.
const ATTRIBUTE_BIND_TOPIC: &str = "lite.bind.topic";
/// What RocketMQ's GET_BROKER_LITE_INFO names the store: corvus's own CommitLog and queues.
const STORE_TYPE: &str = "corvus";
/// The most lite topics GET_LITE_CLIENT_INFO lists (RocketMQ's `MAX_RETURN_COUNT`).
const CLIENT_TOPICS_MAX: i32 = 10_000;
/// What GET_LITE_CLIENT_INFO lists when the request says nothing (RocketMQ's default).
const CLIENT_TOPICS_DEFAULT: i32 = 1_000;

/// An answer with `code` and `remark` and no body.
fn refused(req: &RemotingCommand, code: i32, remark: String) -> Outgoing {
    Outgoing::remoting(
        RemotingCommand::response_to(req, code, Some(remark)),
        Body::None,
    )
}

/// A Java `int` field from a count.
fn int(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// `topic`'s lite expiration in minutes (RocketMQ's `TopicConfig.getLiteTopicExpiration`):
/// -1 when unset or unreadable.
fn ttl(core: &Front, topic: &str) -> i32 {
    core.topics
        .borrow()
        .attribute(topic, ATTRIBUTE_EXPIRATION)
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(-1)
}

/// The LITE parent `topic` exists here, or the refusal RocketMQ gives.
fn lite_parent_or_refusal(core: &Front, req: &RemotingCommand, topic: &str) -> Option<Outgoing> {
    let topics = core.topics.borrow();
    if topics.get(topic).is_none() {
        return Some(refused(
            req,
            response::TOPIC_NOT_EXIST,
            format!("Topic [{topic}] not exist."),
        ));
    }
    if !is_lite_topic(&topics, topic) {
        return Some(refused(
            req,
            response::INVALID_PARAMETER,
            format!("Topic [{topic}] type not match."),
        ));
    }
    None
}

/// What the broker knows of a group for the lite requests.
struct LiteGroup {
    /// Whether the group exists: a stored config, lite state on some core, offsets or
    /// heartbeats here.
    exists: bool,
    /// The parents it is bound to: its `lite.bind.topic`, else those it consumes (sorted).
    parents: Vec<String>,
}

/// The group's `lite.bind.topic`, when its stored config has one.
fn bind_attribute(cfg: &crate::sub_groups::GroupConfig) -> Option<String> {
    cfg.fields()
        .get("attributes")
        .and_then(|a| a.get(ATTRIBUTE_BIND_TOPIC))
        .and_then(|v| v.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

async fn lite_group(core: &Rc<Front>, group: &str) -> Result<LiteGroup, BrokerError> {
    let stored = core
        .sub_group(SubGroupOp::List(Some(group.to_owned())))
        .await?
        .into_iter()
        .next();
    let consumed: Vec<String> = core
        .lite_group_parents()
        .await?
        .into_iter()
        .filter(|(g, _)| g == group)
        .map(|(_, parent)| parent)
        .collect();
    let exists = stored.is_some() || !consumed.is_empty() || group_known(core, group);
    let parents = match stored.as_ref().and_then(bind_attribute) {
        Some(bound) => vec![bound],
        None => consumed,
    };
    Ok(LiteGroup { exists, parents })
}

/// Every parent topic with the groups bound to it (RocketMQ's `getSubscriberGroupMap`).
async fn groups_by_parent(
    core: &Rc<Front>,
) -> Result<BTreeMap<String, BTreeSet<String>>, BrokerError> {
    let mut bound: BTreeMap<String, String> = BTreeMap::new();
    for cfg in core.sub_group(SubGroupOp::List(None)).await? {
        if let Some(parent) = bind_attribute(&cfg) {
            bound.insert(cfg.name().to_owned(), parent);
        }
    }
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (group, parent) in core.lite_group_parents().await? {
        if !bound.contains_key(&group) {
            map.entry(parent).or_default().insert(group);
        }
    }
    for (group, parent) in bound {
        map.entry(parent).or_default().insert(group);
    }
    Ok(map)
}

/// RocketMQ's `GetBrokerLiteInfoResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BrokerLiteInfo {
    store_type: &'static str,
    max_lmq_num: i32,
    current_lmq_num: i32,
    lite_subscription_count: i32,
    order_info_count: i32,
    cq_table_size: i32,
    offset_table_size: i32,
    event_map_size: i32,
    topic_meta: BTreeMap<String, i32>,
    group_meta: BTreeMap<String, BTreeSet<String>>,
}

/// GET_BROKER_LITE_INFO: this core's lite topics and what it keeps for them, with every LITE
/// parent's expiration and bound groups. RocketMQ's LMQ figures are corvus's lite topics
/// (`maxLmqNum`: this core's shards' shares of `lite_topics_max`); its ConsumeQueue table
/// holds a queue per topic and per LMQ, corvus's per topic only (`cqTableSize`: the topics
/// with a queue on this core); its order infos are corvus's lite cursors (one per group and
/// lite topic); its per-client event sets are corvus's subscribed clients (a lite pop walks
/// the client's subscriptions: there is no event queue).
async fn broker_info(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let view = core.lite_view().await?;
    let (cq_tables, topic_meta) = {
        let topics = core.topics.borrow();
        let mut cq_tables = 0u64;
        let mut meta = BTreeMap::new();
        for cfg in topics.all() {
            if !CoreQueues::of(core, &cfg.name, &cfg, core.id)
                .ids
                .is_empty()
            {
                cq_tables += 1;
            }
            if is_lite_topic(&topics, &cfg.name) {
                meta.insert(cfg.name.clone(), -1);
            }
        }
        (cq_tables, meta)
    };
    let topic_meta = topic_meta
        .into_keys()
        .map(|t| {
            let ttl = ttl(core, &t);
            (t, ttl)
        })
        .collect();
    let offset_keys: BTreeSet<(String, String)> = stored_offsets(core)
        .into_iter()
        .map(|(q, _)| (q.topic, q.group))
        .collect();
    let body = BrokerLiteInfo {
        store_type: STORE_TYPE,
        max_lmq_num: int(view.lite_topics_max),
        current_lmq_num: int(view.lite_topics),
        lite_subscription_count: int(view.subscriptions),
        order_info_count: int(view.cursors),
        cq_table_size: int(cq_tables),
        offset_table_size: int(offset_keys.len() as u64),
        event_map_size: int(view.clients),
        topic_meta,
        group_meta: groups_by_parent(core).await?,
    };
    json_answer(req, &body)
}

/// RocketMQ's `GetParentTopicInfoResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ParentTopicInfo {
    topic: String,
    ttl: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<BTreeSet<String>>,
    lmq_num: i32,
    lite_topic_count: i32,
}

/// GET_PARENT_TOPIC_INFO: a LITE parent's expiration, bound groups, and the lite topics this
/// core holds of it (`liteTopicCount`) and of every parent (`lmqNum`).
async fn parent_topic_info(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let topic = field(req, "topic")?.to_owned();
    if let Some(refusal) = lite_parent_or_refusal(core, req, &topic) {
        return Ok(refusal);
    }
    let view = core.lite_view().await?;
    let count = view
        .by_parent
        .iter()
        .find(|(p, _)| *p == topic)
        .map_or(0, |(_, n)| *n);
    let groups = groups_by_parent(core).await?.remove(&topic);
    let body = ParentTopicInfo {
        ttl: ttl(core, &topic),
        topic,
        groups,
        lmq_num: int(view.lite_topics),
        lite_topic_count: int(count),
    };
    json_answer(req, &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientGroup {
    client_id: String,
    group: String,
}

/// RocketMQ's `TopicOffset`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicOffset {
    min_offset: u64,
    max_offset: u64,
    last_update_timestamp: i64,
}

/// RocketMQ's `GetLiteTopicInfoResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LiteTopicInfo {
    parent_topic: String,
    lite_topic: String,
    subscriber: Vec<ClientGroup>,
    topic_offset: TopicOffset,
    sharding_to_broker: bool,
}

/// GET_LITE_TOPIC_INFO: one lite topic on this core: whether this core owns it
/// (`shardingToBroker`: its queue is on this core's shard), its messages kept (offsets from
/// 0, see the module doc), its last write and the clients subscribed to it here.
async fn lite_topic_info(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = field(req, "parentTopic")?.to_owned();
    let lite = req.ext("liteTopic").unwrap_or("").to_owned();
    if let Some(refusal) = lite_parent_or_refusal(core, req, &topic) {
        return Ok(refusal);
    }
    let view = core.lite_topic_view(&topic, &lite).await?;
    let body = LiteTopicInfo {
        parent_topic: topic,
        lite_topic: lite,
        subscriber: view
            .subscribers
            .into_iter()
            .map(|(client_id, group)| ClientGroup { client_id, group })
            .collect(),
        topic_offset: TopicOffset {
            min_offset: 0,
            max_offset: view.kept,
            last_update_timestamp: view.last_write_ms,
        },
        sharding_to_broker: view.owned,
    };
    json_answer(req, &body)
}

/// RocketMQ's `GetLiteClientInfoResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LiteClientInfo {
    parent_topic: String,
    group: String,
    client_id: String,
    last_access_time: i64,
    last_consume_time: i64,
    lite_topic_count: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    lite_topic_set: Option<Vec<String>>,
}

/// GET_LITE_CLIENT_INFO: the lite topics of the parent a client subscribed on this core
/// (those this core owns; -1 when none), at most `maxCount` listed, and its last lite pop
/// here (`lastAccessTime`, -1 when none) and last one that handed out messages
/// (`lastConsumeTime`).
async fn lite_client_info(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let topic = field(req, "parentTopic")?.to_owned();
    let group = field(req, "group")?.to_owned();
    let client = req.ext("clientId").unwrap_or("").to_owned();
    let max_count: i32 = number_or(req, "maxCount", CLIENT_TOPICS_DEFAULT)?;
    if max_count <= 0 {
        return Err(BrokerError::BadRequest("[maxCount] field invalid".into()));
    }
    if let Some(refusal) = lite_parent_or_refusal(core, req, &topic) {
        return Ok(refusal);
    }
    let g = lite_group(core, &group).await?;
    if !g.exists {
        return Ok(refused(
            req,
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("Group [{group}] not exist."),
        ));
    }
    if !g.parents.contains(&topic) {
        return Ok(refused(
            req,
            response::INVALID_PARAMETER,
            format!("Subscription [{group}]-[{topic}] not match."),
        ));
    }
    let view = core.lite_client_view(&group, &topic, &client);
    let count = view
        .lite_topics
        .as_ref()
        .map_or(-1, |v| int(v.len() as u64));
    let listed = usize::try_from(max_count.min(CLIENT_TOPICS_MAX)).unwrap_or(0);
    let body = LiteClientInfo {
        parent_topic: topic,
        group,
        client_id: client,
        last_access_time: view.access_ms,
        last_consume_time: view.consume_ms,
        lite_topic_count: count,
        lite_topic_set: view.lite_topics.map(|mut v| {
            v.truncate(listed);
            v
        }),
    };
    json_answer(req, &body)
}

/// RocketMQ's `LiteLagInfo`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LiteLagInfo {
    lite_topic: String,
    lag_count: u64,
    earliest_unconsumed_timestamp: i64,
}

impl From<&LiteLag> for LiteLagInfo {
    fn from(l: &LiteLag) -> Self {
        LiteLagInfo {
            lite_topic: l.lite_topic.clone(),
            lag_count: l.lag(),
            earliest_unconsumed_timestamp: l.earliest_unconsumed_ms,
        }
    }
}

/// RocketMQ's `GetLiteGroupInfoResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LiteGroupInfo {
    group: String,
    parent_topic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    lite_topic: Option<String>,
    earliest_unconsumed_timestamp: i64,
    total_lag_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    lite_topic_offset_wrapper: Option<super::admin::OffsetWrapper>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lag_count_top_k: Option<Vec<LiteLagInfo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lag_timestamp_top_k: Option<Vec<LiteLagInfo>>,
}

/// GET_LITE_GROUP_INFO: a lite group's lag on this core, over the lite topics of the parent
/// it is bound to (with the `topK` most behind by count and by age), or on one lite topic
/// (`liteTopic`; -1s when this core does not hold it, no offsets when the group has not
/// consumed it).
async fn lite_group_info(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = field(req, "group")?.to_owned();
    let lite = req
        .ext("liteTopic")
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    let top_k: i32 = number_or(req, "topK", 0)?;
    let g = lite_group(core, &group).await?;
    if !g.exists {
        return Ok(refused(
            req,
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("Group [{group}] not exist."),
        ));
    }
    // A group consuming several parents without a binding is answered for the first.
    let Some(parent) = g.parents.first().cloned() else {
        return Ok(refused(
            req,
            response::INVALID_PARAMETER,
            format!("Group [{group}] is not a LITE group."),
        ));
    };
    let is_parent = {
        let topics = core.topics.borrow();
        is_lite_topic(&topics, &parent)
    };
    let mut body = LiteGroupInfo {
        group: group.clone(),
        parent_topic: parent.clone(),
        lite_topic: lite.clone(),
        earliest_unconsumed_timestamp: -1,
        total_lag_count: 0,
        lite_topic_offset_wrapper: None,
        lag_count_top_k: None,
        lag_timestamp_top_k: None,
    };
    match lite {
        None => {
            let lag = if is_parent {
                let k = usize::try_from(top_k).unwrap_or(0);
                core.lite_group_lag(&group, &parent, k).await?
            } else {
                broker_core::lite::LiteGroupLag {
                    earliest_unconsumed_ms: -1,
                    ..Default::default()
                }
            };
            body.total_lag_count = i64::try_from(lag.total).unwrap_or(i64::MAX);
            body.earliest_unconsumed_timestamp = lag.earliest_unconsumed_ms;
            body.lag_count_top_k = Some(lag.by_count.iter().map(LiteLagInfo::from).collect());
            body.lag_timestamp_top_k = Some(lag.by_time.iter().map(LiteLagInfo::from).collect());
        }
        Some(lite) => {
            let at = if is_parent {
                core.lite_topic_lag(&group, &parent, &lite).await?
            } else {
                LiteTopicLag::NotHeld
            };
            match at {
                LiteTopicLag::NotHeld => {
                    body.total_lag_count = -1;
                }
                LiteTopicLag::NoCursor => {}
                LiteTopicLag::At(l) => {
                    body.total_lag_count = i64::try_from(l.lag()).unwrap_or(i64::MAX);
                    body.earliest_unconsumed_timestamp = l.earliest_unconsumed_ms;
                    body.lite_topic_offset_wrapper = Some(super::admin::OffsetWrapper {
                        broker_offset: l.kept,
                        consumer_offset: l.consumed,
                        pull_offset: 0,
                        last_timestamp: l.last_consumed_ms,
                    });
                }
            }
        }
    }
    json_answer(req, &body)
}

/// TRIGGER_LITE_DISPATCH: RocketMQ re-queues, for each client of the group, the lite topics
/// with messages it has not been told of. A corvus lite pop walks the client's
/// subscriptions every time, so nothing is ever left untold: the request reads the bound
/// parents' queues on this core up to their ends (so the next pop sees every message
/// stored) and answers SUCCESS.
async fn trigger_dispatch(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let group = field(req, "group")?.to_owned();
    let g = lite_group(core, &group).await?;
    if !g.exists {
        return Ok(refused(
            req,
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("Group [{group}] not exist."),
        ));
    }
    if g.parents.is_empty() {
        return Ok(refused(
            req,
            response::INVALID_PARAMETER,
            format!("Group [{group}] is not a LITE group."),
        ));
    }
    for parent in &g.parents {
        let is_parent = is_lite_topic(&core.topics.borrow(), parent);
        if is_parent {
            core.lite_catch_up(Some(parent)).await?;
        }
    }
    tracing::info!(%group, client = req.ext("clientId").unwrap_or(""), "lite dispatch triggered");
    Ok(Outgoing::remoting(super::ok(req), Body::None))
}

/// Whether `code` is a lite admin request.
pub(super) fn is_lite_admin(code: i32) -> bool {
    use remoting::codes::request;
    matches!(
        code,
        request::GET_BROKER_LITE_INFO
            | request::GET_PARENT_TOPIC_INFO
            | request::GET_LITE_TOPIC_INFO
            | request::GET_LITE_CLIENT_INFO
            | request::GET_LITE_GROUP_INFO
            | request::TRIGGER_LITE_DISPATCH
    )
}

/// Serves a lite admin request ([`is_lite_admin`]).
pub(super) async fn serve(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    use remoting::codes::request;
    match req.code {
        request::GET_BROKER_LITE_INFO => broker_info(core, req).await,
        request::GET_PARENT_TOPIC_INFO => parent_topic_info(core, req).await,
        request::GET_LITE_TOPIC_INFO => lite_topic_info(core, req).await,
        request::GET_LITE_CLIENT_INFO => lite_client_info(core, req).await,
        request::GET_LITE_GROUP_INFO => lite_group_info(core, req).await,
        request::TRIGGER_LITE_DISPATCH => trigger_dispatch(core, req).await,
        code => Err(BrokerError::Internal(format!(
            "request code {code} is not a lite admin request"
        ))),
    }
}
