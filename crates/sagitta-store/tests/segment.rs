//! Segment files: round trip, durability hygiene, the frozen v1 / v2 / v3
//! (payload) fixtures,
//! corruption → typed errors, and mutated bytes never panicking.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use proptest::prelude::*;
use sagitta_index::{
    Bitset, DType, GraphView, HnswParams, Index, IndexKind, IndexRead, IndexWrite, IvfParams,
    Metric, SearchOptions, Space, VectorRef,
};
use sagitta_store::{Field, FieldType, Filter, Schema, Segment, StoreError, Value};
use std::path::{Path, PathBuf};

fn rows(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n)
        .map(|_| (0..dims).map(|_| next()).collect())
        .collect()
}

fn build(kind: IndexKind, n: usize) -> (Index, Vec<Vec<f32>>) {
    let space = Space::new(16, Metric::Cos, DType::F32).unwrap();
    let idx = Index::new(space, kind, HnswParams::default()).unwrap();
    let data = rows(n, 16, 42);
    for (i, r) in data.iter().enumerate() {
        idx.add(1000 + i as u64, VectorRef::F32(r)).unwrap();
    }
    (idx, data)
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segment-v1.sgt")
}

fn ivf_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segment-v2-ivf.sgt")
}

/// Row `i` of the IVF fixture (16-d, L2), key `10 * i`.
fn ivf_row(i: usize) -> Vec<f32> {
    // The last component keeps the 256 rows distinct.
    (0..16)
        .map(|j| match j {
            15 => i as f32 / 16.0,
            _ => ((i * 7 + j * 3 + i * j) % 11) as f32 - 5.0,
        })
        .collect()
}

/// The frozen IVF fixture: 256 rows, 4 partitions, 4 bits, key 50
/// deleted. Written by `frozen_v2_ivf_fixture_reads_back` when
/// SAGITTA_REGEN_FIXTURES=1 (only when the format changes on purpose).
fn ivf_fixture_index() -> Index {
    let space = Space::new(16, Metric::L2, DType::F32).unwrap();
    let idx = Index::ivf_rq(
        space,
        IvfParams {
            bits: 4,
            partitions: Some(4),
            nprobe: 2,
            ..IvfParams::default()
        },
    )
    .unwrap();
    let rows: Vec<Vec<f32>> = (0..256).map(ivf_row).collect();
    let keys: Vec<u64> = (0..256).map(|i| 10 * i as u64).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    idx.add_batch(&keys, &refs, 1).unwrap();
    assert!(idx.remove(50));
    idx
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[test]
fn ivf_round_trip_gives_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    for bits in [1u8, 4, 8] {
        let space = Space::new(40, Metric::Cos, DType::F16).unwrap();
        let idx = Index::ivf_rq(
            space,
            IvfParams {
                bits,
                partitions: Some(7),
                ..IvfParams::default()
            },
        )
        .unwrap();
        let data = rows(2000, 40, 9);
        let keys: Vec<u64> = (0..2000).collect();
        let refs: Vec<VectorRef<'_>> = data.iter().map(|r| VectorRef::F32(r)).collect();
        idx.add_batch(&keys, &refs, 0).unwrap();
        for k in [3u64, 500, 1999] {
            idx.remove(k);
        }
        let path = dir.path().join(format!("ivf{bits}.sgt"));
        Segment::write(&idx, &path).unwrap();
        let seg = Segment::open(&path).unwrap();
        seg.verify().unwrap();
        let info = seg.info();
        assert_eq!(info.kind, IndexKind::IvfRq);
        let ivf = info.ivf.unwrap();
        assert_eq!((ivf.partitions, ivf.bits, ivf.listed), (7, bits, 2000));
        assert_eq!(seg.len(), 1997);
        assert!(seg.ivf_resident_bytes() > 0 && seg.ivf_resident_bytes() < info.file_len as usize);
        // IVF files need a version-2 reader, and these (cosine vectors
        // kept as given) a version-5 one; flat/HNSW ones over l2 do not.
        let head = std::fs::read(&path).unwrap();
        assert_eq!(
            u32::from_le_bytes([head[12], head[13], head[14], head[15]]),
            5
        );
        for q in rows(30, 40, 77) {
            for (nprobe, refine) in [(1, 0), (3, 20), (7, 100)] {
                let o = SearchOptions {
                    nprobe: Some(nprobe),
                    refine: Some(refine),
                    ..Default::default()
                };
                let a = idx.search(VectorRef::F32(&q), 10, &o).unwrap();
                let b = seg.search(VectorRef::F32(&q), 10, &o).unwrap();
                assert_eq!(a, b, "bits {bits} nprobe {nprobe} refine {refine}");
                assert!(b.iter().all(|n| ![3, 500, 1999].contains(&n.key)));
            }
        }
        // Filters apply inside the scan of the file too.
        let allowed: Vec<u64> = (0..2000).step_by(97).collect();
        let f = seg.filter_for_keys(&allowed);
        let r = seg
            .search(
                VectorRef::F32(&data[0]),
                5,
                &SearchOptions {
                    filter: Some(&f),
                    nprobe: Some(1),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(r.len(), 5);
        assert!(r.iter().all(|n| allowed.contains(&n.key)));
    }
    // A flat file over l2 is laid out as version 1 says; over cosine it
    // holds vectors as given, which a version-5 reader expects.
    let (flat, _) = build(IndexKind::Flat, 10);
    let l2 = Index::flat(Space::new(16, Metric::L2, DType::F32).unwrap()).unwrap();
    for (i, r) in rows(10, 16, 42).iter().enumerate() {
        l2.add(i as u64, VectorRef::F32(r)).unwrap();
    }
    for (idx, want) in [(&l2, 1u32), (&flat, 5)] {
        let p = dir.path().join("flat.sgt");
        Segment::write(idx, &p).unwrap();
        let head = std::fs::read(&p).unwrap();
        assert_eq!(
            u32::from_le_bytes([head[12], head[13], head[14], head[15]]),
            want
        );
    }
}

#[test]
fn frozen_v2_ivf_fixture_reads_back() {
    if std::env::var_os("SAGITTA_REGEN_FIXTURES").is_some() {
        Segment::write(&ivf_fixture_index(), &ivf_fixture()).unwrap();
    }
    let seg = Segment::open(&ivf_fixture()).unwrap();
    seg.verify().unwrap();
    let info = seg.info();
    assert_eq!((info.version, info.slots, info.live), (2, 256, 255));
    let ivf = info.ivf.unwrap();
    assert_eq!(
        (ivf.partitions, ivf.bits, ivf.nprobe, ivf.listed),
        (4, 4, 2, 256)
    );
    assert_eq!(seg.get(120), Some(ivf_row(12)));
    assert!(!seg.contains(50));
    // Searches agree with brute force over the rows the fixture was made
    // from (probing every partition, deep rerank).
    let all = SearchOptions {
        nprobe: Some(4),
        refine: Some(200),
        ..Default::default()
    };
    for qi in [0usize, 5, 12, 200] {
        let q = ivf_row(qi);
        let mut want: Vec<(f32, u64)> = (0..256)
            .filter(|&i| i != 5)
            .map(|i| (l2(&q, &ivf_row(i)), 10 * i as u64))
            .collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let got = seg.search(VectorRef::F32(&q), 5, &all).unwrap();
        let got: Vec<(f32, u64)> = got.iter().map(|n| (n.distance, n.key)).collect();
        assert_eq!(got, want[..5].to_vec(), "query row {qi}");
        // The default (nprobe 2, 4 bits: refine 2k) still finds the row.
        if qi != 5 {
            let d = seg
                .search(VectorRef::F32(&q), 3, &SearchOptions::default())
                .unwrap();
            assert_eq!((d[0].key, d[0].distance), (10 * qi as u64, 0.0));
        }
    }
}

#[test]
fn round_trip_gives_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [IndexKind::Hnsw, IndexKind::Flat] {
        let (idx, data) = build(kind, 3000);
        for k in [1000u64, 1500, 2999] {
            idx.remove(k);
        }
        let path = dir.path().join(format!("{kind:?}.sgt"));
        Segment::write(&idx, &path).unwrap();
        assert!(!dir.path().join(format!("{kind:?}.sgt.tmp")).exists());
        let seg = Segment::open(&path).unwrap();
        seg.verify().unwrap();
        assert_eq!(seg.len(), idx.len());
        assert_eq!(seg.info().kind, kind);
        for q in rows(50, 16, 7) {
            let o = SearchOptions {
                ef: Some(64),
                ..Default::default()
            };
            let a = idx.search(VectorRef::F32(&q), 10, &o).unwrap();
            let b = seg.search(VectorRef::F32(&q), 10, &o).unwrap();
            assert_eq!(
                a, b,
                "{kind:?}: segment answers differ from the index it was written from"
            );
        }
        assert!(!seg.contains(1500));
        assert_eq!(seg.get(1500), None);
        assert!(seg.contains(1001));
        assert_eq!(seg.get_raw(1001), idx.get_raw(1001));
        // The vector as given, cosine included.
        assert_eq!(seg.get(1001).unwrap(), data[1]);
        // Filters over a segment's slots.
        let allowed: Vec<u64> = (1000..4000).step_by(3).collect();
        let f = seg.filter_for_keys(&allowed);
        let r = seg
            .search(
                VectorRef::F32(&data[10]),
                5,
                &SearchOptions {
                    filter: Some(&f),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(r.len(), 5);
        assert!(r.iter().all(|n| (n.key - 1000) % 3 == 0));
        let wrong = Bitset::new(seg.slot_count() + 1);
        assert!(seg
            .search(
                VectorRef::F32(&data[10]),
                5,
                &SearchOptions {
                    filter: Some(&wrong),
                    ..Default::default()
                }
            )
            .is_err());
    }
}

#[test]
fn frozen_v1_fixture_reads_back() {
    let seg = Segment::open(&fixture()).unwrap();
    seg.verify().unwrap();
    let info = seg.info();
    assert_eq!(
        (info.version, info.slots, info.live, info.m),
        (1, 64, 63, 4)
    );
    assert_eq!(info.space, Space::new(8, Metric::L2, DType::F32).unwrap());
    assert_eq!(
        seg.get(70),
        Some(vec![7.0, 3.5, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    );
    assert!(!seg.contains(130));
    let r = seg
        .search(
            VectorRef::F32(&[13.0, 6.5, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
            3,
            &SearchOptions::default(),
        )
        .unwrap();
    // Key 130 (the exact match) is deleted; 120 and 140 tie at 1 + 0.25 + 1,
    // ties break by key.
    assert_eq!((r[0].key, r[0].distance), (120, 2.25));
    assert_eq!((r[1].key, r[1].distance), (140, 2.25));
    assert!(r.iter().all(|n| n.key != 130), "tombstoned key returned");
}

/// A segment records the range of its live keys in header bytes 104..120
/// (docs/FORMAT.md): a key outside it is absent without a read of the key
/// index. A file without the range (zeros, as every file written before
/// it was recorded) answers the same; one whose range disagrees with its
/// key index fails `verify`.
#[test]
fn header_records_the_live_key_range() {
    let dir = tempfile::tempdir().unwrap();
    let (idx, _) = build(IndexKind::Flat, 3000);
    // build() keys rows 1000..4000: remove both ends, so the range is of
    // the live keys, not of the slots.
    for k in [1000u64, 1001, 3999] {
        idx.remove(k);
    }
    let path = dir.path().join("r.sgt");
    Segment::write(&idx, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!((u64_at(&bytes, 104), u64_at(&bytes, 112)), (1002, 3998));
    let seg = Segment::open(&path).unwrap();
    seg.verify().unwrap();
    assert_eq!(seg.info().key_range, Some((1002, 3998)));
    // The same file with the range zeroed (and the header's CRC redone).
    let reheader = |b: &mut Vec<u8>| {
        let crc = crc32c::crc32c(&b[..124]);
        b[124..128].copy_from_slice(&crc.to_le_bytes());
    };
    let mut old = bytes.clone();
    old[104..120].fill(0);
    reheader(&mut old);
    let old_path = dir.path().join("old.sgt");
    std::fs::write(&old_path, &old).unwrap();
    let unranged = Segment::open(&old_path).unwrap();
    unranged.verify().unwrap();
    assert_eq!(unranged.info().key_range, None);
    for k in [
        0u64,
        1001,
        1002,
        1003,
        2500,
        3997,
        3998,
        3999,
        4000,
        u64::MAX,
    ] {
        let want = (1002..=3998).contains(&k);
        assert_eq!(seg.contains(k), want, "key {k}");
        assert_eq!(unranged.contains(k), want, "key {k}, no range");
    }
    // A range narrower than the keys: open trusts the checksummed header,
    // verify compares it with the index.
    let mut lying = bytes.clone();
    lying[104..112].copy_from_slice(&1010u64.to_le_bytes());
    reheader(&mut lying);
    std::fs::write(&old_path, &lying).unwrap();
    assert!(matches!(
        Segment::open(&old_path).unwrap().verify(),
        Err(StoreError::Corrupt { offset: 104, .. })
    ));
    // A range out of order is refused at open.
    let mut reversed = bytes;
    reversed[104..112].copy_from_slice(&5000u64.to_le_bytes());
    reheader(&mut reversed);
    std::fs::write(&old_path, &reversed).unwrap();
    assert!(matches!(
        Segment::open(&old_path),
        Err(StoreError::Corrupt { offset: 104, .. })
    ));
}

#[test]
fn corrupt_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture()).unwrap();
    let try_open = |bytes: &[u8]| {
        let p = dir.path().join("x.sgt");
        std::fs::write(&p, bytes).unwrap();
        Segment::open(&p)
    };
    // Truncated anywhere.
    for len in [0, 10, 127, 128, 200, good.len() / 2, good.len() - 1] {
        assert!(
            matches!(try_open(&good[..len]), Err(StoreError::Corrupt { .. })),
            "len {len}"
        );
    }
    let mut b = good.clone();
    b[0] = b'X';
    assert!(
        matches!(try_open(&b), Err(StoreError::Corrupt { reason, .. }) if reason.contains("magic"))
    );
    let mut b = good.clone();
    b[8..12].copy_from_slice(&99u32.to_le_bytes());
    assert!(matches!(
        try_open(&b),
        Err(StoreError::UnsupportedVersion { found: 99, .. })
    ));
    let mut b = good.clone();
    b[16] ^= 1;
    assert!(
        matches!(try_open(&b), Err(StoreError::Corrupt { reason, .. }) if reason.contains("checksum"))
    );
    // A flipped bit inside a section passes the O(1) open but not verify().
    let mut b = good.clone();
    let last = b.len() - 3;
    b[last] ^= 0x10;
    let seg = try_open(&b).unwrap();
    assert!(matches!(seg.verify(), Err(StoreError::Corrupt { .. })));
    assert!(matches!(
        Segment::open(&dir.path().join("missing.sgt")),
        Err(StoreError::Io { op: "open", .. })
    ));
}

#[test]
fn open_does_not_read_sections() {
    // A segment whose vector section is garbage still opens in O(1);
    // only verify() reads it.
    let dir = tempfile::tempdir().unwrap();
    let (idx, _) = build(IndexKind::Hnsw, 500);
    let p = dir.path().join("s.sgt");
    Segment::write(&idx, &p).unwrap();
    let mut b = std::fs::read(&p).unwrap();
    let mid = b.len() / 3;
    b[mid..mid + 64].fill(0xFF);
    std::fs::write(&p, &b).unwrap();
    let seg = Segment::open(&p).unwrap();
    assert!(seg.verify().is_err());
}

fn exercise(seg: &Segment) {
    let dims = seg.info().space.dims;
    let q = vec![0.25f32; dims];
    for k in [1, 3, 10] {
        let _ = seg.search(VectorRef::F32(&q), k, &SearchOptions::default());
        let _ = seg.search(
            VectorRef::F32(&q),
            k,
            &SearchOptions {
                exact: true,
                ..Default::default()
            },
        );
    }
    for key in [0u64, 10, 70, 640, 1_000_000] {
        let _ = seg.get(key);
        let _ = seg.contains(key);
    }
    let mut out = Vec::new();
    for s in 0..seg.slot_count() as u32 + 2 {
        seg.neighbors(0, s, &mut out);
        seg.neighbors(1, s, &mut out);
        let _ = seg.is_live(s);
        let _ = seg.level(s);
    }
    let _ = Index::from_graph(seg.info().space, HnswParams::default(), seg, &|_| true, 0);
    let _ = seg.verify();
}

/// Recomputes the table and header checksums of mutated segment bytes, so
/// the corruption reaches the section parser.
fn patch_checksums(b: &mut [u8]) {
    if b.len() < 128 {
        return;
    }
    let nsec = (u32::from_le_bytes([b[44], b[45], b[46], b[47]]) as usize).min(64);
    if let Some(table) = b.get(128..128 + nsec * 32) {
        let c = crc32c::crc32c(table);
        b[120..124].copy_from_slice(&c.to_le_bytes());
    }
    let c = crc32c::crc32c(&b[..124]);
    b[124..128].copy_from_slice(&c.to_le_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Mutated bytes (anywhere, including with the checksums patched so
    /// corruption reaches the section parser) never panic.
    #[test]
    fn mutated_segments_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        fix_crcs in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut b = std::fs::read(fixture()).unwrap();
        for (at, val) in &flips {
            let i = at.index(b.len());
            b[i] = *val;
        }
        if fix_crcs {
            patch_checksums(&mut b);
        }
        if truncate {
            let len = cut.index(b.len());
            b.truncate(len);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sgt");
        std::fs::write(&p, &b).unwrap();
        if let Ok(seg) = Segment::open(&p) {
            exercise(&seg);
        }
    }

    /// The same for the IVF fixture: directory, lists, codes and factors
    /// corrupted with checksums patched never panic.
    #[test]
    fn mutated_ivf_segments_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        fix_crcs in any::<bool>(),
    ) {
        let mut b = std::fs::read(ivf_fixture()).unwrap();
        for (at, val) in &flips {
            let i = at.index(b.len());
            b[i] = *val;
        }
        if fix_crcs {
            patch_checksums(&mut b);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sgt");
        std::fs::write(&p, &b).unwrap();
        if let Ok(seg) = Segment::open(&p) {
            exercise(&seg);
            for (nprobe, refine) in [(1, 0), (4, 30)] {
                let _ = seg.search(
                    VectorRef::F32(&ivf_row(3)),
                    4,
                    &SearchOptions { nprobe: Some(nprobe), refine: Some(refine), ..Default::default() },
                );
            }
        }
    }
}

#[test]
fn quantized_segments_rerank_from_full_precision_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(3000, 24, 17);
    let queries = rows(40, 24, 18);
    for dtype in [DType::Sq8, DType::Sq16] {
        let space = Space::new(24, Metric::L2, dtype).unwrap();
        let idx = Index::flat(space).unwrap().keep_full_precision().unwrap();
        let oracle = Index::flat(Space::new(24, Metric::L2, DType::F32).unwrap()).unwrap();
        for (i, r) in data.iter().enumerate() {
            idx.add(i as u64, VectorRef::F32(r)).unwrap();
            oracle.add(i as u64, VectorRef::F32(r)).unwrap();
        }
        // Rows written without float input would have no full row.
        assert!(idx.upsert_encoded(1, &vec![0u8; space.stride()]).is_err());
        let path = dir.path().join(format!("{dtype:?}.sgt"));
        Segment::write(&idx, &path).unwrap();
        let seg = Segment::open(&path).unwrap();
        seg.verify().unwrap();
        assert!(seg.has_full_precision());
        let head = std::fs::read(&path).unwrap();
        assert_eq!(
            u32::from_le_bytes([head[12], head[13], head[14], head[15]]),
            2
        );
        let rerank = SearchOptions {
            refine: Some(50),
            ..Default::default()
        };
        for q in &queries {
            let want = oracle
                .search(VectorRef::F32(q), 10, &SearchOptions::default())
                .unwrap();
            let a = idx.search(VectorRef::F32(q), 10, &rerank).unwrap();
            let b = seg.search(VectorRef::F32(q), 10, &rerank).unwrap();
            assert_eq!(a, b, "{dtype:?}: file and memory disagree");
            // Reranked results carry exact f32 distances, and the top 10
            // of 50 quantized candidates are the exact top 10.
            assert_eq!(a, want, "{dtype:?}");
        }
    }
    // Only quantized flat / HNSW indexes keep full rows.
    let f32s = Space::new(8, Metric::L2, DType::F32).unwrap();
    assert!(Index::flat(f32s).unwrap().keep_full_precision().is_err());
}

/// A graph over sq8 codes re-scores its beam from the f32 rows, which a
/// sealed segment reads with positional reads rather than through its
/// mapping: the file answers exactly as the index it was written from
/// (same keys, same exact f32 distances), which a code distance left by a
/// failed read would not.
#[test]
fn graph_segments_rescore_from_rows_read_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Large enough that the planner walks the graph rather than scanning
    // (`sagitta_index::plan::exact_scan_rows`: about 5k rows of 256-d).
    let data = rows(8000, 256, 21);
    let queries = rows(30, 256, 22);
    let space = Space::new(256, Metric::Cos, DType::Sq8).unwrap();
    let idx = Index::hnsw(space, HnswParams::default())
        .unwrap()
        .keep_full_precision()
        .unwrap();
    for (i, r) in data.iter().enumerate() {
        idx.add(i as u64, VectorRef::F32(r)).unwrap();
    }
    let path = dir.path().join("hnsw-sq8.sgt");
    Segment::write(&idx, &path).unwrap();
    let seg = Segment::open(&path).unwrap();
    assert!(seg.has_full_precision());
    let o = SearchOptions {
        ef: Some(128),
        ..Default::default()
    };
    for q in &queries {
        let a = idx.search(VectorRef::F32(q), 10, &o).unwrap();
        let b = seg.search(VectorRef::F32(q), 10, &o).unwrap();
        assert_eq!(a, b, "file and memory disagree");
        for h in &b {
            let x = &data[h.key as usize];
            let dot: f32 = q.iter().zip(x).map(|(a, b)| a * b).sum();
            let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>().sqrt();
            let exact = 1.0 - dot / (norm(q) * norm(x));
            assert!(
                (h.distance - exact).abs() < 1e-4,
                "{} vs {exact}",
                h.distance
            );
        }
    }
}

fn payload_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segment-v3-payload.sgt")
}

/// Payload of row `i` of the payload fixture (every column type, nulls).
fn payload_row(i: usize) -> Vec<Value> {
    vec![
        if i.is_multiple_of(5) {
            Value::Null
        } else {
            Value::Str(["en", "de", "fr"][i % 3].into())
        },
        Value::Int(1990 + (i % 30) as i64),
        Value::Float(i as f64 / 64.0 - 0.5),
        Value::Bool(i.is_multiple_of(2)),
        Value::Timestamp(1_700_000_000_000_000 + i as i64 * 1_000_000),
        if i.is_multiple_of(7) {
            Value::Null
        } else {
            Value::Tags((0..i % 4).map(|t| format!("t{t}")).collect())
        },
    ]
}

fn payload_schema() -> Schema {
    Schema::new(
        [
            ("lang", FieldType::String),
            ("year", FieldType::Int64),
            ("score", FieldType::Float64),
            ("ok", FieldType::Bool),
            ("ts", FieldType::Timestamp),
            ("tags", FieldType::Tags),
        ]
        .iter()
        .map(|(n, t)| Field {
            name: n.to_string(),
            ty: *t,
        })
        .collect(),
    )
    .unwrap()
}

fn payload_filters(schema: &Schema) -> Vec<sagitta_store::filter::Bound> {
    use serde_json::json;
    [
        json!({"field": "lang", "op": "eq", "value": "de"}),
        json!({"field": "lang", "op": "is_null"}),
        json!({"field": "year", "op": "ge", "value": 2010}),
        json!({"field": "score", "op": "lt", "value": 0.0}),
        json!({"field": "ok", "op": "eq", "value": true}),
        json!({"field": "ts", "op": "gt", "value": 1_700_000_000_000_000i64 + 30_000_000}),
        json!({"field": "tags", "op": "contains", "value": "t2"}),
        json!({"or": [{"field": "year", "op": "in", "value": [1990, 1991]},
                      {"not": {"field": "tags", "op": "is_not_null"}}]}),
    ]
    .iter()
    .map(|j| Filter::parse(j).unwrap().bind(schema).unwrap())
    .collect()
}

/// The frozen payload fixture: 64 rows (16-d, cosine, HNSW), key `1000 + i`
/// with row `i` of [`payload_row`], every
/// payload column type. Written when SAGITTA_REGEN_FIXTURES=1.
#[test]
fn frozen_v3_payload_fixture_reads_back() {
    let schema = payload_schema();
    if std::env::var_os("SAGITTA_REGEN_FIXTURES").is_some() {
        let (index, _) = build(IndexKind::Hnsw, 64);
        let rows: Vec<Vec<Value>> = (0..64).map(payload_row).collect();
        let view_keys: Vec<u64> = (0..64u32).map(|s| index.view().key(s)).collect();
        let by_slot: Vec<Option<&[Value]>> = view_keys
            .iter()
            .map(|&k| Some(&rows[(k - 1000) as usize][..]))
            .collect();
        let batch = sagitta_store::payload::to_record_batch(&schema, by_slot.into_iter()).unwrap();
        sagitta_store::segment::SegmentWriter::new(&index)
            .payload(&schema, &batch)
            .write(&payload_fixture())
            .unwrap();
    }
    let seg = Segment::open(&payload_fixture()).unwrap();
    assert_eq!(seg.info().version, 3);
    seg.verify().unwrap();
    let p = seg.payload().unwrap().expect("payload sections");
    assert_eq!(p.schema(), &schema);
    for key in 1000..1064u64 {
        let slot = seg.slot_of(key).unwrap() as usize;
        assert_eq!(
            &p.row(&schema, slot)[..],
            &payload_row(key as usize - 1000)[..]
        );
    }
    for f in payload_filters(&schema) {
        let got = p.eval(&f).unwrap();
        let want: Vec<u32> = (0..64u32)
            .filter(|&s| f.matches(&payload_row(seg.key(s) as usize - 1000)))
            .collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "{f:?}");
    }
}

/// Recomputes every section CRC too (so corruption reaches the Arrow and
/// payload-index parsers), then the table and header checksums.
fn patch_all_checksums(b: &mut [u8]) {
    if b.len() < 128 {
        return;
    }
    let nsec = (u32::from_le_bytes([b[44], b[45], b[46], b[47]]) as usize).min(64);
    for i in 0..nsec {
        let e = 128 + i * 32;
        let Some(entry) = b.get(e..e + 32) else {
            return;
        };
        let off = u64::from_le_bytes(entry[8..16].try_into().unwrap()) as usize;
        let len = u64::from_le_bytes(entry[16..24].try_into().unwrap()) as usize;
        if let Some(sec) = off.checked_add(len).and_then(|end| b.get(off..end)) {
            let c = crc32c::crc32c(sec);
            b[e + 24..e + 28].copy_from_slice(&c.to_le_bytes());
        }
    }
    patch_checksums(b);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Payload sections corrupted (section checksums patched, so the
    /// bytes reach the Arrow decoder and the index reader) give errors or
    /// wrong answers, never a panic.
    #[test]
    fn mutated_payload_segments_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        fix in 0u8..3,
    ) {
        let mut b = std::fs::read(payload_fixture()).unwrap();
        // Aim most flips at the payload sections (the tail of the file).
        let tail = b.len() * 2 / 3;
        for (at, val) in &flips {
            let i = tail + at.index(b.len() - tail);
            b[i] = *val;
        }
        match fix {
            0 => {}
            1 => patch_checksums(&mut b),
            _ => patch_all_checksums(&mut b),
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sgt");
        std::fs::write(&p, &b).unwrap();
        if let Ok(seg) = Segment::open(&p) {
            exercise(&seg);
            if let Ok(Some(pl)) = seg.payload() {
                let schema = payload_schema();
                for s in 0..70 {
                    let _ = pl.row(&schema, s);
                }
                for f in payload_filters(&schema) {
                    let _ = pl.eval(&f);
                }
            }
        }
    }
}

/// A sealed HNSW segment imported into a mutable index (what a merge does
/// with its largest segment): levels read back from the file agree with the
/// index it was written from, the import takes more rows, and written back
/// as a second segment it searches as well as an exact scan.
#[test]
fn hnsw_segment_imports_into_a_mutable_index() {
    let dir = tempfile::tempdir().unwrap();
    let space = Space::new(16, Metric::L2, DType::F32).unwrap();
    let params = HnswParams::default();
    let (base, more) = (3000usize, 2000usize);
    let data = rows(base + more, 16, 77);
    let src = Index::hnsw(space, params).unwrap();
    let refs: Vec<VectorRef<'_>> = data.iter().map(|r| VectorRef::F32(r)).collect();
    let keys: Vec<u64> = (0..(base + more) as u64).collect();
    src.add_batch(&keys[..base], &refs[..base], 0).unwrap();
    for k in (0..base as u64).step_by(97) {
        assert!(src.remove(k));
    }
    let p1 = dir.path().join("big.sgt");
    Segment::write(&src, &p1).unwrap();
    let seg = Segment::open(&p1).unwrap();
    {
        let view = src.view();
        assert_eq!(seg.slots(), view.slots());
        assert_eq!(seg.entry_point(), view.entry_point());
        assert!((0..view.slots() as u32).any(|s| view.level(s) > 0));
        for s in 0..view.slots() as u32 {
            assert_eq!(seg.level(s), view.level(s), "slot {s}");
        }
    }
    assert_eq!(seg.level(base as u32 + 10), 0);

    // The merge drops keys deleted since the seal (here: multiples of 5).
    let info = seg.info();
    let seg_params = HnswParams {
        m: info.m as usize,
        ef_construction: info.ef_construction as usize,
        ef_search: info.ef_search as usize,
        ..HnswParams::default()
    };
    let keep = |s: u32| !seg.key(s).is_multiple_of(5);
    let imported = Index::from_graph(space, seg_params, &seg, &keep, more).unwrap();
    let live = |k: u64| k >= base as u64 || (!k.is_multiple_of(97) && !k.is_multiple_of(5));
    let want_len = (0..base as u64).filter(|&k| live(k)).count();
    assert_eq!(imported.len(), want_len);
    for s in 0..seg.slots() as u32 {
        assert_eq!(imported.view().level(s), seg.level(s));
    }
    let stride = space.stride();
    let mut stored = vec![0u8; more * stride];
    for (r, out) in data[base..].iter().zip(stored.chunks_exact_mut(stride)) {
        space.encode(VectorRef::F32(r), out).unwrap();
    }
    imported
        .upsert_encoded_batch(&keys[base..], &stored, 0)
        .unwrap();
    assert_eq!(imported.len(), want_len + more);

    let p2 = dir.path().join("merged.sgt");
    Segment::write(&imported, &p2).unwrap();
    drop(seg);
    let merged = Segment::open(&p2).unwrap();
    merged.verify().unwrap();
    assert_eq!(merged.len(), want_len + more);
    assert_eq!(merged.slot_count(), base + more);
    for k in [0u64, 5, 97, 485] {
        assert!(!merged.contains(k), "key {k}");
    }
    assert!(merged.contains(1) && merged.contains(4999));

    // Recall@10 of the merged segment's graph against brute force over the
    // live rows. (A filter passing every slot keeps the planner walking the
    // graph: unfiltered, a segment this small is scanned exactly.)
    let (mut hit, mut total) = (0usize, 0usize);
    let all = Bitset::full(base + more);
    let opts = SearchOptions {
        filter: Some(&all),
        ..SearchOptions::default()
    };
    for q in rows(100, 16, 78) {
        let mut want: Vec<(f32, u64)> = (0..(base + more) as u64)
            .filter(|&k| live(k))
            .map(|k| (l2(&data[k as usize], &q), k))
            .collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let got = merged.search(VectorRef::F32(&q), 10, &opts).unwrap();
        assert_eq!(got, imported.search(VectorRef::F32(&q), 10, &opts).unwrap());
        assert!(got.iter().all(|n| live(n.key)));
        total += 10;
        hit += got
            .iter()
            .filter(|n| want[..10].iter().any(|w| w.1 == n.key))
            .count();
    }
    let recall = hit as f64 / total as f64;
    assert!(recall >= 0.95, "recall {recall}");
}

/// A segment's exact scan (whole blocks of mapped rows) answers as the
/// in-memory index's slot-by-slot scan: the k smallest by (distance, key),
/// deleted rows never returned, ties at the k-th resolved to smaller keys
/// whatever the insertion order, and k up to every live row.
#[test]
fn block_exact_scans_match_the_slot_by_slot_scan() {
    let dir = tempfile::tempdir().unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (bits, n) in [(256usize, 1500usize), (64, 700), (200, 300)] {
        let space = Space::new(bits, Metric::Hamming, DType::B1).unwrap();
        let idx = Index::flat(space).unwrap();
        let bytes = bits.div_ceil(8);
        // Few distinct codes (every code repeated), so ties are everywhere.
        let codes: Vec<Vec<u8>> = (0..40)
            .map(|_| (0..bytes).map(|_| next() as u8).collect())
            .collect();
        for i in 0..n {
            // Keys out of slot order, so the tie-break is by key not slot.
            let key = (n - i) as u64 * 7;
            idx.add(key, VectorRef::Bytes(&codes[i % codes.len()]))
                .unwrap();
        }
        for key in (7..=(n as u64 * 7)).step_by(7 * 5) {
            idx.remove(key);
        }
        let path = dir.path().join(format!("b{bits}.sgt"));
        Segment::write(&idx, &path).unwrap();
        let seg = Segment::open(&path).unwrap();
        let exact = SearchOptions {
            exact: true,
            ..Default::default()
        };
        for (qi, q) in codes.iter().take(8).enumerate() {
            for k in [1, 10, 97, idx.len()] {
                let a = idx.search(VectorRef::Bytes(q), k, &exact).unwrap();
                let b = seg.search(VectorRef::Bytes(q), k, &exact).unwrap();
                assert_eq!(a, b, "{bits} bits, query {qi}, k {k}");
                assert_eq!(b.len(), k.min(idx.len()));
                assert!(
                    b.iter().all(|r| (r.key / 7 - 1) % 5 != 0),
                    "deleted row returned"
                );
            }
        }
    }
}

/// Found by the `segment` fuzz target (checksums patched): a payload
/// section whose IPC buffers lie inside their body but are shorter than
/// their nodes make Arrow's decoder panic; the segment answers a typed
/// `Corrupt` error for its payload instead, and keeps serving vectors.
#[test]
fn payload_arrow_panics_are_typed_errors() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz/segment-payload-node-past-buffers.sgt");
    let seg = Segment::open(&p).unwrap();
    assert!(matches!(seg.payload(), Err(StoreError::Corrupt { .. })));
    exercise(&seg);
}
