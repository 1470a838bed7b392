//! What RocketMQ's mqadmin and dashboard ask of a NameServer beyond routes: the KV config
//! (`updateKvConfig`, `deleteKvConfig`, `updateOrderConf`), the NameServer's own config
//! (`getNamesrvConfig`; `updateNamesrvConfig` is refused with the reason: every setting is
//! read at start), draining a broker (`wipeWritePerm`, `addWritePerm`) and the system topic
//! list the dashboard reads.

use std::sync::Mutex;
use std::time::Instant;

use remoting::body::JsonForm;
use remoting::codes::{request, response};
use remoting::RemotingCommand;

use crate::handler::lock;
use crate::kv::KvStore;
use crate::route_table::RouteTable;

/// What the admin requests read and change.
pub(crate) struct Admin<'a> {
    pub table: &'a Mutex<RouteTable>,
    pub kv: &'a Mutex<KvStore>,
    /// The NameServer's settings as `key=value` lines.
    pub config: &'a str,
}

/// The answer to `req` when it is one of these requests; `None` otherwise.
pub(crate) fn handle(
    a: &Admin<'_>,
    req: &RemotingCommand,
    body: &[u8],
    now: Instant,
) -> Option<(RemotingCommand, Vec<u8>)> {
    let reply = |code: i32, remark: Option<String>| RemotingCommand::response_to(req, code, remark);
    let field = |name: &str| req.ext(name).filter(|v| !v.is_empty());
    let missing = |what: &str| {
        (
            reply(response::SYSTEM_ERROR, Some(format!("{what} is required"))),
            Vec::new(),
        )
    };
    let answer = match req.code {
        request::PUT_KV_CONFIG => {
            let (Some(ns), Some(key)) = (field("namespace"), field("key")) else {
                return Some(missing("namespace and key"));
            };
            let value = req.ext("value").unwrap_or("");
            match lock(a.kv).put(ns, key, value) {
                Ok(()) => {
                    tracing::info!(namespace = ns, key, value, "KV config set");
                    (reply(response::SUCCESS, None), Vec::new())
                }
                Err(e) => (reply(response::SYSTEM_ERROR, Some(e)), Vec::new()),
            }
        }
        request::GET_KV_CONFIG => {
            let (Some(ns), Some(key)) = (field("namespace"), field("key")) else {
                return Some(missing("namespace and key"));
            };
            match lock(a.kv).get(ns, key) {
                Some(v) => {
                    let mut r = reply(response::SUCCESS, None);
                    r.ext_fields.insert("value".into(), v.to_owned());
                    (r, Vec::new())
                }
                None => (
                    reply(
                        response::QUERY_NOT_FOUND,
                        Some(format!("No config item, Namespace: {ns} Key: {key}")),
                    ),
                    Vec::new(),
                ),
            }
        }
        request::DELETE_KV_CONFIG => {
            let (Some(ns), Some(key)) = (field("namespace"), field("key")) else {
                return Some(missing("namespace and key"));
            };
            match lock(a.kv).delete(ns, key) {
                Ok(()) => {
                    tracing::info!(namespace = ns, key, "KV config deleted");
                    (reply(response::SUCCESS, None), Vec::new())
                }
                Err(e) => (reply(response::SYSTEM_ERROR, Some(e)), Vec::new()),
            }
        }
        request::GET_KVLIST_BY_NAMESPACE => {
            let Some(ns) = field("namespace") else {
                return Some(missing("namespace"));
            };
            match lock(a.kv).namespace(ns) {
                Some(t) => json(req, &serde_json::json!({ "table": t })),
                None => (
                    reply(
                        response::QUERY_NOT_FOUND,
                        Some(format!("No config item, Namespace: {ns}")),
                    ),
                    Vec::new(),
                ),
            }
        }
        request::GET_NAMESRV_CONFIG => {
            (reply(response::SUCCESS, None), a.config.as_bytes().to_vec())
        }
        request::UPDATE_NAMESRV_CONFIG => {
            let keys: Vec<&str> = std::str::from_utf8(body)
                .unwrap_or("")
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
                .filter(|k| !k.is_empty() && !k.starts_with('#'))
                .collect();
            (
                reply(
                    response::SYSTEM_ERROR,
                    Some(format!(
                        "the corvus NameServer reads its settings at start (its command-line flags); restart it to change {}",
                        keys.join(", ")
                    )),
                ),
                Vec::new(),
            )
        }
        request::WIPE_WRITE_PERM_OF_BROKER | request::ADD_WRITE_PERM_OF_BROKER => {
            let Some(name) = field("brokerName") else {
                return Some(missing("brokerName"));
            };
            let wipe = req.code == request::WIPE_WRITE_PERM_OF_BROKER;
            let mut table = lock(a.table);
            let count = if wipe {
                table.wipe_write_perm(name)
            } else {
                table.add_write_perm(name)
            };
            match count {
                Some(n) => {
                    tracing::info!(broker = name, topics = n, wipe, "write permission changed");
                    let mut r = reply(response::SUCCESS, None);
                    let header = if wipe {
                        "wipeTopicCount"
                    } else {
                        "addTopicCount"
                    };
                    r.ext_fields.insert(header.into(), n.to_string());
                    (r, Vec::new())
                }
                None => (
                    reply(
                        response::SYSTEM_ERROR,
                        Some(format!("no broker named {name} is registered")),
                    ),
                    Vec::new(),
                ),
            }
        }
        request::GET_SYSTEM_TOPIC_LIST_FROM_NS => {
            // RocketMQ's system topics here: each cluster's and each broker's own name (the
            // routes every broker serves for itself), with one broker's address.
            let info = lock(a.table).cluster_info(now);
            let mut topics = std::collections::BTreeSet::new();
            let mut addr = None;
            for b in &info.brokers {
                let cores = protocol::core_view::core_addrs(b);
                topics.extend(protocol::core_view::broker_own_topics(
                    &b.cluster,
                    &b.broker_name,
                    cores.len() as u16,
                ));
                addr = addr.or_else(|| cores.first().cloned());
            }
            let mut list = serde_json::json!({ "topicList": topics });
            if let Some(addr) = addr {
                list["brokerAddr"] = addr.into();
            }
            json(req, &list)
        }
        _ => return None,
    };
    Some(answer)
}

fn json(req: &RemotingCommand, value: &serde_json::Value) -> (RemotingCommand, Vec<u8>) {
    match remoting::body::to_json(value, JsonForm::Standard) {
        Ok(b) => (
            RemotingCommand::response_to(req, response::SUCCESS, None),
            b,
        ),
        Err(e) => (
            RemotingCommand::response_to(req, response::SYSTEM_ERROR, Some(e.to_string())),
            Vec::new(),
        ),
    }
}
