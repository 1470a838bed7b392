#![allow(clippy::unwrap_used)]
//! Appends come back from reads byte for byte, hot (from memory) and cold (from disk).

mod common;

use common::*;
use message::{RecordView, TagFilter};
use shard::{ReadRequest, ReadStatus, Shard};

#[test]
fn appended_batches_read_back_hot_and_cold() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let mut expected = Vec::new();
        for b in 0..20 {
            let mut batch = Vec::new();
            for i in 0..5 {
                let n = b * 5 + i;
                expected.push(body(n, 300 + n * 7));
                batch.extend(record(TOPIC, &expected[n], Some("TagA"), None));
            }
            let r = shard.append(TOPIC, 1, &batch).await.unwrap();
            assert_eq!(r.first_queue_offset, b as u64 * 5);
            assert_eq!(r.count, 5);
        }
        assert_eq!(shard.queue_offsets(TOPIC, 1).max, 100);
        assert_eq!(shard.queue_offsets(TOPIC, 9).max, 0);
        let got = read_all(&shard, TOPIC, 1, &TagFilter::All).await;
        assert_eq!(bodies_of(&got), expected);
        // Every record carries its own queue offset and queue id.
        for (i, r) in got.iter().enumerate() {
            let v = RecordView::parse(r).unwrap();
            assert_eq!(v.queue_offset(), i as u64);
            assert_eq!(v.queue_id(), 1);
            v.verify_crc().unwrap();
        }
        let s = shard.stats();
        assert!(s.durable_offset <= s.written_offset && s.written_offset <= s.write_offset);
        assert_eq!(s.durable_offset, s.write_offset, "sync flush: all durable");
        shard.close().await.unwrap();

        // Reopen: everything is cold now and still identical.
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let got = read_all(&shard, TOPIC, 1, &TagFilter::All).await;
        assert_eq!(bodies_of(&got), expected);
        assert_eq!(shard.topics(), vec![(TOPIC.to_string(), 1)]);
        // Appends continue after the recovered end.
        let r = append_one(&shard, 1, b"more").await.unwrap();
        assert_eq!(r.first_queue_offset, 100);
        shard.close().await.unwrap();
    });
}

#[test]
fn read_statuses_follow_rocketmq() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let all = TagFilter::All;
        let req = |q| ReadRequest {
            topic: TOPIC,
            queue_id: 0,
            queue_offset: q,
            max_messages: 10,
            max_bytes: 1 << 20,
            filter: &all,
        };
        assert_eq!(
            shard.read(&req(QueueOffset(0))).await.unwrap().status,
            ReadStatus::NoNewMessage
        );
        append_numbered(&shard, 0..3, 10).await;
        let r = shard.read(&req(QueueOffset(0))).await.unwrap();
        assert_eq!(
            (r.status, r.records.len(), r.next_queue_offset),
            (ReadStatus::Found, 3, QueueOffset(3))
        );
        assert_eq!(
            shard.read(&req(QueueOffset(3))).await.unwrap().status,
            ReadStatus::NoNewMessage
        );
        let r = shard.read(&req(QueueOffset(7))).await.unwrap();
        assert_eq!(
            (r.status, r.next_queue_offset),
            (ReadStatus::OffsetOverflow, QueueOffset(3))
        );
        // max_bytes limits the batch but never below one record.
        let mut small = req(QueueOffset(0));
        small.max_bytes = 1;
        assert_eq!(shard.read(&small).await.unwrap().records.len(), 1);
        shard.close().await.unwrap();
        assert!(matches!(
            append_one(&shard, 0, b"x").await,
            Err(shard::ShardError::Closed)
        ));
    });
}

#[test]
fn bad_batches_are_refused_before_anything_is_stored() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let mut batch = record(TOPIC, b"ok", None, None);
        batch.extend(record("Other", b"wrong topic", None, None));
        assert!(matches!(
            shard.append(TOPIC, 0, &batch).await,
            Err(shard::ShardError::TopicMismatch { .. })
        ));
        let big = record(TOPIC, &vec![0u8; 20 << 10], None, None);
        assert!(matches!(
            shard.append(TOPIC, 0, &big).await,
            Err(shard::ShardError::MessageTooLarge { .. })
        ));
        let mut torn = record(TOPIC, b"ok", None, None);
        torn.pop();
        assert!(matches!(
            shard.append(TOPIC, 0, &torn).await,
            Err(shard::ShardError::BadRecord(_))
        ));
        assert!(matches!(
            shard.append(TOPIC, 0, &[]).await,
            Err(shard::ShardError::EmptyBatch)
        ));
        // A sender that said three records but sent two.
        let mut two = record(TOPIC, b"a", None, None);
        two.extend(record(TOPIC, b"b", None, None));
        assert!(matches!(
            shard.append_counted(TOPIC, 0, &two, 3).await,
            Err(shard::ShardError::CountMismatch {
                expected: 3,
                found: 2
            })
        ));
        assert_eq!(shard.queue_offsets(TOPIC, 0).max, 0);
        assert_eq!(shard.stats().write_offset, 0);
        // The right count is accepted.
        let r = shard.append_counted(TOPIC, 0, &two, 2).await.unwrap();
        assert_eq!(r.count, 2);
        shard.close().await.unwrap();
    });
}

/// Records read by the spans an index keeps (offset and size), hot and cold, in one call:
/// each as stored; a wrong size or a span past the end is no record.
#[test]
fn records_read_by_their_spans_together() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let bodies = append_numbered(&shard, 0..300, 700).await;
        let all = TagFilter::All;
        let stored = read_all(&shard, TOPIC, 0, &all).await;
        assert_eq!(stored.len(), bodies.len());
        // The first (cold by now), one in the middle and the last (hot), out of order.
        let picks = [299, 0, 150];
        let mut spans: Vec<(CommitLogOffset, u32)> = picks
            .iter()
            .map(|&i| {
                let v = RecordView::parse(&stored[i]).unwrap();
                (CommitLogOffset(v.physical_offset()), stored[i].len() as u32)
            })
            .collect();
        let (last_at, last_len) = spans[0];
        spans.push((last_at, last_len - 1));
        spans.push((CommitLogOffset(last_at.0 + (1 << 20)), last_len));
        let got = shard.read_spans(&spans).await.unwrap();
        assert_eq!(got.len(), 5);
        for (k, &i) in picks.iter().enumerate() {
            let rec = got[k].as_ref().expect("a record at its span");
            assert_eq!(RecordView::parse(rec.as_bytes()).unwrap().body(), bodies[i]);
        }
        assert!(got[3].is_none(), "a wrong size is no record");
        assert!(got[4].is_none(), "past the end is no record");
        shard.close().await.unwrap();
    })
}
