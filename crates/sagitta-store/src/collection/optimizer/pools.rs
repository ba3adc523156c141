//! Where the optimizer's work runs: the nice values of background
//! threads, and the three lazily started build pools (background, idle,
//! waited-for) with the choice of pool for each step.

use super::super::Inner;
use super::policy::DEFER_MS;

/// The nice value of background builds while writes arrive (builds of a
/// backlog): the lowest, below the server's ingest threads
/// (nice 10), so searches come first, then acknowledged writes, then
/// background work; not SCHED_IDLE, so a build still progresses under a
/// saturating load.
pub(super) const BACKGROUND_NICE: libc::c_int = 19;
/// The nice value of the flush thread: level with the server's ingest
/// threads, whose acknowledged writes it turns into segments, and above
/// every build (writers are paced to the flush's speed when it falls
/// behind, never to a build's).
pub(super) const FLUSH_NICE: libc::c_int = 10;
/// The nice value of builds once writes have paused: level with the
/// server's ingest threads, so that other processes on the machine cannot
/// hold them off for good (at 19 a build gets about 1/70 of a core beside
/// each busy process), while the collection's own searches still come
/// first (at nice 0 builds moved the server's search p99 during a build
/// from 0.60 to 0.73 ms).
pub(super) const IDLE_NICE: libc::c_int = 10;

/// The build pools, one per priority, each started on first use, chosen
/// step by step
/// ([`Pools::install`]): builds while writes arrive at nice 19; builds
/// once writes pause at nice 10; work a caller waits for (`optimize()`,
/// `compact()`) at the priority of the thread that opened the collection.
/// A thread cannot raise its own priority again once lowered (without
/// `CAP_SYS_NICE`), so each pool's threads keep theirs, and the optimizer
/// thread, which only plans and hands steps to a pool, keeps the
/// opener's. On a machine kept busy by other processes a nice-19 build
/// gets about 1/70 of a core beside each of them: `optimize()` of 20,000
/// rows took 94 s instead of 1.1 s beside two CPU-bound processes, and the
/// server's indexing of a 100,000-row upload made no visible progress in
/// 9 minutes.
pub(super) struct Pools {
    pub(super) background: LazyPool,
    pub(super) idle: LazyPool,
    pub(super) waited: LazyPool,
}

impl Pools {
    /// Runs `f` on the pool for now ([`Inner::build_priority`]). A task is
    /// made of such steps (each chunk of inserts, writing the file, the
    /// commit), so a task begun in the background moves over at its next
    /// step.
    pub(super) fn install<R: Send>(&self, c: &Inner, f: impl FnOnce() -> R + Send) -> R {
        let pool = match c.build_priority() {
            Priority::Waited => &self.waited,
            Priority::Idle => &self.idle,
            Priority::Background => &self.background,
        };
        match pool.get() {
            Some(p) => p.install(f),
            // No thread could be started: on this one.
            None => f(),
        }
    }
}

/// A pool started on first use, by the optimizer thread (so its threads
/// start from the opener's priority and set their own), and joined when
/// dropped: a collection that never builds starts no build thread.
pub(super) struct LazyPool {
    name: &'static str,
    nice: Option<libc::c_int>,
    threads: usize,
    pool: std::sync::OnceLock<Option<sagitta_index::sched::threads::JoinedPool>>,
}

impl LazyPool {
    pub(super) fn new(name: &'static str, nice: Option<libc::c_int>, threads: usize) -> LazyPool {
        LazyPool {
            name,
            nice,
            threads,
            pool: std::sync::OnceLock::new(),
        }
    }

    fn get(&self) -> Option<&rayon::ThreadPool> {
        let (name, nice) = (self.name, self.nice);
        self.pool
            .get_or_init(|| {
                let b = rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads)
                    .thread_name(move |i| format!("sagitta-{name}-{i}"))
                    .start_handler(move |_| match nice {
                        Some(n) => sagitta_index::sched::priority::background(n),
                        // Still gives way to searches at its step points.
                        None => sagitta_index::sched::foreground::mark_background(),
                    });
                sagitta_index::sched::threads::JoinedPool::build(b).ok()
            })
            .as_deref()
    }
}

/// Which pool the optimizer's next step runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Priority {
    /// Writes arrive: nice 19.
    Background,
    /// Writes have paused ([`DEFER_MS`]): nice 10.
    Idle,
    /// A caller waits in `optimize()` / `compact()`: the opener's.
    Waited,
}

impl Inner {
    /// The pool the optimizer's next step runs on: the opener's priority
    /// while a caller waits in `optimize()` / `compact()`, nice 10 once
    /// writes have paused ([`DEFER_MS`]), else nice 19. Every pool pauses
    /// while searches run (`sagitta_index::sched::foreground`).
    pub(super) fn build_priority(&self) -> Priority {
        if self.opt.waited_for() {
            Priority::Waited
        } else if self.quiet_ms() >= DEFER_MS {
            Priority::Idle
        } else {
            Priority::Background
        }
    }
}
