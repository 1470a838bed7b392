//! Talking to the NameServers: each request goes to one of them, trying the next on a
//! connection failure or a timeout (each gets its share of the request's timeout), so one
//! NameServer down or frozen costs a failed try, not an outage. "No such topic" from one
//! is checked with the others.

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

    /// How long one NameServer gets to answer: the request's timeout shared among them, so
    /// that a frozen NameServer (one that accepts and never answers) leaves the others time
    /// within the caller's timeout. At least 500 ms.
    fn attempt_timeout(&self) -> Duration {
        let n = self.addrs.len().max(1) as u32;
        (self.timeout / n)
            .max(Duration::from_millis(500))
            .min(self.timeout)
    }

    /// Sends `command` to the NameServers in turn until one answers (with any code).
    fn request(&self, command: Command) -> Result<(String, Frame)> {
        self.request_until(command, |_| true)
    }

    /// Sends `command` to the NameServers in turn until one gives an answer `settled`
    /// accepts; when none does, the last answer that came (or the last error).
    fn request_until(
        &self,
        command: Command,
        settled: impl Fn(&Frame) -> bool,
    ) -> Result<(String, Frame)> {
        let n = self.addrs.len();
        let start = self.preferred.load(Ordering::Relaxed);
        let timeout = self.attempt_timeout();
        let mut last = String::from("no NameServer configured");
        let mut unsettled = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let addr = &self.addrs[idx];
            let result = self
                .pool
                .get(addr)
                .and_then(|c| c.request(command.clone(), &[], timeout));
            match result {
                Ok(frame) if settled(&frame) => {
                    if idx != start {
                        self.preferred.store(idx, Ordering::Relaxed);
                    }
                    return Ok((addr.clone(), frame));
                }
                Ok(frame) => {
                    tracing::debug!(%addr, "NameServer answer not taken as final; asking the next");
                    unsettled = Some((addr.clone(), frame));
                }
                Err(ClientError::Shutdown) => return Err(ClientError::Shutdown),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "NameServer request failed");
                    last = e.to_string();
                }
            }
        }
        unsettled.ok_or(ClientError::NoNameServer { tried: n, last })
    }

    /// The topic's route. A NameServer that says it knows no such topic is cross-checked
    /// with the others: one restarted empty says so until the brokers register again.
    pub fn route(&self, topic: &str) -> Result<RouteData> {
        let (addr, frame) = self.request_until(
            Command::GetRoute {
                topic: topic.to_owned(),
            },
            |f| f.header.response_code() != ResponseCode::TopicNotExist,
        )?;
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
        let frame = expect_success(&addr, frame)?;
        match frame.header.command {
            Command::TopicList(t) => Ok(t),
            // Any number of names, in the body.
            Command::TopicListBody { .. } => {
                protocol::decode_topic_names(&frame.body).map_err(|e| ClientError::Protocol {
                    addr: addr.clone(),
                    detail: e.to_string(),
                })
            }
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

    #[test]
    fn no_route_from_one_name_server_is_checked_with_the_others() {
        // One that knows nothing of T (restarted empty, say) and one that serves it.
        let empty = namesrv("Other", route(vec![broker("x", "127.0.0.1:1", &[], 1)], 1));
        let live = namesrv("T", route(vec![broker("b", "127.0.0.1:1", &[], 1)], 2));
        let pool = Arc::new(ConnectionPool::new(PoolConfig::default()));
        for order in [
            vec![empty.addr.clone(), live.addr.clone()],
            vec![live.addr.clone(), empty.addr.clone()],
        ] {
            let client = NameServerClient::new(order, pool.clone(), Duration::from_secs(2));
            for _ in 0..3 {
                assert_eq!(client.route("T").unwrap().brokers[0].broker_name, "b");
            }
            // Unknown everywhere: no route, as before.
            assert!(matches!(
                client.route("Unknown"),
                Err(ClientError::NoRoute { .. })
            ));
        }
    }

    #[test]
    fn a_frozen_name_server_leaves_the_next_one_time_within_the_timeout() {
        // Accepts connections (the kernel's backlog) and never answers.
        let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let frozen_addr = frozen.local_addr().unwrap().to_string();
        let live = namesrv("T", route(vec![broker("b", "127.0.0.1:1", &[], 1)], 2));
        let timeout = Duration::from_secs(3);
        let client = NameServerClient::new(
            vec![frozen_addr.clone(), live.addr.clone()],
            Arc::new(ConnectionPool::new(PoolConfig::default())),
            timeout,
        );
        // Whichever it starts with, the lookup is answered within the caller's timeout: the
        // frozen one gets half of it, not all of it.
        client.preferred.store(0, Ordering::Relaxed);
        let started = std::time::Instant::now();
        assert_eq!(client.route("T").unwrap().brokers[0].broker_name, "b");
        assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
        drop(frozen);
    }
}
