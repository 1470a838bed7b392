//! A small blocking client of RocketMQ's remoting protocol, for the admin requests the broker
//! and the NameServer answer there (the same handlers serve RocketMQ's own mqadmin).
//!
//! One connection per call: admin commands send a handful of requests, so there is nothing
//! to gain from pooling, and a fresh connection cannot carry a stale answer.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::BytesMut;
use remoting::codes::response;
use remoting::{Decoded, Frame, RemotingCommand, RemotingDecoder};
use serde::Serialize;

/// How long one request may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads larger than a frame's worth are never needed: the decoder bounds frames (16 MiB).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A request: its code and header fields.
pub struct Request {
    code: i32,
    fields: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Request {
    pub fn new(code: i32) -> Self {
        Self {
            code,
            fields: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn field(mut self, key: &'static str, value: impl ToString) -> Self {
        self.fields.push((key, value.to_string()));
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// Serializes `value` as the JSON body.
    pub fn json_body<T: Serialize>(self, value: &T) -> anyhow::Result<Self> {
        Ok(self.body(serde_json::to_vec(value)?))
    }
}

/// An answer: the response code, its remark and its body.
#[derive(Debug)]
pub struct Answer {
    pub code: i32,
    pub remark: Option<String>,
    pub body: bytes::Bytes,
}

impl Answer {
    /// The body when the code is SUCCESS; an error naming the code and remark otherwise.
    pub fn ok(self, addr: &str) -> anyhow::Result<bytes::Bytes> {
        if self.code == response::SUCCESS {
            Ok(self.body)
        } else {
            bail!("{addr} answered {}", self.describe())
        }
    }

    /// `code N (NAME): remark`.
    pub fn describe(&self) -> String {
        let name = response_name(self.code);
        match &self.remark {
            Some(r) if !r.is_empty() => format!("code {} ({name}): {r}", self.code),
            _ => format!("code {} ({name})", self.code),
        }
    }
}

fn response_name(code: i32) -> &'static str {
    match code {
        response::SUCCESS => "SUCCESS",
        response::SYSTEM_ERROR => "SYSTEM_ERROR",
        response::SYSTEM_BUSY => "SYSTEM_BUSY",
        response::REQUEST_CODE_NOT_SUPPORTED => "REQUEST_CODE_NOT_SUPPORTED",
        response::NO_PERMISSION => "NO_PERMISSION",
        response::TOPIC_NOT_EXIST => "TOPIC_NOT_EXIST",
        response::QUERY_NOT_FOUND => "QUERY_NOT_FOUND",
        response::SUBSCRIPTION_GROUP_NOT_EXIST => "SUBSCRIPTION_GROUP_NOT_EXIST",
        response::INVALID_PARAMETER => "INVALID_PARAMETER",
        response::CONSUMER_NOT_ONLINE => "CONSUMER_NOT_ONLINE",
        _ => "other",
    }
}

/// Sends `req` to `addr` and reads its answer (matched by opaque), within [`CALL_TIMEOUT`].
pub fn call(addr: &str, req: Request) -> anyhow::Result<Answer> {
    let deadline = Instant::now() + CALL_TIMEOUT;
    let sock = addr
        .to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))?;
    let mut conn = TcpStream::connect_timeout(&sock, CALL_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_nodelay(true)?;
    let opaque = 1;
    let mut cmd = RemotingCommand::request(req.code, opaque);
    cmd.language = remoting::LanguageCode::Rust;
    // V4_9_4: the broker and NameServer answer standard JSON to it.
    cmd.version = 401;
    for (k, v) in req.fields {
        cmd.ext_fields.insert(k.to_owned(), v);
    }
    // Signed as RocketMQ's AclClientRPCHook signs, for a broker or NameServer with its ACL on,
    // with the time and a nonce among the signed fields: a server takes it only near its
    // clock and only once (`acl::fresh`), and one that does not know the fields signs over
    // them all the same.
    if let Some(c) = client::default_credentials() {
        cmd.ext_fields
            .insert(acl::sign::ACCESS_KEY.to_owned(), c.access_key.clone());
        for (k, v) in acl::fresh::stamp() {
            cmd.ext_fields.insert(k.to_owned(), v);
        }
        let fields = cmd.ext_fields.iter();
        let signature = acl::sign::sign_remoting(fields, &req.body, &c.secret_key);
        cmd.ext_fields
            .insert(acl::sign::SIGNATURE.to_owned(), signature);
    }
    let frame = remoting::encode(&cmd, &req.body)?;
    conn.set_write_timeout(Some(CALL_TIMEOUT))?;
    conn.write_all(&frame)
        .with_context(|| format!("sending to {addr}"))?;
    let answer = read_answer(&mut conn, opaque, deadline)
        .with_context(|| format!("waiting for {addr}'s answer to request code {}", cmd.code))?;
    Ok(Answer {
        code: answer.command.code,
        remark: answer.command.remark,
        body: answer.body,
    })
}

fn read_answer(conn: &mut TcpStream, opaque: i32, deadline: Instant) -> anyhow::Result<Frame> {
    let mut decoder = RemotingDecoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        while let Some(decoded) = decoder.decode(&mut buf)? {
            match decoded {
                Decoded::Frame(f) if f.command.is_response() && f.command.opaque == opaque => {
                    return Ok(f);
                }
                // A request from the server (none is expected of an admin connection), or
                // an answer to someone else: not ours.
                Decoded::Frame(_) => {}
                Decoded::Oversized { .. } => bail!("the answer is larger than a frame may be"),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("timed out after {CALL_TIMEOUT:?}");
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut chunk) {
            Ok(0) => bail!("the connection closed before the answer came"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                bail!("timed out after {CALL_TIMEOUT:?}")
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A table keyed by message queue, as RocketMQ (fastjson) writes one:
/// `{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{…},…},"other":…}`. Object
/// keys are not JSON, so the table is read key by key. Returns the entries and the other
/// fields.
pub fn parse_mq_table(
    body: &[u8],
    table: &str,
) -> anyhow::Result<(
    Vec<(remoting::body::MessageQueue, serde_json::Value)>,
    serde_json::Value,
)> {
    let text = std::str::from_utf8(body).context("the body is not UTF-8")?;
    let marker = format!("\"{table}\"");
    let start = text
        .find(&marker)
        .with_context(|| format!("the body has no {table}"))?;
    let mut p = Parser {
        s: text.as_bytes(),
        i: start + marker.len(),
    };
    p.expect(b':')?;
    p.expect(b'{')?;
    let mut entries = Vec::new();
    // Bounded: each round consumes at least one byte of the body.
    loop {
        p.ws();
        if p.peek() == Some(b'}') {
            p.i += 1;
            break;
        }
        let key: serde_json::Value = p.value()?;
        // Standard JSON writers (and a map whose keys were quoted) give the key as a string.
        let key = match key {
            serde_json::Value::String(s) => serde_json::from_str(&s)?,
            other => other,
        };
        let mq: remoting::body::MessageQueue = serde_json::from_value(key)?;
        p.expect(b':')?;
        let v: serde_json::Value = p.value()?;
        entries.push((mq, v));
        p.ws();
        match p.peek() {
            Some(b',') => p.i += 1,
            Some(b'}') => {}
            _ => bail!("malformed {table} at byte {}", p.i),
        }
    }
    // The rest: the fields before the table and after it, as one object.
    let before = text[..start].trim_end().trim_end_matches(',');
    let after = text[p.i..].trim_start().trim_start_matches(',');
    let rest_text = if before.trim() == "{" {
        format!("{{{after}")
    } else {
        format!("{before},{after}")
    };
    let rest = serde_json::from_str(&rest_text).unwrap_or(serde_json::Value::Null);
    Ok((entries, rest))
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, b: u8) -> anyhow::Result<()> {
        self.ws();
        if self.peek() != Some(b) {
            bail!("expected '{}' at byte {}", b as char, self.i);
        }
        self.i += 1;
        Ok(())
    }

    fn value(&mut self) -> anyhow::Result<serde_json::Value> {
        self.ws();
        let rest = self.s.get(self.i..).unwrap_or_default();
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter();
        let v = stream
            .next()
            .with_context(|| format!("expected a value at byte {}", self.i))??;
        self.i += stream.byte_offset();
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_keyed_table_is_read_with_the_fields_around_it() {
        let body = br#"{"offsetTable":{{"brokerName":"b-c1","queueId":0,"topic":"T"}:{"maxOffset":5},{"brokerName":"b-c1","queueId":1,"topic":"T"}:{"maxOffset":7}},"consumeTps":1.5}"#;
        let (entries, rest) = parse_mq_table(body, "offsetTable").unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].0.broker_name, "b-c1");
        assert_eq!(entries[1].0.queue_id, 1);
        assert_eq!(entries[1].1["maxOffset"], 7);
        assert_eq!(rest["consumeTps"], 1.5);
        let (entries, _) = parse_mq_table(br#"{"offsetTable":{}}"#, "offsetTable").unwrap();
        assert!(entries.is_empty());
        assert!(parse_mq_table(br#"{"offsetTable":{{"brokerName""#, "offsetTable").is_err());
        assert!(parse_mq_table(b"{}", "offsetTable").is_err());
    }
}
