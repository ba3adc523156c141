//! Arrow input read as a [`Payload`]: an IPC stream (the form the Python
//! package and Flight send, bounds checked by `crate::ipc` before Arrow
//! reads it) or a record batch, with every storable Arrow type (integers,
//! floats, bools, strings of every layout, timestamps of every unit, lists
//! of strings) converted to payload values.

use super::columns::Payload;
use super::error::{malformed, PayloadError};
use super::schema::{Field, FieldType};
use super::value::Value;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

impl Payload {
    /// Reads an Arrow IPC stream (the form the Python package sends).
    /// Integer, float, bool, string (also large, view and dictionary),
    /// timestamp (any unit, converted to µs) and list-of-string columns
    /// are accepted.
    pub fn from_ipc(bytes: &[u8]) -> Result<Payload, PayloadError> {
        crate::ipc::check_stream(bytes, true)
            .map_err(|e| malformed(format!("not an Arrow IPC stream: {e}")))?;
        // The check bounds every buffer by its body and Arrow validates the
        // arrays it builds; a panic inside Arrow's reader on bytes that
        // slip past both (a node longer than its buffers) is still an
        // error here, not a crash (see crate::ipc).
        std::panic::catch_unwind(|| {
            let reader =
                arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
                    .map_err(|e| malformed(format!("not an Arrow IPC stream: {e}")))?;
            let mut p = Payload::from_arrow_schema(&reader.schema())?;
            for batch in reader {
                let batch = batch.map_err(|e| malformed(format!("bad Arrow record batch: {e}")))?;
                p.append_columns(batch.columns())?;
            }
            p.validate(p.rows)?;
            Ok(p)
        })
        .unwrap_or_else(|_| Err(malformed("malformed Arrow data".to_string())))
    }

    /// The columns of an Arrow record batch (the types [`Payload::from_ipc`]
    /// accepts) as a payload.
    pub fn from_record_batch(batch: &RecordBatch) -> Result<Payload, PayloadError> {
        let mut p = Payload::from_arrow_schema(&batch.schema())?;
        p.append_columns(batch.columns())?;
        p.validate(p.rows)?;
        Ok(p)
    }

    fn from_arrow_schema(schema: &arrow_schema::Schema) -> Result<Payload, PayloadError> {
        let mut fields = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let ty = FieldType::from_arrow(f.data_type()).ok_or_else(|| PayloadError::Value {
                field: f.name().clone(),
                reason: format!(
                    "Arrow type {} is not storable (int, float, bool, string, timestamp, list of string)",
                    f.data_type()
                ),
            })?;
            fields.push(Field {
                name: f.name().clone(),
                ty,
            });
        }
        Ok(Payload {
            columns: vec![Vec::new(); fields.len()],
            fields,
            rows: 0,
        })
    }

    fn append_columns(&mut self, columns: &[arrow_array::ArrayRef]) -> Result<(), PayloadError> {
        let mut rows = 0;
        for (c, arr) in columns.iter().enumerate() {
            let name = self.fields[c].name.clone();
            append_values(&mut self.columns[c], arr.as_ref(), &name)?;
            rows = arr.len();
        }
        self.rows += rows;
        Ok(())
    }
}

fn append_values(out: &mut Vec<Value>, arr: &dyn Array, field: &str) -> Result<(), PayloadError> {
    let n = arr.len();
    macro_rules! prim {
        ($t:ty, $f:expr) => {{
            let a = arr.as_primitive::<$t>();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    $f(a.value(i))?
                });
            }
        }};
    }
    let int = |x: i64| Ok::<_, PayloadError>(Value::Int(x));
    match arr.data_type() {
        DataType::Int8 => prim!(Int8Type, |x: i8| int(x.into())),
        DataType::Int16 => prim!(Int16Type, |x: i16| int(x.into())),
        DataType::Int32 => prim!(Int32Type, |x: i32| int(x.into())),
        DataType::Int64 => prim!(Int64Type, int),
        DataType::UInt8 => prim!(UInt8Type, |x: u8| int(x.into())),
        DataType::UInt16 => prim!(UInt16Type, |x: u16| int(x.into())),
        DataType::UInt32 => prim!(UInt32Type, |x: u32| int(x.into())),
        DataType::UInt64 => prim!(UInt64Type, |x: u64| i64::try_from(x)
            .map(Value::Int)
            .map_err(|_| PayloadError::Value {
                field: field.into(),
                reason: format!("{x} does not fit an int64"),
            })),
        DataType::Float16 => prim!(Float16Type, |x: half::f16| Ok::<_, PayloadError>(
            Value::Float(x.to_f64())
        )),
        DataType::Float32 => prim!(Float32Type, |x: f32| Ok::<_, PayloadError>(Value::Float(
            x.into()
        ))),
        DataType::Float64 => prim!(Float64Type, |x: f64| Ok::<_, PayloadError>(Value::Float(x))),
        DataType::Timestamp(unit, _) => {
            let (a, mul, div): (Vec<Option<i64>>, i64, i64) = match unit {
                TimeUnit::Second => (
                    arr.as_primitive::<TimestampSecondType>().iter().collect(),
                    1_000_000,
                    1,
                ),
                TimeUnit::Millisecond => (
                    arr.as_primitive::<TimestampMillisecondType>()
                        .iter()
                        .collect(),
                    1000,
                    1,
                ),
                TimeUnit::Microsecond => (
                    arr.as_primitive::<TimestampMicrosecondType>()
                        .iter()
                        .collect(),
                    1,
                    1,
                ),
                TimeUnit::Nanosecond => (
                    arr.as_primitive::<TimestampNanosecondType>()
                        .iter()
                        .collect(),
                    1,
                    1000,
                ),
            };
            for v in a {
                out.push(match v {
                    None => Value::Null,
                    Some(x) => Value::Timestamp(
                        x.checked_mul(mul).ok_or_else(|| PayloadError::Value {
                            field: field.into(),
                            reason: "timestamp out of range".into(),
                        })? / div,
                    ),
                });
            }
        }
        DataType::Boolean => {
            let a = arr.as_boolean();
            out.extend(a.iter().map(|v| v.map_or(Value::Null, Value::Bool)));
        }
        DataType::Utf8 => out.extend(
            arr.as_string::<i32>()
                .iter()
                .map(|v| v.map_or(Value::Null, |s| Value::Str(s.into()))),
        ),
        DataType::LargeUtf8 => out.extend(
            arr.as_string::<i64>()
                .iter()
                .map(|v| v.map_or(Value::Null, |s| Value::Str(s.into()))),
        ),
        DataType::Utf8View => out.extend(
            arr.as_string_view()
                .iter()
                .map(|v| v.map_or(Value::Null, |s| Value::Str(s.into()))),
        ),
        DataType::Dictionary(_, _) => {
            let d = arr.as_any_dictionary();
            let mut vals = Vec::new();
            append_values(&mut vals, d.values().as_ref(), field)?;
            let keys = d.normalized_keys();
            for (i, k) in keys.iter().enumerate() {
                out.push(if arr.is_null(i) {
                    Value::Null
                } else {
                    vals.get(*k).cloned().unwrap_or(Value::Null)
                });
            }
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let lists: Vec<Option<ArrayRef>> = match arr.data_type() {
                DataType::List(_) => arr.as_list::<i32>().iter().collect(),
                _ => arr.as_list::<i64>().iter().collect(),
            };
            for l in lists {
                match l {
                    None => out.push(Value::Null),
                    Some(items) => {
                        let mut vals = Vec::new();
                        append_values(&mut vals, items.as_ref(), field)?;
                        let tags = vals
                            .into_iter()
                            .filter_map(|v| match v {
                                Value::Str(s) => Some(s),
                                _ => None,
                            })
                            .collect();
                        out.push(Value::Tags(tags));
                    }
                }
            }
        }
        t => {
            return Err(PayloadError::Value {
                field: field.into(),
                reason: format!("Arrow type {t} is not storable"),
            })
        }
    }
    Ok(())
}
