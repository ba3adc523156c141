//! Full-text and hybrid search on a collection: BM25 answers equal a
//! one-index oracle in the mutable part, after sealing, after the
//! optimizer built and merged segments, and after a reopen (statistics
//! are collection-wide); deletes, upserts and payload filters apply before
//! top-k; fusion edge cases; typed errors for bad text.

#![allow(clippy::unwrap_used)]

use sagitta_index::{DType, IndexKind, Metric, Space, VectorRef};
use sagitta_store::{
    AnalyzerKind, Collection, CollectionConfig, CollectionSearch, Field, FieldType, Filter, Fusion,
    OpenMode, Payload, Query, StoreError, TextFieldSpec, Value,
};
use sagitta_text::{Accumulator, Bm25, FieldRead, MemText, TextQuery};
use serde_json::json;

const DIMS: usize = 8;
const WORDS: [&str; 24] = [
    "vector", "search", "engine", "python", "rust", "library", "fast", "index", "graph", "segment",
    "text", "query", "database", "server", "client", "storage", "memory", "disk", "network",
    "parser", "compiler", "kernel", "driver", "package",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn text_of(k: u64) -> String {
    let mut r = Rng(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let n = 3 + r.next() % 12;
    (0..n)
        .map(|_| {
            // Skewed: low words are common, high ones rare.
            let a = r.next() % WORDS.len() as u64;
            let b = r.next() % WORDS.len() as u64;
            WORDS[a.min(b) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn vector(k: u64) -> Vec<f32> {
    let mut r = Rng(k.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    (0..DIMS)
        .map(|_| (r.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

fn config(segment_rows: u64) -> CollectionConfig {
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let mut c = CollectionConfig::new(space);
    c.kind = IndexKind::Hnsw;
    c.segment_size = (segment_rows * c.bytes_per_vector()).max(4096);
    c.idle_seal_ms = 0;
    c.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    c
}

fn payload(keys: &[u64]) -> Payload {
    Payload {
        fields: vec![
            Field {
                name: "body".into(),
                ty: FieldType::String,
            },
            Field {
                name: "year".into(),
                ty: FieldType::Int64,
            },
        ],
        columns: vec![
            keys.iter().map(|&k| Value::Str(text_of(k))).collect(),
            keys.iter().map(|&k| Value::Int((k % 5) as i64)).collect(),
        ],
        rows: keys.len(),
    }
}

fn write(c: &Collection, keys: &[u64]) {
    let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    c.upsert_with_payload(keys, &refs, Some(&payload(keys)))
        .unwrap();
}

/// BM25 over one in-memory index of `keys`' texts: (key, score), best
/// first, ties by key; only keys passing `keep` are returned.
fn oracle(keys: &[u64], q: &str, k: usize, keep: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
    let spec = [TextFieldSpec::new("body", AnalyzerKind::English)];
    let mut m = MemText::new(&spec);
    for (slot, &key) in keys.iter().enumerate() {
        m.add(0, slot as u32, &text_of(key));
    }
    let mut tq = TextQuery::new(q, &spec, Bm25::default());
    tq.add_stats(m.fields().iter().map(|f| f as &dyn FieldRead));
    tq.finish();
    let mut acc = Accumulator::default();
    acc.reset(keys.len());
    tq.score(m.fields().iter().map(|f| f as &dyn FieldRead), &mut acc);
    let mut hits: Vec<(u64, f32)> = acc
        .hits()
        .map(|(s, x)| (keys[s as usize], x))
        .filter(|&(key, _)| keep(key))
        .collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    hits
}

fn same(got: &[(u64, f32)], want: &[(u64, f32)], what: &str) {
    // Every part sums a score in the same order as the one-index oracle
    // (terms by weight) with the same collection-wide statistics: the
    // same f32, so the same rows in the same order (ties by key).
    let bits = |v: &[(u64, f32)]| v.iter().map(|x| (x.0, x.1.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want), "{what}: {got:?} vs {want:?}");
}

const QUERIES: [&str; 5] = [
    "fast vector search engine",
    "rust compiler",
    "the kernel driver packages",
    "network network storage",
    "Python libraries",
];

fn leg(c: &Collection, q: &str, k: usize, opts: &CollectionSearch<'_>) -> Vec<(u64, f32)> {
    c.text_leg(q, k, opts).unwrap()
}

#[test]
fn bm25_matches_the_oracle_through_the_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(300)).unwrap();
    let keys: Vec<u64> = (0..1000).collect();
    for chunk in keys.chunks(250) {
        write(&c, chunk);
    }
    let opts = CollectionSearch::default();
    let check = |c: &Collection, stage: &str| {
        for q in QUERIES {
            same(
                &leg(c, q, 10, &opts),
                &oracle(&keys, q, 10, |_| true),
                &format!("{stage} {q}"),
            );
        }
    };
    check(&c, "written");
    c.seal().unwrap();
    check(&c, "sealed");
    c.optimize().unwrap();
    assert!(c.stats().segments >= 1);
    check(&c, "optimized");
    c.close().unwrap();
    // Every segment file carries its text section (nothing rebuilt at open).
    let mut files = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sgt") {
            let seg = sagitta_store::Segment::open(&p).unwrap();
            let t = seg.text().unwrap().expect("a text section");
            assert_eq!(t.fields()[0].name(), "body");
            assert_eq!(seg.info().version, sagitta_store::FORMAT_VERSION);
            seg.verify().unwrap();
            files += 1;
        }
    }
    assert!(files >= 1);
    let r = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap();
    check(&r, "reopened");
}

/// Rows tied on score go to the smaller keys whichever part holds them:
/// a later, smaller part's rows that tie the best so far (the floor it is
/// searched under) still displace larger keys.
#[test]
fn ties_across_parts_go_to_the_smaller_keys() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(100_000)).unwrap();
    let same_text = |keys: &[u64]| {
        let mut p = payload(keys);
        p.columns[0] = keys
            .iter()
            .map(|_| Value::Str("alpha omega".into()))
            .collect();
        p
    };
    let put = |keys: &[u64]| {
        let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k)).collect();
        let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
        c.upsert_with_payload(keys, &refs, Some(&same_text(keys)))
            .unwrap();
    };
    // The large part (searched first) holds the large keys; a smaller
    // sealed part and the mutable part hold smaller ones.
    put(&(1000..1300).collect::<Vec<u64>>());
    write(&c, &(2000..2100).collect::<Vec<u64>>());
    c.seal().unwrap();
    put(&(500..520).collect::<Vec<u64>>());
    c.seal().unwrap();
    put(&(0..5).collect::<Vec<u64>>());
    assert!(c.stats().segments >= 2);
    let got = leg(&c, "alpha omega", 12, &CollectionSearch::default());
    let keys: Vec<u64> = got.iter().map(|h| h.0).collect();
    let want: Vec<u64> = (0..5).chain(500..507).collect();
    assert_eq!(keys, want, "{got:?}");
    assert!(got.windows(2).all(|w| w[0].1 == w[1].1));
}

#[test]
fn deletes_upserts_and_filters_apply_before_top_k() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(200)).unwrap();
    let keys: Vec<u64> = (0..600).collect();
    write(&c, &keys);
    c.optimize().unwrap();
    let q = "vector search";
    let top = leg(&c, q, 20, &CollectionSearch::default());
    // Delete the five best: they are never returned again.
    let gone: Vec<u64> = top.iter().take(5).map(|x| x.0).collect();
    c.remove(&gone).unwrap();
    let after = leg(&c, q, 20, &CollectionSearch::default());
    assert!(after.iter().all(|x| !gone.contains(&x.0)));
    assert_eq!(after.len(), 20);
    // Replace a key's text: found by its new words only.
    let key = 7u64;
    let p = Payload {
        fields: vec![Field {
            name: "body".into(),
            ty: FieldType::String,
        }],
        columns: vec![vec![Value::Str("zebra quokka".into())]],
        rows: 1,
    };
    let v = vector(key);
    c.upsert_with_payload(&[key], &[VectorRef::F32(&v)], Some(&p))
        .unwrap();
    let z = leg(&c, "quokka", 5, &CollectionSearch::default());
    assert_eq!(z.iter().map(|x| x.0).collect::<Vec<_>>(), [key]);
    let old_words = text_of(key);
    let old = leg(&c, &old_words, 600, &CollectionSearch::default());
    assert!(old.iter().all(|x| x.0 != key), "the old text still matches");
    // A payload filter applies before top-k: every row returned passes it
    // and there are as many as the oracle finds among passing rows.
    let f = c
        .bind_filter(&Filter::parse(&json!({"field": "year", "op": "eq", "value": 3})).unwrap())
        .unwrap();
    let opts = CollectionSearch {
        predicate: Some(&f),
        ..CollectionSearch::default()
    };
    let got = leg(&c, "rust compiler kernel", 15, &opts);
    assert_eq!(got.len(), 15);
    assert!(got.iter().all(|x| x.0 % 5 == 3));
    // Key filter.
    let allowed: Vec<u64> = (100..140).collect();
    let opts = CollectionSearch {
        filter: Some(&allowed),
        ..CollectionSearch::default()
    };
    let got = leg(&c, "search", 100, &opts);
    assert!(!got.is_empty() && got.iter().all(|x| allowed.contains(&x.0)));
}

#[test]
fn hybrid_fusion_and_legs() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(400)).unwrap();
    let keys: Vec<u64> = (0..800).collect();
    write(&c, &keys);
    c.optimize().unwrap();
    let qv = vector(12345);
    let base = Query {
        text: Some("graph index storage"),
        vectors: Some(VectorRef::F32(&qv)).into_iter().collect(),
        k: 10,
        fusion: None,
        depth: Some(40),
        opts: CollectionSearch {
            exact: true,
            ..CollectionSearch::default()
        },
    };
    let rrf = c.search_text(&base).unwrap();
    assert_eq!(rrf.len(), 10);
    assert!(rrf.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(rrf.iter().all(|h| h.dense.is_some() || h.text.is_some()));
    // alpha = 1: the dense order; alpha = 0: the text order.
    let dense = c
        .search(&[VectorRef::F32(&qv)], 10, &base.opts)
        .unwrap()
        .pop()
        .unwrap();
    let a1 = c
        .search_text(&Query {
            fusion: Some(Fusion::Alpha { alpha: 1.0 }),
            ..base.clone()
        })
        .unwrap();
    assert_eq!(
        a1.iter().map(|h| h.key).collect::<Vec<_>>(),
        dense.iter().map(|n| n.key).collect::<Vec<_>>()
    );
    assert!(a1.iter().all(|h| h.text.is_none()));
    let a0 = c
        .search_text(&Query {
            fusion: Some(Fusion::Alpha { alpha: 0.0 }),
            ..base.clone()
        })
        .unwrap();
    let text = leg(&c, base.text.unwrap_or_default(), 10, &base.opts);
    assert_eq!(
        a0.iter().map(|h| h.key).collect::<Vec<_>>(),
        text.iter().map(|x| x.0).collect::<Vec<_>>()
    );
    for f in [
        Fusion::Dbsf,
        Fusion::Alpha { alpha: 0.5 },
        Fusion::Rrf { k: 10.0 },
    ] {
        let r = c
            .search_text(&Query {
                fusion: Some(f),
                ..base.clone()
            })
            .unwrap();
        assert_eq!(r.len(), 10, "{f:?}");
    }
    // Text only (no vector, no model): the BM25 order with its scores.
    let t = c
        .search_text(&Query {
            vectors: None.into_iter().collect(),
            ..base.clone()
        })
        .unwrap();
    assert_eq!(
        t.iter().map(|h| h.key).collect::<Vec<_>>(),
        text.iter().map(|x| x.0).collect::<Vec<_>>()
    );
    assert!(t.iter().all(|h| h.dense.is_none() && h.text.is_some()));
}

#[test]
fn bad_text_gets_typed_errors_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(400)).unwrap();
    write(&c, &(0..50).collect::<Vec<u64>>());
    let s = |text: &str, fusion: Option<Fusion>| {
        c.search_text(&Query {
            text: Some(text),
            vectors: None.into_iter().collect(),
            k: 5,
            fusion,
            depth: None,
            opts: CollectionSearch::default(),
        })
    };
    for (text, f) in [
        ("", None),
        ("the and of", None),
        ("search", Some(Fusion::Alpha { alpha: 1.5 })),
        ("search", Some(Fusion::Rrf { k: f32::NAN })),
    ] {
        assert!(
            matches!(s(text, f), Err(StoreError::InvalidText(_))),
            "{text:?} {f:?}"
        );
    }
    let huge = "word ".repeat(300_000);
    assert!(matches!(s(&huge, None), Err(StoreError::InvalidText(_))));
    assert!(matches!(
        c.search_text(&Query {
            text: Some("search"),
            vectors: None.into_iter().collect(),
            k: 0,
            fusion: None,
            depth: None,
            opts: CollectionSearch::default(),
        }),
        Err(StoreError::Index(_))
    ));
    // An oversized text in a write is refused whole.
    let mut p = payload(&[900, 901]);
    p.columns[0][1] = Value::Str(huge.clone());
    let vs = [vector(900), vector(901)];
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    assert!(matches!(
        c.upsert_with_payload(&[900, 901], &refs, Some(&p)),
        Err(StoreError::InvalidText(_))
    ));
    assert!(!c.contains(900) && !c.contains(901));
    // A collection without text fields says so.
    let d2 = tempfile::tempdir().unwrap();
    let mut cfg = config(400);
    cfg.text.clear();
    let plain = Collection::create(d2.path(), cfg).unwrap();
    let v = vector(1);
    plain.upsert(&[1], &[VectorRef::F32(&v)]).unwrap();
    assert!(matches!(
        plain.text_leg("search", 5, &CollectionSearch::default()),
        Err(StoreError::InvalidText(_))
    ));
    // Duplicate text field names, a model without a text field.
    let mut cfg = config(400);
    cfg.text
        .push(TextFieldSpec::new("body", AnalyzerKind::Simple));
    assert!(matches!(
        Collection::create(tempfile::tempdir().unwrap().path(), cfg),
        Err(StoreError::Config(_))
    ));
    let mut cfg = config(400);
    cfg.text.clear();
    cfg.embed_model = Some("all-minilm-l6-v2".into());
    assert!(matches!(
        Collection::create(tempfile::tempdir().unwrap().path(), cfg),
        Err(StoreError::Config(_))
    ));
}

fn text_fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/segment-v4-text.sgt")
}

/// The frozen text fixture: 40 rows (8-d, L2, Flat), key `i`, text
/// [`text_of`]`(i)` in the text field "body" (English analyzer). Written
/// when SAGITTA_REGEN_FIXTURES=1.
#[test]
fn frozen_v4_text_fixture_reads_back() {
    let keys: Vec<u64> = (0..40).collect();
    let spec = [TextFieldSpec::new("body", AnalyzerKind::English)];
    if std::env::var_os("SAGITTA_REGEN_FIXTURES").is_some() {
        let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
        let idx = sagitta_index::Index::new(space, IndexKind::Flat, Default::default()).unwrap();
        for &k in &keys {
            sagitta_index::IndexWrite::add(&idx, k, VectorRef::F32(&vector(k))).unwrap();
        }
        let schema = sagitta_store::Schema::new(payload(&[]).fields).unwrap();
        let v = idx.view();
        let rows: Vec<Vec<Value>> = (0..40u32)
            .map(|s| {
                let k = sagitta_index::GraphView::key(&v, s);
                vec![Value::Str(text_of(k)), Value::Int((k % 5) as i64)]
            })
            .collect();
        drop(v);
        let batch =
            sagitta_store::payload::to_record_batch(&schema, rows.iter().map(|r| Some(&r[..])))
                .unwrap();
        sagitta_store::segment::SegmentWriter::new(&idx)
            .payload(&schema, &batch)
            .text(&spec)
            .write(&text_fixture())
            .unwrap();
    }
    let seg = sagitta_store::Segment::open(&text_fixture()).unwrap();
    assert_eq!(seg.info().version, 4);
    seg.verify().unwrap();
    let sec = seg.text().unwrap().expect("text section");
    assert_eq!(sec.fields().len(), 1);
    for q in QUERIES {
        let mut tq = TextQuery::new(q, &spec, Bm25::default());
        tq.add_stats(sec.fields().iter().map(|f| f as &dyn FieldRead));
        tq.finish();
        let mut acc = Accumulator::default();
        acc.reset(40);
        tq.score(sec.fields().iter().map(|f| f as &dyn FieldRead), &mut acc);
        let mut got: Vec<(u64, f32)> = acc
            .hits()
            .map(|(s, x)| (sagitta_index::GraphView::key(&seg, s), x))
            .collect();
        got.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        got.truncate(10);
        same(&got, &oracle(&keys, q, 10, |_| true), q);
    }
}

/// A segment's text section taken from a part's text index (every slot's
/// documents, overwritten and removed ones included: how a mutable part
/// is flushed) is the same file as one analysed afresh from the live
/// slots' payload.
#[test]
fn text_section_from_a_part_index_equals_a_fresh_analysis() {
    use sagitta_index::{GraphView, IndexWrite};
    let space = Space::new(DIMS, Metric::L2, DType::F32).unwrap();
    let idx = sagitta_index::Index::new(space, IndexKind::Flat, Default::default()).unwrap();
    let spec = [
        TextFieldSpec::new("body", AnalyzerKind::English),
        TextFieldSpec::new("tag", AnalyzerKind::Simple),
    ];
    let mut mem = MemText::new(&spec);
    let text = |k: u64, round: u64| {
        let t = text_of(k + 1000 * round);
        (
            t.clone(),
            format!("Tag{} {}", k % 3, t.split(' ').next().unwrap()),
        )
    };
    let mut texts: Vec<(String, String)> = Vec::new();
    // 60 keys, then keys 0..15 written again (new slots; the old ones
    // die) and keys 40..50 removed; key 59's text is empty.
    for (round, keys) in [(0u64, 0..60u64), (1, 0..15)] {
        for k in keys {
            idx.upsert(k, VectorRef::F32(&vector(k))).unwrap();
            let (a, b) = if k == 59 {
                (String::new(), String::new())
            } else {
                text(k, round)
            };
            let slot = texts.len() as u32;
            mem.add(0, slot, &a);
            mem.add(1, slot, &b);
            texts.push((a, b));
        }
    }
    for k in 40..50 {
        assert!(idx.remove(k));
    }
    let field = |name: &str| Field {
        name: name.into(),
        ty: FieldType::String,
    };
    let schema = sagitta_store::Schema::new(vec![field("body"), field("tag")]).unwrap();
    let v = idx.view();
    assert_eq!(v.slots(), texts.len());
    let rows: Vec<Vec<Value>> = texts
        .iter()
        .map(|(a, b)| vec![Value::Str(a.clone()), Value::Str(b.clone())])
        .collect();
    assert_eq!(GraphView::key(&v, 60), 0);
    drop(v);
    let batch = sagitta_store::payload::to_record_batch(&schema, rows.iter().map(|r| Some(&r[..])))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |analysed: Option<&MemText>, name: &str| {
        let path = dir.path().join(name);
        let mut w = sagitta_store::segment::SegmentWriter::new(&idx)
            .payload(&schema, &batch)
            .text(&spec);
        if let Some(mem) = analysed {
            w = w.analysed(mem);
        }
        w.write(&path).unwrap();
        path
    };
    let fresh = write(None, "a.sgt");
    let reused = write(Some(&mem), "b.sgt");
    assert_eq!(
        std::fs::read(&fresh).unwrap(),
        std::fs::read(&reused).unwrap()
    );
    // Only the live slots with text are documents: 60 keys, 10 removed,
    // one with empty text (the overwritten slots left out).
    let seg = sagitta_store::Segment::open(&reused).unwrap();
    let sec = seg.text().unwrap().expect("text section");
    assert_eq!(sec.fields()[0].docs(), 60 - 10 - 1);
    // An index over other fields is not used (analysed afresh instead).
    let other = MemText::new(&spec[..1]);
    let third = write(Some(&other), "c.sgt");
    assert_eq!(
        std::fs::read(&fresh).unwrap(),
        std::fs::read(&third).unwrap()
    );
}

/// A collection with the built-in model: rows written without vectors
/// are embedded (the vector equals embedding the text directly), a
/// text-only search embeds its query and is hybrid, and a model missing
/// from its directory fails create / open with an error naming the file.
/// Needs `scripts/fetch-model` to have run (scripts/test runs it).
#[test]
fn embedding_model_writes_and_searches() {
    let dir = tempfile::tempdir().unwrap();
    let space = Space::new(384, Metric::Cos, DType::F32).unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    cfg.embed_model = Some("all-minilm-l6-v2".into());
    let c = Collection::create(dir.path(), cfg.clone()).unwrap();
    let texts = [
        "XML parsing library for Python",
        "terminal emulator for the X window system",
        "driver for wireless network cards",
        "GNU C compiler",
    ];
    let p = Payload {
        fields: vec![Field {
            name: "body".into(),
            ty: FieldType::String,
        }],
        columns: vec![texts.iter().map(|t| Value::Str((*t).into())).collect()],
        rows: texts.len(),
    };
    c.upsert_embedding(&[1, 2, 3, 4], &p).unwrap();
    let direct = c.embed(&[texts[2]]).unwrap();
    let stored = c.get_raw(3).unwrap();
    let stored: Vec<f32> = stored
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let cos: f32 = direct.iter().zip(&stored).map(|(a, b)| a * b).sum();
    assert!(cos > 0.9999, "{cos}");
    let hits = c
        .search_text(&Query {
            text: Some("wifi adapter"),
            vectors: None.into_iter().collect(),
            k: 2,
            fusion: None,
            depth: None,
            opts: CollectionSearch::default(),
        })
        .unwrap();
    // No word in common with row 3, yet the embedded query finds it.
    assert_eq!(hits[0].key, 3);
    assert!(hits[0].dense.is_some() && hits[0].text.is_none());
    // A null text cannot be embedded; nothing is written.
    let mut bad = p.clone();
    bad.columns[0][1] = Value::Null;
    assert!(matches!(
        c.upsert_embedding(&[10, 11, 12, 13], &bad),
        Err(StoreError::InvalidText(_))
    ));
    assert!(!c.contains(10));
    let first_row = c.get_raw(1).unwrap();
    // A payload update of the embedded text embeds the row again.
    let unit = |raw: Vec<u8>| -> Vec<f32> {
        raw.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let retext = Payload {
        fields: p.fields.clone(),
        columns: vec![vec![Value::Str(texts[0].into())]],
        rows: 1,
    };
    // A row with no text to embed is refused before anything is written.
    let mut none = retext.clone();
    none.rows = 2;
    none.columns[0] = vec![Value::Str(texts[0].into()), Value::Null];
    assert!(matches!(
        c.set_payload(&[1, 3], &none),
        Err(StoreError::InvalidText(_))
    ));
    assert_eq!(c.get_raw(1).unwrap(), first_row);
    assert_eq!(c.set_payload(&[3], &retext).unwrap(), 1);
    let want = c.embed(&[texts[0]]).unwrap();
    let cos: f32 = want
        .iter()
        .zip(unit(c.get_raw(3).unwrap()))
        .map(|(a, b)| a * b)
        .sum();
    assert!(cos > 0.9999, "{cos}");
    c.close().unwrap();
    // Model files somewhere else: create and open say which file is missing.
    let empty = tempfile::tempdir().unwrap();
    std::env::set_var("SAGITTA_MODELS", empty.path());
    let e = Collection::open(dir.path(), OpenMode::ReadOnly).unwrap_err();
    let e2 = Collection::create(tempfile::tempdir().unwrap().path(), cfg).unwrap_err();
    std::env::remove_var("SAGITTA_MODELS");
    for e in [e, e2] {
        let m = e.to_string();
        assert!(
            m.contains("model.safetensors") && m.contains("scripts/fetch-model"),
            "{m}"
        );
    }
}

/// A build or merge writes its text section merged from its inputs'
/// sections (no text analysed again): with rows overwritten and removed
/// across the inputs, every built segment's section holds what analysing
/// the texts of its rows afresh gives (documents, lengths, every term's
/// postings).
#[test]
fn built_segments_text_sections_equal_a_fresh_analysis_of_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collection::create(dir.path(), config(300)).unwrap();
    let keys: Vec<u64> = (0..1000).collect();
    for chunk in keys.chunks(250) {
        write(&c, chunk);
    }
    c.seal().unwrap();
    // Keys 100..160 rewritten with other texts (their first rows die),
    // keys 500..540 removed.
    let again: Vec<u64> = (100..160).collect();
    let vs: Vec<Vec<f32>> = again.iter().map(|&k| vector(k + 1)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    let mut p = payload(&again);
    p.columns[0] = again
        .iter()
        .map(|&k| Value::Str(text_of(k + 5000)))
        .collect();
    c.upsert_with_payload(&again, &refs, Some(&p)).unwrap();
    c.remove(&(500..540).collect::<Vec<u64>>()).unwrap();
    c.optimize().unwrap();
    c.close().unwrap();
    let spec = [TextFieldSpec::new("body", AnalyzerKind::English)];
    let analyzer = AnalyzerKind::English.analyzer();
    let mut checked = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "sgt") {
            continue;
        }
        let seg = sagitta_store::Segment::open(&path).unwrap();
        let sec = seg.text().unwrap().expect("a text section");
        let got = &sec.fields()[0];
        let pay = seg.payload().unwrap().expect("payload");
        let slots = seg.info().slots as u32;
        let mut fresh = MemText::new(&spec);
        let mut terms = std::collections::BTreeSet::new();
        for slot in 0..slots {
            if let Some(Value::Str(t)) = pay.row(pay.schema(), slot as usize).first() {
                fresh.add(0, slot, t);
                terms.extend(analyzer.term_counts(t).into_iter().map(|(t, _)| t));
            }
        }
        let want = &fresh.fields()[0];
        assert_eq!(got.docs(), want.docs(), "{path:?}");
        assert_eq!(got.total_len(), want.total_len());
        assert_eq!(got.term_count(), want.term_count());
        for s in 0..slots {
            assert_eq!(got.doc_lens().get(s), want.doc_lens().get(s), "slot {s}");
        }
        for t in &terms {
            let (mut a, mut b) = (vec![], vec![]);
            got.postings(t).for_each(|s, f| a.push((s, f)));
            want.postings(t).for_each(|s, f| b.push((s, f)));
            assert_eq!(a, b, "term {t:?}");
        }
        checked += 1;
    }
    assert!(checked >= 1);
}

/// A hybrid query reads one snapshot for both legs: while a writer adds
/// batches of new rows (and the mutable part is frozen, flushed and
/// indexed under it, parts coming and going), every row a query returns
/// was found by both legs, and the rows it returns are exactly those
/// written before some moment (a consistent cut). With the
/// legs reading the collection at different moments, rows written in
/// between came back from one leg only.
#[test]
fn hybrid_legs_read_one_snapshot_under_concurrent_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const BATCH: u64 = 5;
    const ROWS: u64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(300);
    cfg.durability = sagitta_store::Durability::Off;
    let c = Collection::create(dir.path(), cfg).unwrap();
    // Every row's text holds at least one of these words.
    let text = WORDS.join(" ");
    let qv = vector(999_999);
    let done = AtomicBool::new(false);
    let queries = std::thread::scope(|s| {
        s.spawn(|| {
            for start in (0..ROWS).step_by(BATCH as usize) {
                let keys: Vec<u64> = (start..start + BATCH).collect();
                write(&c, &keys);
            }
            done.store(true, Ordering::Release);
        });
        let mut queries = 0;
        let mut seen_rows = Vec::new();
        while !done.load(Ordering::Acquire) || queries == 0 {
            let q = Query {
                fusion: Some(Fusion::Rrf { k: 60.0 }),
                depth: Some(10_000),
                opts: CollectionSearch {
                    exact: true,
                    ..CollectionSearch::default()
                },
                ..Query::text(&text, Some(VectorRef::F32(&qv)), 10_000)
            };
            let hits = c.search_text(&q).unwrap();
            let one_leg: Vec<u64> = hits
                .iter()
                .filter(|h| h.dense.is_none() || h.text.is_none())
                .map(|h| h.key)
                .collect();
            assert!(
                one_leg.is_empty(),
                "query {queries}: {} of {} rows came from one leg only: {:?}",
                one_leg.len(),
                hits.len(),
                &one_leg[..one_leg.len().min(10)]
            );
            let mut keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
            keys.sort_unstable();
            let n = keys.len() as u64;
            // Rows are written in key order, so a cut is a prefix of
            // the keys (a batch that fills the mutable part is split at
            // the freeze, so the cut need not fall between batches).
            assert!(
                keys.iter().copied().eq(0..n),
                "query {queries}: the rows are not a prefix of those written: {n} rows, \
                 first gap at {:?}",
                keys.iter().enumerate().find(|(i, &k)| *i as u64 != k)
            );
            seen_rows.push(n);
            queries += 1;
        }
        // The queries ran while the rows arrived, not only after.
        assert!(
            seen_rows.iter().any(|&n| n > 0 && n < ROWS),
            "no query ran during the writes: {seen_rows:?}"
        );
        queries
    });
    assert!(queries > 0);
    let all = c
        .search_text(&Query::text(&text, Some(VectorRef::F32(&qv)), 10_000))
        .unwrap();
    assert_eq!(all.len() as u64, ROWS.min(10_000));
}
