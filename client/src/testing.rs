//! An in-process fake server speaking the protocol on 127.0.0.1, for unit tests: it plays
//! NameServer, broker, or both, answering through a handler closure.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use protocol::blocking::{write_frame, FrameReader};
use protocol::{perm, BrokerData, Command, Frame, Header, QueueData, ResponseCode, RouteData};

/// What the fake does with one request.
pub(crate) enum Reply {
    Send(Header, Vec<u8>),
    /// Answer after a delay, without holding up later requests.
    Later(Duration, Header, Vec<u8>),
    /// Never answer.
    Ignore,
    /// Close the connection.
    Close,
}

pub(crate) type Handler = Arc<dyn Fn(&Frame) -> Reply + Send + Sync>;

pub(crate) struct FakeServer {
    pub addr: String,
    stop: Arc<AtomicBool>,
    /// Every request header received, in arrival order.
    pub requests: Arc<Mutex<Vec<Header>>>,
}

impl FakeServer {
    pub fn start(handler: impl Fn(&Frame) -> Reply + Send + Sync + 'static) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let (stop2, requests2) = (Arc::clone(&stop), Arc::clone(&requests));
        thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (h, s, r) = (
                            Arc::clone(&handler),
                            Arc::clone(&stop2),
                            Arc::clone(&requests2),
                        );
                        thread::spawn(move || serve(stream, h, s, r));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FakeServer {
            addr,
            stop,
            requests,
        }
    }

    pub fn request_count(&self, name: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.command.name() == name)
            .count()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn serve(
    stream: TcpStream,
    handler: Handler,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Header>>>,
) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut reader = FrameReader::new(stream, protocol::FRAME_BYTES_MAX_DEFAULT);
    while !stop.load(Ordering::Acquire) {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(protocol::ProtocolError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        };
        requests.lock().unwrap().push(frame.header.clone());
        if frame.header.is_oneway() {
            let _ = handler(&frame);
            continue;
        }
        match handler(&frame) {
            Reply::Send(h, body) => {
                let _ = write_frame(&mut *writer.lock().unwrap(), &h, &body);
            }
            Reply::Later(d, h, body) => {
                let w = Arc::clone(&writer);
                thread::spawn(move || {
                    thread::sleep(d);
                    let _ = write_frame(&mut *w.lock().unwrap(), &h, &body);
                });
            }
            Reply::Ignore => {}
            Reply::Close => {
                let _ = reader.get_ref().shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

pub(crate) fn ok(request: &Frame, command: Command) -> Reply {
    Reply::Send(
        Header::response(request.header.request_id, ResponseCode::Success, command),
        Vec::new(),
    )
}

pub(crate) fn error(request: &Frame, code: ResponseCode) -> Reply {
    Reply::Send(
        Header::error(
            request.header.request_id,
            code,
            format!("fake {}", code.name()),
        ),
        Vec::new(),
    )
}

/// A broker for route data: name, master address, core addresses, shard count.
pub(crate) fn broker(name: &str, addr: &str, core_addrs: &[&str], shard_count: u16) -> BrokerData {
    BrokerData {
        cluster: "DefaultCluster".into(),
        broker_name: name.into(),
        addrs: vec![(0, addr.into())],
        core_addrs: core_addrs.iter().map(|s| s.to_string()).collect(),
        shard_count,
    }
}

/// A route giving every broker `queues` read and write queues.
pub(crate) fn route(brokers: Vec<BrokerData>, queues: u32) -> RouteData {
    let queue_data = brokers
        .iter()
        .map(|b| QueueData {
            broker_name: b.broker_name.clone(),
            read_queues: queues,
            write_queues: queues,
            perm: perm::READ_WRITE,
        })
        .collect();
    RouteData {
        brokers,
        queues: queue_data,
    }
}

/// A NameServer that knows one topic.
pub(crate) fn namesrv(topic: &'static str, data: RouteData) -> FakeServer {
    FakeServer::start(move |f| match &f.header.command {
        Command::GetRoute { topic: t } if t == topic => ok(f, Command::Route(data.clone())),
        Command::GetRoute { .. } => error(f, ResponseCode::TopicNotExist),
        _ => error(f, ResponseCode::RequestCodeNotSupported),
    })
}

/// Stamps the records of a send body as a broker would, for pull bodies.
pub(crate) fn stored(body: &[u8], queue_id: u32, first_queue_offset: u64) -> Vec<u8> {
    let mut out = body.to_vec();
    let mut pos = 0;
    let mut i = 0;
    while pos < out.len() {
        let len = message::RecordView::parse(&out[pos..]).unwrap().len();
        message::stamp_record(
            &mut out[pos..pos + len],
            &message::StoreStamp {
                queue_id,
                queue_offset: first_queue_offset + i,
                physical_offset: 1000 + pos as u64,
                store_timestamp_ms: 1_700_000_000_000,
                store_host: "127.0.0.1:10911".parse().unwrap(),
            },
        )
        .unwrap();
        pos += len;
        i += 1;
    }
    out
}
