//! Payload columns: typed, nullable metadata stored beside each vector.
//!
//! A collection has one [`Schema`] (ordered fields, each with a
//! [`FieldType`]); it only grows: a write naming a new column adds it (old
//! rows read it as null), a write giving an existing column another type is
//! refused with [`PayloadError::TypeConflict`]. A row is held as values by
//! field position ([`Row`]); in the WAL it is written self-describing
//! ([`encode_row`]: names and types travel with the values, so replay can
//! grow the schema), in sealed segments as one Arrow IPC stream section
//! plus the payload indexes of [`crate::pindex`].

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use std::sync::Arc;

/// Largest encoded payload of one row (WAL record limit).
pub const MAX_ROW_BYTES: usize = 1 << 20;

/// Type of a payload column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FieldType {
    /// 64-bit signed integer.
    Int64 = 1,
    /// 64-bit float (NaN refused).
    Float64 = 2,
    /// Boolean.
    Bool = 3,
    /// UTF-8 string.
    String = 4,
    /// Microseconds since the Unix epoch, UTC.
    Timestamp = 5,
    /// A list of strings (tags).
    Tags = 6,
}

impl FieldType {
    /// The name used in schemas, manifests and errors.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Int64 => "int64",
            FieldType::Float64 => "float64",
            FieldType::Bool => "bool",
            FieldType::String => "string",
            FieldType::Timestamp => "timestamp",
            FieldType::Tags => "tags",
        }
    }

    /// Parses a name written by [`FieldType::name`].
    pub fn parse(s: &str) -> Option<FieldType> {
        Some(match s {
            "int64" => FieldType::Int64,
            "float64" => FieldType::Float64,
            "bool" => FieldType::Bool,
            "string" => FieldType::String,
            "timestamp" => FieldType::Timestamp,
            "tags" => FieldType::Tags,
            _ => return None,
        })
    }

    fn from_tag(t: u8) -> Option<FieldType> {
        Some(match t {
            1 => FieldType::Int64,
            2 => FieldType::Float64,
            3 => FieldType::Bool,
            4 => FieldType::String,
            5 => FieldType::Timestamp,
            6 => FieldType::Tags,
            _ => return None,
        })
    }

    /// The Arrow type a column of this type is stored as.
    pub fn arrow(self) -> DataType {
        match self {
            FieldType::Int64 => DataType::Int64,
            FieldType::Float64 => DataType::Float64,
            FieldType::Bool => DataType::Boolean,
            FieldType::String => DataType::Utf8,
            FieldType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            FieldType::Tags => DataType::List(Arc::new(arrow_schema::Field::new(
                "item",
                DataType::Utf8,
                true,
            ))),
        }
    }

    /// The payload type of an Arrow type we store or accept on input.
    pub fn from_arrow(t: &DataType) -> Option<FieldType> {
        Some(match t {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => FieldType::Int64,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => FieldType::Float64,
            DataType::Boolean => FieldType::Bool,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => FieldType::String,
            DataType::Dictionary(_, v) if FieldType::from_arrow(v) == Some(FieldType::String) => {
                FieldType::String
            }
            DataType::Timestamp(_, _) => FieldType::Timestamp,
            DataType::List(f) | DataType::LargeList(f)
                if FieldType::from_arrow(f.data_type()) == Some(FieldType::String) =>
            {
                FieldType::Tags
            }
            _ => return None,
        })
    }
}

/// One payload value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Missing.
    Null,
    /// int64.
    Int(i64),
    /// float64.
    Float(f64),
    /// bool.
    Bool(bool),
    /// string.
    Str(String),
    /// timestamp, µs since the epoch (UTC).
    Timestamp(i64),
    /// tags.
    Tags(Vec<String>),
}

impl Value {
    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// A named, typed column of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Column name (1..=255 bytes of UTF-8).
    pub name: String,
    /// Its type.
    pub ty: FieldType,
}

/// The payload columns of a collection, in the order they appeared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    fields: Vec<Field>,
}

/// Payload values of one row, by schema position; a row shorter than the
/// schema reads the missing trailing fields as null.
pub type Row = Box<[Value]>;

/// A user or data error about payloads or filters. Every variant that is
/// about one column names it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PayloadError {
    /// A filter names a column the collection does not have.
    #[error("field {field:?}: no such payload field (fields: {known})")]
    UnknownField {
        /// The name given.
        field: String,
        /// The fields that exist, comma separated.
        known: String,
    },
    /// A write gives a column a type other than the one it has.
    #[error("field {field:?}: the collection stores it as {existing}, this write gives {given}")]
    TypeConflict {
        /// The column.
        field: String,
        /// Its type in the collection.
        existing: &'static str,
        /// The type written.
        given: String,
    },
    /// A value does not fit its column or operator.
    #[error("field {field:?}: {reason}")]
    Value {
        /// The column.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A filter names an operator that does not exist or does not apply.
    #[error("field {field:?}: operator {op:?} {reason}")]
    Operator {
        /// The column.
        field: String,
        /// The operator given.
        op: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A filter that is not of the documented shape.
    #[error("invalid filter: {0}")]
    Filter(String),
    /// Payload input that cannot be read (bad Arrow, wrong row count, ...).
    #[error("invalid payload: {0}")]
    Malformed(String),
}

fn malformed(s: impl Into<String>) -> PayloadError {
    PayloadError::Malformed(s.into())
}

impl Schema {
    /// A schema of the given fields (names must be unique).
    pub fn new(fields: Vec<Field>) -> Result<Schema, PayloadError> {
        let mut s = Schema::default();
        s.merge(&fields)?;
        Ok(s)
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Position of the field `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The field `name`, or [`PayloadError::UnknownField`].
    pub fn field(&self, name: &str) -> Result<(usize, FieldType), PayloadError> {
        self.index_of(name)
            .map(|i| (i, self.fields[i].ty))
            .ok_or_else(|| PayloadError::UnknownField {
                field: name.to_string(),
                known: self.names(),
            })
    }

    fn names(&self) -> String {
        if self.fields.is_empty() {
            return "none".into();
        }
        self.fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks `fields` against the schema and adds the new ones; returns
    /// whether anything was added. Nothing changes on error.
    pub fn merge(&mut self, fields: &[Field]) -> Result<bool, PayloadError> {
        let mut add: Vec<&Field> = Vec::new();
        for f in fields {
            if f.name.is_empty() || f.name.len() > 255 {
                return Err(PayloadError::Value {
                    field: f.name.clone(),
                    reason: "a field name must be 1 to 255 bytes".into(),
                });
            }
            match self
                .index_of(&f.name)
                .map(|i| &self.fields[i])
                .or_else(|| add.iter().find(|g| g.name == f.name).copied())
            {
                Some(e) if e.ty != f.ty => {
                    return Err(PayloadError::TypeConflict {
                        field: f.name.clone(),
                        existing: e.ty.name(),
                        given: f.ty.name().into(),
                    })
                }
                Some(_) => {}
                None => add.push(f),
            }
        }
        let grew = !add.is_empty();
        self.fields.extend(add.into_iter().cloned());
        Ok(grew)
    }

    /// The Arrow schema of a segment's payload section.
    pub fn arrow(&self) -> arrow_schema::Schema {
        arrow_schema::Schema::new(
            self.fields
                .iter()
                .map(|f| arrow_schema::Field::new(&f.name, f.ty.arrow(), true))
                .collect::<Vec<_>>(),
        )
    }

    /// The schema of an Arrow schema written by [`Schema::arrow`].
    pub fn from_arrow(s: &arrow_schema::Schema) -> Result<Schema, PayloadError> {
        let fields = s
            .fields()
            .iter()
            .map(|f| {
                FieldType::from_arrow(f.data_type())
                    .map(|ty| Field {
                        name: f.name().clone(),
                        ty,
                    })
                    .ok_or_else(|| PayloadError::TypeConflict {
                        field: f.name().clone(),
                        existing: "one of int64, float64, bool, string, timestamp, tags",
                        given: f.data_type().to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Schema::new(fields)
    }
}

/// Payload columns for a batch of rows, as written by a user: column
/// names and types plus one value per row per column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Payload {
    /// The columns.
    pub fields: Vec<Field>,
    /// Values, `columns[c][row]`.
    pub columns: Vec<Vec<Value>>,
    /// Row count.
    pub rows: usize,
}

impl Payload {
    /// The rows `rows` of this payload, in that order.
    pub fn select(&self, rows: &[usize]) -> Payload {
        Payload {
            fields: self.fields.clone(),
            columns: self
                .columns
                .iter()
                .map(|c| rows.iter().map(|&r| c[r].clone()).collect())
                .collect(),
            rows: rows.len(),
        }
    }

    /// Checks value types, NaN and row count.
    pub fn validate(&self, rows: usize) -> Result<(), PayloadError> {
        if self.rows != rows {
            return Err(malformed(format!(
                "{} payload rows for {rows} keys",
                self.rows
            )));
        }
        Schema::new(self.fields.clone())?;
        for (f, col) in self.fields.iter().zip(&self.columns) {
            if col.len() != rows {
                return Err(malformed(format!(
                    "column {:?} has {} values for {rows} rows",
                    f.name,
                    col.len()
                )));
            }
            for (r, v) in col.iter().enumerate() {
                let ok = matches!(
                    (f.ty, v),
                    (_, Value::Null)
                        | (FieldType::Int64, Value::Int(_))
                        | (FieldType::Bool, Value::Bool(_))
                        | (FieldType::String, Value::Str(_))
                        | (FieldType::Timestamp, Value::Timestamp(_))
                        | (FieldType::Tags, Value::Tags(_))
                ) || matches!((f.ty, v), (FieldType::Float64, Value::Float(x)) if !x.is_nan());
                if !ok {
                    return Err(PayloadError::Value {
                        field: f.name.clone(),
                        reason: format!("row {r}: {v:?} is not a valid {}", f.ty.name()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Row `r` laid out by `schema` (which must contain every column).
    pub fn row(&self, schema: &Schema, r: usize) -> Row {
        let mut row = vec![Value::Null; schema.len()];
        for (f, col) in self.fields.iter().zip(&self.columns) {
            if let Some(i) = schema.index_of(&f.name) {
                row[i] = col[r].clone();
            }
        }
        while row.last().is_some_and(Value::is_null) {
            row.pop();
        }
        row.into_boxed_slice()
    }

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

    /// Builds a payload from JSON rows (objects of column → value), with
    /// column types taken from `schema` where known and inferred
    /// otherwise (integer, number, bool, string, array of strings).
    pub fn from_json_rows(
        rows: &[serde_json::Value],
        schema: &Schema,
    ) -> Result<Payload, PayloadError> {
        let mut p = Payload {
            rows: rows.len(),
            ..Payload::default()
        };
        for (r, row) in rows.iter().enumerate() {
            let obj = match row {
                serde_json::Value::Object(o) => o,
                serde_json::Value::Null => continue,
                _ => return Err(malformed(format!("row {r}: payload must be a JSON object"))),
            };
            for (name, v) in obj {
                let c = match p.fields.iter().position(|f| &f.name == name) {
                    Some(c) => c,
                    None => {
                        let ty = match schema.index_of(name) {
                            Some(i) => schema.fields()[i].ty,
                            None => match infer_json(v) {
                                Some(t) => t,
                                None => continue,
                            },
                        };
                        p.fields.push(Field {
                            name: name.clone(),
                            ty,
                        });
                        p.columns.push(vec![Value::Null; rows.len()]);
                        p.fields.len() - 1
                    }
                };
                p.columns[c][r] = json_value(name, p.fields[c].ty, v)?;
            }
        }
        p.validate(rows.len())?;
        Ok(p)
    }
}

fn infer_json(v: &serde_json::Value) -> Option<FieldType> {
    use serde_json::Value as J;
    Some(match v {
        J::Bool(_) => FieldType::Bool,
        J::Number(n) if n.is_i64() || n.is_u64() => FieldType::Int64,
        J::Number(_) => FieldType::Float64,
        J::String(_) => FieldType::String,
        J::Array(_) => FieldType::Tags,
        _ => return None,
    })
}

/// A JSON value as a value of column type `ty` (also used by filters).
pub fn json_value(
    field: &str,
    ty: FieldType,
    v: &serde_json::Value,
) -> Result<Value, PayloadError> {
    use serde_json::Value as J;
    let bad = |what: &str| PayloadError::Value {
        field: field.to_string(),
        reason: format!("{v} is not {what}"),
    };
    Ok(match (ty, v) {
        (_, J::Null) => Value::Null,
        (FieldType::Int64, J::Number(n)) => Value::Int(n.as_i64().ok_or_else(|| bad("an int64"))?),
        (FieldType::Float64, J::Number(n)) => {
            Value::Float(n.as_f64().ok_or_else(|| bad("a float64"))?)
        }
        (FieldType::Bool, J::Bool(b)) => Value::Bool(*b),
        (FieldType::String, J::String(s)) => Value::Str(s.clone()),
        (FieldType::Timestamp, J::Number(n)) => Value::Timestamp(
            n.as_i64()
                .ok_or_else(|| bad("a timestamp (integer µs since the epoch)"))?,
        ),
        (FieldType::Timestamp, J::String(s)) => Value::Timestamp(
            parse_rfc3339(s).ok_or_else(|| bad("an RFC 3339 timestamp (2024-05-01T12:00:00Z)"))?,
        ),
        (FieldType::Tags, J::Array(a)) => Value::Tags(
            a.iter()
                .map(|t| t.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("a list of strings"))?,
        ),
        (t, _) => return Err(bad(&format!("a {}", t.name()))),
    })
}

/// Formats µs since the epoch as RFC 3339 in UTC
/// (`2024-05-01T12:00:00.000001Z`; the fraction only when non-zero).
pub fn format_rfc3339(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    // Civil from days (Howard Hinnant's algorithm), the inverse of the
    // computation in `parse_rfc3339`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (secs, frac) = (rem / 1_000_000, rem % 1_000_000);
    let (h, mi, sec) = (secs / 3600, secs / 60 % 60, secs % 60);
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}.{frac:06}Z")
    }
}

impl Value {
    /// The value as JSON (timestamps as RFC 3339 strings, tags as an
    /// array of strings).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Bool(b) => J::Bool(*b),
            Value::Str(s) => J::String(s.clone()),
            Value::Timestamp(t) => J::String(format_rfc3339(*t)),
            Value::Tags(t) => J::Array(t.iter().cloned().map(J::String).collect()),
        }
    }
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS[.frac]]][Z|±HH:MM]` to µs since the
/// epoch (UTC).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |a: usize, n: usize| -> Option<i64> {
        let t = b.get(a..a + n)?;
        t.iter().all(u8::is_ascii_digit).then(|| {
            t.iter()
                .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !(1..=12).contains(&mo) {
        return None;
    }
    if !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut us = days * 86_400_000_000;
    let mut at = 10;
    if at < b.len() {
        if !matches!(b[at], b'T' | b't' | b' ') {
            return None;
        }
        let (h, mi) = (num(at + 1, 2)?, num(at + 4, 2)?);
        if b.get(at + 3) != Some(&b':') || h > 23 || mi > 59 {
            return None;
        }
        us += (h * 3600 + mi * 60) * 1_000_000;
        at += 6;
        if b.get(at) == Some(&b':') {
            let sec = num(at + 1, 2)?;
            if sec > 60 {
                return None;
            }
            us += sec * 1_000_000;
            at += 3;
            if b.get(at) == Some(&b'.') {
                at += 1;
                let mut scale = 100_000;
                let start = at;
                while at < b.len() && b[at].is_ascii_digit() {
                    us += i64::from(b[at] - b'0') * scale;
                    scale /= 10;
                    at += 1;
                }
                if at == start {
                    return None;
                }
            }
        }
        match b.get(at) {
            None => {}
            Some(b'Z' | b'z') if at + 1 == b.len() => {}
            Some(&sign @ (b'+' | b'-')) if at + 6 == b.len() && b[at + 3] == b':' => {
                let off = (num(at + 1, 2)? * 60 + num(at + 4, 2)?) * 60_000_000;
                us += if sign == b'+' { -off } else { off };
            }
            _ => return None,
        }
    }
    Some(us)
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

/// Appends the self-describing encoding of `row` (non-null values only):
/// `count u16`, then per value `name_len u16 | name | type u8 | value`
/// where value is i64 / f64 / u8 for int64, timestamp / float64 / bool,
/// `len u32 | bytes` for a string, `count u32 | (len u32 | bytes)*` for
/// tags.
pub fn encode_row(out: &mut Vec<u8>, schema: &Schema, row: &[Value]) {
    let count = row.iter().filter(|v| !v.is_null()).count();
    out.extend_from_slice(&(count as u16).to_le_bytes());
    for (f, v) in schema.fields().iter().zip(row) {
        if v.is_null() {
            continue;
        }
        out.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
        out.extend_from_slice(f.name.as_bytes());
        out.push(f.ty as u8);
        let put_str = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        match v {
            Value::Int(x) | Value::Timestamp(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Float(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(b) => out.push(u8::from(*b)),
            Value::Str(s) => put_str(out, s),
            Value::Tags(t) => {
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                for s in t {
                    put_str(out, s);
                }
            }
            Value::Null => {}
        }
    }
}

/// Decodes [`encode_row`]'s bytes into (field, value) pairs.
pub fn decode_row(b: &[u8]) -> Result<Vec<(Field, Value)>, PayloadError> {
    struct Cur<'a> {
        b: &'a [u8],
        at: usize,
    }
    impl<'a> Cur<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], PayloadError> {
            let end = self
                .at
                .checked_add(n)
                .ok_or_else(|| malformed("bad length"))?;
            let s = self
                .b
                .get(self.at..end)
                .ok_or_else(|| malformed("truncated payload row"))?;
            self.at = end;
            Ok(s)
        }
        fn u16(&mut self) -> Result<usize, PayloadError> {
            let s = self.take(2)?;
            Ok(u16::from_le_bytes([s[0], s[1]]) as usize)
        }
        fn u32(&mut self) -> Result<usize, PayloadError> {
            let s = self.take(4)?;
            Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
        }
        fn i64(&mut self) -> Result<i64, PayloadError> {
            let mut x = [0u8; 8];
            x.copy_from_slice(self.take(8)?);
            Ok(i64::from_le_bytes(x))
        }
        fn str(&mut self, n: usize) -> Result<String, PayloadError> {
            std::str::from_utf8(self.take(n)?)
                .map(str::to_string)
                .map_err(|_| malformed("string is not UTF-8"))
        }
    }
    let mut c = Cur { b, at: 0 };
    let count = c.u16()?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let nl = c.u16()?;
        let name = c.str(nl)?;
        let ty =
            FieldType::from_tag(c.take(1)?[0]).ok_or_else(|| malformed("unknown field type"))?;
        let v = match ty {
            FieldType::Int64 => Value::Int(c.i64()?),
            FieldType::Timestamp => Value::Timestamp(c.i64()?),
            FieldType::Float64 => Value::Float(f64::from_bits(c.i64()? as u64)),
            FieldType::Bool => Value::Bool(c.take(1)?[0] != 0),
            FieldType::String => {
                let l = c.u32()?;
                Value::Str(c.str(l)?)
            }
            FieldType::Tags => {
                let n = c.u32()?;
                let mut t = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let l = c.u32()?;
                    t.push(c.str(l)?);
                }
                Value::Tags(t)
            }
        };
        out.push((Field { name, ty }, v));
    }
    if c.at != b.len() {
        return Err(malformed("trailing bytes after a payload row"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

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

    #[test]
    fn rfc3339_timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-02T00:00:00Z"), Some(86_400_000_000));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:30:15.25Z"),
            Some(1_714_566_615_250_000)
        );
        // An offset is subtracted to get UTC.
        assert_eq!(
            parse_rfc3339("2024-05-01T14:30:15.25+02:00"),
            parse_rfc3339("2024-05-01T12:30:15.25Z")
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(-1_000_000));
        for bad in [
            "",
            "2024",
            "2024-13-01",
            "2024-01-01T25:00",
            "2024-01-01X",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(1_714_566_615_250_000),
            "2024-05-01T12:30:15.250000Z"
        );
        assert_eq!(format_rfc3339(-1_000_000), "1969-12-31T23:59:59Z");
        for us in [
            -62_135_596_800_000_000, // 0001-01-01
            951_782_400_000_001,     // 2000-02-29, leap day
            4_102_444_799_999_999,   // 2099-12-31T23:59:59.999999
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(us)), Some(us), "{us}");
        }
    }

    #[test]
    fn json_rows_infer_types_and_follow_the_schema() {
        let schema = Schema::new(vec![Field {
            name: "score".into(),
            ty: FieldType::Float64,
        }])
        .unwrap();
        let rows = [
            json!({"lang": "en", "year": 2020, "score": 1, "tags": ["a"], "ok": true}),
            json!(null),
            json!({"lang": null, "score": 0.5}),
        ];
        let p = Payload::from_json_rows(&rows, &schema).unwrap();
        assert_eq!(p.rows, 3);
        let ty = |n: &str| p.fields.iter().find(|f| f.name == n).unwrap().ty;
        assert_eq!(ty("lang"), FieldType::String);
        assert_eq!(ty("year"), FieldType::Int64);
        // The schema says float64, so the integer 1 is stored as 1.0.
        assert_eq!(ty("score"), FieldType::Float64);
        assert_eq!(ty("tags"), FieldType::Tags);
        assert_eq!(ty("ok"), FieldType::Bool);
        let c = p.fields.iter().position(|f| f.name == "score").unwrap();
        assert_eq!(
            p.columns[c],
            vec![Value::Float(1.0), Value::Null, Value::Float(0.5)]
        );
        // A value that does not fit the column's type names the field.
        let err = Payload::from_json_rows(&[json!({"score": "high"})], &schema).unwrap_err();
        assert!(matches!(err, PayloadError::Value { ref field, .. } if field == "score"));
        assert!(Payload::from_json_rows(&[json!(3)], &schema).is_err());
    }

    #[test]
    fn wal_rows_round_trip_and_truncation_is_an_error() {
        let schema = Schema::new(vec![
            Field {
                name: "s".into(),
                ty: FieldType::String,
            },
            Field {
                name: "t".into(),
                ty: FieldType::Tags,
            },
            Field {
                name: "f".into(),
                ty: FieldType::Float64,
            },
        ])
        .unwrap();
        let row = vec![
            Value::Str("héllo".into()),
            Value::Tags(vec!["a".into(), String::new()]),
            Value::Float(-0.0),
        ];
        let mut b = Vec::new();
        encode_row(&mut b, &schema, &row);
        let back = decode_row(&b).unwrap();
        assert_eq!(back.len(), 3);
        for ((f, v), (g, w)) in back.iter().zip(schema.fields().iter().zip(&row)) {
            assert_eq!((f, v), (g, w));
        }
        for cut in 0..b.len() {
            assert!(decode_row(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode_row(&extra).is_err());
    }
}
