//! The BERT encoder of all-MiniLM-L6-v2, inference only, on the CPU.
//!
//! The four dense products of a layer run on weights packed once at load
//! ([`PackedMatrix`], `sagitta-kernels`), by default as 8-bit integers with
//! one scale per column and group of 64 inputs, multiplied in integers
//! (`WeightType::Q8Grouped`, [`crate::Precision::Q8`]): 11 MB that stay in
//! the CPU's last-level cache between queries, where 90 MB of `f32` are read
//! from memory each time. GELU and the residual sums with their LayerNorms
//! and the attention itself (small per-head products and the masked
//! softmax) are `sagitta_kernels::nn`'s; the rest is plain loops over the
//! rows (in per-thread buffers kept between batches): the embedding lookup, the
//! pooling.
//! Weight names follow the Hugging Face `BertModel` checkpoint
//! (`embeddings.*`, `encoder.layer.N.*`); the pooler is not used.

use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};
use sagitta_kernels::matmul::{PackedMatrix, WeightType};
use sagitta_kernels::nn;

use crate::Precision;

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

/// A linear layer: packed `in × out` weights and the bias.
struct Linear {
    w: PackedMatrix,
    b: Vec<f32>,
}

impl Linear {
    /// `out = x · w + b` over `x.len() / in` rows.
    fn apply(&self, x: &[f32], out: &mut [f32]) {
        let rows = x.len() / self.w.k();
        self.w
            .matmul(x, rows, &self.b, &mut out[..rows * self.w.n()]);
    }
}

struct Layer {
    /// Query, key and value projections side by side, `hidden × 3·hidden`;
    /// the query part (weights and bias) pre-scaled by `1/sqrt(head_dim)`.
    qkv: Linear,
    out: Linear,
    norm1: Norm,
    ff1: Linear,
    ff2: Linear,
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
}

/// The tensors of a safetensors file, read as `f32`.
struct Weights<'a> {
    file: SafeTensors<'a>,
}

impl Weights<'_> {
    /// Tensor `name` (with or without the `bert.` prefix of checkpoints
    /// saved from `BertForX`), checked to have `shape` and finite values.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let t = self
            .file
            .tensor(name)
            .or_else(|_| self.file.tensor(&format!("bert.{name}")))
            .map_err(|_| format!("tensor {name} is missing"))?;
        if t.shape() != shape {
            return Err(format!(
                "tensor {name} has shape {:?}, expected {shape:?}",
                t.shape()
            ));
        }
        let bytes = t.data();
        let v: Vec<f32> = match t.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => return Err(format!("tensor {name} is {other:?}, not a float type")),
        };
        if v.iter().any(|v| !v.is_finite()) {
            return Err(format!("tensor {name} holds NaN or infinite values"));
        }
        Ok(v)
    }

    fn norm(&self, prefix: &str, n: usize) -> Result<Norm, String> {
        Ok(Norm {
            weight: self.get(&format!("{prefix}.weight"), &[n])?,
            bias: self.get(&format!("{prefix}.bias"), &[n])?,
        })
    }

    /// A linear layer's weight (`out × in` in the file) as `in × out`,
    /// times `scale`.
    fn weight(&self, name: &str, inp: usize, out: usize, scale: f32) -> Result<Vec<f32>, String> {
        let w = self.get(name, &[out, inp])?;
        let mut t = vec![0f32; inp * out];
        for (o, row) in w.chunks_exact(inp).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                t[i * out + o] = v * scale;
            }
        }
        Ok(t)
    }

    fn linear(
        &self,
        prefix: &str,
        inp: usize,
        out: usize,
        ty: WeightType,
    ) -> Result<Linear, String> {
        Ok(Linear {
            w: PackedMatrix::pack(
                &self.weight(&format!("{prefix}.weight"), inp, out, 1.0)?,
                inp,
                out,
                ty,
            ),
            b: self.get(&format!("{prefix}.bias"), &[out])?,
        })
    }
}

impl Bert {
    /// Loads the encoder from the bytes of `model.safetensors`, its dense
    /// weights stored at `precision`. The error says what is wrong with the
    /// file.
    pub fn load(bytes: &[u8], config: Config, precision: Precision) -> Result<Bert, String> {
        let file = SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
        let w = Weights { file };
        let c = config;
        let (h, i) = (c.hidden, c.intermediate);
        if h % c.heads != 0 {
            return Err(format!(
                "hidden size {h} not a multiple of {} heads",
                c.heads
            ));
        }
        let scale = (1.0 / ((h / c.heads) as f64).sqrt()) as f32;

        // The layers are read and packed side by side (on the current
        // rayon pool): packing is most of the time an open takes.
        let layer = |l: usize| -> Result<Layer, String> {
            let p = format!("encoder.layer.{l}");
            let a = format!("{p}.attention.self");
            // Q | K | V side by side: row `in` of the joined matrix is the
            // three rows `in` of the parts.
            let parts = [
                w.weight(&format!("{a}.query.weight"), h, h, scale)?,
                w.weight(&format!("{a}.key.weight"), h, h, 1.0)?,
                w.weight(&format!("{a}.value.weight"), h, h, 1.0)?,
            ];
            let mut qkv_w = Vec::with_capacity(3 * h * h);
            for row in 0..h {
                for part in &parts {
                    qkv_w.extend_from_slice(&part[row * h..(row + 1) * h]);
                }
            }
            let mut qkv_b = w.get(&format!("{a}.query.bias"), &[h])?;
            qkv_b.iter_mut().for_each(|v| *v *= scale);
            qkv_b.extend(w.get(&format!("{a}.key.bias"), &[h])?);
            qkv_b.extend(w.get(&format!("{a}.value.bias"), &[h])?);
            Ok(Layer {
                qkv: Linear {
                    w: PackedMatrix::pack(&qkv_w, h, 3 * h, precision.attention()),
                    b: qkv_b,
                },
                out: w.linear(
                    &format!("{p}.attention.output.dense"),
                    h,
                    h,
                    precision.attention(),
                )?,
                norm1: w.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                ff1: w.linear(
                    &format!("{p}.intermediate.dense"),
                    h,
                    i,
                    precision.attention(),
                )?,
                ff2: w.linear(
                    &format!("{p}.output.dense"),
                    i,
                    h,
                    precision.feed_forward_out(),
                )?,
                norm2: w.norm(&format!("{p}.output.LayerNorm"), h)?,
            })
        };
        let layers = (0..c.layers)
            .into_par_iter()
            .map(layer)
            .collect::<Result<Vec<_>, _>>()?;
        let token_types = w.get(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab, h],
        )?;
        Ok(Bert {
            config,
            word: w.get("embeddings.word_embeddings.weight", &[c.vocab, h])?,
            position: w.get(
                "embeddings.position_embeddings.weight",
                &[c.max_positions, h],
            )?,
            token_type: token_types[..h].to_vec(),
            norm: w.norm("embeddings.LayerNorm", h)?,
            layers,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Embeds a batch of word-piece id rows (each at most `max_tokens`
    /// long, ids below `vocab`): mean-pooled, unit-length vectors,
    /// `rows.len() × hidden` row major.
    pub fn embed_batch(&self, rows: &[&[u32]]) -> Result<Vec<f32>, String> {
        let c = &self.config;
        let h = c.hidden;
        let b = rows.len();
        let lens: Vec<usize> = rows.iter().map(|r| r.len().max(1)).collect();
        let l = lens.iter().copied().max().unwrap_or(1);
        if l > c.max_positions {
            return Err(format!("{l} word pieces, more than {}", c.max_positions));
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
                nn::layer_norm(dst, &self.norm.weight, &self.norm.bias, c.eps);
            }
        }

        SCRATCH.with_borrow_mut(|scratch| {
            scratch.fit(b * l, c);
            for layer in &self.layers {
                self.layer(layer, &mut x, &lens, scratch);
            }
            if scratch.inner.capacity() > RETAINED_SCRATCH {
                *scratch = Scratch::default();
            }
        });

        // Mean over the real tokens, then L2 normalisation (torch's
        // F.normalize: divide by max(norm, 1e-12)).
        let mut out = vec![0f32; b * h];
        for (r, (dst, &len)) in out.chunks_exact_mut(h).zip(&lens).enumerate() {
            for row in x[r * l * h..][..len * h].chunks_exact(h) {
                for (d, &s) in dst.iter_mut().zip(row) {
                    *d += s;
                }
            }
            let inv_len = 1.0 / len as f32;
            dst.iter_mut().for_each(|d| *d *= inv_len);
            let norm = dst.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            dst.iter_mut().for_each(|d| *d /= norm);
        }
        Ok(out)
    }

    /// One encoder layer over `x` (`b·l × h`, `l` the padded length), in
    /// place.
    fn layer(&self, layer: &Layer, x: &mut [f32], lens: &[usize], s: &mut Scratch) {
        let c = &self.config;
        let (h, heads) = (c.hidden, c.heads);
        let l = x.len() / h / lens.len();

        let tokens = x.len() / h;
        let qkv = &mut s.qkv[..tokens * 3 * h];
        let context = &mut s.context[..tokens * h];
        let projected = &mut s.projected[..tokens * h];
        let inner = &mut s.inner[..tokens * c.intermediate];

        // Self-attention, then LayerNorm(x + attention · out + bias).
        layer.qkv.apply(x, qkv);
        nn::attention(qkv, lens, l, heads, context);
        layer.out.apply(context, projected);
        add_norm(x, projected, &layer.norm1, c.eps);

        // Feed-forward, then LayerNorm(x + ff2(gelu(ff1(x)))).
        layer.ff1.apply(x, inner);
        nn::gelu(inner);
        layer.ff2.apply(inner, projected);
        add_norm(x, projected, &layer.norm2, c.eps);
    }
}

thread_local! {
    /// Each thread's layer buffers, kept from batch to batch (a query's
    /// would otherwise be allocated and cleared at every call). Borrowed
    /// for a whole batch: nothing inside one may wait on rayon (a job
    /// stolen onto this thread meanwhile would find them borrowed).
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Floats of the largest buffer a thread keeps after a batch (1 MiB;
/// about 170 word pieces); a larger batch's buffers are freed after it.
const RETAINED_SCRATCH: usize = 1 << 18;

/// The buffers a batch's layers write (every value written before it is
/// read: the products and the attention fill their outputs).
#[derive(Default)]
struct Scratch {
    qkv: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    inner: Vec<f32>,
}

impl Scratch {
    /// Grows the buffers to hold `tokens` rows.
    fn fit(&mut self, tokens: usize, c: &Config) {
        let grow = |v: &mut Vec<f32>, len: usize| {
            if v.len() < len {
                v.resize(len, 0.0);
            }
        };
        grow(&mut self.qkv, tokens * 3 * c.hidden);
        grow(&mut self.context, tokens * c.hidden);
        grow(&mut self.projected, tokens * c.hidden);
        grow(&mut self.inner, tokens * c.intermediate);
    }
}

/// `x = LayerNorm(x + y)`, row by row.
fn add_norm(x: &mut [f32], y: &[f32], norm: &Norm, eps: f32) {
    nn::add_layer_norm(x, y, &norm.weight, &norm.bias, eps);
}
