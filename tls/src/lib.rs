//! TLS for corvus's links, with rustls and its `ring` crypto provider.
//!
//! What is here, shared by the broker, the NameServer and the clients:
//!
//! - the settings and their names ([`Mode`], [`ClientAuth`], [`Trust`]) and the rustls
//!   configs built from PEM files ([`server_config`], [`client_config`]), with a clear
//!   [`TlsError`] naming the file when a path or its PEM is wrong;
//! - how a listener tells a TLS client from a plaintext one ([`Listener::decide`]): by the
//!   first byte, 0x16 being the record type of a ClientHello, as RocketMQ's
//!   `TlsModeHandler` does, so that `permissive` serves both on one port;
//! - a blocking stream ([`BlockingTls`], [`SyncStream`]) for the std-thread sides: the
//!   NameServer, the broker's NameServer link and the native client, whose reader thread and
//!   writers share one connection. The rustls session sits behind a mutex that is never held
//!   across a socket read, so a reader blocked in `read` does not stall the writers.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use rustls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// The first byte of a TLS record carrying a handshake message: every ClientHello starts
/// with it, and no plaintext frame of either protocol does in practice (a native frame starts
/// with its magic, a remoting frame with a length below 16 MiB, whose first byte is 0 or 1).
pub const HANDSHAKE_RECORD_TYPE: u8 = 0x16;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} `{}`: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the {what} `{}` is not valid PEM: {detail}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("the {what} `{}` holds no {expected}", path.display())]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("TLS setup: {0}")]
    Setup(String),
    #[error("{0}")]
    Config(String),
}

/// Whether and how a listener speaks TLS (RocketMQ's `tls.server.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Plaintext only, as without TLS: nothing is checked per connection.
    #[default]
    Disabled,
    /// TLS and plaintext on the same port, told apart by the first byte.
    Permissive,
    /// TLS only: a plaintext client is closed.
    Enforcing,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Disabled => "disabled",
            Mode::Permissive => "permissive",
            Mode::Enforcing => "enforcing",
        }
    }

    pub fn parse(s: &str) -> Result<Mode, TlsError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "disabled" => Ok(Mode::Disabled),
            "permissive" => Ok(Mode::Permissive),
            "enforcing" => Ok(Mode::Enforcing),
            other => Err(TlsError::Config(format!(
                "tls_mode must be disabled, permissive or enforcing, got `{other}`"
            ))),
        }
    }
}

/// Whether a TLS server asks its clients for a certificate (RocketMQ's
/// `tls.server.need.client.auth`: none, optional, require).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    #[default]
    None,
    /// A certificate is asked for; one that is sent must chain to the trusted CAs.
    Optional,
    /// A client without a certificate that chains to the trusted CAs is refused.
    Require,
}

impl ClientAuth {
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Optional => "optional",
            ClientAuth::Require => "require",
        }
    }

    pub fn parse(s: &str) -> Result<ClientAuth, TlsError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "optional" => Ok(ClientAuth::Optional),
            "require" => Ok(ClientAuth::Require),
            other => Err(TlsError::Config(format!(
                "tls_client_auth must be none, optional or require, got `{other}`"
            ))),
        }
    }
}

/// What a TLS server presents and whom it asks for a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// PEM certificate chain, the server's own first.
    pub cert_path: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_path: PathBuf,
    pub client_auth: ClientAuth,
    /// PEM CA certificates that client certificates must chain to; needed unless
    /// `client_auth` is `none`.
    pub trust_cert_path: Option<PathBuf>,
}

/// Which servers a TLS client believes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Servers whose certificate chains to these PEM CA certificates and names the address
    /// dialed (a DNS name or an IP address).
    Roots(PathBuf),
    /// Any server certificate, unchecked (signatures of the handshake still are): RocketMQ's
    /// `tls.test.mode.enable`, for tests and trials. It protects against listening, not
    /// against a man in the middle.
    Any,
}

/// A TLS client's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    pub trust: Trust,
    /// A certificate and key to present to servers that ask for one (both or neither).
    pub cert_path: Option<PathBuf>,
    pub key_path: Option<PathBuf>,
}

impl ClientSettings {
    /// Trust the CA certificates in `path`, present no certificate.
    pub fn trusting(path: impl Into<PathBuf>) -> ClientSettings {
        ClientSettings {
            trust: Trust::Roots(path.into()),
            cert_path: None,
            key_path: None,
        }
    }

    /// Trust any server (see [`Trust::Any`]).
    pub fn trust_any() -> ClientSettings {
        ClientSettings {
            trust: Trust::Any,
            cert_path: None,
            key_path: None,
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// The certificates in a PEM file, at least one.
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
            expected: "CERTIFICATE block",
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub fn load_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_file(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what,
            path: path.to_owned(),
            expected: "PRIVATE KEY block",
        },
        other => TlsError::Pem {
            what,
            path: path.to_owned(),
            detail: other.to_string(),
        },
    })
}

fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in load_certs(what, path)? {
        store.add(cert).map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            detail: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(store)
}

fn setup(e: rustls::Error) -> TlsError {
    TlsError::Setup(e.to_string())
}

/// The rustls server config for `s`; every file is read and checked here, at start-up.
pub fn server_config(s: &ServerSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs("TLS certificate", &s.cert_path)?;
    let key = load_key("TLS key", &s.key_path)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(setup)?;
    let builder = match s.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let path = s.trust_cert_path.as_deref().ok_or_else(|| {
                TlsError::Config(format!(
                    "tls_client_auth = {} needs tls_trust_cert_path (the CAs client certificates must chain to)",
                    auth.name()
                ))
            })?;
            let store = Arc::new(roots("TLS trust certificate", path)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(store, provider());
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError::Setup(format!(
            "the certificate and the key do not go together: {e}"
        ))
    })?;
    // gRPC clients (RocketMQ 5's SDKs) offer HTTP/2 by ALPN and refuse a server that does
    // not pick it; clients of the other protocols offer none, and ALPN stays out of their
    // handshakes.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The rustls client config for `s`.
pub fn client_config(s: &ClientSettings) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(setup)?;
    let builder = match &s.trust {
        Trust::Roots(path) => builder.with_root_certificates(roots("TLS trust certificate", path)?),
        Trust::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider()))),
    };
    let config = match (&s.cert_path, &s.key_path) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                load_certs("TLS client certificate", cert)?,
                load_key("TLS client key", key)?,
            )
            .map_err(|e| {
                TlsError::Setup(format!(
                    "the client certificate and key do not go together: {e}"
                ))
            })?,
        _ => {
            return Err(TlsError::Config(
                "a TLS client certificate needs its key, and a key its certificate".into(),
            ))
        }
    };
    Ok(Arc::new(config))
}

/// The name a client checks the server's certificate against: the host of `addr`
/// (`host:port`, `[v6]:port` or a bare host), an IP address or a DNS name.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.is_empty() => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| TlsError::Config(format!("`{host}` is no TLS server name: {e}")))
}

/// Accepts any server certificate; checks the handshake's signatures (see [`Trust::Any`]).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A listener's TLS: its mode and, unless disabled, its server config.
#[derive(Debug, Clone, Default)]
pub struct Listener {
    pub mode: Mode,
    /// `Some` exactly when `mode` is not `Disabled`.
    pub config: Option<Arc<ServerConfig>>,
}

/// What to do with a new connection, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Plain,
    Tls,
    /// Plaintext on an enforcing listener.
    Refuse,
}

impl Listener {
    /// The listener of `mode`; `settings` are needed unless it is disabled.
    pub fn new(mode: Mode, settings: Option<&ServerSettings>) -> Result<Listener, TlsError> {
        if mode == Mode::Disabled {
            return Ok(Listener::default());
        }
        let settings = settings.ok_or_else(|| {
            TlsError::Config(format!(
                "tls_mode = {} needs tls_cert_path and tls_key_path",
                mode.name()
            ))
        })?;
        Ok(Listener {
            mode,
            config: Some(server_config(settings)?),
        })
    }

    /// Whether a connection must be looked at before it is served.
    pub fn enabled(&self) -> bool {
        self.mode != Mode::Disabled
    }

    pub fn decide(&self, first_byte: u8) -> Decision {
        match (self.mode, first_byte == HANDSHAKE_RECORD_TYPE) {
            (Mode::Disabled, _) => Decision::Plain,
            (_, true) => Decision::Tls,
            (Mode::Permissive, false) => Decision::Plain,
            (Mode::Enforcing, false) => Decision::Refuse,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tls_io_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// A failed handshake, said so that the user sees the likely cause: a peer whose first
/// answer is no TLS record at all is a plaintext server.
fn handshake_error(e: rustls::Error) -> io::Error {
    match e {
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => io::Error::new(
            io::ErrorKind::InvalidData,
            "TLS handshake failed: the server answered in plaintext (is its tls_mode disabled?)",
        ),
        other => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("TLS handshake failed: {other}"),
        ),
    }
}

/// Runs the handshake of `conn` over `sock` to completion, every read bounded by
/// `deadline` (a peer that stalls or trickles cannot hold the caller past it). The socket's
/// read timeout is left changed: the caller sets its own afterwards.
pub fn handshake(
    mut conn: rustls::Connection,
    sock: TcpStream,
    deadline: Instant,
) -> io::Result<BlockingTls> {
    let mut s = &sock;
    while conn.is_handshaking() {
        while conn.wants_write() {
            conn.write_tls(&mut s)?;
        }
        if !conn.is_handshaking() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the TLS handshake did not finish in time",
            ));
        }
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        if conn.read_tls(&mut s)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed during the TLS handshake",
            ));
        }
        if let Err(e) = conn.process_new_packets() {
            // Tell the peer why (the alert is queued), then give up.
            let _ = conn.write_tls(&mut s);
            return Err(handshake_error(e));
        }
    }
    while conn.wants_write() {
        conn.write_tls(&mut s)?;
    }
    Ok(BlockingTls {
        inner: Arc::new(Inner {
            sock,
            session: Mutex::new(Session {
                conn,
                pending: Vec::new(),
            }),
            send: Mutex::new(()),
        }),
    })
}

/// Dials TLS over a connected socket: the client handshake with `config`, naming the
/// server `addr` (see [`server_name`]), bounded by `timeout`.
pub fn connect(
    config: &Arc<ClientConfig>,
    addr: &str,
    sock: TcpStream,
    timeout: Duration,
) -> io::Result<BlockingTls> {
    let name = server_name(addr).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let conn = rustls::ClientConnection::new(config.clone(), name).map_err(tls_io_error)?;
    handshake(conn.into(), sock, Instant::now() + timeout)
}

/// Accepts TLS on a connected socket, bounded by `deadline`.
pub fn accept(
    config: &Arc<ServerConfig>,
    sock: TcpStream,
    deadline: Instant,
) -> io::Result<BlockingTls> {
    let conn = rustls::ServerConnection::new(config.clone()).map_err(tls_io_error)?;
    handshake(conn.into(), sock, deadline)
}

/// A TLS connection over a blocking socket, shared by clones: one thread may read while
/// others write. Reads take the session's lock only to decrypt what the socket delivered;
/// writes encrypt under it and send outside it, in order (a second lock orders the sends).
#[derive(Clone)]
pub struct BlockingTls {
    inner: Arc<Inner>,
}

struct Inner {
    sock: TcpStream,
    session: Mutex<Session>,
    /// Held while records go to the socket, so records leave in the order they were sealed.
    /// Taken before `session` when both are.
    send: Mutex<()>,
}

struct Session {
    conn: rustls::Connection,
    /// Bytes read from the socket that rustls has not taken yet.
    pending: Vec<u8>,
}

/// Bytes read from the socket at once.
const READ_BYTES: usize = 16 * 1024;

impl BlockingTls {
    /// The socket, for its timeouts and options.
    pub fn socket(&self) -> &TcpStream {
        &self.inner.sock
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.sock.shutdown(how)
    }

    /// Sends what the session has queued (alerts, key updates) on the reading side.
    fn flush_queued(&self) -> io::Result<()> {
        let _send = lock(&self.inner.send);
        let out = {
            let mut s = lock(&self.inner.session);
            let mut out = Vec::new();
            while s.conn.wants_write() {
                s.conn.write_tls(&mut out)?;
            }
            out
        };
        (&self.inner.sock).write_all(&out)
    }

    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut raw = [0u8; READ_BYTES];
        loop {
            {
                let mut s = lock(&self.inner.session);
                match s.conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if !s.pending.is_empty() {
                    let Session { conn, pending } = &mut *s;
                    let mut rest = &pending[..];
                    let taken = conn.read_tls(&mut rest)?;
                    pending.drain(..taken);
                    let processed = conn.process_new_packets();
                    let wants_write = conn.wants_write();
                    drop(s);
                    if wants_write {
                        self.flush_queued()?;
                    }
                    processed.map_err(tls_io_error)?;
                    continue;
                }
            }
            // Outside the lock: writers go on while this waits for bytes.
            let n = (&self.inner.sock).read(&mut raw)?;
            let mut s = lock(&self.inner.session);
            if n == 0 {
                // The socket's end: rustls tells a clean close (close_notify) from a cut.
                let mut empty: &[u8] = &[];
                s.conn.read_tls(&mut empty)?;
                s.conn.process_new_packets().map_err(tls_io_error)?;
            } else {
                s.pending.extend_from_slice(&raw[..n]);
            }
        }
    }

    fn write_some(&self, data: &[u8]) -> io::Result<usize> {
        let _send = lock(&self.inner.send);
        let out = {
            let mut s = lock(&self.inner.session);
            let mut written = 0;
            let mut out = Vec::with_capacity(data.len() + 64);
            while written < data.len() {
                let n = s.conn.writer().write(&data[written..])?;
                while s.conn.wants_write() {
                    s.conn.write_tls(&mut out)?;
                }
                if n == 0 && !s.conn.wants_write() {
                    break;
                }
                written += n;
            }
            (written, out)
        };
        (&self.inner.sock).write_all(&out.1)?;
        Ok(out.0)
    }
}

impl Read for &BlockingTls {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
}

impl Write for &BlockingTls {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_some(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for BlockingTls {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
}

impl Write for BlockingTls {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_some(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A blocking connection, plaintext or TLS. Clones share the connection.
pub enum SyncStream {
    Plain(TcpStream),
    Tls(BlockingTls),
}

impl SyncStream {
    /// The socket, for its timeouts and options.
    pub fn socket(&self) -> &TcpStream {
        match self {
            SyncStream::Plain(s) => s,
            SyncStream::Tls(t) => t.socket(),
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.socket().shutdown(how)
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(d)
    }

    pub fn try_clone(&self) -> io::Result<SyncStream> {
        Ok(match self {
            SyncStream::Plain(s) => SyncStream::Plain(s.try_clone()?),
            SyncStream::Tls(t) => SyncStream::Tls(t.clone()),
        })
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, SyncStream::Tls(_))
    }

    /// Connects `sock` (dialed to `addr`) with TLS when `config` is given.
    pub fn dial(
        config: Option<&Arc<ClientConfig>>,
        addr: &str,
        sock: TcpStream,
        timeout: Duration,
    ) -> io::Result<SyncStream> {
        match config {
            None => Ok(SyncStream::Plain(sock)),
            Some(c) => connect(c, addr, sock, timeout).map(SyncStream::Tls),
        }
    }
}

impl Read for &SyncStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            SyncStream::Plain(s) => (&*s).read(buf),
            SyncStream::Tls(t) => t.read_some(buf),
        }
    }
}

impl Write for &SyncStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            SyncStream::Plain(s) => (&*s).write(data),
            SyncStream::Tls(t) => t.write_some(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for SyncStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for SyncStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        (&*self).write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads the first byte of a new connection without taking it, waiting until `deadline`.
/// `None`: the peer closed or sent nothing in time.
pub fn peek_first_byte(sock: &TcpStream, deadline: Instant) -> io::Result<Option<u8>> {
    let mut b = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        sock.set_read_timeout(Some(left))?;
        match sock.peek(&mut b) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(b[0])),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(feature = "refusal")]
mod refusal;
#[cfg(feature = "refusal")]
pub use refusal::{
    answer_plaintext_blocking, refuse_plaintext, Refusal, PLAINTEXT_REFUSED, REFUSAL_READ_BYTES_MAX,
};

#[cfg(test)]
mod tests;
