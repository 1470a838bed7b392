//! A handle on a running `corvus-fault-proxy` (see its source for the commands): starts it
//! (inside a namespace or not), sends it commands and waits for their answers, kills it
//! when dropped.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const READY_WAIT: Duration = Duration::from_secs(20);
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Which way a proxy fault applies: up is client to upstream, down is the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
    Both,
}

impl Direction {
    fn word(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
            Direction::Both => "both",
        }
    }
}

pub struct FaultProxy {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<String>,
    /// The addresses it listens on, in the order of the routes.
    pub addrs: Vec<String>,
}

impl FaultProxy {
    /// Starts the proxy binary through `wrap` (e.g. `|c| host.wrap(&c)` to run it in a
    /// namespace, or `|c| c` on loopback), relaying each (listen, upstream) route.
    pub fn start(
        wrap: impl FnOnce(Command) -> Command,
        routes: &[(String, String)],
        seed: u64,
    ) -> Result<FaultProxy, String> {
        let mut cmd = Command::new(crate::bin("corvus-fault-proxy"));
        for (l, u) in routes {
            cmd.arg("--route").arg(format!("{l}={u}"));
        }
        cmd.args(["--seed", &seed.to_string()]);
        let mut cmd = wrap(cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start the fault proxy: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the fault proxy's pipes".into());
        };
        let answers = crate::output_lines(stdout, None);
        let mut p = FaultProxy {
            child,
            stdin,
            answers,
            addrs: Vec::new(),
        };
        match p.answers.recv_timeout(READY_WAIT) {
            Ok(line) if line.starts_with("proxy ready ") => {
                p.addrs = line["proxy ready ".len()..]
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                Ok(p)
            }
            other => Err(format!("the fault proxy did not start: {other:?}")),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends one command line and returns its `ok ...` answer.
    pub fn command(&mut self, line: &str) -> Result<String, String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("proxy command {line}: {e}"))?;
        match self.answers.recv_timeout(ANSWER_WAIT) {
            Ok(a) if a.starts_with("ok") => Ok(a),
            Ok(a) => Err(format!("proxy command {line}: {a}")),
            Err(e) => Err(format!("proxy command {line}: no answer ({e})")),
        }
    }

    /// No fault.
    pub fn pass(&mut self) -> Result<(), String> {
        self.command("pass").map(drop)
    }

    pub fn delay(&mut self, dir: Direction, delay_ms: u64, jitter_ms: u64) -> Result<(), String> {
        self.command(&format!("delay {} {delay_ms} {jitter_ms}", dir.word()))
            .map(drop)
    }

    /// 0 = no cap.
    pub fn bandwidth(&mut self, dir: Direction, bytes_per_s: u64) -> Result<(), String> {
        self.command(&format!("bandwidth {} {bytes_per_s}", dir.word()))
            .map(drop)
    }

    pub fn blackhole(&mut self) -> Result<(), String> {
        self.command("blackhole").map(drop)
    }

    pub fn freeze(&mut self) -> Result<(), String> {
        self.command("freeze").map(drop)
    }

    /// Resets every open connection; returns how many.
    pub fn reset(&mut self) -> Result<usize, String> {
        let a = self.command("reset")?;
        Ok(a.rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// The proxy's counters (`connections=.. accepted=.. up=.. down=..`).
    pub fn stats(&mut self) -> Result<String, String> {
        self.command("stats")
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
