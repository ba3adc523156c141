//! Payload columns as stored: one Arrow record batch of a [`Schema`]
//! built a row at a time, values read back from its columns (with a
//! prefetch hint for batches of rows), and the Arrow IPC stream a
//! segment's payload section holds.

use super::error::{malformed, PayloadError};
use super::schema::{FieldType, Schema};
use super::value::Value;
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use std::sync::Arc;

/// Builds one record batch of `schema` from `rows` (`None` = all null).
pub fn to_record_batch<'a>(
    schema: &Schema,
    rows: impl ExactSizeIterator<Item = Option<&'a [Value]>>,
) -> Result<RecordBatch, PayloadError> {
    let mut b = BatchBuilder::new(schema, rows.len());
    for r in rows {
        b.push(r);
    }
    b.finish()
}

/// A record batch of a schema built a row at a time: each row's values
/// go straight into the column builders, so a caller producing rows one
/// by one (a segment build reading them from its inputs) never holds them
/// all besides the batch.
#[derive(Debug)]
pub struct BatchBuilder {
    schema: Schema,
    cols: Vec<ColumnBuilder>,
    rows: usize,
}

impl BatchBuilder {
    /// An empty batch of `schema` with room for `rows` rows.
    pub fn new(schema: &Schema, rows: usize) -> BatchBuilder {
        BatchBuilder {
            schema: schema.clone(),
            cols: schema
                .fields()
                .iter()
                .map(|f| ColumnBuilder::new(f.ty, rows))
                .collect(),
            rows: 0,
        }
    }

    /// Appends `row` (`None`, or a value missing at the end or of another
    /// type than its field's: null).
    pub fn push(&mut self, row: Option<&[Value]>) {
        for (c, b) in self.cols.iter_mut().enumerate() {
            b.push(row.and_then(|r| r.get(c)).unwrap_or(&Value::Null));
        }
        self.rows += 1;
    }

    /// The batch.
    pub fn finish(self) -> Result<RecordBatch, PayloadError> {
        let cols: Vec<ArrayRef> = self.cols.into_iter().map(ColumnBuilder::finish).collect();
        let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::new(self.schema.arrow()), cols, &opts)
            .map_err(|e| malformed(e.to_string()))
    }
}

/// One column of a [`BatchBuilder`].
#[derive(Debug)]
enum ColumnBuilder {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Str(StringBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Tags(ListBuilder<StringBuilder>),
}

impl ColumnBuilder {
    fn new(ty: FieldType, n: usize) -> ColumnBuilder {
        match ty {
            FieldType::Int64 => ColumnBuilder::Int(Int64Builder::with_capacity(n)),
            FieldType::Float64 => ColumnBuilder::Float(Float64Builder::with_capacity(n)),
            FieldType::Bool => ColumnBuilder::Bool(BooleanBuilder::with_capacity(n)),
            FieldType::String => ColumnBuilder::Str(StringBuilder::with_capacity(n, n * 8)),
            FieldType::Timestamp => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC"),
            ),
            FieldType::Tags => ColumnBuilder::Tags(ListBuilder::new(StringBuilder::new())),
        }
    }

    fn push(&mut self, v: &Value) {
        match (self, v) {
            (ColumnBuilder::Int(b), Value::Int(x)) => b.append_value(*x),
            (ColumnBuilder::Int(b), _) => b.append_null(),
            (ColumnBuilder::Float(b), Value::Float(x)) => b.append_value(*x),
            (ColumnBuilder::Float(b), _) => b.append_null(),
            (ColumnBuilder::Bool(b), Value::Bool(x)) => b.append_value(*x),
            (ColumnBuilder::Bool(b), _) => b.append_null(),
            (ColumnBuilder::Str(b), Value::Str(x)) => b.append_value(x),
            (ColumnBuilder::Str(b), _) => b.append_null(),
            (ColumnBuilder::Timestamp(b), Value::Timestamp(x)) => b.append_value(*x),
            (ColumnBuilder::Timestamp(b), _) => b.append_null(),
            (ColumnBuilder::Tags(b), Value::Tags(t)) => {
                for s in t {
                    b.values().append_value(s);
                }
                b.append(true);
            }
            (ColumnBuilder::Tags(b), _) => b.append(false),
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            ColumnBuilder::Int(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Float(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Bool(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Str(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Timestamp(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Tags(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Hints the CPU to fetch the fixed-width part of `arr`'s value at `row`
/// (the number, or a string's or list's offsets), so that a batch of rows
/// read after all of them are hinted waits for memory once, not per row.
pub fn prefetch_value(arr: &dyn Array, row: usize) {
    if row >= arr.len() {
        return;
    }
    let p: *const u8 = match arr.data_type() {
        DataType::Int64 => arr.as_primitive::<Int64Type>().values()[row..]
            .as_ptr()
            .cast(),
        DataType::Float64 => arr.as_primitive::<Float64Type>().values()[row..]
            .as_ptr()
            .cast(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            arr.as_primitive::<TimestampMicrosecondType>().values()[row..]
                .as_ptr()
                .cast()
        }
        DataType::Utf8 => arr.as_string::<i32>().value_offsets()[row..]
            .as_ptr()
            .cast(),
        DataType::List(_) => arr.as_list::<i32>().value_offsets()[row..].as_ptr().cast(),
        _ => return,
    };
    sagitta_index::prefetch(p);
}

/// The value at `row` of a column stored as `ty` (nulls and rows out of
/// range read as null).
pub fn value_at(arr: &dyn Array, ty: FieldType, row: usize) -> Value {
    if row >= arr.len() || arr.is_null(row) {
        return Value::Null;
    }
    match (ty, arr.data_type()) {
        (FieldType::Int64, DataType::Int64) => {
            Value::Int(arr.as_primitive::<Int64Type>().value(row))
        }
        (FieldType::Float64, DataType::Float64) => {
            Value::Float(arr.as_primitive::<Float64Type>().value(row))
        }
        (FieldType::Bool, DataType::Boolean) => Value::Bool(arr.as_boolean().value(row)),
        (FieldType::String, DataType::Utf8) => Value::Str(arr.as_string::<i32>().value(row).into()),
        (FieldType::Timestamp, DataType::Timestamp(TimeUnit::Microsecond, _)) => {
            Value::Timestamp(arr.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        (FieldType::Tags, DataType::List(_)) => {
            let items = arr.as_list::<i32>().value(row);
            match items.as_string_opt::<i32>() {
                Some(s) => Value::Tags(s.iter().flatten().map(str::to_string).collect()),
                None => Value::Null,
            }
        }
        _ => Value::Null,
    }
}

/// Writes `batch` as an Arrow IPC stream with 64-byte aligned buffers.
pub fn ipc_bytes(batch: &RecordBatch) -> Result<Vec<u8>, PayloadError> {
    let mut out = Vec::new();
    write_ipc(batch, &mut out)?;
    Ok(out)
}

/// Writes the bytes [`ipc_bytes`] returns to `out` as they are encoded
/// (a segment's payload section goes to its file without a copy of the
/// whole stream in memory). A failure of `out` comes back as
/// [`PayloadError::Malformed`] with its message: a caller whose writer can
/// fail keeps its own error beside it.
pub fn write_ipc(batch: &RecordBatch, out: impl std::io::Write) -> Result<(), PayloadError> {
    let opts =
        arrow_ipc::writer::IpcWriteOptions::try_new(64, false, arrow_ipc::MetadataVersion::V5)
            .map_err(|e| malformed(e.to_string()))?;
    let mut w = arrow_ipc::writer::StreamWriter::try_new_with_options(out, &batch.schema(), opts)
        .map_err(|e| malformed(e.to_string()))?;
    w.write(batch).map_err(|e| malformed(e.to_string()))?;
    w.finish().map_err(|e| malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::payload::Field;

    #[test]
    fn a_batch_built_row_by_row_reads_back_every_value() {
        let schema = Schema::new(
            [
                ("i", FieldType::Int64),
                ("f", FieldType::Float64),
                ("b", FieldType::Bool),
                ("s", FieldType::String),
                ("t", FieldType::Timestamp),
                ("g", FieldType::Tags),
            ]
            .iter()
            .map(|(n, t)| Field {
                name: n.to_string(),
                ty: *t,
            })
            .collect(),
        )
        .unwrap();
        let rows: Vec<Option<Vec<Value>>> = (0..300i64)
            .map(|i| match i % 5 {
                // No payload at all.
                0 => None,
                // A short row: the missing values are null.
                1 => Some(vec![Value::Int(i)]),
                // A value of another type than the field's reads as null.
                2 => Some(vec![Value::Str("x".into()), Value::Int(i)]),
                _ => Some(vec![
                    Value::Int(i),
                    Value::Float(i as f64 / 3.0),
                    Value::Bool(i % 2 == 0),
                    Value::Str(format!("s{i}")),
                    Value::Timestamp(i * 1_000),
                    Value::Tags((0..i % 3).map(|t| format!("t{t}")).collect()),
                ]),
            })
            .collect();
        let batch = to_record_batch(&schema, rows.iter().map(|r| r.as_deref())).unwrap();
        assert_eq!(batch.num_rows(), rows.len());
        for (i, r) in rows.iter().enumerate() {
            for (c, f) in schema.fields().iter().enumerate() {
                let want = match (f.ty, r.as_ref().and_then(|r| r.get(c))) {
                    (FieldType::Int64, Some(v @ Value::Int(_)))
                    | (FieldType::Float64, Some(v @ Value::Float(_)))
                    | (FieldType::Bool, Some(v @ Value::Bool(_)))
                    | (FieldType::String, Some(v @ Value::Str(_)))
                    | (FieldType::Timestamp, Some(v @ Value::Timestamp(_)))
                    | (FieldType::Tags, Some(v @ Value::Tags(_))) => v.clone(),
                    _ => Value::Null,
                };
                let got = value_at(batch.column(c).as_ref(), f.ty, i);
                assert_eq!(got, want, "row {i}, field {}", f.name);
            }
        }
    }
}
