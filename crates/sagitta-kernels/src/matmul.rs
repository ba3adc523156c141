//! Dense products of a few activation rows with a fixed weight matrix:
//! `out = a · W + bias`, the work of a small transformer's linear layers.
//!
//! The weight matrix is packed once ([`PackedMatrix::pack`]) into panels of
//! [`PANEL`] output columns, each panel holding its `k × 16` weights in
//! input order, so a product streams every weight exactly once per block of
//! [`ROWS`] activation rows and the hardware prefetcher sees one linear
//! stream. Weights are stored as `f32`, `f16`, or `i8` with one scale per
//! output column ([`WeightType`]); activations, accumulation and results
//! stay `f32`. The `i8` matrix of a 384 × 1536 layer is 0.6 MB, so a
//! MiniLM-sized model's weights (22 MB) stay in a server CPU's last-level
//! cache between queries, where the `f32` ones (90 MB) are read from memory
//! every time.
//!
//! The AVX2 + FMA kernel keeps a 6 × 16 block of results in twelve
//! registers; the portable one is plain loops in the same order. Each output
//! element is one chain of multiply-adds over `k` in input order, whatever
//! the number of rows, so a row's result does not depend on the rows it is
//! batched with.

use half::f16;

pub use crate::panel::{PANEL, ROWS};
use crate::qmatmul::{IntMatrix, IntWeights};
use crate::Isa;

/// How a [`PackedMatrix`] stores its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// The weights as given.
    F32,
    /// IEEE half precision (about three decimal digits).
    F16,
    /// Symmetric 8-bit integers with one `f32` scale per output column
    /// (`w ≈ q · scale`, `scale = max |w| / 127` over the column).
    I8,
    /// `I8`'s weights with the products in integers: the activations
    /// rounded per row to 16 bits at each call ([`crate::qmatmul`], twice
    /// the multiply-adds per instruction).
    Q8,
    /// `Q8` with one scale per column and group of
    /// [`crate::qmatmul::GROUP`] inputs.
    Q8Grouped,
}

impl WeightType {
    /// Short lowercase name (`f32`, `f16`, `i8`, `q8`, `q8g`).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::I8 => "i8",
            WeightType::Q8 => "q8",
            WeightType::Q8Grouped => "q8g",
        }
    }
}

#[derive(Clone)]
enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
    I8 { q: Vec<i8>, scale: Vec<f32> },
    Int(IntMatrix),
}

/// A `k × n` weight matrix packed for [`PackedMatrix::matmul`].
#[derive(Clone)]
pub struct PackedMatrix {
    k: usize,
    n: usize,
    store: Store,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("type", &self.weight_type())
            .finish()
    }
}

impl PackedMatrix {
    /// Packs `w`, a `k × n` matrix in row-major order (row `i` holds the
    /// weights from input `i` to every output), as `ty`. Panics if
    /// `w.len() != k * n`.
    pub fn pack(w: &[f32], k: usize, n: usize, ty: WeightType) -> PackedMatrix {
        assert_eq!(w.len(), k * n, "weights are not {k} x {n}");
        let panels = n.div_ceil(PANEL);
        // Panel p, input i, lane j: w[i][p·16 + j], zero past column n.
        let packed = |i: usize, col: usize| if col < n { w[i * n + col] } else { 0.0 };
        let store = match ty {
            WeightType::F32 => {
                let mut v = Vec::with_capacity(panels * k * PANEL);
                for p in 0..panels {
                    for i in 0..k {
                        v.extend((0..PANEL).map(|j| packed(i, p * PANEL + j)));
                    }
                }
                Store::F32(v)
            }
            WeightType::F16 => {
                let mut v = Vec::with_capacity(panels * k * PANEL);
                for p in 0..panels {
                    for i in 0..k {
                        v.extend((0..PANEL).map(|j| f16::from_f32(packed(i, p * PANEL + j))));
                    }
                }
                Store::F16(v)
            }
            WeightType::I8 => {
                let scale: Vec<f32> = (0..panels * PANEL)
                    .map(|col| {
                        let max = (0..k).map(|i| packed(i, col).abs()).fold(0.0, f32::max);
                        if max > 0.0 {
                            max / 127.0
                        } else {
                            1.0
                        }
                    })
                    .collect();
                let mut q = Vec::with_capacity(panels * k * PANEL);
                for p in 0..panels {
                    for i in 0..k {
                        q.extend((0..PANEL).map(|j| {
                            let col = p * PANEL + j;
                            (packed(i, col) / scale[col]).round().clamp(-127.0, 127.0) as i8
                        }));
                    }
                }
                Store::I8 { q, scale }
            }
            WeightType::Q8 => Store::Int(IntMatrix::pack(w, k, n, IntWeights::I8)),
            WeightType::Q8Grouped => Store::Int(IntMatrix::pack(w, k, n, IntWeights::I8Grouped)),
        };
        PackedMatrix { k, n, store }
    }

    /// Inputs (rows of the unpacked matrix).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Outputs (columns of the unpacked matrix).
    pub fn n(&self) -> usize {
        self.n
    }

    /// How the weights are stored.
    pub fn weight_type(&self) -> WeightType {
        match &self.store {
            Store::F32(_) => WeightType::F32,
            Store::F16(_) => WeightType::F16,
            Store::I8 { .. } => WeightType::I8,
            Store::Int(m) => match m.weights() {
                IntWeights::I8 => WeightType::Q8,
                IntWeights::I8Grouped => WeightType::Q8Grouped,
            },
        }
    }

    /// Bytes the packed weights take.
    pub fn bytes(&self) -> usize {
        match &self.store {
            Store::F32(v) => v.len() * 4,
            Store::F16(v) => v.len() * 2,
            Store::I8 { q, scale } => q.len() + scale.len() * 4,
            Store::Int(m) => m.bytes(),
        }
    }

    /// `out = a · W + bias` for `m` rows: `a` is `m × k`, `bias` has `n`
    /// values, `out` is `m × n`, all row major. Runs on the calling thread
    /// with the best kernel [`crate::isa`] allows. Panics if a length does
    /// not match.
    pub fn matmul(&self, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
        self.matmul_isa(crate::isa(), a, m, bias, out);
    }

    /// [`matmul`](Self::matmul) with the kernel of `isa` (the portable one
    /// where `isa` has none of its own or the CPU lacks it).
    pub fn matmul_isa(&self, isa: Isa, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
        if let Store::Int(w) = &self.store {
            w.matmul_isa(isa, a, m, bias, out);
            return;
        }
        crate::panel::check_shapes(self.k, self.n, a, m, bias, out);
        #[cfg(target_arch = "x86_64")]
        if matches!(isa, Isa::Avx2 | Isa::Avx512) && x86::available() {
            x86::matmul(self, a, m, bias, out);
            return;
        }
        let _ = isa;
        portable(self, a, m, bias, out);
    }
}

/// One panel's weights as `f32`, for the portable kernel.
fn panel_f32(w: &PackedMatrix, p: usize, i: usize) -> [f32; PANEL] {
    let at = (p * w.k + i) * PANEL;
    let mut lane = [0f32; PANEL];
    match &w.store {
        Store::F32(v) => lane.copy_from_slice(&v[at..at + PANEL]),
        Store::F16(v) => {
            for (d, s) in lane.iter_mut().zip(&v[at..at + PANEL]) {
                *d = s.to_f32();
            }
        }
        Store::I8 { q, .. } => {
            for (d, &s) in lane.iter_mut().zip(&q[at..at + PANEL]) {
                *d = f32::from(s);
            }
        }
        Store::Int(_) => unreachable!("integer products run in qmatmul"),
    }
    lane
}

/// The column scales of panel `p` (ones unless the weights are `i8`).
fn panel_scale(w: &PackedMatrix, p: usize) -> [f32; PANEL] {
    let mut s = [1f32; PANEL];
    if let Store::I8 { scale, .. } = &w.store {
        s.copy_from_slice(&scale[p * PANEL..(p + 1) * PANEL]);
    }
    s
}

/// The reference: the same packed walk in plain Rust. Each input's
/// sixteen weights are widened once and applied to every row; each output
/// is still one chain over the inputs in order.
fn portable(w: &PackedMatrix, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
    let (k, n) = (w.k, w.n);
    let mut acc = vec![[0f32; PANEL]; m];
    for p in 0..n.div_ceil(PANEL) {
        let scale = panel_scale(w, p);
        let cols = (n - p * PANEL).min(PANEL);
        acc.iter_mut().for_each(|row| *row = [0.0; PANEL]);
        for i in 0..k {
            let lane = panel_f32(w, p, i);
            for (r, row) in acc.iter_mut().enumerate() {
                let x = a[r * k + i];
                for (acc, &wv) in row.iter_mut().zip(&lane) {
                    *acc += x * wv;
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            let dst = &mut out[r * n + p * PANEL..][..cols];
            for (j, d) in dst.iter_mut().enumerate() {
                *d = row[j] * scale[j] + bias[p * PANEL + j];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{PackedMatrix, Store, PANEL};
    use crate::panel::{each_call, x86::store};
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }

    /// Loads input `i`'s sixteen weights of a panel as two `f32` vectors.
    trait Lanes {
        /// # Safety
        /// `p` points at a panel of `k × 16` weights with `i < k`, and the
        /// CPU has AVX2 and F16C.
        unsafe fn lanes(p: *const Self, i: usize) -> (__m256, __m256);
    }

    impl Lanes for f32 {
        #[inline(always)]
        unsafe fn lanes(p: *const f32, i: usize) -> (__m256, __m256) {
            // SAFETY: the caller's contract: 16 floats at i * 16.
            unsafe {
                let at = p.add(i * PANEL);
                (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8)))
            }
        }
    }

    impl Lanes for half::f16 {
        #[inline(always)]
        unsafe fn lanes(p: *const half::f16, i: usize) -> (__m256, __m256) {
            // SAFETY: the caller's contract: 16 halves (32 bytes) at i * 16.
            unsafe {
                let at = p.add(i * PANEL) as *const __m128i;
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(at)),
                    _mm256_cvtph_ps(_mm_loadu_si128(at.add(1))),
                )
            }
        }
    }

    impl Lanes for i8 {
        #[inline(always)]
        unsafe fn lanes(p: *const i8, i: usize) -> (__m256, __m256) {
            // SAFETY: the caller's contract: 16 bytes at i * 16.
            unsafe {
                let at = p.add(i * PANEL);
                let lo = _mm_loadl_epi64(at as *const __m128i);
                let hi = _mm_loadl_epi64(at.add(8) as *const __m128i);
                (
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)),
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)),
                )
            }
        }
    }

    /// One kernel call: rows `[r0, r0 + R)` of `a` times panel `b`, scaled
    /// by `scale` and offset by `bias` (both 16 wide), into the panel's
    /// `cols` columns of `out`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; `a` holds rows `r0 + R` of `k`
    /// floats; `b` a panel of `k × 16` weights; `out` rows `r0 + R` of
    /// `ldo` floats with `col0 + cols <= ldo` and `cols <= 16`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn block<const R: usize, T: Lanes>(
        a: *const f32,
        k: usize,
        b: *const T,
        scale: &[f32; PANEL],
        bias: &[f32; PANEL],
        out: *mut f32,
        ldo: usize,
        col0: usize,
        cols: usize,
    ) {
        // SAFETY: every pointer stays inside the ranges the contract names.
        unsafe {
            let mut lo = [_mm256_setzero_ps(); R];
            let mut hi = [_mm256_setzero_ps(); R];
            for i in 0..k {
                let (b0, b1) = T::lanes(b, i);
                for r in 0..R {
                    let x = _mm256_broadcast_ss(&*a.add(r * k + i));
                    lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
                    hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
                }
            }
            let (s0, s1) = (
                _mm256_loadu_ps(scale.as_ptr()),
                _mm256_loadu_ps(scale.as_ptr().add(8)),
            );
            let (c0, c1) = (
                _mm256_loadu_ps(bias.as_ptr()),
                _mm256_loadu_ps(bias.as_ptr().add(8)),
            );
            for r in 0..R {
                let dst = out.add(r * ldo + col0);
                let v0 = _mm256_fmadd_ps(lo[r], s0, c0);
                let v1 = _mm256_fmadd_ps(hi[r], s1, c1);
                store(dst, v0, v1, cols);
            }
        }
    }

    /// All rows times all panels of `w` stored as `T`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; `packed` is `w`'s storage; the
    /// lengths were checked by `matmul_isa`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run<T: Lanes>(
        w: &PackedMatrix,
        packed: &[T],
        a: &[f32],
        m: usize,
        bias: &[f32],
        out: &mut [f32],
    ) {
        let (k, n) = (w.k, w.n);
        each_call(m, n.div_ceil(PANEL), |p, r, take| {
            let scale = super::panel_scale(w, p);
            let cols = (n - p * PANEL).min(PANEL);
            let mut lane_bias = [0f32; PANEL];
            lane_bias[..cols].copy_from_slice(&bias[p * PANEL..p * PANEL + cols]);
            let b = packed[p * k * PANEL..(p + 1) * k * PANEL].as_ptr();
            let ap = a[r * k..].as_ptr();
            let op = out[r * n..].as_mut_ptr();
            let col0 = p * PANEL;
            // SAFETY: rows r..r + take exist in `a` and `out` (take <= m -
            // r), the panel holds k × 16 weights, col0 + cols <= n; the
            // features are enabled here.
            unsafe { dispatch::<T>(take, ap, k, b, &scale, &lane_bias, op, n, col0, cols) };
        });
    }

    /// [`block`] for `take` (1 to 6) rows.
    ///
    /// # Safety
    /// As [`block`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn dispatch<T: Lanes>(
        take: usize,
        a: *const f32,
        k: usize,
        b: *const T,
        scale: &[f32; PANEL],
        bias: &[f32; PANEL],
        out: *mut f32,
        ldo: usize,
        col0: usize,
        cols: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match take {
                6 => block::<6, T>(a, k, b, scale, bias, out, ldo, col0, cols),
                5 => block::<5, T>(a, k, b, scale, bias, out, ldo, col0, cols),
                4 => block::<4, T>(a, k, b, scale, bias, out, ldo, col0, cols),
                3 => block::<3, T>(a, k, b, scale, bias, out, ldo, col0, cols),
                2 => block::<2, T>(a, k, b, scale, bias, out, ldo, col0, cols),
                _ => block::<1, T>(a, k, b, scale, bias, out, ldo, col0, cols),
            }
        }
    }

    pub(super) fn matmul(w: &PackedMatrix, a: &[f32], m: usize, bias: &[f32], out: &mut [f32]) {
        // SAFETY: only called after `available()`; lengths checked by the caller.
        unsafe {
            match &w.store {
                Store::F32(v) => run(w, v, a, m, bias, out),
                Store::F16(v) => run(w, v, a, m, bias, out),
                Store::I8 { q, .. } => run(w, q, a, m, bias, out),
                Store::Int(_) => unreachable!("integer products run in qmatmul"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{naive, values};

    const ALL: [WeightType; 5] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::I8,
        WeightType::Q8,
        WeightType::Q8Grouped,
    ];

    /// Every kernel and weight type against a double-precision product, on
    /// shapes that leave partial row blocks, partial panels, odd `k` and
    /// (1537) more than one integer chunk; the integer products give the
    /// same bits on every kernel.
    #[test]
    fn kernels_match_the_naive_product() {
        for &(m, k, n) in &[
            (1, 1, 1),
            (5, 7, 3),
            (6, 16, 16),
            (13, 33, 40),
            (50, 384, 37),
            (9, 1537, 20),
            (97, 64, 80),
        ] {
            let w = values(k * n, (m * 31 + k * 7 + n) as u64);
            let a = values(m * k, (m + k + n) as u64);
            let bias = values(n, 99);
            let want = naive(&w, k, n, &a, m, &bias);
            for ty in ALL {
                let packed = PackedMatrix::pack(&w, k, n, ty);
                assert_eq!((packed.k(), packed.n(), packed.weight_type()), (k, n, ty));
                // Per-type error bound on |a·w| <= k: f32 rounding, f16's
                // 2^-11 relative step, i8's half step of max|w|/127.
                let tol = match ty {
                    WeightType::F32 => 1e-4 * k as f32,
                    WeightType::F16 => 1e-3 * k as f32,
                    WeightType::I8 => 0.5 / 127.0 * k as f32,
                    WeightType::Q8 | WeightType::Q8Grouped => {
                        (0.5 / 127.0 + 0.5 / 32767.0) * k as f32
                    }
                };
                let mut outs = Vec::new();
                for isa in [Isa::Scalar, Isa::Avx2] {
                    let mut got = vec![f32::NAN; m * n];
                    packed.matmul_isa(isa, &a, m, &bias, &mut got);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= tol,
                            "{m}x{k}x{n} {} {}: element {i}: {g} vs {w}",
                            ty.name(),
                            isa.name()
                        );
                    }
                    outs.push(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                }
                if matches!(ty, WeightType::Q8 | WeightType::Q8Grouped) {
                    assert_eq!(outs[0], outs[1], "{m}x{k}x{n} {}", ty.name());
                }
            }
        }
    }

    /// A row's result is the same alone and inside any batch.
    #[test]
    fn rows_do_not_depend_on_their_batch() {
        let (k, n) = (96, 50);
        let w = values(k * n, 1);
        let bias = values(n, 2);
        let a = values(20 * k, 3);
        for ty in ALL {
            let packed = PackedMatrix::pack(&w, k, n, ty);
            let mut all = vec![0f32; 20 * n];
            packed.matmul(&a, 20, &bias, &mut all);
            for r in 0..20 {
                let mut one = vec![0f32; n];
                packed.matmul(&a[r * k..(r + 1) * k], 1, &bias, &mut one);
                assert_eq!(one, all[r * n..(r + 1) * n], "{} row {r}", ty.name());
            }
        }
    }

    #[test]
    fn i8_takes_a_quarter_of_the_bytes() {
        let packed = PackedMatrix::pack(&values(384 * 1536, 5), 384, 1536, WeightType::I8);
        assert_eq!(packed.bytes(), 384 * 1536 + 1536 * 4);
        let f16 = PackedMatrix::pack(&values(384 * 1536, 5), 384, 1536, WeightType::F16);
        assert_eq!(f16.bytes(), 384 * 1536 * 2);
    }
}
