//! The RPCs of `apache.rocketmq.v2.MessagingService`: HTTP/2 path and call shape of each.
//!
//! A gRPC request names its method in the `:path` pseudo-header as `/<service>/<method>`,
//! so [`Rpc::from_path`] is the server's whole dispatch table. The list is checked against
//! the service in the vendored `service.proto` by this crate's tests.

/// Full protobuf name of the service.
pub const MESSAGING_SERVICE: &str = "apache.rocketmq.v2.MessagingService";

/// How requests and responses of an RPC flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcKind {
    /// One request message, one response message.
    Unary,
    /// One request message, a stream of response messages.
    ServerStreaming,
    /// Streams both ways on one HTTP/2 stream.
    Bidirectional,
}

macro_rules! rpcs {
    ($($name:ident: $kind:ident,)*) => {
        /// One RPC of `apache.rocketmq.v2.MessagingService`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Rpc {
            $($name,)*
        }

        impl Rpc {
            /// Every RPC, in the order `service.proto` declares them.
            pub const ALL: &'static [Rpc] = &[$(Rpc::$name,)*];

            /// The method name, as in `service.proto`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Rpc::$name => stringify!($name),)*
                }
            }

            /// The HTTP/2 `:path` of a call: `/apache.rocketmq.v2.MessagingService/<name>`.
            pub fn path(self) -> &'static str {
                match self {
                    $(Rpc::$name => concat!("/apache.rocketmq.v2.MessagingService/", stringify!($name)),)*
                }
            }

            /// Whether the call is unary or streams.
            pub fn kind(self) -> RpcKind {
                match self {
                    $(Rpc::$name => RpcKind::$kind,)*
                }
            }

            /// The RPC a request's `:path` names; `None` for any other path, including
            /// the methods of other services such as `Admin`.
            pub fn from_path(path: &str) -> Option<Rpc> {
                match path {
                    $(concat!("/apache.rocketmq.v2.MessagingService/", stringify!($name)) => Some(Rpc::$name),)*
                    _ => None,
                }
            }
        }
    };
}

rpcs! {
    QueryRoute: Unary,
    Heartbeat: Unary,
    SendMessage: Unary,
    QueryAssignment: Unary,
    ReceiveMessage: ServerStreaming,
    AckMessage: Unary,
    ForwardMessageToDeadLetterQueue: Unary,
    PullMessage: ServerStreaming,
    UpdateOffset: Unary,
    GetOffset: Unary,
    QueryOffset: Unary,
    EndTransaction: Unary,
    Telemetry: Bidirectional,
    NotifyClientTermination: Unary,
    ChangeInvisibleDuration: Unary,
    RecallMessage: Unary,
    SyncLiteSubscription: Unary,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_service_and_name() {
        for rpc in Rpc::ALL {
            assert_eq!(
                rpc.path(),
                format!("/{MESSAGING_SERVICE}/{}", rpc.name()),
                "{rpc:?}"
            );
        }
    }
}
