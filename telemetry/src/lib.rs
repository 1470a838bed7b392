//! Serves `GET /metrics` in the Prometheus/OpenMetrics text format from a plain thread.
//!
//! The encoding is prometheus-client's; this crate only adds the smallest HTTP/1.1 server
//! that a scraper needs: one request per connection, `GET /metrics` answered with the
//! registry rendered at that moment, anything else 404. Each connection is served on a thread
//! of its own (at most 32 at once, each bounded by a 2 s read and write timeout), so idle
//! connections cannot hold up a scrape.

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

/// Binds `addr` and serves scrapes until the returned server is shut down or dropped.
pub fn serve(addr: SocketAddr, render: Render) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
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
                let done = busy.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        if let Err(e) = answer(stream, &render) {
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

fn answer(stream: TcpStream, render: &Render) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read (and ignore) the headers up to the blank line; bounded by the timeout and a cap.
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let mut w = &stream;
    if method == "GET" && (path == "/metrics" || path == "/") {
        let body = render();
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
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
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
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
        let server = serve("127.0.0.1:0".parse().unwrap(), render).unwrap();
        let resp = get(server.local_addr(), "/metrics");
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.contains("demo_things_total 5"), "{resp}");
        assert!(resp.trim_end().ends_with("# EOF"), "{resp}");
        assert!(get(server.local_addr(), "/other").starts_with("HTTP/1.1 404"));
        server.shutdown();
    }

    #[test]
    fn idle_connections_do_not_hold_up_a_scrape() {
        let render: Render = Arc::new(|| "# EOF\n".to_owned());
        let server = serve("127.0.0.1:0".parse().unwrap(), render).unwrap();
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
