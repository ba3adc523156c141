//! Frozen files of every format version of every collection file kind,
//! read back by this build (`tests/data/formats/`; the segment versions
//! have their own fixtures in `tests/data/segment-v*.sgt`):
//!
//! - `wal-v1/`: a collection directory whose write-ahead log is version 1
//!   (puts and removes only), its bytes laid out by hand from
//!   docs/FORMAT.md, not by the writer: replayed, appended to (the log is
//!   relabelled to the newest version, 3, in place) and reopened.
//! - `ids128/`: a collection written by this release: MANIFEST format 1
//!   with the newest optional keys (uint128 ids, payload, a text field,
//!   index threshold), a version-4 segment with payload and text, a
//!   tombstone file with entries, a bloom filter, and a version-2 log
//!   tail (puts with payload and removes) never folded into segments.
//! - `bloom-v1.bin`, `bloom-v2.bin`: bloom filters of known keys.
//!
//! Also: the documented header layouts asserted on the frozen bytes, field
//! by field; and a collection whose tombstone file says a future version
//! (checksum recomputed) refused at open with `UnsupportedVersion`, its
//! files unchanged. Rewrite the fixtures (only when a format changes on purpose,
//! keeping the old ones) with
//! `SAGITTA_REGEN_FIXTURES=1 cargo test -p sagitta-store --test formats --
//! --test-threads=1` (one test rewrites a fixture another reads).

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::bloom::Bloom;
use sagitta_store::{
    wal, AnalyzerKind, Collection, CollectionConfig, CollectionSearch, Field, FieldType, Fusion,
    Id, IdColumn, IdWrite, OpenMode, Payload, Query, StoreError, TextFieldSpec, Value,
};
use std::path::{Path, PathBuf};

const DIMS: usize = 4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/formats")
}

fn regen() -> bool {
    std::env::var_os("SAGITTA_REGEN_FIXTURES").is_some()
}

fn vector(i: u64) -> [f32; DIMS] {
    [i as f32, (i % 5) as f32, 1.0, -(i as f32) / 3.0]
}

fn vector_bytes(i: u64) -> Vec<u8> {
    vector(i).iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn config() -> CollectionConfig {
    let mut c = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32).unwrap());
    c.idle_seal_ms = 0;
    c
}

/// Copies a fixture directory into `to` (tests never touch the fixtures).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

// -- write-ahead log, version 1 ----------------------------------------------

/// Keys put in the version-1 log (in this order), then removed.
const V1_PUTS: std::ops::RangeInclusive<u64> = 1..=20;
const V1_REMOVED: [u64; 2] = [5, 17];

/// A version-1 log as docs/FORMAT.md lays it out: header `SGTAWAL\0`,
/// version 1, zero; records `len u32 | crc u32 | seq u64 | op u8 | key u64
/// | body` with the CRC32C of everything after the crc.
fn wal_v1_bytes(first_seq: u64) -> Vec<u8> {
    let mut b = b"SGTAWAL\0".to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    let mut seq = first_seq;
    let mut record = |b: &mut Vec<u8>, op: u8, key: u64, body: &[u8]| {
        let mut p = seq.to_le_bytes().to_vec();
        p.push(op);
        p.extend_from_slice(&key.to_le_bytes());
        p.extend_from_slice(body);
        b.extend_from_slice(&(p.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&p).to_le_bytes());
        b.extend_from_slice(&p);
        seq += 1;
    };
    for k in V1_PUTS {
        record(&mut b, 1, k, &vector_bytes(k));
    }
    for k in V1_REMOVED {
        record(&mut b, 2, k, &[]);
    }
    b
}

fn wal_file(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| wal::parse_name(&p.file_name().unwrap().to_string_lossy()).is_some())
        .collect();
    logs.sort();
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs.pop().unwrap()
}

fn write_wal_v1_fixture(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    // The MANIFEST of an empty collection, then its log replaced by the
    // hand-made version-1 one.
    Collection::create(dir, config()).unwrap().close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::write(dir.join(wal::file_name(1)), wal_v1_bytes(1)).unwrap();
}

fn check_wal_v1_rows(c: &Collection, extra: &[u64]) {
    let live: Vec<u64> = V1_PUTS.filter(|k| !V1_REMOVED.contains(k)).collect();
    assert_eq!(c.len(), live.len() + extra.len());
    for k in V1_PUTS.chain(extra.iter().copied()) {
        let got = c.get_raw(k);
        if V1_REMOVED.contains(&k) {
            assert!(got.is_none(), "key {k}");
        } else {
            assert_eq!(got.unwrap(), vector_bytes(k), "key {k}");
        }
    }
}

#[test]
fn wal_version_1_replays_and_is_appended_to() {
    let fixture = fixtures().join("wal-v1");
    if regen() {
        write_wal_v1_fixture(&fixture);
    }
    // The frozen bytes are exactly the documented layout.
    let log = wal_file(&fixture);
    assert_eq!(std::fs::read(&log).unwrap(), wal_v1_bytes(1));
    let replay = wal::read(&log).unwrap();
    assert!(!replay.torn);
    let recs: Vec<_> = replay.records().collect();
    assert_eq!(recs.len(), V1_PUTS.count() + V1_REMOVED.len());
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
    }
    assert_eq!(recs[3].op, wal::Op::Put);
    assert_eq!((recs[3].key, recs[3].vector), (4, &vector_bytes(4)[..]));
    assert_eq!(recs[20].op, wal::Op::Remove);
    assert_eq!(recs[20].key, V1_REMOVED[0]);

    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    check_wal_v1_rows(
        &Collection::open(dir.path(), OpenMode::ReadOnly).unwrap(),
        &[],
    );
    // A writer appends to it: the log becomes version 2 in place, and
    // records with payload follow the version-1 ones.
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    check_wal_v1_rows(&c, &[]);
    let payload = Payload {
        fields: vec![Field {
            name: "n".into(),
            ty: FieldType::Int64,
        }],
        columns: vec![vec![Value::Int(99)]],
        rows: 1,
    };
    let v = vector(99);
    c.upsert_with_payload(&[99], &[VectorRef::F32(&v)], Some(&payload))
        .unwrap();
    drop(c); // no close: the rows stay in the log only
    let log = wal_file(dir.path());
    // Relabelled to the newest log version (3: vectors as given).
    assert_eq!(u32_at(&std::fs::read(&log).unwrap(), 8), 3);
    let c = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check_wal_v1_rows(&c, &[99]);
    assert_eq!(
        c.payload_rows(&[99]).unwrap()[0].as_ref().unwrap()[0],
        Value::Int(99)
    );
}

// -- a collection of this release: uint128 ids, payload, text ------------------

fn text_of(i: u64) -> String {
    let words = [
        "graph",
        "vector",
        "segment",
        "bloom",
        "payload",
        "tombstone",
    ];
    format!(
        "{} {} row{i}",
        words[(i % 6) as usize],
        words[(i / 6 % 6) as usize]
    )
}

fn id128(i: u64) -> u128 {
    (u128::from(i ^ 0xA5C3) << 64) | u128::from(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn write_ids128(c: &Collection, rows: std::ops::Range<u64>) {
    let vs: Vec<[f32; DIMS]> = rows.clone().map(vector).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let payload = Payload {
        fields: vec![
            Field {
                name: "body".into(),
                ty: FieldType::String,
            },
            Field {
                name: "rank".into(),
                ty: FieldType::Int64,
            },
        ],
        columns: vec![
            rows.clone().map(|i| Value::Str(text_of(i))).collect(),
            rows.clone().map(|i| Value::Int(i as i64 * 10)).collect(),
        ],
        rows: rows.clone().count(),
    };
    let ids = IdColumn::U128(rows.map(id128).collect());
    c.write_ids(&ids, &refs, Some(&payload), IdWrite::Upsert)
        .unwrap();
}

/// Rows 0..60 sealed, then 10..14 removed and 60..70 added and sealed
/// (tombstones with entries), then 70..80 added and 20, 21 and 75 removed
/// in the log only; the optimizer (at `optimize()`) compacts the dead
/// rows away.
const IDS128_REMOVED: [u64; 7] = [10, 11, 12, 13, 20, 21, 75];

fn ids128_config() -> CollectionConfig {
    let mut c = config().with_key_bits(128);
    c.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    // Small enough that the background optimizer neither builds graphs
    // nor merges (the tombstones stay, and the bloom filter is small),
    // set explicitly so that the MANIFEST carries the keys.
    c.index_threshold = Some(100_000);
    c.segment_size = 64 * c.bytes_per_vector();
    c.max_segment_size = c.segment_size;
    c
}

fn remove_ids(c: &Collection, rows: &[u64]) {
    let ids: Vec<Id> = rows.iter().map(|&i| Id::U128(id128(i))).collect();
    let keys: Vec<u64> = c.live_keys(&ids).unwrap().into_iter().flatten().collect();
    assert_eq!(keys.len(), rows.len());
    c.remove(&keys).unwrap();
}

fn write_ids128_fixture(fixture: &Path) {
    let _ = std::fs::remove_dir_all(fixture);
    let work = tempfile::tempdir().unwrap();
    let c = Collection::create(&work.path().join("c"), ids128_config()).unwrap();
    write_ids128(&c, 0..60);
    c.seal().unwrap();
    remove_ids(&c, &[10, 11, 12, 13]);
    write_ids128(&c, 60..70);
    c.seal().unwrap();
    write_ids128(&c, 70..80);
    remove_ids(&c, &[20, 21, 75]);
    c.flush().unwrap();
    // Copied while open: the last rows live in the log only.
    copy_dir(&work.path().join("c"), fixture);
    drop(c);
}

fn check_ids128(c: &Collection) {
    let live: Vec<u64> = (0..80).filter(|i| !IDS128_REMOVED.contains(i)).collect();
    assert_eq!(c.len(), live.len());
    let ids: Vec<Id> = (0..80).map(|i| Id::U128(id128(i))).collect();
    let keys = c.live_keys(&ids).unwrap();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            k.is_some(),
            !IDS128_REMOVED.contains(&(i as u64)),
            "row {i}"
        );
    }
    let keys: Vec<u64> = keys.into_iter().flatten().collect();
    let back = c.ids_of(&keys).unwrap();
    let rows = c.payload_rows(&keys).unwrap();
    for ((i, id), row) in live.iter().zip(back).zip(rows) {
        assert_eq!(id, Some(Id::U128(id128(*i))));
        let row = row.unwrap();
        assert!(row.contains(&Value::Str(text_of(*i))), "row {i}: {row:?}");
        assert!(
            row.contains(&Value::Int(*i as i64 * 10)),
            "row {i}: {row:?}"
        );
    }
    for (i, &k) in live.iter().zip(&keys) {
        assert_eq!(c.get_raw(k).unwrap(), vector_bytes(*i), "row {i}");
    }
    // The text index of the segments and the replayed tail.
    let hits = c
        .search_text(&Query {
            text: Some("row77"),
            vectors: None.into_iter().collect(),
            k: 3,
            fusion: Some(Fusion::Alpha { alpha: 0.0 }),
            depth: None,
            opts: CollectionSearch::default(),
        })
        .unwrap();
    assert_eq!(
        hits.first().map(|h| h.key),
        Some(keys[live.iter().position(|&i| i == 77).unwrap()])
    );
    let q = vector(33);
    let r = &c
        .search(&[VectorRef::F32(&q)], 1, &CollectionSearch::default())
        .unwrap()[0];
    assert_eq!(c.ids_of(&[r[0].key]).unwrap()[0], Some(Id::U128(id128(33))));
}

#[test]
fn collection_of_this_release_reads_back() {
    let fixture = fixtures().join("ids128");
    if regen() {
        write_ids128_fixture(&fixture);
    }
    let names: Vec<String> = std::fs::read_dir(&fixture)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for kind in ["MANIFEST", "seg-", "tomb-", "bloom-", "wal-"] {
        assert!(
            names.iter().any(|n| n.starts_with(kind)),
            "{kind} in {names:?}"
        );
    }
    let manifest = std::fs::read_to_string(fixture.join("MANIFEST")).unwrap();
    for key in [
        "\"id_type\": \"uint128\"",
        "\"text\"",
        "\"index_threshold\"",
        "\"payload\"",
    ] {
        assert!(manifest.contains(key), "{key} in {manifest}");
    }
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    check_ids128(&Collection::open(dir.path(), OpenMode::ReadOnly).unwrap());
    let c = Collection::open(dir.path(), OpenMode::ReadWrite).unwrap();
    check_ids128(&c);
    c.optimize().unwrap();
    check_ids128(&c);
    c.close().unwrap();
    check_ids128(&Collection::open(dir.path(), OpenMode::ReadOnly).unwrap());
}

/// The documented header layouts, read at their documented offsets from
/// the frozen files (not from constants of the code that wrote them).
#[test]
fn frozen_headers_match_the_documented_layout() {
    let dir = fixtures().join("ids128");
    let file = |prefix: &str| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        v.sort();
        std::fs::read(v.pop().unwrap()).unwrap()
    };
    // Segment: 128-byte header, CRC of bytes 0..124 at 124, the section
    // table at 128 (32 bytes per entry), sections 64-byte aligned.
    let seg = file("seg-");
    assert_eq!(&seg[..8], b"SGTASEG\0");
    assert!((1..=4).contains(&u32_at(&seg, 8)));
    assert_eq!(u32_at(&seg, 16), DIMS as u32);
    assert_eq!((seg[20], seg[21]), (0, 0)); // f32, l2
    let (slots, live) = (u64_at(&seg, 24), u64_at(&seg, 32));
    assert!(live <= slots && slots > 0);
    assert_eq!(u32_at(&seg, 40), 16); // 16 vector bytes, rounded up to 16
    assert_eq!(crc32c::crc32c(&seg[..124]), u32_at(&seg, 124));
    let nsec = u32_at(&seg, 44) as usize;
    assert_eq!(
        crc32c::crc32c(&seg[128..128 + 32 * nsec]),
        u32_at(&seg, 120)
    );
    for i in 0..nsec {
        let e = 128 + 32 * i;
        let (off, len) = (u64_at(&seg, e + 8) as usize, u64_at(&seg, e + 16) as usize);
        assert_eq!(off % 64, 0);
        assert!(off >= 128 + 32 * nsec && off + len <= seg.len());
        assert_eq!(crc32c::crc32c(&seg[off..off + len]), u32_at(&seg, e + 24));
    }
    // Tombstones: magic, version, zero, count, {segment id, key} sorted,
    // CRC of everything before.
    let tomb = file("tomb-");
    assert_eq!(&tomb[..8], b"SGTATMB\0");
    assert_eq!((u32_at(&tomb, 8), u32_at(&tomb, 12)), (1, 0));
    let n = u64_at(&tomb, 16) as usize;
    assert_eq!(tomb.len(), 24 + 16 * n + 4);
    assert!(n >= 4, "entries {n}");
    let entries: Vec<(u64, u64)> = (0..n)
        .map(|i| (u64_at(&tomb, 24 + 16 * i), u64_at(&tomb, 32 + 16 * i)))
        .collect();
    assert!(entries.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        crc32c::crc32c(&tomb[..tomb.len() - 4]),
        u32_at(&tomb, tomb.len() - 4)
    );
    // Bloom: magic, version, filters, rate, initial capacity, 32 bytes per
    // filter, the words, CRC.
    let bloom = file("bloom-");
    let (filters, words) = bloom_head(&bloom, 1);
    assert_eq!(bloom.len(), 32 + 32 * filters + words * 8 + 4);
    assert_eq!(
        crc32c::crc32c(&bloom[..bloom.len() - 4]),
        u32_at(&bloom, bloom.len() - 4)
    );
    // WAL: 16-byte header, then records whose CRC covers the payload.
    let log = file("wal-");
    assert_eq!(&log[..8], b"SGTAWAL\0");
    assert_eq!((u32_at(&log, 8), u32_at(&log, 12)), (2, 0));
    let mut at = 16;
    let mut ops = Vec::new();
    while at < log.len() {
        let len = u32_at(&log, at) as usize;
        let payload = &log[at + 8..at + 8 + len];
        assert_eq!(crc32c::crc32c(payload), u32_at(&log, at + 4));
        ops.push(payload[8]);
        at += 8 + len;
    }
    assert_eq!(at, log.len());
    assert!(ops.contains(&3) && ops.contains(&2), "{ops:?}");
}

// -- bloom filter, versions 1 and 2 ----------------------------------------------

fn bloom_keys() -> impl Iterator<Item = u64> {
    (0..3000u64).map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

/// Version 1 (one whole-file CRC, checked by a background thread when
/// mapped) is no longer written: its sample is frozen for good.
#[test]
fn bloom_version_1_reads_back() {
    bloom_reads_back("bloom-v1.bin", 1);
}

#[test]
fn bloom_version_2_reads_back() {
    let path = fixtures().join("bloom-v2.bin");
    if regen() {
        let mut b = Bloom::new(1000, 0.01);
        for k in bloom_keys() {
            b.insert(k);
        }
        std::fs::write(&path, b.to_bytes()).unwrap();
    }
    bloom_reads_back("bloom-v2.bin", 2);
    // Bloom (version 2): magic, version, filters, rate, initial capacity,
    // 32 bytes per filter, the chunk count and a CRC per 4 KiB of words,
    // padded to 8 bytes, the CRC of all that and a zero u32, zeros to the
    // next 4 KiB, the words, CRC.
    let bloom = std::fs::read(&path).unwrap();
    let (filters, words) = bloom_head(&bloom, 2);
    let table = 32 + 32 * filters;
    let chunks = words.div_ceil(512);
    assert_eq!(u64_at(&bloom, table), chunks as u64);
    let end = table + 8 + (4 * chunks).next_multiple_of(8);
    assert_eq!(crc32c::crc32c(&bloom[..end]), u32_at(&bloom, end));
    let words_at = (end + 8).next_multiple_of(4096);
    assert_eq!(bloom.len(), words_at + words * 8 + 4);
    for c in 0..chunks {
        let from = words_at + 4096 * c;
        let to = (from + 4096).min(words_at + words * 8);
        assert_eq!(
            crc32c::crc32c(&bloom[from..to]),
            u32_at(&bloom, table + 8 + 4 * c)
        );
    }
    assert_eq!(
        crc32c::crc32c(&bloom[..bloom.len() - 4]),
        u32_at(&bloom, bloom.len() - 4)
    );
    // Mapped, a version-2 filter answers before any whole-file check.
    let b = Bloom::open(&path).unwrap();
    assert!(b.trusted());
    assert!(bloom_keys().all(|k| b.may_contain(k)));
}

/// A bloom file's magic and version checked; its filter count and the
/// number of words of all its filters (the table of 32-byte entries at 32,
/// each starting with its block count of 8 words).
fn bloom_head(bloom: &[u8], version: u32) -> (usize, usize) {
    assert_eq!(&bloom[..8], b"SGTABLM\0");
    assert_eq!(u32_at(bloom, 8), version);
    let filters = u32_at(bloom, 12) as usize;
    let words = (0..filters)
        .map(|f| u64_at(bloom, 32 + 32 * f) as usize * 8)
        .sum();
    (filters, words)
}

fn bloom_reads_back(name: &str, version: u32) {
    let path = fixtures().join(name);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(u32_at(&bytes, 8), version);
    for b in [
        Bloom::from_bytes(&bytes, &path).unwrap(),
        Bloom::open(&path).unwrap(),
    ] {
        assert!(b.wait_checked());
        assert!(b.filters() > 1, "the chain grew past its first filter");
        // A key whose bits were all set already is not counted again.
        assert!((2900..=3000).contains(&b.count()), "count {}", b.count());
        assert!(bloom_keys().all(|k| b.may_contain(k)));
        let fp = (0..100_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
            .filter(|&k| b.may_contain(k))
            .count();
        assert!(fp < 2000, "false positives {fp} of 100000");
    }
}

// -- tombstones of a future version ------------------------------------------------

/// A tombstone version no build reads: far past any this one knows, so
/// that the test does not start passing a real future version.
const FUTURE_TOMB_VERSION: u32 = 9999;

/// Every file of `dir` by name, with its bytes.
fn dir_bytes(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn tombstones_of_a_future_version_are_refused_and_nothing_changes() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("c");
    let mut cfg = config();
    // Flat, so that no background build rewrites the segment without its
    // dead rows (and its tombstones with it).
    cfg.index_threshold = Some(100_000);
    let c = Collection::create(&dir, cfg).unwrap();
    let vs: Vec<[f32; DIMS]> = (0..40).map(vector).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let keys: Vec<u64> = (0..40).collect();
    c.upsert(&keys, &refs).unwrap();
    c.seal().unwrap();
    let removed = [3u64, 17, 29];
    assert_eq!(c.remove(&removed).unwrap(), removed.len());
    c.close().unwrap();

    // The tombstone file the MANIFEST names, laid out as docs/FORMAT.md
    // says: magic, version, 0, count, {segment id, key} entries, CRC32C of
    // everything before it.
    let mut tombs: Vec<String> = dir_bytes(&dir)
        .into_keys()
        .filter(|n| n.starts_with("tomb-") && n.ends_with(".bin"))
        .collect();
    assert_eq!(tombs.len(), 1, "{tombs:?}");
    let tomb_name = tombs.pop().unwrap();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    assert!(
        manifest.contains(&format!("\"tombstones\": \"{tomb_name}\"")),
        "{manifest}"
    );
    let tomb_path = dir.join(&tomb_name);
    let good = std::fs::read(&tomb_path).unwrap();
    assert_eq!(&good[..8], b"SGTATMB\0");
    assert_eq!(u32_at(&good, 8), 1);
    let n = u64_at(&good, 16) as usize;
    assert_eq!(n, removed.len());
    assert_eq!(good.len(), 24 + 16 * n + 4);
    let body = good.len() - 4;
    assert_eq!(crc32c::crc32c(&good[..body]), u32_at(&good, body));

    // The version field of a future release, the checksum recomputed so
    // that the file is otherwise well formed.
    let mut future = good.clone();
    future[8..12].copy_from_slice(&FUTURE_TOMB_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&future[..body]);
    future[body..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&tomb_path, &future).unwrap();

    let before = dir_bytes(&dir);
    for kind in ["MANIFEST", "seg-", "tomb-", "bloom-", "wal-"] {
        assert!(
            before.keys().any(|n| n.starts_with(kind)),
            "{kind} in {:?}",
            before.keys()
        );
    }
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let err = match Collection::open(&dir, mode) {
            Ok(_) => {
                panic!("{mode:?}: a version-{FUTURE_TOMB_VERSION} tombstone file was accepted")
            }
            Err(e) => e,
        };
        match &err {
            StoreError::UnsupportedVersion {
                file,
                found,
                oldest,
                newest,
            } => {
                assert_eq!(file, &tomb_path, "{mode:?}");
                assert_eq!(*found, FUTURE_TOMB_VERSION, "{mode:?}");
                assert!(*oldest <= 1 && 1 <= *newest, "{mode:?}: {err}");
                assert!(*newest < FUTURE_TOMB_VERSION, "{mode:?}: {err}");
            }
            other => panic!("{mode:?}: expected UnsupportedVersion, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(&tomb_name)
                && msg.contains(&format!("format version {FUTURE_TOMB_VERSION}")),
            "{mode:?}: {msg}"
        );
        // Nothing written, renamed or removed by the refused open.
        let after = dir_bytes(&dir);
        assert_eq!(
            after.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>(),
            "{mode:?}"
        );
        for (name, bytes) in &before {
            assert!(after[name] == *bytes, "{mode:?}: {name} changed");
        }
    }

    // The version was the only thing wrong: the original bytes open, with
    // the removed keys still dead.
    std::fs::write(&tomb_path, &good).unwrap();
    let c = Collection::open(&dir, OpenMode::ReadOnly).unwrap();
    assert_eq!(c.len(), keys.len() - removed.len());
    for k in keys {
        assert_eq!(c.get_raw(k).is_none(), removed.contains(&k), "key {k}");
    }
}

/// A version no build reads, for the files of a "newer" directory.
const FUTURE_VERSION: u32 = 9999;

/// Rewrites the MANIFEST of `dir` to say format `version`, its checksum
/// line recomputed so that only the version is wrong.
fn set_manifest_format(dir: &Path, version: u32) {
    let text = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    let body = &text[..text.rfind("crc32c:").unwrap()];
    assert!(body.contains("\"format\": 1,"), "{body}");
    let body = body.replacen("\"format\": 1,", &format!("\"format\": {version},"), 1);
    let crc = crc32c::crc32c(body.as_bytes());
    std::fs::write(dir.join("MANIFEST"), format!("{body}crc32c:{crc:08x}\n")).unwrap();
}

/// Sets the version field (bytes 8..12) of the file `name` in `dir`; the
/// header checksum is left stale: the version is refused before it is read.
fn set_file_version(dir: &Path, name: &str, version: u32) {
    let mut b = std::fs::read(dir.join(name)).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    std::fs::write(dir.join(name), b).unwrap();
}

#[test]
fn a_newer_directory_left_by_a_crash_is_refused_before_anything_changes() {
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("base");
    let c = Collection::create(&base, config()).unwrap();
    let vs: Vec<[f32; DIMS]> = (0..60).map(vector).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let keys: Vec<u64> = (0..60).collect();
    c.upsert(&keys[..40], &refs[..40]).unwrap();
    c.seal().unwrap();
    c.remove(&[5, 6]).unwrap();
    c.close().unwrap();
    // Rows in the log only: reopened, written, and the lock dropped without
    // a close (the writer's shutdown is what a crash skips; its log stays).
    let c = Collection::open(&base, OpenMode::ReadWrite).unwrap();
    c.upsert(&keys[40..], &refs[40..]).unwrap();
    drop(c);
    // What an interrupted flush, build or log rotation leaves: a temporary
    // file, a segment the MANIFEST does not name, a log created but never
    // completed. A writer's open removes all three once it has read every
    // file; and no LOCK, so that creating one shows too.
    let names: Vec<String> = dir_bytes(&base).into_keys().collect();
    let seg = names
        .iter()
        .find(|n| n.starts_with("seg-"))
        .unwrap()
        .clone();
    let log = names
        .iter()
        .filter(|n| n.starts_with("wal-"))
        .max()
        .unwrap()
        .clone();
    let bloom = names
        .iter()
        .find(|n| n.starts_with("bloom-"))
        .unwrap()
        .clone();
    std::fs::copy(base.join(&seg), base.join("seg-99999999.sgt")).unwrap();
    std::fs::write(base.join("seg-99999999.sgt.tmp"), b"half a segment").unwrap();
    let seq = wal::parse_name(&log).unwrap();
    let incomplete = wal::file_name(seq + 1_000_000);
    std::fs::write(base.join(&incomplete), b"SGTA").unwrap();
    std::fs::remove_file(base.join("LOCK")).unwrap();
    let leftovers = [
        "seg-99999999.sgt",
        "seg-99999999.sgt.tmp",
        incomplete.as_str(),
    ];

    // The same directory at this build's versions: a writer opens it, and
    // the open does change it (the leftovers go, a LOCK appears), so the
    // byte comparison below would see a premature change.
    let control = work.path().join("control");
    copy_dir(&base, &control);
    let c = Collection::open(&control, OpenMode::ReadWrite).unwrap();
    assert_eq!(c.len(), 58);
    c.close().unwrap();
    let after = dir_bytes(&control);
    for name in leftovers {
        assert!(!after.contains_key(name), "{name} was not removed");
    }
    assert!(after.contains_key("LOCK"));

    // One file kind at a time says a version this build does not read.
    for (i, file) in ["MANIFEST", &seg, &log, &bloom].into_iter().enumerate() {
        let dir = work.path().join(format!("newer-{i}"));
        copy_dir(&base, &dir);
        if file == "MANIFEST" {
            set_manifest_format(&dir, FUTURE_VERSION);
        } else {
            set_file_version(&dir, file, FUTURE_VERSION);
        }
        let before = dir_bytes(&dir);
        for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
            match Collection::open(&dir, mode) {
                Err(StoreError::UnsupportedVersion { file: f, found, .. }) => {
                    assert_eq!(f, dir.join(file), "{mode:?}");
                    assert_eq!(found, FUTURE_VERSION, "{mode:?} {file}");
                }
                Err(other) => panic!("{mode:?} {file}: expected UnsupportedVersion, got {other}"),
                Ok(_) => panic!("{mode:?}: a version-{FUTURE_VERSION} {file} was accepted"),
            }
            let after = dir_bytes(&dir);
            assert_eq!(
                after.keys().collect::<Vec<_>>(),
                before.keys().collect::<Vec<_>>(),
                "{mode:?} {file}: files created or removed"
            );
            for (name, bytes) in &before {
                assert!(after[name] == *bytes, "{mode:?} {file}: {name} changed");
            }
        }
    }
}
