//! How the kernel reaches a client: through the front end that serves its connection.
//!
//! The kernel knows no connection and no wire protocol. When it must ask a client something
//! (its running info, a transaction's state), push it a reply, or tell it its group changed,
//! it calls [`ClientLink`] with plain values, and each core's front end implements it over
//! the connections it serves, in the protocol each connection speaks. A core without a front end (the in-process tests', say) reaches no client.

use std::future::Future;
use std::pin::Pin;

use protocol::{CheckTransaction, ClientRunningInfo, CoreStatus, TransactionState};

use crate::error::BrokerError;
use crate::reply::ReplyPush;

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

    fn check_transaction(
        &self,
        _: CheckTransaction,
    ) -> LocalFuture<'_, Option<Option<TransactionState>>> {
        Box::pin(async { None })
    }

    fn fill_status(&self, _: &mut CoreStatus) {}
}
