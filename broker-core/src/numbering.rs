//! How each core numbers a topic's queues. Every core is a broker of its own to RocketMQ's
//! clients (`<broker>-c<N>`), and numbers the topic's queues it owns 0, 1, 2, ...
//! (`protocol::core_view`); the records keep the topic's queue ids. Request-reply, the
//! timer's delivered copies and the front ends all translate between the two here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use protocol::core_view::{core_queue_ids, global_queue_id, local_queue_id};
use protocol::TopicConfig;

use crate::core::Core;
use crate::error::BrokerError;

/// What a send reads of a topic's config: its queue counts and permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicQueues {
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

impl TopicQueues {
    pub fn of(cfg: &TopicConfig) -> TopicQueues {
        TopicQueues {
            read_queues: cfg.read_queues,
            write_queues: cfg.write_queues,
            perm: cfg.perm,
        }
    }
}

/// How a topic's queues are numbered on one core.
pub struct CoreQueues {
    pub ids: Rc<[u32]>,
}

/// The queue ids of `core_queue_ids` by topic, queue count and core: every request of a
/// RocketMQ client translates its queue number, and working the ids out hashes the topic
/// once per queue. Bounded: past [`QUEUE_ID_CACHE_MAX`] topics it starts over.
#[derive(Default)]
pub struct QueueNumbering {
    by_topic: RefCell<HashMap<String, Vec<QueueIds>>>,
    /// Turns of the sends that name no queue ([`QueueNumbering::next_turn`]).
    turn: std::cell::Cell<u32>,
}

/// A topic's queue count, a core, and the queue ids that core holds.
type QueueIds = (u32, u16, Rc<[u32]>);

const QUEUE_ID_CACHE_MAX: usize = 1 << 16;

impl CoreQueues {
    pub fn of(core: &Core, topic: &str, cfg: &TopicConfig, of_core: u16) -> CoreQueues {
        Self::of_queues(core, topic, TopicQueues::of(cfg), of_core)
    }

    /// [`CoreQueues::of`] by the topic's queue counts.
    pub fn of_queues(core: &Core, topic: &str, cfg: TopicQueues, of_core: u16) -> CoreQueues {
        let all = cfg.read_queues.max(cfg.write_queues);
        let cache = &core.queue_numbers.by_topic;
        if let Some(entries) = cache.borrow().get(topic) {
            if let Some((_, _, ids)) = entries.iter().find(|(n, c, _)| *n == all && *c == of_core) {
                return CoreQueues { ids: ids.clone() };
            }
        }
        let ids: Rc<[u32]> = core_queue_ids(
            topic,
            all,
            core.shared.shard_count,
            core.shared.cores,
            of_core,
        )
        .into();
        let mut cache = cache.borrow_mut();
        if cache.len() >= QUEUE_ID_CACHE_MAX {
            cache.clear();
        }
        let entries = cache.entry(topic.to_owned()).or_default();
        // A topic whose queue count changed keeps only its current entries.
        entries.retain(|(n, _, _)| *n == all);
        entries.push((all, of_core, ids.clone()));
        CoreQueues { ids }
    }

    /// The topic's queue id of the core's queue `local`.
    pub fn global(&self, topic: &str, local: u32) -> Result<u32, BrokerError> {
        global_queue_id(&self.ids, local).ok_or_else(|| BrokerError::QueueNotExist {
            topic: topic.to_owned(),
            queue_id: local,
            queues: self.ids.len() as u32,
        })
    }

    pub fn local(&self, global: u32) -> Option<u32> {
        local_queue_id(&self.ids, global)
    }
}

impl QueueNumbering {
    /// The next turn of the sends that name no queue (RocketMQ 5's Proxy sends queue id
    /// -1): the front end picks the queue of that turn.
    pub fn next_turn(&self) -> u32 {
        let turn = self.turn.get();
        self.turn.set(turn.wrapping_add(1));
        turn
    }
}

/// The number a RocketMQ client knows the topic's queue `global` by: its number on the core
/// that owns it (the broker that core stands for in the routes).
pub fn client_queue_id(core: &Core, topic: &str, global: u32) -> u32 {
    let shard = protocol::queue_owner_shard(topic, global, core.shared.shard_count);
    let owner = protocol::shard_core(shard, core.shared.cores);
    core.topic_for_read(topic)
        .ok()
        .and_then(|cfg| CoreQueues::of(core, topic, &cfg, owner).local(global))
        .unwrap_or(global)
}
