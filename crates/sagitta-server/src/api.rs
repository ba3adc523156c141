//! The request and response shapes of the HTTP API, which the OpenAPI
//! document is generated from (several serve Flight's actions too). The
//! operations behind them are in [`crate::ops`].

use crate::text::{TextFieldInfo, TextFieldReq};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

/// Creates a collection.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    /// 1 to 64 characters of `A-Z a-z 0-9 _ - .`, starting with a letter,
    /// digit or `_`.
    #[schema(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
    pub name: String,
    /// Vector dimensions (bits for hamming / nphd).
    #[schema(minimum = 1, maximum = 65536)]
    pub dims: usize,
    /// `cos` (default), `l2`, `ip`, `hamming` or `nphd`.
    #[serde(default)]
    pub metric: Option<String>,
    /// Storage type: `f32` (default for float metrics), `f16`, `i8`, `sq8`,
    /// `sq16`, `b1` (binary metrics).
    #[serde(default)]
    pub dtype: Option<String>,
    /// `hnsw` (default), `flat` or `ivf_rq`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Type of the ids: `uint64` (default), `int64`, `string`, or
    /// `uint128` (128-bit keys; results carry them as strings of 32
    /// hexadecimal digits, and they are given as such strings or as
    /// integers).
    #[serde(default)]
    pub id_type: Option<String>,
    /// HNSW links per node (default 16; 2 to 256).
    #[serde(default)]
    pub m: Option<usize>,
    /// HNSW beam width while inserting (default 128; 1 to 65536).
    #[serde(default)]
    pub ef_construction: Option<usize>,
    /// HNSW default beam width while searching (default 64; 1 to 65536).
    #[serde(default)]
    pub ef_search: Option<usize>,
    /// Seal the active segment past this many bytes (default 64 MiB).
    #[serde(default)]
    pub segment_size: Option<u64>,
    /// WAL policy: `batch` (fsync before acknowledging; default), `off`,
    /// or milliseconds such as `100ms`.
    #[serde(default)]
    pub durability: Option<String>,
    /// Compact codes built HNSW segments traverse the graph with, keeping
    /// the full vectors beside them to re-score each search's beam
    /// exactly: `sq8` (the default for `f32` vectors and `cos` / `l2` /
    /// `ip`), `f16`, `sq16`, or `none` (the graph reads the stored
    /// vectors; the default for other dtypes).
    #[serde(default)]
    pub codes: Option<String>,
    /// Payload string columns with a full-text (BM25) index: names
    /// (English analyzer) or `{"name": ..., "analyzer": "en" | "simple"}`.
    #[serde(default)]
    pub text_fields: Option<Vec<TextFieldReq>>,
    /// A built-in embedding model for the first text field
    /// (`all-minilm-l6-v2`): upserts with text and no vectors are embedded,
    /// and so is the text of a search without a vector.
    #[serde(default)]
    pub embed_model: Option<String>,
    /// BM25 k1 of text queries (default 0.9).
    #[serde(default)]
    pub bm25_k1: Option<f32>,
    /// BM25 b of text queries (default 0.4).
    #[serde(default)]
    pub bm25_b: Option<f32>,
    /// HNSW: segments with fewer rows are kept without a graph and
    /// searched by exact scan, cheaper at that size (default: the
    /// planner's cost model, about 41k 256-bit codes or 1.7k 384-d float
    /// rows; 0: every segment gets a graph).
    #[serde(default)]
    pub index_threshold: Option<u64>,
    /// The optimizer merges segments up to this many bytes (default 1
    /// GiB; at least `segment_size`).
    #[serde(default)]
    pub max_segment_size: Option<u64>,
    /// `ivf_rq`: RaBitQ bits per dimension, 1 to 8 (default 1).
    #[serde(default)]
    pub ivf_bits: Option<u8>,
    /// `ivf_rq`: partitions per segment (default: one per 4096 rows).
    #[serde(default)]
    pub ivf_partitions: Option<usize>,
    /// `ivf_rq`: partitions probed per query (default 8).
    #[serde(default)]
    pub ivf_nprobe: Option<usize>,
    /// `ivf_rq`: candidates re-ranked at full precision (default: by
    /// bits).
    #[serde(default)]
    pub ivf_refine: Option<usize>,
}

/// A payload column.
#[derive(Debug, Serialize, ToSchema)]
pub struct FieldInfo {
    /// Column name.
    pub name: String,
    /// int64, float64, bool, string, timestamp or tags.
    #[serde(rename = "type")]
    pub ty: String,
}

/// Whether a collection is indexing writes it has accepted.
#[derive(Debug, Serialize, ToSchema)]
pub struct IndexStatus {
    /// `serving` (every accepted row is searchable) or `building` (ingest
    /// requests are being written and indexed).
    pub state: String,
    /// Rows received by ingest requests still being written.
    pub pending_rows: u64,
    /// Fraction of the rows received since start that are searchable.
    pub progress: f64,
    /// Immutable segments (sealed files and frozen parts being flushed).
    pub segments: usize,
    /// Rows in the mutable (in-memory, WAL-backed) part.
    pub active_vectors: usize,
    /// Live rows not yet in their index (searchable, exactly, meanwhile);
    /// rows of segments under `index_threshold`, searched by exact scan by
    /// design, are not counted.
    pub unindexed_vectors: usize,
    /// Fraction of the live rows in a built index (the background
    /// optimizer's progress).
    pub indexed: f64,
    /// The background optimizer's task in progress (`build`, `merge`,
    /// `compact`), if any.
    pub optimizer_task: Option<String>,
    /// Rows the task in progress has inserted, and will insert.
    pub optimizer_task_rows: [u64; 2],
    /// A task (`build` or `merge`) put off until writes pause: it runs on
    /// its own once the collection has been quiet long enough (a few
    /// seconds, longer for large segments), or at once on `optimize`.
    pub optimizer_deferred: Option<String>,
    /// Failed background flushes and tasks since the server started.
    pub optimizer_errors: u64,
    /// The last background failure.
    pub optimizer_last_error: Option<String>,
}

/// A collection's settings and figures.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionInfo {
    /// Name.
    pub name: String,
    /// Dimensions.
    pub dims: usize,
    /// Metric.
    pub metric: String,
    /// Storage type.
    pub dtype: String,
    /// Compact codes of the built graph segments (full vectors kept for
    /// the rerank), or null.
    pub codes: Option<String>,
    /// Index kind.
    pub kind: String,
    /// Type of the ids: `uint64`, `int64`, `string` or `uint128`. A
    /// collection created without one reads `uint64` until its first
    /// write, which fixes it (see docs/SERVER.md, "Ids").
    pub id_type: String,
    /// WAL policy.
    pub durability: String,
    /// Active segment size that triggers a seal, bytes.
    pub segment_size: u64,
    /// Rows under which a segment is kept without a graph and searched by
    /// exact scan (0: every segment gets one).
    pub index_threshold: u64,
    /// Live vectors.
    pub vectors: usize,
    /// Deleted vectors still held by sealed segments.
    pub tombstones: usize,
    /// Bytes on disk.
    pub disk_bytes: u64,
    /// Payload columns.
    pub schema: Vec<FieldInfo>,
    /// Payload columns with a full-text index.
    pub text_fields: Vec<TextFieldInfo>,
    /// The built-in embedding model, if any.
    pub embed_model: Option<String>,
    /// Index status.
    pub index: IndexStatus,
}

/// The served collections.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionList {
    /// By name.
    pub collections: Vec<CollectionInfo>,
}

/// An id as the user gives it: an integer or a string. A collection's
/// ids have one type (`id_type`: uint64, int64, string or uint128; see
/// docs/SERVER.md) and results carry them in that type (uint128 ids as
/// strings of 32 hexadecimal digits). JSON integers are read exactly from
/// -2^63 to 2^64 - 1; one outside that range (or with a fraction) is
/// refused, naming the value, since it would lose digits: a 128-bit id
/// past 2^64 - 1 is given as a string.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Id {
    /// A non-negative integer.
    UInt(u64),
    /// A negative integer (int64 collections).
    Int(i64),
    /// A string (string collections; in integer collections, a decimal
    /// string is read as its number).
    Str(String),
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        d.deserialize_any(IdVisitor)
    }
}

/// Reads an [`Id`]: integers exactly, strings as they are; a number that
/// JSON's parser could only read as a float is refused with the reason.
struct IdVisitor;

impl serde::de::Visitor<'_> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an id: an integer or a string")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Id, E> {
        Ok(Id::UInt(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Id, E> {
        Ok(u64::try_from(v).map_or(Id::Int(v), Id::UInt))
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Id, E> {
        Ok(Id::Str(v.to_string()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Id, E> {
        Err(E::custom(if v.fract() == 0.0 && v.abs() >= 9.2e18 {
            format!(
                "id {v:e}: a JSON number outside -2^63..2^64-1 cannot be read exactly; \
                 give a larger id (128-bit) as a string: 32 hexadecimal digits or decimal"
            )
        } else {
            format!("id {v}: not an integer (an id is an integer or a string)")
        }))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Id, E> {
        Ok(Id::Str(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Id, E> {
        Ok(Id::Str(v))
    }
}

impl Id {
    /// As the store takes it.
    pub fn to_store(&self) -> sagitta_store::Id {
        match self {
            Id::UInt(u) => sagitta_store::Id::UInt(*u),
            Id::Int(i) => sagitta_store::Id::Int(*i),
            Id::Str(s) => sagitta_store::Id::Str(s.clone()),
        }
    }

    /// As results carry it.
    pub fn from_store(id: sagitta_store::Id) -> Id {
        match id {
            sagitta_store::Id::UInt(u) => Id::UInt(u),
            sagitta_store::Id::Int(i) if i >= 0 => Id::UInt(i as u64),
            sagitta_store::Id::Int(i) => Id::Int(i),
            sagitta_store::Id::Str(s) => Id::Str(s),
            id @ sagitta_store::Id::U128(_) => Id::Str(id.to_string()),
        }
    }
}

/// Inserts or replaces rows.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpsertRequest {
    /// One key per row.
    pub ids: Vec<Id>,
    /// One vector per row (floats; byte values 0-255 for binary metrics).
    /// May be left out on a collection with an embedding model: each row's
    /// text (its first text field, in `payload`) is embedded.
    #[serde(default)]
    pub vectors: Vec<Vec<f32>>,
    /// Optional payload, one JSON object (column → value) or null per row.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub payload: Option<Vec<Json>>,
}

/// Rows written.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpsertResponse {
    /// Rows written (and durable under the collection's WAL policy).
    pub upserted: usize,
}

/// Reads rows by key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRequest {
    /// Keys to read.
    pub ids: Vec<Id>,
    /// Return vectors (default true).
    #[serde(default = "yes")]
    pub include_vectors: bool,
    /// Return payload (default true).
    #[serde(default = "yes")]
    pub include_payload: bool,
    /// Only these payload columns.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// A stored row.
#[derive(Debug, Serialize, ToSchema)]
pub struct Item {
    /// Id.
    pub id: Id,
    /// Vector (float metrics: decoded floats; binary: byte values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f32>>,
    /// Payload columns (null ones left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<serde_json::Map<String, Json>>,
}

/// Rows read.
#[derive(Debug, Serialize, ToSchema)]
pub struct GetResponse {
    /// Rows found, in request order.
    pub items: Vec<Item>,
    /// Keys not found.
    pub missing: Vec<Id>,
}

/// Deletes rows by key or by filter (exactly one of the two).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteRequest {
    /// Keys to delete.
    #[serde(default)]
    pub ids: Option<Vec<Id>>,
    /// Delete every row this filter matches (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
}

/// Rows deleted.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeleteResponse {
    /// Rows that were live and are now deleted.
    pub deleted: usize,
}

/// Sets payload columns of stored rows, by key or by filter (exactly one
/// of the two): each column of `payload` takes its value (null clears it)
/// in every row named; other columns and the vectors stay.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPayloadRequest {
    /// Rows to update; every one must be stored (404 and nothing written
    /// otherwise).
    #[serde(default)]
    pub ids: Option<Vec<Id>>,
    /// Update every row this filter matches (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
    /// Column → new value, the same for every row. New columns join the
    /// schema.
    #[schema(value_type = Object)]
    pub payload: Json,
}

/// Rows updated.
#[derive(Debug, Serialize, ToSchema)]
pub struct SetPayloadResponse {
    /// Rows whose payload was set (and durable under the WAL policy).
    pub updated: usize,
}

/// Counts rows, optionally those a filter matches.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CountRequest {
    /// Filter (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
}

/// A count.
#[derive(Debug, Serialize, ToSchema)]
pub struct CountResponse {
    /// Live rows (matching the filter).
    pub count: usize,
}

/// k-nearest-neighbour search: one `vector`, or a batch of `vectors`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// One query.
    #[serde(default)]
    pub vector: Option<Vec<f32>>,
    /// A batch of queries (at most 1024).
    #[serde(default)]
    pub vectors: Option<Vec<Vec<f32>>>,
    /// Neighbours per query (1 to 10000; default 10).
    #[serde(default = "ten")]
    #[schema(minimum = 1, maximum = 10000)]
    pub k: usize,
    /// HNSW beam width (default: the collection's ef_search).
    #[serde(default)]
    pub ef: Option<usize>,
    /// IVF lists probed.
    #[serde(default)]
    pub nprobe: Option<usize>,
    /// IVF candidates re-ranked at full precision.
    #[serde(default)]
    pub refine: Option<usize>,
    /// Exact search (scan every vector).
    #[serde(default)]
    pub exact: bool,
    /// Only rows this filter matches (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
    /// Return each hit's vector.
    #[serde(default)]
    pub include_vectors: bool,
    /// Return each hit's payload.
    #[serde(default)]
    pub include_payload: bool,
    /// Only these payload columns (implies include_payload).
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Text query: BM25 over the collection's text fields, alone (no
    /// `vector`, no embedding model) or fused with the dense leg of
    /// `vector` (or of the text embedded by the collection's model).
    #[serde(default)]
    pub text: Option<String>,
    /// How the legs are fused: `alpha` (default, alpha 0.3), `rrf` or
    /// `dbsf`.
    #[serde(default)]
    pub fusion: Option<String>,
    /// Weight of the dense leg for `alpha` fusion, in [0, 1] (1: dense
    /// only, 0: text only); given alone, selects `alpha` fusion.
    #[serde(default)]
    pub alpha: Option<f32>,
    /// RRF constant (default 60).
    #[serde(default)]
    pub rrf_k: Option<f32>,
    /// Candidates per leg (default max(k, 20)).
    #[serde(default)]
    pub depth: Option<usize>,
}

fn ten() -> usize {
    10
}

impl crate::fastjson::WithVector for SearchRequest {
    const ONE: Option<&'static str> = Some("vector");
    const MANY: Option<&'static str> = Some("vectors");
    fn set_one(&mut self, v: Vec<f32>) {
        self.vector = Some(v);
    }
    fn set_many(&mut self, v: Vec<Vec<f32>>) {
        self.vectors = Some(v);
    }
}

impl crate::fastjson::WithVector for UpsertRequest {
    const MANY: Option<&'static str> = Some("vectors");
    fn set_many(&mut self, v: Vec<Vec<f32>>) {
        self.vectors = v;
    }
}

/// A neighbour.
#[derive(Debug, Serialize, ToSchema)]
pub struct Hit {
    /// Id.
    pub id: Id,
    /// Distance under the collection's metric (smaller is nearer; cos:
    /// 1 - cosine similarity, ip: negative inner product, l2: squared
    /// Euclidean distance).
    pub score: f32,
    /// Vector, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f32>>,
    /// Payload, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<serde_json::Map<String, Json>>,
    /// Text and hybrid searches: the row's rank (from 1) in the dense leg.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense_rank: Option<u32>,
    /// Text and hybrid searches: the row's distance in the dense leg.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense_distance: Option<f32>,
    /// Text and hybrid searches: the row's rank (from 1) in the text leg.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_rank: Option<u32>,
    /// Text and hybrid searches: the row's BM25 score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_score: Option<f32>,
}

/// The neighbours of one query, nearest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResponse {
    /// Hits.
    pub hits: Vec<Hit>,
}

/// The neighbours of each query of a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchSearchResponse {
    /// One entry per query, in order.
    pub results: Vec<SearchResponse>,
}

/// The search answer: one query's hits, or one entry per query of a batch.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum SearchResult {
    /// For `vector`.
    One(SearchResponse),
    /// For `vectors`.
    Batch(BatchSearchResponse),
}

/// Body of `POST /collections/{name}/optimize` (and the `optimize`
/// Flight action, with `name`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OptimizeRequest {
    /// Also rewrite every segment holding deleted rows, not only those
    /// past the policy's dead ratio (default false).
    #[serde(default)]
    pub compact: bool,
}
