//! Payload updates (`set_payload`, `set_payload_where`): the named columns
//! change and nothing else does (other columns, the stored vectors, rows
//! not named), in the mutable part and in sealed and built segments,
//! through a reopen and an optimizer merge; the text index follows
//! updated text; bad updates are typed errors that write nothing.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::{
    AnalyzerKind, Collection, CollectionConfig, Field, FieldType, Filter, OpenMode, Payload,
    PayloadError, Query, StoreError, TextFieldSpec, Value,
};
use serde_json::json;
use std::collections::HashMap;

const DIMS: usize = 8;

fn vector(k: u64) -> Vec<f32> {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIMS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn field(name: &str, ty: FieldType) -> Field {
    Field {
        name: name.into(),
        ty,
    }
}

/// `body` (text), `lang` (string), `year` (int) of key `k` as first written.
fn original(k: u64) -> [Value; 3] {
    [
        Value::Str(format!(
            "parser {} library",
            ["rust", "python", "go"][k as usize % 3]
        )),
        Value::Str(["en", "de"][k as usize % 2].into()),
        Value::Int(2000 + (k % 20) as i64),
    ]
}

fn cols(fields: &[(&str, FieldType)], rows: Vec<Vec<Value>>) -> Payload {
    Payload {
        fields: fields.iter().map(|(n, t)| field(n, *t)).collect(),
        columns: (0..fields.len())
            .map(|c| rows.iter().map(|r| r[c].clone()).collect())
            .collect(),
        rows: rows.len(),
    }
}

fn config(kind: IndexKind) -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = kind;
    c.segment_size = (200 * c.bytes_per_vector()).max(4096);
    c.idle_seal_ms = 0;
    c.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    c
}

fn load(c: &Collection, keys: std::ops::Range<u64>) {
    let keys: Vec<u64> = keys.collect();
    let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let p = cols(
        &[
            ("body", FieldType::String),
            ("lang", FieldType::String),
            ("year", FieldType::Int64),
        ],
        keys.iter().map(|&k| original(k).to_vec()).collect(),
    );
    c.upsert_with_payload(&keys, &refs, Some(&p)).unwrap();
}

/// Every live row's payload, by key, laid out by the collection schema.
fn rows(c: &Collection, keys: &[u64]) -> Vec<Vec<Value>> {
    c.payload_rows(keys)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().to_vec())
        .collect()
}

fn count(c: &Collection, f: serde_json::Value) -> usize {
    let b = c.bind_filter(&Filter::parse(&f).unwrap()).unwrap();
    c.count(Some(&b)).unwrap()
}

fn text_keys(c: &Collection, q: &str) -> Vec<u64> {
    let mut v: Vec<u64> = c
        .search_text(&Query {
            text: Some(q),
            vectors: None.into_iter().collect(),
            k: 1000,
            fusion: None,
            depth: None,
            opts: Default::default(),
        })
        .unwrap()
        .iter()
        .map(|h| h.key)
        .collect();
    v.sort_unstable();
    v
}

/// What every row should hold: the original row with `changed` applied.
fn check(c: &Collection, keys: &[u64], changed: &HashMap<u64, (i64, Option<String>)>, stage: &str) {
    let got = rows(c, keys);
    for (&k, row) in keys.iter().zip(&got) {
        let mut want = original(k).to_vec();
        if let Some((year, body)) = changed.get(&k) {
            want[2] = Value::Int(*year);
            if let Some(b) = body {
                want[0] = Value::Str(b.clone());
            }
        }
        assert_eq!(&row[..3], &want[..], "{stage}: key {k}");
        assert_eq!(
            c.get_raw(k).unwrap(),
            bytemuck_f32(&vector(k)),
            "{stage}: key {k}'s vector"
        );
    }
    let years = changed.values().filter(|(y, _)| *y >= 3000).count();
    assert_eq!(
        count(c, json!({"field": "year", "op": ">=", "value": 3000})),
        years,
        "{stage}"
    );
    assert_eq!(
        count(c, json!({"field": "lang", "op": "eq", "value": "en"})),
        keys.iter().filter(|&&k| k % 2 == 0).count(),
        "{stage}: lang untouched"
    );
    let quark: Vec<u64> = {
        let mut v: Vec<u64> = changed
            .iter()
            .filter(|(_, (_, b))| b.is_some())
            .map(|(&k, _)| k)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(text_keys(c, "quark"), quark, "{stage}: new text found");
    let rust: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|k| k % 3 == 0 && !quark.contains(k))
        .collect();
    assert_eq!(text_keys(c, "rust"), rust, "{stage}: replaced text gone");
}

fn bytemuck_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn named_columns_change_and_nothing_else_in_every_part_state() {
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::create(dir.path(), config(kind)).unwrap();
        load(&c, 0..700);
        assert!(c.stats().segments >= 2, "some rows sealed");
        assert!(
            c.stats().active_vectors > 0,
            "some rows in the mutable part"
        );
        let keys: Vec<u64> = (0..700).collect();
        let mut changed = HashMap::new();
        // Years of every 3rd key (sealed and mutable rows alike).
        let up: Vec<u64> = (0..700).step_by(3).collect();
        let p = cols(
            &[("year", FieldType::Int64)],
            up.iter()
                .map(|&k| vec![Value::Int(3000 + k as i64)])
                .collect(),
        );
        assert_eq!(c.set_payload(&up, &p).unwrap(), up.len());
        for &k in &up {
            changed.insert(k, (3000 + k as i64, None));
        }
        // Text and year of every 10th key.
        let up: Vec<u64> = (0..700).step_by(10).collect();
        let p = cols(
            &[("body", FieldType::String), ("year", FieldType::Int64)],
            up.iter()
                .map(|&k| vec![Value::Str(format!("quark {k}")), Value::Int(5000)])
                .collect(),
        );
        assert_eq!(c.set_payload(&up, &p).unwrap(), up.len());
        for &k in &up {
            changed.insert(k, (5000, Some(format!("quark {k}"))));
        }
        check(&c, &keys, &changed, &format!("{kind:?} written"));
        assert_eq!(c.len(), 700);
        c.close().unwrap();
        let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
        check(&c, &keys, &changed, &format!("{kind:?} reopened"));
        c.optimize().unwrap();
        check(&c, &keys, &changed, &format!("{kind:?} optimized"));
    }
}

#[test]
fn an_update_by_filter_sets_exactly_the_matching_rows() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw)).unwrap();
    load(&c, 0..500);
    let f = c
        .bind_filter(&Filter::parse(&json!({"field": "year", "op": "lt", "value": 2005})).unwrap())
        .unwrap();
    let matching = c.count(Some(&f)).unwrap();
    assert!(matching > 0);
    let values = cols(
        &[("lang", FieldType::String), ("flag", FieldType::Bool)],
        vec![vec![Value::Null, Value::Bool(true)]],
    );
    assert_eq!(c.set_payload_where(&f, &values).unwrap(), matching);
    assert_eq!(
        count(&c, json!({"field": "lang", "op": "is_null"})),
        matching
    );
    assert_eq!(
        count(&c, json!({"field": "flag", "op": "eq", "value": true})),
        matching
    );
    let keys: Vec<u64> = (0..500).collect();
    for (k, row) in keys.iter().zip(rows(&c, &keys)) {
        let o = original(*k);
        let hit = matches!(o[2], Value::Int(y) if y < 2005);
        assert_eq!(row[0], o[0], "key {k}: body untouched");
        assert_eq!(row[2], o[2], "key {k}: year untouched");
        assert_eq!(
            row[1],
            if hit { Value::Null } else { o[1].clone() },
            "key {k}"
        );
        // (A row written before the column existed may end before it.)
        let flag = row.get(3).cloned().unwrap_or(Value::Null);
        assert_eq!(
            flag,
            if hit { Value::Bool(true) } else { Value::Null },
            "key {k}"
        );
    }
    let two = cols(
        &[("flag", FieldType::Bool)],
        vec![vec![Value::Bool(false)]; 2],
    );
    assert!(matches!(
        c.set_payload_where(&f, &two),
        Err(StoreError::Payload(PayloadError::Malformed(_)))
    ));
}

#[test]
fn bad_updates_are_typed_errors_that_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw)).unwrap();
    load(&c, 0..300);
    let keys: Vec<u64> = (0..300).collect();
    let before = rows(&c, &keys);
    let year = |ks: &[u64]| {
        cols(
            &[("year", FieldType::Int64)],
            ks.iter().map(|_| vec![Value::Int(1)]).collect(),
        )
    };
    // A missing key (deleted, or never written) anywhere in the batch.
    c.remove(&[7]).unwrap();
    for bad in [vec![1, 2, 7, 3], vec![1, 999, 2]] {
        let e = c.set_payload(&bad, &year(&bad)).unwrap_err();
        assert!(
            matches!(e, StoreError::KeyNotFound { key, .. } if key == bad[2] || key == 999),
            "{e}"
        );
    }
    // A column of another type than the schema's; rows for other keys.
    let wrong = cols(
        &[("year", FieldType::String)],
        vec![vec![Value::Str("x".into())]],
    );
    assert!(matches!(
        c.set_payload(&[1], &wrong),
        Err(StoreError::Payload(_))
    ));
    assert!(matches!(
        c.set_payload(&[1, 2], &year(&[1])),
        Err(StoreError::Payload(_))
    ));
    // The reserved id column.
    let id = cols(
        &[("_id", FieldType::String)],
        vec![vec![Value::Str("x".into())]],
    );
    assert!(matches!(
        c.set_payload(&[1], &id),
        Err(StoreError::Payload(_))
    ));
    let live: Vec<u64> = keys.iter().copied().filter(|&k| k != 7).collect();
    let want: Vec<Vec<Value>> = keys
        .iter()
        .zip(before)
        .filter(|(k, _)| **k != 7)
        .map(|(_, r)| r)
        .collect();
    assert_eq!(rows(&c, &live), want);
    assert_eq!(c.schema().len(), 3, "no column added by a refused update");
    // A key given twice takes its last row.
    let p = cols(
        &[("year", FieldType::Int64)],
        vec![vec![Value::Int(1)], vec![Value::Int(2)]],
    );
    assert_eq!(c.set_payload(&[5, 5], &p).unwrap(), 1);
    assert_eq!(rows(&c, &[5])[0][2], Value::Int(2));
    // An empty update writes nothing.
    assert_eq!(c.set_payload(&[], &year(&[])).unwrap(), 0);
}

#[test]
fn a_read_only_collection_refuses_updates() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Flat)).unwrap();
    load(&c, 0..10);
    c.close().unwrap();
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    let p = cols(&[("year", FieldType::Int64)], vec![vec![Value::Int(1)]]);
    assert!(matches!(
        r.set_payload(&[1], &p),
        Err(StoreError::ReadOnly { .. })
    ));
}

#[test]
fn updates_of_many_rows_go_in_pieces_and_miss_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(IndexKind::Flat);
    cfg.segment_size = (4000 * cfg.bytes_per_vector()).max(4096);
    let c = Collection::create(dir.path(), cfg).unwrap();
    let n = 20_000u64;
    load(&c, 0..n);
    let keys: Vec<u64> = (0..n).rev().collect();
    let p = cols(
        &[("year", FieldType::Int64)],
        keys.iter()
            .map(|&k| vec![Value::Int(10_000 + k as i64)])
            .collect(),
    );
    assert_eq!(c.set_payload(&keys, &p).unwrap(), n as usize);
    let got = rows(&c, &keys);
    for (&k, r) in keys.iter().zip(&got) {
        assert_eq!(r[2], Value::Int(10_000 + k as i64), "key {k}");
        assert_eq!(r[1], original(k)[1], "key {k}");
    }
    let all = c
        .bind_filter(
            &Filter::parse(&json!({"field": "year", "op": ">=", "value": 10_000})).unwrap(),
        )
        .unwrap();
    let one = cols(
        &[("lang", FieldType::String)],
        vec![vec![Value::Str("zz".into())]],
    );
    assert_eq!(c.set_payload_where(&all, &one).unwrap(), n as usize);
    assert_eq!(
        count(&c, json!({"field": "lang", "op": "eq", "value": "zz"})),
        n as usize
    );
    assert_eq!(c.len(), n as usize);
}
