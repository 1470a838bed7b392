//! Three `corvus-controller` processes on loopback, with their data directories, for the
//! controller's own tests and for brokers in controller mode.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use controller_proto::{Client, ClientConfig, Request, Response};

use crate::{free_ports, start_controller, wait_for, Proc};

/// Three controllers with their data dirs, restartable.
pub struct Controllers {
    _dir: tempfile::TempDir,
    pub logs: PathBuf,
    pub data: Vec<PathBuf>,
    pub addrs: Vec<String>,
    peers: String,
    extra: Vec<String>,
    pub procs: Vec<Option<Proc>>,
    /// The account the harness's own requests are signed as (controllers started with
    /// `--acl-file`); `None` signs nothing.
    pub credentials: Option<acl::Credentials>,
}

impl Controllers {
    pub fn start(heartbeat_timeout_ms: u64) -> Controllers {
        Self::start_with(heartbeat_timeout_ms, 100)
    }

    /// Three controllers with `--heartbeat-timeout-ms heartbeat_timeout_ms` and
    /// `--election-check-interval-ms election_check_interval_ms`.
    pub fn start_with(heartbeat_timeout_ms: u64, election_check_interval_ms: u64) -> Controllers {
        Self::start_with_flags(heartbeat_timeout_ms, election_check_interval_ms, &[])
    }

    /// [`Controllers::start_with`] and `flags` on every controller (`--acl-file` ...).
    pub fn start_with_flags(
        heartbeat_timeout_ms: u64,
        election_check_interval_ms: u64,
        flags: &[&str],
    ) -> Controllers {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let addrs: Vec<String> = free_ports(3)
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let data = (1..=3)
            .map(|i| dir.path().join(format!("ctl{i}")))
            .collect();
        let extra = vec![
            "--heartbeat-timeout-ms".to_owned(),
            heartbeat_timeout_ms.to_string(),
            "--election-check-interval-ms".to_owned(),
            election_check_interval_ms.to_string(),
        ]
        .into_iter()
        .chain(flags.iter().map(|f| (*f).to_owned()))
        .collect();
        let mut c = Controllers {
            _dir: dir,
            logs,
            data,
            addrs,
            peers,
            extra,
            procs: vec![None, None, None],
            credentials: None,
        };
        for i in 0..3 {
            c.start_one(i);
        }
        c
    }

    pub fn start_one(&mut self, i: usize) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        self.procs[i] = Some(start_controller(
            &self.logs,
            i as u64 + 1,
            &self.addrs[i],
            &self.peers,
            &self.data[i],
            &extra,
        ));
    }

    pub fn client(&self) -> Client {
        self.client_as(self.credentials.clone())
    }

    /// A client signing its requests as `credentials` (for controllers with `--acl-file`).
    pub fn client_as(&self, credentials: Option<acl::Credentials>) -> Client {
        Client::with_config(
            &self.addrs,
            ClientConfig {
                io_timeout_ms: 1000,
                attempts_max: 30,
                call_timeout_ms: 10_000,
                retry_backoff_ms: 50,
                credentials,
            },
        )
        .unwrap()
    }

    pub fn mq_addrs(&self) -> String {
        self.addrs.join(";")
    }

    /// The leader id once every running controller agrees on one.
    pub fn agreed_leader(&self, timeout: Duration) -> u64 {
        self.agreed_leader_other_than(timeout, None)
    }

    /// The leader id once every running controller agrees on one that is not `old` (the
    /// survivors of a crash name the dead leader until their election timeout).
    pub fn agreed_leader_other_than(&self, timeout: Duration, old: Option<u64>) -> u64 {
        wait_for(timeout, || {
            let mut seen = None;
            for (i, p) in self.procs.iter().enumerate() {
                if p.is_none() {
                    continue; // stopped on purpose
                }
                let config = ClientConfig {
                    credentials: self.credentials.clone(),
                    ..ClientConfig::default()
                };
                let mut c = Client::with_config(&[&self.addrs[i]], config).ok()?;
                match c.call_one(&Request::GetMetadata).ok()? {
                    Response::Metadata {
                        leader_id: Some(l), ..
                    } if seen.is_none_or(|s| s == l) => seen = Some(l),
                    _ => return None,
                }
            }
            seen.filter(|l| Some(*l) != old)
        })
        .unwrap_or_else(|| panic!("controllers agree on no leader; logs:\n{}", self.stderr()))
    }

    pub fn stderr(&self) -> String {
        self.procs
            .iter()
            .flatten()
            .map(|p| p.stderr())
            .collect::<Vec<_>>()
            .join("\n----\n")
    }
}

/// `group`'s record as the controllers `client` talks to have it (`None` when they do not
/// answer with one).
pub fn replica_info(client: &mut Client, group: &str) -> Option<controller_proto::ReplicaInfo> {
    match client
        .call(&Request::GetReplicaInfo {
            group: group.into(),
        })
        .ok()?
    {
        Response::Replica(info) => Some(info),
        _ => None,
    }
}

impl Controllers {
    /// `group`'s record, asked of these controllers.
    pub fn replica_info(&self, group: &str) -> Option<controller_proto::ReplicaInfo> {
        replica_info(&mut self.client(), group)
    }

    /// Waits (60 s at most) until `master` is `group`'s master with brokers 0 and 1 in sync;
    /// panics with the record and `logs` otherwise.
    pub fn wait_group(
        &self,
        group: &str,
        master: u64,
        logs: &[&Proc],
    ) -> controller_proto::ReplicaInfo {
        wait_for(Duration::from_secs(60), || {
            self.replica_info(group)
                .filter(|i| i.master_id == Some(master) && i.sync_state_set == [0, 1])
        })
        .unwrap_or_else(|| {
            panic!(
                "the group did not get master {master} with both in sync: {:?}\n{}",
                self.replica_info(group),
                logs.iter()
                    .map(|p| p.stderr())
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            )
        })
    }
}

/// A `role` (`SYNC_MASTER` or `ASYNC_MASTER`) broker of `group` in controller mode with
/// identity `id`, its tail ring in `ring` across its starts (what it acknowledged before a
/// kill -9 comes back from there).
pub fn controller_broker_opts(
    ns: &str,
    data: &std::path::Path,
    ring: &std::path::Path,
    group: &str,
    id: u64,
    controllers: &str,
    role: &str,
) -> crate::BrokerOpts {
    let mut o = crate::BrokerOpts::new(ns, data);
    o.name = group.into();
    o.tail_ring_dir = Some(ring.to_owned());
    o.ring_dir_guard = None;
    o.config_toml = Some(format!(
        "broker_role = \"{role}\"\nbroker_id = {id}\nenable_controller_mode = true\n\
         controller_addr = \"{controllers}\"\n"
    ));
    o
}

/// Three controllers (heartbeat timeout 3 s), a NameServer and a SYNC_MASTER group of two
/// brokers in controller mode (ids 0 and 1, each with a tail ring of its own across its
/// starts), once the controllers have made broker 0 master with both in sync.
pub struct ControllerGroup {
    pub ctl: Controllers,
    pub ns: Proc,
    pub logs: PathBuf,
    pub a_opts: crate::BrokerOpts,
    pub b_opts: crate::BrokerOpts,
    /// Broker 0, the first master.
    pub a: Proc,
    /// Broker 1, its slave.
    pub b: Proc,
    /// The group's record once both are in sync.
    pub first: controller_proto::ReplicaInfo,
    /// The data directories and rings, kept as long as the group.
    pub keep: (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir),
}

impl ControllerGroup {
    pub fn start(group: &str) -> ControllerGroup {
        Self::start_with(group, "SYNC_MASTER", 3000)
    }

    /// The same with `role` brokers and controllers whose heartbeat timeout (and master
    /// lease) is `heartbeat_timeout_ms`.
    pub fn start_with(group: &str, role: &str, heartbeat_timeout_ms: u64) -> ControllerGroup {
        let ctl = Controllers::start(heartbeat_timeout_ms);
        ctl.agreed_leader(Duration::from_secs(30));
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let ns = crate::start_namesrv(&logs);
        let (ring_a, ring_b) = (crate::ring_dir(), crate::ring_dir());
        let opts = |data: &str, ring: &std::path::Path, id| {
            controller_broker_opts(
                &ns.addr,
                &dir.path().join(data),
                ring,
                group,
                id,
                &ctl.mq_addrs(),
                role,
            )
        };
        let a_opts = opts("a", ring_a.path(), 0);
        let b_opts = opts("b", ring_b.path(), 1);
        let a = crate::start_broker(&a_opts, &logs);
        let b = crate::start_broker(&b_opts, &logs);
        let first = ctl.wait_group(group, 0, &[&a, &b]);
        ControllerGroup {
            ctl,
            ns,
            logs,
            a_opts,
            b_opts,
            a,
            b,
            first,
            keep: (dir, ring_a, ring_b),
        }
    }
}
