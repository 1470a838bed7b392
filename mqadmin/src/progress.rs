//! `consumer-progress`: per queue the broker offset, the group's offset, the exact backlog,
//! the records stepped over (damaged on the broker's disk) and the last consume time;
//! totals and the group's consume TPS.

use std::io::{self, Write};

use client::{Admin, QueueProgress};
use serde::Serialize;

use crate::output::{json_line, Render};

/// A queue whose offset has not moved for this long no longer counts toward the group's
/// current consume TPS.
const TPS_FRESH_MS: i64 = 10_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `ms` as a date and how long ago that was, or `-` for never.
fn time_text(ms: Option<i64>, now_ms: i64) -> String {
    match ms {
        None => "-".into(),
        Some(ms) => {
            let ago = (now_ms - ms).max(0);
            format!(
                "{} ({:.1}s ago)",
                crate::output::time_text(ms),
                ago as f64 / 1000.0
            )
        }
    }
}

/// One queue's row.
#[derive(Debug, Serialize)]
pub struct ProgressRow {
    broker: String,
    queue_id: u32,
    broker_offset: u64,
    min_offset: u64,
    /// None: the group has no offset for the queue.
    consumer_offset: Option<u64>,
    backlog: u64,
    skipped_records: u64,
    /// None: the offset has not moved since the broker started.
    last_consume_time_ms: Option<i64>,
    consume_tps: f64,
}

impl From<&QueueProgress> for ProgressRow {
    fn from(r: &QueueProgress) -> Self {
        Self {
            broker: r.queue.broker_name.clone(),
            queue_id: r.queue.queue_id,
            broker_offset: r.max_offset.0,
            min_offset: r.min_offset.0,
            consumer_offset: r.committed.map(|c| c.0),
            backlog: r.backlog,
            skipped_records: r.skipped_records,
            last_consume_time_ms: (r.last_commit_ms > 0).then_some(r.last_commit_ms),
            consume_tps: r.consume_tps,
        }
    }
}

/// The group's totals over the topic's queues.
#[derive(Debug, Serialize)]
pub struct ProgressTotals {
    group: String,
    topic: String,
    total_backlog: u64,
    total_skipped_records: u64,
    total_broker_offset: u64,
    total_consumer_offset: u64,
    /// Summed over the queues whose offset moved in the last `TPS_FRESH_MS`.
    consume_tps: f64,
    last_consume_time_ms: Option<i64>,
}

/// Rows and totals. In JSON, one line per row and the totals on the last line.
#[derive(Debug, Serialize)]
pub struct Progress {
    rows: Vec<ProgressRow>,
    totals: ProgressTotals,
    /// When it was read, for the text's "how long ago".
    #[serde(skip)]
    now_ms: i64,
}

pub fn read(ns: &str, group: &str, topic: &str) -> anyhow::Result<Progress> {
    let queues = Admin::new(ns)?.consumer_progress(group, topic)?;
    Ok(summarize(group, topic, &queues, now_ms()))
}

fn summarize(group: &str, topic: &str, queues: &[QueueProgress], now_ms: i64) -> Progress {
    let mut totals = ProgressTotals {
        group: group.to_owned(),
        topic: topic.to_owned(),
        total_backlog: 0,
        total_skipped_records: 0,
        total_broker_offset: 0,
        total_consumer_offset: 0,
        consume_tps: 0.0,
        last_consume_time_ms: None,
    };
    for r in queues {
        totals.total_backlog += r.backlog;
        totals.total_skipped_records += r.skipped_records;
        totals.total_broker_offset += r.max_offset.0;
        totals.total_consumer_offset += r.committed.map_or(0, |c| c.0);
        if r.last_commit_ms > 0 && now_ms - r.last_commit_ms <= TPS_FRESH_MS {
            totals.consume_tps += r.consume_tps;
        }
        if r.last_commit_ms > 0 {
            totals.last_consume_time_ms = totals.last_consume_time_ms.max(Some(r.last_commit_ms));
        }
    }
    Progress {
        rows: queues.iter().map(ProgressRow::from).collect(),
        totals,
        now_ms,
    }
}

impl Render for Progress {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        writeln!(
            w,
            "{:<24} {:>6} {:>14} {:>14} {:>10} {:>8}  LAST CONSUME TIME",
            "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFF", "BACKLOG", "SKIPPED"
        )?;
        for r in &self.rows {
            let c = r.consumer_offset.map_or("-".to_owned(), |c| c.to_string());
            writeln!(
                w,
                "{:<24} {:>6} {:>14} {:>14} {:>10} {:>8}  {}",
                r.broker,
                r.queue_id,
                r.broker_offset,
                c,
                r.backlog,
                r.skipped_records,
                time_text(r.last_consume_time_ms, self.now_ms)
            )?;
        }
        let t = &self.totals;
        writeln!(w, "total backlog {}", t.total_backlog)?;
        if t.total_skipped_records > 0 {
            // Not consumed and not backlog: say why they will never arrive.
            writeln!(
                w,
                "skipped {} record(s) damaged on the broker's disk (quarantined, never delivered; see the broker's ERROR log)",
                t.total_skipped_records
            )?;
        }
        writeln!(w, "consume tps {:.1}", t.consume_tps)?;
        writeln!(
            w,
            "last consume time {}",
            time_text(t.last_consume_time_ms, self.now_ms)
        )
    }

    fn json(&self, w: &mut dyn Write) -> io::Result<()> {
        for r in &self.rows {
            json_line(w, r)?;
        }
        json_line(w, &self.totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{render, Format};
    use client::{MessageQueue, QueueOffset};
    use serde_json::Value;

    fn queue(id: u32, committed: Option<u64>, last_commit_ms: i64) -> QueueProgress {
        QueueProgress {
            queue: MessageQueue {
                topic: "T".into(),
                broker_name: "b".into(),
                queue_id: id,
            },
            min_offset: QueueOffset(0),
            max_offset: QueueOffset(10),
            committed: committed.map(QueueOffset),
            backlog: 10 - committed.unwrap_or(0),
            last_commit_ms,
            consume_tps: 2.0,
            skipped_records: 0,
        }
    }

    #[test]
    fn rows_then_totals_as_json_lines_and_a_table_as_text() {
        let now = 100_000;
        let p = summarize(
            "g",
            "T",
            &[queue(0, None, 0), queue(1, Some(4), now - 1_000)],
            now,
        );
        let json = String::from_utf8(render(Format::Json, &p).unwrap()).unwrap();
        let lines: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["consumer_offset"], Value::Null);
        assert_eq!(lines[0]["last_consume_time_ms"], Value::Null);
        assert_eq!(lines[1]["consumer_offset"], 4);
        assert_eq!(lines[1]["broker_offset"], 10);
        assert_eq!(lines[2]["total_backlog"], 16);
        assert_eq!(lines[2]["total_consumer_offset"], 4);
        // Only the queue that moved recently counts toward the TPS.
        assert_eq!(lines[2]["consume_tps"], 2.0);
        assert_eq!(lines[2]["last_consume_time_ms"], now - 1_000);
        assert_eq!(lines[2]["group"], "g");

        let text = String::from_utf8(render(Format::Text, &p).unwrap()).unwrap();
        assert!(text.starts_with("BROKER "), "{text}");
        assert!(text.contains("total backlog 16\n"), "{text}");
        assert!(text.contains("(1.0s ago)"), "{text}");
        assert!(!text.contains("skipped "), "{text}");
        assert!(
            text.ends_with("last consume time 1970-01-01 00:01:39.000 (1.0s ago)\n"),
            "{text}"
        );
    }
}
