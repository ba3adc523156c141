//! Writes the frozen format-v1 fixture read back by `tests/segment.rs`:
//! `cargo run -p sagitta-store --example make_fixture -- tests/data/segment-v1.sgt`.
//! Run only when a new format version is introduced (keep old fixtures).

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{DType, HnswParams, Index, IndexWrite, Metric, Space, VectorRef};
use sagitta_store::Segment;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).ok_or("usage: make_fixture OUT")?;
    let space = Space::new(8, Metric::L2, DType::F32)?;
    let idx = Index::hnsw(
        space,
        HnswParams {
            m: 4,
            ef_construction: 16,
            ..Default::default()
        },
    )?;
    // Single-threaded, deterministic: key k holds [k, k/2, 0, 1, k%3, 0, 0, 0].
    for k in 0..64u64 {
        let v = [
            k as f32,
            k as f32 / 2.0,
            0.0,
            1.0,
            (k % 3) as f32,
            0.0,
            0.0,
            0.0,
        ];
        idx.add(k * 10, VectorRef::F32(&v))?;
    }
    idx.remove(130);
    let info = Segment::write(&idx, std::path::Path::new(&out))?;
    println!("{info:?}");
    Ok(())
}
