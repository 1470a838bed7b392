//! One core's bound on client connections: how many it keeps open (its share of
//! `connections_max`, and none that would eat into the descriptors kept for the storage),
//! how many one peer address may hold (its share of `connections_per_peer_max`, so one host
//! cannot take every slot), and why it closed the ones it did. Refusals and timeouts are counted (broker-status) and logged at most once
//! per interval per core, with how many there were since the last line.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use broker_base::error::{BrokerError, QuotaExceeded};

/// At most one line per reason and core this often.
const LOG_INTERVAL: Duration = Duration::from_secs(5);
/// Descriptors never given to connections: segment, ConsumeQueue, IndexFile, offset and
/// config files, the tail ring, io_uring, the NameServer registration and metrics sockets.
const DESCRIPTORS_RESERVED_MIN: u64 = 256;

/// Why the broker closed a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosedFor {
    /// The core already holds its share of `connections_max`, or the process is close to
    /// its descriptor limit; or the peer address holds its share of
    /// `connections_per_peer_max`.
    Limit,
    /// Nothing in flight and nothing received for `connection_idle_timeout_ms`.
    Idle,
    /// A frame began and was not complete within `frame_deadline_ms`.
    FrameDeadline,
    /// A frame that is not one (answered "bad frame" first).
    BadFrame,
    /// Plaintext on a listener whose `tls_mode` is enforcing.
    Plaintext,
    /// A TLS handshake that failed or did not finish within `frame_deadline_ms`.
    TlsHandshake,
}

impl ClosedFor {
    /// How many reasons there are: the per-reason counters are indexed by `self as usize`.
    const COUNT: usize = 6;
    const LAST_IS_COUNTED: () = assert!(ClosedFor::TlsHandshake as usize + 1 == ClosedFor::COUNT);

    fn describe(self) -> &'static str {
        match self {
            ClosedFor::Limit => {
                "connection limit reached (connections_max, or the descriptors kept for the storage): new connections are closed at once"
            }
            ClosedFor::Idle => "closed idle connections (connection_idle_timeout_ms)",
            ClosedFor::FrameDeadline => {
                "closed connections whose frame was not complete in time (frame_deadline_ms)"
            }
            ClosedFor::BadFrame => "closed connections after a malformed frame",
            ClosedFor::Plaintext => {
                "closed plaintext connections: tls_mode = enforcing accepts TLS only"
            }
            ClosedFor::TlsHandshake => {
                "closed connections whose TLS handshake failed or did not finish within frame_deadline_ms"
            }
        }
    }
}

/// When a connection refused for its peer's bound may try again: a slot frees up when one
/// of the peer's connections closes, which the broker cannot foresee.
const PEER_RETRY_AFTER_MS: u64 = 1_000;

/// The connections one core may keep open: its share of `connections_max` (or of
/// `connections_per_peer_max`), at least one.
pub fn per_core_max(connections_max: u64, cores: u16) -> usize {
    (connections_max / u64::from(cores.max(1))).max(1) as usize
}

/// Descriptors kept free for the storage under a descriptor limit of `limit`: an eighth of
/// it, at least [`DESCRIPTORS_RESERVED_MIN`] (or the whole limit when it is smaller).
fn descriptors_reserved(limit: u64) -> u64 {
    (limit / 8).max(DESCRIPTORS_RESERVED_MIN).min(limit)
}

/// Whether a connection that was given descriptor `fd` eats into the storage's reserve.
/// Linux hands out the lowest free descriptor, so `fd` being given means every one below it
/// is open: at least `fd + 1` descriptors are in use.
fn into_reserve(fd: u64, limit: Option<u64>) -> bool {
    limit.is_some_and(|l| fd + descriptors_reserved(l) >= l)
}

/// The process's soft limit on open descriptors, if it has one (read at every accept, so
/// a limit lowered while running counts too).
pub fn descriptor_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and touches nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Refused connections answered at their first request at once on a core, at most: past
/// it a connection over its peer's bound is closed without an answer, so a host dialling in
/// a loop holds no more descriptors than this for its refusals.
pub const REFUSALS_ANSWERED_MAX: usize = 32;

/// What [`Connections::admit`] decided.
#[derive(Debug, Clone)]
pub enum Admission {
    /// Served; its place is given back with [`Connections::left`].
    Admitted,
    /// Closed at once.
    Refused,
    /// Over its peer's bound: its first request is answered with this error, then it is
    /// closed. Its place is given back with [`Connections::refusal_answered`].
    Answer(BrokerError),
}

pub struct Connections {
    open: Cell<usize>,
    max: usize,
    /// Open connections per peer address, and the most one address may hold on this core.
    per_peer: RefCell<HashMap<IpAddr, usize>>,
    per_peer_max: usize,
    /// Refused connections waiting for their first request to be answered.
    answering: Cell<usize>,
    closed: [Cell<u64>; ClosedFor::COUNT],
    unlogged: [Cell<u64>; ClosedFor::COUNT],
    logged_at: [Cell<Option<Instant>>; ClosedFor::COUNT],
}

impl Connections {
    pub fn new(max: usize, per_peer_max: usize) -> Connections {
        let () = ClosedFor::LAST_IS_COUNTED;
        Connections {
            open: Cell::new(0),
            max,
            per_peer: RefCell::default(),
            per_peer_max,
            answering: Cell::new(0),
            closed: Default::default(),
            unlogged: Default::default(),
            logged_at: Default::default(),
        }
    }

    /// Takes a place for a new connection from `peer` that was given descriptor `fd`, or
    /// counts the refusal. Refused when the core holds its share, or when the descriptor
    /// shows that the storage's reserve is being used up (the caller closes it); answered
    /// with why when `peer` holds its share of `connections_per_peer_max`.
    pub fn admit(&self, fd: u64, peer: IpAddr) -> Admission {
        if self.open.get() >= self.max || into_reserve(fd, descriptor_limit()) {
            self.count(ClosedFor::Limit, "");
            return Admission::Refused;
        }
        let mut per_peer = self.per_peer.borrow_mut();
        let held = per_peer.entry(peer).or_insert(0);
        if *held >= self.per_peer_max {
            drop(per_peer);
            self.count_with(
                ClosedFor::Limit,
                &peer.to_string(),
                "connections_per_peer_max: the peer holds its share",
            );
            if self.answering.get() >= REFUSALS_ANSWERED_MAX {
                return Admission::Refused;
            }
            self.answering.set(self.answering.get() + 1);
            return Admission::Answer(BrokerError::quota(QuotaExceeded {
                limit: "connections_per_peer_max".into(),
                value: format!("{} connections on this core", self.per_peer_max),
                who: peer.to_string(),
                retry_after_ms: PEER_RETRY_AFTER_MS,
            }));
        }
        *held += 1;
        self.open.set(self.open.get() + 1);
        Admission::Admitted
    }

    /// A connection `admit` let in has closed.
    pub fn left(&self, peer: IpAddr) {
        self.open.set(self.open.get().saturating_sub(1));
        let mut per_peer = self.per_peer.borrow_mut();
        if let Some(held) = per_peer.get_mut(&peer) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                per_peer.remove(&peer);
            }
        }
    }

    /// A connection `admit` answered with a refusal has closed.
    pub fn refusal_answered(&self) {
        self.answering.set(self.answering.get().saturating_sub(1));
    }

    /// Connections open from `peer`.
    pub fn from_peer(&self, peer: IpAddr) -> usize {
        self.per_peer.borrow().get(&peer).copied().unwrap_or(0)
    }

    pub fn open(&self) -> usize {
        self.open.get()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn closed(&self, why: ClosedFor) -> u64 {
        self.closed[why as usize].get()
    }

    /// Counts a connection closed for `why`, and says so at most once per interval.
    pub fn count(&self, why: ClosedFor, peer: &str) {
        self.count_with(why, peer, "");
    }

    /// [`Connections::count`] with what went wrong, shown on the line when one is printed
    /// (the last one seen then).
    pub fn count_with(&self, why: ClosedFor, peer: &str, detail: &str) {
        let i = why as usize;
        self.closed[i].set(self.closed[i].get() + 1);
        self.unlogged[i].set(self.unlogged[i].get() + 1);
        let now = Instant::now();
        if self.logged_at[i]
            .get()
            .is_none_or(|t| now.duration_since(t) >= LOG_INTERVAL)
        {
            let count = self.unlogged[i].replace(0);
            self.logged_at[i].set(Some(now));
            tracing::warn!(
                count,
                open = self.open.get(),
                max = self.max,
                last_peer = peer,
                detail,
                "{} ({count} since the last such line)",
                why.describe()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_gets_its_share_and_the_storage_keeps_its_descriptors() {
        assert_eq!(per_core_max(10_000, 2), 5_000);
        assert_eq!(per_core_max(3, 4), 1);
        // 1,024 descriptors: 256 kept; a connection on fd 767 is the last one let in.
        assert!(!into_reserve(767, Some(1_024)));
        assert!(into_reserve(768, Some(1_024)));
        // 100,000: an eighth kept.
        assert!(into_reserve(87_500, Some(100_000)));
        assert!(!into_reserve(87_499, Some(100_000)));
        assert!(!into_reserve(1 << 40, None));
        assert!(into_reserve(0, Some(100)));
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn a_full_core_refuses_and_counts_and_a_close_makes_room() {
        let c = Connections::new(2, 10);
        assert!(matches!(c.admit(10, A), Admission::Admitted));
        assert!(matches!(c.admit(11, B), Admission::Admitted));
        assert!(matches!(c.admit(12, B), Admission::Refused));
        assert_eq!((c.open(), c.closed(ClosedFor::Limit)), (2, 1));
        c.left(A);
        assert!(matches!(c.admit(12, B), Admission::Admitted));
        c.count(ClosedFor::Idle, "127.0.0.1:1");
        assert_eq!(c.closed(ClosedFor::Idle), 1);
    }

    #[test]
    fn one_peer_holds_its_share_and_others_still_get_in() {
        let c = Connections::new(100, 2);
        assert!(matches!(c.admit(10, A), Admission::Admitted));
        assert!(matches!(c.admit(11, A), Admission::Admitted));
        // The third from A is answered with the limit it hit, and counted.
        let Admission::Answer(e) = c.admit(12, A) else {
            panic!("a third connection from one peer was not refused");
        };
        let text = e.to_string();
        assert!(text.contains("connections_per_peer_max = 2"), "{text}");
        assert!(
            text.contains("10.0.0.1") && text.contains("retry after"),
            "{text}"
        );
        assert_eq!(e.retry_after_ms(), Some(PEER_RETRY_AFTER_MS));
        assert_eq!(c.closed(ClosedFor::Limit), 1);
        // Another peer is let in; A is again once one of its connections closed.
        assert!(matches!(c.admit(13, B), Admission::Admitted));
        c.left(A);
        assert_eq!(c.from_peer(A), 1);
        assert!(matches!(c.admit(14, A), Admission::Admitted));
        // Refusals answered at once are bounded: past them, closed without an answer.
        c.refusal_answered();
        for _ in 0..REFUSALS_ANSWERED_MAX {
            assert!(matches!(c.admit(15, A), Admission::Answer(_)));
        }
        assert!(matches!(c.admit(15, A), Admission::Refused));
        c.refusal_answered();
        assert!(matches!(c.admit(15, A), Admission::Answer(_)));
        assert_eq!(c.open(), 3);
    }
}
