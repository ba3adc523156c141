//! Portable reference kernels.
//!
//! These are the ground truth that every SIMD implementation is tested
//! against. They accumulate in fixed-width lanes so that LLVM can
//! auto-vectorise them for the baseline target, and so that their rounding
//! behaviour is close to the SIMD versions (which also use lane-wise partial
//! sums).

use half::f16;

const LANES: usize = 16;

/// Squared Euclidean distance.
pub fn l2sq_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..LANES {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let d = x - y;
        s += d * d;
    }
    s
}

/// Dot product.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// Returns (a·b, a·a, b·b).
pub fn dot_norms_f32(a: &[f32], b: &[f32]) -> (f32, f32, f32) {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut ab = [0f32; LANES];
    let mut aa = [0f32; LANES];
    let mut bb = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..LANES {
            ab[i] += x[i] * y[i];
            aa[i] += x[i] * x[i];
            bb[i] += y[i] * y[i];
        }
    }
    let (mut sab, mut saa, mut sbb) = (
        ab.iter().sum::<f32>(),
        aa.iter().sum::<f32>(),
        bb.iter().sum::<f32>(),
    );
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    (sab, saa, sbb)
}

/// Cosine distance `1 - cos(a, b)`; 1.0 when either vector is zero.
pub fn cos_f32(a: &[f32], b: &[f32]) -> f32 {
    let (ab, aa, bb) = dot_norms_f32(a, b);
    crate::cos_from_parts(ab, aa, bb)
}

/// Cosine distance from a unit-length query `a` to `b` as stored:
/// `1 - a·b / |b|`.
pub fn cos_unit_f32(a: &[f32], b: &[f32]) -> f32 {
    let (ab, _, bb) = dot_norms_f32(a, b);
    crate::cos_unit_from_parts(ab, bb)
}

fn widen(a: &[f16], out: &mut [f32; LANES]) {
    for (o, x) in out.iter_mut().zip(a) {
        *o = x.to_f32();
    }
}

fn f16_blocks(a: &[f16], b: &[f16], mut f: impl FnMut(&[f32], &[f32])) {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i < n {
        let m = (n - i).min(LANES);
        let mut xa = [0f32; LANES];
        let mut xb = [0f32; LANES];
        widen(&a[i..i + m], &mut xa);
        widen(&b[i..i + m], &mut xb);
        f(&xa[..m], &xb[..m]);
        i += m;
    }
}

/// Squared Euclidean distance over half floats (accumulated in f32).
pub fn l2sq_f16(a: &[f16], b: &[f16]) -> f32 {
    let mut s = 0.0;
    f16_blocks(a, b, |x, y| s += l2sq_f32(x, y));
    s
}

/// Dot product over half floats (accumulated in f32).
pub fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    let mut s = 0.0;
    f16_blocks(a, b, |x, y| s += dot_f32(x, y));
    s
}

/// Cosine distance over half floats.
pub fn cos_f16(a: &[f16], b: &[f16]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    f16_blocks(a, b, |x, y| {
        let (p, q, r) = dot_norms_f32(x, y);
        ab += p;
        aa += q;
        bb += r;
    });
    crate::cos_from_parts(ab, aa, bb)
}

/// Squared Euclidean distance over i8 (exact, in integers).
pub fn l2sq_i8(a: &[i8], b: &[i8]) -> f32 {
    let mut s: i64 = 0;
    for (x, y) in a.iter().zip(b) {
        let d = i32::from(*x) - i32::from(*y);
        s += i64::from(d * d);
    }
    s as f32
}

/// Dot product over i8 (exact, in integers).
pub fn dot_i8(a: &[i8], b: &[i8]) -> f32 {
    let mut s: i64 = 0;
    for (x, y) in a.iter().zip(b) {
        s += i64::from(i32::from(*x) * i32::from(*y));
    }
    s as f32
}

/// Dot product over i16 (exact in i64, then rounded to f32).
pub fn dot_i16(a: &[i16], b: &[i16]) -> f32 {
    let mut s: i64 = 0;
    for (x, y) in a.iter().zip(b) {
        s += i64::from(*x) * i64::from(*y);
    }
    s as f32
}

/// Cosine distance over i8.
pub fn cos_i8(a: &[i8], b: &[i8]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0i64, 0i64, 0i64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (i64::from(*x), i64::from(*y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    crate::cos_from_parts(ab as f32, aa as f32, bb as f32)
}

/// Hamming distance from `q` to each row of `rows` (rows of `stride`
/// bytes, back to back), written to `out` as f32; as many rows as both
/// `out` and `rows` hold. The exact scan's inner loop: one call per block
/// of rows instead of one per row. Always inlined, so that the POPCNT
/// builds (which wrap it) compile it with the instruction.
#[inline(always)]
pub fn hamming_rows(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    if stride == 0 {
        out.iter_mut().for_each(|o| *o = 0.0);
        return;
    }
    let q = &q[..q.len().min(stride)];
    // Codes of 8, 16, 32 or 64 bytes (64- to 512-bit): the query's words
    // stay in registers and each row is a fixed run of XOR and POPCNT,
    // with no loop over its words (twice as fast as the general loop for
    // 256-bit codes, where this is the exact scan's whole cost).
    match q.len() {
        8 => return rows_fixed::<1>(q, rows, stride, out),
        16 => return rows_fixed::<2>(q, rows, stride, out),
        32 => return rows_fixed::<4>(q, rows, stride, out),
        64 => return rows_fixed::<8>(q, rows, stride, out),
        _ => {}
    }
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(stride)) {
        *o = hamming(q, r) as f32;
    }
}

/// The first `W` little-endian words of `b` (`b` holds at least `8 W`
/// bytes).
#[inline(always)]
fn words<const W: usize>(b: &[u8]) -> [u64; W] {
    let b = &b[..8 * W];
    std::array::from_fn(|i| {
        let c = &b[8 * i..8 * i + 8];
        u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
    })
}

/// [`hamming`] over the first `W` words of both codes.
#[inline(always)]
fn pair_fixed<const W: usize>(a: &[u8], b: &[u8]) -> u32 {
    let (a, b) = (words::<W>(a), words::<W>(b));
    (0..W).map(|i| (a[i] ^ b[i]).count_ones()).sum()
}

/// [`hamming_rows`] for a query of exactly `W` words.
#[inline(always)]
fn rows_fixed<const W: usize>(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    let qw = words::<W>(q);
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(stride)) {
        let rw = words::<W>(r);
        let mut s = 0u32;
        for i in 0..W {
            s += (rw[i] ^ qw[i]).count_ones();
        }
        *o = s as f32;
    }
}

/// Hamming distances from `q` to each code of `rows` (wherever each one
/// lies), as f32: `out[i]` for `rows[i]`, as many as both hold. One call
/// for the unvisited neighbours of a graph node instead of one per pair;
/// always inlined, like [`hamming_rows`].
#[inline(always)]
pub fn hamming_each(q: &[u8], rows: &[&[u8]], out: &mut [f32]) {
    for (o, r) in out.iter_mut().zip(rows) {
        *o = hamming(q, r) as f32;
    }
}

/// NPHD (normalised prefix Hamming distance) from the stored code `q` to
/// each stored code of `rows` (`stride` bytes apart), as
/// [`crate::Distance::eval`] computes it row by row: stored codes are a
/// length byte then the code, and two codes are compared over the shorter
/// one's bytes (1.0 when either is empty). As many rows as both `out` and
/// `rows` hold; always inlined, like [`hamming_rows`].
#[inline(always)]
pub fn nphd_rows(q: &[u8], rows: &[u8], stride: usize, out: &mut [f32]) {
    let Some(&lq) = q.first() else {
        out.iter_mut().for_each(|o| *o = 1.0);
        return;
    };
    if stride == 0 {
        return;
    }
    let lq = usize::from(lq).min(q.len() - 1).min(stride - 1);
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(stride)) {
        let m = lq.min(usize::from(r[0]));
        *o = if m == 0 {
            1.0
        } else {
            hamming(&q[1..=m], &r[1..=m]) as f32 / (8 * m) as f32
        };
    }
}

/// Number of differing bits between two packed bit strings.
#[inline(always)]
pub fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len().min(b.len());
    match n {
        8 => return pair_fixed::<1>(a, b),
        16 => return pair_fixed::<2>(a, b),
        32 => return pair_fixed::<4>(a, b),
        64 => return pair_fixed::<8>(a, b),
        _ => {}
    }
    let (a, b) = (&a[..n], &b[..n]);
    let mut s = 0u32;
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        let x = u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
        let y = u64::from_le_bytes([y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]]);
        s += (x ^ y).count_ones();
    }
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += (x ^ y).count_ones();
    }
    s
}
