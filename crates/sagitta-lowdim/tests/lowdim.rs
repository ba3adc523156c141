//! The low-dimensional exact index (`sagitta-lowdim`) against a
//! brute-force oracle written here: exact ids and distances on decimal
//! grids and on plain `f32` rows, every query path (on the grid, off it,
//! outside the data), the kNN vote, typed errors for bad input, and the
//! checked format: round trip, random and crafted corruption, alignment,
//! and the frozen version-1 files read back.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use proptest::prelude::*;
use sagitta_lowdim::LowDimError;
use sagitta_lowdim::{LowDimIndex, LowDimScratch, LowDimView, LEAF, MAGIC, MAX_DIM};
use std::collections::BTreeMap;
use std::sync::Arc;

// ---------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------

/// SplitMix64. The frozen files' data are drawn from it: never change it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [0, 1) with 24 random bits: almost never a short decimal.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The `f32` that stands for the decimal `code / scale`.
fn dec(code: i64, scale: f64) -> f32 {
    (code as f64 / scale) as f32
}

// ---------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------

/// `x`'s integer code on the grid of `scale` when `x` is exactly the
/// decimal `code / scale` with `|code| ≤ 32767` (what the module calls
/// "on the grid").
fn on_grid(x: f32, scale: f64) -> Option<f64> {
    let c = (f64::from(x) * scale).round();
    (c.abs() <= 32767.0 && dec(c as i64, scale) == x).then_some(c)
}

/// Brute force over every row: squared L2 summed over the dimensions in
/// order in `f64`, ties broken by the lower row index.
///
/// On a decimal grid (`scale` is `Some`) a row is the decimal it stands
/// for, so the oracle compares in grid units: rows as their integer codes
/// (exact in `f64`), a query component as its code when it is on the grid
/// and as `x · scale` otherwise; a distance in value units is the sum
/// divided by `scale²`. Without a grid, the `f32` values themselves.
struct Oracle {
    dim: usize,
    scale: Option<f64>,
    rows: Vec<f64>,
    labels: Option<Vec<u16>>,
}

impl Oracle {
    fn new(rows: &[f32], dim: usize, scale: Option<f64>, labels: Option<&[u16]>) -> Oracle {
        let rows = rows
            .iter()
            .map(|&x| match scale {
                Some(s) => on_grid(x, s).unwrap_or_else(|| panic!("{x} is not on the grid {s}")),
                None => f64::from(x),
            })
            .collect();
        Oracle {
            dim,
            scale,
            rows,
            labels: labels.map(<[u16]>::to_vec),
        }
    }

    fn len(&self) -> usize {
        self.rows.len() / self.dim
    }

    /// Every row as (id, distance in value units), nearest first.
    fn ranked(&self, query: &[f32]) -> Vec<(u32, f64)> {
        let q: Vec<f64> = query
            .iter()
            .map(|&x| match self.scale {
                Some(s) => on_grid(x, s).unwrap_or(f64::from(x) * s),
                None => f64::from(x),
            })
            .collect();
        let mut all: Vec<(f64, u32)> = self
            .rows
            .chunks(self.dim)
            .enumerate()
            .map(|(i, row)| {
                let mut s = 0.0f64;
                for (a, b) in q.iter().zip(row) {
                    let t = a - b;
                    s += t * t;
                }
                (s, i as u32)
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let div = self.scale.map_or(1.0, |s| s * s);
        all.into_iter().map(|(d, i)| (i, d / div)).collect()
    }

    fn label(&self, id: u32) -> u16 {
        self.labels.as_ref().map_or(0, |l| l[id as usize])
    }

    /// The kNN vote over the `k` nearest: (label, count), most frequent
    /// first, equal counts by the smaller label.
    fn vote(&self, ranked: &[(u32, f64)], k: usize) -> Vec<(u16, u32)> {
        let mut counts: BTreeMap<u16, u32> = BTreeMap::new();
        for &(id, _) in &ranked[..k] {
            *counts.entry(self.label(id)).or_default() += 1;
        }
        let mut out: Vec<(u16, u32)> = counts.into_iter().collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// The index's distance (`D · (1 / scale²)`) against the oracle's
/// (`D / scale²`): equal up to a couple of roundings, and exactly equal
/// when no division by a scale is involved.
fn same_dist(got: f64, want: f64, exact: bool) -> bool {
    if exact {
        got == want
    } else {
        got == want || (got - want).abs() <= 4.0 * f64::EPSILON * got.abs().max(want.abs())
    }
}

/// Checks `view`'s answers to `query` for every k in `ks` (clamped to the
/// rows) against the oracle: ids and labels exactly, distances as
/// [`same_dist`].
fn check_query(
    view: &LowDimView<'_>,
    oracle: &Oracle,
    query: &[f32],
    ks: &[usize],
    scratch: &mut LowDimScratch,
    what: &str,
) {
    let ranked = oracle.ranked(query);
    let exact = oracle.scale.is_none_or(|s| s == 1.0);
    for &k in ks {
        let k = k.min(oracle.len());
        let got = view.search(query, k, scratch).unwrap();
        assert_eq!(got.len(), k, "{what}: k = {k}");
        for (rank, (h, &(id, d))) in got.iter().zip(&ranked).enumerate() {
            assert!(
                h.id == id && same_dist(h.dist, d, exact),
                "{what}: k = {k}, rank {rank}: got id {} dist {:e}, oracle id {id} dist {d:e} \
                 (query {query:?})",
                h.id,
                h.dist,
            );
            assert_eq!(h.label, oracle.label(id), "{what}: label of row {id}");
        }
    }
}

/// Builds an index, checks its coordinate kind, and checks every query
/// (through the built index and through its bytes read back).
fn check_all(
    rows: &[f32],
    dim: usize,
    labels: Option<&[u16]>,
    grid: Option<f64>,
    queries: &[Vec<f32>],
    ks: &[usize],
    what: &str,
) {
    let idx = LowDimIndex::build(rows, dim, labels).unwrap();
    let view = idx.view();
    assert_eq!(view.grid_scale(), grid, "{what}: coordinate kind");
    assert_eq!(view.dim(), dim);
    assert_eq!(view.len(), rows.len() / dim);
    assert_eq!(view.has_labels(), labels.is_some());
    let oracle = Oracle::new(rows, dim, grid, labels);
    let mut scratch = LowDimScratch::default();
    for (i, q) in queries.iter().enumerate() {
        check_query(
            &view,
            &oracle,
            q,
            ks,
            &mut scratch,
            &format!("{what}, query {i}"),
        );
    }
    let back = LowDimIndex::from_bytes(idx.as_bytes()).unwrap();
    for (i, q) in queries.iter().enumerate().step_by(3) {
        check_query(
            &back.view(),
            &oracle,
            q,
            ks,
            &mut scratch,
            &format!("{what} (read back), query {i}"),
        );
    }
}

// ---------------------------------------------------------------------
// Exactness
// ---------------------------------------------------------------------

/// `n` rows of dim 14 on the 10^-4 grid in [0, 1], about 4% of values -1,
/// few distinct values in most dimensions (many ties per dimension), and
/// about 5% of rows exact copies of earlier ones (tied rows).
fn grid14(n: usize, seed: u64) -> Vec<f32> {
    let dim = 14;
    let mut r = Rng(seed);
    let palettes: Vec<Vec<i64>> = (0..dim)
        .map(|d| {
            let size = match d {
                0..=3 => 12,
                4..=9 => 200,
                _ => 10_001,
            };
            (0..size).map(|_| r.below(10_001) as i64).collect()
        })
        .collect();
    let mut rows = Vec::with_capacity(n * dim);
    for i in 0..n {
        if i > 0 && r.below(20) == 0 {
            let j = r.below(i as u64) as usize;
            rows.extend_from_within(j * dim..(j + 1) * dim);
            continue;
        }
        for p in &palettes {
            let code = if r.below(25) == 0 {
                -10_000
            } else {
                p[r.below(p.len() as u64) as usize]
            };
            rows.push(dec(code, 1e4));
        }
    }
    rows
}

/// Queries for rows of `dim` on a grid of `scale` spanning about [lo, hi]
/// in codes: on the grid, off it, outside the data (forcing the `f64`
/// fallback), and rows themselves.
fn queries(rows: &[f32], dim: usize, scale: f64, lo: i64, hi: i64, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng(seed);
    let n = rows.len() / dim;
    let row = |i: usize| rows[i * dim..(i + 1) * dim].to_vec();
    let span = (hi - lo + 1) as u64;
    let mut out = Vec::new();
    // On the grid.
    for _ in 0..8 {
        out.push(
            (0..dim)
                .map(|_| dec(lo + r.below(span) as i64, scale))
                .collect(),
        );
    }
    out.push(vec![dec((lo + hi) / 2, scale); dim]);
    // Rows themselves, and rows with one component moved on the grid.
    for _ in 0..6 {
        out.push(row(r.below(n as u64) as usize));
    }
    for _ in 0..3 {
        let mut q = row(r.below(n as u64) as usize);
        q[r.below(dim as u64) as usize] = dec(lo + r.below(span) as i64, scale);
        out.push(q);
    }
    // Off the grid.
    for _ in 0..4 {
        out.push(
            (0..dim)
                .map(|_| dec(lo, scale) + r.unit() * dec(hi - lo, scale))
                .collect(),
        );
    }
    out.push(vec![0.12345; dim]);
    let mut q = row(0);
    q[dim - 1] = 0.12345;
    out.push(q);
    // Outside the data: far off the grid's range, and on the grid but far.
    out.push(vec![1e4; dim]);
    out.push(vec![-1e4; dim]);
    let mut q = row(1 % n);
    q[0] = 1e4;
    out.push(q);
    out.push(vec![3.0; dim]);
    out.push(vec![-3.2767; dim]);
    let mut q = row(2 % n);
    q[dim / 2] = 2.5;
    out.push(q);
    out
}

#[test]
fn grid_dim14_with_ties_matches_oracle() {
    let dim = 14;
    let rows = grid14(3000, 1);
    let n = rows.len() / dim;
    // A row that has an exact copy: a query on it ties at distance 0.
    let dup = (1..n)
        .find(|&i| (0..i).any(|j| rows[i * dim..(i + 1) * dim] == rows[j * dim..(j + 1) * dim]))
        .unwrap();
    let mut qs = queries(&rows, dim, 1e4, 0, 10_000, 2);
    qs.push(rows[dup * dim..(dup + 1) * dim].to_vec());
    let mut r = Rng(3);
    let labels: Vec<u16> = (0..n).map(|_| (r.below(7) % 5) as u16).collect();
    check_all(
        &rows,
        dim,
        Some(&labels),
        Some(1e4),
        &qs,
        &[1, 5, 17, n],
        "grid dim 14",
    );
    check_all(
        &rows,
        dim,
        None,
        Some(1e4),
        &qs,
        &[1, 17],
        "grid dim 14, no labels",
    );
}

/// Rows of dim 14 shaped like the fraud contest's: most dimensions take a
/// handful of values (leaves fix them: their box has low = high there, and
/// a version-2 block leaves them out), two are fine-grained, and no code is
/// 0 (so a block's all-zero pair is one it does not store).
fn fixed_dims14(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut rows = Vec::with_capacity(n * 14);
    for _ in 0..n {
        for d in 0..14 {
            let code = match d {
                0 | 7 => 1 + r.below(10_000) as i64,
                1..=4 => [1, 10_000][r.below(2) as usize],
                5 | 6 => [-10_000, 2_500, 5_000][r.below(3) as usize],
                _ => 1 + 1_000 * r.below(4) as i64,
            };
            rows.push(dec(code, 1e4));
        }
    }
    rows
}

/// Leaves whose box fixes dimensions (version 2 stores only the others)
/// give the oracle's answers, in the exact `u32` arithmetic (queries on
/// the grid) and in `f64` (off it), and such leaves are there.
#[test]
fn leaves_with_fixed_dimensions_match_oracle() {
    let (dim, n) = (14, 6000);
    let rows = fixed_dims14(n, 41);
    let mut r = Rng(42);
    let labels: Vec<u16> = (0..n).map(|_| r.below(2) as u16).collect();
    let mut qs = queries(&rows, dim, 1e4, -10_000, 10_000, 43);
    // Queries shaped like the rows, on the grid and a little off it.
    let shaped = fixed_dims14(40, 44);
    for q in shaped.chunks(dim) {
        qs.push(q.to_vec());
        qs.push(q.iter().map(|&x| x + 0.000_03).collect());
    }
    check_all(
        &rows,
        dim,
        Some(&labels),
        Some(1e4),
        &qs,
        &[1, 5, 17, 100],
        "fixed dimensions",
    );
    // Blocks with pairs left out: their bytes are 0, which no stored code is.
    let idx = LowDimIndex::build(&rows, dim, Some(&labels)).unwrap();
    let b = idx.as_bytes();
    let l = layout(b);
    let leaf = rd32(b, 20) as usize;
    let (pair, block) = (2 * leaf * 2, dim.div_ceil(2) * 2 * leaf * 2);
    let coords_at = l.ids_at - l.blocks * block;
    let packed = (0..l.blocks)
        .filter(|&k| {
            let last = coords_at + k * block + block - pair;
            b[last..last + pair].iter().all(|&x| x == 0)
        })
        .count();
    assert!(
        packed * 2 > l.blocks,
        "{packed} of {} blocks leave their last pair out",
        l.blocks
    );
}

/// Every leaf size the format takes gives the oracle's answers, on the
/// grid (the `u32` kernels, whole and partial 16-row chunks) and off it.
#[test]
fn every_leaf_size_matches_oracle() {
    let dim = 14;
    let rows = grid14(2500, 9);
    let n = rows.len() / dim;
    let qs = queries(&rows, dim, 1e4, 0, 10_000, 10);
    let mut r = Rng(11);
    let labels: Vec<u16> = (0..n).map(|_| r.below(3) as u16).collect();
    let oracle = Oracle::new(&rows, dim, Some(1e4), Some(&labels));
    let f32_rows: Vec<f32> = (0..600 * 5).map(|_| r.unit()).collect();
    let f32_oracle = Oracle::new(&f32_rows, 5, None, None);
    let f32_qs = queries(&f32_rows, 5, 1e4, 0, 10_000, 12);
    let mut s = LowDimScratch::default();
    for leaf in [16, 48, 64, 128, 256] {
        let idx = LowDimIndex::build_with_leaf(&rows, dim, Some(&labels), leaf).unwrap();
        let back = LowDimIndex::from_bytes(idx.as_bytes()).unwrap();
        assert_eq!(back.view().leaf_size(), leaf);
        assert_eq!(rd32(idx.as_bytes(), 20), leaf as u32);
        for (i, q) in qs.iter().enumerate() {
            let what = format!("leaf {leaf}, query {i}");
            check_query(&back.view(), &oracle, q, &[1, 5, 40, n], &mut s, &what);
        }
        let idx = LowDimIndex::build_with_leaf(&f32_rows, 5, None, leaf).unwrap();
        for (i, q) in f32_qs.iter().enumerate() {
            let what = format!("f32, leaf {leaf}, query {i}");
            check_query(&idx.view(), &f32_oracle, q, &[1, 7, 600], &mut s, &what);
        }
    }
}

#[test]
fn f32_rows_match_oracle_in_every_dim() {
    for dim in [1usize, 2, 7, 16, 17, 32] {
        let mut r = Rng(100 + dim as u64);
        let n = 1500;
        // Palettes make repeated values per dimension; copies make tied rows.
        let palette: Vec<f32> = (0..8).map(|_| r.unit() * 2.0 - 1.0).collect();
        let mut rows = Vec::with_capacity(n * dim);
        for i in 0..n {
            if i > 0 && r.below(20) == 0 {
                let j = r.below(i as u64) as usize;
                rows.extend_from_within(j * dim..(j + 1) * dim);
                continue;
            }
            for _ in 0..dim {
                rows.push(if r.below(4) == 0 {
                    palette[r.below(8) as usize]
                } else {
                    r.unit() * 2.0 - 1.0
                });
            }
        }
        let mut qs = queries(&rows, dim, 1e4, -10_000, 10_000, 200 + dim as u64);
        qs.push(vec![0.0; dim]);
        qs.push(vec![palette[0]; dim]);
        check_all(
            &rows,
            dim,
            None,
            None,
            &qs,
            &[1, 5, 17, n],
            &format!("f32 dim {dim}"),
        );
    }
}

#[test]
fn grid_rows_match_oracle_in_every_dim() {
    for dim in [1usize, 2, 7, 16, 17, 32] {
        let mut r = Rng(300 + dim as u64);
        let n = 1500;
        let rows: Vec<f32> = (0..n * dim)
            .map(|_| dec(r.below(201) as i64 - 100, 100.0))
            .collect();
        let mut r2 = Rng(400 + dim as u64);
        let labels: Vec<u16> = (0..n).map(|_| r2.below(3) as u16).collect();
        let qs = queries(&rows, dim, 100.0, -100, 100, 500 + dim as u64);
        check_all(
            &rows,
            dim,
            Some(&labels),
            Some(100.0),
            &qs,
            &[1, 5, 17, n],
            &format!("grid dim {dim}"),
        );
    }
}

/// Integer rows spanning ±m with `dim · m²` just under 2^32: the query at
/// 0 takes the exact `u32` arithmetic at its very limit (a distance of
/// almost 2^32, pairs of squares near 2^31); a query 1 off takes `f64`.
#[test]
fn integer_grid_at_the_u32_limit_matches_oracle() {
    for (dim, m) in [(2usize, 32_767i64), (4, 32_767), (8, 23_170), (32, 11_585)] {
        let worst = dim as u64 * (m * m) as u64;
        // Dim 2: each pair of squares near 2^31; the others: the sum near 2^32.
        assert!(worst <= u64::from(u32::MAX));
        assert!(dim == 2 || worst > u64::from(u32::MAX) / 10 * 9);
        let mut r = Rng(600 + dim as u64);
        let n = 1000;
        let mut rows: Vec<f32> = (0..(n - 2) * dim)
            .map(|_| (r.below(2 * m as u64 + 1) as i64 - m) as f32)
            .collect();
        rows.extend(std::iter::repeat_n(m as f32, dim));
        rows.extend(std::iter::repeat_n(-m as f32, dim));
        let mut qs = vec![vec![0.0f32; dim], vec![1.0; dim], vec![-1.0; dim]];
        qs.push(vec![m as f32; dim]);
        qs.push(rows[..dim].to_vec());
        for _ in 0..6 {
            qs.push(
                (0..dim)
                    .map(|_| (r.below(2 * m as u64 + 1) as i64 - m) as f32 / 4.0)
                    .collect(),
            );
        }
        qs.push(vec![0.5; dim]);
        check_all(
            &rows,
            dim,
            None,
            Some(1.0),
            &qs,
            &[1, 5, 17, n],
            &format!("integers ±{m} dim {dim}"),
        );
    }
}

/// Extreme `f32` values: the largest finite, subnormals, signed zeros.
#[test]
fn extreme_f32_values_match_oracle() {
    let v = [
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        0.0,
        -0.0,
        1.0,
        -1e30,
        3e38,
    ];
    let dim = 3;
    let mut r = Rng(7);
    let rows: Vec<f32> = (0..200 * dim)
        .map(|_| v[r.below(v.len() as u64) as usize])
        .collect();
    let qs: Vec<Vec<f32>> = vec![
        vec![0.0; dim],
        vec![-0.0; dim],
        vec![f32::MAX; dim],
        vec![-f32::MAX, 0.0, f32::MAX],
        vec![1e-45, -1e-45, 0.0],
        rows[..dim].to_vec(),
    ];
    check_all(&rows, dim, None, None, &qs, &[1, 5, 17, 200], "extreme f32");
    // Signed zeros on a grid are the same code.
    let rows = [0.0f32, -0.0, 0.5, -0.0, 0.0, 0.5];
    let qs = vec![vec![0.0f32, 0.0], vec![-0.0, -0.0], vec![0.5, 0.5]];
    check_all(&rows, 2, None, Some(10.0), &qs, &[1, 2, 3], "signed zeros");
}

/// Every row identical (every distance ties, the tree splits by position)
/// and row counts around the leaf size: ids must come in row order.
#[test]
fn all_ties_and_leaf_size_edges() {
    for n in [
        1usize,
        2,
        LEAF - 1,
        LEAF,
        LEAF + 1,
        2 * LEAF,
        2 * LEAF + 1,
        1000,
    ] {
        let dim = 3;
        let rows = vec![0.25f32; n * dim];
        let idx = LowDimIndex::build(&rows, dim, None).unwrap();
        let mut s = LowDimScratch::default();
        for q in [[0.25f32; 3], [0.0; 3], [7.0, -2.0, 0.125]] {
            for k in [1, n.div_ceil(2), n] {
                let got = idx.view().search(&q, k, &mut s).unwrap();
                let ids: Vec<u32> = got.iter().map(|h| h.id).collect();
                assert_eq!(ids, (0..k as u32).collect::<Vec<_>>(), "n = {n}, k = {k}");
                assert!(got.iter().all(|h| h.dist == got[0].dist));
            }
        }
        // Distinct rows at the same sizes.
        let mut r = Rng(n as u64);
        let rows: Vec<f32> = (0..n * dim).map(|_| r.unit()).collect();
        let qs = vec![vec![0.5f32; dim], rows[..dim].to_vec()];
        check_all(&rows, dim, None, None, &qs, &[1, 5, n], &format!("n = {n}"));
    }
}

/// Rows tied at the same distance from the query on both sides of a
/// split (the query midway between values), with ids shuffled across the
/// sides: a subtree whose bound equals the k-th distance must still be
/// opened, for a row in it with a lower id. Every k.
#[test]
fn symmetric_ties_across_subtrees() {
    let mut r = Rng(81);
    // Dim 1: ±1 in random order, query 0.
    let rows: Vec<f32> = (0..300)
        .map(|_| if r.below(2) == 0 { -1.0 } else { 1.0 })
        .collect();
    let qs = vec![vec![0.0f32], vec![1.0], vec![0.5]];
    let ks: Vec<usize> = (1..=300).collect();
    check_all(&rows, 1, None, Some(1.0), &qs, &ks, "±1, dim 1");
    // Dim 2 and 3: a small lattice in random order, queries at centres of
    // cells and edges (off the data's grid: compared in f64, still tied).
    for dim in [2usize, 3] {
        let rows: Vec<f32> = (0..400 * dim)
            .map(|_| dec(r.below(5) as i64 - 2, 4.0))
            .collect();
        let mut qs = vec![vec![0.0f32; dim], vec![0.125; dim], vec![-0.125; dim]];
        qs.push((0..dim).map(|d| if d == 0 { 0.125 } else { 0.0 }).collect());
        qs.push(
            (0..dim)
                .map(|d| if d == 0 { 0.25 } else { -0.375 })
                .collect(),
        );
        let ks: Vec<usize> = (1..=400).step_by(7).chain([400]).collect();
        check_all(
            &rows,
            dim,
            None,
            Some(100.0),
            &qs,
            &ks,
            &format!("lattice dim {dim}"),
        );
    }
}

/// The values of a random data set: a coarse grid (heavy ties), the 10^-4
/// grid, or plain `f32`.
fn values(kind: u8) -> BoxedStrategy<f32> {
    match kind {
        0 => (-4i64..=4).prop_map(|c| dec(c * 25, 100.0)).boxed(),
        1 => (-10_000i64..=10_000).prop_map(|c| dec(c, 1e4)).boxed(),
        _ => (-2.0f32..2.0).boxed(),
    }
}

/// Query components: on the grids, off them, far outside.
fn query_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => (-4i64..=4).prop_map(|c| dec(c * 25, 100.0)),
        3 => (-10_000i64..=10_000).prop_map(|c| dec(c, 1e4)),
        3 => -2.0f32..2.0,
        2 => (-4i64..4).prop_map(|c| dec(c * 250 + 125, 1000.0)),
        1 => prop::sample::select(vec![1e4f32, -1e4, 3.2767, -3.2767, 0.12345, 5.0]),
    ]
}

type Case = (usize, Vec<f32>, Vec<f32>, prop::sample::Index);

fn search_case() -> impl Strategy<Value = Case> {
    let dim = prop_oneof![1usize..=3, 1usize..=MAX_DIM];
    (dim, 1usize..=200, 0u8..3).prop_flat_map(|(dim, n, kind)| {
        (
            Just(dim),
            prop::collection::vec(values(kind), n * dim),
            prop::collection::vec(query_value(), dim),
            any::<prop::sample::Index>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any rows, any query, any k: exactly the oracle's answer, in the
    /// coordinate kind the data call for.
    #[test]
    fn search_matches_oracle(case in search_case()) {
        let (dim, rows, query, k) = case;
        let n = rows.len() / dim;
        let k = k.index(n) + 1;
        let idx = LowDimIndex::build(&rows, dim, None).unwrap();
        let view = idx.view();
        let grid = view.grid_scale();
        if let Some(s) = grid {
            prop_assert!(rows.iter().all(|&x| on_grid(x, s).is_some()));
            // The coarsest grid that holds every value.
            for p in 0..=4 {
                let coarser = 10f64.powi(p);
                if coarser < s {
                    prop_assert!(rows.iter().any(|&x| on_grid(x, coarser).is_none()));
                }
            }
        } else {
            // No grid: every grid 10^-p, p <= 4, misses some value.
            prop_assert!((0..=4).all(|p| rows.iter().any(|&x| on_grid(x, 10f64.powi(p)).is_none())));
        }
        let oracle = Oracle::new(&rows, dim, grid, None);
        let ranked = oracle.ranked(&query);
        let exact = grid.is_none_or(|s| s == 1.0);
        let mut s = LowDimScratch::default();
        let got = view.search(&query, k, &mut s).unwrap();
        prop_assert_eq!(got.len(), k);
        for (h, &(id, d)) in got.iter().zip(&ranked) {
            prop_assert_eq!(h.id, id);
            prop_assert!(same_dist(h.dist, d, exact), "{} vs {}", h.dist, d);
        }
    }
}

// ---------------------------------------------------------------------
// The kNN vote
// ---------------------------------------------------------------------

fn check_vote(
    view: &LowDimView<'_>,
    oracle: &Oracle,
    q: &[f32],
    k: usize,
    s: &mut LowDimScratch,
) -> usize {
    let want = oracle.vote(&oracle.ranked(q), k);
    let got = view.classify(q, k, s).unwrap();
    let got: Vec<(u16, u32, f64)> = got.iter().map(|v| (v.label, v.count, v.share)).collect();
    let want_full: Vec<(u16, u32, f64)> = want
        .iter()
        .map(|&(l, c)| (l, c, f64::from(c) / k as f64))
        .collect();
    assert_eq!(got, want_full, "k = {k}, query {q:?}");
    // How many labels tie for the top count (to see that ties occur).
    want.iter().filter(|v| v.1 == want[0].1).count()
}

#[test]
fn classify_matches_oracle_vote() {
    let dim = 14;
    let rows = grid14(2000, 11);
    let n = rows.len() / dim;
    let mut r = Rng(12);
    // Skewed labels, and some large label values.
    let labels: Vec<u16> = (0..n)
        .map(|_| match r.below(10) {
            0..=3 => 3,
            4..=6 => 1,
            7 | 8 => 40_000,
            _ => r.below(6) as u16,
        })
        .collect();
    let idx = LowDimIndex::build(&rows, dim, Some(&labels)).unwrap();
    let oracle = Oracle::new(&rows, dim, Some(1e4), Some(&labels));
    let mut s = LowDimScratch::default();
    let mut tied_tops = 0;
    for q in queries(&rows, dim, 1e4, 0, 10_000, 13) {
        for k in [1, 2, 4, 5, 6, 17, 100, n] {
            if check_vote(&idx.view(), &oracle, &q, k, &mut s) > 1 {
                tied_tops += 1;
            }
        }
    }
    assert!(tied_tops > 0, "no query had a tie for the top vote");

    // Two labels alternating by row on tied rows: every even k ties.
    let rows = vec![0.5f32; 2 * 40];
    let labels: Vec<u16> = (0..40).map(|i| if i % 2 == 0 { 9 } else { 2 }).collect();
    let idx = LowDimIndex::build(&rows, 2, Some(&labels)).unwrap();
    let got = idx
        .view()
        .classify(&[0.5, 0.5], 4, &mut s)
        .unwrap()
        .to_vec();
    assert_eq!(
        got.iter().map(|v| (v.label, v.count)).collect::<Vec<_>>(),
        vec![(2, 2), (9, 2)]
    );
    assert_eq!(got[0].share, 0.5);
    let got = idx
        .view()
        .classify(&[0.5, 0.5], 3, &mut s)
        .unwrap()
        .to_vec();
    assert_eq!(
        got.iter().map(|v| (v.label, v.count)).collect::<Vec<_>>(),
        vec![(9, 2), (2, 1)]
    );
}

#[test]
fn classify_without_labels_is_an_error() {
    let idx = LowDimIndex::build(&[0.0, 1.0, 2.0], 1, None).unwrap();
    let mut s = LowDimScratch::default();
    assert!(matches!(
        idx.view().classify(&[0.5], 1, &mut s),
        Err(LowDimError::InvalidParameter { name: "labels", .. })
    ));
}

// ---------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------

#[test]
fn bad_build_input_gives_typed_errors() {
    let b = LowDimIndex::build;
    assert!(matches!(
        b(&[0.0; 4], 0, None),
        Err(LowDimError::InvalidParameter { name: "dim", .. })
    ));
    assert!(matches!(
        b(&[0.0; 33], 33, None),
        Err(LowDimError::InvalidParameter { name: "dim", .. })
    ));
    assert!(matches!(
        b(&[0.0; 7], 3, None),
        Err(LowDimError::Dimensions {
            expected: 3,
            got: 1
        })
    ));
    assert!(matches!(b(&[], 3, None), Err(LowDimError::Empty)));
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        match b(&[0.0, 0.0, 0.0, 0.0, bad, 0.0], 3, None) {
            Err(LowDimError::Row { row: 1, source }) => {
                assert!(matches!(*source, LowDimError::NotFinite { index: 1, .. }));
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(matches!(
        b(&[0.0; 6], 3, Some(&[1][..])),
        Err(LowDimError::InvalidParameter { name: "labels", .. })
    ));
    assert!(matches!(
        b(&[0.0; 6], 3, Some(&[1, 2, 3][..])),
        Err(LowDimError::InvalidParameter { name: "labels", .. })
    ));
    // The limits themselves are fine.
    assert!(b(&[0.0; 32], 32, None).is_ok());
    assert!(b(&[0.0], 1, Some(&[7][..])).is_ok());
}

/// Values spread over many orders of magnitude: a split at the middle of
/// a range would peel off one row per level, so the builder falls back to
/// the median there. The index stays exact and shallow enough to build
/// without exhausting the stack.
#[test]
fn skewed_values_stay_exact() {
    let mut r = Rng(31);
    for dim in [1usize, 3] {
        let n = 20_000;
        let rows: Vec<f32> = (0..n * dim)
            .map(|i| {
                1.001f32.powi((i / dim) as i32 % 60_000) * if r.below(2) == 0 { 1.0 } else { -1.0 }
            })
            .collect();
        let idx = LowDimIndex::build(&rows, dim, None).unwrap();
        let oracle = Oracle::new(&rows, dim, None, None);
        let qs = queries(&rows, dim, 1e4, -10_000, 10_000, 32);
        let mut s = LowDimScratch::default();
        for (i, q) in qs.iter().enumerate() {
            let what = format!("skewed dim {dim}, query {i}");
            check_query(&idx.view(), &oracle, q, &[1, 5, 33], &mut s, &what);
        }
    }
}

#[test]
fn bad_leaf_sizes_give_typed_errors() {
    let rows: Vec<f32> = (0..100).map(|i| i as f32).collect();
    for leaf in [0, 1, 8, 24, 100, 272, 1 << 20] {
        match LowDimIndex::build_with_leaf(&rows, 2, None, leaf) {
            Err(LowDimError::InvalidParameter { name: "leaf", .. }) => {}
            other => panic!("leaf {leaf}: {other:?}"),
        }
    }
}

#[test]
fn bad_queries_give_typed_errors() {
    let idx = LowDimIndex::build(&[0.0, 0.5, 1.0, 0.25, 0.5, 0.75], 3, Some(&[1, 2])).unwrap();
    let v = idx.view();
    let mut s = LowDimScratch::default();
    for q in [&[][..], &[0.0, 0.0][..], &[0.0; 4][..]] {
        assert!(matches!(
            v.search(q, 1, &mut s),
            Err(LowDimError::Dimensions { expected: 3, got }) if got == q.len()
        ));
        assert!(matches!(
            v.classify(q, 1, &mut s),
            Err(LowDimError::Dimensions { .. })
        ));
    }
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert!(matches!(
            v.search(&[0.0, 0.0, bad], 1, &mut s),
            Err(LowDimError::NotFinite { index: 2, .. })
        ));
        assert!(matches!(
            v.classify(&[bad, 0.0, 0.0], 1, &mut s),
            Err(LowDimError::NotFinite { index: 0, .. })
        ));
    }
    assert!(matches!(
        v.search(&[0.0; 3], 0, &mut s),
        Err(LowDimError::ZeroK(0))
    ));
    assert!(matches!(
        v.search(&[0.0; 3], 3, &mut s),
        Err(LowDimError::KTooLarge { k: 3, len: 2 })
    ));
    assert!(matches!(
        v.classify(&[0.0; 3], 0, &mut s),
        Err(LowDimError::ZeroK(0))
    ));
    assert!(matches!(
        v.classify(&[0.0; 3], usize::MAX, &mut s),
        Err(LowDimError::KTooLarge { .. })
    ));
    // The scratch still works after errors.
    assert_eq!(v.search(&[0.0; 3], 2, &mut s).unwrap().len(), 2);
}

// ---------------------------------------------------------------------
// The format
// ---------------------------------------------------------------------

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn rd64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn wr32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn wr64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn add32(b: &mut [u8], at: usize, d: i64) {
    let v = (i64::from(rd32(b, at)) + d) as u32;
    wr32(b, at, v);
}

fn add64(b: &mut [u8], at: usize, d: i64) {
    let v = rd64(b, at).wrapping_add(d as u64);
    wr64(b, at, v);
}

/// Recomputes both checksums, so that only the structure checks stand
/// between damaged bytes and a search.
fn reseal(b: &mut [u8]) {
    if b.len() < 64 {
        return;
    }
    let body = crc32c::crc32c(&b[64..]);
    wr32(b, 56, body);
    let head = crc32c::crc32c(&b[..60]);
    wr32(b, 60, head);
}

/// Where the arrays sit, computed here from docs/FORMAT.md.
#[derive(Debug)]
struct Layout {
    nodes: usize,
    blocks: usize,
    rows: usize,
    ids_at: usize,
    end: usize,
}

fn layout(b: &[u8]) -> Layout {
    let up = |x: usize| x.div_ceil(64) * 64;
    let kind = rd32(b, 12) & 0xffff;
    let labels = (rd32(b, 12) >> 16) & 1 == 1;
    let dim = rd32(b, 16) as usize;
    let rows = rd64(b, 24) as usize;
    let nodes = rd32(b, 32) as usize;
    let blocks = rd32(b, 36) as usize;
    let leaf = rd32(b, 20) as usize;
    let (size, block) = if kind == 1 {
        (2, dim.div_ceil(2) * 2 * leaf)
    } else {
        (4, dim * leaf)
    };
    let bdim = if dim <= 16 { 16 } else { 32 };
    let boxes_at = up(64 + nodes * 8);
    let coords_at = up(boxes_at + nodes * 2 * bdim * size);
    let ids_at = up(coords_at + blocks * block * size);
    let labels_at = up(ids_at + blocks * leaf * 4);
    let end = if labels {
        labels_at + blocks * leaf * 2
    } else {
        ids_at + blocks * leaf * 4
    };
    Layout {
        nodes,
        blocks,
        rows,
        ids_at,
        end,
    }
}

/// A copy of `bytes` starting `shift` bytes past an 8-byte boundary.
#[derive(Debug)]
struct Shifted {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Shifted {
    fn new(bytes: &[u8], shift: usize) -> Shifted {
        let mut buf = vec![0u8; bytes.len() + 16];
        let at = buf.as_ptr().align_offset(8) + shift;
        assert!(at < 16);
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        Shifted {
            buf,
            at,
            len: bytes.len(),
        }
    }
}

impl AsRef<[u8]> for Shifted {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

/// Answers to a fixed set of queries, to compare two views.
fn answers(view: &LowDimView<'_>) -> Vec<(u32, u64, u16)> {
    let mut s = LowDimScratch::default();
    let mut out = Vec::new();
    for q in [0.0f32, 0.3, 0.5, 1.0, 0.12345, 1e4] {
        let q = vec![q; view.dim()];
        for k in [1, view.len()] {
            for h in view.search(&q, k, &mut s).unwrap() {
                out.push((h.id, h.dist.to_bits(), h.label));
            }
        }
    }
    out
}

fn grid_index(n: usize, dim: usize, seed: u64, with_labels: bool) -> LowDimIndex {
    let mut r = Rng(seed);
    let rows: Vec<f32> = (0..n * dim)
        .map(|_| dec(r.below(101) as i64, 100.0))
        .collect();
    let labels: Vec<u16> = (0..n).map(|_| r.below(4) as u16).collect();
    LowDimIndex::build(&rows, dim, with_labels.then_some(&labels[..])).unwrap()
}

fn f32_index(n: usize, dim: usize, seed: u64) -> LowDimIndex {
    let mut r = Rng(seed);
    let rows: Vec<f32> = (0..n * dim).map(|_| r.unit()).collect();
    LowDimIndex::build(&rows, dim, None).unwrap()
}

#[test]
fn bytes_follow_the_documented_header_and_round_trip() {
    for (idx, kind, labels) in [
        (grid_index(300, 5, 21, true), 1u32, true),
        (grid_index(300, 17, 22, false), 1, false),
        (f32_index(300, 3, 23), 2, false),
    ] {
        let b = idx.as_bytes();
        let l = layout(b);
        assert_eq!(&b[..8], MAGIC);
        assert_eq!(rd32(b, 8), 2, "version");
        assert_eq!(rd32(b, 12), kind | u32::from(labels) << 16);
        assert_eq!(rd32(b, 20), LEAF as u32);
        assert_eq!(l.rows, 300);
        assert_eq!(l.nodes, 2 * l.blocks - 1);
        assert!(l.blocks >= 300usize.div_ceil(LEAF));
        assert_eq!(l.end, b.len(), "arrays laid out as documented");
        assert_eq!(rd64(b, 48), (b.len() - 64) as u64);
        assert_eq!(rd32(b, 56), crc32c::crc32c(&b[64..]));
        assert_eq!(rd32(b, 60), crc32c::crc32c(&b[..60]));

        let back = LowDimIndex::from_bytes(b).unwrap();
        assert_eq!(back.as_bytes(), b);
        assert_eq!(answers(&back.view()), answers(&idx.view()));
        let copy = Shifted::new(b, 0);
        let view = LowDimView::parse(copy.as_ref()).unwrap();
        assert_eq!(answers(&view), answers(&idx.view()));
        let shared = LowDimIndex::from_shared(Arc::new(Shifted::new(b, 0))).unwrap();
        assert_eq!(answers(&shared.view()), answers(&idx.view()));
    }
}

#[test]
fn unaligned_buffers_are_refused() {
    for idx in [grid_index(100, 3, 31, true), f32_index(100, 3, 32)] {
        let want = answers(&idx.view());
        for shift in 0..8 {
            let buf = Shifted::new(idx.as_bytes(), shift);
            match LowDimView::parse(buf.as_ref()) {
                // Aligned for every array type (the widest is 4 bytes).
                Ok(view) => {
                    assert_eq!(shift % 4, 0, "shift {shift} parsed");
                    assert_eq!(answers(&view), want);
                }
                Err(LowDimError::Corrupt { .. }) => assert_ne!(shift, 0),
                Err(e) => panic!("shift {shift}: {e:?}"),
            }
            let shared = LowDimIndex::from_shared(Arc::new(Shifted::new(idx.as_bytes(), shift)));
            match shared {
                Ok(i) => {
                    assert_eq!(shift % 4, 0);
                    assert_eq!(answers(&i.view()), want);
                }
                Err(LowDimError::Corrupt { .. }) => assert_ne!(shift, 0),
                Err(e) => panic!("shift {shift}: {e:?}"),
            }
            // from_bytes copies into an aligned buffer: any shift reads.
            let copied = LowDimIndex::from_bytes(buf.as_ref()).unwrap();
            assert_eq!(answers(&copied.view()), want);
        }
    }
}

/// A parsed (possibly damaged) index: searching and voting must not panic.
fn exercise(view: &LowDimView<'_>) {
    let mut s = LowDimScratch::default();
    let len = view.len();
    for q in [0.0f32, 0.5, 1.0, -3.0, 0.12345, 1e4] {
        let q = vec![q; view.dim()];
        for k in [1, len.min(3), len] {
            let hits = view.search(&q, k, &mut s).unwrap();
            // Damaged boxes (a NaN bound) may drop subtrees: at most k.
            assert!(hits.len() <= k);
            assert!(hits.iter().all(|h| (h.id as usize) < len));
            if view.has_labels() {
                view.classify(&q, k, &mut s).unwrap();
            }
        }
    }
}

/// Parses damaged bytes both ways: `Err(Corrupt)` or a working index,
/// the same either way. Returns whether they parsed.
fn parse_damaged(bytes: &[u8]) -> bool {
    let copy = Shifted::new(bytes, 0);
    let view = LowDimView::parse(copy.as_ref());
    let owned = LowDimIndex::from_bytes(bytes);
    match (view, owned) {
        (Ok(view), Ok(owned)) => {
            exercise(&view);
            exercise(&owned.view());
            true
        }
        (Err(LowDimError::Corrupt { .. }), Err(LowDimError::Corrupt { .. })) => false,
        (a, b) => panic!("parse gave {a:?}, from_bytes gave {b:?}"),
    }
}

fn bases() -> &'static [Vec<u8>] {
    static BASES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            grid_index(300, 5, 41, true).as_bytes().to_vec(),
            f32_index(150, 3, 42).as_bytes().to_vec(),
            grid_index(10, 2, 43, false).as_bytes().to_vec(),
            grid_index(200, 20, 44, true).as_bytes().to_vec(),
        ]
    })
}

/// Header fields: (offset, width in bytes).
const FIELDS: [(usize, usize); 11] = [
    (8, 4),
    (12, 2),
    (14, 2),
    (16, 4),
    (20, 4),
    (24, 8),
    (32, 4),
    (36, 4),
    (40, 8),
    (48, 8),
    (0, 8),
];

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip(prop::sample::Index, u8),
    /// Cut the buffer short.
    Truncate(prop::sample::Index),
    /// Set a header field to a random value.
    Set(usize, u64),
    /// Add a small amount to a header field.
    Nudge(usize, i64),
    /// Write a random word anywhere in the body (a 4-byte boundary).
    Word(prop::sample::Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        2 => (0..FIELDS.len(), prop_oneof![any::<u64>(), 0u64..80]).prop_map(|(f, v)| Mutation::Set(f, v)),
        2 => (0..FIELDS.len(), -3i64..=3).prop_map(|(f, d)| Mutation::Nudge(f, d)),
        2 => (any::<prop::sample::Index>(), prop_oneof![any::<u32>(), 0u32..400, Just(0x8000_0000u32), 0x8000_0000u32..0x8000_0030]).prop_map(|(i, w)| Mutation::Word(i, w)),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Flip(ref i, mask) if !b.is_empty() => {
            let at = i.index(b.len());
            b[at] ^= mask;
        }
        Mutation::Truncate(ref i) => {
            let len = i.index(b.len().max(1));
            b.truncate(len);
        }
        Mutation::Set(f, v) if b.len() >= 64 => {
            let (at, w) = FIELDS[f];
            let bytes = v.to_le_bytes();
            b[at..at + w].copy_from_slice(&bytes[..w]);
        }
        Mutation::Nudge(f, d) if b.len() >= 64 => {
            let (at, w) = FIELDS[f];
            let mut cur = [0u8; 8];
            cur[..w].copy_from_slice(&b[at..at + w]);
            let v = u64::from_le_bytes(cur).wrapping_add(d as u64);
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        Mutation::Word(ref i, w) if b.len() >= 68 => {
            let at = 64 + i.index((b.len() - 64) / 4) * 4;
            wr32(b, at, w);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Damaged bytes, with or without the checksums recomputed: never a
    /// panic; a single flipped byte or a cut is always `Corrupt`.
    #[test]
    fn damaged_bytes_are_refused_or_harmless(
        base in 0..4usize,
        muts in prop::collection::vec(mutation(), 1..4),
        resealed in any::<bool>(),
    ) {
        let orig = &bases()[base];
        let mut b = orig.clone();
        for m in &muts {
            apply(&mut b, m);
        }
        if resealed {
            reseal(&mut b);
        }
        let parsed = parse_damaged(&b);
        let strict = match muts.as_slice() {
            [Mutation::Flip(..)] => !resealed,
            [Mutation::Truncate(_)] => true,
            _ => false,
        };
        if strict {
            prop_assert!(!parsed, "{:?} parsed", muts);
        }
        if b == *orig {
            prop_assert!(parsed);
        }
    }
}

/// A corrupt error names the byte it found wrong: the header field, the
/// node or the id; and, once the caller names it, the file.
#[test]
fn corrupt_errors_name_the_offset() {
    let idx = grid_index(400, 3, 54, true);
    let orig = idx.as_bytes().to_vec();
    let offset = |b: &[u8]| match LowDimView::parse(Shifted::new(b, 0).as_ref()) {
        Err(LowDimError::Corrupt { offset, .. }) => offset,
        other => panic!("{other:?}"),
    };
    let damaged = |at: usize, v: u32, sealed: bool| {
        let mut b = orig.clone();
        wr32(&mut b, at, v);
        if sealed {
            reseal(&mut b);
        }
        b
    };
    assert_eq!(offset(&damaged(0, 0, false)), 0, "magic");
    assert_eq!(offset(&damaged(8, 99, false)), 8, "version");
    assert_eq!(offset(&damaged(16, 4, false)), 60, "header checksum");
    assert_eq!(offset(&damaged(16, 0, true)), 16, "dim");
    assert_eq!(offset(&damaged(20, 17, true)), 20, "leaf");
    let l = layout(&orig);
    let body = l.ids_at + 4;
    let mut b = orig.clone();
    b[body] ^= 1;
    assert_eq!(offset(&b), 56, "body checksum");
    assert_eq!(
        offset(&damaged(l.ids_at + 8, l.rows as u32, true)),
        (l.ids_at + 8) as u64,
        "an id past the rows"
    );
    assert_eq!(
        offset(&damaged(64, 0, true)),
        64,
        "the root points to itself"
    );
    assert_eq!(offset(&orig[..40]), 40, "cut in the header");

    let e = LowDimIndex::from_bytes(&damaged(0, 0, false))
        .unwrap_err()
        .in_file(std::path::Path::new("refs/index.sgld"));
    assert!(matches!(
        &e,
        LowDimError::Corrupt { file: Some(f), offset: 0, .. } if f.ends_with("index.sgld")
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("refs/index.sgld") && msg.contains("bad magic"),
        "{msg}"
    );
    // Other errors pass through `in_file` as they are.
    assert_eq!(
        LowDimError::ZeroK(0).in_file(std::path::Path::new("x")),
        LowDimError::ZeroK(0)
    );
}

/// Structural damage with both checksums recomputed: each is `Corrupt`.
#[test]
fn crafted_structural_damage_is_corrupt() {
    for base in [
        grid_index(400, 3, 51, true),
        f32_index(400, 7, 52),
        grid_index(1000, 20, 53, false),
    ] {
        let orig = base.as_bytes().to_vec();
        let l = layout(&orig);
        assert_eq!(l.end, orig.len());
        let n = l.nodes;
        assert!(n >= 7, "need a few levels, got {n} nodes");
        fn node(i: usize, w: usize) -> usize {
            64 + 8 * i + 4 * w
        }
        let word = |i: usize, w: usize| rd32(&orig, node(i, w));
        let is_leaf = |i: usize| word(i, 1) & 0x8000_0000 != 0;
        let internal: Vec<usize> = (0..n).filter(|&i| !is_leaf(i)).collect();
        let leaves: Vec<usize> = (0..n).filter(|&i| is_leaf(i)).collect();
        let count = |i: usize| (word(i, 1) & 0x7fff_ffff) as usize;
        let second = internal[1];
        assert!(second > 0 && !is_leaf(0));
        // A leaf with spare slots, and its neighbour with a row to give.
        let short = *leaves.iter().find(|&&i| count(i) < LEAF).unwrap();
        let other = *leaves
            .iter()
            .find(|&&i| i != short && count(i) > 1)
            .unwrap();
        let (cs, co) = (count(short) as u32, count(other) as u32);
        let (l1, l2) = (leaves[1], leaves[2]);

        // Control: resealing untouched bytes parses.
        let mut same = orig.clone();
        reseal(&mut same);
        assert_eq!(same, orig);

        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        let set = |at: usize, v: u32| -> Edit { Box::new(move |b: &mut Vec<u8>| wr32(b, at, v)) };
        let root_l = word(0, 0);
        let mut cases: Vec<(&str, Edit)> = vec![
            ("root points to itself", set(node(0, 0), 0)),
            ("root's right child is the root", set(node(0, 1), 0)),
            (
                "a node points to itself",
                set(node(second, 0), second as u32),
            ),
            (
                "a node points backwards",
                set(node(second, 1), second as u32 - 1),
            ),
            ("a child past the nodes", set(node(0, 1), n as u32)),
            (
                "a child far past the nodes",
                set(node(second, 0), 0x7fff_ffff),
            ),
            ("two parents, one child", set(node(0, 1), root_l)),
            ("the root made a leaf", set(node(0, 1), 0x8000_0000 | 32)),
            (
                "the root made a leaf of block 0",
                Box::new(|b: &mut Vec<u8>| {
                    wr32(b, 64, 0);
                    wr32(b, 68, 0x8000_0000 | 5);
                }),
            ),
            ("a leaf with 0 rows", set(node(leaves[0], 1), 0x8000_0000)),
            (
                "a leaf with LEAF + 1 rows",
                set(node(leaves[1], 1), 0x8000_0000 | (LEAF as u32 + 1)),
            ),
            (
                "a leaf with 2^31 - 1 rows",
                set(node(leaves[2], 1), 0xffff_ffff),
            ),
            (
                "a leaf owning the next leaf's block",
                set(node(leaves[0], 0), word(leaves[1], 0)),
            ),
            (
                "a leaf owning a block past the end",
                set(node(*leaves.last().unwrap(), 0), l.blocks as u32),
            ),
            (
                "a leaf owning a huge block",
                set(node(leaves[3], 0), 0x7fff_fff0),
            ),
            (
                "two leaves' blocks swapped",
                Box::new(move |b: &mut Vec<u8>| {
                    let (x, y) = (rd32(b, node(l1, 0)), rd32(b, node(l2, 0)));
                    wr32(b, node(l1, 0), y);
                    wr32(b, node(l2, 0), x);
                }),
            ),
            ("a row id equal to the rows", set(l.ids_at, l.rows as u32)),
            (
                "a row id of u32::MAX in a spare slot",
                set(
                    l.ids_at + 4 * (rd32(&orig, node(short, 0)) as usize * LEAF + LEAF - 1),
                    u32::MAX,
                ),
            ),
            (
                "a row held twice, another missing",
                set(l.ids_at + 4, rd32(&orig, l.ids_at)),
            ),
            (
                "rows moved between leaves (one held twice, one missing)",
                Box::new(move |b: &mut Vec<u8>| {
                    wr32(b, node(short, 1), 0x8000_0000 | (cs + 1));
                    wr32(b, node(other, 1), 0x8000_0000 | (co - 1));
                }),
            ),
            // Header counts.
            (
                "one block too many",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, 1);
                    add32(b, 32, 2);
                }),
            ),
            (
                "one block too many, body grown to match",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, 1);
                    add32(b, 32, 2);
                    let want = layout(b).end;
                    b.resize(want, 0);
                    wr64(b, 48, (want - 64) as u64);
                }),
            ),
            (
                "one block too few",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, -1);
                    add32(b, 32, -2);
                }),
            ),
            (
                "nodes not 2 blocks - 1",
                Box::new(|b: &mut Vec<u8>| add32(b, 32, 1)),
            ),
            (
                "one row fewer",
                Box::new(|b: &mut Vec<u8>| add64(b, 24, -1)),
            ),
            ("one row more", Box::new(|b: &mut Vec<u8>| add64(b, 24, 1))),
            ("no rows", Box::new(|b: &mut Vec<u8>| wr64(b, 24, 0))),
            (
                "2^32 rows",
                Box::new(|b: &mut Vec<u8>| wr64(b, 24, 1 << 32)),
            ),
            (
                "blocks 0",
                Box::new(|b: &mut Vec<u8>| {
                    wr32(b, 36, 0);
                    wr32(b, 32, u32::MAX);
                }),
            ),
            (
                "body length off",
                Box::new(|b: &mut Vec<u8>| add64(b, 48, 64)),
            ),
            ("dim 0", Box::new(|b: &mut Vec<u8>| wr32(b, 16, 0))),
            ("dim 33", Box::new(|b: &mut Vec<u8>| wr32(b, 16, 33))),
            ("two more dims", Box::new(|b: &mut Vec<u8>| add32(b, 16, 2))),
            ("leaf 16", Box::new(|b: &mut Vec<u8>| wr32(b, 20, 16))),
            ("kind 0", Box::new(|b: &mut Vec<u8>| b[12] = 0)),
            ("kind 3", Box::new(|b: &mut Vec<u8>| b[12] = 3)),
            (
                "the other kind",
                Box::new(|b: &mut Vec<u8>| b[12] = 3 - b[12]),
            ),
            ("unknown flag", Box::new(|b: &mut Vec<u8>| b[14] |= 2)),
            (
                "labels flag toggled",
                Box::new(|b: &mut Vec<u8>| b[14] ^= 1),
            ),
            (
                "scale 0",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, 0f64.to_bits())),
            ),
            (
                "scale -1",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, (-1f64).to_bits())),
            ),
            (
                "scale NaN",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, f64::NAN.to_bits())),
            ),
            (
                "scale inf",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, f64::INFINITY.to_bits())),
            ),
            ("version 0", Box::new(|b: &mut Vec<u8>| wr32(b, 8, 0))),
            ("version 3", Box::new(|b: &mut Vec<u8>| wr32(b, 8, 3))),
            ("bad magic", Box::new(|b: &mut Vec<u8>| b[0] = b'X')),
            (
                "cut in the body",
                Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 1)),
            ),
            (
                "cut to the header",
                Box::new(|b: &mut Vec<u8>| b.truncate(64)),
            ),
            (
                "cut in the header",
                Box::new(|b: &mut Vec<u8>| b.truncate(40)),
            ),
        ];
        if l.nodes > 2 * LEAF {
            cases.push((
                "a deeper node points backwards",
                set(node(internal[3], 0), internal[2] as u32),
            ));
        }
        for (what, edit) in &cases {
            let mut b = orig.clone();
            edit(&mut b);
            assert_ne!(b, orig, "{what}: no change");
            // Unsealed, the checksums catch it (or the first checks do).
            assert!(!parse_damaged(&b), "{what} (checksums stale) parsed");
            reseal(&mut b);
            let copy = Shifted::new(&b, 0);
            match LowDimView::parse(copy.as_ref()) {
                Err(LowDimError::Corrupt {
                    file,
                    offset,
                    reason,
                }) => {
                    assert!(!reason.is_empty());
                    assert_eq!(file, None);
                    assert!(offset as usize <= b.len(), "{what}: offset {offset}");
                }
                Ok(_) => panic!("{what}: parsed"),
                Err(e) => panic!("{what}: {e:?}"),
            }
            assert!(
                matches!(
                    LowDimIndex::from_bytes(&b),
                    Err(LowDimError::Corrupt { .. })
                ),
                "{what}"
            );
        }
    }
}

/// Damage the structure checks cannot see (a box that does not hold its
/// rows, coordinates moved anywhere, non-finite `f32` coordinates): the
/// answers may be wrong, but searching never panics or reads out of
/// bounds.
#[test]
fn undetectable_damage_is_harmless() {
    for base in [
        grid_index(400, 3, 61, true),
        f32_index(400, 7, 62),
        grid_index(300, 20, 63, true),
    ] {
        let orig = base.as_bytes().to_vec();
        let l = layout(&orig);
        let boxes_at = (64 + l.nodes * 8).div_ceil(64) * 64;
        let f32_kind = orig[12] == 2;
        let mut words: Vec<u32> = vec![0, 0x7fff_7fff, 0x8000_8000, 0x8001_8001, u32::MAX];
        if f32_kind {
            words.extend([f32::NAN, f32::INFINITY, -f32::MAX, f32::MAX].map(f32::to_bits));
        }
        for w in words {
            // Every box corner word, then every coordinate word.
            for region in [boxes_at..boxes_at + 256, boxes_at..l.ids_at] {
                let mut b = orig.clone();
                let all = region.len() <= 256;
                for at in region.step_by(4) {
                    if all || at % 12 == 0 {
                        wr32(&mut b, at, w);
                    }
                }
                reseal(&mut b);
                assert!(parse_damaged(&b), "word {w:#x}: the structure is intact");
            }
        }
    }
}

// ---------------------------------------------------------------------
// Frozen files of every version
// ---------------------------------------------------------------------

/// The data of `tests/data/lowdim-v1-grid.sgld`: 200 rows of dim 5 on the
/// 10^-2 grid in [-1, 1], some rows repeated, labels 0..=3. Do not change.
fn frozen_grid_data() -> (Vec<f32>, Vec<u16>) {
    let (n, dim) = (200, 5);
    let mut r = Rng(0x5EED_0001);
    let mut rows = Vec::with_capacity(n * dim);
    for i in 0..n {
        if i % 17 == 16 {
            let j = r.below(i as u64) as usize;
            rows.extend_from_within(j * dim..(j + 1) * dim);
        } else {
            rows.extend((0..dim).map(|_| dec(r.below(201) as i64 - 100, 100.0)));
        }
    }
    let labels = (0..n).map(|_| r.below(4) as u16).collect();
    (rows, labels)
}

/// The data of `tests/data/lowdim-v1-f32.sgld`: 150 rows of dim 3 of
/// plain `f32` in [0, 1), no labels. Do not change.
fn frozen_f32_data() -> Vec<f32> {
    let mut r = Rng(0x5EED_0002);
    (0..150 * 3).map(|_| r.unit()).collect()
}

const FROZEN_GRID: &[u8] = include_bytes!("data/lowdim-v1-grid.sgld");
const FROZEN_F32: &[u8] = include_bytes!("data/lowdim-v1-f32.sgld");
const FROZEN_V2_GRID: &[u8] = include_bytes!("data/lowdim-v2-grid.sgld");
const FROZEN_V2_F32: &[u8] = include_bytes!("data/lowdim-v2-f32.sgld");
const FROZEN_V2_FIXED: &[u8] = include_bytes!("data/lowdim-v2-fixed.sgld");

/// The data of `tests/data/lowdim-v2-fixed.sgld`: 400 rows of
/// [`fixed_dims14`] (leaves that fix dimensions), labels 0 and 1. Do not
/// change.
fn frozen_fixed_data() -> (Vec<f32>, Vec<u16>) {
    let rows = fixed_dims14(400, 0x5EED_0003);
    let mut r = Rng(0x5EED_0004);
    let labels = (0..400).map(|_| r.below(2) as u16).collect();
    (rows, labels)
}

/// Writes the frozen files of the current version. Never overwrites one
/// that has bytes: empty it on purpose to write it again (the files must
/// exist, if empty, for this test file to compile).
#[test]
#[ignore = "writes the frozen files of the current version; run once, commit them"]
fn write_frozen_files() {
    use std::io::Write;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    std::fs::create_dir_all(dir).unwrap();
    let v = sagitta_lowdim::FORMAT_VERSION;
    let (rows, labels) = frozen_grid_data();
    let grid = LowDimIndex::build(&rows, 5, Some(&labels)).unwrap();
    let f32s = LowDimIndex::build(&frozen_f32_data(), 3, None).unwrap();
    let (rows, labels) = frozen_fixed_data();
    let fixed = LowDimIndex::build(&rows, 14, Some(&labels)).unwrap();
    for (name, idx) in [("grid", grid), ("f32", f32s), ("fixed", fixed)] {
        let path = format!("{dir}/lowdim-v{v}-{name}.sgld");
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            continue;
        }
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(idx.as_bytes()).unwrap();
    }
}

/// Checks a frozen grid file against the oracle over its data.
fn check_frozen_grid(bytes: &[u8], rows: &[f32], labels: &[u16], dim: usize, what: &str) {
    let n = rows.len() / dim;
    let idx = LowDimIndex::from_bytes(bytes).unwrap();
    let view = idx.view();
    assert_eq!((view.dim(), view.len()), (dim, n), "{what}");
    let scale = view.grid_scale().expect("a grid file");
    assert!(view.has_labels());
    let oracle = Oracle::new(rows, dim, Some(scale), Some(labels));
    let mut qs: Vec<Vec<f32>> = rows.chunks(dim).map(<[f32]>::to_vec).collect();
    let span = if scale == 100.0 { 100 } else { 10_000 };
    qs.extend(queries(rows, dim, scale, -span, span, 71));
    let mut s = LowDimScratch::default();
    for (i, q) in qs.iter().enumerate() {
        check_query(
            &view,
            &oracle,
            q,
            &[1, 5, 17, n],
            &mut s,
            &format!("{what}, query {i}"),
        );
        for k in [1, 5, 17] {
            check_vote(&view, &oracle, q, k, &mut s);
        }
    }
    // Memory-mapped style: parsed in place.
    let copy = Shifted::new(bytes, 0);
    assert_eq!(
        answers(&LowDimView::parse(copy.as_ref()).unwrap()),
        answers(&view),
        "{what}"
    );
}

/// Checks a frozen `f32` file against the oracle over its data.
fn check_frozen_f32(bytes: &[u8], what: &str) {
    let rows = frozen_f32_data();
    let idx = LowDimIndex::from_bytes(bytes).unwrap();
    let view = idx.view();
    assert_eq!((view.dim(), view.len()), (3, 150));
    assert_eq!(view.grid_scale(), None);
    assert!(!view.has_labels());
    let oracle = Oracle::new(&rows, 3, None, None);
    let mut qs: Vec<Vec<f32>> = rows.chunks(3).map(<[f32]>::to_vec).collect();
    qs.extend(queries(&rows, 3, 1e4, 0, 10_000, 72));
    let mut s = LowDimScratch::default();
    for (i, q) in qs.iter().enumerate() {
        check_query(
            &view,
            &oracle,
            q,
            &[1, 5, 17, 150],
            &mut s,
            &format!("{what}, query {i}"),
        );
    }
}

#[test]
fn frozen_v1_files_read_back() {
    for bytes in [FROZEN_GRID, FROZEN_F32] {
        assert_eq!(&bytes[..8], b"SGLOWDIM");
        assert_eq!(rd32(bytes, 8), 1, "a version-1 file");
        // Written with 32 rows per leaf, before builds took 64.
        assert_eq!(rd32(bytes, 20), 32, "leaf size");
        let idx = LowDimIndex::from_bytes(bytes).unwrap();
        assert_eq!(idx.view().leaf_size(), 32);
        assert_eq!(idx.view().format_version(), 1);
    }
    let (rows, labels) = frozen_grid_data();
    check_frozen_grid(FROZEN_GRID, &rows, &labels, 5, "frozen v1 grid");
    check_frozen_f32(FROZEN_F32, "frozen v1 f32");
}

/// Version 2: grid leaves store only the dimensions their box does not
/// fix (the `fixed` file has many such leaves); `f32` files are laid out
/// as in version 1.
#[test]
fn frozen_v2_files_read_back() {
    for bytes in [FROZEN_V2_GRID, FROZEN_V2_F32, FROZEN_V2_FIXED] {
        assert_eq!(&bytes[..8], b"SGLOWDIM");
        assert_eq!(rd32(bytes, 8), 2, "a version-2 file");
        assert_eq!(rd32(bytes, 20), 64, "leaf size");
        let idx = LowDimIndex::from_bytes(bytes).unwrap();
        assert_eq!(idx.view().format_version(), 2);
    }
    let (rows, labels) = frozen_grid_data();
    check_frozen_grid(FROZEN_V2_GRID, &rows, &labels, 5, "frozen v2 grid");
    check_frozen_f32(FROZEN_V2_F32, "frozen v2 f32");
    let (rows, labels) = frozen_fixed_data();
    check_frozen_grid(FROZEN_V2_FIXED, &rows, &labels, 14, "frozen v2 fixed");
    // The version-1 file of the same data searches the same.
    let v1 = LowDimIndex::from_bytes(FROZEN_GRID).unwrap();
    let v2 = LowDimIndex::from_bytes(FROZEN_V2_GRID).unwrap();
    assert_eq!(answers(&v1.view()), answers(&v2.view()));
}
