//! `sagitta-bench collection-bench`: ingest rate per 100k-vector window, open
//! time, and the cost of `contains` for absent keys, on a collection of
//! random binary codes (small on disk, so many segments fit anywhere).

use anyhow::Result;
use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, OpenMode};
use std::path::Path;
use std::time::Instant;

fn codes(n: usize, bytes: usize, seed: u64) -> Vec<u8> {
    let mut z = seed | 1;
    (0..n * bytes)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 32) as u8
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

/// Builds `segments × per_segment` codes of `bits` bits in `dir` (sealing
/// every `per_segment`), printing the ingest rate per 100k window, then
/// measures open time and absent-key lookups.
pub fn run(
    dir: &Path,
    segments: usize,
    per_segment: usize,
    bits: usize,
    opens: usize,
    reuse: bool,
) -> Result<()> {
    let build = !(reuse && dir.join("MANIFEST").exists());
    if build {
        let _ = std::fs::remove_dir_all(dir);
    }
    let space = Space::new(bits, Metric::Hamming, DType::B1)?;
    let mut cfg = CollectionConfig::new(space);
    cfg.segment_size = per_segment as u64 * cfg.bytes_per_vector();
    let bytes = bits / 8;
    let total = segments * per_segment;
    println!(
        "# {segments} segments x {per_segment} vectors = {total} codes of {bits} bits, HNSW M={} efc={}, isa {}",
        cfg.hnsw.m,
        cfg.hnsw.ef_construction,
        sagitta_kernels::isa().name()
    );
    if build {
        let c = Collection::create(dir, cfg)?;
        let batch = 10_000.min(per_segment);
        let mut window_start = Instant::now();
        let mut window_n = 0usize;
        let mut done = 0usize;
        let t0 = Instant::now();
        if total >= 100_000 {
            println!("| vectors | window vectors/s | segments |");
            println!("|---:|---:|---:|");
        }
        while done < total {
            let n = batch.min(total - done);
            let data = codes(n, bytes, done as u64 + 1);
            let refs: Vec<VectorRef<'_>> = data.chunks_exact(bytes).map(VectorRef::Bytes).collect();
            let keys: Vec<u64> = (done as u64..(done + n) as u64).collect();
            c.add(&keys, &refs)?;
            done += n;
            window_n += n;
            if window_n >= 100_000 || done == total {
                if total >= 100_000 {
                    println!(
                        "| {done} | {:.0} | {} |",
                        window_n as f64 / window_start.elapsed().as_secs_f64(),
                        c.stats().segments
                    );
                }
                window_start = Instant::now();
                window_n = 0;
            }
        }
        c.seal()?;
        let s = c.stats();
        println!(
            "built in {:.1} s: {} sealed segments, {} vectors, {:.1} MB on disk, bloom {} filter(s) {:.1}% full",
            t0.elapsed().as_secs_f64(),
            s.segments,
            s.vectors,
            s.bytes_on_disk as f64 / 1e6,
            s.bloom_filters,
            s.bloom_fill * 100.0
        );
    }
    for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
        drop(Collection::open(dir, mode)?); // warm the page cache
        let times: Vec<f64> = (0..opens)
            .map(|_| {
                let t = Instant::now();
                let c = Collection::open(dir, mode);
                let e = t.elapsed().as_secs_f64() * 1e3;
                drop(c);
                e
            })
            .collect();
        let (med, p90) = median(times);
        println!("open {mode:?}: median {med:.3} ms, p90 {p90:.3} ms ({opens} opens)");
    }
    let c = Collection::open(dir, OpenMode::ReadOnly)?;
    let total = c.len(); // keys are 0..total
    println!("{} sealed segments, {total} vectors", c.stats().segments);
    let absent: Vec<u64> = (0..1_000_000u64)
        .map(|i| total as u64 + i * 7 + 1)
        .collect();
    let mut hits = 0usize;
    let mut per_call = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for &k in &absent {
            hits += usize::from(c.contains(k));
        }
        per_call.push(t.elapsed().as_secs_f64() * 1e9 / absent.len() as f64);
    }
    let mut per_batch = Vec::new();
    for round in 0..200 {
        let keys = &absent[round * 1000..(round + 1) * 1000];
        let t = Instant::now();
        let n = keys.iter().filter(|&&k| c.contains(k)).count();
        per_batch.push(t.elapsed().as_secs_f64() * 1e6);
        hits += n;
    }
    let present = (0..1000u64)
        .filter(|&k| c.contains(k * (total as u64 / 1000).max(1)))
        .count();
    let (ns, _) = median(per_call);
    let (us, _) = median(per_batch);
    println!(
        "contains(absent): {ns:.1} ns per call, {us:.1} µs per batch of 1000; bloom false positives {:.3}%; present keys found {present}/1000",
        hits as f64 / (5.0 * 1e6 + 200_000.0) * 100.0
    );
    Ok(())
}
