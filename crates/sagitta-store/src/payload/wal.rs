//! The WAL's encoding of a payload row: self-describing (names and types
//! travel with the values, so replay can grow the schema), non-null values
//! only, bounded by [`MAX_ROW_BYTES`].

use super::error::{malformed, PayloadError};
use super::schema::{Field, FieldType, Schema};
use super::value::Value;

/// Largest encoded payload of one row (WAL record limit).
pub const MAX_ROW_BYTES: usize = 1 << 20;

/// The field type of a WAL type tag (the `repr(u8)` of [`FieldType`]).
fn field_type_of_tag(t: u8) -> Option<FieldType> {
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
        let ty = field_type_of_tag(c.take(1)?[0]).ok_or_else(|| malformed("unknown field type"))?;
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
