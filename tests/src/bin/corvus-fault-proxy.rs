//! A TCP relay with faults set while it runs, for the fault tests (`tc netem` is missing on
//! the test machines, so delay and jitter come from here).
//!
//! `corvus-fault-proxy --route LISTEN=UPSTREAM [--route ...] [--seed N]` accepts on every
//! LISTEN and relays each connection to its UPSTREAM. It prints `proxy ready <LISTEN>...`
//! once it listens, then reads commands on stdin, one a line, and answers each with one
//! line, `ok ...` or `err ...`:
//!
//! * `pass`: no fault (clears delay, bandwidth, blackhole and freeze);
//! * `delay <up|down|both> <ms> <jitter_ms>`: hold every chunk `ms` plus up to `jitter_ms`
//!   more; bytes keep their order (a chunk never leaves before the one read before it);
//! * `bandwidth <up|down|both> <bytes_per_s>`: cap the rate (0 = no cap);
//! * `blackhole`: accept and read everything, forward nothing;
//! * `freeze`: stop reading (the senders' windows fill up);
//! * `reset`: close every open connection with a reset;
//! * `stats`: `ok connections=<open> accepted=<n> up=<bytes> down=<bytes>`.
//!
//! "up" is client to upstream, "down" upstream to client. Each direction of a connection
//! buffers at most [`QUEUE_CHUNKS`] chunks of [`CHUNK_BYTES`]; a full queue stops the
//! reading, so a slow direction pushes back on its sender instead of growing.

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};

const CHUNK_BYTES: usize = 16 * 1024;
const QUEUE_CHUNKS: usize = 64;
/// How often a frozen or idle pump looks at the fault settings again.
const POLL: Duration = Duration::from_millis(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct DirFaults {
    delay_ms: u64,
    jitter_ms: u64,
    /// 0 = no cap.
    bytes_per_s: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Mode {
    #[default]
    Pass,
    Blackhole,
    Freeze,
}

#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    mode: Mode,
    up: DirFaults,
    down: DirFaults,
}

impl Faults {
    fn dir_mut(&mut self, d: Dir) -> &mut DirFaults {
        match d {
            Dir::Up => &mut self.up,
            Dir::Down => &mut self.down,
        }
    }
}

/// Bytes read, and when they may be written on.
type Chunk = (Instant, Vec<u8>);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Dir {
    Up,
    Down,
}

struct Shared {
    faults: RwLock<Faults>,
    conns: Mutex<Vec<Conn>>,
    accepted: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    seed: u64,
}

/// One relayed connection: clones of its two sockets, to reset them.
struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    closed: Arc<AtomicBool>,
}

impl Shared {
    fn faults(&self) -> Faults {
        *self.faults.read().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self, d: Dir) -> DirFaults {
        let f = self.faults();
        match d {
            Dir::Up => f.up,
            Dir::Down => f.down,
        }
    }
}

fn main() -> Result<()> {
    let mut routes: Vec<(String, String)> = Vec::new();
    let mut seed: u64 = 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--route" => {
                let r = args.next().context("--route needs LISTEN=UPSTREAM")?;
                let (l, u) = r
                    .split_once('=')
                    .with_context(|| format!("--route {r}: not LISTEN=UPSTREAM"))?;
                routes.push((l.to_owned(), u.to_owned()));
            }
            "--seed" => {
                seed = args
                    .next()
                    .context("--seed needs a number")?
                    .parse()
                    .context("--seed needs a number")?;
            }
            other => {
                bail!("unknown argument {other} (usage: --route LISTEN=UPSTREAM ... [--seed N])")
            }
        }
    }
    if routes.is_empty() {
        bail!("at least one --route LISTEN=UPSTREAM");
    }
    let shared = Arc::new(Shared {
        faults: RwLock::new(Faults::default()),
        conns: Mutex::new(Vec::new()),
        accepted: AtomicU64::new(0),
        bytes_up: AtomicU64::new(0),
        bytes_down: AtomicU64::new(0),
        seed,
    });
    let mut bound = Vec::new();
    for (listen, upstream) in routes {
        let l = TcpListener::bind(&listen).with_context(|| format!("listen on {listen}"))?;
        let local = l.local_addr()?;
        let up: SocketAddr = upstream
            .parse()
            .with_context(|| format!("upstream {upstream} is not ip:port"))?;
        bound.push(local.to_string());
        let shared = shared.clone();
        std::thread::spawn(move || accept_loop(l, up, shared));
    }
    println!("proxy ready {}", bound.join(" "));
    std::io::stdout().flush()?;
    control(&shared)
}

fn accept_loop(l: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut n: u64 = 0;
    for incoming in l.incoming() {
        let Ok(client) = incoming else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        n += 1;
        let shared = shared.clone();
        let conn_seed = shared.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        std::thread::spawn(move || {
            if let Err(e) = relay(client, upstream, &shared, conn_seed) {
                eprintln!("proxy: connection to {upstream}: {e:#}");
            }
        });
    }
}

/// Relays one connection until either side closes (or a reset).
fn relay(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>, seed: u64) -> Result<()> {
    if shared.faults().mode == Mode::Blackhole {
        // Accept and swallow: the client's bytes go nowhere, nothing comes back.
        let mut c = client;
        let mut buf = vec![0u8; CHUNK_BYTES];
        while c.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
        return Ok(());
    }
    let up = TcpStream::connect_timeout(&upstream, CONNECT_TIMEOUT)
        .with_context(|| format!("connect to {upstream}"))?;
    let _ = client.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let closed = Arc::new(AtomicBool::new(false));
    shared
        .conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Conn {
            client: client.try_clone()?,
            upstream: up.try_clone()?,
            closed: closed.clone(),
        });
    let pumps = [
        (client.try_clone()?, up.try_clone()?, Dir::Up, seed),
        (
            up.try_clone()?,
            client.try_clone()?,
            Dir::Down,
            seed.rotate_left(17),
        ),
    ];
    let mut handles = Vec::new();
    for (from, to, dir, s) in pumps {
        let shared = shared.clone();
        let closed = closed.clone();
        handles.push(std::thread::spawn(move || {
            pump(from, to, dir, &shared, &closed, s)
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    closed.store(true, Ordering::SeqCst);
    let _ = client.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
    shared
        .conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|c| !c.closed.load(Ordering::SeqCst));
    Ok(())
}

/// One direction: a reader thread (this one) timestamps chunks into a bounded queue; a
/// writer thread releases each at its time, in order, within the rate.
fn pump(
    mut from: TcpStream,
    to: TcpStream,
    dir: Dir,
    shared: &Arc<Shared>,
    closed: &Arc<AtomicBool>,
    seed: u64,
) {
    let (tx, rx): (SyncSender<Chunk>, Receiver<Chunk>) = sync_channel(QUEUE_CHUNKS);
    let writer = {
        let shared = shared.clone();
        let closed = closed.clone();
        std::thread::spawn(move || write_side(to, rx, dir, &shared, &closed))
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let _ = from.set_read_timeout(Some(POLL * 10));
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut last_release = Instant::now();
    while !closed.load(Ordering::SeqCst) {
        let f = shared.faults();
        if f.mode == Mode::Freeze {
            std::thread::sleep(POLL);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(_) => break,
        };
        let counter = match dir {
            Dir::Up => &shared.bytes_up,
            Dir::Down => &shared.bytes_down,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if shared.faults().mode == Mode::Blackhole {
            continue;
        }
        let d = shared.dir(dir);
        let jitter = if d.jitter_ms > 0 {
            rng.gen_range(0..=d.jitter_ms)
        } else {
            0
        };
        // Never before the chunk read before it: jitter must not reorder bytes.
        let release =
            (Instant::now() + Duration::from_millis(d.delay_ms + jitter)).max(last_release);
        last_release = release;
        if tx.send((release, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
    closed.store(true, Ordering::SeqCst);
    let _ = from.shutdown(Shutdown::Both);
}

fn write_side(
    mut to: TcpStream,
    rx: Receiver<Chunk>,
    dir: Dir,
    shared: &Arc<Shared>,
    closed: &Arc<AtomicBool>,
) {
    loop {
        let (release, chunk) = match rx.recv_timeout(POLL * 10) {
            Ok(c) => c,
            Err(RecvTimeoutError::Timeout) => {
                if closed.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let now = Instant::now();
        if release > now {
            std::thread::sleep(release - now);
        }
        // Write in slices so a rate cap is smooth.
        for slice in chunk.chunks(4096) {
            while shared.faults().mode == Mode::Freeze && !closed.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
            }
            if to.write_all(slice).is_err() {
                closed.store(true, Ordering::SeqCst);
                return;
            }
            let rate = shared.dir(dir).bytes_per_s;
            if let Some(us) = (slice.len() as u64 * 1_000_000).checked_div(rate) {
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn reset_all(shared: &Shared) -> usize {
    let conns: Vec<Conn> =
        std::mem::take(&mut *shared.conns.lock().unwrap_or_else(|p| p.into_inner()));
    let n = conns.len();
    for c in conns {
        c.closed.store(true, Ordering::SeqCst);
        for s in [&c.client, &c.upstream] {
            // Linger 0: the last close sends a reset. Shutting both ways down wakes the
            // pumps (a reader blocked in read, a writer blocked in write), which then
            // close their copies of the socket.
            let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    n
}

fn parse_dirs(word: &str) -> Result<Vec<Dir>> {
    Ok(match word {
        "up" => vec![Dir::Up],
        "down" => vec![Dir::Down],
        "both" => vec![Dir::Up, Dir::Down],
        other => bail!("direction {other}: up, down or both"),
    })
}

fn num(word: Option<&str>, what: &str) -> Result<u64> {
    word.with_context(|| format!("missing {what}"))?
        .parse()
        .with_context(|| format!("{what} is not a number"))
}

fn apply(shared: &Shared, line: &str) -> Result<String> {
    let mut w = line.split_whitespace();
    let Some(cmd) = w.next() else {
        bail!("empty command")
    };
    let set = |f: &dyn Fn(&mut Faults)| {
        let mut g = shared.faults.write().unwrap_or_else(|p| p.into_inner());
        f(&mut g);
    };
    match cmd {
        "pass" => set(&|f| *f = Faults::default()),
        "delay" => {
            let dirs = parse_dirs(w.next().unwrap_or(""))?;
            let ms = num(w.next(), "ms")?;
            let jitter = num(w.next(), "jitter_ms").unwrap_or(0);
            set(&|f| {
                for &d in &dirs {
                    let df = f.dir_mut(d);
                    df.delay_ms = ms;
                    df.jitter_ms = jitter;
                }
            });
        }
        "bandwidth" => {
            let dirs = parse_dirs(w.next().unwrap_or(""))?;
            let rate = num(w.next(), "bytes_per_s")?;
            set(&|f| {
                for &d in &dirs {
                    f.dir_mut(d).bytes_per_s = rate;
                }
            });
        }
        "blackhole" => set(&|f| f.mode = Mode::Blackhole),
        "freeze" => set(&|f| f.mode = Mode::Freeze),
        "reset" => {
            let n = reset_all(shared);
            return Ok(format!("ok reset {n}"));
        }
        "stats" => {
            let open = shared.conns.lock().unwrap_or_else(|p| p.into_inner()).len();
            return Ok(format!(
                "ok connections={open} accepted={} up={} down={}",
                shared.accepted.load(Ordering::SeqCst),
                shared.bytes_up.load(Ordering::Relaxed),
                shared.bytes_down.load(Ordering::Relaxed)
            ));
        }
        other => bail!("unknown command {other}"),
    }
    Ok(format!("ok {line}"))
}

/// Reads commands from stdin until it closes (then the proxy exits).
fn control(shared: &Shared) -> Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line?;
        let answer = match apply(shared, line.trim()) {
            Ok(a) => a,
            Err(e) => format!("err {e:#}"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}
