//! Talking to the NameServers: each request goes to one of them, trying the next on a
//! connection failure, so one NameServer being down costs a failed dial, not an outage.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use protocol::{ClusterInfo, Command, Frame, ResponseCode, RouteData};

use crate::error::{ClientError, Result};
use crate::remoting::{expect_success, unexpected, ConnectionPool};

/// Splits `"127.0.0.1:9876;127.0.0.1:9877"` (`;` or `,` separated) into addresses.
pub fn parse_namesrv_list(list: &str) -> Result<Vec<String>> {
    let addrs: Vec<String> = list
        .split([';', ','])
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::Config(format!(
            "no NameServer address in {list:?}"
        )));
    }
    Ok(addrs)
}

pub(crate) struct NameServerClient {
    addrs: Vec<String>,
    /// The NameServer to try first: the last one that answered. Starts at a random one so
    /// that many clients spread over the NameServers.
    preferred: AtomicUsize,
    pool: Arc<ConnectionPool>,
    timeout: Duration,
}

impl NameServerClient {
    pub fn new(addrs: Vec<String>, pool: Arc<ConnectionPool>, timeout: Duration) -> Self {
        let start = rand::random::<usize>() % addrs.len().max(1);
        NameServerClient {
            addrs,
            preferred: AtomicUsize::new(start),
            pool,
            timeout,
        }
    }

    /// Sends `command` to the NameServers in turn until one answers (with any code).
    fn request(&self, command: Command) -> Result<(String, Frame)> {
        let n = self.addrs.len();
        let start = self.preferred.load(Ordering::Relaxed);
        let mut last = String::from("no NameServer configured");
        for i in 0..n {
            let idx = (start + i) % n;
            let addr = &self.addrs[idx];
            let result = self
                .pool
                .get(addr)
                .and_then(|c| c.request(command.clone(), &[], self.timeout));
            match result {
                Ok(frame) => {
                    if idx != start {
                        self.preferred.store(idx, Ordering::Relaxed);
                    }
                    return Ok((addr.clone(), frame));
                }
                Err(ClientError::Shutdown) => return Err(ClientError::Shutdown),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "NameServer request failed");
                    last = e.to_string();
                }
            }
        }
        Err(ClientError::NoNameServer { tried: n, last })
    }

    pub fn route(&self, topic: &str) -> Result<RouteData> {
        let (addr, frame) = self.request(Command::GetRoute {
            topic: topic.to_owned(),
        })?;
        if frame.header.response_code() == ResponseCode::TopicNotExist {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            });
        }
        match expect_success(&addr, frame)?.header.command {
            Command::Route(r) => Ok(r),
            other => Err(unexpected(&addr, "route", &other)),
        }
    }

    pub fn cluster_info(&self) -> Result<ClusterInfo> {
        let (addr, frame) = self.request(Command::GetClusterInfo)?;
        match expect_success(&addr, frame)?.header.command {
            Command::ClusterInfo(c) => Ok(c),
            other => Err(unexpected(&addr, "cluster info", &other)),
        }
    }

    pub fn topic_list(&self) -> Result<Vec<String>> {
        let (addr, frame) = self.request(Command::GetTopicList)?;
        match expect_success(&addr, frame)?.header.command {
            Command::TopicList(t) => Ok(t),
            other => Err(unexpected(&addr, "topic list", &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::PoolConfig;
    use crate::testing::{broker, namesrv, route};

    #[test]
    fn lists_are_split_on_semicolons_and_commas() {
        assert_eq!(
            parse_namesrv_list(" a:1; b:2 ,c:3;").unwrap(),
            vec!["a:1", "b:2", "c:3"]
        );
        assert!(matches!(
            parse_namesrv_list(" ; "),
            Err(ClientError::Config(_))
        ));
    }

    #[test]
    fn a_dead_name_server_is_skipped() {
        // A port that was just free: connecting to it is refused.
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let live = namesrv("T", route(vec![broker("b", "127.0.0.1:1", &[], 1)], 2));
        let pool = Arc::new(ConnectionPool::new(PoolConfig {
            connect_timeout_ms: 1000,
            ..PoolConfig::default()
        }));
        let client = NameServerClient::new(
            vec![dead.clone(), live.addr.clone()],
            pool,
            Duration::from_secs(2),
        );
        for _ in 0..4 {
            let r = client.route("T").unwrap();
            assert_eq!(r.brokers[0].broker_name, "b");
        }
        assert!(matches!(
            client.route("Unknown"),
            Err(ClientError::NoRoute { .. })
        ));
        let only_dead = NameServerClient::new(
            vec![dead],
            Arc::new(ConnectionPool::new(PoolConfig::default())),
            Duration::from_secs(2),
        );
        assert!(matches!(
            only_dead.route("T"),
            Err(ClientError::NoNameServer { tried: 1, .. })
        ));
    }
}
