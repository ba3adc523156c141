//! AVX-512 kernels (x86_64): F + BW for floats, halves and bytes, and
//! VPOPCNTDQ for Hamming when the CPU has it (BW table lookups for rows
//! of codes when it does not).
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
    // SAFETY: as in `l2sq_f32_impl`. Four accumulators: a graph search
    // evaluates one short vector at a time, so the FMA latency chain, not
    // throughput, bounds a single-accumulator loop.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 4];
        while i + 64 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = i + 16 * j;
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(o)), _mm512_loadu_ps(pb.add(o)), *a);
            }
            i += 64;
        }
        let mut j = 0;
        while i < n {
            let m = tail_mask16(n - i);
            acc[j] = _mm512_fmadd_ps(
                _mm512_maskz_loadu_ps(m, pa.add(i)),
                _mm512_maskz_loadu_ps(m, pb.add(i)),
                acc[j],
            );
            j = (j + 1) & 3;
            i += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(acc[0], acc[1]),
            _mm512_add_ps(acc[2], acc[3]),
        ))
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
        // Two sets of accumulators: six independent FMA chains (cosine
        // stores rows as given and computes both norms in this pass).
        let (mut ab1, mut aa1, mut bb1) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        while i + 32 <= n {
            let va = _mm512_loadu_ps(pa.add(i));
            let vb = _mm512_loadu_ps(pb.add(i));
            let wa = _mm512_loadu_ps(pa.add(i + 16));
            let wb = _mm512_loadu_ps(pb.add(i + 16));
            ab = _mm512_fmadd_ps(va, vb, ab);
            aa = _mm512_fmadd_ps(va, va, aa);
            bb = _mm512_fmadd_ps(vb, vb, bb);
            ab1 = _mm512_fmadd_ps(wa, wb, ab1);
            aa1 = _mm512_fmadd_ps(wa, wa, aa1);
            bb1 = _mm512_fmadd_ps(wb, wb, bb1);
            i += 32;
        }
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
            _mm512_reduce_add_ps(_mm512_add_ps(ab, ab1)),
            _mm512_reduce_add_ps(_mm512_add_ps(aa, aa1)),
            _mm512_reduce_add_ps(_mm512_add_ps(bb, bb1)),
        )
    }
}

pub(crate) fn cos_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    let (ab, aa, bb) = unsafe { dot_norms_f32_impl(a, b) };
    crate::cos_from_parts(ab, aa, bb)
}

/// (a·b, b·b), four chains each as `dot_f32`: a unit-length query costs
/// about a dot product.
#[target_feature(enable = "avx512f")]
unsafe fn dot_bnorm_f32_impl(a: &[f32], b: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: as in `dot_f32_impl`: full loads stay below n, the tail is
    // masked.
    unsafe {
        let mut ab = [_mm512_setzero_ps(); 4];
        let mut bb = [_mm512_setzero_ps(); 4];
        while i + 64 <= n {
            for j in 0..4 {
                let o = i + 16 * j;
                let vb = _mm512_loadu_ps(pb.add(o));
                ab[j] = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(o)), vb, ab[j]);
                bb[j] = _mm512_fmadd_ps(vb, vb, bb[j]);
            }
            i += 64;
        }
        let mut j = 0;
        while i < n {
            let m = tail_mask16(n - i);
            let vb = _mm512_maskz_loadu_ps(m, pb.add(i));
            ab[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, pa.add(i)), vb, ab[j]);
            bb[j] = _mm512_fmadd_ps(vb, vb, bb[j]);
            j = (j + 1) & 3;
            i += 16;
        }
        let sum = |v: [__m512; 4]| {
            _mm512_reduce_add_ps(_mm512_add_ps(
                _mm512_add_ps(v[0], v[1]),
                _mm512_add_ps(v[2], v[3]),
            ))
        };
        (sum(ab), sum(bb))
    }
}

pub(crate) fn cos_unit_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: see module docs.
    let (ab, bb) = unsafe { dot_bnorm_f32_impl(a, b) };
    crate::cos_unit_from_parts(ab, bb)
}

/// Returns (a·b, a·a, b·b) over halves (for cosine).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn f16_dot_norms(a: &[f16], b: &[f16]) -> (f32, f32, f32) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked 16-bit loads touch only the valid `n - i` halves.
    unsafe {
        let (mut ab, mut aa, mut bb) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        while i < n {
            let m = tail_mask16(n - i);
            let va = load_ph(m, pa.add(i));
            let vb = load_ph(m, pb.add(i));
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

/// Loads 16 halves (masked) as 16 floats.
#[inline(always)]
unsafe fn load_ph(m: __mmask16, p: *const f16) -> __m512 {
    // SAFETY: the caller's mask covers only valid elements.
    unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.cast())) }
}

/// Dot product (`dot = true`) or squared L2 over halves, four
/// accumulators (see `dot_f32_impl`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn f16_sum(a: &[f16], b: &[f16], dot: bool) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked 16-bit loads touch only the valid `n - i` halves.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut j = 0;
        while i < n {
            let m = tail_mask16(n - i);
            let va = load_ph(m, pa.add(i));
            let vb = load_ph(m, pb.add(i));
            acc[j] = if dot {
                _mm512_fmadd_ps(va, vb, acc[j])
            } else {
                let d = _mm512_sub_ps(va, vb);
                _mm512_fmadd_ps(d, d, acc[j])
            };
            j = (j + 1) & 3;
            i += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(acc[0], acc[1]),
            _mm512_add_ps(acc[2], acc[3]),
        ))
    }
}

pub(crate) fn l2sq_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { f16_sum(a, b, false) }
}

pub(crate) fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    unsafe { f16_sum(a, b, true) }
}

pub(crate) fn cos_f16(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: see module docs.
    let (ab, aa, bb) = unsafe { f16_dot_norms(a, b) };
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

/// Exact dot product over bytes: widened to 16 bits, `vpmaddwd`, two
/// accumulators.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dot_i8_impl(a: &[i8], b: &[i8]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked byte loads touch only the valid `n - i` bytes.
    unsafe {
        let mut acc = [_mm512_setzero_si512(); 2];
        let mut j = 0;
        while i < n {
            let m = tail_mask64(n - i) as u32;
            let va = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, pa.add(i)));
            let vb = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, pb.add(i)));
            acc[j] = _mm512_add_epi32(acc[j], _mm512_madd_epi16(va, vb));
            j ^= 1;
            i += 32;
        }
        // At most 2 * 127² per lane per step: i32 holds 65k steps, more
        // than any supported dimension needs.
        _mm512_reduce_add_epi32(_mm512_add_epi32(acc[0], acc[1])) as f32
    }
}

pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> f32 {
    // SAFETY: see module docs.
    unsafe { dot_i8_impl(a, b) }
}

/// Exact dot product over signed bytes with AVX-512 VNNI. `vpdpbusd`
/// multiplies unsigned by signed bytes, so `a` is offset to `a + 128`
/// (an xor of the sign bit) and the excess `128 × Σb` (itself a
/// `vpdpbusd` against ones) is subtracted: two instructions per 64
/// components where the widening path needs six.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_i8_vnni_impl(a: &[i8], b: &[i8]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: masked byte loads touch only the valid `n - i` bytes (masked
    // lanes load as 0 in both, and contribute (0 ^ 0x80) × 0 = 0).
    unsafe {
        let sign = _mm512_set1_epi8(i8::MIN);
        let ones = _mm512_set1_epi8(1);
        let (mut ab, mut sb) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        while i < n {
            let m = tail_mask64(n - i);
            let va = _mm512_maskz_loadu_epi8(m, pa.add(i));
            let vb = _mm512_maskz_loadu_epi8(m, pb.add(i));
            ab = _mm512_dpbusd_epi32(ab, _mm512_xor_si512(va, sign), vb);
            sb = _mm512_dpbusd_epi32(sb, ones, vb);
            i += 64;
        }
        // |(a+128)·b| ≤ 4 × 255 × 128 per lane per step: i32 holds over
        // 16k steps (a million components).
        let ab = i64::from(_mm512_reduce_add_epi32(ab));
        let sb = i64::from(_mm512_reduce_add_epi32(sb));
        (ab - 128 * sb) as f32
    }
}

pub(crate) fn dot_i8_vnni(a: &[i8], b: &[i8]) -> f32 {
    // SAFETY: see module docs; only handed out when avx512vnni is present.
    unsafe { dot_i8_vnni_impl(a, b) }
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

/// Bytes of the code width [`hamming_rows`] has a vector path for (256-bit
/// codes, as ISCC's): two codes per register, eight per step.
const ROWS32: usize = 32;

#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq,popcnt")]
unsafe fn hamming_rows_impl(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    if stride != ROWS32 || q.len() < ROWS32 {
        return crate::scalar::hamming_rows(q, rows, stride, out);
    }
    let n = out.len().min(rows.len() / ROWS32);
    let mut i = 0;
    // SAFETY: each step reads rows i..i + 8, 256 bytes inside `rows`
    // (i + 8 <= n), and writes out[i..i + 8] (n <= out.len()); the query
    // load reads its first 32 bytes (checked above).
    unsafe {
        let q2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(q.as_ptr().cast()));
        // Lanes of the summed pairs below hold rows 0, 2, 1, 3, 4, 6, 5, 7.
        let order = _mm512_set_epi64(7, 5, 6, 4, 3, 1, 2, 0);
        while i + 8 <= n {
            let p = rows.as_ptr().add(i * ROWS32);
            let count = |at: usize| {
                _mm512_popcnt_epi64(_mm512_xor_si512(_mm512_loadu_si512(p.add(at).cast()), q2))
            };
            // Each register: one row in lanes 0..4, the next in 4..8.
            let (a, b, c, d) = (count(0), count(64), count(128), count(192));
            // Adjacent lanes summed: 128-bit blocks (a01 b01) (a23 b23) ...
            let ab = _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
            let cd = _mm512_add_epi64(_mm512_unpacklo_epi64(c, d), _mm512_unpackhi_epi64(c, d));
            // Blocks 0 + 1 and 2 + 3 of each: whole rows.
            let sums = _mm512_add_epi64(
                _mm512_shuffle_i64x2::<0x88>(ab, cd),
                _mm512_shuffle_i64x2::<0xDD>(ab, cd),
            );
            let rows8 = _mm512_cvtepi64_epi32(_mm512_permutexvar_epi64(order, sums));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtepi32_ps(rows8));
            i += 8;
        }
    }
    crate::scalar::hamming_rows(q, &rows[i * ROWS32..], stride, &mut out[i..n]);
}

pub(crate) fn hamming_rows(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: see module docs; only handed out when vpopcntdq is present.
    unsafe { hamming_rows_impl(q, rows, stride, out) }
}

/// The nibble-lookup Hamming count for codes of `W` words (64- to
/// 512-bit), for CPUs with AVX-512 BW but no VPOPCNTDQ: each byte's bits
/// are counted by two 16-entry table lookups (VPSHUFB on its nibbles) and
/// summed per 8 bytes (VPSADBW); a step takes four registers (`32 / W`
/// rows), packs their sums into 16-bit fields and adds them across each
/// row's words. On an AVX-512 Xeon without VPOPCNTDQ this is 2x the POPCNT
/// loop for 256-bit codes (1.8-2.2 against 3.6-4.4 ns per code, one
/// thread, rows in L2).
struct Nibble<const W: usize> {
    query: __m512i,
    table: __m512i,
    low: __m512i,
    order: __m512i,
}

impl<const W: usize> Nibble<W> {
    /// Rows per step.
    const ROWS: usize = 32 / W;

    /// The constants for query `q`.
    ///
    /// # Safety
    /// AVX-512 F and BW must be present, and `q` must hold `8 W` bytes.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn new(q: *const u8) -> Self {
        // SAFETY: the caller's: `q` holds the 8 W bytes read here.
        unsafe {
            let query = match W {
                1 => _mm512_set1_epi64(q.cast::<i64>().read_unaligned()),
                2 => _mm512_broadcast_i32x4(_mm_loadu_si128(q.cast())),
                4 => _mm512_broadcast_i64x4(_mm256_loadu_si256(q.cast())),
                _ => _mm512_loadu_si512(q.cast()),
            };
            // Register j's rows, after the sums in `step`: every word of a
            // row holds the row's count in field j of the word. Row
            // r = j (8 / W) + m sits in word m W: 16-bit lane 4 m W + j.
            let mut lanes = [0i16; 32];
            for (r, l) in lanes.iter_mut().enumerate().take(Self::ROWS) {
                let (j, m) = (r / (8 / W), r % (8 / W));
                *l = (4 * m * W + j) as i16;
            }
            Nibble {
                query,
                table: _mm512_broadcast_i32x4(_mm_setr_epi8(
                    0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                )),
                low: _mm512_set1_epi8(0x0f),
                order: _mm512_loadu_si512(lanes.as_ptr().cast()),
            }
        }
    }

    /// Distances of the [`Self::ROWS`] rows in `regs` (each register
    /// `8 / W` whole rows) as f32, written to `out`.
    ///
    /// # Safety
    /// AVX-512 F and BW must be present, and `out` must hold
    /// [`Self::ROWS`] floats.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn step(&self, regs: [__m512i; 4], out: *mut f32) {
        let count = |r: __m512i| {
            let x = _mm512_xor_si512(r, self.query);
            let lo = _mm512_shuffle_epi8(self.table, _mm512_and_si512(x, self.low));
            let hi = _mm512_shuffle_epi8(
                self.table,
                _mm512_and_si512(_mm512_srli_epi16(x, 4), self.low),
            );
            _mm512_sad_epu8(_mm512_add_epi8(lo, hi), _mm512_setzero_si512())
        };
        // Each word's count is at most 64: four fit a word's 16-bit
        // fields, and a row's sum (at most 512) does too.
        let mut u = _mm512_or_si512(
            _mm512_or_si512(count(regs[0]), _mm512_slli_epi64(count(regs[1]), 16)),
            _mm512_or_si512(
                _mm512_slli_epi64(count(regs[2]), 32),
                _mm512_slli_epi64(count(regs[3]), 48),
            ),
        );
        let mut d = 1;
        while d < W {
            let swap = _mm512_set_epi64(
                (7 ^ d) as i64,
                (6 ^ d) as i64,
                (5 ^ d) as i64,
                (4 ^ d) as i64,
                (3 ^ d) as i64,
                (2 ^ d) as i64,
                (1 ^ d) as i64,
                d as i64,
            );
            u = _mm512_add_epi16(u, _mm512_permutexvar_epi64(swap, u));
            d *= 2;
        }
        let r = _mm512_permutexvar_epi16(self.order, u);
        let f = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(r)));
        // SAFETY: the caller's: `out` holds ROWS floats; the mask covers
        // the first min(ROWS, 16), the second store the rest (W = 1).
        unsafe {
            let first = ((1u32 << Self::ROWS.min(16)) - 1) as __mmask16;
            _mm512_mask_storeu_ps(out, first, f);
            if Self::ROWS > 16 {
                let g =
                    _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64::<1>(r)));
                _mm512_storeu_ps(out.add(16), g);
            }
        }
    }
}

/// [`Nibble`] over rows of `W` words stored back to back: returns the rows
/// done (a multiple of `32 / W`); the caller scores the rest.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn hamming_rows_nibble<const W: usize>(q: &[u8], rows: &[u8], out: &mut [f32]) -> usize {
    let per_step = Nibble::<W>::ROWS;
    let n = out.len().min(rows.len() / (8 * W));
    let mut i = 0;
    // SAFETY: the query holds 8 W bytes (the caller checks); each step
    // reads rows i..i + 32 / W, 256 bytes inside `rows` (i + 32 / W <= n),
    // and writes out[i..i + 32 / W].
    unsafe {
        let nb = Nibble::<W>::new(q.as_ptr());
        while i + per_step <= n {
            let p = rows.as_ptr().add(i * 8 * W);
            let regs = std::array::from_fn(|j| _mm512_loadu_si512(p.add(64 * j).cast()));
            nb.step(regs, out.as_mut_ptr().add(i));
            i += per_step;
        }
    }
    i
}

/// [`hamming_rows`] for CPUs with AVX-512 BW but no VPOPCNTDQ: the table
/// lookups of [`Nibble`] for codes of 8, 16, 32 or 64 bytes
/// stored back to back, the POPCNT loop for other widths and the tail.
pub(crate) fn hamming_rows_bw(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: see module docs (AVX-512 F and BW are present); the query
    // holds the code's bytes (checked here).
    let done = unsafe {
        match stride {
            8 if q.len() >= 8 => hamming_rows_nibble::<1>(q, rows, out),
            16 if q.len() >= 16 => hamming_rows_nibble::<2>(q, rows, out),
            32 if q.len() >= 32 => hamming_rows_nibble::<4>(q, rows, out),
            64 if q.len() >= 64 => hamming_rows_nibble::<8>(q, rows, out),
            _ => 0,
        }
    };
    if done < out.len() && stride > 0 {
        let rest = rows.get(done * stride..).unwrap_or(&[]);
        crate::avx2::hamming_rows(q, rest, stride, &mut out[done..]);
    }
}
