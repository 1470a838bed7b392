//! RocketMQ 5's POP over remoting, as a remoting client speaks it (rmq
//! `MQClientAPIImpl.popMessageAsync`, `ackMessageAsync`, `changeInvisibleTimeAsync`), against
//! a two-core broker:
//!
//! - POP_MESSAGE of any queue of a core hands out what corvus's producer sent there, queue ids
//!   as that core numbers them, with the response header a client builds its receipt handles
//!   from (popTime, invisibleTime, reviveQid, startOffsetInfo, msgOffsetInfo);
//! - ACK_MESSAGE with a handle built the client's way: the message never comes back, and the
//!   same handle again is NO_MESSAGE;
//! - CHANGE_MESSAGE_INVISIBLETIME hides a message longer, and the handle rebuilt from its
//!   answer acks it;
//! - a message neither acked nor changed comes back after its invisible time with reconsume
//!   times 1;
//! - nothing to pop is POLLING_TIMEOUT; an unknown topic, a bad handle and a queue the core
//!   does not have get RocketMQ's codes.
//!
//! And across a failover (controller mode, SYNC_MASTER): the slave that takes over takes acks
//! of the old master's handles, and hides and gives back what the old master handed out.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use client::Message;
use integration::{create_topic, remoting_call, wait_for, wait_for_route, Cluster};
use remoting::body::{from_json, TopicRouteData};
use remoting::codes::{request, response};
use remoting::message::{decode_stored, StoredMessage};
use remoting::RemotingCommand;

const TOPIC: &str = "PopTopic";
const GROUP: &str = "PopGroup";
const QUEUES: u32 = 4;
/// Long enough for the test to ack and change before anything comes back on a loaded
/// machine, short enough to wait for.
const INVISIBLE_MS: u64 = 8_000;
/// A group that pops orderly.
const ORDER_GROUP: &str = "PopOrderGroup";

fn call(addr: &str, code: i32, fields: &[(&str, String)]) -> remoting::Frame {
    let mut cmd = RemotingCommand::request(code, 11);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), v.clone());
    }
    remoting_call(addr, &cmd, b"")
}

/// Each core's broker name, master address and queue count, as the NameServer routes the
/// topic (a core without a master is left out).
fn route(ns: &str) -> Vec<(String, String, i32)> {
    let f = call(
        ns,
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", TOPIC.into())],
    );
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let r: TopicRouteData = from_json(&f.body).unwrap();
    r.broker_datas
        .iter()
        .filter_map(|b| {
            let q = r
                .queue_datas
                .iter()
                .find(|q| q.broker_name == b.broker_name)
                .map_or(0, |q| q.read_queue_nums);
            Some((b.broker_name.clone(), b.broker_addrs.get(&0)?.clone(), q))
        })
        .collect()
}

/// One message popped, with the handle a RocketMQ client builds for it.
struct Popped {
    message: StoredMessage,
    handle: String,
    broker: String,
    addr: String,
}

/// `<retryFlag> <queueId> <value>` entries, by queue id.
fn info(text: &str) -> HashMap<i32, String> {
    text.split(';')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let f: Vec<&str> = e.split(' ').collect();
            assert_eq!(f.len(), 3, "entry `{e}` of `{text}`");
            assert_eq!(f[0], "0", "retry flag of `{e}`");
            (f[1].parse().unwrap(), f[2].to_owned())
        })
        .collect()
}

/// POP_MESSAGE as a RocketMQ 5 client sends it; the code and the messages with their handles.
fn pop(
    broker: &str,
    addr: &str,
    queue_id: i32,
    invisible_ms: u64,
    poll_ms: u64,
) -> (i32, Vec<Popped>) {
    let (code, popped, _) = pop_as(GROUP, false, broker, addr, queue_id, invisible_ms, poll_ms);
    (code, popped)
}

/// A response header's fields.
type Fields = HashMap<String, String>;

/// [`pop`] for `group`, orderly or not; the response header too.
fn pop_as(
    group: &str,
    order: bool,
    broker: &str,
    addr: &str,
    queue_id: i32,
    invisible_ms: u64,
    poll_ms: u64,
) -> (i32, Vec<Popped>, Fields) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let f = call(
        addr,
        request::POP_MESSAGE,
        &[
            ("consumerGroup", group.into()),
            ("topic", TOPIC.into()),
            ("queueId", queue_id.to_string()),
            ("maxMsgNums", "32".into()),
            ("invisibleTime", invisible_ms.to_string()),
            ("pollTime", poll_ms.to_string()),
            ("bornTime", now.to_string()),
            ("initMode", "0".into()),
            ("expType", "TAG".into()),
            ("exp", "*".into()),
            ("order", order.to_string()),
            ("bname", broker.into()),
        ],
    );
    let code = f.command.code;
    let fields: Fields = f
        .command
        .ext_fields
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if code != response::SUCCESS {
        return (code, Vec::new(), fields);
    }
    let h = &f.command.ext_fields;
    let field = |k: &str| {
        h.get(k)
            .unwrap_or_else(|| panic!("no {k} in {h:?}"))
            .to_owned()
    };
    let (pop_time, invisible, revive) =
        (field("popTime"), field("invisibleTime"), field("reviveQid"));
    assert_eq!(invisible, invisible_ms.to_string());
    assert!(field("restNum").parse::<u64>().is_ok());
    let starts = info(&field("startOffsetInfo"));
    let offsets: HashMap<i32, Vec<i64>> = info(&field("msgOffsetInfo"))
        .into_iter()
        .map(|(q, list)| (q, list.split(',').map(|o| o.parse().unwrap()).collect()))
        .collect();
    let messages = decode_stored(&f.body).unwrap();
    let popped = messages
        .into_iter()
        .map(|m| {
            assert_eq!(m.topic, TOPIC);
            // As the client does: the handle from the header and the message's queue.
            let ck = starts
                .get(&m.queue_id)
                .unwrap_or_else(|| panic!("no start offset of queue {}", m.queue_id));
            assert!(
                offsets[&m.queue_id].contains(&m.queue_offset),
                "msgOffsetInfo lists offset {} of queue {}",
                m.queue_offset,
                m.queue_id
            );
            let handle = format!(
                "{ck} {pop_time} {invisible} {revive} 0 {broker} {} {}",
                m.queue_id, m.queue_offset
            );
            Popped {
                message: m,
                handle,
                broker: broker.to_owned(),
                addr: addr.to_owned(),
            }
        })
        .collect();
    (code, popped, fields)
}

fn ack(p: &Popped, handle: &str) -> remoting::Frame {
    call(
        &p.addr,
        request::ACK_MESSAGE,
        &[
            ("consumerGroup", GROUP.into()),
            ("topic", TOPIC.into()),
            ("queueId", p.message.queue_id.to_string()),
            ("extraInfo", handle.into()),
            ("offset", p.message.queue_offset.to_string()),
            ("bname", p.broker.clone()),
        ],
    )
}

fn change_invisible(p: &Popped, invisible_ms: u64) -> remoting::Frame {
    call(
        &p.addr,
        request::CHANGE_MESSAGE_INVISIBLETIME,
        &[
            ("consumerGroup", GROUP.into()),
            ("topic", TOPIC.into()),
            ("queueId", p.message.queue_id.to_string()),
            ("extraInfo", p.handle.clone()),
            ("offset", p.message.queue_offset.to_string()),
            ("invisibleTime", invisible_ms.to_string()),
            ("bname", p.broker.clone()),
        ],
    )
}

fn body(p: &Popped) -> String {
    String::from_utf8_lossy(&p.message.body).into_owned()
}

/// Pops every core's queues (queue id -1) once.
fn pop_all(cores: &[(String, String, i32)], invisible_ms: u64, poll_ms: u64) -> Vec<Popped> {
    let mut all = Vec::new();
    for (broker, addr, _) in cores {
        let (code, got) = pop(broker, addr, -1, invisible_ms, poll_ms);
        assert!(
            code == response::SUCCESS || code == response::POLLING_TIMEOUT,
            "pop answered {code}"
        );
        all.extend(got);
    }
    all
}

#[test]
fn remoting_pop_ack_and_change_invisible_time_are_served_as_rocketmq_5_serves_them() {
    let c = Cluster::start(2, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TOPIC, QUEUES);
    wait_for_route(&ns, TOPIC);
    let cores = route(&ns);
    assert_eq!(cores.len(), 2, "{cores:?}");

    // Nothing sent yet: nothing to pop, after the poll time.
    let (broker, addr, _) = &cores[0];
    let (code, got) = pop(broker, addr, -1, INVISIBLE_MS, 300);
    assert_eq!(code, response::POLLING_TIMEOUT);
    assert!(got.is_empty());

    let producer = integration::producer(&ns);
    let sent: Vec<String> = (0..8).map(|i| format!("pop-{i}")).collect();
    for b in &sent {
        producer.send(Message::new(TOPIC, b.clone())).unwrap();
    }

    // Every message is handed out once, from the core whose queue holds it, numbered as
    // that core numbers its queues.
    let mut first: Vec<Popped> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while first.len() < sent.len() && Instant::now() < deadline {
        first.extend(pop_all(&cores, INVISIBLE_MS, 500));
    }
    let mut bodies: Vec<String> = first.iter().map(body).collect();
    bodies.sort();
    assert_eq!(bodies, sent, "each message popped once");
    for p in &first {
        let queues = cores.iter().find(|c| c.0 == p.broker).unwrap().2;
        assert!(
            p.message.queue_id < queues,
            "queue {} of {} numbered as its core numbers them ({queues} queues)",
            p.message.queue_id,
            p.broker
        );
        assert_eq!(p.message.reconsume_times, 0);
    }
    // Hidden: popping again finds nothing.
    assert!(pop_all(&cores, INVISIBLE_MS, 0).is_empty());

    // Ack one with the client's handle; the same handle again is refused.
    let acked = &first[0];
    let f = ack(acked, &acked.handle);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let f = ack(acked, &acked.handle);
    assert_eq!(
        f.command.code,
        response::NO_MESSAGE,
        "{:?}",
        f.command.remark
    );

    // Hide another for a minute; its rebuilt handle acks it later.
    let changed = &first[1];
    let f = change_invisible(changed, 60_000);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let h = &f.command.ext_fields;
    assert_eq!(&h["invisibleTime"], "60000");
    let parts: Vec<&str> = changed.handle.split(' ').collect();
    let rebuilt = format!(
        "{} {} {} {} {}",
        parts[0],
        &h["popTime"],
        &h["invisibleTime"],
        &h["reviveQid"],
        parts[4..].join(" ")
    );
    // The old handle stops working.
    let f = ack(changed, &changed.handle);
    assert_eq!(
        f.command.code,
        response::NO_MESSAGE,
        "{:?}",
        f.command.remark
    );

    // The others come back after their invisible time, reconsume times 1; the acked one
    // and the hidden one do not.
    let mut again: BTreeMap<String, i32> = BTreeMap::new();
    let expected: Vec<String> = first[2..].iter().map(body).collect();
    let deadline = Instant::now() + Duration::from_millis(INVISIBLE_MS) + Duration::from_secs(30);
    while again.len() < expected.len() && Instant::now() < deadline {
        for p in pop_all(&cores, 60_000, 1_000) {
            assert!(
                again.insert(body(&p), p.message.reconsume_times).is_none(),
                "{} handed out twice",
                body(&p)
            );
        }
    }
    let mut back: Vec<String> = again.keys().cloned().collect();
    back.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(back, want, "the unacked messages come back");
    assert!(again.values().all(|&t| t == 1), "{again:?}");

    let f = ack(changed, &rebuilt);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);

    // RocketMQ's codes for what names nothing.
    let f = ack(changed, "not a handle");
    assert_eq!(
        f.command.code,
        response::MESSAGE_ILLEGAL,
        "{:?}",
        f.command.remark
    );
    let mut stranger = Popped {
        message: changed.message.clone(),
        handle: changed.handle.clone(),
        broker: changed.broker.clone(),
        addr: changed.addr.clone(),
    };
    stranger.message.queue_id = 99;
    let bad_queue = stranger.handle.replacen(
        &format!(
            " {} {}",
            changed.message.queue_id, changed.message.queue_offset
        ),
        &format!(" 99 {}", changed.message.queue_offset),
        1,
    );
    let f = ack(&stranger, &bad_queue);
    assert_eq!(
        f.command.code,
        response::MESSAGE_ILLEGAL,
        "{:?}",
        f.command.remark
    );
    let f = call(
        &changed.addr,
        request::ACK_MESSAGE,
        &[
            ("consumerGroup", GROUP.into()),
            ("topic", "NoSuchTopic".into()),
            ("queueId", changed.message.queue_id.to_string()),
            ("extraInfo", rebuilt.clone()),
            ("offset", changed.message.queue_offset.to_string()),
        ],
    );
    assert_eq!(
        f.command.code,
        response::TOPIC_NOT_EXIST,
        "{:?}",
        f.command.remark
    );
    let (broker, addr, queues) = &cores[0];
    let (code, _) = pop(broker, addr, *queues, INVISIBLE_MS, 0);
    assert_eq!(
        code,
        response::INVALID_PARAMETER,
        "a queue the core does not have"
    );

    // Orderly, one queue at a time by the core's number: a new group gets every message,
    // each queue's batch stays out until its invisible time passes, then comes back whole
    // with its count of earlier deliveries.
    let has_count = |fields: &Fields, q: i32, offset: i64, count: u32| {
        fields["orderCountInfo"]
            .split(';')
            .any(|e| e == format!("0 qo{q}%{offset} {count}"))
    };
    let mut batches = Vec::new();
    for (broker, addr, queues) in &cores {
        for q in 0..*queues {
            let (code, got, fields) = pop_as(ORDER_GROUP, true, broker, addr, q, 5_000, 0);
            if code != response::SUCCESS {
                assert_eq!(code, response::POLLING_TIMEOUT);
                continue;
            }
            assert_eq!(fields["reviveQid"], "999", "an orderly pop's revive queue");
            for p in &got {
                assert_eq!(p.message.queue_id, q);
                assert!(
                    has_count(&fields, q, p.message.queue_offset, 0),
                    "{fields:?}"
                );
            }
            let offsets: Vec<i64> = got.iter().map(|p| p.message.queue_offset).collect();
            batches.push((broker.clone(), addr.clone(), q, offsets));
        }
    }
    let total: usize = batches.iter().map(|b| b.3.len()).sum();
    assert_eq!(total, sent.len(), "every message, queue by queue");
    let (broker, addr, q, _) = &batches[0];
    let (code, _, _) = pop_as(ORDER_GROUP, true, broker, addr, *q, 5_000, 0);
    assert_eq!(code, response::POLLING_TIMEOUT, "its batch is out");
    for (broker, addr, q, offsets) in &batches {
        let (got, fields) = wait_for(Duration::from_secs(30), || {
            let (code, got, fields) = pop_as(ORDER_GROUP, true, broker, addr, *q, 60_000, 1_000);
            (code == response::SUCCESS).then_some((got, fields))
        })
        .expect("the batch comes back");
        let again: Vec<i64> = got.iter().map(|p| p.message.queue_offset).collect();
        assert_eq!(&again, offsets, "the same batch, in order");
        for p in &got {
            assert_eq!(p.message.reconsume_times, 1);
            assert!(
                has_count(&fields, *q, p.message.queue_offset, 1),
                "{fields:?}"
            );
        }
    }
}

/// POP state lives in the shard's log and goes to the slave with it: after a kill -9 of a
/// SYNC_MASTER, its slave, now master under the same name, takes acks of the handles the old
/// master gave out, hands out nothing still hidden, never hands out again what was acked on
/// either, and gives back the rest after their invisible time with reconsume times 1.
#[test]
fn pop_handles_outlive_a_failover_to_the_in_sync_slave() {
    /// Outlasts the failover (the controllers' 3 s heartbeat timeout and the election).
    const HIDDEN_MS: u64 = 20_000;
    let integration::controllers::ControllerGroup {
        ctl,
        ns,
        mut a,
        b,
        first: before,
        keep: _keep,
        ..
    } = integration::controllers::ControllerGroup::start("broker-pop");
    create_topic(&ns.addr, TOPIC, QUEUES);
    wait_for_route(&ns.addr, TOPIC);
    let producer = integration::producer(&ns.addr);
    let sent: Vec<String> = (0..8).map(|i| format!("ha-pop-{i}")).collect();
    for s in &sent {
        producer.send(Message::new(TOPIC, s.clone())).unwrap();
    }
    let old = route(&ns.addr);
    let mut popped: Vec<Popped> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while popped.len() < sent.len() && Instant::now() < deadline {
        popped.extend(pop_all(&old, HIDDEN_MS, 500));
    }
    let popped_at = Instant::now();
    assert_eq!(popped.len(), sent.len(), "every message popped once");
    // The slave pops nothing: POP is its master's (and what the slave's log gains from now
    // on is what it serves once it takes over).
    let (broker, _, _) = &old[0];
    let (code, got) = pop(broker, &b.addr, -1, HIDDEN_MS, 0);
    assert!(
        got.is_empty() && code != response::SUCCESS,
        "the slave popped ({code}): {:?}",
        got.iter().map(body).collect::<Vec<_>>()
    );
    for p in &popped[..2] {
        let f = ack(p, &p.handle);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    }

    a.kill9();
    let new = wait_for(Duration::from_secs(30), || {
        let r = route(&ns.addr);
        (r.len() == old.len() && r.iter().all(|n| old.iter().all(|o| o.1 != n.1))).then_some(r)
    })
    .unwrap_or_else(|| panic!("the slave never took over the route: {}", b.stderr()));
    let now = ctl.replica_info("broker-pop").unwrap();
    assert_eq!(now.master_id, Some(1), "{}", b.stderr());
    assert!(now.master_epoch > before.master_epoch);
    for p in &mut popped {
        p.addr = new.iter().find(|c| c.0 == p.broker).unwrap().1.clone();
    }

    // Handles of the old master, acked on the new one. Each core of the new master serves
    // once the controllers' word has reached it; before, it answers as a slave
    // (SERVICE_NOT_AVAILABLE), and a client tries again.
    let serving = |f: &remoting::Frame| f.command.code != response::SERVICE_NOT_AVAILABLE;
    for p in &popped[2..4] {
        let f = wait_for(Duration::from_secs(30), || {
            Some(ack(p, &p.handle)).filter(serving)
        })
        .unwrap_or_else(|| panic!("the new master never served: {}", b.stderr()));
        assert_eq!(
            f.command.code,
            response::SUCCESS,
            "{} on the new master: {:?}\n{}",
            body(p),
            f.command.remark,
            b.stderr()
        );
    }
    assert!(
        popped_at.elapsed() < Duration::from_millis(HIDDEN_MS),
        "the failover outlasted the invisible time; nothing below says anything"
    );
    let mut early = Vec::new();
    for (broker, addr, _) in &new {
        let (code, got) = wait_for(Duration::from_secs(30), || {
            Some(pop(broker, addr, -1, HIDDEN_MS, 0))
                .filter(|(code, _)| *code != response::SERVICE_NOT_AVAILABLE)
        })
        .unwrap_or_else(|| panic!("{broker} of the new master never served: {}", b.stderr()));
        assert!(
            code == response::SUCCESS || code == response::POLLING_TIMEOUT,
            "pop answered {code}"
        );
        early.extend(got);
    }
    assert!(
        early.is_empty(),
        "handed out while hidden or after its ack: {:?}",
        early.iter().map(body).collect::<Vec<_>>()
    );

    // The rest come back once their invisible time has passed, each once.
    let mut back: BTreeMap<String, i32> = BTreeMap::new();
    let deadline = popped_at + Duration::from_millis(HIDDEN_MS) + Duration::from_secs(30);
    while back.len() < 4 && Instant::now() < deadline {
        for p in pop_all(&new, 60_000, 1_000) {
            assert!(
                back.insert(body(&p), p.message.reconsume_times).is_none(),
                "{} handed out twice",
                body(&p)
            );
        }
    }
    let want: BTreeMap<String, i32> = popped[4..].iter().map(|p| (body(p), 1)).collect();
    assert_eq!(
        back, want,
        "the unacked messages come back, the acked ones do not"
    );
}
