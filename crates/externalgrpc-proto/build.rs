//! Generates the externalgrpc messages and the tonic client and server from
//! `proto/externalgrpc.proto`, with the pure-Rust `protox` compiler: no `protoc` is needed at build
//! time and nothing is downloaded.

use std::error::Error;
use std::path::PathBuf;

use prost::Message;

/// The name the upstream Go code registers the schema file under; a reflection service built on
/// the descriptor set then describes the file exactly as an upstream server would.
const UPSTREAM_FILE_NAME: &str = "cloudprovider/externalgrpc/protos/externalgrpc.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let mut descriptors = protox::compile(["externalgrpc.proto"], ["proto"])?;
    for file in &mut descriptors.file {
        if file.name() == "externalgrpc.proto" {
            file.name = Some(UPSTREAM_FILE_NAME.to_string());
        }
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("externalgrpc_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Transports (h2c, TLS) are the business of the crates that dial or listen; the generated
        // client and server are plain tower services over any of them.
        .build_transport(false)
        // A server answers status 12 UNIMPLEMENTED for every method it does not write, as a Go
        // server built on the generated "unimplemented" base does.
        .generate_default_stubs(true)
        // Sorted maps: deterministic bytes, in the order the Go encoder writes them.
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
