//! # sagitta-lowdim
//!
//! Certified exact k-nearest-neighbour search for low-dimensional data
//! (1 to [`MAX_DIM`] dimensions, squared Euclidean distance), and the kNN
//! label vote built on it: the index of the fraud-scoring service
//! (`sagitta-fraud`) and of `sagitta.LowDimIndex`.
//!
//! This crate owns the index's build, its file format (versions 1 and 2,
//! docs/FORMAT.md, "Low-dimensional index"), its search and its `vpmaddwd`
//! leaf and box kernels. It imports only `sagitta-kernels` among Sagitta's
//! crates, and from it only the instruction-set choice ([`sagitta_kernels::isa`],
//! so `SAGITTA_ISA` caps these kernels too: one CPU detection for the
//! engine) and the prefetch hint. It must not import `sagitta-index`,
//! `sagitta-store` or anything above them; it knows nothing of files
//! beyond their bytes (callers read or memory-map them).
//!
//! The index is a kd-tree over the rows with a tight bounding box per
//! node, searched branch and bound: a subtree is skipped only when the
//! lower bound of its box is larger than the current k-th distance, so
//! the answer is *proved* to be the exact top-k, never an approximation.
//! Ties are broken by the lower row index, deterministically.
//!
//! * **Exact arithmetic on a decimal grid.** When every component of every
//!   row is a multiple of 10^-p (p ≤ 4) that fits an `i16` (as in data
//!   rounded to a few decimals), rows are stored as `i16` codes and every
//!   distance is computed on integers, exactly (`u32` sums of squared
//!   `i16` differences when they cannot overflow, else `f64` on the
//!   integers), so ties are real ties. A query on the same grid is exact
//!   too; one off the grid is compared in `f64`.
//! * **Anything else** keeps the `f32` rows, compared in `f64`.
//!
//! In both cases the box bounds use the same arithmetic, in the same order,
//! as the distances, so pruning can never drop a true neighbour.
//!
//! The index lives in one byte buffer ([`LowDimIndex::as_bytes`]) that is
//! searched in place: write it to a file, memory-map it and
//! [`LowDimView::parse`] it, with no copy. The format is versioned and
//! checksummed; damaged bytes give [`LowDimError::Corrupt`] with the
//! offset found wrong.
//!
//! An optional label per row ([`LowDimHit::label`]) turns a search into a
//! kNN vote ([`LowDimView::classify`]).

mod build;
mod error;
mod format;
mod scan;
mod search;

pub use build::LowDimIndex;
pub use error::{LowDimError, Result};
pub use format::{LowDimView, FORMAT_VERSION, MAGIC};

/// Most dimensions a low-dimensional index takes.
pub const MAX_DIM: usize = 32;
/// Rows per kd-tree leaf in an index built by [`LowDimIndex::build`]
/// (also the block width of the column layout). An index file records its
/// own leaf size: any multiple of 16 from 16 to [`MAX_LEAF`] is read.
pub const LEAF: usize = 64;
/// Largest leaf size an index may have.
pub const MAX_LEAF: usize = 256;

/// Whether `leaf` rows per leaf is a size the index takes.
pub(crate) fn leaf_ok(leaf: usize) -> bool {
    (16..=MAX_LEAF).contains(&leaf) && leaf.is_multiple_of(16)
}

/// Coordinates per box corner: the dimensions padded to 16 or 32, so a
/// corner is one or two SIMD registers of `i16` (padding is 0 in boxes and
/// queries alike, adding nothing to a bound).
pub(crate) fn box_dim(dim: usize) -> usize {
    if dim <= 16 {
        16
    } else {
        32
    }
}

/// One neighbour found by a low-dimensional search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowDimHit {
    /// The row's index in the rows the index was built from.
    pub id: u32,
    /// Squared Euclidean distance to the query.
    pub dist: f64,
    /// The row's label (0 when the index has none).
    pub label: u16,
}

/// What one search did: nodes opened, leaves and rows scanned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SearchStats {
    /// Tree nodes whose box was checked.
    pub nodes: u64,
    /// Leaves scanned.
    pub leaves: u64,
    /// Rows whose distance was computed.
    pub rows: u64,
}

/// One label's share of the k nearest rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelShare {
    /// The label.
    pub label: u16,
    /// How many of the k nearest carry it.
    pub count: u32,
    /// `count / k`.
    pub share: f64,
}

/// Reusable per-thread search state: keep one per thread.
#[derive(Debug, Default)]
pub struct LowDimScratch {
    pub(crate) best: Vec<search::Best>,
    pub(crate) hits: Vec<LowDimHit>,
    /// Subtrees to open: (bound as the walk's order-preserving key, node).
    pub(crate) heap: std::collections::BinaryHeap<(std::cmp::Reverse<u64>, u32)>,
    /// A level of subtrees still to open, and the next: (bound, node).
    pub(crate) front: Vec<(u64, u32)>,
    pub(crate) next: Vec<(u64, u32)>,
    /// Leaves found and not yet scanned: (bound, node).
    pub(crate) leaves: Vec<(u64, u32)>,
    pub(crate) shares: Vec<LabelShare>,
    /// What the last search did.
    pub stats: SearchStats,
}

/// Counts labels, most frequent first (ties: the smaller label first), as
/// a kNN vote over any label type.
pub fn tally<L: Ord>(labels: impl IntoIterator<Item = L>) -> Vec<(L, u32)> {
    let mut counts: std::collections::BTreeMap<L, u32> = std::collections::BTreeMap::new();
    for l in labels {
        *counts.entry(l).or_insert(0) += 1;
    }
    let mut out: Vec<(L, u32)> = counts.into_iter().collect();
    // Stable: equal counts keep the BTreeMap's ascending label order.
    out.sort_by_key(|e| std::cmp::Reverse(e.1));
    out
}
