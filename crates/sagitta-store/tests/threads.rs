//! No thread of a collection outlives it: closing or dropping a collection
//! joins its background threads, its optimizer's build pool and the
//! checks of the bloom filters it opened (found by fuzzing: LeakSanitizer
//! reported the allocations of build and bloom-check threads still exiting
//! after the collection was gone, `collection_files` and `flight_tickets`).
//! Alone in its test binary: it counts this process's threads.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, OpenMode};

/// Names of this process's threads that the store started (`sagitta-*`).
fn store_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("sagitta-"))
        .collect()
}

#[test]
#[cfg(target_os = "linux")]
fn closed_and_dropped_collections_leave_no_thread() {
    let dir = tempfile::tempdir().unwrap();
    let dims = 8;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.segment_size = 300 * cfg.bytes_per_vector();
    let keys: Vec<u64> = (0..2_000).collect();
    let rows: Vec<Vec<f32>> = keys
        .iter()
        .map(|&k| {
            (0..dims)
                .map(|d| ((k * 31 + d as u64) % 97) as f32)
                .collect()
        })
        .collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();

    let c = Collection::create(dir.path(), cfg).unwrap();
    c.add(&keys, &refs).unwrap();
    // optimize() returns once the optimizer has built every segment: the
    // build pool it used (started on first use) is up. Which pool depends
    // on timing: the urgent one for optimize()'s own tasks, the idle one
    // when writes paused long enough for the optimizer to build first (as
    // on a loaded machine), the background one while writes went on.
    c.optimize().unwrap();
    let pools = ["sagitta-urgent", "sagitta-idle", "sagitta-build"];
    assert!(
        store_threads()
            .iter()
            .any(|n| pools.iter().any(|p| n.starts_with(p))),
        "the optimizer's build pool runs while the collection is open: {:?}",
        store_threads()
    );
    c.close().unwrap();
    assert_eq!(store_threads(), Vec::<String>::new(), "after close()");

    // Reopened: sealed segments' bloom filters are mapped and checked by a
    // thread each; a writer starts its optimizer again.
    let w = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert!(w.contains_many(&keys).iter().all(|&x| x));
    drop(w);
    assert_eq!(store_threads(), Vec::<String>::new(), "after drop (writer)");

    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert!(r.contains_many(&[1, 1_999]).iter().all(|&x| x));
    drop(r);
    assert_eq!(store_threads(), Vec::<String>::new(), "after drop (reader)");
}
