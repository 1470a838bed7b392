//! The slave's end of replication, per shard on the core that owns it: connect to the
//! master (following its redirect to the core that owns the shard), say where the local log
//! ends, place what arrives, and acknowledge what a crash of this process would keep.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::io::AsyncWrite;
use glommio::net::TcpStream;
use shard::signal::Signal;
use shard::Shard;

use crate::Host;

use super::wire::{self, Frame, Hello};
use super::HANDSHAKE_TIMEOUT;
use crate::deadline::with_timeout;

/// What a slave shard knows of its master, for status and metrics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SlaveStatus {
    pub connected: bool,
    pub master: Option<String>,
    pub master_end: u64,
    pub confirm: u64,
    pub local_end: u64,
    pub lag_bytes: u64,
    pub last_heard_ms_ago: Option<u64>,
    pub last_error: Option<String>,
    /// Group offsets of this shard held from the master's stream.
    pub group_offsets: u64,
}

pub struct SlaveShard {
    pub shard_id: u16,
    shard: Shard,
    connected: Cell<bool>,
    master: RefCell<Option<String>>,
    master_end: Cell<u64>,
    confirm: Cell<u64>,
    last_heard: Cell<Option<Instant>>,
    last_error: RefCell<Option<String>>,
    group_offsets: Cell<u64>,
    /// The epoch history this slave's log follows: its master's, as of the last handshake.
    pub epochs: RefCell<super::epochs::Epochs>,
    /// Where the master's replication port is (core 0's; it redirects to the owner).
    master_addr: String,
    /// The master's epoch must be at least this (the controllers' epoch of the master they
    /// named): a stream from an older master, one the controllers replaced, is refused.
    pub min_epoch: Cell<u32>,
    /// Asked to stop (the shard becomes a master, or follows another one).
    stopping: Cell<bool>,
    /// The stream task ended, after `stopping`.
    ended: Cell<bool>,
    /// Wakes the stream task at `stop`, and `stop` when the task has ended.
    wake: Signal,
}

impl SlaveShard {
    pub fn new(
        shard_id: u16,
        shard: Shard,
        epochs: super::epochs::Epochs,
        master_addr: String,
        min_epoch: u32,
    ) -> SlaveShard {
        SlaveShard {
            shard_id,
            shard,
            connected: Cell::new(false),
            master: RefCell::new(None),
            master_end: Cell::new(0),
            confirm: Cell::new(0),
            last_heard: Cell::new(None),
            last_error: RefCell::new(None),
            group_offsets: Cell::new(0),
            epochs: RefCell::new(epochs),
            master_addr,
            min_epoch: Cell::new(min_epoch),
            stopping: Cell::new(false),
            ended: Cell::new(false),
            wake: Signal::default(),
        }
    }

    pub fn master_addr(&self) -> &str {
        &self.master_addr
    }

    /// Stops the stream and waits until its task has ended: nothing is placed in the shard
    /// after this returns (a frame being placed is placed whole first).
    pub async fn stop(&self) {
        self.stopping.set(true);
        self.wake.notify_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ended.get() && Instant::now() < deadline {
            self.wake.wait_timeout(Duration::from_millis(20)).await;
        }
        if !self.ended.get() {
            tracing::error!(
                shard = self.shard_id,
                "the slave's stream did not stop within 10 s"
            );
        }
    }

    fn stopped(&self, core: &Rc<Host>) -> bool {
        self.stopping.get() || core.shared().stopping()
    }

    pub fn status(&self) -> SlaveStatus {
        let local_end = self.shard.log_bounds().1;
        SlaveStatus {
            connected: self.connected.get(),
            master: self.master.borrow().clone(),
            master_end: self.master_end.get(),
            confirm: self.confirm.get(),
            local_end,
            lag_bytes: self.master_end.get().saturating_sub(local_end),
            last_heard_ms_ago: self
                .last_heard
                .get()
                .map(|t| t.elapsed().as_millis() as u64),
            last_error: self.last_error.borrow().clone(),
            group_offsets: self.group_offsets.get(),
        }
    }

    fn heard(&self, master_end: u64, confirm: u64) {
        self.master_end.set(self.master_end.get().max(master_end));
        self.confirm.set(self.confirm.get().max(confirm));
        self.last_heard.set(Some(Instant::now()));
    }

    fn failed(&self, why: String) {
        if self.last_error.borrow().as_deref() != Some(why.as_str()) {
            tracing::warn!(shard = self.shard_id, "replication from the master: {why}");
        }
        *self.last_error.borrow_mut() = Some(why);
    }
}

/// `fut`'s output, or `None` as soon as the stream is asked to stop (`fut` is dropped: use
/// it only for waits that leave nothing half done, such as a read whose bytes are not kept).
async fn unless_stopped<T>(
    core: &Rc<Host>,
    ss: &SlaveShard,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    if ss.stopped(core) {
        return None;
    }
    futures_lite::future::or(async { Some(fut.await) }, async {
        ss.wake.wait().await;
        None
    })
    .await
}

enum Ended {
    /// The master sent us to the core that owns the shard.
    Redirect(String),
    /// The master refused the stream: said why; trying again soon is unlikely to help.
    Refused(String),
    /// The connection failed or ended.
    Lost(String),
}

/// Keeps the shard's stream from the master going until the broker stops or the stream is
/// stopped.
pub async fn run(core: Rc<Host>, ss: Rc<SlaveShard>) {
    stream_until_stopped(&core, &ss).await;
    ss.connected.set(false);
    ss.ended.set(true);
    ss.wake.notify_all();
}

async fn stream_until_stopped(core: &Rc<Host>, ss: &Rc<SlaveShard>) {
    let master = ss.master_addr.clone();
    if master.is_empty() {
        return;
    }
    let mut target: Option<String> = None;
    let mut backoff = Duration::from_millis(100);
    let mut redirects = 0u32;
    while !ss.stopped(core) {
        let addr = target.clone().unwrap_or_else(|| master.clone());
        let began = Instant::now();
        let ended = session(core, ss, &addr).await;
        ss.connected.set(false);
        match ended {
            Ended::Redirect(a) => {
                redirects += 1;
                if redirects > 3 {
                    ss.failed(format!("the master keeps redirecting (last to {a})"));
                    target = None;
                    redirects = 0;
                    ss.wake.wait_timeout(backoff).await;
                } else {
                    target = Some(a);
                }
                continue;
            }
            Ended::Refused(why) => {
                ss.failed(format!("{addr} refused the stream: {why}"));
                target = None;
                backoff = Duration::from_secs(2);
            }
            Ended::Lost(why) => {
                ss.failed(format!("{addr}: {why}"));
                // A redirect target that fails sends us back to the configured master.
                target = None;
                if began.elapsed() > Duration::from_secs(5) {
                    backoff = Duration::from_millis(100);
                }
            }
        }
        redirects = 0;
        let until = Instant::now() + backoff;
        while !ss.stopped(core) && Instant::now() < until {
            ss.wake
                .wait_timeout(Duration::from_millis(50).min(backoff))
                .await;
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn session(core: &Rc<Host>, ss: &Rc<SlaveShard>, addr: &str) -> Ended {
    let cfg = &core.shared().config;
    let connect = TcpStream::connect_timeout(addr, HANDSHAKE_TIMEOUT);
    let stream = match unless_stopped(core, ss, connect).await {
        None => return Ended::Lost("the slave is stopping".into()),
        Some(Ok(s)) => s,
        Some(Err(e)) => return Ended::Lost(format!("cannot connect: {e}")),
    };
    let _ = stream.set_nodelay(true);
    let stream = match &core.shared().tls.client {
        None => crate::tls::Stream::Plain(stream),
        Some(tls) => {
            let dialed = crate::tls::connect(tls, addr, stream, HANDSHAKE_TIMEOUT);
            match unless_stopped(core, ss, dialed).await {
                None => return Ended::Lost("the slave is stopping".into()),
                Some(Ok(s)) => s,
                Some(Err(e)) => return Ended::Lost(format!("TLS handshake failed: {e}")),
            }
        }
    };
    let (mut rd, mut wr) = futures_lite::io::split(stream);
    let shard = &ss.shard;
    let (min, end) = shard.log_bounds();
    let creds = cfg.credentials();
    let my_nonce = creds
        .as_ref()
        .map_or_else(String::new, |_| super::auth::nonce());
    let hello = Frame::Hello(Hello {
        version: wire::VERSION,
        shard: ss.shard_id,
        shard_count: core.shared().shard_count,
        segment_bytes: shard.segment_bytes(),
        broker_id: cfg.broker_id,
        log_min: min,
        log_end: end,
        broker_name: cfg.broker_name.clone(),
        epochs: ss.epochs.borrow().0.clone(),
        access_key: creds
            .as_ref()
            .map_or_else(String::new, |c| c.access_key.clone()),
        nonce: my_nonce.clone(),
    });
    if let Err(e) = wire::write_frame(&mut wr, &hello).await {
        return Ended::Lost(format!("cannot send HELLO: {e}"));
    }
    let welcome = with_timeout(HANDSHAKE_TIMEOUT, wire::read_frame(&mut rd));
    let Some(mut welcome) = unless_stopped(core, ss, welcome).await else {
        return Ended::Lost("the slave is stopping".into());
    };
    // Mutual authentication (`super::auth`): with credentials, the master must answer with
    // its proof before anything else, and this slave answers with its own.
    match (&creds, &welcome) {
        (Some(c), Some(Ok(Frame::Challenge { nonce, proof }))) => {
            if !super::auth::master_proof_holds(c, &my_nonce, proof) {
                // Said to the master too, so that both logs name the reason; this slave's
                // own proof is never sent to a master that has not proven itself.
                let why = "the master's proof is wrong: its acl_access_key / acl_secret_key \
                           are not this slave's";
                let _ = wire::write_frame(&mut wr, &Frame::Refuse(why.into())).await;
                return Ended::Refused(why.into());
            }
            let answer = Frame::Proof(super::auth::slave_proof(c, nonce));
            if let Err(e) = wire::write_frame(&mut wr, &answer).await {
                return Ended::Lost(format!("cannot send PROOF: {e}"));
            }
            let next = with_timeout(HANDSHAKE_TIMEOUT, wire::read_frame(&mut rd));
            let Some(next) = unless_stopped(core, ss, next).await else {
                return Ended::Lost("the slave is stopping".into());
            };
            welcome = next;
        }
        (Some(_), Some(Ok(Frame::Welcome { .. }))) => {
            return Ended::Refused(
                "the master did not authenticate itself (it has no acl_access_key / \
                 acl_secret_key) and this slave has credentials"
                    .into(),
            );
        }
        (None, Some(Ok(Frame::Challenge { .. }))) => {
            return Ended::Refused(
                "the master requires credentials: set acl_access_key and acl_secret_key".into(),
            );
        }
        _ => {}
    }
    let (start, master_epochs) = match welcome {
        Some(Ok(Frame::Welcome {
            start,
            master_end,
            confirm,
            epochs,
            ..
        })) => {
            let theirs = epochs.last().map_or(0, |&(e, _)| e);
            if theirs < ss.min_epoch.get() {
                return Ended::Refused(format!(
                        "it serves in epoch {theirs}, older than the controllers' epoch {} of the master they named: a replaced master",
                        ss.min_epoch.get()
                    ));
            }
            ss.heard(master_end, confirm);
            (start, epochs)
        }
        Some(Ok(Frame::Redirect(a))) => return Ended::Redirect(a),
        Some(Ok(Frame::Refuse(r))) => return Ended::Refused(r),
        Some(Ok(other)) => return Ended::Lost(format!("unexpected answer {other:?}")),
        Some(Err(e)) => return Ended::Lost(format!("no answer to HELLO: {e}")),
        None => return Ended::Lost("no answer to HELLO in time".into()),
    };
    if start < end {
        // This log holds what the master never had: cut back to where they agree, the
        // cut bytes kept aside, before anything else.
        let keep = shard.dir().join("truncated");
        match shard.truncate_to(start, &keep).await {
            Ok(cut) => tracing::warn!(
                shard = ss.shard_id,
                offset = start,
                bytes = cut,
                kept = %keep.display(),
                "this slave's log diverged from the master's: cut back to where they agree"
            ),
            Err(e) => return Ended::Refused(format!("cannot cut the log back to {start}: {e}")),
        }
    } else if start != end {
        let empty = min == end;
        if !(empty && start > end) {
            return Ended::Refused(format!(
                "the master would stream from offset {start}, but this slave's log ends at {end}"
            ));
        }
        if let Err(e) = shard.start_log_at(start) {
            return Ended::Refused(format!("cannot start the log at {start}: {e}"));
        }
        tracing::info!(
            shard = ss.shard_id,
            offset = start,
            "the master's log starts past this empty slave's: the slave's starts there too"
        );
    }
    // The log now follows the master's history: kept before anything more is placed.
    let history = super::epochs::Epochs(master_epochs);
    if let Err(e) = history.store(shard.dir()) {
        return Ended::Refused(format!("cannot store the master's epoch history: {e}"));
    }
    *ss.epochs.borrow_mut() = history;
    ss.connected.set(true);
    *ss.master.borrow_mut() = Some(addr.to_owned());
    *ss.last_error.borrow_mut() = None;
    tracing::info!(
        shard = ss.shard_id,
        master = addr,
        from = start,
        "replicating from the master"
    );
    let heartbeat = Duration::from_millis(cfg.ha_send_heartbeat_interval_ms);
    let acker = glommio::spawn_local(send_acks(shard.clone(), wr, heartbeat));
    let silence = Duration::from_millis(cfg.ha_housekeeping_interval_ms);
    let read_uncommitted = cfg.read_uncommitted;
    let ended = loop {
        if ss.stopped(core) {
            break Ended::Lost("the slave is stopping".into());
        }
        // A stop ends the wait for a frame at once (nothing of a frame half read is kept);
        // a frame read is placed whole before the stop is seen.
        let Some(next) =
            unless_stopped(core, ss, with_timeout(silence, wire::read_frame(&mut rd))).await
        else {
            continue;
        };
        match next {
            Some(Ok(Frame::Data {
                start,
                next,
                confirm,
                bytes,
            })) => match shard.replicate(start, &bytes).await {
                Ok(n) if n == next => {
                    ss.heard(next, confirm);
                    if !read_uncommitted {
                        shard.set_read_cap(confirm);
                    }
                }
                Ok(n) => {
                    break Ended::Lost(format!(
                        "the frame at {start} ended at {n} here, the master said {next}"
                    ))
                }
                Err(e) => break Ended::Lost(format!("cannot store the frame at {start}: {e}")),
            },
            Some(Ok(Frame::Keepalive {
                master_end,
                confirm,
            })) => {
                ss.heard(master_end, confirm);
                if !read_uncommitted {
                    shard.set_read_cap(confirm);
                }
            }
            Some(Ok(Frame::Topics(list))) => {
                let core = core.clone();
                glommio::spawn_local(async move { core.follow_topics(list).await }).detach();
            }
            Some(Ok(Frame::Auth(json))) => {
                // The master's users and ACLs, written (an fsync) off the core and in the
                // order they came: changes are rare, and a later set must not be
                // overwritten by an earlier one.
                let auth = core.shared().auth.clone();
                let taken = glommio::executor()
                    .spawn_blocking(move || {
                        let meta = acl::v2::AuthMetadata::from_json(&json)?;
                        auth.replace_all(meta).map_err(|e| e.to_string())
                    })
                    .await;
                match taken {
                    Ok(true) => {
                        tracing::info!(target: "audit", "ACL 2.0: took the master's users and ACLs")
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!("cannot take the master's users and ACLs: {e}"),
                }
            }
            Some(Ok(Frame::Offsets(list))) => {
                // The master's group offsets of this shard: a promoted slave's consumers
                // go on where they were.
                if let Some(held) = core.replicate_offsets(ss.shard_id, list) {
                    ss.group_offsets.set(held as u64);
                }
            }
            Some(Ok(other)) => break Ended::Lost(format!("unexpected frame {other:?}")),
            Some(Err(e)) => break Ended::Lost(format!("the stream ended: {e}")),
            None => {
                break Ended::Lost(format!(
                    "the master was silent for {} ms (ha_housekeeping_interval_ms)",
                    silence.as_millis()
                ))
            }
        }
    };
    acker.cancel().await;
    ended
}

/// Acknowledges what a crash of this process keeps as soon as that grows (and at least
/// every heartbeat), until the connection fails.
async fn send_acks<W: AsyncWrite + Unpin>(shard: Shard, mut wr: W, heartbeat: Duration) {
    loop {
        let safe = shard.safe_end();
        let frame = Frame::Ack {
            safe,
            end: shard.log_bounds().1,
        };
        if wire::write_frame(&mut wr, &frame).await.is_err() {
            return;
        }
        shard.wait_safe_past(safe, heartbeat).await;
    }
}
