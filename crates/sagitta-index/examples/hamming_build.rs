//! Times HNSW builds of random 256-bit codes (Hamming), as the iscc
//! benchmark's segments are built: `hamming_build ROWS [REPEATS [THREADS]]`.
#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, HnswParams, Index, Metric, Space};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let reps: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    let threads: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut x = 0x1234_5678_9abc_def0u64;
    let codes: Vec<u8> = (0..n * 32)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let keys: Vec<u64> = (0..n as u64).collect();
    for _ in 0..reps {
        let space = Space::new(256, Metric::Hamming, DType::B1).unwrap();
        let params = HnswParams {
            m: 16,
            ef_construction: 128,
            ef_search: 64,
            seed: 7,
        };
        let idx = Index::hnsw(space, params).unwrap();
        let t = Instant::now();
        idx.upsert_encoded_batch(&keys, &codes, threads).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!("{n} rows: {s:.2} s, {:.0} rows/s", n as f64 / s);
    }
}
