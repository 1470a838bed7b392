//! The NameServer's metrics, served in Prometheus text format when `--metrics-addr` is set.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::route_table::RouteTable;

/// The protocol a request came in on: corvus's native one or RocketMQ's remoting. Each
/// names its requests and codes its own way, and both spell them in lower snake case in the
/// labels (`get_route` native, `get_routeinfo_by_topic` remoting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Native,
    Remoting,
}

impl Protocol {
    fn label(self) -> String {
        match self {
            Protocol::Native => "native".into(),
            Protocol::Remoting => "remoting".into(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabel {
    pub protocol: String,
    pub command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub protocol: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// Counters updated by the connection threads (atomics; no lock).
#[derive(Default)]
pub struct Metrics {
    pub requests: Family<CommandLabel, Counter>,
    pub errors: Family<CodeLabel, Counter>,
    /// Connections the server closed on its own, by reason: `idle`, `half_frame` (timeouts)
    /// or `evicted` (to admit a newcomer at `connections_max`).
    pub connections_closed: Family<ReasonLabel, Counter>,
    /// Connections open now.
    pub connections_open: Gauge,
}

impl Metrics {
    /// Counts a request by its name in `protocol` (RocketMQ's upper-case request names are
    /// lower-cased).
    pub fn count_request(&self, protocol: Protocol, command: &str) {
        self.requests
            .get_or_create(&CommandLabel {
                protocol: protocol.label(),
                command: command.to_ascii_lowercase(),
            })
            .inc();
    }

    /// Counts an error answer by its code's name in `protocol` (lower-cased as requests are).
    pub fn count_error(&self, protocol: Protocol, code: &str) {
        self.errors
            .get_or_create(&CodeLabel {
                protocol: protocol.label(),
                code: code.to_ascii_lowercase(),
            })
            .inc();
    }

    pub fn count_closed(&self, reason: &str) {
        self.connections_closed
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// One scrape: the counters plus gauges read from the route table now.
    pub fn render(&self, table: &RouteTable, now: Instant) -> String {
        let mut r = Registry::default();
        let brokers: Gauge = Gauge::default();
        brokers.set(table.cluster_info(now).brokers.len() as i64);
        let topics: Gauge = Gauge::default();
        topics.set(table.topic_list(now).len() as i64);
        r.register("corvus_namesrv_brokers", "Live brokers registered", brokers);
        r.register(
            "corvus_namesrv_topics",
            "Topics with at least one live broker",
            topics,
        );
        r.register(
            "corvus_namesrv_requests",
            "Requests served, by protocol (native, remoting) and command",
            self.requests.clone(),
        );
        r.register(
            "corvus_namesrv_errors",
            "Error responses, by protocol (native, remoting) and response code",
            self.errors.clone(),
        );
        r.register(
            "corvus_namesrv_connections_closed",
            "Connections the NameServer closed itself, by reason (idle, half_frame, evicted)",
            self.connections_closed.clone(),
        );
        r.register(
            "corvus_namesrv_connections_open",
            "Client and broker connections open now",
            self.connections_open.clone(),
        );
        telemetry::encode(&r)
    }
}
