//! An out-of-process reader of OpenTelemetry thread contexts (OTEP 4947), as a profiler such as
//! the OpenTelemetry eBPF profiler reads them: find the TLS symbol `otel_thread_ctx_v1` in the
//! executable's dynamic symbol table, stop a thread, take its thread pointer, and read the
//! pointer and the record it points at from the process's memory.
//!
//! Only the executable's own TLS block is handled (where a Rust program links spanprof-agent);
//! a symbol in a shared library would need the dynamic linker's module offsets.

// ptrace has no safe wrapper in std.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;

const STT_TLS: u8 = 6;
const PT_TLS: u32 = 7;
const SHT_DYNSYM: u32 = 11;

/// Where a thread's `otel_thread_ctx_v1` is, relative to its thread pointer, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct TlsSymbol {
    /// Byte offset of the variable from the thread pointer (negative on x86-64: variant II).
    pub tp_offset: i64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Finds `name`, a TLS symbol, in the `.dynsym` of the ELF64 little-endian executable `elf`,
/// and the executable's TLS segment, and computes the symbol's offset from the thread pointer
/// as glibc lays out the executable's static TLS block.
pub fn find_tls_symbol(elf: &[u8], name: &str) -> Result<TlsSymbol, String> {
    if elf.get(..4) != Some(b"\x7fELF".as_slice()) || elf[4] != 2 || elf[5] != 1 {
        return Err("not an ELF64 little-endian file".into());
    }
    let (phoff, phentsize, phnum) = (
        u64_at(elf, 0x20) as usize,
        u16_at(elf, 0x36) as usize,
        u16_at(elf, 0x38) as usize,
    );
    let (shoff, shentsize, shnum) = (
        u64_at(elf, 0x28) as usize,
        u16_at(elf, 0x3a) as usize,
        u16_at(elf, 0x3c) as usize,
    );
    let tls = (0..phnum)
        .map(|i| &elf[phoff + i * phentsize..][..phentsize])
        .find(|ph| u32_at(ph, 0) == PT_TLS)
        .ok_or("no PT_TLS segment: the executable has no thread-locals")?;
    let (tls_vaddr, tls_memsz, tls_align) = (
        u64_at(tls, 0x10),
        u64_at(tls, 0x28),
        u64_at(tls, 0x30).max(1),
    );
    let sections: Vec<&[u8]> = (0..shnum)
        .map(|i| &elf[shoff + i * shentsize..][..shentsize])
        .collect();
    let dynsym = sections
        .iter()
        .find(|sh| u32_at(sh, 4) == SHT_DYNSYM)
        .ok_or("no .dynsym section")?;
    let strtab = sections[u32_at(dynsym, 0x28) as usize];
    let (sym_off, sym_size, sym_ent) = (
        u64_at(dynsym, 0x18) as usize,
        u64_at(dynsym, 0x20) as usize,
        u64_at(dynsym, 0x38).max(24) as usize,
    );
    let str_off = u64_at(strtab, 0x18) as usize;
    let value = (0..sym_size / sym_ent)
        .map(|i| &elf[sym_off + i * sym_ent..][..sym_ent])
        .find(|sym| {
            let name_at = str_off + u32_at(sym, 0) as usize;
            let end = elf[name_at..].iter().position(|b| *b == 0).unwrap_or(0);
            &elf[name_at..name_at + end] == name.as_bytes() && sym[4] & 0xf == STT_TLS
        })
        .map(|sym| u64_at(sym, 8))
        .ok_or_else(|| format!("no TLS symbol {name} in .dynsym (is it exported?)"))?;
    let round_up = |x: u64, a: u64| x.div_ceil(a) * a;
    let tp_offset = if cfg!(target_arch = "x86_64") {
        // Variant II: the executable's block ends at the thread pointer; glibc keeps the
        // segment's first byte at its alignment phase.
        let firstbyte = tls_vaddr.wrapping_neg() & (tls_align - 1);
        -((round_up(tls_memsz - firstbyte, tls_align) + firstbyte) as i64) + value as i64
    } else if cfg!(target_arch = "aarch64") {
        // Variant I: a 16-byte TCB at the thread pointer, then the executable's block.
        (round_up(16, tls_align) + value) as i64
    } else {
        return Err("thread-pointer layout not known for this architecture".into());
    };
    Ok(TlsSymbol { tp_offset })
}

/// One thread's OTEP 4947 record as read from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadContext {
    pub trace_id: String,
    pub span_id: String,
    pub trace_flags: u8,
    /// `attrs-data` entries `(key index, value)`.
    pub attrs: Vec<(u8, String)>,
}

/// A thread stopped with `PTRACE_INTERRUPT`, detached (with the signal it stopped on, if any)
/// when dropped.
struct Stopped {
    tid: i32,
    signal: i32,
}

impl Stopped {
    fn seize(tid: i32) -> Result<Stopped, String> {
        let err = |what: &str| format!("{what} {tid}: {}", std::io::Error::last_os_error());
        // SAFETY: ptrace on a thread id; failures are reported by errno.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                return Err(err("PTRACE_SEIZE"));
            }
            let mut stopped = Stopped { tid, signal: 0 };
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
                return Err(err("PTRACE_INTERRUPT"));
            }
            let mut status = 0;
            if libc::waitpid(tid, &mut status, libc::__WALL) != tid {
                return Err(err("waitpid"));
            }
            if !libc::WIFSTOPPED(status) {
                std::mem::forget(stopped); // it exited: nothing to detach
                return Err(format!("thread {tid} exited"));
            }
            // A signal-delivery stop (not our interrupt's event stop) hands the signal back.
            if status >> 16 != libc::PTRACE_EVENT_STOP {
                stopped.signal = libc::WSTOPSIG(status);
            }
            Ok(stopped)
        }
    }

    /// The stopped thread's thread pointer (`fs_base` on x86-64, `tpidr_el0` on aarch64).
    fn thread_pointer(&self) -> Result<u64, String> {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: a zeroed register block for PTRACE_GETREGS to fill.
            let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
            // SAFETY: the thread is in a ptrace-stop of ours; regs is a valid buffer.
            let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, self.tid, 0, &mut regs) };
            if r != 0 {
                return Err(format!(
                    "PTRACE_GETREGS: {}",
                    std::io::Error::last_os_error()
                ));
            }
            Ok(regs.fs_base)
        }
        #[cfg(target_arch = "aarch64")]
        {
            const NT_ARM_TLS: libc::c_int = 0x401;
            let mut tp = 0u64;
            let mut iov = libc::iovec {
                iov_base: (&mut tp as *mut u64).cast(),
                iov_len: 8,
            };
            // SAFETY: as above; iov covers `tp`.
            let r = unsafe { libc::ptrace(libc::PTRACE_GETREGSET, self.tid, NT_ARM_TLS, &mut iov) };
            if r != 0 {
                return Err(format!(
                    "PTRACE_GETREGSET: {}",
                    std::io::Error::last_os_error()
                ));
            }
            Ok(tp)
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        Err(format!(
            "thread {}: no thread-pointer register known here",
            self.tid
        ))
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: detaching our own tracee, re-injecting the signal it stopped on.
        unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.tid,
                0,
                self.signal as libc::c_long,
            )
        };
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Stops thread `tid` of the process whose memory is `mem` (`/proc/<pid>/mem`), reads its
/// thread context as the OTEP's reading protocol says (pointer; null: none; else the 28-byte
/// header, then `attrs-data-size` bytes), and lets it go. `Ok(None)`: no valid record.
pub fn read_thread(mem: &File, tid: i32, sym: TlsSymbol) -> Result<Option<ThreadContext>, String> {
    let stopped = Stopped::seize(tid)?;
    let tp = stopped.thread_pointer()?;
    let read = |addr: u64, buf: &mut [u8]| {
        mem.read_exact_at(buf, addr)
            .map_err(|e| format!("read {} bytes at {addr:#x}: {e}", buf.len()))
    };
    let mut pointer = [0u8; 8];
    read(tp.wrapping_add_signed(sym.tp_offset), &mut pointer)?;
    let record = u64::from_ne_bytes(pointer);
    if record == 0 {
        return Ok(None);
    }
    let mut header = [0u8; 28];
    read(record, &mut header)?;
    if header[24] != 1 {
        return Ok(None);
    }
    let size = u16::from_ne_bytes([header[26], header[27]]) as usize;
    let mut data = vec![0u8; size];
    read(record + 28, &mut data)?;
    drop(stopped);
    let mut attrs = Vec::new();
    let mut at = 0;
    while at + 2 <= data.len() {
        let (key, len) = (data[at], data[at + 1] as usize);
        let Some(value) = data.get(at + 2..at + 2 + len) else {
            break;
        };
        attrs.push((key, String::from_utf8_lossy(value).into_owned()));
        at += 2 + len;
    }
    Ok(Some(ThreadContext {
        trace_id: hex(&header[..16]),
        span_id: hex(&header[16..24]),
        trace_flags: header[25],
        attrs,
    }))
}

/// The OTEP 4947 reference data of a process, from its OTEP 4719 process context.
#[derive(Debug, PartialEq, Eq)]
pub struct ThreadLocalReference {
    pub schema_version: String,
    pub attribute_key_map: Vec<String>,
}

/// Reads one protobuf varint at `*at`.
fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or("truncated varint")?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

/// The length-delimited fields of a protobuf message, as (field number, bytes); other wire
/// types are skipped.
fn fields(b: &[u8]) -> Result<Vec<(u64, &[u8])>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let tag = varint(b, &mut at)?;
        match tag & 7 {
            0 => {
                varint(b, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = varint(b, &mut at)? as usize;
                let value = b.get(at..at + len).ok_or("truncated field")?;
                out.push((tag >> 3, value));
                at += len;
            }
            t => return Err(format!("wire type {t}")),
        }
    }
    Ok(out)
}

/// An `AnyValue`'s string (field 1), or its array's strings (field 5, `ArrayValue.values`).
fn strings(any_value: &[u8]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (field, bytes) in fields(any_value)? {
        match field {
            1 => out.push(String::from_utf8_lossy(bytes).into_owned()),
            5 => {
                for (_, value) in fields(bytes)?.into_iter().filter(|(f, _)| *f == 1) {
                    out.extend(strings(value)?);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Follows OTEP 4719's reading protocol: finds the `OTEL_CTX` mapping in `/proc/<pid>/maps`,
/// checks the signature, version 2 and a non-zero `published_at_ns`, reads the payload (a
/// protobuf `Resource`), re-reads `published_at_ns` (unchanged: the read is consistent), and
/// returns its `threadlocal.*` attributes.
pub fn read_process_context(pid: u32, mem: &File) -> Result<ThreadLocalReference, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    let line = maps
        .lines()
        .find(|l| {
            let name = l.split_whitespace().nth(5).unwrap_or("");
            name.starts_with("/memfd:OTEL_CTX")
                || name.starts_with("[anon_shmem:OTEL_CTX]")
                || name.starts_with("[anon:OTEL_CTX]")
        })
        .ok_or("no OTEL_CTX mapping in /proc/<pid>/maps")?;
    let start = u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
    let mut header = [0u8; 32];
    mem.read_exact_at(&mut header, start)
        .map_err(|e| e.to_string())?;
    if &header[..8] != b"OTEL_CTX" || u32_at(&header, 8) != 2 {
        return Err(format!("not an OTEL_CTX v2 header: {header:?}"));
    }
    let published = u64_at(&header, 16);
    if published == 0 {
        return Err("process context being updated".into());
    }
    let mut payload = vec![0u8; u32_at(&header, 12) as usize];
    mem.read_exact_at(&mut payload, u64_at(&header, 24))
        .map_err(|e| e.to_string())?;
    let mut again = [0u8; 32];
    mem.read_exact_at(&mut again, start)
        .map_err(|e| e.to_string())?;
    if u64_at(&again, 16) != published {
        return Err("process context changed while read".into());
    }
    let mut reference = ThreadLocalReference {
        schema_version: String::new(),
        attribute_key_map: Vec::new(),
    };
    for (_, kv) in fields(&payload)?.into_iter().filter(|(f, _)| *f == 1) {
        let kv = fields(kv)?;
        let key = kv
            .iter()
            .find(|(f, _)| *f == 1)
            .map(|(_, k)| *k)
            .unwrap_or_default();
        let value = kv
            .iter()
            .find(|(f, _)| *f == 2)
            .map(|(_, v)| *v)
            .unwrap_or_default();
        match key {
            b"threadlocal.schema_version" => {
                reference.schema_version = strings(value)?.concat();
            }
            b"threadlocal.attribute_key_map" => reference.attribute_key_map = strings(value)?,
            _ => {}
        }
    }
    Ok(reference)
}
