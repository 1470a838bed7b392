//! The bench's message bodies: a small header (who sent it, its sequence number, when it was
//! scheduled) then filler, so consumers can verify counts and measure delivery latency.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

pub const MAGIC: u32 = 0x3142_5643; // "CVB1" little-endian
pub const HEADER_BYTES: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyHeader {
    pub producer: u32,
    pub seq: u64,
    /// Scheduled send time, ns since the Unix epoch.
    pub sent_ns: u64,
}

impl BodyHeader {
    pub fn parse(body: &[u8]) -> Option<BodyHeader> {
        if body.len() < HEADER_BYTES {
            return None;
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if u32_at(0) != MAGIC {
            return None;
        }
        Some(BodyHeader {
            producer: u32_at(4),
            seq: u64_at(8),
            sent_ns: u64_at(16),
        })
    }
}

/// Builds the bodies of one batch in one allocation; each body is a slice of it.
pub fn batch_bodies(
    producer: u32,
    first_seq: u64,
    count: usize,
    size: usize,
    sent_ns: u64,
) -> Vec<Bytes> {
    let size = size.max(HEADER_BYTES);
    let filler = filler(size - HEADER_BYTES);
    let mut buf = BytesMut::with_capacity(count * size);
    for i in 0..count {
        buf.put_u32_le(MAGIC);
        buf.put_u32_le(producer);
        buf.put_u64_le(first_seq + i as u64);
        buf.put_u64_le(sent_ns);
        buf.put_slice(&filler);
    }
    let all = buf.freeze();
    (0..count)
        .map(|i| all.slice(i * size..(i + 1) * size))
        .collect()
}

/// `len` bytes of compressible, text-like filler (so --compress has something to do), built
/// once per thread and size: copying it whole keeps body making a small part of the bench
/// thread's time next to the client's own work.
fn filler(len: usize) -> Bytes {
    thread_local! {
        static FILLER: std::cell::RefCell<Bytes> = const { std::cell::RefCell::new(Bytes::new()) };
    }
    FILLER.with(|f| {
        let mut f = f.borrow_mut();
        if f.len() != len {
            let pattern = b"corvus bench payload 0123456789 ";
            *f = pattern.iter().copied().cycle().take(len).collect();
        }
        f.clone()
    })
}

/// A process-wide pairing of the monotonic and the wall clock, so a scheduled `Instant`
/// can be stamped into a body as epoch nanoseconds.
fn anchor() -> &'static (Instant, u64) {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    ANCHOR.get_or_init(|| (Instant::now(), wall_ns()))
}

pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `at` as epoch nanoseconds (through the anchor, so it is exact within this process).
pub fn instant_ns(at: Instant) -> u64 {
    let (i0, w0) = *anchor();
    if at >= i0 {
        w0 + (at - i0).as_nanos() as u64
    } else {
        w0.saturating_sub((i0 - at).as_nanos() as u64)
    }
}

/// Now, on the same clock as [`instant_ns`].
pub fn now_ns() -> u64 {
    instant_ns(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_their_header() {
        let bodies = batch_bodies(3, 100, 4, 1024, 42);
        assert_eq!(bodies.len(), 4);
        for (i, b) in bodies.iter().enumerate() {
            assert_eq!(b.len(), 1024);
            let h = BodyHeader::parse(b).unwrap();
            assert_eq!(
                h,
                BodyHeader {
                    producer: 3,
                    seq: 100 + i as u64,
                    sent_ns: 42
                }
            );
        }
        // The filler is the text pattern, whatever size the thread asked for before.
        for size in [1024, 100, 1024] {
            let b = &batch_bodies(0, 0, 2, size, 0)[1];
            assert_eq!(b.len(), size);
            assert!(b[HEADER_BYTES..].starts_with(b"corvus bench payload 0123"));
            assert_eq!(b[HEADER_BYTES + 32..HEADER_BYTES + 38], *b"corvus");
        }
        assert_eq!(BodyHeader::parse(b"short"), None);
        assert_eq!(BodyHeader::parse(&[0u8; 64]), None);
        // Bodies below the header size are padded up to it.
        assert_eq!(batch_bodies(0, 0, 1, 1, 0)[0].len(), HEADER_BYTES);
    }

    #[test]
    fn clocks_agree() {
        let a = now_ns();
        let w = wall_ns();
        assert!(a.abs_diff(w) < 50_000_000);
        let later = Instant::now() + std::time::Duration::from_millis(5);
        assert!(instant_ns(later) > a);
    }
}
