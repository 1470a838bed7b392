//! Retention: disk use is measured against the clean, force-clean and refuse ratios, and
//! expired (or, on a full disk, the oldest) segments are deleted with the ConsumeQueue and
//! IndexFile files below the new log minimum.

use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::offsets::CommitLogOffset;
use crate::storage::Doomed;
use crate::ShardError;

use super::{DiskLevel, Inner, RetentionReport, Shard, Signals};

impl Shard {
    /// Keeps every segment from the one holding `offset` on, whatever its age or the disk's
    /// use: the broker's timer sets it to the first record it has not delivered, so that a
    /// held message, acknowledged to its producer, is never deleted before it is due
    /// (`u64::MAX`, the default, keeps nothing back).
    pub fn set_retention_floor(&self, offset: u64) {
        self.inner.retention_floor.set(offset);
    }

    pub(super) fn measure_disk(&self) -> (f64, DiskLevel) {
        let c = &self.inner.config;
        let limits = self.inner.limits.get();
        let ratio = match c.disk_usage.used_ratio(&c.dir) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot measure disk use; assuming it is fine");
                0.0
            }
        };
        let level = if ratio >= limits.disk_refuse_ratio {
            DiskLevel::Full
        } else if ratio >= limits.disk_force_clean_ratio {
            DiskLevel::ForceClean
        } else if ratio >= limits.disk_clean_ratio {
            DiskLevel::Clean
        } else {
            DiskLevel::Normal
        };
        // Logged once per change of level, never per message.
        let previous = self.inner.disk.get().1;
        if previous != level {
            let shard = c.shard_id;
            match level {
                DiskLevel::Full => tracing::error!(
                    shard, ratio, threshold = limits.disk_refuse_ratio,
                    "disk full: use ratio {ratio:.3} >= disk_refuse_ratio {:.3}; refusing sends until space returns",
                    limits.disk_refuse_ratio
                ),
                DiskLevel::ForceClean => tracing::warn!(
                    shard, ratio, threshold = limits.disk_force_clean_ratio,
                    "disk use {ratio:.3} >= disk_force_clean_ratio {:.3}: deleting the oldest segments early",
                    limits.disk_force_clean_ratio
                ),
                DiskLevel::Clean => tracing::warn!(
                    shard, ratio, threshold = limits.disk_clean_ratio,
                    "disk use {ratio:.3} >= disk_clean_ratio {:.3}: cleaning segments",
                    limits.disk_clean_ratio
                ),
                DiskLevel::Normal => tracing::info!(shard, ratio, "disk use {ratio:.3} is back below every threshold"),
            }
        }
        self.inner.disk.set((ratio, level));
        self.inner.disk_measured.set(Instant::now());
        (ratio, level)
    }

    /// One retention pass: measure the disk, delete expired segments (and, when the disk is
    /// filling, the oldest ones), and move ConsumeQueue and IndexFile minimums after them.
    pub async fn run_retention(&self) -> Result<RetentionReport, ShardError> {
        let inner = &self.inner;
        let (mut ratio, mut level) = self.measure_disk();
        let reserved = Duration::from_secs(inner.limits.get().file_reserved_hours * 3600);
        let mut deleted = 0usize;
        loop {
            // Never the segment being written, nor one holding bytes not yet durable.
            let candidate = {
                let log = inner.log.borrow();
                let active = log.segment_start(log.write_offset);
                log.segments
                    .iter()
                    .next()
                    .map(|(&s, f)| (s, f.clone()))
                    .filter(|(s, _)| {
                        *s < active
                            && s + log.segment_bytes <= log.durable_offset
                            && s + log.segment_bytes <= inner.retention_floor.get()
                    })
            };
            let Some((start, file)) = candidate else {
                break;
            };
            let now = inner.config.clock.wall();
            let expired = std::fs::metadata(&file.path)
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default() >= reserved)
                .unwrap_or(false);
            let pressure = match level {
                DiskLevel::Normal => false,
                DiskLevel::Clean => deleted == 0,
                DiskLevel::ForceClean | DiskLevel::Full => true,
            };
            if !expired && !pressure {
                break;
            }
            tracing::info!(
                segment = start,
                expired,
                ?level,
                "retention deletes a segment"
            );
            let next = {
                let mut log = inner.log.borrow_mut();
                log.segments.remove(&start);
                let next = start + log.segment_bytes;
                log.forget_below(next);
                next
            };
            inner.readahead.borrow_mut().forget(next, u64::MAX);
            // A cold read in flight still holds the file: then only unlink it.
            let segment = Doomed {
                path: file.path.clone(),
                map: None,
                truncate: Rc::strong_count(&file) == 1,
            };
            drop(file);
            inner.storage.remove(vec![segment]).await?;
            deleted += 1;
            if level >= DiskLevel::ForceClean {
                (ratio, level) = self.measure_disk();
                if level < DiskLevel::Clean {
                    break;
                }
            }
        }
        let min = inner.log.borrow().min_offset;
        if deleted > 0 {
            let mut doomed = Vec::new();
            for cq in inner.cqs.borrow_mut().queues.values_mut() {
                doomed.extend(cq.trim_below(CommitLogOffset(min))?);
            }
            doomed.extend(inner.index.borrow_mut().trim_below(min));
            inner.quarantine.borrow_mut().forget_below(min);
            inner.storage.remove(doomed).await?;
            (ratio, level) = self.measure_disk();
        }
        Ok(RetentionReport {
            deleted_segments: deleted,
            min_offset: CommitLogOffset(min),
            disk_use_ratio: ratio,
            disk_level: level,
        })
    }
}

pub(super) async fn retention_task(weak: Weak<Inner>, signals: Rc<Signals>, every: Duration) {
    loop {
        futures_lite::future::or(signals.stop.wait(), glommio::timer::sleep(every)).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if inner.closed.get() {
            return;
        }
        let shard = Shard { inner };
        if let Err(e) = shard.run_retention().await {
            tracing::warn!(error = %e, "retention pass failed");
        }
    }
}
