//! One conformance suite, run against every index kind and several
//! metric / dtype pairs: results are checked against the Flat oracle (or
//! against brute force computed here), and every bad input gets its typed
//! error.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{
    DType, HnswParams, Index, IndexError, IndexKind, IndexRead, IndexWrite, Metric, SearchOptions,
    Space, VectorRef,
};
use std::sync::Arc;

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
    // Clustered data: more like real embeddings than uniform noise.
    let centers: Vec<Vec<f32>> = (0..16)
        .map(|_| (0..dims).map(|_| r.f32()).collect())
        .collect();
    (0..n)
        .map(|i| centers[i % 16].iter().map(|c| c + 0.35 * r.f32()).collect())
        .collect()
}

fn build(kind: IndexKind, space: Space, rows: &[Vec<f32>]) -> Index {
    let idx = Index::new(space, kind, HnswParams::default()).unwrap();
    let keys: Vec<u64> = (0..rows.len() as u64).map(|k| k * 7 + 3).collect();
    let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    idx.add_batch(&keys, &vecs, 0).unwrap();
    idx
}

fn recall(oracle: &[Vec<u64>], got: &[Vec<u64>]) -> f64 {
    let mut hit = 0;
    let mut total = 0;
    for (o, g) in oracle.iter().zip(got) {
        total += o.len();
        hit += g.iter().filter(|k| o.contains(k)).count();
    }
    hit as f64 / total as f64
}

fn keys_of(idx: &Index, qs: &[Vec<f32>], k: usize, opts: &SearchOptions<'_>) -> Vec<Vec<u64>> {
    qs.iter()
        .map(|q| {
            idx.search(VectorRef::F32(q), k, opts)
                .unwrap()
                .iter()
                .map(|n| n.key)
                .collect()
        })
        .collect()
}

#[test]
fn flat_matches_brute_force_exactly() {
    let space = Space::new(24, Metric::L2, DType::F32).unwrap();
    let rows = data(500, 24, 1);
    let flat = build(IndexKind::Flat, space, &rows);
    for q in data(20, 24, 99) {
        let mut want: Vec<(f32, u64)> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    r.iter()
                        .zip(&q)
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f32>(),
                    i as u64 * 7 + 3,
                )
            })
            .collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let got = flat
            .search(VectorRef::F32(&q), 10, &SearchOptions::default())
            .unwrap();
        let got_keys: Vec<u64> = got.iter().map(|n| n.key).collect();
        let want_keys: Vec<u64> = want[..10].iter().map(|w| w.1).collect();
        assert_eq!(got_keys, want_keys);
        for (g, w) in got.iter().zip(&want) {
            assert!((g.distance - w.0).abs() < 1e-3 * w.0.max(1.0));
        }
    }
}

#[test]
fn hnsw_recall_against_flat_for_each_metric_and_dtype() {
    for (metric, dtype) in [
        (Metric::Cos, DType::F32),
        (Metric::L2, DType::F32),
        (Metric::Ip, DType::F32),
        (Metric::Cos, DType::F16),
        (Metric::Cos, DType::I8),
    ] {
        let space = Space::new(32, metric, dtype).unwrap();
        let rows = data(3000, 32, 2);
        let qs = data(100, 32, 3);
        let flat = build(IndexKind::Flat, space, &rows);
        let hnsw = build(IndexKind::Hnsw, space, &rows);
        let opts = SearchOptions {
            ef: Some(128),
            ..Default::default()
        };
        let r = recall(
            &keys_of(&flat, &qs, 10, &opts),
            &keys_of(&hnsw, &qs, 10, &opts),
        );
        assert!(r >= 0.95, "{metric:?}/{dtype:?}: recall {r}");
    }
}

#[test]
fn hamming_hnsw_recall_against_flat() {
    let space = Space::new(128, Metric::Hamming, DType::B1).unwrap();
    let rows = data(3000, 128, 4);
    let bits = sagitta_kernels::sign_bits;
    let codes: Vec<Vec<u8>> = rows.iter().map(|r| bits(r)).collect();
    let keys: Vec<u64> = (0..codes.len() as u64).collect();
    let vecs: Vec<VectorRef<'_>> = codes.iter().map(|c| VectorRef::Bytes(c)).collect();
    let flat = Index::flat(space).unwrap();
    let hnsw = Index::hnsw(space, HnswParams::default()).unwrap();
    flat.add_batch(&keys, &vecs, 0).unwrap();
    hnsw.add_batch(&keys, &vecs, 0).unwrap();
    let mut hit = 0.0;
    let qs: Vec<Vec<u8>> = data(100, 128, 5).iter().map(|r| bits(r)).collect();
    for q in &qs {
        // Hamming distances tie a lot: compare by distance of the k-th hit.
        let o = flat
            .search(VectorRef::Bytes(q), 10, &SearchOptions::default())
            .unwrap();
        let h = hnsw
            .search(
                VectorRef::Bytes(q),
                10,
                &SearchOptions {
                    ef: Some(128),
                    ..Default::default()
                },
            )
            .unwrap();
        let kth = o[9].distance;
        hit += h.iter().filter(|n| n.distance <= kth).count() as f64 / 10.0;
    }
    assert!(
        hit / qs.len() as f64 >= 0.95,
        "hamming recall {}",
        hit / qs.len() as f64
    );
}

#[test]
fn nphd_accepts_variable_length_codes() {
    let space = Space::new(256, Metric::Nphd, DType::B1).unwrap();
    let idx = Index::hnsw(space, HnswParams::default()).unwrap();
    idx.add(1, VectorRef::Bytes(&[0xFF; 8])).unwrap();
    idx.add(2, VectorRef::Bytes(&[0xFF; 32])).unwrap();
    idx.add(3, VectorRef::Bytes(&[0x00; 16])).unwrap();
    let r = idx
        .search(VectorRef::Bytes(&[0xFF; 16]), 3, &SearchOptions::default())
        .unwrap();
    // 8-byte prefix of key 1 equals the query's first 8 bytes; key 2's
    // 16-byte common prefix equals too; key 3 differs in every bit.
    assert_eq!(r[0].distance, 0.0);
    assert_eq!(r[1].distance, 0.0);
    assert_eq!(r[2].key, 3);
    assert_eq!(r[2].distance, 1.0);
    assert!(matches!(
        idx.add(4, VectorRef::Bytes(&[0; 33])),
        Err(IndexError::Kernel(_))
    ));
    assert!(matches!(
        idx.add(4, VectorRef::Bytes(&[])),
        Err(IndexError::Kernel(_))
    ));
}

#[test]
fn filtered_search_recall_at_low_and_high_selectivity() {
    let space = Space::new(32, Metric::Cos, DType::F32).unwrap();
    let rows = data(5000, 32, 6);
    let qs = data(50, 32, 7);
    let hnsw = build(IndexKind::Hnsw, space, &rows);
    let flat = build(IndexKind::Flat, space, &rows);
    for every in [100, 10, 2] {
        let mut r = Rng(11);
        let keys: Vec<u64> = (0..rows.len() as u64)
            .map(|i| i * 7 + 3)
            .filter(|_| r.next().is_multiple_of(every))
            .collect();
        let (fh, ff) = (hnsw.filter_for_keys(&keys), flat.filter_for_keys(&keys));
        assert_eq!(fh.count(), keys.len());
        let got = keys_of(
            &hnsw,
            &qs,
            10,
            &SearchOptions {
                ef: Some(128),
                filter: Some(&fh),
                exact: false,
                ..Default::default()
            },
        );
        let want = keys_of(
            &flat,
            &qs,
            10,
            &SearchOptions {
                filter: Some(&ff),
                ..Default::default()
            },
        );
        for g in &got {
            assert_eq!(g.len(), 10);
            assert!(
                g.iter().all(|k| keys.binary_search(k).is_ok()),
                "a result outside the filter"
            );
        }
        let rc = recall(&want, &got);
        assert!(rc >= 0.95, "1/{every} selectivity: recall {rc}");
    }
}

#[test]
fn deletes_upserts_and_duplicates() {
    let space = Space::new(8, Metric::L2, DType::F32).unwrap();
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let idx = Index::new(space, kind, HnswParams::default()).unwrap();
        for k in 0..200u64 {
            idx.add(k, VectorRef::F32(&[k as f32; 8])).unwrap();
        }
        assert_eq!(
            idx.add(5, VectorRef::F32(&[0.0; 8])),
            Err(IndexError::DuplicateKey(5))
        );
        assert!(idx.remove(10));
        assert!(!idx.remove(10));
        assert!(!idx.contains(10));
        assert_eq!(idx.len(), 199);
        let r = idx
            .search(VectorRef::F32(&[10.0; 8]), 3, &SearchOptions::default())
            .unwrap();
        assert!(
            r.iter().all(|n| n.key != 10),
            "{kind:?}: deleted key returned"
        );
        // Upsert moves key 20 next to 100.
        idx.upsert(20, VectorRef::F32(&[100.25; 8])).unwrap();
        assert_eq!(idx.len(), 199);
        assert_eq!(idx.get(20), Some(vec![100.25; 8]));
        let r = idx
            .search(VectorRef::F32(&[100.2; 8]), 1, &SearchOptions::default())
            .unwrap();
        assert_eq!(r[0].key, 20);
        let r = idx
            .search(VectorRef::F32(&[20.0; 8]), 1, &SearchOptions::default())
            .unwrap();
        assert_ne!(r[0].key, 20, "{kind:?}: the replaced vector is still found");
        assert_eq!(idx.get(10), None);
    }
}

#[test]
fn many_tombstones_still_return_k() {
    let space = Space::new(16, Metric::Cos, DType::F32).unwrap();
    let rows = data(2000, 16, 8);
    let idx = build(IndexKind::Hnsw, space, &rows);
    // Delete the 90% of points nearest to the query's cluster.
    for i in 0..rows.len() {
        if i % 16 != 0 || i % 10 != 0 {
            idx.remove(i as u64 * 7 + 3);
        }
    }
    let r = idx
        .search(VectorRef::F32(&rows[0]), 10, &SearchOptions::default())
        .unwrap();
    assert_eq!(r.len(), 10);
    assert!(r.iter().all(|n| idx.contains(n.key)));
}

#[test]
fn bad_inputs_get_typed_errors() {
    let space = Space::new(4, Metric::L2, DType::F32).unwrap();
    let idx = Index::hnsw(space, HnswParams::default()).unwrap();
    let o = SearchOptions::default();
    // An empty index answers no rows (the one k rule, `limits::check_k`).
    assert_eq!(idx.search(VectorRef::F32(&[0.0; 4]), 1, &o), Ok(Vec::new()));
    assert_eq!(
        idx.add(1, VectorRef::F32(&[0.0; 3])),
        Err(IndexError::Dimensions {
            expected: 4,
            got: 3
        })
    );
    assert!(matches!(
        idx.add(1, VectorRef::F32(&[0.0, f32::NAN, 0.0, 0.0])),
        Err(IndexError::NotFinite { index: 1, .. })
    ));
    assert!(matches!(
        idx.add(1, VectorRef::F32(&[0.0, 0.0, f32::INFINITY, 0.0])),
        Err(IndexError::NotFinite { index: 2, .. })
    ));
    assert!(matches!(
        idx.add(1, VectorRef::Bytes(&[0; 16])),
        Err(IndexError::WrongInputKind { .. })
    ));
    idx.add(1, VectorRef::F32(&[0.0; 4])).unwrap();
    assert_eq!(
        idx.search(VectorRef::F32(&[0.0; 4]), 0, &o),
        Err(IndexError::ZeroK(0))
    );
    // k past the live rows returns every row; past MAX_K it is refused.
    assert_eq!(
        idx.search(VectorRef::F32(&[0.0; 4]), 2, &o)
            .map(|r| r.len()),
        Ok(1)
    );
    assert!(matches!(
        idx.search(VectorRef::F32(&[0.0; 4]), sagitta_index::MAX_K + 1, &o),
        Err(IndexError::InvalidParameter { name: "k", .. })
    ));
    assert!(matches!(
        idx.search(VectorRef::F32(&[0.0; 5]), 1, &o),
        Err(IndexError::Dimensions {
            expected: 4,
            got: 5
        })
    ));
    assert!(Space::new(0, Metric::L2, DType::F32).is_err());
    assert!(Space::new(12, Metric::Hamming, DType::B1).is_err());
    assert!(Space::new(8, Metric::Hamming, DType::F32).is_err());
    assert!(Index::hnsw(
        space,
        HnswParams {
            m: 1,
            ..Default::default()
        }
    )
    .is_err());
    assert!(idx.set_ef_search(0).is_err());
    let i8space = Space::new(2, Metric::L2, DType::I8).unwrap();
    let i8idx = Index::flat(i8space).unwrap();
    assert!(matches!(
        i8idx.add(1, VectorRef::F32(&[1.5, 0.0])),
        Err(IndexError::OutOfRange { .. })
    ));
    assert!(matches!(
        i8idx.add(1, VectorRef::F32(&[200.0, 0.0])),
        Err(IndexError::OutOfRange { .. })
    ));
    i8idx.add(1, VectorRef::F32(&[-128.0, 127.0])).unwrap();
    assert_eq!(i8idx.get(1), Some(vec![-128.0, 127.0]));
}

#[test]
fn concurrent_inserts_and_searches() {
    let space = Space::new(16, Metric::L2, DType::F32).unwrap();
    let rows = Arc::new(data(8000, 16, 9));
    let idx = Arc::new(Index::hnsw(space, HnswParams::default()).unwrap());
    // Seed one vector so concurrent searches never see an empty index.
    idx.add(u64::MAX, VectorRef::F32(&rows[0])).unwrap();
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let (idx, rows) = (idx.clone(), rows.clone());
            std::thread::spawn(move || {
                for i in (t..rows.len()).step_by(4) {
                    idx.add(i as u64, VectorRef::F32(&rows[i])).unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let (idx, rows) = (idx.clone(), rows.clone());
        std::thread::spawn(move || {
            let mut done = 0;
            while idx.len() < rows.len() + 1 {
                let r = idx
                    .search(
                        VectorRef::F32(&rows[done % 100]),
                        1,
                        &SearchOptions::default(),
                    )
                    .unwrap();
                assert_eq!(r.len(), 1, "after {done} searches, len {}", idx.len());
                done += 1;
            }
            done
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    assert!(reader.join().unwrap() > 0);
    assert_eq!(idx.len(), rows.len() + 1);
    // Every vector inserted concurrently is findable as its own nearest.
    let found = (0..rows.len())
        .filter(|&i| {
            idx.search(
                VectorRef::F32(&rows[i]),
                1,
                &SearchOptions {
                    ef: Some(64),
                    ..Default::default()
                },
            )
            .unwrap()[0]
                .distance
                == 0.0
        })
        .count();
    assert!(found as f64 >= 0.99 * rows.len() as f64, "found {found}");
}

#[test]
fn add_batch_is_validated_whole_before_anything_is_added() {
    let space = Space::new(4, Metric::L2, DType::F32).unwrap();
    let idx = Index::new(space, IndexKind::Hnsw, HnswParams::default()).unwrap();
    idx.add(1, VectorRef::F32(&[0.0; 4])).unwrap();
    let good = [1.0f32; 4];
    let nan = [1.0, f32::NAN, 0.0, 0.0];
    let rows = [VectorRef::F32(&good); 5];

    let mut bad_rows = rows;
    bad_rows[3] = VectorRef::F32(&nan);
    let e = idx
        .add_batch(&[10, 11, 12, 13, 14], &bad_rows, 2)
        .unwrap_err();
    assert!(
        matches!(e, IndexError::Row { row: 3, ref source } if matches!(**source, IndexError::NotFinite { index: 1, .. })),
        "{e:?}"
    );

    let e = idx.add_batch(&[10, 11, 1, 13, 14], &rows, 2).unwrap_err();
    assert!(
        matches!(e, IndexError::Row { row: 2, ref source } if **source == IndexError::DuplicateKey(1)),
        "{e:?}"
    );

    let e = idx.add_batch(&[10, 11, 12, 11, 14], &rows, 2).unwrap_err();
    assert!(
        matches!(e, IndexError::Row { row: 3, ref source } if **source == IndexError::DuplicateKey(11)),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "row 3: key 11 already exists (use upsert to replace it)"
    );

    assert_eq!(idx.len(), 1, "a refused batch must add nothing");
    idx.add_batch(&[10, 11, 12, 13, 14], &rows, 2).unwrap();
    assert_eq!(idx.len(), 6);
}

#[test]
fn exact_search_breaks_distance_ties_by_key() {
    // 200 identical vectors inserted in parallel (so slots are in no
    // particular key order): the exact top-k must be the k smallest keys.
    let space = Space::new(8, Metric::L2, DType::F32).unwrap();
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let idx = Index::new(space, kind, HnswParams::default()).unwrap();
        let v = [0.5f32; 8];
        let keys: Vec<u64> = (0..200u64).rev().map(|k| k * 3).collect();
        let rows = vec![VectorRef::F32(&v); keys.len()];
        idx.add_batch(&keys, &rows, 2).unwrap();
        let opts = SearchOptions {
            exact: true,
            ..SearchOptions::default()
        };
        let got: Vec<u64> = idx
            .search(VectorRef::F32(&v), 7, &opts)
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        assert_eq!(got, vec![0, 3, 6, 9, 12, 15, 18], "{kind:?}");
    }
}

#[test]
fn scalar_quantized_storage_tracks_the_float_oracle() {
    let rows = data(2000, 48, 31);
    let qs = data(40, 48, 32);
    for metric in [Metric::L2, Metric::Ip, Metric::Cos] {
        let oracle = build(
            IndexKind::Flat,
            Space::new(48, metric, DType::F32).unwrap(),
            &rows,
        );
        let want = keys_of(&oracle, &qs, 10, &SearchOptions::default());
        let wide = SearchOptions {
            ef: Some(128),
            ..Default::default()
        };
        // HNSW's own recall over f32 (inner-product graphs on raw data are
        // weaker): quantized graphs are held to it, not to 1.0.
        let f32_hnsw = build(
            IndexKind::Hnsw,
            Space::new(48, metric, DType::F32).unwrap(),
            &rows,
        );
        let graph_recall = recall(&want, &keys_of(&f32_hnsw, &qs, 10, &wide));
        for (dtype, floor) in [(DType::Sq8, 0.9), (DType::Sq16, 0.99)] {
            let space = Space::new(48, metric, dtype).unwrap();
            assert_eq!(
                space.vector_bytes(),
                8 + 48 * if dtype == DType::Sq8 { 1 } else { 2 }
            );
            for kind in [IndexKind::Flat, IndexKind::Hnsw] {
                let idx = build(kind, space, &rows);
                let got = keys_of(
                    &idx,
                    &qs,
                    10,
                    &SearchOptions {
                        ef: Some(128),
                        ..Default::default()
                    },
                );
                let r = recall(&want, &got);
                let need = if kind == IndexKind::Flat {
                    floor
                } else {
                    // Parallel builds differ run to run: a margin for that.
                    graph_recall - (1.0 - floor) - 0.08
                };
                assert!(
                    r >= need,
                    "{metric:?} {dtype:?} {kind:?}: recall {r} < {need}"
                );
            }
            // Round trip through the stored form stays close to the input.
            let idx = build(IndexKind::Flat, space, &rows);
            let back = idx.get(3 * 7 + 3).unwrap();
            let orig = &rows[3];
            let norm = if metric == Metric::Cos {
                orig.iter().map(|v| v * v).sum::<f32>().sqrt()
            } else {
                1.0
            };
            let top = orig.iter().fold(0.0f32, |m, v| m.max(v.abs())) / norm;
            let tol = top / if dtype == DType::Sq8 { 100.0 } else { 20000.0 };
            for (b, o) in back.iter().zip(orig) {
                assert!(
                    (b - o / norm).abs() <= tol,
                    "{metric:?} {dtype:?}: {b} vs {}",
                    o / norm
                );
            }
        }
    }
    // Wrong input kinds and values are typed errors.
    let space = Space::new(48, Metric::L2, DType::Sq8).unwrap();
    let idx = Index::flat(space).unwrap();
    assert!(matches!(
        idx.add(1, VectorRef::Bytes(&[1, 2, 3])),
        Err(IndexError::WrongInputKind { .. })
    ));
    let mut nan = vec![0.5f32; 48];
    nan[9] = f32::NAN;
    assert!(matches!(
        idx.add(1, VectorRef::F32(&nan)),
        Err(IndexError::NotFinite { index: 9, .. })
    ));
    assert!(Space::new(64, Metric::Hamming, DType::Sq16).is_err());
}

/// A staged batch changes no key until it is published, then all of it
/// at once; an abandoned one leaves dead slots and no key.
#[test]
fn a_staged_batch_names_its_keys_only_when_published() {
    let dims = 8;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let row = |k: u64, gen: u8| -> Vec<f32> {
        (0..dims)
            .map(|d| (k * 10 + d as u64) as f32 + f32::from(gen) * 1000.0)
            .collect()
    };
    let bytes = |rows: &[Vec<f32>]| -> Vec<u8> {
        rows.iter()
            .flat_map(|r| r.iter().flat_map(|x| x.to_ne_bytes()))
            .collect()
    };
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let idx = Index::new(space, kind, HnswParams::default()).unwrap();
        let keys: Vec<u64> = (0..100).collect();
        let first: Vec<Vec<f32>> = keys.iter().map(|&k| row(k, 0)).collect();
        idx.upsert_encoded_batch(&keys, &bytes(&first), 0).unwrap();
        let before = idx.slot_count();
        let old5 = idx.slot_of(5).unwrap();
        // Ten replacements (key 5 twice: the later row wins), ten new keys.
        let mut skeys: Vec<u64> = (0..10).chain(1000..1010).collect();
        skeys.push(5);
        let mut srows: Vec<Vec<f32>> = skeys.iter().map(|&k| row(k, 1)).collect();
        *srows.last_mut().unwrap() = row(5, 2);
        let staged = idx.stage_encoded_batch(&skeys, &bytes(&srows), 0).unwrap();
        assert_eq!(staged.len(), 21);
        assert_eq!(idx.len(), 100, "{kind:?}");
        assert_eq!(idx.slot_of(5), Some(old5));
        assert!(!idx.contains(1003));
        assert_eq!(idx.get(7).unwrap(), row(7, 0));
        assert_eq!(idx.slot_count(), before + 21);
        // Readers bounded to the slots before the batch see none of it.
        let mut old_slots = sagitta_index::Bitset::new(idx.slot_count());
        for s in 0..before {
            old_slots.insert(s);
        }
        let o = SearchOptions {
            filter: Some(&old_slots),
            exact: true,
            ..Default::default()
        };
        let hits = idx.search(VectorRef::F32(&row(1003, 1)), 5, &o).unwrap();
        assert!(hits.iter().all(|h| h.key < 100), "{hits:?}");
        let hits = idx.search(VectorRef::F32(&row(5, 0)), 1, &o).unwrap();
        assert_eq!((hits[0].key, hits[0].distance), (5, 0.0), "{kind:?}");

        idx.publish(staged);
        assert_eq!(idx.len(), 110, "{kind:?}");
        assert_eq!(idx.get(5).unwrap(), row(5, 2), "{kind:?}");
        assert_eq!(idx.get(7).unwrap(), row(7, 1));
        assert_eq!(idx.get(1003).unwrap(), row(1003, 1));
        assert!(idx.view().is_deleted(old5));
        assert_eq!(idx.view().live_slots().count(), 110, "{kind:?}");
        let hits = idx
            .search(VectorRef::F32(&row(5, 2)), 3, &SearchOptions::default())
            .unwrap();
        assert_eq!((hits[0].key, hits[0].distance), (5, 0.0), "{kind:?}");

        let dropped = idx
            .stage_encoded_batch(&[2000, 3], &bytes(&[row(2000, 3), row(3, 3)]), 0)
            .unwrap();
        let n = idx.slot_count();
        idx.abandon(dropped);
        assert_eq!(idx.len(), 110);
        assert!(!idx.contains(2000));
        assert_eq!(idx.get(3).unwrap(), row(3, 1));
        assert!(idx.view().is_deleted(n as u32 - 1) && idx.view().is_deleted(n as u32 - 2));
        assert_eq!(idx.view().live_slots().count(), 110);
    }
}
