//! Helpers shared by the object storage tests.

#![allow(dead_code, clippy::unwrap_used)]

use sagitta_index::VectorRef;
use sagitta_store::{Collection, CollectionSearch};

pub fn vector(key: u64, dims: usize) -> Vec<f32> {
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

pub const DIMS: usize = 16;

pub fn add(c: &Collection, keys: std::ops::Range<u64>) {
    let rows: Vec<Vec<f32>> = keys.clone().map(|k| vector(k, DIMS)).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    let keys: Vec<u64> = keys.collect();
    c.upsert(&keys, &refs).unwrap();
}

pub fn answers(c: &Collection) -> Vec<Vec<(u64, u32)>> {
    let qs: Vec<Vec<f32>> = (0..20).map(|i| vector(1_000_000 + i, DIMS)).collect();
    let refs: Vec<VectorRef<'_>> = qs.iter().map(|r| VectorRef::F32(r)).collect();
    let opts = CollectionSearch {
        exact: true,
        ..Default::default()
    };
    c.search(&refs, 10, &opts)
        .unwrap()
        .into_iter()
        .map(|r| r.iter().map(|n| (n.key, n.distance.to_bits())).collect())
        .collect()
}
