//! [`Query`]: one search request as every front end builds it (dense
//! vectors and/or a text, `k`, the search knobs, filters, fusion, depth),
//! its checks ([`Query::check`], the one place that decides what a valid
//! request is), and its answer ([`Answer`]). The server (HTTP, Flight,
//! Longbow's actions), the Python package and the cluster client only
//! translate their wire formats into a `Query` and run it with
//! [`crate::Collection::query`], which reads one snapshot of the
//! collection for every leg.

use crate::error::{Result, StoreError};
use crate::filter::Bound;
use crate::limits::{check_depth, check_k, check_knobs};
use sagitta_index::{Neighbor, VectorRef};
use sagitta_text::{Fusion, MAX_TEXT_BYTES};

/// Default fusion of a hybrid search: min-max normalised scores weighted
/// 0.3 dense, 0.7 text. Chosen on debian-pkg-retrieval's dev split (see
/// bench/results/journal-2026-11.md, "Full-text and hybrid search"),
/// where it gave the best nDCG@10 of the fusions tried (RRF, DBSF,
/// z-scores, alpha sweeps).
pub const DEFAULT_FUSION: Fusion = Fusion::Alpha { alpha: 0.3 };

/// Default candidates per leg: `max(k, DEFAULT_DEPTH)` (depth barely
/// moved the default fusion's quality there; fewer is faster).
pub const DEFAULT_DEPTH: usize = 20;

/// One search request.
///
/// - Dense: one or more `vectors`, no `text`; the answer is
///   [`Answer::Dense`], the `k` nearest per vector.
/// - Text or hybrid: a `text` and at most one vector; the BM25 leg alone,
///   or fused with the dense leg of the vector (or of the text embedded
///   by the collection's model); the answer is [`Answer::Fused`].
///
/// `k` (the one rule, [`sagitta_index::limits::check_k`]): 1 to 10000; a
/// `k` past the rows there are returns every row.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    /// Dense query vectors (none: a text-only query).
    pub vectors: Vec<VectorRef<'a>>,
    /// Text of a text or hybrid query.
    pub text: Option<&'a str>,
    /// Results wanted per query.
    pub k: usize,
    /// Text queries: how the legs are combined (None: [`DEFAULT_FUSION`];
    /// `Alpha` at 1.0 runs the dense leg only, at 0.0 the text leg only).
    pub fusion: Option<Fusion>,
    /// Text queries: candidates per leg (None: `max(k, DEFAULT_DEPTH)`).
    pub depth: Option<usize>,
    /// The knobs (ef, nprobe, refine, exact) and filters (keys, payload
    /// predicate: both legs), and a dense query's radius.
    pub opts: CollectionSearch<'a>,
}

/// Per-search options of a collection.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectionSearch<'a> {
    /// Beam width override (HNSW).
    pub ef: Option<usize>,
    /// Exact scan of every segment.
    pub exact: bool,
    /// Only these keys may be returned.
    pub filter: Option<&'a [u64]>,
    /// Only matches at most this far away.
    pub radius: Option<f32>,
    /// Only vectors whose payload passes this (bound) filter.
    pub predicate: Option<&'a Bound>,
    /// Partitions probed per IVF segment.
    pub nprobe: Option<usize>,
    /// Rerank depth per IVF segment.
    pub refine: Option<usize>,
}

/// The answer to a [`Query`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The nearest neighbours of each query vector, nearest first.
    Dense(Vec<Vec<Neighbor>>),
    /// The fused rows of a text or hybrid query, best first, with each
    /// leg's rank and score.
    Fused(Vec<sagitta_text::Fused>),
}

fn invalid(msg: impl Into<String>) -> StoreError {
    StoreError::InvalidQuery(msg.into())
}

impl<'a> Query<'a> {
    /// A dense query of `vectors` for the `k` nearest of each.
    pub fn dense(vectors: Vec<VectorRef<'a>>, k: usize) -> Self {
        Query {
            vectors,
            k,
            ..Query::default()
        }
    }

    /// A text (or, with a vector, hybrid) query.
    pub fn text(text: &'a str, vector: Option<VectorRef<'a>>, k: usize) -> Self {
        Query {
            vectors: vector.into_iter().collect(),
            text: Some(text),
            k,
            ..Query::default()
        }
    }

    /// Checks everything that can be checked without the collection's
    /// rows: `k`, the knobs, the shape of a text query, its fusion and
    /// depth. Vectors are checked against the space as they are searched.
    pub fn check(&self) -> Result<()> {
        let o = &self.opts;
        check_k(self.k, usize::MAX)?;
        check_knobs(o.ef, o.nprobe, o.refine)?;
        check_depth(self.depth)?;
        if o.radius.is_some_and(f32::is_nan) {
            return Err(invalid("radius: must be a number, got nan"));
        }
        let Some(text) = self.text else {
            if self.fusion.is_some() || self.depth.is_some() {
                return Err(invalid(
                    "fusion, alpha, rrf_k and depth apply to text searches (give a text)",
                ));
            }
            return Ok(());
        };
        if self.vectors.len() > 1 {
            return Err(invalid(format!(
                "a text search takes one query: the text and at most one vector, got {} vectors",
                self.vectors.len()
            )));
        }
        if o.radius.is_some() {
            return Err(invalid(
                "radius applies to dense searches, not text searches",
            ));
        }
        if text.len() > MAX_TEXT_BYTES {
            return Err(StoreError::InvalidText(format!(
                "{} bytes of text: at most {MAX_TEXT_BYTES}",
                text.len()
            )));
        }
        match self.fusion {
            Some(Fusion::Alpha { alpha }) if !(0.0..=1.0).contains(&alpha) => {
                Err(StoreError::InvalidText(format!(
                    "alpha = {alpha}: must be in [0, 1] (1: dense only, 0: text only)"
                )))
            }
            Some(Fusion::Rrf { k }) if !(k.is_finite() && k >= 0.0) => Err(
                StoreError::InvalidText(format!("rrf_k = {k}: must be a finite number >= 0")),
            ),
            _ => Ok(()),
        }
    }

    /// The fusion a text query uses.
    pub fn fusion_or_default(&self) -> Fusion {
        self.fusion.unwrap_or(DEFAULT_FUSION)
    }

    /// Candidates per leg of a text query.
    pub fn depth_or_default(&self) -> usize {
        self.depth.unwrap_or(DEFAULT_DEPTH).max(self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_set_of_rules() {
        let v = [0.0f32; 4];
        let q = |f: fn(&mut Query<'_>)| {
            let mut q = Query::dense(vec![VectorRef::F32(&v)], 10);
            f(&mut q);
            q.check()
        };
        assert!(q(|_| {}).is_ok());
        assert!(q(|q| q.k = 0).is_err());
        assert!(q(|q| q.k = 10_001).is_err());
        assert!(q(|q| q.opts.ef = Some(0)).is_err());
        assert!(q(|q| q.depth = Some(5)).is_err());
        assert!(q(|q| q.opts.radius = Some(f32::NAN)).is_err());
        assert!(q(|q| q.text = Some("x")).is_ok());
        assert!(q(|q| {
            q.text = Some("x");
            q.fusion = Some(Fusion::Alpha { alpha: 1.5 });
        })
        .is_err());
        assert!(q(|q| {
            q.text = Some("x");
            q.fusion = Some(Fusion::Rrf { k: f32::NAN });
        })
        .is_err());
        let two = Query {
            text: Some("x"),
            ..Query::dense(vec![VectorRef::F32(&v), VectorRef::F32(&v)], 3)
        };
        assert!(matches!(two.check(), Err(StoreError::InvalidQuery(_))));
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        assert!(Query::text(&long, None, 3).check().is_err());
        assert_eq!(Query::text("x", None, 3).depth_or_default(), DEFAULT_DEPTH);
        assert_eq!(Query::text("x", None, 50).depth_or_default(), 50);
    }
}
