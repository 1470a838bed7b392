//! The master's end of replication, per shard on the core that owns it: the slaves'
//! streams, their acknowledgements, the in-sync set, the SYNC_MASTER wait and the confirm
//! offset that caps what consumers are served.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use shard::signal::Signal;
use shard::Shard;

use crate::config::{BrokerConfig, BrokerRole};
use broker_base::error::BrokerError;

use crate::error::ReplicationError;
use crate::Host;

use super::wire::{self, Frame, Hello};
use super::HANDSHAKE_TIMEOUT;
use crate::deadline::with_timeout;

/// How long the master holds consumers' view still so that a slave that has all but caught
/// up can join the in-sync set without anything visible being unconfirmed; then it lets go
/// and tries again later.
const JOIN_HOLD_MAX: Duration = Duration::from_millis(500);
/// After a hold that did not bring its slave in, none for that slave for this long.
const JOIN_HOLD_PAUSE: Duration = Duration::from_secs(5);
/// Frames remembered per stream for its lag in time; older ones are forgotten (the lag then
/// reads a little low while more than this many are unacknowledged).
const INFLIGHT_MAX: usize = 4096;

/// One slave's stream of one shard.
pub struct SlaveLink {
    id: u64,
    pub broker_id: u64,
    pub peer: String,
    /// The offset after the last byte sent on this connection: an ack above it is refused.
    pub sent: Cell<u64>,
    /// What the slave says a crash of it keeps.
    pub acked: Cell<u64>,
    pub in_sync: Cell<bool>,
    last_caught_up: Cell<Instant>,
    /// The master's end when the slave last caught up: reaching it again is catching up.
    catchup_mark: Cell<u64>,
    pub last_ack: Cell<Instant>,
    /// The ends of frames sent and not yet acknowledged, with when they were sent (at most
    /// [`INFLIGHT_MAX`]): the oldest gives the stream's lag in time.
    inflight: RefCell<std::collections::VecDeque<(u64, Instant)>>,
    /// No hold for this slave before then: one that did not get there in a hold waits a
    /// while before the next, so a stalled slave cannot keep consumers waiting.
    next_hold: Cell<Instant>,
    closed: RefCell<Option<String>>,
}

impl SlaveLink {
    fn close(&self, why: String) {
        let mut c = self.closed.borrow_mut();
        if c.is_none() {
            *c = Some(why);
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.borrow().is_some()
    }
}

/// A snapshot of one slave's stream, for status and metrics.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LinkStatus {
    pub broker_id: u64,
    pub peer: String,
    pub in_sync: bool,
    pub sent: u64,
    pub acked: u64,
    pub lag_bytes: u64,
    /// How long the oldest byte sent and not yet acknowledged has waited (0: none).
    pub lag_ms: u64,
    pub last_ack_ms_ago: u64,
}

pub struct MasterShard {
    pub shard_id: u16,
    pub(super) shard: Shard,
    role: BrokerRole,
    in_sync_replicas: usize,
    min_in_sync_replicas: usize,
    slave_timeout: Duration,
    not_catchup: Duration,
    batch_bytes: usize,
    read_uncommitted: bool,
    links: RefCell<Vec<Rc<SlaveLink>>>,
    next_link: Cell<u64>,
    /// Acknowledgements and in-sync changes: SYNC sends and the senders wait on it.
    pub changed: Signal,
    /// A slave about to join: (link id, the visible end held, since when).
    hold: Cell<Option<(u64, u64, Instant)>>,
    /// The in-sync set's changes, counted, and the last reason a slave left it.
    pub isr_changes: Cell<u64>,
    pub last_left: RefCell<Option<String>>,
    /// The shard's epoch history, the current epoch last.
    pub epochs: RefCell<super::epochs::Epochs>,
    /// Controller mode: the slaves the controllers count in sync (their SyncStateSet less
    /// this broker). A SYNC send waits for every one of them, and consumers see only what
    /// all of them have, until the controllers take one out: they may elect any of them.
    counted: RefCell<Option<Vec<u64>>>,
    /// This broker stopped being the master: sends still waiting are answered at once.
    deposed: Cell<bool>,
    /// Stopping: the in-sync slaves whose streams ended once they had acknowledged all of
    /// the closed log, with what they acknowledged. Their links are gone by the time the
    /// hand-over asks ([`MasterShard::wait_acknowledged`]), but they still have everything.
    drained: RefCell<Vec<(u64, u64)>>,
}

impl MasterShard {
    pub fn new(
        shard_id: u16,
        shard: Shard,
        config: &BrokerConfig,
        epochs: super::epochs::Epochs,
    ) -> MasterShard {
        MasterShard {
            shard_id,
            shard,
            role: config.broker_role,
            in_sync_replicas: config.in_sync_replicas as usize,
            min_in_sync_replicas: config.min_in_sync_replicas as usize,
            slave_timeout: Duration::from_millis(config.slave_timeout_ms),
            not_catchup: Duration::from_millis(config.ha_max_time_slave_not_catchup_ms),
            batch_bytes: config.ha_transfer_batch_bytes as usize,
            read_uncommitted: config.read_uncommitted,
            links: RefCell::new(Vec::new()),
            drained: RefCell::new(Vec::new()),
            next_link: Cell::new(1),
            changed: Signal::default(),
            hold: Cell::new(None),
            isr_changes: Cell::new(0),
            last_left: RefCell::new(None),
            epochs: RefCell::new(epochs),
            counted: RefCell::new(None),
            deposed: Cell::new(false),
        }
    }

    /// Takes the controllers' in-sync set (less this broker).
    pub fn set_counted(&self, slaves: Option<Vec<u64>>) {
        *self.counted.borrow_mut() = slaves;
        self.refresh();
    }

    /// The slaves in sync here, by broker id.
    pub fn in_sync_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.in_sync().iter().map(|l| l.broker_id).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Ends every slave's stream (this broker stops being the master); sends waiting for
    /// their replicas are answered FLUSH_SLAVE_TIMEOUT at once.
    pub fn close_all(&self, why: String) {
        self.deposed.set(true);
        for l in self.links.borrow().iter() {
            l.close(why.clone());
        }
        self.refresh();
    }

    /// What each slave the controllers count has acknowledged (0 when it has no stream
    /// here now).
    fn counted_acks(&self) -> Vec<(u64, u64)> {
        let counted = self.counted.borrow();
        let Some(ids) = counted.as_ref() else {
            return Vec::new();
        };
        let links = self.links.borrow();
        ids.iter()
            .map(|&id| {
                let acked = links
                    .iter()
                    .filter(|l| l.broker_id == id && !l.is_closed())
                    .map(|l| l.acked.get())
                    .max()
                    .unwrap_or(0);
                (id, acked)
            })
            .collect()
    }

    /// At a graceful stop, once the shard is closed at `end`: waits until every in-sync
    /// slave has acknowledged all of it, or until `deadline`, and returns the slaves (by
    /// broker id) that have.
    pub async fn wait_acknowledged(&self, end: u64, deadline: Instant) -> Vec<u64> {
        loop {
            let open = self.in_sync();
            let mut have: Vec<u64> = open
                .iter()
                .filter(|l| l.acked.get() >= end)
                .map(|l| l.broker_id)
                .collect();
            let all_open = have.len() == open.len();
            have.extend(
                self.drained
                    .borrow()
                    .iter()
                    .filter(|&&(_, acked)| acked >= end)
                    .map(|&(id, _)| id),
            );
            let now = Instant::now();
            if all_open || now >= deadline {
                have.sort_unstable();
                have.dedup();
                return have;
            }
            self.changed.wait_timeout(deadline - now).await;
        }
    }

    /// Stopping: ends the stream of a slave that has acknowledged all of the closed log,
    /// remembering it as drained if it was in sync.
    fn end_drained(&self, link: &SlaveLink) {
        if link.in_sync.get() {
            self.drained
                .borrow_mut()
                .push((link.broker_id, link.acked.get()));
        }
        link.close("the master is stopping".into());
    }

    fn in_sync(&self) -> Vec<Rc<SlaveLink>> {
        self.links
            .borrow()
            .iter()
            .filter(|l| l.in_sync.get() && !l.is_closed())
            .cloned()
            .collect()
    }

    /// What a slave is told consumers may see: the master's visible end.
    pub fn confirm(&self) -> u64 {
        self.shard.visible_end()
    }

    /// SYNC_MASTER, before anything is written: refuses a send when fewer replicas than
    /// `min_in_sync_replicas` are in sync (the master counted).
    pub fn admit(&self) -> Result<(), BrokerError> {
        if self.role != BrokerRole::SyncMaster {
            return Ok(());
        }
        let replicas = 1 + self.in_sync().len();
        if replicas < self.min_in_sync_replicas {
            return Err(BrokerError::InSyncReplicasNotEnough(format!(
                "shard {}: {replicas} replica(s) in sync (the master counted), min_in_sync_replicas = {}; nothing was written{}",
                self.shard_id,
                self.min_in_sync_replicas,
                self.why_not_in_sync()
            )));
        }
        Ok(())
    }

    /// Whether a send waits for its replicas here ([`Self::wait_replicated`]): SYNC_MASTER.
    pub fn waits_for_replicas(&self) -> bool {
        self.role == BrokerRole::SyncMaster
    }

    /// SYNC_MASTER, after the local append of a batch ending at `end`: waits until
    /// `in_sync_replicas - 1` in-sync slaves (at most as many as are in sync) have it, or
    /// `slave_timeout_ms` passes (FLUSH_SLAVE_TIMEOUT: stored here, not known replicated).
    pub async fn wait_replicated(&self, end: u64) -> Result<(), BrokerError> {
        if self.role != BrokerRole::SyncMaster {
            return Ok(());
        }
        let clock = self.shard.clock();
        let deadline = clock.now() + self.slave_timeout;
        loop {
            if self.deposed.get() {
                return Err(BrokerError::flush_slave_timeout(format!(
                    "shard {}: this broker stopped being the master while the send waited for its replicas; stored here, not known replicated",
                    self.shard_id
                )));
            }
            let isr = self.in_sync();
            if 1 + isr.len() < self.min_in_sync_replicas {
                return Err(BrokerError::flush_slave_timeout(format!(
                    "shard {}: the in-sync set shrank below min_in_sync_replicas = {} while the send waited; stored on the master only{}",
                    self.shard_id,
                    self.min_in_sync_replicas,
                    self.why_not_in_sync()
                )));
            }
            let needed = (self.in_sync_replicas - 1).min(isr.len());
            let have = isr.iter().filter(|l| l.acked.get() >= end).count();
            let counted = self.counted_acks();
            let counted_have = counted.iter().all(|&(_, acked)| acked >= end);
            if have >= needed && counted_have {
                return Ok(());
            }
            let now = clock.now();
            if now >= deadline {
                let mut slaves: Vec<String> = isr
                    .iter()
                    .map(|l| {
                        format!(
                            "slave {} at {} acknowledged {} of {end}",
                            l.broker_id,
                            l.peer,
                            l.acked.get()
                        )
                    })
                    .collect();
                slaves.extend(counted.iter().filter(|&&(_, a)| a < end).map(|(id, a)| {
                    format!(
                        "slave {id}, in the controllers' in-sync set, acknowledged {a} of {end}"
                    )
                }));
                return Err(BrokerError::flush_slave_timeout(format!(
                    "shard {}: {have} of {needed} in-sync slave(s) acknowledged the send within slave_timeout_ms = {} ({}); stored on the master, not known replicated",
                    self.shard_id,
                    self.slave_timeout.as_millis(),
                    slaves.join("; ")
                )));
            }
            self.changed.wait_timeout(deadline - now).await;
        }
    }

    fn why_not_in_sync(&self) -> String {
        let links = self.links.borrow();
        let mut parts: Vec<String> = links
            .iter()
            .filter(|l| !l.in_sync.get() && !l.is_closed())
            .map(|l| {
                format!(
                    "slave {} at {} is catching up ({} bytes behind)",
                    l.broker_id,
                    l.peer,
                    self.shard.log_bounds().1.saturating_sub(l.acked.get())
                )
            })
            .collect();
        if let Some(w) = self.last_left.borrow().as_ref() {
            parts.push(format!("last left: {w}"));
        }
        if links.is_empty() {
            parts.push("no slave is connected".into());
        }
        format!(" ({})", parts.join("; "))
    }

    fn attach(&self, broker_id: u64, peer: String, start: u64) -> Rc<SlaveLink> {
        let id = self.next_link.get();
        self.next_link.set(id + 1);
        let now = self.shard.clock().now();
        let link = Rc::new(SlaveLink {
            id,
            broker_id,
            peer: peer.clone(),
            sent: Cell::new(start),
            acked: Cell::new(start),
            in_sync: Cell::new(false),
            last_caught_up: Cell::new(now),
            catchup_mark: Cell::new(start),
            last_ack: Cell::new(now),
            next_hold: Cell::new(now),
            inflight: RefCell::new(std::collections::VecDeque::new()),
            closed: RefCell::new(None),
        });
        for old in self.links.borrow().iter() {
            if old.broker_id == broker_id {
                old.close(format!("replaced by a new connection from {peer}"));
            }
        }
        self.links.borrow_mut().push(link.clone());
        self.refresh();
        link
    }

    /// Updates the in-sync set (joins, leaves, with the reason logged) and the read cap.
    pub fn refresh(&self) {
        let now = self.shard.clock().now();
        let end = self.shard.log_bounds().1;
        let mut changed = false;
        // The links that leave now. What consumers see is still capped at their
        // acknowledgements until the end of this refresh, so measured against it they would
        // join again at once: a slave that stopped acknowledging would never leave, and
        // would hold consumers back for good.
        let mut left = Vec::new();
        // Leaves.
        for l in self.links.borrow().iter() {
            if !l.in_sync.get() {
                continue;
            }
            let why = if let Some(c) = l.closed.borrow().as_ref() {
                Some(format!("its connection ended: {c}"))
            } else {
                if l.acked.get() >= l.catchup_mark.get() {
                    l.last_caught_up.set(now);
                    l.catchup_mark.set(end);
                }
                let behind = now.duration_since(l.last_caught_up.get());
                (behind > self.not_catchup).then(|| {
                    format!(
                        "it has not caught up for {} ms (ha_max_time_slave_not_catchup_ms = {}): acknowledged {}, the master is at {end}",
                        behind.as_millis(),
                        self.not_catchup.as_millis(),
                        l.acked.get()
                    )
                })
            };
            if let Some(why) = why {
                l.in_sync.set(false);
                left.push(l.id);
                changed = true;
                let what = format!("slave {} at {}: {why}", l.broker_id, l.peer);
                tracing::warn!(
                    shard = self.shard_id,
                    "a slave left the in-sync set: {what}"
                );
                *self.last_left.borrow_mut() = Some(what);
            }
        }
        self.links.borrow_mut().retain(|l| !l.is_closed());
        // Joins: a slave joins once it has what consumers may already have seen.
        let visible = self.shard.visible_end();
        let mut hold = self.hold.get();
        if let Some((id, _, since)) = hold {
            let link = self.links.borrow().iter().find(|l| l.id == id).cloned();
            if link.is_none() || now.saturating_duration_since(since) > JOIN_HOLD_MAX {
                hold = None;
                if let Some(l) = link {
                    l.next_hold.set(now + JOIN_HOLD_PAUSE);
                }
            }
        }
        for l in self.links.borrow().iter() {
            if l.in_sync.get() || left.contains(&l.id) {
                continue;
            }
            let target = match hold {
                Some((id, v, _)) if id == l.id => v,
                _ => visible,
            };
            if l.acked.get() >= target {
                l.in_sync.set(true);
                l.last_caught_up.set(now);
                l.catchup_mark.set(end);
                changed = true;
                if matches!(hold, Some((id, _, _)) if id == l.id) {
                    hold = None;
                }
                tracing::info!(
                    shard = self.shard_id,
                    slave = l.broker_id,
                    peer = %l.peer,
                    offset = l.acked.get(),
                    "a slave joined the in-sync set"
                );
            } else if hold.is_none()
                && now >= l.next_hold.get()
                && end.saturating_sub(l.acked.get()) <= 2 * self.batch_bytes as u64
            {
                // Nearly there under load: hold what consumers see still so it can get there.
                hold = Some((l.id, visible, now));
            }
        }
        self.hold.set(hold);
        if changed {
            self.isr_changes.set(self.isr_changes.get() + 1);
        }
        if !self.read_uncommitted {
            let mut cap = self
                .in_sync()
                .iter()
                .map(|l| l.acked.get())
                .min()
                .unwrap_or(u64::MAX);
            if let Some((_, v, _)) = hold {
                cap = cap.min(v);
            }
            // A slave the controllers count and that has no stream here holds what
            // consumers see where it is: it may be elected with only what it acknowledged.
            for (id, acked) in self.counted_acks() {
                let linked = self.links.borrow().iter().any(|l| l.broker_id == id);
                cap = cap.min(if linked { acked } else { visible });
            }
            self.shard.set_read_cap(cap);
        }
        self.changed.notify_all();
    }

    pub fn links_status(&self) -> Vec<LinkStatus> {
        let end = self.shard.log_bounds().1;
        let now = self.shard.clock().now();
        self.links
            .borrow()
            .iter()
            .map(|l| LinkStatus {
                broker_id: l.broker_id,
                peer: l.peer.clone(),
                in_sync: l.in_sync.get(),
                sent: l.sent.get(),
                acked: l.acked.get(),
                lag_bytes: end.saturating_sub(l.acked.get()),
                lag_ms: l.inflight.borrow().front().map_or(0, |(_, at)| {
                    now.saturating_duration_since(*at).as_millis() as u64
                }),
                last_ack_ms_ago: now.saturating_duration_since(l.last_ack.get()).as_millis() as u64,
            })
            .collect()
    }
}

/// Answers a replication connection on this core: the handshake, then the shard's stream
/// and its acknowledgements, until either side stops.
pub async fn serve_slave(core: Rc<Host>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    // The replication port speaks TLS as the client ports do (`tls_mode`).
    let bounds = crate::tls::Bounds {
        first_byte: HANDSHAKE_TIMEOUT,
        handshake: HANDSHAKE_TIMEOUT,
    };
    let stream = match crate::tls::accept(&core.shared().tls.listener, stream, bounds).await {
        Ok(s) => s,
        Err(why) => {
            tracing::warn!(%peer, "replication connection refused: {why:?}");
            return;
        }
    };
    let (mut rd, mut wr) = futures_lite::io::split(stream);
    let hello = match with_timeout(HANDSHAKE_TIMEOUT, wire::read_frame(&mut rd)).await {
        Some(Ok(Frame::Hello(h))) => h,
        Some(Ok(other)) => {
            tracing::warn!(%peer, "replication connection: expected HELLO, got {other:?}");
            return;
        }
        Some(Err(e)) => {
            tracing::debug!(%peer, "replication connection closed before its HELLO: {e}");
            return;
        }
        None => {
            tracing::warn!(%peer, "replication connection sent no HELLO in time");
            return;
        }
    };
    let owner = protocol::shard_core(hello.shard, core.shared().cores);
    if hello.shard < core.shared().shard_count && owner != core.core_id() {
        let addr = core
            .shared()
            .ha_addrs
            .lock()
            .ok()
            .and_then(|a| a.get(owner as usize).cloned());
        if let Some(addr) = addr {
            let _ = wire::write_frame(&mut wr, &Frame::Redirect(addr)).await;
            return;
        }
    }
    // The version first: an older slave sends no credentials, and that is not why it is
    // refused.
    let authenticated = if hello.version == wire::VERSION {
        authenticate_slave(&core, &hello, &mut rd, &mut wr).await
    } else {
        Err(refused(format!(
            "replication version {} (this master speaks {})",
            hello.version,
            wire::VERSION
        )))
    };
    if let Err(reason) = authenticated {
        tracing::warn!(%peer, shard = hello.shard, slave = hello.broker_id, "refused a slave: {reason}");
        let _ = wire::write_frame(&mut wr, &Frame::Refuse(reason.to_string())).await;
        return;
    }
    let (start, ms) = match handshake(&core, &hello) {
        Ok(s) => s,
        Err(reason) => {
            tracing::warn!(%peer, shard = hello.shard, slave = hello.broker_id, "refused a slave: {reason}");
            let _ = wire::write_frame(&mut wr, &Frame::Refuse(reason.to_string())).await;
            return;
        }
    };
    let shard = ms.shard.clone();
    let (min, end) = shard.log_bounds();
    let welcome = Frame::Welcome {
        start,
        master_min: min,
        master_end: end,
        confirm: ms.confirm(),
        epochs: ms.epochs.borrow().0.clone(),
    };
    if wire::write_frame(&mut wr, &welcome).await.is_err() {
        return;
    }
    tracing::info!(%peer, shard = hello.shard, slave = hello.broker_id, from = start, "a slave's stream starts");
    let link = ms.attach(hello.broker_id, peer.clone(), start);
    let housekeeping = Duration::from_millis(core.shared().config.ha_housekeeping_interval_ms);
    let acks = glommio::spawn_local(read_acks(ms.clone(), link.clone(), rd, housekeeping));
    send_stream(&core, &ms, &shard, &link, &mut wr).await;
    link.close("the stream ended".into());
    acks.cancel().await;
    ms.refresh();
    tracing::info!(%peer, shard = hello.shard, slave = hello.broker_id, why = ?link.closed.borrow(), "a slave's stream ended");
}

/// With this broker's credentials set, the slave must prove it holds the same pair (and
/// hears this master's proof): see [`super::auth`]. The error is the reason it is refused.
async fn authenticate_slave<R, W>(
    core: &Rc<Host>,
    hello: &Hello,
    rd: &mut R,
    wr: &mut W,
) -> Result<(), ReplicationError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Some(mine) = core.shared().config.credentials() else {
        // With access control on, a master without credentials has nothing to ask a slave
        // for: it refuses them all rather than serve its log to anyone who connects (it
        // starts so only with `acl_allow_no_broker_credentials`).
        if core.shared().config.acl_enable {
            return Err(refused(
                "this master has acl_enable on and no acl_access_key / acl_secret_key \
                 (acl_allow_no_broker_credentials): it takes no slaves",
            ));
        }
        return Ok(());
    };
    super::auth::check_access_key(&mine, &hello.access_key)?;
    let nonce = super::auth::nonce();
    let challenge = Frame::Challenge {
        nonce: nonce.clone(),
        proof: super::auth::master_proof(&mine, &hello.nonce),
    };
    wire::write_frame(wr, &challenge)
        .await
        .map_err(|e| refused(format!("cannot send the challenge: {e}")))?;
    match with_timeout(HANDSHAKE_TIMEOUT, wire::read_frame(rd)).await {
        Some(Ok(Frame::Proof(p))) if super::auth::slave_proof_holds(&mine, &nonce, &p) => Ok(()),
        Some(Ok(Frame::Proof(_))) => Err(refused(format!(
            "the slave's proof for access key `{}` is wrong: its acl_secret_key is not this \
             master's",
            hello.access_key
        ))),
        Some(Ok(Frame::Refuse(why))) => {
            Err(refused(format!("the slave refused this master: {why}")))
        }
        Some(Ok(other)) => Err(refused(format!(
            "expected the slave's PROOF, got {other:?}"
        ))),
        Some(Err(e)) => Err(refused(format!("no PROOF from the slave: {e}"))),
        None => Err(refused("no PROOF from the slave in time")),
    }
}

/// Where the stream to `hello`'s slave starts and the master shard it comes from, or why it
/// is refused.
fn handshake(core: &Rc<Host>, hello: &Hello) -> Result<(u64, Rc<MasterShard>), ReplicationError> {
    let cfg = &core.shared().config;
    if hello.version != wire::VERSION {
        return Err(refused(format!(
            "replication version {} (this master speaks {})",
            hello.version,
            wire::VERSION
        )));
    }
    let Some(ms) = core.replication().master(hello.shard) else {
        return Err(refused(format!(
            "this broker ({} id {}) does not serve shard {} as master ({})",
            cfg.broker_name,
            cfg.broker_id,
            hello.shard,
            core.replication().role_name(cfg)
        )));
    };
    if hello.broker_name != cfg.broker_name {
        return Err(refused(format!(
            "the slave belongs to broker `{}`, this master is `{}`",
            hello.broker_name, cfg.broker_name
        )));
    }
    if hello.broker_id == cfg.broker_id {
        return Err(refused(format!(
            "the slave's broker_id {} is the master's own",
            hello.broker_id
        )));
    }
    if hello.shard_count != core.shared().shard_count {
        return Err(refused(format!(
            "the slave has {} shards, the master {}: both data directories must have the same shard count",
            hello.shard_count, core.shared().shard_count
        )));
    }
    let shard = &ms.shard;
    if hello.segment_bytes != shard.segment_bytes() {
        return Err(refused(format!(
            "the slave's segments are {} bytes, the master's {}: set the same commit_log_segment_bytes",
            hello.segment_bytes,
            shard.segment_bytes()
        )));
    }
    let (min, end) = shard.log_bounds();
    let slave = super::epochs::Epochs(hello.epochs.clone());
    let point = slave.consistent_point(hello.log_end, &ms.epochs.borrow(), end);
    let Some(point) = point else {
        return Err(refused(format!(
            "the slave's log of shard {} (ending at {}, epochs {:?}) has no epoch in common with the master's (epochs {:?}): move the slave's data directory aside and start it again",
            hello.shard,
            hello.log_end,
            hello.epochs,
            ms.epochs.borrow().0
        )));
    };
    if point < min {
        if hello.log_min == hello.log_end {
            // An empty slave starts where the master's log starts now.
            return Ok((min, ms));
        }
        return Err(refused(format!(
            "the slave's log of shard {} agrees with the master's up to {point}, before the master's oldest segment at {min} (retention deleted what it lacks); move the slave's data directory aside and start it again",
            hello.shard
        )));
    }
    // Below the slave's end: it cuts its log back there first (it has what no master
    // after its own epoch had).
    Ok((point, ms))
}

/// Reads a slave's acknowledgements until the connection ends. An ack is taken only up to
/// what was sent on this connection.
async fn read_acks<R: AsyncRead + Unpin>(
    ms: Rc<MasterShard>,
    link: Rc<SlaveLink>,
    mut rd: R,
    silence: Duration,
) {
    loop {
        match with_timeout(silence, wire::read_frame(&mut rd)).await {
            Some(Ok(Frame::Ack { safe, end })) => {
                let sent = link.sent.get();
                if safe > sent || end > sent {
                    link.close(format!(
                        "it acknowledged offset {} beyond the {sent} sent on this connection",
                        safe.max(end)
                    ));
                    break;
                }
                link.acked.set(link.acked.get().max(safe));
                {
                    let mut f = link.inflight.borrow_mut();
                    while f.front().is_some_and(|(next, _)| *next <= safe) {
                        f.pop_front();
                    }
                }
                link.last_ack.set(ms.shard.clock().now());
                ms.refresh();
            }
            Some(Ok(other)) => {
                link.close(format!("unexpected frame {other:?}"));
                break;
            }
            Some(Err(e)) => {
                link.close(e.to_string());
                break;
            }
            None => {
                link.close(format!("silent for {} ms", silence.as_millis()));
                break;
            }
        }
    }
    ms.refresh();
}

/// Streams the shard's log from the link's start: what is appended goes out at once, in
/// frames of up to `ha_transfer_batch_bytes`; an idle stream says it is alive and what is
/// confirmed.
async fn send_stream<W: AsyncWrite + Unpin>(
    core: &Rc<Host>,
    ms: &MasterShard,
    shard: &Shard,
    link: &SlaveLink,
    wr: &mut W,
) {
    let cfg = &core.shared().config;
    let batch = cfg.ha_transfer_batch_bytes as usize;
    let heartbeat = Duration::from_millis(cfg.ha_send_heartbeat_interval_ms);
    let rate = cfg
        .ha_flow_control_enable
        .then_some(cfg.max_ha_transfer_bytes_per_sec);
    let mut window = (Instant::now(), 0u64);
    let mut last_write = Instant::now();
    let mut confirm_sent = 0u64;
    let mut topics_sent = 0u64;
    let mut auth_sent = 0u64;
    let mut offsets_sent: Option<u64> = None;
    let mut offsets_at = Instant::now() - heartbeat;
    loop {
        if link.is_closed() {
            return;
        }
        // Shard 0's stream carries the topic table: its core (0) keeps the table.
        if ms.shard_id == 0 {
            let version = core
                .shared()
                .topics_version
                .load(std::sync::atomic::Ordering::SeqCst);
            if version != topics_sent {
                let list = core.topic_list();
                if let Err(e) = wire::write_frame(wr, &Frame::Topics(list)).await {
                    link.close(format!("cannot send: {e}"));
                    return;
                }
                topics_sent = version;
            }
            // ACL 2.0's users and ACLs, whole, when they changed.
            let auth = &core.shared().auth;
            let version = auth.version();
            if version != auth_sent {
                let json = auth.snapshot().to_json();
                if let Err(e) = wire::write_frame(wr, &Frame::Auth(json)).await {
                    link.close(format!("cannot send: {e}"));
                    return;
                }
                auth_sent = version;
            }
        }
        // The shard's group offsets, when they moved (at most every heartbeat).
        let version = core.offsets_version(ms.shard_id);
        // Stopping: at once, so the slave that may take over has the last commits.
        if offsets_sent != Some(version)
            && (offsets_at.elapsed() >= heartbeat || core.shared().stopping())
        {
            for frame in offsets_frames(core, ms.shard_id) {
                if let Err(e) = wire::write_frame(wr, &frame).await {
                    link.close(format!("cannot send: {e}"));
                    return;
                }
            }
            offsets_sent = Some(version);
            offsets_at = Instant::now();
        }
        let from = link.sent.get();
        match shard.read_log(from, batch).await {
            Ok(Some(run)) if run.quarantined => {
                // A slave must hold the same bytes at the same offsets, and these are not
                // records it could check: the stream cannot go past them.
                let reason = format!(
                    "the log holds the quarantined range [{}, {}), which cannot be replicated",
                    run.start, run.next
                );
                link.close(reason.clone());
                tracing::error!(shard = ms.shard_id, "replication stopped: {reason}");
                return;
            }
            Ok(Some(run)) => {
                if let Some(rate) = rate {
                    // 100 ms windows of a tenth of the rate each.
                    let allowed = (rate / 10).max(batch as u64);
                    if window.0.elapsed() >= Duration::from_millis(100) {
                        window = (Instant::now(), 0);
                    } else if window.1 >= allowed {
                        glommio::timer::sleep(
                            Duration::from_millis(100).saturating_sub(window.0.elapsed()),
                        )
                        .await;
                        window = (Instant::now(), 0);
                    }
                    window.1 += run.bytes.len() as u64;
                }
                let confirm = ms.confirm();
                // Counted as sent before the write: the slave's ack of these bytes may be
                // read before this task resumes from the write.
                link.sent.set(run.next);
                {
                    let mut f = link.inflight.borrow_mut();
                    if f.len() >= INFLIGHT_MAX {
                        f.pop_front();
                    }
                    f.push_back((run.next, ms.shard.clock().now()));
                }
                let sent =
                    wire::write_data(wr, run.start, run.next, confirm, run.bytes.as_bytes()).await;
                if let Err(e) = sent {
                    link.close(format!("cannot send: {e}"));
                    return;
                }
                confirm_sent = confirm;
                last_write = Instant::now();
            }
            Ok(None) => {
                let confirm = ms.confirm();
                if confirm != confirm_sent || last_write.elapsed() >= heartbeat {
                    let frame = Frame::Keepalive {
                        master_end: shard.log_bounds().1,
                        confirm,
                    };
                    if let Err(e) = wire::write_frame(wr, &frame).await {
                        link.close(format!("cannot send: {e}"));
                        return;
                    }
                    confirm_sent = confirm;
                    last_write = Instant::now();
                }
                // Stopping: the stream ends once the closed log is sent whole and the slave
                // has acknowledged it (the hand-over waits for that, `drain_slaves`). A slave
                // that never does is left when the core stops.
                if core.shared().stopping()
                    && shard.is_closed()
                    && shard.log_bounds().1 == from
                    && link.acked.get() >= from
                {
                    ms.end_drained(link);
                    return;
                }
                let wait = heartbeat
                    .saturating_sub(last_write.elapsed())
                    .max(Duration::from_millis(1));
                futures_lite::future::or(
                    async {
                        shard.wait_appended_past(from, wait).await;
                    },
                    ms.changed.wait(),
                )
                .await;
            }
            Err(e) => {
                link.close(format!("cannot read the log at offset {from}: {e}"));
                tracing::error!(
                    shard = ms.shard_id,
                    "replication stopped: cannot read the log at offset {from}: {e}"
                );
                return;
            }
        }
    }
}

/// The shard's committed group offsets, in OFFSETS frames of at most
/// [`wire::OFFSETS_PER_FRAME`] entries (none for an empty table).
fn offsets_frames(core: &Rc<Host>, shard: u16) -> Vec<Frame> {
    core.offset_entries(shard)
        .chunks(wire::OFFSETS_PER_FRAME)
        .map(|c| Frame::Offsets(c.to_vec()))
        .collect()
}

/// A refusal of a slave, with the reason it is told.
fn refused(why: impl Into<String>) -> ReplicationError {
    ReplicationError::Refused(why.into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A shard timed by `clock` holding one record of `topic`, and its end.
    async fn shard_with_a_record(dir: std::path::PathBuf, clock: &shard::Clock) -> (Shard, u64) {
        let mut config = shard::ShardConfig::new(dir, 0);
        config.clock = clock.clone();
        let shard = Shard::open(config).await.unwrap();
        append_one(&shard).await;
        let end = shard.log_bounds().1;
        (shard, end)
    }

    async fn append_one(shard: &Shard) {
        let mut record = Vec::new();
        message::encode_record(
            &message::MessageFields {
                topic: "Timed",
                body: b"one",
                ..Default::default()
            },
            &mut record,
        )
        .unwrap();
        shard.append("Timed", 0, &record).await.unwrap();
    }

    /// A slave that stops catching up leaves the in-sync set once the shard's clock has
    /// moved past `ha_max_time_slave_not_catchup_ms`, and not a millisecond before.
    #[test]
    fn a_slave_leaves_the_in_sync_set_when_the_clock_passes_the_catch_up_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        shard::run_local(move || async move {
            let clock = shard::Clock::manual();
            let (shard, end) = shard_with_a_record(path, &clock).await;
            // Consumers see past the slave's acknowledgement: what it lacks keeps it out.
            let config = BrokerConfig {
                read_uncommitted: true,
                ..BrokerConfig::default()
            };
            let limit = Duration::from_millis(config.ha_max_time_slave_not_catchup_ms);
            let ms = MasterShard::new(0, shard.clone(), &config, Default::default());
            let link = ms.attach(1, "127.0.0.1:1".into(), end);
            assert_eq!(ms.in_sync_ids(), vec![1], "it has everything: it joins");
            // The log grows past what the slave acknowledged: the limit starts to run.
            append_one(&shard).await;
            ms.refresh();
            clock.advance(limit);
            ms.refresh();
            assert_eq!(ms.in_sync_ids(), vec![1], "behind for exactly the limit");
            assert!(ms.last_left.borrow().is_none());
            clock.advance(Duration::from_millis(1));
            ms.refresh();
            assert!(
                ms.in_sync_ids().is_empty(),
                "behind for longer than the limit"
            );
            let why = ms.last_left.borrow().clone().unwrap_or_default();
            assert!(why.contains("has not caught up for"), "{why}");
            assert!(!link.is_closed(), "it streams on, out of the in-sync set");
        });
    }

    /// With consumers capped at what the in-sync slaves hold (the default), a slave that
    /// stops acknowledging leaves the in-sync set and stays out: what consumers see moves
    /// past its acknowledgement, and it joins again only once it has caught up.
    #[test]
    fn a_slave_that_stops_acknowledging_leaves_and_no_longer_holds_consumers_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        shard::run_local(move || async move {
            let clock = shard::Clock::manual();
            let (shard, end) = shard_with_a_record(path, &clock).await;
            let config = BrokerConfig::default();
            assert!(!config.read_uncommitted);
            let limit = Duration::from_millis(config.ha_max_time_slave_not_catchup_ms);
            let ms = MasterShard::new(0, shard.clone(), &config, Default::default());
            let link = ms.attach(1, "127.0.0.1:1".into(), end);
            assert_eq!(ms.in_sync_ids(), vec![1]);
            append_one(&shard).await;
            let grown = shard.log_bounds().1;
            ms.refresh();
            assert_eq!(
                shard.visible_end(),
                end,
                "capped at the in-sync slave's ack"
            );
            let changes = ms.isr_changes.get();
            clock.advance(limit + Duration::from_millis(1));
            ms.refresh();
            assert!(ms.in_sync_ids().is_empty(), "it left and did not rejoin");
            ms.refresh();
            assert!(ms.in_sync_ids().is_empty(), "it stays out while behind");
            assert_eq!(shard.visible_end(), grown, "consumers see past it");
            assert_eq!(ms.isr_changes.get(), changes + 1, "one change: the leave");
            // Caught up: it joins again.
            link.acked.set(grown);
            ms.refresh();
            assert_eq!(ms.in_sync_ids(), vec![1]);
        });
    }

    /// A SYNC_MASTER send waits for its in-sync slave until the shard's clock passes
    /// `slave_timeout_ms`, then is answered FLUSH_SLAVE_TIMEOUT.
    #[test]
    fn a_sync_send_times_out_when_the_clock_passes_slave_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        shard::run_local(move || async move {
            let clock = shard::Clock::manual();
            let (shard, end) = shard_with_a_record(path, &clock).await;
            let config = BrokerConfig {
                broker_role: BrokerRole::SyncMaster,
                ..BrokerConfig::default()
            };
            let timeout = Duration::from_millis(config.slave_timeout_ms);
            let ms = Rc::new(MasterShard::new(
                0,
                shard.clone(),
                &config,
                Default::default(),
            ));
            ms.attach(1, "127.0.0.1:1".into(), end);
            assert_eq!(ms.in_sync_ids(), vec![1]);
            append_one(&shard).await;
            let wanted = shard.log_bounds().1;
            let answered = Rc::new(Cell::new(false));
            let send = glommio::spawn_local({
                let (ms, answered) = (ms.clone(), answered.clone());
                async move {
                    let r = ms.wait_replicated(wanted).await;
                    answered.set(true);
                    r
                }
            });
            let settle = || async {
                for _ in 0..20 {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
            };
            settle().await;
            clock.advance(timeout - Duration::from_millis(1));
            ms.changed.notify_all();
            settle().await;
            assert!(
                !answered.get(),
                "answered before slave_timeout_ms had passed"
            );
            clock.advance(Duration::from_millis(1));
            ms.changed.notify_all();
            let r = send.await;
            assert!(
                matches!(r, Err(BrokerError::FlushSlaveTimeout { .. })),
                "{r:?}"
            );
        });
    }

    /// At a graceful stop the stream of a slave that has everything ends, and its link goes;
    /// the hand-over may ask only after that (a loaded host), and must still count it.
    #[test]
    fn a_slave_whose_stream_ended_at_the_stop_still_counts_for_the_hand_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        shard::run_local(move || async move {
            let shard = Shard::open(shard::ShardConfig::new(path, 0)).await.unwrap();
            append_one(&shard).await;
            let end = shard.log_bounds().1;
            let ms = MasterShard::new(
                0,
                shard,
                &BrokerConfig::default(),
                crate::epochs::Epochs::default(),
            );
            let link = ms.attach(1, "127.0.0.1:1".into(), 0);
            link.in_sync.set(true);
            link.acked.set(end);
            ms.end_drained(&link);
            ms.refresh();
            assert!(ms.in_sync().is_empty(), "the ended link is gone");
            assert_eq!(ms.wait_acknowledged(end, Instant::now()).await, vec![1]);
            // One that had not acknowledged it all does not count.
            assert_eq!(
                ms.wait_acknowledged(end + 1, Instant::now()).await,
                Vec::<u64>::new()
            );
        });
    }
}
