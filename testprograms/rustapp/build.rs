//! Exports spanprof-agent's OTEP 4947 thread-context pointer in the executable's dynamic symbol
//! table, where out-of-process readers look for it; an executable exports no symbol by default.
//! (GNU ld >= 2.35 or lld; `-Wl,--dynamic-list=<file>` does the same with older linkers.)

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
}
