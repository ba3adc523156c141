//! The optimizer's threads: the WAL sync loop (interval durability),
//! the flush loop (frozen parts to Flat segment files; idle parts sealed)
//! and the optimize loop, which asks the policy for the next task, defers
//! it while writes arrive, runs it (`run.rs`) on a build pool
//! (`pools.rs`), and tells waiters when the collection has settled.

use super::super::commit::wants_fold;
use super::super::{Inner, State};
use super::policy::{self, defer, eager_quiet_ms, plan, PartInfo, Policy};
use super::pools::{LazyPool, Pools, BACKGROUND_NICE, FLUSH_NICE, IDLE_NICE};
use super::run::run;
use super::RETRY;
use sagitta_index::sched::priority;
use sagitta_index::{IndexKind, IndexRead};
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(super) fn sync_loop(c: &Inner, every: Duration) {
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

pub(super) fn flush_loop(c: &Inner) {
    // Above the builds: a flush that falls behind paces every writer
    // (at nice 19 beside two nice-19 build threads it got a third of a
    // core, and a bulk load slept a quarter of its time in pacing).
    priority::background(FLUSH_NICE);
    let idle = c.config.idle_seal_ms;
    let tick = policy::flush_tick(idle);
    let mut seen = 0;
    while !c.opt.stopping() {
        c.opt.wait(&mut seen, tick);
        if c.opt.stopping() {
            return;
        }
        let mut r = c.flush_frozen();
        if r.is_ok() && idle > 0 {
            let st = c.snapshot();
            let quiet = c.quiet_ms() >= idle;
            if quiet && (st.active.slot_count() > 0 || c.log_pending()) {
                r = c
                    .freeze_now()
                    .and_then(|()| c.flush_frozen())
                    .and_then(|()| c.checkpoint());
            }
        }
        match r {
            Ok(()) => c.opt.flush_ok(),
            Err(e) => {
                c.opt.flush_failed(&e);
                c.opt.wait(&mut seen, RETRY);
            }
        }
    }
}

/// Folds the bloom filter's chain when a commit asks
/// ([`Inner::fold_bloom`]), on its own thread: behind the optimizer's
/// builds (minutes each under a bulk load) the chain grew to five filters
/// and every write and lookup probed them all. At the builds' priority
/// while writes arrive: at the flush's, the fold of 100M keys took the
/// flush's core and paced the writer.
pub(super) fn bloom_loop(c: &Inner) {
    priority::background(BACKGROUND_NICE);
    let mut seen = 0;
    while !c.opt.stopping() {
        c.opt.wait(&mut seen, Duration::from_secs(5));
        // Asked again while a fold ran (its filter was not swapped in
        // yet): only folded again if the new filter wants it too.
        if c.bloom_fold.swap(false, Ordering::AcqRel)
            && !c.opt.stopping()
            && wants_fold(&c.bloom.read())
        {
            c.fold_bloom();
        }
    }
}

pub(super) fn optimize_loop(c: &Inner) {
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
    sagitta_index::sched::foreground::mark_background();
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
        let quiet = c.quiet_ms();
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
            if defer(
                p.kind,
                quiet,
                backlog,
                c.config.rows_per_segment(),
                st.parts.len(),
            ) {
                c.opt.status.lock().stats.deferred = Some(p.kind.name().into());
                c.opt
                    .wait(&mut seen, Duration::from_millis(policy::DEFER_MS - quiet));
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
