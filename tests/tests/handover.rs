#![allow(clippy::unwrap_used)]
//! A graceful stop of a master in controller mode hands its group over: three controllers
//! with a 30 s heartbeat timeout (so an election after the lease cannot happen during the
//! test's stop), a NameServer and an ASYNC_MASTER group of two brokers. A producer sends
//! without pause; the master gets SIGTERM. Before it exits, its slave has acknowledged all
//! of its log and the controllers have made the slave master in a new epoch; the sends
//! resume there, and every message acknowledged by either master is served, including
//! those the ASYNC master acknowledged just before the signal. The old master comes back
//! as the new master's slave, in sync.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::PullConsumer;
use integration::controllers::ControllerGroup;
use integration::*;

const GROUP: &str = "broker-h";
const TOPIC: &str = "HandOver";

#[test]
fn a_stopped_master_hands_its_group_to_its_slave_and_loses_no_acknowledged_message() {
    let ControllerGroup {
        ctl,
        ns,
        logs,
        a_opts,
        b_opts: _,
        mut a,
        b,
        first,
        keep: _keep,
    } = ControllerGroup::start_with(GROUP, "ASYNC_MASTER", 30_000);
    create_topic(&ns.addr, TOPIC, 4);

    // One producer sends for the whole test; refusals (while no master takes sends) are
    // retried after a short pause.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (stop, acked, ns) = (stop.clone(), acked.clone(), ns.addr.clone());
        std::thread::spawn(move || {
            let p = producer(&ns);
            let mut sends = AckedSends::new(TOPIC);
            let mut refused = 0usize;
            let deadline = Instant::now() + Duration::from_secs(240);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                match sends.send(&p) {
                    Ok(_) => {
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => {
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
            (sends, refused)
        })
    };
    let acked_at_least = |n: usize, within: Duration| {
        wait_for(within, || (acked.load(Ordering::SeqCst) >= n).then_some(()))
            .unwrap_or_else(|| panic!("fewer than {n} sends acknowledged in {within:?}"));
    };
    acked_at_least(500, Duration::from_secs(60));

    // SIGTERM: the master exits cleanly, and by then the controllers name its slave.
    let signalled = Instant::now();
    let before = acked.load(Ordering::SeqCst);
    assert_eq!(a.terminate(), Some(0), "{}", a.stderr());
    let stopped_in = signalled.elapsed();
    let second = ctl.replica_info(GROUP).unwrap();
    assert_eq!(
        second.master_id,
        Some(1),
        "the stopped master did not hand the group over: {second:?}\n{}",
        a.stderr()
    );
    assert!(second.master_epoch > first.master_epoch);
    assert!(
        a.stderr().contains("handed the group over"),
        "{}",
        a.stderr()
    );

    // Sends resume on the new master.
    let resumed = wait_for(Duration::from_secs(60), || {
        (acked.load(Ordering::SeqCst) > before + 200).then(|| signalled.elapsed())
    })
    .unwrap_or_else(|| panic!("sends did not resume on the new master\n{}", b.stderr()));
    eprintln!("master stopped in {stopped_in:?}; 200 sends acknowledged again {resumed:?} after the signal");
    stop.store(true, Ordering::SeqCst);
    let (sends, refused) = sender.join().unwrap();
    eprintln!(
        "{} sends acknowledged, {refused} refused during the hand-over",
        sends.acked.len()
    );

    // Every acknowledged message is on the new master.
    let consumer = PullConsumer::new(&ns.addr, "handover-check").unwrap();
    sends.assert_served(&consumer, Duration::from_secs(60));

    // The old master comes back as the new master's slave and joins its in-sync set: its
    // log agrees with the new master's.
    let a = start_broker(&a_opts, &logs);
    ctl.wait_group(GROUP, 1, &[&a, &b]);
}
