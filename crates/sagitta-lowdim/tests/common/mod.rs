//! What the low-dimensional index tests share: deterministic data (the
//! frozen files' data come from it: never change it), the brute-force
//! oracle, and query and index builders.

#![allow(dead_code, clippy::unwrap_used)]

use sagitta_lowdim::{LowDimIndex, LowDimScratch, LowDimView};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------

/// SplitMix64. The frozen files' data are drawn from it: never change it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [0, 1) with 24 random bits: almost never a short decimal.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The `f32` that stands for the decimal `code / scale`.
pub fn dec(code: i64, scale: f64) -> f32 {
    (code as f64 / scale) as f32
}

// ---------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------

/// `x`'s integer code on the grid of `scale` when `x` is exactly the
/// decimal `code / scale` with `|code| ≤ 32767` (what the module calls
/// "on the grid").
pub fn on_grid(x: f32, scale: f64) -> Option<f64> {
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
pub struct Oracle {
    pub dim: usize,
    pub scale: Option<f64>,
    pub rows: Vec<f64>,
    pub labels: Option<Vec<u16>>,
}

impl Oracle {
    pub fn new(rows: &[f32], dim: usize, scale: Option<f64>, labels: Option<&[u16]>) -> Oracle {
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

    pub fn len(&self) -> usize {
        self.rows.len() / self.dim
    }

    /// Every row as (id, distance in value units), nearest first.
    pub fn ranked(&self, query: &[f32]) -> Vec<(u32, f64)> {
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

    pub fn label(&self, id: u32) -> u16 {
        self.labels.as_ref().map_or(0, |l| l[id as usize])
    }

    /// The kNN vote over the `k` nearest: (label, count), most frequent
    /// first, equal counts by the smaller label.
    pub fn vote(&self, ranked: &[(u32, f64)], k: usize) -> Vec<(u16, u32)> {
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
pub fn same_dist(got: f64, want: f64, exact: bool) -> bool {
    if exact {
        got == want
    } else {
        got == want || (got - want).abs() <= 4.0 * f64::EPSILON * got.abs().max(want.abs())
    }
}

/// Checks `view`'s answers to `query` for every k in `ks` (clamped to the
/// rows) against the oracle: ids and labels exactly, distances as
/// [`same_dist`].
pub fn check_query(
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
pub fn check_all(
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
pub fn grid14(n: usize, seed: u64) -> Vec<f32> {
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
pub fn queries(rows: &[f32], dim: usize, scale: f64, lo: i64, hi: i64, seed: u64) -> Vec<Vec<f32>> {
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

/// Rows of dim 14 shaped like the fraud contest's: most dimensions take a
/// handful of values (leaves fix them: their box has low = high there, and
/// a version-2 block leaves them out), two are fine-grained, and no code is
/// 0 (so a block's all-zero pair is one it does not store).
pub fn fixed_dims14(n: usize, seed: u64) -> Vec<f32> {
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

pub fn grid_index(n: usize, dim: usize, seed: u64, with_labels: bool) -> LowDimIndex {
    let mut r = Rng(seed);
    let rows: Vec<f32> = (0..n * dim)
        .map(|_| dec(r.below(101) as i64, 100.0))
        .collect();
    let labels: Vec<u16> = (0..n).map(|_| r.below(4) as u16).collect();
    LowDimIndex::build(&rows, dim, with_labels.then_some(&labels[..])).unwrap()
}

pub fn f32_index(n: usize, dim: usize, seed: u64) -> LowDimIndex {
    let mut r = Rng(seed);
    let rows: Vec<f32> = (0..n * dim).map(|_| r.unit()).collect();
    LowDimIndex::build(&rows, dim, None).unwrap()
}

pub fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn rd64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pub fn wr32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn wr64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn add32(b: &mut [u8], at: usize, d: i64) {
    let v = (i64::from(rd32(b, at)) + d) as u32;
    wr32(b, at, v);
}

pub fn add64(b: &mut [u8], at: usize, d: i64) {
    let v = rd64(b, at).wrapping_add(d as u64);
    wr64(b, at, v);
}

/// Recomputes both checksums, so that only the structure checks stand
/// between damaged bytes and a search.
pub fn reseal(b: &mut [u8]) {
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
pub struct Layout {
    pub nodes: usize,
    pub blocks: usize,
    pub rows: usize,
    pub ids_at: usize,
    pub end: usize,
}

pub fn layout(b: &[u8]) -> Layout {
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

pub fn check_vote(
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
