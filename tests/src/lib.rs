//! Harness for the integration tests: builds the workspace's binaries once, starts them on
//! loopback with port 0 (the OS picks a free port; the binaries print the address they got),
//! in temporary directories, and stops everything it started, also when a test panics.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::Once;
use std::time::{Duration, Instant};

pub mod checker;
pub mod controllers;
pub mod history;
/// A small loop-mounted ext4 a test can really fill (shared with the shard's tests).
#[path = "../../shard/tests/common/loop_fs.rs"]
pub mod loop_fs;
pub mod metrics;
pub mod netns;
pub mod proxy;
pub mod scenario;
pub mod schedule;
pub mod v5;

pub use controllers::Controllers;

static BUILD: Once = Once::new();

/// The workspace root (this crate lives in `<root>/tests`).
/// `launcher` (a command that runs a program: `ip netns exec NS PROGRAM`, `taskset -c N
/// PROGRAM`, its program already given) with `cmd`'s arguments, environment and directory.
pub fn launched_by(mut launcher: Command, cmd: &Command) -> Command {
    launcher.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => launcher.env(k, v),
            None => launcher.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        launcher.current_dir(d);
    }
    launcher
}

/// `found`, or `None` after saying why the test skips: `msg` names what is missing and how to
/// make it. Where the environment variable `required` is set (`.ci/run` sets it once it has
/// built or installed the thing), the missing thing fails the test instead.
pub fn or_skip<T>(found: Option<T>, required: &str, msg: &str) -> Option<T> {
    if found.is_none() {
        assert!(std::env::var_os(required).is_none(), "{msg}");
        eprintln!("skipped: {msg}");
    }
    found
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The classpath of the Maven program `module` of `tests/` (`.ci/run` builds them all):
/// its `target/classes`, when `class` (such as `corvus/Roundtrip.class`) says a compiled
/// class must be there, then the dependencies listed in its `cp.txt`. `None` when it is not
/// built, after saying so: the test then skips, or fails where `CORVUS_REQUIRE_JAVA` is set.
pub fn java_program_or_skip(module: &str, class: Option<&str>) -> Option<String> {
    let dir = workspace_root().join(module);
    let deps = std::fs::read_to_string(dir.join("cp.txt")).ok();
    let classes = dir.join("target/classes");
    let cp = match (deps, class) {
        (Some(deps), None) => Some(deps.trim().to_owned()),
        (Some(deps), Some(class)) if classes.join(class).exists() => {
            Some(format!("{}:{}", classes.display(), deps.trim()))
        }
        _ => None,
    };
    if cp.is_none() {
        let goals = if class.is_some() { "compile " } else { "" };
        let msg = format!(
            "{module} is not built (cd {module} && mvn -q -B {goals}dependency:build-classpath -Dmdep.outputFile=cp.txt)"
        );
        assert!(std::env::var_os("CORVUS_REQUIRE_JAVA").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
    }
    cp
}

/// Builds the binaries the tests start (cargo releases its lock while tests run, so this
/// nested build works and is a no-op when they are fresh). Under cargo-nextest, where each
/// test is a process of its own, only the first test process of a run builds: the others
/// would each wait for cargo's lock on the build directory just to learn that nothing
/// changed.
pub fn ensure_built() {
    BUILD.call_once(|| {
        let run_id = std::env::var("NEXTEST_RUN_ID").ok();
        match (run_id, profile_dir()) {
            (Some(run_id), Some(dir)) => build_once_per_run(&dir, &run_id),
            _ => build_binaries(),
        }
    });
}

/// The build directory of the running test (`target/<profile>/deps/<test>` ->
/// `target/<profile>`), where cargo puts the binaries the tests start.
fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// [`build_binaries`] unless another test process of the nextest run `run_id` already
/// did: a lock file in `dir` (`target/<profile>`) makes the others wait for the first, and
/// a marker named after the run says it is done.
fn build_once_per_run(dir: &Path, run_id: &str) {
    use std::os::fd::AsRawFd;
    let run_id: String = run_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let Ok(lock) = std::fs::File::create(dir.join(".integration-build.lock")) else {
        return build_binaries();
    };
    // SAFETY: flock on a descriptor `lock` keeps open; it is released when `lock` drops.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return build_binaries();
    }
    let marker = dir.join(format!(".integration-built-{run_id}"));
    if !marker.exists() {
        build_binaries();
        // Markers of earlier runs are of no use any more.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .starts_with(".integration-built-")
                {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let _ = std::fs::write(&marker, b"");
    }
    drop(lock);
}

/// Runs `cargo build` for the binaries the tests start, without the variables cargo sets
/// for a test process: a build script that reads one (ring's reads `CARGO_MANIFEST_DIR`)
/// would otherwise be rebuilt here and again by the next `cargo test`, and everything
/// above it with it (25 s per test run).
fn build_binaries() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str == "CARGO_MANIFEST_DIR"
            || name_str == "CARGO_MANIFEST_PATH"
            || name_str == "CARGO_CRATE_NAME"
            || name_str == "CARGO_PRIMARY_PACKAGE"
            || name_str == "CARGO_TARGET_TMPDIR"
            || name_str.starts_with("CARGO_PKG_")
            || name_str.starts_with("CARGO_BIN_")
        {
            command.env_remove(&name);
        }
    }
    let status = command
        .args([
            "build",
            "-p",
            "broker",
            "-p",
            "namesrv",
            "-p",
            "mqadmin",
            "-p",
            "controller",
        ])
        .current_dir(workspace_root())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building the binaries failed");
}

/// Where [`bin`] takes the binaries from when a program sets it (see [`use_bin_dir`]).
static BIN_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes [`bin`] take the binaries from `dir` as they are, without building them: for the
/// programs of this package (e.g. `corvus-failover`), which run from a build directory
/// (`target/release`) beside the binaries they start, not from `target/<profile>/deps`.
/// The first call wins.
pub fn use_bin_dir(dir: PathBuf) {
    let _ = BIN_DIR.set(dir);
}

/// Path of a workspace binary: in the directory given to [`use_bin_dir`], or else (built
/// first) next to the test executable's profile directory.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = BIN_DIR.get() {
        let p = dir.join(name);
        assert!(p.exists(), "binary {} not found", p.display());
        return p;
    }
    ensure_built();
    let p = profile_dir()
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(p.exists(), "binary {} not found", p.display());
    p
}

/// A child process that is killed when dropped.
pub struct Proc {
    pub child: Child,
    pub addr: String,
    pub line: String,
    /// Stdout lines printed before the ready line (e.g. the metrics address).
    pub preamble: Vec<String>,
    stderr_log: PathBuf,
}

impl Proc {
    /// Starts `cmd` (any program: e.g. one wrapped to run in a network namespace), its
    /// stderr going to `log`, and waits (bounded) for a stdout line starting with
    /// `ready_prefix`; `addr` is the word that follows it.
    pub fn start(cmd: Command, ready_prefix: &str, log: PathBuf) -> Proc {
        Self::spawn(cmd, ready_prefix, log)
    }

    fn spawn(mut cmd: Command, ready_prefix: &str, log: PathBuf) -> Proc {
        let err = std::fs::File::create(&log).unwrap();
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let prefix = ready_prefix.to_owned();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let mut preamble = Vec::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(None);
                        return;
                    }
                    Ok(_) => {
                        if !line.starts_with(&prefix) {
                            preamble.push(line.trim().to_owned());
                        } else {
                            let _ = tx.send(Some((
                                line.trim().to_owned(),
                                std::mem::take(&mut preamble),
                            )));
                            // Keep draining so the child never blocks on a full pipe.
                            let mut sink = String::new();
                            while r.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                                sink.clear();
                            }
                            return;
                        }
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some((line, preamble))) => {
                let addr = line[ready_prefix.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                Proc {
                    child,
                    addr,
                    line,
                    preamble,
                    stderr_log: log,
                }
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("process did not become ready ({other:?}); stderr:\n{log_text}");
            }
        }
    }

    /// The address in a preamble line starting with `prefix` (e.g. "broker metrics on ").
    pub fn preamble_addr(&self, prefix: &str) -> Option<String> {
        self.preamble
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe {
            libc::kill(self.pid(), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// SIGKILL: a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn start_namesrv(log_dir: &Path) -> Proc {
    start_namesrv_with(log_dir, &[])
}

pub fn start_namesrv_with(log_dir: &Path, extra: &[&str]) -> Proc {
    start_namesrv_on(log_dir, "127.0.0.1:0", extra)
}

/// A NameServer listening on `listen` (e.g. the address of one that was stopped).
pub fn start_namesrv_on(log_dir: &Path, listen: &str, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(bin("namesrv"));
    cmd.args(["--listen", listen]).args(extra);
    let n = log_dir.read_dir().map(|d| d.count()).unwrap_or(0);
    Proc::spawn(
        cmd,
        "namesrv listening on ",
        log_dir.join(format!("namesrv-{n}.log")),
    )
}

/// Loopback ports that were free a moment ago (bound, then released), for processes that
/// must know each other's addresses before they start (the controllers' `--peers`). They
/// are consecutive and below the kernel's ephemeral range: a port from that range can be
/// taken as the source port of an outgoing connection once its process stops, and a process
/// restarted on it then cannot listen there until that connection closes.
pub fn free_ports(n: usize) -> Vec<u16> {
    let first = consecutive_free_ports(n as u16);
    (first..first + n as u16).collect()
}

/// The first of `n` consecutive loopback ports free a moment ago, below the kernel's
/// ephemeral range (see [`free_ports`]): the direct ports of an `n`-core broker with
/// `direct_port_base` (and `vip_channel = false`), fixed across its restarts.
pub fn consecutive_free_ports(n: u16) -> u16 {
    const LOWEST: u64 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST + n as u64).max(1);
    // Where to start differs per process and call, so tests running side by side seldom
    // try the same ports.
    let mut x = 1 | std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let first = (LOWEST + x % span) as u16;
        let held: Option<Vec<std::net::TcpListener>> = (0..n)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", first + i)).ok())
            .collect();
        if held.is_some() {
            return first;
        }
    }
    panic!("no {n} consecutive free loopback ports below {ephemeral}");
}

/// A `corvus-controller` with `--id id --listen listen --peers peers --data-dir data_dir`
/// and `extra` flags, ready once it prints its address.
pub fn start_controller(
    log_dir: &Path,
    id: u64,
    listen: &str,
    peers: &str,
    data_dir: &Path,
    extra: &[&str],
) -> Proc {
    let mut cmd = Command::new(bin("corvus-controller"));
    cmd.args([
        "--id",
        &id.to_string(),
        "--listen",
        listen,
        "--peers",
        peers,
    ])
    .arg("--data-dir")
    .arg(data_dir)
    .args(extra);
    let n = log_dir.read_dir().map(|d| d.count()).unwrap_or(0);
    Proc::spawn(
        cmd,
        "controller listening on ",
        log_dir.join(format!("controller-{id}-{n}.log")),
    )
}

/// How to start a broker.
#[derive(Clone, Debug)]
pub struct BrokerOpts {
    pub namesrv: String,
    pub data_dir: PathBuf,
    pub cores: u16,
    pub profile: String,
    pub name: String,
    /// `--listen`: by default `127.0.0.1:0` (the OS picks the port).
    pub listen: String,
    pub extra: Vec<String>,
    pub config_toml: Option<String>,
    /// `--tail-ring-dir`: by default a temporary directory of these options' own (in
    /// /dev/shm, a tmpfs as in production, where there is one), removed when the last
    /// clone of them is dropped, so rings a killed broker leaves behind do not pile up;
    /// `None` keeps the broker's default (/dev/shm).
    pub tail_ring_dir: Option<PathBuf>,
    /// Keeps that directory alive as long as the options (and their clones) are.
    pub ring_dir_guard: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl BrokerOpts {
    pub fn new(namesrv: &str, data_dir: &Path) -> BrokerOpts {
        let ring_dir = ring_dir();
        BrokerOpts {
            namesrv: namesrv.to_owned(),
            data_dir: data_dir.to_owned(),
            cores: 1,
            profile: "small".into(),
            name: "broker-a".into(),
            listen: "127.0.0.1:0".into(),
            extra: Vec::new(),
            config_toml: None,
            tail_ring_dir: Some(ring_dir.path().to_owned()),
            ring_dir_guard: Some(std::sync::Arc::new(ring_dir)),
        }
    }
}

pub fn start_broker(opts: &BrokerOpts, log_dir: &Path) -> Proc {
    let cmd = broker_command(opts, log_dir);
    let n = log_dir.read_dir().map(|d| d.count()).unwrap_or(0);
    Proc::spawn(
        cmd,
        "broker listening on ",
        log_dir.join(format!("broker-{n}.log")),
    )
}

/// Starts a broker that is expected to refuse to start, and waits (bounded by `timeout`)
/// for it to exit. Returns its exit code (`None` if it was still running and got killed)
/// and everything it wrote to stderr and stdout.
pub fn run_broker_expecting_exit(
    opts: &BrokerOpts,
    log_dir: &Path,
    timeout: Duration,
) -> (Option<i32>, String) {
    run_until_exit(&mut broker_command(opts, log_dir), timeout)
}

/// Runs `cmd` until it exits, at most `timeout` (then it is killed): its exit code (`None`
/// if it was still running and got killed) and everything it wrote to stderr and stdout.
pub fn run_until_exit(cmd: &mut Command, timeout: Duration) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + timeout;
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (code, text)
}

/// The command that starts a broker with `opts` (logs and config files under `log_dir`).
pub fn broker_command(opts: &BrokerOpts, log_dir: &Path) -> Command {
    let mut cmd = Command::new(bin("broker"));
    cmd.args([
        "--listen",
        &opts.listen,
        "--profile",
        &opts.profile,
        "--name",
        &opts.name,
    ]);
    cmd.args(["--cores", &opts.cores.to_string()]);
    spread_over_cpus(&mut cmd, opts.cores);
    cmd.arg("--data-dir").arg(&opts.data_dir);
    if let Some(d) = &opts.tail_ring_dir {
        cmd.arg("--tail-ring-dir").arg(d);
    }
    if !opts.namesrv.is_empty() {
        cmd.args(["--namesrv", &opts.namesrv]);
    }
    // A test that hands the broker a config file of its own (`extra`: `-c broker.conf`, a
    // RocketMQ one, say) gets exactly that file: the broker takes one.
    let own_file = opts.extra.iter().any(|a| a == "-c" || a == "--config");
    assert!(
        !(own_file && opts.config_toml.is_some()),
        "a test broker takes config_toml or its own -c file, not both"
    );
    if !own_file {
        let toml = opts.config_toml.as_deref().unwrap_or("");
        let toml = if DISK_LEVEL_KEYS.iter().any(|k| toml.contains(k)) {
            toml.to_owned()
        } else {
            format!("{HOST_INDEPENDENT_DISK_LEVELS}{toml}")
        };
        let path = log_dir.join(format!("{}.toml", opts.name));
        std::fs::write(&path, toml).unwrap();
        cmd.arg("--config").arg(path);
    }
    cmd.args(&opts.extra);
    cmd
}

/// The CPUs this process may run on (its affinity mask), in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most `size_of` bytes into
    // it and CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
        }
    }
    Vec::new()
}

/// Where the next test broker of this process starts on the CPU list; seeded from the pid,
/// so brokers of tests running side by side (one process per test under cargo-nextest)
/// start on different CPUs too.
static NEXT_CPU: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Gives a broker of `cores` executors (fewer than the CPUs this process may use) an
/// affinity mask of `cores` CPUs of its own, taken round-robin. The broker pins executor `i`
/// to the `i`-th CPU of its mask, so without this every test broker pinned its first core
/// to the host's first CPU, and tests running side by side all queued on that one CPU. With
/// as many cores as CPUs or more (or `cores = 0`: every CPU) the mask stays whole, and the
/// broker behaves as it would alone on the host; with one CPU it is the same CPU either way.
fn spread_over_cpus(cmd: &mut Command, cores: u16) {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::Ordering;
    let cpus = allowed_cpus();
    let cores = usize::from(cores);
    if cores == 0 || cores >= cpus.len() {
        return;
    }
    let _ = NEXT_CPU.compare_exchange(
        usize::MAX,
        std::process::id() as usize,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    let start = NEXT_CPU.fetch_add(cores, Ordering::SeqCst);
    // SAFETY: cpu_set_t is plain data; CPU_ZERO and CPU_SET only write into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for i in 0..cores {
            libc::CPU_SET(cpus[(start + i) % cpus.len()], &mut set);
        }
        set
    };
    // SAFETY: the hook runs in the child between fork and exec and only makes one system
    // call (sched_setaffinity, async-signal-safe) on a set built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The keys that set a broker's disk-use levels.
const DISK_LEVEL_KEYS: [&str; 3] = [
    "disk_clean_ratio",
    "disk_force_clean_ratio",
    "disk_refuse_ratio",
];

/// Disk-use levels for a test broker whose test sets none of its own. The default levels
/// (clean at 75%, refuse sends at 90% of `df`'s Use%) read the whole host's disk, which
/// the tests share with everything else on it: a host at 91% would make every send of a
/// crash test "disk full" and the test say nothing about crashes. Here sends are refused
/// only at 99.5% and, below that, by `disk_reserve_bytes` (64 MiB left free), the guard
/// that does not depend on what else the disk holds; the tests of the levels themselves
/// (disk_full.rs, consumer_progress.rs) set theirs.
const HOST_INDEPENDENT_DISK_LEVELS: &str =
    "disk_clean_ratio = 0.99\ndisk_force_clean_ratio = 0.99\ndisk_refuse_ratio = 0.995\n";

/// Runs Apache RocketMQ's own mqadmin (`MQAdminStartup` on the classpath `cp`, 4.9.8 or
/// 5.3.3) with `args` against the NameServer `ns`; whether it exited 0 without printing an
/// exception, and what it printed (bounded by the tool's own timeouts).
pub fn rocketmq_mqadmin(cp: &str, ns: &str, args: &[&str]) -> (bool, String) {
    rocketmq_mqadmin_in(cp, ns, &workspace_root().join("tests/rocketmq-tools"), args)
}

/// [`rocketmq_mqadmin`] signing every request as the user or account `(access key, secret
/// key)`: RocketMQ's mqadmin reads them from `$ROCKETMQ_HOME/conf/tools.yml`, written in a
/// fresh home in `dir` (with the tools' logback config beside it).
pub fn rocketmq_mqadmin_as(
    cp: &str,
    ns: &str,
    dir: &Path,
    (access_key, secret_key): (&str, &str),
    args: &[&str],
) -> (bool, String) {
    let home = dir.join(format!("mqadmin-home-{access_key}"));
    let conf = home.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("tools.yml"),
        format!("accessKey: {access_key}\nsecretKey: {secret_key}\n"),
    )
    .unwrap();
    let logback = workspace_root().join("tests/rocketmq-tools/conf/logback_tools.xml");
    std::fs::copy(logback, conf.join("logback_tools.xml")).unwrap();
    rocketmq_mqadmin_in(cp, ns, &home, args)
}

fn rocketmq_mqadmin_in(cp: &str, ns: &str, home: &Path, args: &[&str]) -> (bool, String) {
    // The tool runs through tests/rocketmq-tools/launcher (unchanged, minus the five idle
    // seconds its client's shutdown takes) where javac could compile the launcher.
    let (cp, main) = match mqadmin_launcher() {
        Some(dir) => (
            format!("{cp}:{}", dir.display()),
            "MqadminLauncher".to_string(),
        ),
        None => (
            cp.to_string(),
            "org.apache.rocketmq.tools.command.MQAdminStartup".to_string(),
        ),
    };
    // A run is short: the client compiler and the serial collector cost about half the CPU
    // of the JVM's defaults here.
    let out = Command::new("java")
        .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
        .arg("-cp")
        .arg(cp)
        .arg(main)
        .args(args)
        .args(["-n", ns])
        // consumerStatus writes each client's running info under `<now>/` in its working
        // directory: not in the source tree.
        .current_dir(std::env::temp_dir())
        .env("ROCKETMQ_HOME", home)
        .output()
        .expect("java runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("mqadmin {args:?}:\n{text}");
    (out.status.success() && !text.contains("Exception"), text)
}

/// The class directory of `tests/rocketmq-tools/launcher/MqadminLauncher.java`, compiled
/// with javac once per build directory and source text (the directory is named after a hash
/// of the source, so test processes running side by side never replace one another's), or
/// `None` where it cannot be compiled, and mqadmin then runs directly.
fn mqadmin_launcher() -> Option<PathBuf> {
    use std::hash::{Hash, Hasher};
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let src = workspace_root().join("tests/rocketmq-tools/launcher/MqadminLauncher.java");
        let text = std::fs::read(&src).ok()?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let base = profile_dir().unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("mqadmin-launcher-{:016x}", hasher.finish()));
        if dir.join("MqadminLauncher.class").exists() {
            return Some(dir);
        }
        let tmp = base.join(format!("mqadmin-launcher-tmp-{}", std::process::id()));
        let compiled = Command::new("javac")
            .arg("-d")
            .arg(&tmp)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if !compiled {
            eprintln!(
                "javac could not compile {}: mqadmin runs directly",
                src.display()
            );
            let _ = std::fs::remove_dir_all(&tmp);
            return None;
        }
        // Another test process may have put its copy in place first: either is the same.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        dir.join("MqadminLauncher.class").exists().then_some(dir)
    })
    .clone()
}

/// Runs mqadmin to completion (bounded by its own --timeout-ms where it has one).
pub fn mqadmin(namesrv: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("mqadmin"));
    cmd.args(["-n", namesrv]).args(args);
    cmd.stdin(Stdio::null());
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.wait_with_output().unwrap()
}

/// [`mqadmin`] acting as an ACL account (`--access-key`/`--secret-key`), or as nobody
/// whatever the environment says.
pub fn mqadmin_as(namesrv: &str, account: Option<(&str, &str)>, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("mqadmin"));
    cmd.args(["-n", namesrv]);
    if let Some((ak, sk)) = account {
        cmd.args(["--access-key", ak, "--secret-key", sk]);
    }
    cmd.args(args)
        .env_remove("CORVUS_ACCESS_KEY")
        .env_remove("CORVUS_SECRET_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap().wait_with_output().unwrap()
}

/// Writes the topic table a broker that had created `topics` (name, queues) would have
/// written into its data directory, so a broker started on it serves them all at once.
pub fn write_topic_table(data_dir: &Path, topics: impl IntoIterator<Item = (String, u32)>) {
    let rows: Vec<(String, u32, u32, u32)> = topics
        .into_iter()
        .map(|(name, queues)| (name, queues, queues, protocol::perm::READ_WRITE))
        .collect();
    let config = data_dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("topics.json"),
        serde_json::to_string(&rows).unwrap(),
    )
    .unwrap();
}

/// The resident memory of process `pid` now (VmRSS), in bytes.
pub fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Creates (or updates) `topic` with `queues` read and write queues through `mqadmin
/// update-topic`, failing the test with mqadmin's stderr if it fails.
pub fn create_topic(namesrv: &str, topic: &str, queues: u32) {
    let out = mqadmin(
        namesrv,
        &["update-topic", "-t", topic, "-q", &queues.to_string()],
    );
    assert!(
        out.status.success(),
        "update-topic {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_route(namesrv, topic);
}

/// Waits (bounded) until the NameServer routes `topic`: a broker registers a new topic
/// just after it answers its creation, and a client that looks the route up at once (the
/// C++ client does, once) would find none.
pub fn wait_for_route(namesrv: &str, topic: &str) {
    let Ok(admin) = client::Admin::new(namesrv) else {
        return;
    };
    let routed = wait_for(Duration::from_secs(10), || admin.topic_route(topic).ok());
    assert!(routed.is_some(), "the NameServer never routed {topic}");
}

/// The test brokers' own ACL account ([`AclRules::broker_toml`]): what they log in to
/// NameServers and controllers with, and what master and slave prove to each other.
pub const BROKER_CREDENTIALS: (&str, &str) = ("corvus-broker", "corvus-broker-secret");

/// A `plain_acl.yml` of a test's own, in a directory that lives as long as this does.
pub struct AclRules {
    pub file: PathBuf,
    _dir: tempfile::TempDir,
}

impl AclRules {
    pub fn write(rules: &str) -> AclRules {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain_acl.yml");
        std::fs::write(&file, rules).unwrap();
        AclRules { file, _dir: dir }
    }

    /// The broker keys that turn access control on with these rules, and the broker's own
    /// credentials ([`BROKER_CREDENTIALS`]), which a broker with access control on needs.
    pub fn broker_toml(&self) -> String {
        format!(
            "acl_enable = true\nacl_file = \"{}\"\nacl_access_key = \"{}\"\nacl_secret_key = \"{}\"\n",
            self.file.display(),
            BROKER_CREDENTIALS.0,
            BROKER_CREDENTIALS.1
        )
    }
}

/// `create_topic` as an account (`mqadmin --access-key --secret-key`), for a cluster that
/// checks access.
pub fn create_topic_as(namesrv: &str, account: (&str, &str), topic: &str, queues: u32) {
    let out = mqadmin_as(
        namesrv,
        Some(account),
        &["update-topic", "-t", topic, "-q", &queues.to_string()],
    );
    assert!(
        out.status.success(),
        "update-topic {topic} as {}: {}",
        account.0,
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_route(namesrv, topic);
}

/// Runs `mqadmin --json <args>` and returns what it printed, parsed; fails the test with
/// its stderr when it fails.
pub fn mqadmin_json(namesrv: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = mqadmin(namesrv, &all);
    assert!(
        out.status.success(),
        "mqadmin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every RocketMQ broker (core) address of the cluster behind NameServer `ns`, from
/// `cluster-list`'s core addresses.
pub fn core_addrs(ns: &str) -> Vec<String> {
    let v = mqadmin_json(ns, &["cluster-list"]);
    v["clusters"][0]["brokers"][0]["core_addrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// A child's output (its piped stdout), read on a thread of its own: each line as it comes,
/// echoed to the test's output with `echo` in front where given. The channel closes at the
/// output's end; the thread stops reading once the receiver is dropped.
pub fn output_lines(
    output: impl std::io::Read + Send + 'static,
    echo: Option<&str>,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let echo = echo.map(str::to_owned);
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if let Some(name) = &echo {
                println!("{name}: {line}");
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs a RocketMQ client program (`cmd`, its stdout taken here) to its end, at most `limit`
/// from its start: its exit status and output lines, each echoed with `name` in front. The
/// program is killed if the test gives up on it.
pub fn run_client_program(
    name: &str,
    cmd: &mut Command,
    limit: Duration,
) -> (std::process::ExitStatus, Vec<String>) {
    struct Program(Child);
    impl Drop for Program {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let started = Instant::now();
    let mut program = Program(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("the {name} program runs: {e}")),
    );
    let stdout = program.0.stdout.take().expect("piped");
    let rx = output_lines(stdout, Some(name));
    let deadline = started + limit;
    let mut lines: Vec<String> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the {name} program did not finish within {limit:?}; it said {lines:?}")
            }
        }
    }
    let status = loop {
        if let Some(s) = program.0.try_wait().expect("wait for the program") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the {name} program closed its output but did not exit; it said {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("the {name} program ran {:?}", started.elapsed());
    (status, lines)
}

/// A Java client program the test talks to while it runs (`java -cp <cp> <class> <args>`,
/// `ROCKETMQ_HOME` a temporary directory): its output lines as they come (see
/// [`output_lines`]; its stderr goes to the test's), and its stdin for the one line it waits
/// for. Killed when dropped, so a failed test leaves nothing running.
pub struct JavaProgram {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    stdin: Option<ChildStdin>,
}

impl JavaProgram {
    pub fn start(cp: &str, class: &str, args: &[&str], echo: Option<&str>) -> JavaProgram {
        let mut child = Command::new("java")
            .args(["-cp", cp, class])
            .args(args)
            .env("ROCKETMQ_HOME", std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("java runs");
        let lines = output_lines(child.stdout.take().expect("piped"), echo);
        let stdin = child.stdin.take();
        JavaProgram {
            child,
            lines,
            stdin,
        }
    }

    /// Writes `line` to the program's stdin and closes it: the go-ahead it waits for, given
    /// once.
    pub fn tell(&mut self, line: &str) {
        let mut stdin = self.stdin.take().expect("the program is told once");
        writeln!(stdin, "{line}").expect("the Java program reads its stdin");
    }
}

impl Drop for JavaProgram {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Over all of a broker's cores: the requests that hopped between cores, and the messages
/// stored.
pub fn hops_and_stored(ns: &str, broker: &str) -> (u64, u64) {
    let st = client::Admin::new(ns)
        .expect("an admin client")
        .broker_status(broker)
        .expect("the broker tells its status");
    let hops = st.cores.iter().map(|c| c.cross_core_hops).sum();
    let produced = st.cores.iter().map(|c| c.produced_messages).sum();
    (hops, produced)
}

/// Polls `f` until it returns Some or the timeout passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A temporary directory for tail rings: in /dev/shm (a tmpfs, as in production) where
/// there is one, else an ordinary one.
pub fn ring_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("corvus-test-rings-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// A NameServer and a broker in a temp dir, for most tests.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub namesrv: Proc,
    pub broker: Proc,
    pub opts: BrokerOpts,
}

impl Cluster {
    pub fn start(cores: u16, profile: &str) -> Cluster {
        Self::start_with(cores, profile, |_| {})
    }

    pub fn start_with(cores: u16, profile: &str, tweak: impl FnOnce(&mut BrokerOpts)) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let namesrv = start_namesrv(&logs);
        let mut opts = BrokerOpts::new(&namesrv.addr, &dir.path().join("data"));
        opts.cores = cores;
        opts.profile = profile.to_owned();
        tweak(&mut opts);
        let broker = start_broker(&opts, &logs);
        Cluster {
            dir,
            namesrv,
            broker,
            opts,
        }
    }

    /// A cluster of `cores` cores on the `small` profile whose broker serves metrics on a
    /// loopback port, and that port's `host:port`.
    pub fn start_metered(cores: u16) -> (Cluster, String) {
        Self::start_metered_with(cores, "127.0.0.1:0", |_| {})
    }

    /// As [`Cluster::start_metered`], the broker's metrics on `metrics_addr` (as
    /// `--metrics-addr` takes it: `host:port` or a bare port) and `tweak` applied.
    pub fn start_metered_with(
        cores: u16,
        metrics_addr: &str,
        tweak: impl FnOnce(&mut BrokerOpts),
    ) -> (Cluster, String) {
        let c = Self::start_with(cores, "small", |o| {
            o.extra
                .extend(["--metrics-addr".into(), metrics_addr.into()]);
            tweak(o);
        });
        let addr = metrics::addr(&c.broker, "broker metrics on ");
        (c, addr)
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// Starts the broker again on the same data directory; one still running is killed
    /// first (-9), since a data directory serves one broker at a time (`store.lock`).
    pub fn restart_broker(&mut self) {
        self.broker.kill9();
        let logs = self.logs();
        self.broker = start_broker(&self.opts, &logs);
    }
}

/// Reads every queue of `topic` from its minimum offset to its current maximum, in queue
/// order, and returns the messages (bounded by `timeout`).
pub fn drain_topic(
    consumer: &client::PullConsumer,
    topic: &str,
    timeout: Duration,
) -> Vec<client::MessageExt> {
    drain_topic_with(consumer, topic, "*", timeout)
}

pub fn drain_topic_with(
    consumer: &client::PullConsumer,
    topic: &str,
    tag_expression: &str,
    timeout: Duration,
) -> Vec<client::MessageExt> {
    let opts = client::PullOptions {
        tag_expression: tag_expression.to_owned(),
        ..Default::default()
    };
    drain_topic_opts(consumer, topic, &opts, timeout).unwrap()
}

/// [`drain_topic`] with pull options of the caller's (a SQL92 filter, say); the first pull
/// the broker refuses is the answer.
pub fn drain_topic_opts(
    consumer: &client::PullConsumer,
    topic: &str,
    opts: &client::PullOptions,
    timeout: Duration,
) -> client::Result<Vec<client::MessageExt>> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let queues = consumer.queues(topic).unwrap();
    for q in queues {
        let (min, max) = consumer.queue_offsets(&q).unwrap();
        let mut offset = min;
        while offset < max {
            assert!(
                Instant::now() < deadline,
                "draining {q} timed out at offset {offset:?} of {max:?}"
            );
            let r = consumer.pull(&q, offset, opts)?;
            assert!(r.next_offset >= offset, "offset went backwards on {q}");
            out.extend(r.messages);
            if r.next_offset == offset {
                break;
            }
            offset = r.next_offset;
        }
    }
    Ok(out)
}

/// The commit interval of a [`group_member`], in milliseconds.
pub const GROUP_COMMIT_MS: u64 = 100;
/// The queue lease of a [`group_member`], in milliseconds.
pub const GROUP_LEASE_MS: u64 = 1500;

/// A push consumer of `group` on every tag of `topic` from its first message, with short
/// heartbeat (200 ms), rebalance (1 s), commit, lease and suspend (500 ms) intervals, so
/// membership changes take a second, not minutes.
pub fn group_member(namesrv: &str, group: &str, topic: &str) -> client::PushConsumerBuilder {
    client::PushConsumer::builder()
        .namesrv(namesrv)
        .group(group)
        .subscribe(topic, "*")
        .consume_from(client::ConsumeFrom::First)
        .heartbeat_interval_ms(200)
        .rebalance_interval_ms(1000)
        .commit_interval_ms(GROUP_COMMIT_MS)
        .queue_lease_ms(GROUP_LEASE_MS)
        .suspend_timeout_ms(500)
}

/// A producer for tests: short timeouts, no compression unless asked.
pub fn producer(namesrv: &str) -> client::Producer {
    client::Producer::builder()
        .namesrv(namesrv)
        .group("test-producer")
        .send_timeout_ms(5000)
        .build()
        .unwrap()
}

/// A producer that does not retry (every refusal reaches the test), with a 10 s timeout.
pub fn producer_without_retries(namesrv: &str, group: &str) -> client::Producer {
    client::Producer::builder()
        .namesrv(namesrv)
        .group(group)
        .retries(0)
        .send_timeout_ms(10_000)
        .build()
        .unwrap()
}

/// Numbered sends to one topic, keeping every acknowledged body by message id, for
/// checking afterwards that each acknowledged message is served.
pub struct AckedSends {
    topic: String,
    next: usize,
    pub acked: std::collections::BTreeMap<String, Vec<u8>>,
}

impl AckedSends {
    pub fn new(topic: &str) -> AckedSends {
        AckedSends {
            topic: topic.to_owned(),
            next: 0,
            acked: Default::default(),
        }
    }

    /// A 3,000-byte body that compression leaves alone (pseudo-random letters), different
    /// per message.
    fn body(&self, i: usize) -> Vec<u8> {
        let mut b = format!("{}-{i}-", self.topic).into_bytes();
        let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        while b.len() < 3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(b'a' + (x % 26) as u8);
        }
        b
    }

    /// Sends the next body through `p`; an acknowledged one is remembered.
    pub fn send(
        &mut self,
        p: &client::Producer,
    ) -> Result<client::SendResult, client::ClientError> {
        let b = self.body(self.next);
        self.next += 1;
        let r = p.send(client::Message::new(&self.topic, b.clone()));
        if let Ok(sent) = &r {
            self.acked.insert(sent.msg_id.clone(), b);
        }
        r
    }

    /// Sends until one is refused and returns how many were tried and the refusal; panics
    /// if none is within 10,000 sends or 120 s (a storage shortage is met within a segment
    /// and the chunks in memory).
    pub fn send_until_refused(&mut self, p: &client::Producer) -> (u32, client::ClientError) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut tries = 0;
        loop {
            assert!(std::time::Instant::now() < deadline, "no send was refused");
            tries += 1;
            match self.send(p) {
                Ok(_) => assert!(tries < 10_000, "no send was refused in 10,000"),
                Err(e) => return (tries, e),
            }
        }
    }

    /// Panics unless `consumer` is served every acknowledged message, byte for byte, when
    /// it reads the topic from start to end (bounded by `timeout`).
    pub fn assert_served(&self, consumer: &client::PullConsumer, timeout: Duration) {
        let got: std::collections::BTreeMap<String, Vec<u8>> =
            drain_topic(consumer, &self.topic, timeout)
                .into_iter()
                .map(|m| (m.msg_id.clone(), m.body.to_vec()))
                .collect();
        for (id, body) in &self.acked {
            assert_eq!(
                got.get(id),
                Some(body),
                "acknowledged message {id} not served"
            );
        }
    }
}

/// One record for `topic` with `body` (and a fixed `UNIQ_KEY`), as a native send carries it.
pub fn one_record(topic: &str, body: &[u8]) -> Vec<u8> {
    let props = [("UNIQ_KEY", "0123456789ABCDEF0123456789ABCDEF")];
    let fields = message::MessageFields {
        topic,
        body,
        properties: &props,
        ..Default::default()
    };
    let mut out = Vec::new();
    message::encode_record(&fields, &mut out).unwrap();
    out
}

/// RocketMQ's UPDATE_AND_CREATE_TOPIC of `topic` (`queues` read and write queues, perm 6) with
/// the attribute change `attrs` (`+message.type=FIFO`, empty for none), sent to `addr`.
pub fn update_topic_with_attributes(
    addr: &str,
    topic: &str,
    queues: u32,
    attrs: &str,
) -> remoting::Frame {
    let q = queues.to_string();
    let mut cmd =
        remoting::RemotingCommand::request(remoting::codes::request::UPDATE_AND_CREATE_TOPIC, 7);
    for (k, v) in [
        ("topic", topic),
        ("defaultTopic", "TBW102"),
        ("readQueueNums", &q),
        ("writeQueueNums", &q),
        ("perm", "6"),
        ("topicFilterType", "SINGLE_TAG"),
        ("order", "false"),
        ("attributes", attrs),
    ] {
        cmd.ext_fields.insert(k.into(), v.into());
    }
    remoting_call(addr, &cmd, b"")
}

/// The value of attribute `key` of `topic` on the broker at `addr`, as RocketMQ's
/// GET_TOPIC_CONFIG answers it (`None`: no such attribute, or no such topic there).
pub fn topic_attribute(addr: &str, topic: &str, key: &str) -> Option<String> {
    let mut cmd = remoting::RemotingCommand::request(remoting::codes::request::GET_TOPIC_CONFIG, 1);
    cmd.ext_fields.insert("topic".into(), topic.into());
    let f = remoting_call(addr, &cmd, b"");
    if f.command.code != 0 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&f.body).ok()?;
    v["attributes"][key].as_str().map(str::to_owned)
}

/// A RocketMQ request of `code` with `fields` and no body, signed by `account` (access
/// key, secret key) as RocketMQ's AclClientRPCHook signs when one is given.
pub fn remoting_request(
    code: i32,
    fields: &[(&str, &str)],
    account: Option<(&str, &str)>,
) -> remoting::RemotingCommand {
    let mut cmd = remoting::RemotingCommand::request(code, 11);
    for (k, v) in fields {
        cmd.ext_fields.insert((*k).into(), (*v).into());
    }
    if let Some(account) = account {
        sign_remoting_command(&mut cmd, &[], account);
    }
    cmd
}

/// Signs `cmd`, to be sent with `body`, as `account` (access key, secret key), as RocketMQ's
/// AclClientRPCHook signs: the access key among the fields, then the signature of them all.
pub fn sign_remoting_command(
    cmd: &mut remoting::RemotingCommand,
    body: &[u8],
    (access_key, secret_key): (&str, &str),
) {
    cmd.ext_fields
        .insert(acl::sign::ACCESS_KEY.into(), access_key.into());
    let signature = acl::sign::sign_remoting(cmd.ext_fields.iter(), body, secret_key);
    cmd.ext_fields
        .insert(acl::sign::SIGNATURE.into(), signature);
}

/// One remoting request and its answer, on a connection of its own (read timeout 30 s).
pub fn remoting_call(addr: &str, cmd: &remoting::RemotingCommand, body: &[u8]) -> remoting::Frame {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    remoting_exchange(&mut conn, cmd, body)
}

/// One remoting request and its answer on `conn` (read timeout 30 s), for requests whose
/// connection matters (a heartbeat's member lives as long as it).
pub fn remoting_exchange(
    conn: &mut std::net::TcpStream,
    cmd: &remoting::RemotingCommand,
    body: &[u8],
) -> remoting::Frame {
    use std::io::{Read, Write};
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    conn.write_all(&remoting::encode(cmd, body).unwrap())
        .unwrap();
    let mut decoder = remoting::RemotingDecoder::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        // Requests the broker sends the client (NOTIFY_CONSUMER_IDS_CHANGED after a
        // heartbeat) are passed over: the answer is the response.
        if let Some(remoting::Decoded::Frame(f)) = decoder.decode(&mut buf).unwrap() {
            if f.command.is_response() && f.command.opaque == cmd.opaque {
                return f;
            }
            continue;
        }
        let n = match conn.read(&mut chunk) {
            // A signal to this thread (a glommio executor that ran on it, say): read again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.unwrap(),
        };
        assert!(n > 0, "the broker closed the connection without an answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends one raw request to `addr` over a fresh connection and returns the response.
pub fn raw_call(addr: &str, header: &protocol::Header, body: &[u8]) -> protocol::Frame {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    protocol::blocking::write_frame(&mut s, header, body).unwrap();
    let mut r = protocol::blocking::FrameReader::new(&s, 64 << 20);
    r.next_frame().unwrap().expect("a response")
}

/// A master (`broker-a`, id 0) and its slave (id 1), one core each, registered on one
/// NameServer, so routes list both; `toml` is given to both.
pub struct MasterSlave {
    pub dir: tempfile::TempDir,
    pub logs: PathBuf,
    pub ns: Proc,
    pub master: Proc,
    pub slave: Proc,
}

impl MasterSlave {
    pub fn start(toml: &str) -> MasterSlave {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let ns = start_namesrv(&logs);
        let mut mo = BrokerOpts::new(&ns.addr, &dir.path().join("master"));
        mo.name = "broker-a".into();
        mo.config_toml = Some(toml.to_owned());
        let master = start_broker(&mo, &logs);
        let ha = master
            .preamble_addr("broker replication on ")
            .expect("the master says where it replicates from");
        let mut so = BrokerOpts::new(&ns.addr, &dir.path().join("slave"));
        so.name = "broker-a".into();
        so.config_toml = Some(format!(
            "broker_role = \"SLAVE\"\nbroker_id = 1\nha_master_address = \"{ha}\"\n{toml}"
        ));
        let slave = start_broker(&so, &logs);
        MasterSlave {
            dir,
            logs,
            ns,
            master,
            slave,
        }
    }

    /// Messages `broker` has served to consumers, over all its cores.
    pub fn consumed(&self, broker: &Proc) -> u64 {
        client::Admin::new(&self.ns.addr)
            .unwrap()
            .broker_status(&broker.addr)
            .unwrap()
            .cores
            .iter()
            .map(|c| c.consumed_messages)
            .sum()
    }

    /// Waits (bounded) until the slave is in sync on every shard of the master.
    pub fn wait_in_sync(&self, timeout: Duration) {
        let in_sync = wait_for(timeout, || {
            let shards = replication_status(&self.ns.addr, &self.master.addr)?;
            all_shards_in_sync(&shards).then_some(())
        });
        assert!(
            in_sync.is_some(),
            "the slave is not in sync:\n{}",
            self.slave.stderr()
        );
    }
}

/// Each shard's replication state as `broker` reports it (the JSON of its status), or
/// `None` when the broker cannot be asked.
pub fn replication_status(ns: &str, broker: &str) -> Option<Vec<serde_json::Value>> {
    let st = client::Admin::new(ns).ok()?.broker_status(broker).ok()?;
    Some(
        st.cores
            .iter()
            .flat_map(|c| {
                serde_json::from_str::<Vec<serde_json::Value>>(&c.replication).unwrap_or_default()
            })
            .collect(),
    )
}

/// Whether every shard of a master's `replication_status` has a slave in its in-sync set.
pub fn all_shards_in_sync(shards: &[serde_json::Value]) -> bool {
    !shards.is_empty()
        && shards.iter().all(|s| {
            s["slaves"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x["in_sync"] == true))
        })
}

/// The sum of `group`'s offsets in `topic` in the broker's offsets files under `dir` (each
/// shard's `consumer_offsets.json`: rows of group, topic, queue, offset, epoch).
pub fn stored_offsets(dir: &Path, group: &str, topic: &str) -> u64 {
    let mut sum = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            sum += stored_offsets(&path, group, topic);
        } else if path
            .file_name()
            .is_some_and(|n| n == "consumer_offsets.json")
        {
            let rows: Vec<serde_json::Value> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            sum += rows
                .iter()
                .filter(|r| r[0] == group && r[1] == topic)
                .filter_map(|r| r[3].as_u64())
                .sum::<u64>();
        }
    }
    sum
}

/// The segment files of a shard's CommitLog directory, in log order (each is named by its
/// 20-digit start offset); none when the directory cannot be read.
pub fn segment_files(commitlog: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(commitlog)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().is_some_and(|n| n.len() == 20))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The ACL accounts the access-control tests share.
pub mod acl_accounts {
    /// An admin account.
    pub const ADMIN: (&str, &str) = ("admin0001", "admin-secret-1");
    /// `orders-app`: see [`RULES`].
    pub const APP: (&str, &str) = ("orders-app", "orders-secret-1");

    /// `orders-app` may publish and consume `Orders` as `orders-group`, only consume
    /// `Audit`, and nothing else; `local-tool` needs no signature from 127.0.0.1.
    pub const RULES: &str = r#"
accounts:
  - accessKey: admin0001
    secretKey: admin-secret-1
    admin: true
  - accessKey: orders-app
    secretKey: orders-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
      - Audit=SUB
    groupPerms:
      - orders-group=SUB
  - accessKey: local-tool
    secretKey: local-secret-1
    whiteRemoteAddress: 127.0.0.1
"#;
}
