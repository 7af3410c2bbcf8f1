//! Generates the prost types of Pyroscope's query and settings APIs from our own `.proto`
//! files under `proto/`. protox parses them in Rust, so building needs no `protoc` on the
//! machine.

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    // Cargo watches every file below a directory named here.
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(
        ["querier/v1/querier.proto", "settings/v1/setting.proto"],
        ["proto"],
    )?;
    // google.v1 is pprof, which spanprof-format implements (proto/google/v1/profile.proto).
    prost_build::Config::new()
        .extern_path(".google.v1", "::spanprof_format::pprof")
        .compile_fds(files)?;
    // google.v1 generated on its own, only for the test that checks the declaration against
    // spanprof-format's codec.
    let check = PathBuf::from(std::env::var("OUT_DIR")?).join("google_v1_check");
    std::fs::create_dir_all(&check)?;
    prost_build::Config::new()
        .out_dir(&check)
        .compile_fds(protox::compile(["google/v1/profile.proto"], ["proto"])?)?;
    Ok(())
}
