//! `Index::from_graph`: an HNSW index imported from an existing graph
//! answers like its source, tombstones the slots it does not keep, and
//! takes further inserts as well as an index built from scratch.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{
    DType, GraphView, HnswParams, Index, IndexError, IndexKind, IndexRead, IndexWrite, Metric,
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

/// `n` uniform random vectors in [-1, 1)^dims.
fn data(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng(seed | 1);
    (0..n)
        .map(|_| (0..dims).map(|_| r.f32()).collect())
        .collect()
}

fn key(i: usize) -> u64 {
    i as u64 * 7 + 3
}

fn add_rows(idx: &Index, rows: &[Vec<f32>], first: usize) {
    let keys: Vec<u64> = (first..first + rows.len()).map(key).collect();
    let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    idx.add_batch(&keys, &vecs, 0).unwrap();
}

fn hnsw(space: Space, rows: &[Vec<f32>]) -> Index {
    let idx = Index::hnsw(space, HnswParams::default()).unwrap();
    add_rows(&idx, rows, 0);
    idx
}

fn import_all(src: &Index, extra: usize) -> Index {
    let view = src.view();
    Index::from_graph(src.space(), src.params(), &view, &|_| true, extra).unwrap()
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

fn recall(oracle: &[Vec<u64>], got: &[Vec<u64>]) -> f64 {
    let (mut hit, mut total) = (0, 0);
    for (o, g) in oracle.iter().zip(got) {
        total += o.len();
        hit += g.iter().filter(|k| o.contains(k)).count();
    }
    hit as f64 / total as f64
}

#[test]
fn imported_graph_takes_inserts_as_well_as_a_scratch_build() {
    let (dims, base, more) = (32, 3000, 2000);
    for metric in [Metric::L2, Metric::Cos] {
        let space = Space::new(dims, metric, DType::F32).unwrap();
        let rows = data(base + more, dims, 11);
        let qs = data(200, dims, 12);
        let src = hnsw(space, &rows[..base]);
        let imported = import_all(&src, more);
        assert_eq!(imported.kind(), IndexKind::Hnsw);
        assert_eq!(imported.len(), base);
        // Half the new rows through `add_batch`, half as stored bytes
        // through `upsert_encoded_batch` (the merge's path).
        let half = base + more / 2;
        add_rows(&imported, &rows[base..half], base);
        let stride = space.stride();
        let mut stored = vec![0u8; (base + more - half) * stride];
        for (r, out) in rows[half..].iter().zip(stored.chunks_exact_mut(stride)) {
            space.encode(VectorRef::F32(r), out).unwrap();
        }
        let keys: Vec<u64> = (half..base + more).map(key).collect();
        imported.upsert_encoded_batch(&keys, &stored, 0).unwrap();
        assert_eq!(imported.len(), base + more);
        assert_eq!(imported.slot_count(), base + more);

        let flat = Index::flat(space).unwrap();
        add_rows(&flat, &rows, 0);
        let scratch = hnsw(space, &rows);
        let opts = SearchOptions::default();
        let oracle = keys_of(&flat, &qs, 10, &opts);
        let r_import = recall(&oracle, &keys_of(&imported, &qs, 10, &opts));
        let r_scratch = recall(&oracle, &keys_of(&scratch, &qs, 10, &opts));
        assert!(
            r_import >= 0.9 && r_import >= r_scratch - 0.02,
            "{metric:?}: recall of the import {r_import}, from scratch {r_scratch}"
        );

        // Removes and upserts on the import behave as on any index.
        assert!(imported.remove(key(5)));
        assert!(imported.remove(key(base + 5)));
        assert!(!imported.contains(key(5)));
        imported.upsert(key(6), VectorRef::F32(&rows[7])).unwrap();
        assert_eq!(imported.len(), base + more - 2);
        let hits = imported
            .search(VectorRef::F32(&rows[5]), 10, &opts)
            .unwrap();
        assert!(hits.iter().all(|n| n.key != key(5)));
        let hits = imported.search(VectorRef::F32(&rows[7]), 2, &opts).unwrap();
        let mut got: Vec<u64> = hits.iter().map(|n| n.key).collect();
        got.sort_unstable();
        assert_eq!(got, vec![key(6), key(7)]);
    }
}

#[test]
fn imported_graph_answers_exactly_like_its_source() {
    let space = Space::new(32, Metric::Cos, DType::F32).unwrap();
    let rows = data(3000, 32, 21);
    let src = hnsw(space, &rows);
    // Some tombstones in the source: deleted, and replaced (the old slot
    // keeps the key, dead, beside the new live one).
    for i in [3, 500, 2999] {
        assert!(src.remove(key(i)));
    }
    for i in [10, 11, 12] {
        src.upsert(key(i), VectorRef::F32(&rows[i + 100])).unwrap();
    }
    let imported = import_all(&src, 0);
    assert_eq!(imported.len(), src.len());
    assert_eq!(imported.slot_count(), src.slot_count());
    {
        let (a, b) = (src.view(), imported.view());
        assert_eq!(a.slots(), b.slots());
        assert_eq!(a.entry_point(), b.entry_point());
        let (mut na, mut nb) = (Vec::new(), Vec::new());
        for s in 0..a.slots() as u32 {
            assert_eq!(a.level(s), b.level(s), "slot {s}");
            assert_eq!(GraphView::level(&a, s), b.level(s));
            assert_eq!(a.key(s), b.key(s));
            assert_eq!(a.is_live(s), b.is_live(s));
            assert_eq!(a.vector(s), b.vector(s));
            for l in 0..=a.level(s) {
                a.neighbors(l, s, &mut na);
                b.neighbors(l, s, &mut nb);
                assert_eq!(na, nb, "slot {s} level {l}");
            }
        }
    }
    for ef in [10, 64] {
        let opts = SearchOptions {
            ef: Some(ef),
            ..Default::default()
        };
        for q in data(100, 32, 22) {
            let q = VectorRef::F32(&q);
            assert_eq!(
                src.search(q, 10, &opts).unwrap(),
                imported.search(q, 10, &opts).unwrap()
            );
        }
    }
    let exact = SearchOptions {
        exact: true,
        ..Default::default()
    };
    for q in data(20, 32, 23) {
        let q = VectorRef::F32(&q);
        assert_eq!(
            src.search(q, 10, &exact).unwrap(),
            imported.search(q, 10, &exact).unwrap()
        );
    }
    let keys = [key(1), key(2), key(12), key(3)];
    let f = src.filter_for_keys(&keys);
    let g = imported.filter_for_keys(&keys);
    assert_eq!(f.words(), g.words());
    assert_eq!(imported.get_raw(key(11)), src.get_raw(key(11)));
}

#[test]
fn slots_not_kept_are_tombstones() {
    let space = Space::new(32, Metric::L2, DType::F32).unwrap();
    let n = 3000;
    let rows = data(n, 32, 31);
    let src = hnsw(space, &rows);
    assert!(src.remove(key(1)));
    let (imported, dropped) = {
        let view = src.view();
        let dropped: Vec<u64> = (0..n as u32)
            .filter(|s| s.is_multiple_of(3))
            .map(|s| view.key(s))
            .collect();
        let keep = |s: u32| !s.is_multiple_of(3);
        let idx = Index::from_graph(space, src.params(), &view, &keep, 10).unwrap();
        (idx, dropped)
    };
    let live_src = src.len();
    assert_eq!(imported.len(), live_src - dropped.len());
    assert_eq!(imported.slot_count(), n);
    for &k in &dropped {
        assert!(!imported.contains(k), "dropped key {k} still present");
        assert_eq!(imported.slot_of(k), None);
        assert_eq!(imported.get_raw(k), None);
    }
    assert!(!imported.contains(key(1)));
    let all = imported.len();
    for q in data(20, 32, 32).iter().chain(&rows[..20]) {
        for exact in [false, true] {
            let opts = SearchOptions {
                ef: Some(all),
                exact,
                ..Default::default()
            };
            let hits = imported.search(VectorRef::F32(q), all, &opts).unwrap();
            assert!(hits.len() >= all * 9 / 10, "{} of {all}", hits.len());
            assert!(hits
                .iter()
                .all(|h| !dropped.contains(&h.key) && h.key != key(1)));
        }
    }
    // A dropped key can be added again: it gets a new slot.
    let k = dropped[4];
    let old_slot = src.slot_of(k).unwrap();
    imported.add(k, VectorRef::F32(&rows[0])).unwrap();
    assert!(imported.contains(k));
    assert_eq!(imported.slot_of(k), Some(n as u32));
    assert_ne!(imported.slot_of(k), Some(old_slot));
    assert_eq!(imported.len(), live_src - dropped.len() + 1);
    let hits = imported
        .search(VectorRef::F32(&rows[0]), 1, &SearchOptions::default())
        .unwrap();
    assert_eq!(hits[0].distance, 0.0);
    // Kept keys are still duplicates for `add`.
    let kept = {
        let view = src.view();
        let slot = (0..n as u32)
            .find(|s| !s.is_multiple_of(3) && view.is_live(*s))
            .unwrap();
        view.key(slot)
    };
    assert_eq!(
        imported.add(kept, VectorRef::F32(&rows[0])),
        Err(IndexError::DuplicateKey(kept))
    );
}

#[test]
fn empty_source_gives_an_empty_index() {
    let space = Space::new(8, Metric::L2, DType::F32).unwrap();
    let src = Index::hnsw(space, HnswParams::default()).unwrap();
    let imported = import_all(&src, 0);
    assert_eq!(imported.len(), 0);
    assert_eq!(imported.slot_count(), 0);
    assert!(imported.view().entry_point().is_none());
    assert_eq!(
        imported.search(VectorRef::F32(&[0.0; 8]), 1, &SearchOptions::default()),
        Ok(Vec::new())
    );
    let rows = data(300, 8, 41);
    add_rows(&imported, &rows, 0);
    assert_eq!(imported.len(), 300);
    let hits = imported
        .search(VectorRef::F32(&rows[9]), 1, &SearchOptions::default())
        .unwrap();
    assert_eq!(hits[0].key, key(9));
}

/// A hand-made graph for the error cases.
struct Fake {
    vectors: Vec<Vec<u8>>,
    keys: Vec<u64>,
    live: Vec<bool>,
    level0: Vec<Vec<u32>>,
    entry: Option<(u32, usize)>,
}

impl Fake {
    /// `n` valid slots of `space` in a ring, all live, keys 0..n.
    fn ring(space: Space, n: usize) -> Fake {
        Fake {
            vectors: (0..n)
                .map(|i| {
                    let mut v = vec![0u8; space.stride()];
                    let x = vec![i as f32; space.dims];
                    space.encode(VectorRef::F32(&x), &mut v).unwrap();
                    v
                })
                .collect(),
            keys: (0..n as u64).collect(),
            live: vec![true; n],
            level0: (0..n as u32)
                .map(|i| vec![(i + 1) % n as u32, (i + n as u32 - 1) % n as u32])
                .collect(),
            entry: (n > 0).then_some((0, 0)),
        }
    }
}

impl GraphView for Fake {
    fn slots(&self) -> usize {
        self.vectors.len()
    }
    fn vector(&self, slot: u32) -> &[u8] {
        &self.vectors[slot as usize]
    }
    fn key(&self, slot: u32) -> u64 {
        self.keys[slot as usize]
    }
    fn is_live(&self, slot: u32) -> bool {
        self.live[slot as usize]
    }
    fn level(&self, _slot: u32) -> usize {
        0
    }
    fn entry_point(&self) -> Option<(u32, usize)> {
        self.entry
    }
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        out.clear();
        if level == 0 {
            out.extend_from_slice(&self.level0[slot as usize]);
        }
    }
}

#[test]
fn bad_sources_are_refused() {
    let space = Space::new(8, Metric::L2, DType::F32).unwrap();
    let params = HnswParams::default();
    let all = |_: u32| true;
    let import = |g: &Fake| Index::from_graph(space, params, g, &all, 0);

    // The hand-made ring itself imports and searches.
    let ok = import(&Fake::ring(space, 50)).unwrap();
    assert_eq!(ok.len(), 50);
    let hits = ok
        .search(VectorRef::F32(&[20.0; 8]), 3, &SearchOptions::default())
        .unwrap();
    assert_eq!(hits[0].key, 20);

    // A stored vector shorter than the stride.
    let mut g = Fake::ring(space, 50);
    g.vectors[17].truncate(space.stride() - 4);
    assert!(matches!(
        import(&g),
        Err(IndexError::InvalidParameter { name: "src", .. })
    ));

    // Two live slots with one key; a dead slot sharing a key is fine, and
    // so is a duplicate the `keep` predicate drops.
    let mut g = Fake::ring(space, 50);
    g.keys[30] = 7;
    assert_eq!(import(&g).err(), Some(IndexError::DuplicateKey(7)));
    assert_eq!(
        Index::from_graph(space, params, &g, &|s| s != 30, 0)
            .unwrap()
            .len(),
        49
    );
    g.live[7] = false;
    let idx = import(&g).unwrap();
    assert_eq!(idx.len(), 49);
    assert_eq!(idx.slot_of(7), Some(30));

    // A list longer than m allows.
    let mut g = Fake::ring(space, 50);
    g.level0[3] = (4..4 + params.m0() as u32 + 1).collect();
    assert!(matches!(
        import(&g),
        Err(IndexError::InvalidParameter { name: "m", .. })
    ));
    g.level0[3].pop();
    assert!(import(&g).is_ok());

    // Live slots but no entry point: not an HNSW graph (a Flat index).
    let flat = Index::flat(space).unwrap();
    add_rows(&flat, &data(10, 8, 51), 0);
    let view = flat.view();
    assert!(matches!(
        Index::from_graph(space, params, &view, &all, 0),
        Err(IndexError::InvalidParameter { name: "src", .. })
    ));

    // Bad parameters are refused as by `Index::hnsw`.
    let bad = HnswParams { m: 1, ..params };
    assert!(matches!(
        Index::from_graph(space, bad, &Fake::ring(space, 5), &all, 0),
        Err(IndexError::InvalidParameter { name: "m", .. })
    ));
}
