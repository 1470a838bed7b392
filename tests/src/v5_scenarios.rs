//! RocketMQ 5's gRPC SDK scenarios (`corvus.v5.Scenarios` of `tests/rocketmq-v5`, on
//! rocketmq-client-java 5.0.8) and Apache's transcripts of them
//! (`tests/rocketmq-v5/expected/<scenario>.txt`, recorded by `tests/rocketmq-v5/run-apache.sh`
//! against Apache RocketMQ 5.3.3 and its Proxy): the topics and groups they need, made on a
//! corvus broker as run-apache.sh makes them on Apache, and a runner comparing each transcript.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use remoting::codes::request;
use remoting::RemotingCommand;

use crate::{
    remoting_call, run_client_program, update_topic_with_attributes, wait_for_route,
    workspace_root, Cluster,
};

/// Every scenario of `corvus.v5.Scenarios`: its name, its topic and the topic's
/// `message.type` (the program's `TOPICS` and run-apache.sh say the same).
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

/// Where Apache's transcripts are.
pub fn expected_dir() -> PathBuf {
    workspace_root().join("tests/rocketmq-v5/expected")
}

/// The broker config Apache's broker got when the transcripts were recorded
/// (`tests/rocketmq-diff/broker.conf`), as `-c` arguments for corvus's broker.
pub fn broker_conf_args() -> Vec<String> {
    let conf = workspace_root().join("tests/rocketmq-diff/broker.conf");
    vec!["-c".into(), conf.display().to_string()]
}

/// Creates the topics (with their `message.type`) and the consumer groups of the scenarios
/// `names` on `c`'s broker over remoting, as run-apache.sh does on Apache, and waits until the
/// NameServer routes every topic.
pub fn prepare(c: &Cluster, names: &[&str]) {
    for name in names {
        let (_, topic, kind) = SCENARIOS
            .iter()
            .find(|s| s.0 == *name)
            .unwrap_or_else(|| panic!("unknown scenario {name}"));
        let attr = format!("+message.type={kind}");
        let f = update_topic_with_attributes(&c.broker.addr, topic, 4, &attr);
        assert_eq!(f.command.code, 0, "{topic} {attr}: {:?}", f.command.remark);
        wait_for_route(&c.namesrv.addr, topic);
    }
    // As run-apache.sh: push's failing message goes to the DLQ after 3 deliveries, and
    // fifo-push's group is orderly.
    let groups: &[(&str, &str)] = &[
        ("push", r#"{"groupName":"V5PushGroup","retryMaxTimes":2}"#),
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

/// Runs the scenarios `names` against `endpoint` in two lanes of about the same length (push,
/// the longest, with the short ones) and returns the report of every scenario whose transcript
/// differs from Apache's.
pub fn run_in_two_lanes(program: &str, endpoint: &str, home: &Path, names: &[&str]) -> Vec<String> {
    let (first, second): (Vec<&str>, Vec<&str>) = names
        .iter()
        .partition(|n| ["push", "share", "produce", "fifo", "delay"].contains(n));
    std::thread::scope(|s| {
        let lanes: Vec<_> = [first, second]
            .into_iter()
            .map(|lane| {
                s.spawn(move || {
                    lane.iter()
                        .filter_map(|name| run_scenario(program, endpoint, home, name))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        lanes.into_iter().flat_map(|l| l.join().unwrap()).collect()
    })
}

/// Runs one scenario against `endpoint`; what differs from Apache's transcript, if anything.
pub fn run_scenario(program: &str, endpoint: &str, home: &Path, name: &str) -> Option<String> {
    let expected = std::fs::read_to_string(expected_dir().join(format!("{name}.txt"))).unwrap();
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(program)
        .arg("corvus.v5.Scenarios")
        .args([endpoint, name]);
    let (status, lines) = run_client_program(name, &mut cmd, Duration::from_secs(300));
    let want: Vec<&str> = expected.lines().collect();
    (!status.success() || lines != want).then(|| {
        format!(
            "== {name} against {endpoint} ({status}):\n{}\n== Apache RocketMQ 5.3.3 and its Proxy said:\n{}",
            lines.join("\n"),
            expected.trim_end()
        )
    })
}
