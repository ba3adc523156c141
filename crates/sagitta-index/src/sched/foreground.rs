//! Searches first: write and background threads give way to them.
//!
//! On a small machine, writes and segment builds keep the cores busy, and
//! a search thread that becomes runnable behind one of them can wait for
//! the kernel's next scheduler tick (4 ms on many kernels), whatever the
//! nice values: Linux's EEVDF scheduler does not run a task that has used
//! more than its share lately (a search thread that has just searched)
//! before the others have caught up, and `sched_yield` does not change
//! that. Searches during an ingest saw p99 latencies of several
//! milliseconds. So these threads give way by themselves: a thread marked
//! [`mark_writer`] or [`mark_background`] calls [`step`] between small
//! units of work (one vector inserted), and while searches are active (one
//! in progress, or one ended less than [`ACTIVE_WINDOW`] ago) it sleeps
//! after every [`RUN`] of work: [`WRITER_PAUSE`] for writes,
//! [`BACKGROUND_PAUSE`] for background builds. A sleeping thread leaves
//! its core to whoever is runnable, so a search waits at most about
//! [`RUN`] for a core; writes keep at least half their speed and builds a
//! quarter under a saturating search load, and lose nothing when no
//! search runs.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Work a writer or background thread does between two pauses.
pub const RUN: Duration = Duration::from_micros(250);
/// A writer's pause after [`RUN`] of work while searches are active.
pub const WRITER_PAUSE: Duration = Duration::from_micros(250);
/// A background thread's pause after [`RUN`] of work while searches are
/// active.
pub const BACKGROUND_PAUSE: Duration = Duration::from_micros(750);
/// How long after a search ends searches still count as active (a client
/// sending one query after another leaves short gaps between them).
pub const ACTIVE_WINDOW: Duration = Duration::from_millis(1);

/// Searches in progress in this process.
static SEARCHES: AtomicUsize = AtomicUsize::new(0);
/// When the last search ended, in nanoseconds since [`epoch`].
static LAST_END: AtomicU64 = AtomicU64::new(0);

/// How a thread gives way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Never (searches, the user's own threads).
    Foreground,
    /// Writes acknowledged to a caller.
    Writer,
    /// Builds and merges.
    Background,
}

thread_local! {
    static ROLE: Cell<Role> = const { Cell::new(Role::Foreground) };
    /// When this thread's current run of work began.
    static RUN_START: Cell<Option<Instant>> = const { Cell::new(None) };
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn nanos(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64
}

/// Marks the calling thread as background work (builds, merges).
pub fn mark_background() {
    ROLE.with(|r| r.set(Role::Background));
}

/// Marks the calling thread as a writer.
pub fn mark_writer() {
    ROLE.with(|r| r.set(Role::Writer));
}

/// A search in progress; searches count as active while one is held and
/// for [`ACTIVE_WINDOW`] after the last is dropped.
#[must_use = "the search counts as running only while this is held"]
#[derive(Debug)]
pub struct Search(());

/// Counts a search as running until the returned value is dropped.
pub fn search() -> Search {
    epoch();
    SEARCHES.fetch_add(1, Ordering::AcqRel);
    Search(())
}

impl Drop for Search {
    fn drop(&mut self) {
        LAST_END.fetch_max(nanos(Instant::now()), Ordering::AcqRel);
        SEARCHES.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether searches are active at `now` (`LAST_END` of 0: no search has
/// ended yet, so none ended within the window; without that, the first
/// [`ACTIVE_WINDOW`] after the epoch was taken looked active).
fn active(now: Instant) -> bool {
    let last = LAST_END.load(Ordering::Acquire);
    SEARCHES.load(Ordering::Acquire) > 0
        || (last != 0 && nanos(now).saturating_sub(last) < ACTIVE_WINDOW.as_nanos() as u64)
}

/// Between two small units of work: on a writer or background thread that
/// has worked [`RUN`] since its last pause, sleeps while searches are
/// active (see the module docs); elsewhere returns at once. Returns how
/// long it slept.
pub fn step() -> Duration {
    let pause = match ROLE.with(Cell::get) {
        Role::Foreground => return Duration::ZERO,
        Role::Writer => WRITER_PAUSE,
        Role::Background => BACKGROUND_PAUSE,
    };
    let now = Instant::now();
    if !active(now) {
        RUN_START.with(|r| r.set(Some(now)));
        return Duration::ZERO;
    }
    match RUN_START.with(Cell::get) {
        Some(start) if now.saturating_duration_since(start) >= RUN => {}
        Some(_) => return Duration::ZERO,
        None => {
            RUN_START.with(|r| r.set(Some(now)));
            return Duration::ZERO;
        }
    }
    std::thread::sleep(pause);
    let end = Instant::now();
    RUN_START.with(|r| r.set(Some(end)));
    end - now
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// CPU time of the calling thread (wall time where it cannot be read).
    fn cpu_time() -> Duration {
        #[cfg(target_os = "linux")]
        {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: writes the calling thread's CPU clock into `t`.
            if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
                return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
            }
        }
        epoch().elapsed()
    }

    /// Work `d` of the thread's own CPU time, calling `step` in between;
    /// returns the time slept. CPU time, not wall time: on a loaded
    /// machine (a niced test run beside other work) a thread preempted
    /// for most of a wall-clock span would do almost no work in it, and
    /// have no occasion to pause.
    fn work(d: Duration) -> Duration {
        let t0 = cpu_time();
        let mut slept = Duration::ZERO;
        while cpu_time() - t0 < d {
            std::hint::black_box((0..200u64).sum::<u64>());
            slept += step();
        }
        slept
    }

    /// Unmarked threads never pause; marked ones pause only while a
    /// search is active, by their role's share.
    #[test]
    fn marked_threads_pause_only_while_searches_run() {
        // No search active (the window after any earlier one passed).
        std::thread::sleep(ACTIVE_WINDOW * 2);
        let ended_before = LAST_END.load(Ordering::Acquire);
        let quiet = std::thread::spawn(|| {
            mark_writer();
            work(Duration::from_millis(5))
        })
        .join()
        .unwrap();
        // Whether another test of this process searched meanwhile (then
        // the run was not quiet: pausing was right).
        let undisturbed = LAST_END.load(Ordering::Acquire) == ended_before
            && SEARCHES.load(Ordering::Acquire) == 0;
        let s = search();
        let unmarked = std::thread::spawn(|| work(Duration::from_millis(5)))
            .join()
            .unwrap();
        let writer = std::thread::spawn(|| {
            mark_writer();
            work(Duration::from_millis(10))
        })
        .join()
        .unwrap();
        let background = std::thread::spawn(|| {
            mark_background();
            work(Duration::from_millis(10))
        })
        .join()
        .unwrap();
        drop(s);
        assert_eq!(unmarked, Duration::ZERO);
        // A run with no search anywhere in the process does not pause (a
        // little scheduling noise aside).
        if undisturbed {
            assert!(quiet < Duration::from_millis(3), "{quiet:?}");
        }
        // A writer paused about as long as it worked (at least one pause
        // per RUN of its 10 ms minus the pauses themselves), a background
        // thread about three times as long per run.
        assert!(writer >= WRITER_PAUSE * 4, "{writer:?}");
        assert!(background >= BACKGROUND_PAUSE * 4, "{background:?}");
        assert!(active(Instant::now()));
        std::thread::sleep(ACTIVE_WINDOW * 2);
        assert!(!active(Instant::now()) || SEARCHES.load(Ordering::Acquire) > 0);
    }
}
