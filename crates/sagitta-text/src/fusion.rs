//! Fusion of a dense leg (distances, smaller is nearer) and a text leg
//! (BM25 scores, larger is better) into one ranking. Each leg is a ranked
//! list of at most its depth; a row missing from a leg contributes
//! nothing from that leg.
//!
//! - RRF: Σ 1 / (k + rank), ranks from 1.
//! - `alpha`: α · dense + (1 − α) · text, each leg's scores min-max
//!   normalised over its list (α = 1: dense only, 0: text only, as in
//!   Longbow and Weaviate).
//! - DBSF: each leg's scores mapped to [0, 1] by mean ± 3 standard
//!   deviations of its list, clipped, then summed (Qdrant's
//!   distribution-based score fusion).

use std::collections::HashMap;

/// A leg's score normalisation.
type Norm = Box<dyn Fn(f32) -> f32>;

/// How two legs are combined.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion with constant `k`.
    Rrf { k: f32 },
    /// Weighted sum of min-max normalised scores.
    Alpha { alpha: f32 },
    /// Distribution-based score fusion.
    Dbsf,
}

impl Fusion {
    /// The fusion the APIs' `fusion` / `alpha` / `rrf_k` arguments ask
    /// for (None: the default): `alpha` alone selects `Alpha`, `rrf_k`
    /// alone `Rrf`. The values are checked where the search runs.
    pub fn from_args(
        fusion: Option<&str>,
        alpha: Option<f32>,
        rrf_k: Option<f32>,
    ) -> Result<Option<Fusion>, String> {
        Ok(match (fusion, alpha) {
            (None, None) => rrf_k.map(|k| Fusion::Rrf { k }),
            (None | Some("alpha"), Some(alpha)) => Some(Fusion::Alpha { alpha }),
            (Some("alpha"), None) => {
                return Err("fusion \"alpha\" needs alpha (1.0: dense only, 0.0: text only)".into())
            }
            (Some("rrf"), None) => Some(Fusion::Rrf {
                k: rrf_k.unwrap_or(60.0),
            }),
            (Some("dbsf"), None) => Some(Fusion::Dbsf),
            (Some(f @ ("rrf" | "dbsf")), Some(_)) => {
                return Err(format!("alpha applies to fusion \"alpha\", not {f:?}"))
            }
            (Some(f), _) => {
                return Err(format!(
                    "fusion: unknown method {f:?} (expected rrf, alpha or dbsf)"
                ))
            }
        })
    }

    /// The name used in APIs.
    pub fn name(&self) -> &'static str {
        match self {
            Fusion::Rrf { .. } => "rrf",
            Fusion::Alpha { .. } => "alpha",
            Fusion::Dbsf => "dbsf",
        }
    }
}

/// One fused result row.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    /// The row's key.
    pub key: u64,
    /// Fused score (larger is better).
    pub score: f32,
    /// Rank (from 1) and distance in the dense leg.
    pub dense: Option<(u32, f32)>,
    /// Rank (from 1) and BM25 score in the text leg.
    pub text: Option<(u32, f32)>,
}

fn min_max(v: &[f32]) -> impl Fn(f32) -> f32 {
    let lo = v.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    move |x| {
        if hi > lo {
            (x - lo) / (hi - lo)
        } else {
            1.0
        }
    }
}

fn dbsf(v: &[f32]) -> impl Fn(f32) -> f32 {
    let n = v.len().max(1) as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    let sd = var.sqrt();
    move |x| {
        if sd > 0.0 {
            (((f64::from(x) - (mean - 3.0 * sd)) / (6.0 * sd)).clamp(0.0, 1.0)) as f32
        } else {
            1.0
        }
    }
}

/// Fuses `dense` ((key, distance), nearest first) and `text` ((key,
/// score), best first) and keeps the best `k`, ties by smaller key.
pub fn fuse(dense: &[(u64, f32)], text: &[(u64, f32)], fusion: Fusion, k: usize) -> Vec<Fused> {
    // Dense similarity: the negated distance (affine, so min-max and DBSF
    // are unchanged by the metric's offset).
    let sims: Vec<f32> = dense.iter().map(|&(_, d)| -d).collect();
    let texts: Vec<f32> = text.iter().map(|&(_, s)| s).collect();
    let (nd, nt): (Norm, Norm) = match fusion {
        Fusion::Rrf { .. } => (Box::new(|x| x), Box::new(|x| x)),
        Fusion::Alpha { .. } => (Box::new(min_max(&sims)), Box::new(min_max(&texts))),
        Fusion::Dbsf => (Box::new(dbsf(&sims)), Box::new(dbsf(&texts))),
    };
    let (wd, wt) = match fusion {
        Fusion::Alpha { alpha } => (alpha, 1.0 - alpha),
        _ => (1.0, 1.0),
    };
    let leg = |rank: usize, norm: f32| match fusion {
        Fusion::Rrf { k } => 1.0 / (k + rank as f32 + 1.0),
        _ => norm,
    };
    let mut rows: HashMap<u64, Fused> = HashMap::with_capacity(dense.len() + text.len());
    for (r, &(key, d)) in dense.iter().enumerate() {
        let e = rows.entry(key).or_insert(Fused {
            key,
            score: 0.0,
            dense: None,
            text: None,
        });
        if e.dense.is_none() {
            e.dense = Some((r as u32 + 1, d));
            e.score += wd * leg(r, nd(-d));
        }
    }
    for (r, &(key, s)) in text.iter().enumerate() {
        let e = rows.entry(key).or_insert(Fused {
            key,
            score: 0.0,
            dense: None,
            text: None,
        });
        if e.text.is_none() {
            e.text = Some((r as u32 + 1, s));
            e.score += wt * leg(r, nt(s));
        }
    }
    let mut out: Vec<Fused> = rows.into_values().collect();
    out.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    out.truncate(k);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rrf_adds_reciprocal_ranks() {
        let f = fuse(
            &[(1, 0.1), (2, 0.2)],
            &[(2, 5.0), (3, 4.0)],
            Fusion::Rrf { k: 60.0 },
            10,
        );
        assert_eq!(f[0].key, 2);
        assert!((f[0].score - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-7);
        assert_eq!(f[0].dense, Some((2, 0.2)));
        assert_eq!(f[0].text, Some((1, 5.0)));
        // Key 1 is dense rank 1 (1/61), key 3 text rank 2 (1/62).
        assert_eq!(f[1].key, 1);
        assert_eq!(f[2].key, 3);
        assert_eq!(f[2].dense, None);
    }

    #[test]
    fn alpha_one_is_dense_order_and_zero_is_text_order() {
        let dense = [(1, 0.1), (2, 0.3), (3, 0.5)];
        let text = [(3, 9.0), (2, 4.0), (1, 1.0)];
        let order = |a| {
            fuse(&dense, &text, Fusion::Alpha { alpha: a }, 3)
                .iter()
                .map(|f| f.key)
                .collect::<Vec<_>>()
        };
        assert_eq!(order(1.0), [1, 2, 3]);
        assert_eq!(order(0.0), [3, 2, 1]);
    }

    #[test]
    fn dbsf_clips_to_unit_range_and_ties_go_to_smaller_keys() {
        let f = fuse(&[(5, 0.2), (4, 0.2)], &[], Fusion::Dbsf, 2);
        assert_eq!(f.iter().map(|f| f.key).collect::<Vec<_>>(), [4, 5]);
        let f = fuse(&[], &[(1, 10.0), (2, 1.0), (3, 0.5)], Fusion::Dbsf, 3);
        assert!(f.iter().all(|x| (0.0..=1.0).contains(&x.score)));
        assert_eq!(f[0].key, 1);
        assert!(fuse(&[], &[], Fusion::Dbsf, 3).is_empty());
    }
}
