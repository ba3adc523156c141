//! Fixed-size bitsets over slots: [`Bitset`] for filters and sealed
//! tombstones, [`AtomicBitset`] for tombstones of a mutable index.

use std::sync::atomic::{AtomicU64, Ordering};

/// A set of slots `0..len`. Filters arrive at an index as one of these:
/// bit `s` set means slot `s` may be returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitset {
    words: Vec<u64>,
    len: usize,
}

impl Bitset {
    /// An empty set over `len` slots.
    pub fn new(len: usize) -> Self {
        Bitset {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// A set over `len` slots with every slot in it.
    pub fn full(len: usize) -> Self {
        let mut b = Bitset {
            words: vec![u64::MAX; len.div_ceil(64)],
            len,
        };
        b.clear_tail();
        b
    }

    /// Builds a set from little-endian words (as stored on disk).
    pub fn from_words(words: Vec<u64>, len: usize) -> Self {
        let mut words = words;
        words.resize(len.div_ceil(64), 0);
        let mut b = Bitset { words, len };
        b.clear_tail();
        b
    }

    fn clear_tail(&mut self) {
        if !self.len.is_multiple_of(64) {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << (self.len % 64)) - 1;
            }
        }
    }

    /// Number of slots covered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set covers no slots.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds slot `i` (ignored when out of range).
    #[inline]
    pub fn insert(&mut self, i: usize) {
        if i < self.len {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    /// Removes slot `i`.
    #[inline]
    pub fn remove(&mut self, i: usize) {
        if i < self.len {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether slot `i` is in the set (false when out of range).
    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Number of slots in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The words, little-endian bit order.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The intersection (over the shorter of the two lengths).
    pub fn and(&self, other: &Bitset) -> Bitset {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        Bitset::from_words(words, self.len.min(other.len))
    }

    /// Iterates the slots in the set in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

/// A bitset whose bits can be set concurrently (tombstones).
#[derive(Debug, Default)]
pub struct AtomicBitset {
    words: Box<[AtomicU64]>,
}

impl AtomicBitset {
    /// An empty set with room for `len` slots.
    pub fn new(len: usize) -> Self {
        AtomicBitset {
            words: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A copy with room for `len` slots.
    pub fn grown(&self, len: usize) -> Self {
        let new = Self::new(len);
        for (d, s) in new.words.iter().zip(self.words.iter()) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        new
    }

    /// Sets bit `i`; returns whether it was newly set.
    #[inline]
    pub fn set(&self, i: usize) -> bool {
        match self.words.get(i / 64) {
            Some(w) => w.fetch_or(1 << (i % 64), Ordering::AcqRel) & (1 << (i % 64)) == 0,
            None => false,
        }
    }

    /// Whether bit `i` is set.
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (i % 64)) != 0)
    }

    /// A plain snapshot over the first `len` slots.
    pub fn snapshot(&self, len: usize) -> Bitset {
        Bitset::from_words(
            self.words
                .iter()
                .map(|w| w.load(Ordering::Acquire))
                .collect(),
            len,
        )
    }
}
