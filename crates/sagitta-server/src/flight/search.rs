//! Searches over Flight: the `{"search": {...}}` ticket of DoGet and the
//! body of the `VectorSearch` / `HybridSearch` actions ([`SearchTicket`]),
//! translated into the store's [`Query`], and their answers (an Arrow
//! batch, or Longbow's `HybridSearch` JSON).
//!
//! A dense search reads each hit's id, vector and payload with the search
//! itself ([`Collection::search_rows`]: the part and slot that answered,
//! in the same snapshot), never by key afterwards: a row overwritten or
//! removed meanwhile would come back as its newer version, or without
//! payload. Text and hybrid searches still read their rows by key after
//! the search.

use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::fastjson::WithVector;
use crate::ops::{self, Knobs};
use crate::registry::Entry;
use crate::text;
use arrow_array::{ArrayRef, Float32Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use bytes::Bytes;
use sagitta_store::{Answer, Collection, Query, ScanBatch, Schema};
use serde::Deserialize;
use serde_json::{json, Value as Json};
use std::sync::Arc;

/// `{"search": {...}}`. Fields marked "accepted" are taken and not acted on.
/// The answer is [`convert::hits_batch`]: `id`, `score`, with `text_query`
/// each leg's rank and score, with `include_vectors` the `vector`, then
/// every payload column.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchTicket {
    pub dataset: String,
    /// The dense query; empty or absent with `text_query`: text only (or
    /// the text embedded by the collection's model).
    #[serde(default)]
    pub vector: Vec<f32>,
    /// Longbow's hybrid / sparse search: BM25 over the text fields.
    #[serde(default)]
    pub text_query: Option<String>,
    /// More queries (the `VectorSearch` action only).
    #[serde(default)]
    pub vectors: Vec<Vec<f32>>,
    /// Longbow's fusion weight: 1.0 dense only, 0.0 text only (with
    /// `text_query`; without one the search is dense).
    #[serde(default)]
    pub alpha: Option<f32>,
    /// `alpha` (default), `rrf` or `dbsf`.
    #[serde(default)]
    pub fusion: Option<String>,
    /// Candidates per leg.
    #[serde(default)]
    pub depth: Option<usize>,
    #[serde(default = "ten")]
    pub k: usize,
    #[serde(default)]
    pub filters: Option<Json>,
    #[serde(default)]
    pub ef: Option<usize>,
    #[serde(default)]
    pub nprobe: Option<usize>,
    #[serde(default)]
    pub refine: Option<usize>,
    #[serde(default)]
    pub exact: bool,
    /// Adds a `vector` column to the results.
    #[serde(default)]
    pub include_vectors: Option<Json>,
    // Accepted, not acted on.
    #[serde(default)]
    #[allow(dead_code)]
    vector_format: Option<Json>,
    #[serde(default)]
    #[allow(dead_code)]
    local_only: Option<Json>,
    #[serde(default)]
    #[allow(dead_code)]
    graph_alpha: Option<Json>,
}

pub fn ten() -> usize {
    10
}

/// `include_vectors`: true, or a non-empty format name.
fn wants_vectors(v: &Option<Json>) -> bool {
    match v {
        Some(Json::Bool(b)) => *b,
        Some(Json::String(s)) => !s.is_empty() && s != "false",
        _ => false,
    }
}

/// A filter in either form: a list of conditions (AND) or an expression;
/// an empty list is no filter.
pub fn filter_of(f: Option<Json>) -> Option<Json> {
    match f {
        Some(Json::Array(a)) if a.is_empty() => None,
        Some(Json::Null) | None => None,
        f => f,
    }
}

impl WithVector for SearchTicket {
    const ONE: Option<&'static str> = Some("vector");
    const MANY: Option<&'static str> = Some("vectors");
    fn set_one(&mut self, v: Vec<f32>) {
        self.vector = v;
    }
    fn set_many(&mut self, v: Vec<Vec<f32>>) {
        self.vectors = v;
    }
}

/// One query of a search ticket or action: dense, text or hybrid (with
/// `text_query`), as a batch of [`convert::hits_batch`].
pub fn search_batch(
    e: &Entry,
    s: &SearchTicket,
    vector: Vec<f32>,
) -> ApiResult<arrow_array::RecordBatch> {
    let space = e.coll.config().space;
    let pred = ops::bind(&e.coll, filter_of(s.filters.clone()).as_ref())?;
    let knobs = Knobs {
        ef: s.ef,
        nprobe: s.nprobe,
        refine: s.refine,
        exact: s.exact,
    };
    let with_vectors = wants_vectors(&s.include_vectors);
    let text = text_of(s);
    let v = match text {
        Some(_) if vector.is_empty() => None,
        _ => Some(ops::json_vector(&space, vector, 0)?),
    };
    let q = query_of(s, text, v.as_ref(), &knobs, pred.as_ref())?;
    if q.text.is_none() {
        let (hits, rows, schema) = dense_rows(&e.coll, &q, with_vectors)?;
        return dense_batch(&e.coll, &hits, rows, &schema, with_vectors);
    }
    match ops::query(&e.coll, &q)? {
        Answer::Dense(mut d) => {
            let hits = d.pop().unwrap_or_default();
            let keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
            let scores: Vec<f32> = hits.iter().map(|h| h.distance).collect();
            convert::hits_batch(&e.coll, &keys, scores, Vec::new(), with_vectors)
        }
        Answer::Fused(hits) => convert::text_hits_batch(&e.coll, &hits, with_vectors),
    }
}

/// The one query of a dense `q`: its hits and their rows as the search
/// found them (with `with_vectors` their stored vectors), and the schema
/// the rows are laid out by.
pub fn dense_rows(
    coll: &Collection,
    q: &Query<'_>,
    with_vectors: bool,
) -> ApiResult<(Vec<sagitta_index::Neighbor>, ScanBatch, Schema)> {
    let mut found = coll.search_rows(q, with_vectors)?;
    let hits = found.hits.pop().unwrap_or_default();
    let rows = found.rows.pop().unwrap_or_default();
    Ok((hits, rows, found.schema))
}

/// A dense search's answer as [`convert::hits_batch`] lays it out (`id`,
/// `score`, with `with_vectors` the `vector`, then every payload column),
/// built from the rows the search found (`rows`, laid out by `schema`)
/// rather than read again by key.
fn dense_batch(
    coll: &Collection,
    hits: &[sagitta_index::Neighbor],
    mut rows: ScanBatch,
    schema: &Schema,
    with_vectors: bool,
) -> ApiResult<RecordBatch> {
    if hits.is_empty() {
        // No rows to read: the empty batch, laid out as any other.
        return convert::hits_batch(coll, &[], Vec::new(), Vec::new(), with_vectors);
    }
    if !with_vectors {
        // `scan_batch` lays out a vector column; this one is dropped below.
        rows.vectors = vec![0; hits.len() * coll.config().space.vector_bytes()];
    }
    let layout = convert::row_schema(coll);
    let t = convert::scan_batch(coll, &layout, schema, rows, |_| true)?
        .ok_or_else(|| ApiError::Internal("search rows: an empty batch of hits".into()))?;
    let ts = t.schema();
    let mut fields: Vec<Field> = vec![
        ts.field(0).clone(),
        Field::new("score", DataType::Float32, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        t.column(0).clone(),
        Arc::new(Float32Array::from_iter_values(
            hits.iter().map(|h| h.distance),
        )),
    ];
    let from = if with_vectors { 1 } else { 2 };
    for i in from..t.num_columns() {
        fields.push(ts.field(i).clone());
        cols.push(t.column(i).clone());
    }
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), cols)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A search ticket's text query: Longbow's `text_query`, unless blank (a
/// blank one is a dense search, as Longbow treats it).
fn text_of(s: &SearchTicket) -> Option<&str> {
    s.text_query.as_deref().filter(|t| !t.trim().is_empty())
}

/// The store's query for one query of a search ticket: dense, or with
/// `text` a text or hybrid one (Longbow's `alpha` and Sagitta's `fusion`
/// and `depth` apply to those only; a dense ticket's `alpha` is ignored,
/// as Longbow ignores it).
fn query_of<'a>(
    s: &'a SearchTicket,
    text: Option<&'a str>,
    vector: Option<&'a ops::OwnedVector>,
    knobs: &Knobs,
    pred: Option<&'a sagitta_store::filter::Bound>,
) -> ApiResult<Query<'a>> {
    let vectors = vector.map(ops::OwnedVector::as_ref).into_iter().collect();
    Ok(match text {
        None => Query {
            opts: knobs.opts(pred),
            ..Query::dense(vectors, s.k)
        },
        Some(t) => Query {
            vectors,
            text: Some(t),
            fusion: text::fusion_of(s.fusion.as_deref(), s.alpha, None)?,
            depth: s.depth,
            k: s.k,
            opts: knobs.opts(pred),
        },
    })
}

/// A batch as one Arrow IPC stream (schema, then the batch).
pub fn ipc_bytes(b: &arrow_array::RecordBatch) -> ApiResult<Bytes> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &b.schema())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    w.write(b).map_err(|e| ApiError::Internal(e.to_string()))?;
    w.finish().map_err(|e| ApiError::Internal(e.to_string()))?;
    drop(w);
    Ok(Bytes::from(out))
}

/// Longbow's `HybridSearch` result: a JSON array of `{ID, Distance, Score,
/// Metadata}` (Distance: the dense distance, null where the row came from
/// the text leg only; Score: the fused score, larger is better; without
/// `text_query` both are the distance).
pub fn hybrid_json(e: &Entry, s: &SearchTicket) -> ApiResult<Json> {
    let space = e.coll.config().space;
    let pred = ops::bind(&e.coll, filter_of(s.filters.clone()).as_ref())?;
    let knobs = Knobs {
        ef: s.ef,
        nprobe: s.nprobe,
        refine: s.refine,
        exact: s.exact,
    };
    let text = text_of(s);
    let v = match text {
        Some(_) if s.vector.is_empty() => None,
        _ => Some(ops::json_vector(&space, s.vector.clone(), 0)?),
    };
    let q = query_of(s, text, v.as_ref(), &knobs, pred.as_ref())?;
    if q.text.is_none() {
        // Dense: ids and metadata from the rows the search found.
        let (hits, rows, schema) = dense_rows(&e.coll, &q, false)?;
        let ids = ops::ids_of_rows(&e.coll, &rows, &schema);
        let picks = ops::payload_picks(&schema, None)?;
        return Ok(Json::Array(
            hits.iter()
                .zip(ids)
                .zip(&rows.rows)
                .map(|((h, id), r)| {
                    json!({"ID": id, "Distance": h.distance, "Score": h.distance,
                           "Metadata": ops::row_json(&schema, &picks, r)})
                })
                .collect(),
        ));
    }
    let rows: Vec<(u64, Json, f32)> = match ops::query(&e.coll, &q)? {
        Answer::Dense(mut d) => d
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|n| (n.key, json!(n.distance), n.distance))
            .collect(),
        Answer::Fused(hits) => hits
            .into_iter()
            .map(|h| (h.key, h.dense.map_or(Json::Null, |d| json!(d.1)), h.score))
            .collect(),
    };
    let keys: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let ids = ops::ids_of(&e.coll, &keys)?;
    let meta = ops::payload_json(&e.coll, &keys, None)?;
    Ok(Json::Array(
        rows.into_iter()
            .zip(ids)
            .zip(meta)
            .map(|(((_, dist, score), id), m)| {
                json!({"ID": id, "Distance": dist, "Score": score, "Metadata": m.unwrap_or_default()})
            })
            .collect(),
    ))
}
