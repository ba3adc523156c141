//! AVX-512 kernels (x86_64): F + BW for floats, halves and bytes, and
//! VPOPCNTDQ for Hamming when the CPU has it.
//!
//! The safe wrappers may only be called after runtime detection of
//! `avx512f` and `avx512bw` (plus `avx512vpopcntdq` for [`hamming`]);
//! [`crate::Kernels::for_isa`] checks before handing them out. Tails are
//! handled with masked loads, so there is no scalar remainder loop.

#![cfg(target_arch = "x86_64")]

use core::arch::x86_64::*;
use half::f16;

#[inline(always)]
fn tail_mask16(rem: usize) -> __mmask16 {
    if rem >= 16 {
        0xFFFF
    } else {
        ((1u32 << rem) - 1) as __mmask16
    }
}

#[inline(always)]
fn tail_mask64(rem: usize) -> __mmask64 {
    if rem >= 64 {
        u64::MAX
    } else {
        (1u64 << rem) - 1
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn l2sq_f32_impl(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: full loads read 16 floats with i + 16 <= n; the tail uses a
    // masked load that touches only the `n - i` valid elements.
    unsafe {
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        while i + 32 <= n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            let d1 = _mm512_sub_ps(
                _mm512_loadu_ps(pa.add(i + 16)),
                _mm512_loadu_ps(pb.add(i + 16)),
            );
            acc0 = _mm512_fmadd_ps(d0, d0, acc0);
            acc1 = _mm512_fmadd_ps(d1, d1, acc1);
            i += 32;
        }
        while i < n {
            let m = tail_mask16(n - i);
            let d = _mm512_sub_ps(
                _mm512_maskz_loadu_ps(m, pa.add(i)),
                _mm512_maskz_loadu_ps(m, pb.add(i)),
            );
            acc0 = _mm512_fmadd_ps(d, d, acc0);
            i += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }
}

pub(crate) fn l2sq_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    unsafe { l2sq_f32_impl(a, b) }
}

#[target_feature(enable = "avx512f")]
unsafe fn dot_f32_impl(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: as in `l2sq_f32_impl`.
    unsafe {
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        while i + 32 <= n {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm512_fmadd_ps(
                _mm512_loadu_ps(pa.add(i + 16)),
                _mm512_loadu_ps(pb.add(i + 16)),
                acc1,
            );
            i += 32;
        }
        while i < n {
            let m = tail_mask16(n - i);
            acc0 = _mm512_fmadd_ps(
                _mm512_maskz_loadu_ps(m, pa.add(i)),
                _mm512_maskz_loadu_ps(m, pb.add(i)),
                acc0,
            );
            i += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }
}

pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    unsafe { dot_f32_impl(a, b) }
}

#[target_feature(enable = "avx512f")]
unsafe fn dot_norms_f32_impl(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked loads touch only valid elements.
    unsafe {
        let (mut ab, mut aa, mut bb) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        while i < n {
            let m = tail_mask16(n - i);
            let va = _mm512_maskz_loadu_ps(m, pa.add(i));
            let vb = _mm512_maskz_loadu_ps(m, pb.add(i));
            ab = _mm512_fmadd_ps(va, vb, ab);
            aa = _mm512_fmadd_ps(va, va, aa);
            bb = _mm512_fmadd_ps(vb, vb, bb);
            i += 16;
        }
        (
            _mm512_reduce_add_ps(ab),
            _mm512_reduce_add_ps(aa),
            _mm512_reduce_add_ps(bb),
        )
    }
}

pub(crate) fn cos_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    let (ab, aa, bb) = unsafe { dot_norms_f32_impl(a, b) };
    crate::cos_from_parts(ab, aa, bb)
}

/// Returns (|a-b|², a·b, a·a, b·b); norms only when `norms`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn f16_parts(a: &[f16], b: &[f16], norms: bool) -> (f32, f32, f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked 16-bit loads touch only the valid `n - i` halves.
    unsafe {
        let (mut l2, mut ab, mut aa, mut bb) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        while i < n {
            let m = tail_mask16(n - i);
            let va = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, pa.add(i).cast()));
            let vb = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, pb.add(i).cast()));
            ab = _mm512_fmadd_ps(va, vb, ab);
            if norms {
                aa = _mm512_fmadd_ps(va, va, aa);
                bb = _mm512_fmadd_ps(vb, vb, bb);
            } else {
                let d = _mm512_sub_ps(va, vb);
                l2 = _mm512_fmadd_ps(d, d, l2);
            }
            i += 16;
        }
        (
            _mm512_reduce_add_ps(l2),
            _mm512_reduce_add_ps(ab),
            _mm512_reduce_add_ps(aa),
            _mm512_reduce_add_ps(bb),
        )
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
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn i8_parts(a: &[i8], b: &[i8]) -> (i64, i64, i64, i64) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked byte loads touch only the valid `n - i` bytes.
    unsafe {
        let (mut l2, mut ab, mut aa, mut bb) = (
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
            _mm512_setzero_si512(),
        );
        while i < n {
            let m = tail_mask64(n - i) as u32;
            let va = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, pa.add(i)));
            let vb = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, pb.add(i)));
            let d = _mm512_sub_epi16(va, vb);
            l2 = _mm512_add_epi32(l2, _mm512_madd_epi16(d, d));
            ab = _mm512_add_epi32(ab, _mm512_madd_epi16(va, vb));
            aa = _mm512_add_epi32(aa, _mm512_madd_epi16(va, va));
            bb = _mm512_add_epi32(bb, _mm512_madd_epi16(vb, vb));
            i += 32;
        }
        let wide = |v: __m512i| -> i64 {
            let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
            let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
            _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi))
        };
        (wide(l2), wide(ab), wide(aa), wide(bb))
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

#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dot_i16_impl(a: &[i16], b: &[i16]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: each load reads 32 i16 at offset i with i + 32 <= n, inside
    // both slices; the tail is scalar.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        while i + 32 <= n {
            let x = _mm512_loadu_si512(pa.add(i).cast());
            let y = _mm512_loadu_si512(pb.add(i).cast());
            acc = _mm512_add_ps(acc, _mm512_cvtepi32_ps(_mm512_madd_epi16(x, y)));
            i += 32;
        }
        let mut tail: i64 = 0;
        while i < n {
            tail += i64::from(*pa.add(i)) * i64::from(*pb.add(i));
            i += 1;
        }
        _mm512_reduce_add_ps(acc) + tail as f32
    }
}

pub(crate) fn dot_i16(a: &[i16], b: &[i16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { dot_i16_impl(a, b) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
unsafe fn hamming_impl(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked byte loads touch only the valid `n - i` bytes.
    unsafe {
        let mut acc = _mm512_setzero_si512();
        while i < n {
            let m = tail_mask64(n - i);
            let x = _mm512_xor_si512(
                _mm512_maskz_loadu_epi8(m, pa.add(i).cast()),
                _mm512_maskz_loadu_epi8(m, pb.add(i).cast()),
            );
            acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(x));
            i += 64;
        }
        _mm512_reduce_add_epi64(acc) as u32
    }
}

pub(crate) fn hamming(a: &[u8], b: &[u8]) -> u32 {
    // SAFETY: see module docs; only handed out when vpopcntdq is present.
    unsafe { hamming_impl(a, b) }
}
