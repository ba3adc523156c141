//! CPU priority of the calling thread (Linux; a no-op elsewhere).
//!
//! * Threads that answer requests (the server's I/O runtime, its search
//!   pool) ask the scheduler for its shortest time slice
//!   ([`latency_sensitive`]). Linux's EEVDF scheduler (6.12+) gives a task
//!   with a shorter slice an earlier virtual deadline, so a search that
//!   wakes up preempts a running ingest or build thread at once instead
//!   of waiting for the end of that thread's slice (up to a few
//!   milliseconds). Shares of CPU time are unchanged: this reorders, it
//!   does not starve. Older kernels ignore the slice.
//! * Ingest threads run at nice +10 ([`ingest`]): under full load they
//!   get about a tenth of a core against a search thread; background
//!   builds lower themselves further ([`at_least_nice`]).

use super::foreground;

/// Shortest slice Linux accepts for a fair-class task (0.1 ms).
pub const SHORT_SLICE_NS: u64 = 100_000;

/// The nice value of ingest threads.
pub const INGEST_NICE: i32 = 10;

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

/// An ingest thread: nice [`INGEST_NICE`], and marked as a writer that
/// sleeps at its step points while searches run ([`foreground`]).
pub fn ingest() {
    foreground::mark_writer();
    at_least_nice(INGEST_NICE);
}

/// A background thread (flushes, builds, merges): nice at least `n` (a
/// thread already lower keeps its value), and marked as background work
/// that sleeps at its step points while searches run ([`foreground`]).
pub fn background(n: i32) {
    foreground::mark_background();
    at_least_nice(n);
}

/// Lowers the calling thread to nice `n` unless it is already lower.
pub fn at_least_nice(n: i32) {
    #[cfg(target_os = "linux")]
    if nice() < n {
        // SAFETY: setpriority with PRIO_PROCESS and a thread id (Linux
        // semantics) only changes this thread's nice value; no memory is
        // touched.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, tid(), n);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = n;
}

/// The calling thread's id (Linux: `PRIO_PROCESS` takes it for one thread).
#[cfg(target_os = "linux")]
fn tid() -> libc::id_t {
    // SAFETY: gettid has no arguments and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// The calling thread's nice value (0 where it cannot be read).
pub fn nice() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpriority only reads this thread's nice value.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid()) }
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The slice request is accepted here or refused cleanly, and never
    /// changes the thread's nice value; nice values only go down.
    #[test]
    fn the_slice_request_keeps_the_nice_value() {
        std::thread::spawn(|| {
            // The test may itself run niced (`nice -n 19 cargo test`): a
            // thread already lower than a level keeps its own.
            let start = nice();
            ingest();
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
            {
                assert_eq!(nice(), start.max(INGEST_NICE));
                background(19);
                assert_eq!(nice(), 19);
                // Never raised back.
                at_least_nice(5);
                assert_eq!(nice(), 19);
            }
        })
        .join()
        .unwrap();
    }
}
