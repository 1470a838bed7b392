//! The client: a producer, a pull consumer, a push consumer and admin requests over the
//! broker's native protocol, with std threads only.
//!
//! * Connections are pipelined and shared ([`remoting`]): one per address, many requests in
//!   flight, responses matched by request id, a bounded in-flight window per connection.
//! * Routes come from the NameServers and are cached per topic, refreshed in the background
//!   and after failures. Every queue request goes straight to the core that owns the queue.
//! * Bodies over the compression threshold are zstd-compressed by the producer and
//!   decompressed by consumers transparently.
//! * Request-reply ([`reply`]): `Producer::request(msg, timeout)` waits for the reply a
//!   consumer builds with [`create_reply_message`] and sends with `Producer::reply`; the
//!   broker pushes it over the requester's connection.
//! * Message trace ([`trace`], opt-in with `enable_trace`): Pub, SubBefore and SubAfter
//!   records in RocketMQ's format, written to `RMQ_SYS_TRACE_TOPIC` by a background thread.
//!
//! ```no_run
//! use client::{ConsumeFrom, ConsumeStatus, Message, Producer, PushConsumer};
//!
//! # fn main() -> client::Result<()> {
//! let producer = Producer::builder()
//!     .namesrv("127.0.0.1:9876;127.0.0.1:9877")
//!     .group("orders-producer")
//!     .build()?;
//! let sent = producer.send(Message::new("Orders", "hello").with_tags("TagA").with_key("order-1"))?;
//! println!("{} stored at {}#{}", sent.msg_id, sent.queue_id, sent.queue_offset);
//!
//! // Pipelined: the callback runs on a client thread; the call waits only when the
//! // connection's in-flight window is full.
//! producer.send_async(Message::new("Orders", "async"), |result| {
//!     if let Err(e) = result {
//!         eprintln!("send failed: {e}");
//!     }
//! })?;
//!
//! let consumer = PushConsumer::builder()
//!     .namesrv("127.0.0.1:9876")
//!     .subscribe("Orders", "TagA || TagB")
//!     .consume_from(ConsumeFrom::First)
//!     .build()?;
//! consumer.start(|msgs| {
//!     for m in msgs {
//!         println!("{} {:?}", m.msg_id, m.body);
//!     }
//!     ConsumeStatus::Success
//! })?;
//! # consumer.shutdown();
//! # Ok(())
//! # }
//! ```

// Tests may unwrap: a panic there is a test failure, not a crash on network input.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod admin;
pub mod allocate;
mod consumer;
mod error;
mod instance;
mod model;
mod namesrv;
mod producer;
mod pulled;
mod push;
pub mod remoting;
pub mod reply;
mod route;
pub mod trace;
mod transaction;

pub use admin::{Admin, QueueProgress};
pub use allocate::{AllocateStrategy, Averagely, AveragelyByCircle, ByConfig, ConsistentHash};
pub use consumer::{PendingPull, PullConsumer, PullOptions, Selector};
pub use error::{ClientError, Result};
pub use instance::ClientConfig;
pub use model::{
    BatchSendResult, CommitLogOffset, ConsumeStatus, Message, MessageExt, MessageQueue, PullResult,
    PullStatus, QueueOffset, SendResult,
};
pub use namesrv::parse_namesrv_list;
pub use producer::{
    BatchCallback, Producer, ProducerBuilder, SendCallback, MESSAGE_BYTES_MAX_DEFAULT,
    SEND_RETRIES_MAX,
};
pub use pulled::{PulledBatch, PulledMessage};
pub use push::{
    dlq_topic, retry_topic, ConsumeFrom, Listener, MessageModel, PushConsumer, PushConsumerBuilder,
    PROPERTY_DELIVER_AT_MS,
};
pub use remoting::set_default_tls;
pub use remoting::{default_credentials, set_default_credentials, Credentials};
pub use reply::{create_reply_message, reply_topic};
/// TLS settings for [`ClientConfig::with_tls`].
pub use tls;
#[cfg(test)]
mod testing;

pub use route::{queue_target_addr, read_target_addr, QueueTarget, TopicRoute};
pub use transaction::{
    TransactionListener, TransactionProducer, TransactionProducerBuilder, TransactionSendResult,
    TransactionState,
};
