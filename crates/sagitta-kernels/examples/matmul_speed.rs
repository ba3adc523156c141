//! Speed of [`PackedMatrix::matmul`] on MiniLM's layer shapes, per weight
//! type and row count, as GFLOP/s on one thread:
//! `cargo run --release -p sagitta-kernels --example matmul_speed [ROWS..]`.

use std::time::Instant;

use sagitta_kernels::matmul::{PackedMatrix, WeightType};

fn main() {
    let rows: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rows = if rows.is_empty() {
        vec![1, 6, 12, 30, 512]
    } else {
        rows
    };
    println!("isa {}", sagitta_kernels::isa().name());
    // MiniLM-L6: QKV 384x1152, out 384x384, ff1 384x1536, ff2 1536x384.
    let shapes = [(384, 1152), (384, 384), (384, 1536), (1536, 384)];
    for ty in [WeightType::F32, WeightType::F16, WeightType::I8] {
        let mats: Vec<PackedMatrix> = shapes
            .iter()
            .map(|&(k, n)| {
                let w: Vec<f32> = (0..k * n)
                    .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                    .collect();
                PackedMatrix::pack(&w, k, n, ty)
            })
            .collect();
        // Six layers' worth of distinct matrices, so the weights a query
        // reads are as large as the model's.
        let layers: Vec<Vec<PackedMatrix>> = (0..6).map(|_| mats.clone()).collect();
        for &m in &rows {
            let a = vec![0.25f32; m * 1536];
            let mut out = vec![0f32; m * 1536];
            let bias = vec![0f32; 1536];
            let flops: f64 = shapes
                .iter()
                .map(|&(k, n)| 2.0 * (m * k * n) as f64)
                .sum::<f64>()
                * 6.0;
            let reps = (2e9 / flops).clamp(3.0, 500.0) as usize;
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                for _ in 0..reps {
                    for layer in &layers {
                        for w in layer {
                            w.matmul(&a[..m * w.k()], m, &bias[..w.n()], &mut out[..m * w.n()]);
                        }
                    }
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            println!(
                "{:>3} rows {m:>4}: {:8.3} ms per model pass, {:6.1} GFLOP/s",
                ty.name(),
                best * 1e3,
                flops / best / 1e9
            );
        }
    }
}
