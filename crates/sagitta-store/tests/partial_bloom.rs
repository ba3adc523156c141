//! A commit keeps the last bloom file while the segments it lacks hold at
//! most an eighth of the rows, naming them in the manifest
//! (`bloom_partial`); an open adds their keys, so no key is ever reported
//! absent. Bloom files are small here, so the size under which a filter
//! is written at every commit is set to 0 (this file is its own process).

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::collection::set_small_bloom_bytes;
use sagitta_store::{Collection, CollectionConfig, Durability, OpenMode};
use serde_json::Value;
use std::path::Path;

const DIMS: usize = 4;

fn config() -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = IndexKind::Flat;
    // Parts freeze only when sealed, and segments are never merged: each
    // seal below adds one segment.
    c.segment_size = 1 << 30;
    c.max_segment_size = c.segment_size;
    c.idle_seal_ms = 0;
    c.durability = Durability::Off;
    c
}

fn write(c: &Collection, keys: std::ops::Range<u64>) {
    let keys: Vec<u64> = keys.collect();
    let rows: Vec<[f32; DIMS]> = keys.iter().map(|&k| [k as f32, 1.0, 2.0, 3.0]).collect();
    let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
    c.upsert(&keys, &refs).unwrap();
    c.seal().unwrap();
}

/// The MANIFEST's JSON (its last line is the CRC).
fn manifest(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    let json = text.rsplit_once("crc32c:").unwrap().0;
    serde_json::from_str(json).unwrap()
}

fn segment_ids(m: &Value) -> Vec<u64> {
    m["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_u64().unwrap())
        .collect()
}

/// Every key of `keys` is found by a reader opened now, and keys never
/// written are not (the filter still answers).
fn reader_finds(dir: &Path, keys: std::ops::Range<u64>) {
    let r = Collection::open(dir, OpenMode::ReadOnly).unwrap();
    let missing: Vec<u64> = keys.clone().filter(|&k| !r.contains(k)).collect();
    assert!(missing.is_empty(), "keys reported absent: {missing:?}");
    let got = r.get_raw_many(&[keys.start, keys.end - 1]);
    assert!(got.iter().all(Option::is_some));
    let absent = (1_000_000..1_010_000u64).filter(|&k| r.contains(k)).count();
    assert_eq!(absent, 0);
}

#[test]
fn a_commit_keeps_the_last_bloom_file_while_it_lacks_few_keys() {
    set_small_bloom_bytes(0);
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config()).unwrap();
    write(&c, 0..8000);
    let m = manifest(dir.path());
    let first = m["bloom"].as_str().unwrap().to_string();
    assert!(m.get("bloom_partial").is_none(), "{m}");

    // 500 rows: under an eighth, the file stays and the segment is listed.
    write(&c, 8000..8500);
    let m = manifest(dir.path());
    assert!(m["bloom"].is_null(), "{m}");
    let partial = &m["bloom_partial"];
    assert_eq!(partial["file"], first.as_str());
    let missing: Vec<u64> = partial["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let ids = segment_ids(&m);
    assert_eq!(missing, vec![*ids.last().unwrap()]);
    assert!(dir.path().join(&first).exists());
    reader_finds(dir.path(), 0..8500);

    // 300 more: still under an eighth, both segments listed (or the one
    // the optimizer merged them into, if it already has: it may).
    write(&c, 8500..8800);
    let m = manifest(dir.path());
    let missing: Vec<u64> = m["bloom_partial"]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let lacking: Vec<u64> = m["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["vectors"] != 8000)
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    assert!(!missing.is_empty());
    assert_eq!(missing, lacking, "{m}");
    reader_finds(dir.path(), 0..8800);

    // 2000 more: past an eighth, a new file of every key.
    write(&c, 8800..10_800);
    let m = manifest(dir.path());
    let second = m["bloom"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert!(m.get("bloom_partial").is_none(), "{m}");
    assert!(
        !dir.path().join(&first).exists(),
        "the replaced file is removed"
    );
    reader_finds(dir.path(), 0..10_800);

    // A partial state at close is completed: a reopen adds no keys.
    write(&c, 10_800..11_000);
    assert!(manifest(dir.path())["bloom"].is_null());
    c.close().unwrap();
    let m = manifest(dir.path());
    assert!(m["bloom"].is_string(), "{m}");
    assert!(m.get("bloom_partial").is_none(), "{m}");
    reader_finds(dir.path(), 0..11_000);

    // A writer reopening a partial state (the files as a crash leaves
    // them: copied while the writer is open) finds every key, and keeps
    // the listed ones when it writes the next full file.
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    write(&c, 11_000..11_100);
    assert!(manifest(dir.path())["bloom"].is_null());
    let crashed = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
        }
    }
    drop(c);
    let c = Collection::open(crashed.path(), OpenMode::ReadWrite).unwrap();
    assert!((0..11_100).all(|k| c.contains(k)));
    write(&c, 11_100..14_000);
    assert!(manifest(crashed.path())["bloom"].is_string());
    drop(c);
    reader_finds(crashed.path(), 0..14_000);
}
