//! Polling for the next request after work, while the core has CPU to spare.
//!
//! A core that sleeps as soon as it runs out of work pays a wake-up for its next request: the
//! thread is woken through the kernel and, in a virtual machine, the halted virtual CPU
//! through the hypervisor, tens of microseconds. Polling the rings for a while after work
//! avoids that, at the price of the CPU the polling burns. The price is worth paying while the
//! core is lightly loaded: its CPU is otherwise idle and the wake-up is most of a request's
//! latency. Under load a core seldom sleeps long, requests wait behind each other anyway, and
//! polling through every short gap between them doubles what a message costs in CPU without
//! answering any sooner.
//!
//! So a core polls for `idle_poll_us` after the last request it read, but only while its own
//! work took at most `idle_poll_load_max_pct` of the previous [`LOAD_WINDOW`]; above that it
//! sleeps as soon as it is idle and looks at its load again a window later.
//!
//! glommio's own `spin_before_park` is fixed when the executor starts, so the polling is a
//! task of the core's ([`poll_when_idle`]): while it polls it waits on a [`TURN`]-long timer,
//! so that each turn of the executor polls the rings for completions, runs what they woke and
//! comes back to it; when it stops, nothing is runnable and the executor parks as usual. The
//! front ends and the mesh call [`note_work`] for each read, which counts the work and wakes a
//! poller waiting for it.
//!
//! The load is the CPU time the core's thread used, less the turns this poller spent finding
//! nothing. The thread's CPU time, not glommio's run time of its tasks: much of a request's
//! cost is kernel work done in `io_uring_enter` between task runs (the socket's sends and
//! receives, loopback TCP's delivery), which glommio's run time leaves out.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How often a core's load is measured, and how long a decision made from it holds.
pub const LOAD_WINDOW: Duration = Duration::from_millis(10);

/// The timer a polling turn waits on: short enough to be due when the executor next looks at
/// its timers, long enough not to be due already when it is armed (a due timer would return at
/// once, and the turn would not give the executor a chance to poll).
pub const TURN: Duration = Duration::from_micros(1);

thread_local! {
    /// Reads noted on this thread's core.
    static WORK: Cell<u64> = const { Cell::new(0) };
    /// The poller waiting for the next read, if it is.
    static WAITER: RefCell<Option<Waker>> = const { RefCell::new(None) };
    /// Turns polled on this thread (for tests and diagnostics).
    static TURNS: Cell<u64> = const { Cell::new(0) };
}

/// Notes that this core read a request (or a cross-core message): the start of work a poller
/// waiting for it polls after. Cheap: a counter, and a wake-up only when a poller waits.
pub fn note_work() {
    WORK.with(|w| w.set(w.get().wrapping_add(1)));
    if let Some(waker) = WAITER.with(|w| w.borrow_mut().take()) {
        waker.wake();
    }
}

/// Turns this thread's poller has polled so far.
pub fn turns() -> u64 {
    TURNS.with(Cell::get)
}

fn work_seen() -> u64 {
    WORK.with(Cell::get)
}

/// When to poll: the decisions of [`poll_when_idle`], on instants and run times given to it,
/// so they can be followed without an executor or a clock.
#[derive(Debug)]
pub struct IdlePolicy {
    poll_for: Duration,
    load_max_pct: u32,
    allowed: bool,
    window_start: Instant,
    /// Turns of this window that found no work: polling, not load.
    idle_turns: Duration,
    seen: u64,
    last_work: Instant,
    last_turn: Instant,
}

impl IdlePolicy {
    /// Polls `poll_for` after the last work while the load stays at most `load_max_pct`
    /// percent; polling is allowed until a window says otherwise.
    pub fn new(poll_for: Duration, load_max_pct: u32, now: Instant) -> Self {
        IdlePolicy {
            poll_for,
            load_max_pct,
            allowed: true,
            window_start: now,
            idle_turns: Duration::ZERO,
            seen: 0,
            last_work: now,
            last_turn: now,
        }
    }

    /// Whether the last measured window leaves the core room to poll.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Whether a window has ended and [`roll`](Self::roll) should measure it.
    pub fn window_due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.window_start) >= LOAD_WINDOW
    }

    /// Ends the window at `now`, in which the core's thread used `runtime` of CPU, and decides
    /// from its load whether the core polls in the next one.
    pub fn roll(&mut self, now: Instant, runtime: Duration) {
        let wall = now.saturating_duration_since(self.window_start);
        let busy = runtime.saturating_sub(self.idle_turns);
        self.allowed = busy.as_nanos() * 100 <= wall.as_nanos() * u128::from(self.load_max_pct);
        self.window_start = now;
        self.idle_turns = Duration::ZERO;
    }

    /// Work numbered `work` woke the poller at `now`: polling starts from here.
    pub fn woke(&mut self, now: Instant, work: u64) {
        self.seen = work;
        self.last_work = now;
        self.last_turn = now;
    }

    /// One polling turn ended at `now` with `work` reads noted so far. Returns whether to
    /// poll another turn: while polling is allowed and the last work is recent.
    pub fn turn(&mut self, now: Instant, work: u64) -> bool {
        let took = now.saturating_duration_since(self.last_turn);
        self.last_turn = now;
        if work != self.seen {
            self.seen = work;
            self.last_work = now;
        } else {
            self.idle_turns += took;
        }
        self.allowed && now.saturating_duration_since(self.last_work) < self.poll_for
    }
}

/// The CPU time the calling thread has used, in user and kernel mode.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Waits until work is noted after `seen` reads.
struct NextWork {
    seen: u64,
}

impl Future for NextWork {
    type Output = u64;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let now = work_seen();
        if now != self.seen {
            return Poll::Ready(now);
        }
        WAITER.with(|w| *w.borrow_mut() = Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// Runs on a core for as long as it lives: polls after work as [`IdlePolicy`] decides. Start
/// it only on a core pinned to a CPU of its own: on a shared CPU, polling takes the CPU from
/// the very threads that would bring the work.
pub async fn poll_when_idle(poll_for: Duration, load_max_pct: u32) {
    // The thread's CPU time since the last call: the CPU used before this task started
    // belongs to no window.
    let last = Cell::new(thread_cpu_time());
    let runtime = || {
        let now = thread_cpu_time();
        now.saturating_sub(last.replace(now))
    };
    let mut policy = IdlePolicy::new(poll_for, load_max_pct, Instant::now());
    loop {
        let now = Instant::now();
        if policy.window_due(now) {
            policy.roll(now, runtime());
        }
        if !policy.allowed() {
            glommio::timer::sleep(LOAD_WINDOW).await;
            continue;
        }
        let work = NextWork { seen: work_seen() }.await;
        policy.woke(Instant::now(), work);
        loop {
            glommio::timer::sleep(TURN).await;
            TURNS.with(|t| t.set(t.get() + 1));
            let now = Instant::now();
            if policy.window_due(now) {
                policy.roll(now, runtime());
            }
            if !policy.turn(now, work_seen()) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_light_core_polls_until_the_last_work_is_older_than_the_poll_time() {
        let t0 = Instant::now();
        let mut p = IdlePolicy::new(200 * US, 30, t0);
        p.woke(t0, 1);
        assert!(p.turn(t0 + 50 * US, 1));
        assert!(p.turn(t0 + 150 * US, 1));
        // Work at 180 µs: polling goes on to 380 µs.
        assert!(p.turn(t0 + 180 * US, 2));
        assert!(p.turn(t0 + 370 * US, 2));
        assert!(!p.turn(t0 + 390 * US, 2));
    }

    #[test]
    fn a_window_above_the_load_bound_stops_polling_until_a_quieter_one() {
        let t0 = Instant::now();
        let mut p = IdlePolicy::new(200 * US, 30, t0);
        assert!(!p.window_due(t0 + 9 * MS));
        assert!(p.window_due(t0 + LOAD_WINDOW));
        // 5 ms of work in 10 ms: 50% > 30%.
        p.roll(t0 + 10 * MS, 5 * MS);
        assert!(!p.allowed());
        p.woke(t0 + 10 * MS, 1);
        assert!(
            !p.turn(t0 + 10 * MS + US, 2),
            "no polling while the core is loaded"
        );
        // 2 ms in the next 10: 20%.
        p.roll(t0 + 20 * MS, 2 * MS);
        assert!(p.allowed());
        // Exactly at the bound still polls.
        p.roll(t0 + 30 * MS, 3 * MS);
        assert!(p.allowed());
    }

    #[test]
    fn turns_that_found_nothing_are_not_load() {
        let t0 = Instant::now();
        let mut p = IdlePolicy::new(20 * MS, 30, t0);
        p.woke(t0, 1);
        // 9 ms of empty turns, then 1 ms with work: the executor ran all 10 ms, but only the
        // turn with work counts.
        let mut t = t0;
        for _ in 0..9 {
            t += MS;
            assert!(p.turn(t, 1));
        }
        t += MS;
        assert!(p.turn(t, 2));
        p.roll(t, 10 * MS);
        assert!(p.allowed(), "a window spent polling is not a loaded one");
        // The next window: 10 ms of run time, none of it empty turns, in 11 ms.
        p.woke(t, 2);
        t += MS;
        assert!(p.turn(t, 3));
        p.roll(t0 + 20 * MS + MS, 10 * MS);
        assert!(!p.allowed());
    }

    #[test]
    fn kernel_work_is_load_and_sleep_is_not() {
        // A window spent in socket writes and reads, the kernel's work on the core's behalf.
        // A few tries: a window in which the test's thread was mostly not running proves
        // nothing.
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut back = vec![0u8; 64 * 1024];
        let mut p = IdlePolicy::new(200 * US, 30, Instant::now());
        let loaded = (0..5).any(|_| {
            let t0 = Instant::now();
            p.roll(t0, Duration::ZERO);
            let cpu0 = thread_cpu_time();
            while t0.elapsed() < LOAD_WINDOW {
                std::io::Write::write_all(&mut a, &chunk).unwrap();
                std::io::Read::read_exact(&mut b, &mut back).unwrap();
            }
            p.roll(Instant::now(), thread_cpu_time() - cpu0);
            !p.allowed()
        });
        assert!(loaded, "a core busy in the kernel is loaded");
        // A window asleep.
        let cpu0 = thread_cpu_time();
        std::thread::sleep(LOAD_WINDOW);
        p.roll(Instant::now(), thread_cpu_time() - cpu0);
        assert!(p.allowed(), "a sleeping core is not loaded");
    }

    #[test]
    fn a_poller_turns_the_executor_after_work_and_stops_when_it_is_old() {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .unwrap();
        ex.run(async {
            glommio::spawn_local(poll_when_idle(Duration::from_millis(20), 100)).detach();
            // Let the poller reach its wait for work.
            glommio::timer::sleep(MS).await;
            let before = turns();
            assert_eq!(before, 0, "an idle core does not poll");
            note_work();
            // Polling turns the executor without any timer of ours due for 20 ms.
            let deadline = Instant::now() + Duration::from_secs(5);
            while turns() == before && Instant::now() < deadline {
                glommio::executor().yield_task_queue_now().await;
                glommio::timer::sleep(US).await;
            }
            assert!(turns() > before, "no polling turn after work");
            // And stops once the work is older than the poll time.
            let mut last = turns();
            let mut still_since = Instant::now();
            while Instant::now() < deadline {
                glommio::timer::sleep(5 * MS).await;
                let now = turns();
                if now == last {
                    if still_since.elapsed() >= 20 * MS {
                        break;
                    }
                } else {
                    last = now;
                    still_since = Instant::now();
                }
            }
            assert!(Instant::now() < deadline, "polling went on with no work");
        });
    }
}
