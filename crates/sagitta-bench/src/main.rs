//! `sagitta-bench`: Sagitta's benchmark commands, kept out of the shipped
//! `sagitta` binary. The Python harness (`bench/sagitta_bench`,
//! `python/bench`) runs it from `target/release/sagitta-bench`.
//!
//! * `eval`: ef → recall / QPS tables on a dataset directory (cosine,
//!   Hamming over sign bits, filtered).
//! * `bench-serve`: search latency of a running server from lean Rust
//!   clients (HTTP and Flight) next to in-process.
//! * `open-bench`, `bench-search`, `collection-bench`, `lifecycle-bench`,
//!   `bench-kernels`.
//! * `crash-writer` (hidden): the writer process `tests/crash.rs` kills.
//!
//! These print numbers; they never decide pass/fail.

mod collbench;
mod crash;
mod eval;
mod lifecyclebench;
mod servebench;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// mimalloc, as in the `sagitta` binary, so that what is measured here
/// allocates as the server does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Returns what mimalloc holds free to the system now (the `sagitta`
/// binary's memory-release hook, for the same reason: mimalloc purges a
/// freed range only when one of its threads next allocates or frees).
fn release_free_memory() {
    // SAFETY: mi_collect walks only mimalloc's own heaps and arenas (it
    // takes their locks) and may run beside allocations on other threads.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[derive(Parser)]
#[command(
    name = "sagitta-bench",
    version,
    about = "Sagitta benchmark commands (not shipped in `sagitta`)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Search latency of a running server from lean Rust clients (HTTP and
    /// Flight) next to in-process; driven by `python -m sagitta_bench server`.
    BenchServe(servebench::BenchServeArgs),
    /// Print ef → recall@k / QPS tables for a dataset directory.
    Eval(eval::EvalArgs),
    /// Time Segment::open for each file (median of many opens).
    OpenBench {
        /// Segment files.
        files: Vec<PathBuf>,
        #[arg(long, default_value_t = 500)]
        repeat: usize,
    },
    /// Time searches of a .npy query matrix against a segment file
    /// (one query at a time on one thread, then one batch on all cores);
    /// prints one JSON line. The reference for the Python binding overhead.
    BenchSearch {
        /// Segment file.
        #[arg(long)]
        index: PathBuf,
        /// Query matrix (.npy, f16 or f32).
        #[arg(long)]
        queries: PathBuf,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Beam width (default: the one stored in the file).
        #[arg(long)]
        ef: Option<usize>,
        /// Timed passes; the fastest is reported.
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// Collection ingest rate per 100k window, open time and absent-key
    /// lookups, on random binary codes.
    CollectionBench {
        /// Directory for the collection (replaced).
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 64)]
        segments: usize,
        #[arg(long, default_value_t = 2000)]
        per_segment: usize,
        #[arg(long, default_value_t = 256)]
        bits: usize,
        /// Timed opens per mode.
        #[arg(long, default_value_t = 50)]
        opens: usize,
        /// Measure an existing collection in --dir instead of building one.
        #[arg(long)]
        reuse: bool,
    },
    /// Collection lifecycle on a dataset: upsert load (batch latency,
    /// rows/s, beside Flat), optimize(), reopen times, and 1-thread search
    /// after settle beside a bare HNSW index.
    LifecycleBench(lifecyclebench::LifecycleArgs),
    /// The writer process of the crash-safety test (see src/crash.rs).
    #[command(hide = true)]
    CrashWriter {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        round: u64,
        #[arg(long, default_value_t = 100_000)]
        ops: usize,
        #[arg(long, default_value_t = 3000)]
        keys: u64,
    },
    /// Kernel throughput (GB/s) next to a memory-read bandwidth estimate.
    BenchKernels {
        #[arg(long, default_value_t = 384)]
        dims: usize,
    },
}

fn main() -> Result<()> {
    sagitta_store::set_release_hook(release_free_memory);
    match Cli::parse().cmd {
        Cmd::BenchServe(a) => servebench::run(&a),
        Cmd::Eval(a) => eval::run(&a),
        Cmd::OpenBench { files, repeat } => eval::open_bench(&files, repeat),
        Cmd::BenchSearch {
            index,
            queries,
            k,
            ef,
            repeat,
        } => eval::bench_search(&index, &queries, k, ef, repeat),
        Cmd::CollectionBench {
            dir,
            segments,
            per_segment,
            bits,
            opens,
            reuse,
        } => collbench::run(&dir, segments, per_segment, bits, opens, reuse),
        Cmd::LifecycleBench(a) => lifecyclebench::run(&a),
        Cmd::CrashWriter {
            dir,
            round,
            ops,
            keys,
        } => crash::run(&dir, round, ops, keys),
        Cmd::BenchKernels { dims } => eval::bench_kernels(dims),
    }
}
