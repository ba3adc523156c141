//! The best documents found by MaxScore ([`TextQuery::top`]) are exactly
//! those of scoring every posting (term at a time, then sorting): the same
//! slots, the same `f32` scores bit for bit, ties with the last kept
//! score included, under any accepted-slot filter, from memory (slots
//! added in order or not) and from a mapped section.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sagitta_text::section::{encode, TextSection};
use sagitta_text::{
    Accumulator, AnalyzerKind, Bm25, FieldRead, MemText, TextFieldSpec, TextQuery, Wanted,
};

fn specs() -> Vec<TextFieldSpec> {
    vec![
        TextFieldSpec::new("title", AnalyzerKind::Simple),
        TextFieldSpec::new("body", AnalyzerKind::Simple),
    ]
}

/// A word of a Zipf-like vocabulary: word 0 in most documents, high
/// numbers rare.
fn word(x: u32) -> String {
    format!("w{}", x * x / 64)
}

fn query(fields: &[&dyn FieldRead], text: &str, params: Bm25) -> TextQuery {
    let mut q = TextQuery::new(text, &specs(), params);
    q.add_stats(fields.iter().copied());
    q.finish();
    q
}

/// Every accepted hit scored term at a time, best first.
fn scored(
    q: &TextQuery,
    fields: &[&dyn FieldRead],
    nslots: usize,
    keep: &dyn Fn(u32) -> bool,
) -> Vec<(u32, f32)> {
    let mut acc = Accumulator::default();
    acc.reset(nslots);
    q.score(fields.iter().copied(), &mut acc);
    let mut hits: Vec<(u32, f32)> = acc.hits().filter(|&(s, _)| keep(s)).collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1));
    hits
}

/// The `depth` best of `hits` (best first) and those tied with the last
/// of them, at or above `floor`, sorted by slot.
fn oracle(mut hits: Vec<(u32, f32)>, want: Wanted) -> Vec<(u32, u32)> {
    if want.depth > 0 && hits.len() > want.depth {
        let least = hits[want.depth - 1].1;
        hits.retain(|h| h.1 >= least);
    }
    hits.retain(|h| h.1 >= want.floor);
    let mut v: Vec<(u32, u32)> = hits.iter().map(|&(s, x)| (s, x.to_bits())).collect();
    v.sort_unstable();
    v
}

fn pruned(
    q: &TextQuery,
    fields: &[&dyn FieldRead],
    nslots: usize,
    want: Wanted,
    keep: &dyn Fn(u32) -> bool,
) -> Vec<(u32, u32)> {
    let mut acc = Accumulator::default();
    let mut out = Vec::new();
    q.top(
        fields.iter().copied(),
        nslots,
        want,
        keep,
        &mut acc,
        &mut out,
    );
    let mut v: Vec<(u32, u32)> = out.iter().map(|&(s, x)| (s, x.to_bits())).collect();
    v.sort_unstable();
    v
}

#[derive(Debug, Clone)]
struct Case {
    docs: Vec<(Vec<u32>, Vec<u32>)>,
    query: Vec<u32>,
    depth: usize,
    keep_mod: u32,
    params: (f32, f32),
    reversed: bool,
    /// The floor: the score at this rank of every accepted hit (what an
    /// earlier part's `depth`-th best could be), or none.
    floor_rank: Option<usize>,
}

/// Parts of `ndocs` documents over a vocabulary of `vocab` draws (titles
/// of up to 5 words, bodies of `body` words); with `common`, two words in
/// most documents and in every query.
fn cases(
    vocab: u32,
    ndocs: std::ops::Range<usize>,
    body: std::ops::Range<usize>,
    depths: std::ops::Range<usize>,
    params: Vec<(f32, f32)>,
    common: bool,
) -> impl Strategy<Value = Case> {
    let doc = (
        prop::collection::vec(0u32..vocab, 0..6),
        prop::collection::vec(0u32..vocab, body),
    );
    (
        prop::collection::vec(doc, ndocs),
        prop::collection::vec(0u32..vocab, 1..12),
        depths,
        1u32..5,
        prop::sample::select(params),
        any::<bool>(),
        prop::option::of(0usize..60),
    )
        .prop_map(
            move |(mut docs, mut query, depth, keep_mod, params, reversed, floor_rank)| {
                if common {
                    for (i, d) in docs.iter_mut().enumerate() {
                        if i % 7 != 0 {
                            d.1.push(0);
                        }
                        if i % 2 == 0 {
                            d.1.push(10);
                        }
                    }
                    query.extend([0, 10]);
                }
                Case {
                    docs,
                    query,
                    depth,
                    keep_mod,
                    params,
                    reversed,
                    floor_rank,
                }
            },
        )
}

fn text(words: &[u32]) -> String {
    words.iter().map(|&w| word(w)).collect::<Vec<_>>().join(" ")
}

fn check(c: &Case) {
    let n = c.docs.len();
    let mut m = MemText::new(&specs());
    let order: Vec<usize> = if c.reversed {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    for &i in &order {
        let (t, b) = &c.docs[i];
        m.add(0, i as u32, &text(t));
        m.add(1, i as u32, &text(b));
    }
    let bytes = encode(&m, n as u32).unwrap();
    let sec = TextSection::parse(&bytes, n as u32).unwrap();
    let params = Bm25 {
        k1: c.params.0,
        b: c.params.1,
    };
    let qtext = text(&c.query);
    let keep_mod = c.keep_mod;
    let keep = move |s: u32| s % keep_mod != 1;
    let mem_fields: Vec<&dyn FieldRead> = m.fields().iter().map(|f| f as &dyn FieldRead).collect();
    let sec_fields: Vec<&dyn FieldRead> =
        sec.fields().iter().map(|f| f as &dyn FieldRead).collect();
    for fields in [&mem_fields, &sec_fields] {
        let q = query(fields, &qtext, params);
        let hits = scored(&q, fields, n, &keep);
        let floor = match c.floor_rank {
            Some(r) if !hits.is_empty() => hits[r % hits.len()].1,
            _ => 0.0,
        };
        let w = Wanted {
            depth: c.depth,
            floor,
        };
        let want = oracle(hits, w);
        let got = pruned(&q, fields, n, w, &keep);
        assert_eq!(got, want, "query {qtext:?}, {w:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn maxscore_returns_what_scoring_every_posting_returns(c in cases(
        80,
        1..300,
        0..30,
        0..25,
        vec![(0.9, 0.4), (1.2, 0.75), (0.0, 0.5), (2.0, 0.0), (0.5, 1.0)],
        false,
    )) {
        check(&c);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Larger parts, where few documents found by the rare terms are left
    /// to look up in the common terms' long lists.
    #[test]
    fn maxscore_on_larger_parts(c in cases(
        200,
        1000..4000,
        1..16,
        1..30,
        vec![(0.9, 0.4), (1.2, 0.75), (0.0, 0.5)],
        true,
    )) {
        check(&c);
    }
}

#[test]
fn many_ties_and_a_common_word() {
    // 2,000 documents: every one has the common word once, and blocks of
    // identical documents tie exactly.
    let mut docs = Vec::new();
    for i in 0..2000u32 {
        let body = match i % 10 {
            0 => vec![0, 40],
            1 => vec![0, 40, 40],
            2 => vec![0, 70],
            _ => vec![0, 5 + i % 7],
        };
        docs.push((vec![i % 3], body));
    }
    for depth in [1, 3, 10, 50, 250] {
        for query in [
            vec![0, 40],
            vec![0, 70, 40],
            vec![0],
            vec![0, 1, 2, 40, 70, 79],
        ] {
            check(&Case {
                docs: docs.clone(),
                query,
                depth,
                keep_mod: 4,
                params: (0.9, 0.4),
                reversed: false,
                floor_rank: (depth == 10).then_some(30),
            });
        }
    }
}
