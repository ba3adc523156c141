//! Filter JSON: parsed, bound to a collection's payload schema (every
//! column type), then counted and searched with, on sealed and mutable
//! rows.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Field, FieldType, Filter, Payload, Value,
};
use std::sync::OnceLock;

fn collection() -> &'static Collection {
    static C: OnceLock<Collection> = OnceLock::new();
    C.get_or_init(|| {
        let dir = common::scratch().join("filter");
        let _ = std::fs::remove_dir_all(&dir);
        let space = Space::new(4, Metric::L2, DType::F32).expect("space");
        let c = Collection::create(&dir, CollectionConfig::new(space)).expect("create");
        let ty = [
            ("i", FieldType::Int64),
            ("f", FieldType::Float64),
            ("b", FieldType::Bool),
            ("s", FieldType::String),
            ("t", FieldType::Timestamp),
            ("g", FieldType::Tags),
        ];
        for part in 0..2u64 {
            let keys: Vec<u64> = (part * 50..part * 50 + 50).collect();
            let vs: Vec<[f32; 4]> = keys.iter().map(|&k| [k as f32, 1.0, 0.0, -1.0]).collect();
            let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
            let columns = vec![
                keys.iter().map(|&k| Value::Int(k as i64 - 20)).collect(),
                keys.iter().map(|&k| Value::Float(k as f64 / 3.0)).collect(),
                keys.iter().map(|&k| Value::Bool(k % 2 == 0)).collect(),
                keys.iter()
                    .map(|&k| {
                        if k % 7 == 0 {
                            Value::Null
                        } else {
                            Value::Str(format!("s{}", k % 5))
                        }
                    })
                    .collect(),
                keys.iter()
                    .map(|&k| Value::Timestamp(k as i64 * 1_000_000))
                    .collect(),
                keys.iter()
                    .map(|&k| Value::Tags(vec![format!("t{}", k % 3), "all".into()]))
                    .collect(),
            ];
            let payload = Payload {
                fields: ty
                    .iter()
                    .map(|(n, t)| Field {
                        name: (*n).into(),
                        ty: *t,
                    })
                    .collect(),
                columns,
                rows: keys.len(),
            };
            c.upsert_with_payload(&keys, &refs, Some(&payload))
                .expect("upsert");
            if part == 0 {
                c.seal().expect("seal");
            }
        }
        c
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(f) = Filter::parse(&json) else {
        return;
    };
    let c = collection();
    let Ok(b) = c.bind_filter(&f) else {
        return;
    };
    let _ = c.count(Some(&b));
    let q = [3.0f32, 1.0, 0.0, -1.0];
    for exact in [false, true] {
        let opts = CollectionSearch {
            predicate: Some(&b),
            exact,
            ..Default::default()
        };
        let _ = c.search(&[VectorRef::F32(&q)], 5, &opts);
    }
});
