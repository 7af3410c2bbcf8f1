//! Compiles `src/otel_thread_ctx.c`, the OTEP 4947 TLS symbol `otel_thread_ctx_v1`, on Linux
//! (the OTEP is Linux/ELF only; elsewhere the pointer is a Rust thread-local).

fn main() {
    println!("cargo:rerun-if-changed=src/otel_thread_ctx.c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let mut build = cc::Build::new();
    build.file("src/otel_thread_ctx.c");
    // The OTEP recommends the TLSDESC dialect (the default on aarch64); a link into an
    // executable relaxes any dialect to a fixed offset from the thread pointer anyway.
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        build.flag_if_supported("-mtls-dialect=gnu2");
    }
    build.compile("spanprof_otel_thread_ctx");
}
