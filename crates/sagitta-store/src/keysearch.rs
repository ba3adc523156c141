//! Searches of a segment's sorted key index: `(key, slot)` records sorted
//! by key, memory-mapped. One key at a time from a known position
//! ([`lower_bound_from`], for dense sorted batches that read the index in
//! order), or many keys interleaved ([`lower_bounds`], for sparse batches:
//! each key's next read is prefetched while the others' are searched, so
//! a batch waits for memory about once per step instead of once per step
//! per key).

use sagitta_index::prefetch;

/// Interpolation steps a search takes before bisecting.
const INTERPOLATION_STEPS: usize = 4;

/// Keys searched side by side by [`lower_bounds`]: enough reads in
/// flight to hide a cache miss, few enough that their state stays in L1.
const GROUP: usize = 32;

/// Where `key` would sit between records `a` and `b` (`b > a`) holding
/// keys `ka < key <= kb`, were the keys between spread evenly: a record
/// in `[a, b]`. The first step of every search here, and where a cold
/// lookup hints its reads (`Segment::hint_key_near`).
pub(crate) fn interpolate(a: usize, b: usize, ka: u64, kb: u64, key: u64) -> usize {
    a + ((u128::from(key - ka) * (b - a) as u128) / u128::from(kb - ka)) as usize
}

/// The first record at or after `from` whose key is at least `key`
/// (`recs` holds (key, slot) pairs sorted by key; the record count when
/// every key from `from` on is smaller). A few interpolation steps first
/// (keys spread evenly, as sequential ids and hashed ones are, land within
/// a cache line or two of their record in two or three reads, where
/// bisecting a million records takes twenty, most of them cache misses),
/// then bisection of what is left, so skewed keys cost at most
/// `INTERPOLATION_STEPS` reads more than bisection alone.
pub(crate) fn lower_bound_from(recs: &[u64], from: usize, key: u64) -> usize {
    let n = recs.len() / 2;
    // The answer lies in [a, b]: keys before a are smaller, keys from b on
    // are not.
    let (mut a, mut b) = (from.min(n), n);
    for _ in 0..INTERPOLATION_STEPS {
        if b - a <= 16 {
            break;
        }
        let (ka, kb) = (recs[2 * a], recs[2 * (b - 1)]);
        if ka >= key {
            return a;
        }
        if kb < key {
            return b;
        }
        // ka < key <= kb, so kb > ka and the estimate lies in [a, b - 1].
        let pos = interpolate(a, b - 1, ka, kb, key);
        if recs[2 * pos] < key {
            a = pos + 1;
        } else {
            b = pos;
        }
    }
    while a < b {
        let mid = (a + b) / 2;
        if recs[2 * mid] < key {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    a
}

/// [`lower_bound_from`] from 0 where the first and last keys of `recs`
/// are known without reading them (`first <= last`, a segment header's
/// key range): a key outside them costs no read, and the first read is
/// the interpolated record itself, so a cold lookup reads one place of
/// the index (the one `Segment::hint_key_near` asked for) instead of its
/// two ends first.
pub(crate) fn lower_bound_ranged(recs: &[u64], key: u64, first: u64, last: u64) -> usize {
    let n = recs.len() / 2;
    if n == 0 || key <= first {
        return 0;
    }
    if key > last {
        return n;
    }
    // recs[lo] = klo < key <= khi = recs[hi]: the answer lies in (lo, hi].
    let (mut lo, mut klo, mut hi, mut khi) = (0, first, n - 1, last);
    let mut steps = 0;
    while hi - lo > 1 {
        let span = hi - lo - 1;
        let off = if steps < INTERPOLATION_STEPS {
            // key - klo - 1 < khi - klo, so off < span.
            (u128::from(key - klo - 1) * span as u128 / u128::from(khi - klo)) as usize
        } else {
            span / 2
        };
        steps += 1;
        let at = lo + 1 + off;
        let k = recs[2 * at];
        if k < key {
            (lo, klo) = (at, k);
        } else {
            (hi, khi) = (at, k);
        }
    }
    hi
}

/// One key's search in [`lower_bounds`]: `recs[lo] < key <= recs[hi]`,
/// with both keys known, and the record read next.
#[derive(Clone, Copy, Default)]
struct Probe {
    /// Index of the key in the batch.
    at: usize,
    key: u64,
    lo: usize,
    klo: u64,
    hi: usize,
    khi: u64,
    next: usize,
    steps: usize,
}

impl Probe {
    /// Chooses the record to read next (strictly between `lo` and `hi`,
    /// which must be at least two apart): interpolated for the first
    /// steps, then the middle.
    #[inline]
    fn aim(&mut self) {
        let span = self.hi - self.lo - 1;
        let off = if self.steps < INTERPOLATION_STEPS {
            // key - klo - 1 < khi - klo, so the estimate is below span
            // (clamped against float rounding).
            let t = (self.key - self.klo - 1) as f64 / (self.khi - self.klo) as f64;
            ((t * span as f64) as usize).min(span - 1)
        } else {
            span / 2
        };
        self.next = self.lo + 1 + off;
        self.steps += 1;
    }
}

/// [`lower_bound_from`] from 0 of each of `keys` (any order), into `out`:
/// the searches of up to `GROUP` keys advance together, one read each per
/// round, every read prefetched a round ahead.
pub(crate) fn lower_bounds(recs: &[u64], keys: &[u64], out: &mut Vec<usize>) {
    let n = recs.len() / 2;
    out.clear();
    out.resize(keys.len(), 0);
    if n == 0 {
        return;
    }
    let (first, last) = (recs[0], recs[2 * (n - 1)]);
    let mut live = [Probe::default(); GROUP];
    for (g, group) in keys.chunks(GROUP).enumerate() {
        let mut m = 0;
        for (j, &key) in group.iter().enumerate() {
            let at = g * GROUP + j;
            if key <= first {
                out[at] = 0;
            } else if key > last {
                out[at] = n;
            } else if n == 2 {
                out[at] = 1; // first < key <= last
            } else {
                let mut p = Probe {
                    at,
                    key,
                    lo: 0,
                    klo: first,
                    hi: n - 1,
                    khi: last,
                    next: 0,
                    steps: 0,
                };
                p.aim();
                prefetch(recs[2 * p.next..].as_ptr().cast());
                live[m] = p;
                m += 1;
            }
        }
        while m > 0 {
            let mut kept = 0;
            for i in 0..m {
                let mut p = live[i];
                let k = recs[2 * p.next];
                if k < p.key {
                    (p.lo, p.klo) = (p.next, k);
                } else {
                    (p.hi, p.khi) = (p.next, k);
                }
                if p.hi - p.lo == 1 || p.khi == p.key && recs[2 * (p.hi - 1)] < p.key {
                    out[p.at] = p.hi;
                    continue;
                }
                p.aim();
                prefetch(recs[2 * p.next..].as_ptr().cast());
                live[kept] = p;
                kept += 1;
            }
            m = kept;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{lower_bound_from, lower_bound_ranged, lower_bounds};
    use proptest::prelude::*;

    /// (key, slot) records of `keys`, sorted by key.
    fn records(mut keys: Vec<u64>) -> Vec<u64> {
        keys.sort_unstable();
        keys.iter()
            .enumerate()
            .flat_map(|(i, &k)| [k, i as u64])
            .collect()
    }

    proptest! {
        #[test]
        fn lower_bound_searches_equal_partition_point(
            keys in prop::collection::vec(any::<u64>(), 0..300),
            // Skewed keys too: clustered small values with a few huge ones.
            small in prop::collection::vec(0u64..50, 0..300),
            probes in prop::collection::vec(any::<u64>(), 1..20),
            from in 0usize..400,
        ) {
            for keys in [keys.clone(), small.clone(), [small, keys].concat()] {
                let recs = records(keys);
                let n = recs.len() / 2;
                let sorted: Vec<u64> = recs.iter().step_by(2).copied().collect();
                let mut asks = probes.clone();
                asks.extend(sorted.iter().copied());
                asks.extend(sorted.iter().map(|k| k.wrapping_add(1)));
                for &key in &asks {
                    let from = from.min(n);
                    let want = from + sorted[from..].partition_point(|&k| k < key);
                    prop_assert_eq!(lower_bound_from(&recs, from, key), want, "key {}", key);
                    if n > 0 {
                        let (first, last) = (sorted[0], sorted[n - 1]);
                        let want = sorted.partition_point(|&k| k < key);
                        prop_assert_eq!(lower_bound_ranged(&recs, key, first, last), want, "key {}", key);
                    }
                }
                // The interleaved search of every ask at once, in the
                // order given (duplicates and all).
                let mut got = Vec::new();
                lower_bounds(&recs, &asks, &mut got);
                for (&key, &at) in asks.iter().zip(&got) {
                    prop_assert_eq!(at, sorted.partition_point(|&k| k < key), "key {}", key);
                }
            }
        }
    }

    #[test]
    fn lower_bound_from_finds_sequential_and_strided_keys() {
        for stride in [1u64, 7, 1 << 40] {
            let keys: Vec<u64> = (0..100_000u64).map(|i| i * stride).collect();
            let recs = records(keys.clone());
            for (i, &k) in keys.iter().enumerate().step_by(997) {
                assert_eq!(lower_bound_from(&recs, 0, k), i);
                assert_eq!(lower_bound_from(&recs, i, k), i);
                assert_eq!(lower_bound_from(&recs, 0, k + 1), i + 1);
            }
            assert_eq!(lower_bound_from(&recs, 0, u64::MAX), keys.len());
            let (first, last) = (keys[0], keys[keys.len() - 1]);
            for (i, &k) in keys.iter().enumerate().step_by(997) {
                assert_eq!(lower_bound_ranged(&recs, k, first, last), i);
                assert_eq!(lower_bound_ranged(&recs, k + 1, first, last), i + 1);
            }
            assert_eq!(lower_bound_ranged(&recs, u64::MAX, first, last), keys.len());
            let asks: Vec<u64> = keys.iter().step_by(997).flat_map(|&k| [k, k + 1]).collect();
            let mut got = Vec::new();
            lower_bounds(&recs, &asks, &mut got);
            for (j, &at) in got.iter().enumerate() {
                let i = (j / 2) * 997;
                assert_eq!(at, i + j % 2, "stride {stride} ask {j}");
            }
        }
    }
}
