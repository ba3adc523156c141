//! The rows of a dataset as an index takes them, and the small steps the
//! tools repeat on them: the space for a metric name, an index built from
//! the rows, every query timed on one thread, recall by key.

use crate::npy::Matrix;
use anyhow::Result;
use sagitta_index::{
    DType, HnswParams, Index, IndexKind, IndexRead, Metric, Neighbor, SearchOptions, Space,
    VectorRef,
};
use sagitta_kernels::sign_bits;
use std::time::Instant;

/// The space of `metric` (`cos`, `l2`, `ip`: f32; `hamming`: sign bits).
pub fn space_for(metric: &str, dims: usize) -> Result<Space> {
    Ok(match metric {
        "hamming" => Space::new(dims, Metric::Hamming, DType::B1)?,
        m => Space::new(dims, sagitta_store::request::parse_metric(m)?, DType::F32)?,
    })
}

/// Rows as the index's input type (floats, or sign bits for Hamming).
#[derive(Debug)]
pub enum Rows {
    /// Float rows.
    F(Vec<Vec<f32>>),
    /// Sign bits (Hamming).
    B(Vec<Vec<u8>>),
}

impl Rows {
    /// The first `n` rows of `m`, as floats or (`bits`) as sign bits.
    pub fn new(m: &Matrix<f32>, n: usize, bits: bool) -> Rows {
        if bits {
            Rows::B((0..n).map(|i| sign_bits(m.row(i))).collect())
        } else {
            Rows::F((0..n).map(|i| m.row(i).to_vec()).collect())
        }
    }
    /// Row `i`.
    pub fn get(&self, i: usize) -> VectorRef<'_> {
        match self {
            Rows::F(v) => VectorRef::F32(&v[i]),
            Rows::B(v) => VectorRef::Bytes(&v[i]),
        }
    }
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            Rows::F(v) => v.len(),
            Rows::B(v) => v.len(),
        }
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An index of `kind` over `rows` (key = row number); returns it and the
/// build time in seconds.
pub fn build(
    space: Space,
    kind: IndexKind,
    rows: &Rows,
    m: usize,
    efc: usize,
) -> Result<(Index, f64)> {
    let idx = Index::new(
        space,
        kind,
        HnswParams {
            m,
            ef_construction: efc,
            ..Default::default()
        },
    )?;
    let keys: Vec<u64> = (0..rows.len() as u64).collect();
    let vecs: Vec<VectorRef<'_>> = (0..rows.len()).map(|i| rows.get(i)).collect();
    let t = Instant::now();
    idx.add_batch(&keys, &vecs, 0)?;
    Ok((idx, t.elapsed().as_secs_f64()))
}

/// Runs every query single-threaded; returns results and queries/second.
pub fn timed(
    idx: &dyn IndexRead,
    qs: &Rows,
    k: usize,
    opts: &SearchOptions<'_>,
) -> Result<(Vec<Vec<Neighbor>>, f64)> {
    // Warm-up pass (scratch buffers, page cache), then the timed pass.
    for i in 0..qs.len().min(50) {
        idx.search(qs.get(i), k, opts)?;
    }
    let t = Instant::now();
    let mut out = Vec::with_capacity(qs.len());
    for i in 0..qs.len() {
        out.push(idx.search(qs.get(i), k, opts)?);
    }
    Ok((out, qs.len() as f64 / t.elapsed().as_secs_f64()))
}

/// Recall by key identity.
pub fn recall_keys(truth: &[Vec<u64>], got: &[Vec<Neighbor>], k: usize) -> f64 {
    let hits: usize = truth
        .iter()
        .zip(got)
        .map(|(t, g)| {
            g.iter()
                .take(k)
                .filter(|n| t[..k.min(t.len())].contains(&n.key))
                .count()
        })
        .sum();
    hits as f64 / (truth.len() * k) as f64
}
