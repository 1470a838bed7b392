//! What each command does: set up (a local cluster or a remote one), run, report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{Cli, Command, DiskArgs, QuickArgs, RunArgs};
use crate::cluster::{self, Cluster, ClusterOptions};
use crate::consume::{self, ConsumeOptions, ConsumeOutcome, Mode};
use crate::disk::{self, DiskOptions, DiskReport};
use crate::machine::{self, Machine};
use crate::produce::{self, Limit, ProduceOptions, ProduceOutcome, Progress};
use crate::report::{self, Report};
use crate::verify::Verifier;

/// Produce run length when neither --duration nor --messages is given.
const DEFAULT_DURATION_SECS: f64 = 8.0;
/// How long to wait for a created topic to show up in the NameServer's route.
const ROUTE_WAIT: Duration = Duration::from_secs(15);
/// Verifier room per producer when a followed run is bounded by time only.
const FOLLOW_CAPACITY_MAX: u64 = 1 << 27;

/// Runs the command; `Ok(false)` when a run counted errors.
/// Longest host stall-floor measurement (`--floor-duration`).
const FLOOR_SECONDS_MAX: f64 = 60.0;

pub fn run(cli: Cli) -> Result<bool> {
    cluster::install_signal_handlers()?;
    match cli.command {
        None => {
            let mut quick = cli.quick;
            quick.run = with_credentials(quick.run);
            quickstart(quick)
        }
        Some(Command::Produce(a)) => produce_cmd(with_credentials(a)),
        Some(Command::Consume(a)) => consume_cmd(with_credentials(a)),
        Some(Command::E2e(a)) => e2e_cmd(with_credentials(a)),
        Some(Command::Disk(d)) => disk_cmd(d),
        Some(Command::Remoting(r)) => crate::remoting_load::run(&r),
        Some(Command::Delayed(d)) => crate::delayed::run(&d),
        Some(Command::Lite(l)) => crate::lite::run(&l),
    }
}

/// Every client the run builds logs in with the run's credentials.
fn with_credentials(a: RunArgs) -> RunArgs {
    if let (Some(ak), Some(sk)) = (&a.access_key, &a.secret_key) {
        client::set_default_credentials(Some(client::Credentials::new(ak, sk)));
    }
    a
}

struct Session {
    args: RunArgs,
    namesrv: String,
    topic: String,
    disk: Option<DiskReport>,
    // Drop order: the cluster stops before its temporary directory goes.
    cluster: Option<Cluster>,
    _temp: Option<tempfile::TempDir>,
    reports: Vec<Report>,
    curves: Vec<(String, Vec<(f64, f64)>)>,
    machine: Machine,
    commit: String,
    /// Every CPU this run may use (the broker's and the bench's), as allowed before the
    /// bench pinned itself to its share: where the host's stall floor is measured.
    run_cpus: Vec<usize>,
    /// The local broker's data directory: its disk bounds how much a run may produce.
    data_dir: Option<std::path::PathBuf>,
}

/// Bytes a stored record takes beyond its body (RocketMQ's record header, topic,
/// properties), rounded up.
const RECORD_OVERHEAD_BYTES: u64 = 256;
/// The share of the data disk's free space a run against the bench's own broker may fill.
/// That broker refuses sends only at 99.5% use (`cluster::DISK_LEVELS`: its data are the
/// bench's and go with it), so what bounds a timed run is this budget, which leaves the
/// host the other half whatever else its disk holds.
const DISK_SHARE_MAX: f64 = 0.5;

/// How many bytes a run may still write to the filesystem of `dir`: [`DISK_SHARE_MAX`] of
/// what is available there (`df`'s Avail, as `shard::statvfs_free_bytes` reads it).
fn disk_room_bytes(dir: &std::path::Path) -> Option<u64> {
    let avail = shard::statvfs_free_bytes(dir).ok()? as f64;
    Some((avail * DISK_SHARE_MAX) as u64)
}

fn note(json: bool, msg: &str) {
    // Notes go to stderr so that --json output stays clean.
    if !json || std::env::var_os("BENCH_VERBOSE").is_some() {
        eprintln!("{msg}");
    } else {
        let _ = msg;
    }
}

impl Session {
    fn open(args: RunArgs, measure_disk: bool) -> Result<Session> {
        let machine = Machine::detect();
        let commit = machine::commit();
        let run_cpus = cluster::allowed_cpus();
        let mut disk_report = None;
        let mut data_dir = None;
        if let Some(ca) = &args.tls_trust_cert {
            // Every client the run makes (producers, consumers, admin) speaks TLS.
            client::set_default_tls(Some(&client::tls::ClientSettings::trusting(ca)))
                .map_err(|e| anyhow!("--tls-trust-cert: {e}"))?;
        }
        let (cluster, temp, namesrv) = match &args.namesrv {
            Some(ns) => {
                if let Some(dir) = &args.disk_dir {
                    disk_report = Some(measure(dir, args.json)?);
                }
                (None, None, ns.clone())
            }
            None => {
                let (temp, dir) = match &args.dir {
                    Some(d) => (None, d.clone()),
                    None => {
                        let t = tempfile::Builder::new()
                            .prefix("corvus-bench-")
                            .tempdir()
                            .context("creating a temporary directory")?;
                        let d = t.path().to_path_buf();
                        (Some(t), d)
                    }
                };
                if measure_disk && !args.no_disk {
                    disk_report = Some(measure(
                        &args.disk_dir.clone().unwrap_or(dir.clone()),
                        args.json,
                    )?);
                }
                note(
                    args.json,
                    &format!(
                        "bench: starting a NameServer and a broker (profile {}, {} core(s)) in {}",
                        args.profile,
                        args.broker_cores,
                        dir.display()
                    ),
                );
                let opts = ClusterOptions {
                    profile: args.profile.clone(),
                    broker_cores: args.broker_cores,
                    broker_config: args.broker_config.clone(),
                    data_dir: Some(dir.clone()),
                    replica: args.replica.clone(),
                    bench_cpus: args.bench_cpus.clone(),
                };
                let c = Cluster::start(&opts)?;
                let cpus = opts.bench_cpus();
                if cpus.is_empty() {
                    note(
                        args.json,
                        "bench: no CPU left for the bench; it shares the broker's",
                    );
                } else {
                    cluster::pin_to(&cpus)?;
                    note(
                        args.json,
                        &format!(
                            "bench: pinned to CPU(s) {cpus:?}; broker on the first {}",
                            args.broker_cores
                        ),
                    );
                }
                let ns = c.namesrv_addr.clone();
                if let Some(room) = disk_room_bytes(&dir).filter(|r| *r < 64 << 30) {
                    note(
                        args.json,
                        &format!(
                            "bench: a produce run stops after {:.1} GB, {:.0}% of the data disk's free space",
                            room as f64 / 1e9,
                            DISK_SHARE_MAX * 100.0
                        ),
                    );
                }
                data_dir = Some(dir);
                (Some(c), temp, ns)
            }
        };
        let topic = args.topic.clone().unwrap_or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            format!("BenchTopic_{secs}")
        });
        let s = Session {
            args,
            namesrv,
            topic,
            disk: disk_report,
            cluster,
            _temp: temp,
            reports: Vec::new(),
            curves: Vec::new(),
            machine,
            commit,
            run_cpus,
            data_dir,
        };
        s.prepare_topic()?;
        Ok(s)
    }

    /// Creates the topic with --queues queues on the local broker and waits for its route.
    fn prepare_topic(&self) -> Result<()> {
        let Some(c) = &self.cluster else {
            return Ok(()); // a remote cluster: existing topic or auto-creation on first send
        };
        let admin = client::Admin::new(&self.namesrv).map_err(|e| anyhow!("admin: {e}"))?;
        let cfg = protocol::TopicConfig {
            name: self.topic.clone(),
            read_queues: self.args.queues,
            write_queues: self.args.queues,
            perm: protocol::perm::READ_WRITE,
        };
        admin
            .create_topic(&c.broker_addr, &cfg)
            .map_err(|e| anyhow!("creating topic {}: {e}", self.topic))?;
        let deadline = Instant::now() + ROUTE_WAIT;
        loop {
            match admin.topic_route(&self.topic) {
                Ok(r) if r.write_queues().len() as u32 >= self.args.queues => return Ok(()),
                _ if Instant::now() > deadline => {
                    bail!(
                        "topic {} did not appear in the NameServer's routes",
                        self.topic
                    )
                }
                _ if cluster::stopping() => bail!("interrupted"),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn produce_options(&self) -> ProduceOptions {
        let a = &self.args;
        let limit = match (a.messages, a.duration) {
            (Some(m), _) => Limit::Messages(m),
            (None, Some(d)) => Limit::Duration(Duration::from_secs_f64(d.max(0.0))),
            (None, None) => Limit::Duration(Duration::from_secs_f64(DEFAULT_DURATION_SECS)),
        };
        // A local broker on a disk with less room than a timed run would fill stops the run
        // early: the run keeps to its share of the free space, and the consume run reads
        // back everything it wrote.
        let limit = match (limit, self.data_dir.as_deref().and_then(disk_room_bytes)) {
            (Limit::Duration(d), Some(room)) => {
                Limit::DurationOrMessages(d, room / (a.size + RECORD_OVERHEAD_BYTES))
            }
            (l, _) => l,
        };
        ProduceOptions {
            namesrv: self.namesrv.clone(),
            topic: self.topic.clone(),
            size: a.size as usize,
            batch: a.batch as usize,
            producers: a.producers as usize,
            limit,
            rate: a.rate.filter(|r| *r > 0.0),
            sync: a.sync,
            inflight: a.inflight as usize,
            compress: a.compress,
            send_timeout_ms: a.send_timeout_ms,
        }
    }

    fn consume_options(&self, limit: Option<Limit>) -> ConsumeOptions {
        ConsumeOptions {
            namesrv: self.namesrv.clone(),
            topic: self.topic.clone(),
            consumers: self
                .args
                .consumers
                .map(|c| c as usize)
                .unwrap_or(self.args.queues as usize),
            pull_batch: self.args.pull_batch,
            limit,
        }
    }

    /// Runs `f` on another thread while this one shows a progress line on stderr and
    /// samples the broker's memory.
    fn watch<T: Send>(
        &mut self,
        label: &str,
        progress: &Progress,
        f: impl FnOnce() -> T + Send,
    ) -> Result<T> {
        let bar = if self.args.json {
            ProgressBar::hidden()
        } else {
            ProgressBar::new_spinner()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(label.to_owned());
        let started = Instant::now();
        let mut broker_died = None;
        let out = std::thread::scope(|s| {
            let h = s.spawn(f);
            let mut last = (Instant::now(), 0u64);
            while !h.is_finished() {
                std::thread::sleep(Duration::from_millis(200));
                let n = progress.messages.load(Ordering::Relaxed);
                let now = Instant::now();
                let rate = (n - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                last = (now, n);
                let mut msg = format!(
                    "{n} messages, {:.0} msgs/s now, {} errors, {:.0} s",
                    rate,
                    progress.errors.load(Ordering::Relaxed),
                    started.elapsed().as_secs_f64()
                );
                if let Some(c) = self.cluster.as_mut() {
                    if let Some(m) = c.sample_memory() {
                        msg.push_str(&format!(", broker RSS {} MiB", m.vm_rss_kib / 1024));
                    }
                    if broker_died.is_none() {
                        if let Err(e) = c.check_alive() {
                            broker_died = Some(e);
                            cluster::stop_flag().store(true, Ordering::Relaxed);
                        }
                    }
                }
                bar.set_message(msg);
                bar.tick();
            }
            h.join()
        });
        bar.finish_and_clear();
        if let Some(e) = broker_died {
            return Err(e);
        }
        out.map_err(|_| anyhow!("the {label} run panicked"))
    }

    fn report(&self, f: Figures<'_>) -> Report {
        let Figures {
            mode,
            messages,
            seconds,
            latency_of,
            latency,
            errors,
            error_detail,
            settings,
        } = f;
        let bytes = messages * self.args.size;
        let (msgs_per_sec, mb_per_sec) = Report::rate(messages, bytes, seconds);
        Report {
            mode: mode.to_owned(),
            messages,
            bytes,
            seconds,
            msgs_per_sec,
            mb_per_sec,
            latency_of: latency_of.to_owned(),
            latency_us: latency.percentiles(),
            errors,
            error_detail,
            commit: self.commit.clone(),
            cores: self.cluster.as_ref().map(|_| self.args.broker_cores),
            profile: self.cluster.as_ref().map(|_| self.args.profile.clone()),
            machine: self.machine.clone(),
            settings,
            disk_ratio: None,
            log_mb_per_sec: None,
            log_disk_ratio: None,
            broker_memory: None,
            host_floor: None,
            stages: None,
            replica_lag: None,
            broker_cpu_s_per_m: None,
            slave_cpu_s_per_m: None,
        }
    }

    fn settings(&self, o: &ProduceOptions) -> serde_json::Value {
        serde_json::json!({
            "topic": o.topic,
            "size": o.size,
            "batch": o.batch,
            "producers": o.producers,
            "rate": o.rate,
            "sync": o.sync,
            "inflight": if o.sync { 1 } else { o.inflight },
            "compress": o.compress,
            "limit": match o.limit {
                Limit::Duration(d) => format!("{} s", d.as_secs_f64()),
                Limit::Messages(m) => format!("{m} messages"),
                Limit::DurationOrMessages(d, m) => {
                    format!("{} s or {m} messages", d.as_secs_f64())
                }
            },
            "queues": self.args.queues,
        })
    }

    fn produce(&mut self, mode: &str, o: ProduceOptions) -> Result<ProduceOutcome> {
        // A paced run's tail is read against the host's own floor, measured on every CPU the
        // run may use (the broker's and the bench's), just before the run.
        let floor = (o.rate.is_some() && self.args.floor_duration > 0.0).then(|| {
            crate::floor::measure(
                &self.run_cpus,
                Duration::from_secs_f64(self.args.floor_duration.min(FLOOR_SECONDS_MAX)),
            )
        });
        // The brokers serving the topic: their stored messages and bytes around the run give
        // a record's size on disk.
        let topic_brokers = crate::stages::broker_addrs(&self.namesrv, &o.topic).ok();
        // A paced run also says where its time went: the broker's stage histograms are
        // cleared now and read after the run (a broker that cannot say is left out).
        let stage_brokers = o
            .rate
            .and(topic_brokers.clone())
            .filter(|addrs| crate::stages::fetch(&self.namesrv, addrs, true).is_ok());
        let progress = Progress::default();
        let p = Arc::new(progress);
        let p2 = Arc::clone(&p);
        let o2 = o.clone();
        let sampler = match (&self.args.replica, &self.cluster) {
            (Some(_), Some(c)) => crate::replica::LagSampler::start(&self.namesrv, &c.broker_addr),
            _ => None,
        };
        let namesrv = self.namesrv.clone();
        let stored = || {
            topic_brokers
                .as_ref()
                .and_then(|a| crate::stages::stored(&namesrv, a).ok())
        };
        let stored_before = stored();
        let cpu_before = self.cluster.as_ref().map(|c| c.cpu_seconds());
        let out = self.watch(mode, &p, move || produce::run(&o2, p2));
        let cpu_after = self.cluster.as_ref().map(|c| c.cpu_seconds());
        let stored_after = stored();
        let replica_lag = sampler.and_then(|s| s.finish());
        let out = out??;
        let stages = o.rate.map(|_| {
            let mut rows = vec![
                crate::stages::StageRow::new("bench", "pace", &out.pace),
                crate::stages::StageRow::new("bench", "send call", &out.send_call),
            ];
            if let Some(addrs) = &stage_brokers {
                match crate::stages::fetch(&self.namesrv, addrs, false) {
                    Ok(h) => rows.extend(crate::stages::broker_rows(&h)),
                    Err(e) => note(self.args.json, &format!("bench: {e}")),
                }
            }
            rows
        });
        let latency_of = if o.rate.is_some() {
            "scheduled send→ack"
        } else {
            "send→ack"
        };
        let mut r = self.report(Figures {
            mode,
            messages: out.acked,
            seconds: out.seconds,
            latency_of,
            latency: &out.latency,
            errors: out.errors,
            error_detail: out.error_detail.clone(),
            settings: self.settings(&o),
        });
        r.disk_ratio = self
            .disk
            .as_ref()
            .map(|d| r.mb_per_sec / d.write_mb_per_sec);
        if let (Some(b), Some(a)) = (stored_before, stored_after) {
            let (messages, bytes) = (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1));
            if messages > 0 {
                let log = r.msgs_per_sec * (bytes as f64 / messages as f64) / 1e6;
                r.log_mb_per_sec = Some(log);
                r.log_disk_ratio = self.disk.as_ref().map(|d| log / d.write_mb_per_sec);
            }
        }
        r.broker_memory = self.memory();
        r.host_floor = floor;
        r.stages = stages;
        r.replica_lag = replica_lag;
        if let (Some(b), Some(a)) = (cpu_before, cpu_after) {
            let per_m = |x: Option<f64>, y: Option<f64>| match (x, y) {
                (Some(x), Some(y)) if out.acked > 0 => Some((y - x) / out.acked as f64 * 1e6),
                _ => None,
            };
            r.broker_cpu_s_per_m = per_m(b.0, a.0);
            r.slave_cpu_s_per_m = per_m(b.1, a.1);
        }
        self.curves.push((mode.to_owned(), out.latency.curve_us()));
        self.reports.push(r);
        Ok(out)
    }

    fn memory(&mut self) -> Option<cluster::Memory> {
        self.cluster.as_mut().and_then(|c| c.sample_memory())
    }

    fn consume_catch_up(&mut self, verifier: Option<Arc<Verifier>>) -> Result<ConsumeOutcome> {
        let limit = match (
            self.args.namesrv.is_some(),
            self.args.messages,
            self.args.duration,
        ) {
            // Against a remote cluster, --messages / --duration bound the consume run itself.
            (true, Some(m), _) => Some(Limit::Messages(m)),
            (true, None, Some(d)) => Some(Limit::Duration(Duration::from_secs_f64(d))),
            _ => None,
        };
        let o = self.consume_options(limit);
        let p = Arc::new(Progress::default());
        let p2 = Arc::clone(&p);
        let v2 = verifier.clone();
        let out = self.watch("consume", &p, move || {
            consume::run(&o, Mode::CatchUp, v2, p2, None)
        })??;
        let (errors, mut detail) = verdict(&out, verifier.as_deref());
        detail.extend(out.error_detail.iter().cloned());
        let settings = serde_json::json!({
            "topic": self.topic,
            "consumers": self.consume_options(None).consumers,
            "pull_batch": self.args.pull_batch,
            "from": "first offset of each queue, to the last as of the start",
        });
        let mut r = self.report(Figures {
            mode: "consume",
            messages: out.received,
            seconds: out.seconds,
            latency_of: "pull round trip",
            latency: &out.latency,
            errors,
            error_detail: detail,
            settings,
        });
        r.bytes = out.bytes;
        r.mb_per_sec = Report::rate(out.received, out.bytes, out.seconds).1;
        r.broker_memory = self.memory();
        self.curves
            .push(("consume (pull)".to_owned(), out.latency.curve_us()));
        self.reports.push(r);
        Ok(out)
    }

    fn e2e(&mut self) -> Result<()> {
        let po = self.produce_options();
        let capacity: Vec<u64> = (0..po.producers)
            .map(|i| {
                po.limit
                    .share(i, po.producers)
                    .unwrap_or_else(|| match (po.rate, po.limit) {
                        (Some(r), Limit::Duration(d)) => {
                            ((r / po.producers as f64) * d.as_secs_f64() * 1.1) as u64
                                + po.batch as u64
                        }
                        _ => FOLLOW_CAPACITY_MAX,
                    })
            })
            .collect();
        let verifier = Arc::new(Verifier::with_capacity(&capacity));
        let done = Arc::new(AtomicBool::new(false));
        let co = self.consume_options(None);
        let cp = Arc::new(Progress::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let consumer = {
            let v = Arc::clone(&verifier);
            let done = Arc::clone(&done);
            let cp = Arc::clone(&cp);
            std::thread::Builder::new()
                .name("e2e-consume".into())
                .spawn(move || {
                    consume::run(&co, Mode::Follow { done }, Some(v), cp, Some(ready_tx))
                })?
        };
        if ready_rx.recv().is_err() {
            return match consumer.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(anyhow!("the e2e consumers failed to start")),
            };
        }
        let produced = self.produce("e2e-produce", po);
        match &produced {
            Ok(out) => verifier.finish(&out.sent_per_producer, out.acked),
            Err(_) => verifier.finish(&[], 0),
        }
        done.store(true, Ordering::Release);
        let consumed = consumer
            .join()
            .map_err(|_| anyhow!("the e2e consumer panicked"))?;
        let _ = produced?;
        let out = consumed?;
        let (errors, mut detail) = verdict(&out, Some(&verifier));
        detail.extend(out.error_detail.iter().cloned());
        let settings = serde_json::json!({
            "topic": self.topic,
            "consumers": self.consume_options(None).consumers,
            "pull_batch": self.args.pull_batch,
        });
        let mut r = self.report(Figures {
            mode: "e2e-consume",
            messages: out.received,
            seconds: out.seconds,
            latency_of: "scheduled send→delivery",
            latency: &out.latency,
            errors,
            error_detail: detail,
            settings,
        });
        r.bytes = out.bytes;
        r.mb_per_sec = Report::rate(out.received, out.bytes, out.seconds).1;
        r.broker_memory = self.memory();
        self.curves
            .push(("e2e send→delivery".to_owned(), out.latency.curve_us()));
        self.reports.push(r);
        Ok(())
    }

    /// Prints the table (or JSON lines), draws the plot; true when no run had errors.
    fn finish(mut self) -> Result<bool> {
        if let Some(c) = self.cluster.as_mut() {
            c.stop();
        }
        if self.args.json {
            if let Some(d) = &self.disk {
                println!(
                    "{}",
                    serde_json::to_string(&serde_json::json!({
                        "mode": "disk",
                        "disk": d,
                        "commit": self.commit,
                        "machine": self.machine,
                    }))?
                );
            }
            for r in &self.reports {
                println!("{}", r.json());
            }
        } else {
            print!("{}", self.header());
            if let Some(d) = &self.disk {
                print!("{}", disk::table(d));
            }
            print!("{}", report::table(&self.reports));
        }
        if let Some(path) = &self.args.plot {
            let title = format!("corvus latency percentiles ({} B messages)", self.args.size);
            crate::plot::percentile_svg(path, &title, &self.curves)?;
            note(
                self.args.json,
                &format!("bench: latency plot written to {}", path.display()),
            );
        }
        let interrupted = cluster::stopping();
        if interrupted {
            eprintln!("bench: interrupted; the figures above cover the runs up to then");
        }
        Ok(!interrupted && self.reports.iter().all(|r| r.errors == 0))
    }

    fn header(&self) -> String {
        let m = &self.machine;
        let target = match &self.cluster {
            Some(_) => format!(
                "local broker: profile {}, {} core(s)",
                self.args.profile, self.args.broker_cores
            ),
            None => format!("cluster {}", self.namesrv),
        };
        format!(
            "corvus bench @ {} on {} CPU(s), {}, {}; {}; {} B messages\n",
            self.commit, m.nproc, m.cpu_model, m.kernel, target, self.args.size
        )
    }
}

/// One run's figures, for [`Session::report`].
struct Figures<'a> {
    mode: &'a str,
    messages: u64,
    seconds: f64,
    latency_of: &'a str,
    latency: &'a crate::stats::Latency,
    errors: u64,
    error_detail: Vec<String>,
    settings: serde_json::Value,
}

fn verdict(out: &ConsumeOutcome, verifier: Option<&Verifier>) -> (u64, Vec<String>) {
    match verifier {
        Some(v) => {
            let d = v.verdict();
            (d.errors() + out.errors, d.details())
        }
        None => (out.errors, Vec::new()),
    }
}

fn measure(dir: &std::path::Path, json: bool) -> Result<DiskReport> {
    note(
        json,
        &format!("bench: measuring the disk under {}", dir.display()),
    );
    let r = disk::run(&dir.join("disk"), DiskOptions::default())?;
    let _ = std::fs::remove_dir(dir.join("disk"));
    Ok(r)
}

fn quickstart(q: QuickArgs) -> Result<bool> {
    let mut s = Session::open(q.run, true)?;
    let out = s.produce("produce", s.produce_options())?;
    if !cluster::stopping() {
        let verifier = Arc::new(Verifier::new(&out.sent_per_producer, out.acked));
        s.consume_catch_up(Some(verifier))?;
    }
    if q.latency_rate > 0.0 && !cluster::stopping() {
        // Single-message sends, each acknowledged by the broker, paced open-loop at the rate:
        // one thread cannot wait for each answer before the next send and still keep the
        // schedule, so sends are pipelined (up to 256 in flight) and every latency runs from
        // the send's scheduled time to its acknowledgement.
        let mut o = s.produce_options();
        o.batch = 1;
        o.sync = false;
        o.inflight = 256;
        o.producers = 1;
        o.rate = Some(q.latency_rate);
        o.limit = Limit::Duration(Duration::from_secs_f64(q.latency_duration));
        s.produce("latency", o)?;
    }
    s.finish()
}

fn produce_cmd(a: RunArgs) -> Result<bool> {
    let mut s = Session::open(a, true)?;
    if s.disk.is_none() && !s.args.json {
        eprintln!("bench: no disk figure (pass --disk-dir DIR to compare with a disk's limit)");
    }
    s.produce("produce", s.produce_options())?;
    s.finish()
}

fn consume_cmd(a: RunArgs) -> Result<bool> {
    let mut s = Session::open(a, false)?;
    let verifier = if s.cluster.is_some() {
        // A fresh local cluster has nothing to read: produce first.
        let out = s.produce("produce", s.produce_options())?;
        Some(Arc::new(Verifier::new(&out.sent_per_producer, out.acked)))
    } else {
        None
    };
    if !cluster::stopping() {
        s.consume_catch_up(verifier)?;
    }
    s.finish()
}

fn e2e_cmd(a: RunArgs) -> Result<bool> {
    let mut s = Session::open(a, false)?;
    s.e2e()?;
    s.finish()
}

fn disk_cmd(d: DiskArgs) -> Result<bool> {
    let dir: PathBuf = d.dir.unwrap_or_else(std::env::temp_dir);
    let r = disk::run(
        &dir.join(format!("corvus-bench-disk-{}", std::process::id())),
        DiskOptions {
            total_bytes: d.mib << 20,
            ..DiskOptions::default()
        },
    );
    let _ = std::fs::remove_dir(dir.join(format!("corvus-bench-disk-{}", std::process::id())));
    let r = r?;
    if d.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "mode": "disk",
                "disk": r,
                "commit": machine::commit(),
                "machine": Machine::detect(),
            }))?
        );
    } else {
        print!("{}", disk::table(&r));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_room_stays_under_what_the_filesystem_has_free() {
        let dir = tempfile::tempdir().unwrap();
        let room = disk_room_bytes(dir.path()).unwrap();
        let avail = shard::statvfs_free_bytes(dir.path()).unwrap();
        assert!(room <= avail, "{room} > {avail}");
        assert!(disk_room_bytes(std::path::Path::new("/no/such/dir")).is_none());
    }
}
