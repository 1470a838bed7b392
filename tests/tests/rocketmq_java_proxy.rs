//! Apache's `rocketmq-proxy` 5.3.3 in cluster mode (`tests/rocketmq-proxy/server`), its
//! NameServer corvus's, in front of corvus: the Proxy starts, a producer on RocketMQ's v5 gRPC
//! SDK (`rocketmq-client-java` 5.0.8, `tests/rocketmq-proxy`) sends three messages through it
//! and corvus stores them, and then every scenario of the v5 SDK program
//! (`corvus.v5.Scenarios`, `tests/rocketmq-v5`: produce, fifo, delay, delay-receive,
//! transaction-send, transaction, simple, push, fifo-push, share) runs through the Proxy and
//! its transcript must equal the one Apache RocketMQ 5.3.3 and its Proxy gave
//! (`tests/rocketmq-v5/expected/`), two at a time, as `rocketmq_v5_java.rs` runs them against
//! corvus's own gRPC service. No scenario is left out.
//!
//! The Proxy speaks remoting to corvus: routes and topic configs (GET_TOPIC_CONFIG gives a
//! topic's `message.type`), SEND_MESSAGE with queue id -1, END_TRANSACTION and the broker's
//! transaction checks, GET_SUBSCRIPTIONGROUP_CONFIG (retryMaxTimes, consumeMessageOrderly),
//! POP_MESSAGE with initMode MAX, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with the
//! handle it built from the pop's header, and CONSUMER_SEND_MSG_BACK with delay level -1 for
//! a dead letter. It needs a route for the topic named after the cluster (it creates its
//! system topics through it). On failure the test prints the Proxy's logged errors
//! (`proxy.log`, `remoting.log`); `tests/rocketmq-proxy/run.sh` runs the Proxy and the
//! producer by hand.
//!
//! `.ci/run` builds the programs (`mvn` there, which writes `cp.txt`); without a JVM and the
//! builds the test says so and skips, and fails where `CORVUS_REQUIRE_JAVA` is set, as CI
//! sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::v5::{self, broker_conf_args, prepare};
use integration::{
    create_topic, drain_topic, free_ports, java_program_or_skip, run_client_program,
    workspace_root, Cluster,
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
fn v5_grpc_sdk_through_apache_proxy_to_corvus() {
    let Some((server_cp, client_cp)) = proxy_or_skip() else {
        return;
    };
    let Some(scenarios) =
        java_program_or_skip("tests/rocketmq-v5", Some("corvus/v5/Scenarios.class"))
    else {
        return;
    };
    let c = Cluster::start_with(1, "small", |o| o.extra = broker_conf_args());
    create_topic(&c.namesrv.addr, "ProxyTopic", 4);
    let names = v5::all_names();
    prepare(&c, &names);
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
    let endpoint = format!("127.0.0.1:{grpc}");
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx128m")
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(&client_cp)
        .arg("corvus.proxy.GrpcProducer")
        .args([endpoint.as_str(), "ProxyTopic", "3"]);
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

    let failures = v5::lanes(&names, |name| {
        v5::java_scenario(&scenarios, &endpoint, &home, name, &[])
    });
    assert!(
        failures.is_empty(),
        "{} of {} scenarios through the Proxy differ from Apache's transcripts:\n{}\n== the Proxy's errors:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n"),
        proxy_errors(&home)
    );
}

/// The Proxy's logged errors (its own and its remoting client's), each distinct one once,
/// at most 40.
fn proxy_errors(home: &std::path::Path) -> String {
    let logs = home.join("logs/rocketmqlogs");
    let mut seen = std::collections::BTreeSet::new();
    for file in ["proxy.log", "remoting.log"] {
        let text = std::fs::read_to_string(logs.join(file)).unwrap_or_default();
        for line in text.lines() {
            if line.contains("ERROR") || line.contains("Exception:") {
                // Without the timestamp, so repeats fold.
                let line = line.split_once(' ').map_or(line, |(_, rest)| rest);
                let line = line.split_once(' ').map_or(line, |(_, rest)| rest);
                seen.insert(line.chars().take(400).collect::<String>());
            }
        }
    }
    seen.into_iter().take(40).collect::<Vec<_>>().join("\n")
}
