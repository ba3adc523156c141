//! A read sees each write whole or not at all, while the writes replace
//! keys living in the mutable part, in frozen parts and in sealed
//! segments, and the parts are frozen, flushed, built and merged.
//!
//! Every write replaces all `KEYS` keys at once with a new generation
//! (kept in the payload, `generation`, and in the vector, component 1), so
//! at any moment between writes every key is live once, at one
//! generation. Readers check that whatever they read agrees with some
//! such moment: an exact search for `KEYS` neighbours returns every key
//! once, all of one generation (and each hit's payload is that
//! generation); `count` and `len` are `KEYS`; a lookup of all keys finds
//! every one, all of one generation. Before writes were published at once
//! (a replaced key's old slot died before the new one was visible; the
//! copy in a sealed part died after it) such reads came back short, mixed
//! or counted a key twice, about once in a few thousand reads.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::{
    Collection, CollectionConfig, CollectionSearch, Durability, Field, FieldType, Filter, Payload,
    Query, Value,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const DIMS: usize = 4;
const KEYS: u64 = 16;
/// Writes (each of every key); a seal every `SEAL_EVERY` of them.
const WRITES: u64 = 1_500;
const SEAL_EVERY: u64 = 40;
/// Reads of each reader thread, at least (they go on until the writer is
/// done).
const READS: usize = 4_000;
const READERS: usize = 2;

fn vector(key: u64, generation: u64) -> [f32; DIMS] {
    [key as f32, generation as f32 / 64.0, (key % 3) as f32, 1.0]
}

fn config(kind: IndexKind) -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = kind;
    // Small parts: the mutable part freezes every few writes, and the
    // optimizer flushes, builds and merges while the load runs.
    c.segment_size = (100 * c.bytes_per_vector()).max(4096);
    c.max_segment_size = c.segment_size * 8;
    c.index_threshold = Some(0);
    c.optimizer_threads = 1;
    c.durability = Durability::Off;
    c
}

fn fields() -> Vec<Field> {
    vec![Field {
        name: "generation".into(),
        ty: FieldType::Int64,
    }]
}

fn write(c: &Collection, generation: u64) {
    let keys: Vec<u64> = (0..KEYS).collect();
    let vs: Vec<[f32; DIMS]> = keys.iter().map(|&k| vector(k, generation)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let p = Payload {
        fields: fields(),
        columns: vec![keys.iter().map(|_| Value::Int(generation as i64)).collect()],
        rows: keys.len(),
    };
    c.upsert_with_payload(&keys, &refs, Some(&p)).unwrap();
}

fn generation_of(row: &[Value]) -> Option<u64> {
    match row.first() {
        Some(Value::Int(g)) => Some(*g as u64),
        _ => None,
    }
}

/// One reader's reads, each checked against "one moment between whole
/// writes". Returns how many reads it made.
fn read_load(c: &Collection, written: &AtomicU64, done: &AtomicBool, seed: u64) -> usize {
    let mut reads = 0;
    let everything = c
        .bind_filter(
            &Filter::parse(&json!({"field": "generation", "op": "ge", "value": 0})).unwrap(),
        )
        .unwrap();
    let keys: Vec<u64> = (0..KEYS).collect();
    while reads < READS || !done.load(Ordering::Acquire) {
        let at = written.load(Ordering::Acquire);
        let q = vector((seed + reads as u64) % KEYS, at);
        match reads % 4 {
            0 => {
                // An exact search for every key, with rows and vectors.
                let opts = CollectionSearch {
                    exact: true,
                    ..Default::default()
                };
                let query = Query {
                    opts,
                    ..Query::dense(vec![VectorRef::F32(&q)], KEYS as usize)
                };
                let found = c.search_rows(&query, true).unwrap();
                let (hits, rows) = (&found.hits[0], &found.rows[0]);
                let mut seen: Vec<u64> = hits.iter().map(|h| h.key).collect();
                seen.sort_unstable();
                assert_eq!(
                    seen, keys,
                    "read {reads}: an exact search returned {seen:?}, not every key once"
                );
                let gens: Vec<u64> = rows
                    .rows
                    .iter()
                    .map(|r| generation_of(r).expect("a hit without its payload"))
                    .collect();
                assert!(
                    gens.iter().all(|&g| g == gens[0]),
                    "read {reads}: one search saw several writes in part: {gens:?}"
                );
                for (j, h) in hits.iter().enumerate() {
                    let v: Vec<f32> = rows.vectors[j * DIMS * 4..(j + 1) * DIMS * 4]
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                        .collect();
                    assert_eq!(v, vector(h.key, gens[j]), "read {reads}: key {}", h.key);
                }
            }
            1 => {
                let n = c.count(None).unwrap();
                assert_eq!(n, KEYS as usize, "read {reads}: count() = {n}");
                let n = c.count(Some(&everything)).unwrap();
                assert_eq!(n, KEYS as usize, "read {reads}: count(filter) = {n}");
                let n = c.len();
                assert_eq!(n, KEYS as usize, "read {reads}: len() = {n}");
            }
            2 => {
                let rows = c.payload_rows(&keys).unwrap();
                let gens: Vec<Option<u64>> = rows
                    .iter()
                    .map(|r| r.as_deref().and_then(generation_of))
                    .collect();
                assert!(
                    gens.iter().all(|g| g.is_some() && *g == gens[0]),
                    "read {reads}: a lookup of every key saw {gens:?}"
                );
            }
            _ => {
                // A plain (graph) search: every key once, whatever its
                // generation (a walk may miss, but never repeat a key).
                let hits = c
                    .search(&[VectorRef::F32(&q)], KEYS as usize, &Default::default())
                    .unwrap();
                let mut seen: Vec<u64> = hits[0].iter().map(|h| h.key).collect();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), hits[0].len(), "read {reads}: a key twice");
                let mut listed = c.keys_where(Some(&everything)).unwrap();
                listed.sort_unstable();
                assert_eq!(listed, keys, "read {reads}: keys_where");
            }
        }
        reads += 1;
    }
    reads
}

fn run(kind: IndexKind) {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(kind)).unwrap();
    let written = AtomicU64::new(0);
    write(&c, 0);
    let done = AtomicBool::new(false);
    let reads: Vec<usize> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS as u64)
            .map(|i| {
                let (c, written, done) = (&c, &written, &done);
                s.spawn(move || read_load(c, written, done, i * 7 + 1))
            })
            .collect();
        for g in 1..=WRITES {
            write(&c, g);
            written.store(g, Ordering::Release);
            if g % SEAL_EVERY == 0 {
                c.seal().unwrap();
            }
        }
        done.store(true, Ordering::Release);
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let st = c.stats();
    eprintln!(
        "{kind:?}: {WRITES} writes of {KEYS} keys, reads {reads:?}; at the end {} segments, \
         optimizer {:?}",
        st.segments, st.optimizer
    );
    assert_eq!(c.len(), KEYS as usize);
}

#[test]
fn reads_see_each_write_whole_over_flat_parts() {
    run(IndexKind::Flat);
}

#[test]
fn reads_see_each_write_whole_over_graph_parts() {
    run(IndexKind::Hnsw);
}
