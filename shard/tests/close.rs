#![allow(clippy::unwrap_used)]
//! `Shard::close` while appends keep coming: it refuses appends from its first step, and
//! when it returns every append it accepted is written and synced, so a reopened shard
//! holds exactly the accepted appends. (It used to flush first and refuse after, and the
//! async appends accepted during its flush were acknowledged and never written.)

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::*;
use shard::{FlushPolicy, Shard, ShardError};

#[test]
fn close_refuses_appends_first_and_syncs_every_accepted_one() {
    in_temp_dir(move |p| async move {
        let config = || {
            let mut c = small_config(&p);
            c.segment_bytes = 4 << 20;
            c.consume_queue_file_entries = 4096;
            // Only close syncs: the background sync never comes due during the test.
            c.flush = FlushPolicy::Async {
                interval_ms: 3_600_000,
                dirty_bytes_max: 1 << 40,
            };
            c
        };
        let shard = Shard::open(config()).await.unwrap();
        let accepted: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let appender = {
            let (shard, accepted) = (shard.clone(), accepted.clone());
            glommio::spawn_local(async move {
                let mut refused = 0;
                for i in 0..50_000 {
                    let b = body(i, 900 + (i * 37) % 200);
                    match append_one(&shard, (i % 3) as u32, &b).await {
                        Ok(_) => accepted.borrow_mut().push(b),
                        Err(ShardError::Closed) => {
                            refused += 1;
                            if refused == 100 {
                                return refused;
                            }
                        }
                        Err(e) => panic!("append {i}: {e}"),
                    }
                    // Give close its turns between appends, as requests on a core do.
                    futures_lite::future::yield_now().await;
                }
                refused
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while accepted.borrow().len() < 500 && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let before = accepted.borrow().len();
        assert!(before >= 500, "only {before} appends before close");
        shard.close().await.unwrap();
        let s = shard.stats();
        assert_eq!(
            s.durable_offset, s.write_offset,
            "close returned with appended bytes not synced: {s:?}"
        );
        let refused = appender.await;
        assert_eq!(refused, 100, "appends after close were not refused");
        let mut want = accepted.borrow().clone();
        want.sort();
        drop(shard);
        let shard = Shard::open(config()).await.unwrap();
        let got = all_bodies_sorted(&shard, TOPIC, 3).await;
        assert_eq!(
            got.len(),
            want.len(),
            "{} appended before close began",
            before
        );
        assert!(got == want, "the reopened shard holds other records");
        shard.close().await.unwrap();
    });
}
