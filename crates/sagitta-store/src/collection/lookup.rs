//! Lookups by key: `contains`, stored vectors and payload rows, one key or
//! a batch. A batch is routed in one pass per part instead of one probe
//! of every part per key: the bloom filter drops absent keys, the mutable
//! part answers from its hash map, and the rest, sorted once, are joined
//! against each sealed segment's sorted key index (newest part first,
//! each key leaving the batch once found; with several parts, a key that
//! a segment's in-memory key filter rules out is not searched there), so
//! the cost of a present key barely grows with the number of segments it
//! is not in. Keys are located while no write becomes visible (each
//! write seen whole or not at all, as by a search); the rows are then
//! read by slot, and a slot's row never changes.

use super::{Collection, State};
use crate::bloom::Bloom;
use crate::error::Result;
use crate::payload::{Row, Value};
use crate::segment::Segment;
use rayon::prelude::*;
use sagitta_index::{GraphView, IndexRead};

/// Where a live key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loc {
    /// Not live.
    Missing,
    /// In the mutable part at `slot`.
    Active { slot: u32 },
    /// In `parts[part]` at `slot`.
    Part { part: usize, slot: u32 },
}

/// Batches at least this long are sorted and joined against the parts;
/// shorter ones probe each part per key (a sort is not worth it).
const JOIN_MIN: usize = 16;

/// How many keys ahead of its test a key's bloom filter blocks are
/// hinted (enough to overlap the misses of a filter larger than cache).
const BLOOM_AHEAD: usize = 16;

impl State {
    /// Where each of `keys` is live.
    fn locate(&self, bloom: &Bloom, keys: &[u64]) -> Vec<Loc> {
        let mut out = vec![Loc::Missing; keys.len()];
        let mut pending: Vec<(u64, u32)> = Vec::new();
        // Filter blocks hinted a stretch ahead of their test.
        for &k in keys.iter().take(BLOOM_AHEAD) {
            bloom.prefetch(k);
        }
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + BLOOM_AHEAD) {
                bloom.prefetch(ahead);
            }
            if !bloom.may_contain(k) {
                continue;
            }
            if let Some(slot) = self.active.slot_of(k) {
                out[i] = Loc::Active { slot };
            } else if !self.parts.is_empty() {
                pending.push((k, i as u32));
            }
        }
        if pending.is_empty() {
            return out;
        }
        if pending.len() < JOIN_MIN {
            for &(k, i) in &pending {
                out[i as usize] = self.locate_one(k);
            }
            return out;
        }
        pending.sort_unstable();
        let mut sorted: Vec<u64> = pending.iter().map(|p| p.0).collect();
        // Keys spread over several parts are routed by each segment's key
        // filter; with one part every key is searched anyway.
        let route = self.parts.len() > 1;
        if route {
            self.build_key_filters(&sorted);
        }
        // Newest part first: a key replaced later is dead in older parts.
        for (pi, part) in self.parts.iter().enumerate().rev() {
            if pending.is_empty() {
                break;
            }
            let dead = part.dead();
            let mut hit = vec![false; pending.len()];
            let mut mark = |j: usize, slot: u32| {
                let (k, i) = pending[j];
                if !dead.keys.contains(&k) {
                    out[i as usize] = Loc::Part { part: pi, slot };
                    hit[j] = true;
                }
            };
            match part.segment() {
                Some(seg) => seg.slots_of_sorted(&sorted, route, &mut mark),
                None => {
                    let read = part.read();
                    for (j, &k) in sorted.iter().enumerate() {
                        if let Some(slot) = read.slot_of(k) {
                            mark(j, slot);
                        }
                    }
                }
            }
            if hit.iter().any(|&h| h) {
                let mut j = 0;
                pending.retain(|_| {
                    j += 1;
                    !hit[j - 1]
                });
                sorted = pending.iter().map(|p| p.0).collect();
            }
        }
        out
    }

    /// For each of `keys`, the index in `parts` of the immutable part
    /// where it is live (`None`: missing, or in the mutable part).
    pub(super) fn holders(&self, bloom: &Bloom, keys: &[u64]) -> Vec<Option<usize>> {
        (self.locate(bloom, keys).into_iter())
            .map(|l| match l {
                Loc::Part { part, .. } => Some(part),
                _ => None,
            })
            .collect()
    }

    /// Builds the key filters a routed batch of sorted `keys` is about to
    /// use, all at once: every cold key index asked for together and the
    /// filters built on the pool's threads, instead of one segment after
    /// another inside the walk, each waiting for its own reads (the first
    /// batch of 10,000 hashed keys after a cold open of 20M codes in 10
    /// segments: 550 ms of CPU in 1,565 ms).
    fn build_key_filters(&self, keys: &[u64]) {
        let cold: Vec<&Segment> = (self.parts.iter())
            .filter_map(|p| p.segment())
            .filter(|s| s.wants_key_filter(keys))
            .collect();
        if cold.len() < 2 {
            return;
        }
        for s in &cold {
            s.hint_key_index();
        }
        cold.par_iter().for_each(|s| s.build_key_filter());
    }

    /// [`State::locate`] of one key that is not in the mutable part.
    fn locate_one(&self, key: u64) -> Loc {
        self.prefetch_cold_key(key);
        for (pi, part) in self.parts.iter().enumerate().rev() {
            if let Some(slot) = part.read().slot_of(key) {
                if !part.dead().keys.contains(&key) {
                    return Loc::Part { part: pi, slot };
                }
            }
        }
        Loc::Missing
    }
}

impl Collection {
    /// Whether `key` is live: bloom filter, then the mutable part, then
    /// the immutable parts.
    pub fn contains(&self, key: u64) -> bool {
        if !self.inner.bloom.read().may_contain(key) {
            return false;
        }
        let (_g, st) = self.inner.visible_state();
        st.active.contains(key) || st.holder(key).is_some()
    }

    /// [`Collection::contains`] of each key, routed in one pass per part.
    pub fn contains_many(&self, keys: &[u64]) -> Vec<bool> {
        let (_g, st) = self.inner.visible_state();
        let locs = st.locate(&self.inner.bloom.read(), keys);
        locs.into_iter().map(|l| l != Loc::Missing).collect()
    }

    /// The stored bytes of `key`'s vector, in the collection's space
    /// (`config().space`; built segments with graph codes give their
    /// full-precision row).
    pub fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        if !self.inner.bloom.read().may_contain(key) {
            return None;
        }
        let (_g, st) = self.inner.visible_state();
        let vb = self.inner.config.space.vector_bytes();
        st.active
            .get_raw(key)
            .or_else(|| st.holder(key).and_then(|p| p.row_of(key, vb)))
    }

    /// [`Collection::get_raw`] of each key, routed in one pass per part.
    pub fn get_raw_many(&self, keys: &[u64]) -> Vec<Option<Vec<u8>>> {
        let (g, st) = self.inner.visible_state();
        let vb = self.inner.config.space.vector_bytes();
        let locs = st.locate(&self.inner.bloom.read(), keys);
        drop(g);
        // Every row hinted before any is copied: their cache misses overlap.
        for loc in &locs {
            if let Loc::Part { part, slot } = *loc {
                st.parts[part].with_view(|g| {
                    let r = g.full(slot).unwrap_or_else(|| g.vector(slot));
                    sagitta_index::prefetch(r.as_ptr());
                });
            }
        }
        locs.into_iter()
            .map(|loc| match loc {
                Loc::Missing => None,
                Loc::Active { slot } => Some(st.active.view().vector(slot)[..vb].to_vec()),
                Loc::Part { part, slot } => {
                    let row = |g: &dyn GraphView| {
                        let r = g.full(slot).unwrap_or_else(|| g.vector(slot));
                        r[..vb.min(r.len())].to_vec()
                    };
                    Some(st.parts[part].with_view(row))
                }
            })
            .collect()
    }

    /// The payload rows of `keys` (laid out by [`Collection::schema`]);
    /// `None` for a key that is not live, an empty row for a key without
    /// payload.
    pub fn payload_rows(&self, keys: &[u64]) -> Result<Vec<Option<Row>>> {
        let c = &*self.inner;
        let (g, st) = c.visible_state();
        let schema = c.schema.read().clone();
        let locs = st.locate(&c.bloom.read(), keys);
        drop(g);
        // Every row's first read hinted before any is decoded: their cache
        // misses overlap.
        for loc in &locs {
            if let Loc::Part { part, slot } = *loc {
                st.parts[part].prefetch_payload(slot);
            }
        }
        locs.into_iter()
            .map(|loc| match loc {
                Loc::Missing => Ok(None),
                Loc::Active { slot } => Ok(Some(st.rows.get(slot).unwrap_or_default())),
                Loc::Part { part, slot } => st.parts[part].payload_row(&schema, slot).map(Some),
            })
            .collect()
    }

    /// Column `col` of the collection's payload schema (field `name`) for
    /// each of `keys`: what [`Collection::payload_rows`] gives at that
    /// column, without decoding the rest of each row (`None` for a key
    /// that is not live, null for a row without the field).
    pub(crate) fn payload_values(
        &self,
        keys: &[u64],
        name: &str,
        col: usize,
    ) -> Result<Vec<Option<Value>>> {
        let c = &*self.inner;
        let (g, st) = c.visible_state();
        let locs = st.locate(&c.bloom.read(), keys);
        drop(g);
        // Each part's reader made once; every value hinted before any is
        // read, so their cache misses overlap.
        let mut fields: Vec<Option<super::part::FieldIn>> = vec![None; st.parts.len()];
        for loc in &locs {
            if let Loc::Part { part, slot } = *loc {
                if fields[part].is_none() {
                    fields[part] = Some(st.parts[part].field(name, col)?);
                }
                if let Some(f) = &fields[part] {
                    f.prefetch(slot);
                }
            }
        }
        Ok(locs
            .into_iter()
            .map(|loc| match loc {
                Loc::Missing => None,
                Loc::Active { slot } => Some(st.rows.value(slot, col)),
                Loc::Part { part, slot } => fields[part].as_ref().map(|f| f.value(slot)),
            })
            .collect())
    }
}
