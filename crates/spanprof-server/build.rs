//! Generates the prost types of Pyroscope's push, query and settings APIs, and of gRPC's
//! status, retry info and health check, from our own `.proto` files under `proto/`. protox parses them in Rust, so building needs no `protoc` on the
//! machine.

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    // Cargo watches every file below a directory named here.
    println!("cargo:rerun-if-changed=proto");
    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler.include_imports(true).open_files([
        "querier/v1/querier.proto",
        "settings/v1/setting.proto",
        "push/v1/push.proto",
    ])?;
    // google.v1 is pprof, which spanprof-format implements (proto/google/v1/profile.proto).
    prost_build::Config::new()
        .extern_path(".google.v1", "::spanprof_format::pprof")
        .compile_fds(compiler.file_descriptor_set())?;
    // protojson (serde) for the query API's messages, from the same descriptors. Unknown
    // fields are skipped as connect-go does; PprofProfile (a google.v1.Profile, which has no
    // serde impls) is written by hand in api/pyroscope_query/json.rs.
    pbjson_build::Builder::new()
        .register_descriptors(&compiler.encode_file_descriptor_set())?
        .ignore_unknown_fields()
        .exclude([".querier.v1.PprofProfile"])
        .build(&[".querier.v1", ".types.v1", ".settings.v1"])?;
    // gRPC's own messages; google.protobuf's Any and Duration generated beside them (protox
    // has their declarations) rather than taken from another crate.
    prost_build::Config::new()
        .compile_well_known_types()
        .compile_fds(protox::compile(
            [
                "google/rpc/status.proto",
                "google/rpc/error_details.proto",
                "grpc/health/v1/health.proto",
            ],
            ["proto"],
        )?)?;
    // google.v1 generated on its own, only for the test that checks the declaration against
    // spanprof-format's codec.
    let check = PathBuf::from(std::env::var("OUT_DIR")?).join("google_v1_check");
    std::fs::create_dir_all(&check)?;
    prost_build::Config::new()
        .out_dir(&check)
        .compile_fds(protox::compile(["google/v1/profile.proto"], ["proto"])?)?;
    Ok(())
}
