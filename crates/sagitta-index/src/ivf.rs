//! IVF-RaBitQ: an inverted file of k-means partitions whose vectors are
//! stored as RaBitQ codes (Gao & Long, SIGMOD 2024) with optional extra
//! bits (the extended RaBitQ of Gao et al., SIGMOD 2025), scored with a
//! SIMD fast scan and reranked from the full-precision vectors.
//!
//! ## Encoding (per vector `o`, assigned to its nearest centroid `c`)
//! `r = P(o − c)`, with `P` the [`Rotation`] (`D` = padded dimensions).
//! * **1-bit code**: `b_i = [r_i > 0]`. With `s_i = 2b_i − 1`, the RaBitQ
//!   estimator of `⟨r, v⟩` for any query-side vector `v` is
//!   `F1 · Σ s_i v_i` where `F1 = |r|² / Σ|r_i|`. Its error is at most
//!   `ε0 · |v| · E1` with high probability, `E1 = |r| · sqrt(1 − a²) /
//!   (a · sqrt(D − 1))`, `a = Σ|r_i| / (|r| √D)` (ε0 = 1.9).
//! * **Extra bits** (`bits` − 1 of them): the grid vector
//!   `u_i = s_i (y_i + ½)`, `y_i ∈ [0, 2^(bits−1) − 1]`, chosen to
//!   maximise its cosine with `r` (a scan of the scale `t` in
//!   `y_i = min(⌊t |r_i|/|r|⌋, max)`). Stored as `z_i = y_i` where
//!   `b_i = 1` and `max − y_i` where `b_i = 0`, so the unsigned code
//!   `b_i · 2^(bits−1) + z_i` is `u_i + (2^bits − 1)/2`. Estimator:
//!   `⟨r, v⟩ ≈ Fx · ⟨u, v⟩` with `Fx = |r|² / ⟨u, r⟩`.
//! * Per vector: `[F1, |r|², E1, Fx]` as 4 × f32.
//!
//! ## Query
//! The query is rotated once; per probed partition, `v = Pq − Pc` (L2) or
//! `v = Pq` (inner product / cosine, where `⟨o, q⟩ = ⟨c, q⟩ + ⟨r, Pq⟩`).
//! A 16-entry table per 4 coordinates (sums of `v` over every subset) is
//! quantised to `u8` and the 1-bit codes are scored 32 at a time with the
//! fast-scan kernel. Each estimate minus its error bound is a lower bound
//! of the distance: a vector whose bound cannot enter the current
//! candidate set is dropped without evaluating its extra bits. Survivors'
//! extra-bit planes are scored with byte-wise tables (8 coordinates per
//! lookup). With `refine > 0` the best `refine` candidates are re-scored
//! exactly from the full-precision vectors (memory-mapped in sealed
//! segments, so only they are paged in) and the best `k` returned.
//!
//! ## Memory layout of a partition ([`ListRef`])
//! `slots` (u32 per vector, in list order), `codes` (1-bit codes in the
//! fast-scan block layout of [`sagitta_kernels::fastscan`], 32 vectors per
//! block, the last block zero-padded), `factors` (4 f32 per vector) and
//! `ex` (`bits − 1` planes of `D/8` bytes per vector).

use crate::kmeans::{self, nearest, Progress};
use crate::rotation::Rotation;
use crate::topk::{Cand, KeyedCand, Neighbor};
use crate::view::GraphView;
use crate::{Bitset, IndexError, Result};
use sagitta_kernels::fastscan::{set_block_nibble, MAX_GROUPS_PER_CALL};
use sagitta_kernels::{kernels, Distance, Metric};
use std::collections::{BinaryHeap, HashMap};

/// Default target of vectors per partition.
pub const DEFAULT_PARTITION_SIZE: usize = 4096;
/// Multiplier of the RaBitQ error bound (the paper's ε0).
pub const EPSILON0: f32 = 1.9;
/// Most partitions an index may have.
pub const MAX_PARTITIONS: usize = 1 << 20;
/// f32 factors stored per vector.
pub const FACTORS: usize = 4;
/// Vectors per fast-scan block.
pub const BLOCK: usize = 32;

/// IVF-RaBitQ construction and search parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfParams {
    /// Bits per dimension, 1..=8 (1 sign bit + `bits − 1` extra bits).
    pub bits: u8,
    /// Partition count; `None` picks `vectors / partition_size` from the
    /// training data.
    pub partitions: Option<usize>,
    /// Target vectors per partition when `partitions` is `None`.
    pub partition_size: usize,
    /// Default partitions probed per query.
    pub nprobe: usize,
    /// Default rerank depth; `None` picks by `bits` (see
    /// [`IvfParams::default_refine`]).
    pub refine: Option<usize>,
    /// Lloyd iterations of the coarse quantizer.
    pub iterations: usize,
    /// Most training points per partition (a uniform sample is taken).
    pub max_points_per_partition: usize,
    /// Seed of the rotation, the sample and k-means.
    pub seed: u64,
}

impl Default for IvfParams {
    fn default() -> Self {
        IvfParams {
            bits: 1,
            partitions: None,
            partition_size: DEFAULT_PARTITION_SIZE,
            nprobe: 8,
            refine: None,
            iterations: 10,
            max_points_per_partition: 256,
            seed: 0x5A61_7474_6101,
        }
    }
}

impl IvfParams {
    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: String, reason| {
            Err(IndexError::InvalidParameter {
                name,
                value,
                reason,
            })
        };
        if !(1..=8).contains(&self.bits) {
            return bad("bits", self.bits.to_string(), "must be in 1..=8");
        }
        if let Some(p) = self.partitions {
            if p == 0 || p > MAX_PARTITIONS {
                return bad("partitions", p.to_string(), "must be in 1..=1048576");
            }
        }
        if self.partition_size == 0 {
            return bad("partition_size", "0".into(), "must be at least 1");
        }
        if self.nprobe == 0 {
            return bad("nprobe", "0".into(), "must be at least 1");
        }
        if self.iterations == 0 || self.iterations > 1000 {
            return bad(
                "iterations",
                self.iterations.to_string(),
                "must be in 1..=1000",
            );
        }
        if self.max_points_per_partition == 0 {
            return bad("max_points_per_partition", "0".into(), "must be at least 1");
        }
        Ok(())
    }

    /// Rerank depth used when none is given: `k × 10` for 1 bit, `k × 4`
    /// for 2–3 bits, `k × 2` for 4–6 bits, none for 7–8 bits.
    pub fn default_refine(&self, k: usize) -> usize {
        self.refine.unwrap_or(match self.bits {
            1 => 10 * k,
            2 | 3 => 4 * k,
            4..=6 => 2 * k,
            _ => 0,
        })
    }

    /// Partitions for `n` training vectors.
    pub fn partitions_for(&self, n: usize) -> usize {
        self.partitions
            .unwrap_or_else(|| (n as f64 / self.partition_size as f64).round() as usize)
            .clamp(1, n.clamp(1, MAX_PARTITIONS))
    }

    /// The positions, among `n` rows, of the rows a model of those rows
    /// is trained on, ascending: every row when there are at most
    /// `max_points_per_partition` per partition
    /// ([`IvfParams::partitions_for`] of `n`), else a uniform sample of
    /// that many, drawn from `seed` (a partial Fisher-Yates shuffle of
    /// `0..n`, the displaced positions kept in a map: memory grows with
    /// the sample, not with `n`). [`IvfModel::train`] trains on these rows
    /// of what it is given; [`IvfModel::train_sampled`] takes them alone.
    pub fn training_sample(&self, n: usize) -> Vec<usize> {
        let parts = self.partitions_for(n);
        let cap = parts
            .saturating_mul(self.max_points_per_partition)
            .max(parts);
        if n <= cap {
            return (0..n).collect();
        }
        let mut moved: HashMap<usize, usize> = HashMap::with_capacity(2 * cap);
        let mut st = self.seed ^ 0x5EED;
        let mut picked = Vec::with_capacity(cap);
        for i in 0..cap {
            let j = i + (crate::rotation::splitmix64(&mut st) % (n - i) as u64) as usize;
            let at_i = moved.get(&i).copied().unwrap_or(i);
            let at_j = moved.get(&j).copied().unwrap_or(j);
            // Swap positions i and j; position i is not read again.
            moved.insert(j, at_i);
            picked.push(at_j);
        }
        picked.sort_unstable();
        picked
    }
}

/// The trained, immutable part of an IVF-RaBitQ index: rotation and
/// centroids.
#[derive(Debug, Clone, PartialEq)]
pub struct IvfModel {
    pub(crate) dims: usize,
    pub(crate) bits: u8,
    pub(crate) metric: Metric,
    pub(crate) seed: u64,
    pub(crate) rotation: Rotation,
    /// partitions × dims.
    pub(crate) centroids: Vec<f32>,
    /// partitions × padded: the rotated centroids.
    pub(crate) rcentroids: Vec<f32>,
}

/// One vector's code as produced by [`IvfModel::encode`].
#[derive(Debug, Clone, Default)]
pub struct Encoded {
    /// Assigned partition.
    pub partition: u32,
    /// Sign bits, bit `i % 8` of byte `i / 8` = `r_i > 0`.
    pub signs: Vec<u8>,
    /// `[F1, |r|², E1, Fx]`.
    pub factors: [f32; FACTORS],
    /// `bits − 1` planes of `padded / 8` bytes.
    pub ex: Vec<u8>,
}

impl IvfModel {
    /// Trains a model on `sample` (`n × dims`, already normalised for
    /// cosine) with `partitions` centroids.
    pub fn train(
        sample: &[f32],
        dims: usize,
        metric: Metric,
        params: &IvfParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<IvfModel> {
        params.validate()?;
        let n = sample.len() / dims.max(1);
        if n == 0 {
            return Err(IndexError::Empty);
        }
        let picked = params.training_sample(n);
        if picked.len() == n {
            return Self::train_sampled(sample, n, dims, metric, params, progress);
        }
        let data: Vec<f32> = picked
            .iter()
            .flat_map(|&i| sample[i * dims..(i + 1) * dims].iter().copied())
            .collect();
        Self::train_sampled(&data, n, dims, metric, params, progress)
    }

    /// The model [`IvfModel::train`] gives on `rows` rows, from the rows
    /// it would train on alone: `sample` holds, in order, the rows at the
    /// positions [`IvfParams::training_sample`] gives for `rows` (so a
    /// build streaming its rows holds only those; the partition count
    /// still follows `rows`).
    pub fn train_sampled(
        sample: &[f32],
        rows: usize,
        dims: usize,
        metric: Metric,
        params: &IvfParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<IvfModel> {
        params.validate()?;
        let n = sample.len() / dims.max(1);
        if n == 0 || rows == 0 {
            return Err(IndexError::Empty);
        }
        if n * dims != sample.len() || n > rows {
            return Err(IndexError::InvalidParameter {
                name: "sample",
                value: n.to_string(),
                reason: "must hold whole rows, at most `rows` of them",
            });
        }
        let parts = params.partitions_for(rows);
        let centroids = kmeans::kmeans(
            sample,
            dims,
            parts,
            params.iterations,
            params.seed,
            progress,
        );
        Ok(Self::from_centroids(
            dims,
            params.bits,
            metric,
            params.seed,
            centroids,
        ))
    }

    /// A model from stored parts (rotation rebuilt from the seed).
    pub fn from_centroids(
        dims: usize,
        bits: u8,
        metric: Metric,
        seed: u64,
        centroids: Vec<f32>,
    ) -> IvfModel {
        let rotation = Rotation::new(dims, seed);
        let padded = rotation.padded();
        let parts = centroids.len() / dims;
        let mut rcentroids = vec![0.0; parts * padded];
        for (c, out) in centroids
            .chunks_exact(dims)
            .zip(rcentroids.chunks_exact_mut(padded))
        {
            rotation.apply(c, out);
        }
        IvfModel {
            dims,
            bits,
            metric,
            seed,
            rotation,
            centroids,
            rcentroids,
        }
    }

    /// The partition of `x`: nearest centroid by L2, or by largest inner
    /// product under ip / cos (searches rank partitions the same way; on
    /// debian-minilm, 250 partitions, nprobe 64, recall@10 goes from
    /// 0.960 with L2 to 0.969).
    fn assign(&self, x: &[f32]) -> u32 {
        if self.metric != Metric::L2 {
            let dot = kernels().dot_f32;
            let mut best = (0u32, f32::NEG_INFINITY);
            for (c, row) in self.centroids.chunks_exact(self.dims).enumerate() {
                let d = dot(x, row);
                if d > best.1 {
                    best = (c as u32, d);
                }
            }
            best.0
        } else {
            nearest(&self.centroids, self.dims, x).0
        }
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.centroids.len() / self.dims
    }
    /// Bits per dimension.
    pub fn bits(&self) -> u8 {
        self.bits
    }
    /// Rotated (padded) dimensions.
    pub fn padded(&self) -> usize {
        self.rotation.padded()
    }
    /// Seed of the rotation.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Centroids, partitions × dims.
    pub fn centroids(&self) -> &[f32] {
        &self.centroids
    }
    /// Rotated centroids, partitions × padded.
    pub fn rotated_centroids(&self) -> &[f32] {
        &self.rcentroids
    }
    /// Bytes of one fast-scan block of 32 codes.
    pub fn block_bytes(&self) -> usize {
        self.padded() / 8 * BLOCK
    }
    /// Bytes of extra-bit planes per vector.
    pub fn ex_bytes(&self) -> usize {
        (usize::from(self.bits) - 1) * self.padded() / 8
    }

    /// Encodes `x` (`dims` floats, normalised for cosine) into `out`,
    /// using `tmp` (any length) as working space.
    pub fn encode(&self, x: &[f32], tmp: &mut Vec<f32>, out: &mut Encoded) {
        let (dims, padded) = (self.dims, self.padded());
        let p = self.assign(x);
        out.partition = p;
        tmp.clear();
        tmp.resize(dims + 2 * padded, 0.0);
        let (res, rest) = tmp.split_at_mut(dims);
        let (r, absr) = rest.split_at_mut(padded);
        let c = &self.centroids[p as usize * dims..(p as usize + 1) * dims];
        for ((d, a), b) in res.iter_mut().zip(x).zip(c) {
            *d = a - b;
        }
        self.rotation.apply(res, r);
        let norm2: f32 = r.iter().map(|v| v * v).sum();
        let l1: f32 = r.iter().map(|v| v.abs()).sum();
        out.signs.clear();
        out.signs.resize(padded / 8, 0);
        for (i, &v) in r.iter().enumerate() {
            if v > 0.0 {
                out.signs[i / 8] |= 1 << (i % 8);
            }
        }
        let norm = norm2.sqrt();
        let (f1, e1) = if l1 > 0.0 {
            let a = l1 / (norm * (padded as f32).sqrt());
            let e =
                norm * (1.0 - a * a).max(0.0).sqrt() / (a * ((padded - 1).max(1) as f32).sqrt());
            (norm2 / l1, e)
        } else {
            (0.0, 0.0)
        };
        let mut fx = f1;
        out.ex.clear();
        out.ex.resize(self.ex_bytes(), 0);
        if self.bits > 1 && norm > 0.0 {
            let max = (1u32 << (self.bits - 1)) - 1;
            for (a, &v) in absr.iter_mut().zip(r.iter()) {
                *a = v.abs() / norm;
            }
            let top = absr.iter().fold(0.0f32, |m, &v| m.max(v));
            let cosine = |t: f32| -> f32 {
                let (mut ip, mut nn) = (0.0f32, 0.0f32);
                for &a in absr.iter() {
                    let y = ((t * a) as u32).min(max) as f32 + 0.5;
                    ip += y * a;
                    nn += y * y;
                }
                ip / nn.sqrt()
            };
            // Coarse scan of the scale, then a finer one around the best.
            let t_hi = (max as f32 + 1.0) / top * 1.5;
            let steps = 32;
            let mut best = (0.0f32, f32::MIN);
            for s in 1..=steps {
                let t = t_hi * s as f32 / steps as f32;
                let c = cosine(t);
                if c > best.1 {
                    best = (t, c);
                }
            }
            let step = t_hi / steps as f32;
            for s in -8i32..=8 {
                let t = best.0 + step * s as f32 / 8.0;
                if t > 0.0 {
                    let c = cosine(t);
                    if c > best.1 {
                        best = (t, c);
                    }
                }
            }
            let t = best.0;
            let plane = padded / 8;
            let mut ur = 0.0f32;
            for (i, &a) in absr.iter().enumerate() {
                let y = ((t * a) as u32).min(max);
                ur += (y as f32 + 0.5) * a * norm;
                let z = if r[i] > 0.0 { y } else { max - y };
                for j in 0..usize::from(self.bits) - 1 {
                    if z >> j & 1 == 1 {
                        out.ex[j * plane + i / 8] |= 1 << (i % 8);
                    }
                }
            }
            if ur > 0.0 {
                fx = norm2 / ur;
            }
        }
        out.factors = [f1, norm2, e1, fx];
    }
}

/// A mutable partition (in-memory indexes).
#[derive(Debug, Default, Clone)]
pub(crate) struct List {
    pub slots: Vec<u32>,
    pub codes: Vec<u8>,
    pub factors: Vec<f32>,
    pub ex: Vec<u8>,
}

impl List {
    pub fn push(&mut self, model: &IvfModel, slot: u32, e: &Encoded) {
        let j = self.slots.len() % BLOCK;
        if j == 0 {
            self.codes.resize(self.codes.len() + model.block_bytes(), 0);
        }
        let start = self.codes.len() - model.block_bytes();
        let block = &mut self.codes[start..];
        for g in 0..model.padded() / 4 {
            let nib = (e.signs[g / 2] >> (4 * (g % 2))) & 0x0F;
            set_block_nibble(block, g, j, nib);
        }
        self.slots.push(slot);
        self.factors.extend_from_slice(&e.factors);
        self.ex.extend_from_slice(&e.ex);
    }

    pub fn as_ref(&self) -> ListRef<'_> {
        ListRef {
            slots: &self.slots,
            codes: &self.codes,
            factors: &self.factors,
            ex: &self.ex,
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
            + self.codes.capacity()
            + self.factors.capacity() * 4
            + self.ex.capacity()
    }
}

/// A read view of one partition (see the module docs for the layout).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListRef<'a> {
    /// Slot of each vector, in list order.
    pub slots: &'a [u32],
    /// 1-bit codes, fast-scan blocks of 32.
    pub codes: &'a [u8],
    /// `FACTORS` f32 per vector.
    pub factors: &'a [f32],
    /// Extra-bit planes, `ex_bytes` per vector.
    pub ex: &'a [u8],
}

impl ListRef<'_> {
    /// Whether the arrays have the lengths `model` implies (checked before
    /// scanning data from a file).
    pub fn is_consistent(&self, model: &IvfModel) -> bool {
        let n = self.slots.len();
        self.codes.len() == n.div_ceil(BLOCK) * model.block_bytes()
            && self.factors.len() == n * FACTORS
            && self.ex.len() == n * model.ex_bytes()
    }
}

/// Where an IVF search reads partitions from: in-memory lists or a sealed
/// segment.
pub trait IvfSource {
    /// The trained model.
    fn model(&self) -> &IvfModel;
    /// Runs `f` on partition `p`.
    fn with_list(&self, p: usize, f: &mut dyn FnMut(ListRef<'_>));
}

/// Per-thread working space of an IVF search, sized once per model and
/// reused: after the first query with a given model and `k`/`refine`, a
/// search allocates nothing.
#[derive(Debug, Default)]
pub struct IvfScratch {
    q: Vec<f32>,
    qr: Vec<f32>,
    v: Vec<f32>,
    flut: Vec<f32>,
    qlut: Vec<u8>,
    blut: Vec<f32>,
    centre: Vec<(f32, u32)>,
    heap: BinaryHeap<Cand>,
    keyed: BinaryHeap<KeyedCand>,
    cands: Vec<Cand>,
}

impl IvfScratch {
    /// Sizes every buffer for `model` and result depth `depth`.
    pub fn prepare(&mut self, model: &IvfModel, depth: usize) {
        let padded = model.padded();
        let grow = |v: &mut Vec<f32>, n: usize| {
            if v.len() < n {
                v.resize(n, 0.0);
            }
        };
        grow(&mut self.q, model.dims.max(padded));
        grow(&mut self.qr, padded);
        grow(&mut self.v, padded);
        grow(&mut self.flut, padded / 4 * 16);
        if self.qlut.len() < padded / 4 * 16 {
            self.qlut.resize(padded / 4 * 16, 0);
        }
        if model.bits > 1 {
            grow(&mut self.blut, padded / 8 * 256);
        }
        if self.centre.capacity() < model.partitions() {
            self.centre.reserve(model.partitions() - self.centre.len());
        }
        let depth = depth + 1;
        if self.heap.capacity() < depth {
            self.heap.reserve(depth - self.heap.len());
        }
        if self.keyed.capacity() < depth {
            self.keyed.reserve(depth - self.keyed.len());
        }
        if self.cands.capacity() < depth {
            self.cands.reserve(depth - self.cands.len());
        }
    }

    /// The buffer the caller writes the float query into (`dims` long).
    pub fn query_mut(&mut self, dims: usize) -> &mut [f32] {
        if self.q.len() < dims {
            self.q.resize(dims, 0.0);
        }
        &mut self.q[..dims]
    }
}

/// What one IVF search does.
#[derive(Debug, Clone, Copy)]
pub struct IvfQuery<'a> {
    /// Results wanted.
    pub k: usize,
    /// Partitions probed (more are probed while fewer than `k` allowed
    /// vectors have been seen).
    pub nprobe: usize,
    /// Candidates re-scored exactly (0: return estimated distances).
    pub refine: usize,
    /// Slots that may be returned.
    pub filter: Option<&'a Bitset>,
}

/// Searches `src` for the query previously written with
/// [`IvfScratch::query_mut`] (floats, normalised for cosine) whose stored
/// form is `q_stored` (for the exact rerank through `dist`). Results,
/// nearest first, replace the contents of `out`.
pub fn search<S: IvfSource + ?Sized, G: GraphView + ?Sized>(
    src: &S,
    g: &G,
    dist: &Distance,
    q_stored: &[u8],
    query: IvfQuery<'_>,
    s: &mut IvfScratch,
    out: &mut Vec<Neighbor>,
) {
    out.clear();
    let model = src.model();
    let parts = model.partitions();
    // More candidates than slots cannot exist (and a huge refine from a
    // caller or a damaged file must not size buffers).
    let refine = query.refine.min(g.slots());
    let depth = query.k.min(g.slots()).max(refine);
    s.prepare(model, depth);
    let (dims, padded) = (model.dims, model.padded());
    let ip_metric = model.metric != Metric::L2;
    let k = kernels();

    // Rotate the query; rank the centroids.
    model.rotation.apply(&s.q[..dims], &mut s.qr);
    s.centre.clear();
    // Inner product / cosine rank partitions by ⟨q, c⟩, as the encoder
    // assigns them.
    let by_ip = ip_metric;
    for (p, c) in model.centroids.chunks_exact(dims).enumerate() {
        let d = if by_ip {
            -(k.dot_f32)(&s.q[..dims], c)
        } else {
            (k.l2sq_f32)(&s.q[..dims], c)
        };
        s.centre.push((d, p as u32));
    }
    let nprobe = query.nprobe.clamp(1, parts);
    let by_dist = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    if nprobe < parts {
        s.centre.select_nth_unstable_by(nprobe - 1, by_dist);
    }
    s.centre[..nprobe].sort_unstable_by(by_dist);
    s.heap.clear();

    // Inner product / cosine: v = Pq for every partition, so the tables
    // are built once per query; L2 rebuilds them per partition.
    let mut tables = Tables {
        sum_v: 0.0,
        norm_v: 0.0,
        delta: 1.0,
        min_sum: 0.0,
    };
    if ip_metric {
        s.v[..padded].copy_from_slice(&s.qr[..padded]);
        tables = build_tables(model, s);
    }
    let mut probed = 0;
    let mut seen = 0usize;
    while probed < parts && (probed < nprobe || seen < query.k) {
        if probed == nprobe {
            // Fewer than k allowed vectors so far: probe on, nearest first.
            s.centre[nprobe..].sort_unstable_by(by_dist);
        }
        let p = s.centre[probed].1 as usize;
        probed += 1;
        let rc = &model.rcentroids[p * padded..(p + 1) * padded];
        let base = if ip_metric {
            let c = &model.centroids[p * dims..(p + 1) * dims];
            1.0 - (k.dot_f32)(&s.q[..dims], c)
        } else {
            for ((v, q), c) in s.v.iter_mut().zip(&s.qr).zip(rc) {
                *v = q - c;
            }
            tables = build_tables(model, s);
            0.0
        };
        let mut visit = |list: ListRef<'_>| {
            if list.is_consistent(model) {
                seen += scan_list(model, g, list, base, depth, query.filter, &tables, s);
            }
        };
        src.with_list(p, &mut visit);
    }

    if refine == 0 {
        s.keyed.clear();
        for c in s.heap.drain() {
            s.keyed.push(KeyedCand {
                dist: c.dist,
                key: g.key(c.slot),
            });
        }
        while s.keyed.len() > query.k {
            s.keyed.pop();
        }
    } else {
        s.keyed.clear();
        for c in s.heap.drain() {
            let d = dist.eval(q_stored, g.vector(c.slot));
            let key = g.key(c.slot);
            if s.keyed.len() < query.k {
                s.keyed.push(KeyedCand { dist: d, key });
            } else if s
                .keyed
                .peek()
                .is_some_and(|w| d < w.dist || (d == w.dist && key < w.key))
            {
                s.keyed.pop();
                s.keyed.push(KeyedCand { dist: d, key });
            }
        }
    }
    out.extend(s.keyed.drain().map(|c| Neighbor {
        key: c.key,
        distance: c.dist,
    }));
    out.sort_unstable_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
}

/// Per-query (inner product, cosine) or per-partition (L2) lookup tables
/// built from `s.v`, and the sums the estimator needs.
#[derive(Debug, Clone, Copy)]
struct Tables {
    sum_v: f32,
    norm_v: f32,
    delta: f32,
    min_sum: f32,
}

fn build_tables(model: &IvfModel, s: &mut IvfScratch) -> Tables {
    let padded = model.padded();
    let groups = padded / 4;
    let v = &s.v[..padded];
    let sum_v: f32 = v.iter().sum();
    let norm_v = v.iter().map(|x| x * x).sum::<f32>().sqrt();

    // Float tables: flut[g][m] = Σ_{t ∈ m} v[4g + t].
    let flut = &mut s.flut[..groups * 16];
    for (gi, t) in flut.chunks_exact_mut(16).enumerate() {
        t[0] = 0.0;
        for m in 1..16usize {
            let low = m.trailing_zeros() as usize;
            t[m] = t[m & (m - 1)] + v[4 * gi + low];
        }
    }
    // Quantised tables: one step for all groups, per-group offsets. A
    // group's smallest subset sum is the sum of its negative components,
    // its largest the sum of its positive ones.
    let mut range = 0.0f32;
    let mut min_sum = 0.0f32;
    for q in v.chunks_exact(4) {
        let lo: f32 = q.iter().map(|x| x.min(0.0)).sum();
        let hi: f32 = q.iter().map(|x| x.max(0.0)).sum();
        range = range.max(hi - lo);
        min_sum += lo;
    }
    let delta = if range > 0.0 { range / 255.0 } else { 1.0 };
    let inv = 1.0 / delta;
    let qlut = &mut s.qlut[..groups * 16];
    for ((q, t), c) in qlut
        .chunks_exact_mut(16)
        .zip(flut.chunks_exact(16))
        .zip(v.chunks_exact(4))
    {
        let lo: f32 = c.iter().map(|x| x.min(0.0)).sum();
        for (o, &x) in q.iter_mut().zip(t.iter()) {
            // Round half up, clamped (NaN-safe: max returns the number,
            // where clamp would keep a NaN).
            #[allow(clippy::manual_clamp)]
            let y = ((x - lo) * inv + 0.5).max(0.0).min(255.0);
            // SAFETY: y is finite and in [0, 255], which i32 represents.
            *o = unsafe { y.to_int_unchecked::<i32>() } as u8;
        }
    }
    if model.bits > 1 {
        let blut = &mut s.blut[..padded / 8 * 256];
        for (b, t) in blut.chunks_exact_mut(256).enumerate() {
            let lo = &flut[2 * b * 16..2 * b * 16 + 16];
            let hi = &flut[(2 * b + 1) * 16..(2 * b + 2) * 16];
            for m in 0..256 {
                t[m] = lo[m & 15] + hi[m >> 4];
            }
        }
    }
    Tables {
        sum_v,
        norm_v,
        delta,
        min_sum,
    }
}

/// Scans one partition with the tables in `s` and pushes its candidates
/// into `s.heap` (at most `depth`). Returns how many allowed vectors it
/// saw.
#[allow(clippy::too_many_arguments)]
fn scan_list<G: GraphView + ?Sized>(
    model: &IvfModel,
    g: &G,
    list: ListRef<'_>,
    base: f32,
    depth: usize,
    filter: Option<&Bitset>,
    t: &Tables,
    s: &mut IvfScratch,
) -> usize {
    let n = list.slots.len();
    if n == 0 {
        return 0;
    }
    let padded = model.padded();
    let groups = padded / 4;
    let ip_metric = model.metric != Metric::L2;
    let bits = usize::from(model.bits);
    let Tables {
        sum_v,
        norm_v,
        delta,
        min_sum,
    } = *t;
    let v2 = norm_v * norm_v;
    let flut = &s.flut[..groups * 16];
    let qlut = &s.qlut[..groups * 16];
    let fastscan = kernels().fastscan;
    let block_bytes = model.block_bytes();
    let ex_bytes = model.ex_bytes();
    let plane = padded / 8;
    let half_span = ((1u32 << bits) - 1) as f32 / 2.0;
    let err_scale = EPSILON0 * norm_v * if ip_metric { 1.0 } else { 2.0 };
    let mut seen = 0;
    let mut sums = [0u16; 32];
    let mut wide = [0u32; 32];
    for (bi, block) in list.codes.chunks_exact(block_bytes).enumerate() {
        let first = bi * BLOCK;
        let count = (n - first).min(BLOCK);
        let mut allowed = 0u32;
        for j in 0..count {
            let slot = list.slots[first + j];
            if g.is_live(slot) && filter.is_none_or(|f| f.contains(slot as usize)) {
                allowed |= 1 << j;
            }
        }
        if allowed == 0 {
            continue;
        }
        seen += allowed.count_ones() as usize;
        // Fast scan, in chunks of at most MAX_GROUPS_PER_CALL groups.
        if groups <= MAX_GROUPS_PER_CALL {
            fastscan(block, qlut, &mut sums);
            for (w, &x) in wide.iter_mut().zip(&sums) {
                *w = u32::from(x);
            }
        } else {
            wide.fill(0);
            let mut gstart = 0;
            while gstart < groups {
                let gend = (gstart + MAX_GROUPS_PER_CALL).min(groups);
                fastscan(
                    &block[gstart * 16..gend * 16],
                    &qlut[gstart * 16..gend * 16],
                    &mut sums,
                );
                for (w, &x) in wide.iter_mut().zip(&sums) {
                    *w += u32::from(x);
                }
                gstart = gend;
            }
        }
        let mut mask = allowed;
        while mask != 0 {
            let j = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let i = first + j;
            let f = &list.factors[i * FACTORS..(i + 1) * FACTORS];
            let sb = delta * wide[j] as f32 + min_sum;
            let ip1 = f[0] * (2.0 * sb - sum_v);
            let (d1, err) = if ip_metric {
                (base - ip1, err_scale * f[2])
            } else {
                (f[1] + v2 - 2.0 * ip1, err_scale * f[2])
            };
            let full = s.heap.len() >= depth;
            let worst = s.heap.peek().map_or(f32::INFINITY, |c| c.dist);
            let est = if bits == 1 {
                d1
            } else {
                if full && d1 - err >= worst {
                    continue;
                }
                // Exact 1-bit sum from the float table, then the planes.
                let mut sb_exact = 0.0f32;
                for gi in 0..groups {
                    let nib = sagitta_kernels::fastscan::block_nibble(block, gi, j);
                    sb_exact += flut[gi * 16 + usize::from(nib)];
                }
                let ex = &list.ex[i * ex_bytes..(i + 1) * ex_bytes];
                let mut zsum = 0.0f32;
                for pl in 0..bits - 1 {
                    let bytes = &ex[pl * plane..(pl + 1) * plane];
                    let mut acc = 0.0f32;
                    for (b, &byte) in bytes.iter().enumerate() {
                        acc += s.blut[b * 256 + usize::from(byte)];
                    }
                    zsum += acc * (1u32 << pl) as f32;
                }
                let uv = sb_exact * (1u32 << (bits - 1)) as f32 + zsum - half_span * sum_v;
                let ipx = f[3] * uv;
                if ip_metric {
                    base - ipx
                } else {
                    f[1] + v2 - 2.0 * ipx
                }
            };
            if !full {
                s.heap.push(Cand {
                    dist: est,
                    slot: list.slots[i],
                });
            } else if est < worst {
                s.heap.pop();
                s.heap.push(Cand {
                    dist: est,
                    slot: list.slots[i],
                });
            }
        }
    }
    seen
}
