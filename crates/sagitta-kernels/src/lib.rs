//! # sagitta-kernels
//!
//! The bottom layer of Sagitta: distance kernels and bit tricks. This crate
//! owns every instruction-set specific line of the engine and imports no
//! other Sagitta crate.
//!
//! * squared L2, inner product and cosine over `f32`, `f16` and `i8`;
//! * Hamming over packed bits, and NPHD (normalized prefix Hamming distance)
//!   over variable-length binary codes;
//! * small dense products with packed `f32` / `f16` / `i8` weights
//!   ([`matmul`]), and in integers ([`qmatmul`]), and the elementwise
//!   passes between them ([`nn`]), for the built-in text embedding model.
//!
//! One file per instruction set (`avx512.rs`, `avx2.rs`, `neon.rs`) plus the
//! portable reference in `scalar.rs`. The best implementation the CPU
//! supports is chosen **once**, on first use, into an immutable [`Kernels`]
//! table ([`kernels()`]); [`isa()`] reports the choice. Every table that the
//! CPU supports is available from [`Kernels::for_isa`] so tests can compare
//! each against the scalar reference.
//!
//! Index code does not call these functions directly; it uses a
//! [`Distance`], which binds a [`Metric`] and a [`DType`] to one kernel and
//! evaluates it on raw storage bytes.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod avx2;
mod avx512;
mod distance;
pub mod fastscan;
pub mod matmul;
mod neon;
pub mod nn;
mod panel;
pub mod qmatmul;
pub mod scalar;
#[cfg(test)]
mod testdata;

pub use distance::{
    nphd_code_len, nphd_encode, DType, Distance, KernelError, Metric, NPHD_MAX_BYTES, SQ_HEADER,
};
pub use half::f16;

use std::sync::LazyLock;

/// An instruction set a kernel table is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512 F/BW/VL (+ VPOPCNTDQ for Hamming and VNNI for byte dot
    /// products where present), x86_64.
    Avx512,
    /// AVX2 + FMA + F16C + POPCNT, x86_64.
    Avx2,
    /// NEON (Advanced SIMD), aarch64.
    Neon,
    /// Portable Rust, auto-vectorised for the baseline target.
    Scalar,
}

impl Isa {
    /// Short lowercase name, as printed in benchmark rows.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
            Isa::Scalar => "scalar",
        }
    }

    /// Whether the running CPU can execute this instruction set.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
                    && std::arch::is_x86_feature_detected!("popcnt")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `fn(a, b) -> f32` over a float element type.
pub type FloatKernel<T> = fn(&[T], &[T]) -> f32;

/// One immutable table of kernels for one instruction set.
///
/// All functions accept slices of different lengths and use the shorter one;
/// callers that need equal lengths check them once at the API boundary.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// The instruction set these kernels were compiled for.
    pub isa: Isa,
    /// Squared Euclidean distance.
    pub l2sq_f32: FloatKernel<f32>,
    /// Dot product.
    pub dot_f32: FloatKernel<f32>,
    /// Cosine distance `1 - cos`.
    pub cos_f32: FloatKernel<f32>,
    /// Cosine distance from a unit-length query `a` to a vector `b` stored
    /// as given: `1 - a·b / |b|`, `|b|` from the same pass as the dot
    /// product (as fast as `dot_f32` where loads bound the loop).
    pub cos_unit_f32: FloatKernel<f32>,
    /// Squared Euclidean distance over halves.
    pub l2sq_f16: FloatKernel<f16>,
    /// Dot product over halves.
    pub dot_f16: FloatKernel<f16>,
    /// Cosine distance over halves.
    pub cos_f16: FloatKernel<f16>,
    /// Squared Euclidean distance over bytes (exact).
    pub l2sq_i8: FloatKernel<i8>,
    /// Dot product over bytes (exact).
    pub dot_i8: FloatKernel<i8>,
    /// Cosine distance over bytes.
    pub cos_i8: FloatKernel<i8>,
    /// Dot product over 16-bit integers (scalar-quantized storage).
    pub dot_i16: FloatKernel<i16>,
    /// Hamming distance over packed bits.
    pub hamming: fn(&[u8], &[u8]) -> u32,
    /// Hamming distances from one code to a block of codes `stride` bytes
    /// apart, as f32 (see [`scalar::hamming_rows`]).
    pub hamming_rows: fn(&[u8], &[u8], usize, &mut [f32]),
    /// Hamming distances from one code to a few codes anywhere, as f32 (see
    /// [`scalar::hamming_each`]).
    pub hamming_each: fn(&[u8], &[&[u8]], &mut [f32]),
    /// NPHD from one stored code to a block of stored codes (see
    /// [`scalar::nphd_rows`]).
    pub nphd_rows: fn(&[u8], &[u8], usize, &mut [f32]),
    /// Whether `hamming` uses a vector popcount (AVX-512 VPOPCNTDQ, NEON CNT).
    pub vector_popcount: bool,
    /// RaBitQ fast scan: lookup-table sums for one block of 32 codes (see
    /// [`fastscan`]).
    pub fastscan: fn(&[u8], &[u8], &mut [u16; 32]),
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("isa", &self.isa)
            .field("vector_popcount", &self.vector_popcount)
            .finish_non_exhaustive()
    }
}

impl Kernels {
    /// The portable reference table.
    pub const SCALAR: Kernels = Kernels {
        isa: Isa::Scalar,
        l2sq_f32: scalar::l2sq_f32,
        dot_f32: scalar::dot_f32,
        cos_f32: scalar::cos_f32,
        cos_unit_f32: scalar::cos_unit_f32,
        l2sq_f16: scalar::l2sq_f16,
        dot_f16: scalar::dot_f16,
        cos_f16: scalar::cos_f16,
        l2sq_i8: scalar::l2sq_i8,
        dot_i8: scalar::dot_i8,
        cos_i8: scalar::cos_i8,
        dot_i16: scalar::dot_i16,
        hamming: scalar::hamming,
        hamming_rows: scalar::hamming_rows,
        hamming_each: scalar::hamming_each,
        nphd_rows: scalar::nphd_rows,
        vector_popcount: false,
        fastscan: fastscan::fastscan_scalar,
    };

    /// The table for `isa`, or `None` when this CPU cannot run it.
    pub fn for_isa(isa: Isa) -> Option<Kernels> {
        if !isa.is_available() {
            return None;
        }
        match isa {
            Isa::Scalar => Some(Self::SCALAR),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Some(Kernels {
                isa,
                l2sq_f32: avx2::l2sq_f32,
                dot_f32: avx2::dot_f32,
                cos_f32: avx2::cos_f32,
                cos_unit_f32: avx2::cos_unit_f32,
                l2sq_f16: avx2::l2sq_f16,
                dot_f16: avx2::dot_f16,
                cos_f16: avx2::cos_f16,
                l2sq_i8: avx2::l2sq_i8,
                dot_i8: avx2::dot_i8,
                cos_i8: avx2::cos_i8,
                dot_i16: avx2::dot_i16,
                hamming: avx2::hamming,
                hamming_rows: avx2::hamming_rows,
                hamming_each: avx2::hamming_each,
                nphd_rows: avx2::nphd_rows,
                vector_popcount: false,
                fastscan: fastscan::x86::fastscan_avx2,
            }),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                let vpopcnt = std::arch::is_x86_feature_detected!("avx512vpopcntdq");
                let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
                Some(Kernels {
                    isa,
                    l2sq_f32: avx512::l2sq_f32,
                    dot_f32: avx512::dot_f32,
                    cos_f32: avx512::cos_f32,
                    cos_unit_f32: avx512::cos_unit_f32,
                    l2sq_f16: avx512::l2sq_f16,
                    dot_f16: avx512::dot_f16,
                    cos_f16: avx512::cos_f16,
                    l2sq_i8: avx512::l2sq_i8,
                    dot_i8: if vnni {
                        avx512::dot_i8_vnni
                    } else {
                        avx512::dot_i8
                    },
                    cos_i8: avx512::cos_i8,
                    dot_i16: avx512::dot_i16,
                    hamming: if vpopcnt {
                        avx512::hamming
                    } else {
                        avx2::hamming
                    },
                    hamming_rows: if vpopcnt {
                        avx512::hamming_rows
                    } else {
                        avx512::hamming_rows_bw
                    },
                    // Scalar POPCNT over a 32-byte code is four
                    // instructions: no vector reduction to pay per row.
                    // (Nibble lookups eight neighbours a step, gathered
                    // into registers, measured no faster in graph builds
                    // or walks on a Xeon without VPOPCNTDQ.)
                    hamming_each: avx2::hamming_each,
                    nphd_rows: avx2::nphd_rows,
                    vector_popcount: vpopcnt,
                    fastscan: fastscan::x86::fastscan_avx512,
                })
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => Some(Kernels {
                isa,
                l2sq_f32: neon::l2sq_f32,
                dot_f32: neon::dot_f32,
                cos_f32: neon::cos_f32,
                cos_unit_f32: scalar::cos_unit_f32,
                l2sq_f16: scalar::l2sq_f16,
                dot_f16: scalar::dot_f16,
                cos_f16: scalar::cos_f16,
                l2sq_i8: neon::l2sq_i8,
                dot_i8: neon::dot_i8,
                cos_i8: neon::cos_i8,
                dot_i16: scalar::dot_i16,
                hamming: neon::hamming,
                hamming_rows: scalar::hamming_rows,
                hamming_each: scalar::hamming_each,
                nphd_rows: scalar::nphd_rows,
                vector_popcount: true,
                fastscan: fastscan::arm::fastscan_neon,
            }),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Every table this CPU can run, best first (always ends with scalar).
    pub fn available() -> Vec<Kernels> {
        [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar]
            .into_iter()
            .filter_map(Self::for_isa)
            .collect()
    }
}

/// Set `SAGITTA_ISA=avx2|scalar|...` to cap the choice (for benchmarking
/// one implementation against another); unknown or unavailable values are
/// ignored.
static ACTIVE: LazyLock<Kernels> = LazyLock::new(|| {
    let all = Kernels::available();
    let wanted = std::env::var("SAGITTA_ISA").ok();
    wanted
        .and_then(|w| {
            all.iter()
                .find(|k| k.isa.name() == w.to_ascii_lowercase())
                .copied()
        })
        .unwrap_or(all[0])
});

/// The kernel table chosen for this process (selected once, then immutable).
#[inline]
pub fn kernels() -> &'static Kernels {
    &ACTIVE
}

/// The instruction set the active kernels use.
pub fn isa() -> Isa {
    kernels().isa
}

/// `1 - ab / (sqrt(aa) sqrt(bb))`, clamped to [0, 2]; 1.0 when either
/// norm is 0.
#[inline]
pub(crate) fn cos_from_parts(ab: f32, aa: f32, bb: f32) -> f32 {
    // The product of the norms, not of the squared norms (which overflows
    // f32 once the norms' product passes about 1.8e19: cosine vectors are
    // stored as given, not at unit length).
    let denom = aa.sqrt() * bb.sqrt();
    if denom <= 0.0 || !denom.is_finite() {
        return 1.0;
    }
    (1.0 - ab / denom).clamp(0.0, 2.0)
}

/// `1 - ab / sqrt(bb)` for a unit-length query (`ab` its dot product with
/// a row of squared norm `bb`), clamped to [0, 2]; 1.0 for a zero row.
#[inline]
pub(crate) fn cos_unit_from_parts(ab: f32, bb: f32) -> f32 {
    if bb <= 0.0 || !bb.is_finite() {
        return 1.0;
    }
    (1.0 - ab / bb.sqrt()).clamp(0.0, 2.0)
}

/// Hints the CPU to bring the cache line at `p` into L1 (no-op where the
/// architecture has no stable prefetch intrinsic).
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is SSE (baseline on x86_64) and never faults, even
    // for invalid addresses.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Packs the sign bits of a float vector (bit i = `v[i] > 0`), eight per
/// byte, component i in bit `i % 8` of byte `i / 8`: the layout Hamming
/// indexes store.
pub fn sign_bits(v: &[f32]) -> Vec<u8> {
    v.chunks(8)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u8, |b, (i, x)| b | (u8::from(*x > 0.0) << i))
        })
        .collect()
}
