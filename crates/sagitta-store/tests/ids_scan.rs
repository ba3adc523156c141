//! Ids as users give them (uint64 / int64 / string: keys, typed errors,
//! duplicates, string collisions, the type kept across a reopen) and the
//! streaming scan (every live row once, with its vector and payload, in the
//! mutable part, frozen and sealed parts, after deletes, under a filter).

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{
    string_key, Collection, CollectionConfig, Field, FieldType, Filter, Id, IdColumn, IdType,
    OpenMode, Payload, StoreError, Value,
};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

const DIMS: usize = 4;

fn vector(i: u64) -> Vec<f32> {
    (0..DIMS).map(|d| (i * 7 + d as u64) as f32).collect()
}

fn config(id_type: IdType) -> CollectionConfig {
    let mut c = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap());
    c.id_type = id_type;
    c.segment_size = 30 * c.bytes_per_vector();
    c
}

fn lang_payload(range: std::ops::Range<u64>) -> Payload {
    Payload {
        fields: vec![Field {
            name: "lang".into(),
            ty: FieldType::String,
        }],
        columns: vec![range
            .map(|i| Value::Str(if i % 3 == 0 { "en" } else { "de" }.into()))
            .collect()],
        rows: 0,
    }
}

fn put(c: &Collection, ids: IdColumn, range: std::ops::Range<u64>) -> Result<Vec<u64>, StoreError> {
    let vecs: Vec<Vec<f32>> = range.clone().map(vector).collect();
    let refs: Vec<VectorRef<'_>> = vecs.iter().map(|v| VectorRef::F32(v)).collect();
    let mut p = lang_payload(range.clone());
    p.rows = refs.len();
    c.upsert_ids(&ids, &refs, Some(&p))
}

#[test]
fn ids_keep_their_type_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(&dir.path().join("i"), config(IdType::Int64)).unwrap();
    let keys = put(&c, IdColumn::Int(vec![-3, 0, 5]), 0..3).unwrap();
    assert_eq!(keys, [(-3i64) as u64, 0, 5]);
    assert_eq!(
        c.ids_of(&keys).unwrap(),
        [Some(Id::Int(-3)), Some(Id::Int(0)), Some(Id::Int(5))]
    );
    assert_eq!(c.key_of(&Id::Str("-3".into())).unwrap(), (-3i64) as u64);
    assert!(matches!(
        c.key_of(&Id::Str("x".into())),
        Err(StoreError::InvalidId { .. })
    ));
    // One id twice in a write: refused, nothing written.
    let e = put(&c, IdColumn::Int(vec![9, 9]), 3..5).unwrap_err();
    assert!(matches!(e, StoreError::DuplicateId { row: 1, .. }), "{e}");
    assert!(!c.contains(9));
    // The reserved column.
    let p = Payload {
        fields: vec![Field {
            name: "_id".into(),
            ty: FieldType::String,
        }],
        columns: vec![vec![Value::Str("x".into())]],
        rows: 1,
    };
    let v = vector(1);
    assert!(c
        .upsert_ids(&IdColumn::Int(vec![1]), &[VectorRef::F32(&v)], Some(&p))
        .is_err());
    c.close().unwrap();
    // The id type is kept by the manifest.
    let c = Collection::open(&dir.path().join("i"), OpenMode::ReadOnly).unwrap();
    assert_eq!(c.id_type(), IdType::Int64);
    assert_eq!(c.len(), 3);
}

#[test]
fn string_ids_are_kept_and_collisions_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let c = Collection::create(&path, config(IdType::String)).unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("doc-{i}")).collect();
    let keys = put(&c, IdColumn::Str(names.clone()), 0..40).unwrap();
    assert_eq!(keys[3], string_key("doc-3"));
    let ids = c.ids_of(&keys).unwrap();
    assert_eq!(ids[3], Some(Id::Str("doc-3".into())));
    // Replacing a row under the same string is an upsert.
    put(&c, IdColumn::Str(vec!["doc-3".into()]), 100..101).unwrap();
    assert_eq!(c.len(), 40);
    // Integers into a string collection are their decimal strings.
    let k = put(&c, IdColumn::UInt(vec![77]), 41..42).unwrap();
    assert_eq!(k, [string_key("77")]);
    assert_eq!(c.ids_of(&k).unwrap(), [Some(Id::Str("77".into()))]);
    // A different string stored under a taken key is a collision: the
    // stored `_id` is what the check reads, so plant one by hand.
    c.close().unwrap();
    let c = Collection::open(&path, OpenMode::ReadWrite).unwrap();
    assert_eq!(c.id_type(), IdType::String);
    let v = vector(0);
    let planted = Payload {
        fields: vec![Field {
            name: "_id".into(),
            ty: FieldType::String,
        }],
        columns: vec![vec![Value::Str("not-doc-5".into())]],
        rows: 1,
    };
    c.upsert_with_payload(
        &[string_key("doc-5")],
        &[VectorRef::F32(&v)],
        Some(&planted),
    )
    .unwrap();
    let e = put(&c, IdColumn::Str(vec!["doc-5".into()]), 0..1).unwrap_err();
    assert!(
        matches!(&e, StoreError::IdCollision { new, old, .. } if new == "doc-5" && old == "not-doc-5"),
        "{e}"
    );
}

#[test]
fn scan_streams_every_live_row_once_with_its_payload() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(&dir.path().join("c"), config(IdType::UInt64)).unwrap();
    // Sealed parts (the segment size is 30 rows), then a mutable tail.
    for lo in (0..150).step_by(25) {
        put(&c, IdColumn::UInt((lo..lo + 25).collect()), lo..lo + 25).unwrap();
    }
    c.seal().unwrap();
    put(&c, IdColumn::UInt((150..170).collect()), 150..170).unwrap();
    c.remove(&[0, 31, 160]).unwrap();
    let live: BTreeMap<u64, Vec<f32>> = (0..170)
        .filter(|k| ![0, 31, 160].contains(k))
        .map(|k| (k, vector(k)))
        .collect();
    for batch in [1, 7, 64, 1000] {
        let scan = c.scan(None, batch).unwrap();
        let lang = scan.schema().field("lang").unwrap().0;
        let mut seen: HashMap<u64, (Vec<f32>, Value)> = HashMap::new();
        let mut sizes = Vec::new();
        for b in scan {
            let b = b.unwrap();
            sizes.push(b.len());
            for (i, &k) in b.keys.iter().enumerate() {
                let v: Vec<f32> = b.vectors[i * DIMS * 4..(i + 1) * DIMS * 4]
                    .chunks(4)
                    .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                    .collect();
                assert!(
                    seen.insert(k, (v, b.rows[i][lang].clone())).is_none(),
                    "{k} twice"
                );
            }
        }
        assert_eq!(seen.len(), live.len(), "batch {batch}");
        for (k, v) in &live {
            let (got, l) = &seen[k];
            assert_eq!(got, v);
            assert_eq!(*l, Value::Str(if k % 3 == 0 { "en" } else { "de" }.into()));
        }
        // Every batch but the last is full.
        assert!(sizes[..sizes.len() - 1].iter().all(|&s| s == batch));
    }
    // Under a filter: exactly the rows keys_where gives.
    let f = Filter::parse(&json!({"field": "lang", "op": "eq", "value": "en"})).unwrap();
    let b = c.bind_filter(&f).unwrap();
    let mut want = c.keys_where(Some(&b)).unwrap();
    want.sort_unstable();
    let mut got: Vec<u64> = c
        .scan(Some(&b), 10)
        .unwrap()
        .flat_map(|b| b.unwrap().keys)
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);
    assert!(got.iter().all(|k| k % 3 == 0 && *k != 0));
    // Rows written after the scan started are not returned.
    let mut scan = c.scan(None, 5).unwrap();
    let first = scan.next().unwrap().unwrap();
    put(&c, IdColumn::UInt(vec![999]), 999..1000).unwrap();
    let rest: usize = scan.map(|b| b.unwrap().len()).sum();
    assert_eq!(first.len() + rest, live.len());
}
