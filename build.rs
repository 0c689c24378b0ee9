//! Compiles the vendored etcd API protos (proto/) into Rust with tonic.
//!
//! protox parses the .proto files in-process, so a fresh machine needs no system `protoc` to
//! build the server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/etcd/api/etcdserverpb/rpc.proto"];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Values and keys are handed around without copying once decoded.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
