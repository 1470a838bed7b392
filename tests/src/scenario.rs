//! The pieces a fault scenario is made of, so that one is a short test: the processes of a
//! run by name ([`Cast`], which a [`crate::schedule`] acts on), the NameServer and brokers
//! started inside namespace hosts, and the workload binary with its histories
//! ([`Workload`]).
//!
//! ```text
//! let net = Net::new_or_skip("ha", &["ns", "m", "s", "client"])?;
//! let dir = tempfile::tempdir()?;
//! let mut cast = Cast::new(dir.path());
//! let ns = cast.namesrv("namesrv", net.host("ns"), 9876);
//! cast.broker("master", net.host("m"), opts_master);
//! let wl = Workload::new(net.host("client"), &ns, "Topic", dir.path());
//! let producers = wl.produce(&Produce::default());
//! schedule::run(&sched, &net, &mut cast)?;
//! net.heal()?;
//! producers.wait(limit, "the producers");
//! wl.drain_and_check(limit).assert_safe();
//! ```

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::checker::{check, Report};
use crate::history::{read_jsonl, Delivery, Op, Stored};
use crate::netns::Host;
use crate::proxy::FaultProxy;
use crate::{bin, broker_command, run_until_exit, BrokerOpts, Proc};

/// A child process killed when dropped (a workload while it runs).
pub struct Background(Child);

impl Background {
    /// Starts `cmd` with its stdout kept (for its last line) and stderr shown.
    pub fn spawn(mut cmd: Command) -> Background {
        Background(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| panic!("start {cmd:?}: {e}")),
        )
    }

    /// Waits (bounded) for a successful exit and returns its stdout; panics otherwise.
    pub fn wait(mut self, limit: Duration, what: &str) -> String {
        let deadline = Instant::now() + limit;
        loop {
            match self.0.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) => panic!("{what} did not finish within {limit:?}"),
                Err(e) => panic!("{what}: {e}"),
            }
        }
        let mut out = String::new();
        if let Some(mut s) = self.0.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        let status = self.0.wait().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(status.success(), "{what} failed ({status}): {out}");
        out
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `cmd` run under `taskset -c <cpu>` (taskset execs it, so the pid is the program's).
pub fn on_cpu(cpu: usize, cmd: &Command) -> Command {
    let mut taskset = Command::new("taskset");
    taskset
        .args(["-c", &cpu.to_string()])
        .arg(cmd.get_program());
    crate::launched_by(taskset, cmd)
}

type Starter = Box<dyn FnMut() -> Proc>;

struct Member {
    proc: Option<Proc>,
    start: Starter,
}

/// The processes of a run, by name: started, killed and restarted through the closure
/// that starts them. Implements [`crate::schedule::Nodes`].
pub struct Cast {
    logs: PathBuf,
    members: BTreeMap<String, Member>,
    proxies: BTreeMap<String, FaultProxy>,
    /// Nodes whose data live on a filesystem of the test's own: its mount point.
    disks: BTreeMap<String, PathBuf>,
}

impl Cast {
    /// Logs go to `<dir>/logs`.
    pub fn new(dir: &Path) -> Cast {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("create {}: {e}", logs.display()));
        Cast {
            logs,
            members: BTreeMap::new(),
            proxies: BTreeMap::new(),
            disks: BTreeMap::new(),
        }
    }

    /// Says that `node`'s data live on the filesystem mounted at `mnt`, one of the test's
    /// own (a [`crate::loop_fs::LoopFs`]), which a [`crate::schedule::Fault::DiskFull`] may
    /// fill.
    pub fn data_on(&mut self, node: &str, mnt: &Path) {
        self.disks.insert(node.to_owned(), mnt.to_owned());
    }

    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// Adds `name`, started (now and after each kill) by `start`.
    pub fn add(&mut self, name: &str, mut start: impl FnMut() -> Proc + 'static) -> &Proc {
        let proc = start();
        self.members.insert(
            name.to_owned(),
            Member {
                proc: Some(proc),
                start: Box::new(start),
            },
        );
        self.get(name)
    }

    /// The running process `name`; panics if it is not running (a test bug).
    pub fn get(&self, name: &str) -> &Proc {
        self.members
            .get(name)
            .and_then(|m| m.proc.as_ref())
            .unwrap_or_else(|| panic!("{name} is not running"))
    }

    /// Adds a NameServer on `host`:`port`; returns its address.
    pub fn namesrv(&mut self, name: &str, host: &Host, port: u16) -> String {
        let (host, logs, label) = (host.clone(), self.logs.clone(), name.to_owned());
        let mut n = 0;
        self.add(name, move || {
            n += 1;
            let mut cmd = Command::new(bin("namesrv"));
            cmd.args(["--listen", &host.addr(port)]);
            Proc::start(
                host.wrap(&cmd),
                "namesrv listening on ",
                logs.join(format!("{label}-{n}.log")),
            )
        })
        .addr
        .clone()
    }

    /// Adds a broker started with `opts` on `host` (set `opts.listen` to the host's
    /// address, and `--advertise-addr` in `opts.extra` when clients go through a proxy).
    pub fn broker(&mut self, name: &str, host: &Host, opts: BrokerOpts) -> &Proc {
        self.broker_on_cpu(name, host, opts, None)
    }

    /// [`Cast::broker`] under `taskset -c <cpu>` when `cpu` is given, so two brokers of a
    /// 2-core machine (each `--cores 1`) do not share a CPU.
    pub fn broker_on_cpu(
        &mut self,
        name: &str,
        host: &Host,
        opts: BrokerOpts,
        cpu: Option<usize>,
    ) -> &Proc {
        let (host, logs, label) = (host.clone(), self.logs.clone(), name.to_owned());
        let mut n = 0;
        self.add(name, move || {
            n += 1;
            let mut cmd = broker_command(&opts, &logs);
            if let Some(cpu) = cpu {
                cmd = on_cpu(cpu, &cmd);
            }
            Proc::start(
                host.wrap(&cmd),
                "broker listening on ",
                logs.join(format!("{label}-{n}.log")),
            )
        })
    }

    pub fn add_proxy(&mut self, name: &str, proxy: FaultProxy) {
        self.proxies.insert(name.to_owned(), proxy);
    }

    pub fn proxy_mut(&mut self, name: &str) -> &mut FaultProxy {
        self.proxies
            .get_mut(name)
            .unwrap_or_else(|| panic!("no proxy {name}"))
    }

    /// Every proxy passes again.
    pub fn pass_all(&mut self) -> Result<(), String> {
        for p in self.proxies.values_mut() {
            p.pass()?;
        }
        Ok(())
    }
}

impl crate::schedule::Nodes for Cast {
    fn pid(&self, node: &str) -> Option<i32> {
        self.members
            .get(node)
            .and_then(|m| m.proc.as_ref())
            .map(Proc::pid)
    }

    fn kill9(&mut self, node: &str) {
        let m = self
            .members
            .get_mut(node)
            .unwrap_or_else(|| panic!("no node {node}"));
        if let Some(mut p) = m.proc.take() {
            p.kill9();
        }
    }

    fn restart(&mut self, node: &str) {
        self.kill9(node);
        let m = self
            .members
            .get_mut(node)
            .unwrap_or_else(|| panic!("no node {node}"));
        m.proc = Some((m.start)());
    }

    fn proxy(&mut self, name: &str) -> Option<&mut FaultProxy> {
        self.proxies.get_mut(name)
    }

    fn disk(&self, node: &str) -> Option<PathBuf> {
        self.disks.get(node).cloned()
    }
}

/// How the producers of [`Workload::produce`] send.
#[derive(Debug, Clone)]
pub struct Produce {
    pub producers: usize,
    /// Per producer per second; 0 = as fast as answers come.
    pub rate: u64,
    pub duration: Duration,
    pub send_timeout_ms: u64,
    pub body_bytes: usize,
    /// The id prefix; several produce runs of one workload need different ones.
    pub name: String,
}

impl Default for Produce {
    fn default() -> Produce {
        Produce {
            producers: 2,
            rate: 100,
            duration: Duration::from_secs(10),
            send_timeout_ms: 1500,
            body_bytes: 256,
            name: "p".into(),
        }
    }
}

/// `corvus-workload` on one host against one topic, its files in one directory.
pub struct Workload {
    host: Host,
    namesrv: String,
    topic: String,
    dir: PathBuf,
}

impl Workload {
    pub fn new(host: &Host, namesrv: &str, topic: &str, dir: &Path) -> Workload {
        Workload {
            host: host.clone(),
            namesrv: namesrv.to_owned(),
            topic: topic.to_owned(),
            dir: dir.to_owned(),
        }
    }

    /// Creates the topic with `queues` queues through `mqadmin update-topic` from the
    /// host, retrying while the brokers register (at most 30 s).
    pub fn create_topic(&self, queues: u32) {
        let mut cmd = Command::new(bin("mqadmin"));
        cmd.args(["-n", &self.namesrv, "update-topic", "-t", &self.topic, "-q"])
            .arg(queues.to_string());
        let mut last = String::new();
        let created = crate::wait_for(Duration::from_secs(30), || {
            let (code, out) = run_until_exit(&mut self.host.wrap(&cmd), Duration::from_secs(20));
            last = out;
            (code == Some(0)).then_some(())
        });
        assert!(created.is_some(), "update-topic {}: {last}", self.topic);
    }

    /// `corvus-workload --namesrv .. --topic .. <args>` inside the host.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("corvus-workload"));
        cmd.args(["--namesrv", &self.namesrv, "--topic", &self.topic])
            .args(args);
        self.host.wrap(&cmd)
    }

    /// The history of the producers named `name`.
    pub fn history_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("history-{name}.jsonl"))
    }

    pub fn final_path(&self) -> PathBuf {
        self.dir.join("final.jsonl")
    }

    pub fn deliveries_path(&self) -> PathBuf {
        self.dir.join("deliveries.jsonl")
    }

    /// Starts producers in the background.
    pub fn produce(&self, p: &Produce) -> Background {
        let history = self.history_path(&p.name);
        Background::spawn(self.command(&[
            "produce",
            "--history",
            &history.to_string_lossy(),
            "--name",
            &p.name,
            "--producers",
            &p.producers.to_string(),
            "--rate",
            &p.rate.to_string(),
            "--duration-ms",
            &p.duration.as_millis().to_string(),
            "--send-timeout-ms",
            &p.send_timeout_ms.to_string(),
            "--body-bytes",
            &p.body_bytes.to_string(),
        ]))
    }

    /// Starts a consumer tailing every queue for `duration`, in the background.
    pub fn consume(&self, duration: Duration) -> Background {
        Background::spawn(self.command(&[
            "consume",
            "--out",
            &self.deliveries_path().to_string_lossy(),
            "--duration-ms",
            &duration.as_millis().to_string(),
        ]))
    }

    /// Reads the final log (after the faults are healed); panics if that fails.
    pub fn drain(&self, limit: Duration) -> String {
        let (code, out) = run_until_exit(
            &mut self.command(&[
                "drain",
                "--out",
                &self.final_path().to_string_lossy(),
                "--timeout-ms",
                &limit.as_millis().to_string(),
            ]),
            limit + Duration::from_secs(10),
        );
        assert_eq!(code, Some(0), "drain: {out}");
        out
    }

    /// Every history of this directory (`history-*.jsonl`), the final log and the
    /// deliveries (if a consumer ran).
    pub fn read(&self) -> (Vec<Op>, Vec<Stored>, Vec<Delivery>) {
        let mut ops = Vec::new();
        let entries =
            std::fs::read_dir(&self.dir).unwrap_or_else(|e| panic!("{}: {e}", self.dir.display()));
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("history-") && name.ends_with(".jsonl") {
                ops.extend(read_jsonl::<Op>(&e.path()).unwrap_or_else(|e| panic!("{e}")));
            }
        }
        let stored = read_jsonl(&self.final_path()).unwrap_or_else(|e| panic!("{e}"));
        let deliveries = if self.deliveries_path().exists() {
            read_jsonl(&self.deliveries_path()).unwrap_or_else(|e| panic!("{e}"))
        } else {
            Vec::new()
        };
        (ops, stored, deliveries)
    }

    /// Starts `produce` and a consumer tailing the topic for as long, runs `sched` against
    /// `net` and `cast`, and checks that every fault began and ended; returns the producers
    /// and the consumer, still running, with what the schedule did.
    pub fn under_faults(
        &self,
        produce: &Produce,
        sched: &crate::schedule::Schedule,
        net: &crate::netns::Net,
        cast: &mut Cast,
    ) -> (Background, Background, Vec<crate::schedule::Event>) {
        let producers = self.produce(produce);
        let consumer = self.consume(produce.duration);
        let events = crate::schedule::run(sched, net, cast).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            events.len(),
            2 * sched.steps.len(),
            "every fault began and ended"
        );
        (producers, consumer, events)
    }

    /// The final log (as [`Workload::drain`] wrote it) as (queue number without the
    /// broker's name, offset, id), sorted: two brokers' logs compare equal when they hold
    /// the same messages at the same offsets.
    pub fn final_log(&self) -> Vec<(u32, u64, String)> {
        let mut v: Vec<(u32, u64, String)> = read_jsonl::<Stored>(&self.final_path())
            .unwrap_or_default()
            .into_iter()
            .map(|s| {
                let q = s
                    .queue
                    .rsplit('#')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(u32::MAX);
                (q, s.offset, s.id)
            })
            .collect();
        v.sort();
        v
    }

    /// Drains the final log and checks every history against it.
    pub fn drain_and_check(&self, limit: Duration) -> Report {
        let said = self.drain(limit);
        eprintln!("{}", said.trim());
        let (ops, stored, deliveries) = self.read();
        check(&ops, &stored, &deliveries)
    }
}
