//! Apache's `rocketmq-proxy` 5.3.3 in cluster mode (`tests/rocketmq-proxy/server`) in front of
//! corvus, and a producer on RocketMQ's v5 gRPC SDK (`rocketmq-client-java` 5.0.8,
//! `tests/rocketmq-proxy`) through it: the Proxy starts against corvus's NameServer, the
//! producer's three sends succeed and corvus stores them. A send with a delivery timestamp,
//! one with a message group and a SimpleConsumer's receive (POP, not served by corvus) are
//! tried and only reported.
//!
//! The Proxy needs two things of the brokers behind it: a route for the topic named after
//! their cluster (its system topics are created through it; without one it exits at its start,
//! "No topic route info in name server for the topic: DefaultCluster") and GET_TOPIC_CONFIG
//! with the topic's attributes (it learns a topic's message type there; without it the
//! producer does not start, "Message type is not specified").
//! `tests/rocketmq-proxy/run.sh` runs the same by hand and prints the Proxy's errors.
//!
//! `.ci/run` builds both (`mvn` there, which writes `cp.txt`); without a JVM and the builds the
//! test says so and skips, and fails where `CORVUS_REQUIRE_JAVA` is set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::{
    create_topic, drain_topic, free_ports, run_client_program, workspace_root, Cluster,
};

/// The Proxy's and the producer's classpaths, or `None` after saying why the test does not
/// run.
fn proxy_or_skip() -> Option<(String, String)> {
    let dir = workspace_root().join("tests/rocketmq-proxy");
    let server = std::fs::read_to_string(dir.join("server/cp.txt")).ok();
    let client = std::fs::read_to_string(dir.join("cp.txt")).ok();
    let classes = dir.join("target/classes");
    match (server, client) {
        (Some(server), Some(client))
            if classes.join("corvus/proxy/GrpcProducer.class").exists() =>
        {
            Some((
                server.trim().to_owned(),
                format!("{}:{}", classes.display(), client.trim()),
            ))
        }
        _ => {
            let msg = "the Proxy and the gRPC producer are not fetched and built (cd tests/rocketmq-proxy && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=cp.txt && cd server && mvn -q -B dependency:build-classpath -Dmdep.outputFile=cp.txt)";
            assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
            eprintln!("skipped: {msg}");
            None
        }
    }
}

/// The Proxy's process, killed when dropped.
struct Proxy(std::process::Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_v5_grpc_producer_sends_through_apache_proxy_to_corvus() {
    let Some((server_cp, client_cp)) = proxy_or_skip() else {
        return;
    };
    let c = Cluster::start(1, "small");
    create_topic(&c.namesrv.addr, "ProxyTopic", 4);
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let ports = free_ports(2);
    let (grpc, remoting) = (ports[0], ports[1]);
    let conf = c.dir.path().join("rmq-proxy.json");
    std::fs::write(
        &conf,
        format!(
            r#"{{"rocketMQClusterName": "DefaultCluster", "namesrvAddr": "{}", "proxyMode": "cluster", "grpcServerPort": {grpc}, "remotingListenPort": {remoting}}}"#,
            c.namesrv.addr
        ),
    )
    .unwrap();
    let log = std::fs::File::create(c.dir.path().join("proxy.out")).unwrap();
    let mut proxy = Proxy(
        Command::new("java")
            .args(["-Xms128m", "-Xmx256m", "-XX:TieredStopAtLevel=1"])
            .arg(format!("-Duser.home={}", home.display()))
            .arg("-cp")
            .arg(&server_cp)
            .arg("org.apache.rocketmq.proxy.ProxyStartup")
            .arg("-pc")
            .arg(&conf)
            .args(["-pm", "cluster"])
            .env("ROCKETMQ_HOME", &home)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // The Proxy is up once its gRPC port accepts; it exits if it cannot start.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", grpc)).is_ok() {
            break;
        }
        let out = std::fs::read_to_string(c.dir.path().join("proxy.out")).unwrap_or_default();
        assert!(
            proxy.0.try_wait().unwrap().is_none(),
            "the Proxy exited at its start:\n{out}"
        );
        assert!(
            Instant::now() < deadline,
            "the Proxy did not listen within 120 s:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx128m")
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(&client_cp)
        .arg("corvus.proxy.GrpcProducer")
        .args([format!("127.0.0.1:{grpc}").as_str(), "ProxyTopic", "3"]);
    let (status, lines) = run_client_program("grpc", &mut cmd, Duration::from_secs(150));
    assert!(
        status.success() && lines.iter().any(|l| l == "ALL SENT 3"),
        "the v5 producer sent all three through the Proxy ({status}): {lines:?}"
    );
    // corvus stored what the Proxy forwarded.
    let consumer = client::PullConsumer::new(&c.namesrv.addr, "proxy-check").unwrap();
    let got = drain_topic(&consumer, "ProxyTopic", Duration::from_secs(30));
    let mut bodies: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(m.body.as_ref()).into_owned())
        .filter(|b| b.starts_with("grpc-") && b != "grpc-delayed" && b != "grpc-fifo")
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["grpc-0", "grpc-1", "grpc-2"]);
}
