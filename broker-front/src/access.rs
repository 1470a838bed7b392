//! The broker's front door for access control: every request, native or RocketMQ, is checked
//! here against one rule set (`acl_file`, RocketMQ ACL 1.0's `plain_acl.yml`, see the `acl`
//! crate) before any handler sees it. With `acl_enable` off (the default) nothing is checked.
//!
//! * **Who.** A RocketMQ request names its `AccessKey` and carries a `Signature` over its
//!   fields and body (the real clients' `AclClientRPCHook`): each request is verified. A native
//!   connection logs in once (`AuthChallenge` for a nonce, then `Login`) and every later
//!   request on it acts for that key; the peer's address decides the allow-lists either way.
//! * **What.** Each request is mapped to one or more [`Action`]s ([`native_actions`],
//!   [`remoting_actions`]): publishing needs the topic's PUB, pulling and offsets the topic's
//!   and the group's SUB, membership and locks the group's SUB, and whatever changes topics,
//!   groups, offsets of others or the broker's config needs an admin account. A request the
//!   map does not know is an admin one: a new request code is refused until it is placed.
//! * **Lookups.** A lookup by offset or id (`ViewByOffset`, VIEW_MESSAGE_BY_ID) names no
//!   topic: it passes the door as information, and the message it finds is served only if
//!   the account has SUB on the message's topic ([`Gate::check_lookup`], after the read;
//!   `acl_lookup_requires_sub`, on by default; RocketMQ checks nothing there). Lookups by
//!   key name their topic and are checked at the door like a pull.
//! * **Time.** A signed RocketMQ request that carries `SignedAtMs` (the workspace's own
//!   signers add it with a nonce) is taken only within `acl_signature_window_ms` of the
//!   broker's clock and only once ([`acl::fresh`]); one without is taken as before (real
//!   RocketMQ clients send none) unless `acl_signature_time_required`.
//! * **Reload.** Each core holds its own copy of the rules and reads the file again every
//!   [`POLL_INTERVAL`] on its own timer: no lock and no cross-core traffic on the data path.
//!   A changed file that does not parse keeps the rules in force (logged once by core 0).
//! * **ACL 2.0** (RocketMQ 5.3's users and policies, `acl::v2`): with
//!   `acl2_authentication_enable` or `acl2_authorization_enable` every request, remoting,
//!   gRPC and native, is checked against the broker's users and ACLs instead of the file:
//!   a RocketMQ request must be signed by an enabled user (AccessKey = user name, the
//!   password as secret key), a native connection must have logged in as one (the same
//!   challenge-response, keyed by the password), and with authorization the user's
//!   policies must allow what it asks ([`v2_needs`], RocketMQ's per-request resources and
//!   actions; a lookup by offset or id the found message's topic's Sub). Each core keeps the set it last read and takes
//!   the new one when the shared store's version moves (one atomic load per request).
//!   Refusals are logged on target `audit` as well.
//! * **Refusals are logged** (warn), with the peer, the account and the reason the client
//!   is given, at most [`REFUSAL_LOG_LINES`] lines per [`REFUSAL_LOG_INTERVAL`] per core;
//!   the next line says how many were refused unlogged meanwhile.

use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use acl::fresh::ReplayGuard;
use acl::v2::{self, AuthMetadata, Resource};
use acl::{Access, AclConfig, AclFile, Action, Denied};
use broker_base::auth::AuthStore;
use protocol::Command;
use remoting::codes::request;
use remoting::RemotingCommand;

use crate::client_conn::ClientConn;
use crate::config::BrokerConfig;
use crate::error::BrokerError;

/// How often each core reads the ACL file again.
pub use acl::POLL_INTERVAL;

/// Each core logs at most [`REFUSAL_LOG_LINES`] refusals per this interval (a client
/// retrying a refused request must not flood the log).
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);
pub const REFUSAL_LOG_LINES: u32 = 10;

/// One core's view of the rules: `None` with `acl_enable` off.
#[derive(Default)]
pub struct Gate {
    file: Option<RefCell<AclFile>>,
    /// The current interval of refusal lines: when it began and how many it logged; and
    /// how many refusals were not logged since the last line.
    log_window: Cell<Option<(Instant, u32)>>,
    unlogged: Cell<u64>,
    /// `acl_lookup_requires_sub`.
    lookup_requires_sub: bool,
    /// Every core's memory of the timed signatures taken (`None` with the ACL off).
    replay: Option<Arc<Mutex<ReplayGuard>>>,
    /// ACL 2.0, with `acl2_authentication_enable` or `acl2_authorization_enable`.
    v2: Option<V2Gate>,
}

/// ACL 2.0 as one core sees it: the broker's one store and the set this core last read.
struct V2Gate {
    authorization: bool,
    store: Arc<AuthStore>,
    cached: RefCell<(u64, Arc<AuthMetadata>)>,
    /// The resource the auth admin requests and unknown admin requests are checked on.
    cluster: Resource,
    replay: Arc<Mutex<ReplayGuard>>,
}

impl V2Gate {
    /// The current users and ACLs: the cached set unless the store's version moved.
    fn meta(&self) -> Arc<AuthMetadata> {
        let version = self.store.version();
        let mut cached = self.cached.borrow_mut();
        if cached.0 != version {
            *cached = (version, self.store.snapshot());
        }
        cached.1.clone()
    }
}

impl Gate {
    /// The gate of a core: the file is read (and must parse) with `acl_enable`. `replay` is
    /// the broker's one memory of taken signatures, shared by every core's gate.
    ///
    /// `auth` is the broker's ACL 2.0 store, checked with `acl2_authentication_enable` or
    /// `acl2_authorization_enable`.
    pub fn open(
        config: &BrokerConfig,
        replay: Arc<Mutex<ReplayGuard>>,
        auth: Arc<AuthStore>,
    ) -> Result<Gate, String> {
        let v2 =
            (config.acl2_authentication_enable || config.acl2_authorization_enable).then(|| {
                let meta = auth.snapshot();
                V2Gate {
                    authorization: config.acl2_authorization_enable,
                    cached: RefCell::new((auth.version(), meta)),
                    store: auth,
                    cluster: Resource::named(
                        v2::ResourceType::Cluster,
                        config.cluster_name.clone(),
                    ),
                    replay: replay.clone(),
                }
            });
        if !config.acl_enable {
            return Ok(Gate {
                lookup_requires_sub: config.acl_lookup_requires_sub,
                v2,
                ..Gate::default()
            });
        }
        let file = AclFile::open(&config.acl_file).map_err(|e| format!("acl_file: {e}"))?;
        Ok(Gate {
            file: Some(RefCell::new(file)),
            lookup_requires_sub: config.acl_lookup_requires_sub,
            replay: Some(replay),
            v2,
            ..Gate::default()
        })
    }

    pub fn enabled(&self) -> bool {
        self.file.is_some() || self.v2.is_some()
    }

    fn rules(&self) -> Option<Arc<AclConfig>> {
        self.file.as_ref().map(|f| f.borrow().rules().clone())
    }

    /// Reads the file again; `log` says what changed (one core logs for all).
    pub fn poll(&self, log: bool) {
        let Some(file) = &self.file else {
            return;
        };
        file.borrow_mut().poll_logged(log);
    }

    /// A native `Login` on `client` with the nonce it was last given.
    pub fn login(
        &self,
        client: &ClientConn,
        access_key: &str,
        signature: &str,
    ) -> Result<(), BrokerError> {
        if let Some(v2) = &self.v2 {
            let nonce = client.take_nonce().unwrap_or_default();
            v2.meta()
                .login(access_key, &nonce, signature)
                .map_err(denied)
                .inspect_err(|e| self.log_refusal(client, Some(access_key), "Login", e))?;
            client.set_access_key(access_key);
            return Ok(());
        }
        let Some(rules) = self.rules() else {
            // Nothing to check against: the login is taken as given, so that a client
            // configured with keys works against a broker with the ACL off.
            client.set_access_key(access_key);
            return Ok(());
        };
        let nonce = client.take_nonce().unwrap_or_default();
        rules
            .login(access_key, &nonce, signature)
            .map_err(denied)
            .inspect_err(|e| self.log_refusal(client, Some(access_key), "Login", e))?;
        client.set_access_key(access_key);
        Ok(())
    }

    /// Whether a gRPC call from `peer` may do `actions`: its `authorization` metadata (with
    /// the `x-mq-date-time` it signs) verifies and its account may do them, or `peer` is
    /// allow-listed. RocketMQ 5's SDKs sign the client's clock, which nothing checks for
    /// freshness (as RocketMQ's Proxy does not).
    pub fn check_grpc(
        &self,
        peer: &str,
        authorization: Option<&str>,
        date_time: Option<&str>,
        rpc: &str,
        actions: &[Action<'_>],
    ) -> Result<(), BrokerError> {
        if let Some(v2) = &self.v2 {
            let key = authorization
                .and_then(acl::sign::parse_grpc_authorization)
                .map(|a| a.access_key);
            let checked = (|| {
                let meta = v2.meta();
                let who = meta
                    .authenticate_grpc(authorization, date_time)
                    .map_err(denied)?;
                if v2.authorization {
                    let ip = peer
                        .parse::<std::net::SocketAddr>()
                        .map(|a| a.ip())
                        .map_err(|_| {
                            BrokerError::NoPermission(format!("peer {peer} has no IP address"))
                        })?;
                    let needs: Vec<Need> = actions
                        .iter()
                        .flat_map(|a| v2_needs(a, &v2.cluster))
                        .collect();
                    authorize(&meta, &who, &needs, ip)?;
                }
                Ok(())
            })();
            return checked.inspect_err(|e| self.log_refusal_of(peer, key, rpc, e));
        }
        let Some(rules) = self.rules() else {
            return Ok(());
        };
        let key = authorization
            .and_then(acl::sign::parse_grpc_authorization)
            .map(|a| a.access_key);
        let checked = (|| {
            let ip = peer
                .parse::<std::net::SocketAddr>()
                .map(|a| a.ip())
                .map_err(|_| BrokerError::NoPermission(format!("peer {peer} has no IP address")))?;
            let access = rules
                .access_grpc(ip, authorization, date_time)
                .map_err(denied)?;
            for action in actions {
                access.check(action).map_err(denied)?;
            }
            Ok(())
        })();
        checked.inspect_err(|e| self.log_refusal_of(peer, key, rpc, e))
    }

    /// Logs a refusal (rate limited, see [`REFUSAL_LOG_INTERVAL`]).
    fn log_refusal(&self, client: &ClientConn, key: Option<&str>, request: &str, e: &BrokerError) {
        self.log_refusal_of(&client.peer, key, request, e)
    }

    fn log_refusal_of(&self, peer: &str, key: Option<&str>, request: &str, e: &BrokerError) {
        if self.v2.is_some() {
            // ACL 2.0's audit trail: every denial, not rate limited (a log pipeline that
            // keeps the audit target keeps them all).
            tracing::warn!(
                target: "audit",
                %peer,
                user = key.unwrap_or("-"),
                request,
                "ACL 2.0 refused a request: {e}"
            );
        }
        let now = Instant::now();
        let window = match self.log_window.get() {
            Some((began, n)) if now.duration_since(began) < REFUSAL_LOG_INTERVAL => (began, n),
            _ => (now, 0),
        };
        if window.1 >= REFUSAL_LOG_LINES {
            self.unlogged.set(self.unlogged.get() + 1);
            return;
        }
        self.log_window.set(Some((window.0, window.1 + 1)));
        let more = self.unlogged.replace(0);
        tracing::warn!(
            %peer,
            access_key = key.unwrap_or("-"),
            request,
            unlogged_since_last_line = more,
            "ACL refused a request: {e}"
        );
    }

    /// Whether the native request `command` on `client` may go on.
    pub fn check_native(&self, client: &ClientConn, command: &Command) -> Result<(), BrokerError> {
        // Logging in is how a connection gets past the rest.
        if matches!(command, Command::AuthChallenge | Command::Login { .. }) {
            return Ok(());
        }
        if let Some(v2) = &self.v2 {
            let key = client.access_key();
            let checked = (|| {
                let name = key.as_deref().ok_or_else(|| {
                    BrokerError::NoPermission(format!(
                        "no user: {} must log in (ACL 2.0)",
                        client.peer
                    ))
                })?;
                let meta = v2.meta();
                let who = meta.logged_in(name).map_err(denied)?;
                if v2.authorization {
                    let needs: Vec<Need> = native_actions(command)
                        .iter()
                        .flat_map(|a| v2_needs(a, &v2.cluster))
                        .collect();
                    authorize(&meta, &who, &needs, peer_ip(client)?)?;
                }
                Ok(())
            })();
            return checked
                .inspect_err(|e| self.log_refusal(client, key.as_deref(), command.name(), e));
        }
        let Some(rules) = self.rules() else {
            return Ok(());
        };
        let key = client.access_key();
        let checked = (|| {
            let peer = peer_ip(client)?;
            let access = rules.access(peer, key.as_deref()).map_err(denied)?;
            for action in native_actions(command) {
                access.check(&action).map_err(denied)?;
            }
            Ok(())
        })();
        checked.inspect_err(|e| self.log_refusal(client, key.as_deref(), command.name(), e))
    }

    /// Whether the RocketMQ request `req` (with `body`) on `client` may go on: its signature
    /// verifies, is fresh by `clock` (the broker's), and its account may do what it asks.
    pub fn check_remoting(
        &self,
        client: &ClientConn,
        req: &RemotingCommand,
        body: &[u8],
        clock: &shard::Clock,
    ) -> Result<(), BrokerError> {
        if let Some(v2) = &self.v2 {
            return self.check_remoting_v2(v2, client, req, body, clock);
        }
        let Some(rules) = self.rules() else {
            return Ok(());
        };
        let checked = (|| {
            let peer = peer_ip(client)?;
            let fields = req.ext_fields.iter();
            let access = rules.access_signed(peer, fields, body).map_err(denied)?;
            // A request that passed by its signature (not by an allow-list) must be fresh.
            if let (Access::Account(_), Some(replay)) = (&access, &self.replay) {
                check_fresh(replay, req, clock)?;
            }
            let wanted = remoting_actions(req, body)?;
            for action in wanted.actions() {
                access.check(&action).map_err(denied)?;
            }
            Ok(())
        })();
        checked.inspect_err(|e| {
            let key = req.ext_fields.get("AccessKey");
            self.log_refusal(client, key, &format!("code {}", req.code), e)
        })
    }
}

/// A signed RocketMQ request is taken once, and only within the signature window of the
/// broker's clock when it carries its time (`acl::fresh`).
fn check_fresh(
    replay: &Mutex<ReplayGuard>,
    req: &RemotingCommand,
    clock: &shard::Clock,
) -> Result<(), BrokerError> {
    let signature = req.ext(acl::sign::SIGNATURE).unwrap_or("");
    replay
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .check(
            req.ext(acl::fresh::SIGNED_AT_MS),
            signature,
            u64::try_from(clock.wall_ms()).unwrap_or(0),
        )
        .map_err(denied)
}

impl Gate {
    /// [`Gate::check_remoting`] under ACL 2.0.
    fn check_remoting_v2(
        &self,
        v2: &V2Gate,
        client: &ClientConn,
        req: &RemotingCommand,
        body: &[u8],
        clock: &shard::Clock,
    ) -> Result<(), BrokerError> {
        let checked = (|| {
            let meta = v2.meta();
            let fields = req.ext_fields.iter();
            let who = meta.authenticate_remoting(fields, body).map_err(denied)?;
            check_fresh(&v2.replay, req, clock)?;
            if v2.authorization {
                let peer = peer_ip(client)?;
                let needs = v2_remoting_needs(req, body, &v2.cluster)?;
                authorize(&meta, &who, &needs, peer)?;
            }
            Ok(())
        })();
        checked.inspect_err(|e| {
            let key = req.ext_fields.get("AccessKey");
            self.log_refusal(client, key, &format!("code {}", req.code), e)
        })
    }

    /// Whether the message of `topic`, found by a lookup by offset or id (`request` names
    /// it), may be served to the account `access_key` asking on `client`: it needs SUB on
    /// the topic (with `acl_lookup_requires_sub`; the signature, if any, was verified at
    /// the door).
    pub fn check_lookup(
        &self,
        client: &ClientConn,
        access_key: Option<&str>,
        topic: &str,
        request: &str,
    ) -> Result<(), BrokerError> {
        if !self.lookup_requires_sub {
            return Ok(());
        }
        if let Some(v2) = self.v2.as_ref().filter(|v2| v2.authorization) {
            // The signature or login was checked at the door; the user's policies decide.
            let checked = (|| {
                let meta = v2.meta();
                let who = meta.logged_in(access_key.unwrap_or("")).map_err(denied)?;
                let needs = [topic_need(topic, &[v2::Action::Sub])];
                authorize(&meta, &who, &needs, peer_ip(client)?)
            })();
            return checked.inspect_err(|e| self.log_refusal(client, access_key, request, e));
        }
        let Some(rules) = self.rules() else {
            return Ok(());
        };
        let checked = (|| {
            let peer = peer_ip(client)?;
            let access = rules.access(peer, access_key).map_err(denied)?;
            access
                .check(&Action::Subscribe { topic, group: None })
                .map_err(denied)
        })();
        checked.inspect_err(|e| self.log_refusal(client, access_key, request, e))
    }
}

fn denied(d: Denied) -> BrokerError {
    BrokerError::NoPermission(d.0)
}

fn peer_ip(client: &ClientConn) -> Result<IpAddr, BrokerError> {
    client.peer_ip.ok_or_else(|| {
        BrokerError::NoPermission(format!(
            "the peer address `{}` is not an IP address",
            client.peer
        ))
    })
}

/// What a native request asks to do. Answers and broker-to-client requests never reach the
/// front door; NameServer requests sent here are refused as admin ones.
pub fn native_actions(command: &Command) -> Vec<Action<'_>> {
    use Command as C;
    let one = |a| vec![a];
    match command {
        C::Send(r) | C::SendReply(r) => one(Action::Publish { topic: &r.topic }),
        C::Pull(p) | C::PullSql92 { pull: p, .. } => one(Action::Subscribe {
            topic: &p.topic,
            group: Some(&p.consumer_group),
        }),
        C::QueryByKey(q) => one(Action::Subscribe {
            topic: &q.topic,
            group: None,
        }),
        C::QueryConsumerOffset(q) => one(Action::Subscribe {
            topic: &q.topic,
            group: Some(&q.group),
        }),
        C::CommitConsumerOffset(c) => one(Action::Subscribe {
            topic: &c.queue.topic,
            group: Some(&c.queue.group),
        }),
        C::LockQueue { queue, .. } => one(Action::Subscribe {
            topic: &queue.topic,
            group: Some(&queue.group),
        }),
        C::ConsumerHeartbeat(hb) => std::iter::once(Action::Group { group: &hb.group })
            .chain(hb.topics.iter().map(|t| Action::Subscribe {
                topic: t,
                group: Some(&hb.group),
            }))
            .collect(),
        C::UnregisterConsumer { group, .. } | C::WaitGroupChange { group, .. } => {
            one(Action::Group { group })
        }
        C::GetQueueOffsets { .. }
        | C::SearchOffsetByTime { .. }
        | C::BrokerStatus
        | C::ViewByOffset { .. }
        | C::SendStages { .. }
        | C::GetTopicConfigs
        | C::IdentifyClient { .. }
        | C::ProducerHeartbeat { .. }
        | C::EndTransaction(_)
        | C::GetClientRunningInfo { .. } => one(Action::Info),
        C::CreateTopic(_) => one(Action::Admin {
            what: "create or update topics",
        }),
        C::ResetConsumerOffset { .. } => one(Action::Admin {
            what: "reset consumer offsets",
        }),
        other => one(Action::Admin { what: other.name() }),
    }
}

/// The actions of one RocketMQ request; its topics and groups are borrowed from the request
/// or, for the requests that carry them in a JSON body, owned.
pub struct RemotingActions<'a> {
    borrowed: Vec<Action<'a>>,
    /// (topic, group) pairs to subscribe and groups to act for, from a body.
    subscribe: Vec<(String, Option<String>)>,
    groups: Vec<String>,
}

impl RemotingActions<'_> {
    fn actions(&self) -> impl Iterator<Item = Action<'_>> {
        self.borrowed
            .iter()
            .copied()
            .chain(self.groups.iter().map(|g| Action::Group { group: g }))
            .chain(self.subscribe.iter().map(|(t, g)| Action::Subscribe {
                topic: t,
                group: g.as_deref(),
            }))
    }
}

/// What a RocketMQ request asks to do (the codes RocketMQ's `PlainAccessResource` checks, and
/// corvus's admin codes; an unknown code is an admin one).
pub fn remoting_actions<'a>(
    req: &'a RemotingCommand,
    body: &[u8],
) -> Result<RemotingActions<'a>, BrokerError> {
    let mut out = RemotingActions {
        borrowed: Vec::new(),
        subscribe: Vec::new(),
        groups: Vec::new(),
    };
    let field = |names: &[&str]| -> &'a str { names.iter().find_map(|n| req.ext(n)).unwrap_or("") };
    let group_of =
        |names: &[&str]| -> Option<&'a str> { Some(field(names)).filter(|g| !g.is_empty()) };
    let a = &mut out.borrowed;
    match req.code {
        request::SEND_MESSAGE
        | request::SEND_MESSAGE_V2
        | request::SEND_BATCH_MESSAGE
        | request::SEND_REPLY_MESSAGE
        | request::SEND_REPLY_MESSAGE_V2
        | request::RECALL_MESSAGE => a.push(Action::Publish {
            topic: field(&["topic", "b"]),
        }),
        request::PULL_MESSAGE
        | request::LITE_PULL_MESSAGE
        | request::QUERY_CONSUMER_OFFSET
        | request::UPDATE_CONSUMER_OFFSET => a.push(Action::Subscribe {
            topic: field(&["topic"]),
            group: Some(field(&["consumerGroup"])),
        }),
        // RocketMQ 5's POP consumers: reading the topic for the group.
        request::POP_MESSAGE
        | request::PEEK_MESSAGE
        | request::ACK_MESSAGE
        | request::CHANGE_MESSAGE_INVISIBLETIME
        | request::NOTIFICATION
        | request::POLLING_INFO
        | request::POP_LITE_MESSAGE
        | request::ACK_LITE_MESSAGE => a.push(Action::Subscribe {
            topic: field(&["topic"]),
            group: Some(field(&["consumerGroup"])),
        }),
        // A lite subscription hands nothing out (the lite pops that follow need Sub): any
        // signed user.
        request::LITE_SUBSCRIPTION_CTL => a.push(Action::Info),
        // RocketMQ 5.5's lite admin reads (its GET on a topic or group, as GET_CONSUME_STATS
        // here): any signed user. TRIGGER_LITE_DISPATCH is RocketMQ's UPDATE of the group,
        // which these rules cannot name: an admin's, below.
        request::GET_BROKER_LITE_INFO
        | request::GET_PARENT_TOPIC_INFO
        | request::GET_LITE_TOPIC_INFO
        | request::GET_LITE_CLIENT_INFO
        | request::GET_LITE_GROUP_INFO => a.push(Action::Info),
        request::QUERY_MESSAGE => a.push(Action::Subscribe {
            topic: field(&["topic"]),
            group: None,
        }),
        request::CONSUMER_SEND_MSG_BACK => a.push(Action::Group {
            group: field(&["group"]),
        }),
        request::GET_CONSUMER_LIST_BY_GROUP | request::GET_CONSUMER_RUNNING_INFO => {
            a.push(Action::Group {
                group: field(&["consumerGroup"]),
            })
        }
        request::UNREGISTER_CLIENT => match group_of(&["consumerGroup"]) {
            Some(group) => a.push(Action::Group { group }),
            None => a.push(Action::Info),
        },
        request::HEART_BEAT => {
            let hb: remoting::body::HeartbeatData = crate::rocketmq::json_body(body)?;
            for c in hb.consumer_data_set {
                for s in &c.subscription_data_set {
                    out.subscribe
                        .push((s.topic.clone(), Some(c.group_name.clone())));
                }
                out.groups.push(c.group_name);
            }
            out.borrowed.push(Action::Info);
        }
        request::QUERY_ASSIGNMENT => {
            #[derive(serde::Deserialize, Default)]
            #[serde(rename_all = "camelCase", default)]
            struct Asked {
                topic: String,
                consumer_group: String,
            }
            let q: Asked = crate::rocketmq::json_body(body)?;
            out.subscribe.push((q.topic, Some(q.consumer_group)));
        }
        request::LOCK_BATCH_MQ | request::UNLOCK_BATCH_MQ => {
            // Both bodies have the same shape where it matters: a group and its queues.
            let b: remoting::body::LockBatchRequestBody = crate::rocketmq::json_body(body)?;
            for mq in b.mq_set {
                out.subscribe
                    .push((mq.topic, Some(b.consumer_group.clone())));
            }
            out.groups.push(b.consumer_group);
        }
        request::CHECK_CLIENT_CONFIG
        | request::END_TRANSACTION
        | request::GET_MAX_OFFSET
        | request::GET_MIN_OFFSET
        | request::SEARCH_OFFSET_BY_TIMESTAMP
        | request::VIEW_MESSAGE_BY_ID
        | request::GET_BROKER_RUNTIME_INFO
        | request::GET_BROKER_CONFIG
        | request::GET_TOPIC_STATS_INFO
        | request::GET_CONSUME_STATS
        | request::GET_CONSUMER_CONNECTION_LIST
        | request::GET_PRODUCER_CONNECTION_LIST
        | request::GET_ALL_TOPIC_CONFIG
        | request::QUERY_TOPIC_CONSUME_BY_WHO
        | request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        | request::VIEW_BROKER_STATS_DATA
        | request::GET_ALL_PRODUCER_INFO
        | request::GET_SYSTEM_TOPIC_LIST_FROM_BROKER => a.push(Action::Info),
        code => a.push(Action::Admin {
            what: request::name(code).unwrap_or("use an unknown request code"),
        }),
    }
    Ok(out)
}

/// One thing an ACL 2.0 request needs: any of `actions` on `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub resource: Resource,
    pub actions: &'static [v2::Action],
}

fn need(resource: Resource, actions: &'static [v2::Action]) -> Need {
    Need { resource, actions }
}

/// A topic's need: a retry topic `%RETRY%g` is group g's SUB (RocketMQ's rule).
fn topic_need(topic: &str, action: &'static [v2::Action]) -> Need {
    match topic.strip_prefix(acl::RETRY_TOPIC_PREFIX) {
        Some(group) => need(Resource::group(group), &[v2::Action::Sub]),
        None => need(Resource::topic(topic), action),
    }
}

/// What ACL 2.0 asks for what a request does: publishing is the topic's Pub; reading is
/// the topic's Sub and the group's Sub; acting for a group is its Sub; information any
/// signed user may have; anything else (an admin request) the cluster's Update.
pub fn v2_needs(action: &Action<'_>, cluster: &Resource) -> Vec<Need> {
    use v2::Action as A;
    match *action {
        Action::Publish { topic } => vec![topic_need(topic, &[A::Pub])],
        Action::Subscribe { topic, group } => {
            let mut v = vec![topic_need(topic, &[A::Sub])];
            if let Some(g) = group.filter(|g| !g.is_empty()) {
                v.push(need(Resource::group(g), &[A::Sub]));
            }
            v
        }
        Action::Group { group } => vec![need(Resource::group(group), &[A::Sub])],
        Action::Info => Vec::new(),
        Action::Route { topic } => vec![topic_need(topic, &[A::Pub, A::Sub])],
        Action::Admin { .. } => vec![need(cluster.clone(), &[A::Update])],
    }
}

/// What a RocketMQ request needs under ACL 2.0: RocketMQ's resources and actions for the
/// topic, group and auth admin requests, the data requests as [`v2_needs`] maps
/// [`remoting_actions`].
pub fn v2_remoting_needs(
    req: &RemotingCommand,
    body: &[u8],
    cluster: &Resource,
) -> Result<Vec<Need>, BrokerError> {
    use v2::Action as A;
    let field = |name: &str| req.ext(name).unwrap_or("").to_owned();
    Ok(match req.code {
        request::UPDATE_AND_CREATE_TOPIC => {
            vec![need(
                Resource::topic(field("topic")),
                &[A::Create, A::Update],
            )]
        }
        request::DELETE_TOPIC_IN_BROKER => {
            vec![need(Resource::topic(field("topic")), &[A::Delete])]
        }
        request::GET_TOPIC_CONFIG | request::GET_TOPIC_STATS_INFO => {
            vec![need(Resource::topic(field("topic")), &[A::Get])]
        }
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
            let cfg: remoting::body::SubscriptionGroupConfig = crate::rocketmq::json_body(body)?;
            vec![need(
                Resource::group(cfg.group_name),
                &[A::Create, A::Update],
            )]
        }
        request::DELETE_SUBSCRIPTIONGROUP => {
            vec![need(Resource::group(field("groupName")), &[A::Delete])]
        }
        request::GET_SUBSCRIPTIONGROUP_CONFIG => {
            vec![need(Resource::group(field("group")), &[A::Get])]
        }
        // A transaction's end is its topic's Pub (RocketMQ 5's header names the topic).
        request::END_TRANSACTION => match req.ext("topic").filter(|t| !t.is_empty()) {
            Some(topic) => vec![topic_need(topic, &[A::Pub])],
            None => Vec::new(),
        },
        request::AUTH_CREATE_USER
        | request::AUTH_UPDATE_USER
        | request::AUTH_DELETE_USER
        | request::AUTH_CREATE_ACL
        | request::AUTH_UPDATE_ACL
        | request::AUTH_DELETE_ACL => vec![need(cluster.clone(), &[A::Update])],
        request::AUTH_GET_USER
        | request::AUTH_LIST_USER
        | request::AUTH_GET_ACL
        | request::AUTH_LIST_ACL => vec![need(cluster.clone(), &[A::Get])],
        _ => remoting_actions(req, body)?
            .actions()
            .flat_map(|a| v2_needs(&a, cluster))
            .collect(),
    })
}

/// Whether the user `who` may have every one of `needs`, calling from `peer`.
fn authorize(
    meta: &AuthMetadata,
    who: &v2::Subject,
    needs: &[Need],
    peer: IpAddr,
) -> Result<(), BrokerError> {
    if who.is_super {
        return Ok(());
    }
    for n in needs {
        meta.authorize(&who.username, &n.resource, n.actions, peer)
            .map_err(denied)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use acl::v2::Action as A;

    fn req(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        let mut r = RemotingCommand::request(code, 1);
        for (k, v) in fields {
            r.ext_fields.insert((*k).into(), (*v).into());
        }
        r
    }

    /// (resource, actions) of each need, as text.
    fn needs(code: i32, fields: &[(&str, &str)], body: &[u8]) -> Vec<(String, Vec<&'static str>)> {
        let cluster = Resource::named(v2::ResourceType::Cluster, "DefaultCluster");
        v2_remoting_needs(&req(code, fields), body, &cluster)
            .unwrap()
            .into_iter()
            .map(|n| {
                (
                    n.resource.to_string(),
                    n.actions.iter().map(|a| a.name()).collect(),
                )
            })
            .collect()
    }

    fn n(resource: &str, actions: &[&'static str]) -> (String, Vec<&'static str>) {
        (resource.to_owned(), actions.to_vec())
    }

    #[test]
    fn requests_need_rocketmqs_resources_and_actions() {
        let tg = [("topic", "Orders"), ("consumerGroup", "g1")];
        assert_eq!(
            needs(request::SEND_MESSAGE, &[("topic", "Orders")], b""),
            [n("Topic:Orders", &["Pub"])]
        );
        // A send-back's retry topic is its group's.
        assert_eq!(
            needs(request::SEND_MESSAGE_V2, &[("b", "%RETRY%g1")], b""),
            [n("Group:g1", &["Sub"])]
        );
        for code in [
            request::PULL_MESSAGE,
            request::POP_MESSAGE,
            request::ACK_MESSAGE,
            request::CHANGE_MESSAGE_INVISIBLETIME,
            request::UPDATE_CONSUMER_OFFSET,
        ] {
            assert_eq!(
                needs(code, &tg, b""),
                [n("Topic:Orders", &["Sub"]), n("Group:g1", &["Sub"])],
                "code {code}"
            );
        }
        assert_eq!(
            needs(request::UPDATE_AND_CREATE_TOPIC, &[("topic", "T")], b""),
            [n("Topic:T", &["Create", "Update"])]
        );
        assert_eq!(
            needs(
                request::DELETE_SUBSCRIPTIONGROUP,
                &[("groupName", "g")],
                b""
            ),
            [n("Group:g", &["Delete"])]
        );
        assert_eq!(
            needs(
                request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                &[],
                br#"{"groupName":"g2"}"#
            ),
            [n("Group:g2", &["Create", "Update"])]
        );
        assert_eq!(
            needs(request::AUTH_CREATE_USER, &[("username", "u")], b""),
            [n("Cluster:DefaultCluster", &["Update"])]
        );
        assert_eq!(
            needs(request::AUTH_LIST_ACL, &[], b""),
            [n("Cluster:DefaultCluster", &["Get"])]
        );
        assert_eq!(
            needs(request::END_TRANSACTION, &[("topic", "Orders")], b""),
            [n("Topic:Orders", &["Pub"])]
        );
        assert!(needs(request::GET_BROKER_RUNTIME_INFO, &[], b"").is_empty());
        // An admin request the map does not name: the cluster's Update.
        assert_eq!(
            needs(request::UPDATE_BROKER_CONFIG, &[], b""),
            [n("Cluster:DefaultCluster", &["Update"])]
        );
        let heartbeat = br#"{"clientID":"c","consumerDataSet":[{"groupName":"g1","subscriptionDataSet":[{"topic":"Orders","subString":"*"}]}],"producerDataSet":[]}"#;
        let got = needs(request::HEART_BEAT, &[], heartbeat);
        assert!(got.contains(&n("Group:g1", &["Sub"])), "{got:?}");
        assert!(got.contains(&n("Topic:Orders", &["Sub"])), "{got:?}");
        let route = v2_needs(&Action::Route { topic: "Orders" }, &Resource::cluster());
        assert_eq!(route[0].actions, [A::Pub, A::Sub]);
    }
}
