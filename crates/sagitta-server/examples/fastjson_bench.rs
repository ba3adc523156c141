//! Time to read a search body (one 384-float query written as Python's
//! `json.dumps` writes f32 components: their shortest f64 text) with
//! serde_json and with the server's fast path (`fastjson`), interleaved:
//! `cargo run --release -p sagitta-server --example fastjson_bench`.

use sagitta_server::fastjson;
use sagitta_server::ops::SearchRequest;
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
    println!(
        "body: {} bytes, {} numbers",
        bodies[0].len(),
        bodies[0].matches(',').count()
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
        println!(
            "round {round}: serde_json {:.1} us, fast path {:.1} us per body ({:.2}x)",
            t[0],
            t[1],
            t[0] / t[1]
        );
    }
}
