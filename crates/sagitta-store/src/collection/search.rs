//! Reads: kNN search over every part (parallel over parts for one query,
//! over queries for a batch) merged by (distance, key); filters turned
//! into per-part bitmaps; counts, key scans, lookups, payload rows and
//! lazy iteration.

use super::part::{Body, Dead, Part};
use super::write::row_err;
use super::{Collection, Inner, State};
use crate::error::{Result, StoreError};
use crate::filter::Bound;
use crate::payload::{self, Field, Row, Schema, Value};
use rayon::prelude::*;
use sagitta_index::{Bitset, GraphView, IndexError, IndexRead, Neighbor, SearchOptions, VectorRef};
use std::collections::HashSet;
use std::sync::Arc;

/// Per-search options of a collection.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectionSearch<'a> {
    /// Beam width override (HNSW).
    pub ef: Option<usize>,
    /// Exact scan of every segment.
    pub exact: bool,
    /// Only these keys may be returned.
    pub filter: Option<&'a [u64]>,
    /// Only matches at most this far away.
    pub radius: Option<f32>,
    /// Only vectors whose payload passes this (bound) filter.
    pub predicate: Option<&'a Bound>,
    /// Partitions probed per IVF segment.
    pub nprobe: Option<usize>,
    /// Rerank depth per IVF segment.
    pub refine: Option<usize>,
}

/// One part as a search sees it.
pub(super) struct Seg<'a> {
    pub seg: &'a dyn IndexRead,
    /// The immutable part (None for the mutable one).
    pub part: Option<&'a Part>,
    pub live: usize,
    pub dead: Option<Arc<Dead>>,
    /// The caller's key filter and payload predicate, intersected with the
    /// dead bitmap.
    pub combined: Option<Bitset>,
    /// Slots set in `combined`.
    pub allowed: Option<usize>,
}

impl Seg<'_> {
    fn filter(&self) -> Option<&Bitset> {
        self.combined
            .as_ref()
            .or_else(|| self.dead.as_ref().and_then(|d| d.allowed.as_ref()))
    }

    /// Keys of the slots set in `combined` (live ones).
    fn allowed_keys(&self, out: &mut Vec<u64>) {
        let Some(c) = &self.combined else {
            return;
        };
        match self.part.map(|p| &p.body) {
            Some(Body::Sealed { seg, .. }) => out.extend(
                c.iter()
                    .filter(|&s| seg.is_live(s as u32))
                    .map(|s| seg.key(s as u32)),
            ),
            Some(Body::Frozen { index, .. }) => {
                let v = index.view();
                out.extend(
                    c.iter()
                        .filter(|&s| v.is_live(s as u32))
                        .map(|s| v.key(s as u32)),
                )
            }
            None => {}
        }
    }
}

impl Inner {
    /// Every part of `st` with the slots a search or count may return:
    /// the caller's keys, the payload predicate and the dead set, ANDed.
    pub(super) fn segments<'s>(
        &self,
        st: &'s State,
        keys: Option<&[u64]>,
        pred: Option<&Bound>,
    ) -> Result<Vec<Seg<'s>>> {
        let mut out = Vec::with_capacity(st.parts.len() + 1);
        // The mutable part: rows are evaluated in place.
        {
            let active = &*st.active;
            let mut combined = keys.map(|k| active.filter_for_keys(k));
            if let Some(b) = pred {
                let live = active.view().live_slots();
                let f = st.rows.matching(b, live.len()).and(&live);
                combined = Some(match combined {
                    None => f,
                    Some(c) => c.and(&f),
                });
            }
            out.push(Seg {
                seg: active,
                part: None,
                live: active.len(),
                dead: None,
                allowed: combined.as_ref().map(Bitset::count),
                combined,
            });
        }
        for s in &st.parts {
            let dead = s.dead();
            let read = s.read();
            let mut combined: Option<Bitset> = keys.map(|k| read.filter_for_keys(k));
            if let Some(b) = pred {
                let f: Option<Arc<Bitset>> = match &s.body {
                    Body::Frozen { index, rows, .. } => {
                        let live = index.view().live_slots();
                        Some(Arc::new(rows.matching(b, live.len()).and(&live)))
                    }
                    Body::Sealed { seg, .. } => match seg.payload()? {
                        Some(p) => {
                            Some(p.eval_cached(b, || seg.live_slots()).map_err(|reason| {
                                StoreError::Corrupt {
                                    file: seg.path().to_path_buf(),
                                    offset: 0,
                                    reason,
                                }
                            })?)
                        }
                        // No payload in this segment: every row is null, so
                        // the predicate is the same for all of them.
                        None if b.matches(&[]) => None,
                        None => Some(Arc::new(Bitset::new(seg.slot_count()))),
                    },
                };
                if let Some(f) = f {
                    combined = Some(match combined {
                        None => (*f).clone(),
                        Some(c) => c.and(&f),
                    });
                }
            }
            if let (Some(c), Some(a)) = (combined.as_mut(), dead.allowed.as_ref()) {
                *c = c.and(a);
            }
            out.push(Seg {
                seg: read,
                part: Some(s),
                live: s.live_len(),
                allowed: combined.as_ref().map(Bitset::count),
                combined,
                dead: Some(dead),
            });
        }
        Ok(out)
    }
}

impl Collection {
    /// Live vectors whose payload passes `pred` (all live vectors for
    /// `None`).
    pub fn count(&self, pred: Option<&Bound>) -> Result<usize> {
        let st = self.inner.snapshot();
        let segs = self.inner.segments(&st, None, pred)?;
        Ok(segs.iter().map(|s| s.allowed.unwrap_or(s.live)).sum())
    }

    /// Keys of the live vectors whose payload passes `pred`, part by part
    /// (the mutable part first).
    pub fn keys_where(&self, pred: Option<&Bound>) -> Result<Vec<u64>> {
        let Some(pred) = pred else {
            return Ok(self.keys().collect());
        };
        let st = self.inner.snapshot();
        let segs = self.inner.segments(&st, None, Some(pred))?;
        let mut out = Vec::new();
        if let Some(c) = &segs[0].combined {
            let view = st.active.view();
            out.extend(c.iter().map(|slot| view.key(slot as u32)));
        }
        for s in &segs[1..] {
            s.allowed_keys(&mut out);
        }
        Ok(out)
    }

    /// The payload rows of `keys` (laid out by [`Collection::schema`]);
    /// `None` for a key that is not live, an empty row for a key without
    /// payload.
    pub fn payload_rows(&self, keys: &[u64]) -> Result<Vec<Option<Row>>> {
        let c = &*self.inner;
        let st = c.snapshot();
        let schema = c.schema.read().clone();
        let bloom = c.bloom.read();
        let mut out = Vec::with_capacity(keys.len());
        for &k in keys {
            if !bloom.may_contain(k) {
                out.push(None);
                continue;
            }
            if let Some(slot) = st.active.slot_of(k) {
                out.push(Some(st.rows.get(slot).unwrap_or_default()));
                continue;
            }
            match st.holder(k) {
                None => out.push(None),
                Some(s) => match s.read().slot_of(k) {
                    Some(slot) => out.push(Some(s.payload_row(&schema, slot)?)),
                    None => out.push(Some(Row::default())),
                },
            }
        }
        Ok(out)
    }

    /// The payload of `keys` as an Arrow record batch, one row per key
    /// (all null where a key is missing), restricted to `columns` when
    /// given (an unknown column is [`crate::PayloadError::UnknownField`]).
    pub fn payload_table(
        &self,
        keys: &[u64],
        columns: Option<&[String]>,
    ) -> Result<arrow_array::RecordBatch> {
        let schema = self.inner.schema.read().clone();
        let rows = self.payload_rows(keys)?;
        let (out_schema, picks): (Schema, Vec<usize>) = match columns {
            None => (schema.clone(), (0..schema.len()).collect()),
            Some(cols) => {
                let mut picks = Vec::with_capacity(cols.len());
                let mut fields = Vec::with_capacity(cols.len());
                for c in cols {
                    let (i, ty) = schema.field(c)?;
                    picks.push(i);
                    fields.push(Field {
                        name: c.clone(),
                        ty,
                    });
                }
                (Schema::new(fields)?, picks)
            }
        };
        let picked: Vec<Option<Vec<Value>>> = rows
            .into_iter()
            .map(|r| {
                r.map(|r| {
                    picks
                        .iter()
                        .map(|&i| r.get(i).cloned().unwrap_or(Value::Null))
                        .collect()
                })
            })
            .collect();
        Ok(payload::to_record_batch(
            &out_schema,
            picked.iter().map(|r| r.as_deref()),
        )?)
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        self.inner.snapshot().live()
    }

    /// Whether no vector is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is live: bloom filter, then the mutable part, then
    /// the immutable parts.
    pub fn contains(&self, key: u64) -> bool {
        if !self.inner.bloom.read().may_contain(key) {
            return false;
        }
        let st = self.inner.snapshot();
        st.active.contains(key) || st.holder(key).is_some()
    }

    /// The stored bytes of `key`'s vector, in the collection's space
    /// (`config().space`; built segments with graph codes give their
    /// full-precision row).
    pub fn get_raw(&self, key: u64) -> Option<Vec<u8>> {
        if !self.inner.bloom.read().may_contain(key) {
            return None;
        }
        let st = self.inner.snapshot();
        let vb = self.inner.config.space.vector_bytes();
        st.active
            .get_raw(key)
            .or_else(|| st.holder(key).and_then(|p| p.row_of(key, vb)))
    }

    /// The k nearest live vectors to each query, over every part (in
    /// parallel), merged by distance with ties broken by key.
    pub fn search(
        &self,
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        let st = self.inner.snapshot();
        let k = crate::limits::check_k(k, st.live())?;
        crate::limits::check_knobs(opts.ef, opts.nprobe, opts.refine)?;
        if k == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        // Parts with nothing to return are dropped up front, so a query
        // only fans out over threads when two or more parts can answer.
        let segs: Vec<Seg<'_>> = self
            .inner
            .segments(&st, opts.filter, opts.predicate)?
            .into_iter()
            .filter(|s| s.live > 0 && s.allowed != Some(0))
            .collect();
        let one = |q: VectorRef<'_>, parallel: bool| -> Result<Vec<Neighbor>> {
            let per_seg = |s: &Seg<'_>| {
                let kk = k
                    .min(s.live)
                    .min(s.seg.len())
                    .min(s.allowed.unwrap_or(usize::MAX));
                if kk == 0 {
                    return Ok(Vec::new());
                }
                let o = SearchOptions {
                    ef: opts.ef,
                    filter: s.filter(),
                    exact: opts.exact,
                    nprobe: opts.nprobe,
                    refine: opts.refine,
                };
                let found = s.seg.search(q, kk, &o)?;
                if found.len() < kk && !opts.exact && s.combined.is_some() {
                    // A filtered walk (or probe) that came back short while
                    // enough vectors match: scan the allowed slots exactly,
                    // so a search never returns fewer than k matches when
                    // k exist.
                    return s.seg.search(q, kk, &SearchOptions { exact: true, ..o });
                }
                Ok(found)
            };
            let mut all: Vec<Neighbor> = if segs.len() == 1 {
                per_seg(&segs[0])?
            } else if parallel {
                let parts: Vec<Vec<Neighbor>> = segs
                    .par_iter()
                    .map(per_seg)
                    .collect::<Result<_, IndexError>>()?;
                parts.into_iter().flatten().collect()
            } else {
                let mut all = Vec::with_capacity(k * segs.len());
                for s in &segs {
                    all.extend(per_seg(s)?);
                }
                all
            };
            if segs.len() > 1 {
                all.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
                let mut seen = HashSet::with_capacity(k * 2);
                all.retain(|n| seen.insert(n.key));
            }
            if let Some(r) = opts.radius {
                all.retain(|n| n.distance <= r);
            }
            all.truncate(k);
            Ok(all)
        };
        if queries.len() == 1 {
            Ok(vec![one(queries[0], segs.len() > 1)?])
        } else {
            queries
                .par_iter()
                .enumerate()
                .map(|(i, q)| {
                    one(*q, false).map_err(|e| match e {
                        StoreError::Index(
                            e @ (IndexError::Dimensions { .. }
                            | IndexError::NotFinite { .. }
                            | IndexError::WrongInputKind { .. }
                            | IndexError::Kernel(_)),
                        ) => row_err(i, e),
                        e => e,
                    })
                })
                .collect()
        }
    }

    /// Every live key, part by part, without loading the vectors.
    pub fn keys(&self) -> impl Iterator<Item = u64> + Send + 'static {
        self.items_inner(false).map(|(k, _)| k)
    }

    /// Every live (key, stored vector bytes), read lazily part by part.
    pub fn items(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        self.items_inner(true)
    }

    fn items_inner(&self, vectors: bool) -> impl Iterator<Item = (u64, Vec<u8>)> + Send + 'static {
        let st = self.inner.snapshot();
        let vb = if vectors {
            self.inner.config.space.vector_bytes()
        } else {
            0
        };
        let active = st.active.clone();
        let active_slots = active.slot_count() as u32;
        let active_iter = (0..active_slots).filter_map(move |slot| {
            let view = active.view();
            if !view.is_live(slot) {
                return None;
            }
            Some((view.key(slot), view.vector(slot)[..vb].to_vec()))
        });
        let parts = st.parts.clone();
        let parts_iter = parts.into_iter().flat_map(move |p| PartIter {
            part: p,
            next: 0,
            buf: Vec::new(),
            vb,
        });
        active_iter.chain(parts_iter)
    }
}

/// Lazy live rows of one part, read a block at a time.
struct PartIter {
    part: Arc<Part>,
    next: u32,
    buf: Vec<(u32, u64, Vec<u8>)>,
    vb: usize,
}

impl Iterator for PartIter {
    type Item = (u64, Vec<u8>);

    fn next(&mut self) -> Option<(u64, Vec<u8>)> {
        loop {
            if let Some((_, k, v)) = self.buf.pop() {
                return Some((k, v));
            }
            if self.next as usize >= self.part.slot_count() {
                return None;
            }
            let mut block = self.part.live_keys_from(self.next, 1024, self.vb);
            self.next = block
                .last()
                .map_or(self.part.slot_count() as u32, |b| b.0 + 1);
            block.reverse();
            self.buf = block;
        }
    }
}
