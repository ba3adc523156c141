//! The BERT encoder of all-MiniLM-L6-v2, inference only, on the CPU.
//!
//! The five dense matrix products of a layer run on `candle-core` tensors
//! (the `gemm` crate). Everything else is plain loops over the rows, each
//! reading the previous product in place: the embedding lookup, the
//! attention itself (small per-head products and the masked softmax), bias
//! and GELU, bias and residual and LayerNorm, the pooling. Weight names
//! follow the Hugging Face `BertModel` checkpoint (`embeddings.*`,
//! `encoder.layer.N.*`); the pooler is not used.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Storage, Tensor};

/// The shape of a BERT model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    pub eps: f32,
    /// Word pieces a text is truncated to (sentence-transformers'
    /// `max_seq_length`).
    pub max_tokens: usize,
}

impl Config {
    /// sentence-transformers/all-MiniLM-L6-v2 (`config.json` and
    /// `sentence_bert_config.json`).
    pub const MINILM_L6: Config = Config {
        vocab: 30522,
        hidden: 384,
        layers: 6,
        heads: 12,
        intermediate: 1536,
        max_positions: 512,
        type_vocab: 2,
        eps: 1e-12,
        max_tokens: 256,
    };
}

/// LayerNorm weight and bias.
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    /// Query, key and value projections side by side, `hidden × 3·hidden`
    /// (input-major, so `x · w`); the query part is pre-scaled by
    /// `1/sqrt(head_dim)`.
    qkv_w: Tensor,
    qkv_b: Vec<f32>,
    out_w: Tensor,
    out_b: Vec<f32>,
    norm1: Norm,
    ff1_w: Tensor,
    ff1_b: Vec<f32>,
    ff2_w: Tensor,
    ff2_b: Vec<f32>,
    norm2: Norm,
}

/// A loaded BERT encoder.
pub(crate) struct Bert {
    config: Config,
    /// `vocab × hidden`.
    word: Vec<f32>,
    /// `max_positions × hidden`.
    position: Vec<f32>,
    /// Row 0 of the token type embeddings (every token is of type 0).
    token_type: Vec<f32>,
    norm: Norm,
    layers: Vec<Layer>,
    device: Device,
}

/// Reads the weights from the bytes of a safetensors file.
struct Weights {
    tensors: HashMap<String, Tensor>,
}

impl Weights {
    fn get(&self, name: &str, shape: &[usize]) -> std::result::Result<Tensor, String> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("tensor {name} is missing"))?;
        if t.dims() != shape {
            return Err(format!(
                "tensor {name} has shape {:?}, expected {shape:?}",
                t.dims()
            ));
        }
        let t = t
            .to_dtype(DType::F32)
            .and_then(|t| t.contiguous())
            .map_err(|e| e.to_string())?;
        let finite =
            with_f32(&t, |v| v.iter().all(|v| v.is_finite())).map_err(|e| e.to_string())?;
        if !finite {
            return Err(format!("tensor {name} holds NaN or infinite values"));
        }
        Ok(t)
    }

    fn vec(&self, name: &str, shape: &[usize]) -> std::result::Result<Vec<f32>, String> {
        self.get(name, shape)?
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .map_err(|e| e.to_string())
    }

    fn norm(&self, prefix: &str, n: usize) -> std::result::Result<Norm, String> {
        Ok(Norm {
            weight: self.vec(&format!("{prefix}.weight"), &[n])?,
            bias: self.vec(&format!("{prefix}.bias"), &[n])?,
        })
    }

    /// A linear layer's weight (`out × in` in the file) as `in × out`.
    fn linear(&self, name: &str, inp: usize, out: usize) -> std::result::Result<Tensor, String> {
        self.get(name, &[out, inp])?
            .t()
            .and_then(|t| t.contiguous())
            .map_err(|e| e.to_string())
    }
}

impl Bert {
    /// Loads the encoder from the bytes of `model.safetensors`. The error
    /// says what is wrong with the file.
    pub fn load(bytes: &[u8], config: Config) -> std::result::Result<Bert, String> {
        let device = Device::Cpu;
        let tensors =
            candle_core::safetensors::load_buffer(bytes, &device).map_err(|e| e.to_string())?;
        // Checkpoints saved from BertForX prefix the names with `bert.`.
        let tensors = tensors
            .into_iter()
            .map(|(k, v)| (k.strip_prefix("bert.").map(str::to_string).unwrap_or(k), v))
            .collect();
        let w = Weights { tensors };
        let c = config;
        let (h, i) = (c.hidden, c.intermediate);
        if h % c.heads != 0 {
            return Err(format!(
                "hidden size {h} not a multiple of {} heads",
                c.heads
            ));
        }
        let scale = 1.0 / ((h / c.heads) as f64).sqrt();
        let ce = |e: candle_core::Error| e.to_string();

        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let p = format!("encoder.layer.{l}");
            let a = format!("{p}.attention");
            let q_w = w.linear(&format!("{a}.self.query.weight"), h, h)?;
            let q_w = q_w.affine(scale, 0.0).map_err(ce)?;
            let k_w = w.linear(&format!("{a}.self.key.weight"), h, h)?;
            let v_w = w.linear(&format!("{a}.self.value.weight"), h, h)?;
            let mut qkv_b = w.vec(&format!("{a}.self.query.bias"), &[h])?;
            qkv_b
                .iter_mut()
                .for_each(|v| *v = (*v as f64 * scale) as f32);
            qkv_b.extend(w.vec(&format!("{a}.self.key.bias"), &[h])?);
            qkv_b.extend(w.vec(&format!("{a}.self.value.bias"), &[h])?);
            layers.push(Layer {
                qkv_w: Tensor::cat(&[q_w, k_w, v_w], 1).map_err(ce)?,
                qkv_b,
                out_w: w.linear(&format!("{a}.output.dense.weight"), h, h)?,
                out_b: w.vec(&format!("{a}.output.dense.bias"), &[h])?,
                norm1: w.norm(&format!("{a}.output.LayerNorm"), h)?,
                ff1_w: w.linear(&format!("{p}.intermediate.dense.weight"), h, i)?,
                ff1_b: w.vec(&format!("{p}.intermediate.dense.bias"), &[i])?,
                ff2_w: w.linear(&format!("{p}.output.dense.weight"), i, h)?,
                ff2_b: w.vec(&format!("{p}.output.dense.bias"), &[h])?,
                norm2: w.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        let token_types = w.vec(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab, h],
        )?;
        Ok(Bert {
            config,
            word: w.vec("embeddings.word_embeddings.weight", &[c.vocab, h])?,
            position: w.vec(
                "embeddings.position_embeddings.weight",
                &[c.max_positions, h],
            )?,
            token_type: token_types[..h].to_vec(),
            norm: w.norm("embeddings.LayerNorm", h)?,
            layers,
            device,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Embeds a batch of word-piece id rows (each at most `max_tokens`
    /// long, ids below `vocab`): mean-pooled, unit-length vectors,
    /// `rows.len() × hidden` row major.
    pub fn embed_batch(&self, rows: &[&[u32]]) -> Result<Vec<f32>> {
        let c = &self.config;
        let h = c.hidden;
        let b = rows.len();
        let lens: Vec<usize> = rows.iter().map(|r| r.len().max(1)).collect();
        let l = lens.iter().copied().max().unwrap_or(1);
        if l > c.max_positions {
            candle_core::bail!("{l} word pieces, more than {}", c.max_positions);
        }

        // Embeddings: word + position + token type 0, then LayerNorm.
        // Padding rows stay zero; they are never attended to or pooled.
        let mut x = vec![0f32; b * l * h];
        for (r, ids) in rows.iter().enumerate() {
            for (p, &id) in ids.iter().enumerate() {
                let dst = &mut x[(r * l + p) * h..][..h];
                let word = &self.word[id as usize * h..][..h];
                let pos = &self.position[p * h..][..h];
                for (((d, &w), &q), &t) in dst.iter_mut().zip(word).zip(pos).zip(&self.token_type) {
                    *d = w + q + t;
                }
                layer_norm(dst, &self.norm, c.eps);
            }
        }

        let mut hidden = Tensor::from_vec(x, (b * l, h), &self.device)?;
        for layer in &self.layers {
            hidden = self.layer(layer, &hidden, &lens)?;
        }

        // Mean over the real tokens, then L2 normalisation (torch's
        // F.normalize: divide by max(norm, 1e-12)).
        let mut out = vec![0f32; b * h];
        with_f32(&hidden, |states| {
            for (r, (dst, &len)) in out.chunks_exact_mut(h).zip(&lens).enumerate() {
                for row in states[r * l * h..][..len * h].chunks_exact(h) {
                    for (d, &s) in dst.iter_mut().zip(row) {
                        *d += s;
                    }
                }
                let inv_len = 1.0 / len as f32;
                dst.iter_mut().for_each(|d| *d *= inv_len);
                let norm = dst.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                dst.iter_mut().for_each(|d| *d /= norm);
            }
        })?;
        Ok(out)
    }

    /// One encoder layer over `hidden` (`b·l × h`, `l` the padded length).
    /// The matrix products run in candle; everything between them is one
    /// pass over the product, reading it in place.
    fn layer(&self, layer: &Layer, hidden: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let c = &self.config;
        let (h, heads) = (c.hidden, c.heads);
        let hd = h / heads;
        let b = lens.len();
        let l = hidden.dims()[0] / b;
        let dev = &self.device;
        let shape = Shape { l, heads, hd };

        // Self-attention.
        let qkv = hidden.matmul(&layer.qkv_w)?;
        let context = with_f32(&qkv, |x| shape.attention(x, &layer.qkv_b, lens))?;
        drop(qkv);
        let context = Tensor::from_vec(context, (b * l, h), dev)?;
        let attended = context.matmul(&layer.out_w)?;
        let hidden = with_f32(&attended, |y| {
            with_f32(hidden, |r| {
                add_norm(y, &layer.out_b, r, &layer.norm1, c.eps)
            })
        })??;
        let hidden = Tensor::from_vec(hidden, (b * l, h), dev)?;

        // Feed-forward.
        let inner = hidden.matmul(&layer.ff1_w)?;
        let inner = with_f32(&inner, |x| bias_gelu(x, &layer.ff1_b))?;
        let inner = Tensor::from_vec(inner, (b * l, c.intermediate), dev)?;
        let out = inner.matmul(&layer.ff2_w)?;
        let out = with_f32(&out, |y| {
            with_f32(&hidden, |r| {
                add_norm(y, &layer.ff2_b, r, &layer.norm2, c.eps)
            })
        })??;
        Tensor::from_vec(out, (b * l, h), dev)
    }
}

/// Runs `f` on the values of a contiguous f32 CPU tensor, in place.
fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("tensor not contiguous");
    };
    match &*storage {
        Storage::Cpu(cpu) => Ok(f(&cpu.as_slice::<f32>()?[start..end])),
        _ => candle_core::bail!("tensor not on the CPU"),
    }
}

/// The attention layout of a batch: texts padded to `l` word pieces,
/// `heads` heads of `hd` dimensions.
#[derive(Clone, Copy)]
struct Shape {
    l: usize,
    heads: usize,
    hd: usize,
}

impl Shape {
    /// Multi-head self-attention from the QKV product `x` (`b·l × 3h`,
    /// queries | keys | values, queries pre-scaled) plus its bias: for each
    /// text and head, softmax over the text's real keys of the query · key
    /// products, times the values. Returns `b·l × h`; rows of padding stay
    /// zero. Plain loops: with 32-dimensional heads and short texts these
    /// products are a few percent of the work, and small for gemm.
    fn attention(&self, x: &[f32], bias: &[f32], lens: &[usize]) -> Vec<f32> {
        let Shape { l, heads, hd } = *self;
        let h = heads * hd;
        let mut out = vec![0f32; x.len() / 3];
        let mut qkv = vec![0f32; l * 3 * h];
        let mut weights = vec![0f32; l];
        for ((text, dst), &len) in x
            .chunks_exact(l * 3 * h)
            .zip(out.chunks_exact_mut(l * h))
            .zip(lens)
        {
            for (row, src) in qkv
                .chunks_exact_mut(3 * h)
                .zip(text.chunks_exact(3 * h))
                .take(len)
            {
                for ((d, &s), &b) in row.iter_mut().zip(src).zip(bias) {
                    *d = s + b;
                }
            }
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
        out
    }
}

/// Dot product with eight running sums (vectorises).
#[inline]
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

/// `LayerNorm(y + bias + residual)`, row by row.
fn add_norm(y: &[f32], bias: &[f32], residual: &[f32], norm: &Norm, eps: f32) -> Vec<f32> {
    let h = bias.len();
    let mut out = vec![0f32; y.len()];
    for ((dst, y), r) in out
        .chunks_exact_mut(h)
        .zip(y.chunks_exact(h))
        .zip(residual.chunks_exact(h))
    {
        for (((d, &y), &r), &b) in dst.iter_mut().zip(y).zip(r).zip(bias) {
            *d = y + r + b;
        }
        layer_norm(dst, norm, eps);
    }
    out
}

/// `gelu(x + bias)` over the rows of `x`, with the exact (erf) GELU.
fn bias_gelu(x: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (dst, row) in out
        .chunks_exact_mut(bias.len())
        .zip(x.chunks_exact(bias.len()))
    {
        for ((d, &x), &b) in dst.iter_mut().zip(row).zip(bias) {
            let x = x + b;
            *d = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
    out
}

/// The error function in f32 without branches (so loops over it
/// vectorise): the rational approximation Eigen and TensorFlow use, within
/// a few units in the last place of f32 over the whole line. (Plain
/// multiply-adds: `mul_add` is a library call without the FMA target
/// feature.)
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

/// In-place LayerNorm of one row.
fn layer_norm(row: &mut [f32], norm: &Norm, eps: f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &w), &b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_libm() {
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f32 * 1e-4;
            let want = candle_core::cpu::erf::erf_f64(x as f64);
            worst = worst.max((erf(x) as f64 - want).abs());
        }
        assert!(worst < 1e-6, "worst erf error {worst}");
    }
}
