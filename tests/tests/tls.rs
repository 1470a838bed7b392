//! TLS with the real binaries on loopback: a CA and a server certificate are made at test
//! time (rcgen), the NameServer and the broker serve TLS (`tls_mode` enforcing or
//! permissive), the broker registers with the NameServer over TLS, and the native client,
//! mqadmin and a slave's replication link speak TLS. An enforcing broker refuses a
//! plaintext client with an error that says so, and goes on serving TLS clients; a
//! permissive one serves both on one port; an idle TLS connection is closed after
//! `connection_idle_timeout_ms` as a plaintext one is.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use client::tls::ClientSettings;
use client::{ClientConfig, Message, PullConsumer};
use integration::*;

/// A CA and a server certificate it signed for 127.0.0.1 and localhost, as PEM files.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "corvus test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "corvus test server");
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
        std::fs::write(&pki.cert, cert.pem()).unwrap();
        std::fs::write(&pki.key, key.serialize_pem()).unwrap();
        pki
    }

    fn client(&self) -> ClientSettings {
        ClientSettings::trusting(&self.ca)
    }

    /// The broker keys for TLS on its listeners in `mode` and on its own links.
    fn broker_toml(&self, mode: &str) -> String {
        format!(
            "tls_mode = \"{mode}\"\ntls_cert_path = \"{}\"\ntls_key_path = \"{}\"\n\
             tls_client_enable = true\ntls_client_trust_cert_path = \"{}\"\n",
            self.cert.display(),
            self.key.display(),
            self.ca.display()
        )
    }

    fn namesrv_args(&self, mode: &str) -> Vec<String> {
        vec![
            "--tls-mode".into(),
            mode.into(),
            "--tls-cert-path".into(),
            self.cert.display().to_string(),
            "--tls-key-path".into(),
            self.key.display().to_string(),
        ]
    }
}

/// A NameServer and a one-core broker, both in TLS `mode`.
struct TlsCluster {
    dir: tempfile::TempDir,
    pki: Pki,
    ns: Proc,
    broker: Proc,
}

impl TlsCluster {
    fn start(ns_mode: &str, broker_mode: &str, extra_toml: &str) -> TlsCluster {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let pki = Pki::new(dir.path());
        let args = pki.namesrv_args(ns_mode);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ns = start_namesrv_with(&logs, &args);
        let mut o = BrokerOpts::new(&ns.addr, &dir.path().join("data"));
        o.config_toml = Some(format!("{}{extra_toml}", pki.broker_toml(broker_mode)));
        let broker = start_broker(&o, &logs);
        TlsCluster {
            dir,
            pki,
            ns,
            broker,
        }
    }

    fn tls_config(&self) -> ClientConfig {
        ClientConfig::new(&self.ns.addr)
            .unwrap()
            .with_tls(&self.pki.client())
            .unwrap()
    }

    fn tls_producer(&self) -> client::Producer {
        client::Producer::builder()
            .namesrv(&self.ns.addr)
            .group("tls-producer")
            .send_timeout_ms(5000)
            .tls(self.pki.client())
            .build()
            .unwrap()
    }

    fn tls_consumer(&self) -> PullConsumer {
        PullConsumer::with_config(self.tls_config(), "tls-consumer").unwrap()
    }

    fn tls_admin(&self) -> client::Admin {
        client::Admin::with_config(self.tls_config()).unwrap()
    }

    /// mqadmin `args` with `--tls --tls-trust-cert CA`.
    fn mqadmin_tls(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(bin("mqadmin"));
        cmd.args(["-n", &self.ns.addr, "--tls", "--tls-trust-cert"])
            .arg(&self.pki.ca)
            .args(args)
            .stdin(Stdio::null());
        cmd.output().unwrap()
    }

    /// Creates `topic` with mqadmin over TLS, waiting (bounded) until the broker has
    /// registered with the NameServer (over TLS).
    fn create_topic(&self, topic: &str, queues: u32) {
        let q = queues.to_string();
        let mut last = String::new();
        let made = wait_for(Duration::from_secs(20), || {
            let out = self.mqadmin_tls(&["update-topic", "-t", topic, "-q", &q]);
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            out.status.success().then_some(())
        });
        assert!(
            made.is_some(),
            "update-topic over TLS: {last}\nbroker:\n{}\nnamesrv:\n{}",
            self.broker.stderr(),
            self.ns.stderr()
        );
    }
}

/// Sends `n` numbered messages through `p`; returns their bodies.
fn send_n(p: &client::Producer, topic: &str, tag: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let body = format!("{tag}-{i}").into_bytes();
            p.send(Message::new(topic, body.clone())).unwrap();
            body
        })
        .collect()
}

fn bodies(c: &PullConsumer, topic: &str) -> Vec<Vec<u8>> {
    let mut got: Vec<Vec<u8>> = drain_topic(c, topic, Duration::from_secs(20))
        .into_iter()
        .map(|m| m.body.to_vec())
        .collect();
    got.sort();
    got
}

/// Whether the peer has closed `s` (end of stream or a reset), waiting at most `within`.
fn closed_within(s: &mut impl Read, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut b = [0u8; 256];
    while Instant::now() < deadline {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn an_enforcing_broker_serves_tls_clients_and_tells_a_plaintext_one_why_it_is_refused() {
    let c = TlsCluster::start("enforcing", "enforcing", "");
    c.create_topic("TlsOnly", 2);

    // Sends and pulls over TLS, routes from the NameServer over TLS.
    let p = c.tls_producer();
    let mut sent = send_n(&p, "TlsOnly", "tls", 30);
    sent.sort();
    assert_eq!(bodies(&c.tls_consumer(), "TlsOnly"), sent);

    // A plaintext client is refused, and told why.
    let plain = client::Admin::new(&c.ns.addr).unwrap();
    let e = plain.broker_status(&c.broker.addr).unwrap_err().to_string();
    assert!(e.contains("accepts TLS only"), "plaintext refusal: {e}");
    let plain_p = producer_without_retries(&c.ns.addr, "plain");
    let e = plain_p
        .send(Message::new("TlsOnly", b"plain".to_vec()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("accepts TLS only"),
        "plaintext send to the NameServer: {e}"
    );
    // mqadmin without --tls says the same.
    let out = mqadmin(&c.ns.addr, &["broker-status", "-b", &c.broker.addr]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("accepts TLS only"),
        "mqadmin without --tls: {err}"
    );

    // The broker goes on serving TLS clients: the producer's connection and a new one.
    sent.extend(send_n(&p, "TlsOnly", "after", 10));
    let p2 = c.tls_producer();
    sent.extend(send_n(&p2, "TlsOnly", "new", 10));
    sent.sort();
    assert_eq!(bodies(&c.tls_consumer(), "TlsOnly"), sent);

    // The refusals are counted, and mqadmin reads them over TLS.
    let out = c.mqadmin_tls(&["--json", "broker-status", "-b", &c.broker.addr]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["cores"][0]["connections_tls_refused"].as_u64().unwrap() >= 2,
        "{v}"
    );
    let st = c.tls_admin().broker_status(&c.broker.addr).unwrap();
    assert!(st.cores[0].connections_tls_refused >= 2);
}

#[test]
fn a_permissive_broker_serves_tls_and_plaintext_clients_on_one_port() {
    let c = TlsCluster::start("permissive", "permissive", "");
    c.create_topic("Both", 2);
    let tls_p = c.tls_producer();
    let plain_p = producer(&c.ns.addr);
    let mut sent = send_n(&tls_p, "Both", "tls", 20);
    sent.extend(send_n(&plain_p, "Both", "plain", 20));
    sent.extend(send_n(&tls_p, "Both", "tls-again", 5));
    sent.sort();
    assert_eq!(bodies(&c.tls_consumer(), "Both"), sent);
    let plain_c = PullConsumer::new(&c.ns.addr, "plain-consumer").unwrap();
    assert_eq!(bodies(&plain_c, "Both"), sent);
    // mqadmin both ways.
    assert!(
        mqadmin(&c.ns.addr, &["broker-status", "-b", &c.broker.addr])
            .status
            .success()
    );
    assert!(c
        .mqadmin_tls(&["broker-status", "-b", &c.broker.addr])
        .status
        .success());
}

#[test]
fn a_tls_client_of_a_plaintext_server_is_told_it_answered_in_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let pki = Pki::new(dir.path());
    let ns = start_namesrv(&logs);
    let config = ClientConfig::new(&ns.addr)
        .unwrap()
        .with_tls(&pki.client())
        .unwrap();
    let admin = client::Admin::with_config(config).unwrap();
    let e = admin.broker_status(&ns.addr).unwrap_err().to_string();
    assert!(e.contains("answered in plaintext"), "{e}");
}

#[test]
fn a_broker_with_a_missing_certificate_does_not_start_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut o = BrokerOpts::new("", &dir.path().join("data"));
    o.config_toml = Some(format!(
        "tls_mode = \"enforcing\"\ntls_cert_path = \"{}\"\ntls_key_path = \"{}\"\n",
        dir.path().join("nowhere.pem").display(),
        dir.path().join("nowhere.key").display()
    ));
    let (code, text) = run_broker_expecting_exit(&o, &logs, Duration::from_secs(30));
    assert!(code.is_some_and(|c| c != 0), "{code:?}: {text}");
    assert!(text.contains("nowhere.pem"), "{text}");
}

#[test]
fn an_idle_tls_connection_is_closed_after_the_idle_timeout() {
    let c = TlsCluster::start(
        "enforcing",
        "enforcing",
        "connection_idle_timeout_ms = 2000\nframe_deadline_ms = 1000\n",
    );
    c.create_topic("Idle", 1);
    let p = c.tls_producer();
    p.send(Message::new("Idle", b"first".to_vec())).unwrap();

    // A TLS connection that completes its handshake and then says nothing.
    let config = client::tls::client_config(&c.pki.client()).unwrap();
    let sock = TcpStream::connect(&c.broker.addr).unwrap();
    let mut idle =
        client::tls::connect(&config, &c.broker.addr, sock, Duration::from_secs(5)).unwrap();
    idle.socket()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let opened = Instant::now();
    assert!(
        closed_within(&mut idle, Duration::from_secs(15)),
        "an idle TLS connection was kept for 15 s"
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(1500),
        "closed after {:?}, before the idle timeout",
        opened.elapsed()
    );

    // A connection that sends nothing at all, not even a ClientHello, is closed too.
    let mut silent = TcpStream::connect(&c.broker.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(
        closed_within(&mut silent, Duration::from_secs(15)),
        "a silent connection was kept for 15 s"
    );

    // The producer's own connection was idle long enough to be closed; it dials again.
    p.send(Message::new("Idle", b"after".to_vec())).unwrap();
    let st = c.tls_admin().broker_status(&c.broker.addr).unwrap();
    assert!(st.cores[0].connections_timed_out >= 1);
    drop(c.dir);
}

#[test]
fn a_slave_replicates_from_its_master_over_tls() {
    // The master and the slave register (over TLS) with NameServers of their own, so a
    // consumer of the slave's NameServer reads the slave alone.
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let pki = Pki::new(dir.path());
    let args = pki.namesrv_args("enforcing");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let master_ns = start_namesrv_with(&logs, &args);
    let slave_ns = start_namesrv_with(&logs, &args);
    let toml = pki.broker_toml("enforcing");
    let mut mo = BrokerOpts::new(&master_ns.addr, &dir.path().join("master"));
    mo.config_toml = Some(toml.clone());
    let master = start_broker(&mo, &logs);
    let ha = master
        .preamble_addr("broker replication on ")
        .expect("the master says where it replicates from");
    let mut so = BrokerOpts::new(&slave_ns.addr, &dir.path().join("slave"));
    so.config_toml = Some(format!(
        "broker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{ha}\"\n{toml}"
    ));
    let slave = start_broker(&so, &logs);

    let config = |ns: &str| {
        ClientConfig::new(ns)
            .unwrap()
            .with_tls(&pki.client())
            .unwrap()
    };
    let admin = client::Admin::with_config(config(&master_ns.addr)).unwrap();
    let topic = protocol::TopicConfig {
        name: "Replicated".into(),
        read_queues: 2,
        write_queues: 2,
        perm: protocol::perm::READ_WRITE,
    };
    let made = wait_for(Duration::from_secs(20), || {
        admin.create_topic(&master.addr, &topic).ok()
    });
    assert!(made.is_some(), "{}", master.stderr());
    let p = client::Producer::builder()
        .namesrv(&master_ns.addr)
        .group("tls-ha")
        .send_timeout_ms(5000)
        .tls(pki.client())
        .build()
        .unwrap();
    let probe = wait_for(Duration::from_secs(20), || {
        p.send(Message::new("Replicated", b"probe".to_vec())).ok()
    });
    assert!(probe.is_some(), "no route to the master over TLS");
    let mut sent = vec![b"probe".to_vec()];
    sent.extend(send_n(&p, "Replicated", "ha", 40));
    sent.sort();

    // The slave serves every message, read from it alone (over TLS).
    let consumer = PullConsumer::with_config(config(&slave_ns.addr), "slave-check").unwrap();
    let mut got = Vec::new();
    let all = wait_for(Duration::from_secs(30), || {
        consumer.queues("Replicated").ok()?;
        got = bodies(&consumer, "Replicated");
        (got == sent).then_some(())
    });
    assert!(
        all.is_some(),
        "the slave serves {} of {} messages\nslave:\n{}\nmaster:\n{}",
        got.len(),
        sent.len(),
        slave.stderr(),
        master.stderr()
    );
    let st = client::Admin::with_config(config(&slave_ns.addr))
        .unwrap()
        .broker_status(&slave.addr)
        .unwrap();
    assert_eq!(st.cores[0].role, "SLAVE");
}

/// The `bench` binary, built once (the shared fixture builds the servers and mqadmin only).
fn bench_bin() -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "bench"])
            .current_dir(workspace_root())
            .status()
            .unwrap();
        assert!(status.success(), "building bench failed");
    });
    bin("mqadmin").with_file_name("bench")
}

#[test]
fn bench_produces_over_tls_with_its_trust_flag() {
    let c = TlsCluster::start("enforcing", "enforcing", "");
    c.create_topic("BenchTls", 2);
    let out = Command::new(bench_bin())
        .args(["produce", "-n", &c.ns.addr, "--tls-trust-cert"])
        .arg(&c.pki.ca)
        .args([
            "-t",
            "BenchTls",
            "--messages",
            "2000",
            "--batch",
            "50",
            "--no-disk",
            "--floor-duration",
            "0",
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench over TLS: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(run["messages"], 2000, "{run}");
    assert_eq!(run["errors"], 0, "{run}");
    // What bench sent is there, read back over TLS.
    assert_eq!(bodies(&c.tls_consumer(), "BenchTls").len(), 2000);
}

/// The classpath of the RocketMQ 4.9.8 Java programs (`tests/rocketmq-java`), when built
/// (see tests/tests/rocketmq_java.rs); `None` skips, unless `CORVUS_REQUIRE_JAVA` is set.
fn java_classpath() -> Option<String> {
    let dir = workspace_root().join("tests/rocketmq-java");
    let deps = std::fs::read_to_string(dir.join("cp.txt")).ok();
    let classes = dir.join("target/classes");
    let cp = deps
        .filter(|_| classes.join("corvus/Roundtrip.class").exists())
        .map(|d| format!("{}:{}", classes.display(), d.trim()));
    if cp.is_none() {
        let msg = "the Java client program is not built (cd tests/rocketmq-java && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=cp.txt)";
        assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
    }
    cp
}

#[test]
fn the_java_rocketmq_client_with_tls_enabled_sends_and_consumes_over_tls() {
    let Some(cp) = java_classpath() else {
        return;
    };
    let c = TlsCluster::start("enforcing", "enforcing", "");
    c.create_topic("JavaTls", 4);
    // RocketMQ's client settings: TLS on, the server's certificate checked against the CA
    // (test mode off, so not any certificate).
    let trust = format!("-Dtls.client.trustCertPath={}", c.pki.ca.display());
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(&cp)
        .args([
            "-Dtls.enable=true",
            "-Dtls.test.mode.enable=false",
            "-Dtls.client.authServer=true",
            &trust,
            "corvus.Roundtrip",
            &c.ns.addr,
            "JavaTls",
            "50",
            "JavaTlsGroup",
        ])
        .env("ROCKETMQ_HOME", std::env::temp_dir());
    let (status, lines) = run_client_program("java-tls", &mut cmd, Duration::from_secs(120));
    assert!(
        status.success(),
        "{status}: {lines:?}\nbroker:\n{}",
        c.broker.stderr()
    );
    assert!(
        lines.iter().any(|l| l.starts_with("RECEIVED 60 of 60")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "ALL RECEIVED"), "{lines:?}");
    // Every connection of the Java client was TLS: none was refused for plaintext.
    let st = c.tls_admin().broker_status(&c.broker.addr).unwrap();
    assert_eq!(st.cores[0].connections_tls_refused, 0);
}
