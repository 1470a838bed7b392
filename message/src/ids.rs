//! Message ids.
//!
//! * The *unique key* (`UNIQ_KEY`, RocketMQ's client msgId) is made by the producer: 32 hex
//!   characters of IPv4 (4 bytes), process id (2), a random per-process salt (4), seconds
//!   since the generator started plus its start time (4) and a counter (2).
//! * The *offset id* (RocketMQ's offsetMsgId) names where the broker stored the message:
//!   store host IPv4 (4) + port (4) + offset (8), 32 hex characters. This broker keeps one
//!   CommitLog per shard, so the 8-byte offset carries the shard in its top 16 bits and the
//!   shard's CommitLog offset in the low 48 (256 TiB per shard).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub const LOCAL_OFFSET_BITS: u32 = 48;
pub const LOCAL_OFFSET_MAX: u64 = (1 << LOCAL_OFFSET_BITS) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgOffsetId {
    pub store_host: SocketAddrV4,
    pub shard: u16,
    pub commit_log_offset: u64,
}

impl MsgOffsetId {
    pub fn parse(hex: &str) -> Option<MsgOffsetId> {
        if hex.len() != 32 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        let ip = Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
        let port = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let port = u16::try_from(port).ok()?;
        let mut off = [0u8; 8];
        off.copy_from_slice(&bytes[8..]);
        let off = u64::from_be_bytes(off);
        Some(MsgOffsetId {
            store_host: SocketAddrV4::new(ip, port),
            shard: (off >> LOCAL_OFFSET_BITS) as u16,
            commit_log_offset: off & LOCAL_OFFSET_MAX,
        })
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends `bytes` as uppercase hex to `out`. Ids are made for every message sent and
/// received, so this avoids the formatting machinery.
fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        out.push(HEX_UPPER[(b >> 4) as usize] as char);
        out.push(HEX_UPPER[(b & 0xf) as usize] as char);
    }
}

impl MsgOffsetId {
    /// The 16 bytes of the id: IPv4, port (4 bytes), offset with the shard on top.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&self.store_host.ip().octets());
        b[4..8].copy_from_slice(&(self.store_host.port() as u32).to_be_bytes());
        let off = ((self.shard as u64) << LOCAL_OFFSET_BITS)
            | (self.commit_log_offset & LOCAL_OFFSET_MAX);
        b[8..].copy_from_slice(&off.to_be_bytes());
        b
    }

    /// The id as 32 uppercase hex characters (what `Display` prints, without `core::fmt`).
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(32);
        push_hex(&mut s, &self.to_bytes());
        s
    }
}

impl fmt::Display for MsgOffsetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Makes unique keys for one producer process.
#[derive(Debug)]
pub struct UniqKeyGenerator {
    prefix: String,
    start_secs: u64,
    counter: AtomicU32,
}

/// Characters in a key of [`UniqKeyGenerator`]: 8 for the IPv4 address, 4 for the process,
/// 8 of salt, 8 of time and 4 of counter, all hex.
pub const UNIQ_KEY_CHARS: usize = 32;

impl UniqKeyGenerator {
    pub fn new(ip: Ipv4Addr) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let salt = (now.subsec_nanos() ^ (std::process::id().rotate_left(16))) as u64
            ^ (&now as *const _ as u64);
        let mut prefix = String::with_capacity(20);
        for b in ip.octets() {
            prefix.push_str(&format!("{b:02X}"));
        }
        prefix.push_str(&format!("{:04X}", std::process::id() as u16));
        prefix.push_str(&format!("{:08X}", salt as u32));
        UniqKeyGenerator {
            prefix,
            start_secs: now.as_secs(),
            counter: AtomicU32::new(0),
        }
    }

    pub fn next_key(&self) -> String {
        let mut key = String::with_capacity(32);
        self.push_keys(1, &mut key);
        key
    }

    /// Appends `n` fresh keys of [`UNIQ_KEY_CHARS`] characters each to `out`, reading the
    /// clock once.
    pub fn push_keys(&self, n: u32, out: &mut String) {
        let first = self.counter.fetch_add(n, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let since_start = now.wrapping_sub(self.start_secs) as u32;
        out.reserve(32 * n as usize);
        for i in 0..n {
            let c = first.wrapping_add(i);
            // The time part changes when the 16-bit counter wraps, keeping keys unique for
            // the life of the process at any realistic rate.
            let time = since_start.wrapping_add(c >> 16);
            out.push_str(&self.prefix);
            push_hex(out, &time.to_be_bytes());
            push_hex(out, &(c as u16).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_id_round_trip() {
        let id = MsgOffsetId {
            store_host: "127.0.0.1:10911".parse().unwrap(),
            shard: 3,
            commit_log_offset: 123_456_789,
        };
        let s = id.to_string();
        assert_eq!(s.len(), 32);
        assert_eq!(MsgOffsetId::parse(&s), Some(id));
        assert_eq!(MsgOffsetId::parse("zz"), None);
        assert_eq!(MsgOffsetId::parse(&"G".repeat(32)), None);
    }

    #[test]
    fn batches_of_keys_continue_the_sequence() {
        let g = UniqKeyGenerator::new(Ipv4Addr::new(10, 0, 0, 1));
        let first = g.next_key();
        let mut batch = String::new();
        g.push_keys(3, &mut batch);
        assert_eq!(batch.len(), 3 * UNIQ_KEY_CHARS);
        let keys: Vec<&str> = (0..3)
            .map(|i| &batch[i * UNIQ_KEY_CHARS..(i + 1) * UNIQ_KEY_CHARS])
            .collect();
        let after = g.next_key();
        assert_eq!(first.len(), UNIQ_KEY_CHARS);
        let mut all = vec![first.as_str(), after.as_str()];
        all.extend(&keys);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 5, "keys repeat: {batch}");
        // Counter parts run on: ...0001, 0002, 0003, then 0004.
        assert_eq!(&keys[2][28..], "0003");
        assert_eq!(&after[28..], "0004");
    }

    #[test]
    fn unique_keys_differ() {
        let g = UniqKeyGenerator::new(Ipv4Addr::LOCALHOST);
        let a = g.next_key();
        let b = g.next_key();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
