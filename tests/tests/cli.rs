//! Bad flags, bad config values and a host without enough locked memory for io_uring are
//! refused at start with a message that names what to change.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use std::time::Duration;

use integration::{
    bin, broker_command, mqadmin, mqadmin_json, run_until_exit, start_broker, start_namesrv,
    wait_for, BrokerOpts,
};

fn broker_fails(args: &[&str], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("broker"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "broker {args:?} should refuse to start"
    );
    assert!(
        stderr.contains(expect),
        "broker {args:?}: expected `{expect}` in:\n{stderr}"
    );
}

#[test]
fn bad_flags_and_config_values_are_named() {
    broker_fails(&["--cores", "0"], "--cores");
    broker_fails(&["--cores", "many"], "--cores");
    broker_fails(
        &["--profile", "fastest"],
        "unknown tuning profile `fastest`",
    );
    broker_fails(&["--namesrv", "localhost"], "namesrv_addr");
    broker_fails(&["--listen", "nonsense"], "listen");
    broker_fails(&["--bogus-flag"], "--bogus-flag");

    let dir = tempfile::tempdir().unwrap();
    let bad_value = dir.path().join("bad_value.toml");
    std::fs::write(&bad_value, "flush_interval_ms = 0\n").unwrap();
    broker_fails(
        &["--config", bad_value.to_str().unwrap()],
        "flush_interval_ms",
    );
    let bad_key = dir.path().join("bad_key.toml");
    std::fs::write(&bad_key, "flush_intervall_ms = 5\n").unwrap();
    broker_fails(
        &["--config", bad_key.to_str().unwrap()],
        "flush_intervall_ms",
    );
    let bad_ratio = dir.path().join("bad_ratio.toml");
    std::fs::write(
        &bad_ratio,
        "disk_clean_ratio = 0.95\ndisk_refuse_ratio = 0.9\n",
    )
    .unwrap();
    broker_fails(
        &["--config", bad_ratio.to_str().unwrap()],
        "disk_clean_ratio",
    );
    broker_fails(
        &["--config", "/nonexistent/broker.toml"],
        "/nonexistent/broker.toml",
    );
    let bad_conf = dir.path().join("broker.conf");
    std::fs::write(&bad_conf, "brokerName=a\nfileReservedTime=two days\n").unwrap();
    broker_fails(&["-c", bad_conf.to_str().unwrap()], "fileReservedTime");

    let out = Command::new(bin("namesrv"))
        .args(["--listen", "not-an-address"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
}

#[test]
fn too_little_locked_memory_is_refused_with_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("broker"));
    cmd.args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"));
    // SAFETY: setrlimit is async-signal-safe and only touches the child's own limits between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must refuse to start: {stderr}");
    assert!(
        stderr.contains("memlock") || stderr.contains("locked memory"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ulimit -l") || stderr.contains("LimitMEMLOCK"),
        "says what to change: {stderr}"
    );
}

/// A RocketMQ broker.conf (`broker -c broker.conf`, as `mqbroker -c`): the keys corvus knows
/// take effect, and each key it does not use is named in the log with the reason.
#[test]
fn rocketmq_broker_conf_sets_its_keys_and_names_the_ignored_ones() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let ns = start_namesrv(&logs);
    let conf = dir.path().join("broker.conf");
    std::fs::write(
        &conf,
        format!(
            "# RocketMQ's conf/broker.conf, as shipped, and a little more\n\
             brokerClusterName = ConfCluster\n\
             brokerId = 0\n\
             deleteWhen = 04\n\
             fileReservedTime = 48\n\
             brokerRole = ASYNC_MASTER\n\
             flushDiskType = ASYNC_FLUSH\n\
             namesrvAddr = {}\n\
             autoCreateTopicEnable = false\n\
             diskMaxUsedSpaceRatio = 80\n\
             messageDelayLevel = 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h\n\
             sendMessageThreadPoolNums = 16\n",
            ns.addr
        ),
    )
    .unwrap();
    let mut opts = BrokerOpts::new("", &dir.path().join("data"));
    opts.extra = vec!["-c".into(), conf.to_str().unwrap().into()];
    let broker = start_broker(&opts, &logs);

    // brokerClusterName and namesrvAddr: the broker registers under the conf's cluster.
    let registered = wait_for(Duration::from_secs(20), || {
        let v = mqadmin_json(&ns.addr, &["cluster-list"]);
        let text = v.to_string();
        text.contains("ConfCluster").then_some(text)
    });
    assert!(
        registered.is_some(),
        "the broker did not register under ConfCluster"
    );
    // autoCreateTopicEnable = false: a send to a topic nobody created is refused.
    let out = mqadmin(&ns.addr, &["send", "-t", "NeverCreated", "-p", "x"]);
    assert!(!out.status.success(), "send to an unknown topic must fail");

    let log = broker.stderr();
    for key in ["deleteWhen", "sendMessageThreadPoolNums"] {
        assert!(
            log.contains(&format!("RocketMQ key `{key}` ignored")),
            "{key} not named in:\n{log}"
        );
    }
    for key in [
        "brokerClusterName",
        "brokerRole",
        "fileReservedTime",
        "diskMaxUsedSpaceRatio",
        "namesrvAddr",
    ] {
        assert!(
            !log.contains(&format!("`{key}` ignored")),
            "{key} was used: {log}"
        );
    }
}

/// A second broker on a port a broker already listens on fails, naming the port, instead of
/// sharing the port's connections with the first (SO_REUSEPORT would let it bind).
#[test]
fn a_second_broker_on_a_taken_port_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let opts = BrokerOpts::new("", &dir.path().join("data"));
    let first = start_broker(&opts, &logs);
    // Bounded: a second broker that did start would run until killed.
    let (code, stderr) = run_until_exit(
        Command::new(bin("broker"))
            .args(["--listen", &first.addr, "--data-dir"])
            .arg(dir.path().join("data2"))
            .args(["--profile", "small"]),
        Duration::from_secs(20),
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "a second broker on {} started: {stderr}",
        first.addr
    );
    assert!(
        stderr.contains(&first.addr) && stderr.contains("another broker"),
        "{stderr}"
    );
}

/// A core that stops while the broker serves (here a panic, injected by the debug build's
/// CORVUS_DEBUG_PANIC_CORE) stops the whole broker with an error naming the core, rather than
/// leaving a broker that looks alive with that core's queues unserved; the same data
/// directory then starts again.
#[test]
fn a_core_that_panics_stops_the_broker_which_then_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut opts = BrokerOpts::new("", &dir.path().join("data"));
    opts.cores = 2;
    let (code, stderr) = run_until_exit(
        broker_command(&opts, &logs).env("CORVUS_DEBUG_PANIC_CORE", "1"),
        Duration::from_secs(40),
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "the broker kept running without core 1, or exited 0: {stderr}"
    );
    assert!(
        stderr.contains("core 1 stopped while the broker was serving"),
        "{stderr}"
    );
    // The restart serves again from the same data directory.
    let again = start_broker(&opts, &logs);
    assert!(again.line.contains("cores 2"), "{}", again.line);
}
