//! Reads: kNN search over every part (parallel over parts for one query,
//! over queries for a batch) merged by (distance, key); filters turned
//! into per-part bitmaps; counts, key scans, payload tables and lazy
//! iteration (lookups by key are in `lookup.rs`).

use super::part::{Body, Dead, Part};
use super::write::row_err;
use super::{Collection, Inner, State};
use crate::error::{Result, StoreError};
use crate::filter::Bound;
use crate::payload::{self, Field, Schema, Value};
use crate::request::{Answer, CollectionSearch, Query};
use rayon::prelude::*;
use sagitta_index::{Bitset, GraphView, IndexError, IndexRead, Neighbor, SearchOptions, VectorRef};
use std::collections::HashSet;
use std::sync::Arc;

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

    /// Runs a [`Query`]: checked ([`Query::check`]), then a dense search
    /// ([`Answer::Dense`]) or a text / hybrid one ([`Answer::Fused`], both
    /// legs on one snapshot). The one entry every front end calls.
    pub fn query(&self, q: &Query<'_>) -> Result<Answer> {
        q.check()?;
        if q.text.is_some() {
            return self.fused(q).map(Answer::Fused);
        }
        self.search(&q.vectors, q.k, &q.opts).map(Answer::Dense)
    }

    /// The k nearest live vectors to each query, over every part (in
    /// parallel), merged by distance with ties broken by key.
    pub fn search(
        &self,
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // Write and build threads give way while this search runs (and
        // for a moment after it).
        let _running = sagitta_index::sched::foreground::search();
        let st = self.inner.snapshot();
        let k = crate::limits::check_k(k, st.live())?;
        crate::limits::check_knobs(opts.ef, opts.nprobe, opts.refine)?;
        if k == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let segs = self.inner.segments(&st, opts.filter, opts.predicate)?;
        self.dense_in(&segs, queries, k, opts)
    }

    /// A dense search of the parts `segs` of one snapshot for the `k`
    /// (checked, at least 1) nearest of each query.
    pub(super) fn dense_in(
        &self,
        segs: &[Seg<'_>],
        queries: &[VectorRef<'_>],
        k: usize,
        opts: &CollectionSearch<'_>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // Parts with nothing to return are dropped up front, so a query
        // only fans out over threads when two or more parts can answer.
        let segs: Vec<&Seg<'_>> = segs
            .iter()
            .filter(|s| s.live > 0 && s.allowed != Some(0))
            .collect();
        let per_seg = |s: &Seg<'_>, q: VectorRef<'_>| -> Result<Vec<Neighbor>> {
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
                return Ok(s.seg.search(q, kk, &SearchOptions { exact: true, ..o })?);
            }
            Ok(found)
        };
        let finish = |mut all: Vec<Neighbor>, merged: bool| -> Vec<Neighbor> {
            if merged {
                all.sort_unstable_by(|a, b| {
                    a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key))
                });
                dedup_keys(&mut all, k);
            }
            if let Some(r) = opts.radius {
                all.retain(|n| n.distance <= r);
            }
            all.truncate(k);
            all
        };
        let at_row = |i: usize, e: StoreError| match e {
            StoreError::Index(
                e @ (IndexError::Dimensions { .. }
                | IndexError::NotFinite { .. }
                | IndexError::WrongInputKind { .. }
                | IndexError::Kernel(_)),
            ) => row_err(i, e),
            e => e,
        };
        if queries.len() == 1 {
            let q = queries[0];
            let all: Vec<Neighbor> = match segs.len() {
                0 => Vec::new(),
                1 => per_seg(segs[0], q)?,
                _ => {
                    let parts: Vec<Vec<Neighbor>> = segs
                        .par_iter()
                        .map(|s| per_seg(s, q))
                        .collect::<Result<_>>()?;
                    parts.into_iter().flatten().collect()
                }
            };
            return Ok(vec![finish(all, segs.len() > 1)]);
        }
        if segs.len() <= 1 {
            return queries
                .par_iter()
                .enumerate()
                .map(|(i, &q)| match segs.first() {
                    None => Ok(Vec::new()),
                    Some(s) => per_seg(s, q).map_err(|e| at_row(i, e)),
                })
                .collect();
        }
        self.search_segment_major(queries, &segs, &per_seg, &finish, &at_row)
    }

    /// A batch over several parts, segment by segment: each task searches
    /// one part for a run of queries, so that part's graph and codes stay
    /// in cache across the run; tasks run in parallel (over parts and
    /// runs), then each query's hits are merged.
    fn search_segment_major(
        &self,
        queries: &[VectorRef<'_>],
        segs: &[&Seg<'_>],
        per_seg: &(dyn Fn(&Seg<'_>, VectorRef<'_>) -> Result<Vec<Neighbor>> + Sync),
        finish: &(dyn Fn(Vec<Neighbor>, bool) -> Vec<Neighbor> + Sync),
        at_row: &(dyn Fn(usize, StoreError) -> StoreError + Sync),
    ) -> Result<Vec<Vec<Neighbor>>> {
        let nq = queries.len();
        // Runs long enough to reuse a part's cache lines, short enough to
        // give every thread work when there are few parts.
        let threads = rayon::current_num_threads().max(1);
        let per_part = (threads * 4).div_ceil(segs.len()).max(1);
        let run = nq.div_ceil(per_part).clamp(8, 256);
        let runs = nq.div_ceil(run);
        let tasks: Vec<(usize, usize)> = (0..segs.len())
            .flat_map(|s| (0..runs).map(move |r| (s, r)))
            .collect();
        let found: Vec<RunHits> = tasks
            .par_iter()
            .map(|&(s, r)| {
                let lo = r * run;
                let hi = (lo + run).min(nq);
                (lo..hi)
                    .map(|i| per_seg(segs[s], queries[i]).map_err(|e| (i, e)))
                    .collect()
            })
            .collect();
        let mut hits: Vec<Vec<Vec<Neighbor>>> = Vec::with_capacity(tasks.len());
        let mut first_err: Option<(usize, StoreError)> = None;
        for f in found {
            match f {
                Ok(h) => hits.push(h),
                Err((i, e)) => {
                    if first_err.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_err = Some((i, e));
                    }
                    hits.push(Vec::new());
                }
            }
        }
        if let Some((i, e)) = first_err {
            return Err(at_row(i, e));
        }
        // hits[s * runs + r][i - r * run] holds part s's hits for query i.
        Ok((0..nq)
            .into_par_iter()
            .map(|i| {
                let (r, j) = (i / run, i % run);
                let n: usize = (0..segs.len()).map(|s| hits[s * runs + r][j].len()).sum();
                let mut all = Vec::with_capacity(n);
                for s in 0..segs.len() {
                    all.extend_from_slice(&hits[s * runs + r][j]);
                }
                finish(all, true)
            })
            .collect())
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

/// One task's hits (per query of its run), or the first failing query.
type RunHits = std::result::Result<Vec<Vec<Neighbor>>, (usize, StoreError)>;

/// Keeps the first (nearest) hit of each key among the sorted `all`,
/// stopping at `k` kept; short lists are checked in place, without a set.
fn dedup_keys(all: &mut Vec<Neighbor>, k: usize) {
    if all.len() <= 64 {
        let mut kept = 0;
        for i in 0..all.len() {
            if kept == k {
                break;
            }
            let n = all[i];
            if !all[..kept].iter().any(|m| m.key == n.key) {
                all[kept] = n;
                kept += 1;
            }
        }
        all.truncate(kept);
    } else {
        let mut seen = HashSet::with_capacity(k * 2);
        all.retain(|n| seen.insert(n.key));
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
