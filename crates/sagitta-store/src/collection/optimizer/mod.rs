//! The background optimizer: a pure policy ([`plan`]) that picks the next
//! task from the segment list, and its execution on two threads:
//!
//! * **flush** (`sagitta-flush`): writes frozen mutable parts to Flat
//!   segment files as soon as they appear (cheap: a copy), which bounds
//!   memory and the log replayed after a crash; freezes an idle mutable
//!   part.
//! * **optimize** (`sagitta-optimize`): runs one [`Plan`] at a time: builds
//!   the index of Flat segments (importing the largest built graph with
//!   room, so only new rows are linked), merges small segments, rewrites
//!   segments with many dead rows. Builds run on a niced rayon pool and
//!   check for shutdown between chunks of rows.
//!
//! Results are written as new segment files and committed under the
//! writer lock; deletes that happened meanwhile are carried over to the
//! new segment's dead set.
//!
//! Files: `policy.rs` the pure policy (what to do next, when), `threads.rs`
//! the loops, `pools.rs` the build pools and thread priorities, `run.rs`
//! the execution of one task; this file holds the state the collection
//! and its threads share and the wait for the optimizer to settle.

mod policy;
mod pools;
mod run;
mod threads;

// Named by the docs here and in `collection/mod.rs` (`optimizer::plan`).
#[allow(unused_imports)]
pub(crate) use policy::{plan, Plan};

use super::Inner;
use crate::error::{Result, StoreError};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wait after a failed task before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// What the optimizer is doing and has done.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OptimizerStats {
    /// The task in progress: `build`, `merge` or `compact`, `None` when idle.
    pub task: Option<String>,
    /// Rows of the task in progress inserted so far.
    pub task_rows_done: u64,
    /// Rows the task in progress inserts.
    pub task_rows_total: u64,
    /// Tasks finished since open.
    pub tasks_done: u64,
    /// Frozen parts flushed to segment files since open.
    pub flushes: u64,
    /// Rows flushed since open.
    pub rows_flushed: u64,
    /// Rows inserted into built indexes since open.
    pub rows_indexed: u64,
    /// Failed flushes (the flush thread's, or those `seal`, `optimize`
    /// and `compact` run themselves) and failed tasks since open.
    pub errors: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Whether the last look found nothing to do.
    pub idle: bool,
    /// A task the last look put off until writes pause (`build` or
    /// `merge`): it runs on its own once the collection is quiet long
    /// enough, or at once on `optimize()`.
    pub deferred: Option<String>,
}

/// State shared by the collection and its background threads.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    status: Mutex<Status>,
    cv: Condvar,
    /// Set at shutdown; checked between chunks of a build.
    stop: AtomicBool,
    /// Serialises flushes (the flush thread, `seal`, `close`).
    pub flush_lock: Mutex<()>,
}

#[derive(Debug, Default)]
struct Status {
    stats: OptimizerStats,
    /// Bumped by every wake-up call.
    wakes: u64,
    /// Looks at the part list the optimize thread has begun.
    checks: u64,
    /// The last look that found nothing to do and no frozen part.
    settled_at: u64,
    /// Rewrite any segment with a dead row (`compact()`).
    force: bool,
    /// Callers inside `optimize()` / `compact()` (no deferring then).
    waiters: usize,
    /// The flush thread's last error while it is failing (cleared by its
    /// next success): what a stalled write reports.
    flush_error: Option<String>,
    /// Passes of the flush thread finished (with or without an error).
    flush_passes: u64,
    /// Rows per second of the recent flushes (a moving average; 0 before
    /// the first), which paces writes while the flush falls behind.
    flush_rows_per_s: f64,
}

/// Where the flush thread stands ([`Shared::wait_flush`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlushState {
    /// Frozen parts flushed since open.
    pub flushes: u64,
    /// Passes finished since open.
    pub passes: u64,
    /// The last pass's error, while it is failing.
    pub error: Option<String>,
}

impl Shared {
    /// Wakes the background threads (new frozen part, commit, request).
    pub fn wake(&self) {
        self.status.lock().wakes += 1;
        self.cv.notify_all();
    }

    /// A frozen part of `rows` rows was flushed in `took`.
    pub fn flushed(&self, rows: u64, took: Duration) {
        let mut s = self.status.lock();
        let rate = rows as f64 / took.as_secs_f64().max(1e-6);
        s.flush_rows_per_s = if s.flush_rows_per_s > 0.0 {
            0.5 * (s.flush_rows_per_s + rate)
        } else {
            rate
        };
        s.stats.flushes += 1;
        s.stats.rows_flushed += rows;
        s.flush_error = None;
        s.wakes += 1;
        drop(s);
        self.cv.notify_all();
    }

    /// Rows per second of the recent flushes, while the flush is healthy
    /// (a failing one refuses writes instead: see `wait_for_room`).
    pub(crate) fn flush_rate(&self) -> Option<f64> {
        let s = self.status.lock();
        (s.flush_rows_per_s > 0.0 && s.flush_error.is_none()).then_some(s.flush_rows_per_s)
    }

    pub fn stats(&self) -> OptimizerStats {
        self.status.lock().stats.clone()
    }

    /// A pass failed: counted, and kept as what a waiter in `optimize()`
    /// reports ([`StoreError::Optimizer`], still a disk-full error when
    /// it was one: [`StoreError::is_disk_full`]).
    pub(super) fn failed(&self, e: &StoreError) {
        let mut s = self.status.lock();
        s.stats.errors += 1;
        s.stats.last_error = Some(if e.is_disk_full() {
            format!("{}{e}", crate::error::DISK_FULL_MARK)
        } else {
            e.to_string()
        });
        s.stats.task = None;
        drop(s);
        self.cv.notify_all();
    }

    /// A flush pass failed (the flush thread's, or one `seal`, `optimize`
    /// or `compact` ran itself): also what stalled writes report.
    pub(super) fn flush_failed(&self, e: &StoreError) {
        let reason = if e.is_disk_full() {
            format!("{}{e}", crate::error::DISK_FULL_MARK)
        } else {
            e.to_string()
        };
        let mut s = self.status.lock();
        s.flush_error = Some(reason);
        s.flush_passes += 1;
        drop(s);
        self.failed(e);
    }

    /// A flush pass (the flush thread's or a foreground one) left no
    /// frozen part behind.
    pub(super) fn flush_ok(&self) {
        let mut s = self.status.lock();
        s.flush_error = None;
        s.flush_passes += 1;
        drop(s);
        self.cv.notify_all();
    }

    /// Waits (at most `timeout`) until the flush thread has moved past
    /// `seen` (a flush or a pass finished), unless it has already.
    pub(crate) fn wait_flush(&self, seen: &FlushState, timeout: Duration) -> FlushState {
        let mut s = self.status.lock();
        if s.stats.flushes == seen.flushes && s.flush_passes == seen.passes && !self.stopping() {
            self.cv.wait_for(&mut s, timeout);
        }
        FlushState {
            flushes: s.stats.flushes,
            passes: s.flush_passes,
            error: s.flush_error.clone(),
        }
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Waits until woken (or `timeout`), unless a wake-up came since `seen`.
    fn wait(&self, seen: &mut u64, timeout: Duration) {
        let mut s = self.status.lock();
        if s.wakes == *seen && !self.stopping() {
            self.cv.wait_for(&mut s, timeout);
        }
        *seen = s.wakes;
    }

    /// A caller waits in `optimize()` / `compact()`.
    fn waited_for(&self) -> bool {
        self.status.lock().waiters > 0
    }

    fn progress(&self, done: u64) {
        let mut s = self.status.lock();
        s.stats.task_rows_done = done;
    }
}

/// The background threads of a writer.
#[derive(Debug)]
pub(crate) struct Background {
    inner: Arc<Inner>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(inner: &Arc<Inner>) -> Background {
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f).ok()
        };
        let c = inner.clone();
        threads.extend(spawn(
            "sagitta-flush",
            Box::new(move || threads::flush_loop(&c)),
        ));
        let c = inner.clone();
        threads.extend(spawn(
            "sagitta-bloom",
            Box::new(move || threads::bloom_loop(&c)),
        ));
        let c = inner.clone();
        threads.extend(spawn(
            "sagitta-optimize",
            Box::new(move || threads::optimize_loop(&c)),
        ));
        if let super::Durability::IntervalMs(ms) = inner.config.durability {
            let c = inner.clone();
            threads.extend(spawn(
                "sagitta-wal-sync",
                Box::new(move || threads::sync_loop(&c, Duration::from_millis(ms))),
            ));
        }
        Background {
            inner: inner.clone(),
            threads,
        }
    }

    /// Stops and joins the threads (a build in progress is abandoned at
    /// its next chunk).
    pub fn stop(self) {
        self.inner.opt.stop.store(true, Ordering::Release);
        self.inner.opt.wake();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

impl Inner {
    /// Waits until a look at the part list begun after this call found
    /// nothing to do (no frozen part, no task). With
    /// `force`, segments with any dead row count as work.
    pub(super) fn wait_settled(&self, force: bool) -> Result<()> {
        let mut s = self.opt.status.lock();
        if force {
            s.force = true;
        }
        s.waiters += 1;
        let r = self.wait_settled_locked(&mut s);
        s.waiters -= 1;
        r
    }

    fn wait_settled_locked(&self, s: &mut parking_lot::MutexGuard<'_, Status>) -> Result<()> {
        let errors = s.stats.errors;
        let asked = s.checks;
        s.wakes += 1;
        self.opt.cv.notify_all();
        loop {
            if s.stats.errors > errors {
                let e = s.stats.last_error.clone().unwrap_or_default();
                return Err(StoreError::Optimizer(e));
            }
            // A look begun after the request found nothing to do.
            if s.settled_at > asked || self.opt.stopping() {
                return Ok(());
            }
            if self.opt.cv.wait_for(s, Duration::from_secs(1)).timed_out() {
                s.wakes += 1;
                self.opt.cv.notify_all();
            }
        }
    }
}
