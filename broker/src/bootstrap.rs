//! Start-up and shutdown: pre-flight checks, the data directory, listeners (socket2), one
//! glommio executor pinned per core, the mesh, the registration thread and signals.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use socket2::{Domain, Protocol, Socket, Type};

/// Longest a busy core runs tasks before it reaps its rings' completions. glommio reaps
/// them only when its run queue is empty or this timer fires; while connections that
/// pipeline thousands of requests keep the queue full, a socket that just became readable,
/// a new connection and a finished disk write would otherwise wait for glommio's default of
/// 100 ms, and a paced client beside such a flood waited seconds. 10 ms serves it as well
/// as 1 ms did (`bench/scripts/neighbours.sh`) at no measurable cost to batched sends
/// (1 ms cost them a few percent: each reap re-arms the timer and enters the rings).
const IO_REAP_INTERVAL_MAX: Duration = Duration::from_millis(10);

use broker_base::config::{BrokerConfig, FlushDiskType};
use broker_base::Shared;
use broker_core::core::Core;
use broker_core::lifecycle::CoreParts;
use broker_core::topics::TopicTable;
use broker_front::connections::Admission;
use broker_front::Front;
use broker_replication::controller_link::ControllerState;

/// A running broker: `wait` blocks until shutdown is requested and everything has stopped.
pub struct Running {
    pub shared: Arc<Shared>,
    pub listen_addr: SocketAddr,
    executors: Vec<glommio::ExecutorJoinHandle<()>>,
    /// Each core's id once its executor stopped, by return or by panic (see [`CoreEnded`]).
    ended: mpsc::Receiver<u16>,
    /// Cores whose end the start already took from `ended`.
    ended_cores: Vec<u16>,
    registry: Option<std::thread::JoinHandle<()>>,
    controller_link: Option<std::thread::JoinHandle<()>>,
    metrics_server: Option<telemetry::MetricsServer>,
    /// Held until the process ends: no second broker serves this data directory.
    _data_dir_lock: shard::DataDirLock,
}

impl Running {
    /// Where Prometheus metrics are served, if they are.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_server.as_ref().map(|m| m.local_addr())
    }

    pub fn request_shutdown(&self) {
        self.shared.request_shutdown();
    }

    /// Waits until every core stopped. A core that stops before a shutdown was asked for (a
    /// panic, say) stops the broker: a broker serving without one of its cores would leave
    /// that core's queues unserved while looking alive. Then the other cores get
    /// [`CORE_STOP_GRACE`] to stop cleanly; past it the broker returns without them (the
    /// process ends; what was acknowledged is recovered at the next start, as after a kill).
    pub fn wait(mut self) -> anyhow::Result<()> {
        let cores = self.executors.len();
        let mut failed = None;
        let mut ended = self.ended_cores.len();
        let mut deadline: Option<Instant> = None;
        while ended < cores {
            let next = match deadline {
                None => self.ended.recv().map_err(|_| ()),
                Some(d) => self
                    .ended
                    .recv_timeout(d.saturating_duration_since(Instant::now()))
                    .map_err(|_| ()),
            };
            let Ok(core) = next else {
                break;
            };
            ended += 1;
            if !self.shared.shutdown.load(Ordering::SeqCst) {
                tracing::error!(
                    core,
                    "core {core} stopped while the broker was serving: stopping the broker (restart it; what was acknowledged is recovered)"
                );
                failed = Some(anyhow!("core {core} stopped while the broker was serving"));
                self.shared.request_shutdown();
            }
            if failed.is_some() && deadline.is_none() {
                deadline = Some(Instant::now() + CORE_STOP_GRACE);
            }
        }
        if ended == cores {
            for h in self.executors.drain(..) {
                if let Err(e) = h.join() {
                    failed.get_or_insert_with(|| anyhow!("a core's executor failed: {e}"));
                }
            }
        } else {
            tracing::error!(
                "{} of {cores} cores did not stop within {CORE_STOP_GRACE:?}: leaving them",
                cores - ended
            );
        }
        self.shared.request_shutdown();
        if let Some(r) = self.registry.take() {
            let _ = r.join();
        }
        if let Some(c) = self.controller_link.take() {
            let _ = c.join();
        }
        if let Some(m) = self.metrics_server.take() {
            m.shutdown();
        }
        failed.map_or(Ok(()), Err)
    }
}

/// How long the other cores get to stop after one stopped unexpectedly.
const CORE_STOP_GRACE: Duration = Duration::from_secs(10);

/// How often the main thread looks at a start that is still going (and at the stop flag).
const START_POLL: Duration = Duration::from_millis(50);

/// Stops the cores of a start that cannot go on. The cores that already serve stop as at
/// any shutdown (they refuse sends from the flag on and close their shards) and get
/// [`CORE_STOP_GRACE`] to do it; a core still starting took no send, so the serving cores
/// do not wait for it, and neither does this: one stuck in its start is left behind, and
/// the process ends with the start's error.
fn abandon_start(running: &mut Running, steps: &crate::starting::StartSteps, cores: usize) {
    running.request_shutdown();
    let serving = steps.ready_cores();
    for _ in serving.len()..cores {
        running.shared.cores_drained.fetch_add(1, Ordering::SeqCst);
    }
    let deadline = Instant::now() + CORE_STOP_GRACE;
    let mut ended = vec![false; cores];
    for &c in &running.ended_cores {
        if let Some(e) = ended.get_mut(c as usize) {
            *e = true;
        }
    }
    while serving
        .iter()
        .any(|&c| !ended.get(c as usize).copied().unwrap_or(true))
        && ended.iter().any(|e| !e)
    {
        match running
            .ended
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(c) => {
                if let Some(e) = ended.get_mut(c as usize) {
                    *e = true;
                }
                running.ended_cores.push(c);
            }
            Err(_) => break,
        }
    }
    // Whoever ended by now is joined; a core still waiting for the mesh or its shards
    // notices the flag when it gets there (or never, if stuck), and the process ending
    // takes it.
    while let Ok(c) = running.ended.try_recv() {
        if let Some(e) = ended.get_mut(c as usize) {
            *e = true;
        }
        running.ended_cores.push(c);
    }
    if ended.iter().all(|&e| e) {
        for h in std::mem::take(&mut running.executors) {
            let _ = h.join();
        }
    } else {
        let left: Vec<String> = (0..cores)
            .filter(|&c| !ended[c])
            .map(|c| c.to_string())
            .collect();
        tracing::warn!(
            "leaving core(s) {} of the start behind: they had not started",
            left.join(", ")
        );
    }
}

/// Tells [`Running::wait`] that core `.0` stopped, when dropped: it lives in a thread local
/// of the core's executor thread, whose destructors run when the thread ends, by return or
/// by panic (a panic does not drop the executor's futures).
struct CoreEnded(u16, mpsc::Sender<u16>);

thread_local! {
    static CORE_ENDED: std::cell::RefCell<Option<CoreEnded>> = const { std::cell::RefCell::new(None) };
}

impl Drop for CoreEnded {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

/// Checks that io_uring can be used here, with a message that says what to change.
pub fn preflight(config: &BrokerConfig) -> anyhow::Result<()> {
    // Mappings the process needs besides ConsumeQueue files: libraries, thread stacks,
    // executors' io memory, IndexFiles, the allocator's arenas.
    const OTHER_MAPPINGS: u64 = 16_384;
    if let Some(max) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        if config.consume_queue_maps_max + OTHER_MAPPINGS > max {
            bail!(
                "consume_queue_maps_max = {} leaves too few of the kernel's {max} mappings per \
                 process (vm.max_map_count) for the rest of the broker ({OTHER_MAPPINGS}): lower \
                 it to at most {} or raise vm.max_map_count",
                config.consume_queue_maps_max,
                max.saturating_sub(OTHER_MAPPINGS)
            );
        }
    }
    if let Ok(v) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        if v.trim() != "0" {
            bail!(
                "io_uring is disabled on this host (sysctl kernel.io_uring_disabled = {}); \
                 the broker needs it: run `sysctl -w kernel.io_uring_disabled=0`",
                v.trim()
            );
        }
    }
    // Probe on a short-lived thread: an executor leaves per-thread state behind, and the
    // main thread must stay idle once the cores run.
    let io_memory = config.io_memory_bytes as usize;
    let probe = std::thread::spawn(move || {
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(io_memory)
            .make()
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .join()
    .unwrap_or_else(|_| Err("the probe thread panicked".to_owned()));
    if let Err(e) = probe {
        bail!(
            "cannot create an io_uring executor: {e}. The broker needs io_uring (Linux 5.8 or \
             newer, not blocked by a container's seccomp profile) and enough locked memory for \
             its rings: raise the memlock limit (`ulimit -l unlimited`, or LimitMEMLOCK=infinity \
             in the systemd unit) or lower io_memory_bytes (now {})",
            config.io_memory_bytes
        );
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask), in order; every CPU the host has
/// when the mask cannot be read. The bench and the test harness place their processes by it too.
pub fn allowed_cpus() -> Vec<usize> {
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
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (0..n).collect()
}

fn bind_listener(addr: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.set_nodelay(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s)
}

/// How long a fixed port found held at startup is tried again. The listeners of a broker
/// killed a moment ago outlive its process by milliseconds, longer on a loaded host (the
/// kernel tears its io_uring rings down after it), so a restart at once, systemd's
/// `Restart=` say, would otherwise fail on its own ports.
const HELD_PORT_WAIT: Duration = Duration::from_secs(10);
const HELD_PORT_RETRY: Duration = Duration::from_millis(20);

/// [`bind_listener`] on a port the config fixes: while the port is in use, tried again for up
/// to [`HELD_PORT_WAIT`], said once in the log. Port 0 is never in use.
fn bind_fixed(addr: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let mut deadline = None;
    loop {
        match bind_listener(addr, reuse_port) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && addr.port() != 0 => {
                let now = Instant::now();
                let until = *deadline.get_or_insert_with(|| {
                    tracing::warn!(
                        "port {addr} is still held (by a broker that stopped a moment ago?): trying again for up to {} s",
                        HELD_PORT_WAIT.as_secs()
                    );
                    now + HELD_PORT_WAIT
                });
                if now >= until {
                    return Err(e);
                }
                std::thread::sleep(HELD_PORT_RETRY);
            }
            other => {
                if other.is_ok() && deadline.is_some() {
                    tracing::info!("port {addr} was released: listening");
                }
                return other;
            }
        }
    }
}

/// The VIP channel's port beside `port`: RocketMQ's Java clients before 4.5.1 (and later ones
/// with `vipChannelEnabled`) send to the broker's port - 2.
fn vip_port(port: u16) -> Option<u16> {
    port.checked_sub(2).filter(|&p| p > 0)
}

/// The shared port's VIP listener, served by core 0. Not SO_REUSEPORT: bound to a port
/// chosen here, it must fail when another process holds it, not join that process's group.
fn bind_vip(listen: SocketAddr) -> anyhow::Result<Socket> {
    let port =
        vip_port(listen.port()).ok_or_else(|| anyhow!("port {} has no port - 2", listen.port()))?;
    let addr = SocketAddr::new(listen.ip(), port);
    bind_listener(addr, false).with_context(|| format!("cannot listen on {addr}"))
}

/// How many ephemeral ports a core tries for a direct port whose port - 2 is free too.
const VIP_PAIR_ATTEMPTS: usize = 32;

/// Core `core`'s direct listener and, with the VIP channel on, the listener of its VIP port.
/// With `direct_port_base` the direct port is `base + core` (`base + 3 * core` with the VIP
/// channel, so no core's port - 2 is another core's direct port); without, an ephemeral port
/// whose port - 2 is free. A VIP port that cannot be had is logged, not fatal: only clients
/// that use the VIP channel need it.
fn bind_direct(
    config: &BrokerConfig,
    ip: std::net::IpAddr,
    core: u16,
) -> anyhow::Result<(Socket, Option<Socket>)> {
    let direct = |port: u16| {
        let addr = SocketAddr::new(ip, port);
        bind_fixed(addr, false)
            .with_context(|| format!("cannot listen on {addr} (core {core}'s direct port)"))
    };
    let vip_of = |l: &Socket| -> anyhow::Result<Socket> {
        let port = local_addr(l)?.port();
        let vip = vip_port(port).ok_or_else(|| anyhow!("port {port} has no port - 2"))?;
        let addr = SocketAddr::new(ip, vip);
        bind_listener(addr, false).with_context(|| format!("cannot listen on {addr}"))
    };
    if !config.vip_channel {
        let port = match config.direct_port_base {
            0 => 0,
            base => base.saturating_add(core),
        };
        return Ok((direct(port)?, None));
    }
    if config.direct_port_base != 0 {
        let l = direct(
            config
                .direct_port_base
                .saturating_add(core.saturating_mul(3)),
        )?;
        return Ok(match vip_of(&l) {
            Ok(v) => (l, Some(v)),
            Err(e) => {
                tracing::warn!("core {core} has no VIP channel: {e:#}");
                (l, None)
            }
        });
    }
    let mut last_error = None;
    for _ in 0..VIP_PAIR_ATTEMPTS {
        let l = direct(0)?;
        match vip_of(&l) {
            Ok(v) => return Ok((l, Some(v))),
            Err(e) => last_error = Some(e),
        }
    }
    if let Some(e) = last_error {
        tracing::warn!("core {core} has no VIP channel after {VIP_PAIR_ATTEMPTS} ports: {e:#}");
    }
    Ok((direct(0)?, None))
}

/// Core `core`'s replication listener: `ha_listen_port + core`, or by default the client
/// port + 1 + core (10912 beside 10911), falling back to an ephemeral port when that one is
/// taken; ephemeral when the client port is.
fn bind_ha(
    config: &BrokerConfig,
    listen: SocketAddr,
    ip: std::net::IpAddr,
    core: u16,
) -> anyhow::Result<Socket> {
    let at = |port: u16| SocketAddr::new(ip, port);
    match (config.ha_listen_port, listen.port()) {
        (0, 0) => bind_listener(at(0), false).context("cannot bind a replication port"),
        (0, p) => {
            let want = at(p.saturating_add(1).saturating_add(core));
            match bind_listener(want, false) {
                Ok(l) => Ok(l),
                Err(e) => {
                    tracing::warn!(
                        core,
                        "replication port {want} is taken ({e}): using an ephemeral one; set ha_listen_port to choose"
                    );
                    bind_listener(at(0), false).context("cannot bind a replication port")
                }
            }
        }
        (base, _) => {
            let addr = at(base.saturating_add(core));
            bind_fixed(addr, false).with_context(|| {
                format!("cannot listen on {addr} (core {core}'s replication port, ha_listen_port)")
            })
        }
    }
}

fn local_addr(s: &Socket) -> std::io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("listener has no IP address"))
}

fn shard_config(
    config: &BrokerConfig,
    layout: &shard::DataDirLayout,
    shard: u16,
    store_host: SocketAddrV4,
) -> shard::ShardConfig {
    let mut c = shard::ShardConfig::new(layout.shard_dirs[shard as usize].clone(), shard);
    c.tail_ring = Some(shard::TailRingConfig {
        path: shard::TailRingConfig::path_in(&config.tail_ring_dir, layout.store_id, shard),
        ring_bytes: config.tail_ring_bytes,
    });
    c.unsynced_bytes_max = config.unsynced_bytes_max;
    c.busy_wait_ms = config.send_busy_wait_ms;
    c.store_host = store_host;
    c.segment_bytes = config.commit_log_segment_bytes;
    c.timer = config.timer_rules();
    c.write_chunk_bytes = config.write_chunk_bytes as usize;
    c.write_queue_depth = config.write_queue_depth as usize;
    c.hot_bytes_max = config.hot_bytes_max;
    c.warm_segments = config.warm_segments;
    c.flush = match config.flush_disk_type {
        FlushDiskType::Async => shard::FlushPolicy::Async {
            interval_ms: config.flush_interval_ms,
            dirty_bytes_max: config.flush_dirty_bytes_max,
        },
        FlushDiskType::Sync => shard::FlushPolicy::Sync,
    };
    c.message_bytes_max = config.message_bytes_max as usize;
    c.file_reserved_hours = config.file_reserved_hours;
    c.disk_clean_ratio = config.disk_clean_ratio;
    c.disk_force_clean_ratio = config.disk_force_clean_ratio;
    c.disk_refuse_ratio = config.disk_refuse_ratio;
    c.disk_reserve_bytes = config.disk_reserve_bytes;
    c.consume_queue_maps_max = consume_queue_maps_per_shard(config, layout.shard_dirs.len());
    c.retention_check_interval_ms = config.disk_check_interval_ms;
    c
}

/// Each shard's even share of `consume_queue_maps_max`.
fn consume_queue_maps_per_shard(config: &BrokerConfig, shards: usize) -> usize {
    (config.consume_queue_maps_max / shards.max(1) as u64).max(1) as usize
}

/// Chunk buffers each of a core's `shards` keeps in its pool: the core's io_uring buffer
/// memory divided among them, less what the shard's cold reads keep
/// (`shard::COLD_READ_BYTES_MAX`) and one chunk's worth for reads' small buffers. None
/// unless that covers the hot ring plus the chunks being written and filled
/// (`write_queue_depth` + 2): a pool smaller than the chunks in use would leave the rest to
/// the heap, trimmed ones included, which is the fragmentation it exists to avoid. Reads
/// left without room in that memory get heap buffers, which the kernel pins page by page
/// for every read.
fn chunk_pool(config: &BrokerConfig, shards: usize) -> usize {
    let chunk = config.write_chunk_bytes.max(1);
    let per_shard =
        (config.io_memory_bytes / shards.max(1) as u64).saturating_sub(shard::COLD_READ_BYTES_MAX);
    let pool = (per_shard / chunk).saturating_sub(1);
    let in_use = config.hot_bytes_max.div_ceil(chunk) + config.write_queue_depth + 2;
    if pool >= in_use {
        pool as usize
    } else {
        0
    }
}

/// At most one "accept failed" line per listener this often.
const ACCEPT_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Freed memory glibc keeps for reuse instead of returning it to the kernel.
pub const RETAINED_FREE_BYTES_MAX: i32 = 128 << 20;

/// Allocations at least this large get a mapping of their own from glibc, unmapped when
/// freed: twice the largest frame a connection reads on the heap (`conn.rs`'s
/// `LARGE_FRAME_BYTES`), so every batch a default client sends, its records and its chunk
/// stay on the heap, while the copies of a larger batch (the records of a 12 MB
/// SEND_BATCH_MESSAGE, the chunk buffer it needs) go back to the kernel once stored. At
/// 32 MiB they stayed on the per-thread heaps, freed among live allocations: after bursts of
/// 12 MB batches from 8 connections a 2-core broker kept 273 MiB more anonymous memory for
/// good (643 MiB before, 916 MiB after; `tests/tests/memory.rs`).
pub const OWN_MAPPING_BYTES_MIN: i32 = 8 << 20;

/// Makes glibc serve big buffers (request frames of large batches, chunk buffers) from its
/// heap and keep them there when freed. By default each allocation above 128 KiB is a fresh
/// mapping, unmapped when freed: with 1,000-message batches the page faults, zeroing and
/// unmapping of every frame cost the core more than the data itself (send throughput went
/// from 930K to 660K msg/s). [`RETAINED_FREE_BYTES_MAX`] bounds only the free memory kept at
/// the top of a heap: what is freed among live allocations stays resident until reused, so
/// what a connection may hold long (its read buffer, a frame over 4 MiB) lives in mappings
/// of its own instead (`conn.rs`), and so does anything of [`OWN_MAPPING_BYTES_MIN`] or
/// more.
fn keep_big_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES_MIN);
        libc::mallopt(libc::M_TRIM_THRESHOLD, RETAINED_FREE_BYTES_MAX);
    }
}

/// Starts every core and returns once all of them serve (or one failed to start).
pub fn start(config: BrokerConfig) -> anyhow::Result<Running> {
    start_until(config, &AtomicBool::new(false))
}

/// The start was given up because `stop` was set (a signal) before every core served.
#[derive(Debug)]
pub struct StoppedWhileStarting(pub String);

impl std::fmt::Display for StoppedWhileStarting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped while starting ({})", self.0)
    }
}

impl std::error::Error for StoppedWhileStarting {}

/// [`start`], given up (with [`StoppedWhileStarting`]) as soon as `stop` is set. Every core
/// reports its step of the start; a core that ends, stops running or overstays a step fails
/// the start with a line that names it and the step (`crate::starting`).
pub fn start_until(config: BrokerConfig, stop: &AtomicBool) -> anyhow::Result<Running> {
    config.validate()?;
    preflight(&config)?;
    if config.acl_enable && config.credentials().is_none() {
        // Only `acl_allow_no_broker_credentials` gets a broker here (validate refuses the
        // rest): say at start what it means, not only when a slave is refused.
        tracing::warn!(
            "acl_enable without acl_access_key / acl_secret_key \
             (acl_allow_no_broker_credentials): this broker refuses every slave and registers \
             with its NameServers without logging in"
        );
    }
    keep_big_allocations();
    let cpus = allowed_cpus();
    let cores = if config.cores == 0 {
        cpus.len() as u16
    } else {
        config.cores
    };
    // More executors than CPUs still works (they share CPUs, unpinned), so a config written
    // for a larger host starts on a small one; it is slower, and the log says so.
    let pinned = cores as usize <= cpus.len();
    if !pinned {
        tracing::warn!(
            cores,
            cpus = cpus.len(),
            "more cores requested than CPUs available: executors run unpinned and share CPUs"
        );
    }
    let data_dir_lock = shard::lock_data_dir(&config.data_dir)
        .with_context(|| format!("cannot lock data directory {}", config.data_dir.display()))?;
    let layout = shard::open_data_dir(&config.data_dir, cores)
        .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
    let topics = TopicTable::load(&config.data_dir)?;
    let sub_groups = broker_core::sub_groups::SubGroupTable::load(&config.data_dir)?;

    let listen = config.listen_addr()?;
    // Every core accepts on the shared port (SO_REUSEPORT spreads connections); each also
    // has a direct port that the route advertises, so clients reach a queue's owner at once.
    let mut main_listeners = Vec::with_capacity(cores as usize);
    // SO_REUSEPORT lets any process of the same user bind the port too, and the kernel would
    // then split the port's connections between the two: a second broker started on the
    // port must fail instead. A plain bind first finds out whether anyone holds it.
    if listen.port() != 0 {
        drop(bind_fixed(listen, false).with_context(|| {
            format!("cannot listen on {listen}: is another broker running there?")
        })?);
    }
    let first =
        bind_listener(listen, true).with_context(|| format!("cannot listen on {listen}"))?;
    let listen_addr = local_addr(&first)?;
    main_listeners.push(first);
    for _ in 1..cores {
        main_listeners.push(
            bind_listener(listen_addr, true)
                .with_context(|| format!("cannot listen on {listen_addr}"))?,
        );
    }
    // Each core's listeners: the shared port, its direct port, and with the VIP channel on
    // the VIP port of each (port - 2, where RocketMQ's Java clients before 4.5.1 send).
    let vip = config.vip_channel;
    let mut core_listeners: Vec<Vec<Socket>> =
        main_listeners.into_iter().map(|l| vec![l]).collect();
    if vip {
        match bind_vip(listen_addr) {
            Ok(v) => core_listeners[0].push(v),
            Err(e) => tracing::warn!(
                "no VIP channel beside the shared port {listen_addr}: {e:#} (old Java clients need `vipChannelEnabled=false`)"
            ),
        }
    }
    let advertise: SocketAddr = match &config.advertise_addr {
        Some(a) => a.parse().with_context(|| format!("advertise_addr `{a}`"))?,
        None if listen_addr.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], listen_addr.port()))
        }
        None => listen_addr,
    };
    if !advertise.is_ipv4() {
        bail!("advertise_addr must be an IPv4 address (IPv6 hosts are not supported in stored records yet)");
    }
    let mut core_addrs = Vec::with_capacity(cores as usize);
    for core in 0..cores {
        let (direct, vip_l) = bind_direct(&config, listen_addr.ip(), core)?;
        let bound = local_addr(&direct)?;
        core_addrs.push(SocketAddr::new(advertise.ip(), bound.port()).to_string());
        let ls = &mut core_listeners[core as usize];
        ls.push(direct);
        ls.extend(vip_l);
    }

    // Each core's replication port (a master streams its shards to slaves from there; a
    // slave's is bound too, for a later promotion, and refuses streams).
    let mut ha_listeners = Vec::with_capacity(cores as usize);
    let mut ha_addrs = Vec::with_capacity(cores as usize);
    for core in 0..cores {
        let l = bind_ha(&config, listen, listen_addr.ip(), core)?;
        ha_addrs.push(SocketAddr::new(advertise.ip(), local_addr(&l)?.port()).to_string());
        ha_listeners.push(l);
    }

    let tls = broker_base::tls::BrokerTls::from_config(&config).context("TLS")?;
    let controller = config
        .enable_controller_mode
        .then(|| Arc::new(ControllerState::new(layout.shard_count)));
    let auth = open_auth(&config)?;
    let shared = Shared::new(
        config,
        layout.shard_count,
        cores,
        advertise.to_string(),
        tls,
        topics.all(),
    )
    .with_auth(auth);
    *shared
        .core_addrs
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = core_addrs.clone();
    *shared
        .ha_addrs
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = ha_addrs;
    let shared = Arc::new(shared);

    let mesh_builder =
        broker_core::mesh::MeshLinks::new(cores as usize, shared.config.inbox_capacity as usize);
    // Every core's handle on the mesh is cloned here, before any executor runs: glommio's
    // builder counts its clones in an `Rc`, so a clone made on this thread while a core
    // thread drops its own would race on that count.
    let mut mesh_links: Vec<broker_core::mesh::MeshLinks> =
        (0..cores).map(|_| mesh_builder.clone()).collect();
    drop(mesh_builder);
    let steps = Arc::new(crate::starting::StartSteps::new(cores, Instant::now()));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<u16, String>>();
    let mut executors = Vec::with_capacity(cores as usize);
    let (ended_tx, ended_rx) = mpsc::channel::<u16>();
    let mut listeners_iter = core_listeners.into_iter();
    let mut ha_iter = ha_listeners.into_iter();
    for core in 0..cores {
        let (Some(listeners), Some(ha_listener)) = (listeners_iter.next(), ha_iter.next()) else {
            bail!("internal: listener count mismatch");
        };
        let listener_fds: Vec<RawFd> = listeners.into_iter().map(|l| l.into_raw_fd()).collect();
        let ha_fd = ha_listener.into_raw_fd();
        let core_shards: Vec<u16> = (0..layout.shard_count)
            .filter(|&s| protocol::shard_core(s, cores) == core)
            .collect();
        let pool = chunk_pool(&shared.config, core_shards.len());
        let shards: Vec<shard::ShardConfig> = core_shards
            .into_iter()
            .map(|s| {
                let mut c = shard_config(&shared.config, &layout, s, shared.store_host(core));
                c.chunk_pool = pool;
                // The shards stamp and age records by the broker's clock.
                c.clock = shared.clock.clone();
                let hist = shared.metrics.flush_latency(core);
                c.flush_observer = Some(shard::FlushObserver::new(move |d| {
                    hist.observe(d.as_secs_f64())
                }));
                c
            })
            .collect();
        let shared = shared.clone();
        let Some(mesh_builder) = mesh_links.pop() else {
            bail!("internal: mesh link count mismatch");
        };
        let steps = steps.clone();
        let controller = controller.clone();
        let topics = topics.clone();
        let sub_groups = (core == 0).then(|| sub_groups.clone());
        let ready = ready_tx.clone();
        let placement = match cpus.get(core as usize) {
            Some(&cpu) if pinned => Placement::Fixed(cpu),
            _ => Placement::Unbound,
        };
        let builder = LocalExecutorBuilder::new(placement)
            .name(&format!("core-{core}"))
            .io_memory(shared.config.io_memory_bytes as usize)
            .preempt_timer(IO_REAP_INTERVAL_MAX);
        let ended = ended_tx.clone();
        let h = builder
            .spawn(move || {
                // Dropped when the executor's thread ends, by return or by panic.
                CORE_ENDED.with(|e| *e.borrow_mut() = Some(CoreEnded(core, ended)));
                async move {
                    // First, before anything can wait: see `starting::PARK_GUARD_INTERVAL`.
                    glommio::spawn_local(crate::starting::park_guard(steps.alive(core))).detach();
                    // Polling while idle pays only on a CPU of its own: on a shared one it
                    // takes the CPU from the very threads that would bring the work.
                    if pinned && shared.config.idle_poll_us > 0 {
                        glommio::spawn_local(broker_base::idle_poll::poll_when_idle(
                            Duration::from_micros(shared.config.idle_poll_us),
                            shared.config.idle_poll_load_max_pct as u32,
                        ))
                        .detach();
                    }
                    let result = core_main(
                        core,
                        shared,
                        controller,
                        shards,
                        mesh_builder,
                        listener_fds,
                        ha_fd,
                        topics,
                        sub_groups,
                        steps,
                        ready.clone(),
                    )
                    .await;
                    if let Err(e) = result {
                        let _ = ready.send(Err(format!("core {core}: {e:#}")));
                    }
                }
            })
            .map_err(|e| anyhow!("cannot start the executor of core {core}: {e}"))?;
        executors.push(h);
    }
    drop(ready_tx);

    let mut running = Running {
        shared: shared.clone(),
        listen_addr,
        executors,
        ended: ended_rx,
        ended_cores: Vec::new(),
        registry: None,
        controller_link: None,
        metrics_server: None,
        _data_dir_lock: data_dir_lock,
    };
    let mut ready = 0;
    let mut next_report = Instant::now() + crate::starting::START_REPORT_INTERVAL;
    while ready < cores {
        if stop.load(Ordering::SeqCst) {
            let doing = steps.report(Instant::now()).unwrap_or_default();
            tracing::info!("stopping while starting: {doing}");
            abandon_start(&mut running, &steps, cores as usize);
            return Err(StoppedWhileStarting(doing).into());
        }
        match ready_rx.recv_timeout(START_POLL) {
            Ok(Ok(_)) => ready += 1,
            Ok(Err(e)) => {
                abandon_start(&mut running, &steps, cores as usize);
                bail!("{e}");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                abandon_start(&mut running, &steps, cores as usize);
                bail!("the cores did not start");
            }
        }
        while let Ok(core) = running.ended.try_recv() {
            steps.ended(core);
            running.ended_cores.push(core);
        }
        let now = Instant::now();
        if let Err(failure) = steps.verdict(now) {
            tracing::error!("the broker cannot start: {failure}");
            abandon_start(&mut running, &steps, cores as usize);
            bail!("{failure}");
        }
        if now >= next_report {
            if let Some(doing) = steps.report(now) {
                tracing::info!("still starting: {doing}");
            }
            next_report = now + crate::starting::START_REPORT_INTERVAL;
        }
    }
    // Register only once every core serves: the listeners are bound before the shards
    // recover, and a client routed here during a long recovery would sit in the accept
    // backlog until its requests time out.
    if let Some(state) = &controller {
        match broker_replication::controller_link::spawn(shared.clone(), state.clone()) {
            Ok(h) => running.controller_link = Some(h),
            Err(e) => {
                running.request_shutdown();
                for h in std::mem::take(&mut running.executors) {
                    let _ = h.join();
                }
                bail!("cannot start the controller heartbeat thread: {e}");
            }
        }
    }
    match broker_front::registry::spawn(shared.clone(), controller.clone()) {
        Ok(r) => running.registry = Some(r),
        Err(e) => {
            running.request_shutdown();
            for h in std::mem::take(&mut running.executors) {
                let _ = h.join();
            }
            bail!("cannot start the registration thread: {e}");
        }
    }
    // Serve routes before saying we are up: wait (bounded) for the first registration, so a
    // client that starts right after the ready line finds this broker's topics.
    if !shared.config.namesrv_list().is_empty() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while shared.registered_version.load(Ordering::SeqCst) < 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    if let Some(addr) = &shared.config.metrics_addr {
        let addr: SocketAddr =
            telemetry::listen_addr(addr).map_err(|e| anyhow::anyhow!("metrics_addr {e}"))?;
        let metrics = shared.metrics.clone();
        let token = shared.config.metrics_token.clone();
        match telemetry::serve(addr, Arc::new(move || metrics.render()), token) {
            Ok(m) => running.metrics_server = Some(m),
            Err(e) => {
                running.request_shutdown();
                bail!("metrics_addr {addr}: cannot listen: {e}");
            }
        }
    }
    Ok(running)
}

#[allow(clippy::too_many_arguments)]
async fn core_main(
    id: u16,
    shared: Arc<Shared>,
    controller: Option<Arc<ControllerState>>,
    shard_configs: Vec<shard::ShardConfig>,
    mesh_builder: broker_core::mesh::MeshLinks,
    listener_fds: Vec<RawFd>,
    ha_fd: RawFd,
    topics: TopicTable,
    sub_groups: Option<broker_core::sub_groups::SubGroupTable>,
    steps: Arc<crate::starting::StartSteps>,
    ready: mpsc::Sender<Result<u16, String>>,
) -> anyhow::Result<()> {
    use crate::starting::StartStep;
    let listeners: Vec<TcpListener> = listener_fds
        .into_iter()
        // SAFETY: every descriptor is a listening TCP socket created by `start` and handed to
        // this core alone (into_raw_fd gave up its ownership there).
        .map(|fd| unsafe { TcpListener::from_raw_fd(fd) })
        .collect();
    // SAFETY: as above: the replication listener `start` made for this core alone.
    let ha_listener = unsafe { TcpListener::from_raw_fd(ha_fd) };
    // Join the mesh before anything can fail, so no peer waits for this core forever.
    steps.enter(id, StartStep::JoiningMesh);
    // Fault injection for the tests (debug builds only): the core named by
    // CORVUS_DEBUG_START_STALL_CORE never joins the mesh, so the start cannot finish; it
    // waits for the stop, as a stuck core would not.
    #[cfg(debug_assertions)]
    if std::env::var("CORVUS_DEBUG_START_STALL_CORE").ok() == Some(id.to_string()) {
        while !shared.shutdown.load(Ordering::SeqCst) {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        bail!("CORVUS_DEBUG_START_STALL_CORE: core {id} stalled its start on purpose");
    }
    let (mesh, receivers) = mesh_builder.join(id).await.map_err(|e| anyhow!(e))?;
    let mesh = Rc::new(mesh);

    let mut shards = HashMap::new();
    let mut offsets = HashMap::new();
    let mut open_error = None;
    for cfg in shard_configs {
        let sid = cfg.shard_id;
        steps.enter(id, StartStep::OpeningShard(sid));
        match broker_core::lifecycle::open_shard(cfg).await {
            Ok((shard, table)) => {
                shards.insert(sid, shard);
                offsets.insert(sid, table);
            }
            Err(e) => {
                open_error = Some(anyhow!(e));
                break;
            }
        }
    }
    steps.enter(id, StartStep::StartingTasks);
    let ha = match broker_replication::CoreHa::new(&shared.config, &shards, controller) {
        Ok(ha) => ha,
        Err(e) => {
            open_error.get_or_insert(anyhow!("cannot start replication: {e}"));
            broker_replication::CoreHa::default()
        }
    };
    let acl = match broker_front::access::Gate::open(
        &shared.config,
        shared.replay_guard.clone(),
        shared.auth.clone(),
    ) {
        Ok(g) => g,
        Err(e) => {
            // The core does not serve: a broker told to check access never runs without it.
            open_error.get_or_insert(anyhow!("cannot start access control: {e}"));
            broker_front::access::Gate::default()
        }
    };
    let core = Core::new(CoreParts {
        id,
        shared: shared.clone(),
        shards,
        offsets,
        mesh,
        topics,
        sub_groups,
        ha,
    });
    let front = Front::new(core.clone(), acl);
    core.serve_mesh(receivers);
    if let Some(e) = open_error {
        // Took no sends: the other cores must not wait for this one at shutdown.
        shared.cores_drained.fetch_add(1, Ordering::SeqCst);
        return Err(e);
    }
    // Before the first send: the keys of the sends stored within the window (a retry of
    // one is answered with its original). Every core serves the mesh by now.
    core.rebuild_dedup_at_start().await;

    let mut accept_tasks = Vec::new();
    for listener in listeners {
        let front = front.clone();
        accept_tasks.push(glommio::spawn_local(async move {
            // Failures (EMFILE while descriptors are short, say) are logged once per
            // ACCEPT_FAILURE_LOG_INTERVAL with how many there were, not once per retry:
            // 4,759 lines in 25 s buried everything else in the log.
            let mut failures = 0u64;
            let mut logged: Option<std::time::Instant> = None;
            loop {
                match listener.accept().await {
                    Ok(stream) => {
                        // Past the core's share the connection is closed at once: the
                        // descriptors it would hold belong to the storage and the clients
                        // already served.
                        use std::os::fd::AsRawFd;
                        let peer = stream.peer_addr().map_or(
                            std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                            |a| a.ip(),
                        );
                        let refusal = match front
                            .connections
                            .admit(stream.as_raw_fd() as u64, peer)
                        {
                            Admission::Admitted => None,
                            Admission::Refused => {
                                drop(stream);
                                continue;
                            }
                            Admission::Answer(e) => {
                                front
                                    .shared
                                    .metrics
                                    .count_quota_refusal("connections_per_peer_max");
                                Some(e)
                            }
                        };
                        // It starts in the light lane, where a new connection belongs.
                        let served = broker_front::conn::serve_connection(
                            front.clone(),
                            stream,
                            refusal,
                        );
                        if let Some(task) =
                            front.lanes.spawn(broker_front::lanes::Lane::Light, served)
                        {
                            task.detach();
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        if logged.is_none_or(|t| t.elapsed() >= ACCEPT_FAILURE_LOG_INTERVAL) {
                            tracing::warn!(
                                failures,
                                "accept failed: {e} ({failures} failure(s) since the last such line)"
                            );
                            failures = 0;
                            logged = Some(std::time::Instant::now());
                        }
                        glommio::timer::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    let ha_tasks = broker_replication::spawn(&core.as_host(), ha_listener);
    if front.acl.enabled() {
        let front = front.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(broker_front::access::POLL_INTERVAL).await;
                front.acl.poll(front.id == 0);
            }
        })
        .detach();
    }
    let core_tasks = core.spawn_tasks();
    steps.enter(id, StartStep::Ready);
    let _ = ready.send(Ok(id));
    // Fault injection for the tests (debug builds only): the core named by
    // CORVUS_DEBUG_PANIC_CORE panics half a second after it serves.
    #[cfg(debug_assertions)]
    if std::env::var("CORVUS_DEBUG_PANIC_CORE").ok() == Some(id.to_string()) {
        glommio::spawn_local(async move {
            glommio::timer::sleep(Duration::from_millis(500)).await;
            panic!("CORVUS_DEBUG_PANIC_CORE: core {id} panics on purpose");
        })
        .detach();
    }

    // Until shutdown: publish this core's counters to the metrics once a second. This tick
    // only starts the stop (`Core::stop`): sends are refused from the moment the flag is set,
    // by `Core::send`, so nothing is acknowledged between the signal and the flush.
    let mut last = protocol::CoreStatus {
        core: id,
        ..Default::default()
    };
    let mut ticks = 0u32;
    let mut replication_seen = Vec::new();
    let mut large_sends_seen = 0u64;
    while !shared.shutdown.load(Ordering::SeqCst) {
        glommio::timer::sleep(Duration::from_millis(50)).await;
        ticks += 1;
        if ticks.is_multiple_of(20) {
            let now = core.local_status();
            core.stats
                .put_tps
                .set(now.produced_messages.saturating_sub(last.produced_messages) as f64);
            core.stats
                .get_tps
                .set(now.consumed_messages.saturating_sub(last.consumed_messages) as f64);
            shared
                .metrics
                .publish(&now, &last, shared.uptime().as_secs_f64());
            core.publish_rocketmq(now.durable_lag_bytes).await;
            last = now;
            core.publish_backlogs();
            core.publish_replication(&mut replication_seen);
            core.sample_broker_stats();
            if id == 0 {
                broker_base::heap::give_back_heap(&mut large_sends_seen).await;
            }
        }
    }
    core.stop(
        accept_tasks.into_iter().chain(core_tasks).collect(),
        ha_tasks,
    )
    .await;
    drop(front);
    Ok(())
}

/// ACL 2.0's users and ACLs from `<data_dir>/config/auth.json`, with `acl2_init_user`
/// created (a super user, whatever its `userType` says, as RocketMQ makes it) and, with
/// `acl2_migrate_from_v1`, `acl_file`'s accounts carried over, when they are not users
/// already.
fn open_auth(config: &BrokerConfig) -> anyhow::Result<broker_base::auth::AuthStore> {
    use acl::v2::{User, UserInfo, UserType};
    let store = broker_base::auth::AuthStore::open(&config.data_dir).context("ACL 2.0")?;
    if let Some(text) = &config.acl2_init_user {
        let info: UserInfo = serde_json::from_str(text)
            .context("acl2_init_user (initAuthenticationUser) is not UserInfo JSON")?;
        let mut user = User::from_info(&info)
            .map_err(|e| anyhow!("acl2_init_user (initAuthenticationUser): {e}"))?;
        user.user_type = UserType::Super;
        let name = user.username.clone();
        if store.snapshot().user(&name).is_none() {
            store
                .change(|m| m.create_user(user))
                .context("acl2_init_user")?;
            tracing::info!(target: "audit", user = %name, "ACL 2.0: created the initial user");
        }
    }
    if config.acl2_migrate_from_v1 {
        let v1 = acl::AclConfig::load(&config.acl_file).context("acl2_migrate_from_v1")?;
        let added = store
            .change(|m| Ok(m.migrate_v1(&v1)))
            .context("acl2_migrate_from_v1")?;
        if !added.is_empty() {
            tracing::info!(
                target: "audit",
                users = %added.join(","),
                "ACL 2.0: migrated plain_acl.yml accounts to users"
            );
        }
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;

    #[test]
    fn only_the_throughput_profile_gets_a_chunk_pool() -> Result<(), ConfigError> {
        // 384 MiB, less 64 MiB for cold reads, of 4 MiB chunks, less one for reads' small
        // buffers: it covers the 64 hot chunks + 6.
        let throughput = BrokerConfig::from_profile("throughput")?;
        assert_eq!(chunk_pool(&throughput, 1), 79);
        // What the pool holds past the hot ring and the chunk being filled may wait for the
        // disk (the shard's unwritten bound for small appends): 14 chunks, 56 MiB; large
        // ones are held at 16 MiB.
        let mut shard = shard::ShardConfig::new(std::path::PathBuf::new(), 0);
        shard.write_chunk_bytes = throughput.write_chunk_bytes as usize;
        shard.hot_bytes_max = throughput.hot_bytes_max;
        shard.chunk_pool = chunk_pool(&throughput, 1);
        assert_eq!(shard.unwritten_bytes_max(true), 56 << 20);
        assert_eq!(shard.unwritten_bytes_max(false), 16 << 20);
        shard.chunk_pool = 0;
        assert_eq!(shard.unwritten_bytes_max(true), 16 << 20);
        // Split between two shards on a core, 39 each no longer covers a hot ring each.
        assert_eq!(chunk_pool(&throughput, 2), 0);
        for name in ["latency", "durable", "small"] {
            assert_eq!(
                chunk_pool(&BrokerConfig::from_profile(name)?, 1),
                0,
                "{name}"
            );
        }
        assert_eq!(chunk_pool(&BrokerConfig::default(), 1), 0);
        Ok(())
    }
}
