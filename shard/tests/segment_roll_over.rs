#![allow(clippy::unwrap_used)]
//! Records never span segments: a record that does not fit goes to the next segment,
//! named by its start offset, after an end-of-segment blank.

mod common;

use common::*;
use message::TagFilter;
use shard::Shard;

#[test]
fn appends_roll_over_to_new_segments_and_read_back() {
    in_temp_dir(move |p| async move {
        let shard = Shard::open(small_config(&p)).await.unwrap();
        let mut expected = Vec::new();
        for i in 0..120 {
            let len = 700 + (i * 37) % 3000;
            expected.push(body(i, len));
            let r = append_one(&shard, 0, &expected[i]).await.unwrap();
            let seg = 64u64 << 10;
            let start = r.first_commit_log_offset.0;
            let rec_len = record(TOPIC, &expected[i], None, None).len() as u64;
            assert_eq!(
                start / seg,
                (start + rec_len - 1) / seg,
                "record {i} spans segments"
            );
        }
        let segs: Vec<String> = {
            let mut v: Vec<_> = std::fs::read_dir(p.join("commitlog"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert!(segs.len() >= 3, "{segs:?}");
        assert_eq!(segs[1], format!("{:020}", 64 << 10));
        assert_eq!(
            bodies_of(&read_all(&shard, TOPIC, 0, &TagFilter::All).await),
            expected
        );
        shard.close().await.unwrap();
        let shard = Shard::open(small_config(&p)).await.unwrap();
        assert_eq!(
            bodies_of(&read_all(&shard, TOPIC, 0, &TagFilter::All).await),
            expected
        );
        shard.close().await.unwrap();
    });
}
