//! What producers, consumers and the admin share: the connection pool, the NameServer client,
//! the route cache and its refresher, and the requests every role makes of brokers.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol::{
    BrokerStatus, Command, CommitOffset, GroupMembers, GroupQueue, ResponseCode, StageHistogram,
    TopicConfig,
};

use crate::error::{ClientError, Result};
use crate::model::{MessageQueue, QueueOffset};
use crate::namesrv::{parse_namesrv_list, NameServerClient};
use crate::remoting::{expect_success, unexpected, ConnectionPool, PoolConfig, RequestServer};
use crate::route::{QueueTarget, RouteCache, RouteRefresher, TopicRoute};

/// Settings common to every client role.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// NameServer addresses, tried in turn.
    pub namesrv_addrs: Vec<String>,
    /// Timeout of NameServer and admin requests. Default 3000 ms.
    pub request_timeout_ms: u64,
    /// Period of the background route refresh. Default 30000 ms.
    pub route_refresh_interval_ms: u64,
    pub pool: PoolConfig,
}

impl ClientConfig {
    /// `namesrv` is a `;`-separated list such as `"127.0.0.1:9876;127.0.0.1:9877"`.
    pub fn new(namesrv: &str) -> Result<ClientConfig> {
        Ok(ClientConfig {
            namesrv_addrs: parse_namesrv_list(namesrv)?,
            request_timeout_ms: 3000,
            route_refresh_interval_ms: 30_000,
            pool: PoolConfig::default(),
        })
    }

    /// Speaks TLS to the NameServers and the brokers, trusting as `settings` say; an
    /// unreadable file or bad PEM is an error here, naming the file.
    pub fn with_tls(mut self, settings: &tls::ClientSettings) -> Result<ClientConfig> {
        let config =
            tls::client_config(settings).map_err(|e| ClientError::Config(e.to_string()))?;
        self.pool.tls = Some(config);
        Ok(self)
    }

    fn validate(&self) -> Result<()> {
        if self.namesrv_addrs.is_empty() {
            return Err(ClientError::Config("no NameServer address".into()));
        }
        if self.request_timeout_ms == 0 {
            return Err(ClientError::Config("request timeout must be > 0 ms".into()));
        }
        if self.route_refresh_interval_ms < 100 {
            return Err(ClientError::Config(
                "route refresh interval must be >= 100 ms".into(),
            ));
        }
        if self.pool.inflight_max == 0 {
            return Err(ClientError::Config("in-flight window must be >= 1".into()));
        }
        Ok(())
    }
}

pub(crate) struct Instance {
    pub config: ClientConfig,
    pub pool: Arc<ConnectionPool>,
    pub routes: Arc<RouteCache>,
    refresher: RouteRefresher,
    /// This host's address as the brokers see it (best effort), for born hosts and ids.
    pub local_ip: Ipv4Addr,
    /// What this client tells a broker that asks what it is doing.
    running: Arc<Mutex<Running>>,
    /// The broker id each queue is read from, as its broker last suggested (absent: the
    /// master): a consumer far behind reads from a slave (`slave_read_enable`).
    read_from: Mutex<HashMap<MessageQueue, u64>>,
    /// Requests of request-reply waiting for their reply, by correlation id.
    pub replies: Arc<crate::reply::ReplyWaiters>,
    /// Answers the broker's transaction checks (a transaction producer sets it).
    pub checker: Arc<std::sync::RwLock<Option<TransactionChecker>>>,
}

/// What answers a broker's check of an undecided transaction.
pub(crate) type TransactionChecker =
    Arc<dyn Fn(&protocol::CheckTransaction) -> protocol::TransactionState + Send + Sync>;

/// The consumer groups this client heartbeats, with their topics, and its client id.
#[derive(Default)]
struct Running {
    client_id: String,
    groups: BTreeMap<String, Vec<String>>,
}

impl Running {
    fn info(&self) -> protocol::ClientRunningInfo {
        protocol::ClientRunningInfo {
            client_id: self.client_id.clone(),
            groups: self
                .groups
                .iter()
                .map(|(group, topics)| protocol::GroupRunningInfo {
                    group: group.clone(),
                    topics: topics.clone(),
                })
                .collect(),
        }
    }
}

fn lock_running(m: &Mutex<Running>) -> std::sync::MutexGuard<'_, Running> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Instance {
    pub fn start(config: ClientConfig) -> Result<Arc<Instance>> {
        config.validate()?;
        // The requests a broker may send on this client's connections, answered from what
        // the client holds.
        let running: Arc<Mutex<Running>> = Arc::default();
        let answers = Arc::clone(&running);
        let replies: Arc<crate::reply::ReplyWaiters> = Arc::default();
        let waiting = Arc::clone(&replies);
        let checker: Arc<std::sync::RwLock<Option<TransactionChecker>>> = Arc::default();
        let check_with = Arc::clone(&checker);
        let server: RequestServer =
            Arc::new(move |frame: &protocol::Frame| match &frame.header.command {
                Command::ClientRunningInfo => Some(Command::ClientRunningInfoResult(
                    lock_running(&answers).info(),
                )),
                Command::PushReply => {
                    waiting.deliver(&frame.body);
                    Some(Command::Empty)
                }
                Command::CheckTransaction(c) => {
                    let f = check_with
                        .read()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()?;
                    Some(Command::TransactionStateResult(f(c)))
                }
                _ => None,
            });
        let pool = Arc::new(ConnectionPool::with_server(config.pool.clone(), server));
        let namesrv = Arc::new(NameServerClient::new(
            config.namesrv_addrs.clone(),
            Arc::clone(&pool),
            Duration::from_millis(config.request_timeout_ms),
        ));
        let routes = Arc::new(RouteCache::new(namesrv));
        let refresher = RouteRefresher::start(
            Arc::clone(&routes),
            Duration::from_millis(config.route_refresh_interval_ms),
        )?;
        let local_ip = local_ipv4(&config.namesrv_addrs);
        Ok(Arc::new(Instance {
            config,
            pool,
            routes,
            refresher,
            local_ip,
            running,
            read_from: Mutex::default(),
            replies,
            checker,
        }))
    }

    pub fn shutdown(&self) {
        self.refresher.stop();
        self.pool.shutdown();
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// Sends one request to a broker address and checks for `Success`.
    pub fn broker_request(&self, addr: &str, command: Command) -> Result<Command> {
        let frame = self
            .pool
            .get(addr)?
            .request(command, &[], self.request_timeout())?;
        Ok(expect_success(addr, frame)?.header.command)
    }

    /// Sends one request to a broker address and returns the whole successful frame (for
    /// answers that carry records in the body).
    pub fn broker_request_frame(&self, addr: &str, command: Command) -> Result<protocol::Frame> {
        let frame = self
            .pool
            .get(addr)?
            .request(command, &[], self.request_timeout())?;
        expect_success(addr, frame)
    }

    /// The route's target for `queue`, refreshing the route once if the queue is unknown.
    pub fn queue_target(&self, queue: &MessageQueue) -> Result<QueueTarget> {
        let route = self.routes.get(&queue.topic)?;
        if let Some(t) = route.target(queue) {
            return Ok(t);
        }
        self.routes
            .refresh(&queue.topic)?
            .target(queue)
            .ok_or_else(|| ClientError::NoRoute {
                topic: queue.topic.clone(),
            })
    }

    /// Where to read `queue`: its broker's suggestion when it named a slave the route has
    /// (that slave's address; it serves the shard from whichever core hosts it), else the
    /// usual target.
    pub fn read_target(&self, queue: &MessageQueue) -> Result<QueueTarget> {
        let target = self.queue_target(queue)?;
        let id = match self.read_from.lock() {
            Ok(m) => m.get(queue).copied(),
            Err(p) => p.into_inner().get(queue).copied(),
        };
        let Some(id) = id.filter(|&id| id != 0) else {
            return Ok(target);
        };
        let route = self.routes.get(&queue.topic)?;
        let slave = route
            .data
            .brokers
            .iter()
            .find(|b| b.broker_name == queue.broker_name)
            .and_then(|b| b.addrs.iter().find(|(i, _)| *i == id))
            .map(|(_, a)| a.clone());
        Ok(match slave {
            Some(addr) => QueueTarget { addr, ..target },
            None => target,
        })
    }

    /// A broker suggested reading `queue` from broker id `id` next (0: the master).
    pub fn suggest_reader(&self, queue: &MessageQueue, id: u64) {
        let mut m = self
            .read_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if id == 0 {
            m.remove(queue);
        } else {
            m.insert(queue.clone(), id);
        }
    }

    pub fn fresh_route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.routes.refresh(topic)
    }

    /// A request to a broker of `topic` failed with `e`: when the connection failed (refused,
    /// reset, closed, timed out), the broker may have died or come back on other ports, so
    /// the route is fetched again at once (at most once per topic per
    /// `FAILURE_REFRESH_INTERVAL`) rather than at the next periodic refresh.
    pub fn note_failure(&self, topic: &str, e: &ClientError) {
        if e.is_connection_failure() {
            self.routes.refresh_after_failure(topic);
        }
    }

    /// One request about `queue` to the broker serving it: that broker's address and its
    /// successful answer. A failed connection refreshes the route (see `note_failure`).
    fn queue_request(&self, queue: &MessageQueue, command: Command) -> Result<(String, Command)> {
        let target = self.queue_target(queue)?;
        match self.broker_request(&target.addr, command) {
            Ok(answer) => Ok((target.addr, answer)),
            Err(e) => {
                self.note_failure(&queue.topic, &e);
                Err(e)
            }
        }
    }

    /// (min, max) offsets of a queue: max is the offset the next message will get.
    pub fn queue_offsets(&self, queue: &MessageQueue) -> Result<(QueueOffset, QueueOffset)> {
        let cmd = Command::GetQueueOffsets {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        };
        match self.queue_request(queue, cmd)? {
            (
                _,
                Command::QueueOffsets {
                    min_offset,
                    max_offset,
                },
            ) => Ok((QueueOffset(min_offset), QueueOffset(max_offset))),
            (addr, other) => Err(unexpected(&addr, "queue offsets", &other)),
        }
    }

    /// The offset of the first message stored at or after `timestamp_ms`.
    pub fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<QueueOffset> {
        let cmd = Command::SearchOffsetByTime {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            timestamp_ms,
        };
        match self.queue_request(queue, cmd)? {
            (_, Command::Offset(o)) => Ok(QueueOffset(o)),
            (addr, other) => Err(unexpected(&addr, "offset", &other)),
        }
    }

    pub fn create_topic(&self, addr: &str, config: &TopicConfig) -> Result<()> {
        self.broker_request(addr, Command::CreateTopic(config.clone()))?;
        Ok(())
    }

    pub fn broker_status(&self, addr: &str) -> Result<BrokerStatus> {
        match self.broker_request(addr, Command::BrokerStatus)? {
            Command::BrokerStatusResult(s) => Ok(s),
            other => Err(unexpected(addr, "broker status", &other)),
        }
    }

    /// What client `client_id` says it is doing: the broker at `addr` asks it on the
    /// client's own connection.
    pub fn client_running_info(
        &self,
        addr: &str,
        client_id: &str,
    ) -> Result<protocol::ClientRunningInfo> {
        let cmd = Command::GetClientRunningInfo {
            client_id: client_id.to_owned(),
        };
        match self.broker_request(addr, cmd)? {
            Command::ClientRunningInfoResult(info) => Ok(info),
            other => Err(unexpected(addr, "client running info", &other)),
        }
    }

    pub fn send_stages(&self, addr: &str, reset: bool) -> Result<Vec<StageHistogram>> {
        match self.broker_request(addr, Command::SendStages { reset })? {
            Command::SendStagesResult(s) => Ok(s),
            other => Err(unexpected(addr, "send stages", &other)),
        }
    }
}

/// A group's committed offset of a queue and the number of resets it has seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GroupOffset {
    pub offset: Option<QueueOffset>,
    pub epoch: u64,
    /// When the offset last moved forward (ms since the epoch; 0 = unknown).
    pub last_commit_ms: i64,
    /// Messages per second over the last two commits that moved it.
    pub consume_tps: f64,
    /// Queue offsets the queue's readers stepped over (damaged records); queries only.
    pub skipped_records: u64,
}

impl Instance {
    /// The address of a broker's core 0, which keeps group membership.
    pub fn group_addrs(&self, topics: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in topics {
            let Ok(route) = self.routes.get(t) else {
                continue;
            };
            for b in &route.data.brokers {
                let addr = b
                    .core_addrs
                    .first()
                    .map(String::as_str)
                    .or_else(|| b.master_addr());
                if let Some(a) = addr {
                    if !out.iter().any(|o| o == a) {
                        out.push(a.to_owned());
                    }
                }
            }
        }
        out.sort();
        out
    }

    fn members(addr: &str, cmd: Command) -> Result<GroupMembers> {
        match cmd {
            Command::GroupMembers(m) => Ok(m),
            other => Err(unexpected(addr, "group members", &other)),
        }
    }

    pub fn heartbeat(&self, addr: &str, hb: protocol::ConsumerHeartbeat) -> Result<GroupMembers> {
        {
            let mut r = lock_running(&self.running);
            r.client_id.clone_from(&hb.client_id);
            r.groups.insert(hb.group.clone(), hb.topics.clone());
        }
        Self::members(
            addr,
            self.broker_request(addr, Command::ConsumerHeartbeat(hb))?,
        )
    }

    pub fn unregister_consumer(&self, addr: &str, group: &str, client_id: &str) -> Result<()> {
        lock_running(&self.running).groups.remove(group);
        let cmd = Command::UnregisterConsumer {
            group: group.to_owned(),
            client_id: client_id.to_owned(),
        };
        self.broker_request(addr, cmd).map(|_| ())
    }

    /// Long poll for a membership change; answered at once if `known_version` is stale.
    pub fn wait_group_change(
        &self,
        addr: &str,
        group: &str,
        known_version: u64,
        wait: Duration,
    ) -> Result<crate::remoting::ResponseFuture> {
        let cmd = Command::WaitGroupChange {
            group: group.to_owned(),
            known_version,
            timeout_ms: wait.as_millis() as u64,
        };
        self.pool
            .get(addr)?
            .send_request(cmd, &[], wait + self.request_timeout())
    }

    fn group_offset_of(addr: &str, cmd: Command) -> Result<GroupOffset> {
        match cmd {
            Command::ConsumerOffset {
                offset,
                epoch,
                last_commit_ms,
                consume_tps_milli,
                skipped_records,
            } => Ok(GroupOffset {
                offset: offset.map(QueueOffset),
                epoch,
                last_commit_ms,
                consume_tps: consume_tps_milli as f64 / 1000.0,
                skipped_records,
            }),
            other => Err(unexpected(addr, "consumer offset", &other)),
        }
    }

    fn group_queue(group: &str, queue: &MessageQueue) -> GroupQueue {
        GroupQueue {
            group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        }
    }

    pub fn query_group_offset(&self, group: &str, queue: &MessageQueue) -> Result<GroupOffset> {
        let cmd = Command::QueryConsumerOffset(Self::group_queue(group, queue));
        let (addr, answer) = self.queue_request(queue, cmd)?;
        Self::group_offset_of(&addr, answer)
    }

    pub fn commit_group_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: QueueOffset,
        epoch: u64,
        client_id: &str,
        release: bool,
    ) -> Result<GroupOffset> {
        let cmd = Command::CommitConsumerOffset(CommitOffset {
            queue: Self::group_queue(group, queue),
            offset: offset.0,
            epoch,
            client_id: client_id.to_owned(),
            release,
        });
        let (addr, answer) = self.queue_request(queue, cmd)?;
        Self::group_offset_of(&addr, answer)
    }

    pub fn reset_group_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: QueueOffset,
    ) -> Result<GroupOffset> {
        let cmd = Command::ResetConsumerOffset {
            queue: Self::group_queue(group, queue),
            offset: offset.0,
        };
        let (addr, answer) = self.queue_request(queue, cmd)?;
        Self::group_offset_of(&addr, answer)
    }

    /// Takes or renews the lease on a queue: false when another member holds it.
    pub fn lock_queue(
        &self,
        group: &str,
        queue: &MessageQueue,
        client_id: &str,
        lease_ms: u64,
    ) -> Result<bool> {
        let cmd = Command::LockQueue {
            queue: Self::group_queue(group, queue),
            client_id: client_id.to_owned(),
            lease_ms,
        };
        match self.queue_request(queue, cmd) {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(ResponseCode::QueueLocked) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The local IPv4 address used to reach the first NameServer (no packet is sent: connecting
/// a UDP socket only picks a route), or loopback if that fails.
fn local_ipv4(namesrv_addrs: &[String]) -> Ipv4Addr {
    let target = namesrv_addrs
        .first()
        .and_then(|a| a.to_socket_addrs().ok())
        .and_then(|mut it| it.find(SocketAddr::is_ipv4));
    let found = target.and_then(|t| {
        let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
        sock.connect(t).ok()?;
        match sock.local_addr().ok()? {
            SocketAddr::V4(a) if !a.ip().is_unspecified() => Some(*a.ip()),
            _ => None,
        }
    });
    found.unwrap_or(Ipv4Addr::LOCALHOST)
}
