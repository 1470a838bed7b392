//! Message trace, as RocketMQ's clients write it: with tracing on (`enable_trace` on the
//! producer or push consumer builder), each send leaves a `Pub` record and each consumed
//! message a `SubBefore` and a `SubAfter` record, written in batches to the trace topic
//! `RMQ_SYS_TRACE_TOPIC` in RocketMQ's text format (TraceDataEncoder: fields separated by
//! char 1, records ended by char 2), keyed by the message id and the message's keys, so
//! `mqadmin queryMsgTraceById` (corvus's and RocketMQ's) finds them through the IndexFile.
//!
//! Recording never blocks a send or a consume: records go into a bounded queue
//! ([`TRACE_QUEUE_MAX`]) that one background thread drains, sending a batch when it holds
//! [`TRACE_BATCH_MAX`] records or [`TRACE_FLUSH_INTERVAL`] after its first record; when the
//! queue is full a record is dropped (counted, and logged at most once a minute).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{ClientError, Result};
use crate::model::Message;

pub use message::TRACE_TOPIC;
/// Between the fields of a record (RocketMQ's `TraceConstants.CONTENT_SPLITOR`).
pub const CONTENT_SPLITOR: char = '\u{1}';
/// After each record (RocketMQ's `TraceConstants.FIELD_SPLITOR`).
pub const FIELD_SPLITOR: char = '\u{2}';
/// RocketMQ's default region id.
const REGION_ID: &str = "DefaultRegion";
/// Records waiting to be written, at most; past it new ones are dropped.
pub const TRACE_QUEUE_MAX: usize = 2048;
/// Records in one trace message, at most.
pub const TRACE_BATCH_MAX: usize = 100;
/// A batch is written this long after its first record at the latest.
pub const TRACE_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// Body of one trace message, at most (RocketMQ's trace `maxMsgSize`, 128 KiB).
const TRACE_BODY_BYTES_MAX: usize = 128 * 1024;

/// One trace record (RocketMQ's TraceContext with its one TraceBean).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceRecord {
    /// A message was sent.
    Pub {
        timestamp_ms: i64,
        group: String,
        topic: String,
        msg_id: String,
        tags: String,
        keys: String,
        store_host: String,
        body_len: usize,
        cost_ms: u64,
        offset_msg_id: String,
        success: bool,
    },
    /// A consumer is about to hand the message to its listener.
    SubBefore {
        timestamp_ms: i64,
        group: String,
        request_id: String,
        msg_id: String,
        retry_times: i32,
        keys: String,
    },
    /// The listener returned.
    SubAfter {
        request_id: String,
        msg_id: String,
        cost_ms: u64,
        success: bool,
        keys: String,
        /// RocketMQ's ConsumeReturnType ordinal: 0 success, 3 failed.
        context_code: i32,
        timestamp_ms: i64,
        group: String,
    },
}

impl TraceRecord {
    pub fn msg_id(&self) -> &str {
        match self {
            TraceRecord::Pub { msg_id, .. }
            | TraceRecord::SubBefore { msg_id, .. }
            | TraceRecord::SubAfter { msg_id, .. } => msg_id,
        }
    }

    fn keys(&self) -> &str {
        match self {
            TraceRecord::Pub { keys, .. }
            | TraceRecord::SubBefore { keys, .. }
            | TraceRecord::SubAfter { keys, .. } => keys,
        }
    }

    /// Appends the record in RocketMQ's format (TraceDataEncoder.encoderFromContextBean).
    pub fn encode_into(&self, out: &mut String) {
        use std::fmt::Write;
        let c = CONTENT_SPLITOR;
        // Writing into a String cannot fail.
        let _ = match self {
            TraceRecord::Pub {
                timestamp_ms,
                group,
                topic,
                msg_id,
                tags,
                keys,
                store_host,
                body_len,
                cost_ms,
                offset_msg_id,
                success,
            } => write!(
                out,
                "Pub{c}{timestamp_ms}{c}{REGION_ID}{c}{group}{c}{topic}{c}{msg_id}{c}{tags}{c}{keys}{c}{store_host}{c}{body_len}{c}{cost_ms}{c}0{c}{offset_msg_id}{c}{success}"
            ),
            TraceRecord::SubBefore {
                timestamp_ms,
                group,
                request_id,
                msg_id,
                retry_times,
                keys,
            } => write!(
                out,
                "SubBefore{c}{timestamp_ms}{c}{REGION_ID}{c}{group}{c}{request_id}{c}{msg_id}{c}{retry_times}{c}{keys}"
            ),
            TraceRecord::SubAfter {
                request_id,
                msg_id,
                cost_ms,
                success,
                keys,
                context_code,
                timestamp_ms,
                group,
            } => write!(
                out,
                "SubAfter{c}{request_id}{c}{msg_id}{c}{cost_ms}{c}{success}{c}{keys}{c}{context_code}{c}{timestamp_ms}{c}{group}"
            ),
        };
        out.push(FIELD_SPLITOR);
    }

    /// The records of a trace message's body (TraceDataEncoder.decoderFromTraceDataString);
    /// records of unknown types or too few fields are skipped.
    pub fn decode_all(body: &str) -> Vec<TraceRecord> {
        body.split(FIELD_SPLITOR)
            .filter(|r| !r.is_empty())
            .filter_map(|r| TraceRecord::decode(r.trim_start_matches(['\n', '\r'])))
            .collect()
    }

    fn decode(record: &str) -> Option<TraceRecord> {
        let f: Vec<&str> = record.split(CONTENT_SPLITOR).collect();
        let s = |i: usize| f.get(i).map(|v| (*v).to_owned()).unwrap_or_default();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let b = |i: usize| f.get(i).is_some_and(|v| *v == "true");
        match *f.first()? {
            "Pub" if f.len() >= 13 => Some(TraceRecord::Pub {
                timestamp_ms: n(1),
                group: s(3),
                topic: s(4),
                msg_id: s(5),
                tags: s(6),
                keys: s(7),
                store_host: s(8),
                body_len: n(9).max(0) as usize,
                cost_ms: n(10).max(0) as u64,
                offset_msg_id: s(12),
                // Before RocketMQ 4.4 a Pub record had no success field: it succeeded.
                success: f.len() < 14 || b(13),
            }),
            "SubBefore" if f.len() >= 8 => Some(TraceRecord::SubBefore {
                timestamp_ms: n(1),
                group: s(3),
                request_id: s(4),
                msg_id: s(5),
                retry_times: n(6) as i32,
                keys: s(7),
            }),
            "SubAfter" if f.len() >= 6 => Some(TraceRecord::SubAfter {
                request_id: s(1),
                msg_id: s(2),
                cost_ms: n(3).max(0) as u64,
                success: b(4),
                keys: s(5),
                context_code: n(6) as i32,
                timestamp_ms: n(7),
                group: s(8),
            }),
            _ => None,
        }
    }
}

/// The keys of a trace message: each record's msgId and keys, once each (RocketMQ's
/// TraceTransferBean transKey).
fn trace_keys(records: &[TraceRecord]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for r in records {
        for k in std::iter::once(r.msg_id()).chain(r.keys().split(' ')) {
            if !k.is_empty() && !keys.iter().any(|have| have == k) {
                keys.push(k.to_owned());
            }
        }
    }
    keys
}

/// Where the trace records of one producer or consumer go: a bounded queue and the thread
/// that writes them.
pub(crate) struct TraceDispatcher {
    tx: Mutex<Option<SyncSender<TraceRecord>>>,
    dropped: AtomicU64,
    last_drop_log: Mutex<Option<Instant>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl TraceDispatcher {
    /// The dispatcher of a producer or consumer built with `enable_trace(on)`: started when
    /// `on`, none otherwise.
    pub(crate) fn start_if(
        on: bool,
        namesrv: &str,
        group: &str,
    ) -> Result<Option<Arc<TraceDispatcher>>> {
        on.then(|| TraceDispatcher::start(namesrv, group))
            .transpose()
    }

    /// Starts the writer thread; its own producer (group `_INNER_TRACE_PRODUCER-<group>`,
    /// no tracing of its own) is made on that thread, so a NameServer that is down delays
    /// nothing but the trace.
    pub(crate) fn start(namesrv: &str, group: &str) -> Result<Arc<TraceDispatcher>> {
        let (tx, rx) = mpsc::sync_channel(TRACE_QUEUE_MAX);
        let namesrv = namesrv.to_owned();
        let producer_group = format!("_INNER_TRACE_PRODUCER-{group}");
        let thread = std::thread::Builder::new()
            .name("corvus-trace".into())
            .spawn(move || write_loop(&namesrv, &producer_group, &rx))
            .map_err(|e| ClientError::Config(format!("cannot start the trace thread: {e}")))?;
        Ok(Arc::new(TraceDispatcher {
            tx: Mutex::new(Some(tx)),
            dropped: AtomicU64::new(0),
            last_drop_log: Mutex::new(None),
            thread: Mutex::new(Some(thread)),
            stopped: AtomicBool::new(false),
        }))
    }

    /// Queues a record without waiting; dropped (counted) when the queue is full.
    pub(crate) fn record(&self, r: TraceRecord) {
        let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = tx.as_ref() else {
            return;
        };
        match tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let mut last = self
                    .last_drop_log
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    *last = Some(Instant::now());
                    tracing::warn!(
                        dropped = n,
                        "trace records are dropped: {TRACE_QUEUE_MAX} wait to be written"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Writes what is queued and stops the thread.
    pub(crate) fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for TraceDispatcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn write_loop(namesrv: &str, group: &str, rx: &Receiver<TraceRecord>) {
    let mut producer: Option<crate::Producer> = None;
    let mut batch: Vec<TraceRecord> = Vec::with_capacity(TRACE_BATCH_MAX);
    let mut first_at = Instant::now();
    loop {
        let wait = if batch.is_empty() {
            Duration::from_secs(3600)
        } else {
            TRACE_FLUSH_INTERVAL.saturating_sub(first_at.elapsed())
        };
        let closed = match rx.recv_timeout(wait) {
            Ok(r) => {
                if batch.is_empty() {
                    first_at = Instant::now();
                }
                batch.push(r);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let due = !batch.is_empty()
            && (closed
                || batch.len() >= TRACE_BATCH_MAX
                || first_at.elapsed() >= TRACE_FLUSH_INTERVAL);
        if due {
            write_batch(namesrv, group, &mut producer, &batch);
            batch.clear();
        }
        if closed {
            if let Some(p) = producer {
                p.shutdown();
            }
            return;
        }
    }
}

/// Sends `records` as trace messages of at most [`TRACE_BODY_BYTES_MAX`] each.
fn write_batch(
    namesrv: &str,
    group: &str,
    producer: &mut Option<crate::Producer>,
    records: &[TraceRecord],
) {
    if producer.is_none() {
        match crate::Producer::builder()
            .namesrv(namesrv)
            .group(group)
            .build()
        {
            Ok(p) => *producer = Some(p),
            Err(e) => {
                tracing::warn!("trace records are dropped: no trace producer: {e}");
                return;
            }
        }
    }
    let Some(p) = producer.as_ref() else {
        return;
    };
    let mut start = 0;
    while start < records.len() {
        let mut body = String::new();
        let mut end = start;
        while end < records.len() && (end == start || body.len() < TRACE_BODY_BYTES_MAX) {
            records[end].encode_into(&mut body);
            end += 1;
        }
        let part = &records[start..end];
        let msg = Message::new(TRACE_TOPIC, body.into_bytes()).with_keys(trace_keys(part));
        if let Err(e) = p.send(msg) {
            tracing::warn!(records = part.len(), "trace records are dropped: {e}");
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_in_rocketmq_format() {
        let pubr = TraceRecord::Pub {
            timestamp_ms: 1_700_000_000_000,
            group: "pg".into(),
            topic: "T".into(),
            msg_id: "AC11000100002A9F0000000000000001".into(),
            tags: "TagA".into(),
            keys: "k1 k2".into(),
            store_host: "127.0.0.1:10911".into(),
            body_len: 5,
            cost_ms: 3,
            offset_msg_id: "7F00000100002A9F0000000000000000".into(),
            success: true,
        };
        let mut s = String::new();
        pubr.encode_into(&mut s);
        assert_eq!(
            s,
            "Pub\u{1}1700000000000\u{1}DefaultRegion\u{1}pg\u{1}T\u{1}AC11000100002A9F0000000000000001\u{1}TagA\u{1}k1 k2\u{1}127.0.0.1:10911\u{1}5\u{1}3\u{1}0\u{1}7F00000100002A9F0000000000000000\u{1}true\u{2}"
        );
        let after = TraceRecord::SubAfter {
            request_id: "r".into(),
            msg_id: "m".into(),
            cost_ms: 1,
            success: false,
            keys: String::new(),
            context_code: 3,
            timestamp_ms: 9,
            group: "cg".into(),
        };
        after.encode_into(&mut s);
        assert_eq!(TraceRecord::decode_all(&s), vec![pubr.clone(), after]);
        assert_eq!(
            trace_keys(&[pubr]),
            vec!["AC11000100002A9F0000000000000001", "k1", "k2"]
        );
    }

    #[test]
    fn a_java_sub_after_without_timestamp_and_garbage_decode() {
        let java = "SubAfter\u{1}req\u{1}mid\u{1}2\u{1}true\u{1}key\u{1}0\u{2}Nope\u{1}x\u{2}Pub\u{1}1\u{2}";
        let got = TraceRecord::decode_all(java);
        assert_eq!(got.len(), 1);
        assert!(
            matches!(&got[0], TraceRecord::SubAfter { msg_id, success: true, group, .. } if msg_id == "mid" && group.is_empty())
        );
    }
}
