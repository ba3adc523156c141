//! [`Distance`]: a metric bound to a storage type, evaluated on raw bytes.
//!
//! Indexes store every vector as `DType::bytes_per_vector(dims)` bytes and
//! never look inside; they call [`Distance::eval`], which casts the bytes to
//! the element type and runs the kernel chosen at construction.
//!
//! Distances are "smaller is nearer" for every metric:
//!
//! | metric    | value                                   |
//! |-----------|-----------------------------------------|
//! | `L2`      | squared Euclidean distance              |
//! | `Ip`      | `1 - a·b`                               |
//! | `Cos`     | `1 - cos(a, b)` in [0, 2]               |
//! | `Hamming` | number of differing bits                |
//! | `Nphd`    | differing bits in the common prefix / prefix bits, in [0, 1] |

use crate::{f16, kernels, FloatKernel, Kernels};

/// Longest NPHD code in bytes (256 bits).
pub const NPHD_MAX_BYTES: usize = 32;

/// A distance metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Metric {
    /// Squared Euclidean distance.
    L2 = 0,
    /// Inner product, as the distance `1 - a·b`.
    Ip = 1,
    /// Cosine distance `1 - cos(a, b)`.
    Cos = 2,
    /// Hamming distance over packed bits.
    Hamming = 3,
    /// Normalized prefix Hamming distance over variable-length codes.
    Nphd = 4,
}

/// How vector components are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// 32-bit IEEE floats.
    F32 = 0,
    /// 16-bit IEEE floats.
    F16 = 1,
    /// Signed bytes.
    I8 = 2,
    /// Packed bits, 8 per byte, first component in the lowest bit of byte 0.
    B1 = 3,
    /// Scalar-quantized floats, one signed byte per component: a header of
    /// `scale: f32, norm²: f32`, then codes in ±127 with
    /// `x_i ≈ scale × code_i` (one scale per vector).
    Sq8 = 4,
    /// As `Sq8` with 16-bit codes in ±32767.
    Sq16 = 5,
}

/// Bytes of the `scale, norm²` header of a scalar-quantized vector.
pub const SQ_HEADER: usize = 8;

/// Errors from binding a metric to a storage type or encoding a code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// User error: this metric is not defined over this storage type.
    #[error("metric {metric:?} is not supported over dtype {dtype:?}")]
    Unsupported {
        /// The metric asked for.
        metric: Metric,
        /// The storage type asked for.
        dtype: DType,
    },
    /// User error: an NPHD code must be 1..=32 bytes (8..=256 bits).
    #[error("NPHD code of {len} bytes: codes must be 1..={max} bytes (8..=256 bits)", max = NPHD_MAX_BYTES)]
    BadCodeLength {
        /// The length received, in bytes.
        len: usize,
    },
}

impl Metric {
    /// Parses `l2`, `ip`, `cos` (or `cosine`), `hamming`, `nphd`.
    pub fn parse(s: &str) -> Option<Metric> {
        Some(match s.to_ascii_lowercase().as_str() {
            "l2" | "l2sq" | "euclidean" => Metric::L2,
            "ip" | "dot" | "inner_product" => Metric::Ip,
            "cos" | "cosine" => Metric::Cos,
            "hamming" => Metric::Hamming,
            "nphd" => Metric::Nphd,
            _ => return None,
        })
    }

    /// Decodes the on-disk tag.
    pub fn from_u8(v: u8) -> Option<Metric> {
        [
            Metric::L2,
            Metric::Ip,
            Metric::Cos,
            Metric::Hamming,
            Metric::Nphd,
        ]
        .into_iter()
        .find(|m| *m as u8 == v)
    }

    /// Whether this metric works on binary codes.
    pub fn is_binary(self) -> bool {
        matches!(self, Metric::Hamming | Metric::Nphd)
    }

    /// Canonical lower-case name (`parse` accepts it).
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Ip => "ip",
            Metric::Cos => "cos",
            Metric::Hamming => "hamming",
            Metric::Nphd => "nphd",
        }
    }
}

impl DType {
    /// Canonical short name (`parse` accepts it).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I8 => "i8",
            DType::B1 => "b1",
            DType::Sq8 => "sq8",
            DType::Sq16 => "sq16",
        }
    }

    /// Parses `f32`, `f16`, `i8`, `b1`.
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => DType::F32,
            "f16" | "float16" => DType::F16,
            "i8" | "int8" => DType::I8,
            "b1" | "bits" | "binary" => DType::B1,
            "sq8" => DType::Sq8,
            "sq16" => DType::Sq16,
            _ => return None,
        })
    }

    /// Decodes the on-disk tag.
    pub fn from_u8(v: u8) -> Option<DType> {
        [
            DType::F32,
            DType::F16,
            DType::I8,
            DType::B1,
            DType::Sq8,
            DType::Sq16,
        ]
        .into_iter()
        .find(|d| *d as u8 == v)
    }

    /// Bytes one vector of `dims` components occupies (unpadded). For `B1`
    /// under NPHD, `dims` is the longest code in bits and one length byte is
    /// added (see [`nphd_encode`]).
    pub fn bytes_per_vector(self, dims: usize, metric: Metric) -> usize {
        match self {
            DType::F32 => dims * 4,
            DType::F16 => dims * 2,
            DType::I8 => dims,
            DType::B1 if metric == Metric::Nphd => 1 + dims.div_ceil(8),
            DType::B1 => dims.div_ceil(8),
            DType::Sq8 => SQ_HEADER + dims,
            DType::Sq16 => SQ_HEADER + dims * 2,
        }
    }

    /// Whether this is a scalar-quantized float storage type.
    pub fn is_quantized(self) -> bool {
        matches!(self, DType::Sq8 | DType::Sq16)
    }
}

/// One code against a block of rows `stride` bytes apart, into f32s.
type RowsKernel = fn(&[u8], &[u8], usize, &mut [f32]);
/// One code against a few rows anywhere, into f32s.
type EachKernel = fn(&[u8], &[&[u8]], &mut [f32]);

/// The kernels of packed-bit metrics: one pair, a block of rows (Hamming,
/// NPHD), and a few scattered rows (Hamming).
#[derive(Clone, Copy)]
struct BitKernels {
    pair: fn(&[u8], &[u8]) -> u32,
    hamming_rows: RowsKernel,
    nphd_rows: RowsKernel,
    hamming_each: EachKernel,
}

#[derive(Clone, Copy)]
enum Kern {
    F32(FloatKernel<f32>),
    F16(FloatKernel<f16>),
    I8(FloatKernel<i8>),
    /// Packed bits (Hamming, NPHD).
    Bits(BitKernels),
    /// Scalar-quantized: the code dot product; the header does the rest.
    Sq8(FloatKernel<i8>),
    Sq16(FloatKernel<i16>),
}

/// A metric bound to a storage type and one kernel of the active table.
#[derive(Clone, Copy)]
pub struct Distance {
    metric: Metric,
    dtype: DType,
    one_minus: bool,
    kern: Kern,
    /// The kernel of [`Distance::eval_pair`] where it differs from
    /// `kern` (a unit-length-query cosine: the full cosine).
    pair: Option<FloatKernel<f32>>,
}

impl std::fmt::Debug for Distance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distance")
            .field("metric", &self.metric)
            .field("dtype", &self.dtype)
            .field("one_minus", &self.one_minus)
            .finish()
    }
}

impl Distance {
    /// Binds `metric` over `dtype` using the process-wide kernel table.
    ///
    /// With `normalized = true` and `Metric::Cos` over floats, the stored
    /// vectors and queries are promised to be unit length, and cosine
    /// distance is computed as `1 - a·b` (one FMA per component instead of
    /// three).
    pub fn new(metric: Metric, dtype: DType, normalized: bool) -> Result<Self, KernelError> {
        Self::with_kernels(kernels(), metric, dtype, normalized)
    }

    /// As [`Distance::new`], with an explicit kernel table.
    pub fn with_kernels(
        k: &Kernels,
        metric: Metric,
        dtype: DType,
        normalized: bool,
    ) -> Result<Self, KernelError> {
        use {DType as D, Metric as M};
        let unsupported = Err(KernelError::Unsupported { metric, dtype });
        let (kern, one_minus) = match (metric, dtype) {
            (M::L2, D::F32) => (Kern::F32(k.l2sq_f32), false),
            (M::Ip, D::F32) => (Kern::F32(k.dot_f32), true),
            (M::Cos, D::F32) if normalized => (Kern::F32(k.dot_f32), true),
            (M::Cos, D::F32) => (Kern::F32(k.cos_f32), false),
            (M::L2, D::F16) => (Kern::F16(k.l2sq_f16), false),
            (M::Ip, D::F16) => (Kern::F16(k.dot_f16), true),
            (M::Cos, D::F16) if normalized => (Kern::F16(k.dot_f16), true),
            (M::Cos, D::F16) => (Kern::F16(k.cos_f16), false),
            (M::L2, D::I8) => (Kern::I8(k.l2sq_i8), false),
            (M::Ip, D::I8) => (Kern::I8(k.dot_i8), true),
            (M::Cos, D::I8) => (Kern::I8(k.cos_i8), false),
            (M::Hamming, D::B1) | (M::Nphd, D::B1) => {
                let bits = BitKernels {
                    pair: k.hamming,
                    hamming_rows: k.hamming_rows,
                    nphd_rows: k.nphd_rows,
                    hamming_each: k.hamming_each,
                };
                (Kern::Bits(bits), false)
            }
            // Cosine over quantized storage requires unit vectors (the
            // index normalises before quantizing).
            (M::L2 | M::Ip, D::Sq8) => (Kern::Sq8(k.dot_i8), false),
            (M::Cos, D::Sq8) if normalized => (Kern::Sq8(k.dot_i8), false),
            (M::L2 | M::Ip, D::Sq16) => (Kern::Sq16(k.dot_i16), false),
            (M::Cos, D::Sq16) if normalized => (Kern::Sq16(k.dot_i16), false),
            _ => return unsupported,
        };
        Ok(Distance {
            metric,
            dtype,
            one_minus,
            kern,
            pair: None,
        })
    }

    /// Binds `metric` over `dtype` for queries of unit length against
    /// vectors stored as given: cosine over f32 is then `1 - q·b / |b|`
    /// (`cos_unit_f32`: the row's norm from the same pass as the dot
    /// product, about the cost of a dot product), and
    /// [`Distance::eval_pair`] compares two stored vectors by the full
    /// cosine. Every other combination is [`Distance::new`] with
    /// `normalized = false`.
    pub fn unit_query(metric: Metric, dtype: DType) -> Result<Self, KernelError> {
        let k = kernels();
        let mut d = Self::with_kernels(k, metric, dtype, false)?;
        if metric == Metric::Cos && dtype == DType::F32 {
            d.kern = Kern::F32(k.cos_unit_f32);
            d.pair = Some(k.cos_f32);
        }
        Ok(d)
    }

    /// Whether the first argument of [`Distance::eval`] must be a
    /// unit-length query ([`Distance::unit_query`] over cosine f32): two
    /// stored vectors are then compared with [`Distance::eval_pair`].
    pub fn wants_unit_query(&self) -> bool {
        self.pair.is_some()
    }

    /// Distance between two stored vectors (neither a normalised query):
    /// [`Distance::eval`] except for a unit-query cosine, where it is the
    /// full cosine.
    #[inline]
    pub fn eval_pair(&self, a: &[u8], b: &[u8]) -> f32 {
        match self.pair {
            Some(f) => f(cast::<f32>(a), cast::<f32>(b)),
            None => self.eval(a, b),
        }
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The storage type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Distance between two stored vectors given as raw storage bytes.
    ///
    /// Both slices must come from storage laid out by `dtype` (float vectors
    /// 4- or 2-byte aligned); a misaligned float slice panics rather than
    /// invoking undefined behaviour.
    #[inline]
    pub fn eval(&self, a: &[u8], b: &[u8]) -> f32 {
        let raw = match self.kern {
            Kern::F32(f) => f(cast::<f32>(a), cast::<f32>(b)),
            Kern::F16(f) => f(cast::<f16>(a), cast::<f16>(b)),
            Kern::I8(f) => f(cast::<i8>(a), cast::<i8>(b)),
            Kern::Bits(k) => {
                if self.metric == Metric::Nphd {
                    return nphd_with(k.pair, a, b);
                }
                return (k.pair)(a, b) as f32;
            }
            Kern::Sq8(f) => {
                let (h, ca, cb) = sq_parts(a, b);
                return self.sq_finish(h, f(cast::<i8>(ca), cast::<i8>(cb)));
            }
            Kern::Sq16(f) => {
                let (h, ca, cb) = sq_parts(a, b);
                return self.sq_finish(h, f(cast::<i16>(ca), cast::<i16>(cb)));
            }
        };
        if self.one_minus {
            1.0 - raw
        } else {
            raw
        }
    }
}

impl Distance {
    /// Distances from `q` to consecutive stored vectors: `rows` holds them
    /// back to back, `stride` bytes apart, and `out[i]` gets the distance
    /// to the `i`-th (as many as both hold). Equal to [`Distance::eval`]
    /// row by row; Hamming and NPHD run one batch kernel for the block.
    pub fn eval_rows(&self, q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
        if let Kern::Bits(k) = self.kern {
            return match self.metric {
                Metric::Nphd => (k.nphd_rows)(q, rows, stride, out),
                _ => (k.hamming_rows)(q, rows, stride, out),
            };
        }
        if stride == 0 {
            return;
        }
        for (o, r) in out.iter_mut().zip(rows.chunks_exact(stride)) {
            *o = self.eval(q, r);
        }
    }

    /// Whether [`Distance::eval_each`] runs one batch kernel rather than a
    /// call per row (Hamming): graph walks then gather a node's unvisited
    /// neighbours and score them in one call, where a pair costs little
    /// more than the call itself.
    pub fn batches_each(&self) -> bool {
        matches!(self.kern, Kern::Bits(_)) && self.metric == Metric::Hamming
    }

    /// Distances from `q` to each of `rows` (stored vectors anywhere):
    /// `out[i]` for `rows[i]`, as many as both hold. Equal to
    /// [`Distance::eval`] row by row.
    #[inline]
    pub fn eval_each(&self, q: &[u8], rows: &[&[u8]], out: &mut [f32]) {
        if let Kern::Bits(k) = self.kern {
            if self.metric == Metric::Hamming {
                return (k.hamming_each)(q, rows, out);
            }
        }
        for (o, r) in out.iter_mut().zip(rows) {
            *o = self.eval(q, r);
        }
    }

    /// Distance from the code dot product and both headers
    /// `[scale_a, norm²_a, scale_b, norm²_b]`.
    #[inline]
    fn sq_finish(&self, h: [f32; 4], codes_dot: f32) -> f32 {
        let dot = h[0] * h[2] * codes_dot;
        match self.metric {
            Metric::L2 => (h[1] + h[3] - 2.0 * dot).max(0.0),
            _ => 1.0 - dot,
        }
    }
}

/// Splits two scalar-quantized vectors into their headers and codes.
#[inline]
fn sq_parts<'a>(a: &'a [u8], b: &'a [u8]) -> ([f32; 4], &'a [u8], &'a [u8]) {
    let f = |x: &[u8], at: usize| {
        x.get(at..at + 4)
            .map_or(0.0, |w| f32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
    };
    let h = [f(a, 0), f(a, 4), f(b, 0), f(b, 4)];
    let body = |x: &'a [u8]| x.get(SQ_HEADER..).unwrap_or(&[]);
    (h, body(a), body(b))
}

/// Reinterprets storage bytes as a slice of `T` (f32, f16 or i8).
#[inline]
fn cast<T: Copy>(bytes: &[u8]) -> &[T] {
    let size = std::mem::size_of::<T>();
    assert!(
        (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()),
        "vector storage is not aligned for its element type"
    );
    // SAFETY: the pointer is aligned for T (checked above), the length is
    // rounded down so the slice stays inside `bytes`, and T is a plain
    // number type for which every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) }
}

/// Length in bytes of the code stored in an NPHD slot (its first byte).
#[inline]
pub fn nphd_code_len(stored: &[u8]) -> usize {
    stored.first().map_or(0, |&l| usize::from(l))
}

/// NPHD of two stored codes using the given Hamming kernel.
#[inline]
fn nphd_with(hamming: fn(&[u8], &[u8]) -> u32, a: &[u8], b: &[u8]) -> f32 {
    let m = nphd_code_len(a)
        .min(nphd_code_len(b))
        .min(a.len().saturating_sub(1))
        .min(b.len().saturating_sub(1));
    if m == 0 {
        return 1.0;
    }
    hamming(&a[1..=m], &b[1..=m]) as f32 / (8 * m) as f32
}

/// Encodes a code of 1..=`max_bytes` bytes into its stored form: one length
/// byte followed by the code, zero padded to `1 + max_bytes` bytes.
pub fn nphd_encode(code: &[u8], max_bytes: usize, out: &mut [u8]) -> Result<(), KernelError> {
    let max_bytes = max_bytes.min(NPHD_MAX_BYTES);
    if code.is_empty() || code.len() > max_bytes || out.len() < 1 + max_bytes {
        return Err(KernelError::BadCodeLength { len: code.len() });
    }
    out.fill(0);
    out[0] = code.len() as u8;
    out[1..=code.len()].copy_from_slice(code);
    Ok(())
}
