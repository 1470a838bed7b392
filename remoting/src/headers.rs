//! Typed headers: the `extFields` of the requests a NameServer and a broker serve, and of
//! their responses.
//!
//! Every field travels as a string (the JSON header decoder already turned the C++ client's
//! numbers and booleans into strings). Booleans are read as `true`/`false` in any case and
//! also as `1`/`0` (C++). Unknown keys (ACL `AccessKey`/`Signature`, 5.x `ns`, `nsd`, `oway`,
//! `lo`, …) are ignored. Field names are RocketMQ's, including the 5.x `bname` broker name.

use crate::command::{ExtFields, RemotingCommand};
use crate::{RemotingError, Result};

/// A header carried in `extFields`, both directions.
pub trait ExtHeader: Sized {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self>;
    fn to_ext_fields(&self) -> ExtFields;
}

impl RemotingCommand {
    /// Parses this command's `extFields` as header `H`.
    pub fn ext_header<H: ExtHeader>(&self) -> Result<H> {
        H::from_ext_fields(&self.ext_fields)
    }

    /// Builder-style: adds the fields of `header` to `extFields`.
    pub fn with_header<H: ExtHeader>(self, header: &H) -> Self {
        self.with_ext_fields(header.to_ext_fields())
    }
}

/// Reads typed fields out of `extFields`. Each accessor takes the accepted names in order of
/// preference (`&["producerGroup", "a"]`); the first present one is used.
struct Fields<'a>(&'a ExtFields);

impl<'a> Fields<'a> {
    fn raw(&self, names: &[&'static str]) -> Option<(&'static str, &'a str)> {
        names.iter().find_map(|n| self.0.get(n).map(|v| (*n, v)))
    }

    fn opt_str(&self, names: &[&'static str]) -> Option<String> {
        self.raw(names).map(|(_, v)| v.to_owned())
    }

    fn str(&self, names: &[&'static str]) -> Result<String> {
        self.opt_str(names).ok_or_else(|| missing(names))
    }

    fn opt_parse<T: std::str::FromStr>(
        &self,
        names: &[&'static str],
        expected: &'static str,
    ) -> Result<Option<T>> {
        parse_raw(self.raw(names), expected)
    }

    fn opt_i32(&self, names: &[&'static str]) -> Result<Option<i32>> {
        self.opt_parse(names, "32-bit integer")
    }

    fn opt_i64(&self, names: &[&'static str]) -> Result<Option<i64>> {
        self.opt_parse(names, "64-bit integer")
    }

    fn i32(&self, names: &[&'static str]) -> Result<i32> {
        self.opt_i32(names)?.ok_or_else(|| missing(names))
    }

    fn i64(&self, names: &[&'static str]) -> Result<i64> {
        self.opt_i64(names)?.ok_or_else(|| missing(names))
    }

    fn opt_bool(&self, names: &[&'static str]) -> Result<Option<bool>> {
        bool_raw(self.raw(names))
    }

    fn bool_or(&self, names: &[&'static str], default: bool) -> Result<bool> {
        Ok(self.opt_bool(names)?.unwrap_or(default))
    }
}

/// One field as found: the name it came under and its value.
type Raw<'a> = Option<(&'static str, &'a str)>;

fn parse_raw<T: std::str::FromStr>(raw: Raw<'_>, expected: &'static str) -> Result<Option<T>> {
    match raw {
        None => Ok(None),
        Some((field, v)) => v
            .parse::<T>()
            .map(Some)
            .map_err(|_| RemotingError::InvalidField {
                field,
                value: v.to_owned(),
                expected,
            }),
    }
}

fn bool_raw(raw: Raw<'_>) -> Result<Option<bool>> {
    match raw {
        None => Ok(None),
        Some((field, v)) => parse_bool(v)
            .map(Some)
            .ok_or_else(|| RemotingError::InvalidField {
                field,
                value: v.to_owned(),
                expected: "boolean",
            }),
    }
}

fn missing(names: &[&'static str]) -> RemotingError {
    RemotingError::MissingField(names.first().copied().unwrap_or("?"))
}

/// `true`/`false` in any case (Java, Go, Rust clients), `1`/`0` (C++), empty as false.
pub fn parse_bool(v: &str) -> Option<bool> {
    if v.eq_ignore_ascii_case("true") || v == "1" {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") || v == "0" || v.is_empty() {
        Some(false)
    } else {
        None
    }
}

/// Writes typed fields as strings.
#[derive(Default)]
struct Out(ExtFields);

impl Out {
    fn put(mut self, name: &str, v: impl std::fmt::Display) -> Self {
        self.0.set_display(name, v);
        self
    }

    fn put_opt<T: std::fmt::Display>(self, name: &str, v: &Option<T>) -> Self {
        match v {
            Some(v) => self.put(name, v),
            None => self,
        }
    }

    /// A string value, copied as it is.
    fn put_str(mut self, name: &str, v: &str) -> Self {
        self.0.set(name, v);
        self
    }

    fn put_opt_str(self, name: &str, v: &Option<String>) -> Self {
        match v {
            Some(v) => self.put_str(name, v),
            None => self,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// SEND_MESSAGE (10, long names), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)
/// (one-letter names `a`…`n`). Parsing accepts either spelling for every field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendMessageRequestHeader {
    pub producer_group: String,
    pub topic: String,
    /// The topic whose config a new topic inherits from (`TBW102`).
    pub default_topic: String,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    /// `key\u0001value\u0002…`; see [`crate::message::decode_properties`].
    pub properties: Option<String>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: bool,
    pub max_reconsume_times: Option<i32>,
    pub batch: bool,
    /// V2 `n`, V1 `brokerName`, 5.x `bname`.
    pub broker_name: Option<String>,
}

impl SendMessageRequestHeader {
    /// The one-letter form Java sends with SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.
    pub fn to_ext_fields_v2(&self) -> ExtFields {
        Out::default()
            .put("a", &self.producer_group)
            .put("b", &self.topic)
            .put("c", &self.default_topic)
            .put("d", self.default_topic_queue_nums)
            .put("e", self.queue_id)
            .put("f", self.sys_flag)
            .put("g", self.born_timestamp)
            .put("h", self.flag)
            .put_opt("i", &self.properties)
            .put_opt("j", &self.reconsume_times)
            .put("k", self.unit_mode)
            .put_opt("l", &self.max_reconsume_times)
            .put("m", self.batch)
            .put_opt("n", &self.broker_name)
            .0
    }
}

/// The send header's fields: long (V1) name and one-letter (V2) name, in the letters' order.
const SEND_FIELDS: [(&str, &str); 14] = [
    ("producerGroup", "a"),
    ("topic", "b"),
    ("defaultTopic", "c"),
    ("defaultTopicQueueNums", "d"),
    ("queueId", "e"),
    ("sysFlag", "f"),
    ("bornTimestamp", "g"),
    ("flag", "h"),
    ("properties", "i"),
    ("reconsumeTimes", "j"),
    ("unitMode", "k"),
    ("maxReconsumeTimes", "l"),
    ("batch", "m"),
    ("brokerName", "n"),
];

/// The send header's fields of `ext`, found in one pass (every send reads one): each under
/// the name it came by, the long name preferred to the letter, and 5.x's `bname` taken for
/// the broker name only when neither came.
fn scan_send(ext: &ExtFields) -> [Raw<'_>; 14] {
    let mut found: [Raw<'_>; 14] = [None; 14];
    // The preference of the name each was found under: 0 long, 1 letter, 2 `bname`.
    let mut rank = [u8::MAX; 14];
    let mut take = |i: usize, r: u8, name: &'static str, v| {
        if r < rank[i] {
            rank[i] = r;
            found[i] = Some((name, v));
        }
    };
    for (k, v) in ext.iter() {
        if let [letter] = k.as_bytes() {
            let i = usize::from(letter.wrapping_sub(b'a'));
            if i < SEND_FIELDS.len() {
                take(i, 1, SEND_FIELDS[i].1, v);
            }
        } else if let Some(i) = SEND_FIELDS.iter().position(|(long, _)| *long == k) {
            take(i, 0, SEND_FIELDS[i].0, v);
        } else if k == "bname" {
            take(13, 2, "bname", v);
        }
    }
    found
}

/// A send header's fields borrowed from the `extFields` they came in: what the broker reads
/// of every send, parsed without copying its strings ([`SendMessageRequestHeader`] owns them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendHeaderRef<'a> {
    pub producer_group: &'a str,
    pub topic: &'a str,
    pub default_topic: &'a str,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    pub properties: Option<&'a str>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: bool,
    pub max_reconsume_times: Option<i32>,
    pub batch: bool,
    pub broker_name: Option<&'a str>,
}

impl<'a> SendHeaderRef<'a> {
    /// The send header of `ext`, under either spelling of each field.
    pub fn parse(ext: &'a ExtFields) -> Result<Self> {
        let f = scan_send(ext);
        let missing = |i: usize| RemotingError::MissingField(SEND_FIELDS[i].0);
        let text = |i: usize| f[i].map(|(_, v)| v);
        let int32 = |i: usize| parse_raw::<i32>(f[i], "32-bit integer");
        let flag = |i: usize| Ok::<_, RemotingError>(bool_raw(f[i])?.unwrap_or(false));
        Ok(SendHeaderRef {
            producer_group: text(0).ok_or_else(|| missing(0))?,
            topic: text(1).ok_or_else(|| missing(1))?,
            default_topic: text(2).ok_or_else(|| missing(2))?,
            default_topic_queue_nums: int32(3)?.ok_or_else(|| missing(3))?,
            queue_id: int32(4)?.ok_or_else(|| missing(4))?,
            sys_flag: int32(5)?.ok_or_else(|| missing(5))?,
            born_timestamp: parse_raw::<i64>(f[6], "64-bit integer")?.ok_or_else(|| missing(6))?,
            flag: int32(7)?.ok_or_else(|| missing(7))?,
            properties: text(8),
            reconsume_times: int32(9)?,
            unit_mode: flag(10)?,
            max_reconsume_times: int32(11)?,
            batch: flag(12)?,
            broker_name: text(13),
        })
    }

    /// The same header owning its strings.
    pub fn to_owned_header(&self) -> SendMessageRequestHeader {
        SendMessageRequestHeader {
            producer_group: self.producer_group.to_owned(),
            topic: self.topic.to_owned(),
            default_topic: self.default_topic.to_owned(),
            default_topic_queue_nums: self.default_topic_queue_nums,
            queue_id: self.queue_id,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            flag: self.flag,
            properties: self.properties.map(str::to_owned),
            reconsume_times: self.reconsume_times,
            unit_mode: self.unit_mode,
            max_reconsume_times: self.max_reconsume_times,
            batch: self.batch,
            broker_name: self.broker_name.map(str::to_owned),
        }
    }
}

impl ExtHeader for SendMessageRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        SendHeaderRef::parse(ext).map(|h| h.to_owned_header())
    }

    /// The long (V1) names.
    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("producerGroup", &self.producer_group)
            .put("topic", &self.topic)
            .put("defaultTopic", &self.default_topic)
            .put("defaultTopicQueueNums", self.default_topic_queue_nums)
            .put("queueId", self.queue_id)
            .put("sysFlag", self.sys_flag)
            .put("bornTimestamp", self.born_timestamp)
            .put("flag", self.flag)
            .put_opt("properties", &self.properties)
            .put_opt("reconsumeTimes", &self.reconsume_times)
            .put("unitMode", self.unit_mode)
            .put_opt("maxReconsumeTimes", &self.max_reconsume_times)
            .put("batch", self.batch)
            .put_opt("brokerName", &self.broker_name)
            .0
    }
}

/// PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub max_msg_nums: i32,
    /// [`crate::message::pull_sys_flag`] bits.
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend_timeout_millis: i64,
    pub subscription: Option<String>,
    pub sub_version: i64,
    pub expression_type: Option<String>,
    pub max_msg_bytes: Option<i32>,
    pub broker_name: Option<String>,
}

impl ExtHeader for PullMessageRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(PullMessageRequestHeader {
            consumer_group: f.str(&["consumerGroup"])?,
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
            queue_offset: f.i64(&["queueOffset"])?,
            max_msg_nums: f.i32(&["maxMsgNums"])?,
            sys_flag: f.i32(&["sysFlag"])?,
            commit_offset: f.i64(&["commitOffset"])?,
            suspend_timeout_millis: f.i64(&["suspendTimeoutMillis"])?,
            subscription: f.opt_str(&["subscription"]),
            sub_version: f.i64(&["subVersion"])?,
            expression_type: f.opt_str(&["expressionType"]),
            max_msg_bytes: f.opt_i32(&["maxMsgBytes"])?,
            broker_name: f.opt_str(&["bname"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("queueOffset", self.queue_offset)
            .put("maxMsgNums", self.max_msg_nums)
            .put("sysFlag", self.sys_flag)
            .put("commitOffset", self.commit_offset)
            .put("suspendTimeoutMillis", self.suspend_timeout_millis)
            .put_opt("subscription", &self.subscription)
            .put("subVersion", self.sub_version)
            .put_opt("expressionType", &self.expression_type)
            .put_opt("maxMsgBytes", &self.max_msg_bytes)
            .put_opt("bname", &self.broker_name)
            .0
    }
}

/// QUERY_CONSUMER_OFFSET (14).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    /// 5.x: answer 0 instead of QUERY_NOT_FOUND.
    pub set_zero_if_not_found: Option<bool>,
}

impl ExtHeader for QueryConsumerOffsetRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(QueryConsumerOffsetRequestHeader {
            consumer_group: f.str(&["consumerGroup"])?,
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
            set_zero_if_not_found: f.opt_bool(&["setZeroIfNotFound"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put_opt("setZeroIfNotFound", &self.set_zero_if_not_found)
            .0
    }
}

/// UPDATE_CONSUMER_OFFSET (15).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub commit_offset: i64,
}

impl ExtHeader for UpdateConsumerOffsetRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(UpdateConsumerOffsetRequestHeader {
            consumer_group: f.str(&["consumerGroup"])?,
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
            commit_offset: f.i64(&["commitOffset"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("commitOffset", self.commit_offset)
            .0
    }
}

/// GET_MAX_OFFSET (30).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetMaxOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
    /// 5.x: the committed (replicated) max rather than the written one. Default true.
    pub committed: bool,
}

impl ExtHeader for GetMaxOffsetRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(GetMaxOffsetRequestHeader {
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
            committed: f.bool_or(&["committed"], true)?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("committed", self.committed)
            .0
    }
}

/// GET_MIN_OFFSET (31).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetMinOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
}

impl ExtHeader for GetMinOffsetRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(GetMinOffsetRequestHeader {
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .0
    }
}

/// SEARCH_OFFSET_BY_TIMESTAMP (29).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
    pub timestamp: i64,
    /// 5.x `LOWER` or `UPPER`.
    pub boundary_type: Option<String>,
}

impl ExtHeader for SearchOffsetRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(SearchOffsetRequestHeader {
            topic: f.str(&["topic"])?,
            queue_id: f.i32(&["queueId"])?,
            timestamp: f.i64(&["timestamp"])?,
            boundary_type: f.opt_str(&["boundaryType"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("timestamp", self.timestamp)
            .put_opt("boundaryType", &self.boundary_type)
            .0
    }
}

/// VIEW_MESSAGE_BY_ID (33): `offset` is the commit-log offset decoded from an offset msgId.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ViewMessageRequestHeader {
    pub offset: i64,
    pub topic: Option<String>,
}

impl ExtHeader for ViewMessageRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(ViewMessageRequestHeader {
            offset: f.i64(&["offset"])?,
            topic: f.opt_str(&["topic"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("offset", self.offset)
            .put_opt("topic", &self.topic)
            .0
    }
}

/// QUERY_MESSAGE (12): by key within a time range.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryMessageRequestHeader {
    pub topic: String,
    pub key: String,
    pub max_num: i32,
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
}

impl ExtHeader for QueryMessageRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(QueryMessageRequestHeader {
            topic: f.str(&["topic"])?,
            key: f.str(&["key"])?,
            max_num: f.i32(&["maxNum"])?,
            begin_timestamp: f.i64(&["beginTimestamp"])?,
            end_timestamp: f.i64(&["endTimestamp"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put("key", &self.key)
            .put("maxNum", self.max_num)
            .put("beginTimestamp", self.begin_timestamp)
            .put("endTimestamp", self.end_timestamp)
            .0
    }
}

/// GET_ROUTEINFO_BY_TOPIC (105).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetRouteInfoRequestHeader {
    pub topic: String,
    pub accept_standard_json_only: Option<bool>,
}

impl GetRouteInfoRequestHeader {
    /// Whether the Java NameServer would answer `request` with standard JSON (quoted
    /// `brokerAddrs` keys): the client is V4_9_4 (version 401) or newer, or asked for it.
    pub fn wants_standard_json(&self, request: &RemotingCommand) -> bool {
        request.version >= MQ_VERSION_V4_9_4 || self.accept_standard_json_only == Some(true)
    }
}

/// Java `MQVersion.Version.V4_9_4.ordinal()`, from which clients parse standard JSON routes.
pub const MQ_VERSION_V4_9_4: i32 = 401;

impl ExtHeader for GetRouteInfoRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(GetRouteInfoRequestHeader {
            topic: f.str(&["topic"])?,
            accept_standard_json_only: f.opt_bool(&["acceptStandardJsonOnly"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put_opt("acceptStandardJsonOnly", &self.accept_standard_json_only)
            .0
    }
}

/// CONSUMER_SEND_MSG_BACK (36).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerSendMsgBackRequestHeader {
    /// Commit-log offset of the original message.
    pub offset: i64,
    pub group: String,
    pub delay_level: i32,
    pub origin_msg_id: Option<String>,
    pub origin_topic: Option<String>,
    pub unit_mode: bool,
    pub max_reconsume_times: Option<i32>,
    pub broker_name: Option<String>,
}

impl ExtHeader for ConsumerSendMsgBackRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(ConsumerSendMsgBackRequestHeader {
            offset: f.i64(&["offset"])?,
            group: f.str(&["group"])?,
            delay_level: f.i32(&["delayLevel"])?,
            origin_msg_id: f.opt_str(&["originMsgId"]),
            origin_topic: f.opt_str(&["originTopic"]),
            unit_mode: f.bool_or(&["unitMode"], false)?,
            max_reconsume_times: f.opt_i32(&["maxReconsumeTimes"])?,
            broker_name: f.opt_str(&["bname"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("offset", self.offset)
            .put("group", &self.group)
            .put("delayLevel", self.delay_level)
            .put_opt("originMsgId", &self.origin_msg_id)
            .put_opt("originTopic", &self.origin_topic)
            .put("unitMode", self.unit_mode)
            .put_opt("maxReconsumeTimes", &self.max_reconsume_times)
            .put_opt("bname", &self.broker_name)
            .0
    }
}

/// GET_CONSUMER_LIST_BY_GROUP (38) and NOTIFY_CONSUMER_IDS_CHANGED (40).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerGroupRequestHeader {
    pub consumer_group: String,
}

impl ExtHeader for ConsumerGroupRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        Ok(ConsumerGroupRequestHeader {
            consumer_group: Fields(ext).str(&["consumerGroup"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default().put("consumerGroup", &self.consumer_group).0
    }
}

/// UNREGISTER_CLIENT (35). Either group may be absent or empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnregisterClientRequestHeader {
    pub client_id: String,
    pub producer_group: Option<String>,
    pub consumer_group: Option<String>,
}

impl ExtHeader for UnregisterClientRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        Ok(UnregisterClientRequestHeader {
            client_id: f.str(&["clientID"])?,
            producer_group: non_empty(f.opt_str(&["producerGroup"])),
            consumer_group: non_empty(f.opt_str(&["consumerGroup"])),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("clientID", &self.client_id)
            .put_opt("producerGroup", &self.producer_group)
            .put_opt("consumerGroup", &self.consumer_group)
            .0
    }
}

/// UPDATE_AND_CREATE_TOPIC (17).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicRequestHeader {
    pub topic: String,
    pub default_topic: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    /// `SINGLE_TAG` or `MULTI_TAG`.
    pub topic_filter_type: String,
    pub topic_sys_flag: Option<i32>,
    pub order: bool,
    /// RocketMQ 5's attribute changes (`+message.type=FIFO,-key`), when any.
    pub attributes: Option<String>,
}

impl ExtHeader for CreateTopicRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(CreateTopicRequestHeader {
            topic: f.str(&["topic"])?,
            default_topic: f.str(&["defaultTopic"])?,
            read_queue_nums: f.i32(&["readQueueNums"])?,
            write_queue_nums: f.i32(&["writeQueueNums"])?,
            perm: f.i32(&["perm"])?,
            topic_filter_type: f.str(&["topicFilterType"])?,
            topic_sys_flag: f.opt_i32(&["topicSysFlag"])?,
            order: f.bool_or(&["order"], false)?,
            attributes: f.opt_str(&["attributes"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("topic", &self.topic)
            .put("defaultTopic", &self.default_topic)
            .put("readQueueNums", self.read_queue_nums)
            .put("writeQueueNums", self.write_queue_nums)
            .put("perm", self.perm)
            .put("topicFilterType", &self.topic_filter_type)
            .put_opt("topicSysFlag", &self.topic_sys_flag)
            .put("order", self.order)
            .put_opt("attributes", &self.attributes)
            .0
    }
}

/// REGISTER_BROKER (103) and UNREGISTER_BROKER (104, which has no `haServerAddr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerRequestHeader {
    pub broker_name: String,
    pub broker_addr: String,
    pub cluster_name: String,
    pub ha_server_addr: Option<String>,
    /// 0 is the master.
    pub broker_id: i64,
    /// CRC32 of the body, 0 or absent when not checked.
    pub body_crc32: Option<i32>,
    /// The body is zlib-compressed in Java's own layout (not decoded by this crate).
    pub compressed: bool,
    pub heartbeat_timeout_millis: Option<i64>,
    pub enable_acting_master: Option<bool>,
}

impl ExtHeader for RegisterBrokerRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(RegisterBrokerRequestHeader {
            broker_name: f.str(&["brokerName"])?,
            broker_addr: f.str(&["brokerAddr"])?,
            cluster_name: f.str(&["clusterName"])?,
            ha_server_addr: f.opt_str(&["haServerAddr"]),
            broker_id: f.i64(&["brokerId"])?,
            body_crc32: f.opt_i32(&["bodyCrc32"])?,
            compressed: f.bool_or(&["compressed"], false)?,
            heartbeat_timeout_millis: f.opt_i64(&["heartbeatTimeoutMillis"])?,
            enable_acting_master: f.opt_bool(&["enableActingMaster"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("brokerName", &self.broker_name)
            .put("brokerAddr", &self.broker_addr)
            .put("clusterName", &self.cluster_name)
            .put_opt("haServerAddr", &self.ha_server_addr)
            .put("brokerId", self.broker_id)
            .put_opt("bodyCrc32", &self.body_crc32)
            .put("compressed", self.compressed)
            .put_opt("heartbeatTimeoutMillis", &self.heartbeat_timeout_millis)
            .put_opt("enableActingMaster", &self.enable_acting_master)
            .0
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// The answer to a send: `msgId` is the offset msgId (comma-joined for batches), and
/// `queueOffset` the (first) message's queue offset. `recallHandle` (RocketMQ 5.3.2) comes
/// with a scheduled message sent alone: what RECALL_MESSAGE takes to cancel it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendMessageResponseHeader {
    pub msg_id: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub transaction_id: Option<String>,
    pub recall_handle: Option<String>,
}

impl ExtHeader for SendMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(SendMessageResponseHeader {
            msg_id: f.str(&["msgId"])?,
            queue_id: f.i32(&["queueId"])?,
            queue_offset: f.i64(&["queueOffset"])?,
            transaction_id: f.opt_str(&["transactionId"]),
            recall_handle: f.opt_str(&["recallHandle"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        // Every send's answer: sized up front (the keys, two numbers and the strings), so
        // that building it allocates twice rather than growing as it goes.
        let strings = self.msg_id.len()
            + self.transaction_id.as_ref().map_or(0, String::len)
            + self.recall_handle.as_ref().map_or(0, String::len);
        Out(ExtFields::with_capacity(strings + 80, 5))
            .put_str("msgId", &self.msg_id)
            .put("queueId", self.queue_id)
            .put("queueOffset", self.queue_offset)
            .put_opt_str("transactionId", &self.transaction_id)
            .put_opt_str("recallHandle", &self.recall_handle)
            .0
    }
}

/// The answer to a pull, whatever its code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullMessageResponseHeader {
    /// 0: keep pulling from the master.
    pub suggest_which_broker_id: i64,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub offset_delta: Option<i64>,
    pub topic_sys_flag: Option<i32>,
    pub group_sys_flag: Option<i32>,
}

impl ExtHeader for PullMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(PullMessageResponseHeader {
            suggest_which_broker_id: f.i64(&["suggestWhichBrokerId"])?,
            next_begin_offset: f.i64(&["nextBeginOffset"])?,
            min_offset: f.i64(&["minOffset"])?,
            max_offset: f.i64(&["maxOffset"])?,
            offset_delta: f.opt_i64(&["offsetDelta"])?,
            topic_sys_flag: f.opt_i32(&["topicSysFlag"])?,
            group_sys_flag: f.opt_i32(&["groupSysFlag"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("suggestWhichBrokerId", self.suggest_which_broker_id)
            .put("nextBeginOffset", self.next_begin_offset)
            .put("minOffset", self.min_offset)
            .put("maxOffset", self.max_offset)
            .put_opt("offsetDelta", &self.offset_delta)
            .put_opt("topicSysFlag", &self.topic_sys_flag)
            .put_opt("groupSysFlag", &self.group_sys_flag)
            .0
    }
}

/// The answer to QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET and
/// SEARCH_OFFSET_BY_TIMESTAMP: one `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetResponseHeader {
    pub offset: i64,
}

impl ExtHeader for OffsetResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        Ok(OffsetResponseHeader {
            offset: Fields(ext).i64(&["offset"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default().put("offset", self.offset).0
    }
}

/// The answer to QUERY_MESSAGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryMessageResponseHeader {
    pub index_last_update_timestamp: i64,
    pub index_last_update_phyoffset: i64,
}

impl ExtHeader for QueryMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(QueryMessageResponseHeader {
            index_last_update_timestamp: f.i64(&["indexLastUpdateTimestamp"])?,
            index_last_update_phyoffset: f.i64(&["indexLastUpdatePhyoffset"])?,
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put("indexLastUpdateTimestamp", self.index_last_update_timestamp)
            .put("indexLastUpdatePhyoffset", self.index_last_update_phyoffset)
            .0
    }
}

/// The answer to REGISTER_BROKER.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerResponseHeader {
    pub ha_server_addr: Option<String>,
    pub master_addr: Option<String>,
}

impl ExtHeader for RegisterBrokerResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self> {
        let f = Fields(ext);
        Ok(RegisterBrokerResponseHeader {
            ha_server_addr: f.opt_str(&["haServerAddr"]),
            master_addr: f.opt_str(&["masterAddr"]),
        })
    }

    fn to_ext_fields(&self) -> ExtFields {
        Out::default()
            .put_opt("haServerAddr", &self.ha_server_addr)
            .put_opt("masterAddr", &self.master_addr)
            .0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_header, SerializeType};

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn send_header_prefers_the_long_name_then_the_letter_then_bname() {
        let mut ext: ExtFields = [
            ("a", "letter"),
            ("producerGroup", "long"),
            ("b", "T"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "1"),
            ("f", "0"),
            ("g", "5"),
            ("h", "0"),
            ("bname", "broker-5x"),
            ("n", "broker-v2"),
            ("unitMode", "1"),
        ]
        .into_iter()
        .collect();
        let h = SendMessageRequestHeader::from_ext_fields(&ext).unwrap();
        assert_eq!(h.producer_group, "long");
        assert_eq!(h.broker_name.as_deref(), Some("broker-v2"));
        assert!(h.unit_mode && !h.batch);
        assert_eq!((h.queue_id, h.born_timestamp, h.properties), (1, 5, None));
        ext.remove("n");
        let h = SendMessageRequestHeader::from_ext_fields(&ext).unwrap();
        assert_eq!(h.broker_name.as_deref(), Some("broker-5x"));
        ext.set("e", "one");
        assert!(matches!(
            SendMessageRequestHeader::from_ext_fields(&ext),
            Err(RemotingError::InvalidField { field: "e", .. })
        ));
        ext.set("e", "1");
        ext.remove("b");
        assert!(matches!(
            SendMessageRequestHeader::from_ext_fields(&ext),
            Err(RemotingError::MissingField("topic"))
        ));
    }

    fn send_header() -> SendMessageRequestHeader {
        SendMessageRequestHeader {
            producer_group: "PG".into(),
            topic: "TopicTest".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 3,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_123,
            flag: 0,
            properties: Some("TAGS\u{1}TagA\u{2}".into()),
            reconsume_times: Some(0),
            unit_mode: false,
            max_reconsume_times: None,
            batch: false,
            broker_name: Some("broker-a".into()),
        }
    }

    #[test]
    fn send_header_reads_v1_and_v2_names() {
        let v1 = fields(&[
            ("producerGroup", "PG"),
            ("topic", "TopicTest"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "3"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000123"),
            ("flag", "0"),
            ("properties", "TAGS\u{1}TagA\u{2}"),
            ("reconsumeTimes", "0"),
            ("unitMode", "false"),
            ("batch", "false"),
            ("bname", "broker-a"),
        ]);
        let v2 = fields(&[
            ("a", "PG"),
            ("b", "TopicTest"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "3"),
            ("f", "0"),
            ("g", "1700000000123"),
            ("h", "0"),
            ("i", "TAGS\u{1}TagA\u{2}"),
            ("j", "0"),
            ("k", "false"),
            ("m", "false"),
            ("n", "broker-a"),
        ]);
        assert_eq!(
            SendMessageRequestHeader::from_ext_fields(&v1).unwrap(),
            send_header()
        );
        assert_eq!(
            SendMessageRequestHeader::from_ext_fields(&v2).unwrap(),
            send_header()
        );
        assert_eq!(send_header().to_ext_fields_v2(), v2);
        let back = SendMessageRequestHeader::from_ext_fields(&send_header().to_ext_fields());
        assert_eq!(back.unwrap(), send_header());
    }

    #[test]
    fn send_header_from_a_cpp_json_header() {
        // The C++ 0.4.4 client's shape: numbers unquoted, booleans as "0"/"1", ACL keys.
        let header = br#"{"code":10,"language":"CPP","version":63,"opaque":1,"flag":0,"remark":"",
            "extFields":{"AccessKey":"","Signature":"","producerGroup":"PG","topic":"T",
            "defaultTopic":"TBW102","defaultTopicQueueNums":4,"queueId":0,"sysFlag":0,
            "bornTimestamp":"1700000000000","flag":0,"properties":"UNIQ_KEY\u0001ABC\u0002",
            "reconsumeTimes":0,"unitMode":"0","batch":"1","maxReconsumeTimes":16}}"#;
        let cmd = decode_header(SerializeType::Json, header).unwrap();
        let h: SendMessageRequestHeader = cmd.ext_header().unwrap();
        assert_eq!(h.topic, "T");
        assert_eq!(h.default_topic_queue_nums, 4);
        assert_eq!(h.queue_id, 0);
        assert!(!h.unit_mode);
        assert!(h.batch);
        assert_eq!(h.max_reconsume_times, Some(16));
        assert_eq!(h.properties.as_deref(), Some("UNIQ_KEY\u{1}ABC\u{2}"));
    }

    #[test]
    fn missing_and_invalid_fields_are_named() {
        let mut ext = send_header().to_ext_fields();
        ext.remove("topic");
        assert_eq!(
            SendMessageRequestHeader::from_ext_fields(&ext),
            Err(RemotingError::MissingField("topic"))
        );
        let mut ext = send_header().to_ext_fields();
        ext.insert("queueId".into(), "three".into());
        assert!(matches!(
            SendMessageRequestHeader::from_ext_fields(&ext),
            Err(RemotingError::InvalidField {
                field: "queueId",
                ..
            })
        ));
        let mut ext = send_header().to_ext_fields();
        ext.insert("batch".into(), "maybe".into());
        assert!(SendMessageRequestHeader::from_ext_fields(&ext).is_err());
        let ext = fields(&[("topic", "T"), ("queueId", "99999999999")]);
        assert!(GetMinOffsetRequestHeader::from_ext_fields(&ext).is_err());
        assert_eq!(
            PullMessageRequestHeader::from_ext_fields(&ExtFields::new()),
            Err(RemotingError::MissingField("consumerGroup"))
        );
    }

    #[test]
    fn pull_header_without_subscription() {
        // Java and rust push consumers: no subscription string, no expressionType.
        let ext = fields(&[
            ("consumerGroup", "CG"),
            ("topic", "T"),
            ("queueId", "1"),
            ("queueOffset", "10"),
            ("maxMsgNums", "32"),
            ("sysFlag", "2"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "15000"),
            ("subVersion", "0"),
            ("lo", "false"),
            ("bname", "broker-a"),
        ]);
        let h = PullMessageRequestHeader::from_ext_fields(&ext).unwrap();
        assert_eq!(h.queue_offset, 10);
        assert_eq!(h.sys_flag, 2);
        assert_eq!(h.subscription, None);
        assert_eq!(h.max_msg_bytes, None);
        assert_eq!(h.broker_name.as_deref(), Some("broker-a"));
        assert_eq!(
            PullMessageRequestHeader::from_ext_fields(&h.to_ext_fields()).unwrap(),
            h
        );
    }

    fn round_trip<H: ExtHeader + PartialEq + std::fmt::Debug>(h: H) {
        assert_eq!(H::from_ext_fields(&h.to_ext_fields()).unwrap(), h);
    }

    #[test]
    fn every_header_round_trips() {
        round_trip(QueryConsumerOffsetRequestHeader {
            consumer_group: "CG".into(),
            topic: "T".into(),
            queue_id: 2,
            set_zero_if_not_found: Some(true),
        });
        round_trip(UpdateConsumerOffsetRequestHeader {
            consumer_group: "CG".into(),
            topic: "T".into(),
            queue_id: 2,
            commit_offset: 77,
        });
        round_trip(GetMaxOffsetRequestHeader {
            topic: "T".into(),
            queue_id: 1,
            committed: false,
        });
        round_trip(GetMinOffsetRequestHeader {
            topic: "T".into(),
            queue_id: 1,
        });
        round_trip(SearchOffsetRequestHeader {
            topic: "T".into(),
            queue_id: 1,
            timestamp: 5,
            boundary_type: Some("LOWER".into()),
        });
        round_trip(ViewMessageRequestHeader {
            offset: 1 << 40,
            topic: None,
        });
        round_trip(QueryMessageRequestHeader {
            topic: "T".into(),
            key: "k1".into(),
            max_num: 32,
            begin_timestamp: 0,
            end_timestamp: i64::MAX,
        });
        round_trip(GetRouteInfoRequestHeader {
            topic: "T".into(),
            accept_standard_json_only: Some(false),
        });
        round_trip(ConsumerSendMsgBackRequestHeader {
            offset: 123,
            group: "CG".into(),
            delay_level: 0,
            origin_msg_id: Some("ABC".into()),
            origin_topic: Some("T".into()),
            unit_mode: false,
            max_reconsume_times: Some(16),
            broker_name: None,
        });
        round_trip(ConsumerGroupRequestHeader {
            consumer_group: "CG".into(),
        });
        round_trip(UnregisterClientRequestHeader {
            client_id: "127.0.0.1@1".into(),
            producer_group: Some("PG".into()),
            consumer_group: None,
        });
        round_trip(CreateTopicRequestHeader {
            topic: "T".into(),
            default_topic: "TBW102".into(),
            read_queue_nums: 8,
            write_queue_nums: 8,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: Some(0),
            order: false,
            attributes: Some("+message.type=FIFO".into()),
        });
        round_trip(RegisterBrokerRequestHeader {
            broker_name: "broker-a".into(),
            broker_addr: "127.0.0.1:10911".into(),
            cluster_name: "DefaultCluster".into(),
            ha_server_addr: Some("127.0.0.1:10912".into()),
            broker_id: 0,
            body_crc32: Some(-5),
            compressed: false,
            heartbeat_timeout_millis: None,
            enable_acting_master: Some(false),
        });
        round_trip(PullMessageResponseHeader {
            suggest_which_broker_id: 0,
            next_begin_offset: 10,
            min_offset: 0,
            max_offset: 10,
            offset_delta: None,
            topic_sys_flag: None,
            group_sys_flag: None,
        });
        round_trip(OffsetResponseHeader { offset: -1 });
        round_trip(QueryMessageResponseHeader {
            index_last_update_timestamp: 1,
            index_last_update_phyoffset: 2,
        });
        round_trip(RegisterBrokerResponseHeader {
            ha_server_addr: None,
            master_addr: Some("127.0.0.1:10911".into()),
        });
    }

    #[test]
    fn response_headers_are_strings_in_ext_fields() {
        let req = RemotingCommand::request(310, 9);
        let resp =
            RemotingCommand::response_to(&req, 0, None).with_header(&SendMessageResponseHeader {
                msg_id: "7F00000100002A9F0000000000000000".into(),
                queue_id: 1,
                queue_offset: 42,
                transaction_id: None,
                recall_handle: None,
            });
        assert_eq!(
            resp.ext_fields,
            fields(&[
                ("msgId", "7F00000100002A9F0000000000000000"),
                ("queueId", "1"),
                ("queueOffset", "42"),
            ])
        );
        let back: SendMessageResponseHeader = resp.ext_header().unwrap();
        assert_eq!(back.queue_offset, 42);
    }

    #[test]
    fn route_json_form_follows_the_version() {
        let mut req = RemotingCommand::request(105, 1);
        let h = GetRouteInfoRequestHeader {
            topic: "T".into(),
            accept_standard_json_only: None,
        };
        req.version = 63;
        assert!(!h.wants_standard_json(&req));
        req.version = 401;
        assert!(h.wants_standard_json(&req));
        req.version = 63;
        let h = GetRouteInfoRequestHeader {
            accept_standard_json_only: Some(true),
            ..h
        };
        assert!(h.wants_standard_json(&req));
    }

    #[test]
    fn booleans() {
        for (s, b) in [
            ("true", Some(true)),
            ("TRUE", Some(true)),
            ("1", Some(true)),
            ("false", Some(false)),
            ("0", Some(false)),
            ("", Some(false)),
            ("yes", None),
        ] {
            assert_eq!(parse_bool(s), b, "{s}");
        }
    }
}
