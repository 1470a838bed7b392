//! GetOffset, UpdateOffset and QueryOffset: a group's committed offset of a queue and the
//! queue's bounds, for clients that keep their own position (the v5 SDKs' pull consumers).
//! The queue is named as the route numbers it for this core.

use grpc_proto::v2;
use protocol::{CommitOffset, GroupQueue};

use super::{error_status, name_of, ok, status, timestamp_ms};
use crate::error::BrokerError;
use crate::front::Front;
use crate::groups::EPOCH_ANY;
use crate::mesh::OffsetOp;
use crate::numbering::CoreQueues;

/// The topic and its queue id of a request's queue on this core.
fn queue_of(f: &Front, q: &Option<v2::MessageQueue>) -> Result<(String, u32), BrokerError> {
    let q = q
        .as_ref()
        .ok_or_else(|| BrokerError::BadRequest("no message queue named".into()))?;
    let topic = name_of(&q.topic).to_owned();
    let cfg = f.topic_for_read(&topic)?;
    let local = u32::try_from(q.id)
        .map_err(|_| BrokerError::BadRequest(format!("queue id {} is negative", q.id)))?;
    let global = CoreQueues::of(f, &topic, &cfg, f.id).global(&topic, local)?;
    Ok((topic, global))
}

pub(super) async fn get(f: &Front, r: &v2::GetOffsetRequest) -> v2::GetOffsetResponse {
    let answer = |status, offset| v2::GetOffsetResponse { status, offset };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e), 0),
    };
    let queue = GroupQueue {
        group: name_of(&r.group).to_owned(),
        topic,
        queue_id,
    };
    match f.group_offset(OffsetOp::Query(queue)).await {
        Ok(Some(stored)) => answer(ok(), stored.offset as i64),
        Ok(None) => answer(
            status(
                v2::Code::OffsetNotFound,
                "the group has no offset of this queue",
            ),
            0,
        ),
        Err(e) => answer(error_status(&e), 0),
    }
}

pub(super) async fn update(
    f: &Front,
    client: &str,
    r: &v2::UpdateOffsetRequest,
) -> v2::UpdateOffsetResponse {
    let answer = |status| v2::UpdateOffsetResponse { status };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e)),
    };
    let Ok(offset) = u64::try_from(r.offset) else {
        return answer(status(
            v2::Code::IllegalOffset,
            format!("offset {} is negative", r.offset),
        ));
    };
    let op = OffsetOp::Commit(CommitOffset {
        queue: GroupQueue {
            group: name_of(&r.group).to_owned(),
            topic,
            queue_id,
        },
        offset,
        // The v5 clients know no epochs: their commit is never taken as stale.
        epoch: EPOCH_ANY,
        client_id: client.to_owned(),
        release: false,
    });
    match f.group_offset(op).await {
        Ok(_) => answer(ok()),
        Err(e) => answer(error_status(&e)),
    }
}

pub(super) async fn query(f: &Front, r: &v2::QueryOffsetRequest) -> v2::QueryOffsetResponse {
    let answer = |status, offset| v2::QueryOffsetResponse { status, offset };
    let (topic, queue_id) = match queue_of(f, &r.message_queue) {
        Ok(q) => q,
        Err(e) => return answer(error_status(&e), 0),
    };
    let found = match v2::QueryOffsetPolicy::try_from(r.query_offset_policy) {
        Ok(v2::QueryOffsetPolicy::Beginning) => {
            f.queue_offsets(&topic, queue_id).await.map(|(min, _)| min)
        }
        Ok(v2::QueryOffsetPolicy::End) => {
            f.queue_offsets(&topic, queue_id).await.map(|(_, max)| max)
        }
        Ok(v2::QueryOffsetPolicy::Timestamp) => match &r.timestamp {
            Some(t) => f.search_offset(&topic, queue_id, timestamp_ms(t)).await,
            None => Err(BrokerError::BadRequest(
                "a TIMESTAMP query without a timestamp".into(),
            )),
        },
        Err(_) => Err(BrokerError::BadRequest(format!(
            "query offset policy {} is none of BEGINNING, END, TIMESTAMP",
            r.query_offset_policy
        ))),
    };
    match found {
        Ok(offset) => answer(ok(), offset as i64),
        Err(e) => answer(error_status(&e), 0),
    }
}
