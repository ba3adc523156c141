//! The best documents of one part by BM25 without scoring every posting:
//! MaxScore (Turtle and Flood, 1995), term at a time.
//!
//! Each (field, query term) pair is a cursor over its postings, sorted by
//! slot, with an upper bound on what it adds to a document's score: its
//! weight `idf · (k1 + 1)`, the limit of `w · tf / (tf + norm)` as `tf`
//! grows. Cursors are taken by bound, largest (rarest term) first, and
//! scored into an accumulator one after another until at least `depth`
//! accepted documents score above the sum of the bounds of the cursors
//! left: a document none of the scored cursors found cannot reach the
//! best `depth` any more. From there only the documents already found
//! that can still get there (their score so far plus the bounds left at
//! least the `depth`-th best score so far) are looked up in the remaining
//! lists, by galloping search, and dropped as soon as they cannot. A
//! query's common words (long lists, small weights) come last, and most of
//! their postings are never read.
//!
//! Exact: a score is always summed in the cursors' order (the order
//! [`TextQuery::score`] uses too), so what a document holds at any point
//! is a prefix of its final sum, never above it, and the final score is
//! the same `f32` as scoring every posting, bit for bit; ties with the
//! last kept score are returned too. The bounds side of each test carries
//! a relative slack for rounding, so pruning only ever keeps more.

use crate::bm25::{Accumulator, TextQuery};
use crate::field::{DocLens, FieldRead, Postings, BLOCK};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One query term's postings in one field, read in slot order.
pub(crate) struct Cursor<'a> {
    post: Postings<'a>,
    len: usize,
    pos: usize,
    w: f32,
    base: f32,
    per_len: f32,
    lens: DocLens<'a>,
}

impl Cursor<'_> {
    /// The slot under the cursor (`u32::MAX` once past the end).
    #[inline]
    fn slot(&self) -> u32 {
        if self.pos < self.len {
            self.post.slot(self.pos)
        } else {
            u32::MAX
        }
    }

    /// What this term adds to `slot`'s score with term frequency `tf`.
    #[inline]
    fn contribution(&self, slot: u32, tf: u32) -> f32 {
        self.weigh(tf as f32, self.lens.get(slot) as f32)
    }

    /// BM25's term score for term frequency `tf` in a document of `dl`
    /// terms.
    #[inline]
    fn weigh(&self, tf: f32, dl: f32) -> f32 {
        let norm = self.base + self.per_len * dl;
        self.w * tf / (tf + norm)
    }

    /// Adds every posting's contribution to `acc`; returns the largest
    /// score reached. A block at a time: the document lengths read, then
    /// the contributions in one loop the compiler vectorises (the same
    /// expression, so the same values), then added.
    pub(crate) fn score_all(&self, acc: &mut Accumulator) -> f32 {
        let mut most = 0.0f32;
        let mut x = [0.0f32; BLOCK];
        self.post.for_each_block(|slots, tfs| {
            let m = slots.len();
            for k in 0..m {
                x[k] = self.lens.get(slots[k]) as f32;
            }
            for k in 0..m {
                x[k] = self.weigh(tfs[k] as f32, x[k]);
            }
            for k in 0..m {
                most = most.max(acc.add_get(slots[k], x[k]));
            }
        });
        most
    }

    /// Moves to the first posting at or after `target` (galloping from
    /// the current place, then binary search).
    #[inline]
    fn seek(&mut self, target: u32) {
        if self.pos >= self.len || self.post.slot(self.pos) >= target {
            return;
        }
        let mut lo = self.pos;
        let mut step = 1;
        let mut hi = lo + step;
        while hi < self.len && self.post.slot(hi) < target {
            lo = hi;
            step *= 2;
            hi = lo + step;
        }
        let mut hi = hi.min(self.len);
        // Invariant: slot(lo) < target, and slot(hi) >= target or hi = len.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.post.slot(mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.pos = hi;
    }

    /// The contribution to `slot` (moving forward to it), 0 when the term
    /// is not in its document.
    #[inline]
    fn at(&mut self, slot: u32) -> f32 {
        self.seek(slot);
        if self.slot() == slot {
            self.contribution(slot, self.post.tf(self.pos))
        } else {
            0.0
        }
    }
}

/// The best `depth` (slot, score) pairs held so far, and the pairs tied
/// with or pushed out from the least of them.
struct Best {
    depth: usize,
    /// (score bits, slot): scores are positive, so their bits order as
    /// they do.
    heap: BinaryHeap<Reverse<(u32, u32)>>,
    ties: Vec<(u32, u32)>,
}

impl Best {
    fn new(depth: usize) -> Best {
        Best {
            depth,
            heap: BinaryHeap::with_capacity(depth + 1),
            ties: Vec::new(),
        }
    }

    /// The least held score once `depth` are held.
    #[inline]
    fn threshold(&self) -> Option<u32> {
        if self.heap.len() == self.depth {
            self.heap.peek().map(|m| m.0 .0)
        } else {
            None
        }
    }

    #[inline]
    fn push(&mut self, slot: u32, score: f32) {
        let bits = score.to_bits();
        match self.threshold() {
            None => self.heap.push(Reverse((bits, slot))),
            Some(least) if bits < least => {}
            Some(least) if bits == least => self.ties.push((bits, slot)),
            Some(_) => {
                self.heap.push(Reverse((bits, slot)));
                if let Some(Reverse(e)) = self.heap.pop() {
                    self.ties.push(e);
                }
            }
        }
    }

    /// Appends the held pairs and those tied with the least of them.
    fn finish(self, out: &mut Vec<(u32, f32)>) {
        let least = self.heap.peek().map_or(0, |m| m.0 .0);
        let held = self.heap.into_iter().map(|Reverse(e)| e);
        let tied = self.ties.into_iter().filter(|&(b, _)| b == least);
        out.extend(held.chain(tied).map(|(b, slot)| (slot, f32::from_bits(b))));
    }
}

/// How many of a part's best documents are wanted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Wanted {
    /// The best `depth` (and those tied with the last of them); 0: every
    /// document with a score.
    pub depth: usize,
    /// Only scores at or above this (0: any): the `depth`-th best score
    /// of the parts searched before, which a document under it cannot
    /// displace.
    pub floor: f32,
}

/// Appends the `depth` best accepted hits of `acc` at or above `floor`
/// and those tied with the last of them.
fn best_of(
    acc: &Accumulator,
    want: Wanted,
    keep: &impl Fn(u32) -> bool,
    out: &mut Vec<(u32, f32)>,
) {
    let mut best = Best::new(want.depth);
    for (slot, x) in acc.hits() {
        // The score first: most hits fall under the threshold.
        if x < want.floor
            || best.threshold().is_some_and(|least| x.to_bits() < least)
            || !keep(slot)
        {
            continue;
        }
        best.push(slot, x);
    }
    best.finish(out);
}

/// The `depth`-th largest of `scores` (reordered), 0 when there are
/// fewer (`depth` ≥ 1).
fn nth_best(scores: &mut [f32], depth: usize) -> f64 {
    if scores.len() < depth {
        return 0.0;
    }
    let (_, x, _) = scores.select_nth_unstable_by(depth - 1, |a, b| b.total_cmp(a));
    f64::from(*x)
}

impl TextQuery {
    /// Appends to `out` the `want.depth` best (slot, score) of one part
    /// among the slots `keep` accepts, plus any tied with the last of
    /// them, leaving out scores under `want.floor`, in no particular order
    /// (depth 0: every accepted slot with a score). The scores are those
    /// of [`TextQuery::score`], bit for bit. `acc` is scratch; `nslots` is
    /// the part's slot count. Parts whose postings are not in slot order
    /// are scored in full.
    pub fn top<'a>(
        &self,
        fields: impl IntoIterator<Item = &'a dyn FieldRead>,
        nslots: usize,
        want: Wanted,
        keep: impl Fn(u32) -> bool,
        acc: &mut Accumulator,
        out: &mut Vec<(u32, f32)>,
    ) {
        let fields: Vec<&dyn FieldRead> = fields.into_iter().collect();
        let mut cs = self.cursors(&fields);
        acc.reset(nslots);
        if want.depth == 0 || !fields.iter().all(|f| f.postings_sorted()) {
            for c in &cs {
                c.score_all(acc);
            }
            if want.depth == 0 {
                out.extend(acc.hits().filter(|&(s, x)| x >= want.floor && keep(s)));
                return;
            }
            best_of(acc, want, &keep, out);
            return;
        }
        max_score(&mut cs, want, &keep, acc, out);
    }

    /// A cursor per (field, term) with postings and a positive weight,
    /// largest weight first (ties in field, then term order): the order
    /// every score is summed in.
    pub(crate) fn cursors<'a>(&self, fields: &[&'a dyn FieldRead]) -> Vec<Cursor<'a>> {
        let (k1, b) = (self.params.k1, self.params.b);
        let mut out = Vec::new();
        for f in fields {
            let Some(q) = self.fields.iter().find(|q| q.name == f.name()) else {
                continue;
            };
            let lens = f.doc_lens();
            let base = k1 * (1.0 - b);
            let per_len = k1 * b / q.avgdl;
            for (i, (t, _)) in q.terms.iter().enumerate() {
                let w = q.weights[i];
                if w <= 0.0 {
                    continue;
                }
                let post = f.postings(t);
                if post.is_empty() {
                    continue;
                }
                out.push(Cursor {
                    post,
                    len: post.len(),
                    pos: 0,
                    w,
                    base,
                    per_len,
                    lens,
                });
            }
        }
        // Stable: equal weights keep field, then term order.
        out.sort_by(|a, b| b.w.total_cmp(&a.w));
        out
    }
}

/// MaxScore over `cs`, largest bound first (see the module's notes).
fn max_score(
    cs: &mut [Cursor<'_>],
    want: Wanted,
    keep: &impl Fn(u32) -> bool,
    acc: &mut Accumulator,
    out: &mut Vec<(u32, f32)>,
) {
    let n = cs.len();
    // rest[i]: the bounds of cursors i.. summed, scaled up by the slack
    // (a float sum may round above the exact one).
    let slack = 1.0 + 1e-5 + n as f64 * 4.0 * f64::from(f32::EPSILON);
    let mut rest = vec![0.0f64; n + 1];
    for i in (0..n).rev() {
        rest[i] = rest[i + 1] + f64::from(cs[i].w) * slack;
    }
    let depth = want.depth;
    let floor = f64::from(want.floor);
    let mut tmp = Vec::new();
    // Phase 1: whole lists until no unseen document can make the best
    // (`depth` documents above what one can reach, or the floor above it).
    let mut i = 0;
    let mut most = 0.0f32;
    while i < n {
        most = most.max(cs[i].score_all(acc));
        i += 1;
        if i < n && rest[i] < floor {
            break;
        }
        if i < n && f64::from(most) > rest[i] {
            let bar = rest[i];
            let above = acc
                .hits()
                .filter(|&(s, x)| f64::from(x) > bar && keep(s))
                .take(depth)
                .count();
            if above == depth {
                break;
            }
        }
    }
    if i == n {
        best_of(acc, want, keep, out);
        return;
    }
    // Phase 2: the documents found that can still make the best (score so
    // far plus the bounds left at least θ, the `depth`-th best so far, a
    // bound under the final one) get the remaining lists' contributions;
    // the others keep a score under the final `depth`-th best and are never
    // returned.
    tmp.clear();
    tmp.extend(
        acc.hits()
            .filter(|&(s, x)| f64::from(x) > rest[i] && keep(s))
            .map(|h| h.1),
    );
    let theta = nth_best(&mut tmp, depth).max(floor);
    let alive = acc
        .hits()
        .filter(|&(_, x)| f64::from(x) + rest[i] >= theta)
        .count();
    let left: usize = cs[i..].iter().map(|c| c.len).sum();
    if alive * 16 >= left {
        // Many: one pass over each remaining list, reading the
        // accumulator.
        for j in i..n {
            let c = &cs[j];
            let bar = theta - rest[j];
            let scores = &mut acc.scores;
            c.post.for_each(|slot, tf| {
                if let Some(x) = scores.get_mut(slot as usize) {
                    if f64::from(*x) >= bar {
                        *x += c.contribution(slot, tf);
                    }
                }
            });
        }
        best_of(acc, want, keep, out);
        return;
    }
    // Few: in slot order (a bitmap of them read in order), looked up in
    // each remaining list.
    let mut bits = vec![0u64; acc.scores.len().div_ceil(64)];
    for (s, x) in acc.hits() {
        if f64::from(x) + rest[i] >= theta && keep(s) {
            bits[s as usize / 64] |= 1 << (s % 64);
        }
    }
    let mut cands: Vec<(u32, f32)> = Vec::with_capacity(alive);
    for (w, &word) in bits.iter().enumerate() {
        let mut m = word;
        while m != 0 {
            let s = (w * 64) as u32 + m.trailing_zeros();
            cands.push((s, acc.scores[s as usize]));
            m &= m - 1;
        }
    }
    for j in i..n {
        let c = &mut cs[j];
        for e in &mut cands {
            let x = c.at(e.0);
            if x != 0.0 {
                e.1 += x;
            }
        }
        tmp.clear();
        tmp.extend(cands.iter().map(|e| e.1));
        let theta = nth_best(&mut tmp, depth).max(floor);
        let left = rest[j + 1];
        cands.retain(|e| f64::from(e.1) + left >= theta);
    }
    let mut best = Best::new(depth);
    for (slot, x) in cands {
        if x >= want.floor {
            best.push(slot, x);
        }
    }
    best.finish(out);
}
