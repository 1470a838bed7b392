//! How the kernel reaches a client: through the front end that serves its connection.
//!
//! The kernel knows no connection and no wire protocol. When it must ask a client something
//! (its running info, a transaction's state), push it a reply, or tell it its group changed,
//! it calls [`ClientLink`] with plain values, and each core's front end implements it over
//! the connections it serves, in the protocol each connection speaks. A core without a front end (the in-process tests', say) reaches no client.

use std::future::Future;
use std::net::SocketAddrV4;
use std::pin::Pin;

use bytes::Bytes;
use protocol::{CheckTransaction, ClientRunningInfo, CoreStatus, TransactionState};

use crate::error::BrokerError;
use crate::lite::Evicted;

/// A future on the core's own executor.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What the kernel asks of the clients connected to this core.
pub trait ClientLink {
    /// Asks client `client_id`, on its connection to this core, what it is doing (its
    /// consumers, their subscriptions and progress); `None` when no connection of the
    /// client is served here.
    fn running_info(
        &self,
        client_id: &str,
    ) -> LocalFuture<'_, Option<Result<ClientRunningInfo, BrokerError>>>;

    /// Whether a connection of client `client_id` is served here.
    fn connected(&self, client_id: &str) -> bool;

    /// Pushes `reply` to its requester `client_id` on its connection to this core; `false`
    /// when no connection of the requester is served here.
    fn push_reply<'a>(
        &'a self,
        client_id: &'a str,
        reply: &'a ReplyPush,
    ) -> LocalFuture<'a, Result<bool, BrokerError>>;

    /// Tells the members of `group` connected here that its members are now `members`, so
    /// they rebalance at once.
    fn group_changed<'a>(&'a self, group: &'a str, members: &'a [String]) -> LocalFuture<'a, ()>;

    /// Tells client `evicted.client`, where it is connected here, that it no longer holds
    /// lite topic `evicted.lite` (RocketMQ's NotifyUnsubscribeLite: another client of its
    /// Exclusive group took it); whether it was connected here.
    fn lite_unsubscribed<'a>(&'a self, evicted: &'a Evicted) -> LocalFuture<'a, bool>;

    /// Asks a producer of the check's group connected here about an undecided
    /// transaction. `None`: none is connected here; `Some(None)`: a producer was asked and
    /// answers later (RocketMQ's END_TRANSACTION); `Some(Some(state))`: its answer.
    fn check_transaction(
        &self,
        check: CheckTransaction,
    ) -> LocalFuture<'_, Option<Option<TransactionState>>>;

    /// Adds this core's connection counters to its status.
    fn fill_status(&self, status: &mut CoreStatus);
}

/// The link of a core no client reaches.
pub struct NoClients;

impl ClientLink for NoClients {
    fn running_info(
        &self,
        _: &str,
    ) -> LocalFuture<'_, Option<Result<ClientRunningInfo, BrokerError>>> {
        Box::pin(async { None })
    }

    fn connected(&self, _: &str) -> bool {
        false
    }

    fn push_reply<'a>(
        &'a self,
        _: &'a str,
        _: &'a ReplyPush,
    ) -> LocalFuture<'a, Result<bool, BrokerError>> {
        Box::pin(async { Ok(false) })
    }

    fn group_changed<'a>(&'a self, _: &'a str, _: &'a [String]) -> LocalFuture<'a, ()> {
        Box::pin(async {})
    }

    fn lite_unsubscribed<'a>(&'a self, _: &'a Evicted) -> LocalFuture<'a, bool> {
        Box::pin(async { false })
    }

    fn check_transaction(
        &self,
        _: CheckTransaction,
    ) -> LocalFuture<'_, Option<Option<TransactionState>>> {
        Box::pin(async { None })
    }

    fn fill_status(&self, _: &mut CoreStatus) {}
}

/// A reply on its way to its requester: the message as the replier sent it.
#[derive(Debug, Clone)]
pub struct ReplyPush {
    pub producer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub body: Bytes,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: Option<SocketAddrV4>,
    pub reconsume_times: i32,
    /// Every property but the CRC trailer, in order.
    pub properties: Vec<(String, String)>,
}

impl ReplyPush {
    pub(crate) fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The requester's client id.
    pub fn requester(&self) -> Option<&str> {
        self.property(message::reply::prop::REPLY_TO_CLIENT)
            .filter(|c| !c.is_empty())
    }

    /// The reply as one record in the stored layout (what a native requester decodes).
    pub fn record(&self) -> Result<Vec<u8>, BrokerError> {
        let props: Vec<(&str, &str)> = self
            .properties
            .iter()
            .filter(|(k, _)| k != message::prop::CRC)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut out = Vec::with_capacity(self.body.len() + 256);
        message::encode_record(
            &message::MessageFields {
                topic: &self.topic,
                body: &self.body,
                flag: self.flag,
                sys_flag: self.sys_flag,
                born_timestamp_ms: self.born_timestamp_ms,
                born_host: self.born_host,
                reconsume_times: self.reconsume_times,
                properties: &props,
            },
            &mut out,
        )
        .map_err(|e| BrokerError::MessageIllegal(e.to_string()))?;
        Ok(out)
    }
}
