//! Compiles the vendored RocketMQ v2 protos into prost message types.
//!
//! `protox` parses the `.proto` files in pure Rust, so a machine with only the Rust toolchain
//! builds this crate: no `protoc` binary is looked for. Only messages and enums are
//! generated; no service or client code, because the server is hand-written on h2 and
//! glommio rather than tonic and tokio. The descriptor set is written beside the generated
//! code so the crate can check its RPC table against the protos themselves.

use std::path::PathBuf;

const PROTO_ROOT: &str = "proto";
const PROTOS: [&str; 3] = [
    "apache/rocketmq/v2/definition.proto",
    "apache/rocketmq/v2/service.proto",
    "apache/rocketmq/v2/admin.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={PROTO_ROOT}/{proto}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let fds = protox::compile(PROTOS, [PROTO_ROOT])?;
    std::fs::write(
        out_dir.join("rocketmq_v2_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;

    prost_build::Config::new()
        // The `bytes` crate's type for `bytes` fields: a received body is then a slice of the
        // frame it came in, not a copy.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
