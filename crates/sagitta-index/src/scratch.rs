//! Per-search scratch space, reused across queries so that the hot path
//! does not allocate: a visited bitset, the two heaps of the
//! beam search, a neighbour-list buffer and the encoded query.

use crate::topk::{Cand, KeyedCand};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// One bit per slot (an eighth of a byte: a million-slot graph's set
    /// stays in L2, where it is read for every neighbour of every node).
    visited: Vec<u64>,
    /// Words of `visited` set since the last reset, cleared one by one
    /// (a search touches a few thousand slots of up to millions).
    touched: Vec<u32>,
    pub candidates: BinaryHeap<Reverse<Cand>>,
    pub results: BinaryHeap<Cand>,
    /// Results of the exact scan, ordered by (distance, key).
    pub keyed: BinaryHeap<KeyedCand>,
    pub neighbors: Vec<u32>,
    /// 8-byte aligned backing for the encoded query.
    query: Vec<u64>,
    pub pool: Vec<Cand>,
    /// Working space of IVF searches.
    pub ivf: crate::ivf::IvfScratch,
    /// The float input of an insert into an index keeping full precision.
    pub full: Vec<f32>,
    /// A full-precision row read for re-scoring
    /// ([`crate::GraphView::full_row`]).
    pub row: Vec<f32>,
    /// The f32 query compared with full-precision rows (see
    /// [`crate::plan::execute`]).
    pub full_query: Vec<f32>,
}

impl Scratch {
    /// Starts a new search over `slots` slots: forgets visited marks
    /// (only the words the last search touched), clears the heaps, keeps
    /// their capacity.
    pub fn reset(&mut self, slots: usize) {
        let words = slots.div_ceil(64);
        if self.visited.len() < words {
            self.visited.resize(words.next_power_of_two(), 0);
        }
        for &w in &self.touched {
            self.visited[w as usize] = 0;
        }
        self.touched.clear();
        self.candidates.clear();
        self.results.clear();
        self.keyed.clear();
    }

    /// Marks `slot` visited; returns whether it was new.
    #[inline(always)]
    pub fn visit(&mut self, slot: u32) -> bool {
        let w = (slot / 64) as usize;
        let bit = 1u64 << (slot % 64);
        if w >= self.visited.len() {
            // Concurrent inserts can link slots claimed after `reset`.
            self.visited.resize((w + 1).next_power_of_two(), 0);
        }
        let word = self.visited[w];
        if word == 0 {
            self.touched.push(w as u32);
        }
        self.visited[w] = word | bit;
        word & bit == 0
    }

    /// Marks every slot of `slots` visited and keeps, in order, those that
    /// were not yet. No branch on the answer: whether a neighbour was seen
    /// is a coin toss the branch predictor loses.
    #[inline]
    pub fn keep_unvisited(&mut self, slots: &mut Vec<u32>) {
        let mut kept = 0;
        for i in 0..slots.len() {
            let n = slots[i];
            slots[kept] = n;
            kept += usize::from(self.visit(n));
        }
        slots.truncate(kept);
    }

    /// A zeroed, 8-byte aligned buffer of `len` bytes for the encoded query.
    pub fn query_buf(&mut self, len: usize) -> &mut [u8] {
        let words = len.div_ceil(8);
        if self.query.len() < words {
            self.query.resize(words, 0);
        }
        // SAFETY: the Vec<u64> holds at least `len` initialised bytes; u8
        // has no alignment requirement and every bit pattern is valid.
        unsafe { std::slice::from_raw_parts_mut(self.query.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Takes the encoded query out of the scratch (so the rest of the
    /// scratch can be borrowed mutably during the search).
    pub fn take_query(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.query)
    }

    pub fn put_query(&mut self, q: Vec<u64>) {
        self.query = q;
    }
}

/// Views the first `len` bytes of an 8-byte aligned query buffer.
pub(crate) fn query_bytes(q: &[u64], len: usize) -> &[u8] {
    // SAFETY: `q` holds at least `len` bytes (it was sized by `query_buf`).
    unsafe { std::slice::from_raw_parts(q.as_ptr().cast::<u8>(), len.min(q.len() * 8)) }
}

/// A pool of scratches, one taken per concurrent search.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool {
    free: Mutex<Vec<Scratch>>,
}

impl ScratchPool {
    pub fn take(&self) -> Scratch {
        self.free.lock().pop().unwrap_or_default()
    }

    pub fn give(&self, s: Scratch) {
        let mut free = self.free.lock();
        if free.len() < 256 {
            free.push(s);
        }
    }
}
