//! Arrow record batches in and out: the `id` / `vector` / payload layout of
//! Flight DoPut and DoGet.

use crate::error::{ApiError, ApiResult};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int32Type, Int64Type, Int8Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, FixedSizeListArray, Float32Array, Int64Array,
    RecordBatch, StringArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use sagitta_index::{DType, Space, VectorRef};
use sagitta_store::{Collection, Id, IdColumn, IdType, Payload};
use std::sync::Arc;

/// Payload column that keeps string ids (their keys are hashes).
pub use sagitta_store::STRING_ID_FIELD as STRING_ID_COLUMN;

/// The vectors of a batch, decoded once into one contiguous buffer (or
/// borrowed from the batch for float32).
#[derive(Debug)]
pub enum Vectors {
    /// Floats, `dims` per row.
    F32 { values: Vec<f32>, dims: usize },
    /// Bytes (binary metrics), `width` per row.
    Bytes { values: Vec<u8>, width: usize },
}

impl Vectors {
    /// Row `i`.
    pub fn row(&self, i: usize) -> VectorRef<'_> {
        match self {
            Vectors::F32 { values, dims } => VectorRef::F32(&values[i * dims..(i + 1) * dims]),
            Vectors::Bytes { values, width } => {
                VectorRef::Bytes(&values[i * width..(i + 1) * width])
            }
        }
    }

    /// Components per row.
    pub fn width(&self) -> usize {
        match self {
            Vectors::F32 { dims, .. } => *dims,
            Vectors::Bytes { width, .. } => *width,
        }
    }
}

/// A DoPut batch taken apart.
#[derive(Debug)]
pub struct Ingest {
    /// Ids, in the type of the `id` column.
    pub ids: IdColumn,
    /// Vectors.
    pub vectors: Vectors,
    /// The Arrow element type of the vector column.
    pub element: DataType,
    /// Payload columns (everything but `id` and `vector`), if any.
    pub payload: Option<Payload>,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Splits a batch into keys, vectors and payload. `id`: int64 (not
/// negative), uint64 or string; `vector`: a fixed-size list of float32,
/// float16, int8 (or uint8 for binary collections); neither may hold
/// nulls.
pub fn ingest_batch(batch: &RecordBatch) -> ApiResult<Ingest> {
    let schema = batch.schema();
    let id = batch.column_by_name("id").ok_or_else(|| {
        bad(format!(
            "the batch needs an `id` column (int64, uint64 or string); it has {:?}",
            schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
        ))
    })?;
    let vector = batch.column_by_name("vector").ok_or_else(|| {
        bad("the batch needs a `vector` column (fixed-size list of float32, float16 or int8)")
    })?;
    if id.null_count() > 0 {
        return Err(bad("`id` holds nulls"));
    }
    let ids = match id.data_type() {
        DataType::UInt64 => IdColumn::UInt(id.as_primitive::<UInt64Type>().values().to_vec()),
        DataType::Int64 => IdColumn::Int(id.as_primitive::<Int64Type>().values().to_vec()),
        DataType::Int32 => IdColumn::Int(
            id.as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&x| i64::from(x))
                .collect(),
        ),
        DataType::UInt32 => IdColumn::UInt(
            id.as_primitive::<UInt32Type>()
                .values()
                .iter()
                .map(|&x| u64::from(x))
                .collect(),
        ),
        DataType::Utf8 => IdColumn::Str(
            id.as_string::<i32>()
                .iter()
                .map(|x| x.unwrap_or("").to_owned())
                .collect(),
        ),
        DataType::LargeUtf8 => IdColumn::Str(
            id.as_string::<i64>()
                .iter()
                .map(|x| x.unwrap_or("").to_owned())
                .collect(),
        ),
        DataType::FixedSizeBinary(16) => IdColumn::U128(
            id.as_fixed_size_binary()
                .iter()
                .map(|x| u128_of_be(x.unwrap_or(&[0; 16])))
                .collect(),
        ),
        t => {
            return Err(bad(format!(
                "`id` has type {t}; use int64, uint64, string or fixed_size_binary(16) \
                 (128-bit ids, big-endian)"
            )))
        }
    };
    let DataType::FixedSizeList(_, size) = vector.data_type() else {
        return Err(bad(format!(
            "`vector` has type {}; use a fixed-size list of float32, float16 or int8",
            vector.data_type()
        )));
    };
    let size = usize::try_from(*size).map_err(|_| bad("`vector`: bad list size"))?;
    let list = vector.as_fixed_size_list();
    if list.null_count() > 0 {
        return Err(bad("`vector` holds null rows"));
    }
    let n = list.len();
    let start = list.offset() * size;
    let child = list.values().slice(start, n * size);
    if child.null_count() > 0 {
        return Err(bad("`vector` holds null components"));
    }
    let element = child.data_type().clone();
    let vectors = match &element {
        DataType::Float32 => Vectors::F32 {
            values: child.as_primitive::<Float32Type>().values().to_vec(),
            dims: size,
        },
        DataType::Float16 => Vectors::F32 {
            values: child
                .as_primitive::<Float16Type>()
                .values()
                .iter()
                .map(|h| h.to_f32())
                .collect(),
            dims: size,
        },
        DataType::Float64 => Vectors::F32 {
            // Narrowed: numpy's default float type, sent by many clients
            // (a value beyond f32's range becomes infinite and is refused).
            values: child
                .as_primitive::<Float64Type>()
                .values()
                .iter()
                .map(|&x| x as f32)
                .collect(),
            dims: size,
        },
        DataType::Int8 => Vectors::F32 {
            values: child
                .as_primitive::<Int8Type>()
                .values()
                .iter()
                .map(|&x| f32::from(x))
                .collect(),
            dims: size,
        },
        DataType::UInt8 => Vectors::Bytes {
            values: child.as_primitive::<UInt8Type>().values().to_vec(),
            width: size,
        },
        t => {
            return Err(bad(format!(
                "`vector` elements have type {t}; use float32, float64, float16 or int8 (uint8 for binary)"
            )))
        }
    };
    let rest: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| !matches!(schema.field(i).name().as_str(), "id" | "vector"))
        .collect();
    let payload = if rest.is_empty() {
        None
    } else {
        let b = batch
            .project(&rest)
            .map_err(|e| bad(format!("payload columns: {e}")))?;
        Some(Payload::from_record_batch(&b)?)
    };
    Ok(Ingest {
        ids,
        vectors,
        element,
        payload,
    })
}

/// The storage type a new collection gets for a vector element type.
pub fn dtype_for(element: &DataType) -> DType {
    match element {
        DataType::Float16 => DType::F16,
        DataType::Int8 => DType::I8,
        DataType::UInt8 => DType::B1,
        _ => DType::F32,
    }
}

/// Checks that a batch's vectors fit a collection's space.
pub fn check_space(space: &Space, v: &Vectors) -> ApiResult<()> {
    let (binary, want) = if space.dtype == DType::B1 {
        (true, space.dims / 8)
    } else {
        (false, space.dims)
    };
    match v {
        Vectors::Bytes { .. } if !binary => Err(bad(
            "`vector` is uint8 but the collection holds float vectors",
        )),
        Vectors::F32 { .. } if binary => Err(bad(
            "the collection is binary: send `vector` as a fixed-size list of uint8 (packed bits)",
        )),
        _ if v.width() != want => Err(bad(format!(
            "`vector` has {} components per row; the collection has {want}",
            v.width()
        ))),
        _ => Ok(()),
    }
}

/// The Arrow type of a collection's stored vectors in DoGet.
fn vector_field(space: &Space) -> Field {
    if space.dtype == DType::B1 {
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::UInt8, true)),
                (space.dims / 8) as i32,
            ),
            false,
        )
    } else {
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                space.dims as i32,
            ),
            false,
        )
    }
}

/// The Arrow type of a collection's ids.
pub fn id_data_type(t: IdType) -> DataType {
    match t {
        IdType::UInt64 => DataType::UInt64,
        IdType::Int64 => DataType::Int64,
        IdType::String => DataType::Utf8,
        IdType::UInt128 => DataType::FixedSizeBinary(16),
    }
}

/// A 128-bit id from its 16 big-endian bytes.
fn u128_of_be(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    u128::from_be_bytes(a)
}

/// 128-bit ids as a fixed-size-binary(16) column, big-endian (ids not
/// known read as 16 zero bytes).
fn u128_array(ids: impl Iterator<Item = Option<u128>>) -> ArrayRef {
    let rows: Vec<[u8; 16]> = ids.map(|v| v.unwrap_or(0).to_be_bytes()).collect();
    Arc::new(
        FixedSizeBinaryArray::try_from_iter(rows.iter())
            .unwrap_or_else(|_| FixedSizeBinaryArray::new_null(16, 0)),
    )
}

/// The ids of `keys` as an Arrow column of the collection's id type
/// (a string collection's key without a stored string, written before id
/// types, reads as its decimal key).
pub fn id_array(coll: &Collection, keys: &[u64]) -> ApiResult<ArrayRef> {
    typed_id_array(coll, coll.id_type(), keys)
}

/// [`id_array`] in id type `t` (read once by a caller that also names the
/// column's type: an open id type may be fixed in between).
fn typed_id_array(coll: &Collection, t: IdType, keys: &[u64]) -> ApiResult<ArrayRef> {
    Ok(match t {
        IdType::UInt64 => Arc::new(UInt64Array::from(keys.to_vec())),
        IdType::Int64 => Arc::new(Int64Array::from(
            keys.iter().map(|&k| k as i64).collect::<Vec<_>>(),
        )),
        IdType::String => {
            let ids = coll.ids_of(keys)?;
            Arc::new(
                ids.into_iter()
                    .zip(keys)
                    .map(|(id, k)| match id {
                        Some(Id::Str(s)) => Some(s),
                        _ => Some(k.to_string()),
                    })
                    .collect::<StringArray>(),
            )
        }
        IdType::UInt128 => u128_array(coll.ids_of(keys)?.into_iter().map(|id| match id {
            Some(Id::U128(v)) => Some(v),
            _ => None,
        })),
    })
}

/// The payload columns users see (the reserved string-id column left out).
pub fn payload_fields(coll: &Collection) -> Vec<Field> {
    coll.schema()
        .arrow()
        .fields()
        .iter()
        .filter(|f| f.name() != STRING_ID_COLUMN)
        .map(|f| f.as_ref().clone())
        .collect()
}

/// The schema of a collection's rows: `id` (in the collection's id type),
/// `vector`, then the payload columns.
pub fn row_schema(coll: &Collection) -> SchemaRef {
    let space = coll.config().space;
    let mut fields = vec![
        Field::new("id", id_data_type(coll.id_type()), false),
        vector_field(&space),
    ];
    fields.extend(payload_fields(coll));
    Arc::new(ArrowSchema::new(fields))
}

/// Search results as a batch: `id` (in the collection's id type),
/// `score` (the distance for a vector search; the fused score, larger is
/// better, for a text or hybrid one), the `legs` columns, the `vector`
/// when asked for, then every payload column (null where a row has none).
pub fn hits_batch(
    coll: &Collection,
    keys: &[u64],
    scores: Vec<f32>,
    legs: Vec<(Field, ArrayRef)>,
    with_vectors: bool,
) -> ApiResult<RecordBatch> {
    let t = coll.id_type();
    let mut fields = vec![
        Field::new("id", id_data_type(t), false),
        Field::new("score", DataType::Float32, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        typed_id_array(coll, t, keys)?,
        Arc::new(Float32Array::from(scores)),
    ];
    for (f, c) in legs {
        fields.push(f);
        cols.push(c);
    }
    if with_vectors {
        let (f, c) = vectors_of(coll, keys)?;
        fields.push(f);
        cols.push(c);
    }
    let payload = payload_fields(coll);
    if !payload.is_empty() {
        let names: Vec<String> = payload.iter().map(|f| f.name().clone()).collect();
        let t = coll.payload_table(keys, Some(&names))?;
        fields.extend(t.schema().fields().iter().map(|f| f.as_ref().clone()));
        cols.extend(t.columns().iter().cloned());
    }
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), cols)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// The stored vectors of `keys` as a `vector` column (null rows for keys
/// gone in between).
fn vectors_of(coll: &Collection, keys: &[u64]) -> ApiResult<(Field, ArrayRef)> {
    let space = coll.config().space;
    let vb = space.vector_bytes();
    let f = vector_field(&space);
    let DataType::FixedSizeList(item, size) = f.data_type().clone() else {
        return Err(ApiError::Internal("vector field type".into()));
    };
    let width = size as usize;
    let mut valid = Vec::with_capacity(keys.len());
    let mut floats: Vec<f32> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    for raw in coll.get_raw_many(keys) {
        valid.push(raw.is_some());
        match (raw, space.dtype == DType::B1) {
            (Some(r), true) => bytes.extend_from_slice(&r[..vb]),
            (Some(r), false) => floats.extend(space.decode_floats(&r).unwrap_or_default()),
            (None, true) => bytes.extend(std::iter::repeat_n(0u8, width)),
            (None, false) => floats.extend(std::iter::repeat_n(0f32, width)),
        }
    }
    let values: ArrayRef = if space.dtype == DType::B1 {
        Arc::new(UInt8Array::from(bytes))
    } else {
        Arc::new(Float32Array::from(floats))
    };
    let nulls = valid.iter().any(|v| !v).then(|| valid.into());
    let arr = FixedSizeListArray::try_new(item, size, values, nulls)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((f.with_nullable(true), Arc::new(arr)))
}

/// Text and hybrid search results as a batch: [`hits_batch`] with each
/// leg's rank (from 1) and score, null where the row was not in that leg.
pub fn text_hits_batch(
    coll: &Collection,
    hits: &[sagitta_store::TextHit],
    with_vectors: bool,
) -> ApiResult<RecordBatch> {
    let keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
    let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
    let dr: UInt32Array = hits.iter().map(|h| h.dense.map(|d| d.0)).collect();
    let dd: Float32Array = hits.iter().map(|h| h.dense.map(|d| d.1)).collect();
    let tr: UInt32Array = hits.iter().map(|h| h.text.map(|t| t.0)).collect();
    let ts: Float32Array = hits.iter().map(|h| h.text.map(|t| t.1)).collect();
    let legs: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("dense_rank", DataType::UInt32, true),
            Arc::new(dr),
        ),
        (
            Field::new("dense_distance", DataType::Float32, true),
            Arc::new(dd),
        ),
        (
            Field::new("text_rank", DataType::UInt32, true),
            Arc::new(tr),
        ),
        (
            Field::new("text_score", DataType::Float32, true),
            Arc::new(ts),
        ),
    ];
    hits_batch(coll, &keys, scores, legs, with_vectors)
}

/// A scan batch as a record batch laid out by `schema` (from
/// [`row_schema`], taken when the scan started), keeping only the rows
/// whose id passes `keep`; `None` when none does.
pub fn scan_batch(
    coll: &Collection,
    schema: &SchemaRef,
    scan_schema: &sagitta_store::Schema,
    b: sagitta_store::ScanBatch,
    keep: impl Fn(&Id) -> bool,
) -> ApiResult<Option<RecordBatch>> {
    let space = coll.config().space;
    let vb = space.vector_bytes();
    // The id type `schema` was laid out in (an open one may have been
    // fixed since the scan started, which then had no rows).
    let t = [
        IdType::UInt64,
        IdType::Int64,
        IdType::String,
        IdType::UInt128,
    ]
    .into_iter()
    .find(|&t| schema.fields().first().map(|f| f.data_type()) == Some(&id_data_type(t)))
    .unwrap_or_else(|| coll.id_type());
    let sid = scan_schema.field(STRING_ID_COLUMN).ok().map(|(i, _)| i);
    let ids: Vec<Id> = b
        .keys
        .iter()
        .zip(&b.rows)
        .map(|(&k, r)| {
            t.id_of(k, sid.and_then(|i| r.get(i)))
                .unwrap_or_else(|| Id::Str(k.to_string()))
        })
        .collect();
    let picks: Vec<usize> = (0..ids.len()).filter(|&i| keep(&ids[i])).collect();
    if picks.is_empty() {
        return Ok(None);
    }
    let id_col: ArrayRef = match t {
        IdType::UInt64 => Arc::new(UInt64Array::from_iter_values(
            picks.iter().map(|&i| b.keys[i]),
        )),
        IdType::Int64 => Arc::new(Int64Array::from_iter_values(
            picks.iter().map(|&i| b.keys[i] as i64),
        )),
        IdType::String => Arc::new(StringArray::from_iter_values(
            picks.iter().map(|&i| ids[i].text()),
        )),
        IdType::UInt128 => u128_array(picks.iter().map(|&i| match ids[i] {
            Id::U128(v) => Some(v),
            _ => None,
        })),
    };
    let vfield = vector_field(&space);
    let DataType::FixedSizeList(item, size) = vfield.data_type().clone() else {
        return Err(ApiError::Internal("vector field type".into()));
    };
    let values: ArrayRef = if space.dtype == DType::B1 {
        let mut bytes = Vec::with_capacity(picks.len() * vb);
        for &i in &picks {
            bytes.extend_from_slice(&b.vectors[i * vb..(i + 1) * vb]);
        }
        Arc::new(UInt8Array::from(bytes))
    } else {
        let mut floats = Vec::with_capacity(picks.len() * space.dims);
        for &i in &picks {
            floats.extend(
                space
                    .decode_floats(&b.vectors[i * vb..(i + 1) * vb])
                    .unwrap_or_default(),
            );
        }
        Arc::new(Float32Array::from(floats))
    };
    let vectors = FixedSizeListArray::try_new(item, size, values, None)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    // Payload columns by name: the scan's schema may have grown since
    // `schema` was taken (those columns are left out).
    let names: Vec<&String> = schema.fields().iter().skip(2).map(|f| f.name()).collect();
    let at: Vec<Option<usize>> = names
        .iter()
        .map(|n| scan_schema.field(n).ok().map(|(i, _)| i))
        .collect();
    let out_fields: Vec<sagitta_store::Field> = names
        .iter()
        .zip(&at)
        .map(|(n, a)| sagitta_store::Field {
            name: (*n).clone(),
            ty: a
                .and_then(|i| scan_schema.fields().get(i))
                .map_or(sagitta_store::FieldType::String, |f| f.ty),
        })
        .collect();
    let rows: Vec<Vec<sagitta_store::Value>> = picks
        .iter()
        .map(|&i| {
            at.iter()
                .map(|a| {
                    a.and_then(|c| b.rows[i].get(c).cloned())
                        .unwrap_or(sagitta_store::Value::Null)
                })
                .collect()
        })
        .collect();
    let out_schema = sagitta_store::Schema::new(out_fields)?;
    let payload = sagitta_store::payload::to_record_batch(
        &out_schema,
        rows.iter().map(|r| Some(r.as_slice())),
    )?;
    let mut cols: Vec<ArrayRef> = vec![id_col, Arc::new(vectors)];
    cols.extend(payload.columns().iter().cloned());
    RecordBatch::try_new(schema.clone(), cols)
        .map(Some)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors
    use super::*;
    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::StringArray;

    fn vectors(rows: &[[f32; 2]]) -> FixedSizeListArray {
        let mut b = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for r in rows {
            b.values().append_slice(r);
            b.append(true);
        }
        b.finish()
    }

    #[test]
    fn batches_are_taken_apart_and_bad_ones_refused() {
        let v = vectors(&[[1.0, 2.0], [3.0, 4.0]]);
        let b = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![5, 6])) as ArrayRef),
            ("vector", Arc::new(v.clone()) as ArrayRef),
            (
                "lang",
                Arc::new(StringArray::from(vec!["en", "de"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let i = ingest_batch(&b).unwrap();
        assert_eq!(i.ids, IdColumn::Int(vec![5, 6]));
        assert!(matches!(i.vectors.row(1), VectorRef::F32(x) if x == [3.0, 4.0]));
        let p = i.payload.unwrap();
        assert_eq!(p.fields[0].name, "lang");
        // A sliced batch reads the right rows.
        let i = ingest_batch(&b.slice(1, 1)).unwrap();
        assert_eq!(i.ids, IdColumn::Int(vec![6]));
        assert!(matches!(i.vectors.row(0), VectorRef::F32(x) if x == [3.0, 4.0]));
        // String ids are kept as strings (the store hashes them).
        let b = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            ),
            ("vector", Arc::new(v.clone()) as ArrayRef),
        ])
        .unwrap();
        let i = ingest_batch(&b).unwrap();
        assert_eq!(i.ids, IdColumn::Str(vec!["a".into(), "b".into()]));
        assert!(i.payload.is_none());
        // Float64 vectors are narrowed to float32.
        let f64v = FixedSizeListArray::try_new(
            Arc::new(Field::new("item", DataType::Float64, true)),
            2,
            Arc::new(arrow_array::Float64Array::from(vec![0.5, 1.5])),
            None,
        )
        .unwrap();
        let b = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![-1])) as ArrayRef),
            ("vector", Arc::new(f64v) as ArrayRef),
        ])
        .unwrap();
        let i = ingest_batch(&b).unwrap();
        assert!(matches!(i.vectors.row(0), VectorRef::F32(x) if x == [0.5, 1.5]));
        assert_eq!(i.ids, IdColumn::Int(vec![-1]));
        let b =
            RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
                .unwrap();
        assert!(ingest_batch(&b).unwrap_err().to_string().contains("vector"));
        let b = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (
                "vector",
                Arc::new(Float32Array::from(vec![1.0])) as ArrayRef,
            ),
        ])
        .unwrap();
        assert!(ingest_batch(&b)
            .unwrap_err()
            .to_string()
            .contains("fixed-size list"));
    }
}
