//! The check behind the `segment_recovery` fuzz target, as a plain function so unit tests
//! run it on fixed inputs too.
//!
//! Input bytes drive: how many records are appended (and acknowledged durable), their body
//! sizes, and a list of damages to the closed log (bit flips, overwrites, a torn tail that
//! zeroes everything from a point on). Recovery must then serve exactly the acknowledged
//! records whose bytes are intact, byte for byte and in order: never a damaged one, and
//! never lose an intact one (damage is quarantined and the log goes on after it).

use std::path::Path;

use message::{encode_record, MessageFields, RecordView, TagFilter};

use crate::{FlushPolicy, QueueOffset, ReadRequest, Shard, ShardConfig};

const TOPIC: &str = "FuzzTopic";

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
}

fn config(dir: &Path) -> ShardConfig {
    let mut c = ShardConfig::new(dir.to_owned(), 0);
    c.segment_bytes = 64 << 10;
    c.write_chunk_bytes = 8 << 10;
    c.message_bytes_max = 8 << 10;
    c.flush = FlushPolicy::Sync;
    c.consume_queue_file_entries = 64;
    c.index_file_slots = 16;
    c.index_file_entries = 64;
    c.retention_check_interval_ms = 3_600_000;
    c
}

/// Panics if recovery of the damaged log serves a damaged record, loses an intact one, or
/// serves anything that was not acknowledged. (The name is the fuzz target's; the rule it
/// checks is no longer "a prefix": records after damage are kept.)
pub fn check_recovery_prefix(data: &[u8]) {
    check_recovery(data);
}

/// What one run of [`check_recovery_prefix`] saw: acknowledged and intact records, after
/// it checked that exactly the intact ones were served.
/// Only the unit tests look at it (the fuzz target relies on the panics).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
struct Outcome {
    acked: usize,
    intact: usize,
}

fn check_recovery(data: &[u8]) -> Outcome {
    let mut input = Input { data };
    let count = 1 + (input.byte() % 48) as usize;
    let bodies: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            let len = (input.byte() as usize) * 13 % 3000;
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        })
        .collect();
    let damages: Vec<(u8, u32, u8)> = (0..(input.byte() % 4))
        .map(|_| (input.byte(), input.u32(), input.byte()))
        .collect();
    // Whether the ConsumeQueues and IndexFiles are lost too, so recovery rebuilds them from
    // what its scan finds: with them intact, reads could reach records the scan skipped.
    let rebuild = input.byte() & 1 == 1;
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let path = dir.path().to_owned();

    // Life 1: append and acknowledge (sync flush: acknowledged means durable).
    let p = path.clone();
    let acked: Vec<(u64, Vec<u8>)> = crate::run_local(move || async move {
        let shard = Shard::open(config(&p)).await.expect("open");
        let mut acked = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            let key = format!("k{i}");
            let props = [("KEYS", key.as_str())];
            let mut rec = Vec::new();
            encode_record(
                &MessageFields {
                    topic: TOPIC,
                    body,
                    properties: &props,
                    ..Default::default()
                },
                &mut rec,
            )
            .expect("encode");
            let r = shard.append(TOPIC, 0, &rec).await.expect("append");
            let stored = shard
                .read_at(r.first_commit_log_offset)
                .await
                .expect("read");
            let stored = stored.expect("just appended").as_bytes().to_vec();
            acked.push((r.first_commit_log_offset.0, stored));
        }
        shard.close().await.expect("close");
        acked
    });

    // Damage the closed log.
    let seg_size = 64u64 << 10;
    let log_dir = path.join("commitlog");
    let segment = |start: u64| log_dir.join(format!("{start:020}"));
    let log_end = acked.last().map_or(0, |(o, r)| o + r.len() as u64);
    let seg_count = log_end.div_ceil(seg_size);
    let before: Vec<Vec<u8>> = (0..seg_count)
        .map(|i| std::fs::read(segment(i * seg_size)).unwrap_or_default())
        .collect();
    for (kind, where_, val) in damages {
        let at = where_ as u64 % log_end.max(1);
        let seg_path = segment(at - at % seg_size);
        let Ok(mut bytes) = std::fs::read(&seg_path) else {
            continue;
        };
        let pos = (at % seg_size) as usize;
        match kind % 3 {
            0 => bytes[pos] ^= 1 << (val % 8),
            1 => bytes[pos] = bytes[pos].wrapping_add(val.max(1)),
            _ => {
                // A torn tail: everything from `at` on is lost (zeros, as on a fresh block).
                for b in &mut bytes[pos..] {
                    *b = 0;
                }
                let mut later = at - at % seg_size + seg_size;
                while later < log_end {
                    let _ = std::fs::remove_file(segment(later));
                    later += seg_size;
                }
            }
        }
        std::fs::write(&seg_path, &bytes).expect("write damage");
    }
    // Which acknowledged records are still intact on disk.
    let after: Vec<Vec<u8>> = (0..seg_count)
        .map(|i| std::fs::read(segment(i * seg_size)).unwrap_or_default())
        .collect();
    let byte_at = |segs: &[Vec<u8>], off: u64| {
        segs[(off / seg_size) as usize]
            .get((off % seg_size) as usize)
            .copied()
    };
    let intact: Vec<&Vec<u8>> = acked
        .iter()
        .filter(|(o, r)| {
            (*o..o + r.len() as u64).all(|x| byte_at(&before, x) == byte_at(&after, x))
        })
        .map(|(_, r)| r)
        .collect();

    if rebuild {
        for derived in ["consumequeue", "index"] {
            match std::fs::remove_dir_all(path.join(derived)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("remove {derived}: {e}"),
            }
        }
    }

    // Life 2: recover and read everything back.
    let p = path.clone();
    let acked_count = acked.len();
    let served: Vec<Vec<u8>> = crate::run_local(move || async move {
        let shard = Shard::open(config(&p)).await.expect("reopen");
        let filter = TagFilter::All;
        let mut out = Vec::new();
        let mut q = QueueOffset(0);
        // Bounded: every pull either ends the walk or moves past at least one entry.
        for _ in 0..=acked_count + 1 {
            let r = shard
                .read(&ReadRequest {
                    topic: TOPIC,
                    queue_id: 0,
                    queue_offset: q,
                    max_messages: 16,
                    max_bytes: 1 << 20,
                    filter: &filter,
                })
                .await
                .expect("read");
            for s in &r.records {
                out.push(s.as_bytes().to_vec());
            }
            // A window of damaged records only is answered with no record and a next
            // offset past them: the walk goes on, as a consumer's does.
            if r.next_queue_offset <= q || r.next_queue_offset >= r.max_offset {
                break;
            }
            q = r.next_queue_offset;
        }
        // The recovered shard takes appends again after the cut.
        let mut rec = Vec::new();
        encode_record(
            &MessageFields {
                topic: TOPIC,
                body: b"after",
                ..Default::default()
            },
            &mut rec,
        )
        .expect("encode");
        shard
            .append(TOPIC, 0, &rec)
            .await
            .expect("append after recovery");
        shard.close().await.expect("close");
        out
    });

    for s in &served {
        let v = RecordView::parse(s).expect("served record parses");
        v.verify_crc().expect("served record has a good CRC");
        assert!(
            acked.iter().any(|(_, r)| r == s),
            "served a record that was never acknowledged (a damaged one?)"
        );
    }
    // Exactly the intact records, in order: none damaged, none intact lost.
    assert_eq!(
        served.len(),
        intact.len(),
        "served {} records, {} of {} acknowledged are intact",
        served.len(),
        intact.len(),
        acked.len()
    );
    for (i, (s, want)) in served.iter().zip(&intact).enumerate() {
        assert_eq!(s, *want, "served record {i} is not the {i}-th intact one");
    }
    Outcome {
        acked: acked.len(),
        intact: intact.len(),
    }
}

/// The check behind the `tail_ring_replay` fuzz target: lays a log of records (with
/// end-of-segment blanks where a record does not fit, as the CommitLog does) into a tail
/// ring from an offset the input picks, damages the ring's bytes where the input says, and
/// follows the log through the ring as a restart would. Panics if the walk returns a piece
/// that is not the log's (a record whose offset or CRC is wrong, pieces out of order or
/// past a lap), or fails to return a record that lies before the first damaged byte.
pub fn check_tail_ring_walk(data: &[u8]) {
    const RING: usize = 16 << 10;
    const SEGMENT: u64 = 64 << 10;
    let mut input = Input { data };
    let mut from = (input.u32() as u64) % (4 * SEGMENT);
    // As in the CommitLog, a segment always has room for a blank header (8 bytes) or none.
    if SEGMENT - from % SEGMENT < 8 {
        from += SEGMENT - from % SEGMENT;
    }
    let mut ring = vec![0u8; RING];
    // Leftovers of earlier laps: bytes the input gives.
    for b in ring.iter_mut().take(input.byte() as usize * 64) {
        *b = input.byte();
    }
    let put = |ring: &mut [u8], at: u64, bytes: &[u8]| {
        for (i, b) in bytes.iter().enumerate() {
            ring[((at + i as u64) % RING as u64) as usize] = *b;
        }
    };
    // The log: (offset, end) of each record, in order.
    let mut records: Vec<(u64, u64)> = Vec::new();
    let mut pos = from;
    for q in 0..input.byte() as u64 {
        let body = vec![b'r'; 1 + input.byte() as usize * 8];
        let mut r = Vec::new();
        if encode_record(
            &MessageFields {
                topic: TOPIC,
                body: &body,
                born_timestamp_ms: 1,
                ..Default::default()
            },
            &mut r,
        )
        .is_err()
        {
            return;
        }
        let seg_end = pos - pos % SEGMENT + SEGMENT;
        let len = r.len() as u64;
        if !(len == seg_end - pos || len + 8 <= seg_end - pos) {
            let mut blank = [0u8; 8];
            message::write_blank(&mut blank);
            blank[0..4].copy_from_slice(&((seg_end - pos) as i32).to_be_bytes());
            if seg_end + len - from + 8 > RING as u64 {
                break;
            }
            put(&mut ring, pos, &blank);
            pos = seg_end;
        }
        if pos + len - from + 8 > RING as u64 {
            break;
        }
        let stamp = message::StoreStamp {
            queue_id: 0,
            queue_offset: q,
            physical_offset: pos,
            store_timestamp_ms: 1,
            store_host: std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 1),
        };
        if message::stamp_record(&mut r, &stamp).is_err() {
            return;
        }
        put(&mut ring, pos, &r);
        records.push((pos, pos + len));
        pos += len;
    }
    // Damage: (where in the log, from `from`, a byte to add).
    let mut first_damage = u64::MAX;
    for _ in 0..input.byte() % 4 {
        let at = from + (input.u32() as u64) % (RING as u64);
        let add = input.byte().max(1);
        let i = (at % RING as u64) as usize;
        ring[i] = ring[i].wrapping_add(add);
        first_damage = first_damage.min(at);
    }
    let replay = crate::tail_ring::walk(&ring, from, SEGMENT);
    // Everything returned is the log's own, in order, within a lap.
    let mut next = from;
    for p in &replay.pieces {
        assert!(p.offset >= next, "pieces out of order at {}", p.offset);
        next = p.offset + p.bytes.len() as u64;
        assert!(next - from <= RING as u64, "a piece past a lap");
        if p.bytes.len() >= 8
            && i32::from_be_bytes([p.bytes[4], p.bytes[5], p.bytes[6], p.bytes[7]])
                != message::BLANK_MAGIC_CODE
        {
            let v = RecordView::parse(&p.bytes).expect("a replayed record parses");
            assert_eq!(
                v.physical_offset(),
                p.offset,
                "a replayed record is where it says"
            );
            assert!(v.verify_crc().is_ok(), "a replayed record's CRC holds");
        }
    }
    assert_eq!(
        replay.end,
        replay
            .pieces
            .last()
            .map_or(from, |p| p.offset + p.bytes.len() as u64)
    );
    // Every record before the first damaged byte comes back.
    let intact = records
        .iter()
        .filter(|&&(_, end)| end <= first_damage)
        .count() as u64;
    assert!(
        replay.records >= intact,
        "{} of {intact} intact records replayed",
        replay.records
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_ring_walks_keep_what_is_intact_and_nothing_else() {
        check_tail_ring_walk(&[]);
        // A start one byte before a segment end (found by the fuzzer: an impossible log).
        check_tail_ring_walk(&[0xff, 0xff, 0x97, 0x01, 0x00, 0x2c]);
        // 40 records from near a segment end, no damage.
        check_tail_ring_walk(&[0x00, 0xf0, 0, 0, 0, 40, 20, 20, 20, 20, 20, 20, 20, 20]);
        // Leftover bytes, records, and three damages.
        let mut v = vec![0x10, 0x20, 0x01, 0, 3];
        v.extend(std::iter::repeat_n(0x5a, 3 * 64));
        v.push(30);
        v.extend(std::iter::repeat_n(9, 30));
        v.extend([
            3, 0x00, 0x10, 0, 0, 7, 0x40, 0, 0, 0, 1, 0x00, 0x30, 0, 0, 0xff,
        ]);
        check_tail_ring_walk(&v);
    }

    #[test]
    fn fixed_inputs_recover_a_prefix() {
        check_recovery_prefix(&[]);
        check_recovery_prefix(&[10, 50, 60, 70, 80, 90, 100, 1, 0, 0x40, 0, 0, 0, 3]);
        check_recovery_prefix(&[
            40, 200, 200, 200, 200, 200, 200, 200, 200, 2, 2, 0x10, 0x27, 0, 0, 0,
        ]);
        check_recovery_prefix(&[
            47, 255, 255, 255, 255, 255, 255, 3, 1, 0xff, 0xff, 0, 0, 7, 0, 5, 0x80, 0, 0, 1, 2, 9,
            9, 9, 9, 0,
        ]);
    }

    /// An input for 40 records of 2,600-byte bodies (about 108 KiB: two 64 KiB segments)
    /// and the given damages `(kind, where, value)`: kind 0 flips a bit, 1 adds to a byte,
    /// 2 zeroes everything from `where` on (a torn tail).
    /// With `rebuild`, the ConsumeQueues and IndexFiles are deleted too.
    fn damaging(damages: &[(u8, u32, u8)], rebuild: bool) -> Vec<u8> {
        let mut v = vec![39u8];
        v.extend(std::iter::repeat_n(200u8, 40));
        v.push(damages.len() as u8);
        for &(kind, at, val) in damages {
            v.push(kind);
            v.extend(at.to_le_bytes());
            v.push(val);
        }
        v.push(u8::from(rebuild));
        v
    }

    #[test]
    fn damage_in_the_middle_keeps_every_intact_record() {
        // A flip in the first segment, one in the second, and both.
        for damages in [
            vec![(0, 5_000, 3)],
            vec![(0, 70_000, 5)],
            vec![(0, 5_000, 3), (1, 70_000, 9)],
            // The first record's header, and a byte of the last record.
            vec![(0, 4, 0), (1, 107_000, 1)],
        ] {
            for rebuild in [false, true] {
                let o = check_recovery(&damaging(&damages, rebuild));
                assert_eq!(o.acked, 40);
                assert!(
                    o.intact < o.acked && o.intact >= o.acked - damages.len(),
                    "{damages:?}: each damage hits one record ({o:?})"
                );
            }
        }
    }

    #[test]
    fn a_torn_tail_loses_only_what_it_zeroed() {
        for damages in [vec![(2, 100_000, 0)], vec![(0, 3_000, 1), (2, 60_000, 0)]] {
            for rebuild in [false, true] {
                let o = check_recovery(&damaging(&damages, rebuild));
                assert!(
                    o.intact < o.acked - 2,
                    "{damages:?}: the tail is gone ({o:?})"
                );
            }
        }
    }
}
