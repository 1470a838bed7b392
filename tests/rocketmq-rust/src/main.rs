//! An application of the Rust RocketMQ client (crates.io rocketmq-client-rust 1.0.0) against
//! corvus: a DefaultMQProducer sends COUNT messages with tags and keys, and a
//! DefaultMQPushConsumer of a new group, consuming from the first offset, must receive every
//! one of them.
//!
//! Usage: rocketmq-rust-roundtrip NAMESRV TOPIC COUNT GROUP. Prints SENT, RECEIVED n of m and
//! ALL RECEIVED; exits 0 only when every message sent was received (within 40 s).

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    ClientError, ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently, SendStatus,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

struct Collect(Arc<Mutex<HashSet<String>>>);

impl MessageListenerConcurrently for Collect {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let mut got = self.0.lock().unwrap();
        for m in msgs {
            if let Some(body) = m.body() {
                got.insert(String::from_utf8_lossy(&body).into_owned());
            }
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ns, topic, count, group] = &args[..] else {
        return Err("usage: rocketmq-rust-roundtrip NAMESRV TOPIC COUNT GROUP".into());
    };
    let count: usize = count.parse()?;

    // The client's runtime, as the crate's examples make it.
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "corvus-roundtrip".into(),
        ..Default::default()
    })?
    .build()
    .map_err(|e| ClientError::internal("create the client runtime", e))?;
    let telemetry = rocketmq_observability::install_global(
        &rocketmq_observability::TelemetryBootstrapConfig::default(),
    )
    .map_err(|e| ClientError::internal("initialize telemetry", e))?;
    let runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )?;

    let mut producer = DefaultMQProducer::builder(runtime.clone())
        .producer_group("RustRoundtripProducer".to_string())
        .name_server_addr(ns.clone())
        .build();
    producer.start().await?;
    let mut sent = BTreeSet::new();
    for i in 0..count {
        let body = format!("rust-{i}");
        let message = Message::builder()
            .topic(topic.as_str())
            .tags(if i % 2 == 0 { "TagA" } else { "TagB" })
            .keys(vec![format!("key-{i}")])
            .body_slice(body.as_bytes())
            .build_unchecked();
        let result = producer.send_with_timeout(message, 3000).await?;
        match result {
            Some(r) if r.send_status == SendStatus::SendOk => {}
            other => {
                println!("SEND FAILED {other:?}");
                std::process::exit(2);
            }
        }
        sent.insert(body);
    }
    println!("SENT {}", sent.len());

    let received = Arc::new(Mutex::new(HashSet::new()));
    let mut consumer = DefaultMQPushConsumer::builder(runtime.clone())
        .consumer_group(group.clone())
        .name_server_addr(ns.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .build();
    consumer.subscribe(topic.as_str(), "*").await?;
    consumer.register_message_listener_concurrently(Collect(received.clone()));
    consumer.start().await?;
    let deadline = Instant::now() + Duration::from_secs(40);
    let missing = loop {
        let missing: Vec<String> = {
            let got = received.lock().unwrap();
            sent.iter().filter(|b| !got.contains(*b)).cloned().collect()
        };
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let got = received.lock().unwrap().len();
    if missing.is_empty() {
        println!("RECEIVED {got} of {}", sent.len());
    } else {
        println!("RECEIVED {got} of {} missing {missing:?}", sent.len());
    }
    consumer.shutdown().await;
    producer.shutdown().await;
    if missing.is_empty() {
        println!("ALL RECEIVED");
        std::process::exit(0);
    }
    std::process::exit(1);
}
