//! A segment file: opened, then searched (graph and exact), looked up,
//! walked, its payload and text sections read, and verified. Checksums are
//! patched first, so mutations reach the section parsers.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_index::{GraphView, IndexRead, SearchOptions, VectorRef};
use sagitta_store::Segment;

fuzz_target!(|data: &[u8]| {
    common::allow_caught_panics();
    let mut b = data.to_vec();
    common::patch_segment(&mut b);
    let p = common::file("fuzz.sgt", &b);
    let Ok(seg) = Segment::open(&p) else {
        return;
    };
    let dims = seg.info().space.dims.min(4096);
    let q = vec![0.25f32; dims];
    for (k, exact) in [(1, false), (5, false), (5, true)] {
        let opts = SearchOptions {
            exact,
            ..Default::default()
        };
        let _ = seg.search(VectorRef::F32(&q), k, &opts);
    }
    for key in [0u64, 1, 7, 1000, u64::MAX] {
        let _ = seg.get(key);
        let _ = seg.contains(key);
    }
    let mut keys = vec![0u64, 3, 9, 1000, 1 << 40];
    keys.sort_unstable();
    seg.slots_of_sorted(&keys, true, |_, _| {});
    let mut out = Vec::new();
    for s in 0..(seg.slot_count() as u32).min(64) + 2 {
        seg.neighbors(0, s, &mut out);
        seg.neighbors(1, s, &mut out);
        let _ = seg.is_live(s);
        let _ = seg.level(s);
    }
    if let Ok(Some(p)) = seg.payload() {
        let schema = p.schema().clone();
        for s in 0..4 {
            let _ = p.row(&schema, s);
        }
    }
    if let Ok(Some(t)) = seg.text() {
        // BM25 over the section, every posting and pruned (MaxScore reads
        // the postings in whatever order they are).
        use sagitta_text::{Accumulator, Bm25, FieldRead, TextQuery, Wanted};
        let fields: Vec<&dyn FieldRead> = t.fields().iter().map(|f| f as &dyn FieldRead).collect();
        let specs: Vec<_> = t
            .fields()
            .iter()
            .map(|f| sagitta_text::TextFieldSpec::new(f.name(), f.analyzer()))
            .collect();
        let mut q = TextQuery::new("the search engine vector", &specs, Bm25::default());
        q.add_stats(fields.iter().copied());
        q.finish();
        let mut acc = Accumulator::default();
        let mut out = Vec::new();
        for depth in [0, 1, 3] {
            let want = Wanted { depth, floor: 0.0 };
            q.top(
                fields.iter().copied(),
                t.nslots() as usize,
                want,
                |_| true,
                &mut acc,
                &mut out,
            );
        }
    }
    let _ = seg.verify();
});
