//! Reading the `/metrics` page the broker and the NameServer serve, as Prometheus does: the
//! address they print, one plain HTTP GET on loopback, the page parsed, and a series' value.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::Proc;

/// The `host:port` a process serves its metrics on, from the preamble line starting with
/// `prefix` (e.g. "broker metrics on "), printed as `http://host:port/metrics`.
pub fn addr(p: &Proc, prefix: &str) -> String {
    p.preamble_addr(prefix)
        .expect("metrics address printed")
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned()
}

/// One HTTP GET of `path` on `addr` (`host:port`) with `headers` (each ending in CRLF): the
/// status line's code and the body.
pub fn get(addr: &str, path: &str, headers: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let code = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    // Prometheus answers its API chunked; one chunk is enough for these small answers.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split_once("\r\n")
            .map_or("", |(_, rest)| rest)
            .rsplit_once("\r\n0\r\n")
            .map_or(body, |(chunk, _)| chunk.trim_end_matches("\r\n"))
    } else {
        body
    };
    (code, body.to_owned())
}

/// The `/metrics` page at `addr` as a scraper that does not ask for OpenMetrics gets it
/// (Prometheus, curl, `promtool check metrics`): Prometheus's text format.
pub fn text(addr: &str) -> String {
    let (code, body) = get(addr, "/metrics", "");
    assert_eq!(code, 200, "GET {addr}/metrics: {body}");
    body
}

/// The page's samples.
pub fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The `/metrics` page at `addr`, parsed.
pub fn scrape(addr: &str) -> prometheus_parse::Scrape {
    parse(&text(addr))
}

/// The sum of the samples of `name` whose labels include every pair of `labels` (of a
/// histogram, its count of observations); `None` when there is none.
pub fn sum(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for x in s.samples.iter().filter(|x| x.metric == name) {
        if !labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)) {
            continue;
        }
        let v = match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            _ => continue,
        };
        total = Some(total.unwrap_or(0.0) + v);
    }
    total
}
