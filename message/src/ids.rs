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

impl fmt::Display for MsgOffsetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.store_host.ip().octets() {
            write!(f, "{b:02X}")?;
        }
        write!(f, "{:08X}", self.store_host.port() as u32)?;
        let off = ((self.shard as u64) << LOCAL_OFFSET_BITS)
            | (self.commit_log_offset & LOCAL_OFFSET_MAX);
        write!(f, "{off:016X}")
    }
}

/// Makes unique keys for one producer process.
#[derive(Debug)]
pub struct UniqKeyGenerator {
    prefix: String,
    start_secs: u64,
    counter: AtomicU32,
}

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
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // The time part changes when the 16-bit counter wraps, keeping keys unique for the
        // life of the process at any realistic rate.
        let time = (now.wrapping_sub(self.start_secs) as u32).wrapping_add(n >> 16);
        format!("{}{:08X}{:04X}", self.prefix, time, n as u16)
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
    fn unique_keys_differ() {
        let g = UniqKeyGenerator::new(Ipv4Addr::LOCALHOST);
        let a = g.next_key();
        let b = g.next_key();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
