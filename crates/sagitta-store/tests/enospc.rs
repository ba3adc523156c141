//! A real full disk: a collection on a size-limited tmpfs (mounted in a
//! private mount namespace, `unshare -rm`, so nothing outlives the test),
//! written until the file system has no room. Every write either is
//! acknowledged or fails with a typed disk-full error
//! ([`StoreError::is_disk_full`]: `ENOSPC` from the log, or
//! [`StoreError::Stalled`] once the flush fails and the frozen parts are
//! full); the mutable part stays bounded while writes are refused; every
//! acknowledged row is there, exactly as written; and once space returns
//! the same open collection flushes, builds and takes writes again, and
//! reopens with everything.
//!
//! The test runs itself again inside the namespace (the parent only
//! mounts and waits): a machine that cannot create one fails the test
//! with the reason, it is not skipped.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Index, IndexRead, IndexWrite, Metric, SearchOptions, Space, VectorRef};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, OpenMode, StoreError, MAX_FROZEN,
};
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

const DIMS: usize = 64;
/// The tmpfs: room for the filler and some tens of parts.
const FS_BYTES: u64 = 40 << 20;
/// Taken at the start and given back to end the fault: large enough that
/// the optimizer can rewrite everything the collection holds then.
const FILLER_BYTES: usize = 26 << 20;
const SEGMENT_SIZE: u64 = 1 << 20;
const BATCH: u64 = 200;
const ENV: &str = "SAGITTA_SMALL_FS";

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

fn bytes(key: u64) -> Vec<u8> {
    vector(key).iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write(c: &Collection, keys: &[u64]) -> Result<(), StoreError> {
    let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    c.upsert(keys, &refs)
}

/// Every acknowledged key holds its vector; what else is there came from
/// a refused batch (a write split at a part boundary may keep its first
/// piece); exact search agrees with a Flat oracle over the rows present.
fn check(c: &Collection, acked: &HashSet<u64>, refused: &HashSet<u64>) {
    let mut present = acked.len();
    for &k in acked {
        assert_eq!(c.get_raw(k), Some(bytes(k)), "acknowledged key {k}");
    }
    let flat = Index::flat(Space::new(DIMS, Metric::L2, DType::F32).unwrap()).unwrap();
    for &k in acked {
        flat.add(k, VectorRef::F32(&vector(k))).unwrap();
    }
    for &k in refused {
        if let Some(b) = c.get_raw(k) {
            assert_eq!(b, bytes(k), "key {k} of a refused write");
            flat.add(k, VectorRef::F32(&vector(k))).unwrap();
            present += 1;
        }
    }
    assert_eq!(c.len(), present);
    let exact = CollectionSearch {
        exact: true,
        ..Default::default()
    };
    for q in 0..10u64 {
        let q = vector(1 << 40 | q);
        let want: Vec<u64> = flat
            .search(VectorRef::F32(&q), 10, &SearchOptions::default())
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        let got: Vec<u64> = c.search(&[VectorRef::F32(&q)], 10, &exact).unwrap()[0]
            .iter()
            .map(|n| n.key)
            .collect();
        assert_eq!(got, want);
    }
}

fn on_small_fs(root: &Path) {
    let filler = root.join("filler");
    std::fs::write(&filler, vec![1u8; FILLER_BYTES]).unwrap();
    let dir = root.join("c");
    let mut cfg = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap());
    cfg.segment_size = SEGMENT_SIZE;
    cfg.idle_seal_ms = 0;
    // A part holds at most this many rows (the f32 row is the smallest
    // share of a row's bytes).
    let per_segment = SEGMENT_SIZE / (DIMS as u64 * 4);
    let c = Collection::create(&dir, cfg).unwrap();

    let (mut acked, mut refused) = (HashSet::new(), HashSet::new());
    let (mut stalled, mut no_space, mut max_active) = (0, 0, 0);
    let mut next = 0u64;
    // Until the disk has refused 30 writes in a row (a refused log append
    // is cut back, so a later smaller one may fit again).
    let mut refused_in_a_row = 0;
    while refused_in_a_row < 30 {
        assert!(next < 1_000_000, "the file system never filled up");
        let keys: Vec<u64> = (next..next + BATCH).collect();
        next += BATCH;
        match write(&c, &keys) {
            Ok(()) => {
                acked.extend(keys);
                refused_in_a_row = 0;
            }
            Err(e) => {
                assert!(e.is_disk_full(), "not a disk-full error: {e}");
                match e {
                    StoreError::Stalled { frozen, .. } => {
                        assert_eq!(frozen, MAX_FROZEN);
                        stalled += 1;
                    }
                    _ => no_space += 1,
                }
                refused.extend(keys);
                refused_in_a_row += 1;
            }
        }
        let s = c.stats();
        max_active = max_active.max(s.active_vectors as u64);
        assert!(s.frozen_segments <= MAX_FROZEN, "{s:?}");
    }
    // Memory: the mutable part never grew past one part and a batch.
    assert!(
        max_active <= per_segment + BATCH,
        "mutable part reached {max_active} rows (a part holds {per_segment})"
    );
    eprintln!(
        "full disk: {} rows acknowledged, {} writes refused ({stalled} stalled, {no_space} no space), mutable part at most {max_active} rows",
        acked.len(),
        refused.len() as u64 / BATCH
    );
    assert!(stalled + no_space >= 30);
    check(&c, &acked, &refused);

    // Space returns (the filler goes and the volume grows, as an operator
    // would make room: the optimizer's merges need the rows twice over):
    // the same open collection catches up and takes writes.
    std::fs::remove_file(&filler).unwrap();
    let grown = Command::new("mount")
        .args(["-o", &format!("remount,size={}", 4 * FS_BYTES)])
        .arg(root)
        .status()
        .unwrap();
    assert!(grown.success(), "remount: {grown}");
    // (a task that failed just before may still report its error once:
    // as a disk-full error, which a server answers with 507, not 500)
    let settled = (0..3).any(|_| match c.optimize() {
        Ok(()) => true,
        Err(e) => {
            assert!(e.is_disk_full(), "not a disk-full error: {e}");
            false
        }
    });
    assert!(settled, "{:?}", c.stats());
    let s = c.stats();
    assert_eq!(s.frozen_segments, 0, "{s:?}");
    assert_eq!(s.unindexed_vectors, 0, "{s:?}");
    let keys: Vec<u64> = (next..next + BATCH).collect();
    write(&c, &keys).unwrap();
    acked.extend(keys);
    check(&c, &acked, &refused);
    c.close().unwrap();
    let c = Collection::open(&dir, OpenMode::ReadWrite).unwrap();
    check(&c, &acked, &refused);
    c.close().unwrap();
}

#[test]
fn a_full_disk_refuses_writes_with_a_typed_error_and_loses_nothing() {
    if let Some(root) = std::env::var_os(ENV) {
        on_small_fs(Path::new(&root));
        return;
    }
    let mount = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount -t tmpfs -o size={FS_BYTES} sagitta-enospc \"$0\" && exec \"$1\" --exact \
         a_full_disk_refuses_writes_with_a_typed_error_and_loses_nothing --nocapture"
    );
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .arg(mount.path())
        .arg(&exe)
        .env(ENV, mount.path())
        .status()
        .unwrap_or_else(|e| panic!("cannot run unshare (util-linux) for a private tmpfs: {e}"));
    assert!(
        status.success(),
        "the run on a {FS_BYTES}-byte tmpfs failed ({status}): see its output above; \
         a machine without user namespaces cannot run this test"
    );
}
