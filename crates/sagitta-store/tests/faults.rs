//! Faults in background work: the file system refuses large files (a
//! file-size limit, `RLIMIT_FSIZE`, so every write past it fails with
//! EFBIG like a full disk would fail it), sized so that WAL appends, Flat
//! flushes and the small manifest / tombstone / bloom files still fit while
//! every HNSW segment the optimizer writes does not. The collection must
//! keep serving and taking writes, report the failure, lose nothing, and
//! resume once the fault is gone, without a restart.
//!
//! Its own test binary: the limit applies to the whole process.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Index, IndexRead, IndexWrite, Metric, SearchOptions, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, CollectionSearch, OpenMode, StoreError};

const DIMS: usize = 8;

fn vector(key: u64) -> Vec<f32> {
    let mut z = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIMS)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

fn set_file_limit(bytes: Option<u64>) {
    // SAFETY: plain libc calls on this process's own limits and signal
    // disposition; no memory is shared with them.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut r), 0);
        r.rlim_cur = bytes.map_or(r.rlim_max, |b| b.min(r.rlim_max));
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &r), 0);
    }
}

fn check_against_oracle(c: &Collection, keys: &[u64]) {
    let flat = Index::flat(Space::new(DIMS, Metric::L2, DType::F32).unwrap()).unwrap();
    for &k in keys {
        flat.add(k, VectorRef::F32(&vector(k))).unwrap();
    }
    assert_eq!(c.len(), keys.len());
    for qi in 0..20u64 {
        let q = vector(7_000_000 + qi);
        let want: Vec<u64> = flat
            .search(VectorRef::F32(&q), 10, &SearchOptions::default())
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        let exact = CollectionSearch {
            exact: true,
            ..Default::default()
        };
        let got: Vec<u64> = c.search(&[VectorRef::F32(&q)], 10, &exact).unwrap()[0]
            .iter()
            .map(|n| n.key)
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn failed_background_builds_keep_the_collection_serving_and_writable() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap());
    // 1000-row parts: a WAL file or a Flat segment of one is ~60 kB, its
    // HNSW segment ~190 kB, the bloom file ~80 kB.
    cfg.segment_size = 1000 * cfg.bytes_per_vector();
    cfg.idle_seal_ms = 0;
    // Every part is to be indexed (at this size they would stay Flat).
    cfg.index_threshold = Some(0);
    let c = Collection::create(dir.path(), cfg).unwrap();
    set_file_limit(Some(120 << 10));
    let mut keys = Vec::new();
    for b in 0..30u64 {
        let batch: Vec<u64> = (b * 100..(b + 1) * 100).collect();
        let rows: Vec<Vec<f32>> = batch.iter().map(|&k| vector(k)).collect();
        let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        c.upsert(&batch, &refs).unwrap(); // acknowledged despite the fault
        keys.extend(batch);
    }
    // The frozen part's files or the HNSW segment cannot be written:
    // optimize() says so (the flush it does itself fails with the I/O
    // error; the optimizer's own failures come as `Optimizer`).
    let e = c.optimize().unwrap_err();
    assert!(
        matches!(e, StoreError::Optimizer(_) | StoreError::Io { .. }),
        "{e}"
    );
    assert!(e.to_string().to_lowercase().contains("too large"), "{e}");
    let s = c.stats();
    assert!(
        s.optimizer.errors > 0 && s.optimizer.last_error.is_some(),
        "{s:?}"
    );
    assert_eq!(s.unindexed_vectors, 3000, "{s:?}");
    // Still serving every acknowledged row, and still writable.
    check_against_oracle(&c, &keys);
    c.remove(&[5, 6, 7]).unwrap();
    keys.retain(|k| ![5, 6, 7].contains(k));
    check_against_oracle(&c, &keys);

    // The fault goes away: the optimizer's retries succeed.
    set_file_limit(None);
    let mut settled = false;
    for _ in 0..3 {
        // (a task that failed just before the limit was lifted may still
        // report its error once)
        if c.optimize().is_ok() {
            settled = true;
            break;
        }
    }
    assert!(settled, "{:?}", c.stats());
    let s = c.stats();
    assert_eq!(s.unindexed_vectors, 0, "{s:?}");
    check_against_oracle(&c, &keys);
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check_against_oracle(&c, &keys);
    assert_eq!(c.stats().unindexed_vectors, 0);
}
