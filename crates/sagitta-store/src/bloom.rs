//! A scalable, blocked bloom filter over u64 keys: the collection's
//! constant-time "definitely absent" answer.
//!
//! A chain of filters: when the newest one holds its capacity, a new one
//! twice as large with half the false-positive rate is added, so the
//! overall rate stays under the target (`p/2 + p/4 + … < p`). Each filter
//! is blocked: all probe bits of a key lie in one 64-byte block, so a
//! lookup costs one cache miss per filter. Keys are never removed (a
//! deleted key stays "maybe present" until compaction rebuilds the filter).
//!
//! File layout (little-endian), see docs/FORMAT.md: magic `SGTABLM\0`,
//! version u32, filter count u32, target rate f64, initial capacity u64,
//! then per filter `blocks u64, k u32, 0u32, capacity u64, count u64`, then
//! every filter's words, then a CRC32C of all preceding bytes.

use crate::error::{io, Result, StoreError};
use std::path::Path;

const MAGIC: &[u8; 8] = b"SGTABLM\0";
const VERSION: u32 = 1;
const BLOCK_WORDS: usize = 8;
const MAX_FILTERS: usize = 48;

#[derive(Debug, Clone)]
struct Filter {
    words: Vec<u64>,
    blocks: u64,
    k: u32,
    capacity: u64,
    count: u64,
}

#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Filter {
    fn new(capacity: u64, fp: f64) -> Filter {
        // Blocked filters lose a little accuracy; 20% more bits than the
        // classic optimum makes up for it at these rates.
        let bits = (-(capacity as f64) * fp.ln() / std::f64::consts::LN_2.powi(2) * 1.2).ceil();
        let blocks = ((bits / 512.0).ceil() as u64).max(1).next_power_of_two();
        let per_key = (blocks * 512) as f64 / capacity.max(1) as f64;
        let k = ((per_key * std::f64::consts::LN_2).round() as u32).clamp(1, 7);
        Filter {
            words: vec![0; blocks as usize * BLOCK_WORDS],
            blocks,
            k,
            capacity,
            count: 0,
        }
    }

    #[inline]
    fn probe(&self, key: u64) -> (usize, u64) {
        let h = mix(key);
        let block = (h & (self.blocks - 1)) as usize * BLOCK_WORDS;
        (block, mix(h ^ 0xA076_1D64_78BD_642F))
    }

    #[inline]
    fn contains(&self, key: u64) -> bool {
        let (block, bits) = self.probe(key);
        (0..self.k).all(|j| {
            let b = (bits >> (j * 9)) & 511;
            self.words[block + (b / 64) as usize] & (1 << (b % 64)) != 0
        })
    }

    fn insert(&mut self, key: u64) {
        let (block, bits) = self.probe(key);
        for j in 0..self.k {
            let b = (bits >> (j * 9)) & 511;
            self.words[block + (b / 64) as usize] |= 1 << (b % 64);
        }
        self.count += 1;
    }
}

/// The scalable bloom filter.
#[derive(Debug, Clone)]
pub struct Bloom {
    filters: Vec<Filter>,
    fp: f64,
    initial: u64,
}

impl Bloom {
    /// An empty filter for about `initial` keys before it first grows, with
    /// an overall false-positive rate under `fp`.
    pub fn new(initial: u64, fp: f64) -> Bloom {
        let fp = fp.clamp(1e-9, 0.5);
        let initial = initial.max(1024);
        Bloom {
            filters: vec![Filter::new(initial, fp / 2.0)],
            fp,
            initial,
        }
    }

    /// Whether `key` may have been inserted (false means certainly not).
    #[inline]
    pub fn may_contain(&self, key: u64) -> bool {
        self.filters.iter().any(|f| f.contains(key))
    }

    /// Records `key`.
    pub fn insert(&mut self, key: u64) {
        if self.may_contain(key) {
            return;
        }
        let n = self.filters.len();
        let full = self.filters.last().is_none_or(|f| f.count >= f.capacity);
        if full && n < MAX_FILTERS {
            let cap = self.initial << n.min(40);
            let fp = self.fp / 2f64.powi(n as i32 + 1);
            self.filters.push(Filter::new(cap, fp));
        }
        if let Some(f) = self.filters.last_mut() {
            f.insert(key);
        }
    }

    /// Keys recorded (distinct, up to false positives at insert).
    pub fn count(&self) -> u64 {
        self.filters.iter().map(|f| f.count).sum()
    }

    /// Filters in the chain.
    pub fn filters(&self) -> usize {
        self.filters.len()
    }

    /// Fraction of the newest filter's capacity in use (0..=1).
    pub fn fill(&self) -> f64 {
        self.filters
            .last()
            .map_or(0.0, |f| f.count as f64 / f.capacity.max(1) as f64)
    }

    /// Bytes of filter bits held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.filters.iter().map(|f| f.words.len() * 8).sum()
    }

    /// Serialises to the file layout described in the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.memory_bytes() + self.filters.len() * 32 + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.filters.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.fp.to_le_bytes());
        b.extend_from_slice(&self.initial.to_le_bytes());
        for f in &self.filters {
            b.extend_from_slice(&f.blocks.to_le_bytes());
            b.extend_from_slice(&f.k.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&f.capacity.to_le_bytes());
            b.extend_from_slice(&f.count.to_le_bytes());
        }
        for f in &self.filters {
            for w in &f.words {
                b.extend_from_slice(&w.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a serialised filter; every inconsistency is `Corrupt`.
    pub fn from_bytes(b: &[u8], path: &Path) -> Result<Bloom> {
        let bad = |offset: usize, reason: &str| StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: offset as u64,
            reason: reason.to_string(),
        };
        if b.len() < 36 || &b[..8] != MAGIC {
            return Err(bad(0, "not a bloom filter file"));
        }
        let (body, tail) = b.split_at(b.len() - 4);
        let want = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        if crc32c::crc32c(body) != want {
            return Err(bad(body.len(), "checksum mismatch"));
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        if u32_at(8) != VERSION {
            return Err(bad(8, "unsupported bloom filter version"));
        }
        let n = u32_at(12) as usize;
        let fp = f64::from_bits(u64_at(16));
        let initial = u64_at(24);
        if n == 0 || n > MAX_FILTERS || !(fp > 0.0 && fp < 1.0) {
            return Err(bad(12, "bad filter count or rate"));
        }
        let mut at = 32;
        let mut filters = Vec::with_capacity(n);
        for _ in 0..n {
            if at + 32 > body.len() {
                return Err(bad(at, "truncated filter table"));
            }
            let blocks = u64_at(at);
            let k = u32_at(at + 8);
            if !blocks.is_power_of_two() || blocks > 1 << 34 || !(1..=7).contains(&k) {
                return Err(bad(at, "bad filter geometry"));
            }
            filters.push(Filter {
                words: Vec::new(),
                blocks,
                k,
                capacity: u64_at(at + 16),
                count: u64_at(at + 24),
            });
            at += 32;
        }
        for f in &mut filters {
            let len = f.blocks as usize * BLOCK_WORDS * 8;
            if at + len > body.len() {
                return Err(bad(at, "truncated filter bits"));
            }
            f.words = b[at..at + len]
                .chunks_exact(8)
                .map(|c| {
                    let mut x = [0u8; 8];
                    x.copy_from_slice(c);
                    u64::from_le_bytes(x)
                })
                .collect();
            at += len;
        }
        if at != body.len() {
            return Err(bad(at, "trailing bytes"));
        }
        Ok(Bloom {
            filters,
            fp,
            initial,
        })
    }

    /// Reads a filter file.
    pub fn read(path: &Path) -> Result<Bloom> {
        let b = std::fs::read(path).map_err(io("read", path))?;
        Bloom::from_bytes(&b, path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn no_false_negatives_and_rate_under_target() {
        let mut b = Bloom::new(1024, 0.01);
        for k in 0..100_000u64 {
            b.insert(k * 7919);
        }
        assert!(b.filters() > 1, "the chain grew");
        assert!((0..100_000u64).all(|k| b.may_contain(k * 7919)));
        let fp = (0..200_000u64)
            .filter(|k| b.may_contain(k * 7919 + 1))
            .count() as f64
            / 200_000.0;
        assert!(fp < 0.01, "false-positive rate {fp}");
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut b = Bloom::new(2048, 0.01);
        for k in 0..10_000u64 {
            b.insert(k);
        }
        let bytes = b.to_bytes();
        let p = Path::new("bloom");
        let back = Bloom::from_bytes(&bytes, p).unwrap();
        assert!((0..10_000u64).all(|k| back.may_contain(k)));
        assert_eq!(back.count(), b.count());
        for cut in [0, 10, 40, bytes.len() - 1] {
            assert!(Bloom::from_bytes(&bytes[..cut], p).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        assert!(matches!(
            Bloom::from_bytes(&flipped, p),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
