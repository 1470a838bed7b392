//! The indexes derived from each stored record: its ConsumeQueue entry and its IndexFile
//! keys. One function writes them, called by the append (a new record) and by recovery (a
//! record found in the log), so the two can never derive differently. A new per-record
//! index (a timer wheel for scheduled messages, a transaction op index, a replica applying
//! what it receives) is added here, and both paths get it.

use message::IndexedProperties;

use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::index_file::IndexService;
use crate::offsets::{CommitLogOffset, QueueOffset};
use crate::ShardError;

/// One stored record, as its derived indexes see it.
pub(crate) struct StoredRecord<'a, 'p> {
    pub(crate) topic: &'a str,
    pub(crate) queue_offset: QueueOffset,
    pub(crate) commit_log_offset: CommitLogOffset,
    pub(crate) len: u32,
    pub(crate) store_timestamp_ms: i64,
    pub(crate) props: &'a IndexedProperties<'p>,
}

/// Why the record is being indexed.
#[derive(Clone, Copy)]
pub(crate) enum Derive {
    /// Appended now: every index takes it.
    Append,
    /// Found by recovery: a ConsumeQueue entry that lags or disagrees is rewritten (and the
    /// queue notes it as checked); keys are added only from `index_from` on (the IndexFile
    /// holds the ones before).
    Recover { index_from: u64 },
}

/// Writes `rec`'s derived entries: into `cq` (its queue's ConsumeQueue) and `index`.
pub(crate) fn derive(
    cq: &mut ConsumeQueue,
    index: &mut IndexService,
    rec: &StoredRecord<'_, '_>,
    how: Derive,
) -> Result<(), ShardError> {
    let entry = CqEntry {
        offset: rec.commit_log_offset,
        size: rec.len,
        tag_hash: rec.props.tag_hash(),
    };
    let phys = rec.commit_log_offset.0;
    let end = phys + u64::from(rec.len);
    match how {
        Derive::Append => {
            cq.put(rec.queue_offset, entry)?;
            index.add_keys(rec.topic, rec.store_timestamp_ms, rec.props, phys, end)
        }
        Derive::Recover { index_from } => {
            let q = rec.queue_offset;
            if cq.get(q)? != Some(entry) {
                cq.put(q, entry)?;
            }
            cq.recovered_to = cq.recovered_to.max(QueueOffset(q.0 + 1));
            if phys >= index_from {
                index.add_keys(rec.topic, rec.store_timestamp_ms, rec.props, phys, end)?;
            }
            Ok(())
        }
    }
}
