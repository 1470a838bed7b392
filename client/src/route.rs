//! Topic routes: which queues a topic has, and which address serves each one.
//!
//! A queue is served by the core that owns its shard (`protocol::queue_owner_shard`, then
//! `protocol::shard_core`); the client sends to that core's own address so the broker never
//! forwards across cores. Brokers that publish no core addresses are reached at their master
//! address.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use protocol::{perm, BrokerData, RouteData};

use crate::error::{ClientError, Result};
use crate::model::MessageQueue;
use crate::namesrv::NameServerClient;

/// A queue and the address its requests go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTarget {
    pub queue: MessageQueue,
    pub addr: String,
    /// The shard that owns the queue on its broker.
    pub shard: u16,
}

/// The address and owning shard of `queue_id` of `topic` on `broker`, or `None` if the broker
/// has no master.
pub fn queue_target_addr(broker: &BrokerData, topic: &str, queue_id: u32) -> Option<(String, u16)> {
    target_at(broker, broker.master_addr()?, topic, queue_id)
}

/// Where reads of `queue_id` go: the master's core, or while the group has no master in the
/// route, the core of its lowest live slave (whose core addresses the route then carries):
/// consumers keep reading through a master's absence and come back once it is routed again.
pub fn read_target_addr(broker: &BrokerData, topic: &str, queue_id: u32) -> Option<(String, u16)> {
    let addr = match broker.master_addr() {
        Some(m) => m,
        None => broker
            .addrs
            .iter()
            .min_by_key(|(id, _)| *id)
            .map(|(_, a)| a.as_str())?,
    };
    target_at(broker, addr, topic, queue_id)
}

/// The core address of `queue_id`'s shard on `broker`, or `broker_addr` (the broker's
/// own address) when the route publishes no core addresses.
fn target_at(
    broker: &BrokerData,
    broker_addr: &str,
    topic: &str,
    queue_id: u32,
) -> Option<(String, u16)> {
    let shard = protocol::queue_owner_shard(topic, queue_id, broker.shard_count);
    if broker.core_addrs.is_empty() {
        return Some((broker_addr.to_owned(), shard));
    }
    let cores = u16::try_from(broker.core_addrs.len()).unwrap_or(u16::MAX);
    let core = protocol::shard_core(shard, cores) as usize;
    let addr = broker
        .core_addrs
        .get(core)
        .map(String::as_str)
        .unwrap_or(broker_addr);
    Some((addr.to_owned(), shard))
}

/// A topic's route with its queues resolved to addresses, sorted by broker name then queue.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    pub topic: String,
    pub data: RouteData,
    write: Vec<QueueTarget>,
    read: Vec<QueueTarget>,
}

impl TopicRoute {
    pub fn new(topic: &str, data: RouteData) -> TopicRoute {
        let mut write = Vec::new();
        let mut read = Vec::new();
        for qd in &data.queues {
            let Some(broker) = data
                .brokers
                .iter()
                .find(|b| b.broker_name == qd.broker_name)
            else {
                continue;
            };
            let add = |out: &mut Vec<QueueTarget>, count: u32, for_read: bool| {
                for queue_id in 0..count {
                    let target = if for_read {
                        read_target_addr(broker, topic, queue_id)
                    } else {
                        queue_target_addr(broker, topic, queue_id)
                    };
                    if let Some((addr, shard)) = target {
                        out.push(QueueTarget {
                            queue: MessageQueue {
                                topic: topic.to_owned(),
                                broker_name: qd.broker_name.clone(),
                                queue_id,
                            },
                            addr,
                            shard,
                        });
                    }
                }
            };
            if qd.perm & perm::WRITE != 0 {
                add(&mut write, qd.write_queues, false);
            }
            if qd.perm & perm::READ != 0 {
                add(&mut read, qd.read_queues, true);
            }
        }
        write.sort_by(|a, b| a.queue.cmp(&b.queue));
        read.sort_by(|a, b| a.queue.cmp(&b.queue));
        write.dedup_by(|a, b| a.queue == b.queue);
        read.dedup_by(|a, b| a.queue == b.queue);
        TopicRoute {
            topic: topic.to_owned(),
            data,
            write,
            read,
        }
    }

    /// Queues a producer may send to.
    pub fn write_queues(&self) -> &[QueueTarget] {
        &self.write
    }

    /// Queues a consumer may pull from.
    pub fn read_queues(&self) -> &[QueueTarget] {
        &self.read
    }

    /// Where requests for `queue` go, whether or not the route lists it as readable or
    /// writable (an explicit queue is trusted to exist on its broker).
    pub fn target(&self, queue: &MessageQueue) -> Option<QueueTarget> {
        if let Some(t) = self
            .write
            .iter()
            .chain(&self.read)
            .find(|t| &t.queue == queue)
        {
            return Some(t.clone());
        }
        let broker = self
            .data
            .brokers
            .iter()
            .find(|b| b.broker_name == queue.broker_name)?;
        let (addr, shard) = queue_target_addr(broker, &self.topic, queue.queue_id)?;
        Some(QueueTarget {
            queue: queue.clone(),
            addr,
            shard,
        })
    }
}

/// After a failure, a topic's route is fetched again at most once per this interval: a dead
/// broker cannot make a client ask the NameServers for every send or pull. Short next to a
/// broker restart (a route the restarted broker registered is picked up within it).
pub(crate) const FAILURE_REFRESH_INTERVAL: Duration = Duration::from_millis(300);

/// Routes by topic, fetched on first use, again at once (rate limited) when a connection to
/// one of its brokers fails, and periodically.
pub(crate) struct RouteCache {
    namesrv: Arc<NameServerClient>,
    routes: RwLock<HashMap<String, Arc<TopicRoute>>>,
    /// The latest fetch of each topic's route (the outcome, and when), which answers for
    /// [`FAILURE_REFRESH_INTERVAL`] those look-ups that may be rate limited.
    fetched: Mutex<HashMap<String, Fetched>>,
    failure_refresh_interval: Duration,
}

struct Fetched {
    at: Instant,
    outcome: Result<RouteData>,
}

/// Entries of `fetched` past which old ones are pruned (they answer nothing once older than
/// the interval).
const FETCHED_PRUNE_LEN: usize = 1024;

impl RouteCache {
    pub fn new(namesrv: Arc<NameServerClient>) -> RouteCache {
        RouteCache {
            namesrv,
            routes: RwLock::new(HashMap::new()),
            fetched: Mutex::new(HashMap::new()),
            failure_refresh_interval: FAILURE_REFRESH_INTERVAL,
        }
    }

    pub fn namesrv(&self) -> &NameServerClient {
        &self.namesrv
    }

    /// The cached route, fetching it if the topic is new. A topic without a route that was
    /// asked for less than [`FAILURE_REFRESH_INTERVAL`] ago gets that answer again, so a
    /// topic whose only broker died is not looked up for every send or pull.
    pub fn get(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        if let Some(r) = self.cached(topic) {
            return Ok(r);
        }
        let data = self.fetch_limited(topic);
        self.store(topic, data)
    }

    fn cached(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .map(Arc::clone)
    }

    /// The route a producer sends by. A topic nobody created yet has no route; like RocketMQ's
    /// producer, fall back to the brokers that registered the default topic `TBW102` (those
    /// that allow auto-creation): the first send creates the topic there, the broker
    /// registers it, and the next look-up finds the real route. The fallback is not cached
    /// (but rate limited as a failure refresh is).
    pub fn get_for_send(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        match self.get(topic) {
            Err(e @ ClientError::NoRoute { .. }) if topic != AUTO_CREATE_TOPIC => {
                match self.fetch_limited(AUTO_CREATE_TOPIC) {
                    Ok(data) => Ok(Arc::new(TopicRoute::new(topic, data))),
                    Err(_) => Err(e),
                }
            }
            other => other,
        }
    }

    /// Fetches the route from a NameServer and caches it. A topic that no longer exists is
    /// dropped from the cache.
    pub fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        let data = self.fetch(topic);
        self.store(topic, data)
    }

    /// A request to one of the topic's brokers failed in a way that says the route may be
    /// stale (connection refused, reset, closed, timed out; a broker shutting down; a send
    /// refused by a broker that is no longer master): fetch
    /// it again, unless it was fetched less than [`FAILURE_REFRESH_INTERVAL`] ago, so the
    /// next attempt goes where the NameServers say the broker is now.
    pub fn refresh_after_failure(&self, topic: &str) {
        let data = self.fetch_limited(topic);
        if let Err(e) = self.store(topic, data) {
            tracing::debug!(%topic, error = %e, "route refresh after a failure");
        }
    }

    /// Asks a NameServer, and remembers the answer for the rate limit.
    fn fetch(&self, topic: &str) -> Result<RouteData> {
        let outcome = self.namesrv.route(topic);
        let mut fetched = self.fetched.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if fetched.len() >= FETCHED_PRUNE_LEN {
            let interval = self.failure_refresh_interval;
            fetched.retain(|_, f| now.saturating_duration_since(f.at) < interval);
        }
        fetched.insert(
            topic.to_owned(),
            Fetched {
                at: now,
                outcome: outcome.clone(),
            },
        );
        outcome
    }

    /// The answer of a fetch less than the interval ago, else a new fetch.
    fn fetch_limited(&self, topic: &str) -> Result<RouteData> {
        {
            let fetched = self.fetched.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(f) = fetched.get(topic) {
                if f.at.elapsed() < self.failure_refresh_interval {
                    return f.outcome.clone();
                }
            }
        }
        self.fetch(topic)
    }

    /// Caches what a fetch found: the route, or, when the topic has none, no entry.
    fn store(&self, topic: &str, data: Result<RouteData>) -> Result<Arc<TopicRoute>> {
        match data {
            Ok(data) => {
                let route = Arc::new(TopicRoute::new(topic, data));
                self.routes
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(topic.to_owned(), Arc::clone(&route));
                Ok(route)
            }
            Err(e @ ClientError::NoRoute { .. }) => {
                self.routes
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(topic);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn refresh_all(&self) {
        let topics: Vec<String> = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for topic in topics {
            if let Err(e) = self.refresh(&topic) {
                tracing::debug!(%topic, error = %e, "route refresh failed");
            }
        }
    }
}

/// RocketMQ's default topic, registered by brokers that create topics on first send.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";

/// The background refresh thread; it stops when this handle is stopped or dropped.
pub(crate) struct RouteRefresher {
    stop: Mutex<Option<Sender<()>>>,
}

impl RouteRefresher {
    pub fn start(cache: Arc<RouteCache>, interval: Duration) -> Result<RouteRefresher> {
        let (tx, rx) = mpsc::channel::<()>();
        thread::Builder::new()
            .name("mq-route-refresh".into())
            .spawn(move || {
                // Ends when stopped or when the handle is dropped (disconnected).
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                    cache.refresh_all();
                }
            })
            .map_err(|e| ClientError::io("route refresher", &e))?;
        Ok(RouteRefresher {
            stop: Mutex::new(Some(tx)),
        })
    }

    pub fn stop(&self) {
        self.stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{broker, route};
    use protocol::QueueData;

    #[test]
    fn each_queue_goes_to_the_core_that_owns_its_shard() {
        let cores = ["10.0.0.1:20000", "10.0.0.1:20001", "10.0.0.1:20002"];
        let data = route(vec![broker("broker-a", "10.0.0.1:10911", &cores, 6)], 8);
        let r = TopicRoute::new("TopicTest", data);
        assert_eq!(r.write_queues().len(), 8);
        assert_eq!(r.read_queues().len(), 8);
        for (q, t) in r.write_queues().iter().enumerate() {
            assert_eq!(t.queue.queue_id, q as u32);
            let shard = protocol::queue_owner_shard("TopicTest", q as u32, 6);
            let core = protocol::shard_core(shard, 3) as usize;
            assert_eq!(t.shard, shard);
            assert_eq!(t.addr, cores[core]);
        }
        // Queues spread over more than one core.
        let mut addrs: Vec<&str> = r.write_queues().iter().map(|t| t.addr.as_str()).collect();
        addrs.sort();
        addrs.dedup();
        assert!(addrs.len() > 1, "{addrs:?}");
    }

    #[test]
    fn brokers_without_core_addresses_are_reached_at_the_master() {
        let data = route(vec![broker("b", "10.0.0.2:10911", &[], 4)], 2);
        let r = TopicRoute::new("T", data);
        assert!(r.write_queues().iter().all(|t| t.addr == "10.0.0.2:10911"));
    }

    #[test]
    fn permissions_and_missing_masters_shape_the_queue_lists() {
        let mut slave_only = broker("c", "10.0.0.3:10911", &[], 1);
        slave_only.addrs = vec![(1, "10.0.0.3:10911".into())];
        let data = RouteData {
            brokers: vec![
                broker("b", "10.0.0.2:10911", &[], 1),
                broker("a", "10.0.0.1:10911", &[], 1),
                slave_only,
            ],
            queues: vec![
                QueueData {
                    broker_name: "b".into(),
                    read_queues: 2,
                    write_queues: 2,
                    perm: perm::READ,
                },
                QueueData {
                    broker_name: "a".into(),
                    read_queues: 4,
                    write_queues: 2,
                    perm: perm::READ_WRITE,
                },
                QueueData {
                    broker_name: "c".into(),
                    read_queues: 2,
                    write_queues: 2,
                    perm: perm::READ_WRITE,
                },
                QueueData {
                    broker_name: "ghost".into(),
                    read_queues: 2,
                    write_queues: 2,
                    perm: perm::READ_WRITE,
                },
            ],
        };
        let r = TopicRoute::new("T", data);
        let w: Vec<String> = r
            .write_queues()
            .iter()
            .map(|t| t.queue.to_string())
            .collect();
        assert_eq!(w, vec!["T@a#0", "T@a#1"]);
        let rd: Vec<String> = r
            .read_queues()
            .iter()
            .map(|t| t.queue.to_string())
            .collect();
        assert_eq!(
            rd,
            vec!["T@a#0", "T@a#1", "T@a#2", "T@a#3", "T@b#0", "T@b#1", "T@c#0", "T@c#1"],
            "a group without its master is read from its slave, not written to"
        );
        let explicit = MessageQueue {
            topic: "T".into(),
            broker_name: "a".into(),
            queue_id: 6,
        };
        assert_eq!(r.target(&explicit).unwrap().addr, "10.0.0.1:10911");
        let unknown = MessageQueue {
            broker_name: "zzz".into(),
            ..explicit
        };
        assert!(r.target(&unknown).is_none());
    }
}
