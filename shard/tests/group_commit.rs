#![allow(clippy::unwrap_used)]
//! Sync flush with many appenders at once: group commits overlap (the next group is written
//! and its fdatasync started while the previous one's is in flight), yet an append returns
//! only once everything up to its end is durable, also across segment boundaries, and all
//! of it is there after a restart.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use shard::Shard;

const TASKS: usize = 32;
const APPENDS: usize = 20;

#[test]
fn every_acknowledged_append_is_durable_while_syncs_overlap() {
    appends_are_durable_when_acknowledged(false);
}

/// With warm segments one sync runs at a time, and segments come from spares.
#[test]
fn every_acknowledged_append_is_durable_with_warm_segments() {
    appends_are_durable_when_acknowledged(true);
}

fn appends_are_durable_when_acknowledged(warm: bool) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_owned();
    let config = move |p: &std::path::Path| {
        let mut c = small_config(p);
        c.warm_segments = warm;
        c
    };
    shard::run_local(move || async move {
        // small_config: sync flush, 64 KiB segments: the run crosses many of them.
        let shard = Shard::open(config(&p)).await.unwrap();
        let violations = Rc::new(RefCell::new(Vec::new()));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let shard = shard.clone();
            let violations = violations.clone();
            tasks.push(glommio::spawn_local(async move {
                let mut bodies = Vec::new();
                for i in 0..APPENDS {
                    let b = body(t * 1000 + i, 200 + (i * 97) % 900);
                    let rec = record(TOPIC, &b, None, None);
                    let r = shard.append(TOPIC, t as u32 % 4, &rec).await.unwrap();
                    let end = r.first_commit_log_offset + rec.len() as u64;
                    let durable = shard.stats().durable_offset;
                    if durable < end {
                        violations.borrow_mut().push((end, durable));
                    }
                    bodies.push(b);
                }
                bodies
            }));
        }
        let mut expected: Vec<Vec<u8>> = Vec::new();
        for t in tasks {
            expected.extend(t.await);
        }
        assert!(
            violations.borrow().is_empty(),
            "appends acknowledged before they were durable: {:?}",
            &violations.borrow()[..violations.borrow().len().min(5)]
        );
        let stats = shard.stats();
        assert!(stats.write_offset > 4 * (64 << 10), "{stats:?}");
        shard.close().await.unwrap();

        let shard = Shard::open(config(&p)).await.unwrap();
        let got = all_bodies_sorted(&shard, TOPIC, 4).await;
        expected.sort();
        assert_eq!(got, expected);
        shard.close().await.unwrap();
    });
}
