//! Key lookup in a segment: many keys at once against its sorted key
//! index (dense batches walked in order, sparse ones searched
//! interleaved), routed by a bloom filter of the segment's keys that the
//! first batch builds in memory. One key at a time is
//! [`sagitta_index::IndexRead::slot_of`] (`view.rs`).

use super::Segment;
use crate::bloom::Bloom;
use crate::keysearch::{interpolate, lower_bound_from, lower_bounds};
use sagitta_index::GraphView;
use std::sync::atomic::Ordering;

impl Segment {
    /// A bloom filter of this segment's keys, so that a batch lookup
    /// routes each key to the segments that may hold it instead of
    /// searching every segment's key index (keys spread evenly over
    /// segments, as hashed ids are, would otherwise cost a search per
    /// key and segment). Built in memory from the key index on first use
    /// with `build` (1.5–3 bytes per key; the first batch over a million
    /// keys in 35 segments took 84 ms, the next 0.6 ms), so opening stays
    /// O(1); `None` for segments small enough that searching their index
    /// costs no more.
    pub(super) fn key_filter(&self, build: bool) -> Option<&Bloom> {
        let recs = self.key_records();
        let n = recs.len() / 2;
        if n < KEY_FILTER_MIN {
            return None;
        }
        if !build {
            return self.key_filter.get();
        }
        Some(self.key_filter.get_or_init(|| {
            // One read of the whole index, not a miss per page (the index
            // is advised random at open).
            self.unrandom(self.key_index, true);
            let mut b = Bloom::new(n as u64, KEY_FILTER_FP);
            b.insert_distinct(recs.iter().step_by(2).copied());
            b
        }))
    }

    /// Whether a routed batch of sorted `keys` would build this segment's
    /// key filter ([`Segment::slots_of_sorted`]): none built yet, the
    /// segment large enough to get one, and a key inside its key range.
    pub fn wants_key_filter(&self, keys: &[u64]) -> bool {
        let recs = self.key_records();
        if recs.len() / 2 < KEY_FILTER_MIN || self.key_filter.get().is_some() {
            return false;
        }
        let (first, last) = self.key_ends(recs);
        let from = keys.partition_point(|&k| k < first);
        from < keys.len() && keys[from] <= last
    }

    /// Asks the kernel to read this segment's whole key index (the first
    /// step of building its key filter), so that several segments' reads
    /// go out together.
    pub fn hint_key_index(&self) {
        self.will_need(self.key_index);
    }

    /// Builds this segment's key filter now (see `key_filter`).
    pub fn build_key_filter(&self) {
        self.key_filter(true);
    }

    /// Before the first lookup in this segment's key index, asks the
    /// kernel to read its first and last records, where an interpolation
    /// search starts; true when it did, and [`Segment::hint_key_near`]
    /// should follow once every cold segment has been asked. A lookup
    /// that walks many cold segments hints them all first, so their reads
    /// go out together rather than one after another (103 segments: 347
    /// page reads in a row took 42 ms). A segment whose header records its
    /// key range reads nothing here: the second step needs no first.
    /// Done once per segment, and not once its index has been used: later
    /// calls cost an atomic load (a lookup that stops at a newer segment
    /// never uses the older ones).
    pub fn hint_key_ends(&self) -> bool {
        if self.key_warm.used()
            || self.key_hinted.load(Ordering::Relaxed)
            || self.key_hinted.swap(true, Ordering::Relaxed)
        {
            return false;
        }
        let n = self.key_index.1 / 16;
        if n == 0 {
            return false;
        }
        if self.info.key_range.is_some() {
            // The header holds them.
            return true;
        }
        for rec in [0, n - 1] {
            self.will_need((self.key_index.0 + rec * 16, 16));
        }
        true
    }

    /// The second step of [`Segment::hint_key_ends`]: with the ends read
    /// (the wait is for the first segment's; the others' reads were in
    /// flight beside it), asks for the records around the place
    /// interpolation gives `key`, `sqrt(n)` records either side. Keys
    /// spread evenly over any range (hashed ids, ISCC codes below 2^63,
    /// sequential ids) sit within about `sqrt(n) / 2` records of that
    /// place, so the search's first two probes find their pages read: a
    /// guess that assumed keys spread over all of u64 missed by half the
    /// index for keys below 2^63, and each segment then waited for two
    /// reads of its own.
    pub fn hint_key_near(&self, key: u64) {
        let recs = self.key_records();
        let n = recs.len() / 2;
        if n < 2 {
            return;
        }
        let (lo, hi) = self.key_ends(recs);
        if key <= lo || key > hi {
            return;
        }
        let pos = interpolate(0, n - 1, lo, hi, key);
        let w = n.isqrt() + 1;
        let (a, b) = (pos.saturating_sub(w), (pos + w + 1).min(n));
        self.will_need((self.key_index.0 + a * 16, (b - a) * 16));
    }

    /// The first and last keys of the (non-empty) key index `recs`: from
    /// the header where it records them, without reading the index.
    fn key_ends(&self, recs: &[u64]) -> (u64, u64) {
        self.info
            .key_range
            .unwrap_or_else(|| (recs[0], recs[recs.len() - 2]))
    }

    /// The live slots of many keys: `keys` must be sorted ascending;
    /// `found(i, slot)` is called for each `keys[i]` that is live here.
    /// With `route` (the keys are spread over several segments), keys the
    /// segment's key filter rules out are skipped. A dense batch (keys a
    /// few records apart) is searched key after key, each from the
    /// previous one's position (see [`lower_bound_from`]), reading the
    /// index in order once; a sparse one, whose every key lands on lines
    /// of its own, is searched interleaved (see [`lower_bounds`]) so its
    /// cache misses overlap.
    pub fn slots_of_sorted(&self, keys: &[u64], route: bool, mut found: impl FnMut(usize, u32)) {
        let recs = self.key_records();
        let n = recs.len() / 2;
        if n == 0 {
            return;
        }
        // Only the keys inside this segment's key range can be here (a
        // segment of a run of sequential ids sees just its own run, and
        // never needs its filter).
        let (first, last) = self.key_ends(recs);
        let from = keys.partition_point(|&k| k < first);
        let to = keys.partition_point(|&k| k <= last);
        if from >= to {
            return;
        }
        self.note_key_lookup();
        let filter = if route { self.key_filter(true) } else { None };
        let mut hit = |i: usize, at: usize| {
            if at < n && recs[2 * at] == keys[i] {
                let slot = (recs[2 * at + 1] & 0xFFFF_FFFF) as u32;
                if self.is_live(slot) {
                    found(i, slot);
                }
            }
        };
        if (to - from) * SPARSE_GAP < n {
            let asked: Vec<usize> = (from..to)
                .filter(|&i| filter.is_none_or(|f| f.may_contain(keys[i])))
                .collect();
            let wanted: Vec<u64> = asked.iter().map(|&i| keys[i]).collect();
            let mut at = Vec::new();
            lower_bounds(recs, &wanted, &mut at);
            for (&i, &a) in asked.iter().zip(&at) {
                hit(i, a);
            }
            return;
        }
        let mut lo = 0usize;
        for (i, &key) in keys.iter().enumerate().take(to).skip(from) {
            if filter.is_some_and(|f| !f.may_contain(key)) {
                continue;
            }
            lo = lower_bound_from(recs, lo, key);
            if lo >= n {
                break;
            }
            hit(i, lo);
        }
    }
}

/// Segments with fewer keys get no key filter: their whole key index
/// (64 KiB at this size) stays in cache and is searched as fast.
const KEY_FILTER_MIN: usize = 4096;

/// Batches whose keys are on average more than this many records apart
/// are searched interleaved (see [`Segment::slots_of_sorted`]).
const SPARSE_GAP: usize = 64;

/// False-positive rate of the segment key filters.
const KEY_FILTER_FP: f64 = 1.0 / 64.0;
