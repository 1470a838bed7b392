//! A core's life: built from its parts ([`Core::new`]), serving the mesh and running its own
//! tasks ([`Core::serve_mesh`], [`Core::spawn_tasks`]), and stopped in order ([`Core::stop`]).
//! The broker binary and the in-process tests start cores the same way; only the binary
//! adds sockets, listeners and threads.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shard::Shard;

use crate::config::BrokerRole;
use crate::core::{Core, CoreStats};
use crate::groups::{Membership, OffsetTable};
use crate::ha::{CoreHa, Host};
use crate::link::{ClientLink, NoClients};
use crate::mesh::{self, Mesh, MeshReceivers};
use crate::shared::Shared;
use crate::sub_groups::SubGroupTable;
use crate::topics::{TopicStore, TopicTable};

/// What a core is built from: its shards opened, their group offsets loaded, its end of the
/// mesh joined, and its replication ends.
pub struct CoreParts {
    pub id: u16,
    pub shared: Arc<Shared>,
    pub shards: HashMap<u16, Shard>,
    pub offsets: HashMap<u16, RefCell<OffsetTable>>,
    pub mesh: Rc<Mesh>,
    pub topics: TopicTable,
    /// The subscription group configs: core 0's only.
    pub sub_groups: Option<SubGroupTable>,
    pub ha: CoreHa,
}

/// Loads one of a core's shards' group offsets (kept in its directory) and opens the shard,
/// as a core's start does; the error names the shard.
pub async fn open_shard(cfg: shard::ShardConfig) -> Result<(Shard, RefCell<OffsetTable>), String> {
    let sid = cfg.shard_id;
    let failed = |e: &dyn std::fmt::Display| format!("cannot open shard {sid}: {e}");
    let offsets = OffsetTable::load(&cfg.dir).map_err(|e| failed(&e))?;
    let shard = Shard::open(cfg).await.map_err(|e| failed(&e))?;
    Ok((shard, RefCell::new(offsets)))
}

/// Longest a core waits for the sends it took before the stop to be answered, and then
/// for the other cores to do the same. A send waits at most for back-pressure or a group
/// commit (milliseconds) or an auto-created topic's registration (3 s); past this the
/// shards close anyway and a send still waiting is answered with an error.
const SEND_DRAIN_MAX: Duration = Duration::from_secs(10);
/// How often the drain looks again. Only while stopping: the counts it waits for live on
/// other threads, and a poll this short adds at most a millisecond to the stop.
const SEND_DRAIN_POLL: Duration = Duration::from_millis(1);

impl Core {
    /// The core of `parts`; it reaches no client until a front end links itself
    /// ([`Core::set_link`]).
    pub fn new(parts: CoreParts) -> Rc<Core> {
        let CoreParts {
            id,
            shared,
            shards,
            offsets,
            mesh,
            topics,
            sub_groups,
            ha,
        } = parts;
        // Leases are timed by the broker's clock, whoever loaded the tables.
        for table in offsets.values() {
            table.borrow_mut().set_clock(shared.clock.clone());
        }
        let no_clients: Weak<dyn ClientLink> = Weak::<NoClients>::new();
        let broker_stats = RefCell::new(crate::broker_stats::BrokerStats::new(
            &shared.config.cluster_name,
            shared.clock.now(),
        ));
        let live = RefCell::new(Rc::new(shared.config.clone()));
        let rocketmq = crate::rocketmq_metrics::RocketMqState::new(
            &shared.config.cluster_name,
            &shared.config.broker_name,
            id,
            shared.cores,
        );
        let dedup = RefCell::new(crate::dedup::Window::new(
            crate::dedup::WindowLimits::share(&shared.config, shared.cores),
        ));
        let shared_cores = shared.cores;
        Rc::new(Core {
            id,
            ha,
            send_latency: shared.metrics.send_latency(id),
            send_rpc_latency: shared.metrics.send_rpc_latency(&rocketmq.node),
            rocketmq,
            store_hosts: (0..shared.cores).map(|c| shared.store_host(c)).collect(),
            membership: (id == 0).then(|| {
                let base = u64::try_from(shared.clock.wall_ms()).unwrap_or(1);
                Membership::new(
                    Duration::from_millis(shared.config.consumer_timeout_ms),
                    base,
                )
                .with_clock(shared.clock.clone())
            }),
            shared,
            shards,
            mesh,
            topics: RefCell::new(topics),
            stats: CoreStats::default(),
            broker_stats,
            offsets,
            sends_in_flight: Cell::new(0),
            stages: crate::stages::SendStages::new(),
            topics_persist: glommio::sync::Semaphore::new(1),
            topic_store: RefCell::new(TopicStore::default()),
            queue_numbers: Default::default(),
            transactions: Default::default(),
            pop: Default::default(),
            lite: Default::default(),
            priority: Default::default(),
            timer_doors: Default::default(),
            sql92: Default::default(),
            sub_groups: sub_groups.map(RefCell::new),
            sub_groups_persist: glommio::sync::Semaphore::new(1),
            link: RefCell::new(no_clients),
            live,
            config_updates: glommio::sync::Semaphore::new(1),
            dedup,
            quotas: crate::quota::Quotas::new(id, shared_cores),
        })
    }

    /// Serves what the other cores ask of this one over the mesh, for good.
    pub fn serve_mesh(self: &Rc<Self>, receivers: MeshReceivers) {
        let serving = self.clone();
        mesh::spawn_receivers(
            self.mesh.clone(),
            receivers,
            self.shared.config.inbox_capacity,
            move |from, token, req| {
                let core = serving.clone();
                async move {
                    let reply = core.serve_remote(req).await;
                    core.mesh.reply(from, token, reply).await;
                }
            },
        );
    }

    /// This core as replication holds it.
    pub fn as_host(self: &Rc<Self>) -> Rc<Host> {
        self.clone()
    }

    /// The kernel's own tasks: each local shard's timer and POP windows, the periodic offset
    /// flush, and on core 0 the group-change notices, the trace topic and the membership
    /// expiry; every core checks its undecided transactions. The returned tasks end at [`Core::stop`];
    /// the timers run until the executor ends.
    pub fn spawn_tasks(self: &Rc<Self>) -> Vec<glommio::Task<()>> {
        let shared = &self.shared;
        for &shard in self.shards.keys() {
            glommio::spawn_local(crate::timer::run(self.clone(), shard)).detach();
            let core = self.clone();
            glommio::spawn_local(async move { crate::pop::preload(&core, shard).await }).detach();
        }
        let mut tasks = Vec::new();
        {
            let core = self.clone();
            let every = Duration::from_millis(shared.config.offset_flush_interval_ms);
            tasks.push(glommio::spawn_local(async move {
                loop {
                    glommio::timer::sleep(every).await;
                    core.flush_offsets().await;
                }
            }));
        }
        if self.membership.is_some() {
            let core = self.clone();
            tasks.push(glommio::spawn_local(async move {
                core.notify_group_changes().await;
            }));
        }
        // RocketMQ's trace topic with `trace_topic_enable`, on a master (a slave keeps its
        // master's topic table).
        if self.id == 0
            && shared.config.trace_topic_enable
            && shared.config.broker_role != BrokerRole::Slave
        {
            let core = self.clone();
            glommio::spawn_local(async move {
                core.ensure_trace_topic().await;
            })
            .detach();
        }
        tasks.push(glommio::spawn_local(crate::transaction::check_loop(
            self.clone(),
        )));
        tasks.push(glommio::spawn_local(crate::quota::exchange(self.clone())));
        if let Some(period) = self.membership.as_ref().map(|m| m.expiry_period()) {
            let core = self.clone();
            tasks.push(glommio::spawn_local(async move {
                loop {
                    glommio::timer::sleep(period).await;
                    if let Some(m) = &core.membership {
                        m.expire();
                    }
                }
            }));
        }
        tasks
    }

    /// The graceful stop of this core, once `shared.shutdown` is set. Every core already
    /// refuses new sends (`Core::send` checks the flag per request), so:
    /// 1. end `tasks` (the accept loops and the kernel's own tasks);
    /// 2. wait until the sends this core took have been answered (acknowledged from memory,
    ///    or, under SYNC_FLUSH, from disk);
    /// 3. wait until every core has done so, since a send taken here may be appending on a
    ///    shard of another core;
    /// 4. close every shard: it refuses appends, then writes and fdatasyncs everything it
    ///    took;
    /// 5. wait until the in-sync slaves have all of it (`ha::drain_slaves`), then end the
    ///    replication tasks `ha_tasks`;
    /// 6. persist the group offsets.
    ///
    /// Pulls and group requests on open connections are served until the core returns.
    pub async fn stop(
        self: &Rc<Self>,
        tasks: Vec<glommio::Task<()>>,
        ha_tasks: Vec<glommio::Task<()>>,
    ) {
        let shared = &self.shared;
        for t in tasks {
            t.cancel().await;
        }
        let deadline = Instant::now() + SEND_DRAIN_MAX;
        while self.sends_in_flight.get() > 0 && Instant::now() < deadline {
            glommio::timer::sleep(SEND_DRAIN_POLL).await;
        }
        if self.sends_in_flight.get() > 0 {
            tracing::warn!(
                core = self.id,
                sends = self.sends_in_flight.get(),
                "sends still unanswered at shutdown; closing the shards anyway"
            );
        }
        shared.cores_drained.fetch_add(1, Ordering::SeqCst);
        while shared.cores_drained.load(Ordering::SeqCst) < shared.cores as usize
            && Instant::now() < deadline
        {
            glommio::timer::sleep(SEND_DRAIN_POLL).await;
        }
        for (sid, shard) in self.shards.iter() {
            if let Err(e) = shard.close().await {
                tracing::error!(shard = sid, "flush at shutdown failed: {e}");
            }
        }
        // Replication last: slaves get what was stored up to the close, and in controller
        // mode the heartbeat thread hands the group over to one that has all of it.
        crate::ha::drain_slaves(&self.as_host()).await;
        for t in ha_tasks {
            t.cancel().await;
        }
        // A write cut short by the cancellation above is redone here; the lite topics'
        // floors as they are now go with it.
        for (&shard, table) in &self.offsets {
            self.lite_settle(shard, true);
            table.borrow_mut().mark_dirty();
        }
        self.flush_offsets().await;
        self.mesh.fail_pending();
    }
}
