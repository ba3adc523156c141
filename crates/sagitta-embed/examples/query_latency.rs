//! Latency of embedding one query at a time on one thread, per weight
//! type, and how far each type's vectors are from the `f32` model's.
//!
//! ```text
//! scripts/fetch-model
//! cargo run --release -p sagitta-embed --example query_latency -- \
//!     ../shared/data/debian-pkg-retrieval/dev_queries.jsonl \
//!     ../shared/data/debian-minilm/base_texts.txt.gz [--queries 2000] \
//!     [--texts 1000] [--rounds 3] [--types f32,f16,i8]
//! ```
//!
//! For each round and weight type (types interleaved): open the model
//! (timed), embed the first query (the first query after open), then every
//! query one call each inside a one-thread rayon pool; prints open time,
//! first-query latency and p50 / p99 / mean of the rest, with word pieces
//! per query. Then the cosine (min / mean) of each type's vectors against
//! the `f32` model's over the queries and the first `--texts` corpus texts
//! (truncated at 128 word pieces, as the store embeds).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Instant;

use sagitta_embed::{model_dir, Embedder, Precision, DEFAULT_MODEL};

fn parse_type(s: &str) -> Result<Precision, String> {
    match s {
        "f32" => Ok(Precision::F32),
        "f16" => Ok(Precision::F16),
        "i8" => Ok(Precision::I8),
        "q8" => Ok(Precision::Q8),
        _ => Err(format!("unknown weight type {s:?} (f32, f16, i8, q8)")),
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut paths = Vec::new();
    let mut queries = 2000;
    let mut texts = 1000;
    let mut rounds = 3;
    let mut types = vec![Precision::F32, Precision::F16, Precision::I8];
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--queries" => queries = value()?.parse()?,
            "--texts" => texts = value()?.parse()?,
            "--rounds" => rounds = value()?.parse()?,
            "--types" => {
                types = value()?
                    .split(',')
                    .map(parse_type)
                    .collect::<Result<_, _>>()?
            }
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    let [queries_path, texts_path] = paths.as_slice() else {
        return Err("give dev_queries.jsonl and base_texts.txt.gz".into());
    };
    let lines = std::fs::read_to_string(queries_path)?;
    let qs: Vec<String> = lines
        .lines()
        .take(queries)
        .map(|l| {
            let key = "\"query_text\": \"";
            let start = l.find(key).map(|i| i + key.len()).unwrap_or(0);
            let end = l[start..].find('"').map(|e| start + e).unwrap_or(l.len());
            l[start..end].to_string()
        })
        .collect();
    let corpus = common::read_gz_lines(texts_path, texts)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let dir = model_dir(DEFAULT_MODEL);

    let mut vectors: Vec<(Precision, Vec<f32>)> = Vec::new();
    for round in 0..rounds {
        for &ty in &types {
            let start = Instant::now();
            let e = Embedder::open_dir_with(DEFAULT_MODEL, &dir, ty)?.with_max_tokens(128)?;
            let open = start.elapsed().as_secs_f64() * 1e3;
            let mut lens: Vec<f64> = qs
                .iter()
                .map(|q| e.tokenize(q).map(|t| t.len() as f64))
                .collect::<Result<_, _>>()?;
            let pieces = lens.iter().sum::<f64>();
            lens.sort_by(f64::total_cmp);
            let (first, mut ms) = pool.install(|| {
                let t = Instant::now();
                let _ = e.embed_one(&qs[0]);
                let first = t.elapsed().as_secs_f64() * 1e3;
                let ms: Vec<f64> = qs[1..]
                    .iter()
                    .map(|q| {
                        let t = Instant::now();
                        let _ = e.embed_one(q);
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                (first, ms)
            });
            ms.sort_by(f64::total_cmp);
            println!(
                "round {round} {:>3}: open {open:7.1} ms, first query {first:6.2} ms, then p50 {:.2} p99 {:.2} mean {:.2} ms over {} queries ({:.1} word pieces each, p50 {} p99 {})",
                ty.name(),
                percentile(&ms, 0.5),
                percentile(&ms, 0.99),
                ms.iter().sum::<f64>() / ms.len().max(1) as f64,
                ms.len(),
                pieces / qs.len() as f64,
                percentile(&lens, 0.5),
                percentile(&lens, 0.99),
            );
            if round == 0 {
                let mut all: Vec<&str> = qs.iter().map(String::as_str).collect();
                all.extend(corpus.iter().map(String::as_str));
                vectors.push((ty, e.embed(&all)?));
            }
        }
    }
    if let Some((_, reference)) = vectors.iter().find(|(t, _)| *t == Precision::F32) {
        for (ty, v) in &vectors {
            let n = qs.len() * 384;
            let (qmin, qmean) = common::cosine_stats(&v[..n], &reference[..n], 384);
            let (tmin, tmean) = common::cosine_stats(&v[n..], &reference[n..], 384);
            println!(
                "{:>3} vs f32: queries cosine min {qmin:.6} mean {qmean:.6}; corpus texts min {tmin:.6} mean {tmean:.6}",
                ty.name()
            );
        }
    }
    Ok(())
}
