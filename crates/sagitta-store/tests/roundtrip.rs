//! Vectors come back as they were given, for every metric and storage
//! type: from the mutable part, from flushed Flat segments, from built
//! (HNSW with sq8 codes and f32 rows, or IVF) and merged segments, after
//! a reopen, by `get_raw` / `get_raw_many` and by `scan`. Cosine included:
//! it stores the vector as given, not its unit vector (segment format 5).
//! Segments written before that (format 4) still read back, and return
//! the unit vectors they hold.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, IndexKind, IndexRead, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, CollectionSearch, OpenMode, Segment};
use std::path::{Path, PathBuf};

const ROWS: u64 = 300;

/// A float vector of `dims` components for `key` that every storage type
/// holds exactly: multiples of 1/4 under 64 in magnitude (exact in f16)
/// for f32 / f16, integers in the i8 range for i8; never of unit length.
fn floats(key: u64, dims: usize, dtype: DType) -> Vec<f32> {
    let mut z = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dims)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let r = (z >> 40) as i64 % 255 - 127; // -127..=127
            if dtype == DType::I8 {
                r as f32
            } else {
                r as f32 / 4.0 + 3.0
            }
        })
        .collect()
}

/// Packed bits (Hamming) or a code of 1..=dims/8 bytes (NPHD).
fn bits(key: u64, dims: usize, metric: Metric) -> Vec<u8> {
    let len = if metric == Metric::Nphd {
        1 + (key as usize % (dims / 8))
    } else {
        dims / 8
    };
    (0..len)
        .map(|i| (key.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

#[derive(Clone, Copy, Debug)]
struct Case {
    metric: Metric,
    dtype: DType,
    kind: IndexKind,
}

impl Case {
    fn dims(&self) -> usize {
        if self.dtype == DType::B1 {
            64
        } else {
            24
        }
    }

    fn space(&self) -> Space {
        Space::new(self.dims(), self.metric, self.dtype).unwrap()
    }

    /// The vector given for `key`, and its expected stored bytes.
    fn given(&self, key: u64) -> Given {
        match self.dtype {
            DType::B1 => Given::Bits(bits(key, self.dims(), self.metric)),
            d => Given::Floats(floats(key, self.dims(), d)),
        }
    }
}

enum Given {
    Floats(Vec<f32>),
    Bits(Vec<u8>),
}

impl Given {
    fn as_ref(&self) -> VectorRef<'_> {
        match self {
            Given::Floats(v) => VectorRef::F32(v),
            Given::Bits(b) => VectorRef::Bytes(b),
        }
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for metric in [Metric::L2, Metric::Ip, Metric::Cos] {
        for dtype in [DType::F32, DType::F16, DType::I8] {
            out.push(Case {
                metric,
                dtype,
                kind: IndexKind::Hnsw,
            });
        }
        for dtype in [DType::F32, DType::F16] {
            out.push(Case {
                metric,
                dtype,
                kind: IndexKind::IvfRq,
            });
        }
    }
    for metric in [Metric::Hamming, Metric::Nphd] {
        out.push(Case {
            metric,
            dtype: DType::B1,
            kind: IndexKind::Hnsw,
        });
    }
    out
}

fn config(case: Case) -> CollectionConfig {
    let mut c = CollectionConfig::new(case.space());
    c.kind = case.kind;
    // Small parts, so a few hundred rows make several segments; every
    // segment gets its index (a graph over sq8 codes with f32 rows for
    // f32, or IVF lists).
    c.segment_size = 4096;
    c.max_segment_size = 1 << 20;
    c.index_threshold = Some(0);
    c.idle_seal_ms = 0;
    c
}

/// Checks that every key in `keys` reads back exactly as given, one by
/// one, in a batch, and through a scan; `what` names the state.
fn check_all(c: &Collection, case: Case, keys: &[u64], what: &str) {
    let space = case.space();
    let vb = space.vector_bytes();
    let expect = |k: u64| -> Vec<u8> {
        let mut buf = vec![0u8; space.stride()];
        space.encode(case.given(k).as_ref(), &mut buf).unwrap();
        buf.truncate(vb);
        buf
    };
    let many = c.get_raw_many(keys);
    for (&k, got) in keys.iter().zip(&many) {
        let raw = c
            .get_raw(k)
            .unwrap_or_else(|| panic!("{case:?} {what}: key {k} missing"));
        assert_eq!(raw, expect(k), "{case:?} {what}: key {k} raw bytes");
        assert_eq!(
            got.as_deref(),
            Some(&raw[..]),
            "{case:?} {what}: key {k} batch"
        );
        if let Given::Floats(v) = case.given(k) {
            let back = space.decode_floats(&raw).unwrap();
            // Bit-exact: compare the bits, not within a tolerance.
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&back), bits(&v), "{case:?} {what}: key {k} floats");
        }
    }
    let mut seen = 0;
    for b in c.scan(None, 64).unwrap() {
        let b = b.unwrap();
        for (i, &k) in b.keys.iter().enumerate() {
            assert_eq!(
                &b.vectors[i * vb..(i + 1) * vb],
                &expect(k)[..],
                "{case:?} {what}: scan of key {k}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, keys.len(), "{case:?} {what}: scan rows");
}

fn add(c: &Collection, case: Case, keys: std::ops::Range<u64>) {
    let given: Vec<Given> = keys.clone().map(|k| case.given(k)).collect();
    let refs: Vec<VectorRef<'_>> = given.iter().map(Given::as_ref).collect();
    let keys: Vec<u64> = keys.collect();
    c.upsert(&keys, &refs).unwrap();
}

/// The nearest neighbour of a stored vector is itself (searches still
/// work on vectors kept as given); under ip, where that need not hold,
/// the search answers.
fn check_search(c: &Collection, case: Case, key: u64, what: &str) {
    let q = case.given(key);
    let opts = CollectionSearch::default();
    let hits = c.search(&[q.as_ref()], 3, &opts).unwrap();
    if case.metric == Metric::Ip {
        assert_eq!(hits[0].len(), 3, "{case:?} {what}");
        return;
    }
    let exact = CollectionSearch {
        exact: true,
        ..Default::default()
    };
    let ex = c.search(&[q.as_ref()], 1, &exact).unwrap();
    assert_eq!(ex[0][0].key, key, "{case:?} {what}: exact nearest");
    assert!(
        ex[0][0].distance.abs() < 1e-4,
        "{case:?} {what}: {:?}",
        ex[0]
    );
    if case.kind != IndexKind::IvfRq || case.metric != Metric::L2 {
        assert!(
            hits[0].iter().any(|n| n.key == key),
            "{case:?} {what}: {:?}",
            hits[0]
        );
    }
}

#[test]
fn vectors_come_back_as_given_for_every_metric_and_dtype() {
    for case in cases() {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::create(dir.path(), config(case)).unwrap();
        // The mutable part.
        add(&c, case, 0..40);
        let keys: Vec<u64> = (0..40).collect();
        check_all(&c, case, &keys, "mutable part");
        check_search(&c, case, 7, "mutable part");
        // Flushed as Flat segments, then indexed and merged.
        c.seal().unwrap();
        c.flush().unwrap();
        check_all(&c, case, &keys, "flushed");
        add(&c, case, 40..ROWS);
        // Replaced rows come back as their new value too.
        add(&c, case, 0..10);
        c.optimize().unwrap();
        let stats = c.stats();
        assert_eq!(stats.unindexed_vectors, 0, "{case:?}: {stats:?}");
        let keys: Vec<u64> = (0..ROWS).collect();
        check_all(&c, case, &keys, "optimized");
        check_search(&c, case, 123, "optimized");
        c.close().unwrap();
        // Reopened: from the segment files alone.
        let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
        check_all(&c, case, &keys, "reopened");
        check_search(&c, case, 250, "reopened");
        c.close().unwrap();
        // Cosine float files say they need a version-5 reader.
        for p in sgt_files(dir.path()) {
            let bytes = std::fs::read(&p).unwrap();
            let oldest = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
            let as_given =
                case.metric == Metric::Cos && matches!(case.dtype, DType::F32 | DType::F16);
            assert_eq!(
                oldest >= 5,
                as_given,
                "{case:?}: {} says {oldest}",
                p.display()
            );
        }
    }
}

#[test]
fn wal_replay_returns_vectors_as_given() {
    // Rows only in the log (never flushed) come back exact after a reopen.
    for case in cases().into_iter().filter(|c| c.kind == IndexKind::Hnsw) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(case);
        cfg.segment_size = 64 << 20;
        cfg.max_segment_size = 64 << 20;
        let c = Collection::create(dir.path(), cfg).unwrap();
        add(&c, case, 0..50);
        // Dropped without close: the rows stay in the log only.
        std::mem::forget(c);
        let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
        let keys: Vec<u64> = (0..50).collect();
        check_all(&c, case, &keys, "replayed");
    }
}

fn sgt_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sgt"))
        .collect()
}

/// The vectors of the frozen format-4 fixtures: written by 0.1.0 before
/// cosine vectors were kept as given (`sagitta.Index(8, metric="cos",
/// ...)`, keys 0..20, `.save(path)`).
fn fixture_vector(k: u64) -> Vec<f32> {
    (0..8)
        .map(|i| ((k * 7 + i * 3) % 11) as f32 - 5.0 + 0.25 * i as f32)
        .collect()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("segment-v4-cos-{name}.sgt"))
}

#[test]
fn frozen_v4_cosine_segments_read_back_their_unit_vectors() {
    for (name, dtype, tol) in [
        ("flat-f32", DType::F32, 1e-6),
        ("flat-f16", DType::F16, 1e-3),
        ("hnsw-sq8-full", DType::Sq8, 1e-6),
    ] {
        let seg = Segment::open(&fixture(name)).unwrap();
        assert_eq!(seg.info().version, 4, "{name}");
        seg.verify().unwrap();
        assert_eq!(seg.space().metric, Metric::Cos);
        assert_eq!(seg.space().dtype, dtype, "{name}");
        assert_eq!(seg.len(), 20);
        for k in 0..20u64 {
            let v = fixture_vector(k);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let got = seg.get(k).unwrap();
            // What the file holds: the unit vector, as written then.
            for (g, x) in got.iter().zip(&v) {
                assert!((g - x / norm).abs() <= tol, "{name} key {k}: {got:?}");
            }
            // And searches over it still find each vector first, at
            // distance about 0, under the cosine of vectors kept as given.
            let hits = IndexRead::search(
                &seg,
                VectorRef::F32(&v),
                1,
                &sagitta_index::SearchOptions {
                    exact: true,
                    ..Default::default()
                },
            )
            .unwrap();
            // (keys 11 apart were given the same vector)
            assert_eq!(fixture_vector(hits[0].key), v, "{name}: {hits:?}");
            assert!(hits[0].distance < 1e-3, "{name}: {hits:?}");
        }
    }
}
