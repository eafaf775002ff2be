//! Generates Rust from `proto/` without protoc: protox compiles the files in-process, so the build
//! downloads nothing and needs no system package.
use std::{env, path::PathBuf};

const FILES: &[&str] = &["process/process.proto", "filesystem/filesystem.proto", "hangar/envd/v1/envd.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(env::var("OUT_DIR")?);
    for f in FILES {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }

    let fds = protox::compile(FILES, [&root])?;
    let bytes = prost::Message::encode_to_vec(&fds);
    let descriptor_path = out.join("descriptor.bin");
    std::fs::write(&descriptor_path, &bytes)?;

    tonic_prost_build::configure()
        .compile_well_known_types(true)
        // Output chunks travel from the ring to the wire as `Bytes`: a reference count, not a copy.
        .bytes(".process.ProcessEvent.DataEvent")
        .bytes(".hangar.envd.v1.AttachEvent.Data")
        .bytes(".hangar.envd.v1.FollowEvent.Data")
        .extern_path(".google.protobuf.Timestamp", "crate::Timestamp")
        .extern_path(".google.protobuf", "::pbjson_types")
        .build_client(true)
        // `process.Process/Connect` would clash with the generated `connect` constructor.
        .build_transport(false)
        .build_server(true)
        .compile_fds(fds)?;

    pbjson_build::Builder::new().register_descriptors(&bytes)?.ignore_unknown_fields().build(&[
        ".process",
        ".filesystem",
        ".hangar",
    ])?;
    Ok(())
}
