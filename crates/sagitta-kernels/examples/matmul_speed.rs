//! Speed of [`PackedMatrix::matmul`] on MiniLM's layer shapes, per weight
//! type and row count, as GFLOP/s on one thread, beside the core's own
//! ceilings (x86-64): eight-wide `f32` FMAs and `vpmaddwd`s in independent
//! chains, nothing loaded, as GFLOP/s (a multiply-add is two):
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
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        for _ in 0..3 {
            // SAFETY: the features were detected above.
            let (fma, madd) = unsafe { peak::rates() };
            println!("ceiling: f32 FMA {fma:6.1} GFLOP/s, vpmaddwd {madd:6.1} GFLOP/s");
        }
    }
    // MiniLM-L6: QKV 384x1152, out 384x384, ff1 384x1536, ff2 1536x384.
    let shapes = [(384, 1152), (384, 384), (384, 1536), (1536, 384)];
    for ty in [
        WeightType::F32,
        WeightType::F16,
        WeightType::I8,
        WeightType::Q8,
        WeightType::Q8Grouped,
    ] {
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

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;
    use std::time::Instant;

    const ITERS: usize = 20_000_000;

    /// Multiply-add rates with twelve independent chains (enough to cover
    /// the latency of two pipes), as GFLOP/s.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn rates() -> (f64, f64) {
        let t = Instant::now();
        let mut acc = [_mm256_set1_ps(0.0); 12];
        let (x, y) = (_mm256_set1_ps(0.999), _mm256_set1_ps(1e-7));
        for _ in 0..ITERS {
            for a in &mut acc {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let fma = (ITERS * 12 * 16) as f64 / t.elapsed().as_secs_f64() / 1e9;
        std::hint::black_box(acc);
        // Each chain feeds its own product back (as 16-bit lanes), so no
        // product can be hoisted out of the loop.
        let t = Instant::now();
        let mut acc = [_mm256_set1_epi32(1); 12];
        let x = _mm256_set1_epi16(1);
        for _ in 0..ITERS {
            for a in &mut acc {
                *a = _mm256_madd_epi16(*a, x);
            }
        }
        let madd = (ITERS * 12 * 32) as f64 / t.elapsed().as_secs_f64() / 1e9;
        std::hint::black_box(acc);
        (fma, madd)
    }
}
