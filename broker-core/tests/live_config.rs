//! Config changes while the broker runs (RocketMQ's UPDATE_BROKER_CONFIG): the keys that may
//! change apply on every core at once, whichever core was asked; the rest are stored for the
//! next start; a refused change changes nothing.

mod common;

use std::sync::atomic::Ordering;

use broker_core::BrokerError;
use bytes::Bytes;
use common::*;

/// A record of `topic` whose body is `len` bytes.
fn sized(topic: &str, len: usize) -> Bytes {
    record(topic, &"x".repeat(len), None, &[])
}

/// Sends `rec` to a queue of `topic` owned by each core, from each core: the answers.
fn send_everywhere(c: &Cluster, topic: &str, rec: &Bytes) -> Vec<Result<(), BrokerError>> {
    let mut answers = Vec::new();
    for owner in 0..c.cores {
        let queue = queue_on(c, topic, 8, owner);
        for from in 0..c.cores {
            let (t, r) = (topic.to_owned(), rec.clone());
            answers.push(c.on(from, move |core| async move {
                core.send(&t, queue, r, 1).await.map(|_| ())
            }));
        }
    }
    answers
}

fn update(
    c: &Cluster,
    on: u16,
    properties: &str,
) -> Result<broker_core::live_config::ConfigUpdate, BrokerError> {
    let p = properties.to_owned();
    c.on(on, move |core| async move { core.update_config(p).await })
}

/// `maxMessageSize` asked of core 1 applies on every core's shards at once: a larger send is
/// refused with MessageTooLarge from every core to every shard, a smaller one is stored,
/// every core reports the new value, and the overrides file keeps it for the next start.
#[test]
fn a_lowered_max_message_size_refuses_larger_sends_on_every_core_at_once() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Sized", 8);
    let big = sized("Sized", 8 << 10);
    assert!(send_everywhere(&c, "Sized", &big).iter().all(Result::is_ok));

    let done = update(&c, 1, "maxMessageSize=4096\n").expect("applied");
    assert_eq!(done.live, ["message_bytes_max"]);
    assert!(done.restart.is_empty());
    for answer in send_everywhere(&c, "Sized", &big) {
        match answer {
            Err(BrokerError::MessageTooLarge { max, .. }) => assert_eq!(max, 4096),
            other => panic!("expected MessageTooLarge, got {other:?}"),
        }
    }
    let small = sized("Sized", 1000);
    assert!(send_everywhere(&c, "Sized", &small)
        .iter()
        .all(Result::is_ok));
    for core in 0..c.cores {
        let max = c.on(core, |core| async move {
            Ok::<_, ()>(core.config().message_bytes_max)
        });
        assert_eq!(max, Ok(4096), "core {core}");
    }
    let stored = std::fs::read_to_string(&done.path).expect("the overrides file");
    assert!(stored.contains("message_bytes_max = 4096"), "{stored}");
    let mut restarted = c.shared.config.clone();
    restarted.overlay_overrides().expect("the file reads");
    assert_eq!(restarted.message_bytes_max, 4096);

    // Raised again, the larger send is stored.
    update(&c, 0, "maxMessageSize=65536").expect("applied");
    assert!(send_everywhere(&c, "Sized", &big).iter().all(Result::is_ok));
    c.stop();
}

/// `brokerPermission 4` (read-only) refuses sends on every core and keeps pulls; the routes
/// the broker registers lose the write permission at once; 6 takes sends again.
#[test]
fn a_read_only_broker_refuses_sends_and_serves_pulls_until_it_may_write_again() {
    let c = Cluster::start(2, 4);
    create_topic(&c, "Drained", 8);
    let rec = sized("Drained", 10);
    assert!(send_everywhere(&c, "Drained", &rec)
        .iter()
        .all(Result::is_ok));

    let done = update(&c, 1, "brokerPermission=4").expect("applied");
    assert_eq!(done.live, ["broker_permission"]);
    assert_eq!(c.shared.broker_permission.load(Ordering::SeqCst), 4);
    assert!(
        c.shared.register_now.load(Ordering::SeqCst),
        "registered again at once"
    );
    for answer in send_everywhere(&c, "Drained", &rec) {
        match answer {
            Err(BrokerError::NoPermission(why)) => {
                assert!(why.contains("sending message is forbidden"), "{why}")
            }
            other => panic!("expected NoPermission, got {other:?}"),
        }
    }
    for core in 0..c.cores {
        let queue = queue_on(&c, "Drained", 8, core);
        let p = c
            .on(1 - core, move |core| async move {
                pull(&core, pull_request("g", "Drained", queue, 0)).await
            })
            .expect("a read-only broker serves pulls");
        assert_eq!(p.messages.len(), 2, "one from each core");
    }

    update(&c, 0, "brokerPermission=2").expect("applied");
    let refused = c.on(0, |core| async move {
        pull(&core, pull_request("g", "Drained", 0, 0))
            .await
            .map(|_| ())
    });
    assert!(
        matches!(refused, Err(BrokerError::NoPermission(_))),
        "{refused:?}"
    );

    update(&c, 0, "brokerPermission=6").expect("applied");
    assert_eq!(c.shared.broker_permission.load(Ordering::SeqCst), 6);
    assert!(send_everywhere(&c, "Drained", &rec)
        .iter()
        .all(Result::is_ok));
    c.stop();
}

/// A bad value, a key RocketMQ refuses remotely, or a key corvus does not apply changes
/// nothing (no core's config, no file); a key read at start is stored for the restart and
/// named as such, and the running value stays.
#[test]
fn refused_changes_change_nothing_and_start_keys_wait_for_the_restart() {
    let c = Cluster::start(2, 4);
    let before = c.shared.config.message_bytes_max;
    for (properties, why) in [
        ("maxMessageSize=abc", "not a whole number"),
        ("maxMessageSize=100", "message_bytes_max"),
        (
            "maxMessageSize=4096\nfileReservedTime=0",
            "file_reserved_hours",
        ),
        ("brokerPermission=9", "broker_permission"),
        ("deleteWhen=04", "deleteWhen"),
    ] {
        match update(&c, 1, properties) {
            Err(BrokerError::BadRequest(e)) => assert!(e.contains(why), "{properties}: {e}"),
            other => panic!("{properties}: expected BadRequest, got {other:?}"),
        }
    }
    for properties in ["brokerConfigPath=/tmp/x", "storePathRootDir=/tmp/y"] {
        match update(&c, 0, properties) {
            Err(BrokerError::NoPermission(e)) => {
                assert!(e.contains("black list"), "{properties}: {e}")
            }
            other => panic!("{properties}: expected NoPermission, got {other:?}"),
        }
    }
    let path = c.shared.config.overrides_path();
    assert!(!path.exists(), "nothing was stored");
    for core in 0..c.cores {
        let max = c.on(core, |core| async move {
            Ok::<_, ()>(core.config().message_bytes_max)
        });
        assert_eq!(max, Ok(before));
    }

    let done = update(&c, 1, "connections_max=500\nfileReservedTime=12").expect("stored");
    assert_eq!(done.live, ["file_reserved_hours"]);
    assert_eq!(done.restart, ["connections_max"]);
    for core in 0..c.cores {
        let (kept, hours) = c
            .on(core, |core| async move {
                let cfg = core.config();
                Ok::<_, ()>((cfg.connections_max, cfg.file_reserved_hours))
            })
            .expect("read");
        assert_eq!(
            (kept, hours),
            (c.shared.config.connections_max, 12),
            "core {core}"
        );
    }
    let mut next_start = c.shared.config.clone();
    next_start.overlay_overrides().expect("the file reads");
    assert_eq!(
        (next_start.connections_max, next_start.file_reserved_hours),
        (500, 12)
    );
    c.stop();
}

/// Keys read per request change what every core answers at once: SQL92 filters are taken
/// once `enablePropertyFilter` is on, and recalls refused once `recallMessageEnable` is off.
#[test]
fn per_request_switches_apply_on_every_core_at_once() {
    let c = Cluster::start(2, 4);
    let filters = |c: &Cluster| -> Vec<bool> {
        (0..c.cores)
            .map(|core| {
                c.on(core, |core| async move {
                    Ok::<_, ()>(core.check_sql92("a > 1").is_ok())
                })
                .expect("asked")
            })
            .collect()
    };
    assert_eq!(filters(&c), [false, false]);
    let done = update(
        &c,
        1,
        "enablePropertyFilter=true\nrecallMessageEnable=false",
    )
    .expect("applied");
    assert_eq!(
        done.live,
        ["enable_property_filter", "recall_message_enable"]
    );
    assert_eq!(filters(&c), [true, true]);
    for core in 0..c.cores {
        let refused = c.on(
            core,
            |core| async move { core.recall("Any", "handle").await },
        );
        match refused {
            Err(BrokerError::NoPermission(why)) => {
                assert!(why.contains("recall_message_enable = false"), "{why}")
            }
            other => panic!("core {core}: expected NoPermission, got {other:?}"),
        }
    }
    c.stop();
}
