//! Times a part's best BM25 documents found two ways over the same mapped
//! text section: every posting scored term at a time then the best kept
//! (what the store did before MaxScore), and [`TextQuery::top`]
//! (MaxScore), checking that both give the same slots and scores.
//!
//! `cargo run --release -p sagitta-text --example bm25_top -- CORPUS QUERIES [DEPTH] [ROUNDS] [en|simple]`
//! where CORPUS and QUERIES are text files, one document or query a line
//! (e.g. debian-minilm's `base_texts.txt.gz` and `query_texts.txt.gz`,
//! decompressed).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use sagitta_text::section::{encode, TextSection};
use sagitta_text::{
    Accumulator, AnalyzerKind, Bm25, FieldRead, MemText, TextFieldSpec, TextQuery, Wanted,
};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let corpus = std::fs::read_to_string(&args[1]).unwrap();
    let queries = std::fs::read_to_string(&args[2]).unwrap();
    let depth: usize = args.get(3).map_or(20, |s| s.parse().unwrap());
    let rounds: usize = args.get(4).map_or(3, |s| s.parse().unwrap());
    let kind = AnalyzerKind::parse(args.get(5).map_or("en", |s| s.as_str())).unwrap();
    let specs = [TextFieldSpec::new("text", kind)];
    let mut m = MemText::new(&specs);
    let docs: Vec<&str> = corpus.lines().collect();
    for (i, d) in docs.iter().enumerate() {
        m.add(0, i as u32, d);
    }
    let n = docs.len();
    let bytes = encode(&m, n as u32).unwrap();
    let sec = TextSection::parse(&bytes, n as u32).unwrap();
    let fields: Vec<&dyn FieldRead> = sec.fields().iter().map(|f| f as &dyn FieldRead).collect();
    let qs: Vec<TextQuery> = queries
        .lines()
        .map(|t| {
            let mut q = TextQuery::new(t, &specs, Bm25::default());
            q.add_stats(fields.iter().copied());
            q.finish();
            q
        })
        .collect();
    let mut acc = Accumulator::default();
    let keep = |_s: u32| true;
    let want = Wanted { depth, floor: 0.0 };
    let exhaustive = |q: &TextQuery, acc: &mut Accumulator| -> Vec<(u32, f32)> {
        acc.reset(n);
        q.score(fields.iter().copied(), acc);
        let mut h: Vec<(u32, f32)> = acc.hits().collect();
        let cmp = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1);
        if h.len() > depth {
            h.select_nth_unstable_by(depth - 1, cmp);
            let least = h[depth - 1].1;
            h.retain(|x| x.1 >= least);
        }
        h
    };
    let mut wrong = 0;
    for q in &qs {
        let mut a = exhaustive(q, &mut acc);
        let mut b = Vec::new();
        q.top(fields.iter().copied(), n, want, keep, &mut acc, &mut b);
        a.sort_by_key(|x| x.0);
        b.sort_by_key(|x| x.0);
        let bits = |v: &[(u32, f32)]| v.iter().map(|x| (x.0, x.1.to_bits())).collect::<Vec<_>>();
        if bits(&a) != bits(&b) {
            wrong += 1;
        }
    }
    println!(
        "{} documents, {} queries, depth {depth}, analyzer {kind}: {wrong} queries with different results",
        n,
        qs.len()
    );
    for r in 0..rounds {
        let t = Instant::now();
        let mut sink = 0usize;
        if std::env::var_os("ONLY_TOP").is_none() {
            for q in &qs {
                sink += exhaustive(q, &mut acc).len();
            }
        }
        let ex = t.elapsed().as_secs_f64() * 1e6 / qs.len() as f64;
        let t = Instant::now();
        for q in &qs {
            let mut b = Vec::new();
            q.top(fields.iter().copied(), n, want, keep, &mut acc, &mut b);
            sink += b.len();
        }
        let ms = t.elapsed().as_secs_f64() * 1e6 / qs.len() as f64;
        println!(
            "round {r}: every posting {ex:.1} us/query, MaxScore {ms:.1} us/query ({:.2}x) [{sink}]",
            ex / ms
        );
    }
}
