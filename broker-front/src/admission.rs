//! The quota check at the front door: what a request asks of the quotas
//! (`broker_core::quota::Ask`), read from each protocol's request before any work is done,
//! and the count of refusals per limit in the metrics. Beside the ACL gate: a request the
//! ACL lets through is checked here next.

use std::cell::RefCell;

use broker_base::quota::ANONYMOUS;
use broker_core::quota::Ask;
use protocol::Command;
use remoting::codes::request;
use remoting::RemotingCommand;

use crate::client_conn::ClientConn;
use crate::error::BrokerError;
use crate::front::Front;

/// The account a connection of any protocol is counted under by the `connections` quota,
/// from its first send or pull until it closes.
#[derive(Debug, Default)]
pub struct QuotaSeat(RefCell<Option<String>>);

impl QuotaSeat {
    /// Whether the connection is counted already (its first send or pull was admitted).
    fn is_taken(&self) -> bool {
        self.0.borrow().is_some()
    }
}

impl Front {
    /// Lets `ask` through this core's quotas, or counts the refusal under its limit.
    pub fn admit(&self, ask: &Ask<'_>) -> Result<(), BrokerError> {
        let cfg = self.config();
        if !self.quotas.enforcing(&cfg) {
            return Ok(());
        }
        self.quotas
            .admit(ask, &cfg, std::time::Instant::now())
            .inspect_err(|e| {
                if let BrokerError::Quota(q) = e {
                    self.shared.metrics.count_quota_refusal(&q.limit);
                }
            })
    }

    /// Counts the connection of `seat` under `account` at its first send or pull (the
    /// account's `connections` quota), once.
    pub(crate) fn admit_connection(
        &self,
        seat: &QuotaSeat,
        account: &str,
    ) -> Result<(), BrokerError> {
        if seat.is_taken() {
            return Ok(());
        }
        self.quotas
            .connect(account, &self.config(), std::time::Instant::now())
            .inspect_err(|e| {
                if let BrokerError::Quota(q) = e {
                    self.shared.metrics.count_quota_refusal(&q.limit);
                }
            })?;
        *seat.0.borrow_mut() = Some(account.to_owned());
        Ok(())
    }

    /// The connection of `seat` closed: its account has one connection less.
    pub fn connection_closed(&self, seat: &QuotaSeat) {
        if let Some(account) = seat.0.borrow_mut().take() {
            self.quotas.disconnect(&account);
        }
    }

    /// The quota check of a native request with a body of `body_len` bytes, on `client`
    /// (its account is the one it logged in as).
    pub fn admit_native(
        &self,
        client: &ClientConn,
        command: &Command,
        body_len: usize,
    ) -> Result<(), BrokerError> {
        let key = client.access_key();
        let account = key.as_deref().unwrap_or(ANONYMOUS);
        if !matches!(
            command,
            Command::Send(_) | Command::SendReply(_) | Command::Pull(_) | Command::PullSql92 { .. }
        ) {
            return self.admit(&Ask::Other { account });
        }
        self.admit_connection(&client.quota_seat, account)?;
        match command {
            Command::Send(r) | Command::SendReply(r) => self.admit(&Ask::Send {
                account,
                topic: &r.topic,
                group: &r.producer_group,
                messages: u64::from(r.count.max(1)),
                bytes: body_len as u64,
            }),
            Command::Pull(p) | Command::PullSql92 { pull: p, .. } => self.admit(&Ask::Pull {
                account,
                topic: &p.topic,
                group: &p.consumer_group,
            }),
            _ => self.admit(&Ask::Other { account }),
        }
    }

    /// The quota check of a RocketMQ remoting request on `client` (its account is the
    /// signed one).
    pub fn admit_remoting(
        &self,
        client: &ClientConn,
        req: &RemotingCommand,
        body: &[u8],
    ) -> Result<(), BrokerError> {
        let field = |names: &[&str]| names.iter().find_map(|n| req.ext(n)).unwrap_or("");
        let data = matches!(
            req.code,
            request::SEND_MESSAGE
                | request::SEND_MESSAGE_V2
                | request::SEND_BATCH_MESSAGE
                | request::SEND_REPLY_MESSAGE
                | request::SEND_REPLY_MESSAGE_V2
                | request::PULL_MESSAGE
                | request::LITE_PULL_MESSAGE
                | request::POP_MESSAGE
                | request::POP_LITE_MESSAGE
        );
        // The header's fields are read only when a quota could use them: the connection is
        // counted once, and every later request of it looks at no field when no quota is set.
        if data && !client.quota_seat.is_taken() {
            self.admit_connection(
                &client.quota_seat,
                req.ext("AccessKey").unwrap_or(ANONYMOUS),
            )?;
        }
        if !self.quotas.enforcing(&self.config()) {
            return Ok(());
        }
        let account = req.ext("AccessKey").unwrap_or(ANONYMOUS);
        match req.code {
            request::SEND_MESSAGE
            | request::SEND_MESSAGE_V2
            | request::SEND_BATCH_MESSAGE
            | request::SEND_REPLY_MESSAGE
            | request::SEND_REPLY_MESSAGE_V2 => {
                let batch = req.code == request::SEND_BATCH_MESSAGE
                    || matches!(field(&["batch", "m"]), "true");
                self.admit(&Ask::Send {
                    account,
                    topic: field(&["topic", "b"]),
                    group: field(&["producerGroup", "a"]),
                    messages: if batch { batch_len(body) } else { 1 },
                    bytes: body.len() as u64,
                })
            }
            request::PULL_MESSAGE
            | request::LITE_PULL_MESSAGE
            | request::POP_MESSAGE
            | request::POP_LITE_MESSAGE => self.admit(&Ask::Pull {
                account,
                topic: field(&["topic"]),
                group: field(&["consumerGroup"]),
            }),
            _ => self.admit(&Ask::Other { account }),
        }
    }
}

/// How many messages a RocketMQ batch body holds: each starts with its total size (4
/// bytes, big-endian). Counted without decoding; a malformed tail counts as one more (the
/// send decodes it and refuses it).
fn batch_len(body: &[u8]) -> u64 {
    let mut count = 0u64;
    let mut at = 0usize;
    while at < body.len() {
        count += 1;
        let size = body
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_be_bytes) as usize;
        if size < 4 {
            break;
        }
        at = at.saturating_add(size);
    }
    count.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_counted_by_its_messages() {
        let mut body = Vec::new();
        for len in [20u32, 7, 100] {
            body.extend_from_slice(&len.to_be_bytes());
            body.extend(std::iter::repeat_n(0u8, len as usize - 4));
        }
        assert_eq!(batch_len(&body), 3);
        assert_eq!(batch_len(&[]), 1);
        assert_eq!(batch_len(&[0, 0]), 1);
        assert_eq!(batch_len(&[0, 0, 0, 8, 1, 1, 1, 1, 0]), 2);
    }
}
