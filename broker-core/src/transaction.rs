//! Transactional messages, RocketMQ's design per shard (ARCHITECTURE.md, "Transactional
//! messages").
//!
//! * A prepared message (property `TRAN_MSG=true`, or sysFlag TRANSACTION_PREPARED) is
//!   stored as a *half message* in the system topic [`HALF_TOPIC`], in the queue of the shard
//!   that owns its real queue (queue id = the shard), with `REAL_TOPIC` / `REAL_QID`
//!   naming where it goes once committed. Consumers never see it: system topics are not in
//!   the topic table, so they are in no route and no pull reaches them.
//! * END_TRANSACTION with commit appends the message to its real queue (sysFlag COMMIT, the
//!   same UNIQ_KEY) and then an *op record* to [`OP_TOPIC`] (body: the half's queue offset,
//!   tag `d`); rollback appends only the op record. Everything is appended through the
//!   shard's ordinary append path, so replication, flushing and crash safety are the same as
//!   for any send.
//! * A check pass per core, every `transaction_check_interval_ms`, scans each master shard's
//!   half queue from its check offset (the offset of group [`CHECK_GROUP`], flushed with the
//!   other group offsets). A half without an op record, older than
//!   `transaction_timeout_ms`, is appended again with `TRANSACTION_CHECK_TIMES` + 1 and the
//!   producer group is asked about the new copy over one of its connections
//!   (CHECK_TRANSACTION_STATE); one checked `transaction_check_max` times is discarded and
//!   logged.
//! * The op index (which half offsets are decided) is kept in memory per shard, bounded by
//!   the undecided window: entries below the check offset are dropped. It is rebuilt at start
//!   by reading the op queue from the op offset stored beside the check offset (the oldest op
//!   record that may still name a half at or after the check offset).
//! * A commit appends the real message first: a crash between it and the op record leaves
//!   the half undecided, and before checking it back (or committing it again) the shard
//!   looks the real message up by its UNIQ_KEY in the IndexFile, so a committed transaction
//!   is delivered once.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use message::{encode_record, MessageFields, RecordView, TagFilter};
use protocol::{CheckTransaction, EndTransaction, GroupQueue, TransactionState};

use crate::core::Core;
use crate::error::BrokerError;

/// RocketMQ's system topic of half messages.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// RocketMQ's system topic of op records (decided half messages).
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// The system group whose offsets are the check pass's positions.
pub const CHECK_GROUP: &str = "CID_SYS_RMQ_TRANS";
/// The op record's tag (RocketMQ's TransactionalMessageUtil.REMOVETAG).
const OP_TAG: &str = "d";

/// Property names (MessageConst).
pub mod prop {
    pub const TRAN_MSG: &str = "TRAN_MSG";
    pub const PGROUP: &str = "PGROUP";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// The half's unique key, kept on the committed message (RocketMQ's
    /// `PROPERTY_TRANSACTION_ID`).
    pub const TRANSACTION_ID: &str = "__transactionId__";
}

/// The transaction type bits of sysFlag (MessageSysFlag).
pub mod sys_flag {
    pub const TYPE_MASK: i32 = 0xC;
    pub const PREPARED: i32 = 0x4;
    pub const COMMIT: i32 = 0x8;
    pub const ROLLBACK: i32 = 0xC;
}

/// Half messages read per step of a check pass.
const CHECK_BATCH: u32 = 64;

/// Whether the batch is one prepared transactional message.
pub fn is_prepared(records: &[u8], count: u32) -> bool {
    if count != 1 {
        return false;
    }
    let Ok(view) = RecordView::parse(records) else {
        return false;
    };
    // A committed one (delivered again by the timer, say) keeps TRAN_MSG=true but is no
    // longer prepared.
    match view.sys_flag() & sys_flag::TYPE_MASK {
        sys_flag::PREPARED => true,
        0 => view.property(prop::TRAN_MSG) == Some("true"),
        _ => false,
    }
}

/// Re-encodes a record with another topic and sysFlag, the properties `drop` names left
/// out and `add` appended; the store fields are left for the shard to stamp.
fn rewrite(
    view: &RecordView<'_>,
    topic: &str,
    sys: i32,
    drop: &[&str],
    add: &[(&str, &str)],
) -> Result<Vec<u8>, BrokerError> {
    rewrite_with_body(view, view.body(), topic, sys, drop, add)
}

fn rewrite_with_body(
    view: &RecordView<'_>,
    body: &[u8],
    topic: &str,
    sys: i32,
    drop: &[&str],
    add: &[(&str, &str)],
) -> Result<Vec<u8>, BrokerError> {
    let mut props: Vec<(&str, &str)> = view
        .properties()
        .iter()
        .filter(|(k, _)| *k != message::prop::CRC && !drop.contains(k))
        .collect();
    props.extend_from_slice(add);
    let mut out = Vec::with_capacity(view.len() + 64);
    encode_record(
        &MessageFields {
            topic,
            body,
            flag: view.flag(),
            sys_flag: sys,
            born_timestamp_ms: view.born_timestamp_ms(),
            born_host: Some(view.born_host()),
            reconsume_times: view.reconsume_times(),
            properties: &props,
        },
        &mut out,
    )
    .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
    Ok(out)
}

/// The half message of a prepared one bound for `topic` / `queue_id`.
pub fn half_record(records: &[u8], topic: &str, queue_id: u32) -> Result<Bytes, BrokerError> {
    let view =
        RecordView::parse(records).map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
    let sys = (view.sys_flag() & !sys_flag::TYPE_MASK) | sys_flag::PREPARED;
    let qid = queue_id.to_string();
    let mut add = vec![(prop::REAL_TOPIC, topic), (prop::REAL_QID, qid.as_str())];
    if let Some(uniq) = view.uniq_key() {
        add.push((prop::TRANSACTION_ID, uniq));
    }
    let rec = rewrite(
        &view,
        HALF_TOPIC,
        sys,
        &[
            prop::REAL_TOPIC,
            prop::REAL_QID,
            prop::CHECK_TIMES,
            prop::TRANSACTION_ID,
        ],
        &add,
    )?;
    Ok(Bytes::from(rec))
}

/// One shard's transaction state on its core.
#[derive(Default)]
struct ShardTx {
    /// The master epoch of the shard in which the op index was rebuilt from the op queue:
    /// a core that becomes master (a new epoch) rebuilds it from all its log then holds,
    /// decisions its former master wrote included.
    loaded: Option<u32>,
    /// The next half-queue offset the check pass looks at.
    check_offset: u64,
    /// Decided half offsets (at or after `check_offset`) and the op-queue offset of the op
    /// record that decided each.
    ops: BTreeMap<u64, u64>,
}

/// Every local shard's transaction state (on its core).
#[derive(Default)]
pub struct Transactions {
    shards: RefCell<HashMap<u16, ShardTx>>,
}

fn check_key(topic: &str, shard: u16) -> GroupQueue {
    GroupQueue {
        group: CHECK_GROUP.to_owned(),
        topic: topic.to_owned(),
        queue_id: u32::from(shard),
    }
}

/// Whether an op record decided the half at `half_offset`. Below the check offset the index
/// no longer knows: a late decision for a half that was checked (and so copied) since is
/// applied, and the lookup by UNIQ_KEY keeps a commit from storing the message twice.
fn is_decided(core: &Core, shard: u16, half_offset: u64) -> bool {
    core.transactions
        .shards
        .borrow()
        .get(&shard)
        .is_some_and(|s| s.ops.contains_key(&half_offset))
}

/// Reads the stored check offset and rebuilds the op index from the op queue (once per
/// master epoch).
async fn ensure_loaded(core: &Core, shard: u16) -> Result<(), BrokerError> {
    let Some(epoch) = core.master_epoch(shard) else {
        return Err(BrokerError::NotMaster(format!(
            "shard {shard} of core {} is not served as master: transactions are its master's",
            core.id
        )));
    };
    {
        let mut st = core.transactions.shards.borrow_mut();
        let s = st.entry(shard).or_default();
        match s.loaded {
            Some(e) if e == epoch => return Ok(()),
            // Rebuilt in an earlier epoch: decisions written since are not in it.
            Some(_) => {
                s.loaded = None;
                s.ops.clear();
            }
            None => {}
        }
    }
    let (check_offset, mut op_offset) = {
        let Some(table) = core.offsets.get(&shard) else {
            return Err(BrokerError::Storage(format!(
                "shard {shard} is not hosted on core {}",
                core.id
            )));
        };
        let t = table.borrow();
        (
            t.query(&check_key(HALF_TOPIC, shard))
                .map_or(0, |s| s.offset),
            t.query(&check_key(OP_TOPIC, shard)).map_or(0, |s| s.offset),
        )
    };
    core.transactions
        .shards
        .borrow_mut()
        .entry(shard)
        .or_default()
        .check_offset = check_offset;
    let sh = core.local_shard(shard)?;
    let filter = TagFilter::All;
    loop {
        let r = sh
            .read(&shard::ReadRequest {
                topic: OP_TOPIC,
                queue_id: u32::from(shard),
                queue_offset: shard::QueueOffset(op_offset),
                max_messages: 256,
                max_bytes: 1 << 20,
                filter: &filter,
            })
            .await?;
        if r.next_queue_offset.0 <= op_offset {
            break;
        }
        let mut st = core.transactions.shards.borrow_mut();
        let s = st.entry(shard).or_default();
        for rec in &r.records {
            let Ok(view) = RecordView::parse(rec.as_bytes()) else {
                continue;
            };
            let half = std::str::from_utf8(view.body())
                .ok()
                .and_then(|b| b.trim().parse::<u64>().ok());
            if let Some(half) = half.filter(|&h| h >= s.check_offset) {
                s.ops.insert(half, view.queue_offset());
            }
        }
        op_offset = r.next_queue_offset.0;
    }
    let mut st = core.transactions.shards.borrow_mut();
    let s = st.entry(shard).or_default();
    s.loaded = Some(epoch);
    tracing::debug!(
        shard,
        check_offset,
        decided = s.ops.len(),
        "transaction op index rebuilt"
    );
    Ok(())
}

/// Moves the check offset to `to`, drops the op index below it and stores both positions
/// (in one step, so a flush of the offsets table sees them together).
fn advance(core: &Core, shard: u16, to: u64) {
    let op_offset = {
        let mut st = core.transactions.shards.borrow_mut();
        let s = st.entry(shard).or_default();
        if to <= s.check_offset {
            return;
        }
        s.check_offset = to;
        s.ops = s.ops.split_off(&to);
        s.ops.values().min().copied()
    };
    let Some(table) = core.offsets.get(&shard) else {
        return;
    };
    let mut t = table.borrow_mut();
    let op_offset = op_offset.unwrap_or_else(|| {
        core.shards
            .get(&shard)
            .map_or(0, |sh| sh.queue_offsets(OP_TOPIC, u32::from(shard)).max.0)
    });
    let any = crate::groups::EPOCH_ANY;
    t.commit(&check_key(HALF_TOPIC, shard), to, any, "", false);
    t.commit(&check_key(OP_TOPIC, shard), op_offset, any, "", false);
}

/// Whether the real message of a half has been stored already (a commit whose op record a
/// crash lost, or a second commit of a half that was checked again): looked up by UNIQ_KEY.
async fn committed_already(
    core: &Core,
    shard: u16,
    real_topic: &str,
    uniq_key: Option<&str>,
) -> Result<bool, BrokerError> {
    let Some(key) = uniq_key else {
        return Ok(false);
    };
    let found = core
        .local_shard(shard)?
        .query_by_key(real_topic, key, 0, i64::MAX, 16)
        .await?;
    Ok(found.iter().any(|s| {
        RecordView::parse(s.as_bytes()).is_ok_and(|v| {
            v.topic() == real_topic
                && v.uniq_key() == Some(key)
                && v.sys_flag() & sys_flag::TYPE_MASK == sys_flag::COMMIT
        })
    }))
}

/// Appends the op record that decides the half at `half_offset`, and notes it.
async fn write_op(core: &Core, shard: u16, half_offset: u64) -> Result<(), BrokerError> {
    let body = half_offset.to_string();
    let mut rec = Vec::with_capacity(128);
    encode_record(
        &MessageFields {
            topic: OP_TOPIC,
            body: body.as_bytes(),
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: core.shared.clock.wall_ms(),
            born_host: Some(core.store_host()),
            reconsume_times: 0,
            properties: &[(message::prop::TAGS, OP_TAG)],
        },
        &mut rec,
    )
    .map_err(|e| BrokerError::Storage(e.to_string()))?;
    let a = core
        .append_local(shard, OP_TOPIC, u32::from(shard), &rec, 1)
        .await?;
    core.transactions
        .shards
        .borrow_mut()
        .entry(shard)
        .or_default()
        .ops
        .insert(half_offset, a.first_queue_offset.0);
    Ok(())
}

/// Applies a producer's decision to a half message of `shard` (on the shard's core).
pub async fn end_local(core: &Core, shard: u16, end: EndTransaction) -> Result<(), BrokerError> {
    let sh = core.local_shard(shard)?;
    let Some(slice) = sh
        .read_at(shard::CommitLogOffset(end.commit_log_offset))
        .await?
    else {
        return Err(BrokerError::NotFound(format!(
            "no half message at offset {} of shard {shard}",
            end.commit_log_offset
        )));
    };
    let view = RecordView::parse(slice.as_bytes())
        .map_err(|e| BrokerError::Storage(format!("half message unreadable: {e}")))?;
    if view.topic() != HALF_TOPIC || view.queue_offset() != end.queue_offset {
        return Err(BrokerError::BadRequest(format!(
            "offset {} of shard {shard} holds no half message at half-queue offset {}",
            end.commit_log_offset, end.queue_offset
        )));
    }
    if let Some(group) = view.property(prop::PGROUP) {
        if !end.producer_group.is_empty() && group != end.producer_group {
            return Err(BrokerError::BadRequest(format!(
                "the half message belongs to producer group {group}, not {}",
                end.producer_group
            )));
        }
    }
    if end.state == TransactionState::Unknown {
        return Ok(());
    }
    // Loaded before deciding, so that a decision already in the op queue is known.
    ensure_loaded(core, shard).await?;
    if is_decided(core, shard, end.queue_offset) {
        return Ok(());
    }
    if end.state == TransactionState::Commit {
        let real_topic = view
            .property(prop::REAL_TOPIC)
            .ok_or_else(|| BrokerError::Storage("half message without REAL_TOPIC".into()))?;
        let real_qid: u32 = view
            .property(prop::REAL_QID)
            .and_then(|q| q.parse().ok())
            .ok_or_else(|| BrokerError::Storage("half message without REAL_QID".into()))?;
        let owner = protocol::queue_owner_shard(real_topic, real_qid, core.shared.shard_count);
        if owner != shard {
            return Err(BrokerError::Storage(format!(
                "half message of shard {shard} is for queue {real_qid} of {real_topic}, owned by shard {owner}"
            )));
        }
        if !committed_already(core, shard, real_topic, view.uniq_key()).await? {
            let sys = (view.sys_flag() & !sys_flag::TYPE_MASK) | sys_flag::COMMIT;
            // The half's properties stay, REAL_TOPIC, REAL_QID and the transaction id
            // included, as on RocketMQ's committed messages.
            let mut rec = rewrite(&view, real_topic, sys, &[], &[])?;
            // Where the half lies, as RocketMQ's committed messages say.
            let at = message::OFF_PREPARED_TX_OFFSET;
            rec[at..at + 8].copy_from_slice(&end.commit_log_offset.to_be_bytes());
            core.append_local(shard, real_topic, real_qid, &rec, 1)
                .await?;
        }
    }
    write_op(core, shard, end.queue_offset).await?;
    tracing::debug!(shard, msg_id = %end.msg_id, state = ?end.state, from_check = end.from_check, "transaction ended");
    Ok(())
}

/// Each local master shard's check pass, every `transaction_check_interval_ms`, for good.
pub async fn check_loop(core: Rc<Core>) {
    let every = Duration::from_millis(core.shared.config.transaction_check_interval_ms);
    loop {
        glommio::timer::sleep(every).await;
        if core.shared.stopping() {
            return;
        }
        let mut shards: Vec<u16> = core.shards.keys().copied().collect();
        shards.sort_unstable();
        for shard in shards {
            if core.ha.master(shard).is_none() {
                continue;
            }
            if let Err(e) = check_shard(&core, shard).await {
                tracing::warn!(shard, "transaction check pass stopped: {e}");
            }
        }
    }
}

async fn check_shard(core: &Rc<Core>, shard: u16) -> Result<(), BrokerError> {
    ensure_loaded(core, shard).await?;
    let cfg = &core.shared.config;
    let timeout_ms = cfg.transaction_timeout_ms as i64;
    let pass_start = core.shared.clock.wall_ms();
    let sh = core.local_shard(shard)?;
    let filter = TagFilter::All;
    loop {
        let from = core
            .transactions
            .shards
            .borrow()
            .get(&shard)
            .map_or(0, |s| s.check_offset);
        let r = sh
            .read(&shard::ReadRequest {
                topic: HALF_TOPIC,
                queue_id: u32::from(shard),
                queue_offset: shard::QueueOffset(from),
                max_messages: CHECK_BATCH,
                max_bytes: 4 << 20,
                filter: &filter,
            })
            .await?;
        // Retention took the oldest half messages: nothing before the queue's start is left.
        if from < r.min_offset.0 {
            advance(core, shard, r.min_offset.0);
            continue;
        }
        if r.records.is_empty() {
            // Entries stepped over (damaged records) move the offset on.
            advance(core, shard, r.next_queue_offset.0);
            return Ok(());
        }
        let mut next = from;
        for rec in &r.records {
            let Ok(view) = RecordView::parse(rec.as_bytes()) else {
                continue;
            };
            let o = view.queue_offset();
            if o < next {
                continue;
            }
            if is_decided(core, shard, o) {
                next = o + 1;
                continue;
            }
            let times: u32 = view
                .property(prop::CHECK_TIMES)
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            // Appended during this pass (a copy made for a check): next pass.
            if view.store_timestamp_ms() >= pass_start
                || (times == 0 && pass_start - view.store_timestamp_ms() < timeout_ms)
            {
                advance(core, shard, next);
                return Ok(());
            }
            let real_topic = view.property(prop::REAL_TOPIC).unwrap_or("");
            if committed_already(core, shard, real_topic, view.uniq_key()).await? {
                write_op(core, shard, o).await?;
                next = o + 1;
                continue;
            }
            if times >= cfg.transaction_check_max {
                tracing::warn!(
                    shard,
                    topic = real_topic,
                    msg_id = view.uniq_key().unwrap_or(""),
                    producer_group = view.property(prop::PGROUP).unwrap_or(""),
                    checks = times,
                    "transaction discarded: its producer did not decide it within transaction_check_max checks"
                );
                next = o + 1;
                continue;
            }
            let t = (times + 1).to_string();
            let copy = rewrite(
                &view,
                HALF_TOPIC,
                view.sys_flag(),
                &[prop::CHECK_TIMES],
                &[(prop::CHECK_TIMES, &t)],
            )?;
            let a = core
                .append_local(shard, HALF_TOPIC, u32::from(shard), &copy, 1)
                .await?;
            next = o + 1;
            advance(core, shard, next);
            let group = view.property(prop::PGROUP).unwrap_or("").to_owned();
            let check = CheckTransaction {
                producer_group: group,
                shard,
                commit_log_offset: a.first_commit_log_offset.0,
                queue_offset: a.first_queue_offset.0,
                msg_id: view.uniq_key().unwrap_or("").to_owned(),
                record: Vec::new(),
            };
            let core = core.clone();
            glommio::spawn_local(async move { check_back(&core, check).await }).detach();
        }
        // Every record of the batch is handled (an unreadable one is stepped over).
        advance(core, shard, next.max(r.next_queue_offset.0));
    }
}

/// Asks a producer of the half's group what became of it, on a connection of this core or
/// of another; a native producer's answer is applied here.
async fn check_back(core: &Rc<Core>, mut check: CheckTransaction) {
    let shard = check.shard;
    let record = match core.local_shard(shard) {
        Ok(sh) => match sh
            .read_at(shard::CommitLogOffset(check.commit_log_offset))
            .await
        {
            Ok(Some(s)) => s.to_bytes().to_vec(),
            _ => return,
        },
        Err(_) => return,
    };
    let Some(record) = check_record(&record) else {
        return;
    };
    check.record = record;
    let Some(state) = core.check_transaction(check.clone()).await else {
        tracing::debug!(shard, group = %check.producer_group, msg_id = %check.msg_id, "no producer of the group is connected to check a transaction with");
        return;
    };
    let end = EndTransaction {
        producer_group: check.producer_group,
        shard,
        commit_log_offset: check.commit_log_offset,
        queue_offset: check.queue_offset,
        msg_id: check.msg_id,
        state,
        from_check: true,
    };
    if let Err(e) = end_local(core, shard, end).await {
        tracing::warn!(shard, "a checked transaction could not be ended: {e}");
    }
}

/// The half message as a producer's check sees it (RocketMQ's broker does the same): under
/// its real topic and queue id, with the half's store fields (its offsets, times, hosts).
fn check_record(stored: &[u8]) -> Option<Vec<u8>> {
    let view = RecordView::parse(stored).ok()?;
    let topic = view.property(prop::REAL_TOPIC)?;
    let qid: u32 = view.property(prop::REAL_QID)?.parse().ok()?;
    let mut rec = rewrite(&view, topic, view.sys_flag(), &[], &[]).ok()?;
    let (from, to) = (message::OFF_QUEUE_ID, message::OFF_BODY_LEN);
    rec[from..to].copy_from_slice(&stored[from..to]);
    rec[from..from + 4].copy_from_slice(&qid.to_be_bytes());
    Some(rec)
}

/// The largest record a native check carries: it travels in the frame header
/// (`protocol::HEADER_BYTES_MAX`), so a larger one goes without its body.
pub const NATIVE_CHECK_RECORD_MAX: usize = 512 << 10;

/// `record` without its body (and so uncompressed), its store fields kept.
pub fn without_body(record: &[u8]) -> Option<Vec<u8>> {
    let view = RecordView::parse(record).ok()?;
    let sys =
        view.sys_flag() & !(message::sys_flag::COMPRESSED | message::sys_flag::COMPRESSION_MASK);
    let mut rec = rewrite_with_body(&view, &[], view.topic(), sys, &[], &[]).ok()?;
    let (from, to) = (message::OFF_QUEUE_ID, message::OFF_BODY_LEN);
    rec[from..to].copy_from_slice(&record[from..to]);
    let at = message::OFF_SYS_FLAG;
    rec[at..at + 4].copy_from_slice(&sys.to_be_bytes());
    Some(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(props: &[(&str, &str)], sys: i32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_record(
            &MessageFields {
                topic: "Orders",
                body: b"hello",
                sys_flag: sys,
                properties: props,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn prepared_by_property_or_flag() {
        assert!(is_prepared(&record(&[(prop::TRAN_MSG, "true")], 0), 1));
        assert!(is_prepared(&record(&[], sys_flag::PREPARED), 1));
        assert!(!is_prepared(&record(&[], 0), 1));
        assert!(!is_prepared(&record(&[(prop::TRAN_MSG, "false")], 0), 1));
        assert!(!is_prepared(
            &record(&[(prop::TRAN_MSG, "true")], sys_flag::COMMIT),
            1
        ));
        // A batch is never a transaction.
        let mut two = record(&[(prop::TRAN_MSG, "true")], 0);
        two.extend(record(&[], 0));
        assert!(!is_prepared(&two, 2));
    }

    #[test]
    fn half_names_the_real_queue() {
        let rec = record(&[("UNIQ_KEY", "K1"), (prop::TRAN_MSG, "true")], 0);
        let half = half_record(&rec, "Orders", 3).unwrap();
        let v = RecordView::parse(&half).unwrap();
        assert_eq!(v.topic(), HALF_TOPIC);
        assert_eq!(v.property(prop::REAL_TOPIC), Some("Orders"));
        assert_eq!(v.property(prop::REAL_QID), Some("3"));
        assert_eq!(v.uniq_key(), Some("K1"));
        assert_eq!(v.sys_flag() & sys_flag::TYPE_MASK, sys_flag::PREPARED);
        assert_eq!(v.body(), b"hello");
        let bare = without_body(&half).unwrap();
        let b = RecordView::parse(&bare).unwrap();
        assert!(b.body().is_empty());
        assert_eq!(b.property(prop::REAL_TOPIC), Some("Orders"));
        assert_eq!(b.queue_offset(), v.queue_offset());
    }
}
