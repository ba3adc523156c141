//! NEON kernels (aarch64). NEON is part of the aarch64 baseline, so these
//! need no runtime detection. Half-float kernels use the scalar reference
//! on aarch64 (stable Rust has no f16 conversion intrinsics yet).

#![cfg(target_arch = "aarch64")]

use core::arch::aarch64::*;

macro_rules! neon_f32 {
    ($name:ident, |$va:ident, $vb:ident, $acc:ident| $body:expr, |$x:ident, $y:ident, $s:ident| $tail:expr) => {
        pub(crate) fn $name(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (pa, pb) = (a.as_ptr(), b.as_ptr());
            let mut i = 0;
            // SAFETY: NEON is baseline on aarch64; loads read 4 floats with
            // i + 4 <= n.
            unsafe {
                let mut acc0 = vdupq_n_f32(0.0);
                let mut acc1 = vdupq_n_f32(0.0);
                while i + 8 <= n {
                    let ($va, $vb, $acc) = (vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)), acc0);
                    acc0 = $body;
                    let ($va, $vb, $acc) =
                        (vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)), acc1);
                    acc1 = $body;
                    i += 8;
                }
                let mut $s = vaddvq_f32(vaddq_f32(acc0, acc1));
                while i < n {
                    let ($x, $y) = (*a.get_unchecked(i), *b.get_unchecked(i));
                    $tail;
                    i += 1;
                }
                $s
            }
        }
    };
}

neon_f32!(
    l2sq_f32,
    |va, vb, acc| {
        let d = vsubq_f32(va, vb);
        vfmaq_f32(acc, d, d)
    },
    |x, y, s| {
        let d = x - y;
        s += d * d
    }
);

neon_f32!(dot_f32, |va, vb, acc| vfmaq_f32(acc, va, vb), |x, y, s| {
    s += x * y
});

pub(crate) fn cos_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads read 4 floats with i + 4 <= n.
    let (ab, aa, bb) = unsafe {
        let (mut ab, mut aa, mut bb) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        while i + 4 <= n {
            let va = vld1q_f32(pa.add(i));
            let vb = vld1q_f32(pb.add(i));
            ab = vfmaq_f32(ab, va, vb);
            aa = vfmaq_f32(aa, va, va);
            bb = vfmaq_f32(bb, vb, vb);
            i += 4;
        }
        let (mut sab, mut saa, mut sbb) = (vaddvq_f32(ab), vaddvq_f32(aa), vaddvq_f32(bb));
        while i < n {
            let (x, y) = (*a.get_unchecked(i), *b.get_unchecked(i));
            sab += x * y;
            saa += x * x;
            sbb += y * y;
            i += 1;
        }
        (sab, saa, sbb)
    };
    crate::cos_from_parts(ab, aa, bb)
}

fn i8_parts(a: &[i8], b: &[i8]) -> (i64, i64, i64, i64) {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: loads read 8 bytes with i + 8 <= n.
    unsafe {
        let (mut l2, mut ab, mut aa, mut bb) = (
            vdupq_n_s32(0),
            vdupq_n_s32(0),
            vdupq_n_s32(0),
            vdupq_n_s32(0),
        );
        while i + 8 <= n {
            let va = vld1_s8(pa.add(i));
            let vb = vld1_s8(pb.add(i));
            let d = vsubl_s8(va, vb);
            l2 = vpadalq_s16(l2, vmulq_s16(d, d));
            ab = vpadalq_s16(ab, vmull_s8(va, vb));
            aa = vpadalq_s16(aa, vmull_s8(va, va));
            bb = vpadalq_s16(bb, vmull_s8(vb, vb));
            i += 8;
        }
        let (mut s2, mut sab, mut saa, mut sbb) = (
            vaddlvq_s32(l2),
            vaddlvq_s32(ab),
            vaddlvq_s32(aa),
            vaddlvq_s32(bb),
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
    i8_parts(a, b).0 as f32
}

pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> f32 {
    i8_parts(a, b).1 as f32
}

pub(crate) fn cos_i8(a: &[i8], b: &[i8]) -> f32 {
    let (_, ab, aa, bb) = i8_parts(a, b);
    crate::cos_from_parts(ab as f32, aa as f32, bb as f32)
}

pub(crate) fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    let mut s = 0u32;
    // SAFETY: loads read 16 bytes with i + 16 <= n.
    unsafe {
        while i + 16 <= n {
            let x = veorq_u8(vld1q_u8(pa.add(i)), vld1q_u8(pb.add(i)));
            s += u32::from(vaddvq_u8(vcntq_u8(x)));
            i += 16;
        }
    }
    s + crate::scalar::hamming(&a[i..n], &b[i..n])
}
