//! The records of a fault run, one JSON object a line: what each send saw ([`Op`]), what
//! the final log holds ([`Stored`]) and what a consumer was given ([`Delivery`]). Times are
//! milliseconds since the Unix epoch, so histories of several processes and the fault
//! schedule line up.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use client::ClientError;
use protocol::ResponseCode;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// What a send's answer says about whether it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: it must be in the final log.
    Ok,
    /// Definitely not written (refused before the write, or never sent).
    Fail,
    /// May or may not be written: a timeout, a connection lost after the send, or an answer
    /// meaning "written but not made durable or replicated".
    Unknown,
}

/// One send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// `<producer>-<seq>`, unique in a run.
    pub id: String,
    /// `<broker>#<queue id>`.
    pub queue: String,
    pub t_start_ms: u64,
    pub t_end_ms: u64,
    pub outcome: Outcome,
    /// The queue offset an acknowledgement gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One message of the final log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub queue: String,
    pub offset: u64,
    pub id: String,
}

/// One message a consumer was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub queue: String,
    pub offset: u64,
    pub id: String,
    pub t_ms: u64,
}

/// The name of a queue in histories.
pub fn queue_name(broker: &str, queue_id: u32) -> String {
    format!("{broker}#{queue_id}")
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The outcome of a send that failed with `e`.
///
/// A refusal the broker answers before it writes is `Fail`; anything after which the bytes
/// may be in the log is `Unknown`. The match on response codes lists every code, so a new
/// one (such as a "flushed to the slave timed out" answer) must be placed here by whoever
/// adds it; a number this build does not know arrives as `SystemError`, which is `Unknown`.
pub fn classify(e: &ClientError) -> Outcome {
    match e {
        ClientError::Broker { code, .. } => match code {
            // Stored on the master, not known to be on its slaves (RocketMQ 4's
            // SLAVE_NOT_AVAILABLE, which corvus never sends, is the same after its write).
            ResponseCode::FlushSlaveTimeout | ResponseCode::SlaveNotAvailable => Outcome::Unknown,
            ResponseCode::FlushDiskTimeout
            | ResponseCode::Timeout
            | ResponseCode::SystemError
            | ResponseCode::StoragePoisoned
            | ResponseCode::Success => Outcome::Unknown,
            ResponseCode::SystemBusy
            | ResponseCode::RequestCodeNotSupported
            | ResponseCode::MessageIllegal
            | ResponseCode::ServiceNotAvailable
            | ResponseCode::TopicNotExist
            | ResponseCode::PullNotFound
            | ResponseCode::PullRetryImmediately
            | ResponseCode::PullOffsetMoved
            | ResponseCode::QueryNotFound
            | ResponseCode::MessageTooLarge
            | ResponseCode::DiskFull
            | ResponseCode::NotLeader
            | ResponseCode::BadFrame
            | ResponseCode::BadRequest
            | ResponseCode::QueueLocked
            | ResponseCode::BrokerNotRegistered
            | ResponseCode::InSyncReplicasNotEnough
            | ResponseCode::SubscriptionParseFailed
            | ResponseCode::SubscriptionNotExist
            | ResponseCode::FlowControl
            | ResponseCode::NoPermission => Outcome::Fail,
        },
        // Never reached the broker.
        ClientError::NoRoute { .. }
        | ClientError::NoNameServer { .. }
        | ClientError::TooLarge { .. }
        | ClientError::InvalidMessage(_)
        | ClientError::Config(_)
        | ClientError::Shutdown => Outcome::Fail,
        ClientError::Io { kind, .. } if *kind == std::io::ErrorKind::ConnectionRefused => {
            Outcome::Fail
        }
        // A request of request-reply that got no reply was stored.
        ClientError::Io { .. }
        | ClientError::Timeout { .. }
        | ClientError::RequestTimeout { .. }
        | ClientError::ConnectionClosed { .. }
        | ClientError::Protocol { .. } => Outcome::Unknown,
    }
}

/// Writes records as JSON lines. Each record reaches the file (the page cache) when
/// `write` returns, so a writer killed mid-run leaves every record it wrote and a torn
/// last line at most. (A send in flight at such a kill has no record, and would show as a
/// phantom if stored: the workload is not a thing to kill.)
pub struct JsonlWriter {
    out: std::io::BufWriter<std::fs::File>,
}

impl JsonlWriter {
    pub fn create(path: &Path) -> std::io::Result<JsonlWriter> {
        Ok(JsonlWriter {
            out: std::io::BufWriter::new(std::fs::File::create(path)?),
        })
    }

    pub fn write<T: Serialize>(&mut self, record: &T) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// Reads a JSON-lines file; a torn last line (a writer killed mid-line) is skipped, any
/// other bad line is an error naming it.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => out.push(r),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => return Err(format!("{} line {}: {e}", path.display(), i + 1)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_through_jsonl_and_a_torn_tail_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let ops = vec![
            Op {
                id: "p0-0".into(),
                queue: queue_name("broker-a", 1),
                t_start_ms: 5,
                t_end_ms: 7,
                outcome: Outcome::Ok,
                offset: Some(0),
                error: None,
            },
            Op {
                id: "p0-1".into(),
                queue: queue_name("broker-a", 2),
                t_start_ms: 8,
                t_end_ms: 9,
                outcome: Outcome::Unknown,
                offset: None,
                error: Some("timeout".into()),
            },
        ];
        let mut w = JsonlWriter::create(&path).unwrap();
        for op in &ops {
            w.write(op).unwrap();
        }
        w.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"outcome\":\"unknown\""), "{text}");
        std::fs::write(&path, format!("{text}{{\"id\":\"p0-2\",\"que")).unwrap();
        let back: Vec<Op> = read_jsonl(&path).unwrap();
        assert_eq!(back, ops);
        std::fs::write(&path, format!("garbage\n{text}")).unwrap();
        assert!(read_jsonl::<Op>(&path).is_err());
    }

    #[test]
    fn refusals_fail_and_lost_answers_are_unknown() {
        let broker = |code| ClientError::Broker {
            addr: "a".into(),
            code,
            remark: String::new(),
            retry_after_ms: None,
        };
        assert_eq!(
            classify(&broker(ResponseCode::TopicNotExist)),
            Outcome::Fail
        );
        assert_eq!(classify(&broker(ResponseCode::NotLeader)), Outcome::Fail);
        assert_eq!(classify(&broker(ResponseCode::DiskFull)), Outcome::Fail);
        assert_eq!(
            classify(&broker(ResponseCode::FlushDiskTimeout)),
            Outcome::Unknown
        );
        // A code from a newer broker decodes as SystemError: unknown, not fail.
        assert_eq!(
            classify(&broker(ResponseCode::from_u16(4242))),
            Outcome::Unknown
        );
        let timeout = ClientError::Timeout {
            addr: "a".into(),
            timeout_ms: 1,
        };
        assert_eq!(classify(&timeout), Outcome::Unknown);
        let closed = ClientError::ConnectionClosed {
            addr: "a".into(),
            reason: "eof".into(),
        };
        assert_eq!(classify(&closed), Outcome::Unknown);
        let refused = ClientError::Io {
            addr: "a".into(),
            kind: std::io::ErrorKind::ConnectionRefused,
            detail: String::new(),
        };
        assert_eq!(classify(&refused), Outcome::Fail);
    }
}
