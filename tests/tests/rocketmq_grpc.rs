//! RocketMQ 5's gRPC protocol (`apache.rocketmq.v2.MessagingService`) spoken to the broker's
//! ports by a client of h2 and the v2 protos: what the v5 SDKs rely on (routes that lead each
//! queue to its core, sends stored as RocketMQ's Proxy stores them, the Telemetry settings
//! exchange, transaction checks pushed on the Telemetry stream) and bad input answered with
//! a status while the connection keeps serving. The SDKs themselves run in
//! `rocketmq_v5_java.rs`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use glommio::{LocalExecutorBuilder, Placement};
use grpc_h2::h2::client::SendRequest;
use grpc_h2::h2::RecvStream;
use grpc_h2::http::{Method, Request};
use grpc_h2::{encode_message, Compat};
use grpc_proto::v2;
use grpc_proto::Rpc;
use integration::acl_accounts::{ADMIN, APP, RULES};
use integration::{core_addrs, create_topic, drain_topic, hops_and_stored, Cluster};
use prost::Message as _;

/// Runs `f` on a glommio executor of this thread, failing after `limit` rather than hanging.
fn run<Fut: Future<Output = ()>>(limit: Duration, f: impl FnOnce() -> Fut) {
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .unwrap();
    ex.run(async move {
        glommio::timer::timeout(limit, async move {
            f().await;
            Ok(())
        })
        .await
        .expect("the gRPC client did not finish in time");
    });
}

async fn connect(addr: &str) -> SendRequest<Bytes> {
    let tcp = glommio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (client, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
        .await
        .unwrap();
    glommio::spawn_local(async move {
        let _ = conn.await;
    })
    .detach();
    client
}

fn request(path: &str, client_id: Option<&str>) -> Request<()> {
    request_as(path, client_id, None)
}

/// A call's request headers, signed as RocketMQ 5's SDKs sign them when `account` (access
/// key, secret key) is given.
fn request_as(path: &str, client_id: Option<&str>, account: Option<(&str, &str)>) -> Request<()> {
    let mut r = Request::builder()
        .method(Method::POST)
        .uri(format!("http://corvus{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-mq-language", "RUST")
        .header("x-mq-protocol", "v2");
    if let Some(id) = client_id {
        r = r.header("x-mq-client-id", id);
    }
    if let Some((ak, sk)) = account {
        let date_time = "20261205T120000Z";
        let signature = acl::sign::grpc_signature(sk, date_time);
        r = r.header("x-mq-date-time", date_time).header(
            "authorization",
            format!("MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"),
        );
    }
    r.body(()).unwrap()
}

/// What a client sees of a unary call.
#[derive(Debug)]
struct Reply {
    grpc_status: String,
    grpc_message: String,
    message: Option<Bytes>,
}

/// Takes one whole gRPC message off `buf`, reading `body` as needed; `None` at its end.
async fn next_message(body: &mut RecvStream, buf: &mut BytesMut) -> Option<Bytes> {
    loop {
        if buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() >= 5 + len {
                return Some(buf.split_to(5 + len).freeze().slice(5..));
            }
        }
        let chunk = body.data().await?.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
    }
}

/// A unary call of `path` with `payload` as its message.
async fn call(
    client: &SendRequest<Bytes>,
    path: &str,
    client_id: Option<&str>,
    payload: &[u8],
) -> Reply {
    call_as(client, path, client_id, payload, None).await
}

/// [`call`] signed by `account` (access key, secret key).
async fn call_as(
    client: &SendRequest<Bytes>,
    path: &str,
    client_id: Option<&str>,
    payload: &[u8],
    account: Option<(&str, &str)>,
) -> Reply {
    let mut c = client.clone().ready().await.unwrap();
    let (response, mut send) = c
        .send_request(request_as(path, client_id, account), false)
        .unwrap();
    send.send_data(encode_message(payload).unwrap(), true)
        .unwrap();
    let (parts, mut body) = response.await.unwrap().into_parts();
    assert_eq!(parts.status, 200, "{path}");
    let header =
        |h: &grpc_h2::http::HeaderMap, k: &str| h.get(k).map(|v| v.to_str().unwrap().to_owned());
    // A trailers-only answer carries the status in its headers.
    if let Some(status) = header(&parts.headers, "grpc-status") {
        return Reply {
            grpc_status: status,
            grpc_message: header(&parts.headers, "grpc-message").unwrap_or_default(),
            message: None,
        };
    }
    let message = next_message(&mut body, &mut BytesMut::new()).await;
    let trailers = body.trailers().await.unwrap().unwrap();
    Reply {
        grpc_status: header(&trailers, "grpc-status").unwrap(),
        grpc_message: header(&trailers, "grpc-message").unwrap_or_default(),
        message,
    }
}

/// A unary RPC that must end with gRPC OK; its response.
async fn unary<Resp: prost::Message + Default>(
    client: &SendRequest<Bytes>,
    rpc: Rpc,
    client_id: &str,
    req: &impl prost::Message,
) -> Resp {
    let r = call(client, rpc.path(), Some(client_id), &req.encode_to_vec()).await;
    assert_eq!(r.grpc_status, "0", "{rpc:?}: {r:?}");
    Resp::decode(r.message.unwrap()).unwrap()
}

fn code(s: &Option<v2::Status>) -> v2::Code {
    v2::Code::try_from(s.as_ref().unwrap().code).unwrap()
}

fn resource(name: &str) -> Option<v2::Resource> {
    Some(v2::Resource {
        resource_namespace: String::new(),
        name: name.to_owned(),
    })
}

fn route_request(topic: &str) -> v2::QueryRouteRequest {
    v2::QueryRouteRequest {
        topic: resource(topic),
        endpoints: None,
    }
}

/// A message as the Java SDK builds one, for queue `queue_id` of its route.
fn message(topic: &str, id: &str, queue_id: i32, body: &[u8]) -> v2::Message {
    v2::Message {
        topic: resource(topic),
        user_properties: [("color".to_owned(), "blue".to_owned())].into(),
        system_properties: Some(v2::SystemProperties {
            tag: Some("TagA".into()),
            keys: vec!["k1".into(), "k2".into()],
            message_id: id.to_owned(),
            body_encoding: v2::Encoding::Identity as i32,
            message_type: v2::MessageType::Normal as i32,
            born_timestamp: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            born_host: "test-host".into(),
            queue_id,
            ..Default::default()
        }),
        body: Bytes::copy_from_slice(body),
    }
}

fn send_request(messages: Vec<v2::Message>) -> v2::SendMessageRequest {
    v2::SendMessageRequest { messages }
}

fn endpoint(q: &v2::MessageQueue) -> String {
    let a = &q
        .broker
        .as_ref()
        .unwrap()
        .endpoints
        .as_ref()
        .unwrap()
        .addresses[0];
    format!("{}:{}", a.host, a.port)
}

/// The route leads each core's queues to that core's own port, sends there cross no core,
/// and are stored with what RocketMQ's Proxy stores (tag, keys, message id, user
/// properties).
#[test]
fn routes_lead_each_queue_to_its_core_and_sends_are_stored_as_the_proxy_stores_them() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcTopic", 8);
    let cores: BTreeSet<String> = core_addrs(&ns).into_iter().collect();
    let (hops_before, _) = hops_and_stored(&ns, &c.broker.addr);
    let broker = c.broker.addr.clone();
    let mut sent_ids = Vec::new();
    let sent = &mut sent_ids;
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        let route: v2::QueryRouteResponse = unary(
            &client,
            Rpc::QueryRoute,
            "route-client",
            &route_request("GrpcTopic"),
        )
        .await;
        assert_eq!(code(&route.status), v2::Code::Ok);
        assert_eq!(route.message_queues.len(), 8, "{route:?}");
        let endpoints: BTreeSet<String> = route.message_queues.iter().map(endpoint).collect();
        assert_eq!(endpoints, cores, "every core at its own direct address");
        let brokers: BTreeSet<&str> = route
            .message_queues
            .iter()
            .map(|q| q.broker.as_ref().unwrap().name.as_str())
            .collect();
        assert_eq!(brokers.len(), 2, "each core is a broker of its own");
        for q in &route.message_queues {
            assert_eq!(q.permission, v2::Permission::ReadWrite as i32);
            assert_eq!(q.accept_message_types, [v2::MessageType::Normal as i32]);
        }

        let missing: v2::QueryRouteResponse = unary(
            &client,
            Rpc::QueryRoute,
            "route-client",
            &route_request("NoSuchTopic"),
        )
        .await;
        assert_eq!(code(&missing.status), v2::Code::TopicNotFound);

        // One send to every queue, at the endpoint the route gives it.
        for (i, q) in route.message_queues.iter().enumerate() {
            let at = connect(&endpoint(q)).await;
            let id = format!("0100000000000000000000000{i:09}");
            let m = message("GrpcTopic", &id, q.id, format!("body-{i}").as_bytes());
            let r: v2::SendMessageResponse =
                unary(&at, Rpc::SendMessage, "producer-1", &send_request(vec![m])).await;
            assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
            assert_eq!(r.entries.len(), 1);
            assert_eq!(r.entries[0].message_id, id);
            sent.push(id);
        }
    });
    let (hops_after, _) = hops_and_stored(&ns, &c.broker.addr);
    assert_eq!(
        hops_after, hops_before,
        "sends to each queue's core cross no core"
    );

    let consumer = client::PullConsumer::new(&ns, "grpc-check").unwrap();
    let stored = drain_topic(&consumer, "GrpcTopic", Duration::from_secs(20));
    assert_eq!(stored.len(), 8);
    let mut ids: Vec<String> = stored.iter().map(|m| m.msg_id.clone()).collect();
    ids.sort();
    sent_ids.sort();
    assert_eq!(
        ids, sent_ids,
        "each message is stored under the client's message id"
    );
    for m in &stored {
        assert!(String::from_utf8_lossy(&m.body).starts_with("body-"));
        assert_eq!(m.tags.as_deref(), Some("TagA"));
        assert_eq!(m.keys, ["k1", "k2"]);
        assert_eq!(m.property("color"), Some("blue"));
    }
}

/// With two brokers in the cluster, any one of them answers QueryRoute and QueryAssignment
/// for both, as RocketMQ's Proxy answers for every broker: every core of each at its own
/// address, so a v5 client that dials one broker sends to and pops from all of them. Sends
/// at each queue's endpoint are stored by the broker that owns it.
#[test]
fn any_broker_routes_a_v5_client_to_every_broker_of_the_cluster() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    let mut opts_b = integration::BrokerOpts::new(&ns, &c.dir.path().join("data-b"));
    opts_b.name = "broker-b".into();
    let b = integration::start_broker(&opts_b, &c.logs());
    // Both brokers are registered before the topic is created on the cluster.
    integration::wait_for(Duration::from_secs(20), || {
        let out = integration::mqadmin(&ns, &["cluster-list"]);
        String::from_utf8_lossy(&out.stdout)
            .contains("broker-b")
            .then_some(())
    })
    .expect("broker-b registered");
    create_topic(&ns, "ClusterTopic", 4);
    let brokers = [c.broker.addr.clone(), b.addr.clone()];
    let mut all_endpoints = BTreeSet::new();
    let all = &mut all_endpoints;
    run(Duration::from_secs(60), || async move {
        for at in &brokers {
            let client = connect(at).await;
            // The second broker's registration of the topic may trail the first's.
            let deadline = Instant::now() + Duration::from_secs(20);
            let route = loop {
                let route: v2::QueryRouteResponse = unary(
                    &client,
                    Rpc::QueryRoute,
                    "cluster-client",
                    &route_request("ClusterTopic"),
                )
                .await;
                assert_eq!(code(&route.status), v2::Code::Ok, "{route:?}");
                if route.message_queues.len() == 8 || Instant::now() > deadline {
                    break route;
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            };
            // broker-a's two cores hold two queues each, broker-b's one core all four.
            let mut per_broker: std::collections::BTreeMap<String, (usize, String)> =
                Default::default();
            for q in &route.message_queues {
                let e = per_broker
                    .entry(q.broker.as_ref().unwrap().name.clone())
                    .or_insert((0, endpoint(q)));
                e.0 += 1;
                assert_eq!(e.1, endpoint(q), "one endpoint per broker of the route");
            }
            let counts: Vec<(&str, usize)> =
                per_broker.iter().map(|(k, v)| (k.as_str(), v.0)).collect();
            assert_eq!(
                counts,
                [("broker-a-c0", 2), ("broker-a-c1", 2), ("broker-b", 4)],
                "asked of {at}: {route:?}"
            );
            all.extend(per_broker.values().map(|v| v.1.clone()));

            let assigned: v2::QueryAssignmentResponse = unary(
                &client,
                Rpc::QueryAssignment,
                "cluster-client",
                &v2::QueryAssignmentRequest {
                    topic: resource("ClusterTopic"),
                    group: resource("ClusterGroup"),
                    endpoints: None,
                },
            )
            .await;
            assert_eq!(code(&assigned.status), v2::Code::Ok, "{assigned:?}");
            let names: BTreeSet<String> = assigned
                .assignments
                .iter()
                .map(|a| {
                    let q = a.message_queue.as_ref().unwrap();
                    assert_eq!(q.id, -1);
                    q.broker.as_ref().unwrap().name.clone()
                })
                .collect();
            assert_eq!(
                names.into_iter().collect::<Vec<_>>(),
                ["broker-a-c0", "broker-a-c1", "broker-b"]
            );

            // One send to every queue, at the endpoint the route gives it.
            for (i, q) in route.message_queues.iter().enumerate() {
                let to = connect(&endpoint(q)).await;
                let id = format!("0200000000000000000000{}{i:09}", at.len() % 10);
                let m = message("ClusterTopic", &id, q.id, b"to-the-cluster");
                let r: v2::SendMessageResponse =
                    unary(&to, Rpc::SendMessage, "producer-1", &send_request(vec![m])).await;
                assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
            }
        }
    });
    assert_eq!(all_endpoints.len(), 3, "{all_endpoints:?}");
    let (_, stored_a) = hops_and_stored(&ns, &c.broker.addr);
    let (_, stored_b) = hops_and_stored(&ns, &b.addr);
    // Each broker got its queues' sends from both rounds: 2 x 4 each.
    assert_eq!((stored_a, stored_b), (8, 8));
}

/// Bad calls get a status and a message; the connection and its other calls go on.
#[test]
fn bad_calls_are_answered_with_statuses_and_the_connection_keeps_serving() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcBad", 2);
    let broker = c.broker.addr.clone();
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        let send = Rpc::SendMessage.path();

        let garbled = call(&client, send, Some("bad-1"), &[0xff, 0xff, 0xff]).await;
        assert_eq!(garbled.grpc_status, "3", "INVALID_ARGUMENT: {garbled:?}");
        assert!(garbled.grpc_message.contains("malformed"), "{garbled:?}");

        let unknown = call(
            &client,
            "/apache.rocketmq.v2.MessagingService/NoSuchMethod",
            Some("bad-1"),
            b"",
        )
        .await;
        assert_eq!(unknown.grpc_status, "12", "UNIMPLEMENTED: {unknown:?}");

        let good = send_request(vec![message("GrpcBad", "01AA", 0, b"ok")]);
        let anonymous = call(&client, send, None, &good.encode_to_vec()).await;
        let r = v2::SendMessageResponse::decode(anonymous.message.unwrap()).unwrap();
        assert_eq!(code(&r.status), v2::Code::ClientIdRequired);

        let refused = |m: v2::Message| send_request(vec![m]);
        let mut empty = message("GrpcBad", "01AB", 0, b"");
        empty.body = Bytes::new();
        let mut fifo = message("GrpcBad", "01AC", 0, b"fifo");
        if let Some(s) = fifo.system_properties.as_mut() {
            s.message_group = Some("g1".into());
            s.message_type = v2::MessageType::Fifo as i32;
        }
        let mut reserved = message("GrpcBad", "01AD", 0, b"reserved");
        reserved
            .user_properties
            .insert("UNIQ_KEY".into(), "forged".into());
        let no_id = message("GrpcBad", "", 0, b"no id");
        let mut long_group = message("GrpcBad", "01AE", 0, b"group");
        if let Some(s) = long_group.system_properties.as_mut() {
            s.message_group = Some("g".repeat(64));
        }
        for (m, expected) in [
            (empty, v2::Code::MessageBodyEmpty),
            (fifo, v2::Code::MessagePropertyConflictWithType),
            (reserved, v2::Code::IllegalMessagePropertyKey),
            (no_id, v2::Code::IllegalMessageId),
            (long_group, v2::Code::IllegalMessageGroup),
        ] {
            let r: v2::SendMessageResponse =
                unary(&client, Rpc::SendMessage, "bad-1", &refused(m)).await;
            assert_eq!(code(&r.status), expected, "{r:?}");
            assert!(!r.status.unwrap().message.is_empty());
        }

        let forged = v2::EndTransactionRequest {
            topic: resource("GrpcBad"),
            message_id: "01AF".into(),
            transaction_id: "not-a-transaction".into(),
            resolution: v2::TransactionResolution::Commit as i32,
            source: v2::TransactionSource::SourceClient as i32,
            trace_context: String::new(),
        };
        let r: v2::EndTransactionResponse =
            unary(&client, Rpc::EndTransaction, "bad-1", &forged).await;
        assert_eq!(code(&r.status), v2::Code::InvalidTransactionId);

        let hb = v2::HeartbeatRequest {
            group: None,
            client_type: v2::ClientType::Producer as i32,
        };
        let r: v2::HeartbeatResponse = unary(&client, Rpc::Heartbeat, "bad-1", &hb).await;
        assert_eq!(
            code(&r.status),
            v2::Code::UnrecognizedClientType,
            "a heartbeat before the client's settings"
        );

        // The same connection still serves a good send.
        let r: v2::SendMessageResponse = unary(&client, Rpc::SendMessage, "bad-1", &good).await;
        assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
    });
    let consumer = client::PullConsumer::new(&ns, "grpc-check").unwrap();
    let stored = drain_topic(&consumer, "GrpcBad", Duration::from_secs(20));
    let bodies: Vec<&[u8]> = stored.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"ok"[..]], "only the good send was stored");
}

/// An open Telemetry stream: the client's side to send on, the server's to read.
struct Telemetry {
    send: grpc_h2::h2::SendStream<Bytes>,
    body: RecvStream,
    buf: BytesMut,
}

impl Telemetry {
    /// Opens the stream with `first` as the client's first command; the server's answer
    /// headers come with its first message.
    async fn open(
        client: &SendRequest<Bytes>,
        client_id: &str,
        first: &v2::TelemetryCommand,
    ) -> Telemetry {
        Telemetry::open_as(client, client_id, first, None).await
    }

    /// [`Telemetry::open`] signed by `account` (access key, secret key).
    async fn open_as(
        client: &SendRequest<Bytes>,
        client_id: &str,
        first: &v2::TelemetryCommand,
        account: Option<(&str, &str)>,
    ) -> Telemetry {
        let mut c = client.clone().ready().await.unwrap();
        let path = Rpc::Telemetry.path();
        let (response, mut send) = c
            .send_request(request_as(path, Some(client_id), account), false)
            .unwrap();
        send.send_data(encode_message(&first.encode_to_vec()).unwrap(), false)
            .unwrap();
        let (parts, body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        assert!(parts.headers.get("grpc-status").is_none(), "{parts:?}");
        Telemetry {
            send,
            body,
            buf: BytesMut::new(),
        }
    }

    async fn next(&mut self) -> v2::TelemetryCommand {
        let m = next_message(&mut self.body, &mut self.buf).await.unwrap();
        v2::TelemetryCommand::decode(m).unwrap()
    }

    /// Whether the server ended the stream (no further message).
    async fn ended(&mut self) -> bool {
        next_message(&mut self.body, &mut self.buf).await.is_none()
    }
}

/// What the server answers `account`'s `settings` on a new Telemetry stream: the status,
/// and whether settings came back (the client starts) or the stream ended (it does not).
async fn settings_answer(
    client: &SendRequest<Bytes>,
    client_id: &str,
    settings: &v2::TelemetryCommand,
    account: (&str, &str),
) -> (v2::Code, bool) {
    let mut t = Telemetry::open_as(client, client_id, settings, Some(account)).await;
    let reply = t.next().await;
    let code = v2::Code::try_from(reply.status.unwrap_or_default().code).unwrap();
    match reply.command {
        Some(v2::telemetry_command::Command::Settings(_)) => (code, true),
        other => {
            assert!(other.is_none(), "{other:?}");
            assert!(t.ended().await, "a refused stream ends");
            (code, false)
        }
    }
}

fn producer_settings(topic: &str) -> v2::TelemetryCommand {
    v2::TelemetryCommand {
        status: None,
        command: Some(v2::telemetry_command::Command::Settings(v2::Settings {
            client_type: Some(v2::ClientType::Producer as i32),
            request_timeout: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
            pub_sub: Some(v2::settings::PubSub::Publishing(v2::Publishing {
                topics: vec![resource(topic).unwrap()],
                max_body_size: 0,
                validate_message_type: false,
            })),
            ..Default::default()
        })),
    }
}

fn transactional(id: &str, body: &[u8]) -> v2::SendMessageRequest {
    let mut m = message("GrpcTx", id, 0, body);
    if let Some(s) = m.system_properties.as_mut() {
        s.message_type = v2::MessageType::Transaction as i32;
    }
    send_request(vec![m])
}

fn end(
    id: &str,
    transaction_id: &str,
    resolution: v2::TransactionResolution,
) -> v2::EndTransactionRequest {
    v2::EndTransactionRequest {
        topic: resource("GrpcTx"),
        message_id: id.to_owned(),
        transaction_id: transaction_id.to_owned(),
        resolution: resolution as i32,
        source: v2::TransactionSource::SourceClient as i32,
        trace_context: String::new(),
    }
}

fn consumer_settings(group: &str, topic: &str) -> v2::TelemetryCommand {
    v2::TelemetryCommand {
        status: None,
        command: Some(v2::telemetry_command::Command::Settings(v2::Settings {
            client_type: Some(v2::ClientType::PushConsumer as i32),
            request_timeout: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
            pub_sub: Some(v2::settings::PubSub::Subscription(v2::Subscription {
                group: resource(group),
                subscriptions: vec![v2::SubscriptionEntry {
                    topic: resource(topic),
                    expression: Some(v2::FilterExpression {
                        r#type: v2::FilterType::Tag as i32,
                        expression: "*".into(),
                    }),
                }],
                ..Default::default()
            })),
            ..Default::default()
        })),
    }
}

/// A v5 consumer that sent its settings and heartbeats is a member of its group, as a
/// RocketMQ client's heartbeat makes one: the broker lists it among the group's consumers
/// (GET_CONSUMER_LIST_BY_GROUP, asked of the core that keeps the groups while the client
/// spoke to another) and mqadmin's consumerConnection shows it with its subscription; once
/// it terminates, it is gone from both.
#[test]
fn a_v5_consumer_is_a_member_of_its_group_until_it_terminates() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcMembers", 4);
    let cores = core_addrs(&ns);
    let (core0, core1) = (cores[0].clone(), cores[1].clone());
    let ask = |addr: &str, code: i32| {
        let mut cmd = remoting::RemotingCommand::request(code, 3);
        cmd.ext_fields
            .insert("consumerGroup".into(), "GrpcMemberGroup".into());
        integration::remoting_call(addr, &cmd, b"")
    };
    let members = |addr: &str| -> Vec<String> {
        let f = ask(addr, remoting::codes::request::GET_CONSUMER_LIST_BY_GROUP);
        assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
        let v: serde_json::Value = remoting::body::from_json(&f.body).unwrap();
        v["consumerIdList"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(members(&core0).is_empty());
    run(Duration::from_secs(60), || async move {
        let client = connect(&core1).await;
        let mut settings = consumer_settings("GrpcMemberGroup", "GrpcMembers");
        if let Some(v2::telemetry_command::Command::Settings(s)) = settings.command.as_mut() {
            if let Some(v2::settings::PubSub::Subscription(sub)) = s.pub_sub.as_mut() {
                sub.subscriptions[0].expression = Some(v2::FilterExpression {
                    r#type: v2::FilterType::Tag as i32,
                    expression: "TagA || TagB".into(),
                });
            }
        }
        let mut t = Telemetry::open(&client, "member-1", &settings).await;
        assert_eq!(code(&t.next().await.status), v2::Code::Ok);
        let hb = v2::HeartbeatRequest {
            group: resource("GrpcMemberGroup"),
            client_type: v2::ClientType::PushConsumer as i32,
        };
        let r: v2::HeartbeatResponse = unary(&client, Rpc::Heartbeat, "member-1", &hb).await;
        assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
        assert_eq!(members(&core0), ["member-1"]);
        assert_eq!(members(&core1), ["member-1"]);

        let f = ask(
            &core1,
            remoting::codes::request::GET_CONSUMER_CONNECTION_LIST,
        );
        assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
        let v: serde_json::Value = remoting::body::from_json(&f.body).unwrap();
        assert_eq!(v["connectionSet"][0]["clientId"], "member-1", "{v}");
        assert_eq!(v["messageModel"], "CLUSTERING", "{v}");
        let sub = &v["subscriptionTable"]["GrpcMembers"];
        assert_eq!(sub["subString"], "TagA || TagB", "{v}");
        assert_eq!(sub["tagsSet"], serde_json::json!(["TagA", "TagB"]), "{v}");

        let bye = v2::NotifyClientTerminationRequest {
            group: resource("GrpcMemberGroup"),
        };
        let r: v2::NotifyClientTerminationResponse =
            unary(&client, Rpc::NotifyClientTermination, "member-1", &bye).await;
        assert_eq!(code(&r.status), v2::Code::Ok);
        assert!(
            members(&core0).is_empty(),
            "the member left at its termination"
        );
        let f = ask(
            &core1,
            remoting::codes::request::GET_CONSUMER_CONNECTION_LIST,
        );
        assert_ne!(f.command.code, 0, "no connection of the group is left");
        drop(t);
    });
}

/// A consumer's settings carry its group's retries and retry policy (`retryMaxTimes` and
/// `groupRetryPolicy` of its subscription group config), as RocketMQ's Proxy hands them
/// out, and RocketMQ's defaults for a group without a config.
#[test]
fn a_consumer_s_settings_carry_its_group_s_retry_policy() {
    let c = Cluster::start(1, "small");
    let broker = c.broker.addr.clone();
    create_topic(&c.namesrv.addr, "GrpcRetry", 2);
    let config = r#"{"groupName":"GrpcExponential","retryMaxTimes":4,"groupRetryPolicy":{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":2000,"max":60000,"multiplier":3}}}"#;
    let cmd = remoting::RemotingCommand::request(
        remoting::codes::request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        9,
    );
    let f = integration::remoting_call(&broker, &cmd, config.as_bytes());
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    run(Duration::from_secs(30), || async move {
        let client = connect(&broker).await;
        let mut policies = Vec::new();
        for (id, group) in [
            ("exp-consumer", "GrpcExponential"),
            ("plain-consumer", "GrpcPlain"),
        ] {
            let mut t = Telemetry::open(&client, id, &consumer_settings(group, "GrpcRetry")).await;
            let reply = t.next().await;
            assert_eq!(code(&reply.status), v2::Code::Ok);
            let Some(v2::telemetry_command::Command::Settings(s)) = reply.command else {
                panic!("the answer to settings carries settings: {reply:?}");
            };
            policies.push(s.backoff_policy.unwrap());
        }
        let secs = |d: &Option<prost_types::Duration>| d.as_ref().map(|d| d.seconds);
        assert_eq!(policies[0].max_attempts, 5);
        let Some(v2::retry_policy::Strategy::ExponentialBackoff(e)) = &policies[0].strategy else {
            panic!("an exponential backoff: {:?}", policies[0]);
        };
        assert_eq!(
            (secs(&e.initial), secs(&e.max), e.multiplier),
            (Some(2), Some(60), 3.0)
        );
        assert_eq!(policies[1].max_attempts, 17);
        let Some(v2::retry_policy::Strategy::CustomizedBackoff(b)) = &policies[1].strategy else {
            panic!("RocketMQ's customized backoff: {:?}", policies[1]);
        };
        let next: Vec<i64> = b.next.iter().map(|d| d.seconds).collect();
        assert_eq!(next[..4], [1, 5, 10, 30], "{next:?}");
        assert_eq!(next.last(), Some(&7200));
    });
}

/// A producer's settings come back completed (the Java SDK starts only once they do); a
/// transaction it leaves undecided is checked through its Telemetry stream and its answer
/// decides it; commits and rollbacks of its own are kept.
#[test]
fn telemetry_completes_settings_and_carries_transaction_checks_to_v5_producers() {
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml =
            Some("transaction_timeout_ms = 500\ntransaction_check_interval_ms = 300\n".into())
    });
    let ns = c.namesrv.addr.clone();
    let broker = c.broker.addr.clone();
    let created = integration::update_topic_with_attributes(
        &broker,
        "GrpcTx",
        2,
        "+message.type=TRANSACTION",
    );
    assert_eq!(created.command.code, 0, "{:?}", created.command.remark);
    integration::wait_for_route(&ns, "GrpcTx");
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        let mut telemetry =
            Telemetry::open(&client, "tx-producer", &producer_settings("GrpcTx")).await;
        let reply = telemetry.next().await;
        assert_eq!(code(&reply.status), v2::Code::Ok);
        let Some(v2::telemetry_command::Command::Settings(s)) = reply.command else {
            panic!("the answer to settings carries settings: {reply:?}");
        };
        let backoff = s.backoff_policy.unwrap();
        assert_eq!(backoff.max_attempts, 3);
        assert!(
            backoff.strategy.is_some(),
            "a retry policy with its strategy"
        );
        let Some(v2::settings::PubSub::Publishing(p)) = s.pub_sub else {
            panic!("a producer's settings publish");
        };
        // The broker's `message_bytes_max` (the small profile's 1 MiB): the client refuses
        // larger bodies itself.
        assert_eq!(p.max_body_size, 1 << 20, "{p:?}");
        assert!(p.validate_message_type);

        let hb = v2::HeartbeatRequest {
            group: None,
            client_type: v2::ClientType::Producer as i32,
        };
        let r: v2::HeartbeatResponse = unary(&client, Rpc::Heartbeat, "tx-producer", &hb).await;
        assert_eq!(code(&r.status), v2::Code::Ok);

        // Committed and rolled back by the producer; one left to the broker's check.
        let mut ids = Vec::new();
        for (id, body) in [
            ("01C0", "commit"),
            ("01C1", "rollback"),
            ("01C2", "checked"),
        ] {
            let r: v2::SendMessageResponse = unary(
                &client,
                Rpc::SendMessage,
                "tx-producer",
                &transactional(id, body.as_bytes()),
            )
            .await;
            assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
            ids.push(r.entries[0].transaction_id.clone());
        }
        for (i, resolution) in [
            v2::TransactionResolution::Commit,
            v2::TransactionResolution::Rollback,
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("01C{i}");
            let r: v2::EndTransactionResponse = unary(
                &client,
                Rpc::EndTransaction,
                "tx-producer",
                &end(&id, &ids[i], resolution),
            )
            .await;
            assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
        }

        let deadline = Instant::now() + Duration::from_secs(30);
        let (message, transaction_id) = loop {
            assert!(Instant::now() < deadline, "no transaction check came");
            let command = telemetry.next().await;
            if let Some(v2::telemetry_command::Command::RecoverOrphanedTransactionCommand(r)) =
                command.command
            {
                break (r.message.unwrap(), r.transaction_id);
            }
        };
        let sys = message.system_properties.unwrap();
        assert_eq!(
            sys.message_id, "01C2",
            "only the undecided message is checked"
        );
        assert_eq!(message.topic.unwrap().name, "GrpcTx");
        assert_eq!(&message.body[..], b"checked");
        // The check names the half message as the broker keeps it now (a check re-stores
        // it, as RocketMQ's does); the answer goes with that id.
        assert_eq!(transaction_id.len(), 32, "{transaction_id}");
        let mut answer = end("01C2", &transaction_id, v2::TransactionResolution::Commit);
        answer.source = v2::TransactionSource::SourceServerCheck as i32;
        let r: v2::EndTransactionResponse =
            unary(&client, Rpc::EndTransaction, "tx-producer", &answer).await;
        assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
        telemetry.send.send_data(Bytes::new(), true).unwrap();
    });
    let consumer = client::PullConsumer::new(&ns, "grpc-check").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let bodies = loop {
        let stored = drain_topic(&consumer, "GrpcTx", Duration::from_secs(20));
        let mut bodies: Vec<String> = stored
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        bodies.sort();
        if bodies.len() >= 2 || Instant::now() > deadline {
            break bodies;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        bodies,
        ["checked", "commit"],
        "the rolled-back message is never delivered"
    );
}

/// ReceiveMessage of up to `batch` messages of queue `queue_id` of `topic` for `group`, hidden
/// for `invisible`: the messages, or the status of a stream that carried none.
async fn receive(
    client: &SendRequest<Bytes>,
    group: &str,
    topic: &str,
    queue_id: i32,
    batch: i32,
    invisible: Duration,
) -> Result<Vec<v2::Message>, v2::Code> {
    let r = v2::ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(v2::MessageQueue {
            topic: resource(topic),
            id: queue_id,
            permission: v2::Permission::ReadWrite as i32,
            broker: None,
            accept_message_types: Vec::new(),
        }),
        filter_expression: Some(v2::FilterExpression {
            r#type: v2::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: batch,
        invisible_duration: Some(prost_types::Duration {
            seconds: invisible.as_secs() as i64,
            nanos: 0,
        }),
        auto_renew: false,
        long_polling_timeout: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        attempt_id: None,
    };
    let mut c = client.clone().ready().await.unwrap();
    let (response, mut send) = c
        .send_request(
            request(Rpc::ReceiveMessage.path(), Some("pop-client")),
            false,
        )
        .unwrap();
    send.send_data(encode_message(&r.encode_to_vec()).unwrap(), true)
        .unwrap();
    let (parts, mut body) = response.await.unwrap().into_parts();
    assert_eq!(parts.status, 200);
    let mut buf = BytesMut::new();
    let mut statuses = Vec::new();
    let mut messages = Vec::new();
    let mut timestamps = 0;
    while let Some(m) = next_message(&mut body, &mut buf).await {
        match v2::ReceiveMessageResponse::decode(m).unwrap().content {
            Some(v2::receive_message_response::Content::Status(s)) => statuses.push(s),
            Some(v2::receive_message_response::Content::Message(m)) => messages.push(m),
            // The reply's time, last, as RocketMQ's Proxy ends the stream.
            Some(v2::receive_message_response::Content::DeliveryTimestamp(_)) => {
                assert!(!statuses.is_empty(), "the time comes after the status");
                timestamps += 1;
            }
            other => panic!("an unexpected element: {other:?}"),
        }
    }
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(statuses.len(), 1, "one status per stream: {statuses:?}");
    assert_eq!(timestamps, 1, "one delivery time per stream");
    let code = v2::Code::try_from(statuses[0].code).unwrap();
    if messages.is_empty() {
        return Err(code);
    }
    assert_eq!(code, v2::Code::Ok);
    Ok(messages)
}

fn handle_and_attempt(m: &v2::Message) -> (String, i32, String) {
    let sys = m.system_properties.as_ref().unwrap();
    (
        String::from_utf8_lossy(&m.body).into_owned(),
        sys.delivery_attempt.unwrap(),
        sys.receipt_handle.clone().unwrap(),
    )
}

async fn ack_handle(
    client: &SendRequest<Bytes>,
    group: &str,
    topic: &str,
    handle: &str,
) -> v2::Code {
    let r = v2::AckMessageRequest {
        group: resource(group),
        topic: resource(topic),
        entries: vec![v2::AckMessageEntry {
            message_id: String::new(),
            receipt_handle: handle.to_owned(),
            lite_topic: None,
        }],
    };
    let a: v2::AckMessageResponse = unary(client, Rpc::AckMessage, "pop-client", &r).await;
    code(&a.status)
}

/// A kill -9 of the broker between a consumer's receive and its ack loses nothing: a handle
/// received before the kill still acks its message, and the message left unacked comes back
/// after its invisible time with its attempt raised; a forged handle is refused.
#[test]
fn a_kill_between_receive_and_ack_loses_no_message_and_keeps_the_handles() {
    let mut c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcPop", 1);
    let (group, topic) = ("pop-group", "GrpcPop");
    let broker = c.broker.addr.clone();
    let mut handles = Vec::new();
    let held = &mut handles;
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        for (id, body) in [("01D0", "acked-after-kill"), ("01D1", "left")] {
            let m = message(topic, id, 0, body.as_bytes());
            let r: v2::SendMessageResponse = unary(
                &client,
                Rpc::SendMessage,
                "pop-client",
                &send_request(vec![m]),
            )
            .await;
            assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
        }
        let got = receive(&client, group, topic, 0, 2, Duration::from_secs(10))
            .await
            .unwrap();
        let seen: Vec<(String, i32, String)> = got.iter().map(handle_and_attempt).collect();
        assert_eq!(
            seen.iter().map(|s| (s.0.as_str(), s.1)).collect::<Vec<_>>(),
            [("acked-after-kill", 1), ("left", 1)]
        );
        held.extend(seen);
    });
    // RocketMQ 5's mqadmin shows pullOffset - consumerOffset as the group's messages in
    // flight.
    assert_eq!(offsets(&c.broker.addr, group), (0, 2), "two in flight");
    c.restart_broker();
    let broker = c.broker.addr.clone();
    let held = handles;
    run(Duration::from_secs(90), || async move {
        let client = connect(&broker).await;
        assert_eq!(
            ack_handle(&client, group, topic, &held[0].2).await,
            v2::Code::Ok,
            "a handle from before the kill acks"
        );
        let mut forged = held[1].2.clone();
        forged.push('9');
        assert_eq!(
            ack_handle(&client, group, topic, &forged).await,
            v2::Code::InvalidReceiptHandle
        );
        // The unacked one comes back once its 10 s are up, and only it.
        let deadline = Instant::now() + Duration::from_secs(40);
        let back = loop {
            assert!(
                Instant::now() < deadline,
                "the unacked message did not come back"
            );
            match receive(&client, group, topic, 0, 2, Duration::from_secs(10)).await {
                Ok(m) => break m,
                Err(code) => assert_eq!(code, v2::Code::MessageNotFound),
            }
        };
        let back: Vec<(String, i32, String)> = back.iter().map(handle_and_attempt).collect();
        assert_eq!(back.len(), 1, "{back:?}");
        assert_eq!((back[0].0.as_str(), back[0].1), ("left", 2));
        assert_eq!(
            ack_handle(&client, group, topic, &held[1].2).await,
            v2::Code::InvalidReceiptHandle,
            "the handle of the first delivery is spent"
        );
        assert_eq!(
            ack_handle(&client, group, topic, &back[0].2).await,
            v2::Code::Ok
        );
        assert_eq!(
            receive(&client, group, topic, 0, 2, Duration::from_secs(10))
                .await
                .err(),
            Some(v2::Code::MessageNotFound)
        );
    });
    assert_eq!(offsets(&c.broker.addr, group), (2, 2), "both consumed");
}

/// The group's consumer offset and pull offset of its one queue, as GET_CONSUME_STATS
/// answers them.
fn offsets(addr: &str, group: &str) -> (u64, u64) {
    let mut cmd =
        remoting::RemotingCommand::request(remoting::codes::request::GET_CONSUME_STATS, 5);
    cmd.ext_fields.insert("consumerGroup".into(), group.into());
    let f = integration::remoting_call(addr, &cmd, b"");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    let body = String::from_utf8_lossy(&f.body).into_owned();
    let field = |name: &str| -> u64 {
        let key = format!("\"{name}\":");
        let at = body
            .find(&key)
            .unwrap_or_else(|| panic!("{name} in {body}"));
        body[at + key.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };
    (field("consumerOffset"), field("pullOffset"))
}

/// With access control on, a v5 call is signed as the SDKs sign it (`authorization` over
/// `x-mq-date-time`) and may do what its account's permissions allow; anything else is
/// UNAUTHORIZED, as RocketMQ's Proxy answers, and nothing refused is stored.
#[test]
fn acl_signatures_and_permissions_hold_for_v5_calls() {
    let rules = integration::AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| o.config_toml = Some(rules.broker_toml()));
    v5_calls_get_what_the_rules_allow(&c);
}

/// The same calls under ACL 2.0: the broker's users and policies are the ACL 1.0 file's
/// accounts, migrated at start (`acl2_migrate_from_v1`, RocketMQ's `AuthMigrator`), so the
/// same table holds: a signature by a user, its policies deciding, the admin a super user.
#[test]
fn acl_2_users_migrated_from_plain_acl_hold_for_v5_calls() {
    let rules = integration::AclRules::write(RULES);
    let c = Cluster::start_with(1, "small", |o| {
        o.config_toml = Some(format!(
            "acl2_authentication_enable = true\nacl2_authorization_enable = true\nacl2_migrate_from_v1 = true\nacl_file = \"{}\"\n",
            rules.file.display()
        ))
    });
    v5_calls_get_what_the_rules_allow(&c);
    // ACL 2.0 asks Pub or Sub on a topic for its route (ACL 1.0 any account).
    let broker = c.broker.addr.clone();
    run(Duration::from_secs(30), || async move {
        let client = connect(&broker).await;
        for (topic, expected) in [("Audit", v2::Code::Ok), ("Other", v2::Code::Unauthorized)] {
            let route = route_request(topic).encode_to_vec();
            let r = call_as(
                &client,
                Rpc::QueryRoute.path(),
                Some("acl-client"),
                &route,
                Some(APP),
            )
            .await;
            let routed = v2::QueryRouteResponse::decode(r.message.unwrap()).unwrap();
            assert_eq!(code(&routed.status), expected, "the route of {topic}");
        }
    });
}

/// Sends, routes and acks of `RULES`' accounts, each allowed or refused as the rules say.
fn v5_calls_get_what_the_rules_allow(c: &Cluster) {
    let ns = c.namesrv.addr.clone();
    for t in ["Orders", "Audit"] {
        integration::create_topic_as(&ns, ADMIN, t, 1);
    }
    let broker = c.broker.addr.clone();
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        let send = |topic: &str, id: &str| {
            send_request(vec![message(topic, id, 0, id.as_bytes())]).encode_to_vec()
        };
        let outcome = |r: Reply| {
            assert_eq!(r.grpc_status, "0", "{r:?}");
            let m = v2::SendMessageResponse::decode(r.message.unwrap()).unwrap();
            code(&m.status)
        };
        let path = Rpc::SendMessage.path();
        let cases = [
            (None, "Orders", v2::Code::Unauthorized, "unsigned"),
            (
                Some(("orders-app", "wrong-secret")),
                "Orders",
                v2::Code::Unauthorized,
                "bad signature",
            ),
            (
                Some(("nobody", "x")),
                "Orders",
                v2::Code::Unauthorized,
                "unknown account",
            ),
            (Some(APP), "Audit", v2::Code::Unauthorized, "SUB only"),
            (Some(APP), "Orders", v2::Code::Ok, "PUB"),
            (Some(ADMIN), "Audit", v2::Code::Ok, "admin"),
        ];
        for (i, (account, topic, expected, what)) in cases.into_iter().enumerate() {
            let id = format!("01E{i}");
            let r = call_as(
                &client,
                path,
                Some("acl-client"),
                &send(topic, &id),
                account,
            )
            .await;
            assert_eq!(outcome(r), expected, "{what}");
        }
        // Reading needs SUB on the topic and the group.
        let route = route_request("Orders").encode_to_vec();
        let r = call_as(
            &client,
            Rpc::QueryRoute.path(),
            Some("acl-client"),
            &route,
            Some(APP),
        )
        .await;
        let routed = v2::QueryRouteResponse::decode(r.message.unwrap()).unwrap();
        assert_eq!(code(&routed.status), v2::Code::Ok);
        let ack = |group: &str| {
            v2::AckMessageRequest {
                group: resource(group),
                topic: resource("Orders"),
                entries: vec![v2::AckMessageEntry {
                    message_id: String::new(),
                    receipt_handle: "0 1 1 0 0 broker-a 0 0".into(),
                    lite_topic: None,
                }],
            }
            .encode_to_vec()
        };
        let path = Rpc::AckMessage.path();
        let r = call_as(
            &client,
            path,
            Some("acl-client"),
            &ack("other-group"),
            Some(APP),
        )
        .await;
        let a = v2::AckMessageResponse::decode(r.message.unwrap()).unwrap();
        assert_eq!(
            code(&a.status),
            v2::Code::Unauthorized,
            "a group it may not use"
        );
        let r = call_as(
            &client,
            path,
            Some("acl-client"),
            &ack("orders-group"),
            Some(APP),
        )
        .await;
        let a = v2::AckMessageResponse::decode(r.message.unwrap()).unwrap();
        assert_eq!(
            code(&a.status),
            v2::Code::InvalidReceiptHandle,
            "allowed, and then the handle is checked"
        );
        // Telemetry settings, as RocketMQ's Proxy checks them: a producer needs Pub on
        // each of its topics, a consumer Sub on its group and on each topic.
        let cases = [
            (APP, producer_settings("Orders"), true, "publishes Orders"),
            (
                APP,
                producer_settings("Audit"),
                false,
                "may only read Audit",
            ),
            (ADMIN, producer_settings("Audit"), true, "the admin"),
            (
                APP,
                consumer_settings("orders-group", "Orders"),
                true,
                "its group, a topic it reads",
            ),
            (
                APP,
                consumer_settings("orders-group", "Audit"),
                true,
                "its group, a topic it only reads",
            ),
            (
                APP,
                consumer_settings("other-group", "Orders"),
                false,
                "a group it may not use",
            ),
            (
                APP,
                consumer_settings("orders-group", "Secret"),
                false,
                "a topic it may not read",
            ),
        ];
        for (i, (account, settings, allowed, what)) in cases.iter().enumerate() {
            let id = format!("telemetry-{i}");
            let (status, settled) = settings_answer(&client, &id, settings, *account).await;
            if *allowed {
                assert_eq!((status, settled), (v2::Code::Ok, true), "{what}");
            } else {
                assert_eq!((status, settled), (v2::Code::Unauthorized, false), "{what}");
            }
        }
    });
    let mut config = client::ClientConfig::new(&ns).unwrap();
    config.pool.credentials = Some(client::Credentials::new(ADMIN.0, ADMIN.1));
    let consumer = client::PullConsumer::with_config(config, "acl-check").unwrap();
    let orders = drain_topic(&consumer, "Orders", Duration::from_secs(20));
    let audit = drain_topic(&consumer, "Audit", Duration::from_secs(20));
    let bodies = |m: &[client::MessageExt]| -> Vec<String> {
        m.iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect()
    };
    assert_eq!(
        bodies(&orders),
        ["01E4"],
        "only the permitted send to Orders"
    );
    assert_eq!(bodies(&audit), ["01E5"], "only the admin's send to Audit");
}

/// GetOffset, UpdateOffset and QueryOffset, as a v5 pull consumer keeps its own position: a
/// queue's bounds and a time's offset, a group's offset missing, committed, read back.
#[test]
fn offsets_of_a_queue_are_queried_committed_and_read() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcOffsets", 1);
    let broker = c.broker.addr.clone();
    run(Duration::from_secs(60), || async move {
        let client = connect(&broker).await;
        for i in 0..3 {
            let m = message("GrpcOffsets", &format!("01F{i}"), 0, b"x");
            let r: v2::SendMessageResponse =
                unary(&client, Rpc::SendMessage, "offsets", &send_request(vec![m])).await;
            assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");
        }
        let queue = Some(v2::MessageQueue {
            topic: resource("GrpcOffsets"),
            id: 0,
            permission: v2::Permission::ReadWrite as i32,
            broker: None,
            accept_message_types: Vec::new(),
        });
        let query = |policy: v2::QueryOffsetPolicy, at: Option<i64>| v2::QueryOffsetRequest {
            message_queue: queue.clone(),
            query_offset_policy: policy as i32,
            timestamp: at.map(|seconds| prost_types::Timestamp { seconds, nanos: 0 }),
        };
        for (q, expected) in [
            (query(v2::QueryOffsetPolicy::Beginning, None), 0),
            (query(v2::QueryOffsetPolicy::End, None), 3),
            (query(v2::QueryOffsetPolicy::Timestamp, Some(0)), 0),
        ] {
            let r: v2::QueryOffsetResponse = unary(&client, Rpc::QueryOffset, "offsets", &q).await;
            assert_eq!(
                (code(&r.status), r.offset),
                (v2::Code::Ok, expected),
                "{q:?}"
            );
        }
        let get = v2::GetOffsetRequest {
            group: resource("offsets-group"),
            message_queue: queue.clone(),
        };
        let r: v2::GetOffsetResponse = unary(&client, Rpc::GetOffset, "offsets", &get).await;
        assert_eq!(code(&r.status), v2::Code::OffsetNotFound);
        let update = v2::UpdateOffsetRequest {
            group: resource("offsets-group"),
            message_queue: queue.clone(),
            offset: 2,
        };
        let r: v2::UpdateOffsetResponse =
            unary(&client, Rpc::UpdateOffset, "offsets", &update).await;
        assert_eq!(code(&r.status), v2::Code::Ok);
        let r: v2::GetOffsetResponse = unary(&client, Rpc::GetOffset, "offsets", &get).await;
        assert_eq!((code(&r.status), r.offset), (v2::Code::Ok, 2));
        let mut missing = get.clone();
        if let Some(q) = missing.message_queue.as_mut() {
            q.id = 7;
        }
        let r: v2::GetOffsetResponse = unary(&client, Rpc::GetOffset, "offsets", &missing).await;
        assert_eq!(
            code(&r.status),
            v2::Code::BadRequest,
            "a queue the core does not have"
        );

        // PullMessage reads the queue from an offset the client keeps.
        let (status, messages, next) = pull(&client, queue.clone(), 0, 2, "*").await;
        assert_eq!(status, v2::Code::Ok);
        let ids: Vec<String> = messages
            .iter()
            .map(|m| m.system_properties.as_ref().unwrap().message_id.clone())
            .collect();
        assert_eq!(ids, ["01F0", "01F1"]);
        assert_eq!(
            messages[1].system_properties.as_ref().unwrap().queue_offset,
            Some(1)
        );
        assert_eq!(next, Some(2));
        let (status, messages, next) = pull(&client, queue.clone(), 2, 32, "*").await;
        assert_eq!((status, messages.len(), next), (v2::Code::Ok, 1, Some(3)));
        // At the end: nothing within the long poll, and the same offset to go on from.
        let (status, messages, next) = pull(&client, queue.clone(), 3, 32, "*").await;
        assert_eq!(
            (status, messages.len(), next),
            (v2::Code::MessageNotFound, 0, Some(3))
        );
        // A tag nothing carries: the offset moves past what was filtered out.
        let (status, messages, next) = pull(&client, queue.clone(), 0, 32, "TagZ").await;
        assert_eq!((status, messages.len()), (v2::Code::MessageNotFound, 0));
        assert_eq!(next, Some(3));
        let (status, messages, next) = pull(&client, queue.clone(), 100, 32, "*").await;
        assert_eq!(
            (status, messages.len(), next),
            (v2::Code::IllegalOffset, 0, None)
        );
    });
}

/// One PullMessage of `queue` from `offset`: the stream's status, messages and next offset.
async fn pull(
    client: &SendRequest<Bytes>,
    queue: Option<v2::MessageQueue>,
    offset: i64,
    batch: i32,
    tags: &str,
) -> (v2::Code, Vec<v2::Message>, Option<i64>) {
    let r = v2::PullMessageRequest {
        group: resource("offsets-group"),
        message_queue: queue,
        offset,
        batch_size: batch,
        filter_expression: Some(v2::FilterExpression {
            r#type: v2::FilterType::Tag as i32,
            expression: tags.into(),
        }),
        long_polling_timeout: Some(prost_types::Duration {
            seconds: 0,
            nanos: 300_000_000,
        }),
    };
    let mut c = client.clone().ready().await.unwrap();
    let (response, mut send) = c
        .send_request(request(Rpc::PullMessage.path(), Some("pull-client")), false)
        .unwrap();
    send.send_data(encode_message(&r.encode_to_vec()).unwrap(), true)
        .unwrap();
    let (parts, mut body) = response.await.unwrap().into_parts();
    assert_eq!(parts.status, 200);
    let mut buf = BytesMut::new();
    let (mut statuses, mut messages, mut next) = (Vec::new(), Vec::new(), None);
    while let Some(m) = next_message(&mut body, &mut buf).await {
        match v2::PullMessageResponse::decode(m).unwrap().content {
            Some(v2::pull_message_response::Content::Status(s)) => statuses.push(s),
            Some(v2::pull_message_response::Content::Message(m)) => {
                assert_eq!(statuses.len(), 1, "the status comes first");
                messages.push(m);
            }
            Some(v2::pull_message_response::Content::NextOffset(n)) => {
                assert!(next.is_none(), "one next offset, last");
                next = Some(n);
            }
            None => panic!("an empty element"),
        }
    }
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(statuses.len(), 1, "one status per stream: {statuses:?}");
    (
        v2::Code::try_from(statuses[0].code).unwrap(),
        messages,
        next,
    )
}

/// A gRPC connection counts against its account's `connections` quota from its first send,
/// as a remoting or native one does: a second connection of an account allowed one is
/// refused TOO_MANY_REQUESTS, naming the rule, while the first keeps sending; once the
/// first closes, the second is let in.
#[test]
fn a_grpc_connection_counts_against_its_accounts_connections() {
    let c = Cluster::start_with(1, "small", |o: &mut integration::BrokerOpts| {
        o.config_toml = Some("quotas = \"account:anonymous:connections=1\"\n".into());
    });
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, "GrpcConns", 1);
    let broker = c.broker.addr.clone();
    run(Duration::from_secs(60), || async move {
        let send = |id: &str| send_request(vec![message("GrpcConns", id, 0, b"conns")]);
        let first = connect(&broker).await;
        let r: v2::SendMessageResponse =
            unary(&first, Rpc::SendMessage, "conns-1", &send("01B0")).await;
        assert_eq!(code(&r.status), v2::Code::Ok, "{r:?}");

        let second = connect(&broker).await;
        let r: v2::SendMessageResponse =
            unary(&second, Rpc::SendMessage, "conns-2", &send("01B1")).await;
        assert_eq!(code(&r.status), v2::Code::TooManyRequests, "{r:?}");
        let text = r.status.unwrap().message;
        assert!(
            text.contains("account:anonymous:connections = 1 connections"),
            "{text}"
        );
        let r: v2::SendMessageResponse =
            unary(&first, Rpc::SendMessage, "conns-1", &send("01B2")).await;
        assert_eq!(
            code(&r.status),
            v2::Code::Ok,
            "the first connection keeps sending: {r:?}"
        );

        drop(first);
        let deadline = Instant::now() + Duration::from_secs(10);
        for attempt in 0u32.. {
            let r: v2::SendMessageResponse = unary(
                &second,
                Rpc::SendMessage,
                "conns-2",
                &send(&format!("01C{attempt}")),
            )
            .await;
            if code(&r.status) == v2::Code::Ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the second connection was not let in after the first closed: {r:?}"
            );
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
    });
}
