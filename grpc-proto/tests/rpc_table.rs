//! The RPC table against the MessagingService that the vendored `service.proto` declares.

#![allow(clippy::unwrap_used)]

use grpc_proto::{Rpc, RpcKind, FILE_DESCRIPTOR_SET, MESSAGING_SERVICE};
use prost::Message as _;

#[test]
fn table_matches_the_service_in_the_protos() {
    let fds = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    let service = fds
        .file
        .iter()
        .filter(|f| f.package() == "apache.rocketmq.v2")
        .flat_map(|f| &f.service)
        .find(|s| format!("apache.rocketmq.v2.{}", s.name()) == MESSAGING_SERVICE)
        .unwrap();
    let from_protos: Vec<(&str, RpcKind)> = service
        .method
        .iter()
        .map(|m| {
            let kind = match (m.client_streaming(), m.server_streaming()) {
                (false, false) => RpcKind::Unary,
                (false, true) => RpcKind::ServerStreaming,
                (true, true) => RpcKind::Bidirectional,
                (true, false) => panic!("{} is client-streaming", m.name()),
            };
            (m.name(), kind)
        })
        .collect();
    let from_table: Vec<(&str, RpcKind)> = Rpc::ALL.iter().map(|r| (r.name(), r.kind())).collect();
    assert_eq!(from_table, from_protos);
}

#[test]
fn every_path_round_trips() {
    for &rpc in Rpc::ALL {
        assert_eq!(Rpc::from_path(rpc.path()), Some(rpc), "{rpc:?}");
    }
    assert_eq!(
        Rpc::QueryRoute.path(),
        "/apache.rocketmq.v2.MessagingService/QueryRoute"
    );
    assert_eq!(Rpc::Telemetry.kind(), RpcKind::Bidirectional);
    assert_eq!(Rpc::ReceiveMessage.kind(), RpcKind::ServerStreaming);
    assert_eq!(Rpc::SendMessage.kind(), RpcKind::Unary);
}

#[test]
fn unknown_paths_are_none() {
    for path in [
        "",
        "/",
        "/apache.rocketmq.v2.MessagingService/",
        "/apache.rocketmq.v2.MessagingService/queryroute",
        "/apache.rocketmq.v2.MessagingService/QueryRoute/",
        "/apache.rocketmq.v2.MessagingService/QueryRoute?x=1",
        "apache.rocketmq.v2.MessagingService/QueryRoute",
        "/apache.rocketmq.v1.MessagingService/QueryRoute",
        "/apache.rocketmq.v2.Admin/QueryMessage",
        "/apache.rocketmq.v2.Admin/GetTopicRoute",
        "/grpc.health.v1.Health/Check",
    ] {
        assert_eq!(Rpc::from_path(path), None, "{path:?}");
    }
}
