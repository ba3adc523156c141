//! Embedding throughput of all-MiniLM-L6-v2 on 1 and 2 threads, and the
//! agreement with the dataset's own vectors.
//!
//! ```text
//! scripts/fetch-model
//! cargo run --release -p sagitta-embed --example embed_throughput -- \
//!     ../shared/data/debian-minilm/base_texts.txt.gz --limit 5000 \
//!     [--threads 1,2] [--max-tokens 128] [--save rust.npy]
//! ```
//!
//! Reads one text per line from the gzip file, embeds them inside a rayon
//! pool of each thread count, prints texts/s (and texts per CPU-second,
//! which a busy machine distorts less), then the cosine (min / mean) of the
//! vectors against `base.f16.npy` in the same directory. The dataset was
//! embedded with truncation at 128 word pieces: `--max-tokens 128`
//! reproduces it; the default 256 is what sentence-transformers does
//! (`st_throughput.py --rust rust.npy` compares the two).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Instant;

use sagitta_embed::{Embedder, DEFAULT_MODEL};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut limit = usize::MAX;
    let mut threads = vec![1, 2];
    let mut max_tokens = None;
    let mut save = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--limit" => limit = args.next().ok_or("--limit needs a number")?.parse()?,
            "--threads" => {
                threads = args
                    .next()
                    .ok_or("--threads needs a list like 1,2")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--max-tokens" => {
                max_tokens = Some(args.next().ok_or("--max-tokens needs a number")?.parse()?)
            }
            "--save" => save = Some(PathBuf::from(args.next().ok_or("--save needs a path")?)),
            "-h" | "--help" => {
                println!(
                    "usage: embed_throughput BASE_TEXTS.txt.gz [--limit N] [--threads 1,2] \
                     [--max-tokens N] [--save VECTORS.npy]"
                );
                return Ok(());
            }
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg:?}").into()),
        }
    }
    let path = path.ok_or("give the path of base_texts.txt.gz")?;

    let start = Instant::now();
    let mut embedder = Embedder::open(DEFAULT_MODEL)?;
    if let Some(n) = max_tokens {
        embedder = embedder.with_max_tokens(n)?;
    }
    println!("opened {embedder:?} in {:.2?}", start.elapsed());
    let texts = common::read_gz_lines(&path, limit)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = refs
        .iter()
        .map(|t| embedder.tokenize(t).map(|ids| ids.len()))
        .sum::<Result<_, _>>()?;
    println!(
        "{} texts, {:.1} word pieces per text on average (truncated at {})",
        refs.len(),
        tokens as f64 / refs.len().max(1) as f64,
        embedder.max_tokens()
    );

    let mut vectors = Vec::new();
    for &n in &threads {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build()?;
        let start = Instant::now();
        let cpu_start = cpu_seconds();
        vectors = pool.install(|| embedder.embed(&refs))?;
        let secs = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds().zip(cpu_start).map(|(end, start)| end - start);
        let per_cpu = cpu
            .map(|c| {
                format!(
                    ", {:.1} texts per CPU-second ({c:.1} CPU-s)",
                    refs.len() as f64 / c
                )
            })
            .unwrap_or_default();
        println!(
            "threads {n}: {} texts in {secs:.2} s = {:.1} texts/s{per_cpu}",
            refs.len(),
            refs.len() as f64 / secs
        );
    }

    if let Some(out) = &save {
        write_f32_npy(out, &vectors, embedder.dims())?;
        println!("saved the vectors to {}", out.display());
    }

    let npy = path.with_file_name("base.f16.npy");
    match common::read_f16_npy(&npy, refs.len()) {
        Ok((rows, dims, expected)) => {
            let rows = rows.min(vectors.len() / embedder.dims());
            let (min, mean) =
                common::cosine_stats(&vectors[..rows * dims], &expected[..rows * dims], dims);
            println!(
                "cosine vs {} over {rows} rows: min {min:.6}, mean {mean:.6}",
                npy.display()
            );
        }
        Err(e) => println!("no comparison with {}: {e}", npy.display()),
    }
    Ok(())
}

/// User + system CPU seconds of this process so far (Linux `/proc`); on a
/// shared machine, texts per CPU-second shows the speed without the
/// time lost waiting for a core.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line, in clock ticks (100 a second
    // on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Writes `rows × dims` f32 values as a little-endian `.npy` file.
fn write_f32_npy(path: &std::path::Path, values: &[f32], dims: usize) -> std::io::Result<()> {
    let rows = values.len() / dims.max(1);
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dims}), }}");
    // Magic (6) + version (2) + length (2) + header + newline: a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes)
}
