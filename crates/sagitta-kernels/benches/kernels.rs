//! Throughput of each kernel at common dimensions, for every instruction set
//! this CPU runs. Report bytes/s: two vectors are read per call.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sagitta_kernels::{f16, Kernels};

fn bench(c: &mut Criterion) {
    for dims in [384usize, 768, 1536] {
        let a: Vec<f32> = (0..dims).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..dims).map(|i| (i as f32 * 0.11).cos()).collect();
        let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
        let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
        let ai: Vec<i8> = a.iter().map(|&x| (x * 100.0) as i8).collect();
        let bi: Vec<i8> = b.iter().map(|&x| (x * 100.0) as i8).collect();
        let ab: Vec<u8> = ai.iter().map(|&x| x as u8).collect();
        let bb: Vec<u8> = bi.iter().map(|&x| x as u8).collect();
        for k in Kernels::available() {
            let mut g = c.benchmark_group(format!("{}/d{}", k.isa, dims));
            g.throughput(Throughput::Bytes((dims * 8) as u64));
            g.bench_function("cos_f32", |x| {
                x.iter(|| (k.cos_f32)(black_box(&a), black_box(&b)))
            });
            g.bench_function("dot_f32", |x| {
                x.iter(|| (k.dot_f32)(black_box(&a), black_box(&b)))
            });
            g.bench_function("l2sq_f32", |x| {
                x.iter(|| (k.l2sq_f32)(black_box(&a), black_box(&b)))
            });
            g.throughput(Throughput::Bytes((dims * 4) as u64));
            g.bench_function("cos_f16", |x| {
                x.iter(|| (k.cos_f16)(black_box(&ah), black_box(&bh)))
            });
            g.bench_function("l2sq_f16", |x| {
                x.iter(|| (k.l2sq_f16)(black_box(&ah), black_box(&bh)))
            });
            g.throughput(Throughput::Bytes((dims * 2) as u64));
            g.bench_function("cos_i8", |x| {
                x.iter(|| (k.cos_i8)(black_box(&ai), black_box(&bi)))
            });
            g.bench_function("l2sq_i8", |x| {
                x.iter(|| (k.l2sq_i8)(black_box(&ai), black_box(&bi)))
            });
            g.bench_function("hamming_bytes", |x| {
                x.iter(|| (k.hamming)(black_box(&ab), black_box(&bb)))
            });
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
