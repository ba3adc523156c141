//! The first lookups after an open, while every key index is cold and its
//! reads are hinted in two rounds (ends, then the records near the key):
//! right answers for keys spread over all of u64, keys below 2^63 (as
//! iscc-style ids are), dense sequential ids, a segment of one key, and
//! keys at, before and after each segment's ends.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, OpenMode};

/// splitmix64's finaliser: distinct, evenly spread keys.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn write(c: &Collection, keys: &[u64]) {
    let rows: Vec<[f32; 4]> = keys.iter().map(|&k| [k as f32, 1.0, 2.0, 3.0]).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    c.add(keys, &refs).unwrap();
    c.seal().unwrap();
}

#[test]
fn first_lookups_in_cold_segments_are_right_whatever_the_key_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut cfg = CollectionConfig::new(Space::new(4, Metric::L2, DType::F32).unwrap());
    // Segments of up to 6,000 rows: no two of the larger groups merge.
    cfg.segment_size = 6_000 * cfg.bytes_per_vector();
    cfg.max_segment_size = cfg.segment_size;
    let c = Collection::create(&path, cfg).unwrap();
    let groups: Vec<Vec<u64>> = vec![
        (0..5_000).map(mix).collect(),                    // all of u64
        (5_000..10_000).map(|i| mix(i) >> 1).collect(),   // below 2^63
        (1_000_000..1_004_000).collect(),                 // sequential
        vec![77],                                         // one key
        (20_000..23_000).map(|i| mix(i) >> 20).collect(), // a narrow range
    ];
    for g in &groups {
        write(&c, g);
    }
    c.close().unwrap();
    assert!(Collection::metadata(&path).unwrap().segments >= 4);
    let mut probes: Vec<(u64, bool)> = Vec::new();
    for g in &groups {
        let (lo, hi) = (*g.iter().min().unwrap(), *g.iter().max().unwrap());
        probes.extend([(lo, true), (hi, true), (g[g.len() / 2], true)]);
        for k in [lo.wrapping_sub(1), hi.wrapping_add(1), lo / 2 + hi / 2 + 1] {
            let present = groups.iter().any(|g| g.contains(&k));
            probes.push((k, present));
        }
    }
    // Each probe the first lookup of a fresh reader, then all of them in
    // one reader (the later ones find some indexes warm, some cold).
    for &(k, present) in &probes {
        let r = Collection::open(&path, OpenMode::ReadOnly).unwrap();
        assert_eq!(r.contains(k), present, "key {k:#x}");
    }
    let r = Collection::open(&path, OpenMode::ReadOnly).unwrap();
    for &(k, present) in &probes {
        assert_eq!(r.contains(k), present, "key {k:#x}");
    }
    let all: Vec<u64> = groups.iter().flatten().copied().collect();
    assert!(all.iter().all(|&k| r.contains(k)));
    assert_eq!(r.len(), all.len());
}
