//! Measurement commands: eval, open-bench, bench-search, bench-kernels.
//! These print numbers; they never decide pass/fail.

use anyhow::{bail, Context, Result};
use sagitta_cli::data;
use sagitta_cli::rows::{build, recall_keys, space_for, timed, Rows};
use sagitta_index::{Bitset, IndexKind, IndexRead, Neighbor, SearchOptions, VectorRef};
use sagitta_store::Segment;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Dataset directory (base.f16.npy, queries.f16.npy, gt.i32.npy).
    #[arg(long, default_value = "../shared/data/debian-minilm")]
    data: PathBuf,
    /// cos (uses the shipped ground truth) or hamming (sign bits; ground
    /// truth from the Flat index).
    #[arg(long, default_value = "cos")]
    metric: String,
    /// Comma-separated ef_search values.
    #[arg(long, default_value = "10,16,24,32,48,64,96,128,256")]
    ef: String,
    /// Comma-separated filter selectivities (e.g. 0.01,0.1); empty for none.
    #[arg(long, default_value = "")]
    filter: String,
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 16)]
    m: usize,
    #[arg(long, default_value_t = 128)]
    ef_construction: usize,
    /// Use only the first N base rows.
    #[arg(long)]
    limit: Option<usize>,
    /// Also save the built index as a segment file here.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Search the saved, memory-mapped segment instead of the in-memory index.
    #[arg(long)]
    from_segment: bool,
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| anyhow::anyhow!("bad list item {x:?}"))
        })
        .collect()
}

/// Recall counting ties: a result at or below the true k-th distance is a
/// hit (Hamming distances tie heavily, so key identity undercounts).
fn recall_ties(truth: &[Vec<Neighbor>], got: &[Vec<Neighbor>], k: usize) -> f64 {
    let hits: usize = truth
        .iter()
        .zip(got)
        .map(|(t, g)| {
            let kth = t[k - 1].distance;
            g.iter().take(k).filter(|n| n.distance <= kth).count()
        })
        .sum();
    hits as f64 / (truth.len() * k) as f64
}

pub fn run(a: &EvalArgs) -> Result<()> {
    let ds = data::load(&a.data, false)?;
    let n = a.limit.unwrap_or(ds.base.rows).min(ds.base.rows);
    let bits = a.metric == "hamming";
    let dims = ds.base.cols;
    let space = space_for(&a.metric, dims)?;
    let base = Rows::new(&ds.base, n, bits);
    let qs = Rows::new(&ds.queries, ds.queries.rows, bits);
    let k = a.k;
    println!(
        "# sagitta-bench eval: {} base × {} dims, {} queries, metric {}, k={k}",
        n,
        dims,
        qs.len(),
        a.metric
    );
    println!("# isa: {} ({})", sagitta_kernels::isa(), cpu_model());
    let (hnsw, secs) = build(space, IndexKind::Hnsw, &base, a.m, a.ef_construction)?;
    println!(
        "# HNSW M={} ef_construction={}: built in {:.1} s ({:.0} vectors/s, {} threads)",
        a.m,
        a.ef_construction,
        secs,
        n as f64 / secs,
        rayon::current_num_threads()
    );
    let (flat, _) = build(space, IndexKind::Flat, &base, a.m, a.ef_construction)?;
    let seg = match &a.save {
        Some(p) => {
            Segment::write(&hnsw, p)?;
            Some(Segment::open(p)?)
        }
        None => None,
    };
    let searched: &dyn IndexRead = match (&seg, a.from_segment) {
        (Some(s), true) => s,
        (None, true) => bail!("--from-segment needs --save"),
        _ => &hnsw,
    };
    let full = hnsw.keeps_full_precision();
    println!(
        "# searching: {}",
        if a.from_segment {
            "memory-mapped segment"
        } else {
            "in-memory index"
        }
    );

    // Exact oracle: the shipped ground truth for cosine over the full set,
    // the Flat index otherwise.
    let (flat_res, flat_qps) = timed(&flat, &qs, k, &SearchOptions::default())?;
    let truth_keys: Vec<Vec<u64>> = match (&ds.gt, bits, n == ds.base.rows) {
        (Some(gt), false, true) if a.metric == "cos" => {
            let mut agree = 0;
            let t: Vec<Vec<u64>> = (0..gt.rows)
                .map(|i| gt.row(i)[..k].iter().map(|&x| x as u64).collect())
                .collect();
            for (tk, f) in t.iter().zip(&flat_res) {
                agree += f.iter().filter(|n| tk.contains(&n.key)).count();
            }
            println!(
                "# oracle: shipped gt.i32.npy; Flat agrees with it on {:.4} of top-{k}",
                agree as f64 / (t.len() * k) as f64
            );
            t
        }
        _ => {
            println!("# oracle: Flat index (exact)");
            flat_res
                .iter()
                .map(|r| r.iter().map(|n| n.key).collect())
                .collect()
        }
    };
    println!("# Flat exact scan: {:.0} QPS single thread", flat_qps);

    let filters: Vec<f64> = parse_list(&a.filter)?;
    let efs: Vec<usize> = parse_list(&a.ef)?;
    if filters.is_empty() {
        println!("\n| ef_search | recall@{k} | QPS (1 thread) | mean latency µs |");
        println!("|---:|---:|---:|---:|");
        for &ef in &efs {
            let (res, qps) = timed(
                searched,
                &qs,
                k,
                &SearchOptions {
                    ef: Some(ef),
                    ..Default::default()
                },
            )?;
            let r = if bits {
                recall_ties(&flat_res, &res, k)
            } else {
                recall_keys(&truth_keys, &res, k)
            };
            println!("| {ef} | {r:.4} | {qps:.0} | {:.1} |", 1e6 / qps);
        }
        if bits {
            println!("\n(Hamming recall counts ties: a result at or below the exact k-th distance is a hit.)");
        }
    }
    for sel in filters {
        // A random allowed set of the given selectivity (fixed seed).
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ sel.to_bits();
        let allowed: Vec<u64> = (0..n as u64)
            .filter(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 1_000_000) as f64 / 1e6 < sel
            })
            .collect();
        let fh: Bitset = searched.filter_for_keys(&allowed);
        let ff: Bitset = flat.filter_for_keys(&allowed);
        let (truth, _) = timed(
            &flat,
            &qs,
            k,
            &SearchOptions {
                filter: Some(&ff),
                ..Default::default()
            },
        )?;
        println!(
            "\n## filter: {} of {} allowed ({:.1}%), oracle = Flat restricted to the same set",
            allowed.len(),
            n,
            100.0 * allowed.len() as f64 / n as f64
        );
        println!("| ef_search | recall@{k} | QPS (1 thread) | path |");
        println!("|---:|---:|---:|---|");
        for &ef in &efs {
            // The planner's choice (sagitta_index::plan): codes scanned and
            // re-scored where f32 rows are kept, the rows scanned where not.
            let scan =
                sagitta_index::prefer_filter_scan(allowed.len(), n, ef.max(k), 2 * a.m, full);
            let path = match (scan, full) {
                (true, true) => "scan of the allowed slots' codes, best re-scored",
                (true, false) => "exact scan of allowed slots",
                (false, _) => "filtered graph traversal",
            };
            let (res, qps) = timed(
                searched,
                &qs,
                k,
                &SearchOptions {
                    ef: Some(ef),
                    filter: Some(&fh),
                    ..Default::default()
                },
            )?;
            let r = if bits {
                recall_ties(&truth, &res, k)
            } else {
                recall_keys(
                    &truth
                        .iter()
                        .map(|t| t.iter().map(|n| n.key).collect())
                        .collect::<Vec<_>>(),
                    &res,
                    k,
                )
            };
            println!("| {ef} | {r:.4} | {qps:.0} | {path} |");
        }
    }
    Ok(())
}

pub fn open_bench(files: &[PathBuf], repeat: usize) -> Result<()> {
    println!("| file | vectors | bytes | open median µs | p10 µs | p90 µs |");
    println!("|---|---:|---:|---:|---:|---:|");
    for f in files {
        // Interleave nothing: each file measured in its own loop, after one
        // untimed open (so the first-touch of the inode is not counted).
        Segment::open(f)?;
        let mut t: Vec<f64> = (0..repeat)
            .map(|_| {
                let s = Instant::now();
                let seg = Segment::open(f);
                let e = s.elapsed().as_secs_f64() * 1e6;
                drop(seg);
                e
            })
            .collect();
        t.sort_by(f64::total_cmp);
        let seg = Segment::open(f)?;
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            f.display(),
            seg.info().live,
            seg.info().file_len,
            t[t.len() / 2],
            t[t.len() / 10],
            t[t.len() * 9 / 10]
        );
    }
    Ok(())
}

/// Single-thread per-query latency and all-core batch throughput of a
/// segment file, as one JSON line (read by `python/bench/binding_overhead.py`).
pub fn bench_search(
    index: &Path,
    queries: &Path,
    k: usize,
    ef: Option<usize>,
    repeat: usize,
) -> Result<()> {
    let seg = Segment::open(index).with_context(|| format!("opening {}", index.display()))?;
    let q = sagitta_cli::npy::read_f32(queries)?;
    let refs: Vec<VectorRef<'_>> = (0..q.rows).map(|i| VectorRef::F32(q.row(i))).collect();
    let opts = SearchOptions {
        ef,
        ..SearchOptions::default()
    };
    let best = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
        f()?; // warm-up: page in the file, fill scratch pools
        let mut best = f64::INFINITY;
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            f()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    };
    let single = best(&|| {
        for r in &refs {
            std::hint::black_box(seg.search(*r, k, &opts)?);
        }
        Ok(())
    })?;
    let batch = best(&|| {
        std::hint::black_box(seg.search_batch(&refs, k, &opts)?);
        Ok(())
    })?;
    let n = refs.len() as f64;
    println!(
        "{{\"isa\": \"{}\", \"queries\": {}, \"k\": {k}, \"ef\": {}, \"single_us_per_query\": {:.3}, \"single_qps\": {:.1}, \"batch_qps\": {:.1}, \"threads\": {}}}",
        sagitta_kernels::isa().name(),
        refs.len(),
        ef.unwrap_or(seg.ef_search()),
        single / n * 1e6,
        n / single,
        n / batch,
        rayon_threads()
    );
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn bench_kernels(dims: usize) -> Result<()> {
    let k = sagitta_kernels::kernels();
    println!("# isa: {} ({})", k.isa, cpu_model());
    let q: Vec<f32> = (0..dims).map(|i| (i as f32 * 0.1).sin()).collect();
    for (label, n) in [
        ("in cache (1k vectors, 1.5 MB)", 1_000usize),
        ("out of cache (500k vectors, 768 MB)", 500_000),
    ] {
        let data: Vec<f32> = (0..n * dims)
            .map(|i| ((i % 977) as f32 * 0.01).cos())
            .collect();
        let mut best = f64::MAX;
        let passes = if n > 10_000 { 3 } else { 2000 };
        for _ in 0..3 {
            let t = Instant::now();
            let mut acc = 0.0f32;
            for _ in 0..passes {
                for row in data.chunks_exact(dims) {
                    acc += (k.cos_f32)(&q, row);
                }
            }
            std::hint::black_box(acc);
            best = best.min(t.elapsed().as_secs_f64());
        }
        let bytes = (n * dims * 4 * passes) as f64;
        let calls = (n * passes) as f64;
        println!(
            "cos_f32 d{dims} {label}: {:.1} GB/s of vector data, {:.1} ns/call",
            bytes / best / 1e9,
            best / calls * 1e9
        );
    }
    // Memory read bandwidth, single thread: sum a 1 GiB array.
    let big: Vec<u64> = vec![1; 1 << 27];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let s: u64 = big.iter().copied().fold(0u64, u64::wrapping_add);
        std::hint::black_box(s);
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "memory read, 1 thread, 1 GiB sequential sum: {:.1} GB/s",
        (big.len() * 8) as f64 / best / 1e9
    );
    Ok(())
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into())
        + &format!(
            ", {} cores",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
}
