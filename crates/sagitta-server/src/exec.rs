//! Where request work runs: compute never runs on the I/O runtime.
//!
//! * Searches run on a bounded rayon pool of their own; a single-query
//!   search that finds no other search queued or running runs at once on
//!   the I/O thread that received it (no hand-off: measured 50-100 µs less at
//!   concurrency 1 on this 2-core machine).
//! * Ingest (WAL append + fsync + index insert, sealing) runs on a second
//!   pool whose threads run at a lower CPU priority (nice +10), so a
//!   search never waits behind an ingest batch for a core.
//! * Each pool has a bound on queued plus running jobs; past it a request
//!   is refused at once (HTTP 503 + Retry-After, Flight UNAVAILABLE)
//!   instead of queueing without bound.
//! * A job that has waited past the request timeout is not started, and
//!   the awaiting request answers with a timeout.

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
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
            ingest_threads: cores,
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

#[derive(Debug)]
struct Pool {
    pool: rayon::ThreadPool,
    pending: Arc<AtomicUsize>,
    max_pending: usize,
}

/// The two pools.
#[derive(Debug)]
pub struct Exec {
    search: Pool,
    ingest: Pool,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lower_priority() {
    // SAFETY: setpriority with PRIO_PROCESS and a thread id (Linux
    // semantics) only changes this thread's nice value; no memory is
    // touched.
    #[cfg(target_os = "linux")]
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
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
        let build = |name: &'static str, threads: usize, nice: bool| {
            let mut b = rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .thread_name(move |i| format!("sagitta-{name}-{i}"));
            if nice {
                b = b.start_handler(|_| lower_priority());
            }
            b.build().map_err(std::io::Error::other)
        };
        Ok(Exec {
            search: Pool {
                pool: build("search", cfg.search_threads, false)?,
                pending: Arc::new(AtomicUsize::new(0)),
                max_pending: cfg.max_pending_searches.max(1),
            },
            ingest: Pool {
                pool: build("ingest", cfg.ingest_threads, true)?,
                pending: Arc::new(AtomicUsize::new(0)),
                max_pending: cfg.max_pending_ingest.max(1),
            },
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
        p.pool.spawn(move || {
            let _guard = guard;
            if Instant::now() >= deadline || tx.is_closed() {
                return;
            }
            let _ = tx.send(catch(work, AssertUnwindSafe(f)));
        });
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) | Err(_) => {
                self.metrics.rejected("timeout");
                Err(ApiError::Timeout(self.timeout.as_millis() as u64))
            }
        }
    }
}
