//! Compact codes with full-precision rows (the default storage of float
//! HNSW indexes): the graph is traversed over sq8 / f16 codes and the beam
//! re-scored from f32 rows, so results carry exact f32 distances and reach
//! the recall of an f32 graph. Checked against the Flat f32 oracle.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{
    DType, GraphView, HnswParams, Index, IndexKind, IndexRead, IndexWrite, Metric, SearchOptions,
    Space, VectorRef,
};

fn data(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed | 1;
    let mut f = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let centers: Vec<Vec<f32>> = (0..24).map(|_| (0..dims).map(|_| f()).collect()).collect();
    (0..n)
        .map(|i| centers[i % 24].iter().map(|c| c + 0.4 * f()).collect())
        .collect()
}

fn build(space: Space, kind: IndexKind, full: bool, rows: &[Vec<f32>]) -> Index {
    let idx = Index::new(space, kind, HnswParams::default()).unwrap();
    let idx = if full {
        idx.keep_full_precision().unwrap()
    } else {
        idx
    };
    let keys: Vec<u64> = (0..rows.len() as u64).collect();
    let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    // One thread: the graph, and so the recall compared, is reproducible.
    idx.add_batch(&keys, &vecs, 1).unwrap();
    idx
}

#[test]
fn sq8_codes_with_f32_rows_give_exact_distances_and_f32_recall() {
    let (n, dims, k) = (4000, 48, 10);
    let unit = |v: Vec<Vec<f32>>| -> Vec<Vec<f32>> {
        v.into_iter()
            .map(|r| {
                let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                r.into_iter().map(|x| x / n).collect()
            })
            .collect()
    };
    for metric in [Metric::Cos, Metric::L2, Metric::Ip] {
        // Inner product is searched over unit vectors (as it is used).
        let (rows, queries) = if metric == Metric::Ip {
            (unit(data(n, dims, 7)), unit(data(200, dims, 99)))
        } else {
            (data(n, dims, 7), data(200, dims, 99))
        };
        let f32s = Space::new(dims, metric, DType::F32).unwrap();
        let oracle = build(f32s, IndexKind::Flat, false, &rows);
        let plain = build(f32s, IndexKind::Hnsw, false, &rows);
        let codes = build(
            Space::new(dims, metric, DType::Sq8).unwrap(),
            IndexKind::Hnsw,
            true,
            &rows,
        );
        let bare = build(
            Space::new(dims, metric, DType::Sq8).unwrap(),
            IndexKind::Hnsw,
            false,
            &rows,
        );
        let o = SearchOptions::default();
        let (mut hit_codes, mut hit_plain, mut hit_bare, mut total) = (0, 0, 0, 0);
        for q in &queries {
            let q = VectorRef::F32(q);
            let truth = oracle.search(q, k, &o).unwrap();
            let got = codes.search(q, k, &o).unwrap();
            // Every returned distance is the exact f32 one.
            for n in &got {
                let only = oracle.filter_for_keys(&[n.key]);
                let exact = oracle
                    .search(
                        q,
                        1,
                        &SearchOptions {
                            filter: Some(&only),
                            ..o
                        },
                    )
                    .unwrap()[0];
                assert!(
                    (exact.distance - n.distance).abs() <= 1e-5 * exact.distance.abs().max(1.0),
                    "{metric:?}: key {} at {} but exactly {}",
                    n.key,
                    n.distance,
                    exact.distance
                );
            }
            let has = |r: &[sagitta_index::Neighbor], key| r.iter().any(|x| x.key == key);
            let p = plain.search(q, k, &o).unwrap();
            let b = bare.search(q, k, &o).unwrap();
            for t in &truth {
                hit_codes += usize::from(has(&got, t.key));
                hit_plain += usize::from(has(&p, t.key));
                hit_bare += usize::from(has(&b, t.key));
                total += 1;
            }
        }
        let (rc, rp, rb) = (
            hit_codes as f64 / total as f64,
            hit_plain as f64 / total as f64,
            hit_bare as f64 / total as f64,
        );
        // The rerank recovers what the codes alone lose.
        assert!(rc >= 0.9, "{metric:?}: recall with rerank {rc}");
        assert!(rc >= rp - 0.02, "{metric:?}: rerank {rc} vs f32 graph {rp}");
        assert!(
            rc >= rb - 0.01,
            "{metric:?}: rerank {rc} vs codes alone {rb}"
        );
    }
}

#[test]
fn refine_zero_returns_code_distances_and_exact_reads_the_f32_rows() {
    let (dims, k) = (32, 5);
    let rows = data(1500, dims, 3);
    let space = Space::new(dims, Metric::Cos, DType::Sq8).unwrap();
    let idx = build(space, IndexKind::Hnsw, true, &rows);
    let oracle = build(
        Space::new(dims, Metric::Cos, DType::F32).unwrap(),
        IndexKind::Flat,
        false,
        &rows,
    );
    let q = VectorRef::F32(&rows[17]);
    let exact = idx
        .search(
            q,
            k,
            &SearchOptions {
                exact: true,
                ..Default::default()
            },
        )
        .unwrap();
    let truth = oracle.search(q, k, &SearchOptions::default()).unwrap();
    assert_eq!(
        exact.iter().map(|n| n.key).collect::<Vec<_>>(),
        truth.iter().map(|n| n.key).collect::<Vec<_>>()
    );
    for (a, b) in exact.iter().zip(&truth) {
        assert!((a.distance - b.distance).abs() < 1e-6);
    }
    let coded = idx
        .search(
            q,
            k,
            &SearchOptions {
                refine: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let reranked = idx.search(q, k, &SearchOptions::default()).unwrap();
    // Without the rerank the distances are the codes' (not the f32 ones).
    assert!(coded
        .iter()
        .zip(&reranked)
        .any(|(a, b)| a.distance != b.distance));
    // get returns the kept f32 row as given (cosine included), not the
    // codes.
    assert_eq!(idx.get(17).unwrap(), rows[17]);
}

#[test]
fn an_imported_graph_keeps_its_full_rows() {
    let dims = 16;
    let rows = data(800, dims, 11);
    let space = Space::new(dims, Metric::L2, DType::Sq8).unwrap();
    let src = build(space, IndexKind::Hnsw, true, &rows);
    let view = src.view();
    let copy = Index::from_graph(space, HnswParams::default(), &view, &|_| true, 10).unwrap();
    drop(view);
    assert!(copy.keeps_full_precision());
    for key in [0u64, 399, 799] {
        assert_eq!(copy.get(key), src.get(key));
        assert_eq!(copy.get(key).unwrap(), rows[key as usize]);
    }
    let cv = copy.view();
    assert_eq!(
        cv.full(5).map(<[u8]>::to_vec),
        src.view().full(5).map(<[u8]>::to_vec)
    );
}

#[test]
fn an_imported_graph_without_full_rows_keeps_codes_and_links() {
    let dims = 16;
    let rows = data(800, dims, 11);
    let space = Space::new(dims, Metric::L2, DType::Sq8).unwrap();
    let src = build(space, IndexKind::Hnsw, true, &rows);
    let (view, params) = (src.view(), HnswParams::default());
    let copy = Index::from_graph_codes(space, params, &view, &|_| true, 10).unwrap();
    let full = Index::from_graph(space, params, &view, &|_| true, 10).unwrap();
    drop(view);
    assert!(!copy.keeps_full_precision() && full.keeps_full_precision());
    let (cv, fv) = (copy.view(), full.view());
    assert!(cv.full(5).is_none());
    let mut buf = (Vec::new(), Vec::new());
    for s in [0u32, 5, 399, 799] {
        assert_eq!(cv.vector(s), fv.vector(s));
        assert_eq!(cv.key(s), fv.key(s));
        cv.neighbors(0, s, &mut buf.0);
        fv.neighbors(0, s, &mut buf.1);
        assert_eq!(buf.0, buf.1);
    }
    drop((cv, fv));
    // Searches over the codes alone find the same neighbourhoods.
    let q = VectorRef::F32(&rows[123]);
    let opts = SearchOptions::default();
    assert_eq!(copy.search(q, 1, &opts).unwrap()[0].key, 123);
}

fn with(filter: &sagitta_index::Bitset, exact: bool, refine: Option<usize>) -> SearchOptions<'_> {
    SearchOptions {
        filter: Some(filter),
        exact,
        refine,
        ..SearchOptions::default()
    }
}

/// A selective filter over sq8 codes with f32 rows: the allowed codes are
/// scanned and the best re-scored (`Plan::Scan`). Every hit is allowed,
/// carries its exact f32 distance, and the answer matches the Flat oracle
/// over the same rows; `exact: true` scans the f32 rows and matches it
/// exactly; `refine: 0` leaves the codes' own distances.
#[test]
fn selective_filters_scan_the_codes_and_rescore_the_best() {
    let (n, dims, k) = (6000, 48, 10);
    let rows = data(n, dims, 21);
    let queries = data(100, dims, 22);
    let f32s = Space::new(dims, Metric::Cos, DType::F32).unwrap();
    let oracle = build(f32s, IndexKind::Flat, false, &rows);
    let codes = build(
        Space::new(dims, Metric::Cos, DType::Sq8).unwrap(),
        IndexKind::Hnsw,
        true,
        &rows,
    );
    // Every 20th row, some of them deleted: 5% allowed, a scan's share.
    let allowed: Vec<u64> = (0..n as u64).step_by(20).collect();
    for key in allowed.iter().step_by(7) {
        assert!(codes.remove(*key));
        assert!(oracle.remove(*key));
    }
    let (fc, fo) = (
        codes.filter_for_keys(&allowed),
        oracle.filter_for_keys(&allowed),
    );
    let (mut hits, mut total, mut code_dists) = (0, 0, 0);
    for q in &queries {
        let q = VectorRef::F32(q);
        let truth = oracle.search(q, k, &with(&fo, false, None)).unwrap();
        let got = codes.search(q, k, &with(&fc, false, None)).unwrap();
        assert_eq!(got.len(), k);
        for g in &got {
            assert!(
                g.key % 20 == 0 && g.key % 140 != 0,
                "key {} not allowed",
                g.key
            );
            let only = oracle.filter_for_keys(&[g.key]);
            let d = oracle.search(q, 1, &with(&only, false, None)).unwrap()[0];
            assert!(
                (d.distance - g.distance).abs() <= 1e-5,
                "key {}: {} against exactly {}",
                g.key,
                g.distance,
                d.distance
            );
        }
        hits += truth
            .iter()
            .filter(|t| got.iter().any(|g| g.key == t.key))
            .count();
        total += k;
        let exact = codes.search(q, k, &with(&fc, true, None)).unwrap();
        let same = |a: &[sagitta_index::Neighbor], b: &[sagitta_index::Neighbor]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.key == y.key && (x.distance - y.distance).abs() <= 1e-5)
        };
        assert!(same(&exact, &truth), "exact: {exact:?} against {truth:?}");
        // A re-scoring depth under k still answers k rows.
        let shallow = codes.search(q, k, &with(&fc, false, Some(5))).unwrap();
        assert_eq!(shallow.len(), k);
        let raw = codes.search(q, k, &with(&fc, false, Some(0))).unwrap();
        assert_eq!(raw.len(), k);
        code_dists += raw
            .iter()
            .zip(&truth)
            .filter(|(r, t)| r.key == t.key && r.distance != t.distance)
            .count();
    }
    let recall = hits as f64 / total as f64;
    assert!(recall >= 0.99, "filtered scan recall {recall}");
    assert!(
        code_dists > 0,
        "refine 0 should return the codes' distances"
    );
}
