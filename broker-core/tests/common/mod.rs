//! The in-process test tier of the kernel: cores on their own glommio executors, joined by a
//! real mesh, their shards in a temporary directory, a master replication layer with no
//! slaves, and a fake client link in place of the front ends.
//!
//! A test starts a [`Cluster`], runs async blocks on a chosen core with [`Cluster::on`] (the
//! block gets that core's `Rc<Core>` and its result comes back to the test thread), reads what
//! the kernel asked of its clients through [`Cluster::link`], and stops it with
//! [`Cluster::stop`] (or by dropping it). Nothing here sleeps for a fixed time: every wait is
//! on a condition, bounded by [`WAIT_MAX`].

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use broker_core::core::PullBody;
use broker_core::lifecycle::CoreParts;
use broker_core::link::{ClientLink, LocalFuture};
use broker_core::mesh::{MeshLinks, PullOutcome, PullStatus};
use broker_core::reply::ReplyPush;
use broker_core::sub_groups::SubGroupTable;
use broker_core::topics::TopicTable;
use broker_core::{BrokerConfig, BrokerError, Core, Shared};
use bytes::Bytes;
use glommio::{LocalExecutorBuilder, Placement};
use message::{encode_record, MessageFields, RecordView};
use protocol::{
    CheckTransaction, ClientRunningInfo, CoreStatus, PullRequest, TopicConfig, TransactionState,
};

/// The longest any wait of a test lasts: a core's answer, a start, a condition.
pub const WAIT_MAX: Duration = Duration::from_secs(10);

/// io_uring memory per executor: small, so that the cores of parallel tests fit the default
/// 8 MiB locked-memory limit.
const IO_MEMORY_BYTES: usize = 1 << 20;

type Job = Box<dyn FnOnce(Rc<Core>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// What the kernel asked of the clients of one core, and how those clients answer.
#[derive(Default)]
pub struct LinkLog {
    /// `group_changed` calls, in order: (group, members).
    pub group_changes: Vec<(String, Vec<String>)>,
    /// Replies pushed to a connected requester: (client id, reply).
    pub pushed: Vec<(String, ReplyPush)>,
    /// Transaction checks this core's link was asked to make.
    pub checks: Vec<CheckTransaction>,
    /// The client ids with a connection to this core.
    pub connected: HashSet<String>,
    /// Producer groups with a producer connected here, and what it answers a check.
    pub producers: HashMap<String, TransactionState>,
    /// The clients connected here that answer what they are doing, and their answer.
    pub running: HashMap<String, ClientRunningInfo>,
    /// Connected clients told they lost a lite topic: (client id, lite topic).
    pub lite_unsubscribed: Vec<(String, String)>,
}

/// One core's fake client link, shared between the core (which calls it) and the test
/// thread (which reads and scripts it).
#[derive(Default)]
pub struct LinkState {
    log: Mutex<LinkLog>,
    changed: Condvar,
}

impl LinkState {
    pub fn log(&self) -> MutexGuard<'_, LinkLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, f: impl FnOnce(&mut LinkLog)) {
        f(&mut self.log());
        self.changed.notify_all();
    }

    /// Waits until `cond` holds on the log (at most [`WAIT_MAX`]); whether it did.
    pub fn wait_until(&self, cond: impl Fn(&LinkLog) -> bool) -> bool {
        let deadline = Instant::now() + WAIT_MAX;
        let mut log = self.log();
        loop {
            if cond(&log) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            log = self
                .changed
                .wait_timeout(log, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The front end a test core has: it records every request and answers as scripted.
struct FakeLink(Arc<LinkState>);

impl ClientLink for FakeLink {
    fn running_info(
        &self,
        client_id: &str,
    ) -> LocalFuture<'_, Option<Result<ClientRunningInfo, BrokerError>>> {
        let answer = self.0.log().running.get(client_id).cloned();
        Box::pin(async move { answer.map(Ok) })
    }

    fn connected(&self, client_id: &str) -> bool {
        self.0.log().connected.contains(client_id)
    }

    fn push_reply<'a>(
        &'a self,
        client_id: &'a str,
        reply: &'a ReplyPush,
    ) -> LocalFuture<'a, Result<bool, BrokerError>> {
        Box::pin(async move {
            let mut pushed = false;
            self.0.record(|log| {
                if log.connected.contains(client_id) {
                    log.pushed.push((client_id.to_owned(), reply.clone()));
                    pushed = true;
                }
            });
            Ok(pushed)
        })
    }

    fn lite_unsubscribed<'a>(
        &'a self,
        evicted: &'a broker_core::lite::Evicted,
    ) -> LocalFuture<'a, bool> {
        Box::pin(async move {
            let mut told = false;
            self.0.record(|log| {
                if log.connected.contains(&evicted.client) {
                    log.lite_unsubscribed
                        .push((evicted.client.clone(), evicted.lite.clone()));
                    told = true;
                }
            });
            told
        })
    }

    fn group_changed<'a>(&'a self, group: &'a str, members: &'a [String]) -> LocalFuture<'a, ()> {
        Box::pin(async move {
            self.0
                .record(|log| log.group_changes.push((group.to_owned(), members.to_vec())));
        })
    }

    fn check_transaction(
        &self,
        check: CheckTransaction,
    ) -> LocalFuture<'_, Option<Option<TransactionState>>> {
        Box::pin(async move {
            let mut answer = None;
            self.0.record(|log| {
                answer = log.producers.get(&check.producer_group).copied();
                if answer.is_some() {
                    log.checks.push(check);
                }
            });
            answer.map(Some)
        })
    }

    fn fill_status(&self, _status: &mut CoreStatus) {}
}

/// Cores running in this process.
pub struct Cluster {
    pub shared: Arc<Shared>,
    pub cores: u16,
    pub shard_count: u16,
    jobs: Vec<flume::Sender<Job>>,
    threads: Vec<glommio::ExecutorJoinHandle<()>>,
    links: Vec<Arc<LinkState>>,
    dir: Option<tempfile::TempDir>,
}

/// Where a test's data goes: memory (`/dev/shm`) when the machine has it, so that the
/// fdatasyncs of the shards' close and the offset flushes cost nothing; else the temporary
/// directory.
fn temp_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("broker-core-")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::tempdir().expect("a temporary directory")
}

/// The test config: small files, no NameServer, short intervals; `tweak` changes the rest.
pub fn test_config(data_dir: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        data_dir: data_dir.to_owned(),
        io_memory_bytes: IO_MEMORY_BYTES as u64,
        commit_log_segment_bytes: 4 << 20,
        message_bytes_max: 256 << 10,
        offset_flush_interval_ms: 100,
        ..BrokerConfig::default()
    }
}

impl Cluster {
    /// `cores` cores over `shard_count` shards, with the default test config.
    pub fn start(cores: u16, shard_count: u16) -> Cluster {
        Cluster::start_with(cores, shard_count, |_| {})
    }

    /// `cores` cores over `shard_count` shards, the test config changed by `tweak`.
    pub fn start_with(
        cores: u16,
        shard_count: u16,
        tweak: impl FnOnce(&mut BrokerConfig),
    ) -> Cluster {
        let dir = temp_dir();
        let mut config = test_config(dir.path());
        tweak(&mut config);
        Cluster::start_in(dir, cores, shard_count, config)
    }

    /// Stops every core as [`Cluster::stop`] does and starts `cores` cores again on the same
    /// data and config, as a broker restarted after a clean stop.
    pub fn restart(mut self, cores: u16) -> Cluster {
        self.stop_cores();
        let dir = self.dir.take().expect("the cluster's data directory");
        let config = self.shared.config.clone();
        Cluster::start_in(dir, cores, self.shard_count, config)
    }

    /// Starts `cores` cores on a copy of this cluster's data taken while it runs: the files
    /// as a kill -9 would leave them (no stop flushed the offsets or wrote a clean-stop
    /// marker). With sync flush every acknowledged append is in them. This cluster keeps
    /// running; the test stops both.
    pub fn crash_copy(&self, cores: u16) -> Cluster {
        let from = self
            .dir
            .as_ref()
            .expect("the cluster's data directory")
            .path();
        let dir = temp_dir();
        copy_dir(from, dir.path()).expect("the data directory copies");
        let mut config = self.shared.config.clone();
        config.data_dir = dir.path().to_owned();
        Cluster::start_in(dir, cores, self.shard_count, config)
    }

    fn start_in(
        dir: tempfile::TempDir,
        cores: u16,
        shard_count: u16,
        config: BrokerConfig,
    ) -> Cluster {
        let topics = TopicTable::load(dir.path()).expect("the topic table loads");
        let sub_groups = SubGroupTable::load(dir.path()).expect("the group table loads");
        let shared = Arc::new(Shared::new(
            config,
            shard_count,
            cores,
            "127.0.0.1:10911".into(),
            Default::default(),
            topics.all(),
        ));
        // Every core's mesh handle is cloned here, before any executor runs (as the broker
        // does: glommio's builder counts its clones in an `Rc`).
        let links = MeshLinks::new(cores as usize, shared.config.inbox_capacity as usize);
        let mut mesh_links: Vec<MeshLinks> = (0..cores).map(|_| links.clone()).collect();
        drop(links);
        let (ready_tx, ready_rx) = mpsc::channel::<(u16, Result<(), String>)>();
        let mut cluster = Cluster {
            shared: shared.clone(),
            cores,
            shard_count,
            jobs: Vec::new(),
            threads: Vec::new(),
            links: Vec::new(),
            dir: None,
        };
        for id in 0..cores {
            let mesh_link = mesh_links.remove(0);
            let (job_tx, job_rx) = flume::unbounded::<Job>();
            let link = Arc::new(LinkState::default());
            let shard_dirs: Vec<(u16, std::path::PathBuf)> = (0..shard_count)
                .filter(|&s| protocol::shard_core(s, cores) == id)
                .map(|s| (s, dir.path().join("shards").join(s.to_string())))
                .collect();
            let shared = shared.clone();
            let topics = topics.clone();
            let sub_groups = (id == 0).then(|| sub_groups.clone());
            let ready = ready_tx.clone();
            let link_state = link.clone();
            let handle = LocalExecutorBuilder::new(Placement::Unbound)
                .name(&format!("test-core-{id}"))
                .io_memory(IO_MEMORY_BYTES)
                .spawn(move || async move {
                    core_main(
                        id, shared, mesh_link, shard_dirs, topics, sub_groups, link_state, job_rx,
                        ready,
                    )
                    .await
                })
                .expect("an executor thread");
            cluster.jobs.push(job_tx);
            cluster.threads.push(handle);
            cluster.links.push(link);
        }
        cluster.dir = Some(dir);
        for _ in 0..cores {
            match ready_rx.recv_timeout(WAIT_MAX) {
                Ok((_, Ok(()))) => {}
                Ok((id, Err(e))) => panic!("core {id} did not start: {e}"),
                Err(e) => panic!("a core did not start within {WAIT_MAX:?}: {e}"),
            }
        }
        cluster
    }

    /// Runs `f` on core `core` (as a task of its own, beside the core's other work) and
    /// returns its result.
    pub fn on<T, F, Fut>(&self, core: u16, f: F) -> T
    where
        F: FnOnce(Rc<Core>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        self.spawn_on(core, f).wait()
    }

    /// Starts `f` on core `core` and returns at once; [`Pending::wait`] takes its result.
    pub fn spawn_on<T, F, Fut>(&self, core: u16, f: F) -> Pending<T>
    where
        F: FnOnce(Rc<Core>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move |c: Rc<Core>| {
            Box::pin(async move {
                let _ = tx.send(f(c).await);
            })
        });
        self.jobs[core as usize]
            .send(job)
            .expect("the core takes jobs until the cluster stops");
        Pending { core, rx }
    }

    /// What the kernel asked of core `core`'s clients; how they answer.
    pub fn link(&self, core: u16) -> &LinkState {
        &self.links[core as usize]
    }

    /// Every core's shutdown, as the broker's: the flag set, each core stopped in order,
    /// every executor joined; then the temporary directory is removed.
    pub fn stop(mut self) {
        self.stop_cores();
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_owned();
            drop(dir);
            assert!(!path.exists(), "the test data was not removed");
        }
    }

    fn stop_cores(&mut self) {
        self.shared.request_shutdown();
        // A closed job channel ends a core's loop, and the core stops.
        self.jobs.clear();
        for t in self.threads.drain(..) {
            // A core that panicked has failed its test already; the others still stop.
            let _ = t.join();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_cores();
    }
}

/// Copies the directory tree `from` into `to` (which exists).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A job started on a core, its result not yet taken.
pub struct Pending<T> {
    core: u16,
    rx: mpsc::Receiver<T>,
}

impl<T> Pending<T> {
    /// Waits for the job's result (at most [`WAIT_MAX`]).
    pub fn wait(self) -> T {
        match self.rx.recv_timeout(WAIT_MAX) {
            Ok(v) => v,
            Err(e) => panic!("core {} did not answer within {WAIT_MAX:?}: {e}", self.core),
        }
    }

    /// Its result if it is there already.
    pub fn try_take(&self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// One core's life: joins the mesh, opens its shards, builds the core with a fake link, serves
/// jobs until the cluster stops, then stops in order.
#[allow(clippy::too_many_arguments)]
async fn core_main(
    id: u16,
    shared: Arc<Shared>,
    mesh_link: MeshLinks,
    shard_dirs: Vec<(u16, std::path::PathBuf)>,
    topics: TopicTable,
    sub_groups: Option<SubGroupTable>,
    link_state: Arc<LinkState>,
    jobs: flume::Receiver<Job>,
    ready: mpsc::Sender<(u16, Result<(), String>)>,
) {
    let (mesh, receivers) = match mesh_link.join(id).await {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send((id, Err(e)));
            return;
        }
    };
    let mut shards = HashMap::new();
    let mut offsets = HashMap::new();
    for (sid, dir) in shard_dirs {
        let mut cfg = shard::ShardConfig::new(dir, sid);
        cfg.segment_bytes = shared.config.commit_log_segment_bytes;
        cfg.timer = shared.config.timer_rules();
        cfg.message_bytes_max = shared.config.message_bytes_max as usize;
        cfg.index_file_slots = 1 << 10;
        cfg.index_file_entries = 1 << 12;
        cfg.consume_queue_file_entries = 1 << 12;
        cfg.hot_bytes_max = 4 << 20;
        cfg.write_chunk_bytes = 256 << 10;
        cfg.retention_check_interval_ms = 3_600_000;
        if shared.config.flush_disk_type == broker_core::config::FlushDiskType::Sync {
            cfg.flush = shard::FlushPolicy::Sync;
        }
        match broker_core::lifecycle::open_shard(cfg).await {
            Ok((shard, table)) => {
                shards.insert(sid, shard);
                offsets.insert(sid, table);
            }
            Err(e) => {
                shared
                    .cores_drained
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = ready.send((id, Err(e)));
                return;
            }
        }
    }
    let ha = match broker_replication::CoreHa::new(&shared.config, &shards, None) {
        Ok(ha) => ha,
        Err(e) => {
            shared
                .cores_drained
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = ready.send((id, Err(format!("replication: {e}"))));
            return;
        }
    };
    let core = Core::new(CoreParts {
        id,
        shared: shared.clone(),
        shards,
        offsets,
        mesh: Rc::new(mesh),
        topics,
        sub_groups,
        ha,
    });
    let link: Rc<dyn ClientLink> = Rc::new(FakeLink(link_state));
    core.set_link(Rc::downgrade(&link));
    core.serve_mesh(receivers);
    core.rebuild_dedup_at_start().await;
    let tasks = core.spawn_tasks();
    let _ = ready.send((id, Ok(())));
    while let Ok(job) = jobs.recv_async().await {
        glommio::spawn_local(job(core.clone())).detach();
    }
    shared.request_shutdown();
    core.stop(tasks, vec![]).await;
    drop(link);
}

// ------------------------------------------------------------------ records and pulls

/// One encoded record for `topic`, with its tag and properties.
pub fn record(topic: &str, body: &str, tags: Option<&str>, props: &[(&str, &str)]) -> Bytes {
    let mut all: Vec<(&str, &str)> = Vec::new();
    if let Some(t) = tags {
        all.push((message::prop::TAGS, t));
    }
    all.extend_from_slice(props);
    let mut out = Vec::new();
    encode_record(
        &MessageFields {
            topic,
            body: body.as_bytes(),
            born_timestamp_ms: now_ms(),
            properties: &all,
            ..Default::default()
        },
        &mut out,
    )
    .expect("a valid record");
    Bytes::from(out)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A message as a consumer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub body: String,
    pub tags: Option<String>,
    pub properties: Vec<(String, String)>,
}

impl Msg {
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A pull's answer, off the core.
#[derive(Debug)]
pub struct Pulled {
    pub status: PullStatus,
    pub next_offset: u64,
    pub max_offset: u64,
    pub messages: Vec<Msg>,
}

impl Pulled {
    pub fn bodies(&self) -> Vec<String> {
        self.messages.iter().map(|m| m.body.clone()).collect()
    }
}

fn msg(bytes: &[u8]) -> Msg {
    let v = RecordView::parse(bytes).expect("a stored record parses");
    Msg {
        topic: v.topic().to_owned(),
        queue_id: v.queue_id(),
        queue_offset: v.queue_offset(),
        body: String::from_utf8_lossy(v.body()).into_owned(),
        tags: v.tags().map(str::to_owned),
        properties: v
            .properties()
            .iter()
            .map(|(k, val)| (k.to_owned(), val.to_owned()))
            .collect(),
    }
}

/// A pull's outcome as plain values (the slices it holds stay on their core).
pub fn pulled(o: PullOutcome<PullBody>) -> Pulled {
    let messages = match &o.body {
        PullBody::Local(v) => v.iter().map(|s| msg(s.as_bytes())).collect(),
        PullBody::Owned(v) => v.iter().map(|b| msg(b)).collect(),
    };
    Pulled {
        status: o.status,
        next_offset: o.next_offset.0,
        max_offset: o.max_offset.0,
        messages,
    }
}

/// A pull request of `group` for `topic`/`queue_id` from `offset`, not waiting.
pub fn pull_request(group: &str, topic: &str, queue_id: u32, offset: u64) -> PullRequest {
    PullRequest {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_messages: 32,
        max_bytes: 1 << 20,
        tag_expression: "*".into(),
        suspend_timeout_ms: 0,
    }
}

/// Pulls on `core` and returns the answer as plain values.
pub async fn pull(core: &Core, req: PullRequest) -> Result<Pulled, BrokerError> {
    core.pull(req).await.map(pulled)
}

/// A topic of `queues` read and write queues.
pub fn topic(name: &str, queues: u32) -> TopicConfig {
    broker_core::topics::topic_config(name, queues)
}

/// The core that owns `queue_id` of `topic`.
pub fn owner_core(c: &Cluster, topic: &str, queue_id: u32) -> u16 {
    let shard = protocol::queue_owner_shard(topic, queue_id, c.shard_count);
    protocol::shard_core(shard, c.cores)
}

/// A queue of `topic` (of `queues`) owned by core `core`.
pub fn queue_on(c: &Cluster, topic: &str, queues: u32, core: u16) -> u32 {
    (0..queues)
        .find(|&q| owner_core(c, topic, q) == core)
        .unwrap_or_else(|| panic!("no queue of {topic} is on core {core}"))
}

/// Creates `name` with `queues` queues from core 0.
pub fn create_topic(c: &Cluster, name: &str, queues: u32) {
    let cfg = topic(name, queues);
    c.on(0, move |core| async move { core.create_topic(cfg).await })
        .expect("the topic is created");
}
