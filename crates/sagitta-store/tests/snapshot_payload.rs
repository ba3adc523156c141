//! A search hit comes with the payload written together with the vector
//! it was found by, while the same keys are overwritten and removed, and
//! the parts they live in are frozen, flushed, built and merged, all
//! concurrently.
//!
//! Every write of a key is a new version: a number, unique across the
//! whole run, kept in the payload (`ver`, beside `key`) and in the vector
//! itself (component 1 is `ver / 16`, exact in f32). Readers search with
//! [`Collection::search_rows`] and check each hit: its row is there (not
//! empty), names the hit's key and a version written for that key, the
//! stored vector returned with it is exactly that version's vector, and
//! the hit's distance is that vector's distance to the query. A payload
//! read by key after the search (the server's Flight path before
//! `search_rows`) fails this within a few hundred searches: a row removed
//! in between comes back empty, one overwritten comes back as the newer
//! version.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Durability, Field, FieldType, Filter, Payload,
    Query, Schema, Value,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const DIMS: usize = 4;
/// Keys written, overwritten and removed.
const KEYS: u64 = 160;
/// Write calls of each writer thread.
const WRITES: usize = 4_000;
/// Searches of each reader thread, at least (they go on until the
/// writers are done).
const SEARCHES: usize = 6_000;
const WRITERS: usize = 2;
const READERS: usize = 3;
const K: usize = 10;

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

/// The vector of version `ver` of `key`.
fn vector(key: u64, ver: u64) -> [f32; DIMS] {
    [key as f32, ver as f32 / 16.0, (key % 3) as f32, 1.0]
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn config() -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = IndexKind::Hnsw;
    // Small parts: the mutable part freezes every ~200 rows, each is
    // flushed, given a graph (sq8 codes with full rows beside them) and
    // merged with others while the load runs.
    c.segment_size = (200 * c.bytes_per_vector()).max(4096);
    c.max_segment_size = c.segment_size * 8;
    c.index_threshold = Some(0);
    c.optimizer_threads = 1;
    c.durability = Durability::Off;
    c
}

fn fields() -> Vec<Field> {
    vec![
        Field {
            name: "key".into(),
            ty: FieldType::Int64,
        },
        Field {
            name: "ver".into(),
            ty: FieldType::Int64,
        },
    ]
}

/// What the writers have written: the key of each version.
struct Written {
    key_of: Vec<AtomicU64>,
    next: AtomicU64,
}

impl Written {
    fn new(versions: usize) -> Written {
        Written {
            key_of: (0..versions).map(|_| AtomicU64::new(u64::MAX)).collect(),
            // Version 0 is never written.
            next: AtomicU64::new(1),
        }
    }

    /// A new version of `key`, recorded before it is written.
    fn version(&self, key: u64) -> u64 {
        let v = self.next.fetch_add(1, Ordering::Relaxed);
        self.key_of[v as usize].store(key, Ordering::Release);
        v
    }

    fn key_of(&self, ver: u64) -> Option<u64> {
        let k = self.key_of.get(ver as usize)?.load(Ordering::Acquire);
        (k != u64::MAX).then_some(k)
    }
}

fn upsert(c: &Collection, w: &Written, keys: &[u64]) {
    let vers: Vec<u64> = keys.iter().map(|&k| w.version(k)).collect();
    let vs: Vec<[f32; DIMS]> = keys
        .iter()
        .zip(&vers)
        .map(|(&k, &v)| vector(k, v))
        .collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let p = Payload {
        fields: fields(),
        columns: vec![
            keys.iter().map(|&k| Value::Int(k as i64)).collect(),
            vers.iter().map(|&v| Value::Int(v as i64)).collect(),
        ],
        rows: keys.len(),
    };
    c.upsert_with_payload(keys, &refs, Some(&p)).unwrap();
}

/// Distinct random keys, 1 to `max` of them.
fn some_keys(r: &mut Rng, max: u64) -> Vec<u64> {
    let n = 1 + r.below(max);
    let mut keys: Vec<u64> = (0..n).map(|_| r.below(KEYS)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// One writer: upserts (new keys, overwrites, rewrites of removed keys)
/// and removes, and now and then a seal (freeze and flush at once).
fn write_load(c: &Collection, w: &Written, seed: u64, seals: &AtomicUsize) {
    let mut r = Rng(seed);
    for i in 0..WRITES {
        match r.below(10) {
            0..=5 => upsert(c, w, &some_keys(&mut r, 16)),
            6..=8 => {
                c.remove(&some_keys(&mut r, 8)).unwrap();
            }
            _ if i % 50 == 0 => {
                c.seal().unwrap();
                seals.fetch_add(1, Ordering::Relaxed);
            }
            _ => upsert(c, w, &some_keys(&mut r, 64)),
        }
    }
}

/// Figures of one reader.
#[derive(Default)]
struct Seen {
    searches: usize,
    hits: usize,
    /// Hits whose version was no longer the newest when checked
    /// (overwritten or removed since the search).
    stale: usize,
}

/// The checks of one hit: `row` laid out by `schema`, `vector` its
/// stored vector when the search returned vectors.
#[allow(clippy::too_many_arguments)]
fn check_hit(
    w: &Written,
    schema: &Schema,
    q: &[f32],
    key: u64,
    distance: f32,
    row: &[Value],
    vector_bytes: Option<&[u8]>,
    what: &str,
) -> u64 {
    let col = |name: &str| {
        let (i, _) = schema.field(name).unwrap();
        row.get(i).cloned().unwrap_or(Value::Null)
    };
    let (Value::Int(k), Value::Int(ver)) = (col("key"), col("ver")) else {
        panic!("{what}: hit {key} (distance {distance}) came without its payload: {row:?}");
    };
    assert_eq!(
        k as u64, key,
        "{what}: hit {key} came with the payload of key {k}"
    );
    let ver = ver as u64;
    assert_eq!(
        w.key_of(ver),
        Some(key),
        "{what}: hit {key} came with version {ver}, never written for it"
    );
    let want = vector(key, ver);
    if let Some(b) = vector_bytes {
        let got: Vec<f32> = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            got, want,
            "{what}: hit {key} came with the payload of version {ver} and another vector"
        );
    }
    let d = l2(q, &want);
    assert!(
        (distance - d).abs() <= 1e-4 * d.max(1.0),
        "{what}: hit {key} scored {distance}, its payload's version {ver} is at {d}: \
         the payload is not the version the search found"
    );
    ver
}

/// One reader: searches of every kind (plain, exact, with a payload
/// predicate, with a key filter, batches of queries, with and without
/// vectors), every hit checked.
fn read_load(c: &Collection, w: &Written, seed: u64, done: &AtomicBool) -> Seen {
    let mut r = Rng(seed);
    let mut seen = Seen::default();
    let latest = |key: u64| -> Option<u64> {
        let rows = c.payload_rows(&[key]).unwrap();
        rows[0].as_ref().and_then(|row| match row.get(1) {
            Some(Value::Int(v)) => Some(*v as u64),
            _ => None,
        })
    };
    // At least SEARCHES searches, and on until the writers are done.
    while seen.searches < SEARCHES || !done.load(Ordering::Acquire) {
        let nq = if r.below(8) == 0 {
            1 + r.below(4) as usize
        } else {
            1
        };
        let qs: Vec<[f32; DIMS]> = (0..nq)
            .map(|_| {
                vector(
                    r.below(KEYS),
                    w.next.load(Ordering::Relaxed).saturating_sub(r.below(400)),
                )
            })
            .collect();
        let refs: Vec<VectorRef<'_>> = qs.iter().map(|q| VectorRef::F32(q)).collect();
        let lt = r.below(KEYS) as i64;
        let pred = c
            .bind_filter(&Filter::parse(&json!({"field": "key", "op": "lt", "value": lt})).unwrap())
            .unwrap();
        let keys: Vec<u64> = (0..32).map(|_| r.below(KEYS)).collect();
        let kind = r.below(5);
        let opts = CollectionSearch {
            exact: kind == 1,
            predicate: (kind == 2).then_some(&pred),
            filter: (kind == 3).then_some(keys.as_slice()),
            ef: (kind == 4).then_some(16),
            ..CollectionSearch::default()
        };
        let with_vectors = r.below(4) != 0;
        let q = Query {
            opts,
            ..Query::dense(refs, K)
        };
        let out = c.search_rows(&q, with_vectors).unwrap();
        seen.searches += 1;
        assert_eq!(out.hits.len(), nq);
        assert_eq!(out.rows.len(), nq);
        for (qi, (hits, rows)) in out.hits.iter().zip(&out.rows).enumerate() {
            assert!(hits.len() <= K);
            assert_eq!(rows.len(), hits.len());
            let vb = DIMS * 4;
            for (j, h) in hits.iter().enumerate() {
                assert_eq!(rows.keys[j], h.key);
                let what = format!("search kind {kind}, query {qi} of {nq}, hit {j}");
                let vector_bytes = with_vectors.then(|| &rows.vectors[j * vb..(j + 1) * vb]);
                let ver = check_hit(
                    w,
                    &out.schema,
                    &qs[qi],
                    h.key,
                    h.distance,
                    &rows.rows[j],
                    vector_bytes,
                    &what,
                );
                if kind == 2 {
                    assert!(
                        (h.key as i64) < lt,
                        "{what}: hit {} does not pass key < {lt}",
                        h.key
                    );
                }
                if kind == 3 {
                    assert!(
                        keys.contains(&h.key),
                        "{what}: hit {} not in the key filter",
                        h.key
                    );
                }
                seen.hits += 1;
                if seen.hits % 16 == 0 && latest(h.key) != Some(ver) {
                    seen.stale += 1;
                }
            }
        }
    }
    seen
}

#[test]
fn every_search_hit_comes_with_the_payload_of_its_own_version_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let c = Arc::new(Collection::create(dir.path(), config()).unwrap());
    let w = Arc::new(Written::new(WRITERS * WRITES * 64 + (KEYS as usize) + 2));
    // Every key once before the load.
    upsert(&c, &w, &(0..KEYS).collect::<Vec<_>>());
    let seals = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let max_parts = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (c, w, seals, max_parts) = (&c, &w, &seals, &max_parts);
                s.spawn(move || {
                    write_load(c, w, 0x9E37_79B9 + i as u64, seals);
                    max_parts.fetch_max(c.stats().segments, Ordering::Relaxed);
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|i| {
                let (c, w, done) = (&c, &w, &done);
                s.spawn(move || read_load(c, w, 0xD1B5_4A32 + 7 * i as u64, done))
            })
            .collect();
        for h in writers {
            h.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let mut total = Seen::default();
        for h in readers {
            let r = h.join().unwrap();
            total.searches += r.searches;
            total.hits += r.hits;
            total.stale += r.stale;
        }
        let st = c.stats();
        let opt = &st.optimizer;
        eprintln!(
            "snapshot_payload: {} write calls ({} versions, {} seals), {} searches, {} hits \
             checked, {} of {} sampled hits stale by the time they were checked; at the end \
             {} segments, {} tombstones, optimizer {:?}",
            WRITERS * WRITES,
            w.next.load(Ordering::Relaxed) - 1,
            seals.load(Ordering::Relaxed),
            total.searches,
            total.hits,
            total.stale,
            total.hits / 16,
            st.segments,
            st.tombstones,
            opt,
        );
        assert!(total.searches >= READERS * SEARCHES);
        assert!(
            total.hits > READERS * SEARCHES,
            "too few hits checked: {}",
            total.hits
        );
    });
}

/// The same checks with no writes in flight: every key's newest version,
/// from a sealed and built part, a frozen or flushed one and the mutable
/// part at once (`search_rows` on a quiet collection is an ordinary
/// search with rows).
#[test]
fn search_rows_equal_search_and_the_newest_rows_when_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config()).unwrap();
    let w = Written::new(10 * KEYS as usize);
    upsert(&c, &w, &(0..KEYS).collect::<Vec<_>>());
    c.optimize().unwrap();
    upsert(&c, &w, &(0..KEYS).step_by(3).collect::<Vec<_>>());
    c.seal().unwrap();
    upsert(&c, &w, &(0..KEYS).step_by(5).collect::<Vec<_>>());
    c.remove(&(0..KEYS).step_by(7).collect::<Vec<_>>()).unwrap();
    let mut r = Rng(77);
    for _ in 0..200 {
        let q = vector(r.below(KEYS), r.below(3 * KEYS));
        let query = Query::dense(vec![VectorRef::F32(&q)], K);
        let plain = c.search(&query.vectors, K, &query.opts).unwrap();
        let out = c.search_rows(&query, true).unwrap();
        assert_eq!(out.hits, plain);
        let keys: Vec<u64> = plain[0].iter().map(|h| h.key).collect();
        let by_key = c.payload_rows(&keys).unwrap();
        for (j, h) in out.hits[0].iter().enumerate() {
            assert_ne!(h.key % 7, 0, "removed key {} returned", h.key);
            let vb = DIMS * 4;
            check_hit(
                &w,
                &out.schema,
                &q,
                h.key,
                h.distance,
                &out.rows[0].rows[j],
                Some(&out.rows[0].vectors[j * vb..(j + 1) * vb]),
                "quiet",
            );
            assert_eq!(Some(&out.rows[0].rows[j]), by_key[j].as_ref());
        }
        // The table the Python binding hands back: k rows (null past the
        // last hit), as the rows read by key lay them out.
        let mut padded = keys.clone();
        padded.resize(K + 2, u64::MAX);
        let cols = ["ver".to_string()];
        for cols in [None, Some(&cols[..])] {
            assert_eq!(
                out.payload_table(K + 2, cols).unwrap(),
                c.payload_table(&padded, cols).unwrap()
            );
        }
    }
    // A text query is not one search_rows runs.
    let q = Query::text("x", None, K);
    assert!(c.search_rows(&q, false).is_err());
}
