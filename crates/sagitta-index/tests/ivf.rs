//! IVF-RaBitQ against the Flat oracle: recall by bits and rerank depth,
//! estimated distances, filters, deletes, training paths and bad input.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{
    Bitset, DType, Index, IndexError, IndexKind, IndexRead, IndexWrite, IvfParams, Metric,
    SearchOptions, Space, VectorRef,
};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn data(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng(seed | 1);
    let centers: Vec<Vec<f32>> = (0..32)
        .map(|_| (0..dims).map(|_| r.f32()).collect())
        .collect();
    (0..n)
        .map(|i| {
            centers[(i * 7) % 32]
                .iter()
                .map(|c| c + 0.5 * r.f32())
                .collect()
        })
        .collect()
}

fn keys(n: usize) -> Vec<u64> {
    (0..n as u64).map(|k| k * 3 + 1).collect()
}

fn build(space: Space, params: IvfParams, rows: &[Vec<f32>]) -> Index {
    let idx = Index::ivf_rq(space, params).unwrap();
    let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    idx.add_batch(&keys(rows.len()), &vecs, 0).unwrap();
    idx
}

fn flat(space: Space, rows: &[Vec<f32>]) -> Index {
    let idx = Index::flat(space).unwrap();
    let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    idx.add_batch(&keys(rows.len()), &vecs, 0).unwrap();
    idx
}

fn recall(oracle: &Index, idx: &Index, qs: &[Vec<f32>], k: usize, o: &SearchOptions<'_>) -> f64 {
    let mut hit = 0;
    for q in qs {
        let want: Vec<u64> = oracle
            .search(VectorRef::F32(q), k, &SearchOptions::default())
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        let got = idx.search(VectorRef::F32(q), k, o).unwrap();
        assert_eq!(got.len(), k);
        hit += got.iter().filter(|n| want.contains(&n.key)).count();
    }
    hit as f64 / (qs.len() * k) as f64
}

fn params(bits: u8, partitions: usize) -> IvfParams {
    IvfParams {
        bits,
        partitions: Some(partitions),
        ..IvfParams::default()
    }
}

#[test]
fn recall_against_flat_by_bits_metric_and_refine() {
    let (n, dims, k) = (3000, 100, 10);
    let rows = data(n, dims, 11);
    let qs = data(60, dims, 99);
    for metric in [Metric::L2, Metric::Ip, Metric::Cos] {
        let space = Space::new(dims, metric, DType::F32).unwrap();
        let oracle = flat(space, &rows);
        for bits in [1u8, 2, 4, 8] {
            let idx = build(space, params(bits, 8), &rows);
            assert_eq!(idx.len(), n);
            // Every partition probed: only quantization limits recall.
            let est_only = SearchOptions {
                nprobe: Some(8),
                refine: Some(0),
                ..Default::default()
            };
            let reranked = SearchOptions {
                nprobe: Some(8),
                refine: Some(5 * k),
                ..Default::default()
            };
            let r0 = recall(&oracle, &idx, &qs, k, &est_only);
            let r5 = recall(&oracle, &idx, &qs, k, &reranked);
            // Floors with margin under measured values (this synthetic data
            // has low contrast: 1-bit codes alone rank it poorly).
            let (floor0, floor5) = match bits {
                1 => (0.2, 0.55),
                2 => (0.45, 0.9),
                4 => (0.78, 0.98),
                _ => (0.95, 0.98),
            };
            assert!(
                r0 >= floor0,
                "{metric:?} bits {bits}: recall {r0} without rerank"
            );
            assert!(
                r5 >= floor5,
                "{metric:?} bits {bits}: recall {r5} with rerank 5k"
            );
            assert!(r5 >= r0, "{metric:?} bits {bits}: rerank lowered recall");
        }
    }
}

#[test]
fn estimated_distances_track_exact_ones_and_rerank_returns_exact() {
    let (dims, k) = (64, 20);
    let rows = data(2000, dims, 5);
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let idx = build(space, params(8, 4), &rows);
    let oracle = flat(space, &rows);
    for q in data(20, dims, 77) {
        let got = idx
            .search(
                VectorRef::F32(&q),
                k,
                &SearchOptions {
                    nprobe: Some(4),
                    refine: Some(0),
                    ..Default::default()
                },
            )
            .unwrap();
        for n in &got {
            let exact = oracle.distance().eval(
                &f32_bytes(&q),
                &f32_bytes(&rows[((n.key - 1) / 3) as usize]),
            );
            assert!(
                (n.distance - exact).abs() <= 0.02 * exact.max(1.0),
                "8-bit estimate {} vs exact {exact}",
                n.distance
            );
        }
        let reranked = idx
            .search(
                VectorRef::F32(&q),
                k,
                &SearchOptions {
                    nprobe: Some(4),
                    refine: Some(100),
                    ..Default::default()
                },
            )
            .unwrap();
        let want = oracle
            .search(VectorRef::F32(&q), k, &SearchOptions::default())
            .unwrap();
        // With every partition probed and a deep rerank, results are the
        // exact ones with exact distances.
        for (a, b) in reranked.iter().zip(&want) {
            assert_eq!(a.key, b.key);
            assert!((a.distance - b.distance).abs() < 1e-4 * b.distance.max(1.0));
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn filters_apply_inside_the_scan_and_never_return_fewer_than_k() {
    let dims = 32;
    let rows = data(4000, dims, 3);
    let space = Space::new(dims, Metric::Cos, DType::F32).unwrap();
    let idx = build(space, params(4, 16), &rows);
    // Allow 7 keys spread over the data set; probe one partition only:
    // the search must keep probing until it has seen them.
    let allowed: Vec<u64> = keys(4000).into_iter().step_by(571).collect();
    assert_eq!(allowed.len(), 8);
    let filter = idx.filter_for_keys(&allowed);
    for q in data(10, dims, 8) {
        let got = idx
            .search(
                VectorRef::F32(&q),
                8,
                &SearchOptions {
                    filter: Some(&filter),
                    nprobe: Some(1),
                    ..Default::default()
                },
            )
            .unwrap();
        let mut ks: Vec<u64> = got.iter().map(|n| n.key).collect();
        ks.sort_unstable();
        assert_eq!(ks, allowed);
    }
    // A filter covering more slots than the index has is refused.
    let large = Bitset::new(4001);
    let err = idx
        .search(
            VectorRef::F32(&rows[0]),
            1,
            &SearchOptions {
                filter: Some(&large),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, IndexError::FilterSize { .. }), "{err:?}");
    // One made before the index grew allows only the slots it covers
    // (the first 100 here): slots added since are not returned.
    let older = Bitset::full(100);
    let first: Vec<u64> = {
        use sagitta_index::GraphView;
        let v = idx.view();
        (0..100u32).map(|slot| v.key(slot)).collect()
    };
    for q in data(5, dims, 9) {
        let got = idx
            .search(
                VectorRef::F32(&q),
                10,
                &SearchOptions {
                    filter: Some(&older),
                    exact: true,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|n| first.contains(&n.key)), "{got:?}");
    }
}

#[test]
fn deletes_and_upserts_are_respected() {
    let dims = 48;
    let rows = data(1500, dims, 21);
    let space = Space::new(dims, Metric::L2, DType::F16).unwrap();
    let idx = build(space, params(2, 6), &rows);
    let all = SearchOptions {
        nprobe: Some(6),
        ..Default::default()
    };
    // The nearest neighbour of a stored vector is itself; after removal it
    // never comes back.
    let target = keys(1500)[10];
    let got = idx.search(VectorRef::F32(&rows[10]), 1, &all).unwrap();
    assert_eq!(got[0].key, target);
    assert!(idx.remove(target));
    let got = idx.search(VectorRef::F32(&rows[10]), 5, &all).unwrap();
    assert!(got.iter().all(|n| n.key != target));
    // Upsert moves key 4 onto row 20's vector.
    let k4 = keys(1500)[4];
    idx.upsert(k4, VectorRef::F32(&rows[20])).unwrap();
    let got = idx.search(VectorRef::F32(&rows[20]), 2, &all).unwrap();
    let ks: Vec<u64> = got.iter().map(|n| n.key).collect();
    assert!(ks.contains(&k4) && ks.contains(&keys(1500)[20]), "{ks:?}");
    let got = idx.search(VectorRef::F32(&rows[4]), 3, &all).unwrap();
    assert!(got.iter().all(|n| n.key != k4 || n.distance > 0.01));
    assert_eq!(idx.len(), 1499);
}

#[test]
fn training_paths_and_padding_edge_cases() {
    // 1100 dims: padded 1152 bits = 288 groups, more than one kernel call.
    for dims in [1, 7, 1100] {
        let rows = data(600, dims, dims as u64);
        let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
        // Explicit training on a sample, then adds.
        let idx = Index::ivf_rq(space, params(3, 4)).unwrap();
        assert!(!idx.is_trained());
        let sample: Vec<f32> = rows[..300].iter().flatten().copied().collect();
        idx.train(&sample, &mut |_| {}).unwrap();
        assert!(idx.is_trained());
        assert_eq!(idx.ivf_model().unwrap().partitions(), 4);
        for (k, r) in keys(600).iter().zip(&rows) {
            idx.add(*k, VectorRef::F32(r)).unwrap();
        }
        let oracle = flat(space, &rows);
        let r = recall(
            &oracle,
            &idx,
            &rows[..20],
            5,
            &SearchOptions {
                nprobe: Some(4),
                refine: Some(50),
                ..Default::default()
            },
        );
        assert!(r >= 0.97, "dims {dims}: recall {r}");
    }
    // A single add trains on its one vector; later adds still work.
    let space = Space::new(16, Metric::Ip, DType::F32).unwrap();
    let idx = Index::ivf_rq(space, IvfParams::default()).unwrap();
    idx.add(1, VectorRef::F32(&[0.5; 16])).unwrap();
    assert_eq!(idx.ivf_model().unwrap().partitions(), 1);
    idx.add(2, VectorRef::F32(&[-0.5; 16])).unwrap();
    let got = idx
        .search(VectorRef::F32(&[1.0; 16]), 2, &SearchOptions::default())
        .unwrap();
    assert_eq!(got[0].key, 1);
    // Retraining re-encodes what is stored.
    let sample: Vec<f32> = (0..64).map(|i| (i % 5) as f32 - 2.0).collect();
    idx.train(&sample, &mut |_| {}).unwrap();
    let got = idx
        .search(VectorRef::F32(&[1.0; 16]), 2, &SearchOptions::default())
        .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].key, 1);
}

#[test]
fn bad_parameters_and_inputs_get_typed_errors() {
    let space = Space::new(8, Metric::L2, DType::F32).unwrap();
    for bits in [0u8, 9] {
        let e = Index::ivf_rq(space, params(bits, 2)).unwrap_err();
        assert!(matches!(
            e,
            IndexError::InvalidParameter { name: "bits", .. }
        ));
    }
    let e = Index::ivf_rq(space, params(1, 0)).unwrap_err();
    assert!(matches!(
        e,
        IndexError::InvalidParameter {
            name: "partitions",
            ..
        }
    ));
    let bin = Space::new(64, Metric::Hamming, DType::B1).unwrap();
    assert!(Index::ivf_rq(bin, IvfParams::default()).is_err());
    let i8s = Space::new(8, Metric::L2, DType::I8).unwrap();
    assert!(Index::ivf_rq(i8s, IvfParams::default()).is_err());
    // Nothing is trained or added when the first batch is bad.
    let idx = Index::ivf_rq(space, IvfParams::default()).unwrap();
    let good = [0.1f32; 8];
    let nan = [f32::NAN; 8];
    let e = idx
        .add_batch(&[1, 2], &[VectorRef::F32(&good), VectorRef::F32(&nan)], 0)
        .unwrap_err();
    assert!(matches!(e, IndexError::Row { row: 1, .. }), "{e:?}");
    assert!(!idx.is_trained() && idx.is_empty());
    // Empty: no rows, not an error (the one k rule, `limits::check_k`).
    assert_eq!(
        idx.search(VectorRef::F32(&good), 1, &SearchOptions::default()),
        Ok(Vec::new())
    );
    let e = idx.train(&[1.0; 5], &mut |_| {}).unwrap_err();
    assert!(matches!(e, IndexError::Dimensions { .. }));
    idx.add(1, VectorRef::F32(&good)).unwrap();
    let e = idx
        .search(VectorRef::F32(&[0.0; 3]), 1, &SearchOptions::default())
        .unwrap_err();
    assert!(matches!(e, IndexError::Dimensions { .. }));
    assert!(matches!(
        idx.search(VectorRef::F32(&good), 0, &SearchOptions::default()),
        Err(IndexError::ZeroK(0))
    ));
    // k past the rows there are: every row.
    let all = idx
        .search(VectorRef::F32(&good), 2, &SearchOptions::default())
        .unwrap();
    assert_eq!(all.iter().map(|n| n.key).collect::<Vec<_>>(), [1]);
    assert!(idx
        .search(
            VectorRef::F32(&good),
            sagitta_index::MAX_K + 1,
            &SearchOptions::default()
        )
        .is_err());
    assert_eq!(idx.kind(), IndexKind::IvfRq);
}
