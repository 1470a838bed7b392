//! An unchanged RocketMQ 4.9 Java application (`tests/rocketmq-java`, Apache's
//! rocketmq-client 4.9.8, program `corvus.Failover`) keeps working through an automatic
//! failover: three controllers, one NameServer and a SYNC_MASTER group of two brokers in
//! controller mode. While a DefaultMQProducer sends numbered messages one after another and a
//! DefaultMQPushConsumer of one group consumes them, the master is killed with kill -9; the
//! slave becomes master under the same broker name and registers as broker id 0 with a
//! higher epoch, and the application's sends resume there (it learns the new route from the
//! NameServer; pollNameServerInterval 1 s). The old master, restarted, comes back as slave
//! and joins the in-sync set while the application keeps going; then the new master is killed
//! too and the sends go back to the old one. At the end every message the producer got
//! SEND_OK for, in any epoch, has reached the consumer (duplicates allowed).
//!
//! `.ci/run` builds the Java program (`mvn compile` there, which writes `cp.txt`); without a
//! JVM and the build the test says so and fails when `CORVUS_REQUIRE_JAVA` is set, as CI
//! sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use integration::controllers::ControllerGroup;
use integration::*;

const GROUP: &str = "broker-a";
const TOPIC: &str = "JavaFailover";
const CONSUMER_GROUP: &str = "JavaFailoverGroup";

/// The Java program's classpath, or `None` after saying why the test does not run.
fn java_or_skip() -> Option<String> {
    integration::java_program_or_skip("tests/rocketmq-java", Some("corvus/Failover.class"))
}

/// One acknowledged send: its number, its SendStatus and when the test read the line.
struct Ack {
    n: u64,
    status: String,
    at: Instant,
}

/// The running `corvus.Failover` program and what it said so far.
struct JavaApp {
    java: JavaProgram,
    acks: Vec<Ack>,
    /// The highest number the producer finished with (acknowledged or failed).
    last_done: Option<u64>,
    failed: u64,
    received: BTreeSet<u64>,
    summary: Option<String>,
}

impl JavaApp {
    fn start(cp: &str, ns: &str) -> JavaApp {
        let args = [ns, TOPIC, CONSUMER_GROUP];
        JavaApp {
            java: JavaProgram::start(cp, "corvus.Failover", &args, None),
            acks: Vec::new(),
            last_done: None,
            failed: 0,
            received: BTreeSet::new(),
            summary: None,
        }
    }

    fn take(&mut self, line: String) {
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|n| n.parse::<u64>().ok()),
        ) {
            (Some("ACK"), Some(n)) => {
                // ACK N MSGID STATUS
                let status = words.nth(1).unwrap_or("").to_owned();
                self.acks.push(Ack {
                    n,
                    status,
                    at: Instant::now(),
                });
                self.last_done = Some(n);
            }
            (Some("FAIL"), Some(n)) => {
                println!("java: {line}");
                self.failed += 1;
                self.last_done = Some(n);
            }
            (Some("RECV"), Some(n)) => {
                self.received.insert(n);
            }
            _ if line.starts_with("SUMMARY") => {
                println!("java: {line}");
                self.summary = Some(line);
            }
            _ => println!("java: {line}"),
        }
    }

    /// Reads the program's lines until `done` holds, `limit` at most: panics with `what`
    /// when it does not.
    fn until(&mut self, what: &str, limit: Duration, done: impl Fn(&JavaApp) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.java.lines.recv_timeout(left) {
                Ok(line) => self.take(line),
                Err(e) => panic!(
                    "{what}: not within {limit:?} ({e:?}); {} sends acknowledged (the last \
                     numbered {:?}), {} failed, {} distinct messages received",
                    self.acks.len(),
                    self.acks.last().map(|a| a.n),
                    self.failed,
                    self.received.len()
                ),
            }
        }
    }

    /// Kills `master` with kill -9 and waits (bounded) until 20 sends begun after the kill
    /// were acknowledged: the time from the kill to the first of them.
    fn through_kill(&mut self, master: &mut Proc, what: &str) -> Duration {
        master.kill9();
        let killed = Instant::now();
        let failed = self.failed;
        // The send in flight at the kill is the one after the last finished, so a send
        // numbered beyond that began after the kill.
        let in_flight = self.last_done.map_or(0, |n| n + 1);
        self.until(what, Duration::from_secs(60), |j| {
            j.acks.iter().filter(|a| a.n > in_flight).count() >= 20
        });
        let first = self.acks.iter().find(|a| a.n > in_flight).unwrap();
        assert_eq!(first.status, "SEND_OK", "{what}");
        let took = first.at.duration_since(killed);
        eprintln!(
            "{what}: the first acknowledged send begun after the kill came {took:?} after it \
             ({} sends failed meanwhile)",
            self.failed - failed
        );
        took
    }

    /// Waits (bounded) for `n` more acknowledged sends.
    fn more_acks(&mut self, what: &str, n: usize) {
        let want = self.acks.len() + n;
        self.until(what, Duration::from_secs(60), |j| j.acks.len() >= want);
    }

    /// Tells the program to stop sending and waits (bounded) for its summary and exit 0.
    fn stop(&mut self) {
        self.java.tell("stop");
        self.until("the summary", Duration::from_secs(90), |j| {
            j.summary.is_some()
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.java.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the Java program did not exit");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "the Java program failed: {status}");
    }
}

#[test]
fn a_java_producer_and_push_consumer_keep_working_through_a_failover() {
    let Some(cp) = java_or_skip() else {
        return;
    };
    let ControllerGroup {
        ctl,
        ns,
        logs,
        a_opts,
        b_opts,
        mut a,
        b,
        first,
        keep: _keep,
    } = ControllerGroup::start(GROUP);
    create_topic(&ns.addr, TOPIC, 4);

    let mut java = JavaApp::start(&cp, &ns.addr);
    java.until(
        "the application sends and consumes",
        Duration::from_secs(90),
        |j| j.acks.len() >= 100 && j.received.len() >= 50,
    );

    // The master dies; the slave takes over in a new epoch and the sends resume there.
    let resumed = java.through_kill(&mut a, "sends resume on the new master");
    let second = ctl.replica_info(GROUP).unwrap();
    assert_eq!(second.master_id, Some(1), "{}", b.stderr());
    assert!(second.master_epoch > first.master_epoch);

    // The old master comes back as the new master's slave and joins its in-sync set, while
    // the application goes on.
    let a = start_broker(&a_opts, &logs);
    ctl.wait_group(GROUP, 1, &[&a, &b]);
    java.more_acks("sends go on with the old master back as slave", 100);

    // And back: the new master dies, the old one (in sync again) takes over.
    let mut b = b;
    let resumed_back = java.through_kill(&mut b, "sends resume on the old master");
    let third = ctl.replica_info(GROUP).unwrap();
    assert_eq!(third.master_id, Some(0), "{}", a.stderr());
    assert!(third.master_epoch > second.master_epoch);
    let b = start_broker(&b_opts, &logs);
    ctl.wait_group(GROUP, 0, &[&a, &b]);
    java.more_acks("sends go on after the failback", 100);
    eprintln!(
        "kill to the first acknowledged send begun after it: {resumed:?} (failover), \
         {resumed_back:?} (failback)"
    );
    java.stop();

    let statuses: BTreeMap<&str, usize> = java.acks.iter().fold(BTreeMap::new(), |mut m, a| {
        *m.entry(a.status.as_str()).or_default() += 1;
        m
    });
    eprintln!(
        "{} sends acknowledged {statuses:?}, {} failed, {} distinct received",
        java.acks.len(),
        java.failed,
        java.received.len()
    );
    let lost: Vec<u64> = java
        .acks
        .iter()
        .filter(|a| a.status == "SEND_OK" && !java.received.contains(&a.n))
        .map(|a| a.n)
        .collect();
    assert!(
        lost.is_empty(),
        "messages acknowledged SEND_OK never reached the consumer: {lost:?} ({:?})",
        java.summary
    );
}
