//! Times a contest peer's request path and search (gabrielrauch/rinha-2026:
//! `payload::extract`, `feature::vectorize_payload`, `knn::fraud_count`)
//! the way `sagitta-fraud check` times ours. Sagitta's own code, built by
//! peer.sh as a separate crate against the peer's unmodified sources; it is
//! never part of Sagitta's workspace.
//!
//!   rauch_bench BLOB BODIES VECTORS.i16
//!
//! BODIES: one request body per line (the 6,100 test requests); VECTORS:
//! the same requests' vectors as 14 little-endian i16 codes each (value x
//! 10^4), as `sagitta-fraud check --vectors` writes them. Prints, per
//! request, parse + vector + search (a second pass, the first warms the
//! branch predictors), the search alone over the vectors, and both cold:
//! 64 MiB of other memory read before each of the first 1000 requests.

use std::time::Instant;

fn summary(t: &mut [f64]) -> String {
    t.sort_by(f64::total_cmp);
    let at = |p: f64| t[((t.len() - 1) as f64 * p) as usize];
    format!(
        "mean {:.2} us, p50 {:.2} us, p99 {:.2} us, max {:.1} us",
        t.iter().sum::<f64>() / t.len() as f64,
        at(0.5),
        at(0.99),
        t[t.len() - 1]
    )
}

fn thrash(buf: &mut [u8]) {
    let mut acc = 0u8;
    for (i, b) in buf.iter_mut().enumerate().step_by(64) {
        acc = acc.wrapping_add(*b);
        if i % 4096 == 0 {
            *b = acc;
        }
    }
    std::hint::black_box(acc);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 4, "usage: rauch_bench BLOB BODIES VECTORS.i16");
    let blob = server::blob::Blob::open(args[1].as_ref()).expect("open the blob");
    let text = std::fs::read(&args[2]).expect("read the bodies");
    let bodies: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let raw = std::fs::read(&args[3]).expect("read the vectors");
    let vectors: Vec<shared::QueryVector> = raw
        .chunks_exact(28)
        .map(|c| {
            let mut q = [0i16; shared::PACKED_DIMS];
            for (d, x) in c.chunks_exact(2).enumerate() {
                q[d] = i16::from_le_bytes([x[0], x[1]]);
            }
            q
        })
        .collect();
    assert_eq!(
        bodies.len(),
        vectors.len(),
        "bodies and vectors differ in count"
    );

    let score = |body: &[u8]| -> u8 {
        let p = server::payload::extract(body).expect("a body the peer parses");
        let q = server::feature::vectorize_payload(&blob, &p).expect("a body the peer vectorizes");
        server::knn::fraud_count(&blob, &q)
    };
    let (mut whole, mut search) = (Vec::new(), Vec::new());
    let mut denied = 0;
    for pass in 0..2 {
        whole.clear();
        denied = 0;
        for b in &bodies {
            let t = Instant::now();
            let f = score(b);
            whole.push(t.elapsed().as_nanos() as f64 / 1e3);
            denied += usize::from(f >= 3);
        }
        search.clear();
        for q in &vectors {
            let t = Instant::now();
            std::hint::black_box(server::knn::fraud_count(&blob, q));
            search.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        let _ = pass;
    }
    println!(
        "{} requests ({denied} denied): extract + vectorize + search per request: {}; search alone: {}",
        bodies.len(),
        summary(&mut whole),
        summary(&mut search)
    );
    let mut evict = vec![1u8; 64 << 20];
    whole.clear();
    search.clear();
    for (b, q) in bodies.iter().zip(&vectors).take(1000) {
        thrash(&mut evict);
        let t = Instant::now();
        std::hint::black_box(score(b));
        whole.push(t.elapsed().as_nanos() as f64 / 1e3);
        thrash(&mut evict);
        let t = Instant::now();
        std::hint::black_box(server::knn::fraud_count(&blob, q));
        search.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    println!(
        "cold (64 MiB read before each, {} requests): extract + vectorize + search {}; search alone {}",
        whole.len(),
        summary(&mut whole),
        summary(&mut search)
    );
}
