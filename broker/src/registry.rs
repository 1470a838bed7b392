//! Registration with the NameServers: a plain thread, off the cores. It registers at start,
//! every `register_interval_ms`, and at once when core 0 reports a topic change; it
//! unregisters at shutdown. Each NameServer is independent: one being down only logs.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::blocking::{write_frame, FrameReader};
use protocol::{BrokerKey, Command, Header, RegisterBroker, ResponseCode, TopicConfig};

use crate::core::Shared;
use crate::topics::{topic_config, AUTO_CREATE_TOPIC_KEY};

const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// A heartbeat is a few bytes: a NameServer that takes longer is treated as unreachable.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(500);

pub fn spawn(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("namesrv-register".into())
        .spawn(move || run(shared))
}

fn key(shared: &Shared) -> BrokerKey {
    BrokerKey {
        cluster: shared.config.cluster_name.clone(),
        broker_name: shared.config.broker_name.clone(),
        broker_id: shared.config.broker_id,
    }
}

fn registration(shared: &Shared) -> RegisterBroker {
    let mut topics: Vec<TopicConfig> = shared
        .topics
        .lock()
        .map(|t| t.values().cloned().collect())
        .unwrap_or_default();
    if shared.config.auto_create_topic_enable {
        let mut tbw = topic_config(
            AUTO_CREATE_TOPIC_KEY,
            shared.config.default_topic_queue_nums,
        );
        tbw.perm = protocol::perm::READ_WRITE | protocol::perm::INHERIT;
        topics.push(tbw);
    }
    RegisterBroker {
        key: key(shared),
        addr: shared.advertise_addr.clone(),
        core_addrs: shared
            .core_addrs
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default(),
        shard_count: shared.shard_count,
        topics,
    }
}

fn call(addr: &str, header: &Header, body: &[u8]) -> Result<(), String> {
    match exchange(addr, header, body, IO_TIMEOUT)? {
        ResponseCode::Success => Ok(()),
        code => Err(code.to_string()),
    }
}

/// One request to a NameServer: the code it answered, or why there was no answer.
fn exchange(
    addr: &str,
    header: &Header,
    body: &[u8],
    timeout: Duration,
) -> Result<ResponseCode, String> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    write_frame(&mut s, header, body).map_err(|e| e.to_string())?;
    let mut r = FrameReader::new(&s, protocol::FRAME_BYTES_MAX_DEFAULT);
    match r.next_frame() {
        Ok(Some(f)) if f.header.response_code() == ResponseCode::Success => {
            Ok(ResponseCode::Success)
        }
        Ok(Some(f)) => {
            tracing::debug!(namesrv = addr, remark = %f.header.remark, "NameServer refused");
            Ok(f.header.response_code())
        }
        Ok(None) => Err("connection closed".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The full registration: the header, and the topic table compressed in the body (any
/// number of topics fits in a frame, where a header of them passed its 1 MiB limit at
/// 7,000-9,800 topics).
fn registration_frame(shared: &Shared) -> (Header, Vec<u8>) {
    let mut reg = registration(shared);
    let body = match protocol::encode_topic_body(&reg.topics) {
        Ok(b) => {
            reg.topics.clear();
            b
        }
        Err(e) => {
            tracing::warn!("cannot compress the topic table, registering it in the header: {e}");
            Vec::new()
        }
    };
    (Header::request(1, Command::RegisterBroker(reg)), body)
}

/// Registers with one NameServer; says so when that changes (failing or back).
fn register_with(ns: &str, frame: &(Header, Vec<u8>), failing: &mut bool) -> bool {
    match call(ns, &frame.0, &frame.1) {
        Ok(()) => {
            if *failing {
                tracing::info!(namesrv = ns, "registered with NameServer again");
            }
            *failing = false;
            true
        }
        Err(e) => {
            if !*failing {
                tracing::warn!(namesrv = ns, "cannot register with NameServer: {e}");
            }
            *failing = true;
            false
        }
    }
}

fn register_all(shared: &Shared, failing: &mut [bool]) -> bool {
    let frame = registration_frame(shared);
    let mut any = false;
    for (i, ns) in shared.config.namesrv_list().iter().enumerate() {
        any |= register_with(ns, &frame, &mut failing[i]);
    }
    any
}

/// Tells every NameServer the broker is alive. One that answers that it does not know the
/// broker (it restarted empty, or dropped it) gets the full registration at once; one that
/// does not answer is tried again at the next beat, with a short timeout, so that a frozen
/// NameServer does not delay the others' heartbeats past their expiry.
fn heartbeat_all(shared: &Shared, failing: &mut [bool]) {
    let beat = Header::request(3, Command::BrokerHeartbeat(key(shared)));
    let mut frame = None;
    for (i, ns) in shared.config.namesrv_list().iter().enumerate() {
        match exchange(ns, &beat, &[], HEARTBEAT_TIMEOUT) {
            Ok(ResponseCode::Success) => {
                if failing[i] {
                    tracing::info!(namesrv = ns, "NameServer answers heartbeats again");
                }
                failing[i] = false;
            }
            Ok(_) => {
                let frame = frame.get_or_insert_with(|| registration_frame(shared));
                register_with(ns, frame, &mut failing[i]);
            }
            Err(e) => {
                if !failing[i] {
                    tracing::warn!(namesrv = ns, "NameServer does not answer heartbeats: {e}");
                }
                failing[i] = true;
            }
        }
    }
}

fn run(shared: Arc<Shared>) {
    let namesrvs = shared.config.namesrv_list();
    if namesrvs.is_empty() {
        return;
    }
    let mut failing = vec![false; namesrvs.len()];
    let interval = Duration::from_millis(shared.config.register_interval_ms);
    let beat = Duration::from_millis(shared.config.namesrv_heartbeat_interval_ms);
    let mut next = Instant::now();
    let mut next_beat = Instant::now() + beat;
    loop {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let wanted = shared.topics_version.load(Ordering::SeqCst);
        let registered = shared.registered_version.load(Ordering::SeqCst);
        if Instant::now() >= next || wanted > registered {
            register_all(&shared, &mut failing);
            // Even if every NameServer is down, do not hold topic creation hostage.
            shared
                .registered_version
                .fetch_max(wanted, Ordering::SeqCst);
            next = Instant::now() + interval;
            next_beat = Instant::now() + beat;
        } else if Instant::now() >= next_beat {
            heartbeat_all(&shared, &mut failing);
            next_beat = Instant::now() + beat;
        }
        // Sleep until the next heartbeat or registration, a topic change or shutdown.
        let guard = shared
            .registry_wake
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let changed = shared.topics_version.load(Ordering::SeqCst)
            > shared.registered_version.load(Ordering::SeqCst);
        if !changed && !shared.shutdown.load(Ordering::SeqCst) {
            let left = next
                .min(next_beat)
                .saturating_duration_since(Instant::now());
            let _ = shared.registry_wake.1.wait_timeout(guard, left);
        }
    }
    let header = Header::request(2, Command::UnregisterBroker(key(&shared)));
    for ns in &namesrvs {
        if let Err(e) = call(ns, &header, &[]) {
            tracing::debug!(namesrv = ns, "unregister failed: {e}");
        }
    }
}
