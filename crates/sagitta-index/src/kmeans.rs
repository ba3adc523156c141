//! k-means for the IVF coarse quantizer.
//!
//! * **Init**: k-means++ (each next centre drawn with probability
//!   proportional to the squared distance to the nearest chosen one).
//! * **Iterations**: Lloyd's, at most `iterations`, stopping early when no
//!   point changes cluster. Assignment runs in parallel over the rayon
//!   pool; the sums are reduced per thread.
//! * **Empty clusters** take over half of the largest cluster: its centre
//!   is copied with a small symmetric perturbation (as faiss does).
//! * **Many clusters**: above [`FLAT_MAX`] clusters the problem is split
//!   hierarchically: `ceil(sqrt(k))` top clusters first, then each top
//!   cluster's points are clustered into a share of `k` proportional to
//!   its size. k-means++ is O(n·k·d), so this keeps training of thousands
//!   of partitions near O(n·sqrt(k)·d).
//!
//! Distances are squared L2 (for cosine the data is already normalised).

use crate::rotation::splitmix64;
use rayon::prelude::*;
use sagitta_kernels::kernels;

/// Above this many clusters, k-means splits hierarchically.
pub const FLAT_MAX: usize = 256;

/// Progress of a training run, reported between steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// Iteration `iter` of `of` of a k-means over `points` points into
    /// `clusters` clusters finished, with the mean squared distance to the
    /// assigned centre.
    Iteration {
        /// Clusters of this run.
        clusters: usize,
        /// Points of this run.
        points: usize,
        /// Iterations done.
        iter: usize,
        /// Iteration budget.
        of: usize,
        /// Mean squared distance of points to their centre.
        inertia: f64,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Progress::Iteration {
            clusters,
            points,
            iter,
            of,
            inertia,
        } = self;
        write!(
            f,
            "k-means: {clusters} partitions over {points} points, iteration {iter}/{of}, mean squared distance {inertia:.5}"
        )
    }
}

/// The nearest of `k` centres (row-major, `dims` each) to `x`, with its
/// squared distance.
pub fn nearest(centroids: &[f32], dims: usize, x: &[f32]) -> (u32, f32) {
    let l2 = kernels().l2sq_f32;
    let mut best = (0u32, f32::INFINITY);
    for (c, row) in centroids.chunks_exact(dims).enumerate() {
        let d = l2(x, row);
        if d < best.1 {
            best = (c as u32, d);
        }
    }
    best
}

fn uniform(state: &mut u64) -> f64 {
    ((splitmix64(state) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Clusters `data` (`n × dims`, row-major) into `k` centres; returns
/// `k × dims` floats. `k` is clamped to `1..=n`.
pub fn kmeans(
    data: &[f32],
    dims: usize,
    k: usize,
    iterations: usize,
    seed: u64,
    progress: &mut dyn FnMut(Progress),
) -> Vec<f32> {
    let n = data.len() / dims;
    let k = k.clamp(1, n.max(1));
    if n == 0 {
        return vec![0.0; dims];
    }
    if k <= FLAT_MAX {
        return lloyd(data, dims, k, iterations, seed, progress);
    }
    let top = (k as f64).sqrt().ceil() as usize;
    let top_centres = lloyd(data, dims, top, iterations, seed, progress);
    let assign: Vec<u32> = data
        .par_chunks_exact(dims)
        .map(|x| nearest(&top_centres, dims, x).0)
        .collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); top];
    for (i, &a) in assign.iter().enumerate() {
        members[a as usize].push(i);
    }
    // Share of k per top cluster, proportional to size, at least 1 for
    // every non-empty one; rounding drift goes to the largest.
    let mut shares: Vec<usize> = members
        .iter()
        .map(|m| {
            if m.is_empty() {
                0
            } else {
                ((k as f64 * m.len() as f64 / n as f64).round() as usize).clamp(1, m.len())
            }
        })
        .collect();
    let total: usize = shares.iter().sum();
    if let Some(big) = (0..top).max_by_key(|&i| members[i].len()) {
        if total < k {
            shares[big] = (shares[big] + k - total).min(members[big].len());
        } else {
            let excess = total - k;
            shares[big] = shares[big].saturating_sub(excess).max(1);
        }
    }
    let mut out = Vec::with_capacity(k * dims);
    for (t, m) in members.iter().enumerate() {
        if shares[t] == 0 {
            continue;
        }
        let sub: Vec<f32> = m
            .iter()
            .flat_map(|&i| data[i * dims..(i + 1) * dims].iter().copied())
            .collect();
        out.extend(kmeans(
            &sub,
            dims,
            shares[t],
            iterations,
            seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9),
            progress,
        ));
    }
    out
}

fn plus_plus(data: &[f32], dims: usize, k: usize, seed: u64) -> Vec<f32> {
    let n = data.len() / dims;
    let l2 = kernels().l2sq_f32;
    let mut state = seed;
    let first = (splitmix64(&mut state) % n as u64) as usize;
    let mut centres = data[first * dims..(first + 1) * dims].to_vec();
    let mut d2: Vec<f32> = data
        .par_chunks_exact(dims)
        .map(|x| l2(x, &centres[..dims]))
        .collect();
    while centres.len() < k * dims {
        let total: f64 = d2.iter().map(|&d| f64::from(d)).sum();
        let pick = if total <= 0.0 {
            (splitmix64(&mut state) % n as u64) as usize
        } else {
            let mut target = uniform(&mut state) * total;
            let mut chosen = n - 1;
            for (i, &d) in d2.iter().enumerate() {
                target -= f64::from(d);
                if target <= 0.0 {
                    chosen = i;
                    break;
                }
            }
            chosen
        };
        let c = data[pick * dims..(pick + 1) * dims].to_vec();
        d2.par_iter_mut()
            .zip(data.par_chunks_exact(dims))
            .for_each(|(d, x)| *d = d.min(l2(x, &c)));
        centres.extend_from_slice(&c);
    }
    centres
}

fn lloyd(
    data: &[f32],
    dims: usize,
    k: usize,
    iterations: usize,
    seed: u64,
    progress: &mut dyn FnMut(Progress),
) -> Vec<f32> {
    let n = data.len() / dims;
    let mut centres = plus_plus(data, dims, k, seed);
    let mut assign = vec![u32::MAX; n];
    let mut state = seed ^ 0xC0FF_EE00;
    for iter in 1..=iterations.max(1) {
        let (changed, inertia) = assign
            .par_iter_mut()
            .zip(data.par_chunks_exact(dims))
            .map(|(a, x)| {
                let (c, d) = nearest(&centres, dims, x);
                let changed = usize::from(*a != c);
                *a = c;
                (changed, f64::from(d))
            })
            .reduce(|| (0, 0.0), |x, y| (x.0 + y.0, x.1 + y.1));
        progress(Progress::Iteration {
            clusters: k,
            points: n,
            iter,
            of: iterations.max(1),
            inertia: inertia / n as f64,
        });
        if changed == 0 && iter > 1 {
            break;
        }
        let (sums, counts) = assign
            .par_iter()
            .zip(data.par_chunks_exact(dims))
            .fold(
                || (vec![0f64; k * dims], vec![0usize; k]),
                |(mut s, mut c), (&a, x)| {
                    let a = a as usize;
                    c[a] += 1;
                    for (acc, &v) in s[a * dims..(a + 1) * dims].iter_mut().zip(x) {
                        *acc += f64::from(v);
                    }
                    (s, c)
                },
            )
            .reduce(
                || (vec![0f64; k * dims], vec![0usize; k]),
                |(mut s1, mut c1), (s2, c2)| {
                    s1.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
                    c1.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
                    (s1, c1)
                },
            );
        let mut counts = counts;
        for c in 0..k {
            if counts[c] > 0 {
                for (dst, s) in centres[c * dims..(c + 1) * dims]
                    .iter_mut()
                    .zip(&sums[c * dims..(c + 1) * dims])
                {
                    *dst = (s / counts[c] as f64) as f32;
                }
            }
        }
        // Empty clusters split the largest one.
        for c in 0..k {
            if counts[c] != 0 {
                continue;
            }
            let Some(big) = (0..k).max_by_key(|&i| counts[i]) else {
                break;
            };
            if counts[big] < 2 {
                break;
            }
            for j in 0..dims {
                let v = centres[big * dims + j];
                let eps = (uniform(&mut state) as f32 - 0.5) * 1e-3 * v.abs().max(1e-3);
                centres[c * dims + j] = v + eps;
                centres[big * dims + j] = v - eps;
            }
            counts[c] = counts[big] / 2;
            counts[big] -= counts[c];
        }
    }
    centres
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_well_separated_clusters() {
        // 6 tight blobs in 8-d: every blob must end up in its own cluster.
        let dims = 8;
        let mut st = 3u64;
        let mut data = Vec::new();
        for i in 0..600 {
            let blob = i % 6;
            for j in 0..dims {
                let centre = if j == blob { 10.0 } else { 0.0 };
                data.push(centre + (uniform(&mut st) as f32 - 0.5) * 0.1);
            }
        }
        let c = kmeans(&data, dims, 6, 20, 1, &mut |_| {});
        let labels: Vec<u32> = data
            .chunks_exact(dims)
            .map(|x| nearest(&c, dims, x).0)
            .collect();
        for blob in 0..6 {
            let l = labels[blob];
            assert!(labels.iter().skip(blob).step_by(6).all(|&x| x == l));
        }
        let mut distinct: Vec<u32> = labels[..6].to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 6);
    }

    #[test]
    fn hierarchical_split_returns_k_centres() {
        let dims = 4;
        let mut st = 9u64;
        let data: Vec<f32> = (0..20_000 * dims)
            .map(|_| uniform(&mut st) as f32)
            .collect();
        let c = kmeans(&data, dims, 300, 5, 2, &mut |_| {});
        assert_eq!(c.len(), 300 * dims);
        // Every centre is used by some point.
        let mut used = vec![false; 300];
        for x in data.chunks_exact(dims) {
            used[nearest(&c, dims, x).0 as usize] = true;
        }
        assert!(used.iter().filter(|&&u| u).count() > 290);
    }
}
