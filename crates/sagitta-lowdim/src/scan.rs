//! Distances from a query to one leaf block and to a node's box.
//!
//! Two arithmetics:
//! * **`f64`** over either coordinate type (every query; exact on `i16`
//!   codes). The box bound and the row distance use the same operations in
//!   the same order, so a bound never exceeds a distance inside its box.
//! * **`u32` on `i16` codes** (a query on the grid whose every difference
//!   to the data fits `i16` and whose largest possible distance fits `u32`,
//!   checked per query): exact, with `vpmaddwd` over interleaved dimension
//!   pairs, 16 rows per AVX-512 instruction or 8 per AVX2 instruction.
//!
//! A block holds `leaf` rows (a multiple of 16, the index's leaf size).

use super::box_dim;
use sagitta_kernels::Isa;

/// A stored coordinate: an `i16` grid code or an `f32` value.
pub(crate) trait Coord: Copy + Default + Send + Sync + 'static {
    /// Little-endian bytes.
    type Bytes: AsRef<[u8]>;
    /// The value in the arithmetic of distances.
    fn f(self) -> f64;
    /// Little-endian bytes.
    fn le_bytes(self) -> Self::Bytes;
    /// Coordinates in one block of `leaf` rows.
    fn block_len(dim: usize, leaf: usize) -> usize;
    /// Where dimension `d` of row `j` sits in its block of `leaf` rows.
    fn at(d: usize, j: usize, leaf: usize) -> usize;
}

impl Coord for i16 {
    type Bytes = [u8; 2];
    #[inline(always)]
    fn f(self) -> f64 {
        f64::from(self)
    }
    fn le_bytes(self) -> [u8; 2] {
        self.to_le_bytes()
    }
    fn block_len(dim: usize, leaf: usize) -> usize {
        dim.div_ceil(2) * 2 * leaf
    }
    #[inline(always)]
    fn at(d: usize, j: usize, leaf: usize) -> usize {
        (d / 2) * 2 * leaf + 2 * j + d % 2
    }
}

impl Coord for f32 {
    type Bytes = [u8; 4];
    #[inline(always)]
    fn f(self) -> f64 {
        f64::from(self)
    }
    fn le_bytes(self) -> [u8; 4] {
        self.to_le_bytes()
    }
    fn block_len(dim: usize, leaf: usize) -> usize {
        dim * leaf
    }
    #[inline(always)]
    fn at(d: usize, j: usize, leaf: usize) -> usize {
        d * leaf + j
    }
}

/// Squared `f64` distances from `q` to the first `out.len()` rows of
/// `block`, a block of `leaf` rows.
pub(crate) fn leaf_f64<C: Coord>(block: &[C], q: &[f64], leaf: usize, out: &mut [f64]) {
    out.fill(0.0);
    for (d, &qd) in q.iter().enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            let t = qd - block[C::at(d, j, leaf)].f();
            *o += t * t;
        }
    }
}

/// [`leaf_f64`] over a packed block (format version 2 on a grid): only
/// the dimensions the leaf's box (`corners`) does not fix are stored, in
/// order; a fixed one's value is the box's. The same additions in the
/// same order as [`leaf_f64`] over the whole row, so the same `f64`.
pub(crate) fn leaf_f64_packed<C: Coord>(
    block: &[C],
    corners: &[C],
    q: &[f64],
    leaf: usize,
    out: &mut [f64],
) {
    let b = box_dim(q.len());
    out.fill(0.0);
    let mut s = 0;
    for (d, &qd) in q.iter().enumerate() {
        let (l, h) = (corners[d].f(), corners[b + d].f());
        if l == h {
            let t = qd - l;
            for o in out.iter_mut() {
                *o += t * t;
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                let t = qd - block[C::at(s, j, leaf)].f();
                *o += t * t;
            }
            s += 1;
        }
    }
}

/// Rows of a leaf marked by a scan: bit `j % 64` of word `j / 64` for row
/// `j` (up to [`MAX_LEAF`](super::MAX_LEAF) rows).
pub(crate) type Mask = [u64; super::MAX_LEAF / 64];

/// The mask of the rows for which `marks` yields true.
pub(crate) fn mask_of(marks: impl Iterator<Item = bool>) -> Mask {
    let mut m = [0u64; super::MAX_LEAF / 64];
    for (j, on) in marks.enumerate() {
        m[j / 64] |= u64::from(on) << (j % 64);
    }
    m
}

/// Clears every bit of `m` from row `rows` on.
pub(crate) fn keep_first(m: &mut Mask, rows: usize) {
    for (w, word) in m.iter_mut().enumerate() {
        let from = w * 64;
        if rows <= from {
            *word = 0;
        } else if rows - from < 64 {
            *word &= (1u64 << (rows - from)) - 1;
        }
    }
}

/// Sets the 16 bits of chunk `c` (rows 16·c to 16·c + 15) to `bits`.
#[inline(always)]
fn set_chunk(m: &mut Mask, c: usize, bits: u16) {
    m[c / 4] |= u64::from(bits) << (16 * (c % 4));
}

/// Lower bound, in `f64`, of the squared distance from `q` to the box whose
/// corners start at `corners` (low corner, then high, `box_dim` apart).
pub(crate) fn box_f64<C: Coord>(corners: &[C], q: &[f64]) -> f64 {
    let b = box_dim(q.len());
    let mut s = 0.0;
    for (d, &qd) in q.iter().enumerate() {
        let (l, h) = (corners[d].f(), corners[b + d].f());
        let t = if qd < l {
            l - qd
        } else if qd > h {
            qd - h
        } else {
            0.0
        };
        s += t * t;
    }
    s
}

/// A query prepared for the `u32` arithmetic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntQuery {
    /// Codes padded to the box width with zeros.
    pub codes: [i32; 32],
    /// Dimension pairs as `vpmaddwd` reads them (low half: even dim).
    pub pairs: [i32; 16],
    /// The codes as `i16`, padded with zeros.
    pub codes16: [i16; 32],
    pub npairs: usize,
    pub bdim: usize,
}

impl IntQuery {
    /// `None` unless every difference between `codes` and a point of the
    /// box `lo..=hi` (the whole data) fits `i16` and the largest possible
    /// squared distance fits `u32`: then the integer arithmetic is exact.
    pub fn new(codes: &[i16], lo: &[i16], hi: &[i16]) -> Option<IntQuery> {
        let mut worst: u64 = 0;
        for ((&q, &l), &h) in codes.iter().zip(lo).zip(hi) {
            let m = (i64::from(q) - i64::from(l))
                .abs()
                .max((i64::from(q) - i64::from(h)).abs()) as u64;
            if m > i16::MAX as u64 {
                return None;
            }
            worst += m * m;
        }
        if worst > u64::from(u32::MAX) {
            return None;
        }
        let mut q = IntQuery {
            codes: [0; 32],
            pairs: [0; 16],
            codes16: [0; 32],
            npairs: codes.len().div_ceil(2),
            bdim: box_dim(codes.len()),
        };
        for (o, &c) in q.codes.iter_mut().zip(codes) {
            *o = i32::from(c);
        }
        q.codes16[..codes.len()].copy_from_slice(codes);
        for p in 0..q.npairs {
            let lo = q.codes[2 * p] as u16 as u32;
            let hi = q.codes[2 * p + 1] as u16 as u32;
            q.pairs[p] = (lo | (hi << 16)) as i32;
        }
        Some(q)
    }
}

/// Squared distances in `u32` (exact under [`IntQuery::new`]'s check) of
/// the first `out.len()` rows of `block`, a block of `leaf` rows, over its
/// first `pairs.len()` dimension pairs (`pairs`: the query's codes there,
/// as [`IntQuery::pairs`]); marks the rows at most `worst` away.
#[inline(always)]
pub(crate) fn leaf_u32_scalar(
    block: &[i16],
    pairs: &[i32],
    leaf: usize,
    out: &mut [u32],
    worst: u32,
) -> Mask {
    out.fill(0);
    for (p, &qp) in pairs.iter().enumerate() {
        let pair = &block[p * 2 * leaf..p * 2 * leaf + 2 * out.len()];
        let (qa, qb) = (i32::from(qp as i16), i32::from((qp >> 16) as i16));
        for (j, o) in out.iter_mut().enumerate() {
            let a = i32::from(pair[2 * j]) - qa;
            let b = i32::from(pair[2 * j + 1]) - qb;
            *o = o
                .wrapping_add(a.wrapping_mul(a) as u32)
                .wrapping_add(b.wrapping_mul(b) as u32);
        }
    }
    mask_of(out.iter().map(|&d| d <= worst))
}

/// Box bound in `u32` (exact under [`IntQuery::new`]'s check).
#[inline(always)]
pub(crate) fn box_u32_scalar(corners: &[i16], q: &IntQuery) -> u32 {
    let mut s = 0u32;
    for d in 0..q.bdim {
        let (l, h, c) = (
            i32::from(corners[d]),
            i32::from(corners[q.bdim + d]),
            q.codes[d],
        );
        let t = (l - c).max(c - h).max(0) as u32;
        s = s.wrapping_add(t.wrapping_mul(t));
    }
    s
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    //! The `u32` kernels with AVX-512BW.
    use super::{set_chunk, IntQuery, Mask};
    use crate::MAX_LEAF;
    use std::arch::x86_64::*;

    /// Squared distances of the first `out.len()` rows (a multiple of 16:
    /// one register of 16 rows per dimension pair and chunk) of `block`, a
    /// block of `leaf` rows, over its first `pairs.len()` dimension pairs;
    /// marks those at most `worst` away.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512BW; `block` holds `pairs.len()`
    /// pairs of 2·`leaf` codes; `out.len()` ≤ `leaf`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn leaf(
        block: &[i16],
        pairs: &[i32],
        leaf: usize,
        out: &mut [u32],
        worst: u32,
    ) -> Mask {
        debug_assert!(out.len().is_multiple_of(16) && out.len() <= leaf);
        debug_assert!(block.len() >= pairs.len() * 2 * leaf);
        let base = block.as_ptr();
        let w = _mm512_set1_epi32(worst as i32);
        let mut mask = [0u64; MAX_LEAF / 64];
        for c in 0..out.len() / 16 {
            let mut acc = _mm512_setzero_si512();
            for (p, &qp) in pairs.iter().enumerate() {
                let qv = _mm512_set1_epi32(qp);
                // SAFETY: pair p spans 2·leaf codes inside `block`; chunk c
                // is its 32 codes from 32·c.
                let x = unsafe { _mm512_loadu_si512(base.add(p * 2 * leaf + 32 * c).cast()) };
                let d = _mm512_sub_epi16(x, qv);
                acc = _mm512_add_epi32(acc, _mm512_madd_epi16(d, d));
            }
            // SAFETY: chunk c is 16 of `out`'s u32 from 16·c.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(16 * c).cast(), acc) };
            set_chunk(&mut mask, c, _mm512_cmple_epu32_mask(acc, w));
        }
        mask
    }

    /// The box bound.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512BW; `corners` holds 2·`q.bdim` codes.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn bound(corners: &[i16], q: &IntQuery) -> u32 {
        debug_assert!(corners.len() >= 2 * q.bdim);
        let zero = _mm512_setzero_si512();
        let mut acc = zero;
        let mut d = 0;
        while d < q.bdim {
            // SAFETY: 16 codes from d and from bdim + d lie inside
            // `corners`; 16 i32 from d lie inside `q.codes` (32 long).
            let (lo, hi, c) = unsafe {
                (
                    _mm512_cvtepi16_epi32(_mm256_loadu_si256(corners.as_ptr().add(d).cast())),
                    _mm512_cvtepi16_epi32(_mm256_loadu_si256(
                        corners.as_ptr().add(q.bdim + d).cast(),
                    )),
                    _mm512_loadu_si512(q.codes.as_ptr().add(d).cast()),
                )
            };
            let t = _mm512_max_epi32(
                _mm512_max_epi32(_mm512_sub_epi32(lo, c), _mm512_sub_epi32(c, hi)),
                zero,
            );
            acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(t, t));
            d += 16;
        }
        _mm512_reduce_add_epi32(acc) as u32
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! The `u32` kernels with AVX2: the same arithmetic as the scalar
    //! ones, 8 rows per `vpmaddwd`.
    use super::{set_chunk, IntQuery, Mask};
    use crate::MAX_LEAF;
    use std::arch::x86_64::*;

    /// Squared distances of the first `out.len()` rows (a multiple of 16)
    /// of `block`, a block of `leaf` rows, over its first `pairs.len()`
    /// dimension pairs, 8 rows per register; marks those at most `worst`
    /// away.
    ///
    /// # Safety
    /// The CPU has AVX2; `block` holds `pairs.len()` pairs of 2·`leaf`
    /// codes; `out.len()` ≤ `leaf`.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn leaf(
        block: &[i16],
        pairs: &[i32],
        leaf: usize,
        out: &mut [u32],
        worst: u32,
    ) -> Mask {
        debug_assert!(out.len().is_multiple_of(16) && out.len() <= leaf);
        debug_assert!(block.len() >= pairs.len() * 2 * leaf);
        let base = block.as_ptr();
        let w = _mm256_set1_epi32(worst as i32);
        let mut mask = [0u64; MAX_LEAF / 64];
        for c in 0..out.len() / 16 {
            let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for (p, &qp) in pairs.iter().enumerate() {
                let qv = _mm256_set1_epi32(qp);
                // SAFETY: pair p spans 2·leaf codes inside `block`; chunk c
                // is its 32 codes from 32·c (16 rows, two registers).
                let (x0, x1) = unsafe {
                    let at = base.add(p * 2 * leaf + 32 * c);
                    (
                        _mm256_loadu_si256(at.cast()),
                        _mm256_loadu_si256(at.add(16).cast()),
                    )
                };
                let (d0, d1) = (_mm256_sub_epi16(x0, qv), _mm256_sub_epi16(x1, qv));
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(d0, d0));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(d1, d1));
            }
            // SAFETY: chunk c is 16 of `out`'s u32 from 16·c.
            unsafe {
                let o = out.as_mut_ptr().add(16 * c);
                _mm256_storeu_si256(o.cast(), a0);
                _mm256_storeu_si256(o.add(8).cast(), a1);
            }
            set_chunk(&mut mask, c, within(a0, w) | (within(a1, w) << 8));
        }
        mask
    }

    /// The lanes of `d` at most `w` (unsigned: max(d, w) = w), one bit
    /// each.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn within(d: __m256i, w: __m256i) -> u16 {
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
            _mm256_max_epu32(d, w),
            w,
        ))) as u16
    }

    /// The bounds of two boxes stored one after the other (two siblings),
    /// 16 dimensions a corner, in `i16` lanes: every difference fits `i16`
    /// and a pair of squares fits `i32` ([`IntQuery::new`]'s check), so
    /// this is the scalar bound's exact integer.
    ///
    /// # Safety
    /// The CPU has AVX2; `corners` holds 64 codes (two boxes of two
    /// corners); `q.bdim` is 16.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn bound2(corners: &[i16], q: &IntQuery) -> (u32, u32) {
        debug_assert!(corners.len() >= 64 && q.bdim == 16);
        let zero = _mm256_setzero_si256();
        let c = corners.as_ptr();
        // SAFETY: `codes16` holds 32 codes; `corners` 64.
        let (qv, lo0, hi0, lo1, hi1) = unsafe {
            (
                _mm256_loadu_si256(q.codes16.as_ptr().cast()),
                _mm256_loadu_si256(c.cast()),
                _mm256_loadu_si256(c.add(16).cast()),
                _mm256_loadu_si256(c.add(32).cast()),
                _mm256_loadu_si256(c.add(48).cast()),
            )
        };
        let t0 = _mm256_max_epi16(
            _mm256_max_epi16(_mm256_subs_epi16(lo0, qv), _mm256_subs_epi16(qv, hi0)),
            zero,
        );
        let t1 = _mm256_max_epi16(
            _mm256_max_epi16(_mm256_subs_epi16(lo1, qv), _mm256_subs_epi16(qv, hi1)),
            zero,
        );
        // Eight pair sums per box; add them up as u32 (wrapping is exact:
        // the total fits u32).
        let s = _mm256_hadd_epi32(_mm256_madd_epi16(t0, t0), _mm256_madd_epi16(t1, t1));
        // s: [a01 a23 b01 b23 | a45 a67 b45 b67] (per 128-bit lane).
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_hadd_epi32(s, s);
        (
            _mm_cvtsi128_si32(s) as u32,
            _mm_extract_epi32::<1>(s) as u32,
        )
    }

    /// The box bound, 8 dimensions per step in `i32`.
    ///
    /// # Safety
    /// The CPU has AVX2; `corners` holds 2·`q.bdim` codes.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn bound(corners: &[i16], q: &IntQuery) -> u32 {
        debug_assert!(corners.len() >= 2 * q.bdim);
        let zero = _mm256_setzero_si256();
        let mut acc = zero;
        let mut d = 0;
        while d < q.bdim {
            // SAFETY: 8 codes from d and from bdim + d lie inside
            // `corners`; 8 i32 from d lie inside `q.codes` (32 long).
            let (lo, hi, c) = unsafe {
                (
                    _mm256_cvtepi16_epi32(_mm_loadu_si128(corners.as_ptr().add(d).cast())),
                    _mm256_cvtepi16_epi32(_mm_loadu_si128(corners.as_ptr().add(q.bdim + d).cast())),
                    _mm256_loadu_si256(q.codes.as_ptr().add(d).cast()),
                )
            };
            let t = _mm256_max_epi32(
                _mm256_max_epi32(_mm256_sub_epi32(lo, c), _mm256_sub_epi32(c, hi)),
                zero,
            );
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(t, t));
            d += 8;
        }
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256::<1>(acc),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s) as u32
    }
}

/// The SIMD kernels a search runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simd {
    /// AVX-512 F + BW: the kernels in `avx512`.
    Avx512,
    /// AVX2: the kernels in `avx2`.
    Avx2,
    Scalar,
}

/// The `u32` kernels for the instruction set `sagitta-kernels` chose for
/// this process (once, capped by `SAGITTA_ISA`): the engine has one CPU
/// detection. Its AVX-512 choice implies AVX-512 F and BW, its AVX2
/// choice AVX2, as the kernels here require.
pub(crate) fn simd() -> Simd {
    match sagitta_kernels::isa() {
        Isa::Avx512 => Simd::Avx512,
        Isa::Avx2 => Simd::Avx2,
        Isa::Neon | Isa::Scalar => Simd::Scalar,
    }
}

#[cfg(test)]
mod tests {
    //! Every SIMD kernel this CPU can run (whatever `SAGITTA_ISA` chose)
    //! gives the scalar kernels' integers (the search tests then reach only
    //! the chosen one).
    use super::*;
    use crate::MAX_LEAF;

    /// SplitMix64.
    fn next(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A code in [-m, m] (the extremes half the time).
    fn code(s: &mut u64, m: i16) -> i16 {
        match next(s) % 4 {
            0 => -m,
            1 => m,
            _ => (next(s) % (2 * m as u64 + 1)) as i16 - m,
        }
    }

    #[test]
    fn keep_first_clears_the_rows_past_the_count() {
        for rows in [0usize, 1, 16, 63, 64, 65, 130, 255, 256] {
            let mut m = [u64::MAX; MAX_LEAF / 64];
            keep_first(&mut m, rows);
            let want = mask_of((0..MAX_LEAF).map(|j| j < rows));
            assert_eq!(m, want, "rows {rows}");
        }
    }

    #[test]
    fn simd_kernels_match_scalar() {
        let mut s = 7u64;
        for dim in [1usize, 2, 5, 14, 16, 17, 32] {
            let bdim = box_dim(dim);
            // The widest range [-m, m] the u32 arithmetic takes: every
            // difference fits i16 and the worst distance fits u32.
            let m = ((f64::from(u32::MAX) / dim as f64).sqrt() / 2.0).min(16_383.0) as i16;
            let lo = vec![-m; dim];
            let hi = vec![m; dim];
            for leaf in [16usize, 64, 256] {
                for _ in 0..20 {
                    let qc: Vec<i16> = (0..dim).map(|_| code(&mut s, m)).collect();
                    let q = IntQuery::new(&qc, &lo, &hi).expect("fits u32");
                    let mut block = vec![0i16; i16::block_len(dim, leaf)];
                    for j in 0..leaf {
                        for d in 0..dim {
                            block[i16::at(d, j, leaf)] = code(&mut s, m);
                        }
                    }
                    // Two adjacent boxes, each corner padded with zeros.
                    let mut boxes = vec![0i16; 4 * bdim];
                    for b in 0..2 {
                        for d in 0..dim {
                            let (x, y) = (code(&mut s, m), code(&mut s, m));
                            boxes[2 * b * bdim + d] = x.min(y);
                            boxes[2 * b * bdim + bdim + d] = x.max(y);
                        }
                    }
                    let want_box: Vec<u32> = (0..2)
                        .map(|b| box_u32_scalar(&boxes[2 * b * bdim..], &q))
                        .collect();
                    for rows in [16, (leaf / 2).next_multiple_of(16), leaf] {
                        let mut want = vec![0u32; rows];
                        // A threshold some rows pass (a row's own distance:
                        // equal passes), none, or all.
                        let worst = match next(&mut s) % 4 {
                            0 => 0,
                            1 => u32::MAX,
                            _ => {
                                let mut d = vec![0u32; rows];
                                leaf_u32_scalar(&block, &q.pairs[..q.npairs], leaf, &mut d, 0);
                                d[(next(&mut s) % rows as u64) as usize]
                            }
                        };
                        let want_mask =
                            leaf_u32_scalar(&block, &q.pairs[..q.npairs], leaf, &mut want, worst);
                        let marked = mask_of(want.iter().map(|&d| d <= worst));
                        assert_eq!(want_mask, marked, "scalar mask, dim {dim}");
                        for (j, &w) in want.iter().enumerate() {
                            let exact: i64 = (0..dim)
                                .map(|d| {
                                    let t =
                                        i64::from(block[i16::at(d, j, leaf)]) - i64::from(qc[d]);
                                    t * t
                                })
                                .sum();
                            assert_eq!(i64::from(w), exact, "scalar, dim {dim}, row {j}");
                        }
                        #[cfg(target_arch = "x86_64")]
                        {
                            let mut got = vec![0u32; rows];
                            if Isa::Avx2.is_available() {
                                // SAFETY: AVX2 is present.
                                let m = unsafe {
                                    avx2::leaf(&block, &q.pairs[..q.npairs], leaf, &mut got, worst)
                                };
                                assert_eq!(got, want, "avx2 leaf, dim {dim}, leaf {leaf}");
                                assert_eq!(m, want_mask, "avx2 mask, dim {dim}, leaf {leaf}");
                                let b: Vec<u32> = (0..2)
                                    .map(|b| {
                                        // SAFETY: as above; a box from 2·b·bdim.
                                        unsafe { avx2::bound(&boxes[2 * b * bdim..], &q) }
                                    })
                                    .collect();
                                assert_eq!(b, want_box, "avx2 bound, dim {dim}");
                                if bdim == 16 {
                                    // SAFETY: as above; two boxes of 16-code corners.
                                    let (x, y) = unsafe { avx2::bound2(&boxes, &q) };
                                    assert_eq!([x, y], want_box[..], "avx2 bound2, dim {dim}");
                                }
                            }
                            if Isa::Avx512.is_available() {
                                got.fill(0);
                                // SAFETY: AVX-512F/BW are present.
                                let m = unsafe {
                                    avx512::leaf(
                                        &block,
                                        &q.pairs[..q.npairs],
                                        leaf,
                                        &mut got,
                                        worst,
                                    )
                                };
                                assert_eq!(got, want, "avx512 leaf, dim {dim}, leaf {leaf}");
                                assert_eq!(m, want_mask, "avx512 mask, dim {dim}, leaf {leaf}");
                                let b: Vec<u32> = (0..2)
                                    .map(|b| {
                                        // SAFETY: as above; a box from 2·b·bdim.
                                        unsafe { avx512::bound(&boxes[2 * b * bdim..], &q) }
                                    })
                                    .collect();
                                assert_eq!(b, want_box, "avx512 bound, dim {dim}");
                            }
                        }
                    }
                }
            }
        }
    }
}
