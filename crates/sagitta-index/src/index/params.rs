//! What an [`super::Index`] is built and searched with: its kind, its
//! HNSW parameters and the per-search options. The search planner
//! (`crate::plan`) reads these; they import nothing of the index itself.

use crate::{Bitset, IndexError, Result};

/// Which structure answers searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// Exact scan over every vector: the recall oracle.
    Flat,
    /// Hierarchical navigable small-world graph.
    Hnsw,
    /// Inverted file of k-means partitions with RaBitQ codes (see
    /// [`crate::ivf`]); the full-precision vectors are kept for reranking.
    IvfRq,
}

impl IndexKind {
    /// `flat`, `hnsw` or `ivf_rq`.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Flat => "flat",
            IndexKind::Hnsw => "hnsw",
            IndexKind::IvfRq => "ivf_rq",
        }
    }

    /// Parses a name given by [`IndexKind::name`].
    pub fn parse(s: &str) -> Option<IndexKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "flat" => IndexKind::Flat,
            "hnsw" => IndexKind::Hnsw,
            "ivf_rq" | "ivf-rq" | "ivf_rabitq" => IndexKind::IvfRq,
            _ => return None,
        })
    }
}

/// HNSW construction and search parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HnswParams {
    /// Links per node on upper levels (level 0 has `2 * m`).
    pub m: usize,
    /// Beam width while inserting.
    pub ef_construction: usize,
    /// Default beam width while searching (at least k is used).
    pub ef_search: usize,
    /// Seed of the level assignment (levels are a hash of seed and slot,
    /// so builds are reproducible).
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 128,
            ef_search: 64,
            seed: 0x5A61_7474_6100,
        }
    }
}

impl HnswParams {
    /// Checks every parameter's range (`InvalidParameter` naming the
    /// first one out of it).
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: String, reason| {
            Err(IndexError::InvalidParameter {
                name,
                value,
                reason,
            })
        };
        if !(2..=256).contains(&self.m) {
            return bad("m", self.m.to_string(), "must be in 2..=256");
        }
        if self.ef_construction == 0 || self.ef_construction > 1 << 16 {
            return bad(
                "ef_construction",
                self.ef_construction.to_string(),
                "must be in 1..=65536",
            );
        }
        if self.ef_search == 0 || self.ef_search > 1 << 16 {
            return bad(
                "ef_search",
                self.ef_search.to_string(),
                "must be in 1..=65536",
            );
        }
        Ok(())
    }

    /// Links per node on level 0.
    pub fn m0(&self) -> usize {
        self.m * 2
    }
}

/// Per-search options.
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchOptions<'a> {
    /// Beam width override (HNSW); `None` uses the index default.
    pub ef: Option<usize>,
    /// Slots that may be returned; `None` allows all.
    pub filter: Option<&'a Bitset>,
    /// Force an exact scan even on an HNSW index.
    pub exact: bool,
    /// Partitions probed (IVF); `None` uses the index default.
    pub nprobe: Option<usize>,
    /// Rerank depth: candidates re-scored from full-precision vectors, 0
    /// for none. `None` uses the default: for IVF the index's, for graphs
    /// over codes with full-precision rows the best `max(2k, 16)` of the
    /// beam (see [`crate::plan::plan`]).
    pub refine: Option<usize>,
    /// The filter is a snapshot of the live slots of a mutable index,
    /// taken by a reader before the search (with a filter only; IVF
    /// partitions ignore it): every slot it allows may be returned, one
    /// deleted or replaced since included, so that a write landing while
    /// the search runs takes nothing out of the reader's snapshot (the
    /// index tombstones in place).
    pub snapshot: bool,
}
