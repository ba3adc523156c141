//! Collection settings: the durability policy, [`CollectionConfig`], and
//! its form in the manifest (`ConfigFile`, additive fields with defaults so
//! manifests written by older versions still read).

use crate::error::{Result, StoreError};
use crate::ids::IdType;
use sagitta_index::{DType, HnswParams, Index, IndexKind, IvfParams, Space};
use sagitta_text::{Bm25, TextFieldSpec};
use serde::{Deserialize, Serialize};

/// When acknowledged writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the WAL before every write call returns (the default).
    Batch,
    /// fsync at most this many milliseconds after a write (a background
    /// thread); a power loss can lose that window, a process crash cannot.
    IntervalMs(u64),
    /// Never fsync the WAL (the OS writes it back eventually); survives a
    /// process crash, not a power loss.
    Off,
}

impl Durability {
    /// Parses `batch`, `off`, or a number of milliseconds (`"100"`,
    /// `"100ms"`).
    pub fn parse(s: &str) -> Option<Durability> {
        match s.to_ascii_lowercase().as_str() {
            "batch" | "fsync" => Some(Durability::Batch),
            "off" | "none" => Some(Durability::Off),
            other => other
                .trim_end_matches("ms")
                .parse()
                .ok()
                .filter(|&ms| ms > 0)
                .map(Durability::IntervalMs),
        }
    }

    /// What the log does with records appended since its last good fsync
    /// when an fsync fails (see [`crate::wal::Unsynced`]).
    pub fn unsynced(self) -> crate::wal::Unsynced {
        match self {
            Durability::Batch => crate::wal::Unsynced::Drop,
            Durability::IntervalMs(_) => crate::wal::Unsynced::Keep,
            Durability::Off => crate::wal::Unsynced::Trust,
        }
    }

    /// The policy as `parse` reads it.
    pub fn name(self) -> String {
        match self {
            Durability::Batch => "batch".into(),
            Durability::Off => "off".into(),
            Durability::IntervalMs(ms) => format!("{ms}ms"),
        }
    }
}

/// Default size at which the mutable part is frozen and flushed.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// Default ceiling of the optimizer's merges: 16 GiB, about 8M rows of
/// 384-d floats with sq8 codes. Each query walks every segment's graph,
/// so the segment count sets its cost: at 1M rows of `minilm-gmm`, one
/// segment answered at recall 0.94 in half the time of nine of 256 MiB
/// (437-450 against 205-220 QPS, one query per call). A merge holds only
/// the result's codes and graph in memory (about 560 bytes a row), and
/// the growth rule of `optimizer/policy.rs` bounds how often a row is
/// rewritten, so larger segments cost little; one build task still
/// indexes at most 1 GiB of Flat rows (`optimizer/policy.rs`), so rows
/// become searchable by graph a gibibyte at a time. It was 1 GiB.
pub const DEFAULT_MAX_SEGMENT_SIZE: u64 = 16 << 30;
/// Default idle time after which a non-empty mutable part is frozen.
pub const DEFAULT_IDLE_SEAL_MS: u64 = 1000;
/// Smallest `segment_size` a collection takes (bytes).
pub const MIN_SEGMENT_SIZE: u64 = 4096;

/// Settings fixed when a collection is created.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionConfig {
    /// Dimensions, metric, storage type.
    pub space: Space,
    /// Index of the sealed segments once the optimizer has built them.
    pub kind: IndexKind,
    /// HNSW parameters.
    pub hnsw: HnswParams,
    /// IVF-RaBitQ parameters (kind `IvfRq`): each segment is trained on
    /// its own vectors when the optimizer builds it.
    pub ivf: IvfParams,
    /// Freeze the mutable part (searched exactly) when its estimated size
    /// passes this many bytes; the optimizer then flushes it to disk and
    /// indexes it in the background. Also bounds the WAL replayed after a
    /// crash (about one to two of these).
    pub segment_size: u64,
    /// The optimizer merges segments up to this estimated size.
    pub max_segment_size: u64,
    /// Freeze a non-empty mutable part after this many milliseconds
    /// without writes, so that a quiet collection ends fully indexed
    /// (0: never; `optimize()` still does).
    pub idle_seal_ms: u64,
    /// Threads of the background index builds (0: one per core). They run
    /// at the lowest CPU priority (nice +19), so foreground searches and
    /// writes take the cores first, and builds wait while writes arrive.
    pub optimizer_threads: usize,
    /// WAL fsync policy.
    pub durability: Durability,
    /// Key width in bits: 64, or 128 with `id_type` uint128 (see
    /// [`CollectionConfig::with_key_bits`]).
    pub key_bits: u32,
    /// The type of the ids users give (see [`crate::ids`]): `uint64`
    /// (default), `int64`, or `string` (hashed to keys, the string kept in
    /// the reserved payload column `_id`).
    pub id_type: IdType,
    /// The collection was created without an id type (a server's create
    /// request with neither `id_type` nor `key_bits`): with `id_type`
    /// uint64 the type stays open until the first write by ids fixes it
    /// ([`crate::Collection::write_ids`]): that write's type when the
    /// collection is empty and its ids are 64-bit ones (int64 ids put as
    /// int64 come back int64), else uint64. Until then the manifest has no
    /// `id_type` (read as uint64, as in collections made before id types).
    pub id_type_open: bool,
    /// Compact codes the built HNSW segments traverse the graph with
    /// (`Sq8`, `Sq16` or `F16`), keeping the vectors of `space` (f32) beside
    /// them as full-precision rows: each search re-scores its beam from
    /// those rows (memory-mapped, read only for the rerank), so results
    /// and distances are exact f32 ones. The mutable part, the WAL and
    /// unbuilt (Flat) segments keep `space` as it is. `None`: built
    /// segments store `space.dtype` only. Default ([`Self::new`]): `Sq8`
    /// for f32 vectors under L2, inner product or cosine (the fastest
    /// measured; see docs/FORMAT.md and BENCHMARKS.md), else `None`.
    /// Applies to HNSW collections only.
    pub codes: Option<DType>,
    /// Payload string columns with a full-text (BM25) index, each with its
    /// analyzer. They are declared in the payload schema as strings at
    /// creation. Every segment gets a text section over them, the mutable
    /// part an in-memory index; text queries search all of them.
    pub text: Vec<TextFieldSpec>,
    /// A built-in embedding model (e.g. `all-minilm-l6-v2`) for the first
    /// text field: rows written with that text and no vector are embedded
    /// by the engine, and a search given text and no vector embeds the
    /// query. Its dimensions must be the collection's.
    pub embed_model: Option<String>,
    /// BM25 parameters of text queries (default k1 0.9, b 0.4).
    pub bm25: Bm25,
    /// HNSW collections: a Flat segment with fewer live rows than this is
    /// left without a graph and searched by an exact scan, which at that
    /// size costs no more than a graph walk (and is exact); merges index it
    /// once it grows past this. `None` (the default): from the planner's
    /// cost model ([`Self::index_threshold_rows`]); `Some(0)`: every
    /// segment is indexed.
    pub index_threshold: Option<u64>,
}

/// The compact codes a new HNSW collection over `space` traverses with by
/// default (see [`CollectionConfig::codes`]).
pub fn default_codes(space: &Space) -> Option<DType> {
    (space.dtype == DType::F32 && !space.metric.is_binary()).then_some(DType::Sq8)
}

/// The graph codes a user asked for by name: `None` (not given) is
/// [`default_codes`] for the space, whatever else was spelled out (the
/// vectors' `dtype` included); `"none"` is a plain graph; else `"sq8"`,
/// `"f16"` or `"sq16"`. The one reading of the option that the server's
/// HTTP and Flight front ends and the Python package share.
pub fn codes_named(name: Option<&str>, space: &Space) -> Result<Option<DType>> {
    match name {
        None => Ok(default_codes(space)),
        Some("none") => Ok(None),
        Some(c) => match DType::parse(c) {
            Some(d @ (DType::Sq8 | DType::F16 | DType::Sq16)) => Ok(Some(d)),
            _ => Err(StoreError::Config(format!(
                "codes: unknown codes {c:?} (sq8, f16, sq16 or none)"
            ))),
        },
    }
}

impl CollectionConfig {
    /// Defaults: HNSW (M=16, ef_construction=128), 64 MiB mutable part,
    /// merges up to 16 GiB, freeze after 1 s idle, fsync per batch, 64-bit
    /// keys.
    pub fn new(space: Space) -> Self {
        CollectionConfig {
            space,
            kind: IndexKind::Hnsw,
            hnsw: HnswParams::default(),
            ivf: IvfParams::default(),
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_segment_size: DEFAULT_MAX_SEGMENT_SIZE,
            idle_seal_ms: DEFAULT_IDLE_SEAL_MS,
            optimizer_threads: 0,
            durability: Durability::Batch,
            key_bits: 64,
            id_type: IdType::UInt64,
            id_type_open: false,
            codes: default_codes(&space),
            text: Vec::new(),
            embed_model: None,
            bm25: Bm25::default(),
            index_threshold: None,
        }
    }

    /// These settings with `bits`-wide keys: 128 sets the id type to
    /// uint128 (ids up to 2^128 - 1), 64 leaves it (or resets uint128 to
    /// uint64). Other widths are refused when the collection is created.
    pub fn with_key_bits(mut self, bits: u32) -> Self {
        self.key_bits = bits;
        if bits == 128 {
            self.id_type = IdType::UInt128;
        } else if self.id_type == IdType::UInt128 {
            self.id_type = IdType::UInt64;
        }
        self
    }

    /// Whether the id type is left to the first write by ids
    /// ([`Self::id_type_open`] with the uint64 it reads as meanwhile).
    pub(crate) fn id_type_left_open(&self) -> bool {
        self.id_type_open && self.id_type == IdType::UInt64
    }

    /// The full-text fields.
    pub fn text_fields(&self) -> Vec<TextFieldSpec> {
        self.text.clone()
    }

    /// The space of built (HNSW) segments: `space` with the dtype of
    /// [`Self::codes`] when set, else `space`.
    pub fn built_space(&self) -> Space {
        match (self.kind, self.codes) {
            (IndexKind::Hnsw, Some(dtype)) => Space {
                dtype,
                ..self.space
            },
            _ => self.space,
        }
    }

    /// Whether built segments keep full-precision rows beside codes.
    pub fn keeps_full(&self) -> bool {
        self.built_space() != self.space
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.key_bits != self.id_type.key_bits() {
            return Err(StoreError::Config(format!(
                "key_bits = {} with {} ids: 128-bit keys are the uint128 id type, \
                 64-bit keys the others",
                self.key_bits, self.id_type
            )));
        }
        if self.segment_size < MIN_SEGMENT_SIZE {
            return Err(StoreError::Config(format!(
                "segment_size = {} bytes: must be at least {MIN_SEGMENT_SIZE}",
                self.segment_size
            )));
        }
        if self.max_segment_size < self.segment_size {
            return Err(StoreError::Config(format!(
                "max_segment_size = {} bytes: must be at least segment_size ({})",
                self.max_segment_size, self.segment_size
            )));
        }
        if let (IndexKind::Hnsw, Some(c)) = (self.kind, self.codes) {
            if self.space.dtype != DType::F32
                || self.space.metric.is_binary()
                || !matches!(c, DType::F16 | DType::Sq8 | DType::Sq16)
            {
                return Err(StoreError::Config(format!(
                    "codes = {}: graph codes need f32 vectors under l2, ip or cos (got {} {}) \
                     and one of f16, sq8, sq16",
                    c.name(),
                    self.space.dtype.name(),
                    self.space.metric.name()
                )));
            }
        }
        self.bm25.validate().map_err(StoreError::Config)?;
        // The manifest records BM25's parameters with the text fields they
        // rank: without a field, other values would be lost at reopen.
        if self.text.is_empty() && self.bm25 != Bm25::default() {
            return Err(StoreError::Config(format!(
                "bm25_k1 = {}, bm25_b = {}: BM25 ranks text fields and this collection has \
                 none (give text_fields, or leave bm25_k1 and bm25_b out)",
                self.bm25.k1, self.bm25.b
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.text {
            if f.name.is_empty() || f.name.len() > 255 || !seen.insert(&f.name) {
                return Err(StoreError::Config(format!(
                    "text field {:?}: names must be 1 to 255 bytes and distinct",
                    f.name
                )));
            }
        }
        if let Some(m) = &self.embed_model {
            if self.text.is_empty() {
                return Err(StoreError::Config(format!(
                    "embed_model = {m:?} needs a text field to embed (text_fields)"
                )));
            }
            if self.space.dtype.is_quantized() || self.space.metric.is_binary() {
                return Err(StoreError::Config(format!(
                    "embed_model = {m:?} needs float vectors under l2, ip or cos"
                )));
            }
        }
        self.sealed_index()?;
        Index::new(self.space, IndexKind::Flat, self.hnsw)?;
        Ok(())
    }

    /// A new, empty mutable part: always Flat, so a write costs a copy,
    /// never a graph insert (the optimizer builds the index later).
    /// Its capacity is reserved for a full part up front (zeroed pages,
    /// committed by the OS as rows arrive), so no write pays for a copy of
    /// the part to grow it.
    pub(crate) fn active_index(&self) -> Result<Index> {
        let index = Index::new(self.space, IndexKind::Flat, self.hnsw)?;
        index.reserve(self.rows_per_segment().min(1 << 22) as usize)?;
        Ok(index)
    }

    /// A new, empty index of the kind built segments have (in
    /// [`Self::built_space`], keeping full rows when it has codes).
    pub(crate) fn sealed_index(&self) -> Result<Index> {
        self.sealed_index_with(self.hnsw)
    }

    /// [`Self::sealed_index`] with graphs built by `hnsw`.
    pub(crate) fn sealed_index_with(&self, hnsw: HnswParams) -> Result<Index> {
        Ok(match self.kind {
            IndexKind::IvfRq => Index::ivf_rq(self.space, self.ivf)?,
            k if self.keeps_full() => {
                Index::new(self.built_space(), k, hnsw)?.keep_full_precision()?
            }
            k => Index::new(self.space, k, hnsw)?,
        })
    }

    /// Whether a segment of `kind` is in this collection's final form
    /// (a Flat segment of an HNSW or IVF collection is waiting for the
    /// optimizer, unless [`Self::stays_flat`]).
    pub(crate) fn is_built(&self, kind: IndexKind) -> bool {
        kind == self.kind
    }

    /// Live rows under which a Flat segment stays without a graph: the
    /// explicit [`Self::index_threshold`], else the rows an exact scan of
    /// this collection's Flat rows reads in the time of a walk at the
    /// default beam (about 40k 256-bit codes, 1.7k 384-d f32 rows at M 16,
    /// ef 64). 0 for other kinds than HNSW.
    pub fn index_threshold_rows(&self) -> u64 {
        if self.kind != IndexKind::Hnsw {
            return 0;
        }
        self.index_threshold.unwrap_or_else(|| {
            sagitta_index::plan::exact_scan_rows(
                self.space.stride(),
                self.hnsw.ef_search,
                self.hnsw.m0(),
            )
        })
    }

    /// Whether a segment of `kind` with `live` rows is settled without a
    /// graph: Flat and under [`Self::index_threshold_rows`].
    pub(crate) fn stays_flat(&self, kind: IndexKind, live: u64) -> bool {
        kind == IndexKind::Flat && live < self.index_threshold_rows()
    }

    /// Estimated bytes one vector occupies in a built segment (vector,
    /// codes and full row where kept, key, and level-0 links for HNSW).
    pub fn bytes_per_vector(&self) -> u64 {
        let links = match self.kind {
            IndexKind::Hnsw | IndexKind::IvfRq => 4 * (self.hnsw.m0() as u64 + 1),
            IndexKind::Flat => 0,
        };
        let codes = if self.keeps_full() {
            self.built_space().stride() as u64
        } else {
            0
        };
        self.space.stride() as u64 + codes + 16 + links
    }

    /// Rows of a full mutable part.
    pub(crate) fn rows_per_segment(&self) -> u64 {
        (self.segment_size / self.bytes_per_vector().max(1)).max(1)
    }

    /// Threads the optimizer builds with.
    pub(crate) fn build_threads(&self) -> usize {
        if self.optimizer_threads > 0 {
            return self.optimizer_threads;
        }
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConfigFile {
    pub(crate) dims: usize,
    pub(crate) metric: String,
    pub(crate) dtype: String,
    pub(crate) kind: String,
    pub(crate) m: usize,
    pub(crate) ef_construction: usize,
    pub(crate) ef_search: usize,
    pub(crate) seed: u64,
    pub(crate) segment_size: u64,
    pub(crate) durability: String,
    pub(crate) key_bits: u32,
    /// Absent in collections made before id types: `uint64`, or `string`
    /// where the payload has the `_id` column (see `Collection::open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id_type: Option<String>,
    #[serde(default = "default_bits")]
    pub(crate) ivf_bits: u8,
    #[serde(default)]
    pub(crate) ivf_partitions: Option<usize>,
    #[serde(default = "default_partition_size")]
    pub(crate) ivf_partition_size: usize,
    #[serde(default = "default_nprobe")]
    pub(crate) ivf_nprobe: usize,
    #[serde(default)]
    pub(crate) ivf_refine: Option<usize>,
    #[serde(default = "default_max_segment_size")]
    pub(crate) max_segment_size: u64,
    #[serde(default = "default_idle_seal_ms")]
    pub(crate) idle_seal_ms: u64,
    #[serde(default)]
    pub(crate) optimizer_threads: usize,
    /// Absent in collections made before graph codes: none.
    #[serde(default)]
    pub(crate) codes: Option<String>,
    /// Full-text fields (absent before full text: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) text: Vec<TextFieldFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) embed_model: Option<String>,
    /// BM25 parameters (absent: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bm25_k1: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bm25_b: Option<f32>,
    /// Absent: the cost model's threshold (and in collections made before
    /// it, which get it on open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) index_threshold: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TextFieldFile {
    pub(crate) name: String,
    pub(crate) analyzer: String,
}

fn default_bits() -> u8 {
    IvfParams::default().bits
}
fn default_partition_size() -> usize {
    IvfParams::default().partition_size
}
fn default_nprobe() -> usize {
    IvfParams::default().nprobe
}
fn default_max_segment_size() -> u64 {
    DEFAULT_MAX_SEGMENT_SIZE
}
fn default_idle_seal_ms() -> u64 {
    DEFAULT_IDLE_SEAL_MS
}

impl ConfigFile {
    pub(crate) fn from_config(c: &CollectionConfig) -> Self {
        ConfigFile {
            dims: c.space.dims,
            metric: c.space.metric.name().into(),
            dtype: c.space.dtype.name().into(),
            kind: c.kind.name().into(),
            m: c.hnsw.m,
            ef_construction: c.hnsw.ef_construction,
            ef_search: c.hnsw.ef_search,
            seed: c.hnsw.seed,
            segment_size: c.segment_size,
            durability: c.durability.name(),
            key_bits: c.key_bits,
            // Absent while open (see `CollectionConfig::id_type_open`).
            id_type: (!c.id_type_left_open()).then(|| c.id_type.name().into()),
            ivf_bits: c.ivf.bits,
            ivf_partitions: c.ivf.partitions,
            ivf_partition_size: c.ivf.partition_size,
            ivf_nprobe: c.ivf.nprobe,
            ivf_refine: c.ivf.refine,
            max_segment_size: c.max_segment_size,
            idle_seal_ms: c.idle_seal_ms,
            optimizer_threads: c.optimizer_threads,
            codes: c.codes.map(|d| d.name().into()),
            text: c
                .text
                .iter()
                .map(|f| TextFieldFile {
                    name: f.name.clone(),
                    analyzer: f.analyzer.name().into(),
                })
                .collect(),
            embed_model: c.embed_model.clone(),
            bm25_k1: (!c.text.is_empty()).then_some(c.bm25.k1),
            bm25_b: (!c.text.is_empty()).then_some(c.bm25.b),
            index_threshold: c.index_threshold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagitta_index::Metric;

    #[test]
    fn codes_named_defaults_by_space_and_refuses_unknown_names() -> Result<()> {
        let f32_cos = Space::new(8, Metric::Cos, DType::F32)?;
        assert_eq!(codes_named(None, &f32_cos)?, Some(DType::Sq8));
        assert_eq!(codes_named(Some("none"), &f32_cos)?, None);
        assert_eq!(codes_named(Some("f16"), &f32_cos)?, Some(DType::F16));
        assert_eq!(codes_named(Some("sq16"), &f32_cos)?, Some(DType::Sq16));
        let f16 = Space::new(8, Metric::L2, DType::F16)?;
        assert_eq!(codes_named(None, &f16)?, None);
        let bits = Space::new(64, Metric::Hamming, DType::B1)?;
        assert_eq!(codes_named(None, &bits)?, None);
        for bad in ["f32", "i8", "b1", "", "bogus"] {
            let got = codes_named(Some(bad), &f32_cos);
            assert!(
                matches!(&got, Err(StoreError::Config(m)) if m.contains("codes")),
                "{bad}: {got:?}"
            );
        }
        Ok(())
    }
}
