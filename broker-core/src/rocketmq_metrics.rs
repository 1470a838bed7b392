//! The figures behind RocketMQ's metric names (`broker_base::metrics::rocketmq`), published by
//! each core's metrics tick from what the core already keeps: its group offsets and POP
//! windows for the consumer gauges, its broker stats' per-topic and per-topic@group growth
//! for the in and out counters.
//!
//! A core is a RocketMQ broker of its own (`node_id` is its broker name), and its gauges
//! cover the queues it owns, so a sum over `node_id` is the broker's figure, and the lag of a
//! group on a topic summed so is the DIFF total `consumer-progress` shows.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};

use broker_base::metrics::{GroupLag, Node, NodeFigures};
use shard::QueueOffset;

use crate::broker_stats::Published;
use crate::core::Core;

/// (group, topic) pairs a core publishes consumer gauges for; the pairs past it are added up
/// under group and topic `%OVERFLOW%` (the broker stats' cap on topic@group keys).
pub const LAG_SERIES_MAX: usize = 10_000;
const OVERFLOW: &str = "%OVERFLOW%";

/// A core's RocketMQ identity and what its consumer gauges published last.
#[derive(Debug)]
pub struct RocketMqState {
    pub node: Node,
    /// The (group, topic) pairs with gauges now, so a pair that left loses them.
    published: RefCell<HashSet<(String, String)>>,
    /// The store times the last tick used, per (group, topic, queue id, which: oldest not
    /// consumed or oldest not handed out): the offset and its message's store time. An
    /// offset that did not move is not read again.
    store_times: RefCell<HashMap<TimeKey, (u64, i64)>>,
    /// Where the next tick's store-time reads start, in the order the tick meets them (see
    /// [`STORE_TIME_READS_MAX`]).
    reads_from: Cell<usize>,
}

type TimeKey = (String, String, u32, bool);

/// Store times a core reads per tick at most. Past it, a queue whose offset moved keeps the
/// store time of the older offset it had (its age an upper bound) until its turn comes:
/// the reads go on next tick where they stopped, so every queue is read again within
/// (queues needing a read / this) seconds, and a broker with many moving queues does not
/// spend its tick on reads.
pub const STORE_TIME_READS_MAX: usize = 1024;

impl RocketMqState {
    pub fn new(cluster: &str, broker_name: &str, core: u16, cores: u16) -> RocketMqState {
        RocketMqState {
            node: Node {
                cluster: cluster.to_owned(),
                node_id: protocol::core_view::core_broker_name(broker_name, core, cores),
            },
            published: RefCell::default(),
            store_times: RefCell::default(),
            reads_from: Cell::new(0),
        }
    }
}

/// One group's figures on one topic, added up over the core's queues.
#[derive(Debug, Default)]
struct Acc {
    lag: u64,
    inflight: u64,
    ready: u64,
    /// Store time of the oldest message not consumed, and of the oldest not handed out.
    oldest_unconsumed_ms: Option<i64>,
    oldest_ready_ms: Option<i64>,
}

fn older(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Acc {
    fn add(&mut self, o: &Acc) {
        self.lag += o.lag;
        self.inflight += o.inflight;
        self.ready += o.ready;
        self.oldest_unconsumed_ms = older(self.oldest_unconsumed_ms, o.oldest_unconsumed_ms);
        self.oldest_ready_ms = older(self.oldest_ready_ms, o.oldest_ready_ms);
    }

    fn gauges(&self, now_ms: i64) -> GroupLag {
        let age = |t: Option<i64>| t.map_or(0, |t| u64::try_from(now_ms - t).unwrap_or(0));
        GroupLag {
            lag: self.lag,
            inflight: self.inflight,
            ready: self.ready,
            lag_latency_ms: if self.lag > 0 {
                age(self.oldest_unconsumed_ms)
            } else {
                0
            },
            queueing_latency_ms: if self.ready > 0 {
                age(self.oldest_ready_ms)
            } else {
                0
            },
        }
    }
}

/// One queue of a group: its figures from the queue's range, the group's consume offset
/// and, for a POP group, its window (next offset to hand out, messages in flight). Never
/// negative: a consume offset behind the oldest message kept counts from that message, one
/// past the end counts nothing.
pub fn queue_lag(min: u64, max: u64, consumed: u64, window: Option<(u64, u64)>) -> (u64, u64, u64) {
    let consumed = consumed.max(min);
    match window {
        Some((cursor, inflight)) => {
            let ready = max.saturating_sub(cursor.max(consumed));
            (ready + inflight, inflight, ready)
        }
        None => {
            let lag = max.saturating_sub(consumed);
            (lag, 0, lag)
        }
    }
}

impl Core {
    /// Publishes this core's RocketMQ-named series: the consumer gauges of every group with
    /// offsets here (a POP group's in flight and ready from its windows), the node gauges
    /// (`flush_behind_bytes`: the core's bytes not yet durable; its topics, groups and
    /// permission). Called by the metrics tick.
    pub async fn publish_rocketmq(&self, flush_behind_bytes: u64) {
        let now_ms = self.shared.clock.wall_ms();
        let mut per: BTreeMap<(String, String), Acc> = BTreeMap::new();
        let mut times = HashMap::new();
        let reads_from = self.rocketmq.reads_from.get();
        let (mut needed, mut reads, mut last_read) = (0usize, 0usize, 0usize);
        for (shard_id, table) in &self.offsets {
            let Some(shard) = self.shards.get(shard_id) else {
                continue;
            };
            let entries: Vec<_> = table
                .borrow()
                .entries()
                .filter(|(gq, _)| {
                    gq.group != crate::lite::FLOOR_GROUP && gq.group != crate::pop::POP_GROUP
                })
                .map(|(gq, s)| (gq.clone(), s.offset))
                .collect();
            for (gq, committed) in entries {
                let q = shard.queue_offsets(&gq.topic, gq.queue_id);
                let window = self.pop_window(&gq.group, &gq.topic, gq.queue_id);
                let (lag, inflight, ready) = queue_lag(q.min.0, q.max.0, committed, window);
                let consumed = committed.max(q.min.0);
                let next = window.map_or(consumed, |(cursor, _)| cursor.max(consumed));
                let mut acc = Acc {
                    lag,
                    inflight,
                    ready,
                    ..Acc::default()
                };
                for (wanted, offset, slot, which) in [
                    (lag > 0, consumed, &mut acc.oldest_unconsumed_ms, false),
                    (ready > 0, next, &mut acc.oldest_ready_ms, true),
                ] {
                    if !wanted {
                        continue;
                    }
                    let key = (gq.group.clone(), gq.topic.clone(), gq.queue_id, which);
                    let known = self.rocketmq.store_times.borrow().get(&key).copied();
                    let t = match known {
                        Some((at, t)) if at == offset => Some((at, t)),
                        _ => {
                            needed += 1;
                            if needed > reads_from && reads < STORE_TIME_READS_MAX {
                                reads += 1;
                                last_read = needed;
                                shard
                                    .store_time_at(&gq.topic, gq.queue_id, QueueOffset(offset))
                                    .await
                                    .ok()
                                    .flatten()
                                    .map(|t| (offset, t))
                            } else {
                                // Not this tick: an older offset's time, an upper bound.
                                known.filter(|(at, _)| *at <= offset)
                            }
                        }
                    };
                    if let Some(t) = t {
                        times.insert(key, t);
                    }
                    *slot = t.map(|(_, t)| t);
                }
                let key = if per.len() >= LAG_SERIES_MAX
                    && !per.contains_key(&(gq.group.clone(), gq.topic.clone()))
                {
                    (OVERFLOW.to_owned(), OVERFLOW.to_owned())
                } else {
                    (gq.group, gq.topic)
                };
                per.entry(key).or_default().add(&acc);
            }
        }
        *self.rocketmq.store_times.borrow_mut() = times;
        // Every read done: start from the first next time; else where this one stopped.
        self.rocketmq
            .reads_from
            .set(if reads < STORE_TIME_READS_MAX {
                0
            } else {
                last_read
            });
        let m = &self.shared.metrics;
        let node = &self.rocketmq.node;
        let mut published = self.rocketmq.published.borrow_mut();
        for (group, topic) in published.iter() {
            if !per.contains_key(&(group.clone(), topic.clone())) {
                m.forget_rocketmq_lag(node, group, topic);
            }
        }
        published.clear();
        let groups: HashSet<&str> = per.keys().map(|(g, _)| g.as_str()).collect();
        m.set_rocketmq_node(
            node,
            &NodeFigures {
                topics: self.topics.borrow().len() as u64,
                groups: groups.len() as u64,
                flush_behind_bytes,
                permission: u64::from(self.config().broker_permission),
                storage_bytes: shard::statvfs_used_bytes(&self.shared.config.data_dir).ok(),
            },
        );
        for ((group, topic), acc) in &per {
            m.set_rocketmq_lag(node, group, topic, &acc.gauges(now_ms));
            published.insert((group.clone(), topic.clone()));
        }
    }

    /// Passes one broker stats change on to RocketMQ's in and out counters.
    pub(crate) fn publish_rocketmq_stats(&self, p: &Published<'_>) {
        use broker_base::metrics::rocketmq::message_type_label;
        let m = &self.shared.metrics;
        let node = &self.rocketmq.node;
        let message_type =
            |t: &str| message_type_label(self.topics.borrow().attribute(t, "message.type"));
        match *p {
            Published::Topic(t, g, ref sizes) => {
                m.add_rocketmq_in(node, t, message_type(t), (g.messages, g.bytes), sizes)
            }
            Published::Group(t, group, g) => {
                m.add_rocketmq_out(node, t, group, (g.messages, g.bytes))
            }
            Published::TopicGone(t) => m.forget_rocketmq_in(node, t, message_type(t)),
            Published::GroupGone(t, group) => m.forget_rocketmq_out(node, t, group),
            Published::DeadLetters(t, group, n) => m.add_rocketmq_dead_letters(node, t, group, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_lag_is_never_negative_and_counts_pop_in_flight() {
        // A group that committed past the end (an admin reset, a clamp) lags by nothing.
        assert_eq!(queue_lag(0, 10, 12, None), (0, 0, 0));
        // An empty queue.
        assert_eq!(queue_lag(0, 0, 0, None), (0, 0, 0));
        // Retention moved the oldest kept message past the group's offset: the deleted
        // messages are not lag.
        assert_eq!(queue_lag(40, 50, 10, None), (10, 0, 10));
        // POP: 3 handed out and unacked from offset 5, the cursor at 8, the queue at 20.
        assert_eq!(queue_lag(0, 20, 5, Some((8, 3))), (15, 3, 12));
        // POP, everything acked: the consume offset is the cursor.
        assert_eq!(queue_lag(0, 20, 20, Some((20, 0))), (0, 0, 0));
    }

    #[test]
    fn latencies_are_zero_without_lag_and_never_negative() {
        let acc = Acc {
            lag: 0,
            oldest_unconsumed_ms: Some(1_000),
            ..Acc::default()
        };
        assert_eq!(acc.gauges(5_000).lag_latency_ms, 0);
        let acc = Acc {
            lag: 2,
            ready: 1,
            oldest_unconsumed_ms: Some(1_000),
            // A store time ahead of this host's clock (another host's, or a clock step).
            oldest_ready_ms: Some(9_000),
            ..Acc::default()
        };
        let g = acc.gauges(5_000);
        assert_eq!((g.lag_latency_ms, g.queueing_latency_ms), (4_000, 0));
    }
}
