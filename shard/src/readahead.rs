//! Cold reads of the CommitLog, shared between pulls and read ahead for consumers catching up
//! from disk. The CommitLog is read with O_DIRECT, so the page cache, which RocketMQ and Kafka
//! rely on both to read ahead and to serve one read to every queue that lies in it, does
//! nothing here; this does both, per shard:
//!
//! * **Shared.** Every cold read stays here (in flight or done) until newer reads push it
//!   out, and a pull whose record some read already covers uses that read. Queues interleave
//!   in the log: when one queue's read reads through its neighbours' records, the
//!   neighbours' consumers, usually at about the same place, take their records from it
//!   instead of reading the same bytes again.
//! * **Ahead.** When a pull reads from the segment files, the shard starts the reads of the
//!   window that follows (the same queue, from the offset the pull returns): the disk then
//!   works while the core sends the current window, and pulls from several queues stop
//!   arriving, and waiting on the disk, in step with each other.
//! * **Bounded in flight.** At most [`READS_IN_FLIGHT_MAX`] cold reads are at the disk at
//!   once. The device queue is shared with the CommitLog's own writes: a catching-up
//!   consumer that filled it held acknowledged appends unwritten until producers were
//!   refused as busy.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::storage::{ReadBytes, SegmentFile};

/// Bytes of cold reads one shard keeps, in flight or done; the oldest read goes first when a
/// new one needs room. Sixteen queues caught up together at 1 KiB a message through pulls of
/// 1,024 take about 20 MiB of log a window, and the window read ahead as much again.
pub const CACHED_BYTES_MAX: u64 = 64 << 20;

/// Cold reads at the disk at once, per shard. Each is at most 1 MiB.
pub(crate) const READS_IN_FLIGHT_MAX: usize = 16;

/// Entries before a record's offset that a lookup looks at: reads overlap only where one
/// queue's read reached into another's, so the covering one is among the nearest.
const LOOKUP_DEPTH: usize = 8;

enum State {
    Pending(Vec<Waker>),
    /// `None`: the read failed; the pull reads again itself and reports the error.
    Done(Option<ReadBytes>),
}

/// The result of one cold read, once it is there.
pub(crate) struct Slot {
    state: RefCell<State>,
}

impl Slot {
    fn finish(&self, r: Option<ReadBytes>) {
        let old = std::mem::replace(&mut *self.state.borrow_mut(), State::Done(r));
        if let State::Pending(wakers) = old {
            wakers.into_iter().for_each(Waker::wake);
        }
    }

    fn failed(&self) -> bool {
        matches!(&*self.state.borrow(), State::Done(None))
    }
}

/// Waits for a [`Slot`].
pub(crate) struct SlotWait(pub(crate) Rc<Slot>);

impl Future for SlotWait {
    type Output = Option<ReadBytes>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.0.state.borrow_mut();
        match &mut *state {
            State::Done(r) => Poll::Ready(r.clone()),
            State::Pending(wakers) => {
                if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// A read found for a record: the records after it in the log are usually in it too.
#[derive(Clone)]
struct Hit {
    file: Rc<SegmentFile>,
    /// The commit-log offset the read starts at.
    base: u64,
    valid_end: u64,
    slot: Rc<Slot>,
}

impl Hit {
    /// Whether this read holds `[from, from + len)` of `file` too.
    fn covers(&self, file: &Rc<SegmentFile>, from: u64, len: u64) -> bool {
        Rc::ptr_eq(&self.file, file) && self.base <= from && from + len <= self.valid_end
    }
}

/// What lookups of one pull's records learned so far (see [`Readahead::find_next`]): the read
/// the last record came from, and a stretch `[from, below)` of the log no read starts in, of
/// which the record at `from` had no read. A read that ends before a record's end holds none
/// of the later records either, and records later in the log end later.
#[derive(Default)]
pub(crate) struct Misses {
    last: Option<Hit>,
    from: u64,
    below: u64,
}

struct Entry {
    file: Rc<SegmentFile>,
    len: u64,
    /// Where the bytes this read may serve end: the read's end, or the log's written end
    /// when it started if that is lower (past it the file held no record yet).
    valid_end: u64,
    slot: Rc<Slot>,
    /// Started ahead of a pull, and not yet used by one.
    ahead_unused: Cell<bool>,
}

/// The cold reads of one shard: by (commit-log offset, sequence), and in the order they
/// were started, oldest first.
pub(crate) struct Readahead {
    entries: BTreeMap<(u64, u64), Entry>,
    order: VecDeque<(u64, u64)>,
    next_seq: u64,
    bytes: u64,
    in_flight: Rc<glommio::sync::Semaphore>,
    /// Reads started ahead that a pull then used, and reads started ahead.
    pub(crate) hits: u64,
    pub(crate) started: u64,
}

impl Default for Readahead {
    fn default() -> Self {
        Readahead {
            entries: BTreeMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            bytes: 0,
            in_flight: Rc::new(glommio::sync::Semaphore::new(READS_IN_FLIGHT_MAX as u64)),
            hits: 0,
            started: 0,
        }
    }
}

impl Readahead {
    /// The read that holds `[from, from + len)` of `file`; `by_pull` when a pull takes the
    /// record from it (a read ahead then counts as used). Without one, the offset the next
    /// read starts at: no record from `from` up to it has a read either (see [`Misses`]).
    fn find(
        &mut self,
        file: &Rc<SegmentFile>,
        from: u64,
        len: u64,
        by_pull: bool,
    ) -> Result<Hit, u64> {
        let end = from + len;
        let found = self
            .entries
            .range(..=(from, u64::MAX))
            .rev()
            .take(LOOKUP_DEPTH)
            .find(|(_, e)| Rc::ptr_eq(&e.file, file) && end <= e.valid_end && !e.slot.failed());
        let Some((key, e)) = found else {
            let next = self.entries.range((from + 1, 0)..).next();
            return Err(next.map_or(u64::MAX, |(k, _)| k.0));
        };
        if by_pull && e.ahead_unused.replace(false) {
            self.hits += 1;
        }
        Ok(Hit {
            file: e.file.clone(),
            base: key.0,
            valid_end: e.valid_end,
            slot: e.slot.clone(),
        })
    }

    /// [`Readahead::find`] for the records of one pull, in log order: a record in the read
    /// the previous one came from, or below where the next read starts after a record no
    /// read holds, is answered without a lookup.
    pub(crate) fn find_next(
        &mut self,
        misses: &mut Misses,
        file: &Rc<SegmentFile>,
        from: u64,
        len: u64,
        by_pull: bool,
    ) -> Option<(u64, Rc<Slot>)> {
        if let Some(h) = &misses.last {
            if h.covers(file, from, len) {
                return Some((h.base, h.slot.clone()));
            }
        }
        if misses.from <= from && from < misses.below {
            return None;
        }
        match self.find(file, from, len, by_pull) {
            Ok(h) => {
                let found = (h.base, h.slot.clone());
                misses.last = Some(h);
                Some(found)
            }
            Err(next) => {
                *misses = Misses {
                    last: None,
                    from,
                    below: next,
                };
                None
            }
        }
    }

    /// Starts reading `[from, from + len)` of `file` (block aligned), of which the bytes
    /// below `valid_end` hold records, and keeps the read for any pull it covers.
    pub(crate) fn start(
        &mut self,
        file: Rc<SegmentFile>,
        from: u64,
        len: u64,
        valid_end: u64,
        ahead: bool,
    ) -> Rc<Slot> {
        while self.bytes + len > CACHED_BYTES_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.entries.remove(&old) {
                self.bytes -= e.len;
            }
        }
        let slot = Rc::new(Slot {
            state: RefCell::new(State::Pending(Vec::new())),
        });
        let task_slot = slot.clone();
        let task_file = file.clone();
        let in_flight = self.in_flight.clone();
        glommio::spawn_local(async move {
            // A closed semaphore (never closed here) would only lift the bound.
            let _permit = in_flight.acquire_permit(1).await;
            let r = task_file.read_aligned(from, len as usize).await.ok();
            task_slot.finish(r);
        })
        .detach();
        if ahead {
            self.started += 1;
        }
        let key = (from, self.next_seq);
        self.next_seq += 1;
        self.bytes += len;
        self.order.push_back(key);
        self.entries.insert(
            key,
            Entry {
                file,
                len,
                valid_end: valid_end.min(from + len),
                slot: slot.clone(),
                ahead_unused: Cell::new(ahead),
            },
        );
        slot
    }

    /// Forgets the reads of bytes at or past `end` (the log was cut there) and of segments
    /// below `min` (deleted: their descriptors close once no pull holds them).
    pub(crate) fn forget(&mut self, min: u64, end: u64) {
        let before = self.entries.len();
        self.entries
            .retain(|_, e| e.file.start >= min && e.valid_end <= end);
        if self.entries.len() != before {
            self.order.retain(|k| self.entries.contains_key(k));
            self.bytes = self.entries.values().map(|e| e.len).sum();
        }
    }
}
