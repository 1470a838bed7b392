//! Failed messages: the group's retry topic (one queue per delay level) and dead-letter
//! topic, and sending a failed message back to one of them.

use message::prop;
use protocol::{perm, TopicConfig};

use super::{lock, PushInner};
use crate::error::{ClientError, Result};
use crate::model::{Message, MessageExt};

/// Property holding the earliest time (ms since the epoch) a retried message may be consumed.
pub const PROPERTY_DELIVER_AT_MS: &str = "__DELIVER_AT_MS";

/// The retry topic of a group.
pub fn retry_topic(group: &str) -> String {
    format!("%RETRY%{group}")
}

/// The dead-letter topic of a group.
pub fn dlq_topic(group: &str) -> String {
    format!("%DLQ%{group}")
}

impl PushInner {
    /// Creates the group's retry topic (one queue per delay level) if no broker has it.
    pub(super) fn ensure_retry_topic(&self) -> Result<()> {
        let topic = retry_topic(&self.settings.group);
        if self
            .pull
            .inst
            .fresh_route(&topic)
            .is_ok_and(|r| !r.read_queues().is_empty())
        {
            return Ok(());
        }
        let levels = lock(&self.retry_levels_ms).len().clamp(1, 64) as u32;
        self.create_topic_everywhere(&topic, levels)
    }

    fn create_topic_everywhere(&self, topic: &str, queues: u32) -> Result<()> {
        let addrs = self.group_addrs();
        if addrs.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            });
        }
        let cfg = TopicConfig {
            name: topic.to_owned(),
            read_queues: queues,
            write_queues: queues,
            perm: perm::READ_WRITE,
        };
        for addr in addrs {
            self.pull.inst.create_topic(&addr, &cfg)?;
        }
        self.pull.inst.fresh_route(topic).map(|_| ())
    }

    /// Sends a failed message to the retry topic, or to the DLQ after too many failures.
    pub(super) fn send_back(&self, m: &MessageExt) -> Result<()> {
        let group = &self.settings.group;
        let times = m.reconsume_times.max(0) as u32;
        let origin_topic = m.topic.clone();
        let mut msg = Message::new(String::new(), m.body.clone());
        msg.tags = m.tags.clone();
        msg.keys = m.keys.clone();
        msg.flag = m.flag;
        const OWN: [&str; 9] = [
            prop::TAGS,
            prop::KEYS,
            prop::UNIQ_KEY,
            prop::CRC,
            prop::RETRY_TOPIC,
            prop::ORIGIN_MESSAGE_ID,
            PROPERTY_DELIVER_AT_MS,
            message::timer::TIMER_OUT_MS,
            message::timer::TIMER_FROM,
        ];
        msg.properties = m
            .properties
            .iter()
            .filter(|(k, _)| {
                !OWN.contains(&k.as_str()) && !message::timer::KEYS.contains(&k.as_str())
            })
            .cloned()
            .collect();
        msg.properties
            .push((prop::RETRY_TOPIC.into(), origin_topic));
        msg.properties
            .push((prop::ORIGIN_MESSAGE_ID.into(), m.msg_id.clone()));
        let next_times = (times + 1) as i32;
        if times >= self.settings.max_reconsume_times {
            msg.topic = dlq_topic(group);
            if self.pull.inst.fresh_route(&msg.topic).is_err() {
                self.create_topic_everywhere(&msg.topic, 1)?;
            }
            self.producer.send_back(&msg, &m.msg_id, next_times, None)?;
            tracing::info!(msg_id = %m.msg_id, times = next_times, "message moved to the dead-letter topic");
            return Ok(());
        }
        let levels = lock(&self.retry_levels_ms).clone();
        let level = (times as usize + 3).min(levels.len().max(1));
        msg.topic = retry_topic(group);
        // The broker holds it for the level's delay (its timer), as RocketMQ's does.
        msg.properties
            .push((message::timer::DELAY.into(), level.to_string()));
        // One queue per level, so a queue's messages become due in the order they are stored.
        let route = self.pull.inst.routes.get(&msg.topic)?;
        let queues = route.write_queues();
        let queue = queues
            .get((level - 1) % queues.len().max(1))
            .map(|t| t.queue.clone());
        self.producer
            .send_back(&msg, &m.msg_id, next_times, queue)?;
        Ok(())
    }
}
