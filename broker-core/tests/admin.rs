//! What the kernel does for the whole broker: request-reply pushes, topic and group config
//! changes seen by every core, the graceful stop's refusal of sends, and the status.

mod common;

use std::sync::atomic::Ordering;

use broker_core::mesh::SubGroupOp;
use broker_core::reply::{prop as reply_prop, ReplyPush};
use broker_core::sub_groups::{GroupConfig, SubGroupTable};
use broker_core::topics::TopicTable;
use broker_core::BrokerError;
use common::*;

fn reply_to(client_id: &str, correlation: &str) -> ReplyPush {
    ReplyPush {
        producer_group: "replier".into(),
        topic: "DefaultCluster_REPLY_TOPIC".into(),
        queue_id: 0,
        body: bytes::Bytes::from_static(b"pong"),
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms(),
        born_host: None,
        reconsume_times: 0,
        properties: vec![
            (reply_prop::REPLY_TO_CLIENT.into(), client_id.into()),
            (reply_prop::CORRELATION_ID.into(), correlation.into()),
            (reply_prop::MSG_TYPE.into(), "reply".into()),
        ],
    }
}

/// A reply is pushed to its requester over the requester's connection, which core 1
/// serves, though the replier's came in on core 0.
#[test]
fn a_reply_is_pushed_to_its_requester_on_the_core_that_serves_it() {
    let c = Cluster::start(2, 4);
    c.link(1).log().connected.insert("requester-1".into());
    c.on(0, |core| async move {
        core.push_reply(reply_to("requester-1", "corr-7")).await
    })
    .expect("pushed");
    let log = c.link(1).log();
    assert_eq!(log.pushed.len(), 1);
    let (to, reply) = &log.pushed[0];
    assert_eq!(to, "requester-1");
    assert_eq!(&reply.body[..], b"pong");
    assert!(reply
        .properties
        .iter()
        .any(|(k, v)| k == reply_prop::CORRELATION_ID && v == "corr-7"));
    assert!(
        reply
            .properties
            .iter()
            .any(|(k, _)| k == reply_prop::PUSH_REPLY_TIME),
        "the push is stamped with its time"
    );
    drop(log);
    assert!(c.link(0).log().pushed.is_empty());
    c.stop();
}

/// A reply whose requester has no connection anywhere is answered NOT_FOUND, and a reply
/// that names no requester is refused.
#[test]
fn a_reply_without_a_connected_requester_is_not_found() {
    let c = Cluster::start(2, 4);
    let gone = c.on(1, |core| async move {
        core.push_reply(reply_to("gone", "c")).await
    });
    match gone {
        Err(BrokerError::NotFound(m)) => assert!(m.contains("gone"), "{m}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let mut nameless = reply_to("", "c");
    nameless
        .properties
        .retain(|(k, _)| k != reply_prop::REPLY_TO_CLIENT);
    let refused = c.on(
        0,
        move |core| async move { core.push_reply(nameless).await },
    );
    assert!(
        matches!(refused, Err(BrokerError::BadRequest(_))),
        "{refused:?}"
    );
    for core in [0, 1] {
        assert!(c.link(core).log().pushed.is_empty());
    }
    c.stop();
}

/// A topic created through core 1 is known to every core and written to the data
/// directory; deleted through core 1, it is gone from every core and from the file.
#[test]
fn topic_creation_and_deletion_reach_every_core() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.auto_create_topic_enable = false);
    let data_dir = c.shared.config.data_dir.clone();
    let version_before = c.shared.topics_version.load(Ordering::SeqCst);
    c.on(1, |core| async move {
        core.create_topic(topic("Shared", 3)).await
    })
    .expect("created");
    for core_id in [0, 1] {
        let cfg = c
            .on(core_id, |core| async move { core.topic_for_read("Shared") })
            .expect("known on every core");
        assert_eq!(cfg.write_queues, 3);
    }
    assert!(c.shared.topics_version.load(Ordering::SeqCst) > version_before);
    let stored = TopicTable::load(&data_dir).expect("the topic file reads");
    assert!(
        stored.get("Shared").is_some(),
        "the topic is written to disk"
    );
    c.on(0, |core| async move {
        core.send("Shared", 2, record("Shared", "x", None, &[]), 1)
            .await
            .map(|_| ())
    })
    .expect("a send to the new topic is stored");

    c.on(
        1,
        |core| async move { core.delete_topic("Shared".into()).await },
    )
    .expect("deleted");
    for core_id in [0, 1] {
        let gone = c.on(core_id, |core| async move {
            core.send("Shared", 0, record("Shared", "x", None, &[]), 1)
                .await
                .map(|_| ())
        });
        assert!(
            matches!(gone, Err(BrokerError::TopicNotExist(_))),
            "core {core_id}: {gone:?}"
        );
    }
    let stored = TopicTable::load(&data_dir).expect("the topic file reads");
    assert!(
        stored.get("Shared").is_none(),
        "the topic is deleted from disk"
    );
    assert!(c
        .shared
        .topics
        .lock()
        .map(|t| !t.contains_key("Shared"))
        .unwrap_or(false));
    c.stop();
}

/// Subscription group configs live on core 0: upserted, listed and deleted through core 1
/// they are the same from both cores, and written to the data directory.
#[test]
fn subscription_groups_are_kept_by_core_0_for_every_core() {
    let c = Cluster::start(2, 4);
    let data_dir = c.shared.config.data_dir.clone();
    let mut fields = serde_json::Map::new();
    fields.insert(GroupConfig::NAME_KEY.into(), "billing".into());
    fields.insert("consumeBroadcastEnable".into(), true.into());
    let cfg = GroupConfig::new(fields).expect("a valid group config");
    let listed = c
        .on(1, move |core| async move {
            core.sub_group(SubGroupOp::Upsert(cfg)).await
        })
        .expect("upserted");
    assert_eq!(
        listed.iter().map(GroupConfig::name).collect::<Vec<_>>(),
        ["billing"]
    );
    for core_id in [0, 1] {
        let one = c
            .on(core_id, |core| async move {
                core.sub_group(SubGroupOp::List(Some("billing".into())))
                    .await
            })
            .expect("listed");
        assert_eq!(one.len(), 1, "core {core_id}");
        assert_eq!(
            one[0].fields().get("consumeBroadcastEnable"),
            Some(&serde_json::Value::Bool(true))
        );
    }
    let on_disk = SubGroupTable::load(&data_dir).expect("the group file reads");
    assert!(on_disk.get("billing").is_some(), "written to disk");
    let after = c
        .on(1, |core| async move {
            core.sub_group(SubGroupOp::Delete("billing".into())).await
        })
        .expect("deleted");
    assert!(after.is_empty(), "{after:?}");
    let none = c
        .on(0, |core| async move {
            core.sub_group(SubGroupOp::List(None)).await
        })
        .expect("listed");
    assert!(none.is_empty(), "{none:?}");
    let on_disk = SubGroupTable::load(&data_dir).expect("the group file reads");
    assert!(on_disk.get("billing").is_none(), "deleted from disk");
    c.stop();
}

/// Once shutdown has begun every core refuses new sends and transaction ends with
/// SHUTTING_DOWN, and still serves pulls of what was stored.
#[test]
fn after_shutdown_begins_sends_are_refused_and_pulls_served() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Closing", 4);
    c.on(1, |core| async move {
        core.send("Closing", 0, record("Closing", "kept", None, &[]), 1)
            .await
            .map(|_| ())
    })
    .expect("stored before the stop");
    c.shared.request_shutdown();
    for from in [0, 1] {
        let refused = c.on(from, |core| async move {
            core.send("Closing", 0, record("Closing", "late", None, &[]), 1)
                .await
                .map(|_| ())
        });
        assert!(
            matches!(refused, Err(BrokerError::ShuttingDown)),
            "core {from}: {refused:?}"
        );
        let end = protocol::EndTransaction {
            producer_group: "pg".into(),
            shard: 0,
            commit_log_offset: 0,
            queue_offset: 0,
            msg_id: String::new(),
            state: protocol::TransactionState::Commit,
            from_check: false,
        };
        let refused = c.on(
            from,
            move |core| async move { core.end_transaction(end).await },
        );
        assert!(
            matches!(refused, Err(BrokerError::ShuttingDown)),
            "core {from}: {refused:?}"
        );
        let p = c
            .on(from, |core| async move {
                pull(&core, pull_request("g", "Closing", 0, 0)).await
            })
            .expect("pulls are served while stopping");
        assert_eq!(p.bodies(), ["kept"]);
    }
    c.stop();
}

/// The status lists each core's shards and counts the messages each core took and served.
#[test]
fn status_counts_each_cores_messages() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Counted", 8);
    let on1 = queue_on(&c, "Counted", 8, 1);
    c.on(0, move |core| async move {
        for i in 0..3 {
            let r = record("Counted", &format!("m{i}"), None, &[]);
            core.send("Counted", on1, r, 1).await.map(|_| ())?;
        }
        Ok::<_, BrokerError>(())
    })
    .expect("sent");
    c.on(1, move |core| async move {
        let mut batch = record("Counted", "b0", None, &[]).to_vec();
        batch.extend_from_slice(&record("Counted", "b1", None, &[]));
        core.send("Counted", on1, batch.into(), 2)
            .await
            .map(|_| ())?;
        pull(&core, pull_request("g", "Counted", on1, 0))
            .await
            .map(|_| ())
    })
    .expect("sent and pulled");
    let status = c
        .on(1, |core| async move { core.status().await })
        .expect("status");
    assert_eq!(status.len(), 2);
    assert_eq!((status[0].core, status[1].core), (0, 1));
    assert_eq!(status[0].produced_messages, 3, "sends taken by core 0");
    assert_eq!(status[1].produced_messages, 2, "sends taken by core 1");
    assert_eq!(status[0].cross_core_hops, 3);
    // The pull was served by core 1, which owns the queue.
    assert_eq!(status[1].consumed_messages, 5);
    let mut shards: Vec<u16> = status.iter().flat_map(|s| s.shards.clone()).collect();
    shards.sort_unstable();
    assert_eq!(shards, [0, 1, 2, 3], "every shard is on one core");
    let local = c.on(0, |core| async move { core.local_status() });
    assert_eq!(local.produced_messages, 3);
    c.stop();
}

/// A reply is pushed and, with `store_reply_message_enable`, stored in the cluster's reply
/// topic, which exists once a request came in even with auto-creation off.
#[test]
fn a_reply_is_stored_in_the_reply_topic_as_well_as_pushed() {
    let c = Cluster::start_with(2, 4, |cfg| {
        cfg.auto_create_topic_enable = false;
        cfg.store_reply_message_enable = true;
    });
    let reply_topic = broker_core::reply::reply_topic(&c.shared.config.cluster_name);
    c.on(1, |core| async move { core.ensure_reply_topic().await });
    c.link(0).log().connected.insert("requester-2".into());
    let mut r = reply_to("requester-2", "corr-9");
    r.topic = reply_topic.clone();
    r.queue_id = 1;
    c.on(1, move |core| async move { core.reply(r).await })
        .expect("pushed");
    assert_eq!(c.link(0).log().pushed.len(), 1);
    let t = reply_topic.clone();
    let p = c
        .on(0, move |core| async move {
            pull(&core, pull_request("g", &t, 1, 0)).await
        })
        .expect("the reply topic exists");
    assert_eq!(p.bodies(), ["pong"]);
    assert_eq!(
        p.messages[0].property(reply_prop::CORRELATION_ID),
        Some("corr-9")
    );
    c.stop();
}

/// A topic with a bad name, or one that would take the broker past `queues_max`, is refused
/// and reaches no core.
#[test]
fn a_bad_or_too_large_topic_is_refused_everywhere() {
    let c = Cluster::start_with(2, 4, |cfg| cfg.queues_max = 16);
    create_topic(&c, "Small", 8);
    let too_many = c.on(1, |core| async move {
        core.create_topic(topic("Large", 9)).await
    });
    match too_many {
        Err(BrokerError::BadRequest(m)) => assert!(m.contains("queues_max"), "{m}"),
        other => panic!("expected BadRequest, got {other:?}"),
    }
    let bad_name = c.on(0, |core| async move {
        core.create_topic(topic("no spaces", 1)).await
    });
    assert!(
        matches!(bad_name, Err(BrokerError::BadRequest(_))),
        "{bad_name:?}"
    );
    for core_id in [0, 1] {
        let (large, bad) = c.on(core_id, |core| async move {
            (
                core.topic_for_read("Large").is_ok(),
                core.topic_for_read("no spaces").is_ok(),
            )
        });
        assert!(!large && !bad, "core {core_id} has a refused topic");
    }
    // Growing an existing topic within the bound is fine.
    c.on(1, |core| async move {
        core.create_topic(topic("Small", 16)).await
    })
    .expect("within queues_max");
    c.stop();
}

/// Whether a client is connected is answered by any core, from the links of all.
#[test]
fn a_client_connected_to_any_core_is_found() {
    let c = Cluster::start(2, 4);
    c.link(1).log().connected.insert("somewhere".into());
    for from in [0, 1] {
        let (here, gone) = c.on(from, |core| async move {
            (
                core.client_connected("somewhere").await,
                core.client_connected("nowhere").await,
            )
        });
        assert!(here.expect("asked"), "from core {from}");
        assert!(!gone.expect("asked"), "from core {from}");
    }
    c.stop();
}

/// What a client says it is doing is asked of the core its connection is on, from any core;
/// a client connected nowhere is `NotFound`.
#[test]
fn a_clients_running_info_is_asked_on_the_core_it_is_connected_to() {
    let c = Cluster::start(2, 4);
    let info = protocol::ClientRunningInfo {
        client_id: "busy@1".into(),
        groups: vec![protocol::GroupRunningInfo {
            group: "Readers".into(),
            topics: vec!["Orders".into()],
        }],
    };
    c.link(1)
        .log()
        .running
        .insert("busy@1".into(), info.clone());
    for from in [0, 1] {
        let (found, missing) = c.on(from, |core| async move {
            (
                core.client_running_info("busy@1").await,
                core.client_running_info("idle@2").await,
            )
        });
        assert_eq!(found.expect("answered"), info, "from core {from}");
        assert!(
            matches!(missing, Err(BrokerError::NotFound(_))),
            "from core {from}: {missing:?}"
        );
    }
    c.stop();
}
