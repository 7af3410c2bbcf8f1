/*
 * The OpenTelemetry thread-context TLS pointer of OTEP 4947 ("Thread Context: Sharing
 * Thread-Level Information with External Readers"): a thread-local pointer named
 * otel_thread_ctx_v1 to the thread's current Thread-Local Context Record, or NULL.
 *
 * It is C because an out-of-process reader finds it by that name in the ELF dynamic symbol
 * table, and stable Rust cannot define a thread-local with a fixed symbol name. The Rust side
 * (src/slot.rs) asks for this thread's address once and writes through it.
 */
#include <stddef.h>

__attribute__((visibility("default"))) __thread const void *otel_thread_ctx_v1 = NULL;

/* This thread's otel_thread_ctx_v1. Not for signal handlers: in a dlopen'ed library the TLS
 * block may be allocated on first access. */
const void **spanprof_otel_thread_ctx_v1_address(void) { return &otel_thread_ctx_v1; }
