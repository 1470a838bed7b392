//! The check behind the `segment_recovery` fuzz target, as a plain function so unit tests
//! run it on fixed inputs too.
//!
//! Input bytes drive: how many records are appended (and acknowledged durable), their body
//! sizes, and a list of damages to the closed log (bit flips, overwrites, truncation of the
//! last segment). Recovery must then serve exactly a prefix of the acknowledged records,
//! byte for byte, and nothing after the first damaged one.

use std::path::Path;

use message::{encode_record, MessageFields, RecordView, TagFilter};

use crate::{FlushPolicy, ReadRequest, Shard, ShardConfig};

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
    c.segment_size_bytes = 64 << 10;
    c.write_chunk_bytes = 8 << 10;
    c.message_size_max_bytes = 8 << 10;
    c.flush = FlushPolicy::Sync;
    c.consume_queue_file_entries = 64;
    c.index_file_slots = 16;
    c.index_file_entries = 64;
    c.retention_check_interval_ms = 3_600_000;
    c
}

/// Panics if recovery of the damaged log serves anything but a prefix of the acknowledged
/// records.
pub fn check_recovery_prefix(data: &[u8]) {
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
            acked.push((r.first_commit_log_offset, stored));
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
    // Where the log really changed, and the first acknowledged record that changed.
    let after: Vec<Vec<u8>> = (0..seg_count)
        .map(|i| std::fs::read(segment(i * seg_size)).unwrap_or_default())
        .collect();
    let byte_at = |segs: &[Vec<u8>], off: u64| {
        segs[(off / seg_size) as usize]
            .get((off % seg_size) as usize)
            .copied()
    };
    let first_diff = (0..log_end)
        .find(|&o| byte_at(&before, o) != byte_at(&after, o))
        .unwrap_or(u64::MAX);
    let first_bad = acked
        .iter()
        .position(|(o, r)| {
            (*o..o + r.len() as u64).any(|x| byte_at(&before, x) != byte_at(&after, x))
        })
        .unwrap_or(acked.len());

    // Life 2: recover and read everything back.
    let p = path.clone();
    let served: Vec<Vec<u8>> = crate::run_local(move || async move {
        let shard = Shard::open(config(&p)).await.expect("reopen");
        let filter = TagFilter::All;
        let mut out = Vec::new();
        let mut q = 0;
        loop {
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
            if r.records.is_empty() {
                break;
            }
            for s in &r.records {
                out.push(s.as_bytes().to_vec());
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

    assert!(
        served.len() <= acked.len(),
        "served more than was acknowledged"
    );
    for (i, s) in served.iter().enumerate() {
        assert_eq!(
            s, &acked[i].1,
            "record {i} differs from the acknowledged one"
        );
        let v = RecordView::parse(s).expect("served record parses");
        v.verify_crc().expect("served record has a good CRC");
    }
    // Never a damaged record nor anything after it; every record before the first damaged
    // byte (records or end-of-segment filler) is kept.
    assert!(
        served.len() <= first_bad,
        "served {} records but record {first_bad} is damaged",
        served.len()
    );
    for (i, (off, rec)) in acked.iter().enumerate() {
        if off + rec.len() as u64 <= first_diff {
            assert!(
                i < served.len(),
                "lost undamaged record {i} (damage at {first_diff})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
