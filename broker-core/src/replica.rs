//! What replication sees of a core: [`ReplicaHost`], implemented here over the core's
//! shards, topic table and group offsets, so the replication layer never names [`Core`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use protocol::GroupQueue;
use shard::Shard;

use crate::core::Core;
use crate::ha::wire::{OffsetEntry, TopicRow};
use crate::ha::{CoreHa, ReplicaHost};
use crate::shared::Shared;

impl ReplicaHost for Core {
    fn core_id(&self) -> u16 {
        self.id
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn replication(&self) -> &CoreHa {
        &self.ha
    }

    fn shards(&self) -> &HashMap<u16, Shard> {
        &self.shards
    }

    fn topic_list(&self) -> Vec<TopicRow> {
        let table = self.topics.borrow();
        table
            .all()
            .into_iter()
            .map(|config| TopicRow {
                attributes: table.attributes(&config.name),
                config,
            })
            .collect()
    }

    fn follow_topics(&self, list: Vec<TopicRow>) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(follow_topics(self, list))
    }

    fn promoted(&self, shards: Vec<u16>) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        Box::pin(async move { self.rebuild_dedup(&shards).await })
    }

    fn demoted(&self) {
        self.dedup.borrow_mut().clear();
    }

    fn offsets_version(&self, shard: u16) -> u64 {
        self.offsets.get(&shard).map_or(0, |t| t.borrow().version())
    }

    fn offset_entries(&self, shard: u16) -> Vec<OffsetEntry> {
        let Some(table) = self.offsets.get(&shard) else {
            return Vec::new();
        };
        table
            .borrow()
            .entries()
            .map(|(k, v)| OffsetEntry {
                group: k.group.clone(),
                topic: k.topic.clone(),
                queue_id: k.queue_id,
                offset: v.offset,
                epoch: v.epoch,
            })
            .collect()
    }

    fn replicate_offsets(&self, shard: u16, entries: Vec<OffsetEntry>) -> Option<usize> {
        let mut t = self.offsets.get(&shard)?.borrow_mut();
        for e in entries {
            let key = GroupQueue {
                group: e.group,
                topic: e.topic,
                queue_id: e.queue_id,
            };
            t.replicate(key, e.offset, e.epoch);
        }
        Some(t.entries().count())
    }
}

/// Takes the master's topic table (RocketMQ's slave synchronization of topic configs): a
/// slave promoted, or read while its master is away, knows the topics and their attributes
/// (a topic's `dedup.enable` among them, so a promoted slave deduplicates what its master
/// did). The table comes whole, so a topic the master deleted is deleted here too (its
/// records stay in the log until retention, as on the master).
async fn follow_topics(core: &Core, list: Vec<TopicRow>) {
    let gone: Vec<String> = {
        let theirs: std::collections::HashSet<&str> =
            list.iter().map(|t| t.config.name.as_str()).collect();
        core.topics
            .borrow()
            .all()
            .into_iter()
            .map(|t| t.name)
            .filter(|n| !theirs.contains(n.as_str()) && n != crate::topics::AUTO_CREATE_TOPIC_KEY)
            .collect()
    };
    for name in gone {
        if let Err(e) = core.delete_topic(name.clone()).await {
            tracing::warn!(
                topic = name,
                "cannot delete a topic the master deleted: {e}"
            );
        }
    }
    for TopicRow {
        config: cfg,
        attributes,
    } in list
    {
        let same = {
            let table = core.topics.borrow();
            table.get(&cfg.name) == Some(&cfg) && table.attributes(&cfg.name) == attributes
        };
        if same {
            continue;
        }
        let name = cfg.name.clone();
        if let Err(e) = core.create_topic_with(cfg, Some(attributes)).await {
            tracing::warn!(topic = name, "cannot take the master's topic config: {e}");
        }
    }
}
