//! Real data: 100k MiniLM sentence embeddings of Debian package
//! descriptions (`../shared/data/debian-minilm`, or `$SAGITTA_DATA`).
//! Recall is checked against the shipped exact ground truth and the Flat
//! oracle, through a segment file written and memory-mapped here.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_cli::npy;
use sagitta_index::{DType, HnswParams, Index, IndexRead, Metric, SearchOptions, Space, VectorRef};
use sagitta_store::Segment;
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    let dir = std::env::var_os("SAGITTA_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"))
        .join("debian-minilm");
    assert!(
        dir.join("base.f16.npy").exists(),
        "test data missing at {} (set SAGITTA_DATA to the folder holding debian-minilm/)",
        dir.display()
    );
    dir
}

#[test]
fn hnsw_segment_recall_and_filters_on_debian_minilm() {
    let dir = data_dir();
    let base = npy::read_f32(&dir.join("base.f16.npy")).unwrap();
    let queries = npy::read_f32(&dir.join("queries.f16.npy")).unwrap();
    let gt = npy::read_i32(&dir.join("gt.i32.npy")).unwrap();
    assert_eq!((base.rows, base.cols, queries.rows), (100_000, 384, 1000));

    let space = Space::new(384, Metric::Cos, DType::F32).unwrap();
    let idx = Index::hnsw(
        space,
        HnswParams {
            m: 16,
            ef_construction: 128,
            ..Default::default()
        },
    )
    .unwrap();
    let keys: Vec<u64> = (0..base.rows as u64).collect();
    let vecs: Vec<VectorRef<'_>> = (0..base.rows)
        .map(|i| VectorRef::F32(base.row(i)))
        .collect();
    idx.add_batch(&keys, &vecs, 0).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("minilm.sgt");
    Segment::write(&idx, &path).unwrap();
    drop(idx);
    let seg = Segment::open(&path).unwrap();
    seg.verify().unwrap();

    // Unfiltered recall@10 against the shipped exact ground truth.
    let opts = SearchOptions {
        ef: Some(64),
        ..Default::default()
    };
    let mut hits = 0;
    for q in 0..queries.rows {
        let truth: Vec<u64> = gt.row(q)[..10].iter().map(|&x| x as u64).collect();
        let got = seg
            .search(VectorRef::F32(queries.row(q)), 10, &opts)
            .unwrap();
        hits += got.iter().filter(|n| truth.contains(&n.key)).count();
    }
    let recall = hits as f64 / (queries.rows * 10) as f64;
    assert!(recall >= 0.95, "recall@10 at ef=64 is {recall}");

    // Filtered recall at 1%, 10% and 33% against exact search restricted
    // to the same random set (the planner scans 1% and 10% exactly and
    // walks the graph at 33%; both paths are checked).
    for (every, seed) in [(100u64, 1u64), (10, 2), (3, 3)] {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let allowed: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s % every == 0
            })
            .collect();
        let f = seg.filter_for_keys(&allowed);
        let (mut hits, mut total) = (0, 0);
        for q in (0..queries.rows).step_by(4) {
            let qv = VectorRef::F32(queries.row(q));
            let exact = seg
                .search(
                    qv,
                    10,
                    &SearchOptions {
                        exact: true,
                        filter: Some(&f),
                        ..Default::default()
                    },
                )
                .unwrap();
            let got = seg
                .search(
                    qv,
                    10,
                    &SearchOptions {
                        ef: Some(128),
                        filter: Some(&f),
                        ..Default::default()
                    },
                )
                .unwrap();
            assert_eq!(got.len(), 10);
            assert!(got.iter().all(|n| allowed.binary_search(&n.key).is_ok()));
            hits += got
                .iter()
                .filter(|n| exact.iter().any(|e| e.key == n.key))
                .count();
            total += 10;
        }
        let recall = hits as f64 / total as f64;
        assert!(recall >= 0.95, "filtered 1/{every}: recall {recall}");
    }
}
