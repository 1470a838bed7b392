//! Seeded fault schedules and the runner that applies them.
//!
//! [`Schedule::generate`] turns a seed, a duration and a [`Mix`] (which faults, on which
//! targets) into a list of [`Step`]s; the same seed gives the same list, so a failing seed
//! replays the same schedule (`CORVUS_FAULT_SEED=<n>`, see [`seed_from_env`]). Timing is
//! still real: this is a recorded schedule, not a deterministic simulation.
//!
//! [`run`] applies a schedule to a [`Net`] and to the processes a test names through
//! [`Nodes`], and reverts each fault when its duration ends (a killed node is restarted, a
//! stopped one continued, a network fault cleared, a proxy passes again).

use std::fmt;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::netns::{FaultId, Net};
use crate::proxy::{Direction, FaultProxy};

/// One fault and its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// kill -9 the node; restart it when the step ends.
    Kill9 { node: String },
    /// SIGSTOP the node; SIGCONT when the step ends.
    Stop { node: String },
    /// No packet between two hosts.
    Partition { a: String, b: String },
    /// Packets from `from` to `to` dropped, the other way passes.
    OneWay { from: String, to: String },
    /// TCP with `port` on `server` cut between `client` and `server`.
    PortCut {
        client: String,
        server: String,
        port: u16,
    },
    /// Random loss on a host's link.
    Loss { host: String, percent: u8 },
    /// A fault proxy holds every chunk `delay_ms` plus up to `jitter_ms`, both ways.
    ProxyDelay {
        proxy: String,
        delay_ms: u64,
        jitter_ms: u64,
    },
    /// A host's link capped (tbf).
    Bandwidth { host: String, rate_kbit: u32 },
    /// The filesystem under the node's data (a loop mount of the test's own, see
    /// [`Nodes::disk`]) filled by another process; the space comes back when the step ends.
    DiskFull { node: String },
}

impl Fault {
    /// Whether it acts on a process (at most one of those at a time in the "must lose 0"
    /// suite).
    pub fn is_node_fault(&self) -> bool {
        matches!(self, Fault::Kill9 { .. } | Fault::Stop { .. })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill9 { node } => write!(f, "kill -9 {node} (then restart)"),
            Fault::Stop { node } => write!(f, "SIGSTOP {node} (then SIGCONT)"),
            Fault::Partition { a, b } => write!(f, "partition {a} | {b}"),
            Fault::OneWay { from, to } => write!(f, "one-way cut {from} -> {to}"),
            Fault::PortCut {
                client,
                server,
                port,
            } => write!(f, "port cut {client} | {server}:{port}"),
            Fault::Loss { host, percent } => write!(f, "loss {percent}% on {host}"),
            Fault::ProxyDelay {
                proxy,
                delay_ms,
                jitter_ms,
            } => write!(
                f,
                "proxy {proxy} delay {delay_ms} ms + {jitter_ms} ms jitter"
            ),
            Fault::DiskFull { node } => write!(f, "disk full under {node} (then space back)"),
            Fault::Bandwidth { host, rate_kbit } => {
                write!(f, "bandwidth {rate_kbit} kbit/s on {host}")
            }
        }
    }
}

/// One fault of a schedule: from `at` (after the run's start) for `duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub fault: Fault,
    pub duration: Duration,
}

/// The faults a schedule may use, on which targets, and how long and how far apart.
#[derive(Debug, Clone)]
pub struct Mix {
    pub kill: Vec<String>,
    pub stop: Vec<String>,
    pub partition: Vec<(String, String)>,
    pub one_way: Vec<(String, String)>,
    /// (client host, server host, port).
    pub port_cut: Vec<(String, String, u16)>,
    pub loss: Vec<String>,
    pub proxy_delay: Vec<String>,
    pub bandwidth: Vec<String>,
    /// Nodes whose data filesystem may be filled ([`Nodes::disk`] must name it).
    pub disk_full: Vec<String>,
    /// Each fault lasts between these (ms).
    pub fault_ms: (u64, u64),
    /// Between one fault's end and the next one's start (ms); with `overlap`, between
    /// starts.
    pub gap_ms: (u64, u64),
    /// Faults may overlap (the "report only" suite); off, one fault at a time.
    pub overlap: bool,
    /// Every kind with a target appears once first, in a seeded order, so a short run
    /// still covers the mix.
    pub cover_all: bool,
    pub loss_percent: (u8, u8),
    pub delay_ms: (u64, u64),
    pub rate_kbit: (u32, u32),
}

impl Default for Mix {
    fn default() -> Mix {
        Mix {
            kill: Vec::new(),
            stop: Vec::new(),
            partition: Vec::new(),
            one_way: Vec::new(),
            port_cut: Vec::new(),
            loss: Vec::new(),
            proxy_delay: Vec::new(),
            bandwidth: Vec::new(),
            disk_full: Vec::new(),
            fault_ms: (1_000, 3_000),
            gap_ms: (500, 1_500),
            overlap: false,
            cover_all: true,
            loss_percent: (5, 30),
            delay_ms: (50, 500),
            rate_kbit: (256, 2048),
        }
    }
}

fn pick<'a, T>(rng: &mut StdRng, v: &'a [T]) -> &'a T {
    &v[rng.gen_range(0..v.len())]
}

fn between(rng: &mut StdRng, (lo, hi): (u64, u64)) -> u64 {
    rng.gen_range(lo.min(hi)..=hi.max(lo))
}

impl Mix {
    /// The kinds with at least one target, in a fixed order.
    fn kinds(&self) -> Vec<u8> {
        let lens = [
            self.kill.len(),
            self.stop.len(),
            self.partition.len(),
            self.one_way.len(),
            self.port_cut.len(),
            self.loss.len(),
            self.proxy_delay.len(),
            self.bandwidth.len(),
            self.disk_full.len(),
        ];
        (0..lens.len() as u8)
            .filter(|&k| lens[k as usize] > 0)
            .collect()
    }

    fn make(&self, kind: u8, rng: &mut StdRng) -> Fault {
        match kind {
            0 => Fault::Kill9 {
                node: pick(rng, &self.kill).clone(),
            },
            1 => Fault::Stop {
                node: pick(rng, &self.stop).clone(),
            },
            2 => {
                let (a, b) = pick(rng, &self.partition).clone();
                Fault::Partition { a, b }
            }
            3 => {
                let (from, to) = pick(rng, &self.one_way).clone();
                Fault::OneWay { from, to }
            }
            4 => {
                let (client, server, port) = pick(rng, &self.port_cut).clone();
                Fault::PortCut {
                    client,
                    server,
                    port,
                }
            }
            5 => {
                let (lo, hi) = self.loss_percent;
                Fault::Loss {
                    host: pick(rng, &self.loss).clone(),
                    percent: rng.gen_range(lo.min(hi)..=hi.max(lo)),
                }
            }
            6 => {
                let delay_ms = between(rng, self.delay_ms);
                Fault::ProxyDelay {
                    proxy: pick(rng, &self.proxy_delay).clone(),
                    delay_ms,
                    jitter_ms: rng.gen_range(0..=delay_ms / 4),
                }
            }
            7 => {
                let (lo, hi) = self.rate_kbit;
                Fault::Bandwidth {
                    host: pick(rng, &self.bandwidth).clone(),
                    rate_kbit: rng.gen_range(lo.min(hi)..=hi.max(lo)),
                }
            }
            _ => Fault::DiskFull {
                node: pick(rng, &self.disk_full).clone(),
            },
        }
    }
}

/// A seeded list of faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// Faults from `mix` over `duration` (every fault ends by then), the same for the same
    /// seed and mix. Without `mix.overlap`, one fault at a time.
    pub fn generate(seed: u64, duration: Duration, mix: &Mix) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let kinds = mix.kinds();
        let mut steps = Vec::new();
        if kinds.is_empty() {
            return Schedule { seed, steps };
        }
        let mut queue: Vec<u8> = Vec::new();
        if mix.cover_all {
            let mut order = kinds.clone();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.gen_range(0..=i));
            }
            queue = order;
            queue.reverse();
        }
        let end = duration.as_millis() as u64;
        let mut t = between(&mut rng, mix.gap_ms);
        // Bounded: every step moves t on by at least one ms.
        for _ in 0..10_000 {
            let kind = queue.pop().unwrap_or_else(|| *pick(&mut rng, &kinds));
            let len = between(&mut rng, mix.fault_ms).max(1);
            if t + len > end {
                break;
            }
            let fault = mix.make(kind, &mut rng);
            steps.push(Step {
                at: Duration::from_millis(t),
                fault,
                duration: Duration::from_millis(len),
            });
            let gap = between(&mut rng, mix.gap_ms).max(1);
            t += if mix.overlap { gap } else { len + gap };
        }
        Schedule { seed, steps }
    }

    /// At most `n` node faults (kill, stop) at any moment.
    pub fn node_faults_at_once_max(&self) -> usize {
        let mut edges: Vec<(Duration, i32)> = Vec::new();
        for s in self.steps.iter().filter(|s| s.fault.is_node_fault()) {
            edges.push((s.at, 1));
            edges.push((s.at + s.duration, -1));
        }
        edges.sort();
        let (mut now, mut max) = (0i32, 0i32);
        for (_, d) in edges {
            now += d;
            max = max.max(now);
        }
        max as usize
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fault schedule, seed {} ({} steps):",
            self.seed,
            self.steps.len()
        )?;
        for s in &self.steps {
            writeln!(
                f,
                "  at {:>6} ms for {:>5} ms: {}",
                s.at.as_millis(),
                s.duration.as_millis(),
                s.fault
            )?;
        }
        Ok(())
    }
}

/// The seed in `CORVUS_FAULT_SEED`, else `default` (CI runs fixed seeds).
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("CORVUS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The processes and proxies a schedule acts on, by name.
pub trait Nodes {
    /// The pid of `node` now, if it runs.
    fn pid(&self, node: &str) -> Option<i32>;
    /// kill -9 `node` (and reap it).
    fn kill9(&mut self, node: &str);
    /// Starts `node` again after a kill; waits until it is ready.
    fn restart(&mut self, node: &str);
    fn proxy(&mut self, name: &str) -> Option<&mut FaultProxy>;
    /// The mount point of a filesystem of the test's own that holds `node`'s data, which a
    /// [`Fault::DiskFull`] may fill: never the host's own disk.
    fn disk(&self, _node: &str) -> Option<std::path::PathBuf> {
        None
    }
}

/// What the runner did, when (ms since the Unix epoch, as in the histories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub t_ms: u64,
    pub step: usize,
    pub begin: bool,
    pub what: String,
}

/// What a step installed, to undo it.
enum Undo {
    Net(FaultId),
    Restart(String),
    Continue(i32),
    ProxyPass(String),
    /// The filesystem mounted there, and the files that filled it.
    Unfill(std::path::PathBuf, Vec<std::path::PathBuf>),
}

fn signal(pid: i32, sig: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is a node of the test.
    let r = unsafe { libc::kill(pid, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

fn apply(fault: &Fault, net: &Net, nodes: &mut dyn Nodes) -> Result<Undo, String> {
    let net_err = |e: crate::netns::NetError| e.to_string();
    Ok(match fault {
        Fault::Kill9 { node } => {
            nodes.kill9(node);
            Undo::Restart(node.clone())
        }
        Fault::Stop { node } => {
            let pid = nodes
                .pid(node)
                .ok_or_else(|| format!("{node} is not running"))?;
            signal(pid, libc::SIGSTOP)?;
            Undo::Continue(pid)
        }
        Fault::Partition { a, b } => Undo::Net(net.partition(a, b).map_err(net_err)?),
        Fault::OneWay { from, to } => Undo::Net(net.cut_one_way(from, to).map_err(net_err)?),
        Fault::PortCut {
            client,
            server,
            port,
        } => Undo::Net(net.cut_port(client, server, *port).map_err(net_err)?),
        Fault::Loss { host, percent } => Undo::Net(net.loss(host, *percent).map_err(net_err)?),
        Fault::Bandwidth { host, rate_kbit } => {
            Undo::Net(net.limit_bandwidth(host, *rate_kbit).map_err(net_err)?)
        }
        Fault::DiskFull { node } => {
            let mnt = nodes
                .disk(node)
                .ok_or_else(|| format!("{node} has no filesystem of the test's own to fill"))?;
            let files = crate::loop_fs::fill(&mnt);
            Undo::Unfill(mnt, files)
        }
        Fault::ProxyDelay {
            proxy,
            delay_ms,
            jitter_ms,
        } => {
            let p = nodes
                .proxy(proxy)
                .ok_or_else(|| format!("no proxy {proxy}"))?;
            p.delay(Direction::Both, *delay_ms, *jitter_ms)?;
            Undo::ProxyPass(proxy.clone())
        }
    })
}

fn undo(u: Undo, net: &Net, nodes: &mut dyn Nodes) -> Result<(), String> {
    match u {
        Undo::Net(id) => net.clear(id).map_err(|e| e.to_string()),
        Undo::Restart(node) => {
            nodes.restart(&node);
            Ok(())
        }
        Undo::Continue(pid) => signal(pid, libc::SIGCONT),
        Undo::ProxyPass(name) => nodes
            .proxy(&name)
            .ok_or_else(|| format!("no proxy {name}"))?
            .pass(),
        Undo::Unfill(mnt, files) => {
            crate::loop_fs::unfill(&mnt, &files);
            Ok(())
        }
    }
}

/// Applies `schedule` from now: each step at its time (never before the previous event,
/// when a restart ran late), reverted after its duration. Every fault is reverted before
/// it returns, also when one fails to apply (then it returns that error).
pub fn run(schedule: &Schedule, net: &Net, nodes: &mut dyn Nodes) -> Result<Vec<Event>, String> {
    let start = Instant::now();
    // (time, step, begin); ends sort before begins at the same moment.
    let mut edges: Vec<(Duration, bool, usize)> = Vec::new();
    for (i, s) in schedule.steps.iter().enumerate() {
        edges.push((s.at, true, i));
        edges.push((s.at + s.duration, false, i));
    }
    edges.sort();
    let mut undos: Vec<Option<Undo>> = (0..schedule.steps.len()).map(|_| None).collect();
    let mut events = Vec::new();
    let mut failure = None;
    for (at, begin, i) in edges {
        let now = start.elapsed();
        if at > now {
            std::thread::sleep(at - now);
        }
        let step = &schedule.steps[i];
        if begin {
            if failure.is_some() {
                continue;
            }
            match apply(&step.fault, net, nodes) {
                Ok(u) => undos[i] = Some(u),
                Err(e) => failure = Some(format!("step {i} ({}): {e}", step.fault)),
            }
        } else if let Some(u) = undos[i].take() {
            if let Err(e) = undo(u, net, nodes) {
                failure.get_or_insert(format!("undo step {i} ({}): {e}", step.fault));
            }
        } else {
            continue;
        }
        let what = format!("{} {}", if begin { "begin" } else { "end" }, step.fault);
        eprintln!("schedule +{:>6} ms: {what}", start.elapsed().as_millis());
        events.push(Event {
            t_ms: crate::history::now_ms(),
            step: i,
            begin,
            what,
        });
    }
    // Anything still applied (after a failure) is undone.
    for u in undos.into_iter().flatten() {
        let _ = undo(u, net, nodes);
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(events),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix() -> Mix {
        Mix {
            kill: vec!["broker".into()],
            stop: vec!["broker".into()],
            partition: vec![("client".into(), "broker".into())],
            one_way: vec![("client".into(), "broker".into())],
            port_cut: vec![("client".into(), "broker".into(), 10911)],
            loss: vec!["broker".into()],
            proxy_delay: vec!["client-proxy".into()],
            bandwidth: vec!["broker".into()],
            disk_full: vec!["broker".into()],
            ..Mix::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let d = Duration::from_secs(60);
        let a = Schedule::generate(7, d, &mix());
        assert_eq!(a, Schedule::generate(7, d, &mix()));
        assert_ne!(a.steps, Schedule::generate(8, d, &mix()).steps);
        assert!(a.to_string().contains("seed 7"), "{a}");
    }

    #[test]
    fn one_fault_at_a_time_unless_overlap_and_all_within_the_duration() {
        let d = Duration::from_secs(120);
        for seed in 0..50 {
            let s = Schedule::generate(seed, d, &mix());
            assert!(s.steps.len() >= 8, "seed {seed}: {s}");
            for w in s.steps.windows(2) {
                assert!(
                    w[0].at + w[0].duration < w[1].at,
                    "seed {seed}: overlap in {s}"
                );
            }
            let last = s.steps.last().unwrap();
            assert!(last.at + last.duration <= d);
            assert_eq!(s.node_faults_at_once_max(), 1, "seed {seed}");
        }
        let overlapping = Mix {
            overlap: true,
            ..mix()
        };
        let over = (0..50).any(|seed| {
            let s = Schedule::generate(seed, d, &overlapping);
            s.steps
                .windows(2)
                .any(|w| w[0].at + w[0].duration > w[1].at)
        });
        assert!(over, "overlap mode never overlapped");
    }

    #[test]
    fn cover_all_puts_every_kind_first_with_parameters_in_bounds() {
        let s = Schedule::generate(3, Duration::from_secs(60), &mix());
        let first: Vec<std::mem::Discriminant<Fault>> = s.steps[..9]
            .iter()
            .map(|st| std::mem::discriminant(&st.fault))
            .collect();
        let unique: std::collections::HashSet<_> = first.iter().collect();
        assert_eq!(unique.len(), 9, "{s}");
        for st in &s.steps {
            match &st.fault {
                Fault::Loss { percent, .. } => assert!((5..=30).contains(percent)),
                Fault::ProxyDelay {
                    delay_ms,
                    jitter_ms,
                    ..
                } => assert!((50..=500).contains(delay_ms) && *jitter_ms <= delay_ms / 4),
                Fault::Bandwidth { rate_kbit, .. } => assert!((256..=2048).contains(rate_kbit)),
                _ => {}
            }
            assert!((1000..=3000).contains(&(st.duration.as_millis() as u64)));
        }
    }

    #[test]
    fn an_empty_mix_gives_no_faults() {
        let s = Schedule::generate(1, Duration::from_secs(10), &Mix::default());
        assert!(s.steps.is_empty());
    }
}
