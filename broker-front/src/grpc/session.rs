//! A v5 client's session with a core: its Telemetry stream, the settings it sent and was
//! given, and the commands the broker pushes to it.
//!
//! A v5 client opens one Telemetry stream to every endpoint of its routes (each core) and
//! sends its settings first; it starts only once the server's settings come back on that
//! stream (the Java client blocks on them). The broker answers with the client's settings
//! completed as RocketMQ's Proxy completes them: a retry policy (3 attempts, 10 ms to 1 s
//! exponential for producers; 16 retries on RocketMQ's delay levels for consumers), the largest body, message-type validation on, long polling of 20 s and
//! batches of 32 for push consumers. Heartbeat and NotifyClientTermination need the session;
//! the session ends with its stream.
//!
//! The settings are checked against the ACL as RocketMQ's Proxy checks them
//! ([`settings_needs`]): a producer needs Pub on each topic it publishes, a consumer Sub
//! on its group and on each topic it subscribes to. Settings refused are answered with a
//! TelemetryCommand carrying UNAUTHORIZED (40100) and the reason, and the stream ends: the
//! client is not registered.
//!
//! Transaction checks reach a producer through its session: a producer publishing a topic
//! is asked about the topic's undecided half messages (their producer group is the topic,
//! as RocketMQ's Proxy registers v5 producers) with a RecoverOrphanedTransactionCommand on
//! its stream, and answers with EndTransaction.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalSender};
use grpc_h2::{Code, GrpcStatus, Replies, Requests};
use grpc_proto::v2;
use prost::Message as _;

use acl::Action;

use super::consume::{group_policy, Backoff, ConsumerPolicy};
use super::{encoded, error_status, name_of, ok, status};
use crate::front::Front;
use crate::mesh::GroupOp;

/// Commands queued for one client's stream at most; a client that does not read them is
/// skipped by the checks rather than buffered without bound.
const COMMANDS_QUEUED_MAX: usize = 1024;

/// The sessions of the v5 clients connected to one core, by client id.
#[derive(Default)]
pub struct Sessions {
    by_client: RefCell<HashMap<String, Session>>,
    /// Numbers the Telemetry streams, so that a stream that ends removes only its own
    /// session and not one a newer stream of the same client made.
    streams: Cell<u64>,
}

struct Session {
    stream: u64,
    client_type: v2::ClientType,
    /// The topics a producer publishes.
    topics: Vec<String>,
    /// A consumer's group.
    group: Option<String>,
    /// A consumer's subscriptions, as a RocketMQ heartbeat declares them.
    subscriptions: Vec<remoting::body::SubscriptionData>,
    /// The SDK's language, as RocketMQ's `LanguageCode` names it.
    language: String,
    /// A consumer's group's FIFO flag and deliveries.
    policy: ConsumerPolicy,
    commands: Rc<LocalSender<v2::TelemetryCommand>>,
}

impl Sessions {
    /// Clients with a session here.
    pub fn len(&self) -> usize {
        self.by_client.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `client` sent its settings on a stream that is still open.
    pub fn has(&self, client: &str) -> bool {
        self.by_client.borrow().contains_key(client)
    }

    /// The consumer group of `client`'s session.
    pub fn group_of(&self, client: &str) -> Option<String> {
        self.by_client.borrow().get(client)?.group.clone()
    }

    /// The client type `client`'s settings declared, when it has a session here.
    pub fn client_type_of(&self, client: &str) -> Option<v2::ClientType> {
        Some(self.by_client.borrow().get(client)?.client_type)
    }

    /// The policy of `client`'s group, RocketMQ's defaults when it has no session here.
    pub fn consumer_policy(&self, client: &str) -> ConsumerPolicy {
        self.by_client
            .borrow()
            .get(client)
            .map_or_else(ConsumerPolicy::default, |s| s.policy.clone())
    }

    /// Queues `command` for a producer publishing `topic`; false when none has a session here
    /// that takes it.
    pub fn push_to_producer(&self, topic: &str, command: v2::TelemetryCommand) -> bool {
        let sessions = self.by_client.borrow();
        let mut producers = sessions.iter().filter(|(_, s)| {
            s.client_type == v2::ClientType::Producer && s.topics.iter().any(|t| t == topic)
        });
        producers.any(|(client, s)| match s.commands.try_send(command.clone()) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(%client, "a command for a v5 producer was not queued: {e}");
                false
            }
        })
    }

    /// Queues `command` for `client`'s stream; false when it has no session here that takes it.
    pub fn push_to(&self, client: &str, command: v2::TelemetryCommand) -> bool {
        let sessions = self.by_client.borrow();
        let Some(s) = sessions.get(client) else {
            return false;
        };
        match s.commands.try_send(command) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(%client, "a command for a v5 client was not queued: {e}");
                false
            }
        }
    }

    fn next_stream(&self) -> u64 {
        let n = self.streams.get() + 1;
        self.streams.set(n);
        n
    }

    /// Ends `client`'s session if `stream` is its stream; whether it did.
    fn end(&self, client: &str, stream: u64) -> bool {
        let mut sessions = self.by_client.borrow_mut();
        if sessions.get(client).is_some_and(|s| s.stream == stream) {
            sessions.remove(client);
            return true;
        }
        false
    }
}

/// The command telling a lite consumer it no longer holds `evicted.lite`.
pub(crate) fn unsubscribe_lite(evicted: &broker_core::lite::Evicted) -> v2::TelemetryCommand {
    v2::TelemetryCommand {
        status: ok(),
        command: Some(
            v2::telemetry_command::Command::NotifyUnsubscribeLiteCommand(
                v2::NotifyUnsubscribeLiteCommand {
                    lite_topic: evicted.lite.clone(),
                },
            ),
        ),
    }
}

/// What a client's settings need the ACL to allow (RocketMQ's
/// `DefaultAuthorizationContextBuilder` for TelemetryCommand): Pub on each published
/// topic; the group's Sub and Sub on each subscribed topic.
pub(super) fn settings_needs(settings: &v2::Settings) -> Vec<Action<'_>> {
    match &settings.pub_sub {
        Some(v2::settings::PubSub::Publishing(p)) => p
            .topics
            .iter()
            .map(|t| Action::Publish { topic: &t.name })
            .collect(),
        Some(v2::settings::PubSub::Subscription(s)) => {
            let group = name_of(&s.group);
            std::iter::once(Action::Group { group })
                .chain(s.subscriptions.iter().map(|e| Action::Subscribe {
                    topic: name_of(&e.topic),
                    group: Some(group),
                }))
                .collect()
        }
        None => Vec::new(),
    }
}

/// Whether a Telemetry stream's caller may do what its settings need; the refusal's status.
pub(super) type Authorize<'a> = dyn Fn(&[Action<'_>]) -> Result<(), Option<v2::Status>> + 'a;

/// Serves one Telemetry stream of `client` until either side ends it. `authorize` says
/// whether the stream's caller may do what its settings need (UNAUTHORIZED otherwise).
pub(super) async fn telemetry(
    f: &Front,
    client: &str,
    peer: &str,
    authorize: &Authorize<'_>,
    requests: &mut Requests,
    replies: &mut Replies,
) -> Result<(), GrpcStatus> {
    let stream = f.grpc.next_stream();
    let (tx, rx) = local_channel::new_bounded::<v2::TelemetryCommand>(COMMANDS_QUEUED_MAX);
    let tx = Rc::new(tx);
    struct Ends<'a>(&'a Front, &'a str, u64);
    impl Drop for Ends<'_> {
        fn drop(&mut self) {
            // Lite subscriptions are session state, as RocketMQ keeps them: a client that
            // comes back sends its whole set again.
            if self.0.grpc.end(self.1, self.2) {
                self.0.lite_client_gone(self.1);
            }
        }
    }
    let _ends = Ends(f, client, stream);
    enum Event {
        Request(Option<Result<bytes::Bytes, GrpcStatus>>),
        Command(Option<Box<v2::TelemetryCommand>>),
    }
    loop {
        // Both waits are cancel-safe: the one that loses the race loses nothing.
        let event =
            futures_lite::future::or(async { Event::Request(requests.next().await) }, async {
                Event::Command(rx.recv().await.map(Box::new))
            })
            .await;
        match event {
            Event::Request(None) => return Ok(()),
            Event::Request(Some(Err(status))) => return Err(status),
            Event::Request(Some(Ok(message))) => {
                let command = v2::TelemetryCommand::decode(message).map_err(|e| {
                    GrpcStatus::new(
                        Code::InvalidArgument,
                        format!("a malformed Telemetry command: {e}"),
                    )
                })?;
                let Some(v2::telemetry_command::Command::Settings(settings)) = command.command
                else {
                    // Thread stack traces and verify results answer commands this broker
                    // does not send.
                    continue;
                };
                if let Err(refusal) = authorize(&settings_needs(&settings)) {
                    // As RocketMQ's Proxy: the refusal as the command's status, and the
                    // stream ends with the client unregistered.
                    tracing::debug!(%client, %peer, "a v5 client's settings were refused");
                    let reply = v2::TelemetryCommand {
                        status: refusal,
                        command: None,
                    };
                    replies.send(encoded(&reply)).await?;
                    return Ok(());
                }
                let policy = match &settings.pub_sub {
                    Some(v2::settings::PubSub::Subscription(s)) => {
                        group_policy(f, name_of(&s.group)).await
                    }
                    _ => ConsumerPolicy::default(),
                };
                let completed = register(f, client, stream, &tx, settings, policy)?;
                tracing::debug!(%client, %peer, "a v5 client sent its settings");
                let reply = v2::TelemetryCommand {
                    status: ok(),
                    command: Some(v2::telemetry_command::Command::Settings(completed)),
                };
                replies.send(encoded(&reply)).await?;
            }
            Event::Command(Some(command)) => replies.send(encoded(&*command)).await?,
            // The sender lives in this function: never.
            Event::Command(None) => return Ok(()),
        }
    }
}

/// Keeps `client`'s session for `stream` with `settings`, and completes them.
fn register(
    f: &Front,
    client: &str,
    stream: u64,
    tx: &Rc<LocalSender<v2::TelemetryCommand>>,
    mut settings: v2::Settings,
    policy: ConsumerPolicy,
) -> Result<v2::Settings, GrpcStatus> {
    let client_type = settings
        .client_type
        .and_then(|t| v2::ClientType::try_from(t).ok())
        .unwrap_or(v2::ClientType::Unspecified);
    let (topics, group, subscriptions) = match &settings.pub_sub {
        Some(v2::settings::PubSub::Publishing(p)) => (
            p.topics.iter().map(|t| t.name.clone()).collect(),
            None,
            Vec::new(),
        ),
        Some(v2::settings::PubSub::Subscription(s)) => (
            Vec::new(),
            Some(name_of(&s.group).to_owned()),
            s.subscriptions.iter().map(subscription_data).collect(),
        ),
        None => {
            // As RocketMQ's Proxy: settings that neither publish nor subscribe end the stream.
            return Err(GrpcStatus::new(
                Code::InvalidArgument,
                "settings carry neither publishing nor subscription",
            ));
        }
    };
    let language = settings
        .user_agent
        .as_ref()
        .and_then(|ua| v2::Language::try_from(ua.language).ok())
        .map_or("JAVA", |l| match l {
            v2::Language::Golang => "GO",
            v2::Language::DotNet => "DOTNET",
            other => other.as_str_name(),
        })
        .to_owned();
    complete(f, client_type, &policy, &mut settings);
    let commands = tx.clone();
    f.grpc.by_client.borrow_mut().insert(
        client.to_owned(),
        Session {
            stream,
            client_type,
            topics,
            group,
            subscriptions,
            language,
            policy,
            commands,
        },
    );
    Ok(settings)
}

/// A v5 subscription as a RocketMQ heartbeat declares it (what mqadmin's consumerConnection
/// shows).
fn subscription_data(e: &v2::SubscriptionEntry) -> remoting::body::SubscriptionData {
    let (kind, expression) = match &e.expression {
        Some(x) if x.r#type == v2::FilterType::Sql as i32 => ("SQL92", x.expression.clone()),
        Some(x) if !x.expression.is_empty() => ("TAG", x.expression.clone()),
        _ => ("TAG", "*".to_owned()),
    };
    let tags_set = if kind == "TAG" && expression != "*" {
        expression
            .split("||")
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect()
    } else {
        Vec::new()
    };
    remoting::body::SubscriptionData {
        class_filter_mode: false,
        code_set: Vec::new(),
        expression_type: Some(kind.to_owned()),
        sub_string: expression,
        sub_version: 0,
        tags_set,
        topic: name_of(&e.topic).to_owned(),
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A consumer group's retries by default (RocketMQ's `retryMaxTimes`).
pub(super) const CONSUMER_RETRIES: i32 = 16;
/// Messages per ReceiveMessage of a push consumer, and its long poll.
const RECEIVE_BATCH: i32 = 32;
const LONG_POLL: Duration = Duration::from_secs(20);

/// What RocketMQ's Proxy adds to a client's settings before it sends them back.
fn complete(
    f: &Front,
    client_type: v2::ClientType,
    policy: &ConsumerPolicy,
    settings: &mut v2::Settings,
) {
    settings.metric = Some(v2::Metric {
        on: false,
        endpoints: None,
    });
    match &mut settings.pub_sub {
        Some(v2::settings::PubSub::Publishing(p)) => {
            p.max_body_size = i32::try_from(f.config().message_bytes_max).unwrap_or(i32::MAX);
            p.validate_message_type = true;
            settings.backoff_policy = Some(v2::RetryPolicy {
                max_attempts: 3,
                strategy: Some(v2::retry_policy::Strategy::ExponentialBackoff(
                    v2::ExponentialBackoff {
                        initial: Some(duration(Duration::from_millis(10))),
                        max: Some(duration(Duration::from_secs(1))),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(v2::settings::PubSub::Subscription(s)) => {
            if matches!(
                client_type,
                v2::ClientType::PushConsumer | v2::ClientType::LitePushConsumer
            ) {
                s.receive_batch_size = Some(RECEIVE_BATCH);
                s.long_polling_timeout = Some(duration(LONG_POLL));
            }
            if matches!(
                client_type,
                v2::ClientType::LitePushConsumer | v2::ClientType::LiteSimpleConsumer
            ) {
                s.lite_subscription_quota = Some(
                    i32::try_from(f.shared.config.lite_subscription_quota).unwrap_or(i32::MAX),
                );
                s.max_lite_topic_size = Some(broker_core::lite::LITE_TOPIC_BYTES_MAX as i32);
            }
            s.fifo = Some(policy.fifo);
            let strategy = match &policy.backoff {
                Backoff::Customized(next) => {
                    v2::retry_policy::Strategy::CustomizedBackoff(v2::CustomizedBackoff {
                        next: next
                            .iter()
                            .map(|&ms| duration(Duration::from_millis(ms)))
                            .collect(),
                    })
                }
                Backoff::Exponential {
                    initial_ms,
                    max_ms,
                    multiplier,
                } => v2::retry_policy::Strategy::ExponentialBackoff(v2::ExponentialBackoff {
                    initial: Some(duration(Duration::from_millis(*initial_ms))),
                    max: Some(duration(Duration::from_millis(*max_ms))),
                    multiplier: *multiplier as f32,
                }),
            };
            settings.backoff_policy = Some(v2::RetryPolicy {
                max_attempts: i32::try_from(policy.max_attempts).unwrap_or(i32::MAX),
                strategy: Some(strategy),
            });
        }
        None => {}
    }
}

/// Heartbeat: the client is alive; it must have sent its settings first. A consumer is a
/// member of its group from then on, as a RocketMQ client's heartbeat makes it one (core 0
/// keeps the members; admin tools list it with its subscriptions), until it terminates or
/// falls silent for `consumer_timeout_ms`.
pub(super) async fn heartbeat(
    f: &Front,
    client: &str,
    peer: &str,
    _r: &v2::HeartbeatRequest,
) -> v2::HeartbeatResponse {
    let member = {
        let sessions = f.grpc.by_client.borrow();
        let Some(session) = sessions.get(client) else {
            return v2::HeartbeatResponse {
                status: status(
                    v2::Code::UnrecognizedClientType,
                    format!(
                        "client {client} has sent no settings on a Telemetry stream to this broker"
                    ),
                ),
            };
        };
        session.group.clone().map(|group| {
            let seen = crate::rocketmq::SeenClient {
                addr: peer.to_owned(),
                language: session.language.clone(),
                version: crate::rocketmq::ROCKETMQ_VERSION,
                producer_groups: Vec::new(),
                consumers: vec![remoting::body::ConsumerData {
                    consume_from_where: Default::default(),
                    consume_type: remoting::body::ConsumeType::Pop,
                    group_name: group.clone(),
                    message_model: remoting::body::MessageModel::Clustering,
                    subscription_data_set: session.subscriptions.clone(),
                    unit_mode: false,
                }],
                at: f.shared.clock.now(),
            };
            (group, seen)
        })
    };
    if let Some((group, seen)) = member {
        f.rocketmq.heartbeat(client, seen);
        if let Err(e) = f
            .group(GroupOp::Heartbeat {
                group,
                client_id: client.to_owned(),
            })
            .await
        {
            return v2::HeartbeatResponse {
                status: error_status(&e),
            };
        }
    }
    v2::HeartbeatResponse { status: ok() }
}

/// NotifyClientTermination: the client is leaving; its session ends now, and a consumer
/// leaves its group at once.
pub(super) async fn terminated(
    f: &Front,
    client: &str,
    _r: &v2::NotifyClientTerminationRequest,
) -> v2::NotifyClientTerminationResponse {
    let session = f.grpc.by_client.borrow_mut().remove(client);
    f.lite_client_gone(client);
    if let Some(group) = session.and_then(|s| s.group) {
        f.rocketmq.forget(client);
        if let Err(e) = f
            .group(GroupOp::Unregister {
                group,
                client_id: client.to_owned(),
            })
            .await
        {
            tracing::debug!(%client, "a terminating v5 consumer did not leave its group: {e}");
        }
    }
    v2::NotifyClientTerminationResponse { status: ok() }
}
