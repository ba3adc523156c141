//! IVF-RaBitQ search allocates nothing once warm: a counting global
//! allocator counts every allocation made by this thread while 200
//! searches run (bits 1, 4 and 8; with and without rerank; with a filter).

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{
    DType, Index, IndexRead, IvfParams, Metric, Neighbor, SearchOptions, Space, VectorRef,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the allocator also runs while thread locals are torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(|c| c.get())
}

#[test]
fn warm_ivf_search_allocates_nothing() {
    let dims = 96;
    let mut st = 0x1234_5678u64;
    let mut rnd = || {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        (st >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let rows: Vec<Vec<f32>> = (0..3000)
        .map(|_| (0..dims).map(|_| rnd()).collect())
        .collect();
    let queries: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..dims).map(|_| rnd()).collect())
        .collect();
    for bits in [1u8, 4, 8] {
        let space = Space::new(dims, Metric::Cos, DType::F32).unwrap();
        let idx = Index::ivf_rq(
            space,
            IvfParams {
                bits,
                partitions: Some(12),
                ..IvfParams::default()
            },
        )
        .unwrap();
        let keys: Vec<u64> = (0..rows.len() as u64).collect();
        let vecs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
        idx.add_batch(&keys, &vecs, 1).unwrap();
        let filter = idx.filter_for_keys(&keys.iter().copied().step_by(3).collect::<Vec<_>>());
        let options = [
            SearchOptions {
                nprobe: Some(4),
                refine: Some(0),
                ..Default::default()
            },
            SearchOptions {
                nprobe: Some(6),
                refine: Some(50),
                ..Default::default()
            },
            SearchOptions {
                nprobe: Some(3),
                refine: Some(20),
                filter: Some(&filter),
                ..Default::default()
            },
        ];
        let mut out: Vec<Neighbor> = Vec::with_capacity(10);
        // Warm-up: sizes this thread's scratch for the model and depths.
        for o in &options {
            for q in &queries {
                idx.search_into(VectorRef::F32(q), 10, o, &mut out).unwrap();
            }
        }
        let mut total = 0usize;
        let n = allocations_during(|| {
            for round in 0..4 {
                for (i, q) in queries.iter().enumerate() {
                    let o = &options[(i + round) % options.len()];
                    idx.search_into(VectorRef::F32(q), 10, o, &mut out).unwrap();
                    total += out.len();
                }
            }
        });
        assert_eq!(total, 200 * 10, "every search returned k results");
        assert_eq!(n, 0, "bits {bits}: {n} allocations in 200 warm searches");
        // The counter itself works: an ordinary search allocates its result.
        let m = allocations_during(|| {
            let r = idx
                .search(VectorRef::F32(&queries[0]), 10, &options[0])
                .unwrap();
            assert_eq!(r.len(), 10);
        });
        assert!(m > 0);
    }
}
