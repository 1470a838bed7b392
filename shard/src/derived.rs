//! The indexes derived from each stored record: its ConsumeQueue entry and its IndexFile
//! keys. One function writes them, called by the append (a new record) and by recovery (a
//! record found in the log), so the two can never derive differently. A new per-record
//! index (a timer wheel for scheduled messages, a transaction op index, a replica applying
//! what it receives) is added here, and both paths get it.

use message::{IndexedProperties, RecordView};

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
    /// Held by the timer ([`queue_of`]): its entry is in the timer queue, and its keys are
    /// indexed when it is delivered (by the delivered copy), not now.
    pub(crate) held: bool,
}

/// The transaction type bits of sysFlag (RocketMQ's MessageSysFlag) and the two types the
/// timer never holds.
const TRANSACTION_TYPE_MASK: i32 = 0xC;
const TRANSACTION_PREPARED: i32 = 0x4;
const TRANSACTION_ROLLBACK: i32 = 0xC;

/// The ConsumeQueue a record's entry goes to: its own queue, or for a record held until a
/// delivery time (`message::timer::held`), the shard's timer queue
/// (`message::timer::TIMER_QUEUE_TOPIC`, queue 0), whose entries the broker's timer reads.
/// The record keeps its topic and queue id; only its queue offset is the timer queue's. One
/// function for the append, recovery and a replica, so they always agree.
pub(crate) fn queue_of<'a>(
    view: &RecordView<'a>,
    props: &IndexedProperties<'_>,
) -> (&'a str, u32, bool) {
    // As RocketMQ's CommitLog: a transaction's half message (PREPARED) and a rollback are
    // never held; the delay applies to the committed message.
    let tran = view.sys_flag() & TRANSACTION_TYPE_MASK;
    let transactional_half = tran == TRANSACTION_PREPARED || tran == TRANSACTION_ROLLBACK;
    if props.timer && !transactional_half && message::timer::held(&view.properties()) {
        (message::timer::TIMER_QUEUE_TOPIC, 0, true)
    } else {
        (view.topic(), view.queue_id(), false)
    }
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
            if rec.held {
                return Ok(());
            }
            index.add_keys(rec.topic, rec.store_timestamp_ms, rec.props, phys, end)
        }
        Derive::Recover { index_from } => {
            let q = rec.queue_offset;
            if cq.get(q)? != Some(entry) {
                cq.put(q, entry)?;
            }
            cq.recovered_to = cq.recovered_to.max(QueueOffset(q.0 + 1));
            if phys >= index_from && !rec.held {
                index.add_keys(rec.topic, rec.store_timestamp_ms, rec.props, phys, end)?;
            }
            Ok(())
        }
    }
}
