//! `consumer-progress`: per queue the broker offset, the group's offset, the exact backlog,
//! the records stepped over (damaged on the broker's disk) and the last consume time;
//! totals and the group's consume TPS.

use client::Admin;
use serde_json::json;

/// A queue whose offset has not moved for this long no longer counts toward the group's
/// current consume TPS.
const TPS_FRESH_MS: i64 = 10_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn time_text(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    let ago = (now_ms() - ms).max(0);
    format!("{ms} ({:.1}s ago)", ago as f64 / 1000.0)
}

pub fn print(ns: &str, json: bool, group: &str, topic: &str) -> anyhow::Result<()> {
    let rows = Admin::new(ns)?.consumer_progress(group, topic)?;
    let now = now_ms();
    let mut total_backlog = 0u64;
    let mut total_broker = 0u64;
    let mut total_consumer = 0u64;
    let mut tps = 0.0f64;
    let mut last_ms = 0i64;
    let mut total_skipped = 0u64;
    if !json {
        println!(
            "{:<24} {:>6} {:>14} {:>14} {:>10} {:>8}  LAST CONSUME TIME",
            "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFF", "BACKLOG", "SKIPPED"
        );
    }
    for r in &rows {
        total_backlog += r.backlog;
        total_skipped += r.skipped_records;
        total_broker += r.max_offset.0;
        total_consumer += r.committed.map_or(0, |c| c.0);
        if r.last_commit_ms > 0 && now - r.last_commit_ms <= TPS_FRESH_MS {
            tps += r.consume_tps;
        }
        last_ms = last_ms.max(r.last_commit_ms);
        if json {
            println!(
                "{}",
                json!({
                    "broker": r.queue.broker_name,
                    "queue_id": r.queue.queue_id,
                    "broker_offset": r.max_offset.0,
                    "min_offset": r.min_offset.0,
                    "consumer_offset": r.committed.map(|c| c.0),
                    "backlog": r.backlog,
                    "skipped_records": r.skipped_records,
                    "last_consume_time_ms": (r.last_commit_ms > 0).then_some(r.last_commit_ms),
                    "consume_tps": r.consume_tps,
                })
            );
        } else {
            let c = r.committed.map_or("-".to_owned(), |c| c.0.to_string());
            println!(
                "{:<24} {:>6} {:>14} {:>14} {:>10} {:>8}  {}",
                r.queue.broker_name,
                r.queue.queue_id,
                r.max_offset.0,
                c,
                r.backlog,
                r.skipped_records,
                time_text(r.last_commit_ms)
            );
        }
    }
    if json {
        println!(
            "{}",
            json!({
                "group": group,
                "topic": topic,
                "total_backlog": total_backlog,
                "total_skipped_records": total_skipped,
                "total_broker_offset": total_broker,
                "total_consumer_offset": total_consumer,
                "consume_tps": tps,
                "last_consume_time_ms": (last_ms > 0).then_some(last_ms),
            })
        );
    } else {
        println!("total backlog {total_backlog}");
        if total_skipped > 0 {
            // Not consumed and not backlog: say why they will never arrive.
            println!(
                "skipped {total_skipped} record(s) damaged on the broker's disk (quarantined, never delivered; see the broker's ERROR log)"
            );
        }
        println!("consume tps {tps:.1}");
        println!("last consume time {}", time_text(last_ms));
    }
    Ok(())
}
