//! `queryMsgTraceById`: the trace records of one message (RocketMQ's
//! QueryMsgTraceByIdSubCommand), read from the trace topic through the IndexFile by the
//! message id, which every trace message carries among its keys.

use std::io::{self, Write};

use anyhow::bail;
use client::trace::TraceRecord;
use client::Admin;
use serde::Serialize;

use crate::output::Render;

/// Trace messages looked at, at most (RocketMQ's tools ask for 64).
const TRACE_MESSAGES_MAX: u32 = 64;

/// One row: a send (`Pub`) or a consume (`Sub`).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TraceView {
    #[serde(rename = "type")]
    kind: &'static str,
    group: String,
    client_host: String,
    time_ms: i64,
    cost_ms: u64,
    status: &'static str,
}

/// Every row for one message id: sends first, then consumes.
#[derive(Debug, Serialize)]
pub struct TraceViews {
    msg_id: String,
    views: Vec<TraceView>,
}

fn status(ok: bool) -> &'static str {
    if ok {
        "success"
    } else {
        "failed"
    }
}

/// The rows of `msg_id` among decoded records, each trace message's born host as the
/// client's: a `Pub` row per send and a `Sub` row per consume (its `SubAfter`, with the
/// group and time of its `SubBefore` when the `SubAfter` lacks them, as older clients
/// write it).
pub fn views_of(msg_id: &str, records: &[(String, TraceRecord)]) -> Vec<TraceView> {
    let mut pubs = Vec::new();
    let mut subs = Vec::new();
    for (host, r) in records.iter().filter(|(_, r)| r.msg_id() == msg_id) {
        match r {
            TraceRecord::Pub {
                timestamp_ms,
                group,
                cost_ms,
                success,
                ..
            } => pubs.push(TraceView {
                kind: "Pub",
                group: group.clone(),
                client_host: host.clone(),
                time_ms: *timestamp_ms,
                cost_ms: *cost_ms,
                status: status(*success),
            }),
            TraceRecord::SubAfter {
                request_id,
                cost_ms,
                success,
                timestamp_ms,
                group,
                ..
            } => {
                let before = records.iter().find_map(|(_, b)| match b {
                    TraceRecord::SubBefore {
                        request_id: id,
                        msg_id: m,
                        timestamp_ms,
                        group,
                        ..
                    } if id == request_id && m == msg_id => Some((*timestamp_ms, group.clone())),
                    _ => None,
                });
                let (time_ms, group) = match (group.is_empty(), before) {
                    (true, Some((t, g))) => (t, g),
                    (_, Some((t, _))) => (t, group.clone()),
                    (_, None) => (*timestamp_ms, group.clone()),
                };
                subs.push(TraceView {
                    kind: "Sub",
                    group,
                    client_host: host.clone(),
                    time_ms,
                    cost_ms: *cost_ms,
                    status: status(*success),
                });
            }
            TraceRecord::SubBefore { .. } => {}
        }
    }
    pubs.sort_by_key(|v| v.time_ms);
    subs.sort_by_key(|v| v.time_ms);
    pubs.extend(subs);
    pubs
}

pub fn query(ns: &str, msg_id: &str, trace_topic: &str) -> anyhow::Result<TraceViews> {
    let msgs =
        Admin::new(ns)?.query_by_key(trace_topic, msg_id, 0, i64::MAX, TRACE_MESSAGES_MAX)?;
    let mut records = Vec::new();
    for m in &msgs {
        let host = m.born_host.ip().to_string();
        let body = String::from_utf8_lossy(&m.body);
        records.extend(
            TraceRecord::decode_all(&body)
                .into_iter()
                .map(|r| (host.clone(), r)),
        );
    }
    let views = views_of(msg_id, &records);
    if views.is_empty() {
        bail!("no trace of message `{msg_id}` in topic `{trace_topic}`");
    }
    Ok(TraceViews {
        msg_id: msg_id.to_owned(),
        views,
    })
}

impl Render for TraceViews {
    /// RocketMQ's layout: a table of sends, then a table of consumes.
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        let row = |w: &mut dyn Write, c: [&str; 6]| {
            writeln!(
                w,
                "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}",
                c[0], c[1], c[2], c[3], c[4], c[5]
            )
        };
        for (kind, group_head, time_head) in [
            ("Pub", "#ProducerGroup", "#SendTime"),
            ("Sub", "#ConsumerGroup", "#ConsumerTime"),
        ] {
            let rows: Vec<&TraceView> = self.views.iter().filter(|v| v.kind == kind).collect();
            if rows.is_empty() {
                continue;
            }
            row(
                w,
                [
                    "#Type",
                    group_head,
                    "#ClientHost",
                    time_head,
                    "#CostTimes",
                    "#Status",
                ],
            )?;
            for v in rows {
                row(
                    w,
                    [
                        v.kind,
                        &v.group,
                        &v.client_host,
                        &crate::output::time_text(v.time_ms),
                        &format!("{}ms", v.cost_ms),
                        v.status,
                    ],
                )?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_and_a_consume_make_two_rows_and_other_ids_none() {
        let recs = vec![
            (
                "10.0.0.1".to_owned(),
                TraceRecord::Pub {
                    timestamp_ms: 1_764_460_800_000,
                    group: "pg".into(),
                    topic: "T".into(),
                    msg_id: "M".into(),
                    tags: String::new(),
                    keys: String::new(),
                    store_host: String::new(),
                    body_len: 1,
                    cost_ms: 4,
                    offset_msg_id: String::new(),
                    success: true,
                },
            ),
            (
                "10.0.0.2".to_owned(),
                TraceRecord::SubBefore {
                    timestamp_ms: 1_764_460_801_000,
                    group: "cg".into(),
                    request_id: "r".into(),
                    msg_id: "M".into(),
                    retry_times: 0,
                    keys: String::new(),
                },
            ),
            (
                "10.0.0.2".to_owned(),
                TraceRecord::SubAfter {
                    request_id: "r".into(),
                    msg_id: "M".into(),
                    cost_ms: 2,
                    success: false,
                    keys: String::new(),
                    context_code: 3,
                    timestamp_ms: 0,
                    group: String::new(),
                },
            ),
        ];
        let views = views_of("M", &recs);
        assert_eq!(views.len(), 2);
        assert_eq!(
            (views[1].kind, views[1].group.as_str(), views[1].status),
            ("Sub", "cg", "failed")
        );
        assert!(views_of("other", &recs).is_empty());
        let mut text = Vec::new();
        TraceViews {
            msg_id: "M".into(),
            views,
        }
        .text(&mut text)
        .unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("2025-11-30 00:00:00"), "{text}");
        assert!(text.contains("#ConsumerGroup"), "{text}");
    }
}
