//! The index part of `sagitta demo`: an HNSW index over the bundled
//! sample, saved as a segment, reopened memory-mapped and searched (a few
//! passages with their neighbours, then recall and QPS beside an exact
//! scan). The server part is in `serve.rs`.

use anyhow::{Context, Result};
use sagitta_cli::data;
use sagitta_cli::rows::{build, recall_keys, timed, Rows};
use sagitta_index::{DType, IndexKind, IndexRead, Metric, SearchOptions, Space};
use sagitta_store::Segment;
use std::path::Path;
use std::time::Instant;

/// Runs the index part of the demo on the sample in `sample`, showing the
/// neighbours of `show` passages; returns the loaded sample.
pub fn run(sample: &Path, show: usize) -> Result<data::Dataset> {
    let t0 = Instant::now();
    let ds = data::load(sample, true).with_context(|| {
        format!(
            "loading the sample from {} (run from the repository root)",
            sample.display()
        )
    })?;
    println!(
        "sagitta demo: {} passages × {} dims (all-MiniLM-L6-v2, cosine), kernels: {}",
        ds.base.rows,
        ds.base.cols,
        sagitta_kernels::isa()
    );
    let space = Space::new(ds.base.cols, Metric::Cos, DType::F32)?;
    let base = Rows::new(&ds.base, ds.base.rows, false);
    let qs = Rows::new(&ds.queries, ds.queries.rows, false);
    let (hnsw, secs) = build(space, IndexKind::Hnsw, &base, 16, 128)?;
    println!("built HNSW (M=16, ef_construction=128) in {secs:.2} s");
    let dir = std::env::temp_dir().join(format!("sagitta-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("sample.sgt");
    let info = Segment::write(&hnsw, &path)?;
    let t = Instant::now();
    let seg = Segment::open(&path)?;
    println!(
        "saved {} ({:.1} MB) and reopened it memory-mapped in {:.0} µs",
        path.display(),
        info.file_len as f64 / 1e6,
        t.elapsed().as_secs_f64() * 1e6
    );

    for qi in 0..show.min(qs.len()) {
        println!("\n> {}", ds.query_texts.get(qi).map_or("?", |s| s.as_str()));
        for n in seg.search(qs.get(qi), 5, &SearchOptions::default())? {
            let text = ds
                .base_texts
                .get(n.key as usize)
                .map_or("?", |s| s.as_str());
            let text: String = text.chars().take(100).collect();
            println!("  {:.3}  #{:<5} {}", n.distance, n.key, text);
        }
    }
    let (flat, _) = build(space, IndexKind::Flat, &base, 16, 128)?;
    let (truth, flat_qps) = timed(&flat, &qs, 10, &SearchOptions::default())?;
    let truth: Vec<Vec<u64>> = truth
        .iter()
        .map(|r| r.iter().map(|n| n.key).collect())
        .collect();
    let (res, qps) = timed(
        &seg,
        &qs,
        10,
        &SearchOptions {
            ef: Some(64),
            ..Default::default()
        },
    )?;
    println!(
        "\nrecall@10 vs exact search over {} queries: {:.3} at ef=64; {:.0} queries/s single thread (exact scan: {:.0}/s)",
        qs.len(),
        recall_keys(&truth, &res, 10),
        qps,
        flat_qps
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!("index part done in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(ds)
}
