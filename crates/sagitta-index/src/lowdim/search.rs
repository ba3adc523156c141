//! Branch-and-bound kNN over a [`LowDimView`], and the kNN vote.

use super::build::grid_code;
use super::format::{Coords, LowDimView, LEAF_BIT};
use super::scan::{self, Coord, IntQuery};
use super::{box_dim, LabelShare, LowDimHit, LowDimScratch, SearchStats, LEAF, MAX_DIM};
use crate::{IndexError, Result};
use std::cmp::Reverse;

/// A candidate: distance in the stored units, then row id (the tie-break).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Best {
    dist: f64,
    id: u32,
    pos: u32,
}

impl Best {
    #[inline(always)]
    fn before(&self, dist: f64, id: u32) -> bool {
        self.dist < dist || (self.dist == dist && self.id < id)
    }
}

impl LowDimView<'_> {
    /// The exact `k` nearest rows to `query`, nearest first; equal
    /// distances in row order. Errors: wrong dimensions, a non-finite
    /// component, `k` of 0 or more than the rows.
    pub fn search<'s>(
        &self,
        query: &[f32],
        k: usize,
        scratch: &'s mut LowDimScratch,
    ) -> Result<&'s [LowDimHit]> {
        if query.len() != self.dim {
            return Err(IndexError::Dimensions {
                expected: self.dim,
                got: query.len(),
            });
        }
        if let Some(i) = query.iter().position(|x| !x.is_finite()) {
            return Err(IndexError::NotFinite {
                index: i,
                value: query[i],
            });
        }
        if k == 0 {
            return Err(IndexError::ZeroK(k));
        }
        if k > self.rows {
            return Err(IndexError::KTooLarge { k, len: self.rows });
        }
        let mut q = [0f64; MAX_DIM];
        let q = &mut q[..self.dim];
        let unit = match self.coords {
            Coords::Grid { .. } => {
                for (o, &x) in q.iter_mut().zip(query) {
                    // On the grid the code is exact; off it, scale in f64.
                    *o = match grid_code(x, self.scale) {
                        Some(c) => f64::from(c),
                        None => f64::from(x) * self.scale,
                    };
                }
                1.0 / (self.scale * self.scale)
            }
            Coords::F32 { .. } => {
                for (o, &x) in q.iter_mut().zip(query) {
                    *o = f64::from(x);
                }
                1.0
            }
        };
        let avx512 = scan::has_avx512();
        match self.coords {
            Coords::Grid { boxes, coords } => {
                let mut codes = [0i16; MAX_DIM];
                let on_grid = q.iter().zip(codes.iter_mut()).all(|(&x, c)| {
                    *c = x as i16;
                    f64::from(*c) == x
                });
                let b = box_dim(self.dim);
                let root = (&boxes[..self.dim], &boxes[b..b + self.dim]);
                match IntQuery::new(&codes[..self.dim], root.0, root.1).filter(|_| on_grid) {
                    Some(iq) => self.run_u32(avx512, boxes, coords, &iq, k, scratch),
                    None => self.run_f64(boxes, coords, q, k, scratch),
                }
            }
            Coords::F32 { boxes, coords } => self.run_f64(boxes, coords, q, k, scratch),
        }
        scratch.hits.clear();
        for b in &scratch.best {
            scratch.hits.push(LowDimHit {
                id: b.id,
                dist: b.dist * unit,
                label: self.labels.map_or(0, |l| l[b.pos as usize]),
            });
        }
        Ok(&scratch.hits)
    }

    /// The kNN vote: the labels of the exact `k` nearest rows with their
    /// counts and shares, most frequent first (ties: the smaller label).
    /// Errors as [`LowDimView::search`], and when the index has no labels.
    pub fn classify<'s>(
        &self,
        query: &[f32],
        k: usize,
        scratch: &'s mut LowDimScratch,
    ) -> Result<&'s [LabelShare]> {
        if self.labels.is_none() {
            return Err(IndexError::InvalidParameter {
                name: "labels",
                value: "none".into(),
                reason: "the index was built without labels",
            });
        }
        self.search(query, k, scratch)?;
        let tally = super::tally(scratch.hits.iter().map(|h| h.label));
        scratch.shares.clear();
        for (label, count) in tally {
            scratch.shares.push(LabelShare {
                label,
                count,
                share: f64::from(count) / k as f64,
            });
        }
        Ok(&scratch.shares)
    }

    /// The search in `f64` over either coordinate type.
    fn run_f64<C: Coord>(
        &self,
        boxes: &[C],
        coords: &[C],
        q: &[f64],
        k: usize,
        s: &mut LowDimScratch,
    ) {
        let corner = 2 * box_dim(self.dim);
        let block = C::block_len(self.dim);
        let mut dists = [0f64; LEAF];
        self.walk(
            k,
            s,
            |node| scan::box_f64(&boxes[node as usize * corner..][..corner], q),
            |leaf, out| {
                let b = leaf * block;
                scan::leaf_f64(&coords[b..b + block], q, &mut dists);
                *out = dists;
            },
            |_| {},
        );
    }

    /// The search in exact `u32` arithmetic on `i16` codes.
    fn run_u32(
        &self,
        avx512: bool,
        boxes: &[i16],
        coords: &[i16],
        q: &IntQuery,
        k: usize,
        s: &mut LowDimScratch,
    ) {
        let corner = 2 * q.bdim;
        let block = i16::block_len(self.dim);
        let mut dists = [0u32; LEAF];
        self.walk(
            k,
            s,
            |node| {
                let c = &boxes[node as usize * corner..][..corner];
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    // SAFETY: `avx512` is set only when the CPU has
                    // AVX-512F/BW; `c` holds both corners.
                    return f64::from(unsafe { scan::avx512::bound(c, q) });
                }
                f64::from(scan::box_u32_scalar(c, q))
            },
            |leaf, out| {
                let b = leaf * block;
                let blk = &coords[b..b + block];
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    // SAFETY: as above; `blk` is one whole block.
                    unsafe { scan::avx512::leaf(blk, q, &mut dists) };
                } else {
                    scan::leaf_u32_scalar(blk, q, &mut dists);
                }
                #[cfg(not(target_arch = "x86_64"))]
                scan::leaf_u32_scalar(blk, q, &mut dists);
                for (o, &d) in out.iter_mut().zip(&dists) {
                    *o = f64::from(d);
                }
            },
            |leaf| {
                let blk = &coords[leaf * block..(leaf + 1) * block];
                for line in blk.chunks(32) {
                    crate::prefetch(line.as_ptr().cast());
                }
            },
        );
    }

    /// Branch and bound: `bound(node)` is a lower bound of the distance to
    /// anything under `node`, `leaf(block, out)` the distances of a
    /// leaf's block. Subtrees open in order of bound; a subtree is
    /// skipped when its bound exceeds the k-th distance so far (a bound
    /// equal to it is still opened: a row there could win the tie by id).
    fn walk(
        &self,
        k: usize,
        s: &mut LowDimScratch,
        bound: impl Fn(u32) -> f64,
        mut leaf: impl FnMut(usize, &mut [f64; LEAF]),
        fetch: impl Fn(usize),
    ) {
        let mut stats = SearchStats::default();
        let best = &mut s.best;
        best.clear();
        let heap = &mut s.heap;
        heap.clear();
        heap.push((Reverse(0), 0));
        let mut dists = [0f64; LEAF];
        // The k-th distance so far (infinite until k rows are held).
        let mut worst = f64::INFINITY;
        // Best bin first: pop the subtree of least bound, walk down its
        // nearer side to a leaf, queueing the farther sides; stop when the
        // least bound left exceeds the k-th distance.
        while let Some((Reverse(lb), mut node)) = heap.pop() {
            if f64::from_bits(lb) > worst {
                break;
            }
            let (a, b) = loop {
                let (a, b) = (
                    self.nodes[2 * node as usize],
                    self.nodes[2 * node as usize + 1],
                );
                if b & LEAF_BIT != 0 {
                    break (a, b);
                }
                let (la, lb_) = (bound(a), bound(b));
                stats.nodes += 2;
                let (near, far) = if la <= lb_ {
                    ((a, la), (b, lb_))
                } else {
                    ((b, lb_), (a, la))
                };
                if far.1 <= worst {
                    heap.push((Reverse(far.1.to_bits()), far.0));
                }
                if near.1 > worst {
                    break (0, 0);
                }
                let w = self.nodes[2 * near.0 as usize + 1];
                if w & LEAF_BIT != 0 {
                    fetch(self.nodes[2 * near.0 as usize] as usize);
                }
                node = near.0;
            };
            if b & LEAF_BIT == 0 {
                continue;
            }
            let start = a as usize * LEAF;
            let count = (b & !LEAF_BIT) as usize;
            leaf(a as usize, &mut dists);
            stats.leaves += 1;
            stats.rows += count as u64;
            for (j, &d) in dists[..count].iter().enumerate() {
                if d > worst {
                    continue;
                }
                let pos = start + j;
                let id = self.ids[pos];
                if best.len() == k && !(d < worst || id < best[k - 1].id) {
                    continue;
                }
                let at = best.partition_point(|b| b.before(d, id));
                best.insert(
                    at,
                    Best {
                        dist: d,
                        id,
                        pos: pos as u32,
                    },
                );
                if best.len() > k {
                    best.pop();
                }
                if best.len() == k {
                    worst = best[k - 1].dist;
                }
            }
        }
        s.stats = stats;
    }
}
