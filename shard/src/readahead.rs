//! Readahead for consumers catching up from disk. The CommitLog is read with O_DIRECT, so
//! the kernel's page-cache readahead, which RocketMQ and Kafka rely on, does nothing here.
//! When a pull reads from the segment files, the shard starts the reads of the window that
//! follows (the same queue, from the offset the pull returns) and keeps them here until the
//! next pull takes them: the disk then works while the core sends the current window, and
//! pulls from several queues stop arriving, and waiting on the disk, in step with each other.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::storage::{ReadBytes, SegmentFile};

/// Bytes of reads ahead one shard keeps, in flight or done. Four queues' windows of 1,024
/// messages of 1 KiB take about 4 MiB; the oldest read goes first when a new one needs room.
pub(crate) const READAHEAD_BYTES_MAX: u64 = 16 << 20;

enum State {
    Pending(Vec<Waker>),
    /// `None`: the read failed; the pull reads again itself and reports the error.
    Done(Option<ReadBytes>),
}

/// The result of one read ahead, once it is there.
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

struct Entry {
    file: Rc<SegmentFile>,
    from: u64,
    len: u64,
    slot: Rc<Slot>,
}

impl Entry {
    fn covers(&self, file: &Rc<SegmentFile>, from: u64, len: u64) -> bool {
        Rc::ptr_eq(&self.file, file) && self.from <= from && from + len <= self.from + self.len
    }
}

/// The reads ahead of one shard, oldest first.
#[derive(Default)]
pub(crate) struct Readahead {
    entries: VecDeque<Entry>,
    bytes: u64,
    /// Reads a pull found here, and reads started.
    pub(crate) hits: u64,
    pub(crate) started: u64,
}

impl Readahead {
    /// Takes the read ahead that covers `[from, from + len)` of `file`, with the offset it
    /// starts at.
    pub(crate) fn take(
        &mut self,
        file: &Rc<SegmentFile>,
        from: u64,
        len: u64,
    ) -> Option<(u64, Rc<Slot>)> {
        let i = self
            .entries
            .iter()
            .position(|e| e.covers(file, from, len))?;
        let e = self.entries.remove(i)?;
        self.bytes -= e.len;
        self.hits += 1;
        Some((e.from, e.slot))
    }

    /// Starts reading `[from, from + len)` of `file` (block aligned) unless a read ahead
    /// already covers it. Returns whether it started a read.
    pub(crate) fn start(&mut self, file: Rc<SegmentFile>, from: u64, len: u64) -> bool {
        if len > READAHEAD_BYTES_MAX || self.entries.iter().any(|e| e.covers(&file, from, len)) {
            return false;
        }
        while self.bytes + len > READAHEAD_BYTES_MAX {
            match self.entries.pop_front() {
                Some(old) => self.bytes -= old.len,
                None => break,
            }
        }
        let slot = Rc::new(Slot {
            state: RefCell::new(State::Pending(Vec::new())),
        });
        let task_slot = slot.clone();
        let task_file = file.clone();
        glommio::spawn_local(async move {
            let r = task_file.read_aligned(from, len as usize).await.ok();
            task_slot.finish(r);
        })
        .detach();
        self.bytes += len;
        self.started += 1;
        self.entries.push_back(Entry {
            file,
            from,
            len,
            slot,
        });
        true
    }
}
