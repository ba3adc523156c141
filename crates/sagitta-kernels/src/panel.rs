//! What the packed products ([`crate::matmul`], [`crate::qmatmul`]) share:
//! the walk that splits the activation rows into kernel calls panel by
//! panel, the shapes they accept, and the AVX2 store of one call's row of
//! sixteen results.

/// Output columns per packed panel (two AVX registers of `f32`).
pub const PANEL: usize = 16;
/// Activation rows per kernel call (six rows × two registers of sums, as
/// both products' kernels use).
pub const ROWS: usize = 6;
/// Activation rows per outer block: the rows a panel is applied to before
/// the next panel is read, sized so those rows stay in L2.
const ROW_BLOCK: usize = 48;

/// Calls `call(p, r, take)` for every panel `p` of `panels` and every
/// kernel call of `take` (1 to [`ROWS`]) rows from row `r`, covering rows
/// `[0, m)` block by block: a block's rows are split evenly over its calls
/// (a call of one or two rows waits on its few accumulators' latency).
#[inline(always)]
pub(crate) fn each_call(m: usize, panels: usize, mut call: impl FnMut(usize, usize, usize)) {
    let mut r0 = 0;
    while r0 < m {
        let rows = (m - r0).min(ROW_BLOCK);
        let calls = rows.div_ceil(ROWS);
        for p in 0..panels {
            let mut r = r0;
            for c in 0..calls {
                let take = (rows - (r - r0)) / (calls - c);
                call(p, r, take);
                r += take;
            }
        }
        r0 += rows;
    }
}

/// Panics unless `a` is `m × k`, `bias` has `n` values and `out` is
/// `m × n`.
pub(crate) fn check_shapes(k: usize, n: usize, a: &[f32], m: usize, bias: &[f32], out: &[f32]) {
    assert_eq!(a.len(), m * k, "activations are not {m} x {k}");
    assert_eq!(bias.len(), n, "bias is not {n} long");
    assert_eq!(out.len(), m * n, "output is not {m} x {n}");
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::PANEL;
    use std::arch::x86_64::*;

    /// Stores sixteen results (`v0`, `v1`) as the first `cols` floats at
    /// `dst`.
    ///
    /// # Safety
    /// AVX is available; `dst` has room for `cols <= 16` floats.
    #[inline(always)]
    pub(crate) unsafe fn store(dst: *mut f32, v0: __m256, v1: __m256, cols: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            if cols == PANEL {
                _mm256_storeu_ps(dst, v0);
                _mm256_storeu_ps(dst.add(8), v1);
            } else {
                let mut tmp = [0f32; PANEL];
                _mm256_storeu_ps(tmp.as_mut_ptr(), v0);
                _mm256_storeu_ps(tmp.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, cols);
            }
        }
    }
}
