//! Distances from a query to one leaf block and to a node's box.
//!
//! Two arithmetics:
//! * **`f64`** over either coordinate type (every query; exact on `i16`
//!   codes). The box bound and the row distance use the same operations in
//!   the same order, so a bound never exceeds a distance inside its box.
//! * **`u32` on `i16` codes** (a query on the grid whose every difference
//!   to the data fits `i16` and whose largest possible distance fits `u32`,
//!   checked per query): exact, and 16 rows per AVX-512 instruction with
//!   `vpmaddwd` over interleaved dimension pairs.

use super::{box_dim, LEAF};

/// A stored coordinate: an `i16` grid code or an `f32` value.
pub(crate) trait Coord: Copy + Default + Send + Sync + 'static {
    /// Little-endian bytes.
    type Bytes: AsRef<[u8]>;
    /// The value in the arithmetic of distances.
    fn f(self) -> f64;
    /// Little-endian bytes.
    fn le_bytes(self) -> Self::Bytes;
    /// Coordinates in one block of LEAF rows.
    fn block_len(dim: usize) -> usize;
    /// Where dimension `d` of row `j` sits in its block.
    fn at(d: usize, j: usize) -> usize;
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
    fn block_len(dim: usize) -> usize {
        dim.div_ceil(2) * 2 * LEAF
    }
    #[inline(always)]
    fn at(d: usize, j: usize) -> usize {
        (d / 2) * 2 * LEAF + 2 * j + d % 2
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
    fn block_len(dim: usize) -> usize {
        dim * LEAF
    }
    #[inline(always)]
    fn at(d: usize, j: usize) -> usize {
        d * LEAF + j
    }
}

/// Squared `f64` distances from `q` to the LEAF rows of `block`.
pub(crate) fn leaf_f64<C: Coord>(block: &[C], q: &[f64], out: &mut [f64; LEAF]) {
    *out = [0.0; LEAF];
    for (d, &qd) in q.iter().enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            let t = qd - block[C::at(d, j)].f();
            *o += t * t;
        }
    }
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
            npairs: codes.len().div_ceil(2),
            bdim: box_dim(codes.len()),
        };
        for (o, &c) in q.codes.iter_mut().zip(codes) {
            *o = i32::from(c);
        }
        for p in 0..q.npairs {
            let lo = q.codes[2 * p] as u16 as u32;
            let hi = q.codes[2 * p + 1] as u16 as u32;
            q.pairs[p] = (lo | (hi << 16)) as i32;
        }
        Some(q)
    }
}

/// Squared distances in `u32` (exact under [`IntQuery::new`]'s check).
#[inline(always)]
pub(crate) fn leaf_u32_scalar(block: &[i16], q: &IntQuery, out: &mut [u32; LEAF]) {
    *out = [0; LEAF];
    for p in 0..q.npairs {
        let pair = &block[p * 2 * LEAF..(p + 1) * 2 * LEAF];
        for (j, o) in out.iter_mut().enumerate() {
            let a = i32::from(pair[2 * j]) - q.codes[2 * p];
            let b = i32::from(pair[2 * j + 1]) - q.codes[2 * p + 1];
            *o = o
                .wrapping_add(a.wrapping_mul(a) as u32)
                .wrapping_add(b.wrapping_mul(b) as u32);
        }
    }
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
    use super::{IntQuery, LEAF};
    use std::arch::x86_64::*;

    /// Squared distances of the LEAF rows of `block` (LEAF a multiple of
    /// 16: one register of 16 rows per dimension pair and chunk).
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512BW; `block` holds `q.npairs` pairs
    /// of 2·LEAF codes.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn leaf(block: &[i16], q: &IntQuery, out: &mut [u32; LEAF]) {
        const CHUNKS: usize = LEAF / 16;
        debug_assert!(block.len() >= q.npairs * 2 * LEAF);
        let mut acc = [_mm512_setzero_si512(); CHUNKS];
        let base = block.as_ptr();
        for p in 0..q.npairs {
            let qv = _mm512_set1_epi32(q.pairs[p]);
            for (c, a) in acc.iter_mut().enumerate() {
                // SAFETY: pair p spans 2·LEAF codes inside `block`; chunk c
                // is its 32 codes from 32·c.
                let x = unsafe { _mm512_loadu_si512(base.add(p * 2 * LEAF + 32 * c).cast()) };
                let d = _mm512_sub_epi16(x, qv);
                *a = _mm512_add_epi32(*a, _mm512_madd_epi16(d, d));
            }
        }
        for (c, a) in acc.iter().enumerate() {
            // SAFETY: `out` holds LEAF u32: chunk c is 16 of them from 16·c.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().add(16 * c).cast(), *a) };
        }
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

/// Whether this CPU runs the AVX-512 `u32` kernels, checked once.
pub(crate) fn has_avx512() -> bool {
    static HAS: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    });
    *HAS
}
