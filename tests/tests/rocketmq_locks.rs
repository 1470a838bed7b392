//! An orderly consumer's queue locks (LOCK_BATCH_MQ), spoken by hand on the remoting
//! protocol as the Java client speaks it. A lock another member holds is refused; the holder's
//! locks end at once when it gives them back (UNLOCK_BATCH_MQ, whether or not its group ever
//! committed an offset of the queue), when it leaves its group (UNREGISTER_CLIENT), and when
//! its connection closes (a killed client). Each time, another member locks the queues at
//! once, instead of a minute later when the leases would run out.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use integration::{create_topic, wait_for, Cluster};
use remoting::body::{
    from_json, to_json, ConsumerData, HeartbeatData, JsonForm, LockBatchRequestBody,
    LockBatchResponseBody, MessageModel, MessageQueue, SubscriptionData, TopicRouteData,
};
use remoting::codes::{request, response};
use remoting::{Decoded, RemotingCommand, RemotingDecoder};

const TOPIC: &str = "LockTopic";
const QUEUES: u32 = 4;

/// A client's connection to the broker: one request and its answer at a time.
struct Client {
    id: String,
    conn: TcpStream,
    opaque: i32,
}

impl Client {
    fn connect(addr: &str, id: &str) -> Client {
        let conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            id: id.to_owned(),
            conn,
            opaque: 0,
        }
    }

    fn call(&mut self, mut cmd: RemotingCommand, body: &[u8]) -> remoting::Frame {
        self.opaque += 1;
        cmd.opaque = self.opaque;
        self.conn
            .write_all(&remoting::encode(&cmd, body).unwrap())
            .unwrap();
        let mut decoder = RemotingDecoder::default();
        let mut buf = BytesMut::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
                // The broker may notify the client (NOTIFY_CONSUMER_IDS_CHANGED) on the same
                // connection: only the answer to this request counts.
                if f.command.is_response() && f.command.opaque == self.opaque {
                    return f;
                }
                continue;
            }
            let n = self.conn.read(&mut chunk).unwrap();
            assert!(n > 0, "the broker closed the connection of {}", self.id);
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// A consumer heartbeat: the client is a member of `group`, subscribed to the topic.
    fn heartbeat(&mut self, group: &str) {
        let hb = HeartbeatData {
            client_id: self.id.clone(),
            consumer_data_set: vec![ConsumerData {
                group_name: group.to_owned(),
                message_model: MessageModel::Clustering,
                subscription_data_set: vec![SubscriptionData {
                    topic: TOPIC.to_owned(),
                    sub_string: "*".to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = to_json(&hb, JsonForm::Standard).unwrap();
        let f = self.call(RemotingCommand::request(request::HEART_BEAT, 0), &body);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    }

    fn batch(&self, group: &str, broker: &str) -> Vec<u8> {
        let b = LockBatchRequestBody {
            client_id: self.id.clone(),
            consumer_group: group.to_owned(),
            mq_set: (0..QUEUES)
                .map(|q| MessageQueue {
                    topic: TOPIC.to_owned(),
                    broker_name: broker.to_owned(),
                    queue_id: q as i32,
                })
                .collect(),
            only_this_broker: true,
        };
        to_json(&b, JsonForm::Standard).unwrap()
    }

    /// Asks for the lock of every queue of the topic: the queues it holds now.
    fn lock(&mut self, group: &str, broker: &str) -> usize {
        let body = self.batch(group, broker);
        let f = self.call(RemotingCommand::request(request::LOCK_BATCH_MQ, 0), &body);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
        let r: LockBatchResponseBody = from_json(&f.body).unwrap();
        r.lock_ok_mq_set.len()
    }

    fn unlock(&mut self, group: &str, broker: &str) {
        let body = self.batch(group, broker);
        let f = self.call(RemotingCommand::request(request::UNLOCK_BATCH_MQ, 0), &body);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    }

    fn unregister(&mut self, group: &str) {
        let mut cmd = RemotingCommand::request(request::UNREGISTER_CLIENT, 0);
        cmd.ext_fields.insert("clientID".into(), self.id.clone());
        cmd.ext_fields.insert("consumerGroup".into(), group.into());
        let f = self.call(cmd, &[]);
        assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    }
}

/// The topic's broker name and address, as the NameServer routes it to a RocketMQ client.
fn route(ns: &str) -> (String, String) {
    let mut c = Client::connect(ns, "route");
    let mut cmd = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 0);
    cmd.ext_fields.insert("topic".into(), TOPIC.into());
    let f = c.call(cmd, &[]);
    assert_eq!(f.command.code, response::SUCCESS, "{:?}", f.command.remark);
    let r: TopicRouteData = from_json(&f.body).unwrap();
    let b = r.broker_datas.first().expect("a broker routes the topic");
    (b.broker_name.clone(), b.broker_addrs[&0].clone())
}

#[test]
fn a_client_s_queue_locks_end_when_it_unlocks_leaves_or_disconnects() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, TOPIC, QUEUES);
    let (broker, addr) = route(&ns);
    let all = QUEUES as usize;

    // Given back: no offset of the group was ever committed, and the lock still ends.
    let mut a = Client::connect(&addr, "127.0.0.1@unlocker");
    let mut b = Client::connect(&addr, "127.0.0.1@waiter-1");
    a.heartbeat("LockGroupUnlock");
    b.heartbeat("LockGroupUnlock");
    assert_eq!(a.lock("LockGroupUnlock", &broker), all);
    assert_eq!(b.lock("LockGroupUnlock", &broker), 0, "held by the other");
    a.unlock("LockGroupUnlock", &broker);
    assert_eq!(
        b.lock("LockGroupUnlock", &broker),
        all,
        "given back, the queues are free at once"
    );

    // Left the group without giving them back (UNREGISTER_CLIENT).
    let mut d = Client::connect(&addr, "127.0.0.1@leaver");
    let mut e = Client::connect(&addr, "127.0.0.1@waiter-2");
    d.heartbeat("LockGroupLeave");
    e.heartbeat("LockGroupLeave");
    assert_eq!(d.lock("LockGroupLeave", &broker), all);
    assert_eq!(e.lock("LockGroupLeave", &broker), 0, "held by the other");
    d.unregister("LockGroupLeave");
    assert_eq!(
        e.lock("LockGroupLeave", &broker),
        all,
        "the member that left holds nothing"
    );

    // Gone without a word: its connection closed (as when the process is killed).
    let mut g = Client::connect(&addr, "127.0.0.1@killed");
    let mut h = Client::connect(&addr, "127.0.0.1@waiter-3");
    g.heartbeat("LockGroupKilled");
    h.heartbeat("LockGroupKilled");
    assert_eq!(g.lock("LockGroupKilled", &broker), all);
    assert_eq!(h.lock("LockGroupKilled", &broker), 0, "held by the other");
    drop(g);
    // The broker learns of the close when it reads the connection's end: within seconds.
    let freed = wait_for(Duration::from_secs(10), || {
        (h.lock("LockGroupKilled", &broker) == all).then_some(())
    });
    assert!(
        freed.is_some(),
        "the closed client's locks still hold its queues"
    );
}
