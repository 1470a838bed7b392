//! gRPC, RocketMQ 5's clients' protocol, on a broker core: the transport ([`grpc_h2`]).
//! [`serve_grpc`] runs the HTTP/2 server on the connection's own core, after the connection
//! path has read the first bytes and told HTTP/2 apart (`remoting::detect`); the calls go to
//! a [`Handler`] with their messages as opaque bytes. The connection path still closes gRPC
//! clients (`crate::rocketmq::refuse_grpc`) until a handler for
//! `apache.rocketmq.v2.MessagingService` exists to pass here.

use std::rc::Rc;

use broker_base::tls::Stream;
use bytes::Bytes;
use grpc_h2::Compat;

pub use grpc_h2::{Call, Code, GrpcStatus, Handler, Limits};

/// Serves gRPC on `stream` until the client goes away. `read_ahead` holds the bytes already
/// read from it (the HTTP/2 preface, at least in part); h2 reads them first. Runs on the
/// glommio executor of the calling core: the connection in this task, each call in a local
/// task of its own.
pub async fn serve_grpc<H: Handler>(
    stream: Stream,
    read_ahead: Bytes,
    peer: &str,
    handler: Rc<H>,
    limits: Limits,
) {
    // h2 writes small frames (WINDOW_UPDATE, headers, trailers) a peer waits for: Nagle's
    // delay would hold them until the peer's delayed ACK, tens of milliseconds.
    let _ = stream.tcp().set_nodelay(true);
    match grpc_h2::serve(Compat::with_prefix(stream, read_ahead), handler, limits).await {
        Ok(()) => tracing::debug!(%peer, "a gRPC client closed its connection"),
        Err(e) => tracing::debug!(%peer, "a gRPC connection ended: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::AsyncReadExt;
    use glommio::net::{TcpListener, TcpStream};
    use grpc_h2::http::{Method, Request};
    use remoting::detect::{detect, Detected};

    struct Echo;

    impl Handler for Echo {
        async fn unary(&self, call: Call, message: Bytes) -> Result<Bytes, GrpcStatus> {
            Ok([call.path.as_bytes(), b" ", &message].concat().into())
        }
    }

    /// As the connection path will do it: read the first bytes, detect HTTP/2, hand the
    /// socket and those bytes over; a client's call is answered.
    #[test]
    fn a_detected_http2_connection_is_served_with_its_first_bytes() {
        shard::run_local(|| async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            glommio::spawn_local(async move {
                let mut stream = Stream::Plain(listener.accept().await.unwrap());
                let mut first = vec![0u8; 64];
                let mut n = 0;
                let detected = loop {
                    n += stream.read(&mut first[n..]).await.unwrap();
                    match detect(&first[..n]) {
                        Detected::NeedMore => continue,
                        d => break d,
                    }
                };
                assert!(matches!(detected, Detected::Http2));
                first.truncate(n);
                serve_grpc(
                    stream,
                    first.into(),
                    "test",
                    Rc::new(Echo),
                    Limits::default(),
                )
                .await;
            })
            .detach();

            let tcp = TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (client, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
                .await
                .unwrap();
            glommio::spawn_local(async move {
                let _ = conn.await;
            })
            .detach();
            let mut client = client.ready().await.unwrap();
            let request = Request::builder()
                .method(Method::POST)
                .uri("http://127.0.0.1/apache.rocketmq.v2.MessagingService/Heartbeat")
                .header("content-type", "application/grpc")
                .body(())
                .unwrap();
            let (response, mut send) = client.send_request(request, false).unwrap();
            send.send_data(grpc_h2::encode_message(b"hb").unwrap(), true)
                .unwrap();
            let (parts, mut body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                data.extend_from_slice(&chunk.unwrap());
            }
            let trailers = body.trailers().await.unwrap().unwrap();
            assert_eq!(trailers["grpc-status"], "0");
            let expected =
                grpc_h2::encode_message(b"/apache.rocketmq.v2.MessagingService/Heartbeat hb")
                    .unwrap();
            assert_eq!(data, expected);
        });
    }
}
