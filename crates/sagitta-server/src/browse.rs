//! Looking inside a collection, for operators and the web console: its
//! parts (segments) and the optimizer's totals, and rows page by page in
//! storage order (`scroll`), optionally filtered.

use crate::api::Id;
use crate::error::{ApiError, ApiResult};
use crate::ops;
use crate::registry::Entry;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

/// Most rows one scroll request returns.
pub const MAX_SCROLL: usize = 1000;
/// Largest scroll offset (a scroll walks the rows before it).
pub const MAX_OFFSET: usize = 1_000_000;

/// One immutable part of a collection.
#[derive(Debug, Serialize, ToSchema)]
pub struct SegmentEntry {
    /// Part id (a merge's output has a larger id than its inputs).
    pub id: u64,
    /// Segment file; absent for a frozen part still in memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Rows stored (live, replaced and deleted).
    pub rows: usize,
    /// Live rows.
    pub live: usize,
    /// Rows replaced or deleted since it was written (tombstones).
    pub tombstones: usize,
    /// `flat`, `hnsw` or `ivf_rq`.
    pub kind: String,
    /// Searched through the collection's index kind (false: exact scan).
    pub indexed: bool,
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Bytes in memory (frozen parts).
    pub memory_bytes: u64,
    /// When its file was written, milliseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written_ms: Option<u64>,
}

/// The optimizer's work since the collection was opened.
#[derive(Debug, Serialize, ToSchema)]
pub struct OptimizerTotals {
    /// `build`, `merge` or `compact` in progress; absent when idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Rows of the task in progress done so far, and in all.
    pub task_rows: [u64; 2],
    /// `build` or `merge` put off until writes pause; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deferred: Option<String>,
    /// Tasks finished.
    pub tasks_done: u64,
    /// Frozen parts written as segment files (seals).
    pub flushes: u64,
    /// Rows written by those flushes.
    pub rows_flushed: u64,
    /// Rows inserted into built indexes.
    pub rows_indexed: u64,
    /// Failures.
    pub errors: u64,
    /// The last failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A change to the part list.
#[derive(Debug, Serialize, ToSchema)]
pub struct PartChange {
    /// When, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `seal`, `build`, `merge` or `compact`.
    pub what: String,
    /// Ids of the parts it replaced.
    pub inputs: Vec<u64>,
    /// Id of the part it wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<u64>,
    /// Rows of that part.
    pub rows: usize,
}

/// A collection's parts.
#[derive(Debug, Serialize, ToSchema)]
pub struct SegmentsResponse {
    /// Sealed segments by id, then frozen parts.
    pub segments: Vec<SegmentEntry>,
    /// The latest seals, builds, merges and compactions since the
    /// collection was opened (at most 256), oldest first.
    pub history: Vec<PartChange>,
    /// Rows in the mutable part (in memory, in the WAL).
    pub active_vectors: usize,
    /// Bytes of write-ahead log.
    pub wal_bytes: u64,
    /// The optimizer.
    pub optimizer: OptimizerTotals,
}

/// Lists a collection's parts.
pub fn segments(e: &Entry) -> SegmentsResponse {
    let s = e.coll.stats();
    let o = s.optimizer;
    SegmentsResponse {
        segments: e
            .coll
            .parts()
            .into_iter()
            .map(|p| SegmentEntry {
                id: p.id,
                file: p.file,
                rows: p.rows,
                live: p.live,
                tombstones: p.dead,
                kind: p.kind.to_string(),
                indexed: p.indexed,
                file_bytes: p.file_bytes,
                memory_bytes: p.memory_bytes,
                written_ms: p.written_ms,
            })
            .collect(),
        history: e
            .coll
            .history()
            .into_iter()
            .map(|h| PartChange {
                at_ms: h.at_ms,
                what: h.what.to_string(),
                inputs: h.inputs,
                output: h.output,
                rows: h.rows,
            })
            .collect(),
        active_vectors: s.active_vectors,
        wal_bytes: s.wal_bytes,
        optimizer: OptimizerTotals {
            task: o.task,
            task_rows: [o.task_rows_done, o.task_rows_total],
            deferred: o.deferred,
            tasks_done: o.tasks_done,
            flushes: o.flushes,
            rows_flushed: o.rows_flushed,
            rows_indexed: o.rows_indexed,
            errors: o.errors,
            last_error: o.last_error,
        },
    }
}

/// Rows in storage order, a page at a time.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrollRequest {
    /// Rows to return (1 to 1000; default 20).
    #[serde(default = "twenty")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: usize,
    /// Rows to skip first (`next_offset` of the previous page; at most
    /// 1,000,000).
    #[serde(default)]
    pub offset: usize,
    /// Only rows this filter matches (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
    /// Only these payload columns.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Return each row's vector.
    #[serde(default)]
    pub include_vectors: bool,
}

fn twenty() -> usize {
    20
}

/// A row of a scroll page.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScrollRow {
    /// Id.
    pub id: Id,
    /// Payload (null values left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<serde_json::Map<String, Json>>,
    /// Vector, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f32>>,
}

/// A page of rows.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScrollResponse {
    /// Rows.
    pub items: Vec<ScrollRow>,
    /// Offset of the next page; absent after the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

/// Runs a scroll request. Pages are read from a snapshot taken per
/// request: rows written between two pages may shift the offsets.
pub fn run_scroll(e: &Entry, req: ScrollRequest) -> ApiResult<ScrollResponse> {
    if req.limit == 0 || req.limit > MAX_SCROLL {
        return Err(ApiError::BadRequest(format!(
            "limit: 1 to {MAX_SCROLL} rows per page"
        )));
    }
    if req.offset > MAX_OFFSET {
        return Err(ApiError::BadRequest(format!(
            "offset: at most {MAX_OFFSET} (narrow the rows with a filter)"
        )));
    }
    let coll = &e.coll;
    let pred = ops::bind(coll, req.filter.as_ref())?;
    let want = req.offset + req.limit + 1;
    // Keys and payload rows from the scan itself: one snapshot per page,
    // no second lookup by key.
    let mut scan = coll.scan(pred.as_ref(), want.min(4096))?;
    let schema = scan.schema().clone();
    let picks = ops::payload_picks(&schema, req.columns.as_deref())?;
    let (mut keys, mut rows) = (Vec::new(), Vec::new());
    let mut seen = 0usize;
    for batch in scan.by_ref() {
        let batch = batch?;
        for (k, row) in batch.keys.into_iter().zip(batch.rows) {
            if seen >= req.offset && keys.len() < req.limit {
                keys.push(k);
                rows.push(row);
            }
            seen += 1;
        }
        if seen >= want {
            break;
        }
    }
    let more = seen > req.offset + req.limit;
    let ids = coll.ids_of(&keys)?;
    let mut items = Vec::with_capacity(keys.len());
    for ((k, id), row) in keys.iter().zip(ids).zip(rows) {
        // A row deleted since the scan read it has no id any more.
        let Some(id) = id else {
            continue;
        };
        let vector = if req.include_vectors {
            ops::vector_json(coll, *k)
        } else {
            None
        };
        items.push(ScrollRow {
            id: Id::from_store(id),
            payload: Some(ops::row_json(&schema, &picks, &row)),
            vector,
        });
    }
    Ok(ScrollResponse {
        items,
        next_offset: more.then_some(req.offset + req.limit),
    })
}

/// Who the caller is.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// `read`, `write` or `admin`: what the presented key may do.
    pub role: String,
    /// Whether the server checks API keys (false: every caller is admin,
    /// on loopback).
    pub auth: bool,
}
