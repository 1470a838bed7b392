//! `namesrv`: runs a NameServer until SIGTERM or SIGINT (see `namesrv::cli`).

fn main() -> anyhow::Result<()> {
    namesrv::cli::run(std::env::args_os())
}
