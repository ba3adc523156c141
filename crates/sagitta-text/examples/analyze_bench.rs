//! Analysis throughput: `cargo run --release -p sagitta-text --example
//! analyze_bench -- TEXTS.txt [ROUNDS]` (one document per line) times the
//! English analyzer's `counts` over every line and indexing the
//! counts into a `MemText`, best of the rounds.
use sagitta_text::{AnalyzerKind, MemText, TextFieldSpec};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: analyze_bench TEXTS.txt [ROUNDS]");
    let rounds: usize = args.next().map_or(5, |r| r.parse().expect("rounds"));
    let text = std::fs::read_to_string(&path).expect("read the texts");
    let docs: Vec<&str> = text.lines().collect();
    let spec = [TextFieldSpec::new("body", AnalyzerKind::English)];
    let (mut analyse, mut index) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        let mut mem = MemText::new(&spec);
        let t = Instant::now();
        let counts: Vec<_> = docs.iter().map(|d| mem.analyze(0, d)).collect();
        analyse = analyse.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for (slot, c) in counts.into_iter().enumerate() {
            mem.add_counts(0, slot as u32, &c);
        }
        index = index.min(t.elapsed().as_secs_f64());
    }
    let mb = text.len() as f64 / 1e6;
    println!(
        "{} documents, {mb:.1} MB: analyse {:.0} ms ({:.1} MB/s), index {:.0} ms; best of {rounds}",
        docs.len(),
        analyse * 1e3,
        mb / analyse,
        index * 1e3
    );
}
