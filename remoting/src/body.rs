//! JSON bodies (serde types) and the two JSON dialects RocketMQ speaks.
//!
//! Java serializes bodies with fastjson, which writes the keys of integer-keyed maps
//! unquoted: `{"brokerAddrs":{0:"127.0.0.1:10911"}}`. That is not JSON, yet old Java
//! clients are answered that way; [`to_json`] writes either form ([`JsonForm`]), and
//! [`from_json`] reads both (it quotes bare numeric keys when strict parsing fails).
//!
//! Decoding is tolerant the way real clients need: unknown fields are ignored, missing ones
//! take defaults, numbers may arrive as strings and booleans as `0`/`1`, enums as names or
//! ordinals (the C++ client), and `null` reads as the default.
//!
//! Field order in the structs is alphabetical, as fastjson writes it, so our output matches
//! a Java server's byte for byte where the content does.

use std::collections::BTreeMap;
use std::io;

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};
use serde_json::Value;

use crate::Result;

/// Which JSON a body is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonForm {
    /// Standard JSON: every object key quoted. What clients since V4_9_4 expect, and what
    /// every client tested accepts.
    #[default]
    Standard,
    /// fastjson's default: keys of integer-keyed maps (`brokerAddrs`) unquoted.
    Fastjson,
}

/// Writes `value` as JSON in the given form.
pub fn to_json<T: Serialize + ?Sized>(value: &T, form: JsonForm) -> Result<Vec<u8>> {
    match form {
        JsonForm::Standard => Ok(serde_json::to_vec(value)?),
        JsonForm::Fastjson => {
            let mut out = Vec::with_capacity(256);
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, FastjsonFormatter::default());
            value.serialize(&mut ser)?;
            Ok(out)
        }
    }
}

/// Reads a body, accepting fastjson's unquoted numeric map keys as well as standard JSON.
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(strict) => {
            let quoted = quote_numeric_keys(bytes);
            serde_json::from_slice(&quoted).map_err(|_| strict.into())
        }
    }
}

/// Rewrites bare numeric object keys (`{0:"a",-1:"b"}`) as quoted ones. Everything else,
/// strings included, is copied unchanged; malformed input stays malformed.
pub fn quote_numeric_keys(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 16);
    // true for an object, false for an array.
    let mut stack: Vec<bool> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        match b {
            b'"' => {
                // Copy the whole string, escapes included.
                let start = i;
                i += 1;
                while i < input.len() && input[i] != b'"' {
                    i += if input[i] == b'\\' { 2 } else { 1 };
                }
                let end = (i + 1).min(input.len());
                out.extend_from_slice(&input[start..end]);
                i = end;
                expect_key = false;
                continue;
            }
            b'{' => {
                stack.push(true);
                expect_key = true;
            }
            b'[' => {
                stack.push(false);
                expect_key = false;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
            }
            b',' => expect_key = stack.last() == Some(&true),
            b' ' | b'\t' | b'\r' | b'\n' => {}
            b'-' | b'0'..=b'9' if expect_key => {
                let start = i;
                while i < input.len()
                    && matches!(input[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                out.push(b'"');
                out.extend_from_slice(&input[start..i]);
                out.push(b'"');
                expect_key = false;
                continue;
            }
            _ => expect_key = false,
        }
        out.push(b);
        i += 1;
    }
    out
}

/// A compact formatter that leaves integer map keys unquoted, as fastjson does. serde_json
/// writes an integer key as `begin_string`, the number, `end_string`; the opening quote of a
/// key is held back until it is known whether a number or text follows.
#[derive(Default)]
struct FastjsonFormatter {
    inner: CompactFormatter,
    in_key: bool,
    quote_pending: bool,
    bare_key: bool,
}

impl FastjsonFormatter {
    fn flush_quote<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.quote_pending {
            self.quote_pending = false;
            w.write_all(b"\"")?;
        }
        Ok(())
    }

    fn number_key(&mut self) {
        if self.in_key && self.quote_pending {
            self.quote_pending = false;
            self.bare_key = true;
        }
    }
}

macro_rules! bare_int_keys {
    ($($name:ident: $t:ty),*) => {
        $(
            fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W, v: $t) -> io::Result<()> {
                self.number_key();
                self.inner.$name(w, v)
            }
        )*
    };
}

impl Formatter for FastjsonFormatter {
    bare_int_keys!(write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64, write_i128: i128,
        write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64, write_u128: u128);

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.in_key = true;
        self.inner.begin_object_key(w, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.in_key = false;
        self.inner.end_object_key(w)
    }

    fn begin_string<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.in_key {
            self.quote_pending = true;
            Ok(())
        } else {
            w.write_all(b"\"")
        }
    }

    fn end_string<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.in_key && self.bare_key {
            self.bare_key = false;
            return Ok(());
        }
        self.flush_quote(w)?;
        w.write_all(b"\"")
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.flush_quote(w)?;
        self.inner.write_string_fragment(w, fragment)
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        self.flush_quote(w)?;
        self.inner.write_char_escape(w, escape)
    }
}

// ---------------------------------------------------------------------------------------------
// Lenient field readers

fn null_as_default<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn value_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
    let v = Value::deserialize(d)?;
    if v.is_null() {
        return Ok(0);
    }
    value_i64(&v).ok_or_else(|| D::Error::custom(format!("expected an integer, got {v}")))
}

fn lenient_i32<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<i32, D::Error> {
    let v = lenient_i64(d)?;
    i32::try_from(v).map_err(|_| D::Error::custom(format!("{v} is not a 32-bit integer")))
}

fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(b),
        Value::Number(n) => Ok(n.as_i64() != Some(0)),
        Value::String(s) => crate::headers::parse_bool(&s)
            .ok_or_else(|| D::Error::custom(format!("{s:?} is not a boolean"))),
        other => Err(D::Error::custom(format!("expected a boolean, got {other}"))),
    }
}

fn lenient_i32_vec<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<i32>, D::Error> {
    let v: Option<Vec<Value>> = Option::deserialize(d)?;
    v.unwrap_or_default()
        .iter()
        .map(|e| {
            value_i64(e)
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| D::Error::custom(format!("expected a 32-bit integer, got {e}")))
        })
        .collect()
}

/// Enums that arrive as Java names or as ordinals, and that keep a name nobody defined.
macro_rules! java_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $java:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            #[default]
            $($variant,)*
            /// A name or ordinal this crate does not know, kept as text.
            Unknown(String),
        }

        impl $name {
            const NAMES: &'static [&'static str] = &[$($java),*];

            pub fn name(&self) -> &str {
                match self {
                    $($name::$variant => $java,)*
                    $name::Unknown(s) => s,
                }
            }

            pub fn from_name(s: &str) -> Self {
                [$($name::$variant),*]
                    .into_iter()
                    .zip(Self::NAMES)
                    .find(|(_, n)| **n == s)
                    .map_or_else(|| $name::Unknown(s.to_owned()), |(v, _)| v)
            }

            pub fn from_ordinal(i: u64) -> Self {
                [$($name::$variant),*]
                    .into_iter()
                    .nth(i as usize)
                    .unwrap_or_else(|| $name::Unknown(i.to_string()))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                match Value::deserialize(d)? {
                    Value::Null => Ok($name::default()),
                    Value::String(s) => Ok($name::from_name(&s)),
                    Value::Number(n) => n
                        .as_u64()
                        .map($name::from_ordinal)
                        .ok_or_else(|| D::Error::custom(format!("bad ordinal {n}"))),
                    other => Err(D::Error::custom(format!("expected a name, got {other}"))),
                }
            }
        }
    };
}

java_enum!(
    /// Java `ConsumeType` (C++ ordinals: 0 actively, 1 passively).
    ConsumeType {
        Actively = "CONSUME_ACTIVELY",
        Passively = "CONSUME_PASSIVELY",
        Pop = "CONSUME_POP",
    }
);

java_enum!(
    /// Java `MessageModel` (ordinals: 0 broadcasting, 1 clustering).
    MessageModel {
        Broadcasting = "BROADCASTING",
        Clustering = "CLUSTERING",
    }
);

java_enum!(
    /// Java `ConsumeFromWhere`, in ordinal order.
    ConsumeFromWhere {
        LastOffset = "CONSUME_FROM_LAST_OFFSET",
        LastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        MinOffset = "CONSUME_FROM_MIN_OFFSET",
        MaxOffset = "CONSUME_FROM_MAX_OFFSET",
        FirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        Timestamp = "CONSUME_FROM_TIMESTAMP",
    }
);

// ---------------------------------------------------------------------------------------------
// NameServer bodies

/// `perm` bits of a topic or queue.
pub mod perm {
    pub const PRIORITY: i32 = 0x8;
    pub const READ: i32 = 0x4;
    pub const WRITE: i32 = 0x2;
    pub const INHERIT: i32 = 0x1;
}

/// One broker group (a master and its slaves) in a route.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    /// Broker id to address; id 0 is the master. Integer keys: fastjson writes them bare.
    #[serde(deserialize_with = "null_as_default")]
    pub broker_addrs: BTreeMap<i64, String>,
    pub broker_name: String,
    pub cluster: String,
    /// Required by rocketmq-client-rust 1.0.0 (no serde default there).
    #[serde(deserialize_with = "lenient_bool")]
    pub enable_acting_master: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
}

/// One broker's queues of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueData {
    pub broker_name: String,
    #[serde(deserialize_with = "lenient_i32")]
    pub perm: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub read_queue_nums: i32,
    /// Spelled `topicSynFlag` by RocketMQ before 4.9; read under either name.
    #[serde(alias = "topicSynFlag", deserialize_with = "lenient_i32")]
    pub topic_sys_flag: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub write_queue_nums: i32,
}

/// The body of a GET_ROUTEINFO_BY_TOPIC answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_datas: Vec<BrokerData>,
    #[serde(deserialize_with = "null_as_default")]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_topic_conf: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub queue_datas: Vec<QueueData>,
}

/// The body of a GET_BROKER_CLUSTER_INFO answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    #[serde(deserialize_with = "null_as_default")]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    #[serde(deserialize_with = "null_as_default")]
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

/// The body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER and GET_TOPICS_BY_CLUSTER answers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_addr: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_list: Vec<String>,
}

/// A topic's config as a broker registers it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfig {
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub attributes: BTreeMap<String, String>,
    #[serde(deserialize_with = "lenient_bool")]
    pub order: bool,
    #[serde(deserialize_with = "lenient_i32")]
    pub perm: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub read_queue_nums: i32,
    /// `SINGLE_TAG` or `MULTI_TAG`.
    pub topic_filter_type: Option<String>,
    pub topic_name: String,
    #[serde(deserialize_with = "lenient_i32")]
    pub topic_sys_flag: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub write_queue_nums: i32,
}

/// A subscription group's config (Java `SubscriptionGroupConfig`): the body of
/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and the values of GET_ALL_SUBSCRIPTIONGROUP_CONFIG's
/// `subscriptionGroupTable`. A field left out takes RocketMQ's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupConfig {
    pub group_name: String,
    #[serde(deserialize_with = "lenient_bool")]
    pub consume_enable: bool,
    #[serde(deserialize_with = "lenient_bool")]
    pub consume_from_min_enable: bool,
    #[serde(deserialize_with = "lenient_bool")]
    pub consume_broadcast_enable: bool,
    #[serde(deserialize_with = "lenient_bool")]
    pub consume_message_orderly: bool,
    #[serde(deserialize_with = "lenient_i32")]
    pub retry_queue_nums: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub retry_max_times: i32,
    #[serde(deserialize_with = "lenient_i64")]
    pub broker_id: i64,
    #[serde(deserialize_with = "lenient_i64")]
    pub which_broker_when_consume_slowly: i64,
    #[serde(deserialize_with = "lenient_bool")]
    pub notify_consumer_ids_changed_enable: bool,
    #[serde(deserialize_with = "lenient_i32")]
    pub group_sys_flag: i32,
    #[serde(deserialize_with = "lenient_i32")]
    pub consume_timeout_minute: i32,
    /// RocketMQ 5's retry policy of the group (`GroupRetryPolicy`: `type` CUSTOMIZED or
    /// EXPONENTIAL, `customizedRetryPolicy.next` or `exponentialRetryPolicy`'s `initial`,
    /// `max` and `multiplier`, in ms), which v5 consumers get as their backoff; kept as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_retry_policy: Option<serde_json::Value>,
    /// RocketMQ 5's group attributes: as `updateSubGroup -a +priority.factor=50,-key` sends
    /// them (the broker applies the changes to the group's current ones), or as stored.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attributes: std::collections::BTreeMap<String, String>,
}

impl Default for SubscriptionGroupConfig {
    /// RocketMQ's defaults (`SubscriptionGroupConfig`'s field initialisers).
    fn default() -> Self {
        SubscriptionGroupConfig {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            group_retry_policy: None,
            attributes: std::collections::BTreeMap::new(),
        }
    }
}

impl SubscriptionGroupConfig {
    /// The group with RocketMQ's defaults.
    pub fn named(group: &str) -> Self {
        SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        }
    }
}

/// Java `DataVersion`: a registration's change counter.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataVersion {
    #[serde(deserialize_with = "lenient_i64")]
    pub counter: i64,
    #[serde(deserialize_with = "lenient_i64")]
    pub state_version: i64,
    #[serde(deserialize_with = "lenient_i64")]
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfigSerializeWrapper {
    pub data_version: DataVersion,
    #[serde(deserialize_with = "null_as_default")]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
}

/// The (uncompressed) body of REGISTER_BROKER.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterBrokerBody {
    #[serde(deserialize_with = "null_as_default")]
    pub filter_server_list: Vec<String>,
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
}

// ---------------------------------------------------------------------------------------------
// Broker bodies

/// One subscription of a consumer group, as heartbeats carry it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionData {
    #[serde(deserialize_with = "lenient_bool")]
    pub class_filter_mode: bool,
    #[serde(deserialize_with = "lenient_i32_vec")]
    pub code_set: Vec<i32>,
    /// `TAG` or `SQL92`; absent (C++ for `*`) means TAG.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression_type: Option<String>,
    pub sub_string: String,
    #[serde(deserialize_with = "lenient_i64")]
    pub sub_version: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub tags_set: Vec<String>,
    pub topic: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProducerData {
    pub group_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerData {
    pub consume_from_where: ConsumeFromWhere,
    pub consume_type: ConsumeType,
    pub group_name: String,
    pub message_model: MessageModel,
    #[serde(deserialize_with = "null_as_default")]
    pub subscription_data_set: Vec<SubscriptionData>,
    #[serde(deserialize_with = "lenient_bool")]
    pub unit_mode: bool,
}

/// The body of CHECK_CLIENT_CONFIG (46): a consumer asks, at start, whether the broker
/// takes its subscription (a SQL92 one: whether filters are on and the expression parses).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CheckClientRequestBody {
    pub client_id: String,
    pub group: String,
    pub subscription_data: SubscriptionData,
}

/// The body of HEART_BEAT (34).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatData {
    #[serde(rename = "clientID")]
    pub client_id: String,
    #[serde(deserialize_with = "null_as_default")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// 5.x heartbeat v2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_fingerprint: Option<i64>,
    #[serde(deserialize_with = "null_as_default")]
    pub producer_data_set: Vec<ProducerData>,
    #[serde(deserialize_with = "lenient_bool")]
    pub without_sub: bool,
}

/// The body of a GET_CONSUMER_LIST_BY_GROUP answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerListBody {
    #[serde(deserialize_with = "null_as_default")]
    pub consumer_id_list: Vec<String>,
}

/// A queue, as lock bodies name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MessageQueue {
    pub broker_name: String,
    #[serde(deserialize_with = "lenient_i32")]
    pub queue_id: i32,
    pub topic: String,
}

/// The body of LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockBatchRequestBody {
    pub client_id: String,
    pub consumer_group: String,
    #[serde(deserialize_with = "null_as_default")]
    pub mq_set: Vec<MessageQueue>,
    #[serde(deserialize_with = "lenient_bool")]
    pub only_this_broker: bool,
}

/// UNLOCK_BATCH_MQ carries the same fields.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// The body of a LOCK_BATCH_MQ answer: the queues the client now holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LockBatchResponseBody {
    #[serde(rename = "lockOKMQSet", deserialize_with = "null_as_default")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> TopicRouteData {
        TopicRouteData {
            broker_datas: vec![BrokerData {
                broker_addrs: [
                    (0, "127.0.0.1:10911".to_string()),
                    (1, "127.0.0.1:10921".to_string()),
                ]
                .into_iter()
                .collect(),
                broker_name: "broker-a".into(),
                cluster: "DefaultCluster".into(),
                enable_acting_master: false,
                zone_name: None,
            }],
            filter_server_table: BTreeMap::new(),
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: "broker-a".into(),
                perm: 6,
                read_queue_nums: 4,
                topic_sys_flag: 0,
                write_queue_nums: 4,
            }],
        }
    }

    const STANDARD: &str = r#"{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;
    const FASTJSON: &str = r#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

    #[test]
    fn route_is_written_in_both_forms_byte_for_byte() {
        assert_eq!(
            String::from_utf8(to_json(&route(), JsonForm::Standard).unwrap()).unwrap(),
            STANDARD
        );
        assert_eq!(
            String::from_utf8(to_json(&route(), JsonForm::Fastjson).unwrap()).unwrap(),
            FASTJSON
        );
    }

    /// `TopicRouteData.encode()` of the same route in rocketmq-common 4.9.8 (fastjson
    /// 1.2.69), printed by a JVM. 4.x has no `enableActingMaster`; 5.x adds it.
    const JAVA_4_9_8: &str = r#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;

    #[test]
    fn fastjson_form_matches_java() {
        let ours = String::from_utf8(to_json(&route(), JsonForm::Fastjson).unwrap()).unwrap();
        let java_with_5x_field = JAVA_4_9_8.replace(
            r#""cluster":"DefaultCluster"}"#,
            r#""cluster":"DefaultCluster","enableActingMaster":false}"#,
        );
        assert_eq!(ours, java_with_5x_field);
        assert_eq!(
            from_json::<TopicRouteData>(JAVA_4_9_8.as_bytes()).unwrap(),
            route()
        );
        let old: QueueData = from_json(br#"{"brokerName":"b","topicSynFlag":3}"#).unwrap();
        assert_eq!(old.topic_sys_flag, 3);
        // fastjson 1.2.69 writes LockBatchResponseBody as
        // {"lockOKMQSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}]}.
        let lock = LockBatchResponseBody {
            lock_ok_mq_set: vec![MessageQueue {
                broker_name: "broker-a".into(),
                queue_id: 1,
                topic: "T".into(),
            }],
        };
        assert_eq!(
            to_json(&lock, JsonForm::Fastjson).unwrap(),
            br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}]}"#.to_vec()
        );
    }

    #[test]
    fn fastjson_form_quotes_string_keys_and_escapes() {
        // Only integer keys lose their quotes; string keys (empty, escaped) keep them.
        let mut m: BTreeMap<String, BrokerData> = BTreeMap::new();
        m.insert(String::new(), BrokerData::default());
        m.insert("a\"b".into(), BrokerData::default());
        let ci = ClusterInfo {
            broker_addr_table: m,
            cluster_addr_table: [("c".to_string(), vec!["x".to_string()])]
                .into_iter()
                .collect(),
        };
        let out = String::from_utf8(to_json(&ci, JsonForm::Fastjson).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"brokerAddrTable":{"":{"brokerAddrs":{},"brokerName":"","cluster":"","enableActingMaster":false},"a\"b":{"brokerAddrs":{},"brokerName":"","cluster":"","enableActingMaster":false}},"clusterAddrTable":{"c":["x"]}}"#
        );
        assert_eq!(from_json::<ClusterInfo>(out.as_bytes()).unwrap(), ci);
    }

    #[test]
    fn both_forms_parse() {
        assert_eq!(
            from_json::<TopicRouteData>(STANDARD.as_bytes()).unwrap(),
            route()
        );
        assert_eq!(
            from_json::<TopicRouteData>(FASTJSON.as_bytes()).unwrap(),
            route()
        );
        // The key quoting leaves strings alone, even ones that look like keys.
        let tricky = br#"{ -1 : "{2:\"x\"}", 7:"a,3:b"}"#;
        assert_eq!(
            quote_numeric_keys(tricky),
            br#"{ "-1" : "{2:\"x\"}", "7":"a,3:b"}"#.to_vec()
        );
        let arr = br#"[1,{2:[3,4]}]"#;
        assert_eq!(quote_numeric_keys(arr), br#"[1,{"2":[3,4]}]"#.to_vec());
        assert!(from_json::<TopicRouteData>(b"{0:").is_err());
        assert!(from_json::<TopicRouteData>(b"\"unterminated").is_err());
    }

    #[test]
    fn heartbeat_from_java() {
        let body = br#"{"clientID":"192.168.1.2@12345#123","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"CG","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB","subVersion":1700000000000,"tagsSet":["TagA","TagB"],"topic":"TopicTest"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false,"someFutureField":{"x":1}}"#;
        let hb: HeartbeatData = from_json(body).unwrap();
        assert_eq!(hb.client_id, "192.168.1.2@12345#123");
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, ConsumeType::Passively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(c.consume_from_where, ConsumeFromWhere::LastOffset);
        let s = &c.subscription_data_set[0];
        assert_eq!(s.code_set, vec![2598919, 2598920]);
        assert_eq!(s.sub_version, 1_700_000_000_000);
        assert_eq!(hb.producer_data_set[0].group_name, "CLIENT_INNER_PRODUCER");
        // Round trip through our own writer.
        let again: HeartbeatData = from_json(&to_json(&hb, JsonForm::Standard).unwrap()).unwrap();
        assert_eq!(again, hb);
    }

    #[test]
    fn heartbeat_from_cpp() {
        // Ordinals, subVersion as a string, tagsSet/codeSet/expressionType missing,
        // unitMode as a number, producerDataSet missing.
        let body = br#"{"clientID":"127.0.0.1@9#0","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"CG","messageModel":0,"subscriptionDataSet":[{"subString":"*","subVersion":"1700000000000","topic":"T"}],"unitMode":0}]}"#;
        let hb: HeartbeatData = from_json(body).unwrap();
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, ConsumeType::Passively);
        assert_eq!(c.message_model, MessageModel::Broadcasting);
        assert_eq!(c.consume_from_where, ConsumeFromWhere::FirstOffset);
        assert!(!c.unit_mode);
        assert_eq!(c.subscription_data_set[0].sub_version, 1_700_000_000_000);
        assert!(c.subscription_data_set[0].tags_set.is_empty());
        assert!(hb.producer_data_set.is_empty());
        // A name nobody knows survives; an ordinal out of range too.
        let odd: ConsumerData =
            from_json(br#"{"consumeType":"CONSUME_LATER","messageModel":9}"#).unwrap();
        assert_eq!(
            odd.consume_type,
            ConsumeType::Unknown("CONSUME_LATER".into())
        );
        assert_eq!(odd.message_model, MessageModel::Unknown("9".into()));
        assert_eq!(odd.consume_type.name(), "CONSUME_LATER");
        // Nulls read as defaults; wrong types are errors, not panics.
        let n: HeartbeatData = from_json(
            br#"{"clientID":"x","producerDataSet":null,"consumerDataSet":null,"withoutSub":null}"#,
        )
        .unwrap();
        assert!(n.consumer_data_set.is_empty());
        assert!(from_json::<HeartbeatData>(br#"{"consumerDataSet":5}"#).is_err());
        assert!(from_json::<SubscriptionData>(br#"{"subVersion":"soon"}"#).is_err());
        assert!(from_json::<SubscriptionData>(br#"{"codeSet":[99999999999]}"#).is_err());
    }

    #[test]
    fn lock_bodies() {
        let body = br#"{"clientId":"c1","consumerGroup":"CG","mqSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"},{"topic":"T","brokerName":"broker-a","queueId":"2"}],"onlyThisBroker":false}"#;
        let req: LockBatchRequestBody = from_json(body).unwrap();
        assert_eq!(req.mq_set.len(), 2);
        assert_eq!(req.mq_set[1].queue_id, 2);
        let resp = LockBatchResponseBody {
            lock_ok_mq_set: req.mq_set.clone(),
        };
        let out = String::from_utf8(to_json(&resp, JsonForm::Standard).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"},{"brokerName":"broker-a","queueId":2,"topic":"T"}]}"#
        );
    }

    #[test]
    fn small_bodies() {
        let c = ConsumerListBody {
            consumer_id_list: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            to_json(&c, JsonForm::Standard).unwrap(),
            br#"{"consumerIdList":["a","b"]}"#.to_vec()
        );
        let t = TopicList {
            broker_addr: None,
            topic_list: vec!["T".into()],
        };
        assert_eq!(
            to_json(&t, JsonForm::Standard).unwrap(),
            br#"{"topicList":["T"]}"#.to_vec()
        );
    }

    #[test]
    fn register_broker_body() {
        let body = br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},"topicConfigTable":{"TBW102":{"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},"T":{"attributes":{},"perm":6,"readQueueNums":4,"topicName":"T","writeQueueNums":4,"unknown":1}}}}"#;
        let b: RegisterBrokerBody = from_json(body).unwrap();
        let w = &b.topic_config_serialize_wrapper;
        assert_eq!(w.data_version.counter, 3);
        assert_eq!(
            w.topic_config_table["TBW102"].perm,
            perm::READ | perm::WRITE | perm::INHERIT
        );
        assert_eq!(w.topic_config_table["T"].write_queue_nums, 4);
        let again: RegisterBrokerBody =
            from_json(&to_json(&b, JsonForm::Fastjson).unwrap()).unwrap();
        assert_eq!(again, b);
    }
}
