//! The limits of a search request, decided here once for every caller:
//! the in-memory [`crate::Index`], sealed segments, collections (and so
//! the Python package, HTTP, Flight and the cluster client, which all
//! reach them through `sagitta_store::Query`).
//!
//! - `k` (the one rule): 1 to [`MAX_K`]; a `k` larger than the live rows
//!   returns every live row, and an empty index returns no rows. Neither
//!   is an error: an index is not wrong for being small (usearch and the
//!   collection agree; hnswlib's refusal is not followed).
//! - `ef` (beam width), `nprobe` (IVF probes), `refine` (IVF rerank
//!   depth): 1 to [`MAX_BEAM`] when given.

use crate::error::{IndexError, Result};

/// Largest `k` of a search.
pub const MAX_K: usize = 10_000;
/// Largest `ef`, `nprobe` and `refine`.
pub const MAX_BEAM: usize = 100_000;

pub(crate) fn bad(name: &'static str, value: usize, reason: &'static str) -> IndexError {
    IndexError::InvalidParameter {
        name,
        value: value.to_string(),
        reason,
    }
}

/// Checks `k` and clamps it to the `live` rows there are (0 for an empty
/// index: the search then returns no rows).
pub fn check_k(k: usize, live: usize) -> Result<usize> {
    if k == 0 {
        return Err(IndexError::ZeroK(k));
    }
    if k > MAX_K {
        return Err(bad("k", k, "must be at most 10000 (the maximum)"));
    }
    Ok(k.min(live))
}

/// Checks the search knobs that are given.
pub fn check_knobs(ef: Option<usize>, nprobe: Option<usize>, refine: Option<usize>) -> Result<()> {
    for (name, v) in [("ef", ef), ("nprobe", nprobe), ("refine", refine)] {
        if let Some(v) = v {
            if v == 0 || v > MAX_BEAM {
                return Err(bad(name, v, "must be in 1..=100000"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn k_is_checked_then_clamped_to_the_live_rows() {
        assert_eq!(check_k(0, 10), Err(IndexError::ZeroK(0)));
        assert!(check_k(MAX_K + 1, 10).is_err());
        assert_eq!(check_k(MAX_K, 10).unwrap(), 10);
        assert_eq!(check_k(50, 10).unwrap(), 10);
        assert_eq!(check_k(5, 10).unwrap(), 5);
        assert_eq!(check_k(5, 0).unwrap(), 0);
        assert!(check_knobs(Some(0), None, None).is_err());
        assert!(check_knobs(None, None, Some(MAX_BEAM + 1)).is_err());
        assert!(check_knobs(Some(64), Some(8), None).is_ok());
    }
}
