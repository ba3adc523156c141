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

use super::commit::Change;
use super::files::segment_file;
use super::part::{Body, Dead, Part};
use super::{Inner, State};
use crate::error::{Result, StoreError};
use crate::segment::SegmentWriter;
use parking_lot::{Condvar, Mutex};
use sagitta_index::{GraphView, Index, IndexKind, IndexRead};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Rows inserted between two checks for shutdown, once writes have paused
/// or while a caller waits.
const CHUNK: usize = 1024;
/// Rows inserted in one background step: a step begun at nice 19 finishes
/// there (a thread cannot take its priority back), so a caller who starts
/// waiting meanwhile waits for at most this many inserts at that priority
/// (1,024 rows of 384 dims kept `optimize()` waiting 11 s beside two
/// CPU-bound processes).
const BACKGROUND_CHUNK: usize = 128;
/// Wait after a failed task before trying again.
const RETRY: Duration = Duration::from_secs(1);
/// Builds and merges wait until writes have paused this long...
const DEFER_MS: u64 = 300;
/// ...unless this many full parts of rows are waiting for their index (or
/// someone waits in `optimize()`): a bulk load runs at the Flat rate on
/// every core and its index is built right after, while sustained ingest
/// still gets indexed as it goes.
const BACKLOG_PARTS: u64 = 4;
/// ...or the collection has more segments than this (each one costs every
/// search a walk): under writes that never pause, merges still run.
const MAX_DEFERRED_SEGMENTS: usize = 16;
/// Once writes have paused long enough, small segments merge into the
/// largest whatever their sizes (the [`GROWTH`] rule is for writes that
/// keep coming): a bulk load ends as one segment, not a large one and its
/// tail, each searched by every query. Long enough is at least this...
const EAGER_QUIET_MS: u64 = 5_000;
/// ...and the time to rewrite the largest segment at this rate, so that
/// writes arriving just slower than the threshold rewrite it at most at
/// this many bytes a second.
const EAGER_REWRITE_BYTES_PER_S: u64 = 16 << 20;

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
    /// Failed flushes and tasks since open.
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

/// One immutable segment as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PartInfo {
    pub id: u64,
    /// Slots (live and dead rows).
    pub slots: u64,
    /// Live rows.
    pub live: u64,
    /// In the collection's final index kind, or settled without a graph
    /// (`flat`).
    pub built: bool,
    /// A Flat segment small enough to stay so (searched by exact scan; see
    /// `CollectionConfig::index_threshold`): no graph to import.
    pub flat: bool,
}

/// The policy's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    pub bytes_per_vector: u64,
    pub max_segment_size: u64,
    /// Built segments can take new rows into their graph (HNSW).
    pub graph_import: bool,
    /// Rewrite a built segment once this fraction of its slots is dead
    /// (0: any dead row).
    pub dead_ratio: f64,
    /// A segment written with fewer live rows is written Flat (no graph).
    pub index_threshold: u64,
    /// Merge small segments into the largest whatever their sizes (writes
    /// have paused, or `optimize()`), not only when they grow it by
    /// 1 / [`GROWTH`].
    pub eager: bool,
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// Index Flat segments (into a built one with room, when `base`).
    Build,
    /// Merge small built segments.
    Merge,
    /// Rewrite a segment without its dead rows.
    Compact,
}

impl TaskKind {
    fn name(self) -> &'static str {
        match self {
            TaskKind::Build => "build",
            TaskKind::Merge => "merge",
            TaskKind::Compact => "compact",
        }
    }
}

/// A task: rewrite `inputs` as one new segment; with `base`, that input's
/// graph is imported and only the other inputs' rows are inserted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub kind: TaskKind,
    pub inputs: Vec<u64>,
    pub base: Option<u64>,
    /// Write the result as a Flat segment (fewer live rows than the
    /// policy's `index_threshold`); never with a `base`.
    pub flat: bool,
}

impl PartInfo {
    fn dead(&self) -> u64 {
        self.slots.saturating_sub(self.live)
    }
}

/// A segment takes new rows into its graph (or merges with smaller ones)
/// only when they bring at least 1 / `GROWTH` of its size: each rewrite
/// of a segment at least grows it by that factor, so a row is rewritten
/// O(log) times however the rows trickle in (a write a second does not
/// rewrite a 1 GiB segment every second).
const GROWTH: u64 = 8;

/// The next task for `parts` (oldest first), or `None` when settled:
/// 1. a built segment whose dead share reaches `dead_ratio` is rewritten;
/// 2. unbuilt (Flat) segments, oldest first and up to `max_segment_size`
///    together, are built: into the largest built segment they fit in
///    and bring at least 1 / [`GROWTH`] of, when graphs can be imported
///    (so only their rows are linked), else as a new segment;
/// 3. built segments under half of `max_segment_size` are merged: the
///    longest run of them, smallest first, that fits and whose smaller
///    members bring at least 1 / [`GROWTH`] of the largest, into that
///    largest one.
///
/// With `eager`, the two [`GROWTH`] conditions are dropped and rule 3
/// takes any segment under `max_segment_size`.
///
/// Each task removes dead rows or unbuilt segments or lowers the segment
/// count, so repeated planning ends.
pub(crate) fn plan(parts: &[PartInfo], p: &Policy) -> Option<Plan> {
    let bytes = |rows: u64| rows.saturating_mul(p.bytes_per_vector);
    let too_dead =
        |x: &PartInfo| x.dead() > 0 && x.dead() as f64 >= p.dead_ratio * x.slots.max(1) as f64;
    if let Some(x) = parts.iter().find(|x| x.built && too_dead(x)) {
        return Some(Plan {
            kind: TaskKind::Compact,
            inputs: vec![x.id],
            base: None,
            flat: x.flat,
        });
    }
    let unbuilt: Vec<&PartInfo> = parts.iter().filter(|x| !x.built).collect();
    if !unbuilt.is_empty() {
        let mut inputs = Vec::new();
        let mut total = 0u64;
        for x in unbuilt {
            if !inputs.is_empty() && bytes(total + x.live) > p.max_segment_size {
                break;
            }
            inputs.push(x.id);
            total += x.live;
        }
        let base = p
            .graph_import
            .then(|| {
                parts
                    .iter()
                    .filter(|x| {
                        x.built
                            && !x.flat
                            && x.live > 0
                            && bytes(x.slots + total) <= p.max_segment_size
                            && (p.eager || total * GROWTH >= x.slots)
                    })
                    .max_by_key(|x| (x.slots, x.id))
            })
            .flatten();
        if let Some(b) = base {
            inputs.insert(0, b.id);
        }
        return Some(Plan {
            kind: TaskKind::Build,
            inputs,
            base: base.map(|b| b.id),
            flat: false,
        });
    }
    // Eager: any segment with room may take the others.
    let small_below = if p.eager {
        p.max_segment_size
    } else {
        p.max_segment_size / 2
    };
    let mut small: Vec<&PartInfo> = parts
        .iter()
        .filter(|x| bytes(x.live) < small_below)
        .collect();
    small.sort_by_key(|x| (x.slots, x.id));
    let mut run = 0;
    let mut total = 0u64;
    for (i, x) in small.iter().enumerate() {
        if bytes(total + x.slots) > p.max_segment_size {
            break;
        }
        if i >= 1 && (p.eager || total * GROWTH >= x.slots) {
            run = i + 1;
        }
        total += x.slots;
    }
    if run < 2 {
        return None;
    }
    let chosen = &small[..run];
    let flat = chosen.iter().map(|x| x.live).sum::<u64>() < p.index_threshold;
    let base = (p.graph_import && !flat)
        .then(|| {
            chosen
                .iter()
                .filter(|x| !x.flat)
                .max_by_key(|x| (x.slots, x.id))
                .map(|x| x.id)
        })
        .flatten();
    let mut inputs: Vec<u64> = chosen.iter().map(|x| x.id).collect();
    inputs.sort_unstable();
    Some(Plan {
        kind: TaskKind::Merge,
        inputs,
        base,
        flat,
    })
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
}

impl Shared {
    /// Wakes the background threads (new frozen part, commit, request).
    pub fn wake(&self) {
        self.status.lock().wakes += 1;
        self.cv.notify_all();
    }

    pub fn flushed(&self, rows: u64) {
        let mut s = self.status.lock();
        s.stats.flushes += 1;
        s.stats.rows_flushed += rows;
        s.wakes += 1;
        drop(s);
        self.cv.notify_all();
    }

    pub fn stats(&self) -> OptimizerStats {
        self.status.lock().stats.clone()
    }

    pub(super) fn failed(&self, e: &StoreError) {
        let mut s = self.status.lock();
        s.stats.errors += 1;
        s.stats.last_error = Some(e.to_string());
        s.stats.task = None;
        drop(s);
        self.cv.notify_all();
    }

    fn stopping(&self) -> bool {
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
        threads.extend(spawn("sagitta-flush", Box::new(move || flush_loop(&c))));
        let c = inner.clone();
        threads.extend(spawn(
            "sagitta-optimize",
            Box::new(move || optimize_loop(&c)),
        ));
        if let super::Durability::IntervalMs(ms) = inner.config.durability {
            let c = inner.clone();
            threads.extend(spawn(
                "sagitta-wal-sync",
                Box::new(move || sync_loop(&c, Duration::from_millis(ms))),
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

/// Background work: nice `nice` (kept if the thread's is already
/// lower), and sleeps at its step points while searches run
/// ([`sagitta_index::foreground`]).
fn lower_priority(nice: libc::c_int) {
    sagitta_index::foreground::mark_background();
    // SAFETY: getpriority / setpriority with PRIO_PROCESS and a thread id
    // (Linux semantics) only read or change this thread's nice value; no
    // memory is touched.
    #[cfg(target_os = "linux")]
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        if libc::getpriority(libc::PRIO_PROCESS, tid) < nice {
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
    }
}

/// The nice value of background threads while writes arrive (flush,
/// builds of a backlog): the lowest, below the server's ingest threads
/// (nice 10), so searches come first, then acknowledged writes, then
/// background work; not SCHED_IDLE, so a build still progresses under a
/// saturating load.
const BACKGROUND_NICE: libc::c_int = 19;
/// The nice value of builds once writes have paused: level with the
/// server's ingest threads, so that other processes on the machine cannot
/// hold them off for good (at 19 a build gets about 1/70 of a core beside
/// each busy process), while the collection's own searches still come
/// first (at nice 0 builds moved the server's search p99 during a build
/// from 0.60 to 0.73 ms).
const IDLE_NICE: libc::c_int = 10;

fn sync_loop(c: &Inner, every: Duration) {
    let mut seen = 0;
    while !c.opt.stopping() {
        c.opt.wait(&mut seen, every);
        let r = c.writer.lock().as_mut().map_or(Ok(()), |w| w.wal.sync());
        if let Err(e) = r {
            // The log keeps the records and writes them again (see
            // `wal::Unsynced::Keep`); the next sync or write retries.
            c.opt.failed(&e);
        }
    }
}

fn flush_loop(c: &Inner) {
    lower_priority(BACKGROUND_NICE);
    let idle = c.config.idle_seal_ms;
    let tick = Duration::from_millis(if idle > 0 {
        (idle / 2).clamp(10, 1000)
    } else {
        1000
    });
    let mut seen = 0;
    while !c.opt.stopping() {
        c.opt.wait(&mut seen, tick);
        if c.opt.stopping() {
            return;
        }
        let mut r = c.flush_frozen();
        if r.is_ok() && idle > 0 {
            let st = c.snapshot();
            let quiet = c
                .now_ms()
                .saturating_sub(c.last_write.load(Ordering::Acquire))
                >= idle;
            if quiet && (st.active.slot_count() > 0 || c.log_pending()) {
                r = c
                    .freeze_now()
                    .and_then(|()| c.flush_frozen())
                    .and_then(|()| c.checkpoint());
            }
        }
        if let Err(e) = r {
            c.opt.failed(&e);
            c.opt.wait(&mut seen, RETRY);
        }
    }
}

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
struct Pools {
    background: LazyPool,
    idle: LazyPool,
    waited: LazyPool,
}

impl Pools {
    /// Runs `f` on the pool for now ([`Inner::build_priority`]). A task is
    /// made of such steps (each chunk of inserts, writing the file, the
    /// commit), so a task begun in the background moves over at its next
    /// step.
    fn install<R: Send>(&self, c: &Inner, f: impl FnOnce() -> R + Send) -> R {
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
struct LazyPool {
    name: &'static str,
    nice: Option<libc::c_int>,
    threads: usize,
    pool: std::sync::OnceLock<Option<sagitta_index::threads::JoinedPool>>,
}

impl LazyPool {
    fn new(name: &'static str, nice: Option<libc::c_int>, threads: usize) -> LazyPool {
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
                        Some(n) => lower_priority(n),
                        // Still gives way to searches at its step points.
                        None => sagitta_index::foreground::mark_background(),
                    });
                sagitta_index::threads::JoinedPool::build(b).ok()
            })
            .as_deref()
    }
}

/// Which pool the optimizer's next step runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// Writes arrive: nice 19.
    Background,
    /// Writes have paused ([`DEFER_MS`]): nice 10.
    Idle,
    /// A caller waits in `optimize()` / `compact()`: the opener's.
    Waited,
}

fn optimize_loop(c: &Inner) {
    let n = c.config.build_threads();
    let pools = Pools {
        background: LazyPool::new("build", Some(BACKGROUND_NICE), n),
        idle: LazyPool::new("idle", Some(IDLE_NICE), n),
        waited: LazyPool::new("urgent", None, n),
    };
    optimize_with(c, &pools);
    // Dropping the pools joins their threads, so a closed collection
    // leaves no build thread behind.
    drop(pools);
}

fn optimize_with(c: &Inner, pools: &Pools) {
    // This thread plans, copies a task's rows and hands each other step to
    // a pool, at the opener's priority: at nice 19 on a busy machine every
    // hand-back waited for a time slice (optimize() beside two CPU-bound
    // processes took 3.5 times as long as alone, where the pools' share of
    // the cores accounts for 2).
    sagitta_index::foreground::mark_background();
    let mut seen = 0;
    let mut first = true;
    while !c.opt.stopping() {
        if !first {
            c.opt.wait(&mut seen, Duration::from_secs(5));
        }
        first = false;
        if c.opt.stopping() {
            return;
        }
        // This look's number, taken before the snapshot: a caller that
        // asked before it can trust what it finds.
        let (look, force, urgent) = {
            let mut s = c.opt.status.lock();
            s.checks += 1;
            (s.checks, s.force, s.force || s.waiters > 0)
        };
        let st = c.snapshot();
        let parts = infos(c, &st);
        let quiet = c
            .now_ms()
            .saturating_sub(c.last_write.load(Ordering::Acquire));
        // Someone waits in `optimize()` / `compact()`, or writes paused.
        let eager = urgent || quiet >= eager_quiet_ms(&parts, c.config.bytes_per_vector());
        let next = plan(&parts, &policy(c, force, eager));
        if let (Some(p), false) = (&next, urgent) {
            let backlog: u64 = parts
                .iter()
                .filter(|x| !x.built)
                .map(|x| x.live)
                .sum::<u64>()
                + st.frozen().map(|x| x.live_len() as u64).sum::<u64>();
            if p.kind != TaskKind::Compact
                && quiet < DEFER_MS
                && backlog < BACKLOG_PARTS * c.config.rows_per_segment()
                && st.parts.len() <= MAX_DEFERRED_SEGMENTS
            {
                c.opt.status.lock().stats.deferred = Some(p.kind.name().into());
                c.opt
                    .wait(&mut seen, Duration::from_millis(DEFER_MS - quiet));
                first = true; // look again at once
                continue;
            }
        }
        let Some(p) = next else {
            // A merge that waits for writes to pause: looked at again
            // after the usual wait.
            let later = (!eager)
                .then(|| plan(&parts, &policy(c, force, true)))
                .flatten();
            let mut s = c.opt.status.lock();
            let was_idle = std::mem::replace(&mut s.stats.idle, true);
            s.stats.deferred = later.map(|p| p.kind.name().into());
            if st.frozen().next().is_none() {
                s.settled_at = look;
                if force {
                    s.force = false;
                }
            }
            drop(s);
            c.opt.cv.notify_all();
            if !was_idle {
                // Falling idle: what flushes and tasks freed goes back to
                // the system before the collection goes quiet.
                crate::trim::release_free_memory();
            }
            continue;
        };
        {
            let mut s = c.opt.status.lock();
            s.stats.idle = false;
            s.stats.deferred = None;
            s.stats.task = Some(p.kind.name().into());
            s.stats.task_rows_done = 0;
            s.stats.task_rows_total = 0;
        }
        // What the flushes freed (mutable parts' rows and text indexes)
        // goes back before the task allocates its index.
        crate::trim::release_free_memory();
        match run(c, &st, &p, pools) {
            Ok(rows) => {
                // The task's index, rows and payload are freed by now.
                crate::trim::release_free_memory();
                let mut s = c.opt.status.lock();
                s.stats.tasks_done += 1;
                s.stats.rows_indexed += rows;
                s.stats.task = None;
                s.wakes += 1;
                seen = s.wakes;
                // More may be planned at once (the next unbuilt segment):
                // look again without waiting for a wake-up.
                first = true;
            }
            Err(_) if c.opt.stopping() => return,
            Err(e) => {
                c.opt.failed(&e);
                c.opt.wait(&mut seen, RETRY);
            }
        }
        c.opt.cv.notify_all();
    }
}

/// How long writes must have paused before an eager merge: the
/// [`EAGER_QUIET_MS`] floor, or the time to rewrite the largest segment at
/// [`EAGER_REWRITE_BYTES_PER_S`].
fn eager_quiet_ms(parts: &[PartInfo], bytes_per_vector: u64) -> u64 {
    let largest = parts.iter().map(|x| x.slots).max().unwrap_or(0);
    let rewrite = largest
        .saturating_mul(bytes_per_vector)
        .saturating_mul(1000)
        / EAGER_REWRITE_BYTES_PER_S;
    rewrite.max(EAGER_QUIET_MS)
}

fn policy(c: &Inner, force: bool, eager: bool) -> Policy {
    Policy {
        bytes_per_vector: c.config.bytes_per_vector(),
        max_segment_size: c.config.max_segment_size,
        graph_import: c.config.kind == IndexKind::Hnsw,
        dead_ratio: if force { 0.0 } else { 0.2 },
        index_threshold: c.config.index_threshold_rows(),
        eager,
    }
}

fn infos(c: &Inner, st: &State) -> Vec<PartInfo> {
    st.parts
        .iter()
        .filter(|p| !p.is_frozen())
        .map(|p| {
            let live = p.live_len() as u64;
            let flat = c.config.stays_flat(p.kind(), live);
            PartInfo {
                id: p.id,
                slots: p.slot_count() as u64,
                live,
                built: c.config.is_built(p.kind()) || flat,
                flat,
            }
        })
        .collect()
}

/// Executes `p` on the parts of `st`; returns the rows inserted.
fn run(c: &Inner, st: &State, p: &Plan, pools: &Pools) -> Result<u64> {
    let inputs: Vec<Arc<Part>> = p
        .inputs
        .iter()
        .filter_map(|id| {
            st.parts
                .iter()
                .find(|x| x.id == *id && !x.is_frozen())
                .cloned()
        })
        .collect();
    if inputs.len() != p.inputs.len() {
        return Ok(0);
    }
    let dead0: Vec<Arc<Dead>> = inputs.iter().map(|x| x.dead()).collect();
    let base = p.base.and_then(|b| inputs.iter().position(|x| x.id == b));
    // Only a graph stored the way built segments are can be imported.
    let built = c.config.built_space();
    let base = base.filter(|&b| {
        !p.flat
            && inputs[b]
                .segment()
                .is_some_and(|s| s.info().space == built && s.info().kind == IndexKind::Hnsw)
    });
    // Rows in the collection's space (f32 rows where built segments keep
    // them beside codes): copied as stored, or, into an index keeping full
    // rows beside codes, encoded like user vectors. The inputs are
    // immutable, so the live rows are listed once (keys and where each
    // is) and copied a chunk at a time as they are inserted: the task
    // holds one chunk of rows besides the index it builds, not a second
    // copy of every row.
    let stride = c.config.space.stride();
    // Built segments that keep full-precision rows beside codes: the graph
    // is built over the codes, so the index holds codes only and the rows
    // go from the inputs straight into the new file (no second copy of
    // every row in memory).
    let full = c.config.keeps_full() && !p.flat;
    let (mut keys, mut origin) = (Vec::new(), Vec::new());
    for (i, x) in inputs.iter().enumerate() {
        if Some(i) != base {
            x.for_each_live(|slot, key, _| {
                keys.push(key);
                origin.push((i, slot));
            });
        }
    }
    let index = pools.install(c, || -> Result<Index> {
        let index = match base.and_then(|b| inputs[b].segment().map(|s| (b, s))) {
            Some((b, seg)) => {
                let dead = &dead0[b];
                let import = if full {
                    Index::from_graph_codes
                } else {
                    Index::from_graph
                };
                import(
                    c.config.built_space(),
                    c.build_hnsw(),
                    seg,
                    &|slot| dead.keys.is_empty() || !dead.keys.contains(&seg.key(slot)),
                    keys.len(),
                )?
            }
            None if p.flat => Index::flat(c.config.space)?,
            None if full => Index::new(c.config.built_space(), c.config.kind, c.build_hnsw())?,
            None => c.config.sealed_index_with(c.build_hnsw())?,
        };
        // Sized once for every row: no capacity doubling (a copy of all
        // that is built so far, both held at once) and no slack past it.
        index.reserve(keys.len())?;
        Ok(index)
    })?;
    c.opt.status.lock().stats.task_rows_total = keys.len() as u64;
    // The copy runs on this thread (at its priority: a copy begun on the
    // background pool kept a caller who came meanwhile waiting seconds).
    let mut chunk = Vec::new();
    if c.config.kind == IndexKind::IvfRq {
        // Trained on all of its rows at once.
        copy_rows(&inputs, &origin, stride, &mut chunk);
        pools.install(c, || index.upsert_encoded_batch(&keys, &chunk, 0))?;
    } else {
        let mut at = 0;
        while at < keys.len() {
            if c.opt.stopping() {
                return Err(StoreError::Optimizer("stopped".into()));
            }
            let step = if c.build_priority() != Priority::Background {
                CHUNK
            } else {
                BACKGROUND_CHUNK
            };
            let end = (at + step).min(keys.len());
            copy_rows(&inputs, &origin[at..end], stride, &mut chunk);
            pools.install(c, || {
                if full {
                    index.upsert_f32_rows(&keys[at..end], &chunk, stride, 0)
                } else {
                    index.upsert_encoded_batch(&keys[at..end], &chunk, 0)
                }
            })?;
            c.opt.progress(end as u64);
            at = end;
        }
    }
    drop(chunk);
    let rows = keys.len() as u64;
    let id = c.next_id.fetch_add(1, Ordering::AcqRel);
    let out = if index.is_empty() {
        None
    } else {
        let written = pools.install(c, || {
            write(c, &index, &inputs, base, &keys, origin, full, id)
        })?;
        Some(written)
    };
    let carry: Vec<(Arc<Part>, Arc<Dead>)> = inputs.iter().cloned().zip(dead0).collect();
    pools.install(c, || {
        c.commit(
            Change {
                remove: p.inputs.clone(),
                add: out.into_iter().collect(),
                wal_seq: None,
                what: Some(p.kind.name()),
            },
            &carry,
        )
    })?;
    Ok(rows)
}

/// The first `stride` bytes of the rows at `at` (input, slot) into `out`
/// (cleared first), in order.
fn copy_rows(inputs: &[Arc<Part>], at: &[(usize, u32)], stride: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(at.len() * stride);
    let mut i = 0;
    while i < at.len() {
        // One view per run of rows from the same input.
        let part = at[i].0;
        let run = at[i..].iter().take_while(|(p, _)| *p == part).count();
        inputs[part].with_view(|g| {
            for &(_, slot) in &at[i..i + run] {
                let row = g.full(slot).unwrap_or_else(|| g.vector(slot));
                out.extend_from_slice(&row[..stride]);
            }
        });
        i += run;
    }
}

/// Writes a task's segment file (vectors, payload, text; with `full`,
/// the full-precision rows read from the inputs) as part `id` and opens
/// it.
#[allow(clippy::too_many_arguments)]
fn write(
    c: &Inner,
    index: &Index,
    inputs: &[Arc<Part>],
    base: Option<usize>,
    keys: &[u64],
    origin: Vec<(usize, u32)>,
    full: bool,
    id: u64,
) -> Result<Arc<Part>> {
    let file = segment_file(id);
    let path = c.dir.join(&file);
    let schema = c.schema.read().clone();
    let from = Origins {
        base,
        base_slots: base.map_or(0, |b| inputs[b].slot_count()),
        of_key: keys.iter().copied().zip(origin).collect(),
    };
    let failure: RefCell<Option<StoreError>> = RefCell::new(None);
    let batch = c.payload_batch(index, |key, slot| {
        let (i, s) = from.of(key, slot)?;
        match inputs[i].payload_row(&schema, s) {
            Ok(r) => (!r.is_empty()).then_some(r),
            Err(e) => {
                failure.borrow_mut().get_or_insert(e);
                None
            }
        }
    })?;
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let specs = c.config.text_fields();
    let mut w = SegmentWriter::new(index).text(&specs);
    if let Some((schema, b)) = &batch {
        w = w.payload(schema, b);
    }
    if full {
        // Each slot's row as its input keeps it: a built input's full row,
        // an unbuilt one's stored row (the collection's f32 space).
        let stride = c.config.space.stride();
        let need = c.config.space.dims * 4;
        let rows = |slot: u32, key: u64, put: &mut dyn FnMut(&[u8]) -> Result<()>| match from
            .of(key, slot)
        {
            Some((i, s)) => inputs[i].with_view(|g| {
                let r = g.full(s).unwrap_or_else(|| g.vector(s));
                // Never codes taken for a row (an input without f32 rows).
                if r.len() < need {
                    return Err(StoreError::Optimizer(format!(
                        "input part {}: slot {s} has no f32 row to write",
                        inputs[i].id
                    )));
                }
                put(&r[..stride.min(r.len())])
            }),
            None => Ok(()),
        };
        if let Some(section) = merged_text(index, inputs, &from, &specs) {
            w = w.text_section(section);
        }
        w.full_rows(&rows).write(&path)?;
        let seg = super::commit::open_written(&path)?;
        return Ok(Arc::new(Part::new(id, Body::Sealed { file, seg })));
    }
    if let Some(section) = merged_text(index, inputs, &from, &specs) {
        w = w.text_section(section);
    }
    w.write(&path)?;
    let seg = super::commit::open_written(&path)?;
    Ok(Arc::new(Part::new(id, Body::Sealed { file, seg })))
}

/// Where each row of a task's new segment comes from: its input and slot
/// there.
struct Origins {
    /// The input whose graph was imported (its rows keep their slots).
    base: Option<usize>,
    base_slots: usize,
    /// The other inputs' rows, by key.
    of_key: HashMap<u64, (usize, u32)>,
}

impl Origins {
    /// The (input, slot) of the new segment's row `slot` holding `key`.
    fn of(&self, key: u64, slot: u32) -> Option<(usize, u32)> {
        match (self.base, self.of_key.get(&key)) {
            (_, Some(&o)) => Some(o),
            (Some(b), None) if (slot as usize) < self.base_slots => Some((b, slot)),
            _ => None,
        }
    }
}

/// The new segment's text section merged from its inputs' sections
/// (`sagitta_text::merge`): no text analysed again, and only the section
/// itself held, not an inverted index of every row in hash maps. `None`
/// (the texts are then analysed from the payload) when the collection has
/// no text fields, an input is not a segment with a section of those
/// fields and analyzers, or a section cannot be read (the payload is the
/// source the section is rebuilt from).
fn merged_text(
    index: &Index,
    inputs: &[Arc<Part>],
    from: &Origins,
    specs: &[sagitta_text::TextFieldSpec],
) -> Option<Vec<u8>> {
    if specs.is_empty() {
        return None;
    }
    let sections: Vec<sagitta_text::TextSection<'_>> = inputs
        .iter()
        .map(|p| p.segment()?.text().ok().flatten())
        .collect::<Option<_>>()?;
    let view = index.view();
    let mut remaps: Vec<Vec<u32>> = inputs
        .iter()
        .map(|p| vec![sagitta_text::merge::DROPPED; p.slot_count()])
        .collect();
    for slot in 0..view.slots() as u32 {
        if !view.is_live(slot) {
            continue;
        }
        if let Some((i, s)) = from.of(view.key(slot), slot) {
            if let Some(r) = remaps[i].get_mut(s as usize) {
                *r = slot;
            }
        }
    }
    let nslots = view.slots() as u32;
    drop(view);
    let refs: Vec<&sagitta_text::TextSection<'_>> = sections.iter().collect();
    let rm: Vec<&[u32]> = remaps.iter().map(Vec::as_slice).collect();
    sagitta_text::merge::merge(&refs, &rm, specs, nslots)
        .ok()
        .flatten()
}

impl Inner {
    /// The HNSW parameters of graphs built now (the config's, with
    /// `ef_construction` as [`super::Collection::set_expansion_add`] left
    /// it).
    fn build_hnsw(&self) -> sagitta_index::HnswParams {
        sagitta_index::HnswParams {
            ef_construction: self.build_ef.load(Ordering::Relaxed),
            ..self.config.hnsw
        }
    }

    /// The pool the optimizer's next step runs on: the opener's priority
    /// while a caller waits in `optimize()` / `compact()`, nice 10 once
    /// writes have paused ([`DEFER_MS`]), else nice 19. Every pool pauses
    /// while searches run (`sagitta_index::foreground`).
    fn build_priority(&self) -> Priority {
        if self.opt.waited_for() {
            Priority::Waited
        } else if self
            .now_ms()
            .saturating_sub(self.last_write.load(Ordering::Acquire))
            >= DEFER_MS
        {
            Priority::Idle
        } else {
            Priority::Background
        }
    }

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn part(id: u64, slots: u64, live: u64, built: bool) -> PartInfo {
        PartInfo {
            id,
            slots,
            live,
            built,
            flat: false,
        }
    }

    /// A Flat segment settled without a graph.
    fn flat(id: u64, rows: u64) -> PartInfo {
        PartInfo {
            built: true,
            flat: true,
            ..part(id, rows, rows, true)
        }
    }

    fn pol() -> Policy {
        Policy {
            bytes_per_vector: 1,
            max_segment_size: 1000,
            graph_import: true,
            dead_ratio: 0.2,
            index_threshold: 0,
            eager: false,
        }
    }

    #[test]
    fn small_segments_stay_flat_and_merge_into_flat_or_built_ones() {
        let p = Policy {
            index_threshold: 100,
            ..pol()
        };
        // Settled flat segments alone: nothing to build.
        assert_eq!(plan(&[flat(1, 60)], &p), None);
        // Two of them merge, into a Flat segment while under the threshold...
        let m = plan(&[flat(1, 30), flat(2, 40)], &p).unwrap();
        assert_eq!((m.kind, m.flat, m.base), (TaskKind::Merge, true, None));
        // ...and into an indexed one past it, built from scratch (a flat
        // segment has no graph to import).
        let m = plan(&[flat(1, 60), flat(2, 70)], &p).unwrap();
        assert_eq!((m.kind, m.flat, m.base), (TaskKind::Merge, false, None));
        // With a built segment, its graph is the base.
        let m = plan(&[part(1, 300, 300, true), flat(2, 60)], &p).unwrap();
        assert_eq!((m.flat, m.base), (false, Some(1)));
        // Unbuilt segments are never imported into a flat one.
        let b = plan(&[flat(1, 90), part(2, 200, 200, false)], &p).unwrap();
        assert_eq!((b.kind, b.base, b.flat), (TaskKind::Build, None, false));
        // A flat segment with dead rows is rewritten flat.
        let dead = PartInfo {
            live: 40,
            ..flat(1, 60)
        };
        let c = plan(&[dead], &p).unwrap();
        assert_eq!((c.kind, c.flat), (TaskKind::Compact, true));
    }

    #[test]
    fn settled_when_nothing_to_do() {
        assert_eq!(plan(&[], &pol()), None);
        assert_eq!(plan(&[part(1, 900, 900, true)], &pol()), None);
        // two big ones that do not fit together
        assert_eq!(
            plan(&[part(1, 600, 600, true), part(2, 600, 600, true)], &pol()),
            None
        );
    }

    #[test]
    fn unbuilt_goes_into_the_largest_built_segment_with_room() {
        let parts = [
            part(1, 300, 300, true),
            part(2, 500, 500, true),
            part(3, 100, 100, false),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(p.kind, TaskKind::Build);
        assert_eq!(p.base, Some(2));
        assert_eq!(p.inputs, vec![2, 3]);
        // no room anywhere: built alone
        let parts = [part(1, 950, 950, true), part(3, 100, 100, false)];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!((p.base, p.inputs.clone()), (None, vec![3]));
        // without graph import (IVF): built alone
        let p = plan(
            &parts,
            &Policy {
                graph_import: false,
                ..pol()
            },
        )
        .unwrap();
        assert_eq!((p.base, p.inputs), (None, vec![3]));
    }

    #[test]
    fn unbuilt_segments_batch_up_to_the_maximum() {
        let parts = [
            part(1, 400, 400, false),
            part(2, 400, 390, false),
            part(3, 400, 400, false),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(
            (p.kind, p.base, p.inputs),
            (TaskKind::Build, None, vec![1, 2])
        );
        // one larger than the maximum still gets built
        let p = plan(&[part(1, 5000, 5000, false)], &pol()).unwrap();
        assert_eq!(p.inputs, vec![1]);
    }

    #[test]
    fn dead_rows_past_the_ratio_are_compacted_first() {
        let parts = [part(1, 100, 70, true), part(2, 100, 100, false)];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!((p.kind, p.inputs), (TaskKind::Compact, vec![1]));
        let parts = [part(1, 100, 90, true)];
        assert_eq!(plan(&parts, &pol()), None);
        let forced = Policy {
            dead_ratio: 0.0,
            ..pol()
        };
        assert_eq!(plan(&parts, &forced).unwrap().kind, TaskKind::Compact);
        // a compacted segment is not compacted again
        assert_eq!(plan(&[part(1, 90, 90, true)], &forced), None);
    }

    #[test]
    fn eager_merges_a_small_tail_into_the_largest_segment() {
        // A bulk load's large segment and its small tail: too small to
        // merge while writes go on...
        let parts = [part(1, 900, 900, true), part(2, 30, 30, true)];
        assert_eq!(plan(&parts, &pol()), None);
        // ...merged into it (its graph imported) once they pause.
        let eager = Policy {
            eager: true,
            ..pol()
        };
        let m = plan(&parts, &eager).unwrap();
        assert_eq!(
            (m.kind, m.base, m.inputs),
            (TaskKind::Merge, Some(1), vec![1, 2])
        );
        // An unbuilt tail is built into it directly.
        let parts = [part(1, 900, 900, true), part(2, 30, 30, false)];
        let b = plan(&parts, &pol()).unwrap();
        assert_eq!((b.base, b.inputs), (None, vec![2]));
        let b = plan(&parts, &eager).unwrap();
        assert_eq!(
            (b.kind, b.base, b.inputs),
            (TaskKind::Build, Some(1), vec![1, 2])
        );
        // Never past the maximum.
        assert_eq!(
            plan(&[part(1, 990, 990, true), part(2, 30, 30, true)], &eager),
            None
        );
        // A settled single segment stays as it is.
        assert_eq!(plan(&[part(1, 900, 900, true)], &eager), None);
    }

    #[test]
    fn eager_quiet_time_grows_with_the_largest_segment() {
        assert_eq!(eager_quiet_ms(&[], 2048), EAGER_QUIET_MS);
        assert_eq!(
            eager_quiet_ms(&[part(1, 100, 100, true)], 2048),
            EAGER_QUIET_MS
        );
        // 1 GiB to rewrite at 16 MiB/s: 64 s.
        let big = part(1, 1 << 20, 1 << 20, true);
        assert_eq!(eager_quiet_ms(&[big, part(2, 10, 10, true)], 1024), 64_000);
    }

    #[test]
    fn small_segments_merge_into_the_largest() {
        let parts = [
            part(1, 100, 100, true),
            part(2, 700, 700, true),
            part(3, 200, 200, true),
            part(4, 50, 50, true),
        ];
        let p = plan(&parts, &pol()).unwrap();
        assert_eq!(p.kind, TaskKind::Merge);
        assert_eq!(p.inputs, vec![1, 3, 4]);
        assert_eq!(p.base, Some(3));
    }

    #[test]
    fn trickled_rows_do_not_rewrite_a_big_segment_each_time() {
        // One row flushed at a time next to a big built segment: built as
        // a segment of its own, then small ones merge among themselves, and
        // only a run of 1/8 of the big one's size goes into it.
        let big = part(1, 400, 400, true);
        let p = plan(&[big, part(2, 1, 1, false)], &pol()).unwrap();
        assert_eq!((p.base, p.inputs), (None, vec![2]));
        let p = plan(&[big, part(2, 1, 1, true), part(3, 1, 1, true)], &pol()).unwrap();
        assert_eq!((p.kind, p.inputs), (TaskKind::Merge, vec![2, 3]));
        assert_eq!(plan(&[big, part(2, 40, 40, true)], &pol()), None);
        let p = plan(&[big, part(2, 50, 50, true)], &pol()).unwrap();
        assert_eq!((p.base, p.inputs), (Some(1), vec![1, 2]));
        // Simulated trickle: every row is rewritten a bounded number of
        // times (here 1000 rows one at a time).
        let mut parts = vec![big];
        let (mut next, mut rewritten) = (10u64, 0u64);
        for _ in 0..1000 {
            parts.push(part(next, 1, 1, false));
            next += 1;
            while let Some(pl) = plan(&parts, &pol()) {
                let rows: u64 = parts
                    .iter()
                    .filter(|x| pl.inputs.contains(&x.id))
                    .map(|x| x.live)
                    .sum();
                rewritten += rows;
                parts.retain(|x| !pl.inputs.contains(&x.id));
                parts.push(part(next, rows, rows, true));
                next += 1;
            }
        }
        assert!(
            rewritten < 1400 * 12,
            "{rewritten} row rewrites for 1400 rows"
        );
        assert!(parts.len() <= 12, "{parts:?}");
    }

    #[test]
    fn repeated_planning_terminates() {
        for eager in [false, true] {
            planning_terminates(Policy { eager, ..pol() });
        }
    }

    fn planning_terminates(pol: Policy) {
        let pol = || pol;
        // Simulate: apply each plan, then plan again.
        let mut parts: Vec<PartInfo> = (1..=40)
            .map(|i| part(i, 37 + i % 5, 37 + i % 5, i % 3 != 0))
            .collect();
        parts.push(part(41, 100, 10, true));
        for next_id in 100..300 {
            let Some(p) = plan(&parts, &pol()) else {
                break;
            };
            let live: u64 = parts
                .iter()
                .filter(|x| p.inputs.contains(&x.id))
                .map(|x| x.live)
                .sum();
            parts.retain(|x| !p.inputs.contains(&x.id));
            parts.push(part(next_id, live, live, true));
        }
        assert_eq!(plan(&parts, &pol()), None, "{parts:?}");
        assert!(parts.iter().all(|x| x.built && x.slots == x.live));
        let total: u64 = parts.iter().map(|x| x.live).sum();
        assert!(parts.len() as u64 <= total / 500 + 2, "{parts:?}");
        if pol().eager {
            // Eager: no two segments that fit in one are left apart.
            let mut sizes: Vec<u64> = parts.iter().map(|x| x.slots).collect();
            sizes.sort_unstable();
            let max = pol().max_segment_size;
            assert!(sizes.len() < 2 || sizes[0] + sizes[1] > max, "{parts:?}");
        }
    }
}
