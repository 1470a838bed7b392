//! What the broker's cores need of the glommio corvus carries (`vendor/glommio`, whose
//! `CORVUS.md` lists its changes), checked on bare executors: runnable work is never left
//! parked, timers kept armed across passes still fire, never early, and a core with
//! nothing to do stays asleep.

use std::future::Future;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use glommio::{Latency, LocalExecutorBuilder, Shares};

/// Runs the future `work` makes on a fresh executor of its own thread; `None` if it has not
/// ended within `limit` (the thread is then left behind, parked, and the test fails).
fn on_executor<T, F>(limit: Duration, work: impl FnOnce() -> F + Send + 'static) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The broker's cores' preempt period (`IO_REAP_INTERVAL_MAX`).
        let ex = LocalExecutorBuilder::default()
            .preempt_timer(Duration::from_millis(10))
            .make()
            .expect("an executor");
        let _ = tx.send(ex.run(work()));
    });
    rx.recv_timeout(limit).ok()
}

/// Spins for `busy` and then yields its task queue, as a long batch does.
async fn busy_then_yield(busy: Duration) {
    let start = Instant::now();
    while start.elapsed() < busy {
        std::hint::spin_loop();
    }
    glommio::executor().yield_task_queue_now().await;
}

#[test]
fn two_busy_queues_that_yield_both_run_to_their_end() {
    // Queues with a 1 ms latency arm a 1 ms preempt timer, which fires inside every 2 ms
    // spin: rounds often begin with the preemption flag already set. A round that then
    // reported "nothing ran" parked the executor with both queues runnable, for good (within
    // the first 3 s here, with the timers kept armed across passes).
    let counts = on_executor(Duration::from_secs(30), || async {
        let executor = glommio::executor();
        let queues = [
            executor.create_task_queue(
                Shares::Static(1000),
                Latency::Matters(Duration::from_millis(1)),
                "a",
            ),
            executor.create_task_queue(
                Shares::Static(1000),
                Latency::Matters(Duration::from_millis(1)),
                "b",
            ),
        ];
        let start = Instant::now();
        let mut tasks = Vec::new();
        for queue in queues {
            let task = glommio::spawn_local_into(
                async move {
                    let mut passes = 0u32;
                    while start.elapsed() < Duration::from_millis(3000) {
                        busy_then_yield(Duration::from_millis(2)).await;
                        passes += 1;
                    }
                    passes
                },
                queue,
            )
            .expect("a task");
            tasks.push(task);
        }
        let mut counts = Vec::new();
        for task in tasks {
            counts.push(task.await);
        }
        counts
    });
    let counts = counts.expect("the executor parked with runnable queues and never ended");
    assert!(
        counts.iter().all(|&n| n > 0),
        "a queue never ran: {counts:?}"
    );
}

#[test]
fn timers_beside_a_busy_queue_fire_and_never_early() {
    // A timer kept armed across the executor's passes may wake the core up to 1 ms early;
    // what a task sees must still be a sleep of at least what it asked.
    let slept = on_executor(Duration::from_secs(30), || async {
        let executor = glommio::executor();
        let busy = executor.create_task_queue(Shares::Static(1000), Latency::NotImportant, "busy");
        let done = Rc::new(std::cell::Cell::new(false));
        let spinner = {
            let done = done.clone();
            glommio::spawn_local_into(
                async move {
                    while !done.get() {
                        busy_then_yield(Duration::from_micros(300)).await;
                    }
                },
                busy,
            )
            .expect("a task")
        };
        let mut slept = Vec::new();
        for i in 0..40u64 {
            // Deadlines that move a little each time, as read timeouts pushed forward do.
            let want = Duration::from_millis(3 + i % 5);
            let start = Instant::now();
            glommio::timer::sleep(want).await;
            slept.push((want, start.elapsed()));
        }
        done.set(true);
        spinner.await;
        slept
    })
    .expect("the executor parked and its timers never fired");
    for (want, got) in slept {
        assert!(got >= want, "a sleep of {want:?} ended after {got:?}");
    }
}

/// The calling thread's voluntary context switches so far: one per sleep of an executor
/// thread (each wait in io_uring that blocks).
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches")
}

#[test]
fn an_idle_executor_stays_asleep() {
    // Tasks that ran leave the preempt timer armed across the next sleep; it may end that
    // sleep once, and is not armed again until tasks run. An executor that armed it at every
    // wake-up and kept it would wake every 10 ms for good with nothing to do.
    let woke = on_executor(Duration::from_secs(30), || async {
        for _ in 0..50 {
            busy_then_yield(Duration::from_micros(200)).await;
        }
        let before = voluntary_switches();
        glommio::timer::sleep(Duration::from_millis(300)).await;
        voluntary_switches() - before
    })
    .expect("the executor never ended its sleep");
    // The sleep itself, one wake-up by the preempt timer left armed and its sleep after; a
    // timer re-armed at every wake-up would have made about 30.
    assert!(
        woke <= 6,
        "an idle executor woke {woke} times in 300 ms with nothing to do"
    );
}
