//! Idempotent sends (`dedup_enable`) with an unchanged RocketMQ 4.9 Java application
//! (`tests/rocketmq-java`, `corvus.Dedup`): the broker is paused (SIGSTOP) while sends are
//! written to it, so they time out at the client; it resumes with them queued, and the
//! application sends the same Message objects again at once, mostly to the other core. With
//! dedup on, every message is stored once and each retry's result names the stored copy's
//! queue, queue offset and offset message id; with it off, the same run stores duplicates.
//!
//! Across a failover too: a SYNC_MASTER group in controller mode stores the sends to a topic
//! whose `dedup.enable` attribute is set on the master only, the master is killed with
//! kill -9, and the same Message objects sent again are answered by the promoted slave with
//! the originals (it took the attribute with the topic table and rebuilt the window from its
//! copy of the log).
//!
//! Needs the Java programs built (`mvn compile` in `tests/rocketmq-java`); without them the
//! test says so and fails when `CORVUS_REQUIRE_JAVA` is set.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use integration::controllers::ControllerGroup;
use integration::{create_topic, run_client_program, Cluster, JavaProgram};

const COUNT: usize = 8;

/// One message's line: body, queue id, queue offset, offset message id, UNIQ_KEY.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    queue_id: String,
    queue_offset: String,
    offset_msg_id: String,
    uniq_key: String,
}

fn placed(lines: &[String], prefix: &str) -> Vec<(String, Placed)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|rest| {
            let f: Vec<&str> = rest.split(' ').collect();
            assert_eq!(f.len(), 5, "{prefix}{rest}");
            (
                f[0].to_owned(),
                Placed {
                    queue_id: f[1].to_owned(),
                    queue_offset: f[2].to_owned(),
                    offset_msg_id: f[3].to_owned(),
                    uniq_key: f[4].to_owned(),
                },
            )
        })
        .collect()
}

/// Runs the program against a broker of two cores, `toml` its config; the program waits
/// for `expect` stored copies. Its output lines.
fn run(toml: &str, topic: &str, expect: usize) -> Option<Vec<String>> {
    let cp = integration::java_program_or_skip("tests/rocketmq-java", Some("corvus/Dedup.class"))?;
    let c = Cluster::start_with(2, "small", |o| o.config_toml = Some(toml.to_owned()));
    let ns = c.namesrv.addr.clone();
    create_topic(&ns, topic, 8);
    let pid = c.broker.pid().to_string();
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(&cp)
        .arg("corvus.Dedup")
        .args([&ns, topic, &pid, &COUNT.to_string(), &expect.to_string()])
        .env("ROCKETMQ_HOME", std::env::temp_dir());
    let (status, lines) = run_client_program("Dedup", &mut cmd, Duration::from_secs(120));
    // Whatever the program did, the broker runs again (a stopped one ignores SIGTERM).
    // SAFETY: kill(2) on the broker's own pid, which this test started.
    unsafe {
        libc::kill(c.broker.pid(), libc::SIGCONT);
    }
    assert!(status.success(), "Dedup failed ({status}): {lines:?}");
    assert!(lines.iter().any(|l| l == "DONE"), "{lines:?}");
    let timed_out = lines.iter().filter(|l| l.starts_with("TIMEOUT ")).count();
    assert_eq!(
        timed_out, COUNT,
        "every send made while the broker was paused timed out: {lines:?}"
    );
    Some(lines)
}

/// Each message is stored once, and its retry's result names that copy.
fn assert_stored_once_as_retried(lines: &[String]) {
    let retried: HashMap<String, Placed> = placed(lines, "RETRIED ").into_iter().collect();
    let stored = placed(lines, "STORED ");
    assert_eq!(retried.len(), COUNT, "{lines:?}");
    for i in 0..COUNT {
        let body = format!("dedup-{i}");
        let copies: Vec<&Placed> = stored
            .iter()
            .filter(|(b, _)| *b == body)
            .map(|(_, p)| p)
            .collect();
        assert_eq!(copies.len(), 1, "{body} is stored once: {lines:?}");
        assert_eq!(
            Some(copies[0]),
            retried.get(&body),
            "{body}: the retry's result names the stored copy (queue, offset, offset id, UNIQ_KEY)"
        );
    }
}

#[test]
fn a_java_retry_after_a_timeout_is_answered_with_the_original_and_stored_once() {
    let Some(lines) = run("dedup_enable = true\n", "JavaDedupOn", COUNT) else {
        return;
    };
    assert_stored_once_as_retried(&lines);
}

#[test]
fn a_java_retry_after_a_master_kill_is_answered_by_the_promoted_slave_with_the_original() {
    let Some(cp) =
        integration::java_program_or_skip("tests/rocketmq-java", Some("corvus/Dedup.class"))
    else {
        return;
    };
    let topic = "JavaDedupFailover";
    let mut g = ControllerGroup::start("broker-a");
    // The topic deduplicates by its attribute, set on the master only: the slave takes it
    // with the topic table, and deduplicates once promoted.
    let f = integration::update_topic_with_attributes(&g.a.addr, topic, 4, "+dedup.enable=true");
    assert_eq!(f.command.code, 0, "{:?}", f.command.remark);
    integration::wait_for_route(&g.ns.addr, topic);
    let followed = integration::wait_for(Duration::from_secs(15), || {
        integration::topic_attribute(&g.b.addr, topic, "dedup.enable").filter(|v| v == "true")
    });
    assert!(
        followed.is_some(),
        "the slave did not take the topic's dedup.enable"
    );
    let count = COUNT.to_string();
    let mut program = JavaProgram::start(
        &cp,
        "corvus.Dedup",
        &[&g.ns.addr, topic, "0", &count, &count, "failover"],
        Some("Dedup"),
    );
    let mut lines = Vec::new();
    let mut until = |program: &JavaProgram, what: &str| loop {
        match program.lines.recv_timeout(Duration::from_secs(120)) {
            Ok(l) => {
                let done = l == what;
                lines.push(l);
                if done {
                    return;
                }
            }
            Err(e) => panic!("no {what:?} from the Java program ({e:?}): {lines:?}"),
        }
    };
    until(&program, "ALL SENT");
    // SYNC_MASTER: every send answered is on the slave too.
    g.a.kill9();
    program.tell("go");
    until(&program, "DONE");
    let status = program.child.wait().expect("java exits");
    assert!(status.success(), "{status}: {lines:?}");
    let sent: HashMap<String, Placed> = placed(&lines, "SENT ").into_iter().collect();
    let retried: HashMap<String, Placed> = placed(&lines, "RETRIED ").into_iter().collect();
    assert_eq!(
        retried, sent,
        "each retry is answered with its original's result"
    );
    assert_stored_once_as_retried(&lines);
}

#[test]
fn without_dedup_the_same_java_retries_store_duplicates() {
    // The run waits until every message is there twice (the queued original and its retry).
    let Some(lines) = run("dedup_enable = false\n", "JavaDedupOff", 2 * COUNT) else {
        return;
    };
    let stored = placed(&lines, "STORED ");
    let mut copies: HashMap<String, usize> = HashMap::new();
    for (body, _) in &stored {
        *copies.entry(body.clone()).or_default() += 1;
    }
    assert!(
        copies.values().any(|&n| n > 1),
        "some message is stored twice: {copies:?}"
    );
}
