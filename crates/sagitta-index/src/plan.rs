//! The search planner: the one place that decides how a search runs, for
//! in-memory indexes and sealed segments alike.
//!
//! [`plan`] turns a [`Target`] (what is searched: its kind, size and
//! storage) and the caller's [`SearchOptions`] into a [`Plan`]:
//!
//! * **IVF** for an IVF index unless an exact scan is asked for (the caller
//!   owns the lists and runs it);
//! * **exact** for Flat, for `exact = true`, for a filter so selective
//!   that scanning the allowed rows costs less than a filtered graph walk
//!   over a graph without full-precision rows ([`prefer_exact_scan`]), and
//!   for a graph so small that scanning all of it costs less than the walk
//!   ([`prefer_exact_small`]);
//! * **scan** for such a filter over compact codes with full-precision
//!   rows ([`prefer_filter_scan`]): the allowed codes are scanned (a quarter
//!   of an f32 row's bytes for sq8) and the best [`scan_rerank`] re-scored
//!   from the rows, as a beam is;
//! * **graph** otherwise: a beam of `ef` (at least `k`), and where
//!   full-precision rows are kept, an exact re-scoring of the beam's best
//!   `rerank` results ([`default_rerank`] unless `refine` says).
//!
//! [`execute`] runs an exact, scan or graph plan over any [`GraphView`].

use crate::graph::{self, Full};
use crate::scratch::Scratch;
use crate::view::GraphView;
use crate::{Bitset, IndexError, IndexKind, Neighbor, Result, SearchOptions, Space, VectorRef};
use sagitta_kernels::{DType, Distance};

/// Cost constant of a filtered graph walk in [`prefer_exact_scan`]: the
/// walk is estimated at `FILTER_GRAPH_COST × ef × M0 / selectivity`
/// distance evaluations, an exact scan at one per allowed slot. Fitted on
/// debian-minilm (100k × 384).
pub const FILTER_GRAPH_COST: f64 = 0.7;

/// Whether scanning the `allowed` slots exactly is cheaper than a filtered
/// graph walk with beam `ef` over `slots` slots (the walk must expand about
/// `ef / selectivity` nodes of `m0` links each to collect `ef` allowed
/// results).
pub fn prefer_exact_scan(allowed: usize, slots: usize, ef: usize, m0: usize) -> bool {
    scan_beats_walk(FILTER_GRAPH_COST, allowed, slots, ef, m0)
}

/// Cost constant of a filtered graph walk in [`prefer_filter_scan`], in
/// rows of a code scan: as [`FILTER_GRAPH_COST`], for a scan of sq8
/// codes (a quarter of an f32 row) with the best re-scored. Fitted on
/// debian-minilm (100k × 384, ef 64, M 16; `sagitta_bench filtered`, both
/// plans forced): a scan costs about 50 ns a row, a walk at 10%
/// selectivity 0.84–0.86 ms, at 15% 0.85 ms; they cross near 15,000
/// allowed rows of 100,000.
pub const FILTER_SCAN_COST: f64 = 1.1;

/// Whether a filter allowing `allowed` of `slots` slots is searched by a
/// scan rather than a filtered graph walk with beam `ef` over `m0` links:
/// a scan of the stored codes re-scored from full-precision rows
/// ([`Plan::Scan`], cost [`FILTER_SCAN_COST`]) where the graph keeps such
/// rows, else of the rows themselves ([`Plan::Exact`],
/// [`prefer_exact_scan`]).
pub fn prefer_filter_scan(
    allowed: usize,
    slots: usize,
    ef: usize,
    m0: usize,
    full_precision: bool,
) -> bool {
    if full_precision {
        scan_beats_walk(FILTER_SCAN_COST, allowed, slots, ef, m0)
    } else {
        prefer_exact_scan(allowed, slots, ef, m0)
    }
}

/// A scan of `allowed` rows against a walk of `cost × ef × m0 /
/// selectivity` row-equivalents.
fn scan_beats_walk(cost: f64, allowed: usize, slots: usize, ef: usize, m0: usize) -> bool {
    if allowed == 0 || slots == 0 {
        return true;
    }
    let walk = cost * (ef * m0) as f64 * slots as f64 / allowed as f64;
    allowed as f64 <= walk
}

/// Nanoseconds per expanded link of an unfiltered graph walk in
/// [`prefer_exact_small`]: a walk with beam `ef` over `m0` links per node
/// is estimated at `WALK_NS × ef × m0`. Fitted on this machine (AVX-512,
/// 2 cores; 1,000 queries, ef 64, M 16): 36–74 µs per query for 256-bit
/// codes over 2k–100k rows, 40–71 µs for debian-minilm (sq8 codes, f32
/// rerank) over 1k–25k rows.
pub const WALK_NS: f64 = 20.0;

/// Estimated nanoseconds an exact scan of contiguous rows (block kernels
/// over [`crate::GraphView::rows`]) spends per `scan_bytes`-byte slot:
/// half a nanosecond plus one per 64 bytes (fitted as [`WALK_NS`]: 0.8–1.6
/// ns for 256-bit codes, 22–34 ns for 384-d f32 rows held in cache).
pub fn scan_ns(scan_bytes: usize) -> f64 {
    0.5 + scan_bytes as f64 / 64.0
}

/// Whether an exact scan of every slot is expected to cost no more than a
/// graph walk with beam `ef`, for targets with contiguous rows (the
/// in-memory index scans slot by slot, several times slower, and keeps
/// its graph walks): small sealed segments (under about 40k rows of
/// 256-bit codes, 1.7k rows of 384-d floats at ef 64, M 16) are scanned,
/// which is faster and exact. Measured (same setting): scanning is
/// 0.16–0.44× the walk's time for 2k–20k-row segments of 256-bit codes
/// and 0.73× for 1k rows of 384-d floats; 1.12× and 1.43× just above the
/// estimated crossover (100k codes, 3k floats).
pub fn prefer_exact_small(t: &Target, ef: usize) -> bool {
    t.contiguous && t.slots as u64 <= exact_scan_rows(t.scan_bytes, ef, t.m0)
}

/// The most rows of `scan_bytes` bytes an exact scan reads in the time of
/// a graph walk with beam `ef` over `m0` links per node (the cost model of
/// [`prefer_exact_small`]): a segment this small needs no graph.
pub fn exact_scan_rows(scan_bytes: usize, ef: usize, m0: usize) -> u64 {
    (WALK_NS * (ef * m0) as f64 / scan_ns(scan_bytes)) as u64
}

/// Beam results re-scored from full-precision rows by default: `2k`, at
/// least 16. On debian-minilm (sq8 codes, k = 10) re-scoring the best 20
/// gives the same recall as re-scoring the whole beam at every ef from 32
/// to 192, and 1.04× to 1.35× the queries per second (the rows are cold:
/// each costs a few cache misses, or a page-in).
pub fn default_rerank(k: usize) -> usize {
    (2 * k).max(16)
}

/// Code-scan results re-scored from full-precision rows by default
/// ([`Plan::Scan`]): as a beam's ([`default_rerank`]), at least 32. On
/// debian-minilm (sq8, k = 10, 500 queries, filters of 0.1% to 100%)
/// re-scoring 32 or 40 gave recall@10 1.000 at every selectivity.
pub fn scan_rerank(k: usize) -> usize {
    default_rerank(k).max(32)
}

/// What is searched, as far as the planner cares.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Flat, HNSW or IVF.
    pub kind: IndexKind,
    /// Slots (live, deleted and unpublished): the length a filter needs.
    pub slots: usize,
    /// Links per node on level 0 (HNSW).
    pub m0: usize,
    /// The structure's default beam width.
    pub ef_search: usize,
    /// Whether full-precision rows are kept beside the stored codes.
    pub full_precision: bool,
    /// Bytes an exact scan reads per slot (the full-precision row where
    /// one is kept, else the stored vector).
    pub scan_bytes: usize,
    /// Whether the rows an exact scan reads lie back to back (a sealed
    /// segment's mapped rows), so it runs block kernels and a small graph
    /// is scanned rather than walked ([`prefer_exact_small`]).
    pub contiguous: bool,
}

/// How a search runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Exact scan of the live (and allowed) slots; from the full-precision
    /// rows where they are kept.
    Exact,
    /// Scan of the live allowed slots' stored codes (a selective filter
    /// over a graph with full-precision rows), then the best `rerank` of
    /// them re-scored from the full-precision rows (0: none). Reads the
    /// compact codes instead of the rows: a quarter of the bytes for sq8.
    Scan {
        /// Results re-scored exactly.
        rerank: usize,
    },
    /// HNSW beam search with beam `ef`, then the best `rerank` results
    /// re-scored from full-precision rows (0: none).
    Graph {
        /// Beam width.
        ef: usize,
        /// Results re-scored exactly.
        rerank: usize,
    },
    /// Probe IVF partitions (run by the caller).
    Ivf,
}

/// Plans a search for `k` results. Errors: [`IndexError::FilterSize`] when
/// the filter covers more slots than the target has (it was made for
/// another index). A shorter filter was made before the index grew (a
/// mutable part taking writes): the slots added since are not allowed,
/// as if the search had run when the filter was made.
///
/// Rerank: where full-precision rows are kept, `opts.refine` `None`
/// re-scores the best [`default_rerank`]`(k)` of the beam, `Some(0)` none,
/// and `Some(r)` the best `r`, widening the beam to `r` if it is narrower.
pub fn plan(t: &Target, k: usize, opts: &SearchOptions<'_>) -> Result<Plan> {
    if let Some(f) = opts.filter {
        if f.len() > t.slots {
            return Err(IndexError::FilterSize {
                expected: t.slots,
                got: f.len(),
            });
        }
    }
    if t.kind == IndexKind::IvfRq && !opts.exact {
        return Ok(Plan::Ivf);
    }
    let mut ef = opts.ef.unwrap_or(t.ef_search).max(k);
    let rerank = match (t.full_precision, opts.refine) {
        (false, _) | (true, Some(0)) => 0,
        (true, None) => default_rerank(k).min(ef),
        (true, Some(r)) => {
            ef = ef.max(r);
            r
        }
    };
    if t.kind != IndexKind::Hnsw || opts.exact {
        return Ok(Plan::Exact);
    }
    Ok(match opts.filter {
        // A selective filter over codes with full-precision rows: the
        // allowed codes are scanned and the best re-scored, as the beam is.
        Some(f) if prefer_filter_scan(f.count(), t.slots, ef, t.m0, t.full_precision) => {
            if t.full_precision {
                Plan::Scan {
                    rerank: match opts.refine {
                        Some(r) => r,
                        None => scan_rerank(k),
                    },
                }
            } else {
                Plan::Exact
            }
        }
        None if prefer_exact_small(t, ef) => Plan::Exact,
        _ => Plan::Graph { ef, rerank },
    })
}

/// Runs an exact, scan or graph plan over `g`, whose vectors are stored in
/// `space` and compared by `dist`. The query is validated and encoded
/// here; full-precision rows (when `g` has them and the plan reads them)
/// are compared with the f32 form of the query. A [`Plan::Ivf`] is the
/// caller's to run: here it returns an empty result.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute<G: GraphView + ?Sized>(
    g: &G,
    space: &Space,
    dist: &Distance,
    query: VectorRef<'_>,
    k: usize,
    plan: Plan,
    filter: Option<&Bitset>,
    s: &mut Scratch,
) -> Result<Vec<Neighbor>> {
    let stride = space.stride();
    space.encode_query(query, s.query_buf(stride))?;
    let reads_full = match plan {
        Plan::Exact => true,
        Plan::Graph { rerank, .. } | Plan::Scan { rerank } => rerank > 0,
        Plan::Ivf => return Ok(Vec::new()),
    } && g.full(0).is_some();
    let mut fq = std::mem::take(&mut s.full_query);
    let fdist = if reads_full {
        let VectorRef::F32(x) = query else {
            s.full_query = fq;
            return Err(IndexError::WrongInputKind {
                expected: "float",
                dtype: space.dtype,
            });
        };
        let fspace = Space {
            dtype: DType::F32,
            ..*space
        };
        fq.clear();
        fq.resize(space.dims, 0.0);
        fspace.float_query(x, &mut fq);
        Some(fspace.distance()?)
    } else {
        None
    };
    let full = fdist.as_ref().map(|dist| Full {
        dist,
        query: f32_bytes(&fq),
    });
    let q = s.take_query();
    let qb = crate::scratch::query_bytes(&q, stride);
    let out = match plan {
        Plan::Graph { ef, rerank } => {
            graph::knn(g, dist, qb, k, ef, filter, full.map(|f| (f, rerank)), s)
        }
        Plan::Scan { rerank } => graph::scan(g, dist, qb, k, filter, full.map(|f| (f, rerank)), s),
        _ => graph::exact(g, dist, qb, k, filter, full, s),
    };
    s.put_query(q);
    s.full_query = fq;
    Ok(out)
}

/// The bytes of an f32 slice (4-byte aligned, as the f32 kernels need).
pub(crate) fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: any f32 is 4 plain bytes; the length is the slice's in bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn target(kind: IndexKind, full: bool) -> Target {
        Target {
            kind,
            slots: 100_000,
            m0: 32,
            ef_search: 64,
            full_precision: full,
            scan_bytes: 1536,
            contiguous: true,
        }
    }

    #[test]
    fn small_graphs_are_scanned_and_large_ones_walked() {
        let o = SearchOptions::default();
        let codes = |slots, contiguous| Target {
            slots,
            scan_bytes: 32,
            contiguous,
            ..target(IndexKind::Hnsw, false)
        };
        let floats = |slots| Target {
            slots,
            ..target(IndexKind::Hnsw, true)
        };
        assert_eq!(plan(&codes(20_000, true), 10, &o).unwrap(), Plan::Exact);
        assert!(matches!(
            plan(&codes(20_000, false), 10, &o).unwrap(),
            Plan::Graph { .. }
        ));
        assert!(matches!(
            plan(&codes(200_000, true), 10, &o).unwrap(),
            Plan::Graph { .. }
        ));
        assert_eq!(plan(&floats(1_000), 10, &o).unwrap(), Plan::Exact);
        assert!(matches!(
            plan(&floats(5_000), 10, &o).unwrap(),
            Plan::Graph { .. }
        ));
        // A wider beam makes the walk dearer: a larger graph is scanned.
        let wide = SearchOptions { ef: Some(512), ..o };
        assert_eq!(plan(&floats(5_000), 10, &wide).unwrap(), Plan::Exact);
    }

    #[test]
    fn kinds_and_options_choose_the_plan() {
        let o = SearchOptions::default();
        assert_eq!(
            plan(&target(IndexKind::Flat, false), 10, &o).unwrap(),
            Plan::Exact
        );
        assert_eq!(
            plan(&target(IndexKind::IvfRq, false), 10, &o).unwrap(),
            Plan::Ivf
        );
        let exact = SearchOptions { exact: true, ..o };
        assert_eq!(
            plan(&target(IndexKind::IvfRq, false), 10, &exact).unwrap(),
            Plan::Exact
        );
        assert_eq!(
            plan(&target(IndexKind::Hnsw, false), 10, &o).unwrap(),
            Plan::Graph { ef: 64, rerank: 0 }
        );
        let wide_k = plan(&target(IndexKind::Hnsw, false), 100, &o).unwrap();
        assert_eq!(wide_k, Plan::Graph { ef: 100, rerank: 0 });
    }

    #[test]
    fn full_precision_reranks_the_beam_unless_told_otherwise() {
        let t = target(IndexKind::Hnsw, true);
        let o = SearchOptions {
            ef: Some(40),
            ..SearchOptions::default()
        };
        assert_eq!(
            plan(&t, 10, &o).unwrap(),
            Plan::Graph { ef: 40, rerank: 20 }
        );
        assert_eq!(plan(&t, 1, &o).unwrap(), Plan::Graph { ef: 40, rerank: 16 });
        let narrow = SearchOptions { ef: Some(12), ..o };
        assert_eq!(
            plan(&t, 10, &narrow).unwrap(),
            Plan::Graph { ef: 12, rerank: 12 }
        );
        let none = SearchOptions {
            refine: Some(0),
            ..o
        };
        assert_eq!(
            plan(&t, 10, &none).unwrap(),
            Plan::Graph { ef: 40, rerank: 0 }
        );
        let deep = SearchOptions {
            refine: Some(100),
            ..o
        };
        assert_eq!(
            plan(&t, 10, &deep).unwrap(),
            Plan::Graph {
                ef: 100,
                rerank: 100
            }
        );
    }

    #[test]
    fn selective_filters_scan_and_wrong_sized_filters_are_refused() {
        let t = target(IndexKind::Hnsw, false);
        let mut few = Bitset::new(100_000);
        few.insert(3);
        let o = SearchOptions {
            filter: Some(&few),
            ..SearchOptions::default()
        };
        assert_eq!(plan(&t, 1, &o).unwrap(), Plan::Exact);
        // With full-precision rows the allowed codes are scanned and the
        // best re-scored; asked to be exact, the rows are scanned.
        let full = target(IndexKind::Hnsw, true);
        assert_eq!(plan(&full, 10, &o).unwrap(), Plan::Scan { rerank: 32 });
        assert_eq!(plan(&full, 30, &o).unwrap(), Plan::Scan { rerank: 60 });
        let raw = SearchOptions {
            refine: Some(0),
            ..o
        };
        assert_eq!(plan(&full, 10, &raw).unwrap(), Plan::Scan { rerank: 0 });
        let exact = SearchOptions { exact: true, ..o };
        assert_eq!(plan(&full, 10, &exact).unwrap(), Plan::Exact);
        // 12% allowed: scanned over codes, walked over f32 rows; 20%
        // allowed: walked either way.
        let mut some = Bitset::new(100_000);
        (0..12_000).for_each(|i| some.insert(i * 8));
        let o12 = SearchOptions {
            filter: Some(&some),
            ..SearchOptions::default()
        };
        assert_eq!(plan(&full, 10, &o12).unwrap(), Plan::Scan { rerank: 32 });
        assert!(matches!(plan(&t, 10, &o12).unwrap(), Plan::Graph { .. }));
        let mut more = Bitset::new(100_000);
        (0..20_000).for_each(|i| more.insert(i * 5));
        let o20 = SearchOptions {
            filter: Some(&more),
            ..SearchOptions::default()
        };
        assert!(matches!(plan(&full, 10, &o20).unwrap(), Plan::Graph { .. }));
        let all = Bitset::full(100_000);
        let o = SearchOptions {
            filter: Some(&all),
            ..SearchOptions::default()
        };
        assert!(matches!(plan(&t, 1, &o).unwrap(), Plan::Graph { .. }));
        let wrong = Bitset::new(100_001);
        let o = SearchOptions {
            filter: Some(&wrong),
            ..SearchOptions::default()
        };
        assert!(matches!(
            plan(&t, 1, &o),
            Err(IndexError::FilterSize {
                expected: 100_000,
                got: 100_001
            })
        ));
        // Made before the index grew by a slot: planned (that slot is not
        // allowed).
        let older = Bitset::new(99_999);
        let o = SearchOptions {
            filter: Some(&older),
            ..SearchOptions::default()
        };
        assert!(plan(&t, 1, &o).is_ok());
        assert!(prefer_exact_scan(0, 10, 10, 32));
        assert!(!prefer_exact_scan(100_000, 100_000, 64, 32));
        // A small graph is cheaper to scan than to walk.
        assert!(prefer_exact_scan(1000, 1000, 64, 32));
    }
}
