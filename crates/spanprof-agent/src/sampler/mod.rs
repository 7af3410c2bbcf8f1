//! The sampler: a CPU-time timer per thread (`timer_create` on the thread's CPU clock with
//! `SIGEV_THREAD_ID`), a `SIGPROF` handler that copies the thread's span record
//! ([`crate::slot::current`]) and walks frame pointers into the thread's preallocated ring, and
//! the draining side used by the agent's background thread.
//!
//! The handler allocates nothing, takes no lock and calls only async-signal-safe functions
//! (`clock_gettime`, `process_vm_readv`, atomics). Stack memory is read with `process_vm_readv` on
//! our own process, so a broken frame chain ends the walk instead of faulting.

pub mod ring;

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::time::Duration;

use crate::slot;
use crate::AgentError;
use ring::{RawSample, Ring, MAX_FRAMES};

/// Threads sampled at once; threads beyond it are not sampled and counted.
pub const MAX_THREADS: usize = 1024;

/// The rings, indexed by the value each thread's timer carries in `si_value`. Allocated by the
/// background thread, never freed (a late signal may still name one), reused for new threads.
static RINGS: [AtomicPtr<Ring>; MAX_THREADS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_THREADS];
static SAMPLER_RUNNING: AtomicBool = AtomicBool::new(false);
static HANDLER_INSTALLED: AtomicBool = AtomicBool::new(false);
static PID: AtomicI32 = AtomicI32::new(0);
/// Whether `process_vm_readv` works here (seccomp may forbid it): else only the leaf frame.
static CAN_READ_STACK: AtomicBool = AtomicBool::new(false);

/// Counters of one [`Sampler::drain`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Samples handed over.
    pub samples: u64,
    /// Samples lost to full rings since the last drain.
    pub dropped_ring_full: u64,
}

struct ThreadTimer {
    timer: libc::timer_t,
    ring: usize,
}

// SAFETY: a timer_t is a kernel timer id (an opaque handle), usable from any thread.
unsafe impl Send for ThreadTimer {}

/// The process's sampler: one at a time (it owns `SIGPROF`).
pub struct Sampler {
    period: Duration,
    threads: HashMap<i32, ThreadTimer>,
    free_rings: Vec<usize>,
    next_ring: usize,
    /// Threads that could not get a timer because [`MAX_THREADS`] were sampled.
    pub threads_over_limit: u64,
}

impl Sampler {
    /// Installs the `SIGPROF` handler and prepares to sample every thread of the process
    /// `frequency_hz` times per second of its CPU time (1 to 10 000).
    pub fn start(frequency_hz: u32) -> Result<Sampler, AgentError> {
        if !(1..=10_000).contains(&frequency_hz) {
            return Err(AgentError::Config(format!(
                "frequency_hz {frequency_hz}: expected 1 to 10000"
            )));
        }
        if SAMPLER_RUNNING.swap(true, Ordering::AcqRel) {
            return Err(AgentError::AlreadyRunning);
        }
        PID.store(std::process::id() as i32, Ordering::Relaxed);
        CAN_READ_STACK.store(probe_process_vm_readv(), Ordering::Relaxed);
        if !HANDLER_INSTALLED.load(Ordering::Acquire) {
            // SAFETY: a zeroed sigaction with our handler; SA_RESTART keeps interrupted system
            // calls of the application going.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigprof as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(libc::SIGPROF, &action, ptr::null_mut()) != 0 {
                    SAMPLER_RUNNING.store(false, Ordering::Release);
                    return Err(AgentError::Os(
                        "sigaction(SIGPROF)",
                        std::io::Error::last_os_error(),
                    ));
                }
            }
            HANDLER_INSTALLED.store(true, Ordering::Release);
        }
        Ok(Sampler {
            period: Duration::from_nanos(1_000_000_000 / u64::from(frequency_hz)),
            threads: HashMap::new(),
            free_rings: Vec::new(),
            next_ring: 0,
            threads_over_limit: 0,
        })
    }

    /// The sampling period, in CPU time of each thread.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Whether stacks are walked (else only the leaf frame is taken; see the crate README).
    pub fn walks_stacks(&self) -> bool {
        CAN_READ_STACK.load(Ordering::Relaxed)
    }

    /// Starts timers for threads that appeared since the last call and deletes those of threads
    /// that exited (from `/proc/self/task`). Returns the number of threads sampled.
    pub fn refresh_threads(&mut self, drain: &mut impl FnMut(&RawSample)) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return self.threads.len();
        };
        let live: Vec<i32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let gone: Vec<i32> = self
            .threads
            .keys()
            .filter(|t| !live.contains(t))
            .copied()
            .collect();
        for tid in gone {
            let t = self.threads.remove(&tid).expect("listed above");
            // SAFETY: a timer we created and delete once.
            unsafe { libc::timer_delete(t.timer) };
            let ring = ring_at(t.ring);
            ring.drain(drain);
            ring.tid.store(0, Ordering::Relaxed);
            self.free_rings.push(t.ring);
        }
        for tid in live {
            if self.threads.contains_key(&tid) {
                continue;
            }
            let Some(index) = self.take_ring() else {
                self.threads_over_limit += 1;
                continue;
            };
            ring_at(index).tid.store(tid, Ordering::Relaxed);
            match start_thread_timer(tid, index, self.period) {
                Some(timer) => {
                    self.threads.insert(tid, ThreadTimer { timer, ring: index });
                }
                None => self.free_rings.push(index), // exited meanwhile
            }
        }
        self.threads.len()
    }

    /// Whether thread `tid` has a timer.
    pub fn is_sampled(&self, tid: i32) -> bool {
        self.threads.contains_key(&tid)
    }

    fn take_ring(&mut self) -> Option<usize> {
        if let Some(i) = self.free_rings.pop() {
            return Some(i);
        }
        if self.next_ring == MAX_THREADS {
            return None;
        }
        let i = self.next_ring;
        self.next_ring += 1;
        if RINGS[i].load(Ordering::Acquire).is_null() {
            RINGS[i].store(Box::into_raw(Box::new(Ring::new())), Ordering::Release);
        }
        Some(i)
    }

    /// Hands every sample taken since the last drain to `f`.
    pub fn drain(&mut self, mut f: impl FnMut(&RawSample)) -> DrainStats {
        let mut stats = DrainStats::default();
        for t in self.threads.values() {
            let ring = ring_at(t.ring);
            stats.samples += ring.drain(&mut f) as u64;
            stats.dropped_ring_full += ring.take_dropped();
        }
        stats
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        for (_, t) in self.threads.drain() {
            // SAFETY: timers we created.
            unsafe { libc::timer_delete(t.timer) };
            ring_at(t.ring).drain(&mut |_| {});
            ring_at(t.ring).tid.store(0, Ordering::Relaxed);
        }
        SAMPLER_RUNNING.store(false, Ordering::Release);
    }
}

fn ring_at(index: usize) -> &'static Ring {
    // SAFETY: rings are allocated before their index is given to a timer and never freed.
    unsafe { &*RINGS[index].load(Ordering::Acquire) }
}

/// A timer on `tid`'s CPU clock that sends it `SIGPROF` with `index` every `period` of its CPU
/// time; `None` if the thread is gone.
fn start_thread_timer(tid: i32, index: usize, period: Duration) -> Option<libc::timer_t> {
    // The kernel's clock id of a thread's CPU time (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)),
    // as glibc's pthread_getcpuclockid makes it; timers on it may target any thread of our group.
    let clock: libc::clockid_t = ((!tid) << 3) | 6;
    // SAFETY: a zeroed sigevent with the fields of SIGEV_THREAD_ID set.
    unsafe {
        let mut event: libc::sigevent = std::mem::zeroed();
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = libc::SIGPROF;
        event.sigev_value = libc::sigval {
            sival_ptr: index as *mut c_void,
        };
        event.sigev_notify_thread_id = tid;
        let mut timer: libc::timer_t = ptr::null_mut();
        if libc::timer_create(clock, &mut event, &mut timer) != 0 {
            return None;
        }
        let ts = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        if libc::timer_settime(timer, 0, &spec, ptr::null_mut()) != 0 {
            libc::timer_delete(timer);
            return None;
        }
        Some(timer)
    }
}

fn probe_process_vm_readv() -> bool {
    let word: [u64; 2] = [0x5eed, 0xf00d];
    read_two_words(std::process::id() as i32, word.as_ptr() as u64) == Some(word)
}

/// Two words at `addr` of our own memory, or `None` if unmapped. Async-signal-safe.
fn read_two_words(pid: i32, addr: u64) -> Option<[u64; 2]> {
    let mut out = [0u64; 2];
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: 16,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: 16,
    };
    // SAFETY: the kernel checks the remote range; the local one is `out`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (n == 16).then_some(out)
}

/// Program counter, frame pointer and stack pointer of the interrupted code.
unsafe fn registers(context: *mut c_void) -> (u64, u64, u64) {
    let uc = context as *const libc::ucontext_t;
    #[cfg(target_arch = "x86_64")]
    {
        let g = &(*uc).uc_mcontext.gregs;
        (
            g[libc::REG_RIP as usize] as u64,
            g[libc::REG_RBP as usize] as u64,
            g[libc::REG_RSP as usize] as u64,
        )
    }
    #[cfg(target_arch = "aarch64")]
    {
        let m = &(*uc).uc_mcontext;
        (m.pc, m.regs[29], m.sp)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = uc;
        (0, 0, 0)
    }
}

/// Walks the frame-pointer chain from `fp` into `pcs` after the leaf; returns the depth.
fn walk_frames(mut fp: u64, sp: u64, pcs: &mut [u64; MAX_FRAMES]) -> u32 {
    let mut depth = 1;
    if !CAN_READ_STACK.load(Ordering::Relaxed) {
        return depth as u32;
    }
    let pid = PID.load(Ordering::Relaxed);
    // Frame records live above the stack pointer and each caller's above its callee's.
    let mut floor = sp;
    while depth < MAX_FRAMES && fp >= floor && fp.is_multiple_of(8) && fp != 0 {
        let Some([next_fp, ret]) = read_two_words(pid, fp) else {
            break;
        };
        if ret == 0 {
            break;
        }
        pcs[depth] = ret;
        depth += 1;
        floor = fp + 16;
        fp = next_fp;
    }
    depth as u32
}

extern "C" fn on_sigprof(_signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler; errno is
    // saved and restored around our system calls.
    unsafe {
        if info.is_null() || (*info).si_code != libc::SI_TIMER {
            return; // a SIGPROF sent by someone else, not one of our timers
        }
        let errno = *libc::__errno_location();
        let index = (*info).si_value().sival_ptr as usize;
        if index < MAX_THREADS {
            let ring = RINGS[index].load(Ordering::Acquire);
            if !ring.is_null() {
                let ring = &*ring;
                ring.push_with(|s| {
                    let mut now: libc::timespec = std::mem::zeroed();
                    libc::clock_gettime(libc::CLOCK_REALTIME, &mut now);
                    s.time_unix_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
                    s.tid = ring.tid.load(Ordering::Relaxed);
                    s.weight = 1 + (*info).si_overrun().max(0) as u32;
                    if let Some(record) = slot::current() {
                        s.context = record;
                    }
                    let (pc, fp, sp) = registers(context);
                    s.pcs[0] = pc;
                    s.depth = walk_frames(fp, sp, &mut s.pcs);
                });
            }
        }
        *libc::__errno_location() = errno;
    }
}
