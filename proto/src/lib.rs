//! hangar's protocol crate: the `.proto` files beside it compiled to Rust once, for envd, the relay
//! and the tests alike.
//!
//! Invariant: this crate holds data types and generated code only. It does no I/O and knows
//! nothing of processes, files or sandboxes.
// Generated code: oneofs inline their messages (FilesystemEvent is large).
#![allow(clippy::doc_lazy_continuation, clippy::doc_overindented_list_items, clippy::large_enum_variant)]

mod timestamp;
pub use timestamp::Timestamp;

/// E2B envd's `process` package.
pub mod process {
    tonic::include_proto!("process");
    include!(concat!(env!("OUT_DIR"), "/process.serde.rs"));
}

/// E2B envd's `filesystem` package.
pub mod filesystem {
    tonic::include_proto!("filesystem");
    include!(concat!(env!("OUT_DIR"), "/filesystem.serde.rs"));
}

/// hangar's own extensions.
pub mod hangar {
    pub mod envd {
        pub mod v1 {
            tonic::include_proto!("hangar.envd.v1");
            include!(concat!(env!("OUT_DIR"), "/hangar.envd.v1.serde.rs"));
        }
    }
}

pub use hangar::envd::v1 as ext;

/// The encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));
