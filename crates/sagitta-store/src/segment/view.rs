//! A segment as the index layer reads it: the [`GraphView`] over the
//! mapped vectors, keys, tombstones and graph (every read bounds checked,
//! so a corrupt section gives wrong answers, never a panic), and
//! [`IndexRead`]: key lookups and the search dispatch (the planner's
//! choice run over the graph or the scan, or the IVF lists).

use super::ivf::SegIvfView;
use super::{words, Segment};
use crate::keysearch::{lower_bound_from, lower_bound_ranged};
use sagitta_index::ivf::{self, IvfQuery};
use sagitta_index::search;
use sagitta_index::{
    GraphView, IndexError, IndexRead, Neighbor, Plan, SearchOptions, Space, Target, VectorRef,
};
use std::sync::atomic::Ordering;

impl GraphView for Segment {
    fn slots(&self) -> usize {
        self.info.slots as usize
    }

    #[inline]
    fn vector(&self, slot: u32) -> &[u8] {
        let at = self.vectors.0 + slot as usize * self.stride;
        // Slots reaching here are < slot_count (neighbour ids are filtered,
        // the entry is checked at open), so this is in bounds; the fallback
        // to slot 0 keeps a logic error from becoming a panic.
        self.map
            .get(at..at + self.stride)
            .unwrap_or_else(|| &self.map[self.vectors.0..self.vectors.0 + self.stride])
    }

    fn key(&self, slot: u32) -> u64 {
        words::<u64>(self.bytes(self.slot_keys))
            .get(slot as usize)
            .copied()
            .unwrap_or(u64::MAX)
    }

    #[inline]
    fn is_live(&self, slot: u32) -> bool {
        let s = slot as usize;
        s < self.info.slots as usize
            && words::<u64>(self.bytes(self.tombstones))
                .get(s / 64)
                .is_some_and(|w| w & (1 << (s % 64)) == 0)
    }

    /// The highest upper level whose (sorted) node list holds `slot`, by
    /// binary search from the top down; 0 when none does. Reads only
    /// bounds-checked ranges of the map.
    fn level(&self, slot: u32) -> usize {
        for (i, u) in self.upper.iter().enumerate().rev() {
            let nodes: &[u32] = words(self.bytes(u.nodes));
            if nodes.binary_search(&slot).is_ok() {
                return i + 1;
            }
        }
        0
    }

    fn entry_point(&self) -> Option<(u32, usize)> {
        self.info.entry.map(|e| (e, self.info.top_level as usize))
    }

    #[inline]
    fn full(&self, slot: u32) -> Option<&[u8]> {
        let (start, fstride) = self.full_at(slot)?;
        self.map.get(start..start + fstride)
    }

    /// Read with a positional read into `buf` (on Unix): see
    /// [`GraphView::full_row`]. A failed read (a file cut short under the
    /// store) leaves the slot its code distance, as a row-less slot has.
    #[cfg(unix)]
    fn full_row<'a>(&'a self, slot: u32, buf: &'a mut Vec<f32>) -> Option<&'a [u8]> {
        use std::os::unix::fs::FileExt;
        let (start, fstride) = self.full_at(slot)?;
        let file = self.rows_file.as_ref()?;
        buf.resize(fstride / 4, 0.0);
        // SAFETY: any bytes are a valid f32; the slice covers exactly the
        // buffer's `fstride / 4` floats, which outlive it (borrowed 'a).
        let bytes: &mut [u8] = unsafe {
            std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), fstride / 4 * 4)
        };
        file.read_exact_at(bytes, start as u64).ok()?;
        Some(bytes)
    }

    #[cfg(unix)]
    fn reads_full_rows(&self) -> bool {
        self.rows_file.is_some()
    }

    fn full_rows(&self) -> Option<(&[u8], usize)> {
        let (at, len) = self.full?;
        let fstride = len.checked_div(self.info.slots as usize)?;
        Some((self.map.get(at..at.checked_add(len)?)?, fstride))
    }

    fn rows(&self) -> Option<(&[u8], usize)> {
        let len = (self.info.slots as usize).checked_mul(self.stride)?;
        let rows = self
            .map
            .get(self.vectors.0..self.vectors.0.checked_add(len)?)?;
        Some((rows, self.stride))
    }

    #[inline]
    fn prefetch_links(&self, level: usize, slot: u32) {
        if level == 0 {
            let w = 1 + self.info.m0 as usize;
            let at = self.level0.0 + slot as usize * w * 4;
            if let Some(rec) = self.map.get(at..at + w * 4) {
                for line in rec.chunks(64) {
                    sagitta_index::prefetch(line.as_ptr());
                }
            }
        }
    }

    #[inline]
    fn neighbors(&self, level: usize, slot: u32, out: &mut Vec<u32>) {
        out.clear();
        let n = self.info.slots as u32;
        if level == 0 {
            let w = 1 + self.info.m0 as usize;
            let l0: &[u32] = words(self.bytes(self.level0));
            if let Some(rec) = l0.get(slot as usize * w..slot as usize * w + w) {
                let c = (rec[0] as usize).min(w - 1);
                out.extend(rec[1..=c].iter().copied().filter(|&x| x < n));
            }
            return;
        }
        let Some(u) = self.upper.get(level - 1) else {
            return;
        };
        let nodes: &[u32] = words(self.bytes(u.nodes));
        let offsets: &[u32] = words(self.bytes(u.offsets));
        let adj: &[u32] = words(self.bytes(u.adj));
        if let Ok(i) = nodes.binary_search(&slot) {
            let (a, b) = (
                offsets.get(i).copied().unwrap_or(0) as usize,
                offsets.get(i + 1).copied().unwrap_or(0) as usize,
            );
            if let Some(list) = adj.get(a..b) {
                out.extend(list.iter().copied().filter(|&x| x < n));
            }
        }
    }
}

impl IndexRead for Segment {
    fn space(&self) -> Space {
        self.info.space
    }

    fn len(&self) -> usize {
        self.info.live as usize
    }

    fn contains(&self, key: u64) -> bool {
        self.slot_of(key).is_some()
    }

    fn slot_of(&self, key: u64) -> Option<u32> {
        // A single key never builds the filter (a first lookup after open
        // stays instant), but uses one a batch built.
        if self.key_filter(false).is_some_and(|f| !f.may_contain(key)) {
            return None;
        }
        let recs = self.key_records();
        let at = match self.info.key_range {
            Some((lo, hi)) if key < lo || key > hi => return None,
            Some((lo, hi)) => {
                self.note_key_lookup();
                lower_bound_ranged(recs, key, lo, hi)
            }
            None => {
                self.note_key_lookup();
                lower_bound_from(recs, 0, key)
            }
        };
        if recs.get(2 * at) != Some(&key) {
            return None;
        }
        let slot = (recs[2 * at + 1] & 0xFFFF_FFFF) as u32;
        self.is_live(slot).then_some(slot)
    }

    fn slot_count(&self) -> usize {
        self.info.slots as usize
    }

    fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        let slot = self.slot_of(key)?;
        Some(self.vector(slot)[..self.info.space.vector_bytes()].to_vec())
    }

    /// The full-precision row where the segment carries them, else the
    /// stored codes decoded.
    fn get(&self, key: u64) -> Option<Vec<f32>> {
        let slot = self.slot_of(key)?;
        match GraphView::full(self, slot) {
            Some(row) => Some(
                row.chunks_exact(4)
                    .take(self.info.space.dims)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            None => self.info.space.decode_floats(self.vector(slot)),
        }
    }

    fn search(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
    ) -> Result<Vec<Neighbor>, IndexError> {
        sagitta_index::check_k(k, self.len())?;
        let target = Target {
            kind: self.info.kind,
            slots: self.info.slots as usize,
            m0: self.info.m0 as usize,
            ef_search: self.ef_search.load(Ordering::Relaxed),
            full_precision: self.full.is_some(),
            scan_bytes: self.full_rows().map_or(self.stride, |(_, fstride)| fstride),
            contiguous: true,
        };
        let plan = sagitta_index::plan::plan(&target, k, opts)?;
        let space = self.info.space;
        if let (Plan::Ivf, Some(ivf)) = (plan, &self.ivf) {
            let VectorRef::F32(x) = query else {
                return Err(IndexError::WrongInputKind {
                    expected: "float",
                    dtype: space.dtype,
                });
            };
            let iq = IvfQuery {
                k,
                nprobe: opts
                    .nprobe
                    .unwrap_or_else(|| ivf.nprobe.load(Ordering::Relaxed)),
                refine: opts.refine.unwrap_or_else(|| ivf.params.default_refine(k)),
                filter: opts.filter,
            };
            let view = SegIvfView { seg: self, ivf };
            return self.with_scratch(|s| {
                s.with_query(&space, query, |q, s| {
                    let scratch = s.ivf();
                    space.float_query(x, scratch.query_mut(space.dims));
                    let mut out = Vec::with_capacity(k);
                    ivf::search(&view, self, &self.dist, q, iq, scratch, &mut out);
                    out
                })
            });
        }
        self.with_scratch(|s| search::run(self, &space, &self.dist, query, k, plan, opts.filter, s))
    }
}

impl Segment {
    /// Where `slot`'s full-precision row starts in the file, and the rows'
    /// stride (`None` without such rows).
    fn full_at(&self, slot: u32) -> Option<(usize, usize)> {
        let (at, len) = self.full?;
        let fstride = len / (self.info.slots as usize).max(1);
        Some((
            at.checked_add((slot as usize).checked_mul(fstride)?)?,
            fstride,
        ))
    }
}
