//! Serves `GET /metrics` in the Prometheus/OpenMetrics text format from a plain thread.
//!
//! The encoding is prometheus-client's (OpenMetrics); this crate only adds the smallest
//! HTTP/1.1 server that a scraper needs: one request per connection, `GET /metrics` answered
//! with the registry rendered at that moment, anything else 404. A scraper whose `Accept`
//! names `application/openmetrics-text` (Prometheus does) gets OpenMetrics; any other (curl,
//! `promtool check metrics`, older scrapers) gets Prometheus's text format 0.0.4, the same
//! samples with each counter's HELP and TYPE under its sample name (`_total`) and no `# EOF`
//! ([`to_text_format`]). Each connection is served on a thread
//! of its own (at most 32 at once, each bounded by a 2 s read and write timeout), so idle
//! connections cannot hold up a scrape.
//!
//! Exposure: the metrics name every topic, group and queue, so the endpoint is meant for the
//! operator only. [`listen_addr`] reads a bare port as a loopback address, a non-loopback
//! address is served but logged as a warning, and a token ([`serve`]'s `token`) makes every
//! request without `Authorization: Bearer TOKEN` a 401.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use prometheus_client;

/// Produces the exposition text of one scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus's text format, served to a scraper that does not ask for OpenMetrics.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The samples of a text-format page whose family has no `# HELP` or no `# TYPE` under the
/// name promtool looks for (the sample's name, less a histogram's `_bucket`, `_sum`,
/// `_count`): what `promtool check metrics` reports as "no help text". Sorted, each once.
pub fn samples_without_help(text: &str) -> Vec<String> {
    let mut help = std::collections::HashSet::new();
    let mut typed = std::collections::HashMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# HELP ") {
            help.insert(rest.split(' ').next().unwrap_or("").to_owned());
        } else if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut p = rest.split(' ');
            let name = p.next().unwrap_or("").to_owned();
            typed.insert(name, p.next().unwrap_or("").to_owned());
        }
    }
    let mut lacking = Vec::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = l.split(['{', ' ']).next().unwrap_or("");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                let base = name.strip_suffix(s)?;
                (typed.get(base).map(String::as_str) == Some("histogram")).then_some(base)
            })
            .unwrap_or(name);
        if !help.contains(family) || !typed.contains_key(family) {
            lacking.push(name.to_owned());
        }
    }
    lacking.sort();
    lacking.dedup();
    lacking
}

/// OpenMetrics text (as [`encode`] writes it) in Prometheus's text format 0.0.4: a counter's
/// `# HELP` and `# TYPE` name the family by its samples' name (`x_total`, where OpenMetrics
/// says `x`), `unknown` is `untyped`, and `# UNIT` and `# EOF` (which the older format has
/// not) are left out. Samples are kept as they are.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("# TYPE ")?;
            let (name, kind) = rest.split_once(' ')?;
            (kind.trim() == "counter").then_some(name)
        })
        .collect();
    let total = |name: &str| -> String {
        if counters.contains(name) && !name.ends_with("_total") {
            format!("{name}_total")
        } else {
            name.to_owned()
        }
    };
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let _ = writeln!(out, "# HELP {} {help}", total(name));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = if kind == "unknown" { "untyped" } else { kind };
            let _ = writeln!(out, "# TYPE {} {kind}", total(name));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Encodes a registry to text; an encoding error yields a comment line rather than a panic.
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        out = format!("# encoding failed: {e}\n# EOF\n");
    }
    out
}

pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept call.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_now();
        }
    }
}

/// Scrapes answered at once, each on its own thread; a connection past this is closed.
const CONNECTIONS_MAX: usize = 32;
/// How long a scrape may take to send its request, and to take its answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The address a `metrics_addr` setting means: `ip:port`, or a bare `port`, which is
/// `127.0.0.1:port` (metrics are for the operator on the host unless an address says
/// otherwise). The error says what was expected.
pub fn listen_addr(setting: &str) -> Result<SocketAddr, String> {
    let setting = setting.trim();
    if let Ok(port) = setting.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    setting
        .parse::<SocketAddr>()
        .map_err(|e| format!("`{setting}` is neither ip:port nor a port ({e})"))
}

/// Binds `addr` and serves scrapes until the returned server is shut down or dropped. With a
/// `token`, only requests carrying `Authorization: Bearer TOKEN` are answered; the others get
/// 401 (the token is compared in constant time; its length is not secret). An address that
/// is not loopback is served, with a warning that anyone who reaches it can scrape.
pub fn serve(
    addr: SocketAddr,
    render: Render,
    token: Option<String>,
) -> std::io::Result<MetricsServer> {
    if token.as_deref().is_some_and(str::is_empty) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the metrics token must not be empty",
        ));
    }
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "metrics served on {addr}, beyond loopback: every topic, group and queue name is \
             visible to whoever reaches it{}",
            if token.is_some() {
                " with the token"
            } else {
                " (no metrics token set)"
            }
        );
    }
    let token: Option<Arc<[u8]>> = token.map(|t| Arc::from(t.into_bytes()));
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = stop.clone();
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let thread = std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if thread_stop.load(Ordering::SeqCst) {
                    break;
                }
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!("metrics accept failed: {e}");
                        continue;
                    }
                };
                // Each scrape on a thread of its own, so a connection that sends nothing
                // holds up no other scrape (only its own thread, for IO_TIMEOUT).
                if busy.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
                    busy.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let render = render.clone();
                let token = token.clone();
                let done = busy.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        if let Err(e) = answer(stream, &render, token.as_deref()) {
                            tracing::debug!("metrics request failed: {e}");
                        }
                        done.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    busy.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })?;
    Ok(MetricsServer {
        addr,
        stop,
        thread: Some(thread),
    })
}

/// Whether an `Authorization` header value is `Bearer TOKEN` with the expected token.
fn bearer_matches(header_value: &str, token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let mut parts = header_value.trim().splitn(2, ' ');
    let scheme = parts.next().unwrap_or("");
    let given = parts.next().unwrap_or("").trim();
    scheme.eq_ignore_ascii_case("bearer") && bool::from(given.as_bytes().ct_eq(token))
}

/// Longest request line or header line read; a longer one ends the request.
const LINE_BYTES_MAX: u64 = 8 << 10;

fn answer(stream: TcpStream, render: &Render, token: Option<&[u8]>) -> std::io::Result<()> {
    use std::io::Read;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    (&mut reader)
        .take(LINE_BYTES_MAX)
        .read_line(&mut request_line)?;
    // Read the headers up to the blank line, keeping only Authorization and whether Accept
    // asks for OpenMetrics; bounded by the timeout, a line length and a count.
    let mut authorized = token.is_none();
    let mut openmetrics = false;
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        if (&mut reader).take(LINE_BYTES_MAX).read_line(&mut line)? == 0
            || line == "\r\n"
            || line == "\n"
        {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim();
            if let Some(token) = token {
                if name.eq_ignore_ascii_case("authorization") && bearer_matches(value, token) {
                    authorized = true;
                }
            }
            if name.eq_ignore_ascii_case("accept")
                && value
                    .to_ascii_lowercase()
                    .contains("application/openmetrics-text")
            {
                openmetrics = true;
            }
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let mut w = &stream;
    if !authorized {
        let body = "a metrics token is required: Authorization: Bearer TOKEN\n";
        write!(
            w,
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"metrics\"\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
    } else if method == "GET" && (path == "/metrics" || path == "/") {
        let (body, content_type) = if openmetrics {
            (render(), CONTENT_TYPE)
        } else {
            (to_text_format(&render()), TEXT_CONTENT_TYPE)
        };
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )?;
        w.write_all(body.as_bytes())?;
    } else {
        let body = "only GET /metrics is served here\n";
        write!(
            w,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Read;

    fn get(addr: SocketAddr, path: &str) -> String {
        get_with(addr, path, "")
    }

    fn get_with(addr: SocketAddr, path: &str, headers: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_bare_port_is_loopback() {
        assert_eq!(
            listen_addr("9100").unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            listen_addr("0.0.0.0:9100").unwrap(),
            "0.0.0.0:9100".parse().unwrap()
        );
        assert!(listen_addr("localhost:x").is_err());
    }

    #[test]
    fn a_token_is_required_when_set() {
        let render: Render = Arc::new(|| "secret_topic_names 1\n# EOF\n".to_owned());
        let token = Some("s3cret-token".to_owned());
        let server = serve("127.0.0.1:0".parse().unwrap(), render, token).unwrap();
        let addr = server.local_addr();
        let none = get(addr, "/metrics");
        assert!(none.starts_with("HTTP/1.1 401"), "{none}");
        assert!(!none.contains("secret_topic_names"), "{none}");
        for wrong in [
            "Authorization: Bearer s3cret-tokeX\r\n",
            "Authorization: Bearer s3cret\r\n",
            "Authorization: Basic s3cret-token\r\n",
            "X-Token: s3cret-token\r\n",
        ] {
            let resp = get_with(addr, "/metrics", wrong);
            assert!(resp.starts_with("HTTP/1.1 401"), "{wrong}: {resp}");
        }
        let ok = get_with(addr, "/metrics", "authorization: bearer s3cret-token\r\n");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("secret_topic_names 1"), "{ok}");
        server.shutdown();
        let empty: Render = Arc::new(String::new);
        assert!(serve("127.0.0.1:0".parse().unwrap(), empty, Some(String::new())).is_err());
    }

    #[test]
    fn serves_metrics_and_404s_the_rest() {
        use prometheus_client::metrics::counter::Counter;
        let c: Counter = Counter::default();
        c.inc_by(5);
        let render: Render = Arc::new(move || {
            let mut r = prometheus_client::registry::Registry::default();
            r.register("demo_things", "Things seen", c.clone());
            encode(&r)
        });
        let server = serve("127.0.0.1:0".parse().unwrap(), render, None).unwrap();
        let resp = get_with(
            server.local_addr(),
            "/metrics",
            "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
        );
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.contains("application/openmetrics-text"), "{resp}");
        assert!(resp.contains("# HELP demo_things Things seen"), "{resp}");
        assert!(resp.contains("demo_things_total 5"), "{resp}");
        assert!(resp.trim_end().ends_with("# EOF"), "{resp}");
        // Without an Accept asking for OpenMetrics: Prometheus's text format.
        let resp = get(server.local_addr(), "/metrics");
        assert!(resp.contains("text/plain; version=0.0.4"), "{resp}");
        assert!(
            resp.contains("# HELP demo_things_total Things seen"),
            "{resp}"
        );
        assert!(resp.contains("# TYPE demo_things_total counter"), "{resp}");
        assert!(resp.contains("demo_things_total 5"), "{resp}");
        assert!(!resp.contains("# EOF"), "{resp}");
        assert!(get(server.local_addr(), "/other").starts_with("HTTP/1.1 404"));
        server.shutdown();
    }

    /// Every sample of the text format belongs to a family with its HELP and TYPE under the
    /// name promtool looks for: the sample's name, less a histogram's `_bucket`, `_sum` and
    /// `_count`.
    #[test]
    fn every_family_of_the_text_format_has_help_and_type() {
        use prometheus_client::encoding::EncodeLabelSet;
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        use prometheus_client::metrics::histogram::Histogram;
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct Core {
            core: String,
        }
        let mut r = prometheus_client::registry::Registry::default();
        let requests = Family::<Core, Counter>::default();
        requests.get_or_create(&Core { core: "0".into() }).inc_by(3);
        r.register("demo_requests", "Requests, per core", requests);
        let open: Gauge = Gauge::default();
        r.register("demo_open", "Open now", open);
        let h = Histogram::new([0.001, 0.01]);
        h.observe(0.005);
        r.register("demo_latency_seconds", "Latency", h);
        let text = to_text_format(&encode(&r));
        assert!(!text.contains("# EOF"), "{text}");
        assert!(samples_without_help(&text).is_empty(), "{text}");
        // And what promtool reported before: OpenMetrics' HELP under `demo_requests`.
        assert!(!samples_without_help(&encode(&r)).is_empty());
    }

    #[test]
    fn idle_connections_do_not_hold_up_a_scrape() {
        let render: Render = Arc::new(|| "# EOF\n".to_owned());
        let server = serve("127.0.0.1:0".parse().unwrap(), render, None).unwrap();
        // Connections that never send a request; before, each held the only serving
        // thread for its whole read timeout.
        let idle: Vec<TcpStream> = (0..8)
            .map(|_| TcpStream::connect(server.local_addr()).unwrap())
            .collect();
        let started = std::time::Instant::now();
        let resp = get(server.local_addr(), "/metrics");
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        // Served one at a time, the scrape would wait out every idle connection's timeout
        // (8 x IO_TIMEOUT); served beside them it does not wait for them at all.
        assert!(
            started.elapsed() < 4 * IO_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        drop(idle);
        server.shutdown();
    }
}
