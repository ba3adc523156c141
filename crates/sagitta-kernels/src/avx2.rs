//! AVX2 + FMA + F16C + POPCNT kernels (x86_64).
//!
//! Every `pub(crate)` safe wrapper here may only be called once the CPU has
//! been checked for `avx2`, `fma`, `f16c` and `popcnt`; [`crate::Kernels`]
//! only hands them out after that check (see `Kernels::for_isa`).

#![cfg(target_arch = "x86_64")]

use core::arch::x86_64::*;
use half::f16;

#[inline(always)]
unsafe fn hsum256(v: __m256) -> f32 {
    // SAFETY: caller runs with AVX enabled; these are register-only ops.
    unsafe {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
unsafe fn hsum256_epi32(v: __m256i) -> i64 {
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` is 32 bytes, an unaligned store is allowed.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v) };
    lanes.iter().map(|&x| i64::from(x)).sum()
}

macro_rules! f32_kernel {
    ($name:ident, $wrap:ident, |$va:ident, $vb:ident, $acc:ident| $body:expr, |$x:ident, $y:ident, $s:ident| $tail:expr) => {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (pa, pb) = (a.as_ptr(), b.as_ptr());
            let mut i = 0;
            // SAFETY: every load reads 8 floats at offset i with i + 8 <= n,
            // inside both slices.
            unsafe {
                let mut acc0 = _mm256_setzero_ps();
                let mut acc1 = _mm256_setzero_ps();
                while i + 16 <= n {
                    let ($va, $vb, $acc) =
                        (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
                    acc0 = $body;
                    let ($va, $vb, $acc) = (
                        _mm256_loadu_ps(pa.add(i + 8)),
                        _mm256_loadu_ps(pb.add(i + 8)),
                        acc1,
                    );
                    acc1 = $body;
                    i += 16;
                }
                if i + 8 <= n {
                    let ($va, $vb, $acc) =
                        (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
                    acc0 = $body;
                    i += 8;
                }
                let mut $s = hsum256(_mm256_add_ps(acc0, acc1));
                while i < n {
                    let ($x, $y) = (*a.get_unchecked(i), *b.get_unchecked(i));
                    $tail;
                    i += 1;
                }
                $s
            }
        }
        pub(crate) fn $wrap(a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: only reachable through a `Kernels` table built after
            // runtime detection of avx2+fma.
            unsafe { $name(a, b) }
        }
    };
}

f32_kernel!(
    l2sq_f32_impl,
    l2sq_f32,
    |va, vb, acc| {
        let d = _mm256_sub_ps(va, vb);
        _mm256_fmadd_ps(d, d, acc)
    },
    |x, y, s| {
        let d = x - y;
        s += d * d
    }
);

f32_kernel!(
    dot_f32_impl,
    dot_f32,
    |va, vb, acc| _mm256_fmadd_ps(va, vb, acc),
    |x, y, s| s += x * y
);

#[target_feature(enable = "avx2,fma")]
unsafe fn dot_norms_f32_impl(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads are in bounds (i + 8 <= n).
    unsafe {
        let (mut ab, mut aa, mut bb) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        // Two sets of accumulators: six independent FMA chains, so the
        // loop is bound by FMA throughput rather than latency (cosine
        // stores rows as given and computes both norms in this pass).
        let (mut ab1, mut aa1, mut bb1) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        while i + 16 <= n {
            let va = _mm256_loadu_ps(pa.add(i));
            let vb = _mm256_loadu_ps(pb.add(i));
            let wa = _mm256_loadu_ps(pa.add(i + 8));
            let wb = _mm256_loadu_ps(pb.add(i + 8));
            ab = _mm256_fmadd_ps(va, vb, ab);
            aa = _mm256_fmadd_ps(va, va, aa);
            bb = _mm256_fmadd_ps(vb, vb, bb);
            ab1 = _mm256_fmadd_ps(wa, wb, ab1);
            aa1 = _mm256_fmadd_ps(wa, wa, aa1);
            bb1 = _mm256_fmadd_ps(wb, wb, bb1);
            i += 16;
        }
        if i + 8 <= n {
            let va = _mm256_loadu_ps(pa.add(i));
            let vb = _mm256_loadu_ps(pb.add(i));
            ab = _mm256_fmadd_ps(va, vb, ab);
            aa = _mm256_fmadd_ps(va, va, aa);
            bb = _mm256_fmadd_ps(vb, vb, bb);
            i += 8;
        }
        let (mut sab, mut saa, mut sbb) = (
            hsum256(_mm256_add_ps(ab, ab1)),
            hsum256(_mm256_add_ps(aa, aa1)),
            hsum256(_mm256_add_ps(bb, bb1)),
        );
        while i < n {
            let (x, y) = (*a.get_unchecked(i), *b.get_unchecked(i));
            sab += x * y;
            saa += x * x;
            sbb += y * y;
            i += 1;
        }
        (sab, saa, sbb)
    }
}

pub(crate) fn cos_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    let (ab, aa, bb) = unsafe { dot_norms_f32_impl(a, b) };
    crate::cos_from_parts(ab, aa, bb)
}

/// (a·b, b·b) with two chains each: as many FMA chains per load as
/// `dot_f32`'s two, so a unit-length query costs about a dot product.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_bnorm_f32_impl(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads are in bounds (i + 8 <= n, i + 16 <= n).
    unsafe {
        let (mut ab0, mut ab1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (mut bb0, mut bb1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        while i + 16 <= n {
            let va = _mm256_loadu_ps(pa.add(i));
            let vb = _mm256_loadu_ps(pb.add(i));
            let wa = _mm256_loadu_ps(pa.add(i + 8));
            let wb = _mm256_loadu_ps(pb.add(i + 8));
            ab0 = _mm256_fmadd_ps(va, vb, ab0);
            bb0 = _mm256_fmadd_ps(vb, vb, bb0);
            ab1 = _mm256_fmadd_ps(wa, wb, ab1);
            bb1 = _mm256_fmadd_ps(wb, wb, bb1);
            i += 16;
        }
        if i + 8 <= n {
            let va = _mm256_loadu_ps(pa.add(i));
            let vb = _mm256_loadu_ps(pb.add(i));
            ab0 = _mm256_fmadd_ps(va, vb, ab0);
            bb0 = _mm256_fmadd_ps(vb, vb, bb0);
            i += 8;
        }
        // Both sums in one reduction: [ab ab bb bb | ab ab bb bb] pairs,
        // the halves added, then one more pairwise add.
        let h = _mm256_hadd_ps(_mm256_add_ps(ab0, ab1), _mm256_add_ps(bb0, bb1));
        let h = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        let h = _mm_hadd_ps(h, h);
        let mut sab = _mm_cvtss_f32(h);
        let mut sbb = _mm_cvtss_f32(_mm_shuffle_ps(h, h, 1));
        while i < n {
            let (x, y) = (*a.get_unchecked(i), *b.get_unchecked(i));
            sab += x * y;
            sbb += y * y;
            i += 1;
        }
        (sab, sbb)
    }
}

pub(crate) fn cos_unit_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    let (ab, bb) = unsafe { dot_bnorm_f32_impl(a, b) };
    crate::cos_unit_from_parts(ab, bb)
}

/// Loads 8 halves and widens them (F16C).
#[inline(always)]
unsafe fn load_f16x8(p: *const f16) -> __m256 {
    // SAFETY: caller guarantees 16 readable bytes at p and F16C.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_parts(a: &[f16], b: &[f16], want_norms: bool) -> (f32, f32, f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads are in bounds (i + 8 <= n).
    unsafe {
        let (mut l2, mut ab, mut aa, mut bb) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        while i + 8 <= n {
            let va = load_f16x8(pa.add(i));
            let vb = load_f16x8(pb.add(i));
            if want_norms {
                ab = _mm256_fmadd_ps(va, vb, ab);
                aa = _mm256_fmadd_ps(va, va, aa);
                bb = _mm256_fmadd_ps(vb, vb, bb);
            } else {
                let d = _mm256_sub_ps(va, vb);
                l2 = _mm256_fmadd_ps(d, d, l2);
                ab = _mm256_fmadd_ps(va, vb, ab);
            }
            i += 8;
        }
        let (mut s2, mut sab, mut saa, mut sbb) =
            (hsum256(l2), hsum256(ab), hsum256(aa), hsum256(bb));
        while i < n {
            let (x, y) = (a.get_unchecked(i).to_f32(), b.get_unchecked(i).to_f32());
            s2 += (x - y) * (x - y);
            sab += x * y;
            saa += x * x;
            sbb += y * y;
            i += 1;
        }
        (s2, sab, saa, sbb)
    }
}

pub(crate) fn l2sq_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { f16_parts(a, b, false).0 }
}

pub(crate) fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { f16_parts(a, b, false).1 }
}

pub(crate) fn cos_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    let (_, ab, aa, bb) = unsafe { f16_parts(a, b, true) };
    crate::cos_from_parts(ab, aa, bb)
}

/// Returns (|a-b|², a·b, a·a, b·b) in exact integer arithmetic.
#[target_feature(enable = "avx2")]
unsafe fn i8_parts(a: &[i8], b: &[i8]) -> (i64, i64, i64, i64) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads read 16 bytes with i + 16 <= n.
    unsafe {
        let (mut l2, mut ab, mut aa, mut bb) = (
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
            _mm256_setzero_si256(),
        );
        while i + 16 <= n {
            let va = _mm256_cvtepi8_epi16(_mm_loadu_si128(pa.add(i).cast()));
            let vb = _mm256_cvtepi8_epi16(_mm_loadu_si128(pb.add(i).cast()));
            let d = _mm256_sub_epi16(va, vb);
            l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(d, d));
            ab = _mm256_add_epi32(ab, _mm256_madd_epi16(va, vb));
            aa = _mm256_add_epi32(aa, _mm256_madd_epi16(va, va));
            bb = _mm256_add_epi32(bb, _mm256_madd_epi16(vb, vb));
            i += 16;
        }
        let (mut s2, mut sab, mut saa, mut sbb) = (
            hsum256_epi32(l2),
            hsum256_epi32(ab),
            hsum256_epi32(aa),
            hsum256_epi32(bb),
        );
        while i < n {
            let (x, y) = (
                i64::from(*a.get_unchecked(i)),
                i64::from(*b.get_unchecked(i)),
            );
            s2 += (x - y) * (x - y);
            sab += x * y;
            saa += x * x;
            sbb += y * y;
            i += 1;
        }
        (s2, sab, saa, sbb)
    }
}

pub(crate) fn l2sq_i8(a: &[i8], b: &[i8]) -> f32 {
    // SAFETY: see module docs.
    unsafe { i8_parts(a, b).0 as f32 }
}

pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> f32 {
    // SAFETY: see module docs.
    unsafe { i8_parts(a, b).1 as f32 }
}

pub(crate) fn cos_i8(a: &[i8], b: &[i8]) -> f32 {
    // SAFETY: see module docs.
    let (_, ab, aa, bb) = unsafe { i8_parts(a, b) };
    crate::cos_from_parts(ab as f32, aa as f32, bb as f32)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot_i16_impl(a: &[i16], b: &[i16]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: each load reads 16 i16 at offset i with i + 16 <= n, inside
    // both slices; the tail is scalar.
    unsafe {
        // Pairwise products summed into i32 (at most 2 × 32767² without
        // overflow for codes in ±32767), converted to f32 per step.
        let mut acc = _mm256_setzero_ps();
        while i + 16 <= n {
            let x = _mm256_loadu_si256(pa.add(i).cast());
            let y = _mm256_loadu_si256(pb.add(i).cast());
            acc = _mm256_add_ps(acc, _mm256_cvtepi32_ps(_mm256_madd_epi16(x, y)));
            i += 16;
        }
        let mut tail: i64 = 0;
        while i < n {
            tail += i64::from(*pa.add(i)) * i64::from(*pb.add(i));
            i += 1;
        }
        hsum256(acc) + tail as f32
    }
}

pub(crate) fn dot_i16(a: &[i16], b: &[i16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { dot_i16_impl(a, b) }
}

#[target_feature(enable = "popcnt")]
unsafe fn hamming_impl(a: &[u8], b: &[u8]) -> u32 {
    // Same algorithm as the scalar reference, compiled with the hardware
    // POPCNT instruction instead of the bit-twiddling fallback.
    crate::scalar::hamming(a, b)
}

pub(crate) fn hamming(a: &[u8], b: &[u8]) -> u32 {
    // SAFETY: see module docs.
    unsafe { hamming_impl(a, b) }
}

#[target_feature(enable = "popcnt")]
unsafe fn hamming_rows_impl(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // The scalar loop compiled with POPCNT: four instructions per 32-byte
    // code, no call and no horizontal reduction per row.
    crate::scalar::hamming_rows(q, rows, stride, out)
}

pub(crate) fn hamming_rows(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: see module docs.
    unsafe { hamming_rows_impl(q, rows, stride, out) }
}

#[target_feature(enable = "popcnt")]
unsafe fn hamming_each_impl(q: &[u8], rows: &[&[u8]], out: &mut [f32]) {
    // The scalar loop compiled with POPCNT, as `hamming_rows`.
    crate::scalar::hamming_each(q, rows, out)
}

pub(crate) fn hamming_each(q: &[u8], rows: &[&[u8]], out: &mut [f32]) {
    // SAFETY: see module docs.
    unsafe { hamming_each_impl(q, rows, out) }
}

#[target_feature(enable = "popcnt")]
unsafe fn nphd_rows_impl(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // The scalar loop compiled with POPCNT, as `hamming_rows`.
    crate::scalar::nphd_rows(q, rows, stride, out)
}

pub(crate) fn nphd_rows(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: see module docs.
    unsafe { nphd_rows_impl(q, rows, stride, out) }
}
