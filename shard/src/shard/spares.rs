//! Warm spares (`warm_segments`): the next segment is zero-filled on the blocking thread,
//! paced so it never holds the log's own writes up, and taken by the next roll.

use std::rc::Rc;
use std::time::Duration;

use crate::storage::{self};
use crate::ShardError;

use super::{DiskLevel, Shard, Spare};

impl Shard {
    /// With `warm_segments`: finds the spare a previous run left, and fills one if there is
    /// none. The first segment of an empty log is made from it, so it is filled before the
    /// shard serves; otherwise it fills in the background.
    pub(super) async fn open_spare(&self) -> Result<(), ShardError> {
        let inner = &self.inner;
        if !inner.config.warm_segments {
            return Ok(());
        }
        let (dir, size, needs_segment) = {
            let log = inner.log.borrow();
            let current = log.segment_start(log.write_offset);
            (
                log.dir.clone(),
                log.segment_bytes,
                !log.segments.contains_key(&current),
            )
        };
        if storage::spare_ready(&dir, size).await? {
            inner.spare.set(Spare::Ready);
            return Ok(());
        }
        inner.spare.set(Spare::Absent);
        if needs_segment {
            // Nothing is served yet: fill at the disk's full speed.
            self.start_spare(false);
            while inner.spare.get() == Spare::Filling {
                inner.signals.spare_filled.wait().await;
            }
        } else {
            self.fill_spare();
        }
        Ok(())
    }

    /// Starts filling a spare segment in the background unless one is ready or filling.
    /// It is paced by the log: kept ahead of twice the log's progress through its current
    /// segment (so it is ready before the log needs it), otherwise trickled. Filled flat
    /// out, it held every durable send at 20,000/s above 1 ms for a second; at a steady
    /// 128 MiB/s, a third of them for eight seconds.
    pub(super) fn fill_spare(&self) {
        self.start_spare(true);
    }

    fn start_spare(&self, paced: bool) {
        let inner = &self.inner;
        // On a full disk a spare would only take the last free space; the roll after the
        // disk has room again fills one.
        let full = inner.disk.get().1 == DiskLevel::Full;
        if inner.spare.get() != Spare::Absent || inner.closed.get() || full {
            return;
        }
        inner.spare.set(Spare::Filling);
        let (dir, size) = {
            let log = inner.log.borrow();
            (log.dir.clone(), log.segment_bytes)
        };
        let weak = Rc::downgrade(inner);
        let log_of = weak.clone();
        let pace = move |filled: u64| {
            let inner = log_of.upgrade().filter(|i| !i.closed.get())?;
            if !paced {
                return Some(Duration::ZERO);
            }
            let log = inner.log.borrow();
            let into = log.write_offset - log.segment_start(log.write_offset);
            let behind = filled < (2 * into).min(size);
            Some(Duration::from_millis(if behind { 1 } else { 20 }))
        };
        let storage = inner.storage.clone();
        glommio::spawn_local(async move {
            let filled = storage::fill_spare(dir, size, &storage, pace).await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let next = match filled {
                Ok(storage::Filled::Ready) => Spare::Ready,
                Ok(storage::Filled::Unsupported) => Spare::Off,
                Ok(storage::Filled::Abandoned) => Spare::Absent,
                Err(e) => {
                    // The next segment is made the usual way; the one after tries again.
                    tracing::warn!(error = %e, "cannot fill a warm spare segment");
                    Spare::Absent
                }
            };
            inner.spare.set(next);
            inner.signals.spare_filled.notify_all();
        })
        .detach();
    }
}
