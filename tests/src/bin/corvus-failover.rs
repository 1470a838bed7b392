//! Failover timing in controller mode: three `corvus-controller`s, one NameServer and a
//! group of two brokers (ids 0 and 1) on loopback in a temporary directory, one producer
//! sending continuously, and a seeded series of faults on whichever broker is the master:
//!
//! * kill: `kill -9` the master, then (once the other broker has taken a send, or the round
//!   gave up) start it again on the same data and tail-ring directories, so it rejoins as
//!   the new master's slave;
//! * stall: `SIGSTOP` the master for a seeded time of at least `--stall-ms`, then
//!   `SIGCONT`; its lease has run out by then, so it must refuse writes and follow the new
//!   master by itself;
//! * stop: `SIGTERM` the master (`--stops`, none by default): a graceful stop hands the
//!   group over to the slave before the process exits; then it starts again, as after a
//!   kill.
//!
//! Each round waits until the controllers name a master with both brokers in the
//! SyncStateSet and that master has acknowledged a send, applies the fault, and measures
//! from the fault to the first send acknowledged by the other broker (the store host in
//! the send's offset id says which broker wrote it). It also records when the controllers
//! first named the new master and how many sends were refused meanwhile. At the end every
//! queue is read from the master and each acknowledged message must be there, byte for
//! byte.
//!
//! Prints a line per round, a table of percentiles and, with `--out`, a JSON summary. Exits
//! non-zero when an acknowledged message is lost (SYNC_MASTER), a round did not recover
//! within `--round-timeout-ms`, a replaced master acknowledged a send, or a stalled broker
//! ran again before its SIGCONT (then the stall did not happen as measured).
//!
//! The brokers run in process groups of their own (see [`spawn_broker`]); stopping this
//! program with a signal leaves them running, a normal exit stops them.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use client::{Message, Producer, PullConsumer, PullOptions, QueueOffset};
use controller_proto::{Client, ClientConfig, ReplicaInfo};
use integration::{
    broker_command, create_topic, ring_dir, start_namesrv, use_bin_dir, BrokerOpts, Controllers,
    Proc,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

const GROUP: &str = "broker-a";
const TOPIC: &str = "FailoverTiming";
const QUEUES: u32 = 4;
const BODY_BYTES: usize = 256;
/// How long to wait for the group to be whole again (a master, both in sync, an ack).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The brokers' disk clean ratios: the run writes a few hundred MB, but the host's disk is
/// shared and may be fuller than the default 0.75, at which the broker deletes its oldest
/// segments, which the check at the end would count as lost.
const DISK_RATIO: f64 = 0.98;
/// How often the controllers are asked who is master during a round.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

#[derive(Parser)]
#[command(
    about = "Failover timing of a controller-mode broker group under kill -9, SIGSTOP and SIGTERM"
)]
struct Cli {
    /// Rounds that kill -9 the master.
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Rounds that SIGSTOP the master.
    #[arg(long, default_value_t = 10)]
    stalls: u32,
    /// Rounds that stop the master gracefully (SIGTERM): it hands the group over.
    #[arg(long, default_value_t = 0)]
    stops: u32,
    /// Seeds the order of the faults, the stall lengths and the moment of each fault.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Shortest stall; each lasts between this and 1.5 times this.
    #[arg(long, default_value_t = 6000)]
    stall_ms: u64,
    /// The producer's send timeout (retries included), RocketMQ's default.
    #[arg(long, default_value_t = 3000)]
    send_timeout_ms: u64,
    /// The producer's retries, RocketMQ's default.
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// The controllers' `--heartbeat-timeout-ms` (also the master's lease; their default).
    #[arg(long, default_value_t = 2000)]
    heartbeat_timeout_ms: u64,
    /// The controllers' `--election-check-interval-ms` (their default).
    #[arg(long, default_value_t = 100)]
    election_check_interval_ms: u64,
    /// The brokers' `controller_heartbeat_interval_ms` (their default).
    #[arg(long, default_value_t = 300)]
    broker_heartbeat_ms: u64,
    /// How the master serves.
    #[arg(long, default_value = "SYNC_MASTER", value_parser = ["SYNC_MASTER", "ASYNC_MASTER"])]
    mode: String,
    /// Pause between two sends of the producer.
    #[arg(long, default_value_t = 2)]
    send_interval_ms: u64,
    /// A round whose new master takes no send this long after the fault failed.
    #[arg(long, default_value_t = 30_000)]
    round_timeout_ms: u64,
    /// Where the JSON summary goes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Copy every process's log here at the end.
    #[arg(long)]
    keep_logs: Option<PathBuf>,
    /// The directory of the broker, namesrv, mqadmin and corvus-controller binaries; by
    /// default this program's own (e.g. target/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Stall { ms: u64 },
    Stop,
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stall { .. } => "stall",
            Fault::Stop => "stop",
        }
    }
}

/// One answered send.
struct Ack {
    at: Instant,
    seq: u64,
    msg_id: String,
    queue_id: u32,
    queue_offset: u64,
    /// Who wrote it (from the offset id); `None` if the id did not parse.
    store_host: Option<SocketAddrV4>,
}

/// One refused send (after the client's retries).
struct Refusal {
    at: Instant,
    error: String,
}

#[derive(Default)]
struct SendLog {
    acks: Vec<Ack>,
    refusals: Vec<Refusal>,
}

/// What one round saw.
#[derive(Debug, Clone)]
struct Round {
    index: usize,
    fault: Fault,
    old_master: u64,
    epoch_before: u32,
    fault_at: Instant,
    /// The controllers first named another master, and which, in which epoch.
    detected: Option<(Instant, u64, u32)>,
    /// The first send the other broker acknowledged after the fault.
    recovered_at: Option<Instant>,
    refused: usize,
    first_refusal: Option<String>,
}

impl Round {
    fn failover_ms(&self) -> Option<u64> {
        self.recovered_at
            .map(|t| t.duration_since(self.fault_at).as_millis() as u64)
    }

    fn detect_ms(&self) -> Option<u64> {
        self.detected
            .map(|(t, _, _)| t.duration_since(self.fault_at).as_millis() as u64)
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let bin_dir = match &cli.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .context("this program's path")?
            .parent()
            .context("this program's directory")?
            .to_path_buf(),
    };
    for name in ["broker", "namesrv", "mqadmin", "corvus-controller"] {
        if !bin_dir.join(name).exists() {
            bail!(
                "{} has no {name}: build the workspace's binaries (cargo build --release) or pass --bin-dir",
                bin_dir.display()
            );
        }
    }
    use_bin_dir(bin_dir.clone());
    let outcome = run(&cli, &bin_dir);
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => {
            eprintln!("corvus-failover: FAILED (see above)");
            std::process::exit(1);
        }
        Err(e) => Err(e),
    }
}

/// Runs every round; `Ok(false)` when a check failed.
fn run(cli: &Cli, bin_dir: &Path) -> Result<bool> {
    let mut rng = StdRng::seed_from_u64(cli.seed);
    let mut plan: Vec<Fault> = (0..cli.kills).map(|_| Fault::Kill).collect();
    for _ in 0..cli.stalls {
        let ms = rng.gen_range(cli.stall_ms..=cli.stall_ms + cli.stall_ms / 2);
        plan.push(Fault::Stall { ms });
    }
    plan.extend((0..cli.stops).map(|_| Fault::Stop));
    plan.shuffle(&mut rng);

    let dir = tempfile::Builder::new()
        .prefix("corvus-failover-")
        .tempdir()
        .context("a temporary directory")?;
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs)?;
    let ctl = Controllers::start_with(cli.heartbeat_timeout_ms, cli.election_check_interval_ms);
    ctl.agreed_leader(Duration::from_secs(30));
    let mut ctl_client = Client::with_config(
        &ctl.addrs,
        ClientConfig {
            io_timeout_ms: 500,
            attempts_max: 3,
            call_timeout_ms: 1000,
            retry_backoff_ms: 20,
            credentials: None,
        },
    )
    .context("a controller client")?;
    let ns = start_namesrv(&logs);
    let rings = [ring_dir(), ring_dir()];
    let opts: Vec<BrokerOpts> = (0..2u64)
        .map(|id| {
            let mut o = BrokerOpts::new(&ns.addr, &dir.path().join(format!("broker-{id}")));
            o.name = GROUP.into();
            o.tail_ring_dir = Some(rings[id as usize].path().to_owned());
            o.ring_dir_guard = None;
            o.config_toml = Some(format!(
                "broker_role = \"{}\"\nbroker_id = {id}\nenable_controller_mode = true\n\
                 controller_addr = \"{}\"\ncontroller_heartbeat_interval_ms = {}\n\
                 disk_clean_ratio = {DISK_RATIO}\ndisk_force_clean_ratio = {DISK_RATIO}\n\
                 disk_refuse_ratio = 0.99\n",
                cli.mode,
                ctl.mq_addrs(),
                cli.broker_heartbeat_ms
            ));
            o
        })
        .collect();
    let mut hosts: HashMap<SocketAddrV4, u64> = HashMap::new();
    let mut brokers: Vec<Proc> = Vec::new();
    for (id, o) in opts.iter().enumerate() {
        let p = spawn_broker(o, id as u64, &logs);
        hosts.insert(advertised(&p)?, id as u64);
        println!("broker {id} started: pid {} at {}", p.pid(), p.addr);
        brokers.push(p);
    }
    wait_ready(&mut ctl_client, None, None)
        .context("the group did not get a master with both brokers in sync")?;
    create_topic(&ns.addr, TOPIC, QUEUES);

    let run_began = Instant::now();
    let log = Arc::new(Mutex::new(SendLog::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = Producer::builder()
        .namesrv(ns.addr.as_str())
        .group("failover-producer")
        .send_timeout_ms(cli.send_timeout_ms)
        .retries(cli.retries)
        .build()
        .context("a producer")?;
    let sender = {
        let (log, stop) = (log.clone(), stop.clone());
        let interval = Duration::from_millis(cli.send_interval_ms);
        std::thread::spawn(move || produce(&producer, &log, &stop, interval))
    };

    println!(
        "corvus-failover: seed {} mode {} {} kills {} stalls {} stops, send timeout {} ms, controller heartbeat timeout {} ms, election check {} ms, broker heartbeat {} ms",
        cli.seed,
        cli.mode,
        cli.kills,
        cli.stalls,
        cli.stops,
        cli.send_timeout_ms,
        cli.heartbeat_timeout_ms,
        cli.election_check_interval_ms,
        cli.broker_heartbeat_ms
    );
    let round_timeout = Duration::from_millis(cli.round_timeout_ms);
    let mut rounds: Vec<Round> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (index, fault) in plan.iter().copied().enumerate() {
        let began = Instant::now();
        let ready = wait_ready(&mut ctl_client, Some(&log), Some((began, &hosts)));
        let Some(info) = ready else {
            failures.push(format!(
                "round {index}: the group was not whole again within {READY_TIMEOUT:?}: {:?}",
                replica_info(&mut ctl_client)
            ));
            break;
        };
        let Some(old) = info.master_id else {
            bail!("a ready group has a master");
        };
        // Fault at a seeded point of the heartbeat cycle.
        std::thread::sleep(Duration::from_millis(
            rng.gen_range(0..cli.broker_heartbeat_ms.max(1)),
        ));
        let pid = brokers[old as usize].pid();
        let fault_at = Instant::now();
        match fault {
            Fault::Kill => brokers[old as usize].kill9(),
            Fault::Stall { .. } => signal(pid, libc::SIGSTOP)?,
            // Not waited for here: the round watches the hand-over while the broker stops.
            Fault::Stop => signal(pid, libc::SIGTERM)?,
        }
        let cont_at = match fault {
            Fault::Stall { ms } => Some(fault_at + Duration::from_millis(ms)),
            Fault::Kill | Fault::Stop => None,
        };
        let mut continued = false;
        // A stall must hold: the broker is seen stopped, and not running again before its
        // SIGCONT.
        let mut stop_seen_ms: Option<u64> = None;
        let mut resumed_early_ms: Option<u64> = None;
        let mut round = Round {
            index,
            fault,
            old_master: old,
            epoch_before: info.master_epoch,
            fault_at,
            detected: None,
            recovered_at: None,
            refused: 0,
            first_refusal: None,
        };
        let deadline = fault_at + round_timeout;
        // Once the other broker took a send, keep asking the controllers a little longer
        // if they have not been seen naming it yet.
        let mut recovered_seen: Option<Instant> = None;
        let mut next_report = fault_at + Duration::from_secs(10);
        loop {
            let now = Instant::now();
            if now >= next_report && round.recovered_at.is_none() {
                // A slow round: say what the controllers, the old master and the producer
                // are doing, for the report.
                next_report = now + Duration::from_secs(2);
                report_slow_round(&mut ctl_client, &log, pid, fault_at);
            }
            if let Some(at) = cont_at {
                if !continued && now >= at {
                    signal(pid, libc::SIGCONT)?;
                    continued = true;
                }
                if !continued {
                    let ms = now.duration_since(fault_at).as_millis() as u64;
                    match process_state(pid) {
                        Some('T') => {
                            stop_seen_ms.get_or_insert(ms);
                        }
                        Some(other) if stop_seen_ms.is_some() && resumed_early_ms.is_none() => {
                            println!("  +{ms} ms: the stalled broker (pid {pid}) is running again (state {other}) before its SIGCONT");
                            resumed_early_ms = Some(ms);
                        }
                        _ => {}
                    }
                }
            }
            if round.detected.is_none() {
                if let Some(i) = replica_info(&mut ctl_client) {
                    if let Some(m) = i.master_id.filter(|m| *m != old) {
                        round.detected = Some((Instant::now(), m, i.master_epoch));
                    }
                }
            }
            if round.recovered_at.is_none() {
                round.recovered_at = first_ack_by_other(&log, &hosts, fault_at, old);
                if round.recovered_at.is_some() {
                    recovered_seen = Some(Instant::now());
                }
            }
            let detect_grace_over =
                recovered_seen.is_some_and(|t| t.elapsed() > Duration::from_secs(2));
            if round.recovered_at.is_some() && (round.detected.is_some() || detect_grace_over) {
                break;
            }
            if now >= deadline {
                break;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        if let Some(at) = cont_at {
            while !continued {
                let now = Instant::now();
                if now >= at {
                    signal(pid, libc::SIGCONT)?;
                    continued = true;
                } else if process_state(pid) != Some('T') && resumed_early_ms.is_none() {
                    let ms = now.duration_since(fault_at).as_millis() as u64;
                    println!("  +{ms} ms: the stalled broker (pid {pid}) is running again before its SIGCONT");
                    resumed_early_ms = Some(ms);
                }
                std::thread::sleep(POLL_INTERVAL);
            }
            if stop_seen_ms.is_none() {
                failures.push(format!(
                    "round {index}: the stalled broker (pid {pid}) was never seen stopped"
                ));
            }
            if let Some(ms) = resumed_early_ms {
                failures.push(format!("round {index}: the stalled broker (pid {pid}) ran again {ms} ms after its SIGSTOP, before its SIGCONT"));
            }
        }
        {
            let l = log.lock().unwrap_or_else(PoisonError::into_inner);
            let until = round.recovered_at.unwrap_or_else(Instant::now);
            let refused: Vec<&Refusal> = l
                .refusals
                .iter()
                .filter(|r| r.at > fault_at && r.at <= until)
                .collect();
            round.refused = refused.len();
            round.first_refusal = refused.first().map(|r| r.error.clone());
        }
        if matches!(fault, Fault::Stop) {
            let code = brokers[old as usize].terminate();
            if code != Some(0) {
                failures.push(format!(
                    "round {index}: broker {old} did not stop cleanly on SIGTERM (exit {code:?})"
                ));
            }
        }
        if matches!(fault, Fault::Kill | Fault::Stop) {
            let p = spawn_broker(&opts[old as usize], old, &logs);
            hosts.insert(advertised(&p)?, old);
            println!("broker {old} restarted: pid {} at {}", p.pid(), p.addr);
            brokers[old as usize] = p;
        }
        print_round(&round);
        if round.recovered_at.is_none() {
            failures.push(format!(
                "round {index} ({}): no send acknowledged by the other broker within {round_timeout:?} of the fault; controllers now: {:?}",
                fault.kind(),
                replica_info(&mut ctl_client)
            ));
            rounds.push(round);
            break;
        }
        rounds.push(round);
    }

    // Let the group become whole once more, so the master has everything, then stop.
    let settled = wait_ready(&mut ctl_client, Some(&log), Some((Instant::now(), &hosts)));
    stop.store(true, Ordering::Relaxed);
    if sender.join().is_err() {
        bail!("the producer thread panicked");
    }
    if settled.is_none() {
        failures.push(format!(
            "after the last round the group was not whole again: {:?}",
            replica_info(&mut ctl_client)
        ));
    }
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    failures.extend(acks_by_replaced_masters(&log, &rounds, &hosts));

    let check = check_served(&ns.addr, &log).context("reading the topic back")?;
    println!(
        "acknowledged {} refused {} stored {} lost {} duplicates {} stored-but-unacknowledged {}",
        log.acks.len(),
        log.refusals.len(),
        check.stored,
        check.lost.len(),
        check.duplicates,
        check.unacknowledged
    );
    for q in &check.queues {
        println!(
            "queue {}: offsets {}..{} on the master, {} acknowledged not served (offsets {:?}..={:?})",
            q.queue_id, q.min, q.max, q.lost, q.lost_offset_min, q.lost_offset_max
        );
    }
    if !check.lost.is_empty() {
        let sample: Vec<&String> = check.lost.iter().take(10).collect();
        let msg = format!(
            "{} acknowledged messages lost, e.g. {sample:?}",
            check.lost.len()
        );
        if cli.mode == "SYNC_MASTER" {
            failures.push(msg);
        } else {
            println!("{msg} (ASYNC_MASTER: the unreplicated tail may be lost)");
        }
    }

    let run_s = run_began.elapsed().as_secs_f64();
    println!(
        "ran {run_s:.0} s: {:.0} acknowledged sends/s on average",
        log.acks.len() as f64 / run_s
    );
    let summary = summarize(cli, bin_dir, &rounds, &log, &check, &failures);
    print_table(&rounds);
    if let Some(out) = &cli.out {
        std::fs::write(out, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
        println!("summary written to {}", out.display());
    }
    if let Some(keep) = &cli.keep_logs {
        copy_dir(&logs, &keep.join("brokers"))?;
        copy_dir(&ctl.logs, &keep.join("controllers"))?;
        println!("logs kept in {}", keep.display());
    }
    for f in &failures {
        eprintln!("FAILURE: {f}");
    }
    drop(brokers);
    Ok(failures.is_empty())
}

/// Prints, for a round that has not recovered yet: the controllers' view, the old master's
/// process state, and the producer's last answer.
fn report_slow_round(c: &mut Client, log: &Mutex<SendLog>, pid: i32, fault_at: Instant) {
    let asked = Instant::now();
    let info = replica_info(c);
    let answer_ms = asked.elapsed().as_millis();
    let state = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("State:"))
                .map(|v| v.trim().to_owned())
        });
    let (last_ack, last_refusal) = {
        let l = log.lock().unwrap_or_else(PoisonError::into_inner);
        let ms = |t: Instant| t.saturating_duration_since(fault_at).as_millis() as i128;
        (
            l.acks.last().map(|a| (ms(a.at), a.store_host)),
            l.refusals.last().map(|r| (ms(r.at), r.error.clone())),
        )
    };
    println!(
        "  +{} ms, not recovered: old master pid {pid} state {state:?}; controllers (answered in {answer_ms} ms): {:?}; last ack at {last_ack:?} ms, last refusal at {last_refusal:?} ms (from the fault)",
        fault_at.elapsed().as_millis(),
        info.map(|i| (
            i.master_id,
            i.master_epoch,
            i.sync_state_set,
            i.replicas
                .iter()
                .map(|r| (r.broker_id, r.alive, r.last_epoch, r.max_offsets.clone()))
                .collect::<Vec<_>>()
        ))
    );
}

/// Starts broker `id` in a process group of its own. In the group of this program, a
/// stopped broker would be continued by the kernel (SIGHUP, then SIGCONT to every member)
/// whenever that group is orphaned (this program started in the background by a shell that
/// then exited) and one of its members exits, which would end a stall early.
fn spawn_broker(opts: &BrokerOpts, id: u64, logs: &Path) -> Proc {
    use std::os::unix::process::CommandExt;
    let mut cmd = broker_command(opts, logs);
    cmd.process_group(0);
    let n = logs.read_dir().map(|d| d.count()).unwrap_or(0);
    Proc::start(
        cmd,
        "broker listening on ",
        logs.join(format!("broker-{id}-{n}.log")),
    )
}

/// The state letter of process `pid` (`T` when stopped), from /proc.
fn process_state(pid: i32) -> Option<char> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|v| v.trim().chars().next())
}

/// The advertised address in a broker's ready line ("... (advertised A, ...").
fn advertised(p: &Proc) -> Result<SocketAddrV4> {
    let addr = p
        .line
        .split("advertised ")
        .nth(1)
        .and_then(|rest| rest.split([',', ')', ' ']).next())
        .unwrap_or(&p.addr);
    addr.parse()
        .with_context(|| format!("the broker's address in {:?}", p.line))
}

fn signal(pid: i32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        bail!("kill({pid}, {sig}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn replica_info(c: &mut Client) -> Option<ReplicaInfo> {
    integration::controllers::replica_info(c, GROUP)
}

/// Waits until the controllers name a master with both brokers in sync and (with a send
/// log) that master acknowledged a send after `since`.
fn wait_ready(
    c: &mut Client,
    log: Option<&Mutex<SendLog>>,
    since: Option<(Instant, &HashMap<SocketAddrV4, u64>)>,
) -> Option<ReplicaInfo> {
    integration::wait_for(READY_TIMEOUT, || {
        let info = replica_info(c)?;
        let m = info.master_id?;
        if info.sync_state_set != [0, 1] {
            return None;
        }
        if let (Some(log), Some((since, hosts))) = (log, since) {
            let l = log.lock().unwrap_or_else(PoisonError::into_inner);
            let last = l.acks.last()?;
            let by = last.store_host.and_then(|h| hosts.get(&h).copied());
            if last.at <= since || by != Some(m) {
                return None;
            }
        }
        Some(info)
    })
}

/// The first send acknowledged after `after` by a broker other than `old`.
fn first_ack_by_other(
    log: &Mutex<SendLog>,
    hosts: &HashMap<SocketAddrV4, u64>,
    after: Instant,
    old: u64,
) -> Option<Instant> {
    let l = log.lock().unwrap_or_else(PoisonError::into_inner);
    let start = l.acks.partition_point(|a| a.at <= after);
    l.acks[start..]
        .iter()
        .find(|a| {
            a.store_host
                .and_then(|h| hosts.get(&h))
                .is_some_and(|id| *id != old)
        })
        .map(|a| a.at)
}

/// Acks by a broker after the controllers were seen replacing it and before the next fault
/// (when it was a slave for sure): a replaced master must refuse writes.
fn acks_by_replaced_masters(
    log: &SendLog,
    rounds: &[Round],
    hosts: &HashMap<SocketAddrV4, u64>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        let Some((detected, new, epoch)) = r.detected else {
            continue;
        };
        let until = rounds.get(i + 1).map(|n| n.fault_at);
        let bad: Vec<&Ack> = log
            .acks
            .iter()
            .filter(|a| a.at > detected && until.is_none_or(|u| a.at < u))
            .filter(|a| a.store_host.and_then(|h| hosts.get(&h)) == Some(&r.old_master))
            .collect();
        if let Some(first) = bad.first() {
            out.push(format!(
                "round {} ({}): broker {} acknowledged {} sends after the controllers named broker {new} master in epoch {epoch} ({} ms after that; first msg id {} seq {} stored by {:?})",
                r.index,
                r.fault.kind(),
                r.old_master,
                bad.len(),
                first.at.duration_since(detected).as_millis(),
                first.msg_id,
                first.seq,
                first.store_host
            ));
        }
    }
    out
}

/// The body of send `seq`: its number, then filler letters that depend on it.
fn body(seq: u64) -> Vec<u8> {
    let mut b = format!("failover-{seq:012}-").into_bytes();
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while b.len() < BODY_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.push(b'a' + (x % 26) as u8);
    }
    b
}

fn produce(p: &Producer, log: &Mutex<SendLog>, stop: &AtomicBool, interval: Duration) {
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let r = p.send(Message::new(TOPIC, body(seq)));
        let at = Instant::now();
        let mut l = log.lock().unwrap_or_else(PoisonError::into_inner);
        match r {
            Ok(sent) => l.acks.push(Ack {
                at,
                seq,
                store_host: message::MsgOffsetId::parse(&sent.offset_msg_id)
                    .map(|id| id.store_host),
                queue_id: sent.queue_id,
                queue_offset: sent.queue_offset.0,
                msg_id: sent.msg_id,
            }),
            Err(e) => l.refusals.push(Refusal {
                at,
                error: e.to_string(),
            }),
        }
        drop(l);
        if !interval.is_zero() {
            std::thread::sleep(interval);
        }
    }
    p.shutdown();
}

struct Served {
    stored: usize,
    lost: Vec<String>,
    /// Per queue: its id, the first and end offsets the master reported, and the
    /// acknowledged offsets not served (count, lowest, highest).
    queues: Vec<QueueCheck>,
    duplicates: usize,
    unacknowledged: usize,
}

/// Reads every queue from its first offset to its end and compares with the acks.
#[derive(Debug, Default)]
struct QueueCheck {
    queue_id: u32,
    min: u64,
    max: u64,
    lost: usize,
    lost_offset_min: Option<u64>,
    lost_offset_max: Option<u64>,
}

fn check_served(namesrv: &str, log: &SendLog) -> Result<Served> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let consumer = PullConsumer::new(namesrv, "failover-check").context("a consumer")?;
    let queues = retry(deadline, "the queues", || consumer.queues(TOPIC))?;
    let opts = PullOptions::default();
    let mut seen: HashMap<String, (usize, Vec<u8>)> = HashMap::new();
    let mut stored = 0usize;
    let mut checks: Vec<QueueCheck> = Vec::new();
    for q in &queues {
        let (min, max) = retry(deadline, "the queue offsets", || consumer.queue_offsets(q))?;
        checks.push(QueueCheck {
            queue_id: q.queue_id,
            min: min.0,
            max: max.0,
            ..Default::default()
        });
        let mut offset = QueueOffset(0);
        while offset < max {
            let r = retry(deadline, "a pull", || consumer.pull(q, offset, &opts))?;
            for m in r.messages {
                stored += 1;
                let e = seen.entry(m.msg_id).or_insert((0, m.body.to_vec()));
                e.0 += 1;
            }
            if r.next_offset <= offset {
                if Instant::now() >= deadline {
                    bail!("{q}: a pull at {offset:?} did not move on (max {max:?})");
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            offset = r.next_offset;
        }
    }
    let mut lost = Vec::new();
    let mut acked = std::collections::HashSet::new();
    for a in &log.acks {
        acked.insert(a.msg_id.as_str());
        match seen.get(&a.msg_id) {
            Some((_, b)) if *b == body(a.seq) => {}
            _ => {
                lost.push(format!(
                    "{} (seq {}, queue {} offset {})",
                    a.msg_id, a.seq, a.queue_id, a.queue_offset
                ));
                if let Some(c) = checks.iter_mut().find(|c| c.queue_id == a.queue_id) {
                    c.lost += 1;
                    c.lost_offset_min = Some(
                        c.lost_offset_min
                            .map_or(a.queue_offset, |m| m.min(a.queue_offset)),
                    );
                    c.lost_offset_max = Some(
                        c.lost_offset_max
                            .map_or(a.queue_offset, |m| m.max(a.queue_offset)),
                    );
                }
            }
        }
    }
    Ok(Served {
        stored,
        lost,
        queues: checks,
        duplicates: seen.values().map(|(n, _)| n.saturating_sub(1)).sum(),
        unacknowledged: seen.keys().filter(|k| !acked.contains(k.as_str())).count(),
    })
}

fn retry<T>(deadline: Instant, what: &str, mut f: impl FnMut() -> client::Result<T>) -> Result<T> {
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline => {
                eprintln!("corvus-failover: {what}: {e} (retrying)");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => bail!("{what}: {e}"),
        }
    }
}

fn print_round(r: &Round) {
    let stall = match r.fault {
        Fault::Stall { ms } => format!(" {ms} ms"),
        Fault::Kill | Fault::Stop => String::new(),
    };
    let (new, epoch) = r
        .detected
        .map(|(_, m, e)| (m.to_string(), e.to_string()))
        .unwrap_or(("?".into(), "?".into()));
    println!(
        "round {:>2} {:<5}{stall:<9} master {} -> {new} epoch {} -> {epoch}: controllers {} ms, first ack on the new master {} ms, refused {}{}",
        r.index,
        r.fault.kind(),
        r.old_master,
        r.epoch_before,
        r.detect_ms().map_or("-".into(), |v| v.to_string()),
        r.failover_ms().map_or("-".into(), |v| v.to_string()),
        r.refused,
        r.first_refusal
            .as_ref()
            .map_or(String::new(), |e| format!(" (first: {e})"))
    );
}

/// Nearest-rank percentile of sorted `v`.
fn percentile(v: &[u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

struct Stats {
    n: usize,
    p50: Option<u64>,
    p90: Option<u64>,
    p99: Option<u64>,
    max: Option<u64>,
}

fn stats(mut v: Vec<u64>) -> Stats {
    v.sort_unstable();
    Stats {
        n: v.len(),
        p50: percentile(&v, 50.0),
        p90: percentile(&v, 90.0),
        p99: percentile(&v, 99.0),
        max: v.last().copied(),
    }
}

fn stats_json(s: &Stats) -> serde_json::Value {
    json!({"n": s.n, "p50": s.p50, "p90": s.p90, "p99": s.p99, "max": s.max})
}

fn select(rounds: &[Round], kind: Option<&str>, f: fn(&Round) -> Option<u64>) -> Vec<u64> {
    rounds
        .iter()
        .filter(|r| kind.is_none_or(|k| r.fault.kind() == k))
        .filter_map(f)
        .collect()
}

fn print_table(rounds: &[Round]) {
    let cell = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    println!();
    println!("failover: fault -> first send acknowledged by the new master (ms); controllers: fault -> controllers name the new master (ms)");
    println!(
        "{:<6} {:>3} | {:>6} {:>6} {:>6} {:>6} | {:>11} {:>11} {:>11} | {:>7}",
        "fault", "n", "p50", "p90", "p99", "max", "ctl p50", "ctl p99", "ctl max", "refused"
    );
    for (label, kind) in [
        ("kill", Some("kill")),
        ("stall", Some("stall")),
        ("stop", Some("stop")),
        ("all", None),
    ] {
        let f = stats(select(rounds, kind, Round::failover_ms));
        let d = stats(select(rounds, kind, Round::detect_ms));
        let refused: usize = rounds
            .iter()
            .filter(|r| kind.is_none_or(|k| r.fault.kind() == k))
            .map(|r| r.refused)
            .sum();
        println!(
            "{label:<6} {:>3} | {:>6} {:>6} {:>6} {:>6} | {:>11} {:>11} {:>11} | {refused:>7}",
            f.n,
            cell(f.p50),
            cell(f.p90),
            cell(f.p99),
            cell(f.max),
            cell(d.p50),
            cell(d.p99),
            cell(d.max)
        );
    }
}

fn summarize(
    cli: &Cli,
    bin_dir: &Path,
    rounds: &[Round],
    log: &SendLog,
    check: &Served,
    failures: &[String],
) -> serde_json::Value {
    let by_kind = |kind: Option<&str>| {
        json!({
            "failover_ms": stats_json(&stats(select(rounds, kind, Round::failover_ms))),
            "controllers_ms": stats_json(&stats(select(rounds, kind, Round::detect_ms))),
            "refused": rounds
                .iter()
                .filter(|r| kind.is_none_or(|k| r.fault.kind() == k))
                .map(|r| r.refused)
                .sum::<usize>(),
        })
    };
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(integration::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
    });
    json!({
        "commit": commit,
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
            "cpu": cpu,
        },
        "bin_dir": bin_dir.display().to_string(),
        "settings": {
            "seed": cli.seed,
            "mode": cli.mode,
            "kills": cli.kills,
            "stalls": cli.stalls,
            "stops": cli.stops,
            "stall_ms_min": cli.stall_ms,
            "stall_ms_max": cli.stall_ms + cli.stall_ms / 2,
            "send_timeout_ms": cli.send_timeout_ms,
            "retries": cli.retries,
            "heartbeat_timeout_ms": cli.heartbeat_timeout_ms,
            "election_check_interval_ms": cli.election_check_interval_ms,
            "broker_heartbeat_ms": cli.broker_heartbeat_ms,
            "send_interval_ms": cli.send_interval_ms,
            "round_timeout_ms": cli.round_timeout_ms,
            "queues": QUEUES,
            "body_bytes": BODY_BYTES,
        },
        "kill": by_kind(Some("kill")),
        "stall": by_kind(Some("stall")),
        "stop": by_kind(Some("stop")),
        "all": by_kind(None),
        "acknowledged": log.acks.len(),
        "refused": log.refusals.len(),
        "stored": check.stored,
        "lost": check.lost.len(),
        "duplicates": check.duplicates,
        "stored_unacknowledged": check.unacknowledged,
        "queues": check.queues.iter().map(|q| json!({
            "queue_id": q.queue_id,
            "min_offset": q.min,
            "max_offset": q.max,
            "lost": q.lost,
            "lost_offset_min": q.lost_offset_min,
            "lost_offset_max": q.lost_offset_max,
        })).collect::<Vec<_>>(),
        "rounds": rounds.iter().map(|r| json!({
            "index": r.index,
            "fault": r.fault.kind(),
            "stall_ms": match r.fault { Fault::Stall { ms } => Some(ms), Fault::Kill | Fault::Stop => None },
            "old_master": r.old_master,
            "new_master": r.detected.map(|(_, m, _)| m),
            "epoch_before": r.epoch_before,
            "epoch_after": r.detected.map(|(_, _, e)| e),
            "controllers_ms": r.detect_ms(),
            "failover_ms": r.failover_ms(),
            "refused": r.refused,
            "first_refusal": r.first_refusal,
        })).collect::<Vec<_>>(),
        "failures": failures,
    })
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}
