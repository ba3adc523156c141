//! What the unit tests of the dense products share: seeded values and the
//! double-precision reference product.

/// `len` values in [-1, 1) from a xorshift seeded by `seed`.
pub(crate) fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// `a · w + bias` in `f64`, rounded once: `a` is `m × k`, `w` `k × n`.
pub(crate) fn naive(w: &[f32], k: usize, n: usize, a: &[f32], m: usize, bias: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for r in 0..m {
        for c in 0..n {
            let mut s = bias[c] as f64;
            for i in 0..k {
                s += a[r * k + i] as f64 * w[i * n + c] as f64;
            }
            out[r * n + c] = s as f32;
        }
    }
    out
}
