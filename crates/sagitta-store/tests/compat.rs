//! A collection directory written by the release before the background
//! optimizer (`tests/data/collection-v1/`: manifest without the optimizer
//! keys, two HNSW segments, a tombstone file, a bloom file, payload
//! columns, and a WAL tail never folded into segments, as a crash leaves
//! it) opens read-only and read-write with this build, replays, gets
//! optimized, and keeps every row.

#![allow(clippy::unwrap_used)]

use sagitta_index::VectorRef;
use sagitta_store::{Collection, CollectionSearch, Filter, OpenMode, Value};
use std::path::Path;

fn v(k: u64) -> [f32; 8] {
    [
        k as f32,
        (k % 7) as f32,
        (k % 3) as f32,
        1.0,
        (k / 10) as f32,
        0.5,
        -(k as f32) / 4.0,
        2.0,
    ]
}

fn bytes(x: &[f32; 8]) -> Vec<u8> {
    x.iter().flat_map(|f| f.to_ne_bytes()).collect()
}

fn copy_fixture(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/collection-v1");
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn check(c: &Collection) {
    let removed = [15u64, 16, 95, 96, 97];
    assert_eq!(c.len(), 95);
    for k in 0..100u64 {
        let got = c.get_raw(k);
        if removed.contains(&k) {
            assert!(got.is_none(), "key {k}");
            continue;
        }
        let ver = if k < 10 { 1000 } else { 0 };
        assert_eq!(got.unwrap(), bytes(&v(k + ver)), "key {k}");
    }
    let rows = c.payload_rows(&[3, 40, 95]).unwrap();
    assert_eq!(rows[2], None);
    let r3 = rows[0].as_ref().unwrap();
    let r40 = rows[1].as_ref().unwrap();
    assert_eq!(r3[0], Value::Str("odd".into()));
    assert_eq!(r3[1], Value::Int(1003));
    assert_eq!(r40[1], Value::Int(40));
    let even = c
        .bind_filter(
            &Filter::parse(&serde_json::json!({"field": "tag", "op": "eq", "value": "even"}))
                .unwrap(),
        )
        .unwrap();
    assert_eq!(c.count(Some(&even)).unwrap(), 48); // 50 even keys, 16 and 96 deleted
    let q = v(50);
    for exact in [true, false] {
        let opts = CollectionSearch {
            exact,
            ..Default::default()
        };
        let r = &c.search(&[VectorRef::F32(&q)], 3, &opts).unwrap()[0];
        assert_eq!(r[0].key, 50);
        assert_eq!(r[0].distance, 0.0);
    }
}

#[test]
fn collection_written_before_the_optimizer_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(dir.path());
    // A reader first: replays the WAL tail in memory, changes nothing.
    let listing = |p: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = listing(dir.path());
    check(&Collection::open(dir.path(), OpenMode::ReadOnly).unwrap());
    assert_eq!(listing(dir.path()), before);
    // The writer: replays, then the optimizer builds and merges it.
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    check(&c);
    c.optimize().unwrap();
    let s = c.stats();
    assert_eq!((s.unindexed_vectors, s.tombstones), (0, 0), "{s:?}");
    check(&c);
    c.close().unwrap();
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(c.stats().unindexed_vectors, 0);
    check(&c);
}
