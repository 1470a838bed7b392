//! The NameServer and broker the quickstart starts: child processes of this very binary
//! (`bench __namesrv`, `bench __broker`), on free loopback ports, in a temporary directory.
//! They are stopped when the [`Cluster`] drops, on Ctrl-C, and (PR_SET_PDEATHSIG) when the
//! bench dies without cleaning up.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
pub use broker::bootstrap::allowed_cpus;
use serde::Serialize;

/// How long a child may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Set on SIGINT or SIGTERM: every run stops early, and everything started is stopped.
pub fn stop_flag() -> &'static Arc<AtomicBool> {
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

pub fn stopping() -> bool {
    stop_flag().load(Ordering::Relaxed)
}

/// Installs the SIGINT/SIGTERM handlers: the first signal sets the stop flag, a second one
/// exits at once (children still die with us through PR_SET_PDEATHSIG).
pub fn install_signal_handlers() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = stop_flag();
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(flag))?;
        signal_hook::flag::register(sig, Arc::clone(flag))?;
    }
    Ok(())
}

/// What the quickstart starts.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub profile: String,
    pub broker_cores: u16,
    /// Broker keys on top of the profile (`--broker-config`).
    pub broker_config: Option<PathBuf>,
    /// Data directory; a temporary one (removed at the end) when `None`.
    pub data_dir: Option<PathBuf>,
    /// `ASYNC_MASTER` or `SYNC_MASTER`: the broker is that role's master and a slave
    /// (`--replica`) runs beside it, on the last CPU (shared with the bench).
    pub replica: Option<String>,
    /// The bench's own CPUs (`--bench-cpus`); by default those after the broker's.
    pub bench_cpus: Option<Vec<usize>>,
}

impl ClusterOptions {
    /// The CPUs the bench's own threads run on.
    pub fn bench_cpus(&self) -> Vec<usize> {
        self.bench_cpus
            .clone()
            .unwrap_or_else(|| bench_cpus(&allowed_cpus(), self.broker_cores))
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
struct ChildGuard {
    name: &'static str,
    child: Option<Child>,
}

impl ChildGuard {
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: `kill` has no memory-safety preconditions; the pid is our own child that
        // has not been reaped yet (try_wait above), so it cannot have been recycled.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    eprintln!(
                        "bench: {} did not stop after SIGTERM; killing it",
                        self.name
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The broker's memory, from /proc/<pid>/status.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Memory {
    /// Resident set at the last sample.
    pub vm_rss_kib: u64,
    /// Highest resident set among the samples.
    pub vm_rss_kib_max: u64,
    /// The kernel's high-water mark of the resident set since the broker started.
    pub vm_hwm_kib: u64,
    /// Anonymous (heap) part of the last sample: what the broker's own bounds govern.
    pub rss_anon_kib: u64,
    /// File-backed part (mapped ConsumeQueue / IndexFile pages): page cache the kernel can
    /// reclaim, growing with the data stored.
    pub rss_file_kib: u64,
    /// Shared-memory part: the shards' tail rings (`tail_ring_bytes` each, fixed).
    pub rss_shmem_kib: u64,
}

/// Reads `VmRSS` and `VmHWM` (KiB) from a /proc/<pid>/status text.
pub fn parse_status(status: &str) -> Option<(u64, u64)> {
    Some((
        status_field(status, "VmRSS:")?,
        status_field(status, "VmHWM:")?,
    ))
}

/// One `Name:   123 kB` field of a /proc/<pid>/status text, in KiB.
pub fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub struct Cluster {
    // Field order is drop order: the slave, then the broker, then the NameServer.
    slave: Option<ChildGuard>,
    broker: ChildGuard,
    namesrv: ChildGuard,
    pub namesrv_addr: String,
    pub broker_addr: String,
    _temp: Option<tempfile::TempDir>,
    memory: Memory,
}

/// The keys that set a broker's disk-use levels.
const DISK_LEVEL_KEYS: [&str; 3] = [
    "disk_clean_ratio",
    "disk_force_clean_ratio",
    "disk_refuse_ratio",
];

/// Disk-use levels of the bench's own brokers, unless `--broker-config` sets some. The
/// defaults (clean at 75%, refuse sends at 90% of `df`'s Use%) read the whole host's disk:
/// on a host already 90% full every send of the quickstart would be refused, and from 75%
/// the broker would delete the run's oldest segments before the consume run reads them
/// back. The bench's data are its own and go with it, so its brokers refuse only at 99.5%
/// or when `disk_reserve_bytes` (64 MiB) would no longer be left free, and the run keeps
/// to its share of the free space (`runner::DISK_SHARE_MAX`).
pub const DISK_LEVELS: &str =
    "\ndisk_clean_ratio = 0.99\ndisk_force_clean_ratio = 0.99\ndisk_refuse_ratio = 0.995\n";

impl Cluster {
    pub fn start(opts: &ClusterOptions) -> Result<Cluster> {
        let (temp, data_dir) = match &opts.data_dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("corvus-bench-")
                    .tempdir()
                    .context("creating a temporary data directory")?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let (namesrv, ns_line, _) = spawn(
            "namesrv",
            &[
                "__namesrv",
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "warn",
            ],
            "namesrv listening on ",
            None,
        )?;
        let namesrv_addr = first_word(&ns_line)?;
        let broker_data = data_dir.join("broker");
        let cores = opts.broker_cores.to_string();
        // A broker core polling while idle would take the CPU the bench shares with it.
        let broker_cpus: Vec<usize> = allowed_cpus()
            .into_iter()
            .take(opts.broker_cores as usize)
            .collect();
        let own = opts.bench_cpus();
        let shared_cpus = own.is_empty() || own.iter().any(|c| broker_cpus.contains(c));
        let no_polling = data_dir.join("broker-overrides.toml");
        let mut overrides = match &opts.broker_config {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("reading --broker-config {}", p.display()))?,
            None => String::new(),
        };
        if shared_cpus && !overrides.contains("idle_poll_us") {
            overrides.push_str("\nidle_poll_us = 0\n");
        }
        if !DISK_LEVEL_KEYS.iter().any(|k| overrides.contains(k)) {
            overrides.push_str(DISK_LEVELS);
        }
        let slave_overrides = opts.replica.as_ref().map(|_| overrides.clone());
        if let Some(role) = &opts.replica {
            overrides.push_str(&format!("\nbroker_role = \"{role}\"\n"));
        }
        let with_overrides = !overrides.trim().is_empty();
        if with_overrides {
            std::fs::write(&no_polling, &overrides)
                .with_context(|| format!("writing {}", no_polling.display()))?;
        }
        let master_args = broker_args(
            &namesrv_addr,
            &broker_data,
            opts,
            &cores,
            with_overrides.then_some(no_polling.as_path()),
        )?;
        let args: Vec<&str> = master_args.iter().map(String::as_str).collect();
        let (broker, b_line, preamble) = spawn("broker", &args, "broker listening on ", None)?;
        let broker_addr = first_word(&b_line)?;
        let slave = match slave_overrides {
            None => None,
            Some(mut toml) => {
                let ha = preamble
                    .iter()
                    .find_map(|l| l.strip_prefix("broker replication on "))
                    .map(first_word)
                    .ok_or_else(|| anyhow!("the broker did not say its replication address"))??;
                toml.push_str(&format!(
                    "\nbroker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{ha}\"\n"
                ));
                let conf = data_dir.join("slave.toml");
                std::fs::write(&conf, toml)
                    .with_context(|| format!("writing {}", conf.display()))?;
                let slave_args = broker_args(
                    &namesrv_addr,
                    &data_dir.join("slave"),
                    opts,
                    &cores,
                    Some(&conf),
                )?;
                let args: Vec<&str> = slave_args.iter().map(String::as_str).collect();
                // The slave's executors pin within the CPUs it may use: the last ones.
                let cpus = allowed_cpus();
                let skip = cpus.len().saturating_sub(opts.broker_cores as usize);
                let last: Vec<usize> = cpus.into_iter().skip(skip).collect();
                let (g, _, _) = spawn("slave", &args, "broker listening on ", Some(last))?;
                Some(g)
            }
        };
        Ok(Cluster {
            slave,
            broker,
            namesrv,
            namesrv_addr,
            broker_addr,
            _temp: temp,
            memory: Memory::default(),
        })
    }

    /// CPU seconds (user + system) the broker and, with `--replica`, the slave have used
    /// since they started.
    pub fn cpu_seconds(&self) -> (Option<f64>, Option<f64>) {
        let of = |g: Option<&ChildGuard>| {
            g.and_then(ChildGuard::pid)
                .and_then(crate::remoting_load::cpu_seconds)
        };
        (of(Some(&self.broker)), of(self.slave.as_ref()))
    }

    /// Samples the broker's memory; call it now and then during runs.
    pub fn sample_memory(&mut self) -> Option<Memory> {
        let pid = self.broker.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let (rss, hwm) = parse_status(&status)?;
        self.memory.vm_rss_kib = rss;
        self.memory.vm_rss_kib_max = self.memory.vm_rss_kib_max.max(rss);
        self.memory.vm_hwm_kib = hwm;
        self.memory.rss_anon_kib = status_field(&status, "RssAnon:").unwrap_or(0);
        self.memory.rss_file_kib = status_field(&status, "RssFile:").unwrap_or(0);
        self.memory.rss_shmem_kib = status_field(&status, "RssShmem:").unwrap_or(0);
        Some(self.memory)
    }

    /// Whether every child is still running.
    pub fn check_alive(&mut self) -> Result<()> {
        for g in [&mut self.broker, &mut self.namesrv]
            .into_iter()
            .chain(self.slave.as_mut())
        {
            if let Some(c) = g.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let name = g.name;
                    g.child = None;
                    bail!("the {name} exited early ({status})");
                }
            }
        }
        Ok(())
    }

    pub fn stop(&mut self) {
        if let Some(s) = self.slave.as_mut() {
            s.stop();
        }
        self.broker.stop();
        self.namesrv.stop();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The arguments of `bench __broker` for a broker of the quickstart's cluster.
fn broker_args(
    namesrv: &str,
    data: &std::path::Path,
    opts: &ClusterOptions,
    cores: &str,
    config: Option<&std::path::Path>,
) -> Result<Vec<String>> {
    let utf8 = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("{} is not UTF-8", p.display()))
    };
    let mut args: Vec<String> = [
        "__broker",
        "--listen",
        "127.0.0.1:0",
        "--namesrv",
        namesrv,
        "--data-dir",
        &utf8(data)?,
        "--profile",
        &opts.profile,
        "--cores",
        cores,
        "--log-level",
        "warn",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(c) = config {
        args.push("--config".into());
        args.push(utf8(c)?);
    }
    Ok(args)
}

fn first_word(rest: &str) -> Result<String> {
    rest.split_whitespace()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no address in the start-up line"))
}

/// Starts `bench <args>` (on `cpus` only, when given) and waits for the stdout line starting
/// with `marker`; returns the rest of that line and the lines before it. stdout is drained
/// afterwards so the child never blocks on it; stderr is inherited, so its warnings and
/// errors show.
fn spawn(
    name: &'static str,
    args: &[&str],
    marker: &str,
    cpus: Option<Vec<usize>>,
) -> Result<(ChildGuard, String, Vec<String>)> {
    let exe = std::env::current_exe().context("finding the bench executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let pin = cpus.filter(|c| !c.is_empty()).is_some_and(|c| {
            for cpu in c {
                // SAFETY: CPU_SET writes one bit inside the set we own; the indices come
                // from sched_getaffinity, below CPU_SETSIZE.
                unsafe { libc::CPU_SET(cpu, &mut set) };
            }
            true
        });
        // SAFETY: runs in the forked child before exec; `prctl` and `sched_setaffinity` are
        // async-signal-safe and only read the set copied into the closure. PR_SET_PDEATHSIG
        // makes the child receive SIGKILL when the bench dies, so a crashed or killed bench
        // leaves nothing running.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if pin
                    && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the {name}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("{name}: no stdout"))?;
    let mut guard = ChildGuard {
        name,
        child: Some(child),
    };
    let (tx, rx) = mpsc::channel();
    let marker = marker.to_owned();
    std::thread::Builder::new()
        .name(format!("{name}-stdout"))
        .spawn(move || drain(stdout, &marker, tx))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((line, preamble)) => return Ok((guard, line, preamble)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                guard.stop();
                bail!("the {name} exited before it was listening (see its messages above)");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stopping() {
                    bail!("interrupted while starting the {name}");
                }
                if Instant::now() > deadline {
                    bail!("the {name} did not start within {START_TIMEOUT:?}");
                }
            }
        }
    }
}

fn drain(stdout: ChildStdout, marker: &str, tx: mpsc::Sender<(String, Vec<String>)>) {
    let mut tx = Some(tx);
    let mut preamble = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix(marker) {
            if let Some(tx) = tx.take() {
                let _ = tx.send((rest.to_owned(), std::mem::take(&mut preamble)));
            }
        } else if tx.is_some() {
            preamble.push(line);
        }
    }
}

/// Pins the calling thread (and the threads it starts afterwards) to `cpus`.
pub fn pin_to(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: as above, an all-zero `cpu_set_t` is the empty set; CPU_SET only writes bits
    // inside the set (the indices come from sched_getaffinity, below CPU_SETSIZE), and
    // sched_setaffinity only reads the set.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        bail!("sched_setaffinity: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// The broker takes the first `broker_cores` allowed CPUs; the bench gets the rest, if any.
pub fn bench_cpus(allowed: &[usize], broker_cores: u16) -> Vec<usize> {
    allowed
        .iter()
        .skip(broker_cores as usize)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_fields_are_read_from_proc_status() {
        let s = "Name:\tbench\nVmHWM:\t  123456 kB\nVmRSS:\t   65432 kB\n";
        assert_eq!(parse_status(s), Some((65432, 123456)));
        assert_eq!(parse_status("Name: x\n"), None);
        assert_eq!(status_field("RssAnon:\t  42 kB\n", "RssAnon:"), Some(42));
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        let (rss, hwm) = parse_status(&own).unwrap();
        assert!(rss > 0 && hwm >= rss);
    }

    #[test]
    fn the_bench_takes_the_cpus_the_broker_leaves() {
        assert_eq!(bench_cpus(&[0, 1], 1), vec![1]);
        assert_eq!(bench_cpus(&[0, 1, 2, 3], 2), vec![2, 3]);
        assert!(bench_cpus(&[0, 1], 2).is_empty());
        assert!(!allowed_cpus().is_empty());
    }
}
