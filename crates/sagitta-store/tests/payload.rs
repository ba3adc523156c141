//! Payload columns and filters on a collection: every filter operator is
//! checked against a reference evaluation of the rows, in the active
//! segment, in sealed segments (payload indexes), after compaction and
//! after a reopen (WAL replay); filtered search against the Flat oracle;
//! schema evolution; typed errors.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::filter::Bound;
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Field, FieldType, Filter, OpenMode, Payload,
    PayloadError, StoreError, Value,
};
use serde_json::json;
use std::collections::HashSet;

const DIMS: usize = 8;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn vector(key: u64) -> Vec<f32> {
    let mut r = Rng(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..DIMS)
        .map(|_| (r.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
        .collect()
}

fn config(kind: IndexKind, segment_vectors: u64) -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = kind;
    c.segment_size = (segment_vectors * c.bytes_per_vector()).max(4096);
    c
}

const LANGS: [&str; 4] = ["en", "de", "fr", "ja"];
const TAGS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Payload of key `k`: lang (string, some null), year (int), score
/// (float), ok (bool), tags, ts (timestamp).
fn row(k: u64) -> Vec<Value> {
    let mut r = Rng(k.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let lang = match r.below(10) {
        0 => Value::Null,
        x => Value::Str(LANGS[(x % 4) as usize].into()),
    };
    let year = if r.below(20) == 0 {
        Value::Null
    } else {
        Value::Int(1995 + r.below(30) as i64)
    };
    let score = Value::Float(r.below(1000) as f64 / 1000.0 - 0.25);
    let ok = Value::Bool(r.below(2) == 0);
    let tags = if r.below(8) == 0 {
        Value::Null
    } else {
        Value::Tags(
            TAGS.iter()
                .filter(|_| r.below(3) == 0)
                .map(|s| s.to_string())
                .collect(),
        )
    };
    let ts = Value::Timestamp(1_600_000_000_000_000 + r.below(1000) as i64 * 86_400_000_000);
    vec![lang, year, score, ok, tags, ts]
}

fn fields() -> Vec<Field> {
    [
        ("lang", FieldType::String),
        ("year", FieldType::Int64),
        ("score", FieldType::Float64),
        ("ok", FieldType::Bool),
        ("tags", FieldType::Tags),
        ("ts", FieldType::Timestamp),
    ]
    .iter()
    .map(|(n, t)| Field {
        name: n.to_string(),
        ty: *t,
    })
    .collect()
}

fn payload(keys: &[u64]) -> Payload {
    let rows: Vec<Vec<Value>> = keys.iter().map(|&k| row(k)).collect();
    Payload {
        fields: fields(),
        columns: (0..6)
            .map(|c| rows.iter().map(|r| r[c].clone()).collect())
            .collect(),
        rows: keys.len(),
    }
}

fn upsert(c: &Collection, keys: &[u64]) {
    let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    c.upsert_with_payload(keys, &refs, Some(&payload(keys)))
        .unwrap();
}

fn filters() -> Vec<serde_json::Value> {
    vec![
        json!({"field": "lang", "op": "eq", "value": "en"}),
        json!({"field": "lang", "op": "!=", "value": "en"}),
        json!({"field": "lang", "op": "in", "value": ["de", "ja", "xx"]}),
        json!({"field": "lang", "op": "not in", "value": ["de"]}),
        json!({"field": "lang", "op": "is_null"}),
        json!({"field": "lang", "op": "is_not_null"}),
        json!({"field": "year", "op": ">=", "value": 2020}),
        json!({"field": "year", "op": "lt", "value": 1996}),
        json!({"field": "year", "op": "eq", "value": 2001}),
        json!({"field": "year", "op": "ne", "value": 2001}),
        json!({"field": "year", "op": "in", "value": [1999, 2005, 3000]}),
        json!({"field": "score", "op": "le", "value": 0}),
        json!({"field": "score", "op": "gt", "value": 0.5}),
        json!({"field": "ok", "op": "eq", "value": true}),
        json!({"field": "tags", "op": "contains", "value": "c"}),
        json!({"field": "tags", "op": "in", "value": ["a", "e"]}),
        json!({"field": "tags", "op": "not_in", "value": ["a"]}),
        json!({"field": "tags", "op": "is_null"}),
        json!({"field": "ts", "op": ">=", "value": "2022-01-01T00:00:00Z"}),
        json!({"and": [{"field": "lang", "op": "eq", "value": "en"},
                       {"field": "year", "op": "ge", "value": 2010}]}),
        json!({"or": [{"field": "lang", "op": "eq", "value": "fr"},
                      {"field": "tags", "op": "contains", "value": "b"}]}),
        json!({"not": {"field": "year", "op": ">=", "value": 2010}}),
        json!([{"field": "ok", "op": "=", "value": false},
               {"field": "score", "op": "<", "value": 0.3},
               {"not": {"field": "lang", "op": "is_null"}}]),
        json!({"and": []}),
        json!({"or": []}),
    ]
}

/// Keys passing `f` by the reference evaluation of `row`.
fn reference(keys: &HashSet<u64>, f: &Bound) -> Vec<u64> {
    let mut v: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|&k| f.matches(&row(k)))
        .collect();
    v.sort_unstable();
    v
}

fn check_all(c: &Collection, live: &HashSet<u64>, stage: &str) {
    for fj in filters() {
        let f = c.bind_filter(&Filter::parse(&fj).unwrap()).unwrap();
        let want = reference(live, &f);
        let mut got = c.keys_where(Some(&f)).unwrap();
        got.sort_unstable();
        assert_eq!(got, want, "{stage}: keys_where {fj}");
        assert_eq!(
            c.count(Some(&f)).unwrap(),
            want.len(),
            "{stage}: count {fj}"
        );
    }
}

#[test]
fn every_operator_matches_the_reference_in_every_segment_state() {
    for kind in [IndexKind::Flat, IndexKind::Hnsw, IndexKind::IvfRq] {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::create(dir.path(), config(kind, 300)).unwrap();
        let mut live: HashSet<u64> = HashSet::new();
        let keys: Vec<u64> = (0..1000).collect();
        for chunk in keys.chunks(200) {
            upsert(&c, chunk);
            live.extend(chunk);
        }
        assert!(c.stats().segments >= 2, "some rows are sealed");
        assert!(c.stats().active_vectors > 0, "some rows are active");
        check_all(&c, &live, "mixed");
        // Replace some sealed keys (their old payload must vanish), delete
        // some by key and some by filter.
        upsert(&c, &(100..150).collect::<Vec<_>>());
        let gone: Vec<u64> = (0..1000).step_by(7).collect();
        c.remove(&gone).unwrap();
        for k in &gone {
            live.remove(k);
        }
        let by_year = c
            .bind_filter(
                &Filter::parse(&json!({"field": "year", "op": "eq", "value": 2003})).unwrap(),
            )
            .unwrap();
        let want_removed = reference(&live, &by_year);
        assert_eq!(c.remove_where(&by_year).unwrap(), want_removed.len());
        for k in &want_removed {
            live.remove(k);
        }
        assert_eq!(c.count(Some(&by_year)).unwrap(), 0);
        check_all(&c, &live, "after deletes");
        drop(c);
        let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
        check_all(&c, &live, "reopened");
        c.seal().unwrap();
        c.compact().unwrap();
        assert_eq!(c.stats().active_vectors, 0);
        check_all(&c, &live, "compacted");
        let ro = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
        check_all(&ro, &live, "read-only");
        // Payload read back equals what was written.
        let got = c.payload_rows(&[1, 2, 7, 5000]).unwrap();
        assert_eq!(got[0].as_deref(), Some(&row(1)[..]));
        assert_eq!(got[1].as_deref(), Some(&row(2)[..]));
        assert!(got[2].is_none() && got[3].is_none());
    }
}

#[test]
fn filtered_search_matches_the_exact_filtered_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw, 2000)).unwrap();
    let keys: Vec<u64> = (0..5000).collect();
    for chunk in keys.chunks(1000) {
        upsert(&c, chunk);
    }
    let live: HashSet<u64> = keys.iter().copied().collect();
    for fj in [
        json!({"field": "year", "op": "eq", "value": 2001}),
        json!({"and": [{"field": "lang", "op": "eq", "value": "ja"},
                       {"field": "year", "op": "eq", "value": 2001}]}),
        json!({"field": "lang", "op": "is_not_null"}),
    ] {
        let f = c.bind_filter(&Filter::parse(&fj).unwrap()).unwrap();
        let allowed = reference(&live, &f);
        for qk in [7u64, 99, 1234] {
            let q = vector(qk + 100_000);
            let k = 10;
            let mut want: Vec<(f32, u64)> = allowed
                .iter()
                .map(|&key| {
                    let v = vector(key);
                    let d: f32 = v.iter().zip(&q).map(|(a, b)| (a - b) * (a - b)).sum();
                    (d, key)
                })
                .collect();
            want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let want: Vec<u64> = want.iter().take(k).map(|x| x.1).collect();
            let opts = CollectionSearch {
                predicate: Some(&f),
                exact: true,
                ..Default::default()
            };
            let got: Vec<u64> = c.search(&[VectorRef::F32(&q)], k, &opts).unwrap()[0]
                .iter()
                .map(|n| n.key)
                .collect();
            assert_eq!(got, want, "exact {fj}");
            let opts = CollectionSearch {
                predicate: Some(&f),
                ..Default::default()
            };
            let got = &c.search(&[VectorRef::F32(&q)], k, &opts).unwrap()[0];
            assert_eq!(got.len(), k.min(allowed.len()), "never short: {fj}");
            assert!(
                got.iter().all(|n| f.matches(&row(n.key))),
                "only matches: {fj}"
            );
            let hit = got.iter().filter(|n| want.contains(&n.key)).count();
            assert!(hit >= 8, "recall {hit}/10 for {fj}");
        }
    }
    // A filter matching fewer than k vectors returns exactly those.
    let f = c
        .bind_filter(
            &Filter::parse(&json!([{"field": "year", "op": "eq", "value": 2001},
                                   {"field": "lang", "op": "eq", "value": "en"},
                                   {"field": "ok", "op": "eq", "value": true},
                                   {"field": "score", "op": "<", "value": 0.0}]))
            .unwrap(),
        )
        .unwrap();
    let n = reference(&live, &f).len();
    assert!(n < 10);
    let opts = CollectionSearch {
        predicate: Some(&f),
        ..Default::default()
    };
    assert_eq!(
        c.search(&[VectorRef::F32(&vector(1))], 10, &opts).unwrap()[0].len(),
        n
    );
}

#[test]
fn schema_grows_and_refuses_type_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw, 100)).unwrap();
    let keys: Vec<u64> = (0..150).collect();
    upsert(&c, &keys);
    let extra = Payload {
        fields: vec![Field {
            name: "color".into(),
            ty: FieldType::String,
        }],
        columns: vec![vec![Value::Str("red".into()); 10]],
        rows: 10,
    };
    let new_keys: Vec<u64> = (1000..1010).collect();
    let vs: Vec<Vec<f32>> = new_keys.iter().map(|&k| vector(k)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    c.upsert_with_payload(&new_keys, &refs, Some(&extra))
        .unwrap();
    assert_eq!(c.schema().len(), 7);
    let red = c
        .bind_filter(
            &Filter::parse(&json!({"field": "color", "op": "eq", "value": "red"})).unwrap(),
        )
        .unwrap();
    let null = c
        .bind_filter(&Filter::parse(&json!({"field": "color", "op": "is_null"})).unwrap())
        .unwrap();
    assert_eq!(c.count(Some(&red)).unwrap(), 10);
    assert_eq!(c.count(Some(&null)).unwrap(), 150);
    // A type conflict names the field and writes nothing.
    let bad = Payload {
        fields: vec![Field {
            name: "year".into(),
            ty: FieldType::String,
        }],
        columns: vec![vec![Value::Str("x".into()); 10]],
        rows: 10,
    };
    let more: Vec<u64> = (2000..2010).collect();
    let err = c.upsert_with_payload(&more, &refs, Some(&bad)).unwrap_err();
    assert!(
        matches!(&err, StoreError::Payload(PayloadError::TypeConflict { field, .. }) if field == "year"),
        "{err}"
    );
    assert!(!c.contains(2000));
    // Schema survives a reopen before any seal wrote it to the manifest.
    drop(c);
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    assert_eq!(c.schema().len(), 7);
    let red = c
        .bind_filter(
            &Filter::parse(&json!({"field": "color", "op": "eq", "value": "red"})).unwrap(),
        )
        .unwrap();
    assert_eq!(c.count(Some(&red)).unwrap(), 10);
}

#[test]
fn bad_filters_are_typed_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw, 100)).unwrap();
    upsert(&c, &[1, 2, 3]);
    let bind = |j: serde_json::Value| Filter::parse(&j).and_then(|f| f.bind(&c.schema()));
    let field_of = |e: PayloadError| match e {
        PayloadError::UnknownField { field, .. }
        | PayloadError::Value { field, .. }
        | PayloadError::Operator { field, .. } => field,
        other => panic!("unexpected {other:?}"),
    };
    for (j, field) in [
        (json!({"field": "nope", "op": "eq", "value": 1}), "nope"),
        (json!({"field": "year", "op": "eq", "value": "x"}), "year"),
        (json!({"field": "year", "op": "eq", "value": 2.5}), "year"),
        (json!({"field": "year", "op": "like", "value": 1}), "year"),
        (json!({"field": "lang", "op": "lt", "value": "x"}), "lang"),
        (
            json!({"field": "lang", "op": "contains", "value": "x"}),
            "lang",
        ),
        (json!({"field": "tags", "op": "eq", "value": "x"}), "tags"),
        (json!({"field": "lang", "op": "in", "value": "en"}), "lang"),
        (json!({"field": "lang", "op": "eq"}), "lang"),
        (
            json!({"field": "ts", "op": "ge", "value": "yesterday"}),
            "ts",
        ),
        (json!({"field": "ok", "op": "eq", "value": 1}), "ok"),
    ] {
        let e = bind(j.clone()).unwrap_err();
        assert_eq!(field_of(e), field, "{j}");
    }
    for j in [
        json!(5),
        json!({"and": 3}),
        json!({"foo": 1}),
        json!({"not": [], "and": []}),
    ] {
        assert!(
            matches!(bind(j.clone()), Err(PayloadError::Filter(_))),
            "{j}"
        );
    }
    assert!(matches!(
        Filter::from_json("{\"field\": "),
        Err(PayloadError::Filter(_))
    ));
    // Deep nesting is refused, not a stack overflow.
    let mut deep = json!({"field": "year", "op": "eq", "value": 1});
    for _ in 0..1000 {
        deep = json!({ "not": deep });
    }
    assert!(matches!(Filter::parse(&deep), Err(PayloadError::Filter(_))));
    // NaN payload values and wrong row counts are refused whole.
    let mut p = payload(&[10, 11]);
    p.columns[2][1] = Value::Float(f64::NAN);
    let vs = [vector(10), vector(11)];
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    assert!(c.upsert_with_payload(&[10, 11], &refs, Some(&p)).is_err());
    assert!(c
        .upsert_with_payload(&[10, 11], &refs, Some(&payload(&[10])))
        .is_err());
    assert!(!c.contains(10) && !c.contains(11));
}

#[test]
fn arrow_ipc_payload_round_trips_through_a_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Hnsw, 1000)).unwrap();
    let keys: Vec<u64> = (0..64).collect();
    upsert(&c, &keys);
    c.seal().unwrap();
    let batch = c.payload_table(&keys, None).unwrap();
    let ipc = sagitta_store::payload::ipc_bytes(&batch).unwrap();
    let back = Payload::from_ipc(&ipc).unwrap();
    assert_eq!(back, payload(&keys));
    let some = c
        .payload_table(&[3, 999], Some(&["year".to_string(), "tags".to_string()]))
        .unwrap();
    assert_eq!(some.num_columns(), 2);
    assert_eq!(some.num_rows(), 2);
    assert!(c.payload_table(&[3], Some(&["zzz".to_string()])).is_err());
    assert!(Payload::from_ipc(b"not arrow").is_err());
    assert!(Payload::from_ipc(&ipc[..ipc.len() / 2]).is_err());
}

/// Found by the `arrow_batches` fuzz target: an IPC stream whose batch
/// names a buffer past its message body made Arrow's reader panic; an
/// upload is now checked first and refused with a typed error, and so is
/// the same corruption planted in a valid stream.
#[test]
fn ipc_buffers_past_their_body_are_refused_not_read() {
    let fuzzed = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/fuzz/ipc-buffer-past-body.arrows"),
    )
    .unwrap();
    assert!(sagitta_store::ipc::check_stream(&fuzzed, true).is_err());
    assert!(matches!(
        Payload::from_ipc(&fuzzed),
        Err(PayloadError::Malformed(_))
    ));
    // A valid stream passes the check; every length field of it bumped
    // past the body (one at a time) is refused or read, never a panic.
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(IndexKind::Flat, 100)).unwrap();
    let keys: Vec<u64> = (0..8).collect();
    upsert(&c, &keys);
    let ipc = sagitta_store::payload::ipc_bytes(&c.payload_table(&keys, None).unwrap()).unwrap();
    assert!(sagitta_store::ipc::check_stream(&ipc, true).is_ok());
    for at in (0..ipc.len().saturating_sub(8)).step_by(4) {
        let mut bad = ipc.clone();
        bad[at..at + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
        let _ = Payload::from_ipc(&bad);
    }
}

/// Reads while writes go on: a filtered search over the mutable part
/// never fails because the part grew between building the filter and
/// searching (it answered "filter covers N slots, the index has M"), and
/// a row found is never seen without its payload (the vector used to
/// become visible before its row was written).
#[test]
fn reads_during_writes_see_whole_rows() {
    let dir = tempfile::tempdir().unwrap();
    let c = std::sync::Arc::new(
        Collection::create(dir.path(), config(IndexKind::Hnsw, 1 << 20)).unwrap(),
    );
    upsert(&c, &(0..200).collect::<Vec<_>>());
    let f = c
        .bind_filter(&Filter::parse(&json!({"field": "year", "op": ">=", "value": 2000})).unwrap())
        .unwrap();
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || {
            for b in 0..600u64 {
                // New keys and new versions of old ones (a new slot each).
                let keys: Vec<u64> = (0..32)
                    .map(|i| (b * 32 + i) % 15_000 + 200 * (b % 2))
                    .collect();
                upsert(&c, &keys);
            }
        })
    };
    let (mut searches, mut rows_checked) = (0u64, 0u64);
    while !writer.is_finished() {
        let q = vector(searches + 1_000_000);
        let opts = CollectionSearch {
            predicate: Some(&f),
            ..Default::default()
        };
        let hits = c.search(&[VectorRef::F32(&q)], 10, &opts).unwrap();
        searches += 1;
        let keys: Vec<u64> = hits[0].iter().map(|n| n.key).collect();
        for (k, r) in keys.iter().zip(c.payload_rows(&keys).unwrap()) {
            let r = r.unwrap_or_else(|| panic!("key {k} found, then missing"));
            let want = row(*k);
            assert_eq!(r.len(), want.len(), "key {k}: {r:?}");
            rows_checked += 1;
        }
    }
    writer.join().unwrap();
    assert!(searches > 0 && rows_checked > 0);
}
