#![allow(clippy::unwrap_used)]
#[path = "../tests/common/mod.rs"]
mod common;
use sagitta_embed::*;
fn main() {
    let e = Embedder::open(DEFAULT_MODEL)
        .unwrap()
        .with_max_tokens(
            std::env::var("MT")
                .map(|s| s.parse().unwrap())
                .unwrap_or(256),
        )
        .unwrap();
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(300);
    let texts =
        common::read_gz_lines(std::path::Path::new("data/sample/base_texts.txt.gz"), n).unwrap();
    let (_, d, exp) =
        common::read_f16_npy(std::path::Path::new("data/sample/base.f16.npy"), n).unwrap();
    for (i, t) in texts.iter().enumerate() {
        let toks = e.tokenize(t).unwrap().len();
        let v = e.embed_one(t).unwrap();
        let c = common::cosine(&v, &exp[i * d..(i + 1) * d]);
        // try truncations
        if c < 0.999 {
            let ids = e.tokenize(t).unwrap();
            println!("row {i} toks {toks} cos {c:.5} chars {}", t.len());
            let _ = ids;
        }
    }
}
