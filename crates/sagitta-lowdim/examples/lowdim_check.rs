//! Exactness and cost of the low-dimensional index against a brute-force
//! `f64` oracle, on raw little-endian files:
//!
//! ```text
//! cargo run --release -p sagitta-lowdim --example lowdim_check -- \
//!     REFS.f32 LABELS.u16 DIM QUERIES.f32|loo:N [EXPECTED.f64] [--no-oracle] [--index PATH] [--passes N] [--leaf N] [--hot]
//! ```
//!
//! `loo:N` takes N rows of the references themselves as queries
//! (leave-one-out: each query's own row is excluded from its answer).
//! The oracle reads every value as `f64` the way a JSON parser reads the
//! decimal it came from (rows on a 10^-4 grid: `round(x·10^4) / 10^4`),
//! sums `(q - r)²` over dimensions in order, and breaks ties by the lower
//! row index. `EXPECTED.f64` holds one expected kNN label share per query.
#![allow(clippy::unwrap_used)]

use rayon::prelude::*;
use sagitta_lowdim::{LowDimIndex, LowDimScratch};
use std::time::Instant;

const K: usize = 5;

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn decimal(x: f32) -> f64 {
    (f64::from(x) * 1e4).round() / 1e4
}

/// Rows per oracle chunk, stored column-major so the scan vectorizes.
const CHUNK: usize = 4096;

/// The oracle's state for one query: its best (distance, id), excluding
/// `skip`.
struct Truth {
    q: Vec<f64>,
    skip: Option<u32>,
    best: Vec<(f64, u32)>,
}

#[inline(always)]
fn chunk_body(cols: &[f64], len: usize, base: u32, t: &mut Truth, dists: &mut [f64; CHUNK]) {
    dists.fill(0.0);
    for (d, &qd) in t.q.iter().enumerate() {
        let col = &cols[d * CHUNK..(d + 1) * CHUNK];
        for (o, &x) in dists.iter_mut().zip(col) {
            let v = qd - x;
            *o += v * v;
        }
    }
    let mut worst = if t.best.len() == K {
        t.best[K - 1].0
    } else {
        f64::INFINITY
    };
    for (j, &s) in dists[..len].iter().enumerate() {
        let id = base + j as u32;
        if s > worst || Some(id) == t.skip {
            continue;
        }
        let at = t
            .best
            .partition_point(|&(bd, bi)| bd < s || (bd == s && bi < id));
        t.best.insert(at, (s, id));
        if t.best.len() > K {
            t.best.pop();
        }
        if t.best.len() == K {
            worst = t.best[K - 1].0;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn chunk_avx512(
    cols: &[f64],
    len: usize,
    base: u32,
    t: &mut Truth,
    dists: &mut [f64; CHUNK],
) {
    chunk_body(cols, len, base, t, dists);
}

/// Brute force in f64 over every reference, all queries at once, chunk by
/// chunk (each row's sum runs over dimensions in order, as a naive loop).
fn oracle(refs: &[f64], dim: usize, truths: &mut [Truth]) {
    let n = refs.len() / dim;
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    let mut cols = vec![0f64; dim * CHUNK];
    for start in (0..n).step_by(CHUNK) {
        let len = CHUNK.min(n - start);
        for j in 0..CHUNK {
            for d in 0..dim {
                cols[d * CHUNK + j] = if j < len {
                    refs[(start + j) * dim + d]
                } else {
                    f64::INFINITY
                };
            }
        }
        truths.par_iter_mut().for_each_init(
            || Box::new([0f64; CHUNK]),
            |dists, t| {
                if avx512 {
                    // SAFETY: checked above.
                    unsafe { chunk_avx512(&cols, len, start as u32, t, dists) }
                } else {
                    chunk_body(&cols, len, start as u32, t, dists)
                }
            },
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let refs = f32s(&read(&args[0]));
    let labels: Vec<u16> = read(&args[1])
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let dim: usize = args[2].parse().unwrap();
    let n = refs.len() / dim;
    let (queries, loo) = match args[3].strip_prefix("loo:") {
        Some(count) => {
            let count: usize = count.parse().unwrap();
            let step = (n / count).max(1);
            let ids: Vec<u32> = (0..count).map(|i| (i * step) as u32).collect();
            let q: Vec<f32> = ids
                .iter()
                .flat_map(|&i| refs[i as usize * dim..(i as usize + 1) * dim].to_vec())
                .collect();
            (q, Some(ids))
        }
        None => (f32s(&read(&args[3])), None),
    };
    let expected: Option<Vec<f64>> = args.get(4).filter(|a| !a.starts_with("--")).map(|p| {
        read(p)
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    });
    let run_oracle = !args.iter().any(|a| a == "--no-oracle");
    let nq = queries.len() / dim;

    // `--index PATH`: read the index from PATH when it exists (written by
    // an earlier run), else build it and write it there.
    let saved = args
        .iter()
        .position(|a| a == "--index")
        .map(|i| args[i + 1].clone());
    let t = Instant::now();
    let index = match &saved {
        Some(p) if std::path::Path::new(p).exists() => {
            // Memory-mapped, as a service reads it.
            let file = std::fs::File::open(p).unwrap();
            // SAFETY: a read-only map of a file nothing writes meanwhile.
            let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
            LowDimIndex::from_shared(std::sync::Arc::new(map)).unwrap()
        }
        _ => {
            // `--leaf N`: rows per kd-tree leaf (default: the library's).
            let leaf = args
                .iter()
                .position(|a| a == "--leaf")
                .map_or(sagitta_lowdim::LEAF, |i| args[i + 1].parse().unwrap());
            let index = LowDimIndex::build_with_leaf(&refs, dim, Some(&labels), leaf).unwrap();
            if let Some(p) = &saved {
                std::fs::write(p, index.as_bytes()).unwrap();
            }
            index
        }
    };
    let build_s = t.elapsed().as_secs_f64();
    if std::env::var("HOT").is_ok() {
        for l in std::fs::read_to_string("/proc/self/smaps_rollup")
            .unwrap()
            .lines()
        {
            if l.contains("Pmd") || l.contains("Huge") || l.starts_with("Rss") {
                println!("{l}");
            }
        }
    }
    let view = index.view();
    println!(
        "rows {n}, dim {dim}, grid scale {:?}, {} bytes, build {build_s:.2} s",
        view.grid_scale(),
        index.as_bytes().len()
    );

    // Each query's answer (ids) and its time, one thread.
    let kk = if loo.is_some() { K + 1 } else { K };
    let mut scratch = LowDimScratch::default();
    let mut answers: Vec<Vec<u32>> = Vec::with_capacity(nq);
    let mut times = Vec::with_capacity(nq);
    let (mut rows, mut leaves) = (0u64, 0u64);
    // `--hot`: each query runs twice and the second run is timed (the cost
    // with the query's nodes and leaves in cache: the arithmetic alone).
    let hot = args.iter().any(|a| a == "--hot");
    // `--passes N` (default 2): every pass but the last only warms up.
    let passes: usize = args
        .iter()
        .position(|a| a == "--passes")
        .map_or(2, |i| args[i + 1].parse().unwrap());
    for pass in 0..passes {
        answers.clear();
        times.clear();
        rows = 0;
        leaves = 0;
        for (qi, q) in queries.chunks_exact(dim).enumerate() {
            if hot {
                view.search(q, kk, &mut scratch).unwrap();
            }
            let t = Instant::now();
            let hits = view.search(q, kk, &mut scratch).unwrap();
            let ids: Vec<u32> = match &loo {
                Some(ids) => hits
                    .iter()
                    .map(|h| h.id)
                    .filter(|&h| h != ids[qi])
                    .take(K)
                    .collect(),
                None => hits.iter().map(|h| h.id).collect(),
            };
            times.push(t.elapsed().as_nanos() as f64 / 1e3);
            rows += scratch.stats.rows;

            leaves += scratch.stats.leaves;
            answers.push(ids);
        }
        let _ = pass; // the first pass warms the page cache and the branch predictors
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p) as usize];
    println!(
        "queries {nq}, k {K}: mean {:.2} us, p50 {:.2} us, p99 {:.2} us, max {:.1} us; rows scanned mean {:.0}, leaves mean {:.1}",
        times.iter().sum::<f64>() / nq as f64,
        pct(0.5),
        pct(0.99),
        sorted[sorted.len() - 1],
        rows as f64 / nq as f64,
        leaves as f64 / nq as f64,
    );

    let share =
        |ids: &[u32]| ids.iter().filter(|&&i| labels[i as usize] == 1).count() as f64 / K as f64;
    if let Some(exp) = &expected {
        let wrong_score = answers
            .iter()
            .zip(exp)
            .filter(|(a, &e)| (share(a) - e).abs() > 1e-9)
            .count();
        let wrong_decision = answers
            .iter()
            .zip(exp)
            .filter(|(a, &e)| (share(a) < 0.6) != (e < 0.6))
            .count();
        println!("against the expected answers: {wrong_score} wrong scores, {wrong_decision} wrong decisions");
    }
    if run_oracle {
        let t = Instant::now();
        let refs64: Vec<f64> = refs.iter().map(|&x| decimal(x)).collect();
        let mut truths: Vec<Truth> = (0..nq)
            .map(|qi| Truth {
                q: queries[qi * dim..(qi + 1) * dim]
                    .iter()
                    .map(|&x| decimal(x))
                    .collect(),
                skip: loo.as_ref().map(|ids| ids[qi]),
                best: Vec::with_capacity(K + 1),
            })
            .collect();
        oracle(&refs64, dim, &mut truths);
        let truth: Vec<Vec<(f64, u32)>> = truths.into_iter().map(|t| t.best).collect();
        // Exact distance in grid units (rows on a 10^-4 grid): what the
        // contest's rule means by a tie.
        let code = |x: f32| (f64::from(x) * 1e4).round() as i64;
        let exact = |qi: usize, id: u32| -> i64 {
            (0..dim)
                .map(|d| {
                    let t = code(queries[qi * dim + d]) - code(refs[id as usize * dim + d]);
                    t * t
                })
                .sum()
        };
        let (mut wrong_lists, mut wrong_sets, mut tie_only, mut wrong_decisions) = (0, 0, 0, 0);
        for (qi, (a, t)) in answers.iter().zip(&truth).enumerate() {
            let t_ids: Vec<u32> = t.iter().map(|x| x.1).collect();
            if *a != t_ids {
                wrong_lists += 1;
                let (mut sa, mut st) = (a.clone(), t_ids.clone());
                sa.sort_unstable();
                st.sort_unstable();
                if sa != st {
                    wrong_sets += 1;
                }
                // Both lists hold the same exact distances: the difference
                // is only which of exactly tied rows come first.
                let mut da: Vec<i64> = a.iter().map(|&i| exact(qi, i)).collect();
                let mut dt: Vec<i64> = t_ids.iter().map(|&i| exact(qi, i)).collect();
                da.sort_unstable();
                dt.sort_unstable();
                if da == dt {
                    tie_only += 1;
                }
                if wrong_lists <= 5 {
                    println!("query {qi}: index {a:?} oracle {t:?}; exact distances index {da:?} oracle {dt:?}");
                }
            }
            if (share(a) < 0.6) != (share(&t_ids) < 0.6) {
                wrong_decisions += 1;
            }
        }
        println!(
            "against the f64 brute-force oracle ({:.0} s), {nq} queries: {wrong_decisions} wrong decisions, {wrong_sets} different neighbour sets, {wrong_lists} different lists, of which {tie_only} differ only among neighbours at exactly equal distance (the index puts the lower row first, as the rule says; the f64 oracle orders them by rounding error)",
            t.elapsed().as_secs_f64()
        );
    }
}
