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

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use integration::history::Op;
use integration::netns::{Host, Net};
use integration::proxy::{Direction, FaultProxy};
use integration::scenario::{Cast, Produce, Workload};
use integration::schedule::{self, Mix, Nodes, Schedule};
use integration::BrokerOpts;

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
fn error_kinds(ops: &[Op]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
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

#[test]
fn seeded_faults_on_a_sync_flush_broker_lose_nothing_acknowledged() {
    let started = Instant::now();
    let seed = schedule::seed_from_env(DEMO_SEED);
    let sched = Schedule::generate(seed, SCHEDULE_RUN, &demo_mix());
    eprintln!("{sched}");
    let kinds: HashSet<_> = sched
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
    let dir = tempfile::tempdir().unwrap();
    let (broker, client) = (net.host("broker"), net.host("client"));
    let mut cast = Cast::new(dir.path());
    let ns = cast.namesrv("namesrv", net.host("ns"), NAMESRV_PORT);
    // The client reaches the broker only through the proxy: the broker advertises the
    // proxy's address (and its direct port there) to the NameServer.
    let proxy = FaultProxy::start(
        |c| client.wrap(&c),
        &[
            (client.addr(BROKER_PORT), broker.addr(BROKER_PORT)),
            (client.addr(DIRECT_PORT), broker.addr(DIRECT_PORT)),
        ],
        seed,
    )
    .unwrap();
    cast.add_proxy("client-proxy", proxy);
    let mut opts = BrokerOpts::new(&ns, &dir.path().join("data"));
    opts.listen = broker.addr(BROKER_PORT);
    opts.extra = vec!["--advertise-addr".into(), client.addr(BROKER_PORT)];
    opts.config_toml = Some(format!(
        "flush_disk_type = \"SYNC_FLUSH\"\nidle_poll_us = 0\nvip_channel = false\n\
         direct_port_base = {DIRECT_PORT}\nnamesrv_heartbeat_interval_ms = 500\n"
    ));
    let line = cast
        .broker_on_cpu("broker", broker, opts, Some(0))
        .line
        .clone();
    assert!(
        line.contains(&format!("advertised {}", client.addr(BROKER_PORT))),
        "the broker advertises the proxy: {line}"
    );

    let wl = Workload::new(client, &ns, TOPIC, dir.path());
    wl.create_topic(QUEUES);
    let produce = Produce {
        producers: 2,
        rate: 100,
        duration: SCHEDULE_RUN + PRODUCE_AFTER,
        ..Produce::default()
    };
    let (producers, consumer, events) = wl.under_faults(&produce, &sched, &net, &mut cast);
    let mut record = sched.to_string();
    for e in &events {
        record.push_str(&format!("{} {}\n", e.t_ms, e.what));
    }
    std::fs::write(dir.path().join("schedule.txt"), record).unwrap();
    net.heal().unwrap();
    cast.pass_all().unwrap();
    let limit = Duration::from_secs(60);
    eprintln!("{}", producers.wait(limit, "the producers").trim());
    eprintln!("{}", consumer.wait(limit, "the consumer").trim());
    let report = wl.drain_and_check(Duration::from_secs(60));
    let (ops, _, _) = wl.read();
    eprintln!("errors by outcome: {:?}", error_kinds(&ops));
    eprintln!("seed {seed}: {report}took {:?}", started.elapsed());
    // The run must have exercised something: sends acknowledged before and after the kill,
    // and sends that the faults made fail or leave unknown.
    assert!(report.ok > 500, "too few acknowledged sends: {report}");
    assert!(
        report.fail + report.unknown > 0,
        "no fault was felt: {report}"
    );
    // The sends went through the proxy (so its delay was on their path): at least every
    // acknowledged body passed it.
    let stats = cast.proxy_mut("client-proxy").stats().unwrap();
    let up: u64 = stats
        .split_whitespace()
        .find_map(|w| w.strip_prefix("up="))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        up >= report.ok as u64 * produce.body_bytes as u64,
        "the proxy relayed {stats} for {} acknowledged sends",
        report.ok
    );
    if !report.is_safe() {
        let kept = dir.keep();
        eprintln!("kept the histories and logs in {}", kept.display());
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

    let isolated = net.isolate("a").unwrap();
    assert!(
        !datagram_arrives(&ua, &ub) && !datagram_arrives(&ub, &ua),
        "a is isolated"
    );
    net.clear(isolated).unwrap();
    assert!(datagram_arrives(&ua, &ub), "a -> b after the isolation");

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

/// A process per name, for the runner test: `sleep`s in a host, whose state is watched.
struct Sleepers {
    host: Host,
    procs: BTreeMap<String, std::process::Child>,
    kills: usize,
    restarts: usize,
}

impl Sleepers {
    fn start(&mut self, name: &str) {
        let child = self
            .host
            .command("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.procs.insert(name.to_owned(), child);
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in self.procs.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Nodes for Sleepers {
    fn pid(&self, node: &str) -> Option<i32> {
        self.procs.get(node).map(|c| c.id() as i32)
    }
    fn kill9(&mut self, node: &str) {
        self.kills += 1;
        if let Some(mut c) = self.procs.remove(node) {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
    fn restart(&mut self, node: &str) {
        self.restarts += 1;
        self.start(node);
    }
    fn proxy(&mut self, _: &str) -> Option<&mut FaultProxy> {
        None
    }
}

/// The state letter of process `pid` (R, S, T for stopped, ...).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(") ").next()?.chars().next()
}

#[test]
fn the_runner_applies_and_reverts_every_fault_even_after_a_failure() {
    use integration::schedule::{Fault, Step};
    let Some(net) = Net::new_or_skip("runner", &["a", "b"]) else {
        return;
    };
    let mut nodes = Sleepers {
        host: net.host("a").clone(),
        procs: BTreeMap::new(),
        kills: 0,
        restarts: 0,
    };
    nodes.start("s1");
    nodes.start("s2");
    let stopped_pid = nodes.pid("s1").unwrap();
    let ms = Duration::from_millis;
    let step = |at: u64, fault: Fault, len: u64| Step {
        at: ms(at),
        fault,
        duration: ms(len),
    };
    let sched = Schedule {
        seed: 0,
        steps: vec![
            step(0, Fault::Stop { node: "s1".into() }, 600),
            step(700, Fault::Kill9 { node: "s2".into() }, 100),
        ],
    };
    // Watch s1's state while the runner holds it stopped.
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if proc_state(stopped_pid) == Some('T') {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
    let killed_pid = nodes.pid("s2").unwrap();
    let events = schedule::run(&sched, &net, &mut nodes).unwrap();
    assert!(watcher.join().unwrap(), "SIGSTOP did not stop the process");
    assert_ne!(
        proc_state(stopped_pid),
        Some('T'),
        "SIGCONT did not continue it"
    );
    assert_eq!((nodes.kills, nodes.restarts), (1, 1));
    assert_ne!(
        nodes.pid("s2"),
        Some(killed_pid),
        "s2 was restarted as a new process"
    );
    assert_eq!(events.len(), 4);

    // A step that cannot be applied fails the run, and what was applied is reverted.
    let sched = Schedule {
        seed: 0,
        steps: vec![
            step(
                0,
                Fault::Partition {
                    a: "a".into(),
                    b: "b".into(),
                },
                400,
            ),
            step(
                100,
                Fault::ProxyDelay {
                    proxy: "none".into(),
                    delay_ms: 10,
                    jitter_ms: 0,
                },
                100,
            ),
        ],
    };
    let err = schedule::run(&sched, &net, &mut nodes).unwrap_err();
    assert!(err.contains("no proxy none"), "{err}");
    assert_eq!(net.active_faults(), 0, "the partition was not cleared");
}
