//! Network namespaces as hosts, for the fault tests: one namespace per host, each with its
//! own IP on a bridge in a "switch" namespace of its own, so a test's hosts reach each other
//! and nothing else (not the machine's network, not another test's hosts).
//!
//! Faults are nftables rules on the input hook of the receiving host (a dropped packet is
//! lost on the wire, so senders see timeouts, not local errors), plus `tc tbf` bandwidth
//! limits on a host's link. Every fault has an id and can be cleared alone; [`Net::heal`]
//! clears them all. Dropping the [`Net`] kills every process still inside its namespaces
//! and deletes the namespaces.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` (iproute2), `nft` (nftables) and `tc`.
//! [`Net::new_or_skip`] fails the test when `CI=true` or `CORVUS_REQUIRE_NETNS=1` and those
//! are missing, and otherwise prints why the test skips.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Prefix of every namespace this module creates; stale ones (of a dead test process) are
/// removed by the next [`Net::new`].
const NS_PREFIX: &str = "cvt";
/// The name of a host's end of its link, inside the host's namespace.
pub const HOST_IF: &str = "eth0";
const BRIDGE: &str = "br0";
const TABLE: &str = "corvus";
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

static NEXT_NET: AtomicU32 = AtomicU32::new(0);

/// Why a namespace operation failed: the command and what it said.
#[derive(Debug, Clone)]
pub struct NetError(pub String);

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetError {}

/// Runs `program args` to its end (bounded), returning its stdout, or what went wrong.
fn run(program: &str, args: &[&str]) -> Result<String, NetError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NetError(format!("{program} {}: cannot run: {e}", args.join(" "))))?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NetError(format!(
                    "{program} {}: did not finish within {COMMAND_TIMEOUT:?}",
                    args.join(" ")
                )));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NetError(format!("{program}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetError(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn ip(args: &[&str]) -> Result<String, NetError> {
    run("ip", args)
}

/// Runs `program args` inside namespace `ns`.
fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<String, NetError> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    ip(&all)
}

/// Whether this process can make namespaces and set nftables rules in them: `Err` says
/// what is missing.
pub fn check_available() -> Result<(), NetError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(NetError(format!(
            "network namespaces need root (euid is {euid})"
        )));
    }
    for tool in ["ip", "nft", "tc"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(NetError(format!(
                "`{tool}` is not installed (apt-get install iproute2 nftables)"
            )));
        }
    }
    Ok(())
}

/// Whether a missing namespace facility must fail the test (in CI) instead of skipping it.
pub fn netns_required() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
        || std::env::var("CORVUS_REQUIRE_NETNS")
            .map(|v| v == "1")
            .unwrap_or(false)
}

/// One host: a namespace with an address on the test's bridge.
#[derive(Debug, Clone)]
pub struct Host {
    /// The name the test gave it ("broker", "client").
    pub name: String,
    /// The namespace's name (unique per test run).
    pub ns: String,
    pub ip: Ipv4Addr,
    /// The switch side of its link (in the switch namespace).
    switch_if: String,
}

impl Host {
    /// A command that runs `program` inside this host's namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(program);
        cmd
    }

    /// `cmd` (program, arguments, environment and directory) run inside this namespace.
    pub fn wrap(&self, cmd: &Command) -> Command {
        crate::launched_by(self.command(cmd.get_program()), cmd)
    }

    /// `ip:port` on this host.
    pub fn addr(&self, port: u16) -> String {
        format!("{}:{port}", self.ip)
    }

    /// Runs `program args` in this namespace to its end.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, NetError> {
        in_ns(&self.ns, program, args)
    }

    /// Runs `f` on a new thread that has entered this host's network namespace, and
    /// returns what it returns. Sockets made there stay in the namespace wherever they are
    /// used later, so a test can probe from inside a host without a helper program.
    pub fn within<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NetError> {
        let path = format!("/run/netns/{}", self.ns);
        let file = std::fs::File::open(&path).map_err(|e| NetError(format!("{path}: {e}")))?;
        let handle = std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            // SAFETY: setns(2) on a valid namespace fd (kept open by `file` for the call)
            // changes only this thread's network namespace.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if r != 0 {
                return Err(NetError(format!(
                    "setns {path}: {}",
                    std::io::Error::last_os_error()
                )));
            }
            Ok(f())
        });
        handle
            .join()
            .map_err(|_| NetError("a thread inside a namespace panicked".into()))?
    }

    fn nft(&self, rule: &str) -> Result<(), NetError> {
        self.run("nft", &[rule]).map(drop)
    }
}

/// An installed fault; [`Net::clear`] removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u32);

/// What a fault installed, to remove it again.
#[derive(Debug)]
enum Installed {
    /// nftables rules tagged with the fault's comment, in these namespaces.
    Rules(Vec<String>),
    /// A tbf qdisc on these (namespace, interface) links.
    Qdiscs(Vec<(String, String)>),
}

/// The namespaces of one test: its hosts and their switch.
pub struct Net {
    /// The switch namespace (bridge and the switch ends of the links).
    switch_ns: String,
    hosts: Vec<Host>,
    faults: Mutex<Vec<(FaultId, Installed)>>,
    next_fault: AtomicU32,
}

impl Net {
    /// Creates one namespace per name in `hosts`, on a bridge of their own, with addresses
    /// 10.A.B.2, .3, ... /24 (A.B distinct per `Net` of this process). `prefix` (a few
    /// letters) goes into the namespace names so a leftover one says which test made it.
    pub fn new(prefix: &str, hosts: &[&str]) -> Result<Net, NetError> {
        check_available()?;
        assert!(!hosts.is_empty() && hosts.len() <= 200, "1 to 200 hosts");
        remove_stale_namespaces();
        let n = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tag: String = prefix
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(8)
            .collect();
        let base = format!("{NS_PREFIX}{pid}x{n}-{tag}");
        // Each Net has its own bridge, so addresses of two Nets never meet; they differ
        // anyway so that a log line names one Net.
        let a = 16 + (pid % 200) as u8;
        let b = (n % 250) as u8;
        let mut net = Net {
            switch_ns: format!("{base}-sw"),
            hosts: Vec::new(),
            faults: Mutex::new(Vec::new()),
            next_fault: AtomicU32::new(0),
        };
        // From here on, Drop removes what exists.
        ip(&["netns", "add", &net.switch_ns])?;
        in_ns(&net.switch_ns, "ip", &["link", "set", "lo", "up"])?;
        in_ns(
            &net.switch_ns,
            "ip",
            &["link", "add", BRIDGE, "type", "bridge"],
        )?;
        in_ns(&net.switch_ns, "ip", &["link", "set", BRIDGE, "up"])?;
        for (i, name) in hosts.iter().enumerate() {
            let host = Host {
                name: (*name).to_owned(),
                ns: format!("{base}-{i}"),
                ip: Ipv4Addr::new(10, a, b, 2 + i as u8),
                switch_if: format!("v{i}"),
            };
            ip(&["netns", "add", &host.ns])?;
            net.hosts.push(host.clone());
            ip(&[
                "link",
                "add",
                HOST_IF,
                "netns",
                &host.ns,
                "type",
                "veth",
                "peer",
                "name",
                &host.switch_if,
                "netns",
                &net.switch_ns,
            ])?;
            in_ns(
                &net.switch_ns,
                "ip",
                &["link", "set", &host.switch_if, "master", BRIDGE, "up"],
            )?;
            host.run("ip", &["link", "set", "lo", "up"])?;
            host.run(
                "ip",
                &["addr", "add", &format!("{}/24", host.ip), "dev", HOST_IF],
            )?;
            host.run("ip", &["link", "set", HOST_IF, "up"])?;
            host.nft(&format!(
                "add table inet {TABLE}; \
                 add chain inet {TABLE} input {{ type filter hook input priority 0; policy accept; }}"
            ))?;
        }
        eprintln!(
            "net {base}: {}",
            net.hosts
                .iter()
                .map(|h| format!("{}={} ({})", h.name, h.ip, h.ns))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(net)
    }

    /// [`Net::new`], or `None` with the reason printed when namespaces cannot be made here
    /// and the environment does not require them (see [`netns_required`]); in CI a missing
    /// facility fails the test.
    pub fn new_or_skip(prefix: &str, hosts: &[&str]) -> Option<Net> {
        match Net::new(prefix, hosts) {
            Ok(n) => Some(n),
            Err(e) if netns_required() => {
                panic!("network namespaces are required here (CI) but: {e}")
            }
            Err(e) => {
                eprintln!("SKIP: network namespaces are not available: {e}");
                None
            }
        }
    }

    /// The host named `name`; panics on a name the test did not create (a test bug).
    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name} in this net"))
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    fn new_fault(&self) -> (FaultId, String) {
        let id = FaultId(self.next_fault.fetch_add(1, Ordering::SeqCst));
        (id, format!("corvus-fault-{}", id.0))
    }

    fn record(&self, id: FaultId, installed: Installed) {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, installed));
    }

    /// Adds `rules` (nft rule bodies, e.g. `ip saddr 10.0.0.2 drop`) to the input chain
    /// of each (host, rule), all tagged as one fault.
    fn add_rules(&self, rules: &[(&Host, String)]) -> Result<FaultId, NetError> {
        let (id, tag) = self.new_fault();
        let mut namespaces: Vec<String> = Vec::new();
        let mut result = Ok(());
        for (host, rule) in rules {
            if !namespaces.contains(&host.ns) {
                namespaces.push(host.ns.clone());
            }
            result = host.nft(&format!(
                "add rule inet {TABLE} input {rule} comment \"{tag}\""
            ));
            if result.is_err() {
                break;
            }
        }
        self.record(id, Installed::Rules(namespaces));
        match result {
            Ok(()) => Ok(id),
            Err(e) => {
                let _ = self.clear(id);
                Err(e)
            }
        }
    }

    /// No packet between hosts `a` and `b`, either way (each drops what arrives from the
    /// other).
    pub fn partition(&self, a: &str, b: &str) -> Result<FaultId, NetError> {
        let (ha, hb) = (self.host(a), self.host(b));
        self.add_rules(&[
            (ha, format!("ip saddr {} drop", hb.ip)),
            (hb, format!("ip saddr {} drop", ha.ip)),
        ])
    }

    /// `isolate(a)`: no packet between `a` and any other host.
    pub fn isolate(&self, a: &str) -> Result<FaultId, NetError> {
        let ha = self.host(a);
        let mut rules = vec![(ha, format!("iifname \"{HOST_IF}\" drop"))];
        for h in self.hosts.iter().filter(|h| h.name != a) {
            rules.push((h, format!("ip saddr {} drop", ha.ip)));
        }
        self.add_rules(&rules)
    }

    /// Packets from `from` to `to` are dropped; those from `to` to `from` pass. (TCP needs
    /// both ways, so no connection works either way; datagrams from `to` still arrive.)
    pub fn cut_one_way(&self, from: &str, to: &str) -> Result<FaultId, NetError> {
        let (hf, ht) = (self.host(from), self.host(to));
        self.add_rules(&[(ht, format!("ip saddr {} drop", hf.ip))])
    }

    /// TCP to and from `port` on `server` is cut between `client` and `server`, both ways
    /// (e.g. only the HA port, or only the controller port); other ports pass.
    pub fn cut_port(&self, client: &str, server: &str, port: u16) -> Result<FaultId, NetError> {
        let (hc, hs) = (self.host(client), self.host(server));
        self.add_rules(&[
            (hs, format!("ip saddr {} tcp dport {port} drop", hc.ip)),
            (hc, format!("ip saddr {} tcp sport {port} drop", hs.ip)),
        ])
    }

    /// `percent`% of the packets to and from `host` (on its link) are lost at random.
    pub fn loss(&self, host: &str, percent: u8) -> Result<FaultId, NetError> {
        assert!(percent <= 100, "a loss of at most 100%");
        let h = self.host(host);
        // nft compares with values below the modulus only: 100% is a plain drop.
        let chance = if percent >= 100 {
            String::new()
        } else {
            format!("numgen random mod 100 < {percent} ")
        };
        let mut rules = vec![(h, format!("iifname \"{HOST_IF}\" {chance}drop"))];
        for other in self.hosts.iter().filter(|o| o.name != host) {
            rules.push((other, format!("ip saddr {} {chance}drop", h.ip)));
        }
        self.add_rules(&rules)
    }

    /// Caps `host`'s link at `rate_kbit` kbit/s both ways (a tbf qdisc on each end).
    pub fn limit_bandwidth(&self, host: &str, rate_kbit: u32) -> Result<FaultId, NetError> {
        assert!(rate_kbit > 0, "a rate above 0");
        let h = self.host(host);
        let (id, _) = self.new_fault();
        let links = vec![
            (h.ns.clone(), HOST_IF.to_owned()),
            (self.switch_ns.clone(), h.switch_if.clone()),
        ];
        let rate = format!("{rate_kbit}kbit");
        // A burst of at least one MTU, and about 10 ms of the rate.
        let burst = format!("{}", (rate_kbit as u64 * 1000 / 8 / 100).max(4096));
        let mut result = Ok(());
        for (ns, dev) in &links {
            result = in_ns(
                ns,
                "tc",
                &[
                    "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst,
                    "latency", "400ms",
                ],
            )
            .map(drop);
            if result.is_err() {
                break;
            }
        }
        self.record(id, Installed::Qdiscs(links));
        match result {
            Ok(()) => Ok(id),
            Err(e) => {
                let _ = self.clear(id);
                Err(e)
            }
        }
    }

    /// Removes fault `id` (a no-op for one already cleared).
    pub fn clear(&self, id: FaultId) -> Result<(), NetError> {
        let installed = {
            let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
            match faults.iter().position(|(f, _)| *f == id) {
                Some(i) => faults.remove(i).1,
                None => return Ok(()),
            }
        };
        let mut first_error = None;
        match installed {
            Installed::Rules(namespaces) => {
                let tag = format!("\"corvus-fault-{}\"", id.0);
                for ns in namespaces {
                    let listing =
                        match in_ns(&ns, "nft", &["-a", "list", "chain", "inet", TABLE, "input"]) {
                            Ok(l) => l,
                            Err(e) => {
                                first_error.get_or_insert(e);
                                continue;
                            }
                        };
                    for line in listing.lines().filter(|l| l.contains(&tag)) {
                        let Some(handle) = line.rsplit("# handle ").next().map(str::trim) else {
                            continue;
                        };
                        if let Err(e) = in_ns(
                            &ns,
                            "nft",
                            &["delete", "rule", "inet", TABLE, "input", "handle", handle],
                        ) {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
            Installed::Qdiscs(links) => {
                for (ns, dev) in links {
                    if let Err(e) = in_ns(&ns, "tc", &["qdisc", "del", "dev", &dev, "root"]) {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Removes every fault.
    pub fn heal(&self) -> Result<(), NetError> {
        let ids: Vec<FaultId> = self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, _)| *id)
            .collect();
        let mut first_error = None;
        for id in ids {
            if let Err(e) = self.clear(id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// How many faults are installed now.
    pub fn active_faults(&self) -> usize {
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Kills every process inside namespace `ns`.
fn kill_all_in(ns: &str) {
    for _ in 0..10 {
        let pids: Vec<i32> = ip(&["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is in a
            // namespace this test made.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn delete_namespace(ns: &str) {
    kill_all_in(ns);
    if let Err(e) = ip(&["netns", "del", ns]) {
        eprintln!("cannot delete namespace {ns}: {e}");
    }
}

/// Deletes namespaces of ours whose test process is gone (killed before its Drop ran).
fn remove_stale_namespaces() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('x').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            delete_namespace(name);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Processes first (a namespace with processes in it lingers), hosts, then the switch.
        for h in &self.hosts {
            kill_all_in(&h.ns);
        }
        for h in &self.hosts {
            delete_namespace(&h.ns);
        }
        delete_namespace(&self.switch_ns);
    }
}
