//! [`Rotation`]: a random orthogonal transform applied in O(d log d).
//!
//! RaBitQ needs the data rotated by a random orthogonal matrix so that
//! every coordinate of a unit vector carries about the same information.
//! A dense d × d matrix costs O(d²) per vector; instead, like the RaBitQ
//! authors' library and Lance, we compose a few rounds of *random sign
//! flips* followed by a *normalised fast Walsh–Hadamard transform* (FWHT),
//! each round orthogonal, so the product is orthogonal.
//!
//! ## Dimensions that are not a power of two
//! Vectors are zero-padded to `padded = dims` rounded up to a multiple of
//! 64 (the fast-scan code layout wants whole 64-bit words). The FWHT needs
//! a power of two, so each round transforms one block of `block` =
//! the largest power of two ≤ `padded` coordinates: even rounds the first
//! `block`, odd rounds the last `block`. When `padded` is a power of two
//! both are the whole vector; otherwise the two windows overlap and four
//! rounds mix every coordinate with every other.
//!
//! Sign flips come from a splitmix64 stream of the seed, so a rotation is
//! fully described by `(dims, seed)` and is not stored.

/// Rounds of (sign flip, FWHT).
pub const ROUNDS: usize = 4;

/// A seeded random orthogonal transform of `dims`-vectors into `padded`
/// coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotation {
    dims: usize,
    padded: usize,
    block: usize,
    /// ROUNDS × padded factors of ±1.
    signs: Vec<f32>,
}

/// One splitmix64 step (state advanced in place).
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rotation {
    /// The rotation of `dims`-vectors drawn from `seed`.
    pub fn new(dims: usize, seed: u64) -> Self {
        let padded = dims.max(1).next_multiple_of(64);
        let block = 1usize << padded.ilog2();
        let mut state = seed;
        let mut signs = Vec::with_capacity(ROUNDS * padded);
        while signs.len() < ROUNDS * padded {
            let bits = splitmix64(&mut state);
            for b in 0..64 {
                if signs.len() == ROUNDS * padded {
                    break;
                }
                signs.push(if bits >> b & 1 == 1 { -1.0 } else { 1.0 });
            }
        }
        Rotation {
            dims,
            padded,
            block,
            signs,
        }
    }

    /// Input dimensions.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Output coordinates (a multiple of 64).
    pub fn padded(&self) -> usize {
        self.padded
    }

    /// Writes the rotation of `x` (`dims` long) into `out` (`padded` long).
    pub fn apply(&self, x: &[f32], out: &mut [f32]) {
        let out = &mut out[..self.padded];
        let n = self.dims.min(x.len());
        out[..n].copy_from_slice(&x[..n]);
        out[n..].fill(0.0);
        let scale = 1.0 / (self.block as f32).sqrt();
        for r in 0..ROUNDS {
            let signs = &self.signs[r * self.padded..(r + 1) * self.padded];
            for (o, s) in out.iter_mut().zip(signs) {
                *o *= s;
            }
            let start = if r % 2 == 0 {
                0
            } else {
                self.padded - self.block
            };
            let win = &mut out[start..start + self.block];
            fwht(win);
            for o in win.iter_mut() {
                *o *= scale;
            }
        }
    }
}

/// Unnormalised in-place fast Walsh–Hadamard transform (`x.len()` a power
/// of two).
fn fwht(x: &mut [f32]) {
    let n = x.len();
    let mut h = 1;
    while h < n {
        for chunk in x.chunks_exact_mut(2 * h) {
            let (a, b) = chunk.split_at_mut(h);
            for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                let (s, d) = (*u + *v, *u - *v);
                *u = s;
                *v = d;
            }
        }
        h *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn preserves_inner_products_for_any_dims() {
        for dims in [1, 7, 64, 100, 384, 512, 768, 1000] {
            let rot = Rotation::new(dims, 42);
            let mut st = dims as u64;
            let mut rnd = || (splitmix64(&mut st) >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            let a: Vec<f32> = (0..dims).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..dims).map(|_| rnd()).collect();
            let (mut ra, mut rb) = (vec![0.0; rot.padded()], vec![0.0; rot.padded()]);
            rot.apply(&a, &mut ra);
            rot.apply(&b, &mut rb);
            let scale = dot(&a, &a).max(1.0);
            assert!(
                (dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-4 * scale,
                "dims {dims}"
            );
            assert!(
                (dot(&a, &a) - dot(&ra, &ra)).abs() < 1e-4 * scale,
                "dims {dims}"
            );
        }
    }

    #[test]
    fn spreads_a_basis_vector_over_every_coordinate() {
        let rot = Rotation::new(384, 7);
        let mut e = vec![0.0; 384];
        e[5] = 1.0;
        let mut out = vec![0.0; rot.padded()];
        rot.apply(&e, &mut out);
        let max = out.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        // A well-mixed unit vector has no coordinate near 1.
        assert!(max < 0.5, "max coordinate {max}");
    }
}
