//! The limits of a search, checked in one place for every front end
//! (the Python package, HTTP and Flight all reach them through
//! [`crate::Collection::search`] and the text search).
//!
//! - `k`: 1 to [`MAX_K`]; a `k` larger than the live rows returns every
//!   row (a collection is not an error for being small).
//! - `ef` (beam width), `nprobe` (IVF probes), `refine` (IVF rerank
//!   depth): 1 to [`MAX_BEAM`] when given.
//! - `depth` (candidates each leg of a text or hybrid search takes): 1 to
//!   [`MAX_DEPTH`] when given.
//! - a batch search request: 1 to [`MAX_BATCH_QUERIES`] query vectors (the
//!   servers check it; the library takes any batch).

use sagitta_index::IndexError;

/// Largest `k` of a search.
pub const MAX_K: usize = 10_000;
/// Largest `ef`, `nprobe` and `refine`.
pub const MAX_BEAM: usize = 100_000;
/// Largest `depth` of a text or hybrid search.
pub const MAX_DEPTH: usize = 10_000;
/// Most query vectors in one batch search request (HTTP, Flight, the
/// cluster's front).
pub const MAX_BATCH_QUERIES: usize = 1024;

fn bad(name: &'static str, value: usize, reason: &'static str) -> IndexError {
    IndexError::InvalidParameter {
        name,
        value: value.to_string(),
        reason,
    }
}

/// Checks `k` and clamps it to `live` rows.
pub fn check_k(k: usize, live: usize) -> Result<usize, IndexError> {
    if k == 0 {
        return Err(IndexError::ZeroK(k));
    }
    if k > MAX_K {
        return Err(bad("k", k, "must be at most 10000 (the maximum)"));
    }
    Ok(k.min(live))
}

/// Checks the search knobs that are given.
pub fn check_knobs(
    ef: Option<usize>,
    nprobe: Option<usize>,
    refine: Option<usize>,
) -> Result<(), IndexError> {
    for (name, v) in [("ef", ef), ("nprobe", nprobe), ("refine", refine)] {
        if let Some(v) = v {
            if v == 0 || v > MAX_BEAM {
                return Err(bad(name, v, "must be in 1..=100000"));
            }
        }
    }
    Ok(())
}

/// Checks a text search's `depth` when given.
pub fn check_depth(depth: Option<usize>) -> Result<(), IndexError> {
    match depth {
        Some(d) if d == 0 || d > MAX_DEPTH => Err(bad("depth", d, "must be in 1..=10000")),
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
