//! TLS on the broker's glommio connections (futures-rustls over glommio's streams) and the
//! settings built once at start from the `tls_*` keys.
//!
//! A listener in `permissive` or `enforcing` mode looks at the first byte of each new
//! connection (peeked, not taken): 0x16 starts a TLS handshake, anything else is plaintext,
//! served in permissive mode and closed in enforcing mode. The wait for that byte and the
//! handshake are bounded by `frame_deadline_ms`, so a client that opens and sends nothing
//! gives its slot back. After the handshake the connection is served as any other: the
//! native and RocketMQ protocols are told apart on the decrypted bytes. In `disabled` mode
//! nothing is peeked and the stream is the plain socket ([`Stream::Plain`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite};
use futures_rustls::{TlsAcceptor, TlsConnector};
use glommio::net::TcpStream;
use tls::{ClientAuth, ClientSettings, Decision, Mode, ServerSettings, Trust};

use crate::config::BrokerConfig;

/// The broker's TLS, from its config: the listeners' side and its own outgoing links'.
#[derive(Clone, Default)]
pub struct BrokerTls {
    pub listener: tls::Listener,
    /// Set when `tls_client_enable`: the NameServer links and a slave's dial use it.
    pub client: Option<Arc<tls::rustls::ClientConfig>>,
}

fn path_key(
    v: &Option<std::path::PathBuf>,
    key: &str,
    mode: Mode,
) -> Result<std::path::PathBuf, tls::TlsError> {
    v.clone()
        .ok_or_else(|| tls::TlsError::Config(format!("tls_mode = {} needs {key}", mode.name())))
}

impl BrokerTls {
    /// Reads and checks every certificate and key the config names; an error names the key
    /// or the file.
    pub fn from_config(cfg: &BrokerConfig) -> Result<BrokerTls, tls::TlsError> {
        let mode = Mode::parse(&cfg.tls_mode)?;
        let client_auth = ClientAuth::parse(&cfg.tls_client_auth)?;
        let listener = if mode == Mode::Disabled {
            tls::Listener::default()
        } else {
            let settings = ServerSettings {
                cert_path: path_key(&cfg.tls_cert_path, "tls_cert_path", mode)?,
                key_path: path_key(&cfg.tls_key_path, "tls_key_path", mode)?,
                client_auth,
                trust_cert_path: cfg.tls_trust_cert_path.clone(),
            };
            tls::Listener::new(mode, Some(&settings))?
        };
        let client = if cfg.tls_client_enable {
            let trust = match (&cfg.tls_client_trust_cert_path, cfg.tls_client_trust_any) {
                (Some(p), false) => Trust::Roots(p.clone()),
                (None, true) => Trust::Any,
                (Some(_), true) => {
                    return Err(tls::TlsError::Config(
                        "set one of tls_client_trust_cert_path and tls_client_trust_any, not both"
                            .into(),
                    ))
                }
                (None, false) => {
                    return Err(tls::TlsError::Config(
                        "tls_client_enable needs tls_client_trust_cert_path (the CAs to trust) or tls_client_trust_any = true".into(),
                    ))
                }
            };
            Some(tls::client_config(&ClientSettings {
                trust,
                cert_path: cfg.tls_client_cert_path.clone(),
                key_path: cfg.tls_client_key_path.clone(),
            })?)
        } else {
            None
        };
        Ok(BrokerTls { listener, client })
    }
}

/// A connection of the broker's, plaintext or TLS.
pub enum Stream {
    Plain(TcpStream),
    /// Accepted on a listener.
    Server(Box<futures_rustls::server::TlsStream<TcpStream>>),
    /// Dialed by the broker (a slave to its master).
    Client(Box<futures_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// The socket under the stream, for its options and timeouts.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Server(s) => s.get_ref().0,
            Stream::Client(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Server(s) => Pin::new(s.as_mut()).poll_close(cx),
            Stream::Client(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// Why an accepted connection was not served.
pub enum Refused {
    /// Plaintext on an enforcing listener: the connection, for the caller to answer in the
    /// protocol the client spoke (a front end) or to close (replication).
    Plaintext(TcpStream),
    /// Nothing, or no complete handshake, within the deadline.
    Timeout,
    /// The handshake failed (a client that does not trust the certificate, or sent no
    /// acceptable one, or spoke something else with a 0x16 first byte).
    Handshake(String),
    /// The peer left before its first byte.
    Closed,
}

/// How long a connection may take to send its first byte, and then to complete its TLS
/// handshake.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// As long as a connection may stay idle (`connection_idle_timeout_ms`).
    pub first_byte: Duration,
    /// As long as a frame may take (`frame_deadline_ms`).
    pub handshake: Duration,
}

/// The connection `stream` as `listener` serves it: as it is, after a TLS handshake, or
/// not at all, within `bounds`.
pub async fn accept(
    listener: &tls::Listener,
    stream: TcpStream,
    bounds: Bounds,
) -> Result<Stream, Refused> {
    let Some(config) = listener.config.as_ref().filter(|_| listener.enabled()) else {
        return Ok(Stream::Plain(stream));
    };
    let mut first = [0u8; 1];
    let peeked = crate::deadline::with_timeout(bounds.first_byte, stream.peek(&mut first)).await;
    let until = Instant::now() + bounds.handshake;
    match peeked {
        None => return Err(Refused::Timeout),
        Some(Ok(0)) | Some(Err(_)) => return Err(Refused::Closed),
        Some(Ok(_)) => {}
    }
    match listener.decide(first[0]) {
        Decision::Plain => Ok(Stream::Plain(stream)),
        Decision::Refuse => Err(Refused::Plaintext(stream)),
        Decision::Tls => {
            let left = until.saturating_duration_since(Instant::now());
            let acceptor = TlsAcceptor::from(config.clone());
            match crate::deadline::with_timeout(left, acceptor.accept(stream)).await {
                None => Err(Refused::Timeout),
                Some(Ok(s)) => Ok(Stream::Server(Box::new(s))),
                Some(Err(e)) => Err(Refused::Handshake(e.to_string())),
            }
        }
    }
}

/// Dials TLS over `stream`, connected to `addr`, within `timeout`.
pub async fn connect(
    config: &Arc<tls::rustls::ClientConfig>,
    addr: &str,
    stream: TcpStream,
    timeout: Duration,
) -> io::Result<Stream> {
    let name =
        tls::server_name(addr).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let connector = TlsConnector::from(config.clone());
    match crate::deadline::with_timeout(timeout, connector.connect(name, stream)).await {
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the TLS handshake did not finish in time",
        )),
        Some(r) => r.map(|s| Stream::Client(Box::new(s))),
    }
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Plaintext(_) => f.write_str("Plaintext"),
            Refused::Timeout => f.write_str("Timeout"),
            Refused::Handshake(e) => write!(f, "Handshake({e})"),
            Refused::Closed => f.write_str("Closed"),
        }
    }
}
