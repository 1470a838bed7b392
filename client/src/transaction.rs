//! Transactional messages: RocketMQ's TransactionMQProducer.
//!
//! [`TransactionProducer::send_in_transaction`] stores the message as a half message
//! (invisible to consumers), runs the local transaction, and commits or rolls the message
//! back by what it returned. A transaction left [`TransactionState::Unknown`] (or whose end
//! was lost with a crash) is checked back by the broker after its `transaction_timeout_ms`:
//! the broker asks a producer of the group over that producer's connection, and
//! [`TransactionListener::check_local_transaction`] answers. The producer heartbeats its
//! group to every core of the brokers it sends to, so the broker knows where to ask, also
//! after a broker restart.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use message::{MsgOffsetId, RecordView};
use protocol::{Command, EndTransaction};

pub use protocol::TransactionState;

use crate::error::{ClientError, Result};
use crate::instance::Instance;
use crate::model::{
    message_ext_with_body, owned_body, Message, MessageExt, MessageQueue, SendResult,
};
use crate::producer::{Producer, ProducerBuilder};

/// The property that marks a prepared message, and the one naming its producer group.
const PROPERTY_TRANSACTION_PREPARED: &str = "TRAN_MSG";
const PROPERTY_PRODUCER_GROUP: &str = "PGROUP";

/// A body a check may carry at most (the broker's message limit).
const CHECK_BODY_BYTES_MAX: usize = 64 << 20;

/// The application's side of a transaction.
pub trait TransactionListener: Send + Sync + 'static {
    /// Runs the local transaction once the half message is stored. `Commit` delivers the
    /// message, `Rollback` drops it, `Unknown` leaves it to the broker's checks. A panic
    /// counts as `Unknown`.
    fn execute_local_transaction(&self, msg: &Message, sent: &SendResult) -> TransactionState;

    /// The broker asks about a transaction still undecided after its timeout. Runs on the
    /// connection's reader thread: answer quickly (the broker waits 3 s).
    fn check_local_transaction(&self, msg: &MessageExt) -> TransactionState;
}

/// Configures a [`TransactionProducer`].
pub struct TransactionProducerBuilder {
    producer: ProducerBuilder,
    heartbeat_interval_ms: u64,
}

impl Default for TransactionProducerBuilder {
    fn default() -> Self {
        TransactionProducerBuilder {
            producer: ProducerBuilder::new(),
            heartbeat_interval_ms: 10_000,
        }
    }
}

impl TransactionProducerBuilder {
    pub fn namesrv(mut self, addrs: impl Into<String>) -> Self {
        self.producer = self.producer.namesrv(addrs);
        self
    }

    /// The producer group: the broker checks a transaction back with any producer of it.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.producer = self.producer.group(group);
        self
    }

    pub fn send_timeout_ms(mut self, ms: u64) -> Self {
        self.producer = self.producer.send_timeout_ms(ms);
        self
    }

    /// How often the producer tells the brokers it sends to that it is alive for its group
    /// (default 10 s; at least 100 ms). A broker restarted meanwhile can check back only
    /// after the next one.
    pub fn heartbeat_interval_ms(mut self, ms: u64) -> Self {
        self.heartbeat_interval_ms = ms;
        self
    }

    pub fn build(self, listener: impl TransactionListener) -> Result<TransactionProducer> {
        if self.heartbeat_interval_ms < 100 {
            return Err(ClientError::Config(
                "heartbeat interval must be >= 100 ms".into(),
            ));
        }
        let producer = self.producer.build()?;
        let inst = Arc::clone(producer.instance());
        let listener: Arc<dyn TransactionListener> = Arc::new(listener);
        let checks = Arc::clone(&listener);
        *inst.checker.write().unwrap_or_else(PoisonError::into_inner) =
            Some(Arc::new(move |c| check(&*checks, c)));
        let shared = Arc::new(Shared {
            group: producer.group().to_owned(),
            client_id: format!("{}@{}@tx", inst.local_ip, std::process::id()),
            inst,
            topics: Mutex::new(BTreeSet::new()),
            stop: (Mutex::new(false), Condvar::new()),
        });
        let beat = Arc::clone(&shared);
        let every = Duration::from_millis(self.heartbeat_interval_ms);
        let thread = std::thread::Builder::new()
            .name("corvus-tx-heartbeat".into())
            .spawn(move || beat.heartbeat_loop(every))
            .map_err(|e| ClientError::Config(format!("cannot start the heartbeat thread: {e}")))?;
        Ok(TransactionProducer {
            producer,
            listener,
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }
}

/// Answers one check of the broker with the listener.
fn check(listener: &dyn TransactionListener, c: &protocol::CheckTransaction) -> TransactionState {
    let Ok(view) = RecordView::parse(&c.record) else {
        return TransactionState::Unknown;
    };
    let Ok(body) = owned_body(&view, "", CHECK_BODY_BYTES_MAX) else {
        return TransactionState::Unknown;
    };
    let msg = message_ext_with_body(&view, c.shard, body);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        listener.check_local_transaction(&msg)
    }))
    .unwrap_or(TransactionState::Unknown)
}

struct Shared {
    group: String,
    client_id: String,
    inst: Arc<Instance>,
    /// The topics sent to: their brokers get the heartbeats.
    topics: Mutex<BTreeSet<String>>,
    stop: (Mutex<bool>, Condvar),
}

impl Shared {
    /// Tells every core of the topic's brokers that this producer is alive for its group.
    fn heartbeat_topic(&self, topic: &str) {
        let Ok(route) = self.inst.routes.get(topic) else {
            return;
        };
        for broker in &route.data.brokers {
            let addrs = if broker.core_addrs.is_empty() {
                broker
                    .master_addr()
                    .map(str::to_owned)
                    .into_iter()
                    .collect()
            } else {
                broker.core_addrs.clone()
            };
            for addr in addrs {
                let hb = Command::ProducerHeartbeat {
                    group: self.group.clone(),
                    client_id: self.client_id.clone(),
                };
                if let Err(e) = self.inst.broker_request(&addr, hb) {
                    tracing::debug!(%addr, error = %e, "producer heartbeat failed");
                    // The broker may have restarted on other ports.
                    self.inst.routes.refresh_after_failure(topic);
                }
            }
        }
    }

    fn heartbeat_loop(&self, every: Duration) {
        loop {
            {
                let stopped = self.stop.0.lock().unwrap_or_else(PoisonError::into_inner);
                let (stopped, _) = self
                    .stop
                    .1
                    .wait_timeout_while(stopped, every, |s| !*s)
                    .unwrap_or_else(PoisonError::into_inner);
                if *stopped {
                    return;
                }
            }
            let topics: Vec<String> = self
                .topics
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect();
            for t in topics {
                self.heartbeat_topic(&t);
            }
        }
    }
}

/// What [`TransactionProducer::send_in_transaction`] did.
#[derive(Debug, Clone)]
pub struct TransactionSendResult {
    /// Where the half message was stored (its queue offset is the half queue's).
    pub send: SendResult,
    /// What the local transaction decided, as sent to the broker.
    pub state: TransactionState,
}

/// RocketMQ's TransactionMQProducer over the native protocol.
pub struct TransactionProducer {
    producer: Producer,
    listener: Arc<dyn TransactionListener>,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl TransactionProducer {
    pub fn builder() -> TransactionProducerBuilder {
        TransactionProducerBuilder::default()
    }

    /// Stores `msg` as a half message, runs the local transaction, and ends it by what the
    /// listener returned. An end that does not reach the broker is logged, not returned:
    /// the broker checks the transaction back.
    pub fn send_in_transaction(&self, msg: Message) -> Result<TransactionSendResult> {
        if msg.sharding_key.is_some() {
            return Err(ClientError::InvalidMessage(
                "a transactional message has no sharding key".into(),
            ));
        }
        let new_topic = self
            .shared
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(msg.topic.clone());
        if new_topic {
            self.shared.heartbeat_topic(&msg.topic);
        }
        let mut half = msg.clone();
        half.properties
            .retain(|(k, _)| k != PROPERTY_TRANSACTION_PREPARED && k != PROPERTY_PRODUCER_GROUP);
        half.properties
            .push((PROPERTY_TRANSACTION_PREPARED.into(), "true".into()));
        half.properties
            .push((PROPERTY_PRODUCER_GROUP.into(), self.shared.group.clone()));
        let sent = self.producer.send(half)?;
        if new_topic {
            // The topic may have been created by this send: its brokers hear of the group now.
            self.shared.heartbeat_topic(&msg.topic);
        }
        let state = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.listener.execute_local_transaction(&msg, &sent)
        }))
        .unwrap_or(TransactionState::Unknown);
        if let Err(e) = self.end(&sent, state) {
            tracing::warn!(msg_id = %sent.msg_id, error = %e, "the end of a transaction did not reach the broker; it will check back");
        }
        Ok(TransactionSendResult { send: sent, state })
    }

    fn end(&self, sent: &SendResult, state: TransactionState) -> Result<()> {
        let id = MsgOffsetId::parse(&sent.offset_msg_id).ok_or_else(|| ClientError::Protocol {
            addr: String::new(),
            detail: format!("bad offset msg id {}", sent.offset_msg_id),
        })?;
        let target = self.shared.inst.queue_target(&MessageQueue {
            topic: sent.topic.clone(),
            broker_name: sent.broker_name.clone(),
            queue_id: sent.queue_id,
        })?;
        let end = EndTransaction {
            producer_group: self.shared.group.clone(),
            shard: id.shard,
            commit_log_offset: sent.commit_log_offset.0,
            queue_offset: sent.queue_offset.0,
            msg_id: sent.msg_id.clone(),
            state,
            from_check: false,
        };
        self.shared
            .inst
            .broker_request(&target.addr, Command::EndTransaction(end))?;
        Ok(())
    }

    pub fn shutdown(&self) {
        *self
            .shared
            .stop
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.stop.1.notify_all();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
        self.producer.shutdown();
    }
}

impl Drop for TransactionProducer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
