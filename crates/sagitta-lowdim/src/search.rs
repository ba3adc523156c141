//! Branch-and-bound kNN over a [`LowDimView`], and the kNN vote.

use super::build::grid_code;
use super::format::{Coords, LowDimView, LEAF_BIT};
use super::scan::{self, Coord, IntQuery, Mask, Simd};
use super::{box_dim, LabelShare, LowDimHit, LowDimScratch, SearchStats, MAX_DIM, MAX_LEAF};
use crate::{LowDimError, Result};
use std::cmp::Reverse;

/// A candidate: distance (the walk's key; its `f64` bits once the walk
/// ends) and block slot. Ties go to the lower row id, read from the id
/// array only when two distances are equal: an id is a cache miss of its
/// own (a separate array), and most candidates are strictly nearer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Best {
    dist: u64,
    pos: u32,
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
            return Err(LowDimError::Dimensions {
                expected: self.dim,
                got: query.len(),
            });
        }
        if let Some(i) = query.iter().position(|x| !x.is_finite()) {
            return Err(LowDimError::NotFinite {
                index: i,
                value: query[i],
            });
        }
        if k == 0 {
            return Err(LowDimError::ZeroK(k));
        }
        if k > self.rows {
            return Err(LowDimError::KTooLarge { k, len: self.rows });
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
        let simd = scan::simd();
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
                    Some(iq) => self.run_u32(simd, boxes, coords, &iq, k, scratch),
                    None => self.run_f64(boxes, coords, q, k, scratch),
                }
            }
            Coords::F32 { boxes, coords } => self.run_f64(boxes, coords, q, k, scratch),
        }
        scratch.hits.clear();
        for b in &scratch.best {
            scratch.hits.push(LowDimHit {
                id: self.ids[b.pos as usize],
                dist: f64::from_bits(b.dist) * unit,
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
            return Err(LowDimError::InvalidParameter {
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
        let mut a = F64Arith {
            packed: self.packed(),
            corner: 2 * box_dim(self.dim),
            block: C::block_len(self.dim, self.leaf),
            leaf: self.leaf,
            boxes,
            coords,
            q,
            dists: [0.0; MAX_LEAF],
        };
        self.walk(k, s, &mut a);
    }

    /// The search in exact `u32` arithmetic on `i16` codes.
    fn run_u32(
        &self,
        simd: Simd,
        boxes: &[i16],
        coords: &[i16],
        q: &IntQuery,
        k: usize,
        s: &mut LowDimScratch,
    ) {
        let mut a = U32Arith {
            simd,
            packed: self.packed(),
            dim: self.dim,
            corner: 2 * q.bdim,
            block: i16::block_len(self.dim, self.leaf),
            leaf: self.leaf,
            boxes,
            coords,
            q,
            dists: [0; MAX_LEAF],
            pairs: q.pairs,
            npairs: q.npairs,
            fixed: 0,
        };
        self.walk(k, s, &mut a);
    }

    /// Branch and bound in one arithmetic (distances as order-preserving
    /// `u64` keys): a subtree is skipped when its bound exceeds the k-th
    /// distance so far (a bound equal to it is still opened: a row there
    /// could win the tie by id).
    ///
    /// Two phases. First, best bin first: pop the subtree of least bound,
    /// walk down its nearer side to a leaf, queueing the farther sides,
    /// until k rows are held (one leaf, as a rule). Then every queued
    /// subtree still within the k-th distance is opened a level at a time:
    /// the boxes of a whole level are loaded together, and the leaves
    /// found at one level are scanned while the next level's boxes load.
    /// A cold query waits for memory more than it computes, and a level's
    /// loads overlap where a walk down one subtree after another waits for
    /// each in turn. The answer does not depend on the order leaves are
    /// scanned in: every leaf within the final k-th distance is scanned,
    /// and the best k are kept by (distance, id).
    fn walk<A: Arith>(&self, k: usize, s: &mut LowDimScratch, a: &mut A) {
        let mut stats = SearchStats::default();
        let mut best = std::mem::take(&mut s.best);
        best.clear();
        let heap = &mut s.heap;
        heap.clear();
        heap.push((Reverse(0), 0));
        // The k-th distance so far (above every distance until k rows are
        // held).
        let mut worst = u64::MAX;
        while best.len() < k {
            let Some((Reverse(lb), mut node)) = heap.pop() else {
                break;
            };
            if lb > worst {
                break;
            }
            let (x, y) = loop {
                let (x, y) = self.children(node);
                if y & LEAF_BIT != 0 {
                    break (x, y);
                }
                // The next level's boxes, for whichever side is taken now
                // or popped later: their loads overlap this level's.
                for c in [x, y] {
                    let (l, r) = self.children(c);
                    if r & LEAF_BIT == 0 {
                        a.fetch_boxes(l, r);
                    }
                }
                let (bx, by) = a.bounds(x, y);
                stats.nodes += 2;
                let swap = by < bx;
                let near = if swap { (y, by) } else { (x, bx) };
                let far = if swap { (x, bx) } else { (y, by) };
                if far.1 <= worst {
                    heap.push((Reverse(far.1), far.0));
                }
                if near.1 > worst {
                    break (0, 0);
                }
                let (l, r) = self.children(near.0);
                if r & LEAF_BIT != 0 {
                    a.fetch(near.0, l as usize, (r & !LEAF_BIT) as usize);
                }
                node = near.0;
            };
            if y & LEAF_BIT != 0 {
                self.scan_leaf(a, node, x, y, k, &mut best, &mut worst, &mut stats);
            }
        }
        // Level by level over what is left: internal nodes in `front`,
        // leaves to scan in `leaves`, each with its bound.
        let front = &mut s.front;
        let next = &mut s.next;
        let leaves = &mut s.leaves;
        front.clear();
        leaves.clear();
        for (Reverse(lb), n) in heap.drain() {
            if lb <= worst {
                self.queue(a, lb, n, front, leaves);
            }
        }
        while !front.is_empty() || !leaves.is_empty() {
            // This level's boxes were loaded when it was formed; scan the
            // leaves found meanwhile (their rows were loaded then too),
            // nearest bound first, then bound this level.
            leaves.sort_unstable();
            for &(lb, n) in leaves.iter() {
                if lb > worst {
                    break;
                }
                let (x, y) = self.children(n);
                self.scan_leaf(a, n, x, y, k, &mut best, &mut worst, &mut stats);
            }
            leaves.clear();
            next.clear();
            for &(lb, n) in front.iter() {
                if lb > worst {
                    continue;
                }
                let (x, y) = self.children(n);
                let (bx, by) = a.bounds(x, y);
                stats.nodes += 2;
                for (c, b) in [(x, bx), (y, by)] {
                    if b <= worst {
                        self.queue(a, b, c, next, leaves);
                    }
                }
            }
            std::mem::swap(front, next);
        }
        for b in best.iter_mut() {
            b.dist = A::value(b.dist).to_bits();
        }
        s.best = best;
        s.stats = stats;
    }

    /// Queues node `n` (bound `lb`) with its loads started: a leaf on
    /// `leaves` (its rows loading), an internal node on `front` (its
    /// children's boxes loading).
    #[inline(always)]
    fn queue<A: Arith>(
        &self,
        a: &A,
        lb: u64,
        n: u32,
        front: &mut Vec<(u64, u32)>,
        leaves: &mut Vec<(u64, u32)>,
    ) {
        let (l, r) = self.children(n);
        if r & LEAF_BIT != 0 {
            a.fetch(n, l as usize, (r & !LEAF_BIT) as usize);
            leaves.push((lb, n));
        } else {
            a.fetch_boxes(l, r);
            front.push((lb, n));
        }
    }

    /// The two children of internal node `node`, or a leaf's block and
    /// row count (with [`LEAF_BIT`]).
    #[inline(always)]
    fn children(&self, node: u32) -> (u32, u32) {
        (
            self.nodes[2 * node as usize],
            self.nodes[2 * node as usize + 1],
        )
    }

    /// Scans leaf `node` (`x`: block, `y`: row count with [`LEAF_BIT`])
    /// into `best`, the k nearest so far by (distance, id).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn scan_leaf<A: Arith>(
        &self,
        a: &mut A,
        node: u32,
        x: u32,
        y: u32,
        k: usize,
        best: &mut Vec<Best>,
        worst: &mut u64,
        stats: &mut SearchStats,
    ) {
        let start = x as usize * self.leaf;
        let count = (y & !LEAF_BIT) as usize;
        // Only rows within the k-th distance as the scan began can enter
        // (it only shrinks), and most rows are farther: the kernel marks
        // those in a bit mask, so the rest cost nothing here.
        let mask = a.scan(node, x as usize, count, *worst);
        stats.leaves += 1;
        stats.rows += count as u64;
        for (w, &bits) in mask.iter().enumerate().take(count.div_ceil(64)) {
            let mut bits = bits;
            while bits != 0 {
                let j = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.offer(a.dist(j), start + j, k, best, worst);
            }
        }
    }

    /// Offers the row at block slot `pos`, at distance key `d`, to
    /// `best`, the k nearest so far by (distance, id).
    #[inline(always)]
    fn offer(&self, d: u64, pos: usize, k: usize, best: &mut Vec<Best>, worst: &mut u64) {
        if d > *worst {
            return;
        }
        // Only a tie needs ids (the lower one is nearer).
        let id = |p: usize| self.ids[p];
        if best.len() == k && d == *worst && id(pos) >= id(best[k - 1].pos as usize) {
            return;
        }
        let at =
            best.partition_point(|b| b.dist < d || (b.dist == d && id(b.pos as usize) < id(pos)));
        best.insert(
            at,
            Best {
                dist: d,
                pos: pos as u32,
            },
        );
        if best.len() > k {
            best.pop();
        }
        if best.len() == k {
            *worst = best[k - 1].dist;
        }
    }
}

/// Starts loading the boxes of nodes `x` and `y` (`corner` coordinates
/// each; siblings are usually adjacent, then one run of lines).
#[inline(always)]
fn prefetch_boxes<C>(boxes: &[C], corner: usize, x: u32, y: u32) {
    let (x, y) = (x as usize, y as usize);
    if y == x + 1 {
        prefetch_lines(boxes.get(x * corner..(x + 2) * corner).unwrap_or(&[]));
    } else {
        for n in [x, y] {
            prefetch_lines(boxes.get(n * corner..(n + 1) * corner).unwrap_or(&[]));
        }
    }
}

/// Starts loading every cache line of `v` (a hint).
#[inline(always)]
fn prefetch_lines<T>(v: &[T]) {
    let p = v.as_ptr().cast::<u8>();
    for off in (0..std::mem::size_of_val(v)).step_by(64) {
        sagitta_kernels::prefetch(p.wrapping_add(off));
    }
}

/// One arithmetic of the walk: box bounds and leaf distances as `u64`
/// keys that order as the distances do.
trait Arith {
    /// Lower bound of the distance from the query to anything under `node`.
    fn bound(&self, node: u32) -> u64;
    /// The bounds of two siblings.
    #[inline(always)]
    fn bounds(&self, x: u32, y: u32) -> (u64, u64) {
        (self.bound(x), self.bound(y))
    }
    /// Computes the distances of the first `rows` rows of leaf `node`'s
    /// block `block` (at least: whole chunks of 16), and marks those of the
    /// `rows` whose key is at most `worst` (bit `j % 64` of word `j / 64`).
    fn scan(&mut self, node: u32, block: usize, rows: usize, worst: u64) -> Mask;
    /// Row `j`'s distance from the last [`Arith::scan`].
    fn dist(&self, j: usize) -> u64;
    /// Starts loading the first `rows` rows of leaf `node`'s block `block`
    /// (a hint; the node's box is in cache).
    fn fetch(&self, _node: u32, _block: usize, _rows: usize) {}
    /// Starts loading the boxes of siblings `x` and `y` (a hint).
    fn fetch_boxes(&self, x: u32, y: u32);
    /// A key's distance, in the stored units.
    fn value(key: u64) -> f64;
}

/// `f64` distances; keys are their bits (never negative, so the bits order
/// as the numbers do).
struct F64Arith<'a, C> {
    /// Blocks hold only the dimensions their leaf's box does not fix.
    packed: bool,
    corner: usize,
    block: usize,
    leaf: usize,
    boxes: &'a [C],
    coords: &'a [C],
    q: &'a [f64],
    dists: [f64; MAX_LEAF],
}

impl<C: Coord> Arith for F64Arith<'_, C> {
    #[inline(always)]
    fn bound(&self, node: u32) -> u64 {
        scan::box_f64(
            &self.boxes[node as usize * self.corner..][..self.corner],
            self.q,
        )
        .to_bits()
    }

    #[inline(always)]
    fn scan(&mut self, node: u32, block: usize, rows: usize, worst: u64) -> Mask {
        let b = &self.coords[block * self.block..(block + 1) * self.block];
        let out = &mut self.dists[..rows];
        if self.packed {
            let corners = &self.boxes[node as usize * self.corner..][..self.corner];
            scan::leaf_f64_packed(b, corners, self.q, self.leaf, out);
        } else {
            scan::leaf_f64(b, self.q, self.leaf, out);
        }
        scan::mask_of(self.dists[..rows].iter().map(|d| d.to_bits() <= worst))
    }

    #[inline(always)]
    fn dist(&self, j: usize) -> u64 {
        self.dists[j].to_bits()
    }

    #[inline(always)]
    fn fetch_boxes(&self, x: u32, y: u32) {
        prefetch_boxes(self.boxes, self.corner, x, y);
    }

    fn value(key: u64) -> f64 {
        f64::from_bits(key)
    }
}

/// Exact `u32` distances on `i16` codes; keys are the distances.
struct U32Arith<'a> {
    simd: Simd,
    /// Blocks hold only the dimensions their leaf's box does not fix.
    packed: bool,
    dim: usize,
    corner: usize,
    block: usize,
    leaf: usize,
    boxes: &'a [i16],
    coords: &'a [i16],
    q: &'a IntQuery,
    dists: [u32; MAX_LEAF],
    /// The query as the last scanned block holds it: its codes in the
    /// stored dimensions, paired as `vpmaddwd` reads them...
    pairs: [i32; 16],
    npairs: usize,
    /// ... and its squared distance over the dimensions the leaf's box
    /// fixes, which every row of the leaf shares.
    fixed: u32,
}

impl U32Arith<'_> {
    /// The box of `node`: low corner, then high.
    #[inline(always)]
    fn corners(&self, node: u32) -> (&[i16], &[i16]) {
        let c = &self.boxes[node as usize * self.corner..][..self.corner];
        c.split_at(self.corner / 2)
    }

    /// Dimension pairs leaf `node`'s block stores.
    #[inline(always)]
    fn stored_pairs(&self, node: u32) -> usize {
        if !self.packed {
            return self.q.npairs;
        }
        let (lo, hi) = self.corners(node);
        let stored = lo[..self.dim]
            .iter()
            .zip(&hi[..self.dim])
            .filter(|(l, h)| l != h)
            .count();
        stored.div_ceil(2)
    }

    /// Sets `pairs`, `npairs` and `fixed` for leaf `node` (packed blocks:
    /// the dimensions its box fixes are not stored, and their share of
    /// every row's distance is the query's distance to the box there).
    /// Branch-free: which dimensions a leaf fixes is not predictable.
    #[inline(always)]
    fn prepare(&mut self, node: u32) {
        let (lo, hi) = self.corners(node);
        let mut codes = [0i16; 32];
        let (mut n, mut fixed) = (0usize, 0u32);
        for d in 0..self.dim {
            let (l, qd) = (lo[d], self.q.codes16[d]);
            let is_fixed = l == hi[d];
            let t = i32::from(qd) - i32::from(l);
            // Exact: every difference fits i16 and the whole distance
            // u32 ([`IntQuery::new`]); wrapping, as the kernels, so that a
            // crafted file's boxes cannot make it panic.
            let sq = t.unsigned_abs().wrapping_mul(t.unsigned_abs());
            fixed = fixed.wrapping_add(if is_fixed { sq } else { 0 });
            codes[n] = qd;
            n += usize::from(!is_fixed);
        }
        // An odd last stored dimension pairs with a 0 code (the block's
        // padding is 0 too).
        if n < codes.len() {
            codes[n] = 0;
        }
        self.npairs = n.div_ceil(2);
        for (p, pair) in self.pairs.iter_mut().enumerate().take(self.npairs) {
            let (a, b) = (codes[2 * p] as u16 as u32, codes[2 * p + 1] as u16 as u32);
            *pair = (a | b << 16) as i32;
        }
        self.fixed = fixed;
    }
}

impl Arith for U32Arith<'_> {
    #[inline(always)]
    fn bound(&self, node: u32) -> u64 {
        let c = &self.boxes[node as usize * self.corner..][..self.corner];
        #[cfg(target_arch = "x86_64")]
        match self.simd {
            // SAFETY: `simd` names only kernels this CPU runs; `c` holds
            // both corners.
            Simd::Avx512 => return u64::from(unsafe { scan::avx512::bound(c, self.q) }),
            // SAFETY: as above.
            Simd::Avx2 => return u64::from(unsafe { scan::avx2::bound(c, self.q) }),
            Simd::Scalar => {}
        }
        u64::from(scan::box_u32_scalar(c, self.q))
    }

    #[inline(always)]
    fn bounds(&self, x: u32, y: u32) -> (u64, u64) {
        #[cfg(target_arch = "x86_64")]
        if self.simd != Simd::Scalar && y == x + 1 && self.corner == 32 {
            // Siblings' boxes are adjacent (the builder numbers them so):
            // one read of both.
            let c = &self.boxes[x as usize * 32..][..64];
            // SAFETY: `simd` is AVX2 or AVX-512 (which includes AVX2);
            // `c` holds both boxes; corners are 16 codes (`corner` 32).
            let (a, b) = unsafe { scan::avx2::bound2(c, self.q) };
            return (u64::from(a), u64::from(b));
        }
        (self.bound(x), self.bound(y))
    }

    #[inline(always)]
    fn scan(&mut self, node: u32, block: usize, rows: usize, worst: u64) -> Mask {
        if self.packed {
            self.prepare(node);
        }
        // Every row is at least `fixed` away: a leaf wholly past the k-th
        // distance marks nothing.
        let Some(w) = worst.checked_sub(u64::from(self.fixed)) else {
            return [0; MAX_LEAF / 64];
        };
        // Every distance fits u32 ([`IntQuery::new`]): a larger key is no
        // bound at all.
        let w = u32::try_from(w).unwrap_or(u32::MAX);
        let blk = &self.coords[block * self.block..(block + 1) * self.block];
        // Whole chunks of 16 rows, never past the leaf (a multiple of 16).
        let out = &mut self.dists[..rows.next_multiple_of(16)];
        let pairs = &self.pairs[..self.npairs];
        let leaf = self.leaf;
        let mut mask = {
            #[cfg(target_arch = "x86_64")]
            match self.simd {
                // SAFETY: as above; `blk` is one whole block of `leaf`
                // rows, `out` at most `leaf` long.
                Simd::Avx512 => unsafe { scan::avx512::leaf(blk, pairs, leaf, out, w) },
                // SAFETY: as above.
                Simd::Avx2 => unsafe { scan::avx2::leaf(blk, pairs, leaf, out, w) },
                Simd::Scalar => scan::leaf_u32_scalar(blk, pairs, leaf, out, w),
            }
            #[cfg(not(target_arch = "x86_64"))]
            scan::leaf_u32_scalar(blk, pairs, leaf, out, w)
        };
        // The chunk's rows past the leaf's count are not rows.
        scan::keep_first(&mut mask, rows);
        mask
    }

    #[inline(always)]
    fn dist(&self, j: usize) -> u64 {
        u64::from(self.dists[j]) + u64::from(self.fixed)
    }

    #[inline(always)]
    fn fetch_boxes(&self, x: u32, y: u32) {
        prefetch_boxes(self.boxes, self.corner, x, y);
    }

    fn fetch(&self, node: u32, block: usize, rows: usize) {
        // Each stored dimension pair's used rows: 2·rows codes from
        // pair·2·leaf.
        let blk = &self.coords[block * self.block..(block + 1) * self.block];
        for pair in blk.chunks(2 * self.leaf).take(self.stored_pairs(node)) {
            for line in pair[..2 * rows].chunks(32) {
                sagitta_kernels::prefetch(line.as_ptr().cast());
            }
        }
    }

    fn value(key: u64) -> f64 {
        key as f64
    }
}
