//! Request-reply (RocketMQ 4.6+) on the client side: the requests waiting for a reply, and
//! the reply a consumer builds from a request it received.
//!
//! A requester ([`crate::Producer::request`]) sends an ordinary message carrying
//! `CORRELATION_ID`, `REPLY_TO_CLIENT` (the producer's client id), `TTL` (the timeout) and
//! `CLUSTER`, and waits. The consumer that receives it builds the answer with
//! [`create_reply_message`] and sends it with [`crate::Producer::reply`]; the broker pushes
//! it over the requester's connection, where the connection's reader hands it to the
//! waiting request by correlation id.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use message::RecordView;

use crate::error::{ClientError, Result};
use crate::model::{message_ext_with_body, owned_body, Message, MessageExt};

pub use message::reply::{prop, reply_topic, REPLY_MESSAGE_FLAG};

/// Whether `msg` is a reply (sent with [`crate::Producer::reply`]).
pub(crate) fn is_reply(msg: &Message) -> bool {
    msg.properties
        .iter()
        .any(|(k, v)| k == prop::MSG_TYPE && v == REPLY_MESSAGE_FLAG)
}

/// The reply to `request` with `body`, as RocketMQ's `MessageUtil.createReplyMessage`
/// builds it: to the request's cluster's reply topic, with the request's correlation id,
/// requester and TTL. Fails when `request` is not a request (no `CLUSTER` or
/// `REPLY_TO_CLIENT`).
pub fn create_reply_message(request: &MessageExt, body: impl Into<Bytes>) -> Result<Message> {
    let get = |k: &str| {
        request
            .property(k)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ClientError::InvalidMessage(format!(
                    "create reply message fail, requestMessage error, property[{k}] is null"
                ))
            })
    };
    let cluster = get(prop::CLUSTER)?;
    let requester = get(prop::REPLY_TO_CLIENT)?;
    let correlation = get(prop::CORRELATION_ID)?;
    let mut reply = Message::new(reply_topic(cluster), body)
        .with_property(prop::MSG_TYPE, REPLY_MESSAGE_FLAG)
        .with_property(prop::CORRELATION_ID, correlation)
        .with_property(prop::REPLY_TO_CLIENT, requester);
    if let Some(ttl) = request.property(prop::TTL) {
        reply = reply.with_property(prop::TTL, ttl);
    }
    Ok(reply)
}

/// Requests waiting for their reply, by correlation id.
#[derive(Default)]
pub struct ReplyWaiters {
    waiting: Mutex<HashMap<String, SyncSender<MessageExt>>>,
}

/// Largest reply body a requester inflates.
const REPLY_BODY_BYTES_MAX: usize = 64 << 20;

impl ReplyWaiters {
    /// Registers a request; the reply arrives on the receiver. [`ReplyWaiters::forget`] it
    /// when done (answered or timed out).
    pub(crate) fn wait(&self, correlation_id: &str) -> Receiver<MessageExt> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.lock().insert(correlation_id.to_owned(), tx);
        rx
    }

    pub(crate) fn forget(&self, correlation_id: &str) {
        self.lock().remove(correlation_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SyncSender<MessageExt>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A reply the broker pushed (one record): handed to its request, or dropped (logged)
    /// when none waits for it any more (it timed out).
    pub(crate) fn deliver(&self, record: &[u8]) {
        let view = match RecordView::parse(record) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("a pushed reply is not a record: {e}");
                return;
            }
        };
        let body = match owned_body(&view, "broker", REPLY_BODY_BYTES_MAX) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("a pushed reply's body cannot be read: {e}");
                return;
            }
        };
        let msg = message_ext_with_body(&view, 0, body);
        let Some(correlation) = msg.property(prop::CORRELATION_ID).map(str::to_owned) else {
            tracing::warn!("a pushed reply carries no correlation id");
            return;
        };
        let waiter = self.lock().remove(&correlation);
        match waiter {
            Some(tx) => {
                let _ = tx.try_send(msg);
            }
            None => tracing::warn!(
                correlation_id = %correlation,
                "a reply came for no waiting request (it timed out)"
            ),
        }
    }
}

/// Hands out the waiting slot of one request and frees it when dropped.
pub(crate) struct Waiting<'a> {
    pub rx: Receiver<MessageExt>,
    waiters: &'a Arc<ReplyWaiters>,
    correlation_id: String,
}

impl<'a> Waiting<'a> {
    pub(crate) fn new(waiters: &'a Arc<ReplyWaiters>, correlation_id: &str) -> Waiting<'a> {
        Waiting {
            rx: waiters.wait(correlation_id),
            waiters,
            correlation_id: correlation_id.to_owned(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waiters.forget(&self.correlation_id);
    }
}
