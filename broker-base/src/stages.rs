//! Where a send's time goes on the broker: one latency histogram per stage of the request
//! path, per core, in plain cells (no atomics, nothing shared). The bench asks for them
//! (`SendStages`) beside its own send→ack figures; ARCHITECTURE.md, "Where a send's time
//! goes", names the stages.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use protocol::{StageBucket, StageHistogram};
use shard::AppendTiming;

/// The stages of a send, in the order a request passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From the read that completed the frame until its handler task ran.
    Queued,
    /// The shard's back-pressure wait (disk behind the acknowledged bytes).
    Room,
    /// Copy, stamp, index (and the tail ring's copy): in memory, on the owning core.
    Append,
    /// Sync flush: from the append until its group commit's fdatasync covered it.
    Durable,
    /// SYNC_MASTER: from the local append until the in-sync slaves acknowledged it.
    Replicate,
    /// A send owned by another core: the round trip through the mesh, seen by the core
    /// that read it (the owner records its own room, append and durable stages).
    Forward,
    /// From the handler's answer until the connection's writer took it.
    Reply,
    /// The writer's socket write (and flush, when nothing else waits to join it).
    Write,
    /// From the read that completed the frame until the response was written.
    Total,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Queued,
        Stage::Room,
        Stage::Append,
        Stage::Durable,
        Stage::Replicate,
        Stage::Forward,
        Stage::Reply,
        Stage::Write,
        Stage::Total,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Queued => "queued",
            Stage::Room => "room",
            Stage::Append => "append",
            Stage::Durable => "durable",
            Stage::Replicate => "replicate",
            Stage::Forward => "forward",
            Stage::Reply => "reply",
            Stage::Write => "write",
            Stage::Total => "total",
        }
    }
}

/// Longest duration a histogram holds; longer ones are counted at it.
const MAX_NANOS: u64 = 120_000_000_000;

/// Timestamps a send response carries from the reading task to the writer.
#[derive(Debug, Clone, Copy)]
pub struct SendTrace {
    /// When the read that completed the request's frame returned.
    pub read_at: Instant,
    /// When the handler's answer was ready.
    pub answered_at: Instant,
}

/// One core's histograms, one per [`Stage`].
pub struct SendStages {
    hists: RefCell<Vec<Histogram<u64>>>,
}

impl Default for SendStages {
    fn default() -> Self {
        Self::new()
    }
}

impl SendStages {
    pub fn new() -> SendStages {
        let hists = Stage::ALL
            .iter()
            .filter_map(|_| Histogram::new_with_bounds(1, MAX_NANOS, 2).ok())
            .collect();
        SendStages {
            hists: RefCell::new(hists),
        }
    }

    pub fn record(&self, stage: Stage, d: Duration) {
        let nanos = (d.as_nanos() as u64).clamp(1, MAX_NANOS);
        if let Some(h) = self.hists.borrow_mut().get_mut(stage as usize) {
            h.saturating_record(nanos);
        }
    }

    /// The shard's stages of a local append; `durable` only where the shard syncs.
    pub fn record_append(&self, t: &AppendTiming, sync_flush: bool) {
        self.record(Stage::Room, t.room);
        self.record(Stage::Append, t.append);
        if sync_flush {
            self.record(Stage::Durable, t.durable);
        }
    }

    /// Every stage that saw a request, as sent to the bench; cleared afterwards with `reset`.
    pub fn snapshot(&self, core: u16, reset: bool) -> Vec<StageHistogram> {
        let mut hists = self.hists.borrow_mut();
        let out = Stage::ALL
            .iter()
            .zip(hists.iter())
            .filter(|(_, h)| !h.is_empty())
            .map(|(stage, h)| StageHistogram {
                core,
                stage: stage.name().to_owned(),
                buckets: h
                    .iter_recorded()
                    .map(|v| StageBucket {
                        nanos: h.highest_equivalent(v.value_iterated_to()),
                        count: v.count_since_last_iteration(),
                    })
                    .collect(),
            })
            .collect();
        if reset {
            hists.iter_mut().for_each(Histogram::reset);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_holds_what_was_recorded_and_a_reset_clears_it() {
        let s = SendStages::new();
        for us in [10u64, 20, 30, 4000] {
            s.record(Stage::Append, Duration::from_micros(us));
        }
        s.record(Stage::Total, Duration::from_millis(5));
        let snap = s.snapshot(3, true);
        assert_eq!(snap.len(), 2, "only stages that saw a request: {snap:?}");
        let append = &snap[0];
        assert_eq!((append.core, append.stage.as_str()), (3, "append"));
        let count: u64 = append.buckets.iter().map(|b| b.count).sum();
        assert_eq!(count, 4);
        let top = append.buckets.iter().map(|b| b.nanos).max().unwrap_or(0);
        assert!(
            (3_960_000..=4_040_000).contains(&top),
            "{top} ns, 1% of 4 ms"
        );
        assert!(s.snapshot(3, false).is_empty(), "reset cleared every stage");
    }
}
