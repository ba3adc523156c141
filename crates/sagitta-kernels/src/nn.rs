//! The passes between a small transformer's dense products: the exact
//! (erf) GELU, LayerNorm after a residual sum, and multi-head
//! self-attention itself (small per-head products and the masked softmax),
//! over rows of `f32`. Plain Rust loops, compiled twice: for the baseline, and with AVX2
//! enabled where the active kernels use it ([`crate::isa`]), so the loops
//! run eight lanes wide instead of four. Both give the same bits: nothing is
//! contracted into fused multiply-adds or reassociated (the sums of a row
//! stay one sequential chain).

use crate::Isa;

/// `x = GELU(x)` elementwise, with the exact (erf) GELU.
pub fn gelu(x: &mut [f32]) {
    gelu_isa(crate::isa(), x);
}

/// [`gelu`] compiled for `isa` (the baseline where the CPU lacks it).
pub fn gelu_isa(isa: Isa, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if wide(isa) {
        // SAFETY: `wide` checked that the CPU has AVX2.
        unsafe { gelu_avx2(x) };
        return;
    }
    let _ = isa;
    gelu_body(x);
}

/// `x = LayerNorm(x + y)` row by row (rows of `weight.len()` values),
/// with the LayerNorm's `weight`, `bias` and `eps`.
pub fn add_layer_norm(x: &mut [f32], y: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    add_layer_norm_isa(crate::isa(), x, y, weight, bias, eps);
}

/// [`add_layer_norm`] compiled for `isa` (the baseline where the CPU lacks
/// it).
pub fn add_layer_norm_isa(
    isa: Isa,
    x: &mut [f32],
    y: &[f32],
    weight: &[f32],
    bias: &[f32],
    eps: f32,
) {
    #[cfg(target_arch = "x86_64")]
    if wide(isa) {
        // SAFETY: `wide` checked that the CPU has AVX2.
        unsafe { add_layer_norm_avx2(x, y, weight, bias, eps) };
        return;
    }
    let _ = isa;
    add_layer_norm_body(x, y, weight, bias, eps);
}

/// Multi-head self-attention from a QKV product `qkv` (`b·l × 3h`: for
/// each of `b` texts padded to `l` tokens, every token's queries | keys |
/// values, biases added, queries pre-scaled by `1/sqrt(h / heads)`): for
/// each text (of `lens[t]` real tokens) and each of `heads` heads, the
/// softmax over the text's real keys of the query · key products, times the
/// values, into `out` (`b·l × h`; rows of padding are zero).
pub fn attention(qkv: &[f32], lens: &[usize], l: usize, heads: usize, out: &mut [f32]) {
    attention_isa(crate::isa(), qkv, lens, l, heads, out);
}

/// [`attention`] compiled for `isa` (the baseline where the CPU lacks it).
pub fn attention_isa(
    isa: Isa,
    qkv: &[f32],
    lens: &[usize],
    l: usize,
    heads: usize,
    out: &mut [f32],
) {
    let h = out.len() / (lens.len() * l).max(1);
    assert_eq!(out.len(), lens.len() * l * h, "out is not b·l × h");
    assert_eq!(qkv.len(), 3 * out.len(), "qkv is not b·l × 3h");
    assert!(
        heads > 0 && h.is_multiple_of(heads),
        "{h} not a multiple of {heads} heads"
    );
    assert!(lens.iter().all(|&n| n <= l), "a text longer than {l}");
    #[cfg(target_arch = "x86_64")]
    if wide(isa) {
        // SAFETY: `wide` checked that the CPU has AVX2.
        unsafe { attention_avx2(qkv, lens, l, heads, out) };
        return;
    }
    let _ = isa;
    attention_body(qkv, lens, l, heads, out);
}

/// In-place LayerNorm of one row.
pub fn layer_norm(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    layer_norm_row(row, weight, bias, eps);
}

#[cfg(target_arch = "x86_64")]
fn wide(isa: Isa) -> bool {
    matches!(isa, Isa::Avx2 | Isa::Avx512) && Isa::Avx2.is_available()
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gelu_avx2(x: &mut [f32]) {
    gelu_body(x);
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_layer_norm_avx2(x: &mut [f32], y: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    add_layer_norm_body(x, y, weight, bias, eps);
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn attention_avx2(qkv: &[f32], lens: &[usize], l: usize, heads: usize, out: &mut [f32]) {
    attention_body(qkv, lens, l, heads, out);
}

#[inline(always)]
fn attention_body(qkv: &[f32], lens: &[usize], l: usize, heads: usize, out: &mut [f32]) {
    let h = out.len() / (lens.len() * l).max(1);
    let hd = h / heads;
    out.fill(0.0);
    let mut weights = vec![0f32; l];
    for ((qkv, dst), &len) in qkv
        .chunks_exact(l * 3 * h)
        .zip(out.chunks_exact_mut(l * h))
        .zip(lens)
    {
        for hh in 0..heads {
            let head = |t: usize, part: usize| &qkv[t * 3 * h + part * h + hh * hd..][..hd];
            for i in 0..len {
                let q = head(i, 0);
                let mut max = f32::NEG_INFINITY;
                for (j, w) in weights[..len].iter_mut().enumerate() {
                    *w = dot(q, head(j, 1));
                    max = max.max(*w);
                }
                let mut sum = 0.0;
                for w in &mut weights[..len] {
                    *w = (*w - max).exp();
                    sum += *w;
                }
                let inv = 1.0 / sum;
                let ctx = &mut dst[i * h + hh * hd..][..hd];
                for (j, &w) in weights[..len].iter().enumerate() {
                    let w = w * inv;
                    for (c, &v) in ctx.iter_mut().zip(head(j, 2)) {
                        *c += w * v;
                    }
                }
            }
        }
    }
}

/// Dot product with eight running sums (the same order at any width).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn gelu_body(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

#[inline(always)]
fn add_layer_norm_body(x: &mut [f32], y: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    let h = weight.len();
    for (row, y) in x.chunks_exact_mut(h).zip(y.chunks_exact(h)) {
        for (d, &y) in row.iter_mut().zip(y) {
            *d += y;
        }
        layer_norm_row(row, weight, bias, eps);
    }
}

#[inline(always)]
fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = lane_sum(row, |v| v) / n;
    let var = lane_sum(row, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

/// The sum of `f` over `row` in eight running sums (so it vectorises; a
/// single chain of adds waits on each one's latency), reduced in a fixed
/// order, the tail added last: the same bits at any width.
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let (body, tail) = row.split_at(row.len() / 8 * 8);
    for c in body.chunks_exact(8) {
        for k in 0..8 {
            acc[k] += f(c[k]);
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for &v in tail {
        sum += f(v);
    }
    sum
}

/// The error function in f32 without branches (so loops over it
/// vectorise): the rational approximation Eigen and TensorFlow use, within
/// a few units in the last place of f32 over the whole line.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.954_6e-3;
    p = x2 * p + -1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329e-3;
    q = x2 * q + -1.426_474e-2;
    x * p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
        crate::testdata::values(len, seed)
            .iter()
            .map(|v| v * scale)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn erf_is_within_1e6_of_the_exact_one() {
        // erf(x) = 1 - erfc(x): against the series / asymptotic values at
        // points where erf is known to 1e-9.
        for (x, want) in [
            (0.0f32, 0.0f64),
            (0.1, 0.112_462_916),
            (0.5, 0.520_499_878),
            (1.0, 0.842_700_793),
            (1.5, 0.966_105_146),
            (2.0, 0.995_322_265),
            (3.0, 0.999_977_910),
            (5.0, 1.0),
        ] {
            assert!(
                (f64::from(erf(x)) - want).abs() < 1e-6,
                "erf({x}) = {}",
                erf(x)
            );
            assert!((f64::from(erf(-x)) + want).abs() < 1e-6, "erf(-{x})");
        }
    }

    #[test]
    fn gelu_is_the_same_on_every_isa() {
        let x = values(1537, 3, 6.0);
        let mut want = x.clone();
        gelu_isa(Isa::Scalar, &mut want);
        for (v, g) in x.iter().zip(&want) {
            let exact =
                0.5 * f64::from(*v) * (1.0 + f64::from(erf(v * std::f32::consts::FRAC_1_SQRT_2)));
            assert!((exact - f64::from(*g)).abs() < 1e-5);
        }
        for isa in [Isa::Avx2, Isa::Avx512] {
            let mut got = x.clone();
            gelu_isa(isa, &mut got);
            assert_eq!(bits(&got), bits(&want), "{}", isa.name());
        }
    }

    /// Against a direct double-precision evaluation (one text of three
    /// real tokens, one of five, padded to six), and the same bits on every
    /// ISA; padding rows stay zero.
    #[test]
    fn attention_matches_the_definition_on_every_isa() {
        let (l, heads, hd) = (6, 3, 8);
        let h = heads * hd;
        let lens = [3usize, 5];
        let qkv = values(lens.len() * l * 3 * h, 9, 2.0);
        let mut want = vec![0f32; lens.len() * l * h];
        attention_isa(Isa::Scalar, &qkv, &lens, l, heads, &mut want);
        for (t, &len) in lens.iter().enumerate() {
            let at = |tok: usize, part: usize, hh: usize, d: usize| {
                f64::from(qkv[(t * l + tok) * 3 * h + part * h + hh * hd + d])
            };
            for hh in 0..heads {
                for i in 0..l {
                    for d in 0..hd {
                        let got = f64::from(want[(t * l + i) * h + hh * hd + d]);
                        if i >= len {
                            assert_eq!(got, 0.0);
                            continue;
                        }
                        let s: Vec<f64> = (0..len)
                            .map(|j| (0..hd).map(|e| at(i, 0, hh, e) * at(j, 1, hh, e)).sum())
                            .collect();
                        let max = s.iter().cloned().fold(f64::MIN, f64::max);
                        let z: f64 = s.iter().map(|v| (v - max).exp()).sum();
                        let exact: f64 = (0..len)
                            .map(|j| (s[j] - max).exp() / z * at(j, 2, hh, d))
                            .sum();
                        assert!((exact - got).abs() < 1e-5, "{exact} vs {got}");
                    }
                }
            }
        }
        for isa in [Isa::Avx2, Isa::Avx512] {
            let mut got = vec![1f32; want.len()];
            attention_isa(isa, &qkv, &lens, l, heads, &mut got);
            assert_eq!(bits(&got), bits(&want), "{}", isa.name());
        }
    }

    #[test]
    fn add_layer_norm_is_the_same_on_every_isa_and_normalises() {
        let h = 384;
        let x = values(7 * h, 4, 3.0);
        let y = values(7 * h, 5, 1.0);
        let w = vec![1.0f32; h];
        let b = vec![0.0f32; h];
        let mut want = x.clone();
        add_layer_norm_isa(Isa::Scalar, &mut want, &y, &w, &b, 1e-12);
        for row in want.chunks_exact(h) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / h as f64;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / h as f64;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
        }
        for isa in [Isa::Avx2, Isa::Avx512] {
            let mut got = x.clone();
            add_layer_norm_isa(isa, &mut got, &y, &w, &b, 1e-12);
            assert_eq!(bits(&got), bits(&want), "{}", isa.name());
        }
    }
}
