//! Collection behaviour: multi-segment search against the Flat oracle,
//! upserts and deletes across segments, reopen, locks, torn WAL tails,
//! corrupt files, compaction.

#![allow(clippy::unwrap_used)]

use sagitta_index::{
    DType, HnswParams, Index, IndexKind, IndexRead, IndexWrite, Metric, SearchOptions, Space,
    VectorRef,
};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Durability, OpenMode, StoreError,
};
use std::path::Path;

fn vector(key: u64, dims: usize) -> Vec<f32> {
    // Deterministic per key, so any reader can check a stored vector.
    let mut z = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dims)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn config(dims: usize, segment_vectors: u64) -> CollectionConfig {
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.segment_size = (segment_vectors * c.bytes_per_vector()).max(4096);
    // Full segments stay apart (these tests are about many segments).
    c.max_segment_size = c.segment_size;
    c
}

fn add_range(c: &Collection, keys: std::ops::Range<u64>, dims: usize) {
    let rows: Vec<Vec<f32>> = keys.clone().map(|k| vector(k, dims)).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    let keys: Vec<u64> = keys.collect();
    c.add(&keys, &refs).unwrap();
}

fn exact_oracle(keys: &[u64], dims: usize, q: &[f32], k: usize) -> Vec<u64> {
    let flat = Index::flat(Space::new(dims, Metric::L2, DType::F32).unwrap()).unwrap();
    for &key in keys {
        flat.add(key, VectorRef::F32(&vector(key, dims))).unwrap();
    }
    flat.search(VectorRef::F32(q), k, &SearchOptions::default())
        .unwrap()
        .iter()
        .map(|n| n.key)
        .collect()
}

fn search_keys(c: &Collection, q: &[f32], k: usize, exact: bool) -> Vec<u64> {
    let opts = CollectionSearch {
        exact,
        ..Default::default()
    };
    c.search(&[VectorRef::F32(q)], k, &opts).unwrap()[0]
        .iter()
        .map(|n| n.key)
        .collect()
}

#[test]
fn twenty_segments_match_the_flat_oracle_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 16;
    let c = Collection::create(dir.path(), config(dims, 100)).unwrap();
    for start in (0..2000u64).step_by(250) {
        add_range(&c, start..start + 250, dims);
    }
    c.optimize().unwrap();
    let stats = c.stats();
    assert!(stats.segments >= 5, "{stats:?}");
    assert_eq!(stats.unindexed_vectors, 0, "{stats:?}");
    assert_eq!(c.len(), 2000);
    // Replace keys living in old segments, delete others.
    let up: Vec<u64> = (0..2000).step_by(7).collect();
    let rows: Vec<Vec<f32>> = up.iter().map(|&k| vector(k + 1_000_000, dims)).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    c.upsert(&up, &refs).unwrap();
    let del: Vec<u64> = (3..2000).step_by(11).collect();
    let removed = c.remove(&del).unwrap();
    assert_eq!(removed, del.len());
    assert_eq!(c.remove(&del).unwrap(), 0);
    let live: Vec<u64> = (0..2000).filter(|k| !del.contains(k)).collect();
    assert_eq!(c.len(), live.len());

    let check = |c: &Collection| {
        let flat = Index::flat(Space::new(dims, Metric::L2, DType::F32).unwrap()).unwrap();
        for &key in &live {
            let v = if up.contains(&key) {
                vector(key + 1_000_000, dims)
            } else {
                vector(key, dims)
            };
            flat.add(key, VectorRef::F32(&v)).unwrap();
        }
        for qi in 0..30u64 {
            let q = vector(5_000_000 + qi, dims);
            let want: Vec<u64> = flat
                .search(VectorRef::F32(&q), 10, &SearchOptions::default())
                .unwrap()
                .iter()
                .map(|n| n.key)
                .collect();
            assert_eq!(search_keys(c, &q, 10, true), want);
        }
        // A batch (segment by segment) answers as the queries one by one,
        // exact and approximate.
        let qs: Vec<Vec<f32>> = (0..40u64).map(|i| vector(6_000_000 + i, dims)).collect();
        let refs: Vec<VectorRef<'_>> = qs.iter().map(|q| VectorRef::F32(q)).collect();
        for exact in [true, false] {
            let opts = CollectionSearch {
                exact,
                ..Default::default()
            };
            let batch = c.search(&refs, 10, &opts).unwrap();
            for (q, hits) in qs.iter().zip(&batch) {
                let one = c.search(&[VectorRef::F32(q)], 10, &opts).unwrap();
                assert_eq!(hits, &one[0]);
                if exact {
                    let keys: Vec<u64> = hits.iter().map(|n| n.key).collect();
                    assert_eq!(keys, search_keys(c, q, 10, true));
                }
            }
        }
        assert!(del
            .iter()
            .all(|&k| !c.contains(k) && c.get_raw(k).is_none()));
        // Batch lookups (sorted and joined per part) agree with one-key
        // lookups: live, replaced, deleted and never-written keys, shuffled
        // and repeated, long and short batches.
        let mut probe: Vec<u64> = (0..2100u64).chain([7, 7, 3, u64::MAX]).collect();
        probe.sort_by_key(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for batch in [&probe[..], &probe[..5]] {
            let want: Vec<bool> = batch.iter().map(|&k| c.contains(k)).collect();
            assert_eq!(c.contains_many(batch), want);
            let want: Vec<Option<Vec<u8>>> = batch.iter().map(|&k| c.get_raw(k)).collect();
            assert_eq!(c.get_raw_many(batch), want);
            let live_in: Vec<bool> = batch
                .iter()
                .map(|k| live.binary_search(k).is_ok())
                .collect();
            assert_eq!(c.contains_many(batch), live_in);
        }
        let got = c.get_raw(up[3]).unwrap();
        let want: Vec<u8> = vector(up[3] + 1_000_000, dims)
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        assert_eq!(got, want);
        let mut keys: Vec<u64> = c.keys().collect();
        keys.sort_unstable();
        assert_eq!(keys, live);
        assert_eq!(c.items().count(), live.len());
    };
    check(&c);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    check(&c);
    let before = c.stats();
    assert!(before.tombstones > 0);
    c.compact().unwrap();
    let after = c.stats();
    assert_eq!(after.tombstones, 0);
    assert!(after.segments <= before.segments, "{after:?}");
    check(&c);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check(&c);
}

#[test]
fn default_settings_recall_over_many_segments() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 24;
    let c = Collection::create(dir.path(), config(dims, 500)).unwrap();
    add_range(&c, 0..5000, dims);
    c.optimize().unwrap();
    assert!(c.stats().segments >= 5, "{:?}", c.stats());
    let keys: Vec<u64> = (0..5000).collect();
    let mut hit = 0;
    for qi in 0..50u64 {
        let q = vector(9_000_000 + qi, dims);
        let want = exact_oracle(&keys, dims, &q, 10);
        let got = search_keys(&c, &q, 10, false);
        hit += got.iter().filter(|k| want.contains(k)).count();
    }
    let recall = hit as f64 / 500.0;
    assert!(recall >= 0.95, "recall {recall}");
}

#[test]
fn add_semantics_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 8;
    let c = Collection::create(dir.path(), config(dims, 50)).unwrap();
    add_range(&c, 0..120, dims);
    let v = vector(1, dims);
    let nan = vec![f32::NAN; dims];
    let e = c
        .add(&[500, 501], &[VectorRef::F32(&v), VectorRef::F32(&nan)])
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("row 1: component 0 is not finite"),
        "{e}"
    );
    let e = c
        .add(&[600, 5], &[VectorRef::F32(&v), VectorRef::F32(&v)])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "row 1: key 5 already exists (use upsert to replace it)"
    );
    let e = c
        .add(&[600, 600], &[VectorRef::F32(&v), VectorRef::F32(&v)])
        .unwrap_err();
    assert!(e.to_string().contains("key 600 already exists"));
    assert!(!c.contains(500) && !c.contains(600));
    assert_eq!(c.len(), 120);
    let n = c
        .add_once(&[5, 700, 700, 701], &[VectorRef::F32(&v); 4])
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(c.len(), 122);
    let short = vec![0.0f32; dims - 1];
    assert!(matches!(
        c.upsert(&[1], &[VectorRef::F32(&short)]),
        Err(StoreError::Index(_))
    ));
    let q = vector(3, dims);
    assert!(c
        .search(&[VectorRef::F32(&q)], 0, &Default::default())
        .is_err());
    // k beyond the live rows returns every live row; beyond MAX_K it is an error
    let all = &c
        .search(&[VectorRef::F32(&q)], 500, &Default::default())
        .unwrap()[0];
    assert_eq!(all.len(), 122);
    assert!(c
        .search(&[VectorRef::F32(&q)], 10_001, &Default::default())
        .is_err());
    // filters and radius
    let allowed = [3u64, 77, 110, 9999];
    let opts = CollectionSearch {
        filter: Some(&allowed),
        ..Default::default()
    };
    let r = &c.search(&[VectorRef::F32(&q)], 10, &opts).unwrap()[0];
    let mut got: Vec<u64> = r.iter().map(|n| n.key).collect();
    got.sort_unstable();
    assert_eq!(got, vec![3, 77, 110]);
    let opts = CollectionSearch {
        radius: Some(0.0),
        ..Default::default()
    };
    let r = &c.search(&[VectorRef::F32(&q)], 10, &opts).unwrap()[0];
    assert_eq!(r.iter().map(|n| n.key).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn one_writer_many_readers() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(8, 100)).unwrap();
    add_range(&c, 0..300, 8);
    assert!(matches!(
        Collection::open(dir.path(), OpenMode::ReadWrite),
        Err(StoreError::Locked { .. })
    ));
    let r1 = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    add_range(&c, 300..400, 8);
    let r2 = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(r1.len(), 300);
    assert_eq!(r2.len(), 400);
    assert!(matches!(
        r1.add(&[1000], &[VectorRef::F32(&vector(1, 8))]),
        Err(StoreError::ReadOnly { .. })
    ));
    assert!(matches!(r1.remove(&[1]), Err(StoreError::ReadOnly { .. })));
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.len(), 400);
    assert!(matches!(
        Collection::create(dir.path(), config(8, 100)),
        Err(StoreError::AlreadyExists { .. })
    ));
    assert!(matches!(
        Collection::open(&dir.path().join("nope"), OpenMode::ReadOnly),
        Err(StoreError::NotACollection { .. })
    ));
}

/// `stats()` while writes go on (a server's metrics scrape during
/// ingest): it once held the bloom filter's read lock while waiting for
/// the writer lock, and a write holding the writer lock waited for the
/// bloom's write lock, so both stopped for good.
#[test]
fn stats_during_writes_never_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let c = std::sync::Arc::new(Collection::create(dir.path(), config(8, 100)).unwrap());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || {
            for at in (0..20_000).step_by(50) {
                add_range(&c, at..at + 50, 8);
            }
            done_tx.send(()).unwrap();
        })
    };
    // With the lock-order inversion both threads stop for good: a
    // watchdog turns that into a failure of the test binary, not a hang.
    let (ok_tx, ok_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if ok_rx
            .recv_timeout(std::time::Duration::from_secs(300))
            .is_err()
        {
            eprintln!("stats_during_writes_never_deadlock: deadlocked");
            std::process::exit(1);
        }
    });
    let mut scrapes = 0u64;
    let finished = loop {
        match done_rx.try_recv() {
            Ok(()) => break true,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => break false,
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                let _ = c.stats();
                scrapes += 1;
            }
        }
    };
    let _ = ok_tx.send(());
    assert!(finished, "the writer thread died");
    writer.join().unwrap();
    assert!(scrapes > 0);
    assert_eq!(c.len(), 20_000);
}

fn wal_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_wal_tail_is_cut_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(8, 10_000)).unwrap();
    add_range(&c, 0..50, 8);
    drop(c);
    let wal = wal_files(dir.path()).pop().unwrap();
    let good_len = std::fs::metadata(&wal).unwrap().len();
    // A half-written record: a plausible length and garbage after it.
    let mut f = std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
    std::io::Write::write_all(&mut f, &[60, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    drop(f);
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(c.len(), 50);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), good_len);
    add_range(&c, 50..60, 8);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.len(), 60);
    for k in 0..60 {
        let want: Vec<u8> = vector(k, 8).iter().flat_map(|x| x.to_ne_bytes()).collect();
        assert_eq!(c.get_raw(k).unwrap(), want);
    }
}

#[test]
fn corrupt_manifest_is_an_error_and_a_corrupt_bloom_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(8, 100)).unwrap();
    add_range(&c, 0..450, 8);
    drop(c);
    let bloom = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("bloom-")
        })
        .unwrap();
    let mut b = std::fs::read(&bloom).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xFF;
    std::fs::write(&bloom, &b).unwrap();
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert!((0..450).all(|k| c.contains(k)));
    drop(c);
    let m = dir.path().join("MANIFEST");
    let mut text = std::fs::read(&m).unwrap();
    text[20] ^= 0x01;
    std::fs::write(&m, &text).unwrap();
    assert!(matches!(
        Collection::open(dir.path(), OpenMode::ReadOnly),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn stale_tmp_and_orphan_files_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(8, 100)).unwrap();
    add_range(&c, 0..250, 8);
    drop(c);
    std::fs::write(dir.path().join("seg-000099.sgt.tmp"), b"partial").unwrap();
    std::fs::write(dir.path().join("seg-000099.sgt"), b"orphan").unwrap();
    std::fs::write(dir.path().join("MANIFEST.tmp"), b"partial").unwrap();
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.len(), 250);
    for name in ["seg-000099.sgt.tmp", "seg-000099.sgt", "MANIFEST.tmp"] {
        assert!(!dir.path().join(name).exists(), "{name}");
    }
}

#[test]
fn nphd_collection_takes_variable_length_codes() {
    let dir = tempfile::tempdir().unwrap();
    let space = Space::new(256, Metric::Nphd, DType::B1).unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.segment_size = 200 * cfg.bytes_per_vector();
    cfg.durability = Durability::Off;
    cfg.kind = IndexKind::Hnsw;
    cfg.hnsw = HnswParams::default();
    let c = Collection::create(dir.path(), cfg).unwrap();
    let codes: Vec<Vec<u8>> = (0..1000u64)
        .map(|k| {
            let len = 1 + (k % 32) as usize;
            (0..len)
                .map(|i| (k.wrapping_mul(31).wrapping_add(i as u64 * 7)) as u8)
                .collect()
        })
        .collect();
    let refs: Vec<VectorRef<'_>> = codes.iter().map(|c| VectorRef::Bytes(c)).collect();
    let keys: Vec<u64> = (0..1000).collect();
    c.add(&keys, &refs).unwrap();
    assert!(c.stats().segments >= 4);
    let r = &c
        .search(
            &[VectorRef::Bytes(&codes[77])],
            1,
            &CollectionSearch {
                exact: true,
                ..Default::default()
            },
        )
        .unwrap()[0];
    assert_eq!(r[0].distance, 0.0);
    let long = vec![1u8; 33];
    assert!(c.add(&[5000], &[VectorRef::Bytes(&long)]).is_err());
}

#[test]
fn compaction_merges_small_segments_while_readers_search() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 8;
    let c = std::sync::Arc::new(Collection::create(dir.path(), config(dims, 1000)).unwrap());
    for i in 0..12u64 {
        add_range(&c, i * 40..(i + 1) * 40, dims);
        c.seal().unwrap();
    }
    // (the optimizer may already be merging them)
    assert!((1..=12).contains(&c.stats().segments));
    c.remove(&(0..480).step_by(3).collect::<Vec<u64>>())
        .unwrap();
    let live: Vec<u64> = (0..480).filter(|k| k % 3 != 0).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, stop, live) = (c.clone(), stop.clone(), live.clone());
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) || rounds < 3 {
                let q = vector(777_000 + rounds, dims);
                assert_eq!(
                    search_keys(&c, &q, 5, true),
                    exact_oracle(&live, dims, &q, 5)
                );
                rounds += 1;
            }
            rounds
        })
    };
    c.compact().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
    assert!(reader.join().unwrap() >= 3);
    let s = c.stats();
    assert_eq!(s.segments, 1, "{s:?}");
    assert_eq!(s.tombstones, 0);
    assert_eq!(c.len(), live.len());
    let segs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sgt")
        })
        .count();
    assert_eq!(segs, 1, "old segment files are removed");
}

/// The segment files a collection directory holds now, opened.
fn segment_files(dir: &Path) -> Vec<sagitta_store::Segment> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sgt") {
            out.push(sagitta_store::Segment::open(&p).unwrap());
        }
    }
    out
}

#[test]
fn graph_codes_are_the_default_and_answers_stay_exact_f32() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 24;
    let mut cfg = config(dims, 600);
    // Every segment gets its graph (at this size they would stay Flat).
    cfg.index_threshold = Some(0);
    assert_eq!(cfg.codes, Some(DType::Sq8));
    assert!(cfg.keeps_full());
    let c = Collection::create(dir.path(), cfg).unwrap();
    add_range(&c, 0..2400, dims);
    c.optimize().unwrap();
    assert_eq!(c.stats().unindexed_vectors, 0);
    // Built segments: sq8 codes for the graph, f32 rows beside them.
    let segs = segment_files(dir.path());
    assert!(!segs.is_empty());
    for s in &segs {
        assert_eq!(s.info().kind, IndexKind::Hnsw);
        assert_eq!(s.info().space.dtype, DType::Sq8);
        assert!(s.has_full_precision());
    }
    // Reads give the f32 vector back, bit for bit.
    for key in [0u64, 777, 2399] {
        let raw = c.get_raw(key).unwrap();
        let got = c.config().space.decode_floats(&raw).unwrap();
        assert_eq!(got, vector(key, dims), "key {key}");
    }
    // Answers: exact f32 distances, recall against the Flat oracle.
    let keys: Vec<u64> = (0..2400).collect();
    let flat = Index::flat(Space::new(dims, Metric::L2, DType::F32).unwrap()).unwrap();
    for &key in &keys {
        flat.add(key, VectorRef::F32(&vector(key, dims))).unwrap();
    }
    let (mut hits, mut total) = (0, 0);
    for qk in (5000..5100u64).map(|k| vector(k, dims)) {
        let q = VectorRef::F32(&qk);
        let truth = flat.search(q, 10, &SearchOptions::default()).unwrap();
        let got = c.search(&[q], 10, &CollectionSearch::default()).unwrap()[0].clone();
        for n in &got {
            let only = flat.filter_for_keys(&[n.key]);
            let exact = flat
                .search(
                    q,
                    1,
                    &SearchOptions {
                        filter: Some(&only),
                        ..Default::default()
                    },
                )
                .unwrap()[0];
            assert!((exact.distance - n.distance).abs() <= 1e-4 * exact.distance.max(1.0));
        }
        hits += truth
            .iter()
            .filter(|t| got.iter().any(|g| g.key == t.key))
            .count();
        total += truth.len();
    }
    let recall = hits as f64 / total as f64;
    assert!(recall >= 0.95, "recall {recall}");
    // Reopened (read-only too), the codes and the answers stay.
    c.close().unwrap();
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(r.config().codes, Some(DType::Sq8));
    assert_eq!(
        r.config().space.decode_floats(&r.get_raw(777).unwrap()),
        Some(vector(777, dims))
    );
    // A later upsert merges into the built graph without losing the rows.
    drop(r);
    let w = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    add_range(&w, 2400..2700, dims);
    w.optimize().unwrap();
    for key in [5u64, 2650] {
        let v = w.config().space.decode_floats(&w.get_raw(key).unwrap());
        assert_eq!(v, Some(vector(key, dims)));
    }
    assert_eq!(w.len(), 2700);
}

#[test]
fn codes_none_keeps_plain_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 16;
    let mut cfg = config(dims, 400);
    cfg.codes = None;
    let c = Collection::create(dir.path(), cfg).unwrap();
    add_range(&c, 0..1200, dims);
    c.optimize().unwrap();
    for s in segment_files(dir.path()) {
        assert_eq!(s.info().space.dtype, DType::F32);
        assert!(!s.has_full_precision());
    }
    c.close().unwrap();
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(r.config().codes, None);
    // Codes need f32 vectors under a float metric.
    let mut bad = config(dims, 400);
    bad.space = Space::new(dims, Metric::L2, DType::F16).unwrap();
    bad.codes = Some(DType::Sq8);
    assert!(matches!(
        Collection::create(&dir.path().join("bad"), bad),
        Err(StoreError::Config(_))
    ));
}

/// Segments under the index threshold stay Flat (no graph is built that
/// no search would walk) and answer exactly; merges stay Flat until they
/// pass it, then build a graph; an explicit threshold is kept across a
/// reopen, and 0 indexes everything.
#[test]
fn small_segments_stay_flat_until_merges_pass_the_index_threshold() {
    let dims = 24;
    let kinds = |dir: &Path| {
        let mut k: Vec<(IndexKind, usize)> = segment_files(dir)
            .iter()
            .map(|s| (s.info().kind, s.len()))
            .collect();
        k.sort_by_key(|x| x.1);
        k
    };
    let seal_batches = |c: &Collection| {
        for b in 0..3u64 {
            add_range(c, b * 2000..(b + 1) * 2000, dims);
            c.seal().unwrap();
        }
        c.optimize().unwrap();
    };
    let keys: Vec<u64> = (0..6000).collect();
    let check_exact = |c: &Collection| {
        for qk in 9000..9020u64 {
            let q = vector(qk, dims);
            let got: Vec<u64> = c
                .search(&[VectorRef::F32(&q)], 10, &CollectionSearch::default())
                .unwrap()[0]
                .iter()
                .map(|n| n.key)
                .collect();
            assert_eq!(got, exact_oracle(&keys, dims, &q, 10));
        }
    };

    // Default: 24-d f32 rows (96 bytes) stay Flat under ~20k rows: the
    // three 2k-row seals merge into one Flat segment.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dims, 100_000);
    cfg.max_segment_size = 1 << 30;
    let threshold = cfg.index_threshold_rows();
    assert!((10_000..40_000).contains(&threshold), "{threshold}");
    let c = Collection::create(dir.path(), cfg.clone()).unwrap();
    seal_batches(&c);
    assert_eq!(kinds(dir.path()), vec![(IndexKind::Flat, 6000)]);
    assert_eq!(c.stats().unindexed_vectors, 0);
    check_exact(&c);
    drop(c);

    // A threshold of 5000 rows: the merge passes it and gets a graph; the
    // setting survives a reopen.
    let dir = tempfile::tempdir().unwrap();
    let mut five = cfg.clone();
    five.index_threshold = Some(5000);
    let c = Collection::create(dir.path(), five).unwrap();
    seal_batches(&c);
    assert_eq!(kinds(dir.path()), vec![(IndexKind::Hnsw, 6000)]);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.config().index_threshold, Some(5000));
    assert_eq!(c.config().index_threshold_rows(), 5000);
    drop(c);

    // 0: every sealed part is indexed.
    let dir = tempfile::tempdir().unwrap();
    let mut zero = cfg;
    zero.index_threshold = Some(0);
    let c = Collection::create(dir.path(), zero).unwrap();
    seal_batches(&c);
    assert!(kinds(dir.path()).iter().all(|k| k.0 == IndexKind::Hnsw));
    assert_eq!(c.stats().unindexed_vectors, 0);
}

#[test]
fn batch_lookups_route_spread_keys_through_segment_key_filters() {
    // Segments large enough to get key filters (4096 keys and up), keys
    // spread evenly over all of them (as hashed ids are): a batch skips
    // the segments whose filter rules a key out, and must still answer
    // exactly as one-key lookups do, before and after the filters exist.
    let dir = tempfile::tempdir().unwrap();
    let dims = 4;
    let c = Collection::create(dir.path(), config(dims, 5000)).unwrap();
    let spread = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555;
    let mut written = Vec::new();
    for seg in 0..3u64 {
        let keys: Vec<u64> = (seg * 5000..(seg + 1) * 5000).map(spread).collect();
        let rows: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k, dims)).collect();
        let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        c.add(&keys, &refs).unwrap();
        c.seal().unwrap();
        written.extend(keys);
    }
    c.optimize().unwrap();
    assert!(c.stats().segments >= 3, "{:?}", c.stats());
    // Deleted keys must stay absent though their filter bits stay set.
    let del: Vec<u64> = written.iter().copied().step_by(13).collect();
    c.remove(&del).unwrap();
    let mut probe: Vec<u64> = written.clone();
    probe.extend((20_000..26_000u64).map(spread)); // never written
    probe.sort_by_key(|k| k.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let live = |k: &u64| written.contains(k) && !del.contains(k);
    for round in 0..2 {
        let want: Vec<bool> = probe.iter().map(live).collect();
        assert_eq!(c.contains_many(&probe), want, "round {round}");
        let got = c.get_raw_many(&probe[..2000]);
        for (k, g) in probe[..2000].iter().zip(&got) {
            assert_eq!(g.is_some(), live(k), "key {k}");
            if let Some(bytes) = g {
                let v: Vec<u8> = vector(*k, dims)
                    .iter()
                    .flat_map(|x| x.to_ne_bytes())
                    .collect();
                assert_eq!(bytes, &v);
            }
        }
        // Small batches: a few keys per segment, far apart in its key
        // index, are searched interleaved rather than in order.
        for chunk in probe.chunks(40) {
            let want: Vec<bool> = chunk.iter().map(live).collect();
            assert_eq!(c.contains_many(chunk), want, "round {round}");
        }
        // One-key lookups, with the filters the batches built.
        assert!(probe.iter().all(|k| c.contains(*k) == live(k)));
    }
}

/// `parts()` lists what `stats()` counts: every sealed segment with its
/// rows, tombstones and file, and a compaction's output in place of its
/// inputs.
#[test]
fn parts_describe_segments_tombstones_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 8;
    let c = Collection::create(dir.path(), config(dims, 1000)).unwrap();
    for i in 0..3u64 {
        add_range(&c, i * 100..(i + 1) * 100, dims);
        c.seal().unwrap();
    }
    c.remove(&[1, 2, 3, 150]).unwrap();
    // (the optimizer may merge the three meanwhile: a merge drops the
    // dead rows, so only these hold whatever it did)
    let parts = c.parts();
    assert!((1..=3).contains(&parts.len()), "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.live).sum::<usize>(), 296);
    assert!(parts.iter().map(|p| p.dead).sum::<usize>() <= 4);
    let mut files = 0;
    for p in &parts {
        assert_eq!(p.live + p.dead, p.rows, "{p:?}");
        if let Some(f) = &p.file {
            files += 1;
            let len = std::fs::metadata(dir.path().join(f)).unwrap().len();
            assert_eq!(p.file_bytes, len);
            assert!(p.written_ms.unwrap() > 1_700_000_000_000);
        }
    }
    assert!(files >= 1);
    let before: Vec<u64> = parts.iter().map(|p| p.id).collect();
    c.compact().unwrap();
    let after = c.parts();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].live, 296);
    assert_eq!(after[0].dead, 0);
    assert!(after[0].id > *before.iter().max().unwrap());
    // The history: the three seals, then whatever the optimizer and
    // compact() did, ending with the part left.
    let h = c.history();
    assert_eq!(h.iter().filter(|e| e.what == "seal").count(), 3, "{h:?}");
    let last = h.last().unwrap();
    assert_eq!(last.output, Some(after[0].id), "{h:?}");
    assert!(["merge", "compact", "build"].contains(&last.what), "{h:?}");
    assert!(h.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
}

/// A bulk load ends as a large segment and a small tail (too small to be
/// merged while writes go on: it would rewrite the large one for a few
/// rows). Once writes pause, the optimizer merges the tail into it on its
/// own, so every search walks one graph, not two; `optimize()` does it at
/// once.
#[test]
fn a_small_tail_merges_into_the_large_segment_once_writes_pause() {
    let dims = 8;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.kind = IndexKind::Hnsw;
    cfg.hnsw = HnswParams::default();
    cfg.index_threshold = Some(100);
    cfg.idle_seal_ms = 0;
    cfg.segment_size = 1 << 30;
    let all: Vec<u64> = (0..2000).collect();
    for wait_for_pause in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::create(dir.path(), cfg.clone()).unwrap();
        add_range(&c, 0..1800, dims);
        c.optimize().unwrap();
        assert_eq!(c.stats().segments, 1);
        // The tail: a ninth of the large segment.
        add_range(&c, 1800..2000, dims);
        c.seal().unwrap();
        if wait_for_pause {
            // Polled, with a deadline: the merge starts seconds after the
            // last write (5 s at least).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while c.stats().segments != 1 || c.stats().optimizer.task.is_some() {
                assert!(std::time::Instant::now() < deadline, "{:?}", c.stats());
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        } else {
            c.optimize().unwrap();
        }
        let s = c.stats();
        assert_eq!((s.segments, s.unindexed_vectors), (1, 0), "{s:?}");
        assert_eq!(s.optimizer.deferred, None, "{s:?}");
        assert_eq!(c.len(), all.len());
        for q in 0..5 {
            let q = vector(990_000 + q, dims);
            assert_eq!(
                search_keys(&c, &q, 10, true),
                exact_oracle(&all, dims, &q, 10)
            );
        }
        c.close().unwrap();
    }
}

/// Builds and merges write each row's full-precision vector from where the
/// row was (the build's index holds codes only): every live key reads back
/// the bytes it had before, bit for bit, through a build, a merge into the
/// built graph with rows replaced and removed, and a reopen; searches
/// re-rank with exact distances.
#[test]
fn built_segments_keep_every_row_bit_for_bit_through_builds_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 20;
    let space = Space::new(dims, Metric::Cos, DType::F32).unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.segment_size = (500 * cfg.bytes_per_vector()).max(4096);
    cfg.index_threshold = Some(0);
    assert!(cfg.keeps_full());
    let c = Collection::create(dir.path(), cfg).unwrap();
    let put = |keys: std::ops::Range<u64>, salt: u64| {
        let rows: Vec<Vec<f32>> = keys.clone().map(|k| vector(k + salt, dims)).collect();
        let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        c.upsert(&keys.collect::<Vec<_>>(), &refs).unwrap();
    };
    let snapshot = |c: &Collection, keys: &[u64]| -> Vec<Option<Vec<u8>>> {
        keys.iter().map(|&k| c.get_raw(k)).collect()
    };
    put(0..2000, 0);
    let keys: Vec<u64> = (0..2600).collect();
    let first = snapshot(&c, &keys);
    c.optimize().unwrap();
    assert_eq!(snapshot(&c, &keys), first, "after the first build");
    // Replacements of built rows, removals, new rows: merged into the graph.
    put(100..300, 7777);
    put(2000..2600, 0);
    c.remove(&(400..450).collect::<Vec<_>>()).unwrap();
    let second = snapshot(&c, &keys);
    assert_ne!(second[150], first[150], "key 150 replaced");
    assert!(second[420].is_none() && second[2500].is_some());
    c.optimize().unwrap();
    assert_eq!(c.stats().unindexed_vectors, 0);
    assert_eq!(snapshot(&c, &keys), second, "after the merge");
    for s in segment_files(dir.path()) {
        assert!(s.has_full_precision());
    }
    c.close().unwrap();
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(snapshot(&r, &keys), second, "reopened");
    // Distances come from those rows: a stored row is its own nearest
    // neighbour at distance 0 (cosine, up to rounding).
    for k in [0u64, 150, 1999, 2599] {
        let v = r
            .config()
            .space
            .decode_floats(&r.get_raw(k).unwrap())
            .unwrap();
        let hit = r
            .search(&[VectorRef::F32(&v)], 1, &CollectionSearch::default())
            .unwrap();
        assert_eq!(hit[0][0].key, k);
        assert!(hit[0][0].distance.abs() < 1e-5, "{}", hit[0][0].distance);
    }
}

#[test]
fn a_new_expansion_add_builds_the_next_graphs_and_a_reopen_forgets_it() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 8;
    let mut cfg = config(dims, 100_000);
    cfg.index_threshold = Some(0); // every segment gets a graph
    let c = Collection::create(dir.path(), cfg).unwrap();
    assert_eq!(c.expansion_add(), 128);
    add_range(&c, 0..300, dims);
    c.seal().unwrap();
    c.optimize().unwrap();
    let efs = |d: &Path| -> Vec<u32> {
        let mut v: Vec<u32> = segment_files(d)
            .iter()
            .map(|s| s.info().ef_construction)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(efs(dir.path()), vec![128]);

    c.set_expansion_add(40).unwrap();
    assert_eq!(c.expansion_add(), 40);
    for bad in [0, (1 << 16) + 1] {
        assert!(matches!(
            c.set_expansion_add(bad),
            Err(StoreError::Index(_))
        ));
    }
    assert_eq!(c.expansion_add(), 40);
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert!(matches!(
        r.set_expansion_add(64),
        Err(StoreError::ReadOnly { .. })
    ));
    assert_eq!(r.expansion_add(), 128);
    drop(r);

    // The next build (the new rows, into the built segment or beside it)
    // writes a graph built with 40, and records it.
    add_range(&c, 300..600, dims);
    c.seal().unwrap();
    c.optimize().unwrap();
    let now = efs(dir.path());
    assert!(now.contains(&40), "segments record {now:?}");
    let all: Vec<u64> = (0..600).collect();
    for q in [3u64, 333, 599] {
        let want = exact_oracle(&all, dims, &vector(q, dims), 5);
        assert_eq!(search_keys(&c, &vector(q, dims), 5, true), want);
    }
    c.close().unwrap();

    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.expansion_add(), 128, "not persisted");
    assert_eq!(c.len(), 600);
}
