//! Generates the expander messages and the tonic client and server from `proto/expander.proto`
//! with the pure-Rust `protox` compiler: no `protoc` at build time, nothing downloaded.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto/expander.proto");
    let descriptors = protox::compile(["expander.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server is for tests and for anyone writing an expander service in Rust.
        .build_server(true)
        // The transport is chosen by the code that dials or listens.
        .build_transport(false)
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
