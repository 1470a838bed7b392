//! What users hand the client and get back: messages, queues, offsets and results, plus the
//! conversion between a [`Message`] and the stored-record layout (with zstd compression).

use std::fmt;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use message::{prop, sys_flag, MessageFields, MsgOffsetId, RecordView};

use crate::error::{ClientError, Result};

pub use message::offsets::{CommitLogOffset, QueueOffset};

/// One queue of a topic on one broker.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: u32,
}

impl fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}#{}", self.topic, self.broker_name, self.queue_id)
    }
}

/// A message to send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub topic: String,
    pub tags: Option<String>,
    /// Business keys; written space-joined as the `KEYS` property, so a key may not contain a
    /// space.
    pub keys: Vec<String>,
    pub body: Bytes,
    /// User properties, written after TAGS, KEYS and UNIQ_KEY.
    pub properties: Vec<(String, String)>,
    /// Messages with the same sharding key go to the same queue (FIFO per key).
    pub sharding_key: Option<String>,
    /// RocketMQ's application-defined FLAG field.
    pub flag: i32,
}

impl Message {
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Message {
        Message {
            topic: topic.into(),
            body: body.into(),
            ..Default::default()
        }
    }

    pub fn with_tags(mut self, tags: impl Into<String>) -> Message {
        self.tags = Some(tags.into());
        self
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Message {
        self.keys.push(key.into());
        self
    }

    pub fn with_keys<I, S>(mut self, keys: I) -> Message
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keys.extend(keys.into_iter().map(Into::into));
        self
    }

    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Message {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Delivered after delay level `level` of the broker's levels (RocketMQ's `DELAY`:
    /// 1 = 1 s, 2 = 5 s, 3 = 10 s, … 18 = 2 h by default).
    pub fn with_delay_level(self, level: u32) -> Message {
        self.with_property(message::timer::DELAY, level.to_string())
    }

    /// Delivered at `at_ms` (ms since the epoch, the broker's clock; RocketMQ 5's
    /// `TIMER_DELIVER_MS`), at most the broker's `timer_max_delay_sec` ahead.
    pub fn with_deliver_time_ms(self, at_ms: i64) -> Message {
        self.with_property(message::timer::TIMER_DELIVER_MS, at_ms.to_string())
    }

    /// Delivered `secs` seconds after the broker stores it (`TIMER_DELAY_SEC`).
    pub fn with_delay_secs(self, secs: u64) -> Message {
        self.with_property(message::timer::TIMER_DELAY_SEC, secs.to_string())
    }

    pub fn with_sharding_key(mut self, key: impl Into<String>) -> Message {
        self.sharding_key = Some(key.into());
        self
    }
}

/// The result of one stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// The producer-made unique key (`UNIQ_KEY`), RocketMQ's client message id.
    pub msg_id: String,
    /// Where the broker stored it ([`MsgOffsetId`] as 32 hex digits).
    pub offset_msg_id: String,
    pub topic: String,
    pub broker_name: String,
    pub queue_id: u32,
    pub queue_offset: QueueOffset,
    pub commit_log_offset: CommitLogOffset,
}

/// A received message.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageExt {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: QueueOffset,
    pub commit_log_offset: CommitLogOffset,
    /// `UNIQ_KEY` when the producer set one, else the offset id.
    pub msg_id: String,
    pub offset_msg_id: String,
    pub tags: Option<String>,
    pub keys: Vec<String>,
    /// Decompressed body.
    pub body: Bytes,
    /// Every property but the CRC trailer, in stored order (TAGS, KEYS, UNIQ_KEY included).
    pub properties: Vec<(String, String)>,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddrV4,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddrV4,
    pub reconsume_times: i32,
    /// Size of the stored record in bytes.
    pub store_size: usize,
}

impl MessageExt {
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    /// Messages were read (the list may still be empty if the tag re-check dropped them all).
    Found,
    /// Nothing new at this offset (after any long-poll wait).
    NoNewMessage,
    /// The requested offset was out of range; continue from `next_offset`.
    OffsetMoved,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PullResult {
    pub status: PullStatus,
    pub next_offset: QueueOffset,
    pub min_offset: QueueOffset,
    pub max_offset: QueueOffset,
    pub messages: Vec<MessageExt>,
}

/// What a push consumer's listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    Success,
    /// Hand the same batch to the listener again after a delay.
    ReconsumeLater,
}

/// Settings that shape how a message becomes a record.
#[derive(Debug, Clone)]
pub(crate) struct EncodeOptions {
    pub compress_threshold_bytes: usize,
    pub compress_level: i32,
    pub message_bytes_max: usize,
    pub born_host: SocketAddrV4,
}

/// Property names the client writes itself; a user property may not reuse them.
const RESERVED_PROPERTIES: [&str; 4] = [prop::TAGS, prop::KEYS, prop::UNIQ_KEY, prop::CRC];

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Checks what can be checked without encoding.
pub(crate) fn validate(msg: &Message, message_bytes_max: usize) -> Result<()> {
    if msg.topic.is_empty() || msg.topic.len() > message::TOPIC_LEN_MAX {
        return Err(ClientError::InvalidMessage(format!(
            "topic name must be 1..={} bytes, got {}",
            message::TOPIC_LEN_MAX,
            msg.topic.len()
        )));
    }
    if msg.body.is_empty() {
        return Err(ClientError::InvalidMessage("body is empty".into()));
    }
    if msg.body.len() > message_bytes_max {
        return Err(ClientError::TooLarge {
            size: msg.body.len(),
            max: message_bytes_max,
        });
    }
    if let Some(key) = msg.keys.iter().find(|k| k.contains(' ')) {
        return Err(ClientError::InvalidMessage(format!(
            "key {key:?} contains a space (KEYS is space separated)"
        )));
    }
    if let Some((k, _)) = msg
        .properties
        .iter()
        .find(|(k, _)| RESERVED_PROPERTIES.contains(&k.as_str()) || k.is_empty())
    {
        return Err(ClientError::InvalidMessage(format!(
            "property name {k:?} is empty or reserved"
        )));
    }
    Ok(())
}

/// Appends `msg` as one record to `out` and returns the record's length. Bodies larger than
/// the threshold are zstd-compressed when that makes them smaller.
#[cfg(test)]
pub(crate) fn encode_message(
    msg: &Message,
    uniq_key: &str,
    opts: &EncodeOptions,
    out: &mut Vec<u8>,
) -> Result<usize> {
    encode_message_with(msg, uniq_key, 0, now_ms(), opts, out)
}

/// [`encode_message`] with a reconsume count (a message sent back to a retry or
/// dead-letter topic keeps its id and carries how often it failed) and the born timestamp.
pub(crate) fn encode_message_with(
    msg: &Message,
    uniq_key: &str,
    reconsume_times: i32,
    born_timestamp_ms: i64,
    opts: &EncodeOptions,
    out: &mut Vec<u8>,
) -> Result<usize> {
    validate(msg, opts.message_bytes_max)?;
    let mut sys = 0;
    let compressed;
    let mut body: &[u8] = &msg.body;
    if msg.body.len() > opts.compress_threshold_bytes {
        compressed = zstd::bulk::compress(&msg.body, opts.compress_level)
            .map_err(|e| ClientError::InvalidMessage(format!("zstd compression failed: {e}")))?;
        if compressed.len() < msg.body.len() {
            body = &compressed;
            sys |= sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZSTD;
        }
    }
    let keys = msg.keys.join(" ");
    // The client's own properties need no allocation; user properties follow them.
    let mut own: [(&str, &str); 4] = [("", ""); 4];
    let mut n = 0;
    let mut add = |k, v| {
        own[n] = (k, v);
        n += 1;
    };
    if let Some(tags) = &msg.tags {
        add(prop::TAGS, tags.as_str());
    }
    if !keys.is_empty() {
        add(prop::KEYS, &keys);
    }
    add(prop::UNIQ_KEY, uniq_key);
    if let Some(sk) = &msg.sharding_key {
        add(prop::SHARDING_KEY, sk.as_str());
    }
    let all: Vec<(&str, &str)>;
    let props: &[(&str, &str)] = if msg.properties.is_empty() {
        &own[..n]
    } else {
        all = own[..n]
            .iter()
            .copied()
            .chain(msg.properties.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect();
        &all
    };
    let fields = MessageFields {
        topic: &msg.topic,
        body,
        flag: msg.flag,
        sys_flag: sys,
        born_timestamp_ms,
        born_host: Some(opts.born_host),
        reconsume_times,
        properties: props,
    };
    let start = out.len();
    message::encode_record(&fields, out).map_err(|e| ClientError::InvalidMessage(e.to_string()))?;
    Ok(out.len() - start)
}

/// The unique keys and record sizes of a prepared batch, shared by every attempt to send it
/// and by its result.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchLayout {
    /// The keys back to back.
    keys: String,
    /// Per message: where its key ends in `keys`, and its record's length.
    entries: Vec<(u32, u32)>,
}

impl BatchLayout {
    pub(crate) fn with_capacity(n: usize) -> BatchLayout {
        BatchLayout {
            keys: String::with_capacity(32 * n),
            entries: Vec::with_capacity(n),
        }
    }

    /// Adds a message with key `key` whose record is `record_len` bytes.
    pub(crate) fn push(&mut self, key: &str, record_len: usize) {
        self.keys.push_str(key);
        self.entries
            .push((self.keys.len() as u32, record_len as u32));
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn key(&self, i: usize) -> Option<&str> {
        let end = self.entries.get(i)?.0 as usize;
        let start = match i {
            0 => 0,
            _ => self.entries[i - 1].0 as usize,
        };
        self.keys.get(start..end)
    }

    fn record_len(&self, i: usize) -> u64 {
        self.entries.get(i).map_or(0, |e| e.1 as u64)
    }
}

/// Where the broker stored a batch: one answer for the whole batch (as RocketMQ's batch
/// send), with each message's result built when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSendResult {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: u32,
    /// The first message's queue offset; message `i` has this plus `i`.
    pub first_queue_offset: QueueOffset,
    /// The first message's commit-log offset; the others follow it back to back.
    pub first_commit_log_offset: CommitLogOffset,
    shard: u16,
    store_host: SocketAddrV4,
    layout: Arc<BatchLayout>,
}

impl BatchSendResult {
    /// Reads the broker's answer to the batch laid out by `layout`.
    pub(crate) fn new(
        resp: &protocol::SendResult,
        topic: &str,
        broker_name: &str,
        layout: &Arc<BatchLayout>,
    ) -> BatchSendResult {
        BatchSendResult {
            topic: topic.to_owned(),
            broker_name: broker_name.to_owned(),
            queue_id: resp.queue_id,
            first_queue_offset: QueueOffset(resp.first_queue_offset),
            first_commit_log_offset: CommitLogOffset(resp.first_commit_log_offset),
            shard: resp.shard,
            store_host: resp
                .store_host
                .parse()
                .unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            layout: Arc::clone(layout),
        }
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.layout.len()
    }

    /// The broker's store host, as the offset ids carry it.
    pub(crate) fn store_host(&self) -> SocketAddrV4 {
        self.store_host
    }

    pub fn is_empty(&self) -> bool {
        self.layout.len() == 0
    }

    /// The producer-made id (`UNIQ_KEY`) of message `i`.
    pub fn msg_id(&self, i: usize) -> Option<&str> {
        self.layout.key(i)
    }

    /// The result of message `i` (in the order the messages were given).
    pub fn get(&self, i: usize) -> Option<SendResult> {
        let key = self.layout.key(i)?;
        let before: u64 = (0..i).map(|j| self.layout.record_len(j)).sum();
        Some(self.result(i, key, self.first_commit_log_offset.0 + before))
    }

    fn result(&self, i: usize, key: &str, commit_log_offset: u64) -> SendResult {
        SendResult {
            msg_id: key.to_owned(),
            offset_msg_id: MsgOffsetId {
                store_host: self.store_host,
                shard: self.shard,
                commit_log_offset,
            }
            .to_hex(),
            topic: self.topic.clone(),
            broker_name: self.broker_name.clone(),
            queue_id: self.queue_id,
            queue_offset: QueueOffset(self.first_queue_offset.0 + i as u64),
            commit_log_offset: CommitLogOffset(commit_log_offset),
        }
    }

    /// Every message's result, in order.
    pub fn results(&self) -> Vec<SendResult> {
        let mut out = Vec::with_capacity(self.len());
        let mut offset = self.first_commit_log_offset.0;
        for i in 0..self.len() {
            if let Some(key) = self.layout.key(i) {
                out.push(self.result(i, key, offset));
            }
            offset += self.layout.record_len(i);
        }
        out
    }
}

/// Decompresses a zstd body, refusing to grow it beyond `bytes_max` (a hostile or corrupt
/// body must not exhaust memory).
pub(crate) fn decompress(body: &[u8], bytes_max: usize) -> std::io::Result<Vec<u8>> {
    let decoder = zstd::stream::read::Decoder::new(body)?;
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(bytes_max));
    decoder.take(bytes_max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > bytes_max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("decompressed body exceeds {bytes_max} bytes"),
        ));
    }
    Ok(out)
}

/// Inflates a zlib body (what RocketMQ's Java, Go and C++ producers compress with),
/// refusing to grow it beyond `bytes_max`.
pub(crate) fn decompress_zlib(body: &[u8], bytes_max: usize) -> std::io::Result<Vec<u8>> {
    let decoder = flate2::read::ZlibDecoder::new(body);
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(bytes_max));
    decoder.take(bytes_max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > bytes_max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("decompressed body exceeds {bytes_max} bytes"),
        ));
    }
    Ok(out)
}

/// The decompressed body of a compressed record; `None` for one stored as is. zstd is what
/// this client compresses with; zlib what RocketMQ's clients do (type bits 0, as 4.x
/// producers leave them, or ZLIB); LZ4 is refused with the reason.
pub(crate) fn inflate(
    view: &RecordView<'_>,
    addr: &str,
    body_bytes_max: usize,
) -> Result<Option<Bytes>> {
    let sys = view.sys_flag();
    if sys & sys_flag::COMPRESSED == 0 {
        return Ok(None);
    }
    let inflated = match sys & sys_flag::COMPRESSION_MASK {
        sys_flag::COMPRESSION_ZSTD => decompress(view.body(), body_bytes_max),
        0 | sys_flag::COMPRESSION_ZLIB => decompress_zlib(view.body(), body_bytes_max),
        _ => {
            return Err(ClientError::Protocol {
                addr: addr.to_owned(),
                detail: format!("unsupported compression in sys flag {sys:#x} (LZ4)"),
            })
        }
    };
    let body = inflated.map_err(|e| ClientError::Protocol {
        addr: addr.to_owned(),
        detail: format!("cannot decompress body: {e}"),
    })?;
    Ok(Some(Bytes::from(body)))
}

/// A record's body as owned bytes, decompressed if it was stored compressed (refusing to grow
/// past `body_bytes_max`).
pub(crate) fn owned_body(
    view: &RecordView<'_>,
    addr: &str,
    body_bytes_max: usize,
) -> Result<Bytes> {
    Ok(match inflate(view, addr, body_bytes_max)? {
        Some(b) => b,
        None => Bytes::copy_from_slice(view.body()),
    })
}

/// The offset id (where it is stored) of a record stored on `shard`.
pub(crate) fn offset_msg_id(view: &RecordView<'_>, shard: u16) -> String {
    MsgOffsetId {
        store_host: view.store_host(),
        shard,
        commit_log_offset: view.physical_offset(),
    }
    .to_hex()
}

/// The owned form of a record stored on `shard` whose (decompressed) body is `body`.
pub(crate) fn message_ext_with_body(view: &RecordView<'_>, shard: u16, body: Bytes) -> MessageExt {
    let offset_msg_id = offset_msg_id(view, shard);
    // One pass over the properties; the first valid entry of a key wins, as in
    // `Properties::get`.
    let (mut tags, mut keys, mut uniq_key) = (None, None, None);
    let mut properties = Vec::new();
    for (k, v) in view.properties().iter() {
        let slot = match k {
            prop::CRC => continue,
            prop::TAGS => Some(&mut tags),
            prop::KEYS => Some(&mut keys),
            prop::UNIQ_KEY => Some(&mut uniq_key),
            _ => None,
        };
        if let Some(slot @ None) = slot {
            *slot = Some(v);
        }
        properties.push((k.to_owned(), v.to_owned()));
    }
    MessageExt {
        topic: view.topic().to_owned(),
        queue_id: view.queue_id(),
        queue_offset: QueueOffset(view.queue_offset()),
        commit_log_offset: CommitLogOffset(view.physical_offset()),
        msg_id: uniq_key
            .map(str::to_owned)
            .unwrap_or_else(|| offset_msg_id.clone()),
        offset_msg_id,
        tags: tags.map(str::to_owned),
        keys: keys
            .unwrap_or("")
            .split(' ')
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect(),
        body,
        properties,
        flag: view.flag(),
        sys_flag: view.sys_flag(),
        born_timestamp_ms: view.born_timestamp_ms(),
        born_host: view.born_host(),
        store_timestamp_ms: view.store_timestamp_ms(),
        store_host: view.store_host(),
        reconsume_times: view.reconsume_times(),
        store_size: view.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_options as opts;

    #[test]
    fn oversized_and_invalid_messages_are_refused_client_side() {
        let mut o = opts();
        o.message_bytes_max = 1000;
        let big = Message::new("T", vec![b'x'; 1001]);
        match encode_message(&big, "U", &o, &mut Vec::new()) {
            Err(ClientError::TooLarge { size, max }) => assert_eq!((size, max), (1001, 1000)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let cases = [
            Message::new("", &b"x"[..]),
            Message::new("T", &b""[..]),
            Message::new("T", &b"x"[..]).with_key("has space"),
            Message::new("T", &b"x"[..]).with_property("UNIQ_KEY", "mine"),
            Message::new("T", &b"x"[..]).with_property("k", "bad\u{2}value"),
        ];
        for m in cases {
            assert!(
                matches!(
                    encode_message(&m, "U", &opts(), &mut Vec::new()),
                    Err(ClientError::InvalidMessage(_))
                ),
                "{m:?} was accepted"
            );
        }
    }

    #[test]
    fn offset_msg_ids_follow_the_record_sizes() {
        let resp = protocol::SendResult {
            queue_id: 3,
            first_queue_offset: 10,
            first_commit_log_offset: 1000,
            shard: 5,
            store_host: "192.168.0.7:10911".into(),
        };
        let mut layout = BatchLayout::default();
        for (key, len) in [("A", 100), ("Bb", 200), ("C", 50)] {
            layout.push(key, len);
        }
        let batch = BatchSendResult::new(&resp, "T", "broker-a", &Arc::new(layout));
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.msg_id(1), Some("Bb"));
        assert_eq!(batch.msg_id(3), None);
        let results = batch.results();
        assert_eq!(batch.get(2).as_ref(), results.get(2));
        let offsets: Vec<u64> = results.iter().map(|r| r.commit_log_offset.0).collect();
        assert_eq!(offsets, vec![1000, 1100, 1300]);
        let queue_offsets: Vec<u64> = results.iter().map(|r| r.queue_offset.0).collect();
        assert_eq!(queue_offsets, vec![10, 11, 12]);
        for r in &results {
            let id = MsgOffsetId::parse(&r.offset_msg_id).unwrap();
            assert_eq!(id.store_host.to_string(), "192.168.0.7:10911");
            assert_eq!(id.shard, 5);
            assert_eq!(id.commit_log_offset, r.commit_log_offset.0);
            assert_eq!((r.queue_id, r.broker_name.as_str()), (3, "broker-a"));
        }
        assert_eq!(results[1].msg_id, "Bb");
    }

    #[test]
    fn rocketmq_clients_zlib_bodies_inflate_and_lz4_is_refused_by_name() {
        use std::io::Write;
        let body = b"a body a Java producer compressed".repeat(200);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&body).unwrap();
        let zlib = z.finish().unwrap();
        for (sys, ok) in [
            (sys_flag::COMPRESSED, true),
            (sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZLIB, true),
            (sys_flag::COMPRESSED | sys_flag::COMPRESSION_LZ4, false),
        ] {
            let mut rec = Vec::new();
            message::encode_record(
                &MessageFields {
                    topic: "T",
                    body: &zlib,
                    sys_flag: sys,
                    ..Default::default()
                },
                &mut rec,
            )
            .unwrap();
            let view = RecordView::parse(&rec).unwrap();
            match inflate(&view, "b:1", 1 << 20) {
                Ok(Some(b)) => assert!(ok && b[..] == body[..]),
                Err(e) => assert!(!ok && e.to_string().contains("LZ4"), "{e}"),
                Ok(None) => panic!("a compressed record"),
            }
        }
    }

    #[test]
    fn decompression_is_bounded() {
        let zeros = zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
        assert!(decompress(&zeros, 1 << 20).is_ok());
        assert!(decompress(&zeros, 1000).is_err());
        assert!(decompress(b"not zstd", 1000).is_err());
    }
}
