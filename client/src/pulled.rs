//! [`PulledBatch`]: the messages of one pull read where they lie in the response, for
//! consumers that go through many messages and look at few of their fields. Nothing is
//! copied or turned into `String`s until asked; [`PulledMessage::to_message_ext`] (or
//! [`PulledBatch::into_result`]) gives the owned [`MessageExt`] form.

use bytes::Bytes;
use message::{prop, RecordView, TagFilter};

use crate::error::{ClientError, Result};
use crate::model::{
    inflate, message_ext_with_body, offset_msg_id, CommitLogOffset, MessageExt, PullResult,
    PullStatus, QueueOffset,
};

/// The answer to one pull, its records checked but not decoded.
#[derive(Debug, Clone)]
pub struct PulledBatch {
    pub status: PullStatus,
    /// Where the next pull of the queue starts (past any records the tag filter dropped).
    pub next_offset: QueueOffset,
    pub min_offset: QueueOffset,
    pub max_offset: QueueOffset,
    /// The broker id to read the queue from next (0: the master), as the broker suggested.
    pub suggested_broker_id: u64,
    frame: Bytes,
    records: Vec<Span>,
    shard: u16,
}

/// One record of the frame, and its body if it had to be decompressed.
#[derive(Debug, Clone)]
struct Span {
    start: usize,
    len: usize,
    inflated: Option<Bytes>,
}

/// Where a batch's records came from.
pub(crate) struct BatchSource<'a> {
    pub addr: &'a str,
    pub shard: u16,
    pub status: PullStatus,
    pub next_offset: QueueOffset,
    pub min_offset: QueueOffset,
    pub max_offset: QueueOffset,
    pub suggested_broker_id: u64,
}

impl PulledBatch {
    /// Checks the structure of every record of `frame` (a pull body), keeps those whose tag
    /// matches `filter` (the broker filters by hash, which can collide) and decompresses
    /// compressed bodies, refusing any that would grow past `body_bytes_max`.
    pub(crate) fn decode(
        frame: Bytes,
        filter: &TagFilter,
        source: BatchSource<'_>,
        body_bytes_max: usize,
    ) -> Result<PulledBatch> {
        let addr = source.addr;
        let mut batch = PulledBatch::empty(source);
        let mut at = 0;
        for rec in message::records(&frame) {
            let view = rec.map_err(|e| ClientError::Protocol {
                addr: addr.to_owned(),
                detail: format!("bad record in pull body: {e}"),
            })?;
            let start = at;
            at += view.len();
            if !matches!(filter, TagFilter::All) && !filter.matches(view.tags()) {
                continue;
            }
            let inflated = inflate(&view, addr, body_bytes_max)?;
            batch.records.push(Span {
                start,
                len: view.len(),
                inflated,
            });
        }
        batch.frame = frame;
        Ok(batch)
    }

    /// A batch without records (nothing new, or the offset moved).
    pub(crate) fn empty(source: BatchSource<'_>) -> PulledBatch {
        PulledBatch {
            status: source.status,
            next_offset: source.next_offset,
            min_offset: source.min_offset,
            max_offset: source.max_offset,
            suggested_broker_id: source.suggested_broker_id,
            frame: Bytes::new(),
            records: Vec::new(),
            shard: source.shard,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The messages in queue order.
    pub fn iter(&self) -> impl Iterator<Item = PulledMessage<'_>> + '_ {
        self.records.iter().filter_map(move |s| {
            // Checked in `decode`: parsing again cannot fail.
            let view = RecordView::parse(&self.frame[s.start..s.start + s.len]).ok()?;
            let body = match &s.inflated {
                Some(b) => &b[..],
                None => view.body(),
            };
            Some(PulledMessage {
                view,
                body,
                span: s,
                frame: &self.frame,
                shard: self.shard,
            })
        })
    }

    /// The owned form, every message decoded.
    pub fn into_result(self) -> PullResult {
        let messages = self.iter().map(|m| m.to_message_ext()).collect();
        PullResult {
            status: self.status,
            next_offset: self.next_offset,
            min_offset: self.min_offset,
            max_offset: self.max_offset,
            messages,
        }
    }
}

/// One message of a [`PulledBatch`], borrowed from it.
#[derive(Clone, Copy)]
pub struct PulledMessage<'a> {
    view: RecordView<'a>,
    body: &'a [u8],
    span: &'a Span,
    frame: &'a Bytes,
    shard: u16,
}

impl<'a> PulledMessage<'a> {
    pub fn queue_id(&self) -> u32 {
        self.view.queue_id()
    }
    pub fn queue_offset(&self) -> QueueOffset {
        QueueOffset(self.view.queue_offset())
    }
    pub fn commit_log_offset(&self) -> CommitLogOffset {
        CommitLogOffset(self.view.physical_offset())
    }
    pub fn topic(&self) -> &'a str {
        self.view.topic()
    }
    /// The body, decompressed.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }
    /// The body as shared bytes (no copy).
    pub fn body_bytes(&self) -> Bytes {
        match &self.span.inflated {
            Some(b) => b.clone(),
            None => self.frame.slice_ref(self.view.body()),
        }
    }
    pub fn tags(&self) -> Option<&'a str> {
        self.view.tags()
    }
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.view.keys()
    }
    /// A property by name (TAGS, KEYS and UNIQ_KEY included).
    pub fn property(&self, key: &str) -> Option<&'a str> {
        self.view.property(key)
    }
    /// Where the broker stored it ([`message::MsgOffsetId`] as 32 hex digits).
    pub fn offset_msg_id(&self) -> String {
        offset_msg_id(&self.view, self.shard)
    }
    /// `UNIQ_KEY` when the producer set one, else the offset id.
    pub fn msg_id(&self) -> String {
        match self.view.property(prop::UNIQ_KEY) {
            Some(k) => k.to_owned(),
            None => self.offset_msg_id(),
        }
    }
    pub fn flag(&self) -> i32 {
        self.view.flag()
    }
    pub fn born_timestamp_ms(&self) -> i64 {
        self.view.born_timestamp_ms()
    }
    pub fn store_timestamp_ms(&self) -> i64 {
        self.view.store_timestamp_ms()
    }
    pub fn reconsume_times(&self) -> i32 {
        self.view.reconsume_times()
    }
    /// Size of the stored record in bytes.
    pub fn store_size(&self) -> usize {
        self.view.len()
    }

    /// The owned form.
    pub fn to_message_ext(&self) -> MessageExt {
        message_ext_with_body(&self.view, self.shard, self.body_bytes())
    }
}

impl std::fmt::Debug for PulledMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulledMessage")
            .field("queue_offset", &self.queue_offset())
            .field("topic", &self.topic())
            .field("tags", &self.tags())
            .field("body_len", &self.body.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{encode_message, Message};
    use crate::testing::encode_options as opts;
    use message::{sys_flag, MsgOffsetId};

    /// Decodes a pull body as a pull of shard 2 does.
    fn decode_records(
        stored: &[u8],
        filter: &TagFilter,
        bytes_max: usize,
    ) -> Result<Vec<MessageExt>> {
        let frame = Bytes::copy_from_slice(stored);
        let source = BatchSource {
            addr: "test",
            shard: 2,
            status: PullStatus::Found,
            next_offset: QueueOffset(0),
            min_offset: QueueOffset(0),
            max_offset: QueueOffset(0),
            suggested_broker_id: 0,
        };
        let batch = PulledBatch::decode(frame, filter, source, bytes_max)?;
        Ok(batch.into_result().messages)
    }

    #[test]
    fn pulled_bodies_share_the_frame() {
        let mut body = Vec::new();
        encode_message(&Message::new("T", &b"hello"[..]), "U", &opts(), &mut body).unwrap();
        let stored = Bytes::from(crate::testing::stored(&body, 0, 7));
        let source = BatchSource {
            addr: "test",
            shard: 2,
            status: PullStatus::Found,
            next_offset: QueueOffset(8),
            min_offset: QueueOffset(0),
            max_offset: QueueOffset(8),
            suggested_broker_id: 0,
        };
        let batch = PulledBatch::decode(stored.clone(), &TagFilter::All, source, 1 << 20).unwrap();
        let m = batch.iter().next().unwrap();
        assert_eq!(m.body(), b"hello");
        assert_eq!(m.queue_offset(), QueueOffset(7));
        let frame = stored.as_ptr() as usize..stored.as_ptr() as usize + stored.len();
        assert!(frame.contains(&(m.body().as_ptr() as usize)), "no copy");
        let shared = m.body_bytes();
        assert_eq!(shared.as_ptr(), m.body().as_ptr(), "no copy");
        let ext = batch.into_result().messages.remove(0);
        assert_eq!(ext.body.as_ptr(), shared.as_ptr(), "no copy");
    }

    fn round_trip(msg: &Message) -> (Vec<u8>, MessageExt) {
        let mut body = Vec::new();
        let len = encode_message(msg, "UNIQ0001", &opts(), &mut body).unwrap();
        assert_eq!(len, body.len());
        let stored = crate::testing::stored(&body, 5, 40);
        let mut got = decode_records(&stored, &TagFilter::All, 1 << 24).unwrap();
        assert_eq!(got.len(), 1);
        (body, got.remove(0))
    }

    #[test]
    fn large_bodies_are_compressed_and_come_back_whole() {
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog "
            .iter()
            .copied()
            .cycle()
            .take(64 * 1024)
            .collect();
        let msg = Message::new("TopicTest", text.clone())
            .with_tags("TagA")
            .with_keys(["k1", "k2"])
            .with_property("color", "blue");
        let (record, ext) = round_trip(&msg);
        assert!(
            record.len() < text.len() / 4,
            "record of {} bytes",
            record.len()
        );
        assert_eq!(
            ext.sys_flag & (sys_flag::COMPRESSED | sys_flag::COMPRESSION_MASK),
            sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZSTD
        );
        assert_eq!(&ext.body[..], &text[..]);
        assert_eq!(ext.tags.as_deref(), Some("TagA"));
        assert_eq!(ext.keys, vec!["k1", "k2"]);
        assert_eq!(ext.msg_id, "UNIQ0001");
        assert_eq!(ext.property("color"), Some("blue"));
        // Properties are written TAGS, KEYS, UNIQ_KEY, then the user's.
        let names: Vec<&str> = ext.properties.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["TAGS", "KEYS", "UNIQ_KEY", "color"]);
        assert_eq!(ext.queue_id, 5);
        assert_eq!(ext.queue_offset, QueueOffset(40));
        assert_eq!(ext.born_host.ip().to_string(), "10.1.2.3");
    }

    #[test]
    fn small_and_incompressible_bodies_are_sent_as_is() {
        let (_, ext) = round_trip(&Message::new("T", &b"hello"[..]));
        assert_eq!(ext.sys_flag & sys_flag::COMPRESSED, 0);
        assert_eq!(&ext.body[..], b"hello");
        // Random bytes do not shrink: they go uncompressed although over the threshold.
        let noise: Vec<u8> = (0..10_000).map(|_| rand::random::<u8>()).collect();
        let (_, ext) = round_trip(&Message::new("T", noise.clone()));
        assert_eq!(ext.sys_flag & sys_flag::COMPRESSED, 0);
        assert_eq!(&ext.body[..], &noise[..]);
    }

    #[test]
    fn pulled_messages_are_filtered_by_the_real_tag() {
        let mut body = Vec::new();
        for tag in ["TagA", "TagB", "TagA"] {
            let m = Message::new("T", &b"x"[..]).with_tags(tag);
            encode_message(&m, "U", &opts(), &mut body).unwrap();
        }
        let stored = crate::testing::stored(&body, 0, 0);
        let got = decode_records(&stored, &TagFilter::parse("TagA"), 1 << 20).unwrap();
        let offsets: Vec<u64> = got.iter().map(|m| m.queue_offset.0).collect();
        assert_eq!(offsets, vec![0, 2]);
        // The offset id names the shard the queue lives on and the record's position.
        let id = MsgOffsetId::parse(&got[1].offset_msg_id).unwrap();
        assert_eq!(id.shard, 2);
        assert_eq!(id.commit_log_offset, got[1].commit_log_offset.0);
    }

    #[test]
    fn corrupt_pull_bodies_are_errors_not_panics() {
        let mut body = Vec::new();
        encode_message(&Message::new("T", &b"x"[..]), "U", &opts(), &mut body).unwrap();
        let stored = crate::testing::stored(&body, 0, 0);
        for cut in 1..stored.len() {
            assert!(decode_records(&stored[..cut], &TagFilter::All, 1 << 20).is_err());
        }
    }
}
