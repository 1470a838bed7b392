//! The fault harness on what exists today, a standalone broker and a NameServer, each in a
//! network namespace of its own, with the workload in a third, its broker traffic through
//! a fault proxy:
//!
//! * a seeded schedule (a client/broker partition, a one-way cut, packet loss, a proxy delay
//!   and a kill -9 with restart of the broker) runs while two producers send; after it,
//!   with everything healed, the final log is drained and checked: nothing acknowledged is
//!   lost, nothing stored that no one sent, no offset holds two messages, no gaps;
//! * a one-way cut drops one direction only, and a port cut one port only;
//! * the proxy's delay is real and keeps the bytes in order.
//!
//! The seed is printed; `CORVUS_FAULT_SEED=<n>` replays a schedule. Needs root, `ip`, `nft`
//! and `tc`; without them the tests skip locally and fail in CI (`CI=true`).

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration::checker::check;
use integration::history::{read_jsonl, Delivery, Op, Stored};
use integration::netns::{Host, Net};
use integration::proxy::{Direction, FaultProxy};
use integration::schedule::{self, Mix, Nodes, Schedule};
use integration::{bin, run_until_exit, BrokerOpts, Proc};

const TOPIC: &str = "FaultDemo";
const QUEUES: u32 = 4;
const BROKER_PORT: u16 = 10911;
const DIRECT_PORT: u16 = 10921;
const NAMESRV_PORT: u16 = 9876;
/// The demo's schedule runs this long; the producers send this much longer.
const SCHEDULE_RUN: Duration = Duration::from_secs(24);
const PRODUCE_AFTER: Duration = Duration::from_secs(4);
/// The default seed of the demo (CI runs it); `CORVUS_FAULT_SEED` replays another.
const DEMO_SEED: u64 = 20_261_201;

/// A child process killed when dropped (the workload while it runs).
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Bg {
    /// Waits (bounded) for its exit; panics with its output otherwise.
    fn wait(mut self, limit: Duration, what: &str) -> String {
        let deadline = Instant::now() + limit;
        while self.0.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{what} did not finish within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut out = String::new();
        if let Some(mut s) = self.0.stdout.take() {
            s.read_to_string(&mut out).unwrap();
        }
        let status = self.0.wait().unwrap();
        assert!(status.success(), "{what} failed ({status}): {out}");
        out
    }
}

/// The NameServer, the broker and the client's proxy, in their namespaces.
struct Scenario {
    // Processes first: they are killed before the namespaces go.
    broker: Option<Proc>,
    namesrv: Proc,
    proxy: FaultProxy,
    opts: BrokerOpts,
    logs: PathBuf,
    dir: tempfile::TempDir,
    broker_host: Host,
    client_host: Host,
}

impl Scenario {
    fn start(net: &Net) -> Scenario {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let (ns, broker, client) = (net.host("ns"), net.host("broker"), net.host("client"));
        let mut cmd = Command::new(bin("namesrv"));
        cmd.args(["--listen", &ns.addr(NAMESRV_PORT)]);
        let namesrv = Proc::start(
            ns.wrap(&cmd),
            "namesrv listening on ",
            logs.join("namesrv.log"),
        );
        // The client reaches the broker only through the proxy: the broker advertises the
        // proxy's address (and its direct port there) to the NameServer.
        let proxy = FaultProxy::start(
            |c| client.wrap(&c),
            &[
                (client.addr(BROKER_PORT), broker.addr(BROKER_PORT)),
                (client.addr(DIRECT_PORT), broker.addr(DIRECT_PORT)),
            ],
            1,
        )
        .unwrap();
        let mut opts = BrokerOpts::new(&ns.addr(NAMESRV_PORT), &dir.path().join("data"));
        opts.listen = broker.addr(BROKER_PORT);
        opts.extra = vec!["--advertise-addr".into(), client.addr(BROKER_PORT)];
        opts.config_toml = Some(format!(
            "flush_disk_type = \"SYNC_FLUSH\"\nidle_poll_us = 0\nvip_channel = false\n\
             direct_port_base = {DIRECT_PORT}\nnamesrv_heartbeat_interval_ms = 500\n"
        ));
        let mut s = Scenario {
            broker: None,
            namesrv,
            proxy,
            opts,
            logs,
            dir,
            broker_host: broker.clone(),
            client_host: client.clone(),
        };
        s.start_broker();
        s
    }

    fn start_broker(&mut self) {
        let cmd = integration::broker_command(&self.opts, &self.logs);
        let n = self.logs.read_dir().map(|d| d.count()).unwrap_or(0);
        let p = Proc::start(
            self.broker_host.wrap(&cmd),
            "broker listening on ",
            self.logs.join(format!("broker-{n}.log")),
        );
        assert!(
            p.line.contains(&format!(
                "advertised {}",
                self.client_host.addr(BROKER_PORT)
            )),
            "the broker advertises the proxy: {}",
            p.line
        );
        self.broker = Some(p);
    }

    /// `corvus-workload --namesrv .. --topic .. <args>` in the client namespace.
    fn workload(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("corvus-workload"));
        cmd.args(["--namesrv", &self.namesrv.addr, "--topic", TOPIC])
            .args(args);
        self.client_host.wrap(&cmd)
    }

    fn create_topic(&self) {
        let mut cmd = Command::new(bin("mqadmin"));
        cmd.args(["-n", &self.namesrv.addr]).args([
            "update-topic",
            "-t",
            TOPIC,
            "-q",
            &QUEUES.to_string(),
        ]);
        // The broker registers within a heartbeat or two.
        let mut last = String::new();
        let created = integration::wait_for(Duration::from_secs(30), || {
            let (code, out) =
                run_until_exit(&mut self.client_host.wrap(&cmd), Duration::from_secs(20));
            last = out;
            (code == Some(0)).then_some(())
        });
        assert!(created.is_some(), "update-topic {TOPIC}: {last}");
    }
}

impl Nodes for Scenario {
    fn pid(&self, node: &str) -> Option<i32> {
        match node {
            "broker" => self.broker.as_ref().map(Proc::pid),
            "namesrv" => Some(self.namesrv.pid()),
            _ => None,
        }
    }

    fn kill9(&mut self, node: &str) {
        assert_eq!(node, "broker", "only the broker is killed here");
        if let Some(b) = self.broker.as_mut() {
            b.kill9();
        }
    }

    fn restart(&mut self, node: &str) {
        assert_eq!(node, "broker", "only the broker is restarted here");
        self.start_broker();
    }

    fn proxy(&mut self, name: &str) -> Option<&mut FaultProxy> {
        (name == "client-proxy").then_some(&mut self.proxy)
    }
}

fn demo_mix() -> Mix {
    Mix {
        kill: vec!["broker".into()],
        stop: vec!["broker".into()],
        partition: vec![("client".into(), "broker".into())],
        one_way: vec![("client".into(), "broker".into())],
        loss: vec!["broker".into()],
        proxy_delay: vec!["client-proxy".into()],
        fault_ms: (1_500, 2_500),
        gap_ms: (700, 1_200),
        cover_all: true,
        ..Mix::default()
    }
}

/// How many sends failed each way, by outcome and the error's text without its numbers.
fn error_kinds(ops: &[Op]) -> std::collections::BTreeMap<String, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for op in ops {
        if let Some(e) = &op.error {
            let text: String = e.chars().filter(|c| !c.is_ascii_digit()).take(70).collect();
            *kinds
                .entry(format!("{:?}: {text}", op.outcome))
                .or_default() += 1;
        }
    }
    kinds
}

fn keep(dir: tempfile::TempDir) -> PathBuf {
    let p = dir.keep();
    eprintln!("kept the histories and logs in {}", p.display());
    p
}

#[test]
fn seeded_faults_on_a_sync_flush_broker_lose_nothing_acknowledged() {
    let started = Instant::now();
    let seed = schedule::seed_from_env(DEMO_SEED);
    let sched = Schedule::generate(seed, SCHEDULE_RUN, &demo_mix());
    eprintln!("{sched}");
    let kinds: std::collections::HashSet<_> = sched
        .steps
        .iter()
        .map(|s| std::mem::discriminant(&s.fault))
        .collect();
    assert_eq!(
        kinds.len(),
        6,
        "the schedule covers all six faults: {sched}"
    );
    assert!(sched.node_faults_at_once_max() <= 1);
    let Some(net) = Net::new_or_skip("demo", &["ns", "broker", "client"]) else {
        return;
    };
    let mut s = Scenario::start(&net);
    s.create_topic();
    let history = s.dir.path().join("history.jsonl");
    let final_log = s.dir.path().join("final.jsonl");
    let deliveries = s.dir.path().join("deliveries.jsonl");
    let produce_ms = (SCHEDULE_RUN + PRODUCE_AFTER).as_millis().to_string();
    let spawn = |mut c: Command| {
        Bg(c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap())
    };
    let producers = spawn(s.workload(&[
        "produce",
        "--history",
        history.to_str().unwrap(),
        "--producers",
        "2",
        "--rate",
        "100",
        "--duration-ms",
        &produce_ms,
        "--send-timeout-ms",
        "1500",
    ]));
    let consumer = spawn(s.workload(&[
        "consume",
        "--out",
        deliveries.to_str().unwrap(),
        "--duration-ms",
        &produce_ms,
    ]));
    let events = schedule::run(&sched, &net, &mut s).unwrap();
    let mut record = sched.to_string();
    for e in &events {
        record.push_str(&format!("{} {}\n", e.t_ms, e.what));
    }
    std::fs::write(s.dir.path().join("schedule.txt"), record).unwrap();
    assert_eq!(
        events.len(),
        2 * sched.steps.len(),
        "every fault began and ended"
    );
    net.heal().unwrap();
    s.proxy.pass().unwrap();
    let said = producers.wait(Duration::from_secs(60), "the producers");
    eprintln!("{}", said.trim());
    let said = consumer.wait(Duration::from_secs(60), "the consumer");
    eprintln!("{}", said.trim());
    let (code, out) = run_until_exit(
        &mut s.workload(&["drain", "--out", final_log.to_str().unwrap()]),
        Duration::from_secs(90),
    );
    assert_eq!(code, Some(0), "drain: {out}");
    eprintln!("{}", out.trim());

    let ops: Vec<Op> = read_jsonl(&history).unwrap();
    let stored: Vec<Stored> = read_jsonl(&final_log).unwrap();
    let delivered: Vec<Delivery> = read_jsonl(&deliveries).unwrap();
    let report = check(&ops, &stored, &delivered);
    eprintln!("errors by outcome: {:?}", error_kinds(&ops));
    eprintln!("seed {seed}: {report}took {:?}", started.elapsed());
    // The run must have exercised something: sends acknowledged before and after the kill,
    // and sends that the faults made fail or leave unknown.
    assert!(report.ok > 500, "too few acknowledged sends: {report}");
    assert!(
        report.fail + report.unknown > 0,
        "no fault was felt: {report}"
    );
    if !report.is_safe() {
        let Scenario { dir, .. } = s;
        keep(dir);
        report.assert_safe();
    }
}

/// A UDP socket bound on `host` (port chosen by the OS), made inside its namespace.
fn udp_on(host: &Host) -> UdpSocket {
    let ip = host.ip;
    let s = host
        .within(move || UdpSocket::bind((ip, 0)).unwrap())
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s
}

/// Whether a datagram sent from `from` to `to` arrives (five tries).
fn datagram_arrives(from: &UdpSocket, to: &UdpSocket) -> bool {
    let dest = to.local_addr().unwrap();
    let mut buf = [0u8; 16];
    for i in 0..5u8 {
        from.send_to(&[i], dest).unwrap();
        if to.recv_from(&mut buf).is_ok() {
            // Drain whatever else of this probe is queued.
            while to.recv_from(&mut buf).is_ok() {}
            return true;
        }
    }
    false
}

/// Whether a TCP connection from inside `from` to `addr` is made within 1 s.
fn connects(from: &Host, addr: SocketAddr) -> bool {
    from.within(move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
        .unwrap()
}

fn listener_on(host: &Host) -> (TcpListener, SocketAddr) {
    let ip = host.ip;
    let l = host
        .within(move || TcpListener::bind((ip, 0)).unwrap())
        .unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

#[test]
fn a_one_way_cut_drops_one_direction_and_a_port_cut_one_port() {
    let Some(net) = Net::new_or_skip("oneway", &["a", "b"]) else {
        return;
    };
    let (a, b) = (net.host("a"), net.host("b"));
    let (ua, ub) = (udp_on(a), udp_on(b));
    let (_lb, b_addr) = listener_on(b);
    let (_lb2, b_addr2) = listener_on(b);
    let (_la, a_addr) = listener_on(a);
    // Before: everything passes (so the checks below can fail).
    assert!(datagram_arrives(&ua, &ub), "a -> b before the cut");
    assert!(datagram_arrives(&ub, &ua), "b -> a before the cut");
    assert!(connects(a, b_addr), "tcp a -> b before the cut");

    let cut = net.cut_one_way("a", "b").unwrap();
    assert!(!datagram_arrives(&ua, &ub), "a -> b must be dropped");
    assert!(datagram_arrives(&ub, &ua), "b -> a must still arrive");
    // TCP needs both ways: neither direction makes a connection.
    assert!(!connects(a, b_addr), "tcp a -> b through the cut");
    assert!(!connects(b, a_addr), "tcp b -> a needs a's answers");
    net.clear(cut).unwrap();
    assert!(datagram_arrives(&ua, &ub), "a -> b after clearing");
    assert!(connects(a, b_addr), "tcp a -> b after clearing");

    let port = b_addr.port();
    let cut = net.cut_port("a", "b", port).unwrap();
    assert!(!connects(a, b_addr), "port {port} must be cut");
    assert!(connects(a, b_addr2), "another port of b must pass");
    assert!(datagram_arrives(&ua, &ub), "udp must pass a port cut");
    net.clear(cut).unwrap();

    net.partition("a", "b").unwrap();
    assert!(!datagram_arrives(&ua, &ub) && !datagram_arrives(&ub, &ua));
    net.heal().unwrap();
    assert_eq!(net.active_faults(), 0);
    assert!(datagram_arrives(&ub, &ua) && connects(a, b_addr), "healed");
}

/// How long sending `bytes` over a fresh TCP connection from `from` to a sink at `to`
/// takes, to the sink's last byte.
fn transfer(from: &Host, to: &Host, bytes: usize) -> Duration {
    let (sink, addr) = listener_on(to);
    let reader = std::thread::spawn(move || {
        let (mut c, _) = sink.accept().unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < bytes {
            match c.read(&mut buf).unwrap() {
                0 => break,
                n => got += n,
            }
        }
        (got, Instant::now())
    });
    let mut c = from
        .within(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap())
        .unwrap();
    let t = Instant::now();
    c.write_all(&vec![1u8; bytes]).unwrap();
    let (got, end) = reader.join().unwrap();
    assert_eq!(got, bytes);
    end.duration_since(t)
}

#[test]
fn loss_drops_a_share_of_packets_and_a_bandwidth_limit_slows_a_transfer() {
    let Some(net) = Net::new_or_skip("loss", &["a", "b"]) else {
        return;
    };
    let (a, b) = (net.host("a"), net.host("b"));
    let (ua, ub) = (udp_on(a), udp_on(b));
    ub.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let count = |n: u32| {
        let dest = ub.local_addr().unwrap();
        for i in 0..n {
            ua.send_to(&i.to_be_bytes(), dest).unwrap();
        }
        let mut buf = [0u8; 8];
        let mut got = 0;
        while ub.recv_from(&mut buf).is_ok() {
            got += 1;
        }
        got
    };
    assert_eq!(count(200), 200, "no loss before the fault");
    let loss = net.loss("b", 50).unwrap();
    let got = count(400);
    // 400 draws at 50%: outside 120..=280 is about 1 in 10^16.
    assert!(
        (120..=280).contains(&got),
        "50% loss let {got} of 400 through"
    );
    net.clear(loss).unwrap();
    let loss = net.loss("a", 100).unwrap();
    assert_eq!(count(50), 0, "100% loss on the sender's link");
    net.clear(loss).unwrap();
    assert_eq!(count(50), 50, "no loss after clearing");

    let bytes = 1 << 20;
    let fast = transfer(a, b, bytes);
    // 8 Mbit/s: 1 MiB takes about 1 s (less the first burst).
    let limit = net.limit_bandwidth("a", 8_000).unwrap();
    let slow = transfer(a, b, bytes);
    net.clear(limit).unwrap();
    assert!(
        slow >= Duration::from_millis(700) && slow > fast * 3,
        "1 MiB took {slow:?} at 8 Mbit/s and {fast:?} without a limit"
    );
}

/// One round trip of `n` bytes through `s` (an echo).
fn round_trip(s: &mut TcpStream, n: usize) -> Duration {
    let t = Instant::now();
    s.write_all(&vec![7u8; n]).unwrap();
    let mut back = vec![0u8; n];
    s.read_exact(&mut back).unwrap();
    t.elapsed()
}

#[test]
fn the_proxy_delay_is_real_and_keeps_the_bytes_in_order() {
    let Some(net) = Net::new_or_skip("delay", &["cli", "srv"]) else {
        return;
    };
    let (cli, srv) = (net.host("cli"), net.host("srv"));
    let (echo, echo_addr) = listener_on(srv);
    std::thread::spawn(move || {
        for c in echo.incoming().take(4) {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let listen = cli.addr(18_000);
    let mut proxy = FaultProxy::start(
        |c| cli.wrap(&c),
        &[(listen.clone(), echo_addr.to_string())],
        5,
    )
    .unwrap();
    let addr: SocketAddr = listen.parse().unwrap();
    let mut s = cli
        .within(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap())
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let base = round_trip(&mut s, 1);
    assert!(
        base < Duration::from_millis(150),
        "round trip without delay {base:?}"
    );

    proxy.delay(Direction::Both, 150, 0).unwrap();
    let delayed = round_trip(&mut s, 1);
    assert!(
        delayed >= Duration::from_millis(300),
        "150 ms each way gave a round trip of {delayed:?}"
    );
    proxy.delay(Direction::Up, 0, 0).unwrap();
    proxy.delay(Direction::Down, 100, 0).unwrap();
    let one_way = round_trip(&mut s, 1);
    assert!(
        one_way >= Duration::from_millis(100) && one_way < Duration::from_millis(290),
        "100 ms down only gave {one_way:?}"
    );

    // Jitter larger than the gap between writes must not reorder the stream.
    proxy.delay(Direction::Both, 20, 40).unwrap();
    let sent: Vec<u8> = (0..200u32).flat_map(|i| i.to_be_bytes()).collect();
    let mut reader = s.try_clone().unwrap();
    let want = sent.len();
    let got = std::thread::spawn(move || {
        let mut back = vec![0u8; want];
        reader.read_exact(&mut back).map(|_| back)
    });
    for chunk in sent.chunks(4) {
        s.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        got.join().unwrap().unwrap(),
        sent,
        "bytes reordered by jitter"
    );

    // Freeze holds the bytes back; pass lets them through.
    proxy.pass().unwrap();
    proxy.freeze().unwrap();
    s.write_all(b"x").unwrap();
    let mut one = [0u8; 1];
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(s.read_exact(&mut one).is_err(), "a frozen proxy forwarded");
    proxy.pass().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut one).unwrap();
    assert_eq!(&one, b"x");

    // A rate cap: 40 KiB at 100 KB/s takes about 0.41 s (the cap paces 4 KiB slices, so
    // the last slice leaves one slice's time, 41 ms, before the end).
    proxy.bandwidth(Direction::Up, 100_000).unwrap();
    let capped = round_trip(&mut s, 40 * 1024);
    proxy.bandwidth(Direction::Up, 0).unwrap();
    assert!(
        capped >= Duration::from_millis(340),
        "40 KiB under a 100 KB/s cap took {capped:?}"
    );

    // A blackhole swallows what is sent and answers nothing.
    proxy.blackhole().unwrap();
    s.write_all(b"y").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(s.read_exact(&mut one).is_err(), "a blackhole answered");
    proxy.pass().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

    // A reset closes the connection.
    assert_eq!(proxy.reset().unwrap(), 1);
    let mut rest = Vec::new();
    let closed = s.read_to_end(&mut rest);
    assert!(
        closed.is_err() || rest.is_empty(),
        "the connection still served after a reset"
    );
}
