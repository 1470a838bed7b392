//! A tiny NameServer plus broker, built only from this crate's codec, that real RocketMQ
//! clients can talk to on loopback. It answers just enough for a producer (route, send,
//! batch send) and a push consumer (heartbeat, consumer list, offsets, pull) to round-trip
//! messages, and writes every request frame it receives, as hex, into a directory. Those
//! files become the fixtures under `remoting/tests/fixtures/`.
//!
//! ```text
//! cargo run -p remoting --example capture_server -- OUT_DIR [NAMESRV_PORT] [BROKER_PORT] [SECONDS]
//! ```
//!
//! `FASTJSON=1` forces fastjson's unquoted `brokerAddrs` keys in route answers. It stops by
//! itself after SECONDS (default 60). Only loopback addresses are used.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use remoting::body::{self, BrokerData, JsonForm, QueueData, TopicRouteData};
use remoting::codes::{request, response};
use remoting::headers::*;
use remoting::message::{self, StoredMessage};
use remoting::{Decoded, Frame, RemotingCommand, RemotingDecoder};

const QUEUES: i32 = 4;

#[derive(Default)]
struct State {
    /// (topic, queue) -> stored records, in queue-offset order.
    queues: BTreeMap<(String, i32), Vec<StoredMessage>>,
    next_physical_offset: i64,
    client_ids: BTreeMap<String, Vec<String>>,
}

struct Server {
    out_dir: PathBuf,
    seq: AtomicUsize,
    broker_addr: SocketAddr,
    fastjson: bool,
    state: Mutex<State>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out_dir = PathBuf::from(args.get(1).cloned().unwrap_or_else(|| "capture".into()));
    let ns_port: u16 = args.get(2).map_or(19876, |s| s.parse().unwrap());
    let broker_port: u16 = args.get(3).map_or(20911, |s| s.parse().unwrap());
    let seconds: u64 = args.get(4).map_or(60, |s| s.parse().unwrap());
    std::fs::create_dir_all(&out_dir).unwrap();
    let broker_addr: SocketAddr = format!("127.0.0.1:{broker_port}").parse().unwrap();
    let server = Arc::new(Server {
        out_dir,
        seq: AtomicUsize::new(0),
        broker_addr,
        fastjson: std::env::var("FASTJSON").is_ok_and(|v| v == "1"),
        state: Mutex::new(State::default()),
    });
    for (port, role) in [(ns_port, "namesrv"), (broker_port, "broker")] {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let server = server.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let server = server.clone();
                std::thread::spawn(move || serve(server, stream, role));
            }
        });
    }
    println!("listening: namesrv 127.0.0.1:{ns_port}, broker {broker_addr}");
    std::thread::sleep(Duration::from_secs(seconds));
    println!("done after {seconds} s");
}

fn serve(server: Arc<Server>, stream: TcpStream, role: &'static str) {
    let peer = stream.peer_addr().unwrap();
    let writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut reader = stream;
    let mut decoder = RemotingDecoder::default();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let before = buf.clone().freeze();
            match decoder.decode(&mut buf) {
                Ok(Some(Decoded::Frame(frame))) => {
                    let used = before.len() - buf.len();
                    server.record(role, &frame, &before[..used]);
                    server.clone().answer(frame, peer, writer.clone());
                }
                Ok(Some(Decoded::Oversized { frame_len, .. })) => {
                    println!("{role}: oversized frame of {frame_len} bytes");
                }
                Ok(None) => break,
                Err(e) => {
                    println!("{role}: undecodable stream: {e}");
                    return;
                }
            }
        }
    }
}

fn send(writer: &Mutex<TcpStream>, cmd: &RemotingCommand, body: &[u8]) {
    let wire = remoting::encode(cmd, body).unwrap();
    let _ = writer.lock().unwrap().write_all(&wire);
}

impl Server {
    fn record(&self, role: &str, frame: &Frame, wire: &[u8]) {
        let cmd = &frame.command;
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let name = request::name(cmd.code).unwrap_or("UNKNOWN");
        let kind = if cmd.is_response() { "resp" } else { "req" };
        let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
        let file = format!("{seq:03}-{role}-{kind}-{}-{name}.hex", cmd.code);
        let _ = std::fs::create_dir_all(&self.out_dir);
        if let Err(e) = std::fs::write(self.out_dir.join(&file), hex + "\n") {
            println!("cannot write {file}: {e}");
        }
        println!(
            "{role} <- {name} ({}) {:?} lang={:?} v={} opaque={} flag={} ext={:?} body={}B",
            cmd.code,
            cmd.serialize_type,
            cmd.language,
            cmd.version,
            cmd.opaque,
            cmd.flag,
            cmd.ext_fields,
            frame.body.len()
        );
    }

    fn answer(self: Arc<Self>, frame: Frame, peer: SocketAddr, writer: Arc<Mutex<TcpStream>>) {
        let req = &frame.command;
        if req.is_response() {
            return;
        }
        let ok = |h: Option<ExtFields>| {
            let r = RemotingCommand::response_to(req, response::SUCCESS, None);
            match h {
                Some(h) => r.with_ext_fields(h),
                None => r,
            }
        };
        let (resp, body): (RemotingCommand, Vec<u8>) = match req.code {
            request::GET_ROUTEINFO_BY_TOPIC => {
                let h: GetRouteInfoRequestHeader = req.ext_header().unwrap();
                let form = if self.fastjson || !h.wants_standard_json(req) {
                    JsonForm::Fastjson
                } else {
                    JsonForm::Standard
                };
                let queues = if h.topic.starts_with("%RETRY%") {
                    1
                } else {
                    QUEUES
                };
                let route = TopicRouteData {
                    broker_datas: vec![BrokerData {
                        broker_addrs: [(0, self.broker_addr.to_string())].into_iter().collect(),
                        broker_name: "broker-a".into(),
                        cluster: "DefaultCluster".into(),
                        enable_acting_master: false,
                        zone_name: None,
                    }],
                    queue_datas: vec![QueueData {
                        broker_name: "broker-a".into(),
                        perm: 6,
                        read_queue_nums: queues,
                        write_queue_nums: queues,
                        topic_sys_flag: 0,
                    }],
                    ..TopicRouteData::default()
                };
                (ok(None), body::to_json(&route, form).unwrap())
            }
            request::HEART_BEAT => {
                let hb: body::HeartbeatData = body::from_json(&frame.body).unwrap();
                println!("  heartbeat: {hb:?}");
                let mut st = self.state.lock().unwrap();
                for c in &hb.consumer_data_set {
                    let ids = st.client_ids.entry(c.group_name.clone()).or_default();
                    if !ids.contains(&hb.client_id) {
                        ids.push(hb.client_id.clone());
                    }
                }
                (ok(None), Vec::new())
            }
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
                let h: SendMessageRequestHeader = req.ext_header().unwrap();
                // The C++ client 0.4.4 sends batches as SEND_MESSAGE (10) with `batch` set.
                let parts: Vec<(i32, Bytes, String)> =
                    if req.code == request::SEND_BATCH_MESSAGE || h.batch {
                        message::decode_batch(&frame.body)
                            .unwrap()
                            .into_iter()
                            .map(|m| (m.flag, m.body, m.properties))
                            .collect()
                    } else {
                        vec![(
                            h.flag,
                            frame.body.clone(),
                            h.properties.clone().unwrap_or_default(),
                        )]
                    };
                let mut st = self.state.lock().unwrap();
                let mut ids = Vec::new();
                let mut first_offset = None;
                for (flag, body, properties) in parts {
                    let physical_offset = st.next_physical_offset;
                    let q = st.queues.entry((h.topic.clone(), h.queue_id)).or_default();
                    let queue_offset = q.len() as i64;
                    first_offset.get_or_insert(queue_offset);
                    let m = StoredMessage {
                        body_crc: message::body_crc32(&body),
                        queue_id: h.queue_id,
                        flag,
                        queue_offset,
                        physical_offset,
                        sys_flag: h.sys_flag,
                        born_timestamp: h.born_timestamp,
                        born_host: peer,
                        store_timestamp: h.born_timestamp + 1,
                        store_host: self.broker_addr,
                        reconsume_times: 0,
                        prepared_transaction_offset: 0,
                        body,
                        topic: h.topic.clone(),
                        properties,
                    };
                    ids.push(m.offset_msg_id());
                    let mut enc = Vec::new();
                    message::encode_stored(&m, &mut enc).unwrap();
                    q.push(m);
                    st.next_physical_offset += enc.len() as i64;
                }
                let header = SendMessageResponseHeader {
                    msg_id: ids.join(","),
                    queue_id: h.queue_id,
                    queue_offset: first_offset.unwrap_or(0),
                    transaction_id: None,
                    recall_handle: None,
                };
                (ok(Some(header.to_ext_fields())), Vec::new())
            }
            request::GET_CONSUMER_LIST_BY_GROUP => {
                let h: ConsumerGroupRequestHeader = req.ext_header().unwrap();
                let st = self.state.lock().unwrap();
                let list = body::ConsumerListBody {
                    consumer_id_list: st
                        .client_ids
                        .get(&h.consumer_group)
                        .cloned()
                        .unwrap_or_default(),
                };
                (ok(None), body::to_json(&list, JsonForm::Standard).unwrap())
            }
            request::QUERY_CONSUMER_OFFSET | request::GET_MIN_OFFSET => (
                ok(Some(OffsetResponseHeader { offset: 0 }.to_ext_fields())),
                Vec::new(),
            ),
            request::GET_MAX_OFFSET => {
                let h: GetMaxOffsetRequestHeader = req.ext_header().unwrap();
                let st = self.state.lock().unwrap();
                let max = st
                    .queues
                    .get(&(h.topic, h.queue_id))
                    .map_or(0, |q| q.len() as i64);
                (
                    ok(Some(OffsetResponseHeader { offset: max }.to_ext_fields())),
                    Vec::new(),
                )
            }
            request::PULL_MESSAGE => {
                let h: PullMessageRequestHeader = req.ext_header().unwrap();
                let req = req.clone();
                std::thread::spawn(move || self.pull(req, h, writer));
                return;
            }
            request::LOCK_BATCH_MQ => {
                let b: body::LockBatchRequestBody = body::from_json(&frame.body).unwrap();
                let out = body::LockBatchResponseBody {
                    lock_ok_mq_set: b.mq_set,
                };
                (ok(None), body::to_json(&out, JsonForm::Standard).unwrap())
            }
            request::UPDATE_CONSUMER_OFFSET
            | request::UNREGISTER_CLIENT
            | request::UNLOCK_BATCH_MQ
            | request::CONSUMER_SEND_MSG_BACK => (ok(None), Vec::new()),
            other => (
                RemotingCommand::response_to(
                    req,
                    response::REQUEST_CODE_NOT_SUPPORTED,
                    Some(format!(
                        "request code {other} not supported by the capture server"
                    )),
                ),
                Vec::new(),
            ),
        };
        if !req.is_oneway() {
            send(&writer, &resp, &body);
        }
    }

    /// Answers a pull with what the queue holds from the requested offset, holding it up to
    /// a second (a short long-poll) when there is nothing yet.
    fn pull(
        &self,
        req: RemotingCommand,
        h: PullMessageRequestHeader,
        writer: Arc<Mutex<TcpStream>>,
    ) {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let (records, max) = {
                let st = self.state.lock().unwrap();
                let q = st.queues.get(&(h.topic.clone(), h.queue_id));
                let max = q.map_or(0, |q| q.len() as i64);
                let mut records = Vec::new();
                if let Some(q) = q {
                    for m in q
                        .iter()
                        .skip(h.queue_offset.max(0) as usize)
                        .take(h.max_msg_nums.max(1) as usize)
                    {
                        message::encode_stored(m, &mut records).unwrap();
                    }
                }
                (records, max)
            };
            let found = !records.is_empty();
            if found || Instant::now() >= deadline {
                let next = if found {
                    remoting::message::decode_stored(&Bytes::from(records.clone()))
                        .unwrap()
                        .len() as i64
                        + h.queue_offset
                } else {
                    h.queue_offset
                };
                let code = if found {
                    response::SUCCESS
                } else {
                    response::PULL_NOT_FOUND
                };
                let header = PullMessageResponseHeader {
                    suggest_which_broker_id: 0,
                    next_begin_offset: next,
                    min_offset: 0,
                    max_offset: max,
                    ..PullMessageResponseHeader::default()
                };
                let resp = RemotingCommand::response_to(&req, code, None).with_header(&header);
                send(&writer, &resp, &records);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

use remoting::ExtFields;
