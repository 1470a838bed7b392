//! Request handling: one request header in, one response header out. This is the edge where
//! crate errors become wire response codes.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use protocol::{Command, Header, ResponseCode};

use crate::route_table::ConnectionId;
use crate::{NameSrvError, Registered, RouteTable};

/// Locks the table. A panic while the lock was held cannot leave the table half-updated in a
/// way that matters (each operation replaces whole entries), so a poisoned lock is used as is
/// rather than taking the whole server down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers one request (with its frame's body), received on connection `conn`: the response
/// header and its body. The caller decides whether to send the answer (not for oneway). A
/// broker that registers or heartbeats is bound to `conn`, whose closing drops it.
pub(crate) fn handle_request(
    table: &Mutex<RouteTable>,
    conn: ConnectionId,
    request: Header,
    body: &[u8],
    now: Instant,
) -> (Header, Vec<u8>) {
    let id = request.request_id;
    if let Command::GetTopicList = request.command {
        // In the body: any number of topics fits there.
        let topics = lock(table).topic_list(now);
        return match protocol::encode_topic_names(&topics) {
            Ok(names) => (
                Header::response(
                    id,
                    ResponseCode::Success,
                    Command::TopicListBody {
                        count: topics.len() as u32,
                    },
                ),
                names,
            ),
            Err(e) => (
                Header::error(id, ResponseCode::SystemError, e.to_string()),
                Vec::new(),
            ),
        };
    }
    (
        answer_in_header(table, conn, request, body, now),
        Vec::new(),
    )
}

/// Answers every request whose answer is a header alone (all but the topic list).
fn answer_in_header(
    table: &Mutex<RouteTable>,
    conn: ConnectionId,
    request: Header,
    body: &[u8],
    now: Instant,
) -> Header {
    let id = request.request_id;
    match request.command {
        Command::RegisterBroker(mut reg) => {
            // The topic table travels in the body (compressed), so that any number of
            // topics fits; an empty body leaves the header's list.
            if !body.is_empty() {
                match protocol::decode_topic_body(body) {
                    Ok(topics) => reg.topics = topics,
                    Err(e) => {
                        tracing::warn!(addr = %reg.addr, "refused registration: {e}");
                        return Header::error(id, ResponseCode::BadRequest, e.to_string());
                    }
                }
            }
            let key = reg.key.clone();
            let addr = reg.addr.clone();
            let topics = reg.topics.len();
            let outcome = {
                let mut table = lock(table);
                let outcome = table.register(reg, now);
                if outcome.is_ok() {
                    table.bind_connection(&key, conn);
                }
                outcome
            };
            match outcome {
                Ok(Registered::New) => tracing::info!(
                    cluster = %key.cluster, broker_name = %key.broker_name,
                    broker_id = key.broker_id, %addr, topics, "broker registered"
                ),
                Ok(Registered::Updated) => tracing::info!(
                    cluster = %key.cluster, broker_name = %key.broker_name,
                    broker_id = key.broker_id, %addr, topics, "broker registration updated"
                ),
                Ok(Registered::Heartbeat) => tracing::debug!(
                    broker_name = %key.broker_name, broker_id = key.broker_id, "broker heartbeat"
                ),
                Err(ref e) => tracing::warn!(%addr, "refused registration: {e}"),
            }
            match outcome {
                Ok(_) => Header::response(id, ResponseCode::Success, Command::Empty),
                Err(e) => Header::error(id, registration_refused_code(&e), e.to_string()),
            }
        }
        Command::RegisterTopics(key) => {
            let topics = match protocol::decode_topic_body(body) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(broker_name = %key.broker_name, "refused topic registration: {e}");
                    return Header::error(id, ResponseCode::BadRequest, e.to_string());
                }
            };
            let count = topics.len();
            let known = lock(table).add_topics(&key, conn, topics, now);
            match known {
                Ok(true) => {
                    tracing::debug!(broker_name = %key.broker_name, topics = count, "broker registered topics");
                    Header::response(id, ResponseCode::Success, Command::Empty)
                }
                Ok(false) => Header::error(
                    id,
                    ResponseCode::BrokerNotRegistered,
                    format!("broker {} is not registered here", key.broker_name),
                ),
                Err(e) => {
                    tracing::warn!(broker_name = %key.broker_name, "refused topic registration: {e}");
                    Header::error(id, ResponseCode::BadRequest, e.to_string())
                }
            }
        }
        Command::BrokerHeartbeat(key) => {
            let known = lock(table).heartbeat(&key, conn, now);
            if known {
                Header::response(id, ResponseCode::Success, Command::Empty)
            } else {
                Header::error(
                    id,
                    ResponseCode::BrokerNotRegistered,
                    format!("broker {} is not registered here", key.broker_name),
                )
            }
        }
        Command::UnregisterBroker(key) => {
            let removed = lock(table).unregister(&key);
            if removed {
                tracing::info!(
                    cluster = %key.cluster, broker_name = %key.broker_name,
                    broker_id = key.broker_id, "broker unregistered"
                );
            }
            // Unregistering an unknown broker is not an error: the goal state is reached.
            Header::response(id, ResponseCode::Success, Command::Empty)
        }
        Command::GetRoute { topic } => match lock(table).route(&topic, now) {
            Some(route) => Header::response(id, ResponseCode::Success, Command::Route(route)),
            None => Header::error(
                id,
                ResponseCode::TopicNotExist,
                format!("topic {topic} is not served by any live broker"),
            ),
        },
        Command::GetClusterInfo => {
            let info = lock(table).cluster_info(now);
            Header::response(id, ResponseCode::Success, Command::ClusterInfo(info))
        }
        other => Header::error(
            id,
            ResponseCode::RequestCodeNotSupported,
            format!("the name server does not serve {} requests", other.name()),
        ),
    }
}

/// The answer to a refused registration. A fenced master hears `NotLeader`, which tells it
/// apart from a malformed registration: it is no longer its group's master.
fn registration_refused_code(e: &NameSrvError) -> ResponseCode {
    match e {
        NameSrvError::StaleMasterEpoch { .. } => ResponseCode::NotLeader,
        NameSrvError::BadRegistration(_) | NameSrvError::Config(_) => ResponseCode::BadRequest,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use protocol::{BrokerKey, RegisterBroker, TopicConfig};

    fn table() -> Mutex<RouteTable> {
        Mutex::new(RouteTable::new(Duration::from_secs(120)))
    }

    #[test]
    fn unknown_topic_names_the_topic() {
        let t = table();
        let (resp, _) = handle_request(
            &t,
            ConnectionId(0),
            Header::request(
                5,
                Command::GetRoute {
                    topic: "Nope".into(),
                },
            ),
            &[],
            Instant::now(),
        );
        assert_eq!(resp.request_id, 5);
        assert!(resp.is_response());
        assert_eq!(resp.response_code(), ResponseCode::TopicNotExist);
        assert!(resp.remark.contains("Nope"), "{}", resp.remark);
    }

    #[test]
    fn broker_commands_are_not_supported() {
        let t = table();
        let (resp, _) = handle_request(
            &t,
            ConnectionId(0),
            Header::request(9, Command::BrokerStatus),
            &[],
            Instant::now(),
        );
        assert_eq!(resp.request_id, 9);
        assert_eq!(resp.response_code(), ResponseCode::RequestCodeNotSupported);
        assert!(resp.remark.contains("broker_status"), "{}", resp.remark);
    }

    #[test]
    fn bad_registration_is_a_bad_request() {
        let t = table();
        let reg = RegisterBroker {
            key: BrokerKey {
                cluster: "c".into(),
                broker_name: String::new(),
                broker_id: 0,
            },
            addr: "a:1".into(),
            core_addrs: vec![],
            shard_count: 1,
            topics: vec![TopicConfig {
                name: "T".into(),
                read_queues: 1,
                write_queues: 1,
                perm: 6,
            }],
            master_epoch: 0,
        };
        let (resp, _) = handle_request(
            &t,
            ConnectionId(0),
            Header::request(1, Command::RegisterBroker(reg)),
            &[],
            Instant::now(),
        );
        assert_eq!(resp.response_code(), ResponseCode::BadRequest);
    }

    #[test]
    fn a_fenced_master_hears_not_leader_with_the_reason() {
        let t = table();
        let master = |addr: &str, master_epoch: u32| RegisterBroker {
            key: BrokerKey {
                cluster: "c".into(),
                broker_name: "broker-a".into(),
                broker_id: 0,
            },
            addr: addr.into(),
            core_addrs: vec![],
            shard_count: 1,
            topics: vec![],
            master_epoch,
        };
        let register = |reg: RegisterBroker| {
            let request = Header::request(1, Command::RegisterBroker(reg));
            handle_request(&t, ConnectionId(0), request, &[], Instant::now()).0
        };
        let resp = register(master("b:1", 2));
        assert_eq!(resp.response_code(), ResponseCode::Success);
        let resp = register(master("a:1", 1));
        assert_eq!(resp.response_code(), ResponseCode::NotLeader);
        assert!(
            resp.remark
                .contains("stale master epoch 1 < current 2 held by b:1"),
            "{}",
            resp.remark
        );
    }
}
