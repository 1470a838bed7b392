//! A Spring Boot application on Apache's `rocketmq-spring-boot-starter` 2.3.5
//! (`tests/rocketmq-spring`, Spring Boot 2.7, RocketMQ Java client 5.3.2) against corvus:
//! `RocketMQTemplate.syncSend` sends five messages and `RocketMQTemplate.receive` — the
//! starter's `DefaultLitePullConsumer` (`rocketmq.pull-consumer.*`), which pulls with the 5.x
//! client's LITE_PULL_MESSAGE — reads every one of them back.
//!
//! `.ci/run` builds the application (`mvn compile` there, which writes `cp.txt`); without a
//! JVM and the build the test says so and skips, and fails where `CORVUS_REQUIRE_JAVA` is
//! set, as CI sets it.

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use integration::{create_topic, run_client_program, Cluster};

/// The application's classpath, or `None` after saying why the test does not run.
fn spring_or_skip() -> Option<String> {
    integration::java_program_or_skip("tests/rocketmq-spring", Some("corvus/spring/Receive.class"))
}

#[test]
fn rocketmq_template_receive_reads_what_was_sent() {
    let Some(cp) = spring_or_skip() else {
        return;
    };
    assert!(cp.contains("rocketmq-spring-boot-starter-2.3."), "{cp}");
    let c = Cluster::start(1, "small");
    create_topic(&c.namesrv.addr, "SpringTopic", 4);
    let home = c.dir.path().join("java-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx256m")
        .arg(format!("-Duser.home={}", home.display()))
        .arg("-cp")
        .arg(&cp)
        .arg("corvus.spring.Receive")
        .args([c.namesrv.addr.as_str(), "SpringTopic", "5"])
        .env("ROCKETMQ_HOME", &home);
    let (status, lines) = run_client_program("spring", &mut cmd, Duration::from_secs(150));
    assert!(
        lines.iter().any(|l| l == "SENT 5"),
        "RocketMQTemplate.syncSend sent all five: {lines:?}"
    );
    for i in 0..5 {
        let want = format!("RECEIVED spring-{i}");
        assert!(
            lines.contains(&want),
            "RocketMQTemplate.receive read spring-{i}: {lines:?}"
        );
    }
    assert!(
        status.success() && lines.iter().any(|l| l == "RECEIVED ALL 5"),
        "the application ended well ({status}): {lines:?}"
    );
}
