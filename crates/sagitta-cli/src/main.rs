//! `sagitta`: the command-line tool.
//!
//! * `demo`: build an HNSW index over the bundled sample, save it as a
//!   segment, reopen it memory-mapped, and answer a few passages; then
//!   load the sample into a collection, serve it over HTTP and Flight, and
//!   query it through both.
//! * `serve`: the server (HTTP/JSON and Arrow Flight).
//! * `openapi`: print the HTTP API's OpenAPI document.
//! * `search`: text, hybrid or vector search of a collection directory.
//! * `eval`: ef → recall / QPS tables on a dataset directory (cosine,
//!   Hamming over sign bits, filtered).
//! * `build`, `inspect`, `open-bench`, `bench-search`, `bench-kernels`.

mod collbench;
mod crash;
mod data;
mod eval;
mod lifecyclebench;
mod query;
mod serve;
mod servebench;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// mimalloc: DoPut of 20k text rows into `serve` measured 1.17x faster
/// than with glibc's malloc, which mapped fresh pages for every batch.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Returns what mimalloc holds free to the system now. It purges a freed
/// range a second after the free, but only when one of its threads next
/// allocates or frees: a server quiet after an index build kept the
/// build's memory (1,015 MiB resident after a 400k-row build).
fn release_free_memory() {
    // SAFETY: mi_collect walks only mimalloc's own heaps and arenas (it
    // takes their locks) and may run beside allocations on other threads.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[derive(Parser)]
#[command(name = "sagitta", version, about = "Sagitta vector search engine")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build an HNSW index over the bundled sample and query it.
    Demo {
        /// Directory with base.f16.npy, queries.f16.npy and the texts.
        #[arg(long, default_value = "data/sample")]
        sample: PathBuf,
        /// How many passages to show neighbours for.
        #[arg(long, default_value_t = 3)]
        show: usize,
        /// Keep serving the sample after the sample queries (until Ctrl-C).
        #[arg(long)]
        serve: bool,
        /// Data directory for the served sample (default: a temporary one,
        /// deleted at exit).
        #[arg(long)]
        data: Option<PathBuf>,
        /// HTTP address of the served sample (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        http: std::net::SocketAddr,
        /// Flight address of the served sample (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        flight: std::net::SocketAddr,
    },
    /// Serve the collections of a data directory over HTTP/JSON and Arrow
    /// Flight.
    Serve(serve::ServeArgs),
    /// Print the HTTP API's OpenAPI document (docs/openapi.json).
    Openapi,
    /// Text, hybrid or vector search of a collection directory.
    Search(query::SearchArgs),
    /// Search latency of a running server from lean Rust clients (HTTP and
    /// Flight) next to in-process; driven by `python -m sagitta_bench server`.
    BenchServe(servebench::BenchServeArgs),
    /// Print ef → recall@k / QPS tables for a dataset directory.
    Eval(eval::EvalArgs),
    /// Build an index from a .npy matrix and write it as a segment file.
    Build {
        /// Input matrix (.npy, f16 or f32); key = row number.
        #[arg(long)]
        input: PathBuf,
        /// Output segment file.
        #[arg(long)]
        out: PathBuf,
        /// Use only the first N rows.
        #[arg(long)]
        limit: Option<usize>,
        /// cos, l2, ip, or hamming (sign bits of the floats).
        #[arg(long, default_value = "cos")]
        metric: String,
        /// hnsw, flat or ivf_rq.
        #[arg(long, default_value = "hnsw")]
        kind: String,
        #[arg(long, default_value_t = 16)]
        m: usize,
        #[arg(long, default_value_t = 128)]
        ef_construction: usize,
        /// ivf_rq: RaBitQ bits per dimension (1..=8).
        #[arg(long, default_value_t = 1)]
        bits: u8,
        /// ivf_rq: partitions (default: one per 4096 vectors).
        #[arg(long)]
        partitions: Option<usize>,
    },
    /// Print a segment's header and verify its checksums.
    Inspect {
        /// Segment file.
        file: PathBuf,
    },
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
        Cmd::Demo {
            sample,
            show,
            serve,
            data,
            http,
            flight,
        } => {
            let ds = eval::demo(&sample, show)?;
            serve::demo_server(&ds, data, http, flight, serve)
        }
        Cmd::Serve(a) => serve::serve(&a),
        Cmd::BenchServe(a) => servebench::run(&a),
        Cmd::Openapi => {
            print!("{}", sagitta_server::http::openapi_json());
            Ok(())
        }
        Cmd::Search(a) => query::run(&a),
        Cmd::Eval(a) => eval::run(&a),
        Cmd::Build {
            input,
            out,
            limit,
            metric,
            kind,
            m,
            ef_construction,
            bits,
            partitions,
        } => eval::build_cmd(
            &input,
            &out,
            limit,
            &metric,
            &kind,
            m,
            ef_construction,
            sagitta_index::IvfParams {
                bits,
                partitions,
                ..Default::default()
            },
        ),
        Cmd::Inspect { file } => {
            let seg = sagitta_store::Segment::open(&file)
                .with_context(|| format!("opening {}", file.display()))?;
            println!("{:#?}", seg.info());
            match seg.verify() {
                Ok(()) => println!("verify: ok (all section checksums match)"),
                Err(e) => println!("verify: FAILED: {e}"),
            }
            Ok(())
        }
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
