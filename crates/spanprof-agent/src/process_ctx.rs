//! The OpenTelemetry process context (OTEP 4719, `oteps/profiles/4719-process-ctx.md`) with the
//! thread-context reference data of OTEP 4947: how an out-of-process reader learns that this
//! process publishes thread contexts, in which schema, and what the records' attribute key
//! indexes mean. The reader then looks for `otel_thread_ctx_v1` in the dynamic symbol tables
//! (see [`crate::slot`]).
//!
//! One page, from `memfd_create("OTEL_CTX")` (or anonymous memory, named `OTEL_CTX` where the
//! kernel can name mappings): a 32-byte header (`signature` "OTEL_CTX", `version`,
//! `payload_size`, `published_at_ns`, `payload` pointer) and, after it, the payload: an
//! `opentelemetry.proto.resource.v1.Resource` holding `threadlocal.schema_version` and
//! `threadlocal.attribute_key_map`. Published once per process, never updated.

use std::sync::atomic::{fence, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::AgentError;

/// The OTEP 4719 header `version` written (the OTEP's current one).
pub const VERSION: u32 = 2;

/// `threadlocal.schema_version`: OTEP 4947's value while the OTEP is a draft.
pub const THREADLOCAL_SCHEMA_VERSION: &str = "tlsdesc_v1_dev";

/// `threadlocal.attribute_key_map`: attribute names by key index of the records' `attrs-data`.
pub const ATTRIBUTE_KEY_MAP: &[&str] = &["span_name"];

const _: () = assert!(crate::slot::SPAN_NAME_KEY == 0);

#[repr(C)]
struct Header {
    signature: [u8; 8],
    version: u32,
    payload_size: u32,
    published_at_ns: u64,
    payload: *const u8,
}

const _: () = assert!(std::mem::size_of::<Header>() == 32);

fn string(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

/// The payload: the thread-context reference data, as Resource attributes.
pub fn payload() -> Vec<u8> {
    let key_map = ArrayValue {
        values: ATTRIBUTE_KEY_MAP.iter().map(|k| string(k)).collect(),
    };
    Resource {
        attributes: vec![
            KeyValue {
                key: "threadlocal.schema_version".into(),
                value: Some(string(THREADLOCAL_SCHEMA_VERSION)),
                ..Default::default()
            },
            KeyValue {
                key: "threadlocal.attribute_key_map".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::ArrayValue(key_map)),
                }),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
    .encode_to_vec()
}

/// Publishes the process context, once per process (later calls return the first's result).
/// Called when a [`crate::SpanSlotLayer`] is installed.
pub fn publish() -> Result<(), &'static AgentError> {
    static PUBLISHED: OnceLock<Result<(), AgentError>> = OnceLock::new();
    PUBLISHED.get_or_init(publish_once).as_ref().map(|_| ())
}

fn os(what: &'static str) -> AgentError {
    AgentError::Os(what, std::io::Error::last_os_error())
}

fn publish_once() -> Result<(), AgentError> {
    let payload = payload();
    let size = 4096.max((32 + payload.len()).next_multiple_of(4096));
    // SAFETY: plain system calls on memory and a descriptor of our own; every result checked.
    unsafe {
        let fd = libc::memfd_create(c"OTEL_CTX".as_ptr(), libc::MFD_CLOEXEC);
        let base = if fd >= 0 {
            let sized = libc::ftruncate(fd, size as libc::off_t) == 0;
            let base = if sized {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            libc::close(fd);
            base
        } else {
            libc::MAP_FAILED
        };
        // No memfd (a sandbox may forbid it): anonymous memory, found by its name only.
        let base = if base == libc::MAP_FAILED {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } else {
            base
        };
        if base == libc::MAP_FAILED {
            return Err(os("mmap of the process context"));
        }
        // A forked child must not show its parent's context.
        if libc::madvise(base, size, libc::MADV_DONTFORK) != 0 {
            let e = os("madvise(MADV_DONTFORK) of the process context");
            libc::munmap(base, size);
            return Err(e);
        }
        let header = base.cast::<Header>();
        let data = base.cast::<u8>().add(32);
        std::ptr::copy_nonoverlapping(payload.as_ptr(), data, payload.len());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .max(1);
        (*header).version = VERSION;
        (*header).payload_size = payload.len() as u32;
        (*header).published_at_ns = now;
        (*header).payload = data;
        // Readers in other processes: the signature, written last, says the rest is there.
        fence(Ordering::SeqCst);
        std::ptr::write_volatile(&mut (*header).signature, *b"OTEL_CTX");
        fence(Ordering::SeqCst);
        // Naming fails on kernels before 5.17 or without CONFIG_ANON_VMA_NAME; the memfd's
        // name is enough then, and the OTEP says to try anyway.
        const PR_SET_VMA: libc::c_int = 0x53564d41;
        const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            base as libc::c_ulong,
            size as libc::c_ulong,
            c"OTEL_CTX".as_ptr() as libc::c_ulong,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_context_is_mapped_with_its_signature_and_payload() {
        publish().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.contains("OTEL_CTX"))
            .unwrap_or_else(|| panic!("no OTEL_CTX mapping:\n{maps}"));
        let start = usize::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
        // SAFETY: the mapping just published, which is never unmapped.
        let header = unsafe { &*(start as *const Header) };
        assert_eq!(&header.signature, b"OTEL_CTX");
        assert_eq!(header.version, VERSION);
        assert_ne!(header.published_at_ns, 0);
        // SAFETY: as above; the payload follows the header.
        let payload =
            unsafe { std::slice::from_raw_parts(header.payload, header.payload_size as usize) };
        let resource = Resource::decode(payload).unwrap();
        assert_eq!(resource.attributes[0].key, "threadlocal.schema_version");
        assert_eq!(resource.attributes[1].key, "threadlocal.attribute_key_map");
        // Once per process.
        publish().unwrap();
        let mappings = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert_eq!(mappings.matches("OTEL_CTX").count(), 1);
    }
}
