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
use crate::Bitset;
use sagitta_kernels::{prefetch, Distance};
use std::cmp::Reverse;

/// Read access to a graph and its vectors.
pub trait GraphView: Sync {
    /// Number of slots (live, deleted and unpublished).
    fn slots(&self) -> usize;
    /// Stored bytes of a slot.
    fn vector(&self, slot: u32) -> &[u8];
    /// The user key of a slot.
    fn key(&self, slot: u32) -> u64;
    /// Whether the slot may appear in results: published and not deleted.
    fn is_live(&self, slot: u32) -> bool;
    /// The node's top level: 0 for nodes only on level 0 (and for slots
    /// outside the graph).
    fn level(&self, slot: u32) -> usize;
    /// Entry slot and top level, `None` for an empty graph.
    fn entry_point(&self) -> Option<(u32, usize)>;
    /// Writes the neighbours of `slot` at `level` into `out` (cleared first).
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>);
}

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
/// prefetched.
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
        neigh.retain(|&n| s.visit(n));
        for &n in neigh.iter().take(PREFETCH_AHEAD) {
            prefetch_vector(g.vector(n));
        }
        for (i, &n) in neigh.iter().enumerate() {
            if let Some(&next) = neigh.get(i + PREFETCH_AHEAD) {
                prefetch_vector(g.vector(next));
            }
            let d = dist.eval(q, g.vector(n));
            let worst = s.results.peek().map_or(f32::INFINITY, |w| w.dist);
            if s.results.len() < ef || d < worst {
                let cand = Cand { dist: d, slot: n };
                s.candidates.push(Reverse(cand));
                if accept(n) {
                    s.results.push(cand);
                    if s.results.len() > ef {
                        s.results.pop();
                    }
                }
            }
        }
    }
    s.neighbors = neigh;
}

/// k nearest live (and allowed) neighbours by graph search.
pub(crate) fn knn<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    ef: usize,
    filter: Option<&Bitset>,
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
    drain(g, s, k)
}

/// Exact k nearest live neighbours among `filter` (or all slots): the k
/// smallest by (distance, key), so ties at the k-th distance resolve to the
/// smaller keys whatever order the vectors were inserted in.
pub(crate) fn exact<G: GraphView + ?Sized>(
    g: &G,
    dist: &Distance,
    q: &[u8],
    k: usize,
    filter: Option<&Bitset>,
    s: &mut Scratch,
) -> Vec<Neighbor> {
    s.reset(0);
    let push = |slot: u32, s: &mut Scratch| {
        if !g.is_live(slot) {
            return;
        }
        let d = dist.eval(q, g.vector(slot));
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
    match filter {
        Some(f) => f.iter().for_each(|slot| push(slot as u32, s)),
        None => (0..g.slots() as u32).for_each(|slot| push(slot, s)),
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
    for c in cands {
        if out.len() >= m {
            break;
        }
        let cv = g.vector(c.slot);
        let good = out.iter().all(|&r| dist.eval(cv, g.vector(r)) >= c.dist);
        if good {
            out.push(c.slot);
        }
    }
}
