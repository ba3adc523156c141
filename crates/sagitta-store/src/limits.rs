//! The limits of a search request. `k`, `ef`, `nprobe` and `refine` are
//! the index's ([`sagitta_index::limits`], re-exported here: one rule for
//! an in-memory index, a segment and a collection); this module adds what
//! only a collection's requests have, checked by [`crate::Query`]:
//! - `depth` (candidates each leg of a text or hybrid search takes): 1 to
//!   [`MAX_DEPTH`] when given.
//! - a batch search request: 1 to [`MAX_BATCH_QUERIES`] query vectors (the
//!   servers check it; the library takes any batch).

pub use sagitta_index::limits::{check_k, check_knobs, MAX_BEAM, MAX_K};
use sagitta_index::IndexError;

/// Largest `depth` of a text or hybrid search.
pub const MAX_DEPTH: usize = 10_000;
/// Most query vectors in one batch search request (HTTP, Flight, the
/// cluster's front).
pub const MAX_BATCH_QUERIES: usize = 1024;

/// Checks a text search's `depth` when given.
pub fn check_depth(depth: Option<usize>) -> Result<(), IndexError> {
    match depth {
        Some(d) if d == 0 || d > MAX_DEPTH => Err(IndexError::InvalidParameter {
            name: "depth",
            value: d.to_string(),
            reason: "must be in 1..=10000",
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn limits() {
        assert!(check_k(0, 10).is_err());
        assert!(check_k(MAX_K + 1, 10).is_err());
        assert_eq!(check_k(50, 10).unwrap(), 10);
        assert_eq!(check_k(5, 10).unwrap(), 5);
        assert_eq!(check_k(5, 0).unwrap(), 0);
        assert!(check_knobs(Some(0), None, None).is_err());
        assert!(check_knobs(None, None, Some(MAX_BEAM + 1)).is_err());
        assert!(check_knobs(Some(64), Some(8), None).is_ok());
        assert!(check_depth(Some(0)).is_err());
        assert!(check_depth(Some(MAX_DEPTH + 1)).is_err());
        assert!(check_depth(Some(MAX_DEPTH)).is_ok());
        assert!(check_depth(None).is_ok());
    }
}
