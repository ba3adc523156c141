//! The low-dimensional exact index (`sagitta-lowdim`) against a
//! brute-force oracle (tests/common): exact ids and distances on decimal
//! grids and on plain `f32` rows, every query path (on the grid, off it,
//! outside the data), the kNN vote, and typed errors for bad input.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

mod common;

use common::*;
use proptest::prelude::*;
use sagitta_lowdim::LowDimError;
use sagitta_lowdim::{LowDimIndex, LowDimScratch, LEAF, MAX_DIM};
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
