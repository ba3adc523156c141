//! Fast-scan lookup-table sums for 1-bit RaBitQ codes (the shuffle-based
//! "4-bit PQ fast scan" of André et al., applied to bit codes).
//!
//! ## Block layout
//! Codes are scored 32 vectors at a time. A code of `d` bits is cut into
//! `d / 4` *groups* of 4 bits; the group's nibble selects one of 16 entries
//! of that group's lookup table. A block stores, for each group `g`, 16
//! bytes: byte `j` holds the nibble of vector `j` in its low half and the
//! nibble of vector `j + 16` in its high half. A block of 32 codes of `d`
//! bits is therefore `d / 4 × 16 = 4d` bytes, `d / 8` per vector: no
//! padding beyond the last partial block.
//!
//! The lookup table holds 16 `u8` entries per group, in group order. The
//! kernels add, for each of the 32 vectors, the table entries its nibbles
//! select, into `u16` sums: at most 257 groups per call keep the sum below
//! 65 536 (callers split longer codes, see [`MAX_GROUPS_PER_CALL`]).
//!
//! Every kernel takes `groups` as `lut.len() / 16`, which must be even and
//! at most [`MAX_GROUPS_PER_CALL`], with `codes.len() >= lut.len()`.

/// Most groups one kernel call may sum without overflowing `u16`
/// (256 × 255 = 65 280). A multiple of 4, as the wide kernels need.
pub const MAX_GROUPS_PER_CALL: usize = 256;

/// Nibble of vector `v` (0..32) in group `g` of a block.
#[inline]
pub fn block_nibble(block: &[u8], g: usize, v: usize) -> u8 {
    let b = block[g * 16 + (v & 15)];
    if v < 16 {
        b & 0x0F
    } else {
        b >> 4
    }
}

/// Sets the nibble of vector `v` (0..32) in group `g` of a block.
#[inline]
pub fn set_block_nibble(block: &mut [u8], g: usize, v: usize, nibble: u8) {
    let b = &mut block[g * 16 + (v & 15)];
    if v < 16 {
        *b = (*b & 0xF0) | (nibble & 0x0F);
    } else {
        *b = (*b & 0x0F) | (nibble << 4);
    }
}

/// The portable reference implementation.
pub fn fastscan_scalar(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
    let groups = lut.len() / 16;
    out.fill(0);
    for g in 0..groups {
        let t = &lut[g * 16..g * 16 + 16];
        let c = &codes[g * 16..g * 16 + 16];
        for j in 0..16 {
            out[j] = out[j].wrapping_add(u16::from(t[usize::from(c[j] & 0x0F)]));
            out[j + 16] = out[j + 16].wrapping_add(u16::from(t[usize::from(c[j] >> 4)]));
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use core::arch::x86_64::*;

    /// AVX2: two groups per step, one per 128-bit lane.
    #[target_feature(enable = "avx2")]
    unsafe fn fastscan_avx2_impl(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
        let groups = (lut.len() / 16) & !1;
        assert!(codes.len() >= groups * 16);
        // SAFETY: every load reads 32 bytes at g * 16 with g + 2 <= groups,
        // inside both slices (checked above); the store writes 32 u16 into
        // `out`, which holds exactly 32.
        unsafe {
            let mask = _mm256_set1_epi8(0x0F);
            let zero = _mm256_setzero_si256();
            let mut acc = [zero; 4];
            let mut g = 0;
            while g < groups {
                let c = _mm256_loadu_si256(codes.as_ptr().add(g * 16).cast());
                let t = _mm256_loadu_si256(lut.as_ptr().add(g * 16).cast());
                let lo = _mm256_and_si256(c, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), mask);
                let rlo = _mm256_shuffle_epi8(t, lo);
                let rhi = _mm256_shuffle_epi8(t, hi);
                acc[0] = _mm256_add_epi16(acc[0], _mm256_unpacklo_epi8(rlo, zero));
                acc[1] = _mm256_add_epi16(acc[1], _mm256_unpackhi_epi8(rlo, zero));
                acc[2] = _mm256_add_epi16(acc[2], _mm256_unpacklo_epi8(rhi, zero));
                acc[3] = _mm256_add_epi16(acc[3], _mm256_unpackhi_epi8(rhi, zero));
                g += 2;
            }
            // Each accumulator holds 8 vectors' partial sums in each lane
            // (one lane per group parity): add the lanes.
            for (i, a) in acc.iter().enumerate() {
                let s = _mm_add_epi16(_mm256_castsi256_si128(*a), _mm256_extracti128_si256(*a, 1));
                _mm_storeu_si128(out.as_mut_ptr().add(i * 8).cast(), s);
            }
        }
    }

    /// AVX-512BW: four groups per step, one per 128-bit lane.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn fastscan_avx512_impl(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
        let groups = lut.len() / 16;
        let wide = groups & !3;
        assert!(codes.len() >= groups * 16 && groups.is_multiple_of(2));
        // SAFETY: loads read 64 bytes at g * 16 with g + 4 <= wide <= groups;
        // the AVX2 tail reads 32 bytes with g + 2 <= groups; stores write
        // 8 u16 at i * 8 < 32.
        unsafe {
            let mask = _mm512_set1_epi8(0x0F);
            let zero = _mm512_setzero_si512();
            let mut acc = [zero; 4];
            let mut g = 0;
            while g < wide {
                let c = _mm512_loadu_si512(codes.as_ptr().add(g * 16).cast());
                let t = _mm512_loadu_si512(lut.as_ptr().add(g * 16).cast());
                let lo = _mm512_and_si512(c, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), mask);
                let rlo = _mm512_shuffle_epi8(t, lo);
                let rhi = _mm512_shuffle_epi8(t, hi);
                acc[0] = _mm512_add_epi16(acc[0], _mm512_unpacklo_epi8(rlo, zero));
                acc[1] = _mm512_add_epi16(acc[1], _mm512_unpackhi_epi8(rlo, zero));
                acc[2] = _mm512_add_epi16(acc[2], _mm512_unpacklo_epi8(rhi, zero));
                acc[3] = _mm512_add_epi16(acc[3], _mm512_unpackhi_epi8(rhi, zero));
                g += 4;
            }
            let mut tail = [0u16; 32];
            if wide < groups {
                fastscan_avx2_impl(&codes[wide * 16..], &lut[wide * 16..], &mut tail);
            }
            for (i, a) in acc.iter().enumerate() {
                let lo = _mm512_castsi512_si256(*a);
                let hi = _mm512_extracti64x4_epi64(*a, 1);
                let s = _mm256_add_epi16(lo, hi);
                let s = _mm_add_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                let t = _mm_loadu_si128(tail.as_ptr().add(i * 8).cast());
                _mm_storeu_si128(out.as_mut_ptr().add(i * 8).cast(), _mm_add_epi16(s, t));
            }
        }
    }

    pub(crate) fn fastscan_avx2(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
        // SAFETY: handed out by `Kernels::for_isa` only after AVX2 detection.
        unsafe { fastscan_avx2_impl(codes, lut, out) }
    }

    pub(crate) fn fastscan_avx512(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
        // SAFETY: handed out by `Kernels::for_isa` only after AVX-512F/BW
        // (and AVX2) detection.
        unsafe { fastscan_avx512_impl(codes, lut, out) }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod arm {
    use core::arch::aarch64::*;

    /// NEON: one group per step with a 16-entry table lookup (TBL).
    pub(crate) fn fastscan_neon(codes: &[u8], lut: &[u8], out: &mut [u16; 32]) {
        let groups = lut.len() / 16;
        assert!(codes.len() >= groups * 16);
        // SAFETY: NEON is baseline on aarch64; loads read 16 bytes at g * 16
        // with g < groups, inside both slices; stores write 8 u16 at i * 8
        // < 32 into `out`.
        unsafe {
            let mask = vdupq_n_u8(0x0F);
            let mut acc = [vdupq_n_u16(0); 4];
            for g in 0..groups {
                let c = vld1q_u8(codes.as_ptr().add(g * 16));
                let t = vld1q_u8(lut.as_ptr().add(g * 16));
                let rlo = vqtbl1q_u8(t, vandq_u8(c, mask));
                let rhi = vqtbl1q_u8(t, vshrq_n_u8(c, 4));
                acc[0] = vaddw_u8(acc[0], vget_low_u8(rlo));
                acc[1] = vaddw_u8(acc[1], vget_high_u8(rlo));
                acc[2] = vaddw_u8(acc[2], vget_low_u8(rhi));
                acc[3] = vaddw_u8(acc[3], vget_high_u8(rhi));
            }
            for (i, a) in acc.iter().enumerate() {
                vst1q_u16(out.as_mut_ptr().add(i * 8), *a);
            }
        }
    }
}
