//! `bench`: the TPS/latency harness. See `bench --help` and BENCHMARKS.md.

// Tests may unwrap: a panic there is a test failure.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod body;
mod cli;
mod cluster;
mod consume;
mod delayed;
mod disk;
mod floor;
mod lite;
mod machine;
mod pacing;
mod plot;
mod produce;
mod remoting_load;
mod replica;
mod report;
mod runner;
mod stages;
mod stats;
mod verify;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The hidden subcommands the bench starts its children with (`cargo run -p bench` builds
    // no separate broker or namesrv binary, so the bench is both).
    match args.get(1).and_then(|a| a.to_str()) {
        Some("__broker") => {
            let rest = std::iter::once(OsString::from("broker")).chain(args[2..].iter().cloned());
            let code = broker::cli::main_with_args(rest);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        Some("__namesrv") => {
            let rest = std::iter::once(OsString::from("namesrv")).chain(args[2..].iter().cloned());
            return match namesrv::cli::run(rest) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    let cli = cli::Cli::parse();
    match runner::run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(3),
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
