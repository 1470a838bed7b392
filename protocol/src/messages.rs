//! Frame headers: one [`Header`] per frame, carrying one [`Command`].
//!
//! Requests and responses share the `Command` enum so a peer decodes one type. New variants
//! are only ever appended (rkyv encodes the variant by position).

use rkyv::{Archive, Deserialize, Serialize};

use crate::{ResponseCode, FLAG_ONEWAY, FLAG_RESPONSE};

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Header {
    pub request_id: u64,
    /// [`FLAG_RESPONSE`], [`FLAG_ONEWAY`].
    pub flags: u32,
    /// A [`ResponseCode`] number in responses; 0 in requests.
    pub code: u16,
    /// Human-readable detail of an error.
    pub remark: String,
    pub command: Command,
}

impl Header {
    pub fn request(request_id: u64, command: Command) -> Header {
        Header {
            request_id,
            flags: 0,
            code: 0,
            remark: String::new(),
            command,
        }
    }

    pub fn oneway(request_id: u64, command: Command) -> Header {
        Header {
            request_id,
            flags: FLAG_ONEWAY,
            code: 0,
            remark: String::new(),
            command,
        }
    }

    pub fn response(request_id: u64, code: ResponseCode, command: Command) -> Header {
        Header {
            request_id,
            flags: FLAG_RESPONSE,
            code: code.as_u16(),
            remark: String::new(),
            command,
        }
    }

    pub fn error(request_id: u64, code: ResponseCode, remark: impl Into<String>) -> Header {
        Header {
            request_id,
            flags: FLAG_RESPONSE,
            code: code.as_u16(),
            remark: remark.into(),
            command: Command::Empty,
        }
    }

    /// An error response that says when a retry may succeed (`Command::Refused`), when
    /// `retry_after_ms` is given; else the same as [`Header::error`].
    pub fn refusal(
        request_id: u64,
        code: ResponseCode,
        remark: impl Into<String>,
        retry_after_ms: Option<u64>,
    ) -> Header {
        let mut header = Header::error(request_id, code, remark);
        if let Some(retry_after_ms) = retry_after_ms {
            header.command = Command::Refused { retry_after_ms };
        }
        header
    }

    /// When a refused request may be tried again (ms from the response), if the error
    /// response says.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self.command {
            Command::Refused { retry_after_ms } if self.is_response() => Some(retry_after_ms),
            _ => None,
        }
    }

    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flags & FLAG_ONEWAY != 0
    }

    pub fn response_code(&self) -> ResponseCode {
        ResponseCode::from_u16(self.code)
    }
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Command {
    /// A response with nothing to say beyond its code (also every error response but a
    /// refusal that says when to retry, `Refused`).
    Empty,

    // ---- NameServer requests ----
    RegisterBroker(RegisterBroker),
    UnregisterBroker(BrokerKey),
    GetRoute {
        topic: String,
    },
    GetClusterInfo,
    GetTopicList,

    // ---- Broker requests ----
    /// Body: records encoded with `message::encode_record`, back to back, all for `queue_id`.
    Send(SendRequest),
    Pull(PullRequest),
    CreateTopic(TopicConfig),
    GetQueueOffsets {
        topic: String,
        queue_id: u32,
    },
    SearchOffsetByTime {
        topic: String,
        queue_id: u32,
        timestamp_ms: i64,
    },
    BrokerStatus,
    QueryByKey(QueryByKey),
    /// A record by its place in a shard's CommitLog (decoded from an offset message id).
    ViewByOffset {
        shard: u16,
        commit_log_offset: u64,
    },
    GetTopicConfigs,

    // ---- Responses ----
    SendResult(SendResult),
    /// Body: the matching records, back to back.
    PullResult(PullResult),
    Route(RouteData),
    ClusterInfo(ClusterInfo),
    TopicList(Vec<String>),
    QueueOffsets {
        min_offset: u64,
        max_offset: u64,
    },
    Offset(u64),
    BrokerStatusResult(BrokerStatus),
    /// Body: records. Used by QueryByKey and ViewByOffset.
    Records {
        count: u32,
    },
    TopicConfigs(Vec<TopicConfig>),

    // ---- Consumer groups (appended; see ARCHITECTURE.md, "Consumer groups") ----
    /// A member of a group is alive. Served by core 0 (other cores forward); answered with
    /// `GroupMembers`.
    ConsumerHeartbeat(ConsumerHeartbeat),
    /// A member leaves at once (clean shutdown); answered with `GroupMembers`.
    UnregisterConsumer {
        group: String,
        client_id: String,
    },
    /// Long poll: answered with `GroupMembers` as soon as the group's version differs from
    /// `known_version`, or after `timeout_ms` (bounded by the broker's `long_polling_max_ms`).
    WaitGroupChange {
        group: String,
        known_version: u64,
        timeout_ms: u64,
    },
    /// The group's committed offset of a queue; served by the queue's owner core, answered with
    /// `ConsumerOffset`.
    QueryConsumerOffset(GroupQueue),
    /// Answered with `ConsumerOffset`: the stored offset after the commit. A commit carrying an
    /// older `epoch` than the stored one (the offset was reset meanwhile), or from a client
    /// while another holds the queue's lease, is not applied.
    CommitConsumerOffset(CommitOffset),
    /// Sets a group's offset of a queue (admin) and bumps its epoch; answered with
    /// `ConsumerOffset`.
    ResetConsumerOffset {
        queue: GroupQueue,
        offset: u64,
    },
    /// Takes or renews the lease on a queue for `lease_ms`; `Empty` when granted, code
    /// `QueueLocked` when another member holds it.
    LockQueue {
        queue: GroupQueue,
        client_id: String,
        lease_ms: u64,
    },
    GroupMembers(GroupMembers),
    ConsumerOffset {
        /// None: the group has no offset for this queue yet.
        offset: Option<u64>,
        epoch: u64,
        /// When the offset last moved forward (ms since the epoch; 0 = unknown).
        last_commit_ms: i64,
        /// The group's consume rate on this queue over its last two commits, times 1000.
        consume_tps_milli: u64,
        /// Queue offsets of this queue that pulls stepped over since the broker started
        /// (damaged or missing records, never delivered); filled in by queries only.
        skipped_records: u64,
    },

    // ---- Diagnostics (appended) ----
    /// The send path's per-stage latency histograms of every core, since the broker
    /// started or since the last request with `reset`; answered with `SendStagesResult`.
    SendStages {
        reset: bool,
    },
    SendStagesResult(Vec<StageHistogram>),

    // ---- NameServer liveness (appended) ----
    /// A registered broker is alive: answered `Empty`, or `BrokerNotRegistered` by a
    /// NameServer that does not know it (the broker then registers in full). Sent every
    /// `namesrv_heartbeat_interval_ms`; the full registration only when something changed
    /// or every `register_interval_ms`.
    BrokerHeartbeat(BrokerKey),
    /// The answer to `GetTopicList`: `count` names in the body ([`crate::encode_topic_names`]),
    /// where any number of them fits (a header holds about 60,000 short ones).
    TopicListBody {
        count: u32,
    },
    /// A registered broker's topics created or changed since its last registration, in the
    /// body ([`crate::encode_topic_body`]): the NameServer adds or replaces them in its
    /// routes and keeps the rest. Sent on a topic creation instead of the whole table (whose
    /// size grows with the topics); answered `BrokerNotRegistered` by a NameServer that
    /// does not know the broker, which then registers in full.
    RegisterTopics(BrokerKey),

    // ---- broker-initiated requests (appended) ----
    /// An admin asks the broker for what one client of a consumer group is doing; the broker
    /// asks that client over the client's own connection (`ClientRunningInfo`) and answers
    /// with the client's answer (`ClientRunningInfoResult`), or `NotFound` when no
    /// connection of that client is open. RocketMQ's GET_CONSUMER_RUNNING_INFO.
    GetClientRunningInfo {
        client_id: String,
    },
    /// From the broker to a client, on the client's connection: what it is doing.
    ClientRunningInfo,
    ClientRunningInfoResult(ClientRunningInfo),

    // ---- request-reply (appended; ARCHITECTURE.md, "Request-reply") ----
    /// The connection speaks for `client_id` (a requester, before its request goes out):
    /// replies naming that client (`REPLY_TO_CLIENT`) are pushed on it. Answered `Empty`.
    IdentifyClient {
        client_id: String,
    },
    /// A reply to a request (RocketMQ's SEND_REPLY_MESSAGE): body = one record whose
    /// `REPLY_TO_CLIENT` names the requester. The broker pushes it to the requester's
    /// connection (and stores it with `store_reply_message_enable`); answered `Empty`, or
    /// `QueryNotFound` when no connection of the requester is open.
    SendReply(SendRequest),
    /// From the broker to a requester, on its connection: a reply (body = one record).
    /// Answered `Empty`.
    PushReply,
    // ---- transactions (appended; see ARCHITECTURE.md, "Transactional messages") ----
    /// A transaction producer of `group` is alive on this connection: the broker may check
    /// its undecided transactions back over it. Answered `Empty`.
    ProducerHeartbeat {
        group: String,
        client_id: String,
    },
    /// Commits or rolls back a half message (RocketMQ's END_TRANSACTION); answered `Empty`.
    EndTransaction(EndTransaction),
    /// From the broker to a producer of the half message's group, on the producer's
    /// connection: what became of this transaction? Answered with `TransactionStateResult`.
    CheckTransaction(CheckTransaction),
    TransactionStateResult(TransactionState),
    // ---- SQL92 property filters (appended) ----
    /// A pull whose messages must also match a SQL92 expression over their properties
    /// (RocketMQ's `MessageSelector.bySql`, see `message::sql92`), answered as `Pull` is:
    /// `PullResult` with the matching records, `next_offset` past the ones left out. A bad
    /// expression is answered `SubscriptionParseFailed`, a broker with
    /// `enable_property_filter` off answers `SystemError`; both say why in the remark.
    PullSql92 {
        pull: PullRequest,
        expression: String,
    },
    // ---- access control (appended; see ARCHITECTURE.md, "Access control") ----
    /// Asks for this connection's login nonce; answered `AuthNonce`. Each ask makes a new
    /// one, and a login must use the last one given on the same connection.
    AuthChallenge,
    /// A fresh random nonce (base64) for `Login`.
    AuthNonce {
        nonce: String,
    },
    /// Logs the connection in for `access_key`: `signature` is base64 of HMAC-SHA256 keyed
    /// by the secret key over `corvus-login\n<nonce>\n<access_key>` (`acl::sign`). Answered
    /// `Empty`, or `NoPermission` with the reason; every later request on the connection
    /// acts for this key.
    Login {
        access_key: String,
        signature: String,
    },
    // ---- refusals (appended) ----
    /// The command of an error response whose refusal says when a retry may succeed (a
    /// quota or admission limit, code `FlowControl`): `retry_after_ms` from when it was
    /// sent. Every other error response carries `Empty`. Never a request: brokers and name
    /// servers answer one `RequestCodeNotSupported`, as any other response's command.
    Refused {
        retry_after_ms: u64,
    },
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Empty => "empty",
            Command::RegisterBroker(_) => "register_broker",
            Command::UnregisterBroker(_) => "unregister_broker",
            Command::GetRoute { .. } => "get_route",
            Command::GetClusterInfo => "get_cluster_info",
            Command::GetTopicList => "get_topic_list",
            Command::Send(_) => "send",
            Command::Pull(_) => "pull",
            Command::CreateTopic(_) => "create_topic",
            Command::GetQueueOffsets { .. } => "get_queue_offsets",
            Command::SearchOffsetByTime { .. } => "search_offset_by_time",
            Command::BrokerStatus => "broker_status",
            Command::QueryByKey(_) => "query_by_key",
            Command::ViewByOffset { .. } => "view_by_offset",
            Command::GetTopicConfigs => "get_topic_configs",
            Command::SendResult(_) => "send_result",
            Command::PullResult(_) => "pull_result",
            Command::Route(_) => "route",
            Command::ClusterInfo(_) => "cluster_info",
            Command::TopicList(_) => "topic_list",
            Command::QueueOffsets { .. } => "queue_offsets",
            Command::Offset(_) => "offset",
            Command::BrokerStatusResult(_) => "broker_status_result",
            Command::Records { .. } => "records",
            Command::TopicConfigs(_) => "topic_configs",
            Command::ConsumerHeartbeat(_) => "consumer_heartbeat",
            Command::UnregisterConsumer { .. } => "unregister_consumer",
            Command::WaitGroupChange { .. } => "wait_group_change",
            Command::QueryConsumerOffset(_) => "query_consumer_offset",
            Command::CommitConsumerOffset(_) => "commit_consumer_offset",
            Command::ResetConsumerOffset { .. } => "reset_consumer_offset",
            Command::LockQueue { .. } => "lock_queue",
            Command::GroupMembers(_) => "group_members",
            Command::ConsumerOffset { .. } => "consumer_offset",
            Command::SendStages { .. } => "send_stages",
            Command::SendStagesResult(_) => "send_stages_result",
            Command::BrokerHeartbeat(_) => "broker_heartbeat",
            Command::TopicListBody { .. } => "topic_list_body",
            Command::RegisterTopics(_) => "register_topics",
            Command::GetClientRunningInfo { .. } => "get_client_running_info",
            Command::ClientRunningInfo => "client_running_info",
            Command::ClientRunningInfoResult(_) => "client_running_info_result",
            Command::IdentifyClient { .. } => "identify_client",
            Command::SendReply(_) => "send_reply",
            Command::PushReply => "push_reply",
            Command::ProducerHeartbeat { .. } => "producer_heartbeat",
            Command::EndTransaction(_) => "end_transaction",
            Command::CheckTransaction(_) => "check_transaction",
            Command::TransactionStateResult(_) => "transaction_state_result",
            Command::PullSql92 { .. } => "pull_sql92",
            Command::AuthChallenge => "auth_challenge",
            Command::AuthNonce { .. } => "auth_nonce",
            Command::Login { .. } => "login",
            Command::Refused { .. } => "refused",
        }
    }
}

/// RocketMQ's permission bits.
pub mod perm {
    pub const READ: u32 = 4;
    pub const WRITE: u32 = 2;
    pub const INHERIT: u32 = 1;
    pub const READ_WRITE: u32 = READ | WRITE;
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub name: String,
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerKey {
    pub cluster: String,
    pub broker_name: String,
    pub broker_id: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RegisterBroker {
    pub key: BrokerKey,
    /// The address any core answers on (SO_REUSEPORT spreads connections over the cores).
    pub addr: String,
    /// Each core's direct address: a client connected there reaches the owning core with no
    /// cross-core hop. Index = core.
    pub core_addrs: Vec<String>,
    /// Shards in the broker's data directory; queue owner = `queue_owner_shard(.., shard_count)`,
    /// its core = `shard_core(shard, core_addrs.len())`.
    pub shard_count: u16,
    /// Empty when the frame's body carries the table ([`crate::encode_topic_body`]): the
    /// brokers of this version always send it there.
    pub topics: Vec<TopicConfig>,
    /// The controller's master epoch this broker serves in (raised by one at each election of
    /// a master for the group); 0 when the broker is not under a controller. The NameServer
    /// gives a group's master slot (id 0) to the highest epoch.
    pub master_epoch: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BrokerData {
    pub cluster: String,
    pub broker_name: String,
    /// (broker id, address); id 0 is the master.
    pub addrs: Vec<(u64, String)>,
    pub core_addrs: Vec<String>,
    pub shard_count: u16,
    /// Every live member's core addresses (broker id, one per core; empty when it
    /// registered none), so RocketMQ routes can list each core's slaves beside its master.
    pub member_core_addrs: Vec<(u64, Vec<String>)>,
}

impl BrokerData {
    pub fn master_addr(&self) -> Option<&str> {
        self.addrs
            .iter()
            .find(|(id, _)| *id == 0)
            .map(|(_, a)| a.as_str())
    }
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QueueData {
    pub broker_name: String,
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RouteData {
    pub brokers: Vec<BrokerData>,
    pub queues: Vec<QueueData>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ClusterInfo {
    /// Every live broker; group by `cluster` for display.
    pub brokers: Vec<BrokerData>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SendRequest {
    pub producer_group: String,
    pub topic: String,
    pub queue_id: u32,
    /// Number of records in the body (checked by the broker).
    pub count: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SendResult {
    pub queue_id: u32,
    pub first_queue_offset: u64,
    /// Commit-log offset of the first record; the following records follow it back to back.
    pub first_commit_log_offset: u64,
    pub shard: u16,
    /// The store host stamped into the records (`ip:port`), for offset message ids.
    pub store_host: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PullRequest {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub max_messages: u32,
    pub max_bytes: u32,
    /// `*`, `TagA`, `TagA || TagB`.
    pub tag_expression: String,
    /// Long polling: how long the broker may hold a pull that finds nothing. 0 = answer at once.
    pub suspend_timeout_ms: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PullResult {
    pub next_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    pub count: u32,
    /// The broker id of the group to read this queue from next: 0 the master, else a slave
    /// (the broker's `slave_read_enable`, when the consumer is far behind).
    pub suggested_broker_id: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QueryByKey {
    pub topic: String,
    pub key: String,
    pub begin_ms: i64,
    pub end_ms: i64,
    pub max: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BrokerStatus {
    pub broker_name: String,
    pub cluster: String,
    pub uptime_ms: u64,
    pub shard_count: u16,
    pub cores: Vec<CoreStatus>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct CoreStatus {
    pub core: u16,
    pub shards: Vec<u16>,
    pub requests: u64,
    /// Requests this core received for a queue another core owns, and so forwarded.
    pub cross_core_hops: u64,
    /// Membership requests (heartbeats, member lists) this core forwarded to core 0, which
    /// keeps the groups' members: a client's control traffic, every few seconds.
    pub group_hops: u64,
    pub inbox_depth: u64,
    pub produced_messages: u64,
    pub produced_bytes: u64,
    pub consumed_messages: u64,
    pub consumed_bytes: u64,
    pub commit_log_bytes: u64,
    /// Bytes appended but not yet durable (RocketMQ's "disk falling behind").
    pub durable_lag_bytes: u64,
    pub disk_use_ratio: f64,
    /// Damaged CommitLog ranges of this core's shards that are never served (found by
    /// recovery, or by a read since), and their bytes.
    pub quarantined_ranges: u64,
    pub quarantined_bytes: u64,
    /// Queue entries pulls stepped over (quarantined or missing records) since start.
    pub skipped_records: u64,
    /// Sends refused SYSTEM_BUSY because too many acknowledged bytes were not yet safe
    /// on disk, since start.
    pub busy_refusals: u64,
    /// Records the shards' tail rings held past their written marks at start: what the
    /// previous run had acknowledged and perhaps not yet written (0 after a clean stop).
    pub tail_ring_records: u64,
    /// This core's shards that cannot create their next segment (no space or descriptors)
    /// and refuse sends until a retry succeeds.
    pub writes_blocked_shards: u64,
    /// Client connections open on this core, and the most it keeps (its share of
    /// `connections_max` within the descriptor limit).
    pub connections_open: u64,
    pub connections_max: u64,
    /// Connections closed at once because the core was full, since start.
    pub connections_refused: u64,
    /// Connections closed for idleness or for a frame not complete in time, since start.
    pub connections_timed_out: u64,
    /// Connections closed after a malformed frame, since start.
    pub connections_bad_frames: u64,
    /// Connections closed for TLS, since start: plaintext on an enforcing listener, or a
    /// TLS handshake that failed or did not finish in time.
    pub connections_tls_refused: u64,
    /// ConsumeQueue files this core's shards have mapped now (at most
    /// `consume_queue_maps_max`), and those unmapped since start to map others.
    pub cq_files_mapped: u64,
    pub cq_files_unmapped: u64,
    /// `ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`.
    pub role: String,
    /// This core's shards' replication as JSON: per shard, a master's slaves (in sync or
    /// not, sent, acknowledged, lag in bytes, when last heard) or a slave's view of its
    /// master (connected, lag, last error).
    pub replication: String,
}

/// One stage of one core's send path: how long it took, as the recorded values (ns, at
/// most 1% apart) and how many requests fell on each.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageHistogram {
    pub core: u16,
    /// `queued`, `room`, `append`, `durable`, `forward`, `reply`, `write` or `total`
    /// (ARCHITECTURE.md, "Where a send's time goes").
    pub stage: String,
    pub buckets: Vec<StageBucket>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageBucket {
    pub nanos: u64,
    pub count: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupQueue {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
}

/// What a client answers about itself: its id, and each consumer group it heartbeats with
/// the topics it consumes there.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientRunningInfo {
    pub client_id: String,
    pub groups: Vec<GroupRunningInfo>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupRunningInfo {
    pub group: String,
    pub topics: Vec<String>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ConsumerHeartbeat {
    pub group: String,
    /// Unique per consumer instance (`ip@pid@n`).
    pub client_id: String,
    pub topics: Vec<String>,
    pub broadcasting: bool,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupMembers {
    /// Changes whenever the member list changes; never repeats across broker restarts.
    pub version: u64,
    /// Live members' client ids, sorted.
    pub members: Vec<String>,
    /// The broker's retry delay levels (`retry_delay_levels_ms`), for failed messages.
    pub retry_delay_levels_ms: Vec<u64>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CommitOffset {
    pub queue: GroupQueue,
    pub offset: u64,
    /// The epoch the committer read the offset at (see `ResetConsumerOffset`).
    pub epoch: u64,
    pub client_id: String,
    /// Release the committer's lease on the queue together with the commit.
    pub release: bool,
}

/// What a transaction's producer decided (RocketMQ's LocalTransactionState).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    Commit,
    Rollback,
    /// Not decided yet: the broker asks again at its next check.
    Unknown,
}

/// A half message's place, as its send result gave it, and the producer's decision.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EndTransaction {
    pub producer_group: String,
    /// The shard and commit-log offset of the half message (the send result's).
    pub shard: u16,
    pub commit_log_offset: u64,
    /// Its offset in the half queue (the send result's queue offset).
    pub queue_offset: u64,
    /// The producer's message id (UNIQ_KEY), for logs.
    pub msg_id: String,
    pub state: TransactionState,
    /// The decision answers a check of the broker (RocketMQ's fromTransactionCheck).
    pub from_check: bool,
}

/// A check of an undecided half message, sent by the broker to a producer of its group.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CheckTransaction {
    pub producer_group: String,
    pub shard: u16,
    pub commit_log_offset: u64,
    pub queue_offset: u64,
    pub msg_id: String,
    /// The half message as stored (its topic is the half topic; REAL_TOPIC names the
    /// topic it is for).
    pub record: Vec<u8>,
}
