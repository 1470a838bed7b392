//! What a figure was measured on: the commit, the machine, the kernel.

use serde::Serialize;

/// The commit the bench was built from (`build.rs`), else asked of git at run time.
pub fn commit() -> String {
    let built = env!("BENCH_GIT_COMMIT");
    if built != "unknown" {
        return built.to_owned();
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Machine {
    pub nproc: usize,
    pub kernel: String,
    pub cpu_model: String,
}

impl Machine {
    pub fn detect() -> Machine {
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kernel: kernel(),
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| cpu_model(&s))
                .unwrap_or_else(|| "unknown".to_owned()),
        }
    }
}

fn kernel() -> String {
    // SAFETY: `utsname` is plain old data, so all-zero is a valid value, and `uname` only
    // writes NUL-terminated strings into the struct we own for the duration of the call.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable `utsname`.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".to_owned();
    }
    let field = |f: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    )
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_and_machine() {
        let info = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: x\n";
        assert_eq!(
            cpu_model(info).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(cpu_model("nothing"), None);
        let m = Machine::detect();
        assert!(m.nproc >= 1);
        assert!(m.kernel.starts_with("Linux"), "{}", m.kernel);
        assert!(!commit().is_empty());
    }
}
