//! `broker`: see `broker::cli`.

fn main() {
    std::process::exit(broker::cli::main_with_args(std::env::args_os()));
}
