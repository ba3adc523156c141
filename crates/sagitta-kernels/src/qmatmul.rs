//! Dense products in integers: `out = a · W + bias` with `W` held as 8-bit
//! integers (`±127`) with `f32` scales, one per output column or one per
//! column and group of [`GROUP`] inputs ([`IntWeights`]), and the
//! activations rounded, row by row at each call, to 16-bit integers
//! (`±32767`) with one scale per row. The products are summed in 32-bit
//! integers: AVX2's `vpmaddwd` does sixteen multiply-adds per instruction
//! where an `f32` FMA does eight (and this core issues two of either per
//! cycle), so a small transformer's linear layers, bound by the
//! multiply-adds once their weights sit in the caches, run in about two
//! thirds of the time of `f32` products with the same `i8` weights
//! (`examples/matmul_speed.rs`).
//!
//! No 32-bit sum can overflow: the inputs are summed in integers in chunks
//! of at most `(2³¹ − 1) / (2 · 32767 · 127)` = 258 input pairs (and never
//! across a scale group), each chunk's sum then multiplied by its weights'
//! scale and added in `f32`.
//!
//! The packing: panels of [`PANEL`] output columns; within a panel, for each
//! pair of inputs `(2t, 2t + 1)`, the 32 weights
//! `w[2t][c0] w[2t+1][c0] w[2t][c1] w[2t+1][c1] … w[2t+1][c15]`, the order
//! `vpmaddwd` multiplies a broadcast pair of activations with (an odd `k`
//! is padded with a zero input). The AVX2 kernel and the portable one do
//! the same integer sums and the same `f32` steps in the same order, so
//! their results are equal bit for bit; a row's result does not depend on
//! the rows it is batched with.
//!
//! Activations must be finite (a NaN or infinity has no integer).

pub use crate::panel::PANEL;
use crate::Isa;

/// How wide an [`IntMatrix`]'s integer weights are, and how many scales
/// they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntWeights {
    /// One scale per column.
    I8,
    /// One scale per column and group of [`GROUP`] inputs: a group of small
    /// weights is not rounded on the step of the column's largest one.
    I8Grouped,
}

/// Inputs per scale group of [`IntWeights::I8Grouped`].
pub const GROUP: usize = 64;

/// Largest weight magnitude.
const QW: i32 = 127;
/// Largest activation magnitude.
const QA: i32 = 32767;
/// Input pairs whose products sum within an `i32` (258).
const CHUNK_PAIRS: usize = (i32::MAX as i64 / (2 * QA as i64 * QW as i64)) as usize;

impl IntWeights {
    /// Input pairs per scale group of a matrix of `pairs` input pairs.
    fn group_pairs(self, pairs: usize) -> usize {
        match self {
            IntWeights::I8Grouped => GROUP / 2,
            IntWeights::I8 => pairs.max(1),
        }
    }
}

/// A `k × n` weight matrix packed for [`IntMatrix::matmul`].
#[derive(Clone)]
pub struct IntMatrix {
    k: usize,
    n: usize,
    weights: IntWeights,
    /// Panel by panel, pair by pair, 32 weights (see the module docs).
    q: Vec<i8>,
    /// Input pairs per scale group.
    group: usize,
    /// Scale groups (along the inputs).
    groups: usize,
    /// Panel by panel, group by group, one per column of the panel (1 for
    /// the zero columns that pad the last panel and for all-zero groups).
    scale: Vec<f32>,
}

impl std::fmt::Debug for IntMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntMatrix")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("weights", &self.weights)
            .finish()
    }
}

impl IntMatrix {
    /// Packs `w`, a `k × n` matrix in row-major order (row `i` holds the
    /// weights from input `i` to every output), as `weights`: each column
    /// (or column and group) scaled by its largest magnitude and rounded.
    /// Panics if `w.len() != k * n`.
    pub fn pack(w: &[f32], k: usize, n: usize, weights: IntWeights) -> IntMatrix {
        assert_eq!(w.len(), k * n, "weights are not {k} x {n}");
        let panels = n.div_ceil(PANEL);
        let pairs = k.div_ceil(2);
        let qw = QW as f32;
        let group = weights.group_pairs(pairs);
        let groups = pairs.div_ceil(group).max(1);
        let width = panels * PANEL;
        // The largest magnitude per group and column, the rows read in
        // order (a column-wise walk would stride through the matrix).
        let mut max = vec![0f32; groups * width];
        for (i, row) in w.chunks_exact(n.max(1)).enumerate().take(k) {
            let m = &mut max[i / (2 * group) * width..][..n];
            for (m, &v) in m.iter_mut().zip(row) {
                *m = m.max(v.abs());
            }
        }
        // Panel by panel, group by group, column by column.
        let mut scale = vec![1f32; panels * groups * PANEL];
        for (g, m) in max.chunks_exact(width).enumerate() {
            for (col, &m) in m.iter().enumerate() {
                if m > 0.0 {
                    scale[((col / PANEL) * groups + g) * PANEL + col % PANEL] = m / qw;
                }
            }
        }
        // Input i, column col goes to panel col / 16, pair i / 2, lane
        // (col % 16) * 2 + i % 2; padding stays zero.
        let mut q = vec![0i8; panels * pairs * 2 * PANEL];
        for (i, row) in w.chunks_exact(n.max(1)).enumerate().take(k) {
            let (t, half) = (i / 2, i % 2);
            let g = t / group;
            for (col, &v) in row.iter().enumerate() {
                let (p, j) = (col / PANEL, col % PANEL);
                let s = scale[(p * groups + g) * PANEL + j];
                q[((p * pairs + t) * PANEL + j) * 2 + half] = (v / s).round().clamp(-qw, qw) as i8;
            }
        }
        IntMatrix {
            k,
            n,
            weights,
            q,
            group,
            groups,
            scale,
        }
    }

    /// Inputs (rows of the unpacked matrix).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Outputs (columns of the unpacked matrix).
    pub fn n(&self) -> usize {
        self.n
    }

    /// How the weights are scaled.
    pub fn weights(&self) -> IntWeights {
        self.weights
    }

    /// Bytes the packed weights and their scales take.
    pub fn bytes(&self) -> usize {
        self.q.len() + self.scale.len() * 4
    }

    /// `out = a · W + bias` for `m` rows: `a` is `m × k` (finite values),
    /// `bias` has `n` values, `out` is `m × n`, all row major. Runs on the
    /// calling thread with the best kernel [`crate::isa`] allows. Panics if
    /// a length does not match.
    pub fn matmul(&self, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
        self.matmul_isa(crate::isa(), a, m, bias, out);
    }

    /// [`matmul`](Self::matmul) with the kernel of `isa` (the portable one
    /// where `isa` has none of its own or the CPU lacks it); every kernel
    /// gives the same bits.
    pub fn matmul_isa(&self, isa: Isa, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
        crate::panel::check_shapes(self.k, self.n, a, m, bias, out);
        ACTIVATIONS.with_borrow_mut(|(ints, scales)| {
            let q = Quantized::new(isa, a, m, self.k, ints, scales);
            #[cfg(target_arch = "x86_64")]
            if matches!(isa, Isa::Avx2 | Isa::Avx512) && x86::available() {
                x86::matmul(self, &q, bias, out);
            } else {
                portable(self, &q, bias, out);
            }
            #[cfg(not(target_arch = "x86_64"))]
            portable(self, &q, bias, out);
            if ints.capacity() > RETAINED_ACTIVATIONS {
                *ints = Vec::new();
            }
        });
    }

    /// Panel `p`'s scales (`groups × 16`), its bias (zero past column
    /// `n`) and its columns.
    fn panel_consts(&self, p: usize, bias: &[f32]) -> (&[f32], [f32; PANEL], usize) {
        let cols = (self.n - p * PANEL).min(PANEL);
        let s = &self.scale[p * self.groups * PANEL..(p + 1) * self.groups * PANEL];
        let mut b = [0f32; PANEL];
        b[..cols].copy_from_slice(&bias[p * PANEL..p * PANEL + cols]);
        (s, b, cols)
    }

    /// The end of the integer chunk that starts at pair `t0`: at most
    /// [`CHUNK_PAIRS`] long, inside one scale group.
    #[inline(always)]
    fn chunk_end(&self, t0: usize, pairs: usize) -> usize {
        let group_end = (t0 / self.group + 1) * self.group;
        (t0 + CHUNK_PAIRS).min(group_end).min(pairs)
    }
}

thread_local! {
    /// Each thread's buffers for the rounded activations of a call (rows
    /// of integers, row scales), kept between calls: a query's 24 products
    /// would otherwise allocate and clear 48 buffers.
    static ACTIVATIONS: std::cell::RefCell<(Vec<i16>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Integers a thread keeps for the next call (1 MiB); a larger batch's
/// buffer is freed after its call.
const RETAINED_ACTIVATIONS: usize = 1 << 19;

/// Activations rounded to integers: `m` rows of `kp` (`k` rounded up to
/// even, zero-padded) with one scale per row (`a ≈ q · scale`).
struct Quantized<'a> {
    q: &'a [i16],
    scale: &'a [f32],
    m: usize,
    kp: usize,
}

impl<'a> Quantized<'a> {
    /// Rounds `a` (`m × k`) with the kernel of `isa` (the same integers
    /// from either) into the buffers `q` and `scale` (grown as needed).
    fn new(
        isa: Isa,
        a: &[f32],
        m: usize,
        k: usize,
        q: &'a mut Vec<i16>,
        scale: &'a mut Vec<f32>,
    ) -> Quantized<'a> {
        let kp = k.div_ceil(2) * 2;
        if q.len() < m * kp {
            q.resize(m * kp, 0);
        }
        if scale.len() < m {
            scale.resize(m, 0.0);
        }
        let (q, scale) = (&mut q[..m * kp], &mut scale[..m]);
        if kp > k {
            // The padding input of an odd `k`.
            q.iter_mut().skip(k).step_by(kp).for_each(|v| *v = 0);
        }
        if k > 0 {
            for ((row, dst), s) in a
                .chunks_exact(k)
                .zip(q.chunks_exact_mut(kp))
                .zip(scale.iter_mut())
            {
                #[cfg(target_arch = "x86_64")]
                if matches!(isa, Isa::Avx2 | Isa::Avx512) && x86::available() {
                    *s = x86::quantize(row, &mut dst[..k], QA);
                    continue;
                }
                let _ = isa;
                *s = quantize(row, &mut dst[..k], QA);
            }
        }
        Quantized { q, scale, m, kp }
    }
}

/// Rounds `row` to `dst` on the scale that takes its largest magnitude to
/// `qa` (halves to even), returning that scale (zero for a zero row).
fn quantize(row: &[f32], dst: &mut [i16], qa: i32) -> f32 {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        dst.fill(0);
        return 0.0;
    }
    let inv = qa as f32 / max;
    let lim = qa as f32;
    for (d, &v) in dst.iter_mut().zip(row) {
        *d = (v * inv).round_ties_even().clamp(-lim, lim) as i16;
    }
    max / qa as f32
}

/// The reference: the same integer chunks and `f32` steps in plain Rust.
fn portable(w: &IntMatrix, a: &Quantized<'_>, bias: &[f32], out: &mut [f32]) {
    let n = w.n;
    let pairs = a.kp / 2;
    let weight = |p: usize, t: usize, j: usize, half: usize| -> i32 {
        i32::from(w.q[(p * pairs + t) * 2 * PANEL + 2 * j + half])
    };
    for p in 0..n.div_ceil(PANEL) {
        let (scale, lane_bias, cols) = w.panel_consts(p, bias);
        for r in 0..a.m {
            let row = &a.q[r * a.kp..(r + 1) * a.kp];
            let mut total = [0f32; PANEL];
            let mut t0 = 0;
            while t0 < pairs {
                let t1 = w.chunk_end(t0, pairs);
                let mut sum = [0i32; PANEL];
                for t in t0..t1 {
                    let (x0, x1) = (i32::from(row[2 * t]), i32::from(row[2 * t + 1]));
                    for (j, s) in sum.iter_mut().enumerate() {
                        *s += x0 * weight(p, t, j, 0) + x1 * weight(p, t, j, 1);
                    }
                }
                // As the AVX2 kernel: fused multiply-adds.
                let gs = &scale[t0 / w.group * PANEL..][..PANEL];
                for ((t, &s), &g) in total.iter_mut().zip(&sum).zip(gs) {
                    *t = (s as f32).mul_add(g, *t);
                }
                t0 = t1;
            }
            let dst = &mut out[r * n + p * PANEL..][..cols];
            for (j, d) in dst.iter_mut().enumerate() {
                *d = total[j].mul_add(a.scale[r], lane_bias[j]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{IntMatrix, Quantized, PANEL};
    use crate::panel::{each_call, x86::store};
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    /// [`super::quantize`] in AVX2 (the same integers: `vcvtps2dq` rounds
    /// halves to even).
    pub(super) fn quantize(row: &[f32], dst: &mut [i16], qa: i32) -> f32 {
        // SAFETY: only called after `available()`.
        unsafe { quantize_avx2(row, dst, qa) }
    }

    /// # Safety
    /// AVX2 is available; `dst` is as long as `row`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quantize_avx2(row: &[f32], dst: &mut [i16], qa: i32) -> f32 {
        assert_eq!(row.len(), dst.len());
        let n = row.len();
        let body = n / 16 * 16;
        // SAFETY: loads and stores of 16 values at i < body <= n.
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            let mut m = _mm256_setzero_ps();
            for i in (0..body).step_by(16) {
                let p = row.as_ptr().add(i);
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p)));
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8))));
            }
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), m);
            let max = row[body..]
                .iter()
                .chain(&lanes)
                .fold(0f32, |m, v| m.max(v.abs()));
            if max == 0.0 {
                dst.fill(0);
                return 0.0;
            }
            let inv = qa as f32 / max;
            let (vinv, hi, lo) = (
                _mm256_set1_ps(inv),
                _mm256_set1_epi32(qa),
                _mm256_set1_epi32(-qa),
            );
            for i in (0..body).step_by(16) {
                let p = row.as_ptr().add(i);
                let round = |v: __m256| {
                    let x = _mm256_cvtps_epi32(_mm256_mul_ps(v, vinv));
                    _mm256_max_epi32(_mm256_min_epi32(x, hi), lo)
                };
                let a = round(_mm256_loadu_ps(p));
                let b = round(_mm256_loadu_ps(p.add(8)));
                // packs works within 128-bit halves: a0-3 b0-3 a4-7 b4-7.
                let packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0b11_01_10_00);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i) as *mut __m256i, packed);
            }
            let lim = qa as f32;
            for (d, &v) in dst[body..].iter_mut().zip(&row[body..]) {
                *d = (v * inv).round_ties_even().clamp(-lim, lim) as i16;
            }
            max / qa as f32
        }
    }

    /// Loads input pair `t`'s 32 weights of a panel as two vectors of
    /// sixteen `i16` (columns 0-7 and 8-15, the pair's two weights side by
    /// side for each column).
    ///
    /// # Safety
    /// `p` points at a panel of `pairs × 32` weights with `t < pairs`, and
    /// the CPU has AVX2.
    #[inline(always)]
    unsafe fn lanes(p: *const i8, t: usize) -> (__m256i, __m256i) {
        // SAFETY: the caller's contract: 32 bytes at t * 32.
        unsafe {
            let at = p.add(t * 2 * PANEL) as *const __m128i;
            (
                _mm256_cvtepi8_epi16(_mm_loadu_si128(at)),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(at.add(1))),
            )
        }
    }

    /// One call: rows `[0, R)` of `a` (rows of `kp` integers, scales
    /// `sa`) times panel `b`, into the panel's `cols` columns of `out`.
    ///
    /// # Safety
    /// AVX2 and FMA are available; `a` holds `R` rows of `2 · pairs`
    /// `i16`; `b` a panel of `pairs × 32` weights; `sa` `R` scales; `out`
    /// `R` rows of `ldo` floats with `col0 + cols <= ldo`, `cols <= 16`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn block<const R: usize>(
        w: &IntMatrix,
        a: *const i16,
        pairs: usize,
        b: *const i8,
        sa: *const f32,
        scale: &[f32],
        bias: &[f32; PANEL],
        out: *mut f32,
        ldo: usize,
        col0: usize,
        cols: usize,
    ) {
        // SAFETY: every pointer stays inside the ranges the contract names.
        unsafe {
            let kp = 2 * pairs;
            let mut tlo = [_mm256_setzero_ps(); R];
            let mut thi = [_mm256_setzero_ps(); R];
            let mut t0 = 0;
            while t0 < pairs {
                let t1 = w.chunk_end(t0, pairs);
                let mut lo = [_mm256_setzero_si256(); R];
                let mut hi = [_mm256_setzero_si256(); R];
                for t in t0..t1 {
                    let (w0, w1) = lanes(b, t);
                    for r in 0..R {
                        let pair = (a.add(r * kp + 2 * t) as *const i32).read_unaligned();
                        let x = _mm256_set1_epi32(pair);
                        lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(x, w0));
                        hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(x, w1));
                    }
                }
                let gs = scale.as_ptr().add(t0 / w.group * PANEL);
                let (g0, g1) = (_mm256_loadu_ps(gs), _mm256_loadu_ps(gs.add(8)));
                for r in 0..R {
                    tlo[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo[r]), g0, tlo[r]);
                    thi[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi[r]), g1, thi[r]);
                }
                t0 = t1;
            }
            let (c0, c1) = (
                _mm256_loadu_ps(bias.as_ptr()),
                _mm256_loadu_ps(bias.as_ptr().add(8)),
            );
            for r in 0..R {
                let x = _mm256_set1_ps(*sa.add(r));
                let v0 = _mm256_fmadd_ps(tlo[r], x, c0);
                let v1 = _mm256_fmadd_ps(thi[r], x, c1);
                store(out.add(r * ldo + col0), v0, v1, cols);
            }
        }
    }

    /// All rows times all panels of `w`.
    ///
    /// # Safety
    /// AVX2 and FMA are available; the lengths were checked by
    /// `matmul_isa`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run(w: &IntMatrix, a: &Quantized<'_>, bias: &[f32], out: &mut [f32]) {
        let (n, kp) = (w.n, a.kp);
        let pairs = kp / 2;
        each_call(a.m, n.div_ceil(PANEL), |p, r, take| {
            let (scale, lane_bias, cols) = w.panel_consts(p, bias);
            let b = w.q[p * pairs * 2 * PANEL..(p + 1) * pairs * 2 * PANEL].as_ptr();
            let ap = a.q[r * kp..].as_ptr();
            let sp = a.scale[r..].as_ptr();
            let op = out[r * n..].as_mut_ptr();
            let col0 = p * PANEL;
            // SAFETY: rows r..r + take exist in `a` and `out` (take <= m -
            // r), the panel holds pairs × 32 weights, col0 + cols <= n; the
            // features are enabled here.
            unsafe {
                match take {
                    6 => block::<6>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                    5 => block::<5>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                    4 => block::<4>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                    3 => block::<3>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                    2 => block::<2>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                    _ => block::<1>(w, ap, pairs, b, sp, scale, &lane_bias, op, n, col0, cols),
                }
            }
        });
    }

    pub(super) fn matmul(w: &IntMatrix, a: &Quantized<'_>, bias: &[f32], out: &mut [f32]) {
        // SAFETY: only called after `available()`; lengths checked by the caller.
        unsafe { run(w, a, bias, out) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{naive, values};

    // The products against the naive one, their agreement across kernels
    // and batches: matmul.rs's tests, over `WeightType::Q8` and
    // `Q8Grouped`.

    /// Extremes: the largest weights against the largest activations over
    /// a long input sum without overflow; zero rows stay the bias.
    #[test]
    fn extreme_values_do_not_overflow() {
        let (m, k, n) = (3, 4097, 17);
        let w = vec![-3.5f32; k * n];
        let mut a = vec![1e30f32; m * k];
        a[2 * k..].fill(0.0);
        let bias = vec![0.25f32; n];
        let want = naive(&w, k, n, &a, m, &bias);
        for ty in [IntWeights::I8, IntWeights::I8Grouped] {
            let packed = IntMatrix::pack(&w, k, n, ty);
            for isa in [Isa::Scalar, Isa::Avx2] {
                let mut got = vec![0f32; m * n];
                packed.matmul_isa(isa, &a, m, &bias, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "{ty:?}: {g} vs {w}"
                    );
                }
                assert!(got[2 * n..].iter().all(|&v| v == 0.25));
            }
        }
    }

    /// A thread's activation buffers are reused from call to call: a call
    /// with an odd `k` after one that filled the buffer with other values
    /// (the padding input included) gives what a fresh thread gives.
    #[test]
    fn reused_buffers_do_not_leak_into_the_next_call() {
        let (m, n) = (5, 20);
        let run = move |k: usize, seed: u64| {
            let bias = vec![0.5f32; n];
            let w = IntMatrix::pack(&values(k * n, seed), k, n, IntWeights::I8Grouped);
            let a = values(m * k, seed + 1);
            let mut out = vec![0f32; m * n];
            w.matmul(&a, m, &bias, &mut out);
            out
        };
        let fresh = std::thread::spawn(move || run(129, 3))
            .join()
            .expect("the fresh thread panicked");
        let _ = run(130, 11);
        let _ = run(1024, 12);
        assert_eq!(run(129, 3), fresh);
    }

    #[test]
    fn bytes_per_weight() {
        let w = values(384 * 1536, 5);
        let i8 = IntMatrix::pack(&w, 384, 1536, IntWeights::I8);
        assert_eq!(i8.bytes(), 384 * 1536 + 1536 * 4);
        let grouped = IntMatrix::pack(&w, 384, 1536, IntWeights::I8Grouped);
        assert_eq!(grouped.bytes(), 384 * 1536 + 384 / GROUP * 1536 * 4);
    }

    /// Grouped scales round a column whose inputs differ in size by orders
    /// of magnitude far closer than one scale per column.
    #[test]
    fn groups_keep_small_weights() {
        let (k, n) = (256, 16);
        // Inputs 0-63 carry weights near 100, the rest near 0.01.
        let w: Vec<f32> = values(k * n, 7)
            .iter()
            .enumerate()
            .map(|(i, v)| if i / n < 64 { 100.0 + v } else { 0.01 * v })
            .collect();
        let mut a = values(k, 8);
        a[..64].fill(0.0);
        let bias = vec![0f32; n];
        let want = naive(&w, k, n, &a, 1, &bias);
        let err = |ty| {
            let mut got = vec![0f32; n];
            IntMatrix::pack(&w, k, n, ty).matmul(&a, 1, &bias, &mut got);
            got.iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max)
        };
        let (column, grouped) = (err(IntWeights::I8), err(IntWeights::I8Grouped));
        assert!(
            grouped * 100.0 < column,
            "grouped {grouped}, per column {column}"
        );
    }
}
