//! Message helpers: properties strings, SEND_BATCH_MESSAGE bodies, the stored record layout
//! of pull/view/query answers, offset message ids, tag hash codes, and the flag constants.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes};

use crate::codec::Reader;
use crate::{RemotingError, Result};

/// `MessageSysFlag`: bits of a message's `sysFlag`.
pub mod sys_flag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x1 << 1;
    pub const TRANSACTION_NOT_TYPE: i32 = 0;
    pub const TRANSACTION_PREPARED_TYPE: i32 = 0x1 << 2;
    pub const TRANSACTION_COMMIT_TYPE: i32 = 0x2 << 2;
    pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0x3 << 2;
    pub const BORNHOST_V6: i32 = 0x1 << 4;
    pub const STOREHOST_V6: i32 = 0x1 << 5;
    pub const NEED_UNWRAP: i32 = 0x1 << 6;
    pub const INNER_BATCH: i32 = 0x1 << 7;
    /// 5.x compression type, bits 8-10 (older clients and C++ 1.x assume zlib).
    pub const COMPRESSION_LZ4_TYPE: i32 = 0x1 << 8;
    pub const COMPRESSION_ZSTD_TYPE: i32 = 0x2 << 8;
    pub const COMPRESSION_ZLIB_TYPE: i32 = 0x3 << 8;
    pub const COMPRESSION_TYPE_MASK: i32 = 0x7 << 8;

    /// The transaction bits (`TRANSACTION_*_TYPE`) of a sysFlag.
    pub fn transaction_value(flag: i32) -> i32 {
        flag & TRANSACTION_ROLLBACK_TYPE
    }
}

/// `PullSysFlag`: bits of a pull request's `sysFlag`.
pub mod pull_sys_flag {
    pub const COMMIT_OFFSET: i32 = 0x1;
    pub const SUSPEND: i32 = 0x1 << 1;
    pub const SUBSCRIPTION: i32 = 0x1 << 2;
    pub const CLASS_FILTER: i32 = 0x1 << 3;
    pub const LITE_PULL: i32 = 0x1 << 4;
}

/// `MessageConst` property names.
pub mod property {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const WAIT_STORE_MSG_OK: &str = "WAIT";
    pub const DELAY_TIME_LEVEL: &str = "DELAY";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QUEUE_ID: &str = "REAL_QID";
    pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_SWITCH: &str = "TRACE_ON";
    pub const UNIQ_CLIENT_MESSAGE_ID_KEYIDX: &str = "UNIQ_KEY";
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    pub const CONSUME_START_TIMESTAMP: &str = "CONSUME_START_TIME";
    pub const TRANSACTION_ID: &str = "__transactionId__";
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const CLUSTER: &str = "CLUSTER";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const BORN_HOST: &str = "__BORNHOST";
    /// `KEYS` holds several keys separated by this.
    pub const KEY_SEPARATOR: &str = " ";
}

/// Separates a property's name from its value.
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
/// Ends each property.
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Magic code of a stored record in the V1 layout (`0xAABBCCDD ^ 1880681586 + 8` in Java).
pub const MESSAGE_MAGIC_CODE_V1: i32 = -626_843_481;
/// Magic code of the V2 layout (2-byte topic length).
pub const MESSAGE_MAGIC_CODE_V2: i32 = -626_843_477;
/// Magic code of the blank filler at a commit-log file's end.
pub const BLANK_MAGIC_CODE: i32 = -875_286_124;

// ---------------------------------------------------------------------------------------------
// Properties

/// `name\u0001value\u0002` for each pair, in order.
pub fn encode_properties<'a>(props: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = String::new();
    for (k, v) in props {
        s.push_str(k);
        s.push(NAME_VALUE_SEPARATOR);
        s.push_str(v);
        s.push(PROPERTY_SEPARATOR);
    }
    s
}

/// The pairs of a properties string, in order, read as Java's
/// `MessageDecoder.string2messageProperties` does: an item is kept only when it splits into
/// exactly a name and a non-empty value (Java's `split` drops trailing empty parts).
pub fn decode_properties(s: &str) -> Vec<(String, String)> {
    properties_of(s)
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The properties of `s` as [`decode_properties`] reads them, borrowed from `s`.
pub fn properties_of(s: &str) -> impl Iterator<Item = (&str, &str)> {
    s.split(PROPERTY_SEPARATOR).filter_map(|item| {
        // `name\x01value`, trailing separators ignored; anything else is no property.
        let mut parts = item.split(NAME_VALUE_SEPARATOR);
        let k = parts.next()?;
        let v = parts.next()?;
        (!v.is_empty() && parts.all(str::is_empty)).then_some((k, v))
    })
}

/// One property's value.
pub fn property<'a>(props: &'a [(String, String)], name: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

// ---------------------------------------------------------------------------------------------
// Batch bodies (SEND_BATCH_MESSAGE)

/// One message of a SEND_BATCH_MESSAGE body (Java `MessageDecoder.encodeMessage`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchMessage {
    pub flag: i32,
    pub body: Bytes,
    pub properties: String,
}

/// TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN, PROPLEN.
const BATCH_RECORD_FIXED_BYTES: usize = 4 + 4 + 4 + 4 + 4 + 2;

/// Splits a batch body into its messages. Bodies are slices of `body`, not copies. Every
/// length is checked against the record and the record against what is left.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchMessage>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let rest = &body[pos..];
        let mut r = Reader::new(rest, "batch record");
        let total = r.len_i32("batch record size")?;
        if total < BATCH_RECORD_FIXED_BYTES || total > rest.len() {
            return Err(RemotingError::BadLength {
                what: "batch record size",
                len: total as i64,
            });
        }
        let mut r = Reader::new(&rest[4..total], "batch record");
        let _magic = r.i32()?;
        let _body_crc = r.i32()?;
        let flag = r.i32()?;
        let body_len = r.len_i32("batch message body")?;
        let body_start = pos + 4 + 16;
        r.take(body_len)?;
        let props_len = r.len_i16("batch message properties")?;
        let properties = r.string(props_len, "batch message properties")?;
        if r.remaining() != 0 {
            return Err(RemotingError::TrailingBytes {
                what: "batch record",
                len: r.remaining(),
            });
        }
        out.push(BatchMessage {
            flag,
            body: body.slice(body_start..body_start + body_len),
            properties,
        });
        pos += total;
    }
    Ok(out)
}

/// Writes a batch body as the Java client does (magic and CRC 0).
pub fn encode_batch(messages: &[BatchMessage]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for m in messages {
        let props_len =
            i16::try_from(m.properties.len()).map_err(|_| RemotingError::OutOfRange {
                what: "batch message properties length",
                value: m.properties.len() as i64,
            })?;
        let total = BATCH_RECORD_FIXED_BYTES + m.body.len() + m.properties.len();
        let total = i32::try_from(total).map_err(|_| RemotingError::OutOfRange {
            what: "batch record size",
            value: total as i64,
        })?;
        out.put_i32(total);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(m.flag);
        out.put_i32(m.body.len() as i32);
        out.extend_from_slice(&m.body);
        out.put_i16(props_len);
        out.extend_from_slice(m.properties.as_bytes());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Stored records (pull, view and query answers)

/// A message in the layout clients decode from pull, VIEW_MESSAGE_BY_ID and QUERY_MESSAGE
/// bodies (Java `MessageExtEncoder`/`MessageDecoder`, V1: 1-byte topic length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    /// The commit-log offset: what the offset msgId and VIEW_MESSAGE_BY_ID name.
    pub physical_offset: i64,
    /// [`sys_flag`] bits. The host V6 bits are set by the encoder from the addresses.
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    pub topic: String,
    pub properties: String,
}

impl StoredMessage {
    /// The offset msgId clients compute for this record.
    pub fn offset_msg_id(&self) -> String {
        encode_offset_msg_id(self.store_host, self.physical_offset)
    }
}

fn put_host(out: &mut impl BufMut, host: SocketAddr) {
    match host.ip() {
        IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.put_i32(host.port() as i32);
}

fn read_host(r: &mut Reader<'_>, v6: bool) -> Result<SocketAddr> {
    let ip = if v6 {
        let mut o = [0u8; 16];
        o.copy_from_slice(r.take(16)?);
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        let mut o = [0u8; 4];
        o.copy_from_slice(r.take(4)?);
        IpAddr::V4(Ipv4Addr::from(o))
    };
    let port = r.i32()?;
    let port = u16::try_from(port).map_err(|_| RemotingError::BadLength {
        what: "host port",
        len: port as i64,
    })?;
    Ok(SocketAddr::new(ip, port))
}

/// Appends `m` in the V1 stored layout. The topic must fit in 127 bytes (C++ 1.x reads the
/// length signed) and the properties in 32767.
pub fn encode_stored(m: &StoredMessage, out: &mut Vec<u8>) -> Result<()> {
    let topic_len = u8::try_from(m.topic.len())
        .ok()
        .filter(|l| *l <= 127)
        .ok_or(RemotingError::OutOfRange {
            what: "topic length",
            value: m.topic.len() as i64,
        })?;
    let props_len = i16::try_from(m.properties.len()).map_err(|_| RemotingError::OutOfRange {
        what: "properties length",
        value: m.properties.len() as i64,
    })?;
    let mut sys_flag = m.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    let host_len = |h: SocketAddr, bit: i32, flag: &mut i32| {
        if h.is_ipv6() {
            *flag |= bit;
            20
        } else {
            8
        }
    };
    let born_len = host_len(m.born_host, sys_flag::BORNHOST_V6, &mut sys_flag);
    let store_len = host_len(m.store_host, sys_flag::STOREHOST_V6, &mut sys_flag);
    let total = 4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born_len
        + 8
        + store_len
        + 4
        + 8
        + 4
        + m.body.len()
        + 1
        + m.topic.len()
        + 2
        + m.properties.len();
    let total = i32::try_from(total).map_err(|_| RemotingError::OutOfRange {
        what: "stored record size",
        value: total as i64,
    })?;
    out.reserve(total as usize);
    out.put_i32(total);
    out.put_i32(MESSAGE_MAGIC_CODE_V1);
    out.put_i32(m.body_crc);
    out.put_i32(m.queue_id);
    out.put_i32(m.flag);
    out.put_i64(m.queue_offset);
    out.put_i64(m.physical_offset);
    out.put_i32(sys_flag);
    out.put_i64(m.born_timestamp);
    put_host(out, m.born_host);
    out.put_i64(m.store_timestamp);
    put_host(out, m.store_host);
    out.put_i32(m.reconsume_times);
    out.put_i64(m.prepared_transaction_offset);
    out.put_i32(m.body.len() as i32);
    out.extend_from_slice(&m.body);
    out.put_u8(topic_len);
    out.extend_from_slice(m.topic.as_bytes());
    out.put_i16(props_len);
    out.extend_from_slice(m.properties.as_bytes());
    Ok(())
}

/// Decodes back-to-back stored records (V1 or V2 magic). Bodies are slices of `data`.
pub fn decode_stored(data: &Bytes) -> Result<Vec<StoredMessage>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        let total = Reader::new(rest, "stored record").len_i32("stored record size")?;
        if total < 8 || total > rest.len() {
            return Err(RemotingError::BadLength {
                what: "stored record size",
                len: total as i64,
            });
        }
        let record = &rest[..total];
        let mut r = Reader::new(&record[4..], "stored record");
        let magic = r.i32()?;
        if magic != MESSAGE_MAGIC_CODE_V1 && magic != MESSAGE_MAGIC_CODE_V2 {
            return Err(RemotingError::BadLength {
                what: "stored record magic code",
                len: magic as i64,
            });
        }
        let body_crc = r.i32()?;
        let queue_id = r.i32()?;
        let flag = r.i32()?;
        let queue_offset = r.i64()?;
        let physical_offset = r.i64()?;
        let sys_flag = r.i32()?;
        let born_timestamp = r.i64()?;
        let born_host = read_host(&mut r, sys_flag & sys_flag::BORNHOST_V6 != 0)?;
        let store_timestamp = r.i64()?;
        let store_host = read_host(&mut r, sys_flag & sys_flag::STOREHOST_V6 != 0)?;
        let reconsume_times = r.i32()?;
        let prepared_transaction_offset = r.i64()?;
        let body_len = r.len_i32("stored body")?;
        let body_start = pos + total - r.remaining();
        r.take(body_len)?;
        let topic_len = if magic == MESSAGE_MAGIC_CODE_V2 {
            r.len_i16("stored topic")?
        } else {
            r.u8()? as usize
        };
        let topic = r.string(topic_len, "stored topic")?;
        let props_len = r.len_i16("stored properties")?;
        let properties = r.string(props_len, "stored properties")?;
        if r.remaining() != 0 {
            return Err(RemotingError::TrailingBytes {
                what: "stored record",
                len: r.remaining(),
            });
        }
        out.push(StoredMessage {
            body_crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body: data.slice(body_start..body_start + body_len),
            topic,
            properties,
        });
        pos += total;
    }
    Ok(out)
}

/// Java `UtilAll.crc32`: CRC-32 (IEEE) of the body, masked to a non-negative i32.
pub fn body_crc32(body: &[u8]) -> i32 {
    let mut crc = !0u32;
    for &b in body {
        crc = CRC32_TABLE[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    (!crc & 0x7FFF_FFFF) as i32
}

const CRC32_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

// ---------------------------------------------------------------------------------------------
// Offset message ids

/// The offset msgId of a stored message: hex (upper case, as Java's `UtilAll.bytes2string`) of
/// the store host's IP, its port as 4 bytes and the commit-log offset as 8: 32 characters
/// for IPv4, 56 for IPv6.
pub fn encode_offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut s = String::with_capacity(OFFSET_MSG_ID_V6_CHARS);
    push_offset_msg_id(&mut s, store_host, commit_log_offset);
    s
}

/// Characters of an IPv6 store host's offset msgId (an IPv4 one's are 32).
pub const OFFSET_MSG_ID_V6_CHARS: usize = 56;

/// [`encode_offset_msg_id`] appended to `out`: a batch's ids go into one string.
pub fn push_offset_msg_id(out: &mut String, store_host: SocketAddr, commit_log_offset: i64) {
    let mut bytes = [0u8; 28];
    let mut rest = &mut bytes[..];
    put_host(&mut rest, store_host);
    rest.put_i64(commit_log_offset);
    let len = 28 - rest.len();
    for b in &bytes[..len] {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xF) as usize] as char);
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The store host and commit-log offset an offset msgId names (either case accepted).
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64)> {
    let bad = || RemotingError::BadMessageId(id.chars().take(64).collect());
    let v6 = match id.len() {
        32 => false,
        56 => true,
        _ => return Err(bad()),
    };
    let raw = id.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len() / 2);
    for pair in raw.chunks_exact(2) {
        let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
        let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
        bytes.push((hi << 4 | lo) as u8);
    }
    let mut r = Reader::new(&bytes, "message id");
    let host = read_host(&mut r, v6).map_err(|_| bad())?;
    let offset = r.i64().map_err(|_| bad())?;
    Ok((host, offset))
}

// ---------------------------------------------------------------------------------------------
// Tags

/// Java `String.hashCode`: over UTF-16 code units, `h = 31 * h + unit`, wrapping in i32.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// The ConsumeQueue tag code of a tag: its Java hash, sign-extended to i64.
pub fn tag_hash_code(tag: &str) -> i64 {
    java_string_hash(tag) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_codes() {
        // Values printed by a JVM (`"TagA".hashCode()` etc.).
        assert_eq!(tag_hash_code("TagA"), 2_598_919);
        assert_eq!(tag_hash_code("TagB"), 2_598_920);
        assert_eq!(tag_hash_code(""), 0);
        assert_eq!(tag_hash_code("hello"), 99_162_322);
        assert_eq!(tag_hash_code("*"), 42);
        assert_eq!(tag_hash_code("中文"), 646_394);
        // Wrapping: a long string overflows i32 and stays sign-extended.
        assert_eq!(
            tag_hash_code("a long tag that overflows the hash"),
            -1_760_683_334
        );
        // A non-BMP character counts as two UTF-16 units: 😀 is D83D DE00.
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn properties_round_trip_and_java_quirks() {
        let s = encode_properties([("TAGS", "TagA"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "ABC")]);
        assert_eq!(
            s,
            "TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}ABC\u{2}"
        );
        let p = decode_properties(&s);
        assert_eq!(p.len(), 3);
        assert_eq!(property(&p, property::KEYS), Some("k1 k2"));
        assert_eq!(property(&p, property::TAGS), Some("TagA"));
        // Java drops items with an empty value or without a separator, keeps an empty name.
        let p = decode_properties("A\u{1}\u{2}B\u{2}\u{1}v\u{2}C\u{1}x\u{1}y\u{2}D\u{1}d");
        assert_eq!(p, vec![("".into(), "v".into()), ("D".into(), "d".into())]);
        assert!(decode_properties("").is_empty());
    }

    #[test]
    fn batch_body_bytes_follow_the_layout() {
        let wire: Vec<u8> = vec![
            0x00, 0x00, 0x00, 0x1D, // TOTALSIZE 29 = 22 + 2 + 5
            0x00, 0x00, 0x00, 0x00, // MAGICCODE
            0x00, 0x00, 0x00, 0x00, // BODYCRC
            0x00, 0x00, 0x00, 0x07, // FLAG
            0x00, 0x00, 0x00, 0x02, b'h', b'i', // BODYLEN + body
            0x00, 0x05, b'T', b'A', b'G', b'S', 0x01, // PROPLEN + properties (cut short)
        ];
        // The properties above are 5 bytes: "TAGS\x01".
        let body = Bytes::from(wire.clone());
        let msgs = decode_batch(&body).unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].flag, 7);
        assert_eq!(&msgs[0].body[..], b"hi");
        assert_eq!(msgs[0].properties, "TAGS\u{1}");
        assert_eq!(encode_batch(&msgs).unwrap(), wire);
    }

    #[test]
    fn batch_round_trip_and_damage() {
        let msgs = vec![
            BatchMessage {
                flag: 0,
                body: Bytes::from_static(b"first"),
                properties: encode_properties([("TAGS", "A")]),
            },
            BatchMessage {
                flag: 1,
                body: Bytes::new(),
                properties: String::new(),
            },
        ];
        let wire = Bytes::from(encode_batch(&msgs).unwrap());
        assert_eq!(decode_batch(&wire).unwrap(), msgs);
        assert!(decode_batch(&Bytes::new()).unwrap().is_empty());
        let first_len = encode_batch(&msgs[..1]).unwrap().len();
        for n in 1..wire.len() {
            if n == first_len {
                assert_eq!(decode_batch(&wire.slice(..n)).unwrap().len(), 1);
                continue;
            }
            assert!(decode_batch(&wire.slice(..n)).is_err(), "prefix {n}");
        }
        // A body length that runs past its record.
        let mut bad = wire.to_vec();
        bad[16..20].copy_from_slice(&100i32.to_be_bytes());
        assert!(decode_batch(&Bytes::from(bad)).is_err());
        // A record size larger than the body, and one below the fixed part.
        let mut bad = wire.to_vec();
        bad[0..4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_batch(&Bytes::from(bad)).is_err());
        let mut bad = wire.to_vec();
        bad[0..4].copy_from_slice(&4i32.to_be_bytes());
        assert!(decode_batch(&Bytes::from(bad)).is_err());
    }

    fn stored(v6: bool) -> StoredMessage {
        let host: SocketAddr = if v6 {
            "[::1]:10911".parse().unwrap()
        } else {
            "127.0.0.1:10911".parse().unwrap()
        };
        StoredMessage {
            body_crc: body_crc32(b"hello"),
            queue_id: 3,
            flag: 0,
            queue_offset: 17,
            physical_offset: 4096,
            sys_flag: sys_flag::MULTI_TAGS,
            born_timestamp: 1_700_000_000_000,
            born_host: "10.0.0.2:50000".parse().unwrap(),
            store_timestamp: 1_700_000_000_005,
            store_host: host,
            reconsume_times: 1,
            prepared_transaction_offset: 0,
            body: Bytes::from_static(b"hello"),
            topic: "TopicTest".into(),
            properties: encode_properties([("TAGS", "TagA")]),
        }
    }

    #[test]
    fn stored_record_positions_match_java() {
        let m = stored(false);
        let mut out = Vec::new();
        encode_stored(&m, &mut out).unwrap();
        // MessageDecoder: magic at 4, flag at 16, physical offset at 28, store timestamp at 56,
        // body length at 84 (BODY_SIZE_POSITION).
        assert_eq!(out[4..8], MESSAGE_MAGIC_CODE_V1.to_be_bytes());
        assert_eq!(out[28..36], 4096i64.to_be_bytes());
        assert_eq!(out[56..64], 1_700_000_000_005i64.to_be_bytes());
        assert_eq!(out[64..68], [127, 0, 0, 1]);
        assert_eq!(out[68..72], 10911i32.to_be_bytes());
        assert_eq!(out[84..88], 5i32.to_be_bytes());
        assert_eq!(out[88..93], *b"hello");
        assert_eq!(out[93], 9);
        assert_eq!(out.len(), 93 + 1 + 9 + 2 + m.properties.len());
        assert_eq!(out[0..4], (out.len() as i32).to_be_bytes());
        let back = decode_stored(&Bytes::from(out)).unwrap();
        assert_eq!(back, vec![m.clone()]);
        assert_eq!(back[0].offset_msg_id(), "7F00000100002A9F0000000000001000");
    }

    #[test]
    fn stored_records_round_trip_and_damage() {
        let mut out = Vec::new();
        encode_stored(&stored(false), &mut out).unwrap();
        encode_stored(&stored(true), &mut out).unwrap();
        let data = Bytes::from(out);
        let back = decode_stored(&data).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].store_host, stored(true).store_host);
        assert_eq!(
            back[1].sys_flag & sys_flag::STOREHOST_V6,
            sys_flag::STOREHOST_V6
        );
        assert_eq!(back[1].sys_flag & sys_flag::BORNHOST_V6, 0);
        for n in 1..data.len() {
            if n == back_len(&back[0]) {
                continue;
            }
            assert!(decode_stored(&data.slice(..n)).is_err(), "prefix {n}");
        }
        let mut long_topic = stored(false);
        long_topic.topic = "t".repeat(128);
        assert!(encode_stored(&long_topic, &mut Vec::new()).is_err());
    }

    fn back_len(m: &StoredMessage) -> usize {
        let mut out = Vec::new();
        encode_stored(m, &mut out).unwrap();
        out.len()
    }

    #[test]
    fn crc_matches_java() {
        // java.util.zip.CRC32 of "hello" is 0x3610A686; UtilAll.crc32 masks the sign bit.
        assert_eq!(body_crc32(b"hello"), 0x3610_A686);
        assert_eq!(body_crc32(b""), 0);
    }

    #[test]
    fn offset_msg_ids() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let id = encode_offset_msg_id(host, 0x1234);
        assert_eq!(id, "7F00000100002A9F0000000000001234");
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (host, 0x1234));
        assert_eq!(
            decode_offset_msg_id(&id.to_lowercase()).unwrap(),
            (host, 0x1234)
        );
        let v6: SocketAddr = "[fe80::1]:10911".parse().unwrap();
        let id6 = encode_offset_msg_id(v6, i64::MAX);
        // What rocketmq-common 4.9.8's MessageDecoder.createMessageId returns for the same.
        assert_eq!(
            id6,
            "FE80000000000000000000000000000100002A9F7FFFFFFFFFFFFFFF"
        );
        assert_eq!(decode_offset_msg_id(&id6).unwrap(), (v6, i64::MAX));
        for bad in [
            "",
            "7F0000010000",
            "ZZ00000100002A9F0000000000001234",
            "7F000001FFFFFFFF0000000000001234", // port -1
            "7F0000010000\u{e9}A9F000000000000123",
        ] {
            assert!(decode_offset_msg_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_values() {
        assert_eq!(sys_flag::TRANSACTION_ROLLBACK_TYPE, 0xC);
        assert_eq!(sys_flag::COMPRESSION_ZLIB_TYPE, 0x300);
        assert_eq!(
            sys_flag::transaction_value(0x10D),
            sys_flag::TRANSACTION_ROLLBACK_TYPE
        );
        assert_eq!(pull_sys_flag::LITE_PULL, 0x10);
        assert_eq!(
            MESSAGE_MAGIC_CODE_V1,
            0xAABB_CCDDu32 as i32 ^ (1_880_681_586 + 8)
        );
        assert_eq!(
            MESSAGE_MAGIC_CODE_V2,
            0xAABB_CCDDu32 as i32 ^ (1_880_681_586 + 4)
        );
    }
}
