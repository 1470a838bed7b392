//! gRPC unary calls over HTTP/2 on one glommio executor: a loopback listener served by
//! `grpc_h2::serve` with a test handler, and h2's client driven on the same executor through
//! the same adapter.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};
use grpc_h2::h2::client::SendRequest;
use grpc_h2::http::{Method, Request};
use grpc_h2::{
    encode_message, serve, Call, CallKind, Code, Compat, GrpcStatus, Handler, Limits, Replies,
    Requests,
};

/// Unary `/test.Echo/...`: `Echo` echoes with a prefix; `Fail` ends with NOT_FOUND; `Wait`
/// answers only once a `Release` call has arrived; `Meta` answers the `x-mq-client-id`
/// metadata. Server-streaming `/test.Stream/...`, see `server_streaming`; bidirectional
/// `/test.Chat/Chat`, see `bidirectional`.
struct TestHandler {
    gate: glommio::sync::Semaphore,
}

impl Handler for TestHandler {
    fn kind(&self, path: &str) -> CallKind {
        if path.starts_with("/test.Stream/") {
            CallKind::ServerStreaming
        } else if path.starts_with("/test.Chat/") {
            CallKind::Bidirectional
        } else {
            CallKind::Unary
        }
    }

    /// `Many` sends `count` messages of `size` bytes (the request is `count,size`), message
    /// `i` filled with `'a' + i % 26`; `FailAfterOne` sends one and ends ABORTED; `None`
    /// sends none.
    async fn server_streaming(
        &self,
        call: Call,
        message: Bytes,
        replies: &mut Replies,
    ) -> Result<(), GrpcStatus> {
        match call.path.as_str() {
            "/test.Stream/Many" => {
                let text = String::from_utf8_lossy(&message).into_owned();
                let (count, size) = text.split_once(',').unwrap();
                for i in 0..count.parse::<usize>().unwrap() {
                    let fill = b'a' + (i % 26) as u8;
                    replies
                        .send(vec![fill; size.parse().unwrap()].into())
                        .await?;
                }
                Ok(())
            }
            "/test.Stream/FailAfterOne" => {
                replies.send(Bytes::from_static(b"first")).await?;
                Err(GrpcStatus::new(Code::Aborted, "stopped after one"))
            }
            "/test.Stream/None" => Ok(()),
            other => Err(GrpcStatus::new(
                Code::Unimplemented,
                format!("no method {other}"),
            )),
        }
    }

    /// Sends `hello` before any request has come, then `re:<request>` for each request, and
    /// ends OK when the client ends its side; a request `bye` ends the call at once with
    /// ABORTED.
    async fn bidirectional(
        &self,
        _call: Call,
        requests: &mut Requests,
        replies: &mut Replies,
    ) -> Result<(), GrpcStatus> {
        replies.send(Bytes::from_static(b"hello")).await?;
        while let Some(request) = requests.next().await {
            let request = request?;
            if &request[..] == b"bye" {
                return Err(GrpcStatus::new(Code::Aborted, "bye"));
            }
            replies
                .send([&b"re:"[..], &request].concat().into())
                .await?;
        }
        Ok(())
    }

    async fn unary(&self, call: Call, message: Bytes) -> Result<Bytes, GrpcStatus> {
        match call.path.as_str() {
            "/test.Echo/Echo" => Ok([&b"echo:"[..], &message].concat().into()),
            "/test.Echo/Fail" => Err(GrpcStatus::new(Code::NotFound, "no such thing: ü")),
            "/test.Echo/Wait" => {
                self.gate
                    .acquire(1)
                    .await
                    .map_err(|e| GrpcStatus::new(Code::Internal, e.to_string()))?;
                Ok([&b"waited:"[..], &message].concat().into())
            }
            "/test.Echo/Release" => {
                self.gate.signal(1);
                Ok(Bytes::from_static(b"released"))
            }
            "/test.Echo/Meta" => Ok(call
                .metadata
                .get("x-mq-client-id")
                .map_or(Bytes::new(), |v| Bytes::copy_from_slice(v.as_bytes()))),
            other => Err(GrpcStatus::new(
                Code::Unimplemented,
                format!("no method {other}"),
            )),
        }
    }
}

/// What a client sees of one call.
#[derive(Debug)]
struct Answer {
    http_status: u16,
    grpc_status: Option<u32>,
    grpc_message: Option<String>,
    /// The response body, gRPC prefixes included.
    body: Bytes,
}

impl Answer {
    /// The messages of the body, in order.
    fn messages(&self) -> Vec<Bytes> {
        let mut rest = self.body.clone();
        let mut out = Vec::new();
        while !rest.is_empty() {
            assert!(rest.len() >= 5, "{self:?}");
            assert_eq!(rest[0], 0);
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            assert!(rest.len() >= 5 + len, "a cut message: {self:?}");
            out.push(rest.slice(5..5 + len));
            rest = rest.slice(5 + len..);
        }
        out
    }

    /// The one message of an OK answer.
    fn message(&self) -> &[u8] {
        assert_eq!(self.http_status, 200, "{self:?}");
        assert_eq!(self.grpc_status, Some(0), "{self:?}");
        assert!(self.body.len() >= 5, "{self:?}");
        let len = u32::from_be_bytes(self.body[1..5].try_into().unwrap()) as usize;
        assert_eq!(self.body[0], 0);
        assert_eq!(self.body.len(), 5 + len, "one message only: {self:?}");
        &self.body[5..]
    }
}

/// Runs `f` on a fresh glommio executor on this thread, failing after 5 s rather than hanging.
fn run<Fut: std::future::Future<Output = ()>>(f: impl FnOnce() -> Fut) {
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .unwrap();
    ex.run(async move {
        glommio::timer::timeout(Duration::from_secs(5), async move {
            f().await;
            Ok(())
        })
        .await
        .expect("the test did not finish within 5 s");
    });
}

/// Serves every connection to the returned address with a fresh `TestHandler` each.
fn start_server(limits: Limits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    glommio::spawn_local(async move {
        while let Ok(stream) = listener.accept().await {
            // As the broker's connection path sets it: no Nagle delay on small frames.
            stream.set_nodelay(true).unwrap();
            let handler = Rc::new(TestHandler {
                gate: glommio::sync::Semaphore::new(0),
            });
            glommio::spawn_local(async move {
                let _ = serve(Compat::new(stream), handler, limits).await;
            })
            .detach();
        }
    })
    .detach();
    addr
}

async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (send, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
        .await
        .unwrap();
    glommio::spawn_local(async move {
        let _ = conn.await;
    })
    .detach();
    send
}

async fn call_raw(
    client: &SendRequest<Bytes>,
    path: &str,
    content_type: &str,
    body: Bytes,
) -> Answer {
    let mut client = client.clone().ready().await.unwrap();
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://127.0.0.1{path}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .header("x-mq-client-id", "client-7")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    // A refused call may be reset before all of its body went out.
    let _ = send.send_data(body, true);
    let response = response.await.unwrap();
    let (parts, mut recv) = response.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    // A trailers-only answer carries the status in its headers.
    let trailers = recv.trailers().await.unwrap().unwrap_or(parts.headers);
    Answer {
        http_status: parts.status.as_u16(),
        grpc_status: trailers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().parse().unwrap()),
        grpc_message: trailers
            .get("grpc-message")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: data.freeze(),
    }
}

async fn call(client: &SendRequest<Bytes>, path: &str, payload: &[u8]) -> Answer {
    call_raw(
        client,
        path,
        "application/grpc",
        encode_message(payload).unwrap(),
    )
    .await
}

#[test]
fn unary_calls_on_one_connection() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;
        for i in 0..5 {
            let payload = format!("hello {i}");
            let a = call(&client, "/test.Echo/Echo", payload.as_bytes()).await;
            assert_eq!(a.message(), format!("echo:hello {i}").as_bytes());
            assert_eq!(a.grpc_message, None);
        }
        let empty = call(&client, "/test.Echo/Echo", b"").await;
        assert_eq!(empty.message(), b"echo:");

        let meta = call(&client, "/test.Echo/Meta", b"").await;
        assert_eq!(meta.message(), b"client-7");

        // A handler's error: trailers-only, HTTP 200, the status and its message encoded.
        let failed = call(&client, "/test.Echo/Fail", b"x").await;
        assert_eq!(failed.http_status, 200);
        assert_eq!(failed.grpc_status, Some(u32::from(Code::NotFound.as_u8())));
        assert_eq!(
            failed.grpc_message.as_deref(),
            Some("no such thing: %C3%BC")
        );
        assert!(failed.body.is_empty());

        let unknown = call(&client, "/test.Other/Nope", b"x").await;
        assert_eq!(
            unknown.grpc_status,
            Some(u32::from(Code::Unimplemented.as_u8()))
        );
        assert_eq!(
            unknown.grpc_message.as_deref(),
            Some("no method /test.Other/Nope")
        );

        // The connection still serves after the errors; a large reply (two DATA frames on
        // the server side) arrives whole.
        let big = vec![b'z'; 300 * 1024];
        let a = call(&client, "/test.Echo/Echo", &big).await;
        assert_eq!(a.message().len(), 5 + big.len());
        assert!(a.message().ends_with(&big));
    });
}

/// A connection that says nothing for the idle timeout is closed (its client sees the
/// connection end); one that keeps calling is not.
#[test]
fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    run(|| async {
        let idle_timeout = Duration::from_millis(300);
        let addr = start_server(Limits {
            idle_timeout,
            ..Limits::default()
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (idle, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
            .await
            .unwrap();
        let ended = glommio::spawn_local(conn).detach();
        let a = call(&idle, "/test.Echo/Echo", b"once").await;
        assert_eq!(a.message(), b"echo:once");

        // Calls 100 ms apart for four idle timeouts, on another connection: every one is
        // answered on it.
        let busy = connect(addr).await;
        for i in 0..12 {
            let payload = format!("busy {i}");
            let a = call(&busy, "/test.Echo/Echo", payload.as_bytes()).await;
            assert_eq!(a.message(), format!("echo:{payload}").as_bytes());
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        // By now the idle one was closed by the server: its connection task has ended.
        let ended = glommio::timer::timeout(Duration::from_secs(2), async { Ok(ended.await) })
            .await
            .expect("the idle connection is still open after eight idle timeouts");
        assert!(
            ended.is_some(),
            "the connection task was cancelled, not ended"
        );
    });
}

#[test]
fn streams_of_one_connection_are_answered_concurrently() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;
        // `Wait` is answered only after `Release`, sent after it on the same connection: the
        // server must run both calls at once.
        let waiting = {
            let client = client.clone();
            glommio::spawn_local(async move { call(&client, "/test.Echo/Wait", b"w").await })
        };
        let released = call(&client, "/test.Echo/Release", b"").await;
        assert_eq!(released.message(), b"released");
        assert_eq!(waiting.await.message(), b"waited:w");

        // Many calls in flight together, each with its own answer.
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let client = client.clone();
                glommio::spawn_local(async move {
                    let payload = format!("n{i}");
                    let a = call(&client, "/test.Echo/Echo", payload.as_bytes()).await;
                    (i, a)
                })
            })
            .collect();
        for t in tasks {
            let (i, a) = t.await;
            assert_eq!(a.message(), format!("echo:n{i}").as_bytes());
        }
    });
}

#[test]
fn server_streaming_calls_send_their_messages_then_the_status() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;
        let few = call(&client, "/test.Stream/Many", b"3,4").await;
        assert_eq!(few.http_status, 200);
        assert_eq!(few.grpc_status, Some(0));
        assert_eq!(few.messages(), [&b"aaaa"[..], b"bbbb", b"cccc"]);

        // 2.5 MiB, far over the client's 64 KiB flow-control window: the server waits for
        // room between messages and everything arrives in order.
        let many = call(&client, "/test.Stream/Many", b"40,65536").await;
        assert_eq!(many.grpc_status, Some(0));
        let messages = many.messages();
        assert_eq!(messages.len(), 40);
        for (i, m) in messages.iter().enumerate() {
            assert_eq!(m.len(), 65536);
            assert!(m.iter().all(|&b| b == b'a' + (i % 26) as u8), "message {i}");
        }

        let failed = call(&client, "/test.Stream/FailAfterOne", b"").await;
        assert_eq!(failed.http_status, 200);
        assert_eq!(failed.messages(), [&b"first"[..]]);
        assert_eq!(failed.grpc_status, Some(u32::from(Code::Aborted.as_u8())));
        assert_eq!(failed.grpc_message.as_deref(), Some("stopped after one"));

        // No message: one trailers-only answer with OK.
        let none = call(&client, "/test.Stream/None", b"").await;
        assert_eq!((none.http_status, none.grpc_status), (200, Some(0)));
        assert!(none.body.is_empty());

        let after = call(&client, "/test.Echo/Echo", b"after").await;
        assert_eq!(after.message(), b"echo:after");
    });
}

/// Reads one whole message from a response body.
async fn read_one(body: &mut grpc_h2::h2::RecvStream, buf: &mut BytesMut) -> Bytes {
    loop {
        if buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() >= 5 + len {
                return buf.split_to(5 + len).freeze().slice(5..);
            }
        }
        let chunk = body.data().await.unwrap().unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
    }
}

/// Both directions at once on one stream: the server speaks first, answers each request as
/// it comes while the client keeps its side open, and ends with the client.
#[test]
fn bidirectional_calls_answer_each_request_as_it_comes() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;
        let open = |client: SendRequest<Bytes>| async move {
            let mut c = client.ready().await.unwrap();
            let request = Request::builder()
                .method(Method::POST)
                .uri("http://127.0.0.1/test.Chat/Chat")
                .header("content-type", "application/grpc")
                .body(())
                .unwrap();
            let (response, send) = c.send_request(request, false).unwrap();
            let (parts, body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            (send, body)
        };
        let (mut send, mut body) = open(client.clone()).await;
        let mut buf = BytesMut::new();
        // Sent before the client said anything.
        assert_eq!(&read_one(&mut body, &mut buf).await[..], b"hello");
        for word in ["one", "two"] {
            // One message in two DATA frames: put together before it is handed over.
            let framed = encode_message(word.as_bytes()).unwrap();
            send.send_data(framed.slice(..3), false).unwrap();
            send.send_data(framed.slice(3..), false).unwrap();
            let answer = read_one(&mut body, &mut buf).await;
            assert_eq!(answer, format!("re:{word}").as_bytes());
        }
        send.send_data(Bytes::new(), true).unwrap();
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(trailers["grpc-status"], "0");

        // A handler's error ends the call with its status; the connection goes on.
        let (mut send, mut body) = open(client.clone()).await;
        assert_eq!(
            &read_one(&mut body, &mut BytesMut::new()).await[..],
            b"hello"
        );
        send.send_data(encode_message(b"bye").unwrap(), false)
            .unwrap();
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(
            trailers["grpc-status"],
            Code::Aborted.as_u8().to_string().as_str()
        );
        let after = call(&client, "/test.Echo/Echo", b"after").await;
        assert_eq!(after.message(), b"echo:after");
    });
}

#[test]
fn a_call_the_client_cancels_leaves_the_connection_serving() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;
        // A call the server is still working on (`Wait`), reset by the client.
        let mut c = client.clone().ready().await.unwrap();
        let request = Request::builder()
            .method(Method::POST)
            .uri("http://127.0.0.1/test.Echo/Wait")
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let (response, mut send) = c.send_request(request, false).unwrap();
        send.send_data(encode_message(b"w").unwrap(), true).unwrap();
        let echo = call(&client, "/test.Echo/Echo", b"between").await;
        assert_eq!(echo.message(), b"echo:between");
        send.send_reset(grpc_h2::h2::Reason::CANCEL);
        assert!(response.await.is_err());

        // Its handler finishes into a closed stream; the connection goes on.
        let released = call(&client, "/test.Echo/Release", b"").await;
        assert_eq!(released.message(), b"released");
        let after = call(&client, "/test.Echo/Echo", b"after").await;
        assert_eq!(after.message(), b"echo:after");
    });
}

#[test]
fn oversized_message_is_refused_and_the_connection_goes_on() {
    run(|| async {
        let limits = Limits {
            message_bytes_max: 64 * 1024,
            ..Limits::default()
        };
        let addr = start_server(limits);
        let client = connect(addr).await;
        // Exactly at the bound is served.
        let at_max = vec![b'a'; 64 * 1024];
        let a = call(&client, "/test.Echo/Echo", &at_max).await;
        assert_eq!(&a.message()[5..], &at_max[..]);

        let over = vec![b'b'; 64 * 1024 + 1];
        let refused = call(&client, "/test.Echo/Echo", &over).await;
        assert_eq!(refused.http_status, 200);
        assert_eq!(
            refused.grpc_status,
            Some(u32::from(Code::ResourceExhausted.as_u8())),
            "{refused:?}"
        );
        assert_eq!(
            refused.grpc_message.as_deref(),
            Some("a request message of 65537 bytes is over the 65536 allowed")
        );

        // Far over the bound and beyond the flow-control window: refused from its prefix.
        let huge = vec![b'c'; 3 * 1024 * 1024];
        let refused = call(&client, "/test.Echo/Echo", &huge).await;
        assert_eq!(
            refused.grpc_status,
            Some(u32::from(Code::ResourceExhausted.as_u8()))
        );

        let next = call(&client, "/test.Echo/Echo", b"after").await;
        assert_eq!(next.message(), b"echo:after");
    });
}

#[test]
fn malformed_calls_are_refused_with_a_status() {
    run(|| async {
        let addr = start_server(Limits::default());
        let client = connect(addr).await;

        let json = call_raw(
            &client,
            "/test.Echo/Echo",
            "application/json",
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(json.http_status, 415);
        assert_eq!(
            json.grpc_status,
            Some(u32::from(Code::InvalidArgument.as_u8()))
        );
        assert_eq!(
            json.grpc_message.as_deref(),
            Some("content-type application/json is not application/grpc")
        );

        // A subtype is still gRPC.
        let proto = call_raw(
            &client,
            "/test.Echo/Echo",
            "application/grpc+proto",
            encode_message(b"p").unwrap(),
        )
        .await;
        assert_eq!(proto.message(), b"echo:p");

        // Cut inside the prefix, cut inside the message, two messages, compressed.
        let cases: [(&[u8], Code); 4] = [
            (&[0, 0, 0], Code::Internal),
            (&[0, 0, 0, 0, 9, b'x'], Code::Internal),
            (
                &[0, 0, 0, 0, 1, b'x', 0, 0, 0, 0, 1, b'y'],
                Code::Unimplemented,
            ),
            (&[1, 0, 0, 0, 1, b'x'], Code::Unimplemented),
        ];
        for (body, code) in cases {
            let a = call_raw(
                &client,
                "/test.Echo/Echo",
                "application/grpc",
                Bytes::copy_from_slice(body),
            )
            .await;
            assert_eq!(
                a.grpc_status,
                Some(u32::from(code.as_u8())),
                "{body:?}: {a:?}"
            );
            assert!(a.body.is_empty());
        }

        let next = call(&client, "/test.Echo/Echo", b"still").await;
        assert_eq!(next.message(), b"echo:still");
    });
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Round trips of a small unary call (64 bytes each way), the server on its own executor
/// thread and the client on this one: calls per second, and CPU per call on each side, one
/// call at a time and 32 in flight on one connection; beside it the same round trip as a bare
/// length-prefixed echo over glommio's TCP, what HTTP/2 and gRPC add to.
/// `cargo test --release -p grpc-h2 --test unary -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_small_unary_calls() {
    let calls = 20_000u32;
    for in_flight in [1u32, 32] {
        let (addr, server) = server_thread(|stream| async move {
            let handler = Rc::new(TestHandler {
                gate: glommio::sync::Semaphore::new(0),
            });
            let _ = serve(Compat::new(stream), handler, Limits::default()).await;
        });
        let (wall, client_cpu) = run_long(move || async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (client, conn) = grpc_h2::h2::client::handshake(Compat::new(tcp))
                .await
                .unwrap();
            let conn = glommio::spawn_local(async move {
                let _ = conn.await;
            });
            let payload = vec![b'm'; 64];
            let (wall, cpu) = (Instant::now(), thread_cpu());
            let tasks: Vec<_> = (0..in_flight)
                .map(|_| {
                    let client = client.clone();
                    let payload = payload.clone();
                    glommio::spawn_local(async move {
                        for _ in 0..calls / in_flight {
                            let a = call(&client, "/test.Echo/Echo", &payload).await;
                            assert_eq!(a.grpc_status, Some(0));
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await;
            }
            let measured = (wall.elapsed(), thread_cpu() - cpu);
            // The connection closes once no handle is left: the server's `serve` returns.
            drop(client);
            conn.await;
            measured
        });
        let server_cpu = server.join().unwrap();
        report(
            &format!("gRPC over h2, {in_flight} in flight"),
            calls,
            wall,
            client_cpu,
            server_cpu,
        );
    }

    for in_flight in [1usize, 32] {
        let (addr, server) = server_thread(|stream| async move {
            use futures_lite::{AsyncReadExt, AsyncWriteExt};
            let mut r = futures_lite::io::BufReader::new(stream);
            let mut prefix = [0u8; 5];
            let mut replies = Vec::new();
            while r.read_exact(&mut prefix).await.is_ok() {
                let len = u32::from_be_bytes(prefix[1..5].try_into().unwrap()) as usize;
                let mut payload = vec![0u8; len];
                r.read_exact(&mut payload).await.unwrap();
                replies.extend_from_slice(
                    &encode_message(&[&b"echo:"[..], &payload].concat()).unwrap(),
                );
                // Answers what has arrived in one write, as the remoting writer batches.
                if r.buffer().is_empty() {
                    r.get_mut().write_all(&replies).await.unwrap();
                    replies.clear();
                }
            }
        });
        let (wall, client_cpu) = run_long(move || async move {
            use futures_lite::{AsyncReadExt, AsyncWriteExt};
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let request = encode_message(&[b'm'; 64]).unwrap().repeat(in_flight);
            let mut reply = vec![0u8; (5 + 5 + 64) * in_flight];
            let (wall, cpu) = (Instant::now(), thread_cpu());
            for _ in 0..calls as usize / in_flight {
                tcp.write_all(&request).await.unwrap();
                tcp.read_exact(&mut reply).await.unwrap();
            }
            (wall.elapsed(), thread_cpu() - cpu)
        });
        let server_cpu = server.join().unwrap();
        report(
            &format!("bare length-prefixed echo, {in_flight} in flight"),
            calls,
            wall,
            client_cpu,
            server_cpu,
        );
    }
}

/// A server on an executor thread of its own that serves one connection with `serve_one`,
/// answering the CPU time that took.
fn server_thread<F, Fut>(serve_one: F) -> (SocketAddr, glommio::ExecutorJoinHandle<Duration>)
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .spawn(move || async move {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let stream = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let cpu = thread_cpu();
            serve_one(stream).await;
            thread_cpu() - cpu
        })
        .unwrap();
    (rx.recv().unwrap(), handle)
}

fn report(what: &str, calls: u32, wall: Duration, client_cpu: Duration, server_cpu: Duration) {
    let per_call_us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(calls);
    println!(
        "{what}: {calls} calls in {wall:?}: {:.0} calls/s; CPU per call: server {:.1} µs, client {:.1} µs",
        f64::from(calls) / wall.as_secs_f64(),
        per_call_us(server_cpu),
        per_call_us(client_cpu),
    );
}

/// `run` without its 5 s bound, for the measurement.
fn run_long<T, Fut: std::future::Future<Output = T>>(f: impl FnOnce() -> Fut) -> T {
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .unwrap();
    ex.run(f())
}
