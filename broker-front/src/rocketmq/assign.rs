//! Queues the broker assigns (RocketMQ 5's server-side rebalance): QUERY_ASSIGNMENT, which a
//! 5.x push consumer with `setClientRebalance(false)` sends instead of allocating the queues
//! itself, and SET_MESSAGE_REQUEST_MODE, mqadmin's `setConsumeMode`, which says whether a
//! group pulls or pops a topic.
//!
//! The answer covers the topic's whole route, every core of every broker, as the
//! NameServer gives it (RocketMQ's broker asks its NameServer too): the client asks any one
//! broker of the route. The members are the group's, as heartbeats told this broker (a
//! RocketMQ client heartbeats every broker of its routes). In PULL mode the members share
//! the sorted queues by the strategy the client names (`AVG`, `AVG_BY_CIRCLE`). In POP mode
//! with `popShareQueueNum` 0 or less each member gets queue -1 of every core (pop any of
//! its queues); with N > 0, each gets its own share and those of the N members after it.
//! Retry topics are always PULL. An answer without assignments (an unknown topic, no
//! members yet, a strategy the broker does not run) tells the client to keep what it has.

use std::collections::BTreeSet;
use std::rc::Rc;

use broker_core::sub_groups::{ConsumeMode, RequestMode};
use remoting::body::MessageQueue;
use remoting::RemotingCommand;
use serde::{Deserialize, Serialize};

use super::{json_answer, json_body, ok, topic_config};
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;
use crate::mesh::{GroupOp, RequestModeOp};

const RETRY_PREFIX: &str = "%RETRY%";

/// The body of QUERY_ASSIGNMENT (400).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct QueryAssignmentRequest {
    topic: String,
    consumer_group: String,
    client_id: String,
    strategy_name: String,
    /// `CLUSTERING` or `BROADCASTING`.
    message_model: String,
}

/// One assigned queue and how to consume it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageQueueAssignment {
    message_queue: MessageQueue,
    mode: ConsumeMode,
}

/// The answer to QUERY_ASSIGNMENT: no `messageQueueAssignments` means "keep what you have".
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryAssignmentResponse {
    #[serde(skip_serializing_if = "Option::is_none")]
    message_queue_assignments: Option<Vec<MessageQueueAssignment>>,
}

/// SET_MESSAGE_REQUEST_MODE: stored for good (core 0 writes it before answering). Refused
/// for a retry topic (NO_PERMISSION) and an unknown topic (TOPIC_NOT_EXIST), as RocketMQ's
/// broker refuses them; the group needs no config of its own.
pub(super) async fn set_mode(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let mode: RequestMode = json_body(body)?;
    if mode.topic.starts_with(RETRY_PREFIX) {
        return Err(BrokerError::NoPermission(
            "retry topic is not allowed to set mode".into(),
        ));
    }
    if mode.consumer_group.is_empty() {
        return Err(BrokerError::BadRequest("consumerGroup is required".into()));
    }
    topic_config(core, &mode.topic)?;
    tracing::info!(topic = %mode.topic, group = %mode.consumer_group, mode = ?mode.mode,
        pop_share_queue_num = mode.pop_share_queue_num, "message request mode set");
    core.request_mode(RequestModeOp::Set(mode)).await?;
    Ok(Outgoing::remoting(ok(req), Body::None))
}

/// QUERY_ASSIGNMENT: the queues of the whole route this client consumes, and how.
pub(super) async fn query(
    core: &Rc<Front>,
    req: &RemotingCommand,
    body: &[u8],
) -> Result<Outgoing, BrokerError> {
    let q: QueryAssignmentRequest = json_body(body)?;
    if q.topic.is_empty() || q.consumer_group.is_empty() {
        return Err(BrokerError::BadRequest(
            "topic and consumerGroup are required".into(),
        ));
    }
    let mode = effective_mode(core, &q.topic, &q.consumer_group).await?;
    let queues = route_queues(core, &q.topic).await?;
    let assigned = match queues {
        None => None,
        Some(queues) if q.message_model == "BROADCASTING" => Some(queues),
        Some(queues) => {
            let members = core
                .group(GroupOp::WaitChange {
                    group: q.consumer_group.clone(),
                    known_version: u64::MAX,
                    timeout_ms: 0,
                })
                .await?
                .members;
            assign(&q.strategy_name, &q.client_id, queues, members, &mode)
        }
    };
    let answer = QueryAssignmentResponse {
        message_queue_assignments: assigned.map(|queues| {
            queues
                .into_iter()
                .map(|message_queue| MessageQueueAssignment {
                    message_queue,
                    mode: mode.mode,
                })
                .collect()
        }),
    };
    json_answer(req, &answer)
}

/// The group's mode for the topic: the one set, else the broker's default (PULL for a
/// retry topic).
async fn effective_mode(
    core: &Front,
    topic: &str,
    group: &str,
) -> Result<RequestMode, BrokerError> {
    let set = core
        .request_mode(RequestModeOp::Get {
            topic: topic.to_owned(),
            group: group.to_owned(),
        })
        .await?;
    Ok(set.unwrap_or_else(|| {
        let cfg = core.config();
        let mode = if topic.starts_with(RETRY_PREFIX) {
            ConsumeMode::Pull
        } else {
            cfg.default_message_request_mode
        };
        RequestMode {
            topic: topic.to_owned(),
            consumer_group: group.to_owned(),
            mode,
            pop_share_queue_num: cfg.default_pop_share_queue_num,
        }
    }))
}

/// The readable queues of the topic's route, every core of every broker, sorted as RocketMQ
/// sorts them (topic, broker name, queue id); `None` when no live broker serves the topic.
async fn route_queues(core: &Front, topic: &str) -> Result<Option<Vec<MessageQueue>>, BrokerError> {
    let cores = crate::routes::cluster_cores(core, topic)
        .await
        .map_err(|e| {
            BrokerError::Internal(format!(
                "cannot ask the NameServer for the route of {topic}: {e}"
            ))
        })?;
    let Some(cores) = cores else {
        return Ok(None);
    };
    let mut queues: Vec<MessageQueue> = cores
        .into_iter()
        .filter(|c| c.perm & protocol::perm::READ != 0)
        .flat_map(|c| {
            (0..c.read_queues).map(move |q| MessageQueue {
                broker_name: c.broker_name.clone(),
                queue_id: q as i32,
                topic: topic.to_owned(),
            })
        })
        .collect();
    queues.sort();
    Ok(Some(queues))
}

/// What `client` gets of `queues` (sorted) among `members`: RocketMQ's `doLoadBalance` and
/// `allocate4Pop`. `None` when it cannot say (no members, the client not among them, an
/// unknown strategy).
fn assign(
    strategy: &str,
    client: &str,
    queues: Vec<MessageQueue>,
    mut members: Vec<String>,
    mode: &RequestMode,
) -> Option<Vec<MessageQueue>> {
    if members.is_empty() {
        return None;
    }
    members.sort();
    members.dedup();
    let share = |member: &str| -> Option<Vec<MessageQueue>> {
        let index = members.iter().position(|m| m == member);
        let positions: Vec<usize> = match (strategy, index) {
            (_, None) => Vec::new(),
            ("AVG", Some(i)) => {
                protocol::allocate::averagely(i, queues.len(), members.len()).collect()
            }
            ("AVG_BY_CIRCLE", Some(i)) => {
                protocol::allocate::by_circle(i, queues.len(), members.len()).collect()
            }
            _ => return None,
        };
        Some(positions.into_iter().map(|p| queues[p].clone()).collect())
    };
    let mut set: BTreeSet<MessageQueue> = BTreeSet::new();
    match mode.mode {
        ConsumeMode::Pull => set.extend(share(client)?),
        ConsumeMode::Pop => {
            let n = mode.pop_share_queue_num;
            if n <= 0 || n as usize >= members.len().saturating_sub(1) {
                // Every member pops every core.
                set.extend(queues.iter().map(|q| MessageQueue {
                    queue_id: -1,
                    ..q.clone()
                }));
            } else if members.len() <= queues.len() {
                set.extend(share(client)?);
                if let Some(mut i) = members.iter().position(|m| m == client) {
                    for _ in 0..n {
                        i = (i + 1) % members.len();
                        set.extend(share(&members[i])?);
                    }
                }
            } else if let Some(i) = members.iter().position(|m| m == client) {
                // More members than queues: each gets one, in turn.
                if !queues.is_empty() {
                    set.insert(queues[i % queues.len()].clone());
                }
            }
        }
    }
    Some(set.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(brokers: &[&str], per: i32) -> Vec<MessageQueue> {
        let mut out: Vec<MessageQueue> = brokers
            .iter()
            .flat_map(|b| {
                (0..per).map(move |q| MessageQueue {
                    broker_name: (*b).to_owned(),
                    queue_id: q,
                    topic: "T".into(),
                })
            })
            .collect();
        out.sort();
        out
    }

    fn mode(mode: ConsumeMode, share: i32) -> RequestMode {
        RequestMode {
            topic: "T".into(),
            consumer_group: "G".into(),
            mode,
            pop_share_queue_num: share,
        }
    }

    fn ids(v: &[MessageQueue]) -> Vec<(String, i32)> {
        v.iter()
            .map(|q| (q.broker_name.clone(), q.queue_id))
            .collect()
    }

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn pull_mode_shares_the_queues_of_every_core_among_the_members() {
        let all = queues(&["b-c0", "b-c1"], 3);
        let got: Vec<Vec<MessageQueue>> = ["c0", "c1"]
            .iter()
            .map(|c| {
                assign(
                    "AVG",
                    c,
                    all.clone(),
                    members(2),
                    &mode(ConsumeMode::Pull, -1),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(
            ids(&got[0]),
            [("b-c0".into(), 0), ("b-c0".into(), 1), ("b-c0".into(), 2)]
        );
        assert_eq!(
            ids(&got[1]),
            [("b-c1".into(), 0), ("b-c1".into(), 1), ("b-c1".into(), 2)]
        );
        let circle = assign(
            "AVG_BY_CIRCLE",
            "c1",
            all.clone(),
            members(2),
            &mode(ConsumeMode::Pull, -1),
        )
        .unwrap();
        assert_eq!(
            ids(&circle),
            [("b-c0".into(), 1), ("b-c1".into(), 0), ("b-c1".into(), 2)]
        );
    }

    #[test]
    fn pop_mode_without_sharing_pops_every_core_whole() {
        let all = queues(&["b-c0", "b-c1"], 4);
        for c in ["c0", "c2"] {
            let got = assign(
                "AVG",
                c,
                all.clone(),
                members(3),
                &mode(ConsumeMode::Pop, 0),
            )
            .unwrap();
            assert_eq!(ids(&got), [("b-c0".into(), -1), ("b-c1".into(), -1)]);
        }
    }

    #[test]
    fn pop_mode_with_sharing_adds_the_next_members_queues() {
        let all = queues(&["b"], 8);
        // Four members, each sharing with the one after it: c1 gets its own two queues and
        // c2's.
        let got = assign(
            "AVG",
            "c1",
            all.clone(),
            members(4),
            &mode(ConsumeMode::Pop, 1),
        )
        .unwrap();
        assert_eq!(
            ids(&got),
            [
                ("b".into(), 2),
                ("b".into(), 3),
                ("b".into(), 4),
                ("b".into(), 5)
            ]
        );
        // The last wraps to the first.
        let got = assign(
            "AVG",
            "c3",
            all.clone(),
            members(4),
            &mode(ConsumeMode::Pop, 1),
        )
        .unwrap();
        assert_eq!(
            ids(&got),
            [
                ("b".into(), 0),
                ("b".into(), 1),
                ("b".into(), 6),
                ("b".into(), 7)
            ]
        );
        // More members than queues: one each, in turn.
        let two = queues(&["b"], 2);
        let got = assign("AVG", "c2", two, members(4), &mode(ConsumeMode::Pop, 1)).unwrap();
        assert_eq!(ids(&got), [("b".into(), 0)]);
    }

    #[test]
    fn no_members_or_an_unknown_strategy_keeps_what_the_client_has() {
        let all = queues(&["b"], 2);
        assert!(assign(
            "AVG",
            "c0",
            all.clone(),
            vec![],
            &mode(ConsumeMode::Pull, -1)
        )
        .is_none());
        assert!(assign(
            "MACHINE_ROOM",
            "c0",
            all.clone(),
            members(1),
            &mode(ConsumeMode::Pull, -1)
        )
        .is_none());
        // A client the broker has not heard from yet gets nothing, not everything.
        assert_eq!(
            assign(
                "AVG",
                "stranger",
                all,
                members(2),
                &mode(ConsumeMode::Pull, -1)
            ),
            Some(vec![])
        );
    }
}
