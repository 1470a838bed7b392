//! What each core does while the broker starts, and the watch the main thread keeps over it.
//!
//! A start either serves or fails with a line that names the core and the step it waited in.
//! Each core reports its step ([`StartSteps::enter`]) and, through its park guard
//! ([`park_guard`]), that its executor still runs. The main thread ([`StartSteps::verdict`])
//! fails the start when a core's executor ended before it served, stopped running, or spent
//! longer than [`START_STEP_MAX`] in a step whose length does not depend on the data (joining
//! the mesh, starting its tasks). Opening a shard reads the data directory, so it may take
//! as long as the data asks; the main thread says every [`START_REPORT_INTERVAL`] which
//! cores are still opening what.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often each executor's park guard wakes it.
///
/// glommio 0.9.0 can park an executor that still has runnable tasks: when its preemption
/// check is already set as a scheduling round begins (a wake-up from another core, say),
/// `run_task_queues` reports that nothing ran, and the executor sleeps in io_uring's wait
/// with its own work queued, which no completion and no other thread will ever end (fixed
/// upstream as glommio/glommio#53, in no release on crates.io). A wait with a timer armed
/// ends when the timer fires, so a task that keeps one armed bounds every such sleep to this
/// long. Without it, a start that hit the race before any timer existed (joining the mesh,
/// opening the shards) slept until it was killed, about one start in sixty on a loaded host.
pub const PARK_GUARD_INTERVAL: Duration = Duration::from_millis(5);

/// Longest a core may stay in a step whose length does not depend on the data.
pub const START_STEP_MAX: Duration = Duration::from_secs(10);

/// Longest a starting core's executor may go without running its park guard before the
/// start is failed: the executor is stuck (a blocking call that never returns, or a sleep
/// nothing ends) rather than busy with the data.
pub const START_STALL_MAX: Duration = Duration::from_secs(30);

/// How often the main thread logs which cores are still starting, and where.
pub const START_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Runs on the current executor until the executor ends: wakes it every
/// [`PARK_GUARD_INTERVAL`] and counts each wake in `alive`.
pub async fn park_guard(alive: Arc<AtomicU64>) {
    loop {
        glommio::timer::sleep(PARK_GUARD_INTERVAL).await;
        alive.fetch_add(1, Ordering::Relaxed);
    }
}

/// One step of a core's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartStep {
    /// The executor thread exists; the core's future has not run yet.
    Spawned,
    /// Waiting for every other core to join the cross-core mesh.
    JoiningMesh,
    /// Opening (and recovering) one of its shards.
    OpeningShard(u16),
    /// Replication, access control, listeners, timers and group tasks.
    StartingTasks,
    /// Serving.
    Ready,
}

impl StartStep {
    /// Whether the step's length is independent of the data, so [`START_STEP_MAX`] bounds it.
    fn bounded(&self) -> bool {
        !matches!(self, StartStep::OpeningShard(_) | StartStep::Ready)
    }
}

impl std::fmt::Display for StartStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartStep::Spawned => f.write_str("waiting for its executor to run"),
            StartStep::JoiningMesh => f.write_str("joining the cross-core mesh"),
            StartStep::OpeningShard(s) => write!(f, "opening shard {s}"),
            StartStep::StartingTasks => f.write_str("starting its listeners and tasks"),
            StartStep::Ready => f.write_str("serving"),
        }
    }
}

struct CoreStart {
    step: Mutex<(StartStep, Instant)>,
    /// Park-guard wakes of the core's executor; the main thread reads it to tell a busy
    /// core from a stuck one.
    alive: Arc<AtomicU64>,
    /// The last `alive` the main thread saw, and when it changed.
    seen: Mutex<(u64, Instant)>,
    ended: std::sync::atomic::AtomicBool,
}

/// Every core's start, shared by the cores (which write) and the main thread (which reads).
pub struct StartSteps {
    cores: Vec<CoreStart>,
}

/// Why a start cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure(pub String);

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl StartSteps {
    pub fn new(cores: u16, now: Instant) -> StartSteps {
        StartSteps {
            cores: (0..cores)
                .map(|_| CoreStart {
                    step: Mutex::new((StartStep::Spawned, now)),
                    alive: Arc::new(AtomicU64::new(0)),
                    seen: Mutex::new((0, now)),
                    ended: std::sync::atomic::AtomicBool::new(false),
                })
                .collect(),
        }
    }

    /// The counter `core`'s park guard bumps.
    pub fn alive(&self, core: u16) -> Arc<AtomicU64> {
        match self.cores.get(core as usize) {
            Some(c) => c.alive.clone(),
            None => Arc::new(AtomicU64::new(0)),
        }
    }

    /// `core` enters `step`.
    pub fn enter(&self, core: u16, step: StartStep) {
        if let Some(c) = self.cores.get(core as usize) {
            if let Ok(mut s) = c.step.lock() {
                *s = (step, Instant::now());
            }
        }
    }

    /// `core`'s executor thread has ended.
    pub fn ended(&self, core: u16) {
        if let Some(c) = self.cores.get(core as usize) {
            c.ended.store(true, Ordering::SeqCst);
        }
    }

    fn step(&self, core: usize) -> (StartStep, Instant) {
        match self.cores.get(core).and_then(|c| c.step.lock().ok()) {
            Some(s) => s.clone(),
            None => (StartStep::Spawned, Instant::now()),
        }
    }

    /// The cores that serve.
    pub fn ready_cores(&self) -> Vec<u16> {
        (0..self.cores.len())
            .filter(|&c| self.step(c).0 == StartStep::Ready)
            .map(|c| c as u16)
            .collect()
    }

    /// Whether the start can go on at `now`; `Err` names every core that cannot go on and
    /// what it waited for (when one core never joins the mesh, every core waits there, and
    /// the operator needs to see them all).
    pub fn verdict(&self, now: Instant) -> Result<(), StartFailure> {
        let verdicts: Vec<Result<(), String>> = (0..self.cores.len())
            .map(|core| self.core_verdict(core, now))
            .collect();
        if verdicts.iter().all(Result::is_ok) {
            return Ok(());
        }
        // The cores past a bound first, then every other core still starting with its step,
        // which the bound has not reached yet (it may have started its step a moment later).
        let mut lines: Vec<String> = verdicts.iter().filter_map(|v| v.clone().err()).collect();
        for (core, step, secs) in self.still_starting(now) {
            if verdicts.get(core).is_some_and(Result::is_ok) {
                lines.push(format!("core {core} was {step} for {secs} s"));
            }
        }
        Err(StartFailure(lines.join("; ")))
    }

    fn core_verdict(&self, core: usize, now: Instant) -> Result<(), String> {
        if let Some(c) = self.cores.get(core) {
            let (step, since) = self.step(core);
            if step == StartStep::Ready {
                return Ok(());
            }
            if c.ended.load(Ordering::SeqCst) {
                return Err(format!(
                    "core {core} stopped while {step}, before it served (see the lines above)"
                ));
            }
            let alive = c.alive.load(Ordering::Relaxed);
            let last_alive = match c.seen.lock() {
                Ok(mut seen) => {
                    if seen.0 != alive {
                        *seen = (alive, now);
                    }
                    seen.1
                }
                Err(_) => now,
            };
            let stalled = now.saturating_duration_since(last_alive.max(since));
            if stalled >= START_STALL_MAX {
                return Err(format!(
                    "core {core} stopped running while {step}: its executor has not run for {} s",
                    stalled.as_secs()
                ));
            }
            let in_step = now.saturating_duration_since(since);
            if step.bounded() && in_step >= START_STEP_MAX {
                return Err(format!(
                    "core {core} did not start: it spent {} s {step} (at most {} s)",
                    in_step.as_secs(),
                    START_STEP_MAX.as_secs()
                ));
            }
        }
        Ok(())
    }

    /// One line naming each core still starting and its step, or `None` when all serve.
    pub fn report(&self, now: Instant) -> Option<String> {
        let waiting: Vec<String> = self
            .still_starting(now)
            .map(|(core, step, secs)| format!("core {core} {step} for {secs} s"))
            .collect();
        (!waiting.is_empty()).then(|| waiting.join("; "))
    }

    /// Each core that does not serve yet, with its step and the whole seconds it has spent
    /// in it at `now`.
    fn still_starting(&self, now: Instant) -> impl Iterator<Item = (usize, StartStep, u64)> + '_ {
        (0..self.cores.len()).filter_map(move |core| {
            let (step, since) = self.step(core);
            (step != StartStep::Ready)
                .then(|| (core, step, now.saturating_duration_since(since).as_secs()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_that_stays_in_a_bounded_step_fails_the_start_and_is_named() {
        let t0 = Instant::now();
        let steps = StartSteps::new(2, t0);
        steps.enter(0, StartStep::Ready);
        steps.enter(1, StartStep::JoiningMesh);
        // Its executor runs (the guard ticks), but the step does not end.
        let alive = steps.alive(1);
        let mut now = Instant::now();
        for _ in 0..(START_STEP_MAX.as_secs() + 1) {
            alive.fetch_add(1, Ordering::Relaxed);
            now += Duration::from_secs(1);
            if let Err(e) = steps.verdict(now) {
                assert_eq!(
                    e.0,
                    format!(
                        "core 1 did not start: it spent {} s joining the cross-core mesh (at most {} s)",
                        START_STEP_MAX.as_secs(),
                        START_STEP_MAX.as_secs()
                    )
                );
                return;
            }
        }
        panic!("a core stuck joining the mesh was never reported");
    }

    #[test]
    fn opening_a_shard_may_take_long_while_the_executor_runs() {
        let steps = StartSteps::new(1, Instant::now());
        steps.enter(0, StartStep::OpeningShard(3));
        let alive = steps.alive(0);
        let mut now = Instant::now();
        for _ in 0..(START_STALL_MAX.as_secs() * 3) {
            alive.fetch_add(1, Ordering::Relaxed);
            now += Duration::from_secs(1);
            assert_eq!(steps.verdict(now), Ok(()));
        }
        let report = steps.report(now).unwrap_or_default();
        assert!(
            report.starts_with("core 0 opening shard 3 for "),
            "{report}"
        );
    }

    #[test]
    fn an_executor_that_stops_running_fails_the_start() {
        let steps = StartSteps::new(1, Instant::now());
        steps.enter(0, StartStep::OpeningShard(0));
        let now = Instant::now() + START_STALL_MAX + Duration::from_secs(1);
        // The main thread saw the counter at 0 once, at the start; it never moved.
        let e = steps.verdict(now).err().map(|e| e.0).unwrap_or_default();
        assert!(
            e.starts_with("core 0 stopped running while opening shard 0"),
            "{e}"
        );
    }

    #[test]
    fn a_core_that_ended_before_it_served_fails_the_start() {
        let steps = StartSteps::new(2, Instant::now());
        steps.enter(1, StartStep::OpeningShard(1));
        steps.ended(1);
        let e = steps.verdict(Instant::now()).err().map(|e| e.0);
        // Core 0, still starting, is named with what it was doing.
        assert_eq!(
            e.as_deref(),
            Some(
                "core 1 stopped while opening shard 1, before it served (see the lines above); \
                 core 0 was waiting for its executor to run for 0 s"
            )
        );
        steps.enter(0, StartStep::Ready);
        steps.enter(1, StartStep::Ready);
        assert_eq!(steps.report(Instant::now()), None);
    }

    #[test]
    fn the_park_guard_wakes_an_idle_executor_and_counts_it() {
        // The stall check reads these wakes: an executor with nothing else to do must still
        // count them, or an idle start would look stuck.
        let alive = Arc::new(AtomicU64::new(0));
        let seen = alive.clone();
        let handle = glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                glommio::spawn_local(park_guard(seen)).detach();
                glommio::timer::sleep(PARK_GUARD_INTERVAL * 20).await;
            })
            .map_err(|e| e.to_string());
        assert!(handle.is_ok(), "{:?}", handle.err());
        if let Ok(h) = handle {
            assert!(h.join().is_ok());
        }
        assert!(alive.load(Ordering::Relaxed) >= 5, "{alive:?}");
    }
}
