//! The quickstart end to end, tiny: a real NameServer and broker (children of the bench
//! binary), the `small` profile, 2000 messages produced and consumed back and verified.

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn quickstart_produces_consumes_and_verifies_with_the_small_profile() {
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "--profile",
            "small",
            "--messages",
            "2000",
            "--batch",
            "50",
            "--producers",
            "2",
            "--latency-rate",
            "500",
            "--latency-duration",
            "0.5",
            "--no-disk",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}\n{stdout}");
    let runs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mode = |m: &str| runs.iter().find(|r| r["mode"] == m).unwrap().clone();
    let produce = mode("produce");
    assert_eq!(produce["messages"], 2000);
    assert_eq!(produce["errors"], 0);
    assert_eq!(produce["profile"], "small");
    assert!(produce["msgs_per_sec"].as_f64().unwrap() > 0.0);
    assert!(produce["latency_us"]["p99"].as_f64().unwrap() > 0.0);
    let consume = mode("consume");
    assert_eq!(consume["messages"], 2000, "{consume}");
    assert_eq!(consume["errors"], 0, "{consume}");
    let latency = mode("latency");
    assert_eq!(latency["errors"], 0);
    assert!(latency["messages"].as_u64().unwrap() > 0);
    assert!(produce["broker_memory"]["vm_hwm_kib"].as_u64().unwrap() > 0);
}
