//! Payload rows in their two untrusted encodings
//! (`sagitta_store::payload`). The first byte picks:
//!
//! - 0: a WAL payload row (`decode_row`, read straight, no record checksum
//!   in front of it): a row it reads encodes back ([`encode_row`]) to
//!   bytes that read as the same row.
//! - 1: JSON rows (`Payload::from_json_rows`, against a schema of every
//!   column type, or none): each value written back as JSON
//!   (`Value::to_json`) reads as the same value, and the rows go through
//!   the WAL encoding unchanged.
//! - 2: an RFC 3339 timestamp (`parse_rfc3339`): formatted back, it parses
//!   to the same instant.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sagitta_store::payload::{
    decode_row, encode_row, format_rfc3339, json_value, parse_rfc3339, Field, FieldType, Payload,
    Schema, Value,
};
use std::sync::OnceLock;

/// A value for comparing (floats by their bits: NaN and -0.0 included).
fn key(v: &Value) -> String {
    match v {
        Value::Float(f) => format!("Float({:x})", f.to_bits()),
        v => format!("{v:?}"),
    }
}

fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        let f = |name: &str, ty| Field {
            name: name.into(),
            ty,
        };
        Schema::new(vec![
            f("i", FieldType::Int64),
            f("f", FieldType::Float64),
            f("b", FieldType::Bool),
            f("s", FieldType::String),
            f("t", FieldType::Timestamp),
            f("g", FieldType::Tags),
        ])
        .expect("schema")
    })
}

/// `row` under `fields` through the WAL encoding: the same values back.
fn wal_round_trip(fields: Vec<Field>, row: &[Value]) {
    let n = fields.len();
    let Ok(schema) = Schema::new(fields) else {
        return;
    };
    // A logged row naming a field twice: the schema keeps it once, so the
    // values no longer line up with the fields by position (the store's
    // replay, `row_from_log`, pairs them by name instead).
    if schema.fields().len() != n {
        return;
    }
    let mut b = Vec::new();
    encode_row(&mut b, &schema, row);
    let back = decode_row(&b).expect("an encoded row decodes");
    let want: Vec<String> = schema
        .fields()
        .iter()
        .zip(row)
        .filter(|(_, v)| !v.is_null())
        .map(|(f, v)| format!("{f:?}={}", key(v)))
        .collect();
    let got: Vec<String> = back
        .iter()
        .map(|(f, v)| format!("{f:?}={}", key(v)))
        .collect();
    assert_eq!(got, want);
}

fn wal(body: &[u8]) {
    let Ok(row) = decode_row(body) else {
        return;
    };
    let (fields, values): (Vec<Field>, Vec<Value>) = row.into_iter().unzip();
    wal_round_trip(fields, &values);
}

fn json(body: &[u8]) {
    let Ok(serde_json::Value::Array(rows)) = serde_json::from_slice(body) else {
        return;
    };
    let empty = Schema::default();
    for schema in [schema(), &empty] {
        let Ok(p) = Payload::from_json_rows(&rows, schema) else {
            continue;
        };
        for (f, col) in p.fields.iter().zip(&p.columns) {
            for v in col {
                let j = v.to_json();
                // A float that JSON cannot hold is written as null.
                if matches!(v, Value::Float(x) if !x.is_finite()) {
                    assert!(j.is_null());
                    continue;
                }
                match json_value(&f.name, f.ty, &j) {
                    Ok(back) => assert_eq!(key(&back), key(v), "{} {j}", f.name),
                    Err(e) => panic!("{v:?} written as {j} does not read back: {e}"),
                }
            }
        }
        for r in 0..p.rows {
            let row: Vec<Value> = p.columns.iter().map(|c| c[r].clone()).collect();
            wal_round_trip(p.fields.clone(), &row);
        }
    }
}

fn timestamp(body: &[u8]) {
    let Ok(s) = std::str::from_utf8(body) else {
        return;
    };
    let Some(us) = parse_rfc3339(s) else {
        return;
    };
    let text = format_rfc3339(us);
    assert_eq!(parse_rfc3339(&text), Some(us), "{s:?} -> {us} -> {text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => wal(body),
        1 => json(body),
        _ => timestamp(body),
    }
});
