//! Two lanes of work on a core, so that a client with little in flight is not queued behind
//! a pipelining one. [`crate::turn`] shares the core between the connections that have
//! work ready, in round robin; that still leaves a paced client's request behind a round
//! of every flooder's turn, three times over (its reader, its request, its writer), and
//! behind the moment glommio notices its socket, which it does only between slices of a
//! task queue (every 10 ms under a flood).
//!
//! A connection whose reads bring at most `connection_light_requests_max` requests each is
//! in the [`Lane::Light`] lane: its reader, its request tasks and its writer run in a glommio
//! task queue of their own, and its reader, finding its socket empty, waits for bytes in the
//! core's [`Watcher`] (an `epoll` instance the bulk lane polls every few requests) and with
//! a peek on glommio's latency ring (for when the core is otherwise idle). Every other
//! connection is in the [`Lane::Bulk`] lane, the executor's default queue, with the core's
//! other work; its request tasks end the queue's slice every [`BULK_YIELD_EVERY`] requests,
//! so that light work woken meanwhile runs within a few requests (glommio resumes a woken
//! queue just behind the one that ran last, so without these yields it would wait a whole
//! slice).
//!
//! A connection moves to the bulk lane when two reads in a row brought more than the bound
//! (at the request past it), or one read four times the bound, and is tried in the light
//! lane again after [`BULK_TERM`], when its socket has nothing waiting. (What a connection
//! has in flight would not tell: the reader's turns let the requests it started finish
//! before it reads more, so a flooder has few in flight at any moment.) Its reader moves at
//! a request or before it waits for bytes, its writer when it has flushed. Before it moves,
//! the reader lets the tasks it started in the lane it leaves begin, so requests start in
//! the order they arrived. `connection_light_requests_max = 0` puts every connection in the
//! bulk lane.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::io::AsyncReadExt;
use glommio::net::TcpStream;
use glommio::{Latency, Shares, Task, TaskQueueHandle};

use broker_base::tls::Stream;

/// Bulk requests served between two ends of the default queue's slice.
pub const BULK_YIELD_EVERY: u32 = 8;

/// How long a light connection's reader waits on the latency ring after its last bytes; past
/// it, a connection gone quiet waits the ordinary way and holds no peek (an idle connection
/// costs the latency ring nothing).
pub const LIGHT_WAIT_MAX: Duration = Duration::from_secs(1);

/// How long a connection stays in the bulk lane before it is tried in the light lane again,
/// once its socket has nothing waiting. Its reads could not tell sooner: in the bulk lane a
/// socket is noticed only at glommio's reaps, so even a slow client's requests gather
/// between two reads.
pub const BULK_TERM: Duration = Duration::from_millis(10);

/// Reads in a row past the bound that move a connection to the bulk lane: one such read may
/// be a paced client's hiccup (a late timer that sends several at once, a read delayed by
/// the core), two are a pipelining client.
pub const OVER_READS: u32 = 2;
/// One read bringing this many times the bound moves a connection to the bulk lane at once.
pub const OVER_AT_ONCE: usize = 4;

/// How much a connection's reads bring, which decides its lane.
#[derive(Debug, Default)]
pub struct Pace {
    /// Requests started since the last read.
    since_read: usize,
    /// Reads in a row that brought more than the bound, this one included.
    over_reads: u32,
    /// Since when it is in the bulk lane.
    bulk_since: Option<Instant>,
}

impl Pace {
    /// Counts a move to the light lane.
    pub fn entered_light(&mut self) {
        self.bulk_since = None;
    }
}

/// Where a connection's tasks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Few requests in flight: a task queue of its own, ahead of the bulk.
    Light,
    /// The executor's default queue, with the core's other work.
    Bulk,
}

/// A core's lanes.
pub struct Lanes {
    /// The light lane's queue; `None` when lanes are off.
    light: Option<TaskQueueHandle>,
    /// The most requests one read of a light connection brings.
    light_requests_max: usize,
    /// Bulk requests served, for [`Lanes::bulk_served`].
    bulk_served: Cell<u32>,
    /// The light connections waiting for bytes, polled between bulk requests.
    watcher: Rc<Watcher>,
}

impl Lanes {
    /// The lanes of the running executor; with `light_requests_max` 0, one lane (the bulk).
    pub fn new(light_requests_max: usize) -> Lanes {
        let light = (light_requests_max > 0).then(|| {
            glommio::executor().create_task_queue(Shares::default(), Latency::NotImportant, "light")
        });
        Lanes {
            light,
            light_requests_max,
            bulk_served: Cell::new(0),
            watcher: Rc::new(Watcher::new()),
        }
    }

    /// Counts a request a connection in `now` started; the lane it belongs in from now: the
    /// bulk, once it started more than the bound since its last read.
    pub fn started(&self, pace: &mut Pace, now: Lane) -> Lane {
        let max = self.light_requests_max;
        pace.since_read += 1;
        if pace.since_read == max + 1 {
            pace.over_reads += 1;
        }
        let over = pace.over_reads >= OVER_READS || pace.since_read > OVER_AT_ONCE * max;
        if self.light.is_some() && now == Lane::Light && pace.since_read > max && over {
            pace.bulk_since = Some(Instant::now());
            Lane::Bulk
        } else {
            now
        }
    }

    /// Counts a read that brought bytes.
    pub fn read(&self, pace: &mut Pace) {
        if pace.since_read <= self.light_requests_max {
            pace.over_reads = 0;
        }
        pace.since_read = 0;
    }

    /// The lane a connection in `now` belongs in as it waits for bytes: light again after
    /// [`BULK_TERM`] in the bulk lane, if its socket has nothing waiting (the caller's to
    /// tell; a flooder's always has).
    pub fn settled(&self, pace: &Pace, now: Lane) -> Lane {
        let served = pace.bulk_since.is_none_or(|t| t.elapsed() >= BULK_TERM);
        if self.light.is_some() && now == Lane::Bulk && served {
            Lane::Light
        } else {
            now
        }
    }

    /// The lane a new connection starts in.
    pub fn first(&self) -> Lane {
        if self.light.is_some() {
            Lane::Light
        } else {
            Lane::Bulk
        }
    }

    /// Starts `fut` in `lane`'s queue.
    pub fn spawn<T: 'static>(
        &self,
        lane: Lane,
        fut: impl Future<Output = T> + 'static,
    ) -> Option<Task<T>> {
        let queue = match (lane, self.light) {
            (Lane::Light, Some(q)) => q,
            _ => TaskQueueHandle::default(),
        };
        match glommio::spawn_local_into(fut, queue) {
            Ok(t) => Some(t),
            Err(e) => {
                // Only a removed queue refuses a task, and the lanes' queues live as long
                // as the executor.
                tracing::error!("cannot start a connection's task: {e}");
                None
            }
        }
    }

    /// A reader in `lane` ended its turn (`crate::turn`): it lets every other task that is
    /// ready run first and, in the bulk lane, wakes the light connections whose bytes came
    /// and lets them run next. A bulk reader can start requests for milliseconds without
    /// one finishing (they may wait for the shard's room), and its turns are where the
    /// light lane gets in then.
    pub async fn turn_over(&self, lane: Lane) {
        if lane == Lane::Bulk && self.light.is_some() && self.watcher.poll() {
            glommio::executor().yield_task_queue_now().await;
        } else {
            futures_lite::future::yield_now().await;
        }
    }

    /// Called by each bulk request when done: every [`BULK_YIELD_EVERY`]th ends the default
    /// queue's slice, so the light lane's woken work runs next.
    pub async fn bulk_served(&self) {
        if self.light.is_none() {
            return;
        }
        let n = self.bulk_served.get().wrapping_add(1);
        self.bulk_served.set(n);
        if n.is_multiple_of(BULK_YIELD_EVERY) {
            let _ = self.watcher.poll();
            glommio::executor().yield_task_queue_now().await;
        }
    }
}

/// Where a connection's reader takes its bytes from: the socket it shares with its
/// [`Sink`], each borrowing it only while polled.
pub struct Source {
    // Dropped in this order: the watch names the socket's descriptor, which must still be
    // the socket's when it is taken off the epoll instance.
    /// Its place in the core's [`Watcher`], while it has one.
    watch: Option<Watch>,
    /// A second descriptor of the socket, which a light wait peeks on; held while the
    /// connection is light and was heard from within `LIGHT_WAIT_MAX`.
    peeker: Option<TcpStream>,
    stream: Rc<RefCell<Stream>>,
    /// Plaintext: read with nonblocking `recv`s, so that a light wait need not be glommio's
    /// read.
    plain: bool,
}

/// Where a connection's writer writes to.
pub struct Sink(Rc<RefCell<Stream>>);

impl Source {
    /// A reader for `stream` and what its writer writes to.
    pub fn split(stream: Stream) -> (Source, Sink) {
        let plain = matches!(stream, Stream::Plain(_));
        let stream = Rc::new(RefCell::new(stream));
        let source = Source {
            watch: None,
            peeker: None,
            stream: stream.clone(),
            plain,
        };
        (source, Sink(stream))
    }

    /// Reads what has arrived into `into`, waiting for it: the ordinary way (glommio's poll
    /// in the main ring, `TimedOut` after the socket's read timeout) or, given a `wait`, the
    /// light lane's way (`TimedOut` after `wait`): a peek on the latency ring, which glommio
    /// submits at its next reap, and the core's [`Watcher`], which the bulk lane polls every
    /// few requests. A TLS connection always waits the ordinary way.
    pub async fn read(
        &mut self,
        into: &mut [u8],
        wait: Option<Duration>,
        lanes: &Lanes,
    ) -> std::io::Result<usize> {
        let Some(wait) = wait.filter(|_| self.plain) else {
            self.quiet();
            return Shared(&self.stream).read(into).await;
        };
        loop {
            if let Some(r) = self.try_read(into) {
                return r;
            }
            if self.peeker.is_none() {
                let second = second_descriptor(self.stream.borrow().tcp());
                match second {
                    Ok(p) => self.peeker = Some(p),
                    Err(e) => {
                        tracing::debug!("no second descriptor to wait on: {e}");
                        return Shared(&self.stream).read(into).await;
                    }
                }
            }
            let Some(peeker) = &self.peeker else {
                continue;
            };
            let watch = match self.watch.take() {
                Some(w) => w,
                None => lanes.watcher.watch(self.stream.borrow().tcp().as_raw_fd()),
            };
            let watched = watch.arm();
            self.watch = Some(watch);
            let mut one = [0u8; 1];
            let peeked = async {
                match peeker.peek(&mut one).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                }
            };
            let ready = async {
                match (watched, &self.watch) {
                    (true, Some(w)) => {
                        w.ready().await;
                        Ok(())
                    }
                    // Not watched: the peek alone.
                    _ => futures_lite::future::pending().await,
                }
            };
            let waited = futures_lite::future::or(peeked, ready);
            match crate::deadline::with_timeout(wait, waited).await {
                None => {
                    // Gone quiet: it waits the ordinary way from now on.
                    self.quiet();
                    return Err(ErrorKind::TimedOut.into());
                }
                Some(Err(e)) => return Err(e),
                // Bytes, or the end of the stream: the next `recv` tells which.
                Some(Ok(())) => {}
            }
        }
    }

    /// What a nonblocking read gives, without waiting: `None` when nothing has arrived, or
    /// when the connection cannot tell (TLS).
    pub fn try_read(&mut self, into: &mut [u8]) -> Option<std::io::Result<usize>> {
        if !self.plain {
            return None;
        }
        let fd = self.stream.borrow().tcp().as_raw_fd();
        recv_now(fd, into)
    }

    /// Gives back what a light wait holds: the second descriptor and the watch.
    fn quiet(&mut self) {
        self.peeker = None;
        self.watch = None;
    }
}

/// The light connections a core waits for with `epoll`, besides glommio: glommio submits a
/// socket wait to the kernel and reaps it only between slices of a task queue (every 10 ms
/// under a flood), while a nonblocking `epoll_wait` between bulk requests (every
/// [`BULK_YIELD_EVERY`]) tells within microseconds which of them have bytes.
pub struct Watcher {
    /// The epoll instance; `None` when the kernel gave none (light waits then rely on the
    /// peek alone).
    epoll: Option<OwnedFd>,
    /// Per watched connection: whether its socket was seen readable, and who waits for it.
    watched: RefCell<HashMap<u64, (bool, Option<Waker>)>>,
    next: Cell<u64>,
}

/// A connection's place in the [`Watcher`]; leaving it with the connection.
pub struct Watch {
    token: u64,
    fd: RawFd,
    watcher: Rc<Watcher>,
}

impl Watcher {
    fn new() -> Watcher {
        // SAFETY: epoll_create1 takes no pointers; a descriptor it returns is ours alone.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        let epoll = if fd >= 0 {
            // SAFETY: `fd` was just created and nothing else owns it.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            tracing::warn!(
                "no epoll instance for the light lane: {}",
                std::io::Error::last_os_error()
            );
            None
        };
        Watcher {
            epoll,
            watched: RefCell::new(HashMap::new()),
            next: Cell::new(0),
        }
    }

    /// A place for the socket `fd`.
    fn watch(self: &Rc<Self>, fd: RawFd) -> Watch {
        let token = self.next.get();
        self.next.set(token.wrapping_add(1));
        self.watched.borrow_mut().insert(token, (false, None));
        Watch {
            token,
            fd,
            watcher: self.clone(),
        }
    }

    /// Wakes the watched connections whose sockets have bytes (or were closed); whether it
    /// woke any.
    pub fn poll(&self) -> bool {
        let Some(epoll) = &self.epoll else {
            return false;
        };
        if self.watched.borrow().is_empty() {
            return false;
        }
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: `events` is valid for 64 entries for the whole call; timeout 0 never
        // blocks.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                0,
            )
        };
        let Ok(n) = usize::try_from(n) else {
            return false;
        };
        let mut watched = self.watched.borrow_mut();
        let mut woke = false;
        for e in events.iter().take(n) {
            let token = e.u64;
            if let Some((ready, waker)) = watched.get_mut(&token) {
                *ready = true;
                if let Some(w) = waker.take() {
                    w.wake();
                    woke = true;
                }
            }
        }
        woke
    }
}

impl Watch {
    /// Asks for one report of the socket being readable; whether the kernel took it.
    fn arm(&self) -> bool {
        let watcher = &self.watcher;
        let Some(epoll) = &watcher.epoll else {
            return false;
        };
        if let Some((ready, _)) = watcher.watched.borrow_mut().get_mut(&self.token) {
            *ready = false;
        }
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: self.token,
        };
        // SAFETY: `ev` is valid for the call; `self.fd` is the connection's open socket.
        // A socket armed before is re-armed (a one-shot watch is disabled once it fired).
        let modified =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_MOD, self.fd, &mut ev) };
        if modified == 0 {
            return true;
        }
        // SAFETY: as above.
        let added =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, self.fd, &mut ev) };
        added == 0
    }

    /// Until [`Watcher::poll`] saw the socket readable.
    async fn ready(&self) {
        futures_lite::future::poll_fn(|cx| {
            let mut watched = self.watcher.watched.borrow_mut();
            match watched.get_mut(&self.token) {
                Some((true, _)) | None => Poll::Ready(()),
                Some((false, waker)) => {
                    *waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watcher.watched.borrow_mut().remove(&self.token);
        if let Some(epoll) = &self.watcher.epoll {
            // SAFETY: a null event is allowed for EPOLL_CTL_DEL; the socket is still open
            // (its stream outlives the reader's watch).
            unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    self.fd,
                    std::ptr::null_mut(),
                );
            }
        }
    }
}

/// The shared socket, borrowed for each poll only.
struct Shared<'a>(&'a RefCell<Stream>);

impl futures_lite::AsyncRead for Shared<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl futures_lite::AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// A second descriptor of `tcp`'s socket, as its own glommio stream.
fn second_descriptor(tcp: &TcpStream) -> std::io::Result<TcpStream> {
    // SAFETY: the descriptor belongs to `tcp`, which is open for the whole call; the
    // borrow ends before this function returns.
    let fd = unsafe { BorrowedFd::borrow_raw(tcp.as_raw_fd()) };
    let owned = fd.try_clone_to_owned()?;
    // SAFETY: `into_raw_fd` hands over a descriptor this function owns and nothing else
    // refers to: the new stream owns it and closes it when dropped.
    Ok(unsafe { TcpStream::from_raw_fd(owned.into_raw_fd()) })
}

/// What a nonblocking `recv` on `fd` gives: `None` when nothing has arrived.
fn recv_now(fd: RawFd, into: &mut [u8]) -> Option<std::io::Result<usize>> {
    loop {
        // SAFETY: `into` is valid for writes of `into.len()` bytes for the whole call; `fd`
        // is the connection's socket, open while its `Source` holds the stream.
        let n = unsafe { libc::recv(fd, into.as_mut_ptr().cast(), into.len(), libc::MSG_DONTWAIT) };
        if let Ok(n) = usize::try_from(n) {
            return Some(Ok(n));
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::WouldBlock => return None,
            ErrorKind::Interrupted => {}
            _ => return Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn a_connection_is_bulk_past_the_bound_per_read_and_tried_again_after_a_term() {
        let ex = glommio::LocalExecutorBuilder::default()
            .make()
            .expect("an executor");
        ex.run(async {
            let lanes = Lanes::new(4);
            let mut pace = Pace::default();
            let mut lane = lanes.first();
            assert_eq!(lane, Lane::Light);
            lanes.read(&mut pace);
            for _ in 0..16 {
                lane = lanes.started(&mut pace, lane);
            }
            assert_eq!(lane, Lane::Light, "one read of up to four times the bound");
            lanes.read(&mut pace);
            for _ in 0..4 {
                lane = lanes.started(&mut pace, lane);
            }
            assert_eq!(lane, Lane::Light, "a read of the bound");
            for _ in 0..2 {
                lanes.read(&mut pace);
                for _ in 0..5 {
                    lane = lanes.started(&mut pace, lane);
                }
            }
            assert_eq!(lane, Lane::Bulk, "two reads past the bound");
            lanes.read(&mut pace);
            lanes.started(&mut pace, lane);
            assert_eq!(lanes.settled(&pace, lane), Lane::Bulk, "within its term");
            pace.bulk_since = Some(Instant::now() - BULK_TERM);
            assert_eq!(lanes.settled(&pace, lane), Lane::Light, "after its term");
            pace.entered_light();
            lane = Lane::Light;
            lanes.read(&mut pace);
            for _ in 0..17 {
                lane = lanes.started(&mut pace, lane);
            }
            assert_eq!(lane, Lane::Bulk, "one read past four times the bound");

            let off = Lanes::new(0);
            let mut pace = Pace::default();
            assert_eq!(off.first(), Lane::Bulk);
            off.read(&mut pace);
            for _ in 0..10 {
                assert_eq!(off.started(&mut pace, Lane::Bulk), Lane::Bulk);
            }
            assert_eq!(off.settled(&pace, Lane::Bulk), Lane::Bulk);
        });
    }

    /// 2,000 bulk requests ready at once, and a light task woken by the first of them: it
    /// runs within a few of them, not after all 2,000 (glommio would resume its queue
    /// only when the bulk queue's slice ends, after every one of them here).
    #[test]
    fn light_work_runs_within_a_few_bulk_requests() {
        let ex = glommio::LocalExecutorBuilder::default()
            .make()
            .expect("an executor");
        let served_before_light = ex.run(async {
            let lanes = Rc::new(Lanes::new(4));
            let log: Rc<RefCell<Vec<&'static str>>> = Rc::default();
            let (wake, woken) = glommio::channels::local_channel::new_bounded::<()>(1);
            let light = {
                let log = log.clone();
                lanes
                    .spawn(Lane::Light, async move {
                        let _ = woken.recv().await;
                        log.borrow_mut().push("light");
                    })
                    .expect("a light task")
            };
            // Let the light task wait first, as a reader waits for its bytes.
            glommio::executor().yield_task_queue_now().await;
            let wake = Rc::new(wake);
            let mut bulk = Vec::new();
            for i in 0..2_000 {
                let (log, lanes, wake) = (log.clone(), lanes.clone(), wake.clone());
                bulk.push(
                    lanes
                        .clone()
                        .spawn(Lane::Bulk, async move {
                            if i == 0 {
                                let _ = wake.try_send(());
                            }
                            log.borrow_mut().push("bulk");
                            lanes.bulk_served().await;
                        })
                        .expect("a bulk task"),
                );
            }
            for t in bulk {
                t.await;
            }
            light.await;
            let log = log.borrow();
            assert_eq!(log.len(), 2_001);
            log.iter().position(|w| *w == "light").unwrap_or(usize::MAX)
        });
        assert!(
            served_before_light <= 2 * BULK_YIELD_EVERY as usize,
            "the light task ran after {served_before_light} bulk requests"
        );
    }

    /// A light reader waiting while the bulk lane is busy: its bytes, written while bulk
    /// request 1,000 of 20,000 runs, reach it within a few hundred bulk requests, through the
    /// watcher. glommio alone would notice them at its preempt timer (1 s here), after all
    /// 20,000.
    #[test]
    fn a_light_reader_is_woken_while_the_bulk_lane_is_busy() {
        let ex = glommio::LocalExecutorBuilder::default()
            .preempt_timer(Duration::from_secs(1))
            .make()
            .expect("an executor");
        let (bulk_before, total) = ex.run(async {
            let lanes = Rc::new(Lanes::new(4));
            let listener = glommio::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
            let addr = listener.local_addr().expect("its address");
            let (go, went) = std::sync::mpsc::channel::<()>();
            let client = std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).expect("connected");
                if went.recv().is_ok() {
                    std::io::Write::write_all(&mut c, b"x").expect("written");
                }
                // Held open until the reader is done.
                let _ = went.recv();
            });
            let accepted = listener.accept().await.expect("accepted");
            let served = Rc::new(Cell::new(0usize));
            let reader = {
                let (lanes, served) = (lanes.clone(), served.clone());
                lanes
                    .clone()
                    .spawn(Lane::Light, async move {
                        let (mut source, _sink) = Source::split(Stream::Plain(accepted));
                        let mut buf = [0u8; 16];
                        let wait = Some(Duration::from_secs(10));
                        let n = source.read(&mut buf, wait, &lanes).await.expect("read");
                        assert_eq!(n, 1);
                        served.get()
                    })
                    .expect("a light task")
            };
            // The reader waits before the bulk requests begin.
            glommio::executor().yield_task_queue_now().await;
            let go = Rc::new(RefCell::new(Some(go)));
            let total = 20_000;
            let mut bulk = Vec::new();
            for i in 0..total {
                let (lanes, served, go) = (lanes.clone(), served.clone(), go.clone());
                bulk.push(
                    lanes
                        .clone()
                        .spawn(Lane::Bulk, async move {
                            if i == 1_000 {
                                if let Some(go) = go.borrow().as_ref() {
                                    let _ = go.send(());
                                }
                            }
                            let until = std::time::Instant::now() + Duration::from_micros(5);
                            while std::time::Instant::now() < until {
                                std::hint::spin_loop();
                            }
                            served.set(served.get() + 1);
                            lanes.bulk_served().await;
                        })
                        .expect("a bulk task"),
                );
            }
            let bulk_before = reader.await;
            for t in bulk {
                t.await;
            }
            drop(go.borrow_mut().take());
            client.join().expect("the client");
            (bulk_before, total)
        });
        assert!(
            bulk_before < 1_000 + 2_000,
            "the light reader got its bytes after {bulk_before} of {total} bulk requests"
        );
    }

    /// A light read waits for bytes on the latency ring and returns them, and the end of the
    /// stream, as an ordinary read does.
    #[test]
    fn a_light_read_returns_what_arrives_and_the_end() {
        let ex = glommio::LocalExecutorBuilder::default()
            .make()
            .expect("an executor");
        ex.run(async {
            let listener = glommio::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
            let addr = listener.local_addr().expect("its address");
            let client = glommio::spawn_local(async move {
                let mut c = glommio::net::TcpStream::connect(addr)
                    .await
                    .expect("connected");
                glommio::timer::sleep(Duration::from_millis(20)).await;
                futures_lite::io::AsyncWriteExt::write_all(&mut c, b"hello")
                    .await
                    .expect("written");
                c
            });
            let accepted = listener.accept().await.expect("accepted");
            let lanes = Lanes::new(4);
            let (mut source, _sink) = Source::split(Stream::Plain(accepted));
            assert!(source.plain);
            let mut buf = [0u8; 16];
            let mut got = Vec::new();
            while got.len() < 5 {
                match source
                    .read(&mut buf, Some(Duration::from_secs(5)), &lanes)
                    .await
                {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("the read failed: {e}"),
                }
            }
            assert_eq!(got, b"hello");
            let quiet = source
                .read(&mut buf, Some(Duration::from_millis(20)), &lanes)
                .await;
            assert_eq!(
                quiet.map_err(|e| e.kind()),
                Err(ErrorKind::TimedOut),
                "nothing more arrived"
            );
            drop(client.await);
            let end = source
                .read(&mut buf, Some(Duration::from_secs(5)), &lanes)
                .await;
            assert_eq!(end.map_err(|e| e.kind()), Ok(0), "the client closed");
        });
    }
}
