//! The text section: what is scored from the mapped bytes equals what is
//! scored in memory, BM25 matches a hand computation, and damaged bytes
//! never panic.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sagitta_text::section::{encode, TextSection};
use sagitta_text::{Accumulator, AnalyzerKind, Bm25, FieldRead, MemText, TextFieldSpec, TextQuery};

fn specs() -> Vec<TextFieldSpec> {
    vec![
        TextFieldSpec::new("title", AnalyzerKind::English),
        TextFieldSpec::new("body", AnalyzerKind::Simple),
    ]
}

const DOCS: [(&str, &str); 5] = [
    ("Fast vector search", "an engine for vectors"),
    ("Python bindings", "python3 bindings for the search engine"),
    ("", "nothing in the title"),
    ("Searching searches", "search search search"),
    ("Unrelated", "a library for images"),
];

fn mem() -> MemText {
    let mut m = MemText::new(&specs());
    for (slot, (t, b)) in DOCS.iter().enumerate() {
        m.add(0, slot as u32, t);
        m.add(1, slot as u32, b);
    }
    m
}

fn scores(fields: Vec<&dyn FieldRead>, q: &str, nslots: usize) -> Vec<(u32, f32)> {
    let mut tq = TextQuery::new(q, &specs(), Bm25::default());
    tq.add_stats(fields.iter().copied());
    tq.finish();
    let mut acc = Accumulator::default();
    acc.reset(nslots);
    tq.score(fields.iter().copied(), &mut acc);
    let mut h: Vec<(u32, f32)> = acc.hits().collect();
    h.sort_by_key(|&(s, _)| s);
    h
}

#[test]
fn mapped_section_scores_like_memory() {
    let m = mem();
    let bytes = encode(&m, DOCS.len() as u32).unwrap();
    let sec = TextSection::parse(&bytes, DOCS.len() as u32).unwrap();
    assert_eq!(sec.fields().len(), 2);
    for q in ["search engine", "python", "images title", "the", "absent"] {
        let a = scores(
            m.fields().iter().map(|f| f as &dyn FieldRead).collect(),
            q,
            5,
        );
        let b = scores(
            sec.fields().iter().map(|f| f as &dyn FieldRead).collect(),
            q,
            5,
        );
        assert_eq!(a, b, "query {q:?}");
    }
    // Wrong slot count, wrong magic, unsupported version: typed errors.
    assert!(TextSection::parse(&bytes, 6).is_err());
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert!(TextSection::parse(&bad, 5).is_err());
    let mut bad = bytes.clone();
    bad[4] = 9;
    assert!(TextSection::parse(&bad, 5).is_err());
}

#[test]
fn bm25_matches_a_hand_computation() {
    // One field, "simple" analyzer: docs "a b", "a", "c c c b".
    let spec = [TextFieldSpec::new("f", AnalyzerKind::Simple)];
    let mut m = MemText::new(&spec);
    for (s, t) in ["a b", "a", "c c c b"].iter().enumerate() {
        m.add(0, s as u32, t);
    }
    let mut q = TextQuery::new("c", &spec, Bm25 { k1: 1.2, b: 0.75 });
    q.add_stats(m.fields().iter().map(|f| f as &dyn FieldRead));
    q.finish();
    let mut acc = Accumulator::default();
    acc.reset(3);
    q.score(m.fields().iter().map(|f| f as &dyn FieldRead), &mut acc);
    let hits: Vec<(u32, f32)> = acc.hits().collect();
    assert_eq!(hits.len(), 1);
    let (n, df, tf, dl, avgdl) = (3.0f64, 1.0, 3.0, 4.0, 7.0 / 3.0);
    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
    let want = idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl));
    assert_eq!(hits[0].0, 2);
    assert!(
        (f64::from(hits[0].1) - want).abs() < 1e-5,
        "{} vs {want}",
        hits[0].1
    );
}

#[test]
fn statistics_are_summed_over_parts() {
    // The same documents split over two parts score as one part.
    let spec = [TextFieldSpec::new("f", AnalyzerKind::English)];
    let texts = [
        "rust search",
        "vector search engine",
        "rust",
        "engines of search",
    ];
    let mut one = MemText::new(&spec);
    let (mut p1, mut p2) = (MemText::new(&spec), MemText::new(&spec));
    for (s, t) in texts.iter().enumerate() {
        one.add(0, s as u32, t);
        if s < 2 {
            p1.add(0, s as u32, t);
        } else {
            p2.add(0, s as u32 - 2, t);
        }
    }
    let mut q = TextQuery::new("rust search engine", &spec, Bm25::default());
    for p in [&p1, &p2] {
        q.add_stats(p.fields().iter().map(|f| f as &dyn FieldRead));
    }
    q.finish();
    let mut split = Vec::new();
    for (base, p) in [(0u32, &p1), (2, &p2)] {
        let mut acc = Accumulator::default();
        acc.reset(2);
        q.score(p.fields().iter().map(|f| f as &dyn FieldRead), &mut acc);
        split.extend(acc.hits().map(|(s, x)| (s + base, x)));
    }
    split.sort_by_key(|&(s, _)| s);
    let mut q1 = TextQuery::new("rust search engine", &spec, Bm25::default());
    q1.add_stats(one.fields().iter().map(|f| f as &dyn FieldRead));
    q1.finish();
    let mut acc = Accumulator::default();
    acc.reset(4);
    q1.score(one.fields().iter().map(|f| f as &dyn FieldRead), &mut acc);
    let mut whole: Vec<(u32, f32)> = acc.hits().collect();
    whole.sort_by_key(|&(s, _)| s);
    assert_eq!(split, whole);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any byte changed, or the section cut short, gives an error or
    /// some answer: never a panic.
    #[test]
    fn damaged_sections_never_panic(at in 0usize..4096, byte in any::<u8>(), cut in 0usize..4096) {
        let bytes = encode(&mem(), 5).unwrap();
        let mut b = bytes.clone();
        let i = at % b.len();
        b[i] = byte;
        b.truncate(b.len() - cut % b.len());
        if let Ok(sec) = TextSection::parse(&b, 5) {
            for q in ["search engine", "python bindings", "images"] {
                let fields: Vec<&dyn FieldRead> =
                    sec.fields().iter().map(|f| f as &dyn FieldRead).collect();
                let _ = scores(fields.clone(), q, 5);
                // The pruned search too, on whatever order the slots are in.
                let mut tq = TextQuery::new(q, &specs(), Bm25::default());
                tq.add_stats(fields.iter().copied());
                tq.finish();
                let mut acc = Accumulator::default();
                let mut out = Vec::new();
                for depth in [1, 2, 5] {
                    let want = sagitta_text::Wanted { depth, floor: 0.0 };
                    tq.top(fields.iter().copied(), 5, want, |_| true, &mut acc, &mut out);
                }
            }
        }
    }
}

#[test]
fn analysed_apart_then_added_equals_add() {
    // What the write path does: analyse a batch in parallel under a shared
    // reference (here in reverse order), then add in slot order.
    let direct = mem();
    let mut split = MemText::new(&specs());
    type Analysed = (u32, usize, sagitta_text::TermCounts);
    let mut analysed: Vec<Analysed> = DOCS
        .iter()
        .enumerate()
        .rev()
        .flat_map(|(slot, (t, b))| {
            [
                (slot as u32, 0, split.analyze(0, t)),
                (slot as u32, 1, split.analyze(1, b)),
            ]
        })
        .collect();
    analysed.sort_by_key(|&(slot, fi, _)| (slot, fi));
    for (slot, fi, counts) in analysed {
        split.add_counts(fi, slot, &counts);
    }
    // A slot is indexed once: a second document for it is ignored.
    split.add_counts(0, 0, &split.analyze(0, "python python python"));
    // An unknown field analyses to nothing and adds nothing.
    assert!(split.analyze(9, "python").is_empty());
    split.add_counts(9, 0, &split.analyze(0, "python"));
    let n = DOCS.len() as u32;
    assert_eq!(encode(&direct, n).unwrap(), encode(&split, n).unwrap());
    assert_eq!(split.fields()[0].docs(), direct.fields()[0].docs());
}

#[test]
fn documents_added_out_of_slot_order_encode_like_in_order() {
    // In slot order the postings are encoded as they are held; out of
    // order they are sorted first: the same bytes either way.
    let in_order = mem();
    let mut shuffled = MemText::new(&specs());
    for slot in [3usize, 0, 4, 1, 2] {
        let (t, b) = DOCS[slot];
        shuffled.add(0, slot as u32, t);
        shuffled.add(1, slot as u32, b);
    }
    let n = DOCS.len() as u32;
    assert_eq!(encode(&shuffled, n).unwrap(), encode(&in_order, n).unwrap());
    let bytes = encode(&shuffled, n).unwrap();
    let sec = TextSection::parse(&bytes, n).unwrap();
    assert!(sec.fields().iter().all(|f| f.postings_sorted()));
}
