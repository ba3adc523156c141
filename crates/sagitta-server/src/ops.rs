//! What both protocols do, over the registry: the operations behind the
//! HTTP API's requests (their shapes are in [`crate::api`]) and the Flight
//! calls, run on the executor's pools.

use crate::api::{
    BatchSearchResponse, CollectionInfo, CountRequest, CountResponse, CreateCollection,
    DeleteRequest, DeleteResponse, FieldInfo, GetRequest, GetResponse, Hit, Id, IndexStatus, Item,
    OptimizeRequest, SearchRequest, SearchResponse, SearchResult, SetPayloadRequest,
    SetPayloadResponse, UpsertRequest, UpsertResponse,
};
use crate::error::{ApiError, ApiResult};
use crate::registry::Entry;
use crate::text::{self, TextFieldReq};
use sagitta_index::{DType, Space, VectorRef};
use sagitta_store::filter::Bound;
use sagitta_store::{
    Answer, Collection, CollectionConfig, CollectionOptions, CollectionSearch, CollectionStats,
    Filter, IdColumn, Payload, Query, ScanBatch, Schema, TextHit, Value, STRING_ID_FIELD,
};
use serde_json::Value as Json;
use std::sync::atomic::Ordering;

/// Most queries in one batch search.
pub use sagitta_store::limits::MAX_BATCH_QUERIES;
/// Largest k a search may ask for.
pub use sagitta_store::limits::MAX_K;
/// Most keys in one get or delete request.
pub const MAX_KEYS: usize = 100_000;

/// The keys of `ids` in `coll` (typed errors for ids of the wrong type).
pub fn keys_of(coll: &Collection, ids: &[Id]) -> ApiResult<Vec<u64>> {
    let ids: Vec<sagitta_store::Id> = ids.iter().map(Id::to_store).collect();
    Ok(coll.keys_of(&ids)?)
}

/// The keys of those of `ids` that are live in `coll` (a hashed id is
/// checked against the id stored with its key).
pub fn live_keys_of(coll: &Collection, ids: &[Id]) -> ApiResult<Vec<u64>> {
    let ids: Vec<sagitta_store::Id> = ids.iter().map(Id::to_store).collect();
    Ok(coll.live_keys(&ids)?.into_iter().flatten().collect())
}

/// The ids of `rows` (found by a search, laid out by `schema`): the key
/// itself for integer ids, the id kept in the row for hashed ones (as
/// [`ids_of`] reads them by key).
pub fn ids_of_rows(coll: &Collection, rows: &ScanBatch, schema: &Schema) -> Vec<Id> {
    let t = coll.id_type();
    let sid = schema.field(STRING_ID_FIELD).ok().map(|(i, _)| i);
    rows.keys
        .iter()
        .zip(&rows.rows)
        .map(|(&k, r)| {
            t.id_of(k, sid.and_then(|i| r.get(i)))
                .map_or(Id::UInt(k), Id::from_store)
        })
        .collect()
}

/// The ids of `keys` as results carry them (the key itself where a string
/// id is missing, which only a key written before id types can be).
pub fn ids_of(coll: &Collection, keys: &[u64]) -> ApiResult<Vec<Id>> {
    Ok(coll
        .ids_of(keys)?
        .into_iter()
        .zip(keys)
        .map(|(id, &k)| id.map_or(Id::UInt(k), Id::from_store))
        .collect())
}

pub use sagitta_store::string_key;

/// A query or stored vector as the user gave it.
#[derive(Debug, Clone)]
pub enum OwnedVector {
    /// Floats.
    F32(Vec<f32>),
    /// Packed bits / codes.
    Bytes(Vec<u8>),
}

impl OwnedVector {
    /// Borrowed.
    pub fn as_ref(&self) -> VectorRef<'_> {
        match self {
            OwnedVector::F32(v) => VectorRef::F32(v),
            OwnedVector::Bytes(b) => VectorRef::Bytes(b),
        }
    }
}

/// A JSON vector for `space`: floats as they are, or bytes (each value an
/// integer 0..=255) for binary metrics.
pub fn json_vector(space: &Space, v: Vec<f32>, row: usize) -> ApiResult<OwnedVector> {
    if space.dtype != DType::B1 {
        return Ok(OwnedVector::F32(v));
    }
    let mut out = Vec::with_capacity(v.len());
    for (i, x) in v.into_iter().enumerate() {
        if !(0.0..=255.0).contains(&x) || x.fract() != 0.0 {
            return Err(ApiError::BadRequest(format!(
                "row {row}: component {i} = {x}: binary vectors are given as bytes (integers 0-255)"
            )));
        }
        out.push(x as u8);
    }
    Ok(OwnedVector::Bytes(out))
}

/// A collection config from a create request: its fields translated into
/// the store's [`CollectionOptions`], which parses and validates them.
pub fn config_from(req: &CreateCollection) -> ApiResult<CollectionConfig> {
    let options = CollectionOptions {
        dims: req.dims,
        metric: req.metric.clone(),
        dtype: req.dtype.clone(),
        kind: req.kind.clone(),
        m: req.m,
        ef_construction: req.ef_construction,
        ef_search: req.ef_search,
        ivf_bits: req.ivf_bits,
        ivf_partitions: req.ivf_partitions,
        ivf_nprobe: req.ivf_nprobe,
        ivf_refine: req.ivf_refine,
        codes: req.codes.clone(),
        segment_size: req.segment_size,
        max_segment_size: req.max_segment_size,
        durability: req.durability.clone(),
        id_type: req.id_type.clone(),
        text_fields: req
            .text_fields
            .iter()
            .flatten()
            .map(TextFieldReq::option)
            .collect(),
        embed_model: req.embed_model.clone(),
        bm25_k1: req.bm25_k1,
        bm25_b: req.bm25_b,
        index_threshold: req.index_threshold,
        ..CollectionOptions::default()
    };
    Ok(options.to_config()?)
}

/// A collection's settings, figures and index status.
pub fn describe(e: &Entry) -> CollectionInfo {
    let cfg = e.coll.config();
    let s = e.coll.stats();
    CollectionInfo {
        name: e.name.clone(),
        dims: cfg.space.dims,
        metric: cfg.space.metric.name().into(),
        dtype: cfg.space.dtype.name().into(),
        codes: cfg
            .keeps_full()
            .then(|| cfg.built_space().dtype.name().into()),
        kind: cfg.kind.name().into(),
        id_type: e.coll.id_type().name().into(),
        durability: cfg.durability.name(),
        segment_size: cfg.segment_size,
        index_threshold: cfg.index_threshold_rows(),
        vectors: s.vectors,
        tombstones: s.tombstones,
        disk_bytes: s.bytes_on_disk,
        schema: schema_info(&e.coll.schema()),
        text_fields: text::text_field_info(&e.coll),
        embed_model: cfg.embed_model.clone(),
        index: index_status(e, &s),
    }
}

/// The payload schema as a list of fields.
pub fn schema_info(schema: &Schema) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .map(|f| FieldInfo {
            name: f.name.clone(),
            ty: f.ty.name().into(),
        })
        .collect()
}

/// Seals, then waits until the optimizer has built and merged everything
/// written before the call (see [`OptimizeRequest`]); answers the index
/// status after.
pub fn run_optimize(e: &Entry, req: &OptimizeRequest) -> ApiResult<IndexStatus> {
    if req.compact {
        e.coll.compact()?;
    } else {
        e.coll.optimize()?;
    }
    Ok(index_status(e, &e.coll.stats()))
}

/// Index status of a collection.
pub fn index_status(e: &Entry, s: &CollectionStats) -> IndexStatus {
    let pending = e.pending_rows.load(Ordering::Acquire);
    let done = e.ingested_rows.load(Ordering::Acquire);
    IndexStatus {
        state: if pending > 0 { "building" } else { "serving" }.into(),
        pending_rows: pending,
        progress: if pending == 0 {
            1.0
        } else {
            done as f64 / (done + pending) as f64
        },
        segments: s.segments,
        active_vectors: s.active_vectors,
        unindexed_vectors: s.unindexed_vectors,
        indexed: if s.vectors == 0 {
            1.0
        } else {
            1.0 - s.unindexed_vectors as f64 / s.vectors as f64
        },
        optimizer_task: s.optimizer.task.clone(),
        optimizer_task_rows: [s.optimizer.task_rows_done, s.optimizer.task_rows_total],
        optimizer_deferred: s.optimizer.deferred.clone(),
        optimizer_errors: s.optimizer.errors,
        optimizer_last_error: s.optimizer.last_error.clone(),
    }
}

/// Parses and binds a JSON filter against the collection's schema.
pub fn bind(coll: &Collection, filter: Option<&Json>) -> ApiResult<Option<Bound>> {
    match filter {
        None | Some(Json::Null) => Ok(None),
        Some(f) => Ok(Some(coll.bind_filter(&Filter::parse(f)?)?)),
    }
}

/// Counts bookkeeping of an ingest request around `f`.
pub fn ingest<T>(e: &Entry, rows: usize, f: impl FnOnce() -> ApiResult<T>) -> ApiResult<T> {
    e.pending_rows.fetch_add(rows as u64, Ordering::AcqRel);
    let r = f();
    e.pending_rows.fetch_sub(rows as u64, Ordering::AcqRel);
    if r.is_ok() {
        e.ingested_rows.fetch_add(rows as u64, Ordering::AcqRel);
    }
    r
}

/// Writes rows (ids, vectors, optional payload) durably.
pub fn upsert(
    e: &Entry,
    ids: &IdColumn,
    vectors: &[VectorRef<'_>],
    payload: Option<&Payload>,
) -> ApiResult<usize> {
    if ids.len() != vectors.len() {
        return Err(ApiError::BadRequest(format!(
            "{} ids for {} vectors",
            ids.len(),
            vectors.len()
        )));
    }
    ingest(e, ids.len(), || {
        e.coll.upsert_ids(ids, vectors, payload)?;
        Ok(ids.len())
    })
}

/// The ids of a JSON write as one column (the collection's type decides
/// how each is read; see [`sagitta_store::IdType::key`]). In a collection
/// whose id type is still open (created without one), integers of which
/// one is negative are int64 ids: the write fixes the type to int64.
pub fn id_column(coll: &Collection, ids: &[Id]) -> ApiResult<IdColumn> {
    if coll.id_type_open()
        && ids.iter().any(|id| matches!(id, Id::Int(_)))
        && ids.iter().all(|id| !matches!(id, Id::Str(_)))
    {
        return ids
            .iter()
            .enumerate()
            .map(|(row, id)| match id {
                Id::Int(i) => Ok(*i),
                Id::UInt(u) => i64::try_from(*u).map_err(|_| {
                    sagitta_store::StoreError::InvalidId {
                        row,
                        source: sagitta_store::IdError {
                            id: u.to_string(),
                            want: sagitta_store::IdType::Int64,
                        },
                    }
                    .into()
                }),
                Id::Str(_) => Err(ApiError::Internal("string id among integers".into())),
            })
            .collect::<ApiResult<Vec<i64>>>()
            .map(IdColumn::Int);
    }
    Ok(match coll.id_type() {
        sagitta_store::IdType::String => IdColumn::Str(
            ids.iter()
                .map(|id| match id {
                    Id::Str(s) => s.clone(),
                    Id::UInt(u) => u.to_string(),
                    Id::Int(i) => i.to_string(),
                })
                .collect(),
        ),
        sagitta_store::IdType::Int64 => {
            let keys = keys_of(coll, ids)?;
            IdColumn::Int(keys.into_iter().map(|k| k as i64).collect())
        }
        sagitta_store::IdType::UInt64 => IdColumn::UInt(keys_of(coll, ids)?),
        t @ sagitta_store::IdType::UInt128 => IdColumn::U128(
            ids.iter()
                .enumerate()
                .map(|(row, id)| match t.canonical(&id.to_store()) {
                    Ok(sagitta_store::Id::U128(v)) => Ok(v),
                    Ok(_) => Err(ApiError::Internal("uint128 canonical id".into())),
                    Err(source) => Err(sagitta_store::StoreError::InvalidId { row, source }.into()),
                })
                .collect::<ApiResult<_>>()?,
        ),
    })
}

/// Search knobs shared by both protocols.
#[derive(Debug, Default, Clone)]
pub struct Knobs {
    /// Beam width.
    pub ef: Option<usize>,
    /// IVF probes.
    pub nprobe: Option<usize>,
    /// IVF re-rank.
    pub refine: Option<usize>,
    /// Exact.
    pub exact: bool,
}

impl Knobs {
    /// The store's per-search options for these knobs and a payload
    /// filter.
    pub fn opts<'a>(&self, pred: Option<&'a Bound>) -> CollectionSearch<'a> {
        CollectionSearch {
            ef: self.ef,
            exact: self.exact,
            nprobe: self.nprobe,
            refine: self.refine,
            predicate: pred,
            ..CollectionSearch::default()
        }
    }
}

/// Runs a query the protocols have translated; the store checks it (k,
/// knobs, text-only settings) and answers from one snapshot.
pub fn query(coll: &Collection, q: &Query<'_>) -> ApiResult<Answer> {
    Ok(coll.query(q)?)
}

/// k nearest (key, distance) per query.
pub fn search(
    coll: &Collection,
    queries: &[OwnedVector],
    k: usize,
    knobs: &Knobs,
    pred: Option<&Bound>,
) -> ApiResult<Vec<Vec<(u64, f32)>>> {
    let q = Query {
        opts: knobs.opts(pred),
        ..Query::dense(queries.iter().map(OwnedVector::as_ref).collect(), k)
    };
    match query(coll, &q)? {
        Answer::Dense(res) => Ok(res
            .into_iter()
            .map(|r| r.into_iter().map(|n| (n.key, n.distance)).collect())
            .collect()),
        Answer::Fused(_) => Err(ApiError::Internal(
            "a dense query answered fused rows".into(),
        )),
    }
}

/// A text or hybrid query's fused rows: `text`, and `vector` (None: text
/// only, or the text embedded by the collection's model).
pub fn search_text(coll: &Collection, q: &Query<'_>) -> ApiResult<Vec<TextHit>> {
    match query(coll, q)? {
        Answer::Fused(hits) => Ok(hits),
        Answer::Dense(_) => Err(ApiError::Internal(
            "a text query answered dense rows".into(),
        )),
    }
}

/// A stored vector as JSON numbers.
pub fn vector_json(coll: &Collection, key: u64) -> Option<Vec<f32>> {
    Some(match stored_vector(coll, key)? {
        OwnedVector::F32(v) => v,
        OwnedVector::Bytes(b) => b.into_iter().map(f32::from).collect(),
    })
}

/// A stored vector as the user gave it: decoded floats, or the packed
/// bytes of a binary collection.
pub fn stored_vector(coll: &Collection, key: u64) -> Option<OwnedVector> {
    let raw = coll.get_raw(key)?;
    let space = coll.config().space;
    Some(match space.decode_floats(&raw) {
        Some(v) => OwnedVector::F32(v),
        None => OwnedVector::Bytes(raw[..space.vector_bytes()].to_vec()),
    })
}

/// Payload rows of `keys` as JSON objects (null values left out), limited
/// to `columns` when given.
pub fn payload_json(
    coll: &Collection,
    keys: &[u64],
    columns: Option<&[String]>,
) -> ApiResult<Vec<Option<serde_json::Map<String, Json>>>> {
    let schema = coll.schema();
    let picks = payload_picks(&schema, columns)?;
    let rows = coll.payload_rows(keys)?;
    Ok(rows
        .into_iter()
        .map(|r| r.map(|row| row_json(&schema, &picks, &row)))
        .collect())
}

/// The columns of `schema` a response shows: `columns`, or every column
/// but the hidden string-id one.
pub fn payload_picks(schema: &Schema, columns: Option<&[String]>) -> ApiResult<Vec<usize>> {
    Ok(match columns {
        None => (0..schema.len())
            .filter(|&i| schema.fields()[i].name != sagitta_store::STRING_ID_FIELD)
            .collect(),
        Some(cols) => cols
            .iter()
            .map(|c| schema.field(c).map(|(i, _)| i))
            .collect::<Result<_, _>>()?,
    })
}

/// A payload row laid out by `schema` as a JSON object of the `picks`
/// columns (null values left out).
pub fn row_json(schema: &Schema, picks: &[usize], row: &[Value]) -> serde_json::Map<String, Json> {
    let mut m = serde_json::Map::new();
    for &i in picks {
        if let Some(v) = row.get(i).filter(|v| !v.is_null()) {
            m.insert(schema.fields()[i].name.clone(), v.to_json());
        }
    }
    m
}

/// Runs a search request.
pub fn run_search(e: &Entry, req: SearchRequest) -> ApiResult<SearchResult> {
    if req.text.is_some() {
        return run_text_search(e, req).map(SearchResult::One);
    }
    let coll = &e.coll;
    let space = coll.config().space;
    let (batch, raw) = match (req.vector, req.vectors) {
        (Some(v), None) => (false, vec![v]),
        (None, Some(vs)) => {
            if vs.is_empty() || vs.len() > MAX_BATCH_QUERIES {
                return Err(ApiError::BadRequest(format!(
                    "vectors: give 1 to {MAX_BATCH_QUERIES} queries"
                )));
            }
            (true, vs)
        }
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of `vector` (one query) or `vectors` (a batch)".into(),
            ))
        }
    };
    let queries = raw
        .into_iter()
        .enumerate()
        .map(|(i, v)| json_vector(&space, v, i))
        .collect::<ApiResult<Vec<_>>>()?;
    let pred = bind(coll, req.filter.as_ref())?;
    let knobs = Knobs {
        ef: req.ef,
        nprobe: req.nprobe,
        refine: req.refine,
        exact: req.exact,
    };
    let q = Query {
        fusion: text::fusion_of(req.fusion.as_deref(), req.alpha, req.rrf_k)?,
        depth: req.depth,
        opts: knobs.opts(pred.as_ref()),
        ..Query::dense(queries.iter().map(OwnedVector::as_ref).collect(), req.k)
    };
    // Each hit with the row of the part and slot that answered (one
    // snapshot), not read again by key: a row overwritten or removed while
    // the search ran cannot lend a hit another version's payload or none.
    let found = coll.search_rows(&q, req.include_vectors)?;
    let with_payload = req.include_payload || req.columns.is_some();
    let picks = if with_payload {
        payload_picks(&found.schema, req.columns.as_deref())?
    } else {
        Vec::new()
    };
    let space = coll.config().space;
    let vb = space.vector_bytes();
    let mut results = Vec::with_capacity(found.hits.len());
    for (hits, rows) in found.hits.into_iter().zip(found.rows) {
        let ids = ids_of_rows(coll, &rows, &found.schema);
        let hits = hits
            .into_iter()
            .zip(ids)
            .enumerate()
            .map(|(i, (n, id))| Hit {
                id,
                score: n.distance,
                vector: req.include_vectors.then(|| {
                    let raw = &rows.vectors[i * vb..(i + 1) * vb];
                    space
                        .decode_floats(raw)
                        .unwrap_or_else(|| raw.iter().map(|&b| f32::from(b)).collect())
                }),
                payload: with_payload.then(|| row_json(&found.schema, &picks, &rows.rows[i])),
                dense_rank: None,
                dense_distance: None,
                text_rank: None,
                text_score: None,
            })
            .collect();
        results.push(SearchResponse { hits });
    }
    Ok(if batch {
        SearchResult::Batch(BatchSearchResponse { results })
    } else {
        SearchResult::One(results.pop().unwrap_or(SearchResponse { hits: Vec::new() }))
    })
}

/// Runs a text or hybrid search request (one query).
fn run_text_search(e: &Entry, req: SearchRequest) -> ApiResult<SearchResponse> {
    let coll = &e.coll;
    if req.vectors.is_some() {
        return Err(ApiError::BadRequest(
            "a text search takes one query: `text` and at most one `vector`".into(),
        ));
    }
    let vector = req
        .vector
        .map(|v| json_vector(&coll.config().space, v, 0))
        .transpose()?;
    let pred = bind(coll, req.filter.as_ref())?;
    let knobs = Knobs {
        ef: req.ef,
        nprobe: req.nprobe,
        refine: req.refine,
        exact: req.exact,
    };
    let q = Query {
        fusion: text::fusion_of(req.fusion.as_deref(), req.alpha, req.rrf_k)?,
        depth: req.depth,
        opts: knobs.opts(pred.as_ref()),
        ..Query::text(
            req.text.as_deref().unwrap_or_default(),
            vector.as_ref().map(OwnedVector::as_ref),
            req.k,
        )
    };
    let found = search_text(coll, &q)?;
    let keys: Vec<u64> = found.iter().map(|h| h.key).collect();
    let payloads = if req.include_payload || req.columns.is_some() {
        payload_json(coll, &keys, req.columns.as_deref())?
    } else {
        Vec::new()
    };
    let ids = ids_of(coll, &keys)?;
    let hits = found
        .into_iter()
        .zip(ids)
        .enumerate()
        .map(|(i, (h, id))| Hit {
            id,
            score: h.score,
            vector: req
                .include_vectors
                .then(|| vector_json(coll, h.key))
                .flatten(),
            payload: payloads.get(i).cloned().flatten(),
            dense_rank: h.dense.map(|d| d.0),
            dense_distance: h.dense.map(|d| d.1),
            text_rank: h.text.map(|t| t.0),
            text_score: h.text.map(|t| t.1),
        })
        .collect();
    Ok(SearchResponse { hits })
}

/// Runs a get request.
pub fn run_get(e: &Entry, req: GetRequest) -> ApiResult<GetResponse> {
    if req.ids.len() > MAX_KEYS {
        return Err(ApiError::BadRequest(format!(
            "ids: at most {MAX_KEYS} per request"
        )));
    }
    let coll = &e.coll;
    let ids: Vec<sagitta_store::Id> = req.ids.iter().map(Id::to_store).collect();
    let live = coll.live_keys(&ids)?;
    let keys: Vec<u64> = live.iter().flatten().copied().collect();
    let mut payloads = if req.include_payload {
        payload_json(coll, &keys, req.columns.as_deref())?
    } else {
        Vec::new()
    }
    .into_iter();
    let mut items = Vec::new();
    let mut missing = Vec::new();
    for (i, k) in live.into_iter().enumerate() {
        let payload = k.and_then(|_| payloads.next().flatten());
        let vector = match k {
            Some(k) if req.include_vectors => vector_json(coll, k),
            _ => None,
        };
        if k.is_none() || (req.include_vectors && vector.is_none()) {
            missing.push(req.ids[i].clone());
            continue;
        }
        items.push(Item {
            id: req.ids[i].clone(),
            vector,
            payload,
        });
    }
    Ok(GetResponse { items, missing })
}

/// Runs an upsert request.
pub fn run_upsert(e: &Entry, req: UpsertRequest) -> ApiResult<UpsertResponse> {
    if req.vectors.is_empty() && !req.ids.is_empty() && e.coll.config().embed_model.is_some() {
        // The store embeds rows by key: a hashed id (string, uint128)
        // would lose the id it keeps beside the row.
        let t = e.coll.id_type();
        if t.hashed() {
            return Err(ApiError::BadRequest(format!(
                "vectors: rows without vectors are embedded by key, which {t} ids \
                 are not; give the vectors (or create the collection with integer ids)"
            )));
        }
        let keys = keys_of(&e.coll, &req.ids)?;
        let rows = req.payload.as_deref().unwrap_or_default();
        if rows.len() != keys.len() {
            return Err(ApiError::BadRequest(format!(
                "payload: {} rows for {} ids (the text to embed is in the payload)",
                rows.len(),
                keys.len()
            )));
        }
        let payload = Payload::from_json_rows(rows, &e.coll.schema())?;
        ingest(e, keys.len(), || {
            Ok(e.coll.upsert_embedding(&keys, &payload)?)
        })?;
        return Ok(UpsertResponse {
            upserted: keys.len(),
        });
    }
    if req.ids.len() != req.vectors.len() {
        return Err(ApiError::BadRequest(format!(
            "{} ids for {} vectors",
            req.ids.len(),
            req.vectors.len()
        )));
    }
    let space = e.coll.config().space;
    let ids = id_column(&e.coll, &req.ids)?;
    let vectors = req
        .vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| json_vector(&space, v, i))
        .collect::<ApiResult<Vec<_>>>()?;
    let payload = match &req.payload {
        None => None,
        Some(rows) => {
            if rows.len() != ids.len() {
                return Err(ApiError::BadRequest(format!(
                    "payload: {} rows for {} ids",
                    rows.len(),
                    ids.len()
                )));
            }
            Some(Payload::from_json_rows(rows, &e.coll.schema())?)
        }
    };
    let refs: Vec<VectorRef<'_>> = vectors.iter().map(OwnedVector::as_ref).collect();
    let n = upsert(e, &ids, &refs, payload.as_ref())?;
    Ok(UpsertResponse { upserted: n })
}

/// Runs a delete request.
pub fn run_delete(e: &Entry, req: DeleteRequest) -> ApiResult<DeleteResponse> {
    let deleted = match (req.ids, req.filter) {
        (Some(ids), None) => {
            if ids.len() > MAX_KEYS {
                return Err(ApiError::BadRequest(format!(
                    "ids: at most {MAX_KEYS} per request"
                )));
            }
            let keys = live_keys_of(&e.coll, &ids)?;
            ingest(e, 0, || Ok(e.coll.remove(&keys)?))?
        }
        (None, Some(f)) => {
            let pred = bind(&e.coll, Some(&f))?
                .ok_or_else(|| ApiError::BadRequest("filter: must not be null".into()))?;
            ingest(e, 0, || Ok(e.coll.remove_where(&pred)?))?
        }
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of `ids` or `filter`".into(),
            ))
        }
    };
    Ok(DeleteResponse { deleted })
}

/// Runs a payload update.
pub fn run_set_payload(e: &Entry, req: SetPayloadRequest) -> ApiResult<SetPayloadResponse> {
    if !matches!(&req.payload, Json::Object(o) if !o.is_empty()) {
        return Err(ApiError::BadRequest(
            "payload: a non-empty JSON object of column -> value".into(),
        ));
    }
    let values = Payload::from_json_rows(std::slice::from_ref(&req.payload), &e.coll.schema())?;
    let updated = match (req.ids, req.filter) {
        (Some(ids), None) => {
            if ids.len() > MAX_KEYS {
                return Err(ApiError::BadRequest(format!(
                    "ids: at most {MAX_KEYS} per request"
                )));
            }
            let store: Vec<sagitta_store::Id> = ids.iter().map(Id::to_store).collect();
            let live = e.coll.live_keys(&store)?;
            if let Some(i) = live.iter().position(Option::is_none) {
                return Err(ApiError::Missing(format!(
                    "ids[{i}]: {} is not in the collection (nothing written)",
                    store[i]
                )));
            }
            let keys: Vec<u64> = live.into_iter().flatten().collect();
            let rows = values.select(&vec![0; keys.len()]);
            ingest(e, 0, || Ok(e.coll.set_payload(&keys, &rows)?))?
        }
        (None, Some(f)) => {
            let pred = bind(&e.coll, Some(&f))?
                .ok_or_else(|| ApiError::BadRequest("filter: must not be null".into()))?;
            ingest(e, 0, || Ok(e.coll.set_payload_where(&pred, &values)?))?
        }
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of `ids` or `filter`".into(),
            ))
        }
    };
    Ok(SetPayloadResponse { updated })
}

/// Runs a count request.
pub fn run_count(e: &Entry, req: CountRequest) -> ApiResult<CountResponse> {
    let pred = bind(&e.coll, req.filter.as_ref())?;
    Ok(CountResponse {
        count: e.coll.count(pred.as_ref())?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors
    use super::*;

    /// The create request is translated field by field into the store's
    /// options: the IVF parameters reach the collection (they were fixed
    /// at their defaults over HTTP before), and the store's parser refuses
    /// what it refuses for Python too.
    #[test]
    fn create_requests_reach_the_stores_options() {
        let req = CreateCollection {
            name: "c".into(),
            dims: 16,
            kind: Some("ivf_rq".into()),
            ivf_bits: Some(4),
            ivf_partitions: Some(7),
            ivf_nprobe: Some(3),
            ivf_refine: Some(50),
            max_segment_size: Some(8 << 20),
            segment_size: Some(1 << 20),
            ..CreateCollection::default()
        };
        let cfg = config_from(&req).unwrap();
        assert_eq!(cfg.ivf.bits, 4);
        assert_eq!(cfg.ivf.partitions, Some(7));
        assert_eq!(cfg.ivf.nprobe, 3);
        assert_eq!(cfg.ivf.refine, Some(50));
        assert_eq!(cfg.max_segment_size, 8 << 20);
        let bad = CreateCollection {
            ivf_bits: Some(9),
            ..req
        };
        assert!(matches!(config_from(&bad), Err(ApiError::Store(_))));
        let bad = CreateCollection {
            name: "c".into(),
            dims: 16,
            metric: Some("manhattan".into()),
            ..CreateCollection::default()
        };
        let e = config_from(&bad).unwrap_err().to_string();
        assert!(e.contains("metric: unknown metric \"manhattan\""), "{e}");
    }
}
