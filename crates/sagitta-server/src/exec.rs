//! Where request work runs: compute never runs on the I/O runtime.
//!
//! * Searches run on a bounded rayon pool of their own; a single-query
//!   search that finds no other search queued or running runs at once on
//!   the I/O thread that received it (no hand-off: measured 50-100 µs less at
//!   concurrency 1 on this 2-core machine).
//! * Ingest (WAL append + fsync + index insert, sealing) runs on lanes of
//!   their own at a lower CPU priority (nice +10), so a search never waits
//!   behind an ingest batch for a core. Search threads (and the I/O
//!   runtime's) ask for the scheduler's shortest slice, so a search that
//!   wakes up preempts an ingest or build thread at once (see
//!   [`sagitta_index::sched::priority`]). Each lane is a thread that takes
//!   one job at a time and runs it on the lane's own rayon pool: a job
//!   holds its collection's writer lock while the index insert runs in
//!   parallel, and a rayon thread waiting for its parallel work runs other
//!   queued jobs of its pool meanwhile; with one shared pool that could be
//!   the next write to the same collection, on the thread that already
//!   holds the (non-reentrant) lock, and every write stopped for good.
//! * Each pool has a bound on queued plus running jobs; past it a request
//!   is refused at once (HTTP 503 + Retry-After, Flight UNAVAILABLE)
//!   instead of queueing without bound.
//! * A job that has waited past the request timeout is not started, and
//!   the awaiting request answers with a timeout.

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use sagitta_index::sched::priority;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pool sizes and bounds.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// Threads searching.
    pub search_threads: usize,
    /// Search jobs queued or running before new ones are refused.
    pub max_pending_searches: usize,
    /// Threads ingesting.
    pub ingest_threads: usize,
    /// Ingest jobs queued or running before new ones are refused.
    pub max_pending_ingest: usize,
    /// Longest a request may take.
    pub timeout: Duration,
}

impl Default for ExecConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        ExecConfig {
            search_threads: cores,
            max_pending_searches: 64 * cores,
            ingest_threads: cores.min(4),
            max_pending_ingest: 4 * cores,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A kind of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Reads: search, get, count, scan.
    Search,
    /// A read of one query vector without a text leg (a search ticket,
    /// search by id, a single-vector HTTP search that is not exact):
    /// small and latency-bound, so it may run on the I/O thread when the
    /// search pool is idle. Counted with the searches.
    Lookup,
    /// Writes: upsert, delete, create.
    Ingest,
}

impl Work {
    /// The kind of a search request: [`Work::Lookup`] for one query vector
    /// with no text leg and not exact, else [`Work::Search`].
    pub fn search(one_query: bool, text: bool, exact: bool) -> Work {
        if one_query && !text && !exact {
            Work::Lookup
        } else {
            Work::Search
        }
    }

    fn name(self) -> &'static str {
        match self {
            Work::Search | Work::Lookup => "search",
            Work::Ingest => "ingest",
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Where a kind's jobs run.
#[derive(Debug)]
enum Runner {
    /// A rayon pool: jobs and their parallel work share its threads.
    Pool(rayon::ThreadPool),
    /// Lanes: each takes one job at a time (see the module docs).
    Lanes(std::sync::mpsc::Sender<Job>),
}

#[derive(Debug)]
struct Pool {
    runner: Runner,
    pending: Arc<AtomicUsize>,
    max_pending: usize,
}

impl Pool {
    fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        match &self.runner {
            Runner::Pool(p) => p.spawn(job),
            Runner::Lanes(tx) => {
                // The lanes live as long as the process; a send fails only
                // if they are gone, and then the request times out.
                let _ = tx.send(Box::new(job));
            }
        }
    }
}

/// `lanes` threads named `sagitta-{name}-{i}` at nice +10, each running
/// the jobs it takes on its own rayon pool of `threads` threads.
fn lanes(name: &'static str, lanes: usize, threads: usize) -> std::io::Result<Runner> {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    for i in 0..lanes.max(1) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(move |t| format!("sagitta-{name}-{i}.{t}"))
            .start_handler(|_| priority::ingest())
            .build()
            .map_err(std::io::Error::other)?;
        let rx = rx.clone();
        std::thread::Builder::new()
            .name(format!("sagitta-{name}-{i}"))
            .spawn(move || {
                priority::ingest();
                loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => pool.install(job),
                        Err(_) => return,
                    }
                }
            })?;
    }
    Ok(Runner::Lanes(tx))
}

/// Most calls waiting on background work at once ([`Exec::run_wait`]).
pub const MAX_WAITS: usize = 8;

/// The two pools.
#[derive(Debug)]
pub struct Exec {
    search: Pool,
    ingest: Pool,
    /// Calls waiting on background work ([`Exec::run_wait`]) in progress.
    waits: Arc<AtomicUsize>,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs a job, turning a panic into an internal error.
fn catch<T>(work: Work, f: impl FnOnce() -> ApiResult<T> + std::panic::UnwindSafe) -> ApiResult<T> {
    std::panic::catch_unwind(f).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(ApiError::Internal(format!(
            "panic in {}: {msg}",
            work.name()
        )))
    })
}

impl Exec {
    /// Starts the pools.
    pub fn new(cfg: &ExecConfig, metrics: Arc<Metrics>) -> std::io::Result<Exec> {
        let search = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.search_threads.max(1))
            .thread_name(|i| format!("sagitta-search-{i}"))
            .start_handler(|_| {
                priority::latency_sensitive();
            })
            .build()
            .map_err(std::io::Error::other)?;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Ok(Exec {
            search: Pool {
                runner: Runner::Pool(search),
                pending: Arc::new(AtomicUsize::new(0)),
                max_pending: cfg.max_pending_searches.max(1),
            },
            ingest: Pool {
                runner: lanes("ingest", cfg.ingest_threads, cores)?,
                pending: Arc::new(AtomicUsize::new(0)),
                max_pending: cfg.max_pending_ingest.max(1),
            },
            waits: Arc::new(AtomicUsize::new(0)),
            timeout: cfg.timeout,
            metrics,
        })
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Jobs queued or running of a kind.
    pub fn pending(&self, work: Work) -> usize {
        self.pool(work).pending.load(Ordering::Acquire)
    }

    fn pool(&self, work: Work) -> &Pool {
        match work {
            Work::Search | Work::Lookup => &self.search,
            Work::Ingest => &self.ingest,
        }
    }

    /// Runs `f` on the pool for `work`; refuses at once when that pool is
    /// full, and gives up waiting after the timeout.
    pub async fn run<T, F>(&self, work: Work, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> ApiResult<T> + Send + 'static,
    {
        let p = self.pool(work);
        let was = p.pending.fetch_add(1, Ordering::AcqRel);
        if was >= p.max_pending {
            p.pending.fetch_sub(1, Ordering::AcqRel);
            self.metrics.rejected(work.name());
            return Err(ApiError::Busy(work.name()));
        }
        let guard = PendingGuard(p.pending.clone());
        if work == Work::Lookup && was == 0 {
            // The search pool is idle: run on the I/O thread that received
            // the request instead of handing it over and back (two thread
            // wake-ups). Only single-query reads do this, one at a time,
            // so one I/O thread is busy for one short search while the
            // others serve. An answer later than the timeout is refused
            // as the pool's would be.
            let _guard = guard;
            let t0 = Instant::now();
            let r = catch(work, AssertUnwindSafe(f));
            if t0.elapsed() > self.timeout {
                self.metrics.rejected("timeout");
                return Err(ApiError::Timeout(self.timeout.as_millis() as u64));
            }
            return r;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let deadline = Instant::now() + self.timeout;
        p.spawn(move || {
            let _guard = guard;
            if Instant::now() >= deadline || tx.is_closed() {
                return;
            }
            let _ = tx.send(catch(work, AssertUnwindSafe(f)));
        });
        self.answer(rx).await
    }

    /// The job's answer, or a timeout once the request's time is up.
    async fn answer<T>(&self, rx: tokio::sync::oneshot::Receiver<ApiResult<T>>) -> ApiResult<T> {
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) | Err(_) => {
                self.metrics.rejected("timeout");
                Err(ApiError::Timeout(self.timeout.as_millis() as u64))
            }
        }
    }

    /// Runs `f`, a call that mostly waits for the collection's background
    /// work (an optimize), on a thread of its own, so it holds neither a
    /// search thread nor an ingest lane while it waits. At most
    /// [`MAX_WAITS`] at once (past that: refused at once, as a full pool
    /// refuses). The request gives up after the timeout; the call itself
    /// runs on to its end (the background work goes on regardless).
    pub async fn run_wait<T, F>(&self, name: &'static str, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> ApiResult<T> + Send + 'static,
    {
        if self.waits.fetch_add(1, Ordering::AcqRel) >= MAX_WAITS {
            self.waits.fetch_sub(1, Ordering::AcqRel);
            self.metrics.rejected(name);
            return Err(ApiError::Busy(name));
        }
        let guard = PendingGuard(self.waits.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("sagitta-{name}"))
            .spawn(move || {
                let _guard = guard;
                let _ = tx.send(catch(Work::Ingest, AssertUnwindSafe(f)));
            });
        if let Err(e) = spawned {
            return Err(ApiError::Internal(format!("{name}: no thread: {e}")));
        }
        self.answer(rx).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rayon::prelude::*;

    /// Ingest jobs that hold a lock while their parallel work runs (what a
    /// write does with its collection's writer lock) all finish: no lane
    /// thread is ever handed a second job while it waits for its own
    /// parallel work. With one shared rayon pool for the jobs, the thread
    /// holding the lock took the next job, which waited for that lock on
    /// the same thread, forever.
    /// Some microseconds of arithmetic, so the parallel pieces overlap.
    fn work(x: u64) -> u64 {
        (0..20_000u64).fold(x, |a, i| std::hint::black_box(a.wrapping_mul(31) ^ i)) % 7
    }

    #[test]
    fn jobs_holding_a_lock_around_parallel_work_never_deadlock() {
        let cfg = ExecConfig {
            ingest_threads: 2,
            max_pending_ingest: 1024,
            timeout: Duration::from_secs(60),
            ..ExecConfig::default()
        };
        let exec = Arc::new(Exec::new(&cfg, Arc::new(Metrics::default())).unwrap());
        let lock = Arc::new(parking_lot::Mutex::new(0u64));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let total: u64 = rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..400 {
                let (exec, lock) = (exec.clone(), lock.clone());
                tasks.push(tokio::spawn(async move {
                    exec.run(Work::Ingest, move || {
                        let mut g = lock.lock();
                        let sum: u64 = (0..64u64).into_par_iter().map(work).sum();
                        *g += 1;
                        Ok(sum)
                    })
                    .await
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap().unwrap();
            }
            total
        });
        assert_eq!(*lock.lock(), 400);
        assert_eq!(total, 400 * (0..64u64).map(work).sum::<u64>());
    }
}
