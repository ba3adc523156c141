//! Search over any HNSW graph, in memory or memory-mapped.
//!
//! The routines here see a graph only through [`GraphView`] and vectors only
//! as storage bytes compared by a [`Distance`], so the same code serves the
//! mutable in-memory index, sealed segments and, later, quantized storage.
//!
//! Filtering: a filter says which slots may be *returned*; it never prunes
//! traversal. Filtered-out and tombstoned nodes are still expanded, so the
//! graph stays connected however selective the filter is (the beam simply
//! keeps going until `ef` accepted results are found).

use crate::scratch::Scratch;
use crate::topk::{Cand, KeyedCand, Neighbor};
use crate::view::GraphView;
use crate::Bitset;
use sagitta_kernels::{prefetch, Distance};
use std::cmp::{Ordering, Reverse};

/// Greedy walk on one level from `ep` towards `q`.
pub(crate) fn greedy<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    mut ep: Cand,
    level: usize,
    neigh: &mut Vec<u32>,
) -> Cand {
    loop {
        let mut improved = false;
        g.neighbors(level, ep.slot, neigh);
        for &n in neigh.iter() {
            let d = dist.eval(q, g.vector(n));
            if d < ep.dist {
                ep = Cand { dist: d, slot: n };
                improved = true;
            }
        }
        if !improved {
            return ep;
        }
    }
}

/// How many neighbours ahead of the distance computation vectors are
/// prefetched (measured on debian-minilm: 2 and 8 are slower than 4).
const PREFETCH_AHEAD: usize = 4;

/// Prefetches every cache line of a stored vector.
#[inline]
fn prefetch_vector(v: &[u8]) {
    for line in v.chunks(64) {
        prefetch(line.as_ptr());
    }
}

#[allow(clippy::too_many_arguments)]
/// Beam search on one level. Leaves up to `ef` accepted candidates in
/// `s.results` (a max-heap). Every reached node is expanded; only nodes
/// for which `accept` holds enter the results.
pub(crate) fn search_layer<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    eps: &[Cand],
    ef: usize,
    level: usize,
    s: &mut Scratch,
    accept: impl Fn(u32) -> bool,
) {
    s.reset(g.slots());
    let batched = dist.batches_each();
    for &ep in eps {
        if s.visit(ep.slot) {
            s.candidates.push(Reverse(ep));
            if accept(ep.slot) {
                s.results.push(ep);
            }
        }
    }
    let mut neigh = std::mem::take(&mut s.neighbors);
    while let Some(Reverse(c)) = s.candidates.pop() {
        if s.results.len() >= ef && s.results.peek().is_some_and(|w| c.dist > w.dist) {
            break;
        }
        g.neighbors(level, c.slot, &mut neigh);
        // Keep only the unvisited neighbours, then stream their vectors in
        // ahead of the distance computations (whole vectors, a few
        // neighbours ahead): the search is bound by memory latency.
        s.keep_unvisited(&mut neigh);
        // The next candidate's list is needed as soon as this one is done.
        if let Some(Reverse(next)) = s.candidates.peek() {
            g.prefetch_links(level, next.slot);
        }
        if batched {
            // Short codes: every vector in flight at once, then one kernel
            // call per EACH neighbours (a pair costs about a call).
            for &n in neigh.iter() {
                prefetch_vector(g.vector(n));
            }
            for chunk in neigh.chunks(EACH) {
                let d = eval_chunk(g, dist, q, chunk);
                for (&n, &d) in chunk.iter().zip(&d) {
                    if offer(s, ef, &accept, n, d) {
                        // Most candidates get expanded, and short codes
                        // leave the memory system idle: their lists start
                        // coming in now.
                        g.prefetch_links(level, n);
                    }
                }
            }
            continue;
        }
        for &n in neigh.iter().take(PREFETCH_AHEAD) {
            prefetch_vector(g.vector(n));
        }
        for (i, &n) in neigh.iter().enumerate() {
            if let Some(&next) = neigh.get(i + PREFETCH_AHEAD) {
                prefetch_vector(g.vector(next));
            }
            let d = dist.eval(q, g.vector(n));
            offer(s, ef, &accept, n, d);
        }
    }
    s.neighbors = neigh;
}

/// Neighbours scored per [`Distance::eval_each`] call in a batched walk.
const EACH: usize = 8;

/// Distances from `q` to the vectors of up to [`EACH`] slots, in one
/// [`Distance::eval_each`] call (entries past `slots.len()` are unused).
#[inline]
fn eval_chunk<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    slots: &[u32],
) -> [f32; EACH] {
    let mut rows: [&[u8]; EACH] = [&[]; EACH];
    for (r, &n) in rows.iter_mut().zip(slots) {
        *r = g.vector(n);
    }
    let mut d = [0f32; EACH];
    dist.eval_each(q, &rows[..slots.len().min(EACH)], &mut d);
    d
}

/// Distances from `q` to the vectors of `slots` into `out` (one batch
/// kernel call per [`EACH`] slots where the distance batches).
pub(crate) fn eval_slots<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    slots: &[u32],
    out: &mut Vec<f32>,
) {
    out.clear();
    if dist.batches_each() {
        for chunk in slots.chunks(EACH) {
            out.extend_from_slice(&eval_chunk(g, dist, q, chunk)[..chunk.len()]);
        }
    } else {
        out.extend(slots.iter().map(|&n| dist.eval(q, g.vector(n))));
    }
}

/// A scored neighbour enters the beam when the results are not full or it
/// beats the worst of them (returns whether it did); it becomes a result
/// only when `accept` holds.
#[inline(always)]
fn offer(s: &mut Scratch, ef: usize, accept: &impl Fn(u32) -> bool, n: u32, d: f32) -> bool {
    let full = s.results.len() >= ef;
    if full && s.results.peek().is_some_and(|w| d >= w.dist) {
        return false;
    }
    let cand = Cand { dist: d, slot: n };
    s.candidates.push(Reverse(cand));
    if accept(n) {
        if !full {
            s.results.push(cand);
        } else if let Some(mut worst) = s.results.peek_mut() {
            // The new one takes the worst one's place (one sift down
            // instead of a push and a pop).
            *worst = cand;
        }
    }
    true
}

/// Full-precision re-scoring: the f32 distance and the f32 query (unit
/// length under cosine), compared with [`GraphView::full`] rows.
#[derive(Clone, Copy)]
pub(crate) struct Full<'a> {
    pub dist: &'a Distance,
    pub query: &'a [u8],
}

/// k nearest live (and allowed) neighbours by graph search. With `full`,
/// the best `rerank` results of the beam (by stored-code distance) are
/// re-scored from full-precision rows and the best `k` of those returned.
#[allow(clippy::too_many_arguments)]
pub(crate) fn knn<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    ef: usize,
    filter: Option<&Bitset>,
    full: Option<(Full<'_>, usize)>,
    s: &mut Scratch,
) -> Vec<Neighbor> {
    let Some((ep, top)) = g.entry_point() else {
        return Vec::new();
    };
    let mut cur = Cand {
        dist: dist.eval(q, g.vector(ep)),
        slot: ep,
    };
    let mut neigh = std::mem::take(&mut s.neighbors);
    for level in (1..=top).rev() {
        cur = greedy(g, dist, q, cur, level, &mut neigh);
    }
    s.neighbors = neigh;
    let accept = |slot: u32| g.is_live(slot) && filter.is_none_or(|f| f.contains(slot as usize));
    search_layer(g, dist, q, &[cur], ef.max(k), 0, s, accept);
    match full {
        Some((f, depth)) if depth > 0 => rerank(g, f, s, depth, k),
        _ => drain(g, s, k),
    }
}

/// Rows whose stored vectors are loaded ahead of the one being scored in a
/// scan of scattered slots ([`scan`], a filtered [`exact`]): each row
/// starts a new run of lines the hardware prefetcher cannot guess.
const SCAN_AHEAD: usize = 8;

/// Calls `f` on each live slot among `filter` (or all slots), in
/// increasing order, each after `load` has been called on the slot
/// [`SCAN_AHEAD`] further on (a window of slots, nothing allocated).
fn each_live_ahead<G: GraphView + ?Sized>(
    g: &G,
    filter: Option<&Bitset>,
    load: impl Fn(u32),
    f: impl FnMut(u32),
) {
    match filter {
        Some(b) => ahead(
            b.iter().map(|s| s as u32).filter(|&s| g.is_live(s)),
            load,
            f,
        ),
        None => ahead((0..g.slots() as u32).filter(|&s| g.is_live(s)), load, f),
    }
}

/// [`each_live_ahead`] over any slot sequence.
fn ahead(slots: impl Iterator<Item = u32>, load: impl Fn(u32), mut f: impl FnMut(u32)) {
    let mut ring = [0u32; SCAN_AHEAD];
    let mut n = 0usize;
    for slot in slots {
        if n >= SCAN_AHEAD {
            f(ring[n % SCAN_AHEAD]);
        }
        load(slot);
        ring[n % SCAN_AHEAD] = slot;
        n += 1;
    }
    for i in n.saturating_sub(SCAN_AHEAD)..n {
        f(ring[i % SCAN_AHEAD]);
    }
}

/// The best `k` live (and allowed) slots by a scan of their stored codes
/// (each row loaded [`SCAN_AHEAD`] rows early), the best `depth` of them
/// re-scored from full-precision rows as [`knn`] re-scores its beam (with
/// `full`; else the codes' distances, the best `k`).
pub(crate) fn scan<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    filter: Option<&Bitset>,
    full: Option<(Full<'_>, usize)>,
    s: &mut Scratch,
) -> Vec<Neighbor> {
    s.reset(0);
    let depth = match full {
        Some((_, d)) if d > 0 => d.max(k),
        _ => k,
    };
    let results = &mut s.results;
    each_live_ahead(
        g,
        filter,
        |n| prefetch_vector(g.vector(n)),
        |n| {
            let d = dist.eval(q, g.vector(n));
            if results.len() < depth {
                results.push(Cand { dist: d, slot: n });
            } else if let Some(mut worst) = results.peek_mut() {
                if d < worst.dist {
                    *worst = Cand { dist: d, slot: n };
                }
            }
        },
    );
    match full {
        Some((f, d)) if d > 0 => rerank(g, f, s, depth, k),
        _ => drain(g, s, k),
    }
}

/// Re-scores the best `depth` beam results from their full-precision rows
/// (prefetched a few ahead: they are cold) and keeps the best `k` by
/// (distance, key). A slot without a row keeps its stored-code distance.
fn rerank<G: GraphView + ?Sized>(
    g: &G,
    f: Full<'_>,
    s: &mut Scratch,
    depth: usize,
    k: usize,
) -> Vec<Neighbor> {
    let mut pool = std::mem::take(&mut s.pool);
    pool.clear();
    pool.extend(s.results.drain());
    pool.sort_unstable_by(|a, b| a.dist.total_cmp(&b.dist).then(a.slot.cmp(&b.slot)));
    pool.truncate(depth);
    let ahead = if g.reads_full_rows() {
        0
    } else {
        PREFETCH_AHEAD
    };
    for c in pool.iter().take(ahead) {
        if let Some(r) = g.full(c.slot) {
            prefetch_vector(r);
        }
    }
    let mut row = std::mem::take(&mut s.row);
    let mut out: Vec<Neighbor> = Vec::with_capacity(pool.len());
    for (i, c) in pool.iter().enumerate() {
        if ahead > 0 {
            if let Some(r) = pool.get(i + ahead).and_then(|n| g.full(n.slot)) {
                prefetch_vector(r);
            }
        }
        let distance = g
            .full_row(c.slot, &mut row)
            .map_or(c.dist, |r| f.dist.eval(f.query, r));
        out.push(Neighbor {
            key: g.key(c.slot),
            distance,
        });
    }
    s.row = row;
    s.pool = pool;
    out.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
    out.truncate(k);
    out
}

/// Exact k nearest live neighbours among `filter` (or all slots): the k
/// smallest by (distance, key), so ties at the k-th distance resolve to the
/// smaller keys whatever order the vectors were inserted in. With `full`,
/// distances come from the full-precision rows (the stored codes are not
/// read).
pub(crate) fn exact<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    filter: Option<&Bitset>,
    full: Option<Full<'_>>,
    s: &mut Scratch,
) -> Vec<Neighbor> {
    s.reset(0);
    if k == 0 {
        return Vec::new();
    }
    if filter.is_none() {
        let contiguous = match full {
            Some(f) => g.full_rows().map(|(r, st)| (f.dist, f.query, r, st)),
            None => g.rows().map(|(r, st)| (dist, q, r, st)),
        };
        if let Some((dist, q, rows, stride)) = contiguous {
            return exact_rows(g, dist, q, k, rows, stride, s);
        }
    }
    // The row scored for a slot: its full-precision row where kept.
    let row = |slot: u32| match (full, g.full(slot)) {
        (Some(f), Some(r)) => (f.dist, f.query, r),
        _ => (dist, q, g.vector(slot)),
    };
    let push = |slot: u32, s: &mut Scratch| {
        let (dist, q, r) = row(slot);
        let d = dist.eval(q, r);
        if s.keyed.len() < k {
            s.keyed.push(KeyedCand {
                dist: d,
                key: g.key(slot),
            });
        } else if s
            .keyed
            .peek()
            .is_some_and(|w| d < w.dist || (d == w.dist && g.key(slot) < w.key))
        {
            s.keyed.pop();
            s.keyed.push(KeyedCand {
                dist: d,
                key: g.key(slot),
            });
        }
    };
    // Scattered rows, each started a few rows ahead of its scoring: its
    // first 256 bytes (the hardware prefetcher streams the rest of a long
    // row; a whole 1,536-byte f32 row eight ahead measured slower at 1%
    // selectivity than none, its first 256 bytes faster at 1% and 10%).
    each_live_ahead(
        g,
        filter,
        |n| {
            let r = row(n).2;
            prefetch_vector(&r[..r.len().min(256)]);
        },
        |n| push(n, s),
    );
    let mut out: Vec<Neighbor> = s
        .keyed
        .drain()
        .map(|c| Neighbor {
            key: c.key,
            distance: c.dist,
        })
        .collect();
    out.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
    out
}

/// Rows scored per [`Distance::eval_rows`] call in [`exact_rows`]: a
/// block's distances stay in L1 while they are compared with the k-th.
const EXACT_BLOCK: usize = 256;

/// Rows whose distances are checked against the k-th with one vectorised
/// test ([`any_at_most`]).
const EXACT_RUN: usize = 16;

/// Whether any distance of `run` is at most `bound` (a NaN never is):
/// compares and ORs with no dependency between rows, so it compiles to
/// vector compares (a running minimum is a chain of dependent `min`s, and
/// cost as much as the 256-bit Hamming kernel itself).
#[inline]
fn any_at_most(run: &[f32], bound: f32) -> bool {
    run.iter().fold(false, |hit, &d| hit | (d <= bound))
}

/// [`exact`] over contiguous stored rows, unfiltered: distances a block at
/// a time, and liveness and keys read only for a row that would enter the
/// top k (most rows are rejected by one comparison).
fn exact_rows<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    rows: &[u8],
    stride: usize,
    s: &mut Scratch,
) -> Vec<Neighbor> {
    let n = rows
        .len()
        .checked_div(stride)
        .map_or(0, |r| r.min(g.slots()));
    let mut buf = [0f32; EXACT_BLOCK];
    let mut worst = f32::INFINITY;
    let mut lo = 0;
    while lo < n {
        let hi = (lo + EXACT_BLOCK).min(n);
        let ds = &mut buf[..hi - lo];
        dist.eval_rows(q, &rows[lo * stride..hi * stride], stride, ds);
        if s.keyed.len() >= k && !any_at_most(ds, worst) {
            lo = hi;
            continue;
        }
        // Once k results are held, most blocks and runs of rows have
        // nothing at or below the k-th: one vectorised test rejects each
        // whole.
        for (c, run) in ds.chunks(EXACT_RUN).enumerate() {
            if s.keyed.len() >= k && !any_at_most(run, worst) {
                continue;
            }
            for (i, &d) in run.iter().enumerate() {
                let full = s.keyed.len() >= k;
                // A NaN is never below the k-th: it never displaces a result.
                if full
                    && !matches!(
                        d.partial_cmp(&worst),
                        Some(Ordering::Less | Ordering::Equal)
                    )
                {
                    continue;
                }
                let slot = (lo + c * EXACT_RUN + i) as u32;
                if !g.is_live(slot) {
                    continue;
                }
                let key = g.key(slot);
                if full {
                    if s.keyed.peek().is_some_and(|w| d < w.dist || key < w.key) {
                        s.keyed.pop();
                    } else {
                        continue;
                    }
                }
                s.keyed.push(KeyedCand { dist: d, key });
                if s.keyed.len() >= k {
                    worst = s.keyed.peek().map_or(f32::INFINITY, |w| w.dist);
                }
            }
        }
        lo = hi;
    }
    let mut out: Vec<Neighbor> = s
        .keyed
        .drain()
        .map(|c| Neighbor {
            key: c.key,
            distance: c.dist,
        })
        .collect();
    out.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
    out
}

fn drain<G: GraphView + ?Sized>(g: &G, s: &mut Scratch, k: usize) -> Vec<Neighbor> {
    let mut out: Vec<Neighbor> = s
        .results
        .drain()
        .map(|c| Neighbor {
            key: g.key(c.slot),
            distance: c.dist,
        })
        .collect();
    out.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
    out.truncate(k);
    out
}

/// The HNSW neighbour-selection heuristic: walk candidates nearest first
/// and keep one only if it is nearer to the base than to every neighbour
/// kept so far (this keeps long-range links and the graph navigable).
/// `cands` must be sorted ascending; at most `m` slots are written to `out`.
pub(crate) fn select_neighbors<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    cands: &[Cand],
    m: usize,
    out: &mut Vec<u32>,
) {
    out.clear();
    if cands.len() <= m {
        out.extend(cands.iter().map(|c| c.slot));
        return;
    }
    // Pair by pair, not in batches: most candidates are rejected by one
    // of the first kept neighbours (batches measured slower here).
    for c in cands {
        if out.len() >= m {
            break;
        }
        let cv = g.vector(c.slot);
        // Two stored vectors: neither is a unit-length query.
        let good = out
            .iter()
            .all(|&r| dist.eval_pair(cv, g.vector(r)) >= c.dist);
        if good {
            out.push(c.slot);
        }
    }
}
