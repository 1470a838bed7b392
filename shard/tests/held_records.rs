#![allow(clippy::unwrap_used)]
//! Records held for a delivery time (`DELAY`, `TIMER_*`): indexed in the shard's timer queue
//! and not in their own, the same after recovery, never deleted by retention while the
//! broker's timer holds them.

mod common;

use common::*;
use message::timer::TIMER_QUEUE_TOPIC;
use message::{encode_record, MessageFields, RecordView, TagFilter};
use shard::{QueueOffset, Shard, ShardError};

fn held(body: &[u8], key: &str, value: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_record(
        &MessageFields {
            topic: TOPIC,
            body,
            born_timestamp_ms: 1,
            properties: &[("KEYS", "k1"), (key, value)],
            ..Default::default()
        },
        &mut out,
    )
    .unwrap();
    out
}

async fn timer_queue(shard: &Shard) -> Vec<Vec<u8>> {
    read_all(shard, TIMER_QUEUE_TOPIC, 0, &TagFilter::All).await
}

#[test]
fn held_records_go_to_the_timer_queue_also_after_recovery() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        append_one(&shard, 1, b"now-0").await.unwrap();
        let r = shard
            .append(TOPIC, 1, &held(b"later-0", "DELAY", "3"))
            .await
            .unwrap();
        assert_eq!(
            r.first_queue_offset,
            QueueOffset(0),
            "the timer queue's offset"
        );
        shard
            .append(TOPIC, 1, &held(b"later-1", "TIMER_DELAY_SEC", "5"))
            .await
            .unwrap();
        // DELAY of 0 is no delay.
        shard
            .append(TOPIC, 1, &held(b"now-1", "DELAY", "0"))
            .await
            .unwrap();
        let check = |shard: Shard| async move {
            assert_eq!(
                bodies_of(&read_all(&shard, TOPIC, 1, &TagFilter::All).await),
                vec![b"now-0".to_vec(), b"now-1".to_vec()],
                "only immediate records in their queue"
            );
            let held = timer_queue(&shard).await;
            assert_eq!(
                bodies_of(&held),
                vec![b"later-0".to_vec(), b"later-1".to_vec()]
            );
            // A held record keeps its topic and queue id; its keys are not indexed.
            let v = RecordView::parse(&held[0]).unwrap();
            assert_eq!((v.topic(), v.queue_id(), v.queue_offset()), (TOPIC, 1, 0));
            let found = shard
                .query_by_key(TOPIC, "k1", 0, i64::MAX, 10)
                .await
                .unwrap();
            // (`now-1`, not held, has the key too.)
            let found: Vec<Vec<u8>> = found.iter().map(|s| s.as_bytes().to_vec()).collect();
            assert_eq!(
                bodies_of(&found),
                vec![b"now-1".to_vec()],
                "held records' keys are indexed at delivery, not now"
            );
            shard
        };
        let shard = check(shard).await;
        shard.close().await.unwrap();
        // Recovery rebuilds the ConsumeQueues from the log: the same queues.
        for entry in std::fs::read_dir(p.join("consumequeue")).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let shard = check(shard).await;
        shard.close().await.unwrap();
    })
}

#[test]
fn bad_times_and_mixed_batches_are_refused_before_anything_is_stored() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.timer.max_delay_ms = 60_000;
        let shard = Shard::open(c).await.unwrap();
        let e = shard
            .append(TOPIC, 0, &held(b"x", "DELAY", "soon"))
            .await
            .unwrap_err();
        assert!(matches!(e, ShardError::BadTimer(_)), "{e}");
        let e = shard
            .append(TOPIC, 0, &held(b"x", "TIMER_DELAY_SEC", "61"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("timer_max_delay_sec"), "{e}");
        let mut batch = record(TOPIC, b"now", None, None);
        batch.extend(held(b"later", "DELAY", "1"));
        let e = shard.append(TOPIC, 0, &batch).await.unwrap_err();
        assert!(matches!(e, ShardError::MixedTimerBatch), "{e}");
        assert!(read_all(&shard, TOPIC, 0, &TagFilter::All).await.is_empty());
        assert!(timer_queue(&shard).await.is_empty());
        shard.close().await.unwrap();
    })
}

#[test]
fn retention_keeps_segments_from_the_floor_on() {
    in_temp_dir(move |p| async move {
        let mut c = small_config(&p);
        c.file_reserved_hours = 0; // every segment but the active one is expired
        let shard = Shard::open(c).await.unwrap();
        append_numbered(&shard, 0..20, 900).await;
        let r = shard
            .append(TOPIC, 0, &held(&body(999, 900), "DELAY", "18"))
            .await
            .unwrap();
        append_numbered(&shard, 20..300, 900).await;
        let segments = || std::fs::read_dir(p.join("commitlog")).unwrap().count();
        assert!(segments() >= 4);
        shard.set_retention_floor(r.first_commit_log_offset.0);
        shard.run_retention().await.unwrap();
        // The held record's segment stays, with everything after it.
        assert_eq!(bodies_of(&timer_queue(&shard).await), vec![body(999, 900)]);
        let kept = segments();
        assert!(kept >= 3, "segments from the held record's on stay: {kept}");
        // Delivered: the floor moves past it and retention takes the rest.
        shard.set_retention_floor(u64::MAX);
        shard.run_retention().await.unwrap();
        assert_eq!(segments(), 1);
        assert!(timer_queue(&shard).await.is_empty());
        shard.close().await.unwrap();
    })
}
