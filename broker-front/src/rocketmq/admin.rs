//! The admin requests Apache RocketMQ's own `mqadmin` (rocketmq-tools) sends a broker:
//! runtime info and config, topic stats, consume stats and progress, consumer and producer
//! connections, offset resets, subscription groups (stored), topic configs (with their
//! attributes), topic deletion. Each core answers for
//! the queues it holds, as the RocketMQ broker it stands for in the routes.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::core_view::SYSTEM_TOPICS;
use protocol::{GroupQueue, TopicConfig};
use remoting::body::{ConsumerData, SubscriptionGroupConfig};
use remoting::codes::request;
use remoting::RemotingCommand;
use serde::Serialize;

use super::{json_answer, ok, topic_config};
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;
use crate::mesh::{OffsetOp, SubGroupOp};
use crate::numbering::CoreQueues;
use crate::sub_groups::GroupConfig;
use crate::topics::{auto_create_key_config, AUTO_CREATE_TOPIC_KEY};

/// The RocketMQ version corvus answers as: `MQVersion.Version.V5_5_0`'s ordinal in RocketMQ
/// 5.x's enum, and its name (the protocol up to 5.5.0's lite topics). `clusterList` prints the
/// name from the runtime info's `brokerVersionDesc`.
pub(crate) const ROCKETMQ_VERSION: i32 = 513;
const ROCKETMQ_VERSION_NAME: &str = "V5_5_0";

/// A RocketMQ client as its last heartbeat on this core showed it.
#[derive(Debug, Clone)]
pub(crate) struct SeenClient {
    pub addr: String,
    pub language: String,
    pub version: i32,
    pub producer_groups: Vec<String>,
    pub consumers: Vec<ConsumerData>,
    pub at: Instant,
}

/// What RocketMQ clients told this core in their heartbeats, by client id: enough to answer
/// "who consumes / produces" for mqadmin. A client silent for the consumer timeout is gone.
#[derive(Default)]
pub struct Seen {
    clients: RefCell<HashMap<String, SeenClient>>,
    /// The SQL92 expression each (group, topic) subscribed with in its members' latest
    /// heartbeat: a Java push consumer's pulls name the type, not the expression.
    sql92: RefCell<HashMap<(String, String), String>>,
    /// The request codes this core refused as not served, for a rate-limited log line.
    refused: RefCell<remoting::refusals::RefusedCodes>,
    /// The kernel's handles of popped messages that the POP answer's header does not
    /// describe (`pop::Handles`).
    pub(super) pop_handles: super::pop::Handles,
}

impl Seen {
    /// Logs a request refused because this broker does not serve its code: one line per
    /// code per minute on each core, with the count of those left out since.
    pub(crate) fn log_refused_code(&self, peer: &str, code: i32) {
        let Some(left_out) = self.refused.borrow_mut().note(code, Instant::now()) else {
            return;
        };
        tracing::warn!(
            %peer,
            code,
            name = request::name(code).unwrap_or("unknown"),
            left_out_since_last_line = left_out.same_code,
            other_codes_left_out = left_out.other_codes,
            "refused a RocketMQ request: corvus does not serve request code {code}"
        );
    }

    pub(crate) fn heartbeat(&self, client_id: &str, c: SeenClient) {
        for d in &c.consumers {
            for s in &d.subscription_data_set {
                if s.expression_type.as_deref() == Some(super::SQL92) {
                    self.sql92.borrow_mut().insert(
                        (d.group_name.clone(), s.topic.clone()),
                        s.sub_string.clone(),
                    );
                }
            }
        }
        self.clients.borrow_mut().insert(client_id.to_owned(), c);
    }

    /// The SQL92 expression `group` last subscribed to `topic` with, in a heartbeat to this
    /// core.
    pub(crate) fn sql92_of(&self, group: &str, topic: &str) -> Option<String> {
        self.sql92
            .borrow()
            .get(&(group.to_owned(), topic.to_owned()))
            .cloned()
    }

    pub(crate) fn forget(&self, client_id: &str) {
        self.clients.borrow_mut().remove(client_id);
    }

    /// The clients heard from within `timeout` before `now` (the broker's clock), by id.
    fn live(&self, now: Instant, timeout: Duration) -> Vec<(String, SeenClient)> {
        let mut clients = self.clients.borrow_mut();
        clients.retain(|_, c| now.saturating_duration_since(c.at) < timeout);
        let mut v: Vec<_> = clients
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// Serves the admin request `req` if it is one; `None` when the code is not an admin one.
pub(crate) async fn serve(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &Bytes,
) -> Option<Result<Outgoing, BrokerError>> {
    Some(match req.code {
        request::GET_BROKER_RUNTIME_INFO => runtime_info(core, req),
        request::GET_BROKER_CONFIG => broker_config(core, req),
        request::UPDATE_BROKER_CONFIG => update_broker_config(core, req, body).await,
        request::GET_TOPIC_STATS_INFO => topic_stats(core, req).await,
        request::GET_CONSUME_STATS => consume_stats(core, req).await,
        request::GET_BROKER_CONSUME_STATS => broker_consume_stats(core, req).await,
        request::GET_BROKER_HA_STATUS => ha_status(core, req),
        request::GET_CONSUMER_CONNECTION_LIST => consumer_connections(core, req),
        request::GET_PRODUCER_CONNECTION_LIST => producer_connections(core, req),
        request::GET_ALL_PRODUCER_INFO => all_producers(core, req),
        request::GET_SYSTEM_TOPIC_LIST_FROM_BROKER => system_topics(core, req),
        request::DELETE_EXPIRED_COMMITLOG | request::CLEAN_EXPIRED_CONSUMEQUEUE => {
            retention_now(core, req).await
        }
        request::GET_ALL_TOPIC_CONFIG => all_topic_configs(core, req),
        request::GET_TOPIC_CONFIG => one_topic_config(core, req),
        request::GET_SUBSCRIPTIONGROUP_CONFIG => one_subscription_group(core, req).await,
        request::QUERY_TOPIC_CONSUME_BY_WHO => consumed_by(core, req),
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => subscription_group(core, req, body).await,
        request::DELETE_SUBSCRIPTIONGROUP => delete_subscription_group(core, req).await,
        request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => all_subscription_groups(core, req).await,
        request::DELETE_TOPIC_IN_BROKER => delete_topic(core, req).await,
        request::INVOKE_BROKER_TO_RESET_OFFSET => reset_offset(core, req).await,
        request::GET_CONSUMER_RUNNING_INFO => consumer_running_info(core, req).await,
        request::CONSUME_MESSAGE_DIRECTLY => consume_directly(core, req).await,
        request::VIEW_BROKER_STATS_DATA => Ok(broker_stats_data(core, req)),
        request::QUERY_CONSUME_QUEUE => query_consume_queue(core, req).await,
        request::CLEAN_UNUSED_TOPIC => Err(BrokerError::Unsupported(
            "corvus keeps a deleted topic's ConsumeQueues, so a topic created again under its \
             name continues its offsets; retention deletes their entries with the CommitLog \
             segments they point into (deleteExpiredCommitLog runs it now)"
                .into(),
        )),
        request::GET_COLD_DATA_FLOW_CTR_INFO => Ok(no_cold_data_flow_control(req)),
        request::UPDATE_COLD_DATA_FLOW_CTR_CONFIG | request::REMOVE_COLD_DATA_FLOW_CTR_CONFIG => {
            Err(BrokerError::Unsupported(
                "corvus has no cold-data flow control: a consumer reading far behind is sent to \
                 a slave (hot_bytes_max, slave_read_enable) instead of being throttled"
                    .into(),
            ))
        }
        request::SWITCH_TIMER_ENGINE => switch_timer_engine(req),
        _ => return None,
    })
}

fn kv(table: BTreeMap<&str, String>) -> serde_json::Value {
    serde_json::json!({ "table": table })
}

/// RocketMQ's `MixAll.humanReadableByteCount(bytes, false)`: `512 B`, `1.5 KiB`, `3.2 GiB`.
fn human_bytes(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()) as i32;
    let exp = exp.clamp(1, 6);
    let unit = ['K', 'M', 'G', 'T', 'P', 'E'][(exp - 1) as usize];
    format!("{:.1} {unit}iB", bytes as f64 / 1024f64.powi(exp))
}

/// RocketMQ's "10 s, 60 s, 600 s" rates: `"12.5 11.0 9.8"`.
fn three(rates: [f64; 3]) -> String {
    format!("{} {} {}", rates[0], rates[1], rates[2])
}

/// GET_BROKER_RUNTIME_INFO: the keys of Apache RocketMQ 5's `prepareRuntimeInfo` (the store's
/// and the broker's) for this core, as the broker it stands for, so `brokerStatus`, the
/// dashboard and rocketmq-exporter read every key they parse. Where corvus has the figure it
/// is the true one: messages and bytes stored and handed out since start, rates over 10 s /
/// 60 s / 600 s (`broker_core::broker_stats`), the CommitLog offsets (the sums over the
/// core's shards' logs, each its own offset space: the bytes the core's logs hold and have
/// held), the data directory's disk. Keys for machinery corvus does not have answer what
/// RocketMQ answers without it: thread-pool queues (corvus has none: its inbox depth stands
/// for the send queue, every wait time is 0), the transient store pool (off: RocketMQ's
/// `Integer.MAX_VALUE`), the timer wheel (off: 0), dispatch (the ConsumeQueue is written
/// with the CommitLog: nothing behind). `msgPut/GetTotalTodayMorning` and
/// `…YesterdayMorning` stay 0: corvus counts from its start, not from midnight.
fn runtime_info(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let st = core.local_status();
    let up = core.shared.uptime();
    let now = core.shared.clock.now();
    let (put, get, latency, batches) = {
        let b = core.broker_stats.borrow();
        (
            b.broker_rates(true, now),
            b.broker_rates(false, now),
            b.put_latency,
            b.put_batches(),
        )
    };
    let (mut write_max, mut min, mut durable_lag) = (0u64, 0u64, 0u64);
    for shard in core.shards.values() {
        let s = shard.stats();
        write_max += s.write_offset.0;
        min += s.min_offset.0;
        durable_lag += s.write_offset.0.saturating_sub(s.durable_offset.0);
    }
    let dir = &core.shared.config.data_dir;
    let total = shard::statvfs_total_bytes(dir).unwrap_or(0);
    let free = shard::statvfs_free_bytes(dir).unwrap_or(0);
    let disk = st.disk_use_ratio;
    let boot_ms = core
        .shared
        .clock
        .wall()
        .checked_sub(up)
        .and_then(|b| b.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis());
    let s = up.as_secs();
    let put_tps = three(put.map(|r| r.0));
    let get_tps = three(get.map(|r| r.0));
    let get_calls = three(get.map(|r| r.1));
    let queue_max = core.shared.config.inbox_capacity.to_string();
    let mut t = BTreeMap::new();
    let mut put_kv = |k: &'static str, v: String| {
        t.insert(k, v);
    };
    put_kv("brokerVersionDesc", ROCKETMQ_VERSION_NAME.to_owned());
    put_kv("brokerVersion", ROCKETMQ_VERSION.to_string());
    put_kv("corvusVersion", env!("CARGO_PKG_VERSION").to_owned());
    put_kv("brokerActive", "true".into());
    put_kv("bootTimestamp", boot_ms.to_string());
    put_kv(
        "runtime",
        format!(
            "[ {} days, {} hours, {} minutes, {} seconds ]",
            s / 86_400,
            s / 3600 % 24,
            s / 60 % 60,
            s % 60
        ),
    );
    put_kv("msgPutTotalTodayNow", st.produced_messages.to_string());
    put_kv("msgGetTotalTodayNow", st.consumed_messages.to_string());
    for k in [
        "msgPutTotalYesterdayMorning",
        "msgGetTotalYesterdayMorning",
        "msgPutTotalTodayMorning",
        "msgGetTotalTodayMorning",
    ] {
        put_kv(k, "0".into());
    }
    put_kv("putTps", put_tps);
    put_kv("getTransferredTps", get_tps.clone());
    put_kv("getTransferedTps", get_tps);
    // Pulls that found messages, per second; pulls that found none are not counted, so the
    // total is the found.
    put_kv("getFoundTps", get_calls.clone());
    put_kv("getTotalTps", get_calls);
    put_kv("getMissTps", three([0.0; 3]));
    put_kv("putMessageTimesTotal", batches.max(1).to_string());
    put_kv("putMessageFailedTimes", "0".into());
    put_kv("putMessageSizeTotal", st.produced_bytes.to_string());
    put_kv(
        "putMessageAverageSize",
        (st.produced_bytes as f64 / batches.max(1) as f64).to_string(),
    );
    put_kv("putMessageDistributeTime", latency.text());
    put_kv("putMessageEntireTimeMax", latency.max_ms.to_string());
    put_kv("getMessageEntireTimeMax", "0".into());
    put_kv("commitLogMaxOffset", write_max.to_string());
    put_kv("commitLogMinOffset", min.to_string());
    put_kv("commitLogDiskRatio", disk.to_string());
    put_kv("consumeQueueDiskRatio", disk.to_string());
    put_kv(
        "commitLogDirCapacity",
        format!(
            "Total : {}, Free : {}.",
            human_bytes(total),
            human_bytes(free)
        ),
    );
    put_kv("remainHowManyDataToFlush", human_bytes(durable_lag));
    put_kv("remainTransientStoreBufferNumbs", i32::MAX.to_string());
    put_kv("dispatchBehindBytes", "0".into());
    put_kv("dispatchMaxBuffer", "0".into());
    put_kv("pageCacheLockTimeMills", "0".into());
    put_kv("earliestMessageTimeStamp", "0".into());
    put_kv("startAcceptSendRequestTimeStamp", "0".into());
    put_kv("sendThreadPoolQueueSize", st.inbox_depth.to_string());
    put_kv("sendThreadPoolQueueCapacity", queue_max);
    for k in [
        "pullThreadPoolQueueSize",
        "litePullThreadPoolQueueSize",
        "queryThreadPoolQueueSize",
        "ackThreadPoolQueueSize",
        "EndTransactionQueueSize",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueHeadWaitTimeMills",
        "litePullThreadPoolQueueHeadWaitTimeMills",
        "ackThreadPoolQueueHeadWaitTimeMills",
        "timerReadBehind",
        "timerOffsetBehind",
        "timerCongestNum",
    ] {
        put_kv(k, "0".into());
    }
    for k in [
        "pullThreadPoolQueueCapacity",
        "litePullThreadPoolQueueCapacity",
        "queryThreadPoolQueueCapacity",
        "ackThreadPoolQueueCapacity",
        "EndTransactionThreadPoolQueueCapacity",
    ] {
        put_kv(k, "0".into());
    }
    put_kv("timerEnqueueTps", "0.0".into());
    put_kv("timerDequeueTps", "0.0".into());
    put_kv("crossCoreHops", st.cross_core_hops.to_string());
    json_answer(req, &kv(t))
}

/// VIEW_BROKER_STATS_DATA: one of RocketMQ's broker stats (`statsName`, `statsKey`, as
/// `broker_core::broker_stats` counts them) over its minute, hour and day windows. Each core
/// answers for what it counted, as the RocketMQ broker it stands for in the routes: the
/// tools ask every broker of a route and add the answers up. A stat the core never counted is
/// answered as RocketMQ's broker answers it: SYSTEM_ERROR, "The stats <name> <key> not exist".
fn broker_stats_data(core: &Front, req: &RemotingCommand) -> Outgoing {
    let name = req.ext("statsName").unwrap_or_default();
    let key = req.ext("statsKey").unwrap_or_default();
    let now = core.shared.clock.now();
    let Some(data) = core.broker_stats.borrow().view(name, key, now) else {
        return Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                remoting::codes::response::SYSTEM_ERROR,
                Some(format!("The stats <{name}> <{key}> not exist")),
            ),
            Body::None,
        );
    };
    let item = |s: &broker_core::broker_stats::Snapshot| serde_json::json!({ "avgpt": s.avgpt, "sum": s.sum, "tps": s.tps });
    let body = serde_json::json!({
        "statsDay": item(&data.day),
        "statsHour": item(&data.hour),
        "statsMinute": item(&data.minute),
    });
    raw_answer(req, body.to_string().into_bytes())
}

/// GET_BROKER_CONFIG: the config this core runs with (changes applied while running
/// included), under RocketMQ's names and then corvus's.
fn broker_config(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let running = core.config();
    let c = &*running;
    let mut text = String::new();
    // RocketMQ's names for what corvus has, then every corvus key as it is.
    let rocketmq = [
        ("brokerName", c.broker_name.clone()),
        ("brokerClusterName", c.cluster_name.clone()),
        ("brokerId", c.broker_id.to_string()),
        ("namesrvAddr", c.namesrv_addr.clone()),
        ("brokerIP1", core.shared.advertise_addr.clone()),
        (
            "flushDiskType",
            match c.flush_disk_type {
                crate::config::FlushDiskType::Async => "ASYNC_FLUSH".into(),
                crate::config::FlushDiskType::Sync => "SYNC_FLUSH".into(),
            },
        ),
        ("brokerRole", "ASYNC_MASTER".into()),
        (
            "autoCreateTopicEnable",
            c.auto_create_topic_enable.to_string(),
        ),
        (
            "defaultTopicQueueNums",
            c.default_topic_queue_nums.to_string(),
        ),
        ("maxMessageSize", c.message_bytes_max.to_string()),
        ("brokerPermission", c.broker_permission.to_string()),
        ("fileReservedTime", c.file_reserved_hours.to_string()),
        ("storePathRootDir", c.data_dir.display().to_string()),
    ];
    for (k, v) in rocketmq {
        let _ = writeln!(text, "{k}={v}");
    }
    if let Ok(serde_json::Value::Object(all)) = serde_json::to_value(c) {
        for (k, v) in all {
            if crate::config::SECRET_KEYS.contains(&k.as_str()) {
                continue;
            }
            let v = match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            let _ = writeln!(text, "{k}={v}");
        }
    }
    Ok(Outgoing::remoting(
        ok(req),
        Body::Owned(vec![Bytes::from(text)]),
    ))
}

/// GET_COLD_DATA_FLOW_CTR_INFO (mqadmin getColdDataFlowCtrInfo): corvus has no cold-data flow
/// control, so no table: RocketMQ's tool prints "Broker[ADDR] has no cold ctr table", as
/// for a RocketMQ broker without one; the remark says why.
fn no_cold_data_flow_control(req: &RemotingCommand) -> Outgoing {
    Outgoing::remoting(
        RemotingCommand::response_to(
            req,
            remoting::codes::response::SUCCESS,
            Some(
                "corvus has no cold-data flow control: a consumer reading far behind is sent \
                 to a slave (hot_bytes_max, slave_read_enable) instead of being throttled"
                    .into(),
            ),
        ),
        Body::None,
    )
}

/// SWITCH_TIMER_ENGINE (mqadmin 5.5's switchTimerEngine, `-e R|F`, sent as `E_T`): corvus has one timer
/// engine, the timer queue of each shard indexed on disk (files, as RocketMQ's file time
/// wheel), so `F` is what runs already and is answered SUCCESS; `R` (RocksDB timeline) is
/// refused with the reason.
fn switch_timer_engine(req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    match req.ext("E_T").map(str::trim) {
        Some("F") => Ok(Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                remoting::codes::response::SUCCESS,
                Some("corvus's one timer engine is file-based (each shard's timer queue); it runs already".into()),
            ),
            Body::None,
        )),
        Some("R") => Err(BrokerError::Unsupported(
            "corvus has no RocksDB timer engine: timer and delay messages are held in each \
             shard's file-based timer queue"
                .into(),
        )),
        other => Err(BrokerError::BadRequest(format!(
            "the timer engine type (E_T) must be R or F, not {}",
            other.unwrap_or("(none)")
        ))),
    }
}

/// Entries one QUERY_CONSUME_QUEUE answers at most.
const QUERY_CQ_ENTRIES_MAX: i64 = 1024;

/// QUERY_CONSUME_QUEUE (mqadmin queryCq `-t T -q Q -i INDEX -c COUNT`): the queue's min and
/// max offsets, and from INDEX up to COUNT entries as RocketMQ's ConsumeQueue units: the
/// record's CommitLog offset as its offset msgId carries it (the shard in the top 16 bits),
/// its size and its tag hash. The entries are read as a pull of the queue (RocketMQ's tools
/// group, `TOOLS_CONSUMER`) and counted as one. `-g` is accepted; corvus keeps no
/// ConsumeQueue extension or filter bitmap, so it adds nothing.
async fn query_consume_queue(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?
        .to_owned();
    let number = |key: &str, default: i64| -> Result<i64, BrokerError> {
        match req.ext(key).map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => v
                .parse::<i64>()
                .map_err(|_| BrokerError::BadRequest(format!("{key} `{v}` is not a number"))),
        }
    };
    let queue_id = i32::try_from(number("queueId", 0)?)
        .map_err(|_| BrokerError::BadRequest("queueId is out of range".into()))?;
    let index = u64::try_from(number("index", 0)?.max(0)).unwrap_or(0);
    let count = u64::try_from(number("count", 10)?.clamp(0, QUERY_CQ_ENTRIES_MAX)).unwrap_or(0);
    let (global, _) = super::global_queue(core, &topic, queue_id, req.ext("bname"))?;
    let (min, max) = core.queue_offsets(&topic, global).await?;
    let mut entries = Vec::new();
    if count > 0 && index < max {
        let pulled = core
            .pull_filtered(
                protocol::PullRequest {
                    consumer_group: "TOOLS_CONSUMER".into(),
                    topic: topic.clone(),
                    queue_id: global,
                    queue_offset: index.max(min),
                    max_messages: u32::try_from(count).unwrap_or(1),
                    max_bytes: u32::MAX,
                    tag_expression: "*".into(),
                    suspend_timeout_ms: 0,
                },
                None,
            )
            .await?;
        let shard = protocol::queue_owner_shard(&topic, global, core.shared.shard_count);
        let records: Vec<&[u8]> = match &pulled.body {
            crate::core::PullBody::Local(v) => v.iter().map(|s| s.as_bytes()).collect(),
            crate::core::PullBody::Owned(v) => v.iter().map(|b| &b[..]).collect(),
        };
        for r in records {
            let Ok(v) = message::RecordView::parse(r) else {
                continue;
            };
            if v.queue_offset() < index || v.queue_offset() - index >= count {
                continue;
            }
            entries.push(serde_json::json!({
                "physicOffset": v.physical_offset()
                    | (u64::from(shard) << message::ids::LOCAL_OFFSET_BITS),
                "physicSize": v.len(),
                "tagsCode": v.tag_hash(),
                "eval": false,
            }));
        }
    }
    super::json_answer(
        req,
        &serde_json::json!({
            "maxQueueIndex": max,
            "minQueueIndex": min,
            "queueData": entries,
        }),
    )
}

/// UPDATE_BROKER_CONFIG: the keys of the properties body (RocketMQ's names or corvus's) are
/// checked as a whole, stored in the data directory's overrides file (read at start), and
/// those that may change while running apply on every core at once (`broker_core::live_config`).
/// The remark names which keys applied now and which wait for the next restart. Nothing
/// changes when any key is refused: a key RocketMQ never changes remotely is NO_PERMISSION,
/// a bad value INVALID_PARAMETER, and the remark says why.
async fn update_broker_config(
    core: &Front,
    req: &RemotingCommand,
    body: &Bytes,
) -> Result<Outgoing, BrokerError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| BrokerError::BadRequest("the config body is not UTF-8 properties".into()))?
        .to_owned();
    let done = core.update_config(text).await?;
    let names = |keys: &[String]| {
        if keys.is_empty() {
            return "none".to_owned();
        }
        keys.iter()
            .map(
                |k| match crate::config::KEYS.iter().find(|s| s.name == k.as_str()) {
                    Some(crate::config::KeySpec {
                        rocketmq: Some(r), ..
                    }) => format!("{k} ({r})"),
                    _ => k.clone(),
                },
            )
            .collect::<Vec<_>>()
            .join(", ")
    };
    let remark = format!(
        "applied now on every core: {}; stored for the next restart: {}; kept in {}",
        names(&done.live),
        names(&done.restart),
        done.path.display()
    );
    Ok(Outgoing::remoting(
        RemotingCommand::response_to(req, remoting::codes::response::SUCCESS, Some(remark)),
        Body::None,
    ))
}

/// A message queue as a fastjson map key: the object itself, its fields in fastjson's
/// (alphabetical) order. RocketMQ's tools decode maps keyed by queue this way.
fn mq_key(broker_name: &str, topic: &str, queue_id: u32) -> String {
    let mq = serde_json::json!({ "brokerName": broker_name, "queueId": queue_id, "topic": topic });
    mq.to_string()
}

/// `{"offsetTable":{<mq>:<value>,…},<rest>}` with queue objects as keys, as fastjson writes
/// RocketMQ's tables keyed by MessageQueue.
fn mq_table<V: Serialize>(
    entries: &[(String, V)],
    rest: &[(&str, serde_json::Value)],
) -> Result<Vec<u8>, BrokerError> {
    let mut out = String::from("{\"offsetTable\":{");
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push(':');
        out.push_str(&serde_json::to_string(v).map_err(|e| BrokerError::Storage(e.to_string()))?);
    }
    out.push('}');
    for (k, v) in rest {
        let _ = write!(out, ",\"{k}\":{v}");
    }
    out.push('}');
    Ok(out.into_bytes())
}

fn raw_answer(req: &RemotingCommand, body: Vec<u8>) -> Outgoing {
    Outgoing::remoting(ok(req), Body::Owned(vec![Bytes::from(body)]))
}

/// This core's RocketMQ broker name.
pub(super) fn own_name(core: &Front) -> String {
    protocol::core_view::core_broker_name(
        &core.shared.config.broker_name,
        core.id,
        core.shared.cores,
    )
}

/// The core's queues of `topic`: (its number for the queue, the topic's queue id).
fn own_queues(core: &Front, topic: &str, cfg: &TopicConfig) -> Vec<(u32, u32)> {
    let queues = CoreQueues::of(core, topic, cfg, core.id);
    queues
        .ids
        .iter()
        .enumerate()
        .map(|(local, &global)| (local as u32, global))
        .collect()
}

async fn topic_stats(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?
        .to_owned();
    // TBW102, which the broker registers while auto-creation is on: its queues, empty (sends
    // to it are refused), as RocketMQ's broker answers for it.
    let auto_create_key = (topic == AUTO_CREATE_TOPIC_KEY
        && core.shared.config.auto_create_topic_enable)
        .then(|| auto_create_key_config(core.shared.config.default_topic_queue_nums));
    let cfg = match &auto_create_key {
        Some(cfg) => cfg.clone(),
        None => topic_config(core, &topic)?,
    };
    let name = own_name(core);
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct TopicOffset {
        min_offset: u64,
        max_offset: u64,
        last_update_timestamp: i64,
    }
    let mut entries = Vec::new();
    for (local, global) in own_queues(core, &topic, &cfg) {
        let (min, max) = if auto_create_key.is_some() {
            (0, 0)
        } else {
            core.queue_offsets(&topic, global).await?
        };
        // RocketMQ's: the store time of the queue's last message (0 when it has none).
        let last = if max > min {
            core.store_time(&topic, global, max - 1).await?.unwrap_or(0)
        } else {
            0
        };
        entries.push((
            mq_key(&name, &topic, local),
            TopicOffset {
                min_offset: min,
                max_offset: max,
                last_update_timestamp: last,
            },
        ));
    }
    Ok(raw_answer(req, mq_table(&entries, &[])?))
}

/// Every (group queue, stored offset) this core's shards hold.
pub(super) fn stored_offsets(core: &Front) -> Vec<(GroupQueue, crate::groups::StoredOffset)> {
    core.offsets
        .values()
        .flat_map(|t| {
            t.borrow()
                .entries()
                .map(|(q, o)| (q.clone(), *o))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A queue's offsets for a group, as RocketMQ's ConsumeStats holds them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OffsetWrapper {
    pub(super) broker_offset: u64,
    pub(super) consumer_offset: u64,
    /// RocketMQ 5's: how far the group has been handed messages; its mqadmin shows
    /// `pullOffset - consumerOffset` as in flight. A POP group's window's next offset,
    /// else the committed offset (a lite topic's: 0, as RocketMQ's lite answer leaves it).
    pub(super) pull_offset: u64,
    pub(super) last_timestamp: i64,
}

/// The group's ConsumeStats of this core's queues of `topics` (every topic it has offsets
/// of when `None`): the entries keyed by queue, and the consume TPS. The TPS is RocketMQ's:
/// the messages this core handed the group per second over the broker stats' minute window
/// (`GROUP_GET_NUMS` of each topic@group), so a group that stopped reading falls to 0
/// within the window.
async fn group_consume_stats(
    core: &Front,
    group: &str,
    topics: Option<Vec<String>>,
) -> Result<(Vec<(String, OffsetWrapper)>, f64), BrokerError> {
    let name = own_name(core);
    let mut topics = topics.unwrap_or_else(|| {
        stored_offsets(core)
            .into_iter()
            .filter(|(q, _)| q.group == group)
            .map(|(q, _)| q.topic)
            .collect()
    });
    topics.sort();
    topics.dedup();
    let mut entries = Vec::new();
    let mut tps = 0.0;
    for topic in topics {
        let Ok(cfg) = topic_config(core, &topic) else {
            continue;
        };
        let now = core.shared.clock.now();
        tps += core
            .broker_stats
            .borrow()
            .view(
                broker_core::broker_stats::name::GROUP_GET_NUMS,
                &format!("{topic}@{group}"),
                now,
            )
            .map_or(0.0, |d| d.minute.tps);
        for (local, global) in own_queues(core, &topic, &cfg) {
            let (_, max) = core.queue_offsets(&topic, global).await?;
            let stored = core
                .group_offset(OffsetOp::Query(GroupQueue {
                    group: group.to_owned(),
                    topic: topic.clone(),
                    queue_id: global,
                }))
                .await?;
            let consumer_offset = stored.map_or(0, |s| s.offset);
            let pull_offset = core
                .pop_window(group, &topic, global)
                .map_or(consumer_offset, |(cursor, _)| cursor.max(consumer_offset));
            entries.push((
                mq_key(&name, &topic, local),
                OffsetWrapper {
                    broker_offset: max,
                    consumer_offset,
                    pull_offset,
                    last_timestamp: stored.map_or(0, |s| s.last_commit_ms),
                },
            ));
        }
    }
    Ok((entries, tps))
}

async fn consume_stats(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = req
        .ext("consumerGroup")
        .ok_or_else(|| BrokerError::BadRequest("consumerGroup is required".into()))?
        .to_owned();
    let only_topic = req
        .ext("topic")
        .filter(|t| !t.is_empty())
        .map(|t| vec![t.to_owned()]);
    let (entries, tps) = group_consume_stats(core, &group, only_topic).await?;
    Ok(raw_answer(
        req,
        mq_table(&entries, &[("consumeTps", serde_json::json!(tps))])?,
    ))
}

/// GET_BROKER_CONSUME_STATS (mqadmin's brokerConsumeStats): the ConsumeStats of every group
/// with offsets on this core, per topic, and the total backlog (RocketMQ's
/// ConsumeStatsList). `isOrder` keeps the orderly groups only; corvus does not mark topics
/// orderly, so it keeps none.
async fn broker_consume_stats(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let orderly_only = req.ext("isOrder") == Some("true");
    let mut by_group: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if !orderly_only {
        for (q, _) in stored_offsets(core) {
            by_group.entry(q.group).or_default().insert(q.topic);
        }
    }
    let mut groups = Vec::new();
    let mut total_diff: u64 = 0;
    let mut total_inflight: u64 = 0;
    for (group, topics) in by_group {
        let mut stats = Vec::new();
        for topic in topics {
            let (entries, tps) = group_consume_stats(core, &group, Some(vec![topic])).await?;
            for (_, o) in &entries {
                total_diff += o.broker_offset.saturating_sub(o.consumer_offset);
                total_inflight += o.pull_offset.saturating_sub(o.consumer_offset);
            }
            let table = mq_table(&entries, &[("consumeTps", serde_json::json!(tps))])?;
            stats.push(String::from_utf8_lossy(&table).into_owned());
        }
        groups.push(format!(
            "{{{}:[{}]}}",
            serde_json::Value::from(group),
            stats.join(",")
        ));
    }
    let addr = core
        .shared
        .core_addrs
        .lock()
        .ok()
        .and_then(|a| a.get(usize::from(core.id)).cloned())
        .unwrap_or_default();
    let body = format!(
        "{{\"brokerAddr\":{},\"consumeStatsList\":[{}],\"totalDiff\":{total_diff},\"totalInflightDiff\":{total_inflight}}}",
        serde_json::Value::from(addr),
        groups.join(",")
    );
    Ok(raw_answer(req, body.into_bytes()))
}

fn connection(client_id: &str, c: &SeenClient) -> serde_json::Value {
    serde_json::json!({
        "clientAddr": c.addr,
        "clientId": client_id,
        "language": c.language,
        "version": c.version,
    })
}

fn timeout(core: &Front) -> Duration {
    Duration::from_millis(core.shared.config.consumer_timeout_ms)
}

fn consumer_connections(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = req
        .ext("consumerGroup")
        .ok_or_else(|| BrokerError::BadRequest("consumerGroup is required".into()))?;
    let mut connections = Vec::new();
    let mut subscriptions = BTreeMap::new();
    let mut data: Option<ConsumerData> = None;
    for (id, c) in core.rocketmq.live(core.shared.clock.now(), timeout(core)) {
        let Some(d) = c.consumers.iter().find(|d| d.group_name == group) else {
            continue;
        };
        connections.push(connection(&id, &c));
        for s in &d.subscription_data_set {
            subscriptions.insert(s.topic.clone(), s.clone());
        }
        data.get_or_insert_with(|| d.clone());
    }
    let Some(d) = data else {
        // RocketMQ's code, which its tools read as "not online" (queryMsgById's track).
        return Ok(Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                remoting::codes::response::CONSUMER_NOT_ONLINE,
                Some(format!("the consumer group[{group}] not online")),
            ),
            Body::None,
        ));
    };
    json_answer(
        req,
        &serde_json::json!({
            "connectionSet": connections,
            "subscriptionTable": subscriptions,
            "consumeType": d.consume_type.name(),
            "messageModel": d.message_model.name(),
            "consumeFromWhere": d.consume_from_where.name(),
        }),
    )
}

fn producer_connections(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let group = req
        .ext("producerGroup")
        .ok_or_else(|| BrokerError::BadRequest("producerGroup is required".into()))?;
    let connections: Vec<_> = core
        .rocketmq
        .live(core.shared.clock.now(), timeout(core))
        .into_iter()
        .filter(|(_, c)| c.producer_groups.iter().any(|g| g == group))
        .map(|(id, c)| connection(&id, &c))
        .collect();
    if connections.is_empty() {
        return Err(BrokerError::NotFound(format!(
            "the producer group {group} is not online on this broker"
        )));
    }
    json_answer(req, &serde_json::json!({ "connectionSet": connections }))
}

/// GET_ALL_PRODUCER_INFO (mqadmin's `producer -b`): every producer group whose clients
/// heartbeated to this core, with each client (RocketMQ's ProducerTableInfo).
fn all_producers(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let now = core.shared.clock.now();
    let wall_now = core.shared.clock.wall_ms();
    let mut table: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (id, c) in core.rocketmq.live(now, timeout(core)) {
        let since = now.saturating_duration_since(c.at).as_millis() as i64;
        for group in &c.producer_groups {
            table
                .entry(group.clone())
                .or_default()
                .push(serde_json::json!({
                    "clientId": id,
                    // As RocketMQ's broker writes it: the channel's address as Java prints
                    // an InetSocketAddress, `/ip:port`.
                    "remoteIP": format!("/{}", c.addr.trim_start_matches('/')),
                    "language": c.language,
                    "version": c.version,
                    "lastUpdateTimestamp": wall_now - since,
                }));
        }
    }
    json_answer(req, &serde_json::json!({ "data": table }))
}

/// GET_BROKER_HA_STATUS (mqadmin's haStatus): this core's replication as RocketMQ's
/// HARuntimeInfo. corvus replicates shard by shard, so a master core's figures are the sums
/// over its shards, per slave (its ack offset, what it lacks, in sync when every shard is);
/// a slave core's are its shards' sums as copied from the master. Transfer speeds are not
/// measured (0).
fn ha_status(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let shards = core.ha_status();
    let wall_now = core.shared.clock.wall_ms();
    let write_max: u64 = core.shards.values().map(|s| s.stats().write_offset.0).sum();
    let slave_views: Vec<_> = shards
        .iter()
        .filter_map(|s| s.from_master.as_ref())
        .collect();
    let body = if slave_views.is_empty() {
        // (ack offset, lag, in sync on every shard) per slave.
        let mut slaves: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
        for link in shards.iter().flat_map(|s| &s.slaves) {
            let e = slaves.entry(link.peer.clone()).or_insert((0, 0, true));
            e.0 += link.acked;
            e.1 += link.lag_bytes;
            e.2 &= link.in_sync;
        }
        let in_sync = slaves.values().filter(|s| s.2).count();
        let connections: Vec<serde_json::Value> = slaves
            .iter()
            .map(|(addr, (acked, lag, in_sync))| {
                serde_json::json!({
                    "addr": addr,
                    "slaveAckOffset": acked,
                    "diff": lag,
                    "inSync": in_sync,
                    "transferredByteInSecond": 0,
                    "transferFromWhere": 0,
                })
            })
            .collect();
        serde_json::json!({
            "master": true,
            "masterCommitLogMaxOffset": write_max,
            "inSyncSlaveNums": in_sync,
            "haConnectionInfo": connections,
        })
    } else {
        let heard = slave_views
            .iter()
            .filter_map(|v| v.last_heard_ms_ago)
            .min()
            .map_or(0, |ago| wall_now - ago as i64);
        serde_json::json!({
            "master": false,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "masterAddr": slave_views.iter().find_map(|v| v.master.clone()).unwrap_or_default(),
                "transferredByteInSecond": 0,
                "maxOffset": slave_views.iter().map(|v| v.local_end).sum::<u64>(),
                "lastReadTimestamp": heard,
                "lastWriteTimestamp": heard,
                "masterFlushOffset": slave_views.iter().map(|v| v.master_end).sum::<u64>(),
                "isActivated": slave_views.iter().all(|v| v.connected),
            },
        })
    };
    json_answer(req, &body)
}

/// GET_SYSTEM_TOPIC_LIST_FROM_BROKER (what mqadmin's exportMetadata leaves out): RocketMQ's
/// system topic names, the broker's `rmq_sys_` topics, and the names every broker serves
/// for itself (its cluster's and each core's).
fn system_topics(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let cfg = &core.shared.config;
    let mut topics: std::collections::BTreeSet<String> =
        SYSTEM_TOPICS.iter().map(|t| (*t).to_owned()).collect();
    topics.extend(
        core.topics
            .borrow()
            .all()
            .into_iter()
            .map(|t| t.name)
            .filter(|t| t.starts_with("rmq_sys_")),
    );
    topics.extend(protocol::core_view::broker_own_topics(
        &cfg.cluster_name,
        &cfg.broker_name,
        core.shared.cores,
    ));
    json_answer(req, &serde_json::json!({ "topicList": topics }))
}

/// DELETE_EXPIRED_COMMITLOG and CLEAN_EXPIRED_CONSUMEQUEUE (mqadmin's
/// deleteExpiredCommitLog and cleanExpiredCQ): a retention pass on every shard now. The
/// queue indexes are trimmed in the same pass as the segments they point into, so both
/// requests run the one pass.
async fn retention_now(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let deleted = core.run_retention_now().await?;
    tracing::info!(
        request = request::name(req.code).unwrap_or("?"),
        deleted_segments = deleted,
        "a retention pass ran at an admin's request"
    );
    Ok(Outgoing::remoting(ok(req), Body::None))
}

fn all_topic_configs(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topics = core.topics.borrow();
    let table: BTreeMap<String, serde_json::Value> = topics
        .all()
        .into_iter()
        .map(|t| {
            let v = serde_json::json!({
                "topicName": t.name,
                "readQueueNums": t.read_queues,
                "writeQueueNums": t.write_queues,
                "perm": t.perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": false,
                "attributes": topics.attributes(&t.name),
            });
            (t.name, v)
        })
        .collect();
    json_answer(
        req,
        &serde_json::json!({
            "topicConfigTable": table,
            "dataVersion": { "counter": 0, "timestamp": 0 },
        }),
    )
}

/// GET_TOPIC_CONFIG (RocketMQ 5's admin and Proxy): the topic as this core, the RocketMQ
/// broker it stands for, holds it (its queue counts are the core's), with its attributes,
/// in the fields of RocketMQ's `TopicConfigAndQueueMapping` (no static-topic mapping:
/// corvus has no static topics). A topic this broker does not have is TOPIC_NOT_EXIST.
fn one_topic_config(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?;
    let Ok(cfg) = topic_config(core, topic) else {
        return Ok(Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                remoting::codes::response::TOPIC_NOT_EXIST,
                Some(format!("No topic in this broker. topic: {topic}")),
            ),
            Body::None,
        ));
    };
    let ids = CoreQueues::of(core, topic, &cfg, core.id).ids;
    let count = |n| protocol::core_view::core_queue_count(&ids, n);
    json_answer(
        req,
        &serde_json::json!({
            "topicName": cfg.name,
            "readQueueNums": count(cfg.read_queues),
            "writeQueueNums": count(cfg.write_queues),
            "perm": cfg.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": false,
            "attributes": core.topics.borrow().attributes(topic),
        }),
    )
}

/// GET_SUBSCRIPTIONGROUP_CONFIG (RocketMQ 5's admin, `getConsumerConfig`): the group's stored
/// config, or RocketMQ's defaults for a group known from its offsets or its members'
/// heartbeats (as GET_ALL_SUBSCRIPTIONGROUP_CONFIG lists it); any other group is
/// SUBSCRIPTION_GROUP_NOT_EXIST. (RocketMQ's broker, with autoCreateSubscriptionGroup on,
/// creates a config for any group it is asked about; corvus does not invent groups.)
async fn one_subscription_group(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let group = req
        .ext("group")
        .filter(|g| !g.is_empty())
        .ok_or_else(|| BrokerError::BadRequest("group is required".into()))?
        .to_owned();
    let stored = core
        .sub_group(SubGroupOp::List(Some(group.clone())))
        .await?
        .into_iter()
        .next();
    match stored {
        Some(cfg) => json_answer(req, &cfg),
        None if group_known(core, &group) => {
            json_answer(req, &SubscriptionGroupConfig::named(&group))
        }
        None => Ok(Outgoing::remoting(
            RemotingCommand::response_to(
                req,
                remoting::codes::response::SUBSCRIPTION_GROUP_NOT_EXIST,
                Some("No group in this broker".into()),
            ),
            Body::None,
        )),
    }
}

/// Whether this core knows `group` without a stored config: from its offsets here or its
/// members' heartbeats to this core.
pub(super) fn group_known(core: &Front, group: &str) -> bool {
    stored_offsets(core).iter().any(|(q, _)| q.group == group)
        || core
            .rocketmq
            .live(core.shared.clock.now(), timeout(core))
            .iter()
            .any(|(_, c)| c.consumers.iter().any(|d| d.group_name == group))
}

fn consumed_by(core: &Front, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?;
    let mut groups: Vec<String> = stored_offsets(core)
        .into_iter()
        .filter(|(q, _)| q.topic == topic)
        .map(|(q, _)| q.group)
        .collect();
    for (_, c) in core.rocketmq.live(core.shared.clock.now(), timeout(core)) {
        for d in &c.consumers {
            if d.subscription_data_set.iter().any(|s| s.topic == topic) {
                groups.push(d.group_name.clone());
            }
        }
    }
    groups.sort();
    groups.dedup();
    json_answer(req, &serde_json::json!({ "groupList": groups }))
}

/// Stores a subscription group's config (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): core 0 keeps
/// the broker's table (`crate::sub_groups`) and writes it before this answers.
async fn subscription_group(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &Bytes,
) -> Result<Outgoing, BrokerError> {
    let cfg: SubscriptionGroupConfig = remoting::body::from_json(body)
        .map_err(|e| BrokerError::BadRequest(format!("subscription group config: {e}")))?;
    if cfg.group_name.is_empty() {
        return Err(BrokerError::BadRequest("groupName is required".into()));
    }
    let name = cfg.group_name.clone();
    core.sub_group(SubGroupOp::Upsert(kept_group(&cfg)?))
        .await?;
    tracing::info!(broker = %own_name(core), group = %name, "subscription group config stored");
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// Deletes a subscription group's config (DELETE_SUBSCRIPTIONGROUP). The group's committed
/// offsets are kept (RocketMQ's `cleanOffset` is not applied): they live with each queue on
/// its core and go when the topic's queues do.
async fn delete_subscription_group(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let group = req
        .ext("groupName")
        .filter(|g| !g.is_empty())
        .ok_or_else(|| BrokerError::BadRequest("groupName is required".into()))?
        .to_owned();
    core.sub_group(SubGroupOp::Delete(group.clone())).await?;
    tracing::info!(broker = %own_name(core), %group, "subscription group config deleted");
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// Deletes a topic from this broker (DELETE_TOPIC_IN_BROKER): every core drops it.
async fn delete_topic(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?
        .to_owned();
    core.delete_topic(topic).await?;
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// The stored configs, and RocketMQ's defaults for the groups known only from their offsets
/// or their members' heartbeats.
async fn all_subscription_groups(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let mut table: BTreeMap<String, SubscriptionGroupConfig> = core
        .sub_group(SubGroupOp::List(None))
        .await?
        .into_iter()
        .filter_map(stored_group)
        .map(|g| (g.group_name.clone(), g))
        .collect();
    let mut seen: Vec<String> = stored_offsets(core)
        .into_iter()
        .map(|(q, _)| q.group)
        .collect();
    for (_, c) in core.rocketmq.live(core.shared.clock.now(), timeout(core)) {
        seen.extend(c.consumers.iter().map(|d| d.group_name.clone()));
    }
    for g in seen {
        table
            .entry(g.clone())
            .or_insert_with(|| SubscriptionGroupConfig::named(&g));
    }
    json_answer(
        req,
        &serde_json::json!({
            "subscriptionGroupTable": table,
            "dataVersion": { "counter": 0, "timestamp": 0 },
        }),
    )
}

/// `cfg` as the kernel keeps it: every field, RocketMQ's defaults for those left out.
fn kept_group(cfg: &SubscriptionGroupConfig) -> Result<GroupConfig, BrokerError> {
    match serde_json::to_value(cfg) {
        Ok(serde_json::Value::Object(fields)) => {
            GroupConfig::new(fields).map_err(BrokerError::BadRequest)
        }
        Ok(_) => Err(BrokerError::Internal(
            "a subscription group config is not a JSON object".into(),
        )),
        Err(e) => Err(BrokerError::Internal(format!(
            "a subscription group config does not serialize: {e}"
        ))),
    }
}

/// A kept config read back (`None`, logged, if it no longer reads).
fn stored_group(g: GroupConfig) -> Option<SubscriptionGroupConfig> {
    let name = g.name().to_owned();
    match serde_json::from_value(serde_json::Value::Object(g.fields().clone())) {
        Ok(cfg) => Some(cfg),
        Err(e) => {
            tracing::warn!(group = %name, "a stored subscription group config does not read: {e}");
            None
        }
    }
}

/// The retry limit a group's stored config sets (retryMaxTimes), if it has one.
pub(crate) async fn stored_retry_max(core: &Rc<Front>, group: &str) -> Option<i32> {
    match core
        .sub_group(SubGroupOp::List(Some(group.to_owned())))
        .await
    {
        Ok(v) => v
            .into_iter()
            .next()
            .and_then(stored_group)
            .map(|g| g.retry_max_times),
        Err(_) => None,
    }
}

/// What a consumer says it is doing (mqadmin consumerStatus): asked of the client on its own
/// connection to this core, and its answer passed on as it is.
async fn consumer_running_info(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let mut ask = RemotingCommand::request(request::GET_CONSUMER_RUNNING_INFO, 0);
    ask.ext_fields = req.ext_fields.clone();
    ask_client(core, req, ask, Bytes::new()).await
}

/// Sends `ask` (with `body`) to the client `req`'s `clientId` names over its connection to
/// this core, and answers `req` with the client's answer, as RocketMQ's broker passes a
/// client's answers on.
async fn ask_client(
    core: &Front,
    req: &RemotingCommand,
    ask: RemotingCommand,
    body: Bytes,
) -> Result<Outgoing, BrokerError> {
    let client_id = req
        .ext("clientId")
        .ok_or_else(|| BrokerError::BadRequest("clientId is required".into()))?;
    let conn = core
        .clients
        .of_client(client_id)
        .filter(|c| c.speaks_remoting())
        .ok_or_else(|| {
            BrokerError::NotFound(format!(
                "client {client_id} is not connected to this broker"
            ))
        })?;
    let answer = conn
        .request_remoting_with_body(ask, body, crate::client_conn::CLIENT_ANSWER_TIMEOUT)
        .await?;
    let mut out =
        RemotingCommand::response_to(req, answer.command.code, answer.command.remark.clone());
    out.ext_fields = answer.command.ext_fields.clone();
    let body = if answer.body.is_empty() {
        Body::None
    } else {
        Body::Owned(vec![answer.body])
    };
    Ok(Outgoing::remoting(out, body))
}

/// CONSUME_MESSAGE_DIRECTLY (mqadmin's `queryMsgById -g G -d CLIENT`, the dashboard's
/// "consume directly"): the message the offset id names is handed to the client's listener
/// over its connection, and the client's ConsumeMessageDirectlyResult is the answer, as
/// RocketMQ's broker passes it on. The message goes as stored (MessageExt), with the queue
/// number the client knows.
async fn consume_directly(
    core: &Rc<Front>,
    req: &RemotingCommand,
) -> Result<Outgoing, BrokerError> {
    let msg_id = req
        .ext("msgId")
        .ok_or_else(|| BrokerError::BadRequest("msgId is required".into()))?;
    let id = message::ids::MsgOffsetId::parse(msg_id)
        .ok_or_else(|| BrokerError::BadRequest(format!("{msg_id} is not an offset message id")))?;
    let missing = || BrokerError::NotFound(format!("no message with id {msg_id}"));
    let records = core.view_by_offset(id.shard, id.commit_log_offset).await?;
    let body = match super::records_body(core, records) {
        Body::Owned(mut v) if !v.is_empty() => v.swap_remove(0),
        _ => return Err(missing()),
    };
    let mut ask = RemotingCommand::request(request::CONSUME_MESSAGE_DIRECTLY, 0);
    ask.ext_fields = req.ext_fields.clone();
    ask.ext_fields.insert("brokerName".into(), own_name(core));
    ask_client(core, req, ask, body).await
}

/// Resets a group's offsets of this core's queues of a topic to the first message stored at
/// or after `timestamp` (RocketMQ's resetOffsetByTime), and tells the group's online
/// RocketMQ clients the new offsets (RESET_CONSUMER_CLIENT_OFFSET) so they start there.
async fn reset_offset(core: &Rc<Front>, req: &RemotingCommand) -> Result<Outgoing, BrokerError> {
    let topic = req
        .ext("topic")
        .ok_or_else(|| BrokerError::BadRequest("topic is required".into()))?
        .to_owned();
    let group = req
        .ext("group")
        .ok_or_else(|| BrokerError::BadRequest("group is required".into()))?
        .to_owned();
    let timestamp: i64 = req
        .ext("timestamp")
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| BrokerError::BadRequest("timestamp is required".into()))?;
    let cfg = topic_config(core, &topic)?;
    let name = own_name(core);
    let mut entries = Vec::new();
    for (local, global) in own_queues(core, &topic, &cfg) {
        let (min, max) = core.queue_offsets(&topic, global).await?;
        let to = if timestamp < 0 {
            max
        } else {
            core.search_offset(&topic, global, timestamp)
                .await?
                .clamp(min, max)
        };
        core.group_offset(OffsetOp::Reset {
            queue: GroupQueue {
                group: group.clone(),
                topic: topic.clone(),
                queue_id: global,
            },
            offset: to,
        })
        .await?;
        entries.push((mq_key(&name, &topic, local), to));
    }
    let body = mq_table(&entries, &[])?;
    // The group's clients on this core take the new offsets now (their own offsets would
    // overwrite the reset at their next commit otherwise).
    let members: Vec<String> = core
        .rocketmq
        .live(core.shared.clock.now(), timeout(core))
        .into_iter()
        .filter(|(_, c)| c.consumers.iter().any(|d| d.group_name == group))
        .map(|(id, _)| id)
        .collect();
    for m in members {
        let Some(conn) = core.clients.of_client(&m) else {
            continue;
        };
        let mut cmd =
            RemotingCommand::request(request::RESET_CONSUMER_CLIENT_OFFSET, conn.next_opaque());
        cmd.set_oneway();
        cmd.ext_fields.insert("topic".into(), topic.clone());
        cmd.ext_fields.insert("group".into(), group.clone());
        cmd.ext_fields
            .insert("timestamp".into(), timestamp.to_string());
        conn.notify(cmd, Bytes::from(body.clone())).await;
    }
    Ok(raw_answer(req, body))
}
