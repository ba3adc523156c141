//! Every available kernel table agrees with the scalar reference on random
//! inputs of random lengths, including lengths that leave odd tails after
//! the widest SIMD block.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

use proptest::prelude::*;
use sagitta_kernels::{f16, nphd_encode, scalar, DType, Distance, Kernels, Metric};

/// A query of `q` and rows of `rows` pseudo-random bytes (xorshift from
/// `seed`).
/// A xorshift byte stream from `seed` (any value).
fn bytes_from(seed: u64) -> impl FnMut() -> u8 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }
}

fn query_and_rows(seed: u64, q: usize, rows: usize) -> (Vec<u8>, Vec<u8>) {
    let mut next = bytes_from(seed);
    let a = (0..q).map(|_| next()).collect();
    let b = (0..rows).map(|_| next()).collect();
    (a, b)
}

fn close(a: f32, b: f32, scale: f32) -> bool {
    (a - b).abs() <= 1e-4 * scale.max(1.0)
}

fn floats(max_len: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (0..max_len).prop_flat_map(|n| {
        (
            prop::collection::vec(-4.0f32..4.0, n),
            prop::collection::vec(-4.0f32..4.0, n),
        )
    })
}

fn bytes(max_len: usize) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (0..max_len).prop_flat_map(|n| {
        (
            prop::collection::vec(any::<u8>(), n),
            prop::collection::vec(any::<u8>(), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn f32_kernels_match_scalar((a, b) in floats(300)) {
        let scale: f32 = a.iter().chain(&b).map(|x| x * x).sum::<f32>() + 1.0;
        for k in Kernels::available() {
            prop_assert!(close((k.l2sq_f32)(&a, &b), scalar::l2sq_f32(&a, &b), scale), "{} l2 len {}", k.isa, a.len());
            prop_assert!(close((k.dot_f32)(&a, &b), scalar::dot_f32(&a, &b), scale), "{} dot len {}", k.isa, a.len());
            prop_assert!(close((k.cos_f32)(&a, &b), scalar::cos_f32(&a, &b), 10.0), "{} cos len {}", k.isa, a.len());
            // A unit-length query against a row as given: the full cosine.
            let n = a.iter().map(|x| x * x).sum::<f32>().sqrt();
            if n > 0.0 {
                let u: Vec<f32> = a.iter().map(|x| x / n).collect();
                prop_assert!(close((k.cos_unit_f32)(&u, &b), scalar::cos_unit_f32(&u, &b), 10.0), "{} cos_unit len {}", k.isa, a.len());
                prop_assert!(close((k.cos_unit_f32)(&u, &b), scalar::cos_f32(&a, &b), 10.0), "{} cos_unit vs cos len {}", k.isa, a.len());
            }
        }
    }

    #[test]
    fn f16_kernels_match_scalar((a, b) in floats(300)) {
        let a: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
        let b: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
        let scale: f32 = a.iter().chain(&b).map(|x| x.to_f32() * x.to_f32()).sum::<f32>() + 1.0;
        for k in Kernels::available() {
            prop_assert!(close((k.l2sq_f16)(&a, &b), scalar::l2sq_f16(&a, &b), scale), "{} l2 len {}", k.isa, a.len());
            prop_assert!(close((k.dot_f16)(&a, &b), scalar::dot_f16(&a, &b), scale), "{} dot len {}", k.isa, a.len());
            prop_assert!(close((k.cos_f16)(&a, &b), scalar::cos_f16(&a, &b), 10.0), "{} cos len {}", k.isa, a.len());
        }
    }

    #[test]
    fn i8_kernels_are_exact((a, b) in bytes(300)) {
        let a: Vec<i8> = a.iter().map(|&x| x as i8).collect();
        let b: Vec<i8> = b.iter().map(|&x| x as i8).collect();
        for k in Kernels::available() {
            prop_assert_eq!((k.l2sq_i8)(&a, &b), scalar::l2sq_i8(&a, &b), "{} l2 len {}", k.isa, a.len());
            prop_assert_eq!((k.dot_i8)(&a, &b), scalar::dot_i8(&a, &b), "{} dot len {}", k.isa, a.len());
            prop_assert!(close((k.cos_i8)(&a, &b), scalar::cos_i8(&a, &b), 1.0), "{} cos len {}", k.isa, a.len());
        }
    }

    #[test]
    fn hamming_is_exact((a, b) in bytes(200)) {
        let naive: u32 = a.iter().zip(&b).map(|(x, y)| (x ^ y).count_ones()).sum();
        for k in Kernels::available() {
            prop_assert_eq!((k.hamming)(&a, &b), naive, "{} len {}", k.isa, a.len());
        }
    }

    #[test]
    fn hamming_rows_fixed_widths_equal_row_by_row(
        len in prop::sample::select(vec![8usize, 16, 32, 64]),
        pad in 0usize..9,
        n in 0usize..40,
        seed in any::<u64>(),
    ) {
        // The unrolled paths for 64- to 512-bit codes, rows of the code's
        // length or longer (the query covers the first `len` bytes).
        let stride = len + pad;
        let (q, rows) = query_and_rows(seed, len, n * stride);
        for k in Kernels::available() {
            let mut out = vec![-1.0f32; n + 1];
            (k.hamming_rows)(&q, &rows, stride, &mut out);
            for (i, r) in rows.chunks_exact(stride).enumerate() {
                let naive: u32 = q.iter().zip(r).map(|(a, b)| (a ^ b).count_ones()).sum();
                prop_assert_eq!(out[i], naive as f32, "{} row {}", k.isa, i);
            }
            prop_assert_eq!(out[n], -1.0);
        }
    }

    #[test]
    fn hamming_rows_equals_row_by_row(
        stride in 1usize..80,
        n in 0usize..40,
        seed in any::<u64>(),
    ) {
        let (q, rows) = query_and_rows(seed, stride, n * stride);
        for k in Kernels::available() {
            // One slot more than rows: it must be left as it was.
            let mut out = vec![-1.0f32; n + 1];
            (k.hamming_rows)(&q, &rows, stride, &mut out);
            for (i, r) in rows.chunks_exact(stride).enumerate() {
                prop_assert_eq!(out[i], scalar::hamming(&q, r) as f32, "{} row {}", k.isa, i);
            }
            prop_assert_eq!(out[n], -1.0);
            let d = Distance::with_kernels(&k, Metric::Hamming, DType::B1, false).unwrap();
            let mut via = vec![0.0f32; n];
            d.eval_rows(&q, &rows, stride, &mut via);
            prop_assert_eq!(&via[..], &out[..n]);
        }
    }

    #[test]
    fn hamming_each_equals_pair_by_pair(
        rows in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..=48), 0..40),
        q in prop::collection::vec(any::<u8>(), 0..=48),
    ) {
        let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
        for k in Kernels::available() {
            // One slot more than rows: it must be left as it was.
            let mut out = vec![-1.0f32; rows.len() + 1];
            (k.hamming_each)(&q, &refs, &mut out);
            for (i, r) in rows.iter().enumerate() {
                prop_assert_eq!(out[i], scalar::hamming(&q, r) as f32, "{} row {}", k.isa, i);
            }
            prop_assert_eq!(out[rows.len()], -1.0);
            for metric in [Metric::Hamming, Metric::Nphd] {
                let d = Distance::with_kernels(&k, metric, DType::B1, false).unwrap();
                let mut via = vec![0.0f32; rows.len()];
                d.eval_each(&q, &refs, &mut via);
                for (i, r) in refs.iter().enumerate() {
                    prop_assert_eq!(via[i], d.eval(&q, r), "{} {:?} row {}", k.isa, metric, i);
                }
            }
        }
    }

    #[test]
    fn nphd_rows_equals_row_by_row(
        codes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..=32), 1..30),
        q in prop::collection::vec(any::<u8>(), 0..=32),
        max in 1usize..=32,
    ) {
        // Stored form: a length byte, the code (cut to `max` bytes), zero
        // padding to 1 + max bytes; an empty code has length 0.
        let stored = |c: &[u8]| {
            let mut v = vec![0u8; 1 + max];
            let n = c.len().min(max);
            v[0] = n as u8;
            v[1..=n].copy_from_slice(&c[..n]);
            v
        };
        let rows: Vec<u8> = codes.iter().flat_map(|c| stored(c)).collect();
        let sq = stored(&q);
        for k in Kernels::available() {
            let d = Distance::with_kernels(&k, Metric::Nphd, DType::B1, false).unwrap();
            let mut out = vec![-1.0f32; codes.len()];
            d.eval_rows(&sq, &rows, 1 + max, &mut out);
            for (i, r) in rows.chunks_exact(1 + max).enumerate() {
                prop_assert_eq!(out[i], d.eval(&sq, r), "{} row {}", k.isa, i);
            }
        }
    }

    #[test]
    fn nphd_uses_the_shorter_prefix(a in prop::collection::vec(any::<u8>(), 1..=32), b in prop::collection::vec(any::<u8>(), 1..=32)) {
        let (mut sa, mut sb) = ([0u8; 33], [0u8; 33]);
        nphd_encode(&a, 32, &mut sa).unwrap();
        nphd_encode(&b, 32, &mut sb).unwrap();
        let m = a.len().min(b.len());
        let bits: u32 = a[..m].iter().zip(&b[..m]).map(|(x, y)| (x ^ y).count_ones()).sum();
        let want = bits as f32 / (8 * m) as f32;
        for k in Kernels::available() {
            let d = Distance::with_kernels(&k, Metric::Nphd, DType::B1, false).unwrap();
            prop_assert_eq!(d.eval(&sa, &sb), want, "{}", k.isa);
            prop_assert_eq!(d.eval(&sb, &sa), want, "{} symmetric", k.isa);
        }
    }
}

#[test]
fn cosine_of_zero_vector_is_one() {
    for k in Kernels::available() {
        assert_eq!((k.cos_f32)(&[0.0; 7], &[1.0; 7]), 1.0);
        assert_eq!((k.cos_unit_f32)(&[1.0; 7], &[0.0; 7]), 1.0);
        assert_eq!((k.cos_i8)(&[0; 40], &[3; 40]), 1.0);
    }
}

#[test]
fn nphd_rejects_bad_lengths() {
    let mut out = [0u8; 33];
    assert!(nphd_encode(&[], 32, &mut out).is_err());
    assert!(nphd_encode(&[0u8; 33], 32, &mut out).is_err());
    assert!(nphd_encode(&[1u8; 8], 32, &mut out).is_ok());
    assert_eq!(out[0], 8);
}

#[test]
fn unsupported_pairs_are_errors() {
    assert!(Distance::new(Metric::Hamming, DType::F32, false).is_err());
    assert!(Distance::new(Metric::L2, DType::B1, false).is_err());
}

#[test]
fn active_isa_is_the_best_available() {
    let best = Kernels::available()[0].isa;
    if std::env::var("SAGITTA_ISA").is_err() {
        assert_eq!(sagitta_kernels::isa(), best);
    }
}

fn fastscan_input() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    // Even group counts up to the per-call maximum, including counts that
    // leave a 2-group tail after the 4-group AVX-512 step.
    (1..=sagitta_kernels::fastscan::MAX_GROUPS_PER_CALL / 2).prop_flat_map(|half| {
        let n = half * 2 * 16;
        (
            prop::collection::vec(any::<u8>(), n),
            prop::collection::vec(any::<u8>(), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fastscan_kernels_match_scalar((codes, lut) in fastscan_input()) {
        let mut want = [0u16; 32];
        sagitta_kernels::fastscan::fastscan_scalar(&codes, &lut, &mut want);
        // The reference is itself checked against a direct nibble walk.
        let groups = lut.len() / 16;
        for (v, &w) in want.iter().enumerate() {
            let direct: u32 = (0..groups)
                .map(|g| {
                    let nib = sagitta_kernels::fastscan::block_nibble(&codes, g, v);
                    u32::from(lut[g * 16 + usize::from(nib)])
                })
                .sum();
            prop_assert_eq!(u32::from(w), direct);
        }
        for k in Kernels::available() {
            let mut got = [0u16; 32];
            (k.fastscan)(&codes, &lut, &mut got);
            prop_assert_eq!(got, want, "{} groups {}", k.isa, groups);
        }
    }
}

fn i16s(max_len: usize) -> impl Strategy<Value = (Vec<i16>, Vec<i16>)> {
    (0..max_len).prop_flat_map(|n| {
        (
            prop::collection::vec(-32767i16..=32767, n),
            prop::collection::vec(-32767i16..=32767, n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn i16_dot_kernels_match_scalar((a, b) in i16s(300)) {
        let want = scalar::dot_i16(&a, &b);
        // Exact in i64 before the final rounding: compare at f32 precision
        // of the magnitude summed.
        let mag: f32 = a.iter().zip(&b).map(|(x, y)| (f32::from(*x) * f32::from(*y)).abs()).sum();
        for k in Kernels::available() {
            let got = (k.dot_i16)(&a, &b);
            prop_assert!((got - want).abs() <= 1e-6 * mag.max(1.0), "{} len {}: {got} vs {want}", k.isa, a.len());
        }
    }
}

#[test]
fn quantized_distances_follow_the_header() {
    // sq16 rows [scale, norm², codes]: x = (1.5, -0.5) as scale 0.5,
    // codes (3, -1); y = (0.5, 0.5) as scale 0.25, codes (2, 2).
    let row = |scale: f32, codes: [i16; 2]| {
        let n2: f32 = codes.iter().map(|c| (f32::from(*c) * scale).powi(2)).sum();
        let mut r = Vec::new();
        r.extend_from_slice(&scale.to_ne_bytes());
        r.extend_from_slice(&n2.to_ne_bytes());
        for c in codes {
            r.extend_from_slice(&c.to_ne_bytes());
        }
        r.resize(16, 0);
        r
    };
    let (x, y) = (row(0.5, [3, -1]), row(0.25, [2, 2]));
    let l2 = Distance::new(Metric::L2, DType::Sq16, false).unwrap();
    assert!((l2.eval(&x, &y) - (1.0 + 1.0)).abs() < 1e-6);
    let ip = Distance::new(Metric::Ip, DType::Sq16, false).unwrap();
    assert!((ip.eval(&x, &y) - (1.0 - 0.5)).abs() < 1e-6);
    // Cosine over quantized storage requires normalised vectors.
    assert!(Distance::new(Metric::Cos, DType::Sq8, false).is_err());
    assert!(Distance::new(Metric::Hamming, DType::Sq8, true).is_err());
}

/// The widths with their own vector paths (64- to 512-bit codes: steps of
/// 4 to 32 rows), with row counts around the steps, a query longer than a
/// row, and rows at the largest distance (every bit differs) beside
/// random ones.
#[test]
fn hamming_rows_vector_widths_match_scalar() {
    let mut next = bytes_from(0x2545_F491_4F6C_DD1Du64);
    for stride in [8usize, 16, 32, 64] {
        for n in [0usize, 1, 3, 4, 5, 7, 8, 9, 16, 31, 32, 33, 37, 65, 256] {
            let q: Vec<u8> = (0..stride + 3).map(|_| next()).collect();
            let mut rows: Vec<u8> = (0..n * stride).map(|_| next()).collect();
            for (i, r) in rows.chunks_exact_mut(stride).enumerate() {
                if i % 3 == 1 {
                    r.iter_mut().zip(&q).for_each(|(b, &a)| *b = !a);
                }
            }
            for k in Kernels::available() {
                let mut out = vec![-1.0f32; n];
                (k.hamming_rows)(&q, &rows, stride, &mut out);
                for (i, r) in rows.chunks_exact(stride).enumerate() {
                    assert_eq!(
                        out[i],
                        scalar::hamming(&q[..stride], r) as f32,
                        "{} {stride} {n} row {i}",
                        k.isa
                    );
                }
            }
        }
    }
}

/// Neighbour rows scored in one call (graph walks) for the widths with
/// their own vector paths (256- and 512-bit codes): row counts around the
/// steps (a short last step is padded), rows longer than the query, rows
/// at the largest distance, and a shorter row that sends the rest of the
/// call to the per-row loop.
#[test]
fn hamming_each_vector_widths_match_scalar() {
    let mut next = bytes_from(0x9E37_79B9_7F4A_7C15u64);
    for len in [32usize, 64] {
        for n in [0usize, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33] {
            for short_at in [None, Some(0), Some(n / 2)] {
                let q: Vec<u8> = (0..len).map(|_| next()).collect();
                let rows: Vec<Vec<u8>> = (0..n)
                    .map(|i| {
                        let width = match (short_at, i % 4) {
                            (Some(s), _) if s == i => len - 3,
                            (_, 3) => len + 5,
                            _ => len,
                        };
                        let mut r: Vec<u8> = (0..width).map(|_| next()).collect();
                        if i % 3 == 1 {
                            r.iter_mut().zip(&q).for_each(|(b, &a)| *b = !a);
                        }
                        r
                    })
                    .collect();
                let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
                for k in Kernels::available() {
                    let mut out = vec![-1.0f32; n + 1];
                    (k.hamming_each)(&q, &refs, &mut out);
                    for (i, r) in refs.iter().enumerate() {
                        assert_eq!(
                            out[i],
                            scalar::hamming(&q, r) as f32,
                            "{} {len} {n} {short_at:?} row {i}",
                            k.isa
                        );
                    }
                    assert_eq!(out[n], -1.0, "{} {len} {n}: past the rows", k.isa);
                }
            }
        }
    }
}
