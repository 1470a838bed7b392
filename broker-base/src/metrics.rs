//! The broker's metrics, served in Prometheus text format when `metrics_addr` is set.
//!
//! The data path stays free of shared atomics: each core counts in plain cells
//! (`CoreStats`) and, once a second, adds what changed to these per-core counters and sets
//! the gauges ([`BrokerMetrics::publish`]). Only the send-latency histograms (corvus's and
//! RocketMQ's rpc latency) are observed per request, into the core's own histograms
//! (uncontended atomics).
//!
//! Beside corvus's own names, the series Apache RocketMQ 5's broker exports, under its
//! names and labels ([`rocketmq`]), fed from the same figures.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use protocol::{CoreStatus, ResponseCode};

pub mod rocketmq;
pub use rocketmq::{GroupLag, Node, NodeFigures, SizeCounts};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CoreLabel {
    pub core: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupQueueLabel {
    pub group: String,
    pub topic: String,
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CoreTopicLabel {
    pub core: String,
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CoreGroupLabel {
    pub core: String,
    pub topic: String,
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabel {
    pub shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardSlaveLabel {
    pub shard: String,
    pub slave: String,
}

/// A priority message's count: its core, its priority (0-9, higher ones under 9) and whether
/// it was stored (`sent`) or handed out by a pop (`delivered`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PriorityLabel {
    pub core: String,
    pub priority: String,
    pub way: String,
}

/// A quota rule as it is set (`account:alice:send_messages_per_sec`), or an admission
/// limit's config key (`connections_per_peer_max`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    pub limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

type GaugeF = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    // 10 µs to ~5 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_01, 2.0, 20,
    ))
}

pub struct BrokerMetrics {
    produced_messages: Family<CoreLabel, Counter>,
    produced_bytes: Family<CoreLabel, Counter>,
    consumed_messages: Family<CoreLabel, Counter>,
    consumed_bytes: Family<CoreLabel, Counter>,
    requests: Family<CoreLabel, Counter>,
    cross_core_hops: Family<CoreLabel, Counter>,
    errors: Family<CodeLabel, Counter>,
    quota_refusals: Family<LimitLabel, Counter>,
    send_latency: Family<CoreLabel, Histogram, fn() -> Histogram>,
    flush_latency: Family<CoreLabel, Histogram, fn() -> Histogram>,
    inbox_depth: Family<CoreLabel, Gauge>,
    commit_log_bytes: Family<CoreLabel, Gauge>,
    durable_lag_bytes: Family<CoreLabel, Gauge>,
    disk_use_ratio: Family<CoreLabel, GaugeF>,
    quarantined_ranges: Family<CoreLabel, Gauge>,
    quarantined_bytes: Family<CoreLabel, Gauge>,
    skipped_records: Family<CoreLabel, Counter>,
    busy_refusals: Family<CoreLabel, Counter>,
    cq_files_mapped: Family<CoreLabel, Gauge>,
    cq_files_unmapped: Family<CoreLabel, Counter>,
    tail_ring_records: Family<CoreLabel, Gauge>,
    writes_blocked_shards: Family<CoreLabel, Gauge>,
    lite_topics: Family<CoreLabel, Gauge>,
    lite_messages_kept: Family<CoreLabel, Gauge>,
    lite_subscriptions: Family<CoreLabel, Gauge>,
    uptime_seconds: GaugeF,
    consumer_backlog: Family<GroupQueueLabel, Gauge>,
    pop_inflight: Family<GroupQueueLabel, Gauge>,
    priority_messages: Family<PriorityLabel, Counter>,
    topic_put_messages: Family<CoreTopicLabel, Counter>,
    topic_put_bytes: Family<CoreTopicLabel, Counter>,
    group_get_messages: Family<CoreGroupLabel, Counter>,
    group_get_bytes: Family<CoreGroupLabel, Counter>,
    slave_lag_bytes: Family<ShardSlaveLabel, Gauge>,
    slave_lag_ms: Family<ShardSlaveLabel, Gauge>,
    slave_in_sync: Family<ShardSlaveLabel, Gauge>,
    in_sync_replicas: Family<ShardLabel, Gauge>,
    master_lag_bytes: Family<ShardLabel, Gauge>,
    master_connected: Family<ShardLabel, Gauge>,
    rocketmq: rocketmq::RocketMqMetrics,
    registry: Registry,
}

fn core_label(core: u16) -> CoreLabel {
    CoreLabel {
        core: core.to_string(),
    }
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    pub fn new() -> BrokerMetrics {
        let mut registry = Registry::default();
        let mut m = BrokerMetrics {
            produced_messages: Family::default(),
            produced_bytes: Family::default(),
            consumed_messages: Family::default(),
            consumed_bytes: Family::default(),
            requests: Family::default(),
            cross_core_hops: Family::default(),
            errors: Family::default(),
            quota_refusals: Family::default(),
            send_latency: Family::new_with_constructor(latency_histogram),
            flush_latency: Family::new_with_constructor(latency_histogram),
            inbox_depth: Family::default(),
            commit_log_bytes: Family::default(),
            durable_lag_bytes: Family::default(),
            disk_use_ratio: Family::default(),
            quarantined_ranges: Family::default(),
            quarantined_bytes: Family::default(),
            skipped_records: Family::default(),
            busy_refusals: Family::default(),
            cq_files_mapped: Family::default(),
            cq_files_unmapped: Family::default(),
            tail_ring_records: Family::default(),
            writes_blocked_shards: Family::default(),
            lite_topics: Family::default(),
            lite_messages_kept: Family::default(),
            lite_subscriptions: Family::default(),
            uptime_seconds: GaugeF::default(),
            consumer_backlog: Family::default(),
            pop_inflight: Family::default(),
            priority_messages: Family::default(),
            topic_put_messages: Family::default(),
            topic_put_bytes: Family::default(),
            group_get_messages: Family::default(),
            group_get_bytes: Family::default(),
            slave_lag_bytes: Family::default(),
            slave_lag_ms: Family::default(),
            slave_in_sync: Family::default(),
            in_sync_replicas: Family::default(),
            master_lag_bytes: Family::default(),
            master_connected: Family::default(),
            rocketmq: rocketmq::RocketMqMetrics::register(&mut registry),
            registry,
        };
        let r = &mut m.registry;
        r.register(
            "corvus_produced_messages",
            "Messages stored, per core",
            m.produced_messages.clone(),
        );
        r.register(
            "corvus_produced_bytes",
            "Bytes of messages stored, per core",
            m.produced_bytes.clone(),
        );
        r.register(
            "corvus_consumed_messages",
            "Messages delivered by pulls, per core",
            m.consumed_messages.clone(),
        );
        r.register(
            "corvus_consumed_bytes",
            "Bytes delivered by pulls, per core",
            m.consumed_bytes.clone(),
        );
        r.register(
            "corvus_requests",
            "Requests received, per core",
            m.requests.clone(),
        );
        r.register(
            "corvus_cross_core_hops",
            "Requests forwarded to the core that owns their queue",
            m.cross_core_hops.clone(),
        );
        r.register(
            "corvus_errors",
            "Error responses, by response code",
            m.errors.clone(),
        );
        r.register(
            "corvus_quota_refusals",
            "Requests and connections refused FLOW_CONTROL, by the quota or admission limit they hit",
            m.quota_refusals.clone(),
        );
        r.register(
            "corvus_send_latency_seconds",
            "Time from a send request's arrival to its acknowledgement, per core",
            m.send_latency.clone(),
        );
        r.register(
            "corvus_flush_latency_seconds",
            "Time of each durable CommitLog flush (writes and fdatasync), per core",
            m.flush_latency.clone(),
        );
        r.register(
            "corvus_inbox_depth",
            "Cross-core requests being served, per core",
            m.inbox_depth.clone(),
        );
        r.register(
            "corvus_commit_log_bytes",
            "CommitLog bytes on disk, per core",
            m.commit_log_bytes.clone(),
        );
        r.register(
            "corvus_durable_lag_bytes",
            "Bytes appended but not yet durable (disk falling behind), per core",
            m.durable_lag_bytes.clone(),
        );
        r.register(
            "corvus_disk_use_ratio",
            "Used fraction of the data disk (as df Use%)",
            m.disk_use_ratio.clone(),
        );
        r.register(
            "corvus_quarantined_ranges",
            "Damaged CommitLog ranges never served (found by recovery or by a read), per core; \
             nonzero means disk damage: see the ERROR log lines naming the segments",
            m.quarantined_ranges.clone(),
        );
        r.register(
            "corvus_quarantined_bytes",
            "Bytes of the quarantined CommitLog ranges, per core",
            m.quarantined_bytes.clone(),
        );
        r.register(
            "corvus_skipped_records",
            "Queue entries pulls stepped over instead of serving (damaged or missing records), per core",
            m.skipped_records.clone(),
        );
        r.register(
            "corvus_busy_refusals",
            "Sends answered SYSTEM_BUSY because the disk was behind (unwritten or unsynced bytes at their bounds), per core",
            m.busy_refusals.clone(),
        );
        r.register(
            "corvus_consume_queue_files_mapped",
            "ConsumeQueue files mapped now (at most consume_queue_maps_max per broker), per core",
            m.cq_files_mapped.clone(),
        );
        r.register(
            "corvus_consume_queue_files_unmapped",
            "ConsumeQueue files unmapped to map others (more queues in use than consume_queue_maps_max), per core",
            m.cq_files_unmapped.clone(),
        );
        r.register(
            "corvus_tail_ring_records",
            "Records the tail rings held past their written marks when the broker started (acknowledged before a crash, written back), per core",
            m.tail_ring_records.clone(),
        );
        r.register(
            "corvus_writes_blocked_shards",
            "Shards that cannot create their next CommitLog segment (disk full or no descriptors) and refuse sends until a retry succeeds, per core",
            m.writes_blocked_shards.clone(),
        );
        r.register(
            "corvus_lite_topics",
            "Lite topics (RocketMQ 5.5) the core holds, idle ones included until they are forgotten",
            m.lite_topics.clone(),
        );
        r.register(
            "corvus_lite_messages_kept",
            "Messages of the core's lite topics kept for some group (not yet consumed by every group with a position in them)",
            m.lite_messages_kept.clone(),
        );
        r.register(
            "corvus_lite_subscriptions",
            "Lite topics of the core subscribed, counted once per subscribing client",
            m.lite_subscriptions.clone(),
        );
        r.register(
            "corvus_replication_slave_lag_bytes",
            "A master shard's slave: CommitLog bytes the master has that the slave has not acknowledged",
            m.slave_lag_bytes.clone(),
        );
        r.register(
            "corvus_replication_slave_lag_ms",
            "A master shard's slave: how long the oldest byte sent to it and not yet acknowledged has waited",
            m.slave_lag_ms.clone(),
        );
        r.register(
            "corvus_replication_slave_in_sync",
            "A master shard's slave: 1 while it is in the in-sync set",
            m.slave_in_sync.clone(),
        );
        r.register(
            "corvus_replication_in_sync_replicas",
            "A master shard's replicas in the in-sync set, the master counted",
            m.in_sync_replicas.clone(),
        );
        r.register(
            "corvus_replication_master_lag_bytes",
            "A slave shard: CommitLog bytes its master said it has that this slave lacks",
            m.master_lag_bytes.clone(),
        );
        r.register(
            "corvus_replication_master_connected",
            "A slave shard: 1 while its stream from the master is up",
            m.master_connected.clone(),
        );
        r.register(
            "corvus_consumer_backlog_messages",
            "Messages stored and not yet consumed, per consumer group and queue",
            m.consumer_backlog.clone(),
        );
        r.register(
            "corvus_pop_inflight_messages",
            "Messages a POP consumer group was handed and has not acked, per queue",
            m.pop_inflight.clone(),
        );
        // Per topic and per topic@group, bounded as the broker stats are: at most 10,000
        // topics and 10,000 topic@group pairs per core, the rest under topic (and group)
        // "%OVERFLOW%"; a key idle for a day leaves (`broker_core::broker_stats`).
        r.register(
            "corvus_topic_put_messages",
            "Messages stored, per core and topic (past the cap: topic %OVERFLOW%)",
            m.topic_put_messages.clone(),
        );
        r.register(
            "corvus_topic_put_bytes",
            "Bytes of messages stored, per core and topic (past the cap: topic %OVERFLOW%)",
            m.topic_put_bytes.clone(),
        );
        r.register(
            "corvus_group_get_messages",
            "Messages handed to a consumer group by pulls, per core, topic and group (past the cap: %OVERFLOW%)",
            m.group_get_messages.clone(),
        );
        r.register(
            "corvus_group_get_bytes",
            "Bytes of messages handed to a consumer group by pulls, per core, topic and group (past the cap: %OVERFLOW%)",
            m.group_get_bytes.clone(),
        );
        r.register(
            "corvus_priority_messages",
            "Priority messages stored (way=sent) and handed out by pops (way=delivered), per core and priority (9: 9 and above)",
            m.priority_messages.clone(),
        );
        r.register(
            "corvus_uptime_seconds",
            "Seconds since the broker started",
            m.uptime_seconds.clone(),
        );
        m
    }

    pub fn render(&self) -> String {
        telemetry::encode(&self.registry)
    }

    /// The flush-latency histogram of one core (seal, writes and fdatasync of a durable
    /// flush), observed by its shards.
    pub fn flush_latency(&self, core: u16) -> Histogram {
        self.flush_latency.get_or_create(&core_label(core)).clone()
    }

    /// The send-latency histogram of one core (kept by the core, observed per send).
    pub fn send_latency(&self, core: u16) -> Histogram {
        self.send_latency.get_or_create(&core_label(core)).clone()
    }

    /// A request refused because it hit `limit` (FLOW_CONTROL).
    pub fn count_quota_refusal(&self, limit: &str) {
        self.quota_refusals
            .get_or_create(&LimitLabel {
                limit: limit.to_owned(),
            })
            .inc();
    }

    pub fn count_error(&self, code: ResponseCode) {
        self.errors
            .get_or_create(&CodeLabel {
                code: code.name().to_owned(),
            })
            .inc();
    }

    /// Sets one core's shards' replication gauges; the gauges of a slave no longer
    /// connected (in `gone`) are removed.
    pub fn set_replication(&self, shards: &[ShardReplication], gone: &[(u16, u64)]) {
        let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
        for &(shard, slave) in gone {
            let l = ShardSlaveLabel {
                shard: shard.to_string(),
                slave: slave.to_string(),
            };
            self.slave_lag_bytes.remove(&l);
            self.slave_lag_ms.remove(&l);
            self.slave_in_sync.remove(&l);
        }
        for s in shards {
            let shard = ShardLabel {
                shard: s.shard.to_string(),
            };
            if let Some(m) = &s.from_master {
                self.master_lag_bytes
                    .get_or_create(&shard)
                    .set(clamp(m.lag_bytes));
                self.master_connected
                    .get_or_create(&shard)
                    .set(i64::from(m.connected));
                continue;
            }
            let mut in_sync = 1;
            for l in &s.slaves {
                let label = ShardSlaveLabel {
                    shard: s.shard.to_string(),
                    slave: l.broker_id.to_string(),
                };
                self.slave_lag_bytes
                    .get_or_create(&label)
                    .set(clamp(l.lag_bytes));
                self.slave_lag_ms.get_or_create(&label).set(clamp(l.lag_ms));
                self.slave_in_sync
                    .get_or_create(&label)
                    .set(i64::from(l.in_sync));
                in_sync += i64::from(l.in_sync);
            }
            self.in_sync_replicas.get_or_create(&shard).set(in_sync);
        }
    }

    /// Sets a group's backlog on a queue (never negative).
    pub fn set_backlog(&self, group: &str, topic: &str, queue_id: u32, backlog: u64) {
        let l = GroupQueueLabel {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue: queue_id.to_string(),
        };
        self.consumer_backlog
            .get_or_create(&l)
            .set(backlog.min(i64::MAX as u64) as i64);
    }

    /// Sets a core's lite topic counts: lite topics held, messages kept, subscriptions.
    pub fn set_lite(&self, core: u16, topics: u64, kept: u64, subscriptions: u64) {
        let l = CoreLabel {
            core: core.to_string(),
        };
        for (family, n) in [
            (&self.lite_topics, topics),
            (&self.lite_messages_kept, kept),
            (&self.lite_subscriptions, subscriptions),
        ] {
            family.get_or_create(&l).set(n.min(i64::MAX as u64) as i64);
        }
    }

    /// Sets a POP group's messages in flight on a queue.
    pub fn set_pop_inflight(&self, group: &str, topic: &str, queue_id: u32, inflight: u64) {
        let l = GroupQueueLabel {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue: queue_id.to_string(),
        };
        self.pop_inflight
            .get_or_create(&l)
            .set(inflight.min(i64::MAX as u64) as i64);
    }

    /// Adds a core's priority messages of `priority` stored and handed out since its last call.
    pub fn add_priority(&self, core: u16, priority: u32, sent: u64, delivered: u64) {
        for (way, n) in [("sent", sent), ("delivered", delivered)] {
            if n == 0 {
                continue;
            }
            let l = PriorityLabel {
                core: core.to_string(),
                priority: priority.to_string(),
                way: way.to_owned(),
            };
            self.priority_messages.get_or_create(&l).inc_by(n);
        }
    }

    /// Adds a topic's growth on a core.
    pub fn add_topic_put(&self, core: u16, topic: &str, messages: u64, bytes: u64) {
        let l = CoreTopicLabel {
            core: core.to_string(),
            topic: topic.to_owned(),
        };
        self.topic_put_messages.get_or_create(&l).inc_by(messages);
        self.topic_put_bytes.get_or_create(&l).inc_by(bytes);
    }

    /// Adds a topic@group's growth on a core.
    pub fn add_group_get(&self, core: u16, topic: &str, group: &str, messages: u64, bytes: u64) {
        let l = CoreGroupLabel {
            core: core.to_string(),
            topic: topic.to_owned(),
            group: group.to_owned(),
        };
        self.group_get_messages.get_or_create(&l).inc_by(messages);
        self.group_get_bytes.get_or_create(&l).inc_by(bytes);
    }

    /// Removes the series of a topic the core's broker stats dropped.
    pub fn forget_topic(&self, core: u16, topic: &str) {
        let l = CoreTopicLabel {
            core: core.to_string(),
            topic: topic.to_owned(),
        };
        self.topic_put_messages.remove(&l);
        self.topic_put_bytes.remove(&l);
    }

    /// Removes the series of a topic@group the core's broker stats dropped.
    pub fn forget_group(&self, core: u16, topic: &str, group: &str) {
        let l = CoreGroupLabel {
            core: core.to_string(),
            topic: topic.to_owned(),
            group: group.to_owned(),
        };
        self.group_get_messages.remove(&l);
        self.group_get_bytes.remove(&l);
    }

    /// Adds a topic's growth on a node to RocketMQ's in counters and message-size histogram
    /// (retry and dead-letter topics are left out, as RocketMQ leaves them out).
    pub fn add_rocketmq_in(
        &self,
        node: &Node,
        topic: &str,
        message_type: &'static str,
        growth: (u64, u64),
        sizes: &SizeCounts,
    ) {
        self.rocketmq
            .add_in(node, topic, message_type, growth.0, growth.1, sizes);
    }

    /// Removes a topic's RocketMQ in series (the topic left the node's broker stats).
    pub fn forget_rocketmq_in(&self, node: &Node, topic: &str, message_type: &'static str) {
        self.rocketmq.forget_in(node, topic, message_type);
    }

    /// Adds a topic@group's growth on a node to RocketMQ's out counters.
    pub fn add_rocketmq_out(&self, node: &Node, topic: &str, group: &str, growth: (u64, u64)) {
        self.rocketmq
            .add_out(node, topic, group, growth.0, growth.1);
    }

    /// Adds a topic@group's messages sent to the group's dead-letter topic.
    pub fn add_rocketmq_dead_letters(&self, node: &Node, topic: &str, group: &str, n: u64) {
        self.rocketmq.add_dead_letters(node, topic, group, n);
    }

    /// Removes a topic@group's RocketMQ out series.
    pub fn forget_rocketmq_out(&self, node: &Node, topic: &str, group: &str) {
        self.rocketmq.forget_out(node, topic, group);
    }

    /// Sets RocketMQ's consumer gauges of a group on a topic of a node.
    pub fn set_rocketmq_lag(&self, node: &Node, group: &str, topic: &str, lag: &GroupLag) {
        self.rocketmq.set_lag(node, group, topic, lag);
    }

    /// Removes RocketMQ's consumer gauges of a group on a topic of a node.
    pub fn forget_rocketmq_lag(&self, node: &Node, group: &str, topic: &str) {
        self.rocketmq.forget_lag(node, group, topic);
    }

    /// Sets a node's RocketMQ gauges: topics held, consumer groups, bytes not yet durable,
    /// its permission.
    pub fn set_rocketmq_node(&self, node: &Node, figures: &NodeFigures) {
        self.rocketmq.set_node(node, figures);
    }

    /// The histogram of a node's successful sends in RocketMQ's rpc-latency buckets (ms).
    pub fn send_rpc_latency(&self, node: &Node) -> Histogram {
        self.rocketmq.send_rpc_latency(node)
    }

    /// Adds the growth of a core's counters since `last` and sets its gauges.
    pub fn publish(&self, now: &CoreStatus, last: &CoreStatus, uptime_s: f64) {
        let l = core_label(now.core);
        let add = |f: &Family<CoreLabel, Counter>, new: u64, old: u64| {
            f.get_or_create(&l).inc_by(new.saturating_sub(old));
        };
        let set = |f: &Family<CoreLabel, Gauge>, v: u64| {
            f.get_or_create(&l).set(v.min(i64::MAX as u64) as i64);
        };
        add(
            &self.produced_messages,
            now.produced_messages,
            last.produced_messages,
        );
        add(
            &self.produced_bytes,
            now.produced_bytes,
            last.produced_bytes,
        );
        add(
            &self.consumed_messages,
            now.consumed_messages,
            last.consumed_messages,
        );
        add(
            &self.consumed_bytes,
            now.consumed_bytes,
            last.consumed_bytes,
        );
        add(&self.requests, now.requests, last.requests);
        add(
            &self.cross_core_hops,
            now.cross_core_hops,
            last.cross_core_hops,
        );
        add(
            &self.skipped_records,
            now.skipped_records,
            last.skipped_records,
        );
        add(&self.busy_refusals, now.busy_refusals, last.busy_refusals);
        set(&self.cq_files_mapped, now.cq_files_mapped);
        add(
            &self.cq_files_unmapped,
            now.cq_files_unmapped,
            last.cq_files_unmapped,
        );
        set(&self.tail_ring_records, now.tail_ring_records);
        set(&self.writes_blocked_shards, now.writes_blocked_shards);
        set(&self.quarantined_ranges, now.quarantined_ranges);
        set(&self.quarantined_bytes, now.quarantined_bytes);
        self.inbox_depth
            .get_or_create(&l)
            .set(now.inbox_depth as i64);
        self.commit_log_bytes
            .get_or_create(&l)
            .set(now.commit_log_bytes as i64);
        self.durable_lag_bytes
            .get_or_create(&l)
            .set(now.durable_lag_bytes as i64);
        self.disk_use_ratio
            .get_or_create(&l)
            .set(now.disk_use_ratio);
        self.uptime_seconds.set(uptime_s);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn publish_adds_deltas_and_renders() {
        let m = BrokerMetrics::new();
        let mut a = CoreStatus {
            core: 1,
            produced_messages: 10,
            produced_bytes: 100,
            ..Default::default()
        };
        m.publish(
            &a,
            &CoreStatus {
                core: 1,
                ..Default::default()
            },
            1.0,
        );
        let before = a.clone();
        a.produced_messages = 15;
        a.quarantined_ranges = 2;
        a.quarantined_bytes = 900;
        a.skipped_records = 3;
        m.publish(&a, &before, 2.0);
        m.count_error(ResponseCode::DiskFull);
        m.send_latency(1).observe(0.0002);
        m.add_priority(1, 7, 3, 0);
        m.add_priority(1, 7, 2, 4);
        let text = m.render();
        assert!(
            text.contains(
                "corvus_priority_messages_total{core=\"1\",priority=\"7\",way=\"sent\"} 5"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "corvus_priority_messages_total{core=\"1\",priority=\"7\",way=\"delivered\"} 4"
            ),
            "{text}"
        );
        assert!(
            text.contains("corvus_produced_messages_total{core=\"1\"} 15"),
            "{text}"
        );
        assert!(
            text.contains("corvus_errors_total{code=\"disk_full\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("corvus_quarantined_ranges{core=\"1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("corvus_quarantined_bytes{core=\"1\"} 900"),
            "{text}"
        );
        assert!(
            text.contains("corvus_skipped_records_total{core=\"1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("corvus_send_latency_seconds_count{core=\"1\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn per_topic_and_per_group_series_render_and_leave() {
        let m = BrokerMetrics::new();
        m.add_topic_put(0, "T", 3, 300);
        m.add_topic_put(0, "T", 2, 200);
        m.add_group_get(1, "T", "g", 4, 400);
        let text = m.render();
        for line in [
            "corvus_topic_put_messages_total{core=\"0\",topic=\"T\"} 5",
            "corvus_topic_put_bytes_total{core=\"0\",topic=\"T\"} 500",
            "corvus_group_get_messages_total{core=\"1\",topic=\"T\",group=\"g\"} 4",
            "corvus_group_get_bytes_total{core=\"1\",topic=\"T\",group=\"g\"} 400",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        m.forget_topic(0, "T");
        m.forget_group(1, "T", "g");
        let text = m.render();
        assert!(!text.contains("topic=\"T\""), "{text}");
    }
}

/// One shard's replication as its gauges show it: a slave shard's view of its master, or a
/// master shard's slaves.
#[derive(Debug, Clone, Default)]
pub struct ShardReplication {
    pub shard: u16,
    pub from_master: Option<MasterGauges>,
    pub slaves: Vec<SlaveGauges>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct MasterGauges {
    pub lag_bytes: u64,
    pub connected: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SlaveGauges {
    pub broker_id: u64,
    pub lag_bytes: u64,
    pub lag_ms: u64,
    pub in_sync: bool,
}
