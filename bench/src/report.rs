//! One run's figures: a table row for people, a JSON object for scripts.

use serde::Serialize;

use crate::machine::Machine;
use crate::stats::Percentiles;

/// The figures of one run. Serialized as the `--json` object (one per run, one per line).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: String,
    /// Messages acknowledged by the broker (produce) or received and verified (consume).
    pub messages: u64,
    /// Payload bytes of those messages (bodies, before any compression).
    pub bytes: u64,
    pub seconds: f64,
    pub msgs_per_sec: f64,
    /// Payload MB/s, MB = 10^6 bytes.
    pub mb_per_sec: f64,
    /// What the latency measures: "send→ack", "pull round trip", "send→delivery".
    pub latency_of: String,
    pub latency_us: Percentiles,
    /// Failed sends, missing, duplicate or unexpected messages.
    pub errors: u64,
    pub error_detail: Vec<String>,
    pub commit: String,
    /// Cores given to the broker (the quickstart's `--broker-cores`); null against a cluster
    /// started elsewhere.
    pub cores: Option<u16>,
    pub profile: Option<String>,
    pub machine: Machine,
    /// The run's settings (size, batch, producers, rate, sync...).
    pub settings: serde_json::Value,
    /// mb_per_sec / the raw O_DIRECT write bandwidth of `bench disk`, when measured.
    pub disk_ratio: Option<f64>,
    /// Produce runs: MB/s of records into the brokers' CommitLogs (msgs_per_sec times the
    /// bytes the brokers stored per message over the run), when they said.
    pub log_mb_per_sec: Option<f64>,
    /// log_mb_per_sec / the raw O_DIRECT write bandwidth, when both are known.
    pub log_disk_ratio: Option<f64>,
    /// The broker's memory, when it is a child of the bench.
    pub broker_memory: Option<crate::cluster::Memory>,
    /// Paced runs: the host's stall floor on each CPU this machine gives the run (broker
    /// and bench), measured right before it (`--floor-duration`).
    pub host_floor: Option<Vec<crate::floor::CpuFloor>>,
    /// Paced runs: where the send latency went, the bench's stages and the broker's.
    pub stages: Option<Vec<crate::stages::StageRow>>,
    /// `--replica` produce runs: the slave's lag behind the master during the run.
    pub replica_lag: Option<crate::replica::LagReport>,
    /// Produce runs of a local cluster: CPU seconds per million messages the broker used
    /// during the run, and the slave with `--replica`.
    pub broker_cpu_s_per_m: Option<f64>,
    pub slave_cpu_s_per_m: Option<f64>,
}

impl Report {
    pub fn rate(messages: u64, bytes: u64, seconds: f64) -> (f64, f64) {
        if seconds <= 0.0 {
            return (0.0, 0.0);
        }
        (messages as f64 / seconds, bytes as f64 / seconds / 1e6)
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// The human table, one row per run.
pub fn table(reports: &[Report]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<14} {:>10} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6}  {}\n",
        "run",
        "messages",
        "msgs/s",
        "MB/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "errors",
        "latency of"
    ));
    for r in reports {
        let l = &r.latency_us;
        out.push_str(&format!(
            "{:<14} {:>10} {:>11.0} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>10.3} {:>6}  {}\n",
            r.mode,
            r.messages,
            r.msgs_per_sec,
            r.mb_per_sec,
            l.p50 / 1000.0,
            l.p90 / 1000.0,
            l.p99 / 1000.0,
            l.p999 / 1000.0,
            l.max / 1000.0,
            r.errors,
            r.latency_of
        ));
    }
    for r in reports {
        match (r.disk_ratio, r.log_mb_per_sec, r.log_disk_ratio) {
            (Some(ratio), Some(log), Some(log_ratio)) => out.push_str(&format!(
                "{}: {:.1} MB/s of bodies, {:.1} MB/s of records into the CommitLog: {:.0}% and {:.0}% of the disk's raw O_DIRECT write bandwidth\n",
                r.mode,
                r.mb_per_sec,
                log,
                ratio * 100.0,
                log_ratio * 100.0
            )),
            (Some(ratio), _, _) => out.push_str(&format!(
                "{}: {:.1} MB/s is {:.0}% of the disk's raw O_DIRECT write bandwidth\n",
                r.mode,
                r.mb_per_sec,
                ratio * 100.0
            )),
            _ => {}
        }
        for e in &r.error_detail {
            out.push_str(&format!("{}: error: {e}\n", r.mode));
        }
        if let Some(f) = &r.host_floor {
            out.push_str(&format!(
                "{}: host stall floor right before the run (a clock-reading spin loop per CPU): {}\n",
                r.mode,
                crate::floor::describe(f)
            ));
        }
        if let Some(s) = &r.stages {
            out.push_str(&crate::stages::describe(&r.mode, s));
        }
        if let Some(b) = r.broker_cpu_s_per_m {
            out.push_str(&format!(
                "{}: broker CPU {b:.2} s per million messages{}\n",
                r.mode,
                r.slave_cpu_s_per_m
                    .map(|s| format!(", slave {s:.2} s"))
                    .unwrap_or_default()
            ));
        }
        if let Some(l) = &r.replica_lag {
            out.push_str(&format!(
                "{}: slave lag over {} samples: {} / {} / {} bytes (p50 / p99 / max), {:.2} / {:.2} / {:.2} ms\n",
                r.mode, l.samples, l.bytes_p50, l.bytes_p99, l.bytes_max, l.ms_p50, l.ms_p99, l.ms_max
            ));
        }
        if let Some(m) = &r.broker_memory {
            out.push_str(&format!(
                "{}: broker memory: VmRSS {} MiB at the end ({} MiB anonymous, {} MiB mapped files, {} MiB tail rings), \
                 {} MiB highest sampled, VmHWM {} MiB\n",
                r.mode,
                m.vm_rss_kib / 1024,
                m.rss_anon_kib / 1024,
                m.rss_file_kib / 1024,
                m.rss_shmem_kib / 1024,
                m.vm_rss_kib_max / 1024,
                m.vm_hwm_kib / 1024
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample() -> Report {
        let (msgs_per_sec, mb_per_sec) = Report::rate(2000, 2_048_000, 2.0);
        Report {
            mode: "produce".into(),
            messages: 2000,
            bytes: 2_048_000,
            seconds: 2.0,
            msgs_per_sec,
            mb_per_sec,
            latency_of: "send→ack".into(),
            latency_us: Percentiles {
                p50: 10.0,
                p90: 20.0,
                p99: 30.0,
                p999: 40.0,
                max: 50.0,
            },
            errors: 0,
            error_detail: Vec::new(),
            commit: "abc".into(),
            cores: Some(1),
            profile: Some("throughput".into()),
            machine: Machine {
                nproc: 2,
                kernel: "Linux 6".into(),
                cpu_model: "cpu".into(),
            },
            settings: serde_json::json!({"size": 1024}),
            disk_ratio: Some(0.5),
            log_mb_per_sec: None,
            log_disk_ratio: None,
            broker_memory: None,
            host_floor: None,
            replica_lag: None,
            broker_cpu_s_per_m: None,
            slave_cpu_s_per_m: None,
            stages: None,
        }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let v: serde_json::Value = serde_json::from_str(&sample().json()).unwrap();
        for key in [
            "mode",
            "messages",
            "bytes",
            "seconds",
            "msgs_per_sec",
            "mb_per_sec",
            "latency_us",
            "errors",
            "commit",
            "cores",
            "profile",
            "machine",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        for key in ["p50", "p90", "p99", "p999", "max"] {
            assert!(v["latency_us"][key].is_number(), "missing latency {key}");
        }
        for key in ["nproc", "kernel", "cpu_model"] {
            assert!(v["machine"].get(key).is_some(), "missing machine {key}");
        }
        assert_eq!(v["msgs_per_sec"], 1000.0);
        assert_eq!(v["mb_per_sec"], 1.024);
    }

    #[test]
    fn table_shows_rates_and_the_disk_ratio() {
        let t = table(&[sample()]);
        assert!(t.contains("produce"));
        assert!(t.contains("1000"));
        assert!(t.contains("50% of the disk"));
        assert_eq!(Report::rate(1, 1, 0.0), (0.0, 0.0));
    }

    #[test]
    fn a_produce_run_shows_its_records_bytes_beside_its_bodies() {
        let mut r = sample();
        r.log_mb_per_sec = Some(1.2);
        r.log_disk_ratio = Some(0.6);
        let t = table(&[r.clone()]);
        assert!(
            t.contains("1.0 MB/s of bodies, 1.2 MB/s of records into the CommitLog: 50% and 60% of the disk"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["log_mb_per_sec"], 1.2);
        assert_eq!(v["log_disk_ratio"], 0.6);
    }

    #[test]
    fn a_paced_run_shows_the_host_floor_beside_it_and_in_the_json() {
        let mut r = sample();
        r.host_floor = Some(vec![crate::floor::CpuFloor {
            cpu: 1,
            gap_max_us: 3500.0,
            stalls_per_sec: 0.5,
            wait_p99_us: 0.0,
            wait_p999_us: 900.0,
            seconds: 2.0,
        }]);
        let t = table(std::slice::from_ref(&r));
        assert!(
            t.contains("host stall floor")
                && t.contains("CPU 1 longest gap 3.50 ms, 0.5 gaps > 1 ms per s"),
            "{t}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["host_floor"][0]["gap_max_us"], 3500.0);
        assert!(!table(&[sample()]).contains("host stall floor"));
    }
}
