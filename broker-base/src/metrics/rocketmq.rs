//! The series Apache RocketMQ 5's broker exports (`metricsExporterType=PROM`), under the names
//! and labels its OpenTelemetry Prometheus exporter writes, so that a Grafana board or an
//! alert made for RocketMQ shows corvus's figures.
//!
//! Names as they reach Prometheus from RocketMQ 5.1.4 and later (OpenTelemetry 1.29): a
//! counter keeps its `_total`, a unit is appended (`rocketmq_consumer_lag_latency` with unit
//! milliseconds is `rocketmq_consumer_lag_latency_milliseconds`), a histogram has `_bucket`,
//! `_sum` and `_count`. Every series carries RocketMQ's node labels: `cluster`,
//! `node_type="broker"` and `node_id`, the broker name; each core of corvus is a broker as
//! RocketMQ's clients and tools see it (`protocol::core_broker_name`), so each core's series
//! are its own node's and a sum over `node_id` is the broker's.
//!
//! The figures are corvus's own, published with its series by the metrics tick: the lag
//! family from the same offsets and POP windows as `corvus_consumer_backlog_messages`, the
//! in and out counters from the broker stats' per-topic and per-topic@group keys (bounded by
//! their caps, `%OVERFLOW%` past them), so nothing is counted twice and the RocketMQ series
//! are bounded as the corvus ones are.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};

/// A core as RocketMQ names it: its cluster and its broker name (`node_id`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Node {
    pub cluster: String,
    pub node_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    cluster: String,
    node_type: &'static str,
    node_id: String,
}

impl NodeLabels {
    fn of(node: &Node) -> NodeLabels {
        NodeLabels {
            cluster: node.cluster.clone(),
            node_type: "broker",
            node_id: node.node_id.clone(),
        }
    }
}

/// The store series' labels (RocketMQ's `DefaultStoreMetricsManager`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StorageLabels {
    #[prometheus(flatten)]
    node: NodeLabels,
    storage_type: &'static str,
    storage_medium: &'static str,
}

/// `rocketmq_consumer_*`'s labels (RocketMQ's `buildLagAttributes`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    #[prometheus(flatten)]
    node: NodeLabels,
    topic: String,
    consumer_group: String,
    is_retry: &'static str,
    is_system: &'static str,
}

/// `rocketmq_messages_in_total`'s, `rocketmq_throughput_in_total`'s and
/// `rocketmq_message_size`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InLabels {
    #[prometheus(flatten)]
    node: NodeLabels,
    topic: String,
    message_type: &'static str,
    is_system: &'static str,
}

/// `rocketmq_messages_out_total`'s and `rocketmq_throughput_out_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutLabels {
    #[prometheus(flatten)]
    node: NodeLabels,
    topic: String,
    consumer_group: String,
    is_system: &'static str,
}

/// `rocketmq_rpc_latency_milliseconds`'s labels (RocketMQ's `NettyRemotingAbstract`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    #[prometheus(flatten)]
    node: NodeLabels,
    protocol_type: &'static str,
    request_code: &'static str,
    response_code: &'static str,
    is_long_polling: &'static str,
    result: &'static str,
}

fn flag(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// RocketMQ's `TopicValidator.isSystemTopic`: its fixed system topics and the `rmq_sys_`
/// prefix. (The cluster's and brokers' own topics, which RocketMQ adds at run time, take no
/// sends and have no groups, so they never reach these series.)
pub fn is_system_topic(topic: &str) -> bool {
    protocol::core_view::SYSTEM_TOPICS.contains(&topic) || topic.starts_with("rmq_sys_")
}

/// RocketMQ's `BrokerMetricsManager.isSystem`: a system topic, or a group whose name starts
/// with `CID_RMQ_SYS_` (any case).
pub fn is_system(topic: &str, group: &str) -> bool {
    is_system_topic(topic)
        || group
            .get(..12)
            .is_some_and(|p| p.eq_ignore_ascii_case("CID_RMQ_SYS_"))
}

/// RocketMQ's `isRetryOrDlqTopic`: topics its in and out counters leave out.
pub fn is_retry_or_dlq(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
}

/// A topic's `message.type` as RocketMQ's `message_type` label spells it
/// (`TopicMessageType.getMetricsValue`); a topic that declares none is `normal`.
pub fn message_type_label(declared: Option<&str>) -> &'static str {
    match declared.map(str::to_ascii_uppercase).as_deref() {
        Some("FIFO") => "fifo",
        Some("DELAY") => "delay",
        Some("TRANSACTION") => "transaction",
        Some("PRIORITY") => "priority",
        Some("LITE") => "lite",
        _ => "normal",
    }
}

/// One consumer group's figures on one topic of one core, over the core's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLag {
    /// Messages stored and not yet consumed: from the group's consume offset (or the oldest
    /// kept) to the queue's end, and for a POP queue the ready ones plus those in flight.
    pub lag: u64,
    /// POP messages handed out and not yet acked.
    pub inflight: u64,
    /// Messages not yet handed to the group.
    pub ready: u64,
    /// Now minus the store time of the oldest message not yet consumed; 0 without lag.
    pub lag_latency_ms: u64,
    /// Now minus the store time of the oldest message not yet handed out; 0 when none is
    /// ready.
    pub queueing_latency_ms: u64,
}

/// A node's own gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeFigures {
    /// Topics in the core's table.
    pub topics: u64,
    /// Consumer groups with offsets on the core.
    pub groups: u64,
    /// Bytes appended and not yet durable.
    pub flush_behind_bytes: u64,
    /// The broker's `broker_permission` (RocketMQ's `brokerPermission`).
    pub permission: u64,
    /// Bytes in use on the data directory's filesystem; `None` when it cannot be measured.
    pub storage_bytes: Option<u64>,
}

impl GroupLag {
    /// Lag, lag latency, in flight, queueing latency, ready.
    fn values(&self) -> [u64; 5] {
        [
            self.lag,
            self.lag_latency_ms,
            self.inflight,
            self.queueing_latency_ms,
            self.ready,
        ]
    }
}

/// Message sizes in RocketMQ's buckets (1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB), counted
/// by the core where a send is taken and added here by the metrics tick: a histogram that
/// takes counts rather than observations.
#[derive(Clone, Debug, Default)]
pub struct SizeHistogram {
    inner: Arc<Mutex<SizeCounts>>,
}

/// The upper bounds of RocketMQ's `rocketmq_message_size` buckets, in bytes.
pub const MESSAGE_SIZE_BUCKETS: [u64; 6] = [1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20];

/// Sizes counted per bucket of [`MESSAGE_SIZE_BUCKETS`] (the last: above them), their sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeCounts {
    pub buckets: [u64; MESSAGE_SIZE_BUCKETS.len() + 1],
    pub sum: u64,
}

impl SizeCounts {
    /// Counts one message of `bytes`.
    pub fn observe(&mut self, bytes: u64) {
        let i = MESSAGE_SIZE_BUCKETS.partition_point(|&b| b < bytes);
        self.buckets[i] += 1;
        self.sum += bytes;
    }

    /// What `self` counted beyond `earlier` (`self` having counted everything `earlier` did).
    pub fn since(&self, earlier: &SizeCounts) -> SizeCounts {
        let mut out = SizeCounts {
            sum: self.sum.wrapping_sub(earlier.sum),
            ..SizeCounts::default()
        };
        for (o, (a, b)) in out
            .buckets
            .iter_mut()
            .zip(self.buckets.iter().zip(earlier.buckets.iter()))
        {
            *o = a.wrapping_sub(*b);
        }
        out
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl SizeHistogram {
    fn add(&self, c: &SizeCounts) {
        let Ok(mut s) = self.inner.lock() else {
            return;
        };
        for (a, b) in s.buckets.iter_mut().zip(c.buckets.iter()) {
            *a += b;
        }
        s.sum += c.sum;
    }
}

impl TypedMetric for SizeHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SizeHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let s = self.inner.lock().map(|s| *s).unwrap_or_default();
        let mut count = 0;
        let mut buckets = Vec::with_capacity(s.buckets.len());
        for (i, n) in s.buckets.iter().enumerate() {
            count += n;
            let bound = MESSAGE_SIZE_BUCKETS
                .get(i)
                .map_or(f64::INFINITY, |&b| b as f64);
            buckets.push((bound, *n));
        }
        encoder.encode_histogram::<NoLabelSet>(s.sum as f64, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// RocketMQ's rpc-latency buckets, in milliseconds (`RemotingMetricsManager.getMetricsView`).
const RPC_LATENCY_BUCKETS_MS: [f64; 9] = [1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0];

fn rpc_histogram() -> Histogram {
    Histogram::new(RPC_LATENCY_BUCKETS_MS)
}

fn gauge_value(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The RocketMQ-named families, registered beside corvus's own in its registry.
pub(super) struct RocketMqMetrics {
    messages_in: Family<InLabels, Counter>,
    throughput_in: Family<InLabels, Counter>,
    message_size: Family<InLabels, SizeHistogram>,
    messages_out: Family<OutLabels, Counter>,
    throughput_out: Family<OutLabels, Counter>,
    send_to_dlq: Family<OutLabels, Counter>,
    lag_messages: Family<LagLabels, Gauge>,
    lag_latency: Family<LagLabels, Gauge>,
    inflight: Family<LagLabels, Gauge>,
    queueing_latency: Family<LagLabels, Gauge>,
    ready: Family<LagLabels, Gauge>,
    topic_number: Family<NodeLabels, Gauge>,
    consumer_group_number: Family<NodeLabels, Gauge>,
    flush_behind: Family<NodeLabels, Gauge>,
    permission: Family<NodeLabels, Gauge>,
    storage_size: Family<StorageLabels, Gauge>,
    rpc_latency: Family<RpcLabels, Histogram, fn() -> Histogram>,
}

impl RocketMqMetrics {
    pub(super) fn register(r: &mut Registry) -> RocketMqMetrics {
        let m = RocketMqMetrics {
            messages_in: Family::default(),
            throughput_in: Family::default(),
            message_size: Family::default(),
            messages_out: Family::default(),
            throughput_out: Family::default(),
            send_to_dlq: Family::default(),
            lag_messages: Family::default(),
            lag_latency: Family::default(),
            inflight: Family::default(),
            queueing_latency: Family::default(),
            ready: Family::default(),
            topic_number: Family::default(),
            consumer_group_number: Family::default(),
            flush_behind: Family::default(),
            permission: Family::default(),
            storage_size: Family::default(),
            rpc_latency: Family::new_with_constructor(rpc_histogram),
        };
        // Counters are registered without `_total`: the encoder appends it.
        r.register(
            "rocketmq_messages_in",
            "Total number of incoming messages (RocketMQ's name; retry and DLQ topics left out)",
            m.messages_in.clone(),
        );
        r.register(
            "rocketmq_throughput_in",
            "Total traffic of incoming messages, bytes (RocketMQ's name)",
            m.throughput_in.clone(),
        );
        r.register(
            "rocketmq_message_size",
            "Incoming messages size, bytes (RocketMQ's name and buckets)",
            m.message_size.clone(),
        );
        r.register(
            "rocketmq_messages_out",
            "Total number of outgoing messages (RocketMQ's name; retry and DLQ topics left out)",
            m.messages_out.clone(),
        );
        r.register(
            "rocketmq_throughput_out",
            "Total traffic of outgoing messages, bytes (RocketMQ's name)",
            m.throughput_out.clone(),
        );
        r.register(
            "rocketmq_send_to_dlq_messages",
            "Consumer send to DLQ messages, by origin topic (RocketMQ's name)",
            m.send_to_dlq.clone(),
        );
        r.register(
            "rocketmq_consumer_lag_messages",
            "Consumer lag messages: stored and not yet consumed, never negative (RocketMQ's name)",
            m.lag_messages.clone(),
        );
        r.register(
            "rocketmq_consumer_lag_latency_milliseconds",
            "Consumer lag time: age of the oldest message not yet consumed (RocketMQ's name)",
            m.lag_latency.clone(),
        );
        r.register(
            "rocketmq_consumer_inflight_messages",
            "Consumer inflight messages: POP messages handed out and not acked (RocketMQ's name)",
            m.inflight.clone(),
        );
        r.register(
            "rocketmq_consumer_queueing_latency_milliseconds",
            "Consumer queueing time: age of the oldest message not yet handed out (RocketMQ's name)",
            m.queueing_latency.clone(),
        );
        r.register(
            "rocketmq_consumer_ready_messages",
            "Consumer ready messages: stored and not yet handed out (RocketMQ's name)",
            m.ready.clone(),
        );
        r.register(
            "rocketmq_topic_number",
            "Topics the node holds (RocketMQ's name)",
            m.topic_number.clone(),
        );
        r.register(
            "rocketmq_consumer_group_number",
            "Consumer groups with offsets on the node (RocketMQ's name)",
            m.consumer_group_number.clone(),
        );
        r.register(
            "rocketmq_storage_flush_behind_bytes",
            "Bytes appended but not yet durable (RocketMQ's name)",
            m.flush_behind.clone(),
        );
        r.register(
            "rocketmq_storage_size_bytes",
            "Broker storage size: bytes in use on the data directory's filesystem (RocketMQ's name)",
            m.storage_size.clone(),
        );
        r.register(
            "rocketmq_broker_permission",
            "Broker permission: 2 readable, 4 writable, 6 both (RocketMQ's name)",
            m.permission.clone(),
        );
        r.register(
            "rocketmq_rpc_latency_milliseconds",
            "Rpc latency of sends, from arrival to answer (RocketMQ's name and buckets)",
            m.rpc_latency.clone(),
        );
        m
    }

    pub(super) fn add_in(
        &self,
        node: &Node,
        topic: &str,
        message_type: &'static str,
        messages: u64,
        bytes: u64,
        sizes: &SizeCounts,
    ) {
        if is_retry_or_dlq(topic) {
            return;
        }
        let l = InLabels {
            node: NodeLabels::of(node),
            topic: topic.to_owned(),
            message_type,
            is_system: flag(is_system_topic(topic)),
        };
        self.messages_in.get_or_create(&l).inc_by(messages);
        self.throughput_in.get_or_create(&l).inc_by(bytes);
        if sizes.count() > 0 {
            self.message_size.get_or_create(&l).add(sizes);
        }
    }

    pub(super) fn forget_in(&self, node: &Node, topic: &str, message_type: &'static str) {
        let l = InLabels {
            node: NodeLabels::of(node),
            topic: topic.to_owned(),
            message_type,
            is_system: flag(is_system_topic(topic)),
        };
        self.messages_in.remove(&l);
        self.throughput_in.remove(&l);
        self.message_size.remove(&l);
    }

    fn out_labels(node: &Node, topic: &str, group: &str) -> OutLabels {
        OutLabels {
            node: NodeLabels::of(node),
            topic: topic.to_owned(),
            consumer_group: group.to_owned(),
            is_system: flag(is_system(topic, group)),
        }
    }

    pub(super) fn add_out(&self, node: &Node, topic: &str, group: &str, messages: u64, bytes: u64) {
        if is_retry_or_dlq(topic) {
            return;
        }
        let l = Self::out_labels(node, topic, group);
        self.messages_out.get_or_create(&l).inc_by(messages);
        self.throughput_out.get_or_create(&l).inc_by(bytes);
    }

    pub(super) fn forget_out(&self, node: &Node, topic: &str, group: &str) {
        let l = Self::out_labels(node, topic, group);
        self.messages_out.remove(&l);
        self.throughput_out.remove(&l);
        self.send_to_dlq.remove(&l);
    }

    /// Unlike the out counters, a retry topic's dead letters count (RocketMQ counts them by
    /// the topic the client names).
    pub(super) fn add_dead_letters(&self, node: &Node, topic: &str, group: &str, n: u64) {
        let l = Self::out_labels(node, topic, group);
        self.send_to_dlq.get_or_create(&l).inc_by(n);
    }

    fn lag_labels(node: &Node, group: &str, topic: &str) -> LagLabels {
        LagLabels {
            node: NodeLabels::of(node),
            topic: topic.to_owned(),
            consumer_group: group.to_owned(),
            is_retry: flag(topic.starts_with("%RETRY%")),
            is_system: flag(is_system(topic, group)),
        }
    }

    /// The consumer gauges, in the order of [`GroupLag::values`].
    fn lag_gauges(&self) -> [&Family<LagLabels, Gauge>; 5] {
        [
            &self.lag_messages,
            &self.lag_latency,
            &self.inflight,
            &self.queueing_latency,
            &self.ready,
        ]
    }

    pub(super) fn set_lag(&self, node: &Node, group: &str, topic: &str, lag: &GroupLag) {
        let l = Self::lag_labels(node, group, topic);
        for (family, v) in self.lag_gauges().into_iter().zip(lag.values()) {
            family.get_or_create(&l).set(gauge_value(v));
        }
    }

    pub(super) fn forget_lag(&self, node: &Node, group: &str, topic: &str) {
        let l = Self::lag_labels(node, group, topic);
        for family in self.lag_gauges() {
            family.remove(&l);
        }
    }

    pub(super) fn set_node(&self, node: &Node, n: &NodeFigures) {
        let l = NodeLabels::of(node);
        for (family, v) in [
            (&self.topic_number, n.topics),
            (&self.consumer_group_number, n.groups),
            (&self.flush_behind, n.flush_behind_bytes),
            (&self.permission, n.permission),
        ] {
            family.get_or_create(&l).set(gauge_value(v));
        }
        if let Some(bytes) = n.storage_bytes {
            let l = StorageLabels {
                node: l,
                storage_type: "local",
                storage_medium: "disk",
            };
            self.storage_size.get_or_create(&l).set(gauge_value(bytes));
        }
    }

    /// The rpc-latency histogram of a node's successful sends.
    pub(super) fn send_rpc_latency(&self, node: &Node) -> Histogram {
        self.rpc_latency
            .get_or_create(&RpcLabels {
                node: NodeLabels::of(node),
                protocol_type: "remoting",
                request_code: "send_message",
                response_code: "success",
                is_long_polling: "false",
                result: "success",
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::metrics::BrokerMetrics;

    fn node() -> Node {
        Node {
            cluster: "DefaultCluster".into(),
            node_id: "broker-a-c1".into(),
        }
    }

    /// The series render under the names RocketMQ 5's Prometheus exporter writes, with its
    /// labels, in both formats a scraper may ask for.
    #[test]
    fn series_render_under_rocketmq_names_and_labels() {
        let m = BrokerMetrics::new();
        let n = node();
        let mut sizes = SizeCounts::default();
        sizes.observe(100);
        sizes.observe(5000);
        m.add_rocketmq_in(&n, "T", "normal", (2, 5100), &sizes);
        m.add_rocketmq_in(&n, "%RETRY%g", "normal", (1, 10), &SizeCounts::default());
        m.add_rocketmq_out(&n, "T", "g", (2, 5100));
        m.add_rocketmq_dead_letters(&n, "T", "g", 1);
        m.set_rocketmq_lag(
            &n,
            "g",
            "T",
            &GroupLag {
                lag: 7,
                inflight: 2,
                ready: 5,
                lag_latency_ms: 1500,
                queueing_latency_ms: 900,
            },
        );
        m.set_rocketmq_node(
            &n,
            &NodeFigures {
                topics: 3,
                groups: 1,
                flush_behind_bytes: 4096,
                permission: 6,
                storage_bytes: Some(1 << 30),
            },
        );
        m.send_rpc_latency(&n).observe(2.0);
        let text = telemetry::to_text_format(&m.render());
        let node = r#"cluster="DefaultCluster",node_type="broker",node_id="broker-a-c1""#;
        let group =
            format!(r#"{node},topic="T",consumer_group="g",is_retry="false",is_system="false""#);
        for line in [
            format!(
                r#"rocketmq_messages_in_total{{{node},topic="T",message_type="normal",is_system="false"}} 2"#
            ),
            format!(
                r#"rocketmq_throughput_in_total{{{node},topic="T",message_type="normal",is_system="false"}} 5100"#
            ),
            format!(
                r#"rocketmq_message_size_bucket{{le="1024.0",{node},topic="T",message_type="normal",is_system="false"}} 1"#
            ),
            format!(
                r#"rocketmq_message_size_bucket{{le="+Inf",{node},topic="T",message_type="normal",is_system="false"}} 2"#
            ),
            format!(
                r#"rocketmq_message_size_count{{{node},topic="T",message_type="normal",is_system="false"}} 2"#
            ),
            format!(
                r#"rocketmq_messages_out_total{{{node},topic="T",consumer_group="g",is_system="false"}} 2"#
            ),
            format!(
                r#"rocketmq_throughput_out_total{{{node},topic="T",consumer_group="g",is_system="false"}} 5100"#
            ),
            format!(
                r#"rocketmq_send_to_dlq_messages_total{{{node},topic="T",consumer_group="g",is_system="false"}} 1"#
            ),
            format!("rocketmq_consumer_lag_messages{{{group}}} 7"),
            format!("rocketmq_consumer_inflight_messages{{{group}}} 2"),
            format!("rocketmq_consumer_ready_messages{{{group}}} 5"),
            format!("rocketmq_consumer_lag_latency_milliseconds{{{group}}} 1500"),
            format!("rocketmq_consumer_queueing_latency_milliseconds{{{group}}} 900"),
            format!("rocketmq_topic_number{{{node}}} 3"),
            format!("rocketmq_consumer_group_number{{{node}}} 1"),
            format!("rocketmq_storage_flush_behind_bytes{{{node}}} 4096"),
            format!("rocketmq_broker_permission{{{node}}} 6"),
            format!(
                r#"rocketmq_storage_size_bytes{{{node},storage_type="local",storage_medium="disk"}} 1073741824"#
            ),
            format!(
                r#"rocketmq_rpc_latency_milliseconds_bucket{{le="3.0",{node},protocol_type="remoting",request_code="send_message",response_code="success",is_long_polling="false",result="success"}} 1"#
            ),
            "# TYPE rocketmq_messages_in_total counter".to_owned(),
            "# TYPE rocketmq_message_size histogram".to_owned(),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }
        // Retry topics are left out of the in counters, as RocketMQ leaves them out.
        assert!(!text.contains("%RETRY%"), "{text}");
        assert!(telemetry::samples_without_help(&text).is_empty(), "{text}");
        m.forget_rocketmq_lag(&n, "g", "T");
        m.forget_rocketmq_in(&n, "T", "normal");
        m.forget_rocketmq_out(&n, "T", "g");
        let text = m.render();
        assert!(!text.contains("topic=\"T\""), "{text}");
    }

    #[test]
    fn system_and_message_type_labels_follow_rocketmq() {
        assert!(is_system("rmq_sys_REVIVE_LOG", "g"));
        assert!(is_system("TBW102", "g"));
        assert!(is_system("T", "cid_rmq_sys_x"));
        assert!(!is_system("T", "CID_RMQ"));
        assert_eq!(message_type_label(Some("FIFO")), "fifo");
        assert_eq!(message_type_label(Some("UNSPECIFIED")), "normal");
        assert_eq!(message_type_label(None), "normal");
        let mut s = SizeCounts::default();
        for b in [1024, 1025, 4 << 20, (4 << 20) + 1] {
            s.observe(b);
        }
        assert_eq!(s.buckets, [1, 1, 0, 0, 0, 1, 1]);
    }
}
