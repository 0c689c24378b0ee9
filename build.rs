//! Compiles the vendored etcd API protos (proto/) into Rust with tonic.
//!
//! protox parses the .proto files in-process, so a fresh machine needs no system `protoc` to
//! build the server.
//!
//! Two passes: the first generates every message, client and server. The second generates only
//! the Watch server again (into `OUT_DIR/wire`), with `WatchResponse` replaced by
//! `v3rpc::watch::WatchFrame`, a wire-identical message whose events are already-encoded
//! bytes: an event is encoded once and the same bytes go to every watcher that gets it.
//!
//! The same descriptors, without comments, go to `OUT_DIR/etcd_descriptors.bin`: the JSON
//! gateway (`etcdhttp::gateway`) reads them at run time to map JSON to protobuf and back.
//!
//! etcd's Lock and Election services (`proto/etcd/server/`) are in the first pass and the
//! descriptors, so that the gateway serves their paths too.
//!
//! A third pass compiles the peer protocol (proto/memetcd/raftpb.proto: what cluster members
//! send each other), reusing the etcd types of the first pass.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/etcd/api/etcdserverpb/rpc.proto",
        "proto/etcd/server/v3lockpb/v3lock.proto",
        "proto/etcd/server/v3electionpb/v3election.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    let gateway = protox::Compiler::new(["proto"])?
        .include_source_info(false)
        .include_imports(true)
        .open_files(files)?
        .encode_file_descriptor_set();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("etcd_descriptors.bin"), gateway)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Values and keys are handed around without copying once decoded.
        .bytes(".")
        // tonic's prost codec with small first buffers (see src/server/codec.rs).
        .codec_path("crate::server::v3rpc::codec::SmallBufferCodec")
        .compile_fds(descriptors.clone())?;

    let mut watch_only = descriptors;
    watch_only.file.retain(|f| f.name() == "etcd/api/etcdserverpb/rpc.proto");
    for f in &mut watch_only.file {
        f.message_type.clear();
        f.enum_type.clear();
        f.service.retain(|s| s.name() == "Watch");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("wire");
    std::fs::create_dir_all(&out)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .out_dir(out)
        .extern_path(".etcdserverpb", "crate::proto::etcdserverpb")
        .extern_path(".mvccpb", "crate::proto::mvccpb")
        .extern_path(".etcdserverpb.WatchResponse", "crate::server::v3rpc::watch::WatchFrame")
        .codec_path("crate::server::v3rpc::codec::SmallBufferCodec")
        .compile_fds(watch_only)?;

    // The etcd files stay in the set (prost looks up the messages it refers to) but generate
    // nothing here: their packages are extern.
    let peer_only = protox::compile(["proto/memetcd/raftpb.proto"], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("peer");
    std::fs::create_dir_all(&out)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .out_dir(out)
        .extern_path(".etcdserverpb", "crate::proto::etcdserverpb")
        .extern_path(".mvccpb", "crate::proto::mvccpb")
        .extern_path(".authpb", "crate::proto::authpb")
        .compile_fds(peer_only)?;
    Ok(())
}
