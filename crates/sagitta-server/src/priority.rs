//! CPU priority of the server's threads (Linux; a no-op elsewhere).
//!
//! * Threads that answer requests (the I/O runtime, the search pool) ask
//!   the scheduler for its shortest time slice ([`latency_sensitive`]).
//!   Linux's EEVDF scheduler (6.12+) gives a task with a shorter slice an
//!   earlier virtual deadline, so a search that wakes up preempts a
//!   running ingest or build thread at once instead of waiting for the
//!   end of that thread's slice (up to a few milliseconds). Shares of CPU
//!   time are unchanged: this reorders, it does not starve. Older kernels
//!   ignore the slice.
//! * Ingest threads run at nice +10 ([`lower_priority`]): under full
//!   load they get about a tenth of a core against a search thread.

/// Shortest slice Linux accepts for a fair-class task (0.1 ms).
const SHORT_SLICE_NS: u64 = 100_000;

/// `struct sched_attr` of `sched_setattr(2)`, its first version (48 bytes).
#[cfg(target_os = "linux")]
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks for the shortest time slice for the calling thread, keeping its
/// policy (normal) and nice value. Returns whether the kernel took it.
pub fn latency_sensitive() -> bool {
    set_slice(SHORT_SLICE_NS)
}

/// Gives the calling thread the scheduler's default slice again, keeping
/// its nice value (a thread started by a latency-sensitive one inherits
/// its short slice). Returns whether the kernel took it.
pub fn default_slice() -> bool {
    set_slice(0)
}

/// The calling thread's slice request (`0`: the kernel's default).
fn set_slice(runtime: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice: nice(),
            priority: 0,
            runtime,
            deadline: 0,
            period: 0,
        };
        // SAFETY: sched_setattr(0, attr, 0) reads `attr` (its size field
        // says how much) and changes only the calling thread's scheduling.
        let r =
            unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = runtime;
        false
    }
}

/// Lowers the calling thread to nice +10, and marks it as a writer that
/// sleeps at its step points while searches run
/// ([`sagitta_index::foreground`]).
pub fn lower_priority() {
    sagitta_index::foreground::mark_writer();
    // SAFETY: setpriority with PRIO_PROCESS and a thread id (Linux
    // semantics) only changes this thread's nice value; no memory is
    // touched.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, tid(), 10);
    }
}

/// The calling thread's id (Linux: `PRIO_PROCESS` takes it for one thread).
#[cfg(target_os = "linux")]
fn tid() -> libc::id_t {
    // SAFETY: gettid has no arguments and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
fn nice() -> i32 {
    // SAFETY: getpriority only reads this thread's nice value.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, tid()) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The slice request is accepted here or refused cleanly, and never
    /// changes the thread's nice value.
    #[test]
    fn the_slice_request_keeps_the_nice_value() {
        std::thread::spawn(|| {
            lower_priority();
            let took = latency_sensitive();
            // Where the kernel shows a thread's slice (scheduler debug
            // info), a slice it took is the one asked for.
            let shown = std::fs::read_to_string("/proc/thread-self/sched")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("se.slice"))
                        .and_then(|l| l.split(':').nth(1))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                });
            if let (true, Some(slice)) = (took, shown) {
                assert_eq!(slice, SHORT_SLICE_NS);
            }
            #[cfg(target_os = "linux")]
            assert_eq!(nice(), 10);
        })
        .join()
        .unwrap();
    }
}
