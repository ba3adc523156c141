//! `sagitta-bench lifecycle-bench`: the collection's life on a real dataset
//! (debian-minilm): load by `upsert` in batches of 1,000 (per-batch
//! latency, rows/s, beside a Flat collection), `optimize()` until the
//! optimizer has settled, reopen times (read-write and read-only, a small
//! and the full collection), and single-thread search after settle beside
//! a bare in-memory HNSW index built from the same rows (recall@10 / QPS
//! per ef, one query per call and one batch call, QPS interpolated at
//! recall 0.95 and 0.99). Prints a markdown report and writes JSON.

use anyhow::{bail, Context, Result};
use sagitta_cli::data;
use sagitta_index::{
    DType, HnswParams, Index, IndexKind, IndexRead, Metric, Neighbor, SearchOptions, Space,
    VectorRef,
};
use sagitta_store::{Collection, CollectionConfig, CollectionSearch, CollectionStats, OpenMode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct LifecycleArgs {
    /// Dataset directory (base.f16.npy, queries.f16.npy, gt.i32.npy).
    #[arg(long, default_value = "../shared/data/debian-minilm")]
    data: PathBuf,
    /// Use only the first N base rows (default: all). Below the full set
    /// the ground truth is computed by an exact Flat index.
    #[arg(long)]
    rows: Option<usize>,
    /// Timed passes per (engine, ef, mode); the median QPS is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Working directory for the collections (their subdirectories are
    /// replaced).
    #[arg(long, default_value = "/tmp/sagitta-lifecycle")]
    work: PathBuf,
    /// JSON report.
    #[arg(long, default_value = "bench/results/lifecycle/debian-minilm.json")]
    out: PathBuf,
    /// Skip the load into a Flat collection (the rate reference).
    #[arg(long)]
    skip_flat: bool,
}

const BATCH: usize = 1000;
const K: usize = 10;
const OPENS: usize = 20;
const SMALL: usize = 10_000;
const EFS: [usize; 9] = [16, 24, 32, 48, 64, 96, 128, 192, 256];

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

fn git_commit() -> Option<String> {
    let o = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Nearest-rank percentile (`p` in 0..=1) of an unsorted sample.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

fn stats_json(s: &CollectionStats) -> Value {
    json!({
        "segments": s.segments,
        "frozen_segments": s.frozen_segments,
        "vectors": s.vectors,
        "active_vectors": s.active_vectors,
        "unindexed_vectors": s.unindexed_vectors,
        "tombstones": s.tombstones,
        "bytes_on_disk": s.bytes_on_disk,
        "wal_bytes": s.wal_bytes,
        "bytes_in_memory": s.bytes_in_memory,
        "bytes_mapped": s.bytes_mapped,
        "optimizer": {
            "task": s.optimizer.task,
            "tasks_done": s.optimizer.tasks_done,
            "flushes": s.optimizer.flushes,
            "rows_flushed": s.optimizer.rows_flushed,
            "rows_indexed": s.optimizer.rows_indexed,
            "errors": s.optimizer.errors,
            "last_error": s.optimizer.last_error,
            "idle": s.optimizer.idle,
        },
    })
}

fn stats_line(s: &CollectionStats) -> String {
    format!(
        "segments {} (frozen {}), vectors {}, active {}, unindexed {}, {:.1} MB on disk (WAL {:.1} MB); \
         optimizer: task {}, tasks done {}, flushes {}, rows flushed {}, rows indexed {}, errors {}{}",
        s.segments,
        s.frozen_segments,
        s.vectors,
        s.active_vectors,
        s.unindexed_vectors,
        s.bytes_on_disk as f64 / 1e6,
        s.wal_bytes as f64 / 1e6,
        s.optimizer.task.as_deref().unwrap_or("none"),
        s.optimizer.tasks_done,
        s.optimizer.flushes,
        s.optimizer.rows_flushed,
        s.optimizer.rows_indexed,
        s.optimizer.errors,
        s.optimizer
            .last_error
            .as_deref()
            .map(|e| format!(" (last: {e})"))
            .unwrap_or_default(),
    )
}

/// One load by `upsert` in batches of [`BATCH`], then `optimize()`.
struct Load {
    batch_ms: Vec<f64>,
    load_s: f64,
    optimize_s: f64,
    before_optimize: CollectionStats,
    after_optimize: CollectionStats,
}

impl Load {
    fn rows_per_s(&self, n: usize) -> f64 {
        n as f64 / self.load_s
    }

    fn json(&self, n: usize) -> Value {
        let p50 = pct(&self.batch_ms, 0.5);
        let max = pct(&self.batch_ms, 1.0);
        json!({
            "batches": self.batch_ms.len(),
            "batch_ms": {
                "p50": p50,
                "p99": pct(&self.batch_ms, 0.99),
                "max": max,
                "max_over_median": max / p50,
                "all": self.batch_ms,
            },
            "load_s": self.load_s,
            "rows_per_s": self.rows_per_s(n),
            "optimize_s": self.optimize_s,
            "stats_before_optimize": stats_json(&self.before_optimize),
            "stats_after_optimize": stats_json(&self.after_optimize),
        })
    }
}

/// Creates a collection in `dir` (replaced) and loads `vecs` into it.
fn load(dir: &Path, cfg: CollectionConfig, vecs: &[VectorRef<'_>]) -> Result<(Collection, Load)> {
    fresh_dir(dir)?;
    let c = Collection::create(dir, cfg).with_context(|| format!("creating {}", dir.display()))?;
    let mut batch_ms = Vec::with_capacity(vecs.len().div_ceil(BATCH));
    let t0 = Instant::now();
    for (b, chunk) in vecs.chunks(BATCH).enumerate() {
        let start = (b * BATCH) as u64;
        let keys: Vec<u64> = (start..start + chunk.len() as u64).collect();
        let t = Instant::now();
        c.upsert(&keys, chunk)?;
        batch_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let load_s = t0.elapsed().as_secs_f64();
    let before_optimize = c.stats();
    let t = Instant::now();
    c.optimize()?;
    let optimize_s = t.elapsed().as_secs_f64();
    let after_optimize = c.stats();
    if after_optimize.vectors != vecs.len() {
        bail!(
            "{}: {} vectors after optimize, {} loaded",
            dir.display(),
            after_optimize.vectors,
            vecs.len()
        );
    }
    Ok((
        c,
        Load {
            batch_ms,
            load_s,
            optimize_s,
            before_optimize,
            after_optimize,
        },
    ))
}

/// Open (and close) times of a closed collection, per mode.
struct Reopen {
    rows: usize,
    /// (mode, open ms, close ms, rows replayed at the first open)
    modes: Vec<(OpenMode, Vec<f64>, Vec<f64>, usize)>,
}

fn reopen(dir: &Path, rows: usize) -> Result<Reopen> {
    let mut modes = Vec::new();
    for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
        // One untimed open first (page cache); it also tells whether the
        // close left anything in the log to replay.
        let c = Collection::open(dir, mode)?;
        let replayed = c.stats().active_vectors;
        if c.len() != rows {
            bail!(
                "{}: {} vectors after reopen, {rows} loaded",
                dir.display(),
                c.len()
            );
        }
        c.close()?;
        let (mut open_ms, mut close_ms) = (Vec::new(), Vec::new());
        for _ in 0..OPENS {
            let t = Instant::now();
            let c = Collection::open(dir, mode)?;
            open_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            c.close()?;
            close_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        modes.push((mode, open_ms, close_ms, replayed));
    }
    Ok(Reopen { rows, modes })
}

/// One engine's search numbers at one ef.
#[derive(Default)]
struct Point {
    recall_single: f64,
    recall_batch: f64,
    qps_single: Vec<f64>,
    qps_batch: Vec<f64>,
}

impl Point {
    fn json(&self, ef: usize) -> Value {
        let (ls, hs) = min_max(&self.qps_single);
        let (lb, hb) = min_max(&self.qps_batch);
        json!({
            "ef": ef,
            "recall_single": self.recall_single,
            "recall_batch": self.recall_batch,
            "qps_single": median(&self.qps_single),
            "qps_single_min": ls,
            "qps_single_max": hs,
            "qps_single_all": self.qps_single,
            "qps_batch": median(&self.qps_batch),
            "qps_batch_min": lb,
            "qps_batch_max": hb,
            "qps_batch_all": self.qps_batch,
        })
    }
}

fn recall(truth: &[Vec<u64>], got: &[Vec<Neighbor>]) -> f64 {
    let hits: usize = truth
        .iter()
        .zip(got)
        .map(|(t, g)| g.iter().take(K).filter(|n| t.contains(&n.key)).count())
        .sum();
    hits as f64 / (truth.len() * K) as f64
}

/// QPS at `target` recall by linear interpolation between the first two
/// consecutive points (in ef order) that bracket it; the first point's QPS
/// when it already reaches the target; `None` when no point does.
fn qps_at(curve: &[(f64, f64)], target: f64) -> Option<f64> {
    let first = curve.first()?;
    if first.0 >= target {
        return Some(first.1);
    }
    curve.windows(2).find_map(|w| {
        let ((r0, q0), (r1, q1)) = (w[0], w[1]);
        (r0 < target && r1 >= target).then(|| q0 + (q1 - q0) * (target - r0) / (r1 - r0))
    })
}

fn fmt_opt(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:.prec$}"))
}

pub fn run(a: &LifecycleArgs) -> Result<()> {
    let load_start = loadavg();
    let commit = git_commit();
    let ds = data::load(&a.data, false)?;
    let n = a.rows.unwrap_or(ds.base.rows).min(ds.base.rows);
    if n < K {
        bail!("--rows {n}: need at least {K}");
    }
    let reps = a.reps.max(1);
    let dims = ds.base.cols;
    let space = Space::new(dims, Metric::Cos, DType::F32)?;
    let vecs: Vec<VectorRef<'_>> = (0..n).map(|i| VectorRef::F32(ds.base.row(i))).collect();
    let queries: Vec<VectorRef<'_>> = (0..ds.queries.rows)
        .map(|i| VectorRef::F32(ds.queries.row(i)))
        .collect();
    let nq = queries.len();
    let cfg = CollectionConfig::new(space);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());

    println!("# sagitta-bench lifecycle-bench: {}", a.data.display());
    println!();
    println!("| | |");
    println!("|---|---|");
    println!("| rows | {n} × {dims} (cosine, f32), {nq} queries, k={K} |");
    println!("| isa | {} |", sagitta_kernels::isa().name());
    println!("| cores | {cores} |");
    println!("| commit | {} |", commit.as_deref().unwrap_or("n/a"));
    println!("| load average at start | {load_start} |");
    println!(
        "| collection | HNSW M={} efc={}, segment_size {} MiB, max_segment_size {} MiB, optimizer_threads {} (0 = one per core), durability {} |",
        cfg.hnsw.m,
        cfg.hnsw.ef_construction,
        cfg.segment_size >> 20,
        cfg.max_segment_size >> 20,
        cfg.optimizer_threads,
        cfg.durability.name()
    );

    // 1. Load.
    let hnsw_dir = a.work.join(format!("hnsw-{n}"));
    let (coll, hnsw_load) = load(&hnsw_dir, cfg.clone(), &vecs)?;
    let flat_load = if a.skip_flat {
        None
    } else {
        let flat_dir = a.work.join(format!("flat-{n}"));
        let mut fcfg = cfg.clone();
        fcfg.kind = IndexKind::Flat;
        let (fc, l) = load(&flat_dir, fcfg, &vecs)?;
        fc.close()?;
        fresh_dir(&flat_dir)?;
        Some(l)
    };
    println!();
    println!(
        "## 1. Load: upsert in batches of {BATCH} ({} batches), then optimize()",
        vecs.len().div_ceil(BATCH)
    );
    println!();
    println!("| collection | rows/s (load) | batch p50 ms | batch p99 ms | batch max ms | max/median | load s | optimize() s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut loads = vec![("HNSW (default)", &hnsw_load)];
    if let Some(f) = &flat_load {
        loads.push(("Flat", f));
    }
    for (name, l) in &loads {
        let p50 = pct(&l.batch_ms, 0.5);
        let max = pct(&l.batch_ms, 1.0);
        println!(
            "| {name} | {:.0} | {p50:.2} | {:.2} | {max:.2} | {:.1} | {:.2} | {:.2} |",
            l.rows_per_s(n),
            pct(&l.batch_ms, 0.99),
            max / p50,
            l.load_s,
            l.optimize_s
        );
    }
    if let Some(f) = &flat_load {
        println!();
        println!(
            "Load rate HNSW / Flat: {:.3}",
            hnsw_load.rows_per_s(n) / f.rows_per_s(n)
        );
    }
    println!();
    for (name, l) in &loads {
        println!(
            "- {name}, stats before optimize(): {}",
            stats_line(&l.before_optimize)
        );
        println!(
            "- {name}, stats after optimize(): {}",
            stats_line(&l.after_optimize)
        );
    }

    // 3. Search after settle (before closing: the settled, open collection),
    // beside a bare HNSW index over the same rows, stored as the
    // collection's built segments are (codes plus full rows by default).
    let idx = Index::hnsw(cfg.built_space(), HnswParams::default())?;
    let idx = if cfg.keeps_full() {
        idx.keep_full_precision()?
    } else {
        idx
    };
    let keys: Vec<u64> = (0..n as u64).collect();
    let t = Instant::now();
    idx.add_batch(&keys, &vecs, 0)?;
    let index_build_s = t.elapsed().as_secs_f64();

    let truth: Vec<Vec<u64>>;
    let oracle: &str;
    match &ds.gt {
        Some(gt) if n == ds.base.rows && gt.cols >= K => {
            truth = (0..gt.rows)
                .map(|i| gt.row(i)[..K].iter().map(|&x| x as u64).collect())
                .collect();
            oracle = "shipped gt.i32.npy";
        }
        _ => {
            let flat = Index::new(space, IndexKind::Flat, HnswParams::default())?;
            flat.add_batch(&keys, &vecs, 0)?;
            truth = flat
                .search_batch(&queries, K, &SearchOptions::default())?
                .iter()
                .map(|r| r.iter().map(|x| x.key).collect())
                .collect();
            oracle = "exact Flat index over the same rows";
        }
    }
    if truth.len() != nq {
        bail!("ground truth has {} rows, {nq} queries", truth.len());
    }

    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let (coll_pts, idx_pts) = pool.install(|| -> Result<(Vec<Point>, Vec<Point>)> {
        let copts = |ef| CollectionSearch {
            ef: Some(ef),
            ..Default::default()
        };
        let iopts = |ef| SearchOptions {
            ef: Some(ef),
            ..Default::default()
        };
        let coll_single = |ef: usize| -> Result<(Vec<Vec<Neighbor>>, f64)> {
            let o = copts(ef);
            let t = Instant::now();
            let mut out = Vec::with_capacity(nq);
            for q in &queries {
                out.extend(coll.search(std::slice::from_ref(q), K, &o)?);
            }
            Ok((out, nq as f64 / t.elapsed().as_secs_f64()))
        };
        let coll_batch = |ef: usize| -> Result<(Vec<Vec<Neighbor>>, f64)> {
            let t = Instant::now();
            let out = coll.search(&queries, K, &copts(ef))?;
            Ok((out, nq as f64 / t.elapsed().as_secs_f64()))
        };
        let idx_single = |ef: usize| -> Result<(Vec<Vec<Neighbor>>, f64)> {
            let o = iopts(ef);
            let t = Instant::now();
            let mut out = Vec::with_capacity(nq);
            for q in &queries {
                out.push(idx.search(*q, K, &o)?);
            }
            Ok((out, nq as f64 / t.elapsed().as_secs_f64()))
        };
        let idx_batch = |ef: usize| -> Result<(Vec<Vec<Neighbor>>, f64)> {
            let t = Instant::now();
            let out = idx.search_batch(&queries, K, &iopts(ef))?;
            Ok((out, nq as f64 / t.elapsed().as_secs_f64()))
        };
        // Warm-up: every engine and mode once (scratch buffers, pages).
        coll_single(64)?;
        idx_single(64)?;
        coll_batch(64)?;
        idx_batch(64)?;
        let mut cp: Vec<Point> = EFS.iter().map(|_| Point::default()).collect();
        let mut ip: Vec<Point> = EFS.iter().map(|_| Point::default()).collect();
        for (i, &ef) in EFS.iter().enumerate() {
            for rep in 0..reps {
                let (r, q) = coll_single(ef)?;
                if rep == 0 {
                    cp[i].recall_single = recall(&truth, &r);
                }
                cp[i].qps_single.push(q);
                let (r, q) = idx_single(ef)?;
                if rep == 0 {
                    ip[i].recall_single = recall(&truth, &r);
                }
                ip[i].qps_single.push(q);
                let (r, q) = coll_batch(ef)?;
                if rep == 0 {
                    cp[i].recall_batch = recall(&truth, &r);
                }
                cp[i].qps_batch.push(q);
                let (r, q) = idx_batch(ef)?;
                if rep == 0 {
                    ip[i].recall_batch = recall(&truth, &r);
                }
                ip[i].qps_batch.push(q);
            }
        }
        Ok((cp, ip))
    })?;
    let search_stats = coll.stats();

    // 2. Reopen: close, then timed opens of the full collection and of a
    // 10k one.
    let t = Instant::now();
    coll.close()?;
    let close_s = t.elapsed().as_secs_f64();
    let mut reopens = Vec::new();
    let mut small_load = None;
    if n > SMALL {
        let small_dir = a.work.join(format!("hnsw-{SMALL}"));
        let (sc, l) = load(&small_dir, cfg.clone(), &vecs[..SMALL])?;
        sc.close()?;
        small_load = Some(l);
        reopens.push(reopen(&small_dir, SMALL)?);
    }
    reopens.push(reopen(&hnsw_dir, n)?);

    println!();
    println!(
        "## 2. Reopen after close() ({OPENS} timed opens per mode, each then closed; one untimed open first)"
    );
    println!();
    println!(
        "close() of the {n}-row collection after the searches: {:.1} ms",
        close_s * 1e3
    );
    if let Some(l) = &small_load {
        println!(
            "({SMALL}-row collection: loaded at {:.0} rows/s, optimize() {:.2} s; {})",
            l.rows_per_s(SMALL),
            l.optimize_s,
            stats_line(&l.after_optimize)
        );
    }
    println!();
    println!("| rows | mode | open median ms | open p90 ms | close median ms | rows replayed |");
    println!("|---:|---|---:|---:|---:|---:|");
    for r in &reopens {
        for (mode, o, c, replayed) in &r.modes {
            println!(
                "| {} | {mode:?} | {:.3} | {:.3} | {:.3} | {replayed} |",
                r.rows,
                median(o),
                pct(o, 0.9),
                median(c)
            );
        }
    }

    println!();
    println!(
        "## 3. Search after settle, 1 thread (median of {reps} reps, min–max), k={K}, {nq} queries"
    );
    println!();
    println!(
        "Collection: {} segment(s), {} unindexed. Bare index: Index::hnsw(M={}, efc={}) via add_batch on all cores, built in {index_build_s:.1} s. Oracle: {oracle}.",
        search_stats.segments,
        search_stats.unindexed_vectors,
        HnswParams::default().m,
        HnswParams::default().ef_construction
    );
    for (mode, batch) in [("one query per call", false), ("one batch call", true)] {
        println!();
        println!("### {mode}");
        println!();
        println!("| ef | recall coll | recall index | QPS coll | QPS index | coll/index | coll min–max | index min–max |");
        println!("|---:|---:|---:|---:|---:|---:|---|---|");
        for (i, &ef) in EFS.iter().enumerate() {
            let (c, x) = (&coll_pts[i], &idx_pts[i]);
            let (rc, rx, qc, qx) = if batch {
                (c.recall_batch, x.recall_batch, &c.qps_batch, &x.qps_batch)
            } else {
                (
                    c.recall_single,
                    x.recall_single,
                    &c.qps_single,
                    &x.qps_single,
                )
            };
            let (lc, hc) = min_max(qc);
            let (lx, hx) = min_max(qx);
            println!(
                "| {ef} | {rc:.4} | {rx:.4} | {:.0} | {:.0} | {:.3} | {lc:.0}–{hc:.0} | {lx:.0}–{hx:.0} |",
                median(qc),
                median(qx),
                median(qc) / median(qx)
            );
        }
    }
    let curve = |pts: &[Point], batch: bool| -> Vec<(f64, f64)> {
        pts.iter()
            .map(|p| {
                if batch {
                    (p.recall_batch, median(&p.qps_batch))
                } else {
                    (p.recall_single, median(&p.qps_single))
                }
            })
            .collect()
    };
    println!();
    println!("### QPS at a recall@{K} target (linear interpolation over the ef curve)");
    println!();
    println!("| mode | target | QPS coll | QPS index | coll/index |");
    println!("|---|---:|---:|---:|---:|");
    let mut at_json = Vec::new();
    for (mode, batch) in [("single", false), ("batch", true)] {
        for target in [0.95, 0.99] {
            let qc = qps_at(&curve(&coll_pts, batch), target);
            let qx = qps_at(&curve(&idx_pts, batch), target);
            let ratio = qc.zip(qx).map(|(c, x)| c / x);
            println!(
                "| {mode} | {target} | {} | {} | {} |",
                fmt_opt(qc, 0),
                fmt_opt(qx, 0),
                fmt_opt(ratio, 3)
            );
            at_json.push(json!({
                "mode": mode,
                "recall": target,
                "qps_collection": qc,
                "qps_index": qx,
                "ratio": ratio,
            }));
        }
    }

    let load_end = loadavg();
    println!();
    println!("Load average at end: {load_end}");

    let report = json!({
        "bench": "lifecycle",
        "dataset": a.data.display().to_string(),
        "rows": n,
        "dims": dims,
        "queries": nq,
        "k": K,
        "isa": sagitta_kernels::isa().name(),
        "cores": cores,
        "commit": commit,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "reps": reps,
        "config": {
            "kind": "hnsw",
            "m": cfg.hnsw.m,
            "ef_construction": cfg.hnsw.ef_construction,
            "segment_size": cfg.segment_size,
            "max_segment_size": cfg.max_segment_size,
            "idle_seal_ms": cfg.idle_seal_ms,
            "optimizer_threads": cfg.optimizer_threads,
            "durability": cfg.durability.name(),
        },
        "load": {
            "batch_rows": BATCH,
            "hnsw": hnsw_load.json(n),
            "flat": flat_load.as_ref().map(|l| l.json(n)),
            "rate_ratio_hnsw_over_flat": flat_load.as_ref().map(|f| hnsw_load.rows_per_s(n) / f.rows_per_s(n)),
        },
        "reopen": {
            "opens_per_mode": OPENS,
            "close_after_search_ms": close_s * 1e3,
            "small_load": small_load.as_ref().map(|l| l.json(SMALL)),
            "collections": reopens.iter().map(|r| json!({
                "rows": r.rows,
                "modes": r.modes.iter().map(|(mode, o, c, replayed)| json!({
                    "mode": format!("{mode:?}"),
                    "open_ms_median": median(o),
                    "open_ms_p90": pct(o, 0.9),
                    "open_ms_all": o,
                    "close_ms_median": median(c),
                    "close_ms_all": c,
                    "rows_replayed": replayed,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        },
        "search": {
            "threads": 1,
            "oracle": oracle,
            "collection_stats": stats_json(&search_stats),
            "index_build_s": index_build_s,
            "collection": EFS.iter().zip(&coll_pts).map(|(&ef, p)| p.json(ef)).collect::<Vec<_>>(),
            "index": EFS.iter().zip(&idx_pts).map(|(&ef, p)| p.json(ef)).collect::<Vec<_>>(),
            "qps_at_recall": at_json,
        },
    });
    if let Some(p) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
    }
    std::fs::write(&a.out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!("JSON: {}", a.out.display());
    Ok(())
}
