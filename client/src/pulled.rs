//! [`PulledBatch`]: the messages of one pull read where they lie in the response, for
//! consumers that go through many messages and look at few of their fields. Nothing is
//! copied or turned into `String`s until asked; [`PulledMessage::to_message_ext`] (or
//! [`PulledBatch::into_result`]) gives the owned [`MessageExt`] form.

use bytes::Bytes;
use message::{prop, sys_flag, RecordView, TagFilter};

use crate::error::{ClientError, Result};
use crate::model::{
    decompress, message_ext_with_body, offset_msg_id, CommitLogOffset, MessageExt, PullResult,
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

/// The decompressed body of a compressed record; `None` for one stored as is.
pub(crate) fn inflate(
    view: &RecordView<'_>,
    addr: &str,
    body_bytes_max: usize,
) -> Result<Option<Bytes>> {
    let sys = view.sys_flag();
    if sys & sys_flag::COMPRESSED == 0 {
        return Ok(None);
    }
    if sys & sys_flag::COMPRESSION_MASK != sys_flag::COMPRESSION_ZSTD {
        return Err(ClientError::Protocol {
            addr: addr.to_owned(),
            detail: format!("unsupported compression in sys flag {sys:#x}"),
        });
    }
    let body = decompress(view.body(), body_bytes_max).map_err(|e| ClientError::Protocol {
        addr: addr.to_owned(),
        detail: format!("cannot decompress body: {e}"),
    })?;
    Ok(Some(Bytes::from(body)))
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
