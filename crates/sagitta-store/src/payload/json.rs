//! JSON payloads: rows of JSON objects read as a [`Payload`] (column
//! types from the schema, or inferred), one JSON value read as a value of a
//! column type (also used by filters), and a value written as JSON.

use super::columns::Payload;
use super::error::{malformed, PayloadError};
use super::schema::{Field, FieldType, Schema};
use super::time::{format_rfc3339, parse_rfc3339};
use super::value::Value;

/// The timestamps RFC 3339 can write (years 0000 to 9999), in µs since
/// the epoch.
const RFC3339_US: std::ops::RangeInclusive<i64> = -62_167_219_200_000_000..=253_402_300_799_999_999;

impl Payload {
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

impl Value {
    /// The value as JSON (timestamps as RFC 3339 strings, those outside
    /// years 0000 to 9999 as their integer µs; tags as an array of
    /// strings). Every value reads back as itself ([`json_value`]).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Bool(b) => J::Bool(*b),
            Value::Str(s) => J::String(s.clone()),
            Value::Timestamp(t) if RFC3339_US.contains(t) => J::String(format_rfc3339(*t)),
            // RFC 3339 has no form for these (an integer or an Arrow
            // timestamp can give them): the integer, which reads back.
            Value::Timestamp(t) => J::from(*t),
            Value::Tags(t) => J::Array(t.iter().cloned().map(J::String).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

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
    fn every_timestamp_written_as_json_reads_back() {
        // Outside years 0000 to 9999 a timestamp was written as
        // "10000-01-01T00:00:00Z" or "-001-12-31T23:59:59.999999Z", which
        // the reader refuses (found by fuzz/fuzz_targets/payload_rows.rs):
        // now as its integer µs.
        for us in [
            i64::MIN,
            -62_167_219_200_000_001,
            -62_167_219_200_000_000,
            -1,
            0,
            253_402_300_799_999_999,
            253_402_300_800_000_000,
            i64::MAX,
        ] {
            let j = Value::Timestamp(us).to_json();
            let back = json_value("t", FieldType::Timestamp, &j).unwrap();
            assert_eq!(back, Value::Timestamp(us), "{j}");
        }
        assert_eq!(Value::Timestamp(0).to_json(), json!("1970-01-01T00:00:00Z"));
        assert_eq!(
            Value::Timestamp(-62_167_219_200_000_000).to_json(),
            json!("0000-01-01T00:00:00Z")
        );
        assert_eq!(
            Value::Timestamp(253_402_300_800_000_000).to_json(),
            json!(253_402_300_800_000_000i64)
        );
    }
}
