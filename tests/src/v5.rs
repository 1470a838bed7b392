//! What the RocketMQ 5 gRPC SDK scenario tests share (`rocketmq_v5_java`, `rocketmq_go5`,
//! `rocketmq_python5`, `rocketmq_node5`): the scenarios with their topics, a corvus made as
//! `tests/rocketmq-v5/run-apache.sh` makes Apache for them, two lanes to run them in, and the
//! comparison of a transcript with the one recorded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use remoting::codes::request;
use remoting::RemotingCommand;

use crate::{
    core_addrs, remoting_call, run_client_program, update_topic_with_attributes, wait_for_route,
    workspace_root, Cluster,
};

/// Every scenario of the v5 programs: its name, its topic and the topic's `message.type`
/// (`corvus.v5.Scenarios`' `TOPICS` and run-apache.sh say the same).
pub const SCENARIOS: &[(&str, &str, &str)] = &[
    ("produce", "V5Normal", "NORMAL"),
    ("fifo", "V5Fifo", "FIFO"),
    ("delay", "V5Delay", "DELAY"),
    ("delay-receive", "V5DelayRecv", "DELAY"),
    ("transaction-send", "V5TxnSend", "TRANSACTION"),
    ("transaction", "V5Txn", "TRANSACTION"),
    ("simple", "V5Simple", "NORMAL"),
    ("push", "V5Push", "NORMAL"),
    ("fifo-push", "V5FifoPush", "FIFO"),
    ("share", "V5Share", "NORMAL"),
];

/// The name of every scenario, for an SDK that runs them all.
pub fn all_names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|s| s.0).collect()
}

/// The transcripts Apache RocketMQ 5.3.3 and its Proxy gave the Java program.
pub fn expected_dir() -> PathBuf {
    workspace_root().join("tests/rocketmq-v5/expected")
}

/// The broker's arguments for the broker.conf Apache's got (`tests/rocketmq-diff/broker.conf`).
pub fn broker_conf_args() -> Vec<String> {
    let conf = workspace_root().join("tests/rocketmq-diff/broker.conf");
    vec!["-c".into(), conf.display().to_string()]
}

/// Starts corvus's NameServer and a broker with [`broker_conf_args`], [`prepare`]s `names`;
/// also the gRPC endpoint, the broker's first core.
pub fn cluster_for(names: &[&str]) -> (Cluster, String) {
    let c = Cluster::start_with(1, "small", |o| o.extra = broker_conf_args());
    prepare(&c, names);
    let endpoint = core_addrs(&c.namesrv.addr).into_iter().next().unwrap();
    (c, endpoint)
}

/// Creates the topics (and groups) of `names` on `c` as run-apache.sh creates them on
/// Apache (RocketMQ's UPDATE_AND_CREATE_TOPIC with `+message.type=...`,
/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).
pub fn prepare(c: &Cluster, names: &[&str]) {
    let ns = c.namesrv.addr.clone();
    for name in names {
        let (_, topic, kind) = SCENARIOS
            .iter()
            .find(|s| s.0 == *name)
            .unwrap_or_else(|| panic!("unknown scenario {name}"));
        let attr = format!("+message.type={kind}");
        let f = update_topic_with_attributes(&c.broker.addr, topic, 4, &attr);
        assert_eq!(f.command.code, 0, "{topic} {attr}: {:?}", f.command.remark);
        wait_for_route(&ns, topic);
    }
    // As run-apache.sh: push's failing message goes to the DLQ after 3 deliveries, and
    // fifo-push's group is orderly. push's group also waits 1 s between deliveries
    // (RocketMQ 5's `groupRetryPolicy`, exponential, which every SDK reads) instead of
    // RocketMQ's default 1 s, 5 s, 10 s: the transcript does not depend on the waits.
    let groups: &[(&str, &str)] = &[
        (
            "push",
            r#"{"groupName":"V5PushGroup","retryMaxTimes":2,"groupRetryPolicy":{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":1000,"max":1000,"multiplier":1}}}"#,
        ),
        (
            "fifo-push",
            r#"{"groupName":"V5FifoPushGroup","consumeMessageOrderly":true}"#,
        ),
    ];
    for (name, config) in groups {
        if names.contains(name) {
            let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 9);
            let f = remoting_call(&c.broker.addr, &cmd, config.as_bytes());
            assert_eq!(f.command.code, 0, "{config}: {:?}", f.command.remark);
        }
    }
}

/// Runs `run` for each of `names` in two lanes of about the same length (push, about a
/// minute, with the short ones); what every scenario that differed said.
pub fn lanes(names: &[&str], run: impl Fn(&str) -> Option<String> + Sync) -> Vec<String> {
    let (first, second): (Vec<&str>, Vec<&str>) = names
        .iter()
        .partition(|n| ["push", "share", "produce", "fifo", "delay"].contains(n));
    std::thread::scope(|s| {
        let lanes: Vec<_> = [first, second]
            .into_iter()
            .map(|lane| {
                let run = &run;
                s.spawn(move || lane.iter().filter_map(|name| run(name)).collect::<Vec<_>>())
            })
            .collect();
        lanes.into_iter().flat_map(|l| l.join().unwrap()).collect()
    })
}

/// [`lanes`], failing with what every scenario that differed said.
pub fn run_in_lanes(names: &[&str], run: impl Fn(&str) -> Option<String> + Sync) {
    let failures = lanes(names, run);
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ from their expected transcripts:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

/// Runs the Java program's (`tests/rocketmq-v5`, classpath `program`) scenario `name` against
/// `endpoint`, with its options `extra` and `home` as the JVM's home; what differs from
/// Apache's transcript, if anything.
pub fn java_scenario(
    program: &str,
    endpoint: &str,
    home: &Path,
    name: &str,
    extra: &[&str],
) -> Option<String> {
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(program)
        .arg("corvus.v5.Scenarios")
        .args([endpoint, name])
        .args(extra);
    let expected = expected_dir().join(format!("{name}.txt"));
    transcript_differs(name, &mut cmd, &expected, endpoint)
}

/// Runs scenario `name`'s program `cmd` (at most 300 s) against `endpoint`; what differs from
/// the transcript in `expected`, if anything.
pub fn transcript_differs(
    name: &str,
    cmd: &mut Command,
    expected: &Path,
    endpoint: &str,
) -> Option<String> {
    let want =
        std::fs::read_to_string(expected).unwrap_or_else(|e| panic!("{}: {e}", expected.display()));
    let (status, lines) = run_client_program(name, cmd, Duration::from_secs(300));
    let want_lines: Vec<&str> = want.lines().collect();
    (!status.success() || lines != want_lines).then(|| {
        format!(
            "== {name} against corvus at {endpoint} ({status}):\n{}\n== {} says:\n{}",
            lines.join("\n"),
            expected.display(),
            want.trim_end()
        )
    })
}
