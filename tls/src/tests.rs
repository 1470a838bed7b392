use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;

use super::*;

/// A CA and a server certificate it signed, for 127.0.0.1 and localhost, in `dir`.
fn make_certs(dir: &Path) -> ServerSettings {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("params");
    let cert = params.signed_by(&key, &ca_cert, &ca_key).expect("cert");
    fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write");
    fs::write(dir.join("server.pem"), cert.pem()).expect("write");
    fs::write(dir.join("server.key"), key.serialize_pem()).expect("write");
    ServerSettings {
        cert_path: dir.join("server.pem"),
        key_path: dir.join("server.key"),
        client_auth: ClientAuth::None,
        trust_cert_path: None,
    }
}

#[test]
fn bad_paths_and_pem_are_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = make_certs(dir.path());
    s.cert_path = dir.path().join("missing.pem");
    let e = server_config(&s).expect_err("missing file").to_string();
    assert!(e.contains("missing.pem"), "{e}");
    fs::write(dir.path().join("junk.pem"), "not pem at all").expect("write");
    s.cert_path = dir.path().join("junk.pem");
    let e = server_config(&s).expect_err("no certificate").to_string();
    assert!(e.contains("junk.pem") && e.contains("CERTIFICATE"), "{e}");
    s.cert_path = dir.path().join("server.pem");
    s.key_path = dir.path().join("server.pem");
    let e = server_config(&s).expect_err("no key").to_string();
    assert!(e.contains("PRIVATE KEY"), "{e}");
}

#[test]
fn permissive_and_enforcing_decide_by_the_first_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = make_certs(dir.path());
    let p = Listener::new(Mode::Permissive, Some(&s)).expect("listener");
    let e = Listener::new(Mode::Enforcing, Some(&s)).expect("listener");
    assert_eq!(p.decide(0x16), Decision::Tls);
    assert_eq!(p.decide(0x00), Decision::Plain);
    assert_eq!(e.decide(0x16), Decision::Tls);
    assert_eq!(e.decide(0x00), Decision::Refuse);
    assert!(Listener::new(Mode::Enforcing, None).is_err());
    assert_eq!(
        Listener::new(Mode::Disabled, None)
            .expect("off")
            .decide(0x16),
        Decision::Plain
    );
}

#[test]
fn a_reader_thread_and_a_writer_share_one_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = make_certs(dir.path());
    let server = server_config(&s).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    // An echo server over TLS.
    let echo = thread::spawn(move || {
        let (sock, _) = listener.accept().expect("accept");
        let tls =
            accept(&server, sock, Instant::now() + Duration::from_secs(5)).expect("accept tls");
        tls.socket().set_read_timeout(None).expect("timeout");
        let mut buf = [0u8; 4096];
        loop {
            // The client shuts the socket down without a close_notify: a cut, not an end.
            let n = match (&tls).read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => panic!("server read: {e}"),
            };
            (&tls).write_all(&buf[..n]).expect("server write");
        }
    });
    let client =
        client_config(&ClientSettings::trusting(dir.path().join("ca.pem"))).expect("client");
    let sock = TcpStream::connect(&addr).expect("connect");
    let tls = connect(&client, &addr, sock, Duration::from_secs(5)).expect("handshake");
    tls.socket()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let total = 1 << 20;
    let reader = {
        let tls = tls.clone();
        thread::spawn(move || {
            let mut got = Vec::with_capacity(total);
            let mut buf = [0u8; 8192];
            while got.len() < total {
                let n = (&tls).read(&mut buf).expect("client read");
                assert!(n > 0, "closed early after {} bytes", got.len());
                got.extend_from_slice(&buf[..n]);
            }
            got
        })
    };
    let sent: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    for chunk in sent.chunks(10_000) {
        (&tls).write_all(chunk).expect("client write");
    }
    let got = reader.join().expect("reader");
    assert!(got == sent, "the echo differs from what was sent");
    tls.shutdown(Shutdown::Both).expect("shutdown");
    echo.join().expect("echo");
}

#[test]
fn a_client_trusting_another_ca_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = tempfile::tempdir().expect("tempdir");
    let s = make_certs(dir.path());
    make_certs(other.path());
    let server = server_config(&s).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = thread::spawn(move || {
        let (sock, _) = listener.accept().expect("accept");
        accept(&server, sock, Instant::now() + Duration::from_secs(5)).is_ok()
    });
    let client =
        client_config(&ClientSettings::trusting(other.path().join("ca.pem"))).expect("client");
    let sock = TcpStream::connect(&addr).expect("connect");
    let e = connect(&client, &addr, sock, Duration::from_secs(5))
        .err()
        .expect("an unknown CA must fail");
    assert!(e.to_string().contains("TLS"), "{e}");
    assert!(!t.join().expect("server"));
    // Trusting any server connects to the same one.
    let any = client_config(&ClientSettings::trust_any()).expect("client");
    let server = server_config(&s).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = thread::spawn(move || {
        let (sock, _) = listener.accept().expect("accept");
        accept(&server, sock, Instant::now() + Duration::from_secs(5)).is_ok()
    });
    let sock = TcpStream::connect(&addr).expect("connect");
    connect(&any, &addr, sock, Duration::from_secs(5)).expect("trust any");
    assert!(t.join().expect("server"));
}

#[test]
fn a_silent_client_cannot_hold_the_handshake_past_its_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server_config(&make_certs(dir.path())).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _silent = TcpStream::connect(addr).expect("connect");
    let (sock, _) = listener.accept().expect("accept");
    let started = Instant::now();
    let e = accept(&server, sock, Instant::now() + Duration::from_millis(300))
        .err()
        .expect("no handshake");
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn server_names_come_from_the_address() {
    assert!(matches!(
        server_name("127.0.0.1:9876"),
        Ok(ServerName::IpAddress(_))
    ));
    assert!(matches!(
        server_name("[::1]:9876"),
        Ok(ServerName::IpAddress(_))
    ));
    assert!(matches!(
        server_name("broker-a.example:10911"),
        Ok(ServerName::DnsName(_))
    ));
}
