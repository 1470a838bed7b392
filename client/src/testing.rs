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
        member_core_addrs: vec![],
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

/// What a fake broker stored, and how it should misbehave.
#[derive(Default)]
pub(crate) struct BrokerState {
    /// Stamped records by queue id.
    pub queues: Mutex<std::collections::HashMap<u32, Vec<Vec<u8>>>>,
    commit_log_bytes: Mutex<u64>,
    /// Sends still to be refused with `SystemBusy`; `u64::MAX` refuses all.
    pub busy_sends: std::sync::atomic::AtomicU64,
    /// Answers every send as a broker in its graceful stop does: `ServiceNotAvailable`.
    pub stopping: std::sync::atomic::AtomicBool,
    /// Answers every send as a broker over a quota does: `FlowControl`, retry after this
    /// many ms (0: no quota).
    pub quota_retry_after_ms: std::sync::atomic::AtomicU64,
    pub shard: u16,
}

impl BrokerState {
    fn store(&self, queue_id: u32, body: &[u8]) -> Result<protocol::SendResult, String> {
        let mut queues = self.queues.lock().unwrap();
        let q = queues.entry(queue_id).or_default();
        let first_queue_offset = q.len() as u64;
        let mut log = self.commit_log_bytes.lock().unwrap();
        let first_commit_log_offset = *log;
        for rec in message::records(body) {
            let rec = rec.map_err(|e| e.to_string())?;
            let mut bytes = rec.as_bytes().to_vec();
            message::stamp_record(
                &mut bytes,
                &message::StoreStamp {
                    queue_id,
                    queue_offset: q.len() as u64,
                    physical_offset: *log,
                    store_timestamp_ms: crate::model::now_ms(),
                    store_host: "127.0.0.1:10911".parse().unwrap(),
                },
            )
            .map_err(|e| e.to_string())?;
            *log += bytes.len() as u64;
            q.push(bytes);
        }
        Ok(protocol::SendResult {
            queue_id,
            first_queue_offset,
            first_commit_log_offset,
            shard: self.shard,
            store_host: "127.0.0.1:10911".into(),
        })
    }

    pub fn count(&self, queue_id: u32) -> usize {
        self.queues
            .lock()
            .unwrap()
            .get(&queue_id)
            .map_or(0, Vec::len)
    }

    pub fn total(&self) -> usize {
        self.queues.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// A broker that stores sends in memory and serves pulls, offsets and searches from them.
pub(crate) fn fake_broker(shard: u16) -> (FakeServer, Arc<BrokerState>) {
    let state = Arc::new(BrokerState {
        shard,
        ..BrokerState::default()
    });
    let st = Arc::clone(&state);
    let server = FakeServer::start(move |f| handle_broker(&st, f));
    (server, state)
}

fn handle_broker(st: &BrokerState, f: &Frame) -> Reply {
    use std::sync::atomic::Ordering::SeqCst;
    let id = f.header.request_id;
    match &f.header.command {
        Command::Send(req) => {
            if st.stopping.load(SeqCst) {
                return Reply::Send(
                    Header::error(
                        id,
                        ResponseCode::ServiceNotAvailable,
                        "broker is shutting down",
                    ),
                    vec![],
                );
            }
            let retry_after_ms = st.quota_retry_after_ms.load(SeqCst);
            if retry_after_ms > 0 {
                return Reply::Send(
                    Header::refusal(
                        id,
                        ResponseCode::FlowControl,
                        format!("fake quota; retry after {retry_after_ms} ms"),
                        Some(retry_after_ms),
                    ),
                    vec![],
                );
            }
            let busy = st.busy_sends.load(SeqCst);
            if busy > 0 {
                if busy != u64::MAX {
                    st.busy_sends.fetch_sub(1, SeqCst);
                }
                return error(f, ResponseCode::SystemBusy);
            }
            if message::records(&f.body).count() != req.count as usize {
                return error(f, ResponseCode::BadRequest);
            }
            match st.store(req.queue_id, &f.body) {
                Ok(r) => ok(f, Command::SendResult(r)),
                Err(e) => Reply::Send(Header::error(id, ResponseCode::MessageIllegal, e), vec![]),
            }
        }
        Command::Pull(req) => {
            let queues = st.queues.lock().unwrap();
            let q = queues.get(&req.queue_id).map(Vec::as_slice).unwrap_or(&[]);
            let max = q.len() as u64;
            let result = |next_offset| protocol::PullResult {
                next_offset,
                min_offset: 0,
                max_offset: max,
                count: 0,
                suggested_broker_id: 0,
            };
            if req.queue_offset > max {
                return Reply::Send(
                    Header::response(
                        id,
                        ResponseCode::PullOffsetMoved,
                        Command::PullResult(result(max)),
                    ),
                    vec![],
                );
            }
            if req.queue_offset == max {
                let h = Header::response(
                    id,
                    ResponseCode::PullNotFound,
                    Command::PullResult(result(max)),
                );
                let hold = Duration::from_millis(req.suspend_timeout_ms.min(100));
                return Reply::Later(hold, h, vec![]);
            }
            let filter = message::TagFilter::parse(&req.tag_expression);
            let mut body = Vec::new();
            let mut next = req.queue_offset;
            let mut count = 0;
            for rec in &q[req.queue_offset as usize..] {
                if count == req.max_messages {
                    break;
                }
                next += 1;
                let view = message::RecordView::parse(rec).unwrap();
                if filter.matches_code(view.tag_hash()) {
                    body.extend_from_slice(rec);
                    count += 1;
                }
            }
            let mut r = result(next);
            r.count = count;
            Reply::Send(
                Header::response(id, ResponseCode::Success, Command::PullResult(r)),
                body,
            )
        }
        Command::GetQueueOffsets { queue_id, .. } => ok(
            f,
            Command::QueueOffsets {
                min_offset: 0,
                max_offset: st.count(*queue_id) as u64,
            },
        ),
        Command::SearchOffsetByTime { .. } => ok(f, Command::Offset(0)),
        Command::CreateTopic(_) => ok(f, Command::Empty),
        // A group of one: every member alone, no offsets stored, every lease granted.
        Command::ConsumerHeartbeat(hb) => ok(
            f,
            Command::GroupMembers(protocol::GroupMembers {
                version: 1,
                members: vec![hb.client_id.clone()],
                retry_delay_levels_ms: vec![10, 20, 30],
            }),
        ),
        Command::WaitGroupChange { timeout_ms, .. } => Reply::Later(
            Duration::from_millis((*timeout_ms).min(100)),
            Header::response(
                id,
                ResponseCode::Success,
                Command::GroupMembers(protocol::GroupMembers {
                    version: 1,
                    members: Vec::new(),
                    retry_delay_levels_ms: vec![10, 20, 30],
                }),
            ),
            vec![],
        ),
        Command::UnregisterConsumer { .. } | Command::LockQueue { .. } => ok(f, Command::Empty),
        Command::QueryConsumerOffset(_) | Command::CommitConsumerOffset(_) => ok(
            f,
            Command::ConsumerOffset {
                offset: None,
                epoch: 0,
                last_commit_ms: 0,
                consume_tps_milli: 0,
                skipped_records: 0,
            },
        ),
        _ => error(f, ResponseCode::RequestCodeNotSupported),
    }
}

/// The encode settings the record tests use: compression above 4 KiB, 4 MiB messages.
pub(crate) fn encode_options() -> crate::model::EncodeOptions {
    crate::model::EncodeOptions {
        compress_threshold_bytes: 4096,
        compress_level: 3,
        message_bytes_max: 4 * 1024 * 1024,
        born_host: "10.1.2.3:0".parse().unwrap(),
    }
}
