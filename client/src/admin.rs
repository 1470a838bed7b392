//! Admin requests, for tools such as `mqadmin`.

use std::sync::Arc;

use protocol::{BrokerStatus, ClusterInfo, TopicConfig};

use crate::error::Result;
use crate::instance::{ClientConfig, Instance};
use crate::model::{MessageQueue, QueueOffset};
use crate::push::ConsumeFrom;
use crate::route::TopicRoute;

/// NameServer and broker administration.
pub struct Admin {
    inst: Arc<Instance>,
}

impl Admin {
    /// `namesrv` is a `;`-separated list of NameServer addresses.
    pub fn new(namesrv: &str) -> Result<Admin> {
        Self::with_config(ClientConfig::new(namesrv)?)
    }

    pub fn with_config(config: ClientConfig) -> Result<Admin> {
        Ok(Admin {
            inst: Instance::start(config)?,
        })
    }

    pub fn topic_list(&self) -> Result<Vec<String>> {
        self.inst.routes.namesrv().topic_list()
    }

    /// The topic's route, freshly fetched.
    pub fn topic_route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.inst.fresh_route(topic)
    }

    pub fn cluster_info(&self) -> Result<ClusterInfo> {
        self.inst.routes.namesrv().cluster_info()
    }

    /// Creates or updates a topic on one broker address.
    pub fn create_topic(&self, broker_addr: &str, config: &TopicConfig) -> Result<()> {
        self.inst.create_topic(broker_addr, config)
    }

    pub fn broker_status(&self, broker_addr: &str) -> Result<BrokerStatus> {
        self.inst.broker_status(broker_addr)
    }

    /// (min, max) offsets of a queue.
    pub fn queue_offsets(&self, queue: &MessageQueue) -> Result<(QueueOffset, QueueOffset)> {
        self.inst.queue_offsets(queue)
    }

    pub fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<QueueOffset> {
        self.inst.search_offset(queue, timestamp_ms)
    }

    /// Sets the group's offset of every readable queue of `topic` to its first or last
    /// offset or to the first message stored at or after a time, and returns the new
    /// offsets. Running members adopt the new offset at their next commit (within their
    /// `commit_interval_ms`).
    pub fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        to: ConsumeFrom,
    ) -> Result<Vec<(MessageQueue, QueueOffset)>> {
        let route = self.inst.fresh_route(topic)?;
        let mut out = Vec::new();
        for t in route.read_queues() {
            let q = &t.queue;
            let off = match to {
                ConsumeFrom::First => self.inst.queue_offsets(q)?.0,
                ConsumeFrom::Last => self.inst.queue_offsets(q)?.1,
                ConsumeFrom::Timestamp(ms) => self.inst.search_offset(q, ms)?,
            };
            self.inst.reset_group_offset(group, q, off)?;
            out.push((q.clone(), off));
        }
        Ok(out)
    }

    /// Per queue of `topic`: the group's committed offset (if any) and the queue's max
    /// offset. The backlog is `max - committed`, never negative.
    pub fn consumer_progress(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<Vec<(MessageQueue, Option<QueueOffset>, QueueOffset)>> {
        let route = self.inst.fresh_route(topic)?;
        let mut out = Vec::new();
        for t in route.read_queues() {
            let q = &t.queue;
            let committed = self.inst.query_group_offset(group, q)?.offset;
            let max = self.inst.queue_offsets(q)?.1;
            out.push((q.clone(), committed, max));
        }
        Ok(out)
    }

    pub fn shutdown(&self) {
        self.inst.shutdown();
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.shutdown();
    }
}
