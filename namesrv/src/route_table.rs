//! The in-memory registry of live brokers and the topics they serve.
//!
//! Brokers are grouped by broker name (a master/slave group), then by broker id (0 is the
//! master). Every registration carries the broker's whole topic list, so a re-registration
//! (the 30 s heartbeat) replaces it: a topic the broker dropped vanishes from the routes.
//!
//! Time is passed in (`now`) rather than read from the clock, so expiry is tested without
//! sleeping. A broker is live while `now - last_seen <= broker_expiry`; the server's scan
//! thread removes expired brokers, and every query also skips them, so a route never names a
//! broker that has been silent for longer than the expiry even between two scans.
//!
//! Each broker also remembers the connection that last registered it
//! ([`RouteTable::bind_connection`]); when that connection closes, the server drops the broker
//! at once ([`RouteTable::connection_closed`]), as RocketMQ's BrokerHousekeepingService does
//! on a channel close. A broker that has since registered over a newer connection belongs to
//! that one, so its old connection closing leaves it alone. The expiry stays as the fallback
//! for a broker that freezes with its connection open.
//!
//! A heartbeat or a topic addition carries only the broker's key, not its address, so it
//! counts only over the connection bound to the entry: another connection may speak for a
//! broker that no longer holds the key (a fenced master whose slot a newer master took), and
//! it must neither keep that entry live nor bind it to itself. It is answered "not
//! registered" and registers in full, where the epoch rule applies.
//!
//! A group's master slot (id 0) goes to the highest master epoch (RocketMQ's `stateVersion`
//! rule): the controller raises the epoch at each election, so a fenced old master that still
//! reaches the NameServer, and keeps registering as id 0 with its older epoch, is refused while
//! the newer master is live, and the slot cannot flip back to it. One address is never held
//! under two ids of a group: a broker that registers under a new id (a master demoted to slave,
//! a slave promoted) leaves its old id.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use protocol::{
    BrokerData, BrokerKey, ClusterInfo, QueueData, RegisterBroker, RouteData, TopicConfig,
};

use crate::NameSrvError;

/// Longest broker name, address or topic name accepted in a registration.
pub const NAME_BYTES_MAX: usize = 255;

/// The broker id of a group's master.
pub const MASTER_BROKER_ID: u64 = 0;

/// One of the server's connections, as the table remembers which one speaks for a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

/// What a registration changed, so the caller can log first sightings loudly and
/// heartbeats quietly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// The broker was not known (or had expired).
    New,
    /// Known broker whose address, cores, cluster or topic list changed.
    Updated,
    /// Known broker, nothing changed: a heartbeat.
    Heartbeat,
}

#[derive(Debug, Clone, PartialEq)]
struct LiveBroker {
    cluster: String,
    addr: String,
    core_addrs: Vec<String>,
    shard_count: u16,
    topics: BTreeMap<String, TopicConfig>,
    /// The controller's master epoch the broker registered with (0 without a controller).
    master_epoch: u32,
    last_seen: Instant,
    /// The connection that last registered or heartbeated the broker (`None` until one is
    /// bound): its closing drops the broker. Not part of the registration's identity.
    connection: Option<ConnectionId>,
}

impl LiveBroker {
    fn same_registration(&self, other: &LiveBroker) -> bool {
        self.cluster == other.cluster
            && self.addr == other.addr
            && self.core_addrs == other.core_addrs
            && self.shard_count == other.shard_count
            && self.topics == other.topics
            && self.master_epoch == other.master_epoch
    }
}

/// The route table. Not thread-safe by itself; the server keeps it behind a mutex.
#[derive(Debug)]
pub struct RouteTable {
    broker_expiry: Duration,
    /// broker name → broker id → registration.
    groups: BTreeMap<String, BTreeMap<u64, LiveBroker>>,
    /// Broker groups whose write permission an operator wiped (mqadmin's wipeWritePerm, to
    /// drain a broker): their routes are read-only until addWritePerm, whatever they
    /// register.
    write_wiped: BTreeSet<String>,
}

impl RouteTable {
    pub fn new(broker_expiry: Duration) -> RouteTable {
        assert!(!broker_expiry.is_zero(), "broker expiry must be positive");
        RouteTable {
            broker_expiry,
            groups: BTreeMap::new(),
            write_wiped: BTreeSet::new(),
        }
    }

    pub fn broker_expiry(&self) -> Duration {
        self.broker_expiry
    }

    /// Registers a broker or refreshes its heartbeat, replacing its topic list.
    ///
    /// A master registration (id 0) is refused while another address holds the group's
    /// master slot, live, with a higher master epoch. A registration under one id drops the
    /// group's entries under other ids at the same address.
    pub fn register(
        &mut self,
        reg: RegisterBroker,
        now: Instant,
    ) -> Result<Registered, NameSrvError> {
        validate_registration(&reg)?;
        let RegisterBroker {
            key,
            addr,
            core_addrs,
            shard_count,
            topics,
            master_epoch,
        } = reg;
        let expiry = self.broker_expiry;
        if key.broker_id == MASTER_BROKER_ID {
            let holder = self
                .groups
                .get(&key.broker_name)
                .and_then(|g| g.get(&MASTER_BROKER_ID))
                .filter(|b| is_live(b, now, expiry) && b.addr != addr);
            if let Some(holder) = holder.filter(|b| b.master_epoch > master_epoch) {
                return Err(NameSrvError::StaleMasterEpoch {
                    broker_name: key.broker_name,
                    epoch: master_epoch,
                    current: holder.master_epoch,
                    holder: holder.addr.clone(),
                });
            }
        }
        // Later duplicates of a topic win, as a map insert would have it.
        let topics: BTreeMap<String, TopicConfig> =
            topics.into_iter().map(|t| (t.name.clone(), t)).collect();
        let group = self.groups.entry(key.broker_name).or_default();
        // The broker left whatever other id it held here (a demotion or a promotion).
        group.retain(|&id, b| id == key.broker_id || b.addr != addr);
        let previous = group.get(&key.broker_id);
        let broker = LiveBroker {
            cluster: key.cluster,
            addr,
            core_addrs,
            shard_count,
            topics,
            master_epoch,
            last_seen: now,
            // A re-registration keeps the connection bound so far until the caller binds its
            // own; a broker at another address taking the slot has no connection of its own
            // yet, and the previous holder's closing must not drop it.
            connection: None,
        };
        let broker = LiveBroker {
            connection: previous
                .filter(|old| old.addr == broker.addr)
                .and_then(|old| old.connection),
            ..broker
        };
        let outcome = match previous {
            Some(old) if is_live(old, now, expiry) => {
                if old.same_registration(&broker) {
                    Registered::Heartbeat
                } else {
                    Registered::Updated
                }
            }
            _ => Registered::New,
        };
        group.insert(key.broker_id, broker);
        Ok(outcome)
    }

    /// Removes a broker at once. Returns whether it was known. The cluster must match the
    /// registered one, so a misconfigured broker of another cluster cannot evict it.
    pub fn unregister(&mut self, key: &BrokerKey) -> bool {
        let Some(group) = self.groups.get_mut(&key.broker_name) else {
            return false;
        };
        let removed = match group.get(&key.broker_id) {
            Some(b) if b.cluster == key.cluster => group.remove(&key.broker_id).is_some(),
            _ => false,
        };
        if group.is_empty() {
            self.groups.remove(&key.broker_name);
        }
        removed
    }

    /// A registered, live broker's heartbeat over `connection`: it stays live. `false` when
    /// the broker is not known here (or already expired, or of another cluster, or bound to
    /// another connection): it must register in full.
    pub fn heartbeat(&mut self, key: &BrokerKey, connection: ConnectionId, now: Instant) -> bool {
        let expiry = self.broker_expiry;
        match self
            .groups
            .get_mut(&key.broker_name)
            .and_then(|g| g.get_mut(&key.broker_id))
        {
            Some(b)
                if b.cluster == key.cluster
                    && is_live(b, now, expiry)
                    && b.connection.is_none_or(|c| c == connection) =>
            {
                b.last_seen = now;
                b.connection = Some(connection);
                true
            }
            _ => false,
        }
    }

    /// Adds or replaces `topics` of a registered, live broker (the rest of its topics
    /// stay), and counts as its heartbeat over `connection`. `false` when the broker is not
    /// known here (as for [`RouteTable::heartbeat`]): it must register in full.
    pub fn add_topics(
        &mut self,
        key: &BrokerKey,
        connection: ConnectionId,
        topics: Vec<TopicConfig>,
        now: Instant,
    ) -> Result<bool, NameSrvError> {
        if let Some(t) = topics
            .iter()
            .find(|t| t.name.is_empty() || t.name.len() > NAME_BYTES_MAX)
        {
            return Err(NameSrvError::BadRegistration(format!(
                "broker {} registers a topic with an empty or over-long name ({} bytes)",
                key.broker_name,
                t.name.len()
            )));
        }
        if !self.heartbeat(key, connection, now) {
            return Ok(false);
        }
        let Some(b) = self.broker_mut(key) else {
            return Ok(false);
        };
        for t in topics {
            b.topics.insert(t.name.clone(), t);
        }
        Ok(true)
    }

    /// Records that `connection` speaks for the (registered, same-cluster) broker `key` now:
    /// its registration just succeeded there. Returns whether the broker is known.
    pub fn bind_connection(&mut self, key: &BrokerKey, connection: ConnectionId) -> bool {
        match self.broker_mut(key) {
            Some(b) => {
                b.connection = Some(connection);
                true
            }
            None => false,
        }
    }

    /// `connection` has closed: drops the broker `key` if that connection still speaks for
    /// it (a broker that registered over a newer connection since stays). Returns whether
    /// the broker was dropped.
    pub fn connection_closed(&mut self, key: &BrokerKey, connection: ConnectionId) -> bool {
        let owned = self
            .broker_mut(key)
            .is_some_and(|b| b.connection == Some(connection));
        owned && self.unregister(key)
    }

    fn broker_mut(&mut self, key: &BrokerKey) -> Option<&mut LiveBroker> {
        self.groups
            .get_mut(&key.broker_name)
            .and_then(|g| g.get_mut(&key.broker_id))
            .filter(|b| b.cluster == key.cluster)
    }

    /// Drops every broker silent for longer than the expiry; returns their keys.
    pub fn expire(&mut self, now: Instant) -> Vec<BrokerKey> {
        let expiry = self.broker_expiry;
        let mut expired = Vec::new();
        for (name, group) in self.groups.iter_mut() {
            group.retain(|&id, b| {
                let live = is_live(b, now, expiry);
                if !live {
                    expired.push(BrokerKey {
                        cluster: b.cluster.clone(),
                        broker_name: name.clone(),
                        broker_id: id,
                    });
                }
                live
            });
        }
        self.groups.retain(|_, group| !group.is_empty());
        expired
    }

    /// The route of a topic: every live broker group serving it, and one queue entry per
    /// group. `None` when no live broker has the topic.
    pub fn route(&self, topic: &str, now: Instant) -> Option<RouteData> {
        let mut brokers = Vec::new();
        let mut queues = Vec::new();
        for (name, group) in &self.groups {
            let live: Vec<(u64, &LiveBroker)> = self.live_members(group, now).collect();
            // The master's topic config speaks for the group; without a live master, the
            // lowest live id that has the topic does.
            let Some(config) = live.iter().find_map(|(_, b)| b.topics.get(topic)) else {
                continue;
            };
            if let Some(data) = broker_data(name, &live) {
                brokers.push(data);
                let perm = if self.write_wiped.contains(name) {
                    config.perm & !protocol::perm::WRITE
                } else {
                    config.perm
                };
                queues.push(QueueData {
                    broker_name: name.clone(),
                    read_queues: config.read_queues,
                    write_queues: config.write_queues,
                    perm,
                });
            }
        }
        debug_assert_eq!(brokers.len(), queues.len());
        if brokers.is_empty() {
            None
        } else {
            Some(RouteData { brokers, queues })
        }
    }

    /// Drops `topic` from every broker (of `cluster`, when given): its route is gone until a
    /// broker registers it again. Returns how many registrations held it.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) -> usize {
        let mut dropped = 0;
        for group in self.groups.values_mut() {
            for b in group.values_mut() {
                if cluster.is_some_and(|c| c != b.cluster) {
                    continue;
                }
                if b.topics.remove(topic).is_some() {
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Every live broker group.
    pub fn cluster_info(&self, now: Instant) -> ClusterInfo {
        let brokers = self
            .groups
            .iter()
            .filter_map(|(name, group)| {
                let live: Vec<(u64, &LiveBroker)> = self.live_members(group, now).collect();
                broker_data(name, &live)
            })
            .collect();
        ClusterInfo { brokers }
    }

    /// Every topic some live broker serves, sorted, without duplicates.
    pub fn topic_list(&self, now: Instant) -> Vec<String> {
        let mut topics = BTreeSet::new();
        for group in self.groups.values() {
            for (_, b) in self.live_members(group, now) {
                topics.extend(b.topics.keys().cloned());
            }
        }
        topics.into_iter().collect()
    }

    /// The broker group a RocketMQ broker name stands for: the group's own name or one of
    /// its cores' (`protocol::core_view`); the cores of one broker drain together.
    fn group_named(&self, name: &str) -> Option<String> {
        self.groups.iter().find_map(|(g, members)| {
            let cores = members
                .values()
                .map(|b| b.core_addrs.len())
                .max()
                .unwrap_or(1)
                .max(1) as u16;
            (g == name || protocol::core_view::core_of_broker_name(g, name, cores).is_some())
                .then(|| g.clone())
        })
    }

    /// Takes the write permission from the broker group `name` names (mqadmin's
    /// wipeWritePerm): the number of its topics whose routes lost it; `None` for a name no
    /// registered broker has.
    pub fn wipe_write_perm(&mut self, name: &str) -> Option<usize> {
        let group = self.group_named(name)?;
        let count = self.writable_topics(&group);
        self.write_wiped.insert(group);
        Some(count)
    }

    /// Gives the write permission back (mqadmin's addWritePerm): the number of topics whose
    /// routes are writable again.
    pub fn add_write_perm(&mut self, name: &str) -> Option<usize> {
        let group = self.group_named(name)?;
        let count = if self.write_wiped.remove(&group) {
            self.writable_topics(&group)
        } else {
            0
        };
        Some(count)
    }

    /// The topics of a group's registrations that have the write permission.
    fn writable_topics(&self, group: &str) -> usize {
        let mut topics = BTreeSet::new();
        for b in self.groups.get(group).into_iter().flat_map(|g| g.values()) {
            topics.extend(
                b.topics
                    .values()
                    .filter(|t| t.perm & protocol::perm::WRITE != 0)
                    .map(|t| t.name.as_str()),
            );
        }
        topics.len()
    }

    /// Registrations held, live or not yet scanned away.
    pub fn broker_count(&self) -> usize {
        self.groups.values().map(BTreeMap::len).sum()
    }

    fn live_members<'a>(
        &self,
        group: &'a BTreeMap<u64, LiveBroker>,
        now: Instant,
    ) -> impl Iterator<Item = (u64, &'a LiveBroker)> {
        let expiry = self.broker_expiry;
        group
            .iter()
            .filter(move |(_, b)| is_live(b, now, expiry))
            .map(|(&id, b)| (id, b))
    }
}

fn is_live(b: &LiveBroker, now: Instant, expiry: Duration) -> bool {
    now.saturating_duration_since(b.last_seen) <= expiry
}

/// Merges the live members of one group (sorted by id, master first) into one `BrokerData`.
/// Cluster, core addresses and shard count come from the master, or from the lowest live id
/// while the master is away.
fn broker_data(name: &str, live: &[(u64, &LiveBroker)]) -> Option<BrokerData> {
    let (_, primary) = live.first()?;
    Some(BrokerData {
        cluster: primary.cluster.clone(),
        broker_name: name.to_string(),
        addrs: live.iter().map(|(id, b)| (*id, b.addr.clone())).collect(),
        core_addrs: primary.core_addrs.clone(),
        shard_count: primary.shard_count,
        member_core_addrs: live
            .iter()
            .map(|(id, b)| (*id, b.core_addrs.clone()))
            .collect(),
    })
}

fn validate_registration(reg: &RegisterBroker) -> Result<(), NameSrvError> {
    let bad = |what: String| Err(NameSrvError::BadRegistration(what));
    if reg.key.broker_name.is_empty() || reg.key.broker_name.len() > NAME_BYTES_MAX {
        return bad(format!(
            "broker name must be 1..={NAME_BYTES_MAX} bytes, got {}",
            reg.key.broker_name.len()
        ));
    }
    if reg.key.cluster.len() > NAME_BYTES_MAX {
        return bad(format!("cluster name longer than {NAME_BYTES_MAX} bytes"));
    }
    if reg.addr.is_empty() || reg.addr.len() > NAME_BYTES_MAX {
        return bad(format!(
            "broker {} has an empty or over-long address",
            reg.key.broker_name
        ));
    }
    if let Some(t) = reg
        .topics
        .iter()
        .find(|t| t.name.is_empty() || t.name.len() > NAME_BYTES_MAX)
    {
        return bad(format!(
            "broker {} registers a topic with an empty or over-long name ({} bytes)",
            reg.key.broker_name,
            t.name.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use protocol::perm;

    const EXPIRY: Duration = Duration::from_secs(120);
    const CONN: ConnectionId = ConnectionId(7);

    fn topic(name: &str, queues: u32) -> TopicConfig {
        TopicConfig {
            name: name.into(),
            read_queues: queues,
            write_queues: queues,
            perm: perm::READ_WRITE,
        }
    }

    fn reg(name: &str, id: u64, addr: &str, topics: &[TopicConfig]) -> RegisterBroker {
        RegisterBroker {
            key: BrokerKey {
                cluster: "DefaultCluster".into(),
                broker_name: name.into(),
                broker_id: id,
            },
            addr: addr.into(),
            core_addrs: vec![format!("{addr}-core0"), format!("{addr}-core1")],
            shard_count: 4,
            topics: topics.to_vec(),
            master_epoch: 0,
        }
    }

    fn master(name: &str, addr: &str, master_epoch: u32) -> RegisterBroker {
        RegisterBroker {
            master_epoch,
            ..reg(name, MASTER_BROKER_ID, addr, &[topic("T", 1)])
        }
    }

    fn addrs(table: &RouteTable, now: Instant) -> Vec<(u64, String)> {
        table.route("T", now).unwrap().brokers[0].addrs.clone()
    }

    #[test]
    fn a_wiped_broker_is_read_only_in_every_route_until_write_is_added_back() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let mut ro = topic("ReadOnly", 2);
        ro.perm = perm::READ;
        table
            .register(
                reg("broker-a", 0, "a:1", &[topic("T", 4), topic("U", 2), ro]),
                t0,
            )
            .unwrap();
        table
            .register(reg("broker-b", 0, "b:1", &[topic("T", 4)]), t0)
            .unwrap();
        let perms = |table: &RouteTable| -> Vec<(String, u32)> {
            let r = table.route("T", t0).unwrap();
            r.queues
                .iter()
                .map(|q| (q.broker_name.clone(), q.perm))
                .collect()
        };
        // A core's RocketMQ name drains its whole broker; two writable topics lose write.
        assert_eq!(table.wipe_write_perm("broker-a-c1"), Some(2));
        assert_eq!(
            perms(&table),
            [
                ("broker-a".into(), perm::READ),
                ("broker-b".into(), perm::READ_WRITE)
            ]
        );
        // A registration does not give it back.
        table
            .register(
                reg("broker-a", 0, "a:1", &[topic("T", 4), topic("U", 2)]),
                t0,
            )
            .unwrap();
        assert_eq!(table.route("T", t0).unwrap().queues[0].perm, perm::READ);
        assert_eq!(table.add_write_perm("broker-a"), Some(2));
        assert_eq!(
            table.route("T", t0).unwrap().queues[0].perm,
            perm::READ_WRITE
        );
        assert_eq!(
            table.add_write_perm("broker-a"),
            Some(0),
            "nothing was wiped"
        );
        assert_eq!(table.wipe_write_perm("broker-x"), None);
        assert_eq!(table.wipe_write_perm("broker-a-c2"), None, "no third core");
    }

    #[test]
    fn a_stale_master_epoch_is_refused_and_the_newer_master_keeps_the_slot() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        table.register(master("broker-a", "a:1", 3), t0).unwrap();
        // The slave, promoted at the next election, takes the slot.
        let outcome = table.register(master("broker-a", "b:1", 4), t0).unwrap();
        assert_eq!(outcome, Registered::Updated);
        assert_eq!(addrs(&table, t0), [(0, "b:1".to_string())]);
        // The fenced old master's periodic registration does not flip it back.
        let t1 = t0 + Duration::from_secs(30);
        let err = table
            .register(master("broker-a", "a:1", 3), t1)
            .unwrap_err();
        assert!(
            matches!(
                err,
                NameSrvError::StaleMasterEpoch { epoch: 3, current: 4, ref holder, .. }
                    if holder == "b:1"
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("stale master epoch 3 < current 4 held by b:1"),
            "{err}"
        );
        assert_eq!(addrs(&table, t1), [(0, "b:1".to_string())]);
        // A later election moves it again.
        table.register(master("broker-a", "a:1", 5), t1).unwrap();
        assert_eq!(addrs(&table, t1), [(0, "a:1".to_string())]);
        // The holder itself may re-register at any epoch (a broker left its controller).
        table.register(master("broker-a", "a:1", 0), t1).unwrap();
        assert_eq!(addrs(&table, t1), [(0, "a:1".to_string())]);
    }

    #[test]
    fn an_equal_epoch_from_a_new_address_takes_the_slot() {
        // Epoch 0 is every broker without a controller: a master restarted at another address
        // takes the slot, as before the epoch rule.
        for epoch in [0, 7] {
            let t0 = Instant::now();
            let mut table = RouteTable::new(EXPIRY);
            table
                .register(master("broker-a", "a:1", epoch), t0)
                .unwrap();
            let outcome = table
                .register(master("broker-a", "a:2", epoch), t0)
                .unwrap();
            assert_eq!(outcome, Registered::Updated);
            assert_eq!(addrs(&table, t0), [(0, "a:2".to_string())]);
        }
    }

    #[test]
    fn an_expired_master_is_replaced_whatever_its_epoch() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        table.register(master("broker-a", "b:1", 9), t0).unwrap();
        let at_expiry = t0 + EXPIRY;
        assert!(table
            .register(master("broker-a", "a:1", 2), at_expiry)
            .is_err());
        let t1 = at_expiry + Duration::from_millis(1);
        let outcome = table.register(master("broker-a", "a:1", 2), t1).unwrap();
        assert_eq!(outcome, Registered::New);
        assert_eq!(addrs(&table, t1), [(0, "a:1".to_string())]);
    }

    #[test]
    fn a_changed_epoch_is_an_update() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        table.register(master("broker-a", "a:1", 1), t0).unwrap();
        let same = table.register(master("broker-a", "a:1", 1), t0).unwrap();
        assert_eq!(same, Registered::Heartbeat);
        let raised = table.register(master("broker-a", "a:1", 2), t0).unwrap();
        assert_eq!(raised, Registered::Updated);
    }

    #[test]
    fn a_broker_moving_to_another_id_leaves_its_old_one() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let slave = |addr: &str| reg("broker-a", 1, addr, &[topic("T", 1)]);
        let old_master = master("broker-a", "a:1", 1);
        let key_master = old_master.key.clone();
        let key_slave = slave("b:1").key;
        let (conn_a, conn_b) = (ConnectionId(1), ConnectionId(2));
        table.register(old_master, t0).unwrap();
        table.register(slave("b:1"), t0).unwrap();
        table.bind_connection(&key_master, conn_a);
        table.bind_connection(&key_slave, conn_b);
        assert_eq!(
            addrs(&table, t0),
            [(0, "a:1".to_string()), (1, "b:1".to_string())]
        );

        // The slave is promoted: b:1 leaves id 1.
        table.register(master("broker-a", "b:1", 2), t0).unwrap();
        table.bind_connection(&key_master, conn_b);
        assert_eq!(addrs(&table, t0), [(0, "b:1".to_string())]);
        assert_eq!(table.broker_count(), 1);
        // The old master, demoted, comes back as the slave: a:1 is under id 1 only.
        table.register(slave("a:1"), t0).unwrap();
        table.bind_connection(&key_slave, conn_a);
        assert_eq!(
            addrs(&table, t0),
            [(0, "b:1".to_string()), (1, "a:1".to_string())]
        );
        assert_eq!(table.broker_count(), 2);

        // The old master's connection closing drops the slave it now speaks for, not the new
        // master that holds its old key.
        assert!(!table.connection_closed(&key_master, conn_a));
        assert!(table.connection_closed(&key_slave, conn_a));
        assert_eq!(addrs(&table, t0), [(0, "b:1".to_string())]);
    }

    #[test]
    fn a_new_address_in_the_slot_is_not_bound_to_the_old_holders_connection() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let old = master("broker-a", "a:1", 1);
        let key = old.key.clone();
        table.register(old, t0).unwrap();
        table.bind_connection(&key, ConnectionId(1));
        table.register(master("broker-a", "b:1", 2), t0).unwrap();
        assert!(!table.connection_closed(&key, ConnectionId(1)));
        assert_eq!(addrs(&table, t0), [(0, "b:1".to_string())]);
        // The same address re-registering keeps its binding.
        table.bind_connection(&key, ConnectionId(2));
        table.register(master("broker-a", "b:1", 2), t0).unwrap();
        assert!(table.connection_closed(&key, ConnectionId(2)));
    }

    #[test]
    fn heartbeats_count_only_over_the_connection_bound_to_the_broker() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let old_master = master("broker-a", "a:1", 1);
        let key = old_master.key.clone();
        let (conn_a, conn_b) = (ConnectionId(1), ConnectionId(2));
        // Not bound yet (the table alone): any connection's heartbeat counts, and binds it.
        table.register(old_master, t0).unwrap();
        assert!(table.heartbeat(&key, conn_a, t0));
        assert!(!table.heartbeat(&key, conn_b, t0), "bound to conn_a now");
        // A newer master takes the slot over conn_b.
        table.register(master("broker-a", "b:1", 2), t0).unwrap();
        table.bind_connection(&key, conn_b);
        // The fenced master keeps heartbeating under the key it held: refused (it must
        // register in full, and hears the stale epoch there), and it does not take the entry.
        let t1 = t0 + Duration::from_secs(1);
        assert!(!table.heartbeat(&key, conn_a, t1));
        assert!(!table
            .add_topics(&key, conn_a, vec![topic("X", 1)], t1)
            .unwrap());
        assert!(table.route("X", t1).is_none());
        assert!(!table.connection_closed(&key, conn_a));
        assert_eq!(addrs(&table, t1), [(0, "b:1".to_string())]);
        // Nor does it keep the new master live: only the new master's own beats do.
        let t2 = t0 + EXPIRY + Duration::from_millis(1);
        assert!(!table.heartbeat(&key, conn_a, t0 + EXPIRY));
        assert!(table.route("T", t2).is_none());
        assert!(table.heartbeat(&key, conn_b, t1));
        assert!(table.route("T", t2).is_some());
    }

    #[test]
    fn added_topics_join_a_registered_broker_and_an_unknown_one_must_register() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let a = reg("broker-a", 0, "10.0.0.1:10911", &[topic("T1", 8)]);
        let key = a.key.clone();
        table.register(a, t0).unwrap();
        assert!(table
            .add_topics(&key, CONN, vec![topic("T2", 2), topic("T1", 3)], t0)
            .unwrap());
        // Added and replaced; nothing else dropped.
        assert_eq!(table.route("T1", t0).unwrap().queues[0].write_queues, 3);
        assert_eq!(table.route("T2", t0).unwrap().queues[0].write_queues, 2);
        let unknown = BrokerKey {
            broker_name: "broker-z".into(),
            ..key.clone()
        };
        assert!(!table
            .add_topics(&unknown, CONN, vec![topic("T3", 1)], t0)
            .unwrap());
        assert!(table.route("T3", t0).is_none());
        assert!(table
            .add_topics(&key, CONN, vec![topic("", 1)], t0)
            .is_err());
        // It counts as a heartbeat: the broker outlives an expiry from its registration.
        let later = t0 + EXPIRY - Duration::from_secs(1);
        assert!(table
            .add_topics(&key, CONN, vec![topic("T4", 1)], later)
            .unwrap());
        assert!(table.route("T1", later + Duration::from_secs(2)).is_some());
    }

    #[test]
    fn register_then_route_topic_list_and_cluster_info() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let outcome = table
            .register(reg("broker-a", 0, "10.0.0.1:10911", &[topic("T1", 8)]), t0)
            .unwrap();
        assert_eq!(outcome, Registered::New);
        table
            .register(
                reg(
                    "broker-b",
                    0,
                    "10.0.0.2:10911",
                    &[topic("T1", 4), topic("T2", 2)],
                ),
                t0,
            )
            .unwrap();

        let route = table.route("T1", t0).unwrap();
        let names: Vec<&str> = route
            .brokers
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, ["broker-a", "broker-b"]);
        assert_eq!(route.queues.len(), 2);
        assert_eq!(route.queues[0].write_queues, 8);
        assert_eq!(route.queues[1].write_queues, 4);
        assert_eq!(route.brokers[0].master_addr(), Some("10.0.0.1:10911"));
        assert_eq!(route.brokers[0].shard_count, 4);

        let route = table.route("T2", t0).unwrap();
        assert_eq!(route.brokers.len(), 1);
        assert_eq!(route.brokers[0].broker_name, "broker-b");
        assert!(table.route("T3", t0).is_none());

        assert_eq!(table.topic_list(t0), ["T1", "T2"]);
        assert_eq!(table.cluster_info(t0).brokers.len(), 2);
    }

    #[test]
    fn master_and_slave_merge_by_broker_name() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        // The slave registers first; the master's data must still win once it is there.
        table
            .register(reg("broker-a", 1, "10.0.0.9:10911", &[topic("T", 2)]), t0)
            .unwrap();
        let route = table.route("T", t0).unwrap();
        assert_eq!(route.brokers[0].master_addr(), None);
        assert_eq!(route.brokers[0].core_addrs[0], "10.0.0.9:10911-core0");

        table
            .register(reg("broker-a", 0, "10.0.0.1:10911", &[topic("T", 8)]), t0)
            .unwrap();
        let route = table.route("T", t0).unwrap();
        assert_eq!(route.brokers.len(), 1, "one entry per broker name");
        assert_eq!(route.queues.len(), 1);
        let b = &route.brokers[0];
        assert_eq!(
            b.addrs,
            [
                (0, "10.0.0.1:10911".to_string()),
                (1, "10.0.0.9:10911".to_string())
            ]
        );
        assert_eq!(b.core_addrs[0], "10.0.0.1:10911-core0");
        assert_eq!(route.queues[0].write_queues, 8, "master's topic config");
        assert_eq!(table.cluster_info(t0).brokers.len(), 1);
        assert_eq!(table.broker_count(), 2);
    }

    #[test]
    fn a_heartbeat_keeps_a_known_broker_live_and_an_unknown_one_must_register() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let r = reg("broker-a", 0, "a:1", &[topic("T", 1)]);
        let key = r.key.clone();
        // Not known yet (a NameServer restarted empty): register first.
        assert!(!table.heartbeat(&key, CONN, t0));
        table.register(r, t0).unwrap();
        let t1 = t0 + EXPIRY - Duration::from_millis(1);
        assert!(table.heartbeat(&key, CONN, t1));
        // Live past the first registration's expiry, thanks to the heartbeat.
        let t2 = t0 + EXPIRY + Duration::from_millis(10);
        assert_eq!(table.route("T", t2).unwrap().brokers.len(), 1);
        // Once expired, a heartbeat does not bring it back.
        let t3 = t1 + EXPIRY + Duration::from_millis(1);
        assert!(!table.heartbeat(&key, CONN, t3));
        // Another cluster's broker of the same name is not this one.
        let mut other = key.clone();
        other.cluster = "Other".into();
        assert!(!table.heartbeat(&other, CONN, t1));
    }

    #[test]
    fn expiry_drops_a_silent_broker() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        table
            .register(reg("broker-a", 0, "a:1", &[topic("T", 1)]), t0)
            .unwrap();
        table
            .register(reg("broker-b", 0, "b:1", &[topic("T", 1)]), t0)
            .unwrap();
        // broker-b keeps heartbeating, broker-a goes silent.
        let t1 = t0 + Duration::from_secs(100);
        assert_eq!(
            table
                .register(reg("broker-b", 0, "b:1", &[topic("T", 1)]), t1)
                .unwrap(),
            Registered::Heartbeat
        );
        let t2 = t0 + EXPIRY + Duration::from_millis(1);
        // Queries skip it even before the scan.
        assert_eq!(table.route("T", t2).unwrap().brokers.len(), 1);
        assert_eq!(table.broker_count(), 2);

        let expired = table.expire(t2);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].broker_name, "broker-a");
        assert_eq!(table.broker_count(), 1);
        let route = table.route("T", t2).unwrap();
        assert_eq!(route.brokers[0].broker_name, "broker-b");
        assert!(table.expire(t2).is_empty());

        // Exactly at the expiry a broker is still live.
        assert!(table.expire(t1 + EXPIRY).is_empty());
        // A broker that comes back after expiring is new again.
        assert_eq!(
            table
                .register(reg("broker-a", 0, "a:1", &[topic("T", 1)]), t2)
                .unwrap(),
            Registered::New
        );
    }

    #[test]
    fn re_registration_replaces_the_topic_list() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        table
            .register(
                reg("broker-a", 0, "a:1", &[topic("Old", 1), topic("Kept", 1)]),
                t0,
            )
            .unwrap();
        let outcome = table
            .register(
                reg("broker-a", 0, "a:1", &[topic("Kept", 4), topic("New", 1)]),
                t0,
            )
            .unwrap();
        assert_eq!(outcome, Registered::Updated);
        assert!(table.route("Old", t0).is_none());
        assert_eq!(table.route("Kept", t0).unwrap().queues[0].read_queues, 4);
        assert_eq!(table.topic_list(t0), ["Kept", "New"]);
    }

    #[test]
    fn unregister_removes_at_once_and_checks_the_cluster() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let r = reg("broker-a", 0, "a:1", &[topic("T", 1)]);
        let key = r.key.clone();
        table.register(r, t0).unwrap();

        let mut wrong_cluster = key.clone();
        wrong_cluster.cluster = "Other".into();
        assert!(!table.unregister(&wrong_cluster));
        assert!(table.route("T", t0).is_some());

        assert!(table.unregister(&key));
        assert!(table.route("T", t0).is_none());
        assert!(table.cluster_info(t0).brokers.is_empty());
        assert!(!table.unregister(&key), "second unregister finds nothing");
    }

    #[test]
    fn bad_registrations_are_refused() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        assert!(table.register(reg("", 0, "a:1", &[]), t0).is_err());
        assert!(table.register(reg("b", 0, "", &[]), t0).is_err());
        assert!(table
            .register(reg("b", 0, "a:1", &[topic("", 1)]), t0)
            .is_err());
        let long = "x".repeat(NAME_BYTES_MAX + 1);
        assert!(table.register(reg(&long, 0, "a:1", &[]), t0).is_err());
        assert_eq!(table.broker_count(), 0);
    }

    #[test]
    fn a_closed_connection_drops_only_the_brokers_it_still_speaks_for() {
        let t0 = Instant::now();
        let mut table = RouteTable::new(EXPIRY);
        let a = reg("broker-a", 0, "a:1", &[topic("T", 1)]);
        let b = reg("broker-b", 0, "b:1", &[topic("T", 1)]);
        let (key_a, key_b) = (a.key.clone(), b.key.clone());
        let (old, new) = (ConnectionId(1), ConnectionId(2));
        table.register(a.clone(), t0).unwrap();
        table.register(b, t0).unwrap();
        assert!(table.bind_connection(&key_a, old));
        assert!(table.bind_connection(&key_b, old));
        // broker-a came back over a new connection (a restart): it belongs to that one now,
        // also through a re-registration that changes nothing.
        table.register(a, t0).unwrap();
        assert!(table.bind_connection(&key_a, new));
        assert!(
            table.connection_closed(&key_b, old),
            "broker-b is dropped at once"
        );
        assert!(
            !table.connection_closed(&key_a, old),
            "broker-a is not the old one's"
        );
        let route = table.route("T", t0).unwrap();
        let names: Vec<&str> = route
            .brokers
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, ["broker-a"]);
        // Another cluster's key binds nothing.
        let mut other = key_a.clone();
        other.cluster = "Other".into();
        assert!(!table.bind_connection(&other, old));
        assert!(!table.connection_closed(&other, new));
        assert!(table.connection_closed(&key_a, new));
        assert!(table.route("T", t0).is_none());
        assert!(!table.bind_connection(&key_a, new), "gone: nothing to bind");
    }
}
