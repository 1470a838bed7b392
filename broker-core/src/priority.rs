//! Priority messages (RocketMQ 5.4): a message's priority picks its queue, and a pop of a
//! PRIORITY topic reads the higher-priority queues first (ARCHITECTURE.md, "Priority
//! messages").
//!
//! * **Send.** A message whose properties resolve to the PRIORITY type (RocketMQ's order:
//!   TRANSACTION > DELAY > FIFO > PRIORITY > NORMAL, read from the properties and not from the
//!   topic, as RocketMQ's broker reads them) goes to the core's queue `min(priority,
//!   writable - 1)`, whatever queue the client named. A core is a broker of its own to
//!   RocketMQ's clients, holding the topic's queues it owns numbered 0, 1, ... in the order of
//!   their ids ([`crate::numbering`]): those numbers are the core's priority levels, 0 the
//!   lowest. A message of another type that carries the property loses it, as RocketMQ's
//!   broker clears it.
//! * **Pop.** A pop of any queue of the core ([`crate::pop`]) on a topic whose `message.type`
//!   is PRIORITY, not orderly, reads the core's queues from the highest number down and fills
//!   the batch from the top, when the pop's sample (a per-core count of such pops, mod 100)
//!   is below the group's `priority.factor` (0-100, default 100); else it starts at a
//!   different queue each time, as any pop. Redeliveries stay in their own queue, so a
//!   message keeps its priority when it comes back.
//! * **Counts.** Each core counts the priority messages it stored and handed out per
//!   priority ([`PriorityStats`]), published once a second as
//!   `corvus_priority_messages_total{core, priority, way}`.

use std::cell::Cell;

use message::RecordView;

/// RocketMQ's `MessageConst.PROPERTY_PRIORITY`: a non-negative priority, higher first.
pub const PROPERTY_PRIORITY: &str = "_SYS_MSG_PRIORITY_";
/// The topic attribute value that makes pops serve higher priorities first
/// (`message.type=PRIORITY`).
pub const MESSAGE_TYPE_PRIORITY: &str = "PRIORITY";
/// The group attribute (`updateSubGroup -a +priority.factor=N`): the share of a group's pops,
/// in percent, that read the higher-priority queues first.
pub const PRIORITY_FACTOR: &str = "priority.factor";
/// `priority.factor` when the group does not set it: every pop reads by priority.
pub const PRIORITY_FACTOR_DEFAULT: u32 = 100;
/// The priorities counted one by one in the metrics; higher ones count as this one.
pub const PRIORITY_LABEL_MAX: u32 = 9;

/// Properties whose presence makes a message transactional, delayed or FIFO, ahead of
/// PRIORITY (RocketMQ's `TopicMessageType.parseFromMessageProperty`).
const TRANSACTION: &str = "TRAN_MSG";
const DELAY_KEYS: [&str; 4] = [
    message::timer::DELAY,
    message::timer::TIMER_DELIVER_MS,
    message::timer::TIMER_DELAY_SEC,
    message::timer::TIMER_DELAY_MS,
];
const SHARDING_KEY: &str = message::prop::SHARDING_KEY;

/// What a message's properties say of its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// No priority property (or one that is not a non-negative number, which RocketMQ reads
    /// as unset and leaves alone).
    None,
    /// A PRIORITY message of this priority.
    Level(u32),
    /// The message carries a priority but is of a type ranked before PRIORITY: the property
    /// is dropped from the stored message.
    Dropped,
}

/// The priority of a message with properties `props`.
pub fn priority_of<'a>(props: impl IntoIterator<Item = (&'a str, &'a str)>) -> Priority {
    let mut level = None;
    let mut outranked = false;
    for (k, v) in props {
        if k == PROPERTY_PRIORITY {
            level = v
                .trim()
                .parse::<i32>()
                .ok()
                .and_then(|p| u32::try_from(p).ok());
        } else if (k == TRANSACTION && v.eq_ignore_ascii_case("true"))
            || DELAY_KEYS.contains(&k)
            || k == SHARDING_KEY
        {
            outranked = true;
        }
    }
    match level {
        None => Priority::None,
        Some(_) if outranked => Priority::Dropped,
        Some(p) => Priority::Level(p),
    }
}

/// The queue (its id) a message of priority `priority` goes to among a core's queues `ids`
/// (ordered by id) of a topic with `write_queues` writable queues: the core's writable queue
/// `min(priority, writable - 1)`. `None` when the core holds no writable queue of it.
pub fn priority_queue(ids: &[u32], write_queues: u32, priority: u32) -> Option<u32> {
    let own = protocol::core_view::core_queue_count(ids, write_queues);
    let level = priority.min(own.checked_sub(1)?);
    ids.get(level as usize).copied()
}

/// Whether `topic` of `table` is a PRIORITY topic (`message.type=PRIORITY`).
pub fn is_priority_topic(table: &crate::topics::TopicTable, topic: &str) -> bool {
    table.attribute(topic, "message.type") == Some(MESSAGE_TYPE_PRIORITY)
}

/// A group's `priority.factor` from its config fields (RocketMQ's
/// `SubscriptionGroupConfig.attributes`), bounded to 0..=100; the default without one or
/// when it does not read. The key is taken with mqadmin's `+` too, as `updateSubGroup -a`
/// sends it.
pub fn priority_factor(fields: &serde_json::Map<String, serde_json::Value>) -> u32 {
    let Some(attributes) = fields.get("attributes").and_then(|a| a.as_object()) else {
        return PRIORITY_FACTOR_DEFAULT;
    };
    let value = attributes
        .get(PRIORITY_FACTOR)
        .or_else(|| attributes.get(&format!("+{PRIORITY_FACTOR}")));
    let number = match value {
        Some(serde_json::Value::String(s)) => s.trim().parse::<i64>().ok(),
        Some(serde_json::Value::Number(n)) => n.as_i64(),
        _ => None,
    };
    number.map_or(PRIORITY_FACTOR_DEFAULT, |n| n.clamp(0, 100) as u32)
}

/// A stored record's priority, when it carries one.
pub fn record_priority(record: &[u8]) -> Option<u32> {
    let view = RecordView::parse(record).ok()?;
    let p = view.property(PROPERTY_PRIORITY)?;
    p.trim()
        .parse::<i32>()
        .ok()
        .and_then(|p| u32::try_from(p).ok())
}

/// Per-core counts of priority messages, by priority (0 to [`PRIORITY_LABEL_MAX`], higher
/// ones under the last): stored and handed out since the last publication. Plain cells: one
/// core counts, and its metrics tick takes them.
#[derive(Default)]
pub struct PriorityStats {
    sent: [Cell<u64>; PRIORITY_LABEL_MAX as usize + 1],
    delivered: [Cell<u64>; PRIORITY_LABEL_MAX as usize + 1],
}

fn slot(priority: u32) -> usize {
    priority.min(PRIORITY_LABEL_MAX) as usize
}

impl PriorityStats {
    pub fn count_sent(&self, priority: u32) {
        let c = &self.sent[slot(priority)];
        c.set(c.get() + 1);
    }

    pub fn count_delivered(&self, priority: u32) {
        let c = &self.delivered[slot(priority)];
        c.set(c.get() + 1);
    }

    /// The counts since the last call, as (priority, sent, delivered) for each priority with
    /// any; the cells start again from zero.
    pub fn take(&self) -> Vec<(u32, u64, u64)> {
        (0..=PRIORITY_LABEL_MAX)
            .filter_map(|p| {
                let sent = self.sent[p as usize].take();
                let delivered = self.delivered[p as usize].take();
                (sent + delivered > 0).then_some((p, sent, delivered))
            })
            .collect()
    }
}

/// Whether a pop is served by priority: the topic is a PRIORITY topic, the pop is not
/// orderly, and `sample` (0..100) is below the group's factor.
pub fn by_priority(priority_topic: bool, order: bool, sample: u32, factor: u32) -> bool {
    priority_topic && !order && sample % 100 < factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_order_decides_whether_a_priority_counts() {
        assert_eq!(priority_of([("A", "b")]), Priority::None);
        assert_eq!(priority_of([(PROPERTY_PRIORITY, "3")]), Priority::Level(3));
        for outranking in [
            ("TRAN_MSG", "true"),
            ("DELAY", "2"),
            ("TIMER_DELIVER_MS", "1"),
            ("TIMER_DELAY_SEC", "1"),
            ("TIMER_DELAY_MS", "1"),
            ("__SHARDINGKEY", "g"),
        ] {
            assert_eq!(
                priority_of([outranking, (PROPERTY_PRIORITY, "3")]),
                Priority::Dropped,
                "{outranking:?}"
            );
        }
        assert_eq!(
            priority_of([("TRAN_MSG", "false"), (PROPERTY_PRIORITY, "3")]),
            Priority::Level(3)
        );
        for unread in ["-1", "x", ""] {
            assert_eq!(priority_of([(PROPERTY_PRIORITY, unread)]), Priority::None);
        }
    }

    #[test]
    fn a_priority_picks_the_cores_writable_queue_of_its_level() {
        let ids = [1, 4, 6, 9];
        assert_eq!(priority_queue(&ids, 10, 0), Some(1));
        assert_eq!(priority_queue(&ids, 10, 2), Some(6));
        assert_eq!(priority_queue(&ids, 10, 3), Some(9));
        assert_eq!(priority_queue(&ids, 10, 99), Some(9));
        // Queue 9 is not writable: three levels.
        assert_eq!(priority_queue(&ids, 8, 7), Some(6));
        assert_eq!(priority_queue(&ids, 1, 7), None);
        assert_eq!(priority_queue(&[], 8, 0), None);
    }

    #[test]
    fn the_factor_is_read_from_the_groups_attributes() {
        let fields = |a: serde_json::Value| {
            serde_json::json!({ "groupName": "g", "attributes": a })
                .as_object()
                .unwrap()
                .clone()
        };
        assert_eq!(priority_factor(&serde_json::Map::new()), 100);
        assert_eq!(
            priority_factor(&fields(serde_json::json!({"priority.factor": "30"}))),
            30
        );
        assert_eq!(
            priority_factor(&fields(serde_json::json!({"+priority.factor": "0"}))),
            0
        );
        assert_eq!(
            priority_factor(&fields(serde_json::json!({"priority.factor": "500"}))),
            100
        );
        assert_eq!(
            priority_factor(&fields(serde_json::json!({"priority.factor": "x"}))),
            100
        );
        assert!(by_priority(true, false, 99, 100));
        assert!(!by_priority(true, false, 30, 30));
        assert!(by_priority(true, false, 29, 30));
        assert!(!by_priority(true, true, 0, 100));
        assert!(!by_priority(false, false, 0, 100));
    }

    #[test]
    fn counts_are_taken_once() {
        let s = PriorityStats::default();
        s.count_sent(2);
        s.count_sent(12);
        s.count_delivered(2);
        assert_eq!(s.take(), vec![(2, 1, 1), (9, 1, 0)]);
        assert!(s.take().is_empty());
    }
}
