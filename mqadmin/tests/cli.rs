//! Runs the `mqadmin` binary against an in-process fake NameServer + broker on 127.0.0.1.
#![allow(clippy::unwrap_used)]

use std::net::{TcpListener, TcpStream};
use std::process::{Command as Process, Output};
use std::sync::{Arc, Mutex};
use std::thread;

use protocol::blocking::{write_frame, FrameReader};
use protocol::{
    perm, BrokerData, BrokerStatus, ClusterInfo, Command, CoreStatus, Frame, Header, PullResult,
    QueueData, ResponseCode, RouteData, TopicConfig,
};

#[derive(Default)]
struct Seen {
    created: Vec<TopicConfig>,
}

/// One server plays NameServer and broker: topic "T" with 2 queues on broker "b" at the
/// server's own address, queue 0 holding 3 messages and queue 1 holding 1.
fn start() -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (a, s) = (addr.clone(), Arc::clone(&seen));
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (a, s) = (a.clone(), Arc::clone(&s));
            thread::spawn(move || serve(stream, &a, &s));
        }
    });
    (addr, seen)
}

fn records(queue_id: u32, bodies: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let key = format!("UNIQ{queue_id}{i}");
        let props = [
            ("TAGS", "TagA"),
            ("KEYS", "k1 k2"),
            ("UNIQ_KEY", key.as_str()),
        ];
        let start = out.len();
        message::encode_record(
            &message::MessageFields {
                topic: "T",
                body,
                properties: &props,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
        message::stamp_record(
            &mut out[start..],
            &message::StoreStamp {
                queue_id,
                queue_offset: i as u64,
                physical_offset: start as u64,
                store_timestamp_ms: 1,
                store_host: "127.0.0.1:10911".parse().unwrap(),
            },
        )
        .unwrap();
    }
    out
}

fn broker_data(addr: &str) -> BrokerData {
    BrokerData {
        cluster: "C".into(),
        broker_name: "b".into(),
        addrs: vec![(0, addr.to_owned())],
        core_addrs: vec![],
        shard_count: 1,
        member_core_addrs: vec![],
    }
}

fn answer(f: &Frame, addr: &str, seen: &Mutex<Seen>) -> (Header, Vec<u8>) {
    let id = f.header.request_id;
    let ok = |c| (Header::response(id, ResponseCode::Success, c), Vec::new());
    match &f.header.command {
        Command::GetRoute { topic } if topic == "T" => ok(Command::Route(RouteData {
            brokers: vec![broker_data(addr)],
            queues: vec![QueueData {
                broker_name: "b".into(),
                read_queues: 2,
                write_queues: 2,
                perm: perm::READ_WRITE,
            }],
        })),
        Command::GetRoute { .. } => (
            Header::error(id, ResponseCode::TopicNotExist, "no such topic"),
            vec![],
        ),
        Command::GetTopicList => ok(Command::TopicList(vec!["T".into(), "A".into()])),
        Command::GetClusterInfo => ok(Command::ClusterInfo(ClusterInfo {
            brokers: vec![broker_data(addr)],
        })),
        Command::CreateTopic(c) => {
            seen.lock().unwrap().created.push(c.clone());
            ok(Command::Empty)
        }
        Command::GetQueueOffsets { queue_id, .. } => ok(Command::QueueOffsets {
            min_offset: 0,
            max_offset: if *queue_id == 0 { 3 } else { 1 },
        }),
        Command::Pull(p) => {
            let (all, n): (Vec<u8>, u64) = if p.queue_id == 0 {
                (records(0, &[b"zero", b"one", &[0xff, 0xfe]]), 3)
            } else {
                (records(1, &[b"other"]), 1)
            };
            if p.queue_offset >= n {
                let r = PullResult {
                    next_offset: n,
                    min_offset: 0,
                    max_offset: n,
                    count: 0,
                    suggested_broker_id: 0,
                };
                return (
                    Header::response(id, ResponseCode::PullNotFound, Command::PullResult(r)),
                    vec![],
                );
            }
            // Serve the records from the requested offset on.
            let mut body = Vec::new();
            for (i, rec) in message::records(&all).enumerate() {
                if i as u64 >= p.queue_offset {
                    body.extend_from_slice(rec.unwrap().as_bytes());
                }
            }
            let r = PullResult {
                next_offset: n,
                min_offset: 0,
                max_offset: n,
                count: (n - p.queue_offset) as u32,
                suggested_broker_id: 0,
            };
            (
                Header::response(id, ResponseCode::Success, Command::PullResult(r)),
                body,
            )
        }
        Command::BrokerStatus => ok(Command::BrokerStatusResult(BrokerStatus {
            broker_name: "b".into(),
            cluster: "C".into(),
            uptime_ms: 5,
            shard_count: 2,
            cores: vec![CoreStatus {
                core: 0,
                shards: vec![0, 1],
                requests: 42,
                quarantined_ranges: 2,
                quarantined_bytes: 1500,
                skipped_records: 7,
                ..CoreStatus::default()
            }],
        })),
        _ => (
            Header::error(id, ResponseCode::RequestCodeNotSupported, "nope"),
            vec![],
        ),
    }
}

fn serve(stream: TcpStream, addr: &str, seen: &Mutex<Seen>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = FrameReader::new(stream, 1 << 24);
    while let Ok(Some(f)) = reader.next_frame() {
        let (h, body) = answer(&f, addr, seen);
        if write_frame(&mut writer, &h, &body).is_err() {
            return;
        }
    }
}

fn mqadmin(ns: &str, args: &[&str]) -> Output {
    Process::new(env!("CARGO_BIN_EXE_mqadmin"))
        .arg("-n")
        .arg(ns)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}, stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn topic_list_and_route() {
    let (ns, _) = start();
    assert_eq!(stdout(&mqadmin(&ns, &["topicList"])), "A\nT\n");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&mqadmin(&ns, &["topic-list", "--json"]))).unwrap();
    assert_eq!(json["topics"], serde_json::json!(["A", "T"]));
    let route = stdout(&mqadmin(&ns, &["topicRoute", "-t", "T"]));
    assert!(route.contains("queue b#1"), "{route}");
    let missing = mqadmin(&ns, &["topic-route", "-t", "Nope"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.starts_with("error: ") && err.contains("Nope"), "{err}");
}

#[test]
fn update_topic_goes_to_every_master_of_the_cluster() {
    let (ns, seen) = start();
    let out = stdout(&mqadmin(
        &ns,
        &["updateTopic", "-t", "New", "-q", "4", "-c", "C"],
    ));
    assert!(out.contains("New"), "{out}");
    let created = seen.lock().unwrap().created.clone();
    assert_eq!(
        created,
        vec![TopicConfig {
            name: "New".into(),
            read_queues: 4,
            write_queues: 4,
            perm: perm::READ_WRITE,
        }]
    );
    // The only cluster is chosen when none is named; an unknown one is an error.
    stdout(&mqadmin(&ns, &["update-topic", "-t", "Other"]));
    assert_eq!(seen.lock().unwrap().created.len(), 2);
    let bad = mqadmin(&ns, &["update-topic", "-t", "X", "-c", "Nope"]);
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn consume_prints_every_queue_in_order() {
    let (ns, _) = start();
    let out = stdout(&mqadmin(
        &ns,
        &["consume", "-t", "T", "--timeout-ms", "300"],
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(
        lines[0],
        "topic=T queue=0 offset=0 msg_id=UNIQ00 keys=k1,k2 tags=TagA body=zero"
    );
    assert!(lines[1].contains("offset=1") && lines[1].ends_with("body=one"));
    assert!(lines[3].starts_with("topic=T queue=1 offset=0"));
    let out = stdout(&mqadmin(
        &ns,
        &[
            "consumeMessage",
            "-t",
            "T",
            "--json",
            "--max",
            "3",
            "--timeout-ms",
            "300",
        ],
    ));
    let msgs: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[2]["body_encoding"], "base64");
    assert_eq!(msgs[2]["queue_offset"], 2);
    // From the last offset there is nothing to print.
    let out = stdout(&mqadmin(
        &ns,
        &[
            "consume",
            "-t",
            "T",
            "--from",
            "last",
            "--timeout-ms",
            "200",
        ],
    ));
    assert!(out.is_empty(), "{out}");
}

#[test]
fn broker_status_and_cluster_list() {
    let (ns, _) = start();
    let out = stdout(&mqadmin(
        &ns,
        &["brokerStatus", "-b", &ns, "--interval-ms", "10"],
    ));
    assert!(
        out.contains("core=0 shards=[0,1] produce_tps=0.0 consume_tps=0.0 requests=42"),
        "{out}"
    );
    assert!(
        out.contains("quarantined_ranges=2 quarantined_bytes=1500 skipped_records=7"),
        "{out}"
    );
    assert!(
        out.contains("2 damaged CommitLog range(s) (1500 bytes) are quarantined"),
        "damage is called out on a line of its own: {out}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&mqadmin(
        &ns,
        &["broker-status", "-b", &ns, "--json", "--interval-ms", "10"],
    )))
    .unwrap();
    assert_eq!(json["cores"][0]["requests"], 42);
    assert_eq!(json["cores"][0]["quarantined_ranges"], 2);
    assert_eq!(json["cores"][0]["skipped_records"], 7);
    let out = stdout(&mqadmin(&ns, &["clusterList"]));
    assert!(out.lines().nth(1).unwrap().starts_with("C "), "{out}");
}

#[test]
fn unreachable_name_server_is_a_clean_error() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let o = mqadmin(&dead, &["topic-list"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error: "));
}
