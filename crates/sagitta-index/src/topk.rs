//! Results and the small ordered types the searches share.

use std::cmp::Ordering;

/// One search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    /// The user's key.
    pub key: u64,
    /// Distance to the query (smaller is nearer; see `sagitta_kernels::Distance`).
    pub distance: f32,
}

/// A (distance, slot) pair ordered by distance, then slot. Distances are
/// never NaN (inputs are validated), `total_cmp` keeps the order total
/// anyway.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cand {
    pub dist: f32,
    pub slot: u32,
}

impl Eq for Cand {}

impl Ord for Cand {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.dist
            .total_cmp(&other.dist)
            .then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Cand {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A (distance, key) pair ordered by distance, then key: what the exact
/// scan keeps, so that ties at the k-th distance resolve to the smaller
/// keys whatever slots the vectors landed in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct KeyedCand {
    pub dist: f32,
    pub key: u64,
}

impl Eq for KeyedCand {}

impl Ord for KeyedCand {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.dist
            .total_cmp(&other.dist)
            .then(self.key.cmp(&other.key))
    }
}

impl PartialOrd for KeyedCand {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
