//! `sagitta build`: an index built from a `.npy` matrix (key = row
//! number) and written as a segment file.

use anyhow::Result;
use sagitta_cli::npy;
use sagitta_cli::rows::{build, space_for, Rows};
use sagitta_index::{Index, IndexKind, VectorRef};
use sagitta_store::Segment;
use std::path::Path;
use std::time::Instant;

/// Builds the index of `kind` over the first `limit` rows of `input` and
/// writes it to `out`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    input: &Path,
    out: &Path,
    limit: Option<usize>,
    metric: &str,
    kind: &str,
    m: usize,
    efc: usize,
    ivf: sagitta_index::IvfParams,
) -> Result<()> {
    let mat = npy::read_f32(input)?;
    let n = limit.unwrap_or(mat.rows).min(mat.rows);
    let kind = sagitta_store::request::parse_kind(kind)?;
    let rows = Rows::new(&mat, n, metric == "hamming");
    let space = space_for(metric, mat.cols)?;
    let (idx, secs) = if kind == IndexKind::IvfRq {
        // Train with a progress report, then encode every row.
        let idx = Index::ivf_rq(space, ivf)?;
        let t = Instant::now();
        let sample: Vec<f32> = (0..n)
            .flat_map(|i| match rows.get(i) {
                VectorRef::F32(x) => x.to_vec(),
                VectorRef::Bytes(_) => Vec::new(),
            })
            .collect();
        idx.train(&sample, &mut |p| eprintln!("{p}"))?;
        let keys: Vec<u64> = (0..n as u64).collect();
        let vecs: Vec<VectorRef<'_>> = (0..n).map(|i| rows.get(i)).collect();
        idx.add_batch(&keys, &vecs, 0)?;
        (idx, t.elapsed().as_secs_f64())
    } else {
        build(space, kind, &rows, m, efc)?
    };
    let t = Instant::now();
    let info = Segment::write(&idx, out)?;
    println!(
        "built {n} vectors in {secs:.1} s, wrote {} ({} bytes) in {:.2} s",
        out.display(),
        info.file_len,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
