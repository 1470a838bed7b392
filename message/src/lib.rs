//! The message model shared by the storage shard, the broker and the client.
//!
//! A stored message is one *record* in RocketMQ's stored-message layout (MessageExtEncoder,
//! big-endian), so that a RocketMQ-protocol front end can send records to real RocketMQ
//! clients exactly as they lie on disk:
//!
//! ```text
//! off  size  field
//!   0     4  TOTALSIZE          whole record, this field included
//!   4     4  MAGICCODE          MAGIC_CODE (or BLANK_MAGIC_CODE for a filler)
//!   8     4  BODYCRC            crc32 of BODY
//!  12     4  QUEUEID
//!  16     4  FLAG
//!  20     8  QUEUEOFFSET        position in the ConsumeQueue
//!  28     8  PHYSICALOFFSET     position in the shard's CommitLog
//!  36     4  SYSFLAG
//!  40     8  BORNTIMESTAMP      ms
//!  48     8  BORNHOST           IPv4 (4) + port (4)
//!  56     8  STORETIMESTAMP     ms
//!  64     8  STOREHOST          IPv4 (4) + port (4)
//!  72     4  RECONSUMETIMES
//!  76     8  PREPARED_TX_OFFSET
//!  84     4  BODYLEN, then BODY
//!   .     1  TOPICLEN, then TOPIC
//!   .     2  PROPLEN, then PROPERTIES  (`key 0x01 value 0x02` repeated)
//! ```
//!
//! Beyond RocketMQ, the last property is always `__CRC` with 8 lowercase hex digits: the
//! CRC32 (IEEE, crc32fast) of the whole record with those 8 digits left out. It covers the
//! store fields (offsets, timestamps) too, so recovery can tell a torn or flipped record from
//! a good one. Producers encode records with [`encode_record`], leaving the store fields zero
//! and the CRC digits as a placeholder; the broker fills them in place with [`stamp_record`].

// Tests may unwrap: a panic there is a failed test, not a crashed broker.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

pub mod ids;
pub mod offsets;
pub mod properties;
pub mod reply;
pub mod sql92;
pub mod timer;

pub use ids::{MsgOffsetId, UniqKeyGenerator, UNIQ_KEY_CHARS};
pub use properties::{IndexedProperties, Properties, PropertiesIter};

/// RocketMQ's topic of client-side message trace records (`TopicValidator.RMQ_SYS_TRACE_TOPIC`).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

/// RocketMQ's MESSAGE_MAGIC_CODE (V1).
pub const MAGIC_CODE: i32 = -626843481;
/// RocketMQ's BLANK_MAGIC_CODE: fills the end of a CommitLog segment that the next record
/// did not fit in, or (ours) the rest of a write chunk up to a block boundary.
pub const BLANK_MAGIC_CODE: i32 = -875286124;
/// A blank filler is at least TOTALSIZE + MAGICCODE.
pub const BLANK_RECORD_MIN_BYTES: usize = 8;

/// Bytes of the record before BODY (up to and including BODYLEN).
pub const FIXED_HEAD_BYTES: usize = 88;
/// Bytes of a record whose body, topic and properties are empty.
pub const FIXED_BYTES: usize = FIXED_HEAD_BYTES + 1 + 2;

pub const OFF_TOTAL_SIZE: usize = 0;
pub const OFF_MAGIC: usize = 4;
pub const OFF_BODY_CRC: usize = 8;
pub const OFF_QUEUE_ID: usize = 12;
pub const OFF_FLAG: usize = 16;
pub const OFF_QUEUE_OFFSET: usize = 20;
pub const OFF_PHYSICAL_OFFSET: usize = 28;
pub const OFF_SYS_FLAG: usize = 36;
pub const OFF_BORN_TIMESTAMP: usize = 40;
pub const OFF_BORN_HOST: usize = 48;
pub const OFF_STORE_TIMESTAMP: usize = 56;
pub const OFF_STORE_HOST: usize = 64;
pub const OFF_RECONSUME_TIMES: usize = 72;
pub const OFF_PREPARED_TX_OFFSET: usize = 76;
pub const OFF_BODY_LEN: usize = 84;

const _: () = assert!(OFF_BODY_LEN + 4 == FIXED_HEAD_BYTES);

/// SYSFLAG bits (MessageSysFlag).
pub mod sys_flag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const BORN_HOST_V6: i32 = 0x10;
    pub const STORE_HOST_V6: i32 = 0x20;
    /// Compression type, bits 8-10 (0 with COMPRESSED: zlib, as RocketMQ 4.x writes it).
    pub const COMPRESSION_LZ4: i32 = 0x100;
    pub const COMPRESSION_ZSTD: i32 = 0x200;
    pub const COMPRESSION_ZLIB: i32 = 0x300;
    pub const COMPRESSION_MASK: i32 = 0x700;
}

/// Well-known property names (MessageConst).
pub mod prop {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const WAIT: &str = "WAIT";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    /// The record CRC; always the last property.
    pub const CRC: &str = "__CRC";
}

/// The 8 hex digits of the CRC property plus its key and separators.
const CRC_TRAILER_PREFIX: &[u8] = b"__CRC\x01";
const CRC_DIGITS: usize = 8;
/// `__CRC 0x01 dddddddd 0x02`
pub const CRC_TRAILER_BYTES: usize = CRC_TRAILER_PREFIX.len() + CRC_DIGITS + 1;

/// Longest topic name: the layout stores its length in one byte.
pub const TOPIC_LEN_MAX: usize = 127;
/// Longest properties string: the layout stores its length in an i16.
pub const PROPERTIES_LEN_MAX: usize = i16::MAX as usize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("bad magic code {0:#x}")]
    BadMagic(i32),
    #[error("record size {0} is not consistent with its fields")]
    BadSize(i64),
    #[error("topic is not valid UTF-8")]
    BadTopic,
    #[error("topic name is empty or longer than {TOPIC_LEN_MAX} bytes")]
    TopicLength,
    #[error("properties longer than {PROPERTIES_LEN_MAX} bytes")]
    PropertiesLength,
    #[error("property names and values may not contain the separators 0x01 and 0x02")]
    PropertySeparator,
    #[error("the record has no CRC trailer property")]
    MissingCrc,
    #[error("record CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("IPv6 hosts are not supported in stored records")]
    Ipv6Host,
}

/// What a producer fills in. Store-side fields (queue offset, physical offset, store time
/// and host) are assigned by the broker.
#[derive(Debug, Clone, Default)]
pub struct MessageFields<'a> {
    pub topic: &'a str,
    pub body: &'a [u8],
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: Option<SocketAddrV4>,
    pub reconsume_times: i32,
    /// Properties other than the CRC trailer, in order (TAGS, KEYS, UNIQ_KEY, user ones).
    pub properties: &'a [(&'a str, &'a str)],
}

/// The fields the broker stamps into a record when it stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStamp {
    pub queue_id: u32,
    pub queue_offset: u64,
    pub physical_offset: u64,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddrV4,
}

/// Size of the record [`encode_record`] would produce.
pub fn encoded_len(fields: &MessageFields<'_>) -> usize {
    FIXED_BYTES + fields.body.len() + fields.topic.len() + properties_len(fields.properties)
}

fn properties_len(props: &[(&str, &str)]) -> usize {
    props
        .iter()
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum::<usize>()
        + CRC_TRAILER_BYTES
}

/// Appends one record to `out`, with zero store fields and a placeholder CRC.
pub fn encode_record(fields: &MessageFields<'_>, out: &mut Vec<u8>) -> Result<(), RecordError> {
    if fields.topic.is_empty() || fields.topic.len() > TOPIC_LEN_MAX {
        return Err(RecordError::TopicLength);
    }
    let props_len = properties_len(fields.properties);
    if props_len > PROPERTIES_LEN_MAX {
        return Err(RecordError::PropertiesLength);
    }
    for (k, v) in fields.properties {
        if k.bytes().chain(v.bytes()).any(|b| b == 1 || b == 2) {
            return Err(RecordError::PropertySeparator);
        }
    }
    let total = encoded_len(fields);
    let host = fields
        .born_host
        .unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    out.reserve(total);
    out.extend_from_slice(&(total as i32).to_be_bytes());
    out.extend_from_slice(&MAGIC_CODE.to_be_bytes());
    out.extend_from_slice(&(crc32fast::hash(fields.body) as i32).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes()); // queue id
    out.extend_from_slice(&fields.flag.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes()); // queue offset
    out.extend_from_slice(&0i64.to_be_bytes()); // physical offset
    out.extend_from_slice(
        &(fields.sys_flag & !(sys_flag::BORN_HOST_V6 | sys_flag::STORE_HOST_V6)).to_be_bytes(),
    );
    out.extend_from_slice(&fields.born_timestamp_ms.to_be_bytes());
    put_host(out, host);
    out.extend_from_slice(&0i64.to_be_bytes()); // store timestamp
    put_host(out, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    out.extend_from_slice(&fields.reconsume_times.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes()); // prepared tx offset
    out.extend_from_slice(&(fields.body.len() as i32).to_be_bytes());
    out.extend_from_slice(fields.body);
    out.push(fields.topic.len() as u8);
    out.extend_from_slice(fields.topic.as_bytes());
    out.extend_from_slice(&(props_len as i16).to_be_bytes());
    for (k, v) in fields.properties {
        out.extend_from_slice(k.as_bytes());
        out.push(1);
        out.extend_from_slice(v.as_bytes());
        out.push(2);
    }
    out.extend_from_slice(CRC_TRAILER_PREFIX);
    out.extend_from_slice(b"00000000");
    out.push(2);
    Ok(())
}

fn put_host(out: &mut Vec<u8>, host: SocketAddrV4) {
    out.extend_from_slice(&host.ip().octets());
    out.extend_from_slice(&(host.port() as i32).to_be_bytes());
}

fn be_i32(b: &[u8], off: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    i32::from_be_bytes(a)
}

fn be_i64(b: &[u8], off: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    i64::from_be_bytes(a)
}

fn host_at(b: &[u8], off: usize) -> SocketAddrV4 {
    let ip = Ipv4Addr::new(b[off], b[off + 1], b[off + 2], b[off + 3]);
    SocketAddrV4::new(ip, be_i32(b, off + 4) as u16)
}

/// What [`peek_record`] finds at a position of a CommitLog segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// A record of this many bytes whose structure and CRC are valid.
    Record(usize),
    /// End-of-segment filler of this many bytes.
    Blank(usize),
    /// Not a valid record: the end of the valid log.
    Invalid,
}

/// Checks what starts at `buf[0..]` without trusting anything: used by recovery.
pub fn peek_record(buf: &[u8]) -> Peek {
    if buf.len() < BLANK_RECORD_MIN_BYTES {
        return Peek::Invalid;
    }
    let total = be_i32(buf, OFF_TOTAL_SIZE);
    let magic = be_i32(buf, OFF_MAGIC);
    if magic == BLANK_MAGIC_CODE {
        let total = total as usize;
        if total >= BLANK_RECORD_MIN_BYTES && total <= buf.len() {
            return Peek::Blank(total);
        }
        return Peek::Invalid;
    }
    match RecordView::parse(buf) {
        Ok(view) if view.verify_crc().is_ok() => Peek::Record(view.len()),
        _ => Peek::Invalid,
    }
}

/// Writes an end-of-segment filler of `buf.len()` bytes.
pub fn write_blank(buf: &mut [u8]) {
    debug_assert!(buf.len() >= BLANK_RECORD_MIN_BYTES);
    let len = buf.len() as i32;
    buf.fill(0);
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    buf[4..8].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
}

/// Fills the store fields of an encoded record in place and computes its CRC.
/// The record must have passed [`RecordView::parse`].
pub fn stamp_record(buf: &mut [u8], stamp: &StoreStamp) -> Result<u32, RecordError> {
    let len = RecordView::parse(buf)?.len();
    Ok(write_stamp(&mut buf[..len], stamp))
}

/// Stamps a structurally valid record of exactly `buf.len()` bytes; returns its CRC.
fn write_stamp(buf: &mut [u8], stamp: &StoreStamp) -> u32 {
    let len = buf.len();
    stamp_fields(buf, stamp);
    let crc = compute_crc(buf);
    let digits = crc_digits_range(len);
    write_hex8(&mut buf[digits], crc);
    crc
}

/// Writes the store fields into the fixed head of a record (`buf` holds at least that).
fn stamp_fields(buf: &mut [u8], stamp: &StoreStamp) {
    buf[OFF_QUEUE_ID..OFF_QUEUE_ID + 4].copy_from_slice(&(stamp.queue_id as i32).to_be_bytes());
    buf[OFF_QUEUE_OFFSET..OFF_QUEUE_OFFSET + 8]
        .copy_from_slice(&(stamp.queue_offset as i64).to_be_bytes());
    buf[OFF_PHYSICAL_OFFSET..OFF_PHYSICAL_OFFSET + 8]
        .copy_from_slice(&(stamp.physical_offset as i64).to_be_bytes());
    buf[OFF_STORE_TIMESTAMP..OFF_STORE_TIMESTAMP + 8]
        .copy_from_slice(&stamp.store_timestamp_ms.to_be_bytes());
    buf[OFF_STORE_HOST..OFF_STORE_HOST + 4].copy_from_slice(&stamp.store_host.ip().octets());
    buf[OFF_STORE_HOST + 4..OFF_STORE_HOST + 8]
        .copy_from_slice(&(stamp.store_host.port() as i32).to_be_bytes());
}

/// Overwrites the reconsume count of a stored record and refreshes its CRC.
pub fn set_reconsume_times(buf: &mut [u8], times: i32) -> Result<(), RecordError> {
    let len = RecordView::parse(buf)?.len();
    let buf = &mut buf[..len];
    buf[OFF_RECONSUME_TIMES..OFF_RECONSUME_TIMES + 4].copy_from_slice(&times.to_be_bytes());
    let crc = compute_crc(buf);
    write_hex8(&mut buf[crc_digits_range(len)], crc);
    Ok(())
}

fn crc_digits_range(len: usize) -> std::ops::Range<usize> {
    let end = len - 1;
    end - CRC_DIGITS..end
}

fn compute_crc(record: &[u8]) -> u32 {
    let digits = crc_digits_range(record.len());
    let mut h = crc32fast::Hasher::new();
    h.update(&record[..digits.start]);
    h.update(&record[digits.end..]);
    h.finalize()
}

fn write_hex8(out: &mut [u8], v: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = HEX[((v >> (28 - 4 * i)) & 0xf) as usize];
    }
}

fn read_hex8(digits: &[u8]) -> Option<u32> {
    // Lowercase only: an uppercase digit is a flipped bit, not the same CRC.
    digits.iter().try_fold(0u32, |acc, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        Some((acc << 4) | d as u32)
    })
}

/// A structurally validated record borrowed from a buffer.
#[derive(Clone, Copy)]
pub struct RecordView<'a> {
    buf: &'a [u8],
    body_start: usize,
    body_len: usize,
    /// Validated once in `parse`, so `topic()` costs nothing.
    topic: &'a str,
    props_start: usize,
    props_len: usize,
}

impl<'a> RecordView<'a> {
    /// Validates the structure of the record at the start of `buf` (lengths, magic, UTF-8
    /// topic, CRC trailer present). Does not check the CRC: see [`RecordView::verify_crc`].
    pub fn parse(buf: &'a [u8]) -> Result<Self, RecordError> {
        if buf.len() < FIXED_BYTES {
            return Err(RecordError::Truncated {
                need: FIXED_BYTES,
                have: buf.len(),
            });
        }
        let magic = be_i32(buf, OFF_MAGIC);
        if magic != MAGIC_CODE {
            return Err(RecordError::BadMagic(magic));
        }
        let total = be_i32(buf, OFF_TOTAL_SIZE);
        if total < FIXED_BYTES as i32 {
            return Err(RecordError::BadSize(total as i64));
        }
        let total = total as usize;
        if total > buf.len() {
            return Err(RecordError::Truncated {
                need: total,
                have: buf.len(),
            });
        }
        let sys = be_i32(buf, OFF_SYS_FLAG);
        if sys & (sys_flag::BORN_HOST_V6 | sys_flag::STORE_HOST_V6) != 0 {
            return Err(RecordError::Ipv6Host);
        }
        let body_len = be_i32(buf, OFF_BODY_LEN);
        if body_len < 0 || FIXED_BYTES + body_len as usize > total {
            return Err(RecordError::BadSize(total as i64));
        }
        let body_start = FIXED_HEAD_BYTES;
        let body_len = body_len as usize;
        let topic_len_at = body_start + body_len;
        let topic_len = buf[topic_len_at] as usize;
        let topic_start = topic_len_at + 1;
        if topic_len == 0 || topic_start + topic_len + 2 > total {
            return Err(RecordError::BadSize(total as i64));
        }
        let topic = std::str::from_utf8(&buf[topic_start..topic_start + topic_len])
            .map_err(|_| RecordError::BadTopic)?;
        let props_len_at = topic_start + topic_len;
        let props_len = i16::from_be_bytes([buf[props_len_at], buf[props_len_at + 1]]);
        if props_len < 0 {
            return Err(RecordError::PropertiesLength);
        }
        let props_len = props_len as usize;
        let props_start = props_len_at + 2;
        if props_start + props_len != total {
            return Err(RecordError::BadSize(total as i64));
        }
        let props = &buf[props_start..total];
        if props.len() < CRC_TRAILER_BYTES
            || !props[props.len() - CRC_TRAILER_BYTES..].starts_with(CRC_TRAILER_PREFIX)
            || props[props.len() - 1] != 2
        {
            return Err(RecordError::MissingCrc);
        }
        Ok(RecordView {
            buf: &buf[..total],
            body_start,
            body_len,
            topic,
            props_start,
            props_len,
        })
    }

    /// Copies this record into the start of `dst` with the store fields and the CRC filled
    /// in (the bytes [`stamp_record`] would leave), and returns the CRC. The CRC is computed
    /// from this record and the stamp, never by reading `dst` back, so the copy is one
    /// stream of stores into memory that need not be in cache.
    pub fn write_stamped(&self, dst: &mut [u8], stamp: &StoreStamp) -> Result<u32, RecordError> {
        let len = self.len();
        let have = dst.len();
        let Some(out) = dst.get_mut(..len) else {
            return Err(RecordError::Truncated { need: len, have });
        };
        let mut head = [0u8; FIXED_HEAD_BYTES];
        head.copy_from_slice(&self.buf[..FIXED_HEAD_BYTES]);
        stamp_fields(&mut head, stamp);
        let digits = crc_digits_range(len);
        let mut h = crc32fast::Hasher::new();
        h.update(&head);
        h.update(&self.buf[FIXED_HEAD_BYTES..digits.start]);
        h.update(&self.buf[digits.end..]);
        let crc = h.finalize();
        out[..FIXED_HEAD_BYTES].copy_from_slice(&head);
        out[FIXED_HEAD_BYTES..digits.start]
            .copy_from_slice(&self.buf[FIXED_HEAD_BYTES..digits.start]);
        write_hex8(&mut out[digits.clone()], crc);
        out[digits.end..].copy_from_slice(&self.buf[digits.end..]);
        Ok(crc)
    }

    /// Copies this record into the start of `dst`, fills in the store fields and the CRC
    /// there (as [`stamp_record`] does) and returns the view of the copy, without parsing
    /// it again: the copy is byte for byte the validated record, and stamping only touches
    /// fixed-offset fields and the CRC digits, so its structure is the same.
    pub fn copy_stamped<'b>(
        &self,
        dst: &'b mut [u8],
        stamp: &StoreStamp,
    ) -> Result<RecordView<'b>, RecordError> {
        self.write_stamped(dst, stamp)?;
        let out: &'b [u8] = &dst[..self.len()];
        let topic_start = self.body_start + self.body_len + 1;
        let topic = std::str::from_utf8(&out[topic_start..topic_start + self.topic.len()])
            .map_err(|_| RecordError::BadTopic)?;
        let view = RecordView {
            buf: out,
            body_start: self.body_start,
            body_len: self.body_len,
            topic,
            props_start: self.props_start,
            props_len: self.props_len,
        };
        debug_assert!(RecordView::parse(out).is_ok_and(|v| v.len() == out.len()));
        debug_assert!(view.verify_crc().is_ok());
        Ok(view)
    }

    /// TAGS, KEYS and UNIQ_KEY as they will read once this record is stamped, found in
    /// this (unstamped) copy, or `None` when stamping could change them and the stamped
    /// copy must be scanned instead. Stamping rewrites only fixed-offset fields and the 8
    /// CRC digits; when those digits are hex already (as [`encode_record`] leaves them)
    /// they stay hex, so entry boundaries and UTF-8 validity cannot change, and only a
    /// value running into the digits (a property list whose last entry lacks its 0x02)
    /// could read differently.
    pub fn indexed_properties_after_stamp(&self) -> Option<IndexedProperties<'a>> {
        let digits = crc_digits_range(self.len());
        read_hex8(&self.buf[digits.clone()])?;
        let p = self.indexed_properties();
        let digits_at = self.buf.as_ptr() as usize + digits.start;
        let reaches =
            |v: Option<&str>| v.is_some_and(|s| s.as_ptr() as usize + s.len() > digits_at);
        if reaches(p.tags) || reaches(p.keys) || reaches(p.uniq_key) {
            return None;
        }
        Some(p)
    }

    /// Checks the record CRC against its bytes.
    pub fn verify_crc(&self) -> Result<(), RecordError> {
        let digits = crc_digits_range(self.buf.len());
        let stored = read_hex8(&self.buf[digits]).ok_or(RecordError::MissingCrc)?;
        let computed = compute_crc(self.buf);
        if stored != computed {
            return Err(RecordError::CrcMismatch { stored, computed });
        }
        Ok(())
    }

    /// The whole record.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn body_crc(&self) -> u32 {
        be_i32(self.buf, OFF_BODY_CRC) as u32
    }
    pub fn queue_id(&self) -> u32 {
        be_i32(self.buf, OFF_QUEUE_ID) as u32
    }
    pub fn flag(&self) -> i32 {
        be_i32(self.buf, OFF_FLAG)
    }
    pub fn queue_offset(&self) -> u64 {
        be_i64(self.buf, OFF_QUEUE_OFFSET) as u64
    }
    pub fn physical_offset(&self) -> u64 {
        be_i64(self.buf, OFF_PHYSICAL_OFFSET) as u64
    }
    pub fn sys_flag(&self) -> i32 {
        be_i32(self.buf, OFF_SYS_FLAG)
    }
    pub fn born_timestamp_ms(&self) -> i64 {
        be_i64(self.buf, OFF_BORN_TIMESTAMP)
    }
    pub fn born_host(&self) -> SocketAddrV4 {
        host_at(self.buf, OFF_BORN_HOST)
    }
    pub fn store_timestamp_ms(&self) -> i64 {
        be_i64(self.buf, OFF_STORE_TIMESTAMP)
    }
    pub fn store_host(&self) -> SocketAddrV4 {
        host_at(self.buf, OFF_STORE_HOST)
    }
    pub fn reconsume_times(&self) -> i32 {
        be_i32(self.buf, OFF_RECONSUME_TIMES)
    }
    pub fn body(&self) -> &'a [u8] {
        &self.buf[self.body_start..self.body_start + self.body_len]
    }
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// Raw properties string, the CRC trailer included.
    pub fn properties_raw(&self) -> &'a [u8] {
        &self.buf[self.props_start..self.props_start + self.props_len]
    }
    pub fn properties(&self) -> Properties<'a> {
        Properties::new(self.properties_raw())
    }
    pub fn property(&self, key: &str) -> Option<&'a str> {
        self.properties().get(key)
    }
    pub fn tags(&self) -> Option<&'a str> {
        self.property(prop::TAGS)
    }
    /// TAGS, KEYS and UNIQ_KEY found in one pass over the properties: the same values as
    /// [`RecordView::tags`], [`RecordView::keys`] and [`RecordView::uniq_key`].
    pub fn indexed_properties(&self) -> IndexedProperties<'a> {
        let raw = self.properties_raw();
        // `parse` checked the CRC trailer is there. When it is an entry of its own (the
        // byte before it ends an entry, and its digits hold no separator) it names none of
        // the indexed keys, so the scan can stop before it: same result, fewer bytes.
        let rest = raw.len() - CRC_TRAILER_BYTES;
        let digits = &raw[rest + CRC_TRAILER_PREFIX.len()..raw.len() - 1];
        if (rest == 0 || raw[rest - 1] == 2) && !digits.iter().any(|&b| b == 1 || b == 2) {
            IndexedProperties::scan(&raw[..rest])
        } else {
            IndexedProperties::scan(raw)
        }
    }
    /// The business keys (KEYS is space separated).
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.property(prop::KEYS)
            .unwrap_or("")
            .split(' ')
            .filter(|k| !k.is_empty())
    }
    pub fn uniq_key(&self) -> Option<&'a str> {
        self.properties().uniq_key()
    }
    /// The ConsumeQueue tag code of this record.
    pub fn tag_hash(&self) -> i64 {
        self.tags().map(tag_hash).unwrap_or(0)
    }
}

impl fmt::Debug for RecordView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordView")
            .field("len", &self.len())
            .field("topic", &self.topic())
            .field("queue_id", &self.queue_id())
            .field("queue_offset", &self.queue_offset())
            .field("physical_offset", &self.physical_offset())
            .field("tags", &self.tags())
            .field("body_len", &self.body_len)
            .finish()
    }
}

/// Iterates over the records laid back to back in `buf` (a pull body or a send batch),
/// validating each one's structure. Stops at the first error.
pub fn records(buf: &[u8]) -> RecordIter<'_> {
    RecordIter { buf, failed: false }
}

pub struct RecordIter<'a> {
    buf: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordView<'a>, RecordError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() || self.failed {
            return None;
        }
        match RecordView::parse(self.buf) {
            Ok(view) => {
                self.buf = &self.buf[view.len()..];
                Some(Ok(view))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Java's `String.hashCode` of a tag (UTF-16 code units, wrapping i32), sign-extended: the
/// ConsumeQueue tag code, compatible with RocketMQ clients' subscription code sets.
pub fn tag_hash(tag: &str) -> i64 {
    java_hash_continue(0, tag) as i64
}

/// Java's `String.hashCode` stepped over `s` from state `h` (so the hash of a concatenation
/// continues from the hash of its first part): over UTF-16 code units, which for ASCII are
/// the bytes themselves (the common case, without decoding).
pub fn java_hash_continue(mut h: i32, s: &str) -> i32 {
    if s.is_ascii() {
        // Four bytes a step: h·31⁴ + b0·31³ + b1·31² + b2·31 + b3, the same wrapping sum as
        // four single steps, with the products independent of each other instead of one
        // chain of dependent multiplies (a 32-character UNIQ_KEY hashes in half the time).
        const P2: i32 = 31 * 31;
        const P3: i32 = 31 * 31 * 31;
        const P4: i32 = 31 * 31 * 31 * 31;
        let mut quads = s.as_bytes().chunks_exact(4);
        for q in &mut quads {
            h = h
                .wrapping_mul(P4)
                .wrapping_add((q[0] as i32).wrapping_mul(P3))
                .wrapping_add((q[1] as i32).wrapping_mul(P2))
                .wrapping_add((q[2] as i32).wrapping_mul(31))
                .wrapping_add(q[3] as i32);
        }
        for &b in quads.remainder() {
            h = h.wrapping_mul(31).wrapping_add(b as i32);
        }
    } else {
        for unit in s.encode_utf16() {
            h = h.wrapping_mul(31).wrapping_add(unit as i32);
        }
    }
    h
}

/// A parsed tag expression: `*` (or empty) matches everything, `TagA || TagB` matches any of
/// the named tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagFilter {
    All,
    Tags(Vec<String>),
}

impl TagFilter {
    pub fn parse(expr: &str) -> TagFilter {
        let expr = expr.trim();
        if expr.is_empty() || expr == "*" {
            return TagFilter::All;
        }
        let tags: Vec<String> = expr
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if tags.is_empty() {
            TagFilter::All
        } else {
            TagFilter::Tags(tags)
        }
    }

    /// The tag codes a ConsumeQueue entry must carry to possibly match (hash collisions are
    /// possible, so the real tag string is checked afterwards with [`TagFilter::matches`]).
    pub fn codes(&self) -> Option<Vec<i64>> {
        match self {
            TagFilter::All => None,
            TagFilter::Tags(tags) => Some(tags.iter().map(|t| tag_hash(t)).collect()),
        }
    }

    pub fn matches_code(&self, code: i64) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags(tags) => tags.iter().any(|t| tag_hash(t) == code),
        }
    }

    pub fn matches(&self, tag: Option<&str>) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags(tags) => tag.is_some_and(|t| tags.iter().any(|x| x == t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(body: &[u8]) -> Vec<u8> {
        let props = [("TAGS", "TagA"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "ABC")];
        let fields = MessageFields {
            topic: "TopicTest",
            body,
            flag: 7,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: Some("10.0.0.1:4000".parse().unwrap()),
            properties: &props,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_record(&fields, &mut out).unwrap();
        assert_eq!(out.len(), encoded_len(&fields));
        out
    }

    fn stamp() -> StoreStamp {
        StoreStamp {
            queue_id: 3,
            queue_offset: 42,
            physical_offset: 4096,
            store_timestamp_ms: 1_700_000_000_500,
            store_host: "127.0.0.1:10911".parse().unwrap(),
        }
    }

    #[test]
    fn encode_stamp_parse_round_trip() {
        let mut rec = sample(b"hello world");
        stamp_record(&mut rec, &stamp()).unwrap();
        let v = RecordView::parse(&rec).unwrap();
        v.verify_crc().unwrap();
        assert_eq!(v.topic(), "TopicTest");
        assert_eq!(v.body(), b"hello world");
        assert_eq!(v.queue_id(), 3);
        assert_eq!(v.queue_offset(), 42);
        assert_eq!(v.physical_offset(), 4096);
        assert_eq!(v.flag(), 7);
        assert_eq!(v.tags(), Some("TagA"));
        assert_eq!(v.keys().collect::<Vec<_>>(), vec!["k1", "k2"]);
        assert_eq!(v.uniq_key(), Some("ABC"));
        assert_eq!(v.store_host().port(), 10911);
        assert_eq!(v.born_host().to_string(), "10.0.0.1:4000");
        assert_eq!(v.body_crc(), crc32fast::hash(b"hello world"));
        assert_eq!(peek_record(&rec), Peek::Record(rec.len()));
    }

    #[test]
    fn copy_stamped_equals_stamp_record_in_place() {
        let rec = sample(b"copy me");
        let view = RecordView::parse(&rec).unwrap();
        let mut expected = rec.clone();
        stamp_record(&mut expected, &stamp()).unwrap();
        let mut dst = vec![0xeeu8; rec.len() + 5];
        let copy = view.copy_stamped(&mut dst, &stamp()).unwrap();
        copy.verify_crc().unwrap();
        assert_eq!(copy.as_bytes(), &expected[..]);
        assert_eq!(copy.topic(), "TopicTest");
        assert_eq!(copy.body(), b"copy me");
        let p = copy.indexed_properties();
        assert_eq!(p.tags, Some("TagA"));
        assert_eq!(p.index_keys().collect::<Vec<_>>(), vec!["k1", "k2", "ABC"]);
        assert_eq!(p.tag_hash(), copy.tag_hash());
        assert_eq!(&dst[rec.len()..], &[0xee; 5]);
        let mut short = vec![0u8; rec.len() - 1];
        assert!(matches!(
            view.copy_stamped(&mut short, &stamp()),
            Err(RecordError::Truncated { .. })
        ));
    }

    /// A record with hand-made properties (before the trailer) and CRC digits.
    fn raw_record(props: &[u8], digits: &[u8; 8]) -> Vec<u8> {
        let mut rec = sample(b"b");
        let view = RecordView::parse(&rec).unwrap();
        let props_at = view.props_start;
        rec.truncate(props_at - 2);
        let len = props.len() + CRC_TRAILER_BYTES;
        rec.extend_from_slice(&(len as i16).to_be_bytes());
        rec.extend_from_slice(props);
        rec.extend_from_slice(CRC_TRAILER_PREFIX);
        rec.extend_from_slice(digits);
        rec.push(2);
        let total = rec.len() as i32;
        rec[0..4].copy_from_slice(&total.to_be_bytes());
        rec
    }

    #[test]
    fn indexed_properties_after_stamp_match_the_stamped_record() {
        let cases: &[(&[u8], &[u8; 8])] = &[
            (b"TAGS\x01TagA\x02KEYS\x01k\x02", b"00000000"),
            (b"TAGS\x01TagA\x02KEYS\x01k", b"00000000"),
            (b"KEYS\x01k1 k2\x02UNIQ_KEY\x01u", b"0123abcd"),
            (b"", b"\x02TAGS\x01xy"),
            (b"TAGS\x01t\x02", b"\x02KEYS\x01ab"),
            (b"TAGS\x01", b"\xff0000000"[..8].try_into().unwrap()),
            (b"UNIQ_KEY\x01", b"00000000"),
            (
                b"TAGS\x01\xff\x02TAGS\x01",
                b"\x01\x01\x01\x01\x01\x01\x01\x01",
            ),
        ];
        for (props, digits) in cases {
            let rec = raw_record(props, digits);
            let view = RecordView::parse(&rec).unwrap();
            // Before stamping too, odd digits included, the scan agrees with `get`.
            let before = IndexedProperties {
                tags: view.tags(),
                keys: view.property(prop::KEYS),
                uniq_key: view.uniq_key(),
                timer: false,
            };
            assert_eq!(view.indexed_properties(), before, "{props:?} {digits:?}");
            let mut stored = vec![0u8; rec.len()];
            view.write_stamped(&mut stored, &stamp()).unwrap();
            let mut in_place = rec.clone();
            stamp_record(&mut in_place, &stamp()).unwrap();
            assert_eq!(stored, in_place);
            let after = RecordView::parse(&stored).unwrap();
            after.verify_crc().unwrap();
            let truth = IndexedProperties {
                tags: after.tags(),
                keys: after.property(prop::KEYS),
                uniq_key: after.uniq_key(),
                timer: false,
            };
            assert_eq!(after.indexed_properties(), truth, "{props:?} {digits:?}");
            if let Some(p) = view.indexed_properties_after_stamp() {
                assert_eq!(p, truth, "{props:?} {digits:?}");
            }
        }
        // The clean case takes the fast path.
        let rec = sample(b"x");
        let p = RecordView::parse(&rec)
            .unwrap()
            .indexed_properties_after_stamp()
            .unwrap();
        assert_eq!(p.tags, Some("TagA"));
        // A value running into the digits does not.
        let rec = raw_record(b"TAGS\x01t", b"00000000");
        let view = RecordView::parse(&rec).unwrap();
        assert_eq!(view.indexed_properties_after_stamp(), None);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut rec = sample(b"payload");
        stamp_record(&mut rec, &stamp()).unwrap();
        for byte in 0..rec.len() {
            for bit in 0..8 {
                let mut bad = rec.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    !matches!(peek_record(&bad), Peek::Record(n) if n == rec.len()),
                    "flip of bit {bit} in byte {byte} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn truncated_record_is_invalid() {
        let mut rec = sample(b"payload");
        stamp_record(&mut rec, &stamp()).unwrap();
        for cut in 0..rec.len() {
            assert_eq!(peek_record(&rec[..cut]), Peek::Invalid, "cut at {cut}");
        }
    }

    #[test]
    fn blank_filler_is_recognised() {
        let mut buf = vec![0xffu8; 64];
        write_blank(&mut buf);
        assert_eq!(peek_record(&buf), Peek::Blank(64));
        assert_eq!(peek_record(&[0u8; 64]), Peek::Invalid);
    }

    #[test]
    fn java_string_hash_code() {
        assert_eq!(tag_hash(""), 0);
        assert_eq!(tag_hash("TagA"), 2598919);
        // "hello world".hashCode() in Java.
        assert_eq!(tag_hash("hello world"), 1794106052);
        // Non-ASCII goes by UTF-16 units: é is 233, 🙂 the surrogates 0xD83D 0xDE42.
        assert_eq!(tag_hash("é🙂"), (233 * 31 + 0xD83D) * 31 + 0xDE42);
        // A concatenation's hash continues from its first part's.
        assert_eq!(
            java_hash_continue(tag_hash("ab") as i32, "é🙂") as i64,
            tag_hash("abé🙂")
        );
        // Every length and starting state agrees with one step per character.
        let text = "UNIQ_KEY 7F000001A1B2C3D4E5F60718293A4B5C~!";
        for len in 0..=text.len() {
            for h0 in [0, 1, -7, i32::MAX, i32::MIN] {
                let slow = text[..len]
                    .bytes()
                    .fold(h0, |h, b| h.wrapping_mul(31).wrapping_add(b as i32));
                assert_eq!(java_hash_continue(h0, &text[..len]), slow, "{len} {h0}");
            }
        }
        // Overflows wrap like Java's int arithmetic.
        assert_eq!(tag_hash("a fairly long tag that overflows"), {
            let mut h: i32 = 0;
            for c in "a fairly long tag that overflows".chars() {
                h = h.wrapping_mul(31).wrapping_add(c as i32);
            }
            h as i64
        });
    }

    #[test]
    fn tag_filter_expressions() {
        assert_eq!(TagFilter::parse("*"), TagFilter::All);
        let f = TagFilter::parse("TagA || TagB");
        assert!(f.matches(Some("TagA")));
        assert!(f.matches(Some("TagB")));
        assert!(!f.matches(Some("TagC")));
        assert!(!f.matches(None));
        assert!(f.matches_code(tag_hash("TagB")));
        assert!(!f.matches_code(tag_hash("TagC")));
    }

    #[test]
    fn record_iterator_walks_a_batch() {
        let mut batch = sample(b"one");
        batch.extend(sample(b"two"));
        let bodies: Vec<_> = records(&batch)
            .map(|r| r.unwrap().body().to_vec())
            .collect();
        assert_eq!(bodies, vec![b"one".to_vec(), b"two".to_vec()]);
        let mut broken = batch.clone();
        broken.truncate(batch.len() - 3);
        let results: Vec<_> = records(&broken).collect();
        assert!(results[0].is_ok());
        assert!(results[1].is_err());
    }

    #[test]
    fn separators_in_properties_are_refused() {
        let props = [("K", "bad\u{1}value")];
        let fields = MessageFields {
            topic: "T",
            properties: &props,
            ..Default::default()
        };
        assert_eq!(
            encode_record(&fields, &mut Vec::new()),
            Err(RecordError::PropertySeparator)
        );
    }
}
