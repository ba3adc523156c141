//! The optimizer's Flat and IVF-RaBitQ tasks write their rows from the
//! mapped inputs into the new file without an index of every row: a Flat
//! merge leaves exactly the live rows, each vector byte for byte as
//! written (zero-padded to the stride), with their payload and text; an
//! IVF build trained on the sample keeps the model an index trained on
//! every row gets, and its recall against the Flat oracle.

#![allow(clippy::unwrap_used)]

use sagitta_index::{
    DType, GraphView, Index, IndexKind, IndexRead, IndexWrite, IvfModel, Metric, SearchOptions,
    Space, VectorRef,
};
use sagitta_store::{
    AnalyzerKind, Collection, CollectionConfig, CollectionSearch, Field, FieldType, Payload,
    Segment, TextFieldSpec, Value,
};
use sagitta_text::{FieldRead, MemText};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn vector(key: u64, dims: usize) -> Vec<f32> {
    let mut z = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dims)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn text_of(key: u64) -> String {
    const WORDS: [&str; 8] = [
        "vector", "search", "engine", "merge", "segment", "disk", "memory", "rows",
    ];
    (0..3 + key % 5)
        .map(|i| WORDS[((key / 3 + i * 7) % 8) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn payload(keys: &[u64], salt: u64) -> Payload {
    Payload {
        fields: vec![
            Field {
                name: "body".into(),
                ty: FieldType::String,
            },
            Field {
                name: "n".into(),
                ty: FieldType::Int64,
            },
        ],
        columns: vec![
            keys.iter()
                .map(|&k| Value::Str(text_of(k + salt)))
                .collect(),
            keys.iter()
                .map(|&k| Value::Int((k + salt) as i64))
                .collect(),
        ],
        rows: keys.len(),
    }
}

fn upsert(c: &Collection, keys: &[u64], dims: usize, salt: u64) {
    let vs: Vec<Vec<f32>> = keys.iter().map(|&k| vector(k + salt, dims)).collect();
    let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
    c.upsert_with_payload(keys, &refs, Some(&payload(keys, salt)))
        .unwrap();
}

/// The collection's current segments, opened from their files.
fn segments(c: &Collection, dir: &Path) -> Vec<Segment> {
    c.parts()
        .iter()
        .map(|p| Segment::open(&dir.join(p.file.as_ref().expect("sealed"))).unwrap())
        .collect()
}

/// The text section of `seg` equals an analysis of its payload's texts
/// afresh (documents, lengths, postings).
fn check_text(seg: &Segment) {
    let spec = [TextFieldSpec::new("body", AnalyzerKind::English)];
    let analyzer = AnalyzerKind::English.analyzer();
    let sec = seg.text().unwrap().expect("a text section");
    let got = &sec.fields()[0];
    let pay = seg.payload().unwrap().expect("payload");
    let slots = seg.info().slots as u32;
    let mut fresh = MemText::new(&spec);
    let mut terms = BTreeSet::new();
    for slot in 0..slots {
        if let Some(Value::Str(t)) = pay.row(pay.schema(), slot as usize).first() {
            fresh.add(0, slot, t);
            terms.extend(analyzer.term_counts(t).into_iter().map(|(t, _)| t));
        }
    }
    let want = &fresh.fields()[0];
    assert_eq!(got.docs(), want.docs());
    assert_eq!(got.total_len(), want.total_len());
    for t in &terms {
        let (mut a, mut b) = (vec![], vec![]);
        got.postings(t).for_each(|s, f| a.push((s, f)));
        want.postings(t).for_each(|s, f| b.push((s, f)));
        assert_eq!(a, b, "term {t:?}");
    }
}

#[test]
fn a_flat_merge_writes_exactly_the_live_rows_byte_for_byte() {
    // 13 dims: 52 bytes a row in a 64-byte stride, so the padding shows.
    let dims = 13;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    assert!(space.stride() > space.vector_bytes());
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.kind = IndexKind::Flat;
    cfg.segment_size = (150 * cfg.bytes_per_vector()).max(4096);
    cfg.text = vec![TextFieldSpec::new("body", AnalyzerKind::English)];
    let c = Collection::create(dir.path(), cfg).unwrap();
    // key -> salt of its live row.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    let keys: Vec<u64> = (0..1200).collect();
    for chunk in keys.chunks(100) {
        upsert(&c, chunk, dims, 0);
        live.extend(chunk.iter().map(|&k| (k, 0)));
    }
    c.seal().unwrap();
    // Rows replaced (in sealed and in later parts) and removed.
    let again: Vec<u64> = (100..180).chain(1150..1200).collect();
    upsert(&c, &again, dims, 10_000);
    live.extend(again.iter().map(|&k| (k, 10_000)));
    let gone: Vec<u64> = (0..1200).step_by(7).collect();
    c.remove(&gone).unwrap();
    for k in &gone {
        live.remove(k);
    }
    c.optimize().unwrap();
    c.compact().unwrap();

    let segs = segments(&c, dir.path());
    assert!(!segs.is_empty());
    let mut seen = BTreeMap::new();
    let mut buf = vec![0u8; space.stride()];
    for seg in &segs {
        seg.verify().unwrap();
        assert_eq!(seg.info().kind, IndexKind::Flat);
        // No dead slot is written: every slot is a live row.
        assert_eq!(seg.info().live, seg.info().slots);
        let pay = seg.payload().unwrap().expect("payload");
        for slot in 0..seg.slot_count() as u32 {
            assert!(seg.is_live(slot));
            let key = seg.key(slot);
            let salt = *live
                .get(&key)
                .unwrap_or_else(|| panic!("key {key} is not live"));
            assert!(seen.insert(key, slot).is_none(), "key {key} twice");
            space
                .encode(VectorRef::F32(&vector(key + salt, dims)), &mut buf)
                .unwrap();
            let got = seg.vector(slot);
            assert_eq!(
                &got[..space.stride()],
                &buf[..],
                "key {key}: the stored bytes"
            );
            assert!(got[space.vector_bytes()..].iter().all(|&b| b == 0));
            let row = pay.row(pay.schema(), slot as usize);
            assert_eq!(row[0], Value::Str(text_of(key + salt)), "key {key}");
            assert_eq!(row[1], Value::Int((key + salt) as i64), "key {key}");
        }
        check_text(seg);
    }
    assert_eq!(seen.len(), live.len(), "every live row, once");
    // Searches and reads agree after a reopen from the files alone.
    c.close().unwrap();
    let c = Collection::open(dir.path(), sagitta_store::OpenMode::ReadOnly).unwrap();
    assert_eq!(c.len(), live.len());
    for (&k, &salt) in live.iter().step_by(37) {
        let raw = c.get_raw(k).unwrap();
        assert_eq!(
            space.decode_floats(&raw),
            Some(vector(k + salt, dims)),
            "key {k}"
        );
    }
}

#[test]
fn an_ivf_build_from_the_sample_keeps_the_model_and_the_recall() {
    let dims = 32;
    let space = Space::new(dims, Metric::L2, DType::F32).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = CollectionConfig::new(space);
    cfg.kind = IndexKind::IvfRq;
    cfg.segment_size = (3000 * cfg.bytes_per_vector()).max(4096);
    // 40 partitions x 256 rows: the model sees 10,240 of the 20,000.
    cfg.ivf.partition_size = 500;
    // k-means sums per thread: one build thread, and one for the oracle
    // below, so both add in the same order.
    cfg.optimizer_threads = 1;
    let c = Collection::create(dir.path(), cfg).unwrap();
    let ivf = c.config().ivf;
    let n = 20_000u64;
    let keys: Vec<u64> = (0..n).collect();
    for chunk in keys.chunks(1000) {
        let vs: Vec<Vec<f32>> = chunk.iter().map(|&k| vector(k, dims)).collect();
        let refs: Vec<VectorRef<'_>> = vs.iter().map(|v| VectorRef::F32(v)).collect();
        c.upsert(chunk, &refs).unwrap();
    }
    c.remove(&[5]).unwrap();
    c.optimize().unwrap();
    c.compact().unwrap();
    let segs = segments(&c, dir.path());
    assert_eq!(segs.len(), 1, "one IVF segment");
    let seg = &segs[0];
    seg.verify().unwrap();
    assert_eq!(seg.info().kind, IndexKind::IvfRq);
    let slots = seg.slot_count();
    assert_eq!(slots as u64, n - 1);
    assert!(
        ivf.training_sample(slots).len() < slots,
        "trained on a sample"
    );

    // The model an index trained on every row (in slot order) gets.
    let all: Vec<f32> = (0..slots as u32)
        .flat_map(|s| space.model_floats(seg.vector(s)).unwrap())
        .collect();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let want = one
        .install(|| IvfModel::train(&all, dims, Metric::L2, &ivf, &mut |_| {}))
        .unwrap();
    let got = seg.ivf_model().unwrap();
    assert_eq!(got.partitions(), want.partitions());
    assert!(
        got == &want,
        "the model differs: centroids {:?}... vs {:?}...",
        &got.centroids()[..4],
        &want.centroids()[..4]
    );

    // Recall@10 against the Flat oracle, beside an IVF index built in
    // memory from every row (what the optimizer built before), fed in the
    // segment's slot order (so it trains the same model).
    let flat = Index::flat(space).unwrap();
    let ivf_index = Index::ivf_rq(space, ivf).unwrap();
    let (mut slot_keys, mut rows) = (Vec::new(), Vec::new());
    for s in 0..slots as u32 {
        let k = seg.key(s);
        let v = vector(k, dims);
        flat.add(k, VectorRef::F32(&v)).unwrap();
        slot_keys.push(k);
        rows.extend(v.iter().flat_map(|x| x.to_ne_bytes()));
    }
    one.install(|| ivf_index.upsert_encoded_batch(&slot_keys, &rows, 1))
        .unwrap();
    assert_eq!(&*ivf_index.ivf_model().unwrap(), got);
    let (mut hit, mut hit_index, mut total) = (0, 0, 0);
    for q in (100_000..100_200u64).map(|k| vector(k, dims)) {
        let q = VectorRef::F32(&q);
        let truth = flat.search(q, 10, &SearchOptions::default()).unwrap();
        let opts = CollectionSearch {
            nprobe: Some(40),
            refine: Some(300),
            ..Default::default()
        };
        let got = c.search(&[q], 10, &opts).unwrap()[0].clone();
        let idx = ivf_index
            .search(
                q,
                10,
                &SearchOptions {
                    nprobe: Some(40),
                    refine: Some(300),
                    ..Default::default()
                },
            )
            .unwrap();
        let found = |g: &[u64]| truth.iter().filter(|t| g.contains(&t.key)).count();
        hit += found(&got.iter().map(|g| g.key).collect::<Vec<_>>());
        hit_index += found(&idx.iter().map(|g| g.key).collect::<Vec<_>>());
        total += truth.len();
    }
    let recall = hit as f64 / total as f64;
    let recall_index = hit_index as f64 / total as f64;
    assert!(
        recall >= 0.95 && (recall - recall_index).abs() <= 0.01,
        "recall@10 {recall} (an index of every row: {recall_index})"
    );
}
