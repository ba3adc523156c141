//! [`Space`]: dimensions, metric and storage type, and the one place where
//! user vectors are validated and encoded into storage bytes.

use crate::{IndexError, Result};
use sagitta_kernels::{f16, nphd_encode, DType, Distance, Metric};

/// Alignment of every stored vector (bytes). The stride is a multiple of it.
pub const VECTOR_ALIGN: usize = 16;

/// A vector as the user hands it over.
#[derive(Debug, Clone, Copy)]
pub enum VectorRef<'a> {
    /// Float components, for f32 / f16 / i8 indexes.
    F32(&'a [f32]),
    /// Packed bits for a Hamming index (`ceil(dims / 8)` bytes), or a code
    /// of 1..=dims/8 bytes for an NPHD index.
    Bytes(&'a [u8]),
}

/// Shape and semantics of the vectors an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Components per vector (bits for binary indexes; the longest code in
    /// bits for NPHD).
    pub dims: usize,
    /// Distance metric.
    pub metric: Metric,
    /// Storage type.
    pub dtype: DType,
}

impl Space {
    /// Validates the combination.
    pub fn new(dims: usize, metric: Metric, dtype: DType) -> Result<Self> {
        if dims == 0 || dims > 65_536 {
            return Err(IndexError::InvalidParameter {
                name: "dims",
                value: dims.to_string(),
                reason: "must be in 1..=65536",
            });
        }
        if dtype == DType::B1 && !dims.is_multiple_of(8) {
            return Err(IndexError::InvalidParameter {
                name: "dims",
                value: dims.to_string(),
                reason: "binary vectors need a multiple of 8 bits",
            });
        }
        if metric == Metric::Nphd && dims > 256 {
            return Err(IndexError::InvalidParameter {
                name: "dims",
                value: dims.to_string(),
                reason: "NPHD codes are at most 256 bits",
            });
        }
        let space = Space {
            dims,
            metric,
            dtype,
        };
        space.distance()?;
        Ok(space)
    }

    /// Whether stored vectors are normalised at insert: only the
    /// scalar-quantized codes under cosine (sq8 / sq16, internal graph
    /// codes, compared with a dot product of unit vectors). Cosine over
    /// f32 / f16 / i8 stores the vector as given (`get` returns it) and
    /// compares with the full cosine, whose norms come from the same pass
    /// over the row as the dot product.
    pub fn normalizes(&self) -> bool {
        self.metric == Metric::Cos && self.dtype.is_quantized()
    }

    /// The distance function for this space. Cosine over f32 compares a
    /// unit-length query (as [`Space::encode_query`] writes it) with rows
    /// stored as given, by `1 - q·x / |x|` at the cost of a dot product;
    /// two stored vectors compare by the full cosine
    /// ([`Distance::eval_pair`]).
    pub fn distance(&self) -> Result<Distance> {
        if self.metric == Metric::Cos && self.dtype == DType::F32 {
            return Ok(Distance::unit_query(self.metric, self.dtype)?);
        }
        Ok(Distance::new(self.metric, self.dtype, self.normalizes())?)
    }

    /// Validates `v` and writes it into `out` as a query is compared:
    /// [`Space::encode`], then under cosine over f32 scaled to unit length
    /// (what [`Space::distance`] expects of the first argument).
    pub fn encode_query(&self, v: VectorRef<'_>, out: &mut [u8]) -> Result<()> {
        self.encode(v, out)?;
        if let (VectorRef::F32(x), true) = (v, self.unit_queries()) {
            let scale = self.cos_scale(x);
            for (o, v) in out.chunks_exact_mut(4).zip(x) {
                o.copy_from_slice(&(v * scale).to_ne_bytes());
            }
        }
        Ok(())
    }

    /// Whether queries are compared at unit length (cosine over f32).
    pub(crate) fn unit_queries(&self) -> bool {
        self.metric == Metric::Cos && self.dtype == DType::F32
    }

    /// A stored vector as a unit-length query (cosine over f32), `None`
    /// where a stored vector is its own query form.
    pub(crate) fn stored_as_query(&self, stored: &[u8]) -> Option<Vec<f32>> {
        if !self.unit_queries() {
            return None;
        }
        self.model_floats(stored)
    }

    /// Meaningful bytes per vector.
    pub fn vector_bytes(&self) -> usize {
        self.dtype.bytes_per_vector(self.dims, self.metric)
    }

    /// Bytes between consecutive vectors in storage (aligned).
    pub fn stride(&self) -> usize {
        self.vector_bytes().next_multiple_of(VECTOR_ALIGN)
    }

    /// Validates `v` and writes its stored form into `out`
    /// (`out.len() == self.stride()`, padding zeroed).
    pub fn encode(&self, v: VectorRef<'_>, out: &mut [u8]) -> Result<()> {
        out.fill(0);
        match (v, self.dtype) {
            (VectorRef::F32(x), DType::F32 | DType::F16 | DType::I8) => self.encode_floats(x, out),
            (VectorRef::F32(x), DType::Sq8 | DType::Sq16) => self.encode_quantized(x, out),
            (VectorRef::Bytes(b), DType::B1) => {
                if self.metric == Metric::Nphd {
                    nphd_encode(b, self.dims / 8, &mut out[..self.vector_bytes()])?;
                } else {
                    if b.len() != self.vector_bytes() {
                        return Err(IndexError::Dimensions {
                            expected: self.dims,
                            got: b.len() * 8,
                        });
                    }
                    out[..b.len()].copy_from_slice(b);
                }
                Ok(())
            }
            (VectorRef::F32(_), DType::B1) => Err(IndexError::WrongInputKind {
                expected: "packed-bit bytes",
                dtype: self.dtype,
            }),
            (VectorRef::Bytes(_), _) => Err(IndexError::WrongInputKind {
                expected: "float",
                dtype: self.dtype,
            }),
        }
    }

    /// Scalar quantization with one scale per vector: `scale = max|x_i| /
    /// R` (R = 127 or 32767), `code_i = round(x_i / scale)`, and the norm²
    /// of the dequantized vector (so identical vectors are at distance 0).
    fn encode_quantized(&self, x: &[f32], out: &mut [u8]) -> Result<()> {
        self.check_floats(x)?;
        let unit = self.cos_scale(x);
        let range = if self.dtype == DType::Sq8 {
            127.0
        } else {
            32767.0
        };
        let top = x.iter().fold(0.0f32, |m, v| m.max((v * unit).abs()));
        let scale = if top > 0.0 { top / range } else { 1.0 };
        let mut norm2 = 0.0f32;
        let body = &mut out[sagitta_kernels::SQ_HEADER..];
        for (i, v) in x.iter().enumerate() {
            let c = (v * unit / scale).round().clamp(-range, range);
            let dq = c * scale;
            norm2 += dq * dq;
            if self.dtype == DType::Sq8 {
                body[i] = (c as i8) as u8;
            } else {
                body[2 * i..2 * i + 2].copy_from_slice(&(c as i16).to_ne_bytes());
            }
        }
        out[0..4].copy_from_slice(&scale.to_ne_bytes());
        out[4..8].copy_from_slice(&norm2.to_ne_bytes());
        Ok(())
    }

    fn check_floats(&self, x: &[f32]) -> Result<()> {
        if x.len() != self.dims {
            return Err(IndexError::Dimensions {
                expected: self.dims,
                got: x.len(),
            });
        }
        if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(IndexError::NotFinite { index, value });
        }
        Ok(())
    }

    /// `1 / |x|` under cosine (1 for a zero vector), 1 otherwise: the
    /// factor encoding applies before storing.
    fn cos_scale(&self, x: &[f32]) -> f32 {
        if self.metric != Metric::Cos {
            return 1.0;
        }
        let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            1.0 / norm
        } else {
            1.0
        }
    }

    /// Copies `x` into `out` as the float query the index compares with:
    /// unit length under cosine (IVF estimators need it; the full cosine
    /// of f32 rows does not mind), unchanged otherwise.
    pub fn float_query(&self, x: &[f32], out: &mut [f32]) {
        let scale = self.cos_scale(x);
        for (o, v) in out.iter_mut().zip(x) {
            *o = v * scale;
        }
    }

    fn encode_floats(&self, x: &[f32], out: &mut [u8]) -> Result<()> {
        self.check_floats(x)?;
        match self.dtype {
            // Every metric stores the vector as given (cosine included:
            // its kernels compute the norms), so `get` returns it.
            DType::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(x) {
                    o.copy_from_slice(&v.to_ne_bytes());
                }
            }
            DType::F16 => {
                // Under cosine (scale invariant) a vector past f16's range
                // is stored as its unit vector rather than as infinities.
                let overflows =
                    self.metric == Metric::Cos && x.iter().any(|v| !f16::from_f32(*v).is_finite());
                let scale = if overflows { self.cos_scale(x) } else { 1.0 };
                for (o, v) in out.chunks_exact_mut(2).zip(x) {
                    o.copy_from_slice(&f16::from_f32(v * scale).to_ne_bytes());
                }
            }
            DType::I8 => {
                // Cosine is scale invariant: integer-valued inputs in the
                // i8 range are stored as given (`get` returns them), any
                // other vector as its unit vector mapped onto [-127, 127].
                let as_given = self.metric != Metric::Cos || x.iter().all(|v| fits_i8(*v));
                let scale = if as_given { 1.0 } else { self.cos_scale(x) };
                for (i, (o, v)) in out.iter_mut().zip(x).enumerate() {
                    let q = if self.metric == Metric::Cos {
                        if as_given {
                            *v
                        } else {
                            (v * scale * 127.0).round()
                        }
                    } else {
                        if !fits_i8(*v) {
                            return Err(IndexError::OutOfRange {
                                index: i,
                                value: *v,
                                metric: if self.metric == Metric::L2 {
                                    "l2"
                                } else {
                                    "ip"
                                },
                            });
                        }
                        *v
                    };
                    *o = (q as i8) as u8;
                }
            }
            DType::B1 | DType::Sq8 | DType::Sq16 => {
                return Err(IndexError::WrongInputKind {
                    expected: "packed-bit bytes",
                    dtype: self.dtype,
                })
            }
        }
        Ok(())
    }

    /// The stored vector decoded to floats as a model compares them: unit
    /// length under cosine (IVF training and codes, whose estimators
    /// assume it), else as [`Space::decode_floats`]. A zero vector stays
    /// zero.
    pub fn model_floats(&self, stored: &[u8]) -> Option<Vec<f32>> {
        let mut x = self.decode_floats(stored)?;
        if self.metric == Metric::Cos {
            let scale = self.cos_scale(&x);
            x.iter_mut().for_each(|v| *v *= scale);
        }
        Some(x)
    }

    /// Decodes stored bytes back into floats (float dtypes) for `get`:
    /// the vector as given for f32, as rounded to f16 for f16, as given
    /// for integer-valued i8 inputs (see [`Space::encode`]). Segments
    /// written before vectors were kept as given (format 4 and older) hold
    /// cosine vectors at unit length, and return those.
    pub fn decode_floats(&self, stored: &[u8]) -> Option<Vec<f32>> {
        match self.dtype {
            DType::F32 => Some(
                stored[..self.vector_bytes()]
                    .chunks_exact(4)
                    .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            DType::F16 => Some(
                stored[..self.vector_bytes()]
                    .chunks_exact(2)
                    .map(|b| f16::from_ne_bytes([b[0], b[1]]).to_f32())
                    .collect(),
            ),
            DType::I8 => Some(
                stored[..self.dims]
                    .iter()
                    .map(|&b| f32::from(b as i8))
                    .collect(),
            ),
            DType::Sq8 | DType::Sq16 => {
                let scale = stored
                    .get(0..4)
                    .map_or(0.0, |w| f32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
                let body = stored.get(sagitta_kernels::SQ_HEADER..)?;
                Some(if self.dtype == DType::Sq8 {
                    body.iter()
                        .take(self.dims)
                        .map(|&b| f32::from(b as i8) * scale)
                        .collect()
                } else {
                    body.chunks_exact(2)
                        .take(self.dims)
                        .map(|w| f32::from(i16::from_ne_bytes([w[0], w[1]])) * scale)
                        .collect()
                })
            }
            DType::B1 => None,
        }
    }
}

/// Whether `v` is an integer in the i8 range (stored exactly as i8).
fn fits_i8(v: f32) -> bool {
    v.fract() == 0.0 && (-128.0..=127.0).contains(&v)
}
