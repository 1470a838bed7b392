//! The broker and the NameServer serve Prometheus metrics that a parser accepts, and the
//! broker's figures follow the sends.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::time::Duration;

use client::Message;
use integration::metrics::{self, scrape, sum};
use integration::{mqadmin, producer, start_namesrv_with, wait_for, Cluster};

/// A one-core cluster whose broker serves metrics, the metrics address, and the NameServer's
/// address, with `topic` created with 2 queues.
fn metered_cluster(topic: &str) -> (Cluster, String, String) {
    let (c, url) = Cluster::start_metered(1);
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, topic, 2);
    (c, url, ns)
}

#[test]
fn broker_metrics_follow_the_sends() {
    let (_c, url, ns) = metered_cluster("Metered");
    let p = producer(&ns);
    for i in 0..50 {
        p.send(Message::new("Metered", format!("m{i}").into_bytes()))
            .unwrap();
    }
    // An error, counted by code.
    let out = mqadmin(
        &ns,
        &["consume", "-t", "NoSuchTopicHere", "--timeout-ms", "200"],
    );
    let _ = out;
    // Counters are published once a second.
    let scrape = wait_for(Duration::from_secs(10), || {
        let s = scrape(&url);
        (sum(&s, "corvus_produced_messages_total", &[]) == Some(50.0)).then_some(s)
    })
    .expect("produced_messages reaches 50");
    assert!(sum(&scrape, "corvus_produced_bytes_total", &[]).unwrap_or(0.0) > 50.0 * 90.0);
    assert!(sum(&scrape, "corvus_requests_total", &[]).unwrap_or(0.0) >= 50.0);
    assert_eq!(sum(&scrape, "corvus_cross_core_hops_total", &[]), Some(0.0));
    assert!(sum(&scrape, "corvus_disk_use_ratio", &[]).is_some());
    assert!(sum(&scrape, "corvus_durable_lag_bytes", &[]).is_some());
    assert!(sum(&scrape, "corvus_inbox_depth", &[]).is_some());
    let body = metrics::text(&url);
    assert!(!body.contains("# EOF"), "the text format, not OpenMetrics");
    assert_eq!(
        telemetry::samples_without_help(&body),
        Vec::<String>::new(),
        "{body}"
    );
    // The send latency histogram counted every send.
    let count = sum(&scrape, "corvus_send_latency_seconds", &[]);
    assert_eq!(
        count,
        Some(50.0),
        "histogram buckets: {:?}",
        scrape
            .samples
            .iter()
            .filter(|s| s.metric.starts_with("corvus_send"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn broker_status_reports_sends_and_their_rate_and_flushes_are_timed() {
    let (c, url, ns) = metered_cluster("Status");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent_so_far = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sender = {
        let ns = ns.clone();
        let stop = stop.clone();
        let sent_so_far = sent_so_far.clone();
        std::thread::spawn(move || {
            let p = producer(&ns);
            let mut n = 0u64;
            // Bounded: at most 20 s or 100k messages.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::SeqCst)
                && n < 100_000
                && std::time::Instant::now() < deadline
            {
                p.send(Message::new("Status", format!("s{n}").into_bytes()))
                    .unwrap();
                n += 1;
                sent_so_far.store(n, std::sync::atomic::Ordering::SeqCst);
            }
            n
        })
    };
    // The sends are under way (the status's rate is taken over the next 500 ms).
    let started = wait_for(Duration::from_secs(20), || {
        (sent_so_far.load(std::sync::atomic::Ordering::SeqCst) >= 10).then_some(())
    });
    assert!(started.is_some(), "the sender sent nothing");
    let out = mqadmin(
        &ns,
        &[
            "--json",
            "broker-status",
            "-b",
            &c.broker.addr,
            "--interval-ms",
            "500",
        ],
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = sender.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let core = &v["cores"][0];
    assert!(core["produce_tps"].as_f64().unwrap() > 0.0, "{v}");
    assert!(core["produced_messages"].as_u64().unwrap() > 0);
    assert!(core["produced_messages"].as_u64().unwrap() <= sent);
    assert!(v["uptime_ms"].as_u64().unwrap() > 0);
    assert!(core["commit_log_bytes"].as_u64().unwrap() > 0);
    // The async flusher made the sends durable, and each flush was timed.
    let s = wait_for(Duration::from_secs(10), || {
        let s = scrape(&url);
        sum(&s, "corvus_flush_latency_seconds", &[])
            .is_some_and(|n| n > 0.0)
            .then_some(s)
    });
    assert!(
        s.is_some(),
        "flushes are counted in corvus_flush_latency_seconds"
    );
}

#[test]
fn namesrv_metrics_count_brokers_and_requests() {
    let dir = tempfile::tempdir().unwrap();
    let ns = start_namesrv_with(dir.path(), &["--metrics-addr", "127.0.0.1:0"]);
    let url = metrics::addr(&ns, "namesrv metrics on ");
    let opts = integration::BrokerOpts::new(&ns.addr, &dir.path().join("data"));
    let _b = integration::start_broker(&opts, dir.path());
    let out = mqadmin(&ns.addr, &["topic-route", "-t", "Missing"]);
    assert!(!out.status.success());
    let s = wait_for(Duration::from_secs(10), || {
        let s = scrape(&url);
        (sum(&s, "corvus_namesrv_brokers", &[]) == Some(1.0)).then_some(s)
    })
    .expect("the broker is counted");
    assert!(sum(&s, "corvus_namesrv_requests_total", &[]).unwrap_or(0.0) >= 2.0);
    assert!(sum(&s, "corvus_namesrv_errors_total", &[]).unwrap_or(0.0) >= 1.0);

    // A RocketMQ client's route look-up of a missing topic, over remoting: both protocols'
    // requests and errors are labelled by protocol, in lower snake case.
    let mut lookup =
        remoting::RemotingCommand::request(remoting::codes::request::GET_ROUTEINFO_BY_TOPIC, 1);
    lookup.ext_fields.insert("topic".into(), "Missing".into());
    let answer = integration::remoting_call(&ns.addr, &lookup, b"");
    assert_ne!(answer.command.code, 0, "a missing topic has no route");
    let s = scrape(&url);
    let labelled = |name: &str, protocol: &str, key: &str, val: &str| {
        s.samples.iter().any(|x| {
            x.metric == name
                && x.labels.get("protocol") == Some(protocol)
                && x.labels.get(key) == Some(val)
        })
    };
    assert!(labelled(
        "corvus_namesrv_requests_total",
        "native",
        "command",
        "get_route"
    ));
    assert!(labelled(
        "corvus_namesrv_requests_total",
        "remoting",
        "command",
        "get_routeinfo_by_topic"
    ));
    assert!(labelled(
        "corvus_namesrv_errors_total",
        "native",
        "code",
        "topic_not_exist"
    ));
    assert!(labelled(
        "corvus_namesrv_errors_total",
        "remoting",
        "code",
        "topic_not_exist"
    ));
    for x in s
        .samples
        .iter()
        .filter(|x| x.metric.starts_with("corvus_namesrv_"))
    {
        for (_, v) in x.labels.iter() {
            assert_eq!(
                v.to_ascii_lowercase(),
                *v,
                "label values in lower case: {x:?}"
            );
        }
    }
    let body = metrics::text(&url);
    assert_eq!(
        telemetry::samples_without_help(&body),
        Vec::<String>::new(),
        "{body}"
    );
}

#[test]
fn send_stages_count_every_send_in_each_stage_and_a_reset_clears_them() {
    let c = Cluster::start(1, "small");
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "Stages", 2);
    let p = producer(&ns);
    let sends = 300u64;
    for i in 0..sends {
        p.send(Message::new("Stages", format!("s{i}").into_bytes()))
            .unwrap();
    }
    // An operator's view first: one row per core and stage, every send counted.
    let rows = integration::mqadmin_json(&ns, &["send-stages", "-b", &c.broker.addr]);
    let total = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["stage"] == "total")
        .unwrap_or_else(|| panic!("no total row: {rows}"));
    assert_eq!(total["count"].as_u64(), Some(sends), "{rows}");
    assert!(total["p99_ms"].as_f64().unwrap() <= total["max_ms"].as_f64().unwrap());
    let admin = client::Admin::new(&ns).unwrap();
    let stages = admin.send_stages(&c.broker.addr, true).unwrap();
    // (requests counted, longest ns) of one stage over every core.
    let stage = |name: &str| -> (u64, u64) {
        let buckets = stages
            .iter()
            .filter(|h| h.stage == name)
            .flat_map(|h| h.buckets.iter());
        buckets.fold((0, 0), |(n, top), b| (n + b.count, top.max(b.nanos)))
    };
    // Every send passed every stage of the local path once; an async profile has no sync
    // wait and a one-core broker forwards nothing.
    for name in ["queued", "room", "append", "reply", "write", "total"] {
        assert_eq!(stage(name).0, sends, "stage {name}: {stages:?}");
    }
    assert_eq!(stage("durable").0, 0);
    assert_eq!(stage("forward").0, 0);
    // The whole path is at least as long as any stage in it.
    assert!(stage("total").1 >= stage("append").1, "{stages:?}");
    assert!(stage("total").1 > 0);
    // The reset cleared them: nothing since.
    assert!(admin.send_stages(&c.broker.addr, false).unwrap().is_empty());
}

/// An address of this host beyond loopback, if it has one (the source address of a route
/// to a non-local address; nothing is sent).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn broker_metrics_bind_loopback_for_a_bare_port_and_want_the_token() {
    let token = "tok-3f9a1c";
    let (c, addr) = Cluster::start_metered_with(1, "0", |o| {
        o.config_toml = Some(format!("metrics_token = \"{token}\"\n"));
    });
    let bound: std::net::SocketAddr = addr.parse().unwrap();
    assert!(bound.ip().is_loopback(), "a bare port binds {bound}");
    // Not reachable from the host's other addresses.
    if let Some(ip) = non_loopback_ip() {
        let outside = std::net::SocketAddr::new(ip, bound.port());
        assert!(
            TcpStream::connect_timeout(&outside, Duration::from_secs(2)).is_err(),
            "metrics reachable on {outside}"
        );
    }
    let ns = c.namesrv.addr.clone();
    integration::create_topic(&ns, "SecretTopicName", 1);
    producer(&ns)
        .send(Message::new("SecretTopicName", b"m".to_vec()))
        .unwrap();

    for headers in [
        String::new(),
        "Authorization: Bearer wrong-token\r\n".to_owned(),
        format!("Authorization: Basic {token}\r\n"),
    ] {
        let (code, body) = metrics::get(&addr, "/metrics", &headers);
        assert_eq!(code, 401, "{headers:?}: {body}");
        assert!(!body.contains("corvus_"), "{headers:?}: {body}");
    }
    let auth = format!("Authorization: Bearer {token}\r\n");
    let (code, body) = metrics::get(&addr, "/metrics", &auth);
    assert_eq!(code, 200, "{body}");
    // Observed per request, so there at once (the counters follow within a second).
    assert!(body.contains("corvus_send_latency_seconds_count"), "{body}");

    // The token is not handed out with the broker's config.
    let broker = c.broker.addr.clone();
    let out = mqadmin(&ns, &["getBrokerConfig", "-b", &broker]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("metrics_addr"), "{text}");
    assert!(!text.contains(token), "{text}");
}

#[test]
fn a_broker_with_a_metrics_address_beyond_loopback_warns() {
    let (c, addr) = Cluster::start_metered_with(1, "0.0.0.0:0", |_| {});
    // Honoured as asked ...
    assert!(addr.contains("0.0.0.0:"), "{addr}");
    // ... and said to be exposed.
    let warned = wait_for(Duration::from_secs(10), || {
        c.broker.stderr().contains("beyond loopback").then_some(())
    });
    assert!(warned.is_some(), "{}", c.broker.stderr());
}

#[test]
fn namesrv_metrics_bind_loopback_for_a_bare_port_and_want_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("metrics.token");
    std::fs::write(&token_file, "ns-token-77\n").unwrap();
    let ns = start_namesrv_with(
        dir.path(),
        &[
            "--metrics-addr",
            "0",
            "--metrics-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let addr = metrics::addr(&ns, "namesrv metrics on ");
    let bound: std::net::SocketAddr = addr.parse().unwrap();
    assert!(bound.ip().is_loopback(), "a bare port binds {bound}");
    let (code, body) = metrics::get(&addr, "/metrics", "");
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains("corvus_namesrv"), "{body}");
    let (code, body) = metrics::get(&addr, "/metrics", "Authorization: Bearer ns-token-77\r\n");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("corvus_namesrv_brokers"), "{body}");
}
