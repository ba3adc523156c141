//! Time to read a search body (one 384-float query written as Python's
//! `json.dumps` writes f32 components: their shortest f64 text) and an
//! upsert body (1,000 such rows) with serde_json and with the server's
//! fast path (`fastjson`), interleaved:
//! `cargo run --release -p sagitta-server --example fastjson_bench`.

use sagitta_server::api::{SearchRequest, UpsertRequest};
use sagitta_server::fastjson;
use std::time::Instant;

fn main() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let bodies: Vec<String> = (0..200)
        .map(|_| {
            let v: Vec<f64> = (0..384)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (((x >> 40) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2) as f64
                })
                .collect();
            serde_json::json!({"vector": v, "k": 10}).to_string()
        })
        .collect();
    let rows: Vec<serde_json::Value> = bodies[..200]
        .iter()
        .map(|b| serde_json::from_str::<serde_json::Value>(b).expect("body")["vector"].clone())
        .collect();
    let upsert = serde_json::json!({
        "ids": (0..1000).collect::<Vec<u64>>(),
        "vectors": (0..1000).map(|i| rows[i % rows.len()].clone()).collect::<Vec<_>>(),
    })
    .to_string();
    println!(
        "search body: {} bytes; upsert body: {} bytes",
        bodies[0].len(),
        upsert.len()
    );
    for round in 1..=5 {
        let mut t = [0f64; 2];
        for (which, slot) in t.iter_mut().enumerate() {
            let t0 = Instant::now();
            for _ in 0..5 {
                for b in &bodies {
                    let r: SearchRequest = if which == 0 {
                        serde_json::from_slice(b.as_bytes()).expect("serde")
                    } else {
                        fastjson::from_slice(b.as_bytes()).expect("fast")
                    };
                    std::hint::black_box(r);
                }
            }
            *slot = t0.elapsed().as_secs_f64() * 1e6 / (5 * bodies.len()) as f64;
        }
        let mut u = [0f64; 2];
        for (which, slot) in u.iter_mut().enumerate() {
            let t0 = Instant::now();
            for _ in 0..3 {
                let r: UpsertRequest = if which == 0 {
                    serde_json::from_slice(upsert.as_bytes()).expect("serde")
                } else {
                    fastjson::from_slice(upsert.as_bytes()).expect("fast")
                };
                std::hint::black_box(r);
            }
            *slot = t0.elapsed().as_secs_f64() * 1e3 / 3.0;
        }
        println!(
            "round {round}: search body: serde_json {:.1} us, fast path {:.1} us ({:.2}x); \
             upsert body: serde_json {:.2} ms, fast path {:.2} ms ({:.2}x)",
            t[0],
            t[1],
            t[0] / t[1],
            u[0],
            u[1],
            u[0] / u[1]
        );
    }
}
