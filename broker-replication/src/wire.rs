//! The replication stream's frames: `u32 BE length | u8 kind | payload`, big-endian like
//! the stored records. One stream per (shard, slave), between the master core that owns the
//! shard and the slave core that does.
//!
//! ```text
//! HELLO     slave → master   version u16, shard u16, shard_count u16, segment_bytes u64,
//!                            broker_id u64, log min u64, log end u64, broker_name (u16 len),
//!                            epoch history (u32 count, then epoch u32 and start u64 each),
//!                            access key (u16 len; empty: none), nonce (u16 len)
//! CHALLENGE master → slave   nonce (u16 len), proof (u16 len): the master's proof of the
//!                            shared secret over the slave's nonce (see `ha::auth`)
//! PROOF     slave → master   proof (u16 len): the slave's over the master's nonce
//! WELCOME   master → slave   start u64 (where the stream begins: below the slave's end,
//!                            the slave cuts its log back there first), master min u64,
//!                            master end u64, confirm u64, the master's epoch history
//! REDIRECT  master → slave   address (u16 len): the master core that owns the shard
//! REFUSE    master → slave   reason (u16 len); also slave → master, for a master whose
//!                            CHALLENGE proof is wrong
//! DATA      master → slave   start u64, next u64, confirm u64, then whole log units
//! KEEPALIVE master → slave   master end u64, confirm u64
//! ACK       slave → master   safe end u64 (what a crash of the slave keeps), end u64
//! TOPICS    master → slave   count u32, then per topic: name (u16 len), read queues u32,
//!                            write queues u32, perm u32, attribute count u16 and each
//!                            attribute's key and value (u16 len each) (on shard 0's
//!                            stream, at its start and after every topic change: the
//!                            slave's topic table, attributes included, follows)
//! OFFSETS   master → slave   count u32, then per entry: group (u16 len), topic (u16 len),
//!                            queue u32, offset u64, epoch u64: the shard's committed group
//!                            offsets (at the stream's start and after changes, at most
//!                            every heartbeat), so a promoted slave's consumers go on
//!                            where they were
//! AUTH      master → slave   length u32, then ACL 2.0's users and ACLs as the JSON the
//!                            broker stores (`broker_base::auth`; on shard 0's stream, at
//!                            its start and after every change: the slave's set follows)
//! ```

use std::collections::BTreeMap;

use crate::error::FrameError;
use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const VERSION: u16 = 6;
/// The biggest frame either side accepts: a frame is at most one batch, or one record
/// bigger than a batch.
pub const FRAME_BYTES_MAX: usize = 80 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub shard: u16,
    pub shard_count: u16,
    pub segment_bytes: u64,
    pub broker_id: u64,
    pub log_min: u64,
    pub log_end: u64,
    pub broker_name: String,
    pub epochs: Vec<(u32, u64)>,
    /// The slave's `acl_access_key`; empty when it has none.
    pub access_key: String,
    /// The slave's challenge to the master (empty without an access key).
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Welcome {
        start: u64,
        master_min: u64,
        master_end: u64,
        confirm: u64,
        epochs: Vec<(u32, u64)>,
    },
    Redirect(String),
    Refuse(String),
    Data {
        start: u64,
        next: u64,
        confirm: u64,
        bytes: Bytes,
    },
    Keepalive {
        master_end: u64,
        confirm: u64,
    },
    Ack {
        safe: u64,
        end: u64,
    },
    Topics(Vec<TopicRow>),
    Offsets(Vec<OffsetEntry>),
    /// ACL 2.0's users and ACLs, their stored JSON.
    Auth(Vec<u8>),
    Challenge {
        nonce: String,
        proof: String,
    },
    Proof(String),
}

/// One topic of the master's table: its config and its RocketMQ 5 attributes (by key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRow {
    pub config: protocol::TopicConfig,
    pub attributes: BTreeMap<String, String>,
}

/// One committed offset of a group's queue, as the master's shard stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetEntry {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    pub epoch: u64,
}

/// Entries per OFFSETS frame at most (a bigger table goes in several).
pub const OFFSETS_PER_FRAME: usize = 16 * 1024;

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const REDIRECT: u8 = 3;
const REFUSE: u8 = 4;
const DATA: u8 = 5;
const KEEPALIVE: u8 = 6;
const ACK: u8 = 7;
const TOPICS: u8 = 8;
const OFFSETS: u8 = 9;
const CHALLENGE: u8 = 10;
const PROOF: u8 = 11;
const AUTH: u8 = 12;

fn put_epochs(b: &mut BytesMut, epochs: &[(u32, u64)]) {
    b.put_u32(epochs.len() as u32);
    for &(e, start) in epochs {
        b.put_u32(e);
        b.put_u64(start);
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.put_u16(s.len() as u16);
    b.put_slice(s);
}

/// The frame's bytes. DATA's log bytes are not copied: they follow as a second buffer.
pub fn encode(f: &Frame) -> (BytesMut, Option<Bytes>) {
    let mut b = BytesMut::with_capacity(64);
    b.put_u32(0);
    match f {
        Frame::Hello(h) => {
            b.put_u8(HELLO);
            b.put_u16(h.version);
            b.put_u16(h.shard);
            b.put_u16(h.shard_count);
            b.put_u64(h.segment_bytes);
            b.put_u64(h.broker_id);
            b.put_u64(h.log_min);
            b.put_u64(h.log_end);
            put_str(&mut b, &h.broker_name);
            put_epochs(&mut b, &h.epochs);
            put_str(&mut b, &h.access_key);
            put_str(&mut b, &h.nonce);
        }
        Frame::Challenge { nonce, proof } => {
            b.put_u8(CHALLENGE);
            put_str(&mut b, nonce);
            put_str(&mut b, proof);
        }
        Frame::Proof(p) => {
            b.put_u8(PROOF);
            put_str(&mut b, p);
        }
        Frame::Welcome {
            start,
            master_min,
            master_end,
            confirm,
            epochs,
        } => {
            b.put_u8(WELCOME);
            b.put_u64(*start);
            b.put_u64(*master_min);
            b.put_u64(*master_end);
            b.put_u64(*confirm);
            put_epochs(&mut b, epochs);
        }
        Frame::Redirect(a) => {
            b.put_u8(REDIRECT);
            put_str(&mut b, a);
        }
        Frame::Refuse(r) => {
            b.put_u8(REFUSE);
            put_str(&mut b, r);
        }
        Frame::Data {
            start,
            next,
            confirm,
            bytes,
        } => {
            // Written whole by `data_head`, length included.
            let head = data_head(*start, *next, *confirm, bytes.len());
            return (head, Some(bytes.clone()));
        }
        Frame::Keepalive {
            master_end,
            confirm,
        } => {
            b.put_u8(KEEPALIVE);
            b.put_u64(*master_end);
            b.put_u64(*confirm);
        }
        Frame::Ack { safe, end } => {
            b.put_u8(ACK);
            b.put_u64(*safe);
            b.put_u64(*end);
        }
        Frame::Topics(list) => {
            b.put_u8(TOPICS);
            b.put_u32(list.len() as u32);
            for TopicRow {
                config: t,
                attributes,
            } in list
            {
                put_str(&mut b, &t.name);
                b.put_u32(t.read_queues);
                b.put_u32(t.write_queues);
                b.put_u32(t.perm);
                b.put_u16(attributes.len().min(usize::from(u16::MAX)) as u16);
                for (k, v) in attributes.iter().take(usize::from(u16::MAX)) {
                    put_str(&mut b, k);
                    put_str(&mut b, v);
                }
            }
        }
        Frame::Auth(json) => {
            b.put_u8(AUTH);
            b.put_u32(json.len() as u32);
            b.put_slice(json);
        }
        Frame::Offsets(list) => {
            b.put_u8(OFFSETS);
            b.put_u32(list.len() as u32);
            for e in list {
                put_str(&mut b, &e.group);
                put_str(&mut b, &e.topic);
                b.put_u32(e.queue_id);
                b.put_u64(e.offset);
                b.put_u64(e.epoch);
            }
        }
    }
    let len = b.len() - 4;
    b[0..4].copy_from_slice(&(len as u32).to_be_bytes());
    (b, None)
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    let (head, tail) = encode(f);
    w.write_all(&head).await?;
    if let Some(t) = tail {
        w.write_all(&t).await?;
    }
    w.flush().await
}

/// A DATA frame up to its log bytes (`len` of them follow).
fn data_head(start: u64, next: u64, confirm: u64, len: usize) -> BytesMut {
    let mut head = BytesMut::with_capacity(29);
    head.put_u32((1 + 24 + len) as u32);
    head.put_u8(DATA);
    head.put_u64(start);
    head.put_u64(next);
    head.put_u64(confirm);
    head
}

/// Writes a DATA frame whose log bytes are `bytes` (borrowed from the log's memory: no
/// copy before the socket's).
pub async fn write_data<W: AsyncWrite + Unpin>(
    w: &mut W,
    start: u64,
    next: u64,
    confirm: u64,
    bytes: &[u8],
) -> std::io::Result<()> {
    w.write_all(&data_head(start, next, confirm, bytes.len()))
        .await?;
    w.write_all(bytes).await?;
    w.flush().await
}

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], FrameError> {
        if self.b.len() < n {
            return Err(FrameError::Short);
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, FrameError> {
        let a = self.take(2)?;
        Ok(u16::from_be_bytes([a[0], a[1]]))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        let a = self.take(4)?;
        Ok(u32::from_be_bytes([a[0], a[1], a[2], a[3]]))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        let a = self.take(8)?;
        let mut x = [0u8; 8];
        x.copy_from_slice(a);
        Ok(u64::from_be_bytes(x))
    }
    fn epochs(&mut self) -> Result<Vec<(u32, u64)>, FrameError> {
        let n = self.u32()? as usize;
        let mut v = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            v.push((self.u32()?, self.u64()?));
        }
        Ok(v)
    }
    fn string(&mut self) -> Result<String, FrameError> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| FrameError::NotUtf8)
    }
    /// A string, or empty at the end of the frame (a field older versions do not send).
    fn string_or_empty(&mut self) -> Result<String, FrameError> {
        if self.b.is_empty() {
            Ok(String::new())
        } else {
            self.string()
        }
    }
}

/// Decodes one frame's body (after its length).
pub fn decode(body: Bytes) -> Result<Frame, FrameError> {
    let Some(&kind) = body.first() else {
        return Err(FrameError::Empty);
    };
    let mut r = Reader { b: &body[1..] };
    Ok(match kind {
        HELLO => Frame::Hello(Hello {
            version: r.u16()?,
            shard: r.u16()?,
            shard_count: r.u16()?,
            segment_bytes: r.u64()?,
            broker_id: r.u64()?,
            log_min: r.u64()?,
            log_end: r.u64()?,
            broker_name: r.string()?,
            epochs: r.epochs()?,
            // A version-3 HELLO ends here: read as no credentials, so that the master
            // refuses it naming the version.
            access_key: r.string_or_empty()?,
            nonce: r.string_or_empty()?,
        }),
        CHALLENGE => Frame::Challenge {
            nonce: r.string()?,
            proof: r.string()?,
        },
        PROOF => Frame::Proof(r.string()?),
        WELCOME => Frame::Welcome {
            start: r.u64()?,
            master_min: r.u64()?,
            master_end: r.u64()?,
            confirm: r.u64()?,
            epochs: r.epochs()?,
        },
        REDIRECT => Frame::Redirect(r.string()?),
        REFUSE => Frame::Refuse(r.string()?),
        DATA => {
            let start = r.u64()?;
            let next = r.u64()?;
            let confirm = r.u64()?;
            Frame::Data {
                start,
                next,
                confirm,
                bytes: body.slice(1 + 24..),
            }
        }
        KEEPALIVE => Frame::Keepalive {
            master_end: r.u64()?,
            confirm: r.u64()?,
        },
        ACK => Frame::Ack {
            safe: r.u64()?,
            end: r.u64()?,
        },
        TOPICS => {
            let n = r.u32()? as usize;
            let mut list = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let config = protocol::TopicConfig {
                    name: r.string()?,
                    read_queues: r.u32()?,
                    write_queues: r.u32()?,
                    perm: r.u32()?,
                };
                let mut attributes = BTreeMap::new();
                for _ in 0..r.u16()? {
                    let key = r.string()?;
                    attributes.insert(key, r.string()?);
                }
                list.push(TopicRow { config, attributes });
            }
            Frame::Topics(list)
        }
        OFFSETS => {
            let n = r.u32()? as usize;
            let mut list = Vec::with_capacity(n.min(OFFSETS_PER_FRAME));
            for _ in 0..n {
                list.push(OffsetEntry {
                    group: r.string()?,
                    topic: r.string()?,
                    queue_id: r.u32()?,
                    offset: r.u64()?,
                    epoch: r.u64()?,
                });
            }
            Frame::Offsets(list)
        }
        AUTH => {
            let n = r.u32()? as usize;
            Frame::Auth(r.take(n)?.to_vec())
        }
        k => return Err(FrameError::UnknownKind(k)),
    })
}

/// Reads one frame; an error says what was wrong with it (or the socket's error).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
    let mut len = [0u8; 4];
    let io = |e: std::io::Error| FrameError::Io(e.to_string());
    r.read_exact(&mut len).await.map_err(io)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > FRAME_BYTES_MAX {
        return Err(FrameError::TooLong {
            len,
            max: FRAME_BYTES_MAX,
        });
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(io)?;
    decode(Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(f: Frame) {
        let (head, tail) = encode(&f);
        let mut all = head.to_vec();
        if let Some(t) = tail {
            all.extend_from_slice(&t);
        }
        let len = u32::from_be_bytes([all[0], all[1], all[2], all[3]]) as usize;
        assert_eq!(len, all.len() - 4);
        assert_eq!(decode(Bytes::from(all[4..].to_vec())).unwrap(), f);
    }

    #[test]
    fn every_frame_survives_a_round_trip() {
        round_trip(Frame::Hello(Hello {
            version: VERSION,
            shard: 3,
            shard_count: 8,
            segment_bytes: 1 << 30,
            broker_id: 1,
            log_min: 0,
            log_end: 12345,
            broker_name: "broker-a".into(),
            epochs: vec![(1, 0), (3, 4096)],
            access_key: "ha".into(),
            nonce: "n0nce".into(),
        }));
        round_trip(Frame::Challenge {
            nonce: "abc".into(),
            proof: "def".into(),
        });
        round_trip(Frame::Proof("ghi".into()));
        round_trip(Frame::Welcome {
            start: 1,
            master_min: 2,
            master_end: 3,
            confirm: 4,
            epochs: vec![(2, 0)],
        });
        round_trip(Frame::Redirect("127.0.0.1:10913".into()));
        round_trip(Frame::Refuse("no".into()));
        round_trip(Frame::Data {
            start: 10,
            next: 20,
            confirm: 5,
            bytes: Bytes::from_static(b"0123456789"),
        });
        round_trip(Frame::Keepalive {
            master_end: 9,
            confirm: 8,
        });
        round_trip(Frame::Ack { safe: 7, end: 9 });
        // DATA written from borrowed bytes reads back as the frame.
        let mut out = Vec::new();
        futures_lite::future::block_on(write_data(&mut out, 10, 20, 5, b"0123456789")).unwrap();
        assert_eq!(
            decode(Bytes::from(out[4..].to_vec())).unwrap(),
            Frame::Data {
                start: 10,
                next: 20,
                confirm: 5,
                bytes: Bytes::from_static(b"0123456789"),
            }
        );
        round_trip(Frame::Auth(br#"{"users":[],"acls":[]}"#.to_vec()));
        let topic = |name: &str, attributes: &[(&str, &str)]| TopicRow {
            config: protocol::TopicConfig {
                name: name.into(),
                read_queues: 4,
                write_queues: 4,
                perm: 6,
            },
            attributes: attributes
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        };
        round_trip(Frame::Topics(vec![
            topic("TopicTest", &[]),
            topic("Deduped", &[("dedup.enable", "true"), ("message.type", "")]),
        ]));
        round_trip(Frame::Offsets(vec![OffsetEntry {
            group: "g".into(),
            topic: "TopicTest".into(),
            queue_id: 3,
            offset: 42,
            epoch: 2,
        }]));
    }

    #[test]
    fn a_version_3_hello_reads_as_one_without_credentials() {
        let h = Hello {
            version: 3,
            shard: 0,
            shard_count: 1,
            segment_bytes: 1 << 20,
            broker_id: 1,
            log_min: 0,
            log_end: 0,
            broker_name: "broker-a".into(),
            epochs: vec![(1, 0)],
            access_key: String::new(),
            nonce: String::new(),
        };
        let (head, _) = encode(&Frame::Hello(h.clone()));
        // Version 3 ended after the epochs: drop the two empty strings (2 bytes each).
        let v3 = &head[4..head.len() - 4];
        assert_eq!(decode(Bytes::from(v3.to_vec())).unwrap(), Frame::Hello(h));
    }

    #[test]
    fn short_or_unknown_frames_are_errors() {
        assert!(decode(Bytes::from_static(&[HELLO, 0, 1])).is_err());
        assert!(decode(Bytes::from_static(&[99])).is_err());
        assert!(decode(Bytes::new()).is_err());
    }
}
